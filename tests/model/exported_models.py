"""Models exported the way users export them: torch modules through ``torch.onnx.export`` at opset 17 (the
TorchScript exporter, ``dynamo=False``, and the default one), scikit-learn models through skl2onnx; and
onnxruntime's outputs for them (run sample by sample: the torch exports fix the batch at 1)."""
from __future__ import annotations

import contextlib
import io

import numpy as np
import pytest


def torch_export(module, sample_shape, dynamo=False):
    """The ONNX ModelProto of ``module`` exported at opset 17 (input "x", batch of 1)."""
    torch = pytest.importorskip("torch")
    import onnx

    buffer = io.BytesIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        torch.onnx.export(module.eval(), (torch.zeros(1, *sample_shape),), buffer, opset_version=17, dynamo=dynamo,
                          input_names=["x"], output_names=["y"])
    return onnx.load_from_string(buffer.getvalue())


def activation_mlp(module_name: str, sizes=(6, 8, 3), dynamo=False, seed=0):
    """Linear - torch.nn.<module_name>() - Linear of ``sizes`` (in, hidden, out), exported (``torch_export``)."""
    torch = pytest.importorskip("torch")
    if dynamo:
        pytest.importorskip("onnxscript")
    torch.manual_seed(seed)
    n_in, hidden, n_out = sizes
    module = torch.nn.Sequential(torch.nn.Linear(n_in, hidden), getattr(torch.nn, module_name)(),
                                 torch.nn.Linear(hidden, n_out))
    return torch_export(module, (n_in,), dynamo=dynamo)


def onnxruntime_outputs(model, x) -> list:
    """onnxruntime's outputs for the float32 batch x, one sample at a time, concatenated (lists of ZipMap
    dictionaries joined)."""
    import onnxruntime

    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    name = model.graph.input[0].name
    runs = [session.run(None, {name: np.asarray(x[i:i + 1], dtype=np.float32)}) for i in range(len(x))]
    return [sum((run[j] for run in runs), []) if isinstance(runs[0][j], list) else
            np.concatenate([run[j] for run in runs]) for j in range(len(runs[0]))]


def torch_models():
    """{name: (module, sample shape)}: the held-out models' blockers, each in a small network."""
    torch = pytest.importorskip("torch")
    nn, functional = torch.nn, torch.nn.functional
    torch.manual_seed(0)

    class ShortcutA(nn.Module):
        """ResNet-20's option-A shortcut (the CIFAR ResNet repositories): a strided view, zero channels."""

        def __init__(self, planes):
            super().__init__()
            self.planes = planes

        def forward(self, x):
            return functional.pad(x[:, :, ::2, ::2], (0, 0, 0, 0, self.planes // 4, self.planes // 4), "constant", 0)

    class BasicBlockA(nn.Module):
        def __init__(self, cin, planes):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, planes, 3, stride=2, padding=1, bias=False)
            self.bn1 = nn.BatchNorm2d(planes)
            self.conv2 = nn.Conv2d(planes, planes, 3, padding=1, bias=False)
            self.bn2 = nn.BatchNorm2d(planes)
            self.shortcut = ShortcutA(planes)

        def forward(self, x):
            out = functional.relu(self.bn1(self.conv1(x)))
            return functional.relu(self.bn2(self.conv2(out)) + self.shortcut(x))

    return {
        "vgg_maxpool": (nn.Sequential(nn.Conv2d(1, 2, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                                      nn.Linear(2 * 4 * 4, 3)), (1, 8, 8)),
        "mobilenet_relu6": (nn.Sequential(nn.Conv2d(2, 4, 1), nn.BatchNorm2d(4), nn.ReLU6(), nn.Conv2d(4, 4, 3, groups=4),
                                          nn.Flatten(), nn.Linear(4 * 4 * 4, 3), nn.Softmax(dim=1)), (2, 6, 6)),
        "ecg_1d": (nn.Sequential(nn.Conv1d(1, 2, 5, padding=2), nn.ReLU(), nn.AvgPool1d(2), nn.Conv1d(2, 2, 3),
                                 nn.MaxPool1d(2), nn.Flatten(), nn.Linear(2 * 7, 3)), (1, 32)),
        "resnet_option_a": (nn.Sequential(BasicBlockA(2, 4), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 3),
                                          nn.LogSoftmax(dim=1)), (2, 8, 8)),
    }


def sklearn_models():
    """{name: (fitted estimator, skl2onnx options)}: linear models on iris, as users convert them."""
    pytest.importorskip("skl2onnx")
    from sklearn.datasets import load_iris
    from sklearn.linear_model import LinearRegression, LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    x, y = load_iris(return_X_y=True)
    return {
        "logistic_3_classes": (LogisticRegression(max_iter=500).fit(x, y), None),
        "logistic_binary": (LogisticRegression(max_iter=500).fit(x, y == 1), None),
        "logistic_no_zipmap": (LogisticRegression(max_iter=500).fit(x, y), {"zipmap": False}),
        "logistic_string_labels": (LogisticRegression(max_iter=500).fit(x, np.array(["a", "b", "c"])[y]), None),
        "scaled_logistic": (make_pipeline(StandardScaler(), LogisticRegression(max_iter=500)).fit(x, y),
                            {"zipmap": False}),
        "linear_regression": (LinearRegression().fit(x, y), None),
    }


def iris():
    from sklearn.datasets import load_iris

    return load_iris(return_X_y=True)[0].astype(np.float32)


def sklearn_export(estimator, options=None, target_opset=None):
    """``estimator`` as skl2onnx exports it; by default as a user does (no target opset: skl2onnx writes the
    smallest opset its operators need, e.g. 9, which the reader upgrades)."""
    from skl2onnx import to_onnx

    return to_onnx(estimator, iris()[:1], target_opset=target_opset, options=options)


def assert_outputs_agree(got: dict, want: list, atol=1e-5):
    """Each named output against onnxruntime's: floats within ``atol`` of the largest magnitude, labels
    and ZipMap keys equal."""
    assert len(got) == len(want)
    for (name, value), reference in zip(got.items(), want):
        if isinstance(reference, list):
            assert [sorted(d) for d in value] == [sorted(d) for d in reference], name
            for a, b in zip(value, reference):
                np.testing.assert_allclose([a[k] for k in sorted(a)], [b[k] for k in sorted(b)], atol=atol)
        elif reference.dtype.kind in "fc":
            np.testing.assert_allclose(np.asarray(value, dtype=np.float64), reference,
                                       atol=atol * max(1.0, float(np.abs(reference).max())), err_msg=name)
        else:
            assert np.array_equal(np.asarray(value).astype(reference.dtype), reference), name
