"""Basefold commitment: folding against direct evaluation and naive encodings, honest batch openings of tables
of many sizes, every tampered component and fuzzed bytes rejected with ProofRejected only."""
import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from proofs import basefold as B
from proofs import field as F
from proofs.errors import ProofError, ProofRejected
from proofs.mle import eq_table, fold, mle_evaluate
from proofs.pcs.merkle import prefixed_hash
from proofs.transcript import Transcript
from tests.proofs.cheating import bumped
from tests.reference.mle_naive import naive_mle
from tests.reference.rs_naive import naive_rs_encode
from tests.proofs.byte_mutations import mutated

seeds = st.integers(0, 2 ** 32)
SMALL = B.BasefoldParams(rate_inv=4, arity=2, final_vars=2, max_log_codeword=8)  # folds, shares, interleaves


def _naive_encode_ext(table, rate_inv):
    return np.stack([naive_rs_encode(table[:, e], rate_inv) for e in range(4)], axis=1)


@settings(max_examples=15, deadline=None)
@given(st.integers(1, 4), st.sampled_from([2, 4]), seeds)
def test_codeword_fold_is_the_encoding_of_the_folded_table(n, rate_inv, seed):
    table = F.random_elements(1 << n, seed=seed)
    r = F.ext_random((), seed=seed + 1)
    codeword = naive_rs_encode(table, rate_inv)
    folded = B._fold_codeword(codeword, r)
    assert np.array_equal(folded, _naive_encode_ext(fold(table, r), rate_inv))
    again = F.ext_random((), seed=seed + 2)  # and an F_p4 codeword folds the same way
    if n > 1:
        assert np.array_equal(B._fold_codeword(folded, again), _naive_encode_ext(fold(fold(table, r), again),
                                                                                 rate_inv))


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 6), seeds)
def test_folding_every_variable_gives_the_mle_value(n, seed):
    table = F.random_elements(1 << n, seed=seed)
    point = F.ext_random((n,), seed=seed + 1)
    current = F.ext_from_base(table)
    for r in point:
        current = fold(current, r)
    assert np.array_equal(current[0], naive_mle(table, point))


@given(st.integers(1, 4), st.integers(0, 3), seeds)
def test_row_combination_is_the_row_folds(s, log_n, seed):
    codeword = F.random_elements((1 << log_n, 1 << s), seed=seed)
    challenges = F.ext_random((s,), seed=seed + 1)
    one_by_one = codeword
    for r in challenges:
        one_by_one = B._fold_rows(one_by_one, r)
    assert np.array_equal(B._combine_rows(codeword, eq_table(challenges)), one_by_one[:, 0])


@given(st.integers(3, 7), st.integers(1, 3), seeds)
def test_folding_opened_cosets_matches_the_whole_layer_fold(log_n, block, seed):
    n = 1 << log_n
    codeword = F.ext_random((n,), seed=seed)
    challenges = F.ext_random((block,), seed=seed + 1)
    whole = codeword
    for r in challenges:
        whole = B._fold_codeword(whole, r)
    leaves = B._leaves(codeword, block)  # (n / 2^block, 2^block, 4)
    positions = np.arange(n >> block)
    assert np.array_equal(B.fold_leaves(leaves, positions, n, challenges)[:, 0], whole)


def test_interleaved_encoding_layout():
    params = B.BasefoldParams(rate_inv=2, final_vars=1, max_log_codeword=4)
    table = F.random_elements(1 << 6, seed=3)
    assert params.interleave(6) == 3
    codeword = B._encode_table(table, 6, params)
    assert codeword.shape == (16, 8)
    for c in range(8):
        assert np.array_equal(codeword[:, c], naive_rs_encode(table[c::8], 2))


def _claims(sizes, counts, seed, params=SMALL):
    rng = np.random.default_rng(seed)
    witnesses, points = [], []
    for n, m in zip(sizes, counts):
        table = rng.integers(0, F.P, 1 << n, dtype=np.uint64)
        witnesses.append(B.commit(table, params)[1])
        points.append(F.ext_random((m, n), seed=int(rng.integers(2 ** 32))))
    return witnesses, points


def _opened(sizes, counts, seed=0, params=SMALL):
    witnesses, points = _claims(sizes, counts, seed, params)
    values, proof = B.open_batch(witnesses, points, Transcript("test"))
    return [w.commitment for w in witnesses], points, values, proof, witnesses


def _verify(commitments, points, values, proof, bits=0):
    B.verify_batch(commitments, points, values, proof, Transcript("test"), min_security_bits=bits)


@settings(max_examples=15, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 8), st.integers(0, 3)), min_size=1, max_size=3), seeds,
       st.sampled_from([SMALL, B.BasefoldParams(rate_inv=2, arity=3, final_vars=0, max_log_codeword=9),
                        B.BasefoldParams()]))
def test_honest_batch_openings_verify_with_the_mle_values(claims, seed, params):
    sizes, counts = [n for n, _ in claims], [m for _, m in claims]
    commitments, points, values, proof, witnesses = _opened(sizes, counts, seed, params)
    for witness, zs, vs in zip(witnesses, points, values):
        for z, v in zip(zs, vs):
            assert np.array_equal(v, mle_evaluate(witness.table, z))
    _verify(commitments, points, values, B.BasefoldProof.from_bytes(proof.to_bytes()))


def test_single_opening_and_default_security():
    table = np.arange(1 << 12) % 300
    commitment, witness = B.commit(table)
    point = F.ext_random((12,), seed=5)
    value, proof = B.open_commitment(witness, point, Transcript("t"))
    assert np.array_equal(value, mle_evaluate(F.to_field(table), point))  # (mle_evaluate: naive twin in test_mle)
    B.verify_opening(commitment, point, value, proof, Transcript("t"))
    assert commitment.security_bits >= B.MIN_VERIFY_BITS
    assert B.BasefoldCommitment.from_bytes(commitment.to_bytes()) == commitment
    with pytest.raises(ProofRejected):
        B.verify_opening(commitment, point, F.ext_add(value, F.ext_one()), proof, Transcript("t"))
    with pytest.raises(ProofRejected):
        B.verify_opening(commitment, point, value, proof, Transcript("other label"))


def test_security_bits_proven_and_conjectured():
    proven = B.BasefoldParams(rate_inv=4)
    assert proven.num_queries == 154  # ceil(104 / -log2(5/8))
    assert 104 <= proven.query_bits < 105
    conjectured = B.BasefoldParams(rate_inv=4, conjectured=True)
    assert conjectured.num_queries == 52 and "conjectured" in conjectured.describe()
    assert "proven" in proven.describe()
    # 20 variables at rate 1/4 interleave 2^3 codewords of 2^19: (3 + 1 + 2) 2^19 / p^4 caps the bits near 102
    big = B.BasefoldCommitment(b"\0" * 32, 20, B.BasefoldParams())
    assert 101 < big.security_bits < 103
    weak = B.BasefoldCommitment(b"\0" * 32, 8, B.BasefoldParams(num_queries=20))
    assert weak.security_bits < 20
    commitments, points, values, proof, _ = _opened([6], [1], params=B.BasefoldParams(num_queries=20))
    with pytest.raises(ProofRejected, match="bits"):
        _verify(commitments, points, values, proof, bits=B.MIN_VERIFY_BITS)


def test_conjectured_parameters_are_refused_unless_the_verifier_allows_them():
    """The prover picks the parameters (they travel in the commitment's bytes): the verifier decides."""
    params = B.BasefoldParams(conjectured=True)  # 52 queries at rate 1/4: 104 conjectured bits, ~35 proven
    commitments, points, values, proof, _ = _opened([6], [2], params=params)
    parsed = [B.BasefoldCommitment.from_bytes(c.to_bytes()) for c in commitments]
    assert parsed[0].conjectured and parsed[0].soundness_label == "conjectured"
    assert not B.BasefoldCommitment(b"\0" * 32, 6).conjectured
    assert B.BasefoldCommitment(b"\0" * 32, 6).soundness_label == "proven"
    for bits in (0, B.MIN_VERIFY_BITS):
        with pytest.raises(ProofRejected, match=r"conjectured=True.*did not allow conjectured soundness"):
            B.verify_batch(parsed, points, values, proof, Transcript("test"), min_security_bits=bits)
    B.verify_batch(parsed, points, values, proof, Transcript("test"), allow_conjectured=True)  # opted in
    with pytest.raises(ProofRejected):  # opting in does not switch the checks off
        B.verify_batch(parsed, points, [F.ext_add(values[0], F.ext_one())], proof, Transcript("test"),
                       allow_conjectured=True)
    assert 34 < B.batch_security_bits(parsed, proven=True) < 36 < 100 < B.batch_security_bits(parsed)
    weak = B.BasefoldParams(conjectured=True, num_queries=40)  # 80 conjectured bits: refused even when allowed
    commitments, points, values, proof, _ = _opened([6], [1], params=weak)
    with pytest.raises(ProofRejected, match="bits"):
        B.verify_batch(commitments, points, values, proof, Transcript("test"), allow_conjectured=True)


@pytest.mark.parametrize("kwargs, name", [({"rate_inv": 3}, "rate_inv"), ({"rate_inv": 128}, "rate_inv"),
                                          ({"arity": 0}, "arity"), ({"final_vars": 13}, "final_vars"),
                                          ({"num_queries": 0}, "num_queries"),
                                          ({"max_log_codeword": 1}, "max_log_codeword"),
                                          ({"grinding_bits": 31}, "grinding_bits"),
                                          ({"grinding_bits": -1}, "grinding_bits")])
def test_parameter_errors_name_the_parameter(kwargs, name):
    with pytest.raises(ProofError, match=name):
        B.BasefoldParams(**kwargs)


def test_commit_refuses_floats_and_mixed_parameters():
    with pytest.raises(ProofError):
        B.commit(np.ones(4) * 0.5)
    a = B.commit(np.arange(8), SMALL)[1]
    b = B.commit(np.arange(8), B.BasefoldParams())[1]
    with pytest.raises(ProofError, match="parameters"):
        B.open_batch([a, b], [F.ext_random((1, 3), seed=1)] * 2, Transcript("t"))
    commitments = [a.commitment, b.commitment]
    with pytest.raises(ProofRejected, match="parameters"):
        _verify(commitments, [F.ext_random((1, 3), seed=1)] * 2, [F.ext_zero((1,))] * 2,
                B.open_batch([a], [F.ext_random((1, 3), seed=1)], Transcript("t"))[1])


# ------------------------------------------------------------------------------------------- tampering
SIZES, COUNTS = [9, 7, 2, 5], [2, 1, 1, 3]  # interleaved tables, a small one, a join inside a fold block


@pytest.fixture(scope="module")
def honest():
    commitments, points, values, proof, _ = _opened(SIZES, COUNTS, seed=11)
    _verify(commitments, points, values, proof)
    assert proof.layer_roots and proof.tables and proof.reduction.size and proof.initial_leaves
    assert any(leaves.shape[2] > 1 for leaves in proof.initial_leaves)  # interleaved rows
    return commitments, points, values, proof


def _tampered_proofs(proof):
    """(name, proof) for a change to every component of the proof."""
    for field in ("reduction", "evals", "rounds", "final"):
        array = getattr(proof, field)
        for index in (0, 5, array.size - 1):
            yield f"{field}@{index}", dataclasses.replace(proof, **{field: bumped(array, index)})
        yield f"{field} shape", dataclasses.replace(proof, **{field: array[:-1]})
    for field in ("tables", "initial_leaves", "layer_leaves"):
        items = getattr(proof, field)
        for i in range(len(items)):
            for index in (0, items[i].size - 1):
                changed = list(items)
                changed[i] = bumped(items[i], index)
                yield f"{field}[{i}]@{index}", dataclasses.replace(proof, **{field: tuple(changed)})
        yield f"{field} dropped", dataclasses.replace(proof, **{field: tuple(items[:-1])})
    for field in ("layer_roots",):
        items = list(getattr(proof, field))
        for i in range(len(items)):
            changed = list(items)
            changed[i] = bytes([items[i][0] ^ 1]) + items[i][1:]
            yield f"{field}[{i}]", dataclasses.replace(proof, **{field: tuple(changed)})
    for field in ("initial_paths", "layer_paths"):
        paths = getattr(proof, field)
        for i, path in enumerate(paths):
            if path:
                changed = list(paths)
                changed[i] = (bytes([path[0][0] ^ 1]) + path[0][1:],) + tuple(path[1:])
                yield f"{field}[{i}] digest", dataclasses.replace(proof, **{field: tuple(changed)})
                changed[i] = tuple(path[:-1])
                yield f"{field}[{i}] short", dataclasses.replace(proof, **{field: tuple(changed)})
            changed = list(paths)
            changed[i] = tuple(path) + (b"\0" * 32,)
            yield f"{field}[{i}] long", dataclasses.replace(proof, **{field: tuple(changed)})
    yield "nonce without grinding", dataclasses.replace(proof, nonce=1)
    yield "nonce not an int", dataclasses.replace(proof, nonce="0")
    yield "not a proof", "proof"


def test_every_tampered_component_is_rejected(honest):
    commitments, points, values, proof = honest
    names = []
    for name, bad in _tampered_proofs(proof):
        with pytest.raises(ProofRejected):
            _verify(commitments, points, values, bad)
        names.append(name)
    assert len(names) > 30


def test_tampered_statement_is_rejected(honest):
    commitments, points, values, proof = honest
    for k in range(len(commitments)):
        root = commitments[k].root
        changed = list(commitments)
        changed[k] = dataclasses.replace(commitments[k], root=bytes([root[0] ^ 1]) + root[1:])
        with pytest.raises(ProofRejected):
            _verify(changed, points, values, proof)
        bad_values = list(values)
        bad_values[k] = bumped(values[k], 3)
        with pytest.raises(ProofRejected):
            _verify(commitments, points, bad_values, proof)
        bad_points = list(points)
        bad_points[k] = bumped(points[k], 1) if points[k].size else points[k]
        if points[k].size:
            with pytest.raises(ProofRejected):
                _verify(commitments, bad_points, values, proof)
    with pytest.raises(ProofRejected):  # claims swapped between two commitments of one size: other tables
        _verify(commitments[::-1], points[::-1], values[::-1], proof)
    with pytest.raises(ProofRejected):
        _verify(commitments[:-1], points[:-1], values[:-1], proof)
    with pytest.raises(ProofRejected):
        _verify(commitments, [p.astype(np.int64) for p in points], values, proof)


def test_a_prover_opening_another_table_is_rejected():
    """The sumcheck and folds run on a table t' while the Merkle root commits to t: caught by the queries."""
    table = F.random_elements(1 << 9, seed=1)
    other = table.copy()
    other[7] = (other[7] + 1) % F.P
    commitment, witness = B.commit(table, SMALL)
    _, fake = B.commit(other, SMALL)
    cheat = B.BasefoldWitness(commitment, fake.table, fake.codeword, witness.levels)  # true Merkle tree, t' data
    point = F.ext_random((1, 9), seed=2)
    values, proof = B.open_batch([cheat], [point], Transcript("test"))
    assert np.array_equal(values[0][0], naive_mle(other, point[0]))
    with pytest.raises(ProofRejected):
        _verify([commitment], [point], values, proof)
    lying = B.BasefoldWitness(commitment, fake.table, witness.codeword, witness.levels)  # t' only in the sumcheck
    values, proof = B.open_batch([lying], [point], Transcript("test"))
    with pytest.raises(ProofRejected):
        _verify([commitment], [point], values, proof)


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_fuzzed_bytes_give_only_proof_rejected(honest, data):
    commitments, points, values, proof = honest
    blob = proof.to_bytes()
    position = data.draw(st.integers(0, len(blob) - 1))
    with pytest.raises(ProofRejected):
        _verify(commitments, points, values, B.BasefoldProof.from_bytes(mutated(blob, data, position)))


@settings(max_examples=40, deadline=None)
@given(st.binary(max_size=38))          # a well-formed commitment needs 40 bytes after the prefix
def test_fuzzed_commitment_bytes_give_only_proof_rejected(data):
    with pytest.raises(ProofRejected):
        B.BasefoldCommitment.from_bytes(b"HZKBFC01\x02" + data[:1] + data)
    good = B.commit(np.arange(16), SMALL)[0].to_bytes()
    mutated = bytearray(good)
    if data:
        mutated[len(data) % len(good)] ^= data[0] | 1
        try:
            assert B.BasefoldCommitment.from_bytes(bytes(mutated)) != B.BasefoldCommitment.from_bytes(good)
        except ProofRejected:
            pass


def test_proof_is_polylogarithmic():
    """Opening bytes grow like log^2 n: 2^12 -> 2^18 entries (x64) gives at most (18/12)^2 + 10% = 2.5x the bytes
    (a sqrt(n) opening like Ligero's grows 8x)."""
    params = B.BasefoldParams(rate_inv=8, arity=3)
    medium = _opened([12], [1], params=params)[3].num_bytes
    large = _opened([18], [1], params=params)[3].num_bytes
    assert large < 2.5 * medium


@pytest.mark.skipif(B.compiled_kernels() is None, reason="numba not installed")
@settings(max_examples=4, deadline=None)
@given(seeds)
def test_numba_kernels_match_their_numpy_twins(seed):
    n = F.NUMBA_MIN_SIZE
    kernels = B.compiled_kernels()
    base, ext = F.random_elements(n, seed=seed), F.ext_random((n,), seed=seed + 1)
    weights, r = F.ext_random((n,), seed=seed + 2), F.ext_random((), seed=seed + 3)
    for table in (base, ext):
        out = np.empty((3, 4), dtype=np.uint64)
        kernels.round_sums(table, weights, out)
        assert np.array_equal(out, B._round_message_numpy(table, weights))
        scale = F.mul(B.powers(pow(B._omega(n), F.P - 2, F.P), n // 2), np.uint64(B._INV2))
        assert np.array_equal(B._fold_codeword(table, r), B._fold_codeword_numpy(table, r, scale))
    point, factor = F.ext_random((15,), seed=seed + 4), F.ext_random((), seed=seed + 5)
    assert np.array_equal(B._eq_scaled(point, factor), F.ext_mul(eq_table(point), factor))
    rows, row_weights = F.random_elements((n // 4, 8), seed=seed + 6), F.ext_random((8,), seed=seed + 7)
    assert np.array_equal(B._combine_rows(rows, row_weights), B._combine_rows_numpy(rows, row_weights))
    assert np.array_equal(B.dot_base(ext, base), F.ext_sum(F.ext_mul_base(ext, base), axis=0))
    half = F.ext_random((n // 2,), seed=seed + 8)
    for table in (base, ext):
        out = np.empty((2, 4), dtype=np.uint64)
        kernels.dot_pairs(table, half, out)
        assert np.array_equal(out, B._dot_pairs_numpy(table, half))
        folded, folded_weights, message = B.fold_pair(table, weights, r)  # the fused kernel fold_sums
        assert np.array_equal(folded, fold(table, r)) and np.array_equal(folded_weights, fold(weights, r))
        assert np.array_equal(message, B._round_message_numpy(folded, folded_weights))
    s = F.ext_random((), seed=seed + 10)  # a base table's fold by the last challenge, taken on the fly
    folded, half_weights = fold(base, s), weights[: n // 2]
    out, expected = np.empty((3, 4), dtype=np.uint64), np.empty((3, 4), dtype=np.uint64)
    kernels.round_sums_prefolded(base, s, half_weights, out)
    kernels.round_sums(folded, half_weights, expected)
    assert np.array_equal(out, expected)
    f_out, w_out = np.empty((n // 4, 4), dtype=np.uint64), np.empty((n // 4, 4), dtype=np.uint64)
    kernels.fold_sums_prefolded(base, s, half_weights, r, f_out, w_out, out)
    assert np.array_equal(f_out, fold(folded, r)) and np.array_equal(w_out, fold(half_weights, r))
    assert np.array_equal(out, B._round_message_numpy(f_out, w_out))
    into = F.ext_random((n // 2,), seed=seed + 9)
    expected = F.ext_add(into, F.ext_mul(fold(base, r), weights[0]))
    kernels.fold_scaled_into(base, r, weights[0], into, True)
    assert np.array_equal(into, expected)
    kernels.fold_scaled_into(base, r, weights[0], into, False)  # written without reading: a fresh array
    assert np.array_equal(into, F.ext_mul(fold(base, r), weights[0]))


@pytest.mark.parametrize("num_vars, params", [(15, B.BasefoldParams()),
                                              (13, B.BasefoldParams(rate_inv=8, final_vars=0)),
                                              (16, B.BasefoldParams(rate_inv=2, max_log_codeword=12)),
                                              (17, B.BasefoldParams(rate_inv=2, max_log_codeword=18))])  # rows of 2^18
def test_interleaved_encoding_kernel_matches_rs_encode(num_vars, params):
    """The Montgomery-twiddle NTT that skips the zero padding's copy stages against commit.rs_encode."""
    table = F.random_elements(1 << num_vars, seed=num_vars)
    assert np.array_equal(B._encode_table(table, num_vars, params), B._encode_table_numpy(table, num_vars, params))


@settings(max_examples=15, deadline=None)
@given(st.integers(1, 16), st.booleans(), seeds)
def test_eq_factored_round_message_is_the_plain_one(n, base, seed):
    """Gruen's factoring (scale eq(z_0, X) times a linear g) against the message over the whole weight table."""
    table = F.random_elements(1 << n, seed=seed) if base else F.ext_random((1 << n,), seed=seed)
    point, scale = F.ext_random((n,), seed=seed + 1), F.ext_random((), seed=seed + 2)
    weight = F.ext_mul(eq_table(point), scale)
    suffix = eq_table(point[1:])
    assert np.array_equal(B._eq_round_message(table, [], suffix, point[0], scale), B.fold_round_message(table, weight))
    if base:  # joining base tables, kept base: beta t + beta' t'
        other, beta, beta2 = F.random_elements(1 << n, seed=seed + 3), F.ext_random((), seed=seed + 4), \
            F.ext_random((), seed=seed + 5)
        joined = F.ext_add(F.ext_mul_base(beta, table), F.ext_mul_base(beta2, other))
        message = B._eq_round_message(None, [(table, beta), (other, beta2)], suffix, point[0], scale)
        assert np.array_equal(message, B.fold_round_message(joined, weight))
        r = F.ext_random((), seed=seed + 6)
        assert np.array_equal(B._fold_joined(None, [(table, beta), (other, beta2)], r), fold(joined, r))
        assert np.array_equal(B._fold_joined(joined, [(table, beta)], r),
                              fold(F.ext_add(joined, F.ext_mul_base(beta, table)), r))
    if n > 1:  # the next suffix is the pair sums of this one
        assert np.array_equal(F.add(suffix[0::2], suffix[1::2]), eq_table(point[2:]))


def test_commit_owned_is_commit_without_the_copy_and_refuses_bad_tables():
    table = F.random_elements(1 << 9, seed=3)
    owned, witness = B.commit_owned(table, SMALL)
    assert owned.root == B.commit(table, SMALL)[0].root and witness.table is table
    for bad in (table[:100], table.astype(np.int64), np.full(8, F.P, dtype=np.uint64), table.reshape(2, -1),
                np.zeros(0, dtype=np.uint64), list(range(8))):
        with pytest.raises(ProofError, match="commit_owned: table"):
            B.commit_owned(bad, SMALL)
    with pytest.raises(ProofError, match="params"):
        B.commit_owned(table, "rate 1/4")


@settings(max_examples=15, deadline=None)
@given(st.integers(0, 12), st.booleans(), seeds)
def test_split_eq_weight_is_the_whole_table(k, base, seed):
    """The opening's suffix weight kept as two half tables: its pair dot products equal those with the whole
    eq table (base and F_p4 tables), and halving drops the lowest coordinate as the pair sums do."""
    point = F.ext_random((k,), seed=seed)
    table = F.random_elements(2 << k, seed=seed + 1) if base else F.ext_random((2 << k,), seed=seed + 1)
    split = B._SplitEq(point)
    assert split.size == 1 << k
    assert np.array_equal(split.dot_pairs(table), B._dot_pairs_numpy(table, eq_table(point)))
    if k:
        half = table[: 1 << k]
        whole = eq_table(point)
        assert np.array_equal(split.halved().dot_pairs(half), B._dot_pairs_numpy(half, F.add(whole[0::2], whole[1::2])))


@pytest.mark.skipif(B.compiled_kernels() is None, reason="numba not installed")
@settings(max_examples=6, deadline=None)
@given(st.integers(0, 300), st.integers(0, 255), seeds)
def test_numba_blake2b_matches_hashlib(length, prefix, seed):
    import hashlib
    data = np.random.default_rng(seed).integers(0, 256, (3, length), dtype=np.uint8)
    out = np.empty((3, 32), dtype=np.uint8)
    kernels = B.compiled_kernels()
    kernels.blake2b_rows(np.uint8(prefix), data, kernels._IV, out)
    for row, digest in zip(data, out):
        assert digest.tobytes() == hashlib.blake2b(bytes([prefix]) + row.tobytes(), digest_size=32).digest()


@pytest.mark.parametrize("block, width", [(0, 1), (1, 16), (3, 4)])  # 5, 129 and 129 bytes a leaf
def test_merkle_tree_and_paths_match_the_hashlib_twins(block, width):
    from proofs.pcs.merkle import merkle_open
    codeword = F.random_elements((F.NUMBA_MIN_SIZE << block, width), seed=block).reshape(-1, width).squeeze()
    leaves = B._leaves(codeword, block)
    naive = B.merkle_levels(B._digests(leaves))
    levels = B._merkle_tree(B._digest_array(leaves))
    assert [[d.tobytes() for d in level] for level in levels] == naive
    index = np.array([0, 3, 4, leaves.shape[0] - 1])
    assert merkle_open(levels, index) == merkle_open(naive, index)


@pytest.mark.parametrize("block, width, group", [(0, 1, 1), (0, 1, 16), (1, 16, 1), (3, 4, 1), (2, 2, 4)])
def test_leaf_hashing_from_the_codeword_matches_the_built_leaves(block, width, group):
    """blake2b_leaves (no transposed copy) against the digests of _table_leaves, and _leaves_at against its rows."""
    codeword = F.random_elements((max(F.NUMBA_MIN_SIZE, 1024) << block, width), seed=block + width)
    leaves = B._leaves(codeword, block)
    leaves = leaves.reshape((leaves.shape[0] // group, group * leaves.shape[1]) + leaves.shape[2:])
    assert np.array_equal(B._leaf_digests(codeword, block, group), B._digest_array(leaves))
    assert np.array_equal(B._leaf_digests(codeword, block, group)[:3],
                          np.frombuffer(b"".join(B._digests(leaves[:3])), dtype=np.uint8).reshape(3, 32))
    index = np.array([0, 3, 4, leaves.shape[0] - 1])
    assert np.array_equal(B._leaves_at(codeword, block, group, index), leaves[index])
    pair = B._leaf_digests(codeword, block, group)[:2].tobytes()  # 64 bytes: a leaf's and a node's message alike
    assert B._leaf_hash(pair) != prefixed_hash(b"\x01", pair)  # leaves and inner nodes are hashed apart


# ------------------------------------------------------------------------------- consistent cheaters
# Each proves a false statement with every later message computed consistently (the transcript absorbs the
# lie), so exactly one verifier check stands between it and acceptance (killing the mutant without that check).

def _lie(values, k, j=0):
    out = [np.array(v, copy=True) for v in values]
    out[k][j] = F.ext_add(out[k][j], F.ext_one())
    return out


def _honest_values(witnesses, points):
    return [np.stack([mle_evaluate(w.table, z) for z in p]) if len(p) else F.ext_zero((0,))
            for w, p in zip(witnesses, points)]


@settings(max_examples=8, deadline=None)
@given(st.lists(st.integers(SMALL.final_vars + 1, 11), min_size=1, max_size=4), seeds)
def test_aligned_claims_open_without_a_claim_reduction(sizes, seed):
    """One point per table, each a suffix of the largest table's point: the opening sumcheck takes them as they
    are (no reduction rounds), the values are the MLEs', a false value of any table is rejected, and a point
    off the suffix falls back to the reduction."""
    rng = np.random.default_rng(seed)
    witnesses = [B.commit(rng.integers(0, F.P, 1 << n, dtype=np.uint64), SMALL)[1] for n in sizes]
    top = F.ext_random((max(sizes),), seed=seed)
    points = [top[max(sizes) - n:][None] for n in sizes]
    values, proof = B.open_batch(witnesses, points, Transcript("test"))
    assert proof.reduction.shape[0] == 0
    assert all(np.array_equal(v, h) for v, h in zip(values, _honest_values(witnesses, points)))
    commitments = [w.commitment for w in witnesses]
    _verify(commitments, points, values, proof)
    for k in range(len(sizes)):
        with pytest.raises(ProofRejected, match="evaluation differs from the claimed value"):
            _verify(commitments, points, _lie(values, k), proof)
    if len(sizes) > 1:
        moved = [np.array(p, copy=True) for p in points]
        k = len(sizes) - 1 if sizes.index(max(sizes)) != len(sizes) - 1 else 0  # not the largest's point
        moved[k][0, -1] = F.ext_add(moved[k][0, -1], F.ext_one())
        values, proof = B.open_batch(witnesses, moved, Transcript("test"))
        assert proof.reduction.shape[0] == max(sizes)
        _verify(commitments, moved, values, proof)


@pytest.mark.parametrize("k, expected", [(2, "differs from its table"),  # a small table, sent whole
                                         (0, "reduction round 0"),  # a folded table: the reduction's first round
                                         ])
def test_a_consistent_false_claim_is_caught_by_its_check(k, expected):
    witnesses, points = _claims(SIZES, COUNTS, seed=11)
    values = _lie(_honest_values(witnesses, points), k)
    _, proof = B.open_batch(witnesses, points, Transcript("test"), values)
    with pytest.raises(ProofRejected, match=expected):
        _verify([w.commitment for w in witnesses], points, values, proof)


def test_a_false_single_claim_is_caught_by_the_opening_sumcheck():
    """One table, one claim (no reduction): the lie enters the opening sumcheck's first round."""
    witnesses, points = _claims([7], [1], seed=4)
    values = _lie(_honest_values(witnesses, points), 0)
    _, proof = B.open_batch(witnesses, points, Transcript("test"), values)
    with pytest.raises(ProofRejected, match="sumcheck round 0"):
        _verify([witnesses[0].commitment], points, values, proof)


class _ShiftingTranscript(Transcript):
    """A cheating prover's transcript: before each absorbed round message of ``label`` it adds delta/2 to the
    three values (a constant), delta the running lie, so every round sum check holds and the lie halves."""

    def __init__(self, label, message_label, delta):
        super().__init__(label)
        self.message_label, self.delta = message_label, delta

    def absorb(self, label, value):
        if label == self.message_label and self.delta is not None:
            self.delta = F.ext_mul(self.delta, F.ext_from_base(B._INV2))
            value[...] = F.ext_add(value, self.delta[None])  # in place: the prover keeps this array as its message
        super().absorb(label, value)


def test_a_reduction_that_hides_a_lie_is_caught_at_its_end():
    witnesses, points = _claims(SIZES, COUNTS, seed=11)
    values = _lie(_honest_values(witnesses, points), 0)
    transcript = _ShiftingTranscript("test", "basefold.reduction", F.ext_mul_base(
        B.begin(Transcript("test"), [w.commitment for w in witnesses], points, values)[0][0],
        np.uint64(pow(2, max(SIZES) - SIZES[0], F.P))))  # the lie in the first claim: c_00 2^(n_max - n_0)
    _, proof = B.open_batch(witnesses, points, transcript, values)
    with pytest.raises(ProofRejected, match="evaluations do not match"):
        _verify([w.commitment for w in witnesses], points, values, proof)


def test_a_small_table_other_than_the_committed_one_is_caught_by_its_root():
    witnesses, points = _claims(SIZES, COUNTS, seed=11)
    small = witnesses[2]
    other = small.table.copy()
    other[0] = (other[0] + 1) % F.P
    witnesses[2] = B.BasefoldWitness(small.commitment, other, small.codeword, small.levels)
    values, proof = B.open_batch(witnesses, points, Transcript("test"))
    with pytest.raises(ProofRejected, match="does not hash to its root"):
        _verify([w.commitment for w in witnesses], points, values, proof)


class _ShiftingOpening(_ShiftingTranscript):
    """The same cheat on the opening sumcheck: the lie (1 in the table's value) enters as beta * 1 at the join."""

    def challenge_ext(self, label):
        beta = super().challenge_ext(label)
        if label == "basefold.beta":
            self.delta = beta
        return beta


def test_an_opening_sumcheck_that_hides_a_lie_is_caught_by_the_final_table():
    witnesses, points = _claims([7], [1], seed=4)
    values = _lie(_honest_values(witnesses, points), 0)
    _, proof = B.open_batch(witnesses, points, _ShiftingOpening("test", "basefold.round", None), values)
    with pytest.raises(ProofRejected, match="final table does not match"):
        _verify([witnesses[0].commitment], points, values, proof)


@given(st.integers(0, 6), st.integers(0, 3), seeds)
def test_eq_accumulation_with_a_boolean_block_selector(k, selector_bits, seed):
    rng = np.random.default_rng(seed)
    free = F.ext_random((k,), seed=seed)
    selector = F.ext_from_base(rng.integers(0, 2, selector_bits).astype(np.uint64))
    point = np.concatenate([free, selector])
    out = F.ext_random((1 << (k + selector_bits),), seed=seed + 1)
    expected = F.ext_add(out, F.ext_mul(eq_table(point), F.ext_one()))
    B._add_eq_scaled(out, point, F.ext_one())
    assert np.array_equal(out, expected)


class _SwitchingWitness:
    """A cheating prover's witness: the opening runs on table t' (sumcheck, joins, every folded layer), while
    the opened initial cosets come from the committed table t (their Merkle paths verify)."""

    def __init__(self, committed, fake):
        self.commitment, self.table, self.levels = committed.commitment, fake.table, committed.levels
        self._codewords = [fake.codeword, committed.codeword]  # first read: the join; second: the opening

    @property
    def codeword(self):
        return self._codewords.pop(0) if len(self._codewords) > 1 else self._codewords[0]


def test_a_chain_folded_from_another_table_is_caught_at_the_first_layer():
    table = F.random_elements(1 << 9, seed=8)
    other = table.copy()
    other[3] = (other[3] + 5) % F.P
    committed, fake = B.commit(table, SMALL)[1], B.commit(other, SMALL)[1]
    point = F.ext_random((1, 9), seed=9)
    values, proof = B.open_batch([_SwitchingWitness(committed, fake)], [point], Transcript("test"))
    assert proof.layer_roots  # a committed layer between the join and the final table
    with pytest.raises(ProofRejected, match="fold into layer"):
        _verify([committed.commitment], [point], values, proof)


class _EvalSwappingTranscript(Transcript):
    """A cheating prover states a false value but puts the true evaluation in the proof (and the transcript)."""

    def __init__(self, label, true_evals):
        super().__init__(label)
        self.true_evals = true_evals

    def absorb(self, label, value):
        if label == "basefold.evals":
            value[...] = self.true_evals  # in place: the proof carries this very array
        super().absorb(label, value)


def test_a_single_claim_whose_evaluation_is_not_the_claimed_value_is_caught():
    witnesses, points = _claims([7], [1], seed=4)
    honest = _honest_values(witnesses, points)
    values = _lie(honest, 0)
    _, proof = B.open_batch(witnesses, points, _EvalSwappingTranscript("test", honest[0]), values)
    assert np.array_equal(proof.evals, honest[0])
    with pytest.raises(ProofRejected, match="evaluation differs from the claimed value"):
        _verify([witnesses[0].commitment], points, values, proof)


def test_small_cosets_share_a_leaf_of_one_hash_block():
    """A table's tree puts the most cosets in a leaf whose bytes (and prefix) fit one BLAKE2b block."""
    assert [B.leaf_group(values, 1 << 10) for values in (1, 4, 8, 32, 64)] == [16, 4, 2, 1, 1]
    assert B.leaf_group(1, 2) == 2  # never more cosets than the codeword has
    codeword = F.random_elements((64, 2), seed=1)
    leaves = B._table_leaves(codeword, 1)  # cosets of 2 positions x 2 rows: 4 to a leaf
    assert leaves.shape == (8, 8, 2)
    assert np.array_equal(leaves[1, 2:4], B._leaves(codeword, 1)[5])


# ------------------------------------------------------------------------------------------- grinding
GRINDING = dataclasses.replace(SMALL, num_queries=None, grinding_bits=10)


def test_grinding_bits_replace_queries_and_count_per_hash():
    """g grinding bits buy g query bits per hash: fewer queries for the same 104 bits, stated apart."""
    plain, ground = B.BasefoldParams(rate_inv=8), B.BasefoldParams(rate_inv=8, grinding_bits=16)
    assert (plain.num_queries, ground.num_queries) == (126, 107)  # ceil(104 / 0.830), ceil(88 / 0.830)
    assert ground.query_bits == ground.statistical_query_bits + 16 >= 104 > ground.statistical_query_bits
    assert "+ 16 grinding" in ground.describe() and "grinding" not in plain.describe()
    commitment = B.BasefoldCommitment(b"\0" * 32, 12, ground)
    assert B.BasefoldCommitment.from_bytes(commitment.to_bytes()) == commitment
    assert B.BasefoldCommitment.from_bytes(commitment.to_bytes()).params.grinding_bits == 16
    # proven bits of conjectured parameters keep the grinding too
    conjectured = B.BasefoldParams(rate_inv=8, conjectured=True, grinding_bits=16)
    assert conjectured.num_queries == 30
    proven = B.batch_security_bits([B.BasefoldCommitment(b"\0" * 32, 12, conjectured)], proven=True)
    assert abs(proven - (30 * -np.log2(9 / 16) + 16)) < 0.1


def test_a_ground_opening_verifies_and_a_wrong_nonce_is_rejected():
    commitments, points, values, proof, _ = _opened(SIZES, COUNTS, seed=3, params=GRINDING)
    _verify(commitments, points, values, proof)
    assert GRINDING.num_queries < SMALL.num_queries
    assert B.BasefoldProof.from_bytes(proof.to_bytes()).nonce == proof.nonce
    for nonce in (proof.nonce + 1, proof.nonce + 2, (1 << 64) - 1, -1, 1 << 64):
        with pytest.raises(ProofRejected):
            _verify(commitments, points, values, dataclasses.replace(proof, nonce=nonce))
    stripped = dataclasses.replace(GRINDING, grinding_bits=0, num_queries=GRINDING.num_queries)
    with pytest.raises(ProofRejected):  # the same roots claimed without grinding
        _verify([dataclasses.replace(c, params=stripped) for c in commitments], points, values, proof)


def test_a_prover_skipping_the_proof_of_work_is_rejected(monkeypatch):
    """A cheating prover that does not grind (its own nonce, the queries drawn after it, every opening
    consistent with them) is caught by the proof-of-work check alone."""
    real_check = B.grinding.check
    monkeypatch.setattr(B.grinding, "grind", lambda state, bits: next(
        w for w in range(1 << 20) if not real_check(state, bits, w)))
    monkeypatch.setattr(B.grinding, "check", lambda state, bits, nonce: True)
    commitments, points, values, proof, _ = _opened(SIZES, COUNTS, seed=5, params=GRINDING)
    _verify(commitments, points, values, proof)  # the check switched off: the proof is consistent
    monkeypatch.setattr(B.grinding, "check", real_check)
    with pytest.raises(ProofRejected, match="proof of work"):
        _verify(commitments, points, values, proof)
