"""One model file format (``hezk.model``'s ``.npz``, beside ONNX) read by every proofs command: the quantized-MLP
format of ``proofs.model.save_model`` (``hezk.qmlp``) is still read for one release, with a DeprecationWarning
naming the replacement, on writing and on reading, and the command line shows the note on stderr; a hezk.model
file is read without one."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import hezk.model
from proofs.cli import main
from proofs.model import load_model, save_model
from proofs.quantize import quantize_fixed_point


def _layers(seed=0):
    rng = np.random.default_rng(seed)
    return [rng.normal(0, 0.4, (5, 6)), rng.normal(0, 0.4, (3, 5))], [rng.normal(0, 0.1, 5), rng.normal(0, 0.1, 3)]


def test_the_quantized_mlp_format_is_read_with_a_deprecation_warning(tmp_path):
    weights, biases = _layers()
    model = quantize_fixed_point(weights, biases, frac_bits=6)
    with pytest.warns(DeprecationWarning, match="hezk.model.save_npz"):
        save_model(tmp_path / "q.npz", model)
    with pytest.warns(DeprecationWarning, match="read for one more release"):
        again = load_model(tmp_path / "q.npz")
    assert [np.array_equal(a.weight, b.weight) for a, b in zip(again.layers, model.layers)] == [True, True]


def test_the_one_format_is_read_without_a_warning(tmp_path):
    """A hezk.model.save_npz file of a ReLU MLP is read by the MLP strategy, the graph reader and the commands."""
    weights, biases = _layers()
    np.savez(tmp_path / "named.npz", w0=weights[0], b0=biases[0], w1=weights[1], b1=biases[1], activation="relu")
    hezk.model.save_npz(hezk.model.load(str(tmp_path / "named.npz")), tmp_path / "m.npz")
    np.save(tmp_path / "x.npy", np.random.default_rng(1).uniform(-1, 1, (2, 6)))
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        assert len(load_model(tmp_path / "m.npz").layers) == 2
        assert main(["commit", "--model", tmp_path / "m.npz", "--out", tmp_path / "c.bin", "--public-weights",
                     "--quiet"]) == 0
        assert main(["prove", "--model", tmp_path / "m.npz", "--commitment", tmp_path / "c.bin", "--input",
                     tmp_path / "x.npy", "--out", tmp_path / "p.bin", "--public-weights", "--quiet"]) == 0
        assert main(["verify", "--commitment", tmp_path / "c.bin", "--input", tmp_path / "x.npy", "--proof",
                     tmp_path / "p.bin"]) == 0


def test_the_command_line_shows_the_deprecation(tmp_path, capsys):
    weights, biases = _layers()
    with pytest.warns(DeprecationWarning):
        save_model(tmp_path / "q.npz", quantize_fixed_point(weights, biases, frac_bits=6))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the default of a user's process: DeprecationWarnings hidden
        assert main(["commit", "--model", tmp_path / "q.npz", "--out", tmp_path / "c.bin", "--public-weights",
                     "--quiet"]) == 0
    assert "deprecated" in capsys.readouterr().err
