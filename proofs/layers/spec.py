"""Layer descriptions to build a proved network from float weights: ``[Linear(W0, b0), ReLU(), Linear(W1, b1)]``.

``Network([Linear(w0, b0), ReLU(), Linear(w1, b1)], frac_bits=8)`` quantizes the layers in fixed point
(:func:`proofs.quantize.quantize_fixed_point`, zkDL's round(x * 2^R)) and proves them: each
:class:`Linear` by Thaler's matmul sumcheck (:mod:`proofs.layers.matmul`), each :class:`ReLU` by zkReLU
together with the rescale by 2^R (:mod:`proofs.layers.relu`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import ModelError
from ..quantize import QuantizedMLP, quantize_fixed_point


@dataclass(frozen=True, eq=False)
class Linear:
    """y = W x + b with float ``weight`` (out_features, in_features) and ``bias`` (out_features,), zeros if None."""

    weight: object
    bias: object = None

    def arrays(self, index: int) -> tuple:
        weight = np.asarray(self.weight)
        if weight.ndim != 2 or weight.dtype.kind not in "fiu":
            raise ModelError(f"layers[{index}] Linear weight must be a 2-D numeric array (out, in), "
                             f"got shape {weight.shape} dtype {weight.dtype}")
        bias = np.zeros(weight.shape[0]) if self.bias is None else np.asarray(self.bias)
        if bias.shape != (weight.shape[0],) or bias.dtype.kind not in "fiu":
            raise ModelError(f"layers[{index}] Linear bias must have shape ({weight.shape[0]},), got {bias.shape}")
        return weight.astype(np.float64), bias.astype(np.float64)


@dataclass(frozen=True)
class ReLU:
    """max(x, 0) after the preceding Linear, proved by zkReLU with the rescale by 2^R."""


def build_model(layers, *, frac_bits: int = 8, input_bound: float = 1.0) -> QuantizedMLP:
    """Quantize a sequence Linear [ReLU] Linear [ReLU] ... in fixed point (every hidden Linear rescaled by 2^R)."""
    layers = list(layers)
    weights, biases, relus = [], [], []
    for i, layer in enumerate(layers):
        if isinstance(layer, Linear):
            w, b = layer.arrays(i)
            weights.append(w)
            biases.append(b)
            relus.append(False)
        elif isinstance(layer, ReLU) and relus and not relus[-1]:
            relus[-1] = True
        elif isinstance(layer, ReLU):
            raise ModelError(f"layers[{i}] ReLU must follow a Linear layer")
        else:
            raise ModelError(f"layers[{i}] must be a Linear or ReLU, got {type(layer).__name__}")
    if not weights:
        raise ModelError("layers must hold at least one Linear")
    return quantize_fixed_point(weights, biases, frac_bits=frac_bits, input_bound=input_bound, relus=relus)
