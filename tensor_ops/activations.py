"""Polynomial activations for encrypted inference: fitting on an interval and depth-optimal evaluation.

CKKS evaluates only additions and multiplications, so a non-polynomial activation f (ReLU, GELU, SiLU,
sigmoid) is replaced by a polynomial p ~ f on an interval [a, b] that the inputs are expected to stay in.
The input is first normalised, t = (x - c) / r with c = (a + b) / 2 and r = (b - a) / 2, so the fit lives
on [-1, 1] where the power basis is well conditioned; a model folds this affine map into the preceding
linear layer, so it costs nothing encrypted.

Fitting (Trefethen, *Approximation Theory and Approximation Practice*, ch. 4 and 8):
- ``"chebyshev"``: interpolation at the degree + 1 Chebyshev points of the first kind, near-best in the
  sup norm;
- ``"least_squares"``: the L2-best polynomial on a fine uniform grid of the interval.

Evaluation (the same code runs on numpy arrays and on ciphertexts, so the plaintext reference computes the
very polynomial the server computes): p(t) = q(t) + t^g * s(t) with g the largest power of two not above
deg p, q of degree < g and s of degree <= deg p - g, applied recursively (the giant steps t^(2^j) of
Paterson and Stockmeyer, *SIAM J. Comput.* 2(1), 1973, with baby step t; see Lee, Lee, Kim and No,
"High-precision bootstrapping of RNS-CKKS ...", 2020, for the depth bound). A degree-d polynomial with
arbitrary coefficients takes ceil(log2(d + 1)) multiplicative levels, the minimum, because every scalar
coefficient is multiplied into the lowest-depth factor of its term; ``depth`` reports the exact count of
the schedule, e.g. 1 for t^2.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.polynomial import chebyshev

from crypto.errors import ParameterError

MAX_DEGREE = 63
_LSQ_GRID = 4097
_SAMPLE_POINTS = 4097  # quantiles of the calibration samples a data-weighted fit uses
_GRID_SHARE = 0.05  # of the weight of a data-weighted fit, on a uniform grid of the whole interval
_DUST = 1e-12


def _sigmoid(x):
    return 0.5 * (1.0 + np.tanh(0.5 * x))


_ERF = np.frompyfunc(math.erf, 1, 1)

TARGETS = {
    "relu": lambda x: np.maximum(x, 0.0),
    "gelu": lambda x: 0.5 * x * (1.0 + _ERF(x / math.sqrt(2.0)).astype(np.float64)),
    "silu": lambda x: x * _sigmoid(x),
    "sigmoid": _sigmoid,
    "tanh": np.tanh,
    "square": np.square,
}
METHODS = ("chebyshev", "least_squares")


@dataclass(frozen=True)
class PolyActivation:
    """p((x - center) / radius) with ``coefficients`` in the power basis of t, lowest degree first."""

    name: str
    coefficients: tuple[float, ...]
    center: float = 0.0
    radius: float = 1.0

    def __post_init__(self):
        coefficients = tuple(float(c) for c in self.coefficients)
        if not coefficients or not all(math.isfinite(c) for c in coefficients):
            raise ParameterError(f"coefficients={self.coefficients!r} must be a non-empty sequence of finite numbers")
        if len(coefficients) - 1 > MAX_DEGREE:
            raise ParameterError(f"degree={len(coefficients) - 1} exceeds the limit {MAX_DEGREE}")
        if not (math.isfinite(self.radius) and self.radius > 0) or not math.isfinite(self.center):
            raise ParameterError(f"interval center={self.center}, radius={self.radius}: radius must be finite and > 0")
        object.__setattr__(self, "coefficients", coefficients)

    @property
    def degree(self) -> int:
        nonzero = [i for i, c in enumerate(self.coefficients) if c != 0.0]
        return nonzero[-1] if nonzero else 0

    @property
    def interval(self) -> tuple[float, float]:
        return (self.center - self.radius, self.center + self.radius)

    @property
    def depth(self) -> int:
        """Multiplicative levels the evaluation consumes (ceil(log2(degree + 1)) at most)."""
        return _count(self).depth

    @property
    def multiplications(self) -> tuple[int, int]:
        """(ciphertext x ciphertext, ciphertext x scalar) multiplications of the schedule."""
        counter = _count(self)
        return counter.ct_ct, counter.ct_scalar

    def normalize(self, x):
        """t = (x - center) / radius, on numpy arrays."""
        return (np.asarray(x, dtype=np.float64) - self.center) / self.radius

    def evaluate(self, t):
        """p(t) on the normalised input t (numpy array or ciphertext tensor), by the depth-optimal schedule."""
        return evaluate_power_series(self.coefficients, t)

    def __call__(self, x):
        """The activation on raw inputs: p((x - center) / radius)."""
        return np.asarray(self.evaluate(self.normalize(x)), dtype=np.float64) * np.ones_like(x, dtype=np.float64)

    def target(self, x):
        """The function the polynomial approximates (x^2 for ``square``)."""
        if self.name not in TARGETS:
            raise ParameterError(f"activation name={self.name!r} has no target function; known: {sorted(TARGETS)}")
        return TARGETS[self.name](np.asarray(x, dtype=np.float64))

    def max_error(self, samples: int = 4001) -> float:
        """sup |p - f| over a uniform grid of the interval."""
        x = np.linspace(*self.interval, samples)
        return float(np.max(np.abs(self(x) - self.target(x))))


def square() -> PolyActivation:
    """x -> x^2 (exact, one level; the CryptoNets activation, Gilad-Bachrach et al., ICML 2016)."""
    return PolyActivation("square", (0.0, 0.0, 1.0))


def fit_activation(name: str, degree: int, interval=(-4.0, 4.0), method: str = "chebyshev",
                   samples=None) -> PolyActivation:
    """Fit ``name`` (relu, gelu, silu, sigmoid, tanh, square) by a polynomial of ``degree`` on ``interval``.

    ``samples``: values the activation's input takes on representative (calibration) data. Given them, the fit
    is the least-squares polynomial weighted by where those inputs lie (``_SAMPLE_POINTS`` quantiles of
    them, sharing the weight with a uniform grid of the interval, ``_GRID_SHARE`` of it, so the polynomial
    stays close to f on all of the interval): the error is smallest where the data is (most pre-activations
    of a trained network sit near 0, where relu's kink is), which the sup-norm fit spreads evenly."""
    key = str(name).lower()
    if key not in TARGETS:
        raise ParameterError(f"activation name={name!r} is not one of {sorted(TARGETS)}")
    if method not in METHODS:
        raise ParameterError(f"method={method!r} is not one of {METHODS}")
    if isinstance(degree, bool) or not isinstance(degree, (int, np.integer)) or not 1 <= degree <= MAX_DEGREE:
        raise ParameterError(f"degree={degree!r} must be an integer in [1, {MAX_DEGREE}]")
    low, high = _interval(interval)
    center, radius = (low + high) / 2.0, (high - low) / 2.0
    weights = None
    if samples is not None:
        t, weights = _sample_points(samples, center, radius)
    elif method == "chebyshev":
        t = np.cos(np.pi * (np.arange(degree + 1) + 0.5) / (degree + 1))
    else:
        t = np.linspace(-1.0, 1.0, _LSQ_GRID)
    cheb = chebyshev.chebfit(t, TARGETS[key](center + radius * t), int(degree), w=weights)
    coefficients = chebyshev.cheb2poly(cheb)
    # an odd or even target leaves rounding dust (~1e-17) where a coefficient is zero; dropping it can
    # save a level (sigmoid at degree 4 is the cubic 0.5 + c1 t + c3 t^3, depth 2)
    coefficients[np.abs(coefficients) < _DUST * np.max(np.abs(coefficients))] = 0.0
    return PolyActivation(key, tuple(coefficients), center, radius)


def _sample_points(samples, center, radius):
    """(points t in [-1, 1], least-squares weights): quantiles of the normalised samples and a uniform grid,
    the grid carrying ``_GRID_SHARE`` of the total squared weight (``chebfit`` squares the weights)."""
    values = np.asarray(samples, dtype=np.float64).ravel()
    values = values[np.isfinite(values)]
    if not values.size:
        raise ParameterError("samples= must hold at least one finite value of the activation's input")
    t_data = np.clip(np.quantile((values - center) / radius, np.linspace(0.0, 1.0, _SAMPLE_POINTS)), -1.0, 1.0)
    t_grid = np.linspace(-1.0, 1.0, _LSQ_GRID)
    weights = np.concatenate([np.full(t_data.size, (1.0 - _GRID_SHARE) / t_data.size),
                              np.full(t_grid.size, _GRID_SHARE / t_grid.size)])
    return np.concatenate([t_data, t_grid]), np.sqrt(weights)


def _interval(interval) -> tuple[float, float]:
    if np.isscalar(interval):
        interval = (-float(interval), float(interval))
    try:
        low, high = (float(v) for v in interval)
    except (TypeError, ValueError):
        raise ParameterError(f"interval={interval!r} must be a pair (low, high) or a positive bound") from None
    if not (math.isfinite(low) and math.isfinite(high) and low < high):
        raise ParameterError(f"interval=({low}, {high}) must be finite with low < high")
    return low, high


def evaluate_power_series(coefficients, t):
    """sum_i c_i t^i at depth ceil(log2(deg + 1)); t is a numpy array or anything with + and * (ciphertexts).

    Returns a Python float when the polynomial is constant. Scalars equal to 1 or -1 cost no level.
    """
    coefficients = [float(c) for c in coefficients]
    powers = {1: t}
    return _evaluate(coefficients, powers)


def _power(powers, g):
    if g not in powers:
        half = _power(powers, g // 2)
        powers[g] = half * half
    return powers[g]


def _scaled(value, c):
    if c == 1.0:
        return value
    if c == -1.0:
        return -value
    return value * c


def _add(a, b):
    """a + b where either may be a Python float (a constant), keeping the ciphertext on the left."""
    if isinstance(a, float):
        a, b = b, a
    if isinstance(a, float):
        return a + b
    if isinstance(b, float) and b == 0.0:
        return a
    return a + b


def _evaluate(coefficients, powers):
    degree = len(coefficients) - 1
    while degree > 0 and coefficients[degree] == 0.0:
        degree -= 1
    coefficients = coefficients[:degree + 1]
    if degree == 0:
        return coefficients[0]
    if degree == 1:
        if coefficients[1] == 0.0:
            return coefficients[0]
        return _add(_scaled(powers[1], coefficients[1]), coefficients[0])
    g = 1 << (degree.bit_length() - 1)
    low = _evaluate(coefficients[:g], powers)
    high = _evaluate(coefficients[g:], powers)
    giant = _power(powers, g)
    term = _scaled(giant, high) if isinstance(high, float) else giant * high
    return _add(term, low)


class _DepthCounter:
    """Stand-in for a ciphertext that records the multiplicative depth and the multiplications."""

    def __init__(self, depth=0, log=None):
        self.depth = depth
        self.log = log if log is not None else {"ct_ct": 0, "ct_scalar": 0}

    def __mul__(self, other):
        if isinstance(other, _DepthCounter):
            self.log["ct_ct"] += 1
            return _DepthCounter(max(self.depth, other.depth) + 1, self.log)
        self.log["ct_scalar"] += 1
        return _DepthCounter(self.depth + 1, self.log)

    def __add__(self, other):
        other_depth = other.depth if isinstance(other, _DepthCounter) else 0
        return _DepthCounter(max(self.depth, other_depth), self.log)

    def __neg__(self):
        return _DepthCounter(self.depth, self.log)

    @property
    def ct_ct(self):
        return self.log["ct_ct"]

    @property
    def ct_scalar(self):
        return self.log["ct_scalar"]


def _count(activation: PolyActivation) -> _DepthCounter:
    result = evaluate_power_series(activation.coefficients, _DepthCounter())
    if isinstance(result, float):
        return _DepthCounter()
    return result
