"""A model's last elementwise activation (a classifier's sigmoid) is applied exactly by the client after
decryption instead of being fitted by a polynomial on a wide calibrated interval (a degree-4 sigmoid on
[-85, 38] was off by 0.39): the plan says so, carries it to the client (``ModelPlan.finish``), and a crafted
value is refused. The ring is an INSECURE test ring (N = 2^11) chosen for speed."""
import json

import numpy as np
import pytest

from crypto.errors import ParameterError
from hezk.model import read_onnx
from tensor_ops.inference import Client, Server
from tensor_ops.model_plan import ModelPlan
from tensor_ops.nn import from_graph
from tests.model.exported_models import onnxruntime_outputs, torch_export

TEST_RING = dict(log_n=11, log_q=[[30, 30]] + [[25, 26]] * 8, log_p=[30] * 4, log_scale=50, dnum=4, insecure=True)


def logistic_model(scale=20.0):
    """A torch logistic regression whose logits span about +-``scale`` (a sigmoid far into saturation)."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    linear = torch.nn.Linear(6, 1)
    with torch.no_grad():
        linear.weight.mul_(scale)
    return torch_export(torch.nn.Sequential(linear, torch.nn.Sigmoid()), (6,))


def test_a_final_sigmoid_is_the_clients_and_exact():
    proto = logistic_model()
    rng = np.random.default_rng(1)
    model = from_graph(read_onnx(proto), calibration=rng.normal(size=(256, 6)))
    plan = model.plan(params=TEST_RING)
    assert plan.finish == "sigmoid" and "sigmoid, is applied exactly by the client" in plan.explain()
    client = Client(plan=plan, seed=0, allow_insecure=True)
    x = rng.normal(scale=0.8, size=(8, 6)).astype(np.float32)
    y = client.decrypt(Server(model, client.public_context()).evaluate(client.encrypt(x)))
    want = onnxruntime_outputs(proto, x)[0]
    assert np.all((y >= 0.0) & (y <= 1.0))
    assert np.abs(y - want).max() <= 1e-5  # CKKS noise only: no polynomial in the path
    np.testing.assert_allclose(model.forward(x), want, atol=1e-5)  # the plain reference agrees


def test_the_finish_travels_in_the_plan_and_a_crafted_one_is_refused():
    model = from_graph(read_onnx(logistic_model()), calibration=np.random.default_rng(2).normal(size=(64, 6)))
    data = model.plan(params=TEST_RING).to_dict()
    assert ModelPlan.from_dict(json.loads(json.dumps(data))).finish == "sigmoid"
    data["finish"] = "exp"
    with pytest.raises(ParameterError, match="finish"):
        ModelPlan.from_dict(data)


def test_an_inner_sigmoid_is_still_fitted():
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    proto = torch_export(torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Sigmoid(), torch.nn.Linear(4, 2)), (4,))
    model = from_graph(read_onnx(proto), calibration=np.random.default_rng(3).normal(size=(64, 4)))
    assert model.finish == "" and model.plan(params=TEST_RING).finish == ""
