"""Encrypted inference: layers, ``Sequential`` models from numpy weights, and their plans.

Layers are numpy functions of a batch (the plaintext half). Every layer but the activations is affine,
x -> A x + b on the flattened sample, and ``affine`` returns that (A, b) by probing the layer's own
``forward`` with the basis vectors, so a convolution, a pooling or a batch norm becomes one dense matrix
and consecutive affine layers fold into a single matrix (batch norm folds into the convolution or linear
layer before it, Ioffe and Szegedy, ICML 2015). Activations are the polynomials of
``tensor_ops.activations``. Input shapes are per sample: (features,) or (channels, H, W).

``Sequential.stages()`` is that folded form; ``forward`` runs it in numpy (the reference every encrypted
result is compared with). It runs encrypted two ways:
- ``model.plan()`` -> ``ModelPlan``: the packed server path of ``tensor_ops.inference`` (many samples per
  ciphertext, one level per affine stage, Galois keys for the plan's rotations only);
- ``model(cipher_tensor)``: the same stages on a ``CipherTensor`` through the einsum planner.
"""
from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass, field

import numpy as np

from crypto.errors import ParameterError, ShapeError
from crypto.context import as_parameters
from crypto.params import CKKSParameters
from tensor_ops.activations import PolyActivation, fit_activation, square
from tensor_ops.backends import PlainBackend
from tensor_ops.lowering import LayerLowering, lower_layers
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


@dataclass(frozen=True, eq=False)
class Flatten(Layer):
    """(C, H, W) -> (C*H*W,), row-major like numpy's reshape."""

    kind = "flatten"

    def output_shape(self, input_shape):
        return (math.prod(input_shape),)

    def forward(self, x):
        x = np.asarray(x, dtype=np.float64)
        return x.reshape(x.shape[0], -1)


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
        return {"name": self.poly.name, "center": self.poly.center, "radius": self.poly.radius}

    def arrays(self):
        return {"coefficients": np.array(self.poly.coefficients)}


def Square() -> Activation:  # noqa: N802 (a layer constructor, named like the other layers)
    """x -> x^2, one level."""
    return Activation(square())


def Poly(name: str = "relu", degree: int = 4, interval=(-4.0, 4.0), method: str = "chebyshev") -> Activation:  # noqa: N802
    """A polynomial of ``degree`` fitted to relu / gelu / silu / sigmoid on ``interval``."""
    return Activation(fit_activation(name, degree, interval, method))


BatchNorm1d = BatchNorm2d = BatchNorm

LAYER_KINDS = {cls.kind: cls for cls in (Linear, Conv2d, AvgPool2d, Flatten, BatchNorm, Activation)}


def layer_from_config(kind: str, config: dict, arrays: dict) -> Layer:
    """Rebuild a layer saved by ``config()`` and ``arrays()``."""
    if kind not in LAYER_KINDS:
        raise ParameterError(f"layer kind={kind!r} is not one of {sorted(LAYER_KINDS)}")
    if kind == "activation":
        poly = PolyActivation(config.get("name", "custom"), tuple(arrays["coefficients"]),
                              float(config.get("center", 0.0)), float(config.get("radius", 1.0)))
        return Activation(poly)
    return LAYER_KINDS[kind](**arrays, **config)


# ----------------------------------------------------------------------------------------------------------
# Models: a sequence of layers compiled into alternating affine and polynomial stages.

@dataclass(frozen=True, eq=False)
class AffineStage:
    """x -> matrix @ x + bias on flattened samples; what the server evaluates as one encrypted matmul."""

    matrix: np.ndarray
    bias: np.ndarray

    def __post_init__(self):
        for name in ("matrix", "bias"):
            array = np.array(getattr(self, name), dtype=np.float64)
            array.setflags(write=False)
            object.__setattr__(self, name, array)

    @property
    def depth(self):
        return 1

    def apply(self, x):
        return x @ self.matrix.T + self.bias


@dataclass(frozen=True, eq=False)
class ActivationStage:
    """t -> p(t) elementwise, t already normalised by the affine stage before."""

    poly: PolyActivation

    @property
    def depth(self):
        return self.poly.depth

    def apply(self, x):
        result = self.poly.evaluate(x)
        return result if not isinstance(result, float) else np.full_like(x, result)


_FORMAT = "hezk-model"
_VERSION = 1


class Sequential:
    """A feed-forward model from numpy weights: ``Sequential([Linear(W1, b1), Square(), Linear(W2, b2)])``.

    ``forward`` is the plaintext reference: it runs the compiled stages (affine maps folded together,
    activation normalisation folded into them, the same polynomial schedule) that the encrypted path runs.
    """

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
        """(stages, stage_of_layer): the compiled stages and, per layer, the index of the stage that
        evaluates it (None for a layer that folds into nothing, e.g. a Flatten next to activations)."""
        shape = self._resolve(input_shape)
        stages, pending, waiting, owner = [], None, [], [None] * len(self._layers)

        def emit_pending():
            if pending is not None and not _is_identity(*pending):
                for index in waiting:
                    owner[index] = len(stages)
                stages.append(AffineStage(*pending))
            waiting.clear()

        for index, layer in enumerate(self._layers):
            if layer.affine_layer:
                matrix, bias = layer.affine(shape)
                pending = (matrix, bias) if pending is None else (matrix @ pending[0], matrix @ pending[1] + bias)
                shape = layer.output_shape(shape)
                waiting.append(index)
                continue
            poly = layer.poly
            if (poly.center, poly.radius) != (0.0, 1.0):
                n = math.prod(shape)
                matrix, bias = pending if pending is not None else (np.eye(n), np.zeros(n))
                pending = (matrix / poly.radius, (bias - poly.center) / poly.radius)
            emit_pending()
            pending = None
            owner[index] = len(stages)
            stages.append(ActivationStage(poly))
        emit_pending()
        return tuple(stages), tuple(owner)

    def depth(self, input_shape=None):
        """Multiplicative levels of the encrypted forward (one per affine stage, plus each activation's)."""
        return sum(stage.depth for stage in self.stages(input_shape))

    def _flat_batch(self, x, input_shape):
        x = np.asarray(x, dtype=np.float64)
        single = x.shape == input_shape
        if not single and x.shape[1:] != input_shape:
            raise ShapeError(f"input shape {x.shape} is neither the model's {input_shape} nor (batch, *{input_shape})")
        return x.reshape(1 if single else x.shape[0], -1), single

    def forward(self, x, input_shape=None):
        """Plaintext reference of the encrypted computation; x is one sample or a batch.

        A ``CipherTensor`` input runs the same stages through the einsum planner (``forward_tensor``)."""
        if isinstance(x, CipherTensor):
            return self.forward_tensor(x, input_shape)
        shape = self._resolve(input_shape if input_shape is not None else self.sample_shape(x))
        flat, single = self._flat_batch(x, shape)
        for stage in self.stages(shape):
            flat = stage.apply(flat)
        out = flat.reshape(flat.shape[0], *self.output_shape(shape))
        return out[0] if single else out

    __call__ = forward

    def forward_tensor(self, x: CipherTensor, input_shape=None) -> CipherTensor:
        """The stages on a CipherTensor of flattened samples, shape (batch, n) or (n,): each affine stage
        is ``x @ A.T + b`` and each activation the polynomial schedule, all lowered to einsum plans by
        ``tensor_ops`` (its packing, its rotations: see ``tensor_rotations``). The Client/Server path packs
        many samples per ciphertext with fewer levels; this one composes with other CipherTensor code."""
        shape = self._resolve(input_shape)
        n = math.prod(shape)
        if not (x.shape == (n,) or (x.ndim == 2 and x.shape[1] == n)):
            raise ShapeError(f"CipherTensor of shape {x.shape}: encrypt the flattened samples, shape (batch, {n}) "
                             f"or ({n},), for the model's input {shape}")
        for stage in self.stages(shape):
            if isinstance(stage, AffineStage):
                x = x @ stage.matrix.T + stage.bias
            else:
                result = stage.poly.evaluate(x)
                x = result if isinstance(result, CipherTensor) else x * 0.0 + result
        return x

    def tensor_rotations(self, batch=None, params=None, input_shape=None) -> tuple[int, ...]:
        """The rotation steps ``forward_tensor`` needs on a (batch, n) input (a (n,) input if batch is None),
        found by a dry run on a recording PlainBackend: pass them to ``CKKSContext.keygen(rotations=...)``."""
        shape = self._resolve(input_shape)
        n = math.prod(shape)
        params = as_parameters(params) if params is not None else choose_parameters(self.depth(shape))
        recorder = _RotationRecorder(params.slots)
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
        spec = {"format": _FORMAT, "version": _VERSION, "input_shape": self._input_shape,
                "layers": [{"kind": layer.kind, "config": layer.config()} for layer in self._layers]}
        arrays = {f"layer{i}.{name}": value for i, layer in enumerate(self._layers) for name, value in layer.arrays().items()}
        with open(path, "wb") as handle:
            np.savez(handle, __model__=np.array(json.dumps(spec)), **arrays)

    @classmethod
    def load(cls, path):
        """Read a model written by ``save`` (or an ``.npz`` of bare weights, see ``_from_weight_arrays``);
        malformed files raise ``ParameterError`` naming the problem."""
        try:
            with np.load(path, allow_pickle=False) as data:
                if not hasattr(data, "files"):
                    raise ValueError("a single array, not an .npz archive")
                arrays = {key: np.array(data[key]) for key in data.files if key != "__model__"}
                if "__model__" not in data.files:
                    return _from_weight_arrays(arrays, path)
                spec = json.loads(str(data["__model__"]))
        except (OSError, ValueError, KeyError, json.JSONDecodeError) as error:
            if isinstance(error, ParameterError):
                raise
            raise ParameterError(f"model file {path!s}: not a hezk model .npz ({error})") from None
        if not isinstance(spec, dict) or spec.get("format") != _FORMAT or spec.get("version") != _VERSION:
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

    def plan(self, input_shape=None, params=None) -> "ModelPlan":
        """Depth, rotations, keys, packing and a time estimate, before any key exists.

        ``params``: CKKSParameters, a preset name ("N14", "TOY", ...) or a literal dict; None chooses the
        smallest secure parameters for the model's depth."""
        return _plan_model(self, self._resolve(input_shape), params)

    def __repr__(self):
        inner = ", ".join(layer.kind for layer in self._layers)
        return f"Sequential([{inner}], input_shape={self._input_shape})"


class _RotationRecorder(PlainBackend):
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


_SETTINGS = ("activation", "degree", "interval", "input_shape", "stride", "padding")


def _from_weight_arrays(arrays: dict, path) -> Sequential:
    """A model from an ``.npz`` of bare weights (``W1, b1, W2, b2``, ``fc1.weight, fc1.bias``, ...): in file
    order, each 2-D array a ``Linear`` and each 4-D array a ``Conv2d`` (``stride``/``padding`` entries, default
    1/0), a 1-D array right after a weight of matching length its bias, linear weights as (out, in) or, if
    only that chains, as (in, out), ``Flatten`` between convolutions and
    linear layers, and between layers the activation named by an ``activation`` entry ("square" by default,
    or relu/gelu/silu/sigmoid fitted with ``degree`` on ``interval``). ``input_shape`` is needed for convolutions."""
    settings = {key: arrays.pop(key) for key in _SETTINGS if key in arrays}
    name = str(settings.get("activation", "square")).lower()
    weights = []
    for key, value in arrays.items():
        if value.ndim in (2, 4):
            weights.append([key, value, None])
        elif value.ndim == 1 and weights and weights[-1][2] is None and value.shape[0] in weights[-1][1].shape[:2]:
            weights[-1][2] = value
        else:
            raise ParameterError(f"model file {path!s}: array {key!r} of shape {value.shape} is neither a 2-D/4-D "
                                 f"weight nor the bias of the weight before it")
    if not weights:
        raise ParameterError(f"model file {path!s}: no weight arrays (2-D for Linear, 4-D for Conv2d) found")
    if all(weight.ndim == 2 for _, weight, _ in weights):
        weights = _oriented(weights, path)
    conv = {k: int(settings[k]) for k in ("stride", "padding") if k in settings}
    layers = []
    for i, (key, weight, bias) in enumerate(weights):
        if i:
            if name == "square":
                layers.append(Square())
            else:
                interval = tuple(np.asarray(settings.get("interval", (-4.0, 4.0)), dtype=float))
                layers.append(Poly(name, int(settings.get("degree", 4)), interval))
        if weight.ndim == 2 and layers and isinstance(_last_affine(layers), Conv2d):
            layers.append(Flatten())
        layers.append(Linear(weight, bias) if weight.ndim == 2 else Conv2d(weight, bias, **conv))
    shape = settings.get("input_shape")
    return Sequential(layers, None if shape is None else tuple(int(d) for d in np.atleast_1d(shape)))


def _oriented(weights, path):
    """Linear weights as (out, in): kept if they chain that way (PyTorch), transposed if they chain as
    (in, out) (Keras, ``x @ W``), else a ParameterError naming the shapes."""
    def chains(out_axis):
        fits = all(b is None or b.shape[0] == w.shape[out_axis] for _, w, b in weights)
        return fits and all(nxt.shape[1 - out_axis] == w.shape[out_axis]
                            for (_, w, _), (_, nxt, _) in zip(weights, weights[1:]))
    if chains(0):
        return weights
    if chains(1):
        return [[key, weight.T, bias] for key, weight, bias in weights]
    shapes = {key: weight.shape for key, weight, _ in weights}
    raise ParameterError(f"model file {path!s}: weights {shapes} chain neither as (out, in) nor as (in, out)")


def _last_affine(layers):
    return next(layer for layer in reversed(layers) if isinstance(layer, (Linear, Conv2d)))


def load_model(path) -> "Sequential":
    """``Sequential.load(path)``: a model saved as ``.npz``."""
    return Sequential.load(path)


def _is_identity(matrix, bias):
    return matrix.shape[0] == matrix.shape[1] and np.array_equal(matrix, np.eye(matrix.shape[0])) and not np.any(bias)


# ----------------------------------------------------------------------------------------------------------
# Encrypted evaluation: every affine stage as a block-diagonal matrix-vector product by the diagonal
# method with baby-step/giant-step rotations (Halevi and Shoup, "Algorithms in HElib", CRYPTO 2014;
# "Faster homomorphic linear transformations in HElib", CRYPTO 2018).
#
# Layout: sample b of a ciphertext sits in slots [b*block, b*block + n) with zeros after it, block a power
# of two >= every stage's width, so one ciphertext carries slots // block samples. On the whole slot
# vector v the stage is the block-diagonal map L = I (x) M, and L v = sum_k d_k * rot(v, k) with
# d_k[b*block + r] = M[r, r + k]: only offsets -(n_out - 1) <= k <= n_in - 1 occur and a row r >= n_out
# or a column outside [0, n_in) contributes zero, so the output is again clean in the same layout (no
# masks, no extra level) and whatever the activation leaves in the padding is never read.
# With k = m_j + i (0 <= i < g): L v = sum_j rot(sum_i rot(d_{m_j + i}, -m_j) * rot(v, i), m_j), so
# g - 1 hoisted baby rotations and one giant rotation per j replace one rotation per diagonal.

@dataclass(frozen=True)
class StagePlan:
    """Public description of one stage: an affine map's rotations, or an activation's depth."""

    kind: str
    n_in: int
    n_out: int
    depth: int
    baby: tuple[int, ...] = ()
    giant: tuple[int, ...] = ()
    diagonals: int = 0
    ct_ct_multiplications: int = 0

    @property
    def rotations(self) -> tuple[int, ...]:
        return tuple(sorted(set(self.baby) | set(self.giant)))


def _offsets(matrix):
    """The offsets k with a nonzero diagonal d_k[r] = M[r, r + k]."""
    rows, cols = np.nonzero(matrix)
    return np.unique(cols - rows)


def _split(offsets, g):
    """(baby steps, giant steps) writing every offset k as low + g*j + i with 0 <= i < g."""
    low = int(offsets[0])
    shifted = offsets.astype(np.int64) - low
    giant = tuple(int(v) for v in np.unique(low + g * (shifted // g)))
    baby = tuple(int(v) for v in np.unique(shifted % g))
    return baby, giant


def _stage_plans(stages, n_in):
    """One StagePlan per stage; the baby-step size g is shared by all affine stages and chosen to minimise
    the number of distinct rotations (Galois keys), then the number of key switches."""
    offsets = [_offsets(s.matrix) if isinstance(s, AffineStage) else None for s in stages]
    spans = [int(o[-1] - o[0]) + 1 for o in offsets if o is not None and len(o)]
    best = None
    widest = max(spans, default=1)
    # about sqrt(span) baby and giant steps each is optimal for a dense band; look a few times beyond it
    for g in range(1, min(widest, 4 * math.isqrt(widest) + 4) + 1):
        splits = [_split(o, g) if o is not None and len(o) else ((), ()) for o in offsets]
        keys = {k for baby, giant in splits for k in baby + giant} - {0}
        switches = sum(sum(1 for k in baby + giant if k) for baby, giant in splits)
        if best is None or (len(keys), switches) < best[0]:
            best = ((len(keys), switches), splits)
    plans = []
    for stage, offs, (baby, giant) in zip(stages, offsets, best[1]):
        if isinstance(stage, ActivationStage):
            ct_ct, _ = stage.poly.multiplications
            plans.append(StagePlan("activation", n_in, n_in, stage.depth, ct_ct_multiplications=ct_ct))
        else:
            plans.append(StagePlan("affine", stage.matrix.shape[1], stage.matrix.shape[0], 1, baby, giant, len(offs)))
            n_in = stage.matrix.shape[0]
    return tuple(plans)


# Time model: seconds per operation at N = 2^13 with 5 + 2 limbs of 30 bits, measured on this machine (re-measured
# 2026-11-21 after the crypto kernels got faster; the plan's estimate was 5x too high before)
# (baby-step rotations are hoisted, hence cheaper; a ct x ct product includes relinearization and rescale), scaled
# linearly in N and in the number of limbs. Used by ``ModelPlan.estimated_seconds``.
_SECONDS = {"baby_rotation": 0.0015, "giant_rotation": 0.0025, "ct_ct": 0.0026, "ct_pt": 0.00008, "rescale": 0.0007,
            "encode": 0.0006}
_REFERENCE_SIZE = (1 << 13) * 7

_LOG_SCALE = 30


def choose_parameters(depth: int, min_slots: int = 1, log_scale: int = _LOG_SCALE):
    """The smallest 128-bit-secure CKKS parameters with exactly ``depth`` levels and >= ``min_slots`` slots.

    Levels are one 30-bit prime each (scale 2^30, about 20 bits of precision after a few levels), the base
    level two primes (2^30 of headroom for the outputs), two special primes, and the fewest key-switching
    digits the noise check accepts (fewer digits, smaller keys). Cached: the parameters are immutable and
    building them (finding NTT primes) takes about a second.
    """
    if isinstance(depth, bool) or not isinstance(depth, (int, np.integer)) or depth < 0:
        raise ParameterError(f"depth={depth!r} must be a non-negative integer")
    return _choose_parameters(int(depth), max(1, int(min_slots)), int(log_scale))


@functools.lru_cache(maxsize=32)
def _choose_parameters(depth: int, min_slots: int, log_scale: int):
    """``choose_parameters`` after validation (memoised)."""
    last_error = None
    for log_n in range(max(13, (2 * min_slots - 1).bit_length()), 18):
        n_q = 2 + depth
        for dnum in range(1, n_q + 1):
            literal = dict(log_n=log_n, log_q=[[30, 30]] + [[log_scale]] * depth, log_p=[30, 30],
                           log_scale=log_scale, dnum=dnum)
            try:
                return CKKSParameters.from_literal(literal)
            except ParameterError as error:
                last_error = error
                if "HE-standard" in str(error):
                    break
    raise ParameterError(f"depth={depth} needs more levels than any 128-bit ring up to N=2^17 holds ({last_error})")


class _CallableInt(int):
    """An int that returns itself when called (``plan.depth`` and ``plan.depth()`` both work)."""

    def __call__(self):
        return int(self)


class _CallableTuple(tuple):
    """A tuple that returns itself when called (``plan.rotations`` and ``plan.rotations()`` both work)."""

    def __call__(self):
        return tuple(self)


@dataclass(frozen=True)
class ModelPlan:
    """What encrypted inference of a model will cost, known before any key exists.

    ``block`` slots per sample, ``batch`` samples per ciphertext, inputs encrypted at ``input_level``
    (= ``depth``, so the output arrives at level 0), Galois keys for ``rotations`` only.
    """

    params: CKKSParameters
    input_shape: tuple[int, ...]
    output_shape: tuple[int, ...]
    block: int
    stages: tuple[StagePlan, ...]
    layers: tuple[LayerLowering, ...] = ()

    @property
    def depth(self) -> int:
        """Levels consumed; an int that may also be called, like ``tensor_ops.Plan.depth()``."""
        return _CallableInt(sum(stage.depth for stage in self.stages))

    @property
    def input_level(self) -> int:
        return int(self.depth)

    @property
    def batch(self) -> int:
        return self.params.slots // self.block

    @property
    def rotations(self) -> tuple[int, ...]:
        """Rotation steps needing a Galois key (a tuple that may also be called, like ``Plan.rotations()``)."""
        steps = set()
        for stage in self.stages:
            steps.update(stage.rotations)
        steps.discard(0)
        return _CallableTuple(sorted(steps))

    @property
    def keys(self) -> dict:
        """The evaluation keys the client must make: Galois keys (steps, estimated bytes), relinearization."""
        return {"rotations": tuple(self.rotations), "galois_keys": len(self.rotations),
                "galois_key_bytes": self.galois_key_bytes, "relinearization": self.needs_relinearization}

    def cost(self) -> dict:
        """Operation counts per ciphertext and the time estimates in seconds."""
        return dict(self.operation_counts(), seconds=self.estimated_seconds, setup_seconds=self.estimated_setup_seconds)

    @property
    def needs_relinearization(self) -> bool:
        return any(stage.ct_ct_multiplications for stage in self.stages)

    @property
    def galois_key_bytes(self) -> int:
        """Estimated bytes of the Galois keys: per key, digits x 2 polynomials x (Q + P limbs) x N x 4."""
        params = self.params
        limbs = len(params.q_moduli) + len(params.p_moduli)
        return len(self.rotations) * len(params.digits) * 2 * limbs * params.n * 4

    @staticmethod
    def _stage_counts(stage) -> dict:
        return {"baby_rotation": sum(1 for b in stage.baby if b), "giant_rotation": sum(1 for m in stage.giant if m),
                "ct_pt": stage.diagonals, "encode": stage.diagonals, "ct_ct": stage.ct_ct_multiplications,
                "rescale": 1 if stage.kind == "affine" else 0}

    def operation_counts(self) -> dict:
        """Homomorphic operations per ciphertext (``encode``: plaintext diagonals, once per server)."""
        counts = {}
        for stage in self.stages:
            for op, count in self._stage_counts(stage).items():
                counts[op] = counts.get(op, 0) + count
        return counts

    def _seconds(self, operations) -> float:
        """The time model, each stage scaled by the limbs of the level it runs at."""
        total, level = 0.0, self.input_level
        for stage in self.stages:
            size = self.params.n * (self.params.limbs_at(level) + len(self.params.p_moduli)) / _REFERENCE_SIZE
            counts = self._stage_counts(stage)
            total += size * sum(_SECONDS[op] * counts[op] for op in operations)
            level -= stage.depth
        return total

    @property
    def estimated_seconds(self) -> float:
        """Server time per ciphertext (``batch`` samples) from the operation counts and the time model."""
        return self._seconds(("baby_rotation", "giant_rotation", "ct_ct", "ct_pt", "rescale"))

    @property
    def estimated_throughput(self) -> float:
        """Samples per second of server time with full ciphertexts (``batch`` / ``estimated_seconds``)."""
        return self.batch / self.estimated_seconds if self.estimated_seconds > 0 else math.inf

    @property
    def estimated_setup_seconds(self) -> float:
        """One-time server cost of encoding the plaintext diagonals."""
        return self._seconds(("encode",))

    def explain(self) -> str:
        lines = [f"encrypted inference plan: input {self.input_shape} -> output {self.output_shape}",
                 f"  parameters: {self.params!r}",
                 f"  packing: {self.block} slots per sample, {self.batch} samples per ciphertext, "
                 f"inputs at level {self.input_level}"]
        if self.layers:
            lines.append("  layers, each lowered to an einsum with plaintext weights:")
            lines += [f"    {layer.describe()}" for layer in self.layers]
        for i, stage in enumerate(self.stages):
            if stage.kind == "affine":
                lines.append(f"  stage {i}: affine {stage.n_in} -> {stage.n_out}, {stage.diagonals} diagonals, "
                             f"baby steps {len(stage.baby)}, giant steps {len(stage.giant)}, depth 1")
            else:
                lines.append(f"  stage {i}: polynomial activation, {stage.ct_ct_multiplications} ct x ct "
                             f"multiplications, depth {stage.depth}")
        lines.append(f"  depth {self.depth}, {len(self.rotations)} rotation keys "
                     f"(~{self.galois_key_bytes / 2**20:.1f} MiB), relinearization key: {self.needs_relinearization}")
        lines.append(f"  estimated time: {self.estimated_seconds:.2f} s per ciphertext of {self.batch} samples "
                     f"(+ {self.estimated_setup_seconds:.2f} s once to encode the weights), "
                     f"~{self.estimated_throughput:.0f} samples/s with full ciphertexts")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        """Public, JSON-serialisable description (what a client needs to make keys and pack inputs)."""
        return {"params": self.params.to_dict(), "input_shape": list(self.input_shape),
                "output_shape": list(self.output_shape), "block": self.block,
                "stages": [dict(vars(stage), baby=list(stage.baby), giant=list(stage.giant)) for stage in self.stages],
                "layers": [dict(vars(layer), input_shape=list(layer.input_shape), output_shape=list(layer.output_shape))
                           for layer in self.layers]}

    @classmethod
    def from_dict(cls, data: dict) -> "ModelPlan":
        try:
            stages = tuple(StagePlan(**dict(s, baby=tuple(s["baby"]), giant=tuple(s["giant"]))) for s in data["stages"])
            layers = tuple(LayerLowering(**dict(layer, input_shape=tuple(layer["input_shape"]),
                                                output_shape=tuple(layer["output_shape"])))
                           for layer in data.get("layers", ()))
            return cls(CKKSParameters.from_dict(data["params"]), tuple(data["input_shape"]),
                       tuple(data["output_shape"]), int(data["block"]), stages, layers)
        except (KeyError, TypeError, ValueError) as error:
            if isinstance(error, ParameterError):
                raise
            raise ParameterError(f"malformed model plan: {error!r}") from None

    # -- packing -------------------------------------------------------------------------------------
    def pack(self, x) -> list[np.ndarray]:
        """Slot vectors (one per ciphertext) holding the samples of x, one per ``block`` slots."""
        return pack_samples(x, self.input_shape, self.block, self.params.slots)

    def unpack(self, vectors, count: int) -> np.ndarray:
        """The (count, *output_shape) outputs from decrypted slot vectors."""
        return unpack_samples(vectors, count, self.output_shape, self.block, self.params.slots)

    def with_block(self, block: int) -> "ModelPlan":
        """The same plan with ``block`` slots per sample (a power of two from the plan's block to slots)."""
        if isinstance(block, bool) or not isinstance(block, (int, np.integer)) or block & (block - 1) \
                or not self.block <= block <= self.params.slots:
            raise ShapeError(f"block={block!r} must be a power of two in [{self.block}, slots={self.params.slots}]")
        return ModelPlan(self.params, self.input_shape, self.output_shape, int(block), self.stages, self.layers)

    def ciphertexts_for(self, count: int) -> int:
        return -(-int(count) // self.batch)


def batch_of(x, sample_shape):
    """(x as (batch, *sample_shape), single) or a ShapeError naming both shapes."""
    x = np.asarray(x, dtype=np.float64)
    single = x.shape == tuple(sample_shape)
    if single:
        x = x[None]
    if x.ndim == 0 or x.shape[1:] != tuple(sample_shape) or x.shape[0] < 1:
        raise ShapeError(f"input shape {x.shape} is neither the model's {tuple(sample_shape)} "
                         f"nor (batch, *{tuple(sample_shape)}) with batch >= 1")
    if not np.all(np.isfinite(x)):
        raise ShapeError("input contains non-finite values (nan or inf)")
    return x, single


def pack_samples(x, sample_shape, block, slots) -> list[np.ndarray]:
    """Slot vectors with sample b of each ciphertext, flattened, in slots [b*block, b*block + n), zeros after."""
    x, _ = batch_of(x, sample_shape)
    flat = x.reshape(x.shape[0], -1)
    if flat.shape[1] > block:
        raise ShapeError(f"a sample of {flat.shape[1]} values does not fit block={block} slots")
    per_ct = slots // block
    vectors = []
    for start in range(0, len(flat), per_ct):
        chunk = flat[start:start + per_ct]
        packed = np.zeros((per_ct, block))
        packed[:len(chunk), :flat.shape[1]] = chunk
        vectors.append(packed.reshape(-1))
    return vectors


def unpack_samples(vectors, count, output_shape, block, slots) -> np.ndarray:
    """The (count, *output_shape) values from slot vectors packed like ``pack_samples``."""
    n_out = math.prod(output_shape)
    rows = np.concatenate([np.asarray(v)[:slots].real.reshape(slots // block, block)[:, :n_out] for v in vectors])
    return rows[:count].reshape(count, *output_shape)


def _plan_model(model, input_shape, params):
    stages, stage_of_layer = model.compile(input_shape)
    widths = [math.prod(input_shape)] + [s.matrix.shape[0] for s in stages if isinstance(s, AffineStage)]
    block = 1 << (max(widths) - 1).bit_length()
    plans = _stage_plans(stages, math.prod(input_shape))
    depth = sum(p.depth for p in plans)
    if params is None:
        params = choose_parameters(depth, min_slots=block)
    params = as_parameters(params)
    if params.slots < block:
        raise ShapeError(f"a sample needs block={block} slots but the parameters have slots={params.slots}")
    if params.max_level < depth:
        raise ParameterError(f"the model needs depth={depth} levels but the parameters have max_level={params.max_level}")
    layers = lower_layers(model.layers, input_shape, stage_of_layer, params)
    return ModelPlan(params, tuple(input_shape), tuple(model.output_shape(input_shape)), block, tuple(plans), layers)
