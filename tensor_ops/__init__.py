"""Encrypted tensors and the einsum-to-HE planner (plus encrypted inference in ``tensor_ops.nn``).

Public API::

    tensor_ops.encrypt(ctx, array, layout=None) -> CipherTensor
    tensor_ops.einsum(expr, *operands)            # CipherTensors and numpy arrays, every numpy form
    tensor_ops.plan(expr, *shapes, params=..., encrypted=(...), layouts=None) -> Plan
    tensor_ops.plan(..., layouts="auto")          # also price client-side packings; encrypt with
                                                  # encrypt(ctx, x, layout=plan.input_layouts[n])
    CipherTensor: .shape .level .layout .decrypt(ctx) + - * / @ .sum(axis) .T .transpose(axes) [index]
    SlotLayout (frozen): where each element sits in the slots (strides, tiles, replicas, clean)
    Plan: .explain() .rotations() .depth() .cost() .input_layouts .execute(backend, *operands)
          .simulate(*arrays) (PlainBackend, no keys) .run(backend, operand registers) (low level)
    PlainBackend (numpy, no keys) and CKKSBackend (a context's evaluator) execute the same plan.

Keys follow the plan: ``CKKSContext.keygen(params, rotations=plan.rotations())``.
"""
from typing import TYPE_CHECKING

from hezk._lazy import lazy_package

# the names of the block below are imported on first use, not now:
# a command line's parser loads no engine
lazy_package(__name__)

if TYPE_CHECKING:  # static tools (and lazy_package, which reads this block) see the imports
    from .backends import CKKSBackend, PlainBackend
    from .layout import SlotLayout, Tile
    from .parse import EinsumSpec, EinsumSyntaxError, parse
    from .plan import CostModel, Plan, plan
    from .tensor import CipherTensor, einsum, encrypt
    from .activations import PolyActivation, fit_activation
    from .inference import Client, InputRangeError, InputRangeWarning, OutputRangeError, OutputRangeWarning, Server
    from .nn import (Activation, AvgPool2d, BatchNorm, BatchNorm1d, BatchNorm2d, Conv2d, Flatten, Linear,
                     ModelPlan, Poly, Residual, Sequential, Square, choose_parameters, load_model)

__all__ = ["encrypt", "einsum", "plan", "CipherTensor", "SlotLayout", "Tile", "Plan", "CostModel",
           "PlainBackend", "CKKSBackend", "EinsumSpec", "EinsumSyntaxError", "parse"]

__all__ += ["Sequential", "Linear", "Conv2d", "AvgPool2d", "Flatten", "BatchNorm", "BatchNorm1d", "BatchNorm2d",
            "Activation", "Square", "Poly", "Residual", "PolyActivation", "fit_activation", "ModelPlan",
            "choose_parameters", "load_model", "Client", "Server", "InputRangeError", "InputRangeWarning", "OutputRangeError", "OutputRangeWarning"]

from importlib.metadata import PackageNotFoundError as _NotInstalled, version as _version  # noqa: E402

try:
    __version__ = _version("hezk")  # one source: the version in pyproject.toml
except _NotInstalled:  # a source tree that was never installed
    __version__ = "0+unknown"
