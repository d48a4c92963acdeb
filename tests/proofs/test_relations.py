"""Masked stores and relation sumchecks (proofs.relations) against plain recomputation."""
import itertools

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from proofs import field as F
from proofs.errors import ProofError, ProofRejected
from proofs.mle import eq_table, mle_evaluate
from proofs.relations import (BitTerm, Relation, RelationProver, Slot, StoreLayout, Stored, Term, View, box_indicator,
                              box_table, commit_store, eq_factor, expected_summand, padding_factor, prefix_indicator,
                              table_factor, view_pieces, view_value)
from proofs.sumcheck import prove_sumcheck, verify_sumcheck
from proofs.transcript import Transcript
from proofs.zk import HidingParams, open_functionals, prove_zk_sumcheck, verify_functionals, verify_zk_sumcheck

SLOTS = (Slot("A", 5), Slot("W", 6), Slot("B", 4, 2))


def _store(hiding, seed=1):
    rng = np.random.default_rng(seed)
    layout = StoreLayout(SLOTS, hiding)
    tables = {s.name: rng.integers(0, 2 if s.plane_vars else F.P, size=s.size, dtype=np.uint64) for s in SLOTS}
    commitment, witness = commit_store(layout, tables, HidingParams(hiding=hiding), seed=seed)
    return layout, tables, commitment, witness


def _plain_view(tables, slot, e, w):
    """sum_j w_j T_j~(e) without masks (the value on the cube, or with every variable contracted)."""
    table = tables[slot.name].reshape(1 << slot.plane_vars, 1 << slot.elem_vars)
    w = F.ext_one((1,)) if w is None else w
    total = F.ext_zero()
    for j in range(table.shape[0]):
        total = F.ext_add(total, F.ext_mul(w[j], mle_evaluate(table[j], e)))
    return total


@given(st.integers(0, 12).flatmap(lambda bits: st.tuples(st.just(bits), st.integers(1, 1 << bits))),
       st.integers(1, 3))
def test_axis_pieces_cover_the_real_range_aligned_and_never_more_than_the_axis(case, most):
    """An axis's pieces: at most ``most`` ranges [start, start + 2^free), each start a multiple of its length,
    disjoint, covering [0, real), inside the padded axis, no larger in total than the smallest power of two >= real
    (exactly real when its binary digits are at most ``most``)."""
    from proofs.relations import axis_pieces
    bits, real = case
    pieces = axis_pieces(real, bits, most)
    assert 1 <= len(pieces) <= most
    if bin(real).count("1") <= most and len(pieces) > 1:
        assert sum(1 << free for _, free in pieces) == real
    covered = np.zeros(1 << bits, dtype=int)
    for start, free in pieces:
        assert start % (1 << free) == 0 and start + (1 << free) <= 1 << bits
        covered[start:start + (1 << free)] += 1
    assert covered.max() == 1 and covered[:real].all()
    assert sum(1 << free for _, free in pieces) <= 1 << (real - 1).bit_length()


@given(st.lists(st.integers(0, 6).flatmap(lambda bits: st.tuples(st.integers(1, 1 << bits), st.just(bits))),
                min_size=1, max_size=4))
def test_slot_pieces_tile_the_box_within_the_cap(box):
    """A slot's pieces: at most MAX_SLOT_PIECES, disjoint, covering its box, no more entries than the slot."""
    from proofs.relations import MAX_SLOT_PIECES, slot_pieces
    elem = max(4, sum(bits for _, bits in box))
    slot = Slot("T", elem, 0, tuple(box))
    pieces = slot_pieces(slot)
    covered = np.zeros(1 << elem, dtype=int)
    for piece in pieces:
        if piece is None:
            covered[:] += 1
            continue
        assert len(pieces) <= MAX_SLOT_PIECES
        index = np.zeros(1, dtype=np.int64)  # the flat indices of the piece, axis by axis (lowest first)
        shift = 0
        for start, free, bits in piece:
            index = (index[None, :] + ((start + np.arange(1 << free)) << shift)[:, None]).reshape(-1)
            shift += bits
        covered[index] += 1
    assert covered.max() == 1
    real = np.zeros([1 << bits for _, bits in reversed(box)], dtype=bool)
    real[tuple(slice(0, n) for n, _ in reversed(box))] = True
    assert covered[:real.size][real.reshape(-1)].all()


@settings(max_examples=10, deadline=None)
@given(st.booleans(), st.integers(0, 2 ** 32))
def test_boxed_slots_commit_their_pieces_and_views_open_to_the_whole_tables_values(hiding, seed):
    """Naive twin: slots with boxes (a 3 x 5 x 6 tensor padded to 4 x 8 x 8, a 12 x 3 one with planes) commit
    their pieces only (a smaller table than the whole slots) and every view opens, through hiding Ligero, to the
    value of the whole table, zero outside the box."""
    rng = np.random.default_rng(seed)
    slots = (Slot("T", 8, 0, ((6, 3), (5, 3), (3, 2))), Slot("P", 6, 2, ((3, 2), (12, 4))), Slot("U", 4))
    layout = StoreLayout(slots, hiding)
    assert layout.num_vars < StoreLayout(tuple(Slot(x.name, x.elem_vars, x.plane_vars) for x in slots), hiding).num_vars
    tables = {}
    for slot in slots:
        table = rng.integers(0, F.P, size=slot.size, dtype=np.uint64).reshape(1 << slot.plane_vars, -1)
        if slot.box:
            shaped = table.reshape([1 << slot.plane_vars] + [1 << bits for _, bits in reversed(slot.box)])
            keep = np.zeros(shaped.shape, dtype=bool)
            keep[(slice(None),) + tuple(slice(0, real) for real, _ in reversed(slot.box))] = True
            table = np.where(keep, shaped, 0)
        tables[slot.name] = table.reshape(-1)
    commitment, witness = commit_store(layout, tables, HidingParams(hiding=hiding), seed=seed % 1000)
    views = [View(x.name, F.ext_random((x.elem_vars,), seed=seed % 997 + i),
                  F.ext_random((1 << x.plane_vars,), seed=seed % 991) if x.plane_vars else None)
             for i, x in enumerate(slots)]
    values = np.stack([view_value(witness, v) for v in views])
    if not hiding:  # the plain value from the whole table
        for x, v, value in zip(slots, views, values):
            assert np.array_equal(value, _plain_view(tables, x, v.e, v.w))
    functionals = [view_pieces(layout, commitment, v) for v in views]
    opened, opening = open_functionals(witness.commitment_witness, functionals, Transcript("t"))
    assert np.array_equal(opened, values)
    verify_functionals(commitment, functionals, values, opening, Transcript("t"))


@pytest.mark.parametrize("hiding", [True, False])
def test_views_open_to_their_values_and_agree_on_the_cube(hiding):
    layout, tables, commitment, witness = _store(hiding)
    views = []
    for s in SLOTS:
        e = F.ext_random((s.elem_vars,), seed=len(views))
        w = F.ext_random((1 << s.plane_vars,), seed=9) if s.plane_vars else None
        views += [View(s.name, e, w), View(s.name, e, w, (1, s.elem_vars - 1))]
    values = np.stack([view_value(witness, v) for v in views])
    opened, opening = open_functionals(witness.commitment_witness,
                                       [view_pieces(layout, commitment, v) for v in views], Transcript("t"))
    assert np.array_equal(opened, values)
    verify_functionals(commitment, [view_pieces(layout, commitment, v) for v in views], values, opening,
                       Transcript("t"))
    bad = values.copy()
    bad[2, 0] = (bad[2, 0] + 1) % F.P
    with pytest.raises(ProofRejected):
        verify_functionals(commitment, [view_pieces(layout, commitment, v) for v in views], bad, opening,
                           Transcript("t"))
    for s in SLOTS:  # on Boolean points the masked extension is the table
        index = 5 % (1 << s.elem_vars)
        e = F.ext_from_base(np.array([(index >> i) & 1 for i in range(s.elem_vars)], dtype=np.uint64))
        w = F.ext_zero((1 << s.plane_vars,)) if s.plane_vars else None
        if w is not None:
            w[1] = F.ext_one()
        entry = tables[s.name][(1 << s.elem_vars if s.plane_vars else 0) + index]
        assert np.array_equal(view_value(witness, View(s.name, e, w)), F.ext_from_base(np.array([entry]))[0])


def test_masks_change_values_off_the_cube():
    layout, tables, _, witness = _store(True)
    e = F.ext_random((5,), seed=3)
    assert not np.array_equal(view_value(witness, View("A", e)), _plain_view(tables, layout.slot("A"), e, None))
    assert np.array_equal(view_value(witness, View("A", e, active=(0, 0))), _plain_view(tables, layout.slot("A"), e, None))


def _relation(seed):
    rng = np.random.default_rng(seed)
    tau_b, tau_o, tau = F.ext_random((2,), seed=seed), F.ext_random((3,), seed=seed + 1), F.ext_random((4,), seed=seed + 2)
    c = F.ext_from_base(rng.integers(0, F.P, size=4, dtype=np.uint64))
    sign = F.ext_zero((4,))
    sign[3] = F.ext_one()
    kron = F.ext_mul(c[:, None, :], eq_table(tau)[None, :, :]).reshape(-1, 4)
    terms = (
        Term(F.ext_one(), (), (Stored("s", "A", high=tau_b), Stored("s", "W", high=tau_o)), 3),
        Term(F.ext_neg(F.ext_one()), (table_factor(kron),), (Stored("s", "B"),), 6),
        Term(F.ext_from_base(np.array([5], dtype=np.uint64))[0], (), (), 0),
        Term(F.ext_one(), (eq_factor(tau),), (Stored("s", "B", planes=sign), Stored("s", "B", planes=c)), 4),
    )
    return terms, (tau_b, tau_o, tau, c, sign, kron)


def _brute_claim(terms, tables):
    """sum over the cube of every term, from plain MLE values (masks vanish there)."""
    slots = {s.name: s for s in SLOTS}
    total = F.ext_zero()
    for term in terms:
        for bits in itertools.product([0, 1], repeat=term.num_vars):
            x = F.ext_from_base(np.array(bits[::-1] if False else bits, dtype=np.uint64)).reshape(-1, 4)
            value = np.asarray(term.coefficient, dtype=np.uint64)
            for p in term.publics:
                value = F.ext_mul(value, p.at(x))
            for f in term.stored:
                view = f.view_at(slots[f.name], x)
                value = F.ext_mul(value, _plain_view(tables, slots[f.name], view.e, view.w))
            total = F.ext_add(total, value)
    return total


@settings(max_examples=8, deadline=None)
@given(st.booleans(), st.integers(0, 2 ** 30))
def test_relation_sumcheck_matches_brute_force_and_verifies(hiding, seed):
    """Random tables, masks, fixed points and coefficients: the claim is the brute-force sum over the cube."""
    layout, tables, commitment, witness = _store(hiding, seed)
    terms, _ = _relation(seed + 7)
    claim = _brute_claim(terms, tables)
    relation = Relation(terms, claim)
    layouts = {"s": layout}
    prover = RelationProver(relation, {"s": witness}, layouts)
    assert prover.num_vars == 6 and prover.degree == (5 if hiding else 3)
    if hiding:
        proof, sigma, finals = prove_zk_sumcheck(prover, claim, Transcript("r"), "rel", HidingParams())
        sub = verify_zk_sumcheck(proof, claim, 6, prover.degree, Transcript("r"), "rel")
    else:
        proof, sigma, finals = prove_sumcheck(prover, claim, Transcript("r"), "rel", strict=False)
        sub = verify_sumcheck(proof, claim, 6, prover.degree, Transcript("r"), "rel")
    assert np.array_equal(sub.point, sigma)
    assert F.ext_eq(expected_summand(relation, sigma, finals), sub.expected_value)
    for term, values in zip(terms, finals):  # stated values are the views' values (what the openings show)
        for f, v in zip(term.stored, values):
            assert np.array_equal(v, view_value(witness, f.view_at(layout.slot(f.name), sigma)))


def test_a_false_claim_is_caught():
    layout, tables, _, witness = _store(True)
    terms, _ = _relation(8)
    claim = F.ext_add(_brute_claim(terms, tables), F.ext_one())
    relation = Relation(terms, claim)
    prover = RelationProver(relation, {"s": witness}, {"s": layout})
    proof, sigma, finals = prove_zk_sumcheck(prover, claim, Transcript("r"), "rel", HidingParams())
    with pytest.raises(ProofRejected):
        sub = verify_zk_sumcheck(proof, claim, 6, prover.degree, Transcript("r"), "rel")
        if not F.ext_eq(expected_summand(relation, sigma, finals), sub.expected_value):
            raise ProofRejected("summand", "test")


def test_factor_variable_counts_are_checked():
    layout, _, _, witness = _store(False)
    bad = Relation((Term(F.ext_one(), (), (Stored("s", "A"), Stored("s", "W")), 5),), F.ext_zero())
    with pytest.raises(ProofError):
        RelationProver(bad, {"s": witness}, {"s": layout})
    with pytest.raises(ProofError):
        StoreLayout((Slot("tiny", 3),), True)


@pytest.mark.parametrize("hiding", [True, False])
def test_fused_round_messages_equal_the_numpy_twin(hiding):
    """Tables of 2^15 entries go through the numba kernel: every round message equals numpy's."""
    slots = (Slot("A", 14), Slot("B", 13, 2))
    layout = StoreLayout(slots, hiding)
    rng = np.random.default_rng(5)
    tables = {"A": rng.integers(0, F.P, size=1 << 14, dtype=np.uint64),
              "B": rng.integers(0, 2, size=1 << 15, dtype=np.uint64)}
    _, witness = commit_store(layout, tables, HidingParams(hiding=hiding), seed=5)
    c = F.ext_random((4,), seed=7)
    bits = Stored("s", "B")
    terms = (Term(F.ext_one(), (eq_factor(F.ext_random((15,), seed=8)),), (bits, bits), 15),
             Term(F.ext_random((), seed=9), (), (Stored("s", "A", high=F.ext_random((1,), seed=10)),
                                                 Stored("s", "B", planes=c)), 13),
             Term(F.ext_one(), (table_factor(F.ext_from_base(F.to_field(np.arange(1 << 13)))),),
                  (Stored("s", "B", planes=F.ext_random((4,), seed=11)),), 13))
    relation = Relation(terms, F.ext_zero())
    fused = RelationProver(relation, {"s": witness}, {"s": layout}, fused=True)
    plain = RelationProver(relation, {"s": witness}, {"s": layout}, fused=False)
    for j in range(15):
        assert np.array_equal(fused.round_message(), plain.round_message()), f"round {j}"
        r = F.ext_random((), seed=100 + j)
        fused.bind(r)
        plain.bind(r)
    assert all(np.array_equal(a, b) for u, v in zip(fused.final_evaluations(), plain.final_evaluations())
               for a, b in zip(u, v))


@pytest.mark.parametrize("log_size", [6, 15])
@pytest.mark.parametrize("hiding", [True, False])
def test_bit_term_equals_the_generic_terms(hiding, log_size):
    """BitTerm's split-eq prover (numba for 2^15 entries, numpy below) sends the messages of eq B - eq B B."""
    layout = StoreLayout((Slot("B", log_size - 2, 2),), hiding)
    table = np.random.default_rng(3).integers(0, 2, size=1 << log_size, dtype=np.uint64)
    _, witness = commit_store(layout, {"B": table}, HidingParams(hiding=hiding), seed=3)
    tau, beta = F.ext_random((log_size,), seed=4), F.ext_random((), seed=5)
    bits = Stored("s", "B")
    special = Relation((BitTerm(beta, tau, bits), Term(F.ext_one(), (), (), 0)), F.ext_one())
    generic = Relation((Term(beta, (eq_factor(tau),), (bits,), log_size),
                        Term(F.ext_neg(beta), (eq_factor(tau),), (bits, bits), log_size),
                        Term(F.ext_one(), (), (), 0)), F.ext_one())
    provers = [RelationProver(special, {"s": witness}, {"s": layout}),
               RelationProver(special, {"s": witness}, {"s": layout}, fused=False),
               RelationProver(generic, {"s": witness}, {"s": layout})]
    assert provers[0].degree == provers[2].degree
    claim = None
    for j in range(log_size):
        messages = [p.round_message() for p in provers]
        assert np.array_equal(messages[0], messages[2]) and np.array_equal(messages[1], messages[2]), f"round {j}"
        if claim is not None:
            assert F.ext_eq(F.ext_add(messages[0][0], messages[0][1]), claim)
        r = F.ext_random((), seed=50 + j)
        from proofs.sumcheck import lagrange_eval
        claim = lagrange_eval(messages[0], r)
        for p in provers:
            p.bind(r)
    sigma = np.stack(provers[0].challenges)
    assert F.ext_eq(expected_summand(special, sigma, provers[0].final_evaluations()), claim)
    v = view_value(witness, bits.view_at(layout.slot("B"), sigma))
    assert np.array_equal(provers[0].final_evaluations()[0][0], v)


@st.composite
def _boxes(draw):
    """Axes of 0..3 variables, each with an extent in [0, 2^k]."""
    logs = tuple(draw(st.lists(st.integers(0, 3), min_size=1, max_size=3)))
    extents = tuple(draw(st.integers(0, 1 << k)) for k in logs)
    return extents, logs, draw(st.integers(0, 2 ** 30))


@settings(max_examples=40, deadline=None)
@given(_boxes())
def test_box_indicator_and_padding_factor_are_the_mles_of_their_tables(case):
    """The O(n) evaluations equal the MLEs of the explicit tables (the naive twins) at random points."""
    extents, logs, seed = case
    n = sum(logs)
    table = box_table(extents, logs)
    index = np.arange(1 << n)
    expected, start = np.ones(1 << n, dtype=bool), 0
    for extent, k in zip(extents, logs):
        expected &= ((index >> start) & ((1 << k) - 1)) < extent
        start += k
    assert np.array_equal(table, expected.astype(np.uint64))
    point, tau = F.ext_random((n,), seed=seed), F.ext_random((n,), seed=seed + 1)
    assert np.array_equal(box_indicator(point, extents, logs), mle_evaluate(table, point))
    factor = padding_factor(tau, extents, logs)
    outside = F.ext_mul_base(eq_table(tau), np.uint64(1) - table)
    assert np.array_equal(factor.table(), outside)
    sigma = F.ext_random((n + 1,), seed=seed + 2)  # at() reads the first n coordinates
    assert np.array_equal(factor.at(sigma), mle_evaluate(outside, sigma[:n]))
    if logs[0] <= 2:
        count = extents[0]
        assert np.array_equal(prefix_indicator(point[:logs[0]], count),
                              F.ext_sum(eq_table(point[:logs[0]])[:count], axis=0) if count else F.ext_zero())


def test_padding_factor_refuses_a_box_that_does_not_fit():
    tau = F.ext_random((5,), seed=1)
    for extents, logs in (((3, 5), (2, 2)), ((5, 2), (2, 3)), ((3,), (2, 3))):
        with pytest.raises(ProofError, match="padding factor"):
            padding_factor(tau, extents, logs)


@pytest.mark.parametrize("hiding", [True, False])
def test_a_padding_term_rejects_a_tensor_dirty_outside_its_box(hiding):
    """sum_x eq(tau, x) [T(x) + gamma (1 - box(x)) T(x)] = T~(tau): true for T zero outside the 5 x 3 box of
    its 8 x 4 table, false (so the verifier rejects) once one padded entry is set."""
    box = ((3, 5), (2, 3))
    layout = StoreLayout((Slot("T", 5),), hiding)
    rng = np.random.default_rng(2)
    clean = rng.integers(0, F.P, size=32, dtype=np.uint64) * box_table(*box)
    tau, gamma = F.ext_random((5,), seed=3), F.ext_random((), seed=4)
    for table, accepted in ((clean, True), (np.where(np.arange(32) == 3 + 4 * 6, np.uint64(7), clean), False)):
        _, witness = commit_store(layout, {"T": table}, HidingParams(hiding=hiding), seed=5)
        tensor = Stored("s", "T")
        relation = Relation((Term(F.ext_one(), (eq_factor(tau),), (tensor,), 5),
                             Term(gamma, (padding_factor(tau, *box),), (tensor,), 5)), mle_evaluate(clean, tau))
        prover = RelationProver(relation, {"s": witness}, {"s": layout})
        assert prover.degree == (3 if hiding else 2)  # the padding term adds no degree and no stated value
        prove = prove_zk_sumcheck if hiding else lambda *a: prove_sumcheck(*a, strict=False)
        verify = verify_zk_sumcheck if hiding else verify_sumcheck
        args = (relation.claim, Transcript("p"), "pad") + ((HidingParams(),) if hiding else ())
        proof, sigma, finals = prove(prover, *args)
        try:
            sub = verify(proof, relation.claim, 5, prover.degree, Transcript("p"), "pad")
            ok = F.ext_eq(expected_summand(relation, sigma, finals), sub.expected_value)
        except ProofRejected:
            ok = False
        assert ok == accepted


@settings(max_examples=12, deadline=None)
@given(st.integers(1, 8), st.integers(0, 3), st.integers(0, 3), st.integers(1, 4), st.integers(0, 2**32 - 1))
def test_two_factor_masked_kernel_is_the_general_one(log_half, log_planes_a, log_planes_b, degree, seed):
    """masked_product_round_sums (registers, plane counters) against masked_round_sums on two F_p4 factors with
    per-plane masks of different plane counts, or none (plane count 0 -> no mask)."""
    kernels = F.numba_kernels()
    if kernels is None:
        pytest.skip("numba not installed")
    half = 1 << log_half
    a, b = F.ext_random((2 * half,), seed=seed), F.ext_random((2 * half,), seed=seed + 1)
    a[::5] = F.P - 1
    planes = [min(1 << log_planes_a, half), min(1 << log_planes_b, half)]
    masks = np.zeros((2, max(planes), 4), dtype=np.uint64)
    blocks = np.zeros(2, dtype=np.int64)
    for k, count in enumerate(planes):
        if (log_planes_a, log_planes_b)[k]:  # 0: this factor carries no mask
            masks[k, :count] = F.ext_random((count,), seed=seed + 2 + k)
            blocks[k] = half // count
    zs = F.to_field(np.array([x * (1 - x) for x in range(degree + 1)], dtype=np.int64))
    expected, out = np.empty((degree + 1, 4), dtype=np.uint64), np.empty((degree + 1, 4), dtype=np.uint64)
    kernels.masked_round_sums(np.stack([a, b]), masks, blocks, np.empty((0, 2 * half), dtype=np.uint64), zs, degree,
                              expected)
    kernels.masked_product_round_sums(a, b, masks[0], blocks[0], masks[1], blocks[1], zs, degree, out)
    assert np.array_equal(out, expected)
