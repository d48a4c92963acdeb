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
   The bit planes are committed in up to two groups of power-of-two sizes (17 planes as 16 + 1, see
   :attr:`Decomposition.groups`): the prover splits the claim into the groups' parts, the verifier
   checks that they add up, and each group runs this sumcheck on its planes with its own opening.

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
class BitGroupProof:
    """One group of bit planes: its part of the bits claim, its sumcheck, T_g~(sigma) and the opening."""

    claim: np.ndarray
    sumcheck: SumcheckProof
    bits_eval: np.ndarray
    opening: object


@dataclass(frozen=True, eq=False)
class DecompositionProof:
    """The select sumcheck (None without ReLU) with S~(rho) and z'~(rho), acc~(rho), and one
    :class:`BitGroupProof` per group of bit planes."""

    select: object
    sign_eval: np.ndarray
    shifted_eval: np.ndarray
    acc_eval: np.ndarray
    groups: tuple


def _bits_statement(spec: Decomposition, sign_eval, shifted_eval, acc_eval, transcript):
    """Absorb the stated values, draw gamma, beta, tau; return (claim, coefficients w (planes, 4), beta, tau)."""
    transcript.absorb("relu.evals", [sign_eval, shifted_eval, acc_eval])
    gamma = transcript.challenge_ext_vector("relu.gamma", 3)
    beta = transcript.challenge_ext("relu.beta")
    tau = transcript.challenge_ext_vector("relu.tau", log2(spec.groups[0][1]))
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


def prove_decomposition(witness: DecompositionWitness, commitment_witnesses, claim: Claim, transcript,
                        strict: bool = True, deferred: list | None = None):
    """Reduce a claim on the layer output at r to a claim on its accumulator at rho.

    ``commitment_witnesses`` holds one commitment witness per bit group. Returns (DecompositionProof,
    Claim on acc~). ``strict=False`` proves false claims anyway (see :func:`proofs.sumcheck.prove_sumcheck`).
    With a ``deferred`` list (and no commitment witnesses) the groups are not opened here: each group's claim
    T_g~(sigma) = t is appended to it for the caller's one batch opening (openings are then None).
    """
    spec = witness.spec
    shifted = F.to_field(witness.shifted)
    select, sign_eval, shifted_eval, rho = None, F.ext_zero(), claim.value, claim.point
    if spec.relu:
        not_sign = F.sub(np.uint64(1), witness.bits[spec.sign_index])
        select, rho, evals = prove_sumcheck([(F.ext_one(), [eq_table(claim.point), not_sign, shifted])],
                                            claim.value, transcript, "sumcheck.relu.select",
                                            strict=strict)
        sign_eval, shifted_eval = ext_one_minus(evals[0][1]), evals[0][2]
    acc_eval = mle_evaluate(F.to_field(witness.acc), rho)
    _, weights, beta, tau = _bits_statement(spec, sign_eval, shifted_eval, acc_eval, transcript)
    eq_rho = eq_table(rho)
    plane_evals = F.matmul(witness.bits, eq_rho)  # T~(rho, j) for every plane j, (planes, 4)
    group_claims = np.stack([F.ext_dot(weights[start:start + count], plane_evals[start:start + count])
                             for start, count in spec.groups])
    transcript.absorb("relu.group_claims", group_claims)
    groups = []
    for g, (start, count) in enumerate(spec.groups):
        bits = witness.table(g)
        bit_check = _outer(eq_table(tau[:log2(count)]), eq_rho)
        # w T + beta eq T (1 - T) = (w + beta eq) T - beta eq T T: three tables, T shared by identity
        linear = F.ext_add(_outer(weights[start:start + count], eq_rho), F.ext_mul(bit_check, beta))
        terms = [(F.ext_one(), [linear, bits]), (F.ext_neg(beta), [bit_check, bits, bits])]
        sumcheck, sigma, evals = prove_sumcheck(terms, group_claims[g], transcript, "sumcheck.relu.bits",
                                                strict=strict)
        transcript.absorb("relu.bits_eval", evals[0][1])
        if deferred is not None:
            deferred.append(Claim(sigma, evals[0][1]))
            opening = None
        else:
            _, opening = open_commitment(commitment_witnesses[g], sigma, transcript)
        groups.append(BitGroupProof(group_claims[g], sumcheck, evals[0][1], opening))
    proof = DecompositionProof(select, sign_eval, shifted_eval, acc_eval, tuple(groups))
    return proof, Claim(rho, acc_eval)


def verify_decomposition(bits_commitments, spec: Decomposition, claim: Claim, proof: DecompositionProof,
                         transcript, where: str, deferred: list | None = None) -> Claim:
    """Check a :class:`DecompositionProof` (one bits commitment per group); returns the claim on the
    accumulator (raises ProofRejected). With a ``deferred`` list (bits_commitments None) each group's claim
    T_g~(sigma) = t is appended to it for the caller's batch opening instead of being opened here."""
    if deferred is not None:
        bits_commitments = (None,) * len(spec.groups)
    for name in ("sign_eval", "shifted_eval", "acc_eval"):
        check_ext(getattr(proof, name), where, name)
    require(spec.relu == (proof.select is not None), "select sumcheck present iff the layer has ReLU", where)
    require(len(proof.groups) == len(spec.groups) == len(bits_commitments),
            f"{len(proof.groups)} bit groups, expected {len(spec.groups)}", where)
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
    for group in proof.groups:
        check_ext(group.claim, where, "group claim")
        check_ext(group.bits_eval, where, "bits evaluation")
    group_claims = np.stack([group.claim for group in proof.groups])
    require(F.ext_eq(F.ext_sum(group_claims, axis=0), bits_claim), "the groups' claims do not add up", where)
    transcript.absorb("relu.group_claims", group_claims)
    for (start, count), group, commitment in zip(spec.groups, proof.groups, bits_commitments):
        k_bits = log2(count)
        sub = verify_sumcheck(group.sumcheck, group.claim, k_elements + k_bits, DEGREE, transcript,
                              "sumcheck.relu.bits")
        sigma_e, sigma_j = sub.point[:k_elements], sub.point[k_elements:]
        t = group.bits_eval
        linear = F.ext_mul(mle_evaluate(weights[start:start + count], sigma_j), t)
        bit_check = F.ext_mul(F.ext_mul(beta, eq_eval(tau[:k_bits], sigma_j)), F.ext_mul(t, ext_one_minus(t)))
        expected = F.ext_mul(eq_eval(rho, sigma_e), F.ext_add(linear, bit_check))
        require(F.ext_eq(expected, sub.expected_value),
                "bits sumcheck final value != eq (w T + beta eq T (1 - T))", where)
        transcript.absorb("relu.bits_eval", t)
        if deferred is not None:
            deferred.append(Claim(sub.point, t))
        else:
            verify_opening(commitment, sub.point, t, group.opening, transcript)
    return Claim(rho, proof.acc_eval)
