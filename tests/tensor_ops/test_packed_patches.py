"""Issue 12 item 3: the "patches" lowering (im2col as a layout) of a convolution that reads the model input."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from crypto.errors import ParameterError, ShapeError
from crypto.rlwe import Ciphertext
from tensor_ops.inference import Client, EncryptedModel, Server, pack_message, unpack_message
from tensor_ops.model_plan import ActivationStage, ModelPlan
from tensor_ops.nn import Conv2d, Flatten, Linear, Sequential, Square
from tensor_ops.packing import PackedAffine, gather_patches, input_layout, packed_stages, patch_gather

from tests.model.onnx_models import Builder, run_onnx
from tests.tensor_ops.test_packed_inference import RecordingEvaluator


def strided_cnn(seed, c, o, size, kernel, stride, padding):
    rng = np.random.default_rng(seed)
    conv = Conv2d(rng.normal(0, .3, (o, c, kernel, kernel)), rng.normal(0, .1, o), stride=stride, padding=padding)
    n = int(np.prod(conv.output_shape((c, size, size))))
    return Sequential([conv, Square(), Flatten(), Linear(rng.normal(0, .3, (3, n)), rng.normal(0, .1, 3))],
                      input_shape=(c, size, size))


def run_slots(stages, block, vectors):
    """The naive twin of the server: each stage on the plain slot vector (np.roll rotations)."""
    v = vectors
    for stage in stages:
        v = stage.apply_slots(v, block) if isinstance(stage, PackedAffine) else stage.apply(v)
    return v


def test_patch_gather_equals_the_naive_im2col():
    x = np.arange(2 * 5 * 4, dtype=float).reshape(1, 2, 5, 4) + 1
    got = gather_patches(x, patch_gather((2, 5, 4), (3, 2), 2, 1)).reshape(2, 3, 2, 3, 3)  # c u v i j
    padded = np.pad(x[0], ((0, 0), (1, 1), (1, 1)))
    for c, u, v, i, j in np.ndindex(2, 3, 2, 3, 3):
        assert got[c, u, v, i, j] == padded[c, 2 * i + u, 2 * j + v]


@settings(max_examples=15, deadline=None)
@given(st.integers(1, 3), st.integers(1, 4), st.integers(4, 9), st.sampled_from([1, 2, 3]), st.integers(1, 3),
       st.integers(0, 2), st.integers(0, 100))
def test_patches_stages_on_plain_slots_equal_the_model(c, o, size, kernel, stride, padding, seed):
    model = strided_cnn(seed, c, o, size, kernel, stride, padding)
    choices = {0: "patches"}
    stages, block = packed_stages(model, model.input_shape, choices, ActivationStage)
    gather = patch_gather(model.input_shape, (kernel, kernel), stride, padding)
    assert input_layout(model, model.input_shape, choices) == (kernel, kernel, stride, padding)
    x = np.random.default_rng(seed).uniform(-1, 1, (2, *model.input_shape))
    v = np.zeros(2 * block)
    for b, row in enumerate(gather_patches(x, gather)):
        v[b * block:b * block + len(row)] = row
    v = run_slots(stages, block, v)
    got = np.stack([v[b * block:b * block + 3] for b in range(2)])
    np.testing.assert_allclose(got, model.forward(x), atol=1e-9)
    k, p = c * kernel * kernel, len(gather) // (c * kernel * kernel)
    assert set(stages[0].distinct_offsets.tolist()) <= {(i - j) * p for i in range(k) for j in range(o)}


def test_patches_only_for_the_convolution_reading_the_input():
    rng = np.random.default_rng(0)
    model = Sequential([Conv2d(rng.normal(size=(2, 1, 3, 3))), Square(), Conv2d(rng.normal(size=(2, 2, 3, 3))),
                        Square(), Flatten(), Linear(rng.normal(size=(2, 8)))], input_shape=(1, 6, 6))
    packed_stages(model, model.input_shape, {0: "patches"}, ActivationStage)
    with pytest.raises(ParameterError, match=r"choices\[2\]='patches': layer 2 does not read the model input"):
        packed_stages(model, model.input_shape, {2: "patches"}, ActivationStage)
    with pytest.raises(ParameterError, match="choices"):
        packed_stages(model, model.input_shape, {0: "im2col"}, ActivationStage)


def patches_cnn():
    """conv 3x3 -> 16 on 1x6x6 (no padding), square, 16*16 -> 4: few input channels, many output ones, where
    the cost model prefers the client's patches."""
    b = Builder((1, 6, 6), 7)
    x = b.act(b.conv("x", 1, 16, 3, name="conv1"), "square")
    x = b.node("Flatten", [x], "flatten")
    b.gemm(x, 16 * 4 * 4, 4, "fc")
    return b.model()


@pytest.fixture(scope="module")
def patches_served(tmp_path_factory):
    import onnx
    proto = patches_cnn()
    path = tmp_path_factory.mktemp("patches") / "m.onnx"
    onnx.save(proto, path)
    model = Sequential.load(path)
    plan = model.plan(params="TOY")
    client = Client(plan=plan, seed=2, allow_insecure=True)
    return proto, model, plan, client, Server(model, client.public_context())


def test_the_plan_chooses_patches_and_prints_it(patches_served):
    _, model, plan, _, _ = patches_served
    assert plan.choices == {0: "patches"} and plan.patches == (3, 3, 1, 0) and plan.layout == "patches"
    layer = plan.layers[0]
    assert layer.patches_plan_cost < min(layer.rotations_cost, layer.dense_plan_cost)
    text = plan.explain()
    assert "runs patches" in text and "input layout: im2col patches" in text and "144 slots per sample" in text
    assert ModelPlan.from_dict(plan.to_dict()).patches == plan.patches
    with pytest.raises(ParameterError, match="patches="):
        ModelPlan.from_dict(dict(plan.to_dict(), patches=[3, 3, 0]))


def test_encrypted_patches_cnn_matches_onnxruntime_and_runs_the_printed_rotations(patches_served):
    proto, model, plan, client, server = patches_served
    x = np.random.default_rng(3).uniform(-1, 1, (3, 1, 6, 6))
    request = client.encrypt(x)
    header, blobs = unpack_message(request, "request")
    assert header["layout"] == "patches" and header["sample_shape"] == [1, 6, 6]
    y = client.decrypt(server.evaluate(request))
    want = run_onnx(proto, x)
    assert np.abs(y - want).max() <= 1e-3 * np.abs(want).max()
    printed = set()
    for stage in plan.stages:
        if stage.kind == "affine":
            steps = [k for k in stage.rotations if k]
            assert f"rotation steps {steps}" in plan.explain()
            printed |= set(steps)
    engine = EncryptedModel(model, plan, server.context)
    engine._evaluator = recorder = RecordingEvaluator(engine._evaluator)
    engine.forward(Ciphertext.from_bytes(blobs[0], server.context))
    assert recorder.steps - {0} == printed == set(plan.rotations)


def test_a_request_in_the_flat_layout_is_refused_by_a_patches_server(patches_served):
    _, _, plan, client, server = patches_served
    header, blobs = unpack_message(client.encrypt(np.zeros((1, 6, 6))), "request")
    del header["layout"]
    flat = pack_message("request", header, [Ciphertext.from_bytes(b, server.context) for b in blobs])
    with pytest.raises(ShapeError, match="'flat' layout, this server's plan reads 'patches'"):
        server.evaluate(flat)
