"""Einsum -> a printable HE plan: Pack, Replicate, Multiply, RotateSum, Mask, Rescale (and a few helpers).

Public surface::

    p = tensor_ops.plan("ij,jk->ik", (8, 8), (8, 8), params=params, encrypted=(True, False))
    print(p.explain())          # the packing, the strategy chosen and why, every step
    p.rotations()               # exact rotation steps to give CKKSContext.keygen(rotations=...)
    p.depth()                   # levels consumed (multiplications and masks, each followed by a rescale)
    p.cost()                    # counts: rotations (hoisted ones apart), multiplies, ciphertexts, keys
    p.input_layouts             # how to encrypt each operand (layouts="auto" may ask for client packing)
    p.run(backend, operands)    # operands: lists of backend ciphertexts (encrypted) or numpy arrays (plain)
    p.simulate(*arrays)         # the same steps on the PlainBackend (numpy), no keys

Lowering (each operand in its current :class:`SlotLayout`; nothing here touches a key):

1. repeated indices of an encrypted operand become a diagonal layout (free: strides add up), size-1
   broadcast axes are squeezed (free); plaintext operands are combined in the clear with numpy;
2. indices private to one encrypted operand are summed by rotate-and-sum;
3. operands are contracted pairwise, each pair by the cheapest of these strategies (cost model:
   rotations, hoisted rotations, multiplies, rescales and new rotation keys):

   * replicate-multiply-reduce: one operand (the anchor) keeps its layout; the indices it lacks are
     appended at new slot strides (inside the ciphertext while they fit, across extra ciphertext
     tiles after that: tiling, never an abort) and filled by rotate-and-add replication; the other
     operand is moved there by one masked baby-step/giant-step diagonal move (a ``Mask`` step:
     plaintext 0/1 diagonals, hoisted baby rotations, shared giant rotations) and replicated along
     the anchor's other axes; a plaintext operand is simply packed in the clear. Both anchors are
     tried. SIMD multiply, rescale, rotate-and-sum over contracted axes, add the tiles;
   * output-stationary: kept indices keep their native strides, contracted ones go outer (and across
     tiles), so each operand moves only its contracted axis (large encrypted matmuls);
   * skewed diagonal products for two encrypted matrices ``x[b.., m, k] y[b.., n, k]`` (attention's scores and
     weighted sum; Jiang, Kim, Lauter and Song, CCS 2018, as THOR uses them): both operands skewed once, then per
     step one rotation by 1 and one by a row of each (a masked wrap), products accumulated in place, one rescale:
     O(K) rotations per output ciphertext and the output compact (``skewed``);
   * the diagonal method of Halevi and Shoup ("Algorithms in HElib", CRYPTO 2014) with
     baby-step/giant-step and hoisted rotations ("Faster homomorphic linear transformations in
     HElib", CRYPTO 2018) for ``x[..., k] M[k, j]`` with ``M`` plaintext, batched over x's other axes;
4. the result's axes are put in output order (free: a layout transpose).

With ``layouts="auto"`` the planner also prices client-side packings (operands encrypted already
replicated, or with a copy for the diagonal method, or tiled straight into the stationary layout)
and keeps the cheapest; the notes say which strategy won and the estimates of the others.
Scaling: a sum over many tiles adds the tiles first and rotates-and-sums once (rotations are linear),
so ``'i,i->'`` costs log2(slots) rotations however many ciphertexts it spans; U tiles that need the same
moved operand share one register; a strategy whose floor (a multiply and rescale per U tile, a rotation
per output tile that sums) exceeds the cheapest plan found so far is not built. Planning work is linear in
the steps of the strategies built (``benchmarks/planning.py``; ``tests/tensor_ops/test_plan_scaling.py``).

The step vocabulary follows EinHops (Garimella, Ebel and Reagen, arXiv:2507.07972, 2025): pack,
expand by rotations, multiply, reduce by rotations.

Modules, each importing only those above it: ``cost`` (CostModel), ``steps`` (the step types), ``core``
(Plan: queries, explain, run, simulate, execute), ``builder`` (symbolic tensors and the step builder),
one per strategy with its client-side packing (``replicate``, ``stationary``, ``diagonal``; ``skewed`` without),
``build``
(build_plan / build_elementwise / build_scalar: the strategy chosen per pair), ``planner`` (plan()) and
``affine`` (the model path's affine stages: the packed generalized diagonals or this planner's own plan of
``'bi,oi->bo'`` on the packed layout, chosen by the same CostModel: ``choose_affine``; ``EvaluatorBackend`` runs
a Plan on a model server's evaluator).
"""
from __future__ import annotations

from .affine import STRATEGIES, AffineChoice, EvaluatorBackend, choose_affine
from .build import build_elementwise, build_plan, build_scalar
from .core import Plan, PlainPrep
from .cost import DEFAULT_COSTS, CostModel
from .diagonal import diagonal_layouts
from .planner import plan
from .replicate import prepacked_layouts
from .stationary import stationary_layouts
from .steps import (Add, Input, Mask, MatVecDiagonal, MulScalar, Multiply, Negate, Pack, Replicate, Rescale, Rotate,
                    RotateSum, Step, UnaryStep)

__all__ = ["Plan", "CostModel", "plan", "build_plan", "Step", "Input", "Pack", "Replicate", "RotateSum",
           "Multiply", "Rescale", "Mask", "MatVecDiagonal", "Add", "Rotate", "MulScalar", "Negate"]
__all__ += ["UnaryStep", "PlainPrep", "DEFAULT_COSTS", "build_elementwise", "build_scalar", "prepacked_layouts",
            "stationary_layouts", "diagonal_layouts", "STRATEGIES", "AffineChoice", "EvaluatorBackend", "choose_affine"]
