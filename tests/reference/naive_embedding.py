"""Naive canonical embedding: evaluate a real polynomial at ζ^(5^j), ζ = exp(iπ/N), in O(N²)."""
import numpy as np


def naive_embed(coeffs):
    """z_j = m(ζ^(5^j)) for j < N/2, by a Vandermonde product."""
    m = np.asarray(coeffs, dtype=np.float64)
    n = m.size
    exps = np.array([pow(5, j, 2 * n) for j in range(n // 2)], dtype=np.int64)
    powers = (exps[:, None] * np.arange(n)[None, :]) % (2 * n)
    return np.exp(1j * np.pi * powers / n) @ m


def naive_encode(values, n, scale):
    """Coefficients round(Δ·m) with m real, m(ζ^(5^j)) = z_j, by solving the full conjugate system."""
    z = np.zeros(n // 2, dtype=np.complex128)
    z[: len(values)] = values
    exps = np.array([pow(5, j, 2 * n) for j in range(n // 2)], dtype=np.int64)
    roots = np.concatenate([exps, (2 * n - exps) % (2 * n)])
    vander = np.exp(1j * np.pi * ((roots[:, None] * np.arange(n)[None, :]) % (2 * n)) / n)
    m = np.linalg.solve(vander, np.concatenate([z, np.conj(z)]))
    return np.round(m.real * scale).astype(np.int64)
