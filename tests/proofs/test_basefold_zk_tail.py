"""Hiding Basefold's "tail" layout (proofs.basefold_zk: random tails, one small mask table per batch, a masked
claim reduction): honest batches verify and their values equal a plain recomputation; every component of the
MaskedBatchProof is checked (tampering rejected, fuzzed bytes give ProofRejected only); layouts never mix; and
zero knowledge is checked by linear algebra: with the challenges held fixed the proof is linear in (table,
tail, mask table), and a change of the table invisible to the claims is absorbed by the randomness (the rank
test), while dropping either the tail or the mask table makes the same test fail."""
import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from proofs import basefold as B
from proofs import basefold_zk as Z
from proofs import field as F
from proofs.errors import ProofError, ProofRejected
from proofs.mle import eq_table
from proofs.transcript import Transcript
from tests.proofs.cheating import consistent_cheating

BASE = B.BasefoldParams(rate_inv=2, arity=2, final_vars=4, max_log_codeword=14)
TAIL = Z.HidingBasefoldParams(BASE, 1, "tail")


def _table(rng, n, used=None):
    t = rng.integers(0, 1 << 20, 1 << n).astype(np.uint64)
    if used is not None:
        t[used:] = 0
    return t


@pytest.fixture(scope="module")
def batch():
    rng = np.random.default_rng(1)
    specs = [(17, None, 0), (16, 1 << 15, 1 << 15), (12, None, 0)]  # a doubled tail, an unused end, slots
    witnesses, commitments, points = [], [], []
    for n, used, free in specs:
        c, w = Z.commit(_table(rng, n, used), TAIL, free=free)
        witnesses.append(w)
        commitments.append(c)
        p = rng.integers(0, F.P, (2, n, 4), dtype=np.uint64)
        if free:
            p[:, -1] = 0  # claims weigh the used half only
        points.append(p)
    values, proof = Z.open_batch(witnesses, points, Transcript(b"tail"))
    return witnesses, commitments, points, values, proof


def test_shapes_tail_and_slots():
    assert Z.shape(17, TAIL) == (1, 18)              # one random slot; S_0 = the table and a tail as large
    assert Z.shape(16, TAIL, 1 << 15) == (1, 16)     # S_0's tail: the table's own unused half
    assert Z.shape(12, TAIL)[0] >= 3                 # small tables keep their random slots
    assert Z.shape(17, Z.HidingBasefoldParams(BASE))[0] >= 3


def test_honest_batch_verifies_with_recomputed_values(batch):
    witnesses, commitments, points, values, proof = batch
    for w, p, v in zip(witnesses, points, values):
        for z, y in zip(p, v):  # plain recomputation: sum_x eq(z, x) t(x) over the committed table
            assert F.ext_eq(F.ext_sum(F.ext_mul_base(eq_table(z), w.table), axis=0), y)
    Z.verify_batch(commitments, points, values, proof, Transcript(b"tail"))
    Z.verify_batch(commitments, points, values, Z.MaskedBatchProof.from_bytes(proof.to_bytes()), Transcript(b"tail"))
    assert isinstance(proof, Z.MaskedBatchProof) and proof.mask.num_vars == Z.mask_vars(19, BASE) < 19
    for c in commitments:
        assert Z.HidingBasefoldCommitment.from_bytes(c.to_bytes()).to_bytes() == c.to_bytes()


def _bump(a):
    a = np.array(a, copy=True)
    a.reshape(-1)[0] = (a.reshape(-1)[0] + 1) % F.P
    return a


def test_every_component_is_checked(batch):
    _, commitments, points, values, proof = batch
    red = proof.reduction
    forged = [
        dataclasses.replace(proof, evals=_bump(proof.evals)),
        dataclasses.replace(proof, reduction=dataclasses.replace(red, mask_sum=_bump(red.mask_sum))),
        dataclasses.replace(proof, reduction=dataclasses.replace(red, mask_eval=_bump(red.mask_eval))),
        dataclasses.replace(proof, reduction=dataclasses.replace(
            red, sumcheck=dataclasses.replace(red.sumcheck, round_messages=_bump(red.sumcheck.round_messages)))),
        dataclasses.replace(proof, mask=B.BasefoldCommitment(bytes(32), proof.mask.num_vars, BASE)),
        dataclasses.replace(proof, mask=B.BasefoldCommitment(proof.mask.root, proof.mask.num_vars + 1, BASE)),
        dataclasses.replace(proof, mask_value=_bump(proof.mask_value)),
        dataclasses.replace(proof, mask=B.BasefoldCommitment(proof.mask.root, proof.mask.num_vars,
                                                             dataclasses.replace(BASE, rate_inv=4))),
        dataclasses.replace(proof, opening=dataclasses.replace(proof.opening, final=_bump(proof.opening.final))),
        dataclasses.replace(proof, opening=dataclasses.replace(proof.opening, rounds=_bump(proof.opening.rounds))),
        # the mask table's own opening, each part, and the two openings swapped
        dataclasses.replace(proof, mask_opening=dataclasses.replace(proof.mask_opening,
                                                                    final=_bump(proof.mask_opening.final))),
        dataclasses.replace(proof, mask_opening=dataclasses.replace(proof.mask_opening,
                                                                    rounds=_bump(proof.mask_opening.rounds))),
        dataclasses.replace(proof, mask_opening=dataclasses.replace(proof.mask_opening,
                                                                    reduction=_bump(proof.mask_opening.reduction))),
        dataclasses.replace(proof, mask_opening=proof.opening, opening=proof.mask_opening),
        # the tables' opening given claim-reduction rounds its aligned claims do not have
        dataclasses.replace(proof, opening=dataclasses.replace(proof.opening, reduction=proof.mask_opening.reduction)),
    ]
    for bad in forged:
        with pytest.raises(ProofRejected):
            Z.verify_batch(commitments, points, values, bad, Transcript(b"tail"))
    with pytest.raises(ProofRejected):
        Z.verify_batch(commitments, points, [_bump(values[0])] + values[1:], proof, Transcript(b"tail"))
    with pytest.raises(ProofRejected):  # a slot-layout opening where a masked batch is due
        Z.verify_batch(commitments, points, values, proof.opening, Transcript(b"tail"))


def test_a_false_value_with_consistent_rounds_is_caught_at_the_reduction_end():
    """The cheater states a wrong value and runs the masked reduction for it with every round consistent
    (tests.proofs.cheating.ConsistentCheater); the tables are opened at their true evaluations, so only the
    check of the evaluations against the reduction's last claim refuses the proof (remove it: this test fails)."""
    rng = np.random.default_rng(3)
    c, w = Z.commit(_table(rng, 17), TAIL)
    points = [rng.integers(0, F.P, (2, 17, 4), dtype=np.uint64)]
    false_values = [_bump(np.stack([B.dot_base(eq_table(z), w.table) for z in points[0]]))]
    with consistent_cheating("proofs.basefold_zk"):
        _, proof = Z.open_batch([w], points, Transcript(b"cheat"), values=false_values)
    with pytest.raises(ProofRejected, match="do not match the masked reduction"):
        Z.verify_batch([c], points, false_values, proof, Transcript(b"cheat"))


@given(st.integers(0, 2**32 - 1))
@settings(max_examples=30, deadline=None)
def test_fuzzed_bytes_give_proof_rejected_only(batch, seed):
    _, commitments, points, values, proof = batch
    rng = np.random.default_rng(seed)
    data = bytearray(proof.to_bytes())
    for _ in range(int(rng.integers(1, 4))):
        data[int(rng.integers(len(data)))] ^= 1 << int(rng.integers(8))
    with pytest.raises(ProofRejected):
        Z.verify_batch(commitments, points, values, Z.MaskedBatchProof.from_bytes(bytes(data)), Transcript(b"tail"))


def test_layouts_never_mix_and_free_must_be_unused():
    rng = np.random.default_rng(2)
    c1, w1 = Z.commit(_table(rng, 16), TAIL)
    c2, w2 = Z.commit(_table(rng, 16), Z.HidingBasefoldParams(BASE))
    points = [rng.integers(0, F.P, (1, 16, 4), dtype=np.uint64)] * 2
    with pytest.raises(ProofError, match="layouts"):
        Z.open_batch([w1, w2], points, Transcript(b"x"))
    with pytest.raises(ProofError, match="free"):
        Z.commit(_table(rng, 16), TAIL, free=5)  # its last entries are not zero
    with pytest.raises(ProofError, match="layout"):
        Z.HidingBasefoldParams(BASE, 1, "stripes")


# ------------------------------------------------------------------------------------ zero knowledge
class _FixedChallenges:
    """Transcript challenges from a fixed stream, whatever was absorbed: the proof is then linear in its inputs."""

    def __init__(self, monkeypatch):
        self.rng = None
        stream = self

        def ext(_, label):
            return stream.rng.integers(0, F.P, 4, dtype=np.uint64)

        def ext_vector(_, label, n):
            return stream.rng.integers(0, F.P, (int(n), 4), dtype=np.uint64)

        def indices(_, label, count, bound):
            return stream.rng.integers(0, bound, int(count), dtype=np.int64)

        monkeypatch.setattr(Transcript, "challenge_ext", ext)
        monkeypatch.setattr(Transcript, "challenge_ext_vector", ext_vector)
        monkeypatch.setattr(Transcript, "challenge_indices", indices)

    def reset(self, seed: int = 12345):
        self.rng = np.random.default_rng(seed)


class _Given:
    """An rng whose integers() returns a given table: a slot table's randomness (S_0's tail and S_1, (2^m, 2))
    or the mask table R of one opening."""

    def __init__(self, table):
        self.table = table

    def integers(self, low, high, size, dtype):
        return self.table.reshape(size).copy()


def _view(proof) -> np.ndarray:
    """Every field element the verifier sees (Merkle digests aside), flattened to base coordinates."""
    r = proof.reduction
    parts = [r.mask_sum, r.sumcheck.round_messages, r.mask_eval, proof.evals, proof.mask_value]
    for o in (proof.opening, proof.mask_opening):
        parts += [o.reduction, o.evals, o.rounds, o.final, *o.initial_leaves, *o.layer_leaves]
    return np.concatenate([np.asarray(p, dtype=np.uint64).reshape(-1) for p in parts]).astype(np.int64)


def _rank(matrix: np.ndarray) -> int:
    """Rank over F_p (Gaussian elimination, int64: entries < 2^31)."""
    m = np.array(matrix, dtype=np.int64) % F.P
    rank, rows, cols = 0, m.shape[0], m.shape[1]
    for c in range(cols):
        nz = np.nonzero(m[rank:, c])[0]
        if nz.size == 0:
            continue
        pivot = rank + nz[0]
        m[[rank, pivot]] = m[[pivot, rank]]
        m[rank] = m[rank] * pow(int(m[rank, c]), F.P - 2, F.P) % F.P
        others = np.nonzero(m[:, c])[0]
        others = others[others != rank]
        if others.size:
            m[others] = (m[others] - (m[others, c:c + 1] * m[rank]) % F.P) % F.P
        rank += 1
        if rank == rows:
            break
    return rank


def _kernel_vector(constraints: np.ndarray, rng) -> np.ndarray:
    """A uniform-ish solution delta of constraints @ delta = 0 mod p (constraints: (k, m) with k < m)."""
    k, m = constraints.shape
    delta = np.zeros(m, np.int64)
    delta[k:] = rng.integers(0, F.P, m - k)
    rhs = (-(constraints[:, k:] % F.P).astype(object).dot(delta[k:].astype(object))) % F.P
    aug = np.concatenate([constraints[:, :k] % F.P, np.array(rhs, dtype=np.int64)[:, None]], axis=1)
    for c in range(k):  # Gauss-Jordan on the square part
        pivot = c + np.nonzero(aug[c:, c])[0][0]
        aug[[c, pivot]] = aug[[pivot, c]]
        aug[c] = aug[c] * pow(int(aug[c, c]), F.P - 2, F.P) % F.P
        for r in range(k):
            if r != c and aug[r, c]:
                aug[r] = (aug[r] - aug[r, c] * aug[c] % F.P) % F.P
    delta[:k] = aug[:, -1]
    assert not ((constraints % F.P).astype(object).dot(delta.astype(object)) % F.P).any()
    return delta


def _invisible_change(points, used: int, rng) -> np.ndarray:
    """A change of a table's used entries that the point claims do not see (each F_p4 claim: 4 base equations)."""
    weights = np.stack([eq_table(p)[:used] for p in points])
    return _kernel_vector(weights.transpose(0, 2, 1).reshape(-1, used).astype(np.int64), rng).astype(np.uint64)


def _rank_case(monkeypatch, specs, openings: int = 1, streams=(12345,), seed: int = 5):
    """The rank test's data for a batch of tail tables ``specs`` ((variables, used entries); the claims, two
    points each, weigh the used entries only) opened len(streams) times with independent challenges and fresh
    mask tables: (M: one column per random base value (S_0's tails, the slots S_1, each opening's R) giving its
    view, kinds: 1 for the tables' randomness and 2 for R's, A delta: the view of a change no claim sees)."""
    monkeypatch.setattr(Z, "TAIL_MIN_VARS", 6)
    base = B.BasefoldParams(rate_inv=2, num_queries=2, arity=1, final_vars=2, max_log_codeword=7)
    params = Z.HidingBasefoldParams(base, openings, "tail")
    fixed = _FixedChallenges(monkeypatch)
    rng = np.random.default_rng(seed)
    shapes = [Z.shape(n, params, (1 << n) - used) for n, used in specs]
    assert all(v == 1 for v, _ in shapes)                  # every table in the tail layout
    points = []
    for n, used in specs:
        z = rng.integers(0, F.P, (2, n, 4), dtype=np.uint64)
        z[:, used.bit_length() - 1:] = 0                   # claims on the used entries
        points.append(z)
    n_mask = Z.mask_vars(max(v + m for v, m in shapes), base)

    def view(fs, slots, masks):
        inner, lifted, values = [], [], []
        for (n, used), f, slot, z in zip(specs, fs, slots, points):
            table = np.concatenate([f, np.zeros((1 << n) - used, np.uint64)])
            committed = Z.slot_table(table, n, params, rng=_Given(slot), free=(1 << n) - used)
            c, w = B.commit(committed, base)
            commitment = Z.HidingBasefoldCommitment(c, n, openings, "tail")
            inner.append(w)
            lifted.append([Z.lift(B.Functional.point(p), commitment) for p in z])
            values.append(np.stack([B.dot_base(eq_table(p), committed[::2][:1 << n]) for p in z]))
        views = []
        for stream, mask in zip(streams, masks):
            fixed.reset(stream)
            views.append(_view(Z._open_masked(inner, lifted, values, Transcript(b"zk"), rng=_Given(mask))))
        return np.concatenate(views)

    zero = ([np.zeros(used, np.uint64) for _, used in specs], [np.zeros((1 << m, 2), np.uint64) for _, m in shapes],
            [np.zeros(1 << n_mask, np.uint64) for _ in streams])
    randomness = [(1, k, (r, 0)) for k, ((n, used), (_, m)) in enumerate(zip(specs, shapes))
                  for r in range(used if m == n else 1 << n, 1 << m)]   # S_0's tail: the free end or a second half
    randomness += [(1, k, (r, 1)) for k, (_, m) in enumerate(shapes) for r in range(1 << m)]
    randomness += [(2, j, (i,)) for j in range(len(streams)) for i in range(1 << n_mask)]

    def with_unit(which, index, position):
        args = [list(part) for part in zero]
        args[which][index] = args[which][index].copy()
        args[which][index][position] = 1
        return args

    f = [rng.integers(0, F.P, used, dtype=np.uint64) for _, used in specs]
    slots = [rng.integers(0, F.P, a.shape, dtype=np.uint64) for a in zero[1]]
    masks = [rng.integers(0, F.P, a.shape, dtype=np.uint64) for a in zero[2]]
    assert np.array_equal(view(f, slots, masks) % F.P,                # linear: the challenges are fixed
                          (view(f, *zero[1:]) + view(zero[0], slots, zero[2]) + view(zero[0], zero[1], masks)) % F.P)
    columns = [view(*with_unit(which, index, position)) for which, index, position in randomness]
    deltas = [_invisible_change(z, used, rng) for (_, used), z in zip(specs, points)]
    a_delta = view(deltas, *zero[1:])
    assert a_delta.any()                                   # the change shows without randomness
    return np.stack(columns, axis=1), np.array([which for which, _, _ in randomness]), a_delta


def _absorbed(M, a_delta) -> bool:
    return _rank(np.concatenate([M, a_delta[:, None]], axis=1)) == _rank(M)


@pytest.mark.slow
def test_zero_knowledge_by_rank(monkeypatch):
    """view = A f + M rho for fixed challenges (rho: S_0's tail, the random slot S_1 and R); for a change delta
    of f that the claims do not see, A delta lies in the column space of M: a simulator holding rho - rho_delta
    shows the same view. R alone does not hide it (the test has teeth: it caught two leaks of earlier layouts).
    A table of 2^9 (its upper half unused: S_0's tail), 16 interleaved rows."""
    M, kinds, a_delta = _rank_case(monkeypatch, [(9, 1 << 8)])
    assert _absorbed(M, a_delta)
    assert not _absorbed(M[:, kinds == 2], a_delta)


@pytest.mark.slow
def test_zero_knowledge_by_rank_across_two_openings(monkeypatch):
    """Many proofs together: a commitment made for two openings (a reusable copy: its agreement proof and its
    proof) opened twice with independent challenges and fresh mask tables: the two views together still absorb
    a change of the table that no claim sees."""
    M, _, a_delta = _rank_case(monkeypatch, [(9, 1 << 7)], openings=2, streams=(12345, 777), seed=9)
    assert _absorbed(M, a_delta)


@pytest.mark.slow
def test_zero_knowledge_by_rank_two_tables(monkeypatch):
    """A batch as a training proof has them: a table whose tail is its unused half and a smaller one with a
    second half, joining the combined table a fold later; changes of both that no claim sees are absorbed."""
    M, _, a_delta = _rank_case(monkeypatch, [(9, 1 << 8), (7, 1 << 7)], seed=11)
    assert _absorbed(M, a_delta)


def test_commitment_shapes_are_checked(batch):
    _, commitments, _, _, _ = batch
    c = commitments[0]                              # 17 variables, a second half: 19 committed
    assert Z.slots_of(c) == 1 and c.inner.num_vars == 19
    for inner_vars in (17, 20, 21):
        with pytest.raises(ProofError, match="inner num_vars"):
            Z.HidingBasefoldCommitment(B.BasefoldCommitment(c.inner.root, inner_vars, BASE), 17, 1, "tail")
    data = bytearray(c.to_bytes())
    data[9] = 7                                     # an unknown layout index
    with pytest.raises(ProofRejected):
        Z.HidingBasefoldCommitment.from_bytes(bytes(data))
    assert Z.HidingBasefoldCommitment.from_bytes(c.to_bytes()).to_bytes() == c.to_bytes()


@given(st.lists(st.tuples(st.integers(6, 10), st.integers(0, 3), st.booleans()), min_size=1, max_size=3),
       st.integers(0, 2**32 - 1))
@settings(max_examples=12, deadline=None)
def test_random_batches_verify_with_recomputed_values(tables, seed):
    """Any mix of table sizes (tail or slot shapes, used halves or second halves), claim counts (points and
    block functionals) opens and verifies; the values equal the plain recomputation; a changed value is refused."""
    base = B.BasefoldParams(rate_inv=2, num_queries=8, arity=2, final_vars=3, max_log_codeword=8)
    params = Z.HidingBasefoldParams(base, 1, "tail")
    rng = np.random.default_rng(seed)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Z, "TAIL_MIN_VARS", 6)
        witnesses, commitments, claims_list = [], [], []
        for n, count, half in tables:
            used = 1 << (n - 1) if half else 1 << n
            c, w = Z.commit(_table(rng, n, used), params, free=(1 << n) - used)
            claims = []
            for j in range(count):
                z = rng.integers(0, F.P, (n, 4), dtype=np.uint64)
                if half:
                    z[-1] = 0
                if j % 2:  # a block functional: dense weights on the low 2 variables, eq on the rest
                    dense = rng.integers(0, F.P, (4, 4), dtype=np.uint64)
                    claims.append(B.Functional(n, ((F.ext_one(), F.ext_zero((0,)), dense, z[2:]),)))
                else:
                    claims.append(B.Functional.point(z))
            witnesses.append(w)
            commitments.append(c)
            claims_list.append(claims)
        values, proof = Z.open_batch(witnesses, claims_list, Transcript(b"random"))
        for w, claims, v in zip(witnesses, claims_list, values):
            for claim, y in zip(claims, v):
                assert F.ext_eq(B.dot_base(B.claim_table(claim, claim.num_vars), w.table), y)
        Z.verify_batch(commitments, claims_list, values, proof, Transcript(b"random"), min_security_bits=0)
        if any(len(v) for v in values):
            k = next(i for i, v in enumerate(values) if len(v))
            bad = list(values)
            bad[k] = _bump(values[k])
            with pytest.raises(ProofRejected):
                Z.verify_batch(commitments, claims_list, bad, proof, Transcript(b"random"), min_security_bits=0)


@given(st.integers(1, 12), st.integers(0, 2**32 - 1))
@settings(max_examples=25, deadline=None)
def test_in_place_folds_equal_fresh_folds(log_n, seed):
    """The claim reductions fold owned F_p4 tables into their own first halves: same values as fresh folds."""
    from proofs.mle import fold
    rng = np.random.default_rng(seed)
    t = rng.integers(0, F.P, (1 << log_n, 4), dtype=np.uint64)
    w = rng.integers(0, F.P, (1 << log_n, 4), dtype=np.uint64)
    r = rng.integers(0, F.P, 4, dtype=np.uint64)
    expected = fold(t.copy(), r)
    assert np.array_equal(fold(t.copy(), r, in_place=True), expected)
    f1, w1, m1 = B.fold_pair(t.copy(), w.copy(), r)
    f2, w2, m2 = B.fold_pair(t.copy(), w.copy(), r, in_place=True)
    assert np.array_equal(f1, f2) and np.array_equal(w1, w2) and np.array_equal(f1, expected)
    assert (m1 is None and m2 is None) or np.array_equal(m1, m2)
