"""tensor_ops.lowering: each layer's einsum, its stage, and the Conv2d dense-vs-patches comparison."""
import numpy as np
import pytest

from tensor_ops.lowering import LayerLowering
from tensor_ops.nn import AvgPool2d, Conv2d, Flatten, Linear, Sequential, Square


def _cnn(second_conv):
    rng = np.random.default_rng(0)
    layers = [Conv2d(rng.normal(size=(2, 1, 3, 3)), padding=1), Square()]
    if second_conv:
        layers += [Conv2d(rng.normal(size=(2, 2, 3, 3)), padding=1)]
    layers += [AvgPool2d(2), Flatten(), Linear(rng.normal(size=(3, 18)))]
    return Sequential(layers, input_shape=(1, 6, 6))


def test_the_named_lowering_is_the_cheaper_one():
    for layer in _cnn(True).plan().layers:
        if layer.kind == "conv2d":
            costs = {"dense": layer.dense_cost, "patches": layer.patches_cost}
            assert layer.preferred == min(costs, key=costs.get)
        else:
            assert layer.preferred is None and "prefers" not in layer.describe()


def test_a_deeper_convolution_pays_for_an_encrypted_im2col():
    first, _, second = _cnn(True).plan().layers[:3]
    assert "client-packed" in first.einsum and "encrypted im2col" in second.einsum
    assert second.patches_cost > first.patches_cost


@pytest.mark.parametrize("dense, patches, preferred", [(1.0, 2.0, "dense"), (2.0, 1.0, "patches"),
                                                      (None, 1.0, "patches"), (1.0, None, "dense"),
                                                      (None, None, None)])
def test_preference_with_missing_costs(dense, patches, preferred):
    assert LayerLowering("conv2d", (1, 4, 4), (1, 4, 4), 0, "x", dense, patches).preferred == preferred


def test_plan_round_trips_its_lowering_through_json():
    import json

    from tensor_ops.model_plan import ModelPlan

    plan = _cnn(False).plan()
    assert ModelPlan.from_dict(json.loads(json.dumps(plan.to_dict()))) == plan and len(plan.layers) == 5
