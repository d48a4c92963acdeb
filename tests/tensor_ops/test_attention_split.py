"""The client/server split for models with attention (``tensor_ops.attention_split``; ``hezk keygen | encrypt |
infer --context | decrypt``), on hezk-graph .npz models without torch: attention scores x x^T (a product of two
encrypted tensors, depth 2: the fast case) and softmax(x x^T) (calibrated exp and Newton reciprocal, depth 24), on
INSECURE N = 2^10 test rings (``--insecure``, tests only). The exported 16 x 32 encoder layer runs the same flow in
tests/acceptance/test_transformer_split_cli.py; the bootstrapping split in test_attention_split_bootstrap.py."""
from __future__ import annotations

import json
import os
import shutil
import stat

import functools

import numpy as np
import pytest
from hypothesis import example, given, settings, strategies as st

import hezk.model
from crypto.context import CKKSContext
from crypto.errors import ContextMismatchError, HEError, SerializationError, ShapeError
from tensor_ops import cli
from tensor_ops.attention_plan import plan_attention
from tensor_ops.attention_split import (RECORD_NAME, AttentionClient, AttentionServer, AttentionSpec,
                                        message_is_attention)
from tensor_ops.inference import Client, InputRangeError

SHAPE = (4, 4)


def _scores(equation="bij,bkj->bik"):
    """x x^T over 4 x 4 samples (or another product of x with itself): an attention model of one node."""
    return hezk.model.Graph("x", SHAPE, (hezk.model.Bilinear("scores", "MatMul", ("x", "x"), "s", equation),), "s")


def softmax_graph():
    return hezk.model.Graph("x", SHAPE, (
        hezk.model.Bilinear("scores", "MatMul", ("x", "x"), "s", "bij,bkj->bik"),
        hezk.model.Softmax("weights", "Softmax", ("s",), "y", 1)), "y")


def _ring(levels: int) -> dict:
    """An INSECURE N = 2^10 test ring of ``levels`` 30-bit levels (tests only)."""
    return dict(log_n=10, log_q=[[30, 30]] + [[30]] * levels, log_p=[31] * (levels // 4 + 2), log_scale=30, dnum=4,
                insecure=True)


@pytest.fixture()
def files(tmp_path):
    """A folder with the scores model, its calibration, an input batch inside its range and a 5-level ring."""
    hezk.model.save_npz(_scores(), tmp_path / "m.npz")
    rng = np.random.default_rng(4)
    np.save(tmp_path / "cal.npy", 0.5 * rng.normal(size=(32, *SHAPE)))
    np.save(tmp_path / "x.npy", np.clip(0.5 * rng.normal(size=(3, *SHAPE)), -1, 1))
    (tmp_path / "ring.json").write_text(json.dumps(_ring(5)))
    return tmp_path


def _common(folder, model="m.npz", calibration="cal.npy"):
    return ["--model", str(folder / model), "--calibration", str(folder / calibration), "--params",
            str(folder / "ring.json"), "--insecure"]


def _keygen(folder, name="c", **options):
    return cli.main(["keygen", *_common(folder, **options), "--client", str(folder / f"{name}.key"), "--context",
                     str(folder / f"{name}.ctx")])


def _encrypt(folder, client="c", x="x.npy", out="r.bin", *extra):
    return cli.main(["encrypt", "--client", str(folder / f"{client}.key"), "--input", str(folder / x), "--out",
                     str(folder / out), *extra])


def _infer(folder, context="c.ctx", request="r.bin", out="a.bin", **options):
    return cli.main(["infer", *_common(folder, **options), "--context", str(folder / context), "--request",
                     str(folder / request), "--out", str(folder / out)])


def test_split_flow_runs_an_attention_model_with_the_server_holding_public_keys_only(files, capsys, monkeypatch):
    """keygen writes the SECRET client file (0600) and a public context with no secret key in it; encrypt packs
    each sample in the plan's input layout; infer --context evaluates with the client file out of reach and its
    context holding no secret key; decrypt unpacks the output layout: x x^T for each sample within 1e-4."""
    assert _keygen(files) == 0
    out = capsys.readouterr().out
    assert "SECRET client state (attention)" in out and "8 rotation keys" in out
    assert stat.S_IMODE(os.lstat(files / "c.key").st_mode) == 0o600
    public = (files / "c.ctx").read_bytes()
    assert not CKKSContext.from_bytes(public).has_secret_key
    secret = AttentionClient.load(files / "c.key")._context.secret_key_bytes()
    assert secret[-4096:] not in public
    assert _encrypt(files) == 0 and message_is_attention((files / "r.bin").read_bytes())

    servers = []
    original = AttentionServer.evaluate

    def watched(self, request, progress=None):
        servers.append(self)
        return original(self, request, progress)

    monkeypatch.setattr(AttentionServer, "evaluate", watched)
    shutil.move(files / "c.key", files / "elsewhere.key")       # the server side has no secret file at hand
    assert _infer(files) == 0, capsys.readouterr().err
    shutil.move(files / "elsewhere.key", files / "c.key")
    assert len(servers) == 1 and not servers[0].context.has_secret_key
    assert "public keys only" in capsys.readouterr().out
    assert cli.main(["decrypt", "--client", str(files / "c.key"), "--reply", str(files / "a.bin"), "--out",
                     str(files / "y.npy")]) == 0
    x, y = np.load(files / "x.npy"), np.load(files / "y.npy")
    assert y.shape == x.shape and np.max(np.abs(y - _scores().forward(x))) < 1e-4


def test_a_client_keys_from_the_servers_public_plan_alone(files, capsys):
    """plan --out writes the attention plan's public part (parameters, rotations, layouts, ranges, model and plan
    digests); keygen --plan keys from it without the model, and the server answers that client."""
    assert cli.main(["plan", *_common(files)[:-1], "--out", str(files / "plan.json")]) == 0
    data = json.loads((files / "plan.json").read_text())
    assert data["packing"] == RECORD_NAME and data["input_shape"] == list(SHAPE)
    assert json.loads(json.dumps(AttentionSpec.from_dict(data).to_dict())) == data
    assert cli.main(["keygen", "--plan", str(files / "plan.json"), "--client", str(files / "c.key"), "--context",
                     str(files / "c.ctx")]) == 2
    assert "not 128-bit secure" in capsys.readouterr().err          # a test ring needs the client's opt-in
    assert cli.main(["keygen", "--plan", str(files / "plan.json"), "--insecure", "--client", str(files / "c.key"),
                     "--context", str(files / "c.ctx")]) == 0
    assert _encrypt(files) == 0 and _infer(files) == 0
    assert cli.main(["decrypt", "--client", str(files / "c.key"), "--reply", str(files / "a.bin"), "--out",
                     str(files / "y.npy")]) == 0
    x = np.load(files / "x.npy")
    assert np.max(np.abs(np.load(files / "y.npy") - _scores().forward(x))) < 1e-4


def test_a_wrong_input_shape_or_a_value_outside_the_calibrated_range_is_refused_at_encryption(files, capsys):
    """encrypt names the plan's sample shape for an input of another shape, and the calibrated range for values
    outside it (--clip clips them, with a warning); nothing is written when refused."""
    assert _keygen(files) == 0
    capsys.readouterr()
    np.save(files / "wide.npy", np.zeros((2, 4, 5)))
    assert _encrypt(files, "c", "wide.npy", "w.bin") == 2
    err = capsys.readouterr().err
    assert "input of shape (2, 4, 5)" in err and "samples of (4, 4)" in err and not (files / "w.bin").exists()
    far = np.load(files / "x.npy")
    far[1, 0, 0] = 40.0
    np.save(files / "far.npy", far)
    assert _encrypt(files, "c", "far.npy", "f.bin") == 2
    err = capsys.readouterr().err
    assert "samples [1]" in err and "calibrated input range" in err and not (files / "f.bin").exists()
    assert _encrypt(files, "c", "far.npy", "f.bin", "--clip") == 0
    assert "clipped" in capsys.readouterr().err and (files / "f.bin").exists()


def test_keys_requests_and_replies_of_another_model_plan_or_key_set_are_refused_by_name(files, capsys):
    """The server refuses a request made for another calibration (another plan of the same model), a context
    lacking its plan's rotation keys (keys of another model), a plain array and a request encrypted under another
    client's keys; the client refuses a reply made under another key set. Each exits 2 with one line naming the problem, nothing written."""
    assert _keygen(files) == 0 and _encrypt(files) == 0
    np.save(files / "cal2.npy", 2.0 * np.load(files / "cal.npy"))
    capsys.readouterr()
    assert _infer(files, calibration="cal2.npy") == 2
    err = capsys.readouterr().err
    assert "plan" in err and "another --calibration" in err and "Traceback" not in err
    assert not (files / "a.bin").exists()

    hezk.model.save_npz(_scores("bji,bjk->bik"), files / "other.npz")   # x^T x: other rotations
    assert _infer(files, model="other.npz") == 2
    err = capsys.readouterr().err
    assert "lacks" in err and "rotation keys" in err and "another model" in err

    assert cli.main(["infer", *_common(files), "--context", str(files / "c.ctx"), "--request",
                     str(files / "x.npy"), "--out", str(files / "a.bin")]) == 2
    assert "plain numpy array" in capsys.readouterr().err
    assert cli.main(["infer", *_common(files), "--packing", "replicated", "--context", str(files / "c.ctx"),
                     "--request", str(files / "r.bin"), "--out", str(files / "a.bin")]) == 2
    assert "--packing replicated: a model with attention" in capsys.readouterr().err

    assert _infer(files) == 0 and _keygen(files, "d") == 0
    assert _encrypt(files, "d", "x.npy", "rd.bin") == 0
    capsys.readouterr()
    assert _infer(files, request="rd.bin", out="ad.bin") == 2          # encrypted under d's keys, c's context
    assert "key set" in capsys.readouterr().err and not (files / "ad.bin").exists()
    assert cli.main(["decrypt", "--client", str(files / "d.key"), "--reply", str(files / "a.bin"), "--out",
                     str(files / "y.npy")]) == 2
    assert "key set" in capsys.readouterr().err and not (files / "y.npy").exists()


def test_the_server_refuses_a_request_made_for_another_model_with_the_same_keys(files):
    """Two models whose plans take the same keys (x x^T, and its transpose (x x^T)^T, written as another einsum): a
    request made for one is refused by the other's server, naming both models, before any evaluation."""
    rng = np.random.default_rng(4)
    calibration = 0.5 * rng.normal(size=(32, *SHAPE))
    graph = _scores()
    other = hezk.model.Graph("x", SHAPE, (hezk.model.Bilinear("scores", "MatMul", ("x", "x"), "s",
                                                              "bij,bkj->bki"),), "s")   # (x x^T)^T: same keys
    from crypto.params import CKKSParameters

    params = CKKSParameters.from_literal(_ring(5))
    plan, model = plan_attention(graph, calibration, params=params, allow_insecure=True)
    plan_b, model_b = plan_attention(other, calibration, params=params, allow_insecure=True)
    client = AttentionClient(AttentionSpec.of(plan, graph), allow_insecure=True, seed=1)
    request = client.encrypt(np.clip(0.5 * rng.normal(size=SHAPE), -1, 1))
    assert set(plan_b.key_rotations) == set(plan.key_rotations)
    server = AttentionServer(plan_b, model_b, client.public_context())
    with pytest.raises(ContextMismatchError, match="request made for model .* this server runs model"):
        server.evaluate(request)
    good = AttentionServer(plan, model, client.public_context())
    y = client.decrypt(good.evaluate(request))
    assert y.shape == SHAPE


def test_files_and_messages_of_the_two_paths_are_not_mixed_up(files, capsys, tmp_path):
    """The slot path's Client.load refuses an attention client file naming the loader; a server of a model without
    attention refuses an attention request naming it; decrypt --flood is refused for attention keys, and a request
    given as the reply is named as such."""
    from tensor_ops.nn import Linear, Sequential, Square

    assert _keygen(files) == 0 and _encrypt(files) == 0
    with pytest.raises(SerializationError, match="AttentionClient.load"):
        Client.load(files / "c.key")
    rng = np.random.default_rng(0)
    Sequential([Linear(rng.normal(size=(3, 16))), Square()], (16,)).save(files / "mlp.npz")
    capsys.readouterr()
    assert cli.main(["infer", "--model", str(files / "mlp.npz"), "--context", str(files / "c.ctx"), "--request",
                     str(files / "r.bin"), "--out", str(files / "a.bin")]) == 2
    assert "encrypted for a model with attention" in capsys.readouterr().err
    assert _infer(files) == 0
    assert cli.main(["decrypt", "--flood", "--client", str(files / "c.key"), "--reply", str(files / "a.bin"),
                     "--out", str(files / "y.npy")]) == 2
    assert "--flood" in capsys.readouterr().err
    assert cli.main(["decrypt", "--client", str(files / "c.key"), "--reply", str(files / "r.bin"), "--out",
                     str(files / "y.npy")]) == 2                        # the request given as the reply
    assert "(request), not an encrypted reply" in capsys.readouterr().err and not (files / "y.npy").exists()


def test_the_spec_round_trips_and_refuses_malformed_fields(files):
    """AttentionSpec.to_dict / from_dict round-trip; a malformed field is refused naming it."""
    from crypto.params import CKKSParameters

    graph = _scores()
    plan, _ = plan_attention(graph, np.load(files / "cal.npy"), params=CKKSParameters.from_literal(_ring(5)),
                             allow_insecure=True)
    spec = AttentionSpec.of(plan, graph)
    assert AttentionSpec.from_dict(spec.to_dict()) == spec
    assert spec.model == graph.digest().hex() and len(spec.plan) == 64
    for field, value, message in (("input_level", 99, "input_level=99"), ("rotations", [1 << 20], "rotations"),
                                  ("input_range", [1.0, 0.0], "input_range"), ("model", "x", "model='x'"),
                                  ("output_magnitude", -1.0, "output_magnitude")):
        with pytest.raises(SerializationError, match=message):
            AttentionSpec.from_dict(dict(spec.to_dict(), **{field: value}))
    with pytest.raises(SerializationError, match="keys"):
        AttentionSpec.from_dict({"packing": RECORD_NAME})


def test_requests_in_another_layout_or_level_are_refused(files):
    """The server reads only the plan's input layout and level: a request tensor of another layout (two samples
    packed together) or at a lower level is refused naming the difference."""
    from crypto.params import CKKSParameters
    from tensor_ops.attention_split import PACKING
    from tensor_ops.inference import pack_message
    from tensor_ops.tensor import encrypt

    graph = _scores()
    plan, model = plan_attention(graph, np.load(files / "cal.npy"), params=CKKSParameters.from_literal(_ring(5)),
                                 allow_insecure=True)
    client = AttentionClient(AttentionSpec.of(plan, graph), allow_insecure=True, seed=2)
    server = AttentionServer(plan, model, client.public_context())
    spec, ctx = client.spec, client._context
    header = {"layout": PACKING, "key_id": client.key_id.hex(), "model": spec.model, "plan": spec.plan,
              "samples": 1, "form": "batch", "sample_shape": list(SHAPE)}
    pair = encrypt(ctx, np.zeros((2, *SHAPE)))
    with pytest.raises(ShapeError, match="another layout"):
        server.evaluate(pack_message("request", header, [pair]))
    low = encrypt(ctx, np.zeros((1, *SHAPE)), level=1)
    with pytest.raises(HEError, match="level 1"):
        server.evaluate(pack_message("request", header, [low]))
    with pytest.raises(InputRangeError, match="calibrated input range"):
        client.encrypt(np.full(SHAPE, 50.0))


@pytest.mark.slow
def test_softmax_attention_runs_split_within_its_stated_error(files, capsys):
    """softmax(x x^T) (calibrated shift, exp by squaring, Newton reciprocal: depth 24) through keygen, encrypt,
    infer --context and decrypt on a 27-level test ring: within the plan's stated error (+1e-4) of the exact
    softmax for every sample of a batch."""
    hezk.model.save_npz(softmax_graph(), files / "s.npz")
    (files / "ring.json").write_text(json.dumps(_ring(27)))
    assert _keygen(files, model="s.npz") == 0 and _encrypt(files) == 0
    assert _infer(files, model="s.npz") == 0, capsys.readouterr().err
    stated = float(capsys.readouterr().out.split("whole model on the calibration data: max error ")[1].split()[0])
    assert cli.main(["decrypt", "--client", str(files / "c.key"), "--reply", str(files / "a.bin"), "--out",
                     str(files / "y.npy")]) == 0
    x = np.load(files / "x.npy")
    assert np.max(np.abs(np.load(files / "y.npy") - softmax_graph().forward(x))) < stated + 1e-4


def test_serve_and_remote_refuse_an_attention_model_naming_the_file_flow(files, capsys):
    """The HTTP server and its client run the slot path: serve refuses a model with attention and remote refuses an
    attention client file, each in one line naming the flow with files (before: serve named an unsupported MatMul)."""
    assert cli.main(["serve", "--model", str(files / "m.npz"), "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert "holds attention" in err and "infer --context" in err
    assert _keygen(files) == 0
    capsys.readouterr()
    assert cli.main(["remote", "--url", "http://127.0.0.1:9", "--client", str(files / "c.key"), "--input",
                     str(files / "x.npy"), "--out", str(files / "y.npy")]) == 2
    err = capsys.readouterr().err
    assert "slot path only" in err and "attention" in err and not (files / "y.npy").exists()


def test_infer_help_and_the_readme_name_the_attention_split():
    """``hezk infer --help`` says the server side takes models with attention and that its planning options must
    be the client's; the README's command-line section shows the four commands on a transformer layer."""
    import argparse
    import pathlib

    from tensor_ops.cli_args import parser

    root = parser("infer")
    commands = next(a for a in root._actions if isinstance(a, argparse._SubParsersAction)).choices
    text = " ".join(commands["infer"].format_help().split())
    assert "transformers with attention included" in text and "same --calibration" in text
    assert "required for a model with attention" in text
    keygen = " ".join(parser("keygen")._actions[-1].choices["keygen"].format_help().split())
    assert "bootstrap's keys" in keygen
    readme = (pathlib.Path(__file__).resolve().parents[2] / "README.md").read_text()
    for command in ("hezk keygen  --model layer.onnx --calibration cal.npy", "hezk encrypt --client client.key",
                    "hezk infer   --model layer.onnx --calibration cal.npy --context public.ctx",
                    "hezk decrypt --client client.key --reply reply.bin"):
        assert command in readme


@functools.lru_cache(maxsize=None)
def _identity_client(shape: tuple) -> AttentionClient:
    """A client of a hand-made spec whose output is its input (no rotation key: keys in ~0.1 s)."""
    from crypto.params import CKKSParameters

    spec = AttentionSpec(CKKSParameters.from_literal(_ring(2)), (), None, 2, shape, shape, (-1.0, 1.0), 1.0,
                         "0" * 64, "1" * 64)
    return AttentionClient(spec, allow_insecure=True, seed=3)


@settings(max_examples=15, deadline=None)
@given(shape=st.lists(st.integers(1, 12), min_size=1, max_size=3).map(tuple), batch=st.integers(0, 3),
       seed=st.integers(0, 2**31))
@example(shape=(19, 27), batch=2, seed=0)   # 513 values: tiled over two ciphertexts (numpy ints in its layout)
def test_samples_round_trip_through_the_input_and_output_layouts(shape, batch, seed):
    """Each sample of any shape (one ciphertext, or tiled over several when larger than the 512 slots) goes into a
    request in the plan's input layout; the same tensors sent back as a reply unpack to the samples (batch 0: one
    unbatched sample). Before: a tiled layout's record failed (numpy integers in its JSON meta)."""
    from tensor_ops.inference import pack_message, unpack_message
    from tensor_ops.tensor import CipherTensor

    client = _identity_client(shape)
    x = np.random.default_rng(seed).uniform(-1, 1, shape if batch == 0 else (batch, *shape))
    header, blobs = unpack_message(client.encrypt(x), "request")
    tensors = [CipherTensor.from_bytes(blob, client.server_context()) for blob in blobs]
    assert all(t.layout == client.spec.input_layout for t in tensors) and len(tensors) == max(batch, 1)
    reply = dict(header, output_shape=header["sample_shape"])
    reply.pop("kind"), reply.pop("ciphertexts"), reply.pop("sample_shape")
    y = client.decrypt(pack_message("reply", reply, tensors))
    assert y.shape == x.shape and np.max(np.abs(y - x)) < 1e-4


def test_a_batch_along_the_samples_axis_of_one_comes_back_in_its_form():
    """A model exported on (1, s, w) takes the user's (n, s, w) batch (``hezk.model.input_form``: "unit"), as the
    local run does: n request tensors of (1, s, w), outputs (n, s, w); one (1, s, w) sample gives one output."""
    from tensor_ops.inference import pack_message, unpack_message
    from tensor_ops.tensor import CipherTensor

    client = _identity_client((1, 3, 5))
    for x in (np.random.default_rng(1).uniform(-1, 1, (2, 3, 5)), np.zeros((1, 3, 5))):
        header, blobs = unpack_message(client.encrypt(x), "request")
        assert header["samples"] == len(x) and header["form"] == ("unit" if len(x) == 2 else "sample")
        tensors = [CipherTensor.from_bytes(blob, client.server_context()) for blob in blobs]
        reply = {k: v for k, v in header.items() if k not in ("kind", "ciphertexts", "sample_shape")}
        y = client.decrypt(pack_message("reply", dict(reply, output_shape=[1, 3, 5]), tensors))
        assert y.shape == x.shape and np.max(np.abs(y - x)) < 1e-4
    with pytest.raises(ShapeError, match=r"input of shape \(2, 3, 4\) is neither"):
        client.encrypt(np.zeros((2, 3, 4)))


def test_outputs_far_beyond_the_calibrated_magnitude_are_refused_naming_the_samples():
    """decrypt refuses (OutputRangeError, exit status 3 on the command line) a sample whose output exceeds
    OUTPUT_SLACK x the largest output magnitude on the calibration data, naming it; the others alone pass."""
    from crypto.params import CKKSParameters
    from tensor_ops.attention_split import OUTPUT_SLACK
    from tensor_ops.inference import OutputRangeError, pack_message, unpack_message
    from tensor_ops.tensor import CipherTensor

    spec = AttentionSpec(CKKSParameters.from_literal(_ring(2)), (), None, 2, (3,), (3,), (-1.0, 1.0), 0.1,
                         "0" * 64, "1" * 64)
    client = AttentionClient(spec, allow_insecure=True, seed=4)
    x = np.array([[0.1, 0.2, -0.3], [0.1, OUTPUT_SLACK * 0.1 + 0.2, 0.0], [0.0, 0.0, 0.05]])
    header, blobs = unpack_message(client.encrypt(x), "request")
    tensors = [CipherTensor.from_bytes(blob, client.server_context()) for blob in blobs]
    reply = {k: v for k, v in header.items() if k not in ("kind", "ciphertexts", "sample_shape")}
    with pytest.raises(OutputRangeError, match=r"samples \[1\]") as refused:
        client.decrypt(pack_message("reply", dict(reply, output_shape=[3]), tensors))
    assert list(refused.value.invalid) == [1]
    kept = dict(reply, samples=2)
    y = client.decrypt(pack_message("reply", dict(kept, output_shape=[3]), [tensors[0], tensors[2]]))
    assert np.max(np.abs(y - x[[0, 2]])) < 1e-4
