"""Every rescale is exact and centred (issue 11, item 8).

Each coefficient c of a rescaled (or ModDown'd) polynomial must equal round(c / D) computed on Python
big integers from the centred CRT value (D the product of the dropped primes; D is odd, so there are
no ties), and ct×plaintext + rescale must be as precise as ct×ct + relinearize + rescale (0.5 bit).
"""
import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from crypto import CKKSContext, CKKSParameters
from crypto.ckks.precision import precision_bits, precision_stats
from crypto.keyswitch import KeySwitcher
from crypto.ring import RNSPoly


def round_div(c: int, d: int) -> int:
    """round(c / d) for odd d, on Python ints."""
    return (2 * c + d) // (2 * d)


@pytest.fixture(scope="module")
def toy():
    return CKKSContext.keygen(CKKSParameters.preset("TOY"), seed=11)


@given(level=st.integers(1, 4), seed=st.integers(0, 2**32 - 1), kind=st.sampled_from(["vector", "scalar"]))
@settings(max_examples=8, deadline=None)
def test_evaluator_rescale_is_round_of_each_coefficient(toy, level, seed, kind):
    """A level spans two primes: the rescale divides by their product with one exact rounding."""
    ev = toy.evaluator
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, toy.params.slots)
    ct = toy.encrypt(x, level=level)
    product = ev.mul(ct, x if kind == "vector" else 0.37)
    out = ev.rescale(product)
    dropped = toy.params.q_levels[level]
    assert len(dropped) == 2 and out.level == level - 1
    d = math.prod(dropped)
    for before, after in zip(product.parts, out.parts):
        assert [int(v) for v in after.to_ints()] == [round_div(int(c), d) for c in before.to_ints()]


@pytest.mark.parametrize("extra", [0, 2])
def test_keyswitch_mod_down_is_exact_at_near_ties(toy, extra):
    """ModDown by P (and by P·q_top, fused with a rescale) on quotients a hair from x.5 (c ≡ ±(⌊D/2⌋ − j)
    mod D), plus random coefficients: equal to big-integer rounding for every coefficient."""
    params, ring = toy.params, toy.ring
    switcher = KeySwitcher(params, ring)
    limbs = params.limbs_at(params.max_level)
    idx = tuple(range(limbs)) + switcher.p_idx
    big = math.prod(ring.moduli[i] for i in idx)
    d = math.prod(params.p_moduli) * math.prod(ring.moduli[limbs - extra: limbs])
    rng = np.random.default_rng(5)
    values = [int.from_bytes(rng.bytes(64), "little") % big - big // 2 for _ in range(params.n)]
    near = [k * d + s * (d // 2 - j) for k in range(-3, 3) for s in (1, -1) for j in range(8)]
    values[:len(near)] = near
    x = RNSPoly.from_ints(ring, np.array(values, dtype=object), idx, is_ntt=True)
    got = switcher.mod_down(x, extra)
    assert got.idx == tuple(range(limbs - extra))
    assert [int(v) for v in got.to_ints()] == [round_div(c, d) for c in values]


def test_plaintext_product_precision_equals_ciphertext_product_at_n14():
    """N14, secret-key encryption: |bits(ct×pt + rescale) − bits(ct×ct + relin + rescale)| <= 0.5 in the
    worst slot (``precision_bits``), and <= 0.1 on the mean over the slots."""
    ctx = CKKSContext.keygen(CKKSParameters.preset("N14"), seed=2024)
    ev = ctx.evaluator
    rng = np.random.default_rng(7)
    x, y = rng.uniform(-1, 1, ctx.params.slots), rng.uniform(-1, 1, ctx.params.slots)
    a, b = ctx.encrypt(x), ctx.encrypt(y)
    ct_ct = ctx.decrypt(a * b)                     # relinearize + rescale (fused ModDown)
    pt = ctx.encode(y, scale=float(math.prod(ctx.params.q_levels[a.level])))
    ct_pt = ctx.decrypt(ev.rescale(ev.mul(a, pt)))
    assert precision_bits(x * y, ct_ct) >= 30
    assert abs(precision_bits(x * y, ct_pt) - precision_bits(x * y, ct_ct)) <= 0.5
    assert abs(precision_stats(x * y, ct_pt).mean_bits - precision_stats(x * y, ct_ct).mean_bits) <= 0.1
