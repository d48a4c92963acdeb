"""Polynomial activations: fits approximate their targets, the depth-optimal schedule equals Horner."""
import math

import numpy as np
import pytest
from hypothesis import given, strategies as st

from crypto.errors import ParameterError
from tensor_ops.activations import PolyActivation, evaluate_power_series, fit_activation, square
from tests.reference.naive_nn import horner

NAMES = ["relu", "gelu", "silu", "sigmoid"]


@given(st.lists(st.floats(-3, 3), min_size=1, max_size=40),
       st.lists(st.floats(-1, 1), min_size=1, max_size=16))
def test_schedule_equals_horner(coefficients, points):
    t = np.array(points)
    got = np.asarray(evaluate_power_series(coefficients, t)) * np.ones_like(t)
    np.testing.assert_allclose(got, horner(coefficients, t), rtol=1e-9, atol=1e-9)


@given(st.integers(1, 63), st.randoms(use_true_random=False))
def test_depth_is_minimal(degree, rnd):
    # a coefficient of exactly 1 multiplies for free (the depth is then "at most" the bound; hypothesis draws
    # 1.0 from uniform(0.5, 2.0) now and then): generic coefficients reach the bound exactly
    coefficients = [c if c != 1.0 else 1.5 for c in (rnd.uniform(0.5, 2.0) for _ in range(degree + 1))]
    poly = PolyActivation("custom", coefficients)
    assert poly.depth == math.ceil(math.log2(degree + 1))


def test_unit_coefficients_never_cost_more_than_the_bound():
    assert PolyActivation("custom", [1.0, 1.0]).depth <= 1
    assert PolyActivation("custom", [1.0] * 8).depth <= 3


def test_monomials_cost_only_their_squarings():
    assert square().depth == 1
    assert PolyActivation("custom", [0, 0, 0, 0, 1]).depth == 2
    assert PolyActivation("custom", [0, 0, 0, 0, 1]).multiplications == (2, 0)
    assert PolyActivation("custom", [3.0]).depth == 0


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("method", ["chebyshev", "least_squares"])
def test_fit_error_shrinks_with_degree(name, method):
    errors = [fit_activation(name, d, (-4, 4), method).max_error() for d in (2, 8, 16)]
    assert errors[2] < errors[0]
    assert errors[2] < 0.2


@pytest.mark.parametrize("name", NAMES)
def test_fit_interval_is_honoured(name):
    poly = fit_activation(name, 12, (-2.0, 6.0))
    assert poly.interval == (-2.0, 6.0)
    x = np.linspace(-2, 6, 101)
    assert np.max(np.abs(poly(x) - poly.target(x))) < 0.1


def test_sigmoid_fit_is_accurate():
    assert fit_activation("sigmoid", 15, (-8, 8)).max_error() < 1e-2


@pytest.mark.parametrize("kwargs, word", [
    (dict(name="tanhh", degree=3), "name"),
    (dict(name="relu", degree=0), "degree"),
    (dict(name="relu", degree=500), "degree"),
    (dict(name="relu", degree=2.5), "degree"),
    (dict(name="relu", degree=3, interval=(2, 1)), "interval"),
    (dict(name="relu", degree=3, interval=(0, float("inf"))), "interval"),
    (dict(name="relu", degree=3, method="remez"), "method"),
])
def test_bad_fit_arguments(kwargs, word):
    with pytest.raises(ParameterError, match=word):
        fit_activation(**kwargs)


def test_bad_coefficients():
    with pytest.raises(ParameterError, match="coefficients"):
        PolyActivation("custom", [1.0, float("nan")])
    with pytest.raises(ParameterError, match="radius"):
        PolyActivation("custom", [1.0], radius=0.0)


def test_odd_targets_drop_even_dust_and_save_levels():
    poly = fit_activation("sigmoid", 4, (-6, 6))
    assert poly.coefficients[2] == 0.0 and poly.coefficients[4] == 0.0
    assert poly.degree == 3 and poly.depth == 2
    assert fit_activation("relu", 4, (-6, 6)).depth == 3
