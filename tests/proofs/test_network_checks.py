"""Network verifier checks that the mutation run of proofs/layers/network.py found untested
(tests/mutation/survivors.md).

The Basefold `conjectured=True` refusal is the verifier's first decision on the commitment, taken before any
proof work: a proof that is also wrong elsewhere (a changed output entry, inside the declared range, caught by the
layer sumchecks) is refused *as conjectured*, at the model commitment (kills `_verify` 8: the early check skipped,
so the tampering is found first; 11, 14, 15, 16: the refusal's location changed)."""
import dataclasses
from types import SimpleNamespace

import numpy as np
import pytest

from proofs.basefold import BasefoldParams
from proofs.errors import ProofRejected
from proofs.layers.network import verify_network
from proofs.layers.network_zk import default_params
from proofs.zk import HidingCommitment
from tests.proofs.rejection_helpers import proved_mlp, with_relations


@pytest.fixture(scope="module")
def conjectured():
    return proved_mlp(2, zk=False, params=BasefoldParams(conjectured=True))


def _tampered(network, proof):
    """The proof with one output entry moved by 1 inside the last layer's declared range."""
    lo, hi = network.commitment.layers[-1].output_range()
    output = proof.output.copy()
    output[0, 0] += 1 if output[0, 0] < hi else -1
    assert lo <= output[0, 0] <= hi
    return dataclasses.replace(proof, output=output)


def test_conjectured_refusal_comes_first_and_names_the_model_commitment(conjectured):
    network, x, proof = conjectured
    bad = _tampered(network, proof)
    with pytest.raises(ProofRejected) as tampered:  # opted in: the tampering itself is caught, in a layer
        verify_network(network.commitment, x, bad, allow_conjectured=True)
    assert tampered.value.where.startswith("MLP inference proof / layer")
    for candidate in (proof, bad):  # not opted in: refused as conjectured before any proof work
        with pytest.raises(ProofRejected, match="did not allow conjectured soundness") as refused:
            verify_network(network.commitment, x, candidate)
        assert refused.value.where == "MLP inference proof / model commitment"


# ------------------------------------------------------------------ the hiding Network verifier (network_zk.verify)
@pytest.fixture(scope="module")
def hiding():
    return proved_mlp(1, zk=True, max_proofs=1, params=default_params())  # hiding Ligero


def test_hiding_relations_must_be_a_training_proof_even_with_honest_fields(hiding):
    """An object carrying an honest proof's mode, commitments and items is not a TrainingProof: refused by
    the type check (kills network_zk.verify 10: `and` -> `or`, under which it verified)."""
    network, x, proof = hiding
    assert np.array_equal(verify_network(network.commitment, x, proof), proof.output)
    r = proof.relations
    fake = SimpleNamespace(mode=r.mode, commitments=r.commitments, items=r.items, copy=r.copy)
    with pytest.raises(ProofRejected, match="needs a HidingNetworkProof"):
        verify_network(network.commitment, x, dataclasses.replace(proof, relations=fake))


def test_hiding_copy_index_is_checked_at_the_top(hiding):
    """copy = the number of model copies is refused by the copy check, naming it (kills 58: `<` -> `<=`)."""
    network, x, proof = hiding
    with pytest.raises(ProofRejected, match="copy 1 of a model committed 1 times"):
        verify_network(network.commitment, x, with_relations(proof, copy=len(network.commitment.weights)))


@pytest.mark.parametrize("change", ["type", "num_vars", "log_rows", "params"])
def test_hiding_each_store_commitment_condition_is_checked_on_its_own(hiding, change):
    """One store commitment wrong in one respect only (type, size, row split, parameters) is refused by the
    shape check (kills 107, 108, 109: an `and` of the four conditions turned into `or`)."""
    network, x, proof = hiding
    c = proof.relations.commitments[0]
    bad = {"type": SimpleNamespace(**c.__dict__),
           "num_vars": dataclasses.replace(c, num_vars=c.num_vars + 1),
           "log_rows": dataclasses.replace(c, log_rows=c.log_rows + 1),
           "params": dataclasses.replace(c, params=dataclasses.replace(c.params, rate_inv=8))}[change]
    commitments = (bad,) + tuple(proof.relations.commitments[1:])
    with pytest.raises(ProofRejected, match="does not have the statement's shape and parameters"):
        verify_network(network.commitment, x, with_relations(proof, commitments=commitments))


def test_hiding_relation_masks_commitment_parameters_are_checked_with_its_shape_kept(hiding):
    """The relations' mask commitment with other parameters (its variables and rows kept) is refused (the shape
    and the parameters are checked together: either alone would let the other through)."""
    network, x, proof = hiding
    items = list(proof.relations.items)
    k = next(i for i, item in enumerate(items) if isinstance(item, HidingCommitment))
    items[k] = dataclasses.replace(items[k], params=dataclasses.replace(items[k].params, rate_inv=8))
    with pytest.raises(ProofRejected, match="the masks' commitment has the shape"):
        verify_network(network.commitment, x, with_relations(proof, items=tuple(items)))
    items[k] = dataclasses.replace(proof.relations.items[k], log_rows=proof.relations.items[k].log_rows + 1)
    with pytest.raises(ProofRejected, match="the masks' commitment has the shape"):
        verify_network(network.commitment, x, with_relations(proof, items=tuple(items)))


@pytest.mark.parametrize("name", ["mask_sum", "mask_eval"])
def test_hiding_relation_mask_values_are_bound_to_the_masks_commitment(hiding, name):
    """A masked relation sumcheck whose mask sum or mask value is changed (the prover controls both) is refused:
    the sum moves the running claim, the value must open from the one commitment of every relation's mask."""
    from proofs.basefold_zk import MaskedSumcheckProof
    from tests.proofs.cheating import bumped
    network, x, proof = hiding
    items = list(proof.relations.items)
    k = next(i for i, item in enumerate(items) if isinstance(item, MaskedSumcheckProof))
    items[k] = dataclasses.replace(items[k], **{name: bumped(getattr(items[k], name))})
    with pytest.raises(ProofRejected):
        verify_network(network.commitment, x, with_relations(proof, items=tuple(items)))
