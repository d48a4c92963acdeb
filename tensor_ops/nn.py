"""Encrypted inference: layers, ``Sequential`` models from numpy weights, and their plans.

Layers are numpy functions of a batch (the plaintext half). Every layer but the activations is affine,
x -> A x + b on the flattened sample, and ``affine`` returns that (A, b) by probing the layer's own
``forward`` with the basis vectors, so a convolution, a pooling or a batch norm becomes one dense matrix
and consecutive affine layers fold into a single matrix (batch norm folds into the convolution or linear
layer before it, Ioffe and Szegedy, ICML 2015). Activations are the polynomials of
``tensor_ops.activations``. Input shapes are per sample: (features,) or (channels, H, W).

A ``Residual(layers, shortcut)`` block computes y = s(x) + f(x): folded like any affine layer when f has no
activation, else a fork (x kept) and a join (x added through s and the affine layers after the block), see
``tensor_ops.packing``.

``Sequential.stages()`` is that folded form (``tensor_ops.model_plan``); ``forward`` runs it in numpy (the reference every encrypted
result is compared with). It runs encrypted two ways:
- ``model.plan()`` -> ``ModelPlan``: the packed server path of ``tensor_ops.inference`` (many samples per
  ciphertext, one level per affine stage, Galois keys for the plan's rotations only);
- ``model(cipher_tensor)``: the same stages on a ``CipherTensor`` through the einsum planner.
"""
from __future__ import annotations

import hashlib
import itertools
import json
import math
import warnings
from dataclasses import dataclass, field, replace

import numpy as np

import hezk.model
from hezk.model.graph import activate
from crypto.ckks.bootstrap import BootstrapConfig, as_config
from crypto.errors import HEWarning, LevelError, ParameterError, ShapeError
from crypto.context import as_parameters
from tensor_ops.activations import (MAX_DEGREE, MAX_SIGN_STAGES, RELU_TOLERANCE, SIGN_DEGREES, SIGN_GAP, TARGETS,
                                    CompositeRelu, PolyActivation, ReluChoice, composite_sign, fit_activation,
                                    relu_choice, relu_options, square)
from tensor_ops.backends import PlainBackend
from tensor_ops.bootstrap_placement import cached_bootstrap_plan, place_for_model_plan
from tensor_ops.lowering import lower_layers
from tensor_ops.model_plan import (DEFAULT_KEY_BUDGET, FINISH_FUNCTIONS, ActivationFit, ActivationStage,
                                   AffineStage, ForkStage, JoinStage, ModelPlan, StagePlan, auto_parameters,
                                   choose_parameters, output_ranges, stage_plans)
from tensor_ops.packing import (SPARSE_MEMO, SparseMap, conv_sparse, input_layout, node_sparse, packed_stages,
                                pool_sparse, probe_sparse, walk_layers)
from tensor_ops.progress import as_progress
from tensor_ops.tensor import CipherTensor, encrypt as tensor_encrypt

MAX_AFFINE_ENTRIES = 1 << 24


def _frozen_array(value, name, ndim):
    try:
        array = np.array(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise ParameterError(f"{name} must be a numeric array, got {type(value).__name__}") from None
    if array.ndim != ndim:
        raise ShapeError(f"{name}.shape={array.shape} must have {ndim} dimensions")
    if not np.all(np.isfinite(array)):
        raise ParameterError(f"{name} contains non-finite values (nan or inf)")
    array.setflags(write=False)
    return array


def _positive_int(value, name):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ParameterError(f"{name}={value!r} must be a positive integer")
    return int(value)


def _batched(x, input_shape, layer):
    """(batch, *input_shape) view of x; a single sample gets a batch axis of 1."""
    x = np.asarray(x, dtype=np.float64)
    if x.shape == tuple(input_shape):
        return x[None]
    if x.shape[1:] != tuple(input_shape):
        raise ShapeError(f"{layer}: input shape {x.shape} is neither {tuple(input_shape)} nor (batch, *{tuple(input_shape)})")
    return x


class Layer:
    """Base: ``output_shape(input_shape)``, ``forward(batch)``, and the npz ``config`` / ``arrays``."""

    kind = "layer"
    affine_layer = True

    def output_shape(self, input_shape):
        return tuple(input_shape)

    def check_input(self, input_shape):
        self.output_shape(input_shape)

    def config(self) -> dict:
        return {}

    def arrays(self) -> dict:
        return {}

    def affine(self, input_shape):
        """(A, b) with forward(x).reshape(-1) == A @ x.reshape(-1) + b for one sample of ``input_shape``."""
        n_in = math.prod(input_shape)
        n_out = math.prod(self.output_shape(input_shape))
        if n_in * n_out > MAX_AFFINE_ENTRIES:
            raise ShapeError(f"{self.kind}: dense matrix {n_out}x{n_in} exceeds the limit of {MAX_AFFINE_ENTRIES} entries")
        zero = self.forward(np.zeros((1, *input_shape))).reshape(-1)
        basis = np.eye(n_in).reshape(n_in, *input_shape)
        matrix = (self.forward(basis).reshape(n_in, -1) - zero).T
        return matrix, zero

    def sparse(self, input_shape):
        """(SparseMap M, b) with forward(x).reshape(-1) == M x.reshape(-1) + b (probed a chunk of basis
        vectors at a time, so no dense matrix is formed)."""
        return probe_sparse(self.forward, tuple(input_shape), self.output_shape(input_shape))


@dataclass(frozen=True, eq=False)
class Linear(Layer):
    """y = W x + b with W of shape (out_features, in_features)."""

    weight: np.ndarray
    bias: np.ndarray | None = None
    kind = "linear"

    def __post_init__(self):
        weight = _frozen_array(self.weight, "weight", 2)
        bias = np.zeros(weight.shape[0]) if self.bias is None else self.bias
        bias = _frozen_array(bias, "bias", 1)
        if bias.shape != weight.shape[:1]:
            raise ShapeError(f"bias.shape={bias.shape} must be ({weight.shape[0]},) to match weight.shape={weight.shape}")
        object.__setattr__(self, "weight", weight)
        object.__setattr__(self, "bias", bias)

    def output_shape(self, input_shape):
        if tuple(input_shape) != (self.weight.shape[1],):
            raise ShapeError(f"linear: input shape {tuple(input_shape)} must be ({self.weight.shape[1]},)")
        return (self.weight.shape[0],)

    def forward(self, x):
        x = _batched(x, (self.weight.shape[1],), self.kind)
        return x @ self.weight.T + self.bias

    def affine(self, input_shape):
        self.output_shape(input_shape)
        return np.array(self.weight), np.array(self.bias)

    def sparse(self, input_shape):
        self.output_shape(input_shape)
        return SparseMap.from_dense(self.weight), np.array(self.bias)

    def arrays(self):
        return {"weight": self.weight, "bias": self.bias}


def _windows(x, kernel, stride):
    """(batch, C, Ho, Wo, kh, kw) sliding windows of x (batch, C, H, W)."""
    view = np.lib.stride_tricks.sliding_window_view(x, kernel, axis=(2, 3))
    return view[:, :, ::stride, ::stride]


def _on_images(layer, x, kernel):
    """Run ``kernel`` on a (batch, C, H, W) view of x (one image or a batch), after checking the shape."""
    x = np.asarray(x, dtype=np.float64)
    single = x.ndim == 3
    x = x[None] if single else x
    if x.ndim != 4:
        raise ShapeError(f"{layer.kind}: input shape {x.shape} must be (channels, H, W) or (batch, channels, H, W)")
    layer.output_shape(x.shape[1:])
    y = kernel(x)
    return y[0] if single else y


def _spatial_output(input_shape, kernel, stride, padding, layer):
    if len(input_shape) != 3:
        raise ShapeError(f"{layer}: input shape {tuple(input_shape)} must be (channels, height, width)")
    c, h, w = input_shape
    out = [(size + 2 * padding - k) // stride + 1 for size, k in zip((h, w), kernel)]
    if min(out) < 1:
        raise ShapeError(f"{layer}: kernel {kernel} with padding={padding} does not fit input {(h, w)}")
    return c, out[0], out[1]


@dataclass(frozen=True, eq=False)
class Conv2d(Layer):
    """Cross-correlation y[o, i, j] = sum_{c,u,v} W[o, c, u, v] x[c, s i + u - p, s j + v - p] + b[o]."""

    weight: np.ndarray
    bias: np.ndarray | None = None
    stride: int = 1
    padding: int = 0
    kind = "conv2d"

    def __post_init__(self):
        weight = _frozen_array(self.weight, "weight", 4)
        bias = _frozen_array(np.zeros(weight.shape[0]) if self.bias is None else self.bias, "bias", 1)
        if bias.shape != weight.shape[:1]:
            raise ShapeError(f"bias.shape={bias.shape} must be ({weight.shape[0]},) to match weight.shape={weight.shape}")
        _positive_int(self.stride, "stride")
        if isinstance(self.padding, bool) or not isinstance(self.padding, (int, np.integer)) or self.padding < 0:
            raise ParameterError(f"padding={self.padding!r} must be a non-negative integer")
        object.__setattr__(self, "weight", weight)
        object.__setattr__(self, "bias", bias)
        object.__setattr__(self, "stride", int(self.stride))
        object.__setattr__(self, "padding", int(self.padding))

    def output_shape(self, input_shape):
        c, h, w = _spatial_output(input_shape, self.weight.shape[2:], self.stride, self.padding, self.kind)
        if c != self.weight.shape[1]:
            raise ShapeError(f"conv2d: input has {c} channels, weight.shape={self.weight.shape} expects {self.weight.shape[1]}")
        return (self.weight.shape[0], h, w)

    def forward(self, x):
        return _on_images(self, x, self._forward)

    def _forward(self, x):
        p = self.padding
        padded = np.pad(x, ((0, 0), (0, 0), (p, p), (p, p)))
        patches = _windows(padded, self.weight.shape[2:], self.stride)
        return np.einsum("bchwuv,ocuv->bohw", patches, self.weight) + self.bias[:, None, None]

    def config(self):
        return {"stride": self.stride, "padding": self.padding}

    def sparse(self, input_shape):
        out = self.output_shape(input_shape)
        memo = self.__dict__.setdefault(SPARSE_MEMO, {})  # the planner packs each layer once per choice
        if tuple(input_shape) not in memo:
            memo[tuple(input_shape)] = conv_sparse(self.weight, tuple(input_shape), self.stride, self.padding)
        return memo[tuple(input_shape)], np.repeat(self.bias, out[1] * out[2])

    def arrays(self):
        return {"weight": self.weight, "bias": self.bias}


@dataclass(frozen=True, eq=False)
class AvgPool2d(Layer):
    """Mean over kernel_size x kernel_size windows taken every ``stride`` pixels (default: kernel_size)."""

    kernel_size: int = 2
    stride: int | None = None
    kind = "avgpool2d"

    def __post_init__(self):
        _positive_int(self.kernel_size, "kernel_size")
        stride = self.kernel_size if self.stride is None else _positive_int(self.stride, "stride")
        object.__setattr__(self, "kernel_size", int(self.kernel_size))
        object.__setattr__(self, "stride", int(stride))

    def output_shape(self, input_shape):
        return _spatial_output(input_shape, (self.kernel_size,) * 2, self.stride, 0, self.kind)

    def forward(self, x):
        return _on_images(self, x, lambda batch: _windows(batch, (self.kernel_size,) * 2, self.stride).mean(axis=(-2, -1)))

    def config(self):
        return {"kernel_size": self.kernel_size, "stride": self.stride}

    def sparse(self, input_shape):
        out = self.output_shape(input_shape)
        return pool_sparse(self.kernel_size, self.stride, tuple(input_shape)), np.zeros(math.prod(out))


@dataclass(frozen=True, eq=False)
class Flatten(Layer):
    """(C, H, W) -> (C*H*W,), row-major like numpy's reshape."""

    kind = "flatten"

    def output_shape(self, input_shape):
        return (math.prod(input_shape),)

    def forward(self, x):
        x = np.asarray(x, dtype=np.float64)
        return x.reshape(x.shape[0], -1)

    def sparse(self, input_shape):
        n = math.prod(input_shape)
        return SparseMap.diagonal(np.ones(n)), np.zeros(n)


@dataclass(frozen=True, eq=False)
class BatchNorm(Layer):  # also exported as BatchNorm1d and BatchNorm2d
    """Inference-time batch norm on axis 0 of the sample (channels or features):
    y = gamma (x - mean) / sqrt(var + eps) + beta. Folded into the preceding affine layer."""

    gamma: np.ndarray
    beta: np.ndarray
    mean: np.ndarray
    var: np.ndarray
    eps: float = 1e-5
    kind = "batchnorm"

    def __post_init__(self):
        arrays = {name: _frozen_array(getattr(self, name), name, 1) for name in ("gamma", "beta", "mean", "var")}
        if len({a.shape for a in arrays.values()}) != 1:
            raise ShapeError(f"batch norm arrays must share one shape, got { {k: v.shape for k, v in arrays.items()} }")
        if np.any(arrays["var"] + self.eps <= 0):
            raise ParameterError(f"var + eps must be > 0 (eps={self.eps})")
        for name, array in arrays.items():
            object.__setattr__(self, name, array)
        object.__setattr__(self, "eps", float(self.eps))

    def output_shape(self, input_shape):
        if not input_shape or input_shape[0] != self.gamma.shape[0]:
            raise ShapeError(f"batchnorm: input shape {tuple(input_shape)} must start with {self.gamma.shape[0]} channels")
        return tuple(input_shape)

    def forward(self, x):
        x = np.asarray(x, dtype=np.float64)
        factor = self.gamma / np.sqrt(self.var + self.eps)
        shift = self.beta - factor * self.mean
        expand = (slice(None),) + (None,) * (x.ndim - 2)
        return x * factor[expand] + shift[expand]

    def config(self):
        return {"eps": self.eps}

    def sparse(self, input_shape):
        self.output_shape(input_shape)
        factor = self.gamma / np.sqrt(self.var + self.eps)
        shift = self.beta - factor * self.mean
        inner = math.prod(input_shape[1:])
        return SparseMap.diagonal(np.repeat(factor, inner)), np.repeat(shift, inner)

    def arrays(self):
        return {"gamma": self.gamma, "beta": self.beta, "mean": self.mean, "var": self.var}


@dataclass(frozen=True, eq=False)
class Activation(Layer):
    """Elementwise polynomial activation (see ``tensor_ops.activations``)."""

    poly: PolyActivation = field(default_factory=square)
    kind = "activation"
    affine_layer = False

    @property
    def degree(self):
        """The chosen degree of the fit (``Poly(name, degree)``), even where its top coefficient is zero."""
        return len(self.poly.coefficients) - 1

    @property
    def effective_degree(self):
        """The degree of the polynomial evaluated (an odd target fitted at even degree loses its top term)."""
        return self.poly.degree

    @property
    def depth(self):
        return self.poly.depth

    @property
    def coefficients(self):
        """Power-basis coefficients in t = (x - center) / radius, lowest degree first."""
        return self.poly.coefficients

    @property
    def interval(self):
        return self.poly.interval

    def max_error(self, samples: int = 4001) -> float:
        return self.poly.max_error(samples)

    def forward(self, x):
        return np.asarray(self.poly(x), dtype=np.float64)

    def affine(self, input_shape):
        raise ShapeError("activation: a polynomial activation is not affine")

    def config(self):
        config = {"name": self.poly.name, "center": self.poly.center, "radius": self.poly.radius}
        if getattr(self.poly, "bounds", None) is not None:
            config["bounds"] = list(self.poly.bounds)
        if isinstance(self.poly, CompositeRelu):  # its stages are arrays stage0, stage1, ...
            config["composite"] = {"gap": self.poly.gap, "stages": len(self.poly.stages)}
        return config

    def arrays(self):
        if isinstance(self.poly, CompositeRelu):
            return {f"stage{i}": np.array(stage) for i, stage in enumerate(self.poly.stages)}
        return {"coefficients": np.array(self.poly.coefficients)}


def Square() -> Activation:  # noqa: N802 (a layer constructor, named like the other layers)
    """x -> x^2, one level."""
    return Activation(square())


def Poly(name: str = "relu", degree: int = 4, interval=(-4.0, 4.0), method: str = "minimax") -> Activation:  # noqa: N802
    """A polynomial of ``degree`` fitted to relu / gelu / silu / sigmoid on ``interval``."""
    return Activation(fit_activation(name, degree, interval, method))


BatchNorm1d = BatchNorm2d = BatchNorm


@dataclass(frozen=True, eq=False)
class Residual(Layer):
    """A residual block y = s(x) + f(x) (He et al., CVPR 2016): f the chain ``layers`` (activations and
    nested blocks allowed), s the affine chain ``shortcut`` (empty: the identity; e.g. a 1x1 convolution, a
    projection shortcut). A block without activations is affine and folds like any affine layer; otherwise
    the encrypted path keeps x's ciphertext and adds it, through s, where f's last run of affine layers
    ends (``tensor_ops.packing``)."""

    layers: tuple
    shortcut: tuple = ()
    kind = "residual"

    def __post_init__(self):
        for name in ("layers", "shortcut"):
            value = getattr(self, name)
            value = tuple(value) if isinstance(value, (list, tuple)) else value
            if not isinstance(value, tuple) or not all(isinstance(layer, Layer) for layer in value):
                raise ParameterError(f"Residual {name} must be a sequence of Layer objects, got {value!r:.120}")
            object.__setattr__(self, name, value)
        if not self.layers:
            raise ParameterError("Residual layers must not be empty (the branch f of y = s(x) + f(x))")
        if not all(layer.affine_layer for layer in self.shortcut):
            raise ParameterError("Residual shortcut must be affine (no activation): "
                                 f"{[layer.kind for layer in self.shortcut]}")

    @property
    def affine_layer(self):
        return all(layer.affine_layer for layer in self.layers)

    def output_shape(self, input_shape):
        branch = shortcut = tuple(input_shape)
        for layer in self.layers:
            branch = tuple(layer.output_shape(branch))
        for layer in self.shortcut:
            shortcut = tuple(layer.output_shape(shortcut))
        if branch != shortcut:
            raise ShapeError(f"residual: the branch gives {branch}, the shortcut "
                             f"{'(identity) ' if not self.shortcut else ''}{shortcut}; they must be equal")
        return branch

    def forward(self, x):
        y = s = np.asarray(x, dtype=np.float64)
        for layer in self.layers:
            y = layer.forward(y)
        for layer in self.shortcut:
            s = layer.forward(s)
        return y + s.reshape(y.shape)

    def sparse(self, input_shape):
        if not self.affine_layer:
            raise ShapeError("residual: a block with an activation is not affine")
        result = []
        for chain in (self.layers, self.shortcut):
            shape, n = tuple(input_shape), math.prod(input_shape)
            matrix, bias = SparseMap.diagonal(np.ones(n)), np.zeros(n)
            for layer in chain:
                m, b = layer.sparse(shape)
                matrix, bias = m.compose(matrix), m.apply(bias[None])[0] + b
                shape = tuple(layer.output_shape(shape))
            result.append((matrix, bias))
        (f, fb), (s_, sb) = result
        return f.plus(s_), fb + sb

    def einsum_text(self, shape, out_shape):
        inner = " -> ".join(layer.kind for layer in self.layers)
        return f"residual block x + ({inner}) without activation: one affine map (S + F) x + b, folded"

    def config(self):
        return {"layers": [{"kind": layer.kind, "config": layer.config()} for layer in self.layers],
                "shortcut": [{"kind": layer.kind, "config": layer.config()} for layer in self.shortcut]}

    def arrays(self):
        return {f"{name}.{i}.{key}": value for name in ("layers", "shortcut")
                for i, layer in enumerate(getattr(self, name)) for key, value in layer.arrays().items()}


def _residual_from_config(config, arrays) -> Residual:
    chains = {}
    for name in ("layers", "shortcut"):
        entries = config.get(name, [])
        if not isinstance(entries, list):
            raise ParameterError(f"residual {name} must be a list of layers, got {entries!r:.80}")
        chain = []
        for i, entry in enumerate(entries):
            prefix = f"{name}.{i}."
            own = {key[len(prefix):]: value for key, value in arrays.items() if key.startswith(prefix)}
            chain.append(layer_from_config(entry["kind"], dict(entry.get("config", {})), own))
        chains[name] = tuple(chain)
    return Residual(chains["layers"], chains["shortcut"])


def _foreign_kinds(layers):
    """Kinds without a hezk-model entry (nodes of a model description), nested blocks included."""
    foreign = []
    for layer in layers:
        if layer.kind == "residual":
            foreign += _foreign_kinds(layer.layers + layer.shortcut)
        elif layer.kind not in LAYER_KINDS:
            foreign.append(layer.kind)
    return foreign


LAYER_KINDS = {cls.kind: cls for cls in (Linear, Conv2d, AvgPool2d, Flatten, BatchNorm, Activation, Residual)}


def _composite_from_config(config: dict, arrays: dict) -> CompositeRelu:
    """The ``CompositeRelu`` an activation's ``config``/``arrays`` describe (``stages`` arrays stage0, ...; the
    stages and gap are checked by ``CompositeRelu`` itself)."""
    composite = config["composite"]
    count = composite.get("stages") if isinstance(composite, dict) else None
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_SIGN_STAGES:
        raise ParameterError(f"activation composite stages={count!r} must be an integer in [1, {MAX_SIGN_STAGES}]")
    missing = [f"stage{i}" for i in range(count) if f"stage{i}" not in arrays]
    if missing:
        raise ParameterError(f"activation: composite sign stage array {missing[0]!r} is missing "
                             f"({count} stages declared)")
    stages = tuple(tuple(np.asarray(arrays[f"stage{i}"], dtype=np.float64).ravel()) for i in range(count))
    return CompositeRelu(stages, float(config.get("radius", 1.0)), composite.get("gap", SIGN_GAP))


def layer_from_config(kind: str, config: dict, arrays: dict) -> Layer:
    """Rebuild a layer saved by ``config()`` and ``arrays()``."""
    if kind not in LAYER_KINDS:
        raise ParameterError(f"layer kind={kind!r} is not one of {sorted(LAYER_KINDS)}")
    if kind == "residual":
        return _residual_from_config(config, arrays)
    if kind == "activation" and "composite" in config:
        return Activation(_composite_from_config(config, arrays))
    if kind == "activation":
        bounds = config.get("bounds")
        poly = PolyActivation(config.get("name", "custom"), tuple(arrays["coefficients"]),
                              float(config.get("center", 0.0)), float(config.get("radius", 1.0)),
                              None if bounds is None else tuple(bounds))
        return Activation(poly)
    return LAYER_KINDS[kind](**arrays, **config)


_FORMAT = "hezk-model"
_VERSION = 1


class Sequential:
    """A feed-forward model from numpy weights: ``Sequential([Linear(W1, b1), Square(), Linear(W2, b2)])``.

    ``forward`` is the plaintext reference: it runs the compiled stages (affine maps folded together,
    activation normalisation folded into them, the same polynomial schedule) that the encrypted path runs.
    """

    digest = None  # the sha256 identity of the model description it was lowered from (hezk.model), if any
    calibration_report = None  # (mean, max) error against the float model on the calibration inputs, if any
    input_range = None  # (low, high) of the calibration inputs' values, widened (``input_range``), if calibrated
    calibration_errors = None  # {Activation layer: max error on the values its input took on calibration data}
    finish = ""  # the model's last activation, applied exactly by the client after decryption (``from_graph``)

    def __init__(self, layers, input_shape=None):
        layers = tuple(layers)
        if not layers or not all(isinstance(layer, Layer) for layer in layers):
            raise ParameterError(f"layers must be a non-empty sequence of Layer objects, got {layers!r:.120}")
        self._layers = layers
        self._input_shape = None if input_shape is None else self._shape(input_shape)
        if self._input_shape is None and isinstance(layers[0], Linear):
            self._input_shape = (layers[0].weight.shape[1],)
        if self._input_shape is not None:
            self.output_shape(self._input_shape)

    @property
    def layers(self):
        return self._layers

    def __getstate__(self):
        """Pickled without the memoised plans (``plan``)."""
        state = dict(self.__dict__)
        state.pop("_plans", None)
        return state

    @property
    def input_shape(self):
        return self._input_shape

    @staticmethod
    def _shape(shape):
        try:
            shape = tuple(int(s) for s in (shape if np.ndim(shape) else (shape,)))
        except (TypeError, ValueError):
            raise ShapeError(f"input_shape={shape!r} must be a tuple of positive integers") from None
        if not shape or min(shape) < 1:
            raise ShapeError(f"input_shape={shape} must be a non-empty tuple of positive integers")
        return shape

    def _resolve(self, input_shape):
        if input_shape is None:
            if self._input_shape is None:
                raise ShapeError("input_shape=None: the model does not know its input shape, pass one")
            return self._input_shape
        return self._shape(input_shape)

    def output_shape(self, input_shape=None):
        shape = self._resolve(input_shape)
        for layer in self._layers:
            shape = layer.output_shape(shape)
        return shape

    def stages(self, input_shape=None):
        """The compiled (AffineStage | ActivationStage, ...) on flattened samples."""
        return self.compile(input_shape)[0]

    def compile(self, input_shape=None):
        """(stages, stage_of_layer): the compiled stages and, per layer of ``plan_layers`` (the layers with
        residual blocks expanded, ``tensor_ops.packing.walk_layers``), the index of the stage that evaluates
        it (None for a layer that folds into nothing, e.g. a Flatten next to activations). A residual block
        is a ``ForkStage`` (x kept) and, where the run of affine layers after its branch ends, a ``JoinStage``
        adding x through its shortcut and those affine layers."""
        shape = self._resolve(input_shape)
        layers = self.plan_layers
        stages, pending, waiting, owner = [], None, [], [None] * len(layers)
        joins, forks = [], []  # pending joins: [kept map, fork stage, marker index]; forks: [map, stage, shape]

        def compose(run, matrix, bias):
            return (matrix, bias) if run is None else (matrix.compose(run[0]), matrix.apply(run[1][None])[0] + bias)

        def emit_pending():
            if pending is not None and not _is_identity(*pending):
                for index in waiting:
                    owner[index] = len(stages)
                stages.append(AffineStage(*pending))
            waiting.clear()
            for run, fork_stage, marker in joins:
                if sum(stage.depth for stage in stages[fork_stage + 1:]) < 1:
                    raise ParameterError("a residual block whose branch uses no level cannot be scale-matched")
                owner[marker] = len(stages)
                n = math.prod(shape)
                stages.append(JoinStage(*(run if run is not None else (SparseMap.diagonal(np.ones(n)), np.zeros(n)))))
            joins.clear()

        for index, layer in enumerate(layers):
            if layer.kind == "fork":
                if joins:
                    emit_pending()
                    pending = None
                owner[index] = len(stages)
                forks.append([pending, len(stages), shape])
                stages.append(ForkStage(math.prod(shape)))
                continue
            if layer.kind == "join":
                run, fork_stage, fork_shape = forks.pop()
                for sub in layer.residual.shortcut:
                    run = compose(run, *sub.sparse(fork_shape))
                    fork_shape = sub.output_shape(fork_shape)
                joins.append([run, fork_stage, index])
                continue
            if layer.affine_layer:
                matrix, bias = layer.sparse(shape)
                pending = compose(pending, matrix, bias)
                for join in joins:  # the layer acts on the sum: its bias is added once, by the main path
                    join[0] = compose(join[0], matrix, np.zeros_like(bias))
                shape = layer.output_shape(shape)
                waiting.append(index)
                continue
            poly = layer.poly
            if (poly.center, poly.radius) != (0.0, 1.0):
                n = math.prod(shape)
                matrix, bias = pending if pending is not None else (SparseMap.diagonal(np.ones(n)), np.zeros(n))
                pending = (matrix.scaled(1.0 / poly.radius), (bias - poly.center) / poly.radius)
                for join in joins:
                    m, b = join[0] if join[0] is not None else (SparseMap.diagonal(np.ones(n)), np.zeros(n))
                    join[0] = (m.scaled(1.0 / poly.radius), b / poly.radius)
            emit_pending()
            pending = None
            owner[index] = len(stages)
            stages.append(ActivationStage(poly))
        emit_pending()
        return tuple(stages), tuple(owner)

    @property
    def plan_layers(self) -> tuple:
        """The layers as the compiler walks them: residual blocks with an activation expanded into a
        ``Fork`` marker, their branch and a ``Join`` marker (``tensor_ops.packing.walk_layers``); lowering
        choices are indexed in this sequence."""
        return walk_layers(self._layers)

    def depth(self, input_shape=None):
        """Multiplicative levels of the encrypted forward (one per affine stage, plus each activation's): the
        packed Client/Server path's (``plan``). ``forward_tensor`` on a batch of samples may need more (the
        einsum planner masks rows apart): see ``tensor_depth`` and ``tensor_parameters``."""
        return sum(stage.depth for stage in self.stages(input_shape))

    def tensor_depth(self, batch=None, params=None, input_shape=None) -> int:
        """The levels ``forward_tensor`` consumes on a (batch, n) input (a (n,) input if batch is None) under
        ``params`` (their slots decide the plans; default ``tensor_parameters``): a dry run on a
        PlainBackend that follows each ciphertext's level through every plan's rescales."""
        shape = self._resolve(input_shape)
        params = self.tensor_parameters(batch, shape) if params is None else as_parameters(params)
        return self._tensor_levels(batch, params.slots, shape)

    def tensor_parameters(self, batch=None, input_shape=None):
        """The smallest parameters (``choose_parameters``) with the levels ``forward_tensor`` consumes on a
        (batch, n) input: at least ``depth()``, more where the plans at those parameters' slots need more."""
        shape = self._resolve(input_shape)
        depth = self.depth(shape)
        for _ in range(8):  # the slots (so the plans) change with the depth only a few times
            params = choose_parameters(depth)
            needed = self._tensor_levels(batch, params.slots, shape)
            if needed <= depth:
                return params
            depth = needed
        raise LevelError(f"forward_tensor's depth does not settle (last {depth}); use the Client/Server path")

    def _tensor_levels(self, batch, slots: int, shape) -> int:
        memo = self.__dict__.setdefault("_tensor_levels_memo", {})
        key = (batch, int(slots), shape)
        if key not in memo:
            recorder = LevelRecorder(int(slots))
            n = math.prod(shape)
            self.forward_tensor(tensor_encrypt(recorder, np.zeros((n,) if batch is None else (int(batch), n))), shape)
            memo[key] = recorder.consumed
        return memo[key]

    def _flat_batch(self, x, input_shape):
        x = np.asarray(x, dtype=np.float64)
        single = x.shape == input_shape
        if not single and x.shape[1:] != input_shape:
            raise ShapeError(f"input shape {x.shape} is neither the model's {input_shape} nor (batch, *{input_shape})")
        return x.reshape(1 if single else x.shape[0], -1), single

    def forward(self, x, input_shape=None, progress=None):
        """Plaintext reference of the encrypted computation; x is one sample or a batch.

        A ``CipherTensor`` input runs the same stages through the einsum planner (``forward_tensor``; its
        ``progress``)."""
        if isinstance(x, CipherTensor):
            return self.forward_tensor(x, input_shape, progress=progress)
        shape = self._resolve(input_shape if input_shape is not None else self.sample_shape(x))
        flat, single = self._flat_batch(x, shape)
        flat = self._run_stages(flat, shape, _warn_outside)
        out = flat.reshape(flat.shape[0], *self.output_shape(shape))
        out = activate(self.finish, out) if self.finish else out  # the client's exact last step
        return out[0] if single else out

    def _run_stages(self, flat, shape, on_activation):
        """The compiled stages on flattened samples; ``on_activation(poly, t)`` sees each fitted activation's
        normalised input t (samples, values) first."""
        kept = []
        for stage in self.stages(shape):
            if isinstance(stage, ActivationStage) and stage.poly.name != "square" and flat.size:
                on_activation(stage.poly, flat)
            if isinstance(stage, ForkStage):
                kept.append(flat)
            elif isinstance(stage, JoinStage):
                flat = flat + stage.apply(kept.pop())
            else:
                flat = stage.apply(flat)
        return flat

    def samples_outside(self, x, input_shape=None) -> np.ndarray:
        """Indices of the samples of x (one sample or a batch) whose plain reference takes an activation's input
        outside the interval its polynomial was fitted on (|t| > 1): their results are wrong, and encrypted
        beside others, a polynomial far outside its interval can exceed the ciphertext's modulus and spoil every
        sample of the ciphertext. Encrypt them apart (or not at all)."""
        shape = self._resolve(input_shape if input_shape is not None else self.sample_shape(x))
        flat, _ = self._flat_batch(x, shape)
        outside = np.zeros(len(flat), dtype=bool)

        def note(poly, t):
            outside[:] |= ~np.all(np.abs(t) <= 1.0 + 1e-9, axis=1)

        self._run_stages(flat, shape, note)
        return np.flatnonzero(outside)

    __call__ = forward

    def forward_tensor(self, x: CipherTensor, input_shape=None, progress=None) -> CipherTensor:
        """The stages on a CipherTensor of flattened samples, shape (batch, n) or (n,): each affine stage
        is ``x @ A.T + b`` and each activation the polynomial schedule, all lowered to einsum plans by
        ``tensor_ops`` (its packing, its rotations: see ``tensor_rotations``). The Client/Server path packs
        many samples per ciphertext with fewer levels; this one composes with other CipherTensor code.
        ``progress``: True draws a bar on stderr over the stages, a callable gets ``(done, total, label)``;
        the result is the same either way."""
        report = as_progress(progress, "evaluate")
        shape = self._resolve(input_shape)
        n = math.prod(shape)
        if not (x.shape == (n,) or (x.ndim == 2 and x.shape[1] == n)):
            raise ShapeError(f"CipherTensor of shape {x.shape}: encrypt the flattened samples, shape (batch, {n}) "
                             f"or ({n},), for the model's input {shape}")
        level = x.level
        if level is not None and not isinstance(x.backend, PlainBackend):
            batch = None if x.ndim == 1 else x.shape[0]
            needed = self._tensor_levels(batch, x.layout.slots, shape)
            if needed > level:
                raise LevelError(f"forward_tensor on this input needs {needed} levels, the input has {level} (depth() "
                                 f"= {self.depth(shape)} counts the packed path; a batch of {batch} rows needs more): "
                                 f"encrypt under model.tensor_parameters(batch={batch})")
        kept, stages = [], self.stages(shape)
        for done, stage in enumerate(stages, 1):
            if isinstance(stage, ForkStage):
                kept.append(x)
            elif isinstance(stage, JoinStage):
                x = x + (kept.pop() @ stage.matrix.T + stage.bias)
            elif isinstance(stage, AffineStage):
                x = x @ stage.matrix.T + stage.bias
            else:
                result = stage.poly.evaluate(x)
                x = result if isinstance(result, CipherTensor) else x * 0.0 + result
            if report is not None:
                report(done, len(stages), type(stage).__name__)
        return x

    def tensor_rotations(self, batch=None, params=None, input_shape=None) -> tuple[int, ...]:
        """The rotation steps ``forward_tensor`` needs on a (batch, n) input (a (n,) input if batch is None),
        found by a dry run on a recording PlainBackend: pass them to ``CKKSContext.keygen(rotations=...)``."""
        shape = self._resolve(input_shape)
        n = math.prod(shape)
        params = as_parameters(params) if params is not None else self.tensor_parameters(batch, shape)
        recorder = RotationRecorder(params.slots)
        dummy = np.zeros((n,) if batch is None else (int(batch), n))
        self.forward_tensor(tensor_encrypt(recorder, dummy), shape)
        return tuple(sorted(recorder.steps))

    def forward_layers(self, x):
        """Layer by layer, without folding (equal to ``forward`` up to float rounding)."""
        x = np.asarray(x, dtype=np.float64)
        shape = self._resolve(self.sample_shape(x))
        flat, single = self._flat_batch(x, shape)
        y = flat.reshape(-1, *shape)
        for layer in self._layers:
            y = layer.forward(y)
        return y[0] if single else y

    def predict(self, x, input_shape=None):
        """Class index: argmax of the last axis of ``forward``."""
        return np.argmax(self.forward(x, input_shape), axis=-1)

    def sample_shape(self, x) -> tuple[int, ...]:
        """The shape of one sample in x (one sample or a batch): the model's input shape if it knows it,
        else read from x when the first layer fixes the rank (images (C, H, W) for Conv2d / AvgPool2d)."""
        if self._input_shape is not None:
            return self._input_shape
        x = np.asarray(x)
        if self._layers[0].kind in ("conv2d", "avgpool2d") and x.ndim in (3, 4):
            return tuple(x.shape[-3:])
        raise ShapeError(f"input of shape {x.shape}: the model does not know its input shape, pass input_shape=")

    # -- persistence ---------------------------------------------------------------------------------------
    def save(self, path):
        """Write an ``.npz`` (no pickles): the architecture as JSON plus one array per weight."""
        foreign = _foreign_kinds(self._layers)
        if foreign:
            raise ParameterError(f"Sequential.save: layer kind {foreign[0]!r} (from a model description) has no "
                                 f"hezk-model entry; write the description with hezk.model.save_npz instead")
        spec = {"format": _FORMAT, "version": _VERSION, "input_shape": self._input_shape,
                "layers": [{"kind": layer.kind, "config": layer.config()} for layer in self._layers]}
        arrays = {f"layer{i}.{name}": value for i, layer in enumerate(self._layers) for name, value in layer.arrays().items()}
        with open(path, "wb") as handle:
            np.savez(handle, __model__=np.array(json.dumps(spec)), **arrays)

    @classmethod
    def load(cls, path, input_shape=None, calibration=None, degree=None, sign_degrees=SIGN_DEGREES):
        """Read a model file: ONNX, or an ``.npz`` written by ``save`` (read natively, its polynomials
        exact), by ``hezk.model.save_npz``, or of weights that name their activation (``hezk.model.npz``).
        Every file but ``save``'s goes through the shared description (``hezk.model``) and ``from_graph``;
        malformed, truncated, foreign or unsupported files raise ``ParameterError`` naming the problem.
        ``calibration``: representative inputs (samples, *input_shape); each fitted activation is fitted on
        the range its input takes on them (``calibrate``), and ``calibration_report`` holds the (mean, max)
        error of the result against the float model there. ``degree``: of every fitted activation (default:
        the file's ``degree`` entry, else ``DEFAULT_DEGREES``). ``sign_degrees``: a MaxPool's composite sign
        (None: a fitted ReLU polynomial per pairwise max, ``from_graph``)."""
        if degree is not None and (isinstance(degree, bool) or not isinstance(degree, (int, np.integer))
                                   or not 1 <= degree <= MAX_DEGREE):
            raise ParameterError(f"degree={degree!r} must be an integer in [1, {MAX_DEGREE}]")
        try:
            onnx_file = hezk.model.is_onnx(path)
        except OSError:
            onnx_file = False  # read_archive names the problem
        arrays = None if onnx_file else read_archive(path)
        if arrays is None or "__model__" not in arrays:
            try:
                graph = (hezk.model.read_onnx(path, input_shape) if onnx_file
                         else hezk.model.read_npz(path, input_shape, arrays=arrays))
            except hezk.model.MissingInputShape as error:
                raise ShapeError(str(error)) from None
            except hezk.model.ModelFileError as error:
                raise ParameterError(str(error)) from None
            settings = {} if arrays is None else arrays
            interval = tuple(np.asarray(settings.get("interval", (-4.0, 4.0)), dtype=float))
            if degree is None and "degree" in settings:
                degree = int(settings["degree"])
            model = from_graph(graph, degree=degree, interval=interval, calibration=calibration,
                               sign_degrees=sign_degrees)
            if calibration is not None:
                model.calibration_report = calibration_error(model, graph, calibration)
            return model
        if calibration is not None or degree is not None:
            raise ParameterError(f"model file {path!s} was written by Sequential.save with its polynomials "
                                 f"fitted: calibration applies to ONNX and hezk.model files (so does degree=)")
        try:
            spec = json.loads(str(arrays.pop("__model__")))
        except ValueError:
            spec = None
        if not isinstance(spec, dict) or spec.get("format") != _FORMAT or spec.get("version") != _VERSION \
                or not isinstance(spec.get("layers", []), list):
            raise ParameterError(f"model file {path!s}: format/version must be {_FORMAT}/{_VERSION}")
        layers = []
        for i, entry in enumerate(spec.get("layers", [])):
            prefix = f"layer{i}."
            own = {key[len(prefix):]: value for key, value in arrays.items() if key.startswith(prefix)}
            try:
                layers.append(layer_from_config(entry["kind"], dict(entry.get("config", {})), own))
            except (TypeError, KeyError) as error:
                raise ParameterError(f"model file {path!s}: layer {i} is malformed ({error})") from None
        return cls(layers, spec.get("input_shape"))

    def plan(self, input_shape=None, params=None, key_budget: int = DEFAULT_KEY_BUDGET, *,
             bootstrap=None, progress=None) -> "ModelPlan":
        """Depth, rotations, keys, packing and a time estimate, before any key exists.

        ``params``: CKKSParameters, a preset name ("N14", "TOY", ...) or a literal dict; None chooses the
        smallest secure parameters for the model's depth. ``key_budget``: bytes the rotation keys may take
        (default sized for a 24 GB machine); a plan above it raises ParameterError. Memoised on the model (per
        identity, shape, parameters and budget): a server planning with the parameters a client's plan chose
        gets that plan back without planning again.

        ``bootstrap``: when the model is deeper than ``params``' levels, bootstraps are placed (the fewest,
        ``tensor_ops.bootstrap_placement``; ``plan.bootstraps``) if the parameters can bootstrap: None tries
        the default full-slot ``BootstrapConfig`` and otherwise refuses as False does (ParameterError naming
        the depth and the levels); True or a full-slot ``BootstrapConfig`` requires it. Without ``params``, a
        model deeper than the deepest secure preset, or ``bootstrap`` True or a config, takes the bootstrappable
        preset (``model_plan.auto_parameters``).

        ``progress``: True draws a bar on stderr over the lowerings tried (a memoised plan: one step at once),
        a callable gets ``(done, total, label)``; the plan is the same either way."""
        report = as_progress(progress, "planning")
        shape = self._resolve(input_shape)
        chosen = None if params is None else as_parameters(params).fingerprint
        if bootstrap not in (None, False):
            bootstrap = as_config(bootstrap)
        memo = self.__dict__.setdefault("_plans", {})
        key = (self.identity(), shape, chosen, key_budget, bootstrap)
        if key not in memo:
            plan = _plan_model(self, shape, params, key_budget, bootstrap, report)
            client = "; ".join(p.text() for p in getattr(self, "postprocess", ()) if p.steps)
            plan = replace(plan, client=client) if client else plan
            plan = replace(plan, finish=self.finish) if self.finish else plan
            postprocess = tuple(getattr(self, "postprocess", ()))
            plan = replace(plan, postprocess=postprocess) if postprocess else plan
            memo[key] = plan
            # a plan without bootstraps fits its levels: the same whatever ``bootstrap`` said
            for option in {bootstrap, plan.bootstrap} if plan.bootstraps else {bootstrap, None, False}:
                memo.setdefault((key[0], shape, chosen, key_budget, option), plan)
                memo.setdefault((key[0], shape, plan.params.fingerprint, key_budget, option), plan)
        elif report is not None:
            report(1, 1, "memoised")
        return memo[key]

    def identity(self) -> bytes:
        """The model's sha256 identity: the digest of the description it was read from (``hezk.model``), else
        of its layers (kinds, settings, weights) and input shape. Plans, requests and replies carry it."""
        if self.digest is not None:
            return self.digest
        hasher = hashlib.sha256(json.dumps({"input_shape": self._input_shape, "layers": [
            {"kind": layer.kind, "config": layer.config()} for layer in self._layers]}, sort_keys=True).encode())
        for i, layer in enumerate(self._layers):
            for name, value in sorted(layer.arrays().items()):
                array = np.ascontiguousarray(value, dtype="<f8")
                hasher.update(f"layer{i}.{name}:{array.shape}".encode())
                hasher.update(array.tobytes())
        return hasher.digest()

    def choose_relus(self, input_shape=None, params=None, key_budget: int = DEFAULT_KEY_BUDGET, *, bootstrap=None,
                     relu: str = "auto", tolerance: float = RELU_TOLERANCE) -> "Sequential":
        """The model with each fitted ReLU (a ``Poly``/calibrated relu polynomial on its interval [low, high]) kept
        or replaced by the composite sign relu = (x + x sign x) / 2 (``activations.composite_relu``, Lee et al.
        2021: 10 levels against the fit's 3, an error of 2^-9 of max(|low|, |high|)), chosen per activation.

        ``relu``: "fit" keeps every fit; "composite" replaces every one (the plan may then need more levels or
        refuse); "auto" (default) replaces those whose fit errs by more than ``tolerance`` of the interval's
        scale (``activations.relu_choice``) where the levels allow: the model's plan under ``params``,
        ``key_budget`` and ``bootstrap`` is made with the fits, then with the composites at that plan's
        parameters, no bootstrap added to a plan that had none (a bootstrapping plan places more); where all
        of them do not fit, one at a time, the largest error first (at most 8 plans). Returns a new model (the
        same identity, its own activation fit digest: plan and serve that one); ``relu_choices`` holds each
        ReLU's ``ReluChoice`` (both options' errors), which its plans state (``ModelPlan.activation_fits``)."""
        if relu not in RELU_CHOICES:
            raise ParameterError(f"relu={relu!r} must be one of {RELU_CHOICES}")
        shape = self._resolve(input_shape)
        candidates = _fitted_relus(self._layers)
        options = {layer: relu_choice(layer.interval, tolerance, fit=layer.poly) for layer in candidates}
        if relu == "fit":
            wanted, why = [], "relu='fit'"
        elif relu == "composite":
            wanted, why = list(candidates), "relu='composite'"
        else:
            wanted = sorted((layer for layer in candidates if options[layer].chose == "composite"),
                            key=lambda layer: -options[layer].fit_error / options[layer].scale)
            why = ""
        chosen = set(wanted)
        if relu == "auto" and wanted:
            base = self.plan(shape, params, key_budget, bootstrap=bootstrap)
            boot = base.bootstrap if base.bootstraps else False

            def fits(subset) -> bool:
                try:
                    self._with_relus(subset, options, "").plan(shape, base.params, key_budget, bootstrap=boot)
                except (ParameterError, ShapeError, LevelError):
                    return False
                return True

            if not fits(chosen):
                chosen = set()
                for layer in wanted[:8] if len(wanted) > 1 else ():
                    if fits(chosen | {layer}):
                        chosen.add(layer)
            levels = ("no room for its levels between the plan's bootstraps" if base.bootstraps else
                      f"its levels exceed the {base.params.max_level} of the plan's parameters (no bootstrap added)")
            for layer in wanted:
                if layer not in chosen:
                    options[layer] = replace(options[layer], chose="fit", why=levels)
        return self._with_relus(chosen, options, why)

    def _with_relus(self, composites, options, why) -> "Sequential":
        """A copy whose ReLUs in ``composites`` are ``composite_relu``s, every candidate's ``ReluChoice`` from
        ``options`` (``why``: the reason, when the caller forced it) in ``relu_choices``."""
        swapped = {layer: Activation(relu_options(layer.interval)[1]) for layer in composites}
        model = Sequential(_swap_layers(self._layers, swapped), self._input_shape)
        for name in ("digest", "input_range", "finish", "postprocess"):
            if name in vars(self):
                setattr(model, name, getattr(self, name))
        if self.calibration_errors is not None:
            model.calibration_errors = {layer: error for layer, error in self.calibration_errors.items()
                                        if layer not in swapped}
        model.relu_choices = {swapped.get(layer, layer): replace(choice, chose="composite" if layer in swapped
                                                                 else "fit", why=why or choice.why)
                              for layer, choice in options.items()}
        return model

    def activation_fit(self) -> str:
        """Hex sha256 of the polynomial activations (name, coefficients, interval; in layer order, residual
        blocks included): one file loaded with another --calibration or --degree computes another function
        under the same ``identity``. Plans, requests and replies carry it; a server refuses a request whose
        activations were fitted otherwise."""
        def polys(layers):
            for layer in layers:
                if isinstance(layer, Activation):
                    yield [layer.poly.name, list(layer.poly.coefficients), layer.poly.center, layer.poly.radius]
                elif isinstance(layer, Residual):
                    yield from polys(layer.layers)
                    yield from polys(layer.shortcut)
        return hashlib.sha256(json.dumps(list(polys(self._layers))).encode()).hexdigest()

    def __repr__(self):
        inner = ", ".join(layer.kind for layer in self._layers)
        return f"Sequential([{inner}], input_shape={self._input_shape})"


RELU_CHOICES = ("auto", "fit", "composite")


def _fitted_relus(layers) -> list:
    """The ``Activation`` layers (residual branches included) whose polynomial is a fitted relu."""
    found = []
    for layer in layers:
        if isinstance(layer, Activation) and isinstance(layer.poly, PolyActivation) and layer.poly.name == "relu":
            found.append(layer)
        elif isinstance(layer, Residual):
            found += _fitted_relus(layer.layers)
    return found


def _swap_layers(layers, swapped) -> tuple:
    """``layers`` with each layer in ``swapped`` replaced by its value (residual branches rebuilt around them)."""
    out = []
    for layer in layers:
        if isinstance(layer, Residual) and _fitted_relus(layer.layers):
            layer = replace(layer, layers=_swap_layers(layer.layers, swapped))
        out.append(swapped.get(layer, layer))
    return tuple(out)


class RotationRecorder(PlainBackend):
    """A PlainBackend that notes every rotation step a plan performs."""

    def __init__(self, slots):
        super().__init__(slots)
        self.steps = set()

    def rotate(self, x, k):
        self.steps.add(int(k))
        return super().rotate(x, k)

    def rotate_many(self, x, ks):
        self.steps.update(int(k) for k in ks)
        return super().rotate_many(x, ks)


class _Leveled(np.ndarray):
    """A slot vector of the ``LevelRecorder`` that carries its ciphertext's level."""

    level = None


class LevelRecorder(PlainBackend):
    """A PlainBackend whose slot vectors carry a level: encrypted at a high level, one level less per
    rescale, the lower of the operands' levels through additions and products, as a CKKS evaluator would;
    ``consumed`` is how far the lowest fell."""

    TOP = 1 << 20

    def __init__(self, slots):
        super().__init__(slots)
        self.lowest = self.TOP

    @property
    def consumed(self) -> int:
        return self.TOP - self.lowest

    def _at(self, value, *sources):
        levels = [x.level for x in sources if getattr(x, "level", None) is not None]
        if not levels:
            return value
        out = np.asarray(value).view(_Leveled)
        out.level = min(levels)
        return out

    def encrypt(self, vector):
        out = super().encrypt(vector).view(_Leveled)
        out.level = self.TOP
        return out

    def rescale(self, x):
        if getattr(x, "level", None) is None:
            return x
        out = np.array(x).view(_Leveled)
        out.level = x.level - 1
        self.lowest = min(self.lowest, out.level)
        return out

    def rotate(self, x, k):
        return self._at(super().rotate(x, k), x)

    def rotate_many(self, x, ks):
        return {k: self._at(v, x) for k, v in super().rotate_many(x, ks).items()}

    def add(self, a, b):
        return self._at(super().add(a, b), a, b)

    def sub(self, a, b):
        return self._at(super().sub(a, b), a, b)

    def negate(self, a):
        return self._at(super().negate(a), a)

    def multiply(self, a, b):
        return self._at(super().multiply(a, b), a, b)

    def align_level(self, x, other):
        """``x`` at the lower of its level and ``other``'s (as ``CKKSBackend.align_level``)."""
        return self._at(np.array(x), x, other)


# what numpy's .npz reader raises on damaged bytes: zip framing, compression, the .npy headers inside


def read_archive(path) -> dict:
    """Every array of the ``.npz`` at ``path`` (never unpickling); a file that is not one (an ``.npy``, text,
    a truncated or corrupted archive) raises ``ParameterError`` saying what it is."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(64)
    except OSError as error:
        raise ParameterError(f"model file {path!s}: cannot be read ({error.strerror or error})") from None
    if not head.startswith(b"PK\x03\x04"):
        if head.startswith(b"\x93NUMPY"):
            what = "a single .npy array"
        elif not head:
            what = "empty"
        else:
            try:
                head.decode("utf-8")
                what = "a text file"
            except UnicodeDecodeError:
                what = f"unknown bytes (starting {head[:8]!r})"
        raise ParameterError(f"model file {path!s} is {what}, not an .npz model archive "
                             f"(write one with Sequential.save or numpy.savez)")
    try:
        return hezk.model.read_archive(path)
    except hezk.model.ModelFileError as error:
        raise ParameterError(str(error)) from None


@dataclass(frozen=True, eq=False)
class GraphNode(Layer):
    """An affine node of a ``hezk.model.Graph`` that has no layer of its own here (a grouped or dilated
    convolution, a padded pool, a per-position bias, an elementwise affine, a reshape or transpose): its
    ``forward`` is the description's, and ``affine`` probes it into the dense map the stages fold."""

    node: object
    input_shape: tuple
    kind = "einsum"

    def output_shape(self, input_shape):
        if tuple(input_shape) != tuple(self.input_shape):
            raise ShapeError(f"{self.node.where()}: input shape {tuple(input_shape)} must be {self.input_shape}")
        return tuple(self.node.output_shape((tuple(input_shape),)))

    def forward(self, x):
        return self.node.forward(_batched(x, self.input_shape, self.kind))

    def sparse(self, input_shape):
        """(M, b) built from the node's constants (``packing.node_sparse``: a grouped or strided convolution's
        nonzeros from its kernel), probed only for a node it cannot build."""
        self.output_shape(input_shape)
        memo = self.__dict__.setdefault(SPARSE_MEMO, {})  # the planner packs each layer once per choice
        if tuple(input_shape) not in memo:
            direct = node_sparse(self.node, tuple(input_shape))
            memo[tuple(input_shape)] = direct if direct is not None else super().sparse(input_shape)
        matrix, bias = memo[tuple(input_shape)]
        return matrix, np.array(bias)

    def einsum_text(self, shape, out_shape):
        node = self.node
        if node.kind == "contraction":
            view = "" if node.patches is None else f" over the patches {node.patches}"
            return f"{node.op}: einsum {node.equation!r}{view} (plaintext weights)"
        return f"{node.op}: {node.kind} (a linear map, folded into the neighbouring affine stage)"


def _dense(node, shape):
    """The Linear layer of a dense contraction on (K,) samples, or None."""
    if node.patches is not None or len(shape) != 1 or node.weight.ndim != 2:
        return None
    bias = None if node.bias is None else np.broadcast_to(node.bias, node.out_shape)
    if node.equation == "bk,nk->bn":
        return Linear(node.weight, bias)
    if node.equation == "bk,kn->bn":
        return Linear(node.weight.T, bias)
    return None


def _native(node, shape):
    """The layer of tensor_ops that computes ``node`` exactly, or None (then a ``GraphNode``)."""
    if node.kind == "contraction":
        patches = node.patches
        if patches is None:
            return _dense(node, shape)
        square = patches.stride[0] == patches.stride[1] and len(set(patches.pads)) == 1 \
            and patches.dilation == (1, 1)
        if node.equation == "bgcuvij,gocuv->bgoij" and square and patches.groups == 1 \
                and (node.bias is None or node.bias.shape in ((node.out_shape[0], 1, 1), (1, 1, 1), ())):
            bias = None if node.bias is None else np.broadcast_to(node.bias, (node.out_shape[0], 1, 1)).reshape(-1)
            return Conv2d(node.weight[0], bias, stride=patches.stride[0], padding=patches.pads[0])
        if node.equation == "bgcuvij,uv->bgcij" and square and patches.pads == (0,) * 4 \
                and patches.kernel[0] == patches.kernel[1] and node.bias is None:
            return AvgPool2d(patches.kernel[0], patches.stride[0])
        return None
    if node.kind == "reshape" and node.shape == (math.prod(shape),) and len(shape) == 3:
        return Flatten()
    if node.kind == "reshape" and node.shape == tuple(shape):
        return False  # the identity: no layer
    return None


DEFAULT_DEGREES = {"relu": 7, "gelu": 7, "silu": 7, "sigmoid": 4, "tanh": 4, "clip": 7, "softplus": 7, "softsign": 7,
                   "hardswish": 7, "mish": 7, "elu": 7, "selu": 7}
"""Degree of each fitted activation when none is asked for: relu, gelu and silu at 7 take the 3 levels that
degree 4 takes (ceil(log2(degree + 1))) with a better fit (digits relu MLP: argmax agreement 77% -> 99% on
[-4, 4]); sigmoid and tanh at 4 are odd cubics on a symmetric interval (2 levels)."""


def _activation_layer(node, degree, interval, samples=None) -> "Activation":
    """square exactly; tanh(x) = 2 sigmoid(2 x) - 1 from the sigmoid fit on twice the interval (the same t);
    relu, sigmoid, gelu, silu fitted by ``Poly`` (minimax on ``interval``, the calibrated one where there is
    calibration data: the largest error, which the plan states, is the smallest there); ``degree`` None takes
    ``DEFAULT_DEGREES``; ``samples`` (the values the input takes on calibration data) are not used by the fit."""
    if node.function == "square":
        return Square()
    if degree is None:
        degree = DEFAULT_DEGREES.get(node.function, 4)
    if node.function == "tanh":
        fit = fit_activation("sigmoid", degree, tuple(2.0 * np.asarray(interval, dtype=float)))
        coefficients = 2.0 * np.array(fit.coefficients)
        coefficients[0] -= 1.0
        return Activation(PolyActivation("tanh", tuple(coefficients), fit.center / 2.0, fit.radius / 2.0))
    if node.function not in TARGETS and node.function != "clip":
        raise ParameterError(f"activation {node.function} ({node.where()}) has no polynomial form in the "
                             f"encrypted path yet")
    return Activation(fit_activation(node.function, degree, interval, bounds=node.bounds))


class ActivationRangeWarning(HEWarning):
    """An activation's input left the interval its polynomial was fitted on: the encrypted result (and the
    plain reference) may be far from the float model there."""


def _warn_outside(poly, t):
    """Warn if the normalised input t of ``poly`` leaves [-1, 1] (its fitted interval)."""
    worst = float(np.max(np.abs(t)))
    if worst > 1.0 + 1e-9:
        low, high = poly.interval
        reach = (poly.center - worst * poly.radius, poly.center + worst * poly.radius)
        warnings.warn(ActivationRangeWarning(
            f"activation {poly.name}: inputs reach [{reach[0]:.4g}, {reach[1]:.4g}], outside the fitted interval "
            f"[{low:.4g}, {high:.4g}]; calibrate on representative inputs (Sequential.load(..., calibration=x), "
            f"--calibration x.npy)"), stacklevel=4)


def calibrate(graph, x, margin: float = 0.05) -> dict:
    """{activation node name: (low, high)}: the range of each activation's input when the float model runs on
    the calibration inputs x, widened by ``margin`` of its width on each side (as EZKL's calibrate-settings
    and Concrete ML's compile(X) take ranges from representative data)."""
    return _ranges(activation_inputs(graph, x), margin)


def _ranges(seen, margin: float = 0.05) -> dict:
    ranges = {}
    for name, values in seen.items():
        low, high = float(values.min()), float(values.max())
        pad = margin * max(high - low, 1e-6)
        ranges[name] = (low - pad, high + pad)
    return ranges


def activation_inputs(graph, x) -> dict:
    """{activation node name: the values its input takes when the float model runs on the inputs x}."""
    x = np.asarray(x, dtype=np.float64)
    x = x[None] if x.shape == graph.input_shape else x
    if x.shape[1:] != graph.input_shape or not x.shape[0] or not np.all(np.isfinite(x)):
        raise ShapeError(f"calibration inputs of shape {x.shape} must be finite, (samples, *{graph.input_shape})")
    values, seen = {graph.input: x}, {}
    for node in graph.nodes:
        inputs = [values[name] for name in node.inputs]
        if node.kind in ("activation", "maxpool"):
            seen[node.name] = np.asarray(inputs[0], dtype=np.float64)
        values[node.output] = node.forward(*inputs)
    return seen


def calibration_error(model, graph, x) -> tuple[float, float]:
    """(mean, max) |model(x) - graph(x)|: the polynomial model's plain reference against the float model on x."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ActivationRangeWarning)
        error = np.abs(model.forward(np.asarray(x, dtype=np.float64)) - graph.forward(x))
    return float(error.mean()), float(error.max())


def _residual_of(node, a, b):
    """The layers after the shared prefix of the chains ``a`` and ``b`` (tuples of layers from the model
    input) joined by the ``Add`` ``node``: prefix + [Residual(branch, shortcut)], the shortcut the affine one."""
    common = 0
    while common < min(len(a), len(b)) and a[common] is b[common]:
        common += 1
    first, second = a[common:], b[common:]
    if not all(layer.affine_layer for layer in second):
        first, second = second, first
    if not all(layer.affine_layer for layer in second):
        raise ParameterError(f"operator Add (node {node.name!r}) joins two branches that both have activations: "
                             f"the encrypted path adds a branch and an affine shortcut (y = s(x) + f(x))")
    if not first:
        first, second = second, first
    if not first:
        raise ParameterError(f"operator Add (node {node.name!r}) adds a tensor to itself: write it as a scale")
    return a[:common] + (Residual(first, second),)


def _contraction(name, equation, weight, out_shape, patches=None):
    return hezk.model.Contraction(name, "MaxPool", ("x",), "y", equation, weight, None, patches, out_shape)


def _maxpool_relu(sign_degrees, reach):
    """The relu of a pairwise max on [-reach, reach]: a composite sign of ``sign_degrees`` (Lee et al. 2021),
    or, given None, a ReLU polynomial of DEFAULT_DEGREES["relu"] fitted there (3 levels: it fits between
    bootstraps where the composite's 10 do not; its error, stated by the plan, is larger)."""
    if sign_degrees is None:
        return Activation(fit_activation("relu", DEFAULT_DEGREES["relu"], (-reach, reach)))
    return Activation(CompositeRelu(composite_sign(tuple(int(d) for d in sign_degrees)), reach))


def _maxpool_layers(node, shape, samples, interval, sign_degrees) -> tuple:
    """The layers of a MaxPool on (C, H, W): the windows gathered as candidates (C, n, Ho, Wo) (a public
    selection), then a tree of pairwise maxima, each level a residual block max(a, b) = b + relu(a - b):
    the affine shortcut picks b, the branch takes the differences a - b (a public linear map), relu by
    ``CompositeRelu`` (a composite minimax sign, Lee et al. 2021) on twice the largest |a - b| the
    calibration ``samples`` (the pool's input on them) reach (a composite sign diverges fast outside its
    interval: the margin keeps unseen inputs inside; without samples: twice the largest |end| of
    ``interval``), and a 0/1 mask where a window's pair holds padding (padding never wins). The error of one
    level is at most radius * max(gap, 2^-9) (``tensor_ops.activations.SIGN_DEGREES``)."""
    patches = node.patches
    channels = shape[0]
    _, _, kh, kw, ho, wo = patches.view_shape(shape)
    n = kh * kw
    valid = patches.apply(np.ones((1, 1, *shape[1:])))[0, 0, 0].reshape(n, ho, wo) > 0.5
    gather = np.zeros((n, kh, kw))
    gather[np.arange(n), np.arange(n) // kw, np.arange(n) % kw] = 1.0
    step = _contraction(f"{node.name}/windows", "bgcuvij,nuv->bgcnij", gather, (channels, n, ho, wo), patches)
    layers = [GraphNode(step, tuple(shape))]
    values = None if samples is None else step.forward(samples)
    level = 0
    while valid.shape[0] > 1:
        m = valid.shape[0]
        half = (m + 1) // 2
        pick, diff = np.zeros((half, m, ho, wo)), np.zeros((half, m, ho, wo))
        keep = np.zeros((half, ho, wo))
        for r in range(half):
            p, q = 2 * r, 2 * r + 1
            both = valid[p] & valid[q] if q < m else np.zeros((ho, wo), bool)
            only_p = valid[p] & ~both
            pick[r, p] = only_p
            if q < m:
                pick[r, q] = valid[q]
                diff[r, p], diff[r, q] = both, -1.0 * both
            keep[r] = both
        in_shape = (channels, m, ho, wo)
        d_node = _contraction(f"{node.name}/difference{level}", "bcmij,nmij->bcnij", diff, (channels, half, ho, wo))
        b_node = _contraction(f"{node.name}/pick{level}", "bcmij,nmij->bcnij", pick, (channels, half, ho, wo))
        if values is not None:
            reach = float(np.max(np.abs(d_node.forward(values)))) * 2.0
        else:
            reach = 4.0 * float(np.max(np.abs(np.asarray(interval, dtype=float))))
        branch = [GraphNode(d_node, in_shape), _maxpool_relu(sign_degrees, max(reach, 1e-6))]
        if not keep.all():
            mask = hezk.model.Affine(f"{node.name}/mask{level}", "MaxPool", ("x",), "y", keep[None], None)
            branch.append(GraphNode(mask, (channels, half, ho, wo)))
        layers.append(Residual(tuple(branch), (GraphNode(b_node, in_shape),)))
        if values is not None:
            values = layers[-1].forward(values)
        valid = np.array([valid[2 * r] | (valid[2 * r + 1] if 2 * r + 1 < m else False) for r in range(half)])
        level += 1
    out = hezk.model.Reshape(f"{node.name}/out", "MaxPool", ("x",), "y", (channels, ho, wo))
    layers.append(GraphNode(out, (channels, 1, ho, wo)))
    return tuple(layers)


def from_graph(graph, *, degree: int | None = None, interval=(-4.0, 4.0), calibration=None,
               sign_degrees=SIGN_DEGREES) -> Sequential:
    """The ``Sequential`` that evaluates a ``hezk.model.Graph``: contractions (Linear, Conv2d, AvgPool2d
    where they fit, else ``GraphNode``), affine maps, reshapes and activations (square exactly; relu,
    sigmoid, tanh, gelu, silu as polynomials of ``degree`` (None: ``DEFAULT_DEGREES``) fitted on
    ``interval``, or, given ``calibration`` inputs, each on the range its input takes on them (``calibrate``)
    by minimax on that range, so the worst case the plan states holds on all of it), chained; an ``Add`` of two tensors
    that share a prefix of the chain is a ``Residual`` block (the branch with activations f, the other an
    affine shortcut s, or the identity when it is the fork itself). Two branches that both have activations
    raise ParameterError naming the node. A MaxPool is a tree of pairwise maxima (``_maxpool_layers``), its
    relu a composite sign of ``sign_degrees`` (10 levels for each halving of the window at the default).
    The graph's ``postprocess`` (softmax, argmax, labels, ...) is the client's, after decryption: kept as
    ``model.postprocess`` and printed by the plan, never evaluated here."""
    seen = {} if calibration is None else activation_inputs(graph, calibration)
    ranges = _ranges(seen)
    last = graph.nodes[-1] if graph.nodes else None
    finish = last if last is not None and last.kind == "activation" and last.output == graph.output and \
        last.function in FINISH_FUNCTIONS else None  # exact on the client, not fitted
    calibration_errors = {}  # activation layer -> max |p - f| on the values its input took on the calibration data
    chains = {graph.input: ()}  # tensor -> the layers that compute it from the model input
    for node in graph.nodes:
        missing = [name for name in node.inputs if name not in chains]
        if missing:
            raise ParameterError(f"operator {node.op} (node {node.name!r}) reads {missing}, which the encrypted "
                                 f"path cannot compute from the input")
        if node.kind == "add":
            if len(node.inputs) != 2:
                raise ParameterError(f"operator Add (node {node.name!r}) must add two tensors")
            chains[node.output] = _residual_of(node, chains[node.inputs[0]], chains[node.inputs[1]])
            continue
        if len(node.inputs) != 1:
            raise ParameterError(f"operator {node.op} (node {node.name!r}) is not supported by the encrypted "
                                 f"path yet: it reads {node.inputs}")
        chain, shape = chains[node.inputs[0]], graph.shape_of(node.inputs[0])
        if node is finish:
            pass
        elif node.kind == "activation":
            chain += (_activation_layer(node, degree, ranges.get(node.name, interval)),)
            if node.name in seen:
                calibration_errors[chain[-1]] = chain[-1].poly.error_on(seen[node.name])
        elif node.kind == "maxpool":
            chain += _maxpool_layers(node, shape, seen.get(node.name), interval, sign_degrees)
        else:
            layer = _native(node, shape)
            if layer is None:
                layer = GraphNode(node, tuple(shape))
            if layer is not False:
                chain += (layer,)
        chains[node.output] = chain
    layers = list(chains[graph.output])
    if not layers:
        shape = graph.input_shape
        layers.append(GraphNode(hezk.model.Reshape("identity", "Identity", (graph.input,), "y", shape), shape))
    model = Sequential(layers, graph.input_shape)
    model.digest = graph.digest()
    model.postprocess = graph.postprocess
    model.finish = finish.function if finish is not None else ""
    if calibration is not None:
        model.input_range = input_range(calibration)
        model.calibration_errors = calibration_errors
    return model


def input_range(x, margin: float = 0.05) -> tuple[float, float]:
    """(low, high): the range of every value of the calibration inputs x, widened by ``margin`` of its width on
    each side (as the activations' ranges, ``calibrate``): the inputs a calibrated plan accepts."""
    (low, high), = _ranges({"x": np.asarray(x, dtype=np.float64)}, margin).values()
    return low, high


def _plan_ranges(model, input_shape, plan) -> dict:
    """The plan's checked ranges (``ModelPlan.input_range`` / ``output_range`` / ``activation_fits``): the
    calibrated input range, if any; the output bound of every sample whose activation inputs stay in their
    intervals (``value_bounds`` over the compiled stages) widened by ``OUTPUT_MARGIN`` of the widest output's
    range (at least 1); each polynomial activation's interval and its errors on it and on the calibration data."""
    stages, stage_of_layer = model.compile(input_shape)
    errors = model.calibration_errors or {}
    choices = getattr(model, "relu_choices", None) or {}
    layers = {stage_of_layer[i]: layer for i, layer in enumerate(model.plan_layers) if isinstance(layer, Activation)}
    compiled = [i for i, stage in enumerate(stages) if isinstance(stage, ActivationStage)]
    planned = [i for i, stage in enumerate(plan.stages) if stage.kind == "activation"]
    fits = []
    if len(compiled) == len(planned):  # the packed stages keep the activations, in order
        for index, planned_index in zip(compiled, planned):
            layer = layers.get(index)
            if layer is not None and layer.poly.name != "square" and layer.poly.has_target:
                choice = choices.get(layer)
                if choice is None and isinstance(layer.poly, PolyActivation) and layer.poly.name == "relu":
                    choice = relu_choice(layer.interval, fit=layer.poly)
                    choice = replace(choice, chose="fit", why="fitted; Sequential.choose_relus weighs the two")
                fits.append(ActivationFit(planned_index, layer.poly.name, int(layer.poly.degree),
                                          tuple(float(v) for v in layer.interval), layer.max_error(),
                                          errors.get(layer), "" if choice is None else choice.describe()))
    return {"input_range": model.input_range, "activation_fits": tuple(fits),
            **output_ranges(stages, math.prod(input_shape), model.input_range)}


def load_model(path) -> "Sequential":
    """``Sequential.load(path)``: a model saved as ``.npz``."""
    return Sequential.load(path)


def _is_identity(matrix, bias):
    return matrix.is_identity() and not np.any(bias)


def _bootstrap_for(params, depth, stages, bootstrap):
    """(BootstrapConfig, BootstrapPlan) for a model of ``depth`` deeper than ``params``' levels, or the
    refusal: ParameterError naming the depth and the levels (and why no bootstrap fits)."""
    refusal = f"the model needs depth={depth} levels but the parameters have max_level={params.max_level}"
    if bootstrap is False:
        raise ParameterError(f"{refusal} (bootstrap=False)")
    config = BootstrapConfig() if bootstrap is None else bootstrap
    try:
        if config.slots not in (None, params.slots):
            raise ParameterError(f"bootstrap slots={config.slots} must be the parameters' slots={params.slots} "
                                 f"(the packed layout fills every slot)")
        boot = cached_bootstrap_plan(params, config)
    except (LevelError, ParameterError) as error:
        hint = "" if bootstrap is not None else " and cannot bootstrap"
        raise ParameterError(f"{refusal}{hint} ({error})") from None
    deepest = max(stage.depth for stage in stages)
    if deepest > boot.levels_left:
        index = [stage.depth for stage in stages].index(deepest)
        hint = "" if bootstrap is not None else " and cannot bootstrap"
        raise StageTooDeep(f"{refusal}{hint} (stage {index}, of depth {deepest}, exceeds the {boot.levels_left} "
                           f"levels a bootstrap leaves: lower --degree (a fitted activation takes "
                           f"ceil(log2(degree + 1)) levels), keep each ReLU's fit (--relu fit: the composite sign "
                           f"takes 10) or replace a MaxPool (a max of fixed high degree) by AvgPool)")
    return config, boot


class StageTooDeep(ParameterError):
    """A model deeper than its parameters whose deepest stage does not fit the levels a bootstrap leaves."""


def _plan_for(model, input_shape, params, key_budget, choices, layers, bootstrap=None, memo=None):
    """The ModelPlan of ``model`` with the convolution lowerings ``choices`` (``tensor_ops.packing``), with
    bootstraps placed when it is deeper than the parameters' levels (``_bootstrap_for``)."""
    stages, block = packed_stages(model, input_shape, choices, ActivationStage)
    depth = sum(stage.depth for stage in stages)
    chosen = choose_parameters(depth, min_slots=block) if params is None else as_parameters(params)
    if chosen.slots < block:
        raise ShapeError(f"a sample needs block={block} slots but the parameters have slots={chosen.slots}")
    boot = _bootstrap_for(chosen, depth, stages, bootstrap) if chosen.max_level < depth else None
    key_bytes = len(chosen.digits) * 2 * (len(chosen.q_moduli) + len(chosen.p_moduli)) * chosen.n * 4
    plans, key_steps = stage_plans(stages, math.prod(input_shape), slots=chosen.slots, key_bytes=key_bytes,
                                   key_budget=key_budget, memo=memo, block=block)
    plan = ModelPlan(chosen, tuple(input_shape), tuple(model.output_shape(input_shape)), block, tuple(plans), layers,
                     model=model.identity().hex(), fit=model.activation_fit(),
                     key_budget=None if key_budget is None else int(key_budget),
                     key_steps=key_steps, patches=input_layout(model, input_shape, choices))
    if boot is not None:
        before = _place_around_blocks(plan, boot[1])
        _check_no_bootstrap_inside_blocks(plan.stages, before)
        plan = replace(plan, bootstrap=boot[0], bootstraps=before)
    return plan


def _block_groups(stages) -> list[list[int]]:
    """The stage indices in groups: each outermost residual block (its fork to its join) one group, every
    other stage its own."""
    groups, open_blocks = [], 0
    for index, stage in enumerate(stages):
        if open_blocks:
            groups[-1].append(index)
        else:
            groups.append([index])
        open_blocks += (stage.kind == "fork") - (stage.kind == "join")
    return groups


def _place_around_blocks(plan, bootstrap_plan) -> tuple[int, ...]:
    """The bootstrap positions (stage indices) of ``place_for_model_plan``, with each residual block placed as
    one stage (its main-path depth, its operations summed): a bootstrap never falls between a fork and its
    join, where the kept skip would sit below the refreshed branch. A block deeper than the levels a bootstrap
    leaves raises ParameterError."""
    groups = _block_groups(plan.stages)
    if len(groups) == len(plan.stages):
        return place_for_model_plan(plan, bootstrap_plan).before
    merged = []
    for group in groups:
        parts = [plan.stages[i] for i in group]
        if len(parts) == 1:
            merged.append(parts[0])
            continue
        kind = "affine" if any(p.kind in ("affine", "join") for p in parts) else "activation"
        merged.append(StagePlan(kind, parts[0].n_in, parts[-1].n_out, sum(p.depth for p in parts),
                                tuple(b for p in parts for b in p.baby), tuple(m for p in parts for m in p.giant),
                                sum(p.diagonals for p in parts), sum(p.ct_ct_multiplications for p in parts),
                                tuple(k for p in parts for k in p.presum)))
    try:
        placement = place_for_model_plan(replace(plan, stages=tuple(merged)), bootstrap_plan)
    except LevelError as error:
        raise ParameterError(f"a residual block is deeper than the {bootstrap_plan.levels_left} levels a bootstrap "
                             f"leaves and cannot be bootstrapped inside ({error})") from None
    return tuple(groups[g][0] for g in placement.before)


def _check_no_bootstrap_inside_blocks(stages, before):
    """ParameterError if a bootstrap falls inside a residual block (after its fork, up to its join): the kept
    skip ciphertext would then sit below the refreshed branch."""
    forks = []
    for index, stage in enumerate(stages):
        if stage.kind == "fork":
            forks.append(index)
        elif stage.kind == "join":
            fork = forks.pop()
            inside = [b for b in before if fork < b <= index]
            if inside:
                raise ParameterError(f"a bootstrap is needed before stage {inside[0]}, inside the residual block of "
                                     f"stages {fork}..{index}: bootstrapping inside residual blocks is not "
                                     f"supported yet (use parameters with more levels)")


def _plan_model(model, input_shape, params, key_budget=None, bootstrap=None, progress=None):
    """The cheapest plan (estimated server seconds per sample) over the lowerings of the convolutions
    ("rotations" / "dense" each, and "patches" for a first layer that is a convolution: it reads the model
    input; beyond 4 convolutions all-rotations or all-dense, each with the first as patches too). Without
    ``params``: ``auto_parameters`` of the model's depth and ``bootstrap``. ``progress(done, total, label)``
    after each lowering tried."""
    if params is None:
        params = auto_parameters(_model_depth(model, input_shape), bootstrap)
    _, stage_of_layer = model.compile(input_shape)
    layers = lower_layers(model.plan_layers, input_shape, stage_of_layer,
                          as_parameters(params) if params is not None else _lowering_params(model, input_shape))
    convs = [i for i, layer in enumerate(model.plan_layers) if layer.kind == "conv2d"]
    combos = (list(itertools.product(("rotations", "dense"), repeat=len(convs))) if len(convs) <= 4
              else [("rotations",) * len(convs), ("dense",) * len(convs)])
    if convs and convs[0] == 0:  # the convolution reads the model input: the client may pack its patches
        combos += sorted({("patches",) + combo[1:] for combo in combos})
    best, errors, per_choice, memo = None, [], {}, {}
    for done, combo in enumerate(combos, 1):
        choices = dict(zip(convs, combo))
        try:
            plan = _plan_for(model, input_shape, params, key_budget, choices, layers, bootstrap, memo)
        except (ParameterError, ShapeError) as error:
            errors.append(error)
            continue
        finally:
            if progress is not None:
                progress(done, len(combos), "/".join(combo) or "packed")
        cost = plan.estimated_seconds / plan.batch
        for i, lowering in choices.items():
            per_choice[(i, lowering)] = min(per_choice.get((i, lowering), math.inf), cost)
        if best is None or cost < best[0]:
            best = (cost, choices, plan)
    if best is None:
        raise errors[0]
    _, choices, plan = best
    layers = tuple(replace(layer, lowering=choices.get(i), rotations_cost=per_choice.get((i, "rotations")),
                           dense_plan_cost=per_choice.get((i, "dense")),
                           patches_plan_cost=per_choice.get((i, "patches"))) if i in choices else layer
                   for i, layer in enumerate(layers))
    return replace(plan, layers=layers, **_plan_ranges(model, input_shape, plan))


def _lowering_params(model, input_shape):
    """Parameters for pricing the einsum lowerings of the layers (the packed plan's own choice may differ)."""
    return choose_parameters(*_model_depth(model, input_shape, with_block=True))


def _model_depth(model, input_shape, with_block=False):
    """The levels the model's packed stages consume (and the slots a sample needs, ``with_block``)."""
    stages, block = packed_stages(model, input_shape, {}, ActivationStage)
    depth = sum(stage.depth for stage in stages)
    return (depth, block) if with_block else depth
