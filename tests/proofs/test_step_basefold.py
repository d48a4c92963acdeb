"""Zero-knowledge training-step proofs over hiding Basefold stores (proofs.layers.step_basefold): honest proof
verifies and round-trips, one batched opening, every stated value masked, tampering rejected; against the
Ligero step proof of the same trace it is an order of magnitude smaller."""
import dataclasses

import numpy as np
import pytest

from proofs import basefold_zk as BZ
from proofs import field as F
from proofs.basefold import BasefoldProof
from proofs.errors import ProofError, ProofRejected
from proofs.layers import network_zk
from proofs.layers import step_basefold as SB
from proofs.layers.basefold_channel import MaskedSumcheckProof
from proofs.layers.proof_items import TrainingProof
from tests.proofs.test_zk_training import SPEC, _trace


@pytest.fixture(scope="module")
def step():
    trace, _ = _trace()
    committed = SB.commit_step(trace, network_zk.basefold_params(), max_proofs=2)
    proof = SB.prove_step(trace, committed)
    return trace, committed, proof


def test_honest_step_proof_verifies_in_one_batch_opening(step):
    trace, committed, proof = step
    SB.verify_step(SPEC, committed, proof)
    SB.verify_step(SPEC, committed, TrainingProof.from_bytes(proof.to_bytes()))
    assert sum(isinstance(item, BasefoldProof) for item in proof.items) == 1
    assert proof.num_bytes < 400 * 1024  # the Ligero step proof of this trace: about 5.6 MB


def test_every_stated_value_is_masked_and_copies_are_spent(step):
    trace, committed, proof = step
    channel_values = [item for item in proof.items if isinstance(item, np.ndarray)]
    assert channel_values and all(F.is_canonical(v) for v in channel_values)
    second = SB.prove_step(trace, committed)  # the second copy: every stated value differs
    for a, b in zip(proof.items, second.items):
        if isinstance(a, np.ndarray):
            assert not np.array_equal(a, b)
    with pytest.raises(ProofError):
        SB.prove_step(trace, committed)


def test_tampered_step_proofs_are_rejected(step):
    _, committed, proof = step
    items = list(proof.items)
    for i, item in enumerate(items):
        if isinstance(item, np.ndarray):
            bad = item.copy()
            bad.reshape(-1)[0] = (bad.reshape(-1)[0] + 1) % F.P
        elif isinstance(item, MaskedSumcheckProof):
            bad = dataclasses.replace(item, mask_sum=(item.mask_sum + np.array([1, 0, 0, 0], dtype=np.uint64)) % F.P)
        else:
            bad = dataclasses.replace(item, final=(item.final + 1) % F.P)
        with pytest.raises(ProofRejected):
            SB.verify_step(SPEC, committed, dataclasses.replace(proof, items=tuple(items[:i] + [bad] + items[i + 1:])))
    with pytest.raises(ProofRejected):
        SB.verify_step(SPEC, committed, dataclasses.replace(proof, copy=5))
    with pytest.raises(ProofRejected):
        SB.verify_step(SPEC, committed, dataclasses.replace(proof, commitments=proof.commitments[:-1]))


# ------------------------------------------------------------------ the "tail" layout (training_params)
@pytest.fixture(scope="module")
def tail_step():
    trace, _ = _trace()
    committed = SB.commit_step(trace, SB.training_params(), max_proofs=2)
    return trace, committed, SB.prove_step(trace, committed)


def test_tail_layout_step_proof_verifies_and_every_item_is_checked(tail_step):
    _, committed, proof = tail_step
    SB.verify_step(SPEC, committed, proof)
    SB.verify_step(SPEC, committed, TrainingProof.from_bytes(proof.to_bytes()))
    batches = [item for item in proof.items if isinstance(item, BZ.MaskedBatchProof)]
    assert len(batches) == 1 and not any(isinstance(item, BasefoldProof) for item in proof.items)
    items = list(proof.items)
    for i, item in enumerate(items):
        if isinstance(item, np.ndarray):
            bad = item.copy()
            bad.reshape(-1)[0] = (bad.reshape(-1)[0] + 1) % F.P
        elif isinstance(item, BZ.MaskedBatchProof):
            bad = dataclasses.replace(item, evals=(item.evals + np.uint64(1)) % F.P)
        else:
            bad = dataclasses.replace(item, mask_sum=(item.mask_sum + np.array([1, 0, 0, 0], dtype=np.uint64)) % F.P)
        with pytest.raises(ProofRejected):
            SB.verify_step(SPEC, committed, dataclasses.replace(proof, items=tuple(items[:i] + [bad] + items[i + 1:])))


def test_tail_and_slot_statements_do_not_mix(tail_step, step):
    _, tail_committed, tail_proof = tail_step
    _, slot_committed, _ = step
    with pytest.raises(ProofRejected):
        SB.verify_step(SPEC, slot_committed, tail_proof)


@pytest.mark.slow
def test_zero_knowledge_training_step_784_128_10_is_under_1_mb():
    """Issue 17's case (benchmarks/proofs_training.py): one SGD step of 784->128->10 at batch 64, zero knowledge."""
    from benchmarks.proofs_training import CASES, make_step
    from proofs.layers import training as T
    weights, x, y, spec = make_step(CASES["t1 784-128-10"])
    trace = T.training_trace(weights, x, y, spec)
    committed = SB.commit_step(trace, SB.training_params(), max_proofs=1)
    proof = SB.prove_step(trace, committed)
    SB.verify_step(spec, committed, TrainingProof.from_bytes(proof.to_bytes()))
    assert proof.num_bytes <= 1_000_000


def test_the_package_front_door_picks_the_commitment():
    """proofs.commit_step(params=basefold_training_params()) proves over Basefold, the default over Ligero; each
    proof verifies against its own statement only."""
    import proofs
    trace, _ = _trace()
    basefold = proofs.commit_step(trace, params=proofs.basefold_training_params())
    ligero = proofs.commit_step(trace, max_proofs=1)
    proof_b = proofs.prove_training_step(trace, basefold)
    proof_l = proofs.prove_training_step(trace, ligero)
    proofs.verify_training_step(SPEC, basefold, proof_b)
    proofs.verify_training_step(SPEC, ligero, proof_l)
    assert any(isinstance(item, BZ.MaskedBatchProof) for item in proof_b.items)
    for committed, proof in ((basefold, proof_l), (ligero, proof_b)):
        with pytest.raises(ProofRejected):
            proofs.verify_training_step(SPEC, committed, proof)
    with pytest.raises(ProofError):
        proofs.commit_step(trace, zk=False, params=proofs.basefold_training_params())


def test_a_batch_below_the_verifiers_bits_is_refused_before_proving():
    """Parameters whose one batch opening gives the verifier < 100 proven bits (an honest proof it would reject)
    are refused by the prover, naming the bits, before the relations run (a 2^18-row codeword store of the
    8-layer step gives 99.6; here few queries)."""
    from proofs import basefold as B
    trace, _ = _trace()
    weak = BZ.HidingBasefoldParams(B.BasefoldParams(rate_inv=2, num_queries=100, arity=3, final_vars=10,
                                                    max_log_codeword=18), 1, "tail")
    committed = SB.commit_step(trace, weak)
    with pytest.raises(ProofError, match=r"prove_step: one batch opening .* gives \d+\.\d proven bits, below the 100"):
        SB.prove_step(trace, committed)
    strong = SB.commit_step(trace, SB.training_params())
    assert BZ.verified_bits([c.copies[0] for _, c, _ in SB.as_steps(strong).keyed()]) >= 100
