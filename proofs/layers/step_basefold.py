"""Zero-knowledge training-step proofs over hiding Basefold stores: the relations of
:mod:`proofs.layers.step_proof` (forward, output, backward, update, ranges, bit checks), run through a
:class:`~proofs.layers.basefold_channel.BasefoldChannel`, so the statement's copies (W, W', the batch), the
proof stores and every sumcheck mask open in ONE batched opening (instead of one hiding Ligero opening per store
and per mask). The statement is committed by :func:`commit_step` (``max_proofs`` hiding Basefold copies of each
tensor store with their agreement proofs, :mod:`proofs.layers.reusable`); the first proof store hosts the
relations' masks (their shapes are public: a shape-only run of the relations).
"""
from __future__ import annotations

import functools
import math

from .. import basefold as B
from .. import basefold_zk as BZ
from .. import field as F
from ..errors import ProofError, ProofRejected
from ..pcs.scheme import HIDING_BASEFOLD, scheme_of
from ..verdict import Verdict, rejecting
from ..zk import HidingParams
from .basefold_channel import BasefoldChannel, StorePlan, commit_hosted, unused_end
from .network_zk import basefold_agreement_error
from .proof_items import TrainingProof
from .reusable import Reusable, base_params, commit_reusable, verify_reusable
from .step_proof import (TRAINING_KIND, TRANSCRIPT_LABEL, CommittedTensors, as_steps, run_training,
                         statement_bytes, step_transcript, validate_statement)
from .step_relations import ShapeChannel
from .step_stores import decomposition_keys, proof_layouts, proof_tables, statement_layouts, weight_tables
from .training import TrainingTrace, flat_field

MODE = "aggregate"


def training_params() -> BZ.HidingBasefoldParams:
    """The hiding Basefold parameters of a training-step proof: the "tail" layout (one random slot, S_0's tail in
    the store's unused end, one small mask table per batch: 2-4x instead of the slot layout's 16-32x,
    :mod:`proofs.basefold_zk`), rate 1/2 (251 proven queries), leaves of 2^3 values, folding to 2^10, rows of
    <= 2^18 symbols. Measured on the 784->128->10 step at batch 64 (proof, prove CPU s, proven bits of the whole
    proof, one statement copy): rows 2^18 817 KB, 3.1 s, 100.7 (702 KiB, 4.0-4.7 s, 100.9 before the mask table
    got its own batch and the tables' opening lost its claim reduction); rows 2^17 1.95 MB (twice the rows per
    query), 100.3; rows 2^19 709 KiB but 99.2 bits (the batch's proven field error, N / |F_p4| per fold of
    codewords up to 2^24 symbols, grows with the rows' length; 2^20 falls under the verifier's 100 bits). The
    field error also grows with the statement: the 8-layer 1.08M-parameter step gives 99.6 bits at rows 2^18, which
    :func:`prove_step` refuses before proving (rows 2^17 give 100.7 bits but 11 MB: Ligero's proof is smaller)."""
    return BZ.HidingBasefoldParams(B.BasefoldParams(rate_inv=2, arity=3, final_vars=10, max_log_codeword=18), 1,
                                   "tail")


def commit_step(trace: TrainingTrace, params: BZ.HidingBasefoldParams, max_proofs: int = 1,
                seed=None) -> CommittedTensors:
    """Hiding Basefold commitments to W, W' and the batch of ``trace`` (``max_proofs`` copies each)."""
    if scheme_of(params, error=None) is not HIDING_BASEFOLD:
        raise ProofError(f"params must be HidingBasefoldParams, got {type(params).__name__}")
    spec = trace.spec
    tables = {f"w0.{name}": table for name, table in weight_tables(spec, trace.weights).items()}
    tables.update({f"w1.{name}": table for name, table in weight_tables(spec, trace.new_weights).items()})
    tables.update({"b0.X": flat_field(trace.x), "b0.Y": flat_field(trace.y)})
    made = {key: commit_reusable(layout, {s.name: tables[f"{key}.{s.name}"] for s in layout.slots}, params,
                                 max_proofs, None, seed=None if seed is None else seed + k)
            for k, (key, layout) in enumerate(statement_layouts(spec, 1, True).items())}
    return CommittedTensors(made["w0"][0], made["w1"][0], made["b0"][0],
                            {"weights": made["w0"][1], "new_weights": made["w1"][1], "batch": made["b0"][1]})


@functools.lru_cache(maxsize=8)
def _structure(spec, params=None):
    """(statement layouts, proof layouts, plans, host): the proof store with the most room left hosts every
    relation's mask; in the tail layout each full proof store keeps room for its tail (no second half)."""
    statement = statement_layouts(spec, 1, True)
    def tail_room(num_vars):
        return BZ.tail_reserve(num_vars, params)

    reserve = tail_room if params is not None and params.layout == "tail" else None
    layouts = proof_layouts(spec, 1, MODE, True, reserve=reserve)
    channel = ShapeChannel(HidingParams(), {**statement, **layouts})
    run_training(spec, channel, 1, layouts, MODE)
    def room(key):  # entries left once the store's own tail is kept free
        n = layouts[key].num_vars
        return unused_end(StorePlan(layouts[key])) - (0 if reserve is None else reserve(n))

    host = max(layouts, key=room)
    plans = {key: StorePlan(layout) for key, layout in statement.items()}
    plans.update({key: StorePlan(layout, tuple(channel.shapes) if key == host else ())
                  for key, layout in layouts.items()})
    return statement, layouts, plans, host


def prove_step(trace: TrainingTrace, committed: CommittedTensors) -> TrainingProof:
    """Prove that the committed W' is one SGD step from W on the committed batch (zero knowledge)."""
    steps = as_steps(committed)
    params = base_params(steps.weights[0])
    if scheme_of(params, error=None) is not HIDING_BASEFOLD or steps.witnesses is None:
        raise ProofError("prove_step needs a committed step (with witnesses) from commit_step")
    statement, layouts, plans, host = _structure(trace.spec, params)
    first, *rest = steps.witnesses.values()
    copy = first.take("prove_step")
    for witness in rest:
        witness.spent.append(copy)
    stores = {key: w.witnesses[copy] for key, w in steps.witnesses.items()}
    tables = proof_tables(trace, 0, False)
    openers = {key: store.commitment_witness for key, store in stores.items()}
    witnesses, commitments, coefficients = dict(stores), {}, None
    for key, layout in layouts.items():
        c, store, masks, opener = commit_hosted(plans[key], {s.name: tables[s.name] for s in layout.slots}, params)
        witnesses[key], commitments[key], openers[key] = store, c, opener
        coefficients = masks if key == host else coefficients
    proof_commitments = tuple(commitments[key] for key in layouts)
    commitments.update({key: store.commitment for key, store in stores.items()})
    BZ.check_verified_bits(list(commitments.values()), "prove_step")   # before the relations' work
    transcript = step_transcript(TRANSCRIPT_LABEL, trace.spec, MODE, statement_bytes(steps, copy), proof_commitments)
    channel = BasefoldChannel(transcript, params, {**statement, **layouts}, plans, commitments, host,
                              witnesses=witnesses, openers=openers, mask_coefficients=coefficients)
    channel.prior_views = {key: w.agreement_views[copy] for key, w in steps.witnesses.items()}
    run_training(trace.spec, channel, 1, layouts, MODE)
    channel.open_all()
    return TrainingProof(MODE, proof_commitments, tuple(channel.items), copy)


def soundness_bits(spec, committed: CommittedTensors, proof: TrainingProof) -> float:
    """-log2 of the proof's soundness error per attempt, a union bound (all from public data): per relation its
    zero check's point, rounds and rho ((n + n d + 1) / |F_p4|), the bit check's weights (1 / |F_p4| each), the
    one batch opening of the named statement copies and the proof stores (:func:`proofs.basefold_zk.batch_error`)
    and each statement commitment's agreement proof (checked once, relied on by every proof)."""
    steps = as_steps(committed)
    params = base_params(steps.weights[0])
    statement, layouts, plans, host = _structure(spec, params)
    field = float(F.P) ** F.EXT_DEGREE
    error = (len(decomposition_keys(layouts)) + sum(n + n * d + 1 for n, d in plans[host].mask_shapes)) / field
    keyed = {key: c for key, c, _ in steps.keyed()}
    error += BZ.batch_error([c.copies[proof.copy] for c in keyed.values()] + list(proof.commitments))
    error += sum(basefold_agreement_error(c, statement[key], params) for key, c in keyed.items())
    return -math.log2(error)


def verify_step(spec, committed: CommittedTensors, proof: TrainingProof) -> Verdict:
    """A truthy :class:`~proofs.verdict.Verdict` (``soundness_bits``; no output) if ``proof`` shows the committed W'
    is one honest SGD step from W; else ProofRejected ("training proof / ...")."""
    with rejecting(TRAINING_KIND):
        _verify_step(spec, committed, proof)
        return Verdict.measured(TRAINING_KIND, None, soundness_bits, validate_statement(spec, committed, "spec")[0],
                                committed, proof)


def _verify_step(spec, committed: CommittedTensors, proof: TrainingProof) -> None:
    where = "Basefold statement"
    spec, steps = validate_statement(spec, committed, where)
    if not isinstance(committed, CommittedTensors):
        raise ProofRejected("expected CommittedTensors (one step)", where)
    keyed = {key: c for key, c, _ in steps.keyed()}
    if not all(isinstance(c, Reusable) and c.copies and HIDING_BASEFOLD.is_commitment(c.copies[0])
               for c in keyed.values()) or not isinstance(proof, TrainingProof) or proof.mode != MODE:
        raise ProofRejected("expected hiding Basefold statement commitments and an aggregate TrainingProof", where)
    params = base_params(steps.weights[0])
    statement, layouts, plans, host = _structure(spec, params)
    if len({len(c) for c in keyed.values()}) != 1 or not 0 <= proof.copy < len(steps.weights[0]):
        raise ProofRejected(f"copy {proof.copy} of the statement's commitments", where)
    for key, reusable in keyed.items():
        verify_reusable(statement[key], reusable, params, f"{where}: {key} commitment")
    if len(proof.commitments) != len(layouts):
        raise ProofRejected(f"{len(proof.commitments)} proof commitments, expected {len(layouts)}", where)
    commitments = {key: c.copies[proof.copy] for key, c in keyed.items()}
    for key, c in zip(layouts, proof.commitments):
        if not HIDING_BASEFOLD.is_commitment(c) or c.params != params or c.num_vars != plans[key].num_vars:
            raise ProofRejected(f"proof commitment {key} does not have the statement's shape and parameters", where)
        commitments[key] = c
    transcript = step_transcript(TRANSCRIPT_LABEL, spec, MODE, statement_bytes(steps, proof.copy), proof.commitments)
    channel = BasefoldChannel(transcript, params, {**statement, **layouts}, plans, commitments, host,
                              items=proof.items)
    run_training(spec, channel, 1, layouts, MODE)
    channel.open_all()
    channel.finish()
