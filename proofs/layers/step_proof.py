"""Zero-knowledge proofs of SGD training steps and of inference, as relations between masked stores.

The integer model is :mod:`proofs.layers.training`'s (zkDL, Sun-Li-Zhang, sections 3-4): per layer i,
Z_i = A_i W_i^T rescaled by bit decomposition (:mod:`proofs.layers.requant`) into z'_i with sign bits s_i,
A_(i+1) = (1 - s_i) z'_i, O = z'_(L-1); backward G_(L-1) = O - Y, G_A_i = G_(i+1) W_(i+1) rescaled into
g_i, G_i = (1 - s_i) g_i (the forward sign bits); update G_W_i = G_i^T A_i rescaled into U_i, W'_i = W_i - U_i.

**What is committed.** The statement: W_t for each step boundary and each batch (X, Y), or for inference
W and (optionally) X. The proof first commits, in masked stores (:mod:`proofs.relations`), every
intermediate tensor: activations A_i, gradients G_i and every bit decomposition (planes as variables).
With ``mode="aggregate"`` (FAC4DNN) the tensors of every layer and step are stacked into a few stores
(power-of-two bins of at most 2^23 entries, so padding stays small: one store for small networks), with one
batched bit check for all decompositions and one opening per store; with ``mode="layer"`` each (step,
layer) has its own store and bit checks.

**The relations** (each one sumcheck with a public claim, tau a fresh random point per relation; c, c', h
a decomposition's rebuild and output coefficients and offset, s its sign plane):

- rescaled matmul, per product P = L R^T (forward Z_i, backward G_A_i, update G_W_i):
  sum_k L(tau_1, k) R(tau_2, k) - sum_e eq(tau, e) sum_j c_j B(e, j) + h = 0;
- ReLU select: sum_e eq(tau, e) [A_(i+1)(e) - q(e) + s(e) q(e)] = 0 with q = sum_j c'_j B(., j)
  (the same for G_i with the backward q and the forward sign bits);
- output: G_(L-1) = q_(L-1) - Y (training), or sum_e eq(tau, e) q_(L-1)(e) = O~(tau) for a public O;
- update: W'_i = W_i - q_upd;   bits: sum_x eq(tau_d, x) B_d(x) (1 - B_d(x)) = 0 for every decomposition d
  (batched with random weights);
- ranges: every step's inputs equal their own two's-complement bits, W_t in weight_bits, X_t and Y_t in
  act_bits (for inference: W and a private X; a public X is checked by the verifier directly).

Every factor value stated at a sumcheck's end is a masked-extension value, uniform (:mod:`proofs.relations`),
and the openings reveal only those values: the proof is zero knowledge (honest verifier, random oracle)
about W, W', X, Y and every intermediate tensor; the verifier learns the statement and that it holds.
Soundness (|F| = p^4): each relation's random point n / |F|, each sumcheck n d / |F| (+ 1 / |F| for its
mask), the bit-check weights 1 / |F|, each opening 2^-(commitment bits) (>= 100). All integers stay below
p / 2 by :meth:`TrainingSpec.bounds` (the inputs are range-checked, every rescaled value is a bit
decomposition), so the field relations are the integer ones and W' is the integer step. W' itself is not
range-checked (it may outgrow weight_bits; a next step's proof checks it as that step's input).
A tensor of n element variables hides at most n stated values; widths are padded to >= 8 and the prover
refuses (ProofError) a configuration whose stated values' masks would be dependent (:func:`mask_rank`).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field as dataclass_field

import numpy as np

from .. import field as F
from ..errors import ModelError, ProofError, ProofRejected
from ..mle import bind_high, mle_evaluate
from ..relations import (BitTerm, Public, Relation, RelationProver, Slot, StoreLayout, Stored, Term, commit_store,
                         eq_factor, expected_summand, mask_rank, view_pieces)
from ..sumcheck import SumcheckProof, verify_sumcheck
from ..transcript import Transcript
from ..zk import MAX_MASK_ROWS, HidingCommitment, HidingOpening, HidingParams, ZKSumcheckProof, open_functionals, \
    prove_zk_sumcheck, verify_functionals, verify_zk_sumcheck
from .common import log2, pad_matrix
from .requant import Decomposition, decompose
from .training import TrainingSpec, TrainingTrace, _check_chain, _field, _plain_sumcheck

TRANSCRIPT_LABEL = "hezk.proofs.training.v2"
#: "aggregate": every tensor of every layer and step in one store (FAC4DNN); "layer": one store per step and layer
MODES = ("aggregate", "layer")
#: Reed-Solomon rate 1/2: half the encoding and hashing of rate 1/4 for 1.6x the column queries
DEFAULT_RATE_INV = 2
#: random rows committed with each store, so one opening of up to 39 pieces needs no second Merkle tree
DEFAULT_MASK_ROWS = 40
#: a store holds at most 2^23 entries: larger matrices cost more in memory traffic than the commitments they save
MAX_STORE_VARS = 23
SMALL_STORE_VARS = 21  #: the tensors left over once the large stores are full share one store up to 2^21
VIEWS_PER_SLOT = 3.5  #: values opened per tensor, for choosing the stores' matrix shapes (:func:`_balanced_rows`)


def params_for(zk: bool, params=None) -> HidingParams:
    """The commitment parameters of a proof: ``params`` checked, or the defaults for ``zk``."""
    if params is None:
        return HidingParams(rate_inv=DEFAULT_RATE_INV, hiding=bool(zk), mask_rows=DEFAULT_MASK_ROWS if zk else 0)
    if not isinstance(params, HidingParams) or params.hiding != bool(zk):
        raise ProofError(f"params must be HidingParams with hiding={bool(zk)}, got {params!r}")
    return params


# ------------------------------------------------------------------------------------------- layouts
def _group_slots(name: str, elem_vars: int, decomposition: Decomposition) -> list:
    """One slot per committed group of bit planes (:attr:`Decomposition.groups`: 18 bits are 16 + 2 planes,
    not 32): ``name`` for the first group, ``name.g1`` for the second."""
    return [Slot(name if g == 0 else f"{name}.g{g}", elem_vars, log2(count))
            for g, (_, count) in enumerate(decomposition.groups)]


def weight_layout(spec: TrainingSpec, hiding: bool) -> StoreLayout:
    return StoreLayout(tuple(Slot(f"W{i}", log2(spec.width(i + 1) * spec.width(i))) for i in range(spec.num_layers)),
                       hiding)


def batch_layout(spec: TrainingSpec, hiding: bool, targets: bool = True) -> StoreLayout:
    B = spec.batch_padded
    slots = [Slot("X", log2(B * spec.width(0)))]
    if targets:
        slots.append(Slot("Y", log2(B * spec.width(spec.num_layers))))
    return StoreLayout(tuple(slots), hiding)


def weight_range(spec: TrainingSpec) -> Decomposition:
    """W's two's-complement bits (range [-2^(b-1), 2^(b-1)) for b = weight_bits)."""
    return Decomposition(0, spec.weight_bits, False)


def data_range(spec: TrainingSpec) -> Decomposition:
    """X's and Y's two's-complement bits (act_bits)."""
    return Decomposition(0, spec.act_bits, False)


def _layer_slots(spec: TrainingSpec, t: int, i: int, forward_only: bool, private_input: bool = True) -> list:
    """The proof's tensors of step t, layer i: activation A_i (i >= 1), gradient G_i, the decompositions, and
    the range bits of the step's inputs (W_i; X and Y with layer 0)."""
    B, L = spec.batch_padded, spec.num_layers
    slots = _group_slots(f"t{t}.rngw{i}", log2(spec.width(i + 1) * spec.width(i)), weight_range(spec))
    if i == 0 and private_input:
        slots += _group_slots(f"t{t}.rngx", log2(B * spec.width(0)), data_range(spec))
    if i == 0 and not forward_only:
        slots += _group_slots(f"t{t}.rngy", log2(B * spec.width(L)), data_range(spec))
    if i:
        slots.append(Slot(f"t{t}.A{i}", log2(B * spec.width(i))))
    slots += _group_slots(f"t{t}.fwd{i}", log2(B * spec.width(i + 1)), spec.forward_spec(i))
    if not forward_only:
        slots.append(Slot(f"t{t}.G{i}", log2(B * spec.width(i + 1))))
        if i < L - 1:
            slots += _group_slots(f"t{t}.bwd{i}", log2(B * spec.width(i + 1)), spec.backward_spec())
        slots += _group_slots(f"t{t}.upd{i}", log2(spec.width(i + 1) * spec.width(i)), spec.update_spec())
    return slots


def proof_layouts(spec: TrainingSpec, steps: int, mode: str, hiding: bool, forward_only: bool = False,
                  private_input: bool = True) -> dict:
    """Store key -> layout of the tensors the proof commits (one store, or one per step and layer)."""
    if mode not in MODES:
        raise ProofError(f"mode={mode!r} not in {MODES}")
    per_layer = {(t, i): _layer_slots(spec, t, i, forward_only, private_input)
                 for t in range(steps) for i in range(spec.num_layers)}
    if mode == "aggregate":
        bins = _power_of_two_bins([s for slots in per_layer.values() for s in slots], hiding)
        return {("p" if k == 0 else f"p{k}"): StoreLayout(tuple(b), hiding) for k, b in enumerate(bins)}
    return {f"p{t}.{i}": StoreLayout(tuple(slots), hiding) for (t, i), slots in per_layer.items()}


def _power_of_two_bins(slots, hiding: bool) -> list:
    """Tensors of every layer and step stacked into as few stores as keep the padding small (FAC4DNN).

    A store is padded to a power of two, so stacking 27.6M entries in one would commit 33.5M. While padding all
    the rest would waste more than 1/8 of it, the largest tensors fill the largest power of two not above the
    remaining total (sizes, with each tensor's mask block, are powers of two: largest first fills it exactly).
    """
    def footprint(slot):  # the tensor and its mask block
        return slot.size + (1 << (slot.mask_count - 1).bit_length() if hiding else 0)

    remaining = sorted(slots, key=lambda s: -footprint(s))
    bins = []
    while remaining:
        total = sum(footprint(s) for s in remaining)
        capacity = max(min(1 << (total.bit_length() - 1), 1 << MAX_STORE_VARS), footprint(remaining[0]))
        padded_total = capacity if capacity == total else 2 * capacity
        small = padded_total <= 1 << SMALL_STORE_VARS  # padding a small remainder costs little
        if total <= capacity or len(remaining) == 1 or \
                ((small or padded_total - total <= total // 8) and padded_total <= 1 << MAX_STORE_VARS):
            bins.append(remaining)
            break
        chosen, filled = [], 0
        for slot in remaining:
            if filled + footprint(slot) <= capacity:
                chosen.append(slot)
                filled += footprint(slot)
        bins.append(chosen)
        remaining = [s for s in remaining if all(s is not c for c in chosen)]
    return bins


def _bits_tables(name: str, witness) -> dict:
    """The slot tables of a decomposition's planes, one per plane group (planes past the width are zero)."""
    tables = {}
    for g, (start, count) in enumerate(witness.spec.groups):
        table = np.zeros((count, witness.bits.shape[1]), dtype=np.uint64)
        stop = min(start + count, witness.spec.width)
        table[:stop - start] = witness.bits[start:stop]
        tables[name if g == 0 else f"{name}.g{g}"] = table.reshape(-1)
    return tables


def _range_tables(name: str, values, decomposition: Decomposition) -> dict:
    try:
        witness = decompose(np.asarray(values).reshape(-1), decomposition)
    except ModelError as error:
        raise ModelError(f"{name}: {error}") from None
    return _bits_tables(name, witness)


def _proof_tables(trace: TrainingTrace, t: int, forward_only: bool, private_input: bool = True) -> dict:
    spec = trace.spec
    tables = {}
    for i, w in enumerate(trace.weights):
        tables.update(_range_tables(f"t{t}.rngw{i}", w, weight_range(spec)))
    if private_input:
        tables.update(_range_tables(f"t{t}.rngx", trace.x, data_range(spec)))
    if not forward_only:
        tables.update(_range_tables(f"t{t}.rngy", trace.y, data_range(spec)))
    for i in range(spec.num_layers):
        if i:
            tables[f"t{t}.A{i}"] = _field(trace.acts[i])
        tables.update(_bits_tables(f"t{t}.fwd{i}", trace.fwd[i]))
        if not forward_only:
            tables[f"t{t}.G{i}"] = _field(trace.grads[i])
            if i < spec.num_layers - 1:
                tables.update(_bits_tables(f"t{t}.bwd{i}", trace.bwd[i]))
            tables.update(_bits_tables(f"t{t}.upd{i}", trace.upd[i]))
    return tables


def _expected_pieces(layout: StoreLayout, log_cols: int) -> float:
    """About how many pieces the store's opening has (VIEWS_PER_SLOT values per tensor, each one data piece or
    one per matrix row, plus one mask piece with hiding)."""
    data = sum(1 if s.elem_vars >= log_cols else max(1, s.size >> log_cols) for s in layout.slots)
    return VIEWS_PER_SLOT * (data + (len(layout.slots) if layout.hiding else 0))


def _balanced_rows(layout: StoreLayout, params: HidingParams) -> int:
    """log_rows minimising the opening's size: each opened value sends one row (2^c + tail F_p4 entries) per
    piece (:func:`proofs.relations.view_pieces`: one for the data, or one per matrix row when a tensor with
    planes is narrower than a row, plus one for its masks), against the queries' opened columns of 2^(n - c)
    base entries. About VIEWS_PER_SLOT values are opened per tensor. Shapes whose random tail would push the
    code to twice the length (:meth:`HidingParams.code_shape`) are skipped: they double the encoding."""
    n = layout.num_vars

    def pieces(c):
        return _expected_pieces(layout, c)

    cost = {}
    for c in range(n + 1):
        shape = HidingCommitment(b"", n, n - c, params)
        if c < n and shape.codeword_length > params.rate_inv << c:
            continue
        queries = shape.num_queries
        cost[c] = pieces(c) * shape.width * 16 + queries * ((1 << (n - c)) + pieces(c)) * 4
    return n - min(cost, key=cost.get)


def _store_params(layout: StoreLayout, params: HidingParams) -> HidingParams:
    """With hiding, enough mask rows committed with the store for its one opening (about two pieces per stated
    value), so the opening needs no second Merkle tree of fresh masks."""
    if not params.hiding:
        return params
    rows = int(1.5 * _expected_pieces(layout, layout.num_vars - _balanced_rows(layout, params))) + 2
    return dataclasses.replace(params, mask_rows=min(max(params.mask_rows, rows), MAX_MASK_ROWS))


def _commit(layouts: dict, tables: dict, params: HidingParams, seed=None) -> dict:
    made = {}
    for k, (key, layout) in enumerate(layouts.items()):
        mine = {s.name: tables[s.name] for s in layout.slots}
        made[key] = commit_store(layout, mine, _store_params(layout, params), log_rows=_balanced_rows(layout, params),
                                 seed=None if seed is None else seed + k)
    return made


# ------------------------------------------------------------------------------------------- statement
@dataclass(frozen=True, eq=False)
class CommittedSteps:
    """k consecutive steps: commitments to W_0..W_k (W_(t+1) is step t's W') and to each step's batch (X, Y).

    ``witnesses`` (prover only) maps "w<t>" and "b<t>" to the store witnesses."""

    weights: tuple
    batches: tuple
    witnesses: dict = dataclass_field(default=None, repr=False)

    def keyed(self) -> list:
        """(key, commitment, kind) in the order the statement lists them."""
        return [(f"w{t}", c, "weights") for t, c in enumerate(self.weights)] + \
            [(f"b{t}", c, "batch") for t, c in enumerate(self.batches)]


@dataclass(frozen=True, eq=False)
class CommittedTensors:
    """Commitments (and, for the prover, witnesses) to the weights, the new weights and the batch of one step."""

    weights: HidingCommitment
    new_weights: HidingCommitment
    batch: HidingCommitment
    witnesses: dict = dataclass_field(default=None, repr=False)


def _as_steps(committed: CommittedTensors) -> CommittedSteps:
    witnesses = None if committed.witnesses is None else {
        "w0": committed.witnesses["weights"], "w1": committed.witnesses["new_weights"], "b0": committed.witnesses["batch"]}
    return CommittedSteps((committed.weights, committed.new_weights), (committed.batch,), witnesses)


def _weight_tables(spec, weights) -> dict:
    return {f"W{i}": _field(w) for i, w in enumerate(weights)}


def _statement_layouts(spec: TrainingSpec, steps: int, hiding: bool) -> dict:
    layouts = {f"w{t}": weight_layout(spec, hiding) for t in range(steps + 1)}
    layouts.update({f"b{t}": batch_layout(spec, hiding) for t in range(steps)})
    return layouts


def commit_steps(traces, zk: bool = True, params: HidingParams | None = None, seed=None) -> CommittedSteps:
    """Commit to W_0..W_k and the k batches of consecutive steps (``traces[t + 1].weights`` = ``traces[t]``'s W')."""
    params = params_for(zk, params)
    traces = _check_chain(traces)
    spec = traces[0].spec
    tables = {f"w0.{name}": table for name, table in _weight_tables(spec, traces[0].weights).items()}
    for t, trace in enumerate(traces):
        tables.update({f"w{t + 1}.{name}": table for name, table in _weight_tables(spec, trace.new_weights).items()})
        tables.update({f"b{t}.X": _field(trace.x), f"b{t}.Y": _field(trace.y)})
    layouts = _statement_layouts(spec, len(traces), params.hiding)
    made = {}
    for k, (key, layout) in enumerate(layouts.items()):
        made[key] = commit_store(layout, {s.name: tables[f"{key}.{s.name}"] for s in layout.slots}, params,
                                 seed=None if seed is None else seed + k, log_rows=_balanced_rows(layout, params))
    return CommittedSteps(tuple(made[f"w{t}"][0] for t in range(len(traces) + 1)),
                          tuple(made[f"b{t}"][0] for t in range(len(traces))),
                          {key: pair[1] for key, pair in made.items()})


def commit_step(trace: TrainingTrace, zk: bool = True, params: HidingParams | None = None,
                seed=None) -> CommittedTensors:
    """Commit to W, W' and the batch of ``trace`` (what the verifier receives)."""
    steps = commit_steps([trace], zk, params, seed)
    return CommittedTensors(steps.weights[0], steps.weights[1], steps.batches[0],
                            {"weights": steps.witnesses["w0"], "new_weights": steps.witnesses["w1"],
                             "batch": steps.witnesses["b0"]})


# ------------------------------------------------------------------------------------------- the proof
@dataclass(frozen=True, eq=False)
class TrainingProof:
    """The proof's store commitments and its items in protocol order: stated F_p4 values, sumchecks
    (ZK or plain) and one hiding opening per store."""

    mode: str
    bits_commitments: tuple
    items: tuple

    @property
    def commitments(self) -> tuple:
        """The commitments to the proof's own tensors (activations, gradients, bit planes)."""
        return self.bits_commitments

    def to_bytes(self) -> bytes:
        """Magic, version, mode (u8), commitments (u16 count), items (u32 count, each a u8 tag + body)."""
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


_PROOF_MAGIC, _PROOF_VERSION = b"HZKTRAIN", 2
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


# ------------------------------------------------------------------------------------------ the channel
def _factor_key(factor: Stored) -> tuple:
    """Stored factors with equal fields are one view: its value is stated once."""
    def raw(a):
        return None if a is None else np.asarray(a, dtype=np.uint64).tobytes()
    return factor.store, factor.name, raw(factor.low), raw(factor.high), raw(factor.planes)


class _Channel:
    """What prover and verifier share: the transcript, the stores, the proof items (written or read) and the
    values stated on each store. The protocol runs once per side."""

    def __init__(self, transcript, params: HidingParams, layouts: dict, commitments: dict, witnesses=None,
                 items=None):
        self.transcript, self.params, self.layouts, self.commitments = transcript, params, layouts, commitments
        self.witnesses = witnesses
        self.proving = items is None
        self.items = [] if items is None else list(items)
        self._position = 0
        self.claims = {key: [] for key in layouts}  # store key -> [(View, value)]
        self.relations = []  # (label, Relation) in protocol order

    def _next(self, kind, where):
        if self._position >= len(self.items):
            raise ProofRejected("the proof ends early", where)
        item = self.items[self._position]
        self._position += 1
        if not isinstance(item, kind):
            raise ProofRejected(f"expected {kind.__name__}, got {type(item).__name__}", where)
        return item

    def point(self, label: str, num_vars: int) -> np.ndarray:
        return self.transcript.challenge_ext_vector(label, num_vars)  # error num_vars / |F| for a zero check

    def relation(self, label: str, terms, claim=None) -> None:
        """One relation sumcheck; the prover states every distinct stored factor's value at its end."""
        claim = F.ext_zero() if claim is None else np.asarray(claim, dtype=np.uint64)
        relation = Relation(tuple(terms), claim)
        self.relations.append((label, relation))
        n, d = relation.num_vars(), relation.degree(self.layouts)
        unique = list({_factor_key(f): f for term in relation.terms for f in term.stored}.values())
        label = f"sumcheck.training.{label}"
        if self.proving:
            prover = RelationProver(relation, self.witnesses, self.layouts)
            if self.params.hiding:
                proof, sigma, finals = prove_zk_sumcheck(prover, claim, self.transcript, label, self.params)
            else:
                proof, sigma = _plain_sumcheck(prover, claim, self.transcript, label)
                finals = prover.final_evaluations()
            self.items.append(proof)
            by_key = {_factor_key(f): v for term, values in zip(relation.terms, finals)
                      for f, v in zip(term.stored, values)}
            values = np.stack([by_key[_factor_key(f)] for f in unique])
            self.items.append(values)
        else:
            if self.params.hiding:
                sub = verify_zk_sumcheck(self._next(ZKSumcheckProof, label), claim, n, d, self.transcript, label)
            else:
                sub = verify_sumcheck(self._next(SumcheckProof, label), claim, n, d, self.transcript, label)
            sigma = sub.point
            values = self._next(np.ndarray, label)
            if values.shape != (len(unique), F.EXT_DEGREE) or not F.is_canonical(values):
                raise ProofRejected(f"values of shape {values.shape}, expected ({len(unique)}, 4) canonical", label)
            by_key = {_factor_key(f): v for f, v in zip(unique, values)}
            finals = [[by_key[_factor_key(f)] for f in term.stored] for term in relation.terms]
            if not F.ext_eq(expected_summand(relation, sigma, finals), sub.expected_value):
                raise ProofRejected("the stated values do not satisfy the relation at the sumcheck's point", label)
        self.transcript.absorb(f"{label}.values", values)
        for f, v in zip(unique, values):
            self.claims[f.store].append((f.view_at(self.layouts[f.store].slot(f.name), sigma), v))

    def open_all(self) -> None:
        """One hiding opening per store of every value stated on it (in the layouts' order)."""
        for key, layout in self.layouts.items():
            claims = self.claims[key]
            if not claims:
                continue
            values = np.stack([v for _, v in claims])
            if self.proving:
                if self.params.hiding and mask_rank(layout, [view for view, _ in claims]) != len(claims):
                    raise ProofError(f"store {key}: the stated values' masks are dependent, zero knowledge would be "
                                     "lost (a tensor with too few variables for its values)")
                witness = self.witnesses[key]
                functionals = [view_pieces(layout, witness.commitment, view) for view, _ in claims]
                _, opening = open_functionals(witness.commitment_witness, functionals, self.transcript, values=values)
                self.items.append(opening)
            else:
                commitment = self.commitments[key]
                functionals = [view_pieces(layout, commitment, view) for view, _ in claims]
                verify_functionals(commitment, functionals, values, self._next(HidingOpening, f"opening of {key}"),
                                   self.transcript)

    def finish(self) -> None:
        if not self.proving and self._position != len(self.items):
            raise ProofRejected(f"{len(self.items) - self._position} unused proof items", "training proof")


class _ShapeChannel(_Channel):
    """Runs the protocol's structure only: records each relation's (variables, degree), proves nothing."""

    def __init__(self, params: HidingParams, layouts: dict):
        super().__init__(Transcript("hezk.proofs.training.shape"), params, layouts, {}, {})
        self.shapes = []

    def relation(self, label: str, terms, claim=None) -> None:
        relation = Relation(tuple(terms), F.ext_zero())
        self.shapes.append((relation.num_vars(), relation.degree(self.layouts)))


def soundness_bits(spec: TrainingSpec, steps: int = 1, mode: str = "aggregate", zk: bool = True,
                   params: HidingParams | None = None, forward_only: bool = False) -> float:
    """-log2 of a training (or inference) proof's soundness error, a union bound over its parts:
    per relation, the zero check's random point n / |F|, the sumcheck's n d / |F| and its mask's 1 / |F|;
    the bit check's batching weights 1 / |F| each; per opened store, the query error 2^-(security bits)
    plus 2 N / |F| for the proximity and value combinations (N the codeword length). |F| = p^4."""
    params = params_for(zk, params)
    layouts = proof_layouts(spec, steps, mode, params.hiding, forward_only)
    statement = _forward_layouts(spec, CommittedModel(None, True), params.hiding) if forward_only else \
        _statement_layouts(spec, steps, params.hiding)
    all_layouts = {**statement, **layouts}
    channel = _ShapeChannel(params, all_layouts)
    if forward_only:
        outputs = np.zeros(spec.batch_padded * spec.width(spec.num_layers), dtype=np.uint64)  # shapes only
        _run_forward(spec, channel, layouts, outputs, None)
    else:
        _run_training(spec, channel, steps, layouts, mode)
    field = float(F.P) ** F.EXT_DEGREE
    error = sum(n * d + n + 1 for n, d in channel.shapes) / field + len(_decomposition_keys(layouts)) / field
    for layout in all_layouts.values():
        shape = HidingCommitment(b"", layout.num_vars, _balanced_rows(layout, params), params)
        error += 2.0 ** -shape.security_bits + 2 * shape.codeword_length / field
    return -math.log2(error)


# ------------------------------------------------------------------------------------------ the protocol
def _ext_int(value: int) -> np.ndarray:
    return F.ext_from_base(F.to_field(np.array([value], dtype=np.int64)))[0]


class _Protocol:
    """The relations of the module docstring, run identically by prover and verifier."""

    def __init__(self, spec: TrainingSpec, channel: _Channel, where: dict, public_input=None):
        self.spec, self.ch, self.where, self.public_input = spec, channel, where, public_input
        self.one, self.minus = F.ext_one(), F.ext_neg(F.ext_one())

    def stored(self, t: int, name: str, **fix) -> Stored:
        key = f"t{t}.{name}"
        return Stored(self.where[key], key, **fix)

    def combination(self, t: int, name: str, decomposition: Decomposition, coefficients) -> list:
        """sum_j c_j B(., j) as (scale, stored factor) pairs, one per plane group the coefficients touch; a
        one-plane group is the plane itself times its coefficient (so equal views are stated once)."""
        coefficients = np.asarray(coefficients, dtype=np.int64)
        out = []
        for g, (start, count) in enumerate(decomposition.groups):
            part = coefficients[start:start + count]
            key = name if g == 0 else f"{name}.g{g}"
            if count == 1 and part[0]:
                out.append((_ext_int(int(part[0])), self.stored(t, key)))
            elif part.any():
                out.append((self.one, self.stored(t, key, planes=F.ext_from_base(F.to_field(part)))))
        return out

    def rebuilt(self, t, name, decomposition):
        return self.combination(t, name, decomposition, decomposition.rebuild_coefficients())

    def quotient(self, t, name, decomposition):
        return self.combination(t, name, decomposition, decomposition.output_coefficients())

    def sign(self, t, name, decomposition):
        indicator = np.zeros(decomposition.padded_width, dtype=np.int64)
        indicator[decomposition.sign_index] = 1
        (pair,) = self.combination(t, name, decomposition, indicator)
        return pair

    def rescaled_matmul(self, label, left, right, k_vars, rebuilt: list, decomposition, tau) -> None:
        """sum_k left(k) right(k) - sum_e eq(tau, e) sum_j c_j B(e, j) + h = 0 (Z(tau) = rebuilt(tau))."""
        publics = tuple(f for f in (left,) if isinstance(f, Public))
        stored = tuple(f for f in (left, right) if isinstance(f, Stored))
        eq = eq_factor(tau)
        self.ch.relation(label, [Term(self.one, publics, stored, k_vars)]
                         + [Term(F.ext_neg(c), (eq,), (part,), tau.shape[0]) for c, part in rebuilt]
                         + [Term(_ext_int(decomposition.offset), (), (), 0)])

    def select(self, label, target, quotient: list, sign, tau, extra=None) -> None:
        """sum_e eq(tau, e) [target(e) - q(e) + s(e) q(e) (+ extra(e))] = 0 (no sign: no ReLU)."""
        eq, n = eq_factor(tau), tau.shape[0]
        terms = [Term(self.one, (eq,), (target,), n)] + [Term(F.ext_neg(c), (eq,), (q,), n) for c, q in quotient]
        if sign is not None:
            scale, factor = sign
            terms += [Term(F.ext_mul(scale, c), (eq,), (factor, q), n) for c, q in quotient]
        if extra is not None:
            terms.append(Term(self.one, (eq,), (extra,), n))
        self.ch.relation(label, terms)

    def input_factor(self, t: int, tau_b, k_vars: int):
        """A_0 = X contracted over the batch at tau_b: the committed batch, or the public input."""
        if self.public_input is None:
            return Stored(self.where[f"x{t}"], "X", high=tau_b)
        x = self.public_input
        return Public(lambda: bind_high(x, tau_b), lambda sigma: mle_evaluate(x, np.concatenate([sigma[:k_vars], tau_b])))

    def forward(self, t: int) -> None:
        spec, ch = self.spec, self.ch
        B, L = spec.batch_padded, spec.num_layers
        for i in range(L):
            decomposition = spec.forward_spec(i)
            out_vars, in_vars, b_vars = log2(spec.width(i + 1)), log2(spec.width(i)), log2(B)
            tau = ch.point(f"training.t{t}.forward{i}", out_vars + b_vars)
            tau_o, tau_b = tau[:out_vars], tau[out_vars:]
            left = self.stored(t, f"A{i}", high=tau_b) if i else self.input_factor(t, tau_b, in_vars)
            self.rescaled_matmul(f"t{t}.forward{i}", left, Stored(self.where[f"w{t}"], f"W{i}", high=tau_o), in_vars,
                                 self.rebuilt(t, f"fwd{i}", decomposition), decomposition, tau)
            if i + 1 < L:
                tau = ch.point(f"training.t{t}.relu{i}", out_vars + b_vars)
                self.select(f"t{t}.relu{i}", self.stored(t, f"A{i + 1}"), self.quotient(t, f"fwd{i}", decomposition),
                            self.sign(t, f"fwd{i}", decomposition), tau)

    def output(self, t: int, public_output) -> None:
        """O = q_(L-1): equal to the public output, or G_(L-1) = O - Y (training)."""
        spec, ch = self.spec, self.ch
        i = spec.num_layers - 1
        tau = ch.point(f"training.t{t}.output", log2(spec.batch_padded * spec.width(i + 1)))
        quotient = self.quotient(t, f"fwd{i}", spec.forward_spec(i))
        if public_output is not None:
            ch.relation(f"t{t}.output", [Term(c, (eq_factor(tau),), (q,), tau.shape[0]) for c, q in quotient],
                        mle_evaluate(public_output, tau))
            return
        self.select(f"t{t}.output", self.stored(t, f"G{i}"), quotient, None, tau,
                    extra=Stored(self.where[f"x{t}"], "Y"))

    def backward(self, t: int) -> None:
        spec, ch = self.spec, self.ch
        B, L = spec.batch_padded, spec.num_layers
        b_vars = log2(B)
        for i in range(L - 2, -1, -1):  # G_A_i = G_(i+1) W_(i+1);  G_i = (1 - s_i) round(G_A_i)
            decomposition = spec.backward_spec()
            k_vars, o_vars = log2(spec.width(i + 1)), log2(spec.width(i + 2))
            tau = ch.point(f"training.t{t}.backward{i}", k_vars + b_vars)
            tau_k, tau_b = tau[:k_vars], tau[k_vars:]
            self.rescaled_matmul(f"t{t}.backward{i}", self.stored(t, f"G{i + 1}", high=tau_b),
                                 Stored(self.where[f"w{t}"], f"W{i + 1}", low=tau_k), o_vars,
                                 self.rebuilt(t, f"bwd{i}", decomposition), decomposition, tau)
            tau = ch.point(f"training.t{t}.mask{i}", k_vars + b_vars)
            self.select(f"t{t}.mask{i}", self.stored(t, f"G{i}"), self.quotient(t, f"bwd{i}", decomposition),
                        self.sign(t, f"fwd{i}", spec.forward_spec(i)), tau)

    def update(self, t: int) -> None:
        spec, ch = self.spec, self.ch
        b_vars = log2(spec.batch_padded)
        for i in range(spec.num_layers):  # G_W_i = G_i^T A_i;  W'_i = W_i - round(G_W_i / 2^k)
            decomposition = spec.update_spec()
            k_vars, o_vars = log2(spec.width(i)), log2(spec.width(i + 1))
            tau = ch.point(f"training.t{t}.gradw{i}", k_vars + o_vars)
            tau_k, tau_o = tau[:k_vars], tau[k_vars:]
            activation = self.stored(t, f"A{i}", low=tau_k) if i else Stored(self.where[f"x{t}"], "X", low=tau_k)
            self.rescaled_matmul(f"t{t}.gradw{i}", self.stored(t, f"G{i}", low=tau_o), activation, b_vars,
                                 self.rebuilt(t, f"upd{i}", decomposition), decomposition, tau)
            tau = ch.point(f"training.t{t}.update{i}", k_vars + o_vars)
            eq, n = eq_factor(tau), tau.shape[0]
            ch.relation(f"t{t}.update{i}", [
                Term(self.one, (eq,), (Stored(self.where[f"w{t + 1}"], f"W{i}"),), n),
                Term(self.minus, (eq,), (Stored(self.where[f"w{t}"], f"W{i}"),), n)]
                + [Term(c, (eq,), (q,), n) for c, q in self.quotient(t, f"upd{i}", decomposition)])

    def in_range(self, label, tensor: Stored, name: str, t: int, decomposition: Decomposition, n: int) -> None:
        """sum_e eq(tau, e) [T(e) - sum_j c_j B(e, j)] = 0: T is its own bit decomposition (range checked)."""
        tau = self.ch.point(f"training.t{t}.{label}", n)
        eq = eq_factor(tau)
        self.ch.relation(f"t{t}.{label}", [Term(self.one, (eq,), (tensor,), n)]
                         + [Term(F.ext_neg(c), (eq,), (part,), n) for c, part in self.rebuilt(t, name, decomposition)])

    def ranges(self, t: int, private_input: bool, targets: bool) -> None:
        """The step's inputs lie in their declared ranges: W_t (weight_bits), X and Y (act_bits)."""
        spec = self.spec
        B = spec.batch_padded
        for i in range(spec.num_layers):
            self.in_range(f"range.w{i}", Stored(self.where[f"w{t}"], f"W{i}"), f"rngw{i}", t, weight_range(spec),
                          log2(spec.width(i + 1) * spec.width(i)))
        if private_input:
            self.in_range("range.x", Stored(self.where[f"x{t}"], "X"), "rngx", t, data_range(spec),
                          log2(B * spec.width(0)))
        if targets:
            self.in_range("range.y", Stored(self.where[f"x{t}"], "Y"), "rngy", t, data_range(spec),
                          log2(B * spec.width(spec.num_layers)))

    def bits(self, keys) -> None:
        """Every entry of every decomposition is a bit: batched over ``keys`` with random weights."""
        ch = self.ch
        betas = ch.point("training.bits.beta", len(keys))
        terms = []
        for key, beta in zip(keys, betas):
            store = self.where[key]
            slot = ch.layouts[store].slot(key)
            n = slot.elem_vars + slot.plane_vars
            terms.append(BitTerm(beta, ch.point(f"training.bits.{key}", n), Stored(store, key)))
        ch.relation("bits", terms)


def _decomposition_keys(layouts: dict) -> list:
    """The slots holding bit planes (a plane group may be a single plane)."""
    return [s.name for layout in layouts.values() for s in layout.slots
            if s.name.split(".")[1][:3] in ("fwd", "bwd", "upd", "rng")]


def _where(statement_keys: dict, layouts: dict) -> dict:
    """Slot or statement name -> store key."""
    where = dict(statement_keys)
    for key, layout in layouts.items():
        where.update({s.name: key for s in layout.slots})
    return where


def _transcript(label, spec: TrainingSpec, mode: str, statement: list, proof_commitments) -> Transcript:
    transcript = Transcript(label)
    spec.absorb(transcript)
    transcript.absorb("training.statement", [mode] + statement + [c.to_bytes() for c in proof_commitments])
    return transcript


def _bit_check_groups(layouts: dict, mode: str) -> list:
    """Decompositions checked by one sumcheck: all of them (aggregate) or one each (layer)."""
    keys = _decomposition_keys(layouts)
    return [keys] if mode == "aggregate" else [[k] for k in keys]


def _checked(commitments: dict, layouts: dict, params, where: str) -> None:
    """Every commitment has its layout's size and the proof's code parameters (its mask rows are the prover's
    choice: they only decide whether an opening needs fresh masks)."""
    for key, layout in layouts.items():
        c = commitments.get(key)
        if not isinstance(c, HidingCommitment) or c.num_vars != layout.num_vars or \
                dataclasses.replace(c.params, mask_rows=params.mask_rows) != params:
            raise ProofRejected(f"commitment {key} does not match the statement (num_vars {layout.num_vars}, "
                                f"{params})", where)


def prove_training_steps(traces, committed: CommittedSteps, zk: bool = True, mode: str = "aggregate",
                         params: HidingParams | None = None) -> TrainingProof:
    """Prove that each committed W_(t+1) is one SGD step from W_t on batch t, for consecutive steps at once."""
    params = params_for(zk, params)
    traces = _check_chain(traces)
    if not isinstance(committed, CommittedSteps) or committed.witnesses is None or \
            len(committed.batches) != len(traces):
        raise ProofError(f"committed must be CommittedSteps with witnesses for {len(traces)} steps")
    if committed.weights[0].params != params:
        raise ProofError(f"the commitments use {committed.weights[0].params}, the proof {params}")
    spec, steps = traces[0].spec, len(traces)
    layouts = proof_layouts(spec, steps, mode, params.hiding)
    tables = {}
    for t, trace in enumerate(traces):
        tables.update(_proof_tables(trace, t, False))
    made = _commit(layouts, tables, params)
    all_layouts = {**_statement_layouts(spec, steps, params.hiding), **layouts}
    witnesses = {**committed.witnesses, **{key: pair[1] for key, pair in made.items()}}
    commitments = {key: w.commitment for key, w in witnesses.items()}
    proof_commitments = tuple(made[key][0] for key in layouts)
    transcript = _transcript(TRANSCRIPT_LABEL, spec, mode, _statement_bytes(committed), proof_commitments)
    channel = _Channel(transcript, params, all_layouts, commitments, witnesses)
    _run_training(spec, channel, steps, layouts, mode)
    channel.open_all()
    return TrainingProof(mode, proof_commitments, tuple(channel.items))


def _statement_bytes(committed: CommittedSteps) -> list:
    return [len(committed.batches)] + [c.to_bytes() for _, c, _ in committed.keyed()]


def _statement_where(steps: int) -> dict:
    where = {f"w{t}": f"w{t}" for t in range(steps + 1)}
    where.update({f"x{t}": f"b{t}" for t in range(steps)})
    return where


def _run_training(spec, channel, steps, layouts, mode) -> None:
    protocol = _Protocol(spec, channel, _where(_statement_where(steps), layouts))
    for t in range(steps):
        protocol.forward(t)
        protocol.output(t, None)
        protocol.backward(t)
        protocol.update(t)
        protocol.ranges(t, True, True)
    for keys in _bit_check_groups(layouts, mode):
        protocol.bits(keys)


def verify_training_steps(spec: TrainingSpec, committed: CommittedSteps, proof: TrainingProof) -> None:
    """Raise ProofRejected unless ``proof`` shows every committed W_(t+1) is one honest SGD step from W_t."""
    _verify_training(spec, committed, proof)


def _verify_training(spec, committed, proof) -> _Channel:
    """:func:`verify_training_steps`, returning the channel (its ``claims``: every value stated on each store)."""
    where = "training proof"
    if not isinstance(spec, TrainingSpec) or not isinstance(committed, CommittedSteps) or \
            not 1 <= len(committed.batches) == len(committed.weights) - 1:
        raise ProofRejected("expected a TrainingSpec and CommittedSteps (k + 1 weights, k batches)", where)
    if not isinstance(proof, TrainingProof) or proof.mode not in MODES:
        raise ProofRejected(f"expected a TrainingProof with mode in {MODES}", where)
    params, steps = getattr(committed.weights[0], "params", None), len(committed.batches)
    if not isinstance(params, HidingParams):
        raise ProofRejected("the weights commitment is not a HidingCommitment", where)
    layouts = proof_layouts(spec, steps, proof.mode, params.hiding)
    if len(proof.bits_commitments) != len(layouts):
        raise ProofRejected(f"{len(proof.bits_commitments)} proof commitments, expected {len(layouts)}", where)
    commitments = {key: c for key, c, _ in committed.keyed()}
    commitments.update(dict(zip(layouts, proof.bits_commitments)))
    all_layouts = {**_statement_layouts(spec, steps, params.hiding), **layouts}
    _checked(commitments, all_layouts, params, where)
    transcript = _transcript(TRANSCRIPT_LABEL, spec, proof.mode, _statement_bytes(committed), proof.bits_commitments)
    channel = _Channel(transcript, params, all_layouts, commitments, items=proof.items)
    _run_training(spec, channel, steps, layouts, proof.mode)
    channel.open_all()
    channel.finish()
    return channel


def prove_training_step(trace: TrainingTrace, committed: CommittedTensors, zk: bool = True, mode: str = "aggregate",
                        params: HidingParams | None = None) -> TrainingProof:
    """Prove that ``committed.new_weights`` is one SGD step from ``committed.weights`` on ``committed.batch``.

    ``trace`` is the prover's witness (:func:`~proofs.layers.training.training_trace`); ``committed`` must
    come from :func:`commit_step` with the same ``zk``.
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
    """Commitments for an inference proof: the weights and, when private, the input batch."""

    weights: HidingCommitment
    input: object = None
    witnesses: dict = dataclass_field(default=None, repr=False)


def commit_forward(trace: TrainingTrace, zk: bool = True, private_input: bool = True,
                   params: HidingParams | None = None) -> CommittedModel:
    """Commit to the weights and (``private_input``) the input of ``trace``."""
    params, spec = params_for(zk, params), trace.spec
    w_layout = weight_layout(spec, params.hiding)
    weights = commit_store(w_layout, _weight_tables(spec, trace.weights), params,
                           log_rows=_balanced_rows(w_layout, params))
    made = {"w0": weights}
    if private_input:
        x_layout = batch_layout(spec, params.hiding, targets=False)
        made["b0"] = commit_store(x_layout, {"X": _field(trace.x)}, params,
                                  log_rows=_balanced_rows(x_layout, params))
    return CommittedModel(weights[0], made["b0"][0] if private_input else None,
                          {key: pair[1] for key, pair in made.items()})


def forward_output(trace: TrainingTrace) -> np.ndarray:
    """The public output O (B x d_L, int64) of a forward trace."""
    spec = trace.spec
    out = trace.fwd[-1].shifted.reshape(spec.batch_padded, -1)
    return out[:spec.batch, :spec.sizes[-1]].copy()


def _forward_layouts(spec, committed: CommittedModel, hiding: bool) -> dict:
    layouts = {"w0": weight_layout(spec, hiding)}
    if committed.input is not None:
        layouts["b0"] = batch_layout(spec, hiding, targets=False)
    return layouts


def _forward_transcript(spec, committed, output, public_input, proof_commitments) -> Transcript:
    statement = [committed.weights.to_bytes(), np.asarray(output, dtype=np.int64)]
    statement.append(committed.input.to_bytes() if committed.input is not None else
                     np.asarray(public_input, dtype=np.int64))
    return _transcript(TRANSCRIPT_LABEL + ".forward", spec, "aggregate", statement, proof_commitments)


def _run_forward(spec, channel, layouts, output_table, public_input) -> None:
    where = _where({"w0": "w0", "x0": "b0"}, layouts)
    protocol = _Protocol(spec, channel, where, public_input)
    protocol.forward(0)
    protocol.output(0, output_table)
    protocol.ranges(0, public_input is None, False)
    for keys in _bit_check_groups(layouts, "aggregate"):
        protocol.bits(keys)


def prove_forward(trace: TrainingTrace, committed: CommittedModel, zk: bool = True,
                  params: HidingParams | None = None) -> TrainingProof:
    """Prove O = model(X) for committed (hidden, with ``zk``) weights and a committed or public input X;
    only O is public."""
    params = params_for(zk, params)
    if not isinstance(trace, TrainingTrace) or not isinstance(committed, CommittedModel) or \
            committed.witnesses is None:
        raise ProofError("prove_forward needs a TrainingTrace and a CommittedModel with witnesses")
    spec, private = trace.spec, committed.input is not None
    layouts = proof_layouts(spec, 1, "aggregate", params.hiding, forward_only=True, private_input=private)
    made = _commit(layouts, _proof_tables(trace, 0, True, private), params)
    proof_commitments = tuple(made[key][0] for key in layouts)
    public_input = None if committed.input is not None else trace.x[:spec.batch, :spec.sizes[0]]
    output = forward_output(trace)
    transcript = _forward_transcript(spec, committed, output, public_input, proof_commitments)
    witnesses = {**committed.witnesses, **{key: pair[1] for key, pair in made.items()}}
    all_layouts = {**_forward_layouts(spec, committed, params.hiding), **layouts}
    channel = _Channel(transcript, params, all_layouts, {k: w.commitment for k, w in witnesses.items()}, witnesses)
    _run_forward(spec, channel, layouts, _output_table(spec, output),
                 None if public_input is None else _field(trace.x))
    channel.open_all()
    return TrainingProof("aggregate", proof_commitments, tuple(channel.items))


def _output_table(spec: TrainingSpec, output) -> np.ndarray:
    return _field(pad_matrix(output, spec.batch_padded, spec.width(spec.num_layers)))


def verify_forward(spec: TrainingSpec, committed: CommittedModel, output, proof: TrainingProof,
                   public_input=None) -> None:
    """Raise ProofRejected unless ``proof`` shows ``output`` = model(input) for the committed weights and the
    committed input (or ``public_input`` when the input was not committed)."""
    _verify_forward(spec, committed, output, proof, public_input)


def _verify_forward(spec, committed, output, proof, public_input) -> _Channel:
    where = "forward proof"
    if not isinstance(spec, TrainingSpec) or not isinstance(committed, CommittedModel) or \
            not isinstance(proof, TrainingProof) or proof.mode != "aggregate":
        raise ProofRejected("expected a TrainingSpec, a CommittedModel and an aggregated TrainingProof", where)
    if (committed.input is None) == (public_input is None):
        raise ProofRejected("give exactly one of a committed input and a public input", where)
    output = np.asarray(output)
    if output.shape != (spec.batch, spec.sizes[-1]) or output.dtype.kind not in "iu":
        raise ProofRejected(f"output of shape {output.shape}, expected integers {(spec.batch, spec.sizes[-1])}", where)
    x_table = None
    if public_input is not None:
        public_input = np.asarray(public_input)
        if public_input.shape != (spec.batch, spec.sizes[0]) or public_input.dtype.kind not in "iu":
            raise ProofRejected(f"public input of shape {public_input.shape}, expected {(spec.batch, spec.sizes[0])}",
                                where)
        limit = 1 << (spec.act_bits - 1)
        if public_input.size and (public_input.min() < -limit or public_input.max() >= limit):
            raise ProofRejected(f"public input outside [-{limit}, {limit}) (act_bits={spec.act_bits})", where)
        x_table = _field(pad_matrix(public_input, spec.batch_padded, spec.width(0)))
    params = getattr(committed.weights, "params", None)
    if not isinstance(params, HidingParams):
        raise ProofRejected("the weights commitment is not a HidingCommitment", where)
    layouts = proof_layouts(spec, 1, "aggregate", params.hiding, forward_only=True,
                            private_input=committed.input is not None)
    if len(proof.bits_commitments) != len(layouts):
        raise ProofRejected(f"{len(proof.bits_commitments)} proof commitments, expected {len(layouts)}", where)
    commitments = {"w0": committed.weights, **dict(zip(layouts, proof.bits_commitments))}
    if committed.input is not None:
        commitments["b0"] = committed.input
    all_layouts = {**_forward_layouts(spec, committed, params.hiding), **layouts}
    _checked(commitments, all_layouts, params, where)
    transcript = _forward_transcript(spec, committed, output, public_input, proof.bits_commitments)
    channel = _Channel(transcript, params, all_layouts, commitments, items=proof.items)
    _run_forward(spec, channel, layouts, _output_table(spec, output), x_table)
    channel.open_all()
    channel.finish()
    return channel
