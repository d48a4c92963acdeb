"""CROSS transforms (Barrett, BAT, MAT) equal their naive modular twins (issue 3)."""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from crypto import CKKSContext, CKKSParameters, CKKSParametersLiteral
from crypto.cross import CrossBackend, barrett_reduce, bat_mulmod
from crypto.errors import HEError
from crypto.modarith import find_ntt_primes
from crypto.ntt import BasisConversion, NTTTables, get_backend

from ..reference.naive_ntt import naive_negacyclic_ntt

Q31 = st.integers(3, 2**31 - 1)


def _residues(moduli, n, seed):
    rng = np.random.default_rng(seed)
    return np.array([rng.integers(0, q, n) for q in moduli], dtype=np.uint64)


# ------------------------------------------------------------------ Barrett
@given(st.lists(st.integers(0, 2**64 - 1), min_size=1, max_size=40), Q31)
def test_barrett_equals_python_mod_over_the_full_range(xs, q):
    got = barrett_reduce(np.array(xs, dtype=np.uint64), q)
    assert [int(v) for v in got] == [x % q for x in xs]


@pytest.mark.parametrize("q", [3, 97, 2**31 - 1, find_ntt_primes(31, 1, 2**16)[0]])
def test_barrett_largest_inputs(q):
    xs = [0, q - 1, q, 2**62, (q - 1) ** 2, 2**64 - 1, 2**64 - q]
    assert [int(v) for v in barrett_reduce(np.array(xs, dtype=np.uint64), q)] == [x % q for x in xs]


def test_barrett_refuses_bad_input():
    with pytest.raises(HEError, match="2\\^31"):
        barrett_reduce(np.array([1], dtype=np.uint64), 2**31 + 11)
    with pytest.raises(HEError):
        barrett_reduce(np.array([-1]), 97)


# ------------------------------------------------------------------ BAT
@given(st.lists(st.integers(0, 2**31 - 1), min_size=1, max_size=30), Q31, st.integers(0, 2**40),
       st.sampled_from([4, 8, 16]))
def test_bat_mulmod_equals_python(xs, q, c, width):
    x = np.array([v % q for v in xs], dtype=np.uint64)
    got = bat_mulmod(x, c, q, chunk_bits=width)
    assert [int(v) for v in got] == [(int(v) * c) % q for v in x]


def test_bat_paper_width_by_hand():
    # 4-bit chunks of x = 0xAB: x·c ≡ 0xB·c + 0xA·(c·16 mod q) (mod q)
    q, c, x = 97, 45, 0xAB
    assert int(bat_mulmod(np.array([x], dtype=np.uint64), c, q, chunk_bits=4)[0]) == (x * c) % q


@pytest.mark.parametrize("width", [27, 31])
def test_unsafe_chunk_width_refused_naming_the_limit(width):
    with pytest.raises(HEError, match="2\\^53"):
        bat_mulmod(np.array([1, 2], dtype=np.uint64), 5, 2**31 - 1, chunk_bits=width)
    with pytest.raises(HEError, match=str(width)):
        CrossBackend(chunk_bits=width)


def test_bad_chunk_widths_refused():
    for bad in (0, -3, 8.5, "8", 40):
        with pytest.raises(HEError):
            CrossBackend(chunk_bits=bad)


# ------------------------------------------------------------------ MAT: NTT bit-identical to radix-2
def _backends():
    return [get_backend("cross"), CrossBackend(chunk_bits=8), get_backend("auto")]


@given(st.integers(4, 11), st.integers(1, 3), st.integers(0, 2**32))
def test_cross_ntt_bit_identical_to_radix2(log_n, limbs, seed):
    n = 1 << log_n
    rng = np.random.default_rng(seed)
    bits = int(rng.integers(20, 32))
    moduli = find_ntt_primes(bits, limbs, n)
    tables = NTTTables(n, moduli)
    a = _residues(moduli, n, seed)
    ref = get_backend("radix2")
    fwd = ref.forward(a, tables)
    for backend in _backends():
        assert np.array_equal(backend.forward(a, tables), fwd)
        assert np.array_equal(backend.inverse(fwd, tables), a)


@pytest.mark.parametrize("log_n", [4, 5, 8])
def test_radix2_against_the_quadratic_definition(log_n):
    n = 1 << log_n
    moduli = find_ntt_primes(30, 2, n)
    a = _residues(moduli, n, log_n)
    tables = NTTTables(n, moduli)
    want = np.array([naive_negacyclic_ntt(a[i], q) for i, q in enumerate(moduli)], dtype=np.uint64)
    for name in ("radix2", "cross"):
        assert np.array_equal(get_backend(name).forward(a, tables), want)


@pytest.mark.slow
@pytest.mark.parametrize("log_n", [14, 16])
def test_cross_ntt_bit_identical_large(log_n):
    n = 1 << log_n
    moduli = find_ntt_primes(31, 2, n)
    tables = NTTTables(n, moduli)
    a = _residues(moduli, n, log_n)
    fwd = get_backend("radix2").forward(a, tables)
    for backend in (get_backend("cross"), CrossBackend(chunk_bits=8)):
        assert np.array_equal(backend.forward(a, tables), fwd)
        assert np.array_equal(backend.inverse(fwd, tables), a)


def test_basis_conversion_bit_identical():
    n = 64
    src, dst = find_ntt_primes(31, 5, n), find_ntt_primes(29, 3, n)
    conv = BasisConversion(src, dst)
    x = _residues(src, n, 3)
    want = get_backend("radix2").convert_basis(x, conv)
    for backend in _backends():
        assert np.array_equal(backend.convert_basis(x, conv), want)


# ------------------------------------------------------------------ the context: backend selection
@pytest.fixture(scope="module")
def contexts():
    params = CKKSParameters.from_literal(CKKSParametersLiteral(
        log_n=10, log_q=[[30, 30], [25, 26], [25, 26]], log_p=[30, 30], log_scale=50, dnum=3, insecure=True))
    return {name: CKKSContext.keygen(params, rotations=[1, -2], seed=99, backend=name)
            for name in ("radix2", "cross")}


def test_he_multiply_and_rotation_identical_limbs_under_both_backends(contexts):
    x = np.random.default_rng(1).uniform(-1, 1, 100)
    blobs = {}
    for name, ctx in contexts.items():
        ev = ctx.evaluator
        ct = ctx.encrypt(x)
        blobs[name] = [ct.to_bytes(), ev.mul(ct, ct).to_bytes(), ev.rotate(ct, 1).to_bytes(),
                       ev.rotate(ev.rescale(ev.mul(ct, ct)), -2).to_bytes()]
    assert blobs["radix2"] == blobs["cross"]
    ctx = contexts["cross"]
    y = ctx.decrypt(ctx.evaluator.rotate(ctx.encrypt(x) * ctx.encrypt(x), 1))
    assert np.max(np.abs(y[:99] - np.roll(x * x, -1)[:99])) < 1e-5


def test_backend_switched_on_an_existing_context(contexts):
    ctx = contexts["radix2"]
    cross = ctx.with_backend("cross")
    assert cross.backend == "cross" and ctx.backend in ("numba", "radix2")
    x = np.linspace(-1, 1, 30)
    ct = ctx.encrypt(x)
    assert ctx.evaluator.mul(ct, ct).to_bytes() == cross.evaluator.mul(ct, ct).to_bytes()
    assert ctx.evaluator.rotate(ct, 1).to_bytes() == cross.evaluator.rotate(ct, 1).to_bytes()


def test_backend_per_call_on_the_ring(contexts):
    ring = contexts["radix2"].ring
    idx = tuple(range(3))
    a = _residues(ring.moduli[:3], ring.n, 5)
    assert np.array_equal(ring.ntt(a, idx, backend="cross"), ring.ntt(a, idx))
    assert np.array_equal(ring.intt(a, idx, backend="cross"), ring.intt(a, idx, backend="radix2"))


def test_auto_is_the_default_and_unknown_backends_are_refused():
    ctx = CKKSContext.keygen("TOY", seed=3)
    assert ctx.backend == "auto"
    with pytest.raises(HEError, match="radix2"):
        CKKSContext.keygen("TOY", seed=3, backend="fastest")
    with pytest.raises(HEError):
        get_backend("gpu")
