"""Zero-knowledge proofs of SGD training steps and of inference, as relations between masked stores.

The integer model is :mod:`proofs.layers.training`'s (zkDL, Sun-Li-Zhang, sections 3-4): per layer i,
Z_i = A_i W_i^T rescaled by bit decomposition (:mod:`proofs.layers.requant`) into z'_i with sign bits s_i,
A_(i+1) = (1 - s_i) z'_i, O = z'_(L-1); backward G_(L-1) = O - Y, G_A_i = G_(i+1) W_(i+1) rescaled into
g_i, G_i = (1 - s_i) g_i (the forward sign bits); update G_W_i = G_i^T A_i rescaled into U_i, W'_i = W_i - U_i.

**What is committed.** The statement: W_t for each step boundary and each batch (X, Y), or for inference
W and (optionally) X, each as a reusable commitment (:mod:`proofs.layers.reusable`: ``max_proofs`` hiding
copies and one proof that they agree; a proof names its copy and uses it alone, so any number of proofs up
to ``max_proofs`` against one commitment stay zero knowledge; the prover refuses more). The proof first commits, in masked stores (:mod:`proofs.relations`), every
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
import functools
import math
from dataclasses import dataclass, field as dataclass_field

import numpy as np

from .. import field as F
from ..errors import ProofError, ProofRejected
from ..pcs.scheme import HIDING_LIGERO
from ..verdict import Verdict, rejecting
from ..public_values import require_within
from ..transcript import Transcript
from ..zk import HidingCommitment, HidingParams, mask_entries, mask_params, masks_shape, opening_field_error
from .common import pad_matrix
from .step_relations import Channel, Protocol, ShapeChannel, bit_check_groups, locate
from .proof_items import TrainingProof
from .reusable import (DEFAULT_MAX_PROOFS, DEFAULT_STEP_PROOFS, Reusable, agreement_shapes, base_params,
                       commit_reusable, copy_params, verify_reusable)
from .step_stores import (MODES, balanced_rows, batch_layout, commit_stores, decomposition_keys, params_for,
                          proof_layouts, proof_tables, statement_layouts, weight_layout, weight_tables)
from .training import TrainingSpec, TrainingTrace, check_chain, flat_field, validate_spec

TRANSCRIPT_LABEL = "hezk.proofs.training.v2"


# ------------------------------------------------------------------------------------------- statement
@dataclass(frozen=True, eq=False)
class CommittedSteps:
    """k consecutive steps: commitments to W_0..W_k (W_(t+1) is step t's W') and to each step's batch (X, Y),
    each a :class:`~proofs.layers.reusable.Reusable` (``max_proofs`` hiding copies).

    ``witnesses`` (prover only) maps "w<t>" and "b<t>" to the ReusableWitness of each."""

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

    weights: Reusable
    new_weights: Reusable
    batch: Reusable
    witnesses: dict = dataclass_field(default=None, repr=False)


def as_steps(committed: CommittedTensors) -> CommittedSteps:
    witnesses = None if committed.witnesses is None else {
        "w0": committed.witnesses["weights"], "w1": committed.witnesses["new_weights"],
        "b0": committed.witnesses["batch"]}
    return CommittedSteps((committed.weights, committed.new_weights), (committed.batch,), witnesses)


def validate_statement(spec, committed, where: str):
    """The ONE parse of a training or inference statement, run first by every verifier (:func:`verify_forward`,
    :func:`verify_training_steps`, :func:`verify_training_step`, :func:`proofs.layers.step_basefold.verify_step`):
    the spec by :func:`~proofs.layers.training.validate_spec` (every field within its bound, the worst cases
    within (p - 1) / 2, the tables' sizes bounded, before anything is allocated), and ``committed`` one of the
    statement classes (CommittedTensors is read as one step of CommittedSteps: k + 1 weights for k >= 1
    batches). Returns (the validated spec, the statement as CommittedSteps or CommittedModel); the commitments'
    shapes are then checked against the spec's layouts (:func:`~proofs.layers.reusable.verify_reusable`)."""
    spec = validate_spec(spec, where)
    if isinstance(committed, CommittedTensors):  # the verifier's view: no witnesses
        committed = CommittedSteps((committed.weights, committed.new_weights), (committed.batch,))
    if isinstance(committed, CommittedSteps):
        if not all(isinstance(part, (tuple, list)) for part in (committed.weights, committed.batches)) or \
                not 1 <= len(committed.batches) == len(committed.weights) - 1:
            raise ProofRejected("CommittedSteps must hold k + 1 weights and k >= 1 batches", where)
    elif not isinstance(committed, CommittedModel):
        raise ProofRejected(f"committed is a {type(committed).__name__}, expected CommittedSteps, CommittedTensors "
                            "or CommittedModel", where)
    return spec, committed


def _commit_statement(layouts: dict, tables: dict, params: HidingParams, max_proofs: int, seed=None) -> dict:
    """Key -> (Reusable, ReusableWitness): every statement store as ``max_proofs`` hiding copies."""
    return {key: commit_reusable(layout, {s.name: tables[f"{key}.{s.name}"] for s in layout.slots}, params,
                                 max_proofs, balanced_rows(layout, params), seed=None if seed is None else seed + k)
            for k, (key, layout) in enumerate(layouts.items())}


def _take_copy(statement: dict, params: HidingParams, where: str):
    """The prover's copy of every statement store for one proof -> (copy, witnesses by key, prior views)."""
    copy = 0
    if params.hiding:
        first, *rest = statement.values()
        copy = first.take(where)
        for witness in rest:
            witness.spent.append(copy)
    return copy, {key: w.witnesses[copy] for key, w in statement.items()}, \
        {key: w.agreement_views[copy] for key, w in statement.items()}


def _statement_copies(statement: dict, layouts: dict, copy: int, where: str):
    """The verifier's side of :func:`_take_copy`: the statement's proof parameters (those of its copies, one
    opening each) and the commitments of copy ``copy`` of every store, each store's agreement proof checked."""
    reusables = list(statement.values())
    if not all(isinstance(r, Reusable) and r.copies and HIDING_LIGERO.is_commitment(r.copies[0]) for r in reusables):
        raise ProofRejected("the statement's commitments are not Reusable hiding commitments", where)
    if len({len(r) for r in reusables}) != 1 or not 0 <= copy < len(reusables[0]):
        raise ProofRejected(f"copy {copy} of statement commitments with {[len(r) for r in reusables]} copies", where)
    params = base_params(reusables[0])
    for key, reusable in statement.items():
        verify_reusable(layouts[key], reusable, params, f"{where}: {key} commitment")
    return params, {key: r.copies[copy] for key, r in statement.items()}


def commit_steps(traces, zk: bool = True, params: HidingParams | None = None, seed=None,
                 max_proofs: int = DEFAULT_STEP_PROOFS) -> CommittedSteps:
    """Commit to W_0..W_k and the k batches of consecutive steps (``traces[t + 1].weights`` = ``traces[t]``'s W'),
    for up to ``max_proofs`` zero-knowledge proofs (:mod:`proofs.layers.reusable`)."""
    params = params_for(zk, params)
    traces = check_chain(traces)
    spec = traces[0].spec
    tables = {f"w0.{name}": table for name, table in weight_tables(spec, traces[0].weights).items()}
    for t, trace in enumerate(traces):
        tables.update({f"w{t + 1}.{name}": table for name, table in weight_tables(spec, trace.new_weights).items()})
        tables.update({f"b{t}.X": flat_field(trace.x), f"b{t}.Y": flat_field(trace.y)})
    made = _commit_statement(statement_layouts(spec, len(traces), params.hiding), tables, params, max_proofs, seed)
    return CommittedSteps(tuple(made[f"w{t}"][0] for t in range(len(traces) + 1)),
                          tuple(made[f"b{t}"][0] for t in range(len(traces))),
                          {key: pair[1] for key, pair in made.items()})


def commit_step(trace: TrainingTrace, zk: bool = True, params: HidingParams | None = None,
                seed=None, max_proofs: int = DEFAULT_STEP_PROOFS) -> CommittedTensors:
    """Commit to W, W' and the batch of ``trace`` (what the verifier receives), for ``max_proofs`` proofs."""
    steps = commit_steps([trace], zk, params, seed, max_proofs)
    return CommittedTensors(steps.weights[0], steps.weights[1], steps.batches[0],
                            {"weights": steps.witnesses["w0"], "new_weights": steps.witnesses["w1"],
                             "batch": steps.witnesses["b0"]})


# ------------------------------------------------------------------------------------------- the proof
def soundness_bits(spec: TrainingSpec, steps: int = 1, mode: str = "aggregate", zk: bool = True,
                   params: HidingParams | None = None, forward_only: bool = False,
                   max_proofs: int | None = None) -> float:
    """-log2 of a training (or inference) proof's soundness error per attempt (:func:`union_bound_error`).

    Per attempt: a prover who grinds 2^k Fiat-Shamir transcripts succeeds w.p. about 2^(k - bits).
    ``max_proofs``: the statement's commitments were made for that many proofs (default: as
    :func:`commit_forward` / :func:`commit_steps` do), so its copies are opened twice (:mod:`.reusable`)."""
    params = params_for(zk, params)
    layouts = proof_layouts(spec, steps, mode, params.hiding, forward_only)
    statement = _forward_layouts(spec, CommittedModel(None, True), params.hiding) if forward_only else \
        statement_layouts(spec, steps, params.hiding)
    all_layouts = {**statement, **layouts}
    channel = ShapeChannel(params, all_layouts)
    if forward_only:
        outputs = np.zeros(spec.batch_padded * spec.width(spec.num_layers), dtype=np.uint64)  # shapes only
        _run_forward(spec, channel, layouts, outputs, None)
    else:
        run_training(spec, channel, steps, layouts, mode)
    if max_proofs is None:
        max_proofs = DEFAULT_MAX_PROOFS if forward_only else DEFAULT_STEP_PROOFS
    copies = copy_params(params, max_proofs)
    agreements = 0.0  # each statement commitment's agreement proof, checked once, relied on by every proof
    for layout in statement.values():
        shapes, stores, weights = agreement_shapes(layout, max_proofs, params)
        agreements += union_bound_error(shapes, weights, stores, params, {key: copies for key in stores})
    return -math.log2(agreements + union_bound_error(channel.shapes, len(decomposition_keys(layouts)), all_layouts,
                                                     params, {key: copies for key in statement},
                                                     hosted_masks=True))


@functools.lru_cache(maxsize=32)
def _forward_shapes(spec: TrainingSpec, private_input: bool, hiding: bool) -> tuple:
    """Every relation's (variables, degree) of an inference proof (a committed or a public input), from the
    public shapes alone (one dry run), as :func:`_training_shapes`."""
    layouts = proof_layouts(spec, 1, "aggregate", hiding, forward_only=True, private_input=private_input)
    statement = _forward_layouts(spec, CommittedModel(None, True if private_input else None), hiding)
    channel = ShapeChannel(params_for(hiding), {**statement, **layouts})
    outputs = np.zeros(spec.batch_padded * spec.width(spec.num_layers), dtype=np.uint64)  # shapes only
    public = None if private_input else np.zeros(spec.batch_padded * spec.width(0), dtype=np.uint64)
    _run_forward(spec, channel, layouts, outputs, public)
    return tuple(channel.shapes)


@functools.lru_cache(maxsize=32)
def _training_shapes(spec: TrainingSpec, steps: int, mode: str, hiding: bool) -> tuple:
    """Every relation's (variables, degree) of a training proof, from the public shapes alone (one dry run):
    the relations' masks are committed before the first relation (:class:`Channel` ``mask_shapes``)."""
    layouts = proof_layouts(spec, steps, mode, hiding)
    channel = ShapeChannel(params_for(hiding), {**statement_layouts(spec, steps, hiding), **layouts})
    run_training(spec, channel, steps, layouts, mode)
    return tuple(channel.shapes)


def union_bound_error(shapes, bit_weights: int, layouts: dict, params: HidingParams,
                      store_params: dict | None = None, hosted_masks: bool = False) -> float:
    """The soundness error of a relation proof, a union bound over every check the verifier relies on
    (|F| = p^4): per relation sumcheck of n variables and degree d, its zero check's random point n / |F|,
    the rounds n d / |F|, and with zero knowledge the mask's batching 1 / |F| and the opening of its mask
    commitment 2^-(its bits) + its combinations (:func:`proofs.zk.opening_field_error`); the bit check's
    ``bit_weights`` batching weights 1 / |F| each; per store opening the query error 2^-(security bits) plus
    :func:`proofs.zk.opening_field_error` (proximity, value and reduction combinations); ``store_params``
    (key -> params) for stores committed otherwise; ``hosted_masks``: every relation's mask in one commitment
    (:func:`proofs.zk.commit_masks`), so one mask opening instead of one per relation."""
    field = float(F.P) ** F.EXT_DEGREE
    error = bit_weights / field
    for n, d in shapes:
        error += (n * d + n) / field
        if params.hiding:
            error += 1 / field
            if not hosted_masks:
                mask = zk_mask_shape(n, d, params)
                error += 2.0 ** -mask.security_bits + opening_field_error(mask)
    if params.hiding and hosted_masks and shapes:
        mask = masks_shape(shapes, params)
        error += 2.0 ** -mask.security_bits + opening_field_error(mask)
    for key, layout in layouts.items():
        shape = HidingCommitment(b"", layout.num_vars, balanced_rows(layout, params),
                                 (store_params or {}).get(key, params))
        error += 2.0 ** -shape.security_bits + opening_field_error(shape)
    return error


def zk_mask_shape(num_vars: int, degree: int, params: HidingParams) -> HidingCommitment:
    """The shape of a zero-knowledge sumcheck's own mask commitment (:func:`proofs.zk.commit_mask`: one row of
    num_vars blocks of 2^bitlen(degree) F_p4 coefficients, the mask rows of its one-piece opening)."""
    width = mask_entries(num_vars, degree)
    return HidingCommitment(b"", (width - 1).bit_length(), 0, mask_params(params))


def step_transcript(label, spec: TrainingSpec, mode: str, statement: list, proof_commitments) -> Transcript:
    transcript = Transcript(label)
    spec.absorb(transcript)
    transcript.absorb("training.statement", [mode] + statement + [c.to_bytes() for c in proof_commitments])
    return transcript


def _checked(commitments: dict, layouts: dict, params, where: str) -> None:
    """Every commitment has its layout's size and the proof's code parameters (its mask rows are the prover's
    choice: they only decide whether an opening needs fresh masks)."""
    for key, layout in layouts.items():
        c = commitments.get(key)
        if not HIDING_LIGERO.is_commitment(c) or c.num_vars != layout.num_vars or \
                dataclasses.replace(c.params, mask_rows=params.mask_rows, openings=params.openings) != params:
            raise ProofRejected(f"commitment {key} does not match the statement (num_vars {layout.num_vars}, "
                                f"{params})", where)


def prove_training_steps(traces, committed: CommittedSteps, zk: bool = True, mode: str = "aggregate",
                         params: HidingParams | None = None) -> TrainingProof:
    """Prove that each committed W_(t+1) is one SGD step from W_t on batch t, for consecutive steps at once."""
    params = params_for(zk, params)
    traces = check_chain(traces)
    if not isinstance(committed, CommittedSteps) or committed.witnesses is None or \
            len(committed.batches) != len(traces):
        raise ProofError(f"committed must be CommittedSteps with witnesses for {len(traces)} steps")
    _check_params(committed.weights[0], params)
    spec, steps = traces[0].spec, len(traces)
    layouts = proof_layouts(spec, steps, mode, params.hiding)
    tables = {}
    for t, trace in enumerate(traces):
        tables.update(proof_tables(trace, t, False))
    copy, statement, prior = _take_copy(committed.witnesses, params, "prove_training_steps")
    made = commit_stores(layouts, tables, params)
    all_layouts = {**statement_layouts(spec, steps, params.hiding), **layouts}
    witnesses = {**statement, **{key: pair[1] for key, pair in made.items()}}
    commitments = {key: w.commitment for key, w in witnesses.items()}
    proof_commitments = tuple(made[key][0] for key in layouts)
    transcript = step_transcript(TRANSCRIPT_LABEL, spec, mode, statement_bytes(committed, copy), proof_commitments)
    channel = Channel(transcript, params, all_layouts, commitments, witnesses,
                      mask_shapes=_training_shapes(spec, steps, mode, params.hiding))
    channel.prior_views = prior
    run_training(spec, channel, steps, layouts, mode)
    channel.open_all()
    return TrainingProof(mode, proof_commitments, tuple(channel.items), copy)


def _check_params(reusable: Reusable, params: HidingParams) -> None:
    """The statement was committed with the proof's parameters (its copies may carry two openings' tails)."""
    found = base_params(reusable)
    if found != params:
        raise ProofError(f"the commitments use {found}, the proof {params}")


def statement_bytes(committed: CommittedSteps, copy: int) -> list:
    return [len(committed.batches), copy] + [c.digest() for _, c, _ in committed.keyed()]


def _statement_where(steps: int) -> dict:
    where = {f"w{t}": f"w{t}" for t in range(steps + 1)}
    where.update({f"x{t}": f"b{t}" for t in range(steps)})
    return where


def run_training(spec, channel, steps, layouts, mode) -> None:
    protocol = Protocol(spec, channel, locate(_statement_where(steps), layouts))
    for t in range(steps):
        protocol.forward(t)
        protocol.output(t, None)
        protocol.backward(t)
        protocol.update(t)
        protocol.ranges(t, True, True)
    for keys in bit_check_groups(layouts, mode):
        protocol.bits(keys)


#: the proof kinds named by the verdicts and rejections of :func:`verify_training_steps` and :func:`verify_forward`
TRAINING_KIND, FORWARD_KIND = "training", "forward"


def _verdict(kind: str, output, spec, committed_weights, channel, steps: int, mode: str, forward_only: bool):
    """The Verdict of an accepted proof: its soundness (:func:`soundness_bits`) at the statement's parameters."""
    params = channel.params
    return Verdict.measured(kind, output, soundness_bits, validate_spec(spec, kind), steps, mode, params.hiding,
                            params, forward_only, len(committed_weights))


def verify_training_steps(spec: TrainingSpec, committed: CommittedSteps, proof: TrainingProof) -> Verdict:
    """A truthy :class:`~proofs.verdict.Verdict` (``output`` None, ``soundness_bits``) if ``proof`` shows every
    committed W_(t+1) is one honest SGD step from W_t; else ProofRejected ("training proof / ...")."""
    with rejecting(TRAINING_KIND):
        channel = _verify_training(spec, committed, proof)
        steps = as_steps(committed) if isinstance(committed, CommittedTensors) else committed
        return _verdict(TRAINING_KIND, None, spec, steps.weights[0], channel, len(steps.batches), proof.mode, False)


def _verify_training(spec, committed, proof) -> Channel:
    """:func:`verify_training_steps`, returning the channel (its ``claims``: every value stated on each store)."""
    where = "training proof"
    spec, committed = validate_statement(spec, committed, where)
    if not isinstance(committed, CommittedSteps):
        raise ProofRejected("expected CommittedSteps (k + 1 weights, k batches)", where)
    if not isinstance(proof, TrainingProof) or proof.mode not in MODES:
        raise ProofRejected(f"expected a TrainingProof with mode in {MODES}", where)
    steps = len(committed.batches)
    statement = {key: c for key, c, _ in committed.keyed()}
    hiding = getattr(getattr(committed.weights[0], "params", None), "hiding", None)
    if hiding is None:
        raise ProofRejected("the weights commitment is not a Reusable hiding commitment", where)
    statement_layouts_ = statement_layouts(spec, steps, bool(hiding))
    params, commitments = _statement_copies(statement, statement_layouts_, proof.copy, where)
    layouts = proof_layouts(spec, steps, proof.mode, params.hiding)
    if len(proof.commitments) != len(layouts):
        raise ProofRejected(f"{len(proof.commitments)} proof commitments, expected {len(layouts)}", where)
    commitments.update(dict(zip(layouts, proof.commitments)))
    all_layouts = {**statement_layouts_, **layouts}
    _checked(commitments, layouts, params, where)  # the statement's copies: verify_reusable
    transcript = step_transcript(TRANSCRIPT_LABEL, spec, proof.mode, statement_bytes(committed, proof.copy),
                             proof.commitments)
    channel = Channel(transcript, params, all_layouts, commitments, items=proof.items,
                      mask_shapes=_training_shapes(spec, steps, proof.mode, params.hiding))
    run_training(spec, channel, steps, layouts, proof.mode)
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
    return prove_training_steps([trace], as_steps(committed), zk, mode, params)


def verify_training_step(spec: TrainingSpec, committed: CommittedTensors, proof: TrainingProof) -> Verdict:
    """A truthy :class:`~proofs.verdict.Verdict` if ``proof`` shows W' (committed) is one honest SGD step from W on
    the batch; else ProofRejected ("training proof / ...")."""
    if not isinstance(committed, CommittedTensors):
        raise ProofRejected("expected CommittedTensors", f"{TRAINING_KIND} proof")
    return verify_training_steps(spec, committed, proof)


# ------------------------------------------------------------------------------ forward pass alone
@dataclass(frozen=True, eq=False)
class CommittedModel:
    """Commitments for inference proofs: the weights and, when private, the input batch, each a
    :class:`~proofs.layers.reusable.Reusable` (``max_proofs`` hiding copies and their agreement proof, so that
    up to that many zero-knowledge proofs can use them). ``witnesses`` (prover only): key -> ReusableWitness."""

    weights: Reusable
    input: object = None
    witnesses: dict = dataclass_field(default=None, repr=False)

    @property
    def max_proofs(self) -> int:
        return len(self.weights)

    def proofs_left(self) -> int:
        """Copies not yet used by a proof (prover side)."""
        if self.witnesses is None:
            raise ProofError("proofs_left needs the prover's CommittedModel (with witnesses)")
        return len(self.weights) - len(self.witnesses["w0"].spent)


def commit_forward(trace: TrainingTrace, zk: bool = True, private_input: bool = True,
                   params: HidingParams | None = None, max_proofs: int = DEFAULT_MAX_PROOFS) -> CommittedModel:
    """Commit to the weights and (``private_input``) the input of ``trace``, for up to ``max_proofs``
    zero-knowledge proofs (each uses fresh hiding copies: :mod:`proofs.layers.reusable`; without ``zk`` one
    plain commitment serves any number of proofs)."""
    params, spec = params_for(zk, params), trace.spec
    stores = {"w0": (weight_layout(spec, params.hiding), weight_tables(spec, trace.weights))}
    if private_input:
        stores["b0"] = (batch_layout(spec, params.hiding, targets=False), {"X": flat_field(trace.x)})
    made = _commit_statement({key: layout for key, (layout, _) in stores.items()},
                             {f"{key}.{name}": t for key, (_, tables) in stores.items() for name, t in tables.items()},
                             params, max_proofs)
    return CommittedModel(made["w0"][0], made["b0"][0] if private_input else None,
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


def _forward_transcript(spec, committed, output, public_input, proof_commitments, copy: int) -> Transcript:
    statement = [committed.weights.digest(), copy, np.asarray(output, dtype=np.int64)]
    statement.append(committed.input.digest() if committed.input is not None else
                     np.asarray(public_input, dtype=np.int64))
    return step_transcript(TRANSCRIPT_LABEL + ".forward", spec, "aggregate", statement, proof_commitments)


def _run_forward(spec, channel, layouts, output_table, public_input) -> None:
    where = locate({"w0": "w0", "x0": "b0"}, layouts)
    protocol = Protocol(spec, channel, where, public_input)
    protocol.forward(0)
    protocol.output(0, output_table)
    protocol.ranges(0, public_input is None, False)
    for keys in bit_check_groups(layouts, "aggregate"):
        protocol.bits(keys)


def prove_forward(trace: TrainingTrace, committed: CommittedModel, zk: bool = True,
                  params: HidingParams | None = None) -> TrainingProof:
    """Prove O = model(X) for committed (hidden, with ``zk``) weights and a committed or public input X;
    only O is public."""
    params = params_for(zk, params)
    if not isinstance(trace, TrainingTrace) or not isinstance(committed, CommittedModel) or \
            committed.witnesses is None:
        raise ProofError("prove_forward needs a TrainingTrace and a CommittedModel with witnesses")
    _check_params(committed.weights, params)
    spec, private = trace.spec, committed.input is not None
    layouts = proof_layouts(spec, 1, "aggregate", params.hiding, forward_only=True, private_input=private)
    copy, statement, prior = _take_copy(committed.witnesses, params, "prove_forward")
    made = commit_stores(layouts, proof_tables(trace, 0, True, private), params)
    proof_commitments = tuple(made[key][0] for key in layouts)
    public_input = None if committed.input is not None else trace.x[:spec.batch, :spec.sizes[0]]
    output = forward_output(trace)
    transcript = _forward_transcript(spec, committed, output, public_input, proof_commitments, copy)
    witnesses = {**statement, **{key: pair[1] for key, pair in made.items()}}
    all_layouts = {**_forward_layouts(spec, committed, params.hiding), **layouts}
    channel = Channel(transcript, params, all_layouts, {k: w.commitment for k, w in witnesses.items()}, witnesses,
                      mask_shapes=_forward_shapes(spec, private, params.hiding))
    channel.prior_views = prior
    _run_forward(spec, channel, layouts, _output_table(spec, output),
                 None if public_input is None else flat_field(trace.x))
    channel.open_all()
    return TrainingProof("aggregate", proof_commitments, tuple(channel.items), copy)


def _output_table(spec: TrainingSpec, output) -> np.ndarray:
    return flat_field(pad_matrix(output, spec.batch_padded, spec.width(spec.num_layers)))


def verify_forward(spec: TrainingSpec, committed: CommittedModel, output, proof: TrainingProof,
                   public_input=None) -> Verdict:
    """A truthy :class:`~proofs.verdict.Verdict` (``output``: the proven output, int64) if ``proof`` shows
    ``output`` = model(input) for the committed weights and the committed input (or ``public_input`` when the
    input was not committed); else ProofRejected ("forward proof / ...")."""
    with rejecting(FORWARD_KIND):
        channel = _verify_forward(spec, committed, output, proof, public_input)
        return _verdict(FORWARD_KIND, np.array(output, dtype=np.int64), spec, committed.weights, channel, 1,
                        "aggregate", True)


def _verify_forward(spec, committed, output, proof, public_input) -> Channel:
    where = "forward proof"
    spec, committed = validate_statement(spec, committed, where)
    if not isinstance(committed, CommittedModel) or not isinstance(proof, TrainingProof) or proof.mode != "aggregate":
        raise ProofRejected("expected a CommittedModel and an aggregated TrainingProof", where)
    if (committed.input is None) == (public_input is None):
        raise ProofRejected("give exactly one of a committed input and a public input", where)
    # the output is the last layer's requantized z' (act_bits signed bits, no ReLU), the input act_bits signed
    # bits: values outside would be read mod p (y and y + p one residue)
    limit = 1 << (spec.act_bits - 1)
    output = require_within(output, -limit, limit - 1, f"output (act_bits={spec.act_bits})", where,
                            shape=(spec.batch, spec.sizes[-1]))
    x_table = None
    if public_input is not None:
        public_input = require_within(public_input, -limit, limit - 1, f"public input (act_bits={spec.act_bits})",
                                      where, shape=(spec.batch, spec.sizes[0]))
        x_table = flat_field(pad_matrix(public_input, spec.batch_padded, spec.width(0)))
    statement = {"w0": committed.weights} if committed.input is None else \
        {"w0": committed.weights, "b0": committed.input}
    hiding = getattr(getattr(committed.weights, "params", None), "hiding", None)
    if hiding is None:
        raise ProofRejected("the weights commitment is not a Reusable hiding commitment", where)
    statement_layouts_ = _forward_layouts(spec, committed, bool(hiding))
    params, commitments = _statement_copies(statement, statement_layouts_, proof.copy, where)
    layouts = proof_layouts(spec, 1, "aggregate", params.hiding, forward_only=True,
                            private_input=committed.input is not None)
    if len(proof.commitments) != len(layouts):
        raise ProofRejected(f"{len(proof.commitments)} proof commitments, expected {len(layouts)}", where)
    commitments.update(dict(zip(layouts, proof.commitments)))
    all_layouts = {**statement_layouts_, **layouts}
    _checked(commitments, layouts, params, where)  # the statement's copies: verify_reusable
    transcript = _forward_transcript(spec, committed, output, public_input, proof.commitments, proof.copy)
    channel = Channel(transcript, params, all_layouts, commitments, items=proof.items,
                      mask_shapes=_forward_shapes(spec, committed.input is not None, params.hiding))
    _run_forward(spec, channel, layouts, _output_table(spec, output), x_table)
    channel.open_all()
    channel.finish()
    return channel
