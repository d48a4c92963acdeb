"""zkReLU (zkDL, Sun-Li-Zhang, section 4.2): ReLU with the rescale by 2^R, from committed bits.

The prover has committed to the bits table T (J x E, index e + E j, see :mod:`proofs.layers.requant`)
of a layer: R remainder bits and Q two's-complement bits of z' = round(acc / 2^R) per element, with
S(e) = T(e, sign) the sign bit. A claim out~(r) = v on the layer output is reduced in two sumchecks:

1. *select* (ReLU only, degree 3 over the E elements): v = sum_e eq(r,e) (1 - S(e)) z'(e); it ends at
   a random rho with the prover's values s = S~(rho), z = z'~(rho). Without ReLU, rho = r and z = v.
   The prover then states a = acc~(rho).
2. *bits* (degree 3 over the J E cube), with random gamma_0..2, beta, tau in F_p4:

       sum_{e,j} eq(rho,e) w(j) T(e,j) + beta eq(rho,e) eq(tau,j) T(e,j)(1 - T(e,j))
           = gamma_0 s + gamma_1 z + gamma_2 (a + h),

   w(j) = gamma_0 [j = sign] + gamma_1 c'_j + gamma_2 c_j, where c' rebuilds z' and c rebuilds acc + h
   from the bits. This shows at once that S and z' are the bits' sign and value, that acc is rebuilt
   from them (so the remainder is in [0, 2^R)), and that every entry of T is a bit (eq(rho, tau) is
   a random point chosen after T was committed). It ends at sigma, where the verifier evaluates eq and
   the public coefficient MLEs itself; T~(sigma) is settled by opening the bits commitment.

The claim acc~(rho) = a goes on to the layer's matmul. Soundness error (|F| = p^4): select 3 kE/|F|,
the batching 3/|F|, the bit-check point (kE + kJ)/|F| and the bits sumcheck 3 (kE + kJ)/|F|.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import field as F
from ..commit import open_commitment, verify_opening
from ..mle import eq_eval, eq_table, mle_evaluate
from ..sumcheck import SumcheckProof, prove_sumcheck, verify_sumcheck
from .common import Claim, check_ext, ext_const, ext_one_minus, log2, require
from .requant import Decomposition, DecompositionWitness

DEGREE = 3


@dataclass(frozen=True, eq=False)
class DecompositionProof:
    """The select sumcheck (None without ReLU) with S~(rho) and z'~(rho), acc~(rho), the bits sumcheck,
    T~(sigma) and the opening of the bits commitment at sigma."""

    select: object
    sign_eval: np.ndarray
    shifted_eval: np.ndarray
    acc_eval: np.ndarray
    bits: SumcheckProof
    bits_eval: np.ndarray
    bits_opening: object


def _bits_statement(spec: Decomposition, sign_eval, shifted_eval, acc_eval, transcript):
    """Absorb the stated values, draw gamma, beta, tau; return (claim, coefficients w (J, 4), beta, tau)."""
    transcript.absorb("relu.evals", [sign_eval, shifted_eval, acc_eval])
    gamma = transcript.challenge_ext_vector("relu.gamma", 3)
    beta = transcript.challenge_ext("relu.beta")
    tau = transcript.challenge_ext_vector("relu.tau", log2(spec.padded_width))
    claim = F.ext_add(F.ext_add(F.ext_mul(gamma[0], sign_eval), F.ext_mul(gamma[1], shifted_eval)),
                      F.ext_mul(gamma[2], F.ext_add(acc_eval, ext_const(spec.offset))))
    sign_indicator = np.zeros(spec.padded_width, dtype=np.uint64)
    sign_indicator[spec.sign_index] = spec.relu  # without ReLU no sign value is stated
    weights = F.ext_zero(spec.padded_width)
    for g, coefficients in zip(gamma, (sign_indicator, F.to_field(spec.output_coefficients()),
                                       F.to_field(spec.rebuild_coefficients()))):
        weights = F.ext_add(weights, F.ext_mul_base(g[None, :], coefficients))
    return claim, weights, beta, tau


def _outer(per_bit, per_element) -> np.ndarray:
    """The (J E, 4) table u_j v_e at index e + E j, for F_p4 vectors u (J, 4) and v (E, 4)."""
    return F.ext_mul(per_bit[:, None, :], per_element[None, :, :]).reshape(-1, F.EXT_DEGREE)


def prove_decomposition(witness: DecompositionWitness, commitment_witness, claim: Claim, transcript):
    """Reduce a claim on the layer output at r to a claim on its accumulator at rho.

    Returns (DecompositionProof, Claim on acc~).
    """
    spec = witness.spec
    shifted = F.to_field(witness.shifted)
    select, sign_eval, shifted_eval, rho = None, F.ext_zero(), claim.value, claim.point
    if spec.relu:
        not_sign = F.sub(np.uint64(1), witness.bits[spec.sign_index])
        select, rho, evals = prove_sumcheck([(F.ext_one(), [eq_table(claim.point), not_sign, shifted])],
                                            claim.value, transcript, "sumcheck.relu.select")
        sign_eval, shifted_eval = ext_one_minus(evals[0][1]), evals[0][2]
    acc_eval = mle_evaluate(F.to_field(witness.acc), rho)
    bits_claim, weights, beta, tau = _bits_statement(spec, sign_eval, shifted_eval, acc_eval, transcript)
    eq_rho = eq_table(rho)
    bits = witness.table()
    terms = [(F.ext_one(), [_outer(weights, eq_rho), bits]),
             (beta, [_outer(eq_table(tau), eq_rho), bits, F.sub(np.uint64(1), bits)])]
    bits_proof, sigma, evals = prove_sumcheck(terms, bits_claim, transcript, "sumcheck.relu.bits")
    bits_eval = evals[0][1]
    transcript.absorb("relu.bits_eval", bits_eval)
    _, opening = open_commitment(commitment_witness, sigma, transcript)
    proof = DecompositionProof(select, sign_eval, shifted_eval, acc_eval, bits_proof, bits_eval, opening)
    return proof, Claim(rho, acc_eval)


def verify_decomposition(bits_commitment, spec: Decomposition, claim: Claim, proof: DecompositionProof,
                         transcript, where: str) -> Claim:
    """Check a :class:`DecompositionProof`; returns the claim on the accumulator (raises ProofRejected)."""
    for name in ("sign_eval", "shifted_eval", "acc_eval", "bits_eval"):
        check_ext(getattr(proof, name), where, name)
    require(spec.relu == (proof.select is not None), "select sumcheck present iff the layer has ReLU", where)
    k_elements = claim.point.shape[0]
    rho, shifted_eval = claim.point, claim.value
    if spec.relu:
        sub = verify_sumcheck(proof.select, claim.value, k_elements, DEGREE, transcript, "sumcheck.relu.select")
        rho, shifted_eval = sub.point, proof.shifted_eval
        selected = F.ext_mul(F.ext_mul(eq_eval(claim.point, rho), ext_one_minus(proof.sign_eval)), shifted_eval)
        require(F.ext_eq(selected, sub.expected_value), "select sumcheck final value != eq (1 - s) z'", where)
    else:
        require(F.ext_eq(proof.sign_eval, F.ext_zero()) and F.ext_eq(proof.shifted_eval, claim.value),
                "without ReLU the sign value must be 0 and the shifted value the claim", where)
    bits_claim, weights, beta, tau = _bits_statement(spec, proof.sign_eval, shifted_eval, proof.acc_eval, transcript)
    k_bits = log2(spec.padded_width)
    sub = verify_sumcheck(proof.bits, bits_claim, k_elements + k_bits, DEGREE, transcript, "sumcheck.relu.bits")
    sigma_e, sigma_j = sub.point[:k_elements], sub.point[k_elements:]
    t = proof.bits_eval
    linear = F.ext_mul(mle_evaluate(weights, sigma_j), t)
    bit_check = F.ext_mul(F.ext_mul(beta, eq_eval(tau, sigma_j)), F.ext_mul(t, ext_one_minus(t)))
    expected = F.ext_mul(eq_eval(rho, sigma_e), F.ext_add(linear, bit_check))
    require(F.ext_eq(expected, sub.expected_value), "bits sumcheck final value != eq (w T + beta eq T (1 - T))",
            where)
    transcript.absorb("relu.bits_eval", t)
    verify_opening(bits_commitment, sub.point, t, proof.bits_opening, transcript)
    return Claim(rho, proof.acc_eval)
