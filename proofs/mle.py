"""Multilinear extensions over BabyBear, evaluated at F_p4 points.

Convention: a table t of length 2^k is indexed by i = sum_b x_b 2^b (x_0 is the least significant
bit), and its multilinear extension is  t~(z) = sum_i t[i] eq(z, bits(i)),  with
eq(z, x) = prod_b (z_b x_b + (1 - z_b)(1 - x_b))  (Thaler, "Proofs, Arguments, and Zero-Knowledge",
section 3.5). A point is an (k, 4) extension array with point[b] the value of x_b. A row-major
matrix A (I x K, both powers of two) therefore has the point concat(r_k, r_i).
Tables are base (2^k,) or extension (2^k, 4) uint64 arrays.
"""
from __future__ import annotations

import numpy as np

from . import field as F
from .errors import ProofError


def _elements(values) -> np.ndarray:
    """uint64 arrays as they are; other integer input reduced mod p; floats and canonical-range violations refused."""
    arr = np.asarray(values)
    if arr.dtype != np.uint64:
        return F.to_field(arr)
    if arr.size and arr.max() >= F.P:
        raise ProofError(f"mle: uint64 input has an entry {int(arr.max())} >= p = {F.P} (not a field element)")
    return arr


def num_vars_of(table) -> int:
    """k for a base (2^k,) or extension (2^k, 4) table; raises ProofError otherwise."""
    shape = np.shape(table)
    if len(shape) not in (1, 2) or (len(shape) == 2 and shape[1] != F.EXT_DEGREE):
        raise ProofError(f"mle: a table has shape (n,) or (n, 4), got {shape}")
    length = shape[0]
    if length < 1 or length & (length - 1):
        raise ProofError(f"mle: table length {length} is not a power of two")
    return length.bit_length() - 1


def is_ext(table) -> bool:
    """True for an extension table of shape (n, 4)."""
    return np.ndim(table) == 2


def pad_to_pow2(values, fill: int = 0) -> np.ndarray:
    """Flatten and pad a base (or extension, shape (n, 4)) array with ``fill`` to the next power of two length."""
    values = _elements(values)
    if values.ndim != 2:
        values = values.reshape(-1)
    n = values.shape[0]
    target = 1 << max(n - 1, 0).bit_length()
    if target == n:
        return values.copy()
    pad_shape = (target - n,) + values.shape[1:]
    padding = np.zeros(pad_shape, dtype=np.uint64)
    if values.ndim == 2:
        padding[:, 0] = fill % F.P
    else:
        padding[:] = fill % F.P
    return np.concatenate([values, padding])


def as_point(point, name: str = "point") -> np.ndarray:
    """A point as a (k, 4) F_p4 array; a (k,) array of base-field integers is lifted into F_p4."""
    point = _elements(point)
    if point.ndim == 1:
        return F.ext_from_base(point)
    if point.ndim != 2 or point.shape[1] != F.EXT_DEGREE:
        raise ProofError(f"mle: {name} has shape {point.shape}, expected (k, 4) extension or (k,) base elements")
    return point


def _check_point(point, k: int) -> np.ndarray:
    point = as_point(point)
    if point.shape != (k, F.EXT_DEGREE):
        raise ProofError(f"mle: point has shape {point.shape}, expected ({k}, 4): the table has {k} variables")
    return point


def eq_table(point) -> np.ndarray:
    """All 2^k values eq(point, bits(i)), shape (2^k, 4); built one variable at a time (2^k ext products)."""
    point = as_point(point)
    kernels = F.numba_kernels() if (1 << point.shape[0]) >= F.KERNEL_MIN_SIZE else None
    if kernels is not None:  # one in-place pass per variable
        out = np.empty((1 << point.shape[0], F.EXT_DEGREE), dtype=np.uint64)
        kernels.eq_table_split(np.ascontiguousarray(point), out)
        return out
    return _eq_table_numpy(point)


def _eq_table_numpy(point) -> np.ndarray:
    """:func:`eq_table` by whole-array numpy steps (the kernel's twin)."""
    table = F.ext_one((1,))
    for r in point:
        high = F.ext_mul(table, r)
        table = np.concatenate([F.ext_sub(table, high), high])  # x_b = 0 half, then x_b = 1 half
    return table


def eq_eval(a, b) -> np.ndarray:
    """eq(a, b) = prod_b (a_b b_b + (1 - a_b)(1 - b_b)) for two (k, 4) (or base (k,)) points, shape (4,)."""
    a, b = as_point(a, "a"), as_point(b, "b")
    if a.shape != b.shape:
        raise ProofError(f"eq_eval: points of shapes {a.shape} and {b.shape}")
    ab = F.ext_mul(a, b)
    one = F.ext_one(a.shape[:-1])
    # a b + (1 - a)(1 - b) = 1 - a - b + 2ab
    factors = F.ext_add(F.ext_sub(F.ext_sub(one, a), b), F.ext_add(ab, ab))
    result = [1, 0, 0, 0]
    for factor in factors.tolist():  # scalar products on Python ints: numpy's per-call overhead dominates here
        result = F.ext_mul_ints(result, factor)
    return np.array(result, dtype=np.uint64)


def fix_variable(table, r) -> np.ndarray:
    """Bind x_0 := r (an F_p4 element): t'[j] = t[2j] + r (t[2j+1] - t[2j]); returns an ext table of half length."""
    table = _elements(table)
    num_vars_of(table)
    if table.shape[0] < 2:
        raise ProofError("fix_variable: the table has no variable left to bind")
    r = _elements(r)
    if r.shape != (F.EXT_DEGREE,):
        raise ProofError(f"fix_variable: r has shape {r.shape}, expected (4,)")
    return fold(table, r)


def fold(table, r, in_place: bool = False) -> np.ndarray:
    """:func:`fix_variable` without input checks, for callers that hold valid tables (the sumcheck prover).
    ``in_place``: an F_p4 table the caller owns and drops is folded into its own first half (the kernel reads
    entries 2j, 2j + 1 before it writes entry j: no fresh pages)."""
    kernels = F.numba_kernels() if table.shape[0] >= F.KERNEL_MIN_SIZE else None
    if kernels is not None:
        inside = in_place and table.ndim == 2 and table.flags.c_contiguous and table.flags.writeable
        out = table[:table.shape[0] // 2] if inside else np.empty((table.shape[0] // 2, F.EXT_DEGREE), dtype=np.uint64)
        kernels.fold_add_planes(np.ascontiguousarray(table), np.ascontiguousarray(r, dtype=np.uint64),
                                F.ext_zero((1,)), out)
        return out
    return _fold_numpy(table, r)


def _fold_numpy(table, r) -> np.ndarray:
    """:func:`fold` with whole-table numpy operations (the numba kernels' twin)."""
    low, high = np.ascontiguousarray(table[0::2]), np.ascontiguousarray(table[1::2])
    diff = F.sub(high, low)
    if is_ext(table):
        return F.ext_add(low, F.ext_mul(diff, r))
    return F.ext_add(F.ext_from_base(low), F.ext_mul_base(r, diff))


def bind_high(table, point) -> np.ndarray:
    """Bind the *highest* len(point) variables to ``point``: for a row-major matrix, sum_i eq(point, i) A[i, :].

    Returns an ext table of length 2^(k - len(point)). Uses one exact limb-split matrix product.
    """
    table = _elements(table)
    k = num_vars_of(table)
    point = as_point(point)
    if point.shape[0] > k:
        raise ProofError(f"bind_high: point has {point.shape[0]} variables, table only {k}")
    weights = eq_table(point)  # (2^m, 4)
    rows = table.reshape((weights.shape[0], -1) + table.shape[1:])
    if is_ext(table):
        # sum_i w_i * rows_i with both factors in F_p4
        return F.ext_sum(F.ext_mul(weights[:, None, :], rows), axis=0)
    return F.matmul(weights.T, rows).T.copy()  # (4, 2^m) @ (2^m, cols) -> (cols, 4)


def mle_evaluate(table, point) -> np.ndarray:
    """t~(point) for a base or extension table of length 2^k and a (k, 4) point; shape (4,)."""
    table = _elements(table)
    k = num_vars_of(table)
    point = _check_point(point, k)
    if k == 0:
        return table[0].copy() if is_ext(table) else F.ext_from_base(table[0])
    return bind_high(table, point).reshape(F.EXT_DEGREE)


def mle_evaluate_by_folding(table, point) -> np.ndarray:
    """Same value as :func:`mle_evaluate`, by binding x_0, x_1, ... one at a time (a second route for tests)."""
    table = _elements(table)
    k = num_vars_of(table)
    point = _check_point(point, k)
    current = table if is_ext(table) else F.ext_from_base(table)
    for r in point:
        current = fix_variable(current, r)
    return current[0]
