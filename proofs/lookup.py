"""Lookup arguments by logarithmic derivatives, with the fractional sums proven by GKR (LogUp-GKR).

Relation: every real witness pair (x_i, y_i) lies in a public table {(t_j, T_j)} of 2^b rows. With the
multiplicities m_j committed first (m_j = how many real i have x_i = t_j), the verifier draws alpha, beta and the
prover shows

    sum_i s_i / (beta + x_i + alpha y_i)  =  sum_j m_j / (beta + t_j + alpha T_j)            (LogUp)

where s_i is the public 0/1 selector of the real rows (padding rows have numerator 0: whatever a prover puts
there adds nothing, and the padding of a tensor is fixed elsewhere, see :mod:`proofs.layers.graph`).

Soundness of the identity (Haboeck 2022, "Multivariate lookups based on logarithmic derivatives", Lemma 5): if
the rational functions in (alpha, beta) on both sides are equal, every (x_i, y_i) with s_i = 1 is a table row,
since the linear forms beta + x + alpha y of distinct pairs are distinct irreducibles and the number of real
rows n < p (so no multiplicity cancels mod p). If they differ, clearing the denominators leaves a nonzero
polynomial of total degree <= n + 2^b, so by Schwartz-Zippel random (alpha, beta) in F_p^4 satisfy the identity
with probability <= (N + 2^b) / |F_p^4| (N the padded witness length, :func:`lookup_error`). A zero denominator
cannot hide a term: every denominator is a factor of its tree's root q, and the verifier refuses q = 0.

Fractional sums by GKR (Papini and Haboeck 2023, "Improving logarithmic derivative lookups using GKR"): the
leaves (p_i, q_i) are paired layer by layer, (p, q) of layer k at i from the layer k + 1 halves L (top variable
0) and R (top variable 1): p_k = p_L q_R + p_R q_L, q_k = q_L q_R, so the root is sum_i p_i / q_i as one
projective fraction and no inverse is ever computed or committed. The prover sends the root; a claim
(p_k~(r), q_k~(r)) becomes, with a random lambda, one degree-3 sumcheck over k variables of
eq(r, i) (p_L q_R + p_R q_L + lambda q_L q_R); the prover states p_L, p_R, q_L, q_R at its point s, the
verifier checks the summand, draws mu and continues at (s, mu) with p_(k+1)~ = (1 - mu) p_L + mu p_R (same for
q). Layer 0 needs no sumcheck (two entries, checked directly). The last claim is on the leaves: the witness side
gives x~(r_w), y~(r_w) (stated, settled by the caller: the claim flow of the graph proof) with p~(r_w) = the
selector's MLE (the verifier's own); the table side gives m~(r_t) (stated; opened from the multiplicities'
commitment by the caller) with q~(r_t) = beta + t~(r_t) + alpha T~(r_t) (the verifier's own, O(2^b)).
Error of one tree of K layers: sum_(k < K) (3 k + 2) / |F_p^4| (each layer's sumcheck, lambda and mu).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import field as F
from .errors import ProofError, ProofRejected
from .mle import eq_eval, eq_table, mle_evaluate
from .proof_format import ByteReader, ByteWriter
from .sumcheck import SumcheckProof, prove_sumcheck, verify_sumcheck

_MAGIC, _VERSION = b"HZKLKUP1", 1
MAX_LAYERS = 40  #: a tree's depth a parser accepts (2^40 leaves: far above any table a verifier allows)


def _ext(values) -> np.ndarray:
    """A base (n,) or ext (n, 4) table as ext."""
    values = np.asarray(values, dtype=np.uint64)
    return F.ext_from_base(values) if values.ndim == 1 else values


def _require(condition, reason: str, where: str) -> None:
    if not condition:
        raise ProofRejected(reason, where)


def _check_ext(value, where: str, name: str) -> np.ndarray:
    array = np.asarray(value)
    _require(array.shape == (F.EXT_DEGREE,) and array.dtype == np.uint64 and F.is_canonical(array),
             f"{name} is not a canonical F_p4 element", where)
    return array


@dataclass(frozen=True, eq=False)
class FractionSumProof:
    """A GKR proof of sum_i p_i / q_i over 2^K leaves: the root (p, q) and, per layer k = 0..K-1, its sumcheck
    (None for k = 0) and the four stated values (p_L, p_R, q_L, q_R) at the sumcheck's point."""

    root: np.ndarray  # (2, 4)
    layers: tuple  # ((SumcheckProof | None, (4, 4) array), ...)

    @property
    def num_vars(self) -> int:
        return len(self.layers)

    def write(self, writer: ByteWriter) -> None:
        writer.u32(len(self.layers))
        writer.ext(self.root[0])
        writer.ext(self.root[1])
        for k, (sumcheck, values) in enumerate(self.layers):
            if k:
                writer.blob(sumcheck.to_bytes())
            for value in values:
                writer.ext(value)

    @classmethod
    def read(cls, reader: ByteReader) -> "FractionSumProof":
        count = reader.bounded("layers", 0, MAX_LAYERS)
        root = np.stack([reader.ext(), reader.ext()])
        layers = []
        for k in range(count):
            sumcheck = SumcheckProof.from_bytes(reader.blob()) if k else None
            layers.append((sumcheck, np.stack([reader.ext() for _ in range(4)])))
        return cls(root, tuple(layers))


def _combine(p, q):
    """One layer up: halves L (top variable 0), R (top variable 1): (p_L q_R + p_R q_L, q_L q_R)."""
    half = q.shape[0] // 2
    pl, pr, ql, qr = p[:half], p[half:], q[:half], q[half:]
    return F.ext_add(F.ext_mul(pl, qr), F.ext_mul(pr, ql)), F.ext_mul(ql, qr)


def _line(values, mu) -> tuple:
    """(p, q) at the next point: (1 - mu) L + mu R for the stated p_L, p_R, q_L, q_R."""
    pl, pr, ql, qr = values
    return (F.ext_add(pl, F.ext_mul(mu, F.ext_sub(pr, pl))), F.ext_add(ql, F.ext_mul(mu, F.ext_sub(qr, ql))))


def prove_fraction_sum(p, q, transcript, label: str):
    """Prove the root of sum_i p_i / q_i (p, q tables of 2^K entries, base or F_p4); returns (proof, point (K, 4),
    p~(point), q~(point)): the leaves' claim the caller settles."""
    p, q = _ext(p), _ext(q)
    if p.shape != q.shape or p.shape[0] & (p.shape[0] - 1):
        raise ProofError(f"{label}: fraction tables of shapes {p.shape}, {q.shape} (need equal powers of two)")
    layers = [(p, q)]
    while layers[-1][0].shape[0] > 1:
        layers.append(_combine(*layers[-1]))
    layers.reverse()  # layers[k]: 2^k entries
    root = np.stack([layers[0][0][0], layers[0][1][0]])
    transcript.absorb(f"{label}.root", root)
    point = np.zeros((0, F.EXT_DEGREE), dtype=np.uint64)
    value_p, value_q = root[0], root[1]
    proofs = []
    for k in range(len(layers) - 1):
        child_p, child_q = layers[k + 1]
        half = 1 << k
        pl, pr, ql, qr = child_p[:half], child_p[half:], child_q[:half], child_q[half:]
        at = f"{label}.layer{k}"
        if k == 0:
            sumcheck, values = None, np.stack([pl[0], pr[0], ql[0], qr[0]])
            s = point
        else:
            lam = transcript.challenge_ext(f"{at}.lambda")
            eq = eq_table(point)
            claim = F.ext_add(value_p, F.ext_mul(lam, value_q))
            terms = [(1, [eq, pl, qr]), (1, [eq, pr, ql]), (lam, [eq, ql, qr])]
            sumcheck, s, evals = prove_sumcheck(terms, claim, transcript, at)
            values = np.stack([evals[0][1], evals[1][1], evals[1][2], evals[0][2]])
        transcript.absorb(f"{at}.values", values)
        mu = transcript.challenge_ext(f"{at}.mu")
        value_p, value_q = _line(values, mu)
        point = np.concatenate([s, mu[None]])
        proofs.append((sumcheck, values))
    return FractionSumProof(root, tuple(proofs)), point, value_p, value_q


def verify_fraction_sum(proof, num_vars: int, transcript, label: str):
    """Check a :class:`FractionSumProof` of 2^num_vars leaves; returns (root (2, 4), point, p~, q~) at the leaves
    (the caller settles p~ and q~ there). Raises ProofRejected."""
    _require(isinstance(proof, FractionSumProof) and proof.num_vars == num_vars,
             f"a fraction-sum proof of {getattr(proof, 'num_vars', None)} layers for {num_vars} variables", label)
    root = np.asarray(proof.root)
    _require(root.shape == (2, F.EXT_DEGREE) and root.dtype == np.uint64 and F.is_canonical(root),
             "root is not two canonical F_p4 elements", label)
    transcript.absorb(f"{label}.root", root)
    point = np.zeros((0, F.EXT_DEGREE), dtype=np.uint64)
    value_p, value_q = root[0], root[1]
    for k, (sumcheck, values) in enumerate(proof.layers):
        at = f"{label}.layer{k}"
        values = np.asarray(values)
        _require(values.shape == (4, F.EXT_DEGREE) and values.dtype == np.uint64 and F.is_canonical(values),
                 "layer values are not four canonical F_p4 elements", at)
        pl, pr, ql, qr = values
        if k == 0:
            _require(sumcheck is None, "layer 0 carries a sumcheck", at)
            _require(F.ext_eq(F.ext_add(F.ext_mul(pl, qr), F.ext_mul(pr, ql)), value_p)
                     and F.ext_eq(F.ext_mul(ql, qr), value_q), "the root is not the fraction of its two children", at)
            s = point
        else:
            lam = transcript.challenge_ext(f"{at}.lambda")
            claim = F.ext_add(value_p, F.ext_mul(lam, value_q))
            sub = verify_sumcheck(sumcheck, claim, k, 3, transcript, at)
            s = sub.point
            inner = F.ext_add(F.ext_add(F.ext_mul(pl, qr), F.ext_mul(pr, ql)), F.ext_mul(lam, F.ext_mul(ql, qr)))
            sub.check(F.ext_mul(eq_eval(point, s), inner), at)
        transcript.absorb(f"{at}.values", values)
        mu = transcript.challenge_ext(f"{at}.mu")
        value_p, value_q = _line(values, mu)
        point = np.concatenate([s, mu[None]])
    return root, point, value_p, value_q


def fraction_sum_error(num_vars: int) -> float:
    """A tree of num_vars layers: sum_(k < K) (3 k + 2) / |F_p^4| (sumcheck rounds of degree 3, lambda, mu)."""
    return sum(3 * k + 2 for k in range(num_vars)) * 2.0 ** -F.EXT_BITS


def lookup_error(witness_vars: int, table_vars: int) -> float:
    """One lookup: the LogUp identity's (2^witness_vars + 2^table_vars) / |F_p^4| (Schwartz-Zippel over alpha,
    beta, see the module docstring) plus both trees' :func:`fraction_sum_error`; 1 when 2^witness_vars >= p (the
    identity then shows nothing: a value outside the table looked up p times has multiplicity 0 mod p)."""
    if (1 << witness_vars) >= F.P:
        return 1.0
    return ((1 << witness_vars) + (1 << table_vars)) * 2.0 ** -F.EXT_BITS + \
        fraction_sum_error(witness_vars) + fraction_sum_error(table_vars)


# ------------------------------------------------------------------------------------------ the lookup
@dataclass(frozen=True, eq=False)
class LookupProof:
    """The witness tree (selector / (beta + x + alpha y)), the table tree (m / (beta + t + alpha T)), and the
    stated x~, y~ at the witness tree's leaf point and m~ at the table tree's."""

    witness: FractionSumProof
    table: FractionSumProof
    x_eval: np.ndarray
    y_eval: np.ndarray
    m_eval: np.ndarray

    def write(self, writer: ByteWriter) -> None:
        self.witness.write(writer)
        self.table.write(writer)
        for value in (self.x_eval, self.y_eval, self.m_eval):
            writer.ext(value)

    @classmethod
    def read(cls, reader: ByteReader) -> "LookupProof":
        witness, table = FractionSumProof.read(reader), FractionSumProof.read(reader)
        return cls(witness, table, reader.ext(), reader.ext(), reader.ext())

    def to_bytes(self) -> bytes:
        writer = ByteWriter(_MAGIC, _VERSION)
        self.write(writer)
        return writer.getvalue()

    @classmethod
    def from_bytes(cls, data) -> "LookupProof":
        reader = ByteReader(data, _MAGIC, _VERSION, "lookup proof")
        proof = cls.read(reader)
        reader.finish()
        return proof


@dataclass(frozen=True)
class LookupClaims:
    """What a verified lookup leaves to its caller: x~(witness_point) = x_eval, y~(witness_point) = y_eval,
    m~(table_point) = m_eval."""

    witness_point: np.ndarray
    x_eval: np.ndarray
    y_eval: np.ndarray
    table_point: np.ndarray
    m_eval: np.ndarray


def multiplicities(x, table_in, selector=None) -> np.ndarray:
    """m_j = how many (selected) x_i equal table_in[j] (int64; table_in distinct integers). ProofError when a
    selected x_i is in no row."""
    x = np.asarray(x, dtype=np.int64).reshape(-1)
    table_in = np.asarray(table_in, dtype=np.int64)
    if selector is not None:
        x = x[np.asarray(selector).reshape(-1) != 0]
    order = np.argsort(table_in, kind="stable")
    position = np.searchsorted(table_in[order], x)
    position = np.minimum(position, len(table_in) - 1)
    found = table_in[order][position] == x
    if not np.all(found):
        raise ProofError(f"lookup: {int(np.sum(~found))} value(s) (e.g. {int(x[~found][0])}) are in no table row")
    return np.bincount(order[position], minlength=len(table_in)).astype(np.int64)


def _challenges(transcript, label: str):
    alpha, beta = transcript.challenge_ext_vector(f"{label}.alpha beta", 2)
    return alpha, beta


def _denominators(alpha, beta, a, b) -> np.ndarray:
    """beta + a + alpha b over base tables a, b (F_p4 (n, 4))."""
    return F.ext_add(F.ext_add(F.ext_mul_base(alpha[None], b), F.ext_from_base(a)), beta[None])


def prove_lookup(x, y, selector, table_in, table_out, m, transcript, label: str = "lookup"):
    """Prove every selected (x_i, y_i) is a row of (table_in, table_out) (field tables: x, y, selector of 2^K
    entries, table_in, table_out, m of 2^b), m committed by the caller before this call. Returns
    (LookupProof, LookupClaims): the claims on x, y, m the caller settles."""
    x, y, selector = (F.to_field(np.asarray(a)) if np.asarray(a).dtype != np.uint64 else np.asarray(a)
                      for a in (x, y, selector))
    table_in, table_out, m = (F.to_field(np.asarray(a)) if np.asarray(a).dtype != np.uint64 else np.asarray(a)
                              for a in (table_in, table_out, m))
    alpha, beta = _challenges(transcript, label)
    witness, r_w, _, _ = prove_fraction_sum(selector, _denominators(alpha, beta, x, y), transcript, f"{label}.witness")
    x_eval, y_eval = mle_evaluate(x, r_w), mle_evaluate(y, r_w)
    transcript.absorb(f"{label}.xy", [x_eval, y_eval])
    table, r_t, _, _ = prove_fraction_sum(m, _denominators(alpha, beta, table_in, table_out), transcript,
                                          f"{label}.table")
    m_eval = mle_evaluate(m, r_t)
    transcript.absorb(f"{label}.m", m_eval)
    return LookupProof(witness, table, x_eval, y_eval, m_eval), LookupClaims(r_w, x_eval, y_eval, r_t, m_eval)


def verify_lookup(proof, witness_vars: int, selector_eval, table_in, table_out, transcript,
                  label: str = "lookup") -> LookupClaims:
    """Check a :class:`LookupProof` for a witness of 2^witness_vars rows whose selector's MLE is
    ``selector_eval(point)`` against the public table (field tables table_in, table_out of 2^b); returns the
    :class:`LookupClaims` the caller must settle (x, y by its claim flow, m by an opening). Raises ProofRejected."""
    _require(isinstance(proof, LookupProof), "not a LookupProof", label)
    table_vars = int(len(table_in)).bit_length() - 1
    alpha, beta = _challenges(transcript, label)
    root_w, r_w, p_w, q_w = verify_fraction_sum(proof.witness, witness_vars, transcript, f"{label}.witness")
    x_eval = _check_ext(proof.x_eval, label, "x_eval")
    y_eval = _check_ext(proof.y_eval, label, "y_eval")
    _require(F.ext_eq(p_w, selector_eval(r_w)), "the witness leaves' numerators are not the selector", label)
    _require(F.ext_eq(q_w, F.ext_add(F.ext_add(beta, x_eval), F.ext_mul(alpha, y_eval))),
             "the witness leaves' denominators are not beta + x + alpha y", label)
    transcript.absorb(f"{label}.xy", [x_eval, y_eval])
    root_t, r_t, p_t, q_t = verify_fraction_sum(proof.table, table_vars, transcript, f"{label}.table")
    m_eval = _check_ext(proof.m_eval, label, "m_eval")
    _require(F.ext_eq(p_t, m_eval), "the table leaves' numerators are not the stated multiplicities", label)
    t_in, t_out = mle_evaluate(table_in, r_t), mle_evaluate(table_out, r_t)
    _require(F.ext_eq(q_t, F.ext_add(F.ext_add(beta, t_in), F.ext_mul(alpha, t_out))),
             "the table leaves' denominators are not beta + t + alpha T", label)
    transcript.absorb(f"{label}.m", m_eval)
    zero = F.ext_zero()
    _require(not F.ext_eq(root_w[1], zero) and not F.ext_eq(root_t[1], zero), "a zero denominator", label)
    _require(F.ext_eq(F.ext_mul(root_w[0], root_t[1]), F.ext_mul(root_t[0], root_w[1])),
             "the witness's fraction sum differs from the table's (a pair outside the table, or wrong "
             "multiplicities)", label)
    return LookupClaims(r_w, x_eval, y_eval, r_t, m_eval)
