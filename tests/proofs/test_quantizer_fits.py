"""The quantizers make only statements their own validator (the one every verifier runs) accepts, and ``commit``
parses its commitment back through that validator before it writes anything.

The MLP statement's rule is per layer kind: a layer proved by a bit decomposition (ReLU or a shift) needs
shift + q_bits <= FIELD_BITS; a raw-accumulator layer's output is its accumulator, range-checked in [acc_lo, acc_hi]
within (p-1)/2, so its q_bits (the signed width of that interval) may reach FIELD_BITS + 1. The validator used to
demand shift + q_bits <= 30 of every layer, so commit wrote a 1.07M-parameter MLP whose prove then failed
("layer 2: shift 0 + q_bits 31 not within [1, 30]")."""
from __future__ import annotations

import numpy as np
import pytest

import proofs.graph_quantize as GQ
from proofs.cli import main
from proofs.errors import ModelError, ProofRejected
from proofs.layers import statement
from proofs.layers.graph import GraphCommitment
from proofs.layers.graph_zk import HidingGraphCommitment
from proofs.layers.network import Network
from proofs.layers.statement import ModelCommitment
from proofs.quantize import FIELD_BITS, quantize_fixed_point

onnx = pytest.importorskip("onnx")
from tests.model import onnx_models as M  # noqa: E402


def _commit(tmp_path, model, *flags) -> tuple:
    path = tmp_path / "model.onnx"
    onnx.save(model, str(path))
    out = tmp_path / "c.bin"
    code = main(["commit", "--model", str(path), "--out", str(out), *flags])
    return code, out


@pytest.mark.parametrize("sizes, flags", [((64, 32, 10), ("--public-weights",)), ((784, 64, 10), ()),
                                          ((32, 256, 64, 4), ("--public-weights",))])
def test_commit_writes_mlp_statements_that_parse_back(sizes, flags, tmp_path):
    code, out = _commit(tmp_path, M.mlp(sizes, "relu", seed=len(sizes)), *flags)
    assert code == 0
    commitment = ModelCommitment.from_bytes(out.read_bytes())
    assert [info.out_features for info in commitment.layers] == list(sizes[1:])


def test_a_raw_accumulator_of_31_signed_bits_is_a_valid_statement_and_a_decomposed_one_is_not():
    """W = 1 (4 inputs, 2^8 each), |x| <= 3000: |acc| <= 2^18 * 3000 ~ 2^29.6, 31 signed bits, within (p-1)/2. The
    raw last layer parses (it failed before); the same width on a requantized ReLU layer is refused, naming it."""
    model = quantize_fixed_point([np.ones((3, 4))], [np.zeros(3)], frac_bits=8, input_bound=3000.0, relus=[False])
    commitment = Network(model, zk=False).commitment
    (info,) = commitment.layers
    assert info.decomposition is None and info.q_bits == FIELD_BITS + 1
    assert ModelCommitment.from_bytes(commitment.to_bytes()) == commitment
    relu = ModelCommitment(commitment.scheme, commitment.input_frac, commitment.input_bound, commitment.error_bound,
                           (type(info)(*[getattr(info, f) for f in info.__dataclass_fields__][:5], True,
                                       info.q_bits, info.acc_lo, info.acc_hi),), commitment.weights)
    with pytest.raises(ProofRejected, match=r"^model commitment / layer 0: shift 0 \+ q_bits 31 not within"):
        ModelCommitment.from_bytes(relu.to_bytes())


def test_commit_refuses_a_statement_the_verifiers_refuse_before_writing(tmp_path, monkeypatch, capsys):
    """With the validator's size limit lowered below the model, commit exits 2 naming the layer and what to change,
    and writes neither the commitment nor a state."""
    monkeypatch.setattr(statement, "MAX_LAYER_ENTRIES", 64)
    code, out = _commit(tmp_path, M.mlp((16, 8, 4), "relu"), "--public-weights")
    assert code == 2 and not out.exists() and not (tmp_path / "c.bin.state").exists()
    err = capsys.readouterr().err
    assert "layer 0" in err and "MAX_LAYER_ENTRIES" in err and "nothing was written" in err


@pytest.mark.parametrize("flags, kind", [(("--public-weights",), GraphCommitment), ((), HidingGraphCommitment)])
def test_commit_writes_graph_statements_that_parse_back(flags, kind, tmp_path):
    code, out = _commit(tmp_path, M.residual_block(), *flags)
    assert code == 0
    assert isinstance(kind.from_bytes(out.read_bytes()).structure, GQ.QuantizedGraph)


def test_the_graph_quantizer_refuses_what_the_validator_refuses(tmp_path, monkeypatch):
    """quantize_graph runs validate_structure: a model beyond a limit is a ModelError naming the op or tensor."""
    from hezk.model import read_onnx
    path = tmp_path / "m.onnx"
    onnx.save(M.mlp((16, 8, 4), "relu"), str(path))
    graph = read_onnx(str(path))
    monkeypatch.setattr(GQ, "MAX_TENSOR_ENTRIES", 64)
    with pytest.raises(ModelError, match="not a valid statement .*MAX_TENSOR_ENTRIES"):
        GQ.quantize_graph(graph, np.zeros((2, 16)))


@pytest.mark.slow
def test_the_issue_model_1_07m_parameters_commits_and_parses_back(tmp_path):
    """784 -> 1024 -> 256 -> 10 Gemm + Relu (1.07M parameters): its raw last layer needs 31 signed bits."""
    code, out = _commit(tmp_path, M.mlp((784, 1024, 256, 10), "relu"), "--public-weights")
    assert code == 0
    commitment = ModelCommitment.from_bytes(out.read_bytes())
    assert commitment.layers[-1].decomposition is None and commitment.layers[-1].q_bits <= FIELD_BITS + 1
