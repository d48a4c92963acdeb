"""Issue 34's acceptance, encrypted half, as a user runs it: an nn.TransformerEncoderLayer (width 32, 2 heads,
sequence 16; batch or sequence first, ReLU or GELU, post- or pre-norm), a 2-layer nn.TransformerEncoder and a
hand-written causal attention block, exported by torch's default exporter and by the TorchScript one, run by
``hezk plan`` and a local ``hezk infer`` (keygen, encrypt, evaluate, decrypt) on a batch; the decrypted output
within 2% of onnxruntime's largest output magnitude, peak memory under 6 GiB, and a far input refused (exit 2)
naming the calibrated range. A 128-bit ring for this depth bootstraps at N = 2^16 (10 GB): these runs take an
INSECURE N = 2^11 test ring of the plan's measured depth (``--insecure``, tests only); the 128-bit plan's
parameters and bootstraps are checked by ``hezk plan`` without ``--params``."""
from __future__ import annotations

import json
import re

import numpy as np
import pytest

from .support import export_torch, hezk, ok, onnxruntime_run, relative_error, write_ring
from .transformer_models import (D_MODEL, SEQUENCE, causal_attention, data_shape, encoder, example, gpt_block,
                                 sample_shape, vit)

pytest.importorskip("torch")
pytest.importorskip("onnxruntime")

SCENARIOS = {  # name: (module maker, file input shape, exporter is dynamo, batch)
    "layer-gelu-batchfirst-postnorm-default": (lambda: encoder(1, "gelu"), sample_shape(True), True, 2),
    "layer-relu-seqfirst-prenorm-torchscript": (lambda: encoder(1, "relu", batch_first=False, norm_first=True),
                                                sample_shape(False), False, 1),
    "layer-gelu-seqfirst-postnorm-default": (lambda: encoder(1, "gelu", batch_first=False), sample_shape(False),
                                             True, 1),
    "stack2-gelu-torchscript": (lambda: encoder(2, "gelu"), sample_shape(True), False, 1),
    "causal-attention-default": (causal_attention, (1, SEQUENCE, D_MODEL), True, 2),  # data: (batch, 16, 32)
    "causal-attention-torchscript": (causal_attention, (1, SEQUENCE, D_MODEL), False, 1),
    "vit-torchscript": (vit, (1, 1, 16, 16), False, 2),  # data: (batch, 1, 16, 16) images
    "vit-default": (vit, (1, 1, 16, 16), True, 1),
    "gpt-block-sdpa-causal-default": (gpt_block, (1, SEQUENCE, D_MODEL), True, 1),
    "gpt-block-sdpa-causal-torchscript": (gpt_block, (1, SEQUENCE, D_MODEL), False, 2),
}


def _files(tmp_path, make, shape, dynamo, batch):
    import onnx

    model = export_torch(make(), example(shape), dynamo)
    onnx.save(model, tmp_path / "model.onnx")
    rng = np.random.default_rng(0)
    shape = data_shape(make, shape)
    np.save(tmp_path / "cal.npy", rng.normal(size=(64, *shape)))
    x = np.random.default_rng(1).normal(size=(batch, *shape))
    np.save(tmp_path / "x.npy", x)
    return model, x


def _depth(folder, degree: int) -> int:
    """The levels the model consumes at the test ring's 1024 slots (``hezk plan`` takes no insecure ring: the
    planner's level-recording run, no keys made)."""
    from crypto.params import CKKSParameters
    from hezk.model import read_onnx
    from tensor_ops.attention_plan import plan_attention

    wide = CKKSParameters.from_literal(json.loads(write_ring(folder / "wide.json", 160).read_text()))
    plan, _ = plan_attention(read_onnx(str(folder / "model.onnx")), np.load(folder / "cal.npy"), params=wide,
                             allow_insecure=True, activation_degree=degree)
    return plan.depth


@pytest.mark.slow
@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_exported_transformer_runs_encrypted_within_two_percent(tmp_path, scenario):
    make, shape, dynamo, batch = SCENARIOS[scenario]
    model, x = _files(tmp_path, make, shape, dynamo, batch)
    shape = data_shape(make, shape)
    # a batch of 2 takes a level more; degree 15: what the command line picks for a ReLU layer (7 errs 2.3%)
    ring = write_ring(tmp_path / "ring.json", _depth(tmp_path, 15 if "relu" in scenario else 7) + 4)
    run = ok(hezk("infer", "--model", "model.onnx", "--calibration", "cal.npy", "--input", "x.npy", "--out", "y.npy",
                  "--params", ring, "--insecure", cwd=tmp_path))
    expected = onnxruntime_run(model, x, shape)
    error = relative_error(np.load(tmp_path / "y.npy"), expected)
    print(f"{scenario}: encrypted error {error:.3%} of the largest output, peak RSS {run.peak_rss / 2**30:.2f} GiB")
    assert error <= 0.02
    np.save(tmp_path / "far.npy", 10 * x)
    far = hezk("infer", "--model", "model.onnx", "--calibration", "cal.npy", "--input", "far.npy", "--out",
               "far_y.npy", "--params", ring, "--insecure", cwd=tmp_path)
    assert far.returncode == 2 and "calibrated range" in far.stderr and "Traceback" not in far.stderr
    assert not (tmp_path / "far_y.npy").exists()


@pytest.mark.slow
def test_the_128_bit_plan_bootstraps_the_layer_on_n16_boot(tmp_path):
    """Without --params, ``hezk plan`` names 128-bit parameters that hold the layer's depth (N16_BOOT with its
    bootstraps), each approximation's error and the whole model's on the calibration data within 2%."""
    make, shape, dynamo, _ = SCENARIOS["layer-gelu-batchfirst-postnorm-default"]
    _files(tmp_path, make, shape, dynamo, 1)
    plan = ok(hezk("plan", "--model", "model.onnx", "--calibration", "cal.npy", cwd=tmp_path))
    assert "security 128-bit" in plan.stdout and "ciphertext bootstraps at" in plan.stdout
    share = float(re.search(r"max error \S+ \(([\d.]+)% of the largest", plan.stdout).group(1))
    assert share <= 2.0


@pytest.mark.slow
def test_a_sequence_first_layer_plans_in_process(tmp_path, capsys):
    """nn.TransformerEncoderLayer's default batch_first=False exports a (sequence, 1,
    width) input; ``hezk plan`` reads it (the batch axis of 1 in the middle read as a sample axis) and plans
    its encrypted products (before: refused, 'moves or removes the batch axis')."""
    import onnx

    from hezk import cli

    shape = sample_shape(False, sequence=4, d_model=8)
    model = export_torch(encoder(1, "relu", batch_first=False, d_model=8, feedforward=16), example(shape), False)
    onnx.save(model, tmp_path / "model.onnx")
    np.save(tmp_path / "cal.npy", np.random.default_rng(0).normal(size=(16, *shape)))
    assert cli.main(["plan", "--model", str(tmp_path / "model.onnx"), "--calibration", str(tmp_path / "cal.npy")]) == 0
    out = capsys.readouterr().out
    assert "input (4, 1, 8)" in out and "2 products of two encrypted tensors" in out


@pytest.mark.slow
def test_without_degree_a_relu_layer_is_refitted_until_within_one_percent(tmp_path, capsys):
    """``hezk plan`` without --degree: a ReLU encoder layer, whose degree-7 fit errs more than 1% of the largest
    output on the calibration data, is refitted at degree 15 (said so; before: 2.6% on fresh inputs, beyond the
    2% acceptance); a GELU layer keeps degree 7; --degree 7 keeps 7."""
    import onnx

    from hezk import cli

    for activation, refitted in (("relu", True), ("gelu", False)):
        model = export_torch(encoder(1, activation, norm_first=True), example(sample_shape(True)), False)
        onnx.save(model, tmp_path / "model.onnx")
        np.save(tmp_path / "cal.npy", np.random.default_rng(0).normal(size=(32, *sample_shape(True))))
        common = ["plan", "--model", str(tmp_path / "model.onnx"), "--calibration", str(tmp_path / "cal.npy")]
        assert cli.main(common) == 0
        out = capsys.readouterr().out
        assert ("refitted at degree 15" in out) == refitted and f"degree-{15 if refitted else 7} minimax" in out
        share = float(re.search(r"max error \S+ \(([\d.]+)% of the largest", out).group(1))
        assert share <= 1.0
        if refitted:  # a degree named is kept
            assert cli.main(common + ["--degree", "7"]) == 0
            out = capsys.readouterr().out
            assert "refitted" not in out and "degree-7 minimax" in out
