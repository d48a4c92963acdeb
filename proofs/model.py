"""Model files (.npz) for the prove/verify scripts.

Two layouts are read:

- a **quantized model** written by :func:`save_model`: ``format = "hezk.qmlp"``, ``version``, the
  scheme, ``input_frac``, ``input_bound``, ``error_bound`` and per layer ``weight_i`` (int),
  ``bias_i`` (int), ``weight_frac_i``, ``shift_i``, ``relu_i``;
- a **float model**: numbered weight matrices and bias vectors, ``w0, b0, w1, b1, ...`` (also ``W1``,
  ``weight_0``/``bias_0``, ``fc1.weight``/``fc1.bias``; layers in numeric order; matrices (out, in), or
  (in, out) when only that orientation chains) and optionally the scalars ``frac_bits`` (default 8) and
  ``input_bound`` (default 1.0); it is quantized with :func:`proofs.quantize.quantize_fixed_point`,
  deterministically, so prover and verifier agree.

Files are opened with ``allow_pickle=False``; anything malformed raises :class:`ModelError`.
"""
from __future__ import annotations

import os
import re
import zipfile

import numpy as np

from .errors import ModelError
from .quantize import QuantizedLayer, QuantizedMLP, quantize_fixed_point

FORMAT = "hezk.qmlp"
VERSION = 1
MAX_LAYERS = 64


def save_model(path, model: QuantizedMLP) -> None:
    """Write a quantized model to ``path`` (.npz)."""
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
    """Write float weights (``weights[i]`` of shape (out, in)) as a float model file."""
    arrays = {f"w{i}": np.asarray(w, dtype=np.float64) for i, w in enumerate(weights)}
    arrays.update({f"b{i}": np.asarray(b, dtype=np.float64) for i, b in enumerate(biases)})
    with open(path, "wb") as handle:
        np.savez(handle, frac_bits=np.array(frac_bits), input_bound=np.array(float(input_bound)), **arrays)


def _scalar(data, key: str, kind: str, default=None):
    if key not in data:
        if default is not None:
            return default
        raise ModelError(f"model file: missing entry {key!r}")
    value = data[key]
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


_WEIGHT_KEY = re.compile(r"^(?:w|weight|weights|fc|layer|dense|linear)?[_.]?(\d+)(?:[_.]?weight)?$", re.IGNORECASE)
_BIAS_KEY = re.compile(r"^(?:b|bias|biases|fc|layer|dense|linear)?[_.]?(\d+)(?:[_.]?bias)?$", re.IGNORECASE)


def _numbered(data, pattern, ndim: int) -> dict:
    """{layer number: array} for the numeric arrays of ``ndim`` dimensions whose key matches ``pattern``."""
    found = {}
    for key, array in data.items():
        match = pattern.match(key)
        if match and array.ndim == ndim and array.dtype.kind in "fiu":
            if int(match.group(1)) in found:
                raise ModelError(f"model file: two {ndim}-D arrays for layer {match.group(1)} (e.g. {key!r})")
            found[int(match.group(1))] = array
    return found


def _chain(weights) -> list:
    """Weights as (out, in): kept if they chain that way, transposed if they only chain as (in, out)."""
    def chains(ws):
        return all(ws[i + 1].shape[1] == ws[i].shape[0] for i in range(len(ws) - 1))
    if chains(weights):
        return weights
    transposed = [w.T for w in weights]
    if chains(transposed):
        return transposed
    raise ModelError(f"model file: weight shapes {[w.shape for w in weights]} do not chain as (out, in) matrices")


def _read_float(data) -> QuantizedMLP:
    weights, biases = _numbered(data, _WEIGHT_KEY, 2), _numbered(data, _BIAS_KEY, 1)
    if not weights:
        raise ModelError("model file: neither a quantized model (entry 'format') nor a float model "
                         "(arrays w0, b0, w1, b1, ...)")
    if sorted(weights) != sorted(biases):
        raise ModelError(f"model file: weights for layers {sorted(weights)} but biases for {sorted(biases)}")
    order = sorted(weights)
    return quantize_fixed_point(_chain([weights[i] for i in order]), [biases[i] for i in order],
                                frac_bits=_scalar(data, "frac_bits", "iu", 8),
                                input_bound=_scalar(data, "input_bound", "fiu", 1.0))


def load_model(path) -> QuantizedMLP:
    """Read a quantized or float model file (see the module doc); raises ModelError if malformed."""
    if not os.path.isfile(path):
        raise ModelError(f"model file {str(path)!r} does not exist")
    try:
        with np.load(path, allow_pickle=False) as archive:
            data = {key: archive[key] for key in archive.files}
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
        raise ModelError(f"model file {str(path)!r} is not a readable .npz archive: {exc}") from None
    if "format" in data:
        if _scalar(data, "format", "U") != FORMAT:
            raise ModelError(f"model file: format={data['format'].item()!r} is not {FORMAT!r}")
        return _read_quantized(data)
    return _read_float(data)
