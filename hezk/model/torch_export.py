"""A PyTorch module as a :class:`hezk.model.Graph`: exported to ONNX in memory, then read by the ONNX reader.

``from_torch(module, example_input)`` runs ``torch.onnx.export`` into a ``BytesIO`` (never a file) with the
module in eval mode (BatchNormalization then uses its running statistics, as the ONNX graph must; the module's
mode is restored afterwards), and reads the bytes with :func:`hezk.model.read_onnx`. The installed torch's
default exporter is tried first (torch >= 2.9: the ``torch.export``-based one, which needs ``onnxscript``); if
it fails, or writes operators the reader does not cover, the TorchScript exporter (``dynamo=False``) is tried
and a :class:`TorchExportWarning` says so. torch is optional: without it, :class:`TorchMissing` (an
ImportError) names ``pip install torch``. A foundation module: numpy and onnx, torch when called.
"""
from __future__ import annotations

import contextlib
import io
import logging
import warnings

import numpy as np

from .errors import ModelFileError
from .onnx_reader import read_onnx

__all__ = ["TorchExportWarning", "TorchMissing", "from_torch", "is_torch_module"]


class TorchMissing(ImportError):
    """``from_torch`` needs PyTorch, which is not installed."""


class TorchExportWarning(UserWarning):
    """The default ``torch.onnx`` exporter failed and the TorchScript exporter (``dynamo=False``) was used."""


def is_torch_module(value) -> bool:
    """Whether ``value`` is a ``torch.nn.Module``, without importing torch (a module exists only once it is)."""
    import sys

    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.nn.Module)


def _import_torch():
    try:
        import torch
    except ImportError as error:
        raise TorchMissing(f"from_torch needs PyTorch, which is not installed ({error}): pip install torch "
                           f"(or export the model to ONNX elsewhere and pass the .onnx file)") from None
    return torch


def _example_args(torch, module, example_input) -> tuple:
    """The positional inputs of the export as tensors in the module's dtype (arrays and lists converted)."""
    items = example_input if isinstance(example_input, tuple) else (example_input,)
    if not items:
        raise ModelFileError("example_input must be a tensor or array (a batch of inputs, batch first), got ()")
    dtype = next((p.dtype for p in module.parameters() if p.is_floating_point()), torch.float32)
    args = []
    for item in items:
        if not isinstance(item, torch.Tensor):
            try:
                array = np.asarray(item)
            except Exception as error:  # noqa: BLE001 (whatever numpy refuses to read)
                raise ModelFileError(f"example_input is not a tensor or array ({type(item).__name__}): "
                                     f"{error}") from None
            if array.dtype.kind not in "iuf" or array.size == 0:
                raise ModelFileError(f"example_input must be a non-empty array of numbers (batch first), got "
                                     f"dtype {array.dtype} and shape {array.shape}")
            item = torch.as_tensor(array, dtype=dtype)
        args.append(item)
    return tuple(args)


def _check_runs(torch, module, args) -> None:
    """The module runs on the example (in eval mode), else ModelFileError naming the example's shape."""
    training = module.training
    try:
        with torch.no_grad():
            module.eval()(*args)
    except Exception as error:  # noqa: BLE001 (a module raises whatever its layers raise)
        shapes = ", ".join(str(tuple(arg.shape)) for arg in args)
        raise ModelFileError(f"the module does not run on example_input of shape {shapes} (batch first): "
                             f"{type(error).__name__}: {str(error)[:300]}") from None
    finally:
        module.train(training)


@contextlib.contextmanager
def _quiet_export(module):
    """Eval mode for the export (restored after), the exporters' deprecation chatter and logs silenced."""
    training = module.training
    # the dynamo exporter logs a warning per missing torchvision operator, and torch.export its failures (which
    # the error or the warning of from_torch reports)
    loggers = [logging.getLogger(name) for name in ("torch.onnx", "torch.export", "torch._subclasses")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.CRITICAL)
    try:
        module.eval()
        with warnings.catch_warnings():
            for category in (DeprecationWarning, FutureWarning):
                warnings.simplefilter("ignore", category)
            yield
    finally:
        module.train(training)
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


def _export(torch, module, args, **options) -> bytes:
    buffer = io.BytesIO()
    torch.onnx.export(module, args, buffer, verbose=False, **options)
    return buffer.getvalue()


def from_torch(module, example_input, *, input_shape=None, dynamo=None):
    """The :class:`hezk.model.Graph` of a ``torch.nn.Module``, traced on ``example_input`` (a tensor or array, a
    batch of inputs, batch first; a tuple for several inputs) and read as ONNX: the same description an
    ``.onnx`` file of the model gives, so both halves (``hezk.compile``, ``hezk.commit``) take it. Only the
    operators the ONNX reader covers (README: Models) are read; another raises UnsupportedOperator naming it.
    ``input_shape``: the sample shape, for an export that does not state it. ``dynamo``: None tries the installed
    torch's default exporter, then the TorchScript one (with a TorchExportWarning); True or False uses that
    exporter only (``torch.onnx.export(..., dynamo=...)``).

    Raises TorchMissing (an ImportError) without torch, ModelFileError for anything else that is not a model."""
    torch = _import_torch()
    if not isinstance(module, torch.nn.Module):
        raise ModelFileError(f"module must be a torch.nn.Module, got {type(module).__name__}")
    if dynamo not in (None, True, False):
        raise ModelFileError(f"dynamo={dynamo!r} must be None (the default exporter, then TorchScript), True or False")
    args = _example_args(torch, module, example_input)
    _check_runs(torch, module, args)
    if dynamo is not None:
        with _quiet_export(module):
            try:
                data = _export(torch, module, args, dynamo=dynamo)
            except Exception as error:  # noqa: BLE001
                raise ModelFileError(f"torch.onnx.export(dynamo={dynamo}) failed: {type(error).__name__}: "
                                     f"{str(error)[:300]}") from None
        return read_onnx(data, input_shape)
    with _quiet_export(module):
        try:
            data = _export(torch, module, args)
        except Exception as error:  # noqa: BLE001 (the default exporter raises many types; retried below)
            first = f"the default torch.onnx exporter failed ({type(error).__name__}: {str(error)[:300]})"
        else:
            try:
                return read_onnx(data, input_shape)
            except ModelFileError as error:
                first = f"the default torch.onnx exporter wrote a model the ONNX reader refuses ({error})"
        try:
            data = _export(torch, module, args, dynamo=False)
        except Exception as error:  # noqa: BLE001
            raise ModelFileError(f"torch.onnx.export failed: {first}; the TorchScript exporter (dynamo=False) "
                                 f"failed with {type(error).__name__}: {str(error)[:300]}") from None
    graph = read_onnx(data, input_shape)  # an operator the reader does not cover is named here
    warnings.warn(TorchExportWarning(f"{first}; the model was exported with the TorchScript exporter "
                                     f"(dynamo=False) instead"), stacklevel=2)
    return graph
