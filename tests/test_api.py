"""The one-liners from the user's model (hezk.api) and hezk.from_torch.

from_torch: a torch module exported to ONNX in memory by either exporter reads as a Graph whose float forward is
the module's (in eval mode, restored after); the default exporter failing falls back to TorchScript with a
warning; no torch gives an ImportError naming ``pip install torch``. compile + infer: the decrypted output is the
float model's within the fitted activations' stated error on the calibration inputs (plus CKKS noise). commit +
prove + verify: an honest proof is accepted with the float model's output to the quantization's error; a proof
with another output, for another input or under another commitment is rejected.
"""
import dataclasses
import io
import pathlib
import sys
import warnings

import numpy as np
import pytest
from hypothesis import example, given, strategies as st

torch = pytest.importorskip("torch")

import hezk  # noqa: E402
from hezk.api import as_graph  # noqa: E402
from hezk.model import ModelFileError  # noqa: E402
from hezk.model.torch_export import TorchExportWarning, TorchMissing, from_torch  # noqa: E402
from proofs import ModelError, ProofRejected  # noqa: E402
from proofs.layers.graph_zk import HidingGraphProof  # noqa: E402

CKKS_NOISE = 1e-4  # far above 36 bits of precision on outputs of magnitude < 10


def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))


def _cnn():
    torch.manual_seed(1)
    return torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3, padding=1), torch.nn.BatchNorm2d(2), torch.nn.ReLU(),
                               torch.nn.AvgPool2d(2), torch.nn.Flatten(), torch.nn.Linear(2 * 3 * 3, 4))


MODELS = {"mlp": (_mlp, (8,)), "cnn": (_cnn, (1, 6, 6))}


@pytest.fixture(scope="module")
def inputs():
    rng = np.random.default_rng(0)
    return {name: rng.uniform(-1, 1, (16, *shape)).astype(np.float32) for name, (_, shape) in MODELS.items()}


def _float(net, x):
    with torch.no_grad():
        return net.eval()(torch.as_tensor(x, dtype=torch.float32)).numpy()


@pytest.mark.parametrize("dynamo", [True, False], ids=["dynamo", "torchscript"])
@pytest.mark.parametrize("name", list(MODELS))
def test_from_torch_graph_computes_the_module(name, dynamo, inputs):
    net, x = MODELS[name][0](), inputs[name]
    net.train()  # exported in eval mode (BatchNorm's running statistics), the mode restored after
    graph = from_torch(net, x[:1], dynamo=dynamo)
    assert net.training
    assert graph.input_shape == MODELS[name][1]
    np.testing.assert_allclose(graph.forward(x), _float(net, x), atol=1e-5)


def test_from_torch_falls_back_to_torchscript_with_a_warning(monkeypatch, inputs):
    """The default exporter failing (e.g. no onnxscript) -> the TorchScript one, said in a TorchExportWarning."""
    export = torch.onnx.export

    def default_fails(*args, **options):
        if options.get("dynamo") is not False:
            raise ModuleNotFoundError("No module named 'onnxscript'")
        return export(*args, **options)

    monkeypatch.setattr(torch.onnx, "export", default_fails)
    net, x = _mlp(), inputs["mlp"]
    with pytest.warns(TorchExportWarning, match="onnxscript.*TorchScript exporter"):
        graph = from_torch(net, x)
    np.testing.assert_allclose(graph.forward(x), _float(net, x), atol=1e-5)
    with warnings.catch_warnings():  # control: the default exporter working needs no fallback
        warnings.simplefilter("error", TorchExportWarning)
        monkeypatch.setattr(torch.onnx, "export", export)
        from_torch(net, x)


def test_from_torch_without_torch_names_the_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` raises ImportError
    with pytest.raises(TorchMissing, match="pip install torch") as caught:
        from_torch(object(), np.zeros((1, 8)))
    assert isinstance(caught.value, ImportError)


@pytest.mark.parametrize("module, example, match", [
    ("not a module", np.zeros((1, 8)), "module must be a torch.nn.Module"),
    (None, np.array([["a"]]), "example_input must be a non-empty array of numbers"),
    (None, (), "example_input must be a tensor"),
])
def test_from_torch_refuses_what_is_no_model(module, example, match):
    with pytest.raises(ModelFileError, match=match):
        from_torch(_mlp() if module is None else module, example)
    with pytest.raises(ModelFileError, match="dynamo="):
        from_torch(_mlp(), np.zeros((1, 8)), dynamo="yes")


class _Sine(torch.nn.Module):
    def forward(self, x):
        return torch.sin(x)


def test_an_operator_the_reader_does_not_cover_is_named():
    with pytest.raises(hezk.model.UnsupportedOperator, match="Sin"):
        from_torch(_Sine(), torch.zeros(1, 8))


# -- encrypted inference ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def compiled(inputs):
    return {name: hezk.compile(MODELS[name][0](), calibration=inputs[name]) for name in MODELS}


@pytest.mark.parametrize("name", list(MODELS))
def test_compile_and_infer_match_the_float_model(name, compiled, inputs):
    model, x = compiled[name], inputs[name]
    result = model.infer(x[:3])
    expected = _float(MODELS[name][0](), x[:3])
    np.testing.assert_allclose(result.float_output, expected, atol=1e-5)
    stated = model.calibration_error[1]  # the fitted activations' max error on the calibration inputs
    assert result.max_error == pytest.approx(np.abs(result.output - result.float_output).max())
    assert result.max_error <= stated + CKKS_NOISE
    assert np.asarray(result).shape == (3, *expected.shape[1:]) and result.precision_bits > 30
    one = model.infer(x[0])  # one sample in, one out
    assert one.output.shape == expected.shape[1:]
    assert "encrypted inference plan" in str(model.plan)


def test_compile_takes_every_form_of_the_same_model(tmp_path, compiled, inputs):
    """A torch module, its ONNX file, its ONNX bytes and its Graph compile to one model (one digest)."""
    graph = compiled["mlp"].graph
    exported = from_torch(_mlp(), inputs["mlp"], dynamo=False)  # another export of the same weights
    path = tmp_path / "m.onnx"
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.onnx.export(_mlp().eval(), (torch.as_tensor(inputs["mlp"][:1]),), buffer, dynamo=False)
    path.write_bytes(buffer.getvalue())
    digests = {as_graph(form).digest() for form in (str(path), path, buffer.getvalue(), graph)}
    assert len(digests) == 1 and exported.digest() in digests
    client = compiled["mlp"].client()
    server = compiled["mlp"].server(client.public_context())
    y = client.decrypt(server.evaluate(client.encrypt(inputs["mlp"][:2])))
    np.testing.assert_allclose(y, graph.forward(inputs["mlp"][:2]), atol=compiled["mlp"].calibration_error[1] + 1e-4)


@pytest.mark.parametrize("model, options, match", [
    (42, {}, "model must be a path"),
    ("no-such-model.onnx", {}, "cannot be read"),
    ("torch", {}, "pass calibration= .*or input_shape="),
    ("torch", {"calibration": np.zeros((4, 5))}, r"example_input of shape \(1, 5\)"),
    ("torch", {"calibration": np.full((4, 8), np.nan)}, "must be finite"),
])
def test_compile_and_commit_refuse_bad_input_naming_it(model, options, match):
    model = _mlp() if model == "torch" else model
    for one_liner in (hezk.compile, hezk.commit):
        with pytest.raises(ModelFileError, match=match):
            one_liner(model, **options)


@given(st.one_of(st.text(max_size=40), st.binary(max_size=40), st.integers(), st.floats(), st.none(),
                 st.lists(st.integers(), max_size=4), st.dictionaries(st.text(max_size=4), st.integers(), max_size=3)))
@example("model\x00.onnx")  # open() raises ValueError for a NUL byte: it escaped hezk.model.load before
def test_anything_that_is_no_model_is_refused_as_such(value):
    """Paths that name no model file (a NUL byte included), bytes that are no ONNX, other objects: ModelFileError."""
    with pytest.raises(ModelFileError):
        as_graph(value)


def test_infer_refuses_an_input_of_another_shape(compiled):
    with pytest.raises(ModelFileError, match=r"x of shape \(2, 5\)"):
        compiled["mlp"].infer(np.zeros((2, 5)))


# -- proofs -----------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def provers(inputs):
    return {name: hezk.commit(MODELS[name][0](), calibration=inputs[name], max_proofs=6) for name in MODELS}


@pytest.mark.parametrize("name", list(MODELS))
def test_commit_prove_verify_accepts_the_honest_proof(name, provers, inputs):
    prover, x = provers[name], inputs[name][:2]
    proof = hezk.prove(prover, x)
    result = hezk.verify(prover.commitment, x, proof)
    assert result and result.zero_knowledge and result.soundness_bits >= 100
    expected = _float(MODELS[name][0](), x)
    error = np.abs(result.output.reshape(expected.shape) - expected).max()
    assert error <= 4 * prover.error_report["max_error"] + 2.0 ** -result.output_frac
    assert prover.proofs_left == 5


def test_a_proof_of_another_output_input_or_commitment_is_rejected(provers, inputs):
    prover, x = provers["cnn"], inputs["cnn"][:1]  # the graph proof (a ReLU MLP takes the MLP proof: below)
    proof = prover.prove(x)
    assert hezk.verify(prover.commitment, x, proof)  # positive control
    parsed = HidingGraphProof.from_bytes(proof)
    forged = dataclasses.replace(parsed, output=parsed.output + 1).to_bytes()
    with pytest.raises(ProofRejected):
        hezk.verify(prover.commitment, x, forged)  # a wrong output
    with pytest.raises(ProofRejected):
        hezk.verify(prover.commitment, inputs["cnn"][1:2], proof)  # another input
    with pytest.raises(ProofRejected):
        hezk.verify(provers["mlp"].commitment, x, proof)  # another model's commitment
    flipped = bytearray(proof)
    flipped[len(flipped) // 2] ^= 1
    with pytest.raises(ProofRejected):
        hezk.verify(prover.commitment, x, bytes(flipped))
    for commitment, proof_value in ((prover.commitment.decode("latin-1"), proof), (prover.commitment, None)):
        with pytest.raises(ProofRejected, match="must be bytes"):
            hezk.verify(commitment, x, proof_value)


def test_an_mlp_proof_of_another_input_or_commitment_is_rejected(provers, inputs):
    """The ReLU MLP's default proof (the MLP proof, hiding Basefold): accepted, and rejected for another input,
    another model's commitment or a flipped byte."""
    prover, x = provers["mlp"], inputs["mlp"][:1]
    assert (prover.strategy, prover.scheme) == ("mlp", "basefold")
    proof = prover.prove(x)
    assert hezk.verify(prover.commitment, x, proof)  # positive control
    with pytest.raises(ProofRejected):
        hezk.verify(prover.commitment, inputs["mlp"][1:2], proof)
    with pytest.raises(ProofRejected):
        hezk.verify(provers["cnn"].commitment, x, proof)
    flipped = bytearray(proof)
    flipped[len(flipped) // 2] ^= 1
    with pytest.raises(ProofRejected):
        hezk.verify(prover.commitment, x, bytes(flipped))


def test_private_input_and_public_weights(inputs):
    x = inputs["mlp"][:1]
    prover = hezk.commit(_mlp(), calibration=inputs["mlp"], max_proofs=1, private_input=True)  # the graph proof
    hidden = hezk.verify(prover.commitment, None, prover.prove(x, private_input=True))
    assert hidden.private_input and hidden.output.shape == (1, 3)
    public = hezk.commit(_mlp(), calibration=inputs["mlp"], hiding=False)
    result = hezk.verify(public.commitment, x, public.prove(x))
    assert result and not result.zero_knowledge
    with pytest.raises(ProofRejected, match="states its input|private input"):
        hezk.verify(public.commitment, None, public.prove(x))
    with pytest.raises(ModelError, match="hiding commitment"):
        public.prove(x, private_input=True)


@pytest.mark.parametrize("options, match", [({"scheme": "stark"}, "scheme="), ({"hiding": 1}, "hiding="),
                                            ({"private_input": "yes"}, "private_input="),
                                            ({"private_input": True, "hiding": False}, "hiding=True")])
def test_commit_refuses_unknown_options(options, match, inputs):
    with pytest.raises(ModelError, match=match):
        hezk.commit(_mlp(), calibration=inputs["mlp"], **options)


def test_commit_refuses_public_basefold_graph_commitments(inputs):
    with pytest.raises(ModelError, match="hiding=True"):
        hezk.commit(_cnn(), calibration=inputs["cnn"], scheme="basefold", hiding=False)


def test_verify_takes_the_mlp_commitments_of_the_command_line(tmp_path, inputs):
    """``hezk commit`` proves a ReLU MLP chain by the MLP path (a model commitment): hezk.verify checks those too."""
    from proofs.cli import main

    x = inputs["mlp"][:1].astype(np.float64)
    model, c, proof = (str(tmp_path / name) for name in ("m.onnx", "c.bin", "p.bin"))
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.onnx.export(_mlp().eval(), (torch.as_tensor(inputs["mlp"][:1]),), buffer, dynamo=False)
    pathlib.Path(model).write_bytes(buffer.getvalue())
    np.save(tmp_path / "x.npy", x)
    assert main(["commit", "--model", model, "--out", c, "--max-proofs", "2"]) == 0
    assert main(["prove", "--model", model, "--commitment", c, "--input", str(tmp_path / "x.npy"), "--out", proof,
                 "--quiet"]) == 0
    commitment, data = pathlib.Path(c).read_bytes(), pathlib.Path(proof).read_bytes()
    result = hezk.verify(commitment, x, data)
    assert result and result.zero_knowledge and result.soundness_bits >= 100
    np.testing.assert_allclose(result.output, _float(_mlp(), x), atol=0.35)  # commit's stated worst case: 0.331
    with pytest.raises(ProofRejected):
        hezk.verify(commitment, inputs["mlp"][1:2], data)  # another input
    with pytest.raises(ProofRejected, match="private input"):
        hezk.verify(commitment, None, data)


def test_a_saved_prover_proves_on_in_another_session(tmp_path, inputs):
    """save_state, then Prover.load(model, commitment, state): proofs verify; the copies already used stay spent;
    a state for other weights or none is refused."""
    x = inputs["mlp"][:1]
    first = hezk.commit(_mlp(), calibration=inputs["mlp"], max_proofs=3)
    first.save_state(tmp_path / "s.state")
    assert hezk.verify(first.commitment, x, first.prove(x))  # control, before the state moves on
    later = hezk.Prover.load(_mlp(), first.commitment, tmp_path / "s.state")
    assert later.proofs_left == 2  # the copy the first session used after saving is spent (the state's journal)
    result = hezk.verify(first.commitment, x, later.prove(x))
    assert later.proofs_left == 1
    np.testing.assert_allclose(result.output, _float(_mlp(), x), atol=4 * first.error_report["max_error"] + 1e-3)
    other = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
    with pytest.raises(ModelError):
        hezk.Prover.load(other, first.commitment, tmp_path / "s.state")
    with pytest.raises(ModelError, match="prover state"):
        hezk.Prover.load(_mlp(), first.commitment)
