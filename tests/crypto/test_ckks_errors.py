"""Bad input raises a typed library error that names the parameter, the value and the limit."""
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crypto import (CKKSContext, ContextMismatchError, HEError, KeyMissingError, LevelError, ParameterError,
                    ScaleError, ShapeError)
from crypto.errors import ValueRangeError, WrapAroundWarning


@pytest.fixture(scope="module")
def ct(ctx):
    return ctx.encrypt(np.linspace(-1, 1, 64))


def test_too_many_values(ctx):
    with pytest.raises(ShapeError, match="2049 values; the slot count is 2048"):
        ctx.encrypt(np.zeros(2049))
    with pytest.raises(ShapeError, match=r"shape \(2, 3\)"):
        ctx.encrypt(np.zeros((2, 3)))
    with pytest.raises(ShapeError, match="2049"):
        ctx.evaluator.add(ctx.encrypt([1.0]), np.zeros(2049))


@pytest.mark.parametrize("bad", [[1.0, np.nan], [np.inf], [0.0, -np.inf, 1.0]])
def test_nan_and_inf(ctx, ct, bad):
    with pytest.raises(ParameterError, match="not finite"):
        ctx.encrypt(bad)
    with pytest.raises(ParameterError, match="not finite"):
        ctx.evaluator.mul(ct, np.array(bad))
    with pytest.raises(ParameterError, match="not finite"):
        ctx.evaluator.add(ct, bad[-1] if not np.isfinite(bad[-1]) else np.nan)


def test_rotation_without_key(ctx, ct):
    with pytest.raises(KeyMissingError) as info:
        ctx.evaluator.rotate(ct, 2)
    message = str(info.value)
    assert "step 2" in message and "[-3, 1, 5, 7, 100]" in message
    with pytest.raises(KeyMissingError, match="step 4"):
        ctx.evaluator.rotate_hoisted(ct, [1, 4])
    no_conj = CKKSContext.keygen("TOY", seed=1)
    with pytest.raises(KeyMissingError, match="conjugation"):
        no_conj.evaluator.conjugate(no_conj.encrypt([1.0]))
    with pytest.raises(ParameterError, match="step"):
        ctx.evaluator.rotate(ct, 1.5)


def test_rescale_at_level_zero_and_multiplying_past_the_last_level(ctx, ct):
    ev = ctx.evaluator
    bottom = ev.to_level(ct, 0)
    with pytest.raises(LevelError, match="level 0"):
        ev.rescale(bottom)
    with pytest.raises(LevelError, match="past the last level"):
        ev.mul(bottom, bottom)
    with pytest.raises(LevelError, match="past the last level"):
        ev.mul_rescale(bottom, bottom)
    with pytest.raises(LevelError, match="levels=5"):
        ev.drop_level(ct, 5)
    with pytest.raises(LevelError, match=r"level=7 not in \[0, 4\]"):
        ctx.encrypt([1.0], level=7)


def test_scale_overflow(ctx, ct):
    with pytest.raises(ScaleError, match="modulus"):
        ctx.encrypt([1.0], scale=2.0**300)
    with pytest.raises(ScaleError, match="modulus"):
        ctx.encrypt(np.full(2048, 1e6), level=0, scale=2.0**50)
    ev = ctx.evaluator
    square = ev.mul(ct, ct)                         # scale 2^100, not rescaled
    fourth = ev.mul(square, square)                 # scale 2^200 still fits the 260-bit modulus
    with pytest.raises(ScaleError, match=r"product scale 2\^300.*limit 2\^259"):
        ev.mul(fourth, square)
    with pytest.raises(ScaleError, match="scale"):
        ctx.encrypt([1.0], scale=0.5)
    with pytest.raises(ScaleError, match="below the minimum"):
        ev.rescale(ctx.encrypt([1.0], scale=2.0**30))
    with pytest.raises(ScaleError, match="scalar"):
        ev.add(ct, 1e300)


def test_mixing_parameter_sets_and_key_sets(ctx, ct):
    other_keys = CKKSContext.keygen("TOY", rotations=[1], seed=99)
    foreign = other_keys.encrypt([1.0])
    with pytest.raises(ContextMismatchError, match="key set"):
        ctx.evaluator.add(ct, foreign)
    with pytest.raises(ContextMismatchError, match="key set"):
        ctx.decrypt(foreign)
    with pytest.raises(ContextMismatchError, match="key set"):
        ct + foreign
    small = CKKSContext.keygen({"log_n": 5, "log_q": [[30, 30], [25, 25]], "log_p": [30, 30],
                                "log_scale": 50, "insecure": True}, seed=1)
    with pytest.raises(ContextMismatchError, match="parameters"):
        ctx.evaluator.mul(ct, small.encrypt([1.0]))
    with pytest.raises(ContextMismatchError, match="parameters"):
        ctx.evaluator.add(ct, small.encode([1.0]))
    with pytest.raises(ContextMismatchError, match="parameters"):
        ctx.decode(small.encode([1.0]))


def test_decrypting_without_the_secret_key(ctx, ct):
    with pytest.raises(KeyMissingError, match="public context"):
        ctx.public_context().decrypt(ct)
    with pytest.raises(ParameterError, match="public context"):
        ctx.public_context().encrypt([1.0], use_secret_key=True)


def test_operators_need_an_evaluator(ctx, ct):
    detached = ct.with_evaluator(None)
    with pytest.raises(KeyMissingError, match="no evaluator"):
        detached + detached
    with pytest.raises(ParameterError, match="operand of type str"):
        ctx.evaluator.add(ct, "1")
    with pytest.raises(ParameterError, match="Ciphertext"):
        ctx.evaluator.rotate(np.zeros(4), 1)
    with pytest.raises(ParameterError, match="Ciphertext"):
        ctx.decrypt(np.zeros(4))


def test_plaintext_scale_mismatch(ctx, ct):
    with pytest.raises(ScaleError, match="plaintext scale"):
        ctx.evaluator.add(ct, ctx.encode([1.0], scale=2.0**40))


def test_bad_keygen_arguments():
    with pytest.raises(ParameterError, match="rotation step"):
        CKKSContext.keygen("TOY", rotations=[1, "2"])
    with pytest.raises(ParameterError, match="preset"):
        CKKSContext.keygen("N99")
    with pytest.raises(ParameterError, match="backend"):
        CKKSContext.keygen("TOY", backend="gpu")
    with pytest.raises(ParameterError, match="params"):
        CKKSContext.keygen(42)


def test_every_error_is_an_he_error(ctx):
    for call in (lambda: ctx.encrypt(np.zeros(5000)), lambda: ctx.encrypt([np.nan]),
                 lambda: ctx.public_context().decrypt(ctx.encrypt([1.0]))):
        with pytest.raises(HEError):
            call()


def test_wrong_argument_types_are_library_errors(ctx, ct):
    with pytest.raises(ParameterError, match="steps"):
        ctx.evaluator.rotate_hoisted(ct, 5)
    with pytest.raises(ParameterError, match="Plaintext"):
        ctx.decode(ct)
    with pytest.raises(ParameterError, match="CKKSContext"):
        type(ct).from_bytes(ct.to_bytes(), None)
    with pytest.raises(LevelError, match="level"):
        ctx.encrypt([1.0], level=1.5)
    with pytest.raises(ParameterError, match="dtype"):
        ctx.encrypt(None)
    with pytest.raises(ParameterError, match="dtype"):
        ctx.evaluator.mul(ct, [1, "a"])
    with pytest.raises(ParameterError, match="rotations"):
        CKKSContext.keygen("TOY", rotations=5)


# ---------------------------------------------------------------- values that would not decrypt at level 0
def _unchecked_encrypt(ctx, values):
    """A ciphertext of ``values`` made without the value bound (what encrypt did before it checked)."""
    from crypto import Ciphertext
    from crypto.rlwe import Encryptor
    from crypto.sampling import Sampler
    pt = ctx.encode(values)
    parts = Encryptor(ctx.params, ctx.ring, Sampler(11), ctx.public_key, None).encrypt(pt)
    return Ciphertext(parts, pt.level, pt.scale, pt.length, pt.is_complex, ctx.params.fingerprint, ctx.key_id,
                      ctx.evaluator)


@pytest.mark.parametrize("values, shown", [([2e6], "2e+06"), ([0.5, -3e3], "3000 (at index 1)"),
                                           ([400 + 400j], "565.685"), ([1e300], "1e+300")])
def test_encrypt_refuses_values_beyond_the_level0_bound(ctx, values, shown):
    limit = ctx.params.value_bound()                # (1 - 2^-6) q_0 / (2 Δ) = 503.942 at TOY
    assert f"{limit:.6g}" == "503.942"
    for call in (lambda: ctx.encrypt(values), lambda: ctx.encrypt(values, level=0, scale=2.0**40),
                 lambda: ctx.public_context().encrypt(values)):
        with pytest.raises(ValueRangeError) as info:
            call()
        message = str(info.value)
        assert shown in message and "503.942 = (1 - 2^-6) q_0 / (2 scale)" in message and "2^60.00" in message
        assert isinstance(info.value, ParameterError) and isinstance(info.value, ScaleError)


def test_encrypting_a_plaintext_checks_its_values(ctx):
    pt = ctx.encode([1.0, 2e6])                     # encode alone may hold it (top level: 260 bits)
    with pytest.raises(ValueRangeError, match=r"plaintext values: max\|x\| = 2e\+06 \(at index 1\)"):
        ctx.encrypt(pt)


def test_the_limit_is_sharp(ctx):
    limit = ctx.params.value_bound()
    below = np.nextafter(limit, 0)
    np.testing.assert_allclose(ctx.decrypt(ctx.encrypt([below, -below])), [below, -below], atol=1e-6)
    with pytest.raises(ValueRangeError, match="not below the limit"):
        ctx.encrypt([0.0, -limit])


@pytest.mark.parametrize("bad", [[1e300], [-1e308], [1e308 + 1e308j], [np.nan], [np.inf], [1.0, -np.inf],
                                 [complex(np.nan, 1)]])
def test_huge_and_non_finite_values_raise_without_numpy_warnings(ctx, bad):
    with warnings.catch_warnings():
        warnings.simplefilter("error")               # a numpy RuntimeWarning would fail here
        with pytest.raises(HEError):
            ctx.encrypt(bad)
        with pytest.raises(HEError):
            ctx.encrypt(bad, level=0, scale=2.0**40)
        with pytest.raises(HEError):
            ctx.encode(bad)
        with pytest.raises(HEError):
            ctx.evaluator.mul(ctx.encrypt([1.0]), np.array(bad))


def test_decrypt_warns_when_the_result_wrapped(ctx):
    ct = _unchecked_encrypt(ctx, [2e6])              # the audit's case: fine at the top level ...
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_allclose(ctx.decrypt(ct), [2e6], rtol=1e-9)
    with pytest.warns(WrapAroundWarning, match=r"at level 0 .* wrapped modulo Q_0") as record:
        wrong = ctx.decrypt(ctx.evaluator.to_level(ct, 0))     # ... wrong by far more than 1e5 at level 0
    assert abs(wrong[0] - 2e6) > 1e5 and "503.94" in str(record[0].message)
    x = np.random.default_rng(3).uniform(-400, 400, ctx.params.slots)
    ev = ctx.evaluator
    square = ev.to_level(ev.rescale(ev.mul(ctx.encrypt(x), ctx.encrypt(x))), 0)   # x² up to 1.6e5: wraps
    with pytest.warns(WrapAroundWarning):
        ctx.decrypt(square)


def test_large_values_in_few_slots_are_not_wraps(ctx):
    """Slot magnitude is not the test: 250000 in one slot has coefficients of ~122 and decrypts right."""
    ev = ctx.evaluator
    ct = ctx.encrypt([500.0])
    square = ev.to_level(ev.rescale(ev.mul(ct, ct)), 0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_allclose(ctx.decrypt(square), [250000.0], atol=1e-3)


@settings(max_examples=20, deadline=None)
@given(st.lists(st.floats(-1.0, 1.0), min_size=1, max_size=40), st.sampled_from([0, 2, 4]),
       st.booleans())
def test_accepted_values_decrypt_at_level_0_without_warning(ctx, fractions, level, constant):
    """Everything encrypt accepts decrypts at level 0, right and without a WrapAroundWarning."""
    limit = np.nextafter(ctx.params.value_bound(), 0)
    x = np.full(ctx.params.slots, fractions[0] * limit) if constant else np.array(fractions) * limit
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ct = ctx.evaluator.to_level(ctx.encrypt(x, level=level), 0)
        np.testing.assert_allclose(ctx.decrypt(ct), x, atol=1e-6)
