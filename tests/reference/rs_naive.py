"""O(n^2) Reed-Solomon encoding over BabyBear: evaluations of the row polynomial at omega^j, Python ints."""
import numpy as np

from tests.reference.field_oracle import P, gf_base


def naive_dft(coeffs):
    """[sum_i c_i omega^(i j) mod p for j < n] with omega = g^((p-1)/n), g galois' primitive element of GF(p)."""
    n = len(coeffs)
    omega = pow(int(gf_base().primitive_element), (P - 1) // n, P)
    coeffs = [int(c) for c in coeffs]
    return np.array([sum(c * pow(omega, i * j, P) for i, c in enumerate(coeffs)) % P for j in range(n)],
                    dtype=np.uint64)


def naive_rs_encode(row, rate_inv):
    """Zero-pad the k coefficients to k * rate_inv and evaluate on the subgroup of that order."""
    return naive_dft(list(row) + [0] * (len(row) * (rate_inv - 1)))
