"""Linear layer proof: acc = A W^T + b, by Thaler's matmul sumcheck; weight claims go to the model opening.

For a batch A (B x N), weights W (M x N) and bias b (M), all zero-padded to powers of two, the
accumulator table is acc[i, o] = sum_k A[i, k] W[o, k] + b[o] [i < B] (the bias only on real rows,
so padded rows stay zero). Its MLE at (r_o, r_i) is

    acc~(r_o, r_i) = sum_{k in {0,1}^n} A~(k, r_i) W~(k, r_o) + b~(r_o) valid~(r_i),

with valid~(r_i) = sum_{i < B} eq(r_i, i) (Thaler, "Time-optimal interactive proofs for circuit
evaluation", CRYPTO 2013, section 5; zkDL section 4.1). One degree-2 sumcheck over the n contraction
variables (soundness error 2n/|F_p4|) reduces the claim to A~(rho, r_i), handed to the previous layer,
and to W~(rho, r_o) and b~(r_o), which the caller settles by opening the committed weights.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import field as F
from ..mle import bind_high, mle_evaluate
from ..sumcheck import SumcheckProof, prove_sumcheck, verify_sumcheck
from .common import Claim, check_ext, log2, padded, padded_matrix, padded_vector, prefix_sum_of_eq, require

DEGREE = 2


@dataclass(frozen=True)
class LinearShape:
    """Real and padded sizes of one linear layer on a batch."""

    batch: int
    in_features: int
    out_features: int

    @property
    def batch_padded(self) -> int:
        return padded(self.batch, 1)

    @property
    def in_padded(self) -> int:
        return padded(self.in_features)

    @property
    def out_padded(self) -> int:
        return padded(self.out_features)

    @property
    def sumcheck_vars(self) -> int:
        return log2(self.in_padded)


def weight_tables(layer) -> tuple:
    """(W, b) of a :class:`~proofs.quantize.QuantizedLayer` as padded field tables (W index k + N o)."""
    n_pad, m_pad = padded(layer.in_features), padded(layer.out_features)
    return padded_matrix(layer.weight, m_pad, n_pad), padded_vector(layer.bias, m_pad)


@dataclass(frozen=True, eq=False)
class LinearProof:
    """b~(r_o), the sumcheck over the contraction, A~(rho, r_i) and W~(rho, r_o)."""

    bias_eval: np.ndarray
    sumcheck: SumcheckProof
    input_eval: np.ndarray
    weight_eval: np.ndarray


def _split(claim: Claim, shape: LinearShape):
    k_out = log2(shape.out_padded)
    return claim.point[:k_out], claim.point[k_out:]


def _sum_claim(claim: Claim, bias_eval, shape: LinearShape, transcript):
    r_out, r_batch = _split(claim, shape)
    transcript.absorb("linear.bias_eval", bias_eval)
    return F.ext_sub(claim.value, F.ext_mul(bias_eval, prefix_sum_of_eq(r_batch, shape.batch)))


def _weight_claims(rho, claim: Claim, shape: LinearShape, proof: LinearProof) -> tuple:
    r_out, _ = _split(claim, shape)
    return Claim(np.concatenate([rho, r_out]), proof.weight_eval), Claim(r_out, proof.bias_eval)


def prove_linear(weight_table, bias_table, input_table, shape: LinearShape, claim: Claim, transcript,
                 strict: bool = True):
    """Reduce a claim on acc~(r_o, r_i) to a claim on the input A~(rho, r_i).

    Tables are padded field tables (input index k + N i). Returns (LinearProof, input Claim,
    (weight Claim, bias Claim)); the last two are for the caller to open. ``strict=False`` proves a
    false claim anyway (see :func:`proofs.sumcheck.prove_sumcheck`).
    """
    r_out, r_batch = _split(claim, shape)
    bias_eval = mle_evaluate(bias_table, r_out)
    sum_claim = _sum_claim(claim, bias_eval, shape, transcript)
    input_rows = bind_high(input_table, r_batch)  # A~(k, r_i) for every k, (N, 4)
    weight_rows = bind_high(weight_table, r_out)  # W~(k, r_o)
    sumcheck, rho, evals = prove_sumcheck([(F.ext_one(), [input_rows, weight_rows])], sum_claim, transcript,
                                          "sumcheck.linear", strict=strict)
    input_eval, weight_eval = evals[0]
    transcript.absorb("linear.evals", [input_eval, weight_eval])
    proof = LinearProof(bias_eval, sumcheck, input_eval, weight_eval)
    return proof, Claim(np.concatenate([rho, r_batch]), input_eval), _weight_claims(rho, claim, shape, proof)


def verify_linear(shape: LinearShape, claim: Claim, proof: LinearProof, transcript, where: str):
    """Check a :class:`LinearProof` against a claim on acc~ (raises ProofRejected).

    Returns (input Claim, (weight Claim, bias Claim)); the caller must settle the last two by an opening.
    """
    for name in ("bias_eval", "input_eval", "weight_eval"):
        check_ext(getattr(proof, name), where, name)
    sum_claim = _sum_claim(claim, proof.bias_eval, shape, transcript)
    sub = verify_sumcheck(proof.sumcheck, sum_claim, shape.sumcheck_vars, DEGREE, transcript, "sumcheck.linear")
    require(F.ext_eq(F.ext_mul(proof.input_eval, proof.weight_eval), sub.expected_value),
            "sumcheck final value != A~ * W~", where)
    transcript.absorb("linear.evals", [proof.input_eval, proof.weight_eval])
    _, r_batch = _split(claim, shape)
    return Claim(np.concatenate([sub.point, r_batch]), proof.input_eval), _weight_claims(sub.point, claim, shape, proof)
