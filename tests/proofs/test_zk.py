"""Zero knowledge: the hiding commitment, the masked sumcheck, its simulator, and what proofs reveal."""
import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from proofs import ProofError, ProofRejected
from proofs import field as F
from proofs import zk
from proofs.layers import step_proof as S
from proofs.layers import training as T
from proofs.mle import eq_table, mle_evaluate
from proofs.sumcheck import SumcheckVerifier
from proofs.transcript import Transcript


def _open(values, points, hiding=True, seed=None, log_rows=None):
    commitment, witness = zk.hiding_commit(values, zk.HidingParams(hiding=hiding), log_rows=log_rows, seed=seed)
    opened, opening = zk.open_points(witness, points, Transcript("test"), seed=seed)
    return commitment, opened, opening


@settings(max_examples=8)
@given(st.integers(0, 11), st.integers(1, 3), st.booleans(), st.integers(0, 2 ** 32))
def test_openings_verify_and_match_the_mle(num_vars, count, hiding, seed):
    values = F.random_elements(1 << num_vars, seed=seed)
    points = F.ext_random((count, num_vars), seed=seed + 1)
    commitment, opened, opening = _open(values, points, hiding, seed)
    for point, value in zip(points, opened):
        assert F.ext_eq(value, mle_evaluate(values, point))
    zk.verify_points(commitment, points, opened, opening, Transcript("test"))


@pytest.mark.parametrize("hiding", [True, False])
def test_tampered_openings_are_rejected(hiding):
    values = F.random_elements(256, seed=1)
    points = F.ext_random((2, 8), seed=2)
    commitment, opened, opening = _open(values, points, hiding)
    wrong = opened.copy()
    wrong[1, 2] = (wrong[1, 2] + 1) % F.P
    cases = [(commitment, wrong, opening)]
    for name in ("rows", "columns"):
        array = getattr(opening, name).copy()
        array.flat[3] = (array.flat[3] + 1) % F.P
        cases.append((commitment, opened, dataclasses.replace(opening, **{name: array})))
    cases.append((commitment, opened, dataclasses.replace(opening, merkle=opening.merkle[1:])))
    cases.append((dataclasses.replace(commitment, root=bytes(32)), opened, opening))
    if hiding:
        cases.append((commitment, opened, dataclasses.replace(opening, salts=(bytes(16),) + opening.salts[1:])))
        for name in ("mask_value", "mask_sum", "reduction"):
            mask = getattr(opening, name).copy()
            mask.flat[0] = (mask.flat[0] + 1) % F.P
            cases.append((commitment, opened, dataclasses.replace(opening, **{name: mask})))
    for c, v, o in cases:
        with pytest.raises(ProofRejected):
            zk.verify_points(c, points, v, o, Transcript("test"))
    with pytest.raises(ProofRejected):
        zk.verify_points(commitment, points[:1], opened, opening, Transcript("test"))


def test_a_cheating_prover_cannot_state_another_value():
    values = F.random_elements(64, seed=3)
    point = F.ext_random((1, 6), seed=4)
    commitment, witness = zk.hiding_commit(values, zk.HidingParams())
    lie = F.ext_add(mle_evaluate(values, point[0]), F.ext_one())[None]
    _, opening = zk.open_points(witness, point, Transcript("t"), values=lie)
    with pytest.raises(ProofRejected, match="differs"):
        zk.verify_points(commitment, point, lie, opening, Transcript("t"))


def test_general_functionals_open_on_one_row():
    values = F.random_elements(32, seed=5)
    commitment, witness = zk.hiding_commit(values, zk.HidingParams(), log_rows=0)
    weights = F.ext_random(32, seed=6)
    functional = [[(F.ext_one((1,)), weights)]]
    opened, opening = zk.open_functionals(witness, functional, Transcript("f"))
    assert F.ext_eq(opened[0], F.ext_dot(weights, values))
    zk.verify_functionals(commitment, functional, opened, opening, Transcript("f"))


def _words(values, ext: bool) -> list:
    """Byte patterns of consecutive witness values as they would be serialized (base or F_p4-embedded)."""
    arr = np.asarray(values, dtype=np.uint64)
    embedded = F.ext_from_base(arr) if ext else arr
    data = embedded.astype("<u4").tobytes()
    step = (16 if ext else 4)
    return [data[i:i + 2 * step] for i in range(0, len(data) - 2 * step + 1, step)]


def test_no_witness_value_appears_in_hiding_openings_but_does_without_hiding():
    values = F.random_elements(64, seed=7)
    points = F.ext_random((2, 6), seed=8)
    patterns = _words(values, False) + _words(values, True)
    _, _, opening = _open(values, points, hiding=True, log_rows=0)
    assert not any(p in opening.to_bytes() for p in patterns)
    _, _, leaky = _open(values, points[:1], hiding=False, log_rows=0)  # one row, one piece: the sent row is it
    assert any(p in leaky.to_bytes() for p in patterns)


def test_fresh_masks_make_every_commitment_and_opening_differ():
    values = F.random_elements(128, seed=9)
    points = F.ext_random((1, 7), seed=10)
    first, second = _open(values, points), _open(values, points)
    assert first[0].root != second[0].root
    assert first[2].to_bytes() != second[2].to_bytes()
    plain = _open(values, points, hiding=False), _open(values, points, hiding=False)
    assert plain[0][0].root == plain[1][0].root  # without hiding the commitment is deterministic


def _signature(items) -> list:
    """Kinds and shapes of proof items, with the query-dependent sizes (distinct columns, digests) left out."""
    out = []
    for item in items:
        if isinstance(item, np.ndarray):
            out.append(("array", item.shape))
        elif isinstance(item, zk.HidingOpening):
            out.append(("opening", item.rows.shape, item.mask_value.shape, item.columns.shape[0], len(item.mask_root)))
        elif isinstance(item, zk.HidingCommitment):  # every relation's mask
            out.append(("masks", item.num_vars, item.log_rows))
        else:
            out.append((type(item).__name__, item.sumcheck.round_messages.shape))
    return out


def _query_bytes(items) -> int:
    """Bytes that depend only on the query indices: opened columns, salts and Merkle digests."""
    total = 0
    for item in items:
        openings = [item] if isinstance(item, zk.HidingOpening) else \
            [item.mask_opening] if isinstance(item, zk.ZKSumcheckProof) else []
        for o in openings:
            total += 4 * (o.columns.size + o.mask_columns.size) + 16 * (len(o.salts) + len(o.mask_salts)) + \
                32 * (len(o.merkle) + len(o.mask_merkle))
    return total


def test_same_statement_different_witnesses_give_proofs_of_the_same_shape():
    spec = T.TrainingSpec((4, 3, 2), batch=2, act_bits=6, weight_bits=6, shift=3, grad_shift=3, grad_bits=8,
                          lr_shift=1, update_bits=10)
    proofs = []
    for seed in (11, 12):
        rng = np.random.default_rng(seed)
        weights = [rng.integers(-6, 6, size=(spec.sizes[i + 1], spec.sizes[i])) for i in range(2)]
        trace = T.training_trace(weights, rng.integers(-8, 8, (2, 4)), rng.integers(-8, 8, (2, 2)), spec)
        committed = S.commit_step(trace, zk=True)
        proofs.append(S.prove_training_step(trace, committed, zk=True))
        S.verify_training_step(spec, committed, proofs[-1])
    first, second = proofs
    assert _signature(first.items) == _signature(second.items)
    fixed = [p.num_bytes - _query_bytes(p.items) for p in proofs]
    assert fixed[0] == fixed[1]  # everything but the query-dependent parts has the same size
    for p in proofs:  # and those are bounded by the query count
        assert _query_bytes(p.items) > 0


def test_training_proof_bytes_contain_no_weight_row():
    spec = T.TrainingSpec((8, 4, 2), batch=2, act_bits=8, weight_bits=16, shift=17, grad_shift=10, grad_bits=16,
                          lr_shift=8, update_bits=17)
    rng = np.random.default_rng(13)
    weights = [rng.integers(-2 ** 15, 2 ** 15, size=(spec.sizes[i + 1], spec.sizes[i])) for i in range(2)]
    trace = T.training_trace(weights, rng.integers(-100, 100, (2, 8)), rng.integers(-100, 100, (2, 2)), spec)
    committed = S.commit_step(trace, zk=True)
    data = S.prove_training_step(trace, committed, zk=True).to_bytes()
    for i, w in enumerate(trace.weights + trace.new_weights):  # the real entries (padding is zeros)
        layer = i % spec.num_layers
        table = F.to_field(w[:spec.sizes[layer + 1], :spec.sizes[layer]].reshape(-1))
        assert not any(p in data for p in _words(table, False) + _words(table, True))


# ------------------------------------------------------------------------------------- ZK sumcheck
@st.composite
def _sumcheck_case(draw):
    k = draw(st.integers(1, 6))
    degree = draw(st.integers(1, 3))
    seed = draw(st.integers(0, 2 ** 32))
    tables = [F.random_elements(1 << k, seed=seed + j) for j in range(degree)]
    return k, degree, tables


def _claim(tables):
    product = tables[0]
    for t in tables[1:]:
        product = F.mul(product, t)
    return F.ext_from_base(F.sum_(product))


@settings(max_examples=10)
@given(_sumcheck_case())
def test_zk_sumcheck_verifies_and_ends_at_the_factors(case):
    k, degree, tables = case
    claim = _claim(tables)
    proof, point, evals = zk.prove_zk_sumcheck([(F.ext_one(), tables)], claim, Transcript("z"))
    sub = zk.verify_zk_sumcheck(proof, claim, k, degree, Transcript("z"))
    value = F.ext_one()
    for t in tables:
        value = F.ext_mul(value, mle_evaluate(t, sub.point))
    assert F.ext_eq(sub.expected_value, value)
    assert np.array_equal(sub.point, point)


def test_zk_sumcheck_rejects_false_claims_and_tampering():
    tables = [F.random_elements(16, seed=14), F.random_elements(16, seed=15)]
    claim = _claim(tables)
    proof, _, _ = zk.prove_zk_sumcheck([(F.ext_one(), tables)], claim, Transcript("z"))
    with pytest.raises(ProofRejected):
        zk.verify_zk_sumcheck(proof, F.ext_add(claim, F.ext_one()), 4, 2, Transcript("z"))
    messages = proof.sumcheck.round_messages.copy()
    messages[2, 1, 0] = (messages[2, 1, 0] + 1) % F.P
    bad = dataclasses.replace(proof, sumcheck=dataclasses.replace(proof.sumcheck, round_messages=messages))
    with pytest.raises(ProofRejected):
        zk.verify_zk_sumcheck(bad, claim, 4, 2, Transcript("z"))
    for name in ("mask_eval", "mask_sum"):
        value = getattr(proof, name).copy()
        value[0] = (value[0] + 1) % F.P
        with pytest.raises(ProofRejected):
            zk.verify_zk_sumcheck(dataclasses.replace(proof, **{name: value}), claim, 4, 2, Transcript("z"))
    with pytest.raises(ProofRejected):
        zk.verify_zk_sumcheck(proof, claim, 5, 2, Transcript("z"))
    # a false claim proved anyway: the rounds or the final value give it away
    false = F.ext_add(claim, F.ext_one())
    lie, _, _ = zk.prove_zk_sumcheck([(F.ext_one(), tables)], false, Transcript("z"))
    with pytest.raises(ProofRejected):
        sub = zk.verify_zk_sumcheck(lie, false, 4, 2, Transcript("z"))
        value = F.ext_mul(mle_evaluate(tables[0], sub.point), mle_evaluate(tables[1], sub.point))
        sub.check(value)


def test_zk_sumcheck_messages_differ_for_the_same_witness():
    tables = [F.random_elements(32, seed=16), F.random_elements(32, seed=17)]
    claim = _claim(tables)
    a, _, _ = zk.prove_zk_sumcheck([(F.ext_one(), tables)], claim, Transcript("z"))
    b, _, _ = zk.prove_zk_sumcheck([(F.ext_one(), tables)], claim, Transcript("z"))
    assert not np.array_equal(a.sumcheck.round_messages, b.sumcheck.round_messages)
    assert a.to_bytes() != b.to_bytes()


@settings(max_examples=10)
@given(_sumcheck_case(), st.integers(0, 2 ** 32))
def test_simulated_transcripts_verify_without_the_witness(case, seed):
    k, degree, tables = case
    claim = _claim(tables)

    def oracle(point):  # the only access to the witness: f at the final point
        value = F.ext_one()
        for t in tables:
            value = F.ext_mul(value, mle_evaluate(t, point))
        return value

    sim = zk.simulate_zk_sumcheck(claim, k, degree, oracle, seed=seed)
    verifier = SumcheckVerifier(F.ext_add(claim, F.ext_mul(sim.rho, sim.mask_sum)), k, degree)
    for message, challenge in zip(sim.round_messages, sim.challenges):
        verifier.check_round(message)
        verifier.bind(challenge)
    sub = verifier.subclaim()
    assert F.ext_eq(sub.expected_value, F.ext_add(oracle(sub.point), F.ext_mul(sim.rho, sim.mask_eval)))
    real, _, _ = zk.prove_zk_sumcheck([(F.ext_one(), tables)], claim, Transcript("z"))
    assert sim.round_messages.shape == real.sumcheck.round_messages.shape


def test_simulator_does_not_accept_a_wrong_round_structure():
    sim = zk.simulate_zk_sumcheck(5, 3, 2, lambda point: F.ext_one(), seed=1)
    verifier = SumcheckVerifier(F.ext_add(F.ext_from_base(np.uint64(6)), F.ext_mul(sim.rho, sim.mask_sum)), 3, 2)
    with pytest.raises(ProofRejected):  # a transcript for claim 5 does not pass for claim 6
        verifier.check_round(sim.round_messages[0])


def test_parameters_are_validated():
    with pytest.raises(ProofError, match="rate_inv=3"):
        zk.HidingParams(rate_inv=3)
    with pytest.raises(ProofError, match="target_bits=10"):
        zk.HidingParams(target_bits=10)
    with pytest.raises(ProofError, match="canonical"):
        zk.hiding_commit(np.array([F.P], dtype=np.uint64))
    with pytest.raises(ProofError, match="log_rows=9"):
        zk.hiding_commit(F.random_elements(16, seed=1), log_rows=9)
    with pytest.raises(ProofError, match="degree=9"):
        zk.simulate_zk_sumcheck(0, 2, 9, lambda p: F.ext_zero())
    for log_n in (0, 4, 10, 16):
        commitment, _ = zk.hiding_commit(F.random_elements(1 << log_n, seed=2))
        assert commitment.tail == commitment.num_queries >= zk.HidingParams().num_queries
        assert commitment.security_bits >= zk.HidingParams().target_bits
        assert commitment.width <= zk.MAX_RATE * commitment.codeword_length
        plain, _ = zk.hiding_commit(F.random_elements(1 << log_n, seed=2), zk.HidingParams(hiding=False))
        assert plain.tail == 0 and plain.security_bits >= zk.HidingParams().target_bits
    big, _ = zk.hiding_commit(F.random_elements(1 << 16, seed=2))
    assert big.codeword_length == 4 << big.log_cols  # a long row keeps the code length: the tail costs no NTT size
    assert eq_table(F.ext_random(2, seed=3)).shape == (4, 4)


def test_training_proofs_of_the_same_step_differ():
    spec = T.TrainingSpec((4, 3, 2), batch=2, act_bits=6, weight_bits=6, shift=3, grad_shift=3, grad_bits=8,
                          lr_shift=1, update_bits=10)
    rng = np.random.default_rng(21)
    weights = [rng.integers(-6, 6, size=(spec.sizes[i + 1], spec.sizes[i])) for i in range(2)]
    trace = T.training_trace(weights, rng.integers(-8, 8, (2, 4)), rng.integers(-8, 8, (2, 2)), spec)
    committed = S.commit_step(trace, zk=True)
    first, second = (S.prove_training_step(trace, committed, zk=True) for _ in range(2))
    for proof in (first, second):
        S.verify_training_step(spec, committed, proof)
    assert first.to_bytes() != second.to_bytes()
    assert first.commitments[0].root != second.commitments[0].root
    again = S.commit_step(trace, zk=True)
    assert again.weights.root != committed.weights.root  # the same weights commit to a fresh root


def test_committed_mask_rows_serve_one_opening_then_fresh_masks_take_over():
    values = F.random_elements(512, seed=22)
    points = F.ext_random((3, 9), seed=23)
    commitment, witness = zk.hiding_commit(values, zk.HidingParams(mask_rows=13))
    opened, first = zk.open_points(witness, points, Transcript("m"))
    assert first.mask_root == b"" and first.columns.shape[0] == (1 << commitment.log_rows) + 13
    zk.verify_points(commitment, points, opened, first, Transcript("m"))
    opened2, second = zk.open_points(witness, points, Transcript("m"))  # masks spent: a fresh tree
    assert len(second.mask_root) == 32
    zk.verify_points(commitment, points, opened2, second, Transcript("m"))
    many = F.ext_random((5, 9), seed=24)  # 5 pieces need mask_rows_needed(5) = 13 mask rows: a fresh tree
    _, fresh_witness = commitment, zk.hiding_commit(values, zk.HidingParams(mask_rows=8))[1]
    opened3, third = zk.open_points(fresh_witness, many, Transcript("m"))
    assert len(third.mask_root) == 32
    zk.verify_points(fresh_witness.commitment, many, opened3, third, Transcript("m"))
    bad = first.columns.copy()
    bad[-1, 0] = (bad[-1, 0] + 1) % F.P  # a mask row's column
    with pytest.raises(ProofRejected):
        zk.verify_points(commitment, points, opened, dataclasses.replace(first, columns=bad), Transcript("m"))
    wrong = opened.copy()
    wrong[0, 0] = (wrong[0, 0] + 1) % F.P
    with pytest.raises(ProofRejected):
        zk.verify_points(commitment, points, wrong, first, Transcript("m"))
    with pytest.raises(ProofRejected, match="committed mask rows"):  # an inline opening with too few rows
        zk.verify_points(fresh_witness.commitment, many, opened3, dataclasses.replace(third, mask_root=b""), Transcript("m"))
    with pytest.raises(ProofError, match="mask_rows=-1"):
        zk.HidingParams(mask_rows=-1)


def test_training_proof_bytes_contain_no_input_target_or_gradient_row():
    spec = T.TrainingSpec((8, 4, 2), batch=4, act_bits=8, weight_bits=16, shift=17, grad_shift=10, grad_bits=16,
                          lr_shift=8, update_bits=17)
    rng = np.random.default_rng(14)
    weights = [rng.integers(-2 ** 15, 2 ** 15, size=(spec.sizes[i + 1], spec.sizes[i])) for i in range(2)]
    trace = T.training_trace(weights, rng.integers(-100, -1, (4, 8)), rng.integers(-100, -1, (4, 2)), spec)
    committed = S.commit_step(trace, zk=True)
    data = S.prove_training_step(trace, committed, zk=True, mode="layer").to_bytes()
    patterns = []
    for table in [trace.x, trace.y] + list(trace.grads):  # field images of negative integers: large words
        words = F.to_field(np.asarray(table).reshape(-1))  # that headers and small counts cannot imitate
        patterns += [p for p in _words(words, False) if np.frombuffer(p, dtype="<u4").min() > 1 << 20]
    assert len(patterns) > 20 and not any(p in data for p in patterns)


@pytest.mark.parametrize("mode", ["layer", "aggregate"])
def test_shapes_do_not_depend_on_the_witness_in_either_mode(mode):
    spec = T.TrainingSpec((4, 4, 2), batch=2, act_bits=6, weight_bits=6, shift=3, grad_shift=3, grad_bits=8,
                          lr_shift=1, update_bits=10)
    signatures, fixed = [], []
    for seed in (31, 32, 33):
        rng = np.random.default_rng(seed)
        weights = [rng.integers(-6, 6, size=(spec.sizes[i + 1], spec.sizes[i])) for i in range(2)]
        trace = T.training_trace(weights, rng.integers(-8, 8, (2, 4)), rng.integers(-8, 8, (2, 2)), spec)
        committed = S.commit_step(trace, zk=True)
        proof = S.prove_training_step(trace, committed, zk=True, mode=mode)
        signatures.append(_signature(proof.items))
        fixed.append(proof.num_bytes - _query_bytes(proof.items))
    assert signatures[0] == signatures[1] == signatures[2]
    assert fixed[0] == fixed[1] == fixed[2]


def test_an_opening_without_the_kept_code_is_the_same_opening(monkeypatch):
    """A witness without its encoded rows (zk.without_code, below any size here) opens to the same bytes as the
    witness that kept them: the opening encodes the rows again, as committed."""
    monkeypatch.setattr(zk, "KEEP_CODE_MAX_ENTRIES", 0)
    values, point = F.random_elements(256, seed=7), F.ext_random((1, 8), seed=8)
    openings = []
    for drop in (False, True):
        commitment, witness = zk.hiding_commit(values, zk.HidingParams(), seed=9)
        if drop:
            witness = zk.without_code(witness)
            assert witness.encoded is None and witness.levels is not None
        _, opening = zk.open_points(witness, point, Transcript("t"), seed=10)
        zk.verify_points(commitment, point, mle_evaluate(values, point[0])[None], opening, Transcript("t"))
        openings.append(opening.to_bytes())
    assert openings[0] == openings[1]


def test_reusable_copies_committed_without_their_codes_prove_and_verify(monkeypatch):
    """commit_reusable keeps no copy's code when every code is 'large' (one code in memory at a time): the
    agreement proof and each copy's proof still verify; the copies share one set of tables."""
    from proofs.layers import reusable as R

    from tests.proofs.test_commitment_reuse_hiding import SPEC, _forward

    monkeypatch.setattr(zk, "KEEP_CODE_MAX_ENTRIES", 0)
    trace = _forward(4)
    committed = S.commit_forward(trace, zk=True, private_input=True, max_proofs=2)
    witness = committed.witnesses["w0"]
    assert all(store.commitment_witness.encoded is None for store in witness.witnesses)
    assert witness.witnesses[0].tables is witness.witnesses[1].tables
    reusable = committed.weights
    R.verify_reusable(S.weight_layout(trace.spec, True), reusable, R.base_params(reusable), "test")
    output = S.forward_output(trace)
    for _ in range(2):
        S.verify_forward(SPEC, committed, output, S.prove_forward(trace, committed, zk=True))


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 5), st.integers(1, 3), st.data())
def test_mask_round_equals_the_sum_over_the_boolean_cube(num_vars, degree, data):
    """Libra's mask round sum_(x_(j+1..)) [prefix + g_j(X) + sum_(i>j) g_i(x_i)] at X = 0..degree, by brute force
    over Python ints (the field's additions are coordinate-wise; X^e is a small integer)."""
    j = data.draw(st.integers(0, num_vars - 1))
    seed = data.draw(st.integers(0, 2 ** 32 - 1))
    rng = np.random.default_rng(seed)
    coefficients = rng.integers(0, F.P, size=(num_vars, degree + 1, 4), dtype=np.uint64)
    if data.draw(st.booleans()):
        coefficients[:] = F.P - 1  # the largest residues
    prefix = rng.integers(0, F.P, size=4, dtype=np.uint64)
    c = coefficients.astype(object)

    def g(i, x):
        return [sum(c[i, e, k] * x ** e for e in range(degree + 1)) for k in range(4)]

    expected = []
    for x in range(degree + 1):
        total = [0] * 4
        for bits in range(1 << (num_vars - 1 - j)):
            value = [int(prefix[k]) + g(j, x)[k] for k in range(4)]
            for t, i in enumerate(range(j + 1, num_vars)):
                gi = g(i, (bits >> t) & 1)
                value = [value[k] + gi[k] for k in range(4)]
            total = [total[k] + value[k] for k in range(4)]
        expected.append([v % F.P for v in total])
    got = zk.mask_round(coefficients, j, prefix, num_vars, degree)
    assert got.dtype == np.uint64 and got.tolist() == expected
