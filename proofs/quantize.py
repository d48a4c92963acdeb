"""Quantization of the proved networks: integers with power-of-two scales, requantization by a shift.

A real number x is stored as the integer round(x * 2^f) (round half up), as in zkDL (Sun, Li,
Zhang, "Efficient Zero-Knowledge Proofs of Deep Learning Training", section 3: values are
round(x * 2^R)). A layer computes the integer accumulator ``acc = W a + b`` at scale
2^(f_in + f_w), then requantizes by a right shift with rounding, ``round(acc / 2^shift)``, and
optionally applies ReLU. Two schemes build such models:

- **fixed point** (:func:`quantize_fixed_point`): every weight and activation has scale 2^R; hidden
  layers shift by R (so activations stay at 2^R); the last layer keeps its 2^(2R) accumulator
  unless ``rescale_output``.
- **symmetric int8** (:func:`quantize_int8`): weights in [-127, 127] with a per-layer power-of-two
  scale; activations get per-layer power-of-two scales calibrated on data so they fit int8;
  requantization by the per-layer shift. Requantized values are not clipped: the proof shows
  their exact value, with as many bits as the worst case needs (see :func:`layer_bounds`).

:func:`forward_int` (plain numpy int64) is the ground truth every proof is checked against.
:func:`check_field` refuses a model whose integers could wrap around the proof field.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .errors import ModelError
from .field import P

# The largest decomposition width: 2^(shift + Q) distinct integers must stay distinct mod P.
FIELD_BITS = P.bit_length() - 1
# Largest magnitude a signed integer may have so that it is recovered from its residue mod P.
FIELD_HALF = (P - 1) // 2
# Accumulators of the int64 reference stay below this (with margin for the float64 interval bounds).
INT64_SAFE = 1 << 62
# Largest exponent of a power-of-two scale; keeps every scale exactly representable.
MAX_FRAC_BITS = 24


def _frozen_int_array(value, name: str, ndim: int) -> np.ndarray:
    array = np.asarray(value)
    if array.ndim != ndim:
        raise ModelError(f"{name} must have {ndim} dimension(s), got shape {array.shape}")
    if array.dtype.kind not in "iu":
        raise ModelError(f"{name} must hold integers, got dtype {array.dtype}")
    if array.size and int(np.max(np.abs(array.astype(np.float64)))) > FIELD_HALF:
        raise ModelError(f"{name} has an entry of magnitude > {FIELD_HALF} (half the field modulus {P})")
    out = array.astype(np.int64, copy=True)
    out.setflags(write=False)
    return out


def _check_frac(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ModelError(f"{name} must be an int, got {value!r}")
    if not -MAX_FRAC_BITS <= int(value) <= MAX_FRAC_BITS:
        raise ModelError(f"{name}={value} not in [-{MAX_FRAC_BITS}, {MAX_FRAC_BITS}]")
    return int(value)


@dataclass(frozen=True, eq=False)
class QuantizedLayer:
    """One integer layer: ``out = relu?(round((weight @ a + bias) / 2^shift))``.

    ``weight`` is (out_features, in_features) at scale 2^weight_frac; ``bias`` is at the accumulator
    scale 2^(in_frac + weight_frac); the output has scale 2^out_frac = 2^(in_frac + weight_frac - shift).
    """

    weight: np.ndarray
    bias: np.ndarray
    weight_frac: int
    in_frac: int
    shift: int
    relu: bool

    def __post_init__(self):
        object.__setattr__(self, "weight", _frozen_int_array(self.weight, "weight", 2))
        object.__setattr__(self, "bias", _frozen_int_array(self.bias, "bias", 1))
        if self.bias.shape[0] != self.weight.shape[0]:
            raise ModelError(f"bias length {self.bias.shape[0]} != weight rows {self.weight.shape[0]}")
        if 0 in self.weight.shape:
            raise ModelError(f"weight shape {self.weight.shape} has an empty dimension")
        object.__setattr__(self, "weight_frac", _check_frac(self.weight_frac, "weight_frac"))
        object.__setattr__(self, "in_frac", _check_frac(self.in_frac, "in_frac"))
        if isinstance(self.shift, bool) or not isinstance(self.shift, (int, np.integer)):
            raise ModelError(f"shift must be an int, got {self.shift!r}")
        if not 0 <= int(self.shift) < FIELD_BITS:
            raise ModelError(f"shift={self.shift} not in [0, {FIELD_BITS})")
        object.__setattr__(self, "shift", int(self.shift))
        object.__setattr__(self, "relu", bool(self.relu))

    @property
    def in_features(self) -> int:
        return int(self.weight.shape[1])

    @property
    def out_features(self) -> int:
        return int(self.weight.shape[0])

    @property
    def out_frac(self) -> int:
        return self.in_frac + self.weight_frac - self.shift

    @property
    def needs_decomposition(self) -> bool:
        """True when the proof must show a requantization or a ReLU by a bit decomposition."""
        return self.relu or self.shift > 0

    def describe(self, index: int) -> str:
        relu = " + ReLU" if self.relu else ""
        return f"layer {index} (Linear {self.in_features}->{self.out_features}, shift {self.shift}{relu})"


@dataclass(frozen=True, eq=False)
class QuantizedMLP:
    """A quantized multilayer perceptron: the statement's model, without its float origin.

    ``input_bound`` is the largest |integer input| the model accepts (inputs are checked against it
    and the worst-case bounds of every layer start from it). ``error_bound`` is the stated worst-case
    absolute error of the dequantized output against the float model (inf when unknown).
    """

    layers: tuple
    input_frac: int
    input_bound: int
    scheme: str = "fixed_point"
    error_bound: float = math.inf
    _bounds: tuple = field(default=(), init=False, repr=False, compare=False)

    def __post_init__(self):
        layers = tuple(self.layers)
        if not layers:
            raise ModelError("layers must hold at least one QuantizedLayer, got none")
        for i, layer in enumerate(layers):
            if not isinstance(layer, QuantizedLayer):
                raise ModelError(f"layers[{i}] must be a QuantizedLayer, got {type(layer).__name__}")
        object.__setattr__(self, "layers", layers)
        object.__setattr__(self, "input_frac", _check_frac(self.input_frac, "input_frac"))
        if layers[0].in_frac != self.input_frac:
            raise ModelError(f"layers[0].in_frac={layers[0].in_frac} != input_frac={self.input_frac}")
        for i in range(1, len(layers)):
            prev, cur = layers[i - 1], layers[i]
            if cur.in_features != prev.out_features:
                raise ModelError(f"layers[{i}] takes {cur.in_features} features but layers[{i - 1}] "
                                 f"gives {prev.out_features}")
            if cur.in_frac != prev.out_frac:
                raise ModelError(f"layers[{i}].in_frac={cur.in_frac} != layers[{i - 1}].out_frac={prev.out_frac}")
        if isinstance(self.input_bound, bool) or not isinstance(self.input_bound, (int, np.integer)):
            raise ModelError(f"input_bound must be an int, got {self.input_bound!r}")
        if not 0 < int(self.input_bound) <= FIELD_HALF:
            raise ModelError(f"input_bound={self.input_bound} not in (0, {FIELD_HALF}]")
        object.__setattr__(self, "input_bound", int(self.input_bound))
        if self.scheme not in ("fixed_point", "int8"):
            raise ModelError(f"scheme={self.scheme!r} not in ('fixed_point', 'int8')")
        object.__setattr__(self, "error_bound", float(self.error_bound))
        object.__setattr__(self, "_bounds", _interval_bounds(self))

    @property
    def in_features(self) -> int:
        return self.layers[0].in_features

    @property
    def out_features(self) -> int:
        return self.layers[-1].out_features

    @property
    def output_frac(self) -> int:
        return self.layers[-1].out_frac

    @property
    def num_parameters(self) -> int:
        return sum(layer.weight.size + layer.bias.size for layer in self.layers)


# ---------------------------------------------------------------- integer arithmetic (ground truth)

def round_shift(values: np.ndarray, shift: int) -> np.ndarray:
    """round(values / 2^shift), half up: floor((v + 2^(shift-1)) / 2^shift); identity for shift 0."""
    values = np.asarray(values, dtype=np.int64)
    if shift == 0:
        return values.copy()
    return (values + (1 << (shift - 1))) >> shift


def _as_batch(x, features: int, name: str) -> np.ndarray:
    array = np.asarray(x)
    if array.ndim == 1:
        array = array[None, :]
    if array.ndim != 2 or array.shape[1] != features or array.shape[0] == 0:
        raise ModelError(f"{name} must have shape (batch, {features}) or ({features},), got {np.shape(x)}")
    return array


def check_input(model: QuantizedMLP, x) -> np.ndarray:
    """Validate an input batch: shape (batch, in_features) or (in_features,), integers taken as quantized
    (floats are quantized at the input scale 2^input_frac), every |x| <= model.input_bound; int64 (batch, in)."""
    array = _as_batch(as_integer_input(x, model.input_frac), model.in_features, "input")
    largest = int(np.max(np.abs(array.astype(np.float64))))
    if largest > model.input_bound:
        scale = 2.0 ** -model.input_frac
        raise ModelError(f"input has an entry of magnitude {largest} (real value {largest * scale:g}) > "
                         f"input_bound={model.input_bound} (real value {model.input_bound * scale:g})")
    return array.astype(np.int64)


@dataclass(frozen=True, eq=False)
class LayerTrace:
    """Integers of one layer on a batch: ``acc`` = W a + b, ``shifted`` = round(acc / 2^shift),
    ``out`` = relu(shifted) or shifted; all (batch, out_features) int64."""

    acc: np.ndarray
    shifted: np.ndarray
    out: np.ndarray


def forward_trace(model: QuantizedMLP, x_int) -> tuple:
    """The integer forward pass, keeping every layer's intermediates (the prover's witness).

    Refuses (ModelError) a model whose worst-case accumulator could overflow int64, so the reference
    is exact for every model it runs.
    """
    for i, (layer, bound) in enumerate(zip(model.layers, layer_bounds(model))):
        if bound.acc_magnitude >= INT64_SAFE:
            raise ModelError(f"{layer.describe(i)}: worst-case |accumulator| ~2^{math.log2(bound.acc_magnitude):.1f} "
                             f">= 2^62 could overflow the int64 reference")
    a = check_input(model, x_int)
    trace = []
    for layer in model.layers:
        acc = _affine(a, layer.weight, layer.bias)
        shifted = round_shift(acc, layer.shift)
        out = np.maximum(shifted, 0) if layer.relu else shifted
        trace.append(LayerTrace(acc, shifted, out))
        a = out
    return tuple(trace)


#: Products (batch x in x out) from which :func:`_affine` runs the compiled kernel (below: numpy)
AFFINE_KERNEL_MIN = 1 << 16


def _affine(a, weight, bias) -> np.ndarray:
    """a @ weight.T + bias in int64 (the caller bounds every accumulator below 2^62): the compiled
    :func:`proofs._kernels.int_affine` (split on the threads, ~8x numpy's integer matmul on one) for large layers,
    numpy, its twin, otherwise."""
    from .field import numba_kernels

    kernels = numba_kernels() if a.shape[0] * weight.size >= AFFINE_KERNEL_MIN else None
    if kernels is None:
        return a @ weight.T + bias
    out = np.empty((a.shape[0], weight.shape[0]), dtype=np.int64)
    kernels.int_affine(np.ascontiguousarray(a, dtype=np.int64), np.ascontiguousarray(weight, dtype=np.int64),
                       np.ascontiguousarray(bias, dtype=np.int64), out)
    return out


def forward_int(model: QuantizedMLP, x_int) -> np.ndarray:
    """The numpy int64 reference forward pass: the ground truth of every proof."""
    return forward_trace(model, x_int)[-1].out


# ---------------------------------------------------------------- real <-> integer

def quantize_values(x, frac_bits: int) -> np.ndarray:
    """round(x * 2^frac_bits), half up, as int64."""
    x = np.asarray(x, dtype=np.float64)
    if not np.all(np.isfinite(x)):
        raise ModelError("values to quantize must be finite (found nan or inf)")
    scaled = np.floor(x * 2.0 ** frac_bits + 0.5)
    if scaled.size and np.max(np.abs(scaled)) > FIELD_HALF:
        raise ModelError(f"a value scaled by 2^{frac_bits} has magnitude {np.max(np.abs(scaled)):.3g} "
                         f"> {FIELD_HALF} (half the field modulus)")
    return scaled.astype(np.int64)


def as_integer_input(x, input_frac: int) -> np.ndarray:
    """An input batch as integers: integer arrays unchanged, floats quantized by round(x * 2^input_frac)."""
    array = np.asarray(x)
    if array.dtype.kind == "f":
        return quantize_values(array, input_frac)
    if array.dtype.kind not in "iu":
        raise ModelError(f"input must hold integers (quantized) or floats, got dtype {array.dtype}")
    return array


def quantize_input(model: QuantizedMLP, x) -> np.ndarray:
    """Quantize a float input batch at the model's input scale and check it against input_bound."""
    x = _as_batch(x, model.in_features, "input")
    return check_input(model, quantize_values(x, model.input_frac))


def dequantize_output(model: QuantizedMLP, y_int) -> np.ndarray:
    """Integer outputs back to reals: y / 2^output_frac."""
    return np.asarray(y_int, dtype=np.float64) * 2.0 ** (-model.output_frac)


def float_forward(weights, biases, x, relu_last: bool = False, relus=None) -> np.ndarray:
    """The float model the quantization approximates: ReLU after every layer but the last (and after the
    last if ``relu_last``), or where ``relus`` (one bool per layer) says."""
    if relus is None:
        relus = [True] * (len(weights) - 1) + [relu_last]
    a = np.atleast_2d(np.asarray(x, dtype=np.float64))
    for w, b, relu in zip(weights, biases, relus):
        a = a @ np.asarray(w, dtype=np.float64).T + np.asarray(b, dtype=np.float64)
        if relu:
            a = np.maximum(a, 0.0)
    return a


# ---------------------------------------------------------------- worst-case bounds

def _affine_interval(weight, bias, lo, hi):
    """Interval arithmetic for W a + b with a in [lo, hi] elementwise (float64: exact below 2^53)."""
    w = np.asarray(weight, dtype=np.float64)
    pos, neg = np.maximum(w, 0.0), np.minimum(w, 0.0)
    bias = np.asarray(bias, dtype=np.float64)
    return pos @ lo + neg @ hi + bias, pos @ hi + neg @ lo + bias


def _signed_bits(lo: int, hi: int) -> int:
    """Smallest Q >= 1 with -2^(Q-1) <= lo and hi < 2^(Q-1)."""
    need = max(hi + 1, -lo, 1)
    return (need - 1).bit_length() + 1


@dataclass(frozen=True)
class LayerBound:
    """Worst-case integers of one layer over every input with |x| <= input_bound.

    ``acc_lo``/``acc_hi`` bound the accumulator, ``shifted_lo``/``shifted_hi`` its requantized value;
    ``q_bits`` is the signed width Q of the requantized value and ``decomposition_bits`` = shift + Q
    the bits per element a zkReLU/requantization proof commits to.
    """

    acc_lo: int
    acc_hi: int
    shifted_lo: int
    shifted_hi: int
    q_bits: int
    shift: int

    @property
    def decomposition_bits(self) -> int:
        return self.shift + self.q_bits

    @property
    def acc_magnitude(self) -> int:
        return max(abs(self.acc_lo), abs(self.acc_hi))


def _interval_bounds(model: QuantizedMLP) -> tuple:
    lo = np.full(model.in_features, -float(model.input_bound))
    hi = -lo
    bounds = []
    for layer in model.layers:
        acc_lo, acc_hi = _affine_interval(layer.weight, layer.bias, lo, hi)
        half = float(1 << (layer.shift - 1)) if layer.shift else 0.0
        lo = np.floor((acc_lo + half) / 2.0 ** layer.shift)
        hi = np.floor((acc_hi + half) / 2.0 ** layer.shift)
        s_lo, s_hi = int(lo.min()), int(hi.max())
        bounds.append(LayerBound(int(acc_lo.min()), int(acc_hi.max()), s_lo, s_hi,
                                 _signed_bits(s_lo, s_hi), layer.shift))
        if layer.relu:
            lo, hi = np.maximum(lo, 0.0), np.maximum(hi, 0.0)
    return tuple(bounds)


def layer_bounds(model: QuantizedMLP) -> tuple:
    """Worst-case :class:`LayerBound` of every layer (interval arithmetic from the input bound)."""
    return model._bounds


def check_field(model: QuantizedMLP) -> tuple:
    """Refuse a model whose integers could wrap around the field; return its layer bounds.

    Every accumulator must satisfy |acc| <= (P-1)/2 so that its residue determines it, and a layer
    proved by a bit decomposition needs shift + Q <= FIELD_BITS so that the 2^(shift+Q) integers the
    bits can rebuild stay distinct mod P. Raises :class:`ModelError` naming the layer and the bound.
    """
    bounds = layer_bounds(model)
    for i, (layer, bound) in enumerate(zip(model.layers, bounds)):
        magnitude = bound.acc_magnitude
        if magnitude > FIELD_HALF:
            raise ModelError(
                f"{layer.describe(i)} could wrap around the field: worst-case |accumulator| = "
                f"{magnitude} (~2^{math.log2(magnitude):.1f}) > (P-1)/2 = {FIELD_HALF} (P = {P}); "
                f"use fewer fractional bits or smaller weights/inputs")
        if layer.needs_decomposition and bound.decomposition_bits > FIELD_BITS:
            raise ModelError(
                f"{layer.describe(i)} could wrap around the field: its requantized values need "
                f"shift + Q = {layer.shift} + {bound.q_bits} = {bound.decomposition_bits} bits "
                f"(worst-case |accumulator| = {magnitude}) > {FIELD_BITS} bits the field holds "
                f"(P = {P}); use fewer fractional bits or smaller weights/inputs")
    return bounds


# ---------------------------------------------------------------- building quantized models

def _float_layers(weights, biases):
    if len(weights) != len(biases) or not weights:
        raise ModelError(f"need as many biases as weights (at least one), got {len(weights)} and {len(biases)}")
    ws, bs = [], []
    for i, (w, b) in enumerate(zip(weights, biases)):
        w = np.asarray(w, dtype=np.float64)
        b = np.asarray(b, dtype=np.float64)
        if w.ndim != 2 or b.shape != (w.shape[0],):
            raise ModelError(f"weights[{i}] must be (out, in) and biases[{i}] (out,), got {w.shape} and {b.shape}")
        if i and w.shape[1] != ws[-1].shape[0]:
            raise ModelError(f"weights[{i}] takes {w.shape[1]} features but weights[{i - 1}] gives {ws[-1].shape[0]}")
        if not (np.all(np.isfinite(w)) and np.all(np.isfinite(b))):
            raise ModelError(f"weights[{i}] or biases[{i}] holds nan or inf")
        ws.append(w)
        bs.append(b)
    return ws, bs


def _check_input_bound(input_bound) -> float:
    if not (isinstance(input_bound, (int, float, np.floating, np.integer)) and 0 < input_bound < math.inf):
        raise ModelError(f"input_bound={input_bound!r} must be a positive finite number")
    return float(input_bound)


def _stated_error(model: QuantizedMLP, weights, biases, input_bound: float) -> float:
    """Worst-case |dequantized output - float output| over inputs with |x| <= input_bound.

    Per layer, with a the float input (|a| <= M) and a' its dequantized approximation (|a - a'| <= e),
    W' = W_int / 2^f_w and b' likewise: |z - z'| <= |W - W'| M + |W'| e + |b - b'|; the shift adds
    half an output unit and ReLU is 1-Lipschitz. Computed in float64 with a relative margin.
    """
    float_lo = np.full(model.in_features, -input_bound)
    float_hi = -float_lo
    err = np.full(model.in_features, 0.5 * 2.0 ** -model.input_frac)
    for layer, w, b in zip(model.layers, weights, biases):
        w_q = layer.weight * 2.0 ** -layer.weight_frac
        b_q = layer.bias * 2.0 ** -(layer.in_frac + layer.weight_frac)
        magnitude = np.maximum(np.abs(float_lo), np.abs(float_hi))
        err = np.abs(w - w_q) @ magnitude + np.abs(w_q) @ err + np.abs(b - b_q)
        if layer.shift:
            err = err + 0.5 * 2.0 ** -layer.out_frac
        float_lo, float_hi = _affine_interval(w, b, float_lo, float_hi)
        if layer.relu:  # the float model has ReLU where the quantized one has
            float_lo, float_hi = np.maximum(float_lo, 0.0), np.maximum(float_hi, 0.0)
    return float(np.max(err)) * (1 + 1e-9)


def quantize_fixed_point(weights, biases, *, frac_bits: int = 8, input_bound: float = 1.0,
                         rescale_output: bool = False, relu_last: bool = False, relus=None) -> QuantizedMLP:
    """Fixed point with scale 2^R everywhere (zkDL): W, x -> round(. * 2^R), bias at 2^(2R).

    Hidden layers shift by R and apply ReLU; the last layer keeps scale 2^(2R) unless
    ``rescale_output`` and applies ReLU only if ``relu_last``. ``relus`` (one bool per layer)
    overrides where ReLU is applied. ``weights[i]`` is (out, in). ``input_bound`` is max |x|
    accepted. Raises :class:`ModelError` if any layer could wrap around the field.
    """
    ws, bs = _float_layers(weights, biases)
    bound = _check_input_bound(input_bound)
    r = _check_frac(frac_bits, "frac_bits")
    if r < 0:
        raise ModelError(f"frac_bits={frac_bits} must be >= 0")
    if relus is None:
        relus = [True] * (len(ws) - 1) + [bool(relu_last)]
    relus = [bool(flag) for flag in relus]
    if len(relus) != len(ws):
        raise ModelError(f"relus has {len(relus)} flags for {len(ws)} layers")
    layers = []
    for i, (w, b) in enumerate(zip(ws, bs)):
        last = i == len(ws) - 1
        layers.append(QuantizedLayer(quantize_values(w, r), quantize_values(b, 2 * r), r, r,
                                     r if (not last or rescale_output) else 0, relus[i]))
    model = QuantizedMLP(tuple(layers), r, int(quantize_values(bound, r)), "fixed_point")
    return _finish(model, ws, bs, bound)


def _finish(model: QuantizedMLP, ws, bs, bound: float) -> QuantizedMLP:
    check_field(model)
    error = _stated_error(model, ws, bs, bound)
    return QuantizedMLP(model.layers, model.input_frac, model.input_bound, model.scheme, error)


def _int8_frac(magnitude: float, levels: int = 127) -> int:
    """Largest f with magnitude * 2^f <= levels (clamped to the allowed range)."""
    if magnitude <= 0:
        return MAX_FRAC_BITS
    return int(np.clip(math.floor(math.log2(levels / magnitude)), -MAX_FRAC_BITS, MAX_FRAC_BITS))


def _activation_magnitudes(ws, bs, calibration, bound: float) -> list:
    """max |activation| of every layer's float output: on the ``calibration`` batch, or (None) the
    worst case over inputs with |x| <= bound by interval arithmetic."""
    if calibration is None:
        lo, hi = np.full(ws[0].shape[1], -bound), np.full(ws[0].shape[1], bound)
    else:
        calib = np.atleast_2d(np.asarray(calibration, dtype=np.float64))
        if calib.ndim != 2 or calib.shape[1] != ws[0].shape[1] or not np.all(np.isfinite(calib)):
            raise ModelError(f"calibration must be a finite float batch of shape (batch, {ws[0].shape[1]}), "
                             f"got shape {np.shape(calibration)}")
        lo = hi = calib
    magnitudes = []
    for i, (w, b) in enumerate(zip(ws, bs)):
        if calibration is None:
            lo, hi = _affine_interval(w, b, lo, hi)
        else:
            lo = hi = lo @ w.T + b
        if i < len(ws) - 1:
            lo, hi = np.maximum(lo, 0.0), np.maximum(hi, 0.0)
        magnitudes.append(float(max(np.max(np.abs(lo)), np.max(np.abs(hi)))))
    return magnitudes


def quantize_int8(weights, biases, calibration=None, *, input_bound: float = 1.0) -> QuantizedMLP:
    """Symmetric int8 with power-of-two scales; requantization by a per-layer shift.

    Each weight matrix gets the largest 2^f_w with |W| * 2^f_w <= 127; the input gets the largest
    scale with input_bound * 2^f <= 127; each layer's output scale is calibrated on the float
    activations of ``calibration`` (a float input batch; None: the worst case over |x| <= input_bound)
    so they fit int8, and the shift is f_in + f_w - f_out (never negative). Requantized values are not
    clipped (see module doc).
    """
    ws, bs = _float_layers(weights, biases)
    bound = _check_input_bound(input_bound)
    magnitudes = _activation_magnitudes(ws, bs, calibration, bound)
    in_frac = _int8_frac(bound)
    frac = in_frac
    layers = []
    for i, (w, b) in enumerate(zip(ws, bs)):
        w_frac = _int8_frac(float(np.max(np.abs(w))))
        out_frac = min(_int8_frac(magnitudes[i]), frac + w_frac)
        layers.append(QuantizedLayer(quantize_values(w, w_frac), quantize_values(b, frac + w_frac),
                                     w_frac, frac, frac + w_frac - out_frac, i < len(ws) - 1))
        frac = out_frac
    model = QuantizedMLP(tuple(layers), in_frac, int(quantize_values(bound, in_frac)), "int8")
    return _finish(model, ws, bs, bound)
