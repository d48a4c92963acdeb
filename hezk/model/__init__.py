"""hezk.model: the model description both engines share, and its readers.

A model is a ``Graph`` of tensor operations (``hezk.model.graph``): contractions written as einsums with a
constant operand, elementwise activations, residual additions, reshapes and transposes; immutable, with a
float reference forward (batch first) and a digest (its identity). ``load`` reads ONNX (``read_onnx``) or
hezk's ``.npz`` (``read_npz``; ``save_npz`` writes it). This package depends on numpy and onnx only: the
engines (``tensor_ops`` for encrypted inference, ``proofs`` for sumcheck proofs) each lower a Graph to their
own form and never import each other.
"""
from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version as _version

from .errors import MissingInputShape, ModelFileError, UnsupportedOperator
from .graph import (ACTIVATIONS, Activation, Add, Affine, Bilinear, ClientOutput, ClientStep, Contraction, Graph,
                    LayerNorm, MaxPool, Node, Patches, Reshape, Softmax, Transpose, activate, as_batch, in_form,
                    input_form, input_forms_text)
from .npz import NAME_AN_ACTIVATION, read_archive, read_npz, save_npz
from .onnx_reader import read_onnx

try:
    __version__ = _version("hezk")
except PackageNotFoundError:  # a source tree that is not installed
    __version__ = "0+unknown"

__all__ = ["ACTIVATIONS", "as_batch", "in_form", "input_form", "input_forms_text", "Activation", "Add", "Affine", "Bilinear", "ClientOutput", "ClientStep", "Contraction", "MaxPool", "Graph", "MissingInputShape", "ModelFileError",
           "LayerNorm", "NAME_AN_ACTIVATION", "Node", "Patches", "Reshape", "Softmax", "Transpose", "UnsupportedOperator", "activate",
           "is_onnx", "load", "read_archive", "read_npz", "read_onnx", "save_npz", "__version__"]


def is_onnx(path) -> bool:
    """Whether ``path`` is not a zip archive and is named ``.onnx`` (or parses as an ONNX model)."""
    with open(path, "rb") as handle:
        head = handle.read(4)
    return not head.startswith(b"PK\x03\x04") and (str(path).lower().endswith(".onnx") or head[:1] == b"\x08")


def load(path, input_shape=None) -> Graph:
    """The description of the model file at ``path``: ONNX or hezk ``.npz`` (``input_shape`` for files
    that do not state the sample shape). Raises ModelFileError (UnsupportedOperator) naming the problem."""
    try:
        onnx_file = is_onnx(path)
    except (OSError, ValueError) as error:  # ValueError: a path with a NUL byte
        raise ModelFileError(f"model file {path!s:.200}: cannot be read ({getattr(error, 'strerror', None) or error})"
                             ) from None
    return read_onnx(path, input_shape) if onnx_file else read_npz(path, input_shape)
