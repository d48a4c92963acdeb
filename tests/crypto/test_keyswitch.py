"""Hybrid key switching: every kernel against its big-int twin; switching keys against the secret."""
import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from crypto import CKKSContext, CKKSParameters
from crypto.errors import ParameterError
from crypto.keyswitch import (CenteredConversion, Divider, KeySwitcher, _inner_product, conjugation_element,
                              galois_element, make_switching_key)
from crypto.modarith import crt_compose, find_ntt_primes
from crypto.ring import RingContext, RNSPoly
from crypto.rlwe import KeyGenerator, centered_coefficients
from crypto.sampling import Sampler
from tests.reference.naive_keyswitch import (centered_int, naive_centered_conversion, naive_divide_round,
                                             naive_inner_product)

N = 32
PRIMES = find_ntt_primes(30, 3, N) + find_ntt_primes(25, 5, N)


@given(k_from=st.integers(1, 4), k_to=st.integers(1, 4), seed=st.integers(0, 2**32 - 1))
def test_centered_conversion_matches_big_ints(k_from, k_to, seed):
    rng = np.random.default_rng(seed)
    src, dst = PRIMES[:k_from], PRIMES[k_from:k_from + k_to]
    x = np.array([rng.integers(0, q, N) for q in src], dtype=np.uint64)
    x[:, 0] = 0                                           # zero and the centre boundary cases
    x[:, 1] = [(q - 1) for q in src]                      # -1
    got = CenteredConversion(src, dst)(x)
    assert np.array_equal(got, naive_centered_conversion(x, src, dst))


@given(digits=st.integers(1, 4), rows=st.integers(1, 6), lifted_rows=st.integers(0, 6),
       seed=st.integers(0, 2**32 - 1))
def test_inner_product_matches_big_ints(digits, rows, lifted_rows, seed):
    rng = np.random.default_rng(seed)
    moduli = PRIMES[:rows]
    q = np.array(moduli, dtype=np.uint64)

    def residues(count):
        return np.stack([[rng.integers(0, m, N) for m in moduli] for _ in range(count)]).astype(np.uint64)

    d, keys_b, keys_a = residues(digits), residues(digits), residues(digits)
    d[0, 0, :3] = q[0] - 1                                # largest residues: the lazy sums peak
    keys_b[0, 0, :3] = keys_a[0, 0, :3] = q[0] - 1
    lift = min(lifted_rows, rows)                         # P·c added to the first rows (fused ModDown)
    add_b, add_a = residues(1)[0][:lift], residues(1)[0][:lift]
    factor = np.array([int(rng.integers(1, m)) for m in moduli], dtype=np.uint64)
    # half of the digit rows come from ``base``, half from ``lifted``, as a decomposition stores them
    flat = d.reshape(digits * rows, N)
    split = (digits * rows) // 2
    src = np.arange(digits * rows).reshape(digits, rows)
    b, a = _inner_product(flat[:split], flat[split:], src, np.arange(digits), keys_b.astype(np.uint32),
                          keys_a.astype(np.uint32), np.arange(rows), q, add_b, add_a, factor,
                          np.full((rows, N), 7, dtype=np.uint64), np.full((rows, N), 7, dtype=np.uint64))
    for got, keys, add in ((b, keys_b, add_b), (a, keys_a, add_a)):
        expected = naive_inner_product(d, keys, moduli).astype(object)
        expected[:lift] += add.astype(object) * factor[:lift, None].astype(object)
        assert np.array_equal(got, (expected % q[:, None].astype(object)).astype(np.uint64))


@given(keep=st.integers(1, 4), drop=st.integers(1, 4), seed=st.integers(0, 2**32 - 1))
def test_divider_rounds_like_big_ints(keep, drop, seed):
    ring = RingContext(N, PRIMES)
    keep_idx, drop_idx = tuple(range(keep)), tuple(range(keep, keep + drop))
    big = math.prod(PRIMES[: keep + drop])
    rng = np.random.default_rng(seed)
    values = [int.from_bytes(rng.bytes(40), "little") % big - big // 2 for _ in range(N)]
    poly = RNSPoly.from_ints(ring, np.array(values, dtype=object), keep_idx + drop_idx, is_ntt=True)
    got = Divider(ring, keep_idx, drop_idx)(poly).to_coeff()
    divisor = math.prod(PRIMES[keep:keep + drop])
    for row, q in zip(got.data, got.moduli):
        assert [int(v) for v in row] == naive_divide_round(values, divisor, q)


@given(seed=st.integers(0, 2**32 - 1), bits=st.integers(1, 200))
def test_centered_coefficients_match_crt(seed, bits):
    rng = np.random.default_rng(seed)
    moduli = PRIMES
    big = math.prod(moduli)
    bound = min(2**bits, big // 2)
    values = [int.from_bytes(rng.bytes(32), "little") % (2 * bound) - bound for _ in range(N)]
    residues = np.array([[v % q for v in values] for q in moduli], dtype=np.uint64)
    got = centered_coefficients(residues, moduli)
    reference = [centered_int(int(x), big) for x in crt_compose(residues, moduli)]
    assert reference == values
    assert np.allclose(got, np.array(values, dtype=np.float64), rtol=2**-50, atol=0)


def _small_setup(seed=5):
    params = CKKSParameters.from_literal({"log_n": 5, "log_q": [[30, 30], [25, 25], [25, 25]],
                                          "log_p": [30, 30, 30], "log_scale": 50, "dnum": 3,
                                          "insecure": True})
    ring = RingContext(params.n, params.moduli)
    gen = KeyGenerator(params, ring, Sampler(seed))
    return params, ring, gen, gen.secret_key()


def test_decomposition_digits_are_exact_centered_lifts():
    """Digit j, read as one integer over Q_ℓ·P, is the centered representative of c mod Q_j."""
    params, ring, _, _ = _small_setup()
    switcher = KeySwitcher(params, ring)
    for level in range(params.max_level + 1):
        idx = tuple(range(params.limbs_at(level)))
        c = RNSPoly(ring, Sampler(level).uniform([ring.moduli[i] for i in idx], params.n), idx, True)
        c_coeff = c.to_coeff().data
        decomposition = switcher.decompose(c)
        plan = switcher.plan(level)
        rows = np.concatenate([decomposition.base, decomposition.lifted])
        assert plan.src.shape == (len(plan.digit_idx), len(idx) + len(params.p_moduli))
        for j, d in enumerate(plan.digit_idx):
            lifted = RNSPoly(ring, rows[plan.src[j]], plan.ext_idx, True).to_ints()
            q_j = math.prod(ring.moduli[i] for i in d)
            residues = np.array([c_coeff[i] for i in d])
            expected = [centered_int(int(v), q_j) for v in crt_compose(residues, [ring.moduli[i] for i in d])]
            assert [int(v) for v in lifted] == expected


def test_transient_decomposition_and_inner_product_equal_fresh_ones():
    """The scratch-buffer path (``transient=True``) and the digit-by-digit ``streamed_product`` give the same
    digits and inner products, at every level and after the buffers were used at another level (reused,
    possibly larger)."""
    params, ring, gen, sk = _small_setup()
    key = make_switching_key(params, ring, gen.sampler, sk.poly.data, gen.secret_key().poly.data)
    switcher = KeySwitcher(params, ring)
    for level in list(range(params.max_level + 1)) + [0, params.max_level]:
        idx = tuple(range(params.limbs_at(level)))
        c = RNSPoly(ring, Sampler(level).uniform([ring.moduli[i] for i in idx], params.n), idx, True)
        lift = (c, c.automorphism(5))
        fresh = switcher.decompose(c)
        expected = [p.data.copy() for p in switcher.inner_product(fresh, key, lift=lift)]
        scratch = switcher.decompose(c, transient=True)
        assert np.array_equal(scratch.lifted, fresh.lifted) and not scratch.lifted.flags.writeable
        got = switcher.inner_product(scratch, key, lift=lift, transient=True)
        assert all(np.array_equal(g.data, e) for g, e in zip(got, expected))
        streamed = switcher.streamed_product(c, key, lift=lift)     # digit by digit, running sums
        assert all(np.array_equal(g.data, e) for g, e in zip(streamed, expected))
        plain = [p.data.copy() for p in switcher.inner_product(fresh, key)]
        assert all(np.array_equal(g.data, e) for g, e in zip(switcher.streamed_product(c, key), plain))
        switched = switcher.switch(c, key)
        b, a = switcher.inner_product(fresh, key)
        assert np.array_equal(switched[0].data, switcher.mod_down(b).data)
        assert np.array_equal(switched[1].data, switcher.mod_down(a).data)


@pytest.mark.parametrize("level", [0, 1, 2])
def test_switching_key_moves_c_times_s_prime_to_s(level):
    params, ring, gen, sk = _small_setup()
    other = gen.secret_key()
    key = make_switching_key(params, ring, gen.sampler, sk.poly.data, other.poly.data)
    idx = tuple(range(params.limbs_at(level)))
    c = RNSPoly(ring, Sampler(9).uniform([ring.moduli[i] for i in idx], params.n), idx, True)
    c0, c1 = KeySwitcher(params, ring).switch(c, key)
    expected = (c * other.poly.keep(idx)).to_ints()
    got = (c0 + c1 * sk.poly.keep(idx)).to_ints()
    error = max(abs(int(a) - int(b)) for a, b in zip(got, expected))
    assert error < 2**16                                 # key-switching noise, not a wrong key


def test_galois_elements():
    n = 4096
    assert galois_element(1, n) == 5 and galois_element(0, n) == 1
    assert galois_element(-1, n) == pow(5, n // 2 - 1, 2 * n)
    assert galois_element(3, n) == galois_element(3 + n // 2, n) == galois_element(3 - n // 2, n)
    assert conjugation_element(n) == 2 * n - 1
    assert len({galois_element(k, n) for k in range(n // 2)}) == n // 2


def test_rotation_keys_are_shared_between_equivalent_steps():
    ctx = CKKSContext.keygen("TOY", rotations=[3, 3 - 2048, 0, 2048], seed=3)
    assert len(ctx.galois_keys.keys) == 1
    x = np.linspace(-1, 1, 2048)
    ct = ctx.encrypt(x)
    for step in (3, 3 - 2048, 3 + 4096):
        assert np.abs(ctx.decrypt(ctx.evaluator.rotate(ct, step)) - np.roll(x, -3)).max() < 1e-8


@settings(max_examples=5)
@given(steps=st.lists(st.sampled_from([1, -1, 2, 17, -100, 1000]), min_size=1, max_size=4, unique=True))
def test_hoisted_rotation_over_random_step_sets(steps):
    ctx = CKKSContext.keygen("TOY", rotations=[1, -1, 2, 17, -100, 1000], seed=11)
    x = np.random.default_rng(len(steps)).uniform(-1, 1, 2048)
    out = ctx.evaluator.rotate_hoisted(ctx.encrypt(x), steps)
    for k in steps:
        assert np.abs(ctx.decrypt(out[k]) - np.roll(x, -k)).max() < 2**-30


def test_one_evaluator_switching_in_several_threads_gives_the_single_thread_results():
    """Transient digits and inner products live in per-thread scratch buffers: rotations and products run
    at once on one evaluator (as an HTTP endpoint's thread pool does) equal the sequential ones bit for bit."""
    import threading
    ctx = CKKSContext.keygen("TOY", rotations=[1, 3], seed=11)
    ev = ctx.evaluator
    rng = np.random.default_rng(2)
    cts = [ctx.encrypt(rng.uniform(-1, 1, ctx.params.slots), level=level)
           for level in (ctx.params.max_level, 1, ctx.params.max_level, 2)]
    jobs = [lambda ct=ct: [p.data for p in ev.rotate(ct, 1).parts] + [p.data for p in ev.mul(ct, ct).parts]
            + [p.data for r in ev.rotate_hoisted(ct, [1, 3]).values() for p in r.parts] for ct in cts]
    expected = [job() for job in jobs]
    start, got = threading.Barrier(len(jobs)), [None] * len(jobs)

    def work(i):
        start.wait()
        got[i] = [jobs[i]() for _ in range(3)]

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(jobs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    for i, runs in enumerate(got):
        assert runs is not None and all(np.array_equal(x, y) for run in runs for x, y in zip(run, expected[i]))


@pytest.mark.parametrize("level", [0, 2])
def test_mod_down_galois_equals_mod_down_add_then_automorphism(level):
    """The fused ModDown + added part + automorphism of a rotation (``mod_down_galois``, kernel
    ``muladd_permute_rows``) equals the three steps one after another, bit for bit, for rotations and
    conjugation, with and without the added part."""
    params, ring, gen, sk = _small_setup()
    switcher = KeySwitcher(params, ring)
    limbs = params.limbs_at(level)
    ext = tuple(range(limbs)) + switcher.p_idx
    x = RNSPoly(ring, Sampler(3).uniform([ring.moduli[i] for i in ext], params.n), ext, True)
    add = RNSPoly(ring, Sampler(4).uniform([ring.moduli[i] for i in range(limbs)], params.n), range(limbs), True)
    for g in (galois_element(1, params.n), galois_element(-5, params.n), conjugation_element(params.n)):
        assert np.array_equal(switcher.mod_down_galois(x, g, add).data,
                              (add + switcher.mod_down(x)).automorphism(g).data)
        assert np.array_equal(switcher.mod_down_galois(x, g).data, switcher.mod_down(x).automorphism(g).data)
    with pytest.raises(ParameterError):
        switcher.mod_down_galois(x, 5, add.keep(range(limbs - 1)) if limbs > 1 else RNSPoly.zeros(ring, (1,)))
