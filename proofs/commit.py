"""Transparent hash-based multilinear commitment (Ligero / Brakedown style). Skeleton: see the contract."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CommitParams:
    """Reed-Solomon rate 1/rate_inv, number of column queries; ``security_bits`` derived from both."""

    rate_inv: int = 4
    num_queries: int | None = None


def commit(values, params=CommitParams()):
    """Commit to a base-field vector (padded to a power of two) -> (Commitment, CommitmentWitness)."""
    raise NotImplementedError


def open_commitment(witness, point, transcript):
    """Evaluate the committed MLE at ``point`` -> (value (4,), OpeningProof)."""
    raise NotImplementedError


def verify_opening(commitment, point, value, proof, transcript) -> None:
    """Raise ProofRejected unless ``proof`` shows the committed MLE equals ``value`` at ``point``."""
    raise NotImplementedError
