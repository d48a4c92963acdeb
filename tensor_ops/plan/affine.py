"""The strategies of the model path's affine stages, priced by the planner's :class:`CostModel`.

An affine stage of the packed model path (``tensor_ops.model_plan``) is the block-diagonal map ``I (x) M`` on
the packed batch layout: ``batch`` samples per ciphertext, ``block`` slots each (axes (b, i), strides
(block, 1)), i.e. the einsum ``'bi,oi->bo'`` with plaintext weights ``M`` along the batch axis b. Two
strategies evaluate it:

* ``"packed"``: the generalized diagonals of the slot-space map, ``y = sum_k d_k * rot(v, k)`` over the
  nonzero offsets k only (``-(n_out - 1) <= k <= n_in - 1``), baby-step/giant-step with hoisted baby
  rotations (Halevi and Shoup, "Algorithms in HElib", CRYPTO 2014; "Faster homomorphic linear
  transformations in HElib", CRYPTO 2018). It needs no copy of the input and no clean padding, so it runs
  every stage (convolutions on strided slot positions, window sums, residual joins): what
  ``tensor_ops.inference.EncryptedModel`` has always run. Its counts: :func:`packed_counts`.
* ``"einsum"``: the einsum planner's own plan of ``'bi,oi->bo'`` on that layout (:func:`einsum_stage_plan`;
  with room for a copy of each vector, ``block >= 2 * max(n_in, n_out)``, the planner's cyclic diagonal
  method: one rotation makes the copy, then ``max(n_in, n_out)`` diagonals instead of ``n_in + n_out - 1``).
  It reads the slots around each sample, so it applies where their content is known (zeros packed by the
  client, or an activation's value of zero after an affine stage); the known padding's image is a plaintext
  (:func:`padding_correction`) subtracted with the bias.

:func:`choose_affine` prices both with one ``CostModel`` (rotations, hoisted rotations, plaintext products,
rescales, additions, and the rotation keys no other stage needs) and returns the cheaper with the other's
estimate; ``model_plan.stage_plans`` records the choice per stage and the server runs it
(:class:`EvaluatorBackend` runs a planner ``Plan`` on a CKKS evaluator with the model path's key routes and
scale).
"""
from __future__ import annotations

import hashlib
import math
from collections import Counter
from dataclasses import dataclass

import numpy as np

from crypto.errors import HEError, KeyMissingError

from ..backends import PlainBackend
from ..layout import SlotLayout
from .core import Plan
from .cost import DEFAULT_COSTS, CostModel
from .planner import plan as einsum_plan
from .steps import Mask, MatVecDiagonal, norm_shift

STRATEGIES = ("packed", "einsum")
EINSUM = "bi,oi->bo"
#: dense weights above which the einsum planner is not asked (its replicate strategy takes long on large maps)
MAX_PLANNED_ENTRIES = 1 << 16


def packed_counts(baby, giant, presum, diagonals: int) -> Counter:
    """The operations of the ``"packed"`` strategy in the planner's counting: a hoisted rotation per nonzero baby
    step, a rotation per nonzero giant step and window sum, a ct x pt product and an addition per diagonal,
    one rescale."""
    babies = sum(1 for b in baby if b)
    giants = sum(1 for m in giant if m) + sum(1 for k in presum if k)
    return Counter(hoisted_rotations=babies, rotations=giants, pt_mults=int(diagonals),
                   additions=int(diagonals) + giants, rescales=1)


def plan_counts(plan: Plan) -> Counter:
    """The operations of a planner ``Plan`` (the counts ``Plan.cost`` sums)."""
    counts = Counter()
    for step in plan.steps:
        counts.update(step.counts(plan.slots))
    return counts


def batch_layout(width: int, block: int, slots: int) -> SlotLayout:
    """The packed layout of a full ciphertext: ``slots // block`` samples of ``width`` values, strides (block, 1)."""
    batch = slots // block
    return SlotLayout.tiled((batch, int(width)), (int(block), 1), int(slots), (batch, int(width)))


def einsum_stage_plan(n_in: int, n_out: int, block: int, slots: int, costs: CostModel = DEFAULT_COSTS):
    """(plan, None) with the einsum planner's plan of ``'bi,oi->bo'`` from the packed layout of ``n_in`` values to
    that of ``n_out`` values (one ciphertext in, one out, one level, a clean output), or (None, why not)."""
    if 2 * max(n_in, n_out) > block:
        return None, f"needs block >= 2*max(n_in, n_out) = {2 * max(n_in, n_out)} slots per sample (has {block})"
    if n_in * n_out > MAX_PLANNED_ENTRIES:
        return None, f"{n_out}x{n_in} weights: above the {MAX_PLANNED_ENTRIES} entries the planner is asked for"
    layout_in, layout_out = batch_layout(n_in, block, slots), batch_layout(n_out, block, slots)
    batch = slots // block
    try:
        p = einsum_plan(EINSUM, (batch, n_in), (n_out, n_in), slots=slots, encrypted=(True, False),
                        layouts=[layout_in, None], costs=costs)
    except (HEError, ValueError) as error:
        return None, f"the planner refused: {error}"
    probe = np.arange(1, batch * n_out + 1, dtype=np.float64).reshape(batch, n_out)
    out = p.output_layout
    if p.depth() != 1 or len(p.output_regs) != 1 or out is None or not out.clean or out.shape != (batch, n_out) \
            or not np.array_equal(out.pack(probe)[0], layout_out.pack(probe)[0]):
        return None, "the planner's plan does not land on the packed layout in one level"
    return p, None


def rotation_split(plan: Plan) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(hoisted rotation steps, other rotation steps) of a plan, normalised to [-slots/2, slots/2) (the steps a
    ``StagePlan`` records as its baby and giant steps)."""
    hoisted, other, slots = set(), set(), plan.slots
    for step in plan.steps:
        if isinstance(step, MatVecDiagonal):
            babies = {norm_shift(r * step.stride, slots) for r in range(1, min(step.baby, step.dim))}
            hoisted |= babies
            other |= set(step.rotation_steps(slots)) - babies
        elif isinstance(step, Mask):
            hoisted |= {norm_shift(-b, slots) for _, b in step.babies}
            other |= {norm_shift(-g, slots) for g in step.giants}
        else:
            counts = step.counts(slots)
            (hoisted if counts["hoisted_rotations"] and not counts["rotations"] else other).update(
                step.rotation_steps(slots))
    hoisted.discard(0)
    other.discard(0)
    return tuple(sorted(hoisted)), tuple(sorted(other - hoisted))


@dataclass(frozen=True)
class AffineChoice:
    """The strategy chosen for one affine stage: its name, its estimate (``CostModel`` units, new rotation keys
    included), every strategy's estimate (None: not applicable, ``notes`` says why) and, for ``"einsum"``, the
    planner's plan with its (hoisted, other) rotation steps."""

    strategy: str
    cost: float
    priced: tuple[tuple[str, float | None], ...]
    notes: tuple[str, ...] = ()
    plan: Plan | None = None
    baby: tuple[int, ...] = ()
    giant: tuple[int, ...] = ()


def choose_affine(packed: Counter, packed_keys, n_in: int, n_out: int, block: int | None, slots: int, *,
                  padding_known: bool, other_keys=(), costs: CostModel = DEFAULT_COSTS) -> AffineChoice:
    """The cheaper strategy for an affine stage of ``n_in`` -> ``n_out`` values on the packed layout: ``packed``
    (the counts of the packed strategy) and ``packed_keys`` (its rotation steps) against the einsum planner's plan
    when it applies (``padding_known``: the slots outside each sample hold a known value; ``block`` None: only
    packed). Each estimate is ``costs.of(counts)`` plus ``costs.key`` per rotation key that ``other_keys`` (the
    other stages') lacks. Ties keep ``packed``."""
    other_keys = {norm_shift(k, slots) for k in other_keys}

    def estimate(counts, keys):
        new = {norm_shift(k, slots) for k in keys if norm_shift(k, slots)} - other_keys
        return round(costs.of(counts) + costs.key * len(new), 2)

    packed_cost = estimate(packed, packed_keys)
    if block is None:
        return AffineChoice("packed", packed_cost, (("packed", packed_cost), ("einsum", None)),
                            ("einsum: no layout given",))
    if not padding_known:
        p, why = None, "the slots around each sample hold values unknown at planning (after a residual join, " \
                       "strided conv positions or im2col patches)"
    else:
        p, why = einsum_stage_plan(n_in, n_out, block, slots, costs)
    if p is None:
        return AffineChoice("packed", packed_cost, (("packed", packed_cost), ("einsum", None)), (f"einsum: {why}",))
    baby, giant = rotation_split(p)
    einsum_cost = estimate(plan_counts(p), baby + giant)
    priced = (("packed", packed_cost), ("einsum", einsum_cost))
    notes = tuple(p.notes)
    if einsum_cost < packed_cost:
        return AffineChoice("einsum", einsum_cost, priced, notes, p, baby, giant)
    return AffineChoice("packed", packed_cost, priced, notes)


def dense_weights(rows, offsets, vals, n_out: int, n_in: int) -> np.ndarray:
    """The (n_out, n_in) matrix of a stage's slot-space nonzeros (output slot, input slot - output slot, value)."""
    matrix = np.zeros((n_out, n_in))
    np.add.at(matrix, (np.asarray(rows), np.asarray(rows) + np.asarray(offsets)), np.asarray(vals))
    return matrix


def padding_correction(plan: Plan, matrix, n_in: int, block: int, value: float) -> np.ndarray:
    """The plan's output (a slot vector) on an input holding ``value`` in every slot outside the samples' first
    ``n_in`` and zeros inside: the plan is linear in its input's slots, so subtracting this from its output on
    a ciphertext whose padding holds ``value`` leaves the output of the same data on clean padding."""
    slots = plan.slots
    if not value:
        return np.zeros(slots)
    vector = np.full(slots, float(value))
    vector[(np.arange(slots) % block) < n_in] = 0.0
    out = plan.run(PlainBackend(slots), [[vector], np.asarray(matrix, dtype=np.float64)])
    return np.real(np.asarray(out[0]))


class _Vector:
    __slots__ = ("vec",)

    def __init__(self, vec):
        self.vec = np.asarray(vec)


class EvaluatorBackend:
    """Runs a planner ``Plan`` on the model path's ciphertexts: rotations through ``routes`` (step -> the key steps
    composing it, ``tensor_ops.inference.rotation_routes``), those of one key hoisted together; plaintext
    constants encoded by ``encode(vector, level=, scale=)`` at the ciphertext's level and at ``scale`` (the model
    path's choice, so that the rescaled output lands on the parameters' scale). ``evaluator``: any
    ``crypto.ckks.evaluator_protocol.CKKSEvaluator``."""

    def __init__(self, evaluator, encode, routes: dict, slots: int, scale=None, encoded=None, keep: bool = True):
        self.ev, self._encode, self.routes, self.slots, self.scale = evaluator, encode, routes, int(slots), scale
        # (content digest, level) -> plaintext: the constants encoded so far (``encoded``: those of an earlier run);
        # ``keep=False`` encodes each where it is used and keeps none (a stage above a server's weight budget)
        self.encoded: dict = {} if encoded is None else dict(encoded)
        self.keep = bool(keep)
        # ``crypto.ckks.linear.bsgs_sum`` (the planner's diagonal method runs through it) uses the evaluator's
        # fused ct x pt accumulation and threads where it has them, as on the packed path
        if hasattr(evaluator, "mul_plain_sum"):
            self.mul_plain_sum = self._mul_plain_sum
        self.thread_safe = bool(getattr(evaluator, "thread_safe", False))

    def _route(self, k):
        step = norm_shift(k, self.slots)
        if step == 0:
            return ()
        route = self.routes.get(step)
        if route is None:
            raise KeyMissingError(f"the plan rotates by {step}, which the stage's keys do not make")
        return route

    def rotate(self, x, k):
        for key in self._route(k):
            x = self.ev.rotate(x, key)
        return x

    def rotate_many(self, x, ks):
        single = {int(k): self._route(k)[0] for k in ks if len(self._route(k)) == 1}
        hoisted = self.ev.rotate_hoisted(x, sorted(set(single.values()))) if single else {}
        out = {k: hoisted[key] for k, key in single.items()}
        out.update({int(k): self.rotate(x, k) for k in ks if int(k) not in out})
        return out

    def add(self, a, b):
        return self.ev.add(a, b)

    def sub(self, a, b):
        return self.ev.sub(a, b)

    def negate(self, a):
        return self.ev.neg(a)

    def _plaintext(self, b, level):
        if not isinstance(b, _Vector):
            return b
        key = (hashlib.blake2b(np.ascontiguousarray(b.vec).tobytes(), digest_size=16).digest(), level)
        plaintext = self.encoded.get(key)
        if plaintext is None:
            extra = {} if self.scale is None else {"scale": self.scale}
            plaintext = self._encode(b.vec, level=level, **extra)
            if self.keep:
                self.encoded[key] = plaintext
        return plaintext

    def multiply(self, a, b):
        return self.ev.mul(a, self._plaintext(b, a.level))

    mul = multiply

    def _mul_plain_sum(self, pairs):
        return self.ev.mul_plain_sum((a, self._plaintext(b, a.level)) for a, b in pairs)

    def rescale(self, x):
        return self.ev.rescale(x)

    def constant(self, vec):
        return _Vector(vec)


def explain_choice(strategy: str, priced) -> str:
    """``"strategy einsum (est. 14.3 rotations by the planner's CostModel; packed 22.1)"`` for a plan's text (n/a:
    the strategy does not apply to the stage)."""
    def show(cost):
        return "n/a" if cost is None or (isinstance(cost, float) and math.isnan(cost)) else f"{cost:.3g}"

    others = ", ".join(f"{name} {show(cost)}" for name, cost in priced if name != strategy)
    mine = dict(priced).get(strategy)
    return f"strategy {strategy} (est. {show(mine)} rotations by the planner's CostModel" + \
        (f"; {others}" if others else "") + ")"
