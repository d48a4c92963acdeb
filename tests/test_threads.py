"""The kernels' thread setting (hezk.threads): one process-wide count, and results bit for bit those of one thread.

Each comparison lowers the kernels' smallest piece to one item, so that the small test sizes really are split
(checked: ``pieces`` counts the calls that ran in more than one piece), and runs at 1, 2 and 3 threads (3: uneven
pieces)."""
import mmap
import threading
import time

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import hezk
import hezk.tasks
import hezk.threads as T
from crypto import CKKSContext
from crypto.modarith import find_ntt_primes
from crypto.ntt import NTTTables, get_backend
from crypto.ntt_base import BasisConversion
from proofs import basefold as B
from proofs import field as F
from proofs.transcript import Transcript

THREADS = (1, 2, 3)


@pytest.fixture
def pieces(monkeypatch):
    """Every kernel split down to single items; returns a list that grows by one per call run in several pieces."""
    import crypto._ntt_kernels
    import crypto.cross
    import crypto.keyswitch
    from proofs import _basefold_kernels, _kernels

    for module, name in [(crypto.cross, "PARALLEL_MIN_WORK"), (crypto.cross, "PARALLEL_MIN_PRODUCTS"),
                         (crypto.keyswitch, "PARALLEL_MIN_PRODUCTS"), (crypto.keyswitch, "PARALLEL_MIN_ELEMENTS"),
                         (crypto._ntt_kernels, "PARALLEL_MIN_PRODUCTS"),
                         (crypto._ntt_kernels, "PARALLEL_MIN_ELEMENTS"),
                         (_basefold_kernels, "MIN_ENTRIES"), (_basefold_kernels, "MIN_HASHES"),
                         (_kernels, "PARALLEL_MIN_ENTRIES"), (_kernels, "PARALLEL_MIN_ELEMENTS")]:
        monkeypatch.setattr(module, name, 1)
    split, run = [], T.run_chunks

    def counting(function, chunks):
        if len(chunks) > 1:
            split.append(len(chunks))
        return run(function, chunks)

    monkeypatch.setattr(T, "run_chunks", counting)
    before = T.get_threads()
    yield split
    T.set_threads(before)


def at_each_thread_count(compute):
    """compute() at every count of THREADS (a list of its results, in that order)."""
    results = []
    for n in THREADS:
        T.set_threads(n)
        results.append(compute())
    return results


def assert_all_equal(results):
    first = results[0]
    for other in results[1:]:
        assert len(other) == len(first)
        for a, b in zip(first, other):
            assert np.asarray(a).dtype == np.asarray(b).dtype and np.array_equal(a, b)


def test_ntt_and_basis_conversion_are_bit_identical_at_any_thread_count(pieces):
    n = 4096        # two tiles of the conversion
    tables = NTTTables(n, find_ntt_primes(30, 7, n))
    rng = np.random.default_rng(4)
    a = np.stack([rng.integers(0, q, n, dtype=np.uint64) for q in tables.moduli])
    backend = get_backend("fourstep")
    conv = BasisConversion(tables.moduli[:3], tables.moduli[3:])

    def compute():
        forward = backend.forward(a, tables)
        return forward, backend.inverse(forward, tables), backend.convert_basis(a[:3], conv)

    results = at_each_thread_count(compute)
    assert_all_equal(results)
    assert np.array_equal(results[0][0], get_backend("numba").forward(a, tables))   # and right, not only stable
    assert np.array_equal(results[0][1], a)
    assert len(pieces) >= 2 * 3


@settings(max_examples=6, deadline=None)
@given(k=st.integers(1, 5), log_n=st.integers(0, 7), seed=st.integers(0, 2**32 - 1))
def test_element_wise_kernels_split_anywhere_match_their_numpy_twins(k, log_n, seed):
    """The row kernels (add, sub, multiply, negate, permute, multiply-add, scalar products, residues of wide
    integers, the fused tensor product) in pieces that cut rows anywhere (3 threads, pieces of one element up)
    equal numpy's big-integer arithmetic on the same residues, and one thread's result."""
    import crypto._ntt_kernels as K
    n = 1 << log_n
    rng = np.random.default_rng(seed)
    q = np.array(find_ntt_primes(30, k, max(n, 2)), dtype=np.uint64)
    qo = q.astype(object)[:, None]
    a, b, acc = (np.stack([rng.integers(0, p, n, dtype=np.uint64) for p in q]) for _ in range(3))
    w = rng.integers(0, q, dtype=np.uint64)
    ws = np.array([(int(x) << 32) // int(p) for x, p in zip(w, q)], dtype=np.uint64)
    bk = np.array([(int(p) - 1).bit_length() for p in q], dtype=np.int64)
    bm = np.array([(1 << (2 * int(b_))) // int(p) for b_, p in zip(bk, q)], dtype=np.uint64)
    perm = rng.permutation(n).astype(np.int64)
    wide = rng.integers(-2**62, 2**62, n, dtype=np.int64)
    A, B, C = a.astype(object), b.astype(object), acc.astype(object)
    expected = [(A + B) % qo, (A - B) % qo, A * B % qo, -A % qo, A[:, perm], (C + A * B) % qo,
                A * w.astype(object)[:, None] % qo, (A * w.astype(object)[:, None] + B) % qo,
                (C + A[:, perm]) % qo, wide.astype(object)[None, :] % qo,
                ((A * w.astype(object)[:, None] + B + C) % qo)[:, perm],
                A * C % qo, (A * B + C * C) % qo, C * B % qo]

    def compute():
        summed, permuted = acc.copy(), acc.copy()
        K.muladd_rows(summed, a, b, q, bk, bm)
        K.add_permuted_into(permuted, a, perm, q)
        return [K.addmod_rows(a, b, q), K.submod_rows(a, b, q), K.mulmod_rows(a, b, q, bk, bm), K.negmod_rows(a, q),
                K.permute_rows(a, perm), summed, K.mulmod_scalar_rows(a, w, ws, q),
                K.muladd_scalar_rows(a, w, ws, b, q), permuted,
                K.wide_residues_rows(wide, q, np.empty((k, n), dtype=np.uint64)),
                K.muladd_permute_rows(a, w, ws, b, acc, q, perm), *K.tensor_rows(a, acc, acc, b, q, bk, bm)]

    before = T.get_threads()
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(K, "PARALLEL_MIN_ELEMENTS", 1)
            results = at_each_thread_count(compute)
    finally:
        T.set_threads(before)
    assert_all_equal(results)
    for got, want in zip(results[-1], expected):
        assert got.dtype == np.uint64 and np.array_equal(got.astype(object), want)


def test_element_wise_kernels_are_split_at_three_threads(pieces):
    import crypto._ntt_kernels as K
    q = np.array(find_ntt_primes(30, 3, 64), dtype=np.uint64)
    a = np.ones((3, 64), dtype=np.uint64)
    T.set_threads(3)
    assert np.array_equal(K.addmod_rows(a, a, q), 2 * a)
    assert pieces == [3]


def test_a_bad_limb_is_named_whichever_piece_holds_it(pieces):
    n = 1024
    tables = NTTTables(n, find_ntt_primes(30, 6, n))
    a = np.zeros((6, n), dtype=np.uint64)
    a[4, 7] = tables.moduli[4]          # not reduced: the kernel stops in the piece that holds limb 4
    T.set_threads(3)
    with pytest.raises(hezk.ParameterError, match=r"a\[4\]"):
        get_backend("fourstep").forward(a, tables)
    a[4, 7] = 0
    assert not get_backend("fourstep").forward(a, tables).any()     # positive control


def test_ct_times_ct_rotation_and_key_switch_are_bit_identical(pieces):
    ctx = CKKSContext.keygen("TOY", rotations=[1, 3], seed=11, backend="fourstep")
    ev = ctx.evaluator
    x = np.linspace(-1, 1, ctx.params.n // 2)
    cx, cy = ctx.encrypt(x), ctx.encrypt(x[::-1])

    def compute():
        out = [ev.mul_rescale(cx, cy), ev.rotate(cx, 1), *ev.rotate_hoisted(cx, [1, 3]).values()]
        return [part.data for ct in out for part in ct.parts]

    results = at_each_thread_count(compute)
    assert_all_equal(results)
    T.set_threads(2)
    assert np.abs(ctx.decrypt(ev.mul_rescale(cx, cy)) - x * x[::-1]).max() < 1e-4   # and right
    assert len(pieces) > 0


def test_bsgs_giant_steps_and_hoisted_rotations_on_threads_are_bit_identical(pieces):
    """bsgs_sum's giant steps (a caller's ``rotate``, as the inference server passes) and rotate_hoisted's
    rotations run in pieces on the threads: the same ciphertext as the one-thread running sum, and right."""
    from crypto.ckks.linear import bsgs_sum
    steps = [1, 2, 3, 4, 8, 12]
    ctx = CKKSContext.keygen("TOY", rotations=steps, seed=12, backend="fourstep")
    ev, slots = ctx.evaluator, ctx.params.n // 2
    rng = np.random.default_rng(3)
    x = rng.uniform(-1, 1, slots)
    ct = ctx.encrypt(x)
    diagonals = {(m, i): rng.uniform(-1, 1, slots) for m in (0, 4, 8, 12) for i in (0, 1, 2, 3)}
    groups = [(m, [(i, ev.encode(np.roll(diagonals[m, i], m), ct.level, ctx.params.scale)) for i in range(4)])
              for m in (0, 4, 8, 12)]
    calls, galois_threads, apply_galois = [], set(), ev._apply_galois

    def rotate(c, m):
        calls.append((m, threading.get_ident()))
        return ev.rotate(c, m)

    def recording(*args):
        galois_threads.add(threading.get_ident())
        return apply_galois(*args)

    ev._apply_galois = recording                # this evaluator only (the fixture's context is its own)

    def compute():
        babies = ev.rotate_hoisted(ct, [0, 1, 2, 3])
        out = bsgs_sum(ev, babies, groups, rotate=rotate)
        return [part.data for c in [out, *babies.values()] for part in c.parts]

    results = at_each_thread_count(compute)
    assert_all_equal(results)
    assert sorted(m for m, _ in calls) == sorted([4, 8, 12] * len(THREADS))   # each giant step rotated once a run
    assert len({thread for _, thread in calls}) >= 2 and len(galois_threads) >= 2     # and on several threads
    expected = sum(diagonals[m, i] * np.roll(x, -(m + i)) for m in (0, 4, 8, 12) for i in range(4))
    T.set_threads(2)
    babies = ev.rotate_hoisted(ct, [0, 1, 2, 3])
    got = ctx.decrypt(ev.rescale(bsgs_sum(ev, babies, iter(groups), rotate=rotate)))   # groups may be an iterator
    assert np.abs(got - expected).max() < 1e-3
    assert len(pieces) >= 2 * 2


def test_basefold_commit_and_opening_are_bit_identical(pieces):
    table = F.random_elements(1 << 12, seed=5)
    point = F.ext_random((12,), seed=6)

    def compute():
        commitment, witness = B.commit(table)
        value, proof = B.open_commitment(witness, point, Transcript("threads"))
        return [np.frombuffer(commitment.to_bytes(), np.uint8), np.asarray(value), np.frombuffer(proof.to_bytes(),
                                                                                                 np.uint8)]

    results = at_each_thread_count(compute)
    assert_all_equal(results)
    assert len(pieces) > 0


def test_interleaved_basefold_commitment_is_bit_identical(pieces):
    """Eight interleaved codewords (a 2^20 table's shape, here at 2^12 by a lower codeword limit): the encoding is
    split into groups of columns smaller than eight, and the result equals the numpy twin's."""
    import dataclasses
    params = dataclasses.replace(B.BasefoldParams(), max_log_codeword=11)
    assert params.interleave(12) == 3
    table = F.random_elements(1 << 12, seed=8)
    point = F.ext_random((12,), seed=9)

    def compute():
        commitment, witness = B.commit(table, params)
        value, proof = B.open_commitment(witness, point, Transcript("threads"))
        return [B._encode_table(table, 12, params), np.frombuffer(commitment.to_bytes(), np.uint8),
                np.asarray(value), np.frombuffer(proof.to_bytes(), np.uint8)]

    results = at_each_thread_count(compute)
    assert_all_equal(results)
    assert np.array_equal(results[0][0], B._encode_table_numpy(table, 12, params))
    assert max(pieces) >= 3


def test_basefold_eq_dot_and_add_kernels_in_pieces_match_their_twins(pieces):
    from proofs import _basefold_kernels as K
    from proofs.mle import eq_table
    point, scale = F.ext_random((9,), seed=1), F.ext_random((), seed=2)
    f_ext, f_base = F.ext_random((1 << 10,), seed=3), F.random_elements(1 << 10, seed=4)
    e, table = F.ext_random((1 << 9,), seed=5), F.random_elements(1 << 9, seed=6)
    split = B._SplitEq(point)

    def compute():
        eq, pairs_ext, pairs_base, dot = (np.empty((1 << 9, 4), np.uint64), np.empty((2, 4), np.uint64),
                                          np.empty((2, 4), np.uint64), np.empty(4, np.uint64))
        K.eq_scaled(point, scale, eq)
        K.dot_pairs_split(f_ext, split.low, split.high, pairs_ext)
        K.dot_pairs_split(f_base, split.low, split.high, pairs_base)
        K.dot_base(e, table, dot)
        summed = eq.copy().reshape(-1)
        K.add_into(e.reshape(-1), summed)
        return [eq, pairs_ext, pairs_base, dot, summed]

    results = at_each_thread_count(compute)
    assert_all_equal(results)
    eq, pairs_ext, pairs_base, dot, summed = results[0]
    full = eq_table(point)
    assert np.array_equal(eq, F.ext_mul(full, scale))
    assert np.array_equal(pairs_ext, B._dot_pairs_numpy(f_ext, full))
    assert np.array_equal(pairs_base, B._dot_pairs_numpy(f_base, full))
    assert np.array_equal(dot, F.ext_sum(F.ext_mul_base(e, table), axis=0))
    assert np.array_equal(summed, F.ext_add(eq, e).reshape(-1))
    assert len(pieces) >= 5 * 2


def test_in_place_fold_with_pieces_matches_one_thread(pieces):
    """fold_sums may write its outputs over its inputs' first halves: the pieces after the first must not
    overwrite entries another piece has still to read."""
    from proofs import _basefold_kernels as K
    f = F.ext_random((1 << 10,), seed=1)
    w = F.ext_random((1 << 10,), seed=2)
    r = F.ext_random((), seed=3)

    def compute(in_place):
        fc, wc, msg = f.copy(), w.copy(), np.empty((3, 4), np.uint64)
        if in_place:
            f_out, w_out = fc[:512], wc[:512]
        else:
            f_out, w_out = np.empty((512, 4), np.uint64), np.empty((512, 4), np.uint64)
        K.fold_sums(fc, wc, r, f_out, w_out, msg)
        return [f_out.copy(), w_out.copy(), msg]

    T.set_threads(1)
    expected = compute(False)
    for n in THREADS:
        T.set_threads(n)
        assert_all_equal([expected, compute(True), compute(False)])


@pytest.mark.parametrize("planes", [1, 4])
def test_plane_folds_and_scalar_products_in_pieces_match_their_twins(pieces, planes):
    """fold_add_planes in pieces, into a fresh array and into the table's own first half (a piece after the first
    must not overwrite entries another piece has still to read), equals the numpy fold plus the planes' constants;
    ext_mul_scalar equals F.ext_mul."""
    from proofs import _kernels as K
    from proofs.mle import _fold_numpy
    table, base = F.ext_random((1 << 10,), seed=1), F.random_elements(1 << 10, seed=2)
    r, values = F.ext_random((), seed=3), F.ext_random((planes,), seed=4)
    block = (1 << 9) // planes
    plane_constants = np.repeat(values, block, axis=0)

    def compute():
        fresh, from_base, own = np.empty((1 << 9, 4), np.uint64), np.empty((1 << 9, 4), np.uint64), table.copy()
        K.fold_add_planes(table, r, values, fresh)
        K.fold_add_planes(base, r, values, from_base)
        K.fold_add_planes(own, r, values, own[:1 << 9])
        scaled = np.empty_like(table)
        K.ext_mul_scalar(table, r, scaled)
        return [fresh, from_base, own[:1 << 9].copy(), scaled]

    results = at_each_thread_count(compute)
    assert_all_equal(results)
    fresh, from_base, own, scaled = results[0]
    assert np.array_equal(fresh, F.ext_add(_fold_numpy(table, r), plane_constants))
    assert np.array_equal(from_base, F.ext_add(_fold_numpy(base, r), plane_constants))
    assert np.array_equal(own, fresh)
    assert np.array_equal(scaled, F.ext_mul(table, r))
    assert len(pieces) >= 4 * 2


def test_sumcheck_round_sums_and_field_kernels_in_pieces_match_their_twins(pieces):
    """The provers' round sums (two and three F_p4 factors, masked per plane, with base factors) over pieces of the
    pairs, and the flat field operations, equal numpy's formulas at every thread count."""
    from proofs import _kernels as K
    half, planes, degree = 1 << 8, 4, 3
    block = half // planes
    a, b, c = (F.ext_random((2 * half,), seed=s) for s in (1, 2, 3))
    base = F.random_elements((2, 2 * half), seed=4)
    masks = F.ext_random((3, planes), seed=5)
    zs = np.array([x * (1 - x) % int(F.P) for x in range(degree + 1)], dtype=np.uint64)
    blocks = np.array([block, 0, block], dtype=np.int64)
    flat_a, flat_b = F.random_elements(1 << 10, seed=6), F.random_elements(1 << 10, seed=7)

    def line(f, x):
        return F.ext_add(f[0::2], F.ext_mul_base(F.ext_sub(f[1::2], f[0::2]), np.uint64(x)))

    def base_line(t, x):                  # a base table's line, through F_p4 with the other coordinates zero
        return line(t[:, None] * np.array([1, 0, 0, 0], np.uint64), x)[:, 0]

    def masked(f, mask, x):
        return F.ext_add(line(f, x), F.ext_mul_base(np.repeat(mask, block, axis=0), zs[x]))

    expected = [np.stack([F.ext_sum(F.ext_mul(F.ext_mul(line(a, x), line(b, x)), line(c, x))) for x in range(4)]),
                np.stack([F.ext_sum(F.ext_mul(line(a, x), line(b, x))) for x in range(4)]),
                np.stack([F.ext_sum(F.ext_mul(masked(a, masks[0], x), line(b, x))) for x in range(4)]),
                np.stack([F.ext_sum(F.ext_mul_base(F.ext_mul(F.ext_mul(masked(a, masks[0], x), line(b, x)),
                                                             masked(c, masks[2], x)),
                                                   F.mul(base_line(base[0], x), base_line(base[1], x))))
                          for x in range(4)]),
                F.add(flat_a, flat_b), F.sub(flat_a, flat_b), F.mul(flat_a, flat_b),
                F.ext_mul(a, b), F.ext_mul(np.repeat(a[:8], 8, axis=0), np.tile(b[:8], (8, 1)))]

    def compute():
        outs = [np.empty((degree + 1, 4), np.uint64) for _ in range(4)]
        K.product_round_sums(a, b, c, True, degree, outs[0])
        K.product_round_sums(a, b, a[:0], False, degree, outs[1])
        K.masked_product_round_sums(a, b, masks[0], block, masks[1], 0, zs, degree, outs[2])
        K.masked_round_sums(np.stack([a, b, c]), masks, blocks, base, zs, degree, outs[3])
        flat = [np.empty_like(flat_a) for _ in range(3)]
        K.add(flat_a, flat_b, flat[0])
        K.sub(flat_a, flat_b, flat[1])
        K.mul(flat_a, flat_b, flat[2])
        products, outer = np.empty_like(a), np.empty((64, 4), np.uint64)
        K.ext_mul(a, b, products)
        K.ext_outer(np.ascontiguousarray(a[:8]), np.ascontiguousarray(b[:8]), outer)
        return outs + flat + [products, outer]

    T.set_threads(1)
    expected = [np.asarray(e) for e in expected]      # computed above with whatever setting: the same elements
    results = at_each_thread_count(compute)
    assert_all_equal(results)
    for got, want in zip(results[0], expected):
        assert np.array_equal(got, want)
    assert len(pieces) >= 9 * 2
    ma, mb = F.random_elements((40, 24), seed=8), F.random_elements((40, 9), seed=9)
    mb[3] = 0                                                # zero entries are skipped
    product = np.empty((9, 24), np.uint64)
    at_each_thread_count(lambda: K.transposed_matmul(ma, mb, product))
    assert np.array_equal(product, ((ma.T.astype(object) @ mb.astype(object)) % int(F.P)).T.astype(np.uint64))
    larger = np.full((degree + 3, 4), 7, np.uint64)        # a caller's buffer with rows past the degree: kept
    K.product_round_sums(a, b, c, True, degree, larger)
    assert np.array_equal(larger[:degree + 1], expected[0]) and (larger[degree + 1:] == 7).all()


def test_thread_setting_api_and_errors(monkeypatch):
    before = T.get_threads()
    try:
        hezk.set_threads(2)
        assert hezk.get_threads() == T.get_threads() == 2
        with T.using(1):
            assert T.get_threads() == 1
        assert T.get_threads() == 2
        for bad in (0, -1, 1.5, "2", True, None, T.MAX_THREADS + 1):
            with pytest.raises(T.ThreadSettingError, match="threads"):
                hezk.set_threads(bad)
        assert T.get_threads() == 2                        # a refused value changes nothing
    finally:
        T.set_threads(before)


def test_environment_variable_is_read_at_first_use(monkeypatch):
    monkeypatch.setattr(T, "_threads", None)
    monkeypatch.setenv(T.ENV, "3")
    assert T.get_threads() == 3
    monkeypatch.setattr(T, "_threads", None)
    monkeypatch.setenv(T.ENV, "many")
    with pytest.raises(T.ThreadSettingError, match=T.ENV):
        T.get_threads()
    monkeypatch.setattr(T, "_threads", None)
    monkeypatch.delenv(T.ENV)
    assert T.get_threads() == T.available_cores() >= 1


@pytest.mark.parametrize("count,threads,align", [(10, 3, 1), (1000, 2, 64), (7, 4, 8), (64, 3, 8), (1, 2, 1)])
def test_chunks_cover_the_range_once_in_aligned_pieces(monkeypatch, count, threads, align):
    monkeypatch.setattr(T, "_threads", threads)
    got = T.chunks(count, align=align)
    assert got[0][0] == 0 and got[-1][1] == count and len(got) <= threads * T.PIECES_PER_THREAD
    assert all(a < b for a, b in got) and all(b == c for (_, b), (c, _) in zip(got, got[1:]))
    assert all(a % align == 0 for a, _ in got)
    assert T.chunks(count, min_work=10 ** 9) == [(0, count)]      # small work stays in one piece


def test_pieces_run_once_each_in_order_and_errors_propagate(monkeypatch):
    monkeypatch.setattr(T, "_threads", 4)
    parts = T.parallel(lambda a, b: list(range(a, b)), 10)
    assert len(parts) == 4 * T.PIECES_PER_THREAD and sum(parts, []) == list(range(10))

    def fails(a, b):
        if a > 0:
            raise ValueError(f"piece {a}")
        return a
    with pytest.raises(ValueError, match="piece"):
        T.parallel(fails, 8)
    # a piece calling parallel again: in its own thread, or cut for an idle caller; each range covered once
    nested = T.parallel(lambda a, b: T.parallel(lambda c, d: list(range(c, d)), 100), 8)
    assert len(nested) == 4 * T.PIECES_PER_THREAD and all(sum(part, []) == list(range(100)) for part in nested)


def test_an_idle_caller_takes_pieces_of_a_nested_call(monkeypatch):
    """A coarse split's tail: the caller, done with its own piece, runs a piece of the call nested in the piece the
    pool's thread still runs (instead of waiting); results in order, and a nested piece's error propagates."""
    monkeypatch.setattr(T, "_threads", 2)
    caller = threading.get_ident()
    started = threading.Event()

    def coarse(a, b, fail=False):
        if a == 0:                          # the caller's piece: done once the pool's thread has its piece
            assert started.wait(10)
            started.clear()
            return None                     # then the caller waits (idle)
        started.set()
        deadline = time.time() + 10
        while T._idle == 0 and time.time() < deadline:
            time.sleep(0.001)
        assert len(T.chunks(10)) == 2       # cut for the idle caller
        ran = []

        def fine(c, d):
            ran.append(threading.get_ident())
            time.sleep(0.05)                # long enough for the caller to take the queued piece
            if fail and c > 0:
                raise ValueError("nested piece")
            return list(range(c, d))

        return T.parallel(fine, 10), ran

    nested, ran = T.parallel(coarse, 2)[1]
    assert sum(nested, []) == list(range(10))
    assert len(ran) == 2 and ran[0] != caller and caller in ran   # the second piece ran in the idle caller
    assert T._idle == 0 and not T._tasks
    with pytest.raises(ValueError, match="nested piece"):
        T.parallel(lambda a, b: coarse(a, b, fail=True), 2)
    assert T._idle == 0 and not T._tasks
    T.set_threads(1)
    assert T.chunks(10) == [(0, 10)]


def test_pieces_no_thread_has_started_are_run_by_the_caller(monkeypatch):
    """With the pool's threads all busy (here: blocked), a split call does not wait for them: the caller takes back
    the pieces not started and runs them itself, in order; nested calls inside them still run inline."""
    monkeypatch.setattr(T, "_threads", 3)
    release = threading.Event()
    blockers = [T._executor(2).submit(release.wait, 30) for _ in range(2)]    # both pool threads held
    try:
        ran, start = [], time.perf_counter()
        parts = T.parallel(lambda a, b: (ran.append(threading.get_ident()), list(range(a, b)), len(T.chunks(64)))[1:],
                           12)
        assert time.perf_counter() - start < 10                      # not the blockers' 30 s
        assert [x for part, _ in parts for x in part] == list(range(12))
        assert set(ran) == {threading.get_ident()} and len(ran) == 3 * T.PIECES_PER_THREAD   # all in the caller
        assert all(nested == 1 for _, nested in parts)               # a piece's own calls stay in one piece
        assert len(T.chunks(64)) == 3 * T.PIECES_PER_THREAD         # and the caller is outside again
    finally:
        release.set()
        for blocker in blockers:
            blocker.result()


def test_local_dask_workers_share_the_cores(monkeypatch):
    monkeypatch.setenv(T.ENV, "8")
    assert [hezk.tasks.worker_threads(k) for k in (1, 2, 3, 16)] == [8, 4, 2, 1]
    monkeypatch.delenv(T.ENV)
    assert hezk.tasks.worker_threads(1) == T.available_cores()


def test_the_kernel_modules_share_one_threshold():
    import crypto._ntt_kernels
    import crypto.ntt_base
    assert crypto._ntt_kernels.PARALLEL_MIN_PRODUCTS == crypto.ntt_base.PARALLEL_MIN_PRODUCTS


def test_critical_path_measures_serial_and_split_work_on_one_thread(monkeypatch):
    """CriticalPath runs each split call's pieces one after the other in the caller (same results), timing them:
    a block of serial work plus a split call of unequal pieces predicts less than the thread count."""
    monkeypatch.setattr(T, "_threads", 1)
    ran = []

    def busy(seconds):
        end = time.thread_time() + seconds
        while time.thread_time() < end:
            pass

    def piece(a, b):
        ran.append(threading.get_ident())
        busy(0.02 * (b - a))
        return list(range(a, b))

    def block():
        busy(0.05)                                           # serial: 0.05 s
        return T.parallel(piece, 3)                          # 2 threads: pieces of 1 and 2 items (0.02 + 0.04 s)

    with T.CriticalPath(2) as path:
        assert T.get_threads() == 2
        parts = block()
    assert T.get_threads() == 1                              # the setting restored
    assert parts == [[0], [1, 2]] and set(ran) == {threading.get_ident()} and path.calls == 1
    # busy loops of thread CPU time: at least their length; the slack above it is for a loaded machine
    assert 0.06 <= path.split < 0.12 and 0.04 <= path.longest < path.split - 0.015
    assert 0.049 <= path.serial < 0.11
    assert path.predicted_time == pytest.approx(path.serial + path.longest)
    assert 0 <= path.system <= path.total and 0 <= path.system_fraction <= 1
    with T.CriticalPath(2) as faulting:                       # fresh pages touched: kernel time, counted
        for _ in range(8):                                    # fresh anonymous maps: the allocator may keep freed
            region = mmap.mmap(-1, 1 << 25)                   # arrays' pages (reuse_freed_memory), mmap never does
            pages = np.frombuffer(region, dtype=np.uint8)
            pages[::mmap.PAGESIZE] = 1
            del pages
            region.close()
    if hasattr(__import__("resource"), "RUSAGE_THREAD"):
        assert faulting.system > 0
    assert 1 < path.predicted_speedup < path.amdahl_speedup < 2  # uneven pieces lose more than Amdahl says
    with pytest.raises(RuntimeError, match="nest"):
        with T.CriticalPath(2):
            with T.CriticalPath(2):
                pass
    with pytest.raises(T.ThreadSettingError):
        T.CriticalPath(0)


def test_concurrent_callers_with_nested_calls_neither_deadlock_nor_lose_pieces(monkeypatch):
    """Four user threads split calls whose pieces split again (cut for whichever callers sit idle, helped through
    the queue): every sum right, and the queue and idle count empty after."""
    monkeypatch.setattr(T, "_threads", 3)
    helped, run = [], T._HelpTask.run

    def counting(task):
        helped.append(task.start)
        return run(task)

    monkeypatch.setattr(T._HelpTask, "run", counting)

    def inner(c, d):
        time.sleep(0.0005)
        return sum(range(c, d))

    def outer(a, b):
        return sum(sum(T.parallel(inner, 200)) for _ in range(a, b))

    errors = []

    def user():
        try:
            for _ in range(30):
                assert sum(T.parallel(outer, 7)) == 7 * sum(range(200))
        except BaseException as exc:    # noqa: BLE001 - reported below
            errors.append(exc)

    users = [threading.Thread(target=user) for _ in range(4)]
    for u in users:
        u.start()
    for u in users:
        u.join(60)
    assert not errors and not any(u.is_alive() for u in users)
    assert T._idle == 0 and not T._tasks
    assert helped                                            # nested pieces did go through the queue
