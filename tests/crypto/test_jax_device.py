"""Device ciphertexts (crypto.ckks.jax_device) against the host evaluator, limb for limb, on CPU XLA.

A small insecure ring (N = 2^10, three levels, dnum = 3 so the lower levels have partial digits) keeps
keygen and the XLA compilations within seconds; every device result is brought back with ``to_host`` and
compared with the numba evaluator's ciphertext array for array, level and scale included.
"""

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

jax = pytest.importorskip("jax", reason="jax is not installed (pip install 'jax[cpu]'): the device path is optional")

from crypto import CKKSContext  # noqa: E402
from crypto.ckks import jax_device as jd  # noqa: E402
from crypto.ckks.linear import bsgs_sum  # noqa: E402
from crypto.errors import ContextMismatchError, KeyMissingError, LevelError, ParameterError, ScaleError  # noqa: E402

LITERAL = dict(log_n=10, log_q=[[30, 30]] + [[25, 26]] * 3, log_p=[30, 30, 30], log_scale=50, dnum=3, insecure=True)
SLOTS = 2**9
D = 16                                        # the matrix-vector product of the default tests (64: slow)
EXTRA_STEPS = [1, 5, -3, 100]
GPU_PLATFORMS = ("gpu", "cuda", "rocm")
HAS_GPU = any(d.platform in GPU_PLATFORMS for d in jax.devices())


def _steps(d):
    groups = jd.bsgs_diagonals(np.eye(d), SLOTS)
    return {i for _, pairs in groups for i, _ in pairs} | {m for m, _ in groups}


@pytest.fixture(scope="module")
def ctx():
    steps = sorted((_steps(D) | set(EXTRA_STEPS)) - {0})
    return CKKSContext.keygen(LITERAL, rotations=steps, conjugation=True, seed=11, backend="numba")


@pytest.fixture(scope="module")
def dev(ctx):
    return jd.DeviceEvaluator(ctx)


def assert_same(host, device_ct, dev):
    got = dev.to_host(device_ct)
    assert (got.level, got.scale, got.length, got.is_complex) == (host.level, host.scale, host.length, host.is_complex)
    for g, h in zip(got.parts, host.parts):
        assert g.idx == h.idx
        assert np.array_equal(g.data, h.data)


def _pair(ctx, seed, level=None):
    rng = np.random.default_rng(seed)
    x, y = rng.uniform(-1, 1, SLOTS), rng.uniform(-1, 1, SLOTS)
    return ctx.encrypt(x, level=level), ctx.encrypt(y, level=level), x, y


def test_round_trip_and_keys_on_device(ctx, dev):
    a, _, _, _ = _pair(ctx, 0)
    assert_same(a, dev.to_device(a), dev)
    keys = 1 + len(ctx.galois_keys.keys)
    assert dev.keys_bytes == keys * 2 * ctx.relin_key.b.nbytes


@settings(max_examples=3)
@given(seed=st.integers(0, 2**32 - 1))
def test_add_sub_plain_match_host(ctx, dev, seed):
    ev = ctx.evaluator
    a, b, _, _ = _pair(ctx, seed)
    da, db = dev.to_device(a), dev.to_device(b)
    assert_same(ev.add(a, b), dev.add(da, db), dev)
    assert_same(ev.sub(a, b), dev.sub(da, db), dev)
    pt = ev.encode(np.random.default_rng(seed).uniform(-1, 1, SLOTS), a.level, float(ev._top_modulus(a.level)))
    assert_same(ev.mul(a, pt), dev.mul_plain(da, dev.plaintext(pt)), dev)
    assert_same(ev.rescale(ev.mul(a, pt)), dev.rescale(dev.mul_plain(da, dev.plaintext(pt))), dev)
    pt2 = ev.encode(np.arange(SLOTS) / SLOTS, a.level, a.scale)
    assert_same(ev.add(a, pt2), dev.add(da, dev.plaintext(pt2)), dev)


@settings(max_examples=3)
@given(seed=st.integers(0, 2**32 - 1))
def test_mul_relinearize_rescale_match_host(ctx, dev, seed):
    """ct×ct + relin with the fused rescale (one ModDown by P·q_top) at the top level."""
    ev = ctx.evaluator
    a, b, x, y = _pair(ctx, seed)
    got = dev.mul_rescale(dev.to_device(a), dev.to_device(b))
    assert_same(ev.mul_rescale(a, b), got, dev)
    assert np.abs(ctx.decrypt(dev.to_host(got)) - x * y).max() < 2**-20


@pytest.mark.slow
@settings(max_examples=2)
@given(seed=st.integers(0, 2**32 - 1))
def test_mul_relinearize_partial_digit_matches_host(ctx, dev, seed):
    """ct×ct + relin, not rescaled, at level 1, where the last key-switching digit is partial."""
    ev = ctx.evaluator
    a, b, _, _ = _pair(ctx, seed, level=1)
    assert_same(ev.mul(a, b), dev.mul(dev.to_device(a), dev.to_device(b)), dev)


@pytest.mark.slow
@pytest.mark.parametrize("level", [3, 2, 1])
def test_mul_every_level_matches_host(ctx, dev, level):
    ev = ctx.evaluator
    a, b, _, _ = _pair(ctx, level, level=level)
    da, db = dev.to_device(a), dev.to_device(b)
    assert_same(ev.mul(a, b), dev.mul(da, db), dev)
    assert_same(ev.mul_rescale(a, b), dev.mul_rescale(da, db), dev)


@settings(max_examples=3)
@given(seed=st.integers(0, 2**32 - 1),
       steps=st.lists(st.sampled_from(EXTRA_STEPS + [4, 8]), min_size=3, max_size=3, unique=True))
def test_rotations_hoisted_match_host(ctx, dev, seed, steps):
    """Three rotations sharing one ModUp (a zero step and a step past N/2 among the cases below)."""
    ev = ctx.evaluator
    a, _, x, _ = _pair(ctx, seed)
    da = dev.to_device(a)
    host = ev.rotate_hoisted(a, steps)
    got = dev.rotate_hoisted(da, steps)
    assert list(got) == list(host)
    for k in host:
        assert_same(host[k], got[k], dev)
    k = steps[0]
    assert np.abs(ctx.decrypt(dev.to_host(got[k])) - np.roll(x, -k)).max() < 2**-20


@pytest.mark.slow
def test_rotation_zero_step_and_full_turn(ctx, dev):
    ev = ctx.evaluator
    a, _, _, _ = _pair(ctx, 2)
    da = dev.to_device(a)
    got = dev.rotate_hoisted(da, [0, SLOTS, 5])
    host = ev.rotate_hoisted(a, [0, SLOTS, 5])
    for k in host:
        assert_same(host[k], got[k], dev)
    assert_same(ev.rotate(a, 5), dev.rotate(da, 5), dev)


@pytest.mark.slow  # 4 s; the default run keeps the multiply/relinearize/rescale twin
@settings(max_examples=2)
@given(seed=st.integers(0, 2**32 - 1), c=st.integers(-2**70, 2**70))
def test_bootstrap_primitives_match_host(ctx, dev, seed, c):
    """What the device bootstrap adds to the evaluator: neg, to_level, integer and scalar products and sums,
    the product by i = X^(N/2), conjugation, ModRaise, each equal to the host's."""
    from types import SimpleNamespace
    from crypto.ckks.bootstrap import Bootstrapper
    ev = ctx.evaluator
    a, _, x, _ = _pair(ctx, seed)
    da = dev.to_device(a)
    assert_same(ev.neg(a), dev.neg(da), dev)
    assert_same(ev.to_level(a, 1), dev.to_level(da, 1), dev)
    assert dev.to_level(da, a.level) is da
    host_int = dataclasses.replace(a, parts=tuple(p.mul_scalars([c] * len(p.idx)) for p in a.parts), scale=3.0)
    assert_same(host_int, dev.mul_int(da, c, scale=3.0), dev)
    assert_same(ev.add(a, 0.25), dev.add(da, 0.25), dev)
    assert_same(ev.sub(a, 1.0), dev.sub(da, 1.0), dev)
    assert_same(ev.add(a, 0.5 - 0.25j), dev.add(da, 0.5 - 0.25j), dev)
    host_i = Bootstrapper._times_i(SimpleNamespace(params=ctx.params, _mono={}), a)
    assert_same(host_i, dev.times_i(da), dev)
    conj = dev.conjugate(dev.times_i(da))
    assert_same(ev.conjugate(host_i), conj, dev)
    assert np.abs(ctx.decrypt(dev.to_host(conj)) + 1j * x).max() < 2**-20
    # ModRaise needs no bootstrap plan: the host method on a stand-in with the evaluator and parameters
    host_raised = Bootstrapper.mod_raise(SimpleNamespace(ev=ev, params=ctx.params), a)
    assert_same(host_raised, dev.mod_raise(da), dev)


def test_bootstrap_primitives_refuse_bad_input(ctx, dev):
    da = dev.to_device(ctx.encrypt(np.zeros(4), level=1))
    with pytest.raises(LevelError, match="level=2"):
        dev.to_level(da, 2)
    with pytest.raises(ParameterError, match="integer"):
        dev.mul_int(da, 1.5)
    other = CKKSContext.keygen(LITERAL, rotations=[1], seed=98, backend="numba")
    with pytest.raises(KeyMissingError, match="conjugation"):
        jd.DeviceEvaluator(other).conjugate(jd.DeviceEvaluator(other).to_device(other.encrypt(np.zeros(4))))


def _groups(ctx, matrix, level):
    ev = ctx.evaluator
    return [(m, [(i, ev.encode(v, level, ctx.params.scale)) for i, v in pairs])
            for m, pairs in jd.bsgs_diagonals(matrix, SLOTS)]


def _matvec_case(ctx, dev, d, seed):
    ev = ctx.evaluator
    rng = np.random.default_rng(seed)
    matrix, x = rng.uniform(-1, 1, (d, d)), rng.uniform(-1, 1, d)
    ct = ctx.encrypt(jd.tiled(x, SLOTS))
    groups = _groups(ctx, matrix, ct.level)
    babies = sorted({i for _, pairs in groups for i, _ in pairs})
    host = ev.rescale(bsgs_sum(ev, ev.rotate_hoisted(ct, babies), groups))
    got = dev.matvec(dev.to_device(ct), dev.linear(groups))
    assert_same(host, got, dev)
    assert np.abs(ctx.decrypt(dev.to_host(got))[:d] - matrix @ x).max() < 2**-20


@pytest.mark.slow
def test_matvec_matches_host(ctx, dev):
    _matvec_case(ctx, dev, D, 5)


@pytest.mark.slow
def test_matvec_64_matches_host():
    ctx = CKKSContext.keygen(LITERAL, rotations=sorted(_steps(64) - {0}), seed=12, backend="numba")
    _matvec_case(ctx, jd.DeviceEvaluator(ctx), 64, 6)


@given(log_d=st.integers(0, 6), baby=st.integers(1, 8), seed=st.integers(0, 2**32 - 1))
def test_bsgs_diagonals_naive_twin(log_d, baby, seed):
    """Σ_m rot_m(Σ_i rot_i(x) ⊙ pt_(m,i)) with plain np.roll equals M·x on every tile."""
    d = 2**log_d
    baby = min(baby, d)
    rng = np.random.default_rng(seed)
    matrix, x = rng.uniform(-1, 1, (d, d)), rng.uniform(-1, 1, d)
    xt = jd.tiled(x, SLOTS)
    total = np.zeros(SLOTS)
    for m, pairs in jd.bsgs_diagonals(matrix, SLOTS, baby):
        total += np.roll(sum(np.roll(xt, -i) * v for i, v in pairs), -m)
    assert np.allclose(total, np.tile(matrix @ x, SLOTS // d), atol=1e-12)


def test_bsgs_diagonals_refuses_bad_shapes():
    with pytest.raises(ParameterError, match="square"):
        jd.bsgs_diagonals(np.ones((2, 3)), SLOTS)
    with pytest.raises(ParameterError, match="divide slots"):
        jd.bsgs_diagonals(np.ones((3, 3)), SLOTS)
    with pytest.raises(ParameterError, match="baby"):
        jd.bsgs_diagonals(np.ones((4, 4)), SLOTS, baby=5)


@pytest.mark.slow  # 6-9 s: the default run stays under 10 minutes on 2 cores (pytest -m slow runs it)
def test_small_head_primes_under_31_bit_special_primes_match_host():
    """The N16 preset's shape at N = 2^10: 31-bit special primes over 23-28-bit ciphertext primes, so the
    divide-and-round multiplies residues mod a 31-bit prime by constants mod much smaller primes (a
    Barrett product there left about half the limbs unreduced; Shoup products are exact)."""
    lit = dict(log_n=10, log_q=[[30, 30]] + [[23, 28]] * 2 + [[24, 27]] + [[25, 26]], log_p=[31] * 3,
               log_scale=50, dnum=3, insecure=True)
    small = CKKSContext.keygen(lit, rotations=[1], seed=14, backend="numba")
    dev = jd.DeviceEvaluator(small)
    ev = small.evaluator
    rng = np.random.default_rng(14)
    a, b = small.encrypt(rng.uniform(-1, 1, 8)), small.encrypt(rng.uniform(-1, 1, 8))
    da, db = dev.to_device(a), dev.to_device(b)
    assert_same(ev.mul_rescale(a, b), dev.mul_rescale(da, db), dev)
    assert_same(ev.rotate(a, 1), dev.rotate(da, 1), dev)
    low = ev.to_level(a, 2)
    assert_same(ev.rescale(ev.mul(low, low)), dev.rescale(dev.mul(dev.to_device(low), dev.to_device(low))), dev)


def test_operations_make_no_host_transfers(ctx, dev):
    """After the first call (constants uploaded, functions compiled) an operation moves nothing between
    host and device: keys and constants stay there."""
    a, b, _, _ = _pair(ctx, 3)
    da, db = dev.to_device(a), dev.to_device(b)
    dev.mul_rescale(da, db).block_until_ready()
    dev.rotate(da, 5).block_until_ready()
    with jax.transfer_guard("disallow_explicit"):          # explicit uploads (device_put) too
        dev.mul_rescale(da, db).block_until_ready()
        dev.rotate(da, 5).block_until_ready()


def test_errors_name_the_problem(ctx, dev):
    a, _, _, _ = _pair(ctx, 4)
    da = dev.to_device(a)
    zero = dev.to_device(ctx.encrypt(np.zeros(4), level=0))    # operands at other levels are aligned (the host's
    with pytest.raises(LevelError, match="level 0"):           # rule); past the last level a product is refused
        dev.mul(da, zero)
    with pytest.raises(KeyMissingError, match="step 7"):
        dev.rotate(da, 7)
    with pytest.raises(ParameterError, match="integer"):
        dev.rotate(da, 1.5)
    with pytest.raises(ParameterError, match="DeviceCiphertext"):
        dev.add(da, a)
    with pytest.raises(ParameterError, match="Ciphertext"):
        dev.to_device(np.zeros(3))
    with pytest.raises(ScaleError, match="level 0"):           # scales that differ need a level to align them
        dev.add(zero, jd.DeviceCiphertext(zero.data, 0, zero.scale * 3, 1, False))
    other = CKKSContext.keygen(LITERAL, seed=99, backend="numba")
    with pytest.raises(ContextMismatchError):
        dev.to_device(other.encrypt(np.zeros(4)))
    with pytest.raises(LevelError, match="level 0"):
        dev.rescale(zero)


# tests/crypto/test_bootstrap.py's insecure ring: N = 2^12, 20 levels, sparse secret (h = 32)
BOOT_TOY = dict(log_n=12, log_q=[[30, 30]] + [[25, 26]] * 20, log_p=[30] * 6, log_scale=50, dnum=7,
                hamming_weight=32, insecure=True)


def _bootstrap_case(device=None):
    """The whole bootstrap (64 sparse slots) on the device equals the host bootstrap limb for limb; the second
    one (constants uploaded, ~60 functions compiled: minutes on CPU XLA) moves nothing between host and device."""
    from crypto.ckks.bootstrap import BootstrapConfig, plan_for
    from crypto.params import CKKSParameters
    params = CKKSParameters.from_literal(BOOT_TOY)
    plan = plan_for(params, BootstrapConfig(slots=64))
    ctx = CKKSContext.keygen(params, rotations=list(plan.rotation_steps), conjugation=True, seed=3,
                             backend="numba")
    x = np.random.default_rng(13).uniform(-1, 1, 64)
    ct = ctx.encrypt(x, level=0)
    dev = jd.DeviceEvaluator(ctx, device=device)
    dct = dev.to_device(ct)
    boot = ctx.evaluator.bootstrapper(64)      # the device runs the separate operations and single hoisting
    boot.double_hoisting = boot.fused_products = False
    host = ctx.evaluator.bootstrap(ct, 64)
    assert_same(host, dev.bootstrap(dct, 64), dev)
    with jax.transfer_guard("disallow_explicit"):
        again = dev.bootstrap(dct, 64).block_until_ready()
    assert_same(host, again, dev)
    assert np.abs(ctx.decrypt(dev.to_host(again)) - x).max() < 2.0**-plan.precision_bits


@pytest.mark.slow
def test_sparse_bootstrap_matches_host_and_stays_on_device():
    _bootstrap_case()


@pytest.mark.skipif(not HAS_GPU, reason="needs a GPU: device results on the GPU against the host evaluator")
def test_gpu_matches_host(ctx):
    gpu = next(d for d in jax.devices() if d.platform in GPU_PLATFORMS)
    dev = jd.DeviceEvaluator(ctx, device=gpu)
    ev = ctx.evaluator
    a, b, _, _ = _pair(ctx, 8)
    da, db = dev.to_device(a), dev.to_device(b)
    assert_same(ev.mul_rescale(a, b), dev.mul_rescale(da, db), dev)
    assert_same(ev.rotate(a, 5), dev.rotate(da, 5), dev)
    _matvec_case(ctx, dev, D, 9)


@pytest.mark.skipif(not HAS_GPU, reason="needs a GPU: the device bootstrap on the GPU against the host bootstrap")
def test_gpu_sparse_bootstrap_matches_host():
    _bootstrap_case(next(d for d in jax.devices() if d.platform in GPU_PLATFORMS))


@pytest.mark.slow
def test_encapsulated_mod_raise_matches_host():
    """With sparse-secret encapsulation the device ModRaise goes through the host's two key switches: the same
    raised ciphertext, limb for limb (a dense-secret ring: K = 18 instead of 135)."""
    from crypto.ckks.bootstrap import BootstrapConfig, Bootstrapper, plan_for
    from crypto.params import CKKSParameters
    params = CKKSParameters.from_literal(dict(BOOT_TOY, hamming_weight=None, log_q=[[30, 30]] + [[25, 26]] * 24,
                                              dnum=8))
    cfg = BootstrapConfig(slots=64, arcsin=False, encapsulation=32)
    ctx = CKKSContext.keygen(params, seed=4, bootstrap=cfg, backend="numba")
    plan = plan_for(params, cfg)
    assert plan.k_bound == 18
    ct = ctx.encrypt(np.random.default_rng(15).uniform(-1, 1, 64), level=2)
    dev = jd.DeviceEvaluator(ctx)
    raised = jd.DeviceBootstrapper(dev, plan).encapsulated_raise(dev.to_device(ct))
    assert_same(Bootstrapper(ctx.evaluator, plan).encapsulated_raise(ct), raised, dev)
