"""The client writes the model's outputs as its source gives them: the plan carries the postprocess (softmax,
argmax, labels, zipmap) to the client, ``hezk infer`` / ``hezk decrypt`` write the first named output to
--out and each other one beside it, and they equal onnxruntime's (a skl2onnx LogisticRegression exported as a
user does: label and probabilities). Crafted postprocess records are refused naming the field."""
import json

import numpy as np
import pytest

from crypto.errors import ParameterError
from tensor_ops import cli
from tensor_ops.model_plan import ModelPlan
from tests.model.exported_models import iris, onnxruntime_outputs, sklearn_export, sklearn_models


@pytest.fixture(scope="module")
def logistic(tmp_path_factory):
    estimator, options = sklearn_models()["logistic_3_classes"]
    proto = sklearn_export(estimator, options)
    folder = tmp_path_factory.mktemp("logistic")
    (folder / "m.onnx").write_bytes(proto.SerializeToString())
    np.save(folder / "cal.npy", iris())
    np.save(folder / "x.npy", iris()[::15])
    return proto, folder


def test_infer_writes_the_models_named_outputs(logistic, capsys):
    proto, folder = logistic
    assert cli.main(["infer", "--model", str(folder / "m.onnx"), "--calibration", str(folder / "cal.npy"),
                     "--input", str(folder / "x.npy"), "--out", str(folder / "y.npy"), "--no-progress"]) == 0
    label, probabilities = onnxruntime_outputs(proto, iris()[::15])
    np.testing.assert_array_equal(np.load(folder / "y.npy"), label)
    written = np.load(folder / "y.output_probability.npy")
    np.testing.assert_allclose(written, [[d[k] for k in sorted(d)] for d in probabilities], atol=1e-4)
    assert "computed by the client after decryption" in capsys.readouterr().out


def test_the_client_server_split_writes_them_too(logistic, tmp_path):
    proto, folder = logistic
    model, cal = str(folder / "m.onnx"), str(folder / "cal.npy")
    steps = [["plan", "--model", model, "--calibration", cal, "--out", tmp_path / "p.json"],
             ["keygen", "--plan", tmp_path / "p.json", "--client", tmp_path / "c.bin", "--context", tmp_path / "k.bin"],
             ["encrypt", "--client", tmp_path / "c.bin", "--input", folder / "x.npy", "--out", tmp_path / "q.bin"],
             ["infer", "--model", model, "--calibration", cal, "--context", tmp_path / "k.bin", "--request",
              tmp_path / "q.bin", "--out", tmp_path / "r.bin"],
             ["decrypt", "--client", tmp_path / "c.bin", "--reply", tmp_path / "r.bin", "--out", tmp_path / "y.npy"]]
    for step in steps:
        assert cli.main([str(a) for a in step]) == 0, step
    label, _ = onnxruntime_outputs(proto, iris()[::15])
    np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), label)
    assert (tmp_path / "y.output_probability.npy").exists()


def test_plan_carries_the_postprocess_and_refuses_crafted_records(logistic, tmp_path):
    _, folder = logistic
    assert cli.main(["plan", "--model", str(folder / "m.onnx"), "--calibration", str(folder / "cal.npy"),
                     "--out", str(tmp_path / "p.json")]) == 0
    data = json.loads((tmp_path / "p.json").read_text())
    plan = ModelPlan.from_dict(data)
    assert [o.name for o in plan.postprocess] == ["output_label", "output_probability"]
    outputs = plan.outputs(np.array([[0.0, 2.0, 1.0]]))
    assert outputs["output_label"].tolist() == [1]
    for bad in ([{"name": "y", "steps": [{"function": "eval"}]}], [{"name": 3, "steps": []}],
                [{"name": "y", "steps": [{"function": "labels", "labels": [[1]]}]}], {"name": "y"},
                [{"name": "y", "steps": [{"function": "softmax", "axis": "1"}]}]):
        with pytest.raises(ParameterError, match="postprocess"):
            ModelPlan.from_dict(dict(data, postprocess=bad))


def test_a_local_infer_that_refuses_samples_writes_the_named_outputs_with_no_value_for_them(logistic, tmp_path,
                                                                                          capsys):
    """Refused rows (exit 3) get no value in any output: the label file holds the others' labels (not the raw
    scores, as it did) and NaN where a sample was refused (an argmax of a NaN row would have looked like a label)."""
    proto, folder = logistic
    x = iris()[::15].copy()
    x[1] = 100.0  # far outside the calibrated input range
    np.save(tmp_path / "x.npy", x)
    assert cli.main(["infer", "--model", str(folder / "m.onnx"), "--calibration", str(folder / "cal.npy"),
                     "--input", str(tmp_path / "x.npy"), "--out", str(tmp_path / "y.npy"), "--no-progress"]) == 3
    err = capsys.readouterr().err
    assert "refused: samples [1]" in err and "--calibration" in err and "--clip" in err  # the blocker and its fix
    label, probabilities = onnxruntime_outputs(proto, x)
    written = np.load(tmp_path / "y.npy")
    assert written.shape == label.shape and np.isnan(written[1])
    kept = np.arange(len(x)) != 1
    np.testing.assert_array_equal(written[kept], label[kept])
    p = np.load(tmp_path / "y.output_probability.npy")
    assert np.isnan(p[1]).all()
    np.testing.assert_allclose(p[kept], [[d[k] for k in sorted(d)] for d in np.asarray(probabilities)[kept]],
                               atol=1e-4)
