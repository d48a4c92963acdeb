"""The command line's warnings end in one line each (issue 35: a newcomer's run shows no file name and source line
of Python's default warning display): a local ``infer`` of a plan without an output range, and ``decrypt``."""
from __future__ import annotations

import numpy as np

from tensor_ops import cli
from tensor_ops.nn import Linear, Sequential, Square

UNCHECKED = "warning: the plan states no output range"


def _files(tmp_path):
    rng = np.random.default_rng(0)
    Sequential([Linear(rng.normal(size=(3, 4))), Square(), Linear(rng.normal(size=(1, 3)))],
               input_shape=(4,)).save(tmp_path / "m.npz")
    np.save(tmp_path / "x.npy", rng.uniform(-1, 1, (2, 4)))
    return str(tmp_path / "m.npz"), str(tmp_path / "x.npy")


def _one_line(err: str) -> None:
    lines = [line for line in err.splitlines() if "output range" in line]
    assert lines and all(line.startswith(UNCHECKED) for line in lines), err
    assert "OutputRangeWarning" not in err and "cli.py:" not in err, err


def test_local_infer_warns_in_one_line(tmp_path, capsys):
    model, x = _files(tmp_path)
    assert cli.main(["infer", "--model", model, "--input", x, "--out", str(tmp_path / "y.npy"), "--params", "TOY",
                     "--insecure", "--no-progress"]) == 0
    _one_line(capsys.readouterr().err)


def test_decrypt_warns_in_one_line(tmp_path, capsys):
    model, x = _files(tmp_path)
    key, context, request, reply = (str(tmp_path / name) for name in ("c.key", "p.ctx", "r.bin", "rep.bin"))
    assert cli.main(["keygen", "--model", model, "--client", key, "--context", context, "--params", "TOY",
                     "--insecure", "--no-progress"]) == 0
    assert cli.main(["encrypt", "--client", key, "--input", x, "--out", request]) == 0
    assert cli.main(["infer", "--model", model, "--context", context, "--request", request, "--out", reply,
                     "--params", "TOY", "--insecure", "--no-progress"]) == 0
    capsys.readouterr()
    assert cli.main(["decrypt", "--client", key, "--reply", reply, "--out", str(tmp_path / "y.npy")]) == 0
    _one_line(capsys.readouterr().err)
