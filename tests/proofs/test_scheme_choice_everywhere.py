"""One default commitment for every command and API (issue 35, item 5): ``hezk commit`` (no ``--scheme``),
``hezk.commit`` and the provers' constructors (``Network(...)``, ``HidingGraphNetwork(...)``) all follow
:func:`proofs.pcs.choice.choose_scheme` -- hiding Basefold for a small hiding ReLU MLP, Ligero for graph models,
public weights and MLPs past the size limit -- and the command line and the API commit a given model with the
same proof and scheme."""
from __future__ import annotations

import numpy as np
import pytest

import hezk
from hezk.model import Activation, Contraction, Graph, save_npz
from proofs import inference
from proofs.cli import main
from proofs.errors import ModelError
from proofs.graph_quantize import quantize_graph
from proofs.layers.graph_zk import HidingGraphNetwork
from proofs.layers.network import Network
from proofs.pcs import choice
from proofs.pcs.choice import choose_scheme
from proofs.pcs.scheme import scheme_of
from proofs.quantize import quantize_fixed_point


def _graph(activation: str, seed: int = 3) -> Graph:
    """Gemm 6 -> 5, an activation ("relu": a ReLU MLP, the MLP proof's; "tanh": a graph model), Gemm 5 -> 3."""
    rng = np.random.default_rng(seed)
    return Graph("x", (6,), (
        Contraction("fc0", "Gemm", ("x",), "h", "bk,nk->bn", rng.normal(size=(5, 6)) * .5, rng.normal(size=5) * .1,
                    None, (5,)),
        Activation("act", activation.capitalize(), ("h",), "a", activation),
        Contraction("fc1", "Gemm", ("a",), "o", "bk,nk->bn", rng.normal(size=(3, 5)) * .5, rng.normal(size=3) * .1,
                    None, (3,))), "o")


def _chosen(commitment: bytes) -> tuple[str, str]:
    """(the proof: "mlp" or "graph", the weights' scheme name) of commitment bytes."""
    parsed = inference.read_commitment(commitment)
    return ("graph" if inference.is_graph_commitment(commitment) else "mlp"), scheme_of(parsed.weights.params).name


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    folder = tmp_path_factory.mktemp("schemes")
    paths = {name: folder / f"{name}.npz" for name in ("relu", "tanh")}
    for name, path in paths.items():
        save_npz(_graph(name), path)
    return folder, paths


CASES = [  # model, the command line's options, the API's, the choice
    ("relu", [], {}, ("mlp", "hiding-basefold")),
    ("relu", ["--public-weights"], {"hiding": False}, ("mlp", "ligero")),
    ("relu", ["--private-input"], {"private_input": True}, ("graph", "hiding-ligero")),
    ("relu", ["--scheme", "ligero"], {"scheme": "ligero"}, ("mlp", "hiding-ligero")),
    ("tanh", [], {}, ("graph", "hiding-ligero")),
    ("tanh", ["--public-weights"], {"hiding": False}, ("graph", "ligero")),
]


@pytest.mark.parametrize("name, cli_options, api_options, expected", CASES,
                         ids=[f"{c[0]}{''.join(c[1]) or '-default'}" for c in CASES])
def test_the_command_line_and_the_api_choose_the_same_proof_and_scheme(models, name, cli_options, api_options,
                                                                       expected):
    folder, paths = models
    out = folder / f"{name}{''.join(cli_options)}.bin"
    assert main(["commit", "--model", str(paths[name]), "--out", str(out), "--max-proofs", "2", "--quiet",
                 *cli_options]) == 0
    prover = hezk.commit(str(paths[name]), max_proofs=2, **api_options)
    assert _chosen(out.read_bytes()) == _chosen(prover.commitment) == expected
    assert (prover.strategy, prover.scheme) == (expected[0], expected[1].removeprefix("hiding-"))


def test_the_api_default_proof_of_a_small_mlp_is_the_smaller(models):
    """The default (hiding Basefold) proof of a ReLU MLP is smaller than the Ligero one (positive control: both
    verify)."""
    _, paths = models
    x = np.random.default_rng(1).uniform(-1, 1, (1, 6))
    sizes = {}
    for scheme in ("auto", "ligero"):
        prover = hezk.commit(str(paths["relu"]), max_proofs=1, scheme=scheme)
        proof = prover.prove(x)
        assert hezk.verify(prover.commitment, x, proof)
        sizes[scheme] = len(proof)
    assert sizes["auto"] < 0.7 * sizes["ligero"], sizes  # 6->5->3, one copy: 90 kB against 164 kB


def test_the_constructors_default_to_the_rule():
    model = quantize_fixed_point([np.ones((4, 6)) * .1, np.ones((3, 4)) * .1], [np.zeros(4), np.zeros(3)])
    assert scheme_of(Network(model, max_proofs=1).commitment.weights.params).name == "hiding-basefold"
    assert scheme_of(Network(model, zk=False).commitment.weights.params).name == "ligero"
    assert scheme_of(Network(model, "auto", max_proofs=1).commitment.weights.params).name == "hiding-basefold"
    q = quantize_graph(_graph("tanh"), np.random.default_rng(0).uniform(-1, 1, (16, 6)))
    assert scheme_of(HidingGraphNetwork(q, max_proofs=1).commitment.weights.params).name == "hiding-ligero"


def test_every_caller_reads_the_one_limit(models, monkeypatch):
    """With the size limit lowered below this MLP's parameters x copies, the command line, the API and the
    constructor all fall back to Ligero: they read the same rule (no second copy of it)."""
    folder, paths = models
    model = quantize_fixed_point([np.ones((4, 6)) * .1, np.ones((3, 4)) * .1], [np.zeros(4), np.zeros(3)])
    monkeypatch.setattr(choice, "AUTO_BASEFOLD_MAX_PARAMETER_COPIES", model.num_parameters)  # 1 copy fits, 2 do not
    assert scheme_of(Network(model, max_proofs=1).commitment.weights.params).name == "hiding-basefold"
    assert scheme_of(Network(model, max_proofs=2).commitment.weights.params).name == "hiding-ligero"
    monkeypatch.setattr(choice, "AUTO_BASEFOLD_MAX_PARAMETER_COPIES", 10)
    out = folder / "limited.bin"
    assert main(["commit", "--model", str(paths["relu"]), "--out", str(out), "--max-proofs", "2", "--quiet"]) == 0
    assert _chosen(out.read_bytes()) == ("mlp", "hiding-ligero")
    assert _chosen(hezk.commit(str(paths["relu"]), max_proofs=2).commitment) == ("mlp", "hiding-ligero")


@pytest.mark.parametrize("scheme, strategy, hiding, copies, expected", [
    (None, "mlp", True, 0, "basefold"), ("auto", "mlp", True, 1 << 17, "basefold"),
    ("auto", "mlp", True, (1 << 17) + 1, "ligero"), ("auto", "mlp", False, 0, "ligero"),
    ("auto", "graph", True, 0, "ligero"), ("basefold", "graph", True, 0, "basefold"),
    ("ligero", "mlp", True, 0, "ligero"), ("basefold", "mlp", True, 1 << 30, "basefold")])
def test_choose_scheme(scheme, strategy, hiding, copies, expected):
    assert choose_scheme(scheme, strategy=strategy, hiding=hiding, parameter_copies=copies) == expected


@pytest.mark.parametrize("options, match", [({"scheme": "stark"}, "scheme='stark'"),
                                            ({"strategy": "cnn"}, "strategy='cnn'")])
def test_choose_scheme_refuses_unknown_names(options, match):
    arguments = {"scheme": "auto", "strategy": "mlp", "hiding": True, **options}
    with pytest.raises(ModelError, match=match):
        choose_scheme(arguments.pop("scheme"), **arguments)


@pytest.mark.parametrize("scheme", ["ligero", "basefold"])
def test_a_public_mlp_prover_is_loaded_from_its_commitment(models, scheme):
    """``Prover.load`` of an MLP-proof commitment (public weights, either scheme): proofs verify; another model's
    weights are refused."""
    _, paths = models
    x = np.random.default_rng(1).uniform(-1, 1, (1, 6))
    first = hezk.commit(str(paths["relu"]), hiding=False, scheme=scheme)
    later = hezk.Prover.load(str(paths["relu"]), first.commitment)
    assert (later.strategy, later.scheme) == ("mlp", scheme)
    assert hezk.verify(first.commitment, x, later.prove(x))
    with pytest.raises(ModelError, match="not of this model's weights"):
        hezk.Prover.load(_graph("relu", seed=4), first.commitment)
