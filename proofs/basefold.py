"""Basefold: a transparent multilinear commitment with O(log^2 n) openings, batched over many commitments.

Zeilberger, Chen, Fisch, "BaseFold: Efficient Field-Agnostic Polynomial Commitment Schemes from Foldable
Codes" (CRYPTO 2024). Why Basefold here rather than FRI-Binius (Diamond, Posen, 2024) or WHIR (Arnon,
Chiesa, Fenzi, Yogev, 2024): FRI-Binius is built for binary tower fields (its packing gains nothing over
BabyBear, a 31-bit prime field with 2-adicity 27); WHIR gives the smallest proofs but its soundness rests on
mutual correlated agreement, proven only up to the Johnson bound with large constants, and its constrained
Reed-Solomon machinery is far more code to audit. Basefold over a Reed-Solomon code is FRI in disguise (the
foldable code the paper instantiates with an RS code on a 2-adic subgroup) whose folding challenges are the
sumcheck challenges of the evaluation claim, so its soundness reduces to FRI's (proven in the unique decoding
regime, below) and the sumcheck's; one claim-reduction sumcheck and one fold chain settle every claim of
every committed table at once.

Encoding. A table t of 2^n base-field values (the evaluations of f~ on the hypercube, proofs.mle's order) is
read as the coefficients of g(X) = sum_i t_i X^i and evaluated on the subgroup <w_N> of order N = 2^n rho^-1
(commit.rs_encode); the commitment is the Merkle root of the codeword, whose leaves are cosets of 2^b points
{j + s N/2^b} (in a table's own tree adjacent cosets share a leaf while their bytes fit one BLAKE2b block:
``leaf_group``). Folding with r: writing g(X) = g_e(X^2) + X g_o(X^2), the fold (1 - r) g_e + r g_o is the RS
encoding of the folded table t'_j = (1 - r) t_2j + r t_2j+1, i.e. of f~ with x_0 := r, and it is computed
pointwise from the pair (g(x), g(-x)): with s = (g(x) + g(-x))/2, d = (g(x) - g(-x))/(2x), the value at x^2 is
s + r (d - s). After n folds the table is the constant f~(r).

Opening claims f_k~(z_kj) = v_kj (several commitments k of any sizes n_k, several points each), in one proof:
(1) claim reduction: the verifier draws c_kj; a degree-2 sumcheck of sum_k 2^(n_max - n_k) sum_x f_k(x) W_k(x),
W_k = sum_j c_kj eq(z_kj, .), binding x_0 first (a table of n_k variables joins when n_k variables remain;
before, its part is a constant) ends at one point r; the prover states y_k = f_k~(r_k), r_k the last n_k
coordinates of r (skipped for one table with one claim: r = z, y = v). (2) One Basefold opening of the combined
table H = sum_k beta_k f_k (f_k constant in r's first n_max - n_k variables) at r: a sumcheck of
sum_x eq(r, x) H(x); when n_k variables remain, beta_k is drawn (after y_k and every earlier challenge) and
beta_k eq(r, rho)_prefix y_k joins the running claim; table k's codeword (its 2^s interleaved rows folded by
the challenges of its first s rounds, see ``max_log_codeword``) joins the combined codeword with the same
beta_k. After each round the combined codeword is folded; at the layers final + i * arity it is committed in
one Merkle tree (leaf j: a coset of 2^arity values). Folding stops at ``final_vars`` variables; the prover sends
the final table, the verifier checks the last claim against it, then draws ``num_queries`` positions of the
largest domain and checks at each, along the one fold chain, that folding the opened coset (plus the joining
tables' opened cosets, rows folded) gives the next layer's opened value, and at the end the final table's
encoding. Tables of at most ``final_vars`` variables are sent whole (the verifier rebuilds their Merkle root).

Soundness (BCIKS20: Ben-Sasson, Carmon, Ishai, Kopparty, Saraf, "Proximity gaps for Reed-Solomon codes",
FOCS 2020, unique decoding regime; the FRI analysis of Ben-Sasson, Bentov, Horesh, Riabzev, ICALP 2018; the
Basefold paper's reduction): with delta = 1 - rho, a word farther than delta/2 from the code stays far after a
random affine combination (a fold, a row fold, a join) except with probability N/|F_p4| (N its length; the
folds of the combined codeword add up to 2 N_top/|F_p4|), and then one uniform query misses w.p. at most
1 - delta/2 = (1 + rho)/2; each sumcheck round adds 2/|F_p4| and each claim 1/|F_p4|
(:func:`batch_security_bits`). Proven query error: ((1 + rho)/2)^num_queries. ``grinding_bits`` = g (off by
default) makes the prover find a g-bit proof of work before the queries (:mod:`proofs.grinding`): each re-roll of
the queries then costs 2^g hashes, so per hash (the unit of every soundness figure here) the query phase gives
g bits more and the default query count falls by g / -log2((1 + rho)/2). ``fold_grinding_bits`` = f (off by
default; per-round proof of work as in WHIR, Arnon, Chiesa, Fenzi, Yogev, ePrint 2024/1586, and Plonky3's
commit-phase proof of work) makes the prover find an f-bit proof of work on the transcript's state before every
challenge the fold terms come from: each opening round's folding challenge r (it folds the combined codeword and
the interleaved rows still folding) and, in a round where tables join, their beta_k (one proof of work for them
all); each nonce is absorbed before the challenge. A prover hunting a bad fold challenge then pays 2^f hashes a
draw, so per hash the fold terms 2 N_top + sum_k (s_k + 1) N'_k count 2^-f of their value (the sumcheck and claim
terms are counted whole); the field error no longer forces short rows, so large tables open fewer symbols per
query. Grinding buys at most MAX_GRINDING_CREDIT = 20 bits: verifiers also require the STATISTICAL bits (every
figure without grinding credit, query or fold, :func:`statistical_bits`; printed apart from the per-hash figure)
to reach ``min_security_bits`` - 20 (80 at the default 100), so a prover cannot choose 30 grinding bits over 74
statistical ones. ``conjectured=True`` (off
by default) uses rho^num_queries instead (the Reed-Solomon proximity conjecture up to capacity, e.g. ethSTARK's
conjecture 2.3): smaller proofs whose bits are labelled conjectured in :meth:`BasefoldParams.describe` and
:attr:`BasefoldCommitment.soundness_label`. The prover picks the parameters and they travel in the commitment's
bytes, so the VERIFIER decides: :func:`verify_batch` refuses conjectured parameters unless called with
``allow_conjectured=True``, and its minimum bits are checked against the bound the parameters claim (proven by
default).

Claims may also be structured linear functionals (:class:`Functional`: sum_x W(x) t(x) with W a sum of
eq(lo) x dense block x eq(hi) terms, whose MLE the verifier evaluates cheaply): the claim reduction then uses
W_k = sum_j c_kj W_kj and checks sum_j c_kj W_kj~(r_k) at its end (always run for functionals).

Hiding: not here. :mod:`proofs.basefold_zk` commits a slot table (the table, a random tail and random slots)
through this module and opens it with the same batch; its docstring argues why that hides.
"""
from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import hashlib
import math
import sys
from dataclasses import dataclass

import numpy as np

from . import field as F
from . import grinding
from .commit import committed_table
from .pcs.merkle import DIGEST_SIZE, digest_levels, merkle_levels, merkle_open, root_from_digests
from .pcs.reed_solomon import bit_reverse, powers, rs_encode
from .errors import ProofError, ProofRejected
from .mle import eq_eval, eq_table, fold

DEFAULT_TARGET_BITS = 104  #: query bits the default num_queries reaches (the rest of a proof stays >= 100)
MIN_VERIFY_BITS = 100  #: verifiers refuse openings whose parameters promise less
#: verifiers also refuse openings whose STATISTICAL bits (the figure without grinding credit) fall more than this
#: below their ``min_security_bits``: a prover cannot trade queries for proof of work past it (at the default 100,
#: a floor of MIN_STATISTICAL_BITS = 80; the default parameters give 104 with no grinding, hiding Networks'
#: basefold_params 92 statistical + 12 grinding)
MAX_GRINDING_CREDIT = 20
MIN_STATISTICAL_BITS = MIN_VERIFY_BITS - MAX_GRINDING_CREDIT
_GRINDING_CREDIT = contextvars.ContextVar("hezk_basefold_grinding_credit", default=True)
MAX_CLAIMS = 1 << 16  #: most (commitment, point) claims one batch opening takes
_COMMITMENT_MAGIC, _PROOF_MAGIC, _VERSION = b"HZKBFC01", b"HZKBFP01", 2
_FOLD_VERSION = 3  #: the bytes of a commitment (and proof) with fold grinding: one byte (nonces) more; none without
_INV2 = (F.P + 1) // 2


def _query_error_bits(rate_inv: int, conjectured: bool) -> float:
    """-log2 of one query's miss probability: (1 + rho)/2 proven (unique decoding), rho conjectured."""
    return math.log2(rate_inv) if conjectured else -math.log2((1 + 1 / rate_inv) / 2)


@dataclass(frozen=True)
class BasefoldParams:
    """Code rate 1/``rate_inv`` (power of two in [2, 64]), ``num_queries`` (None: fewest for 104 query bits,
    grinding included), ``arity`` folds per committed layer (leaves are cosets of 2^arity values, in [1, 6]),
    ``final_vars`` (folding stops there and the final table is sent, in [0, 12]), ``conjectured`` (off: proven
    bound), ``max_log_codeword`` (in [2, 27]: a larger table is committed as 2^s interleaved codewords of at most
    2^max_log_codeword symbols, which bounds the folding error (s + 2) N'/|F_p4|), ``grinding_bits`` (in [0, 30]:
    a proof of work of 2^g hashes before the queries, :mod:`proofs.grinding`, worth g query bits per hash),
    ``fold_grinding_bits`` (in [0, 30]: a proof of work of 2^f hashes before every folding challenge of the opening
    sumcheck and before the join coefficients, dividing the fold and join terms of the field error by 2^f per hash;
    module docstring, "Soundness")."""

    rate_inv: int = 4
    num_queries: int | None = None
    arity: int = 3
    final_vars: int = 4
    conjectured: bool = False
    max_log_codeword: int = 19
    grinding_bits: int = 0
    fold_grinding_bits: int = 0

    def __post_init__(self):
        rate_inv = self.rate_inv
        if not isinstance(rate_inv, (int, np.integer)) or not 2 <= rate_inv <= 64 or rate_inv & (rate_inv - 1):
            raise ProofError(f"BasefoldParams: rate_inv={rate_inv!r} must be a power of two in [2, 64]")
        for name, low, high in (("arity", 1, 6), ("final_vars", 0, 12), ("max_log_codeword", 2, 27),
                                ("grinding_bits", 0, grinding.MAX_BITS),
                                ("fold_grinding_bits", 0, grinding.MAX_BITS)):
            value = getattr(self, name)
            if not isinstance(value, (int, np.integer)) or not low <= value <= high:
                raise ProofError(f"BasefoldParams: {name}={value!r} not in [{low}, {high}]")
            object.__setattr__(self, name, int(value))
        object.__setattr__(self, "rate_inv", int(rate_inv))
        object.__setattr__(self, "conjectured", bool(self.conjectured))
        if self.num_queries is None:
            bits = _query_error_bits(self.rate_inv, self.conjectured)
            object.__setattr__(self, "num_queries", max(1, math.ceil((DEFAULT_TARGET_BITS - self.grinding_bits) / bits)))
        queries = self.num_queries
        if not isinstance(queries, (int, np.integer)) or not 1 <= queries <= 4096:
            raise ProofError(f"BasefoldParams: num_queries={queries!r} not in [1, 4096]")
        object.__setattr__(self, "num_queries", int(queries))

    @property
    def statistical_query_bits(self) -> float:
        """-log2 of the query error: num_queries * -log2((1 + rho)/2), or * log2(rate_inv) if conjectured."""
        return self.num_queries * _query_error_bits(self.rate_inv, self.conjectured)

    @property
    def query_bits(self) -> float:
        """-log2 of the query phase's success per hash: the statistical bits plus the grinding bits."""
        return self.statistical_query_bits + self.grinding_bits

    @property
    def security_bits(self) -> float:
        """The query bits (as :attr:`proofs.commit.CommitParams.security_bits`; a commitment adds field terms)."""
        return self.query_bits

    def describe(self) -> str:
        label = "conjectured (RS proximity up to capacity)" if self.conjectured else "proven (unique decoding)"
        work = f" + {self.grinding_bits} grinding" if self.grinding_bits else ""
        folds = f", {self.fold_grinding_bits}-bit proof of work per fold" if self.fold_grinding_bits else ""
        return (f"Basefold rate 1/{self.rate_inv}, {self.num_queries} queries, arity {self.arity}, final "
                f"{self.final_vars} vars: {self.statistical_query_bits:.1f}{work} query bits{folds}, {label}")

    def next_layer(self, m: int) -> int:
        """The remaining-variable count of the next committed layer (or the final table) below m > final_vars."""
        excess = (m - self.final_vars) % self.arity
        return m - (excess or self.arity)

    def block(self, m: int) -> int:
        """log2 of the leaf coset size of a layer with m remaining variables (0: no folding, one value a leaf)."""
        return m - self.next_layer(m) if m > self.final_vars else 0

    def interleave(self, n: int) -> int:
        """log2 of the number of interleaved codewords of a table of n variables (the first variables folded
        by plain row combinations): n + log2(rate_inv) - max_log_codeword, within [0, n - final_vars]."""
        return max(0, min(n + self.rate_inv.bit_length() - 1 - self.max_log_codeword, n - self.final_vars))

    def to_bytes(self) -> bytes:
        """log2 rate, arity, final, conjectured, max_log_codeword (u8 each), queries (u16), grinding bits (u8), and
        fold grinding bits (u8) only when nonzero (the commitment's version says which)."""
        return bytes([self.rate_inv.bit_length() - 1, self.arity, self.final_vars, int(self.conjectured),
                      self.max_log_codeword]) + self.num_queries.to_bytes(2, "little") + bytes([self.grinding_bits]) \
            + (bytes([self.fold_grinding_bits]) if self.fold_grinding_bits else b"")


def max_vars(params: BasefoldParams) -> int:
    """The largest table whose codeword fits the 2-adic subgroup: 2^n rate_inv <= 2^27."""
    return F.TWO_ADICITY - (params.rate_inv.bit_length() - 1)


@dataclass(frozen=True)
class BasefoldCommitment:
    """Merkle root of the codeword of a table of 2^num_vars base-field values, and the code parameters."""

    root: bytes
    num_vars: int
    params: BasefoldParams = BasefoldParams()

    def __post_init__(self):
        if not isinstance(self.root, bytes):
            raise ProofError(f"BasefoldCommitment: root must be bytes, got {type(self.root).__name__}")
        if not isinstance(self.params, BasefoldParams):
            raise ProofError(f"BasefoldCommitment: params must be BasefoldParams, got {type(self.params).__name__}")
        limit = max_vars(self.params)
        if not isinstance(self.num_vars, (int, np.integer)) or not 0 <= self.num_vars <= limit:
            raise ProofError(f"BasefoldCommitment: num_vars={self.num_vars!r} not in [0, {limit}] at rate "
                             f"1/{self.params.rate_inv}")
        object.__setattr__(self, "num_vars", int(self.num_vars))

    @property
    def codeword_length(self) -> int:
        return (1 << self.num_vars) * self.params.rate_inv

    @property
    def fold_terms(self) -> int:
        """(s + 1) N': its s row folds and its join into the combined codeword (N' = one interleaved codeword's
        length), the part of :attr:`field_terms` whose challenges ``fold_grinding_bits`` grinds."""
        s = self.params.interleave(self.num_vars)
        return (s + 1) * (self.codeword_length >> s)

    @property
    def field_terms(self) -> int:
        """:attr:`fold_terms` + 4 num_vars + 2 (the two sumchecks' rounds, its claim and its evaluation): this
        table's share of a batch opening's field error, field_terms / |F_p4| (without fold grinding)."""
        return self.fold_terms + 4 * self.num_vars + 2

    @property
    def security_bits(self) -> float:
        """-log2(query error + field_terms / |F_p4|): this commitment opened alone."""
        return batch_security_bits([self])

    @property
    def conjectured(self) -> bool:
        """True when :attr:`security_bits` rests on the RS proximity conjecture (``params.conjectured``)."""
        return self.params.conjectured

    @property
    def soundness_label(self) -> str:
        """"conjectured" or "proven": what :attr:`security_bits` rests on."""
        return "conjectured" if self.conjectured else "proven"

    def to_bytes(self) -> bytes:
        """magic, version (u8: 2, or 3 with fold grinding), num_vars (u8), params (log2 rate, arity, final,
        conjectured, max_log_codeword: u8 each; queries u16; grinding bits u8; version 3: fold grinding bits u8,
        nonzero), root (32 bytes). Without fold grinding the bytes are version 2's, unchanged."""
        version = _FOLD_VERSION if self.params.fold_grinding_bits else _VERSION
        return _COMMITMENT_MAGIC + bytes([version, self.num_vars]) + self.params.to_bytes() + self.root

    @classmethod
    def read(cls, reader) -> "BasefoldCommitment":
        """One commitment from a :class:`proofs.field.ByteReader` (its length depends on its version);
        malformed data raises ProofRejected."""
        where = "basefold commitment"
        if reader.raw(len(_COMMITMENT_MAGIC)) != _COMMITMENT_MAGIC:
            raise ProofRejected("bad magic bytes", where)
        version = reader.uint(1)
        if version not in (_VERSION, _FOLD_VERSION):
            raise ProofRejected(f"unsupported version {version} (expected {_VERSION} or {_FOLD_VERSION})", where)
        num_vars, log_rate, arity, final, conjectured, max_log = (reader.uint(1) for _ in range(6))
        queries, grinding_bits = reader.uint(2), reader.uint(1)
        fold_bits = reader.uint(1) if version == _FOLD_VERSION else 0
        root = reader.raw(DIGEST_SIZE)
        if conjectured > 1:
            raise ProofRejected(f"conjectured flag {conjectured} is not 0 or 1", where)
        if version == _FOLD_VERSION and not fold_bits:  # one byte string per commitment
            raise ProofRejected(f"version {_FOLD_VERSION} with 0 fold grinding bits (version {_VERSION} has none)",
                                where)
        try:
            params = BasefoldParams(1 << min(log_rate, 63), queries, arity, final, bool(conjectured), max_log,
                                    grinding_bits, fold_bits)
            return cls(root, num_vars, params)
        except ProofError as error:
            raise ProofRejected(str(error), where) from None

    @classmethod
    def from_bytes(cls, data) -> "BasefoldCommitment":
        """Inverse of :meth:`to_bytes`; malformed data raises ProofRejected."""
        reader = F.ByteReader(data, where="basefold commitment")
        commitment = cls.read(reader)
        reader.finish()
        return commitment


def batch_security_bits(commitments, proven: bool = False) -> float:
    """-log2 of the error of one batch opening: query error + (sum_k field_terms_k + 2 N_top) / |F_p4|, with
    2 N_top for the folds of the combined codeword (its largest length N_top; N/|F_p4| per fold, geometric).
    The query error counts once: if some codeword in the chain is far, the queries must all miss its far
    positions, w.p. <= ((1 + rho)/2)^num_queries; the field errors add up (union bound). The query error is the
    parameters' (conjectured rho^num_queries when ``params.conjectured``), or the proven one if ``proven``.
    Per hash (with grinding credit, the default) the query error has the ``grinding_bits`` and the fold terms
    (sum_k fold_terms_k + 2 N_top: every challenge they come from is drawn after a proof of work of
    ``fold_grinding_bits``) are divided by 2^fold_grinding_bits; the sumcheck and claim terms are not (their
    rounds' r are ground too, but they are not counted as such). Within :func:`statistical_only` neither."""
    commitments = list(commitments)
    top = max(c.codeword_length >> c.params.interleave(c.num_vars) for c in commitments)
    fold_terms = sum(c.fold_terms for c in commitments) + 2 * top
    other_terms = sum(c.field_terms - c.fold_terms for c in commitments)
    params = commitments[0].params
    if any(c.params != params for c in commitments):
        raise ProofRejected("the commitments' parameters differ (one batch opening needs one parameter set)",
                            "basefold batch")
    counted = dataclasses.replace(params, conjectured=False) if proven else params
    credit = _GRINDING_CREDIT.get()
    query_bits = counted.query_bits if credit else counted.statistical_query_bits
    fold_scale = 2.0 ** -params.fold_grinding_bits if credit else 1.0  # per hash: each ground draw costs 2^f
    return -math.log2(2.0 ** -query_bits + (fold_terms * fold_scale + other_terms) * 2.0 ** -F.EXT_BITS)


@contextlib.contextmanager
def statistical_only():
    """Within the block every soundness figure built on :func:`batch_security_bits` (every Basefold opening,
    batch and proof figure) counts no grinding: its statistical part, which a prover cannot buy with hashes."""
    token = _GRINDING_CREDIT.set(False)
    try:
        yield
    finally:
        _GRINDING_CREDIT.reset(token)


def statistical_bits(figure, *args, **kwargs) -> float:
    """``figure(*args, **kwargs)`` (any soundness figure, in bits) without grinding credit
    (:func:`statistical_only`): the statistical bits, to state apart from the per-hash figure."""
    with statistical_only():
        return figure(*args, **kwargs)


@dataclass(frozen=True, eq=False)
class BasefoldWitness:
    """The prover's side: the table (2^n base values), its codeword (N', 2^s): row c is the encoding of the
    entries t[j 2^s + c]) and the Merkle levels ((n / 2^l, 32) uint8 digests, leaves first). Reuse it freely."""

    commitment: BasefoldCommitment
    table: np.ndarray
    codeword: np.ndarray
    levels: list


# ----------------------------------------------------------------------------------------- helpers
def _leaves(codeword: np.ndarray, block: int) -> np.ndarray:
    """(N, ...) codeword -> (N / 2^block, 2^block, ...): leaf j holds positions j + s N / 2^block."""
    n = codeword.shape[0]
    shaped = codeword.reshape((1 << block, n >> block) + codeword.shape[1:])
    return np.ascontiguousarray(np.swapaxes(shaped, 0, 1))


def leaf_group(coset_values: int, count: int) -> int:
    """Cosets per leaf of a table's own tree: the most (a power of two, at most ``count``, the cosets) whose
    values (4 bytes each) fit in 127 bytes (one BLAKE2b block; the byte spare is the leaf format's size rule from
    when leaves carried a prefix byte); a query opens its whole leaf."""
    group = 1
    while 2 * group <= count and 2 * group * coset_values * 4 + 1 <= 128:
        group *= 2
    return group


def _table_leaves(codeword: np.ndarray, block: int) -> np.ndarray:
    """(N', 2^s) codeword -> (M / g, g 2^block, 2^s): leaf i holds the cosets g i, ..., g i + g - 1 of
    :func:`_leaves` (M = N' / 2^block of them; g = :func:`leaf_group`)."""
    leaves = _leaves(codeword, block)
    group = leaf_group(leaves[0].size, leaves.shape[0])
    return leaves.reshape((leaves.shape[0] // group, group * leaves.shape[1]) + leaves.shape[2:])


def _leaves_at(codeword: np.ndarray, block: int, group: int, index: np.ndarray) -> np.ndarray:
    """Rows ``index`` of ``_table_leaves`` (group g) or ``_leaves`` (g = 1, squeezed as it) without building the
    others: leaf i holds rows (g i + t) + s N / 2^block, t < g, s < 2^block."""
    stride, per = codeword.shape[0] >> block, 1 << block
    rows = (np.asarray(index, dtype=np.int64)[:, None, None] * group + np.arange(group)[None, :, None]
            + np.arange(per)[None, None, :] * stride)
    return codeword[rows].reshape((rows.shape[0], group * per) + codeword.shape[1:])


def _leaf_digests(codeword: np.ndarray, block: int, group: int = 1) -> np.ndarray:
    """(M / g, 32) uint8: the digests of ``_table_leaves`` (group g; g = 1: ``_leaves``), hashed from the codeword
    in place by the kernel for many leaves (no transposed copy), else through the built leaves."""
    count = (codeword.shape[0] >> block) // group
    kernels = _hash_kernels(count)
    if kernels is None or codeword.ndim != 2:
        leaves = _leaves(codeword, block)
        return _digest_array(leaves.reshape((count, group * leaves.shape[1]) + leaves.shape[2:]))
    out = np.empty((count, DIGEST_SIZE), dtype=np.uint8)
    kernels.blake2b_leaves(_leaf_state(), np.ascontiguousarray(codeword), block, group, kernels._IV, out)
    return out


#: A leaf's hash is BLAKE2b-256 personalised with this (RFC 7693's parameter block): it differs from the inner
#: nodes' H(0x01 || left || right) without a prefix byte, so a leaf of 128 bytes is one compression, not two.
LEAF_PERSON = b"hezk.basefold.lf"


@functools.cache
def _leaf_state() -> np.ndarray:
    """The leaf hash's initial BLAKE2b state: IV xor (digest length 32, fanout 1, depth 1, LEAF_PERSON); computed
    once, read-only."""
    state = np.array(compiled_kernels()._IV, copy=True)
    state[0] ^= np.uint64(0x01010020)
    state[6] ^= np.uint64(int.from_bytes(LEAF_PERSON[:8], "little"))
    state[7] ^= np.uint64(int.from_bytes(LEAF_PERSON[8:], "little"))
    state.flags.writeable = False
    return state


def _leaf_hash(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=DIGEST_SIZE, person=LEAF_PERSON).digest()


def _digests(leaves: np.ndarray) -> list:
    """H_leaf(leaf bytes) for each leaf (first axis); entries as little-endian u32."""
    data = np.ascontiguousarray(leaves, dtype="<u4").reshape(leaves.shape[0], -1)
    width = data.shape[1] * 4
    raw = data.tobytes()
    return [_leaf_hash(raw[i:i + width]) for i in range(0, len(raw), width)]


def _hash_kernels(count: int):
    """The kernels for hashing ``count`` messages (their BLAKE2b reads message words little-endian), else None."""
    return fast(count) if sys.byteorder == "little" else None


def _digest_array(leaves: np.ndarray) -> np.ndarray:
    """(n, 32) uint8: row i = H_leaf(leaf i's bytes) (as :func:`_digests`; BLAKE2b in numba for many leaves)."""
    flat = np.ascontiguousarray(leaves).reshape(leaves.shape[0], -1)
    kernels = _hash_kernels(flat.shape[0])
    if kernels is None:
        return np.frombuffer(b"".join(_digests(leaves)), dtype=np.uint8).reshape(-1, DIGEST_SIZE)
    out = np.empty((flat.shape[0], DIGEST_SIZE), dtype=np.uint8)
    kernels.blake2b_leaves(_leaf_state(), flat.astype(np.uint64), 0, 1, kernels._IV, out)
    return out


_merkle_tree = digest_levels  # the levels over the leaf digests (shared with every scheme: proofs.pcs.merkle)


def _root_from(leaves: np.ndarray, indices: np.ndarray, path: list, depth: int) -> bytes:
    """The root from the opened ``leaves`` (first axis) at sorted distinct ``indices`` and their multi-proof
    (:func:`proofs.pcs.merkle.root_from_digests` over their Basefold leaf digests)."""
    digests = _digest_array(leaves) if leaves.shape[0] else np.zeros((0, DIGEST_SIZE), dtype=np.uint8)
    return root_from_digests(digests, indices, path, depth)


def _root(levels: list) -> bytes:
    return levels[-1][0].tobytes()


def _encode_table(table: np.ndarray, num_vars: int, params: BasefoldParams) -> np.ndarray:
    """(N', 2^s) base codeword: column c encodes the entries t[j 2^s + c] (s = params.interleave(num_vars))."""
    s = params.interleave(num_vars)
    kernels = fast(table.size * params.rate_inv)
    if kernels is None:
        return _encode_table_numpy(table, num_vars, params)
    n = (1 << (num_vars - s)) * params.rate_inv
    out = np.empty((n, 1 << s), dtype=np.uint64)
    kernels.encode_interleaved(np.ascontiguousarray(table).reshape(1 << (num_vars - s), 1 << s),
                               params.rate_inv.bit_length() - 1, _stage_twiddles(n), bit_reverse(1 << (num_vars - s)),
                               out)
    return out


@functools.lru_cache(maxsize=32)
def _stage_twiddles(n: int) -> np.ndarray:
    """(n,): entry h + j = w_2h^j 2^32 mod p for each stage h = 1, 2, ..., n/2 and j < h (Montgomery form); kept
    per n (read-only: every commitment of a size shares it)."""
    out = np.zeros(max(n, 1), dtype=np.uint64)
    half = 1
    while half < n:
        out[half:2 * half] = F.mul(powers(_omega(2 * half), half), np.uint64((1 << 32) % F.P))
        half *= 2
    out.setflags(write=False)
    return out


@functools.lru_cache(maxsize=32)
def _fold_scale(n: int) -> np.ndarray:
    """(n/2,): (2 w_n^j)^-1, the scale of a codeword fold of length n; kept per n (read-only)."""
    scale = F.mul(powers(pow(_omega(n), F.P - 2, F.P), n // 2), np.uint64(_INV2))
    scale.setflags(write=False)
    return scale


def _encode_table_numpy(table: np.ndarray, num_vars: int, params: BasefoldParams) -> np.ndarray:
    s = params.interleave(num_vars)
    rows = np.ascontiguousarray(table.reshape(1 << (num_vars - s), 1 << s).T)
    return np.ascontiguousarray(rs_encode(rows, params.rate_inv).T)


def _omega(n: int) -> int:
    return pow(F.GENERATOR, (F.P - 1) // n, F.P)


def _encode_ext(table: np.ndarray, rate_inv: int) -> np.ndarray:
    """RS encoding of an F_p4 table (2^m, 4), coordinate-wise (the code is F_p-linear)."""
    return np.ascontiguousarray(rs_encode(np.ascontiguousarray(table.T), rate_inv).T)


@functools.cache
def compiled_kernels():
    """:mod:`proofs._basefold_kernels`, or None without numba (the numpy twins here run)."""
    if F.numba_kernels() is None:
        return None
    from . import _basefold_kernels
    return _basefold_kernels


def fast(size: int):
    """The kernels for tables of at least F.NUMBA_MIN_SIZE entries, else None."""
    return compiled_kernels() if size >= F.NUMBA_MIN_SIZE else None


def _fold_codeword(codeword: np.ndarray, r: np.ndarray) -> np.ndarray:
    """One fold of a whole codeword (N,) base or (N, 4) ext: value at x^2 = s + r (d - s), s = (a + b)/2,
    d = (a - b)/(2x), a = g(x) at position j < N/2, b = g(-x) at j + N/2."""
    n = codeword.shape[0]
    half = n // 2
    scale = _fold_scale(n)  # (2 w^j)^-1
    kernels = fast(n)
    if kernels is not None:
        out = np.empty((half, F.EXT_DEGREE), dtype=np.uint64)
        kernels.fold_codeword(np.ascontiguousarray(codeword), scale, np.ascontiguousarray(r, dtype=np.uint64), out)
        return out
    return _fold_codeword_numpy(codeword, r, scale)


def _fold_codeword_numpy(codeword: np.ndarray, r: np.ndarray, scale: np.ndarray) -> np.ndarray:
    half = codeword.shape[0] // 2
    a, b = codeword[:half], codeword[half:]
    s = F.mul(F.add(a, b), np.uint64(_INV2))
    if codeword.ndim == 1:
        d = F.mul(F.sub(a, b), scale)
        return F.ext_add(F.ext_from_base(s), F.ext_mul_base(r, F.sub(d, s)))
    d = F.mul(F.sub(a, b), scale[:, None])
    return F.ext_add(s, F.ext_mul(F.sub(d, s), r))


def _fold_rows(codeword: np.ndarray, r: np.ndarray) -> np.ndarray:
    """Fold the interleaved axis 1 of (N, 2^s[, 4]) codewords: rows 2c and 2c + 1 -> (1 - r) a + r b."""
    low, high = codeword[:, 0::2], codeword[:, 1::2]
    if codeword.ndim == 2:
        return F.ext_add(F.ext_from_base(low), F.ext_mul_base(r, F.sub(high, low)))
    return F.ext_add(low, F.ext_mul(F.sub(high, low), r))


def _combine_rows(codeword: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """(N', 2^s) base codeword times (2^s, 4) F_p4 weights -> (N', 4): all s row folds at once (the twin of
    s :func:`_fold_rows` calls, with weights = eq(r_rows, .))."""
    kernels = fast(codeword.size)
    if kernels is not None:
        out = np.empty((codeword.shape[0], F.EXT_DEGREE), dtype=np.uint64)
        kernels.combine_rows(np.ascontiguousarray(codeword), np.ascontiguousarray(weights), out)
        return out
    return _combine_rows_numpy(codeword, weights)


def _combine_rows_numpy(codeword: np.ndarray, weights: np.ndarray) -> np.ndarray:
    columns = np.ascontiguousarray(codeword.T)
    out = np.zeros((codeword.shape[0], F.EXT_DEGREE), dtype=np.uint64)
    for column, weight in zip(columns, weights):  # each reduced product < p; 2^s <= 2^27 of them fit a uint64
        out += column[:, None] * weight[None, :] % F.P
    return out % F.P


def _pow_vector(base: int, exponents: np.ndarray) -> np.ndarray:
    """base^e mod p for every e >= 0 of ``exponents`` (square-and-multiply over the vector: one F.mul a bit)."""
    out = np.ones(exponents.shape, dtype=np.uint64)
    power, e = np.uint64(base), exponents.copy()
    while e.any():
        odd = (e & 1).astype(bool)
        out[odd] = F.mul(out[odd], power)
        power, e = F.mul(power, power), e >> 1
    return out


def fold_leaves(values: np.ndarray, positions: np.ndarray, n: int, challenges) -> np.ndarray:
    """Fold opened cosets: ``values`` (Q, 2^b, 4) at positions j + s n/2^b of the domain of size n (j =
    ``positions``, (Q,)), by c <= b ``challenges`` in order -> (Q, 2^(b - c), 4), the cosets of j in the domain
    of size n / 2^c."""
    current = values
    # w_n^-j per query (Python ints: Q exponentiations), squared as the domain halves
    xinv = _pow_vector(pow(_omega(n), F.P - 2, F.P), np.asarray(positions, dtype=np.int64))
    size = n
    for r in challenges:
        half = current.shape[1] // 2
        a, b = current[:, :half], current[:, half:]
        offsets = powers(pow(_omega(size), F.P - 1 - size // (2 * half) % (F.P - 1), F.P), half)  # w^(-s n/2^b)
        scale = F.mul(F.mul(xinv[:, None], offsets[None, :]), np.uint64(_INV2))
        s = F.mul(F.add(a, b), np.uint64(_INV2))
        d = F.mul(F.sub(a, b), scale[..., None])
        current = F.ext_add(s, F.ext_mul(F.sub(d, s), r))
        xinv = F.mul(xinv, xinv)
        size //= 2
    return current


# ------------------------------------------------------------------------------------------- commit
def commit(values, params: BasefoldParams = BasefoldParams()):
    """Commit to base-field ``values`` (zero-padded to 2^n) -> (BasefoldCommitment, BasefoldWitness)."""
    if not isinstance(params, BasefoldParams):
        raise ProofError(f"basefold.commit: params must be BasefoldParams, got {type(params).__name__}")
    table, _ = committed_table(values, "basefold.commit")
    return commit_owned(table, params)


def commit_owned(table: np.ndarray, params: BasefoldParams):
    """:func:`commit` of a table the caller hands over: canonical residues, a power-of-two length, not changed
    afterwards (the witness keeps it; no copy is made)."""
    if not isinstance(params, BasefoldParams):
        raise ProofError(f"basefold.commit_owned: params must be BasefoldParams, got {type(params).__name__}")
    if not isinstance(table, np.ndarray) or table.dtype != np.uint64 or table.ndim != 1 or not table.size \
            or table.size & (table.size - 1) or not F.is_canonical(table):
        raise ProofError("basefold.commit_owned: table must be a 1-D uint64 array of canonical residues whose length "
                         f"is a power of two, got {getattr(table, 'dtype', type(table).__name__)} of shape "
                         f"{getattr(table, 'shape', None)}")
    num_vars = table.shape[0].bit_length() - 1
    if num_vars > max_vars(params):
        raise ProofError(f"basefold.commit: num_vars={num_vars} > {max_vars(params)} at rate 1/{params.rate_inv}")
    codeword = _encode_table(table, num_vars, params)
    first = num_vars - params.interleave(num_vars)
    block = params.block(first)
    levels = _merkle_tree(_leaf_digests(codeword, block, leaf_group(codeword.shape[1] << block,
                                                                     codeword.shape[0] >> block)))
    commitment = BasefoldCommitment(_root(levels), num_vars, params)
    return commitment, BasefoldWitness(commitment, table, codeword, levels)


# -------------------------------------------------------------------------------------------- proof
@dataclass(frozen=True, eq=False)
class BasefoldProof:
    """reduction (rounds, 3, 4): the claim-reduction sumcheck, h(0), h(1), h(2) per round (empty when the
    claims are aligned: one point per table, each a suffix of the largest table's point); evals (K, 4): each
    folded table at its part of the reduced point r; rounds (rounds, 3, 4): the opening sumcheck of the combined
    table; layer_roots: one per committed layer of the combined
    codeword; final (2^final, 4): the combined final table; tables: each small table, whole (2^n,);
    initial_leaves / initial_paths: per folded commitment its opened leaves (u, g 2^b, 2^s) and multi-proof;
    layer_leaves / layer_paths: per committed layer the opened cosets (u, 2^arity, 4) and multi-proof; nonce: the
    grinding proof of work before the queries (:mod:`proofs.grinding`; 0 without grinding); fold_nonces: with
    ``fold_grinding_bits``, the proof of work before each opening round's join coefficients (rounds where a table
    joins) and before its folding challenge, in transcript order (empty without)."""

    reduction: np.ndarray
    evals: np.ndarray
    rounds: np.ndarray
    layer_roots: tuple
    final: np.ndarray
    tables: tuple
    initial_leaves: tuple
    initial_paths: tuple
    layer_leaves: tuple
    layer_paths: tuple
    nonce: int = 0
    fold_nonces: tuple = ()

    def to_bytes(self) -> bytes:
        """Version 2 (no fold nonces): magic, version, nonce (u64), the arrays, roots and multi-proofs in field
        order; version 3 (fold grinding): the same with the fold nonces (count u32, then u64 each) after the
        nonce. Each Merkle multi-proof sends each needed sibling of its tree once (:mod:`proofs.pcs.merkle`)."""
        version = _FOLD_VERSION if self.fold_nonces else _VERSION
        out = [_PROOF_MAGIC, bytes([version]), int(self.nonce).to_bytes(8, "little")]
        if self.fold_nonces:
            out += [_count(self.fold_nonces)] + [int(w).to_bytes(8, "little") for w in self.fold_nonces]
        out.extend(F.elements_to_bytes(a) for a in (self.reduction, self.evals, self.rounds))
        out.extend([_count(self.layer_roots), b"".join(self.layer_roots), F.elements_to_bytes(self.final)])
        for arrays in (self.tables, self.initial_leaves):
            out.append(_count(arrays))
            out.extend(F.elements_to_bytes(a) for a in arrays)
        out.extend(_paths_bytes(self.initial_paths))
        out.append(_count(self.layer_leaves))
        out.extend(F.elements_to_bytes(a) for a in self.layer_leaves)
        out.extend(_paths_bytes(self.layer_paths))
        return b"".join(out)

    @classmethod
    def from_bytes(cls, data) -> "BasefoldProof":
        """Inverse of :meth:`to_bytes`; malformed data raises ProofRejected (shapes are checked on verification)."""
        reader = F.ByteReader(data, where="basefold proof")
        if reader.raw(len(_PROOF_MAGIC)) != _PROOF_MAGIC:
            raise ProofRejected("bad magic bytes", reader.where)
        version = reader.uint(1)
        if version not in (_VERSION, _FOLD_VERSION):
            raise ProofRejected(f"unsupported version {version} (expected {_VERSION} or {_FOLD_VERSION})",
                                reader.where)
        nonce = reader.uint(8)
        fold_nonces = ()
        if version == _FOLD_VERSION:
            fold_nonces = tuple(reader.uint(8) for _ in range(reader.count(4, 8, "fold nonce count")))
            if not fold_nonces:  # one byte string per proof
                raise ProofRejected(f"version {_FOLD_VERSION} without fold nonces (version {_VERSION} has none)",
                                    reader.where)
        reduction, evals, rounds = reader.elements(3), reader.elements(2), reader.elements(3)
        roots = _read_digests(reader)
        final = reader.elements(2)
        tables = tuple(reader.elements(1) for _ in range(reader.count(4, 5, "table count")))
        initial = tuple(reader.elements(3) for _ in range(reader.count(4, 13, "initial leaves count")))
        initial_paths = tuple(_read_digests(reader) for _ in range(reader.count(4, 4, "path count")))
        layers = tuple(reader.elements(3) for _ in range(reader.count(4, 13, "layer leaves count")))
        layer_paths = tuple(_read_digests(reader) for _ in range(reader.count(4, 4, "path count")))
        reader.finish()
        return cls(reduction, evals, rounds, roots, final, tables, initial, initial_paths, layers, layer_paths, nonce,
                   fold_nonces)

    @property
    def num_bytes(self) -> int:
        return len(self.to_bytes())


def _count(items) -> bytes:
    return len(items).to_bytes(4, "little")


def _paths_bytes(paths) -> list:
    return [_count(paths)] + [_count(path) + b"".join(path) for path in paths]


def _read_digests(reader) -> tuple:
    count = reader.count(4, DIGEST_SIZE, "digest count")
    raw = reader.raw(DIGEST_SIZE * count)
    return tuple(raw[i:i + DIGEST_SIZE] for i in range(0, len(raw), DIGEST_SIZE))


# -------------------------------------------------------------------------------------- functionals
def _point_bytes(point) -> bytes:
    return np.ascontiguousarray(point, dtype="<u4").tobytes()


@dataclass(frozen=True, eq=False)
class Functional:
    """A linear functional of a table of 2^num_vars values, sum_x W(x) t(x), with W a sum of structured terms
    W(x) = a eq(lo, x_lo) D(x_mid) eq(hi, x_hi) (x_lo the lowest len(lo) variables, x_mid the next log2 len(D),
    x_hi the rest; ``terms`` = ((a (4,), lo (l, 4), D (2^d, 4) or None, hi (h, 4)), ...)). Its MLE at r is
    sum a eq(lo, r_lo) <D, eq(r_mid, .)> eq(hi, r_hi): the verifier evaluates it in O(sum 2^d + n) (an MLE
    evaluation at z is one term with lo = z; a value with arbitrary weights on a small block is a D)."""

    num_vars: int
    terms: tuple

    def __post_init__(self):
        for a, lo, dense, hi in self.terms:
            width = 0 if dense is None else dense.shape[0].bit_length() - 1
            if lo.shape[0] + width + hi.shape[0] != self.num_vars or (dense is not None and dense.shape[0] != 1 << width):
                raise ProofError(f"Functional: a term of {lo.shape[0]} + {width} + {hi.shape[0]} variables, "
                                 f"expected {self.num_vars}")

    @classmethod
    def point(cls, z) -> "Functional":
        z = np.asarray(z, dtype=np.uint64).reshape(-1, F.EXT_DEGREE)
        return cls(z.shape[0], ((F.ext_one(), z, None, F.ext_zero((0,))),))

    def to_bytes(self) -> bytes:
        out = [self.num_vars.to_bytes(1, "little"), len(self.terms).to_bytes(4, "little")]
        for a, lo, dense, hi in self.terms:
            width = -1 if dense is None else dense.shape[0].bit_length() - 1
            out += [bytes([lo.shape[0], width + 1, hi.shape[0]]), _point_bytes(a), _point_bytes(lo),
                    b"" if dense is None else _point_bytes(dense), _point_bytes(hi)]
        return b"".join(out)

    def at(self, r) -> np.ndarray:
        """W~(r) for r (num_vars, 4)."""
        total = F.ext_zero()
        for a, lo, dense, hi in self.terms:
            l, h = lo.shape[0], hi.shape[0]
            value = F.ext_mul(a, eq_eval(lo, r[:l]) if l else F.ext_one())
            if dense is not None:
                value = F.ext_mul(value, F.ext_sum(F.ext_mul(dense, eq_table(r[l:self.num_vars - h])), axis=0))
            if h:
                value = F.ext_mul(value, eq_eval(hi, r[self.num_vars - h:]))
            total = F.ext_add(total, value)
        return total

    @staticmethod
    def at_many(functionals, r) -> np.ndarray:
        """(k, 4): every functional's MLE at the same r, the eq factors of all terms in one vectorised product
        (the twin of :meth:`at`)."""
        terms = [(i, term) for i, f in enumerate(functionals) for term in f.terms]
        if not terms:
            return F.ext_zero((len(functionals),))
        n = functionals[0].num_vars
        length = max(t[1].shape[0] + t[3].shape[0] for _, t in terms)
        a, b = F.ext_zero((len(terms), length)), F.ext_zero((len(terms), length))  # eq(0, 0) = 1 pads
        dense_value = F.ext_one((len(terms),))
        tables = {}
        for j, (_, (scale, lo, dense, hi)) in enumerate(terms):
            l, h = lo.shape[0], hi.shape[0]
            a[j, :l], b[j, :l] = lo, r[:l]
            a[j, l:l + h], b[j, l:l + h] = hi, r[n - h:]
            value = scale
            if dense is not None:
                key = (l, n - h)
                if key not in tables:
                    tables[key] = eq_table(r[l:n - h])
                value = F.ext_mul(value, F.ext_sum(F.ext_mul(dense, tables[key]), axis=0))
            dense_value[j] = value
        ab = F.ext_mul(a, b)
        factors = F.ext_add(F.ext_sub(F.ext_sub(F.ext_one(a.shape[:-1]), a), b), F.ext_add(ab, ab))
        product = dense_value
        for column in range(length):
            product = F.ext_mul(product, factors[:, column])
        out = F.ext_zero((len(functionals),))
        for j, (i, _) in enumerate(terms):
            out[i] = F.ext_add(out[i], product[j])
        return out

    def add_table(self, out: np.ndarray, scale) -> None:
        """out += scale W as a (2^num_vars, 4) table, in place (a Boolean ``hi`` fills one block only, Boolean
        lowest coordinates of ``lo`` (a hiding table's slot) one residue class of it)."""
        for a, lo, dense, hi in self.terms:
            skip = 0  # leading Boolean coordinates: eq(lo, x) = [x_low = c] eq(lo[skip:], x_high)
            while skip < lo.shape[0] and not lo[skip, 1:].any() and lo[skip, 0] <= 1:
                skip += 1
            residue = sum(int(lo[b, 0]) << b for b in range(skip))
            boolean_hi = not hi[:, 1:].any() and not (hi[:, 0] > 1).any()
            if dense is None and boolean_hi and not skip and lo.shape[0]:  # one block += a scale eq(lo, .): built
                size = 1 << lo.shape[0]  # and added in one fused pass (no table of its own)
                start = sum(int(hi[b, 0]) << b for b in range(hi.shape[0])) * size
                _add_eq_scaled(out[start:start + size], lo, F.ext_mul(a, scale))
                continue
            low = _eq_scaled(lo[skip:], F.ext_mul(a, scale))  # one pass (compiled for large tables)
            middle = dense if dense is not None else F.ext_one((1,))  # W = eq(hi) x dense x low, never built
            size = middle.shape[0] * low.shape[0]
            if hi.shape[0] and not boolean_hi:
                outer, start = eq_table(hi), residue  # the block eq(hi, .) x dense x low over the whole table
            else:
                outer = F.ext_one((1,))
                start = sum(int(hi[b, 0]) << b for b in range(hi.shape[0])) * (size << skip) + residue
            _add_outer(outer, middle, low, out, start, 1 << skip)

    def is_point(self) -> bool:
        return len(self.terms) == 1 and self.terms[0][2] is None and not self.terms[0][3].shape[0] \
            and F.ext_eq(self.terms[0][0], F.ext_one())


def check_functionals(claims, num_vars: int, error, where: str) -> list:
    """A claim set as a list of :class:`Functional` of ``num_vars`` variables (points (m, n, 4) are converted)."""
    if isinstance(claims, np.ndarray):
        return [Functional.point(z) for z in check_points(claims, num_vars, error, where)]
    claims = list(claims)
    for f in claims:
        if not isinstance(f, Functional) or f.num_vars != num_vars:
            raise error(f"expected Functionals of {num_vars} variables", where)
        for a, lo, dense, hi in f.terms:
            for arr in (a, lo, hi) + (() if dense is None else (dense,)):
                if not isinstance(arr, np.ndarray) or arr.dtype != np.uint64 or arr.shape[-1:] != (4,) \
                        or not F.is_canonical(arr):
                    raise error("a functional's term is not canonical F_p4 data", where)
    return claims


def _claim_sets(claims_list, nums, error, where: str) -> list:
    """Each claim set as points (m, n, 4) when every set is points (the point protocol), else as Functionals."""
    if all(isinstance(c, np.ndarray) or not isinstance(c, (list, tuple)) for c in claims_list):
        return [check_points(c, n, error, where) for c, n in zip(claims_list, nums)]
    return [check_functionals(c if isinstance(c, (list, tuple)) else np.asarray(c), n, error, where)
            for c, n in zip(claims_list, nums)]


def _functional_mode(claims_list) -> bool:
    return any(not isinstance(c, np.ndarray) for c in claims_list)


def add_claim(out: np.ndarray, claim, scale) -> None:
    if isinstance(claim, Functional):
        claim.add_table(out, scale)
    else:
        _add_eq_scaled(out, claim, scale)


@dataclass
class _EqWeight:
    """A table's reduction weight c eq(z, .) kept factored (Gruen, as in the opening sumcheck): the scale, the
    point and the suffix weight eq(z_(>j), .) of the current round j (a :class:`_SplitEq`)."""

    point: np.ndarray
    scale: np.ndarray
    suffix: "_SplitEq | None" = None
    round: int = 0


def _claims_table(claims, coefficients, num_vars: int):
    """sum_j c_j W_j as a (2^num_vars, 4) table, or an :class:`_EqWeight` for a lone point claim (its weight table
    is never built: at 2^23 entries that is 256 MB and a fold of it per round)."""
    if len(claims) == 1:
        z = claims[0]
        if isinstance(z, Functional) and z.is_point():
            z = z.terms[0][1]
        if not isinstance(z, Functional):
            return _EqWeight(np.asarray(z, dtype=np.uint64).reshape(-1, F.EXT_DEGREE), coefficients[0])
    out = F.ext_zero((1 << num_vars,))
    for z, c in zip(claims, coefficients):
        add_claim(out, z, c)
    return out


def claim_table(claim, num_vars: int) -> np.ndarray:
    """The claim's weights as a (2^num_vars, 4) table."""
    out = F.ext_zero((1 << num_vars,))
    add_claim(out, claim, F.ext_one())
    return out


def _claim_at(claim, r) -> np.ndarray:
    return claim.at(r) if isinstance(claim, Functional) else eq_eval(claim, r)


# ----------------------------------------------------------------------------------------- protocol
def check_points(points, num_vars: int, error, where: str) -> np.ndarray:
    points = np.asarray(points)
    if points.dtype != np.uint64 or points.ndim != 3 or points.shape[1:] != (num_vars, F.EXT_DEGREE) \
            or not F.is_canonical(points):
        raise error(f"points of shape {points.shape} and dtype {points.dtype}, expected canonical "
                    f"(m, {num_vars}, 4) uint64", where)
    return points


@dataclass(frozen=True)
class _Schedule:
    """Who folds when: ``folding`` (tables above final_vars), ``firsts[k]`` (the size at which table k's
    codeword joins the combined one, after its row folds), ``top`` (the largest), ``layers`` (committed layers
    of the combined codeword, largest first), ``rounds`` (sumcheck rounds of the opening)."""

    n_max: int
    folding: tuple
    small: tuple
    firsts: dict
    top: int
    layers: tuple
    rounds: int
    reduce: bool


def _aligned(points_list, nums, folding, functionals: bool) -> bool:
    """Point claims, one per folded table, each the suffix of the largest table's point (z_k = z[n - n_k:]): the
    opening sumcheck then takes them as they are (a table joins when n_k variables remain, weighted by eq(z, .) on
    the bound prefix), with no claim reduction."""
    if functionals or not folding or any(len(points_list[k]) != 1 for k in folding):
        return False
    top = max(folding, key=lambda k: nums[k])
    point = points_list[top][0]
    return all(np.array_equal(points_list[k][0], point[nums[top] - nums[k]:]) for k in folding)


def schedule(nums, params: BasefoldParams, claim_counts, functionals: bool = False, points_list=None) -> _Schedule:
    folding = tuple(k for k, n in enumerate(nums) if n > params.final_vars)
    small = tuple(k for k, n in enumerate(nums) if n <= params.final_vars)
    n_max = max((nums[k] for k in folding), default=params.final_vars)
    firsts = {k: nums[k] - params.interleave(nums[k]) for k in folding}
    top = max(firsts.values(), default=params.final_vars)
    layers, m = [], top
    while m > params.final_vars:
        m = params.next_layer(m)
        if m > params.final_vars:
            layers.append(m)
    aligned = len(folding) == 1 and claim_counts[folding[0]] == 1 and not functionals if points_list is None else \
        _aligned(points_list, nums, folding, functionals)
    reduce = bool(folding) and not aligned
    return _Schedule(n_max, folding, small, firsts, top, tuple(layers), n_max - params.final_vars, reduce)


def begin(transcript, commitments, points_list, values_list):
    transcript.absorb("basefold.commitments", [c.to_bytes() for c in commitments])
    if _functional_mode(points_list):  # claims by functionals (a separate label: no point set reads as one)
        transcript.absorb("basefold.functionals", [b"".join(f.to_bytes() for f in p) for p in points_list])
    else:
        transcript.absorb("basefold.points", [np.asarray(p, dtype=np.uint64) for p in points_list])
    transcript.absorb("basefold.values", [np.asarray(v, dtype=np.uint64) for v in values_list])
    total = sum(len(p) for p in points_list)
    # one uniform F_p4 coefficient per claim: a false claim survives the combination w.p. <= 1/|F_p4|
    coefficients = transcript.challenge_ext_vector("basefold.claim_coefficients", total)
    out, start = [], 0
    for p in points_list:
        out.append(coefficients[start:start + len(p)])
        start += len(p)
    return out


def combined_claim(values, coefficients) -> np.ndarray:
    return F.ext_sum(F.ext_mul(values, coefficients), axis=0) if len(values) else F.ext_zero()


def _lagrange3(h: np.ndarray, r: np.ndarray) -> np.ndarray:
    """h(r) for the degree-2 polynomial with values h[0], h[1], h[2] at 0, 1, 2."""
    # Newton form: h(r) = h0 + r (d1 + (r - 1) d2), d1 = h1 - h0, d2 = (h2 - 2 h1 + h0) / 2 (two F_p4 products)
    d1 = F.ext_sub(h[1], h[0])
    d2 = F.ext_mul_base(F.ext_add(F.ext_sub(h[2], F.ext_add(h[1], h[1])), h[0]), np.uint64(_INV2))
    return F.ext_add(h[0], F.ext_mul(r, F.ext_add(d1, F.ext_mul(F.ext_sub(r, F.ext_one()), d2))))


def fold_round_message(f: np.ndarray, w: np.ndarray) -> np.ndarray:
    """(h(0), h(1), h(2)) of sum_x (f w)(X, x) for tables f (base or ext) and w (ext) binding x_0."""
    kernels = fast(w.shape[0])
    if kernels is not None:
        out = np.empty((3, F.EXT_DEGREE), dtype=np.uint64)
        kernels.round_sums(np.ascontiguousarray(f), np.ascontiguousarray(w), out)
        return out
    return _round_message_numpy(f, w)


def _round_message_numpy(f: np.ndarray, w: np.ndarray) -> np.ndarray:
    f_lo, f_hi, w_lo, w_hi = f[0::2], f[1::2], w[0::2], w[1::2]
    f_2, w_2 = F.sub(F.add(f_hi, f_hi), f_lo), F.sub(F.add(w_hi, w_hi), w_lo)
    product = F.ext_mul_base if f.ndim == 1 else F.ext_mul
    return np.stack([F.ext_sum(product(w_, f_), axis=0) for f_, w_ in ((f_lo, w_lo), (f_hi, w_hi), (f_2, w_2))])


def dot_pair_sums(f: np.ndarray, e: np.ndarray) -> np.ndarray:
    """(sum_j f[2j] e[j], sum_j f[2j + 1] e[j]) -> (2, 4), for f base (2n,) or F_p4 (2n, 4) and e (n, 4)."""
    kernels = fast(f.shape[0])
    if kernels is not None:
        out = np.empty((2, F.EXT_DEGREE), dtype=np.uint64)
        kernels.dot_pairs(np.ascontiguousarray(f), np.ascontiguousarray(e), out)
        return out
    return _dot_pairs_numpy(f, e)


def _dot_pairs_numpy(f: np.ndarray, e: np.ndarray) -> np.ndarray:
    product = F.ext_mul_base if f.ndim == 1 else F.ext_mul
    return np.stack([F.ext_sum(product(e, f[b::2]), axis=0) for b in (0, 1)])


class _SplitEq:
    """eq(z, .) over 2^k entries kept as eq(z_lo, .) x eq(z_hi, .), two tables of about 2^(k/2) (the split-eq
    trick: the opening's suffix weight never takes table-sized memory). ``dot_pairs`` is :func:`dot_pair_sums` with
    the whole table; ``halved`` is eq(z_(>0), .), the pair sums of this one."""

    def __init__(self, point: np.ndarray):
        self.point = point
        self.size = 1 << point.shape[0]
        low = point.shape[0] // 2
        self.low, self.high = eq_table(point[:low]), eq_table(point[low:])

    def dot_pairs(self, table: np.ndarray) -> np.ndarray:
        kernels = fast(table.shape[0])
        if kernels is None:
            return dot_pair_sums(table, eq_table(self.point))
        out = np.empty((2, F.EXT_DEGREE), dtype=np.uint64)
        kernels.dot_pairs_split(np.ascontiguousarray(table), self.low, self.high, out)
        return out

    def halved(self) -> "_SplitEq":
        return _SplitEq(self.point[1:])


def _suffix_dot(table: np.ndarray, suffix) -> np.ndarray:
    """dot_pair_sums of a table with the suffix weight, a table or a :class:`_SplitEq`."""
    return suffix.dot_pairs(table) if isinstance(suffix, _SplitEq) else dot_pair_sums(table, suffix)


def _eq_round_message(combined, joining, suffix, z: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """(h(0), h(1), h(2)) of sum_x f(X, x) w(X, x) for f = combined + sum beta t over ``joining`` = [(base
    table t, beta)] (``combined`` F_p4 or None) and w = scale eq(z, X) eq(z', x), ``suffix`` = eq(z', .):
    h(X) = scale eq(z, X) g(X) with g(X) = sum_x f(X, x) eq(z', x) linear (g(2) = 2 g(1) - g(0)) and eq(z, X)
    = 1 - z, z, 3 z - 1 at X = 0, 1, 2 (Gruen's factoring of eq: 2 products a pair instead of 3 plus the
    weight's fold; the base tables' products stay base times F_p4). Equals :func:`fold_round_message` (f, scale
    eq(z || z', .))."""
    g = _suffix_dot(combined, suffix) if combined is not None else F.ext_zero((2,))
    for table, beta in joining:
        g = F.ext_add(g, F.ext_mul(_suffix_dot(table, suffix), beta))
    g2 = F.ext_sub(F.ext_add(g[1], g[1]), g[0])
    one = F.ext_one()
    eq = [F.ext_sub(one, z), z, F.ext_sub(F.ext_mul_base(z, np.uint64(3)), one)]
    return np.stack([F.ext_mul(F.ext_mul(scale, e), v) for e, v in zip(eq, (g[0], g[1], g2))])


def _fold_joined(combined, joining, r: np.ndarray, in_place: bool = False) -> np.ndarray:
    """fold(combined + sum beta t, r) for ``joining`` = [(base table t, beta)], without building beta t;
    ``in_place``: combined is the caller's own table, folded into its first half."""
    half = (combined if combined is not None else joining[0][0]).shape[0] // 2
    out = fold(combined, r, in_place=in_place) if combined is not None else None
    for table, beta in joining:
        kernels = fast(table.shape[0])
        if kernels is not None:
            fresh = out is None  # the first table writes the fold, the others add to it
            out = np.empty((half, F.EXT_DEGREE), dtype=np.uint64) if fresh else out
            kernels.fold_scaled_into(np.ascontiguousarray(table), np.ascontiguousarray(r, dtype=np.uint64),
                                     np.ascontiguousarray(beta, dtype=np.uint64), out, not fresh)
        else:
            term = F.ext_mul(fold(table, r), beta)
            out = term if out is None else F.ext_add(out, term)
    return out if out is not None else F.ext_zero((half,))


def _eq_scaled(point: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """scale * eq(point, .) as a (2^k, 4) table."""
    kernels = fast(1 << point.shape[0])
    if kernels is not None:
        out = np.empty((1 << point.shape[0], F.EXT_DEGREE), dtype=np.uint64)
        kernels.eq_scaled(np.ascontiguousarray(point), np.ascontiguousarray(scale, dtype=np.uint64), out)
        return out
    return F.ext_mul(eq_table(point), scale)


def _add_eq_scaled(out: np.ndarray, point: np.ndarray, scale: np.ndarray) -> None:
    """out += scale * eq(point, .), in place (out: a (2^k, 4) table this function's caller owns). Trailing
    coordinates in {0, 1} (a packed table's block selector) confine eq to one block: only that block is built."""
    low = point.shape[0]
    while low and not point[low - 1, 1:].any() and point[low - 1, 0] <= 1:
        low -= 1
    if low < point.shape[0]:
        offset = sum(int(point[b, 0]) << (b - low) for b in range(low, point.shape[0]))
        _add_eq_scaled(out[offset << low:(offset + 1) << low], point[:low], scale)
        return
    kernels = fast(out.shape[0])
    if kernels is not None and low and out.flags.c_contiguous:
        kernels.add_eq_scaled(np.ascontiguousarray(point), np.ascontiguousarray(scale, dtype=np.uint64), out)
    elif kernels is not None:
        buffer = np.empty_like(out)
        kernels.eq_scaled(np.ascontiguousarray(point), np.ascontiguousarray(scale, dtype=np.uint64), buffer)
        kernels.add_into(buffer.reshape(-1), out.reshape(-1))
    else:
        out[:] = F.ext_add(out, _eq_scaled(point, scale))


def _add_outer(outer: np.ndarray, middle: np.ndarray, inner: np.ndarray, out: np.ndarray, start: int,
               step: int) -> None:
    """out[start + ((h M + m) L + l) step] += outer[h] middle[m] inner[l] (F_p4, in place; one kernel pass without
    the product table for large ones)."""
    size = outer.shape[0] * middle.shape[0] * inner.shape[0]
    kernels = fast(size)
    if kernels is not None and out.flags.c_contiguous:
        kernels.add_outer_into(np.ascontiguousarray(outer), np.ascontiguousarray(middle), np.ascontiguousarray(inner),
                               out, start, step)
        return
    product = F.ext_mul(F.ext_mul(outer[:, None, :], middle[None, :, :]).reshape(-1, 1, F.EXT_DEGREE),
                        inner[None, :, :]).reshape(-1, F.EXT_DEGREE)
    target = out[start:start + size * step:step]
    target[:] = F.ext_add(target, product)


def dot_base(e: np.ndarray, table: np.ndarray) -> np.ndarray:
    """sum_i e[i] table[i] for an F_p4 (n, 4) and a base (n,) table."""
    kernels = fast(e.shape[0])
    if kernels is not None:
        out = np.empty(F.EXT_DEGREE, dtype=np.uint64)
        kernels.dot_base(np.ascontiguousarray(e), np.ascontiguousarray(table), out)
        return out
    return F.ext_sum(F.ext_mul_base(e, table), axis=0)


def fold_pair(f: np.ndarray, w: np.ndarray, r: np.ndarray, in_place: bool = False):
    """(fold(f, r), fold(w, r), the next round's message of their product or None): one fused pass (kernel
    fold_sums) for large tables, else the two folds and None (the caller computes the message). ``in_place``:
    F_p4 tables the caller owns and drops are folded into their own first halves (fold_sums reads entries 2j,
    2j + 1 before it writes entry j)."""
    kernels = fast(w.shape[0])
    if kernels is None or w.shape[0] < 4:
        return fold(f, r), fold(w, r), None
    half = w.shape[0] // 2

    def target(t):
        if in_place and t.ndim == 2 and t.flags.c_contiguous and t.flags.writeable:
            return t[:half]
        return np.empty((half, F.EXT_DEGREE), dtype=np.uint64)

    f_out, w_out = target(f), target(w)
    message = np.empty((3, F.EXT_DEGREE), dtype=np.uint64)
    kernels.fold_sums(np.ascontiguousarray(f), np.ascontiguousarray(w), np.ascontiguousarray(r, dtype=np.uint64),
                      f_out, w_out, message)
    return f_out, w_out, message


def _reduce_claims(tables, weights, sums, nums, folding, n_max, transcript):
    """The claim-reduction sumcheck of sum_k 2^(n_max - n_k) sum_x f_k(x) W_k(x) (a table of n_k variables
    joins when n_k variables remain; before, its part is the constant s_k 2^(m - 1 - n_k) in each h(X)).
    Returns (messages, r, evals: f_k at r[n_max - n_k:])."""
    tables = {k: tables[k] for k in folding}
    weights = {k: weights[k] for k in folding}
    messages, point, pending = [], [], {}  # pending[k]: this round's message of k, from its last fused fold
    for i in range(n_max):
        m = n_max - i
        h = F.ext_zero((3,))
        for k in folding:
            w = weights[k]
            if nums[k] >= m and isinstance(w, _EqWeight):
                if w.suffix is None:  # joins: eq(z_(>0), .) once (split), halved every round after
                    w.suffix = _SplitEq(w.point[1:])
                h = F.ext_add(h, _eq_round_message(tables[k], [], w.suffix, w.point[w.round], w.scale))
            elif nums[k] >= m:
                h = F.ext_add(h, pending.pop(k) if k in pending else fold_round_message(tables[k], w))
            else:
                h = F.ext_add(h, F.ext_mul_base(sums[k], np.uint64(pow(2, m - 1 - nums[k], F.P)))[None])
        transcript.absorb("basefold.reduction", h)
        r = transcript.challenge_ext("basefold.reduction_r")  # sumcheck round error <= 2/|F_p4|
        messages.append(h)
        point.append(r)
        for k in folding:
            w = weights[k]
            if nums[k] >= m and isinstance(w, _EqWeight):
                tables[k] = fold(tables[k], r, in_place=True)  # the witness's own (base) table is never F_p4
                w.scale = F.ext_mul(w.scale, eq_eval(w.point[w.round][None], r[None]))
                w.round += 1
                if w.suffix.size > 1:
                    w.suffix = w.suffix.halved()
            elif nums[k] >= m:
                tables[k], weights[k], following = fold_pair(tables[k], w, r, in_place=True)
                if following is not None:
                    pending[k] = following
    evals = np.stack([tables[k][0] for k in folding])
    return np.stack(messages), np.stack(point), evals


def open_batch(witnesses, points_list, transcript, values=None):
    """Open every committed table k at its points ``points_list[k]`` ((m_k, n_k, 4)) in one proof
    -> (values: list of (m_k, 4) arrays, BasefoldProof). All commitments must share one BasefoldParams.

    ``values``: the claimed values when the caller already has them (skips one pass over every table per
    point; a wrong value only makes the proof fail verification)."""
    witnesses = list(witnesses)
    if not witnesses or len(witnesses) != len(points_list):
        raise ProofError(f"basefold.open_batch: {len(witnesses)} witnesses for {len(points_list)} point sets")
    params = witnesses[0].commitment.params
    if any(w.commitment.params != params for w in witnesses):
        raise ProofError("basefold.open_batch: the commitments' parameters differ")
    nums = [w.commitment.num_vars for w in witnesses]
    points_list = _claim_sets(points_list, nums, lambda m, _: ProofError(m), "")
    functionals = _functional_mode(points_list)
    if values is None:
        values = [np.stack([dot_base(claim_table(z, n), w.table) for z in points])
                  if len(points) else F.ext_zero((0,)) for w, points, n in zip(witnesses, points_list, nums)]
    values = [np.asarray(v, dtype=np.uint64).reshape(len(p), F.EXT_DEGREE) for v, p in zip(values, points_list)]
    coefficients = begin(transcript, [w.commitment for w in witnesses], points_list, values)
    plan = schedule(nums, params, [len(p) for p in points_list], functionals, points_list)
    if plan.reduce:
        weights = [_claims_table(points, c, n) for points, c, n in zip(points_list, coefficients, nums)]
        sums = [combined_claim(v, c) for v, c in zip(values, coefficients)]  # = sum_x f_k W_k when honest
        reduction, point, evals = _reduce_claims([w.table for w in witnesses], weights, sums, nums, plan.folding,
                                                 plan.n_max, transcript)
    else:
        reduction = np.zeros((0, 3, F.EXT_DEGREE), dtype=np.uint64)
        point = points_list[max(plan.folding, key=lambda k: nums[k])][0] if plan.folding else \
            np.zeros((0, 4), dtype=np.uint64)
        evals = np.stack([values[k][0] for k in plan.folding]) if plan.folding else F.ext_zero((0,))
    transcript.absorb("basefold.evals", evals)
    # the weight eq(r, .) is never built: round i uses scale_i eq(r_i, X) and eq(r_{>i}, .) (suffix, halved by
    # summing pairs: sum_x eq(r_{i+1}, x) = 1)
    combined, codeword, betas, scale = None, None, {}, F.ext_one()
    suffix = _SplitEq(point[1:]) if plan.folding else None
    challenges, messages, shared, fold_nonces = [], [], [], []
    for i in range(plan.rounds):
        m, joining = plan.n_max - i, []
        if any(nums[k] == m for k in plan.folding):
            _fold_work(transcript, params, fold_nonces)  # the join coefficients' proof of work (with fold grinding)
        for k in plan.folding:
            if nums[k] == m:  # table k joins: beta_k drawn after the claims, earlier challenges and its commitment
                betas[k] = transcript.challenge_ext("basefold.beta")  # line proximity error <= N'_k / |F_p4|
                joining.append((witnesses[k].table, betas[k]))  # + beta_k f_k, kept base until the fold
        for k in plan.folding:
            if plan.firsts[k] == m:  # its codeword joins after its row folds (r of rounds n_k .. m + 1)
                rows = witnesses[k].codeword
                s = rows.shape[1].bit_length() - 1
                weights = eq_table(np.stack(challenges[i - s:i])) if s else F.ext_one((1,))
                # beta_k sum_c eq(r, c) row_c: beta_k scales the 2^s weights, not the N' combined symbols
                joined = _combine_rows(rows, F.ext_mul(weights, betas[k][None]))
                codeword = joined if codeword is None else F.ext_add(codeword, joined)
        h = _eq_round_message(combined, joining, suffix, point[i], scale)
        transcript.absorb("basefold.round", h)
        _fold_work(transcript, params, fold_nonces)
        r = transcript.challenge_ext("basefold.r")  # sumcheck round error <= 2/|F_p4|; fold error <= N/|F_p4|
        messages.append(h)
        challenges.append(r)
        combined = _fold_joined(combined, joining, r, in_place=True)  # the loop's own table
        scale = F.ext_mul(scale, eq_eval(point[i][None], r[None]))
        if suffix.size > 1:
            suffix = suffix.halved()
        if codeword is not None:
            codeword = _fold_codeword(codeword, r)
        if m - 1 in plan.layers:
            levels = _merkle_tree(_leaf_digests(codeword, params.arity))
            transcript.absorb("basefold.layer_root", _root(levels))
            shared.append((codeword, levels))
    final = combined.copy() if plan.folding else F.ext_zero((0,))  # (folded in place: no view of the big table)
    small = tuple(witnesses[k].table for k in plan.small)
    transcript.absorb("basefold.finals", [np.asarray(final)] + list(small))
    nonce = grinding.grind(transcript.state_digest(), params.grinding_bits) if plan.folding else 0
    queries = _queries(transcript, params, plan.n_max, bool(plan.folding), nonce)
    initial_leaves, initial_paths = [], []
    for k in plan.folding:
        codeword, block = witnesses[k].codeword, params.block(plan.firsts[k])
        cosets = codeword.shape[0] >> block
        group = leaf_group(codeword.shape[1] << block, cosets)
        index = np.unique(queries % cosets // group)
        initial_leaves.append(_leaves_at(codeword, block, group, index))
        initial_paths.append(tuple(merkle_open(witnesses[k].levels, index)))
    layer_leaves, layer_paths = [], []
    for codeword, levels in shared:
        index = np.unique(queries % (codeword.shape[0] >> params.arity))
        layer_leaves.append(_leaves_at(codeword, params.arity, 1, index))
        layer_paths.append(tuple(merkle_open(levels, index)))
    rounds = np.stack(messages) if messages else np.zeros((0, 3, F.EXT_DEGREE), dtype=np.uint64)
    proof = BasefoldProof(reduction, evals, rounds, tuple(_root(levels) for _, levels in shared), final, small,
                          tuple(initial_leaves), tuple(initial_paths), tuple(layer_leaves), tuple(layer_paths), nonce,
                          tuple(fold_nonces))
    return values, proof


def _fold_work(transcript, params: BasefoldParams, nonces: list) -> None:
    """The prover's proof of work before a folding (or join) challenge: with ``fold_grinding_bits`` f > 0, the
    smallest nonce of an f-bit proof of work on the transcript's state (:mod:`proofs.grinding`), appended to
    ``nonces`` and absorbed; nothing without (the transcript unchanged)."""
    if params.fold_grinding_bits:
        nonce = grinding.grind(transcript.state_digest(), params.fold_grinding_bits)
        transcript.absorb("basefold.fold_grinding", nonce)
        nonces.append(nonce)


def _check_fold_work(transcript, params: BasefoldParams, nonces) -> None:
    """The verifier's twin of :func:`_fold_work`: the next nonce of the iterator ``nonces`` passes the f-bit proof
    of work on the transcript's state, and is absorbed."""
    if params.fold_grinding_bits:
        nonce = next(nonces)
        _require(isinstance(nonce, (int, np.integer)) and grinding.check(transcript.state_digest(),
                                                                          params.fold_grinding_bits, nonce),
                 f"a fold nonce {nonce!r} fails the {params.fold_grinding_bits}-bit proof of work")
        transcript.absorb("basefold.fold_grinding", int(nonce))


def fold_work_count(plan, nums, params: BasefoldParams) -> int:
    """How many fold nonces an opening of this schedule carries: with fold grinding, one per opening round and one
    more per round in which some table joins; 0 without."""
    if not params.fold_grinding_bits:
        return 0
    return plan.rounds + len({nums[k] for k in plan.folding if nums[k] > params.final_vars})


def _queries(transcript, params: BasefoldParams, n_max: int, any_folding: bool, nonce) -> np.ndarray:
    """The query positions, after the grinding nonce is checked (zero when there is nothing to grind for: one
    byte string per proof) and absorbed."""
    grinds = any_folding and params.grinding_bits > 0
    _require(isinstance(nonce, (int, np.integer)) and (grinding.check(transcript.state_digest(), params.grinding_bits,
                                                                      nonce) if grinds else nonce == 0),
             f"the grinding nonce {nonce!r} fails the {params.grinding_bits}-bit proof of work" if grinds else
             f"nonce {nonce!r} must be 0 without grinding")
    if not any_folding:
        return np.zeros(0, dtype=np.int64)
    if grinds:
        transcript.absorb("basefold.grinding", int(nonce))
    # uniform positions of the largest domain: each misses a far codeword w.p. <= (1 + rho)/2 (proven)
    return transcript.challenge_indices("basefold.queries", params.num_queries, (1 << n_max) * params.rate_inv)


def open_commitment(witness: BasefoldWitness, point, transcript):
    """One commitment at one point ((n, 4)) -> (value (4,), BasefoldProof)."""
    values, proof = open_batch([witness], [np.asarray(point)[None]], transcript)
    return values[0][0], proof


def verify_batch(commitments, points_list, values_list, proof: BasefoldProof, transcript,
                 min_security_bits: float = MIN_VERIFY_BITS, *, allow_conjectured: bool = False) -> None:
    """Raise ProofRejected unless ``proof`` shows every committed table k takes ``values_list[k]`` ((m_k, 4))
    at ``points_list[k]`` ((m_k, n_k, 4)), with parameters giving at least ``min_security_bits``. Parameters
    with ``conjectured=True`` are refused unless ``allow_conjectured`` (then their bits are the conjectured ones)."""
    try:
        _verify(list(commitments), list(points_list), list(values_list), proof, transcript, min_security_bits,
                allow_conjectured)
    except ProofRejected:
        raise
    except Exception as exc:  # a malformed object must never escape as another exception
        raise ProofRejected(f"malformed input: {type(exc).__name__}: {exc}", "basefold opening") from None


def verify_opening(commitment: BasefoldCommitment, point, value, proof: BasefoldProof, transcript,
                   min_security_bits: float = MIN_VERIFY_BITS, *, allow_conjectured: bool = False) -> None:
    """Raise ProofRejected unless the committed MLE equals ``value`` ((4,)) at ``point`` ((n, 4))
    (``allow_conjectured``: as :func:`verify_batch`)."""
    value = np.asarray(value)
    if value.shape != (F.EXT_DEGREE,):
        raise ProofRejected(f"value of shape {value.shape}, expected (4,)", "basefold opening")
    verify_batch([commitment], [np.asarray(point)[None]], [value[None]], proof, transcript, min_security_bits,
                 allow_conjectured=allow_conjectured)


def _require(condition, reason: str, where: str = "basefold opening") -> None:
    if not condition:
        raise ProofRejected(reason, where)


def _check_array(arr, shape, name: str) -> None:
    _require(isinstance(arr, np.ndarray) and arr.shape == shape and F.is_canonical(arr),
             f"{name} of shape {getattr(arr, 'shape', None)}, expected canonical {shape}")


def _check_digests(path, name: str) -> list:
    _require(isinstance(path, (tuple, list)) and all(isinstance(d, bytes) and len(d) == DIGEST_SIZE for d in path),
             f"{name}: Merkle digests must be 32-byte strings")
    return list(path)


def check_conjectured(params: BasefoldParams, allow_conjectured: bool, where: str = "basefold opening") -> None:
    """ProofRejected if ``params`` claim conjectured soundness and the verifier did not opt in."""
    if params.conjectured and allow_conjectured is not True:
        proven = dataclasses.replace(params, conjectured=False).query_bits
        raise ProofRejected(f"parameter conjectured=True ({params.num_queries} queries at rate 1/{params.rate_inv}: "
                            f"{params.query_bits:.1f} conjectured query bits, {proven:.1f} proven): the verifier did "
                            f"not allow conjectured soundness (allow_conjectured=True opts in)", where)


def _verify(commitments, points_list, values_list, proof, transcript, min_security_bits, allow_conjectured) -> None:
    where = "basefold opening"
    _require(len(commitments) >= 1 and len(commitments) == len(points_list) == len(values_list),
             f"{len(commitments)} commitments, {len(points_list)} point sets, {len(values_list)} value sets")
    _require(all(isinstance(c, BasefoldCommitment) for c in commitments), "expected BasefoldCommitments")
    params = commitments[0].params
    _require(all(c.params == params for c in commitments), "the commitments' parameters differ")
    check_conjectured(params, allow_conjectured, where)
    bits = batch_security_bits(commitments)
    label = "conjectured" if params.conjectured else "proven"
    _require(bits >= min_security_bits, f"parameters give {bits:.1f} {label} bits < {min_security_bits} required")
    statistical = statistical_bits(batch_security_bits, commitments)
    _require(statistical >= min_security_bits - MAX_GRINDING_CREDIT,
             f"parameters give {statistical:.1f} statistical {label} bits (without the {params.grinding_bits} "
             f"grinding bits) < {min_security_bits - MAX_GRINDING_CREDIT} required: grinding replaces at most "
             f"{MAX_GRINDING_CREDIT} bits of queries")
    _require(isinstance(proof, BasefoldProof), f"expected a BasefoldProof, got {type(proof).__name__}")
    nums = [c.num_vars for c in commitments]
    points_list = _claim_sets(points_list, nums, ProofRejected, where)
    _require(sum(len(p) for p in points_list) <= MAX_CLAIMS, f"more than {MAX_CLAIMS} claims")
    values_list = [np.asarray(v) for v in values_list]
    for k, (v, p) in enumerate(zip(values_list, points_list)):
        _check_array(v, (len(p), F.EXT_DEGREE), f"values of commitment {k}")
    plan = schedule(nums, params, [len(p) for p in points_list], _functional_mode(points_list), points_list)
    _check_array(proof.reduction, (plan.n_max if plan.reduce else 0, 3, F.EXT_DEGREE), "reduction messages")
    _check_array(proof.evals, (len(plan.folding), F.EXT_DEGREE), "evaluations")
    _check_array(proof.rounds, (plan.rounds, 3, F.EXT_DEGREE), "round messages")
    _require(isinstance(proof.layer_roots, (tuple, list)) and len(proof.layer_roots) == len(plan.layers),
             f"{len(proof.layer_roots)} layer roots, expected {len(plan.layers)}")
    _check_digests(proof.layer_roots, "layer roots")
    _check_array(proof.final, (1 << params.final_vars if plan.folding else 0, F.EXT_DEGREE), "final table")
    _require(isinstance(proof.tables, (tuple, list)) and len(proof.tables) == len(plan.small),
             "wrong number of small tables")
    expected_work = fold_work_count(plan, nums, params)
    _require(isinstance(proof.fold_nonces, (tuple, list)) and len(proof.fold_nonces) == expected_work,
             f"{len(proof.fold_nonces) if isinstance(proof.fold_nonces, (tuple, list)) else 'no'} fold nonces, "
             f"expected {expected_work}")
    fold_nonces = iter(proof.fold_nonces)
    for k, table in zip(plan.small, proof.tables):
        _check_array(table, (1 << nums[k],), f"table of commitment {k}")
    coefficients = begin(transcript, commitments, points_list, values_list)
    evals = {k: proof.evals[i] for i, k in enumerate(plan.folding)}
    if plan.reduce:
        point = _check_reduction(proof.reduction, plan, nums, points_list, values_list, coefficients, evals,
                                 transcript)
    elif plan.folding:  # aligned claims: each table's value enters the opening sumcheck as it is
        point = points_list[max(plan.folding, key=lambda k: nums[k])][0]
        for k in plan.folding:
            _require(F.ext_eq(evals[k], values_list[k][0]), "the evaluation differs from the claimed value" +
                     (f" (commitment {k})" if len(plan.folding) > 1 else ""))
    transcript.absorb("basefold.evals", proof.evals)
    claim, scale, challenges, betas = F.ext_zero(), F.ext_one(), [], {}
    for i in range(plan.rounds):
        m = plan.n_max - i
        if any(nums[k] == m for k in plan.folding):
            _check_fold_work(transcript, params, fold_nonces)
        for k in plan.folding:
            if nums[k] == m:  # joins: its claim f_k(r_k) = y_k enters, weighted by eq(r, rho) on the bound prefix
                betas[k] = transcript.challenge_ext("basefold.beta")
                claim = F.ext_add(claim, F.ext_mul(F.ext_mul(betas[k], scale), evals[k]))
        h = proof.rounds[i]
        _require(F.ext_eq(F.ext_add(h[0], h[1]), claim), f"sumcheck round {i}: h(0) + h(1) != the running claim")
        transcript.absorb("basefold.round", h)
        _check_fold_work(transcript, params, fold_nonces)
        r = transcript.challenge_ext("basefold.r")
        challenges.append(r)
        claim = _lagrange3(h, r)
        scale = F.ext_mul(scale, eq_eval(point[i][None], r[None]))
        if m - 1 in plan.layers:
            transcript.absorb("basefold.layer_root", proof.layer_roots[plan.layers.index(m - 1)])
    if plan.folding:
        weight = F.ext_mul(eq_table(point[plan.rounds:]), scale)
        _require(F.ext_eq(F.ext_sum(F.ext_mul(proof.final, weight), axis=0), claim),
                 "the final table does not match the last sumcheck claim")
    for k, table in zip(plan.small, proof.tables):
        for j, z in enumerate(points_list[k]):
            value = F.ext_sum(F.ext_mul_base(claim_table(z, nums[k]), table), axis=0)
            _require(F.ext_eq(value, values_list[k][j]), f"claimed value {j} of commitment {k} differs from its table")
        codeword = _encode_table(table, nums[k], params)
        root = merkle_levels(_digests(_table_leaves(codeword, 0)))[-1][0]
        _require(root == commitments[k].root, f"the table of commitment {k} does not hash to its root")
    transcript.absorb("basefold.finals", [np.asarray(proof.final)] + [np.asarray(t) for t in proof.tables])
    queries = _queries(transcript, params, plan.n_max, bool(plan.folding), proof.nonce)
    if plan.folding:
        _check_queries(commitments, params, plan, proof, queries, challenges, betas)


def _check_reduction(messages, plan, nums, points_list, values_list, coefficients, evals, transcript):
    """Verify the claim-reduction sumcheck; return its point r (n_max, 4)."""
    claim = F.ext_zero()
    for k in plan.folding:
        claim = F.ext_add(claim, F.ext_mul_base(combined_claim(values_list[k], coefficients[k]),
                                                np.uint64(pow(2, plan.n_max - nums[k], F.P))))
    point = []
    for i, h in enumerate(messages):
        _require(F.ext_eq(F.ext_add(h[0], h[1]), claim), f"reduction round {i}: h(0) + h(1) != the running claim")
        transcript.absorb("basefold.reduction", h)
        r = transcript.challenge_ext("basefold.reduction_r")
        point.append(r)
        claim = _lagrange3(h, r)
    point = np.stack(point)
    expected = F.ext_zero()
    for k in plan.folding:
        tail = point[plan.n_max - nums[k]:]
        weight = F.ext_zero()
        if len(points_list[k]) and isinstance(points_list[k][0], Functional):  # all at once
            at = Functional.at_many(points_list[k], tail)
            weight = F.ext_sum(F.ext_mul(at, coefficients[k]), axis=0)
        for z, c in zip(points_list[k], coefficients[k]):
            if not isinstance(z, Functional):
                weight = F.ext_add(weight, F.ext_mul(c, _claim_at(z, tail)))
        expected = F.ext_add(expected, F.ext_mul(weight, evals[k]))
    _require(F.ext_eq(expected, claim), "the evaluations do not match the reduction's last claim")
    return point


def _opened(leaves, paths, index_space: int, queries, depth: int, root: bytes, name: str, shape_tail, group=1):
    """Check one tree's opened cosets against its root; return the coset of each query (position q mod
    index_space; ``group`` cosets a leaf, leaf (q mod index_space) // group)."""
    position = queries % index_space
    index = np.unique(position // group)
    _check_array(leaves, (index.size, group * shape_tail[0]) + shape_tail[1:], name)
    path = _check_digests(paths, name)
    _require(_root_from(leaves, index, path, depth - (group.bit_length() - 1)) == root,
             f"{name}: opened cosets do not hash to the root")
    rows = leaves[np.searchsorted(index, position // group)].reshape((len(queries), group) + shape_tail)
    return rows[np.arange(len(queries)), position % group]


def _joined_rows(commitment, params, plan, k, leaves, paths, queries, challenges) -> np.ndarray:
    """Table k's opened cosets at every query, its rows folded: (Q, 2^b, 4) at the domain of size 2^first R."""
    first = plan.firsts[k]
    s, block = commitment.num_vars - first, params.block(first)
    space = ((1 << first) * params.rate_inv) >> block
    rows = _opened(leaves, paths, space, queries, space.bit_length() - 1, commitment.root,
                   f"commitment {k}", (1 << block, 1 << s), leaf_group((1 << block) << s, space))
    start = plan.n_max - commitment.num_vars
    return _fold_opened_rows(rows, challenges[start:start + s])


def _fold_opened_rows(rows: np.ndarray, challenges) -> np.ndarray:
    """(Q, 2^b, 2^s) base -> (Q, 2^b, 4): the rows combined by eq(challenges, .) (s row folds)."""
    weights = eq_table(np.stack(challenges)) if len(challenges) else F.ext_one((1,))
    flat = rows.reshape(-1, rows.shape[-1])
    return _combine_rows(flat, weights).reshape(rows.shape[:-1] + (F.EXT_DEGREE,))


def _check_queries(commitments, params, plan, proof, queries, challenges, betas) -> None:
    rate = params.rate_inv
    _require(isinstance(proof.initial_leaves, (tuple, list)) and isinstance(proof.initial_paths, (tuple, list))
             and len(proof.initial_leaves) == len(plan.folding) == len(proof.initial_paths),
             "wrong number of opened initial layers")
    _require(isinstance(proof.layer_leaves, (tuple, list)) and isinstance(proof.layer_paths, (tuple, list))
             and len(proof.layer_leaves) == len(plan.layers) == len(proof.layer_paths), "wrong number of opened layers")
    joining = {}
    for k, leaves, paths in zip(plan.folding, proof.initial_leaves, proof.initial_paths):
        joined = _joined_rows(commitments[k], params, plan, k, leaves, paths, queries, challenges)
        joining.setdefault(plan.firsts[k], []).append(F.ext_mul(joined, betas[k]))
    layers = {}
    for m, leaves, paths, root in zip(plan.layers, proof.layer_leaves, proof.layer_paths, proof.layer_roots):
        space = ((1 << m) * rate) >> params.arity
        layers[m] = _opened(leaves, paths, space, queries, space.bit_length() - 1, root, f"layer {m}",
                            (1 << params.arity, F.EXT_DEGREE))
    current, m = None, plan.top
    rows = np.arange(len(queries))
    while True:
        for part in joining.get(m, ()):  # codewords joining at this size: + beta_k (rows of k folded)
            current = part if current is None else F.ext_add(current, part)
        if m == params.final_vars:
            encoded = _encode_ext(proof.final, rate)
            _require(F.ext_eq(current[:, 0], encoded[queries % ((1 << m) * rate)]),
                     "the last fold differs from the final table's encoding")
            return
        size, target = (1 << m) * rate, max([params.next_layer(m)] + [j for j in joining if j < m])
        steps = m - target
        folded = fold_leaves(current, queries % (size >> current.shape[1].bit_length() - 1), size,
                             challenges[plan.n_max - m:][:steps])
        m, size = target, size >> steps
        if m in layers:
            space = size >> params.arity
            _require(F.ext_eq(folded[:, 0], layers[m][rows, (queries % size) // space]),
                     f"the fold into layer {m} differs from the opened value")
            current = layers[m]
        else:
            current = folded
