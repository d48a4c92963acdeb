"""Minimax activation fits: the default fit has the smallest maximum error on its interval (Chebyshev's
equioscillation theorem: the best polynomial of degree n errs by +-E alternately at n + 2 points), a sigmoid's
values stay in [0, 1], and ``polynomial_range`` is the exact range of a polynomial on an interval."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from numpy.polynomial import chebyshev

from crypto.errors import ParameterError
from tensor_ops.activations import TARGETS, fit_activation, polynomial_range

NAMES = ["relu", "gelu", "silu", "sigmoid", "tanh"]
intervals = st.tuples(st.floats(-20, 10), st.floats(0.2, 30)).map(lambda p: (p[0], p[0] + p[1]))


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(NAMES), st.integers(1, 20), intervals)
def test_minimax_is_never_worse_than_least_squares_or_interpolation(name, degree, interval):
    minimax = fit_activation(name, degree, interval).max_error()
    for method in ("least_squares", "chebyshev"):
        assert minimax <= fit_activation(name, degree, interval, method).max_error() * (1 + 1e-6) + 1e-9


@pytest.mark.parametrize("name, degree", [("relu", 7), ("gelu", 7), ("silu", 4), ("tanh", 5), ("relu", 2),
                                          ("relu", 4), ("gelu", 4), ("silu", 6), ("gelu", 2)])
def test_the_error_equioscillates(name, degree):
    """The minimax error reaches +-E with alternating signs at degree + 2 points (relu at 2 started singular:
    the quadratic through the four Chebyshev extreme points of relu(4t); relu, gelu and silu at an even degree
    fit their odd part x/2 exactly, and a symmetric reference levels their even error at 0)."""
    poly = fit_activation(name, degree, (-4, 4))
    x = np.linspace(-4, 4, 200001)
    error = poly(x) - TARGETS[name](x)
    peak = np.max(np.abs(error))
    near = np.abs(error) >= peak * (1 - 1e-3)
    signs = np.sign(error[near])
    alternations = 1 + np.count_nonzero(signs[1:] != signs[:-1])
    assert alternations >= degree + 2
    assert peak < fit_activation(name, degree, (-4, 4), "chebyshev").max_error() * (1 + 1e-9)


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 15), intervals, st.sampled_from(["minimax", "chebyshev", "least_squares"]))
def test_a_sigmoid_stays_in_0_1_on_its_interval(degree, interval, method):
    poly = fit_activation("sigmoid", degree, interval, method)
    low, high = poly.value_range()
    assert 0.0 <= low and high <= 1.0
    assert np.all((poly(np.linspace(*interval, 2001)) >= 0) & (poly(np.linspace(*interval, 2001)) <= 1))


def test_the_sigmoid_shrink_is_needed_and_costs_little():
    """Negative control: the unshrunk minimax cubic of sigmoid on [-12, 12] overshoots [0, 1]; the fitted one
    does not, and errs by less than twice the unshrunk one (the shrink removes at most the overshoot)."""
    t = np.linspace(-1, 1, 4001)
    raw = chebyshev.cheb2poly(chebyshev.chebfit(t, TARGETS["sigmoid"](12 * t), 3))
    raw_low, raw_high = polynomial_range(raw, -1.0, 1.0)
    assert raw_low < 0 or raw_high > 1
    poly = fit_activation("sigmoid", 4, (-12, 12))
    low, high = poly.value_range()
    assert 0 <= low and high <= 1
    raw_error = np.max(np.abs(np.polynomial.polynomial.polyval(t, raw) - TARGETS["sigmoid"](12 * t)))
    assert poly.max_error() < 2 * raw_error


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(-5, 5), min_size=1, max_size=9), st.floats(-1, 1), st.floats(0, 1))
def test_polynomial_range_is_exact(coefficients, low, width):
    high = min(low + width, 1.0)
    lo, hi = polynomial_range(coefficients, low, high)
    values = np.polynomial.polynomial.polyval(np.linspace(low, high, 20001), coefficients)
    scale = 1e-9 * max(1.0, np.max(np.abs(values)))
    assert lo <= values.min() + scale and hi >= values.max() - scale
    assert lo >= values.min() - 1e-3 * max(1.0, np.ptp(values)) - scale  # attained, not just a bound
    assert hi <= values.max() + 1e-3 * max(1.0, np.ptp(values)) + scale


def test_samples_weight_only_the_least_squares_fit():
    with pytest.raises(ParameterError, match="samples="):
        fit_activation("relu", 4, (-4, 4), "minimax", samples=[0.0, 1.0])
    assert fit_activation("relu", 4, (-4, 4), "least_squares", samples=[0.0, 1.0]).degree == 4


def test_the_chosen_degree_is_kept_where_its_top_coefficient_vanishes():
    """relu's best cubic is a quadratic (relu = x/2 + |x|/2, |x| even): the layer still reports degree 3."""
    poly = fit_activation("relu", 3, (-4, 4))
    assert len(poly.coefficients) == 4 and poly.degree == 2
