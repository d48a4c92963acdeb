"""The statement's validator: every verifier path parses a statement through ONE validator per statement kind
(the graph structure: :func:`proofs.graph_quantize.validate_structure`; the MLP :class:`ModelCommitment`:
``validate``), which refuses any field outside the bounds the soundness argument needs, naming the op and field.

The attack it stops (a graph commitment that binds no function): with shift + q_bits > FIELD_BITS on one op, a
value's bits rebuild 2^(shift + Q) > p integers, so the accumulator acc and acc - p both decompose: one
commitment, one input, two accepted outputs (here a hidden ReLU unit zeroed)."""
from __future__ import annotations

import dataclasses
import json
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import proofs.graph_quantize as GQ
from hezk.model import read_onnx
from proofs import cli
from proofs.errors import ModelError, ProofRejected
from proofs.field import P
from proofs.graph_quantize import FIELD_BITS, FIELD_HALF, QuantizedGraph, quantize_graph
from proofs.layers.graph import GraphCommitment, GraphNetwork, verify_graph
from proofs.layers.graph_zk import HidingGraphNetwork, verify_graph_zk
from proofs.layers.network_zk import basefold_params

onnx = pytest.importorskip("onnx")
from tests.model import onnx_models as M  # noqa: E402

FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                       HealthCheck.function_scoped_fixture])


def _quantized(model, tmp_path, seed=0):
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    graph = read_onnx(str(path))
    calibration = np.random.default_rng(seed).normal(size=(16, *graph.input_shape))
    return quantize_graph(graph, calibration), calibration


# ------------------------------------------------------------------------------ the attack (item: binding)
def widened(q: QuantizedGraph, index: int) -> QuantizedGraph:
    """``q`` with op ``index``'s q_bits raised to shift + q_bits = FIELD_BITS + 2 (32 bits: above the field's)."""
    op = q.ops[index]
    wide = dataclasses.replace(op, q_bits=FIELD_BITS + 2 - op.shift)
    return dataclasses.replace(q, ops=q.ops[:index] + (wide,) + q.ops[index + 1:])


def forge(monkeypatch, network, x, name: str, unit: int):
    """A proof from ``network`` whose op ``name`` uses the accumulator minus p at (sample 0, ``unit``): the same
    residue, so every relation holds; only a width beyond the field lets its bits decompose it."""
    original = GQ.contract_int

    def cheat(op, values):
        acc = original(op, values)
        if op.name == name:
            acc = acc.copy()
            acc.reshape(len(acc), -1)[0, unit] -= P
        return acc

    with monkeypatch.context() as patch:
        patch.setattr(GQ, "contract_int", cheat)
        return network.prove(x)


def _live_unit(q, x) -> int:
    """The hidden unit of sample 0 whose ReLU output moves the output most (zeroing it changes the output)."""
    values, _ = q.forward_int(q.quantize_input(x), trace=True)
    hidden = values[q.ops[0].output].reshape(len(x), -1)[0]
    return int(np.argmax(hidden * np.abs(q.ops[1].weight).sum(0)))


NETWORKS = {"plain": (GraphNetwork, verify_graph),
            "ligero": (lambda q: HidingGraphNetwork(q, max_proofs=2), verify_graph_zk),
            "basefold": (lambda q: HidingGraphNetwork(q, params=basefold_params(), max_proofs=2), verify_graph_zk)}


@pytest.fixture(scope="module")
def mlp(tmp_path_factory):
    """A small ReLU MLP graph (8 -> 8 -> 4) and one input."""
    q, calibration = _quantized(M.mlp((8, 8, 4), "relu", seed=2), tmp_path_factory.mktemp("mlp"))
    return q, calibration[:1]


@pytest.mark.parametrize("kind", sorted(NETWORKS))
def test_a_structure_wider_than_the_field_is_refused_by_every_verifier(kind, mlp, monkeypatch, tmp_path):
    """shift + q_bits = 32 on the hidden op: the model owner proves y (honest) and y' (the accumulator minus p at
    one unit: its ReLU zeroed) for one commitment and one input (the code before this validator accepted both,
    on all three verifiers); now both are refused when the statement is parsed, naming the op and the field, by
    the verifier and by ``python -m proofs verify``. Positive control: the quantizer's structure proves and verifies."""
    q, x = mlp
    make, verify = NETWORKS[kind]
    good = make(q)
    assert np.array_equal(verify(good.commitment.to_bytes(), x, good.prove(x).to_bytes()),
                          q.forward_int(q.quantize_input(x)))
    with monkeypatch.context() as owner:  # the model owner's own software skips the validator
        owner.setattr(GQ, "validate_structure", lambda *args: None)
        network = make(widened(q, 0))
        honest, forged = network.prove(x), forge(monkeypatch, network, x, q.ops[0].name, _live_unit(q, x))
    assert not np.array_equal(honest.output, forged.output)  # two outputs for one commitment and one input
    for proof in (honest, forged):
        for commitment in (network.commitment, network.commitment.to_bytes()):
            with pytest.raises(ProofRejected) as info:
                verify(commitment, x, proof.to_bytes())
            assert f"op 0 ('{q.ops[0].name}')" in info.value.where and "q_bits" in info.value.reason, info.value
    if kind == "plain":  # the command line: reject (exit 1), naming the op
        files = {name: tmp_path / f"{name}.bin" for name in ("commitment", "proof")}
        files["commitment"].write_bytes(network.commitment.to_bytes())
        files["proof"].write_bytes(forged.to_bytes())
        np.save(tmp_path / "x.npy", x)
        assert cli.main(["verify", "--commitment", str(files["commitment"]), "--input", str(tmp_path / "x.npy"),
                         "--proof", str(files["proof"])]) == 1


def test_a_structure_handed_in_as_an_object_is_validated_too(mlp):
    """verify_graph given a GraphCommitment object (never parsed) runs the same validator."""
    q, x = mlp
    network = GraphNetwork(widened(q, 0))
    with pytest.raises(ProofRejected, match="q_bits"):
        verify_graph(GraphCommitment(network.commitment.structure, network.commitment.weights), x, network.prove(x))


# --------------------------------------------------------------------- the structure fuzzer (graph statements)
def _mutations(header: dict) -> list:
    """(name, eligible op indices or None, mutate(header, index, k), where-part, reason-part): each puts one field
    k >= 1 beyond its bound."""
    ops = header["ops"]
    kinds = {kind: [i for i, op in enumerate(ops) if op["kind"] == kind] for kind in GQ.KINDS}
    bits = [i for i, op in enumerate(ops) if op["kind"] in ("contraction", "relu", "square")]
    contractions = kinds["contraction"]

    def op_field(key, value):
        def mutate(h, i, k):
            h["ops"][i][key] = value(h["ops"][i], k)
        return mutate

    def tensor_field(slot, value):
        def mutate(h, i, k):
            h["tensors"][h["input"]][slot] = value(k)
        return mutate

    def top(key, value):
        def mutate(h, i, k):
            h[key] = value(k)
        return mutate

    return [
        ("width", bits, op_field("q_bits", lambda op, k: FIELD_BITS - op["shift"] + k), "op", "q_bits"),
        ("negative shift", kinds["contraction"] + kinds["square"], op_field("shift", lambda op, k: -k), "op", "shift"),
        ("no bits", bits, op_field("q_bits", lambda op, k: 1 - k), "op", "q_bits"),
        ("shift on a relu", kinds["relu"], op_field("shift", lambda op, k: k), "op", "shift"),
        ("relu flag on a relu", kinds["relu"], op_field("relu", lambda op, k: True), "op", "relu"),
        ("kind", list(range(len(ops))), op_field("kind", lambda op, k: f"softmax{k}"), "op", "kind"),
        ("wiring", list(range(len(ops))), op_field("inputs", lambda op, k: [f"nowhere{k}"] * len(op["inputs"])),
         "op", "inputs"),
        ("output", list(range(len(ops))), op_field("output", lambda op, k: header["input"]), "op", "output"),
        ("weight scale", contractions, op_field("weight_frac", lambda op, k: GQ.MAX_FRAC_BITS + k), "op",
         "weight_frac"),
        ("einsum shape", contractions,
         op_field("einsum_shape", lambda op, k: [op["einsum_shape"][0] + k] + op["einsum_shape"][1:]), "op",
         "einsum_shape"),
        ("weight shape", contractions,
         op_field("weight_shape", lambda op, k: [n + k for n in op["weight_shape"]]), "op", "equation|weight_shape"),
        ("equation", contractions, op_field("equation", lambda op, k: "bi" * k), "op", "equation"),
        ("constant", contractions, op_field("constant", lambda op, k: f"median{k}"), "op", "constant"),
        ("lefts", kinds["add"], op_field("lefts", lambda op, k: [k, k]), "op", "lefts"),
        ("reshape", kinds["reshape"], op_field("shape", lambda op, k: [n + k for n in op["shape"]]), "op", "reshape"),
        ("tensor bound", None, tensor_field(2, lambda k: FIELD_HALF + k), "tensor", "bound"),
        ("tensor scale", None, tensor_field(1, lambda k: GQ.MAX_SCALE + k), "tensor", "frac"),
        ("tensor size", None, tensor_field(0, lambda k: [GQ.MAX_TENSOR_ENTRIES + k]), "tensor", "MAX_TENSOR_ENTRIES"),
        ("input bound", None, top("input_bound", lambda k: FIELD_HALF + k), "input", "input_bound"),
        ("no input bound", None, top("input_bound", lambda k: 1 - k), "input", "input_bound"),
    ]


@pytest.fixture(scope="module")
def cnn_header():
    """The public structure of a conv + relu + residual add + global-average pool + flatten + Gemm graph."""
    from tests.proofs.test_graph_zk import _small_cnn
    graph = _small_cnn()
    q = quantize_graph(graph, np.random.default_rng(0).normal(size=(8, *graph.input_shape)))
    return q, q.public()


def test_the_quantizers_structure_parses_back(cnn_header):
    """Positive control: the honest structure passes the validator and round-trips."""
    q, header = cnn_header
    assert QuantizedGraph.from_public_text(q.public_text(), "here").public_text() == q.public_text()
    assert {op["kind"] for op in header["ops"]} >= {"contraction", "relu", "add", "reshape"}


@pytest.mark.parametrize("lefts", [(0, 0, 0), (0,), ()])
def test_an_add_with_other_than_two_lefts_is_refused_naming_the_field(cnn_header, lefts):
    """An add op reads two tensors, so it has two shifts: any other count is ProofRejected naming ``lefts`` (from
    the validator every verifier runs, on an object and through the parse), never a ValueError from unpacking."""
    q, header = cnn_header
    index = next(i for i, op in enumerate(q.ops) if op.kind == "add")
    q.validate()  # positive control: the honest structure passes
    bad = dataclasses.replace(q, ops=q.ops[:index] + (dataclasses.replace(q.ops[index], lefts=lefts),)
                              + q.ops[index + 1:])
    with pytest.raises(ProofRejected, match="lefts"):
        bad.validate()
    with pytest.raises(ProofRejected, match="lefts"):
        QuantizedGraph.from_public_text(bad.public_text(), "here")


@FUZZ
@given(data=st.data(), k=st.integers(1, 1 << 20))
def test_every_field_beyond_its_bound_is_refused_at_parse_time_naming_it(cnn_header, data, k):
    """For every mutation of one field (a width, a scale, a shape, a bound, the wiring), the parse every verifier
    runs raises ProofRejected naming the op (or tensor) and the field, through the commitment's bytes too."""
    q, header = cnn_header
    usable = [m for m in _mutations(header) if m[1] is None or m[1]]
    name, indices, mutate, where_part, reason_part = data.draw(st.sampled_from(usable), label="mutation")
    index = None if indices is None else data.draw(st.sampled_from(indices), label="op")
    changed = json.loads(json.dumps(header))
    mutate(changed, index, k)
    text = json.dumps(changed, sort_keys=True, separators=(",", ":"))
    with pytest.raises(ProofRejected) as info:
        QuantizedGraph.from_public_text(text, "graph commitment")
    error = info.value
    assert error.where.startswith("graph commitment"), error
    if where_part == "op":
        assert f"op {index} " in error.where or f"op {index}" == error.where.split(" / ")[-1], (name, error)
    else:
        assert where_part in error.where or where_part in error.reason, (name, error)
    assert re.search(reason_part, error.reason), (name, error)


# ------------------------------------------------------------------------------------ memory (declared sizes)
def _hiding_commitment_bytes(text: str, weights: bytes) -> bytes:
    """A hiding graph commitment's bytes around any structure text (what a crafted commitment can hold)."""
    from proofs.layers import graph_zk
    from proofs.proof_format import ByteWriter, to_record
    writer = ByteWriter(graph_zk.COMMITMENT_MAGIC, graph_zk.FORMAT_VERSION)
    writer.text(text)
    writer.blob(weights)
    return to_record(graph_zk.HidingGraphCommitment.KIND, writer.getvalue())


def test_a_commitment_declaring_a_huge_tensor_is_refused_before_any_allocation(mlp):
    """A hiding commitment declaring a 2^24-entry input (the old verifier spent ~2.9 GB on it before rejecting) is
    refused at parse time by the size bound, in well under a second and a few MB; the honest commitment's verifier
    stays within :func:`verifier_memory_bytes` (measured with tracemalloc: numpy's tables are traced)."""
    import time
    import tracemalloc
    q, x = mlp
    network = HidingGraphNetwork(q, max_proofs=2)
    proof = network.prove(x).to_bytes()
    header = q.public()
    huge = 1 << 24
    header["input_shape"] = [huge]
    header["tensors"][q.input][0] = [huge]
    header["ops"][0]["weight_shape"] = [header["ops"][0]["weight_shape"][0], huge]
    crafted = _hiding_commitment_bytes(json.dumps(header, sort_keys=True, separators=(",", ":")),
                                       network.commitment.weights.to_bytes())
    tracemalloc.start()
    start = time.perf_counter()
    with pytest.raises(ProofRejected, match="MAX_TENSOR_ENTRIES"):
        verify_graph_zk(crafted, x, proof)
    elapsed = time.perf_counter() - start
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.reset_peak()
    assert elapsed < 1.0 and peak < 16 << 20, (elapsed, peak)
    y = verify_graph_zk(network.commitment.to_bytes(), x, proof).output  # positive control
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert np.array_equal(y, q.forward_int(q.quantize_input(x)))
    assert peak <= GQ.verifier_memory_bytes(q, len(x)), peak


@pytest.mark.parametrize("kind", ["plain", "ligero"])
def test_graph_verifiers_refuse_a_claimed_output_of_int64_min_at_the_range_check(kind, mlp):
    """np.abs(-2^63) is -2^63: the old bound check passed it; the shared check compares Python ints."""
    q, x = mlp
    make, verify = NETWORKS[kind]
    network = make(q)
    proof = network.prove(x)
    forged = dataclasses.replace(proof, output=np.full_like(proof.output, np.iinfo(np.int64).min))
    with pytest.raises(ProofRejected, match="claimed output holds -9223372036854775808, outside"):
        verify(network.commitment, x, forged)


# -------------------------------------------------------------------------- the MLP statement (ModelCommitment)
@pytest.fixture(scope="module")
def mlp_commitment():
    """A plain committed 6 -> 5 -> 4 -> 3 ReLU MLP (fixed point), its last layer a raw accumulator."""
    from proofs.layers.network import Network
    from proofs.quantize import quantize_fixed_point
    rng = np.random.default_rng(1)
    sizes = (6, 5, 4, 3)
    model = quantize_fixed_point([rng.normal(size=(o, i)) * .4 for i, o in zip(sizes, sizes[1:])],
                                 [rng.normal(size=o) * .1 for o in sizes[1:]], frac_bits=6)
    return Network(model, zk=False).commitment


def _layer_mutations(commitment):
    """(layer index or None, field, new value from k >= 1, reason pattern): one field beyond its bound."""
    from proofs.layers.statement import MAX_FEATURES
    last = len(commitment.layers) - 1
    return [(0, "shift", lambda info, k: FIELD_BITS - info.q_bits + k, "q_bits"),
            (0, "q_bits", lambda info, k: FIELD_BITS + k, "q_bits"),
            (0, "q_bits", lambda info, k: 1 - k, "q_bits"),
            (last, "q_bits", lambda info, k: FIELD_BITS + 1 + k, "q_bits"),
            (1, "in_features", lambda info, k: info.in_features + k, "features"),
            (0, "out_features", lambda info, k: MAX_FEATURES + k, "features"),
            (1, "acc_hi", lambda info, k: FIELD_HALF + k, "accumulator"),
            (1, "acc_lo", lambda info, k: -FIELD_HALF - k, "accumulator"),
            (0, "weight_frac", lambda info, k: GQ.MAX_FRAC_BITS + k, "weight_frac"),
            (1, "in_frac", lambda info, k: info.in_frac + k, "in_frac"),
            (None, "input_bound", lambda c, k: FIELD_HALF + k, "input_bound"),
            (None, "input_bound", lambda c, k: 1 - k, "input_bound"),
            (None, "input_frac", lambda c, k: GQ.MAX_FRAC_BITS + k, "input_frac"),
            (None, "error_bound", lambda c, k: -float(k), "error_bound"),
            (None, "scheme", lambda c, k: f"float{k}", "scheme")]


def test_the_committed_mlp_statement_parses_back(mlp_commitment):
    """Positive control, and the raw last layer (no ReLU, no shift) needs no decomposition width."""
    from proofs.layers.statement import ModelCommitment
    assert ModelCommitment.from_bytes(mlp_commitment.to_bytes()) == mlp_commitment
    assert mlp_commitment.layers[-1].decomposition is None


@pytest.mark.parametrize("name, value", [("relu", 2), ("relu", 1), ("q_bits", 8.5), ("acc_hi", True)])
def test_an_mlp_statement_object_with_a_field_no_parse_yields_is_refused(mlp_commitment, name, value):
    """A ModelCommitment handed in as an object (never parsed) is held to the parse's types by the one validator:
    integer fields, a boolean relu flag (a parse refuses relu=2; an object's must not change the statement)."""
    from proofs.layers.statement import ModelCommitment
    mlp_commitment.validate()  # positive control: the committed statement passes
    layers = (dataclasses.replace(mlp_commitment.layers[0], **{name: value}),) + mlp_commitment.layers[1:]
    with pytest.raises(ProofRejected, match=name) as info:
        dataclasses.replace(mlp_commitment, layers=layers).validate()
    assert info.value.where == "model commitment / layer 0"
    assert isinstance(ModelCommitment.from_bytes(mlp_commitment.to_bytes()).layers[0].relu, bool)


@FUZZ
@given(data=st.data(), k=st.integers(1, 1 << 20))
def test_every_mlp_statement_field_beyond_its_bound_is_refused_at_parse_time(mlp_commitment, data, k):
    """ModelCommitment.from_bytes (every MLP verifier's parse) refuses each mutation naming the layer and field."""
    from proofs.layers.statement import ModelCommitment
    layer, name, value, reason = data.draw(st.sampled_from(_layer_mutations(mlp_commitment)), label="mutation")
    c = mlp_commitment
    if layer is None:
        changed = dataclasses.replace(c, **{name: value(c, k)})
    else:
        info = c.layers[layer]
        layers = c.layers[:layer] + (dataclasses.replace(info, **{name: value(info, k)}),) + c.layers[layer + 1:]
        changed = dataclasses.replace(c, layers=layers)
    with pytest.raises(ProofRejected) as info:
        ModelCommitment.from_bytes(changed.to_bytes())
    error = info.value
    assert re.search(reason, error.reason), (name, error)
    assert error.where == ("model commitment" if layer is None else f"model commitment / layer {layer}"), error
