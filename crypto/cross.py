"""CROSS transforms on the CPU: Barrett, BAT and MAT, with float64 BLAS as the matrix engine.

Tong et al., "Leveraging ASIC AI Chips for Homomorphic Encryption" (CROSS, Google, 2025) run HE on
matrix engines with three rewrites, all reproduced here for word-size primes q < 2^31:

* **Barrett** (``LimbBarrett``): k = ⌈log2 q⌉, m = ⌊2^(2k)/q⌋; the product x·m is formed from 32-bit
  halves of x so that no intermediate exceeds 64 bits; one conditional subtraction. Wide
  accumulators (matmul outputs, up to 2^64) are first folded below 2^(2k).
* **BAT** (basis aligned transformation, ``bat_matrix`` / ``bat_mulmod``): a product by a constant c
  mod q is rewritten as a low-precision matrix product. With x = Σ_t x_t·2^(w·t) (w-bit chunks),

      c·x ≡ Σ_t x_t · (c·2^(w·t) mod q) = Σ_s 2^(w·s) · Σ_t x_t · chunk_s(c·2^(w·t) mod q)   (mod q)

  so the constant becomes the small matrix [chunk_s(c·2^(w·t) mod q)]_{s,t}; the inner sums are an
  exact integer matmul, then the chunks are recombined and reduced once. w = 8 is the paper's int8
  form; wider chunks are allowed while every partial sum stays below 2^53 (float64 is then exact),
  which ``ChunkSpec`` proves at construction.
* **MAT** (matrix aligned transformation, ``MATPlan``): the negacyclic NTT of size N = R·C as a
  4-step transform Out = ((F1 · X) ∘ T) · F2 with X the coefficients as an R×C matrix (row major),
  F1 (R×R, the twist ψ^(C·j1) and the row bit reversal folded in), T the twiddles and F2 (C×C, the
  column bit reversal folded in). Writing e = e1 + R·e2 for the evaluation exponent and
  j = C·j1 + j2 for the coefficient index,

      F1[r, j1] = ψ^(C·j1·(2·brv_R(r)+1)),  T[r, j2] = ψ^(j2·(2·brv_R(r)+1)),  F2[j2, c] = ψ^(2R·j2·brv_C(c))

  and Out.reshape(N) is exactly the bit-reversed order of ``crypto.ntt`` (brv_N(C·r + c) =
  brv_R(r) + R·brv_C(c)). The inverse is X = F1^-1 · ((Out · F2^-1) ∘ T^-1) with 1/N = 1/R · 1/C
  folded into F1^-1 and F2^-1. Every matrix product is a BAT matmul.
  The RNS basis conversion y_j = Σ_i [x_i·(Q/q_i)^-1]_{q_i}·(Q/q_i) mod p_j is one BAT matmul
  across limbs (``BasisConversionPlan``).

``CrossBackend`` implements ``crypto.ntt.NTTBackend`` with these kernels, bit-identical to the
radix-2 backends. Its matrices are built once per (N, modulus, chunk width) and kept on the backend.

On a CPU the BLAS matmul costs more than the butterflies it replaces, so the same MAT layout also
runs with compiled butterflies (``FourStepBackend``, kernels in ``crypto._cross_kernels``): each
sub-transform combines whole rows, so every inner loop is contiguous and SIMD-wide. ``auto``
(``crypto.backend_select``) measures which one wins per (N, limbs).
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from .errors import ParameterError, ShapeError
from .modarith import inv_mod, shoup_precompute
from hezk.threads import parallel

from .ntt_base import (PARALLEL_MIN_PRODUCTS, PARALLEL_MIN_WORK, BasisConversion, NTTBackend, NTTTables,
                       bit_reverse_indices)

RESIDUE_BITS = 31            # every residue (and every modulus) is below 2^31
FLOAT64_EXACT = 2**53        # float64 represents every integer below 2^53 exactly (we stay strictly below)
PAPER_CHUNK_BITS = 8         # the int8 matrix engines of the CROSS paper
MAX_CONVERSION_LIMBS = 64    # an explicit chunk width is proven at construction for conversions up to this many limbs
_U64_LIMIT = 2**64
_MASK32 = np.uint64(0xFFFFFFFF)
_U32 = np.uint64(32)


# ---------------------------------------------------------------------------------------- Barrett
def _column(values: np.ndarray, ndim: int) -> np.ndarray:
    """Per-limb constants shaped (L, 1, ..., 1) to broadcast against an (L, ...) array."""
    return values.reshape((-1,) + (1,) * (ndim - 1))


class LimbBarrett:
    """Barrett reduction in the CROSS form, vectorized over RNS limbs (row l reduced mod moduli[l]).

    For q < 2^31 let k = ⌈log2 q⌉ and m = ⌊2^(2k)/q⌋ < 2^32. For x < 2^(2k), split x = x_h·2^32 + x_l:
    t = ⌊(x_h·m + ⌊x_l·m / 2^32⌋) / 2^(2k-32)⌋ = ⌊x·m / 2^(2k)⌋ exactly, with every product of a
    32-bit half and m below 2^64. Then ⌊x/q⌋ − 1 ≤ t ≤ ⌊x/q⌋, so r = x − t·q < 2q needs one
    conditional subtraction (CROSS, Tong et al. 2025, §Barrett; Barrett, CRYPTO '86).
    """

    def __init__(self, moduli):
        moduli = tuple(int(q) for q in moduli)
        for i, q in enumerate(moduli):
            if not 3 <= q < 2**RESIDUE_BITS:
                raise ParameterError(f"moduli[{i}]={q} not in [3, 2^{RESIDUE_BITS})")
        self.moduli = moduli
        k = [(q - 1).bit_length() for q in moduli]
        self.bits = tuple(k)
        self.q = np.array(moduli, dtype=np.uint64)
        self.m = np.array([(1 << (2 * b)) // q for b, q in zip(k, moduli)], dtype=np.uint64)
        self.shift_low = np.array([min(2 * b, 32) for b in k], dtype=np.uint64)
        self.shift_high = np.array([max(2 * b - 32, 0) for b in k], dtype=np.uint64)
        self.fold_shift = np.array([2 * b - 1 for b in k], dtype=np.uint64)
        self.fold_mask = np.array([(1 << (2 * b - 1)) - 1 for b in k], dtype=np.uint64)
        self.fold_const = np.array([pow(2, 2 * b - 1, q) for b, q in zip(k, moduli)], dtype=np.uint64)

    def __repr__(self):
        return f"LimbBarrett(moduli={self.moduli})"

    def reduce(self, x) -> np.ndarray:
        """x mod q_l for integers with 0 <= x[l, ...] < 2^(2·k_l) (e.g. any product of two residues)."""
        return self._reduce(_as_uint64(x, "x", [4**k for k in self.bits], self.moduli))

    def reduce_wide(self, x, bound: int = _U64_LIMIT) -> np.ndarray:
        """x mod q_l for integer accumulators 0 <= x < ``bound`` (≤ 2^64): folds, then one Barrett reduction."""
        folds = self.fold_count(bound)
        return self._reduce_wide(_as_uint64(x, "x", [bound] * len(self.moduli), self.moduli), folds)

    def _reduce(self, x: np.ndarray) -> np.ndarray:
        """The unchecked kernel of ``reduce`` (uint64 x, rows below 2^(2k))."""
        col = lambda v: _column(v, x.ndim)  # noqa: E731
        m = col(self.m)
        t = (x & _MASK32) * m
        t >>= col(self.shift_low)
        t += (x >> _U32) * m
        t >>= col(self.shift_high)
        t *= col(self.q)
        r = x - t                      # in [0, 2q)
        return np.minimum(r, r - col(self.q), out=r)  # r − q wraps above r exactly when r < q

    def fold_count(self, bound: int) -> int:
        """Folds x ↦ ⌊x/2^(2k-1)⌋·(2^(2k-1) mod q) + (x mod 2^(2k-1)) that bring every x < bound below 2^(2k)."""
        if not isinstance(bound, (int, np.integer)) or not 1 <= bound <= _U64_LIMIT:
            raise ParameterError(f"accumulator bound={bound!r} not an integer in [1, 2^64]")
        count = 0
        for k, c in zip(self.bits, self.fold_const):
            top, folds = int(bound) - 1, 0       # largest possible value
            while top >= 1 << (2 * k):
                top = (top >> (2 * k - 1)) * int(c) + min(top, (1 << (2 * k - 1)) - 1)
                folds += 1
            count = max(count, folds)
        return count

    def _reduce_wide(self, x: np.ndarray, folds: int) -> np.ndarray:
        """The unchecked kernel of ``reduce_wide``. Each fold keeps x congruent and shrinks it
        (hi·c < 2^(65-k), so nothing overflows); a fold of a value below 2^(2k) leaves it below 2^(2k)."""
        if folds:
            shift, mask, const = (_column(v, x.ndim) for v in (self.fold_shift, self.fold_mask, self.fold_const))
            for _ in range(folds):
                x = (x >> shift) * const + (x & mask)
        return self._reduce(x)


def _as_uint64(x, name: str, bounds, moduli) -> np.ndarray:
    """x as uint64 with one row per modulus and every value of row l in [0, bounds[l]); else a clear error."""
    if isinstance(x, np.ndarray) and x.dtype == np.uint64 and x.ndim >= 1 and x.shape[0] == len(moduli) \
            and (x.size == 0 or bool(np.all(x.reshape(len(moduli), -1).max(axis=1)
                                            <= np.array([b - 1 for b in bounds], dtype=np.uint64)))):
        return x                                     # the common case, one pass
    arr = np.asarray(x)
    if arr.ndim < 1 or arr.shape[0] != len(moduli):
        raise ShapeError(f"{name}.shape={arr.shape}: first axis must hold one row per modulus ({len(moduli)})")
    if arr.dtype.kind not in "uiO" or (arr.dtype.kind == "O" and not all(
            isinstance(v, (int, np.integer)) for v in arr.flat)):
        raise ParameterError(f"{name} of dtype {arr.dtype} must hold integers")
    if arr.size:
        rows = arr.reshape(len(moduli), -1)
        tops = rows.max(axis=1)
        lows = np.zeros_like(tops) if arr.dtype.kind == "u" else rows.min(axis=1)
        for l, (low, top) in enumerate(zip(lows, tops)):
            if int(low) < 0 or int(top) >= bounds[l]:
                bad = int(low) if int(low) < 0 else int(top)
                raise ParameterError(f"{name}[{l}] holds {bad}, outside [0, {_power_text(bounds[l])}) "
                                     f"(modulus {moduli[l]})")
    return arr.astype(np.uint64, copy=False)


def _power_text(value: int) -> str:
    """2^e for powers of two, the number otherwise (for error messages)."""
    return f"2^{value.bit_length() - 1}" if value & (value - 1) == 0 else str(value)


def barrett_reduce(x, q: int) -> np.ndarray:
    """x mod q (CROSS Barrett) for integers 0 <= x < 2^64 of any shape and one modulus 3 <= q < 2^31."""
    barrett = LimbBarrett([q])
    arr = np.asarray(x)
    return barrett.reduce_wide(arr.reshape(1, -1)).reshape(arr.shape)


# ---------------------------------------------------------------------------------------------- BAT
@dataclass(frozen=True)
class ChunkSpec:
    """BAT chunking of residues < 2^31 into ``count`` chunks of ``width`` bits, for a matmul whose
    inner dimension (before chunking) is ``inner``.

    A BAT matmul multiplies data chunks (≤ 2^width − 1) by constant chunks (≤ 2^width − 1) over
    inner·count terms, so every float64 partial sum is ≤ inner · Σ_t max_t · max_0 (``partial_sum_bound``);
    construction refuses a width for which that bound reaches 2^53, or for which the recombined
    accumulator Σ_s 2^(w·s)·Z_s (< ``combined_bound``) does not fit 64 bits.
    """

    width: int
    inner: int
    count: int = field(init=False)
    partial_sum_bound: int = field(init=False)
    combined_bound: int = field(init=False)

    def __post_init__(self):
        if not isinstance(self.width, (int, np.integer)) or not 1 <= self.width <= RESIDUE_BITS:
            raise ParameterError(f"chunk_bits={self.width!r} not an integer in [1, {RESIDUE_BITS}]")
        if not isinstance(self.inner, (int, np.integer)) or self.inner < 1:
            raise ParameterError(f"matmul inner dimension={self.inner!r} must be a positive integer")
        count = -(-RESIDUE_BITS // self.width)
        partial, combined = _bat_bounds(self.width, self.inner)
        if partial >= FLOAT64_EXACT:
            raise ParameterError(
                f"chunk_bits={self.width} unsafe for a float64 matmul of inner dimension {self.inner}: "
                f"partial sums reach {partial} ≈ 2^{np.log2(float(partial)):.2f} >= 2^53 (the exact float64 "
                f"limit); the widest safe chunk here is {widest_chunk_bits(self.inner)} bits")
        if combined > _U64_LIMIT:
            raise ParameterError(f"chunk_bits={self.width}: recombined accumulators reach {combined} > 2^64")
        object.__setattr__(self, "count", count)
        object.__setattr__(self, "partial_sum_bound", partial)
        object.__setattr__(self, "combined_bound", combined)


def chunk_maxima(width: int) -> tuple[int, ...]:
    """Largest value of each w-bit chunk of a residue < 2^31 (the top chunk may be narrower)."""
    top = 2**RESIDUE_BITS - 1
    return tuple(min(2**width - 1, top >> (width * t)) for t in range(-(-RESIDUE_BITS // width)))


def _bat_bounds(width: int, inner: int) -> tuple[int, int]:
    """(largest float64 partial sum, exclusive bound of the recombined accumulator) of a BAT matmul."""
    maxima = chunk_maxima(width)
    return inner * sum(maxima) * maxima[0], inner * sum(maxima) * (2**RESIDUE_BITS - 2) + 1


def widest_chunk_bits(inner: int) -> int:
    """The widest BAT chunk for which a float64 matmul of this inner dimension is exact."""
    for width in range(RESIDUE_BITS, 0, -1):
        partial, combined = _bat_bounds(width, inner)
        if partial < FLOAT64_EXACT and combined <= _U64_LIMIT:
            return width
    raise ParameterError(f"matmul inner dimension={inner} too large for an exact float64 BAT (even 1-bit chunks)")


def bat_matrix(constants: np.ndarray, q: int, spec: ChunkSpec) -> np.ndarray:
    """The BAT expansion of a constant matrix K (A_out × A_in, entries < q) for left products K·X.

    Returns the float64 matrix M of shape (count·A_out, count·A_in) with
    M[s·A_out + i, t·A_in + j] = chunk_s(K[i, j]·2^(w·t) mod q), so that for X split into chunk rows
    X_t (stacked t-major), Σ_s 2^(w·s)·(M·X)_s ≡ K·X (mod q).
    """
    constants = np.asarray(constants, dtype=np.uint64)
    a_out, a_in = constants.shape
    w, count = spec.width, spec.count
    mask = np.uint64(2**w - 1)
    out = np.empty((count, a_out, count, a_in), dtype=np.float64)
    for t in range(count):
        shifted = (constants * np.uint64(pow(2, w * t, q))) % np.uint64(q)   # < 2^62: exact in uint64
        for s in range(count):
            out[s, :, t, :] = (shifted >> np.uint64(w * s)) & mask
    return out.reshape(count * a_out, count * a_in)


def split_chunks(x: np.ndarray, spec: ChunkSpec, axis: int) -> np.ndarray:
    """Residues (uint64 < 2^31) → float64 w-bit chunks stacked t-major along ``axis`` (length count·A)."""
    shape = x.shape
    out = np.empty(shape[:axis] + (spec.count,) + shape[axis:], dtype=np.float64)
    mask = np.uint64(2**spec.width - 1)
    lead = (slice(None),) * axis
    for t in range(spec.count):
        out[lead + (t,)] = (x >> np.uint64(spec.width * t)) & mask
    return out.reshape(shape[:axis] + (spec.count * shape[axis],) + shape[axis + 1:])


def join_chunks(z: np.ndarray, spec: ChunkSpec, axis: int) -> np.ndarray:
    """Σ_s 2^(w·s)·Z_s for output chunks stacked s-major along ``axis``, as exact uint64 (< combined_bound)."""
    shape = z.shape
    size = shape[axis] // spec.count
    parts = z.reshape(shape[:axis] + (spec.count, size) + shape[axis + 1:])
    lead = (slice(None),) * axis
    if spec.combined_bound <= FLOAT64_EXACT:     # every value (< combined_bound) is below 2^53: one conversion
        acc = parts[lead + (0,)].copy()
        for s in range(1, spec.count):
            acc += parts[lead + (s,)] * float(2 ** (spec.width * s))
        return acc.astype(np.uint64)
    acc = parts[lead + (0,)].astype(np.uint64)
    for s in range(1, spec.count):
        acc += parts[lead + (s,)].astype(np.uint64) << np.uint64(spec.width * s)
    return acc


def bat_mulmod(x: np.ndarray, c: int, q: int, chunk_bits: int = PAPER_CHUNK_BITS) -> np.ndarray:
    """x·c mod q for residues x (any shape, < 2^31) and one constant c, as a BAT matmul.

    The constant becomes the count×count matrix [chunk_s(c·2^(w·t) mod q)]; the data its w-bit chunks.
    """
    if not isinstance(c, (int, np.integer)):
        raise ParameterError(f"constant c={c!r} must be an integer")
    barrett = LimbBarrett([q])
    shape = np.shape(x)
    x = _as_uint64(np.reshape(x, (1, -1)), "x", [2**RESIDUE_BITS], barrett.moduli)
    spec = ChunkSpec(chunk_bits, 1)
    matrix = bat_matrix(np.array([[int(c) % int(q)]], dtype=np.uint64), int(q), spec)
    acc = join_chunks(matrix @ split_chunks(x, spec, axis=0), spec, axis=0)
    return barrett._reduce_wide(acc, barrett.fold_count(spec.combined_bound)).reshape(shape)


# ---------------------------------------------------------------------------------------------- MAT
def _powers_of(base: int, count: int, q: int) -> np.ndarray:
    """[base^e mod q for e < count] by repeated doubling of the table (count a power of two)."""
    table = np.ones(1, dtype=np.uint64)
    while len(table) < count:
        step = np.uint64(pow(base, len(table), q))
        table = np.concatenate([table, (table * step) % np.uint64(q)])
    return table


def mat_shape(n: int) -> tuple[int, int]:
    """(R, C) with N = R·C, R = 2^⌈log2(N)/2⌉."""
    if not isinstance(n, (int, np.integer)) or n < 2 or n & (n - 1):
        raise ParameterError(f"ring degree n={n!r} is not a power of two >= 2")
    log_n = n.bit_length() - 1
    rows = 1 << ((log_n + 1) // 2)
    return rows, n // rows


@dataclass(frozen=True, eq=False)
class MATPlan:
    """Constant matrices of the 4-step negacyclic NTT of size n mod q (see the module docstring).

    ``forward`` = (BAT of F1, T, BAT of F2 for right products) and ``inverse`` = (BAT of F2^-1 for
    right products, T^-1, BAT of F1^-1), each built on first use (read-only arrays).
    """

    n: int
    q: int
    psi: int
    chunk_bits: int
    rows: int = field(init=False)
    cols: int = field(init=False)
    left_spec: ChunkSpec = field(init=False, repr=False)
    right_spec: ChunkSpec = field(init=False, repr=False)

    def __post_init__(self):
        rows, cols = mat_shape(self.n)
        _check_root(self.n, self.q, self.psi)
        for name, value in dict(rows=rows, cols=cols, left_spec=ChunkSpec(self.chunk_bits, rows),
                                right_spec=ChunkSpec(self.chunk_bits, cols)).items():
            object.__setattr__(self, name, value)

    @cached_property
    def forward(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        m = mat_constants(self.n, self.q, self.psi)
        return _read_only(bat_matrix(m["F1"], self.q, self.left_spec), m["T"],
                          bat_matrix(m["F2"].T, self.q, self.right_spec).T)

    @cached_property
    def inverse(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        m = mat_constants(self.n, self.q, self.psi)
        return _read_only(bat_matrix(m["F2inv"].T, self.q, self.right_spec).T, m["Tinv"],
                          bat_matrix(m["F1inv"], self.q, self.left_spec))


def _check_root(n: int, q: int, psi: int):
    """ψ must be a primitive 2N-th root of unity mod q (ψ^N = −1 with N a power of two)."""
    if not (0 < psi < q and pow(psi, n, q) == q - 1):
        raise ParameterError(f"psi={psi} is not a primitive 2N-th root of unity mod q={q} (N={n})")


def _read_only(*arrays: np.ndarray) -> tuple[np.ndarray, ...]:
    out = tuple(np.ascontiguousarray(a) for a in arrays)
    for a in out:
        a.setflags(write=False)
    return out


def mat_constants(n: int, q: int, psi: int) -> dict[str, np.ndarray]:
    """The plain (un-chunked) 4-step matrices F1, T, F2 and their inverses, entries in [0, q) as uint64.

    Forward: Out = ((F1·X) ∘ T)·F2; inverse: X = F1inv·((Out·F2inv) ∘ Tinv), with X = a.reshape(R, C).
    """
    rows, cols = mat_shape(n)
    two_n = 2 * n
    powers = _powers_of(psi, two_n, q)
    odd_r = 2 * bit_reverse_indices(rows) + 1                      # 2·brv_R(r) + 1
    brv_c = bit_reverse_indices(cols)
    j1 = np.arange(rows)
    j2 = np.arange(cols)
    exp_f1 = (cols * np.outer(odd_r, j1)) % two_n                   # [r, j1]
    exp_t = np.outer(odd_r, j2) % two_n                             # [r, j2]
    exp_f2 = (2 * rows * np.outer(j2, brv_c)) % two_n               # [j2, c]
    q64 = np.uint64(q)
    inv_rows, inv_cols = np.uint64(inv_mod(rows, q)), np.uint64(inv_mod(cols, q))
    return {
        "F1": powers[exp_f1],
        "T": powers[exp_t],
        "F2": powers[exp_f2],
        "F1inv": (powers[(-exp_f1.T) % two_n] * inv_rows) % q64,    # [j1, r]
        "Tinv": powers[(-exp_t) % two_n],
        "F2inv": (powers[(-exp_f2.T) % two_n] * inv_cols) % q64,    # [c, j2]
    }


def _bat_product(x: np.ndarray, matrices, spec: ChunkSpec, from_left: bool, barrett: LimbBarrett) -> np.ndarray:
    """Per limb l: matrices[l]·x[l] (from_left) or x[l]·matrices[l], mod q_l, as BAT matmuls; x is (L, A, B)."""
    axis = 1 if from_left else 2
    chunks = split_chunks(x, spec, axis)
    rows = matrices[0].shape[0] if from_left else x.shape[1]
    cols = x.shape[2] if from_left else matrices[0].shape[1]
    z = np.empty((len(x), rows, cols), dtype=np.float64)
    for l, matrix in enumerate(matrices):
        pair = (matrix, chunks[l]) if from_left else (chunks[l], matrix)
        np.matmul(*pair, out=z[l])
    return barrett._reduce_wide(join_chunks(z, spec, axis), barrett.fold_count(spec.combined_bound))


class _LimbStack:
    """The MAT plans of a list of moduli (shared references), for batched calls over all limbs."""

    def __init__(self, plans):
        self.plans = plans
        self.barrett = LimbBarrett([p.q for p in plans])

    def _run(self, a: np.ndarray, direction: str) -> np.ndarray:
        """First BAT matmul, twiddle Hadamard product, second BAT matmul (the 4-step transform)."""
        first, twiddle, second = zip(*(getattr(p, direction) for p in self.plans))
        plan = self.plans[0]
        sides = (plan.left_spec, True), (plan.right_spec, False)     # (chunking, from the left?)
        if direction == "inverse":
            sides = sides[::-1]
        x = a.reshape(len(a), plan.rows, plan.cols)
        y = _bat_product(x, first, *sides[0], barrett=self.barrett)
        for l, tw in enumerate(twiddle):
            y[l] *= tw                                    # < q^2 < 2^62
        y = self.barrett._reduce(y)
        return _bat_product(y, second, *sides[1], barrett=self.barrett).reshape(a.shape)

    def forward(self, a: np.ndarray) -> np.ndarray:
        return self._run(a, "forward")

    def inverse(self, a: np.ndarray) -> np.ndarray:
        return self._run(a, "inverse")


# ------------------------------------------------------------------------------- basis conversion
@dataclass(frozen=True, eq=False)
class BasisConversionPlan:
    """Fast basis conversion as one BAT matmul across limbs.

    x̂_i = x_i·[(Q/q_i)^-1]_{q_i} mod q_i (a Barrett product per limb), then
    y_j = Σ_i x̂_i·[Q/q_i]_{p_j} mod p_j: the constant matrix K[j, i] = [Q/q_i]_{p_j} (k'×k) times the
    data (k×N), with one row modulus per output limb (Bajard et al. 2016; CROSS 2025, basis change as MAT).
    """

    conversion: BasisConversion
    chunk_bits: int
    spec: ChunkSpec = field(init=False, repr=False)
    matrix: np.ndarray = field(init=False, repr=False)
    from_barrett: LimbBarrett = field(init=False, repr=False)
    to_barrett: LimbBarrett = field(init=False, repr=False)

    def __post_init__(self):
        conv = self.conversion
        k_from, k_to = len(conv.from_moduli), len(conv.to_moduli)
        spec = ChunkSpec(self.chunk_bits, k_from)
        matrix = np.empty((spec.count, k_to, spec.count, k_from), dtype=np.float64)
        for j, p in enumerate(conv.to_moduli):   # row j is reduced mod p_j: its own BAT expansion
            row = bat_matrix(conv.qhat_mod_p[:, j][None, :], p, spec)   # (count, count·k)
            matrix[:, j] = row.reshape(spec.count, spec.count, k_from)
        matrix = matrix.reshape(spec.count * k_to, spec.count * k_from)
        matrix.setflags(write=False)
        for name, value in dict(spec=spec, matrix=matrix, from_barrett=LimbBarrett(conv.from_moduli),
                                to_barrett=LimbBarrett(conv.to_moduli)).items():
            object.__setattr__(self, name, value)

    def apply(self, x: np.ndarray) -> np.ndarray:
        conv = self.conversion
        scaled = self.from_barrett._reduce_wide(x * conv.qhat_inv[:, None], self.from_barrett.fold_count(2**62))
        z = self.matrix @ split_chunks(scaled, self.spec, axis=0)
        return self.to_barrett._reduce_wide(join_chunks(z, self.spec, axis=0),
                                            self.to_barrett.fold_count(self.spec.combined_bound))


# ------------------------------------------------------------------------------------------ backend
class CrossBackend(NTTBackend):
    """NTT and basis conversion as CROSS matmul kernels (MAT with BAT chunks on float64 BLAS).

    ``chunk_bits=None`` uses the widest chunk proven exact for each matmul; ``chunk_bits=8`` is the
    paper's int8 form. An explicit width is proven exact at construction for every size up to
    ``max_n`` (the 4-step matmuls of inner dimension R ≤ √(2·max_n)) and for basis conversions from up
    to ``MAX_CONVERSION_LIMBS`` limbs; a wider width is refused then, a larger n at its first call.
    Results are bit-identical to ``numpy``/``numba`` radix-2. Matrices are built on first use per
    (N, modulus) and cached on this object (2·(count·R)²·8 bytes per modulus and direction: 4 MB at
    N = 2^16 with wide chunks, 16 MB with 8-bit chunks).
    """

    name = "cross"

    def __init__(self, chunk_bits: int | None = None, max_n: int = 2**16):
        rows, _ = mat_shape(max_n)
        if chunk_bits is not None:
            ChunkSpec(chunk_bits, max(rows, MAX_CONVERSION_LIMBS))   # the bound, proven for every size allowed
        self.chunk_bits = chunk_bits
        self.max_n = int(max_n)
        self._plans: dict[tuple[int, int], MATPlan] = {}
        self._stacks: dict[tuple[int, tuple[int, ...]], _LimbStack] = {}
        self._conversions: dict[tuple[tuple[int, ...], tuple[int, ...]], BasisConversionPlan] = {}

    def __repr__(self):
        return f"CrossBackend(chunk_bits={self.chunk_bits}, max_n={self.max_n})"

    def width_for(self, inner: int) -> int:
        """The chunk width used for a matmul of this inner dimension (proven safe)."""
        if self.chunk_bits is None:
            return widest_chunk_bits(inner)
        ChunkSpec(self.chunk_bits, inner)
        return self.chunk_bits

    def plan(self, n: int, q: int, psi: int) -> MATPlan:
        """The (cached) MAT plan of size n mod q."""
        key = (n, q)
        if key not in self._plans:
            rows, _ = mat_shape(n)
            if self.chunk_bits is not None and n > self.max_n:
                raise ParameterError(f"n={n} exceeds max_n={self.max_n} for which chunk_bits={self.chunk_bits} "
                                     "was proven exact; construct CrossBackend with a larger max_n")
            self._plans[key] = MATPlan(n, q, psi, self.width_for(rows))
        return self._plans[key]

    def _stack(self, tables: NTTTables) -> _LimbStack:
        key = (tables.n, tuple(tables.moduli))
        if key not in self._stacks:     # references to the cached per-modulus plans, no copies
            self._stacks[key] = _LimbStack([self.plan(tables.n, q, psi) for q, psi in zip(tables.moduli, tables.psi)])
        return self._stacks[key]

    def forward(self, a, tables):
        a = limbs_input(a, tables)
        return self._stack(tables).forward(a) if len(a) else a.copy()

    def inverse(self, a, tables):
        a = limbs_input(a, tables)
        return self._stack(tables).inverse(a) if len(a) else a.copy()

    def convert_basis(self, x, conv):
        key = (conv.from_moduli, conv.to_moduli)
        if key not in self._conversions:
            self._conversions[key] = BasisConversionPlan(conv, self.width_for(len(conv.from_moduli)))
        return self._conversions[key].apply(conversion_input(x, conv))


# ------------------------------------------------------------------- compiled 4-step (same layout)
@dataclass(frozen=True, eq=False)
class FourStepPlan:
    """Tables of the compiled 4-step NTT of size n mod q: MAT's layout with butterfly sub-transforms.

    F1·X is the negacyclic NTT of size R with root ψ^C applied down the columns, and (Y ∘ T)·F2 is
    the negacyclic NTT of size C with root ψ^R along the rows once ψ^(-R·j2) is folded into the
    twiddles: T'[r, j2] = ψ^(j2·(2·brv_R(r) + 1 − R)). The inverse twiddles carry 1/N.
    """

    n: int
    q: int
    psi: int
    tables: dict = field(init=False, repr=False)

    def __post_init__(self):
        n, q, psi = self.n, self.q, self.psi
        rows, cols = mat_shape(n)
        _check_root(n, q, psi)
        two_n = 2 * n
        powers = _powers_of(psi, two_n, q)
        brv_r, brv_c = bit_reverse_indices(rows), bit_reverse_indices(cols)
        exp_tw = np.outer(2 * brv_r + 1 - rows, np.arange(cols)) % two_n
        n_inv = np.uint64(inv_mod(n, q))
        values = {"w_r": powers[(cols * brv_r) % two_n], "w_c": powers[(rows * brv_c) % two_n],
                  "winv_r": powers[(-cols * brv_r) % two_n], "winv_c": powers[(-rows * brv_c) % two_n],
                  "tw": powers[exp_tw], "twinv": (powers[(-exp_tw) % two_n] * n_inv) % np.uint64(q)}
        for name in list(values):
            values[name + "_shoup"] = shoup_precompute(values[name], q)
        for value in values.values():
            value.setflags(write=False)
        object.__setattr__(self, "tables", values)


class _TablePool:
    """The FourStepPlan tables of every modulus seen for one n, stacked once (rows looked up per call),
    so sub-bases of a modulus chain share one copy."""

    def __init__(self, n: int):
        self.n = n
        self.shape = mat_shape(n)
        self.row_of: dict[int, int] = {}
        self._rows: dict[tuple[int, ...], np.ndarray] = {}
        self.q = np.zeros(0, dtype=np.uint64)
        self.arrays: dict[str, np.ndarray] = {}
        self._lock = threading.Lock()

    def rows(self, tables: NTTTables) -> np.ndarray:
        """Row of each of tables.moduli in the pool (new moduli are added); cached per basis. Thread-safe:
        rows are published only after ``arrays`` and ``q`` hold them (both only grow, swapped whole)."""
        key = tuple(tables.moduli)
        rows = self._rows.get(key)
        if rows is None:
            with self._lock:
                if key not in self._rows:
                    self._add(tables)
                    self._rows[key] = np.array([self.row_of[q] for q in key], dtype=np.int64)
                rows = self._rows[key]
        return rows

    def _add(self, tables: NTTTables):
        new = [(q, psi) for q, psi in zip(tables.moduli, tables.psi) if q not in self.row_of]
        if new:
            plans = [FourStepPlan(self.n, q, psi) for q, psi in dict(new).items()]
            for plan in plans:
                self.row_of[plan.q] = len(self.row_of)
            self.q = np.concatenate([self.q, np.array([p.q for p in plans], dtype=np.uint64)])
            # uint32: every table value (< q) and Shoup companion (⌊w·2^32/q⌋) fits 32 bits; half the bytes
            self.arrays = {name: np.concatenate(([self.arrays[name]] if self.arrays else [])
                                                + [np.stack([p.tables[name] for p in plans]).astype(np.uint32)])
                           for name in plans[0].tables}


class FourStepBackend(NTTBackend):
    """The MAT layout compiled for the CPU: 4-step NTT whose sub-transforms are numba butterflies
    vectorized across whole rows (SIMD lanes play the matrix engine). Bit-identical to radix-2.

    Basis conversion is a compiled modular matmul over tiles of coefficients. Tables are kept per (N, modulus).
    """

    name = "fourstep"

    def __init__(self):
        self._pools: dict[int, _TablePool] = {}

    def _pool(self, tables: NTTTables) -> tuple[_TablePool, np.ndarray]:
        if tables.n not in self._pools:
            self._pools[tables.n] = _TablePool(tables.n)
        pool = self._pools[tables.n]
        return pool, pool.rows(tables)

    def forward(self, a, tables):
        from ._cross_kernels import four_step_forward
        return self._run(four_step_forward, a, tables, ("w_r", "tw", "w_c"))

    def inverse(self, a, tables):
        from ._cross_kernels import four_step_inverse
        return self._run(four_step_inverse, a, tables, ("winv_r", "twinv", "winv_c"))

    def forward_into(self, a, tables, out):
        from ._cross_kernels import four_step_forward
        return self._run(four_step_forward, a, tables, ("w_r", "tw", "w_c"), out)

    def inverse_into(self, a, tables, out):
        from ._cross_kernels import four_step_inverse
        return self._run(four_step_inverse, a, tables, ("winv_r", "twinv", "winv_c"), out)

    def _run(self, kernel, a, tables: NTTTables, names, out=None) -> np.ndarray:
        """Run a kernel; it checks that each limb is reduced while it copies it (one pass saved). ``out``:
        a writable C-contiguous uint64 array of a's shape to write into (``a`` itself allowed)."""
        if not (type(a) is np.ndarray and a.dtype == np.uint64 and a.shape == (len(tables.moduli), tables.n)):
            a = limbs_input(a, tables)                  # converts, or raises a clear error
        if out is None:
            out = np.empty(a.shape, dtype=np.uint64)
        elif not (type(out) is np.ndarray and out.dtype == np.uint64 and out.shape == a.shape
                  and out.flags.c_contiguous and out.flags.writeable):
            raise ParameterError(f"out must be a writable C-contiguous uint64 array of shape {a.shape}")
        if not len(a):
            return out
        a = np.ascontiguousarray(a)
        if a.flags.writeable:       # one compiled specialisation (read-only input) instead of two: ~2 MB each
            a = a.view()
            a.setflags(write=False)
        pool, rows = self._pool(tables)
        t = pool.arrays
        tables_args = [t[k] for name in names for k in (name, name + "_shoup")]

        def limbs(start, stop):     # limbs are independent: chunks of them run on the threads of hezk.threads
            bad = kernel(a[start:stop], *pool.shape, rows[start:stop], *tables_args, pool.q, out[start:stop])[1]
            return -1 if bad < 0 else start + bad

        bad = [b for b in parallel(limbs, len(a), min_work=PARALLEL_MIN_WORK, work_per_item=tables.n) if b >= 0]
        bad_limb = bad[0] if bad else -1
        if bad_limb >= 0:
            limbs_input(a, tables)                      # raises: names the limb, value and modulus
            raise ParameterError(f"a[{bad_limb}] holds a value >= its modulus {tables.moduli[bad_limb]}")
        return out

    def convert_basis(self, x, conv):
        """The fast basis conversion as a compiled modular matmul (coefficients innermost, in tiles)."""
        from ._cross_kernels import CONVERT_TILE, basis_convert
        if len(conv.from_moduli) >= 2**20:    # the kernel's unreduced sums must stay below 2^53
            raise ParameterError(f"basis conversion from {len(conv.from_moduli)} limbs: at most 2^20 supported")
        x = np.ascontiguousarray(conversion_input(x, conv))
        out = np.empty((len(conv.to_moduli), x.shape[1]), dtype=np.uint64)
        parallel(lambda start, stop: basis_convert(x, conv.q_from, conv.qhat_inv, conv.qhat_inv_shoup, conv.q_to,
                                                   conv.qhat_mod_p, conv.qhat_mod_p_shoup, out, start, stop),
                 x.shape[1], min_work=PARALLEL_MIN_PRODUCTS, work_per_item=len(conv.from_moduli) * len(conv.to_moduli),
                 align=CONVERT_TILE)
        return out


def conversion_input(x, conv: BasisConversion) -> np.ndarray:
    if np.ndim(x) != 2:
        raise ShapeError(f"x.shape={np.shape(x)}: expected ({len(conv.from_moduli)}, n), one row per source modulus")
    return _as_uint64(x, "x", [2**RESIDUE_BITS] * len(conv.from_moduli), conv.from_moduli)


def limbs_input(a, tables: NTTTables) -> np.ndarray:
    """a as uint64 (limbs, n) with row l below q_l, else a clear error; one pass when it already is."""
    if type(a) is np.ndarray and a.dtype == np.uint64 and a.ndim == 2 and a.shape[1] == tables.n \
            and len(a) == len(tables.moduli) and (not len(a) or bool((a.max(axis=1) < tables.q).all())):
        return a
    expected = (len(tables.moduli), tables.n)
    if np.shape(a) != expected:
        raise ShapeError(f"a.shape={np.shape(a)}: expected {expected} (one row per modulus, n coefficients)")
    return _as_uint64(a, "a", tables.moduli, tables.moduli)
