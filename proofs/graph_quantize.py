"""Quantization of a whole model graph (:mod:`hezk.model`) for the graph proof (issue 13, item 2).

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
- lookup (Sigmoid, Tanh, Gelu, Silu, ... : :data:`LOOKUP_FUNCTIONS`): y = T[x] for x in [-2^(b-1), 2^(b-1)), the
  public table T[v] = round(f(v 2^-f_x) 2^f_y) (:func:`lookup_table`, derived by both sides from the structure),
  b = ``q_bits`` (the input's proven width, at most :data:`MAX_LOOKUP_BITS`), proven by a lookup argument
  (:mod:`proofs.lookup`) that also shows x within the table's range; the output bound is max |T|;
- MaxPool and Clip (ReLU6, clamp, Min / Max with a constant): lowered to contractions with
  public 0/+-1 kernels (:data:`SELECTION_CONSTANTS`) and fused ReLUs at the input's scale, exact: max(a, b) =
  relu(a - b) + relu(b) - relu(-b) level by level over the window (:func:`_maxpool_ops`), clip(x, lo, hi) =
  lo + relu(x - lo) - relu(x - hi), lo and hi rounded to the grid and committed as a bias (:func:`_clip_ops`);
- bilinear (attention's q k^T and its weighted sum, a product of two computed tensors): acc = einsum(x1, x2) at
  scale 2^(f_1 + f_2), requantized as a contraction; the operands are laid out b, shared, contracted, own letters
  (the quantizer transposes them there: :func:`bilinear_layout`), what the hiding proof's one-block relation reads;
- LayerNorm and Softmax over the last axis, lowered to those ops (:func:`_layernorm_ops`, :func:`_softmax_ops`):
  d = x - mean (the row mean by a public 1/n kernel at x's scale, broadcast by a public -1 kernel, added),
  var = mean(d^2) + eps, inv = rsqrt(var) by a lookup, y = d * inv (a bilinear op) then gamma, beta; Softmax by the row max (a max tree over the last axis, exact), d = x - max <= 0,
  e = exp(d) by a lookup (e_max = 2^f_e exactly), s = sum e >= 1, r = 1/s by a lookup, y = e * r;
- reshape, transpose: index relabelling.

Public constants: a pool's kernel (AveragePool with or without its padding counted, GlobalAveragePool) is fixed
by the graph (the mean over the window), so it is no model weight: the op carries ``constant`` (its kind) and
both sides derive the quantized kernel round(K 2^f_W) from the public structure (:func:`public_weight`); the
proofs never commit it and the verifier evaluates its MLE itself (the node's weight must equal the mean, to
1e-12 relative, or it stays a committed weight, e.g. a pool with a folded scale). The selections of a lowered MaxPool
or Clip are public the same way (:func:`selection_kernel`, at weight_frac 0), and :func:`validate_structure` refuses
a prover's copy whose public kernel differs from the derived one.

Ranges: every requantized value is proven to have Q signed bits (Q covers the calibration range with
``margin_bits`` to spare, never more than the worst case needs); a contraction's worst-case accumulator,
|x|max sum|W| + |b|, must stay below p/2 and R + Q <= 30 bits, else the model is refused naming the node
(the field would wrap). An input that drives a value out of its Q bits is refused at proving time.

The statement: :func:`validate_structure` checks every field of a structure (op kinds and their fields, wiring,
each requantized op's shift + q_bits <= FIELD_BITS, bounds within (p-1)/2, scales, sizes) against what the
soundness argument and the verifier's memory (:func:`verifier_memory_bytes`) need; :meth:`QuantizedGraph.from_public`
(every verifier's parse) and :func:`quantize_graph` both run it, so no verifier path skips it and the quantizer
never makes a statement the verifiers refuse.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import math
from dataclasses import dataclass, field

import numpy as np

from .errors import ModelError, ProofRejected
from .quantize import FIELD_BITS, FIELD_HALF, MAX_FRAC_BITS, round_shift

EINSUM_AXES = "pqrstuvwxyz"  # letters of an Affine's elementwise einsum (never 'b')


@dataclass(frozen=True, eq=False)
class QOp:
    """One integer op. ``kind`` is contraction, relu, square, add, reshape, transpose, lookup or bilinear; ``inputs``/``output`` are
    tensor names; the rest is what the kind uses (weights are None on the verifier's public copy)."""

    kind: str
    name: str
    inputs: tuple
    output: str
    equation: str = ""
    patches: object = None  # hezk.model.Patches
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
    function: str = ""  # a lookup's function (:data:`LOOKUP_FUNCTIONS`)
    mask: str = ""  # a masked Softmax's row_fill / row_keep kernel: its input's 0/1 mask, one character an entry

    def public(self) -> dict:
        out = {"kind": self.kind, "name": self.name, "inputs": list(self.inputs), "output": self.output,
               "equation": self.equation, "weight_shape": list(self.weight_shape), "bias_letters": self.bias_letters,
               "bias_shape": list(self.bias_shape), "einsum_shape": list(self.einsum_shape), "shift": self.shift,
               "q_bits": self.q_bits, "relu": self.relu, "lefts": list(self.lefts), "shape": list(self.shape),
               "weight_frac": self.weight_frac, "has_bias": self.has_bias, "constant": self.constant}
        if self.function:  # only a lookup's (other ops' public text is unchanged)
            out["function"] = self.function
        if self.mask:  # only a masked Softmax's kernels'
            out["mask"] = self.mask
        if self.patches is not None:
            p = self.patches
            out["patches"] = {"kernel": list(p.kernel), "stride": list(p.stride), "pads": list(p.pads),
                              "dilation": list(p.dilation), "groups": p.groups}
        return out

    @classmethod
    def from_public(cls, entry: dict) -> "QOp":
        """The op of a :meth:`public` entry; its fields are checked by :func:`validate_structure` (every
        structure is validated as a whole, its wiring included, by :meth:`QuantizedGraph.from_public`)."""
        from hezk.model import Patches
        entry = dict(entry)
        if set(entry) - _OP_FIELDS or not {"kind", "name", "inputs", "output"} <= set(entry):
            raise ValueError(f"op fields {sorted(entry)}: expected {sorted(_OP_FIELDS)}")
        patches = entry.pop("patches", None)
        for key in ("weight_shape", "bias_shape", "einsum_shape", "lefts", "shape"):
            entry[key] = tuple(_integer(v, key) for v in entry.get(key, ()))
        entry["inputs"] = tuple(_text(v, "inputs") for v in entry["inputs"])
        for key in ("kind", "name", "output", "equation", "bias_letters", "constant", "function", "mask"):
            entry[key] = _text(entry.get(key, ""), key)
        for key in ("shift", "q_bits", "weight_frac"):
            entry[key] = _integer(entry.get(key, 0), key)
        for key in ("relu", "has_bias"):
            entry[key] = _flag(entry.get(key, False), key)
        if patches is not None:
            if not isinstance(patches, dict) or set(patches) - {"kernel", "stride", "pads", "dilation", "groups"}:
                raise ValueError(f"patches {patches!r}: expected kernel, stride, pads, dilation, groups")
            patches = Patches(**{key: _integer(value, key) if key == "groups" else
                                 tuple(_integer(v, key) for v in value) for key, value in patches.items()})
        return cls(patches=patches, **entry)

    @property
    def committed_weight(self) -> bool:
        """Whether the op's einsum constant is a committed (private) weight, not a public kernel."""
        return self.kind == "contraction" and not self.constant

    @property
    def has_bits(self) -> bool:
        """Whether the op's output is requantized by committed bits (contraction, relu, square, bilinear)."""
        return self.kind in ("contraction", "relu", "square", "bilinear")


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
        """The structure of a :meth:`public` header, validated (:func:`validate_structure`: ProofRejected naming
        the op and the field); a malformed header raises KeyError, TypeError or ValueError."""
        tensors = header["tensors"]
        if not isinstance(tensors, dict) or len(tensors) > MAX_OPS + 1 or len(header["ops"]) > MAX_OPS:
            raise ValueError(f"a structure holds at most {MAX_OPS} ops and {MAX_OPS + 1} tensors")
        for name, value in tensors.items():
            if not isinstance(value, list) or len(value) != 3 or not isinstance(value[0], list):
                raise ValueError(f"tensor {name!r}: expected [shape, frac, bound], got {value!r}")
        structure = cls(_text(header["input"], "input"), tuple(_integer(n, "input_shape") for n in header["input_shape"]),
                        _integer(header["input_frac"], "input_frac"), _integer(header["input_bound"], "input_bound"),
                        tuple(QOp.from_public(op) for op in header["ops"]), _text(header["output"], "output"),
                        {t: tuple(_integer(n, "shape") for n in v[0]) for t, v in tensors.items()},
                        {t: _integer(v[1], "frac") for t, v in tensors.items()},
                        {t: _integer(v[2], "bound") for t, v in tensors.items()},
                        bytes.fromhex(_text(header["digest"], "digest")))
        validate_structure(structure)
        return structure

    def validate(self, where: str = "graph structure") -> None:
        """:func:`validate_structure` (ProofRejected naming the op and the field)."""
        validate_structure(self, where)

    def public_text(self) -> str:
        """The canonical JSON text of :meth:`public` (sorted keys, no spaces): what a commitment carries."""
        return json.dumps(self.public(), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_public_text(cls, text: str, where: str) -> "QuantizedGraph":
        """:meth:`from_public` of a commitment's text; anything malformed is ProofRejected at ``where``."""
        try:
            return cls.from_public(json.loads(text))
        except ProofRejected as rejection:
            raise ProofRejected(rejection.reason, f"{where} / {rejection.where}") from None
        except (KeyError, TypeError, ValueError, AttributeError, RecursionError) as error:
            raise ProofRejected(f"malformed structure: {type(error).__name__}: {error}", where) from None

    # ---------------------------------------------------------------------------------------- reference
    def quantize_input(self, x) -> np.ndarray:
        """A float batch (or one sample) -> int64 (batch, *input_shape) at 2^input_frac; integers are taken as
        quantized. Refuses shapes other than the model's and entries above input_bound (ModelError)."""
        from hezk.model import as_batch, input_form, input_forms_text

        x = np.asarray(x)
        form = input_form(x.shape, self.input_shape)
        if form is None:
            raise ModelError(f"input of shape {x.shape} is {input_forms_text(self.input_shape)}")
        x = as_batch(x, form)
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
            elif op.kind == "lookup":
                values[op.output] = lookup_int(op, xs[0], self.fracs[op.inputs[0]], self.fracs[op.output])
            elif op.kind == "bilinear":
                accs[index] = bilinear_int(op, xs[0], xs[1])
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


#: public 0/+-1 kernels of the lowered MaxPool and Clip (:func:`selection_kernel`), always at weight_frac 0
SELECTION_CONSTANTS = ("max_split", "max_join", "clip_split", "clip_join")
_MAX_WINDOW = "bgcuvij,uvtl->bgctlij"  # a max level's split of the window of x (C, H, W) -> (C, 3, m, Ho, Wo)
_MAX_PADDED = "bgcuvij,ijuvtl->bgctlij"  # the same of a padded window: per output, its real candidates only
_MAX_FOLD = "bctkij,tksl->bcslij"  # a later level's split of the previous split (C, 3, n, Ho, Wo), its join folded in
_MAX_JOIN = "bctlij,t->bclij"  # the last level's (C, 3, 1, Ho, Wo) -> (C, 1, Ho, Wo), the kernel (1, 1, -1)
_JOIN = np.array([1, 1, -1], dtype=np.int64)  # relu(a - b) + relu(b) - relu(-b) = max(a, b)


def max_split(n: int) -> np.ndarray:
    """The (n, 3, m) 0/+-1 kernel of one level of a max tree over n candidates t, m = ceil(n / 2): output l is
    (a - b, b, -b) for a = t_l, b = t_(l+m) (b = a when l + m >= n: an unpaired candidate passes), so that
    relu(a - b) + relu(b) - relu(-b) = max(a, b) (the join)."""
    m = (n + 1) // 2
    kernel = np.zeros((n, 3, m), dtype=np.int64)
    for l in range(m):
        partner = l + m if l + m < n else l
        kernel[l, 0, l] += 1
        kernel[partner, 0, l] -= 1
        kernel[partner, 1, l], kernel[partner, 2, l] = 1, -1
    return kernel


def padded_max_split(patches, in_shape) -> np.ndarray:
    """The (Ho, Wo, kh, kw, 3, m) first-level kernel of a padded window (padding is -inf to a max, not the zero
    the window reads): at output (i, j), candidate k reads window element k where it is real, else the window's
    first real element (a repeat: max is idempotent), then :func:`max_split`. ModelError for a window of padding
    only."""
    kh, kw = patches.kernel
    real = patches.apply(np.ones((1, 1, *tuple(in_shape)[1:])))[0, 0, 0].reshape(kh * kw, -1) > 0  # (n, Ho Wo)
    if not real.any(axis=0).all():
        raise ModelError(f"window {patches} over the input {tuple(in_shape)} has a window of padding only")
    n = kh * kw
    pick = np.where(real, np.arange(n)[:, None], real.argmax(axis=0)[None])  # (k, Ho Wo): element candidate k reads
    kernel = np.einsum("kpe,ktl->petl", (pick[:, :, None] == np.arange(n)).astype(np.int64), max_split(n))
    return kernel.reshape(*patches.output_hw(*tuple(in_shape)[1:]), kh, kw, *kernel.shape[2:])


def selection_kernel(kind: str, equation: str, patches, in_shape) -> np.ndarray:
    """The int64 kernel of a public selection of ``kind`` (:data:`SELECTION_CONSTANTS`) on an input of sample
    shape ``in_shape``, from the public structure only: a MaxPool level's ``max_split`` (:func:`max_split`: on
    the unpadded window of x, equation ``bgcuvij,uvtl->bgctlij``; :func:`padded_max_split` on a padded one,
    ``bgcuvij,ijuvtl->bgctlij``; on the previous level's split (C, 3, n, Ho, Wo), ``bctkij,tksl->bcslij``, the
    join (1, 1, -1) folded in) and the last level's ``max_join`` ((1, 1, -1), ``bctlij,t->bclij``), or a clip's
    ``clip_split`` (x -> (x, x), ones over (2, *shape), elementwise) and ``clip_join`` ((a, b) -> a - b, (1, -1)).
    Raises ModelError when the equation, window or shape does not fit the kind."""
    shape = tuple(in_shape)
    if kind == "max_split":
        if equation == _MAX_WINDOW and patches is not None and len(shape) == 3 and patches.groups == 1 \
                and not any(patches.pads):
            n = patches.kernel[0] * patches.kernel[1]
            return max_split(n).reshape(*patches.kernel, 3, -1)
        if equation == _MAX_PADDED and patches is not None and len(shape) == 3 and patches.groups == 1 \
                and any(patches.pads):
            return padded_max_split(patches, shape)
        if equation == _MAX_FOLD and patches is None and len(shape) == 5 and shape[1] == 3 and shape[2] >= 2:
            return np.einsum("t,ksl->tksl", _JOIN, max_split(shape[2]))
    elif kind == "max_join" and equation == _MAX_JOIN and patches is None and len(shape) == 5 and shape[1] == 3:
        return _JOIN.copy()
    elif kind == "clip_split" and patches is None and 1 <= len(shape) < len(EINSUM_AXES):
        letters = EINSUM_AXES[:len(shape)]
        if equation == f"b{letters},k{letters}->bk{letters}":
            return np.ones((2, *shape), dtype=np.int64)
    elif kind == "clip_join" and patches is None and 2 <= len(shape) <= len(EINSUM_AXES) and shape[0] == 2:
        letters = EINSUM_AXES[:len(shape) - 1]
        if equation == f"bk{letters},k->b{letters}":
            return np.array([1, -1], dtype=np.int64)
    raise ModelError(f"public selection {kind!r} with equation {equation!r} on the input shape {shape} and window "
                     f"{patches}: expected a max level's split ({_MAX_WINDOW!r} on an unpadded window of one group, "
                     f"{_MAX_PADDED!r} on a padded one, {_MAX_FOLD!r} on a split of >= 2 candidates) or join "
                     f"({_MAX_JOIN!r}), or a clip's split / join")


#: public kernels over a tensor's last axis k (n entries) of lowered LayerNorm and Softmax (:func:`row_kernel`):
#: the mean 1/n quantized at weight_frac, and 0/+-1 selections at weight_frac 0 (sum, a max level's split and join,
#: the broadcast of -max or -mean over the row, an elementwise rescale; a masked Softmax's fill and keep, from the
#: op's public 0/1 mask: :func:`mask_kernel`)
ROW_CONSTANTS = ("row_mean",)
ROW_SELECTIONS = ("row_sum", "row_max_split", "row_max_join", "row_broadcast", "rescale", "row_fill", "row_keep")
MASKED_ROWS = ("row_fill", "row_keep")  #: the row kernels derived from an op's ``mask``


def row_equation(kind: str, rank: int) -> str:
    """The einsum of a row kernel on an input of ``rank`` sample axes (letters p, q, ...; k its last): mean, sum
    'b...k,kz->b...z'; the broadcast of a (..., 1) row 'b...k,...kz->b...z', a rescale 'b...,...->b...'; a max split 'b...k,kyz->b...yz'; a max join over the split's (3, m) axes
    'b...tl,t->b...l'."""
    letters = EINSUM_AXES[:rank]
    if kind == "row_max_split":
        return f"b{letters},{letters[-1]}yz->b{letters[:-1]}yz"
    if kind == "row_max_join":
        return f"b{letters},{letters[-2:-1]}->b{letters[:-2]}{letters[-1:]}"
    if kind in ("row_broadcast", "row_fill"):  # every sample letter on the kernel: the read binds the row's letters
        return f"b{letters},{letters}z->b{letters[:-1]}z"
    if kind in ("rescale", "row_keep"):  # elementwise: ones (x requantized to fewer bits, a bilinear operand), mask
        return f"b{letters},{letters}->b{letters}"
    return f"b{letters},{letters[-1]}z->b{letters[:-1]}z"


def mask_text(mask) -> str:
    """The public text of a 0/1 mask: one character '0' or '1' an entry, in C order."""
    return "".join("1" if v else "0" for v in np.asarray(mask).reshape(-1))


def mask_kernel(kind: str, mask: str, in_shape) -> np.ndarray:
    """A masked Softmax's public 0/1 kernel (int64) from its input's mask text (:func:`mask_text`, the input's
    sample shape, every row along the last axis keeping an entry): ``row_keep`` is the mask itself (e * mask: a
    dropped entry's exp is 0 exactly), ``row_fill`` (shape (*in_shape, n)) maps a row x to x where kept and to the
    row's first kept entry where dropped, so the max tree over it is the max over the kept entries (a repeat: max
    is idempotent). ModelError when the text does not fit."""
    shape = tuple(in_shape)
    if len(mask) != math.prod(shape) or set(mask) - {"0", "1"}:
        raise ModelError(f"mask of {len(mask)} characters: expected {math.prod(shape)} of '0' / '1' (the input "
                         f"{shape}'s entries)")
    keep = (np.frombuffer(mask.encode(), dtype=np.uint8) == ord("1")).astype(np.int64).reshape(shape)
    if not keep.any(axis=-1).all():
        raise ModelError("the mask drops a whole row along the last axis")
    if kind == "row_keep":
        return keep
    n = shape[-1]
    first = keep.argmax(axis=-1)  # (...): each row's first kept entry
    kernel = np.einsum("...z,kz->...kz", keep, np.eye(n, dtype=np.int64))
    kernel += (np.arange(n) == first[..., None])[..., :, None] * (1 - keep)[..., None, :]
    return kernel


def row_kernel(kind: str, equation: str, in_shape, weight_shape, mask: str = "") -> np.ndarray:
    """The kernel of a row constant (float) or selection (int64) from the public structure (a masked row's from its
    ``mask`` text: :func:`mask_kernel`); ModelError when the equation or the shapes do not fit the kind (a row needs
    at least one entry; a max split two)."""
    shape, n = tuple(in_shape), (tuple(in_shape) or (0,))[-1]
    fits = 1 <= len(shape) < len(EINSUM_AXES) - 2 and equation == row_equation(kind, len(shape))
    if bool(mask) != (kind in MASKED_ROWS):
        raise ModelError(f"row kernel {kind!r}: a mask is {'required' if kind in MASKED_ROWS else 'not allowed'}")
    if fits and kind in MASKED_ROWS and padded_entries((*shape, n) if kind == "row_fill" else shape) \
            <= MAX_TENSOR_ENTRIES:
        return mask_kernel(kind, mask, shape)
    if fits and kind == "row_mean" and n >= 1:
        return np.full((n, 1), 1.0 / n)
    if fits and kind == "rescale" and padded_entries(shape) <= MAX_TENSOR_ENTRIES:
        return np.ones(shape, dtype=np.int64)
    if fits and kind == "row_sum" and n >= 1:
        return np.ones((n, 1), dtype=np.int64)
    if fits and kind == "row_max_split" and n >= 2:
        return max_split(n)
    if fits and kind == "row_max_join" and len(shape) >= 2 and shape[-2] == 3:
        return np.array([1, 1, -1], dtype=np.int64)
    if fits and kind == "row_broadcast" and n == 1 and len(weight_shape) == len(shape) + 1 \
            and tuple(weight_shape[:-1]) == shape and 1 <= weight_shape[-1] and \
            padded_entries(weight_shape) <= MAX_TENSOR_ENTRIES:
        return -np.ones(tuple(weight_shape), dtype=np.int64)
    raise ModelError(f"row kernel {kind!r} with equation {equation!r} on the input shape {shape} (weight "
                     f"{tuple(weight_shape)}): expected {row_equation(kind, max(len(shape), 2))!r} on a row that fits")


def public_weight(op: QOp, in_shape) -> np.ndarray:
    """A public-constant op's quantized kernel floor(K 2^weight_frac + 1/2) (int64), from its public fields and
    its input's sample shape only (what prover and verifier both compute). ModelError if it does not fit."""
    if op.constant in ROW_CONSTANTS + ROW_SELECTIONS:
        kernel = row_kernel(op.constant, op.equation, in_shape, op.weight_shape, op.mask)
        frac = op.weight_frac if op.constant in ROW_CONSTANTS else 0
        if kernel.shape != tuple(op.weight_shape) or op.weight_frac != frac or abs(frac) > MAX_FRAC_BITS:
            raise ModelError(f"op {op.name!r}: row kernel of shape {kernel.shape} at weight_frac {frac}, declared "
                             f"{op.weight_shape} at weight_frac {op.weight_frac}")
        return kernel if op.constant in ROW_SELECTIONS else np.floor(kernel * 2.0 ** frac + 0.5).astype(np.int64)
    if op.constant in SELECTION_CONSTANTS:
        kernel = selection_kernel(op.constant, op.equation, op.patches, in_shape)
        if kernel.shape != tuple(op.weight_shape) or op.weight_frac != 0:
            raise ModelError(f"op {op.name!r}: public selection of shape {kernel.shape} at weight_frac 0, declared "
                             f"{op.weight_shape} at weight_frac {op.weight_frac}")
        return kernel
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
    letters = "".join(EINSUM_AXES[i] for i in range(len(op.shape)))
    shape = [op.shape[i] if letters[i] in op.bias_letters else 1 for i in range(len(op.shape))]
    return op.bias.reshape(shape)


# ------------------------------------------------------------------------------------------------ lookups
MAX_LOOKUP_BITS = 16  #: a lookup's input width b: tables of at most 2^16 rows (each verifier evaluates its own)
#: the elementwise functions a lookup proves: :data:`hezk.model.graph.ACTIVATIONS`' own (all but relu, square and
#: clip, evaluated by :func:`hezk.model.graph.activate`), and erf, exp and torch's hardsigmoid
LOOKUP_FUNCTIONS = ("sigmoid", "tanh", "gelu", "gelu_tanh", "silu", "softplus", "softsign", "hardswish", "mish", "elu",
                    "selu", "erf", "exp", "hardsigmoid")
#: the lookups of lowered LayerNorm and Softmax (no model activation): 1/sqrt(x) over its input's grid from one step
#: up (an input v <= 0 reads the table at v = 1: a variance plus epsilon is positive), 1/max(x, 1) (a max-shifted
#: softmax's sum of exps is >= 1) and exp(min(x, 0)) (a softmax's x - max <= 0); the clamps keep the tables small
LOWERED_LOOKUPS = ("rsqrt", "reciprocal", "softmax_exp")
TABLE_FUNCTIONS = LOOKUP_FUNCTIONS + LOWERED_LOOKUPS  #: every function a lookup op may name
_erf = np.frompyfunc(math.erf, 1, 1)


def lookup_float(function: str, x) -> np.ndarray:
    """The float function of a lookup (:data:`LOOKUP_FUNCTIONS`; hardsigmoid as torch's, clip(x / 6 + 1/2, 0, 1));
    ModelError for a function neither :func:`hezk.model.graph.activate` nor this module knows."""
    from hezk.model.graph import ACTIVATIONS, activate
    x = np.asarray(x, dtype=np.float64)
    if function in ACTIVATIONS and function in LOOKUP_FUNCTIONS:
        return activate(function, x)
    if function == "erf":
        return _erf(x).astype(np.float64)
    if function == "softplus":
        return np.logaddexp(0.0, x)
    if function == "exp":
        return np.exp(x)
    if function == "hardsigmoid":
        return np.clip(x / 6.0 + 0.5, 0.0, 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        if function == "rsqrt":
            return 1.0 / np.sqrt(x)
        if function == "reciprocal":
            return 1.0 / np.maximum(x, 1.0)
    if function == "softmax_exp":
        return np.exp(np.minimum(x, 0.0))
    raise ModelError(f"lookup function {function!r} is not one of {TABLE_FUNCTIONS} known to this version")


@functools.lru_cache(maxsize=32)
def lookup_table(function: str, bits: int, f_in: int, f_out: int) -> tuple:
    """The public table of a lookup, both sides' own: (inputs v = -2^(b-1) .. 2^(b-1) - 1, outputs
    T[v] = floor(f(v 2^-f_in) 2^f_out + 1/2)), read-only int64. ModelError unless every T[v] is finite with
    |T[v]| <= (p-1)/2 (half the field, so no output has two residues) and b in [1, MAX_LOOKUP_BITS]."""
    if function not in TABLE_FUNCTIONS:
        raise ModelError(f"lookup function {function!r} is not one of {TABLE_FUNCTIONS}")
    if not 1 <= bits <= MAX_LOOKUP_BITS or abs(f_in) > MAX_SCALE or abs(f_out) > MAX_SCALE:
        raise ModelError(f"lookup of {bits} bits at scales 2^{f_in} -> 2^{f_out}: needs bits in [1, "
                         f"{MAX_LOOKUP_BITS}] (MAX_LOOKUP_BITS) and scales within 2^+-{MAX_SCALE}")
    inputs = np.arange(-(1 << (bits - 1)), 1 << (bits - 1), dtype=np.int64)
    grid = np.maximum(inputs, 1) if function == "rsqrt" else inputs  # from one step up
    with np.errstate(over="ignore", invalid="ignore"):
        scaled = lookup_float(function, np.ldexp(grid.astype(np.float64), -f_in)) * 2.0 ** f_out
    if not np.all(np.isfinite(scaled)) or float(np.max(np.abs(scaled))) >= FIELD_HALF:
        raise ModelError(f"lookup {function} of {bits} bits at scales 2^{f_in} -> 2^{f_out}: a table value is not "
                         f"finite or reaches half the field ({FIELD_HALF}); lower act_bits or the input's range")
    outputs = np.floor(scaled + 0.5).astype(np.int64)
    inputs.setflags(write=False)
    outputs.setflags(write=False)
    return inputs, outputs


def lookup_int(op: QOp, x, f_in: int, f_out: int) -> np.ndarray:
    """y = T[x] elementwise (int64); ModelError naming the op for an x outside [-2^(b-1), 2^(b-1))."""
    _, outputs = lookup_table(op.function, op.q_bits, f_in, f_out)
    x = np.asarray(x, dtype=np.int64)
    index = x + (1 << (op.q_bits - 1))
    outside = (index < 0) | (index >= len(outputs))
    if np.any(outside):
        raise ModelError(f"op {op.name!r}: input value {int(x[outside].reshape(-1)[0])} outside the {op.function} "
                         f"table's [-2^{op.q_bits - 1}, 2^{op.q_bits - 1}) (an input outside the calibrated range)")
    return outputs[index]


def _lookup_bits(ops, source: str, bounds: dict) -> int:
    """A lookup's b: the proven width Q of its input when a requantized op makes it (values in
    [-2^(Q-1), 2^(Q-1))), else the signed bits of the input's bound."""
    producer = next((op for op in ops if op.output == source), None)
    if producer is not None and producer.has_bits:
        return producer.q_bits
    return _signed_bits(bounds[source])


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
    letters = "".join(EINSUM_AXES[i] for i, n in enumerate(shape) if n > 1)
    index = tuple(slice(None) if n > 1 else 0 for n in shape)
    return np.ascontiguousarray(full[index]), letters


def _selection_op(name: str, source: str, output: str, kind: str, equation: str, patches, in_shape, out_shape,
                  einsum_shape, bound: int, q_bound: int, where: str, *, relu: bool = False, bias=None,
                  bias_letters: str = "") -> QOp:
    """A contraction of ``source`` with a public selection kernel (:func:`selection_kernel`) at weight_frac 0 and
    shift 0 (exact: no rounding), its output proven within the signed bits of ``q_bound``; ``bound``: the worst
    |accumulator| (refused naming ``where`` from half the field on)."""
    if bound > FIELD_HALF or _signed_bits(q_bound) > FIELD_BITS:
        raise ModelError(f"{where}: the lowered {kind} reaches ~2^{math.log2(max(bound, 1)):.1f} > half the field "
                         f"({FIELD_HALF} ~2^30): the proof would wrap around; lower act_bits")
    weight = selection_kernel(kind, equation, patches, in_shape)
    b_int = None if bias is None else np.asarray(bias, dtype=np.int64)
    return QOp("contraction", name, (source,), output, equation, patches, weight, weight.shape, b_int, bias_letters,
               () if b_int is None else b_int.shape, tuple(einsum_shape), 0, _signed_bits(q_bound), relu,
               shape=tuple(out_shape), weight_frac=0, has_bias=b_int is not None, constant=kind)


def _maxpool_ops(node, source: str, in_shape, bound: int, fresh) -> list:
    """MaxPool lowered to proven ops at the input's scale (exact: a max of integers is one of them): a tree of
    levels, each halving the candidates by max(a, b) = relu(a - b) + relu(b) - relu(-b): a ``max_split`` per level
    (a public 0/+-1 kernel, :func:`max_split`, ReLU fused; the first reads the window, a padded one through
    :func:`padded_max_split`; a later one reads the previous split, its join (1, 1, -1) folded into its kernel),
    then the last level's ``max_join`` (1, 1, -1) to (C, Ho, Wo). Every stored tensor is read by one op (a hiding
    proof's stated values stay independent). [(op, shape, bound)] in op order; ``fresh(suffix)`` names an
    intermediate. Worst accumulators (the field check) count the proven ranges: |split| < 4B, 6 of them a fold."""
    patches, where = node.patches, node.where()
    c, h, w = in_shape
    ho, wo = patches.output_hw(h, w)
    n, current, ops, level = patches.kernel[0] * patches.kernel[1], source, [], 0
    while True:
        m, split = (n + 1) // 2, fresh(f"max{level}.split")
        shape = (c, 3, m, ho, wo)
        if level == 0:  # a padded window reads its real candidates only (padding is -inf to a max)
            args = (_MAX_PADDED if any(patches.pads) else _MAX_WINDOW, patches, in_shape, shape, (1, *shape))
        else:
            args = (_MAX_FOLD, None, (c, 3, n, ho, wo), shape, shape)
        ops.append((_selection_op(f"{node.name}.max{level}", current, split, "max_split", *args,
                                  (4 if level == 0 else 24) * bound, 2 * bound, where, relu=True), shape, 2 * bound))
        current, n, level = split, m, level + 1
        if n == 1:
            break
    ops.append((_selection_op(node.name, current, node.output, "max_join", _MAX_JOIN, None, (c, 3, 1, ho, wo),
                              (c, ho, wo), (c, 1, ho, wo), 12 * bound, bound, where), (c, ho, wo), bound))
    return ops


def _namer(graph, node):
    """fresh(suffix): a tensor name for a lowered node's intermediate, "<output>/<suffix>", new in the graph."""
    taken = {graph.input, *(n.output for n in graph.nodes)}

    def fresh(suffix: str) -> str:
        name = f"{node.output}/{suffix}"
        while name in taken:
            name += "'"
        taken.add(name)
        return name
    return fresh


def _place(lowered, frac: int, ops: list, shapes: dict, fracs: dict, bounds: dict) -> None:
    """Append a lowered node's [(op, shape, bound)], every tensor at the input's scale 2^frac."""
    for op, shape, bound in lowered:
        ops.append(op)
        shapes[op.output], fracs[op.output], bounds[op.output] = tuple(shape), frac, int(bound)


def _clip_ops(node, source: str, shape, frac: int, bound: int, fresh) -> list:
    """Clip (ReLU6, hardtanh, clamp, Min / Max with a constant) lowered at the input's scale 2^f:
    clip(x, lo, hi) = lo + relu(x - lo) - relu(x - hi), lo and hi rounded to the grid (floor(v 2^f + 1/2): exact
    when they lie on it, else off by at most 2^-(f+1)); a missing side is the input's bound (-B or B: exact on
    every accepted x). Two ops: (relu(x - lo), relu(x - hi)) by the public ``clip_split`` (ones, elementwise; the bias
    (-lo, -hi) is committed with the weights; ReLU fused), then their difference by ``clip_join`` (1, -1), plus
    lo (a committed bias when lo != 0). [(op, shape, bound)]."""
    where, (low, high) = node.where(), node.bounds
    lo = -bound if low is None else int(math.floor(low * 2.0 ** frac + 0.5))
    hi = bound if high is None else int(math.floor(high * 2.0 ** frac + 0.5))
    split, reach = fresh("clip"), bound + max(abs(lo), abs(hi))
    out_bound = max(abs(min(max(v, lo), hi)) for v in (-bound, bound))
    letters = EINSUM_AXES[:len(shape)]
    ops = [(_selection_op(f"{node.name}.split", source, split, "clip_split", f"b{letters},k{letters}->bk{letters}",
                          None, shape, (2, *shape), (2, *shape), reach, reach, where, relu=True, bias=(-lo, -hi),
                          bias_letters="p"), (2, *shape), reach)]
    ops.append((_selection_op(node.name, split, node.output, "clip_join", f"bk{letters},k->b{letters}", None,
                              (2, *shape), shape, shape, 2 * reach + abs(lo), out_bound, where,
                              bias=(lo,) if lo else None), shape, out_bound))
    return ops


def calibrated_requant(magnitude: float, f_acc: int, worst, act_bits: int, margin_bits: int,
                       f_out: int | None = None) -> tuple:
    """(shift, q_bits, f_out) of a requantized output of calibrated ``magnitude``: the largest scale f_out <= f_acc
    with magnitude 2^f_out < 2^(act_bits-1) (or the given ``f_out``), R = f_acc - f_out, and Q covering the
    calibration range with margin_bits to spare, never more than the worst-case accumulator ``worst`` needs after
    the shift."""
    f_out = min(_frac(magnitude, act_bits), f_acc) if f_out is None else f_out
    shift = f_acc - f_out
    typical = math.ceil(magnitude * 2.0 ** f_out) << margin_bits
    return shift, _signed_bits(min(int(worst) + (1 << max(shift - 1, 0)) >> shift, max(typical, 1))), f_out


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
        shift, q_bits, _ = calibrated_requant(magnitude, f_acc, worst, act_bits, margin_bits)
    if shift < 0 or shift + q_bits > FIELD_BITS:
        raise ModelError(f"{where}: requantization needs {shift} + {q_bits} bits > {FIELD_BITS} (the field)")
    return QOp("square", node.name, (source,), node.output, shift=shift, q_bits=q_bits)


# ------------------------------------------------------------------------------ products of two tensors
def bilinear_terms(equation: str) -> tuple:
    """(left, right, out) subscripts of a bilinear op's 'b...,b...->b...' (ValueError otherwise)."""
    operands, arrow, out = equation.partition("->")
    parts = operands.split(",")
    if not arrow or len(parts) != 2 or not all(t[:1] == "b" and t.isascii() and t.isalpha() and t.islower() and
                                               len(set(t)) == len(t) for t in (*parts, out)):
        raise ValueError(f"equation {equation!r} is not 'b...,b...->b...' (distinct lowercase letters, b first)")
    return parts[0], parts[1], out


def bilinear_layout(left: str, right: str, out: str) -> tuple:
    """The canonical subscripts of a bilinear op's operands: b, the shared letters (on both operands and the
    output, in the left's order), the contracted ones (both operands, not the output, the left's order), then each
    operand's own letters (its order). The hiding proof's relation sums one block b S C of both operands."""
    shared = "".join(l for l in left[1:] if l in right and l in out)
    contracted = "".join(l for l in left[1:] if l in right and l not in out)
    own = ["".join(l for l in t[1:] if l not in shared + contracted) for t in (left, right)]
    return "b" + shared + contracted + own[0], "b" + shared + contracted + own[1]


def bilinear_int(op: QOp, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """einsum(equation, x1, x2), int64 (exact: the validator bounds every accumulator below half the field)."""
    return np.einsum(op.equation, np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64))


def _bilinear_entries(q: QuantizedGraph, op: QOp, where: str) -> int:
    """A bilinear op: the equation against its operands' and output's shapes, in the canonical layout
    (:func:`bilinear_layout`), a letter on one operand only of size 1, scales and width."""
    try:
        left, right, out = bilinear_terms(op.equation)
    except ValueError as error:
        raise ProofRejected(str(error), where) from None
    shapes = [q.shapes[t] for t in op.inputs]
    _require(len(left) - 1 == len(shapes[0]) and len(right) - 1 == len(shapes[1]),
             f"equation {op.equation!r} does not fit the operands' shapes {shapes}", where)
    sizes = {}
    for letter, n in zip(left[1:] + right[1:], (*shapes[0], *shapes[1])):
        _require(sizes.setdefault(letter, n) == n, f"equation {op.equation!r}: index {letter!r} is {sizes[letter]} "
                 f"and {n}", where)
    _require(set(out) <= set(left + right), f"equation {op.equation!r}: an output index is in no operand", where)
    _require(all(sizes[l] == 1 for l in left[1:] + right[1:] if l not in out and (l in left) != (l in right)),
             f"equation {op.equation!r}: an index on one operand only and not in the output must have size 1", where)
    _require((left, right) == bilinear_layout(left, right, out),
             f"equation {op.equation!r}: operands must be laid out b, shared, contracted, own letters "
             f"({','.join(bilinear_layout(left, right, out))})", where)
    _require(tuple(sizes[l] for l in out[1:]) == q.shapes[op.output],
             f"equation {op.equation!r} gives {tuple(sizes[l] for l in out[1:])}, the output tensor is "
             f"{q.shapes[op.output]}", where)
    _require_width(op, where)
    f1, f2 = (q.fracs[t] for t in op.inputs)
    _require(q.fracs[op.output] == f1 + f2 - op.shift,
             f"output frac {q.fracs[op.output]} != {f1} + {f2} - shift {op.shift}", where)
    terms = math.prod(sizes[l] for l in left[1:] if l in right and l not in out)
    reach = [_proven_bound(q, t) for t in op.inputs]
    _require(reach[0] * reach[1] * terms <= FIELD_HALF, f"worst-case accumulator {reach[0]} * {reach[1]} * {terms} "
             f"(the operands' proven ranges) > {FIELD_HALF} (half the field)", where)
    return 0


def _proven_bound(q: QuantizedGraph, tensor: str) -> int:
    """The largest |t| the proof itself bounds (not the declared bound): the input's bound, a requantized op's
    2^(Q-1), a lookup table's max |T|, an add's shifted sum, through reshapes and transposes; a structure's op
    whose range is not proven (none today) counts as half the field. Called on validated ops only."""
    producers = {op.output: op for op in q.ops}
    while tensor in producers and producers[tensor].kind in ("reshape", "transpose"):
        tensor = producers[tensor].inputs[0]
    if tensor == q.input:
        return q.input_bound
    op = producers.get(tensor)
    if op is not None and op.has_bits:
        return 1 << (op.q_bits - 1)
    if op is not None and op.kind == "lookup":
        return q.bounds[tensor]  # checked against the table by _check_op
    if op is not None and op.kind == "add":
        return sum(_proven_bound(q, t) << k for t, k in zip(op.inputs, op.lefts))
    return FIELD_HALF


class _Lowering:
    """Emits a lowered node's ops (bilinear, LayerNorm, Softmax), choosing each requantized output's scale on the
    calibration floats, or taking a committed structure's (``like``), and keeping shapes, fracs and bounds."""

    def __init__(self, graph, node, ops, shapes, fracs, bounds, like, chosen, act_bits, margin_bits):
        self.node, self.where, self.ops = node, node.where(), ops
        self.shapes, self.fracs, self.bounds = shapes, fracs, bounds
        self.like, self.chosen, self.act_bits, self.margin_bits = like, chosen, act_bits, margin_bits
        self.fresh = _namer(graph, node)
        self.floats = {}

    def name(self, suffix, last):
        return self.node.output if last else self.fresh(suffix)

    def scale(self, output, f_acc, worst, f_out=None):
        """(shift, q_bits, f_out) of a requantized output: the committed structure's, or the calibrated scale
        (never finer than the accumulator's) with Q covering the calibration range plus margin_bits."""
        if worst > FIELD_HALF:
            raise ModelError(f"{self.where}: a lowered step's worst-case accumulator ~2^{math.log2(worst):.1f} "
                             f"exceeds half the field ({FIELD_HALF} ~2^30): the proof would wrap around; lower "
                             f"act_bits")
        if self.like is not None:
            shift, q_bits = self.chosen[output].shift, self.chosen[output].q_bits
            return shift, q_bits, f_acc - shift
        shift, q_bits, f_out = calibrated_requant(float(np.max(np.abs(self.floats[output]))), f_acc, worst,
                                                  self.act_bits, self.margin_bits, f_out)
        if shift + q_bits > FIELD_BITS:
            raise ModelError(f"{self.where}: requantization needs {shift} + {q_bits} bits > {FIELD_BITS} (the field)")
        return shift, q_bits, f_out

    def put(self, op, shape, frac, bound):
        self.ops.append(op)
        self.shapes[op.output], self.fracs[op.output], self.bounds[op.output] = tuple(shape), int(frac), int(bound)
        return op.output

    def transpose(self, source, perm, suffix):
        shape = tuple(self.shapes[source][p] for p in perm)
        output = self.fresh(suffix)
        if self.floats and source in self.floats:
            self.floats[output] = self.floats[source].transpose(0, *(p + 1 for p in perm))
        return self.put(QOp("transpose", f"{self.node.name}.{suffix}", (source,), output, shape=tuple(perm)), shape,
                        self.fracs[source], self.bounds[source])

    def bilinear(self, a, b, equation, suffix, last=False):
        """y = requant(einsum(equation, a, b)); operands not in the canonical layout are transposed to it first."""
        left, right, out = bilinear_terms(equation)
        canonical = bilinear_layout(left, right, out)
        sources = []
        for source, mine, want, tag in ((a, left, canonical[0], "left"), (b, right, canonical[1], "right")):
            if mine != want:
                source = self.transpose(source, tuple(mine.index(l) - 1 for l in want[1:]), f"{suffix}.{tag}")
            sources.append(source)
        equation = f"{canonical[0]},{canonical[1]}->{out}"
        sizes = dict(zip(canonical[0][1:] + canonical[1][1:], self.shapes[sources[0]] + self.shapes[sources[1]]))
        shape = tuple(sizes[l] for l in out[1:])
        terms = math.prod(sizes[l] for l in canonical[0][1:] if l in canonical[1] and l not in out)
        sources = self.narrowed(sources, terms, suffix)
        output = self.name(suffix, last)
        if self.like is None:
            self.floats.setdefault(output, np.einsum(equation, self.floats[sources[0]], self.floats[sources[1]]))
        worst = self.bounds[sources[0]] * self.bounds[sources[1]] * terms
        shift, q_bits, f_out = self.scale(output, self.fracs[sources[0]] + self.fracs[sources[1]], worst)
        return self.put(QOp("bilinear", f"{self.node.name}.{suffix}" if not last else self.node.name,
                            tuple(sources), output, equation, shift=shift, q_bits=q_bits),
                        shape, f_out, 1 << (q_bits - 1))

    def narrowed(self, sources, terms, suffix) -> list:
        """The operands, each requantized to fewer bits first (a public ``rescale``: round(x / 2^k)) when their
        product's worst case |x1| |x2| terms would reach half the field (the wider operand loses more), as the
        committed structure did (``like``)."""
        sources, bounds = list(sources), [self.bounds[t] for t in sources]
        shifts = [0, 0]
        if self.like is not None:
            names = [f"{self.node.output}/{suffix}.{tag}.rescale" for tag in ("left", "right")]
            shifts = [self.chosen[n].shift if n in self.chosen else 0 for n in names]
        else:
            while bounds[0] * bounds[1] * terms > FIELD_HALF and max(bounds) > 1:
                side = 0 if bounds[0] >= bounds[1] else 1
                shifts[side] += 1
                bounds[side] = 1 << (_rescaled_bits(self.bounds[sources[side]], shifts[side]) - 1)
        for side, (tag, k) in enumerate(zip(("left", "right"), shifts)):
            if k:
                sources[side] = self.rescaled(sources[side], k, f"{suffix}.{tag}.rescale")
        return sources

    def rescaled(self, source, k, suffix):
        """round(source / 2^k) by a public ``rescale`` kernel (ones, elementwise): k fewer bits, scale 2^(f - k)."""
        output = self.fresh(suffix)
        if self.like is None:
            self.floats[output] = self.floats[source]
        q_bits = _rescaled_bits(self.bounds[source], k)
        shape = self.shapes[source]
        equation = row_equation("rescale", len(shape))
        kernel = row_kernel("rescale", equation, shape, ())
        return self.put(QOp("contraction", f"{self.node.name}.{suffix}", (source,), output, equation, None, kernel,
                            kernel.shape, None, "", (), shape, k, q_bits, shape=shape, weight_frac=0,
                            constant="rescale"), shape, self.fracs[source] - k, 1 << (q_bits - 1))

    def squarable(self, source, suffix):
        """``source``, or its :meth:`rescaled` copy with the fewest bits dropped so that its square's worst case
        stays below half the field (as the committed structure did, ``like``)."""
        name = f"{self.node.output}/{suffix}"
        if self.like is not None:
            k = self.chosen[name].shift if name in self.chosen else 0
        else:
            k, bound = 0, self.bounds[source]
            while bound * bound > FIELD_HALF:
                k += 1
                bound = 1 << (_rescaled_bits(self.bounds[source], k) - 1)
        return self.rescaled(source, k, suffix) if k else source

    def row(self, kind, source, suffix, *, last=False, relu=False, requant=True, bias=None, weight_shape=None,
            q_bound=None, float_out=None, f_out=None, mask=""):
        """A contraction of ``source`` with a public row kernel (:func:`row_kernel`) over its last axis."""
        in_shape = self.shapes[source]
        equation = row_equation(kind, len(in_shape))
        weight_shape = weight_shape or row_kernel(kind, equation, in_shape, (1, 1), mask).shape
        kernel = row_kernel(kind, equation, in_shape, weight_shape, mask)
        output = self.name(suffix, last)
        data, weight, out = _subscripts_of(equation)
        sizes = dict(zip(data[1:] + weight, in_shape + kernel.shape))
        shape = tuple(sizes[l] for l in out[1:])
        if self.like is None:
            x = self.floats[source]
            self.floats[output] = float_out if float_out is not None else np.einsum(equation, x, kernel.astype(float))

        def quantized(f_w):  # (w_int, b_int, worst |acc|) of the kernel at weight_frac f_w
            w_int = kernel if kind in ROW_SELECTIONS else np.floor(kernel * 2.0 ** f_w + 0.5).astype(np.int64)
            b_int = None if bias is None else \
                np.array([int(math.floor(bias * 2.0 ** (self.fracs[source] + f_w) + 0.5))], dtype=np.int64)
            reach = float(np.max(np.einsum(equation, np.ones((1, *in_shape)), np.abs(w_int).astype(np.float64))))
            return w_int, b_int, self.bounds[source] * reach + (0 if b_int is None else abs(int(b_int[0])))

        if kind in ROW_SELECTIONS:
            f_w = 0
        elif self.like is not None:
            f_w = self.chosen[output].weight_frac
        else:  # weight_bits 8, fewer when a long row's sum would reach half the field (the mean of 768 entries)
            f_w = _frac(float(np.max(np.abs(kernel))), 8)
            while f_w > 0 and quantized(f_w)[2] > FIELD_HALF:
                f_w -= 1
        w_int, b_int, worst = quantized(f_w)
        f_acc = self.fracs[source] + f_w
        if requant:
            shift, q_bits, f_out = self.scale(output, f_acc, worst, f_out)
        else:  # exact, at the input's scale
            if worst > FIELD_HALF:
                raise ModelError(f"{self.where}: the lowered step reaches ~2^{math.log2(worst):.1f} > half the field")
            shift, q_bits, f_out = 0, _signed_bits(q_bound if q_bound is not None else int(worst)), f_acc
        op = QOp("contraction", f"{self.node.name}.{suffix}" if not last else self.node.name, (source,), output,
                 equation, None, w_int, w_int.shape, b_int, "", () if b_int is None else (1,), shape, shift, q_bits,
                 relu, shape=shape, weight_frac=f_w, has_bias=b_int is not None, constant=kind, mask=mask)
        return self.put(op, shape, f_out, 1 << (q_bits - 1))

    def lookup(self, function, source, suffix, float_out, last=False):
        output = self.name(suffix, last)
        producer = next(op for op in self.ops if op.output == source)
        bits = producer.q_bits if producer.has_bits else _signed_bits(self.bounds[source])
        if self.like is not None:
            f_out = self.like.fracs[output]
        else:
            self.floats[output] = float_out
            f_out = _frac(float(np.max(np.abs(float_out))), self.act_bits)
        if bits > MAX_LOOKUP_BITS:
            raise ModelError(f"{self.where}: the {function} lookup's input has {bits} bits > {MAX_LOOKUP_BITS} "
                             f"(MAX_LOOKUP_BITS): lower act_bits or margin_bits")
        try:
            _, outputs = lookup_table(function, bits, self.fracs[source], f_out)
        except ModelError as error:
            raise ModelError(f"{self.where}: {error}") from None
        return self.put(QOp("lookup", f"{self.node.name}.{suffix}" if not last else self.node.name, (source,), output,
                            q_bits=bits, function=function), self.shapes[source], f_out, int(np.max(np.abs(outputs))))

    def add(self, a, b, suffix):
        output = self.fresh(suffix)
        f = max(self.fracs[a], self.fracs[b])
        lefts = (f - self.fracs[a], f - self.fracs[b])
        bound = (self.bounds[a] << lefts[0]) + (self.bounds[b] << lefts[1])
        if bound > FIELD_HALF:
            raise ModelError(f"{self.where}: a lowered sum reaches {bound} > {FIELD_HALF} (half the field)")
        if self.like is None:
            self.floats[output] = self.floats[a] + self.floats[b]
        return self.put(QOp("add", f"{self.node.name}.{suffix}", (a, b), output, lefts=lefts), self.shapes[a], f, bound)


def _rescaled_bits(bound: int, k: int) -> int:
    """Q of round(x / 2^k) (half up) for |x| <= bound, k >= 1."""
    return _signed_bits((bound + (1 << (k - 1))) >> k)


def _subscripts_of(equation: str) -> tuple:
    operands, out = equation.split("->")
    data, weight = operands.split(",")
    return data, weight, out


def _require_last_axis(node, shape, axes) -> None:
    """ModelError unless the batch-first ``axes`` a LayerNorm or Softmax reduces are the last one only."""
    if tuple(axes) != (len(shape),):
        raise ModelError(f"{node.where()}: normalizes the sample axes {tuple(a - 1 for a in axes)} of {tuple(shape)}; "
                         f"the graph proof proves {node.kind} over the last axis only")


def _layernorm_ops(low: _Lowering, source: str) -> None:
    """LayerNorm over the last axis (n entries): mu = x 1/n (public kernel, requantized to x's scale), d = x - mu
    (mu broadcast by a public -1 kernel, then an add: exact), s = d^2, v = s 1/n + eps (public kernel, eps a
    committed bias), inv = rsqrt(v) (lookup over v's proven bits, from one grid step up), t = d * inv (bilinear),
    y = t gamma + beta (a committed elementwise contraction; skipped without them). Every table is O(n) (a dense
    centring kernel would be n^2). Error: mu, s and v to their requantization (2^-(f+1) each), inv to the table's
    2^-(f_inv+1) and v's grid, t and y to theirs: a few units of the last place of each scale (on the 16 x 32
    encoder layer, 0.3% of the output's magnitude; :meth:`QuantizedGraph.error_report` measures it)."""
    node = low.node
    shape = low.shapes[source]
    _require_last_axis(node, shape, node.axes(len(shape) + 1))
    rank, n = len(shape), shape[-1]
    mean = var = None
    if low.like is None:
        x = low.floats[source]
        mean = x.mean(axis=-1, keepdims=True)
        var = ((x - mean) ** 2).mean(axis=-1, keepdims=True) + node.epsilon
    has_affine = node.scale is not None or node.shift is not None
    mu = low.row("row_mean", source, "mean", float_out=mean, f_out=low.fracs[source])  # x's scale: d no wider
    negative = low.row("row_broadcast", mu, "neg_mean", requant=False, q_bound=low.bounds[mu],
                       weight_shape=(*low.shapes[mu], n))
    d = low.squarable(low.add(source, negative, "center"), "center.rescale")
    s = low.fresh("square")
    if low.like is None:
        low.floats[s] = low.floats[d] ** 2
    worst = low.bounds[d] ** 2
    shift, q_bits, f_out = low.scale(s, 2 * low.fracs[d], worst)
    low.put(QOp("square", f"{node.name}.square", (d,), s, shift=shift, q_bits=q_bits), shape, f_out, 1 << (q_bits - 1))
    v = low.row("row_mean", s, "var", bias=node.epsilon, float_out=var)
    inv = low.lookup("rsqrt", v, "rsqrt", None if low.like else 1.0 / np.sqrt(low.floats[v]))
    letters = EINSUM_AXES[:rank]
    t = low.bilinear(d, inv, f"b{letters},b{letters[:-1]}z->b{letters}", "normalized", last=not has_affine)
    if not has_affine:
        return
    if any(value is not None and np.size(value) not in (1, n) for value in (node.scale, node.shift)):
        raise ModelError(f"{node.where()}: a scale or shift over more than the last axis is not provable yet")
    gamma = np.broadcast_to(np.reshape(1.0 if node.scale is None else node.scale, -1), (n,)).astype(np.float64)
    beta = None if node.shift is None else np.broadcast_to(np.reshape(node.shift, -1), (n,)).astype(np.float64)
    output = node.output
    equation = f"b{letters},{letters[-1]}->b{letters}"
    f_w = low.chosen[output].weight_frac if low.like else _frac(float(np.max(np.abs(gamma))), 8)
    w_int = np.floor(gamma * 2.0 ** f_w + 0.5).astype(np.int64)
    f_acc = low.fracs[t] + f_w
    b_int = None if beta is None else np.floor(beta * 2.0 ** f_acc + 0.5).astype(np.int64)
    if low.like is None:
        low.floats[output] = node.forward(low.floats[source])
    worst = low.bounds[t] * int(np.max(np.abs(w_int))) + (0 if b_int is None else int(np.max(np.abs(b_int))))
    shift, q_bits, f_out = low.scale(output, f_acc, worst)
    low.put(QOp("contraction", node.name, (t,), output, equation, None, w_int, w_int.shape, b_int,
                "" if b_int is None else letters[-1], () if b_int is None else b_int.shape, shape, shift, q_bits, False,
                shape=shape, weight_frac=f_w, has_bias=b_int is not None), shape, f_out, 1 << (q_bits - 1))


def _softmax_ops(low: _Lowering, source: str) -> None:
    """Softmax over the last axis (n entries), every step proven: m = max_k x (a max tree over the row, exact:
    max(a, b) = relu(a - b) + relu(b) - relu(-b)), d = x - m <= 0 (m broadcast by a public -1 kernel, then an add),
    e = exp(d) by a lookup (e_max = T[0] = 2^f_e exactly), s = sum_k e >= 2^f_e (public ones, requantized: s >= 1),
    r = 1/s by a lookup, y = e * r (bilinear). Error: e and r to half a unit of 2^-f_e and 2^-f_r, s to its
    requantization, y to 2^-(f_y+1): |y - softmax(x)| <= ~n 2^-f_e / s + 2^-f_r + 2^-f_y, at act_bits 12 below 1e-2
    (on the 16 x 32 encoder layer's attention, 1.8e-3 with its input's own error included).

    With a constant 0/1 mask (a causal attention's; public, in the structure): the max tree reads the row with each
    dropped entry replaced by the row's first kept one (``row_fill``, a public 0/1 kernel), so m is the max over the
    kept entries and the kept maximum's exp is T[0] = 2^f_e (s >= 1 as unmasked); e = exp(x - m) over every entry
    (a dropped one's x - m may be positive: the table clamps it), then e * mask (``row_keep``, the public mask
    elementwise, exact) before the row sum and the product: a dropped entry weighs exactly 0 whatever the prover
    holds, with no new commitment (the verifier derives both kernels from the mask text)."""
    node = low.node
    shape = low.shapes[source]
    _require_last_axis(node, shape, (node.axis + 1,))
    rank, n = len(shape), shape[-1]
    mask = "" if node.mask is None else mask_text(np.broadcast_to(node.mask, shape))
    keep = None if node.mask is None else np.broadcast_to(node.mask, shape) > 0
    if low.like is None:
        x = low.floats[source]
        kept = x if keep is None else np.where(keep, x, -np.inf)
        shifted = np.minimum(x - kept.max(axis=-1, keepdims=True), 0.0)
    bound = low.bounds[source]
    current = source if not mask else low.row("row_fill", source, "fill", requant=False, q_bound=bound,
                                              weight_shape=(*shape, n), mask=mask)
    level, width = 0, n
    while width > 1:
        m = (width + 1) // 2
        split = low.row("row_max_split", current, f"max{level}.split", relu=True, requant=False, q_bound=2 * bound,
                        float_out=None if low.like else np.maximum(
                            np.einsum(row_equation("row_max_split", len(low.shapes[current])), low.floats[current],
                                      max_split(width).astype(float)), 0))
        current = low.row("row_max_join", split, f"max{level}", requant=False, q_bound=bound)
        width, level = m, level + 1
    negative = low.row("row_broadcast", current, "neg_max", requant=False, q_bound=bound,
                       weight_shape=(*low.shapes[current], n))
    d = low.add(source, negative, "shifted")
    e = low.lookup("softmax_exp", d, "exp", None if low.like else np.exp(shifted))
    if mask:
        e = low.row("row_keep", e, "keep", requant=False, q_bound=low.bounds[e], mask=mask,
                    float_out=None if low.like else low.floats[e] * keep)
    s = low.row("row_sum", e, "sum", float_out=None if low.like else low.floats[e].sum(axis=-1, keepdims=True))
    r = low.lookup("reciprocal", s, "reciprocal", None if low.like else 1.0 / low.floats[s])
    letters = EINSUM_AXES[:rank]
    low.bilinear(e, r, f"b{letters},b{letters[:-1]}z->b{letters}", "product", last=True)


def _copies_for_shared_reads(ops, shapes, fracs, bounds, public: str) -> list:
    """Each contraction after the first that reads one tensor reads its own identity-transpose copy instead (free in
    the plain proof: a relabelling). The hiding proof states one masked value per read, and a contraction's read
    binds its summed letters only (the reader's three Gathers of q, k, v from one projection bind 2 variables each):
    a copy's relation binds all of them, so the stated values stay independent (:func:`proofs.relations.mask_rank`)."""
    readers, out = {}, []
    for op in ops:
        if op.kind == "contraction" and op.inputs[0] != public:
            source = op.inputs[0]
            readers[source] = readers.get(source, 0) + 1
            if readers[source] > 1:
                copy = f"{source}/copy{readers[source] - 1}"
                while copy in shapes:
                    copy += "'"
                shapes[copy], fracs[copy], bounds[copy] = shapes[source], fracs[source], bounds[source]
                out.append(QOp("transpose", f"{op.name}.copy", (source,), copy,
                               shape=tuple(range(len(shapes[source])))))
                op = QOp(**{**{f.name: getattr(op, f.name) for f in dataclasses.fields(op)}, "inputs": (copy,)})
        out.append(op)
    return out


PROVABLE_ACTIVATIONS = ("relu", "square", "clip") + LOOKUP_FUNCTIONS
_ACTIVATION_FIX = "fix: replace by nn.ReLU or x * x and fine-tune"


def _refuse_unprovable(graph) -> None:
    """ModelError listing every node the graph proof cannot prove yet (in one line), before any is quantized:
    activations other than Relu, Square, Clip and the lookups', and nodes of other kinds."""
    found = []
    for node in graph.nodes:
        if node.kind == "activation" and node.function not in PROVABLE_ACTIVATIONS:
            what = node.op if node.op.lower() == node.function else f"{node.op} ({node.function})"
            fix = _ACTIVATION_FIX
        elif node.kind not in ("contraction", "affine", "add", "activation", "reshape", "transpose", "maxpool",
                               "bilinear", "layernorm", "softmax"):
            what, fix = node.op, None
        else:
            continue
        found.append((f"operator {what} (node {node.name!r})", fix))
    if found:
        proves = ("the graph proof proves Relu, Square (x * x), Clip (ReLU6, clamp, Min / Max with a constant) and, by "
                  "lookup tables, Sigmoid, Tanh, Gelu, Silu activations (with Gemm, MatMul, Conv, pools, MaxPool, "
                  "Add, BatchNormalization, Flatten, Reshape, Transpose, "
                  "Slice, Pad, Concat, attention's MatMul / Einsum of two computed tensors, Softmax (with a "
                  "constant attention mask too) and LayerNormalization over the last axis)")
        if len(found) == 1:
            (head, fix), = found
            raise ModelError(f"{head} is not provable yet: {proves}" + (f" ({fix})" if fix else ""))
        listed = ", ".join(head + (f" ({fix})" if fix else "") for head, fix in found)
        raise ModelError(f"{listed} - {len(found)} operators are not provable yet: {proves}")


MIN_WEIGHT_BITS = 4
"""The fewest magnitude bits a layer's largest weight keeps when the quantizer coarsens a layer's weights so its
worst-case accumulator stays below half the field (a wide convolution of a ResNet's last stage)."""


def quantize_graph(graph, calibration=None, *, act_bits: int = 12, weight_bits: int = 8,
                   margin_bits: int = 1, like: QuantizedGraph | None = None) -> QuantizedGraph:
    """Quantize a :class:`hezk.model.Graph` with scales chosen on ``calibration`` (a float batch), or with
    the scales and ranges of ``like`` (a committed structure: the prover re-quantizes the same weights).

    Raises ModelError naming the node for an operator the proof cannot prove (an activation other than
    Relu, Square and :data:`LOOKUP_FUNCTIONS`) or a layer whose integers could wrap around the field."""
    from hezk.model.graph import (Activation, Add, Affine, Bilinear, Contraction, LayerNorm, MaxPool, Reshape,
                                  Softmax, Transpose)

    for name, value, low, high in (("act_bits", act_bits, 2, 24), ("weight_bits", weight_bits, 2, 16),
                                   ("margin_bits", margin_bits, 0, 8)):
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise ModelError(f"{name}={value!r} must be an int in [{low}, {high}]")
    _refuse_unprovable(graph)
    floats, chosen = {}, {}
    if like is not None:
        if not isinstance(like, QuantizedGraph) or like.digest != graph.digest():
            raise ModelError("like= is the quantized structure of another model (its digest differs)")
        chosen = {op.output: op for op in like.ops}
    elif calibration is None:
        raise ModelError("quantize_graph needs calibration data (a float batch of inputs) or like=")
    else:
        from hezk.model import as_batch, input_form, input_forms_text

        x = np.asarray(calibration, dtype=np.float64)
        form = input_form(x.shape, graph.input_shape)
        if form is None:
            raise ModelError(f"calibration data of shape {x.shape} is {input_forms_text(graph.input_shape)}")
        x = as_batch(x, form)
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
        elif isinstance(node, Activation) and node.function in LOOKUP_FUNCTIONS:
            source = alias.get(node.inputs[0], node.inputs[0])
            if like:
                bits, f_out = chosen[node.output].q_bits, like.fracs[node.output]
            else:
                bits, f_out = _lookup_bits(ops, source, bounds), _frac(magnitude(node.output), act_bits)
            if bits > MAX_LOOKUP_BITS:
                raise ModelError(f"{where}: its input has {bits} bits > {MAX_LOOKUP_BITS} (MAX_LOOKUP_BITS, a lookup "
                                 f"table of 2^{MAX_LOOKUP_BITS} rows): lower act_bits or margin_bits")
            try:
                _, outputs = lookup_table(node.function, bits, fracs[source], f_out)
            except ModelError as error:
                raise ModelError(f"{where}: {error}") from None
            ops.append(QOp("lookup", node.name, (source,), node.output, q_bits=bits, function=node.function))
            fracs[node.output], bounds[node.output] = f_out, int(np.max(np.abs(outputs)))
        elif isinstance(node, Activation) and node.function == "clip":
            source = alias.get(node.inputs[0], node.inputs[0])
            _place(_clip_ops(node, source, graph.shape_of(source), fracs[source], bounds[source],
                             _namer(graph, node)), fracs[source], ops, shapes, fracs, bounds)
        elif isinstance(node, Activation):
            if node.function != "relu":
                what = node.op if node.op.lower() == node.function else f"{node.op} ({node.function})"
                raise ModelError(f"operator {what} (node {node.name!r}) is not provable yet: the graph proof "
                                 f"proves Relu, Square (x * x) and, by lookup tables, {', '.join(LOOKUP_FUNCTIONS)} "
                                 f"activations (with Gemm, MatMul, Conv, pools, Add, BatchNormalization, Flatten, "
                                 f"Reshape, Transpose)")
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
                letters = EINSUM_AXES[:len(in_shape)]
                equation = f"b{letters},{letters}->b{letters}"
                weight = np.broadcast_to(1.0 if node.scale is None else node.scale, in_shape)
                patches, bias, einsum_shape = None, node.shift, in_shape
            f_w = chosen[node.output].weight_frac if like else _frac(float(np.max(np.abs(weight))), weight_bits)
            ones = np.ones((1, *in_shape))
            view = ones if patches is None else patches.apply(ones)
            while True:  # a layer whose worst case would wrap the field gets coarser weights, down to MIN_WEIGHT_BITS
                w_int = np.floor(np.asarray(weight) * 2.0 ** f_w + 0.5).astype(np.int64)  # = public_weight if constant
                f_acc = fracs[source] + f_w
                b_int, b_letters = None, ""
                if bias is not None:
                    b_full, b_letters = _reduce_bias(np.asarray(bias), out_shape)
                    b_int = np.floor(b_full * 2.0 ** f_acc + 0.5).astype(np.int64)
                # worst case |acc|: bound_x * max over outputs of sum |W| (over the real view), plus |b|
                reach = float(np.max(np.einsum(equation, view, np.abs(w_int).astype(np.float64))))
                worst = bounds[source] * reach + (0 if b_int is None else float(np.max(np.abs(b_int))))
                if worst <= FIELD_HALF or like or np.max(np.abs(w_int)) < 1 << MIN_WEIGHT_BITS:
                    break
                f_w -= 1
            if worst > FIELD_HALF:
                raise ModelError(f"{where}: the worst-case accumulator ~2^{math.log2(worst):.1f} exceeds half "
                                 f"the field ({FIELD_HALF} ~2^30) even with {MIN_WEIGHT_BITS}-bit weights: the proof would "
                                 f"wrap around; lower act_bits (hezk commit --act-bits)")
            relu = len(graph.consumers(node.output)) == 1 and node.output != graph.output and \
                isinstance(graph.consumers(node.output)[0], Activation) and \
                graph.consumers(node.output)[0].function == "relu"
            if like:
                f_out, q_bits = like.fracs[node.output], chosen[node.output].q_bits
                shift = f_acc - f_out
            else:
                shift, q_bits, f_out = calibrated_requant(magnitude(node.output), f_acc, worst, act_bits, margin_bits)
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
        elif isinstance(node, (Bilinear, LayerNorm, Softmax)):
            low = _Lowering(graph, node, ops, shapes, fracs, bounds, like, chosen, act_bits, margin_bits)
            sources = [alias.get(t, t) for t in node.inputs]
            if floats:  # a fused relu's alias holds the relu's values: its floats are the relu's too
                low.floats = dict(floats)
                low.floats.update({alias_of: floats[t] for t, alias_of in zip(node.inputs, sources)})
            if isinstance(node, Bilinear):
                if len(bilinear_terms(node.equation)[2]) == 1:
                    raise ModelError(f"{where}: a product to a scalar per sample is not provable yet")
                low.bilinear(*sources, node.equation, "product", last=True)
            elif isinstance(node, LayerNorm):
                _layernorm_ops(low, sources[0])
            else:
                _softmax_ops(low, sources[0])
        elif isinstance(node, MaxPool):
            source = alias.get(node.inputs[0], node.inputs[0])
            _place(_maxpool_ops(node, source, graph.shape_of(source), bounds[source], _namer(graph, node)),
                   fracs[source], ops, shapes, fracs, bounds)
        else:
            raise ModelError(f"{where}: node kind {node.kind!r} cannot be proven")
        shapes[node.output] = graph.shape_of(node.output)
    output = alias.get(graph.output, graph.output)
    if any(op.kind == "bilinear" for op in ops):  # attention's Gathers (other graphs' structures are unchanged)
        ops = _copies_for_shared_reads(ops, shapes, fracs, bounds, graph.input)
    quantized = QuantizedGraph(graph.input, tuple(graph.input_shape), f_in, bounds[graph.input], tuple(ops), output,
                               shapes, fracs, bounds, graph.digest())
    try:  # the verifiers' validator: never make a statement they refuse
        validate_structure(quantized)
    except ProofRejected as rejection:
        raise ModelError(f"the quantized model is not a valid statement ({rejection}): lower act_bits, weight_bits "
                         f"or margin_bits, or shrink the model") from None
    return quantized


# ----------------------------------------------------------------------------- the statement's validator
#: Limits of a structure (:func:`validate_structure`). The sizes bound what a verifier allocates before it can
#: reject anything (:func:`verifier_memory_bytes`); the widths are what the soundness argument needs.
MAX_OPS = 1024
MAX_RANK = 8  #: axes of one sample's tensor
MAX_NAME = 256  #: characters of a tensor's or an op's name
MAX_SCALE = 64  #: |frac| of a tensor's scale 2^frac (the MLP statement's limit)
MAX_TENSOR_ENTRIES = 1 << 22  #: padded entries of one sample's tensor, a weight, a bias or a patch view
MAX_STRUCTURE_ENTRIES = 1 << 24  #: their sum over the structure (one sample)
KINDS = ("contraction", "relu", "square", "add", "reshape", "transpose", "lookup", "bilinear")
_OP_FIELDS = frozenset(("kind", "name", "inputs", "output", "equation", "weight_shape", "bias_letters", "bias_shape",
                        "einsum_shape", "shift", "q_bits", "relu", "lefts", "shape", "weight_frac", "has_bias",
                        "constant", "patches", "function", "mask"))
_PATCH_DATA = "bgcuvij"  # a windowed contraction's view subscripts (hezk.model.Patches)


def _integer(value, name: str) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name}={value!r} is not an integer")
    return int(value)


def _text(value, name: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{name}={value!r} is not a string")
    return value


def _flag(value, name: str) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name}={value!r} is not true or false")
    return bool(value)


def padded_entries(shape) -> int:
    """Entries of a shape with every axis zero-padded to a power of two (a proof's table of it)."""
    return math.prod(1 << max(int(n) - 1, 0).bit_length() for n in shape)


def _require(condition, reason: str, where: str) -> None:
    if not condition:
        raise ProofRejected(reason, where)


def _require_shape(shape, name: str, where: str) -> int:
    """A sample shape: at most MAX_RANK axes of >= 1 entries, at most MAX_TENSOR_ENTRIES padded; its padded size."""
    _require(isinstance(shape, tuple) and len(shape) <= MAX_RANK and all(isinstance(n, (int, np.integer)) and not isinstance(n, bool) and n >= 1 for n in shape),
             f"{name} {shape!r} is not a tuple of at most {MAX_RANK} positive integers", where)
    size = padded_entries(shape)
    _require(size <= MAX_TENSOR_ENTRIES, f"{name} {shape} has {size} padded entries > {MAX_TENSOR_ENTRIES} (the "
             f"verifier's limit, MAX_TENSOR_ENTRIES)", where)
    return size


def _require_width(op: QOp, where: str) -> None:
    """A requantized op's bits: shift >= 0, q_bits >= 1 and shift + q_bits <= FIELD_BITS, so the 2^(shift + Q)
    integers its bits rebuild stay distinct mod p (else one accumulator has two decompositions: two outputs)."""
    _require(op.shift >= 0 and op.q_bits >= 1 and op.shift + op.q_bits <= FIELD_BITS,
             f"shift {op.shift} + q_bits {op.q_bits}: needs shift >= 0, q_bits >= 1 and shift + q_bits <= "
             f"{FIELD_BITS} (the field's bits)", where)


_DEFAULTS = {"equation": "", "patches": None, "weight_shape": (), "bias_letters": "", "bias_shape": (),
             "einsum_shape": (), "shift": 0, "q_bits": 0, "relu": False, "lefts": (0, 0), "shape": (), "weight_frac": 0,
             "has_bias": False, "constant": "", "function": "", "mask": ""}
_KIND_FIELDS = {"contraction": set(_DEFAULTS) - {"lefts"}, "relu": {"q_bits"}, "square": {"shift", "q_bits"},
                "add": {"lefts"}, "reshape": {"shape"}, "transpose": {"shape"}, "lookup": {"q_bits", "function"},
                "bilinear": {"equation", "shift", "q_bits"}}
_ARITY = {"add": 2, "bilinear": 2}


def _contraction_entries(q: QuantizedGraph, op: QOp, where: str) -> int:
    """Check a contraction's einsum, window, weight, bias, scales and width against its input's and output's
    shapes; returns the padded entries of its weight, bias and view."""
    in_shape, out_shape = q.shapes[op.inputs[0]], q.shapes[op.output]
    equation = op.equation
    _require(equation.count(",") == 1 and equation.count("->") == 1,
             f"equation {equation!r} is not 'data,weight->out'", where)
    operands, out = equation.split("->")
    data, weight = operands.split(",")
    _require(all(len(set(s)) == len(s) and s.isascii() and s.isalpha() and s.islower() for s in (data, weight, out))
             and data[:1] == "b" and out[:1] == "b" and "b" not in weight,
             f"equation {equation!r}: subscripts must be distinct lowercase letters, 'b' (the batch) first in the data "
             f"and the output only", where)
    entries = _require_shape(op.weight_shape, "weight_shape", where)
    if op.patches is None:
        view = in_shape
    else:
        _require(data == _PATCH_DATA, f"equation {equation!r}: a windowed contraction reads '{_PATCH_DATA}'", where)
        try:
            view = op.patches.view_shape(in_shape)
        except ValueError as error:
            raise ProofRejected(f"patches {op.patches}: {error}", where) from None
        entries += _require_shape(view, "patch view", where)
    _require(len(data) - 1 == len(view) and len(weight) == len(op.weight_shape),
             f"equation {equation!r} does not fit the view {view} and weight_shape {op.weight_shape}", where)
    sizes = {}
    for letter, n in zip(data[1:] + weight, (*view, *op.weight_shape)):
        _require(sizes.setdefault(letter, n) == n, f"equation {equation!r}: index {letter!r} is {sizes[letter]} and "
                 f"{n}", where)
    _require(set(out[1:]) <= set(sizes), f"equation {equation!r}: an output index is in no operand", where)
    einsum = tuple(sizes[letter] for letter in out[1:])
    _require(einsum == op.einsum_shape, f"einsum_shape {op.einsum_shape} != the equation's {einsum}", where)
    _require(op.shape == out_shape and math.prod(einsum) == math.prod(out_shape),
             f"shape {op.shape} / einsum_shape {einsum} do not give the output tensor's shape {out_shape}", where)
    letters = EINSUM_AXES[:len(out_shape)]
    bias_axes = [letters.find(letter) for letter in op.bias_letters]
    _require(len(set(op.bias_letters)) == len(op.bias_letters) and bias_axes == sorted(bias_axes) and
             all(axis >= 0 for axis in bias_axes) and (op.has_bias or not op.bias_letters) and
             (op.bias_shape == tuple(out_shape[axis] for axis in bias_axes) or  # a constant bias: (1,) too
              (not bias_axes and op.bias_shape == (1,))),
             f"bias_letters {op.bias_letters!r} / bias_shape {op.bias_shape} are not axes of the output {out_shape} "
             f"(has_bias={op.has_bias})", where)
    entries += padded_entries(op.bias_shape)
    _require(-MAX_FRAC_BITS <= op.weight_frac <= MAX_FRAC_BITS,
             f"weight_frac {op.weight_frac} not in [-{MAX_FRAC_BITS}, {MAX_FRAC_BITS}]", where)
    _require(not op.mask or op.constant in MASKED_ROWS, f"a mask on a {op.constant or 'committed'!r} kernel (only "
             f"{MASKED_ROWS} derive theirs from a mask)", where)
    kernel = None
    if op.constant:
        try:
            kernel = public_weight(op, in_shape)
        except (ModelError, ValueError) as error:
            raise ProofRejected(f"constant {op.constant!r}: {error}", where) from None
    _require_width(op, where)
    _require(q.fracs[op.output] == q.fracs[op.inputs[0]] + op.weight_frac - op.shift,
             f"output frac {q.fracs[op.output]} != input frac {q.fracs[op.inputs[0]]} + weight_frac {op.weight_frac}"
             f" - shift {op.shift}", where)
    if op.weight is not None:  # a prover's copy: its constants have the declared shapes
        _require(op.weight.shape == op.weight_shape and (op.bias is None) != op.has_bias and
                 (op.bias is None or op.bias.shape == op.bias_shape),
                 "weight / bias arrays do not have the declared shapes", where)
        _require(kernel is None or np.array_equal(op.weight, kernel),
                 f"the {op.constant!r} kernel differs from the one the structure derives (public_weight)", where)
    return entries


def _check_op(q: QuantizedGraph, op: QOp, defined: set, where: str) -> int:
    """One op's fields against its kind and its wiring; returns the padded entries of its constants and view."""
    _require(op.kind in KINDS, f"kind {op.kind!r} is not one of {KINDS}", where)
    for name, default in _DEFAULTS.items():
        if name not in _KIND_FIELDS[op.kind]:
            _require(getattr(op, name) == default, f"field {name}={getattr(op, name)!r} on a {op.kind} op (must be "
                     f"{default!r})", where)
    arity = _ARITY.get(op.kind, 1)
    _require(isinstance(op.inputs, tuple) and len(op.inputs) == arity and all(t in defined for t in op.inputs),
             f"inputs {op.inputs!r}: a {op.kind} op reads {arity} tensor(s) computed before it", where)
    _require(isinstance(op.output, str) and op.output in q.shapes and op.output not in defined,
             f"output {op.output!r} is not a new tensor of the structure", where)
    source, out = q.shapes[op.inputs[0]], q.shapes[op.output]
    f_in, f_out = q.fracs[op.inputs[0]], q.fracs[op.output]
    if op.kind == "contraction":
        return _contraction_entries(q, op, where)
    if op.kind == "bilinear":
        return _bilinear_entries(q, op, where)
    if op.kind in ("relu", "square"):
        if op.kind == "relu":
            _require(1 <= op.q_bits <= FIELD_BITS, f"q_bits {op.q_bits} not in [1, {FIELD_BITS}]", where)
        _require_width(op, where)
        _require(out == source, f"output shape {out} != input shape {source}", where)
        expected = f_in if op.kind == "relu" else 2 * f_in - op.shift
        _require(f_out == expected, f"output frac {f_out} != {expected} (the {op.kind}'s scale)", where)
    elif op.kind == "lookup":
        _require(op.function in TABLE_FUNCTIONS, f"function {op.function!r} is not one of {TABLE_FUNCTIONS}", where)
        _require(1 <= op.q_bits <= MAX_LOOKUP_BITS, f"q_bits {op.q_bits} not in [1, {MAX_LOOKUP_BITS}] "
                 f"(MAX_LOOKUP_BITS: the table's 2^q_bits rows)", where)
        _require(out == source, f"output shape {out} != input shape {source}", where)
        try:
            _, outputs = lookup_table(op.function, op.q_bits, f_in, f_out)
        except ModelError as error:
            raise ProofRejected(str(error), where) from None
        largest = int(np.max(np.abs(outputs)))
        _require(q.bounds[op.output] == largest, f"output bound {q.bounds[op.output]} != the table's largest |T| "
                 f"{largest}", where)
        return 1 << op.q_bits
    elif op.kind == "add":
        other = q.shapes[op.inputs[1]]
        _require(isinstance(op.lefts, tuple) and len(op.lefts) == 2 and min(op.lefts) == 0 and
                 max(op.lefts) <= FIELD_BITS, f"lefts {op.lefts}: two shifts in [0, {FIELD_BITS}], one of them 0",
                 where)
        k1, k2 = op.lefts
        _require(out == source == other, f"shapes {source} + {other} -> {out} differ", where)
        _require(f_out == f_in + k1 == q.fracs[op.inputs[1]] + k2,
                 f"output frac {f_out} != input fracs + lefts {op.lefts}", where)
    elif op.kind == "reshape":
        _require(op.shape == out and math.prod(out) == math.prod(source),
                 f"reshape of {source} to {op.shape}: the output tensor is {out}", where)
        _require(f_out == f_in, f"output frac {f_out} != input frac {f_in}", where)
    else:
        _require(sorted(op.shape) == list(range(len(source))) and out == tuple(source[p] for p in op.shape),
                 f"transpose perm {op.shape} of {source} does not give the output tensor's {out}", where)
        _require(f_out == f_in, f"output frac {f_out} != input frac {f_in}", where)
    return 0


def validate_structure(q: QuantizedGraph, where: str = "graph structure") -> None:
    """Refuse (ProofRejected naming the op or tensor and the field) a structure outside what the graph proofs'
    soundness and the verifier's memory rest on, before any proof is read: op kinds and each kind's fields (a
    contraction's einsum against the shapes, its window, bias axes, public kernel), the wiring (every op reads
    tensors computed before it and writes a new one; the output is an op's), every requantized op's shift >= 0,
    q_bits >= 1 and shift + q_bits <= FIELD_BITS (so one accumulator has one decomposition, one output), the
    input and every declared bound in [0, (p-1)/2] (so an accepted integer is the only preimage of its residue),
    scales |frac| <= MAX_SCALE consistent along the ops, and sizes (MAX_TENSOR_ENTRIES per padded table,
    MAX_STRUCTURE_ENTRIES in all: :func:`verifier_memory_bytes`). Prover and every verifier path run it: it is
    called by :meth:`QuantizedGraph.from_public` and by :func:`quantize_graph`."""
    _require(isinstance(q, QuantizedGraph), f"structure is a {type(q).__name__}, not a QuantizedGraph", where)
    _require(isinstance(q.ops, tuple) and 1 <= len(q.ops) <= MAX_OPS, f"{len(q.ops)} ops: expected 1 to {MAX_OPS}",
             where)
    _require(isinstance(q.digest, bytes) and len(q.digest) == 32, "digest is not 32 bytes (a sha256)", where)
    _require(set(q.shapes) == set(q.fracs) == set(q.bounds), "tensors' shapes, fracs and bounds name other tensors",
             where)
    total = 0
    for tensor, shape in q.shapes.items():
        at = f"{where} / tensor {tensor!r}"
        _require(isinstance(tensor, str) and 0 < len(tensor) <= MAX_NAME, f"name of 1 to {MAX_NAME} characters", at)
        total += _require_shape(shape, "shape", at)
        _require(abs(q.fracs[tensor]) <= MAX_SCALE, f"frac {q.fracs[tensor]} not in [-{MAX_SCALE}, {MAX_SCALE}]", at)
        _require(0 <= q.bounds[tensor] <= FIELD_HALF, f"bound {q.bounds[tensor]} not in [0, {FIELD_HALF}] (half the "
                 f"field)", at)
    at = f"{where} / input {q.input!r}"
    _require(q.input in q.shapes and tuple(q.input_shape) == q.shapes[q.input],
             f"input_shape {q.input_shape} is not the input tensor's", at)
    _require(1 <= q.input_bound <= FIELD_HALF, f"input_bound {q.input_bound} not in [1, {FIELD_HALF}] (half the field)",
             at)
    _require(q.bounds[q.input] == q.input_bound and q.fracs[q.input] == q.input_frac,
             f"input_bound / input_frac ({q.input_bound}, {q.input_frac}) differ from the input tensor's", at)
    defined = {q.input}
    for index, op in enumerate(q.ops):
        _require(isinstance(op, QOp) and isinstance(op.name, str) and len(op.name) <= MAX_NAME,
                 f"not an op with a name of at most {MAX_NAME} characters", f"{where} / op {index}")
        total += _check_op(q, op, defined, f"{where} / op {index} ({op.name!r})")
        defined.add(op.output)
    _require(q.output in defined and q.output != q.input, f"output {q.output!r} is no op's output", where)
    _require(set(q.shapes) == defined, f"tensors {sorted(set(q.shapes) - defined)} are no op's output", where)
    _require(total <= MAX_STRUCTURE_ENTRIES, f"the structure's tables hold {total} padded entries per sample > "
             f"{MAX_STRUCTURE_ENTRIES} (the verifier's limit, MAX_STRUCTURE_ENTRIES)", where)


def largest_table(q: QuantizedGraph) -> int:
    """Padded entries of the structure's largest per-sample table (a tensor, weight, bias or patch view)."""
    sizes = [padded_entries(shape) for shape in q.shapes.values()]
    for op in q.ops:
        if op.kind == "contraction":
            sizes += [padded_entries(op.weight_shape), padded_entries(op.bias_shape)]
            if op.patches is not None:
                sizes.append(padded_entries(op.patches.view_shape(q.shapes[op.inputs[0]])))
        elif op.kind == "lookup":
            sizes.append(1 << op.q_bits)
    return max(sizes)


#: a verifier holds at most this many tables of the largest table's size at once (F_p^4 entries, 32 bytes each;
#: the input's and output's tables, a public kernel's or patch view's eq factors, their sumchecks' folds)
VERIFIER_TABLES = 16
VERIFIER_BASE_BYTES = 256 << 20  #: the interpreter, numpy, the kernels and one proof's bytes


def verifier_memory_bytes(q: QuantizedGraph, batch: int = 1) -> int:
    """The verifier's worst-case memory for a validated structure ``q`` at ``batch`` inputs: VERIFIER_TABLES tables
    of padded(batch) x :func:`largest_table` entries of F_p^4, plus VERIFIER_BASE_BYTES. With the validator's
    MAX_TENSOR_ENTRIES = 2^22 and one input: 2 GiB + 256 MiB at most, whatever a commitment declares (a structure
    declaring more is refused by :func:`validate_structure` before anything is allocated)."""
    return VERIFIER_TABLES * 32 * (1 << max(int(batch) - 1, 0).bit_length()) * largest_table(q) + VERIFIER_BASE_BYTES
