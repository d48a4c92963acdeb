"""hezk's ``.npz`` model files -> ``Graph``, and the writer.

Three layouts are read, never unpickling:

- **hezk-graph** (written by ``save_npz``): an entry ``__hezk_graph__`` holding the graph as JSON (nodes,
  their einsums, shapes and names) and one array per constant, ``node{i}.weight`` / ``bias`` / ``scale`` /
  ``shift``;
- **hezk-model v1** (``tensor_ops.nn.Sequential.save``): an entry ``__model__`` listing the layers, whose
  activations are named (a polynomial fitted to relu, ..., or square);
- **named weights**: the weights of an MLP or a CNN as numpy wrote them, with the activation NAMED, e.g.
  ``np.savez("m.npz", w0=W0, b0=b0, w1=W1, b1=b1, activation="relu")`` (between the layers, none after the
  last) or per layer ``act0="relu", act1="none"`` (after layer i). 2-D arrays are linear weights, (out, in)
  or (in, out) when only that chains, 4-D arrays convolutions (``stride``, ``padding`` and ``input_shape``
  entries), 1-D arrays biases; they are ordered by the number in their keys (``w0``, ``fc1.weight``,
  ``layers.0.bias``, ``arr_0``), else by their order in the file. A file of bare weights that names no
  activation is refused: the same arrays were read as a ReLU MLP by one half and as an x^2 MLP by the other.

Engine settings (``frac_bits``, ``input_bound``, ``degree``, ``interval``) may sit in the same file; the
engines read them, the description ignores them.
"""
from __future__ import annotations

import json
import math
import re
import struct
import zipfile
import zlib

import numpy as np

from .errors import MissingInputShape, ModelFileError
from .graph import ACTIVATIONS, MAX_ELEMENTS, Activation, Affine, Contraction, Graph, Patches, Reshape

GRAPH_KEY = "__hezk_graph__"
OPERATOR = {"relu": "Relu", "square": "Square", "sigmoid": "Sigmoid", "tanh": "Tanh", "gelu": "Gelu",
            "gelu_tanh": "Gelu", "silu": "Silu", "softplus": "Softplus", "softsign": "Softsign",
            "hardswish": "HardSwish", "mish": "Mish", "elu": "Elu", "selu": "Selu"}
SEQUENTIAL_KEY = "__model__"
NO_ACTIVATION = ("none", "identity", "linear")
ENGINE_SETTINGS = ("frac_bits", "input_bound", "degree", "interval")
_SETTINGS = ENGINE_SETTINGS + ("activation", "input_shape", "stride", "padding")
_ACT_KEY = re.compile(r"^act(?:ivation)?_?(\d+)$")
_NUMBER = re.compile(r"(\d+)")
_ARCHIVE_ERRORS = (OSError, ValueError, EOFError, KeyError, IndexError, TypeError, OverflowError, RuntimeError,
                   MemoryError, zipfile.BadZipFile, zlib.error, struct.error)
NAME_AN_ACTIVATION = ("name the activation in the file: np.savez(path, ..., activation='relu') (between layers; "
                      f"one of {', '.join(a for a in ACTIVATIONS if a != 'gelu_tanh')}) or per layer act0='relu', "
                      "act1='none', ...; or write the model with hezk.model.save_npz")


MAX_ARRAY_BYTES = 8 * MAX_ELEMENTS  # one array of an archive: MAX_ELEMENTS float64 values
MAX_ARCHIVE_BYTES = 1 << 29  # all the arrays of one archive together (512 MiB)
MAX_MEMBERS = 1 << 16


def read_archive(path) -> dict:
    """Every array of the ``.npz`` at ``path`` (never unpickling); a damaged archive raises ModelFileError.
    Each member's ``.npy`` header is read first and its declared shape and dtype checked (at most
    ``MAX_ELEMENTS`` values, ``MAX_ARRAY_BYTES`` bytes, all arrays together ``MAX_ARCHIVE_BYTES``, and no more
    than the zip member holds) before its array is allocated: a small compressed file declaring a huge array
    (a zip bomb) is refused without reading it."""
    where = f"model file {path!s}"
    try:
        with zipfile.ZipFile(path) as archive:
            members = archive.infolist()
            if len(members) > MAX_MEMBERS:
                raise ModelFileError(f"{where}: {len(members)} archive entries, more than the limit of {MAX_MEMBERS}")
            total, arrays = 0, {}
            for info in members:
                key = info.filename[:-4] if info.filename.endswith(".npy") else info.filename
                with archive.open(info) as handle:
                    nbytes = _declared_bytes(handle, info, f"{where}: array {key!r}")
                total += nbytes
                if total > MAX_ARCHIVE_BYTES:
                    raise ModelFileError(f"{where}: the arrays up to {key!r} declare {total} bytes, more than the "
                                         f"limit of {MAX_ARCHIVE_BYTES} for one archive")
                with archive.open(info) as handle:
                    arrays[key] = np.lib.format.read_array(handle, allow_pickle=False)
            return arrays
    except ModelFileError:
        raise
    except _ARCHIVE_ERRORS as error:
        raise ModelFileError(f"{where}: a damaged .npz archive, truncated or corrupted "
                             f"({type(error).__name__}: {error})") from None


def _declared_bytes(handle, info, what: str) -> int:
    """The bytes of the array whose ``.npy`` header ``handle`` starts with, checked against the limits and
    against the zip member's uncompressed size (``info.file_size``) before anything is allocated."""
    fmt = np.lib.format
    version = fmt.read_magic(handle)
    if version == (1, 0):
        shape, _, dtype = fmt.read_array_header_1_0(handle)
    elif version == (2, 0):
        shape, _, dtype = fmt.read_array_header_2_0(handle)
    else:
        raise ModelFileError(f"{what}: .npy format version {version} is not read (1.0 and 2.0 are)")
    if dtype.hasobject:
        raise ModelFileError(f"{what}: dtype {dtype} holds Python objects (pickles are never loaded)")
    if any(d < 0 for d in shape):
        raise ModelFileError(f"{what}: shape {shape} has a negative entry")
    count = math.prod(shape)
    nbytes = count * dtype.itemsize
    if count > MAX_ELEMENTS or nbytes > MAX_ARRAY_BYTES:
        raise ModelFileError(f"{what}: declares shape {shape} of {dtype} ({nbytes} bytes), more than the limit of "
                             f"{MAX_ELEMENTS} values and {MAX_ARRAY_BYTES} bytes for one array")
    header = handle.tell()
    if header + nbytes > info.file_size:
        raise ModelFileError(f"{what}: declares shape {shape} of {dtype} ({nbytes} bytes) but its archive entry "
                             f"holds {info.file_size - header} bytes of data")
    return nbytes


def save_npz(graph: Graph, path) -> None:
    """Write ``graph`` as a hezk-graph ``.npz`` (JSON structure plus one array per constant)."""
    header, arrays = graph.records()
    with open(path, "wb") as handle:
        np.savez(handle, **{GRAPH_KEY: np.array(json.dumps(header))}, **arrays)


def read_npz(path, input_shape=None, arrays: dict | None = None) -> Graph:
    """The description of the ``.npz`` model at ``path`` (see the module doc)."""
    arrays = dict(read_archive(path) if arrays is None else arrays)
    if GRAPH_KEY in arrays:
        try:
            header = json.loads(str(arrays.pop(GRAPH_KEY)))
        except ValueError:
            header = None
        if not isinstance(header, dict) or header.get("format") != "hezk-graph" or header.get("version") != 1:
            raise ModelFileError(f"model file {path!s}: {GRAPH_KEY} is not a hezk-graph version 1 description")
        return Graph.from_records(header, arrays, f"model file {path!s}")
    if SEQUENTIAL_KEY in arrays:
        return _from_sequential(arrays, path, input_shape)
    if "format" in arrays:
        raise ModelFileError(f"model file {path!s}: format={arrays['format']!s} is a quantized proof model, read "
                             f"only by the proofs half (proofs.model.load_model)")
    return _from_named_weights(arrays, path, input_shape)


def _activation_name(value, where) -> str | None:
    name = str(np.asarray(value)).strip().lower()
    name = {"x^2": "square", "x2": "square", "swish": "silu"}.get(name, name)
    if name in NO_ACTIVATION:
        return None
    if name not in ACTIVATIONS:
        raise ModelFileError(f"{where}: activation {name!r} is not one of {ACTIVATIONS + NO_ACTIVATION}")
    return name


def _numbered(items, ndims) -> list:
    """Arrays of the given ranks, ordered by the number in their keys (file order where no key has one)."""
    chosen = [(key, value) for key, value in items if value.ndim in ndims]
    if chosen and all(_NUMBER.search(key) for key, _ in chosen):
        numbers = [int(_NUMBER.findall(key)[-1]) for key, _ in chosen]
        if len(set(numbers)) == len(numbers):
            return [chosen[i] for i in np.argsort(numbers, kind="stable")]
    return chosen


def _from_named_weights(arrays: dict, path, input_shape) -> Graph:
    where = f"model file {path!s}"
    per_layer = {int(_ACT_KEY.match(k).group(1)): arrays.pop(k) for k in list(arrays) if _ACT_KEY.match(k)}
    settings = {key: arrays.pop(key) for key in _SETTINGS if key in arrays}
    numeric = [(k, v) for k, v in arrays.items() if v.dtype.kind in "fiu"]
    others = [k for k, v in arrays.items() if v.dtype.kind not in "fiu" or v.ndim not in (1, 2, 4)]
    if others:
        raise ModelFileError(f"{where}: entry {others[0]!r} is neither a weight (2-D, 4-D), a bias (1-D) nor a "
                             f"known setting {_SETTINGS + ('act0', 'act1', '...')}")
    weights, biases = _numbered(numeric, (2, 4)), _numbered(numeric, (1,))
    if not weights:
        raise ModelFileError(f"{where}: no model found (neither {GRAPH_KEY}, {SEQUENTIAL_KEY} nor weight arrays "
                             f"w0, b0, w1, b1, ...); entries {sorted(arrays)}")
    if "activation" not in settings and not per_layer:
        raise ModelFileError(f"{where} holds bare weights {[k for k, _ in weights]} and names no activation: "
                             f"{NAME_AN_ACTIVATION}")
    if biases and len(biases) != len(weights):
        raise ModelFileError(f"{where}: {len(weights)} weights {[k for k, _ in weights]} but {len(biases)} biases "
                             f"{[k for k, _ in biases]}")
    ws = [np.asarray(w, dtype=np.float64) for _, w in weights]
    bs = [np.asarray(b, dtype=np.float64) for _, b in biases] or [None] * len(ws)
    if all(w.ndim == 2 for w in ws):
        ws = _oriented(ws, bs, where)
    count = len(ws)
    default = _activation_name(settings["activation"], where) if "activation" in settings else None
    acts = [per_layer.get(i) for i in range(count)]
    extra = sorted(set(per_layer) - set(range(count)))
    if extra:
        raise ModelFileError(f"{where}: act{extra[0]} names an activation after layer {extra[0]}, but the file "
                             f"has {count} layers")
    acts = [_activation_name(a, where) if a is not None else (default if i < count - 1 else None)
            for i, a in enumerate(acts)]
    if input_shape is None and "input_shape" in settings:
        input_shape = tuple(int(d) for d in np.atleast_1d(settings["input_shape"]))
    if input_shape is None:
        if ws[0].ndim == 4:
            raise MissingInputShape(f"{where}: a convolution first needs the sample shape: add input_shape=(C, H, W) "
                                 f"to the file (or pass --input-shape)")
        input_shape = (ws[0].shape[1],)
    stride = int(settings.get("stride", 1))
    padding = int(settings.get("padding", 0))
    nodes, shapes, tensor = [], {"input": tuple(input_shape)}, "input"

    def add(node):
        nonlocal tensor
        nodes.append(node)
        shapes[node.output] = node.output_shape(tuple(shapes[i] for i in node.inputs))
        tensor = node.output

    for i, (w, b, act) in enumerate(zip(ws, bs, acts)):
        key = weights[i][0]
        if w.ndim == 2:
            if len(shapes[tensor]) != 1:
                add(Reshape(f"flatten{i}", "Flatten", (tensor,), f"flat{i}", (int(np.prod(shapes[tensor])),)))
            add(Contraction(key, "Gemm", (tensor,), f"layer{i}", "bk,nk->bn", w, b, None, (w.shape[0],)))
        else:
            patches = Patches(w.shape[2:], (stride, stride), (padding,) * 4)
            if len(shapes[tensor]) != 3:
                raise ModelFileError(f"{where}: convolution {key!r} follows a layer of sample shape {shapes[tensor]}")
            oh, ow = patches.output_hw(*shapes[tensor][1:])
            add(Contraction(key, "Conv", (tensor,), f"layer{i}", "bgcuvij,gocuv->bgoij", w[None],
                            None if b is None else b.reshape(-1, 1, 1), patches, (w.shape[0], oh, ow)))
        if act is not None:
            add(Activation(f"act{i}", OPERATOR[act], (tensor,), f"act{i}", act))
    return Graph("input", tuple(input_shape), tuple(nodes), tensor)


def _oriented(ws, bs, where):
    """Linear weights as (out, in): kept if they chain that way, transposed if only (in, out) chains."""
    def chains(candidate):
        fit = all(b is None or b.shape[0] == w.shape[0] for w, b in zip(candidate, bs))
        return fit and all(nxt.shape[1] == w.shape[0] for w, nxt in zip(candidate, candidate[1:]))
    for candidate in (ws, [w.T for w in ws]):
        if chains(candidate):
            return candidate
    raise ModelFileError(f"{where}: weight shapes {[w.shape for w in ws]} with bias lengths "
                         f"{[None if b is None else b.shape[0] for b in bs]} do not chain as (out, in) or (in, out) "
                         f"matrices")


def _from_sequential(arrays: dict, path, input_shape) -> Graph:
    """A ``Sequential.save`` file (hezk-model v1): its layers as graph nodes."""
    where = f"model file {path!s}"
    try:
        spec = json.loads(str(arrays[SEQUENTIAL_KEY]))
        layers = spec["layers"]
    except (ValueError, KeyError, TypeError):
        raise ModelFileError(f"{where}: {SEQUENTIAL_KEY} is not a hezk-model description") from None
    if spec.get("format") != "hezk-model" or spec.get("version") != 1:
        raise ModelFileError(f"{where}: format/version must be hezk-model/1")
    shape = input_shape or spec.get("input_shape")
    if shape is None and layers and layers[0].get("kind") == "linear":
        shape = (arrays["layer0.weight"].shape[1],)
    if shape is None:
        raise MissingInputShape(f"{where}: the model does not record its input shape; pass input_shape")
    nodes, shapes, tensor = [], {"input": tuple(int(d) for d in shape)}, "input"
    for i, entry in enumerate(layers):
        kind, config = entry.get("kind"), dict(entry.get("config", {}))
        own = {key.split(".", 1)[1]: value for key, value in arrays.items() if key.startswith(f"layer{i}.")}
        name, out, current = f"layer{i}", f"t{i}", shapes[tensor]
        try:
            if kind == "linear":
                node = Contraction(name, "Linear", (tensor,), out, "bk,nk->bn", own["weight"], own["bias"], None,
                                   (own["weight"].shape[0],))
            elif kind == "conv2d":
                w, s, p = own["weight"], int(config.get("stride", 1)), int(config.get("padding", 0))
                patches = Patches(w.shape[2:], (s, s), (p,) * 4)
                node = Contraction(name, "Conv2d", (tensor,), out, "bgcuvij,gocuv->bgoij", w[None],
                                   own["bias"].reshape(-1, 1, 1), patches,
                                   (w.shape[0], *patches.output_hw(*current[1:])))
            elif kind == "avgpool2d":
                k, s = int(config["kernel_size"]), int(config.get("stride") or config["kernel_size"])
                patches = Patches((k, k), (s, s))
                node = Contraction(name, "AvgPool2d", (tensor,), out, "bgcuvij,uv->bgcij", np.full((k, k), 1 / k / k),
                                   None, patches, (current[0], *patches.output_hw(*current[1:])))
            elif kind == "flatten":
                node = Reshape(name, "Flatten", (tensor,), out, (int(np.prod(current)),))
            elif kind == "batchnorm":
                factor = own["gamma"] / np.sqrt(own["var"] + float(config.get("eps", 1e-5)))
                expand = (slice(None),) + (None,) * (len(current) - 1)
                node = Affine(name, "BatchNorm", (tensor,), out, factor[expand],
                              (own["beta"] - factor * own["mean"])[expand])
            elif kind == "activation":
                function = str(config.get("name", "custom"))
                if function not in ACTIVATIONS:
                    raise ModelFileError(f"{where}: layer {i} is a polynomial {function!r} with no float function "
                                         f"of that name; the description holds one of {ACTIVATIONS}")
                node = Activation(name, OPERATOR[function], (tensor,), out, function)
            else:
                raise ModelFileError(f"{where}: layer {i} has kind {kind!r}")
        except KeyError as error:
            raise ModelFileError(f"{where}: layer {i} ({kind}) lacks the array {error}") from None
        nodes.append(node)
        shapes[out] = node.output_shape((current,))
        tensor = out
    return Graph("input", shapes["input"], tuple(nodes), tensor)
