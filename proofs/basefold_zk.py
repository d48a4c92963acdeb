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

**Tail layout** (``HidingBasefoldParams(layout="tail")``; O(1) overhead, for large tables). A table of at least
TAIL_MIN_VARS variables gets ONE random slot (v = 1): C[2x] = S_0[x], C[2x + 1] = S_1[x], S_1 uniform, S_0 =
(f || T) with T the table's own free end when the caller names one (``free``: entries no claim weighs, e.g. a
store's unused end) and a second half otherwise (2-4x instead of 16-32x). One slot cannot make a folded entry
uniform in F_p4 by itself (a base value times an F_p4 weight spans a line), so the batch is opened differently
(:func:`open_batch`, :class:`MaskedBatchProof`):
(1) the prover commits a fresh uniform mask table R (:func:`mask_vars`: >= 4x the coefficients of Libra's g,
>= 2^(final_vars + 3), and twice what R's own opening shows); g (degree 2 per variable) is read from R's first
entries;
(2) the claims are reduced to one point r by Libra's zero-knowledge sumcheck of sum_k 2^(n - n_k) sum_x
W_k(x) C_k(x) + rho g (the rounds of :func:`proofs.basefold._reduce_claims`, masked): every message is uniform
given the claim (Libra, Xie et al., CRYPTO 2019, theorem 4); the prover states y_k = C_k~(r_k) (uniform: S_1~
at an F_p4 point, and S_0's tail) and g(r);
(3) one :func:`proofs.basefold.open_batch` of every C_k at r_k (suffixes of r: aligned, so that batch has no
claim reduction of its own and its opening sumcheck starts at r), and a second, of R alone, at g's functional
(value g(r)) and at a fresh point (value R~(u)): the second claim spreads that batch's claim reduction over all
of R (with g's functional alone its rounds show partial sums of g's coefficients, which unmask (2)'s messages);
R is large enough that what its batch shows leaves g's coefficients uniform (:func:`mask_vars`).
Why (3) hides, for fixed challenges (everything the verifier sees is then F_p-linear in (f, T, S_1, R)):
every sumcheck binds C's lowest variable (the slot) first, so no later round, evaluation or fold separates S_0
from S_1; each committed table folds at least 3 times before the first committed layer (:func:`_fits_tail`:
rows, then the first block), so every folded entry the opening shows (layer leaves, final table) carries 4
values of S_1 with F_p-independent weights eq(r_<3, (1, .)) (uniform in F_p4), and smaller tables join a
combined table that is already so; the opened leaves of C's own codeword are S_0's rows (hidden by T, the
slot layout's Vandermonde argument with v = 1) and S_1's rows (uniform: every leaf holds S_1 symbols, so an
unopened leaf's digest has far more than SPARE_DIMS x 31 bits of min-entropy). Per-entry uniformity is the
sufficient condition for what the batch shows entry by entry; the rest (round messages, codeword values) are
F_p4 combinations over whole tables, independent of it generically. The argument is
checked by linear algebra (tests/proofs/test_basefold_zk_tail.py): with the challenges held fixed, a change
of f that no claim sees lies in the column space of the randomness's contribution to the whole view (and
does not without S_1 and T; the check caught two leaks of earlier layouts: a tail selected by the TOP
variable, whose last sumcheck round separates f from T, and an R opened at g's functional alone).
Soundness: Basefold's two batches, over the C's and over R (:func:`verified_bits`), plus (2)'s rounds
and rho, (2 n + 1) / |F_p4| (:func:`batch_error`); R's commitment is absorbed before (2)'s first challenge, so
g is fixed before rho; a prover's own R (not uniform) only costs it zero knowledge.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field as dataclass_field

import numpy as np

from . import basefold as B
from . import field as F
from .commit import committed_table
from .errors import ProofError, ProofRejected
from .mle import eq_table, fold
from .sumcheck import SubClaim, SumcheckProof, SumcheckVerifier, as_ext_scalar
from .zk import mask_round, poly_at, powers_table, mask_entries, mask_sum

MAX_OPENINGS = 8
#: "slots": every table hides on its own (random slots, 16x its size); "tail": tables of >= TAIL_MIN_VARS variables
#: carry a random tail only and every batch opening commits one random mask table (:func:`open_batch`)
LAYOUTS = ("slots", "tail")
TAIL_MIN_VARS = 16  #: smaller tables keep their slots in the "tail" layout (module docstring, "Tail layout")
TAIL_VALUES = 2  #: values an opening states of each table in the tail layout (its reduction's and its batch's)
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
    layout: str = "slots"

    def __post_init__(self):
        if not isinstance(self.base, B.BasefoldParams):
            raise ProofError(f"HidingBasefoldParams: base must be BasefoldParams, got {type(self.base).__name__}")
        if isinstance(self.openings, bool) or not isinstance(self.openings, (int, np.integer)) \
                or not 1 <= self.openings <= MAX_OPENINGS:
            raise ProofError(f"HidingBasefoldParams: openings={self.openings!r} not in [1, {MAX_OPENINGS}]")
        if self.layout not in LAYOUTS:
            raise ProofError(f"HidingBasefoldParams: layout={self.layout!r} not in {LAYOUTS}")
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
    group = B.leaf_group((1 << block) << s, ((1 << first) * base.rate_inv) >> block)
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


def _fits_tail(num_vars: int, params: HidingBasefoldParams, m: int, free: int = 0) -> bool:
    """The "tail" layout's one random slot (v = 1) and S_0 = (f || T) of m variables: T (2^m - 2^num_vars entries,
    plus the table's ``free`` last ones) hides, per interleaved row of S_0, every opening's revealed symbols of
    S_0's codeword and its stated values (TAIL_VALUES F_p4 values, 4 base dimensions each) with SPARE_DIMS to
    spare; the committed table folds at least 3 times (rows, then the first layer's block) before its first
    committed layer, so that every folded entry the batch shows carries 4 random values of S_1 (module
    docstring, "Tail layout")."""
    base = params.base
    if m + 1 <= base.final_vars:
        return False
    rows = base.interleave(m + 1)
    if rows + base.block(m + 1 - rows) < 3:
        return False
    per_row, s0_rows, _ = _revealed(params, 1, m)
    need = params.openings * (base.num_queries * per_row + F.EXT_DEGREE * TAIL_VALUES) + SPARE_DIMS
    return need <= ((1 << m) - (1 << num_vars) + free) // s0_rows


@functools.lru_cache(maxsize=256)
def shape(num_vars: int, params: HidingBasefoldParams, free: int = 0) -> tuple:
    """(v, m): the slot table of a hidden table of num_vars variables, 2^v slots of 2^m entries, the smallest
    v + m (then the fewest slots) satisfying :func:`_fits`; in the "tail" layout a table of at least
    TAIL_MIN_VARS variables is (1, m) when it fits (:func:`_fits_tail`): one random slot and S_0 = (f || T), T
    the table's own ``free`` last entries (m = num_vars: entries no claim weighs become random) or a second
    half (m = num_vars + 1); else the slot layout's shape."""
    if params.layout == "tail" and num_vars >= TAIL_MIN_VARS:
        # one random slot; S_0's tail is the table's own free end, else a second half
        for m in (num_vars, num_vars + 1):
            if m + 1 <= B.max_vars(params.base) and _fits_tail(num_vars, params, m, free if m == num_vars else 0):
                return 1, m
    low = slot_vars(params.openings)
    for total in range(num_vars + low, B.max_vars(params.base) + 1):
        for v in range(low, total - num_vars + 1):
            if _fits(num_vars, params, v, total - v):
                return v, total - v
    raise ProofError(f"hiding basefold: no slot table for num_vars={num_vars} at rate 1/{params.base.rate_inv}")


def tail_reserve(num_vars: int, params: HidingBasefoldParams) -> int:
    """Entries a table of num_vars variables keeps free at its end so that the tail layout finds S_0's tail
    there (no second half, :func:`shape`): the fewest (a power of two), or 0 outside the tail layout."""
    if params.layout != "tail" or num_vars < TAIL_MIN_VARS:
        return 0
    free = 1
    while free < 1 << (num_vars - 1) and shape(num_vars, params, free) != (1, num_vars):
        free *= 2
    return free


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
    layout: str = "slots"

    def __post_init__(self):
        if not isinstance(self.inner, B.BasefoldCommitment):
            raise ProofError("HidingBasefoldCommitment: inner must be a BasefoldCommitment")
        params = self.params  # validates openings
        if not isinstance(self.num_vars, (int, np.integer)) or not 0 <= self.num_vars <= B.max_vars(params.base):
            raise ProofError(f"HidingBasefoldCommitment: num_vars={self.num_vars!r} out of range")
        n = int(self.num_vars)
        allowed = {inner_vars(n, params)}
        if params.layout == "tail" and n >= TAIL_MIN_VARS:  # one slot; S_0's tail in f's free end (up to half of
            # it: the most a prover can name) or a second half
            allowed |= {1 + m for m, free in ((n, 1 << (n - 1)), (n + 1, 0)) if shape(n, params, free) == (1, m)}
        if self.inner.num_vars not in allowed:
            raise ProofError(f"HidingBasefoldCommitment: inner num_vars={self.inner.num_vars}, expected one of "
                             f"{sorted(allowed)}")
        object.__setattr__(self, "num_vars", int(self.num_vars))

    @property
    def params(self) -> HidingBasefoldParams:
        return HidingBasefoldParams(self.inner.params, self.openings, self.layout)

    @property
    def root(self) -> bytes:
        return self.inner.root

    @property
    def security_bits(self) -> float:
        return self.inner.security_bits

    def to_bytes(self) -> bytes:
        """magic, version (1: slots; 2: then the layout's index, u8), num_vars (u8), openings (u8), the inner
        Basefold commitment's bytes."""
        version = bytes([_VERSION]) if self.layout == "slots" else bytes([_VERSION + 1, LAYOUTS.index(self.layout)])
        return _MAGIC + version + bytes([self.num_vars, self.openings]) + self.inner.to_bytes()

    @classmethod
    def read(cls, reader) -> "HidingBasefoldCommitment":
        if reader.raw(len(_MAGIC)) != _MAGIC:
            raise ProofRejected("bad magic of a hiding Basefold commitment", reader.where)
        version = reader.uint(1)
        if version not in (_VERSION, _VERSION + 1):
            raise ProofRejected(f"hiding Basefold commitment version {version} unknown", reader.where)
        index = 0 if version == _VERSION else reader.uint(1)
        if version == _VERSION + 1 and not 1 <= index < len(LAYOUTS):
            raise ProofRejected(f"hiding Basefold layout {index} unknown", reader.where)
        num_vars, openings = reader.uint(1), reader.uint(1)
        inner = B.BasefoldCommitment.read(reader)  # its version gives its length
        try:
            return cls(inner, num_vars, openings, LAYOUTS[index])
        except ProofError as error:
            raise ProofRejected(str(error), reader.where) from None

    @classmethod
    def from_bytes(cls, data) -> "HidingBasefoldCommitment":
        return _whole(cls, data, "hiding basefold commitment")


def _whole(cls, data, where: str):
    """cls.read over all of ``data`` (ProofRejected on trailing or missing bytes)."""
    reader = F.ByteReader(data, where=where)
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


def slot_table(table: np.ndarray, num_vars: int, params: HidingBasefoldParams, rng=None, free: int = 0) -> np.ndarray:
    """C of the module docstring: (2^(v + m),) with C[c + 2^v x] = S_c[x], S_0 = (f || T), S_c>0 uniform; in the
    tail layout T includes f's ``free`` last entries."""
    v, m = shape(num_vars, params, free)
    slots = F.random_elements((1 << m, 1 << v)) if rng is None else \
        rng.integers(0, F.P, size=(1 << m, 1 << v), dtype=np.uint64)
    kept = (1 << num_vars) - (free if params.layout == "tail" and m == num_vars else 0)
    slots[:kept, 0] = table[:kept]
    return slots.reshape(-1)


def commit(values, params: HidingBasefoldParams = HidingBasefoldParams(), seed=None, free: int = 0):
    """Hiding commitment to base-field ``values`` (zero-padded to 2^n) -> (HidingBasefoldCommitment, witness).
    ``free``: how many last entries of the 2^n no claim will weigh (the tail layout makes them random instead
    of doubling the table: the caller's promise, e.g. a store's unused end). ``seed``: tests only (the tail and
    random slots reproducible)."""
    if not isinstance(params, HidingBasefoldParams):
        raise ProofError(f"basefold_zk.commit: params must be HidingBasefoldParams, got {type(params).__name__}")
    table, num_vars = committed_table(values, "basefold_zk.commit")
    if isinstance(free, bool) or not isinstance(free, (int, np.integer)) or not 0 <= free <= (1 << num_vars) \
            or np.any(table[(1 << num_vars) - free:]):
        raise ProofError(f"basefold_zk.commit: free={free!r} must be an int in [0, {1 << num_vars}] counting zero "
                         "entries at the end of the table")
    rng = None if seed is None else np.random.default_rng(seed)
    slots = slot_table(table, num_vars, params, rng, int(free))
    v = shape(num_vars, params, int(free))[0]
    if params.layout == "tail" and free:  # claims read S_0, whose tail may lie in the table's free end
        table = slots[::1 << v][:1 << num_vars]
    inner_commitment, inner = B.commit_owned(slots, params.base)  # slots: fresh, canonical, 2^(v + m)
    commitment = HidingBasefoldCommitment(inner_commitment, num_vars, params.openings, params.layout)
    return commitment, HidingBasefoldWitness(commitment, table, inner)


def slots_of(commitment: HidingBasefoldCommitment) -> int:
    """v of a commitment: one slot for a tail-layout table (at most 2 more variables than the table), else the
    slot layout's (at least 4 more)."""
    n, extra = commitment.num_vars, commitment.inner.num_vars - commitment.num_vars
    if commitment.layout == "tail" and n >= TAIL_MIN_VARS and extra <= 2:
        return 1
    return shape(n, commitment.params)[0]


def lift(claim, commitment: HidingBasefoldCommitment) -> B.Functional:
    """The claim (a point (n, 4) or a Functional of n variables) on C: W'(c, x) = [c = 0] W(x), zero on T."""
    n, v = commitment.num_vars, slots_of(commitment)
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
        return list(B.check_points(claims, num_vars, error, where))
    return B.check_functionals(claims, num_vars, error, where)


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
        values = [np.stack([B.dot_base(B.claim_table(c, w.commitment.num_vars), w.table) for c in
                            _claims(claims, w.commitment.num_vars, lambda m, _: ProofError(m), "")])
                  if len(claims) else F.ext_zero((0,)) for w, claims in zip(witnesses, claims_list)]
    layouts = {w.commitment.layout for w in witnesses}
    if len(layouts) != 1:
        raise ProofError(f"basefold_zk.open_batch: commitments of layouts {sorted(layouts)} in one batch")
    for w in witnesses:
        w.spend("basefold_zk.open_batch")
    if "tail" in layouts:
        proof = _open_masked([w.inner for w in witnesses], lifted, values, transcript)
    else:
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
    if {c.layout for c in commitments} != {commitments[0].layout}:
        raise ProofRejected("commitments of different layouts in one batch", where)
    if commitments[0].layout == "tail":
        try:
            _verify_masked([c.inner for c in commitments], lifted, values_list, proof, transcript,
                           min_security_bits, allow_conjectured)
        except ProofRejected:
            raise
        except Exception as exc:  # a malformed object must never escape as another exception
            raise ProofRejected(f"malformed input: {type(exc).__name__}: {exc}", where) from None
        return
    B.verify_batch([c.inner for c in commitments], lifted, values_list, proof, transcript, min_security_bits,
                   allow_conjectured=allow_conjectured)


# ------------------------------------------------------------------------- tail layout: masked batch
_MASKED_MAGIC, _MASKED_VERSION = b"HZKBFM01", 2
_REDUCTION_LABEL = "basefold_zk.reduction"


@dataclass(frozen=True, eq=False)
class MaskedBatchProof:
    """A "tail" layout batch opening: the commitment of the mask table R, the masked claim reduction (Libra,
    its g read from R), each table's value at the reduced point, and the Basefold batch opening of the tables
    at those points and of R at g's functional."""

    mask: B.BasefoldCommitment
    reduction: MaskedSumcheckProof
    evals: np.ndarray
    mask_value: np.ndarray
    opening: B.BasefoldProof
    mask_opening: B.BasefoldProof

    def to_bytes(self) -> bytes:
        openings = [o.to_bytes() for o in (self.opening, self.mask_opening)]
        return (_MASKED_MAGIC + bytes([_MASKED_VERSION]) + self.mask.to_bytes() + self.reduction.to_bytes()
                + F.elements_to_bytes(self.evals) + F.elements_to_bytes(self.mask_value)
                + b"".join(len(o).to_bytes(4, "little") + o for o in openings))

    @classmethod
    def read(cls, reader) -> "MaskedBatchProof":
        reader.header(_MASKED_MAGIC, _MASKED_VERSION)
        mask = B.BasefoldCommitment.read(reader)
        reduction = MaskedSumcheckProof.read(reader)
        evals, mask_value = reader.elements(2), reader.elements(1)
        opening, mask_opening = (B.BasefoldProof.from_bytes(reader.raw(reader.count(4, 1, f"{name} length")))
                                 for name in ("basefold opening", "mask table opening"))
        return cls(mask, reduction, evals, mask_value, opening, mask_opening)

    @classmethod
    def from_bytes(cls, data) -> "MaskedBatchProof":
        return _whole(cls, data, "masked basefold batch")

    @property
    def num_bytes(self) -> int:
        return len(self.to_bytes())


class _Reduction:
    """The prover of the claim reduction sum_k 2^(n - n_k) sum_x C_k(x) W_k(x) (a table of n_k variables joins
    when n_k variables remain, as in :func:`proofs.basefold._reduce_claims`), for :func:`prove_masked`."""

    def __init__(self, tables, weights, sums, nums, halves=()):
        self.tables, self.weights, self.sums, self.nums = dict(enumerate(tables)), dict(enumerate(weights)), sums, nums
        self.num_vars, self.degree, self.challenges, self._pending = max(nums), 2, [], {}
        self._halves = set(halves)  # tables whose claims weigh even entries only: their weight is over those
        self._factors: dict = {}    # k -> (1 - r) of a slot table's first round: W stands for factor * W
        self._lazy: dict = {}       # k -> r of a slot table's first round, its fold not yet taken (base C kept)

    def _first_round(self, k) -> np.ndarray:
        """h at 0, 1, 2 for W'(X, y) = (1 - X) W(y), C(X, y) = (1 - X) C[2y] + X C[2y + 1] (a slot table: S_0 at
        even entries): (W.S_0, 0, W.S_0 - 2 W.S_1) by one dot_pairs pass over C, instead of a round over C and a
        weight twice the size."""
        table, weight = self.tables[k], self.weights[k]
        s0, s1 = B.dot_pair_sums(table, weight)  # one pass over C, no strided copies
        return np.stack([s0, F.ext_zero(), F.ext_sub(s0, F.ext_add(s1, s1))])

    def round_message(self) -> np.ndarray:
        m = self.num_vars - len(self.challenges)
        h = F.ext_zero((3,))
        for k, n in enumerate(self.nums):
            if n >= m and k in self._halves:
                message = self._first_round(k)
            elif n >= m:
                if k in self._pending:
                    message = self._pending.pop(k)
                elif k in self._lazy:  # fold(C, r) read on the fly from C
                    message = np.empty((3, F.EXT_DEGREE), dtype=np.uint64)
                    B.compiled_kernels().round_sums_prefolded(self.tables[k], self._lazy[k], self.weights[k], message)
                else:
                    message = B.fold_round_message(self.tables[k], self.weights[k])
                if k in self._factors:
                    message = F.ext_mul(message, self._factors[k])
            else:
                message = F.ext_mul_base(self.sums[k], np.uint64(pow(2, m - 1 - n, F.P)))[None]
            h = F.ext_add(h, message)
        return h

    def bind(self, r) -> None:
        m = self.num_vars - len(self.challenges)
        self.challenges.append(np.asarray(r, dtype=np.uint64))
        for k, n in enumerate(self.nums):
            if n >= m and k in self._halves:  # C -> (1 - r) S_0 + r S_1, W -> (1 - r) W (the factor kept aside:
                self._factors[k] = F.ext_sub(F.ext_one(), np.asarray(r, dtype=np.uint64))  # messages are linear
                self._halves.discard(k)                                                    # in W)
                if m >= 3 and B.fast(self.tables[k].shape[0]) is not None:  # a next round with pairs
                    self._lazy[k] = np.asarray(r, dtype=np.uint64)  # folded with the next challenge, in one pass
                else:
                    self.tables[k] = fold(self.tables[k], r)
            elif n >= m and k in self._lazy:  # fold(fold(C, r'), r) straight from C, W in place, next message
                half = self.weights[k].shape[0] // 2
                table = np.empty((half, F.EXT_DEGREE), dtype=np.uint64)
                following = np.empty((3, F.EXT_DEGREE), dtype=np.uint64)
                B.compiled_kernels().fold_sums_prefolded(self.tables[k], self._lazy.pop(k), self.weights[k],
                                                 np.asarray(r, dtype=np.uint64), table, self.weights[k][:half],
                                                 following)
                self.tables[k], self.weights[k], self._pending[k] = table, self.weights[k][:half], following
            elif n >= m:
                self.tables[k], self.weights[k], following = B.fold_pair(self.tables[k], self.weights[k], r,
                                                                          in_place=True)
                if following is not None:
                    self._pending[k] = following

    def final_evaluations(self) -> np.ndarray:
        return np.stack([self.tables[k][0] for k in range(len(self.nums))])


def _on_first_slot(claim) -> bool:
    """Every term of a lifted claim has its lowest coordinate 0: it weighs even entries (slot 0) only."""
    return isinstance(claim, B.Functional) and all(
        lo.shape[0] and not lo[0].any() for _, lo, _, _ in claim.terms)


def _reduction_claim(values, coefficients, nums) -> np.ndarray:
    n = max(nums)
    total = F.ext_zero()
    for v, c, n_k in zip(values, coefficients, nums):
        total = F.ext_add(total, F.ext_mul_base(B.combined_claim(v, c), np.uint64(pow(2, n - n_k, F.P))))
    return total


def mask_vars(num_vars: int, params: B.BasefoldParams) -> int:
    """Variables of the mask table R of a batch whose largest table has num_vars: R is opened in a Basefold batch
    of its own, which shows at most :func:`mask_shown` base-field functionals of R; R keeps at least as many
    dimensions unseen again beyond g's coefficients (with g's coefficients alone, R's opening would show
    functionals of g beyond g(point) and unmask the reduction's messages), and has at least 4 times g's
    coefficients and final_vars + 3 variables."""
    entries = mask_entries(num_vars, 2)
    m = max(params.final_vars + 3, (entries - 1).bit_length() + 2)
    while (1 << m) < 2 * mask_shown(m, params) + entries:
        m += 1
    return m


def mask_shown(m: int, params: B.BasefoldParams) -> int:
    """A bound on the base-field functionals of a table of m variables that its own Basefold opening of two claims
    shows: the final table (4 per F_p4 entry), per query one leaf of each committed layer (2^arity F_p4 values)
    and of its codeword (its leaf group), the reduction's and the opening's round messages (12 each), the
    claims' two values and the batch's evaluation of R at the reduced point (4 each)."""
    plan = B.schedule([m], params, [2])
    s = params.interleave(m)
    coset = (1 << params.block(m - s)) << s
    leaf = B.leaf_group(coset, (((1 << m) * params.rate_inv) >> s) // coset) * coset
    shown_per_query = leaf + len(plan.layers) * (4 << params.arity)
    return (4 << params.final_vars) + params.num_queries * shown_per_query + 12 * (m + plan.rounds) + 4 * 3


def _table_claims(point, nums) -> list:
    """Phase two's claims on the tables: each at its part of the reduced point, z_k = point[n - n_k:] (aligned:
    their Basefold batch needs no claim reduction of its own, :func:`proofs.basefold._aligned`)."""
    n = max(nums)
    return [np.asarray(point[n - n_k:], dtype=np.uint64)[None] for n_k in nums]


def _mask_claims(point, mask_num_vars: int, mask_point) -> list:
    """Phase two's claims on R, opened in a Basefold batch of its own: g's functional (g(point)) and a point of
    its own (the second claim spreads that batch's reduction over all of R: g's functional alone would show
    partial sums of g's coefficients, which unmask the masked reduction's messages)."""
    weights = powers_table(point, 2)
    block = weights.shape[0].bit_length() - 1
    g_of = B.Functional(mask_num_vars, ((F.ext_one(), F.ext_zero((0,)), weights,
                                         F.ext_zero((mask_num_vars - block,))),))
    return [[g_of, B.Functional.point(mask_point)]]


def _open_masked(inner, lifted, values, transcript, rng=None) -> MaskedBatchProof:
    """The "tail" layout's batch opening (module docstring): commit R, reduce every claim by Libra's sumcheck
    with g read from R, state each table at the reduced point, open the tables there and R at g(point)."""
    nums = [w.commitment.num_vars for w in inner]
    n, base = max(nums), inner[0].commitment.params
    size = 1 << mask_vars(n, base)
    table = F.random_elements((size,)) if rng is None else rng.integers(0, F.P, size=size, dtype=np.uint64)
    coefficients_g = table[:mask_entries(n, 2)].reshape(n, -1, F.EXT_DEGREE)[:, :3]  # mask_table's layout
    mask_commitment, mask_witness = B.commit(table, base)
    transcript.absorb("basefold_zk.mask_table", mask_commitment.to_bytes())
    coefficients = B.begin(transcript, [w.commitment for w in inner], lifted, values)
    weights, halves = [], []
    for k, (claims, c, n_k) in enumerate(zip(lifted, coefficients, nums)):
        if claims and all(_on_first_slot(claim) for claim in claims):  # weigh S_0 only: build W over it
            claims = [B.Functional(n_k - 1, tuple((a, lo[1:], d, hi) for a, lo, d, hi in claim.terms))
                      for claim in claims]
            halves.append(k)
        w = F.ext_zero((1 << (n_k - (k in halves)),))
        for claim, ck in zip(claims, c):
            B.add_claim(w, claim, ck)
        weights.append(w)
    sums = [B.combined_claim(v, c) for v, c in zip(values, coefficients)]
    prover = _Reduction([w.table for w in inner], weights, sums, nums, halves)
    reduction, point, evals = prove_masked(prover, _reduction_claim(values, coefficients, nums), transcript,
                                           _REDUCTION_LABEL, coefficients_g)
    transcript.absorb("basefold_zk.evals", evals)
    mask_point = transcript.challenge_ext_vector("basefold_zk.mask_point", mask_commitment.num_vars)
    mask_value = B.dot_base(eq_table(mask_point), table)
    transcript.absorb("basefold_zk.mask_value", mask_value)
    _, opening = B.open_batch(list(inner), _table_claims(point, nums), transcript, [e[None] for e in evals])
    _, mask_opening = B.open_batch([mask_witness], _mask_claims(point, mask_commitment.num_vars, mask_point),
                                   transcript, [np.stack([reduction.mask_eval, mask_value])])
    return MaskedBatchProof(mask_commitment, reduction, evals, mask_value, opening, mask_opening)


def _verify_masked(inner, lifted, values_list, proof, transcript, min_security_bits, allow_conjectured) -> None:
    where = "hiding basefold opening"
    if not isinstance(proof, MaskedBatchProof):
        raise ProofRejected(f"expected a MaskedBatchProof, got {type(proof).__name__}", where)
    nums = [c.num_vars for c in inner]
    n, base = max(nums), inner[0].params
    n_mask = mask_vars(n, base)
    if not isinstance(proof.mask, B.BasefoldCommitment) or proof.mask.params != base or proof.mask.num_vars != n_mask:
        raise ProofRejected(f"the mask table's commitment is not of {n_mask} variables with the batch's parameters",
                            where)
    values_list = [np.asarray(v) for v in values_list]
    for k, (v, claims) in enumerate(zip(values_list, lifted)):
        if v.shape != (len(claims), F.EXT_DEGREE) or not F.is_canonical(v):
            raise ProofRejected(f"values of commitment {k} are not {len(claims)} canonical F_p4 elements", where)
    evals = proof.evals
    if not isinstance(evals, np.ndarray) or evals.shape != (len(inner), F.EXT_DEGREE) or not F.is_canonical(evals):
        raise ProofRejected(f"evaluations are not {len(inner)} canonical F_p4 elements", where)
    transcript.absorb("basefold_zk.mask_table", proof.mask.to_bytes())
    coefficients = B.begin(transcript, inner, lifted, values_list)
    sub = verify_masked(proof.reduction, _reduction_claim(values_list, coefficients, nums), n, 2, transcript,
                        _REDUCTION_LABEL)
    expected = F.ext_zero()
    for claims, c, n_k, y in zip(lifted, coefficients, nums, evals):
        weight = F.ext_sum(F.ext_mul(B.Functional.at_many(claims, sub.point[n - n_k:]), c), axis=0) \
            if len(claims) else F.ext_zero()
        expected = F.ext_add(expected, F.ext_mul(weight, y))
    if not F.ext_eq(expected, sub.expected_value):
        raise ProofRejected("the evaluations do not match the masked reduction's last claim", where)
    mask_value = proof.mask_value
    if not isinstance(mask_value, np.ndarray) or mask_value.shape != (F.EXT_DEGREE,) or not F.is_canonical(mask_value):
        raise ProofRejected("the mask table's value is not a canonical F_p4 element", where)
    transcript.absorb("basefold_zk.evals", evals)
    mask_point = transcript.challenge_ext_vector("basefold_zk.mask_point", n_mask)
    transcript.absorb("basefold_zk.mask_value", mask_value)
    B.verify_batch(list(inner), _table_claims(sub.point, nums), [e[None] for e in evals], proof.opening, transcript,
                   min_security_bits, allow_conjectured=allow_conjectured)
    B.verify_batch([proof.mask], _mask_claims(sub.point, n_mask, mask_point),
                   [np.stack([proof.reduction.mask_eval, mask_value])], proof.mask_opening, transcript,
                   min_security_bits, allow_conjectured=allow_conjectured)


def batch_error(commitments) -> float:
    """The soundness error of one :func:`open_batch` of hiding ``commitments``: the Basefold batch (with the mask
    table in the "tail" layout) and, there, the masked reduction's rounds (2 each over the n variables of the
    largest committed (slot) table), rho and its claim coefficients (one per claim is already in the batch's field
    terms): (2 n + 1) / |F_p4|."""
    commitments = list(commitments)
    error = 2.0 ** -verified_bits(commitments)
    if commitments[0].layout == "tail":
        error += (2 * max(c.inner.num_vars for c in commitments) + 1) * 2.0 ** -F.EXT_BITS
    return error


def verified_bits(commitments) -> float:
    """The bits :func:`verify_batch` requires to be >= its ``min_security_bits``: those of the Basefold batch of
    the inner commitments (:func:`proofs.basefold.batch_security_bits`), in the "tail" layout with the mask
    table's own batch added (two query phases: their errors add)."""
    commitments = list(commitments)
    inner = [c.inner for c in commitments]
    bits = B.batch_security_bits(inner)
    if commitments[0].layout == "tail":
        n = max(c.num_vars for c in inner)
        mask = B.BasefoldCommitment(bytes(B.DIGEST_SIZE), mask_vars(n, inner[0].params), inner[0].params)
        bits = -math.log2(2.0 ** -bits + 2.0 ** -B.batch_security_bits([mask]))
    return bits


def check_verified_bits(commitments, where: str) -> None:
    """ProofError before any work when a batch opening of ``commitments`` would give the verifier fewer than
    ``proofs.basefold.MIN_VERIFY_BITS`` (an honest proof it must reject): the field error grows with the
    codewords' count and length; or fewer than ``MIN_STATISTICAL_BITS`` without grinding."""
    bits = verified_bits(commitments)
    if bits < B.MIN_VERIFY_BITS:
        params = commitments[0].inner.params
        raise ProofError(f"{where}: one batch opening of these {len(commitments)} commitments gives {bits:.1f} proven "
                         f"bits, below the {B.MIN_VERIFY_BITS} verifiers require (its field error sums (s + 1) N' / "
                         f"|F_p4| over the codewords): commit with a smaller max_log_codeword (now "
                         f"{params.max_log_codeword}) or fewer, smaller tables")
    statistical = B.statistical_bits(verified_bits, commitments)
    if statistical < B.MIN_STATISTICAL_BITS:  # grinding buys at most MAX_GRINDING_CREDIT bits (proofs.basefold)
        raise ProofError(f"{where}: one batch opening of these {len(commitments)} commitments gives {statistical:.1f} "
                         f"statistical bits (without grinding), below the {B.MIN_STATISTICAL_BITS} verifiers require: "
                         f"fewer grinding bits (now {commitments[0].inner.params.grinding_bits}), more queries")


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
    claim = as_ext_scalar(claim, "claim")
    k, d = prover.num_vars, prover.degree
    total = mask_sum(coefficients)
    rho = _statement(transcript, label, claim, k, d, total)
    messages = np.zeros((k, d + 1, F.EXT_DEGREE), dtype=np.uint64)
    prefix = F.ext_zero()
    for j in range(k):
        masked = F.ext_mul(mask_round(coefficients, j, prefix, k, d), rho[None, :])
        messages[j] = F.ext_add(prover.round_message(), masked)
        transcript.absorb(f"{label}.round", messages[j])
        r = transcript.challenge_ext(f"{label}.r")  # error <= degree / p^4 per round
        prover.bind(r)
        prefix = F.ext_add(prefix, poly_at(coefficients[j], r))
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
