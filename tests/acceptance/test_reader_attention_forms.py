"""The attention forms users write by hand, read by ``hezk.model.read_onnx`` (both halves' one description):
Split of a fused q/k/v projection, Where with a constant condition (an attention mask read by a Softmax as its
0/1 mask, else a public elementwise map), and a sequence-first input whose batch axis of 1 is not the first.
Each read graph's forward equals onnxruntime's; what the description cannot hold is refused by name."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper, numpy_helper

from hezk.model import ModelFileError, UnsupportedOperator, read_onnx

from ..model.onnx_models import Builder, run_onnx

pytest.importorskip("onnxruntime")


def _split(b: Builder, x: str, parts: int, sizes=None, axis=-1) -> list:
    """Append a Split of ``x`` into ``parts`` outputs (sizes as the opset-13 input, else opset 18's
    num_outputs)."""
    outs = [f"part{b.count}_{i}" for i in range(parts)]
    b.count += 1
    inputs = [x] if sizes is None else [x, b.const(np.array(sizes, dtype=np.int64))]
    attrs = {"axis": axis} if sizes is not None else {"axis": axis, "num_outputs": parts}
    b.nodes.append(helper.make_node("Split", inputs, outs, name=f"split{b.count}", **attrs))
    return outs


@pytest.mark.parametrize("sizes, opset", [(None, 18), ([4, 4, 4], 17), ([2, 6, 4], 17), (None, 18)],
                         ids=["num_outputs", "equal", "uneven", "num_outputs-again"])
def test_a_split_projection_reads_and_equals_onnxruntime(sizes, opset):
    """q, k, v split from one projection, q k^T and its product with v: the parts are public 0/1 selections."""
    b = Builder((3, 6), opset=opset)
    qkv = b.node("MatMul", ["x", b.const(b.weight(6, 12))])
    q, k, v = _split(b, qkv, 3, sizes)
    if sizes is not None and sizes[0] != sizes[1]:
        k = b.node("MatMul", [k, b.const(b.weight(sizes[1], sizes[0]))])
    scores = b.node("MatMul", [q, b.node("Transpose", [k], perm=[0, 2, 1])])
    b.node("MatMul", [b.node("Softmax", [scores], axis=-1), v])
    b.node("Relu", [b.last])
    model = b.model()
    graph = read_onnx(model)
    assert [n.kind for n in graph.nodes].count("bilinear") == 2
    x = np.random.default_rng(0).normal(size=(5, 3, 6)).astype(np.float32)
    assert np.max(np.abs(graph.forward(x) - run_onnx(model, x))) <= 1e-5


def test_a_split_into_parts_that_do_not_cover_the_axis_is_refused():
    b = Builder((3, 6))
    parts = _split(b, b.node("Relu", ["x"]), 2, [3, 3])
    b.node("Add", parts[:1] + [b.node("Relu", [parts[1]])])
    model = b.model()
    sizes = next(t for t in model.graph.initializer if t.name == b.nodes[1].input[1])
    sizes.CopyFrom(numpy_helper.from_array(np.array([2, 3], dtype=np.int64), sizes.name))  # past the checker
    with pytest.raises(ModelFileError, match=r"Split .*sizes \[2, 3\] .*length 6"):
        read_onnx(model)


def _masked(fill, condition=None, read_by="Softmax"):
    """x -> scores = x x^T -> Where(causal mask, scores, fill) -> read_by -> @ x."""
    b = Builder((4, 3))
    scores = b.node("MatMul", ["x", b.node("Transpose", ["x"], perm=[0, 2, 1])])
    mask = b.const(np.tril(np.ones((4, 4))).astype(bool)) if condition is None else condition
    if isinstance(mask, str) and mask.startswith("c"):
        b.inits[-1] = numpy_helper.from_array(np.tril(np.ones((4, 4))).astype(bool), mask)
    where = b.node("Where", [mask, scores, b.const(np.array(fill, dtype=np.float32))])
    b.node("MatMul", [b.node(read_by, [where], **({"axis": -1} if read_by == "Softmax" else {})), "x"])
    return b.model()


@pytest.mark.parametrize("fill", [-np.inf, -1e9, float(np.finfo(np.float32).min)], ids=["-inf", "-1e9", "finfo"])
def test_where_with_a_constant_mask_before_a_softmax_is_its_mask(fill):
    """masked_fill(~causal, fill) before a Softmax: the Softmax's 0/1 mask, no -inf constant in the graph."""
    model = _masked(fill)
    graph = read_onnx(model)
    (softmax,) = [n for n in graph.nodes if n.kind == "softmax"]
    assert np.array_equal(softmax.mask.reshape(4, 4), np.tril(np.ones((4, 4))))
    assert not any(n.kind == "affine" for n in graph.nodes)
    x = np.random.default_rng(1).normal(size=(3, 4, 3)).astype(np.float32)
    assert np.max(np.abs(graph.forward(x) - run_onnx(model, x))) <= 1e-5


def test_where_with_a_finite_fill_is_a_public_elementwise_map():
    """Where(mask, scores, 0.5) read by a Relu: y = m s + (1 - m) 0.5, equal to onnxruntime."""
    model = _masked(0.5, read_by="Relu")
    graph = read_onnx(model)
    x = np.random.default_rng(2).normal(size=(3, 4, 3)).astype(np.float32)
    assert np.max(np.abs(graph.forward(x) - run_onnx(model, x))) <= 1e-5


def test_where_of_two_computed_branches_and_the_refusals():
    """Both branches computed: m a + (1 - m) b; a computed condition is refused naming the node; a -inf fill
    that no Softmax reads is refused as non-finite."""
    b = Builder((4, 4))
    relu, tanh = b.node("Relu", ["x"]), b.node("Tanh", ["x"])
    b.node("Where", [b.const(np.eye(4).astype(bool)), relu, tanh], name="pick")
    b.inits[-1] = numpy_helper.from_array(np.eye(4).astype(bool), b.nodes[-1].input[0])
    model = b.model()
    graph = read_onnx(model)
    x = np.random.default_rng(3).normal(size=(2, 4, 4)).astype(np.float32)
    assert np.max(np.abs(graph.forward(x) - run_onnx(model, x))) <= 1e-5

    b = Builder((4, 4))
    b.node("Where", [b.node("Greater", ["x", b.const(np.float32(0.0))]), "x", b.const(np.float32(0.0))],
           name="computed_condition")
    with pytest.raises(UnsupportedOperator, match=r"Where \(node 'computed_condition'\): a condition computed"):
        read_onnx(b.model())
    with pytest.raises(ModelFileError, match="NaN or infinite"):
        read_onnx(_masked(-np.inf, read_by="Relu"))


def test_a_sequence_first_input_with_its_batch_of_one_in_the_middle_reads():
    """A (sequence, 1, width) input (nn.TransformerEncoderLayer's default batch_first=False) whose graph moves
    axis 0: read as one whole sample (before: refused, 'moves the batch axis'); equal to onnxruntime."""
    b = Builder((1, 3), batch=4)
    t = b.node("Transpose", ["x"], perm=[1, 0, 2])
    scores = b.node("MatMul", [t, b.node("Transpose", [t], perm=[0, 2, 1])])
    b.node("Transpose", [b.node("MatMul", [b.node("Softmax", [scores], axis=-1), t])], perm=[1, 0, 2])
    model = b.model()
    graph = read_onnx(model)
    assert graph.input_shape == (4, 1, 3)
    x = np.random.default_rng(4).normal(size=(4, 1, 3)).astype(np.float32)
    assert np.max(np.abs(graph.forward(x[None])[0] - run_onnx(model, x))) <= 1e-5
