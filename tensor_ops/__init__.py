"""Encrypted tensors and the einsum-to-HE planner (plus encrypted inference in ``tensor_ops.nn``).

Public API::

    tensor_ops.encrypt(ctx, array, layout=None) -> CipherTensor
    tensor_ops.einsum(expr, *operands)            # CipherTensors and numpy arrays, every numpy form
    tensor_ops.plan(expr, *shapes, params=..., encrypted=(...), layouts=None) -> Plan
    CipherTensor: .shape .level .layout .decrypt(ctx) + - * @ .sum(axis) .T .transpose(axes)
    SlotLayout (frozen): where each element sits in the slots (strides, tiles, replicas)
    Plan: .explain() .rotations() .depth() .cost() .run(backend, operands) .simulate(*arrays)
    PlainBackend (numpy, no keys) and CKKSBackend (a context's evaluator) execute the same plan.
"""
from .backends import CKKSBackend, PlainBackend
from .layout import SlotLayout, Tile
from .parse import EinsumSpec, EinsumSyntaxError, parse
from .plan import CostModel, Plan, plan
from .tensor import CipherTensor, einsum, encrypt

__all__ = ["encrypt", "einsum", "plan", "CipherTensor", "SlotLayout", "Tile", "Plan", "CostModel",
           "PlainBackend", "CKKSBackend", "EinsumSpec", "EinsumSyntaxError", "parse"]
