"""Sigmoid, Tanh, GELU (torch's exact Erf form) and SiLU in torch-exported models are proven by the graph proof
with lookup tables (proofs.lookup; Haboeck 2022, Papini-Haboeck 2023): the proven output is the quantized
reference forward_int bit for bit and close to onnxruntime's; a tampered proof or output is rejected; the
structure's lookup fields are validated."""
from __future__ import annotations

import dataclasses
import contextlib

import numpy as np
import pytest

import hezk
import hezk.model
from proofs import cli as proofs_cli
from proofs.errors import ModelError, ProofRejected
from proofs.graph_quantize import (LOOKUP_FUNCTIONS, MAX_LOOKUP_BITS, QuantizedGraph, lookup_float, lookup_table,
                                   quantize_graph, validate_structure)
from proofs.layers.graph import GraphProof, verify_graph
from proofs.layers.graph_zk import HidingGraphProof, verify_graph_zk

torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")


def export_mlp(module, features: int, path) -> str:
    """``module`` exported by torch's TorchScript exporter with a dynamic batch axis; its path."""
    torch.onnx.export(module.eval(), torch.zeros(1, features), str(path), dynamo=False, input_names=["x"],
                      output_names=["y"], dynamic_axes={"x": {0: "b"}, "y": {0: "b"}})
    return str(path)


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    """Small torch MLPs: ReLU then a Sigmoid output; a Tanh hidden layer; exact GELU, SiLU and tanh-GELU layers."""
    nn = torch.nn
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("lookups")
    models = {"sigmoid": nn.Sequential(nn.Linear(10, 8), nn.ReLU(), nn.Linear(8, 1), nn.Sigmoid()),
              "tanh": nn.Sequential(nn.Linear(10, 8), nn.Tanh(), nn.Linear(8, 2)),
              "gelu": nn.Sequential(nn.Linear(10, 8), nn.GELU(), nn.Linear(8, 6), nn.SiLU(), nn.Linear(6, 4),
                                    nn.GELU(approximate="tanh"), nn.Linear(4, 2))}
    x = np.random.default_rng(0).normal(size=(64, 10)).astype(np.float32)
    return folder, {name: export_mlp(m, 10, folder / f"{name}.onnx") for name, m in models.items()}, x


def _onnxruntime(path, x) -> np.ndarray:
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x.astype(np.float32)})[0]


@pytest.mark.parametrize("name, functions", [("sigmoid", ["sigmoid"]), ("tanh", ["tanh"]),
                                             ("gelu", ["gelu", "silu", "gelu_tanh"])])
def test_exported_activations_are_proven_with_public_weights(exports, name, functions):
    folder, paths, x = exports
    prover = hezk.commit(paths[name], x, hiding=False)
    q = prover.quantized
    assert [op.function for op in q.ops if op.kind == "lookup"] == functions
    sample = x[:3]
    proof = prover.prove(sample)
    verified = hezk.verify(prover.commitment, sample, proof)
    reference = q.forward_int(q.quantize_input(sample))
    assert np.array_equal(verified.output_int.reshape(reference.shape), reference)
    # the stated error: the quantized model against onnxruntime on the calibration data bounds it here
    error = np.abs(q.dequantize(reference) - _onnxruntime(paths[name], sample).reshape(reference.shape)).max()
    stated = q.error_report(prover.graph, x)["max_error"]
    assert error <= stated + 1e-6 and stated < 0.1, (error, stated)
    proof_object = GraphProof.from_bytes(proof)
    tampered = proof_object.output.copy()
    tampered[0, 0] += 1
    with pytest.raises(ProofRejected):
        verify_graph(prover.commitment, sample, dataclasses.replace(proof_object, output=tampered))


def test_a_tampered_lookup_item_is_rejected(exports):
    folder, paths, x = exports
    prover = hezk.commit(paths["sigmoid"], x, hiding=False)
    proof = GraphProof.from_bytes(prover.prove(x[:2]))
    tags = [tag for tag, _ in proof.items]
    assert {"lookup commitment", "lookup", "lookup opening"} <= set(tags)
    at = tags.index("lookup")
    lookup = proof.items[at][1]
    from proofs import field as F
    for bad in (dataclasses.replace(lookup, y_eval=F.ext_add(lookup.y_eval, F.ext_one())),
                dataclasses.replace(lookup, m_eval=F.ext_add(lookup.m_eval, F.ext_one()))):
        items = list(proof.items)
        items[at] = ("lookup", bad)
        with pytest.raises(ProofRejected):
            verify_graph(prover.commitment, x[:2], dataclasses.replace(proof, items=tuple(items)))
    dropped = tuple(item for item in proof.items if item[0] != "lookup commitment")
    with pytest.raises(ProofRejected):
        verify_graph(prover.commitment, x[:2], dataclasses.replace(proof, items=dropped))
    assert verify_graph(prover.commitment, x[:2], proof)  # control


@pytest.mark.parametrize("name", ["sigmoid", "gelu"])
def test_exported_activations_are_proven_with_hidden_weights(exports, name):
    """The default (hiding) commitment: the inverses of the LogUp identity live in a hiding store committed after
    alpha, beta; the proven output is forward_int's; a tampered output is rejected."""
    folder, paths, x = exports
    prover = hezk.commit(paths[name], x, max_proofs=2)
    assert prover.zero_knowledge
    q = prover.quantized
    sample = x[:2]
    proof = prover.prove(sample)
    verified = hezk.verify(prover.commitment, sample, proof)
    reference = q.forward_int(q.quantize_input(sample))
    assert verified.zero_knowledge and np.array_equal(verified.output_int.reshape(reference.shape), reference)
    parsed = HidingGraphProof.from_bytes(proof)
    tampered = parsed.output.copy()
    tampered[-1, -1] -= 1
    with pytest.raises(ProofRejected):
        verify_graph_zk(prover.commitment, sample, dataclasses.replace(parsed, output=tampered))


def test_a_prover_with_a_wrong_table_entry_is_rejected_in_both_proofs(exports, monkeypatch):
    """A prover whose lookup returns T[x] + 1 for one element (its claimed output follows it) is rejected by the
    plain and by the hiding verifier (controls: the honest proofs above)."""
    import proofs.graph_quantize as GQ
    folder, paths, x = exports
    hiding = hezk.commit(paths["tanh"], x, max_proofs=2)
    plain = hezk.commit(paths["tanh"], x, hiding=False)
    honest = GQ.lookup_int

    def off_by_one(op, values, f_in, f_out):
        y = honest(op, values, f_in, f_out).copy()
        y.reshape(-1)[1] += 1
        return y

    monkeypatch.setattr(GQ, "lookup_int", off_by_one)
    for prover, match in ((plain, "fraction sum differs"), (hiding, "lookup")):
        proof = prover.prove(x[:2])
        with pytest.raises(ProofRejected, match=match):
            hezk.verify(prover.commitment, x[:2], proof)


def test_hiding_basefold_commits_a_lookup(exports):
    """Issue 34: the lookup store is a hiding Basefold store too (tests/proofs/test_graph_zk_basefold_lookups.py
    proves and attacks it); before, this commit was refused."""
    folder, paths, x = exports
    assert hezk.commit(paths["sigmoid"], x, scheme="basefold", max_proofs=1).zero_knowledge


def test_cli_commit_prove_verify_a_sigmoid_output_with_hidden_weights(exports, capsys):
    folder, paths, x = exports
    np.save(folder / "x.npy", x[:2])
    np.save(folder / "calibration.npy", x)
    steps = [("commit", "--model", paths["sigmoid"], "--out", "c.bin", "--calibration", "calibration.npy",
              "--max-proofs", "2"),
             ("prove", "--model", paths["sigmoid"], "--input", "x.npy", "--commitment", "c.bin", "--out", "p.bin",
              "--quiet"),
             ("verify", "--commitment", "c.bin", "--input", "x.npy", "--proof", "p.bin")]
    with contextlib.chdir(folder):
        assert [proofs_cli.main(list(step)) for step in steps] == [0] * len(steps)
    assert "accept" in capsys.readouterr().out


# ------------------------------------------------------------------------------------------ the op itself
def test_lookup_table_is_the_rounded_function_and_refuses_what_does_not_fit():
    inputs, outputs = lookup_table("sigmoid", 8, 4, 10)
    expected = np.floor(1 / (1 + np.exp(-inputs / 16.0)) * 1024 + 0.5)
    assert np.array_equal(outputs, expected) and outputs[128] == 512 and not outputs.flags.writeable
    from hezk.model.graph import ACTIVATIONS, activate
    grid = np.linspace(-4, 4, 9)
    for function in LOOKUP_FUNCTIONS:
        if function in ACTIVATIONS:  # the float graph's own function, bit for bit
            assert np.array_equal(lookup_float(function, grid), activate(function, grid))
        elif function in ("erf", "exp", "softplus", "hardsigmoid"):
            assert np.all(np.isfinite(lookup_float(function, grid)))
    with pytest.raises(ModelError, match="MAX_LOOKUP_BITS"):
        lookup_table("tanh", MAX_LOOKUP_BITS + 1, 4, 10)
    with pytest.raises(ModelError, match="half the field"):
        lookup_table("exp", 12, 0, 10)  # e^2047: no table
    with pytest.raises(ModelError, match="not one of"):
        lookup_table("relu6", 8, 4, 10)


def _sigmoid_structure(exports) -> QuantizedGraph:
    folder, paths, x = exports
    return quantize_graph(hezk.model.load(paths["sigmoid"]), x)


@pytest.mark.parametrize("change, reason", [({"function": "softmax"}, "function"), ({"q_bits": 17}, "q_bits"),
                                            ({"q_bits": 0}, "q_bits"), ({"shift": 1}, "field shift"),
                                            ({"function": ""}, "function")])
def test_structure_with_a_bad_lookup_is_refused(exports, change, reason):
    q = _sigmoid_structure(exports)
    validate_structure(q)  # control
    index = next(i for i, op in enumerate(q.ops) if op.kind == "lookup")
    ops = list(q.ops)
    ops[index] = dataclasses.replace(ops[index], **change)
    with pytest.raises(ProofRejected, match=reason):
        validate_structure(dataclasses.replace(q, ops=tuple(ops)))


def test_structure_with_a_wrong_output_bound_or_scale_is_refused(exports):
    q = _sigmoid_structure(exports)
    out = q.ops[-1].output
    op = q.ops[-1]
    _, outputs = lookup_table(op.function, op.q_bits, q.fracs[op.inputs[0]], q.fracs[out])
    assert op.kind == "lookup" and 0 < q.bounds[out] == np.abs(outputs).max() <= 1 << q.fracs[out]
    with pytest.raises(ProofRejected, match="output bound"):
        validate_structure(dataclasses.replace(q, bounds={**q.bounds, out: q.bounds[out] + 1}))
    text = q.public_text()
    assert QuantizedGraph.from_public_text(text, "here").public_text() == text


def test_an_input_outside_the_table_is_refused(exports):
    """The integer reference refuses a lookup input outside its table, naming the op (control: a calibrated
    input runs)."""
    folder, paths, x = exports
    prover = hezk.commit(paths["tanh"], x, hiding=False)
    q = prover.quantized
    x_int = q.quantize_input(x[:1])
    q.forward_int(x_int)
    with pytest.raises(ModelError, match=r"Tanh.*outside the tanh table"):
        q.forward_int(x_int * 64)
