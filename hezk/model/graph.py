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
- ``Activation``: elementwise relu, square, sigmoid, tanh, gelu (erf form or its tanh approximation), silu.
- ``Reshape`` (Flatten, Reshape) and ``Transpose`` over the sample axes.

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

ACTIVATIONS = ("relu", "square", "sigmoid", "tanh", "gelu", "gelu_tanh", "silu")
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


def activate(function: str, x: np.ndarray) -> np.ndarray:
    """The float activation ``function`` of x, elementwise."""
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

    def apply(self, x: np.ndarray) -> np.ndarray:
        b, c, h, w = x.shape
        top, left, bottom, right = self.pads
        padded = np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)))
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
    if array is not None and np.broadcast_shapes(tuple(shape), array.shape) != tuple(shape):
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
    """Elementwise ``function`` (one of ``ACTIVATIONS``)."""

    function: str = "relu"
    kind: ClassVar[str] = "activation"

    def __post_init__(self):
        super().__post_init__()
        if self.function not in ACTIVATIONS:
            raise ModelFileError(f"{self.where()}: activation {self.function!r} is not one of {ACTIVATIONS}")

    def forward(self, x):
        return activate(self.function, x)


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


NODE_KINDS = {cls.kind: cls for cls in (Contraction, Affine, Add, Activation, Reshape, Transpose)}
_ARRAY_FIELDS = ("weight", "bias", "scale", "shift")


@dataclass(frozen=True, eq=False)
class Graph:
    """One input (sample shape ``input_shape``), nodes in topological order, one output tensor."""

    input: str
    input_shape: tuple[int, ...]
    nodes: tuple[Node, ...]
    output: str

    def __post_init__(self):
        object.__setattr__(self, "input_shape", _ints(self.input_shape, "input_shape", 1))
        object.__setattr__(self, "nodes", tuple(self.nodes))
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
        """The float reference: x is (batch, *input_shape) (or one sample of input_shape); batch first out."""
        x = np.asarray(x, dtype=np.float64)
        single = x.shape == self.input_shape
        if not single and x.shape[1:] != self.input_shape:
            raise ModelFileError(f"input of shape {x.shape} is neither (batch, *{self.input_shape}) nor one "
                                 f"sample {self.input_shape}")
        values = {self.input: x[None] if single else x}
        for node in self.nodes:
            values[node.output] = node.forward(*(values[name] for name in node.inputs))
        y = values[self.output]
        return y[0] if single else y

    __call__ = forward

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
                for name in ("inputs", "out_shape", "shape", "perm"):
                    if name in entry:
                        entry[name] = tuple(entry[name])
                nodes.append(NODE_KINDS[kind](**entry))
            return cls(header["input"], tuple(header["input_shape"]), tuple(nodes), header["output"])
        except (KeyError, TypeError, ValueError) as error:
            if isinstance(error, ModelFileError):
                raise
            raise ModelFileError(f"{where}: malformed graph entry ({type(error).__name__}: {error})") from None

    def summary(self) -> str:
        """One line per node: operator, name, the einsum or function, shapes."""
        lines = [f"input {self.input!r} {self.input_shape}"]
        for node in self.nodes:
            detail = {"contraction": lambda n: f"einsum {n.equation!r}" + (f" over {n.patches}" if n.patches else ""),
                      "activation": lambda n: n.function, "reshape": lambda n: f"to {n.shape}",
                      "transpose": lambda n: f"perm {n.perm}"}.get(node.kind, lambda n: node.kind)(node)
            lines.append(f"{node.where()}: {detail} -> {self.shape_of(node.output)}")
        return "\n".join(lines)
