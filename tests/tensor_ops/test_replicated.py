"""The replicated one-sample plan (tensor_ops.replicated): layouts, plaintexts and the quartic schedule against
naive numpy twins, then encrypted end to end at a small (insecure, test-only) ring."""
import functools
import json

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from crypto.context import CKKSContext
from crypto.errors import ContextMismatchError, ParameterError, ShapeError
from crypto.params import CKKSParameters
from tensor_ops.activations import fit_activation
from tensor_ops.inference import Client, OutputRangeError
from tensor_ops.model_plan import choose_parameters
from tensor_ops.nn import Activation, Linear, Sequential, Square
from tensor_ops.replicated import (ReplicatedClient, ReplicatedPlan, ReplicatedServer, bias_vector, evaluate_quartic,
                                   fast_parameters, layout_maps, plan_stages, quartic_form, replicated_plan,
                                   stage_vectors, switch_cost, switch_levels)


@functools.lru_cache(maxsize=4)
def _params(levels: int, log_n: int = 12) -> CKKSParameters:
    """A small insecure ring (tests only) with ``levels`` 30-bit levels."""
    return CKKSParameters.from_literal(dict(log_n=log_n, log_q=[[30, 30]] + [[30]] * levels, log_p=[30, 30, 30],
                                            log_scale=30, dnum=3, insecure=True))


def _mlp(sizes, rng, activations=None) -> Sequential:
    layers = []
    for i, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(Linear(rng.normal(size=(n_out, n_in)) / np.sqrt(n_in), rng.normal(size=n_out) * 0.1))
        if i < len(sizes) - 2:
            layers.append(activations[i] if activations else Activation(fit_activation("relu", 4, (-4.0, 4.0))))
    return Sequential(layers, input_shape=(sizes[0],))


def _simulate(plan: ReplicatedPlan, model: Sequential, x) -> np.ndarray:
    """The server's algorithm on plain slot vectors (rotation = np.roll), from the library's layouts and
    plaintexts: the naive twin of ReplicatedServer.forward (activations by the power series, no folding)."""
    slots = plan.params.slots
    stages, _ = model.compile(plan.input_shape)
    vectors, v = plan.pack(x), None
    for index, (stage, rs) in enumerate(zip(stages, plan.stages)):
        if rs.kind == "activation":
            v = np.asarray(stage.poly.evaluate(v), dtype=np.float64)
            continue
        before = plan.maps[index - 1] if index else None
        plains = stage_vectors(rs, np.asarray(stage.matrix), before, slots)
        if rs.kind == "rows":
            sources = [np.roll(c, -k) for c in vectors for k in range(rs.fold)]
        elif rs.kind == "gather":
            sources = [v]
        else:
            sources = [np.roll(v, -j) for j in range(rs.n_out)]
        total = sum(s * p for s, p in zip(sources, plains))
        g = rs.baby
        chained = {"rows": (g - 1) * rs.inputs + rs.fold // g - 1,
                   "spread": g - 1 + -(-rs.n_out // g) - 1}.get(rs.kind, 0)
        for step in rs.rotations(slots)[chained:]:
            total = total + np.roll(total, -step)
        v = total + bias_vector(np.asarray(stage.bias), plan.maps[index])
    return v[plan.output_slots]


@settings(max_examples=25, deadline=None)
@given(st.lists(st.floats(-3, 3), min_size=5, max_size=5), st.floats(0.2, 3.0), st.booleans())
def test_quartic_form_is_the_power_series(coefficients, a4, negative):
    coefficients[4] = -a4 if negative else a4
    poly = fit_activation("relu", 4, (-2.0, 2.0))
    poly = type(poly)(poly.name, tuple(coefficients), poly.center, poly.radius)
    form = quartic_form(poly)
    t = np.linspace(-1.5, 1.5, 41)
    assert np.allclose(evaluate_quartic(form, form[0] * t), np.polyval(coefficients[::-1], t), rtol=1e-9, atol=1e-9)


def test_quartic_form_refuses_other_polynomials():
    assert quartic_form(fit_activation("relu", 2, (-2.0, 2.0))) is None
    assert quartic_form(Square().poly) is None


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from([(30, 16, 8, 3), (20, 7, 12, 5), (50, 32, 4, 4), (300, 16, 8, 3),
                                                  (30, 16, 8), (30, 5)]),
       st.sampled_from([1, 2, 4]))
def test_layouts_and_plaintexts_compute_the_model(seed, sizes, fold):
    rng = np.random.default_rng(seed)
    model = _mlp(sizes, rng)
    plan = replicated_plan(model, params=_params(7, log_n=11), fold=fold)
    kinds = ["rows", "activation", "gather", "activation", "spread"][:2 * len(sizes) - 3]
    assert [s.kind for s in plan.stages] == kinds
    period = plan.stages[0].period
    assert plan.input_ciphertexts == -(-sizes[0] // (1024 // period * fold)) == len(plan.pack(np.zeros(sizes[0])))
    x = rng.normal(size=sizes[0])
    assert np.allclose(_simulate(plan, model, x), model.forward(x), atol=1e-9)


def test_layout_maps_name_each_output_where_the_module_says():
    stages = plan_stages(_mlp((20, 8, 4, 3), np.random.default_rng(0)).compile()[0], 256)
    rows, _, gather, _, spread = layout_maps(stages, 256)
    s = np.arange(256)
    assert np.array_equal(rows, np.where(s % 8 < 8, s % 8, -1))                        # y[s mod P]
    assert np.array_equal(np.flatnonzero(gather >= 0), 8 * np.arange(4))              # y[r] at slot P r
    assert np.array_equal(spread, np.where((-s) % 8 < 3, (-s) % 8, -1))               # y[(-s) mod H]


def test_the_mnist_shapes_need_thirteen_power_of_two_keys():
    model = _mlp((784, 128, 64, 10), np.random.default_rng(1))
    plan = replicated_plan(model, params=choose_parameters(7, min_slots=8192))
    assert plan.rotations == tuple(1 << e for e in range(13))
    assert plan.stages[-1].baby == 4   # spread: rot by 1, 2, 3, then 2 giant rotations by 4 (Horner) + 6
    assert plan.operation_counts() == {"ct_pt": 13 + 1 + 10, "rotations": 6 + 7 + 5 + 6, "galois_keys": 13,
                                       "input_ciphertexts": 13}
    assert plan.depth == 7  # two levels per quartic activation (the power series takes three)


def test_folding_trades_input_ciphertexts_for_rotations_on_the_same_keys():
    model = _mlp((784, 128, 64, 10), np.random.default_rng(1))
    params = choose_parameters(7, min_slots=8192)
    flat, folded = replicated_plan(model, params=params), replicated_plan(model, params=params, fold=16)
    assert folded.input_ciphertexts == 1 and folded.rotations == flat.rotations
    assert folded.stages[0].baby == 4   # 3 baby rotations and 3 giant ones by 4 instead of 15
    four = replicated_plan(model, params=params, fold=4).stages[0]
    assert (four.inputs, four.baby) == (4, 1)   # 4 inputs: 3 giant rotations of the summed products, no baby
    assert folded.operation_counts()["rotations"] == flat.operation_counts()["rotations"] + 6
    with pytest.raises(ParameterError, match="fold=3 must be a power of two in"):
        replicated_plan(model, params=params, fold=3)


def test_a_layer_that_does_not_fit_is_refused_naming_it():
    model = _mlp((20, 16, 40, 3), np.random.default_rng(2))   # gather: 40 outputs x period 16 > 256 slots
    with pytest.raises(ShapeError, match="stage 2: 40 outputs x period 16 exceed slots=256"):
        plan_stages(model.compile()[0], 256)


def test_fast_parameters_are_secure_and_switch_no_slower():
    stages = plan_stages(_mlp((20, 8, 4), np.random.default_rng(3)).compile()[0], 256)
    levels = tuple(switch_levels(stages, 256))
    assert levels == (4,) * 5 + (3, 2) + (1,) * 3       # rows: 8..128 at 4; the quartic; gather: 1, 2, 4
    base, fast = choose_parameters(4, min_slots=256), fast_parameters(4, 256, levels)
    assert fast.security_bits >= 128 and fast.max_level == 4 and fast.slots >= 256
    assert switch_cost(fast, levels) <= switch_cost(base, levels)


@pytest.fixture(scope="module")
def deployed():
    rng = np.random.default_rng(5)
    model = _mlp((24, 12, 8, 3), rng, activations=[Activation(fit_activation("relu", 4, (-4.0, 4.0))), Square()])
    plan = replicated_plan(model, params=_params(6))
    client = ReplicatedClient(plan, seed=11, allow_insecure=True)
    server = ReplicatedServer(model, client.public_context(), ReplicatedPlan.from_dict(
        json.loads(json.dumps(plan.to_dict()))))
    return model, plan, client, server, rng


def test_encrypted_matches_the_model(deployed):
    model, plan, client, server, rng = deployed
    assert plan.depth == 1 + 2 + 1 + 1 + 1       # the quartic in 2 levels, the square in 1
    x = rng.normal(size=(3, 24)) * 0.5
    timings = {}
    y = client.decrypt(server.evaluate(client.encrypt(x), timings))
    assert y.shape == (3, 3)
    assert np.allclose(y, model.forward(x), atol=2e-3)
    assert {"read", "0:rows", "2:gather", "4:spread", "reply"} <= timings.keys()
    one = client.decrypt(server.evaluate(client.encrypt(x[0])))
    assert one.shape == (3,) and np.allclose(one, model.forward(x[0]), atol=2e-3)
    assert server.encode_weights() == (server.encoded_plaintexts, False)   # the trace stops at the square


def test_prepare_encodes_every_plaintext_before_a_request(deployed):
    model, plan, client, _, rng = deployed
    server = ReplicatedServer(model, client.public_context(), plan)
    server.prepare()
    kept = server.encoded_plaintexts
    affine = plan.operation_counts()["ct_pt"] + 3      # and a bias per affine stage
    form = quartic_form(model.compile()[0][1].poly)
    assert kept == affine + (form[1] != 0) + (form[4] != 0)   # the quartic's nonzero gamma, e; the square none
    x = rng.normal(size=24) * 0.5
    assert np.allclose(client.decrypt(server.evaluate(client.encrypt(x))), model.forward(x), atol=2e-3)
    assert server.encoded_plaintexts == kept            # nothing left to encode at the request


def test_prepare_traces_the_scales_of_quartic_models_exactly():
    rng = np.random.default_rng(8)
    model = _mlp((40, 16, 8, 3), rng)                    # every activation a quartic: scales traced, no forward
    plan = replicated_plan(model, params=_params(7))
    client = ReplicatedClient(plan, seed=13, allow_insecure=True)
    server = ReplicatedServer(model, client.public_context(), plan)
    server.prepare()
    kept = server.encoded_plaintexts
    forms = [quartic_form(stage.poly) for stage in model.compile()[0][1::2]]
    assert kept == plan.operation_counts()["ct_pt"] + 3 + sum((f[1] != 0) + (f[4] != 0) for f in forms)
    x = rng.normal(size=(2, 40)) * 0.5
    assert np.allclose(client.decrypt(server.evaluate(client.encrypt(x))), model.forward(x), atol=2e-3)
    assert server.encoded_plaintexts == kept            # the request found every plaintext at its scale


def test_a_folded_plan_encrypted_matches_the_model(deployed):
    _, plan, _, _, rng = deployed
    model = _mlp((400, 12, 8, 3), rng, activations=[Activation(fit_activation("relu", 4, (-4.0, 4.0))), Square()])
    folded = replicated_plan(model, params=plan.params, fold=4)
    assert (folded.input_ciphertexts, replicated_plan(model, params=plan.params).input_ciphertexts) == (1, 4)
    client = ReplicatedClient(folded, seed=12, allow_insecure=True)
    server = ReplicatedServer(model, client.public_context(), folded)
    x = rng.normal(size=(2, 400)) * 0.5
    assert np.allclose(client.decrypt(server.evaluate(client.encrypt(x))), model.forward(x), atol=2e-3)


def test_client_file_round_trip_and_plain_client_reads_it(deployed, tmp_path):
    model, plan, client, server, rng = deployed
    client.save(tmp_path / "client.bin")
    assert (tmp_path / "client.bin").stat().st_mode & 0o777 == 0o600
    again = ReplicatedClient.load(tmp_path / "client.bin")
    assert again.plan == plan and again.key_id == client.key_id
    x = rng.normal(size=24) * 0.5
    assert np.allclose(again.decrypt(server.evaluate(again.encrypt(x))), model.forward(x), atol=2e-3)
    assert Client.load(tmp_path / "client.bin").plan is None   # the inference client's record, no packed plan


def test_refusals(deployed):
    model, plan, client, server, rng = deployed
    with pytest.raises(ContextMismatchError, match="lacks Galois keys"):
        ReplicatedServer(model, CKKSContext.keygen(plan.params, rotations=[1], seed=3).public_context(), plan)
    other = _mlp((24, 12, 8, 3), np.random.default_rng(9), activations=[
        Activation(fit_activation("relu", 4, (-4.0, 4.0))), Square()])
    with pytest.raises(ContextMismatchError, match="the plan is for model"):
        ReplicatedServer(other, client.public_context(), plan)
    with pytest.raises(ShapeError, match="neither"):
        client.encrypt(np.zeros(23))
    with pytest.raises(ParameterError, match="not 128-bit secure"):
        ReplicatedClient(plan)
    with pytest.raises(ParameterError, match="not a replicated plan"):
        ReplicatedPlan.from_dict({"layout": "flat"})
    crafted = plan.to_dict()
    crafted["stages"][-1]["period"] = 1   # a spread of period 1 lays out one output, the plan claims 3
    with pytest.raises(ParameterError, match="output 1 is in no slot"):
        ReplicatedPlan.from_dict(crafted)


def test_outputs_outside_the_planned_range_are_refused(deployed):
    model, plan, client, server, rng = deployed
    assert plan.output_range is not None and len(plan.output_range[0]) == 3
    x = rng.normal(size=(2, 24)) * 0.5
    reply = server.evaluate(client.encrypt(x))
    narrow = ReplicatedPlan.from_dict(dict(plan.to_dict(), output_range=[[9.0] * 3, [10.0] * 3], output_margin=0.0))
    strict = ReplicatedClient(narrow, allow_insecure=True, _context=client._context)  # noqa: SLF001 (same keys)
    with pytest.raises(OutputRangeError, match=r"samples \[0, 1\]"):
        strict.decrypt(reply)
