"""One-pass sums of the bootstrap's hot loops, each against its twin (the same residues, bit for bit): the giant
step's plaintext products summed at once (``crypto.keyswitch.muladd_pairs`` against ``muladd_pair`` per term),
a Chebyshev leaf's integer combination (``Evaluator.mul_int_sum`` against ``mul_int``/``mul_int_add``/``add``),
the tensor with its factor and added part (``RingContext.tensor_into`` against ``mul_scalars``, ``tensor`` and
additions) and the thread's scratch buffers (``crypto.ring.scratch_rows``)."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from crypto._ntt_kernels import mul_int_sum_rows
from crypto.errors import LevelError, ParameterError
from crypto.keyswitch import muladd_pair, muladd_pairs
from crypto.modarith import find_ntt_primes, shoup_precompute
from crypto.ring import RingContext, scratch_rows

from .test_bootstrap_fused import context


def draw(rng, q, cols):
    return np.array([rng.integers(0, int(m), cols) for m in q], dtype=np.uint64)


@settings(max_examples=12, deadline=None)
@given(st.integers(1, 3), st.sampled_from([8, 64, 2048]), st.integers(1, 9), st.integers(0, 2**31),
       st.lists(st.integers(0, 4), min_size=9, max_size=9), st.lists(st.booleans(), min_size=9, max_size=9))
def test_muladd_pairs_equals_muladd_pair_per_term(rows, n, k, seed, log_repeats, narrow):
    """k terms, each plaintext full or a compact subring NTT (n / 2^r columns), uint32 or uint64; residues up to
    q - 1 (the largest lazy sums)."""
    q = np.array(find_ntt_primes(31, rows, 8), dtype=np.uint64)
    rng = np.random.default_rng(seed)
    xs_b = [draw(rng, q, n) for _ in range(k)]
    xs_a = [draw(rng, q, n) for _ in range(k)]
    pts = []
    for i in range(k):
        cols = max(1, n >> log_repeats[i])
        pt = draw(rng, q, cols)
        if seed % 3 == 0:
            xs_b[i][:] = q[:, None] - 1
            pt[:] = q[:, None] - 1
        pts.append(pt.astype(np.uint32) if narrow[i] else pt)
    want_b, want_a = np.empty((rows, n), np.uint64), np.empty((rows, n), np.uint64)
    for i in range(k):
        muladd_pair(want_b, want_a, xs_b[i], xs_a[i], pts[i], q, init=i == 0)
    acc_b, acc_a = np.full((rows, n), 7, np.uint64), np.full((rows, n), 7, np.uint64)    # overwritten, not added to
    muladd_pairs(acc_b, acc_a, xs_b, xs_a, pts, q)
    assert np.array_equal(acc_b, want_b) and np.array_equal(acc_a, want_a)


def test_muladd_pairs_refuses_bad_input():
    q = np.array(find_ntt_primes(31, 1, 8), dtype=np.uint64)
    x = np.zeros((1, 8), dtype=np.uint64)
    frozen = x.copy()
    frozen.setflags(write=False)
    with pytest.raises(ParameterError, match="k >= 1"):
        muladd_pairs(x.copy(), x.copy(), [], [], [], q)
    with pytest.raises(ParameterError, match="acc_b"):
        muladd_pairs(frozen, x.copy(), [x], [x], [x], q)
    with pytest.raises(ParameterError, match=r"pts\[0\]"):
        muladd_pairs(x.copy(), x.copy(), [x], [x], [x[:, :3]], q)
    with pytest.raises(ParameterError, match=r"xs_a\[0\]"):
        muladd_pairs(x.copy(), x.copy(), [x], [x[:, :4]], [x], q)


@settings(max_examples=20, deadline=None)
@given(st.integers(1, 4), st.sampled_from([8, 1024, 4096]), st.integers(1, 9), st.integers(0, 2**31))
def test_mul_int_sum_rows_matches_numpy(rows, n, k, seed):
    q = np.array(find_ntt_primes(31, rows, 8), dtype=np.uint64)
    rng = np.random.default_rng(seed)
    xs = [draw(rng, q, n) if i % 2 else np.vstack([draw(rng, q, n), draw(rng, q, n)]) for i in range(k)]  # extra rows
    w = np.array([[rng.integers(0, int(m)) for m in q] for _ in range(k)], dtype=np.uint64)
    if seed % 2:
        w[:] = q - 1
        top = np.repeat(q[:, None] - 1, n, axis=1)
        xs = [np.vstack([top] * (x.shape[0] // rows)) for x in xs]
    init = np.array([rng.integers(0, int(m)) for m in q], dtype=np.uint64)
    got = mul_int_sum_rows(xs, w, shoup_precompute(w, q[None, :]), init, q, np.empty((rows, n), np.uint64))
    want = np.array([[(int(init[l]) + sum(int(x[l, c]) * int(w[t, l]) for t, x in enumerate(xs))) % int(q[l])
                      for c in range(n)] for l in range(rows)], dtype=np.uint64) if n <= 8 else None
    if want is None:        # the object-free twin: per-term products reduced (products < 2^62)
        want = init[:, None].copy()
        for t, x in enumerate(xs):
            want = (want + x[:rows] * w[t][:, None] % q[:, None]) % q[:, None]
    assert np.array_equal(got, want)


@settings(max_examples=6, deadline=None)
@given(st.integers(2, 10), st.integers(1, 5), st.integers(0, 2**31), st.sampled_from([0.0, 0.75, -3.5]))
def test_mul_int_sum_is_the_sum_of_integer_products(level, k, seed, constant):
    """Σ c_i·ct_i + constant bit for bit as ``mul_int``, ``mul_int_add`` (terms above the level brought down) and
    ``add`` of the scalar give it."""
    ctx = context()
    ev = ctx.evaluator
    rng = np.random.default_rng(seed)
    cts = [ctx.encrypt(rng.uniform(-1, 1, 8), level=level + int(rng.integers(0, 3))) for _ in range(k)]
    cs = [int(rng.integers(-2**40, 2**40)) for _ in range(k)]
    scale = cts[0].scale
    want = ev.mul_int(ev.to_level(cts[0], level), cs[0])
    for ct, c in zip(cts[1:], cs[1:]):
        want = ev.mul_int_add(want, ct, c)
    want = ev.add(want, constant)
    got = ev.mul_int_sum(list(zip(cts, cs)), level, scale, constant)
    assert got.level == level and got.scale == scale
    assert all(np.array_equal(g.data, w.data) for g, w in zip(got.parts, want.parts))


def test_mul_int_sum_refuses_bad_input():
    ctx = context()
    ev = ctx.evaluator
    ct = ctx.encrypt([0.5], level=3)
    with pytest.raises(ParameterError, match="at least one"):
        ev.mul_int_sum([], 3, ct.scale)
    with pytest.raises(ParameterError, match="c="):
        ev.mul_int_sum([(ct, 1.5)], 3, ct.scale)
    with pytest.raises(LevelError, match="below"):
        ev.mul_int_sum([(ct, 2)], 4, ct.scale)
    with pytest.raises(ParameterError, match="constant"):
        ev.mul_int_sum([(ct, 2)], 3, ct.scale, 1j)


@settings(max_examples=15, deadline=None)
@given(st.integers(1, 4), st.integers(0, 2**31), st.integers(-2**40, 2**40), st.integers(-2**40, 2**40),
       st.sampled_from(["none", "both", "first", "second"]))
def test_tensor_into_equals_the_separate_products(rows, seed, factor, add_factor, add):
    n = 64
    q = find_ntt_primes(31, rows, 2 * n)
    ring = RingContext(n, q)
    idx = tuple(range(rows))
    qa = np.array(q, dtype=np.uint64)
    rng = np.random.default_rng(seed)
    a0, a1, b0, b1, x0, x1 = (draw(rng, qa, n) for _ in range(6))
    col = qa[:, None]
    f0, f1 = (ring.mul(x, np.array([factor % m for m in q], dtype=np.uint64)[:, None], idx) for x in (a0, a1))
    want = list(ring.tensor(f0, f1, b0, b1, idx))
    pair = {"none": None, "both": (x0, x1), "first": (x0, None), "second": (None, x1)}[add]
    if pair is not None:
        g = np.array([add_factor % m for m in q], dtype=np.uint64)[:, None]
        for t, x in enumerate(pair):
            if x is not None:
                want[t] = (want[t] + ring.mul(x, g, idx)) % col
    out = tuple(np.empty((rows, n), np.uint64) for _ in range(3))
    got = ring.tensor_into(a0, a1, b0, b1, idx, out, factor=factor, add=pair, add_factor=add_factor)
    assert all(np.array_equal(g, w) for g, w in zip(got, want))
    with pytest.raises(ParameterError, match="out"):
        ring.tensor_into(a0, a1, b0, b1, idx, (out[0], out[1], out[2][:, :8]))


def test_scratch_rows_reuses_a_buffer_and_nests_fresh():
    with scratch_rows("test_scratch", 3, 16) as a:
        a[:] = 5
        with scratch_rows("test_scratch", 2, 16) as b:        # the same name nested: a fresh array
            assert not np.shares_memory(a, b)
        with scratch_rows("test_scratch_other", 2, 16) as c:
            assert not np.shares_memory(a, c)
    with scratch_rows("test_scratch", 2, 16) as d:           # the buffer again, not zeroed
        assert np.shares_memory(a, d) and d.shape == (2, 16) and d.flags.writeable and (d == 5).all()
    with scratch_rows("test_scratch", 4, 16) as e:           # grown
        assert e.shape == (4, 16)


# -- tiled basis conversion and divide-and-round (several tiles, ranges not aligned to them) ---------------------
def centered_crt(residues, moduli) -> int:
    big = 1
    for m in moduli:
        big *= m
    x = 0
    for r, m in zip(residues, moduli):
        h = big // m
        x += int(r) * h * pow(h, -1, m)
    x %= big
    return x - big if x > big // 2 else x


@settings(max_examples=4, deadline=None)
@given(st.integers(0, 2**31), st.integers(0, 3000), st.integers(5000, 8192))
def test_tiled_centered_conversion_matches_big_integers(seed, start, stop):
    from crypto.keyswitch import CenteredConversion
    from crypto._cross_kernels import CONVERT_TILE
    n = 8192
    assert n > 2 * CONVERT_TILE                           # several tiles
    moduli = find_ntt_primes(31, 5, 2 * n)
    src, dst = moduli[:3], moduli[3:]
    rng = np.random.default_rng(seed)
    x = draw(rng, np.array(src, dtype=np.uint64), n)
    conv = CenteredConversion(src, dst)
    whole = conv(x)
    cols = sorted(set(rng.integers(0, n, 40).tolist()) | {0, n - 1, CONVERT_TILE - 1, CONVERT_TILE})
    for c in cols:
        v = centered_crt(x[:, c], src)
        assert [int(whole[j, c]) for j in range(len(dst))] == [v % p for p in dst]
    from crypto import keyswitch
    part = np.zeros_like(whole)
    keyswitch._convert_centered(x, conv.q_from, conv.qhat_inv, conv.qhat_inv_shoup, conv.q_from_inv, conv.q_to,
                                conv.qhat_mod_p, conv.qhat_mod_p_shoup, conv.big_q_mod_p, conv.big_q_mod_p_shoup,
                                part, start, stop)
    assert np.array_equal(part[:, start:stop], whole[:, start:stop]) and not part[:, :start].any()


@settings(max_examples=4, deadline=None)
@given(st.integers(0, 2**31))
def test_tiled_divide_round_matches_big_integers(seed):
    n = 8192
    moduli = find_ntt_primes(31, 6, 2 * n)
    ring = RingContext(n, moduli)
    head, tail = (0, 1, 2), (3, 4, 5)
    rng = np.random.default_rng(seed)
    x = draw(rng, np.array(moduli, dtype=np.uint64), n)
    got = ring.divider(head, tail)(x[:3], x[3:], False)
    big_t = moduli[3] * moduli[4] * moduli[5]
    for c in sorted(set(rng.integers(0, n, 40).tolist()) | {0, 2047, 2048, n - 1}):
        v = centered_crt(x[:, c], moduli)
        r = (v + big_t // 2) // big_t          # round(v / T), T odd: no ties
        assert [int(got[l, c]) for l in range(3)] == [r % moduli[l] for l in range(3)]


def test_fused_kernels_give_the_same_bits_on_two_threads():
    """Sizes above the kernels' split thresholds (2^18 elements, 2^20 products), at 1 and 2 threads."""
    import hezk
    rows, n = 4, 1 << 17
    q = np.array(find_ntt_primes(31, rows, 2 * n), dtype=np.uint64)
    rng = np.random.default_rng(7)
    xs = [draw(rng, q, n) for _ in range(6)]
    pts = [draw(rng, q, n).astype(np.uint32), draw(rng, q, 64), draw(rng, q, 2048)]
    w = np.array([[rng.integers(0, int(m)) for m in q] for _ in range(3)], dtype=np.uint64)
    ring = RingContext(n, q.tolist())
    idx = tuple(range(rows))

    def run():
        acc = [np.empty((rows, n), np.uint64) for _ in range(2)]
        muladd_pairs(acc[0], acc[1], xs[:3], xs[3:], pts, q)
        total = mul_int_sum_rows(xs[:3], w, shoup_precompute(w, q[None, :]), q - 1, q, np.empty((rows, n), np.uint64))
        out = tuple(np.empty((rows, n), np.uint64) for _ in range(3))
        ring.tensor_into(*xs[:4], idx, out, factor=3, add=(xs[4], xs[5]), add_factor=-5)
        return acc + [total] + list(out)

    before = hezk.get_threads()
    try:
        hezk.set_threads(1)
        one = run()
        hezk.set_threads(2)
        two = run()
    finally:
        hezk.set_threads(before)
    assert all(np.array_equal(a, b) for a, b in zip(one, two))


def test_sums_beyond_one_pass_are_batched():
    """More than SUM_TERMS terms: ``mul_int_sum`` chains passes, ``muladd_pairs`` refuses (its caller batches)."""
    from crypto._ntt_kernels import SUM_TERMS
    ctx = context()
    ev = ctx.evaluator
    rng = np.random.default_rng(3)
    cts = [ctx.encrypt(rng.uniform(-1, 1, 4), level=2) for _ in range(3)]
    terms = [(cts[i % 3], int(rng.integers(-50, 50)) or 1) for i in range(SUM_TERMS + 5)]
    want = ev.mul_int(cts[0], 0)
    for ct, c in terms:
        want = ev.mul_int_add(want, ct, c)
    want = ev.add(want, 0.25)
    got = ev.mul_int_sum(terms, 2, cts[0].scale, 0.25)
    assert all(np.array_equal(g.data, w.data) for g, w in zip(got.parts, want.parts))
    q = np.array(find_ntt_primes(31, 1, 8), dtype=np.uint64)
    x = np.zeros((1, 8), dtype=np.uint64)
    with pytest.raises(ParameterError, match="SUM_TERMS"):
        muladd_pairs(x.copy(), x.copy(), [x] * (SUM_TERMS + 1), [x] * (SUM_TERMS + 1), [x] * (SUM_TERMS + 1), q)
