"""EvalMod's fused products (crypto/ckks/evaluator.py ``mul_add_rescale``, ``mul_int``, ``mul_int_add``;
crypto/ckks/bootstrap.py ``Bootstrapper.fused_products``): each against its unfused twin."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from crypto import CKKSContext
from crypto.ckks.bootstrap import BootstrapConfig, BootstrapPlan, Bootstrapper, apply_diagonals, forward_stages
from crypto.errors import LevelError, ParameterError, ScaleError
from crypto.params import CKKSParameters
from crypto.rlwe import Decryptor

# tests/crypto/test_bootstrap.py's insecure ring: N = 2^12, 20 levels, sparse secret (h = 32)
BOOT_TOY = dict(log_n=12, log_q=[[30, 30]] + [[25, 26]] * 20, log_p=[30] * 6, log_scale=50, dnum=7,
                hamming_weight=32, insecure=True)
_CACHE: dict = {}


def context() -> CKKSContext:
    if "ctx" not in _CACHE:
        _CACHE["ctx"] = CKKSContext.keygen(CKKSParameters.from_literal(BOOT_TOY), seed=5)
    return _CACHE["ctx"]


def slots(ctx, ct):
    coeffs = Decryptor(ctx.params, ctx.ring, ctx._secret_key).decrypt(ct.parts)
    return ctx.encoder.decode(coeffs, ct.scale)


def bits(expected, actual) -> float:
    err = np.abs(np.asarray(actual) - np.asarray(expected)).max()
    return float(-np.log2(err)) if err > 0 else 60.0


@settings(max_examples=6, deadline=None)
@given(st.integers(-2**70, 2**70), st.integers(1, 12), st.integers(0, 2**31))
def test_mul_int_and_mul_int_add_are_the_residue_products(c, level, seed):
    """One-pass integer products: bit for bit the ``mul_scalars`` product and the sum with it."""
    ctx = context()
    ev = ctx.evaluator
    rng = np.random.default_rng(seed)
    ct = ctx.encrypt(rng.uniform(-1, 1, 8), level=level + 1)
    acc = ctx.encrypt(rng.uniform(-1, 1, 8), level=level)
    expected = [p.mul_scalars([c] * len(p.idx)) for p in ct.parts]
    got = ev.mul_int(ct, c)
    assert got.scale == ct.scale and all(np.array_equal(g.data, e.data) for g, e in zip(got.parts, expected))
    low = ev.to_level(ct, level)
    summed = ev.mul_int_add(acc, ct, c)
    assert summed.level == level and summed.scale == acc.scale
    for s, a, p in zip(summed.parts, acc.parts, low.parts):
        assert np.array_equal(s.data, (a + p.mul_scalars([c] * len(p.idx))).data)


def test_integer_products_refuse_bad_input():
    ctx = context()
    ev = ctx.evaluator
    ct = ctx.encrypt([0.5], level=3)
    with pytest.raises(ParameterError, match="c="):
        ev.mul_int(ct, 1.5)
    with pytest.raises(ParameterError, match="c="):
        ev.mul_int_add(ct, ct, True)
    with pytest.raises(LevelError, match="below"):
        ev.mul_int_add(ct, ev.to_level(ct, 2), 3)


@pytest.mark.parametrize("factor,add_factor,use_scalar", [(1, 1, False), (2, -3, False), (2, 1, True)])
def test_mul_add_rescale_matches_the_separate_operations(factor, add_factor, use_scalar):
    """rescale(f·a·b + g·add) with one ModDown: the value of mul, integer products, add and rescale, at their
    level and scale, no less precise (one rounding of x/(P·q) instead of x/P's then q's; with a factor the key
    switch sees f·d2's digits, so the noise differs)."""
    ctx = context()
    ev = ctx.evaluator
    rng = np.random.default_rng(17)
    x, y, z = (rng.uniform(-1, 1, ctx.params.slots) for _ in range(3))
    level = 10
    a, b = ctx.encrypt(x, level=level), ctx.encrypt(y, level=level + 2)
    prod_scale = a.scale * b.scale
    add = -0.75 if use_scalar else ctx.encrypt(z, level=level + 1, scale=prod_scale)
    fused = ev.mul_add_rescale(a, b, add, factor=factor, add_factor=add_factor)
    plain = ev.mul_int(ev.mul(a, b), factor)
    plain = ev.add(plain, add * add_factor if use_scalar else ev.mul_int(ev.to_level(add, level), add_factor))
    plain = ev.rescale(plain)
    assert fused.level == plain.level == level - 1 and fused.scale == plain.scale
    expected = factor * x * y + add_factor * (-0.75 if use_scalar else z)
    got, twin = slots(ctx, fused).real, slots(ctx, plain).real
    assert bits(expected, got) >= bits(expected, twin) - 1 > 25
    raw = ev.mul_add_rescale(a, b, add, factor=factor, add_factor=add_factor, rescale=False)
    assert raw.level == level and raw.scale == prod_scale and bits(expected, slots(ctx, raw).real) > 25


def test_mul_add_rescale_refuses_bad_operands():
    ctx = context()
    ev = ctx.evaluator
    a = ctx.encrypt([0.5], level=5)
    with pytest.raises(ScaleError, match="add at scale"):
        ev.mul_add_rescale(a, a, ctx.encrypt([0.1], level=5))
    with pytest.raises(LevelError, match="below the product"):
        ev.mul_add_rescale(a, a, ctx.encrypt([0.1], level=4, scale=a.scale**2))
    with pytest.raises(ParameterError, match="two ciphertexts"):
        ev.mul_add_rescale(a, ev.encode([0.5], 5, a.scale))
    with pytest.raises(ParameterError, match="add of type"):
        ev.mul_add_rescale(a, a, "x")
    with pytest.raises(ParameterError, match="factor"):
        ev.mul_add_rescale(a, a, factor=2.0)


def test_fused_eval_mod_matches_its_twin_with_fewer_rescales():
    """EvalMod with fused products (the default) against the separate operations (``fused_products`` False)
    and the numpy twin: the same level and scale, no less precise, and only the quotient leaves of the
    baby-step giant-step split rescale on their own (2 instead of 12 at degree 28's schedule and more)."""
    ctx = context()
    plan = BootstrapPlan(ctx.params, BootstrapConfig(slots=64))
    bs = Bootstrapper(ctx.evaluator, plan)
    rng = np.random.default_rng(7)
    t = rng.integers(-int(plan.k_bound) + 1, int(plan.k_bound), plan.total) + rng.uniform(-2**-9, 2**-9, plan.total)
    level = ctx.params.max_level - 1 - plan.cts_count
    ct = ctx.encrypt(t / plan.k_bound, level=level, scale=bs.natural[level])
    calls = []
    rescale = ctx.evaluator.rescale

    class Counting:
        def __getattr__(self, name):
            return getattr(ctx.evaluator, name)

        def rescale(self, c):
            calls.append(c.level)
            return rescale(c)

    bs.ev = Counting()
    expected = plan.eval_mod_reference(t / plan.k_bound)
    outs = {}
    for fused in (True, False):
        calls.clear()
        bs.fused_products = fused
        outs[fused] = bs.eval_mod(ct)
        outs[fused, "rescales"] = len(calls)
    assert outs[True].level == outs[False].level == level - plan.eval_mod_levels
    assert outs[True].scale == outs[False].scale
    fast, twin = slots(ctx, outs[True]).real - expected, slots(ctx, outs[False]).real - expected
    # the worst slot varies by ~0.7 bit between noise draws; the typical error (std) by ~0.2
    assert bits(0, fast) >= bits(0, twin) - 1 and bits(0, fast) > 25
    assert -np.log2(np.std(fast)) >= -np.log2(np.std(twin)) - 0.3
    assert outs[True, "rescales"] < outs[False, "rescales"] / 2


@pytest.mark.parametrize("levels", [3, 4])
def test_slot_to_coeff_groups_mirror_coeff_to_slot(levels):
    """Where the FFT's stages do not split evenly, SlotToCoeff's groups mirror CoeffToSlot's (larger groups last):
    the same butterfly spans, so the same rotation steps (no keys of their own), the smaller group first."""
    p = BootstrapPlan(context().params, BootstrapConfig(cts_levels=levels, stc_levels=levels))
    assert (p.total.bit_length() - 1) % levels            # 11 stages: uneven in 3 and 4 groups

    def steps(transforms):
        return {s for t in transforms for s in t.steps}
    assert steps(p.stc) == steps(p.cts)
    assert len(p.stc[0].diags) == len(p.cts[-1].diags) < len(p.stc[-1].diags) * 2
    x = np.random.default_rng(3).uniform(-1, 1, p.total) + 0j
    expected = x
    for stage in forward_stages(p.total, p.total):                     # the product of the stages, one by one
        expected = apply_diagonals(stage, expected)
    assert np.allclose(p.stc_reference(x), expected)


@pytest.mark.slow
def test_switch_back_from_all_digits_equals_the_streamed_switch():
    """``Encapsulator.from_sparse`` (c0 lifted into the key switch, its digits at once in the transient scratch):
    bit for bit c0 + the streamed ``KeySwitcher.switch``'s part b and its part a, at the top level and below."""
    from tests.crypto.test_encapsulation import config, context as dense_context
    ctx = dense_context()
    enc = ctx.evaluator.bootstrapper(config()).encapsulator()
    rng = np.random.default_rng(21)
    for level in (ctx.params.max_level, 7):
        ct = ctx.encrypt(rng.uniform(-1, 1, 16), level=level)
        c0, c1 = ct.parts
        d0, d1 = enc.switcher.switch(c1, enc.keys.from_sparse)
        got = enc.from_sparse(c0, c1)
        assert np.array_equal(got[0].data, (c0 + d0).data) and np.array_equal(got[1].data, d1.data)
