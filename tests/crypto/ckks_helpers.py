"""Shared helpers of the CKKS and ring tests (the ``ctx`` fixture is in tests/crypto/conftest.py)."""
import numpy as np

from crypto import CKKSContext

ROTATIONS = [1, -3, 5, 7, 100]
_CONTEXTS: dict = {}


def context(preset: str = "TOY", seed: int = 7) -> CKKSContext:
    """One keygen per (preset, seed) per test session (keygen at N14+ takes seconds)."""
    key = (preset, seed)
    if key not in _CONTEXTS:
        _CONTEXTS[key] = CKKSContext.keygen(preset, rotations=ROTATIONS, conjugation=True, seed=seed)
    return _CONTEXTS[key]


def bits(expected, actual) -> float:
    """Worst-slot precision in bits."""
    err = np.abs(np.asarray(actual) - np.asarray(expected)).max()
    return float(-np.log2(err)) if err > 0 else 60.0


def uniform(rng, size, complex_values=False):
    x = rng.uniform(-1, 1, size)
    return x + 1j * rng.uniform(-1, 1, size) if complex_values else x


def random_residues(moduli, n, rng) -> np.ndarray:
    """An RNS polynomial of ``n`` coefficients, uniform modulo each of ``moduli`` (one row each, uint64)."""
    return np.array([rng.integers(0, q, n) for q in moduli], dtype=np.uint64)
