"""galois oracles for the BabyBear field and its quartic extension F_p[X]/(X^4 - 11) (test-only)."""
import functools

import galois
import numpy as np

P = 2013265921
W = 11


@functools.cache
def gf_base():
    return galois.GF(P)


@functools.cache
def gf_ext():
    """GF(p^4) with modulus X^4 - 11. X is passed as a nominal primitive element to skip galois' search;
    the oracle only multiplies and inverts, it never takes discrete logarithms."""
    base = gf_base()
    modulus = galois.Poly([1, 0, 0, 0, P - W], field=base)
    return galois.GF(P ** 4, irreducible_poly=modulus, primitive_element=galois.Poly([1, 0], field=base),
                     verify=False)


def ext_to_galois(arr):
    """(n, 4) uint64 coefficient array -> galois GF(p^4) array (integer repr sum_k c_k p^k)."""
    arr = np.asarray(arr).reshape(-1, 4)
    ints = [sum(int(c) * P ** k for k, c in enumerate(row)) for row in arr]
    return gf_ext()(ints)


def galois_to_ext(values):
    """galois GF(p^4) array -> (n, 4) uint64 coefficient array."""
    out = []
    for v in np.atleast_1d(values):
        v = int(v)
        out.append([(v // P ** k) % P for k in range(4)])
    return np.array(out, dtype=np.uint64)
