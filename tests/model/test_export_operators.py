"""Held-out models exported the way users export them are read, and their float forward (with the client's
post-processing) equals onnxruntime's outputs: MaxPool, Clip / ReLU6, 1-D Conv / AveragePool / MaxPool
(read as 2-D windows of height 1), ResNet's option-A shortcut (Slice with steps + Pad: a public 0/1 map),
a final Softmax / LogSoftmax / ArgMax (run by the client after decryption), skl2onnx's linear models
(LinearClassifier, LinearRegressor, Scaler, Normalizer, ZipMap, Cast) with their two outputs. A refused
model lists every unsupported node at once, each with its rewrite where one exists."""
import numpy as np
import pytest

import hezk.model
from hezk.model import Contraction, MaxPool, UnsupportedOperator, read_onnx
from tests.model.exported_models import (activation_mlp, assert_outputs_agree, iris, onnxruntime_outputs,
                                         sklearn_export, sklearn_models, torch_export, torch_models)
from tests.model.onnx_models import Builder


@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
@pytest.mark.parametrize("name", ["vgg_maxpool", "mobilenet_relu6", "ecg_1d", "resnet_option_a"])
def test_torch_exports_read_and_agree_with_onnxruntime(name, dynamo):
    module, shape = torch_models()[name]
    model = torch_export(module, shape, dynamo=dynamo)
    graph = read_onnx(model)
    x = np.random.default_rng(1).normal(size=(3, *shape)).astype(np.float32)
    assert_outputs_agree(graph.run(x), onnxruntime_outputs(model, x))
    assert all(node.kind != "unknown" for node in graph.nodes)


def test_the_shapes_the_rewrites_take():
    """ReLU6 is Clip(0, 6); the ECG net's windows are 2-D of height 1; the option-A shortcut is 0/1
    contractions (no new node kind); a final softmax is the client's, said so in the summary."""
    models = torch_models()
    relu6 = read_onnx(torch_export(*models["mobilenet_relu6"]))
    assert [n.bounds for n in relu6.nodes if n.kind == "activation"] == [(0.0, 6.0)]
    assert "run by the client after decryption: y = softmax axis 1" in relu6.summary()
    ecg = read_onnx(torch_export(*models["ecg_1d"]))
    pools = [n for n in ecg.nodes if isinstance(n, MaxPool)]
    assert len(pools) == 1 and pools[0].patches.kernel == (1, 2)
    assert all(n.patches.kernel[0] == 1 for n in ecg.nodes if isinstance(n, Contraction) and n.patches)
    resnet = read_onnx(torch_export(*models["resnet_option_a"]))
    assert {n.kind for n in resnet.nodes} <= {"contraction", "affine", "add", "activation", "reshape"}
    selections = [n for n in resnet.nodes if n.op in ("Slice", "Pad")]
    assert selections and all(set(np.unique(n.weight)) <= {0.0, 1.0} for n in selections)


@pytest.mark.parametrize("target_opset", [None, {"": 17, "ai.onnx.ml": 3}], ids=["skl2onnx-default", "opset17"])
@pytest.mark.parametrize("name", list(sklearn_models()))
def test_skl2onnx_linear_models_read_and_agree_with_onnxruntime(name, target_opset):
    estimator, options = sklearn_models()[name]
    model = sklearn_export(estimator, options, target_opset)
    if target_opset is None and name == "logistic_3_classes":
        assert {o.domain: o.version for o in model.opset_import}[""] < 13  # what a user's export carries
    graph = read_onnx(model)
    x = iris()[::7]
    assert_outputs_agree(graph.run(x), onnxruntime_outputs(model, x))
    scores = graph.forward(x)  # the part the engines compute: the affine scores
    assert scores.shape == (len(x), 1 if name == "linear_regression" else (2 if name == "logistic_binary" else 3))
    if name != "linear_regression":
        assert "argmax" in graph.client_text() and [p.name for p in graph.postprocess] == \
            [o.name for o in model.graph.output]


def test_postprocess_survives_npz_and_leaves_other_digests_alone(tmp_path):
    estimator, options = sklearn_models()["logistic_3_classes"]
    graph = read_onnx(sklearn_export(estimator, options))
    hezk.model.save_npz(graph, tmp_path / "m.npz")
    again = hezk.model.read_npz(tmp_path / "m.npz")
    assert again.digest() == graph.digest() and again.postprocess == graph.postprocess
    bare = hezk.model.Graph(graph.input, graph.input_shape, graph.nodes, graph.output)
    assert bare.digest() != graph.digest()  # the client's steps are part of the model's identity
    assert "postprocess" not in bare.records()[0] and "bounds" not in str(bare.records()[0])


def relu_net():
    b = Builder((2, 6, 6), 3)
    return b, b.node("Relu", [b.conv("x", 2, 2, 3)])


@pytest.mark.parametrize("build", [
    lambda b, x: b.node("Clip", [x, b.const(np.float32(-0.5)), b.const(np.float32(0.7))]),
    lambda b, x: b.node("Clip", [x, "", b.const(np.float32(0.3))]),
    lambda b, x: b.node("Max", [x, b.const(np.float32(0.2))]),
    lambda b, x: b.node("Min", [x, b.const(np.float32(0.4)), b.const(np.float32(0.6))]),
    lambda b, x: b.node("LeakyRelu", [x], alpha=0.1),
    lambda b, x: b.node("HardSigmoid", [x]),
    lambda b, x: b.node("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
    lambda b, x: b.node("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1),
    lambda b, x: b.node("GlobalMaxPool", [x]),
    lambda b, x: b.node("ReduceMean", [x], axes=[2, 3], keepdims=0),
    lambda b, x: b.node("Pad", [x, b.const(np.array([0, 0, 1, 2, 0, 0, 2, 0]))], mode="reflect"),
    lambda b, x: b.node("Pad", [x, b.const(np.array([0, 1, 0, 1, 0, 0, 1, 0])), b.const(np.float32(0.5))]),
    lambda b, x: b.node("Pad", [x, b.const(np.array([0, 0, 1, 1, 0, 0, 1, 1]))], mode="edge"),
    lambda b, x: b.node("Slice", [x, b.const(np.array([-1, 1])), b.const(np.array([-9, 6])), b.const(np.array([2, 3])),
                                  b.const(np.array([-2, 2]))]),
    lambda b, x: b.node("Concat", [x, b.node("Slice", [x, b.const(np.array([1])), b.const(np.array([2])),
                                                       b.const(np.array([1]))])], axis=1),
    lambda b, x: b.node("Concat", [x, b.const(np.full((1, 1, 4, 4), 0.25, np.float32))], axis=-3),
], ids=["clip", "clip-max-only", "max-const", "min-consts", "leaky-relu", "hard-sigmoid", "maxpool-padded",
        "maxpool-ceil", "global-maxpool", "reduce-mean", "pad-reflect", "pad-value", "pad-edge", "slice-steps",
        "concat-computed", "concat-constant"])
def test_operator_rewrites_agree_with_onnxruntime(build):
    b, x = relu_net()
    build(b, x)
    model = b.model()
    sample = np.random.default_rng(4).normal(size=(3, 2, 6, 6))
    got = read_onnx(model).forward(sample)
    np.testing.assert_allclose(got, onnxruntime_outputs(model, sample)[0], atol=1e-5)


def test_every_unsupported_node_is_listed_with_its_rewrite():
    """Three refusals in one model: one error names all three (the first as op/node), with the rewrites."""
    b = Builder((4,))
    h = b.node("LogSoftmax", [b.gemm("x", 4, 4)], "early_softmax")  # not last: the client computes it
    h = b.node("Elu", [b.gemm(h, 4, 4, name="after_softmax")], "elu", alpha=0.5)
    b.node("Erf", [b.gemm(h, 4, 3)], "lonely_erf")
    with pytest.raises(UnsupportedOperator) as info:
        read_onnx(b.model())
    error = info.value
    assert [(p.op, p.node) for p in error.problems] == [("Gemm", "after_softmax"), ("Elu", "elu"),
                                                                  ("Erf", "lonely_erf")]
    assert (error.op, error.node) == ("Gemm", "after_softmax")
    text = str(error)
    assert text.startswith("3 unsupported operators")
    assert "reads 't4', which the client computes after decryption (logsoftmax" in text
    assert "move them after every other operator" in text and "alpha=0.5: only the default alpha=1" in text
    assert "nn.GELU()" in text


def test_nodes_after_a_refused_one_are_still_checked():
    """Shape inference carries the sample shape past a refused node, so a refusal further on is found too."""
    b = Builder((2, 4, 4))
    h = b.node("Relu", [b.node("LRN", ["x"], "lrn", size=3)])
    b.node("AveragePool", [h], "ceil_pool", kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)
    with pytest.raises(UnsupportedOperator) as info:
        read_onnx(b.model())
    assert [p.node for p in info.value.problems] == ["lrn", "ceil_pool"]
    assert "ceil_mode=1 (rewrite: export with ceil_mode=False" in str(info.value)


def two_outputs(builder, first, second, second_type):
    """The builder's graph with the two outputs (first: float, second of ``second_type``)."""
    import onnx
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [builder.batch, *builder.input_shape])
    outputs = [helper.make_tensor_value_info(first, TensorProto.FLOAT, None),
               helper.make_tensor_value_info(second, second_type, None)]
    model = helper.make_model(helper.make_graph(builder.nodes, "two", [x], outputs, builder.inits),
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = min(model.ir_version, 9)
    return onnx.shape_inference.infer_shapes(model)


def test_several_outputs_from_one_computed_tensor_and_the_refusal_of_two():
    from onnx import TensorProto

    b = Builder((4,))
    logits = b.gemm("x", 4, 3)
    label = b.node("ArgMax", [logits], "label", axis=1, keepdims=0)
    model = two_outputs(b, logits, label, TensorProto.INT64)
    graph = read_onnx(model)
    x = np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32)
    out = graph.run(x)
    assert list(out) == [logits, label] and np.array_equal(out[label], np.argmax(out[logits], axis=1))
    assert_outputs_agree(out, onnxruntime_outputs(model, x))
    two = Builder((4,))
    first, second = two.gemm("x", 4, 3), two.gemm("x", 4, 2)
    with pytest.raises(UnsupportedOperator, match="computed separately.*torch.cat") as info:
        read_onnx(two_outputs(two, first, second, TensorProto.FLOAT))
    assert second in str(info.value)


def test_malformed_new_operators_are_model_file_errors():
    b, x = relu_net()
    b.node("Clip", [x, b.const(np.float32(1.0)), b.const(np.float32(0.0))], "inverted")
    with pytest.raises(UnsupportedOperator, match="inverted.*every output 0.0"):
        read_onnx(b.model())
    b, x = relu_net()
    b.node("Slice", [x, b.const(np.array([0])), b.const(np.array([1])), b.const(np.array([0]))], "batch_cut")
    with pytest.raises(UnsupportedOperator, match="batch_cut.*batch axis"):
        read_onnx(b.model())
    b, x = relu_net()
    b.node("Max", [x, b.node("Relu", [x])], "two_tensors")
    with pytest.raises(UnsupportedOperator, match=r"two_tensors.*rewrite: max\(a, b\) = b \+ relu\(a - b\)"):
        read_onnx(b.model())


def test_the_graph_proof_refuses_every_unprovable_node_in_one_line(monkeypatch):
    """The proof half proves MaxPool (padded too), Clip (lowered to public selections, see
    tests/proofs/test_graph_maxpool_clip.py), products of two computed tensors and masked Softmax; what it cannot
    prove (here, with Sigmoid taken off the provable list, two Sigmoids) is refused in one ModelError naming every
    such node, and only those."""
    import proofs.graph_quantize as GQ
    from hezk.model import Activation, Graph, Softmax
    from proofs.errors import ModelError
    from proofs.graph_quantize import quantize_graph

    b, x = relu_net()
    pool = b.node("MaxPool", [x], "pool", kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    relu6 = b.node("Clip", [x, b.const(np.float32(0.0)), b.const(np.float32(6.0))], "relu6")
    b.node("MatMul", [pool, relu6], "prod")
    graph = read_onnx(b.model())
    mask = np.tril(np.ones(graph.output_shape[-2:]))
    last = len(graph.output_shape) - 1
    nodes = graph.nodes + (Activation("sig_a", "Sigmoid", (graph.output,), "a", "sigmoid"),
                           Activation("sig_b", "Sigmoid", ("a",), "b", "sigmoid"))
    unprovable = Graph(graph.input, graph.input_shape, nodes, "b")
    calibration = np.random.default_rng(0).normal(size=(4, 2, 6, 6))
    with monkeypatch.context() as patch:
        patch.setattr(GQ, "PROVABLE_ACTIVATIONS", tuple(f for f in GQ.PROVABLE_ACTIVATIONS if f != "sigmoid"))
        with pytest.raises(ModelError, match=r"operator Sigmoid \(node 'sig_a'\).*, "
                                             r"operator Sigmoid \(node 'sig_b'\).* - 2 operators are not provable"):
            quantize_graph(unprovable, calibration)
    masked = Graph(graph.input, graph.input_shape, graph.nodes + (
        Softmax("masked", "Softmax", (graph.output,), "y", axis=last, mask=mask),), "y")
    quantize_graph(graph, calibration)  # the MaxPool, the Clip and the product are proven
    quantize_graph(masked, calibration)  # and a masked Softmax


def test_an_old_opset_is_upgraded_and_one_the_converter_cannot_upgrade_is_refused():
    """Opset < 13 goes through ONNX's version converter (Clip's attributes become inputs); a model the converter
    cannot upgrade, or one that imports no default opset yet uses default-domain operators, is a ModelFileError."""
    import onnx
    from onnx import helper

    from hezk.model import ModelFileError

    def clip_model(opset, op="Clip", **attributes):
        node = helper.make_node(op, ["x"], ["y"], **attributes)
        graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 4])],
                                  [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 4])])
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)] if opset else [])

    x = np.array([[-3.0, -0.5, 0.5, 9.0]], dtype=np.float32)
    upgraded = read_onnx(clip_model(9, min=-1.0, max=6.0))
    np.testing.assert_allclose(upgraded.forward(x), np.clip(x, -1.0, 6.0))
    with pytest.raises(ModelFileError, match="opset"):
        read_onnx(clip_model(None))
    with pytest.raises(ModelFileError, match="could not upgrade"):
        read_onnx(clip_model(9, op="NoSuchOperator"))


ELEMENTWISE = {"Softplus": "softplus", "Softsign": "softsign", "Hardswish": "hardswish", "Mish": "mish",
               "ELU": "elu", "CELU": "elu", "SELU": "selu"}


@pytest.mark.parametrize("module_name, dynamo", [(name, False) for name in sorted(ELEMENTWISE)] + [
    ("Softplus", True), ("Softsign", True), ("Mish", True),
    *[pytest.param(name, True, marks=pytest.mark.slow) for name in ("CELU", "ELU", "Hardswish", "SELU")]])
def test_univariate_activations_are_read_by_name_and_agree_with_onnxruntime(module_name, dynamo):
    """Each elementwise torch activation is one Activation node of its function (the default exporter's
    thresholded softplus, Where(x > 20, x, softplus x), included), and the graph's float forward equals
    onnxruntime's; a non-default parameter is refused naming it."""
    model = activation_mlp(module_name, dynamo=dynamo)
    graph = read_onnx(model)
    assert [n.function for n in graph.nodes if n.kind == "activation"] == [ELEMENTWISE[module_name]]
    x = np.random.default_rng(1).normal(scale=3.0, size=(16, 6)).astype(np.float32)
    np.testing.assert_allclose(graph.forward(x), onnxruntime_outputs(model, x)[0], atol=1e-5)


def test_activation_parameters_other_than_the_default_are_refused():
    torch = pytest.importorskip("torch")
    module = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ELU(alpha=0.3))
    with pytest.raises(UnsupportedOperator, match="alpha=0.3: only the default alpha=1"):
        read_onnx(torch_export(module, (4,)))
