"""Proof of one SGD training step of a quantized ReLU MLP (zkDL's training proof, with zero knowledge).

Model (all integers; zkDL, Sun-Li-Zhang, sections 3-4): layers i = 0..L-1 with weights W_i (d_(i+1) x d_i),
inputs A_0 = X (batch B x d_0), targets Y (B x d_L), and

    forward   Z_i = A_i W_i^T,  z'_i = round(Z_i / 2^R),  A_(i+1) = (1 - s_i) * z'_i  (s_i the sign bits; i < L-1)
    output    O = z'_(L-1),  G_(L-1) = O - Y      (gradient of the squared error / 2, at the output's scale)
    backward  G_A_i = G_(i+1) W_(i+1),  G_i = (1 - s_i) * round(G_A_i / 2^S)   (the same sign bits s_i)
    weights   G_W_i = G_i^T A_i,  U_i = round(G_W_i / 2^k),  W'_i = W_i - U_i   (eta = 2^-k)

Every rescale round(x / 2^m) is a bit decomposition (:mod:`proofs.layers.requant`): remainder bits
(range [0, 2^m)) and two's-complement quotient bits (a declared range), committed; the sign bit of the
forward quotient is the ReLU mask of both passes. Z, G_A, G_W, A, G are not committed: each is a
function of committed tensors, reached by a reduction.

Statement: commitments to W (all layers packed), W' and the batch (X and Y packed), hiding when
``zk=True``; for k consecutive steps (:func:`prove_training_steps`) W_0..W_k and k batches. The proof
commits to all bit planes (with ``mode="aggregate"``, FAC4DNN: the planes of one kind, forward, backward
or update, stacked across layers and steps into a few power-of-two commitments, :mod:`proofs.aggregate`;
with ``mode="layer"`` one commitment per tensor) and then, by Fiat-Shamir, for each step:

1. per layer, a random point r: the claims W'~(r), W~(r) and the update's planes at r give U~(r) and
   G_W~(r); the verifier checks W'~(r) = W~(r) - U~(r);
2. G_W_i~ -> (sumcheck over the batch) G_i~, A_i~;  G_A_i~ -> (sumcheck over d_(i+2)) G_(i+1)~, W_(i+1)~;
   Z_i~ -> (sumcheck over d_i) A_i~, W_i~ (Thaler's matmul sumcheck, degree 2);
3. every claim on a masked tensor T = m * q (A_(i+1), G_i, O with m = 1) is batched with random weights
   alpha into one sumcheck sum_e (sum_k alpha_k eq(p_k, e)) m(e) q(e) (degree 3), ending at rho where the
   prover states the planes' values T_bits~(rho, j); these give q~(rho), the sign and the rescaled
   tensor's value (a claim handed to step 2), and one claim T_bits~(rho, tau) on the commitment;
4. G_(L-1) = O - Y splits into claims on O and Y; claims on A_0 go to X;
5. after all steps, one bit check per bits commitment, then one batch opening per commitment (W_t is
   opened once for the two steps that use it).

Soundness (|F| = p^4): every sumcheck k d / |F|, the batching weights and plane points 1 / |F| each, every
opening 2^-(commitment bits). All integers stay below p / 2 by the declared bounds
(:meth:`TrainingSpec.bounds`), so field identities are integer identities and W' is the integer step.
Assumed, not proved here: W, X and Y are in their declared ranges (they are the committed model and data;
a one-off bit check of the same kind shows it). W' is exactly W - U with U range-checked, so its range
follows from W's.
Zero knowledge (``zk=True``): hiding commitments, hiding openings and Libra-masked sumcheck round messages
(:mod:`proofs.zk`) hide the tables, the opened columns and every round message. NOT hidden -- what a proof
still reveals, precisely (each an F_p4 value of a witness multilinear extension at a verifier-chosen random
point, i.e. one random linear functional of a witness table):
  * the update check's W~(r) and W'~(r), per layer and step;
  * the final factor values of every matmul sumcheck: G~, A~ (weight gradient), G~, W~ (input gradient),
    A~, W~ (forward), and the Y~ values of G = O - Y;
  * all bit-plane values T_bits~(rho, j) at each masked-rescale sumcheck's final point rho (one per plane),
    and at the update point r;
  * each bit-check sumcheck's final value, the bits commitment's MLE at its point sigma.
Per layer and step that is about 8 values plus one per plane (P_upd + P_bwd + 2 P_fwd), against tables of
B d or d d' entries.
:mod:`proofs.masked` shows the fix for a product of committed tables (the stated values become those of
f + sum_i l_i x_i (1 - x_i), uniform); carrying it through this chain needs the masks of the virtual tensors
(A, G, O) to be corrected inside the next sumcheck as Libra section 4.2 does, which is not done here.
"""
from __future__ import annotations

from dataclasses import dataclass, field as dataclass_field

import numpy as np

from .. import field as F
from ..aggregate import MODES, BitCheckProver, bit_check_value, plan_groups, stack
from ..errors import ModelError, ProofError, ProofRejected
from ..mle import bind_high, eq_eval, eq_table, mle_evaluate
from ..quantize import FIELD_BITS, FIELD_HALF
from ..sumcheck import SumcheckProof, SumcheckProver, _absorb_statement, _as_ext_scalar, verify_sumcheck
from ..transcript import Transcript
from ..zk import (HidingCommitment, HidingOpening, HidingParams, ZKSumcheckProof, hiding_commit, open_points,
                  prove_zk_sumcheck, verify_points, verify_zk_sumcheck)
from .common import log2, pad_matrix, padded
from .packing import Packing
from .requant import Decomposition, decompose

TRANSCRIPT_LABEL = "hezk.proofs.training.v1"
MAX_LAYERS = 64
#: Reed-Solomon rate 1/2 for the step's commitments: half the encoding and hashing of rate 1/4, for about
#: 1.6x the column queries (251 instead of 154 at 104 bits); measured faster end to end on the 1M-parameter step
DEFAULT_RATE_INV = 2
#: mask rows committed with each hiding table: its one batch opening (3L - 1 points on W for L layers) then
#: needs no second Merkle tree; more points fall back to fresh masks (:mod:`proofs.zk`)
DEFAULT_MASK_ROWS = 40


def _check_int(value, name: str, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not lo <= int(value) <= hi:
        raise ModelError(f"{name}={value!r} must be an int in [{lo}, {hi}]")
    return int(value)


@dataclass(frozen=True)
class TrainingSpec:
    """Public shape of a training step: layer sizes (d_0..d_L), batch, bit widths and shifts.

    Inputs, targets and activations are signed ``act_bits``-bit integers, weights ``weight_bits``-bit;
    the forward rescale shifts by ``shift``, the backward by ``grad_shift`` into ``grad_bits``-bit
    gradients, the update by ``lr_shift`` (eta = 2^-lr_shift) into ``update_bits``-bit updates.
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
        sizes = tuple(self.sizes) if isinstance(self.sizes, (tuple, list)) else ()
        if not 2 <= len(sizes) <= MAX_LAYERS + 1:
            raise ModelError(f"sizes={self.sizes!r} must list 2 to {MAX_LAYERS + 1} layer widths")
        object.__setattr__(self, "sizes", tuple(_check_int(d, f"sizes[{i}]", 1, 1 << 20) for i, d in enumerate(sizes)))
        _check_int(self.batch, "batch", 1, 1 << 20)
        for name in ("act_bits", "weight_bits", "grad_bits", "update_bits"):
            _check_int(getattr(self, name), name, 2, 24)
        for name in ("shift", "grad_shift", "lr_shift"):
            _check_int(getattr(self, name), name, 0, 24)
        for name, width in (("shift + act_bits", self.shift + self.act_bits),
                            ("grad_shift + grad_bits", self.grad_shift + self.grad_bits),
                            ("lr_shift + update_bits", self.lr_shift + self.update_bits)):
            if width > FIELD_BITS:
                raise ModelError(f"{name}={width} exceeds the field's {FIELD_BITS} bits")
        for name, bound in self.bounds().items():
            if bound > FIELD_HALF:
                raise ModelError(f"worst case |{name}| <= {bound} exceeds half the field ({FIELD_HALF}); "
                                 "lower the bit widths or the layer sizes")

    @property
    def num_layers(self) -> int:
        return len(self.sizes) - 1

    def bounds(self) -> dict:
        """Worst-case magnitudes of the integers that are never range-checked directly (must stay < p/2)."""
        act, weight = 1 << (self.act_bits - 1), 1 << (self.weight_bits - 1)
        out = {}
        for i in range(self.num_layers):
            grad = 1 << self.act_bits if i == self.num_layers - 1 else 1 << (self.grad_bits - 1)
            out[f"Z_{i}"] = self.sizes[i] * act * weight
            out[f"G_W_{i}"] = self.batch * grad * act
            if i + 1 < self.num_layers:
                next_grad = 1 << self.act_bits if i + 2 == self.num_layers else 1 << (self.grad_bits - 1)
                out[f"G_A_{i}"] = self.sizes[i + 2] * next_grad * weight
        return out

    # padded shapes
    @property
    def batch_padded(self) -> int:
        return padded(self.batch)

    def width(self, i: int) -> int:
        return padded(self.sizes[i])

    def forward_spec(self, i: int) -> Decomposition:
        return Decomposition(self.shift, self.act_bits, i + 1 < self.num_layers)

    def backward_spec(self) -> Decomposition:
        return Decomposition(self.grad_shift, self.grad_bits, False)

    def update_spec(self) -> Decomposition:
        return Decomposition(self.lr_shift, self.update_bits, False)

    def bit_tables(self) -> list:
        """(name, Decomposition, elements) of every committed bits table, in a fixed order."""
        L, B = self.num_layers, self.batch_padded
        tables = [(f"fwd{i}", self.forward_spec(i), B * self.width(i + 1)) for i in range(L)]
        tables += [(f"bwd{i}", self.backward_spec(), B * self.width(i + 1)) for i in range(L - 1)]
        tables += [(f"upd{i}", self.update_spec(), self.width(i + 1) * self.width(i)) for i in range(L)]
        return tables

    def absorb(self, transcript) -> None:
        transcript.absorb("training.spec", [int(v) for v in (*self.sizes, -1, self.batch, self.act_bits,
                                                             self.weight_bits, self.shift, self.grad_shift,
                                                             self.grad_bits, self.lr_shift, self.update_bits)])


def _plane_groups(spec: Decomposition) -> tuple:
    """Committed groups (start, count) of bit planes, power-of-two counts: one group of padded(width) planes
    unless the largest power of two <= width plus the rest (padded) is smaller (20 bits: 16 + 4, not 32)."""
    width = spec.shift + spec.q_bits
    whole, first = padded(width, 1), 1 << (width.bit_length() - 1)
    rest = padded(width - first, 1)
    return ((0, whole),) if first == width or first + rest >= whole else ((0, first), (first, rest))


def _planes(spec: Decomposition) -> int:
    """Committed planes of a decomposition (the groups' total)."""
    return sum(count for _, count in _plane_groups(spec))


def _coefficients(spec: Decomposition):
    """(rebuild c, output c') per committed plane, as field elements: x + h = sum_j c_j b_j, q = sum_j c'_j b_j
    (:mod:`proofs.layers.requant`; the sign plane R + Q - 1 has the negative weight)."""
    rebuild, output = np.zeros(_planes(spec), dtype=np.int64), np.zeros(_planes(spec), dtype=np.int64)
    sign = spec.shift + spec.q_bits - 1
    rebuild[:sign + 1] = [1 << j for j in range(sign + 1)]
    output[spec.shift:sign + 1] = [1 << t for t in range(spec.q_bits)]
    rebuild[sign], output[sign] = -rebuild[sign], -output[sign]
    return F.to_field(rebuild), F.to_field(output)


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

    def bits(self) -> dict:
        """name -> all committed planes of that decomposition (planes x elements, zero planes past the width)."""
        out = {}
        for name, witness in [(f"fwd{i}", w) for i, w in enumerate(self.fwd)] + \
                             [(f"bwd{i}", w) for i, w in enumerate(self.bwd)] + \
                             [(f"upd{i}", w) for i, w in enumerate(self.upd)]:
            width = witness.spec.shift + witness.spec.q_bits
            table = np.zeros((_planes(witness.spec), witness.bits.shape[1]), dtype=np.uint64)
            table[:width] = witness.bits[:width]
            out[name] = table
        return out


def _committed_tables(spec: TrainingSpec, steps: int = 1, forward_only: bool = False) -> list:
    """(step, name, group, start, count, elements) of every committed bits table (one per group of planes)."""
    return [(t, name, g, start, count, elements) for t in range(steps)
            for name, decomposition, elements in spec.bit_tables() if not forward_only or name.startswith("fwd")
            for g, (start, count) in enumerate(_plane_groups(decomposition))]


def _packed_bits(traces, groups, forward_only: bool = False) -> list:
    bits = [trace.bits() for trace in traces]
    tables = [bits[t][name][start:start + count].reshape(-1)
              for t, name, _, start, count, _ in _committed_tables(traces[0].spec, len(traces), forward_only)]
    return [stack(tables, groups, g) for g in range(len(groups.groups))]


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


# ------------------------------------------------------------------------------------- statement
def weight_packing(spec: TrainingSpec) -> Packing:
    return Packing(tuple(spec.width(i + 1) * spec.width(i) for i in range(spec.num_layers)))


def batch_packing(spec: TrainingSpec) -> Packing:
    B = spec.batch_padded
    return Packing((B * spec.width(0), B * spec.width(spec.num_layers)))


def _field(table) -> np.ndarray:
    return F.to_field(np.asarray(table, dtype=np.int64).reshape(-1))


@dataclass(frozen=True, eq=False)
class CommittedTensors:
    """Commitments (and, for the prover, witnesses) to the weights, the new weights and the batch."""

    weights: HidingCommitment
    new_weights: HidingCommitment
    batch: HidingCommitment
    witnesses: dict = dataclass_field(default=None, repr=False)


@dataclass(frozen=True, eq=False)
class CommittedSteps:
    """k consecutive steps: commitments to W_0..W_k (W_(t+1) is step t's W') and to each step's batch.

    ``witnesses`` (prover only) maps "w<t>" and "b<t>" to the commitment witnesses."""

    weights: tuple
    batches: tuple
    witnesses: dict = dataclass_field(default=None, repr=False)

    def keyed(self) -> list:
        """(key, commitment, packing) in the order the proof opens them."""
        return [(f"w{t}", c, "weights") for t, c in enumerate(self.weights)] + \
            [(f"b{t}", c, "batch") for t, c in enumerate(self.batches)]


def _as_steps(committed: CommittedTensors) -> CommittedSteps:
    witnesses = None if committed.witnesses is None else {
        "w0": committed.witnesses["weights"], "w1": committed.witnesses["new_weights"], "b0": committed.witnesses["batch"]}
    return CommittedSteps((committed.weights, committed.new_weights), (committed.batch,), witnesses)


def _commit_tables(tables: dict, params, seed):
    return {name: hiding_commit(table, params, seed=None if seed is None else seed + k)
            for k, (name, table) in enumerate(tables.items())}


def commit_step(trace: TrainingTrace, zk: bool = True, params: HidingParams | None = None,
                seed=None) -> CommittedTensors:
    """Commit to W, W' and the batch of ``trace`` (what the verifier receives)."""
    steps = commit_steps([trace], zk, params, seed)
    return CommittedTensors(steps.weights[0], steps.weights[1], steps.batches[0],
                            {"weights": steps.witnesses["w0"], "new_weights": steps.witnesses["w1"],
                             "batch": steps.witnesses["b0"]})


def commit_steps(traces, zk: bool = True, params: HidingParams | None = None, seed=None) -> CommittedSteps:
    """Commit to W_0..W_k and the k batches of consecutive steps (``traces[t + 1].weights`` = ``traces[t]``'s W')."""
    params = _params(zk, params)
    traces = _check_chain(traces)
    spec = traces[0].spec
    tables = {"w0": weight_packing(spec).pack([_field(w) for w in traces[0].weights])}
    for t, trace in enumerate(traces):
        tables[f"w{t + 1}"] = weight_packing(spec).pack([_field(w) for w in trace.new_weights])
        tables[f"b{t}"] = batch_packing(spec).pack([_field(trace.x), _field(trace.y)])
    made = _commit_tables(tables, params, seed)
    return CommittedSteps(tuple(made[f"w{t}"][0] for t in range(len(traces) + 1)),
                          tuple(made[f"b{t}"][0] for t in range(len(traces))),
                          {name: pair[1] for name, pair in made.items()})


def _check_chain(traces) -> list:
    traces = list(traces) if isinstance(traces, (list, tuple)) else []
    if not traces or not all(isinstance(t, TrainingTrace) for t in traces):
        raise ProofError("traces must be a non-empty list of TrainingTrace")
    for t in range(1, len(traces)):
        if traces[t].spec != traces[0].spec:
            raise ProofError(f"traces[{t}] has spec {traces[t].spec}, traces[0] {traces[0].spec}")
        if not all(np.array_equal(a, b) for a, b in zip(traces[t].weights, traces[t - 1].new_weights)):
            raise ProofError(f"traces[{t}] does not start from the weights traces[{t - 1}] ends with")
    return traces


def _params(zk: bool, params):
    if params is None:
        return HidingParams(rate_inv=DEFAULT_RATE_INV, hiding=bool(zk), mask_rows=DEFAULT_MASK_ROWS if zk else 0)
    if not isinstance(params, HidingParams) or params.hiding != bool(zk):
        raise ProofError(f"params must be HidingParams with hiding={bool(zk)}, got {params!r}")
    return params


# -------------------------------------------------------------------------------------- the channel
class _Channel:
    """What prover and verifier share: the transcript, the proof items (written or read) and the claims
    on committed tables. The protocol below runs once per side; prover-only values are lambdas."""

    def __init__(self, transcript, zk: bool, params: HidingParams, items=None):
        self.transcript, self.zk, self.params = transcript, zk, params
        self.proving = items is None
        self.items = [] if items is None else list(items)
        self._position = 0
        self.claims = {}  # commitment key -> [(point, value)]

    def _next(self, kind, where):
        if self._position >= len(self.items):
            raise ProofRejected("the proof ends early", where)
        item = self.items[self._position]
        self._position += 1
        if not isinstance(item, kind):
            raise ProofRejected(f"expected {kind.__name__}, got {type(item).__name__}", where)
        return item

    def send(self, label, compute, shape=(4,)) -> np.ndarray:
        """A value the prover states (computed by ``compute`` on the prover side)."""
        if self.proving:
            value = np.asarray(compute(), dtype=np.uint64)
            self.items.append(value)
        else:
            value = self._next(np.ndarray, label)
            if value.shape != tuple(shape) or not F.is_canonical(value):
                raise ProofRejected(f"value of shape {value.shape}, expected {tuple(shape)} canonical", label)
        self.transcript.absorb(label, value)
        return value

    def sumcheck(self, label, claim, num_vars, degree, terms):
        """Run a (ZK when hiding) sumcheck; returns (point, expected value of the summand or None for the prover)."""
        if self.proving:
            prover = terms()
            prover = prover if hasattr(prover, "round_message") else SumcheckProver(prover)
            if self.zk:
                proof, point, _ = prove_zk_sumcheck(prover, claim, self.transcript, label, self.params)
            else:
                proof, point = _plain_sumcheck(prover, claim, self.transcript, label)
            self.items.append(proof)
            self.last_prover = prover
            return point, None
        if self.zk:
            sub = verify_zk_sumcheck(self._next(ZKSumcheckProof, label), claim, num_vars, degree, self.transcript,
                                     label)
        else:
            sub = verify_sumcheck(self._next(SumcheckProof, label), claim, num_vars, degree, self.transcript, label)
        return sub.point, sub.expected_value

    def check(self, expected, value, reason) -> None:
        if not self.proving and not F.ext_eq(expected, value):
            raise ProofRejected(reason, "training proof")

    def record(self, key, point, value) -> None:
        self.claims.setdefault(key, []).append((np.asarray(point, dtype=np.uint64), np.asarray(value)))

    def open(self, key, commitment, witness) -> None:
        points = np.stack([p for p, _ in self.claims.get(key, [])])
        values = np.stack([v for _, v in self.claims[key]])
        if self.proving:
            _, opening = open_points(witness, points, self.transcript, values=values)
            self.items.append(opening)
        else:
            verify_points(commitment, points, values, self._next(HidingOpening, f"opening of {key}"),
                          self.transcript)

    def finish(self) -> None:
        if not self.proving and self._position != len(self.items):
            raise ProofRejected(f"{len(self.items) - self._position} unused proof items", "training proof")


def _plain_sumcheck(terms, claim, transcript, label):
    """The Fiat-Shamir sumcheck of :mod:`proofs.sumcheck`, without the prover-side claim check
    (``terms``: a list of terms or a prover object)."""
    prover = terms if hasattr(terms, "round_message") else SumcheckProver(terms)
    _absorb_statement(transcript, label, _as_ext_scalar(claim, "claim"), prover.num_vars, prover.degree)
    messages = np.zeros((prover.num_vars, prover.degree + 1, F.EXT_DEGREE), dtype=np.uint64)
    for j in range(prover.num_vars):
        messages[j] = prover.round_message()
        transcript.absorb(f"{label}.round", messages[j])
        prover.bind(transcript.challenge_ext(f"{label}.r"))
    return SumcheckProof(messages), np.array(prover.challenges, dtype=np.uint64).reshape(-1, F.EXT_DEGREE)


def _columns_at(matrix_table, rows: int, point) -> np.ndarray:
    """sum_c eq(point, c) M[:, c] for a row-major field table (rows x cols): bind the low variables."""
    return F.matmul(matrix_table.reshape(rows, -1), eq_table(point))


def _alpha_combination(channel, label, claims):
    """Random weights alpha (alpha_0 = 1) for a list of (point, value) claims -> (alphas, combined value)."""
    alphas = np.concatenate([F.ext_one((1,)), channel.transcript.challenge_ext_vector(label, len(claims) - 1)])
    total = F.ext_zero()
    for alpha, (_, value) in zip(alphas, claims):
        total = F.ext_add(total, F.ext_mul(alpha, value))
    return alphas, total


# ------------------------------------------------------------------------------------- the protocol
class _Protocol:
    """The reductions of the module docstring, run identically by prover (with a trace) and verifier."""

    def __init__(self, spec: TrainingSpec, channel: _Channel, groups, step: int, steps: int, trace=None,
                 forward_only: bool = False, public_input=None):
        self.spec, self.ch, self.groups, self.step, self.trace = spec, channel, groups, step, trace
        self.public_input = public_input
        self.bit_specs = {name: (decomposition, elements) for name, decomposition, elements in spec.bit_tables()}
        self.table_index = {(t, name, g): k for k, (t, name, g, _, _, _)
                            in enumerate(_committed_tables(spec, steps, forward_only))}
        if trace is not None:
            self.bits = trace.bits()
            L = spec.num_layers
            self.tables = {f"W{i}": _field(trace.weights[i]) for i in range(L)}
            self.tables.update({f"A{i}": _field(trace.acts[i]) for i in range(L)})
            self.tables.update({f"G{i}": _field(g) for i, g in enumerate(trace.grads)})
            self.tables.update({f"Wn{i}": _field(w) for i, w in enumerate(trace.new_weights)})
            self.tables["Y"] = _field(trace.y)
        self.pending = {}  # virtual tensor -> [(point, value)]

    # claims on committed tables ---------------------------------------------------------------
    def committed(self, key, packing_index, local_point, value) -> None:
        """A claim on W (``"weights"``), W' (``"new_weights"``) or the batch of this step."""
        t = self.step
        key, packing = {"weights": (f"w{t}", weight_packing), "new_weights": (f"w{t + 1}", weight_packing),
                        "batch": (f"b{t}", batch_packing)}[key]
        self.ch.record(key, packing(self.spec).point(packing_index, local_point), value)

    def bits_claim(self, name, plane_group, point, value) -> None:
        group, position = self.groups.locate(self.table_index[(self.step, name, plane_group)])
        self.ch.record(f"bits{group}", self.groups.packing(group).point(position, point), value)

    def planes(self, name, point):
        """Plane values T~(point, j) -> (rebuilt value, quotient value, sign value); records one bits claim."""
        decomposition, elements = self.bit_specs[name]
        values = self.ch.send(f"training.planes.{name}", lambda: F.matmul(self.bits[name], eq_table(point)),
                              (_planes(decomposition), 4))
        for g, (start, count) in enumerate(_plane_groups(decomposition)):
            tau = self.ch.transcript.challenge_ext_vector(f"training.tau.{name}", log2(count))  # error 1/|F| per var
            self.bits_claim(name, g, np.concatenate([point, tau]), F.ext_dot(eq_table(tau), values[start:start + count]))
        rebuild, output = _coefficients(decomposition)
        rebuilt = F.ext_sub(F.ext_dot(values, rebuild), F.ext_from_base(F.to_field(decomposition.offset)))
        return rebuilt, F.ext_dot(values, output), values[decomposition.shift + decomposition.q_bits - 1]

    def claim(self, tensor, point, value) -> None:
        self.pending.setdefault(tensor, []).append((point, value))

    # reductions -------------------------------------------------------------------------------
    def matmul(self, label, value, n_vars, left, right):
        """sum_k L(k) R(k) = value over n_vars; ``left``/``right`` build the bound tables (prover side)."""
        return self.ch.sumcheck(f"sumcheck.training.{label}", value, n_vars, 2,
                                lambda: [(F.ext_one(), [left(), right()])])

    def update(self, i):
        spec, ch = self.spec, self.ch
        out_vars, in_vars = log2(spec.width(i + 1)), log2(spec.width(i))
        r = ch.transcript.challenge_ext_vector(f"training.update{i}", out_vars + in_vars)
        w_new = ch.send("training.wnew", lambda: mle_evaluate(self.tables[f"Wn{i}"], r))
        w_old = ch.send("training.wold", lambda: mle_evaluate(self.tables[f"W{i}"], r))
        self.committed("new_weights", i, r, w_new)
        self.committed("weights", i, r, w_old)
        grad_w, step, _ = self.planes(f"upd{i}", r)
        ch.check(F.ext_sub(w_old, step), w_new, f"layer {i}: W' != W - round(G_W / 2^k) at a random point")
        # G_W_i[o, k] = sum_b G_i[b, o] A_i[b, k]; point = (r_k, r_o)
        r_k, r_o = r[:in_vars], r[in_vars:]
        B = spec.batch_padded
        rho, expected = self.matmul(f"gradw{i}", grad_w, log2(B), lambda: _columns_at(self.tables[f"G{i}"], B, r_o),
                                    lambda: _columns_at(self.tables[f"A{i}"], B, r_k))
        g = ch.send("training.eval", lambda: mle_evaluate(self.tables[f"G{i}"], np.concatenate([r_o, rho])))
        a = ch.send("training.eval", lambda: mle_evaluate(self.tables[f"A{i}"], np.concatenate([r_k, rho])))
        ch.check(expected, F.ext_mul(g, a), f"layer {i}: weight-gradient sumcheck final value != G * A")
        self.claim(f"G{i}", np.concatenate([r_o, rho]), g)
        self.claim(f"A{i}", np.concatenate([r_k, rho]), a)

    def select(self, tensor, mask_name, quotient_name, masked: bool):
        """All claims on tensor = m * q at once; returns (rho, claim on the rescaled tensor) via the planes."""
        ch = self.ch
        claims = self.pending.pop(tensor)
        alphas, total = _alpha_combination(ch, f"training.alpha.{tensor}", claims)
        k = claims[0][0].shape[0]

        def terms():
            weights = F.ext_zero((1 << k,))
            for alpha, (point, _) in zip(alphas, claims):
                weights = F.ext_add(weights, F.ext_mul(eq_table(point), alpha[None, :]))
            quotient = self._quotient(quotient_name)
            if not masked:
                return [(F.ext_one(), [weights, quotient])]
            return [(F.ext_one(), [weights, self._mask(tensor, mask_name), quotient])]

        rho, expected = ch.sumcheck(f"sumcheck.training.select.{tensor}", total, k, 3 if masked else 2, terms)
        weight = F.ext_zero()
        for alpha, (point, _) in zip(alphas, claims):
            weight = F.ext_add(weight, F.ext_mul(alpha, eq_eval(point, rho)))
        rebuilt, quotient, sign = self.planes(quotient_name, rho)
        value = F.ext_mul(weight, quotient)
        if masked:
            if mask_name != quotient_name:  # the backward pass reuses the forward pass's committed sign bits
                _, _, sign = self.planes(mask_name, rho)
            value = F.ext_mul(value, F.ext_sub(F.ext_one(), sign))
        ch.check(expected, value, f"{tensor}: masked-rescale sumcheck final value != w (1 - s) q")
        return rho, rebuilt

    def _quotient(self, name):
        witness = self._witness(name)
        return F.to_field(witness.shifted)

    def _mask(self, tensor, mask_name):
        if tensor.startswith("G"):
            return F.to_field(self.trace.masks[int(tensor[1:])].reshape(-1))
        return F.sub(np.uint64(1), self._witness(mask_name).sign)

    def _witness(self, name):
        kind, index = name[:3], int(name[3:])
        return {"fwd": self.trace.fwd, "bwd": self.trace.bwd, "upd": self.trace.upd}[kind][index]

    def run(self):
        spec, ch = self.spec, self.ch
        L = spec.num_layers
        for i in range(L):
            self.update(i)
        for i in range(L - 1):  # G_i = (1 - s_i) round(G_A_i), G_A_i = G_(i+1) W_(i+1)
            rho, grad_a = self.select(f"G{i}", f"fwd{i}", f"bwd{i}", True)
            out_vars = log2(spec.width(i + 2))
            r_k, r_b = rho[:log2(spec.width(i + 1))], rho[log2(spec.width(i + 1)):]
            omega, expected = self.matmul(
                f"grada{i}", grad_a, out_vars,
                lambda: bind_high(self.tables[f"G{i + 1}"], r_b),
                lambda: _columns_at(self.tables[f"W{i + 1}"], spec.width(i + 2), r_k))
            g = ch.send("training.eval", lambda: mle_evaluate(self.tables[f"G{i + 1}"], np.concatenate([omega, r_b])))
            w = ch.send("training.eval", lambda: mle_evaluate(self.tables[f"W{i + 1}"], np.concatenate([r_k, omega])))
            ch.check(expected, F.ext_mul(g, w), f"layer {i}: input-gradient sumcheck final value != G * W")
            self.claim(f"G{i + 1}", np.concatenate([omega, r_b]), g)
            self.committed("weights", i + 1, np.concatenate([r_k, omega]), w)
        for point, value in self.pending.pop(f"G{L - 1}"):  # G = O - Y
            y = ch.send("training.eval", lambda: mle_evaluate(self.tables["Y"], point))
            self.committed("batch", 1, point, y)
            self.claim("O", point, F.ext_add(value, y))
        self.forward()

    def infer(self, output_table) -> None:
        """Forward-only proof: the verifier's random point on the public output O starts the reduction."""
        spec = self.spec
        r = self.ch.transcript.challenge_ext_vector("inference.r", log2(spec.batch_padded * spec.width(spec.num_layers)))
        self.claim("O", r, mle_evaluate(output_table, r))  # both sides evaluate the public output
        self.forward()

    def forward(self) -> None:
        """Reduce the claims on O and the activations down to the input (committed, or public)."""
        spec, ch = self.spec, self.ch
        L = spec.num_layers
        for i in range(L - 1, -1, -1):  # A_(i+1) = (1 - s_i) round(Z_i), Z_i = A_i W_i^T
            tensor = "O" if i == L - 1 else f"A{i + 1}"
            rho, acc = self.select(tensor, f"fwd{i}", f"fwd{i}", tensor != "O")
            out_vars = log2(spec.width(i + 1))
            r_o, r_b = rho[:out_vars], rho[out_vars:]
            kappa, expected = self.matmul(f"forward{i}", acc, log2(spec.width(i)),
                                          lambda: bind_high(self.tables[f"A{i}"], r_b),
                                          lambda: bind_high(self.tables[f"W{i}"], r_o))
            a = ch.send("training.eval", lambda: mle_evaluate(self.tables[f"A{i}"], np.concatenate([kappa, r_b])))
            w = ch.send("training.eval", lambda: mle_evaluate(self.tables[f"W{i}"], np.concatenate([kappa, r_o])))
            ch.check(expected, F.ext_mul(a, w), f"layer {i}: forward sumcheck final value != A * W")
            self.claim(f"A{i}", np.concatenate([kappa, r_b]), a)
            self.committed("weights", i, np.concatenate([kappa, r_o]), w)
        for point, value in self.pending.pop("A0"):
            if self.public_input is None:
                self.committed("batch", 0, point, value)
            else:
                ch.check(mle_evaluate(self.public_input, point), value, "the public input differs from its claim")
        if self.pending:
            raise ProofError(f"unreduced claims on {sorted(self.pending)}")


# ------------------------------------------------------------------------------------------ public
@dataclass(frozen=True, eq=False)
class TrainingProof:
    """The bits commitments (one per group, see :mod:`proofs.aggregate`) and the protocol's items in order."""

    mode: str
    bits_commitments: tuple
    items: tuple

    def to_bytes(self) -> bytes:
        """magic, version, mode (u8), bits commitments (u16 count), items (u32 count, each a u8 tag + body)."""
        parts = [_PROOF_MAGIC, bytes([_PROOF_VERSION, MODES.index(self.mode)]),
                 len(self.bits_commitments).to_bytes(2, "little")] + [c.to_bytes() for c in self.bits_commitments]
        parts.append(len(self.items).to_bytes(4, "little"))
        for item in self.items:
            tag = next(t for t, kind in enumerate(_ITEM_KINDS) if isinstance(item, kind))
            if tag < 2:  # F_p4 values (with their dimension count), or a plain sumcheck's messages
                body = (bytes([item.ndim]) if tag == 0 else b"") + F.elements_to_bytes(
                    item if tag == 0 else item.round_messages)
            else:
                body = item.to_bytes()
            parts.append(bytes([tag]) + body)
        return b"".join(parts)

    @classmethod
    def from_bytes(cls, data) -> "TrainingProof":
        """Inverse of :meth:`to_bytes`; anything malformed, truncated or trailing raises ProofRejected."""
        reader = F.ByteReader(data, "training proof bytes")
        if reader.raw(len(_PROOF_MAGIC)) != _PROOF_MAGIC or reader.uint(1) != _PROOF_VERSION:
            raise ProofRejected("bad magic or version", reader.where)
        mode = reader.uint(1)
        if mode >= len(MODES):
            raise ProofRejected(f"mode {mode} unknown", reader.where)
        commitments = tuple(HidingCommitment.read(reader) for _ in range(reader.uint(2)))
        count = reader.uint(4)
        if count > 1 << 20:
            raise ProofRejected(f"{count} items", reader.where)
        items = []
        for _ in range(count):
            tag = reader.uint(1)
            if tag >= len(_ITEM_KINDS):
                raise ProofRejected(f"item tag {tag} unknown", reader.where)
            items.append(_read_item(reader, tag))
        reader.finish()
        return cls(MODES[mode], commitments, tuple(items))

    @property
    def num_bytes(self) -> int:
        return len(self.to_bytes())


_PROOF_MAGIC, _PROOF_VERSION = b"HZKTRAIN", 1
_ITEM_KINDS = (np.ndarray, SumcheckProof, ZKSumcheckProof, HidingOpening)


def _read_item(reader, tag: int):
    """One proof item: an F_p4 array (its dimension count first: 1 or 2), or a proof object."""
    if tag == 0:
        ndim = reader.uint(1)
        if ndim not in (1, 2):
            raise ProofRejected(f"value array with {ndim} dimensions", reader.where)
        return reader.elements(ndim)
    if tag == 1:
        return SumcheckProof(reader.elements(3))
    return (ZKSumcheckProof if tag == 2 else HidingOpening).read(reader)


def _statement(spec: TrainingSpec, steps: CommittedSteps, bits_commitments, mode: str):
    transcript = Transcript(TRANSCRIPT_LABEL)
    spec.absorb(transcript)
    transcript.absorb("training.statement", [mode, len(steps.batches)] + [c.to_bytes() for _, c, _ in steps.keyed()]
                      + [c.to_bytes() for c in bits_commitments])
    return transcript


def _bit_checks(channel, groups, packed=None) -> None:
    """One bit-check sumcheck per bits commitment (one per kind when aggregated)."""
    for g in range(len(groups.groups)):
        n = groups.packing(g).num_vars
        tau = channel.transcript.challenge_ext_vector(f"training.bits{g}.tau", n)  # error n / |F|
        sigma, expected = channel.sumcheck(f"sumcheck.training.bits{g}", 0, n, 3,
                                           lambda: BitCheckProver(packed[g], tau))
        value = channel.send("training.bits_eval", lambda: channel.last_prover.final_evaluations()[0][0])
        channel.check(expected, bit_check_value(tau, sigma, value), f"bits commitment {g}: an entry is not a bit")
        channel.record(f"bits{g}", sigma, value)


def _groups(spec: TrainingSpec, mode: str, steps: int, forward_only: bool = False):
    tables = _committed_tables(spec, steps, forward_only)
    return plan_groups([entry[4] * entry[5] for entry in tables], mode, kinds=[entry[1][:3] for entry in tables])


def _checked_commitments(expected, groups, proof, params, where) -> list:
    """The statement's (key, commitment, num_vars) plus the proof's bits commitments, each checked for its type,
    size and parameters (ProofRejected otherwise)."""
    if len(proof.bits_commitments) != len(groups.groups):
        raise ProofRejected(f"{len(proof.bits_commitments)} bits commitments, expected {len(groups.groups)}", where)
    expected = expected + [(f"bits{g}", c, groups.packing(g).num_vars) for g, c in enumerate(proof.bits_commitments)]
    for name, commitment, num_vars in expected:
        if not isinstance(commitment, HidingCommitment) or commitment.num_vars != num_vars or \
                commitment.params != params:
            raise ProofRejected(f"{name} commitment does not match the statement (num_vars {num_vars}, {params})",
                                where)
    return expected


def prove_training_steps(traces, committed: CommittedSteps, zk: bool = True, mode: str = "aggregate",
                         params: HidingParams | None = None) -> TrainingProof:
    """Prove that each committed W_(t+1) is one SGD step from W_t on batch t, for consecutive steps at once.

    With ``mode="aggregate"`` the bit planes of a kind are stacked across layers *and* steps: one commitment,
    one bit check and one opening per kind for the whole run; W_1..W_(k-1) are opened once for both steps
    that use them.
    """
    params = _params(zk, params)
    traces = _check_chain(traces)
    if not isinstance(committed, CommittedSteps) or committed.witnesses is None or \
            len(committed.batches) != len(traces):
        raise ProofError(f"committed must be CommittedSteps with witnesses for {len(traces)} steps")
    if committed.weights[0].params != params:
        raise ProofError(f"the commitments use {committed.weights[0].params}, the proof {params}")
    spec, steps = traces[0].spec, len(traces)
    groups = _groups(spec, mode, steps)
    packed = _packed_bits(traces, groups)
    bits_made = [hiding_commit(table, params) for table in packed]
    channel = _Channel(_statement(spec, committed, [c for c, _ in bits_made], mode), bool(zk), params)
    for t, trace in enumerate(traces):
        _Protocol(spec, channel, groups, t, steps, trace).run()
    _bit_checks(channel, groups, packed)
    for key, _, _ in committed.keyed():
        channel.open(key, None, committed.witnesses[key])
    for g, (_, witness) in enumerate(bits_made):
        channel.open(f"bits{g}", None, witness)
    return TrainingProof(mode, tuple(c for c, _ in bits_made), tuple(channel.items))


def verify_training_steps(spec: TrainingSpec, committed: CommittedSteps, proof: TrainingProof) -> None:
    """Raise ProofRejected unless ``proof`` shows every committed W_(t+1) is one honest SGD step from W_t."""
    where = "training proof"
    if not isinstance(spec, TrainingSpec) or not isinstance(committed, CommittedSteps) or \
            not 1 <= len(committed.batches) == len(committed.weights) - 1:
        raise ProofRejected("expected a TrainingSpec and CommittedSteps (k + 1 weights, k batches)", where)
    if not isinstance(proof, TrainingProof) or proof.mode not in ("aggregate", "layer"):
        raise ProofRejected("expected a TrainingProof with mode 'aggregate' or 'layer'", where)
    params, steps = getattr(committed.weights[0], "params", None), len(committed.batches)
    groups = _groups(spec, proof.mode, steps)
    sizes = {"weights": weight_packing(spec).num_vars, "batch": batch_packing(spec).num_vars}
    expected = _checked_commitments([(key, c, sizes[kind]) for key, c, kind in committed.keyed()], groups, proof,
                                    params, where)
    channel = _Channel(_statement(spec, committed, proof.bits_commitments, proof.mode), params.hiding, params,
                       items=proof.items)
    for t in range(steps):
        _Protocol(spec, channel, groups, t, steps).run()
    _bit_checks(channel, groups)
    for name, commitment, _ in expected:
        channel.open(name, commitment, None)
    channel.finish()


def prove_training_step(trace: TrainingTrace, committed: CommittedTensors, zk: bool = True, mode: str = "aggregate",
                        params: HidingParams | None = None) -> TrainingProof:
    """Prove that ``committed.new_weights`` is one SGD step from ``committed.weights`` on ``committed.batch``.

    ``trace`` is the prover's witness (:func:`training_trace`); ``committed`` must come from
    :func:`commit_step` with the same ``zk``.
    """
    if not isinstance(committed, CommittedTensors) or committed.witnesses is None:
        raise ProofError("prove_training_step needs CommittedTensors with witnesses (from commit_step)")
    return prove_training_steps([trace], _as_steps(committed), zk, mode, params)


def verify_training_step(spec: TrainingSpec, committed: CommittedTensors, proof: TrainingProof) -> None:
    """Raise ProofRejected unless ``proof`` shows W' (committed) is one honest SGD step from W on the batch."""
    if not isinstance(committed, CommittedTensors):
        raise ProofRejected("expected CommittedTensors", "training proof")
    verify_training_steps(spec, _as_steps(committed), proof)


# ------------------------------------------------------------------------------ forward pass alone
@dataclass(frozen=True, eq=False)
class CommittedModel:
    """Commitments for a forward-only proof: the weights and, when private, the input batch."""

    weights: HidingCommitment
    input: object = None
    witnesses: dict = dataclass_field(default=None, repr=False)


def commit_forward(trace: TrainingTrace, zk: bool = True, private_input: bool = True,
                   params: HidingParams | None = None) -> CommittedModel:
    """Commit to the weights and (``private_input``) the input of ``trace``."""
    params, spec = _params(zk, params), trace.spec
    tables = {"w0": weight_packing(spec).pack([_field(w) for w in trace.weights])}
    if private_input:
        tables["b0"] = batch_packing(spec).pack([_field(trace.x), _field(np.zeros_like(trace.y))])
    made = _commit_tables(tables, params, None)
    return CommittedModel(made["w0"][0], made["b0"][0] if private_input else None,
                          {name: pair[1] for name, pair in made.items()})


def forward_output(trace: TrainingTrace) -> np.ndarray:
    """The public output O (B x d_L, int64) of a forward trace."""
    spec = trace.spec
    out = trace.fwd[-1].shifted.reshape(spec.batch_padded, -1)
    return out[:spec.batch, :spec.sizes[-1]].copy()


def _forward_statement(spec, committed, output, public_input, bits_commitments):
    transcript = Transcript(TRANSCRIPT_LABEL + ".forward")
    spec.absorb(transcript)
    parts = ["forward", committed.weights.to_bytes(), np.asarray(output, dtype=np.int64)]
    parts.append(committed.input.to_bytes() if committed.input is not None else np.asarray(public_input, dtype=np.int64))
    transcript.absorb("inference.statement", parts + [c.to_bytes() for c in bits_commitments])
    return transcript


def prove_forward(trace: TrainingTrace, committed: CommittedModel, zk: bool = True,
                  params: HidingParams | None = None) -> TrainingProof:
    """Prove O = model(X) for committed (hidden, with ``zk``) weights and a committed or public input X;
    only O is public. The forward half of the training proof: zkReLU, rescales and matmuls."""
    params = _params(zk, params)
    if not isinstance(trace, TrainingTrace) or not isinstance(committed, CommittedModel) or \
            committed.witnesses is None:
        raise ProofError("prove_forward needs a TrainingTrace and a CommittedModel with witnesses")
    spec = trace.spec
    groups = _groups(spec, "aggregate", 1, forward_only=True)
    packed = _packed_bits([trace], groups, forward_only=True)
    bits_made = [hiding_commit(table, params) for table in packed]
    public_input = None if committed.input is not None else trace.x[:spec.batch, :spec.sizes[0]]
    transcript = _forward_statement(spec, committed, forward_output(trace), public_input, [c for c, _ in bits_made])
    channel = _Channel(transcript, bool(zk), params)
    output = _field(trace.fwd[-1].shifted)
    _Protocol(spec, channel, groups, 0, 1, trace, forward_only=True).infer(output)
    _bit_checks(channel, groups, packed)
    for key in ("w0", "b0")[:len(committed.witnesses)]:
        channel.open(key, None, committed.witnesses[key])
    for g, (_, witness) in enumerate(bits_made):
        channel.open(f"bits{g}", None, witness)
    return TrainingProof("aggregate", tuple(c for c, _ in bits_made), tuple(channel.items))


def verify_forward(spec: TrainingSpec, committed: CommittedModel, output, proof: TrainingProof,
                   public_input=None) -> None:
    """Raise ProofRejected unless ``proof`` shows ``output`` = model(input) for the committed weights and the
    committed input (or ``public_input`` when the input was not committed)."""
    where = "forward proof"
    if not isinstance(spec, TrainingSpec) or not isinstance(committed, CommittedModel) or \
            not isinstance(proof, TrainingProof) or proof.mode != "aggregate":
        raise ProofRejected("expected a TrainingSpec, a CommittedModel and an aggregated TrainingProof", where)
    if (committed.input is None) == (public_input is None):
        raise ProofRejected("give exactly one of a committed input and a public input", where)
    B, out_width = spec.batch_padded, spec.width(spec.num_layers)
    output = np.asarray(output)
    if output.shape != (spec.batch, spec.sizes[-1]) or output.dtype.kind not in "iu":
        raise ProofRejected(f"output of shape {output.shape}, expected integers {(spec.batch, spec.sizes[-1])}", where)
    x_table = None
    if public_input is not None:
        public_input = np.asarray(public_input)
        if public_input.shape != (spec.batch, spec.sizes[0]) or public_input.dtype.kind not in "iu":
            raise ProofRejected(f"public input of shape {public_input.shape}, expected {(spec.batch, spec.sizes[0])}",
                                where)
        x_table = _field(pad_matrix(public_input, B, spec.width(0)))
    params = getattr(committed.weights, "params", None)
    groups = _groups(spec, "aggregate", 1, forward_only=True)
    expected = [("w0", committed.weights, weight_packing(spec).num_vars)]
    if committed.input is not None:
        expected.append(("b0", committed.input, batch_packing(spec).num_vars))
    expected = _checked_commitments(expected, groups, proof, params, where)
    transcript = _forward_statement(spec, committed, output, public_input, proof.bits_commitments)
    channel = _Channel(transcript, params.hiding, params, items=proof.items)
    _Protocol(spec, channel, groups, 0, 1, forward_only=True, public_input=x_table).infer(
        _field(pad_matrix(output, B, out_width)))
    _bit_checks(channel, groups)
    for name, commitment, _ in expected:
        channel.open(name, commitment, None)
    channel.finish()
