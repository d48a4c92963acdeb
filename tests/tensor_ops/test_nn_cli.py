"""``python -m tensor_ops`` with files: plan, keygen, encrypt, infer, decrypt; errors exit 2 with one line."""
import json
import subprocess
import sys

import numpy as np
import pytest

from crypto.errors import ParameterError
from tensor_ops import cli
from tensor_ops.nn import Linear, Sequential, Square

from .test_inference import assert_precise


@pytest.fixture
def model_path(tmp_path):
    rng = np.random.default_rng(0)
    model = Sequential([Linear(rng.normal(0, 0.5, (4, 5)), rng.normal(0, 0.5, 4)), Square(),
                        Linear(rng.normal(0, 0.5, (2, 4)))], input_shape=(5,))
    path = tmp_path / "model.npz"
    model.save(path)
    return path


def test_file_flow_equals_plaintext(tmp_path, model_path, capsys):
    files = {name: str(tmp_path / name) for name in ("plan.json", "client.key", "public.ctx", "x.npy",
                                                     "request.bin", "reply.bin", "y.npy")}
    x = np.random.default_rng(1).uniform(-1, 1, (3, 5))
    np.save(files["x.npy"], x)
    steps = [["plan", "--model", model_path, "--out", files["plan.json"]],
             ["keygen", "--plan", files["plan.json"], "--client", files["client.key"], "--context", files["public.ctx"]],
             ["encrypt", "--client", files["client.key"], "--input", files["x.npy"], "--out", files["request.bin"]],
             ["infer", "--model", model_path, "--context", files["public.ctx"], "--request", files["request.bin"],
              "--out", files["reply.bin"]],
             ["decrypt", "--client", files["client.key"], "--reply", files["reply.bin"], "--out", files["y.npy"]]]
    for step in steps:
        assert cli.main([str(a) for a in step]) == 0, step
    assert json.loads(open(files["plan.json"]).read())["input_shape"] == [5]
    model = Sequential.load(model_path)
    assert_precise(np.load(files["y.npy"]), model.forward(x), model.plan().params)
    assert "depth 3" in capsys.readouterr().out


def test_errors_exit_2_with_a_message(tmp_path, model_path, capsys):
    garbage = tmp_path / "garbage.bin"
    garbage.write_bytes(b"garbage")
    assert cli.main(["infer", "--model", str(model_path), "--context", str(garbage), "--request", str(garbage),
                     "--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err.startswith("error: ")
    assert cli.main(["plan", "--model", str(garbage)]) == 2
    assert "model file" in capsys.readouterr().err


def test_module_entry_point(model_path):
    result = subprocess.run([sys.executable, "-m", "tensor_ops", "plan", "--model", str(model_path)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and "rotation keys" in result.stdout


def test_option_aliases(tmp_path, model_path):
    args = cli.parser().parse_args(["infer", "--model", "m", "--context", "c", "-i", "r", "--output", "o"])
    assert (args.request, args.out) == ("r", "o")
    assert cli.main(["plan", "--model", str(model_path), "-o", str(tmp_path / "p.json")]) == 0
    assert (tmp_path / "p.json").exists()


@pytest.mark.parametrize("text, shape", [("1,8,8", (1, 8, 8)), ("1x8x8", (1, 8, 8)), ("12", (12,))])
def test_parse_shape(text, shape):
    assert cli.parse_shape(text) == shape


@pytest.mark.parametrize("text", ["", "a,b", "0,8", "-1"])
def test_parse_shape_refuses(text):
    with pytest.raises(ParameterError, match="input-shape"):
        cli.parse_shape(text)


def test_input_shape_for_a_model_file_without_one(tmp_path, capsys):
    from tensor_ops.nn import Conv2d, Flatten

    rng = np.random.default_rng(2)
    path = tmp_path / "cnn.npz"
    Sequential([Conv2d(rng.normal(size=(2, 1, 3, 3)), stride=2), Square(), Flatten(),
                Linear(rng.normal(size=(3, 18)))]).save(path)
    assert cli.main(["plan", "--model", str(path)]) == 2
    assert "input shape" in capsys.readouterr().err
    assert cli.main(["plan", "--model", str(path), "--input-shape", "1,7,7"]) == 0
    assert "input (1, 7, 7)" in capsys.readouterr().out


@pytest.mark.parametrize("outputs", [1, 2])
def test_local_infer_names_classes_only_for_several_outputs(tmp_path, capsys, outputs):
    """One output is a score (a regression, a binary logit): no 'predicted classes' line of zeros."""
    rng = np.random.default_rng(2)
    model = Sequential([Linear(rng.normal(0, 0.5, (outputs, 3)))], input_shape=(3,))
    model.save(tmp_path / "m.npz")
    np.save(tmp_path / "x.npy", rng.uniform(-1, 1, (2, 3)))
    code = cli.main(["infer", "--model", str(tmp_path / "m.npz"), "--input", str(tmp_path / "x.npy"),
                     "--out", str(tmp_path / "y.npy")])
    assert code == 0
    assert ("predicted classes" in capsys.readouterr().out) == (outputs > 1)
