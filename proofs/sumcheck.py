"""Sumcheck for sums of products of up to three multilinear factors (Lund-Fortnow-Karloff-Nisan; Thaler's book, ch. 4).

Claim: sum_{x in {0,1}^k} sum_t c_t prod_{f in term_t} f(x) = claim, every f a multilinear table
(base (2^k,) or F_p4 (2^k, 4)) of length 2^k, every coefficient c_t in F_p4, at most 3 factors per term.
Round j binds x_j (least significant variable first, as :func:`proofs.mle.fix_variable`); the prover
sends g_j evaluated at 0..d (d = max factors per term), the verifier checks g_j(0) + g_j(1) against
the running claim and draws r_j in F_p4. Soundness error per round <= d / |F_p4| ~ d 2^-123.6; whole
sumcheck <= k d 2^-123.6 (Schwartz-Zippel).

The interactive core (:class:`SumcheckProver`, :class:`SumcheckVerifier`) is apart from the
Fiat-Shamir wrapper (:func:`prove_sumcheck`, :func:`verify_sumcheck`); verification returns a
:class:`SubClaim` that the caller settles (own factor evaluations, commitment openings, further sumchecks).
"""
from __future__ import annotations

import functools
import operator
from dataclasses import dataclass

import numpy as np

from . import field as F
from .errors import ProofError, ProofRejected
from .mle import fold, is_ext, num_vars_of

MAX_DEGREE = 3
_MAGIC, _VERSION = b"HZKSUM01", 1


def _stacked(kernels, tables, shape) -> np.ndarray:
    """np.stack(tables) ((0, *shape) when there are none), copied in pieces on the threads by the kernels."""
    out = np.empty((len(tables), *shape), dtype=np.uint64)
    kernels.stack_into([np.ascontiguousarray(t) for t in tables], out)
    return out


@dataclass(frozen=True)
class SubClaim:
    """What remains after the sumcheck: sum_t c_t prod f(point) must equal ``expected_value`` ((4,) ext)."""

    point: np.ndarray
    expected_value: np.ndarray

    @property
    def value(self) -> np.ndarray:
        """The claimed value of the summand at ``point`` (same as ``expected_value``)."""
        return self.expected_value

    def check(self, value, where: str = "sumcheck") -> None:
        """Settle the sub-claim with the verifier's own value of the summand at ``point``; ProofRejected if unequal."""
        if not F.ext_eq(np.asarray(value), self.expected_value):
            raise ProofRejected("final evaluation differs from the sumcheck's sub-claim", where)


@dataclass(frozen=True)
class SumcheckProof:
    """The round messages: shape (num_vars, degree + 1, 4), g_j evaluated at 0..degree."""

    round_messages: np.ndarray

    def to_bytes(self) -> bytes:
        """Magic, version (u8), then the (num_vars, degree + 1, 4) messages (shape as u32s, entries as u32s)."""
        return _MAGIC + bytes([_VERSION]) + F.elements_to_bytes(self.round_messages)

    def __reduce__(self):
        """Pickle (Dask, multiprocessing, concurrent.futures) through the versioned bytes of ``to_bytes``."""
        return type(self).from_bytes, (self.to_bytes(),)

    @classmethod
    def from_bytes(cls, data: bytes) -> "SumcheckProof":
        """Inverse of :meth:`to_bytes`; malformed data raises ProofRejected."""
        reader = F.ByteReader(data, where="sumcheck proof")
        reader.header(_MAGIC, _VERSION)
        messages = reader.elements(ndim=3)
        reader.finish()
        return cls(messages)


def as_ext_scalar(value, name: str) -> np.ndarray:
    """An int or a (4,) canonical ext array -> (4,) ext array."""
    if isinstance(value, (int, np.integer)):
        return F.ext_from_base(F.to_field(int(value)))
    arr = np.asarray(value)
    if arr.shape != (F.EXT_DEGREE,) or not F.is_canonical(arr):
        raise ProofError(f"sumcheck: {name} must be an int or a canonical (4,) uint64 array, got shape {arr.shape}")
    return arr


def _split_term(term, t: int):
    """(coefficient, [tables]) as given; a bare table or a list of tables means coefficient 1."""
    if isinstance(term, np.ndarray):
        return 1, [term]
    if isinstance(term, tuple) and len(term) == 2 and isinstance(term[1], (list, tuple)):
        return term
    if isinstance(term, (list, tuple)) and all(isinstance(f, np.ndarray) for f in term):
        return 1, list(term)
    raise ProofError(f"sumcheck: term {t} must be (coefficient, [tables]), a list of tables or one table")


def _product(arrays):
    """Elementwise product of base (L,) and ext (L, 4) arrays; base factors are multiplied first (cheaper)."""
    base = [a for a in arrays if not is_ext(a)]
    ext = [a for a in arrays if is_ext(a)]
    result = None
    for a in base:
        result = a if result is None else F.mul(result, a)
    for a in ext:
        if result is None:
            result = a
        elif is_ext(result):
            result = F.ext_mul(result, a)
        else:
            result = F.ext_mul_base(a, result)
    return result


def combine_evaluations(coefficients, factor_evals) -> np.ndarray:
    """``sum_t c_t prod_j factor_evals[t][j]``: the summand at the sub-claim point, from factor values ((4,) each)."""
    if len(coefficients) != len(factor_evals):
        raise ProofRejected(f"{len(factor_evals)} evaluated terms for {len(coefficients)} coefficients", "sumcheck")
    total = F.ext_zero()
    for coefficient, values in zip(coefficients, factor_evals):
        product = as_ext_scalar(coefficient, "coefficient")
        for value in values:
            value = np.asarray(value)
            if value.shape != (F.EXT_DEGREE,) or not F.is_canonical(value):
                raise ProofRejected(f"a factor evaluation of shape {value.shape} is not a canonical (4,) element",
                                    "sumcheck")
            product = F.ext_mul(product, value)
        total = F.ext_add(total, product)
    return total


@functools.lru_cache(maxsize=16)
def _monomial_from_values(d: int) -> tuple:
    """The inverse Vandermonde matrix of the nodes 0..d over F_p (rows: monomial coefficients from values),
    as Python ints: c_k = sum_i M[k][i] g(i)."""
    p = F.P
    rows = [[pow(i, k, p) for k in range(d + 1)] + [1 if j == i else 0 for j in range(d + 1)] for i in range(d + 1)]
    for col in range(d + 1):  # Gauss-Jordan on [V | I] mod p (V is invertible: distinct nodes)
        pivot = next(r for r in range(col, d + 1) if rows[r][col] % p)
        rows[col], rows[pivot] = rows[pivot], rows[col]
        inverse = pow(rows[col][col], p - 2, p)
        rows[col] = [v * inverse % p for v in rows[col]]
        for r in range(d + 1):
            if r != col and rows[r][col]:
                factor = rows[r][col]
                rows[r] = [(a - factor * b) % p for a, b in zip(rows[r], rows[col])]
    return tuple(tuple(row[d + 1:]) for row in rows)


def lagrange_eval(evals, r) -> np.ndarray:
    """The polynomial of degree d with values ``evals[i]`` at i = 0..d, evaluated at the F_p4 point r.

    Its monomial coefficients from the values by the cached inverse Vandermonde matrix of 0..d (base-field
    scalars times F_p4 values), then Horner at r: d F_p4 products, in Python ints (d <= 8).
    """
    d = evals.shape[0] - 1
    values, point, p = evals.tolist(), [int(c) for c in r], F.P
    inverse = _monomial_from_values(d)
    columns = list(zip(*values))  # the 4 coordinates' values at 0..d
    coefficients = [[sum(map(operator.mul, row, column)) % p for column in columns] for row in inverse]
    total = coefficients[d]
    for k in range(d - 1, -1, -1):
        total = [(a + b) % p for a, b in zip(F.ext_mul_ints(total, point), coefficients[k])]
    return np.array(total, dtype=np.uint64)


class SumcheckProver:
    """Interactive prover. ``terms``: list of (coefficient, [tables]), coefficient an int or (4,) ext array
    (a term given as a bare table or a list of tables has coefficient 1). Tables are canonical uint64
    (n,) base or (n, 4) extension arrays; other integer (n,) arrays are reduced mod p.

    Per round: :meth:`round_message` -> (degree + 1, 4), then :meth:`bind` the verifier's challenge.
    A zero-knowledge variant (issue 7) would add a masking polynomial's round evaluations in
    :meth:`round_message`; nothing else changes.
    """

    def __init__(self, terms):
        if not terms:
            raise ProofError("sumcheck: terms must not be empty")
        self._tables = []  # distinct tables, shared between terms by identity
        self._terms = []  # (coefficient, [table indices])
        positions = {}
        for t, term in enumerate(terms):
            coefficient, factors = _split_term(term, t)
            if not 1 <= len(factors) <= MAX_DEGREE:
                raise ProofError(f"sumcheck: term {t} has {len(factors)} factors, allowed 1..{MAX_DEGREE}")
            indices = []
            for factor in factors:
                if id(factor) not in positions:
                    positions[id(factor)] = len(self._tables)
                    self._tables.append(self._check_table(factor, t))
                indices.append(positions[id(factor)])
            self._terms.append((as_ext_scalar(coefficient, f"coefficient of term {t}"), indices))
        sizes = {table.shape[0] for table in self._tables}
        if len(sizes) != 1:
            raise ProofError(f"sumcheck: all tables must have the same length, got {sorted(sizes)}")
        self.num_vars = num_vars_of(self._tables[0])
        self.degree = max(len(indices) for _, indices in self._terms)
        self.challenges = []
        self._current_sum = None  # the sum over the current tables, once a round message has given it

    @staticmethod
    def _check_table(table, t):
        table = np.asarray(table)
        if table.ndim == 1 and table.dtype.kind in "iu" and table.dtype != np.uint64:
            table = F.to_field(table)  # signed or small integers -> residues mod p
        if table.dtype != np.uint64 or table.ndim not in (1, 2) or (table.ndim == 2 and table.shape[1] != 4):
            raise ProofError(f"sumcheck: factor of term {t} must be a uint64 (n,) or (n, 4) array, "
                             f"got dtype={table.dtype} shape={table.shape}")
        num_vars_of(table)
        if not F.is_canonical(table):
            raise ProofError(f"sumcheck: factor of term {t} has entries >= p (not canonical field elements)")
        return table

    def claimed_sum(self) -> np.ndarray:
        """sum_x sum_t c_t prod f(x) over the current (partially bound) tables."""
        if self._current_sum is not None:
            return self._current_sum
        total = F.ext_zero()
        for coefficient, indices in self._terms:
            product = _product([self._tables[i] for i in indices])
            summed = F.ext_sum(product, axis=0) if is_ext(product) else F.ext_from_base(F.sum_(product))
            total = F.ext_add(total, F.ext_mul(coefficient, summed))
        return total

    def round_message(self) -> np.ndarray:
        """g(X) = sum over the remaining variables with x_j = X, evaluated at X = 0..degree; (degree + 1, 4)."""
        if len(self.challenges) >= self.num_vars:
            raise ProofError("sumcheck: every variable is already bound")
        message = self._round_message_fused()
        if message is None:
            message = self._round_message_numpy()
        self._current_sum = F.ext_add(message[0], message[1])
        return message

    def _round_message_fused(self):
        """The round message by one numba pass per term over the tables; None without numba or for short tables."""
        kernels = F.numba_kernels() if self._tables[0].shape[0] >= F.NUMBA_MIN_SIZE else None
        if kernels is None:
            return None
        message = F.ext_zero((self.degree + 1,))
        sums = np.empty((self.degree + 1, F.EXT_DEGREE), dtype=np.uint64)
        length = self._tables[0].shape[0]
        for coefficient, indices in self._terms:  # one fused pass per term (numba)
            tables = [self._tables[i] for i in indices]
            ext = [t for t in tables if is_ext(t)]
            base = [t for t in tables if not is_ext(t)]
            if not base and len(ext) in (2, 3):  # the common terms: no stacked copy of the tables
                ext = [np.ascontiguousarray(t) for t in ext]
                kernels.product_round_sums(ext[0], ext[1], ext[-1], len(ext) == 3, self.degree, sums)
                message = F.ext_add(message, F.ext_mul(sums, coefficient))
                continue
            ext_factors = _stacked(kernels, ext, (length, F.EXT_DEGREE))
            base_factors = _stacked(kernels, base, (length,))
            kernels.masked_round_sums(ext_factors, np.zeros((len(ext), 1, F.EXT_DEGREE), dtype=np.uint64),
                                      np.zeros(len(ext), dtype=np.int64), base_factors,
                                      np.zeros(self.degree + 1, dtype=np.uint64), self.degree, sums)
            message = F.ext_add(message, F.ext_mul(sums, coefficient))
        return message

    def _round_message_numpy(self) -> np.ndarray:
        """:meth:`round_message` with whole-table numpy operations (the fused kernel's twin)."""
        evaluations = []  # per table: [table restricted to x_j = X for X = 0..degree]
        for table in self._tables:
            low, high = np.ascontiguousarray(table[0::2]), np.ascontiguousarray(table[1::2])
            diff = F.sub(high, low)
            values = [low]
            for _ in range(self.degree):
                values.append(F.add(values[-1], diff))
            evaluations.append(values)
        message = F.ext_zero((self.degree + 1,))
        for coefficient, indices in self._terms:
            for x in range(self.degree + 1):
                product = _product([evaluations[i][x] for i in indices])
                summed = F.ext_sum(product, axis=0) if is_ext(product) else F.ext_from_base(F.sum_(product))
                message[x] = F.ext_add(message[x], F.ext_mul(coefficient, summed))
        return message

    def bind(self, r) -> None:
        """Fix the current variable to the challenge r ((4,) ext): every table halves."""
        r = np.asarray(r, dtype=np.uint64)
        owned = bool(self.challenges)  # after the first bind the tables are this prover's own: folded in place
        self._tables = [fold(table, r, in_place=owned) for table in self._tables]
        self.challenges.append(r)
        self._current_sum = None

    def final_evaluations(self):
        """After all rounds: [[factor value at the point, (4,)] per factor] per term."""
        if len(self.challenges) != self.num_vars:
            raise ProofError(f"sumcheck: {len(self.challenges)} of {self.num_vars} variables bound")
        values = [t[0].copy() if is_ext(t) else F.ext_from_base(t[0]) for t in self._tables]  # (no view of a table)
        return [[values[i] for i in indices] for _, indices in self._terms]


#: the rejection of a round whose message does not add up to the claim it must split
ROUND_SUM_REASON = "the round's g(0) + g(1) does not equal the claimed sum (the statement's, or the last round's g(r))"


class SumcheckVerifier:
    """Interactive verifier: :meth:`check_round` each message, :meth:`bind` each challenge, then :meth:`subclaim`."""

    def __init__(self, claim, num_vars: int, degree: int, where: str = "sumcheck"):
        try:
            self.claim = as_ext_scalar(claim, "claim")
        except ProofError as error:
            raise ProofRejected(str(error), where) from None
        self.num_vars, self.degree, self.where = int(num_vars), int(degree), where
        self.challenges = []
        self._message = None

    def check_round(self, message) -> None:
        """Reject unless message has shape (degree + 1, 4), is canonical and g(0) + g(1) equals the running claim."""
        j = len(self.challenges)
        where = f"{self.where} round {j}"
        if j >= self.num_vars:
            raise ProofRejected("more round messages than variables", where)
        message = np.asarray(message)
        if message.shape != (self.degree + 1, F.EXT_DEGREE) or not F.is_canonical(message):
            raise ProofRejected(f"round message of shape {message.shape}, expected ({self.degree + 1}, 4) "
                                "canonical field elements", where)
        low, high = message[:2].tolist()  # scalar work on Python ints (numpy's per-call overhead dominates)
        if [(a + b) % F.P for a, b in zip(low, high)] != [int(c) for c in self.claim]:
            raise ProofRejected(ROUND_SUM_REASON, where)
        self._message = message

    def bind(self, r) -> None:
        """The running claim becomes g(r) (the message checked last, interpolated from its d + 1 values)."""
        if self._message is None:
            raise ProofError("sumcheck verifier: bind before check_round")
        r = np.asarray(r, dtype=np.uint64)
        self.claim = lagrange_eval(self._message, r)
        self.challenges.append(r)
        self._message = None

    def subclaim(self) -> SubClaim:
        if len(self.challenges) != self.num_vars:
            raise ProofRejected(f"{len(self.challenges)} rounds for {self.num_vars} variables", self.where)
        point = np.array(self.challenges, dtype=np.uint64).reshape(self.num_vars, F.EXT_DEGREE)
        return SubClaim(point, self.claim)


def _absorb_statement(transcript, label, claim, num_vars, degree):
    transcript.absorb(f"{label}.statement", [np.asarray(claim, dtype=np.uint64), int(num_vars), int(degree)])


def prove_sumcheck(terms, claim, transcript, label: str = "sumcheck", *, strict: bool = True):
    """Non-interactive sumcheck (Fiat-Shamir over ``transcript``) of sum_x sum_t c_t prod f(x) = claim.

    ``terms`` is a list of (coefficient, [tables]); tables passed as the same object are folded once. It may
    also be a prover object with :class:`SumcheckProver`'s interface (e.g. :class:`proofs.relations.RelationProver`),
    then with ``strict=False`` (such a prover need not compute its own sum).
    Returns (SumcheckProof, point (k, 4), factor_evals) with ``factor_evals[t][j]`` the j-th factor of term t
    at the point. The caller must send (and absorb) whatever evaluations the verifier will use next.
    A false claim raises ProofError unless ``strict=False`` (proving a tampered witness for negative
    tests: the honest round messages of the true sum then fail the verifier's first round check).
    """
    prover = terms if hasattr(terms, "round_message") else SumcheckProver(terms)
    claim = as_ext_scalar(claim, "claim")
    messages = np.zeros((prover.num_vars, prover.degree + 1, F.EXT_DEGREE), dtype=np.uint64)
    if prover.num_vars:
        messages[0] = prover.round_message()  # then claimed_sum() is g_0(0) + g_0(1), no extra pass
    if strict and not F.ext_eq(prover.claimed_sum(), claim):
        raise ProofError("prove_sumcheck: the claim does not equal the sum of the terms")
    _absorb_statement(transcript, label, claim, prover.num_vars, prover.degree)
    for j in range(prover.num_vars):
        if j:
            messages[j] = prover.round_message()
        transcript.absorb(f"{label}.round", messages[j])
        prover.bind(transcript.challenge_ext(f"{label}.r"))  # error <= degree / p^4 for this round
    point = np.array(prover.challenges, dtype=np.uint64).reshape(prover.num_vars, F.EXT_DEGREE)
    return SumcheckProof(messages), point, prover.final_evaluations()


def verify_sumcheck(proof, claim, num_vars, degree, transcript, label: str = "sumcheck") -> SubClaim:
    """Check a :class:`SumcheckProof` against ``claim``; raises ProofRejected; returns the SubClaim to settle."""
    num_vars, degree = int(num_vars), int(degree)
    messages = getattr(proof, "round_messages", None)
    if not isinstance(messages, np.ndarray) or messages.shape != (num_vars, degree + 1, F.EXT_DEGREE):
        shape = getattr(messages, "shape", None)
        raise ProofRejected(f"round messages of shape {shape}, expected ({num_vars}, {degree + 1}, 4)", label)
    verifier = SumcheckVerifier(claim, num_vars, degree, where=label)
    _absorb_statement(transcript, label, verifier.claim, num_vars, degree)
    for message in messages:
        verifier.check_round(message)
        transcript.absorb(f"{label}.round", message)
        verifier.bind(transcript.challenge_ext(f"{label}.r"))
    return verifier.subclaim()
