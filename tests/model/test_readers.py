"""hezk.model: the float reference of the description read from ONNX against onnxruntime on the same input,
the readers' refusals, the npz round trip and the digest."""
from __future__ import annotations

import ast
import dataclasses
import pathlib

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from onnx import helper

import hezk.model
from hezk.model import Contraction, ModelFileError, UnsupportedOperator, read_onnx
from tests.model.onnx_models import (Builder, batchnorm_model, cifar, lenet, mlp, residual_block, run_onnx)

pytest.importorskip("onnxruntime")


def agree(model, x, rtol=1e-5):
    """The description's forward against onnxruntime, relative to the output's largest magnitude (float32
    in onnxruntime, float64 here)."""
    want = run_onnx(model, x)
    got = read_onnx(model).forward(x)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, atol=rtol * max(1.0, np.abs(want).max()))
    return read_onnx(model)


@pytest.mark.parametrize("activation", ["square", "relu"])
def test_mlp(activation):
    x = np.random.default_rng(0).uniform(-1, 1, (5, 32))
    graph = agree(mlp((32, 16, 10), activation), x)
    assert [n.kind for n in graph.nodes] == ["contraction", "activation", "contraction"]  # biases folded


@pytest.mark.slow
@pytest.mark.parametrize("activation", ["square", "relu"])
def test_mlp_784_128_10(activation):
    agree(mlp((784, 128, 10), activation), np.random.default_rng(1).uniform(0, 1, (16, 784)))


@pytest.mark.parametrize("activation", ["square", "relu"])
def test_lenet5(activation):
    graph = agree(lenet(activation), np.random.default_rng(2).uniform(0, 1, (3, 1, 28, 28)))
    convs = [n for n in graph.nodes if n.op == "Conv"]
    assert [c.equation for c in convs] == ["bgcuvij,gocuv->bgoij"] * 2
    assert graph.output_shape == (10,)


@pytest.mark.parametrize("activation", ["square", "relu"])
def test_cifar_cnn(activation):
    graph = agree(cifar(activation), np.random.default_rng(3).uniform(-1, 1, (2, 3, 32, 32)))
    assert graph.shape_of(next(n.output for n in graph.nodes if n.name == "conv1")) == (16, 32, 32)


def test_batchnorm_folds_into_the_contraction_before_it():
    model = batchnorm_model()
    graph = agree(model, np.random.default_rng(4).normal(size=(3, 2, 8, 8)))
    names = [n.name for n in graph.nodes]
    assert "bn1" not in names and "bn3" not in names  # folded into conv1 / fc
    assert "bn0" in names and "bn2" in names         # after the input and after a Relu: affine nodes


def test_residual_block():
    graph = agree(residual_block(), np.random.default_rng(5).normal(size=(4, 4, 6, 6)))
    add = next(n for n in graph.nodes if n.kind == "add")
    assert add.name == "residual" and graph.input in add.inputs


@pytest.mark.parametrize("kind", ["relu", "square", "sigmoid", "tanh", "silu"])
def test_elementwise_activations(kind):
    b = Builder((6,), 6)
    b.act(b.gemm("x", 6, 4), kind)
    graph = agree(b.model(), np.random.default_rng(6).normal(size=(3, 6)))
    assert graph.nodes[-1].function == kind


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_opset20(approximate):
    b = Builder((6,), 7, opset=20)
    b.node("Gelu", [b.gemm("x", 6, 4)], approximate=approximate)
    agree(b.model(), np.random.default_rng(7).normal(size=(3, 6)))


def erf_gelu(b, x, variant):
    """GELU written out with Erf as exporters write it below opset 20 (``torch``: torch.onnx.export's form,
    constants as Constant nodes)."""
    def constant(value):
        return b.node("Constant", [], value=onnx.numpy_helper.from_array(np.array(value, np.float32)))

    if variant == "torch":
        erf = b.node("Erf", [b.node("Div", [x, constant(2 ** 0.5)])], "gelu_erf")
        return b.node("Mul", [b.node("Mul", [x, b.node("Add", [erf, constant(1.0)])]), constant(0.5)])
    erf = b.node("Erf", [b.node("Mul", [b.const(np.float32(2 ** -0.5)), x])], "gelu_erf")
    total = b.node("Add", [b.const(np.float32(1.0)), erf])
    if variant == "half_first":
        return b.node("Mul", [b.node("Mul", [x, b.const(np.float32(0.5))]), total])
    return b.node("Mul", [x, b.node("Mul", [total, b.const(np.float32(0.5))])])


@pytest.mark.parametrize("variant", ["torch", "half_first", "half_on_the_sum"])
def test_gelu_written_out_with_erf_is_one_gelu(variant):
    """nn.GELU() exported by torch.onnx.export at opset 17 was refused as 'unsupported operator Erf'."""
    b = Builder((6,), 7)
    erf_gelu(b, b.gemm("x", 6, 5, "fc1"), variant)
    b.gemm(b.last, 5, 3, "fc2")
    graph = agree(b.model(), np.random.default_rng(7).normal(size=(4, 6)))
    assert [(n.kind, getattr(n, "function", None)) for n in graph.nodes] == [
        ("contraction", None), ("activation", "gelu"), ("contraction", None)]
    assert graph.nodes[1].name == "gelu_erf"


def test_an_erf_outside_a_gelu_is_still_refused_by_name():
    b = Builder((6,), 7)
    h = b.gemm("x", 6, 5)
    erf = b.node("Erf", [b.node("Div", [h, b.const(np.float32(2 ** 0.5))])], "lonely_erf")
    b.node("Mul", [b.node("Add", [erf, b.const(np.float32(1.0))]), b.const(np.float32(0.5))])  # no x factor
    with pytest.raises(UnsupportedOperator, match="operator Erf \\(node 'lonely_erf'\\)"):
        read_onnx(b.model())


def test_pow_sub_div_transpose_reshape():
    b = Builder((2, 3, 4), 8)
    x = b.node("Transpose", ["x"], perm=[0, 2, 3, 1])                      # (3, 4, 2)
    x = b.node("Sub", [x, b.const(b.rng.normal(size=(2,)))])
    x = b.node("Div", [x, b.const(b.rng.uniform(1, 2, size=(1, 1, 4, 1)))])
    x = b.node("Pow", [x, b.const(2.0)])
    x = b.node("Reshape", [x, b.const(np.array([0, 6, -1]), "shape")])  # int64 needed
    agree(b.model(), np.random.default_rng(8).normal(size=(2, 2, 3, 4)))


def test_torch_style_view_of_the_batch_size_and_squeeze_unsqueeze():
    """x.view(x.size(0), -1) exports Shape -> Gather(0) -> Unsqueeze -> Concat(-1) -> Reshape."""
    b = Builder((2, 5, 5), 19)
    h = b.conv("x", 2, 3, 3, name="conv")
    size = b.node("Unsqueeze", [b.node("Gather", [b.node("Shape", [h]), b.const(np.array(0))], axis=0),
                                b.const(np.array([0]))])
    flat = b.node("Reshape", [h, b.node("Concat", [size, b.const(np.array([-1]))], axis=0)], "view")
    b.node("Squeeze", [b.node("Unsqueeze", [b.gemm(flat, 27, 4), b.const(np.array([2]))]), b.const(np.array([2]))])
    agree(b.model(), np.random.default_rng(19).normal(size=(3, 2, 5, 5)))


def test_arithmetic_on_the_batch_size_is_refused():
    b = Builder((4,))
    size = b.node("Gather", [b.node("Shape", ["x"]), b.const(np.array([0]))], axis=0)
    doubled = b.node("Mul", [size, b.const(np.array([2]))], "double")
    b.node("Reshape", ["x", b.node("Concat", [doubled, b.const(np.array([-1]))], axis=0)])
    with pytest.raises(UnsupportedOperator, match="Mul \\(node 'double'\\).*batch size"):
        read_onnx(b.model())


@pytest.mark.parametrize("trans_b", [0, 1])
@pytest.mark.parametrize("c_shape", [None, (), (5,), (1, 5)])
@pytest.mark.parametrize("alpha, beta", [(1.0, 1.0), (0.5, -2.0)])
def test_gemm_variants(trans_b, c_shape, alpha, beta):
    b = Builder((7,), 9)
    w = b.weight(5, 7)
    inputs = ["x", b.const(w if trans_b else w.T)]
    if c_shape is not None:
        inputs.append(b.const(b.rng.normal(size=c_shape)))
    b.node("Gemm", inputs, "g", transB=trans_b, alpha=alpha, beta=beta)
    agree(b.model(), np.random.default_rng(9).normal(size=(4, 7)))


def test_matmul_plus_add_equals_gemm_and_has_its_digest():
    rng = np.random.default_rng(10)
    w, c = rng.normal(size=(5, 7)), rng.normal(size=5)
    gemm = Builder((7,))
    gemm.node("Gemm", ["x", gemm.const(w), gemm.const(c)], transB=1)
    matmul = Builder((7,))
    matmul.node("Add", [matmul.node("MatMul", ["x", matmul.const(w.T)]), matmul.const(c)])
    x = rng.normal(size=(3, 7))
    one, two = agree(gemm.model(), x), agree(matmul.model(), x)
    assert len(two.nodes) == 1 and two.nodes[0].bias is not None  # the Add is the contraction's bias
    np.testing.assert_allclose(one.forward(x), two.forward(x), atol=1e-12)


def test_matmul_on_a_sequence_and_a_constant_on_the_left():
    b = Builder((3, 4), 11)
    h = b.node("MatMul", ["x", b.const(b.weight(4, 6))])       # (3, 6)
    b.node("MatMul", [b.const(b.weight(2, 3)), h])             # (2, 6)
    agree(b.model(), np.random.default_rng(11).normal(size=(2, 3, 4)))


def test_gemm_trans_a_on_the_data_is_refused_by_name():
    b = Builder((7,))
    b.node("Gemm", ["x", b.const(np.ones((7, 5)))], "gt", transA=1)
    with pytest.raises(UnsupportedOperator, match=r"Gemm \(node 'gt'\).*transA"):
        read_onnx(_unchecked(b))


def _unchecked(b):
    x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["N", *b.input_shape])
    y = helper.make_tensor_value_info(b.last, onnx.TensorProto.FLOAT, None)
    return helper.make_model(helper.make_graph(b.nodes, "t", [x], [y], b.inits),
                             opset_imports=[helper.make_opsetid("", b.opset)])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(groups=st.sampled_from([1, 2, 3]), c_per=st.integers(1, 2), o_per=st.integers(1, 2), k=st.integers(1, 3),
       stride=st.tuples(st.integers(1, 3), st.integers(1, 2)), dilation=st.tuples(st.integers(1, 2), st.integers(1, 2)),
       pads=st.tuples(*[st.integers(0, 2)] * 4), size=st.tuples(st.integers(6, 9), st.integers(6, 9)),
       bias=st.booleans(), seed=st.integers(0, 2 ** 16))
def test_convolutions_with_stride_padding_dilation_groups(groups, c_per, o_per, k, stride, dilation, pads, size,
                                                         bias, seed):
    b = Builder((groups * c_per, *size), seed)
    b.conv("x", groups * c_per, groups * o_per, k, name="conv", group=groups, bias=bias, strides=list(stride),
           dilations=list(dilation), pads=list(pads))
    agree(b.model(), np.random.default_rng(seed).normal(size=(2, groups * c_per, *size)))


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER", "VALID"])
def test_conv_auto_pad(auto_pad):
    b = Builder((2, 7, 8), 12)
    b.node("Conv", ["x", b.const(b.weight(3, 2, 4, 3))], "conv", kernel_shape=[4, 3], strides=[2, 2],
           auto_pad=auto_pad)
    agree(b.model(), np.random.default_rng(12).normal(size=(2, 2, 7, 8)))


@pytest.mark.parametrize("count_include_pad", [0, 1])
@pytest.mark.parametrize("pads, strides", [((0, 0, 0, 0), (2, 2)), ((1, 0, 1, 1), (1, 2))])
def test_average_pool(count_include_pad, pads, strides):
    b = Builder((3, 7, 6), 13)
    b.node("AveragePool", ["x"], "pool", kernel_shape=[3, 2], strides=list(strides), pads=list(pads),
           count_include_pad=count_include_pad)
    agree(b.model(), np.random.default_rng(13).normal(size=(2, 3, 7, 6)))


@pytest.mark.parametrize("op, inputs, attrs", [("LRN", ["x"], {"size": 3}),
                                               ("Hardmax", ["x"], {}), ("Erf", ["x"], {})])
def test_unsupported_operator_is_refused_by_name_and_node(op, inputs, attrs):
    b = Builder((2, 4, 4))
    b.node("Relu", ["x"], "first")
    b.node(op, [b.last], "the_node", **attrs)
    with pytest.raises(UnsupportedOperator, match=f"operator {op} \\(node 'the_node'\\)") as info:
        read_onnx(b.model())
    assert (info.value.op, info.value.node) == (op, "the_node")


def test_mul_of_two_different_tensors_is_refused_and_old_opsets_are_upgraded():
    b = Builder((4,))
    b.node("Mul", [b.node("Relu", ["x"]), b.node("Sigmoid", ["x"])], "prod")
    with pytest.raises(UnsupportedOperator, match="Mul \\(node 'prod'\\)"):
        read_onnx(b.model())
    old = Builder((4,), opset=11)
    old.node("Relu", ["x"])
    x = np.array([[-1.0, 0.5, -2.0, 3.0]])
    np.testing.assert_array_equal(read_onnx(old.model()).forward(x), np.maximum(x, 0.0))


def test_symbolic_sample_shape_needs_an_input_shape(tmp_path):
    b = Builder(("H",))
    b.node("Relu", ["x"])
    model = _unchecked(b)
    with pytest.raises(hezk.model.MissingInputShape, match="symbolic"):
        read_onnx(model)
    assert read_onnx(model, input_shape=(5,)).input_shape == (5,)


def test_fixed_batch_and_a_file_path(tmp_path):
    b = Builder((4,), batch=1)
    b.gemm("x", 4, 3)
    onnx.save(b.model(), tmp_path / "m.onnx")
    graph = hezk.model.load(tmp_path / "m.onnx")
    x = np.random.default_rng(14).normal(size=(1, 4))
    np.testing.assert_allclose(graph.forward(x), run_onnx(b.model(), x), atol=1e-5)
    assert graph.forward(x[0]).shape == (3,)  # one sample without its batch axis


# -------------------------------------------------------------------------------- npz, digest, layering

@pytest.mark.parametrize("make", [lambda: mlp((12, 8, 4), "relu"), lenet, batchnorm_model, residual_block],
                         ids=["mlp", "lenet", "bn", "residual"])
def test_npz_round_trip_keeps_the_network_and_its_digest(tmp_path, make):
    graph = read_onnx(make())
    hezk.model.save_npz(graph, tmp_path / "m.npz")
    again = hezk.model.load(tmp_path / "m.npz")
    assert again.digest() == graph.digest()
    assert [(n.kind, n.name, n.op) for n in again.nodes] == [(n.kind, n.name, n.op) for n in graph.nodes]
    x = np.random.default_rng(15).normal(size=(2, *graph.input_shape))
    np.testing.assert_array_equal(again.forward(x), graph.forward(x))


def test_digest_is_the_network_not_its_names():
    one, two = read_onnx(mlp((6, 5, 3), seed=1)), read_onnx(mlp((6, 5, 3), seed=1))
    assert one.digest() == two.digest()
    rename = {one.input: "input", **{n.output: f"tensor{i}" for i, n in enumerate(one.nodes)}}
    renamed = hezk.model.Graph("input", one.input_shape, tuple(
        dataclasses.replace(n, name=f"other{i}", inputs=tuple(rename[t] for t in n.inputs), output=rename[n.output])
        for i, n in enumerate(one.nodes)), rename[one.output])
    assert renamed.digest() == one.digest()
    assert read_onnx(mlp((6, 5, 3), seed=2)).digest() != one.digest()
    assert read_onnx(mlp((6, 5, 3), activation="relu", seed=1)).digest() != one.digest()


def test_the_description_is_immutable():
    graph = read_onnx(mlp((6, 5, 3)))
    node = graph.nodes[0]
    assert isinstance(node, Contraction)
    with pytest.raises(ValueError):
        node.weight[0, 0] = 1.0
    with pytest.raises(AttributeError):
        node.equation = "bk,kn->bn"
    assert isinstance(graph.nodes, tuple)


def test_named_weights_files(tmp_path):
    rng = np.random.default_rng(16)
    w0, b0, w1, b1 = rng.normal(size=(5, 4)), rng.normal(size=5), rng.normal(size=(3, 5)), rng.normal(size=3)
    x = rng.normal(size=(2, 4))
    for activation, f in (("relu", lambda t: np.maximum(t, 0)), ("square", np.square)):
        np.savez(tmp_path / "a.npz", w0=w0, b0=b0, w1=w1, b1=b1, activation=activation)
        np.savez(tmp_path / "b.npz", w0=w0.T, b0=b0, w1=w1.T, b1=b1, act0=activation, act1="none")
        want = f(x @ w0.T + b0) @ w1.T + b1
        for name in ("a.npz", "b.npz"):
            np.testing.assert_allclose(hezk.model.load(tmp_path / name).forward(x), want, atol=1e-12)
    np.savez(tmp_path / "c.npz", w0=w0, b0=b0, w1=w1, b1=b1, act0="relu", act1="sigmoid")
    np.testing.assert_allclose(hezk.model.load(tmp_path / "c.npz").forward(x),
                               1 / (1 + np.exp(-(np.maximum(x @ w0.T + b0, 0) @ w1.T + b1))), atol=1e-12)
    np.savez(tmp_path / "d.npz", w0=w0, b0=b0, w1=w1, b1=b1, activation="swish_like")
    with pytest.raises(ModelFileError, match="swish_like"):
        hezk.model.load(tmp_path / "d.npz")


def test_bare_weights_are_refused_with_how_to_name_an_activation(tmp_path):
    rng = np.random.default_rng(17)
    np.savez(tmp_path / "m.npz", w0=rng.normal(size=(5, 4)), b0=rng.normal(size=5), w1=rng.normal(size=(3, 5)),
             b1=rng.normal(size=3))
    with pytest.raises(ModelFileError, match=r"names no activation.*activation='relu'.*act0="):
        hezk.model.load(tmp_path / "m.npz")


def test_sequential_save_files_are_read_with_their_named_activations(tmp_path):
    from tensor_ops.nn import AvgPool2d, Conv2d, Flatten, Linear, Poly, Sequential, Square

    rng = np.random.default_rng(18)
    model = Sequential([Conv2d(rng.normal(size=(2, 1, 3, 3)), rng.normal(size=2)), Square(), AvgPool2d(2),
                        Flatten(), Linear(rng.normal(size=(3, 8)), rng.normal(size=3)), Poly("relu", 4),
                        Linear(rng.normal(size=(2, 3)))], input_shape=(1, 6, 6))
    model.save(tmp_path / "s.npz")
    graph = hezk.model.load(tmp_path / "s.npz")
    assert [n.function for n in graph.nodes if n.kind == "activation"] == ["square", "relu"]
    x = rng.normal(size=(2, 1, 6, 6))
    h = Sequential(model.layers[:5], (1, 6, 6)).forward_layers(x)  # up to the relu, which is exact here
    np.testing.assert_allclose(graph.forward(x), Sequential(model.layers[6:], (3,)).forward(np.maximum(h, 0)),
                               atol=1e-9)


def test_hezk_model_imports_only_numpy_onnx_and_the_standard_library():
    import sys

    root = pathlib.Path(hezk.model.__file__).parent
    allowed = {"numpy", "onnx", "hezk.model", "__future__"} | set(sys.stdlib_module_names)
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module] if isinstance(node, ast.ImportFrom) and not node.level else [])
            for name in names:
                if path.name == "torch_export.py" and name.split(".")[0] == "torch":
                    continue  # the optional exporter: torch is imported when from_torch is called
                assert name.split(".")[0] in allowed or name == "hezk.model" or name.startswith("hezk.model."), \
                    f"{path.name} imports {name}"
