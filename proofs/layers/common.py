"""Shared pieces of the layer proofs: claims, padded tables, small extension-field helpers.

Table layout (the MLE convention of :mod:`proofs.mle`, x_0 least significant): a (rows, cols) matrix
padded to powers of two is the table ``index = col + cols * row``, so its point is concat(r_col, r_row).
Feature axes are padded to at least 2 (so every matmul sumcheck has a variable); the batch axis to
the next power of two.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import field as F
from ..errors import ProofRejected
from ..mle import as_point, eq_table


@dataclass(frozen=True)
class Claim:
    """The claim table~(point) = value: ``point`` is (k, 4) in F_p4, ``value`` is (4,)."""

    point: np.ndarray
    value: np.ndarray


def padded(n: int, minimum: int = 2) -> int:
    """The power of two >= max(n, minimum)."""
    return 1 << (max(int(n), minimum) - 1).bit_length()


def log2(n: int) -> int:
    return int(n).bit_length() - 1


def pad_matrix(values, rows: int, cols: int) -> np.ndarray:
    """A signed integer matrix zero-padded to (rows, cols), int64."""
    values = np.asarray(values, dtype=np.int64)
    table = np.zeros((rows, cols), dtype=np.int64)
    table[:values.shape[0], :values.shape[1]] = values
    return table


def padded_matrix(values, rows: int, cols: int) -> np.ndarray:
    """Signed integer matrix -> field table of the (rows, cols) zero-padded matrix, flattened row-major."""
    return F.to_field(pad_matrix(values, rows, cols).reshape(-1))


def padded_vector(values, length: int) -> np.ndarray:
    """Signed integer vector -> zero-padded field table of ``length``."""
    table = np.zeros(length, dtype=np.uint64)
    table[:len(values)] = F.to_field(np.asarray(values))
    return table


def ext_const(value: int) -> np.ndarray:
    """A (signed) integer as an F_p4 element, shape (4,)."""
    return F.ext_from_base(F.to_field(np.int64(value)))


def ext_one_minus(value) -> np.ndarray:
    """1 - value in F_p4."""
    return F.ext_sub(F.ext_one(), value)


def prefix_sum_of_eq(point, count: int) -> np.ndarray:
    """sum_{i < count} eq(point, i): the MLE at ``point`` of the indicator of the first ``count`` indices, in
    O(k) products from the top variable down (x_b the bit b of i): below 2^b the sum stays in the x_b = 0 half,
    weight 1 - p_b; from 2^b it takes that whole half (whose eq values sum to 1) and goes on in the x_b = 1 half,
    weight p_b. The twin (the table's first ``count`` entries summed) is :func:`prefix_sum_of_eq_table`."""
    point = as_point(point)
    count = min(max(int(count), 0), 1 << len(point))
    if count == 1 << len(point):
        return F.ext_one()
    total, weight = F.ext_zero(), F.ext_one()
    for b in reversed(range(len(point))):
        if count == 0:
            break
        if count >= 1 << b:
            total = F.ext_add(total, F.ext_mul(weight, ext_one_minus(point[b])))
            weight, count = F.ext_mul(weight, point[b]), count - (1 << b)
        else:
            weight = F.ext_mul(weight, ext_one_minus(point[b]))
    return total


def prefix_sum_of_eq_table(point, count: int) -> np.ndarray:
    """:func:`prefix_sum_of_eq` by the whole eq table (2^k products; its test twin)."""
    return F.ext_sum(eq_table(point)[:max(int(count), 0)], axis=0)


def boolean_point(index: int, num_vars: int) -> np.ndarray:
    """The hypercube vertex of ``index`` as a (num_vars, 4) F_p4 point (bit b of index is x_b)."""
    bits = np.array([(index >> b) & 1 for b in range(num_vars)], dtype=np.uint64)
    return F.ext_from_base(bits)


def check_ext(value, where: str, name: str) -> np.ndarray:
    """A verifier-side check that ``value`` is one canonical F_p4 element."""
    array = np.asarray(value)
    if array.shape != (F.EXT_DEGREE,) or not F.is_canonical(array):
        raise ProofRejected(f"{name} is not a canonical F_p4 element", where)
    return array


def require(condition: bool, reason: str, where: str) -> None:
    """Raise ProofRejected(reason, where) unless ``condition``."""
    if not condition:
        raise ProofRejected(reason, where)
