"""The default commitment is the smaller proof at the soundness floor: ``commit`` without ``--scheme`` (auto)
commits a hiding ReLU MLP with Basefold, whose proof is smaller than Ligero's and verifies; ``--scheme ligero``
still chooses Ligero; a graph model and public weights stay on Ligero (measured smaller there)."""
from __future__ import annotations

import numpy as np
import pytest

from proofs.cli import commit_scheme, main
from proofs.cli_args import build_parser
from proofs.layers.network import ModelCommitment
from proofs.layers.network_zk import is_basefold
from proofs.layers.reusable import base_params
from proofs.model import save_model
from proofs.quantize import quantize_fixed_point

from .test_cli import float_weights


def _run(*args) -> int:
    return main([str(a) for a in args])


@pytest.fixture
def mlp_files(tmp_path):
    weights, biases = float_weights(0, (16, 16, 4))
    save_model(tmp_path / "model.npz", quantize_fixed_point(weights, biases, frac_bits=8))
    np.save(tmp_path / "x.npy", np.random.default_rng(1).uniform(-1, 1, (1, 16)))
    return tmp_path


def _commit_prove_verify(path, name: str, *scheme) -> tuple[ModelCommitment, int]:
    commitment, proof = path / f"{name}.bin", path / f"{name}.proof"
    assert _run("commit", "--model", path / "model.npz", "--out", commitment, "--max-proofs", 2, *scheme) == 0
    assert _run("prove", "--model", path / "model.npz", "--input", path / "x.npy", "--commitment", commitment,
                "--out", proof, "--quiet") == 0
    assert _run("verify", "--commitment", commitment, "--input", path / "x.npy", "--proof", proof) == 0
    return ModelCommitment.from_bytes(commitment.read_bytes()), proof.stat().st_size


def test_the_default_commitment_is_hiding_basefold_and_its_proof_the_smaller(mlp_files, capsys):
    default, default_size = _commit_prove_verify(mlp_files, "default")
    ligero, ligero_size = _commit_prove_verify(mlp_files, "ligero", "--scheme", "ligero")  # positive control
    assert default.zk and is_basefold(base_params(default.weights))
    assert ligero.zk and not is_basefold(base_params(ligero.weights))
    assert default_size < ligero_size / 2, (default_size, ligero_size)  # 16->16->4: ~92 kB against ~250 kB
    assert "hiding basefold commitment" in capsys.readouterr().out


def test_auto_resolves_per_path():
    assert build_parser("commit").parse_args(["commit", "--model", __file__]).scheme == "auto"
    assert commit_scheme("auto", graph=False, hiding=True) == "basefold"
    assert commit_scheme(None, graph=True, hiding=True) == "ligero"      # a small CNN: 436 kB against 3.7 MB
    assert commit_scheme("auto", graph=False, hiding=False) == "ligero"  # public weights
    assert commit_scheme("ligero", graph=False, hiding=True) == "ligero"  # --scheme chooses
    # a larger MLP: Basefold's hiding commitment and state grow ~40x faster than Ligero's (1.1 GB at 784-64-10)
    assert commit_scheme("auto", graph=False, hiding=True, parameter_copies=50890 * 16) == "ligero"
    assert commit_scheme("basefold", graph=False, hiding=True, parameter_copies=50890 * 16) == "basefold"
