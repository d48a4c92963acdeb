"""Noise-flooded decryption: decryptions that may be shared with another party (IND-CPA-D).

An exact CKKS decryption returns m + e, where ct = (c0, c1) satisfies c0 + c1·s = m + e (mod Q): whoever
sees it (and the ciphertext) knows c1·s = m + e - c0 and solves for the secret key s; one decryption of a
complex ciphertext (two of a real one: the second of ct·X^(N/2), whose slots are i times the first's) is
enough (Li and Micciancio, "On the Security of Homomorphic Encryption on Approximate Numbers", EUROCRYPT
2021).  The fix is to add, before decoding, fresh noise E much larger than e: the result m + e + E is then
statistically close to m + E, which the secret key does not shape.

Sizing follows OpenFHE's ``NOISE_FLOODING_DECRYPT`` (Li, Micciancio, Schultz, Sorrell, "Securing Approximate
Homomorphic Encryption Using Differential Privacy", CRYPTO 2022): a rounded Gaussian of standard deviation

    σ = sqrt(12 τ) · 2^(s/2) · t,     log2 σ = ``flood_bits`` = log2 t + s/2 + log2 sqrt(12 τ),

with t a bound on the ciphertext's noise (``noise_bits`` = log2 t), s the statistical security (an adversary
succeeds with probability at most 2^-s; OpenFHE's default 30) and τ the number of decryptions of related
ciphertexts the other party sees (default 1).

The noise bound of a real ciphertext is read from its decryption, as OpenFHE's noise estimation does: a real
message has real slots, so the imaginary part of the decoded slots is noise alone (its rms r, through the
canonical embedding, gives the coefficients' standard deviation r·Δ/sqrt(N/2); t = 6 of those, rounded up
to a whole bit so that the size of the flood tells next to nothing about e).  A complex ciphertext has no
such witness: give ``noise_bits`` (``measure_noise_bits`` on a run whose result is known) or ``flood_bits``.

Precision cost: each coefficient gains independent noise of standard deviation 2^f, so each slot's real
part gains noise of standard deviation 2^f·sqrt(N/2)/Δ: ``flooded_precision_bits`` = log2 Δ - f -
log2(N/2)/2 bits are left (against the standard deviation; the worst of many slots is about 2 bits less).
Against the unflooded result that is s/2 + log2(6 sqrt(12 τ)) ≈ 19.4 bits (s = 30, τ = 1) fewer: a result at
scale 2^50 keeps about 20 bits, one at scale 2^30 none.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np

from ..errors import HEWarning, ParameterError

STATISTICAL_SECURITY = 30  # bits: OpenFHE's default statistical security for NOISE_FLOODING_DECRYPT
NOISE_BOUND_SIGMAS = 6.0   # the noise bound t, in standard deviations of the measured noise
MAX_FLOOD_BITS = 49        # 6σ stays below 2^52: exact in float64 and int64


class FloodingPrecisionWarning(HEWarning):
    """Flooding leaves (almost) no precision: the flood is as large as the scale (raise the scale)."""


@dataclass(frozen=True)
class Flooded:
    """A flooded decryption: the ``values``, the noise bound it was sized for (``noise_bits``, None when
    ``flood_bits`` was given), the flood's log2 standard deviation (``flood_bits``) and the bits of precision
    the flood leaves (``precision_bits``, against its standard deviation in one slot)."""

    values: np.ndarray
    noise_bits: float | None
    flood_bits: float
    precision_bits: float


def _check_count(name: str, value, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not low <= value <= high:
        raise ParameterError(f"{name}={value!r} must be an integer in [{low}, {high}]")
    return int(value)


def _check_bits(name: str, value, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) \
            or not math.isfinite(value) or not 0 <= value <= high:
        raise ParameterError(f"{name}={value!r} must be a number in [0, {high:g}]")
    return float(value)


def flood_bits_for(noise_bits: float, statistical_security: int = STATISTICAL_SECURITY, queries: int = 1) -> float:
    """log2 of the flood's standard deviation for a noise bound of 2^noise_bits: noise_bits + s/2 +
    log2 sqrt(12 τ) (OpenFHE's σ = sqrt(12 τ) 2^(s/2) t)."""
    noise_bits = _check_bits("noise_bits", noise_bits, MAX_FLOOD_BITS)
    s = _check_count("statistical_security", statistical_security, 1, 128)
    tau = _check_count("queries", queries, 1, 1 << 30)
    return noise_bits + s / 2 + 0.5 * math.log2(12 * tau)


def flooded_precision_bits(flood_bits: float, scale: float, n: int) -> float:
    """Bits left in a slot's real part after a flood of standard deviation 2^flood_bits per coefficient:
    log2 scale - flood_bits - log2(n/2)/2 (-log2 of the added slot noise's standard deviation)."""
    return math.log2(scale) - float(flood_bits) - 0.5 * math.log2(n / 2)


def imaginary_noise_bits(slots: np.ndarray, scale: float, n: int) -> float:
    """A noise bound (log2, rounded up to a whole bit) of a REAL ciphertext from its decoded slots: the
    imaginary parts are noise alone; rms r in a slot means coefficient noise of standard deviation
    r·scale/sqrt(n/2), and the bound is ``NOISE_BOUND_SIGMAS`` of those (at least 2^1)."""
    rms = float(np.sqrt(np.mean(np.square(np.imag(slots))))) if np.size(slots) else 0.0
    sigma = rms * scale / math.sqrt(n / 2)
    return float(max(1, math.ceil(math.log2(max(NOISE_BOUND_SIGMAS * sigma, 2.0)))))


def flood(coeffs: np.ndarray, flood_bits: float, sampler) -> np.ndarray:
    """``coeffs`` plus a fresh rounded Gaussian of standard deviation 2^flood_bits per coefficient, drawn
    from ``sampler`` (the OS CSPRNG unless the context was seeded for a test)."""
    flood_bits = _check_bits("flood_bits", flood_bits, MAX_FLOOD_BITS)
    noise = sampler.gaussian(coeffs.shape[0], sigma=2.0**flood_bits)
    return np.asarray(coeffs, dtype=np.float64) + noise.astype(np.float64)


def plan_flood(flood_bits, noise_bits, is_complex: bool, slots, scale: float, n: int,
               statistical_security: int = STATISTICAL_SECURITY, queries: int = 1) -> tuple:
    """(noise_bits, flood_bits) for one decryption: ``flood_bits`` as given (a number), else sized from
    ``noise_bits`` (given, or measured in the imaginary slots of a real ciphertext)."""
    if flood_bits is not None and flood_bits != "auto":
        return None, _check_bits("flood_bits", flood_bits, MAX_FLOOD_BITS)
    if noise_bits is None:
        if is_complex:
            raise ParameterError("flood_bits='auto' on a complex ciphertext needs noise_bits= (log2 of a bound on "
                                 "its noise, e.g. CKKSContext.measure_noise_bits on a run whose result is known) "
                                 "or an explicit flood_bits=: its slots hold no noise-only imaginary part")
        noise_bits = imaginary_noise_bits(slots, scale, n)
    bits = flood_bits_for(noise_bits, statistical_security, queries)
    if bits > MAX_FLOOD_BITS:
        raise ParameterError(f"the flood for noise_bits={noise_bits:g} would need flood_bits={bits:.1f}, above the "
                             f"limit {MAX_FLOOD_BITS}: the result is too noisy to share safely")
    return float(noise_bits), bits


def warn_if_imprecise(precision_bits: float) -> None:
    if precision_bits < 1.0:
        warnings.warn(f"the flooded decryption keeps {precision_bits:.1f} bits of precision (the flood is as large "
                      f"as the scale): encrypt at a larger scale (e.g. 2^50) or lower statistical_security",
                      FloodingPrecisionWarning, stacklevel=4)
