"""The integer SGD training step of a quantized ReLU MLP, and its witness (zkDL's training model).

Model (all integers; zkDL, Sun-Li-Zhang, sections 3-4): layers i = 0..L-1 with weights W_i (d_(i+1) x d_i),
inputs A_0 = X (batch B x d_0), targets Y (B x d_L), and

    forward   Z_i = A_i W_i^T,  z'_i = round(Z_i / 2^R),  A_(i+1) = (1 - s_i) * z'_i  (s_i the sign bits; i < L-1)
    output    O = z'_(L-1),  G_(L-1) = O - Y      (gradient of the squared error / 2, at the output's scale)
    backward  G_A_i = G_(i+1) W_(i+1),  G_i = (1 - s_i) * round(G_A_i / 2^S)   (the same sign bits s_i)
    weights   G_W_i = G_i^T A_i,  U_i = round(G_W_i / 2^k),  W'_i = W_i - U_i   (eta = 2^-k)

Every rescale round(x / 2^m) is a bit decomposition (:mod:`proofs.layers.requant`): remainder bits
(range [0, 2^m)) and two's-complement quotient bits (a declared range); the sign bit of the forward
quotient is the ReLU mask of both passes. This module holds the public shape (:class:`TrainingSpec`), the
integer step and the prover's witness (:class:`TrainingTrace`); the zero-knowledge proofs of training
steps and of inference are :mod:`proofs.layers.step_proof` (which imports this module, never the reverse).
"""
from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from .. import field as F
from ..errors import ModelError, ProofError, ProofRejected
from ..quantize import FIELD_BITS, FIELD_HALF
from .common import pad_matrix, padded
from .requant import Decomposition, decompose

#: batch and layer widths are padded to >= 8: every committed tensor has >= 64 entries, so its 6 masked variables
#: cover the (at most 5) values a proof states of it (:mod:`proofs.relations`)
MIN_PADDED = 8
MAX_LAYERS = 64
MAX_WIDTH = MAX_BATCH = 1 << 20  #: a layer's width d_i, the batch B
MAX_BITS = MAX_SHIFT = 24  #: act_bits, weight_bits, grad_bits, update_bits; shift, grad_shift, lr_shift
#: padded entries of one tensor (W_i: width(i+1) x width(i); X, Y, A_i, G_i: batch_padded x width): the prover's
#: tables and the verifier's public ones (input, output) grow with it, so a spec is refused above it before any
#: table is made (the 784->128->10 step at batch 64 has 2^17)
MAX_TENSOR_ENTRIES = 1 << 24
_BITS = ("act_bits", "weight_bits", "grad_bits", "update_bits")
_SHIFTS = ("shift", "grad_shift", "lr_shift")
_WIDTHS = (("shift", "act_bits"), ("grad_shift", "grad_bits"), ("lr_shift", "update_bits"))


def _is_int(value, lo: int, hi: int) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, np.integer)) and lo <= int(value) <= hi


def _worst_cases(sizes, batch: int, act_bits: int, weight_bits: int, grad_bits: int) -> dict:
    """name -> (worst-case magnitude, how it is made of the fields) of every integer a training step computes
    without range-checking it directly: Z_i = A_i W_i^T, G_W_i = G_i^T A_i, G_A_i = G_(i+1) W_(i+1) (the
    output gradient O - Y is below 2^act_bits, every other gradient below 2^(grad_bits - 1))."""
    act, weight, layers = 1 << (act_bits - 1), 1 << (weight_bits - 1), len(sizes) - 1

    def grad(i):
        return (1 << act_bits, "2^act_bits") if i == layers - 1 else (1 << (grad_bits - 1), "2^(grad_bits-1)")

    out = {}
    for i in range(layers):
        out[f"Z_{i}"] = sizes[i] * act * weight, f"sizes[{i}] * 2^(act_bits-1) * 2^(weight_bits-1)"
        out[f"G_W_{i}"] = batch * grad(i)[0] * act, f"batch * {grad(i)[1]} * 2^(act_bits-1)"
        if i + 1 < layers:
            out[f"G_A_{i}"] = sizes[i + 2] * grad(i + 1)[0] * weight, \
                f"sizes[{i + 2}] * {grad(i + 1)[1]} * 2^(weight_bits-1)"
    return out


def spec_problem(values: dict):
    """Why a training statement's spec (``values``: TrainingSpec's fields by name, as given) is refused, naming
    the field, its value and the limit; None when every field fits.

    The ONE rule of the training statement, applied by :class:`TrainingSpec` (ModelError, the prover) and by
    :func:`validate_spec` (ProofRejected, every verifier): 2..MAX_LAYERS + 1 widths in [1, MAX_WIDTH], batch in
    [1, MAX_BATCH], bit widths in [2, MAX_BITS], shifts in [0, MAX_SHIFT], each decomposition's shift + bits <=
    FIELD_BITS (one rebuild, injective mod p), every worst case of :func:`_worst_cases` <= FIELD_HALF = (p - 1) / 2
    (no field element wraps) and every padded tensor <= MAX_TENSOR_ENTRIES. Only Python-int arithmetic on the
    fields: nothing is allocated before the sizes are known to fit."""
    sizes = values["sizes"]
    if not isinstance(sizes, (tuple, list)) or not 2 <= len(sizes) <= MAX_LAYERS + 1:
        given = f"{len(sizes)} widths" if isinstance(sizes, (tuple, list)) else f"a {type(sizes).__name__}"
        return f"sizes ({given}) must list 2 to {MAX_LAYERS + 1} layer widths (MAX_LAYERS + 1)"
    for i, d in enumerate(sizes):
        if not _is_int(d, 1, MAX_WIDTH):
            return f"sizes[{i}]={d!r} must be an int in [1, {MAX_WIDTH}] (MAX_WIDTH)"
    checks = [("batch", 1, MAX_BATCH)] + [(name, 2, MAX_BITS) for name in _BITS] + \
        [(name, 0, MAX_SHIFT) for name in _SHIFTS]
    for name, lo, hi in checks:
        if not _is_int(values[name], lo, hi):
            return f"{name}={values[name]!r} must be an int in [{lo}, {hi}]"
    v = {name: int(values[name]) for name, _, _ in checks}
    sizes = [int(d) for d in sizes]
    for shift, bits in _WIDTHS:
        if v[shift] + v[bits] > FIELD_BITS:
            return f"{shift} + {bits}={v[shift] + v[bits]} exceeds the field's {FIELD_BITS} bits"
    for name, (bound, formula) in _worst_cases(sizes, v["batch"], v["act_bits"], v["weight_bits"],
                                               v["grad_bits"]).items():
        if bound > FIELD_HALF:
            return (f"worst case |{name}| <= {formula} = {bound} exceeds half the field ({FIELD_HALF}); lower the "
                    "bit widths or the layer sizes")
    widths, batch = [padded(d, MIN_PADDED) for d in sizes], padded(v["batch"], MIN_PADDED)
    tensors = [(f"batch x sizes[{i}]", batch * w) for i, w in enumerate(widths)] + \
        [(f"sizes[{i + 1}] x sizes[{i}]", widths[i + 1] * widths[i]) for i in range(len(widths) - 1)]
    for name, entries in tensors:
        if entries > MAX_TENSOR_ENTRIES:
            return f"a {name} tensor of {entries} padded entries > {MAX_TENSOR_ENTRIES} (MAX_TENSOR_ENTRIES)"
    return None


def validate_spec(spec, where: str = "training statement") -> "TrainingSpec":
    """The verifiers' parse of a training statement's spec, handed in as an object (never trusted: a subclass or
    ``object.__setattr__`` skip :meth:`TrainingSpec.__post_init__`): :func:`spec_problem` on its
    fields (ProofRejected naming the field and the limit), then a fresh TrainingSpec of them (plain ints)."""
    if not isinstance(spec, TrainingSpec):
        raise ProofRejected(f"spec is a {type(spec).__name__}, expected a TrainingSpec", where)
    values = {item.name: getattr(spec, item.name, None) for item in fields(TrainingSpec)}
    problem = spec_problem(values)
    if problem is not None:
        raise ProofRejected(problem, f"{where} / spec")
    return TrainingSpec(**values)


@dataclass(frozen=True)
class TrainingSpec:
    """Public shape of a training step: layer sizes (d_0..d_L), batch, bit widths and shifts.

    Inputs, targets and activations are signed ``act_bits``-bit integers, weights ``weight_bits``-bit;
    the forward rescale shifts by ``shift``, the backward by ``grad_shift`` into ``grad_bits``-bit
    gradients, the update by ``lr_shift`` (eta = 2^-lr_shift) into ``update_bits``-bit updates.
    The bounds are :func:`spec_problem`'s (ModelError here; verifiers run :func:`validate_spec`).
    """

    sizes: tuple
    batch: int
    act_bits: int = 8
    weight_bits: int = 8
    shift: int = 6
    grad_shift: int = 6
    grad_bits: int = 10
    lr_shift: int = 4
    update_bits: int = 8

    def __post_init__(self):
        problem = spec_problem({item.name: getattr(self, item.name) for item in fields(self)})
        if problem is not None:
            raise ModelError(problem)
        for item in fields(self):  # plain ints (numpy integers have no bit_length)
            value = getattr(self, item.name)
            object.__setattr__(self, item.name, tuple(int(d) for d in value) if item.name == "sizes" else int(value))

    def __reduce__(self):
        """Pickle through the constructor, so an unpickled spec is checked too."""
        return type(self), tuple(getattr(self, item.name) for item in fields(self))

    @property
    def num_layers(self) -> int:
        return len(self.sizes) - 1

    def bounds(self) -> dict:
        """Worst-case magnitudes of the integers that are never range-checked directly (must stay < p/2)."""
        cases = _worst_cases(self.sizes, self.batch, self.act_bits, self.weight_bits, self.grad_bits)
        return {name: bound for name, (bound, _) in cases.items()}

    # padded shapes
    @property
    def batch_padded(self) -> int:
        return padded(self.batch, MIN_PADDED)

    def width(self, i: int) -> int:
        return padded(self.sizes[i], MIN_PADDED)

    def forward_spec(self, i: int) -> Decomposition:
        return Decomposition(self.shift, self.act_bits, i + 1 < self.num_layers)

    def backward_spec(self) -> Decomposition:
        return Decomposition(self.grad_shift, self.grad_bits, False)

    def update_spec(self) -> Decomposition:
        return Decomposition(self.lr_shift, self.update_bits, False)

    def absorb(self, transcript) -> None:
        transcript.absorb("training.spec", [int(v) for v in (*self.sizes, -1, self.batch, self.act_bits,
                                                             self.weight_bits, self.shift, self.grad_shift,
                                                             self.grad_bits, self.lr_shift, self.update_bits)])


# ------------------------------------------------------------------------------------------ witness
@dataclass(frozen=True, eq=False)
class TrainingTrace:
    """Every padded integer table of one step (the prover's witness). Tests may build tampered copies."""

    spec: TrainingSpec
    weights: tuple  # W_i padded (d_(i+1) x d_i)
    x: np.ndarray  # padded B x d_0
    y: np.ndarray  # padded B x d_L
    acts: tuple  # A_0..A_(L-1), padded B x d_i
    fwd: tuple  # DecompositionWitness of Z_i
    masks: tuple  # 1 - s_i used by the backward pass, B x d_(i+1), i < L-1
    bwd: tuple  # DecompositionWitness of G_A_i, i < L-1
    grads: tuple  # G_0..G_(L-1), B x d_(i+1)
    upd: tuple  # DecompositionWitness of G_W_i
    new_weights: tuple  # W'_i padded

    def new_weights_unpadded(self) -> list:
        return [w[:self.spec.sizes[i + 1], :self.spec.sizes[i]].copy() for i, w in enumerate(self.new_weights)]


def _decompose(values, spec: Decomposition, name: str):
    try:
        return decompose(values.reshape(-1), spec)
    except ModelError as error:
        raise ModelError(f"{name}: {error}") from None


def _check_inputs(weights, x, y, spec: TrainingSpec):
    if len(weights) != spec.num_layers:
        raise ModelError(f"weights: {len(weights)} matrices for {spec.num_layers} layers")
    arrays = []
    checks = [(f"weights[{i}]", w, (spec.sizes[i + 1], spec.sizes[i]), spec.weight_bits) for i, w in enumerate(weights)]
    checks += [("x", x, (spec.batch, spec.sizes[0]), spec.act_bits), ("y", y, (spec.batch, spec.sizes[-1]), spec.act_bits)]
    for name, value, shape, bits in checks:
        value = np.asarray(value)
        if value.shape != shape or value.dtype.kind not in "iu":
            raise ModelError(f"{name} must be an integer array of shape {shape}, got {value.dtype} {value.shape}")
        limit = 1 << (bits - 1)
        if value.size and (value.min() < -limit or value.max() >= limit):
            raise ModelError(f"{name} has entries in [{value.min()}, {value.max()}], outside [-{limit}, {limit}) "
                             f"({bits} bits)")
        arrays.append(value.astype(np.int64))
    return arrays[:-2], arrays[-2], arrays[-1]


def _forward(weights, x, spec: TrainingSpec):
    """Padded weights, activations A_0..A_(L-1) and the forward decompositions."""
    L, B = spec.num_layers, spec.batch_padded
    w = [pad_matrix(weights[i], spec.width(i + 1), spec.width(i)) for i in range(L)]
    acts, fwd = [pad_matrix(x, B, spec.width(0))], []
    for i in range(L):
        fwd.append(_decompose(acts[i] @ w[i].T, spec.forward_spec(i), f"forward layer {i}"))
        if i + 1 < L:
            acts.append(fwd[i].out.reshape(B, spec.width(i + 1)))
    return w, acts, fwd


def forward_trace(weights, x, spec: TrainingSpec) -> TrainingTrace:
    """The forward pass only (for :func:`prove_forward`): the backward fields stay empty."""
    weights, x, _ = _check_inputs(weights, x, np.zeros((spec.batch, spec.sizes[-1]), dtype=np.int64), spec)
    w, acts, fwd = _forward(weights, x, spec)
    zeros = np.zeros((spec.batch_padded, spec.width(spec.num_layers)), dtype=np.int64)
    return TrainingTrace(spec, tuple(w), acts[0], zeros, tuple(acts), tuple(fwd), (), (), (), (), ())


def training_trace(weights, x, y, spec: TrainingSpec) -> TrainingTrace:
    """Run one integer SGD step (the module's equations) and keep every table the proof needs."""
    weights, x, y = _check_inputs(weights, x, y, spec)
    L, B = spec.num_layers, spec.batch_padded
    w, acts, fwd = _forward(weights, x, spec)
    y_pad = pad_matrix(y, B, spec.width(L))
    grads = [None] * L
    grads[L - 1] = fwd[L - 1].shifted.reshape(B, -1) - y_pad
    masks, bwd = [None] * (L - 1), [None] * (L - 1)
    for i in range(L - 2, -1, -1):
        bwd[i] = _decompose(grads[i + 1] @ w[i + 1], spec.backward_spec(), f"backward layer {i}")
        masks[i] = 1 - fwd[i].sign.astype(np.int64).reshape(B, -1)
        grads[i] = masks[i] * bwd[i].shifted.reshape(B, -1)
    upd = [_decompose(grads[i].T @ acts[i], spec.update_spec(), f"update of layer {i}") for i in range(L)]
    new = [w[i] - upd[i].shifted.reshape(w[i].shape) for i in range(L)]
    return TrainingTrace(spec, tuple(w), acts[0], y_pad, tuple(acts), tuple(fwd), tuple(masks), tuple(bwd),
                         tuple(grads), tuple(upd), tuple(new))


def fit_spec(weights, x, y, act_bits: int = 8, weight_bits: int = 8, grad_bits: int = 10,
             update_bits: int = 10) -> TrainingSpec:
    """The smallest shifts (forward, backward, then learning rate) for which this step fits its bit widths.

    A helper for examples and benchmarks: raises ModelError when no shift up to the field's limit fits.
    """
    sizes = (np.shape(weights[0])[1],) + tuple(np.shape(w)[0] for w in weights)
    shifts = {"shift": 0, "grad_shift": 0, "lr_shift": 0}
    failing = {"forward": "shift", "backward": "grad_shift", "update": "lr_shift"}
    while True:
        spec = TrainingSpec(sizes, batch=len(x), act_bits=act_bits, weight_bits=weight_bits, grad_bits=grad_bits,
                            update_bits=update_bits, **shifts)
        try:
            training_trace(weights, x, y, spec)
            return spec
        except ModelError as error:
            stage = str(error).split(" ")[0]
            if stage not in failing or shifts[failing[stage]] >= 20:
                raise
            shifts[failing[stage]] += 1


def training_step(weights, x, y, spec: TrainingSpec) -> list:
    """W' = W - 2^-k round(G_W) for every layer (unpadded int64), without a proof."""
    return training_trace(weights, x, y, spec).new_weights_unpadded()


# ------------------------------------------------------------------------------------- helpers
def flat_field(table) -> np.ndarray:
    return F.to_field(np.asarray(table, dtype=np.int64).reshape(-1))



def check_chain(traces) -> list:
    traces = list(traces) if isinstance(traces, (list, tuple)) else []
    if not traces or not all(isinstance(t, TrainingTrace) for t in traces):
        raise ProofError("traces must be a non-empty list of TrainingTrace")
    for t in range(1, len(traces)):
        if traces[t].spec != traces[0].spec:
            raise ProofError(f"traces[{t}] has spec {traces[t].spec}, traces[0] {traces[0].spec}")
        if not all(np.array_equal(a, b) for a, b in zip(traces[t].weights, traces[t - 1].new_weights)):
            raise ProofError(f"traces[{t}] does not start from the weights traces[{t - 1}] ends with")
    return traces
