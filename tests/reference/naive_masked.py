"""Libra-masked extensions by their definition, in galois GF(p^4) (test-only twin of proofs.masked)."""
import numpy as np

from tests.reference.field_oracle import ext_to_galois, galois_to_ext, gf_ext
from tests.reference.mle_naive import naive_mle


def naive_masked_value(table, masks, point):
    """f^(point) = f~(point) + sum_i l_i point_i (1 - point_i), term by term."""
    gf = gf_ext()
    z, l = ext_to_galois(np.asarray(point)), ext_to_galois(np.asarray(masks))
    total = ext_to_galois(naive_mle(table, point)[None])[0]
    for i in range(len(z)):
        total = total + l[i] * z[i] * (gf(1) - z[i])
    return galois_to_ext(total)[0]


def naive_round_message(left, right, prefix, degree=4):
    """s(X) for X = 0..degree: sum over Boolean suffixes x of f^(prefix, X, x) g^(prefix, X, x).

    ``left``/``right`` are (table, masks) pairs; every summand is one full masked evaluation (no folding)."""
    n = left[1].shape[0]
    j = len(prefix)
    out = []
    for x in range(degree + 1):
        total = gf_ext()(0)
        for suffix in range(1 << (n - j - 1)):
            bits = [np.array([(suffix >> b) & 1, 0, 0, 0], dtype=np.uint64) for b in range(n - j - 1)]
            point = np.array(list(prefix) + [np.array([x, 0, 0, 0], dtype=np.uint64)] + bits, dtype=np.uint64)
            a = ext_to_galois(naive_masked_value(*left, point))[0]
            b = ext_to_galois(naive_masked_value(*right, point))[0]
            total = total + a * b
        out.append(int(total))
    return galois_to_ext(gf_ext()(out))
