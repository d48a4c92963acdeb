"""Polynomial activations for encrypted inference: fitting on an interval and depth-optimal evaluation.

CKKS evaluates only additions and multiplications, so a non-polynomial activation f (ReLU, GELU, SiLU,
sigmoid) is replaced by a polynomial p ~ f on an interval [a, b] that the inputs are expected to stay in.
The input is first normalised, t = (x - c) / r with c = (a + b) / 2 and r = (b - a) / 2, so the fit lives
on [-1, 1] where the power basis is well conditioned; a model folds this affine map into the preceding
linear layer, so it costs nothing encrypted.

Fitting (Trefethen, *Approximation Theory and Approximation Practice*, ch. 4, 8 and 10):
- ``"minimax"`` (the default): the best polynomial in the sup norm on the interval, by the Remez exchange
  algorithm started from the Chebyshev extreme points (the error equioscillates at degree + 2 points);
  never worse than the other two on the interval (``_GUARD``: the best of the candidates on a fine grid);
- ``"chebyshev"``: interpolation at the degree + 1 Chebyshev points of the first kind, near-best in the
  sup norm;
- ``"least_squares"``: the L2-best polynomial on a fine uniform grid of the interval (or weighted by where
  calibration ``samples`` lie).
A sigmoid's polynomial is then shrunk about 1/2 (p -> 1/2 + s (p - 1/2), s <= 1) so that its values on the
interval stay in [0, 1] (a probability); the error grows by at most the overshoot it removes. Outside the
interval no polynomial stays bounded: inputs there are the caller's to refuse (``tensor_ops.model_plan``
states the ranges a plan was calibrated for).

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

import functools
import math
from dataclasses import dataclass

import numpy as np
from numpy.polynomial import chebyshev

from crypto.errors import ParameterError
from hezk.model.graph import activate

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
TARGETS.update({name: (lambda f: lambda x: activate(f, x))(name)
                for name in ("softplus", "softsign", "hardswish", "mish", "elu", "selu", "gelu_tanh")})  # hezk.model's
METHODS = ("minimax", "chebyshev", "least_squares")
_REMEZ_GRID = 8193  # points of each of the two grids (uniform and Chebyshev-spaced) the exchange searches
_REMEZ_STEPS = 40
_UNIT = {"sigmoid": (0.0, 1.0)}  # targets whose polynomial keeps its values in a range on the interval


def _target(name: str, bounds=None):
    """The function ``name`` names (clip: to ``bounds`` = (low, high), None on a side: unbounded)."""
    if name == "clip":
        low, high = bounds if bounds is not None else (None, None)
        return lambda x: np.clip(x, -np.inf if low is None else low, np.inf if high is None else high)
    return TARGETS[name]


class _Schedule:
    """What a polynomial approximation on t = (x - center) / radius derives from its ``evaluate`` schedule and its
    ``target``: depth and multiplication counts, the value on raw inputs, the largest error on the interval.
    Shared by ``PolyActivation`` and ``CompositeRelu`` (each defines ``evaluate``, ``normalize``, ``target``)."""

    @property
    def depth(self) -> int:
        """Multiplicative levels the evaluation consumes (ceil(log2(degree + 1)) at most for one polynomial)."""
        return _count(self).depth

    @property
    def multiplications(self) -> tuple[int, int]:
        """(ciphertext x ciphertext, ciphertext x scalar) multiplications of the schedule."""
        counter = _count(self)
        return counter.ct_ct, counter.ct_scalar

    def __call__(self, x):
        """The activation on raw inputs: the schedule on normalize(x)."""
        return np.asarray(self.evaluate(self.normalize(x)), dtype=np.float64) * np.ones_like(x, dtype=np.float64)

    def max_error(self, samples: int = 4001) -> float:
        """sup |p - f| over a uniform grid of the interval."""
        x = np.linspace(*self.interval, samples)
        return float(np.max(np.abs(self(x) - self.target(x))))


@dataclass(frozen=True)
class PolyActivation(_Schedule):
    """p((x - center) / radius) with ``coefficients`` in the power basis of t, lowest degree first
    (``bounds``: the (low, high) of a clip, the function the polynomial approximates)."""

    name: str
    coefficients: tuple[float, ...]
    center: float = 0.0
    radius: float = 1.0
    bounds: tuple | None = None

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

    def normalize(self, x):
        """t = (x - center) / radius, on numpy arrays."""
        return (np.asarray(x, dtype=np.float64) - self.center) / self.radius

    def evaluate(self, t):
        """p(t) on the normalised input t (numpy array or ciphertext tensor), by the depth-optimal schedule."""
        return evaluate_power_series(self.coefficients, t)

    @property
    def has_target(self) -> bool:
        """Whether the polynomial approximates a named function (a user's own polynomial approximates none)."""
        return self.name in TARGETS or self.name == "clip"

    def target(self, x):
        """The function the polynomial approximates (x^2 for ``square``)."""
        if not self.has_target:
            raise ParameterError(f"activation name={self.name!r} has no target function; known: {sorted(TARGETS)}")
        return _target(self.name, self.bounds)(np.asarray(x, dtype=np.float64))

    def error_on(self, x) -> float:
        """max |p - f| over the raw inputs x (e.g. the values the activation's input takes on calibration data;
        0.0 for none)."""
        x = np.asarray(x, dtype=np.float64).ravel()
        x = x[np.isfinite(x)]
        return float(np.max(np.abs(self(x) - self.target(x)))) if x.size else 0.0

    def value_range(self, low=-1.0, high=1.0):
        """(min, max) of p(t) for t in [low, high] (normalised inputs; arrays elementwise): what the polynomial
        gives while its input stays in (that part of) its interval."""
        return polynomial_range(self.coefficients, low, high)


def square() -> PolyActivation:
    """x -> x^2 (exact, one level; the CryptoNets activation, Gilad-Bachrach et al., ICML 2016)."""
    return PolyActivation("square", (0.0, 0.0, 1.0))


def fit_activation(name: str, degree: int, interval=(-4.0, 4.0), method: str = "minimax",
                   samples=None, bounds=None) -> PolyActivation:
    """Fit ``name`` (relu, gelu, silu, sigmoid, tanh, square; clip to ``bounds`` = (low, high), e.g. ReLU6 =
    clip to (0, 6), None on a side: unbounded) by a polynomial of ``degree`` on ``interval``.

    ``method``: "minimax" (default: the smallest maximum error on the interval), "chebyshev" or "least_squares"
    (module docstring). ``samples``: for "least_squares" only, values the activation's input takes on
    representative (calibration) data; the fit is then weighted by where those inputs lie (``_SAMPLE_POINTS``
    quantiles of them, sharing the weight with a uniform grid of the interval, ``_GRID_SHARE`` of it): the error
    is smallest where the data is, larger elsewhere. A sigmoid's values stay in [0, 1] on the interval."""
    key = str(name).lower()
    if key not in TARGETS and key != "clip":
        raise ParameterError(f"activation name={name!r} is not one of {sorted(TARGETS) + ['clip']}")
    if (key == "clip") != (bounds is not None):
        raise ParameterError(f"bounds={bounds!r}: a clip needs its (low, high) bounds, no other activation has them")
    if method not in METHODS:
        raise ParameterError(f"method={method!r} is not one of {METHODS}")
    if isinstance(degree, bool) or not isinstance(degree, (int, np.integer)) or not 1 <= degree <= MAX_DEGREE:
        raise ParameterError(f"degree={degree!r} must be an integer in [1, {MAX_DEGREE}]")
    if samples is not None and method != "least_squares":
        raise ParameterError(f"samples= weight only the least_squares fit, not method={method!r} (a minimax fit "
                             f"is fitted on the whole interval: pass the calibrated interval)")
    low, high = _interval(interval)
    center, radius = (low + high) / 2.0, (high - low) / 2.0
    target = lambda t: np.asarray(_target(key, bounds)(center + radius * t), dtype=np.float64)  # noqa: E731
    if samples is not None:
        t, weights = _sample_points(samples, center, radius)
        cheb = chebyshev.chebfit(t, target(t), int(degree), w=weights)
    elif method == "least_squares":
        cheb = _least_squares(target, int(degree))
    elif method == "chebyshev":
        cheb = _interpolant(target, int(degree))
    else:  # the best on the grid of the minimax fit and the other two, each kept in range (a kept minimax
        # fit can lose to a kept interpolant: its error peaks at the ends, where a sigmoid's overshoot is cut)
        kept = [_kept_within(c, *_UNIT[key]) if key in _UNIT else c for c in
                (_minimax(target, int(degree)), _interpolant(target, int(degree)),
                 _least_squares(target, int(degree)))]
        grid = _remez_grid()
        cheb = min(kept, key=lambda c: float(np.max(np.abs(chebyshev.chebval(grid, c) - target(grid)))))
    if key in _UNIT:
        cheb = _kept_within(cheb, *_UNIT[key])
    coefficients = np.zeros(int(degree) + 1)  # the chosen degree, even where the top coefficients vanish
    converted = chebyshev.cheb2poly(cheb)[:int(degree) + 1]
    coefficients[:len(converted)] = converted
    # an odd or even target leaves rounding dust (~1e-17) where a coefficient is zero; dropping it can
    # save a level (sigmoid at degree 4 is the cubic 0.5 + c1 t + c3 t^3, depth 2)
    coefficients[np.abs(coefficients) < _DUST * np.max(np.abs(coefficients))] = 0.0
    return PolyActivation(key, tuple(coefficients), center, radius,
                          None if bounds is None else tuple(None if b is None else float(b) for b in bounds))


def _interpolant(target, degree):
    """Chebyshev coefficients of the interpolant at the degree + 1 Chebyshev points of the first kind."""
    t = np.cos(np.pi * (np.arange(degree + 1) + 0.5) / (degree + 1))
    return chebyshev.chebfit(t, target(t), degree)


def _least_squares(target, degree):
    t = np.linspace(-1.0, 1.0, _LSQ_GRID)
    return chebyshev.chebfit(t, target(t), degree)


@functools.lru_cache(maxsize=1)
def _remez_grid():
    """A uniform and a Chebyshev-spaced grid of [-1, 1] together (ends and kinks both well covered)."""
    grid = np.union1d(np.linspace(-1.0, 1.0, _REMEZ_GRID), np.cos(np.linspace(np.pi, 0.0, _REMEZ_GRID)))
    grid.setflags(write=False)
    return grid


def _minimax(target, degree):
    """Chebyshev coefficients of the best sup-norm polynomial of ``degree`` on [-1, 1] (Remez exchange on
    ``_remez_grid``): solve p(x_i) + (-1)^i E = f(x_i) on a reference of degree + 2 points, move the reference
    to the alternating extrema of the error, until the levelled error E reaches the maximum. Started from the
    alternating extrema of the Chebyshev interpolant's error, else (a kink on a node leaves too few sign
    changes; the Chebyshev extreme points can make a singular start: relu(4t) at degree 2 meets all four) from
    the Chebyshev extreme points, else from those of degree + 1 less the last (a symmetric reference cannot carry
    the alternating error of a target whose odd or even part the degree fits exactly, e.g. silu at degree 4: its
    levelled error comes out 0), else from equispaced points. The result is the best iterate on the grid, the
    interpolant included (a guard: a stalled exchange never returns worse than near-best)."""
    grid = _remez_grid()
    fx = target(grid)
    interpolant = _interpolant(target, degree)
    error = chebyshev.chebval(grid, interpolant) - fx
    best = [float(np.max(np.abs(error))), interpolant]
    starts = (lambda: _alternating_extrema(grid, error, degree + 2),
              lambda: np.cos(np.pi * np.arange(degree + 1, -1, -1) / (degree + 1)),
              lambda: np.cos(np.pi * np.arange(degree + 2, 0, -1) / (degree + 2)),
              lambda: np.linspace(-1.0, 1.0, degree + 2))
    for start in starts:
        reference = start()
        if reference is not None and _exchange(target, degree, grid, fx, reference, best):
            break
    return best[1]


def _exchange(target, degree, grid, fx, reference, best) -> bool:
    """Remez steps from ``reference``, keeping the best iterate in ``best`` ([max error, coefficients]);
    True when the levelled error met the maximum (converged)."""
    signs = (-1.0) ** np.arange(degree + 2)
    for _ in range(_REMEZ_STEPS):
        system = np.hstack([chebyshev.chebvander(reference, degree), signs[:, None]])
        try:
            solution = np.linalg.solve(system, target(reference))
        except np.linalg.LinAlgError:
            return False
        coefficients, levelled = solution[:-1], abs(solution[-1])
        error = chebyshev.chebval(grid, coefficients) - fx
        worst = float(np.max(np.abs(error)))
        if worst < best[0]:
            best[:] = [worst, coefficients]
        if worst - levelled <= 1e-6 * worst + 1e-15:
            return True
        reference = _alternating_extrema(grid, error, degree + 2)
        if reference is None:
            return False
    return False


def _alternating_extrema(grid, error, count):
    """``count`` grid points where the error alternates in sign, each the largest |error| of its run of one
    sign (ends dropped, the smaller first, while there are too many: the largest is always kept); None when
    the error changes sign fewer than count - 1 times."""
    sign = np.where(error >= 0.0, 1, -1)
    starts = np.flatnonzero(np.r_[True, sign[1:] != sign[:-1]])
    peaks = [int(start + np.argmax(np.abs(error[start:end])))
             for start, end in zip(starts, np.r_[starts[1:], len(grid)])]
    if len(peaks) < count:
        return None
    first, last = 0, len(peaks)
    while last - first > count:
        if abs(error[peaks[first]]) < abs(error[peaks[last - 1]]):
            first += 1
        else:
            last -= 1
    return grid[peaks[first:last]]


def _kept_within(cheb, low, high):
    """The Chebyshev coefficients shrunk about the middle m = (low + high) / 2 (p -> m + s (p - m)) so that p
    stays in [low, high] on [-1, 1] (``polynomial_range``); unchanged when it does already."""
    middle, half = (low + high) / 2.0, (high - low) / 2.0
    lo, hi = polynomial_range(chebyshev.cheb2poly(cheb), -1.0, 1.0)
    deviation = max(hi - middle, middle - lo)
    if deviation <= half:
        return cheb
    shrunk = np.asarray(cheb, dtype=np.float64) * (half * (1.0 - 1e-12) / deviation)
    shrunk[0] += middle * (1.0 - half * (1.0 - 1e-12) / deviation)
    return shrunk


def polynomial_range(coefficients, low, high):
    """(min, max) of the power series sum_i c_i t^i on [low, high] (arrays broadcast elementwise): exact up to
    rounding, from its values at the ends and at the real roots of its derivative inside."""
    coefficients = np.asarray(coefficients, dtype=np.float64)
    low, high = np.asarray(low, dtype=np.float64), np.asarray(high, dtype=np.float64)
    # top coefficients below rounding on the interval (|c_k| reach^k <= 1e-15 of the largest term) are dropped:
    # left in, they put the derivative's roots far off (and the real ones inaccurate)
    reach = max(1.0, float(np.max(np.abs(low))), float(np.max(np.abs(high))))
    terms = np.abs(coefficients) * reach ** np.arange(coefficients.size, dtype=np.float64)
    significant = np.flatnonzero(terms > 1e-15 * np.max(terms, initial=0.0))
    coefficients = coefficients[:significant[-1] + 1] if significant.size else coefficients[:0]
    if coefficients.size <= 1:
        value = np.broadcast_to(coefficients[0] if coefficients.size else 0.0, np.broadcast(low, high).shape)
        return value.copy(), value.copy()
    evaluate = np.polynomial.polynomial.polyval
    values = [evaluate(low, coefficients), evaluate(high, coefficients)]
    lo, hi = np.minimum(*values), np.maximum(*values)
    with np.errstate(all="ignore"):  # a tiny leading coefficient: huge roots, dropped below with the others outside
        roots = np.polynomial.polynomial.polyroots(np.polynomial.polynomial.polyder(coefficients))
    real = roots[np.abs(roots.imag) <= 1e-9 * np.maximum(1.0, np.abs(roots))].real
    for root in real[(real >= np.min(low)) & (real <= np.max(high))]:
        inside = (low <= root) & (root <= high)
        value = evaluate(root, coefficients)
        lo, hi = np.where(inside, np.minimum(lo, value), lo), np.where(inside, np.maximum(hi, value), hi)
    return lo, hi


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


def _count(activation) -> _DepthCounter:
    result = activation.evaluate(_DepthCounter())
    if isinstance(result, float):
        return _DepthCounter()
    return result


# ----------------------------------------------------------------------------------------------------------
# ReLU (and so max(a, b) = b + relu(a - b)) through a composite polynomial approximation of sign.

SIGN_DEGREES = (7, 7, 7)
"""Degrees of the composite sign p_3(p_2(p_1(t))) a max uses by default: 3 levels each, 10 levels for
relu(x) = x (1 + sign x) / 2 (the final product included); its error is below 2^-9 of the range for
|t| >= 2^-5 and at most |x| where |t| < 2^-5 (there relu(x) <= |x| is small anyway)."""
SIGN_GAP = 2.0 ** -5
#: stages a composite sign may have (``SIGN_DEGREES`` has 3; Lee et al. 2021 use up to 7)
MAX_SIGN_STAGES = 8


def _odd_minimax(degree: int, low: float, high: float, iterations: int = 400) -> np.ndarray:
    """The odd polynomial of ``degree`` closest to 1 in the sup norm on [low, high] (0 < low < high): power-
    basis coefficients, by Lawson's iteratively reweighted least squares on a Chebyshev-spaced grid (it
    converges to the discrete minimax; Lawson, 1961)."""
    x = low + (high - low) * (1 - np.cos(np.linspace(0.0, np.pi, 1025))) / 2
    powers = np.arange(1, degree + 1, 2)
    basis = x[:, None] ** powers
    weights = np.full(x.size, 1.0 / x.size)
    for _ in range(iterations):
        root = np.sqrt(weights)
        odd, *_ = np.linalg.lstsq(basis * root[:, None], root, rcond=None)
        error = np.abs(basis @ odd - 1.0)
        weights = weights * (error + 1e-300)
        weights /= weights.sum()
    coefficients = np.zeros(degree + 1)
    coefficients[powers] = odd
    return coefficients


@functools.lru_cache(maxsize=16)
def composite_sign(degrees=SIGN_DEGREES, gap: float = SIGN_GAP) -> tuple[tuple[float, ...], ...]:
    """Power-basis coefficients of p_1, ..., p_k, odd, with p_k(...p_1(t)) ~ sign(t) for gap <= |t| <= 1:
    each p_i the minimax approximation of 1 on the interval the stages before it map [gap, 1] to (the
    stage-by-stage construction of Lee, Lee, Kim and No, "Minimax approximation of sign function by composite
    polynomial for homomorphic comparison", IEEE TDSC 2021, with the degrees given rather than optimised)."""
    if not degrees or any(isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 1 or d % 2 == 0
                          or d > MAX_DEGREE for d in degrees):
        raise ParameterError(f"degrees={degrees!r} must be odd integers in [1, {MAX_DEGREE}]")
    if not 0.0 < gap < 1.0:
        raise ParameterError(f"gap={gap!r} must lie in (0, 1)")
    low, high, stages = float(gap), 1.0, []
    for degree in degrees:
        coefficients = _odd_minimax(int(degree), low, high)
        stages.append(tuple(float(c) for c in coefficients))
        grid = np.linspace(low, high, 4097)
        image = np.polynomial.polynomial.polyval(grid, coefficients)
        low, high = float(image.min()), float(image.max())
        if low <= 0.0:
            raise ParameterError(f"composite sign: degree {degree} on [{grid[0]:.3g}, {grid[-1]:.3g}] leaves "
                                 f"the positive half-line: use higher degrees or a larger gap")
    return tuple(stages)


@dataclass(frozen=True)
class CompositeRelu(_Schedule):
    """relu(x) = x (1 + sign x) / 2 with sign(t) ~ p_k(...p_1(t)) (``composite_sign``) on t = x / radius
    (center 0): used for max(a, b) = b + relu(a - b) on the calibrated range of differences. Duck-types
    ``PolyActivation`` for the engines (evaluate on t, depth, multiplications, interval, max_error);
    ``coefficients`` lists every stage's (for the fit digest)."""

    stages: tuple
    radius: float = 1.0
    gap: float = SIGN_GAP
    name: str = "relu"
    center: float = 0.0
    bounds: tuple | None = None

    def __post_init__(self):
        if not (math.isfinite(self.radius) and self.radius > 0):
            raise ParameterError(f"radius={self.radius} must be finite and > 0")
        if not 1 <= len(self.stages) <= MAX_SIGN_STAGES:
            raise ParameterError(f"a composite sign has {len(self.stages)} stages; it needs 1 to {MAX_SIGN_STAGES}")
        stages = tuple(tuple(float(c) for c in stage) for stage in self.stages)
        for i, stage in enumerate(stages):
            if not 2 <= len(stage) <= MAX_DEGREE + 1 or not all(math.isfinite(c) for c in stage):
                raise ParameterError(f"composite sign stage{i} has {len(stage)} coefficients; a stage needs 2 to "
                                     f"{MAX_DEGREE + 1} finite ones")
        if isinstance(self.gap, bool) or not isinstance(self.gap, (int, float)) or not 0.0 < self.gap < 1.0:
            raise ParameterError(f"composite sign gap={self.gap!r} must lie in (0, 1)")
        object.__setattr__(self, "stages", stages)

    @property
    def coefficients(self) -> tuple[float, ...]:
        return tuple(c for stage in self.stages for c in stage)

    @property
    def degree(self) -> int:
        return math.prod(len(stage) - 1 for stage in self.stages) + 1

    @property
    def interval(self) -> tuple[float, float]:
        return (-self.radius, self.radius)

    def normalize(self, x):
        return np.asarray(x, dtype=np.float64) / self.radius

    def evaluate(self, t):
        """radius / 2 (t + t s(t)): the last stage carries radius / 2, so the product t s costs one level."""
        s = t
        for index, stage in enumerate(self.stages):
            scale = self.radius / 2.0 if index == len(self.stages) - 1 else 1.0
            s = evaluate_power_series([c * scale for c in stage], s)
        return _add(t * (self.radius / 2.0), t * s)

    @property
    def has_target(self) -> bool:
        """A composite approximates relu."""
        return True

    def target(self, x):
        return np.maximum(np.asarray(x, dtype=np.float64), 0.0)



# ----------------------------------------------------------------------------------------------------------
# A ReLU on a calibrated interval: one fitted polynomial, or the composite sign (x + x sign x) / 2.

RELU_TOLERANCE = 2.0 ** -7
"""The largest error of a ReLU's single fitted polynomial on its calibrated interval [low, high], relative to the
interval's scale max(|low|, |high|), that ``relu_choice`` accepts before it takes the composite sign. ReLU is
scale-invariant, so the relative error of a degree-7 fit depends on where the kink sits in the interval: 0.023 with
zero at its middle, 0.010 at a fifth, 0.0036 at 1/80 (an interval almost all on one side, nearly linear there);
the composite (``SIGN_DEGREES``, 10 levels) errs by 0.002 of the scale wherever zero lies."""
_ERROR_POINTS = 20001


def error_on_interval(activation, low: float, high: float, points: int = _ERROR_POINTS) -> float:
    """An upper estimate of sup |p(x) - f(x)| over [low, high] (p: ``activation``, f its ``target``): the largest
    error on a uniform grid of ``points`` plus half the largest change of the error between neighbours (what it
    can gain between them where it is Lipschitz at that rate), so that it bounds the error at every point."""
    low, high = _interval((low, high))
    x = np.linspace(low, high, int(points))
    error = np.asarray(activation(x), dtype=np.float64) - np.asarray(activation.target(x), dtype=np.float64)
    return float(np.max(np.abs(error)) + np.max(np.abs(np.diff(error))) / 2.0)


def composite_relu(interval, sign_degrees=SIGN_DEGREES, gap: float = SIGN_GAP) -> CompositeRelu:
    """relu = (x + x sign x) / 2 with the composite sign of ``sign_degrees`` on [-R, R], R = max(|low|, |high|)
    of ``interval`` (the sign is odd: its kink must sit at t = 0, so the interval is made symmetric)."""
    low, high = _interval(interval)
    return CompositeRelu(composite_sign(tuple(int(d) for d in sign_degrees), gap), max(abs(low), abs(high)), gap)


@dataclass(frozen=True)
class ReluChoice:
    """What the planner weighed for one ReLU on its calibrated ``interval``: the single fit's and the composite
    sign's largest errors there (``error_on_interval``) and depths, which one it ``chose`` ("fit" /
    "composite") and ``why`` (words)."""

    interval: tuple[float, float]
    fit_error: float
    fit_depth: int
    composite_error: float
    composite_depth: int
    chose: str
    why: str

    @property
    def scale(self) -> float:
        return max(abs(self.interval[0]), abs(self.interval[1]))

    def describe(self) -> str:
        """Both options' errors, relative to the interval's scale too, and the choice."""
        s = self.scale
        return (f"fit {self.fit_error:.3g} ({self.fit_error / s:.2g} of the scale {s:.3g}, {self.fit_depth} levels), "
                f"composite sign {self.composite_error:.3g} ({self.composite_error / s:.2g}, "
                f"{self.composite_depth} levels): {self.chose} ({self.why})")


def relu_options(interval, degree: int = 7, sign_degrees=SIGN_DEGREES):
    """(fit, composite, fit error, composite error) of a ReLU on ``interval``: the minimax polynomial of
    ``degree`` and ``composite_relu``, each with its ``error_on_interval`` there."""
    low, high = _interval(interval)
    return _relu_options(low, high, int(degree), tuple(int(d) for d in sign_degrees))


@functools.lru_cache(maxsize=256)
def _relu_options(low, high, degree, sign_degrees):
    fit = fit_activation("relu", degree, (low, high))
    composite, composite_error = _composite_option(low, high, sign_degrees)
    return fit, composite, error_on_interval(fit, low, high), composite_error


@functools.lru_cache(maxsize=256)
def _composite_option(low, high, sign_degrees):
    composite = composite_relu((low, high), sign_degrees)
    return composite, error_on_interval(composite, low, high)


def relu_choice(interval, tolerance: float = RELU_TOLERANCE, degree: int = 7, sign_degrees=SIGN_DEGREES,
                fit: PolyActivation | None = None) -> ReluChoice:
    """The choice the error alone makes for a ReLU on ``interval``: the composite sign where the fit errs by more
    than ``tolerance`` of the interval's scale and the composite errs less; else the fit (the levels are the
    planner's to check: ``tensor_ops.nn.Sequential.choose_relus``). ``fit``: a fit already made (a calibrated
    layer's, of its own degree), weighed instead of the minimax fit of ``degree``."""
    if not isinstance(tolerance, (int, float)) or isinstance(tolerance, bool) or not 0 < tolerance < 1:
        raise ParameterError(f"tolerance={tolerance!r} must be a number in (0, 1) (of the interval's scale)")
    low, high = _interval(interval)
    if fit is None:
        made, composite, fit_err, composite_err = relu_options(interval, degree, sign_degrees)
    else:   # no fit to make: the composite's error only
        composite, composite_err = _composite_option(low, high, tuple(int(d) for d in sign_degrees))
        made, fit_err = fit, error_on_interval(fit, low, high)
    scale = max(abs(low), abs(high))
    if fit_err <= tolerance * scale:
        chose, why = "fit", f"the fit's error is within the tolerance {tolerance:.3g} of the scale"
    elif composite_err >= fit_err:
        chose, why = "fit", "the composite would not err less"
    else:
        chose, why = "composite", f"the fit's error exceeds the tolerance {tolerance:.3g} of the scale"
    return ReluChoice((low, high), fit_err, made.depth, composite_err, composite.depth, chose, why)
