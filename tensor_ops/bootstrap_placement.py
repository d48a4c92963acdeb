"""Where to bootstrap a chain of stages deeper than the parameters' levels.

A plan is a chain of stages, stage i consuming ``depths[i]`` levels; a ciphertext enters at ``input_level``
and a bootstrap (``crypto.ckks.bootstrap``) takes a ciphertext at any level to ``levels_after`` levels.
``place_bootstraps`` chooses the stages to bootstrap before: the fewest bootstraps, and among those the
cheapest plan when stage costs depend on the level they run at (fewer limbs are cheaper), by dynamic
programming over (stage, level): cost(i, l) = min(run stage i at l: c_i(l) + cost(i+1, l - d_i) if d_i <= l;
bootstrap first: B + c_i(L_b) + cost(i+1, L_b - d_i)), compared as (bootstraps, cost) pairs.  Running
every stage as late as possible (bootstrapping only when the next stage does not fit) already reaches the
fewest bootstraps; the program also prices the alternatives.  Costs are in ``CostModel`` units (one
key-switched rotation = 1) scaled by the limbs a level holds.
"""
from __future__ import annotations

import math
import operator
from dataclasses import dataclass
from functools import lru_cache

from crypto.errors import LevelError, ParameterError
from tensor_ops.plan.cost import CostModel


@dataclass(frozen=True)
class BootstrapPlacement:
    """``before``: the stage indices a bootstrap precedes; ``levels``: the level each stage starts at
    (after its bootstrap, if any); ``cost``: stages and bootstraps priced (CostModel units)."""

    depths: tuple[int, ...]
    input_level: int
    levels_after: int
    before: tuple[int, ...]
    levels: tuple[int, ...]
    cost: float = 0.0
    bootstrap_cost: float = 0.0

    @property
    def count(self) -> int:
        return len(self.before)

    @property
    def output_level(self) -> int:
        if not self.depths:
            return self.input_level
        return self.levels[-1] - self.depths[-1]

    def explain(self) -> str:
        lines = [f"bootstrap placement: {len(self.depths)} stages, depth {sum(self.depths)}, input level "
                 f"{self.input_level}, {self.levels_after} levels after a bootstrap: {self.count} bootstraps"
                 + (f" (before stages {list(self.before)})" if self.before else "")]
        if self.bootstrap_cost:
            lines.append(f"  cost {self.cost:.1f} (rotation units), of which bootstraps "
                         f"{self.count * self.bootstrap_cost:.1f} ({self.bootstrap_cost:.1f} each)")
        lines.append(f"  output at level {self.output_level}")
        return "\n".join(lines)


def _as_int(v):
    """An int from an int or numpy integer (anything else is returned as is, for the check to refuse)."""
    if isinstance(v, bool):
        return v
    try:
        return operator.index(v)
    except TypeError:
        return v


def _check_level(name, v):
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise ParameterError(f"{name}={v!r} must be a non-negative integer")
    return v


def place_bootstraps(depths, levels_after: int, *, input_level: int | None = None, stage_cost=None,
                     bootstrap_cost: float = 0.0) -> BootstrapPlacement:
    """The fewest bootstraps that let stages of ``depths`` run from ``input_level`` (default
    ``levels_after``), each bootstrap giving ``levels_after`` levels; ties broken by cost:
    ``stage_cost(i, level)`` per stage (default 0) plus ``bootstrap_cost`` per bootstrap.
    LevelError if a stage is deeper than ``levels_after`` (no placement exists)."""
    depths = tuple(_check_level(f"depths[{i}]", _as_int(d)) for i, d in enumerate(depths))
    levels_after = _check_level("levels_after", levels_after)
    input_level = levels_after if input_level is None else _check_level("input_level", input_level)
    if not (isinstance(bootstrap_cost, (int, float)) and bootstrap_cost >= 0):
        raise ParameterError(f"bootstrap_cost={bootstrap_cost!r} must be a non-negative number")
    for i, d in enumerate(depths):
        if d > levels_after and (i > 0 or d > input_level):
            raise LevelError(f"stage {i} needs {d} levels; a bootstrap leaves {levels_after}: no placement "
                             f"exists (use parameters with more levels or split the stage)")
    cost_of = (lambda i, level: 0.0) if stage_cost is None else stage_cost

    @lru_cache(maxsize=None)
    def best(i: int, level: int):
        """(bootstraps, cost, bootstrapped before stage i?) for stages i.. entered at ``level``."""
        if i == len(depths):
            return (0, 0.0, False)
        options = []
        d = depths[i]
        if d <= level:
            n, c, _ = best(i + 1, level - d)
            options.append((n, c + cost_of(i, level), False))
        if d <= levels_after:
            n, c, _ = best(i + 1, levels_after - d)
            options.append((n + 1, c + bootstrap_cost + cost_of(i, levels_after), True))
        return min(options, key=lambda o: (o[0], o[1]))

    before, levels, level = [], [], input_level
    for i in range(len(depths)):
        if best(i, level)[2]:
            before.append(i)
            level = levels_after
        levels.append(level)
        level -= depths[i]
    n, cost, _ = best(0, input_level) if depths else (0, 0.0, False)
    assert n == len(before)
    return BootstrapPlacement(depths, input_level, levels_after, tuple(before), tuple(levels), float(cost),
                              float(bootstrap_cost))


# -- pricing ---------------------------------------------------------------------------------------
def _size(params, level: int) -> float:
    """Relative cost of an operation at ``level``: its limbs (plus P's) over the top level's."""
    p = len(params.p_moduli)
    return (params.limbs_at(level) + p) / (params.limbs_at(params.max_level) + p)


def bootstrap_cost(bootstrap_plan, costs: CostModel | None = None) -> float:
    """One bootstrap in CostModel units: its operation counts (``BootstrapPlan.operation_counts``), each
    phase scaled by the limbs of the level it starts at."""
    from collections import Counter

    costs = costs or CostModel()
    return sum(costs.of(Counter(counts)) * _size(bootstrap_plan.params, level)
               for _, level, counts in bootstrap_plan.operation_counts())


def stage_cost_model(params, counts_of, costs: CostModel | None = None):
    """stage_cost(i, level) for ``place_bootstraps``: ``counts_of(i)`` ({operation: count}) priced by
    ``costs`` and scaled by the limbs of ``level``."""
    from collections import Counter

    costs = costs or CostModel()
    return lambda i, level: costs.of(Counter(counts_of(i))) * _size(params, level)


def place_for_model_plan(model_plan, bootstrap_plan, costs: CostModel | None = None) -> BootstrapPlacement:
    """Bootstraps for a ``tensor_ops.model_plan.ModelPlan`` whose depth exceeds its parameters' levels:
    inputs at the top level, ``bootstrap_plan.levels_left`` levels after each bootstrap; stages priced from
    their public counts (baby steps hoisted, giant steps, diagonals, ct x ct products)."""
    stages = model_plan.stages

    def counts_of(i):
        s = stages[i]
        return {"hoisted_rotations": sum(1 for b in s.baby if b), "rotations": sum(1 for m in s.giant if m)
                + sum(1 for k in s.presum if k), "pt_mults": s.diagonals, "additions": s.diagonals,
                "ct_mults": s.ct_ct_multiplications,
                "rescales": 1 if s.kind == "affine" else s.ct_ct_multiplications}

    params = model_plan.params
    return place_bootstraps([s.depth for s in stages], bootstrap_plan.levels_left, input_level=params.max_level,
                            stage_cost=stage_cost_model(params, counts_of, costs),
                            bootstrap_cost=bootstrap_cost(bootstrap_plan, costs))


def cached_bootstrap_plan(params, config):
    """The memoised ``crypto.ckks.bootstrap.plan_for(params, config)`` (shared with key generation)."""
    from crypto.ckks.bootstrap import plan_for

    return plan_for(params, config)


def stage_levels(depths, before, input_level: int, levels_after: int) -> tuple[int, ...]:
    """The level each stage starts at when bootstraps precede the stages ``before``; LevelError naming the
    first stage that does not fit (the check of a placement read from a plan)."""
    levels, level, before = [], input_level, set(before)
    for i, d in enumerate(depths):
        if i in before:
            level = levels_after
        if d > level:
            raise LevelError(f"stage {i} needs {d} levels, {level} are left there (bootstraps before stages "
                             f"{sorted(before)}, {levels_after} levels after each)")
        levels.append(level)
        level -= d
    return tuple(levels)


def naive_bootstraps(depths, levels_after: int, input_level: int | None = None) -> int:
    """The greedy count (bootstrap only when the next stage does not fit): the twin of the minimum."""
    level = levels_after if input_level is None else input_level
    n = 0
    for d in depths:
        if d > level:
            n, level = n + 1, levels_after
        level -= d
    return n


def min_bootstraps_brute_force(depths, levels_after: int, input_level: int | None = None) -> float:
    """The fewest bootstraps by trying every subset of positions (tests only: 2^len(depths))."""
    level0 = levels_after if input_level is None else input_level
    best = math.inf
    for mask in range(1 << len(depths)):
        level, ok = level0, True
        for i, d in enumerate(depths):
            if mask >> i & 1:
                level = levels_after
            if d > level:
                ok = False
                break
            level -= d
        if ok:
            best = min(best, bin(mask).count("1"))
    return best
