"""benchmarks/resnet.py's network is the CIFAR ResNet-20 the issue names (272k parameters with projection
shortcuts, 3 stages of 3 basic blocks), and the shared reader reads both exports of it as onnxruntime runs them."""
import numpy as np
import pytest

from hezk.model import read_onnx
from tests.model.exported_models import onnxruntime_outputs, torch_export


@pytest.mark.parametrize("shortcut, parameters", [("projection", 272474), ("padding", 269722)])
def test_resnet20_has_the_published_size(shortcut, parameters):
    pytest.importorskip("torch")
    from benchmarks.resnet import resnet20

    model = resnet20(shortcut)
    assert sum(p.numel() for p in model.parameters()) == parameters
    blocks = [m for m in model.modules() if type(m).__name__ == "BasicBlock"]
    assert len(blocks) == 9 and [b.conv1.out_channels for b in blocks] == [16] * 3 + [32] * 3 + [64] * 3


@pytest.mark.slow
@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
def test_resnet20_export_is_read_as_onnxruntime_runs_it(dynamo):
    pytest.importorskip("torch")
    if dynamo:
        pytest.importorskip("onnxscript")
    from benchmarks.resnet import resnet20

    proto = torch_export(resnet20("projection"), (3, 32, 32), dynamo=dynamo)
    x = np.random.default_rng(0).standard_normal((2, 3, 32, 32)).astype(np.float32)
    want = onnxruntime_outputs(proto, x)[0]
    np.testing.assert_allclose(read_onnx(proto).forward(x), want, atol=1e-4 * np.abs(want).max())
