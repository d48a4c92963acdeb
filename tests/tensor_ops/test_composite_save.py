"""A model saved with composite-sign ReLUs (``Sequential.choose_relus``, MaxPool's pairwise max) reads back as the
same composite, not as a plain polynomial of its stages' concatenated coefficients (which computed another
function without a word)."""
import numpy as np
import pytest

from crypto.errors import ParameterError
from tensor_ops.activations import composite_relu
from tensor_ops.nn import Activation, Linear, Sequential


def _model(rng):
    return Sequential([Linear(rng.normal(size=(6, 4)), rng.normal(size=6)), Activation(composite_relu((-3.0, 2.0))),
                       Linear(rng.normal(size=(2, 6)), rng.normal(size=2))], input_shape=(4,))


def test_a_composite_relu_survives_save_and_load(tmp_path):
    rng = np.random.default_rng(1)
    model = _model(rng)
    path = tmp_path / "m.npz"
    model.save(path)
    loaded = Sequential.load(path)
    x = rng.uniform(-0.3, 0.3, size=(32, 4))
    assert type(loaded.layers[1].poly) is type(model.layers[1].poly)
    assert loaded.layers[1].poly == model.layers[1].poly
    np.testing.assert_array_equal(loaded.forward(x), model.forward(x))
    assert loaded.depth() == model.depth()


def test_a_damaged_composite_entry_is_refused(tmp_path):
    rng = np.random.default_rng(2)
    model = _model(rng)
    path = tmp_path / "m.npz"
    model.save(path)
    with np.load(path) as data:
        arrays = dict(data)
    del arrays["layer1.stage1"]
    broken = tmp_path / "broken.npz"
    np.savez(broken, **arrays)
    with pytest.raises(ParameterError, match="stage"):
        Sequential.load(broken)


@pytest.mark.parametrize("stages, gap, word", [((), 0.03, "stages"), (((0.0,),), 0.03, "stage0"),
                                               (((0.0, float("nan")),), 0.03, "stage0"), (((0.0, 1.0),), 1.5, "gap")])
def test_a_composite_sign_refuses_malformed_stages_wherever_it_is_made(stages, gap, word):
    from tensor_ops.activations import CompositeRelu

    with pytest.raises(ParameterError, match=word):
        CompositeRelu(stages, 1.0, gap)
