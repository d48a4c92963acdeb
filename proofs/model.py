"""Model files (.npz, .onnx) for the prove/verify scripts.

Two layouts are read:

- (deprecated, read with a DeprecationWarning for one more release) a **quantized model** written by
  :func:`save_model`: ``format = "hezk.qmlp"``, ``version``, the
  scheme, ``input_frac``, ``input_bound``, ``error_bound`` and per layer ``weight_i`` (int),
  ``bias_i`` (int), ``weight_frac_i``, ``shift_i``, ``relu_i``;
- any file of the shared model description (:mod:`hezk.model`): ONNX (opset >= 13), a ``hezk.model.save_npz``
  file, or float weights that NAME their activation, e.g. ``np.savez("model.npz", w0=..., b0=..., w1=...,
  b1=..., activation="relu")`` (see ``hezk.model.npz`` for the key names; a file of bare weights without an
  activation is refused, never guessed). The description must be a chain of Gemm / MatMul layers with
  biases and ReLU; any other operator is refused by name (``operator Conv (node 'conv1') is not provable
  yet``). Optional scalars: ``frac_bits`` (default 8) and ``input_bound`` (largest |x| of an input; default
  the largest of 8, 4, 2, 1 for which no layer can wrap around the field). The float model is quantized with
  :func:`proofs.quantize.quantize_fixed_point`, deterministically, so prover and verifier agree.

Files are opened with ``allow_pickle=False``; anything malformed raises :class:`ModelError`.
"""
from __future__ import annotations

import os
import warnings

import numpy as np

import hezk.model

from .errors import ModelError
from .quantize import QuantizedLayer, QuantizedMLP, quantize_fixed_point

FORMAT = "hezk.qmlp"
VERSION = 1
MAX_LAYERS = 64


#: what reading or writing the quantized-MLP format says (``docs/architecture.md``: one model file format)
DEPRECATED_FORMAT = (f"the quantized-MLP .npz format ({FORMAT!r}, proofs.model.save_model) is deprecated and read for "
                     f"one more release: keep the float model in the one model file format, hezk.model.save_npz (or "
                     f"ONNX), which every command of both halves reads (proofs quantize it deterministically)")


def save_model(path, model: QuantizedMLP) -> None:
    """Write a quantized model to ``path`` (.npz, the deprecated ``hezk.qmlp`` format: DeprecationWarning)."""
    warnings.warn(DEPRECATED_FORMAT, DeprecationWarning, stacklevel=2)
    arrays = {"format": np.array(FORMAT), "version": np.array(VERSION), "scheme": np.array(model.scheme),
              "input_frac": np.array(model.input_frac), "input_bound": np.array(model.input_bound),
              "error_bound": np.array(model.error_bound), "num_layers": np.array(len(model.layers))}
    for i, layer in enumerate(model.layers):
        arrays.update({f"weight_{i}": layer.weight, f"bias_{i}": layer.bias,
                       f"weight_frac_{i}": np.array(layer.weight_frac), f"shift_{i}": np.array(layer.shift),
                       f"relu_{i}": np.array(layer.relu)})
    with open(path, "wb") as handle:
        np.savez(handle, **arrays)


def save_float_model(path, weights, biases, *, frac_bits: int = 8, input_bound: float = 1.0) -> None:
    """Write float weights (``weights[i]`` of shape (out, in)) as a float model file: a ReLU MLP (the
    activation named in the file, ``activation="relu"``, between the layers)."""
    arrays = {f"w{i}": np.asarray(w, dtype=np.float64) for i, w in enumerate(weights)}
    arrays.update({f"b{i}": np.asarray(b, dtype=np.float64) for i, b in enumerate(biases)})
    with open(path, "wb") as handle:
        np.savez(handle, frac_bits=np.array(frac_bits), input_bound=np.array(float(input_bound)),
                 activation=np.array("relu"), **arrays)


def _scalar(data, key: str, kind: str, default=None):
    if key not in data:
        if default is not None:
            return default
        raise ModelError(f"model file: missing entry {key!r}")
    value = data[key]
    if value.shape == (1,):  # np.savez(..., frac_bits=[8]) or a one-element array
        value = value.reshape(())
    if "i" in kind and value.shape == () and value.dtype.kind == "f" and float(value).is_integer():
        value = value.astype(np.int64)  # frac_bits=8.0
    if value.shape != () or value.dtype.kind not in kind:
        raise ModelError(f"model file: entry {key!r} must be a scalar of kind {kind!r}, "
                         f"got shape {value.shape} dtype {value.dtype}")
    return value.item()


def _read_quantized(data) -> QuantizedMLP:
    version = _scalar(data, "version", "iu")
    if version != VERSION:
        raise ModelError(f"model file: version={version} not supported (expected {VERSION})")
    count = _scalar(data, "num_layers", "iu")
    if not 1 <= count <= MAX_LAYERS:
        raise ModelError(f"model file: num_layers={count} not in [1, {MAX_LAYERS}]")
    layers, frac = [], _scalar(data, "input_frac", "iu")
    for i in range(count):
        for key in (f"weight_{i}", f"bias_{i}"):
            if key not in data:
                raise ModelError(f"model file: missing entry {key!r}")
        layer = QuantizedLayer(data[f"weight_{i}"], data[f"bias_{i}"], _scalar(data, f"weight_frac_{i}", "iu"),
                               frac, _scalar(data, f"shift_{i}", "iu"), _scalar(data, f"relu_{i}", "b"))
        layers.append(layer)
        frac = layer.out_frac
    return QuantizedMLP(tuple(layers), _scalar(data, "input_frac", "iu"), _scalar(data, "input_bound", "iu"),
                        str(_scalar(data, "scheme", "U")), _scalar(data, "error_bound", "f"))


DEFAULT_INPUT_BOUNDS = (8.0, 4.0, 2.0, 1.0)
FLOAT_MODEL_SETTINGS = ("frac_bits", "input_bound")


def not_provable(node) -> ModelError:
    """The refusal of an operator the proofs cannot prove yet, naming the operator and its node."""
    what = node.op if node.kind != "activation" or node.op.lower() == node.function else f"{node.op} ({node.function})"
    return ModelError(f"operator {what} (node {node.name!r}) is not provable yet: the proofs prove chains of "
                      f"Gemm / MatMul layers with biases and ReLU")


def graph_layers(graph) -> tuple[list, list, list]:
    """(weights (out, in), biases, relu flags) of a ``hezk.model.Graph`` that is a ReLU MLP: a chain of dense
    contractions on vectors, each optionally followed by a Relu; anything else raises ``not_provable``."""
    weights, biases, relus, tensor = [], [], [], graph.input
    for node in graph.nodes:
        if node.inputs != (tensor,):
            raise not_provable(node)
        shape = graph.shape_of(tensor)
        if node.kind == "contraction" and node.patches is None and len(shape) == 1 \
                and node.equation in ("bk,nk->bn", "bk,kn->bn"):
            weight = node.weight if node.equation == "bk,nk->bn" else node.weight.T
            weights.append(np.array(weight))
            biases.append(np.zeros(weight.shape[0]) if node.bias is None
                          else np.array(np.broadcast_to(node.bias, (weight.shape[0],))))
            relus.append(False)
        elif node.kind == "activation" and node.function == "relu" and relus and not relus[-1]:
            relus[-1] = True
        elif node.kind == "reshape" and node.shape == shape:
            pass  # a Flatten of vectors: the identity
        else:
            raise not_provable(node)
        tensor = node.output
    if not weights:
        raise ModelError("model file: no Gemm / MatMul layer to prove")
    if len(weights) > MAX_LAYERS:
        raise ModelError(f"model file: {len(weights)} layers > {MAX_LAYERS}")
    return weights, biases, relus


def _from_graph(graph, data: dict, input_bound=None) -> QuantizedMLP:
    """Quantize the float ReLU MLP a model description holds (fixed point, ``frac_bits`` and ``input_bound``
    from the file when it has them; an ``input_bound`` given here, e.g. from calibration data, wins)."""
    ws, bs, relus = graph_layers(graph)
    frac_bits = _scalar(data, "frac_bits", "iu", 8)
    bounds = (_scalar(data, "input_bound", "fiu"),) if "input_bound" in data else DEFAULT_INPUT_BOUNDS
    bounds = (input_bound,) if input_bound is not None else bounds
    for bound in bounds[:-1]:  # the widest default bound the field holds
        try:
            return quantize_fixed_point(ws, bs, frac_bits=frac_bits, input_bound=bound, relus=relus)
        except ModelError:
            continue
    return quantize_fixed_point(ws, bs, frac_bits=frac_bits, input_bound=bounds[-1], relus=relus)


def load_model(path, input_bound=None) -> QuantizedMLP:
    """Read a quantized model file, or any model file of the shared description (ONNX, hezk ``.npz``: see
    ``hezk.model``) that is a ReLU MLP; raises ModelError if malformed or not provable yet. ``input_bound``
    (largest |x| of an input, e.g. from calibration data) overrides the file's or the default bound of a float
    model; a quantized model keeps its own."""
    if not os.path.isfile(path):
        raise ModelError(f"model file {str(path)!r} does not exist")
    if hezk.model.is_onnx(path):
        return _from_graph(_described(hezk.model.read_onnx, path), {}, input_bound)
    with open(path, "rb") as handle:
        head = handle.read(6)
    if not head.startswith(b"PK\x03\x04"):  # np.load would return an .npy array or try to unpickle
        what = "a single .npy array" if head.startswith(b"\x93NUMPY") else "not a zip archive (a text file?)"
        raise ModelError(f"model file {str(path)!r} is not a readable .npz archive: it is {what} (see proofs.model)")
    try:  # each array's declared size is bounded before it is allocated (hezk.model.npz)
        data = hezk.model.read_archive(path)
    except hezk.model.ModelFileError as exc:
        raise ModelError(f"model file {str(path)!r} is not a readable .npz archive: {exc}") from None
    if "format" in data:
        if _scalar(data, "format", "U") != FORMAT:
            raise ModelError(f"model file: format={data['format'].item()!r} is not {FORMAT!r}")
        warnings.warn(f"model file {str(path)!r}: {DEPRECATED_FORMAT}", DeprecationWarning, stacklevel=2)
        return _read_quantized(data)
    return _from_graph(_described(lambda p: hezk.model.read_npz(p, arrays=data), path), data, input_bound)


def _described(read, path):
    """``read(path)``, a ``hezk.model.Graph``, its errors as ModelError."""
    try:
        return read(path)
    except hezk.model.ModelFileError as error:
        raise ModelError(str(error)) from None
