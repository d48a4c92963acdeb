"""Bad input raises a typed library error that names the parameter, the value and the limit."""
import numpy as np
import pytest

from crypto import (CKKSContext, ContextMismatchError, HEError, KeyMissingError, LevelError, ParameterError,
                    ScaleError, ShapeError)
from tests.crypto.ckks_helpers import context


@pytest.fixture(scope="module")
def ctx():
    return context("TOY")


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
