"""Brute-force multilinear extensions in galois GF(p^4): sum_i t[i] prod_b (z_b if bit_b(i) else 1 - z_b)."""
import numpy as np

from tests.reference.field_oracle import ext_to_galois, galois_to_ext, gf_ext


def naive_eq_table(point):
    """[eq(point, bits(i)) for i < 2^k] by the product formula, one entry at a time; (2^k, 4)."""
    z = ext_to_galois(point)
    k = len(z)
    one = gf_ext()(1)
    out = []
    for i in range(2 ** k):
        value = one
        for b in range(k):
            value = value * (z[b] if (i >> b) & 1 else one - z[b])
        out.append(int(value))
    return galois_to_ext(gf_ext()(out))


def naive_mle(table, point):
    """t~(point) for a base (n,) or extension (n, 4) table, as a (4,) array."""
    table = np.asarray(table)
    values = ext_to_galois(table if table.ndim == 2 else np.stack([table] + [0 * table] * 3, axis=1))
    eq = ext_to_galois(naive_eq_table(point))
    return galois_to_ext(np.sum(values * eq))[0]
