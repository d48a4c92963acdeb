"""Reed–Solomon encoding over F_p: the radix-2 NTT and the row encodings Ligero and Basefold share.

A row of k coefficients encodes to its polynomial's values on the 2-adic subgroup of order k * rate_inv
(zero-padded coefficients, one NTT): a code of rate 1/rate_inv and relative distance 1 - 1/rate_inv.
"""
from __future__ import annotations

import functools

import numpy as np

from .. import field as F
from ..errors import ProofError

NTT_NUMBA_MIN_SIZE = 1 << 16  #: NTT inputs with at least this many entries use the numba kernel


def bit_reverse(n: int) -> np.ndarray:
    """The bit-reversal permutation of n = 2^k, built by doubling: rev_2m = [2 rev_m, 2 rev_m + 1]."""
    order = np.zeros(1, dtype=np.int64)
    while order.size < n:
        order = np.concatenate([2 * order, 2 * order + 1])
    return order


def powers(base: int, count: int) -> np.ndarray:
    """[base^0, ..., base^(count-1)] mod p by doubling (log count vectorized steps)."""
    out = np.ones(1, dtype=np.uint64)
    while out.size < count:
        out = np.concatenate([out, F.mul(out, np.uint64(pow(base, out.size, F.P)))])
    return out[:count]


def ntt(values, inplace: bool = False) -> np.ndarray:
    """Evaluate each row of ``values`` (..., n) as a polynomial at omega^j, j < n (omega of order n); radix-2 DIT.

    ``inplace`` lets a caller that owns a contiguous ``values`` have it overwritten (no copy, for large tables)."""
    values = np.asarray(values)
    if values.dtype != np.uint64 or values.ndim == 0:
        raise ProofError(f"ntt: values must be a uint64 array of field elements, got dtype={values.dtype} "
                         f"shape={values.shape}")
    n = values.shape[-1]
    if n < 1 or n & (n - 1) or n > 1 << F.TWO_ADICITY:
        raise ProofError(f"ntt: length {n} is not a power of two <= 2^{F.TWO_ADICITY}")
    # numba only for commitment-sized inputs: a verifier's few short rows should not pay numba's import
    kernels = F.numba_kernels() if values.size >= NTT_NUMBA_MIN_SIZE else None
    if kernels is not None:
        rows = values.reshape(-1, n) if inplace and values.flags.c_contiguous else values.reshape(-1, n).copy()
        kernels.rs_encode(rows, rows, *_kernel_tables(n))
        return rows.reshape(values.shape)
    omega = pow(F.GENERATOR, (F.P - 1) // n, F.P)
    return ntt_numpy(values, powers(omega, max(n // 2, 1)))


@functools.lru_cache(maxsize=32)
def stage_twiddles(n: int) -> tuple:
    """The twiddles of each radix-2 stage of an n-point NTT, contiguous: for half = 1, 2, ..., n/2, omega^(j n /
    (2 half)) for j < half at offset half - 1 (n - 1 in all, uint32), and Shoup's quotients floor(t 2^32 / p) of
    each (the compiled transform's 32-bit products, :func:`proofs._kernels.rs_encode`). Read-only, cached."""
    omega = pow(F.GENERATOR, (F.P - 1) // n, F.P)
    table = powers(omega, max(n // 2, 1))
    parts = [table[:: n // (2 * half)][:half] for half in (1 << s for s in range(n.bit_length() - 1))]
    twiddles = np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint64)
    quotients = (twiddles << np.uint64(32)) // np.uint64(F.P)   # t < p < 2^31: t 2^32 < 2^63, exact in uint64
    out = (twiddles.astype(np.uint32), quotients.astype(np.uint32))
    for array in out:
        array.flags.writeable = False
    return out


@functools.lru_cache(maxsize=32)
def _kernel_tables(n: int) -> tuple:
    """(twiddles, quotients, bitrev of the radix, bitrev of n / radix) for :func:`proofs._kernels.rs_encode`."""
    radix = min(16, n)   # proofs._kernels.NTT_RADIX (not imported here: numba loads only when a kernel runs)
    out = stage_twiddles(n) + (bit_reverse(radix), bit_reverse(n // radix))
    for array in out:
        array.flags.writeable = False
    return out


def ntt_numpy(values, twiddles) -> np.ndarray:
    """The same transform with numpy: one vectorized butterfly stage per level (the numba kernel's twin)."""
    n = values.shape[-1]
    batch = values.shape[:-1]
    a = values[..., bit_reverse(n)]
    half = 1
    while half < n:
        blocks = a.reshape(batch + (n // (2 * half), 2, half))
        even = blocks[..., 0, :]
        odd = F.mul(blocks[..., 1, :], twiddles[:: n // (2 * half)][:half])
        a = np.stack([F.add(even, odd), F.sub(even, odd)], axis=-2).reshape(batch + (n,))
        half *= 2
    return a


def rs_encode(rows, rate_inv: int) -> np.ndarray:
    """Reed-Solomon encode each row (..., k) -> (..., k * rate_inv): zero-pad the coefficients, then NTT."""
    rows = np.asarray(rows, dtype=np.uint64)
    return rs_encode_rows(rows, rows.shape[-1] * rate_inv)


def rs_encode_rows(rows, length: int) -> np.ndarray:
    """RS-encode base rows (..., w) to ``length`` symbols: zero-pad the coefficients, NTT."""
    rows = np.asarray(rows, dtype=np.uint64)
    w = rows.shape[-1]
    if length < w or length & (length - 1) or length > 1 << F.TWO_ADICITY:
        raise ProofError(f"rs_encode_rows: length {length} is not a power of two in [{w}, 2^{F.TWO_ADICITY}]")
    kernels = F.numba_kernels() if rows.size and rows.size // w * length >= NTT_NUMBA_MIN_SIZE else None
    if kernels is not None:  # the zero padding read as zeros by the kernel: no padded copy
        out = np.empty(rows.shape[:-1] + (length,), dtype=np.uint64)
        kernels.rs_encode(np.ascontiguousarray(rows).reshape(-1, w), out.reshape(-1, length), *_kernel_tables(length))
        return out
    padded = np.zeros(rows.shape[:-1] + (length,), dtype=np.uint64)
    padded[..., :w] = rows
    return ntt(padded, inplace=True)
