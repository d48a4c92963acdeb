"""Causal masks as torch exports them: the dynamo exporter's SDPA adds a constant of 0 and finfo(float32).min
(read as the Softmax's 0/1 mask, not as a shift of -3.4e38), the TorchScript one builds it with Trilu on constants
(folded); Trilu of a computed tensor is a public 0/1 scale. Each read graph's forward equals onnxruntime's."""
from __future__ import annotations

import numpy as np
import pytest

from hezk.model import read_onnx

from .onnx_models import Builder, run_onnx

pytest.importorskip("onnxruntime")


@pytest.mark.parametrize("fill", [np.finfo(np.float32).min, -1e9, -np.inf])
def test_an_additive_mask_of_large_negatives_is_the_softmaxs_mask(fill):
    b = Builder((4, 4))
    scores = b.node("MatMul", ["x", b.const(b.weight(4, 4))])
    mask = np.where(np.tril(np.ones((4, 4))) > 0, 0.0, fill).astype(np.float32)
    weights = b.node("Softmax", [b.node("Add", [scores, b.const(mask)])], axis=-1)
    b.node("MatMul", [weights, "x"])  # the weighted sum (a Softmax last would be the client's)
    model = b.model()
    graph = read_onnx(model)
    softmax = [node for node in graph.nodes if node.kind == "softmax"][0]
    assert np.array_equal(np.broadcast_to(softmax.mask, (4, 4)), np.tril(np.ones((4, 4))))
    x = np.random.default_rng(0).normal(size=(3, 4, 4))
    assert np.allclose(graph.forward(x), run_onnx(model, x), atol=1e-6)


@pytest.mark.parametrize("upper, k", [(1, 0), (0, 0), (1, 1), (0, -1)])
def test_trilu_folds_on_constants_and_scales_a_tensor(upper, k):
    b = Builder((4, 4))
    ones = b.const(np.ones((4, 4), np.float32))
    inputs = lambda t: [t, b.const(np.array(k, dtype=np.int64))]  # noqa: E731
    triangle = b.node("Trilu", inputs(ones), upper=upper)  # on a constant: folded
    b.node("Trilu", inputs(b.node("Mul", ["x", triangle])), upper=1 - upper)  # on a tensor: a 0/1 scale
    model = b.model()
    graph = read_onnx(model)
    x = np.random.default_rng(1).normal(size=(2, 4, 4))
    assert np.allclose(graph.forward(x), run_onnx(model, x), atol=1e-6)


def test_trilu_across_the_batch_axis_is_refused_by_name():
    """On a (batch, n) tensor the triangle mixes samples: refused naming the node and the batch axis."""
    from hezk.model import UnsupportedOperator

    b = Builder((4,))
    b.node("Trilu", [b.node("Relu", ["x"])], "across", upper=1)
    with pytest.raises(UnsupportedOperator, match=r"Trilu \(node 'across'\).*batch axis"):
        read_onnx(b.model())
