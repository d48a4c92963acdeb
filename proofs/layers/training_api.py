"""One front door for zero-knowledge training-step proofs over either commitment (``proofs.commit_step`` and
friends): hiding Ligero stores (:mod:`.step_proof`, the default: the faster prover) or hiding Basefold stores
opened in one batch (:mod:`.step_basefold`, ``params=basefold_training_params()``). Measured on 784->128->10 at
batch 64 (``benchmarks/proofs_training.py``): Ligero 2.6 MB, Basefold 0.72 MB for about 3.5x the prover time,
verified in a fifth of Ligero's time; the commitment passed to the prover and verifier says which one ran."""
from __future__ import annotations

from ..errors import ProofError
from ..pcs.scheme import HIDING_BASEFOLD, scheme_of
from . import step_basefold, step_proof
from .reusable import DEFAULT_STEP_PROOFS, Reusable

basefold_training_params = step_basefold.training_params


def _over_basefold(committed) -> bool:
    weights = getattr(committed, "weights", None)
    return isinstance(weights, Reusable) and bool(weights.copies) and \
        HIDING_BASEFOLD.is_commitment(weights.copies[0])


def commit_step(trace, zk: bool = True, params=None, seed=None, max_proofs: int | None = None):
    """Commit to W, W' and the batch of ``trace`` for ``max_proofs`` zero-knowledge proofs (default: 8 over
    Ligero, 1 over Basefold: the step proven once, no agreement proof between copies)."""
    if scheme_of(params, error=None) is HIDING_BASEFOLD:
        if not zk:
            raise ProofError("hiding Basefold stores are for zero-knowledge proofs: pass zk=True or Ligero params")
        return step_basefold.commit_step(trace, params, 1 if max_proofs is None else max_proofs, seed)
    return step_proof.commit_step(trace, zk, params, seed, DEFAULT_STEP_PROOFS if max_proofs is None else max_proofs)


def prove_training_step(trace, committed, zk: bool = True, mode: str = "aggregate", params=None):
    """Prove that ``committed.new_weights`` is one SGD step from ``committed.weights`` on ``committed.batch``,
    over the stores ``committed`` was made with (:func:`commit_step`)."""
    if _over_basefold(committed):
        if not zk or mode != step_basefold.MODE:
            raise ProofError(f"Basefold training proofs are zero knowledge in {step_basefold.MODE!r} mode")
        return step_basefold.prove_step(trace, committed)
    return step_proof.prove_training_step(trace, committed, zk, mode, params)


def verify_training_step(spec, committed, proof):
    """A truthy :class:`~proofs.verdict.Verdict` (``soundness_bits``; no output) if ``proof`` shows the committed W'
    is one honest SGD step from W, else ProofRejected ("training proof / ..."); either verifier first parses the
    statement (``spec`` and ``committed``) by :func:`proofs.layers.step_proof.validate_statement`."""
    if _over_basefold(committed):
        return step_basefold.verify_step(spec, committed, proof)
    return step_proof.verify_training_step(spec, committed, proof)
