"""One verdict contract for every public verify function: an honest proof gives a truthy
:class:`proofs.verdict.Verdict` (the proof kind, the proven output where the statement has one, the soundness
bits), so ``if verify(...)`` reads as it should; a tampered proof raises ProofRejected whose ``where`` begins with
the proof kind and whose words name no transcript label. Every ``verify*`` name exported by ``proofs`` and
``hezk`` is covered, or listed in :data:`proofs.verdict.PRIMITIVE_VERIFIERS` (claim-level primitives)."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import hezk
import proofs
from hezk.model import Activation, Contraction, Graph
from proofs import ProofRejected, Verdict, inference
from proofs.batch import prove_batch, verify_batch
from proofs.graph_quantize import quantize_graph
from proofs.layers import step_basefold as SB
from proofs.layers import step_proof as S
from proofs.layers.graph import GraphNetwork, verify_graph
from proofs.layers.graph_zk import HidingGraphNetwork, verify_graph_zk
from proofs.layers.network import Network, verify_network
from proofs.layers.network_zk import basefold_params
from proofs.layers.training import training_trace
from proofs.quantize import quantize_fixed_point, quantize_input
from proofs.verdict import PRIMITIVE_VERIFIERS, plain_where

from .test_network import float_mlp
from .test_training import SPEC, _data


def _tampered_output(proof):
    output = proof.output.copy()
    output.flat[0] += 1
    return dataclasses.replace(proof, output=output)


def _graph():
    """A Gemm 6 -> 5, ReLU, Gemm 5 -> 3 graph (the graph path of an MLP)."""
    rng = np.random.default_rng(3)
    return Graph("x", (6,), (
        Contraction("fc0", "Gemm", ("x",), "h", "bk,nk->bn", rng.normal(size=(5, 6)) * .5, rng.normal(size=5) * .1,
                    None, (5,)),
        Activation("relu", "Relu", ("h",), "a", "relu"),
        Contraction("fc1", "Gemm", ("a",), "o", "bk,nk->bn", rng.normal(size=(3, 5)) * .5, rng.normal(size=3) * .1,
                    None, (3,))), "o")


@pytest.fixture(scope="module")
def mlp():
    weights, biases = float_mlp(4, (6, 5, 3))
    model = quantize_fixed_point(weights, biases, frac_bits=6)
    x = quantize_input(model, np.random.default_rng(5).uniform(-1, 1, (2, 6)))
    return model, x


def _mlp_case(zk):
    def case(mlp):
        model, x = mlp
        network = Network(model, zk=zk, max_proofs=2)
        proof = network.prove(x)
        return (lambda p=proof: verify_network(network.commitment, x, p)), _tampered_output(proof), "MLP inference"
    return case


def _network_method_case(mlp):
    model, x = mlp
    network = Network(model, zk=False)
    proof = network.prove(x)
    return (lambda p=proof: network.verify(x, p)), _tampered_output(proof), "MLP inference"


def _batch_case(mlp):
    model, x = mlp
    network = Network(model, zk=False)
    proofs_ = prove_batch(network, x)
    return (lambda p=proofs_: verify_batch(network.commitment, x, p)), [proofs_[0], _tampered_output(proofs_[1])], \
        "MLP inference batch"


def _graph_case(hiding):
    def case(mlp):
        x = np.random.default_rng(6).uniform(-1, 1, (2, 6))
        q = quantize_graph(_graph(), np.random.default_rng(7).uniform(-1, 1, (16, 6)))
        network = HidingGraphNetwork(q, max_proofs=2) if hiding else GraphNetwork(q)
        check = verify_graph_zk if hiding else verify_graph
        proof = network.prove(x)
        kind = "zero-knowledge graph inference" if hiding else "graph inference"
        return (lambda p=proof: check(network.commitment, x, p)), _tampered_output(proof), kind
    return case


def _entry_point_case(graph: bool):
    """proofs.inference.verify, the one entry point: the commitment picks the strategy and its proof kind."""
    def case(mlp):
        model, x = mlp
        if graph:
            x = np.random.default_rng(6).uniform(-1, 1, (2, 6))
            network = HidingGraphNetwork(quantize_graph(_graph(), np.random.default_rng(7).uniform(-1, 1, (16, 6))),
                                         max_proofs=1)
        else:
            network = Network(model, zk=True, max_proofs=1)
        proof = network.prove(x)
        kind = "zero-knowledge graph inference" if graph else "MLP inference"
        return (lambda p=proof: inference.verify(network.commitment, x, p)), _tampered_output(proof), kind
    return case


def _graph_batch_case(mlp):
    x = np.random.default_rng(6).uniform(-1, 1, (2, 6))
    network = HidingGraphNetwork(quantize_graph(_graph(), np.random.default_rng(7).uniform(-1, 1, (16, 6))),
                                 max_proofs=2)
    proofs_ = prove_batch(network, x)
    return (lambda p=proofs_: verify_batch(network.commitment, x, p)), [proofs_[0], _tampered_output(proofs_[1])], \
        "graph inference batch"


def _hezk_case(mlp):
    x = np.random.default_rng(6).uniform(-1, 1, (1, 6))
    prover = hezk.commit(_graph(), np.random.default_rng(7).uniform(-1, 1, (16, 6)), max_proofs=2)
    proof = prover.prove(x)
    tampered = bytearray(proof)
    tampered[-40] ^= 1
    return (lambda p=proof: hezk.verify(prover.commitment, x, p)), bytes(tampered), "MLP inference"  # a ReLU MLP


def _trace():
    weights, x, y = _data(SPEC, 1)
    return training_trace(weights, x, y, SPEC)


def _tampered_items(proof):
    items = list(proof.items)
    index = next(i for i, item in enumerate(items) if isinstance(item, np.ndarray))
    bad = items[index].copy()
    bad[0, 0] = (int(bad[0, 0]) + 1) % proofs.P
    items[index] = bad
    return dataclasses.replace(proof, items=tuple(items))


def _training_case(verify, zk=True):
    def case(mlp):
        trace = _trace()
        committed = proofs.commit_step(trace, zk=zk)
        proof = proofs.prove_training_step(trace, committed, zk=zk)
        return (lambda p=proof: verify(SPEC, committed, p)), _tampered_items(proof), "training"
    return case


def _training_steps_case(mlp):
    trace = _trace()
    committed = S.commit_steps([trace], zk=True)
    proof = S.prove_training_steps([trace], committed, zk=True)
    return (lambda p=proof: S.verify_training_steps(SPEC, committed, p)), _tampered_items(proof), "training"


def _basefold_step_case(mlp):
    trace = _trace()
    committed = SB.commit_step(trace, basefold_params(), max_proofs=1)
    proof = SB.prove_step(trace, committed)
    return (lambda p=proof: SB.verify_step(SPEC, committed, p)), _tampered_items(proof), "training"


def _forward_case(mlp):
    trace = _trace()
    committed = S.commit_forward(trace, zk=True, private_input=True, max_proofs=1)
    proof = S.prove_forward(trace, committed, zk=True)
    output = S.forward_output(trace)
    return (lambda p=proof: S.verify_forward(SPEC, committed, output, p)), _tampered_items(proof), "forward"


#: every public proof-of-model verifier: name -> case(mlp) = (verify(proof), a tampered proof, the proof kind)
CASES = {
    "proofs.verify_network (plain)": _mlp_case(False),
    "proofs.verify_network (zero knowledge)": _mlp_case(True),
    "proofs.Network.verify": _network_method_case,
    "proofs.batch.verify_batch": _batch_case,
    "proofs.layers.graph.verify_graph": _graph_case(False),
    "proofs.layers.graph_zk.verify_graph_zk": _graph_case(True),
    "proofs.verify_training_step": _training_case(proofs.verify_training_step),
    "proofs.verify_training_steps": _training_steps_case,
    "proofs.verify_forward": _forward_case,
    "proofs.layers.step_proof.verify_training_step (plain)": _training_case(S.verify_training_step, zk=False),
    "proofs.layers.step_basefold.verify_step": _basefold_step_case,
    "hezk.verify": _hezk_case,
    "proofs.inference.verify (MLP strategy)": _entry_point_case(False),
    "proofs.inference.verify (graph strategy)": _entry_point_case(True),
    "proofs.batch.verify_batch (graph)": _graph_batch_case,
}
#: the exported names each case stands for
COVERED = {"verify_network", "verify_training_step", "verify_training_steps", "verify_forward", "verify"}


def test_every_exported_verify_function_is_covered_or_a_listed_primitive():
    """The contract's list is complete: a new ``verify*`` export must join CASES or PRIMITIVE_VERIFIERS."""
    exported = {name for module in (proofs, hezk) for name in module.__all__ if name.startswith("verify")}
    assert exported - PRIMITIVE_VERIFIERS == COVERED
    assert PRIMITIVE_VERIFIERS <= set(proofs.__all__)


@pytest.mark.parametrize("name", sorted(CASES))
def test_verify_returns_a_truthy_verdict_or_raises_naming_the_proof_kind(name, mlp):
    verify, tampered, kind = CASES[name](mlp)
    verdict = verify()
    assert isinstance(verdict, Verdict) and verdict and verdict.accepted
    if not verdict:  # ``if verify(...)``: the accepted branch is taken
        pytest.fail("an accepted proof's verdict is falsy")
    assert verdict.kind == kind
    assert verdict.soundness_bits >= 100
    if kind == "training":
        assert verdict.output is None
    else:
        assert isinstance(verdict.output, np.ndarray) and verdict.output.size
        assert np.array_equal(np.asarray(verdict), verdict.output)
    with pytest.raises(ProofRejected) as info:
        verify(tampered)
    error = info.value
    assert error.where.startswith(f"{kind} proof"), error
    assert "sumcheck.training" not in str(error) and "running claim" not in str(error), error


def test_an_inference_proof_rejection_reads_in_words_not_transcript_labels(mlp):
    """A zero-knowledge MLP proof whose relation values are moved: 'MLP inference proof / relation ... sumcheck',
    never the transcript label sumcheck.training.*, the old message of every proof kind."""
    model, x = mlp
    network = Network(model, zk=True, max_proofs=1)
    proof = network.prove(x)
    bad = dataclasses.replace(proof, relations=_tampered_items(proof.relations))
    with pytest.raises(ProofRejected) as info:
        verify_network(network.commitment, x, bad)
    assert info.value.where.startswith("MLP inference proof / "), info.value
    assert "training" not in str(info.value), info.value
    assert verify_network(network.commitment, x, proof)  # positive control (a fresh copy is not needed to verify)


def test_plain_where_spells_out_the_labels():
    assert plain_where("sumcheck.training.t0.forward0 round 3") == "relation t0.forward0 sumcheck round 3"
    assert plain_where("layer 1 / sumcheck.linear round 0") == "layer 1 / matmul sumcheck round 0"
    assert plain_where("op 2 / zkReLU") == "op 2 / zkReLU"


def test_verdict_without_output_refuses_to_be_an_array():
    verdict = Verdict(kind="training", soundness_bits=120.0)
    assert verdict and verdict.output is None
    with pytest.raises(proofs.ProofError, match="no output"):
        np.asarray(verdict)
