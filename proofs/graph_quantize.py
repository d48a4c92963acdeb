"""Quantization of a whole model graph (:mod:`hezk_model`) for the graph proof (issue 13, item 2).

Every tensor t holds integers at a power-of-two scale, t_int = round(t 2^f_t). Per-layer scales come from
calibration data (as EZKL's calibrate-settings does): f_t is the largest f with max|t| 2^f < 2^(A-1) on the
calibration batch (A = ``act_bits``); a constant gets the largest f with max|W| 2^f < 2^(V-1) (V =
``weight_bits``). The integer ops, the reference :meth:`QuantizedGraph.forward_int` proves bit for bit:

- contraction (Gemm, MatMul, Conv, pools, an Affine as an elementwise einsum): acc = einsum(view(x), W) +
  bias at scale 2^(f_x + f_W), then z' = round(acc / 2^R), R = f_x + f_W - f_y (half up, as
  :func:`proofs.quantize.round_shift`), and relu(z') when the node's only consumer is a Relu (fused);
- relu (a Relu after a residual add): relu(x), same scale;
- square (Square, Mul(x, x), Pow(x, 2)): acc = x * x at scale 2^(2 f_x), then y = round(acc / 2^R),
  R = 2 f_x - f_y, its Q bits proven as a contraction's;
- add: y = x1 2^k1 + x2 2^k2 at the finer of the two scales (one of k1, k2 is 0);
- reshape, transpose: index relabelling.

Public constants: a pool's kernel (AveragePool with or without its padding counted, GlobalAveragePool) is fixed
by the graph (the mean over the window), so it is no model weight: the op carries ``constant`` (its kind) and
both sides derive the quantized kernel round(K 2^f_W) from the public structure (:func:`public_weight`); the
proofs never commit it and the verifier evaluates its MLE itself (the node's weight must equal the mean, to
1e-12 relative, or it stays a committed weight, e.g. a pool with a folded scale).

Ranges: every requantized value is proven to have Q signed bits (Q covers the calibration range with
``margin_bits`` to spare, never more than the worst case needs); a contraction's worst-case accumulator,
|x|max sum|W| + |b|, must stay below p/2 and R + Q <= 30 bits, else the model is refused naming the node
(the field would wrap). An input that drives a value out of its Q bits is refused at proving time.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

import numpy as np

from .errors import ModelError, ProofRejected
from .quantize import FIELD_BITS, FIELD_HALF, MAX_FRAC_BITS, round_shift

_AXES = "pqrstuvwxyz"  # letters of an Affine's elementwise einsum (never 'b')


@dataclass(frozen=True, eq=False)
class QOp:
    """One integer op. ``kind`` is contraction, relu, add, reshape or transpose; ``inputs``/``output`` are
    tensor names; the rest is what the kind uses (weights are None on the verifier's public copy)."""

    kind: str
    name: str
    inputs: tuple
    output: str
    equation: str = ""
    patches: object = None  # hezk_model.Patches
    weight: np.ndarray | None = None  # int64, the einsum's constant operand
    weight_shape: tuple = ()
    bias: np.ndarray | None = None  # int64 over bias_letters' axes of the output (reduced broadcast)
    bias_letters: str = ""
    bias_shape: tuple = ()
    einsum_shape: tuple = ()
    shift: int = 0
    q_bits: int = 0
    relu: bool = False
    lefts: tuple = (0, 0)  # add: the left shifts k1, k2
    shape: tuple = ()  # reshape target / transpose perm
    weight_frac: int = 0
    has_bias: bool = False
    constant: str = ""  # a public kernel's kind (:data:`PUBLIC_CONSTANTS`); "" = a committed weight

    def public(self) -> dict:
        out = {"kind": self.kind, "name": self.name, "inputs": list(self.inputs), "output": self.output,
               "equation": self.equation, "weight_shape": list(self.weight_shape), "bias_letters": self.bias_letters,
               "bias_shape": list(self.bias_shape), "einsum_shape": list(self.einsum_shape), "shift": self.shift,
               "q_bits": self.q_bits, "relu": self.relu, "lefts": list(self.lefts), "shape": list(self.shape),
               "weight_frac": self.weight_frac, "has_bias": self.has_bias, "constant": self.constant}
        if self.patches is not None:
            p = self.patches
            out["patches"] = {"kernel": list(p.kernel), "stride": list(p.stride), "pads": list(p.pads),
                              "dilation": list(p.dilation), "groups": p.groups}
        return out

    @classmethod
    def from_public(cls, entry: dict) -> "QOp":
        from hezk_model import Patches
        entry = dict(entry)
        patches = entry.pop("patches", None)
        for key in ("inputs", "weight_shape", "bias_shape", "einsum_shape", "lefts", "shape"):
            entry[key] = tuple(int(v) if key != "inputs" else str(v) for v in entry[key])
        entry["constant"] = str(entry.get("constant", ""))
        if entry["constant"] and entry["constant"] not in PUBLIC_CONSTANTS:
            raise ValueError(f"constant {entry['constant']!r} is not one of {sorted(PUBLIC_CONSTANTS)}")
        return cls(patches=None if patches is None else Patches(**patches), **entry)

    @property
    def committed_weight(self) -> bool:
        """Whether the op's einsum constant is a committed (private) weight, not a public kernel."""
        return self.kind == "contraction" and not self.constant

    @property
    def has_bits(self) -> bool:
        """Whether the op's output is requantized by committed bits (contraction, relu, square)."""
        return self.kind in ("contraction", "relu", "square")


@dataclass(frozen=True, eq=False)
class QuantizedGraph:
    """The integer graph: ops in order, every tensor's sample shape, scale (frac bits) and proven bound."""

    input: str
    input_shape: tuple
    input_frac: int
    input_bound: int  # largest |x_int| accepted
    ops: tuple
    output: str
    shapes: dict = field(default_factory=dict)
    fracs: dict = field(default_factory=dict)
    bounds: dict = field(default_factory=dict)  # largest |t_int| any accepted input can produce
    digest: bytes = b""

    @property
    def output_shape(self) -> tuple:
        return self.shapes[self.output]

    @property
    def output_frac(self) -> int:
        return self.fracs[self.output]

    @property
    def num_parameters(self) -> int:
        return sum((op.weight.size if op.committed_weight else 0) + (0 if op.bias is None else op.bias.size)
                   for op in self.ops if op.kind == "contraction")

    def require_private_constants(self) -> None:
        """Refuse (ModelError) a graph with no committed weight or bias (its pool kernels are public): a
        weights commitment to nothing cannot be made; such a graph is a public function of its input."""
        if not any(op.committed_weight or op.has_bias for op in self.ops):
            raise ModelError("the graph has no weight or bias to commit (its pool kernels are public constants): "
                             "it is a public function of the input, nothing to prove against a commitment")

    def public(self) -> dict:
        """The JSON-able structure a verifier needs (no weights)."""
        return {"input": self.input, "input_shape": list(self.input_shape), "input_frac": self.input_frac,
                "input_bound": self.input_bound, "output": self.output, "digest": self.digest.hex(),
                "ops": [op.public() for op in self.ops],
                "tensors": {t: [list(self.shapes[t]), self.fracs[t], self.bounds[t]] for t in self.shapes}}

    @classmethod
    def from_public(cls, header: dict) -> "QuantizedGraph":
        tensors = header["tensors"]
        return cls(str(header["input"]), tuple(int(n) for n in header["input_shape"]), int(header["input_frac"]),
                   int(header["input_bound"]), tuple(QOp.from_public(op) for op in header["ops"]),
                   str(header["output"]), {t: tuple(int(n) for n in v[0]) for t, v in tensors.items()},
                   {t: int(v[1]) for t, v in tensors.items()}, {t: int(v[2]) for t, v in tensors.items()},
                   bytes.fromhex(header["digest"]))

    def public_text(self) -> str:
        """The canonical JSON text of :meth:`public` (sorted keys, no spaces): what a commitment carries."""
        return json.dumps(self.public(), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_public_text(cls, text: str, where: str) -> "QuantizedGraph":
        """:meth:`from_public` of a commitment's text; anything malformed is ProofRejected at ``where``."""
        try:
            return cls.from_public(json.loads(text))
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            raise ProofRejected(f"malformed structure: {type(error).__name__}: {error}", where) from None

    # ---------------------------------------------------------------------------------------- reference
    def quantize_input(self, x) -> np.ndarray:
        """A float batch (or one sample) -> int64 (batch, *input_shape) at 2^input_frac; integers are taken as
        quantized. Refuses shapes other than the model's and entries above input_bound (ModelError)."""
        x = np.asarray(x)
        if x.shape == self.input_shape:
            x = x[None]
        if x.ndim != len(self.input_shape) + 1 or x.shape[1:] != self.input_shape or x.shape[0] < 1:
            raise ModelError(f"input of shape {x.shape} is not (batch, *{self.input_shape})")
        if x.dtype.kind == "f":
            if not np.all(np.isfinite(x)):
                raise ModelError("input holds NaN or infinite values")
            x = np.floor(x.astype(np.float64) * 2.0 ** self.input_frac + 0.5)
        elif x.dtype.kind not in "iu":
            raise ModelError(f"input dtype {x.dtype} is neither integer nor float")
        largest = float(np.max(np.abs(x.astype(np.float64))))
        if largest > self.input_bound:
            raise ModelError(f"input has an entry of magnitude {largest * 2.0 ** -self.input_frac:g} > the "
                             f"input bound {self.input_bound * 2.0 ** -self.input_frac:g} (input_bound="
                             f"{self.input_bound} at scale 2^{self.input_frac})")
        return x.astype(np.int64)

    def forward_int(self, x_int, *, trace: bool = False):
        """The integer reference on an int64 batch: the output, or with ``trace`` ({tensor: values},
        {op index: accumulator}) (every array batch first, int64)."""
        values = {self.input: np.asarray(x_int, dtype=np.int64)}
        accs = {}
        for index, op in enumerate(self.ops):
            xs = [values[name] for name in op.inputs]
            if op.kind == "contraction":
                acc = contract_int(op, xs[0])
                accs[index] = acc
                out = round_shift(acc, op.shift)
                values[op.output] = np.maximum(out, 0) if op.relu else out
            elif op.kind == "relu":
                accs[index] = xs[0]
                values[op.output] = np.maximum(xs[0], 0)
            elif op.kind == "square":
                accs[index] = xs[0] * xs[0]
                values[op.output] = round_shift(accs[index], op.shift)
            elif op.kind == "add":
                values[op.output] = (xs[0] << op.lefts[0]) + (xs[1] << op.lefts[1])
            elif op.kind == "reshape":
                values[op.output] = xs[0].reshape(xs[0].shape[0], *op.shape)
            else:
                values[op.output] = xs[0].transpose(0, *(p + 1 for p in op.shape))
        return (values, accs) if trace else values[self.output]

    def dequantize(self, y_int) -> np.ndarray:
        return np.asarray(y_int, dtype=np.float64) * 2.0 ** -self.output_frac

    def error_report(self, graph, calibration) -> dict:
        """Mean and max |proven output - float output| on ``calibration`` (dequantized), and the float max."""
        x = np.asarray(calibration, dtype=np.float64)
        reference = graph.forward(x)
        proven = self.dequantize(self.forward_int(self.quantize_input(x)))
        error = np.abs(proven - reference)
        return {"mean_error": float(error.mean()), "max_error": float(error.max()),
                "output_magnitude": float(np.abs(reference).max()),
                "argmax_agreement": float(np.mean(np.argmax(proven.reshape(len(x), -1), 1)
                                                  == np.argmax(reference.reshape(len(x), -1), 1)))}


def contract_int(op: QOp, x: np.ndarray) -> np.ndarray:
    """einsum(view(x), W) reshaped to the output sample shape, plus the broadcast bias (exact int64; float64
    is exact here since every accumulator is < 2^31 by the field check)."""
    view = x if op.patches is None else op.patches.apply(x)
    y = np.einsum(op.equation, view.astype(np.float64), op.weight.astype(np.float64), optimize=True)
    y = np.rint(y).astype(np.int64).reshape(x.shape[0], -1)
    return y.reshape(x.shape[0], *op_out_shape(op)) + (0 if op.bias is None else expand_bias(op))


# equation of each public kernel's contraction
PUBLIC_CONSTANTS = {"average": "bgcuvij,uv->bgcij", "average_valid": "bgcuvij,uvij->bgcij",
                    "global_average": "bchw,hw->bc"}


def average_kernel(kind: str, equation: str, patches, in_shape) -> np.ndarray:
    """The float kernel of a pool of ``kind`` on an input of sample shape (C, H, W): 1/(kh kw) over the window
    ("average"), 1/(real pixels of window (i, j)) ("average_valid", the padding not counted), 1/(H W) over
    the image ("global_average"). Raises ModelError when the equation or the window does not fit the kind."""
    if kind not in PUBLIC_CONSTANTS or equation != PUBLIC_CONSTANTS[kind]:
        raise ModelError(f"public constant {kind!r} with equation {equation!r}: expected one of {PUBLIC_CONSTANTS}")
    if len(in_shape) != 3 or (patches is None) != (kind == "global_average"):
        raise ModelError(f"public constant {kind!r} on input shape {tuple(in_shape)} with window {patches!r}")
    if kind == "global_average":
        return np.full(tuple(in_shape[1:]), 1.0 / (in_shape[1] * in_shape[2]))
    kh, kw = patches.kernel
    if kind == "average":
        return np.full((kh, kw), 1.0 / (kh * kw))
    real = patches.apply(np.ones((1, 1, *in_shape[1:])))[0, 0, 0]  # (kh, kw, Ho, Wo): 1 on real pixels
    return np.ascontiguousarray(np.broadcast_to(1.0 / real.sum(axis=(0, 1)), real.shape))


def public_weight(op: QOp, in_shape) -> np.ndarray:
    """A public-constant op's quantized kernel floor(K 2^weight_frac + 1/2) (int64), from its public fields and
    its input's sample shape only (what prover and verifier both compute). ModelError if it does not fit."""
    kernel = average_kernel(op.constant, op.equation, op.patches, in_shape)
    if kernel.shape != tuple(op.weight_shape):
        raise ModelError(f"op {op.name!r}: public constant of shape {kernel.shape} != weight_shape {op.weight_shape}")
    if not -MAX_FRAC_BITS <= op.weight_frac <= MAX_FRAC_BITS:
        raise ModelError(f"op {op.name!r}: weight_frac={op.weight_frac} outside [-{MAX_FRAC_BITS}, {MAX_FRAC_BITS}]")
    return np.floor(kernel * 2.0 ** op.weight_frac + 0.5).astype(np.int64)


def _public_kind(node, in_shape) -> str:
    """The public-constant kind whose kernel the node's weight is (to 1e-12 relative), or ""."""
    for kind, equation in PUBLIC_CONSTANTS.items():
        if node.equation != equation:
            continue
        try:
            kernel = average_kernel(kind, equation, node.patches, in_shape)
        except ModelError:
            continue
        if kernel.shape == node.weight.shape and np.allclose(node.weight, kernel, rtol=1e-12, atol=0):
            return kind
    return ""


def op_out_shape(op: QOp) -> tuple:
    return tuple(op.shape) if op.kind == "contraction" else ()


def expand_bias(op: QOp) -> np.ndarray:
    """The reduced bias broadcast back over the output sample shape (op.shape holds the out_shape)."""
    letters = "".join(_AXES[i] for i in range(len(op.shape)))
    shape = [op.shape[i] if letters[i] in op.bias_letters else 1 for i in range(len(op.shape))]
    return op.bias.reshape(shape)


def _frac(magnitude: float, bits: int) -> int:
    """The largest f with magnitude 2^f < 2^(bits-1) (clamped to the allowed scales)."""
    if magnitude <= 0:
        return MAX_FRAC_BITS // 2
    return int(max(-MAX_FRAC_BITS, min(MAX_FRAC_BITS, math.floor(math.log2((2 ** (bits - 1) - 1) / magnitude)))))


def _signed_bits(magnitude: int) -> int:
    """Q with every integer of |v| <= magnitude in [-2^(Q-1), 2^(Q-1))."""
    return int(magnitude).bit_length() + 1


def _reduce_bias(bias, out_shape) -> tuple:
    """(reduced bias over the axes where it varies, their letters) of a bias broadcast to out_shape."""
    full = np.broadcast_to(bias, out_shape)
    shape = (1,) * (len(out_shape) - np.ndim(bias)) + np.shape(bias)
    letters = "".join(_AXES[i] for i, n in enumerate(shape) if n > 1)
    index = tuple(slice(None) if n > 1 else 0 for n in shape)
    return np.ascontiguousarray(full[index]), letters


def _square_op(node, source: str, fracs: dict, bounds: dict, like_op, magnitude, act_bits: int,
               margin_bits: int) -> QOp:
    """The square op of Activation ``node`` reading ``source``: acc = x^2 at scale 2^(2 f_x) (refused naming the
    node when the worst case |x|max^2 reaches half the field), requantized to the calibrated scale f_y <= 2 f_x
    (``like_op``: the committed op's shift and Q instead)."""
    where = node.where()
    worst = bounds[source] ** 2
    if worst > FIELD_HALF:
        raise ModelError(f"{where}: the worst-case square ~2^{math.log2(worst):.1f} exceeds half the field "
                         f"({FIELD_HALF} ~2^30): the proof would wrap around; lower act_bits")
    f_acc = 2 * fracs[source]
    if like_op is not None:
        shift, q_bits = like_op.shift, like_op.q_bits
    else:
        f_out = min(_frac(magnitude, act_bits), f_acc)
        shift = f_acc - f_out
        typical = math.ceil(magnitude * 2.0 ** f_out) << margin_bits
        q_bits = _signed_bits(min(worst + (1 << max(shift - 1, 0)) >> shift, max(typical, 1)))
    if shift < 0 or shift + q_bits > FIELD_BITS:
        raise ModelError(f"{where}: requantization needs {shift} + {q_bits} bits > {FIELD_BITS} (the field)")
    return QOp("square", node.name, (source,), node.output, shift=shift, q_bits=q_bits)


def quantize_graph(graph, calibration=None, *, act_bits: int = 12, weight_bits: int = 8,
                   margin_bits: int = 1, like: QuantizedGraph | None = None) -> QuantizedGraph:
    """Quantize a :class:`hezk_model.Graph` with scales chosen on ``calibration`` (a float batch), or with
    the scales and ranges of ``like`` (a committed structure: the prover re-quantizes the same weights).

    Raises ModelError naming the node for an operator the proof cannot prove (an activation other than
    Relu or Square) or a layer whose integers could wrap around the field."""
    from hezk_model import Activation, Add, Affine, Contraction, Reshape, Transpose

    for name, value, low, high in (("act_bits", act_bits, 2, 24), ("weight_bits", weight_bits, 2, 16),
                                   ("margin_bits", margin_bits, 0, 8)):
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise ModelError(f"{name}={value!r} must be an int in [{low}, {high}]")
    floats, chosen = {}, {}
    if like is not None:
        if not isinstance(like, QuantizedGraph) or like.digest != graph.digest():
            raise ModelError("like= is the quantized structure of another model (its digest differs)")
        chosen = {op.output: op for op in like.ops}
    elif calibration is None:
        raise ModelError("quantize_graph needs calibration data (a float batch of inputs) or like=")
    else:
        x = np.asarray(calibration, dtype=np.float64)
        if x.shape == graph.input_shape:
            x = x[None]
        if x.shape[1:] != graph.input_shape or not len(x):
            raise ModelError(f"calibration data of shape {x.shape} is not (n, *{graph.input_shape})")
        floats = {graph.input: x}
        for node in graph.nodes:
            floats[node.output] = node.forward(*(floats[name] for name in node.inputs))

    def magnitude(tensor):
        return float(np.max(np.abs(floats[tensor])))

    fracs, bounds, shapes = {}, {}, {}
    f_in = like.input_frac if like else _frac(magnitude(graph.input), act_bits)
    fracs[graph.input] = f_in
    bounds[graph.input] = like.input_bound if like else (1 << (act_bits - 1 + margin_bits)) - 1
    shapes[graph.input] = graph.input_shape
    ops, fused, alias = [], set(), {}  # fused: contractions whose Relu is folded in; alias: relu out -> theirs
    for node in graph.nodes:
        where = node.where()
        if isinstance(node, Activation) and node.function == "square":
            source = alias.get(node.inputs[0], node.inputs[0])
            op = _square_op(node, source, fracs, bounds, chosen.get(node.output) if like else None,
                            None if like else magnitude(node.output), act_bits, margin_bits)
            ops.append(op)
            fracs[node.output] = 2 * fracs[source] - op.shift
            bounds[node.output] = 1 << (op.q_bits - 1)
        elif isinstance(node, Activation):
            if node.function != "relu":
                what = node.op if node.op.lower() == node.function else f"{node.op} ({node.function})"
                raise ModelError(f"operator {what} (node {node.name!r}) is not provable yet: the graph proof "
                                 f"proves Relu and Square (x * x) activations (with Gemm, MatMul, Conv, pools, Add, "
                                 f"BatchNormalization, Flatten, Reshape, Transpose)")
            source = alias.get(node.inputs[0], node.inputs[0])
            if source in fused:
                fused.discard(source)
                alias[node.output] = source
                continue
            bound = bounds[source]
            q_bits = _signed_bits(bound)
            if q_bits > FIELD_BITS:
                raise ModelError(f"{where}: values up to {bound} need {q_bits} bits > {FIELD_BITS} (field)")
            ops.append(QOp("relu", node.name, (source,), node.output, q_bits=q_bits))
            fracs[node.output], bounds[node.output] = fracs[source], bound
        elif isinstance(node, (Contraction, Affine)):
            source = alias.get(node.inputs[0], node.inputs[0])
            in_shape = graph.shape_of(source)
            out_shape = graph.shape_of(node.output)
            constant = ""
            if isinstance(node, Contraction):
                equation, weight, patches, bias = node.equation, node.weight, node.patches, node.bias
                einsum_shape = node.einsum_shape(in_shape)
                constant = _public_kind(node, in_shape)
                if constant:
                    weight = average_kernel(constant, equation, patches, in_shape)
            else:
                letters = _AXES[:len(in_shape)]
                equation = f"b{letters},{letters}->b{letters}"
                weight = np.broadcast_to(1.0 if node.scale is None else node.scale, in_shape)
                patches, bias, einsum_shape = None, node.shift, in_shape
            f_w = chosen[node.output].weight_frac if like else _frac(float(np.max(np.abs(weight))), weight_bits)
            w_int = np.floor(np.asarray(weight) * 2.0 ** f_w + 0.5).astype(np.int64)  # = public_weight if constant
            f_acc = fracs[source] + f_w
            b_int, b_letters = None, ""
            if bias is not None:
                b_full, b_letters = _reduce_bias(np.asarray(bias), out_shape)
                b_int = np.floor(b_full * 2.0 ** f_acc + 0.5).astype(np.int64)
            # worst case |acc|: bound_x * max over outputs of sum |W| (over the real view), plus |b|
            ones = np.ones((1, *in_shape))
            view = ones if patches is None else patches.apply(ones)
            reach = float(np.max(np.einsum(equation, view, np.abs(w_int).astype(np.float64))))
            worst = bounds[source] * reach + (0 if b_int is None else float(np.max(np.abs(b_int))))
            if worst > FIELD_HALF:
                raise ModelError(f"{where}: the worst-case accumulator ~2^{math.log2(worst):.1f} exceeds half "
                                 f"the field ({FIELD_HALF} ~2^30): the proof would wrap around; lower act_bits "
                                 f"or weight_bits")
            relu = len(graph.consumers(node.output)) == 1 and node.output != graph.output and \
                isinstance(graph.consumers(node.output)[0], Activation) and \
                graph.consumers(node.output)[0].function == "relu"
            if like:
                f_out, q_bits = like.fracs[node.output], chosen[node.output].q_bits
                shift = f_acc - f_out
            else:
                f_out = min(_frac(magnitude(node.output), act_bits), f_acc)
                shift = f_acc - f_out
                typical = math.ceil(magnitude(node.output) * 2.0 ** f_out) << margin_bits
                out_bound = min(int(worst) + (1 << max(shift - 1, 0)) >> shift, max(typical, 1))
                q_bits = _signed_bits(out_bound)
            if shift + q_bits > FIELD_BITS:
                raise ModelError(f"{where}: requantization needs {shift} + {q_bits} bits > {FIELD_BITS} (the field)")
            op = QOp("contraction", node.name, (source,), node.output, equation, patches, w_int, w_int.shape,
                     b_int, b_letters, () if b_int is None else b_int.shape, tuple(einsum_shape), shift, q_bits,
                     relu, shape=tuple(out_shape), weight_frac=f_w, has_bias=b_int is not None, constant=constant)
            ops.append(op)
            fracs[node.output] = f_out
            bounds[node.output] = (1 << (q_bits - 1))
            if relu:
                fused.add(node.output)
        elif isinstance(node, Add):
            a, b = (alias.get(t, t) for t in node.inputs)
            f = max(fracs[a], fracs[b])
            lefts = (f - fracs[a], f - fracs[b])
            bound = (bounds[a] << lefts[0]) + (bounds[b] << lefts[1])
            if bound > FIELD_HALF:
                raise ModelError(f"{where}: the sum reaches {bound} > {FIELD_HALF} (half the field)")
            ops.append(QOp("add", node.name, (a, b), node.output, lefts=lefts))
            fracs[node.output], bounds[node.output] = f, bound
        elif isinstance(node, (Reshape, Transpose)):
            source = alias.get(node.inputs[0], node.inputs[0])
            kind, shape = ("reshape", node.shape) if isinstance(node, Reshape) else ("transpose", node.perm)
            ops.append(QOp(kind, node.name, (source,), node.output, shape=tuple(shape)))
            fracs[node.output], bounds[node.output] = fracs[source], bounds[source]
        else:
            raise ModelError(f"{where}: node kind {node.kind!r} cannot be proven")
        shapes[node.output] = graph.shape_of(node.output)
    output = alias.get(graph.output, graph.output)
    return QuantizedGraph(graph.input, tuple(graph.input_shape), f_in, bounds[graph.input], tuple(ops), output,
                          shapes, fracs, bounds, graph.digest())
