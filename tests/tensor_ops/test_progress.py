"""Progress of long operations: off by default, a ``progress(done, total, label)`` callback in the library,
a tqdm bar on stderr from the command line with --progress (issue 16, item 6)."""
import io

import numpy as np
import pytest

from crypto import CKKSContext, CKKSParameters
from crypto.errors import ParameterError
from tensor_ops import cli
from tensor_ops.inference import Client, Server
from tensor_ops.nn import Linear, Sequential, Square
from tensor_ops.progress import as_progress, progress_bar


@pytest.fixture(scope="module")
def model():
    rng = np.random.default_rng(0)
    return Sequential([Linear(rng.normal(0, 0.5, (4, 5))), Square(), Linear(rng.normal(0, 0.5, (2, 4)))],
                      input_shape=(5,))


def test_keygen_reports_each_galois_key():
    calls = []
    ctx = CKKSContext.keygen(CKKSParameters.preset("TOY"), rotations=[1, 2, -3], seed=1,
                             progress=lambda *call: calls.append(call))
    assert [(done, total) for done, total, _ in calls] == [(1, 3), (2, 3), (3, 3)]
    assert len(ctx.galois_keys.keys) == 3 and all(label.startswith("Galois element") for *_, label in calls)


def test_client_and_server_report_progress_only_when_asked(model, capsys):
    keys, stages = [], []
    client = Client(model=model, seed=2, progress=lambda *call: keys.append(call))
    assert keys and keys[-1][0] == keys[-1][1] == len(client.plan.rotations)
    server = Server(model, client.public_context())
    request = client.encrypt(np.zeros((3, 5)))
    reply = server.evaluate(request, progress=lambda *call: stages.append(call))
    assert [done for done, _, _ in stages] == list(range(1, len(client.plan.stages) + 1))
    assert server.evaluate(request) and Client(model=model, seed=3)  # defaults: no progress
    assert capsys.readouterr() == ("", "")
    np.testing.assert_allclose(client.decrypt(reply), model.forward(np.zeros((3, 5))), atol=1e-2)


def test_progress_bar_draws_with_tqdm():
    stream = io.StringIO()
    bar = progress_bar("rotation keys", stream)
    for done in range(1, 5):
        bar(done, 4, f"key {done}")
    assert "rotation keys" in stream.getvalue() and "4/4" in stream.getvalue()


@pytest.mark.parametrize("value", [None, False])
def test_as_progress_off(value):
    assert as_progress(value, "x") is None


def test_as_progress_refuses_other_values():
    assert callable(as_progress(True, "x")) and as_progress(print, "x") is print
    with pytest.raises(ParameterError, match="progress"):
        as_progress("yes", "x")


def test_cli_progress_flag(tmp_path, model, capsys):
    model.save(tmp_path / "m.npz")
    files = [str(tmp_path / name) for name in ("c.key", "p.ctx")]
    assert cli.main(["keygen", "--model", str(tmp_path / "m.npz"), "--client", files[0], "--context", files[1],
                     "--progress"]) == 0
    assert "rotation keys" in capsys.readouterr().err
    assert cli.main(["keygen", "--model", str(tmp_path / "m.npz"), "--client", files[0], "--context", files[1],
                     "--no-progress"]) == 0
    assert capsys.readouterr().err == ""
