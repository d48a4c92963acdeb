"""Hiding Basefold: a zero-knowledge batched opening of linear functionals of committed tables.

**Construction.** A table f of 2^n base values is committed (:func:`proofs.basefold.commit`) as the table C of
v + m variables whose v LOWEST variables select one of 2^v slots, C[c + 2^v x] = S_c[x] (x < 2^m), with
S_0 = (f || T): f on x < 2^n and a uniform tail T on 2^n <= x < 2^m, and S_1, ..., S_(2^v - 1) uniform. A
claim sum_x W(x) f(x) = y becomes sum_x W'(x) C(x) = y with W'(c, x) = [c = 0] W(x) (zero on T): the value
is unchanged, and the claims of a batch are opened by ONE :func:`proofs.basefold.open_batch` over the C's.

**Why it hides** (honest verifier, BLAKE2b a random oracle; the masking-polynomial argument of Libra, Xie et
al., CRYPTO 2019, section 4, and of zk-Basefold-style randomised encodings, e.g. Hyperplonk/"zkBaseFold"
discussions, and of Ligero's random-tail encoding, Ames et al., CCS 2017, section 4, here for a foldable code).
Everything the opening shows is a linear function of C at fresh challenges:
(1) the claim-reduction and opening sumchecks bind C's slot variables first (each table's own lowest
variables); after them table k is h_k = sum_c eq(r, c) S_c = eq(r, 0) S_0 + R'_k, and R'_k = sum_(c >= 1)
eq(r, c) S_c is uniform in F_p4 per entry as soon as four of the weights eq(r, c), c >= 1, are F_p-linearly
independent (except w.p. <= 2^v / |F_p4| over r). Every later message, the evaluations y_k = C~_k(r_k), the
final table and every opened coset of the folded layers are functions of the uniform h_k's: simulatable by
drawing the h_k's uniformly. During the v slot rounds each message is a claim value (public) plus
functionals of the random slots with nonzero weight (uniform).
(2) the opened leaves of C's own codeword: a coset of 2^b points {y zeta^i} of the RS code of C's coefficient
vector gives the slot encodings G_c(y^(2^v)) (or, interleaved, each row's symbols); S_0's are uniform because
its message has 2^m - 2^n random coefficients (the tail: any <= that many evaluations of a polynomial with
that many uniform top coefficients are uniform, Vandermonde), and :func:`slot_vars` and :func:`tail_vars`
choose v and m so that ``openings`` x queries x (symbols per query) <= the tail, and the random slots keep
>= 5 F_p dimensions per entry beyond the 4 per opening that the h_k use (>= 155 bits of min-entropy in every
unopened leaf: its Merkle digest, a random oracle's output, reveals nothing; the leaves need no salt).

**Queries tolerated.** One opening reveals num_queries cosets; the tail is sized for ``openings`` openings
(:attr:`HidingBasefoldParams.openings`): a commitment opened more often would reveal more of S_0's encoding
than T hides, and two h_k's of one commitment reveal 8 F_p combinations of its 2^v slots per entry, so
2^v - 1 >= 4 openings + 5. The prover refuses an opening beyond ``openings`` (:meth:`HidingBasefoldWitness.spend`).
Reuse across many proofs therefore goes through K copies (:mod:`proofs.layers.reusable`), each opened
``openings = 2`` times (its agreement proof and its one proof).

Soundness is Basefold's (:func:`proofs.basefold.batch_security_bits` over the C's): the slot layout only
changes the weights.

**Masked sumchecks** (:class:`MaskedSumcheckProof`): Libra's zero-knowledge sumcheck (section 4.1) whose mask g
was committed with the proof's stores before any challenge; g(sigma) is not opened on its own but stated and
settled in the proof's one batch (:mod:`proofs.layers.basefold_channel`).

**Cost and limits.** C is 2^(v + m) >= 8-32 times the table (the random slots), so commit and encode time grow
by that factor; a table needs v + m <= 27 - log2(rate_inv) (BabyBear's 2-adic subgroup): at rate 1/8 hidden
tables of up to about 2^19 entries (a 784->128->10 training step at batch 64 packs 2^23 in one store: refused
by :func:`shape`). Measured (16->16->4 network proof, batch 1): 133-140 KB, against 605 KB for hiding Ligero.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field as dataclass_field

import numpy as np

from . import basefold as B
from . import field as F
from .commit import committed_table
from .errors import ProofError, ProofRejected
from .sumcheck import SubClaim, SumcheckProof, SumcheckVerifier, _as_ext_scalar
from .zk import _mask_round, _poly_at, mask_sum

MAX_OPENINGS = 8
SPARE_DIMS = 5  #: random slot dimensions per entry beyond the openings' 4 each (5 x 31 >= 128 bits per leaf)
_MAGIC, _VERSION = b"HZKBFH01", 1


def slot_vars(openings: int) -> int:
    """The fewest slot variables v with 2^v - 1 >= 4 openings + SPARE_DIMS random slots (:func:`shape` may use
    more, for short interleaved rows)."""
    return (4 * openings + SPARE_DIMS).bit_length()


@dataclass(frozen=True)
class HidingBasefoldParams:
    """The Basefold code (``base``) and how many openings a commitment stays hiding for (in [1, 8])."""

    base: B.BasefoldParams = B.BasefoldParams()
    openings: int = 1

    def __post_init__(self):
        if not isinstance(self.base, B.BasefoldParams):
            raise ProofError(f"HidingBasefoldParams: base must be BasefoldParams, got {type(self.base).__name__}")
        if isinstance(self.openings, bool) or not isinstance(self.openings, (int, np.integer)) \
                or not 1 <= self.openings <= MAX_OPENINGS:
            raise ProofError(f"HidingBasefoldParams: openings={self.openings!r} not in [1, {MAX_OPENINGS}]")
        object.__setattr__(self, "openings", int(self.openings))

    @property
    def slot_vars(self) -> int:
        return slot_vars(self.openings)

    @property
    def target_bits(self) -> float:
        """The code's query bits (as :attr:`proofs.zk.HidingParams.target_bits`)."""
        return self.base.query_bits

    @property
    def hiding(self) -> bool:
        """Always True (as :attr:`proofs.zk.HidingParams.hiding` for the hiding Ligero stores)."""
        return True


def _revealed(params: HidingBasefoldParams, v: int, m: int):
    """(S_0 symbols one query reveals per sub-row of S_0, sub-rows, leaf values one query reveals) for 2^v slots
    of m variables: with s interleaved rows and leaf cosets of 2^b points (g of them a leaf)."""
    base = params.base
    n_c = v + m
    s = base.interleave(n_c)
    first = n_c - s
    block = base.block(first)
    group = B._leaf_group((1 << block) << s, ((1 << first) * base.rate_inv) >> block)
    if s >= v:  # S_0 is 2^(s - v) rows, each RS-encoded: every opened symbol of a row counts
        return group << block, 1 << (s - v), (group << block) << s
    if block + s < v:  # a coset's 2^b values are independent combinations of the row's 2^(v - s) > 2^b slot
        return 0, 1, (group << block) << s  # encodings at one point, 2^(v - s) - 1 of them random: S_0 unseen
    # row 0 holds the slots c = 0 mod 2^s as Y^c' G(Y^(2^(v - s))): a coset shows G_0 at 2^(b - v + s) points
    return group << max(0, block - (v - s)), 1, (group << block) << s


def _fits(num_vars: int, params: HidingBasefoldParams, v: int, m: int) -> bool:
    """The tail hides every opening's symbols of S_0, and the random slots keep SPARE_DIMS dimensions per entry
    beyond the openings' 4 each and the leaves' revealed values (per interleaved row)."""
    queries, openings = params.base.num_queries, params.openings
    if v + m <= params.base.final_vars:  # a table that small would be sent whole: S_0 = (f || T) in the clear
        return False
    spare = (1 << v) - 1 - 4 * openings
    per_row, rows, leaf = _revealed(params, v, m)
    return openings * queries * per_row <= ((1 << m) - (1 << num_vars)) // rows \
        and (spare - SPARE_DIMS) * (1 << m) >= openings * queries * leaf


@functools.lru_cache(maxsize=256)
def shape(num_vars: int, params: HidingBasefoldParams) -> tuple:
    """(v, m): the slot table of a hidden table of num_vars variables, 2^v slots of 2^m entries, the smallest
    v + m (then the fewest slots) satisfying :func:`_fits`."""
    low = slot_vars(params.openings)
    for total in range(num_vars + low, B._max_vars(params.base) + 1):
        for v in range(low, total - num_vars + 1):
            if _fits(num_vars, params, v, total - v):
                return v, total - v
    raise ProofError(f"hiding basefold: no slot table for num_vars={num_vars} at rate 1/{params.base.rate_inv}")


def tail_vars(num_vars: int, params: HidingBasefoldParams) -> int:
    """m of :func:`shape`."""
    return shape(num_vars, params)[1]


def inner_vars(num_vars: int, params: HidingBasefoldParams) -> int:
    """v + m: the variables of the committed slot table."""
    return sum(shape(num_vars, params))


@dataclass(frozen=True)
class HidingBasefoldCommitment:
    """The Basefold commitment of the slot table C, the hidden table's num_vars and the openings it hides."""

    inner: B.BasefoldCommitment
    num_vars: int
    openings: int

    def __post_init__(self):
        if not isinstance(self.inner, B.BasefoldCommitment):
            raise ProofError("HidingBasefoldCommitment: inner must be a BasefoldCommitment")
        params = self.params  # validates openings
        if not isinstance(self.num_vars, (int, np.integer)) or not 0 <= self.num_vars <= B._max_vars(params.base):
            raise ProofError(f"HidingBasefoldCommitment: num_vars={self.num_vars!r} out of range")
        expected = inner_vars(int(self.num_vars), params)
        if self.inner.num_vars != expected:
            raise ProofError(f"HidingBasefoldCommitment: inner num_vars={self.inner.num_vars}, expected {expected}")
        object.__setattr__(self, "num_vars", int(self.num_vars))

    @property
    def params(self) -> HidingBasefoldParams:
        return HidingBasefoldParams(self.inner.params, self.openings)

    @property
    def root(self) -> bytes:
        return self.inner.root

    @property
    def security_bits(self) -> float:
        return self.inner.security_bits

    def to_bytes(self) -> bytes:
        """magic, version, num_vars (u8), openings (u8), the inner Basefold commitment's bytes."""
        return _MAGIC + bytes([_VERSION, self.num_vars, self.openings]) + self.inner.to_bytes()

    @classmethod
    def read(cls, reader) -> "HidingBasefoldCommitment":
        if reader.raw(len(_MAGIC)) != _MAGIC or reader.uint(1) != _VERSION:
            raise ProofRejected("bad magic or version of a hiding Basefold commitment", reader.where)
        num_vars, openings = reader.uint(1), reader.uint(1)
        size = len(B.BasefoldCommitment(b"\0" * B.DIGEST_SIZE, 0).to_bytes())
        inner = B.BasefoldCommitment.from_bytes(reader.raw(size))
        try:
            return cls(inner, num_vars, openings)
        except ProofError as error:
            raise ProofRejected(str(error), reader.where) from None

    @classmethod
    def from_bytes(cls, data) -> "HidingBasefoldCommitment":
        reader = F.ByteReader(data, where="hiding basefold commitment")
        out = cls.read(reader)
        reader.finish()
        return out


@dataclass(frozen=True, eq=False)
class HidingBasefoldWitness:
    """The prover's side: the hidden table, the inner witness (of C) and the openings spent (mutable)."""

    commitment: HidingBasefoldCommitment
    table: np.ndarray
    inner: B.BasefoldWitness
    spent: list = dataclass_field(default_factory=list, repr=False)

    def spend(self, where: str) -> None:
        """Count one opening; ProofError past ``openings`` (zero knowledge would be lost)."""
        if len(self.spent) >= self.commitment.openings:
            raise ProofError(f"{where}: this hiding commitment was made for openings={self.commitment.openings} "
                             "and is spent: another opening would reveal the committed values")
        self.spent.append(1)


def slot_table(table: np.ndarray, num_vars: int, params: HidingBasefoldParams, rng=None) -> np.ndarray:
    """C of the module docstring: (2^(v + m),) with C[c + 2^v x] = S_c[x], S_0 = (f || T), S_c>0 uniform."""
    v, m = shape(num_vars, params)
    slots = F.random_elements((1 << m, 1 << v)) if rng is None else \
        rng.integers(0, F.P, size=(1 << m, 1 << v), dtype=np.uint64)
    slots[:1 << num_vars, 0] = table
    return slots.reshape(-1)


def commit(values, params: HidingBasefoldParams = HidingBasefoldParams(), seed=None):
    """Hiding commitment to base-field ``values`` (zero-padded to 2^n) -> (HidingBasefoldCommitment, witness).
    ``seed``: tests only (the tail and random slots reproducible)."""
    if not isinstance(params, HidingBasefoldParams):
        raise ProofError(f"basefold_zk.commit: params must be HidingBasefoldParams, got {type(params).__name__}")
    table, num_vars = committed_table(values, "basefold_zk.commit")
    rng = None if seed is None else np.random.default_rng(seed)
    inner_commitment, inner = B.commit(slot_table(table, num_vars, params, rng), params.base)
    commitment = HidingBasefoldCommitment(inner_commitment, num_vars, params.openings)
    return commitment, HidingBasefoldWitness(commitment, table, inner)


def lift(claim, commitment: HidingBasefoldCommitment) -> B.Functional:
    """The claim (a point (n, 4) or a Functional of n variables) on C: W'(c, x) = [c = 0] W(x), zero on T."""
    n, v = commitment.num_vars, shape(commitment.num_vars, commitment.params)[0]
    top = commitment.inner.num_vars - v - n
    if not isinstance(claim, B.Functional):
        claim = B.Functional.point(claim)
    if claim.num_vars != n:
        raise ProofError(f"a claim of {claim.num_vars} variables on a table of {n}")
    terms = tuple((a, np.concatenate([F.ext_zero((v,)), lo]), dense, np.concatenate([hi, F.ext_zero((top,))]))
                  for a, lo, dense, hi in claim.terms)
    return B.Functional(commitment.inner.num_vars, terms)


def _claims(claims, num_vars: int, error, where: str) -> list:
    if isinstance(claims, np.ndarray):
        return list(B._check_points(claims, num_vars, error, where))
    return B._check_functionals(claims, num_vars, error, where)


def open_batch(witnesses, claims_list, transcript, values=None):
    """Zero-knowledge opening of every claim (points (m_k, n_k, 4) or lists of Functionals) of every witness in
    one Basefold batch -> (values list, BasefoldProof). Each witness spends one of its openings."""
    witnesses = list(witnesses)
    if not witnesses or len(witnesses) != len(claims_list):
        raise ProofError(f"basefold_zk.open_batch: {len(witnesses)} witnesses for {len(claims_list)} claim sets")
    if not all(isinstance(w, HidingBasefoldWitness) for w in witnesses):
        raise ProofError("basefold_zk.open_batch: expected HidingBasefoldWitnesses")
    lifted = []
    for w, claims in zip(witnesses, claims_list):
        claims = _claims(claims, w.commitment.num_vars, lambda m, _: ProofError(m), "")
        lifted.append([lift(c, w.commitment) for c in claims])
    if values is None:
        values = [np.stack([B._dot_base(B._claim_table(c, w.commitment.num_vars), w.table) for c in
                            _claims(claims, w.commitment.num_vars, lambda m, _: ProofError(m), "")])
                  if len(claims) else F.ext_zero((0,)) for w, claims in zip(witnesses, claims_list)]
    for w in witnesses:
        w.spend("basefold_zk.open_batch")
    _, proof = B.open_batch([w.inner for w in witnesses], lifted, transcript, values)
    return [np.asarray(v, dtype=np.uint64).reshape(-1, F.EXT_DEGREE) for v in values], proof


def verify_batch(commitments, claims_list, values_list, proof, transcript,
                 min_security_bits: float = B.MIN_VERIFY_BITS, *, allow_conjectured: bool = False) -> None:
    """Raise ProofRejected unless ``proof`` shows every claim of every hiding commitment takes its value."""
    where = "hiding basefold opening"
    commitments, claims_list = list(commitments), list(claims_list)
    if not commitments or len(commitments) != len(claims_list) \
            or not all(isinstance(c, HidingBasefoldCommitment) for c in commitments):
        raise ProofRejected("expected one claim set per HidingBasefoldCommitment", where)
    try:
        lifted = [[lift(c, k) for c in _claims(claims, k.num_vars, ProofRejected, where)]
                  for k, claims in zip(commitments, claims_list)]
    except ProofRejected:
        raise
    except Exception as exc:
        raise ProofRejected(f"malformed claims: {type(exc).__name__}: {exc}", where) from None
    B.verify_batch([c.inner for c in commitments], lifted, values_list, proof, transcript, min_security_bits,
                   allow_conjectured=allow_conjectured)


# ------------------------------------------------------------------------------------ masked sumcheck
@dataclass(frozen=True, eq=False)
class MaskedSumcheckProof:
    """A zero-knowledge sumcheck whose mask g was committed with the proof's stores: the sum G of g, the round
    messages of f + rho g and g(sigma) (opened in the proof's batch)."""

    mask_sum: np.ndarray
    sumcheck: SumcheckProof
    mask_eval: np.ndarray

    def to_bytes(self) -> bytes:
        return (F.elements_to_bytes(self.mask_sum) + F.elements_to_bytes(self.sumcheck.round_messages)
                + F.elements_to_bytes(self.mask_eval))

    @classmethod
    def read(cls, reader) -> "MaskedSumcheckProof":
        total, messages, value = reader.elements(1), reader.elements(3), reader.elements(1)
        return cls(total, SumcheckProof(messages), value)


def _statement(transcript, label, claim, num_vars, degree, total):
    transcript.absorb(f"{label}.zk.statement", [np.asarray(claim, dtype=np.uint64), int(num_vars), int(degree),
                                                 np.asarray(total, dtype=np.uint64)])
    return transcript.challenge_ext(f"{label}.zk.rho")  # error 1 / p^4 (g was committed before)


def prove_masked(prover, claim, transcript, label: str, coefficients):
    """Libra's zero-knowledge sumcheck with the committed mask ``coefficients`` (n, d + 1, 4: F_p4,
    :func:`proofs.zk.random_mask`) -> (MaskedSumcheckProof, point, factor evaluations)."""
    claim = _as_ext_scalar(claim, "claim")
    k, d = prover.num_vars, prover.degree
    total = mask_sum(coefficients)
    rho = _statement(transcript, label, claim, k, d, total)
    messages = np.zeros((k, d + 1, F.EXT_DEGREE), dtype=np.uint64)
    prefix = F.ext_zero()
    for j in range(k):
        masked = F.ext_mul(_mask_round(coefficients, j, prefix, k, d), rho[None, :])
        messages[j] = F.ext_add(prover.round_message(), masked)
        transcript.absorb(f"{label}.round", messages[j])
        r = transcript.challenge_ext(f"{label}.r")  # error <= degree / p^4 per round
        prover.bind(r)
        prefix = F.ext_add(prefix, _poly_at(coefficients[j], r))
    point = np.array(prover.challenges, dtype=np.uint64).reshape(k, F.EXT_DEGREE)
    transcript.absorb(f"{label}.zk.mask_eval", prefix)
    return MaskedSumcheckProof(total, SumcheckProof(messages), prefix), point, prover.final_evaluations()


def verify_masked(proof, claim, num_vars: int, degree: int, transcript, label: str) -> SubClaim:
    """Check the rounds of a :class:`MaskedSumcheckProof`; the SubClaim on f alone (expected - rho g(sigma)).
    g(sigma) = proof.mask_eval is the caller's claim on the mask store."""
    if not isinstance(proof, MaskedSumcheckProof):
        raise ProofRejected(f"expected a MaskedSumcheckProof, got {type(proof).__name__}", label)
    messages = getattr(proof.sumcheck, "round_messages", None)
    if not isinstance(messages, np.ndarray) or messages.shape != (num_vars, degree + 1, F.EXT_DEGREE) \
            or not F.is_canonical(messages):
        raise ProofRejected(f"round messages of shape {getattr(messages, 'shape', None)}, expected "
                            f"({num_vars}, {degree + 1}, 4)", label)
    for name in ("mask_sum", "mask_eval"):
        value = getattr(proof, name)
        if not isinstance(value, np.ndarray) or value.shape != (4,) or not F.is_canonical(value):
            raise ProofRejected(f"{name} is not a canonical F_p4 element", label)
    rho = _statement(transcript, label, claim, num_vars, degree, proof.mask_sum)
    verifier = SumcheckVerifier(F.ext_add(claim, F.ext_mul(rho, proof.mask_sum)), num_vars, degree, where=label)
    for message in messages:
        verifier.check_round(message)
        transcript.absorb(f"{label}.round", message)
        verifier.bind(transcript.challenge_ext(f"{label}.r"))
    sub = verifier.subclaim()
    transcript.absorb(f"{label}.zk.mask_eval", proof.mask_eval)
    return SubClaim(sub.point, F.ext_sub(sub.expected_value, F.ext_mul(rho, proof.mask_eval)))
