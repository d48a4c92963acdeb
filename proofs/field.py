"""BabyBear prime field and its quartic extension, as vectorized numpy arrays.

Base field: p = 2^31 - 2^27 + 1 = 15 * 2^27 + 1 (two-adicity 27, so NTTs of any length up to 2^27).
Elements are ``np.uint64`` arrays of canonical residues in [0, p); a product of two residues is
below 2^62, so it never overflows a uint64 and one ``% p`` reduces it.

Extension: F_p4 = F_p[X]/(X^4 - 11) (as in Plonky3's BabyBear quartic extension; X^4 - 11 is
irreducible since 11 is a quadratic non-residue mod p and p = 1 mod 4, see tests). Elements are
uint64 arrays of shape (..., 4) holding the coefficients of 1, X, X^2, X^3. All verifier challenges
come from this field, so one challenge hits a fixed nonzero polynomial of degree d with probability
at most d / p^4 ~ d * 2^-123.6 (Schwartz-Zippel).
"""
from __future__ import annotations

import functools
import math
import os
import struct

import numpy as np

from .errors import FieldError, ProofRejected

P = 2013265921  #: the BabyBear prime 2^31 - 2^27 + 1
TWO_ADICITY = 27  #: p - 1 = 15 * 2^27
GENERATOR = 31  #: a generator of the multiplicative group F_p^*
W = 11  #: extension modulus: X^4 = W
EXT_DEGREE = 4
EXT_BITS = EXT_DEGREE * math.log2(P)  #: log2 of the extension field size, ~123.6

BROADCAST_KERNEL_MIN_SIZE = 1 << 10  #: add/sub/mul of broadcast operands below this many entries: numpy
SMALL_EXT_ROWS = 3  #: ext_mul of equal (k, 4) shapes, k <= this, on Python ints
NUMBA_MIN_SIZE = 1 << 4  #: arrays with at least this many entries use the numba kernels (when numba imports):
# a compiled call beats numpy's dozen whole-array steps per F_p4 product from a few dozen entries on (measured on
# hiding LeNet-5 proofs: verifier 78 -> 65 ms, prover 0.38 -> 0.34 s from 2^15 to 2^4); every proof already
# imports numba for its tables (KERNEL_MIN_SIZE)
#: tables of at least this many entries take the single-pass kernels of multi-step loops (eq tables, folds, the
#: relation prover's rounds): one compiled pass beats the numpy twin's dozens of whole-array calls down to the
#: smallest tables (measured on hiding LeNet-5 proofs: prover 0.53 s at 64 entries, 0.40 s at 2); the numpy
#: twins stay, tested against the kernels
KERNEL_MIN_SIZE = 1 << 1
#: matrix products up to this many multiply-adds run as one compiled pass (measured 1.4-10x faster than the 16-bit
#: limb BLAS product from 2^15 to 2^26 of them with 4-16 columns; beyond, BLAS's blocking may win)
MATMUL_KERNEL_MAX = 1 << 28

_P = np.uint64(P)
_W = np.uint64(W)
_MASK16 = np.uint64(0xFFFF)


# ----------------------------------------------------------------------------------------- kernels
@functools.cache
def numba_kernels():
    """The compiled kernels of :mod:`proofs._kernels`, or None without numba (the numpy formulas here then run)."""
    try:
        from . import _kernels
    except ImportError:
        return None
    return _kernels


def _long_pair(a, b):
    """(kernels, a, b) as C-contiguous uint64 arrays of one (broadcast) shape with at least NUMBA_MIN_SIZE
    entries, or None (short inputs, other dtypes, no numba: the numpy formulas run)."""
    if getattr(a, "size", 1) * getattr(b, "size", 1) < NUMBA_MIN_SIZE:  # bounds the broadcast size: short
        return None
    a = np.asarray(a) if isinstance(a, np.generic) else a
    b = np.asarray(b) if isinstance(b, np.generic) else b
    if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)) or a.dtype != np.uint64 or b.dtype != np.uint64:
        return None
    if a.shape != b.shape:
        try:
            shape = np.broadcast_shapes(a.shape, b.shape)
        except ValueError:
            return None  # numpy raises its own error on the slow path
        if math.prod(shape) < NUMBA_MIN_SIZE:
            return None
        a, b = np.broadcast_to(a, shape), np.broadcast_to(b, shape)
    kernels = numba_kernels() if a.size >= NUMBA_MIN_SIZE else None
    return None if kernels is None else (kernels, np.ascontiguousarray(a), np.ascontiguousarray(b))


def _elementwise(kernel_name: str, a, b):
    """Run a one-pass elementwise kernel on a long pair, or return None (also for a broadcast of fewer than
    BROADCAST_KERNEL_MIN_SIZE entries: numpy's two or three ufuncs cost less than the kernel's broadcast copies)."""
    shape_a, shape_b = getattr(a, "shape", ()), getattr(b, "shape", ())
    if shape_a != shape_b:
        try:
            if math.prod(np.broadcast_shapes(shape_a, shape_b)) < BROADCAST_KERNEL_MIN_SIZE:
                return None
        except ValueError:
            return None  # the caller's numpy path raises the FieldError
    pair = _long_pair(a, b)
    if pair is None:
        return None
    kernels, a, b = pair
    out = np.empty_like(a)
    getattr(kernels, kernel_name)(a.reshape(-1), b.reshape(-1), out.reshape(-1))
    return out


# ----------------------------------------------------------------------------------------- base field
def _elements(x):
    """Operands of the field operations: uint64 arrays pass as they are (assumed canonical: no per-call scan);
    other integer input (Python ints, lists, signed arrays) is reduced by :func:`to_field`; floats raise FieldError."""
    if isinstance(x, (np.ndarray, np.uint64)) and x.dtype == np.uint64:
        return x
    return to_field(x)


def _check_broadcast(name: str, a, b) -> None:
    """FieldError (not numpy's ValueError) when the operands' shapes do not broadcast."""
    if np.shape(a) != np.shape(b):
        try:
            np.broadcast_shapes(np.shape(a), np.shape(b))
        except ValueError:
            raise FieldError(f"{name}: operand shapes {np.shape(a)} and {np.shape(b)} do not broadcast") from None


def to_field(values) -> np.ndarray:
    """Integers (Python ints, signed or unsigned numpy integers, any size) -> canonical residues mod p."""
    arr = np.asarray(values)
    if arr.dtype == object:
        if not all(isinstance(v, (int, np.integer)) for v in arr.flat):
            raise FieldError("to_field: values must be integers; got non-integer entries in an object array")
        return (arr % P).astype(np.uint64)
    if arr.dtype == bool:
        return arr.astype(np.uint64)
    if not np.issubdtype(arr.dtype, np.integer):
        raise FieldError(f"to_field: values must have an integer dtype, got dtype={arr.dtype}")
    if np.issubdtype(arr.dtype, np.signedinteger):
        return np.mod(arr.astype(np.int64), np.int64(P)).astype(np.uint64)
    out = arr.astype(np.uint64)
    return out % _P if out.size and out.max() >= P else out      # residues already: a copy, no division


def to_signed(values) -> np.ndarray:
    """Canonical residues -> centered representatives in [-(p-1)/2, (p-1)/2] as int64."""
    arr = np.asarray(values, dtype=np.uint64)
    signed = arr.astype(np.int64)
    return np.where(signed > P // 2, signed - P, signed)


#: Entries from which :func:`is_canonical` checks in compiled pieces on the threads (a whole-table check of every
#: sumcheck factor was a serial numpy pass)
CANONICAL_KERNEL_MIN = 1 << 16


def is_canonical(values) -> bool:
    """True when ``values`` is a uint64 array with every entry in [0, p)."""
    arr = np.asarray(values)
    if arr.dtype != np.uint64:
        return False
    kernels = numba_kernels() if arr.size >= CANONICAL_KERNEL_MIN and arr.flags.c_contiguous else None
    if kernels is not None:
        return kernels.all_canonical(arr.reshape(-1))
    return bool(np.all(arr < _P))


def add(a, b) -> np.ndarray:
    """a + b mod p (inputs canonical)."""
    a, b = _elements(a), _elements(b)
    fast = _elementwise("add", a, b)
    if fast is not None:
        return fast
    _check_broadcast("add", a, b)
    s = np.add(a, b, dtype=np.uint64)
    return np.minimum(s, np.subtract(s, _P))  # s - p wraps to a huge value when s < p (ufuncs wrap silently)


def sub(a, b) -> np.ndarray:
    """a - b mod p (inputs canonical)."""
    a, b = _elements(a), _elements(b)
    fast = _elementwise("sub", a, b)
    if fast is not None:
        return fast
    _check_broadcast("sub", a, b)
    d = np.subtract(a, b, dtype=np.uint64)
    return np.minimum(d, np.add(d, _P))  # d + p wraps to d + p - 2^64 < p exactly when a < b


def neg(a) -> np.ndarray:
    """-a mod p."""
    return sub(np.uint64(0), a)


def mul(a, b) -> np.ndarray:
    """a * b mod p (the product is < 2^62, exact in uint64)."""
    a, b = _elements(a), _elements(b)
    fast = _elementwise("mul", a, b)
    if fast is not None:
        return fast
    _check_broadcast("mul", a, b)
    return np.multiply(a, b, dtype=np.uint64) % _P


def _square_and_multiply(base, exponent: int, one, multiply):
    result = one
    while exponent:
        if exponent & 1:
            result = multiply(result, base)
        exponent >>= 1
        if exponent:
            base = multiply(base, base)
    return result


def pow_(a, exponent: int) -> np.ndarray:
    """a^exponent mod p, elementwise, by square-and-multiply; negative exponents invert first."""
    exponent = int(exponent)
    base = _elements(a)
    if exponent < 0:
        return pow_(inv(base), -exponent)
    return _square_and_multiply(base, exponent, np.ones_like(base), mul)


def inv(a) -> np.ndarray:
    """a^-1 = a^(p-2) mod p (Fermat), elementwise; raises FieldError on zero."""
    arr = _elements(a)
    if np.any(arr == 0):
        raise FieldError("inv: a field element is 0, which has no inverse")
    if arr.size <= 16:  # a few scalars: Python's pow beats 31 vectorized squarings
        return np.array([pow(int(x), P - 2, P) for x in arr.flat], dtype=np.uint64).reshape(arr.shape)
    kernels = numba_kernels() if arr.size >= NUMBA_MIN_SIZE else None
    if kernels is not None:  # Montgomery's batch trick: one inversion, 3 products per element
        flat = np.ascontiguousarray(arr).reshape(-1)
        out = np.empty_like(flat)
        kernels.batch_inv(flat, out)
        return out.reshape(arr.shape)
    return pow_(arr, P - 2)


batch_inv = inv  # vectorized Fermat for short arrays, Montgomery's batch trick (numba) for long ones


def sum_(a, axis=None) -> np.ndarray:
    """Sum mod p along ``axis`` (exact for up to 2^33 terms)."""
    return np.sum(_elements(a), axis=axis, dtype=np.uint64) % _P


def dot(a, b) -> np.ndarray:
    """Inner product over the last axis mod p."""
    return sum_(mul(a, b), axis=-1)


def matmul(a, b) -> np.ndarray:
    """Exact matrix product mod p of canonical matrices ``a`` (m, n) and ``b`` (n, k).

    Each operand is split into 16-bit limbs, a = a1 * 2^16 + a0, so that limb products are < 2^32
    and float64 BLAS sums of up to 2^20 of them stay below 2^53 (exact); the inner dimension is
    processed in chunks of 2^20.
    """
    a = _elements(a)
    b = _elements(b)
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise FieldError(f"matmul: shapes {a.shape} and {b.shape} are not (m, n) and (n, k)")
    kernels = numba_kernels() if a.shape[0] * a.shape[1] * b.shape[1] <= MATMUL_KERNEL_MAX else None
    if kernels is not None:
        out = np.empty((b.shape[1], a.shape[0]), dtype=np.uint64)
        kernels.transposed_matmul(np.ascontiguousarray(a.T), np.ascontiguousarray(b), out)  # (a b)^T = b^T a^T
        return np.ascontiguousarray(out.T)
    return limb_matmul(a, b)


def limb_matmul(a, b) -> np.ndarray:
    """:func:`matmul` by float64 BLAS on 16-bit limbs (its twin, and the path for products past MATMUL_KERNEL_MAX)."""
    m, k = a.shape[0], b.shape[1]
    out = np.zeros((m, k), dtype=np.uint64)
    chunk = 1 << 20
    for start in range(0, a.shape[1], chunk):
        a_part, b_part = a[:, start:start + chunk], b[start:start + chunk]
        # one BLAS call: [a0; a1] @ [b0, b1] holds the four limb products as blocks
        a_limbs = np.concatenate([a_part & _MASK16, a_part >> np.uint64(16)]).astype(np.float64)
        b_limbs = np.concatenate([b_part & _MASK16, b_part >> np.uint64(16)], axis=1).astype(np.float64)
        blocks = (a_limbs @ b_limbs).astype(np.uint64)
        low, high = blocks[:m, :k] % _P, blocks[m:, k:] % _P
        middle = (blocks[:m, k:] + blocks[m:, :k]) % _P
        part = add(add(low, (middle << np.uint64(16)) % _P), mul(high, np.uint64((1 << 32) % P)))
        out = add(out, part)
    return out


_RANDOM_CHUNK = 1 << 16  #: candidates per OS draw in random_elements


def random_elements(shape, seed=None) -> np.ndarray:
    """Uniform field elements; from the OS CSPRNG unless an explicit ``seed`` (tests only) is given."""
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    count = int(np.prod(shape, dtype=np.int64))
    if seed is not None:
        return np.random.default_rng(seed).integers(0, P, size=shape, dtype=np.uint64)
    out = np.empty(count, dtype=np.uint64)
    kernels = numba_kernels() if count >= NUMBA_MIN_SIZE else None
    found = 0
    while found < count:  # 31 random bits per candidate, kept below p (rejection sampling: uniform; 6% rejected),
        need = count - found  # drawn in chunks that stay in cache (no table-sized temporaries)
        draw = np.frombuffer(os.urandom(4 * min(need + need // 8 + 16, _RANDOM_CHUNK)), dtype="<u4")
        if kernels is not None:
            found = kernels.keep_below_p(draw, out, found)
        else:
            kept = draw & np.uint32(0x7FFFFFFF)
            kept = kept[kept < np.uint32(P)][:need]
            out[found:found + kept.size] = kept
            found += kept.size
    return out.reshape(shape)


# ------------------------------------------------------------------------------------ quartic extension
def ext_zero(shape=()) -> np.ndarray:
    """The zero of F_p4, broadcast to ``shape`` (result shape ``shape + (4,)``)."""
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    return np.zeros(shape + (EXT_DEGREE,), dtype=np.uint64)


def ext_one(shape=()) -> np.ndarray:
    """The one of F_p4, broadcast to ``shape``."""
    out = ext_zero(shape)
    out[..., 0] = 1
    return out


def ext_from_base(a) -> np.ndarray:
    """Embed base-field elements (shape S) into F_p4 (shape S + (4,))."""
    a = _elements(a)
    out = np.zeros(a.shape + (EXT_DEGREE,), dtype=np.uint64)
    out[..., 0] = a
    return out


def ext_add(a, b) -> np.ndarray:
    """a + b in F_p4."""
    return add(a, b)


def ext_sub(a, b) -> np.ndarray:
    """a - b in F_p4."""
    return sub(a, b)


def ext_neg(a) -> np.ndarray:
    """-a in F_p4."""
    return neg(a)


def ext_mul_base(a, b) -> np.ndarray:
    """Extension element(s) ``a`` (..., 4) times base element(s) ``b`` (...)."""
    return mul(a, _elements(b)[..., None])


def ext_mul(a, b) -> np.ndarray:
    """a * b in F_p[X]/(X^4 - W): schoolbook product, X^4 folded to W.

    Sums of up to four unreduced products stay below 4 (p-1)^2 < 2^64, so one reduction per
    output coefficient (plus one for the W-folded part) suffices.
    """
    a = _elements(a)
    b = _elements(b)
    if a.shape == b.shape == (EXT_DEGREE,):
        return _ext_mul_single(a.tolist(), b.tolist())
    if a.shape == b.shape and a.ndim == 2 and a.shape[1] == EXT_DEGREE and a.shape[0] <= SMALL_EXT_ROWS:
        return np.array([ext_mul_ints(x, y) for x, y in zip(a.tolist(), b.tolist())],  # numpy's 20 calls: ~40 us
                        dtype=np.uint64).reshape(a.shape)
    if a.shape[-1:] != (EXT_DEGREE,) or b.shape[-1:] != (EXT_DEGREE,):
        raise FieldError(f"ext_mul: operands must have shape (..., 4), got {a.shape} and {b.shape}")
    _check_broadcast("ext_mul", a, b)
    fast = _ext_mul_long(a, b)
    if fast is not None:
        return fast
    a0, a1, a2, a3 = a[..., 0], a[..., 1], a[..., 2], a[..., 3]
    b0, b1, b2, b3 = b[..., 0], b[..., 1], b[..., 2], b[..., 3]
    high0 = (a1 * b3 + a2 * b2 + a3 * b1) % _P
    high1 = (a2 * b3 + a3 * b2) % _P
    high2 = a3 * b3 % _P
    c0 = (a0 * b0 + _W * high0) % _P
    c1 = (a0 * b1 + a1 * b0 + _W * high1) % _P
    c2 = (a0 * b2 + a1 * b1 + a2 * b0 + _W * high2) % _P
    c3 = (a0 * b3 + a1 * b2 + a2 * b1 + a3 * b0) % _P
    return np.stack([c0, c1, c2, c3], axis=-1)


def _ext_mul_long(a, b):
    """numba path of :func:`ext_mul` for long (broadcast) operands; None for short ones or without numba."""
    if a.ndim == 2 and b.shape == (1, EXT_DEGREE):     # (n, 4) x (1, 4): the scalar kernel, no broadcast copy
        b = b[0]
    elif b.ndim == 2 and a.shape == (1, EXT_DEGREE):
        a = a[0]
    if b.shape == (EXT_DEGREE,) and a.ndim > 1:
        a, b = b, a
    if a.shape == (EXT_DEGREE,) and b.size >= NUMBA_MIN_SIZE and b.shape[-1] == EXT_DEGREE:
        kernels = numba_kernels()
        if kernels is None:
            return None
        b = np.ascontiguousarray(b)
        out = np.empty_like(b)
        kernels.ext_mul_scalar(b.reshape(-1, EXT_DEGREE), a, out.reshape(-1, EXT_DEGREE))
        return out
    if a.shape[-1:] != (EXT_DEGREE,) or b.shape[-1:] != (EXT_DEGREE,):
        return None
    if a.ndim == b.ndim == 3 and a.shape[0] == 1 and b.shape[1] == 1:
        a, b = b, a
    if a.ndim == b.ndim == 3 and a.shape[1] == 1 and b.shape[0] == 1 and a.shape[0] * b.shape[1] >= NUMBA_MIN_SIZE:
        kernels = numba_kernels()  # outer product (J, 1, 4) x (1, E, 4): no broadcast copies
        if kernels is not None:
            out = np.empty((a.shape[0], b.shape[1], EXT_DEGREE), dtype=np.uint64)
            kernels.ext_outer(np.ascontiguousarray(a[:, 0]), np.ascontiguousarray(b[0]), out.reshape(-1, EXT_DEGREE))
            return out
    pair = _long_pair(a, b)
    if pair is None:
        return None
    kernels, a, b = pair
    out = np.empty_like(a)
    kernels.ext_mul(a.reshape(-1, EXT_DEGREE), b.reshape(-1, EXT_DEGREE), out.reshape(-1, EXT_DEGREE))
    return out


def ext_outer_into(u, v, out) -> np.ndarray:
    """out[j E + e] = u[j] v[e] for F_p4 vectors u (J, 4) and v (E, 4), written into ``out`` (J E, 4), a view
    (the numba kernel splits the rows over ``hezk.threads``; numpy's broadcast product otherwise)."""
    u, v = _elements(u).reshape(-1, EXT_DEGREE), _elements(v).reshape(-1, EXT_DEGREE)
    if out.shape != (u.shape[0] * v.shape[0], EXT_DEGREE):
        raise FieldError(f"ext_outer_into: out has shape {out.shape}; expected ({u.shape[0] * v.shape[0]}, 4)")
    kernels = numba_kernels() if out.shape[0] >= NUMBA_MIN_SIZE and out.flags.c_contiguous else None
    if kernels is not None:
        kernels.ext_outer(np.ascontiguousarray(u), np.ascontiguousarray(v), out)
    else:
        out[...] = ext_mul(u[:, None, :], v[None, :, :]).reshape(-1, EXT_DEGREE)
    return out


def ext_mul_ints(a, b) -> list:
    """One F_p4 product on coefficient lists of Python ints (scalar verifier work, where numpy's overhead dominates)."""
    a0, a1, a2, a3 = a
    b0, b1, b2, b3 = b
    return [(a0 * b0 + W * (a1 * b3 + a2 * b2 + a3 * b1)) % P,
            (a0 * b1 + a1 * b0 + W * (a2 * b3 + a3 * b2)) % P,
            (a0 * b2 + a1 * b1 + a2 * b0 + W * a3 * b3) % P,
            (a0 * b3 + a1 * b2 + a2 * b1 + a3 * b0) % P]


def _ext_mul_single(a, b) -> np.ndarray:
    return np.array(ext_mul_ints(a, b), dtype=np.uint64)


def ext_square(a) -> np.ndarray:
    """a^2 in F_p4."""
    return ext_mul(a, a)


def ext_inv(a) -> np.ndarray:
    """a^-1 in F_p4 via the tower F_p2 = F_p[Y]/(Y^2 - W), Y = X^2.

    Writing a = A + B X with A, B in F_p2, (A + B X)(A - B X) = A^2 - Y B^2 = N lies in F_p2, and
    N^-1 = conj(N) / norm(N) needs one base-field inversion; so a^-1 = (A - B X) N^-1.
    Raises FieldError when some element is zero.
    """
    a = _elements(a)
    a0, a1, a2, a3 = a[..., 0], a[..., 1], a[..., 2], a[..., 3]
    # N = A^2 - Y B^2 with A = a0 + a2 Y, B = a1 + a3 Y
    n0 = sub(add(mul(a0, a0), mul(_W, mul(a2, a2))), mul(_W, mul(2 * a1 % _P, a3)))
    n1 = sub(mul(2 * a0 % _P, a2), add(mul(a1, a1), mul(_W, mul(a3, a3))))
    norm = sub(mul(n0, n0), mul(_W, mul(n1, n1)))
    if np.any(norm == 0):
        raise FieldError("ext_inv: an extension element is 0, which has no inverse")
    norm_inv = inv(norm)
    n_inv = np.zeros_like(a)
    n_inv[..., 0] = mul(n0, norm_inv)
    n_inv[..., 2] = mul(neg(n1), norm_inv)
    conjugate = np.stack([a0, neg(a1), a2, neg(a3)], axis=-1)
    return ext_mul(conjugate, n_inv)


def ext_pow(a, exponent: int) -> np.ndarray:
    """a^exponent in F_p4 by square-and-multiply (negative exponents invert first)."""
    exponent = int(exponent)
    base = _elements(a)
    if exponent < 0:
        return ext_pow(ext_inv(base), -exponent)
    return _square_and_multiply(base, exponent, ext_one(base.shape[:-1]), ext_mul)


def ext_sum(a, axis=0) -> np.ndarray:
    """Sum of extension elements along ``axis`` (must not be the coefficient axis)."""
    a = _elements(a)
    if axis is None:
        a, axis = a.reshape(-1, EXT_DEGREE), 0
    if axis % a.ndim == a.ndim - 1:
        raise FieldError(f"ext_sum: axis={axis} is the coefficient axis of shape {a.shape}")
    return sum_(a, axis=axis)


def ext_dot(a, b) -> np.ndarray:
    """Sum over the first axis of a * b, where a is (n, 4) and b is (n, 4) or base (n,)."""
    b = _elements(b)
    products = ext_mul(a, b) if b.ndim == np.ndim(a) else ext_mul_base(a, b)
    return ext_sum(products, axis=0)


def ext_eq(a, b) -> bool:
    """True when the extension arrays are equal everywhere (same shape)."""
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and bool(np.array_equal(a, b))


def ext_random(shape=(), seed=None) -> np.ndarray:
    """Uniform F_p4 elements (OS CSPRNG unless ``seed`` is given, for tests)."""
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    return random_elements(shape + (EXT_DEGREE,), seed=seed)


# ------------------------------------------------------------------------------------ serialization
def elements_to_bytes(arr) -> bytes:
    """A canonical uint64 array as bytes: ndim (u8), each dimension (u32), then entries as little-endian u32."""
    arr = np.asarray(arr, dtype=np.uint64)
    header = struct.pack("<B", arr.ndim) + b"".join(struct.pack("<I", n) for n in arr.shape)
    return header + arr.astype("<u4").tobytes()


MAX_ARRAY_ELEMENTS = 1 << 28  #: most entries one serialized array may declare (1 GiB of u32 words)


class ByteReader:
    """Reads serialized proof parts; every malformed input (short, oversized, non-canonical) raises ProofRejected.

    Nothing is allocated from a declared size before the size is checked: array shapes against
    :data:`MAX_ARRAY_ELEMENTS` and the bytes left, item counts against the bytes left (:meth:`count`).
    """

    def __init__(self, data, where: str):
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise ProofRejected(f"expected bytes, got {type(data).__name__}", where)
        try:
            self._data = bytes(data)
        except (TypeError, ValueError, BufferError) as exc:  # e.g. a non-contiguous memoryview
            raise ProofRejected(f"unreadable buffer: {exc}", where) from None
        self._pos = 0
        self.where = where

    @property
    def remaining(self) -> int:
        """Bytes not read yet."""
        return len(self._data) - self._pos

    def raw(self, n: int) -> bytes:
        if n < 0 or n > self.remaining:
            raise ProofRejected(f"truncated: need {n} bytes at offset {self._pos}, have {self.remaining}", self.where)
        out = self._data[self._pos:self._pos + n]
        self._pos += n
        return out

    def header(self, magic: bytes, version: int) -> None:
        """Consume and check a magic string and a one-byte version."""
        if self.raw(len(magic)) != magic:
            raise ProofRejected("bad magic bytes", self.where)
        found = self.uint(1)
        if found != version:
            raise ProofRejected(f"unsupported version {found} (expected {version})", self.where)

    def uint(self, size: int) -> int:
        """An unsigned little-endian integer of ``size`` bytes."""
        return int.from_bytes(self.raw(size), "little")

    def count(self, size: int, item_bytes: int, name: str, limit: int | None = None) -> int:
        """An item count (``size``-byte unsigned) for a loop or a block whose items take at least ``item_bytes``
        each: rejected when count * item_bytes exceeds the bytes left or the count exceeds ``limit``."""
        value = self.uint(size)
        if limit is not None and value > limit:
            raise ProofRejected(f"{name}={value} > {limit}", self.where)
        if value * item_bytes > self.remaining:
            raise ProofRejected(f"truncated: {name}={value} items of at least {item_bytes} bytes, "
                                f"{self.remaining} bytes left", self.where)
        return value

    def elements(self, ndim: int) -> np.ndarray:
        """An array written by :func:`elements_to_bytes` with exactly ``ndim`` dimensions.

        The shape is checked in Python integers (no overflow) before anything is allocated: the product of
        the dimensions, zero ones counted as 1 (what numpy's shape arithmetic sees), is at most
        :data:`MAX_ARRAY_ELEMENTS`, and 4 bytes per entry must remain.
        """
        found = self.uint(1)
        if found != ndim:
            raise ProofRejected(f"array with {found} dimensions, expected {ndim}", self.where)
        shape = tuple(self.uint(4) for _ in range(ndim))
        span = math.prod(max(n, 1) for n in shape)
        if span > MAX_ARRAY_ELEMENTS:
            raise ProofRejected(f"array of shape {shape} spans {span} entries (zero dimensions counted as 1) "
                                f"> MAX_ARRAY_ELEMENTS={MAX_ARRAY_ELEMENTS}", self.where)
        count = math.prod(shape)
        if 4 * count > self.remaining:
            raise ProofRejected(f"truncated: array of shape {shape} needs {4 * count} bytes, "
                                f"{self.remaining} left", self.where)
        arr = np.frombuffer(self.raw(4 * count), dtype="<u4").astype(np.uint64).reshape(shape)
        if not is_canonical(arr):
            raise ProofRejected("non-canonical field element (>= p)", self.where)
        return arr

    def finish(self) -> None:
        """Reject trailing bytes."""
        if self._pos != len(self._data):
            raise ProofRejected(f"{len(self._data) - self._pos} trailing bytes", self.where)
