"""Model files (.npz) for the prove/verify scripts.

Two layouts are read:

- a **quantized model** written by :func:`save_model`: ``format = "hezk.qmlp"``, ``version``, the
  scheme, ``input_frac``, ``input_bound``, ``error_bound`` and per layer ``weight_i`` (int),
  ``bias_i`` (int), ``weight_frac_i``, ``shift_i``, ``relu_i``;
- a **float model**: the weight matrices and bias vectors of the layers as numpy wrote them from
  float arrays, e.g. ``np.savez("model.npz", w0=..., b0=..., w1=..., b1=...)``. A 2-D array is a
  weight and a 1-D array a bias when its key holds a layer number (``w0``, ``W1``, ``weight_0``,
  ``fc1.weight``, ``layers.0.bias``, ``arr_0`` from ``np.savez(path, w0, b0, ...)``), else by its
  order in the file (``hidden_w``, ``hidden_b``, ``out_w``, ``out_b``); weights and biases are paired
  in that order, and a file without 1-D arrays has zero biases. Matrices are (out, in), or (in, out)
  when only that orientation fits the biases and chains. Only a bias's length tells (out, in) from
  (in, out) in a square layer, so ambiguous files are read as (out, in). Optional scalars:
  ``frac_bits`` (default 8) and ``input_bound`` (largest |x| of an input; default the largest of 8, 4,
  2, 1 for which no layer can wrap around the field). The file is quantized with
  :func:`proofs.quantize.quantize_fixed_point`, deterministically, so prover and verifier agree.

Files are opened with ``allow_pickle=False``; anything malformed raises :class:`ModelError`.
"""
from __future__ import annotations

import os
import re
import struct
import zipfile
import zlib

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
_LAYER_NUMBER = re.compile(r"(\d+)")


def _arrays(data, ndim: int) -> dict:
    """{layer number: array} for the float/int arrays of ``ndim`` dimensions: by the number in their keys,
    or by their order in the file when no key holds a number."""
    arrays = [(key, array) for key, array in data.items()
              if array.ndim == ndim and array.dtype.kind in "fiu" and key not in FLOAT_MODEL_SETTINGS]
    numbered = [(key, array) for key, array in arrays if _LAYER_NUMBER.search(key)]
    if not numbered:
        return dict(enumerate(array for _, array in arrays))
    found = {}
    for key, array in numbered:
        number = int(_LAYER_NUMBER.findall(key)[-1])
        if number in found:
            raise ModelError(f"model file: two {ndim}-D arrays for layer number {number} (e.g. {key!r})")
        found[number] = array
    return found


def _orient(weights, biases) -> list:
    """Weights as (out, in): kept if they fit the biases and chain that way, transposed if only that fits."""
    def fits(ws):
        return (all(w.shape[0] == b.shape[0] for w, b in zip(ws, biases))
                and all(ws[i + 1].shape[1] == ws[i].shape[0] for i in range(len(ws) - 1)))
    for candidate in (weights, [w.T for w in weights]):
        if fits(candidate):
            return candidate
    raise ModelError(f"model file: weight shapes {[w.shape for w in weights]} with bias lengths "
                     f"{[b.shape[0] for b in biases]} do not chain as (out, in) or (in, out) matrices")


def _read_float(data) -> QuantizedMLP:
    weights, biases = _arrays(data, 2), _arrays(data, 1)
    if not weights:
        raise ModelError("model file: neither a quantized model (entry 'format') nor a float model "
                         "(arrays w0, b0, w1, b1, ...); found entries " + repr(sorted(data)))
    if not biases:  # a model without biases
        biases = {number: np.zeros(weight.shape[0]) for number, weight in weights.items()}
    if len(weights) != len(biases):
        raise ModelError(f"model file: {len(weights)} weight matrices (layers {sorted(weights)}) but "
                         f"{len(biases)} bias vectors (layers {sorted(biases)})")
    if len(weights) > MAX_LAYERS:
        raise ModelError(f"model file: {len(weights)} layers > {MAX_LAYERS}")
    ws = _orient([weights[i] for i in sorted(weights)], [biases[i] for i in sorted(biases)])
    bs = [biases[i] for i in sorted(biases)]
    frac_bits = _scalar(data, "frac_bits", "iu", 8)
    bounds = (_scalar(data, "input_bound", "fiu"),) if "input_bound" in data else DEFAULT_INPUT_BOUNDS
    for bound in bounds[:-1]:  # the widest default bound the field holds
        try:
            return quantize_fixed_point(ws, bs, frac_bits=frac_bits, input_bound=bound)
        except ModelError:
            continue
    return quantize_fixed_point(ws, bs, frac_bits=frac_bits, input_bound=bounds[-1])


def load_model(path) -> QuantizedMLP:
    """Read a quantized or float model file (see the module doc); raises ModelError if malformed."""
    if not os.path.isfile(path):
        raise ModelError(f"model file {str(path)!r} does not exist")
    with open(path, "rb") as handle:
        head = handle.read(6)
    if not head.startswith(b"PK\x03\x04"):  # np.load would return an .npy array or try to unpickle
        what = "a single .npy array" if head.startswith(b"\x93NUMPY") else "not a zip archive (a text file?)"
        raise ModelError(f"model file {str(path)!r} is not a readable .npz archive: it is {what} (see proofs.model)")
    try:
        with np.load(path, allow_pickle=False) as archive:
            data = {key: archive[key] for key in archive.files}
    except (OSError, ValueError, EOFError, KeyError, RuntimeError, zipfile.BadZipFile, zlib.error, struct.error) as exc:
        raise ModelError(f"model file {str(path)!r} is not a readable .npz archive (truncated or corrupted): "
                         f"{type(exc).__name__}: {exc}") from None
    if "format" in data:
        if _scalar(data, "format", "U") != FORMAT:
            raise ModelError(f"model file: format={data['format'].item()!r} is not {FORMAT!r}")
        return _read_quantized(data)
    return _read_float(data)
