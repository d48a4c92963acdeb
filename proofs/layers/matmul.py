"""Linear layer proof: acc = A W^T + b, by Thaler's matmul sumcheck; weights settled by commitment openings.

For a batch A (B x N), weights W (M x N) and bias b (M), all zero-padded to powers of two, the
accumulator table is acc[i, o] = sum_k A[i, k] W[o, k] + b[o] [i < B] (the bias only on real rows,
so padded rows stay zero). Its MLE at (r_o, r_i) is

    acc~(r_o, r_i) = sum_{k in {0,1}^n} A~(k, r_i) W~(k, r_o) + b~(r_o) valid~(r_i),

with valid~(r_i) = sum_{i < B} eq(r_i, i) (Thaler, "Time-optimal interactive proofs for circuit
evaluation", 2013, section 5; zkDL section 4.1). One degree-2 sumcheck over the n contraction
variables reduces the claim to A~(rho, r_i) (handed to the previous layer) and W~(rho, r_o), b~(r_o)
(settled by opening the committed weights).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import field as F
from ..commit import commit, open_commitment, verify_opening
from ..mle import bind_high, mle_evaluate
from ..quantize import QuantizedLayer
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


@dataclass(frozen=True, eq=False)
class CommittedLinear:
    """Prover side of one layer's weights: padded field tables, their commitments and witnesses."""

    weight_table: np.ndarray
    bias_table: np.ndarray
    weight_commitment: object
    bias_commitment: object
    weight_witness: object
    bias_witness: object


def commit_linear(layer: QuantizedLayer, params) -> CommittedLinear:
    """Commit to W (padded, row-major, index k + N o) and b (padded) of one layer."""
    n_pad, m_pad = padded(layer.in_features), padded(layer.out_features)
    weight_table = padded_matrix(layer.weight, m_pad, n_pad)
    bias_table = padded_vector(layer.bias, m_pad)
    weight_commitment, weight_witness = commit(weight_table, params)
    bias_commitment, bias_witness = commit(bias_table, params)
    return CommittedLinear(weight_table, bias_table, weight_commitment, bias_commitment,
                           weight_witness, bias_witness)


@dataclass(frozen=True, eq=False)
class LinearProof:
    """b~(r_o), the sumcheck over the contraction, A~(rho, r_i), W~(rho, r_o) and the two openings."""

    bias_eval: np.ndarray
    sumcheck: SumcheckProof
    input_eval: np.ndarray
    weight_eval: np.ndarray
    weight_opening: object
    bias_opening: object


def _split(claim: Claim, shape: LinearShape):
    k_out = log2(shape.out_padded)
    return claim.point[:k_out], claim.point[k_out:]


def prove_linear(committed: CommittedLinear, input_table, shape: LinearShape, claim: Claim, transcript):
    """Reduce a claim on acc~(r_o, r_i) to a claim on the input A~(rho, r_i).

    ``input_table`` is the padded input batch as a field table (index k + N i). Returns
    (LinearProof, Claim on the input).
    """
    r_out, r_batch = _split(claim, shape)
    bias_eval = mle_evaluate(committed.bias_table, r_out)
    transcript.absorb("linear.bias_eval", bias_eval)
    sum_claim = F.ext_sub(claim.value, F.ext_mul(bias_eval, prefix_sum_of_eq(r_batch, shape.batch)))
    input_rows = bind_high(input_table, r_batch)  # A~(k, r_i) for every k, (N, 4)
    weight_rows = bind_high(committed.weight_table, r_out)  # W~(k, r_o)
    sumcheck, rho, evals = prove_sumcheck([(F.ext_one(), [input_rows, weight_rows])], sum_claim, transcript)
    input_eval, weight_eval = evals[0]
    transcript.absorb("linear.evals", [input_eval, weight_eval])
    _, weight_opening = open_commitment(committed.weight_witness, np.concatenate([rho, r_out]), transcript)
    _, bias_opening = open_commitment(committed.bias_witness, r_out, transcript)
    proof = LinearProof(bias_eval, sumcheck, input_eval, weight_eval, weight_opening, bias_opening)
    return proof, Claim(np.concatenate([rho, r_batch]), input_eval)


def verify_linear(weight_commitment, bias_commitment, shape: LinearShape, claim: Claim,
                  proof: LinearProof, transcript, where: str) -> Claim:
    """Check a :class:`LinearProof` against a claim on acc~; returns the claim on the input (ProofRejected)."""
    bias_eval = check_ext(proof.bias_eval, where, "bias evaluation")
    input_eval = check_ext(proof.input_eval, where, "input evaluation")
    weight_eval = check_ext(proof.weight_eval, where, "weight evaluation")
    r_out, r_batch = _split(claim, shape)
    transcript.absorb("linear.bias_eval", bias_eval)
    sum_claim = F.ext_sub(claim.value, F.ext_mul(bias_eval, prefix_sum_of_eq(r_batch, shape.batch)))
    sub = verify_sumcheck(proof.sumcheck, sum_claim, shape.sumcheck_vars, DEGREE, transcript)
    require(F.ext_eq(F.ext_mul(input_eval, weight_eval), sub.expected_value),
            "sumcheck final value != A~ * W~", where)
    transcript.absorb("linear.evals", [input_eval, weight_eval])
    verify_opening(weight_commitment, np.concatenate([sub.point, r_out]), weight_eval,
                   proof.weight_opening, transcript)
    verify_opening(bias_commitment, r_out, bias_eval, proof.bias_opening, transcript)
    return Claim(np.concatenate([sub.point, r_batch]), input_eval)
