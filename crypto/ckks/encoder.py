"""CKKS encoder: slots <-> integer polynomial coefficients through the canonical embedding.

A real polynomial m(X) of degree < N is identified with its values at the primitive 2N-th roots of
unity ζ^(5^j) (j < N/2, ζ = exp(iπ/N)); the other half of the roots are their conjugates.  Because
ζ^(5^j · N/2) = i, m(ζ^(5^j)) = Σ_{k<N/2} (m_k + i·m_{k+N/2}) · ζ^(5^j·k), an evaluation of a complex
polynomial of degree < N/2 at N/2 points, done in O(N log N) by the "special FFT" over the orbit of 5
(Cheon, Kim, Kim, Song, "Homomorphic encryption for arithmetic of approximate numbers", ASIACRYPT 2017,
and the HEAAN implementation of the bootstrapping paper, Cheon, Han, Kim, Kim, Song, EUROCRYPT 2018).

Encoding is decoding inverted, scaled by Δ and rounded: coefficients = round(Δ · σ^-1(z)).
"""
from __future__ import annotations

import numpy as np

from ..errors import ParameterError, ScaleError, ShapeError

# Above this magnitude float64 rounding is no longer exact to the integer, and int64 may overflow:
# larger coefficients are returned as Python ints (exact conversions of the float64 values).
_INT64_SAFE = 2.0 ** 62


def as_slot_vector(values, slots: int, name: str = "values") -> tuple[np.ndarray, bool]:
    """Validate user values into a complex vector of length ``slots`` (zero-padded).

    Returns (vector, is_complex).  Raises ShapeError for too many values or more than one axis and
    ParameterError for non-numeric, NaN or infinite values.
    """
    try:
        arr = np.asarray(values)
    except Exception as exc:  # ragged lists and the like
        raise ShapeError(f"{name} cannot be read as a numeric vector: {exc}") from None
    if arr.dtype == object or not (np.issubdtype(arr.dtype, np.number) or arr.dtype == bool):
        raise ParameterError(f"{name} has dtype {arr.dtype}; expected real or complex numbers")
    if arr.ndim == 0:
        arr = arr.reshape(1)
    if arr.ndim != 1:
        raise ShapeError(f"{name} has shape {arr.shape}; expected a 1-D vector of at most {slots} values")
    if arr.size > slots:
        raise ShapeError(f"{name} has {arr.size} values; the slot count is {slots}")
    is_complex = bool(np.iscomplexobj(arr))
    vec = arr.astype(np.complex128)
    finite = np.isfinite(vec)
    if not finite.all():
        bad = int(np.flatnonzero(~finite)[0])
        raise ParameterError(f"{name}[{bad}]={arr[bad]} is not finite; every value must be finite")
    out = np.zeros(slots, dtype=np.complex128)
    out[: arr.size] = vec
    return out, is_complex


def slot_period(z: np.ndarray) -> int:
    """The smallest power-of-two period of the slot vector ``z`` (its length when none is shorter): halves
    compared exactly."""
    d = len(z)
    while d > 1 and np.array_equal(z[:d // 2], z[d // 2:d]):
        d //= 2
    return d


def subring_period(z: np.ndarray) -> int | None:
    """The period d in which a vector of all the slots encodes in the subring Z[X^(N/2d)] (the smallest power of
    two, at least 2, below half the slots), or None when it takes the full encoding."""
    d = slot_period(z)
    return max(d, 2) if d < len(z) // 2 else None


def encoding_period(values, slots: int) -> int | None:
    """The period in which ``Evaluator.encode`` encodes ``values`` in the subring (``subring_period``): only a
    vector of all ``slots`` entries (a shorter one is zero-padded, not periodic); None for the full encoding."""
    return subring_period(np.asarray(values).ravel()) if np.size(values) == slots else None


def check_scale(scale, name: str = "scale") -> float:
    """A scale must be a finite float > 1."""
    try:
        value = float(scale)
    except (TypeError, ValueError):
        raise ScaleError(f"{name}={scale!r} is not a number") from None
    if not np.isfinite(value) or value <= 1.0:
        raise ScaleError(f"{name}={scale!r} must be a finite number > 1")
    return value


class CKKSEncoder:
    """Canonical embedding for ring degree ``n`` (a power of two): ``n // 2`` complex slots.

    Holds the rotation group 5^j mod 2N and per-stage twiddles of the special FFT; immutable.
    """

    def __init__(self, n: int):
        if n < 4 or n & (n - 1):
            raise ParameterError(f"n={n} must be a power of two >= 4")
        self.n = n
        self.slots = n // 2
        m = 2 * n
        self._rot_group = np.array([pow(5, j, m) for j in range(self.slots)], dtype=np.int64)
        self._forward_twiddles, self._inverse_twiddles = [], []
        length = 2
        while length <= self.slots:
            half, ring = length // 2, 4 * length
            exponent = (self._rot_group[:half] % ring) * (m // ring)
            self._forward_twiddles.append(np.exp(2j * np.pi * exponent / m))
            self._inverse_twiddles.append(np.exp(-2j * np.pi * exponent / m))
            length *= 2
        # the orbit 5^j mod 2N is {4r + 1: r < slots} (5 generates the residues 1 mod 4), so with w = u ζ^k the
        # embedding is a length-slots DFT read at r_j = (5^j - 1) / 4 (numpy's FFT in place of the special one)
        self._orbit_index = (self._rot_group - 1) // 4
        self._twist = np.exp(2j * np.pi * np.arange(self.slots) / m)
        for table in self._forward_twiddles + self._inverse_twiddles + [self._orbit_index, self._twist]:
            table.setflags(write=False)

    # -- the canonical embedding ------------------------------------------------------------------
    def embed(self, u: np.ndarray) -> np.ndarray:
        """z_j = Σ_{k<slots} u_k ζ^(5^j k): evaluate a complex polynomial on the orbit of 5. With 5^j = 4 r_j + 1,
        z_j = Σ_k (u_k ζ^k) ω^(r_j k), ω = ζ^4 a primitive slots-th root: one FFT of u ζ^k, read at r_j."""
        w = np.asarray(u, dtype=np.complex128) * self._twist
        return (np.fft.ifft(w) * self.slots)[self._orbit_index]

    def embed_inverse(self, z: np.ndarray) -> np.ndarray:
        """The u with embed(u) = z: z placed at r_j, one inverse FFT, the twist ζ^-k undone."""
        w = np.empty(self.slots, dtype=np.complex128)
        w[self._orbit_index] = z
        return np.fft.fft(w) / self.slots * np.conj(self._twist)

    # -- slots <-> coefficients ------------------------------------------------------------------
    def coefficients(self, values, scale: float) -> np.ndarray:
        """Real coefficients Δ · σ^-1(z) before rounding (float64, length n)."""
        z, _ = as_slot_vector(values, self.slots)
        scale = check_scale(scale)
        with np.errstate(over="ignore", invalid="ignore"):     # overflow gives inf, refused by encode
            u = self.embed_inverse(z) * scale
        return np.concatenate([u.real, u.imag])

    def encode(self, values, scale: float, modulus_bits: float | None = None) -> np.ndarray:
        """Integer coefficients round(Δ · σ^-1(z)), length n.

        int64 when every |coefficient| < 2^62, else an object array of Python ints.  With
        ``modulus_bits`` (log2 of the ciphertext modulus) raises ScaleError when a coefficient
        would not fit the centered range of that modulus.
        """
        coeffs = np.round(self.coefficients(values, scale))
        largest = float(np.max(np.abs(coeffs))) if coeffs.size else 0.0
        if not np.isfinite(largest):
            raise ScaleError(f"scale={scale:.6g} (2^{np.log2(scale):.2f}) times values up to "
                             f"{np.max(np.abs(as_slot_vector(values, self.slots)[0])):.6g} overflows float64")
        if modulus_bits is not None and largest > 0 and np.log2(largest) + 1 >= modulus_bits:
            raise ScaleError(
                f"scale={scale:.6g} (2^{np.log2(scale):.2f}) makes a coefficient of 2^{np.log2(largest):.2f}, "
                f"which does not fit the modulus of 2^{modulus_bits:.2f} (limit: |coefficient| < modulus/2)")
        if largest < _INT64_SAFE:
            return coeffs.astype(np.int64)
        return np.array([int(c) for c in coeffs], dtype=object)

    def decode(self, coeffs, scale: float) -> np.ndarray:
        """Slots z = σ(m) / Δ from real coefficients m (float64 or ints, length n); complex vector."""
        m = np.asarray(coeffs, dtype=np.float64)
        if m.shape != (self.n,):
            raise ShapeError(f"coeffs has shape {m.shape}; expected ({self.n},)")
        u = (m[: self.slots] + 1j * m[self.slots:]) / check_scale(scale)
        return self.embed(u)
