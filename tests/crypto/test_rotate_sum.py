"""Hoisted ModDown across rotations (Evaluator.rotate_sum, used by every BSGS linear transform): the sum of
rotations with one ModDown equals the sum of separately rotated ciphertexts (numpy reference, precision
asserted), at every level; its kernel against the permutation-then-add twin; bad input refused by name."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from crypto._ntt_kernels import add_permuted_into, permute_rows
from crypto.errors import LevelError, ParameterError, ScaleError
from crypto.keyswitch import galois_element
from tests.crypto.ckks_helpers import ROTATIONS, bits, uniform


@given(rows=st.integers(1, 4), log_n=st.integers(1, 8), g=st.integers(0, 1000), seed=st.integers(0, 2**32 - 1))
@settings(max_examples=40, deadline=None)
def test_add_permuted_into_equals_permute_then_add(rows, log_n, g, seed):
    rng = np.random.default_rng(seed)
    n = 1 << log_n
    q = np.array([(1 << 31) - 1, 2013265921, 65537, 12289][:rows], dtype=np.uint64)
    acc = (rng.integers(0, 1 << 31, (rows, n), dtype=np.uint64) % q[:, None])
    a = (rng.integers(0, 1 << 31, (rows, n), dtype=np.uint64) % q[:, None])
    perm = rng.permutation(n).astype(np.int64)
    expected = (acc + permute_rows(a, perm)) % q[:, None]        # Python-side reduction: the twin
    assert np.array_equal(add_permuted_into(acc.copy(), a, perm, q), expected)


@pytest.mark.parametrize("level_drop", [0, 2])
def test_rotate_sum_equals_sum_of_rotations(ctx, level_drop):
    ev, slots = ctx.evaluator, ctx.params.n // 2
    rng = np.random.default_rng(level_drop)
    steps = ROTATIONS + [0]
    xs = [uniform(rng, slots) for _ in steps]
    cts = [ev.drop_level(ctx.encrypt(x), level_drop) if level_drop else ctx.encrypt(x) for x in xs]
    expected = sum(np.roll(x, -k) for x, k in zip(xs, steps))
    out = ev.rotate_sum((ct, k) for ct, k in zip(cts, steps))        # a generator: consumed one term at a time
    separate = None
    for ct, k in zip(cts, steps):
        r = ev.rotate(ct, k)
        separate = r if separate is None else ev.add(separate, r)
    assert out.level == cts[0].level and out.scale == cts[0].scale
    got, reference = ctx.decrypt(out).real, ctx.decrypt(separate).real
    assert bits(expected, got) >= bits(expected, reference) - 1.5
    assert bits(expected, got) >= 20


def test_rotate_sum_of_unrotated_terms_is_their_sum(ctx):
    ev, slots = ctx.evaluator, ctx.params.n // 2
    x = uniform(np.random.default_rng(3), slots)
    ct = ctx.encrypt(x)
    assert bits(2 * x, ctx.decrypt(ev.rotate_sum([(ct, 0), (ct, slots)])).real) >= 20


def test_rotate_sum_refuses_bad_terms(ctx):
    ev, slots = ctx.evaluator, ctx.params.n // 2
    x = uniform(np.random.default_rng(4), slots)
    ct = ctx.encrypt(x)
    with pytest.raises(ParameterError, match="at least one term"):
        ev.rotate_sum([])
    with pytest.raises(LevelError, match="level"):
        ev.rotate_sum([(ct, 1), (ev.drop_level(ct, 1), 5)])
    with pytest.raises(ScaleError, match="scale"):
        ev.rotate_sum([(ct, 1), (ev.mul(ct, 1.0), 5)])
    with pytest.raises(ParameterError):
        ev.rotate_sum([(ct, 1.5)])
    assert galois_element(2, ctx.params.n) not in ctx.evaluator.galois_keys.keys
    with pytest.raises(Exception, match="no Galois key"):
        ev.rotate_sum([(ct, 2)])
