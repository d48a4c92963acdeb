"""Files exported on a batch of 1 whose batch axis the reader keeps in the sample (attention that moves it):
users' data may come as (n, *sample) or as (n, *sample without its leading 1), outputs in the same form; and a
window operator (a ViT's patch-embedding Conv) reads in such a graph. Each against onnxruntime."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, strategies as st

from hezk.model import ModelFileError, as_batch, in_form, input_form, read_onnx


@given(st.lists(st.integers(1, 4), min_size=1, max_size=4), st.integers(1, 3))
def test_input_forms_round_trip(sample, n):
    """Each form maps to a batch of the sample shape and back to itself; a shape of no form is None."""
    sample = tuple(sample)
    x = np.arange(n * int(np.prod(sample)), dtype=float).reshape(n, *sample)
    assert input_form(x.shape, sample) == "batch"
    assert np.array_equal(in_form(as_batch(x, "batch"), "batch"), x)
    assert input_form(x[0].shape, sample) == "sample"
    assert np.array_equal(as_batch(x[0], "sample"), x[:1])
    unit = (1, *sample)
    if len(unit) >= 2 and n > 1:
        assert input_form(x.shape, unit) == "unit"
        batch = as_batch(x, "unit")
        assert batch.shape == (n, *unit) and np.array_equal(batch[:, 0], x)
        assert np.array_equal(in_form(batch, "unit"), x)
    assert input_form((n, *sample, 2), sample) is None


def _vit(torch):
    torch.manual_seed(0)

    class ViT(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.patch = torch.nn.Conv2d(1, 16, 4, 4)
            self.pos = torch.nn.Parameter(torch.randn(1, 4, 16) * .1)
            self.enc = torch.nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
            self.head = torch.nn.Linear(16, 3)

        def forward(self, x):
            return self.head(self.enc(self.patch(x).flatten(2).transpose(1, 2) + self.pos).mean(dim=1))

    return ViT().eval()


def _layer(torch):
    torch.manual_seed(0)

    class OnlyX(torch.nn.Module):  # the exporter would pass is_causal as a tensor otherwise
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)

        def forward(self, x):
            return self.layer(x)

    return OnlyX().eval()


@pytest.mark.parametrize("make, shape", [pytest.param(_vit, (1, 1, 8, 8), id="vit", marks=pytest.mark.slow),
                                         pytest.param(_layer, (1, 5, 8), id="encoder")])
def test_a_unit_batch_file_reads_user_batches_as_onnxruntime(make, shape):
    """A ViT (patch Conv, then attention whose transposes move the batch axis) and an encoder layer exported on
    a batch of 1 by torch's TorchScript exporter: read, and the float reference equals onnxruntime's on a batch
    given both with and without the file's unit axis."""
    torch = pytest.importorskip("torch")
    ort = pytest.importorskip("onnxruntime")
    import io
    import contextlib

    buffer = io.BytesIO()
    with contextlib.redirect_stderr(io.StringIO()):
        torch.onnx.export(make(torch), (torch.zeros(shape),), buffer, input_names=["x"], dynamo=False,
                          opset_version=17)
    graph = read_onnx(buffer.getvalue())
    assert graph.input_shape == shape
    session = ort.InferenceSession(buffer.getvalue(), providers=["CPUExecutionProvider"])
    x = np.random.default_rng(0).normal(size=(3, *shape[1:]))
    expected = np.concatenate([session.run(None, {"x": xi[None].astype(np.float32)})[0] for xi in x])
    got = graph.forward(x)  # (3, *shape[1:]): the user's batch without the file's axis of 1
    assert got.shape == expected.shape
    assert np.max(np.abs(got - expected)) <= 1e-4 * max(1.0, np.max(np.abs(expected)))
    stacked = graph.forward(x[:, None])  # (3, *shape): the sample as the file declares it
    assert np.allclose(stacked[:, 0], got)
    with pytest.raises(ModelFileError, match=r"nor \(batch, \*"):
        graph.forward(x[:, :, :-1])


def _export(make, shape, torch):
    import contextlib
    import io

    buffer = io.BytesIO()
    with contextlib.redirect_stderr(io.StringIO()):
        torch.onnx.export(make(torch), (torch.zeros(shape),), buffer, input_names=["x"], dynamo=False,
                          opset_version=17)
    return buffer.getvalue()


@pytest.mark.slow
def test_proofs_take_and_give_the_users_batch_without_the_unit_axis(tmp_path):
    """hezk commit|prove|verify on an encoder layer exported on (1, 5, 8), with calibration and inputs given as
    (n, 5, 8): the verified output is (n, 5, 8), within 2% of onnxruntime's per-sample outputs concatenated."""
    import contextlib

    from proofs import cli as proofs_cli

    torch = pytest.importorskip("torch")
    ort = pytest.importorskip("onnxruntime")
    data = _export(_layer, (1, 5, 8), torch)
    (tmp_path / "m.onnx").write_bytes(data)
    rng = np.random.default_rng(0)
    np.save(tmp_path / "cal.npy", rng.normal(size=(16, 5, 8)))
    x = rng.normal(size=(2, 5, 8))
    np.save(tmp_path / "x.npy", x)
    steps = [("commit", "--model", "m.onnx", "--out", "c.bin", "--calibration", "cal.npy", "--public-weights",
              "--quiet"),
             ("prove", "--model", "m.onnx", "--input", "x.npy", "--commitment", "c.bin", "--out", "p.bin",
              "--public-weights", "--quiet"),
             ("verify", "--commitment", "c.bin", "--input", "x.npy", "--proof", "p.bin", "--output", "y.npy")]
    with contextlib.chdir(tmp_path):
        assert [proofs_cli.main(list(step)) for step in steps] == [0] * len(steps)
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    expected = np.concatenate([session.run(None, {"x": xi[None].astype(np.float32)})[0] for xi in x])
    got = np.load(tmp_path / "y.npy")
    assert got.shape == expected.shape == (2, 5, 8)
    assert np.max(np.abs(got - expected)) <= 0.02 * np.max(np.abs(expected))


def test_a_reshape_merging_the_batch_of_one_into_heads_reads_as_onnxruntime():
    """(1, 2, 3, 4) -> (2, 3, 4) -> MatMul -> back: torch's dynamo SDPA merges the batch of 1 into the heads; the
    file (batch declared 1) is read with that axis in the sample, equal to onnxruntime."""
    from ..model.onnx_models import Builder, run_onnx

    b = Builder((2, 3, 4), batch=1)
    merged = b.node("Reshape", ["x", b.const(np.array([2, 3, 4]))])
    product = b.node("MatMul", [merged, b.const(b.weight(4, 4))])
    b.node("Reshape", [product, b.const(np.array([1, 2, 3, 4]))])
    model = b.model()
    graph = read_onnx(model)
    assert graph.input_shape == (1, 2, 3, 4)
    x = np.random.default_rng(0).normal(size=(1, 2, 3, 4))
    assert np.allclose(graph.forward(x), run_onnx(model, x), atol=1e-5)
