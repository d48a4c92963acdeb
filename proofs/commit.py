"""Transparent hash-based multilinear commitment, Ligero / Brakedown style.

Ames, Hazay, Ishai, Venkitasubramaniam, "Ligero" (CCS 2017); Golovnev, Lee, Setty, Thaler, Wahby,
"Brakedown" (CRYPTO 2023), section 4. No trusted setup: only a hash function (BLAKE2b-256).

A vector of 2^n base-field values is laid out as a row-major matrix M with 2^a rows and 2^b columns
(n = a + b); index i = row * 2^b + col, so the low b variables of a point select the column and the
high a variables the row: f~(z) = eq(z_row)^T M eq(z_col). Each row is Reed-Solomon encoded at rate
rho = 1/rate_inv (its 2^b entries are the coefficients of a polynomial evaluated on the 2-adic subgroup
of order 2^b * rate_inv by an NTT); the commitment is the Merkle root over the columns of the encoded matrix.

Opening at points z_1..z_m (all at once): the verifier draws gamma in F_p4^rows (proximity test);
the prover sends u_rand = gamma^T M and u_k = eq(z_k,row)^T M; the verifier draws ``num_queries``
column indices and checks, at every queried column j, Enc(u)[j] = (combination of column j), with
column j authenticated by the Merkle multi-proof; finally f~(z_k) = <u_k, eq(z_k,col)>.

Soundness (stated here, computed in :meth:`CommitParams.security_bits` / :attr:`Commitment.security_bits`):
the code has relative distance delta = 1 - rho. If the committed matrix is not within delta/2 of the
interleaved code, or a sent row differs from the true combination's codeword (then it differs in at least
delta/2 of the positions), one uniform query misses with probability at most 1 - delta/2 = (1 + rho)/2;
so the query error is ((1 + rho)/2)^num_queries. The random combination over F_p4 adds at most
codeword_length / |F_p4| per test (proximity gaps for Reed-Solomon codes up to the unique decoding radius,
Ben-Sasson, Carmon, Ishai, Kopparty, Saraf, FOCS 2020), counted twice.

Hiding (issue 7) would add random masking rows to M and a salt to every leaf hash (see
:func:`_leaf_digests`); the opening protocol stays the same.
"""
from __future__ import annotations

import math
import sys
import types
from dataclasses import dataclass, field as dataclass_field

import numpy as np

from . import field as F
from .errors import ProofError, ProofRejected
from .mle import eq_table, pad_to_pow2
from .pcs.merkle import (DIGEST_SIZE, LEAF_PREFIX, column_leaves, digest_levels, merkle_levels,  # noqa: F401
                         merkle_open, merkle_root_from, multiproof_siblings, prefixed_hash)
from .pcs.reed_solomon import (NTT_NUMBA_MIN_SIZE, bit_reverse, ntt, powers,  # noqa: F401
                               rs_encode, rs_encode_rows)

DEFAULT_TARGET_BITS = 104  #: default commitment security, leaving room for the rest of a proof to stay >= 100
MIN_VERIFY_BITS = 100  #: verifiers refuse commitments whose parameters promise less
MAX_NUM_VARS = 30
_COMMITMENT_MAGIC, _OPENING_MAGIC, _VERSION = b"HZKCMT01", b"HZKOPN01", 1


def query_bits(rate_inv: int) -> float:
    """-log2 of the probability that one column query misses: -log2((1 + rho) / 2)."""
    return -math.log2((1 + 1 / rate_inv) / 2)


@dataclass(frozen=True)
class CommitParams:
    """Reed-Solomon rate 1/``rate_inv`` (a power of two in [2, 64]) and ``num_queries`` column queries.

    ``num_queries=None`` picks the fewest queries for ``DEFAULT_TARGET_BITS`` (154 at rate 1/4).
    """

    rate_inv: int = 4
    num_queries: int | None = None

    def __post_init__(self):
        rate_inv = self.rate_inv
        if not isinstance(rate_inv, (int, np.integer)) or rate_inv < 2 or rate_inv > 64 or rate_inv & (rate_inv - 1):
            raise ProofError(f"CommitParams: rate_inv={rate_inv!r} must be a power of two in [2, 64]")
        if self.num_queries is None:
            object.__setattr__(self, "num_queries", math.ceil(DEFAULT_TARGET_BITS / query_bits(rate_inv)))
        queries = self.num_queries
        if not isinstance(queries, (int, np.integer)) or not 1 <= queries <= 4096:
            raise ProofError(f"CommitParams: num_queries={queries!r} not in [1, 4096]")
        object.__setattr__(self, "rate_inv", int(rate_inv))
        object.__setattr__(self, "num_queries", int(queries))

    @property
    def security_bits(self) -> float:
        """Query soundness alone: -log2(((1 + 1/rate_inv) / 2)^num_queries)."""
        return self.num_queries * query_bits(self.rate_inv)


def matrix_layout(num_vars: int) -> tuple[int, int]:
    """(log_rows, log_cols): about 16x more columns than rows, balancing sent rows against opened columns."""
    log_rows = max(0, (num_vars - 4) // 2)
    return log_rows, num_vars - log_rows


# ------------------------------------------------------------------------------------- NTT / RS, Merkle
# shared with the other schemes: proofs.pcs.reed_solomon and proofs.pcs.merkle (re-exported here for callers)
def _leaf_digests(columns: np.ndarray) -> list[bytes]:
    """H(0x00 || column bytes) for each column of a (rows, m) array (the hiding variant appends a salt)."""
    return column_leaves(columns, (b"",) * columns.shape[1])


def _row_hash_kernels():
    """The compiled BLAKE2b row kernels, or None without numba or on a big-endian host (little-endian words)."""
    if sys.byteorder != "little" or F.numba_kernels() is None:
        return None
    from . import _basefold_kernels
    return _basefold_kernels


def _merkle_tree(columns: np.ndarray) -> list:
    """The Merkle levels over the columns' leaf digests (:func:`_leaf_digests`, then H(0x01 || left || right)):
    hashed by the compiled BLAKE2b row kernels on the threads of ``hezk.threads`` ((n, 32) uint8 levels; one
    Python hashlib call per leaf and node was a third of LeNet-5's graph proof) where they run, else
    :func:`merkle_levels` (lists of bytes, the twin; :func:`merkle_open` reads either)."""
    kernels = _row_hash_kernels() if columns.shape[1] >= F.NUMBA_MIN_SIZE else None
    if kernels is None:
        return merkle_levels(_leaf_digests(columns))
    data = np.empty((columns.shape[1], columns.shape[0]), dtype="<u4")
    F.numba_kernels().transpose_u32(np.ascontiguousarray(columns, dtype=np.uint64), data)
    data = data.view(np.uint8)
    digests = np.empty((columns.shape[1], DIGEST_SIZE), dtype=np.uint8)
    kernels.blake2b_rows(np.uint8(LEAF_PREFIX[0]), data, kernels._IV, digests)
    return digest_levels(digests)


# ------------------------------------------------------------------------------------------- objects
@dataclass(frozen=True)
class Commitment:
    """The short public commitment: Merkle root, number of variables, layout and code parameters."""

    root: bytes
    num_vars: int
    params: CommitParams = CommitParams()

    def __post_init__(self):
        if not isinstance(self.root, bytes):  # a root of another length simply never matches
            raise ProofError(f"Commitment: root must be bytes, got {type(self.root).__name__}")
        if not isinstance(self.num_vars, (int, np.integer)) or not 0 <= self.num_vars <= MAX_NUM_VARS:
            raise ProofError(f"Commitment: num_vars={self.num_vars!r} not in [0, {MAX_NUM_VARS}]")
        if not isinstance(self.params, CommitParams):
            raise ProofError(f"Commitment: params must be a CommitParams, got {type(self.params).__name__}")
        object.__setattr__(self, "num_vars", int(self.num_vars))

    @property
    def log_rows(self) -> int:
        return matrix_layout(self.num_vars)[0]

    @property
    def log_cols(self) -> int:
        return matrix_layout(self.num_vars)[1]

    @property
    def codeword_length(self) -> int:
        return (1 << self.log_cols) * self.params.rate_inv

    @property
    def security_bits(self) -> float:
        """-log2(((1 + rho)/2)^q + 2 * codeword_length / p^4): queries plus the two random combinations."""
        error = 2.0 ** -self.params.security_bits + 2 * self.codeword_length * 2.0 ** -F.EXT_BITS
        return -math.log2(error)

    def to_bytes(self) -> bytes:
        """magic, version (u8), num_vars (u8), log2(rate_inv) (u8), num_queries (u16), root (32 bytes)."""
        return (_COMMITMENT_MAGIC + bytes([_VERSION, self.num_vars, self.params.rate_inv.bit_length() - 1])
                + self.params.num_queries.to_bytes(2, "little") + self.root)

    def __reduce__(self):
        """Pickle (Dask, multiprocessing, concurrent.futures) through the versioned bytes of ``to_bytes``."""
        return type(self).from_bytes, (self.to_bytes(),)

    @classmethod
    def from_bytes(cls, data) -> "Commitment":
        """Inverse of :meth:`to_bytes`; malformed data raises ProofRejected."""
        reader = F.ByteReader(data, where="commitment")
        reader.header(_COMMITMENT_MAGIC, _VERSION)
        num_vars, log_rate = reader.uint(1), reader.uint(1)
        num_queries = reader.uint(2)
        root = reader.raw(DIGEST_SIZE)
        reader.finish()
        try:
            return cls(root, num_vars, CommitParams(rate_inv=1 << min(log_rate, 63), num_queries=num_queries))
        except ProofError as error:
            raise ProofRejected(str(error), "commitment") from None


@dataclass(frozen=True, eq=False)
class CommitmentWitness:
    """The prover's side of a commitment: the matrix, its encoding and the Merkle tree. Reuse it for every opening."""

    commitment: Commitment
    matrix: np.ndarray  # (rows, cols) base field
    encoded: np.ndarray  # (rows, cols * rate_inv)
    levels: list = dataclass_field(repr=False)  # Merkle levels, leaves first


@dataclass(frozen=True, eq=False)
class OpeningProof:
    """u_rand (cols, 4), u_evals (points, cols, 4), opened columns (rows, distinct queries), Merkle multi-proof."""

    u_rand: np.ndarray
    u_evals: np.ndarray
    columns: np.ndarray
    merkle_proof: tuple

    def to_bytes(self) -> bytes:
        digests = b"".join(self.merkle_proof)
        return (_OPENING_MAGIC + bytes([_VERSION]) + F.elements_to_bytes(self.u_rand)
                + F.elements_to_bytes(self.u_evals) + F.elements_to_bytes(self.columns)
                + len(self.merkle_proof).to_bytes(4, "little") + digests)

    def __reduce__(self):
        """Pickle (Dask, multiprocessing, concurrent.futures) through the versioned bytes of ``to_bytes``."""
        return type(self).from_bytes, (self.to_bytes(),)

    @classmethod
    def from_bytes(cls, data) -> "OpeningProof":
        """Inverse of :meth:`to_bytes`; malformed data raises ProofRejected (shapes are checked on verification)."""
        reader = F.ByteReader(data, where="opening proof")
        reader.header(_OPENING_MAGIC, _VERSION)
        u_rand, u_evals, columns = reader.elements(2), reader.elements(3), reader.elements(2)
        count = reader.count(4, DIGEST_SIZE, "Merkle digest count")
        digests = reader.raw(DIGEST_SIZE * count)
        reader.finish()
        merkle = tuple(digests[i:i + DIGEST_SIZE] for i in range(0, len(digests), DIGEST_SIZE))
        return cls(u_rand, u_evals, columns, merkle)

    @property
    def num_bytes(self) -> int:
        return len(self.to_bytes())


# ------------------------------------------------------------------------------------------ protocol
def committed_table(values, where: str):
    """Values -> (table zero-padded to 2^n canonical residues, n); integers are reduced mod p."""
    values = np.asarray(values)
    if values.dtype != np.uint64:
        values = F.to_field(values)  # signed or small integers -> residues; floats raise FieldError
    elif not F.is_canonical(values):
        raise ProofError(f"{where}: uint64 values must be canonical field elements, found {int(values.max())} >= p")
    table = pad_to_pow2(values.reshape(-1)) if values.size else np.zeros(1, dtype=np.uint64)
    num_vars = table.size.bit_length() - 1
    if num_vars > MAX_NUM_VARS:
        raise ProofError(f"{where}: {values.size} values need num_vars={num_vars} > {MAX_NUM_VARS}")
    return table, num_vars


def commit(values, params: CommitParams = CommitParams()):
    """Commit to base-field ``values`` (zero-padded to a power of two) -> (Commitment, CommitmentWitness).

    ``values``: canonical uint64 residues, or any integer array (reduced mod p, negatives to p - |v|).

    Cost: one NTT per row (rows * cols * rate_inv log), one hash per encoded column and Merkle node.
    """
    if not isinstance(params, CommitParams):
        raise ProofError(f"commit: params must be a CommitParams, got {type(params).__name__}")
    table, num_vars = committed_table(values, "commit")
    log_rows, log_cols = matrix_layout(num_vars)
    matrix = table.reshape(1 << log_rows, 1 << log_cols)
    encoded = rs_encode(matrix, params.rate_inv)
    levels = _merkle_tree(encoded)
    commitment = Commitment(bytes(levels[-1][0]), num_vars, params)
    return commitment, CommitmentWitness(commitment, matrix, encoded, levels)


def _split_points(points, commitment: Commitment, error):
    """(m, n, 4) canonical points -> (column eq tables (m, cols, 4), row eq tables (m, rows, 4))."""
    points = np.asarray(points)
    if points.dtype != np.uint64 or points.ndim != 3 or points.shape[1:] != (commitment.num_vars, F.EXT_DEGREE) \
            or not F.is_canonical(points):
        raise error(f"points of shape {points.shape} and dtype {points.dtype}, expected canonical "
                    f"(m, {commitment.num_vars}, 4) uint64")
    b = commitment.log_cols
    return [eq_table(z[:b]) for z in points], [eq_table(z[b:]) for z in points]


def _begin(transcript, commitment: Commitment, points):
    transcript.absorb("commit.commitment", commitment.to_bytes())
    transcript.absorb("commit.points", np.asarray(points, dtype=np.uint64))
    # each gamma entry is uniform in F_p4: error <= codeword_length / p^4 (proximity gaps)
    return transcript.challenge_ext_vector("commit.gamma", 1 << commitment.log_rows)


def _queries(transcript, commitment: Commitment, values, u_rand, u_evals) -> np.ndarray:
    transcript.absorb("commit.values", np.asarray(values, dtype=np.uint64))
    transcript.absorb("commit.rows", [u_rand, u_evals])
    # uniform column indices: each misses a bad column set of density >= delta/2 w.p. <= (1 + rho)/2
    drawn = transcript.challenge_indices("commit.queries", commitment.params.num_queries, commitment.codeword_length)
    return np.unique(drawn)


def _combine_rows(weights, matrix) -> np.ndarray:
    """weights (c, rows, 4) in F_p4, base matrix (rows, m) -> (c, m, 4), each weights[i]^T matrix; one exact product."""
    count, rows, _ = weights.shape
    stacked = weights.transpose(0, 2, 1).reshape(count * F.EXT_DEGREE, rows)
    return F.matmul(stacked, matrix).reshape(count, F.EXT_DEGREE, -1).transpose(0, 2, 1).copy()


def open_batch(witness: CommitmentWitness, points, transcript):
    """Open the committed MLE at several points with one set of column queries -> (values (m, 4), OpeningProof)."""
    commitment = witness.commitment
    col_eqs, row_eqs = _split_points(points, commitment, ProofError)
    gamma = _begin(transcript, commitment, points)
    combined = _combine_rows(np.stack([gamma] + row_eqs), witness.matrix)  # the proximity row, then one per point
    u_rand, u_evals = combined[0], combined[1:]
    values = np.array([F.ext_dot(u, col_eq) for u, col_eq in zip(u_evals, col_eqs)], dtype=np.uint64)
    values = values.reshape(len(col_eqs), F.EXT_DEGREE)
    indices = _queries(transcript, commitment, values, u_rand, u_evals)
    proof = OpeningProof(u_rand, u_evals, witness.encoded[:, indices].copy(),
                         tuple(merkle_open(witness.levels, indices)))
    return values, proof


def open_commitment(witness: CommitmentWitness, point, transcript):
    """Evaluate the committed MLE at ``point`` ((n, 4)) -> (value (4,), OpeningProof)."""
    values, proof = open_batch(witness, np.asarray(point)[None], transcript)
    return values[0], proof


def verify_batch(commitment: Commitment, points, values, proof: OpeningProof, transcript,
                 min_security_bits: float = MIN_VERIFY_BITS) -> None:
    """Raise ProofRejected unless ``proof`` shows the committed MLE takes ``values`` (m, 4) at ``points`` (m, n, 4)."""
    where = "commitment opening"
    if not isinstance(commitment, Commitment):
        raise ProofRejected(f"expected a Commitment, got {type(commitment).__name__}", where)
    if commitment.security_bits < min_security_bits:
        raise ProofRejected(f"commitment parameters give {commitment.security_bits:.1f} bits "
                            f"< {min_security_bits} required", where)
    col_eqs, row_eqs = _split_points(points, commitment, lambda message: ProofRejected(message, where))
    values = np.asarray(values)
    rows, cols = 1 << commitment.log_rows, 1 << commitment.log_cols
    if values.shape != (len(col_eqs), F.EXT_DEGREE) or not F.is_canonical(values):
        raise ProofRejected(f"values of shape {values.shape}, expected canonical ({len(col_eqs)}, 4)", where)
    if not isinstance(proof, OpeningProof):
        raise ProofRejected(f"expected an OpeningProof, got {type(proof).__name__}", where)
    expected = {"u_rand": (cols, 4), "u_evals": (len(col_eqs), cols, 4)}
    for name, shape in expected.items():
        arr = getattr(proof, name)
        if not isinstance(arr, np.ndarray) or arr.shape != shape or not F.is_canonical(arr):
            raise ProofRejected(f"{name} of shape {getattr(arr, 'shape', None)}, expected {shape}", where)
    gamma = _begin(transcript, commitment, points)
    indices = _queries(transcript, commitment, values, proof.u_rand, proof.u_evals)
    columns = proof.columns
    if not isinstance(columns, np.ndarray) or columns.shape != (rows, indices.size) or not F.is_canonical(columns):
        raise ProofRejected(f"opened columns of shape {getattr(columns, 'shape', None)}, "
                            f"expected ({rows}, {indices.size})", where)
    merkle = proof.merkle_proof
    if not isinstance(merkle, (tuple, list)) or not all(isinstance(d, bytes) and len(d) == DIGEST_SIZE for d in merkle):
        raise ProofRejected("Merkle digests must be 32-byte strings", where)
    depth = commitment.codeword_length.bit_length() - 1
    if merkle_root_from(_leaf_digests(columns), indices, list(merkle), depth) != commitment.root:
        raise ProofRejected("opened columns do not hash to the committed Merkle root", where)
    expected = _combine_rows(np.stack([gamma] + row_eqs), columns)  # (1 + m, queried columns, 4)
    sent = np.concatenate([proof.u_rand[None], proof.u_evals])  # the F_p-linear code acts coordinate-wise
    encoded = rs_encode(sent.transpose(0, 2, 1), commitment.params.rate_inv)[..., indices].transpose(0, 2, 1)
    for k in range(sent.shape[0]):
        if not np.array_equal(encoded[k], expected[k]):
            name = "proximity row" if k == 0 else f"evaluation row {k - 1}"
            raise ProofRejected(f"{name} is inconsistent with the opened columns", where)
    for k, (u, col_eq) in enumerate(zip(proof.u_evals, col_eqs)):
        if not F.ext_eq(F.ext_dot(u, col_eq), values[k]):
            raise ProofRejected(f"claimed value {k} differs from the evaluation row", where)


def verify_opening(commitment: Commitment, point, value, proof: OpeningProof, transcript,
                   min_security_bits: float = MIN_VERIFY_BITS) -> None:
    """Raise ProofRejected unless ``proof`` shows the committed MLE equals ``value`` ((4,)) at ``point`` ((n, 4))."""
    value = np.asarray(value)
    if value.shape != (F.EXT_DEGREE,):
        raise ProofRejected(f"value of shape {value.shape}, expected (4,)", "commitment opening")
    verify_batch(commitment, np.asarray(point)[None], value[None], proof, transcript, min_security_bits)


class _CallableModule(types.ModuleType):
    """This module, callable: ``proofs.commit(values, params)`` is :func:`commit`.

    The package exports the commit function under the module's own name; making the module callable
    keeps both ``proofs.commit(...)`` and ``import proofs.commit`` / ``from proofs.commit import ...``
    working (``proofs.commit_values`` is the plain function).
    """

    def __call__(self, values, params: CommitParams = CommitParams()):
        return commit(values, params)


sys.modules[__name__].__class__ = _CallableModule
