"""Zero knowledge: a hiding Ligero/Brakedown commitment with masked openings, and a zero-knowledge sumcheck.

**Hiding commitment** (Ames-Hazay-Ishai-Venkitasubramaniam, "Ligero", CCS 2017, section 4; Golovnev et al.,
"Brakedown", CRYPTO 2023). A table of 2^n base-field values is the row-major matrix M (2^a x 2^b, as
:mod:`proofs.commit`). Three things hide it:

1. *random tails*: every row is Reed-Solomon encoded together with ``t`` uniformly random extra
   coefficients (t >= the number of column queries), so any t symbols of an encoded row are uniform:
   opened columns are independent of M;
2. *salted leaves*: each column leaf is H(0x00 || salt || column) with a fresh 16-byte salt, so unopened
   columns stay hidden behind the Merkle root;
3. *masking rows*, F_p4-valued: a sent row is Y = w^T M + beta S with S = sum_t u^t S_t made of VALUE_MASKS = 4
   random base rows (beta times ONE base row would only span the line beta F_p of F_p4 and leave three base
   coordinates of every w^T M entry in the clear: with w = lambda e_i the committed row i itself), and the
   proximity row gamma^T [M; S] weighs PROXIMITY_MASKS = 4 rows of its own. The masks are committed with the
   table (``HidingParams.mask_rows`` >= :func:`mask_rows_needed`, usable by one opening) or fresh, in their own
   salted Merkle tree.

**One value row per opening.** Linear functionals v_k = sum_p w_p^T M c_p (an MLE evaluation is one piece,
w = eq(z_row), c = eq(z_col)) with several pieces are first reduced to one: the verifier draws alpha (one per
functional) and rho, and a degree-2 sumcheck over the column variables shows
sum_k alpha_k v_k + rho G = sum_x [sum_p alpha_k(p) c_p(x) (w_p^T M)(x) + rho g(x)] (pieces with equal row
weights merged first), masked by Libra's g (F_p4 coefficients read from one committed mask row, G its sum). It
ends at sigma with a claim on the single functional w*^T M eq(sigma) + rho g(sigma), w* =
sum_p alpha_k(p) c_p~(sigma) w_p. The prover states mu = <S, eq(sigma)> + <S', powers(sigma)> (S, S' F_p4
masks), the verifier draws beta and the prover sends Y_0 = gamma^T [M; masks] (proximity),
Y_1 = w*^T M + beta S and Y_2 = rho g_row + beta S'; the verifier checks each against the opened columns and
<Y_1, eq(sigma)> + <Y_2, powers(sigma)> = claim + beta mu. One piece skips
the reduction (Y_1 = w^T M + beta S, checked against v + beta mu). The opening's size is then three rows and
the columns of a constant number of mask rows, whatever the number of pieces (it was one row per piece).
Every sent row is uniform (its F_p4 mask is fresh), the reduction's messages are Libra's (uniform subject to the
sums), mu is determined by the rest, so the view is simulatable from the values v_k alone.

Soundness: the column checks on the joint matrix [M; masks] are Ligero's proximity and consistency tests,
with query error ((1 + rho)/2)^q for the effective rate rho = (2^b + t) / N (q raised to keep it below the
target, :meth:`HidingParams.code_shape`), plus N / |F_p4| per random combination (proximity gaps), and for
the reduction 2 log_cols / |F_p4| (its rounds) + 2 / |F_p4| (alpha, rho); beta binds the claim before the masks
are added (1 / |F_p4|).

**Zero-knowledge sumcheck** (Xie, Zhang, Zhang, Papamanthou, Song, "Libra", CRYPTO 2019, section 4.1;
Chiesa, Forbes, Spooner, "A zero knowledge sumcheck", 2017). To prove sum_x f(x) = H (f a sum of
products of multilinear tables, degree d), the prover samples the mask g(x) = sum_i g_i(x_i) with random
g_i of degree d (F_p4 coefficients: rho times base ones would mask only a line of F_p4), commits to their
coefficients (hiding, one row), sends G = sum_x g(x); the verifier draws
rho and both run the sumcheck on f + rho g with claim H + rho G. Each round message is
f_j(X) + rho g_j(X) + (terms fixed by earlier rounds): g_j's d + 1 fresh coefficients make it uniform
among degree-d polynomials with the checked sum, so the messages reveal nothing about f. At the end
g(sigma) is opened (a linear functional of its coefficient row) and the sub-claim on f is
expected - rho g(sigma). Soundness: the sumcheck's k d / |F_p4| plus 1/|F_p4| for rho.
:func:`simulate_zk_sumcheck` builds accepting transcripts from the claim and f(sigma) only (challenges
programmed), the simulator of Libra's theorem 3.

Assumptions and limits, stated: BLAKE2b is modelled as a random oracle (Fiat-Shamir and hiding of salted
leaves); zero knowledge is honest-verifier in the random-oracle model. This module's sumcheck still hands
its caller the *final evaluations* (the factors' values at the random point sigma); stating multilinear
values would reveal one random linear functional of the witness each. :mod:`proofs.relations` closes that
gap for whole protocols (masked extensions, Libra section 4.2, so every stated value is uniform), and the
training and inference proofs (:mod:`proofs.layers.step_proof`) are built on it.
"""
from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass, field as dataclass_field

import numpy as np

from . import field as F
from .basefold import fold_pair, fold_round_message
from .commit import committed_table, matrix_layout, query_bits
from .pcs.merkle import DIGEST_SIZE, column_leaves, merkle_levels, merkle_open, merkle_root_from
from .pcs.reed_solomon import rs_encode_rows
from .errors import ProofError, ProofRejected
from .mle import eq_eval, eq_table
from .sumcheck import SubClaim, SumcheckProof, SumcheckProver, SumcheckVerifier, as_ext_scalar, lagrange_eval

SALT_SIZE = 16
MAX_RATE = 0.6  #: largest effective code rate a random tail may push a row to (distance 1 - rho >= 0.4)
DEFAULT_TARGET_BITS = 104
MAX_NUM_VARS = 30
MAX_MASK_ROWS = 4096
MAX_OPENINGS = 255
COLUMNS_KERNEL_MIN_SIZE = 1 << 16  #: encodings with at least this many entries gather their columns compiled
_HIDING_MAGIC, _VERSION = b"HZKHIDE1", 3  # 2 added the openings byte; 3: F_p4 masks, one reduced piece

_P = np.uint64(F.P)


def _rng_bytes(n: int, rng) -> bytes:
    """n random bytes: OS CSPRNG unless a seeded numpy Generator (tests only) is given."""
    return os.urandom(n) if rng is None else rng.bytes(n)


def _random_field(shape, rng) -> np.ndarray:
    if rng is None:
        return F.random_elements(shape)
    return rng.integers(0, F.P, size=shape, dtype=np.uint64)


@dataclass(frozen=True)
class HidingParams:
    """Rate 1/``rate_inv`` (power of two in [2, 64]), ``target_bits`` of query soundness, ``hiding`` on/off,
    and ``mask_rows`` random rows committed with the table (an opening of up to mask_rows - 1 pieces then
    needs no second Merkle tree).

    ``openings``: how many openings the commitment stays hiding for. Every opening reveals ``q`` fresh columns,
    so each row carries t = openings * q random coefficients: any t symbols of an encoded row are uniform, and
    the columns of all its openings together reveal nothing (a commitment opened more often than this would,
    once more than t positions are known, leak linear combinations of its rows).

    With ``hiding=False`` the same code runs without tails, salts or masks (the non-hiding baseline).
    """

    rate_inv: int = 4
    target_bits: int = DEFAULT_TARGET_BITS
    hiding: bool = True
    mask_rows: int = 0
    openings: int = 1

    def __post_init__(self):
        r = self.rate_inv
        if not isinstance(r, (int, np.integer)) or r < 2 or r > 64 or r & (r - 1):
            raise ProofError(f"HidingParams: rate_inv={r!r} must be a power of two in [2, 64]")
        if not isinstance(self.target_bits, (int, np.integer)) or not 40 <= self.target_bits <= 256:
            raise ProofError(f"HidingParams: target_bits={self.target_bits!r} not in [40, 256]")
        if not isinstance(self.mask_rows, (int, np.integer)) or not 0 <= self.mask_rows <= MAX_MASK_ROWS:
            raise ProofError(f"HidingParams: mask_rows={self.mask_rows!r} not in [0, {MAX_MASK_ROWS}]")
        if not isinstance(self.openings, (int, np.integer)) or not 1 <= self.openings <= MAX_OPENINGS:
            raise ProofError(f"HidingParams: openings={self.openings!r} not in [1, {MAX_OPENINGS}]")

    @property
    def num_queries(self) -> int:
        """Queries at rate exactly 1/rate_inv (without a tail)."""
        return math.ceil(self.target_bits / query_bits(self.rate_inv))

    def code_shape(self, cols: int) -> tuple:
        """(codeword length, queries) for rows of ``cols`` entries.

        With hiding, a row carries t = openings * queries random coefficients, so the rate is rho = (cols + t) / N;
        N stays rate_inv * cols while rho <= MAX_RATE and the queries are raised until ((1 + rho)/2)^q <=
        2^-target_bits.
        """
        if not self.hiding:
            return self.rate_inv * cols, self.num_queries
        queries = self.num_queries
        while True:
            width = cols + self.openings * queries
            length = 1 << (self.rate_inv * cols - 1).bit_length()
            if width > MAX_RATE * length:
                length = 1 << (self.rate_inv * width - 1).bit_length()
            rho = width / length
            needed = math.ceil(self.target_bits / -math.log2((1 + rho) / 2))
            if needed <= queries:
                return length, queries
            queries = needed


@dataclass(frozen=True)
class HidingCommitment:
    """Merkle root over the salted columns, and the public shape: 2^log_rows x 2^log_cols, codeword length."""

    root: bytes
    num_vars: int
    log_rows: int
    params: HidingParams

    @property
    def log_cols(self) -> int:
        return self.num_vars - self.log_rows

    @property
    def num_queries(self) -> int:
        return self.params.code_shape(1 << self.log_cols)[1]

    @property
    def tail(self) -> int:
        """Random coefficients appended to each row: one per query and opening with hiding, none without."""
        return self.params.openings * self.num_queries if self.params.hiding else 0

    @property
    def mask_rows(self) -> int:
        """Random rows committed below the table's 2^log_rows rows (hiding only)."""
        return self.params.mask_rows if self.params.hiding else 0

    @property
    def width(self) -> int:
        """Coefficients per encoded row: 2^log_cols plus the random tail."""
        return (1 << self.log_cols) + self.tail

    @property
    def codeword_length(self) -> int:
        return self.params.code_shape(1 << self.log_cols)[0]

    @property
    def security_bits(self) -> float:
        """Query soundness: -log2(((1 + rho)/2)^q) at the effective rate rho = width / codeword_length."""
        return -self.num_queries * math.log2((1 + self.width / self.codeword_length) / 2)

    def to_bytes(self) -> bytes:
        p = self.params
        return (_HIDING_MAGIC + bytes([_VERSION, self.num_vars, self.log_rows, p.rate_inv, int(p.hiding)])
                + int(p.target_bits).to_bytes(2, "little") + int(p.mask_rows).to_bytes(2, "little")
                + bytes([p.openings]) + self.root)

    @classmethod
    def read(cls, reader) -> "HidingCommitment":
        """Parse from a :class:`proofs.field.ByteReader` (ProofRejected on anything malformed)."""
        if reader.raw(len(_HIDING_MAGIC)) != _HIDING_MAGIC or reader.uint(1) != _VERSION:
            raise ProofRejected("bad magic or version of a hiding commitment", reader.where)
        num_vars, log_rows, rate_inv, hiding = (reader.uint(1) for _ in range(4))
        target_bits, mask_rows, openings = reader.uint(2), reader.uint(2), reader.uint(1)
        root = reader.raw(DIGEST_SIZE)
        if num_vars > MAX_NUM_VARS or log_rows > num_vars or hiding > 1:
            raise ProofRejected(f"num_vars={num_vars}, log_rows={log_rows}, hiding={hiding} out of range", reader.where)
        try:
            params = HidingParams(rate_inv, target_bits, bool(hiding), mask_rows, openings)
        except ProofError as error:
            raise ProofRejected(str(error), reader.where) from None
        return cls(root, num_vars, log_rows, params)

    def __reduce__(self):
        """Pickle (Dask, multiprocessing, concurrent.futures) through the versioned bytes of ``to_bytes``."""
        return type(self).from_bytes, (self.to_bytes(),)

    @classmethod
    def from_bytes(cls, data) -> "HidingCommitment":
        reader = F.ByteReader(data, "hiding commitment")
        commitment = cls.read(reader)
        reader.finish()
        return commitment


@dataclass(frozen=True, eq=False)
class HidingWitness:
    """The prover's side: full coefficient rows (data + tail), encoding (None: encoded again when opened,
    :func:`without_code`), salts and Merkle levels."""

    commitment: HidingCommitment
    rows: np.ndarray
    encoded: np.ndarray
    salts: tuple
    levels: list
    spent: list = dataclass_field(default_factory=list, repr=False)  # set once the committed masks are used


#: a hiding witness whose code has more entries keeps only its Merkle tree where :func:`without_code` is applied
#: (the K copies of a reusable commitment: a GPT-2-size model's 16 codes held at once peaked at 17 GB); an opening
#: then re-encodes its rows (:func:`witness_code`: one NTT pass per opening, the same code)
KEEP_CODE_MAX_ENTRIES = 1 << 24


def witness_code(witness: HidingWitness) -> np.ndarray:
    """The witness's encoded rows: the kept array, or the rows encoded again (``rs_encode_rows``, as committed)."""
    if witness.encoded is not None:
        return witness.encoded
    return rs_encode_rows(witness.rows, witness.commitment.codeword_length)


def without_code(witness: HidingWitness) -> HidingWitness:
    """The witness without its encoded rows when they exceed :data:`KEEP_CODE_MAX_ENTRIES` (else itself): its
    rows, salts, Merkle levels and spent masks kept, so every opening is the same."""
    if witness.encoded is None or witness.encoded.size <= KEEP_CODE_MAX_ENTRIES:
        return witness
    return dataclasses.replace(witness, encoded=None)


def _column_leaves(encoded: np.ndarray, salts) -> list:
    """:func:`proofs.pcs.merkle.column_leaves` of a large encoding, its columns gathered by the tiled kernel
    (:func:`proofs._kernels.columns_u32`; numpy's transposing copy strides through memory) a block of about 1 MB
    at a time into one reused buffer (no encoding-sized copy to fault in): the same digests."""
    kernels = F.numba_kernels() if encoded.size >= COLUMNS_KERNEL_MIN_SIZE else None
    if kernels is None or encoded.dtype != np.uint64 or encoded.ndim != 2:
        return column_leaves(encoded, salts)
    encoded = np.ascontiguousarray(encoded)
    rows, length = encoded.shape
    block = max(1, min(length, (1 << 18) // max(rows, 1)))
    buffer = np.empty((block, rows), dtype=np.uint32)
    leaves = []
    for start in range(0, length, block):
        columns = buffer[:min(block, length - start)]
        kernels.columns_u32(encoded, columns, start)
        leaves.extend(column_leaves(columns.T, salts[start:start + columns.shape[0]]))  # columns.T.T: contiguous
    return leaves


def _tree(rows: np.ndarray, length: int, hiding: bool, rng):
    encoded = rs_encode_rows(rows, length)
    if hiding:
        data = _rng_bytes(SALT_SIZE * length, rng)
        salts = tuple(data[i:i + SALT_SIZE] for i in range(0, len(data), SALT_SIZE))
    else:
        salts = (b"",) * length
    return encoded, salts, merkle_levels(_column_leaves(encoded, salts))


def hiding_commit(values, params: HidingParams = HidingParams(), log_rows: int | None = None, seed=None):
    """Commit to base-field ``values`` (zero-padded to 2^n) -> (HidingCommitment, HidingWitness).

    ``log_rows`` overrides the default matrix layout; ``seed`` (tests only) makes tails and salts reproducible.
    """
    if not isinstance(params, HidingParams):
        raise ProofError(f"hiding_commit: params must be HidingParams, got {type(params).__name__}")
    table, num_vars = committed_table(values, "hiding_commit")
    log_rows = matrix_layout(num_vars)[0] if log_rows is None else int(log_rows)
    if not 0 <= log_rows <= num_vars:
        raise ProofError(f"hiding_commit: log_rows={log_rows} not in [0, {num_vars}]")
    rng = None if seed is None else np.random.default_rng(seed)
    matrix = table.reshape(1 << log_rows, -1)
    shape = HidingCommitment(b"", num_vars, log_rows, params)
    rows = np.empty((matrix.shape[0] + shape.mask_rows, shape.width), dtype=np.uint64)  # one copy of the table
    rows[:matrix.shape[0], :matrix.shape[1]] = matrix
    rows[:matrix.shape[0], matrix.shape[1]:] = _random_field((matrix.shape[0], shape.tail), rng)  # tails, then masks
    if shape.mask_rows:
        rows[matrix.shape[0]:] = _random_field((shape.mask_rows, shape.width), rng)
    encoded, salts, levels = _tree(rows, shape.codeword_length, params.hiding, rng)
    commitment = HidingCommitment(levels[-1][0], num_vars, log_rows, params)
    return commitment, HidingWitness(commitment, rows, encoded, salts, levels)


# ------------------------------------------------------------------------------------- functionals
def mle_functional(commitment: HidingCommitment, point) -> list:
    """The MLE evaluation at ``point`` ((n, 4)) as one piece [(eq(z_row), eq(z_col))]."""
    point = np.asarray(point, dtype=np.uint64).reshape(-1, F.EXT_DEGREE)
    if point.shape[0] != commitment.num_vars:
        raise ProofError(f"mle_functional: point has {point.shape[0]} variables, commitment {commitment.num_vars}")
    b = commitment.log_cols
    return [(eq_table(point[b:]), eq_table(point[:b]))]


def _combine(weights, matrix) -> np.ndarray:
    """weights^T matrix for F_p4 weights (rows, 4) and a base matrix (rows, m) -> (m, 4) (or (rows, K) weights:
    (m, K)), by one compiled pass when it is short enough (:data:`proofs.field.MATMUL_KERNEL_MAX`)."""
    kernels = F.numba_kernels()
    if kernels is not None and weights.shape[0] * weights.shape[1] * matrix.shape[1] <= F.MATMUL_KERNEL_MAX:
        out = np.empty((matrix.shape[1], weights.shape[1]), dtype=np.uint64)
        kernels.transposed_matmul(np.ascontiguousarray(weights, dtype=np.uint64),
                                  np.ascontiguousarray(matrix, dtype=np.uint64), out)
        return out
    return F.matmul(np.ascontiguousarray(weights.T), matrix).T.copy()


PROXIMITY_MASKS = 4  #: mask rows only the proximity row weighs (4 F_p-independent gamma weights: uniform in F_p4)
VALUE_MASKS = 4  #: base rows of one F_p4 mask row (beta S for a base row S spans only the line beta F_p)
REDUCTION_DEGREE = 2  #: the reduction's summand c(x) u(x) is a product of two multilinear tables


def mask_rows_needed(pieces: int) -> int:
    """Mask rows an opening of ``pieces`` pieces uses with hiding: the proximity row's 4, the value row's F_p4
    mask and, with several pieces, the reduction's Libra mask row and the F_p4 mask of its sent row."""
    return PROXIMITY_MASKS + VALUE_MASKS + (0 if pieces == 1 else 1 + VALUE_MASKS)


def opening_field_error(commitment: HidingCommitment) -> float:
    """The opening's errors from random combinations, over |F_p4|: 2 N for the proximity and value rows (N the
    codeword length), 2 log_cols for the reduction's rounds, 3 for alpha, rho and beta."""
    return (2 * commitment.codeword_length + 2 * commitment.log_cols + 3) / float(F.P) ** F.EXT_DEGREE


def opening_bytes(commitment: HidingCommitment, pieces: int = 2) -> int:
    """About the bytes of one opening of ``pieces`` pieces: the sent rows (F_p4), the queries' columns of the
    committed rows (base) and the Merkle siblings (32 bytes a level above the queries' shared top)."""
    reduce, hiding = pieces > 1, commitment.params.hiding
    sent = 2 + int(reduce and hiding and commitment.log_cols > 0)
    q, length = commitment.num_queries, commitment.codeword_length
    rows = (1 << commitment.log_rows) + max(commitment.mask_rows, mask_rows_needed(pieces) if hiding else 0)
    merkle = q * max(0, length.bit_length() - q.bit_length()) * DIGEST_SIZE
    return sent * commitment.width * 16 + q * rows * 4 + merkle + 48 * commitment.log_cols * int(reduce)


_VALUE, _LIBRA_ROW_MASK, _LIBRA = PROXIMITY_MASKS, PROXIMITY_MASKS + VALUE_MASKS, PROXIMITY_MASKS + 2 * VALUE_MASKS


@dataclass(frozen=True, eq=False)
class HidingOpening:
    """Mask root (fresh masks, or empty); the reduction's Libra mask sum G (0 or 1 values) and round messages
    (log_cols or 0, 3, 4); the mask value mu (0 or 1 values); the sent rows (proximity, value row and, after a
    reduction with hiding, the Libra mask row: (2 or 3, width, 4)); opened columns of M and of fresh masks,
    their salts and Merkle multi-proofs."""

    mask_root: bytes
    mask_sum: np.ndarray
    reduction: np.ndarray
    mask_value: np.ndarray
    rows: np.ndarray
    columns: np.ndarray
    mask_columns: np.ndarray
    salts: tuple
    mask_salts: tuple
    merkle: tuple
    mask_merkle: tuple

    def to_bytes(self) -> bytes:
        parts = [bytes([len(self.mask_root)]), self.mask_root]
        parts += [F.elements_to_bytes(a) for a in (self.mask_sum, self.reduction, self.mask_value, self.rows,
                                                     self.columns, self.mask_columns)]
        for group in (self.salts, self.mask_salts, self.merkle, self.mask_merkle):
            parts.append(len(group).to_bytes(4, "little") + b"".join(group))
        return b"".join(parts)

    @classmethod
    def read(cls, reader) -> "HidingOpening":
        """Parse from a :class:`proofs.field.ByteReader`; shapes are checked by the verifier."""
        root_size = reader.uint(1)
        if root_size not in (0, DIGEST_SIZE):
            raise ProofRejected(f"mask root of {root_size} bytes", reader.where)
        mask_root = reader.raw(root_size)
        arrays = [reader.elements(n) for n in (2, 3, 2, 3, 2, 2)]
        groups = []
        for size in (SALT_SIZE, SALT_SIZE, DIGEST_SIZE, DIGEST_SIZE):
            count = reader.count(4, size, "salt or digest count")
            data = reader.raw(size * count)
            groups.append(tuple(data[i:i + size] for i in range(0, len(data), size)))
        return cls(mask_root, *arrays, *groups)

    @property
    def num_bytes(self) -> int:
        return len(self.to_bytes())


@dataclass(frozen=True, eq=False)
class EqWeights:
    """Column weights eq(point, .) over 2^k columns kept as the point (k, 4): the verifier evaluates their MLE at
    sigma as eq(point, sigma) in O(k) instead of a dot product of 2^k values; ``np.asarray`` gives the table."""

    point: np.ndarray

    @property
    def shape(self) -> tuple:
        return (1 << self.point.shape[0], F.EXT_DEGREE)

    def __array__(self, dtype=None, copy=None):
        table = eq_table(self.point)
        return table if dtype is None else table.astype(dtype)


@dataclass(frozen=True, eq=False)
class BlockWeights:
    """Column weights that are ``values`` (m, 4) at columns start..start + m - 1 and zero elsewhere (of ``length``):
    kept short, their MLE at sigma is a dot product of m values; ``np.asarray`` gives the table."""

    start: int
    values: np.ndarray
    length: int

    @property
    def shape(self) -> tuple:
        return (self.length, F.EXT_DEGREE)

    def __array__(self, dtype=None, copy=None):
        table = F.ext_zero((self.length,))
        table[self.start:self.start + self.values.shape[0]] = self.values
        return table if dtype is None else table.astype(dtype)


def _dense(weights) -> np.ndarray:
    return np.asarray(weights, dtype=np.uint64)


def _weights_at(weights, sigma, eq) -> np.ndarray:
    """The MLE of column weights at sigma: eq(point, sigma) for :class:`EqWeights`, else a dot product with
    ``eq`` = eq(sigma) over the weights' nonzero range."""
    if isinstance(weights, EqWeights):
        return eq_eval(weights.point, sigma)
    if isinstance(weights, BlockWeights):
        return F.ext_dot(weights.values, eq[weights.start:weights.start + weights.values.shape[0]])
    weights = _dense(weights)
    nonzero = np.flatnonzero(weights.any(axis=1))
    if not nonzero.size:
        return F.ext_zero()
    lo, hi = int(nonzero[0]), int(nonzero[-1]) + 1
    return F.ext_dot(weights[lo:hi], eq[lo:hi])


def _structured_ok(weights, cols: int) -> bool:
    """A structured column-weights object is well formed (canonical values, a block inside the columns)."""
    if isinstance(weights, EqWeights):
        point = np.asarray(weights.point)
        return point.ndim == 2 and point.shape[1] == F.EXT_DEGREE and F.is_canonical(point)
    if isinstance(weights, BlockWeights):
        values = np.asarray(weights.values)
        return isinstance(weights.start, (int, np.integer)) and values.ndim == 2 and \
            values.shape[1] == F.EXT_DEGREE and F.is_canonical(values) and 0 <= weights.start and \
            weights.start + values.shape[0] <= cols == weights.length
    return True


def _weights_key(weights) -> bytes:
    if isinstance(weights, EqWeights):
        return b"eq" + np.asarray(weights.point, dtype=np.uint64).tobytes()
    if isinstance(weights, BlockWeights):
        return b"block" + int(weights.start).to_bytes(8, "little") + _dense(weights.values).tobytes()
    return b"dense" + _dense(weights).tobytes()


def _check_functionals(commitment, functionals, error):
    rows, cols = 1 << commitment.log_rows, 1 << commitment.log_cols
    for k, pieces in enumerate(functionals):
        if not pieces:
            raise error(f"functional {k} has no pieces")
        for w, c in pieces:
            if np.shape(w) != (rows, 4) or np.shape(c) != (cols, 4) or not _structured_ok(c, cols):
                raise error(f"functional {k}: piece shapes {np.shape(w)}, {np.shape(c)}, expected ({rows}, 4), "
                            f"({cols}, 4)")
    return [piece for pieces in functionals for piece in pieces]


def _begin(transcript, commitment, pieces, bound: bool = False):
    transcript.absorb("zk.commitment", commitment.to_bytes())
    if bound:  # the caller's transcript determines them: their count only
        transcript.absorb("zk.functionals.bound", len(pieces))
    else:
        transcript.absorb("zk.functionals", [_dense(a) for piece in pieces for a in piece])


def _challenges(transcript, num_rows: int, num_functionals: int, reduce: bool, mask_root, values, mask_sum):
    """gamma (proximity: error <= N / p^4), and for a reduction alpha (one per functional: 1 / p^4) and rho
    (Libra's mask: 1 / p^4), all drawn after the values and the mask sum are bound."""
    transcript.absorb("zk.values", [mask_root, np.asarray(values, dtype=np.uint64), mask_sum])
    gamma = transcript.challenge_ext_vector("zk.gamma", num_rows)
    if not reduce:
        return gamma, None, None
    return gamma, transcript.challenge_ext_vector("zk.alpha", num_functionals), transcript.challenge_ext("zk.rho")


def _beta(transcript, mask_value) -> np.ndarray:
    transcript.absorb("zk.mask_value", mask_value)
    return transcript.challenge_ext("zk.beta")  # binds the values before the masks are added: error 1 / p^4


def _queries(transcript, commitment, rows):
    transcript.absorb("zk.rows", rows)
    # each query misses a bad column set of density >= delta/2 w.p. <= (1 + rho)/2
    drawn = transcript.challenge_indices("zk.queries", commitment.num_queries, commitment.codeword_length)
    return np.unique(drawn)


def _row_blocks(pieces) -> dict:
    """(first, last + 1) row the weights of a piece touch -> the pieces touching exactly those rows.

    A point of a packed table (:mod:`proofs.layers.packing`) has Boolean selector coordinates, so its row
    weights vanish outside that table's rows: a piece's products then cost the table's size, not the pack's.
    """
    blocks = {}
    for p, (w, _) in enumerate(pieces):
        rows = np.flatnonzero(np.asarray(w).any(axis=1))
        blocks.setdefault((int(rows[0]), int(rows[-1]) + 1) if rows.size else (0, 0), []).append(p)
    return blocks


def _owners(functionals) -> np.ndarray:
    return np.array([k for k, pieces in enumerate(functionals) for _ in pieces], dtype=np.int64)


def _row_groups(pieces, scales) -> list:
    """[(w, [(scale, c), ...])]: the pieces grouped by equal row weights w (a tensor's stated values and its mask
    pieces in one matrix row share them), each with its ``scales`` (one per piece), so that
    sum_p scale_p c_p(x) (w_p^T M)(x) = sum_g c'_g(x) (w_g^T M)(x), c'_g = sum_(p in g) scale_p c_p."""
    groups = {}
    for p, (w, c) in enumerate(pieces):
        w = _dense(w)
        groups.setdefault(w.tobytes(), (w, []))[1].append((scales[p], c))
    return list(groups.values())


def _row_products(row_weights, data) -> np.ndarray:
    """w^T data for each group's row weights (G, rows, 4) -> (G, cols, 4), each on the rows its weights touch."""
    out = F.ext_zero((len(row_weights), data.shape[1]))
    blocks = _row_blocks([(w, None) for w in row_weights])
    for (lo, hi), members in blocks.items():
        if hi > lo:
            weights = np.concatenate([row_weights[g][lo:hi] for g in members], axis=1)
            out[members] = np.transpose(_combine(weights, data[lo:hi]).reshape(-1, len(members), 4), (1, 0, 2))
    return out


def _libra_coefficients(row, num_vars: int) -> np.ndarray:
    """The reduction's mask g: F_p4 coefficients (num_vars, 3, 4) read from the front of a random mask row."""
    size = mask_entries(num_vars, REDUCTION_DEGREE)
    if num_vars == 0:
        return F.ext_zero((0, REDUCTION_DEGREE + 1))
    return np.asarray(row[:size], dtype=np.uint64).reshape(num_vars, -1, F.EXT_DEGREE)[:, :REDUCTION_DEGREE + 1]


def _reduction_prover(groups, data):
    """(A, U) of the reduction over the column variables: per group of equal row weights (:func:`_row_groups`)
    A_g = c'_g and U_g = w_g^T M (the data columns), both (groups, cols, 4)."""
    weights = np.stack([F.ext_sum(np.stack([F.ext_mul(_dense(c), scale[None, :]) for scale, c in members]), axis=0)
                        for _, members in groups])
    return weights, _row_products([w for w, _ in groups], data)


def _prove_reduction(a, u, coefficients, rho, transcript):
    """Masked sumcheck (Libra section 4.1, F_p4 mask) of sum_x sum_g A_g(x) U_g(x) + rho g(x) over the column
    variables -> (round messages (k, 3, 4), point sigma (k, 4)). The stacked tables are flattened (pairs (2j, 2j+1)
    stay within a table), so each round is Basefold's degree-2 product round (one fused fold-and-sum pass)."""
    k = a.shape[1].bit_length() - 1
    f, w = np.ascontiguousarray(a.reshape(-1, F.EXT_DEGREE)), np.ascontiguousarray(u.reshape(-1, F.EXT_DEGREE))
    messages = F.ext_zero((k, REDUCTION_DEGREE + 1))
    prefix, point, pending = F.ext_zero(), [], None
    for j in range(k):
        message = fold_round_message(f, w) if pending is None else pending
        if coefficients is not None:
            message = F.ext_add(message, F.ext_mul(mask_round(coefficients, j, prefix, k, REDUCTION_DEGREE),
                                                   rho[None, :]))
        messages[j] = message
        transcript.absorb("zk.reduce.round", message)
        r = transcript.challenge_ext("zk.reduce.r")  # error <= 2 / p^4 per round
        f, w, pending = fold_pair(f, w, r)
        if coefficients is not None:
            prefix = F.ext_add(prefix, poly_at(coefficients[j], r))
        point.append(r)
    return messages, np.asarray(point, dtype=np.uint64).reshape(k, F.EXT_DEGREE)


def _verify_reduction(messages, claim, k: int, transcript, where: str):
    """The reduction's rounds -> (sigma (k, 4), the claim on the last summand)."""
    verifier = SumcheckVerifier(claim, k, REDUCTION_DEGREE, where=where)
    for message in messages:
        verifier.check_round(message)
        transcript.absorb("zk.reduce.round", message)
        verifier.bind(transcript.challenge_ext("zk.reduce.r"))
    sub = verifier.subclaim()
    return np.asarray(sub.point, dtype=np.uint64).reshape(k, F.EXT_DEGREE), sub.expected_value


def _weights_at_all(weights, sigma) -> np.ndarray:
    """:func:`_weights_at` of many column weights -> ((m, 4), eq(sigma)): the blocks' dot products as one gathered
    product and one segmented sum, the eq weights' eq(z, sigma) = prod_i (1 - z_i - s_i + 2 z_i s_i) for all of
    them at once, the rest one by one."""
    eq = eq_table(sigma)
    out = F.ext_zero((len(weights),))
    kinds = [type(c) for c in weights]
    blocks = [i for i, kind in enumerate(kinds) if kind is BlockWeights]
    if blocks:
        lengths = np.array([weights[i].values.shape[0] for i in blocks])
        offsets = np.cumsum(lengths) - lengths
        index = np.arange(int(lengths.sum())) + np.repeat(np.array([weights[i].start for i in blocks]) - offsets,
                                                           lengths)
        products = F.ext_mul(np.concatenate([_dense(weights[i].values) for i in blocks]), eq[index])
        out[blocks] = np.add.reduceat(products, offsets, axis=0) % np.uint64(F.P)  # < 2^31 terms of < 2^31 each
    points = [i for i, kind in enumerate(kinds) if kind is EqWeights]
    if points:
        z = np.stack([_dense(weights[i].point) for i in points])  # (m, k, 4), k = sigma's variables
        s = np.broadcast_to(np.asarray(sigma, dtype=np.uint64)[None], z.shape)
        zs = F.ext_mul(z, s)
        factors = F.ext_add(F.ext_sub(F.ext_sub(F.ext_one(z.shape[:-1]), z), s), F.ext_add(zs, zs))
        value = F.ext_one((len(points),))
        for i in range(z.shape[1]):
            value = F.ext_mul(value, np.ascontiguousarray(factors[:, i]))
        out[points] = value
    for i, kind in enumerate(kinds):
        if kind is not BlockWeights and kind is not EqWeights:
            out[i] = _weights_at(weights[i], sigma, eq)
    return out, eq


def _reduced_weights(groups, sigma):
    """(w*, eq(sigma)): the one piece the reduction leaves, w* = sum_g c'_g~(sigma) w_g, with
    c'_g~(sigma) = sum_(p in g) scale_p c_p~(sigma) (:func:`_weights_at`: O(log) for eq weights)."""
    scales = np.stack([scale for _, members in groups for scale, _ in members])
    at, eq = _weights_at_all([c for _, members in groups for _, c in members], sigma)
    starts = np.concatenate([[0], np.cumsum([len(members) for _, members in groups])[:-1]])
    values = np.add.reduceat(F.ext_mul(scales, at), starts, axis=0) % np.uint64(F.P)
    return F.ext_sum(F.ext_mul(np.stack([w for w, _ in groups]), values[:, None, :]), axis=0), eq


def _ext_row(rows4) -> np.ndarray:
    """An F_p4 row from VALUE_MASKS base rows (4, w): entry j is sum_t rows4[t, j] u^t."""
    return np.ascontiguousarray(np.asarray(rows4, dtype=np.uint64).T)


def open_functionals(witness: HidingWitness, functionals, transcript, values=None, seed=None, bound: bool = False):
    """Open linear functionals (lists of (row weights, column weights) pieces) -> (values (m, 4), HidingOpening).

    With several pieces, a masked sumcheck over the column variables first reduces every piece to one:
    sum_k alpha_k v_k = sum_x sum_p alpha_k(p) c_p(x) (w_p^T M)(x) (+ rho g(x), Libra's mask), pieces with equal
    w_p merged first, ends at sigma, where the claim is a value of the single functional w*^T M eq(sigma)
    (+ rho g(sigma)), w* = sum_p alpha_k(p) c_p~(sigma) w_p. One value row (and, with hiding, one row for g) is sent instead of one
    row per piece, and the mask rows are a constant :func:`mask_rows_needed`, whatever the number of pieces.

    ``values`` lets a caller state values it derived elsewhere (a cheating prover in tests); by default
    they are computed from the committed matrix. ``bound``: the caller's transcript already determines the
    functionals (derived from its challenges and public shapes), so they are not absorbed again (absorbing
    every piece's weights costs a hash of pieces x (rows + cols) F_p4 values).
    """
    commitment = witness.commitment
    pieces = _check_functionals(commitment, functionals, ProofError)
    rng = None if seed is None else np.random.default_rng(seed)
    cols, hiding, data_rows = 1 << commitment.log_cols, commitment.params.hiding, 1 << commitment.log_rows
    committed_rows = witness.rows.shape[0]
    data = witness.rows[:data_rows]
    if values is None:
        values = [F.ext_sum(np.stack([F.ext_dot(_combine(w, data[:, :cols]), _dense(c)) for w, c in pieces_k]), axis=0)
                  for pieces_k in functionals]
    values = np.asarray(values, dtype=np.uint64).reshape(len(functionals), F.EXT_DEGREE)
    reduce, k = len(pieces) > 1, commitment.log_cols
    _begin(transcript, commitment, pieces, bound)
    needed = mask_rows_needed(len(pieces)) if hiding else 0
    inline = hiding and commitment.mask_rows >= needed and not witness.spent
    mask_root = b""
    fresh = np.zeros((0, commitment.width), dtype=np.uint64)
    masks = fresh
    if inline:
        witness.spent.append(True)  # committed masks are used once; later openings draw fresh ones
        masks = witness.rows[data_rows:data_rows + needed]
    elif hiding:
        fresh = masks = _random_field((needed, commitment.width), rng)
        mask_encoded, mask_salts, mask_levels = _tree(fresh, commitment.codeword_length, True, rng)
        mask_root = mask_levels[-1][0]
    libra = _libra_coefficients(masks[_LIBRA], k) if hiding and reduce and k else None
    if libra is not None and mask_entries(k, REDUCTION_DEGREE) > commitment.width:
        raise ProofError(f"open_functionals: the reduction's mask needs {mask_entries(k, REDUCTION_DEGREE)} entries, "
                         f"a row has {commitment.width}")
    mask_sum_ = mask_sum(libra)[None] if libra is not None else F.ext_zero((0,))
    gamma, alpha, rho = _challenges(transcript, committed_rows + fresh.shape[0], len(functionals), reduce,
                                    mask_root, values, mask_sum_)
    messages = F.ext_zero((0, REDUCTION_DEGREE + 1))
    if reduce:
        groups = _row_groups(pieces, alpha[_owners(functionals)])
        a, u = _reduction_prover(groups, data[:, :cols])
        messages, sigma = _prove_reduction(a, u, libra, rho, transcript)
        row_weights, column = _reduced_weights(groups, sigma)
    else:
        row_weights, column = (_dense(a) for a in pieces[0])
    mask_value = F.ext_zero((0,))
    if hiding:
        value_mask = _ext_row(masks[_VALUE:_VALUE + VALUE_MASKS])
        mu = F.ext_dot(value_mask[:cols], column)
        if libra is not None:
            libra_weights = powers_table(sigma, REDUCTION_DEGREE)
            libra_mask = _ext_row(masks[_LIBRA_ROW_MASK:_LIBRA_ROW_MASK + VALUE_MASKS])
            mu = F.ext_add(mu, F.ext_dot(libra_mask[:libra_weights.shape[0]], libra_weights))
        mask_value = mu[None]
    beta = _beta(transcript, mask_value)
    proximity = _combine(gamma[:committed_rows], witness.rows)
    if fresh.shape[0]:
        proximity = F.ext_add(proximity, _combine(gamma[committed_rows:], fresh))
    value_row = _combine(row_weights, data)
    sent = [proximity, F.ext_add(value_row, F.ext_mul(value_mask, beta[None, :])) if hiding else value_row]
    if libra is not None:
        sent.append(F.ext_add(F.ext_mul_base(rho[None, :], masks[_LIBRA]), F.ext_mul(libra_mask, beta[None, :])))
    sent = np.stack(sent)
    indices = _queries(transcript, commitment, sent)
    separate = fresh.shape[0] > 0
    opening = HidingOpening(
        mask_root, mask_sum_, messages, mask_value, sent, witness_code(witness)[:, indices].copy(),
        mask_encoded[:, indices].copy() if separate else np.zeros((0, indices.size), dtype=np.uint64),
        tuple(witness.salts[i] for i in indices) if hiding else (),
        tuple(mask_salts[i] for i in indices) if separate else (),
        tuple(merkle_open(witness.levels, indices)),
        tuple(merkle_open(mask_levels, indices)) if separate else ())
    return values, opening


def _check_shape(name, arr, shape, where):
    if not isinstance(arr, np.ndarray) or arr.shape != shape or not F.is_canonical(arr):
        raise ProofRejected(f"{name} of shape {getattr(arr, 'shape', None)}, expected {shape}", where)


def verify_functionals(commitment: HidingCommitment, functionals, values, opening: HidingOpening, transcript,
                       min_bits: float = 100, bound: bool = False) -> None:
    """Raise ProofRejected unless ``opening`` shows the committed table has the functional ``values`` (m, 4)
    (``bound`` as :func:`open_functionals`)."""
    where = "hiding opening"
    if not isinstance(commitment, HidingCommitment) or not isinstance(opening, HidingOpening):
        raise ProofRejected("expected a HidingCommitment and a HidingOpening", where)
    if commitment.security_bits < min_bits:
        raise ProofRejected(f"commitment parameters give {commitment.security_bits:.1f} < {min_bits} bits", where)
    pieces = _check_functionals(commitment, functionals, lambda m: ProofRejected(m, where))
    values = np.asarray(values)
    m, hiding, k = len(functionals), commitment.params.hiding, commitment.log_cols
    data_rows, width, cols = 1 << commitment.log_rows, commitment.width, 1 << commitment.log_cols
    committed_rows = data_rows + commitment.mask_rows
    reduce = len(pieces) > 1
    needed = mask_rows_needed(len(pieces)) if hiding else 0
    if not isinstance(opening.mask_root, bytes) or len(opening.mask_root) not in (0, DIGEST_SIZE):
        raise ProofRejected("mask root must be empty or a 32-byte digest", where)
    separate = len(opening.mask_root) == DIGEST_SIZE
    if separate and not hiding:
        raise ProofRejected("a mask root without hiding", where)
    if hiding and not separate and commitment.mask_rows < needed:
        raise ProofRejected(f"{len(pieces)} pieces need {needed} committed mask rows, the commitment has "
                            f"{commitment.mask_rows}", where)
    libra = hiding and reduce and k > 0
    if libra and mask_entries(k, REDUCTION_DEGREE) > width:
        raise ProofRejected(f"the reduction's mask needs {mask_entries(k, REDUCTION_DEGREE)} entries, a row has "
                            f"{width}", where)
    fresh_count = needed if separate else 0
    for name, arr, shape in (("values", values, (m, 4)), ("mask sum", opening.mask_sum, (int(libra), 4)),
                             ("reduction", opening.reduction, (k if reduce else 0, REDUCTION_DEGREE + 1, 4)),
                             ("mask value", opening.mask_value, (int(hiding), 4)),
                             ("rows", opening.rows, (2 + int(libra), width, 4))):
        _check_shape(name, arr, shape, where)
    _begin(transcript, commitment, pieces, bound)
    gamma, alpha, rho = _challenges(transcript, committed_rows + fresh_count, m, reduce, opening.mask_root, values,
                                    opening.mask_sum)
    if reduce:
        claim = F.ext_sum(F.ext_mul(values, alpha), axis=0)
        if libra:
            claim = F.ext_add(claim, F.ext_mul(rho, opening.mask_sum[0]))
        sigma, expected = _verify_reduction(opening.reduction, claim, k, transcript, where)
        row_weights, column = _reduced_weights(_row_groups(pieces, alpha[_owners(functionals)]), sigma)
    else:
        row_weights, column = (_dense(a) for a in pieces[0])
        expected = values[0]
    beta = _beta(transcript, opening.mask_value)
    indices = _queries(transcript, commitment, opening.rows)
    q = indices.size
    for name, arr, count in (("columns", opening.columns, committed_rows),
                             ("mask columns", opening.mask_columns, fresh_count)):
        _check_shape(name, arr, (count, q), where)
    for group, count in ((opening.salts, q if hiding else 0), (opening.mask_salts, q if separate else 0)):
        if len(group) != count or not all(isinstance(s, bytes) and len(s) == SALT_SIZE for s in group):
            raise ProofRejected(f"expected {count} salts of {SALT_SIZE} bytes", where)
    depth = commitment.codeword_length.bit_length() - 1
    trees = [(opening.columns, opening.salts or (b"",) * q, opening.merkle, commitment.root)]
    if separate:
        trees.append((opening.mask_columns, opening.mask_salts, opening.mask_merkle, opening.mask_root))
    for columns, salts, merkle, root in trees:
        if not all(isinstance(d, bytes) and len(d) == DIGEST_SIZE for d in merkle):
            raise ProofRejected("Merkle digests must be 32-byte strings", where)
        if merkle_root_from(column_leaves(columns, salts), indices, list(merkle), depth) != root:
            raise ProofRejected("opened columns do not hash to the committed Merkle root", where)
    joint = np.concatenate([opening.columns, opening.mask_columns])
    mask_columns = opening.mask_columns if separate else opening.columns[data_rows:data_rows + needed]
    encoded = rs_encode_rows(np.transpose(opening.rows, (0, 2, 1)), commitment.codeword_length)  # one NTT call
    if not np.array_equal(encoded[0][:, indices].T, _combine(gamma, joint)):
        raise ProofRejected("proximity row is inconsistent with the opened columns", where)
    expected_columns = _combine(row_weights, opening.columns[:data_rows])
    if hiding:
        value_mask = _ext_row(mask_columns[_VALUE:_VALUE + VALUE_MASKS])
        expected_columns = F.ext_add(expected_columns, F.ext_mul(value_mask, beta[None, :]))
    if not np.array_equal(encoded[1][:, indices].T, expected_columns):
        raise ProofRejected("the value row is inconsistent with the opened columns", where)
    total = F.ext_dot(opening.rows[1][:cols], column)
    if libra:
        libra_mask = _ext_row(mask_columns[_LIBRA_ROW_MASK:_LIBRA_ROW_MASK + VALUE_MASKS])
        libra_columns = F.ext_add(F.ext_mul_base(rho[None, :], mask_columns[_LIBRA]),
                                  F.ext_mul(libra_mask, beta[None, :]))
        if not np.array_equal(encoded[2][:, indices].T, libra_columns):
            raise ProofRejected("the mask row is inconsistent with the opened columns", where)
        libra_weights = powers_table(sigma, REDUCTION_DEGREE)
        total = F.ext_add(total, F.ext_dot(opening.rows[2][:libra_weights.shape[0]], libra_weights))
    stated = F.ext_add(expected, F.ext_mul(beta, opening.mask_value[0])) if hiding else expected
    if not F.ext_eq(total, stated):
        raise ProofRejected("a stated value differs from the opened rows", where)


def open_points(witness: HidingWitness, points, transcript, values=None, seed=None):
    """MLE evaluations at ``points`` (m, n, 4) with one opening -> (values (m, 4), HidingOpening)."""
    functionals = [mle_functional(witness.commitment, z) for z in points]
    return open_functionals(witness, functionals, transcript, values, seed)


def verify_points(commitment: HidingCommitment, points, values, opening, transcript) -> None:
    """Raise ProofRejected unless the committed MLE takes ``values`` at ``points``."""
    points = np.asarray(points)
    if points.ndim != 3 or points.shape[1:] != (commitment.num_vars, 4) or not F.is_canonical(points):
        raise ProofRejected(f"points of shape {points.shape}, expected (m, {commitment.num_vars}, 4)", "hiding opening")
    verify_functionals(commitment, [mle_functional(commitment, z) for z in points], values, opening, transcript)


# ------------------------------------------------------------------------------------ ZK sumcheck
def _mask_width(degree: int) -> int:
    return 1 << degree.bit_length()  # >= degree + 1 coefficients per variable, a power of two


def mask_entries(num_vars: int, degree: int) -> int:
    """Base entries of a mask's coefficient table: num_vars x 2^bitlen(degree) F_p4 coefficients, 4 entries each."""
    return num_vars * _mask_width(degree) * F.EXT_DEGREE


def mask_table(coefficients) -> np.ndarray:
    """The committed layout of F_p4 coefficients (n, d + 1, 4): entry (i, e, t) at (i 2^bitlen(d) + e) 4 + t."""
    n, width = coefficients.shape[0], _mask_width(coefficients.shape[1] - 1)
    table = np.zeros((n, width, F.EXT_DEGREE), dtype=np.uint64)
    table[:, :coefficients.shape[1]] = coefficients
    return table.reshape(-1)


def random_mask(num_vars: int, degree: int, rng=None) -> np.ndarray:
    """Uniform F_p4 coefficients (num_vars, degree + 1, 4) of Libra's mask g(x) = sum_i g_i(x_i).

    F_p4 and not base-field coefficients: the round messages carry rho g_j(X), and rho times a base value only
    spans the line rho F_p of F_p4, which would leave three base coordinates of every coefficient of f's round
    polynomial in the clear (the same holds for Ligero's mask rows: :data:`VALUE_MASKS`)."""
    return _random_field((num_vars, degree + 1, F.EXT_DEGREE), rng)


_BASIS = np.eye(F.EXT_DEGREE, dtype=np.uint64)  #: the F_p4 elements u^t (coefficient vectors e_t)


def powers_table(point, degree: int) -> np.ndarray:
    """Weights of g(point) = sum_i sum_e c[i, e] point_i^e over :func:`mask_table`'s layout: entry (i, e, t)
    weighs point_i^e u^t (c[i, e] = sum_t c[i, e, t] u^t); zero-padded to a power of two."""
    width = _mask_width(degree)
    powers = F.ext_zero((point.shape[0], width))
    power = F.ext_one((point.shape[0],))
    for e in range(degree + 1):
        powers[:, e] = power
        power = F.ext_mul(power, point)
    flat = F.ext_mul(powers[:, :, None, :], _BASIS[None, None]).reshape(-1, F.EXT_DEGREE)
    return np.concatenate([flat, F.ext_zero(((1 << max(flat.shape[0] - 1, 0).bit_length()) - flat.shape[0],))])


def poly_at(coefficients, x) -> np.ndarray:
    """sum_e c_e x^e for F_p4 coefficients (d + 1, 4) (or base ones (d + 1,)) at an F_p4 point x (Horner)."""
    coefficients = np.asarray(coefficients, dtype=np.uint64)
    if coefficients.ndim == 1:
        coefficients = F.ext_from_base(coefficients)
    result = F.ext_zero()
    for c in coefficients[::-1]:
        result = F.ext_add(F.ext_mul(result, x), c)
    return result


def _ends(coefficients) -> np.ndarray:
    """g_i(0) + g_i(1) = 2 c_i0 + sum_(e >= 1) c_ie for every variable, (n, 4)."""
    return F.ext_add(coefficients[:, 0], F.ext_sum(coefficients, axis=1))


def mask_round(coefficients, j: int, prefix, num_vars: int, degree: int) -> np.ndarray:
    """sum over x_(j+1..) of g(r_<j, X, x) at X = 0..degree: 2^(k-1-j) (prefix + g_j(X)) + 2^(k-2-j) suffix.
    One pass of uint64 arrays (residues < 2^31 times powers X^e <= degree^degree: every sum exact)."""
    suffix = F.ext_sum(_ends(coefficients)[j + 1:], axis=0) if j + 1 < num_vars else F.ext_zero()
    powers = np.array([[x ** e for e in range(degree + 1)] for x in range(degree + 1)], dtype=np.uint64)
    g = (powers @ np.asarray(coefficients[j], dtype=np.uint64)) % _P  # g_j(X), (degree + 1, 4)
    out = (g + np.asarray(prefix, dtype=np.uint64)) % _P * np.uint64(pow(2, num_vars - 1 - j, F.P)) % _P
    if j + 1 < num_vars:
        out = (out + suffix * np.uint64(pow(2, num_vars - 2 - j, F.P)) % _P) % _P
    return out


def mask_sum(coefficients) -> np.ndarray:
    """G = sum_{x in {0,1}^k} sum_i g_i(x_i) = 2^(k-1) sum_i (g_i(0) + g_i(1)), as an F_p4 element (0 for k = 0)."""
    k = coefficients.shape[0]
    if k == 0:
        return F.ext_zero()
    return F.ext_mul_base(F.ext_sum(_ends(coefficients), axis=0), np.uint64(pow(2, k - 1, F.P)))


@dataclass(frozen=True, eq=False)
class ZKSumcheckProof:
    """Mask commitment and sum G, the round messages of f + rho g, g(sigma) and its opening."""

    mask_commitment: HidingCommitment
    mask_sum: np.ndarray
    sumcheck: SumcheckProof
    mask_eval: np.ndarray
    mask_opening: HidingOpening

    def to_bytes(self) -> bytes:
        return (self.mask_commitment.to_bytes() + F.elements_to_bytes(self.mask_sum)
                + F.elements_to_bytes(self.sumcheck.round_messages) + F.elements_to_bytes(self.mask_eval)
                + self.mask_opening.to_bytes())

    @classmethod
    def read(cls, reader) -> "ZKSumcheckProof":
        """Parse from a :class:`proofs.field.ByteReader` (ProofRejected on anything malformed)."""
        commitment = HidingCommitment.read(reader)
        total, messages, value = reader.elements(1), reader.elements(3), reader.elements(1)
        return cls(commitment, total, SumcheckProof(messages), value, HidingOpening.read(reader))

    @property
    def num_bytes(self) -> int:
        return len(self.to_bytes())


def _mask_statement(transcript, label, claim, num_vars, degree, commitment, total):
    transcript.absorb(f"{label}.zk.statement", [np.asarray(claim, dtype=np.uint64), int(num_vars), int(degree),
                                                 commitment.to_bytes(), np.asarray(total, dtype=np.uint64)])
    return transcript.challenge_ext(f"{label}.zk.rho")  # error 1 / p^4


def commit_mask(num_vars: int, degree: int, params: HidingParams, rng=None):
    """Random F_p4 coefficients (num_vars, degree + 1, 4) of g and their hiding commitment (one row,
    :func:`mask_table`'s layout)."""
    coefficients = random_mask(num_vars, degree, rng)
    commitment, witness = hiding_commit(mask_table(coefficients), mask_params(params), log_rows=0,
                                        seed=None if rng is None else int(rng.integers(1 << 62)))
    return coefficients, commitment, witness


def mask_params(params: HidingParams, pieces: int = 1) -> HidingParams:
    """The parameters of a mask commitment: hiding, with the masks of its one opening (of ``pieces`` values
    g_j(sigma_j)) committed in the same tree."""
    return HidingParams(params.rate_inv, params.target_bits, True, mask_rows=mask_rows_needed(pieces))


def masks_layout(shapes) -> tuple:
    """(log_rows, log_cols) of the table of every relation's mask: one row per relation ((variables, degree)
    each) in :func:`mask_table`'s layout, zero-padded to the widest."""
    widest = max([mask_entries(n, d) for n, d in shapes] + [1])
    return (max(len(shapes), 1) - 1).bit_length(), (widest - 1).bit_length()


def masks_shape(shapes, params: HidingParams) -> HidingCommitment:
    """The shape of :func:`commit_masks`'s commitment (root left empty)."""
    log_rows, log_cols = masks_layout(shapes)
    return HidingCommitment(b"", log_rows + log_cols, log_rows, mask_params(params, max(len(shapes), 1)))


def commit_masks(shapes, params: HidingParams, rng=None):
    """Libra masks (F_p4 coefficients) of every relation of a protocol, all in ONE hiding commitment made before
    its first challenge -> (coefficients per relation, commitment, witness). Libra's argument needs each g_j
    bound before its relation's rho: committing them all first does that, and their values g_j(sigma_j) are
    opened together at the end (:func:`masks_functional`) instead of one commitment and opening each."""
    log_rows, log_cols = masks_layout(shapes)
    coefficients = [random_mask(n, d, rng) for n, d in shapes]
    table = np.zeros((1 << log_rows, 1 << log_cols), dtype=np.uint64)
    for j, c in enumerate(coefficients):
        flat = mask_table(c)
        table[j, :flat.size] = flat
    commitment, witness = hiding_commit(table.reshape(-1), masks_shape(shapes, params).params, log_rows=log_rows,
                                        seed=None if rng is None else int(rng.integers(1 << 62)))
    return coefficients, commitment, witness


def masks_functional(shapes, j: int, point) -> list:
    """g_j(point) as one piece of :func:`commit_masks`'s table: row j, the powers of point in its layout."""
    log_rows, log_cols = masks_layout(shapes)
    rows = F.ext_zero((1 << log_rows,))
    rows[j] = F.ext_one()
    weights = powers_table(np.asarray(point, dtype=np.uint64).reshape(-1, F.EXT_DEGREE), shapes[j][1])
    columns = F.ext_zero((1 << log_cols,))
    columns[:weights.shape[0]] = weights
    return [(rows, columns)]


def prove_zk_sumcheck(terms, claim, transcript, label: str = "sumcheck", params: HidingParams = HidingParams(),
                      seed=None):
    """Zero-knowledge sumcheck of sum_x sum_t c_t prod f(x) = claim -> (ZKSumcheckProof, point, factor_evals).

    ``terms`` may also be a prover object with the :class:`~proofs.sumcheck.SumcheckProver` interface
    (``num_vars``, ``degree``, ``round_message``, ``bind``, ``challenges``, ``final_evaluations``), e.g. a
    specialised one. The prover does not check the claim (a false one fails at the verifier). ``seed``: tests only.
    """
    prover = terms if hasattr(terms, "round_message") else SumcheckProver(terms)
    claim = as_ext_scalar(claim, "claim")
    k, d = prover.num_vars, prover.degree
    rng = None if seed is None else np.random.default_rng(seed)
    coefficients, commitment, witness = commit_mask(k, d, params, rng)
    total = mask_sum(coefficients)
    rho = _mask_statement(transcript, label, claim, k, d, commitment, total)
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
    _, opening = open_functionals(witness, [[(F.ext_one((1,)), powers_table(point, d))]], transcript,
                                  values=prefix[None], seed=None if rng is None else int(rng.integers(1 << 62)))
    proof = ZKSumcheckProof(commitment, total, SumcheckProof(messages), prefix, opening)
    return proof, point, prover.final_evaluations()


def verify_zk_sumcheck(proof, claim, num_vars: int, degree: int, transcript, label: str = "sumcheck") -> SubClaim:
    """Check a :class:`ZKSumcheckProof`; returns the SubClaim on f alone (expected - rho g(sigma))."""
    num_vars, degree = int(num_vars), int(degree)
    if not isinstance(proof, ZKSumcheckProof):
        raise ProofRejected(f"expected a ZKSumcheckProof, got {type(proof).__name__}", label)
    messages = getattr(proof.sumcheck, "round_messages", None)
    if not isinstance(messages, np.ndarray) or messages.shape != (num_vars, degree + 1, F.EXT_DEGREE):
        raise ProofRejected(f"round messages of shape {getattr(messages, 'shape', None)}, expected "
                            f"({num_vars}, {degree + 1}, 4)", label)
    for name in ("mask_sum", "mask_eval"):
        value = getattr(proof, name)
        if not isinstance(value, np.ndarray) or value.shape != (4,) or not F.is_canonical(value):
            raise ProofRejected(f"{name} is not a canonical F_p4 element", label)
    mask = proof.mask_commitment
    width = mask_entries(num_vars, degree)
    if not isinstance(mask, HidingCommitment) or mask.log_rows != 0 or \
            mask.num_vars != (width - 1).bit_length() or not mask.params.hiding:
        raise ProofRejected("mask commitment has the wrong shape or does not hide", label)
    try:
        claim = as_ext_scalar(claim, "claim")
    except ProofError as error:
        raise ProofRejected(str(error), label) from None
    rho = _mask_statement(transcript, label, claim, num_vars, degree, mask, proof.mask_sum)
    verifier = SumcheckVerifier(F.ext_add(claim, F.ext_mul(rho, proof.mask_sum)), num_vars, degree, where=label)
    for message in messages:
        verifier.check_round(message)
        transcript.absorb(f"{label}.round", message)
        verifier.bind(transcript.challenge_ext(f"{label}.r"))
    sub = verifier.subclaim()
    transcript.absorb(f"{label}.zk.mask_eval", proof.mask_eval)
    verify_functionals(mask, [[(F.ext_one((1,)), powers_table(sub.point, degree))]], proof.mask_eval[None],
                       proof.mask_opening, transcript)
    return SubClaim(sub.point, F.ext_sub(sub.expected_value, F.ext_mul(rho, proof.mask_eval)))


# -------------------------------------------------------------------------------------- simulator
@dataclass(frozen=True, eq=False)
class SimulatedSumcheck:
    """A simulated transcript: rho, the mask sum G, round messages, programmed challenges, g(sigma)."""

    rho: np.ndarray
    mask_sum: np.ndarray
    round_messages: np.ndarray
    challenges: np.ndarray
    mask_eval: np.ndarray


def simulate_zk_sumcheck(claim, num_vars: int, degree: int, final_oracle, seed=None) -> SimulatedSumcheck:
    """Accepting transcripts without the witness: only ``claim`` and the oracle value f(sigma) are used.

    The simulator samples its own mask g, rho and the challenges (it programs them), sends uniformly
    random round polynomials with the required g(0) + g(1), and fixes the last one so that it hits
    f(sigma) + rho g(sigma) at the last challenge (Libra, theorem 3's simulator).
    """
    num_vars, degree = int(num_vars), int(degree)
    if num_vars < 1 or not 1 <= degree <= 8:
        raise ProofError(f"simulate_zk_sumcheck: num_vars={num_vars} must be >= 1 and degree={degree} in [1, 8]")
    rng = np.random.default_rng(seed) if seed is not None else None
    draw = (lambda shape: F.ext_random(shape)) if rng is None else \
        (lambda shape: rng.integers(0, F.P, size=tuple(np.atleast_1d(shape)) + (4,), dtype=np.uint64))
    coefficients = random_mask(num_vars, degree, rng)
    rho, challenges = draw(1)[0], draw(num_vars)
    total = mask_sum(coefficients)
    mask_eval = F.ext_zero()
    for j in range(num_vars):
        mask_eval = F.ext_add(mask_eval, poly_at(coefficients[j], challenges[j]))
    target = F.ext_add(np.asarray(final_oracle(challenges), dtype=np.uint64), F.ext_mul(rho, mask_eval))
    running = F.ext_add(as_ext_scalar(claim, "claim"), F.ext_mul(rho, total))
    messages = np.zeros((num_vars, degree + 1, 4), dtype=np.uint64)
    two_inv = F.inv(np.uint64(2))
    for j in range(num_vars):
        message = draw(degree + 1)
        if j == num_vars - 1:  # solve g(0) + g(1) = running and g(r) = target for the values at 0 and 1
            message[0], message[1] = F.ext_zero(), F.ext_zero()
            base = lagrange_eval(message, challenges[j])  # contribution of the values at 2..d
            e0, e1 = message.copy(), message.copy()
            e0[:] = 0
            e1[:] = 0
            e0[0], e1[1] = F.ext_one(), F.ext_one()
            l0, l1 = lagrange_eval(e0, challenges[j]), lagrange_eval(e1, challenges[j])
            # a + b = running, l0 a + l1 b = target - base  =>  a (l0 - l1) = target - base - l1 running
            a = F.ext_mul(F.ext_sub(F.ext_sub(target, base), F.ext_mul(l1, running)), F.ext_inv(F.ext_sub(l0, l1)[None])[0])
            message[0], message[1] = a, F.ext_sub(running, a)
        else:
            half = F.ext_mul_base(running, two_inv)
            shift = message[0]
            message[0], message[1] = F.ext_sub(half, shift), F.ext_add(half, shift)
            running = lagrange_eval(message, challenges[j])
        messages[j] = message
    return SimulatedSumcheck(rho, total, messages, challenges, mask_eval)
