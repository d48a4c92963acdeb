"""Issue 11, item 2: many zero-knowledge inference proofs against one model commitment stay zero knowledge.

The audit's attack: every proof against one committed store states fresh linear functionals of the same
weights and the same masks, so after about |W| + n_e proofs the system is solved for W. With reusable
commitments (proofs.layers.reusable) each proof uses its own hiding copy; a copy's stated values (its one
proof's and its agreement value) have independent mask functionals, so for ANY weights there are masks that
explain every value stated by every proof: the values leave the weights undetermined.
"""
import dataclasses

import numpy as np
import pytest

from proofs import ProofError, ProofRejected
from proofs.layers import reusable as R
from proofs.layers import step_proof as S
from proofs.layers import training as T
from proofs.relations import mask_rank

SPEC = T.TrainingSpec((8, 8, 4), batch=2, act_bits=6, weight_bits=6, shift=4, grad_shift=3, grad_bits=8,
                      lr_shift=2, update_bits=8)


def _forward(seed=1):
    rng = np.random.default_rng(seed)
    weights = [rng.integers(-8, 8, size=(SPEC.sizes[i + 1], SPEC.sizes[i])) for i in range(SPEC.num_layers)]
    x = rng.integers(-16, 16, size=(SPEC.batch, SPEC.sizes[0]))
    return T.forward_trace(weights, x, SPEC)


def _weight_claims(committed, trace, proofs):
    """(copy, views) of every value stated on the weights, by the proofs and by the agreement proof."""
    per_copy = {}
    for proof in proofs:
        channel = S._verify_forward(SPEC, committed, S.forward_output(trace), proof, trace.x[:SPEC.batch, :SPEC.sizes[0]])
        per_copy.setdefault(proof.copy, []).extend(view for view, _ in channel.claims["w0"])
    return per_copy


def _check_undetermined(committed, trace, proofs, witness):
    layout = S.weight_layout(SPEC, True)
    per_copy = _weight_claims(committed, trace, proofs)
    for copy, views in per_copy.items():
        views = list(witness.agreement_views[copy]) + views
        assert mask_rank(layout, views) == len(views), copy
    return per_copy, layout


def test_many_proofs_against_one_commitment_leave_the_weights_undetermined():
    trace = _forward(2)
    proofs_made = 12
    committed = S.commit_forward(trace, zk=True, private_input=False, max_proofs=proofs_made)
    witness = committed.witnesses["w0"]
    proofs = [S.prove_forward(trace, committed, zk=True) for _ in range(proofs_made)]
    assert sorted(p.copy for p in proofs) == list(range(proofs_made))  # each proof its own copy
    per_copy, layout = _check_undetermined(committed, trace, proofs, witness)
    stated = sum(len(v) for v in per_copy.values())
    # the negative control: had every proof used one store (the audited design), its masks could not cover
    # all these values: more values than mask dimensions, so the rank falls short and W is solvable
    all_views = [v for views in per_copy.values() for v in views]
    mask_dims = sum(s.mask_count // 4 for s in layout.slots)
    assert stated > mask_dims
    assert mask_rank(layout, all_views) < len(all_views)
    with pytest.raises(ProofError, match="max_proofs=12"):
        S.prove_forward(trace, committed, zk=True)
    assert committed.proofs_left() == 0


@pytest.mark.slow
def test_hundreds_of_proofs_against_one_commitment_leave_the_weights_undetermined():
    trace = _forward(3)
    committed = S.commit_forward(trace, zk=True, private_input=False, max_proofs=200)
    proofs = [S.prove_forward(trace, committed, zk=True) for _ in range(200)]
    _check_undetermined(committed, trace, proofs, committed.witnesses["w0"])


def test_every_proof_of_a_reusable_commitment_verifies_and_names_its_copy():
    trace = _forward(4)
    committed = S.commit_forward(trace, zk=True, private_input=True, max_proofs=3)
    output = S.forward_output(trace)
    proofs = [S.prove_forward(trace, committed, zk=True) for _ in range(3)]
    for proof in proofs:
        S.verify_forward(SPEC, committed, output, proof)
        again = S.TrainingProof.from_bytes(proof.to_bytes())
        assert again.copy == proof.copy
        for other in {0, 1, 2} - {proof.copy}:  # the same proof claimed for another copy
            with pytest.raises(ProofRejected):
                S.verify_forward(SPEC, committed, output, dataclasses.replace(proof, copy=other))
        with pytest.raises(ProofRejected):
            S.verify_forward(SPEC, committed, output, dataclasses.replace(proof, copy=7))


def test_reusable_commitment_bytes_round_trip_and_reject_garbage():
    trace = _forward(5)
    committed = S.commit_forward(trace, zk=True, private_input=False, max_proofs=2)
    proof = S.prove_forward(trace, committed, zk=True)
    data = committed.weights.to_bytes()
    public = S.CommittedModel(R.Reusable.from_bytes(data))
    S.verify_forward(SPEC, public, S.forward_output(trace), proof, trace.x[:SPEC.batch, :SPEC.sizes[0]])
    assert public.weights.root == committed.weights.root
    # byte 8 flipped, never set: a set byte equal to the original (1 in 256 runs) is the genuine record
    for bad in (data[:-1], data[:40], b"", data[:8] + bytes([data[8] ^ 0x09]) + data[9:]):
        with pytest.raises(ProofRejected):
            R.Reusable.from_bytes(bad)


def test_copies_that_disagree_are_rejected(monkeypatch):
    """A committer whose second copy holds other weights (a consistent cheater: honest agreement prover)."""
    trace = _forward(6)
    real = R.commit_store
    calls = []

    def cheating_commit_store(layout, tables, params, **kwargs):
        calls.append(1)
        if len(calls) == 2:  # copy 1: one weight changed, in the padding or not
            tables = dict(tables)
            changed = tables["W0"].copy()
            changed[3] = (changed[3] + 1) % (2**31 - 2**27 + 1)
            tables["W0"] = changed
        return real(layout, tables, params, **kwargs)

    monkeypatch.setattr(R, "commit_store", cheating_commit_store)
    committed = S.commit_forward(trace, zk=True, private_input=False, max_proofs=3)
    monkeypatch.setattr(R, "commit_store", real)
    proof = S.prove_forward(trace, committed, zk=True)
    with pytest.raises(ProofRejected):
        S.verify_forward(SPEC, S.CommittedModel(R.Reusable.from_bytes(committed.weights.to_bytes())),
                         S.forward_output(trace), proof, trace.x[:SPEC.batch, :SPEC.sizes[0]])


def test_a_copy_is_committed_for_two_openings():
    """Each copy is opened twice (agreement, its proof): its rows carry a random tail of 2 q coefficients, so
    the columns both openings reveal (at most 2 q positions) are uniform."""
    trace = _forward(7)
    committed = S.commit_forward(trace, zk=True, private_input=False, max_proofs=2)
    for copy in committed.weights.copies:
        assert copy.params.openings == 2 and copy.tail == 2 * copy.num_queries


def test_without_zk_one_plain_commitment_serves_any_number_of_proofs():
    trace = _forward(8)
    committed = S.commit_forward(trace, zk=False, private_input=False)
    assert len(committed.weights) == 1
    for _ in range(3):
        S.verify_forward(SPEC, committed, S.forward_output(trace), S.prove_forward(trace, committed, zk=False),
                         trace.x[:SPEC.batch, :SPEC.sizes[0]])
