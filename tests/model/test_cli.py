"""The command-line contract of issue 12: one model file means one network to every command of both halves.

``python -m tensor_ops infer --model M.onnx`` decrypts the shape onnxruntime gives, within 1e-3 of the
output's largest magnitude (Square MLP); ``plan`` prints the per-layer einsums, rotations, key bytes, depth,
parameters and the model digest; ``python -m proofs commit | prove | verify --model M.onnx`` proves a ReLU
MLP and refuses by operator name what it cannot prove; a file of bare weights is refused by both (exit 2).
"""
from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys

import numpy as np
import onnx
import pytest

import hezk.cli
from proofs import cli as proofs_cli
from tensor_ops import cli as tensor_cli
from tests.model.onnx_models import lenet, mlp, residual_block, run_onnx

pytest.importorskip("onnxruntime")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def python_m(module, *args, cwd):
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, "-m", module, *map(str, args)], cwd=cwd, capture_output=True, text=True,
                          timeout=300, env=env)


def test_tensor_ops_infer_on_an_onnx_square_mlp_agrees_with_onnxruntime(tmp_path):
    model = mlp((20, 12, 10), "square", seed=3)
    onnx.save(model, tmp_path / "m.onnx")
    x = np.random.default_rng(0).uniform(-1, 1, (3, 20)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    result = python_m("tensor_ops", "infer", "--model", "m.onnx", "--input", "x.npy", "--out", "y.npy", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    y, want = np.load(tmp_path / "y.npy"), run_onnx(model, x)
    assert y.shape == want.shape == (3, 10) and y.dtype.kind == "f"
    assert np.max(np.abs(y - want)) <= 1e-3 * np.max(np.abs(want))


def test_tensor_ops_plan_prints_einsums_rotations_keys_depth_parameters_and_digest(tmp_path, capsys):
    onnx.save(mlp((20, 12, 10), "square"), tmp_path / "m.onnx")
    assert tensor_cli.main(["plan", "--model", str(tmp_path / "m.onnx")]) == 0
    text = capsys.readouterr().out
    for words in ("einsum 'bi,oi->bo'", "rotation keys", "MiB", "depth 3", "parameters: CKKSParameters",
                  "polynomial square", "model digest"):
        assert words in text, words
    assert hezk.cli.main(["plan", "--model", str(tmp_path / "m.onnx")]) == 0  # the hezk script too


def test_a_lenet_onnx_lowers_to_the_encrypted_models_layers_exactly(tmp_path):
    from tensor_ops.nn import Sequential

    onnx.save(lenet("square"), tmp_path / "lenet.onnx")
    model = Sequential.load(tmp_path / "lenet.onnx")
    assert [layer.kind for layer in model.layers][:3] == ["conv2d", "activation", "avgpool2d"]
    x = np.random.default_rng(1).uniform(0, 1, (2, 1, 28, 28))
    want = run_onnx(lenet("square"), x)
    np.testing.assert_allclose(model.forward_layers(x), want, atol=1e-4 * np.abs(want).max())


def test_bare_weights_are_refused_by_both_halves(tmp_path, capsys):
    rng = np.random.default_rng(2)
    np.savez(tmp_path / "m.npz", w0=rng.normal(size=(5, 4)), b0=rng.normal(size=5), w1=rng.normal(size=(3, 5)),
             b1=rng.normal(size=3))
    np.save(tmp_path / "x.npy", rng.uniform(-1, 1, (2, 4)))
    runs = [(tensor_cli.main, ["plan", "--model", "m.npz"]),
            (tensor_cli.main, ["infer", "--model", "m.npz", "--input", "x.npy", "--out", "y.npy"]),
            (proofs_cli.main, ["commit", "--model", "m.npz", "--out", "c.bin", "--public-weights"]),
            (proofs_cli.main, ["prove", "--model", "m.npz", "--input", "x.npy", "--public-weights"])]
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        for main, argv in runs:
            assert main(argv) == 2, argv
            err = capsys.readouterr().err
            assert "names no activation" in err and "activation='relu'" in err and "Traceback" not in err, argv
    finally:
        os.chdir(cwd)
    assert not (tmp_path / "c.bin").exists() and not (tmp_path / "y.npy").exists()


def test_a_file_that_names_its_activation_means_the_same_network_to_both_halves(tmp_path, capsys):
    rng = np.random.default_rng(3)
    arrays = dict(w0=rng.normal(0, .3, (5, 4)), b0=rng.normal(0, .1, 5), w1=rng.normal(0, .3, (3, 5)),
                  b1=rng.normal(0, .1, 3))
    np.savez(tmp_path / "relu.npz", activation="relu", **arrays)
    np.savez(tmp_path / "square.npz", activation="square", **arrays)
    assert tensor_cli.main(["plan", "--model", str(tmp_path / "relu.npz")]) == 0
    assert "polynomial relu" in capsys.readouterr().out
    assert tensor_cli.main(["plan", "--model", str(tmp_path / "square.npz")]) == 0
    assert "polynomial square" in capsys.readouterr().out
    from proofs.model import load_model
    assert [layer.relu for layer in load_model(tmp_path / "relu.npz").layers] == [True, False]
    np.savez(tmp_path / "sigmoid.npz", activation="sigmoid", **arrays)  # a sigmoid is proven by a lookup
    assert proofs_cli.main(["commit", "--model", str(tmp_path / "sigmoid.npz"), "--out", str(tmp_path / "c.bin"),
                            "--public-weights"]) == 0


def test_proofs_commit_prove_verify_an_onnx_relu_mlp(tmp_path, capsys):
    onnx.save(mlp((12, 8, 4), "relu", seed=4), tmp_path / "m.onnx")
    np.save(tmp_path / "x.npy", np.random.default_rng(4).uniform(-1, 1, (2, 12)))
    steps = [("commit", "--model", "m.onnx", "--out", "c.bin", "--state", "c.bin.state"),
             ("prove", "--model", "m.onnx", "--input", "x.npy", "--commitment", "c.bin", "--out", "p.bin", "--quiet"),
             ("verify", "--commitment", "c.bin", "--input", "x.npy", "--proof", "p.bin")]
    with contextlib.chdir(tmp_path):
        assert [proofs_cli.main(list(step)) for step in steps] == [0] * len(steps)
    assert capsys.readouterr().out.strip().endswith("accept")


def test_proving_with_another_model_than_the_committed_one_names_both_files(tmp_path, capsys):
    """prove --model of another network than the commitment's: exit 2 naming the commitment, the model and the fix
    (was: "like= is the quantized structure of another model"), nothing written."""
    from tests.model.onnx_models import lenet

    onnx.save(lenet("relu", seed=1), tmp_path / "a.onnx")
    onnx.save(lenet("relu", seed=5), tmp_path / "b.onnx")
    np.save(tmp_path / "x.npy", np.random.default_rng(4).normal(size=(1, 1, 28, 28)))
    with contextlib.chdir(tmp_path):
        assert proofs_cli.main(["commit", "--model", "a.onnx", "--out", "c.bin", "--public-weights"]) == 0
        assert proofs_cli.main(["prove", "--model", "b.onnx", "--input", "x.npy", "--commitment", "c.bin", "--out",
                                "p.bin", "--quiet", "--public-weights"]) == 2
    err = capsys.readouterr().err
    assert re.search(r"commitment 'c.bin' was made for another model than 'b.onnx'.*committed from", err)
    assert "like=" not in err and not (tmp_path / "p.bin").exists()


def _product_of_two_layers():
    from tests.model.onnx_models import Builder

    b = Builder((6,))
    b.node("Mul", [b.gemm("x", 6, 3, name="fc1"), b.gemm("x", 6, 3, name="fc2")], "product")
    return b.model()


@pytest.mark.parametrize("make, refused", [(_product_of_two_layers, r"operator Mul .*node 'product'")])
def test_proofs_refuse_what_they_cannot_prove_by_operator_name(tmp_path, capsys, make, refused):
    onnx.save(make(), tmp_path / "m.onnx")
    assert proofs_cli.main(["commit", "--model", str(tmp_path / "m.onnx"), "--out", str(tmp_path / "c.bin"),
                            "--public-weights"]) == 2
    assert re.search(refused, capsys.readouterr().err)
    assert not (tmp_path / "c.bin").exists()


def test_tensor_ops_refuses_an_add_of_two_activated_branches_by_node(tmp_path, capsys):
    """A residual block runs encrypted (tests/tensor_ops/test_onnx_residual.py); an Add of two branches that
    both have activations does not (the skip must be affine) and is refused naming the node."""
    from tests.model.onnx_models import Builder

    b = Builder((2, 4, 4))
    left = b.node("Relu", [b.conv("x", 2, 2, 3, pads=[1, 1, 1, 1])])
    right = b.node("Relu", [b.conv("x", 2, 2, 1)])
    b.node("Add", [left, right], "both")
    onnx.save(b.model(), tmp_path / "r.onnx")
    assert tensor_cli.main(["plan", "--model", str(tmp_path / "r.onnx")]) == 2
    assert "operator Add (node 'both')" in capsys.readouterr().err


def test_an_unsupported_onnx_operator_is_an_error_of_both_clis(tmp_path, capsys):
    from tests.model.onnx_models import Builder

    b = Builder((4,))
    b.node("Erf", [b.gemm("x", 4, 3)], "probabilities")
    onnx.save(b.model(), tmp_path / "s.onnx")
    assert tensor_cli.main(["plan", "--model", str(tmp_path / "s.onnx")]) == 2
    assert "unsupported operator Erf (node 'probabilities')" in capsys.readouterr().err
    assert proofs_cli.main(["commit", "--model", str(tmp_path / "s.onnx"), "--public-weights",
                            "--out", str(tmp_path / "c.bin")]) == 2
    assert "unsupported operator Erf (node 'probabilities')" in capsys.readouterr().err


def test_python_m_proofs_commits_a_cnn_by_the_graph_proof(tmp_path):
    onnx.save(residual_block(), tmp_path / "r.onnx")
    result = python_m("proofs", "commit", "--model", "r.onnx", "--out", "c.bin", "--public-weights", cwd=tmp_path)
    assert result.returncode == 0 and "mean error" in result.stdout and "Traceback" not in result.stderr


def test_plan_states_the_key_bytes_exactly_and_a_throughput_below_one_sample_per_second(tmp_path, capsys,
                                                                                         monkeypatch):
    """A CIFAR-size plan printed '~0 samples/s'."""
    import re

    from tensor_ops.model_plan import ModelPlan
    from tensor_ops.nn import Sequential

    onnx.save(mlp((20, 12, 10), "square"), tmp_path / "m.onnx")
    assert tensor_cli.main(["plan", "--model", str(tmp_path / "m.onnx")]) == 0
    text = capsys.readouterr().out
    plan = Sequential.load(tmp_path / "m.onnx").plan()
    assert f"rotation keys ({plan.galois_key_bytes} bytes, ~" in text
    assert f"key budget of 12 GiB = {12 << 30} bytes" in text
    monkeypatch.setattr(ModelPlan, "estimated_seconds", property(lambda self: 30.0 * self.batch))
    assert re.search(r"~0\.0333 samples/s", plan.explain()), plan.explain()


def test_plan_measure_times_the_operations_on_this_machine(tmp_path, capsys):
    onnx.save(mlp((20, 12, 10), "square"), tmp_path / "m.onnx")
    assert tensor_cli.main(["plan", "--model", str(tmp_path / "m.onnx")]) == 0
    assert "built-in per-operation times of the development machine" in capsys.readouterr().out
    assert tensor_cli.main(["plan", "--model", str(tmp_path / "m.onnx"), "--measure"]) == 0
    text = capsys.readouterr().out
    assert "per-operation times measured on this machine" in text and "excludes JIT compilation" in text


@pytest.mark.slow
def test_commit_takes_the_graph_quantization_widths(tmp_path, capsys):
    """hezk commit --act-bits / --weight-bits set the graph quantizer's widths (the proof follows the
    commitment); an out-of-range width is a usage error naming the option."""
    from proofs.inference import read_commitment

    onnx.save(residual_block(), str(tmp_path / "r.onnx"))
    np.save(tmp_path / "x.npy", np.random.default_rng(0).uniform(-1, 1, size=(1, *_input_shape(tmp_path / "r.onnx"))))
    steps = [("commit", "--model", "r.onnx", "--out", "c.bin", "--public-weights", "--act-bits", "8",
              "--weight-bits", "6", "--quiet"),
             ("prove", "--model", "r.onnx", "--input", "x.npy", "--commitment", "c.bin", "--public-weights",
              "--out", "p.bin", "--quiet"),
             ("verify", "--commitment", "c.bin", "--input", "x.npy", "--proof", "p.bin")]
    with contextlib.chdir(tmp_path):
        assert [proofs_cli.main(list(step)) for step in steps] == [0] * len(steps)
    assert capsys.readouterr().out.strip().endswith("accept")
    assert proofs_cli.main(["commit", "--model", str(tmp_path / "r.onnx"), "--out", str(tmp_path / "d.bin"),
                            "--public-weights", "--quiet"]) == 0
    narrow, default = (read_commitment((tmp_path / name).read_bytes()).structure for name in ("c.bin", "d.bin"))
    assert max(op.q_bits for op in narrow.ops) < max(op.q_bits for op in default.ops)
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        proofs_cli.main(["commit", "--model", str(tmp_path / "r.onnx"), "--act-bits", "40", "--public-weights"])
    assert exit_info.value.code == 2 and "--act-bits 40 must be in [2, 24]" in capsys.readouterr().err


def _input_shape(path):
    model = onnx.load(str(path))
    return [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim][1:]
