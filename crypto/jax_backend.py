"""CKKS kernels on JAX (XLA: CPU, GPU or TPU): MAT-form NTT, BAT products, Barrett, basis conversion.

The CROSS rewrites (Tong et al., "Leveraging ASIC AI Chips for Homomorphic Encryption", 2025; see
``crypto.cross``) mapped onto the integer matrix units of accelerators, in 32-bit arithmetic only.

**Chunking (BAT on int8 matrix units).** GPU tensor cores (IMMA: s8 × s8 → s32) and TPU MXUs multiply
int8 matrices into int32 accumulators; that is the fastest exact product they have (float32 sums are
exact only below 2^24, and JAX's default float32 matmul on GPUs is TF32, 10-bit mantissa). So a residue
is split into four *balanced* 8-bit digits d_t ∈ [-128, 127] (d_3 ∈ [-64, 64]) of a representative
v with |v| ≤ 2^30 (the centred residue, or x − 2^30 for data that must keep its integer value):
v = Σ_t d_t·2^(8t). A constant K mod q becomes the int8 matrix M[s, i, t, j] = digit_s(K[i, j]·2^(8t)
mod q, centred), and Σ_s 2^(8s)·Z_s ≡ K·X (mod q) with Z = M·D the int8 matmul (D[j, t] = digit_t(X[j]):
the four digits of a value are the bytes of one uint32, ``_digit_bytes``). Every partial sum of
Z_s is bounded by the sum of absolute products, A·128·(3·128 + 64) = 57344·A for inner dimension A
(before chunking), so with A ≤ ``MAX_INNER`` = 18724 every int32 partial sum is below 2^30, in any
summation order. The NTT's matmuls have A = R or C ≤ 256 at N = 2^16 (2^24 at most), a basis
conversion A = number of source limbs.

**32-bit words.** Residues are below 2^31, so they live in uint32 (or int32 for the signed sums).
Products that need 64 bits come from ``mul_wide``: four 16×16 → 32-bit products by default, which needs
no ``jax_enable_x64`` (never switched on globally here; TPUs have no 64-bit integer multiplier and GPUs
emulate one); when the caller traces inside ``jax.enable_x64(True)`` (scoped), one 32×32 → 64-bit
widening multiply instead (a single instruction on CPUs, mul.hi on GPUs; 1.1-1.3x faster NTTs on CPU
XLA). Both give the same bits; ``JaxBackend`` uses the scoped form. Inputs of dtype uint64 (x64
callers) are accepted and results come back in the input's dtype.

**Reductions.** After a BAT matmul, u_s = Z_s + 2^30 ∈ [0, 2^31) and
Σ_s 2^(8s)·Z_s ≡ Σ_s u_s·c_s + bias (mod q) with c_s = 2^(8s) mod q (Shoup products: the companion
⌊c·2^32/q⌋ precomputed) and bias = −2^30·Σ_s c_s mod q. The 4-step twiddle is a Shoup product by a
table. ``mulmod`` of two variable residues is Barrett in the CROSS form (k = ⌈log2 q⌉,
m = ⌊2^(2k)/q⌋, t = ⌊x·m/2^(2k)⌋ from 32-bit halves of x, r = x − t·q ∈ [0, 2q), one conditional
subtraction); its constants are derived on the device from q (a 64-step long division on q's shape,
negligible next to the data), so q may be any (traced) array of moduli.

**Layout (MAT).** The negacyclic NTT of size N = R·C is ``crypto.cross``'s 4-step transform
Out = ((F1·X) ∘ T)·F2 with X = a.reshape(R, C) and the bit reversals folded into F1 and F2, so the
output order is ``crypto.ntt``'s; the inverse is F1⁻¹·((Out·F2⁻¹) ∘ T⁻¹). Each matrix product is one
batched int8 matmul over all limbs. Results are bit-identical to the numba backend. Per element and
direction the transform reads and writes about 100 bytes (int8 digits, four int32 partial sums per
matmul, twiddles) against 8 for an ideal one-pass NTT: XLA runs each matmul and its reductions as
separate kernels, so on a GPU it stays about an order of magnitude above the memory-bandwidth bound
unless the reductions are fused into the matmul (a custom kernel, not done here).

Functional device API (all jittable; shapes from the arrays, nothing static to pass):
``DeviceTables.of(tables)``, ``ntt(a, dt)``, ``intt(a, dt)``, ``mulmod(a, b, q)``, ``barrett(x, q)``,
``addmod``/``submod``/``negmod``, ``DeviceConversion.of(conv)``, ``convert_basis(x, dc)``,
``keyswitch_inner(digits, key_b, key_a, q)``. ``JaxBackend`` wraps them as an ``NTTBackend``
(``backend="jax"``). JAX is imported inside functions and constructors only.
"""
from __future__ import annotations

import threading
import weakref
from typing import NamedTuple

import numpy as np

from .cross import conversion_input, limbs_input, mat_constants, mat_shape
from .errors import ParameterError, ShapeError
from .ntt_base import BasisConversion, NTTBackend, NTTTables

CHUNK_BITS = 8              # int8 digits: the integer matrix units' operand width
CHUNKS = 4                  # balanced 8-bit digits of a value |v| <= 2^30
DIGIT_MAX = 128             # |d_t| <= 128 for t < 3
TOP_DIGIT_MAX = 64          # |d_3| <= 64 when |v| <= 2^30
OFFSET = 2**30              # |Z_s| < OFFSET, so Z_s + OFFSET is a uint32 below 2^31
MAX_INNER = (OFFSET - 1) // (DIGIT_MAX * (3 * DIGIT_MAX + TOP_DIGIT_MAX))   # 18724


class JaxUnavailableError(ParameterError, ImportError):
    """backend='jax' (or a device kernel) was asked for where JAX is not installed. An ImportError too, so
    ``crypto.backend_select`` skips the candidate like any backend whose import fails."""


def _jax():
    try:
        import jax
        import jax.numpy as jnp
    except ImportError as exc:
        raise JaxUnavailableError("backend='jax' needs JAX, which is not installed: pip install 'hezk[jax]' "
                                  "(jax[cpu]; jax[cuda12] on an NVIDIA GPU)") from exc
    return jax, jnp


# ------------------------------------------------------------------------------- host-side constants
def balanced_digits(v: np.ndarray) -> np.ndarray:
    """The CHUNKS balanced base-2^8 digits of integers |v| <= 2^30: v = Σ_t d_t·2^(8t), shape (CHUNKS,) + v.shape."""
    v = np.asarray(v, dtype=np.int64)
    if v.size and int(np.abs(v).max()) > OFFSET:
        raise ParameterError(f"balanced digits need |v| <= 2^30, got {int(np.abs(v).max())}")
    out = np.empty((CHUNKS,) + v.shape, dtype=np.int8)
    for t in range(CHUNKS - 1):
        d = ((v + 128) & 255) - 128
        out[t] = d
        v = (v - d) >> 8
    out[CHUNKS - 1] = v
    return out


def _centred(x: np.ndarray, q) -> np.ndarray:
    """Residues in [0, q) as int64 in (-q/2, q/2]."""
    x = np.asarray(x, dtype=np.int64)
    q = np.asarray(q, dtype=np.int64)
    return np.where(x > q // 2, x - q, x)


def bat_left_matrix(constants: np.ndarray, q) -> np.ndarray:
    """int8 BAT expansion of K (A_out × A_in, entries < q) for left products K·X mod q.

    M[s·A_out + i, 4·j + t] = digit_s(centred(K[i, j]·2^(8t) mod q)); ``q`` a scalar or an (A_out, 1)
    column (row i reduced mod q_i). With D[4·j + t, :] = digit_t(X[j, :]), Σ_s 2^(8s)·(M·D)_s ≡ K·X
    (the data digit index is innermost: it is the byte order of a uint32, so digits are a bitcast).
    """
    constants = np.asarray(constants, dtype=np.uint64)
    a_out, a_in = constants.shape
    if a_in > MAX_INNER:
        raise ParameterError(f"BAT inner dimension {a_in} > MAX_INNER={MAX_INNER} (int32 sums would not be exact)")
    q = np.asarray(q, dtype=np.uint64)
    out = np.empty((CHUNKS, a_out, a_in, CHUNKS), dtype=np.int8)
    for t in range(CHUNKS):
        factor = np.asarray([pow(2, CHUNK_BITS * t, int(p)) for p in q.reshape(-1)], dtype=np.uint64).reshape(q.shape)
        shifted = constants * factor % q                              # < 2^62: exact in uint64
        out[..., t] = balanced_digits(_centred(shifted, q))
    return out.reshape(CHUNKS * a_out, a_in * CHUNKS)


def _shoup(w: np.ndarray, q) -> np.ndarray:
    """⌊w·2^32/q⌋ as uint32 (w < q)."""
    return ((np.asarray(w, dtype=np.uint64) << np.uint64(32)) // np.asarray(q, dtype=np.uint64)).astype(np.uint32)


def _scales(moduli) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(c, c', bias): c[l, s] = 2^(8s) mod q_l, its Shoup companion, bias[l] = −OFFSET·Σ_s c[l, s] mod q_l."""
    c = np.array([[pow(2, CHUNK_BITS * s, q) for s in range(CHUNKS)] for q in moduli], dtype=np.uint64)
    q = np.array(moduli, dtype=np.uint64)[:, None]
    bias = np.array([(-OFFSET * sum(int(v) for v in row)) % p for row, p in zip(c, moduli)], dtype=np.uint32)
    return c.astype(np.uint32), _shoup(c, q), bias[:, None]


# ------------------------------------------------------------------------------------ device tables
class DeviceTables(NamedTuple):
    """NTT constants of ``NTTTables`` as device arrays (a pytree of arrays: pass it to jitted functions).

    For L limbs, N = R·C (``crypto.cross.mat_shape``): ``q`` (L, 1) uint32; ``scale``/``scale_shoup``
    (L, 4) uint32 = 2^(8s) mod q and companions; ``bias`` (L, 1) uint32; ``f1``/``f1inv`` (L, 4R, 4R)
    int8 and ``f2``/``f2inv`` (L, 4C, 4C) int8 BAT matrices; ``tw``/``twinv`` (L, R, C) uint32 twiddles
    with Shoup companions ``tw_shoup``/``twinv_shoup``. Built by ``of`` (cached per tables object).
    """

    q: object
    scale: object
    scale_shoup: object
    bias: object
    f1: object
    tw: object
    tw_shoup: object
    f2: object
    f2inv: object
    twinv: object
    twinv_shoup: object
    f1inv: object

    @classmethod
    def of(cls, tables: NTTTables) -> "DeviceTables":
        """The device constants of ``tables`` (built once per tables object; a sub-basis of cached tables
        is gathered on the device instead of rebuilt)."""
        if not isinstance(tables, NTTTables):
            raise ParameterError(f"tables must be NTTTables, got {type(tables).__name__}")
        jax, _ = _jax()
        with _CACHE_LOCK, jax.ensure_compile_time_eval():      # concrete arrays even when called under a trace
            found = _TABLES_CACHE.get(tables)
            if found is None:
                found = _subset_of_cached(tables)
                if found is None:
                    found = _build_tables(tables)
                _TABLES_CACHE[tables] = found
            return found

    @property
    def limbs(self) -> int:
        return self.q.shape[0]

    @property
    def n(self) -> int:
        return self.tw.shape[1] * self.tw.shape[2]


_TABLES_CACHE: "weakref.WeakKeyDictionary[NTTTables, DeviceTables]" = weakref.WeakKeyDictionary()
_CACHE_LOCK = threading.RLock()


def _subset_of_cached(tables: NTTTables) -> DeviceTables | None:
    """Rows of a cached DeviceTables whose moduli include all of ``tables.moduli`` (same n), or None."""
    for other, dt in list(_TABLES_CACHE.items()):
        if other.n == tables.n and set(tables.moduli) <= set(other.moduli):
            _, jnp = _jax()
            rows = jnp.asarray([other.moduli.index(q) for q in tables.moduli], dtype=jnp.int32)
            return DeviceTables(*(jnp.take(field, rows, axis=0) for field in dt))
    return None


def _build_tables(tables: NTTTables) -> DeviceTables:
    """BAT matrices and twiddles of every limb (``crypto.cross.mat_constants``), built on the host, uploaded once."""
    _, jnp = _jax()
    n = tables.n
    rows, cols = mat_shape(n)
    if max(rows, cols) > MAX_INNER:
        raise ParameterError(f"n={n}: the 4-step matmuls (R={rows}) exceed MAX_INNER={MAX_INNER}")
    parts = {name: [] for name in ("f1", "tw", "f2", "f2inv", "twinv", "f1inv")}
    for q, psi in zip(tables.moduli, tables.psi):
        m = mat_constants(n, q, psi)
        parts["f1"].append(bat_left_matrix(m["F1"], q))
        parts["f2"].append(bat_left_matrix(m["F2"].T, q).T)            # right product Y·F2
        parts["f2inv"].append(bat_left_matrix(m["F2inv"].T, q).T)
        parts["f1inv"].append(bat_left_matrix(m["F1inv"], q))
        parts["tw"].append(m["T"])
        parts["twinv"].append(m["Tinv"])
    limbs = len(tables.moduli)
    q_col = np.array(tables.moduli, dtype=np.uint64).reshape(limbs, 1, 1)

    def stack(name, dtype):
        if limbs:
            return np.stack(parts[name]).astype(dtype)
        shape = {"tw": (rows, cols), "twinv": (rows, cols), "f1": (4 * rows,) * 2, "f1inv": (4 * rows,) * 2}
        return np.zeros((0,) + shape.get(name, (4 * cols, 4 * cols)), dtype=dtype)

    tw, twinv = stack("tw", np.uint64), stack("twinv", np.uint64)
    scale, scale_shoup, bias = _scales(tables.moduli)
    host = dict(q=np.array(tables.moduli, dtype=np.uint32).reshape(limbs, 1),
                scale=scale.reshape(limbs, CHUNKS), scale_shoup=scale_shoup.reshape(limbs, CHUNKS),
                bias=bias.reshape(limbs, 1),
                f1=stack("f1", np.int8), tw=tw.astype(np.uint32), tw_shoup=_shoup(tw, q_col),
                f2=stack("f2", np.int8), f2inv=stack("f2inv", np.int8), twinv=twinv.astype(np.uint32),
                twinv_shoup=_shoup(twinv, q_col), f1inv=stack("f1inv", np.int8))
    return DeviceTables(**{name: jnp.asarray(value) for name, value in host.items()})


class DeviceConversion(NamedTuple):
    """Device constants of a fast basis conversion (``BasisConversion``) from k to k' limbs.

    ``q_from``, ``qhat_inv``, ``qhat_inv_shoup`` (k, 1) uint32; ``q_to``, ``bias`` (k', 1) uint32;
    ``scale``/``scale_shoup`` (k', 4) uint32; ``matrix`` (4k', 4k) int8, the BAT expansion of
    K[j, i] = (Q/q_i) mod p_j with row j reduced mod p_j. ``bias`` also carries the 2^30 data shift.
    """

    q_from: object
    qhat_inv: object
    qhat_inv_shoup: object
    q_to: object
    scale: object
    scale_shoup: object
    bias: object
    matrix: object

    @classmethod
    def of(cls, conv: BasisConversion) -> "DeviceConversion":
        """The device form of ``conv`` (cached per conversion object)."""
        if not isinstance(conv, BasisConversion):
            raise ParameterError(f"conv must be a BasisConversion, got {type(conv).__name__}")
        jax, _ = _jax()
        with _CACHE_LOCK, jax.ensure_compile_time_eval():
            found = _CONV_CACHE.get(conv)
            if found is None:
                found = _CONV_CACHE[conv] = _build_conversion(conv)
            return found


_CONV_CACHE: "weakref.WeakKeyDictionary[BasisConversion, DeviceConversion]" = weakref.WeakKeyDictionary()


def _build_conversion(conv: BasisConversion) -> DeviceConversion:
    """The conversion's constants and its (4k', 4k) BAT matrix, built on the host, uploaded once."""
    _, jnp = _jax()
    k, kp = len(conv.from_moduli), len(conv.to_moduli)
    if k > MAX_INNER:
        raise ParameterError(f"basis conversion from {k} limbs > MAX_INNER={MAX_INNER}")
    p_col = np.array(conv.to_moduli, dtype=np.uint64).reshape(kp, 1)
    matrix = bat_left_matrix(conv.qhat_mod_p.T, p_col) if k and kp else np.zeros((4 * kp, 4 * k), np.int8)
    scale, scale_shoup, bias = _scales(conv.to_moduli)
    # data enter as x̂ − 2^30: add back 2^30·Σ_i K[j, i] mod p_j
    shift = [(OFFSET * sum(int(conv.qhat_mod_p[i, j]) for i in range(k))) % p for j, p in enumerate(conv.to_moduli)]
    bias = np.array([(int(b) + s) % p for b, s, p in zip(bias.reshape(-1), shift, conv.to_moduli)], dtype=np.uint32)
    host = dict(q_from=np.array(conv.from_moduli, dtype=np.uint32).reshape(k, 1),
                qhat_inv=conv.qhat_inv.astype(np.uint32).reshape(k, 1),
                qhat_inv_shoup=_shoup(conv.qhat_inv, conv.q_from).reshape(k, 1),
                q_to=np.array(conv.to_moduli, dtype=np.uint32).reshape(kp, 1),
                scale=scale.reshape(kp, CHUNKS), scale_shoup=scale_shoup.reshape(kp, CHUNKS),
                bias=bias.reshape(kp, 1), matrix=matrix)
    return DeviceConversion(**{name: jnp.asarray(value) for name, value in host.items()})


# ----------------------------------------------------------------------------- 32-bit word kernels
def _u32(x):
    """x as a uint32 device array; host values (numpy, Python ints) are narrowed on the host, so no 64-bit
    dtype is requested from JAX where x64 is off (values must be below 2^32)."""
    _, jnp = _jax()
    if not hasattr(x, "dtype") or isinstance(x, (np.ndarray, np.generic)):
        return jnp.asarray(np.asarray(x).astype(np.uint32))
    return x.astype(jnp.uint32)


def _is_wide(x) -> bool:
    return hasattr(x, "dtype") and np.dtype(x.dtype).itemsize == 8


def _out_dtype(*xs):
    """uint64 when an input is 64-bit and the caller traces with x64 enabled (``jax.enable_x64``), else uint32."""
    jax, jnp = _jax()
    return jnp.uint64 if jax.config.jax_enable_x64 and any(_is_wide(x) for x in xs) else jnp.uint32


def mul_wide(a, b):
    """(hi, lo) of the 64-bit product of uint32 arrays: from four 16×16 → 32-bit products, or, when the
    caller traces inside ``jax.enable_x64(True)``, from one 32×32 → 64-bit product (a single widening
    multiply on CPUs, mul.hi on GPUs). Both give the same bits."""
    jax, jnp = _jax()
    if jax.config.jax_enable_x64:
        p = a.astype(jnp.uint64) * b.astype(jnp.uint64)
        return (p >> 32).astype(jnp.uint32), p.astype(jnp.uint32)
    mask = jnp.uint32(0xFFFF)
    a0, a1 = a & mask, a >> 16
    b0, b1 = b & mask, b >> 16
    p00, p01, p10, p11 = a0 * b0, a0 * b1, a1 * b0, a1 * b1
    mid = (p00 >> 16) + (p01 & mask) + (p10 & mask)               # < 3·2^16
    hi = p11 + (p01 >> 16) + (p10 >> 16) + (mid >> 16)
    lo = (mid << 16) | (p00 & mask)
    return hi, lo


def _mulhi(a, b):
    return mul_wide(a, b)[0]


def _csub(r, q):
    """r − q if r >= q else r, for r < 2q <= 2^32 (r − q wraps above r exactly when r < q)."""
    _, jnp = _jax()
    return jnp.minimum(r, r - q)


def _mul_shoup(x, w, w_shoup, q):
    """x·w mod q for x < 2^32, a constant w < q and w' = ⌊w·2^32/q⌋: x·w − ⌊x·w'/2^32⌋·q ∈ [0, 2q)."""
    return _csub(x * w - _mulhi(x, w_shoup) * q, q)


def addmod(a, b, q):
    """(a + b) mod q for residues a, b < q < 2^31 (any unsigned dtype; result in a's dtype)."""
    dtype = _out_dtype(a, b)
    return _csub(_u32(a) + _u32(b), _u32(q)).astype(dtype)


def submod(a, b, q):
    """(a − b) mod q for residues a, b < q < 2^31."""
    dtype = _out_dtype(a, b)
    q = _u32(q)
    return _csub(_u32(a) + q - _u32(b), q).astype(dtype)


def negmod(a, q):
    """(−a) mod q for residues a < q."""
    dtype = _out_dtype(a)
    q = _u32(q)
    return _csub(q - _u32(a), q).astype(dtype)


class _BarrettConstants(NamedTuple):
    q: object        # uint32 moduli (shape of the q given)
    m: object        # ⌊2^(2k)/q⌋ < 2^32
    wide: object     # bool: 2k >= 32 (the quotient needs the high word of x)
    shift: object    # 2k − 32 when wide, else 2k
    word: object     # ⌊2^32/q⌋ (q odd): Barrett for single words
    r32: object      # 2^32 mod q


def barrett_constants(q) -> _BarrettConstants:
    """Barrett constants derived on the device from an array of odd moduli 3 <= q < 2^31 (any shape, traceable):
    k = ⌈log2 q⌉ by count-leading-zeros, m = ⌊2^(2k)/q⌋ by a 64-step binary long division (rem < q < 2^31)."""
    jax, jnp = _jax()
    q = _u32(q)
    k = jnp.uint32(32) - jax.lax.clz(q - 1)
    two_k = 2 * k

    zero = jnp.zeros_like(q)
    _, m, _, _ = jax.lax.fori_loop(0, 64, _division_step, (zero, zero, q, two_k))
    wide = two_k >= 32
    shift = jnp.where(wide, two_k - 32, two_k)
    word = jnp.uint32(0xFFFFFFFF) // q
    r32 = _csub(jnp.uint32(0xFFFFFFFF) % q + 1, q)
    return _BarrettConstants(q, m, wide, shift, word, r32)


def _division_step(i, state):
    """One step of the binary long division 2^(2k) / q (bits 63 down to 0; rem < q < 2^31 never overflows)."""
    _, jnp = _jax()
    rem, quo, q, two_k = state
    bit = (jnp.uint32(63 - i) == two_k).astype(jnp.uint32)
    rem = (rem << 1) | bit
    ge = rem >= q
    return jnp.where(ge, rem - q, rem), (quo << 1) | ge.astype(jnp.uint32), q, two_k


def _barrett_wide(hi, lo, c: _BarrettConstants):
    """(hi·2^32 + lo) mod q for x < 2^(2k) (e.g. a product of two residues): t = ⌊x·m/2^(2k)⌋ with
    ⌊x/q⌋ − 1 <= t <= ⌊x/q⌋, so r = x − t·q < 2q is exact in 32 bits."""
    _, jnp = _jax()
    a_hi, a_lo = mul_wide(lo, c.m)
    b_hi, b_lo = mul_wide(hi, c.m)
    w1 = b_lo + a_hi                                   # x·m = w2·2^64 + w1·2^32 + a_lo
    w2 = b_hi + (w1 < b_lo).astype(jnp.uint32)
    top = jnp.where(c.wide, w2, a_hi)
    low = jnp.where(c.wide, w1, a_lo)
    t = (low >> c.shift) | ((top << 1) << (31 - c.shift))   # two shifts: never a shift by 32
    return _csub(lo - t * c.q, c.q)


def _barrett_word(x, c: _BarrettConstants):
    """x mod q for any uint32 x: Barrett with m = ⌊2^32/q⌋ (t <= ⌊x/q⌋ <= t + 1)."""
    return _csub(x - _mulhi(x, c.word) * c.q, c.q)


def _mulmod(a, b, c: _BarrettConstants):
    hi, lo = mul_wide(a, b)
    return _barrett_wide(hi, lo, c)


def mulmod(a, b, q):
    """a·b mod q elementwise (broadcasting) for residues a, b < q, odd moduli 3 <= q < 2^31 (q any
    broadcastable array, e.g. (L, 1) against (L, n) data). Barrett in 32-bit words; dtype of the inputs."""
    dtype = _out_dtype(a, b)
    return _mulmod(_u32(a), _u32(b), barrett_constants(q)).astype(dtype)


def barrett(x, q):
    """x mod q for unsigned integers x < 2^64: a uint32/uint64 array, or a pair (hi, lo) of uint32 arrays
    meaning hi·2^32 + lo. x = hi·2^32 + lo ≡ [hi]_q·(2^32 mod q) + [lo]_q. Returns uint64 for 64-bit x under
    ``jax.enable_x64``, else uint32."""
    _, jnp = _jax()
    if isinstance(x, (tuple, list)):
        if len(x) != 2:
            raise ShapeError(f"barrett: x as a sequence must be a pair (hi, lo), got {len(x)} parts")
        hi, lo, dtype = _u32(x[0]), _u32(x[1]), jnp.uint32
    else:
        dtype = _out_dtype(x)
        if _is_wide(x) and isinstance(x, np.ndarray):            # split on the host: no 64-bit request
            hi, lo = _u32(x >> np.uint64(32)), _u32(x & np.uint64(0xFFFFFFFF))
        elif _is_wide(x):
            hi, lo = (x >> 32).astype(jnp.uint32), x.astype(jnp.uint32)
        else:
            hi, lo = None, _u32(x)
    c = barrett_constants(q)
    r = _barrett_word(lo, c)
    if hi is not None:
        r = _csub(_mulmod(_barrett_word(hi, c), c.r32, c) + r, c.q)
    return r.astype(dtype)


def keyswitch_inner(digits, key_b, key_a, q):
    """(Σ_j digits[j]·key_b[j], Σ_j digits[j]·key_a[j]) mod q: the key-switching inner product.

    ``digits``: (J, L, n) ModUp digits in NTT form over L moduli; ``key_b``, ``key_a``: (J, L, n) the
    key's rows for the same moduli (uint32 as ``SwitchingKey`` stores them, or uint64); ``q``: the moduli,
    broadcastable to (L, n) (e.g. (L, 1)). Returns two (L, n) arrays in the digits' dtype."""
    _, jnp = _jax()
    if np.ndim(digits) != 3 or np.shape(key_b) != np.shape(digits) or np.shape(key_a) != np.shape(digits):
        raise ShapeError(f"keyswitch_inner: digits {np.shape(digits)}, key_b {np.shape(key_b)}, key_a "
                         f"{np.shape(key_a)}: expected three equal (J, L, n) shapes")
    dtype = _out_dtype(digits)
    c = barrett_constants(q)
    d, kb, ka = _u32(digits), _u32(key_b), _u32(key_a)
    out_b = jnp.zeros(d.shape[1:], dtype=jnp.uint32)
    out_a = jnp.zeros(d.shape[1:], dtype=jnp.uint32)
    for j in range(d.shape[0]):
        out_b = _csub(out_b + _mulmod(d[j], kb[j], c), c.q)
        out_a = _csub(out_a + _mulmod(d[j], ka[j], c), c.q)
    return out_b.astype(dtype), out_a.astype(dtype)


# ------------------------------------------------------------------------------------ BAT matmuls
def _digit_bytes(v):
    """Balanced int8 digits of int32 |v| <= 2^30, shape v.shape + (4,): the bytes of w = (v + B) ^ B with
    B = 0x808080. Byte t < 3 of v + B is the unsigned digit u_t = d_t + 128 and XOR 0x80 makes it the int8
    d_t; byte 3 is the signed top digit. One elementwise op and a bitcast, so XLA computes each value once."""
    jax, jnp = _jax()
    w = (v + 0x808080).astype(jnp.uint32) ^ jnp.uint32(0x808080)
    return jax.lax.bitcast_convert_type(w, jnp.int8)


def _centred_i32(x, q):
    """uint32 residues x < q as int32 in (-q/2, q/2]."""
    _, jnp = _jax()
    xi, qi = x.astype(jnp.int32), q.astype(jnp.int32)
    return jnp.where(xi > (qi >> 1), xi - qi, xi)


def _recombine(z, axis, q, scale, scale_shoup, bias):
    """Σ_s 2^(8s)·Z_s mod q for int32 partial sums |Z_s| < 2^30 stacked along ``axis``: Σ_s (Z_s + 2^30)·c_s + bias.
    q, bias broadcast against one Z_s; scale/scale_shoup hold c_s along their last axis."""
    _, jnp = _jax()
    u = (z + OFFSET).astype(jnp.uint32)
    acc = None
    for s in range(CHUNKS):
        term = _mul_shoup(jnp.take(u, s, axis=axis), scale[..., s], scale_shoup[..., s], q)
        acc = _csub(term + bias, q) if acc is None else _csub(acc + term, q)
    return acc


def _dot(x, y):
    """Batched int8 matmul over the leading axis with int32 accumulation."""
    jax, jnp = _jax()
    return jax.lax.dot_general(x, y, (((2,), (1,)), ((0,), (0,))), preferred_element_type=jnp.int32)


def _left(matrix, x, q, dt):
    """Per limb: K_l·X_l mod q_l for X (L, A, B) uint32 residues; ``matrix`` (L, 4A', 4A) int8."""
    _, jnp = _jax()
    L, a, b = x.shape
    d = jnp.swapaxes(_digit_bytes(_centred_i32(x, q)), 2, 3).reshape(L, a * CHUNKS, b)
    z = _dot(matrix, d).reshape(L, CHUNKS, matrix.shape[1] // CHUNKS, b)
    return _recombine(z, 1, q, dt.scale[:, None, None, :], dt.scale_shoup[:, None, None, :], dt.bias[:, :, None])


def _right(x, matrix, q, dt):
    """Per limb: X_l·K_l mod q_l for X (L, A, B) uint32 residues; ``matrix`` (L, 4B, 4B') int8."""
    L, a, b = x.shape
    d = _digit_bytes(_centred_i32(x, q)).reshape(L, a, b * CHUNKS)
    z = _dot(d, matrix).reshape(L, a, CHUNKS, matrix.shape[2] // CHUNKS)
    return _recombine(z, 2, q, dt.scale[:, None, None, :], dt.scale_shoup[:, None, None, :], dt.bias[:, :, None])


def _check_limbs(a, dt: DeviceTables, name: str):
    if np.shape(a) != (dt.limbs, dt.n):
        raise ShapeError(f"{name}: a.shape={np.shape(a)}, expected ({dt.limbs}, {dt.n}) (limbs, n) of these tables")


def ntt(a, dt: DeviceTables):
    """Forward negacyclic NTT of each row (row l mod q_l), ``crypto.ntt``'s bit-reversed order.

    ``a``: (L, n) residues < q_l, uint32 (or uint64); ``dt = DeviceTables.of(tables)``. Returns (L, n)
    in a's dtype. MAT form: ((F1·X) ∘ T)·F2, two batched int8 BAT matmuls and one Shoup twiddle."""
    _check_limbs(a, dt, "ntt")
    return _ntt_second(_ntt_first(_u32(a), dt), dt).astype(_out_dtype(a))


def _ntt_first(a, dt: DeviceTables):
    """(F1·X) ∘ T as (L, R, C) uint32, for uint32 a of shape (L, n)."""
    rows, cols = dt.tw.shape[1:]
    q = dt.q[:, :, None]
    y = _left(dt.f1, a.reshape(dt.limbs, rows, cols), q, dt)
    return _mul_shoup(y, dt.tw, dt.tw_shoup, q)


def _ntt_second(y, dt: DeviceTables):
    """Y·F2 as (L, n) uint32."""
    return _right(y, dt.f2, dt.q[:, :, None], dt).reshape(dt.limbs, dt.n)


def intt(a, dt: DeviceTables):
    """Exact inverse of ``ntt`` (n^-1 included): F1⁻¹·((Out·F2⁻¹) ∘ T⁻¹). Shapes and dtypes as ``ntt``."""
    _check_limbs(a, dt, "intt")
    return _intt_second(_intt_first(_u32(a), dt), dt).astype(_out_dtype(a))


def _intt_first(a, dt: DeviceTables):
    """(Out·F2⁻¹) ∘ T⁻¹ as (L, R, C) uint32."""
    rows, cols = dt.tw.shape[1:]
    q = dt.q[:, :, None]
    y = _right(a.reshape(dt.limbs, rows, cols), dt.f2inv, q, dt)
    return _mul_shoup(y, dt.twinv, dt.twinv_shoup, q)


def _intt_second(y, dt: DeviceTables):
    """F1⁻¹·Y as (L, n) uint32."""
    return _left(dt.f1inv, y, dt.q[:, :, None], dt).reshape(dt.limbs, dt.n)


def convert_basis(x, dc: DeviceConversion):
    """Fast basis conversion y_j = Σ_i [x_i·(Q/q_i)^-1]_{q_i}·(Q/q_i) mod p_j (exact up to + u·Q, 0 <= u < k).

    ``x``: (k, n) coefficient residues < q_i (uint32 or uint64); ``dc = DeviceConversion.of(conv)``.
    Returns (k', n) in x's dtype: one Shoup product per source limb, then one int8 BAT matmul
    (4k' × 4k) · (4k × n) and a recombination per target row."""
    _, jnp = _jax()
    k, kp = dc.q_from.shape[0], dc.q_to.shape[0]
    if np.ndim(x) != 2 or np.shape(x)[0] != k:
        raise ShapeError(f"convert_basis: x.shape={np.shape(x)}, expected ({k}, n)")
    dtype, n = _out_dtype(x), np.shape(x)[1]
    xh = _mul_shoup(_u32(x), dc.qhat_inv, dc.qhat_inv_shoup, dc.q_from)                  # < q_i < 2^31
    d = jnp.swapaxes(_digit_bytes(xh.astype(jnp.int32) - OFFSET), 1, 2).reshape(k * CHUNKS, n)
    z = _dot(dc.matrix[None], d[None])[0].reshape(CHUNKS, kp, n)
    y = _recombine(z, 0, dc.q_to, dc.scale[:, None, :], dc.scale_shoup[:, None, :], dc.bias)
    return y.astype(dtype)


# ------------------------------------------------------------------------------------------ backend
class JaxBackend(NTTBackend):
    """``backend="jax"``: the NTTBackend interface on JAX's default device (numpy uint64 in and out).

    Each call uploads the limbs, runs one jitted kernel (compiled once per shape) and copies the
    result back; device constants are cached per ``NTTTables`` / ``BasisConversion`` object.
    Bit-identical to the numba backend. Whole ciphertext operations without host round trips use the
    functional API directly (``crypto.ckks.jax_device``).
    """

    name = "jax"

    def __init__(self):
        jax, _ = _jax()
        self._jax = jax
        self._forward = (jax.jit(_ntt_first), jax.jit(_ntt_second))
        self._inverse = (jax.jit(_intt_first), jax.jit(_intt_second))
        self._convert = jax.jit(convert_basis)

    def forward(self, a, tables):
        return self._run(self._forward, a, tables)

    def inverse(self, a, tables):
        return self._run(self._inverse, a, tables)

    def _run(self, stages, a, tables):
        """Two jitted stages (each one int8 matmul with its reductions): on CPU XLA one program for both
        recomputes the middle reductions per output byte and runs 1.2-2x slower. Traced with 64-bit types
        enabled in this scope only (``mul_wide``'s widening multiply)."""
        a = limbs_input(a, tables)
        if not len(a):
            return a.copy()
        dt = DeviceTables.of(tables)
        with self._jax.enable_x64(True):
            out = stages[1](stages[0](a.astype(np.uint32), dt), dt)
        return np.asarray(out).astype(np.uint64)

    def convert_basis(self, x, conv):
        x = conversion_input(x, conv)
        if not len(conv.to_moduli) or not x.shape[1]:
            return np.zeros((len(conv.to_moduli), x.shape[1]), dtype=np.uint64)
        if not len(conv.from_moduli):
            return np.zeros((len(conv.to_moduli), x.shape[1]), dtype=np.uint64)
        conv_dev = DeviceConversion.of(conv)
        with self._jax.enable_x64(True):
            out = self._convert(x.astype(np.uint32), conv_dev)
        return np.asarray(out).astype(np.uint64)
