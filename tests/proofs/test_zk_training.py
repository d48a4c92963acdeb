"""Zero knowledge of the training and inference proofs: every stated value is masked, the sumcheck part is
simulatable, and no witness bytes appear (proofs.layers.step_proof, proofs.relations)."""
import dataclasses

import numpy as np
import pytest

from proofs import ProofRejected
from proofs import field as F
from proofs.layers import step_proof as S
from proofs.layers import training as T
from proofs.relations import mask_rank, simulate_relation
from proofs.sumcheck import SumcheckVerifier

SPEC = T.TrainingSpec((6, 5, 3), batch=3, act_bits=6, weight_bits=6, shift=4, grad_shift=3, grad_bits=8,
                      lr_shift=2, update_bits=8)


def _trace(seed=1, spec=SPEC):
    rng = np.random.default_rng(seed)
    weights = [rng.integers(-8, 8, size=(spec.sizes[i + 1], spec.sizes[i])) for i in range(spec.num_layers)]
    x = rng.integers(-16, 16, size=(spec.batch, spec.sizes[0]))
    y = rng.integers(-10, 10, size=(spec.batch, spec.sizes[-1]))
    return T.training_trace(weights, x, y, spec), (weights, x, y)


STEPS_SPEC = T.TrainingSpec((6, 5, 3), batch=3, act_bits=8, weight_bits=8, shift=6, grad_shift=5, grad_bits=12,
                            lr_shift=5, update_bits=8)


def _two_steps():
    first, (weights, x, y) = _trace(4, STEPS_SPEC)
    second = T.training_trace(first.new_weights_unpadded(), x[::-1].copy(), y, STEPS_SPEC)
    return [first, second]


def _assert_all_masked(channel):
    """On every store, the stated values' mask functionals are independent: the values are jointly uniform."""
    for key, claims in channel.claims.items():
        views = [view for view, _ in claims]
        assert mask_rank(channel.layouts[key], views) == len(views), key


@pytest.mark.parametrize("mode", ["aggregate", "layer"])
def test_every_value_a_training_proof_states_is_masked(mode):
    traces = _two_steps()
    committed = S.commit_steps(traces, zk=True)
    proof = S.prove_training_steps(traces, committed, zk=True, mode=mode)
    channel = S._verify_training(STEPS_SPEC, committed, proof)
    assert sum(len(c) for c in channel.claims.values()) > 20
    _assert_all_masked(channel)


@pytest.mark.parametrize("private_input", [pytest.param(True, marks=pytest.mark.slow), False])
def test_every_value_an_inference_proof_states_is_masked(private_input):
    trace = T.forward_trace(*_trace(3)[1][:2], SPEC)
    committed = S.commit_forward(trace, zk=True, private_input=private_input)
    proof = S.prove_forward(trace, committed, zk=True)
    public = None if private_input else _trace(3)[1][1]
    channel = S._verify_forward(SPEC, committed, S.forward_output(trace), proof, public)
    _assert_all_masked(channel)


def test_the_rank_check_sees_an_unmasked_value():
    """The check can fail: a value stated twice, or a view with every variable contracted (no mask), adds no rank."""
    trace, _ = _trace(4)
    committed = S.commit_step(trace, zk=True)
    channel = S._verify_training(SPEC, S.as_steps(committed), S.prove_training_step(trace, committed, zk=True))
    key, claims = next((k, c) for k, c in channel.claims.items() if len(c) >= 2)
    views = [view for view, _ in claims]
    assert mask_rank(channel.layouts[key], views + [views[0]]) == len(views)
    unmasked = dataclasses.replace(views[0], active=(0, 0))
    assert mask_rank(channel.layouts[key], views[1:] + [unmasked]) == len(views) - 1


def test_the_sumcheck_part_is_simulated_without_the_witness():
    """Every relation of a real proof, simulated from its public description alone, verifies."""
    trace, _ = _trace(5)
    committed = S.commit_step(trace, zk=True)
    channel = S._verify_training(SPEC, S.as_steps(committed), S.prove_training_step(trace, committed, zk=True))
    assert len(channel.relations) > 10
    for k, (label, relation) in enumerate(channel.relations):
        sim, values = simulate_relation(relation, channel.layouts, seed=k)
        degree = relation.degree(channel.layouts)
        verifier = SumcheckVerifier(F.ext_add(relation.claim, F.ext_mul(sim.rho, sim.mask_sum)),
                                    relation.num_vars(), degree)
        for message, challenge in zip(sim.round_messages, sim.challenges):
            verifier.check_round(message)
            verifier.bind(challenge)
        expected = F.ext_sub(verifier.subclaim().expected_value, F.ext_mul(sim.rho, sim.mask_eval))
        from proofs.relations import expected_summand
        assert F.ext_eq(expected, expected_summand(relation, sim.challenges, values)), label


def _words(table) -> list:
    data = np.asarray(table, dtype=np.uint64).astype("<u4").tobytes()
    return [data[i:i + 8] for i in range(0, len(data) - 7, 4)]


def test_inference_proof_bytes_hold_no_weight_or_input_pair():
    spec = T.TrainingSpec((8, 4, 4), batch=4, act_bits=8, weight_bits=16, shift=17)
    rng = np.random.default_rng(6)
    weights = [rng.integers(1 << 12, 1 << 15, size=(spec.sizes[i + 1], spec.sizes[i])) for i in range(2)]
    x = rng.integers(1, 100, (4, 8))
    trace = T.forward_trace(weights, x, spec)
    committed = S.commit_forward(trace, zk=True, private_input=True)
    data = S.prove_forward(trace, committed, zk=True).to_bytes()
    for table in [F.to_field(w.reshape(-1)) for w in weights] + [F.to_field(x.reshape(-1))]:
        assert not any(p in data for p in _words(table))


def test_same_witness_gives_fresh_values():
    trace, _ = _trace(7)
    committed = S.commit_step(trace, zk=True)
    first, second = (S.prove_training_step(trace, committed, zk=True) for _ in range(2))
    values = [[i for i in p.items if isinstance(i, np.ndarray)] for p in (first, second)]
    assert [v.shape for v in values[0]] == [v.shape for v in values[1]]
    assert all(not np.array_equal(a, b) for a, b in zip(*values))


@pytest.mark.parametrize("zk", [False, True])
def test_a_decomposition_split_into_16_plus_1_planes_is_bit_checked(zk):
    """17-bit updates are committed as a 16-plane and a 1-plane slot: both are bit-checked, and a proof verifies."""
    spec = T.TrainingSpec((6, 5, 3), batch=3, act_bits=6, weight_bits=6, shift=4, grad_shift=3, grad_bits=8,
                          lr_shift=1, update_bits=16)
    assert spec.update_spec().groups == ((0, 16), (16, 1))
    trace, _ = _trace(1, spec)
    committed = S.commit_step(trace, zk=zk)
    channel = S._verify_training(spec, S.as_steps(committed), S.prove_training_step(trace, committed, zk=zk))
    (bits_label, bits), = [(label, r) for label, r in channel.relations if label.endswith("bits")]
    checked = {term.factor.name for term in bits.terms}
    assert {"t0.upd0", "t0.upd0.g1", "t0.upd1.g1"} <= checked
    if zk:
        _assert_all_masked(channel)


@pytest.mark.parametrize("zk", [False, True])
def test_corrupted_proof_bytes_are_only_ever_rejected(zk):
    trace, _ = _trace(8)
    committed = S.commit_step(trace, zk=zk)
    data = S.prove_training_step(trace, committed, zk=zk).to_bytes()
    rng = np.random.default_rng(9)
    positions = list(rng.choice(len(data), size=40, replace=False)) + list(range(0, 40, 3))
    for position in positions:
        corrupted = bytearray(data)
        corrupted[position] ^= 1 + int(rng.integers(0, 255))
        with pytest.raises(ProofRejected):
            S.verify_training_step(SPEC, committed, S.TrainingProof.from_bytes(bytes(corrupted)))
    for cut in (0, 9, len(data) // 3, len(data) - 1):
        with pytest.raises(ProofRejected):
            S.verify_training_step(SPEC, committed, S.TrainingProof.from_bytes(data[:cut]))
    if zk:  # the same tensors committed again: other masks, another statement
        with pytest.raises(ProofRejected):
            S.verify_training_step(SPEC, S.commit_step(trace, zk=True), S.TrainingProof.from_bytes(data))


@pytest.mark.parametrize("name", ["rngw1", "rngx", "rngy"])
def test_inputs_must_equal_their_range_bits(monkeypatch, name):
    """W, X and Y are range-checked: range bits that do not rebuild the committed tensor are rejected."""
    trace, _ = _trace(10)
    real = S.proof_tables

    def forged(*args, **kwargs):
        tables = real(*args, **kwargs)
        key = f"t0.{name}"
        tables[key] = tables[key].copy()
        tables[key][0] ^= np.uint64(1)  # still a bit, another value
        return tables

    monkeypatch.setattr(S, "proof_tables", forged)
    committed = S.commit_step(trace, zk=True)
    with pytest.raises(ProofRejected, match="range"):
        S.verify_training_step(SPEC, committed, S.prove_training_step(trace, committed, zk=True))


def test_inference_refuses_a_public_input_out_of_range():
    trace = T.forward_trace(*_trace(3)[1][:2], SPEC)
    committed = S.commit_forward(trace, zk=True, private_input=False)
    proof = S.prove_forward(trace, committed, zk=True)
    x = _trace(3)[1][1].copy()
    S.verify_forward(SPEC, committed, S.forward_output(trace), proof, public_input=x)
    x[0, 0] = 1 << SPEC.act_bits
    with pytest.raises(ProofRejected, match="act_bits"):
        S.verify_forward(SPEC, committed, S.forward_output(trace), proof, public_input=x)


def test_soundness_is_stated_in_bits():
    one = S.soundness_bits(SPEC)
    assert 100 <= one < 124  # every opening >= 100 bits, each relation ~ n d / p^4
    assert S.soundness_bits(SPEC, steps=3) < one  # more relations and stores, a larger union bound
    assert S.soundness_bits(SPEC, mode="layer") < one  # one opening per layer instead of one
    assert S.soundness_bits(SPEC, forward_only=True, max_proofs=S.DEFAULT_STEP_PROOFS) > one
    # a commitment made for more proofs has more copies to agree: a larger union bound, still >= 100 bits
    assert 100 <= S.soundness_bits(SPEC, forward_only=True, max_proofs=256) < \
        S.soundness_bits(SPEC, forward_only=True, max_proofs=8)
