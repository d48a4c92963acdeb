"""zkReLU of every requantized op at once: one bits sumcheck over the packed bits table (issue 13, speed).

:mod:`proofs.layers.relu` checks each layer's bits by its own sumcheck (one per group of planes), and the graph
proof then merged every group's claim T_g~(sigma_g) into one before opening. Here each op only runs its *select*
(zkDL, Sun-Li-Zhang, section 4.2) and states s = S~(rho), z = z'~(rho), a = acc~(rho) with gamma_i drawn after
them (:func:`op_statement`): its linear claim on the bits is

    sum_(e, j) eq(rho_i, e) w_i(j) T_i(e, j) = c_i := gamma_i0 s + gamma_i1 z + gamma_i2 (a + h),

w_i(j) = gamma_i0 [j = sign] + gamma_i1 c'_j + gamma_i2 c_j (:mod:`proofs.layers.requant`'s coefficients). At the
end, with alpha_i, beta and tau (over all n variables of the packed table T) drawn after every statement, one
degree-3 sumcheck over T's n variables proves

    sum_x T(x) [W(x) + beta eq(tau, x)] - beta eq(tau, x) T(x)^2 = sum_i alpha_i c_i,

W(x) = alpha_i w_i(j) eq(rho_i, e) on op i's group blocks (x = offset + e + E j, :mod:`proofs.layers.packing`),
zero elsewhere. It ends at sigma with t = T~(sigma), opened once; the verifier evaluates W~(sigma) as the sum over
the blocks of alpha_i eq(sigma_high, block) w_i~(sigma_j) eq(rho_i, sigma_e) (O(blocks n)) and eq(tau, sigma).
Every entry of the packed table (gaps included) is shown to be a bit. Soundness error (|F| = p^4): the alphas
#ops / |F|, the bit-check point n / |F|, beta 1 / |F|, the sumcheck 3 n / |F| (the selects' 3 kE / |F| each as
before). The fused round kernel's twin is :func:`round_sums_numpy`.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import field as F
from ..mle import eq_eval, eq_table, fold, mle_evaluate
from ..sumcheck import SumcheckProof, prove_sumcheck, verify_sumcheck
from .common import Claim, boolean_point, check_ext, ext_const, ext_one_minus, log2, require
from .requant import Decomposition, DecompositionWitness

DEGREE = 3


@dataclass(frozen=True, eq=False)
class SelectProof:
    """One op's part: the select sumcheck (None without ReLU), S~(rho), z'~(rho) and acc~(rho)."""

    select: object
    sign_eval: np.ndarray
    shifted_eval: np.ndarray
    acc_eval: np.ndarray


@dataclass(frozen=True, eq=False)
class BitsProof:
    """The one bits sumcheck over the packed table and T~(sigma)."""

    sumcheck: SumcheckProof
    bits_eval: np.ndarray


@dataclass(frozen=True)
class OpStatement:
    """An op's linear claim on its bits: sum_(e, j) eq(rho, e) w(j) T(e, j) = value."""

    rho: np.ndarray
    weights: np.ndarray  # (padded planes, 4)
    value: np.ndarray


def op_statement(spec: Decomposition, rho, sign_eval, shifted_eval, acc_eval, transcript) -> OpStatement:
    """Absorb s, z, a, draw gamma (3) and return the op's :class:`OpStatement`."""
    transcript.absorb("relu.evals", [sign_eval, shifted_eval, acc_eval])
    gamma = transcript.challenge_ext_vector("relu.gamma", 3)  # error 1 / |F| per stated value folded
    value = F.ext_add(F.ext_add(F.ext_mul(gamma[0], sign_eval), F.ext_mul(gamma[1], shifted_eval)),
                      F.ext_mul(gamma[2], F.ext_add(acc_eval, ext_const(spec.offset))))
    sign_indicator = np.zeros(spec.padded_width, dtype=np.uint64)
    sign_indicator[spec.sign_index] = spec.relu  # without ReLU no sign value is stated
    weights = F.ext_zero(spec.padded_width)
    for g, coefficients in zip(gamma, (sign_indicator, F.to_field(spec.output_coefficients()),
                                       F.to_field(spec.rebuild_coefficients()))):
        weights = F.ext_add(weights, F.ext_mul_base(g[None, :], coefficients))
    return OpStatement(np.asarray(rho), weights, value)


def prove_select(witness: DecompositionWitness, claim: Claim, transcript, strict: bool = True):
    """The op's select (ReLU) and statement. Returns (SelectProof, Claim on acc~ at rho, OpStatement)."""
    spec = witness.spec
    select, sign_eval, shifted_eval, rho = None, F.ext_zero(), claim.value, claim.point
    if spec.relu:
        not_sign = F.sub(np.uint64(1), witness.bits[spec.sign_index])
        select, rho, evals = prove_sumcheck([(F.ext_one(), [eq_table(claim.point), not_sign,
                                                            F.to_field(witness.shifted)])],
                                            claim.value, transcript, "sumcheck.relu.select", strict=strict)
        sign_eval, shifted_eval = ext_one_minus(evals[0][1]), evals[0][2]
    acc_eval = mle_evaluate(F.to_field(witness.acc), rho)
    statement = op_statement(spec, rho, sign_eval, shifted_eval, acc_eval, transcript)
    return SelectProof(select, sign_eval, shifted_eval, acc_eval), Claim(rho, acc_eval), statement


def verify_select(spec: Decomposition, claim: Claim, proof, where: str, transcript):
    """Check a :class:`SelectProof`; returns (Claim on acc~, OpStatement) or raises ProofRejected."""
    require(isinstance(proof, SelectProof), "select proof missing", where)
    for name in ("sign_eval", "shifted_eval", "acc_eval"):
        check_ext(getattr(proof, name), where, name)
    require(spec.relu == (proof.select is not None), "select sumcheck present iff the layer has ReLU", where)
    rho, shifted_eval = claim.point, claim.value
    if spec.relu:
        sub = verify_sumcheck(proof.select, claim.value, claim.point.shape[0], DEGREE, transcript,
                              "sumcheck.relu.select")
        rho, shifted_eval = sub.point, proof.shifted_eval
        selected = F.ext_mul(F.ext_mul(eq_eval(claim.point, rho), ext_one_minus(proof.sign_eval)), shifted_eval)
        require(F.ext_eq(selected, sub.expected_value), "select sumcheck final value != eq (1 - s) z'", where)
    else:
        require(F.ext_eq(proof.sign_eval, F.ext_zero()) and F.ext_eq(proof.shifted_eval, claim.value),
                "without ReLU the sign value must be 0 and the shifted value the claim", where)
    statement = op_statement(spec, rho, proof.sign_eval, shifted_eval, proof.acc_eval, transcript)
    return Claim(rho, proof.acc_eval), statement


# ------------------------------------------------------------------------------------------ batching
def _challenges(statements, num_vars: int, transcript, label: str):
    transcript.absorb(f"{label}.claims", [s.value for s in statements])
    alphas = transcript.challenge_ext_vector(f"{label}.alpha", len(statements))  # error #ops / |F|
    beta = transcript.challenge_ext(f"{label}.beta")  # error 1 / |F|
    tau = transcript.challenge_ext_vector(f"{label}.tau", num_vars)  # error n / |F| (bit check)
    total = F.ext_zero()
    for alpha, statement in zip(alphas, statements):
        total = F.ext_add(total, F.ext_mul(alpha, statement.value))
    return alphas, beta, tau, total


def weight_table(packing, blocks, statements, alphas) -> np.ndarray:
    """W over the packed table: block k = (op position i, plane start, count) holds alpha_i w_i(start + j)
    eq(rho_i, e) at offset + e + E j."""
    table = F.ext_zero(1 << packing.num_vars)
    for k, (i, start, count) in enumerate(blocks):
        s = statements[i]
        eq_rho = eq_table(s.rho)
        w = F.ext_mul(s.weights[start:start + count], alphas[i])
        offset, size = packing.offsets[k], count * eq_rho.shape[0]
        F.ext_outer_into(w, eq_rho, table[offset:offset + size])
    return table


def weight_eval(packing, blocks, statements, alphas, sigma) -> np.ndarray:
    """W~(sigma) = sum_k alpha_i eq(sigma_high, block k) w_i~(sigma_j) eq(rho_i, sigma_e), O(blocks n)."""
    sigma = np.asarray(sigma).reshape(-1, F.EXT_DEGREE)
    total, eq_rho = F.ext_zero(), {}
    for k, (i, start, count) in enumerate(blocks):
        s = statements[i]
        k_e, k_j = s.rho.shape[0], log2(count)
        local = k_e + k_j
        if i not in eq_rho:  # an op's groups share eq(rho_i, sigma_e)
            eq_rho[i] = eq_eval(s.rho, sigma[:k_e])
        selector = boolean_point(packing.offsets[k] >> local, packing.num_vars - local)
        value = F.ext_mul(eq_eval(sigma[local:], selector), eq_rho[i])
        value = F.ext_mul(value, mle_evaluate(s.weights[start:start + count], sigma[k_e:local]))
        total = F.ext_add(total, F.ext_mul(alphas[i], value))
    return total


def round_sums_numpy(lin, eq, bits) -> tuple:
    """(sum_j l_j(x) t_j(x), sum_j eq[j] (t_j(x)^2 - t_j(x))) for x = 0, 1, 2, each (3, 4): the kernels' twin
    (l, t the lines through the pairs (2j, 2j + 1) of W and T; eq of half their length)."""
    first, second = F.ext_zero((3,)), F.ext_zero((3,))
    values = []
    for table in (lin, bits):
        low, high = table[0::2], table[1::2]
        values.append([low, high, F.sub(F.add(high, high), low)])
    for x in range(3):
        l, t = values[0][x], values[1][x]
        if t.ndim == 1:
            first[x] = F.ext_sum(F.ext_mul_base(l, t), axis=0)
            second[x] = F.ext_sum(F.ext_mul_base(eq, F.sub(F.mul(t, t), t)), axis=0)
        else:
            first[x] = F.ext_sum(F.ext_mul(l, t), axis=0)
            second[x] = F.ext_sum(F.ext_mul(eq, F.ext_sub(F.ext_mul(t, t), t)), axis=0)
    return first, second


def _quadratic_at_3(values) -> np.ndarray:
    """f(3) = f(0) - 3 f(1) + 3 f(2) for a polynomial of degree <= 2 given at 0, 1, 2."""
    three = F.to_field(np.int64(3))
    return F.ext_add(F.ext_sub(values[0], F.ext_mul_base(values[1], three)), F.ext_mul_base(values[2], three))


def _eq1(tau, x: int) -> np.ndarray:
    """eq(tau, x) = (1 - tau)(1 - x) + tau x for one variable, at an integer x."""
    return F.ext_add(ext_one_minus(tau), F.ext_mul_base(F.ext_sub(F.ext_add(tau, tau), F.ext_one()),
                                                        F.to_field(np.int64(x))))


def _message_ints(first, second, tau, factor) -> np.ndarray:
    """g(x) = first(x) - factor eq(tau, x) second(x) at x = 0..3 ((4, 4)), first and second given at 0, 1, 2
    and extended to 3 as :func:`_quadratic_at_3`, on Python ints (a handful of F_p4 scalars a round: numpy's
    per-call overhead was most of a small proof's serial time; twin: the numpy formula in the tests)."""
    p = F.P
    for values in (first, second):
        values.append([(values[0][c] - 3 * values[1][c] + 3 * values[2][c]) % p for c in range(F.EXT_DEGREE)])
    rows = []
    for x in range(DEGREE + 1):  # eq(tau, x) = (1 - tau)(1 - x) + tau x = (1 - tau) + (2 tau - 1) x
        eq = [((1 if c == 0 else 0) - tau[c] + (2 * tau[c] - (1 if c == 0 else 0)) * x) % p
              for c in range(F.EXT_DEGREE)]
        product = F.ext_mul_ints(F.ext_mul_ints(factor, eq), second[x])
        rows.append([(first[x][c] - product[c]) % p for c in range(F.EXT_DEGREE)])
    return np.array(rows, dtype=np.uint64)


class BitsProver:
    """The sumcheck prover of the batched relation (``prove_sumcheck`` drives it; the verifier sees a plain
    degree-3 sumcheck). The eq(tau, .) factor is never built whole (Gruen's split): in round j,
    eq(tau, (r, X, y)) = C_j eq(tau_j, X) E_j[y] with C_j = prod_(i < j) eq(tau_i, r_i) and E_j = eq(tau_(> j), .),
    so g_j(X) = sum_y l(X, y) t(X, y) - beta C_j eq(tau_j, X) sum_y E_j[y] (t(X, y)^2 - t(X, y)), both sums of degree 2 in X
    evaluated at 0, 1, 2 by one pass (:mod:`proofs._graph_kernels`, numpy when short) and extended to 3;
    E_(j+1)[y] = E_j[2y] + E_j[2y + 1] (the bound variable summed out). Long F_p4 tables are bound lazily: the
    next round's pass folds them as it sums (one pass over memory instead of two)."""

    degree = DEGREE

    def __init__(self, lin, tau, bits, beta):
        self._lin, self._bits, self._beta, self._tau = lin, bits, beta, tau
        self._eq = eq_table(tau[1:])
        self._scale = F.ext_one()
        self._pending = None  # a challenge not yet folded into lin and bits
        self.num_vars = log2(bits.shape[0])
        self.challenges = []
        self._sum = None

    def round_message(self) -> np.ndarray:
        kernels = None
        if self._bits.shape[0] >= F.NUMBA_MIN_SIZE and F.numba_kernels() is not None:
            from .. import _graph_kernels as kernels
        if self._pending is not None:  # fold and sum in one pass
            half = self._bits.shape[0] // 2
            lin, bits = (np.empty((half, F.EXT_DEGREE), dtype=np.uint64) for _ in range(2))
            sums = np.zeros((2, 3, F.EXT_DEGREE), dtype=np.uint64)
            kernels.bits_fold_round(self._lin, self._bits, self._pending, self._eq, lin, bits, sums)
            self._lin, self._bits, self._pending = lin, bits, None
            first, second = sums[0], sums[1]
        elif kernels is None:
            first, second = round_sums_numpy(self._lin, self._eq, self._bits)
        else:
            sums = np.zeros((2, 3, F.EXT_DEGREE), dtype=np.uint64)
            if self._bits.ndim == 1:
                kernels.bits_round_base(self._lin, self._eq, self._bits, sums)
            else:
                kernels.bits_round_ext(self._lin, self._eq, self._bits, sums)
            first, second = sums[0], sums[1]
        message = _message_ints(first.tolist(), second.tolist(), self._tau[len(self.challenges)].tolist(),
                                F.ext_mul_ints(self._scale.tolist(), self._beta.tolist()))
        self._sum = F.ext_add(message[0], message[1])
        return message

    def claimed_sum(self) -> np.ndarray:
        if self._sum is None:
            self.round_message()
        return self._sum

    def bind(self, r) -> None:
        r = np.asarray(r, dtype=np.uint64)
        tau = self._tau[len(self.challenges)]
        self._scale = F.ext_mul(self._scale, eq_eval(tau[None], r[None]))
        if self._bits.ndim == 2 and self._bits.shape[0] >= max(F.NUMBA_MIN_SIZE, 4) and F.numba_kernels() is not None:
            self._pending = r
        else:
            self._lin, self._bits = fold(self._lin, r), fold(self._bits, r)
        if self._eq.shape[0] > 1:
            self._eq = _pair_sums(self._eq)
        self.challenges.append(r)
        self._sum = None

    def final_evaluations(self):
        if self._pending is not None:
            self._lin, self._bits, self._pending = fold(self._lin, self._pending), fold(self._bits, self._pending), None
        t = self._bits[0] if self._bits.ndim == 2 else F.ext_from_base(self._bits[0])
        lin = F.ext_add(self._lin[0], F.ext_mul(self._beta, self._scale))  # W~ + beta eq(tau, sigma)
        return [[lin, t], [self._scale, t, t]]


def _pair_sums(table) -> np.ndarray:
    if table.shape[0] >= F.NUMBA_MIN_SIZE and F.numba_kernels() is not None:
        from .._graph_kernels import pair_sums
        out = np.empty((table.shape[0] // 2, F.EXT_DEGREE), dtype=np.uint64)
        pair_sums(table, out)
        return out
    return F.ext_add(table[0::2], table[1::2])


def prove_bits(packed, packing, blocks, statements, transcript, label: str = "bits", strict: bool = True):
    """The batched bits sumcheck over the packed table ``packed`` (base field). ``blocks``: per packed table
    (index into ``statements``, plane start, plane count), in the packing's order. Returns (BitsProof, Claim on
    the packed table at sigma)."""
    alphas, beta, tau, total = _challenges(statements, packing.num_vars, transcript, label)
    lin = weight_table(packing, blocks, statements, alphas)
    sumcheck, sigma, evals = prove_sumcheck(BitsProver(lin, tau, F.to_field(packed), beta), total, transcript,
                                            f"{label}.sumcheck", strict=strict)
    t = evals[0][1]
    transcript.absorb(f"{label}.bits_eval", t)
    return BitsProof(sumcheck, t), Claim(sigma, t)


def verify_bits(packing, blocks, statements, proof, transcript, label: str = "bits") -> Claim:
    """Check :func:`prove_bits`' proof; returns the claim T~(sigma) = t for the opening (raises ProofRejected)."""
    require(isinstance(proof, BitsProof), "bits proof missing", label)
    t = check_ext(proof.bits_eval, label, "bits_eval")
    alphas, beta, tau, total = _challenges(statements, packing.num_vars, transcript, label)
    sub = verify_sumcheck(proof.sumcheck, total, packing.num_vars, DEGREE, transcript, f"{label}.sumcheck")
    e = eq_eval(tau, sub.point)
    w = weight_eval(packing, blocks, statements, alphas, sub.point)
    expected = F.ext_sub(F.ext_mul(F.ext_add(w, F.ext_mul(beta, e)), t), F.ext_mul(F.ext_mul(beta, e), F.ext_mul(t, t)))
    sub.check(expected, label)
    transcript.absorb(f"{label}.bits_eval", t)
    return Claim(sub.point, t)
