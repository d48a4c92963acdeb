"""Big-int twins of the key-switching kernels: Python ints, no RNS tricks."""
import math

import numpy as np


def centered_int(x: int, modulus: int) -> int:
    x %= modulus
    return x - modulus if x > modulus // 2 else x


def naive_centered_conversion(residues, from_moduli, to_moduli):
    """Row j: (the centered integer x with x ≡ residues[i] mod from_moduli[i]) mod to_moduli[j]."""
    big = math.prod(from_moduli)
    out = np.zeros((len(to_moduli), residues.shape[1]), dtype=np.uint64)
    for c in range(residues.shape[1]):
        x = sum(int(r) * (big // q) * pow(big // q, -1, q) for r, q in zip(residues[:, c], from_moduli))
        x = centered_int(x, big)
        for j, p in enumerate(to_moduli):
            out[j, c] = x % p
    return out


def naive_inner_product(digits, keys, moduli):
    """Σ_j digits[j] · keys[j] mod q row by row, with Python-int products."""
    n_digits, rows, n = digits.shape
    out = np.zeros((rows, n), dtype=object)
    for j in range(n_digits):
        out = out + digits[j].astype(object) * keys[j].astype(object)
    q = np.array(moduli, dtype=object)[:, None]
    return (out % q).astype(np.uint64)


def naive_divide_round(values, divisor: int, modulus: int):
    """round(x / divisor) mod modulus for centered Python ints x (ties away from zero do not occur here)."""
    return [((2 * v + divisor) // (2 * divisor)) % modulus for v in values]
