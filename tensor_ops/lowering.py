"""How each layer of a ``Sequential`` is lowered to einsum plans, for ``ModelPlan.explain``.

Every affine layer is an einsum with plaintext weights on the encrypted activations:
- ``Linear``: ``bi,oi->bo`` (a matrix product on a batch b of samples);
- ``Conv2d``: either by rotations, the dense ``(O*Ho*Wo) x (C*H*W)`` matrix of the convolution, ``bi,ji->bj``
  (diagonal method: each nonzero diagonal is a rotation and a plaintext product), or the einsum
  over patches ``bpk,ok->bop`` (im2col: P = Ho*Wo patches of K = C*kh*kw pixels, Chellapilla et al., 2006).
  Patches are free on the client when the convolution reads the model's input (the client packs them);
  deeper in the network they cost an encrypted im2col, itself a dense map. Both options are priced by the
  einsum planner's ``CostModel`` (``tensor_ops.plan``) at the model's parameters, per sample with as many
  samples per ciphertext as fit (patches take kh*kw/stride^2 times the slots), and the cheaper is named;
- ``AvgPool2d``, ``BatchNorm`` and ``Flatten`` are linear maps that fold into the neighbouring affine layers.
Consecutive affine layers are evaluated as one folded stage (one level): the map I (x) M on the packed batch
layout, 'bi,oi->bo' along the samples, run by the strategy the planner's ``CostModel`` chose for that stage
(``tensor_ops.plan.affine``: the packed generalized diagonals, or the einsum planner's own plan of the stage),
which ``ModelPlan.explain`` names per stage.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from crypto.errors import HEError
from tensor_ops.activations import TARGETS
from tensor_ops.plan import plan as einsum_plan


@dataclass(frozen=True)
class LayerLowering:
    """One layer: its shapes, the stage that evaluates it, the einsum it lowers to, and for a convolution
    the estimated costs per sample of the two lowerings (``CostModel`` units; None if the planner refused)."""

    kind: str
    input_shape: tuple[int, ...]
    output_shape: tuple[int, ...]
    stage: int | None
    einsum: str
    dense_cost: float | None = None
    patches_cost: float | None = None
    lowering: str | None = None  # what the packed server path runs for a convolution: "rotations" / "dense"
    rotations_cost: float | None = None  # the whole plan's estimated seconds per sample with each lowering
    dense_plan_cost: float | None = None
    patches_plan_cost: float | None = None  # None: the convolution does not read the model input (or was refused)

    @property
    def preferred(self) -> str | None:
        """"dense" or "patches" (the cheaper by the cost model), None for layers other than Conv2d."""
        if self.dense_cost is None and self.patches_cost is None:
            return None
        if self.patches_cost is None or (self.dense_cost is not None and self.dense_cost <= self.patches_cost):
            return "dense"
        return "patches"

    def describe(self) -> str:
        where = "folded away" if self.stage is None else f"stage {self.stage}"
        text = f"{self.kind} {self.input_shape} -> {self.output_shape}: {self.einsum} [{where}]"
        if self.preferred is not None:
            text += (f"; cost model per sample, batched: by rotations (dense matrix, diagonal method) "
                     f"{_show(self.dense_cost)} vs einsum over patches {_show(self.patches_cost)} -> prefers "
                     f"{self.preferred}")
        if self.lowering is not None:
            patches = "" if self.patches_plan_cost is None else f" vs patches {_show(self.patches_plan_cost)}"
            text += (f"; packed server path: rotations {_show(self.rotations_cost)} s/sample vs dense "
                     f"{_show(self.dense_plan_cost)}{patches} s/sample (plan estimates) -> runs {self.lowering}")
        return text


def _show(cost):
    return "n/a" if cost is None else f"{cost:.3g}"


def _per_sample(expr, shapes, footprint, params):
    """The einsum planner's cost estimate per sample when as many samples as fit (``footprint`` slots
    each, rounded up to a power of two) share the ciphertexts: the plan of the batched einsum over
    ``shapes`` (encrypted first operand, plaintext weights) divided by the batch; None when it cannot plan."""
    batch = max(1, params.slots // (1 << (footprint - 1).bit_length()))
    try:
        plan = einsum_plan(expr, (batch, *shapes[0]), shapes[1], params=params, encrypted=(True, False))
    except (HEError, ValueError):
        return None
    return float(plan.cost()["estimate"]) / batch


#: dense matrix entries above which a convolution's einsum alternatives are not priced (the generic planner
#: takes minutes on a CIFAR-sized dense map; the packed server path's own estimates still decide)
PRICED_ENTRIES = 1 << 22


def _conv_costs(layer, shape, out_shape, on_input, params):
    """(dense, patches) costs per sample; patches deeper in the network pay an encrypted im2col; (None, None)
    for a convolution whose dense matrix has more than ``PRICED_ENTRIES`` entries."""
    n_in, n_out = math.prod(shape), math.prod(out_shape)
    if n_in * n_out > PRICED_ENTRIES:
        return None, None
    patches, width = out_shape[1] * out_shape[2], math.prod(layer.weight.shape[1:])
    dense = _per_sample("bi,ji->bj", [(n_in,), (n_out, n_in)], max(n_in, n_out), params)
    patch = _per_sample("bpk,ok->bop", [(patches, width), (out_shape[0], width)], patches * width, params)
    if patch is not None and not on_input:
        im2col = _per_sample("bi,ji->bj", [(n_in,), (patches * width, n_in)], max(n_in, patches * width), params)
        patch = None if im2col is None else patch + im2col
    return dense, patch


def _einsum_text(layer, shape, out_shape, on_input):
    kind = layer.kind
    if hasattr(layer, "einsum_text"):  # a node of a hezk.model description (nn.GraphNode)
        return layer.einsum_text(shape, out_shape)
    if kind == "linear":
        return "einsum 'bi,oi->bo' (plaintext weights)"
    if kind == "conv2d":
        k = math.prod(layer.weight.shape[1:])
        im2col = "client-packed" if on_input else "encrypted im2col"
        return (f"einsum 'bi,ji->bj' with the dense {math.prod(out_shape)}x{math.prod(shape)} matrix, or "
                f"'bpk,ok->bop' over {out_shape[1] * out_shape[2]} patches of {k} ({im2col}); "
                f"stride {layer.stride}, padding {layer.padding}")
    if kind == "avgpool2d":
        return f"linear map: mean of {layer.kernel_size}x{layer.kernel_size} windows, stride {layer.stride}"
    if kind == "batchnorm":
        return "per-channel scale and shift, folded into the preceding layer"
    if kind == "flatten":
        return "reshape (no operation)"
    poly = layer.poly
    degree = f"{layer.degree}" + (f" (effective {poly.degree})" if poly.degree != layer.degree else "")
    text = f"polynomial {poly.name} of degree {degree}, depth {poly.depth} (power-of-two giant steps)"
    if poly.name == "square" or poly.name not in TARGETS:
        return text
    low, high = poly.interval
    return f"{text}, fitted on [{low:.4g}, {high:.4g}] (max error {poly.max_error():.3g} there)"


def lower_layers(layers, input_shape, stage_of_layer, params) -> tuple[LayerLowering, ...]:
    """A ``LayerLowering`` per layer; ``stage_of_layer`` from ``Sequential.compile``."""
    result, shape = [], tuple(input_shape)
    for index, (layer, stage) in enumerate(zip(layers, stage_of_layer)):
        on_input = index == 0
        out_shape = tuple(layer.output_shape(shape))
        dense = patches = None
        if layer.kind == "conv2d":
            dense, patches = _conv_costs(layer, shape, out_shape, on_input, params)
        result.append(LayerLowering(layer.kind, shape, out_shape, stage, _einsum_text(layer, shape, out_shape, on_input),
                                    dense, patches))
        shape = out_shape
    return tuple(result)
