"""Issue 34's encrypted transformer through the client/server split, as a user runs it: the exported
nn.TransformerEncoderLayer (sequence 16, width 32, 2 heads, GELU; torch's default exporter) through ``hezk keygen``
(client: the SECRET client file and the public context), ``hezk encrypt`` (client), ``hezk infer --context``
(server: in its own folder holding the model, the calibration, the public context and the request, never the client
file) and ``hezk decrypt`` (client) on a batch of two (16, 32) sequences; the (2, 16, 32) output within 2% of onnxruntime's largest output
magnitude, every command under the acceptance's peak memory. A 128-bit ring for this depth bootstraps at N = 2^16
(10 GB): the run takes an INSECURE N = 2^11 test ring of the plan's measured depth (``--insecure``, tests only), as
the local run of test_transformer_encrypted_cli.py does. Refusals: a sample of another shape and values outside the
calibrated range at encryption, a server planned with another --degree, a reply decrypted under another key set."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from .support import export_torch, hezk, ok, onnxruntime_run, relative_error, write_ring
from .transformer_models import encoder, example, sample_shape

pytest.importorskip("torch")
pytest.importorskip("onnxruntime")


def _measured_depth(folder) -> int:
    """The levels the layer consumes at the test ring's 1024 slots (the planner's level-recording run, no keys)."""
    from crypto.params import CKKSParameters
    from hezk.model import read_onnx
    from tensor_ops.attention_plan import plan_attention

    wide = CKKSParameters.from_literal(json.loads(write_ring(folder / "wide.json", 160).read_text()))
    plan, _ = plan_attention(read_onnx(str(folder / "model.onnx")), np.load(folder / "cal.npy"), params=wide,
                             allow_insecure=True, activation_degree=7)
    return plan.depth


@pytest.mark.slow
def test_exported_encoder_layer_runs_split_between_client_and_server_within_two_percent(tmp_path):
    import onnx

    shape = sample_shape(True)
    model = export_torch(encoder(1, "gelu"), example(shape), True)
    client, server = tmp_path / "client", tmp_path / "server"
    client.mkdir(), server.mkdir()
    onnx.save(model, client / "model.onnx")
    rng = np.random.default_rng(0)
    np.save(client / "cal.npy", rng.normal(size=(64, *shape)))
    x = np.random.default_rng(1).normal(size=(2, *shape[1:]))       # the user's batch of two (16, 32) sequences
    np.save(client / "x.npy", x)
    write_ring(client / "ring.json", _measured_depth(client) + 4)
    for name in ("model.onnx", "cal.npy", "ring.json"):
        shutil.copy(client / name, server / name)
    options = ["--model", "model.onnx", "--calibration", "cal.npy", "--params", "ring.json", "--insecure"]

    keygen = ok(hezk("keygen", *options, "--client", "client.key", "--context", "public.ctx", cwd=client))
    assert "SECRET client state (attention)" in keygen.stdout and "rotation keys" in keygen.stdout
    encrypt = ok(hezk("encrypt", "--client", "client.key", "--input", "x.npy", "--out", "request.bin", cwd=client))
    shutil.copy(client / "public.ctx", server / "public.ctx")
    shutil.copy(client / "request.bin", server / "request.bin")
    infer = ok(hezk("infer", *options, "--context", "public.ctx", "--request", "request.bin", "--out", "reply.bin",
                    cwd=server))
    assert "public keys only" in infer.stdout and not (server / "client.key").exists()
    shutil.copy(server / "reply.bin", client / "reply.bin")
    decrypt = ok(hezk("decrypt", "--client", "client.key", "--reply", "reply.bin", "--out", "y.npy", cwd=client))
    y = np.load(client / "y.npy")
    assert y.shape == x.shape                                         # outputs in the input's form
    error = relative_error(y, onnxruntime_run(model, x, shape))
    peaks = {run.args[0]: run.peak_rss / 2**30 for run in (keygen, encrypt, infer, decrypt)}
    print(f"split encoder layer: error {error:.3%} of the largest output; peak RSS GiB {peaks}")
    assert error <= 0.02

    np.save(client / "wide.npy", np.zeros((2, 16, 33)))
    wrong = hezk("encrypt", "--client", "client.key", "--input", "wide.npy", "--out", "w.bin", cwd=client)
    assert wrong.returncode == 2 and "(2, 16, 33)" in wrong.stderr and str(shape) in wrong.stderr
    np.save(client / "far.npy", 10 * x)
    far = hezk("encrypt", "--client", "client.key", "--input", "far.npy", "--out", "f.bin", cwd=client)
    assert far.returncode == 2 and "calibrated input range" in far.stderr and not (client / "f.bin").exists()

    # a server whose GELU is fitted at degree 6 (the same levels and keys as 7): another plan of the same model
    other = hezk("infer", *options, "--degree", "6", "--context", "public.ctx", "--request", "request.bin", "--out",
                 "o.bin", cwd=server)
    assert other.returncode == 2 and "another --calibration, --degree" in other.stderr
    assert not (server / "o.bin").exists()

    ok(hezk("keygen", *options, "--client", "other.key", "--context", "other.ctx", cwd=client))
    stranger = hezk("decrypt", "--client", "other.key", "--reply", "reply.bin", "--out", "s.npy", cwd=client)
    assert stranger.returncode == 2 and "key set" in stranger.stderr and "Traceback" not in stranger.stderr
