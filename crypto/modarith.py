"""Modular arithmetic for word-size RNS primes (q < 2^31).

Every residue fits 31 bits, every product of two residues fits 62 bits, so a uint64 holds any
product and the reductions below need only 32x32-bit multiplies (the CROSS form, Tong et al.,
"Leveraging ASIC AI Chips for Homomorphic Encryption", 2025).

Reference semantics are Python big-int ``%``; the tests check every kernel against it.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field

import numpy as np

from .errors import ParameterError

MAX_MODULUS_BITS = 31


def inv_mod(a: int, q: int) -> int:
    """a^-1 mod q (q prime or gcd(a, q) = 1)."""
    return pow(int(a) % q, -1, q)


#: Miller–Rabin with these bases is exact for every n < 3,215,031,751 > 2^31 (Pomerance, Selfridge,
#: Wagstaff, "The pseudoprimes to 25·10^9", Math. Comp. 1980; Jaeschke, Math. Comp. 1993).
_MR_BASES = (2, 3, 5, 7)


def is_prime_u31(q: int) -> bool:
    """Deterministic primality of 0 <= q < 2^31 (Miller–Rabin on ``_MR_BASES``); no sympy import (32 MB)."""
    q = int(q)
    if not 0 <= q < 2**MAX_MODULUS_BITS:
        raise ParameterError(f"q={q} not in [0, 2^{MAX_MODULUS_BITS})")
    if q < 2:
        return False
    for p in _MR_BASES:
        if q % p == 0:
            return q == p
    d, s = q - 1, 0
    while d % 2 == 0:
        d, s = d // 2, s + 1
    for a in _MR_BASES:
        x = pow(a, d, q)
        if x in (1, q - 1):
            continue
        for _ in range(s - 1):
            x = x * x % q
            if x == q - 1:
                break
        else:
            return False
    return True


def prime_factors(m: int) -> tuple[int, ...]:
    """The distinct prime factors of m >= 1, ascending (trial division: m < 2^31 here)."""
    m, out, p = int(m), [], 2
    while p * p <= m:
        if m % p == 0:
            out.append(p)
            while m % p == 0:
                m //= p
        p += 1 if p == 2 else 2
    if m > 1:
        out.append(m)
    return tuple(out)


def smallest_primitive_root(q: int) -> int:
    """The least g generating Z_q^* (q an odd prime): g^((q-1)/p) ≠ 1 for every prime p | q - 1."""
    exps = [(q - 1) // p for p in prime_factors(q - 1)]
    g = 2
    while any(pow(g, e, q) == 1 for e in exps):
        g += 1
    return g


def is_ntt_prime(q: int, n: int) -> bool:
    """True when q is a prime < 2^31 with q ≡ 1 (mod 2n), i.e. it has a primitive 2n-th root of unity."""
    return 2 < q < 2**MAX_MODULUS_BITS and q % (2 * n) == 1 and is_prime_u31(q)


#: primes tried by division before Miller–Rabin in :func:`is_prime_u31_array` (most composites stop here)
_TRIAL_PRIMES = (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61)


def is_prime_u31_array(q) -> np.ndarray:
    """:func:`is_prime_u31` of every entry of an integer array in [0, 2^31), vectorised (trial division by the
    primes below 64, then Miller–Rabin on the same bases as the scalar test; products of residues < 2^31 fit a
    uint64): a bool array of q's shape. Its scalar twin is the reference (tests)."""
    q = np.asarray(q, dtype=np.int64)
    if q.size and (q.min() < 0 or q.max() >= 2**MAX_MODULUS_BITS):
        raise ParameterError(f"q must lie in [0, 2^{MAX_MODULUS_BITS})")
    flat = q.reshape(-1).astype(np.uint64)
    result = np.isin(flat, np.array(_TRIAL_PRIMES, dtype=np.uint64))
    left = flat >= 2
    for p in _TRIAL_PRIMES:
        left &= flat % np.uint64(p) != 0
    index = np.flatnonzero(left)  # odd, no factor below 64: Miller–Rabin decides
    result[index] = _miller_rabin(flat[index])
    return result.reshape(q.shape)


def _miller_rabin(q: np.ndarray) -> np.ndarray:
    """Miller–Rabin on the bases ``_MR_BASES`` for odd uint64 q > 61 (exact below 2^31)."""
    one = np.uint64(1)
    d, s = q - one, np.zeros(q.shape, dtype=np.int64)
    even = (d & one) == 0
    while even.any():
        d, s = np.where(even, d >> one, d), s + even
        even = (d & one) == 0
    rounds = int(s.max()) if s.size else 0
    prime = np.ones(q.shape, dtype=bool)
    for a in _MR_BASES:
        x, base, e = np.ones_like(q), np.full_like(q, a), d.copy()
        while (e > 0).any():  # x = a^d mod q: square and multiply over the bits of d
            x = np.where((e & one) == one, x * base % q, x)
            base, e = base * base % q, e >> one
        passed = (x == one) | (x == q - one)
        for r in range(1, rounds):
            x = x * x % q
            passed |= (x == q - one) & (r < s)
        prime &= passed
    return prime


#: candidates :func:`ntt_primes_of_bits` tests at once, first and at most (the block doubles: a caller taking
#: one prime tests few, one enumerating thousands pays numpy's per-call cost rarely)
PRIME_BLOCK, MAX_PRIME_BLOCK = 256, 1 << 15


class _PrimeRun:
    """The primes of one (bits, n) found so far, largest first, and where the search goes on: shared by every
    :func:`ntt_primes_of_bits` of the process (choosing parameters walks the same runs again and again). Its
    blocks are appended under a lock; a reader sees a prefix that never changes."""

    def __init__(self, bits: int, n: int):
        self.step = 2 * n
        self.next = ((2**bits - 2) // self.step) * self.step + 1  # the largest candidate < 2^bits
        self.low, self.size, self.primes, self.lock = 2 ** (bits - 1), PRIME_BLOCK, [], threading.Lock()

    def extend(self) -> bool:
        """Test the next block of candidates; False when every candidate has been tested."""
        with self.lock:
            if self.next < self.low:
                return False
            count = min(self.size, (self.next - self.low) // self.step + 1)
            block = self.next - self.step * np.arange(count, dtype=np.int64)
            self.primes.extend(block[is_prime_u31_array(block)].tolist())
            self.next, self.size = self.next - self.step * count, min(2 * self.size, MAX_PRIME_BLOCK)
            return True


_RUNS: dict[tuple[int, int], _PrimeRun] = {}
_RUNS_LOCK = threading.Lock()


def ntt_primes_of_bits(bits: int, n: int, exclude=frozenset()):
    """Yield the primes q with bit length exactly ``bits`` and q ≡ 1 (mod 2n), largest first (candidates tested
    in growing blocks by :func:`is_prime_u31_array`, the primes found kept for the process: planning enumerates
    thousands of them, many times)."""
    if not 2 <= bits <= MAX_MODULUS_BITS:
        raise ParameterError(f"prime bit size {bits} not in [2, {MAX_MODULUS_BITS}]")
    key = (int(bits), int(n))
    with _RUNS_LOCK:
        run = _RUNS.get(key)
        if run is None:
            run = _RUNS[key] = _PrimeRun(*key)
    i = 0
    while True:
        if i < len(run.primes):
            candidate = run.primes[i]
            i += 1
            if candidate not in exclude:
                yield candidate
        elif not run.extend() and i >= len(run.primes):
            return


def find_ntt_primes(bits: int, count: int, n: int, exclude=frozenset()) -> tuple[int, ...]:
    """The ``count`` largest primes of exactly ``bits`` bits with q ≡ 1 (mod 2n), not in ``exclude``."""
    found = []
    for q in ntt_primes_of_bits(bits, n, exclude):
        found.append(q)
        if len(found) == count:
            return tuple(found)
    raise ParameterError(f"only {len(found)} primes of {bits} bits are ≡ 1 mod 2N={2 * n}; {count} requested")


def primitive_2n_root(q: int, n: int) -> int:
    """The primitive 2n-th root of unity ψ = g^((q-1)/2n) mod q, with g the smallest primitive root.

    Deterministic, so every NTT backend agrees on ψ.
    """
    if (q - 1) % (2 * n):
        raise ParameterError(f"modulus q={q} is not ≡ 1 mod 2N={2 * n}")
    g = smallest_primitive_root(q)
    return pow(g, (q - 1) // (2 * n), q)


@dataclass(frozen=True)
class Barrett:
    """Barrett reduction in the CROSS form for q < 2^31.

    k = ⌈log2 q⌉, m = ⌊2^(2k) / q⌋ (m < 2^(k+1) ≤ 2^32). For x < 2^(2k):
    t = ⌊⌊x / 2^(k-1)⌋ · m / 2^(k+1)⌋ underestimates ⌊x/q⌋ by at most 2, so r = x − t·q lies in [0, 3q).
    Both factors of ⌊x/2^(k-1)⌋ · m are below 2^32, so the product is one 32x32 -> 64-bit multiply and
    no intermediate exceeds 64 bits; conditional subtractions finish the reduction.
    """

    q: int
    k: int = field(init=False)
    m: int = field(init=False)

    def __post_init__(self):
        if not 2 <= self.q < 2**MAX_MODULUS_BITS:
            raise ParameterError(f"Barrett modulus q={self.q} not in [2, 2^{MAX_MODULUS_BITS})")
        k = (self.q - 1).bit_length()
        object.__setattr__(self, "k", k)
        object.__setattr__(self, "m", (1 << (2 * k)) // self.q)

    def reduce(self, x: np.ndarray) -> np.ndarray:
        """x mod q for uint64 x < 2^(2k) (any product of two residues)."""
        x = np.asarray(x)
        if x.size and (np.min(x) < 0 or int(np.max(x)) >= 1 << (2 * self.k)):
            raise ParameterError(f"Barrett input x in [{int(np.min(x))}, {int(np.max(x))}] outside "
                                 f"[0, 2^{2 * self.k}) for q={self.q} (k={self.k})")
        x = x.astype(np.uint64)
        q = np.uint64(self.q)
        xs = x >> np.uint64(self.k - 1)  # < 2^(k+1) <= 2^32: a 32x32-bit product with m below
        t = (xs * np.uint64(self.m)) >> np.uint64(self.k + 1)
        r = x - t * q  # in [0, 3q)
        r = np.where(r >= q, r - q, r)
        return np.where(r >= q, r - q, r)

    def mul(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """a·b mod q for residues a, b < q."""
        return self.reduce(np.asarray(a, dtype=np.uint64) * np.asarray(b, dtype=np.uint64))


def shoup_precompute(w: int | np.ndarray, q: int | np.ndarray) -> np.ndarray:
    """w' = ⌊w · 2^32 / q⌋, the Shoup companion of a constant w < q (vectorized over arrays)."""
    w = np.asarray(w, dtype=np.uint64)
    return (w << np.uint64(32)) // np.asarray(q, dtype=np.uint64)


def mul_shoup(x: np.ndarray, w: np.ndarray, w_shoup: np.ndarray, q) -> np.ndarray:
    """x·w mod q for x < 2^32 and a precomputed constant w (Shoup): r = x·w − ⌊x·w'/2^32⌋·q ∈ [0, 2q)."""
    x = np.asarray(x, dtype=np.uint64)
    q = np.asarray(q, dtype=np.uint64)
    t = (x * w_shoup) >> np.uint64(32)
    r = x * w - t * q  # wraps consistently mod 2^64; the true value is < 2q
    return np.where(r >= q, r - q, r)


def crt_compose(residues: np.ndarray, moduli) -> np.ndarray:
    """Chinese remaindering: the Python ints x ∈ [0, Q) with x ≡ residues[i] (mod moduli[i]).

    residues has shape (k, ...) ; returns an object array of shape (...). The exact big-int reference.
    """
    moduli = [int(q) for q in moduli]
    big_q = 1
    for q in moduli:
        big_q *= q
    res = np.asarray(residues)
    total = np.zeros(res.shape[1:], dtype=object)
    for r_i, q in zip(res, moduli):
        q_hat = big_q // q
        coef = q_hat * inv_mod(q_hat % q, q)
        total = total + r_i.astype(object) * coef
    return total % big_q


def centered(values: np.ndarray, modulus: int) -> np.ndarray:
    """Map residues in [0, modulus) to (−modulus/2, modulus/2] (object arrays of Python ints supported)."""
    v = np.asarray(values, dtype=object) % modulus
    return np.where(v > modulus // 2, v - modulus, v)
