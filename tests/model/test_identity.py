"""Issue 12 item 6, model identity: the plan, the registered context, the request and the reply carry the
model's digest; a server refuses a request made for another model (ContextMismatchError: HTTP 409, CLI exit
2) and a client checks the reply's model, shape and layout against its plan."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import onnx
import pytest

from crypto.errors import ContextMismatchError, ParameterError, ShapeError
from tensor_ops import cli as tensor_cli
from tensor_ops.inference import Client, Server, pack_message, unpack_message
from tensor_ops.model_plan import ModelPlan
from tensor_ops.nn import Linear, Sequential, Square
from tests.model.onnx_models import mlp


def two_models():
    """Two MLPs of the same shapes (the old server evaluated either's requests without complaint)."""
    rng = np.random.default_rng(0)
    make = lambda: Sequential([Linear(rng.normal(0, .5, (4, 6)), rng.normal(0, .5, 4)), Square(),  # noqa: E731
                               Linear(rng.normal(0, .5, (3, 4)))], input_shape=(6,))
    return make(), make()


def test_plans_carry_the_models_identity_and_keep_it_as_json():
    one, two = two_models()
    plan = one.plan(params="TOY")
    assert plan.model == one.identity().hex() != two.identity().hex()
    assert ModelPlan.from_dict(plan.to_dict()).model == plan.model
    assert plan.with_block(plan.block * 2).model == plan.model
    assert "model digest" in plan.explain()
    with pytest.raises(ParameterError, match="model="):
        ModelPlan.from_dict({**plan.to_dict(), "model": "not a digest"})


def test_a_model_read_from_onnx_is_identified_by_its_descriptions_digest(tmp_path):
    import hezk.model

    onnx.save(mlp((6, 4, 3)), tmp_path / "m.onnx")
    assert Sequential.load(tmp_path / "m.onnx").identity() == hezk.model.load(tmp_path / "m.onnx").digest()


def test_a_server_refuses_a_request_made_for_another_model():
    one, two = two_models()
    client = Client(model=one, params="TOY", seed=1)
    request = client.encrypt(np.zeros((2, 6)))
    with pytest.raises(ContextMismatchError, match="request made for model"):
        Server(two, client.public_context()).evaluate(request)
    reply = Server(one, client.public_context()).evaluate(request)
    assert client.decrypt(reply).shape == (2, 3)


def test_a_client_checks_the_replys_model_shape_and_layout():
    one, _ = two_models()
    client = Client(model=one, params="TOY", seed=2)
    reply = Server(one, client.public_context()).evaluate(client.encrypt(np.zeros((2, 6))))
    header, blobs = unpack_message(reply, "reply")
    for change, error, words in (({"model": "ab" * 32}, ContextMismatchError, "reply from model"),
                                 ({"output_shape": [1]}, ShapeError, "output_shape"),
                                 ({"block": header["block"] * 2}, ShapeError, "block")):
        forged = pack_message("reply", {**header, **change}, [SimpleNamespace(to_bytes=lambda b=b: bytes(b))
                                                               for b in blobs])
        with pytest.raises(error, match=words):
            client.decrypt(forged)


def test_cli_infer_with_another_models_request_exits_2(tmp_path, capsys):
    one, two = two_models()
    one.save(tmp_path / "one.npz")
    two.save(tmp_path / "two.npz")
    np.save(tmp_path / "x.npy", np.zeros((1, 6)))
    keys = ["--client", str(tmp_path / "c.key"), "--context", str(tmp_path / "ctx.bin")]
    assert tensor_cli.main(["keygen", "--model", str(tmp_path / "one.npz"), *keys]) == 0
    assert tensor_cli.main(["encrypt", "--client", str(tmp_path / "c.key"), "--input", str(tmp_path / "x.npy"),
                            "--out", str(tmp_path / "req.bin")]) == 0
    capsys.readouterr()
    assert tensor_cli.main(["infer", "--model", str(tmp_path / "two.npz"), "--context", str(tmp_path / "ctx.bin"),
                            "--request", str(tmp_path / "req.bin"), "--out", str(tmp_path / "reply.bin")]) == 2
    assert "request made for model" in capsys.readouterr().err
    assert not (tmp_path / "reply.bin").exists()


def test_http_answers_409_to_a_request_made_for_another_model():
    pytest.importorskip("fastapi")
    pytest.importorskip("httpx")
    from fastapi.testclient import TestClient

    from tensor_ops.serve import create_app

    one, two = two_models()
    client = Client(model=one, params="TOY", seed=3)
    with TestClient(create_app(two, input_shape=(6,))) as http:
        registered = http.post("/contexts", content=client.public_context(),
                               headers={"content-type": "application/octet-stream"})
        assert registered.status_code == 201, registered.text
        assert registered.json()["model"] == two.identity().hex()
        response = http.post("/infer/" + registered.json()["context_id"], content=client.encrypt(np.zeros(6)),
                             headers={"content-type": "application/octet-stream"})
        assert response.status_code == 409 and "request made for model" in response.json()["detail"]


def test_the_plan_reports_and_respects_a_key_budget():
    one, _ = two_models()
    plan = one.plan(params="TOY")
    assert plan.key_budget == 12 << 30 and "key budget of 12 GiB" in plan.explain()
    assert ModelPlan.from_dict(plan.to_dict()).key_budget == plan.key_budget
    with pytest.raises(ParameterError, match="key_budget=1000 bytes is too small for any plan"):
        one.plan(params="TOY", key_budget=1000)
    assert one.plan(params="TOY", key_budget=plan.galois_key_bytes).rotations == plan.rotations


def test_one_file_fitted_otherwise_is_refused_as_another_computation(tmp_path, capsys):
    """The same ONNX file loaded with another --degree (or --calibration) has the same identity but other
    polynomials: the server evaluated such a request with its own polynomial without a word."""
    onnx.save(mlp((6, 4, 3), "relu", seed=7), tmp_path / "m.onnx")
    default, other = Sequential.load(tmp_path / "m.onnx"), Sequential.load(tmp_path / "m.onnx", degree=4)
    assert default.identity() == other.identity() and default.activation_fit() != other.activation_fit()
    calibrated = Sequential.load(tmp_path / "m.onnx", calibration=np.random.default_rng(0).normal(size=(16, 6)))
    assert calibrated.activation_fit() not in (default.activation_fit(), other.activation_fit())
    assert Sequential.load(tmp_path / "m.onnx").activation_fit() == default.activation_fit()
    # depth 2 + 2 fits the TOY parameters' 4 levels
    default, other = (Sequential.load(tmp_path / "m.onnx", degree=d) for d in (3, 2))
    plan = default.plan(params="TOY")
    assert plan.fit == default.activation_fit() and ModelPlan.from_dict(plan.to_dict()).fit == plan.fit
    assert "activation fit digest" in plan.explain()
    client = Client(model=default, params="TOY", seed=4)
    request = client.encrypt(np.zeros((2, 6)))
    with pytest.raises(ContextMismatchError, match="activations fitted as"):
        Server(other, client.public_context()).evaluate(request)
    reply = Server(default, client.public_context()).evaluate(request)
    header, blobs = unpack_message(reply, "reply")
    forged = pack_message("reply", {**header, "fit": "cd" * 32}, [SimpleNamespace(to_bytes=lambda b=b: bytes(b))
                                                                   for b in blobs])
    with pytest.raises(ContextMismatchError, match="activations fitted as"):
        client.decrypt(forged)
    assert client.decrypt(reply).shape == (2, 3)
    # the command line: keys planned with --degree 4, a server run without it
    np.save(tmp_path / "x.npy", np.zeros((1, 6)))
    keys = ["--client", str(tmp_path / "c.key"), "--context", str(tmp_path / "ctx.bin")]
    assert tensor_cli.main(["keygen", "--model", str(tmp_path / "m.onnx"), "--degree", "4", *keys]) == 0
    assert tensor_cli.main(["encrypt", "--client", str(tmp_path / "c.key"), "--input", str(tmp_path / "x.npy"),
                            "--out", str(tmp_path / "req.bin")]) == 0
    capsys.readouterr()
    infer = ["infer", "--model", str(tmp_path / "m.onnx"), "--context", str(tmp_path / "ctx.bin"),
             "--request", str(tmp_path / "req.bin"), "--out", str(tmp_path / "reply.bin")]
    assert tensor_cli.main(infer) == 2
    assert "activations fitted as" in capsys.readouterr().err and not (tmp_path / "reply.bin").exists()
    assert tensor_cli.main([*infer, "--degree", "4"]) == 0


def test_serve_takes_the_calibration_and_degree_its_clients_planned_with(tmp_path, capsys, monkeypatch):
    uvicorn = pytest.importorskip("uvicorn")
    from tensor_ops import serve

    onnx.save(mlp((6, 4, 3), "relu", seed=7), tmp_path / "m.onnx")
    np.save(tmp_path / "cal.npy", np.random.default_rng(0).normal(size=(16, 6)))
    served = {}
    monkeypatch.setattr(uvicorn, "run", lambda app, **options: served.update(app=app, **options))
    args = serve.build_parser().parse_args(["--model", str(tmp_path / "m.onnx"), "--degree", "4",
                                            "--calibration", str(tmp_path / "cal.npy"), "--key-budget", "2GiB"])
    assert serve.run(args) == 0 and served["port"] == 8000
    want = Sequential.load(tmp_path / "m.onnx", degree=4, calibration=np.load(tmp_path / "cal.npy"))
    text = capsys.readouterr().out
    assert f"activation fit digest (sha256 of the polynomials, carried too): {want.activation_fit()}" in text
    assert f"key budget of 2 GiB = {2 << 30} bytes" in text
    np.save(tmp_path / "bad.npy", np.zeros((2, 5)))
    args = serve.build_parser().parse_args(["--model", str(tmp_path / "m.onnx"), "--calibration",
                                            str(tmp_path / "bad.npy")])
    assert serve.run(args) == 2 and "calibration inputs of shape (2, 5)" in capsys.readouterr().err


def test_the_key_budget_on_the_command_line_for_both_halves(tmp_path, capsys):
    """plan / keygen / infer / serve take --key-budget (a size in bytes, e.g. 2GiB); the client's and the server's
    plans then agree (a server planning with its default budget refuses the client's keys' layout)."""
    from tensor_ops import serve

    model = mlp((40, 30, 10), "square", seed=8)
    onnx.save(model, tmp_path / "m.onnx")
    full = Sequential.load(tmp_path / "m.onnx").plan()
    tight = full.galois_key_bytes - 2 * full.galois_key_bytes // len(full.rotations)  # two keys fewer
    assert tensor_cli.main(["plan", "--model", str(tmp_path / "m.onnx"), "--key-budget", str(tight)]) == 0
    text = capsys.readouterr().out
    assert f"key budget of {tight / 2**30:.3g} GiB = {tight} bytes" in text
    small = Sequential.load(tmp_path / "m.onnx").plan(key_budget=tight)
    assert small.galois_key_bytes <= tight < full.galois_key_bytes and small.rotations != full.rotations
    assert serve.parse_bytes("2GiB") == 2 << 30 and serve.parse_bytes("1.5GB") == 1_500_000_000
    for bad in ("-1", "2 parsecs", "0"):
        assert tensor_cli.main(["plan", "--model", str(tmp_path / "m.onnx"), "--key-budget", bad]) == 2
        assert "--key-budget" in capsys.readouterr().err
    assert tensor_cli.main(["plan", "--model", str(tmp_path / "m.onnx"), "--key-budget", "1000"]) == 2
    assert "key_budget=1000 bytes is too small" in capsys.readouterr().err
    x = np.random.default_rng(8).uniform(-1, 1, (2, 40))
    np.save(tmp_path / "x.npy", x)
    assert tensor_cli.main(["infer", "--model", str(tmp_path / "m.onnx"), "--input", str(tmp_path / "x.npy"),
                            "--out", str(tmp_path / "y.npy"), "--key-budget", str(tight)]) == 0
    assert f"{len(small.rotations)} rotation keys ({small.galois_key_bytes} bytes" in capsys.readouterr().out
    from tests.model.onnx_models import run_onnx
    want = run_onnx(model, x)
    assert np.abs(np.load(tmp_path / "y.npy") - want).max() <= 1e-3 * np.abs(want).max()
    keys = ["--client", str(tmp_path / "c.key"), "--context", str(tmp_path / "ctx.bin")]
    assert tensor_cli.main(["keygen", "--model", str(tmp_path / "m.onnx"), "--key-budget", str(tight), *keys]) == 0
    assert tensor_cli.main(["encrypt", "--client", str(tmp_path / "c.key"), "--input", str(tmp_path / "x.npy"),
                            "--out", str(tmp_path / "req.bin")]) == 0
    infer = ["infer", "--model", str(tmp_path / "m.onnx"), "--context", str(tmp_path / "ctx.bin"),
             "--request", str(tmp_path / "req.bin"), "--out", str(tmp_path / "reply.bin"), "--key-budget", str(tight)]
    assert tensor_cli.main(infer) == 0
    assert tensor_cli.main(["decrypt", "--client", str(tmp_path / "c.key"), "--reply", str(tmp_path / "reply.bin"),
                            "--out", str(tmp_path / "y2.npy")]) == 0
    assert np.abs(np.load(tmp_path / "y2.npy") - want).max() <= 1e-3 * np.abs(want).max()
