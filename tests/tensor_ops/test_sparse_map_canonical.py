"""SparseMap's canonical form (sorted by (row, col), distinct, no zeros) built without a full np.unique.

``from_coo`` skips the sort when the keys already increase and sums repeated keys with ``bincount`` in their
original order (the same additions as ``np.unique(return_inverse=True)`` + ``bincount``), and ``scaled``
multiplies the values of a canonical map in place of re-canonicalising: both must equal their naive twins
bit for bit (the planner's choices depend on these values; planning speed is issue 32, item 3).
"""
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from tensor_ops import model_plan
from tensor_ops.packing import SparseMap, conv_sparse, distinct_ints, place_copies


def naive_from_coo(shape, rows, cols, vals):
    """The twin: np.unique of the flat keys, bincount of the values over its inverse, zeros dropped."""
    n_out, n_in = shape
    key = np.asarray(rows, dtype=np.int64) * n_in + np.asarray(cols, dtype=np.int64)
    unique, inverse = np.unique(key, return_inverse=True)
    summed = np.bincount(inverse, weights=np.asarray(vals, dtype=np.float64), minlength=len(unique)) \
        if len(unique) else np.zeros(0)
    keep = summed != 0
    return unique[keep] // n_in, unique[keep] % n_in, summed[keep]


def assert_same(sparse, twin):
    rows, cols, vals = twin
    assert np.array_equal(sparse.rows, rows) and np.array_equal(sparse.cols, cols)
    assert sparse.vals.tobytes() == vals.tobytes()       # bit for bit (-0.0 included)
    assert not sparse.vals.flags.writeable and not sparse.rows.flags.writeable


values = st.one_of(st.sampled_from([0.0, -0.0, 1.0, -1.0, 0.1, 0.2, 0.3, 1e-300, -1e300]),
                   st.floats(-1e3, 1e3, allow_nan=False))


@st.composite
def coo(draw):
    n_out, n_in = draw(st.integers(1, 6)), draw(st.integers(1, 6))
    count = draw(st.integers(0, 40))
    rows = draw(hnp.arrays(np.int64, count, elements=st.integers(0, n_out - 1)))
    cols = draw(hnp.arrays(np.int64, count, elements=st.integers(0, n_in - 1)))
    vals = draw(hnp.arrays(np.float64, count, elements=values))
    if draw(st.booleans()):     # already sorted and distinct (the fast path), as a convolution's entries
        key, first = np.unique(rows * n_in + cols, return_index=True)
        rows, cols, vals = key // n_in, key % n_in, vals[first]
    return (n_out, n_in), rows, cols, vals


@settings(max_examples=300, deadline=None)
@given(coo())
def test_from_coo_equals_unique_twin(entries):
    assert_same(SparseMap.from_coo(*entries), naive_from_coo(*entries))


@settings(max_examples=200, deadline=None)
@given(coo(), st.one_of(st.sampled_from([0.0, 1e-320, 3.0, -0.5]), st.floats(-1e6, 1e6, allow_nan=False)))
def test_scaled_equals_from_coo_of_scaled_values(entries, factor):
    sparse = SparseMap.from_coo(*entries)
    assert_same(sparse.scaled(factor), naive_from_coo(sparse.shape, sparse.rows, sparse.cols, sparse.vals * factor))


def test_convolution_map_equals_twin_and_dense():
    """A strided, padded convolution with a zero weight (positive control: the dense product agrees)."""
    rng = np.random.default_rng(0)
    weight = rng.standard_normal((3, 2, 3, 3))
    weight[1, 0, 1, 1] = 0.0
    sparse = conv_sparse(weight, (2, 5, 5), 2, 1)
    assert_same(sparse, naive_from_coo(sparse.shape, sparse.rows, sparse.cols, sparse.vals))
    x = rng.standard_normal((2, 2, 5, 5))
    import torch
    expected = torch.nn.functional.conv2d(torch.tensor(x), torch.tensor(weight), stride=2, padding=1).numpy()
    assert np.allclose(sparse.apply(x.reshape(2, -1)), expected.reshape(2, -1))


@settings(max_examples=300, deadline=None)
@given(hnp.arrays(np.int64, st.integers(0, 60), elements=st.one_of(st.integers(-50, 50),
                                                                   st.integers(-2**40, 2**40))))
def test_distinct_ints_equals_unique(values):
    """The bincount path (a narrow range) and the np.unique one (a wide range) both give np.unique's answer."""
    got = distinct_ints(values)
    assert got.dtype == np.int64 and np.array_equal(got, np.unique(values))


def naive_place_copies(pattern, count, limit):
    """The twin: the first-fit scan testing each shift against the slots already used."""
    used = np.zeros(limit, dtype=bool)
    out, candidate, top = [], 0, limit - int(pattern.max())
    for _ in range(count):
        while candidate < top and used[candidate + pattern].any():
            candidate += 1
        if candidate >= top:
            return None
        used[candidate + pattern] = True
        out.append(candidate + pattern)
    return np.concatenate(out)


@settings(max_examples=300, deadline=None)
@given(hnp.arrays(np.int64, st.integers(1, 12), elements=st.integers(0, 40)), st.integers(1, 8),
       st.integers(1, 160))
def test_place_copies_equals_first_fit_scan(pattern, count, limit):
    pattern = pattern - pattern.min()
    got, expected = place_copies(pattern, count, limit), naive_place_copies(pattern, count, limit)
    assert (got is None) == (expected is None)
    if expected is not None:
        assert np.array_equal(got, expected) and len(np.unique(got)) == len(np.unique(pattern)) * count


def naive_splits(offset_sets, weight):
    """The twin of model_plan._splits: every candidate split of every stage priced, the first cheapest kept."""
    chosen, keys = [], set()
    for offsets in offset_sets:
        best = None
        for g, baby, giant, steps, rotations in model_plan._split_candidates(offsets):
            cost = rotations + weight * len(steps - keys)
            if best is None or cost < best[0]:
                best = (cost, g, baby, giant, steps)
        chosen.append(best[1:4])
        keys |= best[4]
    return chosen, keys


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(st.integers(-300, 300), min_size=1, max_size=25, unique=True), min_size=1, max_size=4),
       st.sampled_from(model_plan._KEY_WEIGHTS))
def test_bounded_split_search_equals_full_search(stages, weight):
    offset_sets = [np.array(sorted(s), dtype=np.int64) for s in stages]
    memo = {}
    assert model_plan._splits(offset_sets, weight, memo) == naive_splits(offset_sets, weight)
    assert model_plan._splits(offset_sets, weight, memo) == naive_splits(offset_sets, weight)  # memo reused


@settings(max_examples=100, deadline=None)
@given(st.lists(st.lists(st.integers(-200, 200), min_size=1, max_size=20, unique=True), min_size=2, max_size=5),
       st.lists(st.lists(st.integers(-200, 200), min_size=1, max_size=20, unique=True), min_size=1, max_size=3),
       st.sampled_from(model_plan._KEY_WEIGHTS))
def test_split_search_reuses_shared_prefixes(shared, tails, weight):
    """Lowerings tried one after another share leading stages (one memo): each answer equals a fresh search."""
    arrays = [np.array(sorted(s), dtype=np.int64) for s in shared]
    memo = {}
    for cut, tail in enumerate(tails, 1):
        offset_sets = arrays[:cut] + [np.array(sorted(tail), dtype=np.int64)] + arrays[cut:]
        assert model_plan._splits(offset_sets, weight, memo) == naive_splits(offset_sets, weight)


def naive_compose(second, first):
    """The twin: every product second[r, k] * first[k, c], in second's entry order then first's, summed by
    ``naive_from_coo``."""
    rows, cols, vals = [], [], []
    for r, k, v in zip(second.rows, second.cols, second.vals):
        for c, w in zip(first.cols[first.rows == k], first.vals[first.rows == k]):
            rows.append(r), cols.append(c), vals.append(v * w)
    return naive_from_coo((second.shape[0], first.shape[1]), rows, cols, np.array(vals, dtype=np.float64))


@settings(max_examples=200, deadline=None)
@given(coo(), coo())
def test_compose_equals_its_twin(second, first):
    """self.compose(first) = self @ first bit for bit (canonical operands: no re-sort of ``first``); a
    positive control against the dense product where the values are moderate."""
    a = SparseMap.from_coo(*second)
    b = SparseMap.from_coo((a.shape[1], first[0][1]), np.minimum(first[1], a.shape[1] - 1), *first[2:])
    product = a.compose(b)
    assert_same(product, naive_compose(a, b))
    if np.all(np.abs(a.vals) < 1e4) and np.all(np.abs(b.vals) < 1e4):
        assert np.allclose(product.toarray(), a.toarray() @ b.toarray(), rtol=1e-9, atol=1e-9)
