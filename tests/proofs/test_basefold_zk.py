"""Hiding Basefold and Basefold functionals: naive twins (a functional's table and MLE against the definition),
honest batch openings of points and functionals, what masking must change (roots, openings, every shown
value of a second opening of the same table), the tail bound, tampering and fuzzed bytes (ProofRejected only)."""
import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from proofs import basefold as B
from proofs import basefold_zk as Z
from proofs import field as F
from proofs.errors import ProofError, ProofRejected
from proofs.mle import eq_eval, mle_evaluate
from proofs.transcript import Transcript
from tests.proofs.cheating import bumped
from tests.reference.mle_naive import naive_mle
from tests.proofs.byte_mutations import mutated

seeds = st.integers(0, 2 ** 32)
#: few queries keep the tables small in tests (the verifier is told to accept their low bits)
FAST = B.BasefoldParams(rate_inv=4, num_queries=12, arity=2, final_vars=2, max_log_codeword=12)
HIDE = Z.HidingBasefoldParams(FAST, openings=1)


def _functional(n, seed, boolean_hi=False):
    """A random Functional of n variables: a point term, a dense term with a point above, a dense block."""
    rng = np.random.default_rng(seed)
    terms = [(F.ext_random((), seed=seed), F.ext_random((n,), seed=seed + 1), None, F.ext_zero((0,)))]
    lo = int(rng.integers(0, n + 1))
    width = int(rng.integers(0, n - lo + 1))
    hi = F.ext_random((n - lo - width,), seed=seed + 2)
    if boolean_hi:
        hi = F.ext_from_base(rng.integers(0, 2, n - lo - width).astype(np.uint64))
    terms.append((F.ext_random((), seed=seed + 3), F.ext_random((lo,), seed=seed + 4),
                  F.ext_random((1 << width,), seed=seed + 5), hi))
    if boolean_hi:  # a point on one block (the fused build-and-add of add_table)
        block = int(rng.integers(1, n + 1))
        terms.append((F.ext_random((), seed=seed + 6), F.ext_random((block,), seed=seed + 7), None,
                      F.ext_from_base(rng.integers(0, 2, n - block).astype(np.uint64))))
    return B.Functional(n, tuple(terms))


def _naive_weights(functional):
    """W(x) = sum a eq(lo, x_lo) D(x_mid) eq(hi, x_hi), entry by entry from the definition."""
    n = functional.num_vars
    out = F.ext_zero((1 << n,))
    for x in range(1 << n):
        bits = [(x >> b) & 1 for b in range(n)]
        for a, lo, dense, hi in functional.terms:
            l, h = lo.shape[0], hi.shape[0]
            value = F.ext_mul(a, eq_eval(lo, F.ext_from_base(np.array(bits[:l], dtype=np.uint64))) if l else
                              F.ext_one())
            if dense is not None:
                mid = sum(bit << i for i, bit in enumerate(bits[l:n - h]))
                value = F.ext_mul(value, dense[mid])
            if h:
                value = F.ext_mul(value, eq_eval(hi, F.ext_from_base(np.array(bits[n - h:], dtype=np.uint64))))
            out[x] = F.ext_add(out[x], value)
    return out


@settings(max_examples=15, deadline=None)
@given(st.integers(1, 6), st.booleans(), seeds)
def test_functional_table_and_mle_match_the_definition(n, boolean_hi, seed):
    functional = _functional(n, seed, boolean_hi)
    table = F.ext_zero((1 << n,))
    functional.add_table(table, F.ext_one())
    assert np.array_equal(table, _naive_weights(functional))
    r = F.ext_random((n,), seed=seed + 9)
    assert np.array_equal(functional.at(r), mle_evaluate(table, r))
    assert B.Functional.point(r).is_point() and not functional.is_point()


def test_plain_batch_opening_of_functionals():
    tables = [F.random_elements(1 << n, seed=n) for n in (7, 5)]
    made = [B.commit(t, FAST) for t in tables]
    claims = [[_functional(7, 1), B.Functional.point(F.ext_random((7,), seed=2))], [_functional(5, 3, True)]]
    values, proof = B.open_batch([w for _, w in made], claims, Transcript("f"))
    for t, cs, vs in zip(tables, claims, values):
        for c, v in zip(cs, vs):
            assert np.array_equal(v, F.ext_sum(F.ext_mul_base(_naive_weights(c), t), axis=0))
    commitments = [c for c, _ in made]
    B.verify_batch(commitments, claims, values, proof, Transcript("f"), 0)
    bad = [values[0], F.ext_add(values[1], F.ext_one((1,)))]
    with pytest.raises(ProofRejected):
        B.verify_batch(commitments, claims, bad, proof, Transcript("f"), 0)
    other = [claims[0], [_functional(5, 4, True)]]
    with pytest.raises(ProofRejected):
        B.verify_batch(commitments, other, values, proof, Transcript("f"), 0)
    with pytest.raises(ProofRejected):  # a point set in place of the functionals: another statement
        B.verify_batch(commitments, [F.ext_random((1, 7), seed=2), claims[1]], values[:1] + values[1:], proof,
                       Transcript("f"), 0)


# --------------------------------------------------------------------------------------------- hiding
def _hidden(seed=0, openings=1, sizes=(8, 6)):
    params = Z.HidingBasefoldParams(FAST, openings)
    tables = [F.random_elements(1 << n, seed=seed + n) for n in sizes]
    made = [Z.commit(t, params, seed=seed + 100 + k) for k, t in enumerate(tables)]
    claims = [F.ext_random((2, sizes[0]), seed=7), [_functional(sizes[1], 8)]]
    return tables, made, claims


def _verify(commitments, claims, values, proof):
    Z.verify_batch(commitments, claims, values, proof, Transcript("h"), 0)


@pytest.fixture(scope="module")
def honest():
    tables, made, claims = _hidden()
    values, proof = Z.open_batch([w for _, w in made], claims, Transcript("h"))
    commitments = [c for c, _ in made]
    _verify(commitments, claims, values, proof)
    return tables, commitments, claims, values, proof


def test_hiding_opening_gives_the_values_of_the_hidden_tables(honest):
    tables, commitments, claims, values, proof = honest
    assert np.array_equal(values[0][0], naive_mle(tables[0], claims[0][0]))
    assert np.array_equal(values[0][1], mle_evaluate(F.ext_from_base(tables[0]), claims[0][1]))
    assert np.array_equal(values[1][0], F.ext_sum(F.ext_mul_base(_naive_weights(claims[1][0]), tables[1]), axis=0))
    assert proof.reduction.size and proof.layer_roots and not proof.tables  # nothing is sent whole


def test_slot_table_layout_and_tail_bound():
    table = F.random_elements(1 << 6, seed=1)
    for openings in (1, 2, 3):
        params = Z.HidingBasefoldParams(FAST, openings)
        v, m = Z.shape(6, params)
        assert (1 << v) - 1 >= 4 * openings + Z.SPARE_DIMS and m >= 6
        slots = Z.slot_table(table, 6, params, np.random.default_rng(0)).reshape(1 << m, 1 << v)
        assert np.array_equal(slots[:64, 0], table)  # S_0 = (f || T); the claims read f only
        per_row, rows, _ = Z._revealed(params, v, m)
        assert openings * FAST.num_queries * per_row <= ((1 << m) - 64) // rows  # the promised tail
        point = F.ext_random((6,), seed=2)
        commitment = Z.commit(table, params, seed=3)[0]
        lifted = Z.lift(point, commitment)
        assert np.array_equal(lifted.at(F.ext_random((v + m,), seed=4)),
                              mle_evaluate(B.claim_table(lifted, v + m), F.ext_random((v + m,), seed=4)))
        assert np.array_equal(F.ext_sum(F.ext_mul_base(B.claim_table(lifted, v + m), slots.reshape(-1)), axis=0),
                              naive_mle(table, point))


def test_masking_changes_every_shown_value():
    """The same table opened at the same claims from two commitments (fresh tails and slots): the roots, the
    opened leaves, the evaluations, every message after the slot rounds, the final table and the layers all
    differ, while the claimed values agree; an unmasked slot table would show the same final table twice."""
    shown = []
    for seed in (1, 2):
        tables, made, claims = _hidden(seed=0)
        params = made[0][0].params
        again = [Z.commit(t, params, seed=seed * 1000 + k) for k, t in enumerate(tables)]
        values, proof = Z.open_batch([w for _, w in again], claims, Transcript("h"))
        _verify([c for c, _ in again], claims, values, proof)
        shown.append((again, values, proof))
    (a, va, pa), (b, vb, pb) = shown
    assert all(np.array_equal(x, y) for x, y in zip(va, vb))
    assert a[0][0].root != b[0][0].root and a[1][0].root != b[1][0].root
    v = Z.shape(8, HIDE)[0]
    assert not np.array_equal(pa.evals, pb.evals) and not np.array_equal(pa.final, pb.final)
    assert not np.array_equal(pa.reduction[v:], pb.reduction[v:]) and not np.array_equal(pa.rounds[v:], pb.rounds[v:])
    assert all(not np.array_equal(x, y) for x, y in zip(pa.initial_leaves, pb.initial_leaves))
    assert pa.layer_roots[0] != pb.layer_roots[0]
    # without masks (every random slot and the tail zero) two commitments would be equal: the masking is the change
    plain = [B.commit(Z.slot_table(t, t.size.bit_length() - 1, made[0][0].params,
                                   np.random.default_rng(0)) * 0, FAST)[0].root for t in tables[:1]] * 2
    assert plain[0] == plain[1]


def test_openings_are_counted_and_refused_past_the_limit():
    tables, made, claims = _hidden(openings=1)
    Z.open_batch([w for _, w in made], claims, Transcript("h"))
    with pytest.raises(ProofError, match="openings=1"):
        Z.open_batch([w for _, w in made], claims, Transcript("h"))
    tables, made, claims = _hidden(openings=2)
    for _ in range(2):
        values, proof = Z.open_batch([w for _, w in made], claims, Transcript("h"))
        _verify([c for c, _ in made], claims, values, proof)
    with pytest.raises(ProofError):
        Z.open_batch([w for _, w in made], claims, Transcript("h"))


def test_parameter_errors_name_the_parameter():
    with pytest.raises(ProofError, match="openings"):
        Z.HidingBasefoldParams(FAST, 0)
    with pytest.raises(ProofError, match="base"):
        Z.HidingBasefoldParams(object(), 1)
    with pytest.raises(ProofError, match="HidingBasefoldParams"):
        Z.commit(np.arange(4), FAST)


def test_every_tampered_component_is_rejected(honest):
    _, commitments, claims, values, proof = honest
    count = 0
    for field in ("reduction", "evals", "rounds", "final"):
        for index in (0, getattr(proof, field).size - 1):
            with pytest.raises(ProofRejected):
                _verify(commitments, claims, values, dataclasses.replace(proof, **{field: bumped(getattr(proof, field),
                                                                                                  index)}))
            count += 1
    for field in ("initial_leaves", "layer_leaves"):
        for i, leaves in enumerate(getattr(proof, field)):
            changed = list(getattr(proof, field))
            changed[i] = bumped(leaves, 5)
            with pytest.raises(ProofRejected):
                _verify(commitments, claims, values, dataclasses.replace(proof, **{field: tuple(changed)}))
            count += 1
    for field in ("initial_paths", "layer_paths", "layer_roots"):
        items = list(getattr(proof, field))
        for i, item in enumerate(items):
            changed = list(items)
            changed[i] = (bytes([item[0][0] ^ 1]) + item[0][1:],) + tuple(item[1:]) if field != "layer_roots" \
                else bytes([item[0] ^ 1]) + item[1:]
            with pytest.raises(ProofRejected):
                _verify(commitments, claims, values, dataclasses.replace(proof, **{field: tuple(changed)}))
            count += 1
    for k in range(2):  # the statement: a value, a claim, a commitment's root, its openings or num_vars
        bad = list(values)
        bad[k] = bumped(values[k])
        with pytest.raises(ProofRejected):
            _verify(commitments, claims, bad, proof)
        changed = list(commitments)
        changed[k] = dataclasses.replace(commitments[k], inner=dataclasses.replace(
            commitments[k].inner, root=bytes([commitments[k].root[0] ^ 1]) + commitments[k].root[1:]))
        with pytest.raises(ProofRejected):
            _verify(changed, claims, values, proof)
    with pytest.raises(ProofRejected):
        _verify(commitments, [bumped(claims[0], 3), claims[1]], values, proof)
    with pytest.raises(ProofRejected):
        _verify([c.inner for c in commitments], claims, values, proof)
    with pytest.raises(ProofRejected):
        _verify(commitments, claims, values, "proof")
    assert count > 12


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_fuzzed_bytes_give_only_proof_rejected(honest, data):
    _, commitments, claims, values, proof = honest
    blob = proof.to_bytes()
    position = data.draw(st.integers(0, len(blob) - 1))
    with pytest.raises(ProofRejected):
        _verify(commitments, claims, values, B.BasefoldProof.from_bytes(mutated(blob, data, position)))


@settings(max_examples=30, deadline=None)
@given(st.binary(max_size=60))
def test_commitment_bytes_round_trip_and_fuzz(honest, data):
    _, commitments, *_ = honest
    good = commitments[0].to_bytes()
    assert Z.HidingBasefoldCommitment.from_bytes(good) == commitments[0]
    with pytest.raises(ProofRejected):
        Z.HidingBasefoldCommitment.from_bytes(good[:len(data) % len(good)])
    mutated = bytearray(good)
    if data:
        mutated[len(data) % len(good)] ^= data[0] | 1
        try:
            assert Z.HidingBasefoldCommitment.from_bytes(bytes(mutated)) != commitments[0]
        except ProofRejected:
            pass


@settings(max_examples=10, deadline=None)
@given(st.integers(1, 6), seeds)
def test_vectorised_functional_values_are_the_one_by_one_values(n, seed):
    functionals = [_functional(n, seed + k, k % 2 == 1) for k in range(3)] + [B.Functional.point(
        F.ext_random((n,), seed=seed))]
    r = F.ext_random((n,), seed=seed + 7)
    assert np.array_equal(B.Functional.at_many(functionals, r), np.stack([f.at(r) for f in functionals]))


@given(st.integers(1, F.P - 1), st.lists(st.integers(0, 1 << 27), min_size=0, max_size=20))
def test_vector_powers_are_python_powers(base, exponents):
    out = B._pow_vector(base, np.array(exponents, dtype=np.int64))
    assert out.tolist() == [pow(base, e, F.P) for e in exponents]


@settings(max_examples=20, deadline=None)
@given(seeds)
def test_degree_two_interpolation_is_the_lagrange_twin(seed):
    from proofs.sumcheck import lagrange_eval
    h, r = F.ext_random((3,), seed=seed), F.ext_random((), seed=seed + 1)
    assert np.array_equal(B._lagrange3(h, r), lagrange_eval(h, r))


@pytest.mark.parametrize("num_vars", [0, 1, 3])
def test_a_hidden_table_is_never_sent_whole(num_vars):
    """Tables of at most final_vars variables are sent in the clear by Basefold: a slot table never is one."""
    params = Z.HidingBasefoldParams(B.BasefoldParams(rate_inv=4, num_queries=2, arity=2, final_vars=12), 1)
    v, m = Z.shape(num_vars, params)
    assert v + m > 12
    commitment, witness = Z.commit(np.arange(1 << num_vars), params, seed=1)
    values, proof = Z.open_batch([witness], [F.ext_random((1, num_vars), seed=2)], Transcript("s"))
    assert not proof.tables and proof.final.size


@settings(max_examples=15, deadline=None)
@given(st.integers(0, 7), st.integers(1, 3), seeds)
def test_kernel_merkle_root_is_the_hashlib_twin(depth, width, seed):
    from proofs.pcs.merkle import merkle_open, merkle_root_from
    rng = np.random.default_rng(seed)
    leaves = rng.integers(0, F.P, (1 << depth, width), dtype=np.uint64)
    levels = B._merkle_tree(B._digest_array(leaves))
    index = np.unique(rng.integers(0, 1 << depth, int(rng.integers(1, 6))))
    path = merkle_open(levels, index)
    root = B._root_from(leaves[index], index, path, depth)
    assert root == B._root(levels) == merkle_root_from(B._digests(leaves[index]), index, path, depth)
    if path:
        with pytest.raises(ProofRejected):
            B._root_from(leaves[index], index, path[:-1], depth)
    with pytest.raises(ProofRejected):
        B._root_from(leaves[index], index, path + [b"\0" * 32], depth)
