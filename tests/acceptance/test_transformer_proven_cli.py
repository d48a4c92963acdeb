"""Issue 34's acceptance, proven half, as a user runs it: the exported encoder layer, the 2-layer stack and the
hand-written causal attention block committed with hidden weights (``hezk commit``), proven (``hezk prove``)
and verified (``hezk verify --output``) on a batch; the verified output within 2% of onnxruntime's largest
output magnitude, peak memory under 6 GiB; an input beyond the committed input bound refused (exit 2)."""
from __future__ import annotations

import re

import numpy as np
import pytest

from .support import export_torch, hezk, ok, onnxruntime_run, relative_error
from .transformer_models import (D_MODEL, SEQUENCE, causal_attention, data_shape, encoder, example, gpt_block,
                                 sample_shape, vit)

pytest.importorskip("torch")
pytest.importorskip("onnxruntime")


SCENARIOS = [  # module maker, file input shape, dynamo, batch, public weights
    pytest.param(lambda: encoder(1, "gelu"), sample_shape(True), True, 2, False,
                 id="layer-gelu-batchfirst-postnorm-default"),
    pytest.param(lambda: encoder(1, "relu", norm_first=True), sample_shape(True), False, 1, False,
                 id="layer-relu-batchfirst-prenorm-torchscript"),
    pytest.param(lambda: encoder(2, "gelu"), sample_shape(True), True, 1, False, id="stack2-gelu-default"),
    pytest.param(lambda: encoder(1, "relu", batch_first=False, norm_first=True), sample_shape(False), False, 1, True,
                 id="layer-relu-seqfirst-prenorm-torchscript-public"),
    pytest.param(lambda: encoder(1, "gelu", batch_first=False), sample_shape(False), True, 1, False,
                 id="layer-gelu-seqfirst-postnorm-default"),
    pytest.param(causal_attention, (1, SEQUENCE, D_MODEL), True, 1, False, id="causal-attention-default"),
    pytest.param(vit, (1, 1, 16, 16), True, 2, False, id="vit-default"),
    pytest.param(vit, (1, 1, 16, 16), False, 1, True, id="vit-torchscript-public"),
    pytest.param(gpt_block, (1, SEQUENCE, D_MODEL), True, 1, False, id="gpt-block-sdpa-causal-default"),
    pytest.param(gpt_block, (1, SEQUENCE, D_MODEL), False, 2, False, id="gpt-block-sdpa-causal-torchscript"),
]


@pytest.mark.slow
@pytest.mark.parametrize("make, shape, dynamo, batch, public", SCENARIOS)
def test_exported_transformer_is_proven_within_two_percent(tmp_path, make, shape, dynamo, batch, public):
    import onnx

    model = export_torch(make(), example(shape), dynamo)
    onnx.save(model, tmp_path / "model.onnx")
    shape = data_shape(make, shape)
    np.save(tmp_path / "cal.npy", np.random.default_rng(0).normal(size=(32, *shape)))
    x = np.random.default_rng(1).normal(size=(batch, *shape))
    np.save(tmp_path / "x.npy", x)
    weights = ["--public-weights"] if public else ["--max-proofs", "2"]
    runs = [ok(hezk("commit", "--model", "model.onnx", "--out", "c.bin", "--calibration", "cal.npy", *weights,
                    cwd=tmp_path)),
            ok(hezk("prove", "--model", "model.onnx", "--input", "x.npy", "--commitment", "c.bin", "--out", "p.bin",
                    "--quiet", *weights[:1] if public else [], cwd=tmp_path)),
            ok(hezk("verify", "--commitment", "c.bin", "--input", "x.npy", "--proof", "p.bin", "--output", "y.npy",
                    cwd=tmp_path))]
    assert runs[-1].stdout.startswith("accept")
    error = relative_error(np.load(tmp_path / "y.npy"), onnxruntime_run(model, x, shape))
    print(f"proven error {error:.3%} of the largest output, peak RSS {max(r.peak_rss for r in runs) / 2**30:.2f} "
          f"GiB, proof {(tmp_path / 'p.bin').stat().st_size} bytes")
    assert error <= 0.02
    np.save(tmp_path / "far.npy", 1000 * x)
    far = hezk("prove", "--model", "model.onnx", "--input", "far.npy", "--commitment", "c.bin", "--out", "far.bin",
               "--quiet", *weights[:1] if public else [], cwd=tmp_path)
    assert far.returncode == 2 and re.search("input bound|outside", far.stderr) and "Traceback" not in far.stderr
    assert not (tmp_path / "far.bin").exists()
