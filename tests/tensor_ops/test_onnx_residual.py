"""Residual blocks y = s(x) + f(x) in the encrypted path (issue 12): ONNX blocks against onnxruntime through
``python -m tensor_ops infer``, random residual chains on a noiseless simulated context that tracks levels and
scales as CKKS does (the skip must land on the branch's level and scale exactly), save/load, the plan's text."""
import math

import numpy as np
import onnx
import pytest
from hypothesis import given, settings, strategies as st

from crypto.errors import LevelError, ParameterError, ShapeError
from tensor_ops import cli as tensor_cli
from tensor_ops.inference import Client, EncryptedModel, Server
from tensor_ops.model_plan import ModelPlan
from tensor_ops.nn import Conv2d, Flatten, Linear, Poly, Residual, Sequential, Square, _check_no_bootstrap_inside_blocks
from tensor_ops.packing import PackedAffine, PackedFork, PackedJoin, packed_stages
from tensor_ops.model_plan import ActivationStage
from tests.model.onnx_models import Builder, residual_block, run_onnx


def square_block(seed=4, shortcut=False, shortcut_first=False):
    """x -> conv 3x3 pad 1 -> square -> conv 3x3 pad 1 -> + x (or + conv1x1(x), whose node may come first in
    the graph) -> square -> GAP -> Gemm."""
    b = Builder((2, 4, 4), seed)
    if shortcut_first:
        skip = b.conv("x", 2, 2, 1, name="projection")
    h = b.act(b.conv("x", 2, 2, 3, name="conv1", pads=[1, 1, 1, 1]), "square")
    h = b.conv(h, 2, 2, 3, name="conv2", pads=[1, 1, 1, 1])
    if not shortcut_first:
        skip = b.conv("x", 2, 2, 1, name="projection") if shortcut else "x"
    s = b.act(b.node("Add", [h, skip], "residual"), "square")
    g = b.node("Flatten", [b.node("GlobalAveragePool", [s], "gap")])
    b.gemm(g, 2, 3, "fc")
    return b.model()


def gemm_block(seed=6):
    """x -> Gemm -> square -> Gemm -> + x -> Gemm (a residual MLP)."""
    b = Builder((6,), seed)
    h = b.gemm(b.act(b.gemm("x", 6, 6, "fc1"), "square"), 6, 6, "fc2")
    b.gemm(b.node("Add", ["x", h], "residual"), 6, 3, "fc3")
    return b.model()


# -- a noiseless simulated context with CKKS levels and scales -------------------------------------------------

class _Ct:
    __slots__ = ("values", "level", "scale")

    def __init__(self, values, level, scale):
        self.values, self.level, self.scale = values, level, float(scale)


class _Pt:
    def __init__(self, values, scale):
        self.values, self.scale = values, float(scale)


class _ScaledEvaluator:
    """Values exact; levels and scales as the real evaluator keeps them (vectors and scalars multiply at scale
    q_top, so a rescale restores the scale; ct x ct multiplies scales; rescale divides by q_top). An add of
    two ciphertexts whose scales differ counts in ``mismatched`` (the real one would align them by rounding,
    spending a level)."""

    def __init__(self, params, rotations):
        self.params, self.slots = params, params.slots
        self.rotation_steps = {int(k) % self.slots for k in rotations}
        self.mismatched = 0

    def _q(self, level):
        return float(math.prod(self.params.q_levels[level]))

    def _vec(self, x):
        return np.resize(np.asarray(x, dtype=np.float64), self.slots) if np.ndim(x) else float(x)

    def add(self, a, b):
        if isinstance(b, _Ct):
            if abs(a.scale / b.scale - 1) > 1e-12:
                self.mismatched += 1
            return _Ct(a.values + b.values, min(a.level, b.level), a.scale)
        return _Ct(a.values + (b.values if isinstance(b, _Pt) else self._vec(b)), a.level, a.scale)

    def neg(self, a):
        return _Ct(-a.values, a.level, a.scale)

    def mul(self, a, b):
        if isinstance(b, _Ct):
            return _Ct(a.values * b.values, min(a.level, b.level), a.scale * b.scale)
        if isinstance(b, _Pt):
            return _Ct(a.values * b.values, a.level, a.scale * b.scale)
        return _Ct(a.values * self._vec(b), a.level, a.scale * self._q(a.level))

    def rescale(self, a):
        if a.level == 0:
            raise LevelError("rescale at level 0")
        return _Ct(a.values, a.level - 1, a.scale / self._q(a.level))

    def mul_rescale(self, a, b):
        return self.rescale(self.mul(a, b))

    def rotate(self, a, k):
        if k % self.slots and k % self.slots not in self.rotation_steps:
            raise AssertionError(f"no rotation key for step {k}")
        return _Ct(np.roll(a.values, -k), a.level, a.scale)

    def rotate_hoisted(self, a, steps):
        return {k: self.rotate(a, k) for k in steps}

    def to_level(self, a, level):
        if level > a.level:
            raise LevelError(f"to_level {level} above {a.level}")
        return _Ct(a.values, level, a.scale)

    def from_host(self, a):  # the host evaluator's identity (EncryptedModel.forward uploads once)
        return a

    to_host = from_host


class _ScaledContext:
    def __init__(self, params, rotations):
        self.params = params
        self.evaluator = _ScaledEvaluator(params, rotations)
        self.rotation_steps = tuple(rotations)

    def encode(self, values, level=None, scale=None):
        return _Pt(np.resize(np.asarray(values, dtype=np.float64), self.params.slots),
                   self.params.scale if scale is None else scale)


def simulate(model, x, plan):
    """(outputs, the context): ``plan`` run by the server's EncryptedModel on the simulated context; every
    join's addition is checked to meet equal scales and levels."""
    ctx = _ScaledContext(plan.params, plan.rotations)
    server = EncryptedModel(model, plan, ctx)
    joins = []
    original = server._join

    def checked(index, stage, plan_stage, ct, skip):
        before = ctx.evaluator.mismatched
        out = original(index, stage, plan_stage, ct, skip)
        joins.append((ctx.evaluator.mismatched - before, out.level == ct.level, out.scale / ct.scale - 1))
        return out

    server._join = checked
    outputs = []
    for v in plan.pack(x):
        ct = _Ct(np.asarray(v, dtype=np.float64), plan.input_level, plan.params.scale)
        outputs.append(server.forward(ct).values)
    return plan.unpack(outputs, len(x)), joins


# -- random residual chains ----------------------------------------------------------------------------------

def _linear(rng, n_out, n_in):
    return Linear(rng.normal(size=(n_out, n_in)) / math.sqrt(n_in), rng.normal(size=n_out) * 0.1)


@st.composite
def residual_chains(draw):
    """A random chain of Linear / activation / Residual (nested, identity or Linear shortcut) layers."""
    seed = draw(st.integers(0, 2**31))
    rng = np.random.default_rng(seed)
    n = draw(st.integers(2, 9))

    def chain(width, budget, allow_block):
        layers, depth = [], 0
        for _ in range(draw(st.integers(1, 3))):
            kinds = ["linear", "act", "block", "affine_block"] if allow_block else ["linear", "act"]
            kind = draw(st.sampled_from(kinds))
            if kind == "linear":
                layers.append(_linear(rng, width, width))
            elif kind == "act" and depth < budget:
                layers.append(draw(st.sampled_from([Square(), Poly("gelu", 3, (-4, 4)), Poly("relu", 4, (-3, 2))])))
                depth += 2
            elif kind == "block" and depth + 2 <= budget:
                inner, used = chain(width, min(budget - depth, 4), draw(st.booleans()))
                if not any(not layer.affine_layer for layer in inner):
                    inner.append(Square())
                shortcut = (_linear(rng, width, width),) if draw(st.booleans()) else ()
                layers.append(Residual(inner, shortcut))
                depth += used + 2
            elif kind == "affine_block":
                layers.append(Residual([_linear(rng, width, width)]))
        return layers, depth

    layers, _ = chain(n, 6, True)
    if not any(isinstance(layer, Residual) and not layer.affine_layer for layer in layers):
        layers.append(Residual([Square(), _linear(rng, n, n)]))
    layers.append(_linear(rng, draw(st.integers(1, 4)), n))
    return Sequential(layers, input_shape=(n,)), rng.uniform(-1, 1, (draw(st.integers(1, 5)), n))


@pytest.mark.filterwarnings("ignore::tensor_ops.nn.ActivationRangeWarning")  # the polynomials are the model
@settings(max_examples=20, deadline=None)
@given(residual_chains())
def test_random_residual_chains_encrypted_equal_the_float_reference(case):
    """Folded stages (``forward``) and the server's fork/join execution on a simulated context with CKKS
    levels and scales equal the layer-by-layer float reference; every join adds at equal level and scale
    (no rounding alignment), and the plan's depth is the levels the main path spends."""
    model, x = case
    reference = model.forward_layers(x)
    np.testing.assert_allclose(model.forward(x), reference, rtol=1e-9, atol=1e-9)
    plan = model.plan()
    got, joins = simulate(model, x, plan)
    np.testing.assert_allclose(got, reference, rtol=1e-9, atol=1e-9)
    assert len(joins) == sum(stage.kind == "join" for stage in plan.stages) > 0
    for mismatched, same_level, scale_error in joins:
        assert mismatched == 0 and same_level and abs(scale_error) < 1e-14
    assert plan.depth == model.depth() == sum(stage.depth for stage in plan.stages)
    assert ModelPlan.from_dict(plan.to_dict()) == plan


def test_packed_residual_stages_on_plain_slots_equal_the_model():
    """The naive twin (np.roll rotations) of every packed stage, a conv residual block with a projection
    shortcut and the pool after the join folded into both sides."""
    rng = np.random.default_rng(3)
    conv = lambda o, c, k, p: Conv2d(rng.normal(size=(o, c, k, k)) / k, rng.normal(size=o) * 0.1, padding=p)
    model = Sequential([conv(3, 2, 3, 1), Residual([Square(), conv(3, 3, 3, 1)], [conv(3, 3, 1, 0)]), Square(),
                        Flatten(), _linear(rng, 4, 3 * 6 * 6)], input_shape=(2, 6, 6))
    for choice in ("rotations", "dense"):
        stages, block = packed_stages(model, model.input_shape, {0: choice}, ActivationStage)
        # the fork is inside the first run: the skip is the kept input through the first convolution's map
        assert [type(s).__name__ for s in stages] == ["PackedFork", "PackedAffine", "ActivationStage", "PackedAffine",
                                                      "PackedJoin", "ActivationStage", "PackedAffine"]
        x = rng.uniform(-1, 1, (2, 2, 6, 6))
        v, kept = np.zeros(4 * block), []
        for b in range(2):
            v[b * block:b * block + x[b].size] = x[b].ravel()
        for stage in stages:
            if isinstance(stage, PackedFork):
                kept.append(v)
            elif isinstance(stage, PackedJoin):
                v = v + stage.apply_slots(kept.pop(), block)
            elif isinstance(stage, PackedAffine):
                v = stage.apply_slots(v, block)
            else:
                v = stage.apply(v)
        got = np.stack([v[b * block:b * block + 4] for b in range(2)])
        np.testing.assert_allclose(got, model.forward_layers(x), atol=1e-9)


def test_a_fork_inside_a_run_keeps_the_runs_input_and_spends_no_level():
    """Linear, then a block: the skip is the kept input through the first Linear (folded into the join's
    map), so the block costs the levels of its branch only."""
    rng = np.random.default_rng(4)
    model = Sequential([_linear(rng, 5, 5), Residual([Square(), _linear(rng, 5, 5)]), _linear(rng, 2, 5)],
                       input_shape=(5,))
    plan = model.plan()
    assert [s.kind for s in plan.stages] == ["fork", "affine", "activation", "affine", "join"]
    assert plan.depth == 3  # the Linear after the block folds into the branch's last map and the join's
    x = rng.uniform(-1, 1, (3, 5))
    got, joins = simulate(model, x, plan)
    np.testing.assert_allclose(got, model.forward_layers(x), rtol=1e-9, atol=1e-9)


def test_save_and_load_keep_residual_blocks(tmp_path):
    rng = np.random.default_rng(5)
    model = Sequential([Residual([_linear(rng, 4, 4), Square(), Residual([Poly("gelu", 3), _linear(rng, 4, 4)])],
                                 [_linear(rng, 4, 4)]), _linear(rng, 2, 4)], input_shape=(4,))
    model.save(tmp_path / "r.npz")
    loaded = Sequential.load(tmp_path / "r.npz")
    assert loaded.identity() == model.identity()
    assert [layer.kind for layer in loaded.layers] == ["residual", "linear"]
    inner = loaded.layers[0].layers[2]
    assert isinstance(inner, Residual) and inner.shortcut == () and len(loaded.layers[0].shortcut) == 1
    x = rng.uniform(-1, 1, (3, 4))
    np.testing.assert_array_equal(loaded.forward(x), model.forward(x))


def test_residual_blocks_are_validated():
    rng = np.random.default_rng(6)
    with pytest.raises(ShapeError, match="the branch gives"):
        Sequential([Residual([Square(), _linear(rng, 3, 4)])], input_shape=(4,))
    with pytest.raises(ParameterError, match="shortcut must be affine"):
        Residual([Square()], [Square()])
    with pytest.raises(ParameterError, match="must not be empty"):
        Residual([])
    # an affine block folds: no fork, no join, one map (I + A)
    folded = Sequential([Residual([_linear(rng, 4, 4)]), Square(), _linear(rng, 2, 4)], input_shape=(4,))
    assert "fork" not in [s.kind for s in folded.plan().stages] and folded.depth() == 3


def test_no_bootstrap_inside_a_residual_block():
    class S:
        def __init__(self, kind):
            self.kind = kind

    stages = [S("affine"), S("fork"), S("affine"), S("activation"), S("affine"), S("join"), S("activation")]
    _check_no_bootstrap_inside_blocks(stages, (1, 6))  # before the fork, after the join: fine
    with pytest.raises(ParameterError, match="inside the residual block of stages 1..5"):
        _check_no_bootstrap_inside_blocks(stages, (3,))


def test_the_plan_prints_prices_and_counts_the_skip():
    model = Sequential.load(_save(square_block(shortcut=True)))
    plan = model.plan()
    text = plan.explain()
    assert "residual fork" in text and "residual add" in text and "scale that lands exactly" in text
    join = next(s for s in plan.stages if s.kind == "join")
    assert join.diagonals > 0 and set(join.rotations) - {0} <= set(plan.rotations)
    assert plan.depth == 5 and plan.cost()["ct_pt"] >= join.diagonals
    without = Sequential.load(_save(square_block(shortcut=False))).plan()
    assert plan.estimated_seconds > without.estimated_seconds  # the projection is priced


_SAVED = {}


def _save(proto, name="m.onnx"):
    import tempfile

    key = proto.SerializeToString()
    if key not in _SAVED:
        path = tempfile.mkdtemp() + "/" + name
        onnx.save(proto, path)
        _SAVED[key] = path
    return _SAVED[key]


# -- real CKKS against onnxruntime -----------------------------------------------------------------------------

def test_onnx_residual_block_through_python_m_tensor_ops_infer(tmp_path, monkeypatch):
    """conv + square + conv + Add(x) + square + GAP + Gemm: ``infer`` writes the decrypted output, within 1e-3
    of onnxruntime's largest magnitude; the skip reaches the branch's level and exactly its scale."""
    proto = square_block()
    onnx.save(proto, tmp_path / "r.onnx")
    x = np.random.default_rng(0).uniform(-1, 1, (3, 2, 4, 4)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    branches, skips = [], []
    affine, join = EncryptedModel._affine, EncryptedModel._join

    def spy_join(self, index, stage, plan_stage, ct, skip):
        branches.append((ct.level, ct.scale))
        return join(self, index, stage, plan_stage, ct, skip)

    def spy_affine(self, index, stage, plan_stage, ct, scale=None):
        out = affine(self, index, stage, plan_stage, ct, scale)
        if scale is not None:
            skips.append((out.level, out.scale))
        return out

    monkeypatch.setattr(EncryptedModel, "_join", spy_join)
    monkeypatch.setattr(EncryptedModel, "_affine", spy_affine)
    assert tensor_cli.main(["infer", "--model", str(tmp_path / "r.onnx"), "--input", str(tmp_path / "x.npy"),
                            "--out", str(tmp_path / "y.npy")]) == 0
    y, want = np.load(tmp_path / "y.npy"), run_onnx(proto, x)
    assert y.shape == want.shape == (3, 3)
    assert np.max(np.abs(y - want)) <= 1e-3 * np.max(np.abs(want))
    assert len(branches) == len(skips) == 1
    (level, scale), (skip_level, skip_scale) = branches[0], skips[0]
    assert skip_level == level and abs(skip_scale / scale - 1) < 2.0 ** -50


def test_onnx_projection_shortcut_and_residual_mlp_against_onnxruntime():
    """Two branches from one fork (a 1x1 conv shortcut) and a Gemm residual MLP, client/server bytes."""
    for proto, shape in ((square_block(shortcut=True), (2, 4, 4)), (gemm_block(), (6,)),
                         (square_block(shortcut=True, shortcut_first=True), (2, 4, 4))):
        model = Sequential.load(_save(proto))
        client = Client(model=model, seed=1)
        server = Server(model, client.public_context())
        x = np.random.default_rng(1).uniform(-1, 1, (2, *shape))
        y = client.decrypt(server.evaluate(client.encrypt(x)))
        want = run_onnx(proto, x)
        assert np.max(np.abs(y - want)) <= 1e-3 * np.max(np.abs(want))


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::tensor_ops.nn.ActivationRangeWarning")
def test_relu_residual_block_agrees_in_argmax_with_calibration(tmp_path):
    """tests/model's block (conv, relu, conv, + x, relu, GAP, Gemm), relu fitted on calibration data, by
    ``python -m tensor_ops infer`` in a subprocess: the decrypted outputs' argmax equals onnxruntime's."""
    proto = residual_block()
    onnx.save(proto, tmp_path / "r.onnx")
    rng = np.random.default_rng(2)
    calibration = rng.uniform(-1, 1, (64, 4, 6, 6)).astype(np.float32)
    x = rng.uniform(-1, 1, (8, 4, 6, 6)).astype(np.float32)
    np.save(tmp_path / "cal.npy", calibration)
    np.save(tmp_path / "x.npy", x)
    from tests.model.test_cli import python_m

    result = python_m("tensor_ops", "infer", "--model", "r.onnx", "--calibration", "cal.npy", "--input", "x.npy",
                      "--out", "y.npy", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    y, want = np.load(tmp_path / "y.npy"), run_onnx(proto, x)
    np.testing.assert_array_equal(np.argmax(y, 1), np.argmax(want, 1))  # the plain reference: 500 of 500


def test_a_residual_model_served_over_http():
    """The HTTP endpoint (``tensor_ops.serve``) runs the residual MLP's plan; the remote client decrypts
    onnxruntime's output."""
    pytest.importorskip("uvicorn")
    from tensor_ops.serve import create_app, fetch_plan, remote_infer
    from tests.tensor_ops.test_serve import _running

    proto = gemm_block()
    model = Sequential.load(_save(proto))
    with _running(create_app(model)) as url:
        client = Client(plan=fetch_plan(url), seed=4)
        x = np.random.default_rng(4).uniform(-1, 1, (3, 6))
        y = remote_infer(url, client, x)
    assert any(stage.kind == "join" for stage in client.plan.stages)
    want = run_onnx(proto, x)
    assert np.max(np.abs(y - want)) <= 1e-3 * np.max(np.abs(want))


def test_residual_blocks_on_cipher_tensors_through_the_planner():
    """``model(cipher_tensor)``: the same fork/join stages on a CipherTensor (plain backend) equal ``forward``."""
    from tensor_ops.backends import PlainBackend
    from tensor_ops.tensor import encrypt as tensor_encrypt

    rng = np.random.default_rng(7)
    model = Sequential([_linear(rng, 6, 6), Residual([Square(), _linear(rng, 6, 6)], [_linear(rng, 6, 6)]),
                        _linear(rng, 2, 6)], input_shape=(6,))
    x = rng.uniform(-1, 1, (3, 6))
    backend = PlainBackend(2048, rotations=model.tensor_rotations(3, params="TOY"))
    y = model(tensor_encrypt(backend, x))
    np.testing.assert_allclose(y.decrypt(), model.forward_layers(x), atol=1e-9)


def test_bootstraps_are_placed_around_residual_blocks():
    """A residual model deeper than its (INSECURE toy, tests/tensor_ops/test_model_bootstrap.py) parameters'
    levels: bootstraps only between blocks, every stage fits its level, the fewest for blocks as units."""
    from tensor_ops.bootstrap_placement import min_bootstraps_brute_force
    from tests.tensor_ops.test_model_bootstrap import CONFIG, params

    rng = np.random.default_rng(8)
    blocks = [Residual([_linear(rng, 4, 4), Square(), _linear(rng, 4, 4), Square()]) for _ in range(5)]
    model = Sequential([*blocks, _linear(rng, 2, 4)], input_shape=(4,))
    plan = model.plan(params=params(), bootstrap=CONFIG)
    assert plan.depth > params().max_level and plan.bootstraps
    _check_no_bootstrap_inside_blocks(plan.stages, plan.bootstraps)
    forks = [i for i, s in enumerate(plan.stages) if s.kind == "fork"]
    assert set(plan.bootstraps) <= set(forks) | {len(plan.stages) - 1}
    block_depths = [sum(s.depth for s in plan.stages[f:j + 1]) for f, j in
                    zip(forks, [i for i, s in enumerate(plan.stages) if s.kind == "join"])]
    assert len(plan.bootstraps) == min_bootstraps_brute_force(block_depths + [plan.stages[-1].depth],
                                                              plan.bootstrap_plan.levels_left, params().max_level)
    assert ModelPlan.from_dict(plan.to_dict()) == plan


def test_a_skip_below_the_branch_is_refused_not_aligned():
    """A kept ciphertext without a level above the branch's output (as a bootstrap inside the block would
    leave it) raises LevelError naming both levels; the join never rounds one scale onto the other."""
    rng = np.random.default_rng(9)
    model = Sequential([Residual([Square(), _linear(rng, 3, 3)]), _linear(rng, 2, 3)], input_shape=(3,))
    plan = model.plan()
    ctx = _ScaledContext(plan.params, plan.rotations)
    server = EncryptedModel(model, plan, ctx)
    index = next(i for i, s in enumerate(plan.stages) if s.kind == "join")
    ct = _Ct(np.zeros(plan.params.slots), 1, plan.params.scale)
    with pytest.raises(LevelError, match="skip is at level 1, the branch's output at 1"):
        server._join(index, server._stages[index], plan.stages[index], ct, ct)


@settings(max_examples=15, deadline=None)
@given(st.integers(1, 3), st.integers(1, 3), st.booleans(), st.booleans(), st.sampled_from(["rotations", "dense"]),
       st.booleans(), st.integers(0, 2**31))
def test_random_conv_residual_blocks_on_plain_slots(c, o, pool, projection, choice, nested, seed):
    """Convolutional blocks (a pool inside the branch and the shortcut, a 1x1 projection, a nested block,
    a pool after the join) through the packed stages' naive twin equal the layer-by-layer reference."""
    from tensor_ops.nn import AvgPool2d

    rng = np.random.default_rng(seed)
    conv = lambda o_, c_, k, p: Conv2d(rng.normal(size=(o_, c_, k, k)) / k, rng.normal(size=o_) * 0.1, padding=p)
    inner = [Square(), conv(o, o, 3, 1)]
    if nested:
        inner = [Residual(inner)]
    branch = inner + [AvgPool2d(2)] * pool
    shortcut = [conv(o, o, 1, 0)] * projection + [AvgPool2d(2)] * pool
    side = 8 // (2 * (1 + pool))
    model = Sequential([conv(o, c, 3, 1), Residual(branch, shortcut), AvgPool2d(2), Square(), Flatten(),
                        _linear(rng, 3, o * side ** 2)], input_shape=(c, 8, 8))
    assert [layer.kind for layer in model.plan_layers][3 + nested] == "conv2d"
    stages, block = packed_stages(model, model.input_shape, {0: choice, 3 + nested: choice}, ActivationStage)
    x = rng.uniform(-1, 1, (2, c, 8, 8))
    v, kept = np.zeros(4 * block), []
    for b in range(2):
        v[b * block:b * block + x[b].size] = x[b].ravel()
    for stage in stages:
        if isinstance(stage, PackedFork):
            kept.append(v)
        elif isinstance(stage, PackedJoin):
            v = v + stage.apply_slots(kept.pop(), block)
        elif isinstance(stage, PackedAffine):
            v = stage.apply_slots(v, block)
        else:
            v = stage.apply(v)
    got = np.stack([v[b * block:b * block + 3] for b in range(2)])
    np.testing.assert_allclose(got, model.forward_layers(x), atol=1e-8)
    np.testing.assert_allclose(model.forward(x), model.forward_layers(x), atol=1e-8)
