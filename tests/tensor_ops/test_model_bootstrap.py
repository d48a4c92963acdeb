"""Bootstraps placed by the model compiler (tensor_ops/nn.py ``Sequential.plan(bootstrap=...)``), recorded in the
ModelPlan, priced, printed, keyed and run by the server (tensor_ops/inference.py ``EncryptedModel``).

INSECURE toy parameters (N = 2^12, sparse secret, 20 levels at scale 2^50), as in tests/crypto/test_bootstrap.py:
no 128-bit preset bootstraps below N = 2^16."""
import json
import re

import numpy as np
import pytest

from crypto import CKKSContext, CKKSParameters
from crypto.ckks.bootstrap import BootstrapConfig
from crypto.errors import KeyMissingError, ParameterError
from tensor_ops.bootstrap_placement import min_bootstraps_brute_force, naive_bootstraps
from tensor_ops.inference import Client, EncryptedModel, Server
from tensor_ops.model_plan import ModelPlan
from tensor_ops.nn import Linear, Poly, Sequential, Square

BOOT_TOY = dict(log_n=12, log_q=[[30, 30]] + [[25, 26]] * 20, log_p=[30] * 6, log_scale=50, dnum=7,
                hamming_weight=32, insecure=True)
#: 14 levels a bootstrap, 6 left at 20 levels
CONFIG = BootstrapConfig(cts_levels=2, stc_levels=2, arcsin=False)
FEATURES, LAYERS = 4, 10
_CACHE: dict = {}


def params():
    if "params" not in _CACHE:
        _CACHE["params"] = CKKSParameters.from_literal(BOOT_TOY)
    return _CACHE["params"]


def deep_model(layers=LAYERS, seed=0):
    """``layers`` x (Linear 4 -> 4, Square): x -> (0.95 Q x + 0.2)^2, Q orthogonal: values stay below 1."""
    rng = np.random.default_rng(seed)
    stack = []
    for _ in range(layers):
        q, _ = np.linalg.qr(rng.normal(size=(FEATURES, FEATURES)))
        stack += [Linear(0.95 * q, np.full(FEATURES, 0.2)), Square()]
    return Sequential(stack, input_shape=(FEATURES,))


def deep_plan():
    if "plan" not in _CACHE:
        _CACHE["plan"] = deep_model().plan(params=params(), bootstrap=CONFIG)
    return _CACHE["plan"]


def test_plan_places_the_fewest_bootstraps_and_every_stage_fits():
    plan = deep_plan()
    depths = [s.depth for s in plan.stages]
    boot = plan.bootstrap_plan
    assert plan.depth > params().max_level                        # deeper than the levels
    assert plan.bootstrap == CONFIG and plan.input_level == params().max_level
    assert len(plan.bootstraps) == naive_bootstraps(depths, boot.levels_left, params().max_level) \
        == min_bootstraps_brute_force(depths, boot.levels_left, params().max_level) >= 1
    level = params().max_level
    for i, (d, start) in enumerate(zip(depths, plan.stage_levels)):
        if i in plan.bootstraps:
            level = boot.levels_left
        assert start == level and d <= level
        level -= d
    assert plan.output_level == level >= 0


def test_plan_prices_keys_and_prints_the_bootstraps():
    plan = deep_plan()
    boot = plan.bootstrap_plan
    assert set(boot.rotation_steps) <= set(plan.rotations) and set(plan.stage_rotations) <= set(plan.rotations)
    assert plan.keys["conjugation"] is True and plan.needs_relinearization
    assert plan.operation_counts()["bootstrap"] == len(plan.bootstraps)
    assert plan.bootstrap_cost > 0 and plan.bootstrap_seconds > 0
    without = plan.estimated_seconds - len(plan.bootstraps) * plan.bootstrap_seconds
    assert 0 < without < plan.estimated_seconds
    text = plan.explain()
    printed = re.search(r"bootstraps: (\d+) .*before stages \[([\d, ]*)\]", text)
    assert printed and int(printed.group(1)) == len(plan.bootstraps)
    assert [int(v) for v in printed.group(2).split(",")] == list(plan.bootstraps)
    assert f"priced {plan.bootstrap_cost:.0f} rotations" in text
    assert text.count("bootstrap -> level") == len(plan.bootstraps)


def test_plan_round_trips_and_tampered_placements_are_refused():
    plan = deep_plan()
    data = json.loads(json.dumps(plan.to_dict()))
    again = ModelPlan.from_dict(data)
    assert again == plan and again.bootstraps == plan.bootstraps and again.rotations == plan.rotations
    for bad in ([], [len(plan.stages)], [plan.bootstraps[0], plan.bootstraps[0]], [0], "x"):
        with pytest.raises(ParameterError):
            ModelPlan.from_dict(dict(data, bootstraps=bad))
    with pytest.raises(ParameterError, match="slots"):
        ModelPlan.from_dict(dict(data, bootstrap=dict(data["bootstrap"], slots=64)))
    with pytest.raises(ParameterError):
        ModelPlan.from_dict(dict(data, bootstrap=dict(data["bootstrap"], unknown=1)))


def test_plans_without_bootstraps_keep_their_dict():
    shallow = deep_model(layers=3)
    plan = shallow.plan(params=params(), bootstrap=CONFIG)        # fits the levels: nothing placed
    assert plan.bootstraps == () and plan.bootstrap is None and plan.input_level == plan.depth
    assert "bootstrap" not in plan.to_dict() and "bootstraps" not in plan.to_dict()
    assert "bootstrap" not in plan.explain() and "bootstrap" not in plan.operation_counts()
    assert plan is shallow.plan(params=params()) is shallow.plan(params=params(), bootstrap=False)


def test_refusal_without_bootstrapping_names_the_depth_and_the_levels():
    model = deep_model()
    depth = deep_plan().depth
    with pytest.raises(ParameterError, match=rf"depth={depth} levels .*max_level=20 \(bootstrap=False\)"):
        model.plan(params=params(), bootstrap=False)
    few = CKKSParameters.from_literal(dict(BOOT_TOY, log_q=[[30, 30]] + [[25, 26]] * 8, dnum=3))
    with pytest.raises(ParameterError, match=rf"depth={depth} levels .*max_level=8 and cannot bootstrap"):
        model.plan(params=few)                                    # automatic: too few levels to bootstrap
    with pytest.raises(ParameterError, match="max_level=8"):
        model.plan(params=few, bootstrap=True)
    with pytest.raises(ParameterError, match="slots"):
        model.plan(params=params(), bootstrap=64)                 # sparse: the packed layout fills every slot


def test_refusal_of_a_stage_deeper_than_a_bootstrap_leaves_names_the_stage_and_the_fix():
    """A stage deeper than the levels left after a bootstrap cannot be split by one: the refusal names that stage
    and what to change (a lower --degree, AvgPool for MaxPool); a shallow one of the same shape still plans."""
    config = BootstrapConfig(cts_levels=3, stc_levels=3, arcsin=False)  # fewer levels left after a bootstrap

    def model(degree):
        return Sequential([Linear(np.eye(FEATURES), np.zeros(FEATURES)), Poly("relu", degree=degree)] * 3)
    with pytest.raises(ParameterError, match=r"stage 1, of depth \d+, exceeds the \d+ levels .*lower --degree.*AvgPool"):
        model(63).plan(params=params(), bootstrap=config)
    assert model(3).plan(params=params(), bootstrap=config).depth > 0   # positive control: a shallow one plans


def test_server_without_bootstrap_keys_refuses():
    plan = deep_plan()
    ctx = CKKSContext.keygen(params(), rotations=plan.stage_rotations, seed=1)
    with pytest.raises(KeyMissingError, match="bootstrap"):
        EncryptedModel(deep_model(), plan, ctx)
    with pytest.raises(ParameterError, match=rf"depth={plan.depth} levels .*max_level=20"):
        Server(deep_model(), ctx.public_context())                # the context cannot bootstrap: the refusal stays


@pytest.mark.slow
def test_server_without_encapsulation_keys_refuses():
    """A plan whose bootstrap encapsulates needs the encapsulation keys besides the Galois keys."""
    from dataclasses import replace
    plan = deep_model().plan(params=params(), bootstrap=replace(CONFIG, encapsulation=32))
    assert plan.bootstrap_plan.encapsulation_weight == 32
    steps = sorted(set(plan.stage_rotations) | set(plan.bootstrap_plan.rotation_steps))
    ctx = CKKSContext.keygen(params(), rotations=steps, conjugation=True, seed=1)
    with pytest.raises(KeyMissingError, match="encapsulation keys"):
        EncryptedModel(deep_model(), plan, ctx)


@pytest.mark.slow
def test_deep_model_encrypted_through_client_and_server_matches_numpy():
    """10 x (Linear + Square), depth 21 at 20 levels: one bootstrap, run where the plan (and its printout) says."""
    model = deep_model()
    plan = deep_plan()
    client = Client(plan=plan, seed=2, allow_insecure=True)                  # BOOT_TOY: an insecure test ring
    server = Server(model, client.public_context())
    assert server.plan == plan                                     # the server places the same bootstraps
    ev = server.context.evaluator
    done, executed, original = [0], [], ev.bootstrap

    def recording(ct, config=None):
        executed.append(done[0])                                   # the stage it precedes
        assert config == plan.bootstrap
        return original(ct, config)

    ev.bootstrap = recording
    x = np.random.default_rng(5).uniform(-1, 1, (3, FEATURES))
    reply = server.evaluate(client.encrypt(x), progress=lambda d, total, label: done.__setitem__(0, d))
    y = client.decrypt(reply)
    printed = re.search(r"before stages \[([\d, ]*)\]", plan.explain()).group(1)
    assert executed == list(plan.bootstraps) == [int(v) for v in printed.split(",")]
    err = np.abs(y - model.forward(x)).max()
    assert err < 2.0 ** -plan.bootstrap_plan.precision_bits, (err, plan.bootstrap_plan.precision_bits)
