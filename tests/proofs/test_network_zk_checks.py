"""Hiding Basefold checks that the mutation runs of proofs/layers/network_zk.py and reusable.py found untested
(tests/mutation/survivors.md): the hiding Network verifier's dispatch to the Basefold verifier (`verify` 59: a
Basefold proof sent down the Ligero path, so an honest proof is refused) and the location its rejections carry
(64, 69); the reusable model copies' Basefold verifier (`verify_reusable` 17-25, `_verify_basefold`): an honest
bundle passes once and is cached, and each of its checks rejects on its own, named."""
import dataclasses

import numpy as np
import pytest

from proofs import basefold as B
from proofs import basefold_zk as BZ
from proofs.errors import ProofRejected
from proofs.layers import network_zk
from proofs.layers.network import Network, verify_network
from proofs.layers.reusable import Reusable, verify_reusable
from proofs.quantize import forward_int, quantize_fixed_point, quantize_input
from tests.proofs.cheating import tampered_agreements
from tests.proofs.rejection_helpers import rejected
from tests.proofs.test_network import float_mlp

PARAMS = BZ.HidingBasefoldParams(B.BasefoldParams(rate_inv=8, arity=4, final_vars=8))


@pytest.fixture(scope="module")
def basefold_case():
    model = quantize_fixed_point(*float_mlp(3, (16, 16, 4)), frac_bits=8)
    x = quantize_input(model, np.random.default_rng(4).uniform(-1, 1, (1, 16)))
    network = Network(model, zk=True, params=PARAMS, max_proofs=1)
    return model, network, x, network.prove(x)


def test_hiding_basefold_proof_goes_to_the_basefold_verifier(basefold_case):
    model, network, x, proof = basefold_case
    assert np.array_equal(verify_network(network.commitment, x, proof), forward_int(model, x))


def test_hiding_basefold_rejections_name_the_hiding_network_proof(basefold_case):
    _, network, x, proof = basefold_case
    none = dataclasses.replace(proof, relations=dataclasses.replace(proof.relations, commitments=()))
    rejected(lambda: verify_network(network.commitment, x, none), "0 proof commitments, expected 1",
             "MLP inference proof / hiding network proof")
    other = network.commitment.weights.copies[0]  # a hiding Basefold commitment of another shape
    assert other.num_vars != proof.relations.commitments[0].num_vars
    bad = dataclasses.replace(proof, relations=dataclasses.replace(proof.relations, commitments=(other,)))
    rejected(lambda: verify_network(network.commitment, x, bad),
             "the proof store's commitment does not have the statement's shape and parameters",
             "MLP inference proof / hiding network proof")


@pytest.fixture(scope="module")
def reusable_case():
    """A hiding Basefold model store in K = 2 copies with their agreement proof, its layout and parameters."""
    model = quantize_fixed_point(*float_mlp(3, (16, 16, 4)), frac_bits=8)
    commitment = Network(model, zk=True, params=PARAMS, max_proofs=2).commitment
    return network_zk.model_layout(commitment.layers), commitment.weights, network_zk.base_params(commitment)


def test_basefold_copies_verify_once_and_are_cached(reusable_case):
    layout, reusable, params = reusable_case
    fresh = Reusable(reusable.copies, reusable.agreement)
    verify_reusable(layout, fresh, params, "here")
    assert len(fresh._verified) == 1
    verify_reusable(layout, fresh, params, "here")  # cached: no second entry
    assert len(fresh._verified) == 1


def test_basefold_copy_checks_are_named(reusable_case, basefold_case):
    layout, reusable, params = reusable_case
    first, second = reusable.copies
    expected = dataclasses.replace(params, openings=2)
    mismatch = f"copy 1 does not match the statement (num_vars {first.num_vars}, {expected})"
    verify = verify_reusable
    rejected(lambda: verify(layout, Reusable((first, reusable.agreement[0]), reusable.agreement), params, "here"),
             mismatch, "here")  # another commitment's shape
    rejected(lambda: verify(layout, Reusable((first, first.inner), reusable.agreement), params, "here"),
             mismatch, "here")  # not a hiding Basefold commitment
    single = basefold_case[1].commitment.weights.copies  # the same model committed once
    assert single[0].params == params and single[0].num_vars == first.num_vars
    rejected(lambda: verify(layout, Reusable((first, single[0]), reusable.agreement), params, "here"),
             mismatch, "here")  # the right type and shape, one opening's parameters
    rejected(lambda: verify(layout, Reusable(single, reusable.agreement), params, "here"),
             "a single copy has no agreement proof", "here")
    verify(layout, Reusable(single, ()), params, "here")  # one copy, no agreement: nothing more to check
    for agreement in ((), reusable.agreement[1:]):
        rejected(lambda: verify(layout, Reusable(reusable.copies, agreement), params, "here"),
                 "the agreement proof does not start with its mask commitment", "here")
    masks = reusable.agreement[0]
    assert masks.params == params and single[0].num_vars != masks.num_vars
    for other in (first, single[0]):  # other parameters (2 openings); the statement's, another shape
        rejected(lambda: verify(layout, Reusable(reusable.copies, (other, *reusable.agreement[1:])), params, "here"),
                 "the agreement's mask commitment does not have the statement's shape", "here")


def test_basefold_agreement_items_are_each_checked(reusable_case):
    layout, reusable, params = reusable_case
    masks, *rest = reusable.agreement
    assert len(rest) == 3  # the items after the mask commitment
    for agreement in tampered_agreements(reusable.agreement):
        with pytest.raises(ProofRejected):
            verify_reusable(layout, Reusable(reusable.copies, agreement), params, "here")
    with pytest.raises(ProofRejected, match="1 unused proof items"):
        verify_reusable(layout, Reusable(reusable.copies, (*reusable.agreement, rest[0])), params, "here")


def test_basefold_statement_openings_do_not_matter(reusable_case):
    """Basefold copies' openings follow from their count alone (:func:`copy_params`), the agreement's masks are
    always one opening's: the statement's parameters with 2 openings (the copies' own) verify the same bundle."""
    layout, reusable, params = reusable_case
    verify_reusable(layout, Reusable(reusable.copies, reusable.agreement), reusable.params, "here")
    assert reusable.params == dataclasses.replace(params, openings=2)


@pytest.mark.parametrize("openings", [1, 2])
def test_caller_openings_do_not_break_a_single_copy_network(openings):
    """Network(zk=True, params=HidingParams(openings=k), max_proofs=1): the statement's parameters have one opening
    per store whatever the caller passed (the copies get theirs from copy_params), so the network's own proof
    verifies (with openings=2 it was refused: "copy 0 does not match the statement")."""
    from proofs.zk import HidingParams
    model = quantize_fixed_point(*float_mlp(5, (8, 8, 4)), frac_bits=8)
    x = quantize_input(model, np.random.default_rng(6).uniform(-1, 1, (1, 8)))
    network = Network(model, zk=True, params=HidingParams(openings=openings), max_proofs=1)
    assert network.commitment.weights.params.openings == 1
    assert np.array_equal(verify_network(network.commitment, x, network.prove(x)), forward_int(model, x))


def test_a_single_copy_made_for_two_openings_is_refused():
    """A hand-made statement whose one model copy was committed for 2 openings (the protocol opens a single copy
    once, at one opening's parameters): the verifier holds the copy to the one-opening statement (`verify` 48, the
    model copies checked with the parameters' openings as committed, accepted it)."""
    from proofs.layers.network import ModelCommitment
    from proofs.zk import HidingParams
    model = quantize_fixed_point(*float_mlp(7, (8, 8, 4)), frac_bits=8)
    x = quantize_input(model, np.random.default_rng(8).uniform(-1, 1, (1, 8)))
    network = Network(model, zk=True, max_proofs=1)
    layers = network.commitment.layers
    weights, witness = network_zk.commit_model(model, layers, HidingParams(openings=2), 1)
    c = network.commitment
    network.commitment = ModelCommitment(c.scheme, c.input_frac, c.input_bound, c.error_bound, layers, weights)
    network._weights_witness = witness
    proof = network.prove(x)
    with pytest.raises(ProofRejected, match="does not match the statement"):
        verify_network(network.commitment, x, proof)
