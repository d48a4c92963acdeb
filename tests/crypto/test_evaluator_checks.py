"""Evaluator behaviours the mutation run of crypto/ckks/evaluator.py found untested (issue 19;
tests/mutation/survivors.md): complex and zero scalars, scalar − ciphertext, square, metadata (length,
is_complex) through every path, the scale-alignment rule, the scale limits, evaluators sharing keys."""
import numpy as np
import pytest

from crypto.ckks.evaluator import Evaluator
from crypto.errors import ScaleError
from tests.crypto.ckks_helpers import context

TOL = 2**-20


def _ctx():
    return context()


def _x(size=8, seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, size)


def test_complex_and_zero_scalars():
    """ct + v fills every slot with v: a complex v (its imaginary part on X^(N/2)) and v = 0."""
    ctx = _ctx()
    ev, x = ctx.evaluator, _x()
    ct = ctx.encrypt(x)
    for v in (1 + 2j, -0.5j, 0, 0.0):
        out = ev.add(ct, v)
        assert np.abs(ctx.decrypt(out) - (x + v)).max() < TOL, v
    assert np.abs(ctx.decrypt(ev.mul(ct, 0.25 + 0.5j)) - x * (0.25 + 0.5j)).max() < TOL


def test_scalar_minus_ciphertext_square_relinearize():
    ctx = _ctx()
    ev, x = ctx.evaluator, _x(seed=1)
    ct = ctx.encrypt(x)
    assert np.abs(ctx.decrypt(ev.sub(2.0, ct)) - (2.0 - x)).max() < TOL
    assert np.abs(ctx.decrypt(ev.sub(x, ct))).max() < TOL
    assert np.abs(ctx.decrypt(ev.rescale(ev.square(ct))) - x * x).max() < TOL
    assert ev.relinearize(ct) is ct


def test_length_and_complexity_follow_the_operands():
    """The result's length is the longer operand's, whichever side it is on; is_complex survives neg."""
    ctx = _ctx()
    ev = ctx.evaluator
    short, long = ctx.encrypt(_x(3)), ctx.encrypt(_x(10, 2))
    assert ev.add(short, long).length == 10 and ev.add(long, short).length == 10
    assert ev.mul(short, long).length == 10
    z = ctx.encrypt(_x(4) + 1j * _x(4, 3))
    assert ev.neg(z).is_complex is True and ev.neg(short).is_complex is False
    # through a scale alignment (one operand rescaled first)
    other = ctx.encrypt(_x(10, 4), scale=2.0**45)
    assert ev.add(short, other).length == 10 and ev.add(other, short).length == 10


def test_scale_alignment_rule():
    """The operand at the higher level is brought to the other's scale; at equal levels the one with the
    smaller scale (module docstring)."""
    ctx = _ctx()
    ev, x, y = ctx.evaluator, _x(seed=5), _x(seed=6)
    top = ctx.params.max_level
    a = ctx.encrypt(x)                                          # level top, scale 2^50
    b = ctx.encrypt(y, level=top - 1, scale=2.0**48)
    for out in (ev.add(a, b), ev.add(b, a)):
        assert abs(out.scale / 2.0**48 - 1) < 2**-20 and out.level == top - 1
        assert np.abs(ctx.decrypt(out) - (x + y)).max() < TOL
    c = ctx.encrypt(y, scale=2.0**48)                           # equal levels: c has the smaller scale
    for out in (ev.add(a, c), ev.add(c, a)):
        assert abs(out.scale / 2.0**50 - 1) < 2**-20 and out.level == top - 1
        assert np.abs(ctx.decrypt(out) - (x + y)).max() < TOL


def test_scale_limits():
    """An alignment factor below 2^20 and a rescale that would leave a scale below 2^10 are ScaleErrors."""
    ctx = _ctx()
    ev = ctx.evaluator
    top = ctx.params.max_level
    a = ctx.encrypt(_x())
    tiny = ctx.encrypt(_x(), level=top - 1, scale=2.0**25)      # factor 2^25 / 2^50 · q_top ≈ 2^25: allowed
    ev.add(a, tiny)
    tinier = ctx.encrypt(_x(), level=top - 1, scale=2.0**15)   # factor ≈ 2^15 < 2^20
    with pytest.raises(ScaleError, match="cannot align scale"):
        ev.add(a, tinier)
    low = ctx.encrypt(_x(), level=1, scale=2.0**55)             # 2^55 / q_top ≈ 2^5 < 2^10
    with pytest.raises(ScaleError, match="below the minimum 2"):
        ev.rescale(low)


def test_evaluators_sharing_keys():
    """A second Evaluator on the same keys takes over a ciphertext at its own level; the encoder given is
    used, and one of the ring degree is built when none is given."""
    ctx = _ctx()
    ev = ctx.evaluator
    twin = Evaluator(ev.params, ev.ring, ev.relin_key, ev.galois_keys, ev.key_id)
    assert twin.encoder.n == ev.params.n
    ct = ctx.encrypt(_x())
    moved = twin.to_level(ct, ct.level)
    assert moved.evaluator is twin and ct.evaluator is ev
    assert ev.to_level(ct, ct.level) is ct
    with_encoder = Evaluator(ev.params, ev.ring, ev.relin_key, ev.galois_keys, ev.key_id, encoder=ev.encoder)
    assert with_encoder.encoder is ev.encoder
    x = _x(seed=9)
    assert np.abs(ctx.decrypt(twin.add(ctx.encrypt(x), 1.5)) - (x + 1.5)).max() < TOL


def test_product_scale_limit_is_exclusive():
    """A product scale of exactly 2^(log2 Q_level − 1) does not fit (the limit is strict); just below it does."""
    import math

    ev = _ctx().evaluator
    level = ev.params.max_level
    bound = ev._log_modulus(level) - 1
    scale = 2.0**bound
    while math.log2(scale) < bound:
        scale = math.nextafter(scale, math.inf)
    while math.log2(scale) > bound:
        scale = math.nextafter(scale, 0.0)
    assert math.log2(scale) == bound
    with pytest.raises(ScaleError, match="does not fit"):
        ev._check_product_scale(level, scale)
    ev._check_product_scale(level, scale * (1 - 2**-40))


def test_scales_exactly_at_the_tolerance_count_as_equal():
    """|a.scale / b.scale − 1| = 2^-45 exactly is within SCALE_TOLERANCE (inclusive): no alignment, no level spent."""
    ctx = _ctx()
    ev, x, y = ctx.evaluator, _x(seed=7), _x(seed=8)
    a = ctx.encrypt(x, scale=2.0**50 + 2.0**5)
    b = ctx.encrypt(y, scale=2.0**50)
    assert abs(a.scale / b.scale - 1) == 2.0**-45
    out = ev.add(a, b)
    assert out.level == ctx.params.max_level and out.scale == a.scale
    assert np.abs(ctx.decrypt(out) - (x + y)).max() < TOL
