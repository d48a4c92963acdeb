"""The special-FFT encoder against an O(N²) Vandermonde embedding, round trips and bad input."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from crypto.ckks.encoder import CKKSEncoder
from crypto.errors import HEError, ParameterError, ScaleError, ShapeError
from tests.reference.naive_embedding import naive_embed, naive_encode

log_ns = st.integers(min_value=2, max_value=9)


@given(log_n=log_ns, seed=st.integers(0, 2**32 - 1))
def test_decode_matches_naive_embedding(log_n, seed):
    n = 1 << log_n
    coeffs = np.random.default_rng(seed).integers(-2**20, 2**20, size=n)
    fast = CKKSEncoder(n).decode(coeffs, 2.0**10)
    assert np.allclose(fast * 2.0**10, naive_embed(coeffs), rtol=0, atol=1e-6 * n)


@given(log_n=log_ns, seed=st.integers(0, 2**32 - 1), complex_input=st.booleans())
def test_encode_matches_naive_solve(log_n, seed, complex_input):
    n = 1 << log_n
    rng = np.random.default_rng(seed)
    values = rng.uniform(-1, 1, n // 2) + (1j * rng.uniform(-1, 1, n // 2) if complex_input else 0)
    fast = CKKSEncoder(n).encode(values, 2.0**30)
    # the dense solve has rounding error of its own: allow a unit in the last place of the rounding
    assert np.abs(fast - naive_encode(values, n, 2.0**30)).max() <= 1


@given(log_n=st.integers(2, 14), length=st.integers(1, 64), seed=st.integers(0, 2**32 - 1),
       complex_input=st.booleans())
def test_round_trip_precision(log_n, length, seed, complex_input):
    n = 1 << log_n
    length = min(length, n // 2)
    rng = np.random.default_rng(seed)
    values = rng.uniform(-1, 1, length) + (1j * rng.uniform(-1, 1, length) if complex_input else 0)
    enc = CKKSEncoder(n)
    scale = 2.0**40
    decoded = enc.decode(enc.encode(values, scale), scale)
    assert decoded.shape == (n // 2,)
    # rounding to integers costs at most n/2 · 0.5 / Δ per slot; padding stays zero
    assert np.abs(decoded[:length] - values).max() < n / scale
    assert np.abs(decoded[length:]).max(initial=0) < n / scale


@given(log_n=st.integers(2, 12))
def test_embed_inverse_is_inverse(log_n):
    enc = CKKSEncoder(1 << log_n)
    u = np.random.default_rng(log_n).normal(size=enc.slots) * (1 + 1j)
    assert np.allclose(enc.embed(enc.embed_inverse(u)), u)
    assert np.allclose(enc.embed_inverse(enc.embed(u)), u)


def test_large_scale_gives_exact_python_ints():
    enc = CKKSEncoder(16)
    coeffs = enc.encode([0.5, -0.25], 2.0**80)
    assert coeffs.dtype == object and all(isinstance(c, int) for c in coeffs)
    assert np.allclose(enc.decode(coeffs, 2.0**80)[:2], [0.5, -0.25])


def test_real_polynomial_for_real_and_complex_inputs():
    enc = CKKSEncoder(32)
    z = np.array([1 + 2j, -0.5j, 3.0])
    coeffs = enc.encode(z, 2.0**20)
    assert coeffs.dtype == np.int64 and coeffs.shape == (32,)
    assert np.allclose(enc.decode(coeffs, 2.0**20)[:3], z, atol=1e-4)


@pytest.mark.parametrize("values, error, words", [
    (np.zeros(9), ShapeError, ["9", "8"]),
    (np.zeros((2, 2)), ShapeError, ["(2, 2)"]),
    ([1.0, np.nan], ParameterError, ["values[1]", "nan"]),
    ([np.inf], ParameterError, ["values[0]", "inf"]),
    (["a", "b"], ParameterError, ["dtype"]),
])
def test_bad_values(values, error, words):
    with pytest.raises(error) as info:
        CKKSEncoder(16).encode(values, 2.0**20)
    assert all(w in str(info.value) for w in words)
    assert isinstance(info.value, (HEError, ValueError))


@pytest.mark.parametrize("scale", [0.5, -3, float("nan"), float("inf"), "x"])
def test_bad_scale(scale):
    with pytest.raises(ScaleError, match="scale"):
        CKKSEncoder(16).encode([1.0], scale)


def test_coefficients_that_overflow_the_modulus():
    with pytest.raises(ScaleError, match=r"modulus of 2\^40"):
        CKKSEncoder(16).encode([1000.0], 2.0**35, modulus_bits=40)


@pytest.mark.parametrize("n", [0, 3, 6, 2])
def test_bad_ring_degree(n):
    with pytest.raises(ParameterError, match=f"n={n}"):
        CKKSEncoder(n)


@pytest.fixture(scope="module")
def toy_context():
    from tests.crypto.ckks_helpers import context
    return context("TOY")


@settings(max_examples=12, deadline=None)
@given(st.integers(0, 20), st.integers(0, 2), st.integers(0, 2**32 - 1))
def test_periodic_vectors_encode_in_the_subring(toy_context, log_period, level, seed):
    """Evaluator.encode of a vector with a short period: the polynomial of the full encoding (its spread
    coefficients, every other coefficient zero), exactly, and it decodes to the vector; a period of half the
    slots or more takes the full encoding (same bits as the encoder's)."""
    from crypto.ring import RNSPoly
    ctx = toy_context
    params, ev = ctx.params, ctx.evaluator
    slots = params.slots
    period = 1 << (log_period % (slots.bit_length()))
    rng = np.random.default_rng(seed)
    pattern = rng.uniform(-1, 1, period) + 1j * rng.uniform(-1, 1, period)
    values = np.tile(pattern, slots // period)
    level = min(level, params.max_level)
    pt = ev.encode(values, level, 2.0 ** 30)
    full = CKKSEncoder(params.n).encode(values, 2.0 ** 30)
    if period >= slots // 2:
        assert np.array_equal(pt.poly.data, RNSPoly.from_ints(ev.ring, full, pt.poly.idx, is_ntt=True).data)
        return
    small = CKKSEncoder(2 * max(period, 2)).encode(np.tile(pattern, max(period, 2) // period), 2.0 ** 30)
    spread = np.zeros(params.n, dtype=np.int64)
    spread[::params.n // len(small)] = small
    assert np.array_equal(pt.poly.data, RNSPoly.from_ints(ev.ring, spread, pt.poly.idx, is_ntt=True).data)
    assert np.max(np.abs(full - spread)) <= 1        # the full FFT's float noise only
    assert np.allclose(CKKSEncoder(params.n).decode(spread, 2.0 ** 30), values, atol=1e-9)
    if level == 2:
        ones = ctx.encrypt(np.ones(slots), level=2)
        assert np.allclose(ctx.decrypt(ev.rescale(ev.mul(ones, pt))), values, atol=1e-4)
