"""Layer proofs one at a time: bit decomposition, matmul sumcheck, zkReLU; each checked against numpy."""
import numpy as np
import pytest
from hypothesis import given, strategies as st

from proofs import field as F
from proofs.commit import CommitParams, commit
from proofs.errors import ModelError, ProofRejected
from proofs.layers.common import Claim, pad_matrix, padded, padded_matrix
from proofs.layers.matmul import LinearShape, prove_linear, verify_linear, weight_tables
from proofs.layers.relu import prove_decomposition, verify_decomposition
from proofs.layers.requant import Decomposition, decompose, rebuild
from proofs.mle import mle_evaluate
from proofs.quantize import QuantizedLayer, round_shift
from proofs.transcript import Transcript

from .cheating import cheating_sumcheck


def random_point(rng, k):
    return F.ext_random((k,), seed=int(rng.integers(2**32)))


@given(st.integers(0, 2**32 - 1), st.integers(0, 9), st.integers(1, 12), st.booleans(), st.integers(1, 40))
def test_decomposition_rebuilds_accumulator_and_output(seed, shift, q_bits, relu, size):
    rng = np.random.default_rng(seed)
    limit = 1 << (q_bits - 1)
    shifted = rng.integers(-limit, limit, size)
    acc = (shifted << shift) + rng.integers(0, 1 << shift, size) - ((1 << (shift - 1)) if shift else 0)
    spec = Decomposition(shift, q_bits, relu)
    witness = decompose(acc, spec)
    assert set(np.unique(witness.bits)) <= {0, 1}
    assert np.array_equal(witness.shifted, round_shift(acc, shift))
    assert np.array_equal(witness.out, np.maximum(witness.shifted, 0) if relu else witness.shifted)
    assert np.array_equal(witness.sign, (witness.shifted < 0).astype(np.uint64))
    assert np.all((witness.remainder >= 0) & (witness.remainder < 1 << shift))
    acc_field, out_field = rebuild(witness.bits, spec)
    assert np.array_equal(acc_field, F.to_field(acc)) and np.array_equal(out_field, F.to_field(witness.out))
    assert sum(witness.table(g).size for g in range(len(spec.groups))) == spec.padded_width * size


def test_decomposition_refuses_values_beyond_q_bits():
    with pytest.raises(ModelError, match=r"q_bits=3"):
        decompose(np.array([4 << 2]), Decomposition(2, 3, True))


def naive_accumulator(a, w, b, batch):
    """acc[i, o] = sum_k A[i, k] W[o, k] + b[o] [i < batch] on padded matrices, with Python ints."""
    rows, cols = a.shape[0], w.shape[0]
    return np.array([[sum(int(a[i, k]) * int(w[o, k]) for k in range(a.shape[1])) + (int(b[o]) if i < batch else 0)
                      for o in range(cols)] for i in range(rows)], dtype=np.int64)


@given(st.integers(0, 2**32 - 1), st.integers(1, 5), st.integers(1, 9), st.integers(1, 6))
def test_linear_proof_reduces_to_a_true_input_claim(seed, batch, n, m):
    rng = np.random.default_rng(seed)
    layer = QuantizedLayer(rng.integers(-99, 100, (m, n)), rng.integers(-999, 1000, m), 0, 0, 0, False)
    a = rng.integers(-50, 51, (batch, n))
    shape = LinearShape(batch, n, m)
    a_pad = pad_matrix(a, shape.batch_padded, shape.in_padded)
    w_pad = pad_matrix(layer.weight, shape.out_padded, shape.in_padded)
    b_pad = np.zeros(shape.out_padded, dtype=np.int64)
    b_pad[:m] = layer.bias
    acc = naive_accumulator(a_pad, w_pad, b_pad, batch)
    point = random_point(rng, int(np.log2(shape.out_padded * shape.batch_padded)))
    claim = Claim(point, mle_evaluate(F.to_field(acc.reshape(-1)), point))
    weight_table, bias_table = weight_tables(layer)
    a_table = padded_matrix(a, shape.batch_padded, shape.in_padded)
    proof, prover_claim, prover_weights = prove_linear(weight_table, bias_table, a_table, shape, claim, Transcript("t"))
    verifier_claim, weight_claims = verify_linear(shape, claim, proof, Transcript("t"), "test")
    assert F.ext_eq(verifier_claim.point, prover_claim.point)
    assert F.ext_eq(verifier_claim.value, mle_evaluate(a_table, verifier_claim.point))
    # the weight claims the caller must open are true evaluations of W and b
    for table, weight_claim in zip((weight_table, bias_table), weight_claims):
        assert F.ext_eq(mle_evaluate(table, weight_claim.point), weight_claim.value)
    wrong = Claim(point, F.ext_add(claim.value, F.ext_one()))
    with pytest.raises(ProofRejected):
        verify_linear(shape, wrong, proof, Transcript("t"), "t")


def _relu_instance(seed, shift, q_bits, relu, log_size):
    rng = np.random.default_rng(seed)
    spec = Decomposition(shift, q_bits, relu)
    limit = 1 << (q_bits - 1)
    acc = rng.integers(-limit << shift, limit << shift, 1 << log_size) // 2
    witness = decompose(acc, spec)
    point = random_point(rng, log_size)
    claim = Claim(point, mle_evaluate(F.to_field(witness.out), point))
    pairs = [commit(witness.table(g), CommitParams()) for g in range(len(spec.groups))]
    return spec, witness, point, claim, [c for c, _ in pairs], [w for _, w in pairs]


@given(st.integers(0, 2**32 - 1), st.integers(0, 8), st.integers(1, 12), st.booleans(), st.integers(1, 5))
def test_zkrelu_reduces_to_a_true_accumulator_claim(seed, shift, q_bits, relu, log_size):
    spec, witness, point, claim, bits_commitment, bits_witness = _relu_instance(seed, shift, q_bits, relu, log_size)
    acc_table = F.to_field(witness.acc)
    proof, prover_claim = prove_decomposition(witness, bits_witness, claim, Transcript("t"))
    verifier_claim = verify_decomposition(bits_commitment, spec, claim, proof, Transcript("t"), "test")
    assert F.ext_eq(verifier_claim.value, mle_evaluate(acc_table, verifier_claim.point))
    assert F.ext_eq(prover_claim.value, verifier_claim.value)


@pytest.mark.parametrize("relu", [True, False])
def test_zkrelu_rejects_a_wrong_output_claim(relu):
    spec, witness, point, claim, bits_commitment, bits_witness = _relu_instance(7, 4, 6, relu, 4)
    wrong = Claim(point, F.ext_add(claim.value, F.ext_one()))
    with cheating_sumcheck():
        proof, _ = prove_decomposition(witness, bits_witness, wrong, Transcript("t"))
    with pytest.raises(ProofRejected):
        verify_decomposition(bits_commitment, spec, wrong, proof, Transcript("t"), "test")


@pytest.mark.parametrize("width", range(1, 31))
def test_bit_groups_cover_the_width_with_powers_of_two(width):
    spec = Decomposition(width // 2, width - width // 2, True)
    groups = spec.groups
    assert 1 <= len(groups) <= 2 and groups[0][0] == 0
    assert all(count & (count - 1) == 0 for _, count in groups)
    assert all(start == prev_start + prev_count for (prev_start, prev_count), (start, _) in zip(groups, groups[1:]))
    assert width <= spec.padded_width <= padded(width, 1)
    assert spec.padded_width < 1.5 * width + 1


@given(k=st.integers(0, 10), fraction=st.floats(0, 1.2), seed=st.integers(0, 99), base=st.booleans())
def test_prefix_sum_of_eq_in_k_products_equals_the_tables_prefix(k, fraction, seed, base):
    """The O(k) prefix sum of eq (prover and verifier both call it) equals the eq table's first entries summed,
    for every count from 0 past 2^k, on extension and base-field points."""
    from proofs.layers.common import prefix_sum_of_eq, prefix_sum_of_eq_table

    point = F.random_elements(k, seed=seed) if base else F.ext_random((k,), seed=seed)
    count = int(fraction * (1 << k))
    assert np.array_equal(prefix_sum_of_eq(point, count), prefix_sum_of_eq_table(point, count))
