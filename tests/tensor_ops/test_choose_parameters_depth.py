"""``model(encrypt(ctx, x))`` (``forward_tensor``) runs on the parameters chosen for the levels it consumes:
one sample at ``choose_parameters(model.depth())``; a batch of rows at ``model.tensor_parameters(batch)``
(the einsum planner masks the rows apart first: one level more than the packed path's ``depth()``), and a
batch encrypted with too few levels is refused up front naming the fix, not by a plan halfway through."""
from __future__ import annotations

import numpy as np
import pytest

from crypto import CKKSContext
from crypto.errors import LevelError
from tensor_ops import encrypt
from tensor_ops.model_plan import choose_parameters
from tensor_ops.nn import Linear, Poly, Residual, Sequential, Square


def _linear(rng, n_out, n_in):
    return Linear(rng.normal(0, .3, (n_out, n_in)), rng.normal(0, .1, n_out))


def _model(kind):
    rng = np.random.default_rng(3)
    activation = {"square": Square(), "sigmoid3": Poly("sigmoid", 3), "relu4": Poly("relu", 4),
                  "gelu7": Poly("gelu", 7)}.get(kind)
    if kind == "residual":
        return Sequential([_linear(rng, 4, 6), Residual([Square(), _linear(rng, 4, 4)]), _linear(rng, 3, 4)],
                          input_shape=(6,))
    return Sequential([_linear(rng, 4, 6), activation, _linear(rng, 3, 4)], input_shape=(6,))


def _run(model, params, x):
    batch = None if x.ndim == 1 else len(x)
    ctx = CKKSContext.keygen(params, rotations=model.tensor_rotations(batch=batch, params=params), seed=1)
    return model(encrypt(ctx, x)).decrypt(ctx)


@pytest.mark.parametrize("kind", ["square", "sigmoid3", "relu4", "gelu7", "residual"])
def test_one_sample_runs_at_choose_parameters_of_depth_and_matches_the_plain_model(kind):
    model = _model(kind)
    x = np.random.default_rng(0).uniform(-1, 1, 6)
    assert model.tensor_depth(params=choose_parameters(model.depth())) == model.depth()
    got = _run(model, choose_parameters(model.depth()), x)
    np.testing.assert_allclose(got, model(x), atol=1e-3 * max(1.0, np.abs(model(x)).max()))


@pytest.mark.parametrize("kind", ["square", "relu4"])
def test_a_batch_runs_at_tensor_parameters_and_matches_the_plain_model(kind):
    model = _model(kind)
    x = np.random.default_rng(1).uniform(-1, 1, (3, 6))
    params = model.tensor_parameters(batch=3)
    # a batch's plans may need a row mask more than one sample (the in-place block diagonals need none)
    assert params.max_level == model.tensor_depth(batch=3, params=params) in (model.depth(), model.depth() + 1)
    got = _run(model, params, x)
    np.testing.assert_allclose(got, model(x), atol=1e-3 * max(1.0, np.abs(model(x)).max()))


def test_a_batch_with_too_few_levels_is_refused_up_front_naming_the_parameters():
    model = _model("relu4")
    params = choose_parameters(model.depth() - 1)
    need = model.tensor_depth(batch=2, params=params)
    assert need > params.max_level
    ctx = CKKSContext.keygen(params, rotations=model.tensor_rotations(batch=2, params=params), seed=1)
    with pytest.raises(LevelError, match=rf"needs {need} levels, the input has {params.max_level}.*"
                                         r"tensor_parameters\(batch=2\)"):
        model(encrypt(ctx, np.zeros((2, 6))))
