"""The model description: an immutable graph of tensor operations shared by both engines.

Every tensor is batch first; the graph records per-sample shapes (the batch axis is implicit, axis 0 of every
array the reference forward sees). Nodes:

- ``Contraction``: y = reshape(einsum(equation, view(x), W), out_shape) + bias, with a constant operand W.
  The equation names the batch axis ``b`` on the data operand and the output and never on W, so every
  contraction is a plaintext-weight einsum a planner can price (Gemm, MatMul, Conv, AveragePool,
  GlobalAveragePool). A convolution's data operand is first seen through ``Patches``, the im2col index map
  (Chellapilla et al., 2006): a gather with no arithmetic, so the contraction stays a plain einsum
  ``bgcuvij,gocuv->bgoij`` over (group, channel-in-group, kernel row, kernel column, output row, output
  column). Stride, padding, dilation and groups live in that map, not in the equation (einsum notation
  has no strided index arithmetic), and a layout planner may realise the map as a slot layout.
- ``Affine``: y = x * scale + shift, constants broadcast over the sample (a bias Add, a BatchNormalization
  that follows no contraction, Mul/Div/Sub by a constant).
- ``Add``: y = x1 + x2 of two tensors of one shape (a residual connection).
- ``Bilinear``: y = einsum(equation, x1, x2) of two computed tensors, the batch ``b`` first on both and the
  output (attention's scores q k^T and its weighted sum a v, a batched MatMul or Einsum, an elementwise
  product Mul(x1, x2) with broadcasting).
- ``Softmax``: y = exp(x) / sum exp(x) along a sample axis (attention's weights).
- ``LayerNorm``: y = (x - mean) / sqrt(var + epsilon) * scale + shift over the sample axes from ``axis`` on
  (LayerNormalization, and its decomposed ReduceMean, Sub, Pow, Sqrt, Div form).
- ``Activation``: elementwise relu, square, sigmoid, tanh, gelu (erf form or its tanh approximation), silu,
  and clip to ``bounds`` (Clip, ReLU6 = Clip(0, 6), Min / Max with a constant; either bound may be None).
- ``MaxPool``: the maximum over each window of ``Patches`` (padding counts as -inf).
- ``Reshape`` (Flatten, Reshape) and ``Transpose`` over the sample axes.

Public selections (Slice, Pad with zeros, strided views, a Concat) are contractions with a constant 0/1
weight, so both engines run them as the linear maps they are. ``Graph.postprocess`` names what the client
computes from the decrypted output (softmax, log-softmax, argmax, class labels, ...): the named outputs
of the source model, each a chain of ``ClientStep`` on ``Graph.output``, never run by an engine.

``Graph.digest()`` is the sha256 of a canonical serialization that ignores the names of nodes and tensors:
the model's identity, equal for the same network read from ONNX or from hezk's ``.npz``.
"""
from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, fields
from typing import ClassVar

import numpy as np

from .errors import ModelFileError

ACTIVATIONS = ("relu", "square", "sigmoid", "tanh", "gelu", "gelu_tanh", "silu", "clip", "softplus", "softsign",
               "hardswish", "mish", "elu", "selu")
SELU_ALPHA = 1.6732632423543772  # Klambauer et al. (2017), the self-normalising constants ONNX and torch use
SELU_SCALE = 1.0507009873554805
_erf = np.frompyfunc(math.erf, 1, 1)


def constant(value, what: str) -> np.ndarray:
    """A read-only float64 copy of ``value``; non-finite entries are refused."""
    try:
        array = np.array(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise ModelFileError(f"{what}: not a numeric array") from None
    if not np.all(np.isfinite(array)):
        raise ModelFileError(f"{what}: holds NaN or infinite values")
    array.setflags(write=False)
    return array


MAX_ELEMENTS = 1 << 24  # values in one sample tensor, convolution view or constant of a model


def require_size(shape, what: str) -> None:
    """Refuse ``shape`` if it holds more than ``MAX_ELEMENTS`` values (checked before anything is allocated)."""
    total = math.prod(int(d) for d in shape)
    if total > MAX_ELEMENTS:
        raise ModelFileError(f"{what}: shape {tuple(int(d) for d in shape)} holds {total} values, more than the "
                             f"limit of {MAX_ELEMENTS}")


def _ints(values, what: str, minimum: int = 0) -> tuple[int, ...]:
    try:
        out = tuple(int(v) for v in values)
    except (TypeError, ValueError, OverflowError):
        raise ModelFileError(f"{what}={values!r:.80}: not a sequence of integers") from None
    if any(v < minimum for v in out):
        raise ModelFileError(f"{what}={out}: every entry must be >= {minimum}")
    return out


def activate(function: str, x: np.ndarray, bounds=None) -> np.ndarray:
    """The float activation ``function`` of x, elementwise (``bounds`` = (low, high) of clip, None unbounded)."""
    if function == "clip":
        low, high = bounds if bounds is not None else (None, None)
        return np.clip(x, -np.inf if low is None else low, np.inf if high is None else high)
    if function == "relu":
        return np.maximum(x, 0.0)
    if function == "square":
        return x * x
    if function == "sigmoid":
        return 1.0 / (1.0 + np.exp(-x))
    if function == "tanh":
        return np.tanh(x)
    if function == "gelu":  # x Phi(x)
        return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)).astype(np.float64))
    if function == "gelu_tanh":  # Hendrycks and Gimpel (2016), the tanh approximation
        return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))
    if function == "silu":
        return x / (1.0 + np.exp(-x))
    if function == "softplus":  # log(1 + e^x), without overflow
        return np.logaddexp(0.0, x)
    if function == "softsign":
        return x / (1.0 + np.abs(x))
    if function == "hardswish":  # x relu6(x + 3) / 6 (Howard et al., 2019)
        return x * np.clip(x + 3.0, 0.0, 6.0) / 6.0
    if function == "mish":  # x tanh(softplus(x)) (Misra, 2019)
        return x * np.tanh(np.logaddexp(0.0, x))
    if function in ("elu", "selu"):  # elu: alpha 1 (Clevert et al., 2016); selu: scale elu_alpha
        alpha, scale = (1.0, 1.0) if function == "elu" else (SELU_ALPHA, SELU_SCALE)
        return scale * np.where(x > 0.0, x, alpha * np.expm1(np.minimum(x, 0.0)))
    raise ModelFileError(f"activation {function!r} is not one of {ACTIVATIONS}")


@dataclass(frozen=True)
class Patches:
    """The im2col index map of a 2-D window: x (B, C, H, W) -> (B, G, C/G, kh, kw, Ho, Wo) with
    P[b, g, c, u, v, i, j] = xpad[b, g C/G + c, s0 i + d0 u, s1 j + d1 v], xpad zero-padded by ``pads``
    (top, left, bottom, right)."""

    kernel: tuple[int, int]
    stride: tuple[int, int] = (1, 1)
    pads: tuple[int, int, int, int] = (0, 0, 0, 0)
    dilation: tuple[int, int] = (1, 1)
    groups: int = 1

    def __post_init__(self):
        object.__setattr__(self, "kernel", _ints(self.kernel, "kernel", 1))
        object.__setattr__(self, "stride", _ints(self.stride, "stride", 1))
        object.__setattr__(self, "pads", _ints(self.pads, "pads", 0))
        object.__setattr__(self, "dilation", _ints(self.dilation, "dilation", 1))
        object.__setattr__(self, "groups", int(self.groups))
        if (len(self.kernel), len(self.stride), len(self.pads), len(self.dilation)) != (2, 2, 4, 2) \
                or self.groups < 1:
            raise ModelFileError(f"patches {self}: a 2-D window needs 2 kernel, 2 stride, 4 pads, 2 dilation "
                                 f"entries and groups >= 1")

    def output_hw(self, height: int, width: int) -> tuple[int, int]:
        out = []
        for size, k, s, d, lo, hi in zip((height, width), self.kernel, self.stride, self.dilation,
                                         self.pads[:2], self.pads[2:]):
            span = size + lo + hi - d * (k - 1) - 1
            if span < 0:
                raise ModelFileError(f"window {self.kernel} (dilation {self.dilation}, pads {self.pads}) does "
                                     f"not fit the input {(height, width)}")
            out.append(span // s + 1)
        return out[0], out[1]

    def view_shape(self, shape) -> tuple[int, ...]:
        if len(shape) != 3 or shape[0] % self.groups:
            raise ModelFileError(f"patches: input sample shape {tuple(shape)} must be (C, H, W) with C a "
                                 f"multiple of groups={self.groups}")
        c, h, w = shape
        view = (self.groups, c // self.groups, *self.kernel, *self.output_hw(h, w))
        require_size(view, f"patches {self.kernel} over the sample shape {tuple(shape)}")
        return view

    def apply(self, x: np.ndarray, fill: float = 0.0) -> np.ndarray:
        b, c, h, w = x.shape
        top, left, bottom, right = self.pads
        padded = np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)), constant_values=fill)
        oh, ow = self.output_hw(h, w)
        (s0, s1), (d0, d1) = self.stride, self.dilation
        rows = []
        for u in range(self.kernel[0]):
            cols = [padded[:, :, u * d0: u * d0 + s0 * (oh - 1) + 1: s0, v * d1: v * d1 + s1 * (ow - 1) + 1: s1]
                    for v in range(self.kernel[1])]
            rows.append(np.stack(cols, axis=2))
        view = np.stack(rows, axis=2)  # (B, C, kh, kw, Ho, Wo)
        return view.reshape(b, self.groups, c // self.groups, *view.shape[2:])


@dataclass(frozen=True, eq=False)
class Node:
    """Base of the nodes: ``name`` (for messages), ``op`` (the source operator), data ``inputs``, ``output``."""

    name: str
    op: str
    inputs: tuple[str, ...]
    output: str
    kind: ClassVar[str] = "node"

    def __post_init__(self):
        object.__setattr__(self, "inputs", tuple(str(i) for i in self.inputs))

    def output_shape(self, shapes: tuple[tuple[int, ...], ...]) -> tuple[int, ...]:
        return shapes[0]

    def forward(self, *xs: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def where(self) -> str:
        return f"{self.op} (node {self.name!r})"


def _broadcast(shape, array, what) -> None:
    if array is None:
        return
    try:
        fits = np.broadcast_shapes(tuple(shape), array.shape) == tuple(shape)
    except ValueError:  # numpy's own mismatch error
        fits = False
    if not fits:
        raise ModelFileError(f"{what}: constant of shape {array.shape} does not broadcast to the sample shape "
                             f"{tuple(shape)}")


@dataclass(frozen=True, eq=False)
class Contraction(Node):
    """y = reshape(einsum(equation, view(x), weight), out_shape) + bias; view = ``patches`` or identity."""

    equation: str = ""
    weight: np.ndarray = None
    bias: np.ndarray | None = None
    patches: Patches | None = None
    out_shape: tuple[int, ...] = ()
    kind: ClassVar[str] = "contraction"

    def __post_init__(self):
        super().__post_init__()
        object.__setattr__(self, "weight", constant(self.weight, f"{self.where()} weight"))
        if self.bias is not None:
            object.__setattr__(self, "bias", constant(self.bias, f"{self.where()} bias"))
        object.__setattr__(self, "out_shape", _ints(self.out_shape, "out_shape", 1))
        operands, _, result = self.equation.partition("->")
        parts = operands.split(",")
        if len(parts) != 2 or not result.startswith("b") or not parts[0].startswith("b") or "b" in parts[1] \
                or len(parts[1]) != self.weight.ndim or not set(result) <= set(parts[0] + parts[1]):
            raise ModelFileError(f"{self.where()}: equation {self.equation!r} must read 'b...,W->b...' with the "
                                 f"batch b on the data operand and the output only, and W of rank {self.weight.ndim}")
        _broadcast(self.out_shape, self.bias, self.where() + " bias")

    @property
    def data_subscripts(self) -> str:
        return self.equation.split(",")[0]

    def view_shape(self, shape) -> tuple[int, ...]:
        return tuple(shape) if self.patches is None else self.patches.view_shape(shape)

    def einsum_shape(self, in_shape) -> tuple[int, ...]:
        """The einsum's output shape per sample (before the reshape to ``out_shape``)."""
        sizes = dict(zip(self.data_subscripts[1:], self.view_shape(in_shape)))
        sizes.update(zip(self.equation.split(",")[1].split("->")[0], self.weight.shape))
        return tuple(sizes[letter] for letter in self.equation.split("->")[1][1:])

    def output_shape(self, shapes):
        view = self.view_shape(shapes[0])
        letters = self.data_subscripts[1:]
        sizes = {}
        for letters_, dims in ((letters, view), (self.equation.split(",")[1].split("->")[0], self.weight.shape)):
            if len(letters_) != len(dims):
                raise ModelFileError(f"{self.where()}: {self.equation!r} does not fit the operand shape {dims}")
            for letter, dim in zip(letters_, dims):
                if sizes.setdefault(letter, dim) != dim:
                    raise ModelFileError(f"{self.where()}: index {letter!r} is {sizes[letter]} and {dim} in "
                                         f"{self.equation!r} on shapes {view} and {self.weight.shape}")
        produced = math.prod(sizes[letter] for letter in self.equation.split("->")[1][1:])
        if produced != math.prod(self.out_shape):
            raise ModelFileError(f"{self.where()}: einsum output of {produced} values cannot be reshaped to "
                                 f"{self.out_shape}")
        return self.out_shape

    def forward(self, x):
        view = x if self.patches is None else self.patches.apply(x)
        y = np.einsum(self.equation, view, self.weight, optimize=True).reshape(x.shape[0], *self.out_shape)
        return y if self.bias is None else y + self.bias


@dataclass(frozen=True, eq=False)
class Affine(Node):
    """y = x * scale + shift (either may be None), constants broadcast over the sample shape."""

    scale: np.ndarray | None = None
    shift: np.ndarray | None = None
    kind: ClassVar[str] = "affine"

    def __post_init__(self):
        super().__post_init__()
        for name in ("scale", "shift"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, constant(getattr(self, name), f"{self.where()} {name}"))

    def output_shape(self, shapes):
        _broadcast(shapes[0], self.scale, self.where() + " scale")
        _broadcast(shapes[0], self.shift, self.where() + " shift")
        return shapes[0]

    def forward(self, x):
        y = x if self.scale is None else x * self.scale
        return y if self.shift is None else y + self.shift


@dataclass(frozen=True, eq=False)
class Add(Node):
    """y = x1 + x2 (a residual connection): both data tensors of one sample shape."""

    kind: ClassVar[str] = "add"

    def output_shape(self, shapes):
        if len(shapes) != 2 or shapes[0] != shapes[1]:
            raise ModelFileError(f"{self.where()}: adds tensors of sample shapes {shapes}; they must be equal")
        return shapes[0]

    def forward(self, a, b):
        return a + b


@dataclass(frozen=True, eq=False)
class Activation(Node):
    """Elementwise ``function`` (one of ``ACTIVATIONS``); ``bounds`` = (low, high) for clip only (None on
    a side: unbounded there; at least one given, low < high)."""

    function: str = "relu"
    bounds: tuple | None = None
    kind: ClassVar[str] = "activation"

    def __post_init__(self):
        super().__post_init__()
        if self.function not in ACTIVATIONS:
            raise ModelFileError(f"{self.where()}: activation {self.function!r} is not one of {ACTIVATIONS}")
        if (self.function == "clip") != (self.bounds is not None):
            raise ModelFileError(f"{self.where()}: bounds={self.bounds!r} are given for clip, and only for it")
        if self.bounds is not None:
            try:
                low, high = (None if v is None else float(v) for v in self.bounds)
            except (TypeError, ValueError):
                raise ModelFileError(f"{self.where()}: bounds={self.bounds!r:.80} is not a pair (low, high)") from None
            if (low is None and high is None) or any(v is not None and not math.isfinite(v) for v in (low, high)) \
                    or (low is not None and high is not None and not low < high):
                raise ModelFileError(f"{self.where()}: clip bounds ({low}, {high}) must be finite (None: unbounded), "
                                     f"at least one given, low < high")
            object.__setattr__(self, "bounds", (low, high))

    def forward(self, x):
        return activate(self.function, x, self.bounds)


@dataclass(frozen=True, eq=False)
class MaxPool(Node):
    """y[c, i, j] = max over the window (i, j) of ``patches`` of x (C, H, W), padding counting as -inf."""

    patches: Patches = None
    kind: ClassVar[str] = "maxpool"

    def __post_init__(self):
        super().__post_init__()
        if not isinstance(self.patches, Patches) or self.patches.groups != 1:
            raise ModelFileError(f"{self.where()}: patches={self.patches!r:.80} must be a Patches with groups=1")
        if any(p >= k for p, k in zip(self.patches.pads, self.patches.kernel * 2)):
            raise ModelFileError(f"{self.where()}: pads {self.patches.pads} must each be smaller than the kernel "
                                 f"{self.patches.kernel} (a window of padding only has no maximum)")

    def output_shape(self, shapes):
        view = self.patches.view_shape(shapes[0])
        return (shapes[0][0], *view[-2:])

    def forward(self, x):
        view = self.patches.apply(x, fill=-np.inf)  # (B, 1, C, kh, kw, Ho, Wo)
        return view.max(axis=(3, 4))[:, 0]


def _bilinear_terms(equation: str):
    operands, arrow, result = equation.partition("->")
    parts = operands.split(",")
    if not arrow or len(parts) != 2 or not all(p.startswith("b") and p.count("b") == 1 and p.isalpha()
                                               for p in (*parts, result)) \
            or not set(result) <= set(parts[0] + parts[1]) or len(set(result)) != len(result):
        return None
    return parts[0], parts[1], result


@dataclass(frozen=True, eq=False)
class Bilinear(Node):
    """y = einsum(equation, x1, x2) of two computed tensors: the equation reads 'b...,b...->b...' (the batch
    ``b`` first on both operands and the output, each sample's own product). An index of size 1 on one
    operand only is summed over its single value: numpy's broadcasting, written as an einsum."""

    equation: str = ""
    kind: ClassVar[str] = "bilinear"

    def __post_init__(self):
        super().__post_init__()
        if len(self.inputs) != 2 or _bilinear_terms(self.equation) is None:
            raise ModelFileError(f"{self.where()}: equation {self.equation!r} on inputs {self.inputs} must read "
                                 f"'b...,b...->b...' over two tensors (letters only, b once, first)")

    def output_shape(self, shapes):
        left, right, result = _bilinear_terms(self.equation)
        sizes = {}
        for letters, dims in ((left[1:], shapes[0]), (right[1:], shapes[1])):
            if len(letters) != len(dims):
                raise ModelFileError(f"{self.where()}: {self.equation!r} does not fit the sample shapes {shapes}")
            for letter, dim in zip(letters, dims):
                if sizes.setdefault(letter, dim) != dim:
                    raise ModelFileError(f"{self.where()}: index {letter!r} is {sizes[letter]} and {dim} in "
                                         f"{self.equation!r} on sample shapes {shapes}")
        return tuple(sizes[letter] for letter in result[1:]) or (1,)

    def forward(self, a, b):
        y = np.einsum(self.equation, a, b, optimize=True)
        return y.reshape(y.shape[0], 1) if y.ndim == 1 else y


@dataclass(frozen=True, eq=False)
class Softmax(Node):
    """y = exp(x - max) / sum exp(x - max) along sample axis ``axis`` (0: the first sample axis); ``mask`` (0/1,
    broadcast to the sample shape, optional): the entries kept, the others weigh 0 (an attention mask added as
    -inf before the Softmax, such as a causal one); every row keeps at least one entry."""

    axis: int = -1
    mask: np.ndarray | None = None
    kind: ClassVar[str] = "softmax"

    def __post_init__(self):
        super().__post_init__()
        object.__setattr__(self, "axis", int(self.axis))
        if self.mask is not None:
            mask = constant(self.mask, f"{self.where()} mask")
            if not np.all((mask == 0) | (mask == 1)):
                raise ModelFileError(f"{self.where()}: mask entries must be 0 (dropped) or 1 (kept)")
            object.__setattr__(self, "mask", mask)

    def output_shape(self, shapes):
        if not 0 <= self.axis < len(shapes[0]):
            raise ModelFileError(f"{self.where()}: axis {self.axis} is not a sample axis of {shapes[0]}")
        if self.mask is not None:
            _broadcast(shapes[0], self.mask, self.where() + " mask")
            kept = np.broadcast_to(self.mask, shapes[0]).sum(axis=self.axis)
            if np.any(kept == 0):
                raise ModelFileError(f"{self.where()}: its mask drops a whole row along axis {self.axis}")
        return shapes[0]

    def forward(self, x):
        keep = 1.0 if self.mask is None else self.mask
        shifted = x - np.max(np.where(keep > 0, x, -np.inf), axis=self.axis + 1, keepdims=True)
        e = np.exp(np.where(keep > 0, shifted, 0.0)) * keep
        return e / e.sum(axis=self.axis + 1, keepdims=True)


@dataclass(frozen=True, eq=False)
class LayerNorm(Node):
    """y = (x - mean) / sqrt(var + epsilon) * scale + shift, mean and (biased) var over the sample axes
    ``axis``, ..., last; ``scale`` and ``shift`` (None: 1 and 0) broadcast over those axes (Ba et al., 2016)."""

    axis: int = -1
    epsilon: float = 1e-5
    scale: np.ndarray | None = None
    shift: np.ndarray | None = None
    kind: ClassVar[str] = "layernorm"

    def __post_init__(self):
        super().__post_init__()
        object.__setattr__(self, "axis", int(self.axis))
        object.__setattr__(self, "epsilon", float(self.epsilon))
        if not (math.isfinite(self.epsilon) and self.epsilon >= 0):
            raise ModelFileError(f"{self.where()}: epsilon={self.epsilon} must be finite and >= 0")
        for name in ("scale", "shift"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, constant(getattr(self, name), f"{self.where()} {name}"))

    def output_shape(self, shapes):
        if not 0 <= self.axis < len(shapes[0]):
            raise ModelFileError(f"{self.where()}: axis {self.axis} is not a sample axis of {shapes[0]}")
        normalized = tuple(shapes[0][self.axis:])
        for name in ("scale", "shift"):
            array = getattr(self, name)
            if array is not None and (array.ndim > len(normalized) or
                                      np.broadcast_shapes(normalized, array.shape) != normalized):
                raise ModelFileError(f"{self.where()}: {name} of shape {array.shape} does not broadcast to the "
                                     f"normalized shape {normalized}")
        return shapes[0]

    def axes(self, ndim: int) -> tuple[int, ...]:
        """The normalized axes of a batch-first array of ``ndim`` axes."""
        return tuple(range(self.axis + 1, ndim))

    def forward(self, x):
        axes = self.axes(x.ndim)
        centered = x - x.mean(axis=axes, keepdims=True)
        y = centered / np.sqrt((centered * centered).mean(axis=axes, keepdims=True) + self.epsilon)
        y = y if self.scale is None else y * self.scale
        return y if self.shift is None else y + self.shift


@dataclass(frozen=True, eq=False)
class Reshape(Node):
    """Row-major reshape of the sample to ``shape`` (Flatten, Reshape)."""

    shape: tuple[int, ...] = ()
    kind: ClassVar[str] = "reshape"

    def __post_init__(self):
        super().__post_init__()
        object.__setattr__(self, "shape", _ints(self.shape, "shape", 1))

    def output_shape(self, shapes):
        if math.prod(shapes[0]) != math.prod(self.shape):
            raise ModelFileError(f"{self.where()}: cannot reshape a sample of shape {shapes[0]} to {self.shape}")
        return self.shape

    def forward(self, x):
        return x.reshape(x.shape[0], *self.shape)


@dataclass(frozen=True, eq=False)
class Transpose(Node):
    """Permute the sample axes by ``perm`` (the batch axis stays first)."""

    perm: tuple[int, ...] = ()
    kind: ClassVar[str] = "transpose"

    def __post_init__(self):
        super().__post_init__()
        object.__setattr__(self, "perm", _ints(self.perm, "perm", 0))

    def output_shape(self, shapes):
        if sorted(self.perm) != list(range(len(shapes[0]))):
            raise ModelFileError(f"{self.where()}: perm {self.perm} is not a permutation of the sample axes of "
                                 f"{shapes[0]}")
        return tuple(shapes[0][p] for p in self.perm)

    def forward(self, x):
        return x.transpose(0, *(p + 1 for p in self.perm))


NODE_KINDS = {cls.kind: cls for cls in (Contraction, Affine, Add, Activation, MaxPool, Reshape, Transpose, Bilinear,
                                        Softmax, LayerNorm)}
_ARRAY_FIELDS = ("weight", "bias", "scale", "shift", "mask")
_OPTIONAL_FIELDS = ("bounds",)  # left out of the records when None (the digests of graphs without them stay)

CLIENT_FUNCTIONS = ("softmax", "logsoftmax", "argmax", "sigmoid", "binary", "normalize_l1", "normalize_l2",
                    "normalize_max", "labels", "zipmap", "cast")
"""What the client computes after decryption: softmax / logsoftmax / argmax along ``axis``; sigmoid
elementwise; binary: a single score s -> the two scores (-s, s) (a two-class linear classifier with one
row of coefficients); normalize_*: divide by the L1 / L2 / max norm along the last axis (ONNX-ML
Normalizer); labels: class index -> ``labels[index]``; zipmap: rows -> [{label: value}] (ONNX-ML ZipMap);
cast: to numpy dtype ``dtype``."""


@dataclass(frozen=True)
class ClientStep:
    """One step the client applies after decryption (one of ``CLIENT_FUNCTIONS``). ``axis`` counts the batch
    axis (ONNX's convention: 1 is the first sample axis, -1 the last)."""

    function: str
    axis: int = -1
    labels: tuple = ()
    keepdims: bool = False
    dtype: str = ""

    def __post_init__(self):
        if self.function not in CLIENT_FUNCTIONS:
            raise ModelFileError(f"client step {self.function!r} is not one of {CLIENT_FUNCTIONS}")
        object.__setattr__(self, "axis", int(self.axis))
        object.__setattr__(self, "labels", tuple(self.labels))
        object.__setattr__(self, "keepdims", bool(self.keepdims))
        if self.axis == 0:
            raise ModelFileError(f"client step {self.function}: axis=0 is the batch axis")
        if self.function in ("labels", "zipmap") and not self.labels:
            raise ModelFileError(f"client step {self.function}: needs labels")
        if self.function == "cast":
            try:
                np.dtype(self.dtype)
            except TypeError:
                raise ModelFileError(f"client step cast: dtype={self.dtype!r} is not a numpy dtype") from None

    def apply(self, y):
        f, axis = self.function, self.axis
        if f in ("softmax", "logsoftmax"):
            y = np.asarray(y, dtype=np.float64)
            shifted = y - y.max(axis=axis, keepdims=True)
            log_sum = np.log(np.exp(shifted).sum(axis=axis, keepdims=True))
            return shifted - log_sum if f == "logsoftmax" else np.exp(shifted - log_sum)
        if f == "argmax":
            index = np.argmax(y, axis=axis)
            return np.expand_dims(index, axis) if self.keepdims else index
        if f == "sigmoid":
            return 1.0 / (1.0 + np.exp(-np.asarray(y, dtype=np.float64)))
        if f == "binary":
            y = np.asarray(y, dtype=np.float64)
            return np.concatenate([-y, y], axis=-1)
        if f.startswith("normalize_"):
            y = np.asarray(y, dtype=np.float64)
            norm = {"normalize_l1": lambda v: np.abs(v).sum(axis=-1, keepdims=True),
                    "normalize_l2": lambda v: np.sqrt((v * v).sum(axis=-1, keepdims=True)),
                    "normalize_max": lambda v: np.abs(v).max(axis=-1, keepdims=True)}[f](y)
            return y / np.where(norm == 0, 1.0, norm)
        if f == "labels":
            return np.asarray(self.labels)[np.asarray(y, dtype=np.int64)]
        if f == "zipmap":
            return [dict(zip(self.labels, (float(v) for v in row))) for row in np.asarray(y)]
        return np.asarray(y).astype(self.dtype)  # cast

    def text(self) -> str:
        extra = {"labels": f" {list(self.labels)}", "zipmap": f" {list(self.labels)}", "cast": f" to {self.dtype}",
                 "softmax": f" axis {self.axis}", "logsoftmax": f" axis {self.axis}",
                 "argmax": f" axis {self.axis}"}.get(self.function, "")
        return self.function + extra


@dataclass(frozen=True)
class ClientOutput:
    """A named output of the source model: ``steps`` applied by the client, in order, to the decrypted
    ``Graph.output`` (no steps: that output itself)."""

    name: str
    steps: tuple = ()

    def __post_init__(self):
        object.__setattr__(self, "name", str(self.name))
        steps = tuple(ClientStep(**s) if isinstance(s, dict) else s for s in self.steps)
        if not all(isinstance(s, ClientStep) for s in steps):
            raise ModelFileError(f"client output {self.name!r}: steps must be ClientStep objects")
        object.__setattr__(self, "steps", steps)

    def apply(self, y):
        for step in self.steps:
            y = step.apply(y)
        return y

    def text(self) -> str:
        return f"{self.name} = " + (" -> ".join(s.text() for s in self.steps) if self.steps else "the output")


def input_form(shape, input_shape) -> str | None:
    """How an array of ``shape`` holds samples of ``input_shape``: "sample" (it is one sample), "batch"
    ((n, *input_shape)), "unit" ((n, *input_shape[1:]) where input_shape[0] == 1: a file exported on a batch of 1
    whose batch axis the reader keeps in the sample, e.g. a transformer's (1, sequence, width), given as the
    user's own batch of n sequences), or None (none of these)."""
    shape, input_shape = tuple(shape), tuple(input_shape)
    if shape == input_shape:
        return "sample"
    if len(shape) == len(input_shape) + 1 and shape[1:] == input_shape and shape[0] >= 1:
        return "batch"
    if len(input_shape) >= 2 and input_shape[0] == 1 and len(shape) == len(input_shape) \
            and shape[1:] == input_shape[1:] and shape[0] >= 1:
        return "unit"
    return None


def input_forms_text(input_shape) -> str:
    """The forms :func:`input_form` takes, for an error message."""
    text = f"neither (batch, *{tuple(input_shape)}) nor one sample {tuple(input_shape)}"
    if len(input_shape) >= 2 and input_shape[0] == 1:
        text += f" nor (batch, *{tuple(input_shape[1:])})"
    return text


def as_batch(x: np.ndarray, form: str) -> np.ndarray:
    """``x`` (in ``form``, :func:`input_form`) as a batch (n, *input_shape)."""
    return {"sample": lambda: x[None], "batch": lambda: x, "unit": lambda: x[:, None]}[form]()


def in_form(y: np.ndarray, form: str) -> np.ndarray:
    """A batch of outputs (n, *output_shape) in the form its input came in: one sample's output for "sample";
    for "unit", the outputs without their leading axis of 1 when they have one (the file's batch axis, as the
    input's), so a (n, sequence, width) input gives (n, sequence, width) outputs as onnxruntime's per-sample
    outputs concatenated do."""
    if form == "sample":
        return y[0]
    if form == "unit" and y.ndim >= 3 and y.shape[1] == 1:
        return y[:, 0]
    return y


@dataclass(frozen=True, eq=False)
class Graph:
    """One input (sample shape ``input_shape``), nodes in topological order, one computed output tensor, and
    ``postprocess``: the source model's named outputs the client derives from it after decryption (empty:
    the output is the model's only one)."""

    input: str
    input_shape: tuple[int, ...]
    nodes: tuple[Node, ...]
    output: str
    postprocess: tuple = ()

    def __post_init__(self):
        object.__setattr__(self, "input_shape", _ints(self.input_shape, "input_shape", 1))
        object.__setattr__(self, "nodes", tuple(self.nodes))
        post = tuple(ClientOutput(**p) if isinstance(p, dict) else p for p in self.postprocess)
        if not all(isinstance(p, ClientOutput) for p in post) or len({p.name for p in post}) != len(post):
            raise ModelFileError("postprocess must be ClientOutput objects with distinct names")
        object.__setattr__(self, "postprocess", post)
        if not self.input_shape:
            raise ModelFileError("input_shape=(): a sample needs at least one axis")
        require_size(self.input_shape, f"graph input {self.input!r}")
        shapes = {self.input: self.input_shape}
        for node in self.nodes:
            if not isinstance(node, Node):
                raise ModelFileError(f"graph node {node!r:.80} is not a Node")
            missing = [name for name in node.inputs if name not in shapes]
            if missing:
                raise ModelFileError(f"{node.where()} reads {missing[0]!r}, which no earlier node produces")
            if node.output in shapes:
                raise ModelFileError(f"{node.where()} writes {node.output!r}, which is already defined")
            shapes[node.output] = tuple(node.output_shape(tuple(shapes[name] for name in node.inputs)))
            require_size(shapes[node.output], f"{node.where()} output {node.output!r}")
        if self.output not in shapes:
            raise ModelFileError(f"graph output {self.output!r} is produced by no node")
        object.__setattr__(self, "_shapes", shapes)

    def shape_of(self, tensor: str) -> tuple[int, ...]:
        """The sample shape of ``tensor``."""
        return self._shapes[tensor]

    @property
    def output_shape(self) -> tuple[int, ...]:
        return self._shapes[self.output]

    def consumers(self, tensor: str) -> tuple[Node, ...]:
        return tuple(node for node in self.nodes if tensor in node.inputs)

    def forward(self, x) -> np.ndarray:
        """The float reference: x is (batch, *input_shape) or one sample (any form :func:`input_form` takes);
        the output in the same form (batch first for a batch)."""
        x = np.asarray(x, dtype=np.float64)
        form = input_form(x.shape, self.input_shape)
        if form is None:
            raise ModelFileError(f"input of shape {x.shape} is {input_forms_text(self.input_shape)}")
        values = {self.input: as_batch(x, form)}
        for node in self.nodes:
            values[node.output] = node.forward(*(values[name] for name in node.inputs))
        return in_form(values[self.output], form)

    __call__ = forward

    def client_outputs(self, y) -> dict:
        """{name: value} of the source model's outputs, computed by the client from the decrypted output y
        (batch first); without ``postprocess``, {output: y}."""
        if not self.postprocess:
            return {self.output: y}
        return {p.name: p.apply(y) for p in self.postprocess}

    def run(self, x) -> dict:
        """The source model's named outputs on x: the float forward, then the client's ``postprocess``."""
        return self.client_outputs(self.forward(x))

    def client_text(self) -> str:
        """What the client computes after decryption, one line per named output ("" if nothing)."""
        return "; ".join(p.text() for p in self.postprocess if p.steps)

    # -- canonical form ------------------------------------------------------------------------------------
    def records(self, *, canonical: bool = False):
        """(JSON-able header, arrays): every node's fields, arrays under ``node{i}.{field}``. With
        ``canonical`` the names of nodes and tensors are replaced by their positions (the digest's form)."""
        rename = {self.input: "input"} if canonical else {}
        header = {"format": "hezk-graph", "version": 1, "input": rename.get(self.input, self.input),
                  "input_shape": list(self.input_shape), "nodes": []}
        arrays = {}
        for index, node in enumerate(self.nodes):
            if canonical:
                rename[node.output] = f"t{index}"
            entry = {"kind": node.kind}
            for item in fields(node):
                value = getattr(node, item.name)
                if item.name in _ARRAY_FIELDS:
                    if value is not None:
                        arrays[f"node{index}.{item.name}"] = value
                    continue
                if item.name in _OPTIONAL_FIELDS and value is None:
                    continue
                if canonical and item.name == "name":
                    continue
                if item.name == "inputs":
                    value = [rename.get(name, name) for name in value]
                elif item.name == "output":
                    value = rename.get(value, value)
                elif isinstance(value, Patches):
                    value = {f.name: (list(getattr(value, f.name)) if isinstance(getattr(value, f.name), tuple)
                                      else getattr(value, f.name)) for f in fields(value)}
                elif isinstance(value, tuple):
                    value = list(value)
                entry[item.name] = value
            header["nodes"].append(entry)
        header["output"] = rename.get(self.output, self.output)
        if self.postprocess:  # only when present: the digests of graphs without it stay
            header["postprocess"] = [{"name": p.name, "steps": [
                {f.name: (list(getattr(s, f.name)) if f.name == "labels" else getattr(s, f.name)) for f in fields(s)}
                for s in p.steps]} for p in self.postprocess]
        return header, arrays

    def digest(self) -> bytes:
        """sha256 of the canonical serialization (node and tensor names left out): the model's identity."""
        header, arrays = self.records(canonical=True)
        hasher = hashlib.sha256(json.dumps(header, sort_keys=True, separators=(",", ":")).encode())
        for key in sorted(arrays):
            array = np.ascontiguousarray(arrays[key], dtype="<f8")
            hasher.update(f"{key}:{array.shape}".encode())
            hasher.update(array.tobytes())
        return hasher.digest()

    @classmethod
    def from_records(cls, header: dict, arrays: dict, where: str = "graph") -> "Graph":
        """The inverse of ``records`` (raises ModelFileError naming the entry that is malformed)."""
        try:
            nodes = []
            for index, entry in enumerate(header["nodes"]):
                entry = dict(entry)
                kind = entry.pop("kind")
                if kind not in NODE_KINDS:
                    raise ModelFileError(f"{where}: node {index} has kind {kind!r}, not one of {sorted(NODE_KINDS)}")
                if isinstance(entry.get("patches"), dict):
                    entry["patches"] = Patches(**entry["patches"])
                for name in _ARRAY_FIELDS:
                    if f"node{index}.{name}" in arrays:
                        entry[name] = arrays[f"node{index}.{name}"]
                for name in ("inputs", "out_shape", "shape", "perm", "bounds"):
                    if entry.get(name) is not None:
                        entry[name] = tuple(entry[name])
                nodes.append(NODE_KINDS[kind](**entry))
            post = tuple(ClientOutput(p["name"], tuple(ClientStep(**step) for step in p["steps"]))
                         for p in header.get("postprocess", ()))
            return cls(header["input"], tuple(header["input_shape"]), tuple(nodes), header["output"], post)
        except (KeyError, TypeError, ValueError) as error:
            if isinstance(error, ModelFileError):
                raise
            raise ModelFileError(f"{where}: malformed graph entry ({type(error).__name__}: {error})") from None

    def summary(self) -> str:
        """One line per node: operator, name, the einsum or function, shapes."""
        lines = [f"input {self.input!r} {self.input_shape}"]
        for node in self.nodes:
            detail = {"contraction": lambda n: f"einsum {n.equation!r}" + (f" over {n.patches}" if n.patches else ""),
                      "activation": lambda n: n.function + (f" {n.bounds}" if n.bounds else ""),
                      "maxpool": lambda n: f"max over {n.patches}", "reshape": lambda n: f"to {n.shape}",
                      "transpose": lambda n: f"perm {n.perm}",
                      "bilinear": lambda n: f"einsum {n.equation!r} of two computed tensors",
                      "softmax": lambda n: f"softmax along sample axis {n.axis}"
                                           + (" (masked)" if n.mask is not None else ""),
                      "layernorm": lambda n: f"layer norm over sample axes {n.axis}.. (epsilon {n.epsilon:g})"}.get(node.kind, lambda n: node.kind)(node)
            lines.append(f"{node.where()}: {detail} -> {self.shape_of(node.output)}")
        if self.client_text():
            lines.append(f"run by the client after decryption: {self.client_text()}")
        return "\n".join(lines)
