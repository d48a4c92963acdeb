"""Brute-force sums over the hypercube and summand values at a point, in galois GF(p^4) (test-only)."""
import numpy as np

from tests.reference.field_oracle import ext_to_galois, galois_to_ext, gf_ext
from tests.reference.mle_naive import naive_mle


def _as_galois_table(table):
    table = np.asarray(table)
    if table.ndim == 1:
        table = np.stack([table] + [np.zeros_like(table)] * 3, axis=1)
    return ext_to_galois(table)


def naive_sum(terms):
    """sum_x sum_t c_t prod_f f(x) entry by entry; terms = [(coefficient (4,), [tables])]."""
    gf = gf_ext()
    total = gf(0)
    for coefficient, factors in terms:
        tables = [_as_galois_table(f) for f in factors]
        c = ext_to_galois(coefficient)[0]
        for x in range(len(tables[0])):
            product = c
            for table in tables:
                product = product * table[x]
            total = total + product
    return galois_to_ext(total)[0]


def naive_summand_at(terms, point):
    """sum_t c_t prod_f f~(point) with each f~ a brute-force MLE evaluation."""
    gf = gf_ext()
    total = gf(0)
    for coefficient, factors in terms:
        product = ext_to_galois(coefficient)[0]
        for f in factors:
            product = product * ext_to_galois(naive_mle(f, point))[0]
        total = total + product
    return galois_to_ext(total)[0]
