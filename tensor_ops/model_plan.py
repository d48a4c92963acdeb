"""The compiled form of a model and its encrypted-inference plan (public, known before any key exists).

``AffineStage`` / ``ActivationStage`` (and ``ForkStage`` / ``JoinStage`` for residual blocks): what
``Sequential.compile`` folds a model's layers into. ``ModelPlan``:
the packed layout (``block`` slots per sample, ``batch`` samples per ciphertext), each stage's baby-step /
giant-step rotations, the Galois keys they need, operation counts and a time model; ``choose_parameters``:
the smallest secure CKKS parameters for a depth. The server half that runs a plan is ``tensor_ops.inference``.
"""
from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass, field, replace

import numpy as np

from crypto.ckks.bootstrap import BootstrapConfig
from crypto.errors import ParameterError, ShapeError
from crypto.params import HE_STANDARD_128, CKKSParameters
import hezk.threads
from hezk.memory import available_memory
from hezk.model.graph import activate
from tensor_ops.activations import PolyActivation
from tensor_ops.bootstrap_placement import bootstrap_cost, cached_bootstrap_plan, stage_levels
from tensor_ops.layout import SlotLayout
from tensor_ops.lowering import LayerLowering
from tensor_ops.packing import SparseMap, gather_patches, patch_gather
from tensor_ops.plan.affine import (STRATEGIES, AffineChoice, choose_affine, dense_weights, einsum_stage_plan,
                                   explain_choice, packed_counts, padding_correction, plan_counts,
                                   rotation_split)
from tensor_ops.plan.cost import DEFAULT_COSTS, CostModel


class AffineStage:
    """x -> matrix @ x + bias on flattened samples (the matrix held sparse: ``tensor_ops.packing.SparseMap``)."""

    depth = 1

    def __init__(self, matrix, bias):
        self.sparse = matrix if isinstance(matrix, SparseMap) else SparseMap.from_dense(matrix)
        bias = np.array(bias, dtype=np.float64)
        bias.setflags(write=False)
        self.bias = bias

    @property
    def matrix(self) -> np.ndarray:
        """The dense matrix (refused above ``MAX_DENSE_ENTRIES`` entries)."""
        n_out, n_in = self.sparse.shape
        if n_out * n_in > MAX_DENSE_ENTRIES:
            raise ShapeError(f"affine stage: dense matrix {n_out}x{n_in} exceeds the limit of {MAX_DENSE_ENTRIES} "
                             f"entries (use .sparse)")
        dense = self.sparse.toarray()
        dense.setflags(write=False)
        return dense

    @property
    def shape(self) -> tuple[int, int]:
        return self.sparse.shape

    def apply(self, x):
        return self.sparse.apply(x) + self.bias


MAX_DENSE_ENTRIES = 1 << 24


class ForkStage:
    """Keep the current value for a residual block's skip connection (no level)."""

    depth = 0
    kind = "fork"

    def __init__(self, n):
        self.n = int(n)


class JoinStage(AffineStage):
    """x -> x + matrix @ kept + bias, ``kept`` the value of the matching ``ForkStage`` (innermost first): the
    residual add, with the shortcut and the affine layers after the block folded into the map (no level)."""

    depth = 0


@dataclass(frozen=True, eq=False)
class ActivationStage:
    """t -> p(t) elementwise, t already normalised by the affine stage before."""

    poly: PolyActivation

    @property
    def depth(self):
        return self.poly.depth

    def apply(self, x):
        result = self.poly.evaluate(x)
        return result if not isinstance(result, float) else np.full_like(x, result)



@dataclass(frozen=True)
class ActivationFit:
    """What the plan states of one polynomial activation: its ``stage`` index, the function ``name``, the
    ``interval`` its polynomial was fitted on, the largest error |p - f| on a grid of that interval
    (``max_error``) and on the values its input took on the calibration data (``calibration_error``, None
    without calibration); for a ReLU, ``choice``: both options' errors on its calibrated interval (one fit, the
    composite sign) and which was taken, why (``tensor_ops.activations.ReluChoice.describe``)."""

    stage: int
    name: str
    degree: int
    interval: tuple[float, float]
    max_error: float
    calibration_error: float | None = None
    choice: str = ""

    def describe(self) -> str:
        low, high = self.interval
        on_data = ("" if self.calibration_error is None else
                   f", {self.calibration_error:.3g} on the calibration data")
        chosen = f"; on the calibrated interval: {self.choice}" if self.choice else ""
        return (f"stage {self.stage}: {self.name} of degree {self.degree} fitted on [{low:.4g}, "
                f"{high:.4g}]: max error {self.max_error:.3g} on the interval{on_data}{chosen}")


#: the margin an output range is widened by, as a share of the widest output's range (at least 1): the CKKS
#: noise and rounding stay far below it, an activation input outside its interval far above it
OUTPUT_MARGIN = 0.05


def value_bounds(stages, n_in: int, input_range=None):
    """(low, high) arrays: the values each output of ``stages`` (``AffineStage`` / ``ActivationStage`` /
    ``ForkStage`` / ``JoinStage`` on flattened samples of ``n_in`` values) can take while every fitted
    activation's input stays in its interval (normalised t in [-1, 1]) and, where given, every input value in
    ``input_range`` = (low, high); None when that does not bound them (no activation after an unbounded input,
    a square of an unbounded value). Interval arithmetic: an affine map sends the box c +- r to
    M c + b +- |M| r; an activation its box (intersected with [-1, 1]) to the exact range of its polynomial
    there (``PolyActivation.value_range``)."""
    box = None if input_range is None else (np.full(n_in, float(input_range[0])), np.full(n_in, float(input_range[1])))
    width, kept = n_in, []

    def mapped(stage, value):
        if value is None:
            return None
        center, radius = (value[0] + value[1]) / 2.0, (value[1] - value[0]) / 2.0
        sparse = stage.sparse
        spread = SparseMap(sparse.shape, sparse.rows, sparse.cols, np.abs(sparse.vals)).apply(radius[None])[0]
        middle = sparse.apply(center[None])[0] + stage.bias
        return middle - spread, middle + spread

    for stage in stages:
        if isinstance(stage, ForkStage):
            kept.append(box)
        elif isinstance(stage, JoinStage):
            skip = mapped(stage, kept.pop())
            box = None if box is None or skip is None else (box[0] + skip[0], box[1] + skip[1])
        elif isinstance(stage, AffineStage):
            box, width = mapped(stage, box), stage.shape[0]
        elif stage.poly.name == "square":  # exact for any input: bounded only by its input's box
            box = None if box is None else (np.where((box[0] <= 0) & (box[1] >= 0), 0.0,
                                                     np.minimum(box[0] ** 2, box[1] ** 2)),
                                            np.maximum(box[0] ** 2, box[1] ** 2))
        else:
            low, high = (-1.0, 1.0) if box is None else (np.clip(box[0], -1.0, 1.0), np.clip(box[1], -1.0, 1.0))
            low, high = np.minimum(low, high), np.maximum(low, high)
            ranger = getattr(stage.poly, "value_range", None)
            if ranger is None:  # a composite (``CompositeRelu``): its range on a fine grid of the whole interval
                values = np.asarray(stage.poly.evaluate(np.linspace(-1.0, 1.0, 8193)), dtype=np.float64)
                spare = 1e-6 * max(1.0, float(np.ptp(values)))
                ranger = lambda low, high, v=values, e=spare: (v.min() - e, v.max() + e)  # noqa: E731
            box = tuple(np.broadcast_to(v, (width,)).astype(np.float64) for v in ranger(low, high))
    if box is None or not (np.all(np.isfinite(box[0])) and np.all(np.isfinite(box[1]))):
        return None
    return box


def output_ranges(stages, n_in: int, input_range=None) -> dict:
    """The output range a plan states and its margin: ``{"output_range": (lows, highs), "output_margin": m}``
    from ``value_bounds`` (every activation input in its interval, every input value in ``input_range``), m =
    ``OUTPUT_MARGIN`` x the widest output's range (at least 1); ``{}`` when the outputs are not bounded."""
    bound = value_bounds(stages, n_in, input_range)
    if bound is None:
        return {}
    widest = float(np.max(bound[1] - bound[0])) if bound[0].size else 0.0
    return {"output_range": (tuple(bound[0].tolist()), tuple(bound[1].tolist())),
            "output_margin": OUTPUT_MARGIN * max(1.0, widest)}


def outputs_outside(outputs, output_range=None, margin: float = 0.0) -> np.ndarray:
    """Indices of the samples of ``outputs`` (samples, ...) with a value that is not finite or, given
    ``output_range`` = (lows, highs) per output value, outside [low - margin, high + margin]: a decrypted
    sample there had an activation input outside its interval (its result, and its ciphertext's, are wrong)."""
    flat = np.asarray(outputs, dtype=np.float64).reshape(len(outputs), -1)
    bad = ~np.all(np.isfinite(flat), axis=1)
    if output_range is not None:
        with np.errstate(invalid="ignore"):
            bad |= np.any((flat < np.asarray(output_range[0]) - margin)
                          | (flat > np.asarray(output_range[1]) + margin), axis=1)
    return np.flatnonzero(bad)


# ----------------------------------------------------------------------------------------------------------
# Encrypted evaluation: every affine stage as a block-diagonal matrix-vector product by the diagonal
# method with baby-step/giant-step rotations (Halevi and Shoup, "Algorithms in HElib", CRYPTO 2014;
# "Faster homomorphic linear transformations in HElib", CRYPTO 2018).
#
# Layout: sample b of a ciphertext sits in slots [b*block, b*block + n) with zeros after it, block a power
# of two >= every stage's width, so one ciphertext carries slots // block samples. On the whole slot
# vector v the stage is the block-diagonal map L = I (x) M, and L v = sum_k d_k * rot(v, k) with
# d_k[b*block + r] = M[r, r + k]: only offsets -(n_out - 1) <= k <= n_in - 1 occur and a row r >= n_out
# or a column outside [0, n_in) contributes zero, so the output is again clean in the same layout (no
# masks, no extra level) and whatever the activation leaves in the padding is never read.
# With k = m_j + i (0 <= i < g): L v = sum_j rot(sum_i rot(d_{m_j + i}, -m_j) * rot(v, i), m_j), so
# g - 1 hoisted baby rotations and one giant rotation per j replace one rotation per diagonal.

@dataclass(frozen=True)
class StagePlan:
    """Public description of one stage: an affine map's rotations (``presum``: window sums v += rot(v, k) run
    first; then the diagonal method with offsets k = m + i, m a giant step, i a baby step, split as
    m = low + g * ((k - low) // g) with low the smallest giant step), or an activation's depth."""

    kind: str
    n_in: int
    n_out: int
    depth: int
    baby: tuple[int, ...] = ()
    giant: tuple[int, ...] = ()
    diagonals: int = 0
    ct_ct_multiplications: int = 0
    presum: tuple[int, ...] = ()
    g: int = 0
    nonzeros: int = 0   # an affine stage's nonzero weights (its slot-space map's entries: the memory estimate)
    # how an affine stage runs (``tensor_ops.plan.affine``): "packed" (the generalized diagonals above) or "einsum"
    # (the einsum planner's plan of 'bi,oi->bo' on the packed layout; baby: its hoisted rotations, giant: the
    # others); "" for the other kinds. ``priced``: each strategy's estimate in CostModel units (None: n/a)
    strategy: str = ""
    priced: tuple = ()

    @property
    def rotations(self) -> tuple[int, ...]:
        return tuple(sorted(set(self.baby) | set(self.giant) | set(self.presum)))

    def split(self, k: int) -> tuple[int, int]:
        """(giant step m, baby step i) with m + i = k."""
        if self.g:
            low = min(self.giant)
            m = low + self.g * ((k - low) // self.g)
            return m, k - m
        babies = set(self.baby)
        for m in self.giant:
            if k - m in babies:
                return m, k - m
        raise ShapeError(f"offset {k} is not a giant step plus a baby step of this stage")


def _offsets(matrix):
    """The offsets k with a nonzero diagonal d_k[r] = M[r, r + k]."""
    rows, cols = np.nonzero(matrix)
    return np.unique(cols - rows)


def _split(offsets, g):
    """(baby steps, giant steps) writing every offset k as low + g*j + i with 0 <= i < g."""
    low = int(offsets[0])
    shifted = offsets.astype(np.int64) - low
    quotient = shifted // g  # non-decreasing (offsets sorted): distinct values where it changes, no sort
    giant = low + g * quotient[np.concatenate(([True], quotient[1:] != quotient[:-1]))]
    baby = np.flatnonzero(np.bincount(shifted % g, minlength=g))
    return tuple(baby.tolist()), tuple(giant.tolist())


def _candidate_gs(span):
    """Baby-step sizes worth trying: 1 .. about 4 sqrt(span), and the powers of two up to span (the strides
    of channel-major layouts)."""
    small = range(1, min(span, 4 * math.isqrt(span) + 4) + 1)
    return sorted(set(small) | {1 << e for e in range(span.bit_length() + 1) if 1 << e <= 2 * span})


# relative costs for choosing splits (a key switch = 1): a hoisted baby rotation shares its decomposition
_HOISTED, _KEY_WEIGHTS = 0.5, (1.0, 4.0, 16.0, 64.0, 256.0, 4096.0)


def _split_candidates(offsets):
    """For each baby-step size g worth trying: (g, baby, giant, the nonzero steps as a set, rotations cost
    without keys)."""
    span = int(offsets[-1] - offsets[0]) + 1
    q = int(np.gcd.reduce(offsets - offsets[0])) if len(offsets) > 1 else 1
    candidates = set(_candidate_gs(span))
    if q > 1:  # offsets on a lattice (the patches layout: multiples of P): baby steps along it
        candidates |= {q * g for g in _candidate_gs(span // q + 1)}
    result = []
    for g in sorted(candidates):
        baby, giant = _split(offsets, g)
        steps = set(baby) | set(giant)
        steps.discard(0)
        result.append((g, baby, giant, steps, _HOISTED * (len(baby) - (0 in baby)) + len(giant) - (0 in giant)))
    return result


def _splits(offset_sets, weight, memo=None):
    """Per stage, the (g, baby, giant) minimising rotations + ``weight`` x keys not already chosen (greedy
    in stage order; of equal costs the smallest g). ``memo``: a dict shared by the calls of one planning (the
    lowerings tried share most stages): each stage's candidate splits, computed once, sorted by rotations so
    that the search stops at the first whose rotations alone exceed the best cost (``naive_splits`` in the
    tests is the full search)."""
    memo = {} if memo is None else memo
    prefixes = memo.setdefault("prefixes", {})     # (weight, the stages so far) -> (choice, keys after it)
    chosen, keys, path = [], set(), (float(weight),)
    for offsets in offset_sets:
        if offsets is None or not len(offsets):
            chosen.append((0, (), ()))
            continue
        key = offsets.tobytes()
        path += (key,)
        if path in prefixes:    # the keys so far follow from the path: a lowering tried before shares it
            choice, after = prefixes[path]
            chosen.append(choice)
            keys = after
            continue
        if key not in memo:
            candidates = _split_candidates(offsets)
            memo[key] = sorted(((c[4], i, c) for i, c in enumerate(candidates)), key=lambda item: item[:2])
        best = None
        for rotations, index, (g, baby, giant, steps, _) in memo[key]:
            if best is not None and rotations > best[0]:
                break  # cost >= rotations: no later candidate (sorted by rotations) is as cheap
            cost = rotations + weight * (len(steps - keys) if keys else len(steps))
            if best is None or (cost, index) < best[:2]:
                best = (cost, index, g, baby, giant, steps)
        chosen.append(best[2:5])
        keys = frozenset(keys | best[5])
        prefixes[path] = (best[2:5], keys)
    return chosen, set(keys)


def power_of_two_keys(steps, slots) -> tuple[int, ...]:
    """The power-of-two rotation keys whose sums make every step of ``steps`` (modulo ``slots``)."""
    keys = set()
    for step in steps:
        residue = int(step) % slots
        keys |= {1 << e for e in range(residue.bit_length()) if residue >> e & 1}
    return tuple(sorted(keys))


def _nonzeros(stage) -> int:
    """The nonzero weights of an affine stage (``AffineStage``'s sparse matrix, ``PackedAffine``'s slot-space map)."""
    return int(len(stage.sparse.rows) if isinstance(stage, AffineStage) else len(stage.rows))


def stage_plans(stages, n_in, *, slots=None, key_bytes=0, key_budget=None, memo=None, block=None,
                costs=DEFAULT_COSTS, force=None):
    """(StagePlans, key steps or None): one StagePlan per stage (``AffineStage`` / ``PackedAffine`` /
    ``ActivationStage``). Each affine stage gets the baby-step size g that minimises its key switches plus a
    weight per new Galois key; when the keys exceed ``key_budget`` bytes (``key_bytes`` per key) the weight
    grows (fewer baby steps, fewer keys), and past the largest weight the keys become the powers of two and
    every step a composite rotation (returned as the key steps). A budget below even that raises
    ParameterError naming it. ``memo``: shared by the plans of one model (``_splits``).

    With ``block`` (the packed layout's slots per sample), every affine stage then asks the einsum planner
    (``tensor_ops.plan.affine.choose_affine``, priced by ``costs``) whether its own plan of 'bi,oi->bo' on the
    packed layout is cheaper than the packed strategy, and records the strategy chosen and both estimates
    (``StagePlan.strategy`` / ``priced``); without ``block`` every affine stage is "packed". ``force``: {stage
    index: strategy} overriding the choice (to measure a strategy the cost model did not choose; "einsum" where
    it does not apply raises ShapeError)."""
    offsets = []
    for stage in stages:
        if isinstance(stage, ActivationStage) or getattr(stage, "kind", None) == "fork":
            offsets.append(None)  # no rotations
        elif isinstance(stage, AffineStage):
            offsets.append(np.unique(stage.sparse.cols - stage.sparse.rows))
        else:
            offsets.append(stage.distinct_offsets)
    width = n_in  # the client's packed values per sample (the first stage's input)
    presums = [tuple(getattr(stage, "presum", ())) for stage in stages]
    key_steps, splits, fewest = None, None, None
    for weight in _KEY_WEIGHTS:
        splits, keys = _splits(offsets, weight, memo)
        keys |= {k for p in presums for k in p if k}
        if fewest is None or len(keys) < len(fewest[1]):
            fewest = (splits, keys)
        if key_budget is None or len(keys) * key_bytes <= key_budget:
            break
    else:
        splits = fewest[0]
        keys = power_of_two_keys(fewest[1], slots)
        composite = len(keys) < len(fewest[1])
        if not composite:
            keys = tuple(sorted(fewest[1]))
        if len(keys) * key_bytes > key_budget:
            raise ParameterError(f"key_budget={int(key_budget)} bytes is too small for any plan: the fewest keys "
                                 f"({len(keys)} rotation keys{' of powers of two' if composite else ''}) take {len(keys) * key_bytes} bytes")
        key_steps = keys if composite else None
    plans = []
    for stage, offs, (g, baby, giant), presum in zip(stages, offsets, splits, presums):
        if isinstance(stage, ActivationStage):
            ct_ct, _ = stage.poly.multiplications
            plans.append(StagePlan("activation", n_in, n_in, stage.depth, ct_ct_multiplications=ct_ct))
        elif offs is None:
            plans.append(StagePlan("fork", n_in, n_in, 0))
        elif stage.depth == 0:  # a join: the skip's map, on the skip, then one addition
            n_out, width = (stage.sparse.shape if isinstance(stage, AffineStage) else (stage.n_out, stage.n_in))
            plans.append(StagePlan("join", width, n_out, 0, baby, giant, len(offs), presum=presum, g=g,
                                   nonzeros=_nonzeros(stage), strategy="packed"))
        else:
            n_out, width = (stage.sparse.shape if isinstance(stage, AffineStage) else (stage.n_out, stage.n_in))
            plans.append(StagePlan("affine", width, n_out, 1, baby, giant, len(offs), presum=presum, g=g,
                                   nonzeros=_nonzeros(stage), strategy="packed"))
            n_in = n_out
    if block is not None and slots is not None and key_steps is None:
        plans = _choose_strategies(stages, plans, width, block, slots, costs, key_bytes, key_budget, memo,
                                   force or {})
    return tuple(plans), key_steps


def known_paddings(stages, width: int) -> list:
    """Per stage: the value every slot of a sample's block outside its first ``n_in`` holds when the stage starts,
    where that is known at planning and the stage maps slots [0, n_in) to [0, n_out) (a ``PackedAffine`` that is
    not a join, without window sums); None elsewhere. The client packs zeros after the ``width`` input values;
    an affine stage leaves zeros after its outputs (its diagonals and bias are zero there); an activation turns
    a known value v into p(v); a residual join makes it unknown (the einsum strategy's precondition,
    ``tensor_ops.plan.affine``)."""
    state, kept, result = (int(width), 0.0), [], []
    for stage in stages:
        if isinstance(stage, ActivationStage):
            result.append(None)
            if state is not None:
                state = (state[0], float(np.real(np.asarray(stage.apply(np.array([state[1]])))).ravel()[0]))
            continue
        if getattr(stage, "kind", None) == "fork":
            result.append(None)
            kept.append(state)
            continue
        if not hasattr(stage, "offsets"):          # a compiled AffineStage: not the packed server's
            result.append(None)
            state = None
            continue
        rows, cols = np.asarray(stage.rows), np.asarray(stage.rows) + np.asarray(stage.offsets)
        clean_out = (not len(rows) or int(rows.max()) < stage.n_out) and \
            (not len(stage.bias_slots) or int(np.max(stage.bias_slots)) < stage.n_out)
        if stage.depth == 0:                        # a join: the kept skip's map added to the branch
            result.append(None)
            kept.pop()
            state = None
            continue
        ready = state is not None and state[0] == stage.n_in and not stage.presum and clean_out \
            and (not len(cols) or (int(cols.min()) >= 0 and int(cols.max()) < stage.n_in))
        result.append(state[1] if ready else None)
        state = (stage.n_out, 0.0) if clean_out and not stage.presum else None
    return result


def einsum_stage(stage, plan_stage: StagePlan, padding, block: int, slots: int):
    """(plan, weights, correction) to run an affine stage by the einsum planner's plan (``plan_stage.strategy ==
    "einsum"``): the planner's plan of 'bi,oi->bo' on the packed layout of ``block`` slots per sample, the stage's
    (n_out, n_in) weights, and the slot vector its known ``padding`` (``known_paddings``) adds to the output
    (subtracted with the bias). ShapeError when the stage cannot run so or the plan rotates by a step the
    ``StagePlan`` does not declare (the client made keys for the declared steps only)."""
    where = f"stage with strategy 'einsum' ({plan_stage.n_in} -> {plan_stage.n_out})"
    if padding is None or not hasattr(stage, "offsets") or stage.depth != 1 or stage.presum:
        raise ShapeError(f"{where}: the model's stage does not map a clean packed layout (the plan is not this "
                         f"model's)")
    plan, why = einsum_stage_plan(stage.n_in, stage.n_out, block, slots)
    if plan is None:
        raise ShapeError(f"{where}: {why}")
    declared = {k % slots for k in plan_stage.rotations}
    missing = sorted(k for k in plan.rotations() if k % slots not in declared)
    if missing:
        raise ShapeError(f"{where}: the einsum planner's plan rotates by {missing}, which the plan's stage does not "
                         f"declare")
    weights = dense_weights(stage.rows, stage.offsets, stage.vals, stage.n_out, stage.n_in)
    return plan, weights, padding_correction(plan, weights, stage.n_in, block, padding)


def _choose_strategies(stages, plans, width, block, slots, costs, key_bytes, key_budget, memo, force):
    """The plans with each affine stage's strategy chosen by ``choose_affine`` (in stage order, each priced
    against the rotation keys of the others as chosen so far); all "packed" again if the keys then exceed
    ``key_budget``."""
    original, plans = tuple(plans), list(plans)
    paddings = known_paddings(stages, width)
    cache = memo.setdefault("strategies", {}) if memo is not None else {}
    for index, (stage, plan) in enumerate(zip(stages, plans)):
        if plan.kind not in ("affine", "join"):
            continue
        others = {k for j, p in enumerate(plans) if j != index for k in p.rotations}
        counts = packed_counts(plan.baby, plan.giant, plan.presum, plan.diagonals)
        padding = paddings[index] if plan.kind == "affine" else None
        key = (plan.n_in, plan.n_out, block, slots, padding is not None, tuple(sorted(counts.items())),
               plan.rotations, frozenset(others), costs)
        if key not in cache:
            cache[key] = choose_affine(counts, plan.rotations, plan.n_in, plan.n_out,
                                       block if plan.kind == "affine" else None, slots,
                                       padding_known=padding is not None, other_keys=others, costs=costs)
        choice: AffineChoice = cache[key]
        wanted = force.get(index, choice.strategy)
        if wanted not in STRATEGIES:
            raise ParameterError(f"force[{index}]={wanted!r} must be one of {STRATEGIES}")
        if wanted == "einsum" and dict(choice.priced).get("einsum") is None:
            raise ShapeError(f"stage {index} cannot run by the einsum planner's plan: {'; '.join(choice.notes)}")
        if wanted != choice.strategy:
            if wanted == "einsum":
                p, _ = einsum_stage_plan(plan.n_in, plan.n_out, block, slots, costs)
                baby, giant = rotation_split(p)
                choice = replace(choice, strategy="einsum", plan=p, baby=baby, giant=giant)
            else:
                choice = replace(choice, strategy="packed", plan=None)
        if choice.strategy == "einsum":
            plans[index] = replace(plan, baby=choice.baby, giant=choice.giant, presum=(), g=0,
                                   diagonals=int(plan_counts(choice.plan)["pt_mults"]), strategy="einsum",
                                   priced=choice.priced)
        else:
            plans[index] = replace(plan, priced=choice.priced)
    keys = {k for p in plans for k in p.rotations if k}
    if key_budget is not None and len(keys) * key_bytes > key_budget:
        if force:
            raise ParameterError(f"the strategies forced need {len(keys)} rotation keys, over key_budget={key_budget}")
        return [old if p.strategy == "einsum" else p for old, p in zip(original, plans)]
    return plans


# Time model: seconds per operation at N = 2^13 with 5 + 2 limbs of 30 bits, measured on this machine (re-measured
# 2026-11-21 after the crypto kernels got faster; the plan's estimate was 5x too high before)
# (baby-step rotations are hoisted, hence cheaper; a ct x ct product includes relinearization and rescale), scaled
# linearly in N and in the number of limbs. Used by ``ModelPlan.estimated_seconds``.
_SECONDS = {"baby_rotation": 0.0015, "giant_rotation": 0.0025, "ct_ct": 0.0026, "ct_pt": 0.00008, "rescale": 0.0007,
            "encode": 0.0006}
_REFERENCE_SIZE = (1 << 13) * 7

_LOG_SCALE = 30
_WIDE_SCALE = 50  # levels of two primes (25 + 26 bits) where the ring chosen for 30-bit levels has room


def choose_parameters(depth: int, min_slots: int = 1, log_scale: int | None = None):
    """The smallest 128-bit-secure CKKS parameters with exactly ``depth`` levels and >= ``min_slots`` slots.

    The ring is the smallest that holds ``depth`` levels of one 30-bit prime each (scale 2^30), a base level
    of two primes (2^30 of headroom for the outputs) and two special primes with the fewest key-switching
    digits the noise check accepts. ``log_scale=None`` (automatic) then takes, in that same ring, the wider
    scale 2^50 (levels of two primes, base level of three: 2^40 of headroom; special primes covering every
    key-switching digit) when it fits the security bound: one rescale's or key switch's rounding noise is
    about sqrt(N^2 / 18) (uniform ternary secret), 2^-15 of a 2^30 scale at N = 2^15 but 2^-35 of a 2^50
    one (``precision_bits``), at twice the limbs. ``log_scale=30`` / ``50`` forces one layout. Cached: the
    parameters are immutable and building them (finding NTT primes) takes about a second.
    """
    if isinstance(depth, bool) or not isinstance(depth, (int, np.integer)) or depth < 0:
        raise ParameterError(f"depth={depth!r} must be a non-negative integer")
    if log_scale is not None and log_scale not in (_LOG_SCALE, _WIDE_SCALE):
        raise ParameterError(f"log_scale={log_scale!r} must be None (automatic), {_LOG_SCALE} or {_WIDE_SCALE}")
    return _choose_parameters(int(depth), max(1, int(min_slots)), log_scale)


#: the preset the planner takes, with bootstraps placed, for a model deeper than every secure preset without
#: bootstrapping holds (``auto_parameters``)
BOOTSTRAP_PRESET = "N16_BOOT"


def deepest_secure_preset() -> tuple[str, int]:
    """(name, levels) of the 128-bit preset with the most levels, the bootstrapping one excluded (N16: 29)."""
    from crypto.params import PRESETS

    best = None
    for name in PRESETS:
        if name == BOOTSTRAP_PRESET or PRESETS[name].get("insecure"):
            continue
        levels = len(PRESETS[name]["log_q"]) - 1
        if best is None or levels > best[1]:
            best = (name, levels)
    return best


def auto_parameters(depth: int, bootstrap=None):
    """The planner's default parameters when none are named: None (``choose_parameters``: the smallest secure
    ring with ``depth`` levels) for a model within the levels of the deepest secure preset
    (``deepest_secure_preset``) or with ``bootstrap=False``; the bootstrappable preset ``BOOTSTRAP_PRESET`` (as
    CKKSParameters) for a deeper model, or whenever bootstrapping is asked for (``bootstrap`` True or a
    config): the plan then places the bootstraps. A deeper model is not given a ring of 2^17 and 60+ levels,
    whose keys alone outgrow a machine."""
    if isinstance(depth, bool) or not isinstance(depth, (int, np.integer)) or depth < 0:
        raise ParameterError(f"depth={depth!r} must be a non-negative integer")
    if bootstrap is False or (bootstrap is None and depth <= deepest_secure_preset()[1]):
        return None
    return _preset(BOOTSTRAP_PRESET)


@functools.lru_cache(maxsize=8)
def _preset(name: str) -> CKKSParameters:
    """``CKKSParameters.preset`` memoised (finding its primes takes about a second)."""
    return CKKSParameters.preset(name)


def precision_bits(params) -> float:
    """Bits of precision one operation keeps: log2(scale / rounding noise), the noise of a rescale or a key
    switch's ModDown about 4 standard deviations of sqrt(N (1 + 2N/3) / 12) in a slot (rounding error
    uniform in [-1/2, 1/2] per coefficient, times a uniform ternary secret of about 2N/3 nonzero
    coefficients, through the canonical embedding), at the smallest scale the levels drift to: 2^log_scale less
    ``params.scale_drift_bits`` (at most ``MAX_SCALE_DRIFT_BITS``, see ``check_scale_drift``). Errors then grow
    with the model's depth and width."""
    n = params.n
    return float(params.log_scale - params.scale_drift_bits - math.log2(4.0 * math.sqrt(n * (1 + 2 * n / 3) / 12)))


#: a plan refuses parameters whose natural scales stray further than this from 2^log_scale (bits): its precision
#: statements (``precision_bits``, the bootstrap's) are made at the scale Δ, and the bootstrap refuses inputs above
#: 2Δ (``crypto.ckks.bootstrap.Bootstrapper.bootstrap``)
MAX_SCALE_DRIFT_BITS = 1.0


def check_scale_drift(params) -> None:
    """ParameterError when the parameters' natural scales drift by more than MAX_SCALE_DRIFT_BITS (primes that
    cannot reach 2^log_scale: e.g. 31-bit primes under log_scale=27 drift by bits per level, doubling)."""
    drift = params.scale_drift_bits
    if drift > MAX_SCALE_DRIFT_BITS:
        raise ParameterError(f"the parameters' scales drift by {drift:.3g} bits from 2^{params.log_scale} over their "
                             f"levels (more than MAX_SCALE_DRIFT_BITS={MAX_SCALE_DRIFT_BITS}): their level primes do "
                             f"not multiply to about 2^log_scale, so no stated precision would hold; choose prime "
                             f"sizes whose products per level reach 2^{params.log_scale} (as the presets do)")


@functools.lru_cache(maxsize=32)
def _choose_parameters(depth: int, min_slots: int, log_scale):
    """``choose_parameters`` after validation (memoised)."""
    last_error = None
    for log_n in range(max(13, (2 * min_slots - 1).bit_length()), 18):
        narrow = None
        if log_scale != _WIDE_SCALE:
            narrow, last_error = _narrow(log_n, depth, last_error)
            if narrow is not None and log_scale == _LOG_SCALE:
                return narrow
        if narrow is not None or log_scale == _WIDE_SCALE:
            wide = _wide(log_n, depth)
            if wide is not None:
                return wide
        if narrow is not None:
            return narrow
    raise ParameterError(f"depth={depth} needs more levels than any 128-bit ring up to N=2^17 holds ({last_error})")


def _narrow(log_n, depth, last_error):
    """(parameters with 30-bit levels in the ring 2^log_n or None, the last refusal)."""
    if 120 + 30 * depth > HE_STANDARD_128.get(log_n, 0):
        return None, ParameterError(f"log2(QP) of {120 + 30 * depth} bits exceeds the 128-bit HE-standard bound "
                                    f"for N=2^{log_n}")
    try:
        primes = CKKSParameters.from_literal(dict(log_n=log_n, log_q=[[30, 30]] + [[_LOG_SCALE]] * depth,
                                                  log_p=[30, 30], log_scale=_LOG_SCALE, dnum=depth + 2))
    except ParameterError as error:
        return None, error
    try:
        check_scale_drift(primes)
    except ParameterError as error:
        return None, error
    return _fewest_digits(primes, lambda params, log_p: True)


def _fewest_digits(primes, accept):
    """(``primes``' moduli with the fewest key-switching digits the noise check and ``accept(params, log2 P)``
    accept, or None; the last refusal). The moduli do not depend on the digits: found once."""
    last_error = None
    log_p = sum(math.log2(p) for p in primes.p_moduli)
    for dnum in range(1, len(primes.q_moduli) + 1):
        try:
            params = CKKSParameters(log_n=primes.log_n, q_levels=primes.q_levels, p_moduli=primes.p_moduli,
                                    log_scale=primes.log_scale, dnum=dnum)
        except ParameterError as error:
            last_error = error
            continue
        if accept(params, log_p):
            return params, last_error
    return None, last_error


def _wide(log_n, depth):
    """Parameters with 2^50 levels in the ring 2^log_n whose key-switching digits are at most the special
    primes' product (key-switching noise no larger than the rounding), with the smallest Galois keys; None
    when none fits the security bound."""
    best = None
    q_bits = 90 + 51 * depth

    def within(params, log_p):
        return max(sum(math.log2(params.q_moduli[i]) for i in digit) for digit in params.digits) <= log_p

    for specials in range(2, 7):
        if q_bits + 30 * specials > HE_STANDARD_128.get(log_n, 0):
            break
        try:
            primes = CKKSParameters.from_literal(dict(
                log_n=log_n, log_q=[[30, 30, 30]] + [[25, 26]] * depth, log_p=[30] * specials,
                log_scale=_WIDE_SCALE, dnum=1 + 2 * depth))
        except ParameterError:
            continue
        if primes.scale_drift_bits > MAX_SCALE_DRIFT_BITS:
            continue
        params, _ = _fewest_digits(primes, within)
        if params is not None:
            size = params.dnum * (len(params.q_moduli) + specials)
            if best is None or size < best[0]:
                best = (size, params)
    return None if best is None else best[1]


class _CallableInt(int):
    """An int that returns itself when called (``plan.depth`` and ``plan.depth()`` both work)."""

    def __call__(self):
        return int(self)


class _CallableTuple(tuple):
    """A tuple that returns itself when called (``plan.rotations`` and ``plan.rotations()`` both work)."""

    def __call__(self):
        return tuple(self)


#: bytes a process running hezk holds before any key: the interpreter, numpy, numba's compiled kernels and the
#: engines' modules (measured with ``/usr/bin/time -v``: ``hezk plan`` of a small model 113 MB, the engines'
#: kernels loaded on top)
BASELINE_BYTES = 130 << 20
#: the share of the machine's available memory (``MemAvailable``) a command may plan to use by default
MEMORY_FRACTION = 0.8
#: bytes per nonzero weight of a sparse map held in memory: int64 row, int64 column (or offset), float64 value
#: (``packing.SparseMap``, ``packing.PackedAffine``)
MAP_ENTRY_BYTES = 24
#: bytes per nonzero of the stage whose diagonals are being made (``PackedAffine.diagonal_makers``: the int64
#: sort order and the sorted int64 offsets, int64 rows and float64 values)
MAKER_ENTRY_BYTES = 32


def ntt_table_bytes(params) -> int:
    """Bytes of the ring's NTT tables (``crypto.ntt_base.NTTTables``): the bit-reversed powers of psi and of its
    inverse with their Shoup companions, 4 uint64 words per coefficient and modulus (Q and P)."""
    return 4 * len(params.moduli) * params.n * 8


def switching_scratch_bytes(params, level: int) -> int:
    """Bytes of one thread's key-switching scratch (``crypto.keyswitch.KeySwitcher``: buffers kept at the size
    of the largest switch) at ``level``: the ModUp extensions of every digit (each digit's rows extended to the
    other primes of Q_level and P), the coefficient form of the switched part (Q_level rows), the two running
    sums over Q_level and P and one digit's block, uint64 rows of N."""
    limbs, specials = params.limbs_at(level), len(params.p_moduli)
    extended = [limbs + specials - len([i for i in digit if i < limbs]) for digit in params.digits
                if any(i < limbs for i in digit)]
    return (sum(extended) + limbs + 2 * (limbs + specials) + max(extended)) * params.n * 8


def model_map_bytes(stages) -> int:
    """Bytes of the affine stages' sparse maps, one copy: ``MAP_ENTRY_BYTES`` per nonzero weight
    (``StagePlan.nonzeros``). A planned model's layers keep the maps the packing built (planning packs each layer
    once); a server builds its packed stages' slot-space maps from them and then drops the layers' copy
    (``packing.release_sparse_maps``): two copies only while the stages are built, before any ciphertext."""
    return MAP_ENTRY_BYTES * sum(stage.nonzeros for stage in stages if stage.kind in ("affine", "join"))


def _thread_count(threads) -> int:
    """``threads``, checked, or the process's kernel thread setting (``hezk.threads.get_threads``) for None."""
    if threads is None:
        return hezk.threads.get_threads()
    if isinstance(threads, bool) or not isinstance(threads, (int, np.integer)) or threads < 1:
        raise ParameterError(f"threads={threads!r} must be a positive integer (kernel threads, hezk.set_threads)")
    return int(threads)


def default_memory_budget() -> int | None:
    """``MEMORY_FRACTION`` of the available memory, read at run time (None: unknown, nothing is checked)."""
    available = available_memory()
    return None if available is None else int(available * MEMORY_FRACTION)


class MemoryBudgetError(ParameterError):
    """A plan whose estimated peak memory exceeds the memory budget (``MemoryEstimate.check``)."""


_ROLES = {"server": "server (infer --context, one serve context)", "client": "client (keygen)",
          "local": "local infer (client and server in one process)"}


def _gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


@dataclass(frozen=True)
class MemoryEstimate:
    """Peak resident bytes of the three processes of a plan, each a {part: bytes} breakdown: ``server``
    (``infer --context`` / one ``serve`` context: the public context read and deserialized, encoded weights,
    working ciphertexts, bootstrapping's constants), ``client`` (``keygen``: the keys as generated and their
    serialized files) and ``local`` (``infer`` without --context: client and server in one process). Each part
    includes the ``BASELINE_BYTES`` of the process."""

    server: dict
    client: dict
    local: dict

    @property
    def server_peak(self) -> int:
        return sum(self.server.values())

    @property
    def client_peak(self) -> int:
        return sum(self.client.values())

    @property
    def local_peak(self) -> int:
        return sum(self.local.values())

    def peak(self, role: str) -> int:
        """The peak of ``role``: "server", "client" or "local"."""
        if role not in ("server", "client", "local"):
            raise ParameterError(f"role={role!r} must be 'server', 'client' or 'local'")
        return sum(getattr(self, role).values())

    def check(self, role: str, budget: int | None, what: str = "--memory-budget", key_budget: int | None = None):
        """ParameterError when the peak of ``role`` exceeds ``budget`` bytes (None: unchecked), naming the figure,
        its parts and what to change (a ``key_budget`` that would fit, when the keys make the difference)."""
        peak = self.peak(role)
        if budget is None or peak <= budget:
            return
        excess = peak - budget
        copies = {"server": 1.5, "client": 2.0, "local": 2.5}[role]      # the keys' forms held at the peak
        keys = self.server["keys"]
        advice = []
        if keys * copies > excess and key_budget is not None:
            fewer = max(int(min(key_budget, keys) - excess / copies), 1)
            advice.append(f"--key-budget {fewer} or less (fewer Galois keys, composite rotations)")
        advice += ["fewer samples per request", "parameters with fewer levels or a smaller ring (--params), with "
                   "bootstraps for a deep model (--bootstrap)", f"a larger {what} on a machine that has it"]
        raise MemoryBudgetError(f"the {_ROLES[role]} would need about {self.describe(role)} at its peak, over {what}="
                             f"{budget} bytes ({_gib(budget)}) by {_gib(excess)}; refused before any work: change "
                             + "; ".join(advice))

    def describe(self, role: str) -> str:
        parts = ", ".join(f"{name} {_gib(size)}" for name, size in getattr(self, role).items() if size)
        return f"{_gib(self.peak(role))} ({parts})"


DEFAULT_KEY_BUDGET = 12 << 30  # bytes: half of a 24 GB machine (the keys share it with weights and ciphertexts)


MAX_CLIENT_TEXT = 1 << 16  # characters of a plan's ``client`` text (a crafted plan is refused above it)


@dataclass(frozen=True)
class ModelPlan:
    """What encrypted inference of a model will cost, known before any key exists.

    ``block`` slots per sample, ``batch`` samples per ciphertext, inputs encrypted at ``input_level``
    (= ``depth``, so the output arrives at level 0), Galois keys for ``rotations`` only.
    """

    params: CKKSParameters
    input_shape: tuple[int, ...]
    output_shape: tuple[int, ...]
    block: int
    stages: tuple[StagePlan, ...]
    layers: tuple[LayerLowering, ...] = ()
    costs: CostModel | None = field(default=None, compare=False, repr=False)  # measured times (``calibrated``)
    model: str | None = None  # the model's identity: hex sha256 digest (``Sequential.identity``), carried by requests
    key_budget: int | None = None  # bytes the public keys may take (``Sequential.plan`` refuses a plan above it)
    key_steps: tuple[int, ...] | None = None  # Galois keys when over budget: powers of two, composite rotations
    patches: tuple[int, int, int, int] | None = None  # (kh, kw, stride, padding): inputs packed as im2col patches
    bootstrap: BootstrapConfig | None = None  # the bootstrap run before the stages ``bootstraps`` (None: none)
    bootstraps: tuple[int, ...] = ()  # stage indices a bootstrap precedes (``tensor_ops.bootstrap_placement``)
    fit: str | None = None  # hex sha256 of the polynomial activations (``Sequential.activation_fit``), carried too
    client: str = ""  # what the client computes after decryption (the model's ``postprocess``: softmax, argmax, ...)
    # the ranges the client checks (``Client.encrypt`` / ``decrypt``): inputs (low, high) of every value, from the
    # calibration data (None: not calibrated); outputs per value (lows, highs) that every sample whose activation
    # inputs stay in their intervals meets (``value_bounds``), widened by ``output_margin`` on each side
    input_range: tuple[float, float] | None = None
    output_range: tuple[tuple[float, ...], tuple[float, ...]] | None = None
    output_margin: float = 0.0
    activation_fits: tuple[ActivationFit, ...] = ()  # each polynomial activation's interval and errors
    # the model's last activation when it is elementwise and the client applies it exactly after decryption
    # (``Client.decrypt``): a final sigmoid is computed, not fitted (``hezk.model.graph.activate``); "" none
    finish: str = ""
    # the source model's named outputs the client derives from the (finished) output after decryption: softmax,
    # argmax, labels, zipmap, ... (``hezk.model.ClientOutput``; empty: the output is the model's only one)
    postprocess: tuple = ()

    def __post_init__(self):
        """Checks a placement of bootstraps (plans without one are not touched): a full-slot config (the
        packed layout fills every slot), stage indices increasing and in range, every stage fitting the
        levels it starts at. Parameters whose scales drift (``check_scale_drift``) are refused first."""
        if not isinstance(self.params, CKKSParameters):
            raise ParameterError(f"model plan: params must be CKKSParameters, got {type(self.params).__name__}")
        check_scale_drift(self.params)
        if self.bootstrap is None and not self.bootstraps:
            return
        if not isinstance(self.bootstrap, BootstrapConfig) or not self.bootstraps:
            raise ParameterError(f"model plan: bootstrap={self.bootstrap!r} and bootstraps={self.bootstraps!r} must "
                                 f"be a BootstrapConfig and a non-empty tuple of stage indices together")
        if self.bootstrap.slots not in (None, self.params.slots):
            raise ParameterError(f"model plan: bootstrap slots={self.bootstrap.slots} must be the parameters' slots="
                                 f"{self.params.slots} (the packed layout fills every slot)")
        b = self.bootstraps
        if not all(isinstance(i, int) and not isinstance(i, bool) for i in b) or list(b) != sorted(set(b)) \
                or b[0] < 0 or b[-1] >= len(self.stages):
            raise ParameterError(f"model plan: bootstraps={list(b)!r:.80} must be increasing stage indices in "
                                 f"[0, {len(self.stages)})")
        stage_levels([s.depth for s in self.stages], b, self.params.max_level, self.bootstrap_plan.levels_left)

    @property
    def choices(self) -> dict:
        """{layer index: lowering} for the layers with a choice (convolutions: "rotations" / "dense" /
        "patches")."""
        return {i: layer.lowering for i, layer in enumerate(self.layers) if getattr(layer, "lowering", None)}

    @property
    def choices_key(self) -> str:
        """The lowerings as a hashable key (servers sharing ``encoded`` may run plans of other lowerings)."""
        return ",".join(f"{i}:{v}" for i, v in sorted(self.choices.items()))

    @property
    def stage_rotations(self) -> tuple[int, ...]:
        """The rotation steps the stages perform (each a Galois key, or composed from ``key_steps``)."""
        steps = set()
        for stage in self.stages:
            steps.update(stage.rotations)
        steps.discard(0)
        return tuple(sorted(steps))

    @property
    def depth(self) -> int:
        """Levels consumed; an int that may also be called, like ``tensor_ops.Plan.depth()``."""
        return _CallableInt(sum(stage.depth for stage in self.stages))

    @property
    def precision_bits(self) -> float:
        """Bits one rescale or key switch keeps at these parameters (``model_plan.precision_bits``)."""
        return precision_bits(self.params)

    @property
    def input_level(self) -> int:
        """The level inputs are encrypted at: the depth (outputs at level 0), or the top level when the plan
        bootstraps."""
        return self.params.max_level if self.bootstraps else int(self.depth)

    @property
    def bootstrap_plan(self):
        """The ``crypto.ckks.bootstrap.BootstrapPlan`` of the plan's bootstraps (None without)."""
        return None if self.bootstrap is None else cached_bootstrap_plan(self.params, self.bootstrap)

    @property
    def stage_levels(self) -> tuple[int, ...]:
        """The level each stage starts at (after the bootstrap before it, if any)."""
        levels_after = self.bootstrap_plan.levels_left if self.bootstraps else 0
        return stage_levels([s.depth for s in self.stages], self.bootstraps, self.input_level, levels_after)

    @property
    def output_level(self) -> int:
        return self.stage_levels[-1] - self.stages[-1].depth if self.stages else self.input_level

    @property
    def bootstrap_cost(self) -> float:
        """One bootstrap in ``CostModel`` units (a key-switched rotation at the top level = 1), from its
        operation counts (``tensor_ops.bootstrap_placement.bootstrap_cost``); 0 without bootstraps."""
        return bootstrap_cost(self.bootstrap_plan, self.costs) if self.bootstraps else 0.0

    @property
    def bootstrap_seconds(self) -> float:
        """Estimated seconds of one bootstrap: its cost in rotations times a rotation at the top level."""
        if not self.bootstraps:
            return 0.0
        top = self.params.n * (self.params.limbs_at(self.params.max_level) + len(self.params.p_moduli))
        return self.bootstrap_cost * self._table(top)["giant_rotation"]

    @property
    def batch(self) -> int:
        return self.params.slots // self.block

    @property
    def rotations(self) -> tuple[int, ...]:
        """Rotation steps needing a Galois key (a tuple that may also be called, like ``Plan.rotations()``)."""
        steps = self.key_steps if self.key_steps is not None else self.stage_rotations
        if self.bootstraps:
            steps = tuple(sorted(set(steps) | set(self.bootstrap_plan.rotation_steps)))
        return _CallableTuple(steps)

    @property
    def keys(self) -> dict:
        """The evaluation keys the client must make: Galois keys (steps, estimated bytes), relinearization."""
        keys = {"rotations": tuple(self.rotations), "galois_keys": len(self.rotations),
                "galois_key_bytes": self.galois_key_bytes, "relinearization": self.needs_relinearization}
        if self.bootstraps:
            keys["conjugation"] = True
        return keys

    def cost(self) -> dict:
        """Operation counts per ciphertext and the time estimates in seconds."""
        return dict(self.operation_counts(), seconds=self.estimated_seconds, setup_seconds=self.estimated_setup_seconds)

    @property
    def needs_relinearization(self) -> bool:
        return bool(self.bootstraps) or any(stage.ct_ct_multiplications for stage in self.stages)

    @property
    def galois_key_bytes(self) -> int:
        """Estimated bytes of the Galois keys: per key, digits x 2 polynomials x (Q + P limbs) x N x 4."""
        params = self.params
        limbs = len(params.q_moduli) + len(params.p_moduli)
        return (len(self.rotations) + bool(self.bootstraps)) * len(params.digits) * 2 * limbs * params.n * 4

    @property
    def switching_keys(self) -> int:
        """Switching keys the client makes: one per rotation key, the conjugation key when bootstrapping, and
        the relinearization key (always made)."""
        return len(self.rotations) + bool(self.bootstraps) + 1

    @property
    def weight_bytes(self) -> int:
        """Bytes of every affine stage's diagonals encoded at the level the stage runs at (uint64 residues):
        what a server that kept all its encoded weights would hold."""
        p = self.params
        return sum(stage.diagonals * p.limbs_at(level + (stage.kind == "join")) * p.n * 8
                   for stage, level in zip(self.stages, self.stage_levels) if stage.kind in ("affine", "join"))

    def memory_estimate(self, ciphertexts: int = 1, cache_bytes: int = 0,
                        threads: int | None = None) -> MemoryEstimate:
        """Peak resident bytes of the server, the client and the local flow (``MemoryEstimate``) for requests of
        ``ciphertexts`` ciphertexts, the server keeping at most ``cache_bytes`` of encoded weights (the rest
        encoded where used, one plaintext at a time: ``inference.EncryptedModel``). A switching key is held
        as uint32 residues, both halves: digits x 2 x (Q + P limbs) x N x 4 bytes; serialized, only its b half
        (a is a seed). Plaintexts and ciphertexts are uint64 residues of the level they are used at. The
        working set of a stage: its baby rotations plus four ciphertexts, the float64 slot vectors of the
        diagonal being encoded and the stage's nonzeros sorted by diagonal (``PackedAffine.diagonal_makers``:
        ``MAKER_ENTRY_BYTES`` each). Beside it, named parts: the NTT tables (``ntt_table_bytes``), the key
        switcher's scratch buffers at the highest level a key switch runs at (``switching_scratch_bytes``), and
        the model's maps (``model_map_bytes``: every affine stage's nonzeros, once: the planner's copy in the
        layers is dropped when the server's stages are built). The server's peak is the larger of two moments:
        loading, when it holds the public context's bytes (only the b halves of the keys: a is a seed) beside the
        keys deserialized from them and both copies of the maps while its stages are built, and evaluation, when
        the bytes are gone (``Server`` keeps no reference to them) and the scratch, working ciphertexts and
        bootstrap constants exist: "loading" is what the first holds beyond the second, 0 where evaluation is
        larger (measured, ``infer --context`` of a 4-channel CNN at N14, one thread: 738 MB against 752 MB
        estimated; 792 MB when the bytes were counted through evaluation). Measured (``benchmarks/resnet.py``,
        one thread): ResNet-20's local infer peaked at 11.49 GB against 10.76 GB estimated (x1.07; before the
        layers' maps were dropped, 12.12 GB against 11.65 GB with the maps twice); the rest is freed heap that
        glibc keeps between stages of other sizes.

        ``threads``: the kernel threads (default ``hezk.threads.get_threads()``, the process's setting). Each
        thread beyond the first that key-switches keeps its own switching scratch (thread-local) and, in its own
        malloc arena, its share of the stage's temporaries (rotated and accumulated ciphertexts of the giant steps
        it runs): counted as one scratch and one working set per extra thread ("more threads"). Measured, local
        infer at N14 on the slot-blocked plan: a 64-64-10 MLP 576 MB at one thread and 598-797 MB at two (527 and
        596 MB estimated); a 4-channel CNN 646 MB and 657-688 MB (592 and 628 MB estimated)."""
        p = self.params
        n, top, specials = p.n, len(p.q_moduli), len(p.p_moduli)
        key = len(p.digits) * 2 * (top + specials) * n * 4
        keys = self.switching_keys * key + 2 * top * n * 8                    # + the public key (uint64)
        serialized = self.switching_keys * key // 2 + 2 * top * n * 4
        ct = lambda level: 2 * p.limbs_at(level) * n * 8                   # noqa: E731
        weights, working = min(self.weight_bytes, max(int(cache_bytes), 0)), 0
        for stage, level in zip(self.stages, self.stage_levels):
            if stage.kind in ("affine", "join"):
                level += stage.kind == "join"
                vectors = 3 * p.slots * 8                   # a diagonal made, tiled and rolled
                makers = MAKER_ENTRY_BYTES * stage.nonzeros
                working = max(working, (len(stage.baby) + 4) * ct(level) + vectors + makers)
            elif stage.kind == "activation":
                working = max(working, (stage.ct_ct_multiplications + 4) * ct(level))
        messages = ciphertexts * (ct(self.input_level) + ct(self.output_level)) * 3 // 2   # arrays + their bytes
        constants, boot_working = self._bootstrap_memory()
        working = max(working, boot_working) + messages
        switching = self.input_level if self.rotations or self.needs_relinearization else None
        scratch = 0 if switching is None else switching_scratch_bytes(p, switching)
        tables, maps = ntt_table_bytes(p), model_map_bytes(self.stages)
        threads = _thread_count(threads)
        more = 0 if switching is None else (threads - 1) * (scratch + working - messages)
        evaluation = scratch + more + working + constants + weights

        def loading(held):  # the context's bytes and the maps' second copy, while the server is built, beyond the
            return max(0, held + maps - evaluation)     # evaluation's parts (the bytes are dropped once read)

        server = {"baseline": BASELINE_BYTES, "NTT tables": tables, "keys": keys, "loading": loading(serialized),
                  "model maps": maps, "encoded weights": weights, "key-switching scratch": scratch,
                  "more threads": more, "working ciphertexts": working, "bootstrap constants": constants}
        secret = (top + specials) * n * 8
        plan_constants = self._bootstrap_memory(plan_only=True)[0]
        client = {"baseline": BASELINE_BYTES, "NTT tables": tables, "keys": keys + secret,
                  "serialized keys": 2 * serialized, "model maps": maps, "working ciphertexts": messages,
                  "bootstrap constants": plan_constants}
        local = dict(server, keys=keys + secret, loading=loading(0))  # one copy: the server shares the client's
        return MemoryEstimate(server, client, local)

    def _bootstrap_memory(self, plan_only: bool = False) -> tuple[int, int]:
        """(constants, working set) of the plan's bootstraps in bytes (0, 0 without): the BootstrapPlan's
        diagonals (complex128, N/2 each), and on the server the full-period diagonals kept encoded (uint32 at
        their level) and the hoisted rotations of the widest transform at the top level (the key switcher's
        scratch is its own part: ``switching_scratch_bytes``)."""
        if not self.bootstraps:
            return 0, 0
        boot, p = self.bootstrap_plan, self.params
        n = p.n
        transforms = boot.cts + boot.stc
        constants = sum(len(t.diags) for t in transforms) * (n // 2) * 16
        if plan_only:
            return constants, 0
        start = p.max_level - boot.raise_levels
        stc_top = start - boot.cts_count - boot.eval_mod_levels
        levels = [start - i for i in range(len(boot.cts))] + [stc_top - i for i in range(len(boot.stc))]
        constants += sum(len(t.full_period) * p.limbs_at(max(level, 0)) * n * 4
                         for t, level in zip(transforms, levels))
        babies = max(len({b for terms in t.split.values() for b, _ in terms}) for t in transforms)
        working = (babies + 8) * 2 * p.limbs_at(start) * n * 8
        return constants, working

    def _hops(self, step) -> int:
        """Key switches of one rotation by ``step``: 1, or the route's length when keys are powers of two."""
        return 1 if self.key_steps is None else bin(int(step) % self.params.slots).count("1")

    def _stage_counts(self, stage) -> dict:
        babies = [b for b in stage.baby if b]
        hoisted = babies if self.key_steps is None else [b for b in babies if self._hops(b) == 1]
        giant = sum(self._hops(m) for m in stage.giant if m) + sum(self._hops(k) for k in stage.presum if k) \
            + sum(self._hops(b) for b in babies if b not in hoisted)
        return {"baby_rotation": len(hoisted), "giant_rotation": giant,
                "ct_pt": stage.diagonals, "encode": stage.diagonals, "ct_ct": stage.ct_ct_multiplications,
                "rescale": 1 if stage.kind in ("affine", "join") else 0}

    def operation_counts(self) -> dict:
        """Homomorphic operations per ciphertext (``encode``: plaintext diagonals, once per server)."""
        counts = {}
        for stage in self.stages:
            for op, count in self._stage_counts(stage).items():
                counts[op] = counts.get(op, 0) + count
        if self.bootstraps:
            counts["bootstrap"] = len(self.bootstraps)
        return counts

    def calibrated(self, costs: CostModel | None = None) -> "ModelPlan":
        """This plan with its time estimates from ``costs`` (default: ``CostModel.measure(self.params)``, about a
        second: per-operation times measured on this machine) instead of the built-in table."""
        costs = CostModel.measure(self.params) if costs is None else costs
        if not isinstance(costs, CostModel) or not costs.rotation_seconds:
            raise ParameterError(f"costs={costs!r} must be a measured CostModel (CostModel.measure(params))")
        return replace(self, costs=costs)

    def _table(self, size: int) -> dict:
        """Seconds per operation at parameters of ``size`` = N x (limbs + P limbs): measured (``calibrated``) or
        the built-in table scaled from its reference size."""
        if self.costs is None:
            return {op: t * size / _REFERENCE_SIZE for op, t in _SECONDS.items()}
        c = self.costs
        return {"baby_rotation": c.seconds("hoisted_rotation", size), "giant_rotation": c.seconds("rotation", size),
                "ct_ct": c.seconds("ct_mult", size) + c.seconds("rescale", size),
                "ct_pt": c.seconds("pt_mult", size), "rescale": c.seconds("rescale", size),
                "encode": c.seconds("encode", size), "add": c.seconds("add", size)}

    def _seconds(self, operations) -> float:
        """The time model, each stage scaled by the limbs of the level it runs at."""
        total = self.bootstrap_seconds * len(self.bootstraps) if "giant_rotation" in operations else 0.0
        for stage, level in zip(self.stages, self.stage_levels):
            level += stage.kind == "join"  # a join's map runs on the skip, one level above the branch's output
            table = self._table(self.params.n * (self.params.limbs_at(level) + len(self.params.p_moduli)))
            counts = self._stage_counts(stage)
            total += sum(table[op] * counts[op] for op in operations)
            if self.costs is not None and "rescale" in operations and stage.kind in ("affine", "join"):
                # measured model only: the baby steps' shared decomposition (the first one costs a whole
                # rotation), the bias encoded on every evaluation, and the additions outside the ct x pt
                # accumulations (one sum per giant step after the first, the window sums, the bias)
                total += (table["giant_rotation"] - table["baby_rotation"]) * bool(counts["baby_rotation"])
                total += table["encode"]
                total += table["add"] * (max(len(stage.giant) - 1, 0) + len(stage.presum) + 1
                                         + (stage.kind == "join"))
        return total

    @property
    def estimated_seconds(self) -> float:
        """Server time per ciphertext (``batch`` samples) from the operation counts and the time model."""
        return self._seconds(("baby_rotation", "giant_rotation", "ct_ct", "ct_pt", "rescale"))

    @property
    def estimated_throughput(self) -> float:
        """Samples per second of server time with full ciphertexts (``batch`` / ``estimated_seconds``)."""
        return self.batch / self.estimated_seconds if self.estimated_seconds > 0 else math.inf

    @property
    def estimated_setup_seconds(self) -> float:
        """One-time server cost of encoding the plaintext diagonals."""
        return self._seconds(("encode",))

    def explain(self) -> str:
        lines = [f"encrypted inference plan: input {self.input_shape} -> output {self.output_shape}",
                 f"  parameters: {self.params!r}",
                 f"  packing: {self.block} slots per sample, {self.batch} samples per ciphertext, "
                 f"inputs at level {self.input_level}; the samples are the batch axis b of the slot layout "
                 f"(strides: b {self.block}, value 1) and every affine stage is 'bi,oi->bo' along it"]
        if self.layers:
            lines.append("  layers, each lowered to an einsum with plaintext weights:")
            lines += [f"    {layer.describe()}" for layer in self.layers]
        for i, stage in enumerate(self.stages):
            if i in self.bootstraps:
                lines.append(self._explain_bootstrap(i))
            if stage.kind == "affine" and stage.strategy == "einsum":
                lines.append(f"  stage {i}: affine {stage.n_in} -> {stage.n_out}, "
                             f"{explain_choice(stage.strategy, stage.priced)}: the einsum planner's plan of 'bi,oi->bo' "
                             f"on the packed layout ({stage.diagonals} plaintext products, {len(stage.baby)} hoisted + "
                             f"{len(stage.giant)} other rotations), depth 1; rotation steps "
                             f"{[k for k in stage.rotations if k]}")
            elif stage.kind == "affine":
                presum = f"window sums by rotations {list(stage.presum)}, then " if stage.presum else ""
                chosen = f"{explain_choice(stage.strategy, stage.priced)}: " if stage.priced else ""
                lines.append(f"  stage {i}: affine {stage.n_in} -> {stage.n_out}, {chosen}{presum}{stage.diagonals} "
                             f"diagonals, baby steps {len(stage.baby)}, giant steps {len(stage.giant)} (g={stage.g}), "
                             f"depth 1; rotation steps {[k for k in stage.rotations if k]}")
            elif stage.kind == "fork":
                lines.append(f"  stage {i}: residual fork: keep the ciphertext ({stage.n_in} values) for the skip "
                             f"connection, depth 0")
            elif stage.kind == "join":
                level = self.stage_levels[i]
                presum = f"window sums by rotations {list(stage.presum)}, then " if stage.presum else ""
                lines.append(f"  stage {i}: residual add: the kept ciphertext ({stage.n_in} values) dropped to level "
                             f"{level + 1}, {presum}its map to the branch's {stage.n_out} output slots ("
                             f"{stage.diagonals} diagonals encoded at the scale that lands exactly on the branch's "
                             f"scale, baby steps {len(stage.baby)}, giant steps {len(stage.giant)} (g={stage.g}); "
                             f"rotation steps {[k for k in stage.rotations if k]}), rescaled to level {level} and "
                             f"added; depth 0 on the main path")
            else:
                lines.append(f"  stage {i}: polynomial activation, {stage.ct_ct_multiplications} ct x ct "
                             f"multiplications, depth {stage.depth}")
        if self.patches is not None:
            kh, kw, stride, padding = self.patches
            lines.append(f"  input layout: im2col patches of the first convolution ({kh}x{kw}, stride {stride}, "
                         f"padding {padding}): the client packs {self.packed_width} slots per sample (pixels "
                         f"duplicated on the client), the server multiplies by the weights along the patches")
        lines += self._explain_ranges()
        if self.finish:
            lines.append(f"  the model's last activation, {self.finish}, is applied exactly by the client after "
                         f"decryption (the server returns its input; the output range below is that input's)")
        if self.client:
            lines.append(f"  run by the client after decryption (not encrypted, not by the server): {self.client}")
        if self.model is not None:
            lines.append(f"  model digest (sha256 of the model, carried by requests and replies): {self.model}")
        if self.fit is not None:
            lines.append(f"  activation fit digest (sha256 of the polynomials, carried too): {self.fit}")
        budget = ("" if self.key_budget is None else
                  f" of a key budget of {self.key_budget / 2**30:.3g} GiB = {self.key_budget} bytes")
        if self.key_steps is not None:
            lines.append(f"  over the key budget with one key per step: keys are the powers of two {list(self.key_steps)}, "
                         f"every other step a composite rotation")
        lines.append(f"  precision: scale 2^{self.params.log_scale}, one rescale or key switch keeps about "
                     f"{self.precision_bits:.0f} bits (its rounding noise against the scale; the error then grows "
                     f"with depth and fan-in)")
        if self.bootstraps:
            boot = self.bootstrap_plan
            lines.append(f"  bootstraps: {len(self.bootstraps)} (the fewest for depth {self.depth} at {self.params.max_level} "
                         f"levels), before stages {list(self.bootstraps)}; each uses {boot.levels_used} levels and "
                         f"leaves {boot.levels_left}, keeps about {boot.precision_bits:.1f} bits worst case (values |x| <= 1) and "
                         f"{boot.noise_bits:.1f} bits on random slots, "
                         f"needs {len(boot.rotation_steps)} rotation keys and the conjugation key; priced "
                         f"{self.bootstrap_cost:.0f} rotations (~{self.bootstrap_seconds:.2f} s) each; output at "
                         f"level {self.output_level}")
        lines.append(f"  depth {self.depth}, {len(self.rotations)} rotation keys "
                     f"({self.galois_key_bytes} bytes, ~{self.galois_key_bytes / 2**20:.1f} MiB{budget}), "
                     f"relinearization key: "
                     f"{self.needs_relinearization}")
        memory = self.memory_estimate()
        lines.append(f"  peak memory (estimated, one ciphertext per request): server {memory.describe('server')}; "
                     f"client keygen {memory.describe('client')}; local infer {memory.describe('local')}")
        source = ("per-operation times measured on this machine" if self.costs is not None else
                  "built-in per-operation times of the development machine; plan.calibrated() measures this one")
        boots = " (bootstraps included)" if self.bootstraps else ""
        lines.append(f"  estimated time: {self.estimated_seconds:.2f} s per ciphertext of {self.batch} samples{boots} "
                     f"(+ {self.estimated_setup_seconds:.2f} s once to encode the weights), "
                     f"~{self.estimated_throughput:.3g} samples/s with full ciphertexts; warm: excludes JIT "
                     f"compilation on a fresh install's first run (seconds) and the first run's weight encoding "
                     f"({source})")
        return "\n".join(lines)

    __str__ = explain

    def bootstrap_sites(self) -> tuple[dict, ...]:
        """Where each bootstrap sits: {"before_stage", "layers" (the model layers folded into that stage),
        "level_in" (the level the ciphertext has reached), "level_out", "precision_bits" (worst case: a slot as
        large as Δ, |x| <= 1), "random_slot_bits" (independent random slots: the noise alone)}."""
        if not self.bootstraps:
            return ()
        boot, levels = self.bootstrap_plan, self.stage_levels
        sites = []
        for i in self.bootstraps:
            level_in = self.input_level if i == 0 else levels[i - 1] - self.stages[i - 1].depth
            sites.append({"before_stage": i, "layers": tuple(j for j, layer in enumerate(self.layers)
                                                            if getattr(layer, "stage", None) == i),
                          "level_in": level_in, "level_out": boot.levels_left,
                          "precision_bits": boot.precision_bits, "random_slot_bits": boot.noise_bits})
        return tuple(sites)

    def _explain_bootstrap(self, stage: int) -> str:
        sites = self.bootstrap_sites()
        number = [s["before_stage"] for s in sites].index(stage)
        site = sites[number]
        layers = f" (layer {', '.join(map(str, site['layers']))})" if site["layers"] else ""
        return (f"  bootstrap -> level {site['level_out']} ({number + 1} of {len(sites)}, before stage {stage}{layers}, "
                f"from level {site['level_in']}): precision about {site['precision_bits']:.1f} bits worst case "
                f"(|x| <= 1), {site['random_slot_bits']:.1f} bits on random slots")

    def _explain_ranges(self) -> list[str]:
        lines = []
        if self.activation_fits:
            lines.append("  activations (each polynomial's error against its function):")
            lines += [f"    {fit.describe()}" for fit in self.activation_fits]
        if self.input_range is not None:
            lines.append(f"  calibrated input range: every input value in [{self.input_range[0]:.6g}, "
                         f"{self.input_range[1]:.6g}] (the client refuses others, or clips them when asked)")
        if self.output_range is not None:
            low, high = min(self.output_range[0]), max(self.output_range[1])
            lines.append(f"  output range: every output in its bound (overall [{low:.6g}, {high:.6g}]) while the "
                         f"activation inputs stay in their intervals, +- a margin of {self.output_margin:.3g}; the "
                         f"client refuses a decrypted sample outside it and every sample of its ciphertext")
        return lines

    def to_dict(self) -> dict:
        """Public, JSON-serialisable description (what a client needs to make keys and pack inputs); the keys
        "bootstrap" (the config) and "bootstraps" (stage indices) only when the plan bootstraps."""
        data = {"params": self.params.to_dict(), "input_shape": list(self.input_shape),
                "output_shape": list(self.output_shape), "block": self.block,
                "stages": [dict(vars(stage), baby=list(stage.baby), giant=list(stage.giant), presum=list(stage.presum),
                                priced=[list(pair) for pair in stage.priced]) for stage in self.stages],
                "layers": [dict(vars(layer), input_shape=list(layer.input_shape), output_shape=list(layer.output_shape))
                           for layer in self.layers], "model": self.model, "fit": self.fit,
                "key_budget": self.key_budget,
                "key_steps": None if self.key_steps is None else list(self.key_steps),
                "patches": None if self.patches is None else list(self.patches)}
        if self.bootstraps:
            data["bootstrap"] = {f: getattr(self.bootstrap, f) for f in BootstrapConfig.__dataclass_fields__}
            data["bootstraps"] = list(self.bootstraps)
        if self.client:
            data["client"] = self.client
        if self.finish:
            data["finish"] = self.finish
        if self.postprocess:
            data["postprocess"] = [{"name": out.name, "steps": [_step_record(step) for step in out.steps]}
                                   for out in self.postprocess]
        if self.input_range is not None:
            data["input_range"] = list(self.input_range)
        if self.output_range is not None:
            data["output_range"] = {"low": list(self.output_range[0]), "high": list(self.output_range[1]),
                                    "margin": self.output_margin}
        if self.activation_fits:
            data["activation_fits"] = [dict(vars(fit), interval=list(fit.interval)) for fit in self.activation_fits]
        return data

    @classmethod
    def from_dict(cls, data: dict) -> "ModelPlan":
        """The inverse of ``to_dict``: every field is checked for its JSON type and range (``_PlanFields``)
        before it is used, so a crafted plan raises ParameterError naming the field, never a TypeError,
        OverflowError or MemoryError later."""
        try:
            if not isinstance(data, dict):
                raise ParameterError(f"model plan: {type(data).__name__} is not a JSON object")
            check = _PlanFields(CKKSParameters.from_dict(data["params"]))
            input_shape = check.shape(data["input_shape"], "input_shape", MAX_PLAN_VALUES)
            output_shape = check.shape(data["output_shape"], "output_shape", check.slots)
            block = check.integer(data["block"], "block", 1, check.slots)
            if block & (block - 1):
                raise ParameterError(f"model plan: block={block} must be a power of two")
            if not isinstance(data["stages"], list) or not isinstance(data.get("layers", []), list):
                raise ParameterError("model plan: stages and layers must be lists")
            stages = tuple(check.stage(s, f"stages[{i}]") for i, s in enumerate(data["stages"]))
            layers = tuple(check.layer(layer, f"layers[{i}]", len(stages))
                           for i, layer in enumerate(data.get("layers", ())))
            model = data.get("model")
            if model is not None and not (isinstance(model, str) and re.fullmatch(r"[0-9a-f]{64}", model)):
                raise ParameterError(f"model plan: model={model!r:.80} must be a hex sha256 digest or null")
            fit = data.get("fit")
            if fit is not None and not (isinstance(fit, str) and re.fullmatch(r"[0-9a-f]{64}", fit)):
                raise ParameterError(f"model plan: fit={fit!r:.80} must be a hex sha256 digest or null")
            key_budget = data.get("key_budget")
            key_steps = data.get("key_steps")
            patches = _patches_field(data.get("patches"))
            check.patches_width(patches, input_shape)
            client = data.get("client", "")
            if not isinstance(client, str) or len(client) > MAX_CLIENT_TEXT:
                raise ParameterError(f"model plan: client={client!r:.80} must be a string of at most "
                                     f"{MAX_CLIENT_TEXT} characters")
            return cls(check.params, input_shape, output_shape, block, stages, layers, model=model,
                       key_budget=None if key_budget is None else check.integer(key_budget, "key_budget", 0, 1 << 62),
                       key_steps=None if key_steps is None else check.steps(key_steps, "key_steps"),
                       patches=patches, fit=fit, client=client, finish=_finish_field(data.get("finish", "")),
                       postprocess=_postprocess_field(data.get("postprocess", [])),
                       **_bootstrap_fields(data),
                       **check.ranges(data, math.prod(output_shape), len(stages)))
        except (KeyError, TypeError, ValueError, OverflowError) as error:
            if isinstance(error, ParameterError):
                raise
            raise ParameterError(f"malformed model plan: {error!r:.300}") from None

    def outputs(self, y) -> dict:
        """{name: value}: the source model's named outputs from the decrypted (finished) output ``y`` (batch
        first), by the client's ``postprocess``; {"output": y} for a model with one output and no steps."""
        if not self.postprocess:
            return {"output": y}
        return {out.name: out.apply(y) for out in self.postprocess}

    def finished(self, y):
        """The model's outputs from the decrypted values ``y``: the client's exact last activation (``finish``)
        applied elementwise, or ``y`` itself."""
        return activate(self.finish, np.asarray(y, dtype=np.float64)) if self.finish else y

    def __reduce__(self):
        """Pickle through the public description (``to_dict``, validated again by ``from_dict``) and the cost
        model, if any."""
        return _plan_from_pickle, (self.to_dict(), self.costs)

    # -- packing -------------------------------------------------------------------------------------
    @property
    def layout(self) -> str:
        """How samples are packed: "flat" (C order) or "patches" (``tensor_ops.packing.patch_gather``)."""
        return "flat" if self.patches is None else "patches"

    def _gather(self):
        kh, kw, stride, padding = self.patches
        return patch_gather(self.input_shape, (kh, kw), stride, padding)

    @property
    def packed_width(self) -> int:
        """Slots one sample's input occupies in the plan's layout (C*H*W, or K*P im2col patches)."""
        return math.prod(self.input_shape) if self.patches is None else len(self._gather())

    def pack(self, x) -> list[np.ndarray]:
        """Slot vectors (one per ciphertext) holding the samples of x, one per ``block`` slots, in the plan's
        input layout."""
        if self.patches is None:
            return pack_samples(x, self.input_shape, self.block, self.params.slots)
        x, _ = batch_of(x, self.input_shape)
        patches = gather_patches(x, self._gather())
        return pack_samples(patches, patches.shape[1:], self.block, self.params.slots)

    def input_layout(self, count: int) -> SlotLayout:
        """The layout of ``count`` requests' samples (``batch_layout``: a batch axis of stride ``block``)."""
        return batch_layout(count, self.packed_width, self.block, self.params.slots)

    def output_layout(self, count: int) -> SlotLayout:
        """The layout of ``count`` outputs in a reply (the same batch axis)."""
        return batch_layout(count, math.prod(self.output_shape), self.block, self.params.slots)

    def unpack(self, vectors, count: int) -> np.ndarray:
        """The (count, *output_shape) outputs from decrypted slot vectors."""
        return unpack_samples(vectors, count, self.output_shape, self.block, self.params.slots)

    def with_block(self, block: int) -> "ModelPlan":
        """The same plan with ``block`` slots per sample (a power of two from the plan's block to slots)."""
        if isinstance(block, bool) or not isinstance(block, (int, np.integer)) or block & (block - 1) \
                or not self.block <= block <= self.params.slots:
            raise ShapeError(f"block={block!r} must be a power of two in [{self.block}, slots={self.params.slots}]")
        return replace(self, block=int(block))

    def ciphertexts_for(self, count: int) -> int:
        return -(-int(count) // self.batch)

    # -- the calibrated ranges --------------------------------------------------------------------------------
    def inputs_outside(self, batch) -> np.ndarray:
        """Indices of the samples of ``batch`` (samples, *input_shape) with a value outside ``input_range``
        (none without one)."""
        batch = np.asarray(batch, dtype=np.float64)
        if self.input_range is None or not len(batch):
            return np.zeros(0, dtype=np.int64)
        low, high = self.input_range
        flat = batch.reshape(len(batch), -1)
        return np.flatnonzero(np.any((flat < low) | (flat > high), axis=1))

    def outputs_outside(self, outputs) -> np.ndarray:
        """Indices of the samples of ``outputs`` (samples, *output_shape) with a value outside ``output_range``
        widened by ``output_margin`` (or not finite); none without an output range."""
        return outputs_outside(outputs, self.output_range, self.output_margin)


def batch_of(x, sample_shape):
    """(x as (batch, *sample_shape), single) or a ShapeError naming both shapes."""
    x = np.asarray(x, dtype=np.float64)
    single = x.shape == tuple(sample_shape)
    if single:
        x = x[None]
    if x.ndim == 0 or x.shape[1:] != tuple(sample_shape) or x.shape[0] < 1:
        raise ShapeError(f"input shape {x.shape} is neither the model's {tuple(sample_shape)} "
                         f"nor (batch, *{tuple(sample_shape)}) with batch >= 1")
    if not np.all(np.isfinite(x)):
        raise ShapeError("input contains non-finite values (nan or inf)")
    return x, single


def batch_layout(count: int, width: int, block: int, slots: int) -> SlotLayout:
    """The packed layout of ``count`` samples of ``width`` values as a ``SlotLayout`` (the einsum planner's):
    axes (batch, value) with strides (block, 1), tiled ``slots // block`` samples per ciphertext, so value
    i of sample b sits in ciphertext b // (slots // block) at slot (b mod (slots // block)) * block + i.
    Every stage is block-diagonal on it (I (x) M), i.e. the einsum 'bi,oi->bo' along the batch axis b."""
    if width > block:
        raise ShapeError(f"a sample of {width} values does not fit block={block} slots")
    return SlotLayout.tiled((int(count), int(width)), (int(block), 1), int(slots), (slots // block, int(width)))


def pack_samples(x, sample_shape, block, slots) -> list[np.ndarray]:
    """Slot vectors with sample b of each ciphertext, flattened, in slots [b*block, b*block + n), zeros after
    (``batch_layout(...).pack``)."""
    x, _ = batch_of(x, sample_shape)
    flat = x.reshape(x.shape[0], -1)
    return batch_layout(len(flat), flat.shape[1], block, slots).pack(flat)


def unpack_samples(vectors, count, output_shape, block, slots) -> np.ndarray:
    """The (count, *output_shape) values from slot vectors packed like ``pack_samples``
    (``batch_layout(...).unpack``)."""
    layout = batch_layout(count, math.prod(output_shape), block, slots)
    if len(vectors) < layout.n_ciphertexts:
        raise ShapeError(f"{count} samples need {layout.n_ciphertexts} ciphertexts of {slots // block}, got "
                         f"{len(vectors)}")
    return layout.unpack([np.asarray(v)[:slots].real for v in vectors]).reshape(count, *output_shape)


MAX_PLAN_VALUES = 1 << 24  # values in a plan's input sample (the model readers' own bound)
MAX_PLAN_DEPTH = 1 << 10
_STAGE_KINDS = ("affine", "activation", "fork", "join")


class _PlanFields:
    """The checks of a plan's JSON fields against its parameters' slots (``ModelPlan.from_dict``): integers are
    JSON integers (never booleans or floats) in a stated range, shapes and step lists are lists of them."""

    def __init__(self, params: CKKSParameters):
        self.params, self.slots = params, params.slots

    @staticmethod
    def integer(value, what: str, lo: int, hi: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
            raise ParameterError(f"model plan: {what}={value!r:.80} must be an integer in [{lo}, {hi}]")
        return value

    def integers(self, value, what: str, lo: int, hi: int) -> tuple[int, ...]:
        if not isinstance(value, (list, tuple)) or len(value) > self.slots:
            raise ParameterError(f"model plan: {what}={value!r:.80} must be a list of at most {self.slots} integers")
        return tuple(self.integer(v, f"{what}[{i}]", lo, hi) for i, v in enumerate(value))

    def shape(self, value, what: str, limit: int) -> tuple[int, ...]:
        shape = self.integers(value, what, 1, limit)
        if not shape or math.prod(shape) > limit:
            raise ParameterError(f"model plan: {what}={list(shape)} must be a non-empty shape of at most {limit} "
                                 f"values")
        return shape

    def steps(self, value, what: str) -> tuple[int, ...]:
        """Rotation steps: integers in (-slots, slots)."""
        return self.integers(value, what, 1 - self.slots, self.slots - 1)

    @staticmethod
    def number(value, what: str) -> float | None:
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                  or not math.isfinite(value) or value < 0):
            raise ParameterError(f"model plan: {what}={value!r:.80} must be null or a finite number >= 0")
        return value

    @staticmethod
    def text(value, what: str, choices=None, optional=False) -> str | None:
        if (value is None and optional) or (isinstance(value, str) and (choices is None or value in choices)):
            return value
        raise ParameterError(f"model plan: {what}={value!r:.80} must be " + (f"one of {choices}" if choices else
                                                                             "a string") + (" or null" if optional
                                                                                            else ""))

    @staticmethod
    def entry(value, what: str, required: tuple, optional: tuple) -> dict:
        if not isinstance(value, dict) or not set(required) <= set(value) or set(value) - set(required + optional):
            raise ParameterError(f"model plan: {what}={value!r:.120} must be an object with the keys {required} "
                                 f"(and optionally {optional})")
        return value

    def strategy(self, s: dict, kind: str, what: str) -> tuple[str, tuple]:
        """(strategy, priced) of a stage: an affine stage's is one of ``STRATEGIES`` (a join's "packed"; absent:
        "packed", as plans made before the field), other kinds' ""; ``priced``: at most one [name, estimate or
        null] per strategy, the chosen one priced."""
        allowed = {"affine": STRATEGIES, "join": ("packed",)}.get(kind, ("",))
        strategy = self.text(s.get("strategy", allowed[0]), f"{what}.strategy", allowed)
        priced = s.get("priced", [])
        if not isinstance(priced, list) or len(priced) > len(STRATEGIES):
            raise ParameterError(f"model plan: {what}.priced={priced!r:.80} must be a list of at most "
                                 f"{len(STRATEGIES)} [strategy, estimate] pairs")
        pairs = []
        for n, pair in enumerate(priced):
            if not isinstance(pair, list) or len(pair) != 2:
                raise ParameterError(f"model plan: {what}.priced[{n}]={pair!r:.80} must be a [strategy, estimate] pair")
            pairs.append((self.text(pair[0], f"{what}.priced[{n}][0]", STRATEGIES),
                          self.number(pair[1], f"{what}.priced[{n}][1]")))
        names = [name for name, _ in pairs]
        if len(set(names)) != len(names) or (pairs and dict(pairs).get(strategy) is None):
            raise ParameterError(f"model plan: {what}.priced={priced!r:.80} must name each strategy once and price "
                                 f"the chosen {strategy!r}")
        if strategy == "einsum" and (s.get("g", 0) or s.get("presum")):
            raise ParameterError(f"model plan: {what}: an 'einsum' stage has no g and no window sums")
        return strategy, tuple(pairs)

    def stage(self, value, what: str) -> StagePlan:
        s = self.entry(value, what, ("kind", "n_in", "n_out", "depth"),
                       ("baby", "giant", "diagonals", "ct_ct_multiplications", "presum", "g", "nonzeros", "strategy",
                        "priced"))
        count = (0, 1 << 40)
        if s.get("g", 0) and not s.get("giant"):
            raise ParameterError(f"model plan: {what}.g={s['g']!r:.20} needs giant steps")
        kind = self.text(s["kind"], f"{what}.kind", _STAGE_KINDS)
        strategy, priced = self.strategy(s, kind, what)
        return StagePlan(kind,
                         self.integer(s["n_in"], f"{what}.n_in", 0, self.slots),
                         self.integer(s["n_out"], f"{what}.n_out", 0, self.slots),
                         self.integer(s["depth"], f"{what}.depth", 0, MAX_PLAN_DEPTH),
                         self.steps(s.get("baby", []), f"{what}.baby"), self.steps(s.get("giant", []), f"{what}.giant"),
                         self.integer(s.get("diagonals", 0), f"{what}.diagonals", *count),
                         self.integer(s.get("ct_ct_multiplications", 0), f"{what}.ct_ct_multiplications", *count),
                         self.steps(s.get("presum", []), f"{what}.presum"),
                         self.integer(s.get("g", 0), f"{what}.g", 0, self.slots),
                         self.integer(s.get("nonzeros", 0), f"{what}.nonzeros", *count), strategy, priced)

    def layer(self, value, what: str, stages: int) -> LayerLowering:
        costs = ("dense_cost", "patches_cost", "rotations_cost", "dense_plan_cost", "patches_plan_cost")
        layer = self.entry(value, what, ("kind", "input_shape", "output_shape", "stage", "einsum"),
                           costs + ("lowering",))
        stage = layer["stage"]
        return LayerLowering(self.text(layer["kind"], f"{what}.kind"),
                             self.shape(layer["input_shape"], f"{what}.input_shape", MAX_PLAN_VALUES),
                             self.shape(layer["output_shape"], f"{what}.output_shape", MAX_PLAN_VALUES),
                             None if stage is None else self.integer(stage, f"{what}.stage", 0, stages - 1),
                             self.text(layer["einsum"], f"{what}.einsum"),
                             lowering=self.text(layer.get("lowering"), f"{what}.lowering", optional=True),
                             **{name: self.number(layer.get(name), f"{what}.{name}") for name in costs})

    @staticmethod
    def real(value, what: str) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ParameterError(f"model plan: {what}={value!r:.80} must be a finite number")
        return float(value)

    def interval(self, value, what: str) -> tuple[float, float]:
        if not isinstance(value, (list, tuple)) or len(value) != 2:
            raise ParameterError(f"model plan: {what}={value!r:.80} must be a pair [low, high]")
        low, high = self.real(value[0], f"{what}[0]"), self.real(value[1], f"{what}[1]")
        if low > high:
            raise ParameterError(f"model plan: {what}=[{low}, {high}] must have low <= high")
        return low, high

    def ranges(self, data: dict, n_out: int, stages: int) -> dict:
        """The optional ``input_range``, ``output_range`` ({low, high: one number per output value, margin})
        and ``activation_fits`` of a plan (absent in plans written before them: no checks then)."""
        fields = {}
        if data.get("input_range") is not None:
            fields["input_range"] = self.interval(data["input_range"], "input_range")
        if data.get("output_range") is not None:
            out = self.entry(data["output_range"], "output_range", ("low", "high", "margin"), ())
            bounds = []
            for side in ("low", "high"):
                values = out[side]
                if not isinstance(values, list) or len(values) != n_out:
                    raise ParameterError(f"model plan: output_range.{side} must be a list of {n_out} numbers (one "
                                         f"per output value)")
                bounds.append(tuple(self.real(v, f"output_range.{side}[{i}]") for i, v in enumerate(values)))
            if any(lo > hi for lo, hi in zip(*bounds)):
                raise ParameterError("model plan: output_range must have low <= high for every output value")
            margin = self.real(out["margin"], "output_range.margin")
            if margin < 0:
                raise ParameterError(f"model plan: output_range.margin={margin} must be >= 0")
            fields.update(output_range=tuple(bounds), output_margin=margin)
        fits = data.get("activation_fits")
        if fits is not None:
            if not isinstance(fits, list) or len(fits) > stages:
                raise ParameterError(f"model plan: activation_fits must be a list of at most {stages} entries")
            fields["activation_fits"] = tuple(self.activation_fit(f, f"activation_fits[{i}]", stages)
                                              for i, f in enumerate(fits))
        return fields

    def activation_fit(self, value, what: str, stages: int) -> ActivationFit:
        fit = self.entry(value, what, ("stage", "name", "degree", "interval", "max_error"),
                         ("calibration_error", "choice"))
        return ActivationFit(self.integer(fit["stage"], f"{what}.stage", 0, max(stages - 1, 0)),
                             self.text(fit["name"], f"{what}.name")[:64],
                             self.integer(fit["degree"], f"{what}.degree", 0, 1 << 10),
                             self.interval(fit["interval"], f"{what}.interval"),
                             self.real(fit["max_error"], f"{what}.max_error"),
                             self.number(fit.get("calibration_error"), f"{what}.calibration_error"),
                             self.text(fit.get("choice", ""), f"{what}.choice")[:512])

    def patches_width(self, patches, input_shape) -> None:
        """An im2col packing fits one ciphertext's slots (checked before any gather is built)."""
        if patches is None:
            return
        if len(input_shape) != 3:
            raise ParameterError(f"model plan: patches={list(patches)} need a (C, H, W) input_shape, not "
                                 f"{list(input_shape)}")
        (kh, kw, stride, padding), (c, h, w) = patches, input_shape
        ho, wo = (h + 2 * padding - kh) // stride + 1, (w + 2 * padding - kw) // stride + 1
        if ho < 1 or wo < 1 or c * kh * kw * ho * wo > self.slots:
            raise ParameterError(f"model plan: patches={list(patches)} over input_shape={list(input_shape)} give "
                                 f"{max(ho, 0)} x {max(wo, 0)} windows of {c * kh * kw} values: they must fit the "
                                 f"{self.slots} slots")


FINISH_FUNCTIONS = ("sigmoid", "tanh", "softplus", "softsign", "gelu", "gelu_tanh", "silu", "mish", "elu",
                    "selu", "hardswish")
"""Elementwise last activations the client applies after decryption instead of the server fitting them."""


MAX_CLIENT_OUTPUTS = 16  # named outputs, and steps per output, of a plan's postprocess
MAX_CLIENT_LABELS = 1 << 16


def _step_record(step) -> dict:
    """A ClientStep as JSON (labels as str or int)."""
    return {"function": step.function, "axis": step.axis, "keepdims": step.keepdims, "dtype": step.dtype,
            "labels": [v if isinstance(v, str) else int(v) for v in step.labels]}


def _postprocess_field(value) -> tuple:
    """The plan's ``postprocess`` records as ClientOutput objects, every field checked (ParameterError)."""
    from hezk.model import ClientOutput, ClientStep, ModelFileError

    if not isinstance(value, list) or len(value) > MAX_CLIENT_OUTPUTS:
        raise ParameterError(f"model plan: postprocess must be a list of at most {MAX_CLIENT_OUTPUTS} outputs")
    outputs = []
    for i, out in enumerate(value):
        if not isinstance(out, dict) or not isinstance(out.get("name"), str) or \
                not isinstance(out.get("steps"), list) or len(out["steps"]) > MAX_CLIENT_OUTPUTS:
            raise ParameterError(f"model plan: postprocess[{i}] must be {{'name': str, 'steps': a list of at most "
                                 f"{MAX_CLIENT_OUTPUTS} steps}}")
        steps = []
        for step in out["steps"]:
            labels = step.get("labels", []) if isinstance(step, dict) else None
            if not isinstance(labels, list) or len(labels) > MAX_CLIENT_LABELS or \
                    not all(isinstance(v, (str, int)) and not isinstance(v, bool) for v in labels) or \
                    set(step) - {"function", "axis", "labels", "keepdims", "dtype"} or \
                    not isinstance(step.get("axis", -1), int) or not isinstance(step.get("dtype", ""), str):
                raise ParameterError(f"model plan: postprocess[{i}] has a malformed step {step!r:.80}")
            try:
                steps.append(ClientStep(**dict(step, labels=tuple(labels))))
            except ModelFileError as error:
                raise ParameterError(f"model plan: postprocess[{i}]: {error}") from None
        outputs.append(ClientOutput(out["name"], tuple(steps)))
    return tuple(outputs)


def _finish_field(value) -> str:
    if value != "" and value not in FINISH_FUNCTIONS:
        raise ParameterError(f"model plan: finish={value!r:.80} must be '' or one of {FINISH_FUNCTIONS}")
    return value


def _patches_field(value):
    """The ``patches`` entry of a plan's dict: None or four non-negative ints (kh, kw, stride, padding)."""
    if value is None:
        return None
    if not isinstance(value, (list, tuple)) or len(value) != 4 or not all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value) or min(value[:3]) < 1:
        raise ParameterError(f"model plan: patches={value!r:.80} must be null or [kh, kw, stride, padding]")
    return tuple(value)


def _bootstrap_fields(data) -> dict:
    """``bootstrap`` / ``bootstraps`` of a plan's dict (absent: none); the plan's constructor checks them."""
    if data.get("bootstrap") is None and data.get("bootstraps") is None:
        return {}
    config, before = data.get("bootstrap"), data.get("bootstraps")
    if not isinstance(config, dict) or not isinstance(before, list):
        raise ParameterError(f"model plan: bootstrap={config!r:.80} must be an object and bootstraps="
                             f"{before!r:.80} a list of stage indices")
    return {"bootstrap": BootstrapConfig(**config), "bootstraps": tuple(before)}


def _plan_from_pickle(data: dict, costs) -> ModelPlan:
    """Inverse of ``ModelPlan.__reduce__``."""
    plan = ModelPlan.from_dict(data)
    return plan if costs is None else replace(plan, costs=costs)
