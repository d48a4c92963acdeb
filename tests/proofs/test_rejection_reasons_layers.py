"""Each check of the layer verifiers says which check rejected, and where: zkReLU (proofs/layers/relu.py), the
plain and hiding Network verifiers (network.py, network_zk.py), the reusable commitments (reusable.py) and the
training proof's item channel (step_relations.py). Inputs are chosen so that only the named check refuses them
(the consistent cheater passes every sumcheck round; a stated input value is moved with the weight value so that
the layer's own product check still holds)."""
import dataclasses
import re

import numpy as np
import pytest

from proofs import field as F
from proofs.commit import CommitParams, commit
from proofs.layers.common import Claim
from proofs.layers.network import Network, verify_network
from proofs.layers.network_zk import base_params, default_params
from proofs.layers.relu import prove_decomposition
from proofs.layers.reusable import Reusable, copy_params, verify_reusable
from proofs.quantize import quantize_fixed_point, quantize_input
from proofs.sumcheck import ROUND_SUM_REASON
from proofs.transcript import Transcript
from proofs.zk import HidingCommitment

from .cheating import consistent_cheating
from .rejection_helpers import proved_mlp, rejected, with_relations
from .test_network import float_mlp
from .test_verifier_checks import _relu_case
from .test_verifier_checks_more import _relu_proof, _verify, reusable_case, training_case  # noqa: F401 (fixtures)

ONE = F.ext_one()
MLP = "MLP inference proof / "  # every MLP verifier rejection begins with its proof kind


# ----------------------------------------------------------------------------------------------- zkReLU
@pytest.fixture(scope="module", params=[True, False], ids=["relu", "requant"])
def relu_proof(request):
    return _relu_proof(request.param)


def _relu_rejects(case, reason, **changes):
    spec, claim, commitments, proof = case
    rejected(lambda: _verify(spec, claim, commitments, dataclasses.replace(proof, **changes)), reason, "test")


@pytest.mark.parametrize("name", ["sign_eval", "shifted_eval", "acc_eval"])
def test_zkrelu_stated_values_are_named(relu_proof, name):
    value = getattr(relu_proof[3], name)
    _relu_rejects(relu_proof, f"{name} is not a canonical F_p4 element", **{name: value[:3]})
    _relu_rejects(relu_proof, f"{name} is not a canonical F_p4 element", **{name: value + np.uint64(F.P)})


def test_zkrelu_select_presence_and_group_count_are_named(relu_proof):
    spec, _, _, proof = relu_proof
    select = None if spec.relu else proof.groups[0].sumcheck
    _relu_rejects(relu_proof, "select sumcheck present iff the layer has ReLU", select=select)
    _relu_rejects(relu_proof, f"0 bit groups, expected {len(spec.groups)}", groups=())
    _relu_rejects(relu_proof, f"{len(spec.groups) - 1} bit groups, expected {len(spec.groups)}",
                  groups=proof.groups[1:])


def test_zkrelu_group_values_are_named(relu_proof):
    proof = relu_proof[3]
    first = proof.groups[0]

    def groups(**changes):
        return (dataclasses.replace(first, **changes),) + proof.groups[1:]

    _relu_rejects(relu_proof, "group claim is not a canonical F_p4 element", groups=groups(claim=first.claim[:2]))
    _relu_rejects(relu_proof, "bits evaluation is not a canonical F_p4 element",
                  groups=groups(bits_eval=first.bits_eval + np.uint64(F.P)))
    _relu_rejects(relu_proof, "the groups' claims do not add up", groups=groups(claim=F.ext_add(first.claim, ONE)))
    _relu_rejects(relu_proof, "bits sumcheck final value != eq (w T + beta eq T (1 - T))",
                  groups=groups(bits_eval=F.ext_add(first.bits_eval, ONE)))


def test_zkrelu_without_relu_stated_values_are_named():
    case = _relu_proof(False)
    reason = "without ReLU the sign value must be 0 and the shifted value the claim"
    _relu_rejects(case, reason, sign_eval=ONE)
    _relu_rejects(case, reason, shifted_eval=F.ext_add(case[3].shifted_eval, ONE))


def test_zkrelu_select_final_value_is_named():
    """A false output claim proved by the consistent cheater: every round passes, the select final value does not."""
    spec, witness, claim = _relu_case(True)
    wrong = Claim(claim.point, F.ext_add(claim.value, ONE))
    pairs = [commit(witness.table(g), CommitParams()) for g in range(len(spec.groups))]
    with consistent_cheating("proofs.layers.relu"):
        proof, _ = prove_decomposition(witness, [w for _, w in pairs], wrong, Transcript("t"))
    rejected(lambda: _verify(spec, wrong, [c for c, _ in pairs], proof), "select sumcheck final value != eq (1 - s) z'",
             "test")


# ------------------------------------------------------------------------------------------ plain Network
@pytest.fixture(scope="module")
def network_case():
    return proved_mlp(2, zk=False)


def _layer(proof, i, decomposition=None, linear=None):
    old = proof.layer_proofs[i]
    pair = (decomposition or old[0], linear or old[1])
    return dataclasses.replace(proof, layer_proofs=proof.layer_proofs[:i] + (pair,) + proof.layer_proofs[i + 1:])


def test_network_layer_rejections_name_the_layer_and_the_part_once(network_case):
    """The location is 'MLP inference proof / layer i / part' (not 'layer i / layer i / part': the callee is given
    the part only), the transcript's labels in words."""
    network, x, proof = network_case
    verify = lambda p: lambda: verify_network(network.commitment, x, p)  # noqa: E731
    decomposition, linear = proof.layer_proofs[0]
    assert decomposition is not None
    rejected(verify(_layer(proof, 0, decomposition=dataclasses.replace(decomposition, sign_eval=ONE[:3]))),
             "sign_eval is not a canonical F_p4 element", f"{MLP}layer 0 / zkReLU")
    for i in (0, 1):
        linear = proof.layer_proofs[i][1]
        rejected(verify(_layer(proof, i, linear=dataclasses.replace(linear, bias_eval=ONE[:3]))),
                 "bias_eval is not a canonical F_p4 element", f"{MLP}layer {i} / matmul")
    messages = linear.sumcheck.round_messages.copy()
    messages[0, 0] = F.ext_add(messages[0, 0], ONE)
    bad = dataclasses.replace(linear, sumcheck=dataclasses.replace(linear.sumcheck, round_messages=messages))
    rejected(verify(_layer(proof, 1, linear=bad)), ROUND_SUM_REASON, f"{MLP}layer 1 / matmul sumcheck round 0")


def test_network_input_claim_is_named(network_case):
    """Layer 0 states A~ + 1 and W~ A~ / (A~ + 1): its product check holds, the public input's MLE does not."""
    network, x, proof = network_case
    linear = proof.layer_proofs[0][1]
    moved = F.ext_add(linear.input_eval, ONE)
    weight = F.ext_mul(F.ext_mul(linear.input_eval, linear.weight_eval), F.ext_inv(moved[None])[0])
    bad = _layer(proof, 0, linear=dataclasses.replace(linear, input_eval=moved, weight_eval=weight))
    rejected(lambda: verify_network(network.commitment, x, bad), "the final claim does not match the public input",
             f"{MLP}input")


def test_network_malformed_proof_names_the_exception(network_case):
    network, x, proof = network_case
    rejected(lambda: verify_network(network.commitment, x, dataclasses.replace(proof, layer_proofs=None)),
             "malformed proof: TypeError: object of type 'NoneType' has no len()", MLP[:-3])


def test_basefold_network_names_a_bits_opening_outside_the_batch():
    from .test_network_basefold import PARAMS

    weights, biases = float_mlp(1, (16, 16, 4))
    model = quantize_fixed_point(weights, biases, frac_bits=8)
    x = quantize_input(model, np.random.default_rng(2).uniform(-1, 1, (1, 16)))
    network = Network(model, zk=False, params=PARAMS)
    proof = network.prove(x)
    decomposition = proof.layer_proofs[0][0]
    smuggled = dataclasses.replace(decomposition, groups=(dataclasses.replace(decomposition.groups[0],
                                                                              opening=b"an opening"),)
                                   + decomposition.groups[1:])
    rejected(lambda: verify_network(network.commitment, x, _layer(proof, 0, decomposition=smuggled)),
             "Basefold proofs open the bits groups in the batch only", f"{MLP}bits")


# ----------------------------------------------------------------------------------------- hiding Network
HIDING = "MLP inference proof / hiding network proof"


@pytest.fixture(scope="module")
def hiding_case():
    return proved_mlp(1, zk=True, max_proofs=1, params=default_params())  # hiding Ligero


def test_hiding_network_statement_checks_are_named(hiding_case):
    network, x, proof = hiding_case
    commitment = network.commitment
    verify = lambda p, c=commitment: lambda: verify_network(c, x, p)  # noqa: E731
    rejected(verify(dataclasses.replace(proof, relations="relations")),
             "a model committed with zk=True needs a HidingNetworkProof", HIDING)
    for copy in (1, -1):
        rejected(verify(with_relations(proof, copy=copy)), f"copy {copy} of a model committed 1 times", HIDING)
    commitments = proof.relations.commitments
    rejected(verify(with_relations(proof, commitments=())), f"0 proof commitments, expected {len(commitments)}", HIDING)
    rejected(verify(with_relations(proof, commitments=commitments * 2)),
             f"{2 * len(commitments)} proof commitments, expected {len(commitments)}", HIDING)
    first = commitments[0]
    rejected(verify(with_relations(proof, commitments=(dataclasses.replace(first, log_rows=first.log_rows + 1),)
                               + commitments[1:])),
             "commitment p does not have the statement's shape and parameters", HIDING)
    items = list(proof.relations.items)
    k = next(i for i, item in enumerate(items) if isinstance(item, HidingCommitment))
    items[k] = dataclasses.replace(items[k], log_rows=items[k].log_rows + 1)
    rejected(verify(with_relations(proof, items=tuple(items))),
             re.compile(r"the masks' commitment has the shape \(.*\), expected \(.*\)"), f"{MLP}relation masks")


def test_hiding_network_soundness_and_model_copies_are_named(hiding_case):
    network, x, proof = hiding_case
    commitment, weights = network.commitment, network.commitment.weights
    low = tuple(dataclasses.replace(c, params=dataclasses.replace(c.params, target_bits=60)) for c in weights.copies)
    error = rejected(lambda: verify_network(dataclasses.replace(commitment, weights=Reusable(low, weights.agreement)),
                                            x, proof), _pattern(r"the statement's soundness is \d+\.\d bits < 100"),
                     HIDING)
    assert float(error.reason.split()[4]) < 100
    doubled = dataclasses.replace(commitment, weights=Reusable(weights.copies * 2, weights.agreement))
    expected = copy_params(dataclasses.replace(base_params(doubled), openings=1), 2)  # read back from 2 copies
    rejected(lambda: verify_network(doubled, x, proof),
             f"copy 0 does not match the statement (num_vars {weights.copies[0].num_vars}, {expected})",
             f"{HIDING}: model")


def _pattern(text):
    return re.compile(text)


# --------------------------------------------------------------------------------- reusable commitments
def test_reusable_rejections_are_named(reusable_case):
    layout, reusable, params = reusable_case
    rejected(lambda: verify_reusable(layout, reusable.copies, params, "here"), "expected a Reusable commitment", "here")
    rejected(lambda: verify_reusable(layout, Reusable((), reusable.agreement), params, "here"),
             "expected a Reusable commitment", "here")
    first = reusable.copies[0]
    bad = Reusable((first, dataclasses.replace(first, num_vars=first.num_vars + 1)), reusable.agreement)
    expected = copy_params(params, 2)
    rejected(lambda: verify_reusable(layout, bad, params, "here"),
             f"copy 1 does not match the statement (num_vars {layout.num_vars}, {expected})", "here")


def test_reusable_non_hiding_copies_are_named(reusable_case):
    layout, reusable, params = reusable_case
    plain = dataclasses.replace(params, hiding=False)
    copy = dataclasses.replace(reusable.copies[0], params=copy_params(plain, 2))
    rejected(lambda: verify_reusable(layout, Reusable((copy, copy), reusable.agreement), plain, "here"),
             "a non-hiding commitment has exactly one copy", "here")


# ----------------------------------------------------------------------------------- training item channel
def test_training_channel_rejections_are_named(training_case):
    from proofs.layers import step_proof as S

    spec, committed, proof = training_case
    items = proof.items
    verify = lambda changed: lambda: S.verify_training_step(spec, committed, dataclasses.replace(proof, items=changed))  # noqa: E731,E501
    rejected(verify(items[:-1]), "the proof ends early", "training proof / opening of p")
    relation = "training proof / relation t0.forward0 sumcheck"  # the label sumcheck.training.t0.forward0, in words
    rejected(verify(("not a sumcheck",) + items[1:]), "expected SumcheckProof, got str", relation)
    rejected(verify(items[:1] + (None,) + items[2:]), "expected ndarray, got NoneType", relation)
    rejected(verify(items + (items[-1],)), "1 unused proof items", "training proof / proof items")
    rejected(verify(items + (items[-1],) * 3), "3 unused proof items", "training proof / proof items")
