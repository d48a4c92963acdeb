"""benchmarks/memory_traffic.py counts the bytes the ring kernels read and write (issue 36, item 2): the counts equal
hand counts of simple operations, so a kernel the proxies miss (too few bytes) or count twice (too many, or a
wrapped call inside another) fails here."""
import numpy as np
import pytest

import crypto.ring
from benchmarks import memory_traffic as mt
from crypto import CKKSContext, CKKSParameters
from crypto.ring import RingContext, RNSPoly

WORD = 8


@pytest.fixture(scope="module")
def toy():
    params = CKKSParameters.preset("TOY")
    ctx = CKKSContext.keygen(params, rotations=[1, 2], seed=3)
    rng = np.random.default_rng(3)
    a, b = (ctx.encrypt(rng.uniform(-1, 1, params.slots)) for _ in range(2))
    return params, ctx, a, b


def residues(ring, idx, seed=0):
    q = ring.q_column(idx)
    return (np.random.default_rng(seed).integers(0, 2**62, (len(idx), ring.n), dtype=np.uint64) % q)


def only(traffic, kind):
    """The bytes of ``kind``, after checking no other kind moved any."""
    assert traffic.bytes() == traffic.bytes(kind), {k: traffic.bytes(k) for k in mt.KINDS}
    assert not traffic.nested
    return traffic.bytes(kind)


@pytest.mark.parametrize("in_place", [False, True])
def test_an_ntt_of_k_limbs_moves_2_k_n_words(in_place):
    ring = RingContext(1024, CKKSParameters.preset("TOY").moduli[:5])
    idx = (0, 1, 2, 3, 4)
    data = residues(ring, idx)
    with mt.counting() as t:
        out = ring.ntt(data, idx, out=data if in_place else None)
        ring.intt(out, idx, out=out if in_place else None)
    assert only(t, "NTT/INTT") == 2 * 2 * len(idx) * ring.n * WORD       # read + write, twice
    assert t.calls["NTT/INTT"] == 2


def test_a_ciphertext_add_moves_3_x_2_x_k_n_words(toy):
    params, ctx, a, b = toy
    k = len(a.parts[0].idx)
    with mt.counting() as t:
        ctx.evaluator.add(a, b)
    moved = only(t, "mul/add/Barrett")
    hand = 3 * 2 * k * params.n * WORD                  # two parts: a, b read, the sum written
    assert hand <= moved <= 1.01 * hand                 # (+ the moduli: k words a call)


def test_the_tensor_reads_four_parts_and_writes_three(toy):
    params, _, a, b = toy
    p = a.parts[0]
    with mt.counting() as t:
        p.ring.tensor(a.parts[0].data, a.parts[1].data, b.parts[0].data, b.parts[1].data, p.idx)
    hand = 7 * len(p.idx) * params.n * WORD
    assert hand <= only(t, "mul/add/Barrett") <= 1.01 * hand


def test_an_automorphism_reads_the_limbs_and_the_permutation(toy):
    params, _, a, _ = toy
    p = a.parts[0]
    with mt.counting() as t:
        p.automorphism(5)
    assert only(t, "automorphism") == 2 * len(p.idx) * params.n * WORD + params.n * 8     # int64 permutation


def test_a_decomposition_and_inner_product_move_the_hand_counted_rows(toy):
    params, ctx, a, _ = toy
    ev, n = ctx.evaluator, params.n
    c1 = a.parts[1]
    plan = ev.switcher.plan(a.level)
    limbs, lifted, ext, digits = len(c1.idx), len(plan.lifted_idx), len(plan.ext_idx), len(plan.digit_ids)
    with mt.counting() as t:
        d = ev.switcher.decompose(c1)
        ev.switcher.inner_product(d, ev.relin_key)
    assert not t.nested
    assert t.bytes("NTT/INTT") == 2 * (limbs + lifted) * n * WORD          # INTT of c1, NTT of every extension
    conv = t.bytes("basis conversion")                                       # each digit reads its own rows
    assert (limbs + lifted) * n * WORD <= conv <= 1.01 * (limbs + lifted) * n * WORD
    assert lifted == digits * ext - limbs
    key_bytes = ev.relin_key.b.itemsize
    assert t.read["key-switch inner product"] == digits * ext * n * (WORD + 2 * key_bytes)
    assert t.written["key-switch inner product"] == 2 * ext * n * WORD
    assert t.bytes() == t.bytes("NTT/INTT") + conv + t.bytes("key-switch inner product")


def test_every_kernel_the_crypto_modules_call_is_wrapped_or_listed():
    assert mt.unwrapped_kernels() == []


def test_no_wrapped_kernel_runs_inside_another_during_the_operations(toy):
    params, ctx, a, b = toy
    ev = ctx.evaluator
    for fn in (lambda: ev.mul_rescale(a, b), lambda: ev.rotate(a, 1), lambda: ev.rotate_hoisted(a, [1, 2]),
               lambda: ev.switcher.switch(a.parts[1], ev.relin_key)):
        with mt.counting() as t:
            fn()
        assert t.bytes() > 0 and not t.nested
        assert t.bytes("NTT/INTT") > 0 and t.bytes("key-switch inner product") > 0


def test_the_checks_catch_a_missed_kernel_and_a_double_count(toy, monkeypatch):
    params, ctx, a, b = toy
    missed = {key: spec for key, spec in mt.KERNELS.items() if key[1] != "addmod_rows"}
    monkeypatch.setattr(mt, "KERNELS", missed)
    with mt.counting() as t:
        ctx.evaluator.add(a, b)
    assert t.bytes() == 0
    doubled = {**mt.KERNELS, ("crypto.ring", "addmod_rows"): mt.KernelSpec("mul/add/Barrett"),
               ("crypto.ring", "RNSPoly.__add__"): mt.KernelSpec("mul/add/Barrett")}
    monkeypatch.setattr(mt, "KERNELS", doubled)
    with mt.counting() as t:
        ctx.evaluator.add(a, b)
    assert t.nested == ["crypto.ring.addmod_rows"] * 2


def test_counting_puts_the_kernels_back_even_after_an_error():
    originals = {key: mt.resolve(*key)[2] for key in mt.KERNELS}
    with pytest.raises(RuntimeError):
        with mt.counting():
            assert crypto.ring.addmod_rows is not originals[("crypto.ring", "addmod_rows")]
            assert crypto.ring.np is not np
            raise RuntimeError("inside")
    assert {key: mt.resolve(*key)[2] for key in mt.KERNELS} == originals
    assert crypto.ring.np is np and RNSPoly.keep is originals[("crypto.ring", "RNSPoly.keep")]


def test_copies_count_concatenate_and_keep_but_not_a_view(toy):
    params, _, a, _ = toy
    p = a.parts[0]
    with mt.counting() as t:
        p.keep(p.idx[:2])                                  # a run: a view
    assert t.bytes() == 0
    with mt.counting() as t:
        p.keep((p.idx[0], p.idx[2]))                       # scattered: a copy of two rows
        p.to_coeff().extend((len(p.idx) + 1,))             # conversion, NTT, then one concatenation
    rows = 2 * 2 + 2 * (len(p.idx) + 1)
    assert t.bytes("copies") == rows * params.n * WORD


def test_the_bandwidth_is_positive_and_a_row_divides_bytes_by_it(toy):
    bw = mt.bandwidth(megabytes=8, repeats=1)
    assert bw["copy"] > 0.1 and bw["add"] > 0.1
    t = mt.Traffic()
    t.add("copies", "x", 3 * 10**9, 10**9)
    r = mt.row("op", t, 2.0, 4.0)
    assert r[1] == 4000 and r[-3] == 1000 and r[-2] == 2000 and r[-1] == 0.5


@pytest.mark.slow
def test_smoke_run_counts_every_kind_in_a_bootstrap(capsys):
    out = mt.main(["--smoke"])
    text = capsys.readouterr().out
    assert "bandwidth, one thread" in text and "bootstrap (smoke" in text
    results = out["results"]
    assert len(results) == 5
    boot = next(t for name, (t, _) in results.items() if name.startswith("bootstrap"))
    for kind in ("NTT/INTT", "basis conversion", "mul/add/Barrett", "automorphism", "key-switch inner product",
                 "copies"):
        assert boot.bytes(kind) > 0, kind
    assert not boot.nested and all(s > 0 for _, s in results.values())
