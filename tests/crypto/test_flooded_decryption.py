"""Shared decryptions (IND-CPA-D): an exact decryption m + e of a complex ciphertext gives away the secret key
(c1·s = m + e - c0); a flooded one (crypto.ckks.flooding) does not, and keeps the precision it states."""
import math

import numpy as np
import pytest

from crypto import CKKSContext
from crypto.ckks.flooding import (STATISTICAL_SECURITY, FloodingPrecisionWarning, flood_bits_for,
                                  flooded_precision_bits, imaginary_noise_bits)
from crypto.errors import ParameterError
from crypto.ring import RNSPoly
from crypto.sampling import Sampler
from tests.crypto.ckks_helpers import context


def _recover_key(ctx: CKKSContext, ct, values) -> np.ndarray:
    """The Li–Micciancio attack: re-encode the decrypted slots to m + e (exact integers: a complex ciphertext
    decodes bijectively), then s = (m + e - c0) / c1 slot by slot in NTT form, back to centred coefficients."""
    d = np.round(ctx.encoder.coefficients(values, ct.scale)).astype(np.int64)
    c0, c1 = ct.parts
    target = RNSPoly.from_ints(ctx.ring, d, c0.idx, is_ntt=True) - c0
    rows = []
    for row_t, row_c, q in zip(target.data, c1.data, c0.moduli):
        inv = np.array([pow(int(c), q - 2, q) for c in row_c], dtype=object)
        rows.append(np.array((row_t.astype(object) * inv) % q, dtype=np.uint64))
    s = RNSPoly(ctx.ring, np.array(rows, dtype=np.uint64), c0.idx, True)
    return np.array([int(v) for v in s.to_ints()], dtype=np.int64)


def _complex_ciphertext(ctx, rng):
    """A level-0 complex ciphertext of small values (the re-encoding stays exact in float64)."""
    x = (rng.uniform(-1, 1, ctx.params.slots) + 1j * rng.uniform(-1, 1, ctx.params.slots)) * 2.0**-12
    return x, ctx.encrypt(x, level=0)


def test_exact_decryption_reveals_the_key_flooded_does_not():
    ctx = context("TOY")
    rng = np.random.default_rng(1)
    x, ct = _complex_ciphertext(ctx, rng)
    secret = np.asarray(ctx._secret_key.coeffs, dtype=np.int64)
    # positive control: one exact decryption gives the whole secret key
    assert np.array_equal(_recover_key(ctx, ct, ctx.decrypt(ct)), secret)
    # flooded (sized from the measured noise, s = 30 bits): the same attack gets garbage
    noise = ctx.measure_noise_bits(ct, x)
    shared = ctx.decrypt_flooded(ct, noise_bits=noise)
    guess = _recover_key(ctx, ct, shared.values)
    assert not np.array_equal(guess, secret)
    assert np.mean(guess == secret) < 0.01 and np.max(np.abs(guess)) > 2**20  # not even close to ternary
    assert shared.flood_bits == pytest.approx(noise + STATISTICAL_SECURITY / 2 + 0.5 * math.log2(12))
    assert np.max(np.abs(shared.values - x)) < 2.0**-shared.precision_bits * 8  # still the values


def test_flooded_precision_matches_the_stated_figure():
    ctx = context("TOY")
    rng = np.random.default_rng(2)
    x = rng.uniform(-1, 1, ctx.params.slots)
    ct = ctx.encrypt(x)
    exact = ctx.decrypt(ct)
    shared = ctx.decrypt_flooded(ct)  # real ciphertext: noise measured from the imaginary slots
    measured = -math.log2(float(np.std(shared.values - exact)))
    assert shared.precision_bits == pytest.approx(
        flooded_precision_bits(shared.flood_bits, ct.scale, ctx.params.n))
    assert measured == pytest.approx(shared.precision_bits, abs=0.25)
    assert shared.precision_bits > 15  # scale 2^50: about 20 bits are left after a fresh encryption
    # each shared decryption draws a fresh flood
    assert not np.array_equal(ctx.decrypt(ct, flood_bits="auto"), ctx.decrypt(ct, flood_bits="auto"))


def test_imaginary_noise_estimate_bounds_the_true_noise():
    """For real ciphertexts, fresh and after a multiply, the bound read from the imaginary slots is at least
    the noise measured against the known result."""
    ctx = context("TOY")
    rng = np.random.default_rng(3)
    x = rng.uniform(-1, 1, ctx.params.slots)
    for ct, expected in ((ctx.encrypt(x), x), (ctx.encrypt(x) * ctx.encrypt(x), x * x)):
        measured = ctx.measure_noise_bits(ct, expected)
        slots = ctx.encoder.decode(ctx._decrypt_coefficients(ct), ct.scale)
        estimate = imaginary_noise_bits(slots, ct.scale, ctx.params.n)
        assert measured <= estimate <= measured + 4


def test_flooding_bad_options_are_refused():
    ctx = context("TOY")
    rng = np.random.default_rng(4)
    _, complex_ct = _complex_ciphertext(ctx, rng)
    real_ct = ctx.encrypt(rng.uniform(-1, 1, 8))
    with pytest.raises(ParameterError, match="noise_bits"):
        ctx.decrypt(complex_ct, flood_bits="auto")  # no noise-only imaginary part to measure
    for bad in (-1, 60, float("nan"), "lots", True):
        with pytest.raises(ParameterError, match="flood_bits"):
            ctx.decrypt(real_ct, flood_bits=bad)
    with pytest.raises(ParameterError, match="statistical_security"):
        ctx.decrypt(real_ct, flood_bits="auto", statistical_security=0)
    with pytest.raises(ParameterError, match="queries"):
        flood_bits_for(10, queries=0)
    for sigma in (0, -1.0, float("inf"), 2.0**60):
        with pytest.raises(ParameterError, match="sigma"):
            Sampler(1).gaussian(8, sigma=sigma)
    with pytest.warns(FloodingPrecisionWarning):
        ctx.decrypt(real_ct, flood_bits=45)  # as large as the scale: nothing left
