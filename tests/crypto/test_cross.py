"""CROSS kernels (Barrett, BAT, MAT, basis conversion) against Python ints and the radix-2 backends."""
import numpy as np
import pytest
from hypothesis import assume, example, given, settings, strategies as st

from crypto.cross import (FLOAT64_EXACT, PAPER_CHUNK_BITS, ChunkSpec, CrossBackend, FourStepBackend, FourStepPlan,
                          LimbBarrett, MATPlan,
                          barrett_reduce, bat_matrix, bat_mulmod, chunk_maxima, join_chunks, mat_constants, mat_shape,
                          split_chunks, widest_chunk_bits)
from crypto.errors import ParameterError, ShapeError
from crypto.modarith import find_ntt_primes, is_ntt_prime, primitive_2n_root
from crypto.ntt import BasisConversion, NTTTables, get_backend
from tests.reference.naive_cross import (naive_basis_conversion, naive_matmul_mod, naive_mulmod,
                                         naive_ntt_rows)

U64 = np.uint64
# the MAT kernels under test: BLAS with the widest exact chunk, the paper's 8-bit BAT, 4-bit, compiled 4-step
MAKERS = {"cross-wide": CrossBackend, "cross-8": lambda: CrossBackend(PAPER_CHUNK_BITS),
          "cross-4": lambda: CrossBackend(4), "fourstep": FourStepBackend}


@st.composite
def moduli_below_2_31(draw, max_count=3):
    """Distinct moduli in [3, 2^31) (Barrett needs no primality), including the extremes."""
    edge = st.sampled_from([3, 5, 97, 2**15 + 1, 65537, 2**30 + 3, 2**31 - 1])
    return draw(st.lists(st.one_of(edge, st.integers(3, 2**31 - 1)), min_size=1, max_size=max_count, unique=True))


@st.composite
def ntt_moduli(draw, n, count):
    """``count`` distinct random NTT primes < 2^31 with q ≡ 1 mod 2n."""
    found = []
    while len(found) < count:
        bits = draw(st.integers(max((2 * n).bit_length() + 1, 8), 31))
        start = draw(st.integers(2 ** (bits - 1) // (2 * n), (2**bits - 1) // (2 * n)))
        t = start
        while t * 2 * n + 1 < 2**31 and not is_ntt_prime(t * 2 * n + 1, n):
            t += 1
        q = t * 2 * n + 1
        assume(q < 2**31 and q not in found)
        found.append(q)
    return found


def _random_rows(moduli, n, rng):
    return np.array([rng.integers(0, q, n) for q in moduli], dtype=U64)


# ------------------------------------------------------------------------------------------ Barrett
@given(moduli=moduli_below_2_31(), data=st.data())
def test_barrett_reduce_matches_python_mod_over_full_range(moduli, data):
    barrett = LimbBarrett(moduli)
    rows = []
    for q in moduli:
        top = 4 ** (q - 1).bit_length() - 1        # the whole input range x < 2^(2k)
        drawn = data.draw(st.lists(st.integers(0, top), min_size=10, max_size=10))
        rows.append([top, top - 1, (q - 1) ** 2, q, q - 1, 0] + drawn)
    x = np.array(rows, dtype=U64)
    got = barrett.reduce(x)
    assert got.tolist() == [[v % q for v in row] for row, q in zip(rows, moduli)]


@given(moduli=moduli_below_2_31(), data=st.data())
def test_barrett_reduce_wide_matches_python_mod_up_to_2_64(moduli, data):
    barrett = LimbBarrett(moduli)
    rows = [[2**64 - 1, 2**63, 2**62 - 1, 0, q, 4 ** (q - 1).bit_length()]
            + data.draw(st.lists(st.integers(0, 2**64 - 1), min_size=4, max_size=4)) for q in moduli]
    got = barrett.reduce_wide(np.array(rows, dtype=U64))
    assert got.tolist() == [[v % q for v in row] for row, q in zip(rows, moduli)]


@given(q=moduli_below_2_31(max_count=1), bound_bits=st.integers(1, 64), data=st.data())
def test_barrett_reduce_wide_with_a_bound(q, bound_bits, data):
    barrett = LimbBarrett(q)
    values = [2**bound_bits - 1] + data.draw(st.lists(st.integers(0, 2**bound_bits - 1), min_size=1, max_size=8))
    got = barrett.reduce_wide(np.array([values], dtype=U64), 2**bound_bits)
    assert got.tolist() == [[v % q[0] for v in values]]


@given(q=st.one_of(st.sampled_from([3, 97, 2**31 - 1]), st.integers(3, 2**31 - 1)),
       values=st.lists(st.one_of(st.integers(0, 2**64 - 1), st.sampled_from([0, 2**64 - 1, 2**62, 2**32 - 1])),
                       min_size=1, max_size=16))
@example(q=2**31 - 1, values=[2**64 - 1, (2**31 - 2) ** 2, 2**62 - 1])
def test_barrett_reduce_any_uint64(q, values):
    got = barrett_reduce(np.array(values, dtype=object), q)
    assert got.dtype == np.uint64 and got.tolist() == [v % q for v in values]
    assert int(barrett_reduce(values[0], q)) == values[0] % q


def test_barrett_rejects_out_of_range_values():
    with pytest.raises(ParameterError, match=r"x\[0\] holds -1, outside \[0, 2\^64\)"):
        barrett_reduce(np.array([5, -1]), 97)
    with pytest.raises(ParameterError, match="outside"):
        barrett_reduce([2**64], 97)
    with pytest.raises(ParameterError, match="dtype float64 must hold integers"):
        barrett_reduce(np.array([1.5]), 97)
    with pytest.raises(ParameterError, match=r"x\[1\] holds 16384, outside \[0, 2\^14\) \(modulus 97\)"):
        LimbBarrett([2**31 - 1, 97]).reduce(np.array([[0, 1], [16384, 3]], dtype=np.uint64))
    with pytest.raises(ParameterError, match="bound=2.5"):
        LimbBarrett([97]).reduce_wide(np.zeros((1, 2), dtype=np.uint64), 2.5)


def test_barrett_keeps_input_and_rejects_bad_moduli_and_shapes():
    barrett = LimbBarrett([97, 2**31 - 1])
    x = np.array([[1000, 5], [2**61, 7]], dtype=U64)
    before = x.copy()
    barrett.reduce(x)
    assert np.array_equal(x, before)
    with pytest.raises(ParameterError, match=r"moduli\[1\]=2147483648"):
        LimbBarrett([97, 2**31])
    with pytest.raises(ParameterError, match=r"moduli\[0\]=2 "):
        LimbBarrett([2])
    with pytest.raises(ShapeError, match="one row per modulus"):
        barrett.reduce(np.zeros((3, 4), dtype=U64))
    with pytest.raises(ParameterError, match="bound=0"):
        barrett.reduce_wide(x, 0)


# ---------------------------------------------------------------------------------------------- BAT
def test_hand_worked_4_bit_bat():
    """7·x mod 13 with 4-bit chunks: column t of the BAT matrix holds the chunks of 7·16^t mod 13.

    16 ≡ 3 (mod 13), so 7·16^t mod 13 cycles 7, 8, 11 (7·3 = 21 ≡ 8, 8·3 = 24 ≡ 11, 11·3 = 33 ≡ 7);
    all are below 16, so only chunk row 0 is non-zero.
    """
    q, c = 13, 7
    spec = ChunkSpec(4, 1)
    matrix = bat_matrix(np.array([[c]], dtype=U64), q, spec)
    assert spec.count == 8 and matrix.shape == (8, 8)
    assert matrix[0].tolist() == [7, 8, 11, 7, 8, 11, 7, 8]
    assert not matrix[1:].any()
    x = np.array([0, 1, 12, 200, 2**31 - 1], dtype=U64)
    assert bat_mulmod(x, c, q, chunk_bits=4).tolist() == naive_mulmod(x, c, q)


@given(q=moduli_below_2_31(max_count=1), c=st.integers(0, 2**31), width=st.integers(1, 31),
       values=st.lists(st.integers(0, 2**31 - 1), min_size=1, max_size=30))
def test_bat_mulmod_matches_python(q, c, width, values):
    q = q[0]
    x = np.array(values + [2**31 - 1, q - 1], dtype=U64)
    if width > widest_chunk_bits(1):
        with pytest.raises(ParameterError, match=f"chunk_bits={width}"):
            bat_mulmod(x, c, q, chunk_bits=width)
        return
    assert bat_mulmod(x, c, q, chunk_bits=width).tolist() == naive_mulmod(x, c % q, q)


@given(width=st.integers(1, 31), inner=st.integers(1, 2**12))
def test_chunk_spec_bound_is_proven_and_unsafe_widths_refused(width, inner):
    safe = widest_chunk_bits(inner)
    if width > safe:
        with pytest.raises(ParameterError, match=rf"chunk_bits={width} unsafe.*inner dimension {inner}.*2\^53"):
            ChunkSpec(width, inner)
        return
    spec = ChunkSpec(width, inner)
    maxima = chunk_maxima(width)
    assert spec.count == len(maxima) and sum(m << (width * t) for t, m in enumerate(maxima)) == 2**31 - 1
    assert spec.partial_sum_bound == inner * sum(maxima) * maxima[0] < FLOAT64_EXACT
    if width == safe:   # the next width really would break the float64 bound or the uint64 recombination
        if safe < 31:
            with pytest.raises(ParameterError):
                ChunkSpec(safe + 1, inner)


def test_widest_chunk_at_the_bound_is_exact_in_float64():
    """Worst-case operands (every chunk at its maximum) at the widest safe width: BLAS equals Python ints."""
    inner = 256
    spec = ChunkSpec(widest_chunk_bits(inner), inner)
    maxima = chunk_maxima(spec.width)
    data = np.tile(np.array(maxima, dtype=np.float64).repeat(inner)[:, None], (1, 3))
    consts = np.full((spec.count, spec.count * inner), float(maxima[0]))
    exact = inner * sum(maxima) * maxima[0]
    assert exact == spec.partial_sum_bound and exact > 2**52
    assert (consts @ data == float(exact)).all() and int((consts @ data)[0, 0]) == exact


def test_chunk_spec_rejects_nonsense():
    for bad in (0, 32, 8.5, "8"):
        with pytest.raises(ParameterError, match="chunk_bits="):
            ChunkSpec(bad, 4)
    with pytest.raises(ParameterError, match="inner dimension=0"):
        ChunkSpec(8, 0)
    with pytest.raises(ParameterError, match="chunk_bits=32"):
        CrossBackend(chunk_bits=32)


def test_explicit_width_is_proven_at_construction_for_sizes_up_to_max_n():
    assert CrossBackend(22).chunk_bits == 22               # exact up to N = 2^16 (R = 256)
    with pytest.raises(ParameterError, match=r"chunk_bits=23 unsafe .*inner dimension 256.*widest safe chunk here is 22"):
        CrossBackend(23)
    small = CrossBackend(23, max_n=2**12)                  # R = 64 allows one more bit
    n = 2**12
    moduli = find_ntt_primes(31, 2, n)
    a = _random_rows(moduli, n, np.random.default_rng(3))
    tables = NTTTables(n, moduli)
    assert np.array_equal(small.forward(a, tables), get_backend("numba").forward(a, tables))
    big = NTTTables(2**13, find_ntt_primes(31, 1, 2**13))
    with pytest.raises(ParameterError, match="n=8192 exceeds max_n=4096"):
        small.forward(np.zeros((1, 2**13), dtype=U64), big)


@given(width=st.integers(1, 24), values=st.lists(st.integers(0, 2**31 - 1), min_size=1, max_size=12))
def test_split_then_join_is_identity(width, values):
    spec = ChunkSpec(width, 1)
    x = np.array([values, values[::-1]], dtype=U64)
    for axis in (0, 1):
        chunks = split_chunks(x, spec, axis)
        assert chunks.dtype == np.float64 and chunks.max() < 2**width
        assert np.array_equal(join_chunks(chunks, spec, axis), x)


@given(q=moduli_below_2_31(max_count=1), width=st.sampled_from([4, 8, 16, None]), seed=st.integers(0, 2**32))
def test_bat_matrix_product_matches_python_matmul(q, width, seed):
    q = q[0]
    rng = np.random.default_rng(seed)
    a_out, a_in, cols = 3, 5, 4
    spec = ChunkSpec(width or widest_chunk_bits(a_in), a_in)
    consts = rng.integers(0, q, (a_out, a_in)).astype(U64)
    data = rng.integers(0, q, (a_in, cols)).astype(U64)
    z = bat_matrix(consts, q, spec) @ split_chunks(data, spec, axis=0)
    got = LimbBarrett([q]).reduce_wide(join_chunks(z, spec, axis=0)[None], spec.combined_bound)[0]
    assert got.tolist() == naive_matmul_mod(consts.tolist(), data.tolist(), q)


# ---------------------------------------------------------------------------------------------- MAT
@pytest.mark.parametrize("log_n", [1, 2, 3, 4, 5, 6])
def test_mat_constants_compose_to_the_ntt_definition(log_n):
    n = 1 << log_n
    q = find_ntt_primes(20, 1, n)[0]
    psi = primitive_2n_root(q, n)
    m = {k: v.astype(object) for k, v in mat_constants(n, q, psi).items()}
    rows, cols = mat_shape(n)
    a = np.random.default_rng(log_n).integers(0, q, n)
    x = a.astype(object).reshape(rows, cols)
    out = (((m["F1"] @ x) % q * m["T"]) % q @ m["F2"]) % q
    assert out.reshape(n).tolist() == naive_ntt_rows([a.tolist()], [q])[0]
    back = (m["F1inv"] @ (((out @ m["F2inv"]) % q * m["Tinv"]) % q)) % q
    assert back.reshape(n).tolist() == a.tolist()


@pytest.mark.parametrize("kernel", MAKERS)
@given(log_n=st.integers(1, 6), data=st.data(), seed=st.integers(0, 2**32))
@settings(max_examples=10)
def test_mat_ntt_matches_naive_definition(kernel, log_n, data, seed):
    n = 1 << log_n
    moduli = data.draw(ntt_moduli(n, 2))
    tables = NTTTables(n, moduli)
    a = _random_rows(moduli, n, np.random.default_rng(seed))
    backend = MAKERS[kernel]()
    got = backend.forward(a, tables)
    assert got.tolist() == naive_ntt_rows(a.tolist(), moduli)
    assert np.array_equal(backend.inverse(got, tables), a)


@pytest.mark.parametrize("kernel", ["cross-wide", "cross-8", "fourstep"])
@given(log_n=st.integers(4, 11), data=st.data(), seed=st.integers(0, 2**32))
@settings(max_examples=8)
def test_mat_ntt_bit_identical_to_radix2(kernel, log_n, data, seed):
    _check_bit_identical(1 << log_n, data.draw(ntt_moduli(1 << log_n, 3)), MAKERS[kernel](), seed)


@pytest.mark.slow
@pytest.mark.parametrize("kernel", ["cross-wide", "cross-8", "fourstep"])
@given(log_n=st.integers(12, 16), data=st.data(), seed=st.integers(0, 2**32))
@settings(max_examples=10)
def test_mat_ntt_bit_identical_to_radix2_large(kernel, log_n, data, seed):
    _check_bit_identical(1 << log_n, data.draw(ntt_moduli(1 << log_n, 2)), MAKERS[kernel](), seed)


def _check_bit_identical(n, moduli, backend, seed):
    tables = NTTTables(n, moduli)
    a = _random_rows(moduli, n, np.random.default_rng(seed))
    a[:, 0] = np.array(moduli, dtype=U64) - 1          # extreme residues included
    before = a.copy()
    cross, radix2 = backend, get_backend("numpy")
    got = cross.forward(a, tables)
    assert np.array_equal(got, radix2.forward(a, tables))
    assert np.array_equal(a, before)                   # input untouched
    back = cross.inverse(got, tables)
    assert np.array_equal(back, radix2.inverse(got, tables)) and np.array_equal(back, a)


@pytest.mark.parametrize("kernel", ["cross-wide", "fourstep"])
@pytest.mark.parametrize("log_n", [12, 14, 16])
def test_mat_ntt_default_sizes_against_numba(kernel, log_n):
    n = 1 << log_n
    moduli = find_ntt_primes(31, 2, n) + find_ntt_primes(24, 1, n)
    _check_bit_identical(n, moduli, MAKERS[kernel](), log_n)
    tables = NTTTables(n, moduli)
    a = _random_rows(moduli, n, np.random.default_rng(0))
    assert np.array_equal(MAKERS[kernel]().forward(a, tables), get_backend("numba").forward(a, tables))


def _check_sub_bases(backend, n=128):
    """Sub-bases (any order) give the rows of the full-basis transform; returns the tables."""
    moduli = find_ntt_primes(30, 4, n)
    tables = NTTTables(n, moduli)
    a = _random_rows(moduli, n, np.random.default_rng(8))
    full = backend.forward(a, tables)
    for idx in ([2], [0, 3], [3, 1, 0]):
        assert np.array_equal(backend.forward(a[idx], tables.subset(idx)), full[idx])
        assert np.array_equal(backend.inverse(full[idx], tables.subset(idx)), a[idx])
    return tables


def test_cross_sub_bases_reuse_the_per_modulus_plans():
    cross = CrossBackend()
    tables = _check_sub_bases(cross)
    assert len(cross._plans) == 4
    assert cross.plan(128, tables.moduli[1], tables.psi[1]) is cross.plan(128, tables.moduli[1], tables.psi[1])


def test_fourstep_sub_bases_share_one_table_pool():
    backend = FourStepBackend()
    tables = _check_sub_bases(backend)
    pool = backend._pools[128]
    assert len(pool.q) == 4                                    # no new rows for sub-bases
    backend.forward(np.zeros((1, 128), dtype=U64), NTTTables(128, find_ntt_primes(29, 1, 128)))
    assert len(pool.q) == 5 and backend._pools[128] is pool
    a = _random_rows(tables.moduli, 128, np.random.default_rng(1))
    assert np.array_equal(backend.forward(a, tables), get_backend("numba").forward(a, tables))


@pytest.mark.parametrize("kernel", ["cross-wide", "fourstep"])
def test_mat_backends_reject_bad_input(kernel):
    n = 64
    moduli = find_ntt_primes(30, 2, n)
    tables = NTTTables(n, moduli)
    cross = MAKERS[kernel]()
    with pytest.raises(ShapeError, match=r"a.shape=\(2, 32\)"):
        cross.forward(np.zeros((2, 32), dtype=U64), tables)
    with pytest.raises(ShapeError, match=r"a.shape=\(1, 64\)"):
        cross.inverse(np.zeros((1, 64), dtype=U64), tables)
    bad = np.zeros((2, n), dtype=U64)
    bad[1, 3] = moduli[1]                                 # residues must be reduced: row l below q_l
    with pytest.raises(ParameterError, match=rf"a\[1\] holds {moduli[1]}, outside \[0, {moduli[1]}\)"):
        cross.forward(bad, tables)
    bad[1, 3] = 2**63
    with pytest.raises(ParameterError, match=rf"a\[1\] holds {2**63}, outside"):
        cross.inverse(bad, tables)
    with pytest.raises(ParameterError, match=r"a\[0\] holds -1, outside"):
        cross.forward(-np.eye(2, n, dtype=np.int64), tables)
    with pytest.raises(ParameterError, match="a of dtype float64 must hold integers"):
        cross.forward(np.zeros((2, n)), tables)


def test_bad_constants_and_widths_rejected():
    n = 64
    moduli = find_ntt_primes(30, 2, n)
    tables = NTTTables(n, moduli)
    with pytest.raises(ParameterError, match="c=1.5 must be an integer"):
        bat_mulmod(np.arange(3), 1.5, 97)
    with pytest.raises(ParameterError, match="chunk_bits=28 unsafe"):
        CrossBackend(28).forward(np.zeros((2, n), dtype=U64), tables)
    for plan in (lambda psi: MATPlan(n, moduli[0], psi, 8), lambda psi: FourStepPlan(n, moduli[0], psi)):
        with pytest.raises(ParameterError, match="psi=2 is not a primitive 2N-th root"):
            plan(2)
        with pytest.raises(ParameterError, match="psi=1 is not a primitive 2N-th root"):
            plan(1)


# ---------------------------------------------------------------------------------- basis conversion
CONVERTERS = {"cross-wide": CrossBackend, "cross-8": lambda: CrossBackend(PAPER_CHUNK_BITS),
              "fourstep": FourStepBackend}


@pytest.mark.parametrize("kernel", CONVERTERS)
@given(k_from=st.integers(1, 6), k_to=st.integers(1, 4), log_n=st.integers(1, 13), seed=st.integers(0, 2**32))
@settings(max_examples=10)
def test_basis_conversion_matches_big_ints_and_radix2(kernel, k_from, k_to, log_n, seed):
    n = 1 << log_n
    primes = find_ntt_primes(31, k_from + k_to, n)
    from_moduli, to_moduli = primes[:k_from], primes[k_from:]
    conv = BasisConversion(from_moduli, to_moduli)
    x = _random_rows(from_moduli, n, np.random.default_rng(seed))
    x[:, 0] = np.array(from_moduli, dtype=U64) - 1
    got = CONVERTERS[kernel]().convert_basis(x, conv)
    assert np.array_equal(got, get_backend("numpy").convert_basis(x, conv))
    if n <= 16:
        assert got.tolist() == naive_basis_conversion(x.tolist(), from_moduli, to_moduli)


@pytest.mark.parametrize("kernel", ["cross-wide", "fourstep"])
def test_basis_conversion_many_limbs_and_errors(kernel):
    n = 4096 + 1024                                       # two full conversion tiles and a part
    primes = find_ntt_primes(31, 40, 1024)
    conv = BasisConversion(primes[:32], primes[32:])
    x = _random_rows(primes[:32], n, np.random.default_rng(9))
    backend = CONVERTERS[kernel]()
    assert np.array_equal(backend.convert_basis(x, conv), get_backend("numba").convert_basis(x, conv))
    with pytest.raises(ShapeError, match=r"x.shape=\(31, 5120\)"):
        backend.convert_basis(x[:31], conv)
    bad = x.copy()
    bad[3, 5] = 2**31
    with pytest.raises(ParameterError, match=r"x\[3\] holds 2147483648"):
        backend.convert_basis(bad, conv)
