"""CKKS bootstrapping (crypto/ckks/bootstrap.py): each stage against its numpy twin, the whole against numpy."""
import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from crypto import CKKSContext
from crypto.ckks.bootstrap import (BootstrapConfig, BootstrapPlan, Bootstrapper, apply_diagonals, approximation_error,
                                   bit_reversed, bsgs_split, chebyshev_fit, compose, natural_scales)
from crypto.ckks.encoder import CKKSEncoder, subring_period
from crypto.errors import KeyMissingError, LevelError, ParameterError
from crypto.params import CKKSParameters
from crypto.rlwe import Decryptor

# N = 2^12, 20 levels, sparse secret (h = 32, so K = 16): insecure, for speed.  Digits (<= 6 primes, 153
# bits) far below P (180 bits): key-switching noise stays at the level of rescaling noise.
BOOT_TOY = dict(log_n=12, log_q=[[30, 30]] + [[25, 26]] * 20, log_p=[30] * 6, log_scale=50, dnum=7,
                hamming_weight=32, insecure=True)
SPARSE = 64
_CACHE: dict = {}


def params():
    if "params" not in _CACHE:
        _CACHE["params"] = CKKSParameters.from_literal(BOOT_TOY)
    return _CACHE["params"]


def plan(slots=None) -> BootstrapPlan:
    key = ("plan", slots)
    if key not in _CACHE:
        _CACHE[key] = BootstrapPlan(params(), BootstrapConfig(slots=slots))
    return _CACHE[key]


def context() -> CKKSContext:
    """One keygen with the keys of both the full and the sparse bootstrap."""
    if "ctx" not in _CACHE:
        steps = set(plan().rotation_steps) | set(plan(SPARSE).rotation_steps)
        _CACHE["ctx"] = CKKSContext.keygen(params(), rotations=sorted(steps), conjugation=True, seed=3)
    return _CACHE["ctx"]


def slots_of(ctx, ct):
    """All N/2 slots of ``ct`` (complex), decrypted."""
    coeffs = Decryptor(ctx.params, ctx.ring, ctx._secret_key).decrypt(ct.parts)
    return ctx.encoder.decode(coeffs, ct.scale)


def bits(expected, actual) -> float:
    err = np.abs(np.asarray(actual) - np.asarray(expected)).max()
    return float(-np.log2(err)) if err > 0 else 60.0


# -- plaintext twins -------------------------------------------------------------------------------
@settings(max_examples=20, deadline=None)
@given(st.integers(2, 6), st.integers(0, 2**31))
def test_compose_and_apply_match_dense_matrices(log_m, seed):
    rng = np.random.default_rng(seed)
    m = 1 << log_m
    offsets = lambda: rng.choice(m, size=rng.integers(1, m + 1), replace=False)
    a = {int(k): rng.normal(size=m) + 1j * rng.normal(size=m) for k in offsets()}
    b = {int(k): rng.normal(size=m) + 1j * rng.normal(size=m) for k in offsets()}

    def dense(d):
        out = np.zeros((m, m), dtype=complex)
        for k, diag in d.items():
            for j in range(m):
                out[j, (j + k) % m] += diag[j]
        return out

    v = rng.normal(size=m) + 1j * rng.normal(size=m)
    assert np.allclose(apply_diagonals(a, v), dense(a) @ v)
    assert np.allclose(dense(compose(a, b, m)), dense(a) @ dense(b))


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(0, 1023), min_size=1, max_size=60, unique=True))
def test_bsgs_split_covers_every_offset_once(offsets):
    split = bsgs_split(offsets, 1024)
    got = sorted(k for terms in split.values() for _, k in terms)
    assert got == sorted(offsets)
    for shift, terms in split.items():
        for baby, k in terms:
            assert (shift + baby) % 1024 == k


def test_bsgs_split_puts_a_giant_at_zero_and_merges_wrapped_shifts():
    """A centred span of 63 offsets (a merged level of 6 radix-2 stages) takes 8 babies and 7 rotated giants (one
    giant is 0), not 8; 32 offsets h·j whose span wraps around ``total`` take 3 rotated giants, not 4."""
    total = 1 << 15
    centred = bsgs_split([j % total for j in range(-31, 32)], total)
    assert len(centred) == 8 and 0 in centred
    assert {b for terms in centred.values() for b, _ in terms} == set(range(8))
    wrapped = bsgs_split(sorted({1024 * j % total for j in range(1, 33)}), total)
    assert sorted(wrapped) == [0, 8192, 16384, 24576]


@pytest.mark.parametrize("slots", [4, SPARSE, None])
def test_coeff_to_slot_twin_is_the_inverse_embedding(slots):
    """CoeffToSlot's matrices (before the conjugation split) = embed_inverse without its bit reversal,
    times 1/2 (full) or [1/2 | -i/2] (sparse, period 2 n_s), on an n_s-periodic input."""
    p = plan(slots)
    n, total = p.slots, p.total
    rng = np.random.default_rng(1)
    z = rng.normal(size=n) + 1j * rng.normal(size=n)
    w = bit_reversed(CKKSEncoder(2 * n).embed_inverse(z))
    got = p.cts_reference(np.tile(z, total // n))
    if p.sparse:
        expected = np.tile(np.concatenate([w / 2, -0.5j * w]), total // (2 * n))
    else:
        expected = w / 2
    np.testing.assert_allclose(got, expected, atol=1e-12)


@pytest.mark.parametrize("slots", [4, SPARSE, None])
def test_slot_to_coeff_twin_is_the_embedding(slots):
    """SlotToCoeff's matrices = the special FFT of a + i·b (bit-reversed input), n_s-periodic output."""
    p = plan(slots)
    n, total = p.slots, p.total
    rng = np.random.default_rng(2)
    a, b = rng.normal(size=n), rng.normal(size=n)
    v = np.tile(np.concatenate([a, b]), total // (2 * n)) if p.sparse else a + 1j * b
    expected = np.tile(CKKSEncoder(2 * n).embed(bit_reversed(a + 1j * b)), total // n)
    if p.sparse:
        expected[n:] = 0                      # zero-padded beyond n_s, like a fresh encryption
    np.testing.assert_allclose(p.stc_reference(v), expected, atol=1e-10)


def test_stage_twins_fail_on_a_wrong_matrix():
    """The twin comparison detects a dropped diagonal (the negative case of the tests above)."""
    p = plan(SPARSE)
    t = p.cts[0]
    broken = dict(t.diags)
    broken.pop(max(broken))
    z = np.random.default_rng(0).normal(size=p.total)
    assert np.abs(apply_diagonals(broken, z) - apply_diagonals(t.diags, z)).max() > 1e-3


def test_eval_mod_twin_matches_sine_and_the_modular_reduction():
    """The interpolant vs np.cos on [-1, 1]; the whole EvalMod polynomial vs 2π(t - round(t)) for t within
    2^-9 of an integer in [-K+1, K-1]."""
    p = plan(SPARSE)
    y = np.linspace(-1, 1, 4001)
    approx = np.polynomial.chebyshev.chebval(y, p.coeffs)
    exact = np.cos(2 * np.pi * (p.k_bound * y - 0.25) / 2**p.double_angles)
    assert np.abs(approx - exact).max() < 2.0**-45
    rng = np.random.default_rng(4)
    eps = rng.uniform(-2**-9, 2**-9, 2000)
    t = rng.integers(-int(p.k_bound) + 1, int(p.k_bound), 2000) + eps
    got = p.eval_mod_reference(t / p.k_bound)
    assert np.abs(got - 2 * np.pi * eps).max() < 2.0**-30 * 2 * np.pi * 2**-9 * 2**6
    without = BootstrapPlan(params(), BootstrapConfig(slots=SPARSE, arcsin=False)).eval_mod_reference(t / p.k_bound)
    assert np.abs(without - 2 * np.pi * eps).max() > 2.0**-23     # the sine alone: (2πε)³/6


def test_plan_levels_and_errors():
    p = plan(SPARSE)
    assert p.levels_used == 1 + p.cts_count + p.eval_mod_levels + p.stc_count
    assert p.levels_left == params().max_level - p.levels_used >= 0
    assert set(p.subsum_steps) == {64, 128, 256, 512, 1024}
    with pytest.raises(LevelError, match="levels"):
        BootstrapPlan(CKKSParameters.preset("TOY"))
    with pytest.raises(ParameterError, match="slots"):
        BootstrapPlan(params(), BootstrapConfig(slots=48))
    with pytest.raises(ParameterError, match="cts_levels"):
        BootstrapConfig(cts_levels=0)
    with pytest.raises(ParameterError, match="degree above"):
        chebyshev_fit(16, 0)
    scales = natural_scales(params())
    assert scales[-1] == params().scale and all(abs(math.log2(s) - 50) < 1 for s in scales)


# -- homomorphic stages ----------------------------------------------------------------------------
def test_mod_raise_decrypts_to_m_plus_q0_times_small_integers():
    ctx, p = context(), plan(SPARSE)
    ev = ctx.evaluator
    x = np.random.default_rng(5).uniform(-1, 1, SPARSE)
    ct = ctx.encrypt(x, level=0)
    raised = Bootstrapper(ev, p).mod_raise(ct)
    assert raised.level == ctx.params.max_level
    s = ctx._secret_key.poly
    low = (ct.parts[0] + ct.parts[1] * s.keep(ct.parts[0].idx)).to_ints()
    high = (raised.parts[0] + raised.parts[1] * s.keep(raised.parts[0].idx)).to_ints()
    q0 = ctx.params.modulus_at(0)
    diff = [int(h) - int(lo) for h, lo in zip(high, low)]
    assert all(d % q0 == 0 for d in diff)
    integers = np.array([d // q0 for d in diff])
    assert np.abs(integers).max() < p.k_bound
    assert np.abs(integers).max() >= 1          # the lift is not trivial: ModRaise adds multiples of q_0


@pytest.mark.parametrize("slots", [SPARSE, None])
def test_coeff_to_slot_homomorphic_matches_twin(slots):
    ctx, p = context(), plan(slots)
    bs = Bootstrapper(ctx.evaluator, p)
    rng = np.random.default_rng(6)
    z = rng.uniform(-1, 1, p.total) + 1j * rng.uniform(-1, 1, p.total)
    if p.sparse:
        z = np.tile(z[:p.slots], p.total // p.slots)
    ct = ctx.encrypt(z, level=ctx.params.max_level - 1)
    outs = bs.coeff_to_slot(ct)
    w = p.cts_reference(z)
    expected = [w + np.conj(w)] if p.sparse else [w + np.conj(w), -1j * w + np.conj(-1j * w)]
    assert len(outs) == len(expected)
    for o, e in zip(outs, expected):
        assert o.level == ctx.params.max_level - 1 - p.cts_count
        assert bits(e, slots_of(ctx, o)) > 35


def test_eval_mod_homomorphic_matches_twin():
    ctx, p = context(), plan(SPARSE)
    bs = Bootstrapper(ctx.evaluator, p)
    rng = np.random.default_rng(7)
    t = rng.integers(-int(p.k_bound) + 1, int(p.k_bound), p.total) + rng.uniform(-2**-9, 2**-9, p.total)
    level = ctx.params.max_level - 1 - p.cts_count
    ct = ctx.encrypt(t / p.k_bound, level=level, scale=bs.natural[level])
    out = bs.eval_mod(ct)
    assert out.level == level - p.eval_mod_levels
    assert bits(p.eval_mod_reference(t / p.k_bound), slots_of(ctx, out).real) > 25


def test_slot_to_coeff_homomorphic_matches_twin():
    ctx, p = context(), plan(SPARSE)
    bs = Bootstrapper(ctx.evaluator, p)
    rng = np.random.default_rng(8)
    v = np.tile(rng.uniform(-1, 1, 2 * SPARSE), p.total // (2 * SPARSE))
    level = p.stc_count + 1
    ct = ctx.encrypt(v, level=level, scale=bs.natural[level])
    out = bs.slot_to_coeff([ct], ct.scale)
    assert out.level == 1 and out.scale == bs.natural[1]
    assert bits(p.stc_reference(v), slots_of(ctx, out)) > 30


# -- the whole bootstrap ---------------------------------------------------------------------------
@pytest.mark.parametrize("complex_values", [False, True])
def test_sparse_bootstrap_matches_input(complex_values):
    ctx, p = context(), plan(SPARSE)
    rng = np.random.default_rng(9)
    x = rng.uniform(-1, 1, SPARSE) + (1j * rng.uniform(-1, 1, SPARSE) if complex_values else 0)
    ct = ctx.evaluator.drop_level(ctx.encrypt(x), ctx.params.max_level)
    out = ctx.evaluator.bootstrap(ct, SPARSE)
    assert out.level == p.levels_left and out.scale == natural_scales(ctx.params)[p.levels_left]
    assert out.is_complex == complex_values and out.length == SPARSE
    got = ctx.decrypt(out)
    assert bits(x, got) >= p.precision_bits
    # slots beyond n_s are zero, as in a fresh encryption
    every = slots_of(ctx, out)
    assert bits(np.concatenate([x, np.zeros(p.total - SPARSE)]), every) >= p.precision_bits - 1


def test_sparse_bootstrap_twice():
    """A bootstrapped sparse ciphertext bootstraps again (its output is zero-padded beyond n_s; a periodic
    output would come back g times larger)."""
    ctx, p = context(), plan(SPARSE)
    x = np.random.default_rng(11).uniform(-1, 1, SPARSE)
    once = ctx.evaluator.bootstrap(ctx.encrypt(x, level=0), SPARSE)
    twice = ctx.evaluator.bootstrap(once, SPARSE)
    assert bits(x, ctx.decrypt(twice)) >= p.precision_bits - 1


def test_full_bootstrap_matches_input_and_allows_a_multiplication():
    ctx, p = context(), plan()
    x = np.random.default_rng(10).uniform(-1, 1, p.total)
    out = ctx.evaluator.bootstrap(ctx.encrypt(x, level=0))
    assert out.level == p.levels_left >= 1
    assert bits(x, ctx.decrypt(out)) >= p.precision_bits
    assert bits(x * x, ctx.decrypt(out * out)) >= p.precision_bits - 1


def test_kept_coeff_to_slot_plaintexts_give_the_same_ciphertext():
    """The full-period diagonals kept after a first bootstrap (uint32 residues) give a second bootstrap of the
    same ciphertext bit-identical to the first; short-period ones are not kept; another input scale re-encodes
    SlotToCoeff's."""
    ctx, p = context(), plan()
    boot = Bootstrapper(ctx.evaluator, p)
    ct = ctx.encrypt(np.random.default_rng(12).uniform(-1, 1, p.total), level=0)
    first = boot.bootstrap(ct)
    full = sum(1 for t in p.cts + p.stc for terms in t.split.values() for _, k in terms
               if subring_period(t.diags[k]) is None)             # a roll keeps the period
    assert 0 < len(boot._kept) <= full
    second = boot.bootstrap(ct)
    assert all(np.array_equal(a.data, b.data) for a, b in zip(first.parts, second.parts))
    kept = len(boot._kept)
    x = np.random.default_rng(13).uniform(-1, 1, p.total)
    other = boot.bootstrap(ctx.encrypt(x, level=0, scale=ct.scale * 1.5))
    assert len(boot._kept) == kept and bits(x, ctx.decrypt(other)) >= p.precision_bits - 1


def test_bootstrap_needs_its_keys_and_the_slot_count():
    ctx = CKKSContext.keygen(params(), rotations=[1], seed=4)
    ct = ctx.encrypt([0.5], level=0)
    with pytest.raises(KeyMissingError):
        ctx.evaluator.bootstrap(ct, SPARSE)
    big = context().encrypt(np.zeros(SPARSE + 1), level=0)
    with pytest.raises(ParameterError, match="slot count"):
        context().evaluator.bootstrap(big, SPARSE)


@pytest.mark.slow
def test_keygen_bootstrap_option_makes_the_keys():
    ctx = CKKSContext.keygen(params(), seed=5, bootstrap=SPARSE)
    assert set(plan(SPARSE).rotation_steps) <= set(ctx.rotation_steps) and ctx.has_conjugation_key
    x = np.linspace(-1, 1, SPARSE)
    out = ctx.evaluator.bootstrap(ctx.encrypt(x, level=0))     # the config the keys were made for
    assert bits(x, ctx.decrypt(out)) >= plan(SPARSE).precision_bits


def test_scalar_add_above_a_1024_bit_modulus():
    """Bootstrappable moduli exceed 2^1024: the scalar range check must not overflow float (it raised
    OverflowError in EvalMod at 24 levels)."""
    p = CKKSParameters.from_literal(dict(log_n=10, log_q=[[30, 30]] + [[25, 26]] * 20, log_p=[30] * 6, log_scale=50,
                                         dnum=7, hamming_weight=32, insecure=True))
    assert math.log2(p.modulus_at(p.max_level)) > 1024
    ctx = CKKSContext.keygen(p, seed=6)
    x = np.linspace(-1, 1, 8)
    assert bits(x + 0.5, ctx.decrypt(ctx.evaluator.add(ctx.encrypt(x), 0.5))) > 30


# -- precision --------------------------------------------------------------------------------------
# q_0 of 58 bits (q_0/Δ = 2^8 instead of 2^10: the EvalMod error is amplified 4 times less, the arcsin
# correction still leaves the sine's error at 2^-25 for a coefficient as large as Δ), 24 levels: full-slot
# bootstrap at >= 20 bits with 6 levels left.  Insecure (N = 2^12, sparse secret), like BOOT_TOY.
BOOT_PRECISE = dict(log_n=12, log_q=[[29, 29]] + [[25, 26]] * 24, log_p=[30] * 6, log_scale=50, dnum=9,
                    hamming_weight=32, insecure=True)


def test_stated_precision_counts_the_sine_error():
    """approximation_error = (q_0/Δ)·g/(2π)·e(2πΔ/(g q_0)): checked against float64 sine/arcsin at the
    worst coefficient; a q_0 only 2^4 above Δ is refused its precision (the sine's error dominates)."""
    def literal(q0):
        return CKKSParameters.from_literal(dict(log_n=12, log_q=[q0] + [[25, 26]] * 4, log_p=[30] * 2,
                                                log_scale=50, dnum=5, hamming_weight=32, insecure=True))
    for q0 in ([30, 30], [29, 29], [27, 27]):
        p = literal(q0)
        ratio = p.modulus_at(0) / p.scale
        for slots in (2048, 64):
            g = p.n // (2 * slots)
            eps = 1 / (g * ratio)                      # ε = m/q_0 for m = Δ/g
            y = np.sin(2 * np.pi * eps)
            for arcsin, approx in ((False, y), (True, y + y**3 / 6)):
                exact = ratio * g / (2 * np.pi) * abs(approx - 2 * np.pi * eps)
                stated = approximation_error(p, slots, arcsin)
                if stated > 1e-10:                     # below, float64's rounding of the sine dominates
                    assert 0.8 < stated / exact < 1.25, (q0, slots, arcsin, stated, exact)
                else:
                    assert exact < 1e-9
    assert -math.log2(approximation_error(literal([27, 27]), 2048, True)) < 10
    assert -math.log2(approximation_error(literal([29, 29]), 2048, True)) > 25


@pytest.mark.slow
def test_precise_full_bootstrap_20_bits_with_6_levels_left():
    """The full-slot bootstrap at BOOT_PRECISE: >= 20 bits stated and measured, worst slot, on random,
    constant (a coefficient as large as Δ) and alternating inputs; 6 levels left, one product after it."""
    p = CKKSParameters.from_literal(BOOT_PRECISE)
    ctx = CKKSContext.keygen(p, seed=7, bootstrap=True)
    plan_ = ctx.evaluator.bootstrap_plan()
    assert plan_.precision_bits >= 19.9 and plan_.levels_left == 6
    for x in (np.random.default_rng(12).uniform(-1, 1, plan_.slots), np.ones(plan_.slots),
              np.resize([1.0, -1.0], plan_.slots)):
        out = ctx.evaluator.bootstrap(ctx.encrypt(x, level=0))
        assert out.level == 6
        assert bits(x, ctx.decrypt(out)) >= max(20.0, plan_.precision_bits)
    assert bits(x * x, ctx.decrypt(out * out)) >= 19


# dense ternary secret (h ≈ 2N/3, K = 135 at N = 2^12): the stated precision counts the secret's weight
# (rescale noise) and EvalMod's growth with K; without them it stated 14.7 bits where 11 are measured.
BOOT_DENSE = dict(log_n=12, log_q=[[30, 30]] + [[25, 26]] * 24, log_p=[30] * 6, log_scale=50, dnum=8,
                  insecure=True)


def test_stated_precision_counts_the_dense_secret():
    sparse = BootstrapPlan(CKKSParameters.from_literal(dict(BOOT_DENSE, hamming_weight=32)))
    dense = BootstrapPlan(CKKSParameters.from_literal(BOOT_DENSE))
    assert dense.k_bound > 100 and sparse.k_bound == 16
    assert dense.precision_bits < sparse.precision_bits - 6


@pytest.mark.slow
def test_dense_secret_full_bootstrap_meets_its_stated_precision():
    p = CKKSParameters.from_literal(BOOT_DENSE)
    cfg = BootstrapConfig(arcsin=False)
    ctx = CKKSContext.keygen(p, seed=3, bootstrap=cfg)
    plan_ = ctx.evaluator.bootstrap_plan()
    assert 8 < plan_.precision_bits < 11
    for seed in (13, 14):
        x = np.random.default_rng(seed).uniform(-1, 1, plan_.slots)
        out = ctx.evaluator.bootstrap(ctx.encrypt(x, level=0))
        assert out.level == plan_.levels_left
        assert bits(x, ctx.decrypt(out)) >= plan_.precision_bits


@pytest.mark.slow  # 6-9 s: the default run stays under 10 minutes on 2 cores (pytest -m slow runs it)
def test_bootstrap_config_survives_to_bytes():
    """from_bytes restores the config the keys were made for (public and full contexts, pickling); a
    context without one stays without; a corrupted config is a SerializationError."""
    import pickle

    from crypto.errors import SerializationError
    from crypto.key_records import _bootstrap_config

    cfg = BootstrapConfig(slots=SPARSE, cts_levels=2, arcsin=False)
    ctx = context()
    ctx.bootstrap_config = cfg                  # the keys cover it (context() holds both plans' keys)
    try:
        for blob in (ctx.to_bytes(), ctx.to_bytes(include_secret_key=True)):
            assert CKKSContext.from_bytes(blob).bootstrap_config == cfg
        assert pickle.loads(pickle.dumps(ctx.public_context())).bootstrap_config == cfg
    finally:
        ctx.bootstrap_config = None
    assert CKKSContext.from_bytes(ctx.to_bytes()).bootstrap_config is None
    with pytest.raises(SerializationError, match="bootstrap config"):
        _bootstrap_config({"bootstrap": {"slots": 64, "cts_levels": 0}})
    with pytest.raises(SerializationError, match="bootstrap config"):
        _bootstrap_config({"bootstrap": {"bogus": 1}})


# -- baby-step giant-step Chebyshev evaluation --------------------------------------------------------
@settings(max_examples=40, deadline=None)
@given(st.integers(1, 6), st.integers(0, 2**31), st.data())
def test_chebyshev_split_is_exact(log_n, seed, data):
    """Σ c_k T_k = q·T_n + r (the split the BSGS evaluation recurses on), checked with numpy's Chebyshev."""
    from crypto.ckks.bootstrap import chebyshev_split

    n = 1 << log_n
    d = data.draw(st.integers(n, 2 * n - 1))
    c = np.random.default_rng(seed).normal(size=d + 1)
    q, r = chebyshev_split(c, n)
    assert len(q) == d - n + 1 and len(r) == n
    x = np.linspace(-1, 1, 201)
    tn = np.polynomial.chebyshev.chebval(x, np.eye(n + 1)[n])
    cv = np.polynomial.chebyshev.chebval
    assert np.allclose(cv(x, c), cv(x, q) * tn + cv(x, r), atol=1e-11)
    with pytest.raises(ParameterError, match="degree"):
        chebyshev_split(c, 2 * n)


def test_bsgs_polynomial_matches_the_naive_twin():
    """_poly (baby-step giant-step) against _poly_naive (every T_k) and numpy: the same precision with one
    level less (degree 39 in 6 levels, ``bsgs_schedule``); a polynomial with a wrong coefficient is detected."""
    ctx, p = context(), plan(SPARSE)
    bs = Bootstrapper(ctx.evaluator, p)
    y = np.random.default_rng(13).uniform(-1, 1, p.total)
    level = ctx.params.max_level - 4
    ct = ctx.encrypt(y, level=level, scale=bs.natural[level])
    fast, naive = bs._poly(ct, p.coeffs), bs._poly_naive(ct, p.coeffs)
    depth = math.ceil(math.log2(p.degree))
    assert fast.level == level - p.poly_levels == level - depth              # one level less than the twin
    assert naive.level == level - depth - 1
    assert fast.scale == bs.natural[fast.level] and naive.scale == bs.natural[naive.level]
    expected = np.polynomial.chebyshev.chebval(y, p.coeffs)
    got = slots_of(ctx, fast).real
    assert bits(expected, got) > 30 and bits(slots_of(ctx, naive).real, got) > 30
    wrong = p.coeffs.copy()
    wrong[17] += 1e-6
    assert bits(expected, slots_of(ctx, bs._poly(ct, wrong)).real) < 21


def test_bsgs_schedule_levels_and_products():
    """Depth ceil(log2 d) where a baby count allows it (the naive evaluation takes one more), fewer products."""
    from crypto.ckks.bootstrap import bsgs_schedule

    assert bsgs_schedule(39) == (8, 6, 13)
    for d in range(2, 130):
        b, levels, products = bsgs_schedule(d)
        depth = max(1, math.ceil(math.log2(d)))
        assert levels in (depth, depth + 1) and products <= d - 1
        assert (b == 0) == (products == d - 1 and levels == depth + 1)


# Δ = 2^60 (q_0 of three 23-bit primes, as the N16_BOOT preset; levels of two 30-bit primes: at N = 2^12 they
# reach 2^60) on an insecure N = 2^12 dense-secret ring: CoeffToSlot takes ModRaise's output without a rescale
BOOT_60 = dict(log_n=12, log_q=[[23, 23, 23]] + [[30, 30]] * 18, log_p=[31] * 7, log_scale=60, dnum=7, insecure=True)


@pytest.mark.slow
def test_delta_60_bootstrap_saves_the_raise_level():
    p = CKKSParameters.from_literal(BOOT_60)
    cfg = BootstrapConfig(slots=SPARSE, arcsin=False, encapsulation=32)
    ctx = CKKSContext.keygen(p, seed=4, bootstrap=cfg)
    plan_ = ctx.evaluator.bootstrap_plan()
    assert plan_.raise_levels == 0 and plan().raise_levels == 1          # Δ = 2^50 keeps its rescale
    assert plan_.levels_used == plan_.cts_count + plan_.eval_mod_levels + plan_.stc_count
    assert plan_.operation_counts()[0] == ("mod_raise", p.max_level, {"rotations": 1})   # the switch back from s'
    assert plan_.operation_counts()[2][:2] == ("coeff_to_slot", p.max_level)
    x = np.random.default_rng(17).uniform(-1, 1, SPARSE)
    out = ctx.evaluator.bootstrap(ctx.encrypt(x, level=0))
    assert out.level == plan_.levels_left == p.max_level - plan_.levels_used
    assert bits(x, ctx.decrypt(out)) >= max(plan_.noise_bits, 20)       # random slots: the noise term alone
