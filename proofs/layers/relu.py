"""zkReLU (zkDL, Sun-Li-Zhang, section 4.2): ReLU with the rescale by 2^R, from committed bits.

The prover has committed to the bits table T (J x E, see :mod:`proofs.layers.requant`) of a layer.
Given a claim out~(r) = v_out on the layer output and the prover's value v_acc = acc~(r), one
sumcheck over the E*J cube (element variables e low, bit variables j high) proves at once

    sum_{e,j} eq(r,e) c'_j (1 - S(e)) T(e,j)       = v_out            (select: out = (1 - s) z')
    sum_{e,j} eq(r,e) c_j T(e,j)                    = v_acc + h        (rebuild: z from the bits)
    sum_{e,j} eq(r,e) eq(tau,j) T(e,j) (1 - T(e,j)) = 0                (every entry is a bit)

combined with random alpha, beta in F_p4 (without ReLU the first line drops the (1 - S) factor).
S(e) = T(e, sign) is the sign bit. The sumcheck (degree 3) ends at a point (rho_e, rho_j); the
verifier evaluates eq and the public coefficient MLEs itself and settles T~(rho_e, rho_j) and
S~(rho_e) = T~(rho_e, sign) by opening the bits commitment. Soundness: the batching costs 2/|F_p4|,
the bit check's random point (r, tau) kE+kJ/|F_p4|, the sumcheck (kE+kJ) 3/|F_p4|.
The claim on acc~(r) goes on to the layer's matmul.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import field as F
from ..commit import open_batch, verify_batch
from ..mle import eq_eval, eq_table, mle_evaluate
from ..sumcheck import SumcheckProof, prove_sumcheck, verify_sumcheck
from .common import Claim, boolean_point, check_ext, ext_const, ext_one_minus, log2, require
from .requant import Decomposition, DecompositionWitness

DEGREE = 3


@dataclass(frozen=True, eq=False)
class DecompositionProof:
    """acc~(r), the batched sumcheck, T~(rho), S~(rho_e) (zero without ReLU) and one batch opening of the
    bits commitment at rho (and at the sign point with ReLU)."""

    acc_eval: np.ndarray
    sumcheck: SumcheckProof
    bits_eval: np.ndarray
    sign_eval: np.ndarray
    bits_opening: object


def _challenges(transcript, spec: Decomposition):
    alpha = transcript.challenge_ext("relu.alpha")
    beta = transcript.challenge_ext("relu.beta")
    tau = transcript.challenge_ext_vector("relu.tau", log2(spec.padded_width))
    return alpha, beta, tau


def _batched_claim(claim: Claim, acc_eval, alpha, spec: Decomposition):
    return F.ext_add(claim.value, F.ext_mul(alpha, F.ext_add(acc_eval, ext_const(spec.offset))))


def _outer(per_bit, per_element) -> np.ndarray:
    """The (J E, 4) table u_j * v_e at index e + E j (per_bit base (J,) or ext (J, 4))."""
    if per_bit.ndim == 1:
        return F.ext_mul_base(per_element[None, :, :], per_bit[:, None]).reshape(-1, F.EXT_DEGREE)
    return F.ext_mul(per_bit[:, None, :], per_element[None, :, :]).reshape(-1, F.EXT_DEGREE)


def prove_decomposition(witness: DecompositionWitness, commitment_witness, acc_table, claim: Claim, transcript):
    """Reduce a claim on the layer output at r to a claim on its accumulator acc~(r).

    ``acc_table`` is the padded accumulator as a field table (index e). Returns (DecompositionProof, Claim).
    """
    spec = witness.spec
    acc_eval = mle_evaluate(acc_table, claim.point)
    transcript.absorb("relu.acc_eval", acc_eval)
    alpha, beta, tau = _challenges(transcript, spec)
    eq_r = eq_table(claim.point)
    bits = witness.table()
    one_minus_bits = F.sub(np.uint64(1), bits)
    select = [_outer(F.to_field(spec.output_coefficients()), eq_r), bits]
    if spec.relu:
        select.append(np.tile(F.sub(np.uint64(1), witness.bits[spec.sign_index]), spec.padded_width))
    terms = [(F.ext_one(), select),
             (alpha, [_outer(F.to_field(spec.rebuild_coefficients()), eq_r), bits]),
             (beta, [_outer(eq_table(tau), eq_r), bits, one_minus_bits])]
    sumcheck, rho, evals = prove_sumcheck(terms, _batched_claim(claim, acc_eval, alpha, spec), transcript)
    bits_eval = evals[0][1]
    sign_eval = ext_one_minus(evals[0][2]) if spec.relu else F.ext_zero()
    transcript.absorb("relu.evals", [bits_eval, sign_eval])
    _, bits_opening = open_batch(commitment_witness, _opening_points(rho, claim, spec), transcript)
    proof = DecompositionProof(acc_eval, sumcheck, bits_eval, sign_eval, bits_opening)
    return proof, Claim(claim.point, acc_eval)


def _opening_points(rho, claim: Claim, spec: Decomposition) -> np.ndarray:
    """rho, and with ReLU also the sign point (rho_e, bits of the sign index)."""
    if not spec.relu:
        return rho[None]
    sign_point = np.concatenate([rho[:claim.point.shape[0]], boolean_point(spec.sign_index, log2(spec.padded_width))])
    return np.stack([rho, sign_point])


def verify_decomposition(bits_commitment, spec: Decomposition, claim: Claim, proof: DecompositionProof,
                         transcript, where: str) -> Claim:
    """Check a :class:`DecompositionProof`; returns the claim on the accumulator (raises ProofRejected)."""
    acc_eval = check_ext(proof.acc_eval, where, "accumulator evaluation")
    bits_eval = check_ext(proof.bits_eval, where, "bits evaluation")
    sign_eval = check_ext(proof.sign_eval, where, "sign evaluation")
    transcript.absorb("relu.acc_eval", acc_eval)
    alpha, beta, tau = _challenges(transcript, spec)
    k_elements = claim.point.shape[0]
    sub = verify_sumcheck(proof.sumcheck, _batched_claim(claim, acc_eval, alpha, spec),
                          k_elements + log2(spec.padded_width), DEGREE, transcript)
    rho_e, rho_j = sub.point[:k_elements], sub.point[k_elements:]
    eq_r = eq_eval(claim.point, rho_e)
    select = F.ext_mul(F.ext_mul(eq_r, mle_evaluate(F.to_field(spec.output_coefficients()), rho_j)), bits_eval)
    if spec.relu:
        select = F.ext_mul(select, ext_one_minus(sign_eval))
    rebuild = F.ext_mul(F.ext_mul(eq_r, mle_evaluate(F.to_field(spec.rebuild_coefficients()), rho_j)), bits_eval)
    bit_check = F.ext_mul(F.ext_mul(F.ext_mul(eq_r, eq_eval(tau, rho_j)), bits_eval), ext_one_minus(bits_eval))
    expected = F.ext_add(select, F.ext_add(F.ext_mul(alpha, rebuild), F.ext_mul(beta, bit_check)))
    require(F.ext_eq(expected, sub.expected_value), "sumcheck final value != select + rebuild + bit check", where)
    transcript.absorb("relu.evals", [bits_eval, sign_eval])
    values = np.stack([bits_eval, sign_eval]) if spec.relu else bits_eval[None]
    verify_batch(bits_commitment, _opening_points(sub.point, claim, spec), values, proof.bits_opening, transcript)
    return Claim(claim.point, acc_eval)
