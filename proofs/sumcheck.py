"""Sumcheck for sums of products of up to three multilinear factors (Lund-Fortnow-Karloff-Nisan; Thaler's book, ch. 4).

Claim: sum_{x in {0,1}^k} sum_t c_t prod_{f in term_t} f(x) = claim, every f a multilinear table
(base or F_p4) of length 2^k, every coefficient c_t in F_p4, at most 3 factors per term.
Round j binds x_j (least significant variable first, as :func:`proofs.mle.fix_variable`); the prover
sends g_j evaluated at 0..d (d = max factors per term), the verifier checks g_j(0) + g_j(1) against
the running claim and draws r_j in F_p4. Soundness error per round <= d / |F_p4| ~ d 2^-124; whole
sumcheck <= k d 2^-124 (Schwartz-Zippel).

The interactive core (:class:`SumcheckProver`, :class:`SumcheckVerifier`) is apart from the
Fiat-Shamir wrapper (:func:`prove_sumcheck`, :func:`verify_sumcheck`); verification returns a
:class:`SubClaim` that the caller settles (own factor evaluations, commitment openings, further sumchecks).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MAX_DEGREE = 3


@dataclass(frozen=True)
class SubClaim:
    """What remains after the sumcheck: sum_t c_t prod f(point) must equal ``expected_value`` ((4,) ext)."""

    point: np.ndarray
    expected_value: np.ndarray


@dataclass(frozen=True)
class SumcheckProof:
    """The round messages: shape (num_vars, degree + 1, 4), g_j evaluated at 0..degree."""

    round_messages: np.ndarray


def prove_sumcheck(terms, claim, transcript):
    """Prove sum_x sum_t c_t prod f(x) = claim. ``terms`` is a list of (coefficient, [tables]).

    Returns (SumcheckProof, point (k, 4), factor_evals) with factor_evals[t][j] = term_t's j-th factor at point.
    """
    raise NotImplementedError


def verify_sumcheck(proof, claim, num_vars, degree, transcript) -> SubClaim:
    """Check the round messages against ``claim``; raises ProofRejected; returns the SubClaim."""
    raise NotImplementedError
