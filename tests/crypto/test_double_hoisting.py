"""Double-hoisted linear transforms (``Evaluator.linear_transform_hoisted``; Bossuat et al., EUROCRYPT 2021):
against the single-hoisted path (``rotate_hoisted`` + ``crypto.ckks.linear.bsgs_sum``, a ModDown per baby) and
numpy, exactly where the arithmetic is exact (one rounding of the sum against a rounding per term), and inside
CoeffToSlot/SlotToCoeff of a bootstrap, with the precision asserted."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import hezk
from crypto import CKKSContext
from crypto.ckks.bootstrap import Bootstrapper, apply_diagonals, bsgs_split
from crypto.ckks.linear import bsgs_sum
from crypto.errors import ParameterError
from crypto.keyswitch import add_permuted_pair_into, muladd_pair
from crypto._ntt_kernels import add_permuted_into
from crypto.modarith import find_ntt_primes
from crypto.params import CKKSParameters
from crypto.ring import RNSPoly
from crypto.rlwe import Decryptor, Plaintext

from .test_bootstrap import SPARSE, bits, context as boot_context, plan as boot_plan, slots_of

# N = 2^10, insecure: a top level of two primes (for the fused rescale), two digits, P of two primes
SMALL = dict(log_n=10, log_q=[[30, 30]] + [[25, 26]] * 3, log_p=[30, 30], log_scale=50, dnum=3, hamming_weight=32,
             insecure=True)
OFFSETS = [0, 1, 2, 3, 4, 5, 7, 8, 9, 13, 14, -4, -3, -1]
_CACHE: dict = {}


def split_steps(offsets, slots) -> set:
    split = bsgs_split(sorted(k % slots for k in offsets), slots)
    return {b for terms in split.values() for b, _ in terms} | set(split)


def small() -> CKKSContext:
    if "ctx" not in _CACHE:
        params = CKKSParameters.from_literal(SMALL)
        steps = (split_steps(OFFSETS, params.slots) | {1, 2, 3}) - {0}
        _CACHE["ctx"] = CKKSContext.keygen(params, rotations=sorted(steps), conjugation=True, seed=5)
    return _CACHE["ctx"]


def coefficients(ctx, ct) -> np.ndarray:
    """The decrypted polynomial's centred integer coefficients (float64)."""
    return Decryptor(ctx.params, ctx.ring, ctx._secret_key).decrypt(ct.parts)


def centred(poly: RNSPoly) -> np.ndarray:
    return np.array([int(v) for v in poly.to_ints()], dtype=object)


def constant(ctx, w: int, idx) -> RNSPoly:
    coeffs = np.zeros(ctx.params.n, dtype=np.int64)
    coeffs[0] = w
    return RNSPoly.from_ints(ctx.ring, coeffs, idx, is_ntt=True)


def single_hoisted(ev, ct, babies, groups_q, scale):
    """The reference: babies rotated with a ModDown each, bsgs_sum (its giant steps share one ModDown)."""
    rotated = ev.rotate_hoisted(ct, babies)
    return bsgs_sum(ev, rotated, ((m, [(i, Plaintext(p, ct.level, scale, ct.length, True, ev.fingerprint))
                                       for i, p in pairs]) for m, pairs in groups_q))


@settings(max_examples=6, deadline=None)
@given(st.integers(0, 2**31), st.lists(st.integers(-3, 3), min_size=1, max_size=4), st.booleans())
def test_sum_of_babies_rounds_once(seed, weights, with_identity):
    """Σ_i w_i·rot_i(ct) for integer constants w_i, giant 0 only: the double-hoisted sum divides by P once, the
    single-hoisted one once per baby, so both parts differ by at most (Σ|w_i| + 1)/2 per coefficient, exactly."""
    ctx = small()
    ev = ctx.evaluator
    rng = np.random.default_rng(seed)
    ct = ctx.encrypt(rng.uniform(-1, 1, ctx.params.slots), level=2)
    babies = ([0] if with_identity else []) + [1, 2, 3][: len(weights) - with_identity]
    weights = weights[: len(babies)]
    ext = ev.switcher.plan(ct.level).ext_idx
    new = ev.linear_transform_hoisted(ct, babies, [(0, [(b, constant(ctx, w, ext)) for b, w in zip(babies, weights)])],
                                      ct.scale)
    old = single_hoisted(ev, ct, babies, [(0, [(b, constant(ctx, w, ct.parts[0].idx)) for b, w in
                                               zip(babies, weights)])], 1.0)
    bound = (sum(abs(w) for w in weights) + 1) // 2 + 1
    for a, b in zip(new.parts, old.parts):
        assert a.idx == b.idx
        diff = (centred(a - b))
        assert max(abs(int(d)) for d in diff) <= bound


def random_transform(n_slots, rng, offsets):
    return {k % n_slots: rng.uniform(-1, 1, n_slots) + 1j * rng.uniform(-1, 1, n_slots) for k in offsets}


@pytest.mark.parametrize("rescale", [False, True])
def test_matches_single_hoisting_and_numpy(rescale):
    """Random diagonals at offsets -4..14 (babies 0..7, giants 0, 8, -8): the decryption equals
    the single-hoisted path's and numpy's within the noise, at the same level and scale."""
    ctx = small()
    ev, slots = ctx.evaluator, ctx.params.slots
    rng = np.random.default_rng(1)
    diags = random_transform(slots, rng, OFFSETS)
    split = bsgs_split(sorted(diags), slots)
    babies = sorted({b for terms in split.values() for b, _ in terms})
    assert len(split) > 2 and len(babies) > 2          # giants and babies both rotate
    z = rng.uniform(-1, 1, slots) + 1j * rng.uniform(-1, 1, slots)
    ct = ctx.encrypt(z, level=3)
    pt_scale = float(ev._top_modulus(ct.level))
    groups = [(m, [(b, np.roll(diags[k], m)) for b, k in terms]) for m, terms in sorted(split.items())]
    new = ev.linear_transform_hoisted(      # rescaled: the compact residues; else the polynomials
        ct, babies, ((m, [(b, ev.encode_extended(v, ct.level, pt_scale, compact=rescale)) for b, v in pairs])
                     for m, pairs in groups), ct.scale * pt_scale, rescale=rescale)
    old = bsgs_sum(ev, ev.rotate_hoisted(ct, babies),
                   ((m, [(b, ev.encode(v, ct.level, pt_scale)) for b, v in pairs]) for m, pairs in groups))
    if rescale:
        old = ev.rescale(old)
    assert (new.level, new.scale) == (old.level, old.scale)
    expected = apply_diagonals(diags, z)
    got_new, got_old = ctx.decrypt(new), ctx.decrypt(old)
    assert bits(expected, got_old) > 18     # the fresh encryption's noise times |Σ d_k| ~ 4 (21 bits measured)
    assert bits(expected, got_new) > 18
    assert bits(got_old, got_new) > 35      # the two paths differ by key-switching roundings only (40 bits)
    # the double-hoisted noise is no larger than the single-hoisted one (its roundings come after the products)
    assert bits(expected, got_new) >= bits(expected, got_old) - 1


def test_refuses_a_plaintext_over_q_only_and_an_unknown_baby():
    ctx = small()
    ev = ctx.evaluator
    ct = ctx.encrypt(np.ones(4), level=2)
    over_q = ev.encode(np.ones(ctx.params.slots), 2, 2.0**20).poly
    with pytest.raises(ParameterError, match="encode_extended"):
        ev.linear_transform_hoisted(ct, [0, 1], [(0, [(1, over_q)])], ct.scale * 2.0**20)
    ext = ev.encode_extended(np.ones(ctx.params.slots), 2, 2.0**20)
    with pytest.raises(ParameterError, match="baby step 2"):
        ev.linear_transform_hoisted(ct, [0, 1], [(0, [(2, ext)])], ct.scale * 2.0**20)
    with pytest.raises(ParameterError, match="or its residues"):
        ev.linear_transform_hoisted(ct, [0, 1], [(0, [(1, ext.data[:, :3])])], ct.scale * 2.0**20)
    with pytest.raises(ParameterError, match="at least one plaintext"):
        ev.linear_transform_hoisted(ct, [0, 1], [(4, [])], ct.scale)


def test_encode_extended_is_encode_over_q_and_p():
    ctx = small()
    ev = ctx.evaluator
    rng = np.random.default_rng(2)
    for values in (rng.uniform(-1, 1, ctx.params.slots), np.tile([0.5, -0.25j], ctx.params.slots // 2)):
        pt = ev.encode(values, 2, 2.0**40)
        ext = ev.encode_extended(values, 2, 2.0**40)
        limbs = len(pt.poly.idx)
        assert ext.idx == ev.switcher.plan(2).ext_idx and ext.idx[:limbs] == pt.poly.idx
        assert np.array_equal(ext.data[:limbs], pt.poly.data)
        p_rows = RNSPoly(ctx.ring, ext.data[limbs:], ext.idx[limbs:], True)
        assert np.array_equal(centred(p_rows), centred(pt.poly))      # the same integers mod P
        compact = ev.encode_extended(values, 2, 2.0**40, compact=True)
        assert compact.shape[1] == (4 if values[1] == -0.25j else ctx.params.n)    # period 2: 4 columns
        assert np.array_equal(np.repeat(compact, ctx.params.n // compact.shape[1], axis=1), ext.data)


def test_threads_give_the_same_bits():
    ctx = small()
    ev, slots = ctx.evaluator, ctx.params.slots
    rng = np.random.default_rng(3)
    diags = random_transform(slots, rng, OFFSETS[:9])
    split = bsgs_split(sorted(diags), slots)
    babies = sorted({b for terms in split.values() for b, _ in terms})
    ct = ctx.encrypt(rng.uniform(-1, 1, slots), level=3)
    pt_scale = float(ev._top_modulus(3))

    def run():
        groups = ((m, [(b, ev.encode_extended(np.roll(diags[k], m), 3, pt_scale)) for b, k in terms])
                  for m, terms in sorted(split.items()))
        return ev.linear_transform_hoisted(ct, babies, groups, ct.scale * pt_scale, rescale=True)

    before = hezk.threads.get_threads() if hasattr(hezk.threads, "get_threads") else None
    try:
        hezk.set_threads(1)
        one = run()
        hezk.set_threads(2)
        two = run()
    finally:
        hezk.set_threads(before or 1)
    assert all(np.array_equal(a.data, b.data) for a, b in zip(one.parts, two.parts))


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 5), st.sampled_from([8, 64, 256]), st.integers(0, 2**31), st.booleans(), st.booleans(),
       st.integers(0, 3))
def test_muladd_pair_matches_its_numpy_twin(rows, n, seed, init, narrow, log_repeat):
    """Both parts times one plaintext, added (or not: ``init``) to running sums; the plaintext uint32 or uint64,
    full or a compact subring NTT of n / 2^log_repeat columns (each slot repeated)."""
    q = np.array(find_ntt_primes(31, rows, 8), dtype=np.uint64)
    rng = np.random.default_rng(seed)
    draw = lambda cols=n: np.array([rng.integers(0, int(m), cols) for m in q], dtype=np.uint64)  # noqa: E731
    acc_b, acc_a, x_b, x_a = draw(), draw(), draw(), draw()
    small = draw(n >> log_repeat)
    if seed % 3 == 0:
        x_b[0, 0], small[0, 0] = q[0] - 1, q[0] - 1          # the largest residues
    pt = np.repeat(small, 1 << log_repeat, axis=1)
    col = q[:, None]
    want_b = (x_b * pt % col + (0 if init else acc_b)) % col
    want_a = (x_a * pt % col + (0 if init else acc_a)) % col
    muladd_pair(acc_b, acc_a, x_b, x_a, small.astype(np.uint32) if narrow else small, q, init)
    assert np.array_equal(acc_b, want_b) and np.array_equal(acc_a, want_a)


@settings(max_examples=15, deadline=None)
@given(st.integers(1, 4), st.sampled_from([8, 64, 512]), st.integers(0, 2**31))
def test_add_permuted_pair_matches_two_permuted_additions(rows, n, seed):
    q = np.array(find_ntt_primes(31, rows, 8), dtype=np.uint64)
    rng = np.random.default_rng(seed)
    draw = lambda: np.array([rng.integers(int(m) - 3 if seed % 2 else 0, int(m), n) for m in q],  # noqa: E731
                            dtype=np.uint64)                       # odd seeds: residues near q (the largest sums)
    acc, a, b = draw(), draw(), draw()
    perm = rng.permutation(n).astype(np.int64)
    want = acc.copy()
    add_permuted_into(want, a, perm, q)
    add_permuted_into(want, b, perm, q)
    add_permuted_pair_into(acc, a, b, perm, q)
    assert np.array_equal(acc, want)
    with pytest.raises(ParameterError, match="add_permuted_pair_into"):
        add_permuted_pair_into(acc, a[:, :-1], b, perm, q)


def test_muladd_pair_refuses_a_read_only_accumulator():
    q = np.array(find_ntt_primes(31, 1, 8), dtype=np.uint64)
    x = np.zeros((1, 8), dtype=np.uint64)
    frozen = x.copy()
    frozen.setflags(write=False)
    with pytest.raises(ParameterError, match="acc_b"):
        muladd_pair(frozen, x.copy(), x, x, x, q, False)
    with pytest.raises(ParameterError, match="pt must be"):
        muladd_pair(x.copy(), x.copy(), x, x, x.astype(np.int64), q, False)
    with pytest.raises(ParameterError, match="dividing n=8"):
        muladd_pair(x.copy(), x.copy(), x, x, x[:, :3], q, False)


# -- inside the bootstrap ----------------------------------------------------------------------------
@pytest.mark.parametrize("slots", [pytest.param(SPARSE, marks=pytest.mark.slow), None])  # sparse: 5 s
def test_coeff_to_slot_double_hoisted_matches_single(slots):
    ctx, p = boot_context(), boot_plan(slots)
    rng = np.random.default_rng(16)
    z = rng.uniform(-1, 1, p.total) + 1j * rng.uniform(-1, 1, p.total)
    if p.sparse:
        z = np.tile(z[:p.slots], p.total // p.slots)
    ct = ctx.encrypt(z, level=ctx.params.max_level - 1)
    outs = {}
    for double in (True, False):
        bs = Bootstrapper(ctx.evaluator, p)
        bs.double_hoisting = double
        outs[double] = bs.coeff_to_slot(ct)
    w = p.cts_reference(z)
    expected = [w + np.conj(w)] if p.sparse else [w + np.conj(w), -1j * w + np.conj(-1j * w)]
    for new, old, e in zip(outs[True], outs[False], expected):
        assert (new.level, new.scale, new.length) == (old.level, old.scale, old.length)
        got_new, got_old = slots_of(ctx, new), slots_of(ctx, old)
        assert bits(e, got_new) > 35 and bits(got_old, got_new) > 35
        assert bits(e, got_new) >= bits(e, got_old) - 1


@pytest.mark.slow      # 3 s: two bootstraps
def test_full_bootstrap_double_hoisted_keeps_the_stated_precision():
    ctx, p = boot_context(), boot_plan()
    x = np.random.default_rng(17).uniform(-1, 1, p.total)
    ct = ctx.encrypt(x, level=0)
    bs = Bootstrapper(ctx.evaluator, p)
    assert bs.double_hoisting
    new = bs.bootstrap(ct)
    bs.double_hoisting = False
    old = bs.bootstrap(ct)
    assert (new.level, new.scale) == (old.level, old.scale)
    got = ctx.decrypt(new)
    assert bits(x, got) >= p.precision_bits
    assert bits(x, got) >= bits(x, ctx.decrypt(old)) - 1


def test_evaluator_exposes_its_kept_bootstrapper():
    ctx = boot_context()
    boot = ctx.evaluator.bootstrapper(SPARSE)
    assert boot is ctx.evaluator.bootstrapper(SPARSE) and boot.plan.slots == SPARSE and boot.double_hoisting
    assert ctx.evaluator.bootstrap_plan(SPARSE) is boot.plan


def test_full_slot_coeff_to_slot_conjugates_once(monkeypatch):
    """Re and Im of full slots share one conjugation: w + conj(w) and -i·(w - conj(w)) (a key switch saved); the
    outputs match the twin and the operation counts price one."""
    ctx, p = boot_context(), boot_plan()
    ev = ctx.evaluator
    calls = []
    original = ev.conjugate
    monkeypatch.setattr(ev, "conjugate", lambda ct: calls.append(ct.level) or original(ct))
    rng = np.random.default_rng(18)
    z = rng.uniform(-1, 1, p.total) + 1j * rng.uniform(-1, 1, p.total)
    outs = Bootstrapper(ev, p).coeff_to_slot(ctx.encrypt(z, level=ctx.params.max_level - 1))
    assert len(calls) == 1 and len(outs) == 2
    w = p.cts_reference(z)
    for o, e in zip(outs, [2 * w.real, 2 * w.imag]):
        assert not o.is_complex and bits(e, slots_of(ctx, o)) > 35
    counts = dict((name, c) for name, _, c in p.operation_counts())
    rotated_giants = sum(1 for t in p.cts for s in t.split if s)
    assert counts["coeff_to_slot"]["rotations"] == rotated_giants + 1
