"""Samplers for RLWE: ternary and sparse-ternary secrets, rounded Gaussian errors, uniform residues.

Randomness comes from the operating system's CSPRNG (``os.urandom``) unless a seed is given; a seed
(tests only) switches to a SHAKE-256 stream of that seed, so runs are reproducible.

``expand_uniform`` is the public expansion of a uniform key part from a 32-byte seed (the seed itself is
drawn from the sampler): a key stores its seed instead of its uniform half.
"""
from __future__ import annotations

import hashlib
import math
import os

import numpy as np

from .errors import ParameterError


class _Shake256Stream:
    """Deterministic byte stream SHAKE-256(seed || counter), for reproducible tests only."""

    def __init__(self, seed: int | bytes):
        if isinstance(seed, bytes):
            self._seed = seed
        elif isinstance(seed, (int, np.integer)) and not isinstance(seed, bool) and -2**255 <= seed < 2**255:
            self._seed = int(seed).to_bytes(32, "little", signed=True)
        else:
            raise ParameterError(f"seed={seed!r} must be None (OS CSPRNG), bytes or an integer in [-2^255, 2^255)")
        self._counter = 0

    def __call__(self, size: int) -> bytes:
        block = hashlib.shake_256(b"hezk/sampler" + self._seed + self._counter.to_bytes(8, "little"))
        self._counter += 1
        return block.digest(size)


SEED_BYTES = 32
_EXPAND_DOMAIN = b"hezk/uniform-key-part/v1"


def _row_stream(seed: bytes, index: int, q: int, n: int, out: np.ndarray | None = None) -> np.ndarray:
    """The first n words w < floor(2^32/q)·q of the SHAKE-128 stream of (seed, index), reduced mod q
    (into ``out``, n uint32, when given).

    A longer digest has the shorter one as its prefix, so the result does not depend on the read size."""
    xof = hashlib.shake_128(_EXPAND_DOMAIN + seed + index.to_bytes(8, "little"))
    accepted = (2**32 // q) * q                    # w < accepted is kept: a fraction > 2/3 for q < 2^31
    limit = np.uint32(accepted - 1)
    words = math.ceil((n + 8 * math.sqrt(n) + 64) * 2**32 / accepted)   # short with probability < 2^-40
    while True:
        w = np.frombuffer(xof.digest(4 * words), dtype="<u4")
        kept = np.compress(w <= limit, w)      # 4x faster than w[w <= limit], the same words
        if kept.size >= n:
            return np.remainder(kept[:n], np.uint32(q), out=out)
        words *= 2


def expand_uniform(seed: bytes, moduli, n: int, count: int = 1, out: np.ndarray | None = None) -> np.ndarray:
    """Shape (count, len(moduli), n) uint32: entry [j, i] uniform in [0, moduli[i]), a deterministic
    function of the public ``seed`` (SHAKE-128 (FIPS 202) with rejection sampling, one stream per row:
    the expansion Kyber uses for its public matrix).  Regenerating a key's uniform part from its seed
    gives the same array on every machine.  ``out``: a C-contiguous uint32 array of that shape to fill."""
    if not isinstance(seed, bytes) or len(seed) != SEED_BYTES:
        raise ParameterError(f"seed must be {SEED_BYTES} bytes, got {type(seed).__name__} "
                             f"of length {len(seed) if isinstance(seed, bytes) else '?'}")
    moduli = [int(q) for q in moduli]
    for q in moduli:
        if not 2 <= q < 2**31:
            raise ParameterError(f"modulus {q} not in [2, 2^31)")
    shape = (count, len(moduli), n)
    if out is None:
        out = np.empty(shape, dtype=np.uint32)
    elif out.shape != shape or out.dtype != np.uint32 or not out.flags.c_contiguous:
        raise ParameterError(f"out must be a C-contiguous uint32 array of shape {shape}")
    for j in range(count):
        for i, q in enumerate(moduli):
            _row_stream(seed, j * len(moduli) + i, q, n, out[j, i])
    return out


class Sampler:
    """All randomness of key generation and encryption. ``Sampler()`` reads the OS CSPRNG."""

    def __init__(self, seed: int | bytes | None = None):
        self.seeded = seed is not None
        self._bytes = os.urandom if seed is None else _Shake256Stream(seed)

    def random_bytes(self, size: int) -> bytes:
        return self._bytes(size)

    def _uint64(self, count: int) -> np.ndarray:
        return np.frombuffer(self._bytes(8 * count), dtype=np.uint64).copy()

    def ternary(self, n: int, hamming_weight: int | None = None) -> np.ndarray:
        """Coefficients in {-1, 0, 1}: uniform (P = 1/3 each), or exactly ``hamming_weight`` nonzero ±1."""
        if hamming_weight is None:
            out = np.empty(0, dtype=np.int64)
            while out.size < n:  # rejection: a byte < 255 is uniform mod 3
                b = np.frombuffer(self._bytes(n + 16), dtype=np.uint8)
                out = np.concatenate([out, (b[b < 255] % 3).astype(np.int64) - 1])
            return out[:n]
        if not 0 < hamming_weight <= n:
            raise ParameterError(f"hamming_weight={hamming_weight} not in [1, {n}]")
        positions = self._permutation(n)[:hamming_weight]
        signs = (np.frombuffer(self._bytes(hamming_weight), dtype=np.uint8) & 1).astype(np.int64) * 2 - 1
        out = np.zeros(n, dtype=np.int64)
        out[positions] = signs
        return out

    def gaussian(self, n: int, sigma: float = 3.2) -> np.ndarray:
        """Rounded Gaussian of standard deviation sigma, tails cut at 6·sigma (Box–Muller on CSPRNG bits).
        sigma up to 2^49 (the noise flooding of shared decryptions): 6·sigma stays exact in float64."""
        if isinstance(sigma, bool) or not isinstance(sigma, (int, float, np.integer, np.floating)) \
                or not 0 < sigma <= 2.0**49:
            raise ParameterError(f"sigma={sigma!r} must be a number in (0, 2^49]")
        u = (self._uint64(2 * n) >> np.uint64(11)).astype(np.float64) * 2.0**-53
        u1, u2 = u[:n], u[n:]
        radius = np.sqrt(-2.0 * np.log1p(-u1))  # 1 - u1 in (0, 1]
        values = np.rint(sigma * radius * np.cos(2.0 * math.pi * u2)).astype(np.int64)
        bound = int(math.ceil(6 * sigma))
        return np.clip(values, -bound, bound)

    def uniform(self, moduli, n: int) -> np.ndarray:
        """Shape (len(moduli), n): row i uniform in [0, moduli[i]) (rejection sampling on 32-bit words)."""
        rows = []
        for q in moduli:
            limit = (2**32 // q) * q
            got = np.empty(0, dtype=np.uint64)
            while got.size < n:
                w = np.frombuffer(self._bytes(4 * (n + n // 4 + 8)), dtype=np.uint32).astype(np.uint64)
                got = np.concatenate([got, w[w < limit] % np.uint64(q)])
            rows.append(got[:n])
        return np.array(rows, dtype=np.uint64).reshape(len(rows), n)

    def _permutation(self, n: int) -> np.ndarray:
        """A uniformly random permutation of range(n) (Fisher–Yates driven by unbiased CSPRNG draws)."""
        keys = self._uint64(n)
        return np.argsort(keys, kind="stable")
