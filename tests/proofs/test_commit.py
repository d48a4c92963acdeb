"""Ligero-style commitment: NTT against a naive DFT, honest openings, and rejection of every tampering."""
import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from proofs import field as F
from proofs.commit import (Commitment, CommitParams, OpeningProof, merkle_levels, merkle_open,
                           merkle_root_from, commit, ntt, open_batch, open_commitment, rs_encode,
                           verify_batch, verify_opening)
from proofs.errors import ProofError, ProofRejected
from proofs.mle import eq_table
from proofs.transcript import Transcript
from tests.proofs.rejection_helpers import only_rejected
from tests.reference.mle_naive import naive_mle
from tests.reference.rs_naive import naive_dft, naive_rs_encode

seeds = st.integers(0, 2 ** 32)


@given(st.integers(0, 6), st.integers(1, 3), seeds)
def test_ntt_matches_naive_dft(log_n, batch, seed):
    values = F.random_elements((batch, 2 ** log_n), seed=seed)
    out = ntt(values)
    for row, transformed in zip(values, out):
        assert np.array_equal(transformed, naive_dft(row))


@given(st.integers(0, 4), st.sampled_from([2, 4, 8]), seeds)
def test_rs_encode_matches_naive(log_k, rate_inv, seed):
    row = F.random_elements(2 ** log_k, seed=seed)
    assert np.array_equal(rs_encode(row, rate_inv), naive_rs_encode(row, rate_inv))


def test_rs_code_distance_on_a_low_weight_message():
    row = np.zeros(16, dtype=np.uint64)
    row[3] = 1
    codeword = rs_encode(row, 4)
    assert np.count_nonzero(codeword) >= 64 - 16 + 1  # MDS: distance n - k + 1


def test_params_security_formula_and_defaults():
    params = CommitParams()
    assert params.rate_inv == 4 and params.security_bits >= 100
    assert math.isclose(params.security_bits, params.num_queries * -math.log2((1 + 1 / 4) / 2))
    assert CommitParams(rate_inv=2).security_bits >= 100 and CommitParams(rate_inv=16).security_bits >= 100
    assert CommitParams(rate_inv=4, num_queries=10).security_bits < 10
    with pytest.raises(ProofError, match="rate_inv=3"):
        CommitParams(rate_inv=3)
    with pytest.raises(ProofError, match="num_queries=0"):
        CommitParams(num_queries=0)


def honest(num_vars, seed, num_points=1, params=CommitParams()):
    values = F.random_elements(2 ** num_vars, seed=seed)
    commitment, witness = commit(values, params)
    points = F.ext_random((num_points, num_vars), seed=seed + 1)
    opened, proof = open_batch(witness, points, Transcript("t"))
    return values, commitment, points, opened, proof


@settings(max_examples=15)
@given(st.integers(0, 10), st.integers(1, 3), seeds)
def test_honest_openings_verify_and_equal_the_mle(num_vars, num_points, seed):
    values, commitment, points, opened, proof = honest(num_vars, seed, num_points)
    for z, value in zip(points, opened):
        assert np.array_equal(value, naive_mle(values, z) if num_vars <= 6 else F.ext_dot(eq_table(z), values))
    verify_batch(commitment, points, opened, proof, Transcript("t"))
    restored = Commitment.from_bytes(commitment.to_bytes())
    verify_batch(restored, points, opened, OpeningProof.from_bytes(proof.to_bytes()), Transcript("t"))
    assert len(commitment.to_bytes()) < 64


def test_single_point_api_and_padding():
    values = F.to_field(np.arange(-5, 6))  # 11 values, padded to 16 with zeros
    commitment, witness = commit(values)
    z = F.ext_random(4, seed=3)
    value, proof = open_commitment(witness, z, Transcript("t"))
    assert np.array_equal(value, naive_mle(np.concatenate([values, np.zeros(5, np.uint64)]), z))
    verify_opening(commitment, z, value, proof, Transcript("t"))


def expect_rejected(commitment, points, values, proof, label="t"):
    only_rejected(lambda: verify_batch(commitment, points, values, proof, Transcript(label)))


def test_tampered_statement_is_rejected():
    values, commitment, points, opened, proof = honest(8, seed=7, num_points=2)
    expect_rejected(Commitment(bytes(32), commitment.num_vars, commitment.params), points, opened, proof)
    other, _ = commit(F.random_elements(2 ** 8, seed=99))
    expect_rejected(other, points, opened, proof)
    wrong = opened.copy()
    wrong[1, 2] = (wrong[1, 2] + 1) % F.P
    expect_rejected(commitment, points, wrong, proof)
    moved = points.copy()
    moved[0, 0, 0] = (moved[0, 0, 0] + 1) % F.P
    expect_rejected(commitment, moved, opened, proof)
    expect_rejected(commitment, points, opened, proof, label="another proof")
    expect_rejected(commitment, points[:1], opened[:1], proof)


@pytest.mark.parametrize("part", ["u_rand", "u_evals", "columns"])
def test_tampered_proof_arrays_are_rejected(part):
    _, commitment, points, opened, proof = honest(8, seed=11)
    arrays = {"u_rand": proof.u_rand, "u_evals": proof.u_evals, "columns": proof.columns}
    for flat_index in (0, arrays[part].size // 2, arrays[part].size - 1):
        tampered = {k: v.copy() for k, v in arrays.items()}
        tampered[part].reshape(-1)[flat_index] = (tampered[part].reshape(-1)[flat_index] + 1) % F.P
        expect_rejected(commitment, points, opened, OpeningProof(**tampered, merkle_proof=proof.merkle_proof))


def test_tampered_merkle_path_is_rejected():
    _, commitment, points, opened, proof = honest(8, seed=12)
    for k in (0, len(proof.merkle_proof) - 1):
        path = list(proof.merkle_proof)
        path[k] = bytes([path[k][0] ^ 1]) + path[k][1:]
        expect_rejected(commitment, points, opened, OpeningProof(proof.u_rand, proof.u_evals, proof.columns,
                                                                 tuple(path)))
    for path in (proof.merkle_proof[:-1], proof.merkle_proof + (bytes(32),), proof.merkle_proof[:-1] + (b"x",)):
        expect_rejected(commitment, points, opened, OpeningProof(proof.u_rand, proof.u_evals, proof.columns, path))


def test_truncated_and_corrupted_bytes_are_rejected():
    _, commitment, points, opened, proof = honest(7, seed=13)
    data = proof.to_bytes()
    for cut in range(0, len(data), max(1, len(data) // 97)):
        with pytest.raises(ProofRejected):
            OpeningProof.from_bytes(data[:cut])
    rng = np.random.default_rng(5)
    for position in rng.choice(len(data), size=150, replace=False):
        corrupted = bytearray(data)
        corrupted[position] ^= 1 << int(rng.integers(8))
        with pytest.raises(ProofRejected):
            verify_batch(commitment, points, opened, OpeningProof.from_bytes(bytes(corrupted)), Transcript("t"))
    com_bytes = commitment.to_bytes()
    for position in range(len(com_bytes)):
        corrupted = bytearray(com_bytes)
        corrupted[position] ^= 0x10
        with pytest.raises(ProofRejected):
            verify_batch(Commitment.from_bytes(bytes(corrupted)), points, opened, proof, Transcript("t"))
    for junk in (b"", b"HZKCMT01", com_bytes + b"\x00", None):
        with pytest.raises(ProofRejected):
            Commitment.from_bytes(junk)


def test_verifier_rejects_weak_parameters_and_malformed_objects():
    _, commitment, points, opened, proof = honest(5, seed=14, params=CommitParams(num_queries=20))
    expect_rejected(commitment, points, opened, proof)
    verify_batch(commitment, points, opened, proof, Transcript("t"), min_security_bits=10)
    for bad in (None, object(), "proof"):
        expect_rejected(commitment, points, opened, bad)
        expect_rejected(bad, points, opened, proof)
    expect_rejected(commitment, points.astype(np.int64), opened, proof)
    expect_rejected(commitment, points, opened[:, :3], proof)
    for merkle in (None, 5, [b"x" * 32, None]):
        expect_rejected(commitment, points, opened, OpeningProof(proof.u_rand, proof.u_evals, proof.columns, merkle))
    for u_rand in (None, proof.u_rand.tolist(), proof.u_rand[:, :3]):
        expect_rejected(commitment, points, opened, OpeningProof(u_rand, proof.u_evals, proof.columns,
                                                                 proof.merkle_proof))
    with pytest.raises(ProofError, match="root"):
        Commitment(None, 3)
    with pytest.raises(ProofError, match="num_vars=99"):
        Commitment(bytes(32), 99)


@given(st.integers(1, 8), st.lists(st.integers(0, 255), min_size=1, max_size=40), seeds)
def test_merkle_multiproof_recovers_the_root(depth, raw_indices, seed):
    leaves = [bytes([seed % 256, i % 256, i // 256]) * 11 for i in range(2 ** depth)]
    leaves = [leaf[:32] for leaf in leaves]
    levels = merkle_levels(leaves)
    indices = np.unique(np.array(raw_indices) % 2 ** depth)
    proof = merkle_open(levels, indices)
    opened = [leaves[i] for i in indices]
    assert merkle_root_from(opened, indices, proof, depth) == levels[-1][0]
    if proof:
        with pytest.raises(ProofRejected):
            merkle_root_from(opened, indices, proof[:-1], depth)
    with pytest.raises(ProofRejected):
        merkle_root_from(opened, indices, proof + [bytes(32)], depth)


def test_commit_input_errors_and_no_mutation():
    with pytest.raises(ProofError, match="dtype=float64"):
        commit(np.ones(4))
    with pytest.raises(ProofError, match="canonical"):
        commit(np.array([F.P], dtype=np.uint64))
    signed = np.array([-3, 1, 2, -7])
    assert commit(signed)[0].root == commit(F.to_field(signed))[0].root
    with pytest.raises(ProofError, match="params"):
        commit(F.random_elements(4, seed=1), params=4)
    values = F.random_elements(64, seed=2)
    saved = values.copy()
    _, witness = commit(values)
    points = F.ext_random((1, 6), seed=3)
    saved_points = points.copy()
    open_batch(witness, points, Transcript("t"))
    assert np.array_equal(values, saved) and np.array_equal(points, saved_points)


def test_numba_ntt_matches_numpy_ntt():
    pytest.importorskip("numba")
    from proofs.pcs.reed_solomon import NTT_NUMBA_MIN_SIZE, ntt_numpy, powers
    values = F.random_elements((NTT_NUMBA_MIN_SIZE // 2048, 2048), seed=4)
    n = values.shape[1]
    twiddles = powers(pow(F.GENERATOR, (F.P - 1) // n, F.P), n // 2)
    assert np.array_equal(ntt(values), ntt_numpy(values, twiddles))


def test_ntt_input_errors():
    with pytest.raises(ProofError, match="length 3"):
        ntt(np.zeros(3, dtype=np.uint64))
    with pytest.raises(ProofError, match="length 0"):
        ntt(np.zeros((2, 0), dtype=np.uint64))
    with pytest.raises(ProofError, match="dtype=float64"):
        ntt(np.zeros(4))


@pytest.mark.parametrize("rate_inv", [2, 8, 16])
def test_other_rates_open_verify_and_reject(rate_inv):
    params = CommitParams(rate_inv=rate_inv)
    assert params.security_bits >= 100
    values, commitment, points, opened, proof = honest(9, seed=rate_inv, num_points=2, params=params)
    assert commitment.codeword_length == rate_inv * 2 ** commitment.log_cols
    verify_batch(commitment, points, opened, proof, Transcript("t"))
    columns = proof.columns.copy()
    columns[-1, -1] = (columns[-1, -1] + 1) % F.P
    expect_rejected(commitment, points, opened, OpeningProof(proof.u_rand, proof.u_evals, columns, proof.merkle_proof))
    other = Commitment(commitment.root, commitment.num_vars, CommitParams(rate_inv=4))
    expect_rejected(other, points, opened, proof)
