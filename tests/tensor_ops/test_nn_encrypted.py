"""The encrypted forward's packing and diagonal/BSGS logic on a noiseless simulated context, and plans."""
import numpy as np
import pytest
from hypothesis import given, strategies as st

from crypto.errors import KeyMissingError, LevelError, ParameterError, ShapeError
from tensor_ops.inference import EncryptedModel, rotation_routes
from tensor_ops.nn import AvgPool2d, Conv2d, Flatten, Linear, ModelPlan, Poly, Sequential, Square, choose_parameters
from tensor_ops.backends import PlainBackend
from tensor_ops.tensor import encrypt as tensor_encrypt
from tests.reference.sim_ckks import SimContext


def _mlp(rng, n_in, hidden, n_out, activation):
    return Sequential([Linear(rng.normal(size=(hidden, n_in)), rng.normal(size=hidden)), activation,
                       Linear(rng.normal(size=(n_out, hidden)), rng.normal(size=n_out))], input_shape=(n_in,))


def _run_simulated(model, x, plan=None):
    plan = plan or model.plan()
    ctx = SimContext(plan.params.slots, plan.rotations, plan.input_level)
    server = EncryptedModel(model, plan, ctx)
    vectors = plan.pack(x)
    outputs = [ctx.decrypt(server.forward(ctx.encrypt(v, level=plan.input_level))) for v in vectors]
    return plan.unpack(outputs, len(x))


@pytest.fixture(scope="module")
def depth4():
    return choose_parameters(4)


@pytest.mark.filterwarnings("ignore::tensor_ops.nn.ActivationRangeWarning")  # the polynomial itself is compared
@given(n_in=st.integers(1, 40), hidden=st.integers(1, 40), n_out=st.integers(1, 12), batch=st.integers(1, 70),
       seed=st.integers(0, 2**31))
def test_simulated_mlp_equals_plaintext(depth4, n_in, hidden, n_out, batch, seed):
    rng = np.random.default_rng(seed)
    model = _mlp(rng, n_in, hidden, n_out, Poly("gelu", 3, (-3, 3)))
    x = rng.normal(size=(batch, n_in))
    plan = model.plan(params=depth4)
    np.testing.assert_allclose(_run_simulated(model, x, plan), model.forward(x), rtol=1e-9, atol=1e-9)


def test_simulated_cnn_equals_plaintext():
    rng = np.random.default_rng(0)
    model = Sequential([Conv2d(rng.normal(size=(3, 1, 3, 3)), rng.normal(size=3), stride=2, padding=1),
                        AvgPool2d(2), Square(), Flatten(), Linear(rng.normal(size=(5, 12)))], input_shape=(1, 8, 8))
    x = rng.normal(size=(9, 1, 8, 8))
    np.testing.assert_allclose(_run_simulated(model, x), model.forward(x), rtol=1e-9, atol=1e-9)


def test_plan_reports_depth_rotations_and_batch():
    rng = np.random.default_rng(1)
    model = _mlp(rng, 64, 32, 10, Square())
    plan = model.plan()
    assert plan.depth == 3 == model.depth() == plan.depth()
    assert plan.rotations() == plan.rotations == plan.keys["rotations"]
    assert plan.cost()["seconds"] == plan.estimated_seconds
    assert plan.params.max_level == 3
    assert plan.block == 64 and plan.batch == plan.params.slots // 64
    assert 0 < len(plan.rotations) < 64 + 32  # baby-step/giant-step beats one key per diagonal
    assert plan.needs_relinearization
    assert plan.estimated_seconds > 0 and plan.galois_key_bytes > 0
    assert "depth 3" in plan.explain()
    assert ModelPlan.from_dict(plan.to_dict()) == plan


def test_missing_rotation_keys_are_refused():
    rng = np.random.default_rng(2)
    model = _mlp(rng, 8, 8, 2, Square())
    plan = model.plan()
    ctx = SimContext(plan.params.slots, (), plan.input_level)
    with pytest.raises(KeyMissingError, match="rotations"):
        EncryptedModel(model, plan, ctx)


def test_power_of_two_keys_compose_every_rotation():
    rng = np.random.default_rng(2)
    model = _mlp(rng, 20, 12, 3, Square())
    plan = model.plan()
    powers = [1 << i for i in range(plan.params.slots.bit_length() - 1)]
    ctx = SimContext(plan.params.slots, powers, plan.input_level)
    server = EncryptedModel(model, plan, ctx)
    x = rng.normal(size=(4, 20))
    out = [ctx.decrypt(server.forward(ctx.encrypt(v, level=3))) for v in plan.pack(x)]
    np.testing.assert_allclose(plan.unpack(out, 4), model.forward(x), atol=1e-9)


@given(st.lists(st.integers(-300, 300), min_size=1, max_size=6), st.lists(st.integers(-200, 200), min_size=1, max_size=4))
def test_rotation_routes_sum_to_the_step(needed, available):
    slots = 128
    try:
        routes = rotation_routes(needed, available, slots)
    except KeyMissingError:
        reachable = {0}
        for _ in range(slots):
            reachable |= {(r + a) % slots for r in reachable for a in available}
        assert any(k % slots not in reachable for k in needed)
        return
    for k in needed:
        assert sum(routes[k]) % slots == k % slots
        assert set(routes[k]) <= set(available)  # steps named as the context names its keys
        if k % slots and k % slots in {a % slots for a in available}:
            assert len(routes[k]) == 1


def test_low_level_input_is_refused():
    rng = np.random.default_rng(3)
    model = _mlp(rng, 8, 8, 2, Square())
    plan = model.plan()
    ctx = SimContext(plan.params.slots, plan.rotations, plan.input_level)
    with pytest.raises(LevelError, match="level=1"):
        EncryptedModel(model, plan, ctx).forward(ctx.encrypt(plan.pack(np.ones(8))[0], level=1))


def test_pack_rejects_wrong_shapes():
    plan = _mlp(np.random.default_rng(4), 8, 8, 2, Square()).plan()
    with pytest.raises(ShapeError, match=r"\(8,\)"):
        plan.pack(np.ones(9))
    with pytest.raises(ShapeError, match="non-finite"):
        plan.pack(np.full(8, np.nan))


@pytest.mark.parametrize("depth", [0, 1, 3, 6])
def test_choose_parameters_fits_depth(depth):
    params = choose_parameters(depth)
    assert params.max_level == depth and not params.insecure


def test_choose_parameters_rejects_bad_depth():
    with pytest.raises(ParameterError, match="depth"):
        choose_parameters(-1)


def test_explicit_parameters_too_shallow():
    model = _mlp(np.random.default_rng(5), 8, 8, 2, Poly("relu", 7, 4))
    with pytest.raises(ParameterError, match="depth=5"):
        model.plan(params=choose_parameters(2))


@pytest.mark.parametrize("batch", [None, 3])
def test_forward_on_cipher_tensors_through_the_planner(batch):
    rng = np.random.default_rng(6)
    model = Sequential([Conv2d(rng.normal(size=(2, 1, 3, 3)), padding=1), AvgPool2d(2), Poly("silu", 3, (-4, 4)),
                        Flatten(), Linear(rng.normal(size=(3, 8)))], input_shape=(1, 4, 4))
    x = rng.normal(size=(16,) if batch is None else (batch, 16))
    backend = PlainBackend(2048, rotations=model.tensor_rotations(batch, params="TOY"))  # TOY: 2048 slots
    y = model(tensor_encrypt(backend, x))
    np.testing.assert_allclose(y.decrypt(), model.forward(x.reshape(-1, 1, 4, 4)).reshape(y.shape), atol=1e-9)


def test_cipher_tensor_of_unflattened_images_is_refused():
    model = Sequential([Flatten(), Linear(np.ones((2, 16)))], input_shape=(1, 4, 4))
    with pytest.raises(ShapeError, match="flattened"):
        model(tensor_encrypt(PlainBackend(1024), np.zeros((2, 4, 4))))
