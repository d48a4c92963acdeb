"""Issue 11, items 3 and 4: Network proofs hide the weights by default; soundness counts every opening.

The attack of the audit, kept as a negative test: a Ligero opening sends the queried columns of the encoded
weight rows; once the distinct queried positions reach the row length, Reed-Solomon interpolation returns the
rows. Against the non-hiding mode (``zk=False``) it recovers every weight and bias of a 16->16->4 model from one
proof; against the default (hiding) mode the same code decodes wrong values, and the opened columns are
consistent with any weights at all (the random tail coefficients alone can produce every column).
"""
import contextlib
import dataclasses

import galois
import numpy as np
import pytest

from proofs import commit as commit_module
from proofs import field as F
from proofs import zk as zk_module
from proofs.commit import CommitParams
from proofs.errors import ModelError, ProofRejected
from proofs.layers import network_zk
from proofs.layers.network import Network, verify_network
from proofs.layers.statement import weight_packing
from proofs.layers.step_proof import soundness_bits as step_soundness_bits
from proofs.layers.step_proof import commit_forward, commit_step, prove_forward, prove_training_step
from proofs.layers.training import TrainingSpec, forward_trace, training_trace
from proofs.quantize import forward_int, quantize_fixed_point, quantize_input
from proofs.sumcheck import SumcheckProof
from proofs.basefold_zk import MaskedSumcheckProof
from proofs.zk import HidingCommitment, HidingOpening, HidingParams, ZKSumcheckProof

GF = galois.GF(F.P)
SIZES = (16, 16, 4)


def float_mlp(seed, sizes=SIZES):
    rng = np.random.default_rng(seed)
    weights = [rng.uniform(-1, 1, (sizes[i + 1], sizes[i])) / np.sqrt(sizes[i]) for i in range(len(sizes) - 1)]
    biases = [rng.uniform(-0.1, 0.1, sizes[i + 1]) for i in range(len(sizes) - 1)]
    return weights, biases


@pytest.fixture(scope="module")
def model():
    return quantize_fixed_point(*float_mlp(0), frac_bits=8)


@pytest.fixture(scope="module")
def x(model):
    return quantize_input(model, np.random.default_rng(1).uniform(-1, 1, (1, SIZES[0])))


@pytest.fixture(scope="module")
def hiding(model, x):
    network = Network(model, network_zk.default_params(), max_proofs=2)
    return network, network.prove(x)


# ------------------------------------------------------------------------------------------- the attack
@contextlib.contextmanager
def recorded_queries():
    """Record (commitment, queried positions) of every opening a verifier checks (the positions are public:
    the verifier derives them from the transcript)."""
    seen, plain, hidden = [], commit_module._queries, zk_module._queries

    def plain_queries(transcript, commitment, *args):
        indices = plain(transcript, commitment, *args)
        seen.append((commitment, indices))
        return indices

    def hidden_queries(transcript, commitment, rows):
        indices = hidden(transcript, commitment, rows)
        seen.append((commitment, indices))
        return indices

    commit_module._queries, zk_module._queries = plain_queries, hidden_queries
    try:
        yield seen
    finally:
        commit_module._queries, zk_module._queries = plain, hidden


def decode_rows(columns, indices, codeword_length: int, row_length: int):
    """Reed-Solomon interpolation: the message rows (degree < row_length) through the opened symbols, or None
    when fewer distinct positions than the row length were opened."""
    if len(indices) < row_length:
        return None
    omega = GF(pow(F.GENERATOR, (F.P - 1) // codeword_length, F.P))
    points = omega ** np.asarray(indices[:row_length], dtype=np.int64)
    vandermonde = points[:, None] ** np.arange(row_length)[None, :]
    symbols = GF(np.asarray(columns[:, :row_length], dtype=np.int64) % F.P)
    return np.asarray(np.linalg.solve(vandermonde, symbols.T).T, dtype=np.int64)


def signed(values):
    values = np.asarray(values, dtype=np.int64) % F.P
    return np.where(values > F.P // 2, values - F.P, values)


def recover_plain(network, x, proof):
    """Every weight and bias of a zk=False proof, from its weight opening's columns alone."""
    with recorded_queries() as seen:
        verify_network(network.commitment, x, proof)
    commitment, indices = next((c, i) for c, i in seen if c == network.commitment.weights)
    rows = decode_rows(proof.weights_opening.columns, indices, commitment.codeword_length, 1 << commitment.log_cols)
    table = signed(rows.reshape(-1))
    packing = weight_packing(network.commitment.layers)
    return [table[o:o + n] for o, n in zip(packing.offsets, packing.lengths)]


def recover_hiding(network, x, proof):
    """The same decoding applied to the model copy's opening of a hiding proof (data rows of its columns)."""
    copy = network.commitment.weights.copies[proof.relations.copy]
    with recorded_queries() as seen:
        verify_network(network.commitment, x, proof)
    indices = [i for c, i in seen if c == copy][-1]  # the proof's opening (the agreement's came before)
    opening = [item for item in proof.relations.items if isinstance(item, HidingOpening)][-1]
    layout = network_zk.model_layout(network.commitment.layers)
    rows = decode_rows(opening.columns[:1 << copy.log_rows], indices, copy.codeword_length, 1 << copy.log_cols)
    table = signed(rows.reshape(-1)) if rows is not None else np.zeros(1 << layout.num_vars, dtype=np.int64)
    return {s.name: table[layout.offset(s.name):layout.offset(s.name) + s.size] for s in layout.slots}


def padded_weights(model):
    tables = network_zk.model_tables(model)
    return {name: signed(t) for name, t in tables.items()}


def test_attack_recovers_every_weight_from_one_plain_proof(model, x):
    network = Network(model, zk=False)
    proof = network.prove(x)
    recovered = recover_plain(network, x, proof)
    for i, layer in enumerate(model.layers):
        w, b = recovered[2 * i], recovered[2 * i + 1]
        n = 1 << (layer.in_features - 1).bit_length()
        assert np.array_equal(w.reshape(-1, n)[:layer.out_features, :layer.in_features], layer.weight)
        assert np.array_equal(b[:layer.out_features], layer.bias)


def test_the_same_attack_fails_against_the_default_hiding_proof(model, x, hiding):
    network, proof = hiding
    assert network.zk and network.commitment.zk
    recovered = recover_hiding(network, x, proof)
    expected = padded_weights(model)
    for name, values in expected.items():
        assert not np.array_equal(recovered[name][:values.size], values), name


def test_hiding_columns_are_consistent_with_any_weights(model, x, hiding):
    """The opened symbols at q distinct positions of a row with t >= q random tail coefficients: the tail's
    evaluation map onto those positions has full rank q, so for every choice of the row's data there is a
    tail giving exactly the opened columns (they are independent of the weights)."""
    network, proof = hiding
    copy = network.commitment.weights.copies[proof.relations.copy]
    with recorded_queries() as seen:
        verify_network(network.commitment, x, proof)
    indices = [i for c, i in seen if c == copy][-1]
    cols, tail, length = 1 << copy.log_cols, copy.tail, copy.codeword_length
    assert tail >= len(indices)
    omega = GF(pow(F.GENERATOR, (F.P - 1) // length, F.P))
    points = omega ** np.asarray(indices, dtype=np.int64)
    tail_map = points[:, None] ** np.arange(cols, cols + tail)[None, :]
    assert np.linalg.matrix_rank(tail_map) == len(indices)


def test_two_models_give_openings_of_the_same_distribution(hiding, x):
    """Weights enter the opened data columns only through rows whose tails are uniform: over both models the
    opened symbols look uniform (no small values, as plain weight encodings of a structured row would not)."""
    network, proof = hiding
    other = Network(quantize_fixed_point(*float_mlp(9), frac_bits=8), network_zk.default_params(), max_proofs=1)
    other_proof = other.prove(x)
    for p in (proof, other_proof):
        opening = [item for item in p.relations.items if isinstance(item, HidingOpening)][-1]
        values = opening.columns.astype(np.float64) / F.P
        assert 0.4 < values.mean() < 0.6 and values.size > 100


def test_hiding_proofs_accept_honest_and_reject_tampered(model, x, hiding):
    network, proof = hiding
    assert np.array_equal(verify_network(network.commitment, x, proof.to_bytes()), forward_int(model, x))
    wrong = proof.output.copy()
    wrong[0, 0] += 1
    with pytest.raises(ProofRejected):
        verify_network(network.commitment, x, dataclasses.replace(proof, output=wrong))
    with pytest.raises(ProofRejected):
        verify_network(network.commitment, x + 1, proof)
    data = bytearray(proof.to_bytes())
    for position in (len(data) // 5, len(data) // 2, len(data) - 40):
        corrupted = bytearray(data)
        corrupted[position] ^= 0x10
        with pytest.raises(ProofRejected):
            verify_network(network.commitment, x, bytes(corrupted))
    plain = Network(model, zk=False)
    with pytest.raises(ProofRejected):  # a plain proof against a hiding commitment, and the reverse
        verify_network(network.commitment, x, plain.prove(x))
    with pytest.raises(ProofRejected):
        verify_network(plain.commitment, x, proof)


def test_each_proof_uses_a_fresh_copy_until_none_is_left(model, x):
    network = Network(model, network_zk.default_params(), max_proofs=2)
    first, second = network.prove(x), network.prove(x)
    assert {first.relations.copy, second.relations.copy} == {0, 1}
    for proof in (first, second):
        verify_network(network.commitment, x, proof)
    with pytest.raises(Exception, match="copies"):
        network.prove(x)


# ------------------------------------------------------------------------------------------- soundness
def independent_union_bound(proof_items, commitments, bit_weights: int, mask_openings: bool = True) -> float:
    """The union bound recomputed from a proof's structure: per ZK sumcheck (n rounds of degree d) its random
    point n, its rounds n d and its mask's batching 1 (over |F|) plus its mask opening; per opening 2^-bits +
    (2N + 2 log_cols + 3)/|F|; the bit-check weights 1/|F| each."""
    field = float(F.P) ** 4
    error = bit_weights / field
    for item in proof_items:
        if isinstance(item, (ZKSumcheckProof, MaskedSumcheckProof)):
            n, d = item.sumcheck.round_messages.shape[0], item.sumcheck.round_messages.shape[1] - 1
            error += (n * d + n + 1) / field
            mask = getattr(item, "mask_commitment", None)  # a mask of its own (else all in one commitment)
            if mask_openings and mask is not None:  # what the old bound left out
                error += 2.0 ** -mask.security_bits + (2 * mask.codeword_length + 2 * mask.log_cols + 3) / field
        elif isinstance(item, HidingCommitment) and mask_openings:  # every relation's mask, opened once
            error += 2.0 ** -item.security_bits + (2 * item.codeword_length + 2 * item.log_cols + 3) / field
        else:
            assert not isinstance(item, SumcheckProof)
    for c in commitments:  # proximity and value rows 2N, the reduction's rounds 2 log_cols, alpha, rho, beta 3
        error += 2.0 ** -c.security_bits + (2 * c.codeword_length + 2 * c.log_cols + 3) / field
    return -np.log2(error)


def agreements_error(reusables) -> float:
    """The agreement proofs of reusable statement commitments (each copy opened once; bilinear batching 2 / |F|)."""
    return sum(2.0 ** -independent_union_bound(r.agreement, r.copies, 2) for r in reusables if len(r.copies) > 1)


def test_network_soundness_counts_every_mask_and_store_opening(model, x, hiding):
    network, proof = hiding
    openings = [item for item in proof.relations.items if isinstance(item, HidingOpening)]
    commitments = [network.commitment.weights.copies[proof.relations.copy], *proof.relations.commitments]
    masks = [item for item in proof.relations.items if isinstance(item, HidingCommitment)]  # one, opened last
    assert len(masks) == 1 and len(openings) == len(commitments) + 1
    bit_weights = len(network_zk.proof_layout(network.commitment.layers, 1).slots) - 1  # all but A1
    reusable = network.commitment.weights  # the copies' agreement proof
    assert len(reusable.copies) == 2 and [type(i) for i in reusable.agreement].count(HidingOpening) == 2
    agreement = agreements_error([reusable])
    expected = -np.log2(2.0 ** -independent_union_bound(proof.relations.items, commitments, bit_weights) + agreement)
    assert abs(network.commitment.soundness_bits(1) - expected) < 1e-9
    old = independent_union_bound(proof.relations.items, commitments, bit_weights, mask_openings=False)
    assert expected < old - 1e-3  # the mask openings count (the old bound left them out)


def test_training_soundness_counts_every_mask_and_store_opening():
    spec = TrainingSpec((8, 8, 4), batch=4)
    rng = np.random.default_rng(3)
    weights = [rng.integers(-20, 20, (8, 8)), rng.integers(-20, 20, (4, 8))]
    trace = training_trace(weights, rng.integers(-20, 20, (4, 8)), rng.integers(-20, 20, (4, 4)), spec)
    committed = commit_step(trace)
    proof = prove_training_step(trace, committed)
    from proofs.layers.step_stores import decomposition_keys, proof_layouts
    layouts = proof_layouts(spec, 1, "aggregate", True)
    reusables = (committed.weights, committed.new_weights, committed.batch)
    statement = [r.copies[proof.copy] for r in reusables]  # the copy this proof opens
    own = independent_union_bound(proof.items, statement + list(proof.commitments), len(decomposition_keys(layouts)))
    expected = -np.log2(2.0 ** -own + agreements_error(reusables))
    assert abs(step_soundness_bits(spec, max_proofs=len(committed.weights.copies)) - expected) < 1e-9
    old = independent_union_bound(proof.items, statement + list(proof.commitments), len(decomposition_keys(layouts)),
                                  mask_openings=False)
    assert own < old - 1e-3


def test_inference_soundness_counts_the_opened_copy():
    """Inference proofs open one copy of a reusable statement (random tails for two openings): its shape counts."""
    spec = TrainingSpec((8, 8, 4), batch=4)
    rng = np.random.default_rng(4)
    trace = forward_trace([rng.integers(-20, 20, (8, 8)), rng.integers(-20, 20, (4, 8))],
                          rng.integers(-50, 50, (4, 8)), spec)
    committed = commit_forward(trace, max_proofs=2)
    proof = prove_forward(trace, committed)
    from proofs.layers.step_stores import decomposition_keys, proof_layouts
    layouts = proof_layouts(spec, 1, "aggregate", True, forward_only=True)
    statement = [committed.weights.copies[proof.copy], committed.input.copies[proof.copy]]
    own = independent_union_bound(proof.items, statement + list(proof.commitments), len(decomposition_keys(layouts)))
    expected = -np.log2(2.0 ** -own + agreements_error((committed.weights, committed.input)))
    assert abs(step_soundness_bits(spec, forward_only=True, max_proofs=2) - expected) < 1e-9


def test_verifiers_refuse_parameters_below_100_bits(model, x):
    with pytest.raises(ModelError, match="100"):
        Network(model, HidingParams(rate_inv=2, target_bits=60))
    with pytest.raises(ModelError, match="100"):
        Network(model, CommitParams(rate_inv=4, num_queries=90), zk=False)  # about 60 bits
    weak = network_zk.commit_model(model, Network(model, zk=False).commitment.layers,
                                   HidingParams(rate_inv=2, target_bits=60, mask_rows=40), max_proofs=1)[0]
    network = Network(model, network_zk.default_params(), max_proofs=1)
    statement = dataclasses.replace(network.commitment, weights=weak)
    assert statement.soundness_bits(1) < 80  # parameters promising 60 bits of query soundness
    with pytest.raises(ProofRejected, match="bits"):
        verify_network(statement, x, network.prove(x))
    plain = Network(model, zk=False)
    weak_plain = dataclasses.replace(plain.commitment, weights=dataclasses.replace(
        plain.commitment.weights, params=CommitParams(rate_inv=4, num_queries=90)))
    with pytest.raises(ProofRejected, match="bits"):
        verify_network(weak_plain, x, plain.prove(x))
