"""Hiding Network verifier checks that the mutation run of proofs/layers/network_zk.py found untested
(tests/mutation/survivors.md): the dispatch to the hiding Basefold verifier (`verify` 59: a Basefold proof sent
down the Ligero path, so an honest proof is refused) and the location its rejections carry (64, 69)."""
import dataclasses

import numpy as np
import pytest

from proofs import basefold as B
from proofs import basefold_zk as BZ
from proofs.layers.network import Network, verify_network
from proofs.quantize import forward_int, quantize_fixed_point, quantize_input
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
             "hiding network proof")
    other = network.commitment.weights.copies[0]  # a hiding Basefold commitment of another shape
    assert other.num_vars != proof.relations.commitments[0].num_vars
    bad = dataclasses.replace(proof, relations=dataclasses.replace(proof.relations, commitments=(other,)))
    rejected(lambda: verify_network(network.commitment, x, bad),
             "the proof store's commitment does not have the statement's shape and parameters", "hiding network proof")
