"""BabyBear base field and quartic extension against Python ints and galois."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from proofs import field as F
from proofs.errors import FieldError
from tests.reference.field_oracle import ext_to_galois, galois_to_ext, gf_base

P = F.P
residues = st.lists(st.integers(0, P - 1), min_size=1, max_size=40)
ext_elements = st.lists(st.lists(st.integers(0, P - 1), min_size=4, max_size=4), min_size=1, max_size=20)


def u64(values):
    return np.array(values, dtype=np.uint64)


def test_prime_and_two_adicity():
    assert P == 2 ** 31 - 2 ** 27 + 1 and (P - 1) % 2 ** F.TWO_ADICITY == 0
    assert all(pow(F.GENERATOR, (P - 1) // q, P) != 1 for q in (2, 3, 5))  # p - 1 = 2^27 * 3 * 5


def test_extension_modulus_is_irreducible():
    # X^4 - a is irreducible over F_p iff a is not a square and a not in -4 F_p^4 (Lang, Algebra, VI.9.1);
    # for p = 1 mod 4, -4 is a square, so "11 is a non-residue" suffices
    assert P % 4 == 1 and pow(F.W, (P - 1) // 2, P) == P - 1
    assert 120 < F.EXT_BITS < 124


@pytest.mark.slow
def test_extension_modulus_is_irreducible_by_galois():
    import galois
    assert galois.Poly([1, 0, 0, 0, P - F.W], field=gf_base()).is_irreducible()


@given(st.lists(st.integers(-2 ** 70, 2 ** 70), min_size=1, max_size=30))
def test_to_field_and_back(values):
    arr = np.array(values, dtype=object)
    residues_ = F.to_field(arr)
    assert residues_.dtype == np.uint64
    assert [int(r) for r in residues_] == [v % P for v in values]
    small = [v for v in values if abs(v) < P // 2]
    if small:
        assert list(F.to_signed(F.to_field(np.array(small, dtype=np.int64)))) == small


def test_to_field_rejects_floats():
    with pytest.raises(FieldError, match="dtype=float64"):
        F.to_field(np.array([1.5]))


@given(residues, residues)
def test_base_ops_against_python_ints(xs, ys):
    n = min(len(xs), len(ys))
    a, b = u64(xs[:n]), u64(ys[:n])
    assert list(F.add(a, b)) == [(x + y) % P for x, y in zip(xs, ys)]
    assert list(F.sub(a, b)) == [(x - y) % P for x, y in zip(xs, ys)]
    assert list(F.mul(a, b)) == [(x * y) % P for x, y in zip(xs, ys)]
    assert list(F.neg(a)) == [(-x) % P for x in xs[:n]]
    assert int(F.dot(a, b)) == sum(x * y for x, y in zip(xs, ys)) % P
    exponent = xs[0] + 3
    assert list(F.pow_(a, exponent)) == [pow(x, exponent, P) for x in xs[:n]]


@given(residues)
def test_inverse_against_galois(xs):
    a = u64([x or 1 for x in xs])
    expected = np.array(gf_base()(a.astype(np.int64)) ** -1, dtype=np.uint64)
    assert np.array_equal(F.inv(a), expected)
    assert np.array_equal(F.batch_inv(a), expected)
    assert np.all(F.mul(a, F.inv(a)) == 1)


def test_inverse_of_zero_raises():
    with pytest.raises(FieldError, match="0"):
        F.inv(u64([3, 0]))
    with pytest.raises(FieldError):
        F.ext_inv(F.ext_zero((2,)))


@given(st.integers(1, 40), st.integers(1, 70), st.integers(1, 9), st.integers(0, 2 ** 32))
def test_matmul_exact(m, n, k, seed):
    a = F.random_elements((m, n), seed=seed)
    b = F.random_elements((n, k), seed=seed + 1)
    expected = (a.astype(object) @ b.astype(object)) % P
    assert np.array_equal(F.matmul(a, b), expected.astype(np.uint64))  # the compiled pass
    assert np.array_equal(F.limb_matmul(a, b), expected.astype(np.uint64))  # its BLAS twin


def test_matmul_worst_case_values():
    a = np.full((3, 5000), P - 1, dtype=np.uint64)
    b = np.full((5000, 2), P - 1, dtype=np.uint64)
    assert np.all(F.matmul(a, b) == (5000 * (P - 1) ** 2) % P)
    assert np.all(F.limb_matmul(a, b) == (5000 * (P - 1) ** 2) % P)


@given(ext_elements, ext_elements)
def test_ext_ops_against_galois(xs, ys):
    n = min(len(xs), len(ys))
    a, b = u64(xs[:n]), u64(ys[:n])
    ga, gb = ext_to_galois(a), ext_to_galois(b)
    assert np.array_equal(F.ext_mul(a, b), galois_to_ext(ga * gb))
    assert np.array_equal(F.ext_add(a, b), galois_to_ext(ga + gb))
    assert np.array_equal(F.ext_sub(a, b), galois_to_ext(ga - gb))
    assert np.array_equal(F.ext_neg(a), galois_to_ext(-ga))
    nonzero = a[np.any(a != 0, axis=1)]
    if len(nonzero):
        assert np.array_equal(F.ext_inv(nonzero), galois_to_ext(ext_to_galois(nonzero) ** -1))


def test_ext_worst_case_coefficients():
    a = np.full((1, 4), P - 1, dtype=np.uint64)
    assert np.array_equal(F.ext_mul(a, a), galois_to_ext(ext_to_galois(a) ** 2))


@given(ext_elements, residues, st.integers(0, 300))
def test_ext_mixed_and_pow(xs, ys, exponent):
    n = min(len(xs), len(ys))
    a, b = u64(xs[:n]), u64(ys[:n])
    assert np.array_equal(F.ext_mul_base(a, b), F.ext_mul(a, F.ext_from_base(b)))
    assert np.array_equal(F.ext_pow(a, exponent), galois_to_ext(ext_to_galois(a) ** exponent))
    assert np.array_equal(F.ext_dot(a, b), F.ext_sum(F.ext_mul_base(a, b), axis=0))


def test_ext_constants_and_eq():
    one, zero = F.ext_one((3,)), F.ext_zero(3)
    x = F.ext_random((3,), seed=1)
    assert F.ext_eq(F.ext_mul(x, one), x) and F.ext_eq(F.ext_add(x, zero), x)
    assert not F.ext_eq(x, F.ext_add(x, one))
    assert F.ext_eq(F.ext_mul(x, F.ext_inv(x)), one)


def test_random_elements_are_canonical_and_fresh():
    a, b = F.random_elements(1000), F.random_elements(1000)
    assert F.is_canonical(a) and not np.array_equal(a, b)
    assert np.array_equal(F.random_elements(5, seed=3), F.random_elements(5, seed=3))


def test_random_elements_are_uniform_over_the_field():
    """The CSPRNG path (31-bit candidates below p kept): 32 equal buckets of [0, p) get 2^17 draws evenly (a
    chi-square with 31 degrees of freedom far below its 1e-9 tail, ~100); a bias toward the low values (a
    reduction mod p instead of the rejection) would put about twice the draws in the two lowest buckets."""
    draws = F.random_elements(1 << 17)
    counts = np.bincount((draws.astype(np.float64) * 32 / P).astype(np.int64), minlength=32)
    expected = draws.size / 32
    assert ((counts - expected) ** 2 / expected).sum() < 100
    assert draws.max() > P - P // 1000 and F.random_elements((2, 3)).shape == (2, 3)


@given(st.lists(st.integers(0, P - 1), min_size=4, max_size=4), st.lists(st.integers(0, P - 1), min_size=4, max_size=4))
def test_single_element_ext_mul_path(x, y):
    a, b = u64(x), u64(y)  # shape (4,): the scalar fast path
    expected = F.ext_mul(a[None], b[None])[0]  # shape (1, 4): the vectorized path
    assert np.array_equal(F.ext_mul(a, b), expected)
    assert np.array_equal(expected, galois_to_ext(ext_to_galois(a) * ext_to_galois(b))[0])


def chunked(op, *arrays):
    """``op`` applied to slices shorter than NUMBA_MIN_SIZE (the numpy formulas), concatenated."""
    step = F.NUMBA_MIN_SIZE // 8
    n = arrays[0].shape[0]
    return np.concatenate([op(*(a[i:i + step] if a.shape[0] == n else a for a in arrays)) for i in range(0, n, step)])


def test_numba_batch_inverse_matches_fermat():
    pytest.importorskip("numba")
    a = F.random_elements(F.NUMBA_MIN_SIZE + 9, seed=8) | np.uint64(1)
    a[:2] = [1, P - 1]
    assert np.array_equal(F.inv(a), F.pow_(a, P - 2))
    with pytest.raises(FieldError):
        F.inv(np.concatenate([a, [0]]).astype(np.uint64))


@pytest.mark.parametrize("op", [F.add, F.sub, F.mul])
def test_numba_base_kernels_match_numpy(op):
    pytest.importorskip("numba")
    n = F.NUMBA_MIN_SIZE + 37
    a, b = F.random_elements(n, seed=1), F.random_elements(n, seed=2)
    a[:3], b[:3] = [0, P - 1, P - 1], [P - 1, P - 1, 0]
    assert np.array_equal(op(a, b), chunked(op, a, b))


def test_numba_ext_kernels_match_numpy():
    pytest.importorskip("numba")
    n = F.NUMBA_MIN_SIZE + 5
    a, b = F.ext_random(n, seed=3), F.ext_random(n, seed=4)
    a[0] = b[0] = P - 1
    assert np.array_equal(F.ext_mul(a, b), chunked(F.ext_mul, a, b))
    assert np.array_equal(F.ext_mul(a, b[7]), chunked(F.ext_mul, a, b[7]))
    assert np.array_equal(F.ext_mul(b[7], a), F.ext_mul(a, b[7]))
    assert np.array_equal(F.ext_mul(a.reshape(-1, 1, 4)[:4096], b[:4096].reshape(-1, 1, 4)).reshape(-1, 4),
                          F.ext_mul(a[:4096], b[:4096]))


def test_numba_paths_with_broadcasting():
    pytest.importorskip("numba")
    per_bit, per_element = F.ext_random(9, seed=5), F.ext_random(F.NUMBA_MIN_SIZE // 8 + 3, seed=6)
    outer = F.ext_mul(per_bit[:, None, :], per_element[None, :, :])
    assert np.array_equal(F.ext_mul(per_element[None, :, :], per_bit[:, None, :]), outer)
    assert np.array_equal(outer, F.ext_mul(np.broadcast_to(per_bit[:, None, :], outer.shape).copy(),
                                           np.broadcast_to(per_element[None, :, :], outer.shape).copy()))
    assert np.array_equal(outer, np.stack([chunked(F.ext_mul, per_element, b) for b in per_bit]))
    base = F.random_elements(F.NUMBA_MIN_SIZE + 1, seed=7)
    scaled = F.ext_mul_base(per_bit[0], base)
    assert np.array_equal(scaled, chunked(F.ext_mul_base, np.broadcast_to(per_bit[0], scaled.shape), base))
    assert np.array_equal(F.sub(np.uint64(1), base), chunked(F.sub, np.ones_like(base), base))


def test_operands_other_than_uint64_are_reduced_or_refused():
    assert F.mul(np.array([-1, 2]), [3, -4]).tolist() == [P - 3, P - 8]
    assert F.add(-1, 1) == 0 and F.ext_mul_base(F.ext_one(), [-1]).tolist() == [[P - 1, 0, 0, 0]]
    with pytest.raises(FieldError, match="dtype=float64"):
        F.add(np.array([1.0]), np.array([2], dtype=np.uint64))
    with pytest.raises(FieldError, match="dtype=float64"):
        F.ext_mul(np.ones((2, 4)), F.ext_one((2,)))


def test_mismatched_shapes_raise_field_error_and_scalars_wrap_silently():
    import warnings
    with pytest.raises(FieldError, match=r"\(2,\) and \(3,\)"):
        F.mul(np.arange(2), np.arange(3))
    with pytest.raises(FieldError, match="do not broadcast"):
        F.ext_add(F.ext_one((2,)), F.ext_one((3,)))
    with pytest.raises(FieldError, match=r"\(\.\.\., 4\)"):
        F.ext_mul(np.arange(3), np.arange(3))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy scalar overflow warnings would be errors here
        assert F.sub(0, 1) == F.P - 1 and F.add(F.P - 1, 5) == 4 and F.neg(3) == F.P - 3


@pytest.mark.parametrize("n, k, m", [(1, 1, 1), (3, 4, 5), (64, 8, 33), (1024, 4, 150)])
def test_transposed_matmul_kernel_equals_the_limb_matmul(n, k, m):
    """proofs._kernels.transposed_matmul (field.matmul's and the hiding openings' compiled pass) against the
    16-bit-limb BLAS product, with entries at p - 1 (the largest products)."""
    from proofs import _kernels
    rng = np.random.default_rng(n + k + m)
    a = rng.integers(0, F.P, (n, k), dtype=np.uint64)
    b = rng.integers(0, F.P, (n, m), dtype=np.uint64)
    a[0], b[0] = F.P - 1, F.P - 1
    out = np.empty((m, k), dtype=np.uint64)
    _kernels.transposed_matmul(a, b, out)
    assert np.array_equal(out, F.limb_matmul(np.ascontiguousarray(a.T), b).T)
    assert np.array_equal(F.matmul(np.ascontiguousarray(a.T), b), out.T)


@settings(max_examples=10, deadline=None)
@given(st.integers(0, 300), st.integers(0, 300), st.integers(0, 2**32 - 1))
def test_rejection_sampling_kernel_is_the_numpy_twin(size, start, seed):
    """keep_below_p appends the same candidates (31 bits, below p) as the numpy path, stops when out is full, and
    random_elements fills every entry whether it takes one OS draw or many."""
    kernels = F.numba_kernels()
    if kernels is None:
        pytest.skip("numba not installed")
    draw = np.random.default_rng(seed).integers(0, 2**32, size, dtype=np.uint64).astype(np.uint32)
    draw[::7] = np.uint32(0xFFFFFFFF)  # above p after the mask: rejected
    out = np.zeros(start + 150, dtype=np.uint64)
    found = kernels.keep_below_p(draw, out, start)
    masked = draw & np.uint32(0x7FFFFFFF)
    expected = masked[masked < np.uint32(F.P)][:150].astype(np.uint64)
    assert found == start + expected.size and np.array_equal(out[start:found], expected)
    assert not out[found:].any() and not out[:start].any()


def test_random_elements_fill_across_several_draws(monkeypatch):
    monkeypatch.setattr(F, "_RANDOM_CHUNK", 64)  # many OS draws for one table
    for count in (10, 1000):
        draws = F.random_elements(count)
        assert draws.shape == (count,) and F.is_canonical(draws) and np.unique(draws).size > count - 3


@settings(max_examples=30, deadline=None)
@given(rows=st.integers(1, 40), cols=st.integers(1, 40), seed=st.integers(0, 2**32 - 1))
def test_ext_outer_into_writes_every_product_into_the_view(rows, cols, seed):
    """The outer product (numba kernel from 16 entries, numpy below) against Python-int products, written into
    the slice it is given and nowhere else."""
    rng = np.random.default_rng(seed)
    u, v = (rng.integers(0, F.P, size=(n, 4), dtype=np.uint64) for n in (rows, cols))
    table = np.full((rows * cols + 6, 4), 7, dtype=np.uint64)
    F.ext_outer_into(u, v, table[3:3 + rows * cols])
    want = [F.ext_mul_ints(a, b) for a in u.tolist() for b in v.tolist()]
    assert table[3:3 + rows * cols].tolist() == want
    assert (table[:3] == 7).all() and (table[3 + rows * cols:] == 7).all()
    with pytest.raises(FieldError, match="ext_outer_into"):
        F.ext_outer_into(u, v, table[:rows * cols + 1])


def test_to_field_reduces_unsigned_values_only_when_they_leave_the_field():
    small = np.array([0, 1, F.P - 1], dtype=np.uint64)
    large = np.array([F.P, F.P + 5, 2**64 - 1], dtype=np.uint64)
    out = F.to_field(small)
    assert out.tolist() == small.tolist() and out is not small and not np.shares_memory(out, small)
    assert F.to_field(large).tolist() == [v % F.P for v in large.tolist()]
    assert F.to_field(np.array([3, 200], dtype=np.uint8)).dtype == np.uint64
