"""Naive einsum: a Python loop over every assignment of the indices (the twin of tensor_ops.einsum).

Independent of numpy.einsum: parses only explicit, ellipsis-free expressions and applies size-1
broadcasting of labelled axes by indexing with 0.
"""
import itertools

import numpy as np


def naive_einsum(expr: str, *operands) -> np.ndarray:
    lhs, out = expr.replace(" ", "").split("->")
    terms = lhs.split(",")
    sizes = {}
    for term, op in zip(terms, operands):
        for c, d in zip(term, np.shape(op)):
            sizes[c] = max(sizes.get(c, 1), d)
    letters = sorted(sizes)
    result = np.zeros(tuple(sizes[c] for c in out), dtype=np.result_type(*operands, np.float64))
    for values in itertools.product(*[range(sizes[c]) for c in letters]):
        env = dict(zip(letters, values))
        prod = 1.0
        for term, op in zip(terms, operands):
            op = np.asarray(op)
            idx = tuple(env[c] if op.shape[a] > 1 else 0 for a, c in enumerate(term))
            prod = prod * op[idx]
        result[tuple(env[c] for c in out)] += prod
    return result


def naive_roll(vector, k):
    """rot(x, k)[p] = x[(p + k) mod n]: the left rotation of CKKS slots."""
    n = len(vector)
    return np.array([vector[(p + k) % n] for p in range(n)])
