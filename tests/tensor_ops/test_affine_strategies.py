"""The model path's affine stages as strategies of the einsum planner (``tensor_ops.plan.affine``): the packed
generalized diagonals or the planner's own plan of 'bi,oi->bo' on the packed layout, chosen by the planner's
CostModel, recorded in the plan (JSON and explain), validated when read, and run by the server with the plain
reference's result. Simulated runs use the noiseless stand-in (``tests.reference.sim_ckks``); the encrypted run
an INSECURE test ring (N = 2^11) chosen for speed."""
import json
import math
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from crypto import CKKSContext
from crypto.errors import ParameterError, ShapeError
from tensor_ops.inference import Client, EncodedCache, EncryptedModel, Server, rotation_routes
from tensor_ops.model_plan import ActivationStage, ModelPlan, choose_parameters, known_paddings, stage_plans
from tensor_ops.nn import Linear, Poly, Sequential, Square
from tensor_ops.packing import packed_stages
from tensor_ops.plan.affine import (EvaluatorBackend, batch_layout, choose_affine, einsum_stage_plan, packed_counts,
                                    padding_correction)
from tests.reference.sim_ckks import SimContext, SimEvaluator

TEST_RING = dict(log_n=11, log_q=[[30, 30]] + [[25, 26]] * 8, log_p=[30] * 4, log_scale=50, dnum=4, insecure=True)
SMALL_RING = dict(log_n=10, log_q=[[30, 30]] + [[25, 26]] * 5, log_p=[30, 30, 30], log_scale=50, dnum=4,
                  insecure=True)
GELU = Poly("gelu", 3, (-3, 3))


def _mlp(rng, widths, activation):
    layers = []
    for n_in, n_out in zip(widths, widths[1:]):
        layers += [Linear(rng.normal(size=(n_out, n_in)) / math.sqrt(n_in), rng.normal(size=n_out) * 0.1), activation]
    return Sequential(layers[:-1], input_shape=(widths[0],))


def _forced(model, plan, force):
    """``plan`` with the strategies ``force`` ({stage index: strategy}) instead of the cost model's choice."""
    stages, block = packed_stages(model, plan.input_shape, plan.choices, ActivationStage)
    plans, _ = stage_plans(stages, math.prod(plan.input_shape), slots=plan.params.slots, block=block, force=force)
    return replace(plan, stages=plans)


def _simulated(model, plan, x):
    ctx = SimContext(plan.params.slots, plan.rotations, plan.input_level)
    server = EncryptedModel(model, plan, ctx)
    outputs = [ctx.decrypt(server.forward(ctx.encrypt(v, level=plan.input_level))) for v in plan.pack(x)]
    return plan.unpack(outputs, len(x))


@pytest.fixture(scope="module")
def depth4():
    return choose_parameters(5)


# -- the strategy on its own: the planner's plan run through EvaluatorBackend with a known padding -------------
@settings(max_examples=25, deadline=None)
@given(n_in=st.integers(2, 16), n_out=st.integers(2, 16), extra=st.integers(0, 2), padding=st.floats(-3, 3),
       seed=st.integers(0, 2**31))
def test_einsum_stage_with_known_padding_equals_the_matrix_product(n_in, n_out, extra, padding, seed):
    rng = np.random.default_rng(seed)
    block = (1 << (2 * max(n_in, n_out) - 1).bit_length()) << extra
    slots = max(block * 2, 64)
    plan, why = einsum_stage_plan(n_in, n_out, block, slots)
    assert plan is not None, why
    batch = slots // block
    weights, x = rng.normal(size=(n_out, n_in)), rng.normal(size=(batch, n_in))
    vector = batch_layout(n_in, block, slots).pack(x)[0]
    vector[(np.arange(slots) % block) >= n_in] = padding        # what an activation leaves around each sample
    routes = rotation_routes(plan.rotations(), plan.rotations(), slots)
    sim = SimContext(slots, plan.rotations(), 3)
    backend = EvaluatorBackend(SimEvaluator(slots, plan.rotations()), sim.encode, routes, slots)
    (out,) = plan.run(backend, [[sim.encrypt(vector)], weights])
    got = out.values - padding_correction(plan, weights, n_in, block, padding)
    want = batch_layout(n_out, block, slots).pack(x @ weights.T)[0]
    np.testing.assert_allclose(got, want, atol=1e-9)             # outputs, and zeros around them
    assert out.level == 2                                        # one level, as the packed strategy


def test_the_einsum_strategy_needs_room_for_a_copy():
    assert einsum_stage_plan(16, 16, 32, 1024)[0] is not None
    plan, why = einsum_stage_plan(17, 16, 32, 1024)
    assert plan is None and "2*max(n_in, n_out) = 34" in why
    choice = choose_affine(packed_counts((0, 1), (0, 2), (), 3), (1, 2), 17, 16, 32, 1024, padding_known=True)
    assert choice.strategy == "packed" and dict(choice.priced)["einsum"] is None


def test_paddings_are_tracked_through_activations_and_lost_at_joins():
    rng = np.random.default_rng(0)
    model = _mlp(rng, (6, 4, 4, 3), GELU)
    stages, _ = packed_stages(model, (6,), {}, ActivationStage)
    pads = known_paddings(stages, 6)
    assert pads[0] == 0.0 and pads[1] is None
    p0 = float(stages[1].apply(np.zeros(1))[0])
    assert p0 != 0 and pads[2] == pytest.approx(p0) and pads[4] == pytest.approx(p0)
    assert known_paddings(stages, 7)[0] is None                   # a packed width other than the stage's input


# -- the choice: the planner's CostModel, each way --------------------------------------------------------------
def test_the_cost_model_chooses_the_planners_plan_for_a_small_dense_layer(depth4):
    """64 -> 16 -> 16 -> 4: the block (64) has room for a copy of the 16-wide vectors; the dense 16x16 map has
    16 cyclic diagonals against 31 generalized ones: the einsum planner's diagonal method is cheaper."""
    model = _mlp(np.random.default_rng(1), (64, 16, 16, 4), Square())
    plan = model.plan(params=depth4)
    assert [s.strategy for s in plan.stages] == ["packed", "", "einsum", "", "einsum"]
    priced = dict(plan.stages[2].priced)
    assert priced["einsum"] < priced["packed"]
    assert dict(plan.stages[0].priced)["einsum"] is None          # 64 values: no room for a copy in 64 slots
    text = plan.explain()
    assert "stage 2: affine 16 -> 16, strategy einsum (est." in text and "packed" in text.split("stage 2:")[1]


def test_the_cost_model_keeps_the_packed_map_for_a_sparse_layer(depth4):
    """A 16 -> 16 layer with one nonzero diagonal: the packed strategy needs 1 product and no rotation, the
    planner's cyclic diagonal method 16 products and its rotations."""
    rng = np.random.default_rng(2)
    model = Sequential([Linear(rng.normal(size=(16, 64)) / 8, rng.normal(size=16) * 0.1), Square(),
                        Linear(np.diag(rng.normal(size=16))), Square(), Linear(rng.normal(size=(4, 16)))],
                       input_shape=(64,))
    plan = model.plan(params=depth4)
    priced = dict(plan.stages[2].priced)
    assert plan.stages[2].strategy == "packed" and priced["packed"] < priced["einsum"]


# -- the server runs the chosen strategy: the plain reference's result ------------------------------------------
@pytest.mark.filterwarnings("ignore::tensor_ops.nn.ActivationRangeWarning")  # the polynomial itself is compared
@settings(max_examples=15, deadline=None)
@given(widths=st.lists(st.integers(1, 12), min_size=2, max_size=4), wide=st.integers(0, 40),
       square=st.booleans(), batch=st.integers(1, 9), seed=st.integers(0, 2**31))
def test_simulated_models_equal_plaintext_under_either_strategy(depth4, widths, wide, square, batch, seed):
    rng = np.random.default_rng(seed)
    widths = [max(widths[0], wide)] + widths[1:]                 # a wide input makes room for copies later on
    model = _mlp(rng, widths, Square() if square else GELU)
    if model.depth() > depth4.max_level:
        return
    plan = model.plan(params=depth4)
    x = rng.normal(size=(batch, widths[0]))
    want = model.forward(x)
    np.testing.assert_allclose(_simulated(model, plan, x), want, rtol=1e-9, atol=1e-9)
    eligible = {i: "einsum" for i, s in enumerate(plan.stages) if dict(s.priced).get("einsum") is not None}
    for force in (eligible, {i: "packed" for i in eligible}):
        forced = _forced(model, plan, force)
        assert all(forced.stages[i].strategy == force[i] for i in force)
        np.testing.assert_allclose(_simulated(model, forced, x), want, rtol=1e-9, atol=1e-9)


def test_a_request_of_a_wider_block_runs_the_einsum_stages_too(depth4):
    model = _mlp(np.random.default_rng(1), (64, 16, 16, 4), Square())
    plan = model.plan(params=depth4)
    x = np.random.default_rng(0).normal(size=(3, 64))
    np.testing.assert_allclose(_simulated(model, plan.with_block(256), x), model.forward(x), rtol=1e-9, atol=1e-9)


def test_the_einsum_strategy_yields_to_a_key_budget_its_keys_exceed():
    """64 -> 30 -> 30 -> 30: the planner's plans need 22 rotation keys, the packed maps 18; under a budget of 21
    keys every stage stays packed, at 22 the cost model's choice stands."""
    model = _mlp(np.random.default_rng(1), (64, 30, 30, 30), Square())
    stages, block = packed_stages(model, (64,), {}, ActivationStage)

    def strategies(budget):
        plans, _ = stage_plans(stages, 64, slots=1 << 13, block=block, key_bytes=1, key_budget=budget)
        return [p.strategy for p in plans], len({k for p in plans for k in p.rotations if k})

    assert strategies(None) == strategies(22) == (["packed", "", "einsum", "", "einsum"], 22)
    assert strategies(21) == (["packed", "", "packed", "", "packed"], 18)


def test_the_einsum_stages_encodings_live_in_the_shared_weights_store(depth4):
    """Encoded once into the servers' shared store (as the packed stages' diagonals), reused by a second server;
    a store too small for the stage keeps nothing and the result is the same."""
    model = _mlp(np.random.default_rng(1), (64, 16, 16, 4), Square())
    plan = model.plan(params=depth4)
    x = np.random.default_rng(0).normal(size=(3, 64))

    class Counting(SimContext):
        encodes = 0

        def encode(self, values, level=None, scale=None):
            Counting.encodes += 1
            return super().encode(values, level, scale)

    ctx, store = Counting(plan.params.slots, plan.rotations, plan.input_level), {}
    runs = []
    for _ in range(2):
        server = EncryptedModel(model, plan, ctx, encoded=store)
        before = Counting.encodes
        outputs = [ctx.decrypt(server.forward(ctx.encrypt(v, level=plan.input_level))) for v in plan.pack(x)]
        runs.append(Counting.encodes - before)
        np.testing.assert_allclose(plan.unpack(outputs, len(x)), model.forward(x), rtol=1e-9, atol=1e-9)
    einsum = [key for key in store if key[-1] == "einsum"]
    assert {key[3] for key in einsum} == {2, 4} and runs[0] > 0 and runs[1] == 0
    assert len(store[einsum[0]][0]) == plan.stages[einsum[0][3]].diagonals
    tiny = EncodedCache(1 << 10)
    server = EncryptedModel(model, plan, ctx, encoded=tiny)
    outputs = [ctx.decrypt(server.forward(ctx.encrypt(v, level=plan.input_level))) for v in plan.pack(x)]
    np.testing.assert_allclose(plan.unpack(outputs, len(x)), model.forward(x), rtol=1e-9, atol=1e-9)
    assert len(tiny) == 0


def test_forcing_the_einsum_strategy_where_it_does_not_apply_is_refused(depth4):
    model = _mlp(np.random.default_rng(3), (64, 16, 4), Square())
    plan = model.plan(params=depth4)
    with pytest.raises(ShapeError, match="stage 0 cannot run by the einsum planner"):
        _forced(model, plan, {0: "einsum"})
    with pytest.raises(ParameterError, match="force"):
        _forced(model, plan, {2: "dense"})


@pytest.mark.filterwarnings("ignore::tensor_ops.nn.ActivationRangeWarning")  # the polynomial itself is compared
def test_an_encrypted_model_with_an_einsum_stage_equals_plaintext():
    """Real CKKS (test ring N = 2^10): a stage run by the planner's plan after a GELU (padding p(0) != 0), through
    the client/server bytes; within 1e-4 of the plain reference (the polynomial is the model's)."""
    rng = np.random.default_rng(4)
    model = _mlp(rng, (32, 8, 3), GELU)
    plan = model.plan(params=SMALL_RING)
    assert [s.strategy for s in plan.stages if s.kind == "affine"].count("einsum") >= 1
    client = Client(plan=plan, seed=0, allow_insecure=True)
    x = rng.uniform(-1, 1, size=(5, 32))
    y = client.decrypt(Server(model, client.public_context()).evaluate(client.encrypt(x)))
    assert np.abs(y - model.forward(x)).max() < 1e-4


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::tensor_ops.nn.ActivationRangeWarning")
@settings(max_examples=4, deadline=None)
@given(widths=st.lists(st.integers(2, 12), min_size=3, max_size=3), seed=st.integers(0, 2**31))
def test_encrypted_random_models_with_forced_einsum_stages_equal_plaintext(widths, seed):
    """Real CKKS (test ring): every stage that can run by the planner's plan does, within 1e-4."""
    rng = np.random.default_rng(seed)
    model = _mlp(rng, [32] + widths, Square())
    plan = model.plan(params=TEST_RING)
    force = {i: "einsum" for i, s in enumerate(plan.stages) if dict(s.priced).get("einsum") is not None}
    assert force                                                   # the stages after the 32-wide one
    plan = _forced(model, plan, force)
    ctx = CKKSContext.keygen(plan.params, rotations=plan.rotations, seed=0)
    server = EncryptedModel(model, plan, ctx)
    x = rng.uniform(-1, 1, size=(3, 32))
    outputs = [ctx.decrypt(server.forward(ctx.encrypt(v, level=plan.input_level))) for v in plan.pack(x)]
    assert np.abs(plan.unpack(outputs, len(x)) - model.forward(x)).max() < 1e-4


def _einsum_request(seed):
    model = _mlp(np.random.default_rng(seed), (32, 8, 8, 3), Square())
    plan = model.plan(params=SMALL_RING)
    assert plan.stages[2].strategy == "einsum"
    client = Client(plan=plan, seed=seed, allow_insecure=True)
    x = np.random.default_rng(seed).uniform(-1, 1, (2, 32))
    return model, client, client.encrypt(x), model.forward(x)


@pytest.mark.filterwarnings("ignore:the plan states no output range")
def test_an_einsum_stage_needs_only_the_evaluator_protocol():
    """Through a protocol-only view of the host evaluator (no fused products, no hoisted ModDown): the same reply
    bytes, so the planner's plan runs on any ``CKKSEvaluator``."""
    from tests.tensor_ops.test_model_on_device_evaluator import ProtocolOnly
    model, client, request, want = _einsum_request(8)
    context = CKKSContext.from_bytes(client.public_context())
    reference = Server(model, context).evaluate(request)
    assert Server(model, context, evaluator=ProtocolOnly(context.evaluator)).evaluate(request) == reference
    assert np.abs(client.decrypt(reference) - want).max() < 2.0 ** -20


@pytest.mark.slow   # ~60 s on two shared cores: CPU XLA compiles the first device evaluation
@pytest.mark.filterwarnings("ignore:the plan states no output range")
def test_an_einsum_stage_on_the_device_evaluator_equals_the_host():
    pytest.importorskip("jax", reason="jax is not installed (pip install 'jax[cpu]'): the device path is optional")
    from crypto.ckks.jax_device import DeviceEvaluator
    model, client, request, want = _einsum_request(9)
    context = CKKSContext.from_bytes(client.public_context())
    reference = Server(model, context).evaluate(request)
    assert Server(model, context, evaluator=DeviceEvaluator).evaluate(request) == reference


# -- the plan's record: round trip, a tampered strategy refused --------------------------------------------------
def _einsum_plan(depth4):
    model = _mlp(np.random.default_rng(1), (64, 16, 16, 4), Square())
    plan = model.plan(params=depth4)
    assert plan.stages[2].strategy == "einsum"
    return model, plan


def test_the_strategy_round_trips_in_the_plan_json(depth4):
    _, plan = _einsum_plan(depth4)
    data = json.loads(json.dumps(plan.to_dict()))
    assert data["stages"][2]["strategy"] == "einsum" and data["stages"][1]["strategy"] == ""
    assert [name for name, _ in data["stages"][2]["priced"]] == ["packed", "einsum"]
    assert ModelPlan.from_dict(data) == plan


def test_a_plan_without_the_field_reads_as_packed(depth4):
    _, plan = _einsum_plan(depth4)
    data = plan.to_dict()
    for stage in data["stages"]:
        stage.pop("strategy"), stage.pop("priced")
    assert [s.strategy for s in ModelPlan.from_dict(data).stages] == ["packed", "", "packed", "", "packed"]


@pytest.mark.parametrize("stage,field,value,match", [
    (2, "strategy", "dense", r"stages\[2\].strategy"),
    (2, "strategy", ["einsum"], r"stages\[2\].strategy"),
    (1, "strategy", "einsum", r"stages\[1\].strategy"),
    (2, "priced", [["einsum", 3.0], ["einsum", 4.0]], r"stages\[2\].priced"),
    (2, "priced", [["packed", 3.0], ["einsum", None]], r"stages\[2\].priced"),
    (2, "priced", [["packed", -1.0]], r"stages\[2\].priced\[0\]\[1\]"),
    (2, "priced", [["packed", 1.0], ["einsum", 1.0], ["packed", 1.0]], r"stages\[2\].priced"),
    (2, "priced", "cheap", r"stages\[2\].priced"),
    (0, "g", 3, r"stages\[0\]"),
])
def test_a_tampered_strategy_field_is_refused(depth4, stage, field, value, match):
    _, plan = _einsum_plan(depth4)
    data = plan.to_dict()
    if field == "g":
        data["stages"][0]["strategy"], data["stages"][0]["priced"] = "einsum", [["einsum", 1.0]]
    data["stages"][stage][field] = value
    with pytest.raises(ParameterError, match=match):
        ModelPlan.from_dict(data)


def test_a_server_refuses_a_plan_whose_einsum_stage_the_model_cannot_run(depth4):
    model, plan = _einsum_plan(depth4)
    data = plan.to_dict()
    data["stages"][0].update(strategy="einsum", priced=[["einsum", 1.0]], g=0, presum=[])
    crafted = ModelPlan.from_dict(data)
    with pytest.raises(ShapeError, match="strategy 'einsum'"):
        EncryptedModel(model, crafted, SimContext(plan.params.slots, crafted.rotations, plan.input_level))
    data = plan.to_dict()
    data["stages"][2]["giant"] = [k for k in data["stages"][2]["giant"] if k > 0]   # a step dropped
    crafted = ModelPlan.from_dict(data)
    with pytest.raises(ShapeError, match="does not declare"):
        EncryptedModel(model, crafted, SimContext(plan.params.slots, crafted.rotations, plan.input_level))
