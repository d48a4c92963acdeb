"""A ``hezk.model.Graph`` with attention (``Bilinear``, ``Softmax``, ``LayerNorm`` nodes) evaluated node by node
on CipherTensors (or, the same code, on numpy arrays: the plain reference of the approximations).

Every node lowers to einsum plans (``tensor_ops.einsum``): a contraction with its constant weight, attention's
two products of encrypted tensors (scores q k^T and the weighted sum a v) through the planner's encrypted x
encrypted strategies (its cost model picks the layouts), sums by rotate-and-sum, elementwise products with
broadcasting; reshapes and transposes are free layout changes (a reshape that merges axes a transpose left
apart is one 0/1 plaintext contraction, ``reshape_or_contract``). The non-polynomial nodes are calibrated:
``approximate(graph, calibration)`` runs the float model on calibration inputs and fixes, per node,

- Softmax (last axis), as in the polynomial softmax of THOR (Moon et al., 2024) and NEXUS (Zhang et al., 2025):
  x is shifted by a calibrated bound c >= max x (so the exponent t = x - c <= 0 and the sums never overflow),
  exp(t) = p(t / 2^r)^(2^r) with p a Chebyshev interpolant of exp on the calibrated [min t / 2^r, 0] and r
  squarings (degree and r the fewest levels within an error target, ``choose_exp``), then the row sum s
  (rotate-and-sum) and 1/s by Newton's iteration y <- y (2 - s y) (Goldschmidt division, 1964, in its Newton
  form) started from the minimax line on the calibrated [min s, max s] (alpha - beta s with relative error
  (b - a)^2 / (a^2 + 6 a b + b^2)), as many steps as that start needs; no level is spent on affine maps (p runs
  in x's power basis where its powers stay small, and the start line is folded into the exponentials' scale:
  ``SoftmaxApprox``), as Powerformer (2024) and THOR (ePrint 2024/1881) keep their Softmax shallow;
- LayerNorm: the mean and variance by rotate-and-sum, 1/sqrt(var + eps) by Newton's iteration
  y <- y (3 - v y^2) / 2 (as in Panda, "Polynomial approximation of inverse sqrt function for FHE", 2022)
  started from the least-squares line of 1/sqrt on the calibrated variance range, as many steps as it needs; the
  constants that scale a rotate-and-sum's result (1/n, the start line) are multiplied as vectors of the tensor's
  shape, zero in the slots of its partial sums, so that they clean it in the level they take anyway
  (``_times_clean``; a mask of its own before: 12 levels instead of 8 on the BERT-tiny layer);
- activations: the minimax fits of ``tensor_ops.activations`` on each calibrated input range.

The iteration counts follow from the calibrated ranges (each iteration is run on a grid of the range until the
relative error is below ``tolerance``, ``NEWTON_TOLERANCE`` = 3e-3 by default: 0.3% of an output against the 2%
budget), and
``GraphApproximation.errors`` states each approximation's largest error on the calibration data. Depth grows with
the iterations: on 128-bit CKKS parameters the whole layer needs bootstrapping
(``tensor_ops.attention_plan.BootstrappingBackend`` refreshes tensors where the next operation needs more levels
than they have, and an approximation's input before its whole schedule where a bootstrap's levels hold it:
``GraphApproximation.node_depth``); ``depth`` counts the levels a node's schedule consumes.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

import hezk.model
from crypto.errors import ParameterError, ShapeError

from .activations import evaluate_power_series, fit_activation
from .tensor import CipherTensor, einsum

__all__ = ["GraphApproximation", "SoftmaxApprox", "InverseSqrtApprox", "ReciprocalApprox", "approximate",
           "reshape", "reshape_or_contract"]

#: an activation's calibrated input range is widened by this share of its width on both sides (its polynomial's
#: error at a given degree grows with the interval)
MARGIN = 0.05
#: relative error of the Newton iterations (Softmax's reciprocal, LayerNorm's inverse square root) on their
#: calibrated ranges, and of Softmax's exponential (``choose_exp``): 0.3% of an output against the 2% budget. On the
#: BERT-tiny layer 1e-3 takes a squaring and a Newton step more in Softmax (depth 11 instead of 8: two bootstraps
#: there instead of one) for no change in the layer's error (0.33% of its largest output either way)
NEWTON_TOLERANCE = 3e-3
#: the other calibrated ranges (the model's input, a Softmax's shift, exponents and row sums, a LayerNorm's variance)
#: are widened by this share: their cost grows with the log of the range, while inputs like the calibration data
#: leave tight ones often (a 16 x 32 layer calibrated on 32 N(0, 1) samples refused 9% of fresh ones at 5%, 0.75%
#: at 25%; on 64, 4.5% and none)
RANGE_MARGIN = 0.25


def reshape(x, shape):
    """``x`` reshaped (row-major) to ``shape``: numpy's reshape, or for a CipherTensor the free layout change
    (``_reshape_layout``: merged or split axes contiguous in slots and whole in every tile); else ShapeError."""
    shape = tuple(int(d) for d in shape)
    if not isinstance(x, CipherTensor):
        return np.reshape(x, shape)
    if x.shape == shape:
        return x
    if math.prod(shape) != math.prod(x.shape):
        raise ShapeError(f"cannot reshape a tensor of shape {x.shape} to {shape}")
    layout = _reshape_layout(x.layout, shape)
    if layout is None:
        raise ShapeError(f"reshape of a CipherTensor of shape {x.shape} (slot strides {x.layout.strides}, "
                         f"{len(x.layout.tiles)} tiles) to {shape} is not a layout change")
    return CipherTensor(x.ciphertexts, layout, x.backend)


def reshape_or_contract(x, shape):
    """``reshape(x, shape)``, and where that is no layout change (axes of a transposed CipherTensor merged, as
    attention's heads are after ``transpose(1, 2)``) the same values by one plaintext contraction: a 0/1 tensor
    maps the axes the reshape regroups (the leading and trailing axes it keeps stay einsum letters), one level
    and the planner's rotations instead of a refusal."""
    try:
        return reshape(x, shape)
    except ShapeError:
        if not isinstance(x, CipherTensor) or math.prod(shape) != math.prod(x.shape):
            raise
    shape, old = tuple(int(d) for d in shape), tuple(x.shape)
    lead = 0
    while lead < min(len(old), len(shape)) and old[lead] == shape[lead]:
        lead += 1
    tail = 0
    while tail < min(len(old), len(shape)) - lead and old[-1 - tail] == shape[-1 - tail]:
        tail += 1
    ins, outs = old[lead:len(old) - tail], shape[lead:len(shape) - tail]
    letters = iter("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
    kept_lead, kept_tail = ([next(letters) for _ in range(n)] for n in (lead, tail))
    old_mid, new_mid = [next(letters) for _ in ins], [next(letters) for _ in outs]
    weight = np.eye(math.prod(ins)).reshape(*ins, *outs)
    equation = (f"{''.join(kept_lead + old_mid + kept_tail)},{''.join(old_mid + new_mid)}->"
                f"{''.join(kept_lead + new_mid + kept_tail)}")
    return einsum(equation, x, weight)


def _reshape_layout(layout, shape):
    """The layout of ``layout`` reshaped to ``shape``, or None. Size-1 axes are dropped and inserted freely; the
    other axes pair up in groups of equal size (numpy's no-copy reshape): a group of one old and one new axis
    keeps its stride and tile boxes, a group that merges or splits axes needs them contiguous in slots and whole
    in every tile."""
    from dataclasses import replace

    from .layout import Tile

    old = [a for a, d in enumerate(layout.shape) if d != 1]
    new = [a for a, d in enumerate(shape) if d != 1]
    strides, starts, sizes = [0] * len(shape), [[0] * len(shape) for _ in layout.tiles], \
        [[1] * len(shape) for _ in layout.tiles]
    oi = ni = 0
    while oi < len(old) or ni < len(new):
        if oi == len(old) or ni == len(new):
            return None
        o_end, n_end = oi + 1, ni + 1
        o_size, n_size = layout.shape[old[oi]], shape[new[ni]]
        while o_size != n_size:
            if o_size < n_size and o_end < len(old):
                o_size *= layout.shape[old[o_end]]
                o_end += 1
            elif n_size < o_size and n_end < len(new):
                n_size *= shape[new[n_end]]
                n_end += 1
            else:
                return None
        group_old, group_new = old[oi:o_end], new[ni:n_end]
        if len(group_old) == 1 and len(group_new) == 1:
            strides[group_new[0]] = layout.strides[group_old[0]]
            for k, tile in enumerate(layout.tiles):
                starts[k][group_new[0]], sizes[k][group_new[0]] = tile.start[group_old[0]], tile.size[group_old[0]]
        else:
            for a, b in zip(group_old, group_old[1:]):
                if layout.strides[a] != layout.shape[b] * layout.strides[b]:
                    return None
            stride = layout.strides[group_old[-1]]
            for a in reversed(group_new):
                strides[a] = stride
                stride *= shape[a]
            for k, tile in enumerate(layout.tiles):
                if all(tile.size[a] == layout.shape[a] for a in group_old):
                    for a in group_new:
                        sizes[k][a] = shape[a]
                    continue
                box = _box(tile.start[group_old[0]], tile.size[group_old[0]], [shape[a] for a in group_new]) \
                    if len(group_old) == 1 else None
                if box is None:
                    return None
                for a, (first, count) in zip(group_new, box):
                    starts[k][a], sizes[k][a] = first, count
        oi, ni = o_end, n_end
    tiles = tuple(Tile(t.ct, tuple(starts[k]), tuple(sizes[k]), t.offset) for k, t in enumerate(layout.tiles))
    return replace(layout, shape=tuple(shape), strides=tuple(strides), tiles=tiles)


def _box(start: int, size: int, dims) -> list | None:
    """The row-major interval [start, start + size) of an axis split into ``dims`` as a box ((first, count) per
    new axis), or None where it is not one."""
    for j in range(len(dims)):
        inner = math.prod(dims[j + 1:])
        if start % inner or size % inner:
            continue
        first, count = start // inner, size // inner
        if first // dims[j] != (first + count - 1) // dims[j]:
            return None
        outer = np.unravel_index(first // dims[j], dims[:j]) if j else ()
        return [(int(i), 1) for i in outer] + [(first % dims[j], count)] + [(0, d) for d in dims[j + 1:]]
    return None


def _times(x, c: float):
    return x if c == 1.0 else x * float(c)


def _times_clean(x, c: float):
    """x * c where x may be a rotate-and-sum's dirty result (its other slots hold partial sums): a CipherTensor is
    multiplied by c in every slot of its values and 0 elsewhere (a constant of its shape), so that the product is
    clean at the level the scalar product took anyway, and the next ciphertext product spends no level on a mask."""
    if isinstance(x, CipherTensor):
        return x * np.full(x.shape, float(c))
    return x * float(c)


def _newton_steps(update, start, grid, exact, tolerance, limit=16) -> int:
    """The number of Newton steps after which the relative error on ``grid`` is below ``tolerance``."""
    y = start(grid)
    for steps in range(limit + 1):
        if np.max(np.abs(y / exact(grid) - 1.0)) <= tolerance:
            return steps
        y = update(y, grid)
    raise ParameterError(f"Newton's iteration does not reach a relative error of {tolerance} on "
                         f"[{grid.min():.4g}, {grid.max():.4g}] within {limit} steps")


@dataclass(frozen=True)
class ReciprocalApprox:
    """1/s on [low, high] (low > 0): y0 = alpha - beta s (the minimax line of the relative error), then ``steps``
    of y <- y (2 - s y)."""

    low: float
    high: float
    tolerance: float = 1e-4
    steps: int = field(init=False)

    def __post_init__(self):
        if not 0 < self.low < self.high:
            raise ParameterError(f"reciprocal range [{self.low}, {self.high}] must be positive with low < high")
        grid = np.linspace(self.low, self.high, 2001)
        object.__setattr__(self, "steps", _newton_steps(lambda y, s: y * (2.0 - s * y), self.start, grid,
                                                        lambda s: 1.0 / s, self.tolerance))

    @property
    def line(self) -> tuple[float, float]:
        a, b = self.low, self.high
        beta = 8.0 / (a * a + 6.0 * a * b + b * b)
        return beta * (a + b), beta

    def start(self, s):
        alpha, beta = self.line
        return _times(s, -beta) + alpha

    def __call__(self, s):
        y = self.start(s)
        for _ in range(self.steps):
            y = y * (2.0 - s * y)  # the negation is free: two levels a step
        return y

    @property
    def depth(self) -> int:
        return 1 + 2 * self.steps


@dataclass(frozen=True)
class InverseSqrtApprox:
    """1/sqrt(v) on [low, high] (low > 0): y0 the least-squares line on the range, then ``steps`` of
    y <- y (3 - v y^2) / 2, evaluated as 1.5 y - (v/2 y) y^2 (v/2 y and y^2 side by side: two levels a step); or,
    where it takes no more levels within the tolerance, the Chebyshev interpolant of ``degree`` 3 or 7 on the range
    (``poly``: power-basis coefficients in t = (v - center) / radius; one level for the normalisation, which also
    cleans a rotate-and-sum's slots, and ceil(log2(degree + 1)) for the polynomial: 4 levels where the line and
    two Newton steps take 5)."""

    low: float
    high: float
    tolerance: float = 1e-4
    steps: int = field(init=False)
    line: tuple = field(init=False)
    degree: int = field(init=False)        # 0: the line and Newton's steps, else the interpolant's degree
    poly: tuple = field(init=False)

    def __post_init__(self):
        if not 0 < self.low < self.high:
            raise ParameterError(f"inverse square root range [{self.low}, {self.high}] must be positive, low < high")
        grid = np.linspace(self.low, self.high, 2001)
        slope, intercept = np.polyfit(grid, 1.0 / np.sqrt(grid), 1)
        if intercept + slope * self.high <= 0:  # keep the start positive on the range
            slope = -0.5 * intercept / self.high
        object.__setattr__(self, "line", (float(intercept), float(slope)))
        object.__setattr__(self, "steps", _newton_steps(lambda y, v: 0.5 * y * (3.0 - v * y * y), self.start, grid,
                                                        lambda v: 1.0 / np.sqrt(v), self.tolerance))
        degree, poly = 0, ()
        center, radius = (self.low + self.high) / 2.0, (self.high - self.low) / 2.0
        for d in (3, 7):
            if 1 + math.ceil(math.log2(d + 1)) > 1 + 2 * self.steps:
                break
            cheb = np.polynomial.chebyshev.Chebyshev.interpolate(lambda t: 1.0 / np.sqrt(center + radius * t), d)
            t = (grid - center) / radius
            if np.max(np.abs(cheb(t) * np.sqrt(grid) - 1.0)) <= self.tolerance:
                degree, poly = d, tuple(float(c) for c in cheb.convert(kind=np.polynomial.Polynomial).coef)
                break
        object.__setattr__(self, "degree", degree)
        object.__setattr__(self, "poly", poly)

    def start(self, v):
        return _times(v, self.line[1]) + self.line[0]

    def __call__(self, v, scale: float = 1.0, offset: float = 0.0):
        """1/sqrt(scale v + offset): the affine map folded into the start line and into v/2, or into the
        polynomial's normalisation (no level of its own)."""
        if self.degree:
            center, radius = (self.low + self.high) / 2.0, (self.high - self.low) / 2.0
            t = _times_clean(v, scale / radius) + (offset - center) / radius
            return evaluate_power_series(self.poly, t)
        intercept, slope = self.line
        y = _times_clean(v, slope * scale) + (intercept + slope * offset)
        half = _times_clean(v, 0.5 * scale) + 0.5 * offset
        for _ in range(self.steps):
            y = _times(y, 1.5) - (half * y) * (y * y)
        return y

    @property
    def depth(self) -> int:
        return 1 + (math.ceil(math.log2(self.degree + 1)) if self.degree else 2 * self.steps)


def _exp_coefficients(low: float, degree: int):
    """(coefficients in t, center, radius): the Chebyshev interpolant of exp on [low, 0] in the power basis of
    t = (u - center) / radius."""
    center, radius = low / 2.0, -low / 2.0
    cheb = np.polynomial.chebyshev.Chebyshev.interpolate(lambda t: np.exp(center + radius * t), degree)
    return tuple(float(c) for c in cheb.convert(kind=np.polynomial.Polynomial).coef), center, radius


def _exp_in_x(low: float, degree: int, squarings: int, shift: float, factor: float = 1.0) -> tuple:
    """The power-basis coefficients in x of q(x) with q(x)^(2^squarings) ~ factor exp(x - shift) on
    [shift + low, shift]: the Chebyshev interpolant of exp on [low / 2^r, 0], composed with the map from x to its
    variable (no level of its own for the normalisation) and scaled by factor^(1 / 2^r) (no level either)."""
    coefficients, center, radius = _exp_coefficients(low / 2 ** squarings, degree)
    scale = 1.0 / (2 ** squarings * radius)
    inner = np.polynomial.Polynomial([-shift * scale - center / radius, scale])
    composed = np.polynomial.Polynomial(coefficients)(inner).coef * factor ** (1.0 / 2 ** squarings)
    return tuple(float(c) for c in composed)


def exp_error(low: float, degree: int, squarings: int, samples: int = 2001) -> float:
    """max |p(t / 2^r)^(2^r) - exp(t)| on [low, 0] (p the degree-``degree`` interpolant of exp on [low / 2^r, 0])."""
    t = np.linspace(low, 0.0, samples)
    coefficients, center, radius = _exp_coefficients(low / 2 ** squarings, degree)
    y = np.polynomial.polynomial.polyval((t / 2 ** squarings - center) / radius, coefficients) ** (2 ** squarings)
    return float(np.max(np.abs(y - np.exp(t))))


#: the exp polynomial degrees tried (a degree 2^k - 1 fills its k levels)
EXP_DEGREES = (3, 7)
#: the largest |x|^k (k the highest power the evaluation schedule computes) for which exp's polynomial runs in the
#: power basis of x itself: CKKS decodes values below q_0 / (2 Delta) (2^8 on N16_BOOT) at level 0, and a bootstrap
#: reads coefficients below about Delta; beyond it x is normalised first (one level)
RAW_POWER_BOUND = 128.0


def raw_basis(shift: float, low: float, degree: int) -> bool:
    """Whether exp's polynomial of ``degree`` runs in the power basis of x on [shift + low, shift] (no level for the
    normalisation): the largest power the schedule computes, 2^floor(log2 degree), stays within
    ``RAW_POWER_BOUND``."""
    top = max(abs(shift + low), abs(shift))
    return top ** (1 << int(math.log2(max(degree, 1)))) <= RAW_POWER_BOUND


def choose_exp(low: float, target: float, degrees=EXP_DEGREES, shift: float = 0.0) -> tuple[int, int]:
    """(degree, squarings) of the cheapest exp(t) = p(t / 2^r)^(2^r) on [low, 0] within ``target`` (absolute): the
    fewest levels (ceil(log2(degree + 1)) + r, one more where x is normalised first: ``raw_basis``), then the lowest
    degree; the deepest candidate where none is."""
    most = max(0, math.ceil(math.log2(-low))) + 2
    options = sorted(((math.ceil(math.log2(d + 1)) + r + (not raw_basis(shift, low, d)), d, r)
                      for d in degrees for r in range(most + 1)))
    for _, degree, squarings in options:
        if exp_error(low, degree, squarings) <= target:
            return degree, squarings
    return max(degrees), most


@dataclass(frozen=True)
class SoftmaxApprox:
    """softmax along the last axis: t = x - shift <= 0 on [low, 0], exp(t) = p(t / 2^r)^(2^r) (p of ``degree`` on
    [low / 2^r, 0]; r = ``squarings``, by default the fewest with low / 2^r >= -1; ``calibrated`` chooses both), the
    row sums' reciprocal by ``ReciprocalApprox``'s Newton steps.

    No level is spent on affine maps (as the polynomial Softmax of Powerformer and THOR keep their depth down):
    p is evaluated in the power basis of x itself (the normalisation x -> t composed into its coefficients), and
    the exponentials come out scaled by kappa = sqrt(beta) (beta the slope of the reciprocal's start line,
    kappa^(1/2^r) folded into p): their row sums are S = kappa s, whose reciprocal starts at z0 = alpha / kappa - S
    (the start line y0 = alpha - beta s over kappa: an addition of a constant) and takes Newton's steps
    z <- z (2 - S z); softmax = (kappa e) z. Depth: ceil(log2(degree + 1)) + r + 2 steps + 1."""

    shift: float
    low: float
    reciprocal: ReciprocalApprox
    degree: int = 6
    squarings: int | None = None
    poly: tuple = field(init=False)

    def __post_init__(self):
        if not self.low < 0:
            raise ParameterError(f"softmax exponent range [{self.low}, 0] must have low < 0")
        if self.squarings is None:
            object.__setattr__(self, "squarings", max(0, math.ceil(math.log2(-self.low))))
        elif isinstance(self.squarings, bool) or not isinstance(self.squarings, int) or not 0 <= self.squarings <= 30:
            raise ParameterError(f"squarings={self.squarings!r} must be None or an integer in [0, 30]")
        object.__setattr__(self, "poly", _exp_in_x(self.low, self.degree, self.squarings, self.shift))

    @property
    def kappa(self) -> float:
        """The factor the exponentials are scaled by: sqrt of the reciprocal's start slope."""
        return math.sqrt(self.reciprocal.line[1])

    @classmethod
    def calibrated(cls, scores, degree: int | None = None, tolerance: float = 1e-4, mask=None) -> "SoftmaxApprox":
        """The softmax of the last axis fitted to the calibration ``scores``: the shift their maximum (plus
        ``RANGE_MARGIN``), the exponent and row-sum ranges theirs widened by ``RANGE_MARGIN``; with a 0/1 ``mask`` (the
        entries kept) the row sums are those of the kept entries (the exponent range stays every entry's: the
        polynomial runs on all of them before the mask zeroes the dropped ones). The exp's degree and squarings
        (``choose_exp``; ``degree`` fixes the degree) are the cheapest whose absolute error stays below
        tolerance x (smallest row sum) / (row length): the weights' errors then sum to about the tolerance."""
        scores = np.asarray(scores, dtype=np.float64)
        top, bottom = float(scores.max()), float(scores.min())
        shift = top + RANGE_MARGIN * max(top - bottom, 1e-6)
        sums = (np.exp(scores - shift) * (1.0 if mask is None else np.asarray(mask))).sum(axis=-1)
        s_low, s_high = _widen(float(sums.min()), float(sums.max()), RANGE_MARGIN)
        reciprocal = ReciprocalApprox(max(s_low, 0.5 * float(sums.min())), s_high, tolerance)
        low = _widen(bottom - shift, 0.0, RANGE_MARGIN)[0]
        target = tolerance * reciprocal.low / scores.shape[-1]
        chosen, squarings = choose_exp(low, target, EXP_DEGREES if degree is None else (degree,), shift)
        return cls(shift, low, reciprocal, chosen, squarings)

    def exp(self, x):
        """exp(x - shift) by the polynomial and the squarings."""
        return _times(self._scaled_exp(x), 1.0 / self.kappa)

    @property
    def raw(self) -> bool:
        """Whether the polynomial runs in the power basis of x (``raw_basis``), else of the normalised t."""
        return raw_basis(self.shift, self.low, self.degree)

    def _scaled_exp(self, x):
        """kappa exp(x - shift): the polynomial in x (its coefficients scaled) and the squarings; in the normalised
        variable (one level) where x's powers would grow past ``RAW_POWER_BOUND``."""
        if self.raw:
            y = evaluate_power_series(_exp_in_x(self.low, self.degree, self.squarings, self.shift, self.kappa), x)
        else:
            coefficients, center, radius = _exp_coefficients(self.low / 2 ** self.squarings, self.degree)
            scale = 1.0 / (2 ** self.squarings * radius)
            factor = self.kappa ** (1.0 / 2 ** self.squarings)
            t = _times(x, scale) + (-self.shift * scale - center / radius)
            y = evaluate_power_series([c * factor for c in coefficients], t)
        for _ in range(self.squarings):
            y = y * y
        return y

    def __call__(self, x, mask=None):
        e = self._scaled_exp(x)
        if mask is not None:  # a constant 0/1 mask: a plaintext product
            e = e * np.asarray(mask)
        total = e.sum(axis=-1, keepdims=True)              # S = kappa s
        alpha, _ = self.reciprocal.line
        z = -total + alpha / self.kappa                    # z0 = (alpha - beta s) / kappa: no level
        for _ in range(self.reciprocal.steps):
            z = z * (2.0 - total * z)
        return e * z

    @property
    def depth(self) -> int:
        return (math.ceil(math.log2(self.degree + 1)) + (not self.raw) + self.squarings + 2 * self.reciprocal.steps
                + 1)


def _layernorm(node, x, inverse_sqrt):
    """(x - mean) * scale * inverse_sqrt(var + eps) + shift over the node's axes (the batch axis first); the 1/n of
    the variance and epsilon folded into the inverse square root, the scale applied beside it."""
    axes = node.axes(len(x.shape))
    count = math.prod(x.shape[a] for a in axes)
    mean = _times_clean(x.sum(axis=axes, keepdims=True), 1.0 / count)   # clean: its broadcast needs no mask
    centered = x - mean
    inverse = inverse_sqrt((centered * centered).sum(axis=axes, keepdims=True), 1.0 / count, node.epsilon)
    if node.scale is not None:  # beside the inverse square root's chain: no level of its own
        centered = centered * np.asarray(node.scale)
    y = centered * inverse
    return y if node.shift is None else y + np.asarray(node.shift)


def _widen(low: float, high: float, margin: float = MARGIN) -> tuple[float, float]:
    pad = margin * max(high - low, 1e-6)
    return low - pad, high + pad


@dataclass
class GraphApproximation:
    """The graph with its calibrated approximations: ``forward(x)`` on a numpy batch (batch first, samples of
    ``graph.input_shape``) or on a CipherTensor of that shape; ``errors``: {node name: largest |approximation -
    exact| of that node's output on the calibration data, its exact inputs given}."""

    graph: object
    approximations: dict
    errors: dict
    _depths: dict = field(default_factory=dict, repr=False, compare=False)   # (node, layout) -> levels (node_depth)

    def forward(self, x):
        if not isinstance(x, CipherTensor):
            x = np.asarray(x, dtype=np.float64)
        if tuple(x.shape[1:]) != tuple(self.graph.input_shape):
            raise ShapeError(f"input of shape {tuple(x.shape)} must be (batch, *{self.graph.input_shape})")
        values = {self.graph.input: x}
        # a bootstrapping backend (``tensor_ops.attention_plan``) is told which node runs: its bootstraps are stated
        # by node
        mark = getattr(x.backend, "at_node", None) if isinstance(x, CipherTensor) else None
        prepare = getattr(x.backend, "prepare", None) if isinstance(x, CipherTensor) else None
        for node in self.graph.nodes:
            if mark is not None:
                mark(node.name)
            inputs = [values[name] for name in node.inputs]
            if prepare is not None and self.approximations.get(node.name) is not None and len(inputs) == 1:
                # an approximation's whole schedule on one refresh of its input (the fewest ciphertexts live)
                # rather than refreshes of its intermediates (powers, Newton iterates) as each runs out
                inputs[0] = prepare(inputs[0], self.node_depth(node, inputs[0]))
            values[node.output] = self.node_forward(node, *inputs)
        return values[self.graph.output]

    def node_depth(self, node, x) -> int:
        """The levels ``node`` consumes from its input ``x`` (a CipherTensor) to its output, measured once per
        layout on a level-recording twin (``tensor_ops.nn.LevelRecorder``; the masks a broadcast or a sum needs in
        that layout counted): an activation's normalisation and polynomial, a layer norm's mean, square, inverse
        square root and products, a Softmax's exp, row sums, reciprocal and products."""
        from .nn import LevelRecorder

        key = (node.name, x.layout)
        if key not in self._depths:
            recorder = LevelRecorder(x.layout.slots)
            probe = CipherTensor([recorder.encrypt(np.zeros(x.layout.slots)) for _ in x.ciphertexts], x.layout,
                                 recorder)
            self.node_forward(node, probe)
            self._depths[key] = recorder.consumed
        return self._depths[key]

    __call__ = forward

    def node_forward(self, node, *xs):
        x = xs[0]
        batch = x.shape[0]
        kind = node.kind
        if kind == "contraction":
            if node.patches is not None:
                return windowed_contraction(node, x)
            y = reshape(einsum(node.equation, x, node.weight), (batch, *node.out_shape))
            return y if node.bias is None else y + np.asarray(node.bias)
        if kind == "affine":
            y = x if node.scale is None else x * np.asarray(node.scale)
            return y if node.shift is None else y + np.asarray(node.shift)
        if kind == "add":
            return xs[0] + xs[1]
        if kind == "bilinear":
            y = einsum(node.equation, xs[0], xs[1])
            return y if y.ndim > 1 else reshape(y, (batch, 1))
        if kind == "reshape":
            return reshape_or_contract(x, (batch, *node.shape))
        if kind == "transpose":
            return x.transpose((0, *(p + 1 for p in node.perm)))
        if kind == "softmax":
            return self.approximations[node.name](x, node.mask)
        if kind == "layernorm":
            return _layernorm(node, x, self.approximations[node.name])
        if kind == "activation":
            poly = self.approximations[node.name]
            if poly is None:  # square
                return x * x
            t = _times(x, 1.0 / poly.radius) + (-poly.center / poly.radius)
            y = poly.evaluate(t)
            return y if not isinstance(y, float) else x * 0.0 + y
        raise ParameterError(f"{node.where()}: node kind {kind!r} has no encrypted form on the attention path")

    def depth(self) -> dict:
        """{node name: the levels its approximation's schedule consumes} for the approximated nodes."""
        return {name: approx.depth for name, approx in self.approximations.items() if hasattr(approx, "depth")}


def approximate(graph, calibration, *, activation_degree: int = 7, exp_degree: int | None = None,
                tolerance: float = NEWTON_TOLERANCE) -> GraphApproximation:
    """The ``GraphApproximation`` of ``graph`` calibrated on the float batch ``calibration`` (samples of
    ``graph.input_shape``): each activation's range widened by ``MARGIN`` of its width on each side, the others
    by ``RANGE_MARGIN``."""
    x = np.asarray(calibration, dtype=np.float64)
    form = hezk.model.input_form(x.shape, graph.input_shape)
    if form is None or not np.all(np.isfinite(x)):
        raise ShapeError(f"calibration inputs of shape {x.shape} are {hezk.model.input_forms_text(graph.input_shape)}"
                         f", or hold NaN or infinite values")
    x = hezk.model.as_batch(x, form)
    values = {graph.input: x}
    approximations, errors = {}, {}
    model = GraphApproximation(graph, approximations, errors)
    for node in graph.nodes:
        inputs = [values[name] for name in node.inputs]
        exact = node.forward(*inputs)
        if node.kind == "softmax":
            approximations[node.name] = SoftmaxApprox.calibrated(inputs[0], exp_degree, tolerance, node.mask)
        elif node.kind == "layernorm":
            axes = node.axes(inputs[0].ndim)
            variance = inputs[0].var(axis=axes) + node.epsilon
            v_low, v_high = _widen(float(variance.min()), float(variance.max()), RANGE_MARGIN)
            approximations[node.name] = InverseSqrtApprox(max(v_low, 0.5 * float(variance.min())), v_high,
                                                          tolerance)
        elif node.kind == "activation":
            if node.function == "square":
                approximations[node.name] = None
            else:
                interval = _widen(float(inputs[0].min()), float(inputs[0].max()))
                approximations[node.name] = fit_activation(node.function, activation_degree, interval,
                                                           bounds=node.bounds)
        elif node.kind == "maxpool":
            raise ParameterError(f"{node.where()}: MaxPool is not on the attention path (use from_graph)")
        if node.name in approximations:
            errors[node.name] = float(np.max(np.abs(model.node_forward(node, *inputs) - exact)))
        values[node.output] = exact
    return model


#: most entries of the 0/1 selection tensor a windowed contraction with overlapping (or padded, dilated) windows is
#: lowered to on the attention path (its H W x kh kw Ho Wo entries)
MAX_WINDOW_SELECTION = 1 << 22


def windowed_contraction(node, x):
    """A Contraction with ``patches`` (Conv, AveragePool; e.g. a ViT's patch embedding, Dosovitskiy et al., ICLR
    2021) on ``x`` of shape (b, C, H, W), a CipherTensor or an array: the node's einsum over the patches
    P[b, g, c, u, v, i, j] = xpad[b, g C/G + c, s0 i + d0 u, s1 j + d1 v]. Non-overlapping windows (stride = kernel,
    no padding or dilation, H and W multiples of the kernel) read P by a reshape and a transpose of x (layout changes
    on the slots); other windows by one plaintext contraction with the windows' 0/1 selection
    S[h, w, u, v, i, j] (``Patches.apply`` of the unit images, so the same windows as the float model), at most
    MAX_WINDOW_SELECTION entries (ParameterError above)."""
    import dataclasses

    patches = node.patches
    b, channels, height, width = x.shape
    groups = patches.groups
    (k0, k1), (oh, ow) = patches.kernel, patches.output_hw(height, width)
    if patches.stride == patches.kernel and patches.dilation == (1, 1) and not any(patches.pads) \
            and (height, width) == (oh * k0, ow * k1):
        split = reshape_or_contract(x, (b, groups, channels // groups, oh, k0, ow, k1))
        view = split.transpose((0, 1, 2, 4, 6, 3, 5))
    else:
        entries = height * width * k0 * k1 * oh * ow
        if entries > MAX_WINDOW_SELECTION:
            raise ParameterError(f"{node.where()}: its overlapping windows' selection has {entries} entries > "
                                 f"MAX_WINDOW_SELECTION = {MAX_WINDOW_SELECTION} on the attention path")
        units = np.eye(height * width).reshape(height * width, 1, height, width)
        selection = dataclasses.replace(patches, groups=1).apply(units)[:, 0, 0]  # (H W, kh, kw, Ho, Wo)
        selection = selection.reshape(height, width, k0, k1, oh, ow)
        grouped = reshape_or_contract(x, (b, groups, channels // groups, height, width))
        view = einsum("bgchw,hwuvij->bgcuvij", grouped, selection)
    y = reshape_or_contract(einsum(node.equation, view, node.weight), (b, *node.out_shape))
    return y if node.bias is None else y + np.asarray(node.bias)
