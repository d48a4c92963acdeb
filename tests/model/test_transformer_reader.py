"""A torch ``nn.TransformerEncoderLayer`` (and a 2-layer ``nn.TransformerEncoder``) exported by torch's default
exporter (as it comes) and by the TorchScript one (opset 17) reads into the model description: attention's two
products of computed tensors as ``Bilinear`` nodes, Softmax and LayerNormalization as nodes, the heads' moves of
the batch axis read with that axis (of size 1) as a sample axis; the float forward equals onnxruntime."""
from __future__ import annotations

import contextlib
import io

import numpy as np
import pytest
from onnx import TensorProto, helper
import hezk.model
from hezk.model import ModelFileError, UnsupportedOperator, read_onnx

from .exported_models import onnxruntime_outputs
from .onnx_models import Builder, run_onnx

D_MODEL, HEADS, FEEDFORWARD, SEQUENCE = 32, 2, 64, 16


def encoder(layers: int, activation: str, seed: int = 0, d_model: int = D_MODEL, heads: int = HEADS,
            feedforward: int = FEEDFORWARD, causal_mask: int = 0):
    """The encoder (batch first, no dropout) behind a module whose forward takes x only (the TorchScript
    exporter would otherwise pass the default ``is_causal`` as a tensor); ``causal_mask``: the sequence length
    of a constant causal src_mask (0: none)."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(seed)
    layer = torch.nn.TransformerEncoderLayer(d_model, heads, feedforward, dropout=0.0, activation=activation,
                                             batch_first=True)
    inner = layer if layers == 1 else torch.nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)

    class OnlyX(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = inner

            if causal_mask:
                self.register_buffer("mask", torch.nn.Transformer.generate_square_subsequent_mask(causal_mask))

        def forward(self, x):
            return self.inner(x, **({"mask" if layers > 1 else "src_mask": self.mask} if causal_mask else {}))

    return OnlyX().eval()


def export(module, dynamo: bool, sequence: int = SEQUENCE, d_model: int = D_MODEL, opset: int = 17):
    """The ONNX model of ``module`` on a (1, sequence, d_model) input (default (1, 16, 32)): the default exporter
    as it comes (dynamo), or the TorchScript one at ``opset`` (17: LayerNormalization; below: written out)."""
    torch = pytest.importorskip("torch")
    if dynamo:
        pytest.importorskip("onnxscript")
    import onnx

    buffer = io.BytesIO()
    options = {"dynamo": True} if dynamo else {"dynamo": False, "opset_version": opset}
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        torch.onnx.export(module, (torch.zeros(1, sequence, d_model),), buffer, input_names=["x"],
                          output_names=["y"], **options)
    return onnx.load_from_string(buffer.getvalue())


@pytest.mark.parametrize("layers, activation", [(1, "relu"), (1, "gelu"), (2, "relu"), (2, "gelu")])
@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "default"])
def test_encoder_reads_and_its_float_forward_equals_onnxruntime(layers, activation, dynamo):
    """Every exported node is read; the description's forward is onnxruntime's output to 1e-5, sample by sample
    over a batch of 3 (the engines' batch axis is new: the file's batch of 1 is a sample axis)."""
    model = export(encoder(layers, activation), dynamo)
    graph = read_onnx(model)
    assert graph.input_shape == (1, SEQUENCE, D_MODEL) and graph.output_shape == (1, SEQUENCE, D_MODEL)
    kinds = [node.kind for node in graph.nodes]
    assert kinds.count("bilinear") == 2 * layers and kinds.count("softmax") == layers
    assert kinds.count("layernorm") == 2 * layers
    x = np.random.default_rng(1).normal(size=(3, 1, SEQUENCE, D_MODEL)).astype(np.float32)
    expected = onnxruntime_outputs(model, x.reshape(3, SEQUENCE, D_MODEL))[0]
    got = graph.forward(x).reshape(expected.shape)
    assert np.max(np.abs(got - expected)) <= 1e-5
    one = graph.forward(x[0])  # one sample, its own shape
    assert one.shape == (1, SEQUENCE, D_MODEL) and np.allclose(one, got[:1].reshape(one.shape), atol=1e-12)


def test_encoder_description_round_trips_through_its_records():
    """The new node kinds serialize: from_records(records()) has the same digest and forward."""
    graph = read_onnx(export(encoder(1, "gelu"), dynamo=False))
    header, arrays = graph.records()
    again = hezk.model.Graph.from_records(header, arrays)
    assert again.digest() == graph.digest()
    x = np.random.default_rng(2).normal(size=(1, SEQUENCE, D_MODEL))
    assert np.array_equal(again.forward(x), graph.forward(x))
    assert "softmax along sample axis" in graph.summary() and "of two computed tensors" in graph.summary()


def attention_model(batch, opset=17):
    """scores = einsum(q, k) / 2, softmax, weighted sum with a MatMul: q = x Wq, k = x Wk, v = x Wv on x (n, d)."""
    b = Builder((4, 6), seed=3, batch=batch, opset=opset)
    q, k, v = (b.node("MatMul", ["x", b.const(b.weight(6, 6))]) for _ in range(3))
    scores = b.node("Einsum", [q, k], "scores", equation="nqd,nkd->nqk")
    weights = b.node("Softmax", [b.node("Mul", [scores, b.const(np.float32(0.5))])], "weights", axis=-1)
    out = b.node("MatMul", [weights, v], "weighted")
    b.node("LayerNormalization", [out, b.const(b.weight(6) + 1.0), b.const(b.weight(6))], "norm", axis=-1,
           epsilon=1e-5)
    return b.model()


def test_einsum_matmul_softmax_layernorm_with_a_dynamic_batch():
    """With a symbolic batch axis the batch stays first: Einsum and MatMul of computed tensors are Bilinear
    nodes over it, and a batch of 5 equals onnxruntime."""
    model = attention_model("N")
    graph = read_onnx(model)
    assert graph.input_shape == (4, 6)
    equations = [node.equation for node in graph.nodes if node.kind == "bilinear"]
    assert equations[0].startswith("b") and len(equations) == 2
    x = np.random.default_rng(4).normal(size=(5, 4, 6))
    assert np.max(np.abs(graph.forward(x) - run_onnx(model, x))) <= 1e-5


def test_a_transpose_of_a_dynamic_batch_axis_is_still_refused():
    """Positive control beside the unit-batch reading: a symbolic batch axis that a Transpose moves is refused
    as before (it cannot be read as a sample axis), naming the node."""
    b = Builder((4, 6), batch="N")
    b.node("Transpose", ["x"], "moves", perm=[1, 0, 2])
    with pytest.raises(UnsupportedOperator, match=r"Transpose \(node 'moves'\): perm=\(1, 0, 2\) moves the batch.*"
                                                  r"export the model on a batch of 1 without a dynamic batch axis"):
        read_onnx(b.model())
    fixed = Builder((4, 6), batch=1)  # the same with a batch of 1: read, the batch axis is a sample axis
    fixed.node("Relu", [fixed.node("Transpose", ["x"], "moves", perm=[1, 0, 2])])
    graph = read_onnx(fixed.model())
    x = np.random.default_rng(5).normal(size=(1, 4, 6))
    assert graph.input_shape == (1, 4, 6) and np.allclose(graph.forward(x), run_onnx(fixed.model(), x))


def test_products_of_computed_tensors_are_checked():
    """A MatMul of computed tensors whose inner sizes differ is a ModelFileError naming the node; a Softmax
    along an axis other than the last is refused with its rewrite."""
    b = Builder((4, 6), batch="N")
    b.node("MatMul", ["x", b.node("Relu", ["x"])], "bad_matmul")
    with pytest.raises(ModelFileError, match="bad_matmul.*6 != 4"):
        read_onnx(_unchecked(b))
    s = Builder((4, 6), batch="N")
    s.node("Relu", [s.node("Softmax", ["x"], "early", axis=1)])
    with pytest.raises(UnsupportedOperator, match="early.*only the last axis.*transpose the axis last"):
        read_onnx(s.model())


def _unchecked(b):
    """The builder's model without shape inference or the checker (a malformed product stays in it)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", *b.input_shape])
    y = helper.make_tensor_value_info(b.last, TensorProto.FLOAT, None)
    return helper.make_model(helper.make_graph(b.nodes, "t", [x], [y], b.inits),
                             opset_imports=[helper.make_opsetid("", b.opset)])


def test_bilinear_node_validates_its_equation():
    """The description refuses a Bilinear whose equation does not keep the batch first on both operands."""
    with pytest.raises(ModelFileError, match="b...,b...->b..."):
        hezk.model.Bilinear("p", "MatMul", ("x", "y"), "z", "ij,bjk->bik")
    node = hezk.model.Bilinear("p", "MatMul", ("x", "y"), "z", "bij,bjk->bik")
    assert node.output_shape(((2, 3), (3, 4))) == (2, 4)
    with pytest.raises(ModelFileError, match="index 'j' is 3 and 5"):
        node.output_shape(((2, 3), (5, 4)))


def test_layernorm_written_out_below_opset_17_reads_as_layernorm():
    """torch's TorchScript exporter at opset 14 writes LayerNorm as ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt,
    Div, Mul, Add: read as one LayerNorm node per norm (scale and shift folded in); the forward equals
    onnxruntime's."""
    model = export(encoder(1, "gelu"), dynamo=False, opset=14)
    assert "LayerNormalization" not in {node.op_type for node in model.graph.node}
    graph = read_onnx(model)
    assert [node.kind for node in graph.nodes].count("layernorm") == 2
    x = np.random.default_rng(2).normal(size=(2, 1, SEQUENCE, D_MODEL)).astype(np.float32)
    expected = onnxruntime_outputs(model, x.reshape(2, SEQUENCE, D_MODEL))[0]
    assert np.max(np.abs(graph.forward(x).reshape(expected.shape) - expected)) <= 1e-5


def _written_out_layernorm(axes, extra_reader: bool = False):
    """x (N, 4, 6) -> (x - mean) / sqrt(mean((x - mean)^2) + 1e-5) * gamma + beta over ``axes``, as torch writes
    it below opset 17; ``extra_reader``: the centred tensor also feeds a Relu (the group is then not private)."""
    b = Builder((4, 6))
    mean = b.node("ReduceMean", ["x"], axes=axes)
    centred = b.node("Sub", ["x", mean])
    variance = b.node("ReduceMean", [b.node("Pow", [centred, b.const(2.0)])], axes=axes)
    std = b.node("Sqrt", [b.node("Add", [variance, b.const(1e-5)])])
    y = b.node("Add", [b.node("Mul", [b.node("Div", [centred, std], "norm"), b.const(b.weight(6))]),
                       b.const(b.weight(6))])
    if extra_reader:
        b.node("Add", [y, b.node("Relu", [centred])])
    return b.model()


def test_written_out_layernorm_is_fused_only_when_it_is_one():
    """Over the trailing axis the written-out form is one LayerNorm node equal to onnxruntime; over a leading
    axis, or with the centred tensor read elsewhere, nothing is fused and the nodes are read one by one (the
    Sub of a reduced tensor is then refused as a ModelFileError, never a crash)."""
    model = _written_out_layernorm([-1])
    graph = read_onnx(model)
    assert [node.kind for node in graph.nodes] == ["layernorm"] and graph.nodes[0].name == "norm"
    x = np.random.default_rng(3).normal(size=(3, 4, 6)).astype(np.float32)
    assert np.max(np.abs(graph.forward(x) - run_onnx(model, x))) <= 1e-5
    for refused in (_written_out_layernorm([1]), _written_out_layernorm([-1], extra_reader=True)):
        with pytest.raises(ModelFileError):
            read_onnx(refused)


def test_tanh_gelu_written_out_reads_as_one_activation():
    """nn.GELU(approximate="tanh") in an encoder layer, written out by the TorchScript exporter at opset 17
    (0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))), reads as one gelu_tanh activation (its Mul of x by x^2
    crashed the reader with an IndexError before); the forward equals onnxruntime's."""
    torch = pytest.importorskip("torch")
    model = export(encoder(1, torch.nn.GELU(approximate="tanh")), dynamo=False)
    graph = read_onnx(model)
    assert [n.function for n in graph.nodes if n.kind == "activation"] == ["gelu_tanh"]
    assert [n.kind for n in graph.nodes].count("bilinear") == 2  # only attention's two products
    x = np.random.default_rng(4).normal(size=(2, 1, SEQUENCE, D_MODEL)).astype(np.float32)
    expected = onnxruntime_outputs(model, x.reshape(2, SEQUENCE, D_MODEL))[0]
    assert np.max(np.abs(graph.forward(x).reshape(expected.shape) - expected)) <= 1e-5


def _written_out_tanh_gelu(coefficient=0.044715, cube="pow", half_first=False):
    """y = 0.5 x (1 + tanh(sqrt(2/pi) (x + c x^3))) on x (N, 6): x^3 as Pow(x, 3) or Mul(x, Mul(x, x)), the 0.5
    on x first or on the product last."""
    b = Builder((6,))
    cubed = b.node("Pow", ["x", b.const(3.0)]) if cube == "pow" else b.node("Mul", ["x", b.node("Mul", ["x", "x"])])
    inner = b.node("Add", ["x", b.node("Mul", [b.const(coefficient), cubed])])
    total = b.node("Add", [b.node("Tanh", [b.node("Mul", [inner, b.const(np.sqrt(2 / np.pi))])], "tanh"),
                           b.const(1.0)])
    if half_first:
        b.node("Mul", [b.node("Mul", ["x", b.const(0.5)]), total])
    else:
        b.node("Mul", [b.node("Mul", ["x", total]), b.const(0.5)])
    return b.model()


def test_tanh_gelu_is_fused_only_when_it_is_one():
    """The written-out forms (Pow or Mul cube, the 0.5 first or last) fuse into one gelu_tanh activation named
    after the Tanh, equal to onnxruntime; another coefficient is not GELU: nothing is fused and its Mul of two
    computed tensors is refused by name (an UnsupportedOperator, never a crash)."""
    x = np.random.default_rng(5).normal(size=(4, 6)).astype(np.float32)
    for cube, half_first in (("pow", False), ("mul", True)):
        model = _written_out_tanh_gelu(cube=cube, half_first=half_first)
        graph = read_onnx(model)
        assert [(n.kind, n.name) for n in graph.nodes] == [("activation", "tanh")]
        assert graph.nodes[0].function == "gelu_tanh"
        assert np.max(np.abs(graph.forward(x) - run_onnx(model, x))) <= 1e-5
    with pytest.raises(UnsupportedOperator, match="Mul .*of two computed tensors"):
        read_onnx(_written_out_tanh_gelu(coefficient=0.05, cube="mul"))


@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "default"])
def test_a_constant_causal_mask_reads_as_a_masked_softmax(dynamo):
    """A causal src_mask (a constant of 0 and -inf added to the scores) reads as a Softmax with a 0/1 mask (the
    dropped entries weigh 0), its finite part a shift; the forward equals onnxruntime's; the description with
    its mask round-trips through its records (same digest) and differs from the unmasked one's."""
    model = export(encoder(1, "gelu", causal_mask=SEQUENCE), dynamo)
    graph = read_onnx(model)
    (softmax,) = [node for node in graph.nodes if node.kind == "softmax"]
    assert softmax.mask is not None
    assert np.all(softmax.mask.reshape(-1, SEQUENCE, SEQUENCE) == np.tril(np.ones((SEQUENCE, SEQUENCE))))
    x = np.random.default_rng(6).normal(size=(2, 1, SEQUENCE, D_MODEL)).astype(np.float32)
    expected = onnxruntime_outputs(model, x.reshape(2, SEQUENCE, D_MODEL))[0]
    assert np.max(np.abs(graph.forward(x).reshape(expected.shape) - expected)) <= 1e-5
    header, arrays = graph.records()
    assert hezk.model.Graph.from_records(header, arrays).digest() == graph.digest()
    assert graph.digest() != read_onnx(export(encoder(1, "gelu"), dynamo)).digest()


def test_softmax_masks_are_validated():
    """A mask must hold 0/1 entries, broadcast to the sample and keep an entry in every row; an added constant
    with +inf or NaN is no mask and stays refused as a non-finite constant."""
    with pytest.raises(ModelFileError, match="mask entries must be 0"):
        hezk.model.Softmax("s", "Softmax", ("x",), "y", 1, np.array([[0.5, 1.0]]))
    for mask, message in ((np.array([[1.0, 1.0], [0.0, 0.0]]), "drops a whole row"),
                          (np.ones((3, 3)), "does not broadcast")):
        with pytest.raises(ModelFileError, match=message):
            hezk.model.Graph("x", (2, 2), (hezk.model.Softmax("s", "Softmax", ("x",), "y", 1, mask),), "y")
    b = Builder((4, 4))
    b.node("Softmax", [b.node("Add", [b.node("MatMul", ["x", b.node("Relu", ["x"])]),
                                      b.const(np.triu(np.full((4, 4), np.inf), 1))])], axis=-1)
    b.node("MatMul", [b.last, "x"])
    with pytest.raises(ModelFileError, match="NaN or infinite"):
        read_onnx(b.model())


def test_the_graph_proof_lowers_a_masked_softmax_with_its_mask():
    """The proof's Softmax lowering keeps the reader's mask (not proven as if unmasked): the masked layer's
    quantized structure carries the mask's public row_fill / row_keep kernels, the unmasked one none
    (tests/proofs/test_graph_masked_softmax.py proves them)."""
    from proofs.graph_quantize import quantize_graph

    small = dict(d_model=8, heads=2, feedforward=16)
    calibration = np.random.default_rng(0).normal(size=(4, 1, 4, 8))
    for causal, kernels in ((4, ["row_fill", "row_keep"]), (0, [])):
        graph = read_onnx(export(encoder(1, "relu", causal_mask=causal, **small), False, sequence=4, d_model=8))
        q = quantize_graph(graph, calibration.reshape(4, *graph.input_shape))
        assert [op.constant for op in q.ops if op.mask] == kernels
