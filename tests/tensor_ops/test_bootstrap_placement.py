"""tensor_ops/bootstrap_placement.py: the fewest bootstraps (against a brute force over every subset of
positions), a valid level schedule, the cost tie-break, pricing from a BootstrapPlan, errors."""
import pytest
from hypothesis import given, settings, strategies as st

from crypto.errors import LevelError, ParameterError
from tensor_ops.bootstrap_placement import (min_bootstraps_brute_force, naive_bootstraps, place_bootstraps,
                                            place_for_model_plan, bootstrap_cost)


def _valid(p):
    """Every stage runs with enough levels; levels follow the schedule."""
    level = p.input_level
    for i, d in enumerate(p.depths):
        if i in p.before:
            level = p.levels_after
        assert p.levels[i] == level and d <= level
        level -= d
    assert p.output_level == level >= 0


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 5), max_size=11), st.integers(5, 9), st.integers(0, 12))
def test_fewest_bootstraps_match_brute_force(depths, after, start):
    p = place_bootstraps(depths, after, input_level=start)
    _valid(p)
    assert p.count == min_bootstraps_brute_force(depths, after, start) == naive_bootstraps(depths, after, start)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 4), min_size=1, max_size=9), st.integers(4, 8), st.integers(0, 2**31))
def test_cost_tie_break_is_the_cheapest_among_the_fewest(depths, after, seed):
    """With level-dependent stage costs, the plan is the cheapest of all minimal-count placements."""
    import random

    rng = random.Random(seed)
    weights = [rng.uniform(0.1, 2) for _ in depths]
    cost = lambda i, level: weights[i] * (level + 1)
    p = place_bootstraps(depths, after, input_level=after + 2, stage_cost=cost, bootstrap_cost=3.0)
    _valid(p)
    best = None
    for mask in range(1 << len(depths)):
        level, total, ok = after + 2, 0.0, True
        for i, d in enumerate(depths):
            if mask >> i & 1:
                level, total = after, total + 3.0
            if d > level:
                ok = False
                break
            total += cost(i, level)
            level -= d
        if ok:
            key = (bin(mask).count("1"), total)
            best = key if best is None or key < best else best
    assert p.count == best[0] and p.cost == pytest.approx(best[1])


def test_placement_prefers_cheap_levels_and_reports():
    # 4 levels from the input, 5 after a bootstrap: stages of depth 2, 2, 2 need exactly one bootstrap, before
    # stage 1 (levels 4, 5, 3) or stage 2 (levels 4, 2, 5): the cost model chooses
    cheap_low = place_bootstraps([2, 2, 2], 5, input_level=4, stage_cost=lambda i, level: level, bootstrap_cost=1)
    assert cheap_low.count == 1 and cheap_low.before == (2,) and cheap_low.cost == 4 + 2 + 1 + 5
    cheap_high = place_bootstraps([2, 2, 2], 5, input_level=4, stage_cost=lambda i, level: -level,
                                  bootstrap_cost=1)
    assert cheap_high.count == 1 and cheap_high.before == (1,) and cheap_high.levels == (4, 5, 3)
    text = cheap_low.explain()
    assert "1 bootstraps (before stages [2])" in text and "output at level 3" in text
    none = place_bootstraps([1, 1], 3, input_level=2)
    assert none.count == 0 and none.output_level == 0


def test_errors_name_the_parameter():
    with pytest.raises(LevelError, match="stage 1 needs 6 levels"):
        place_bootstraps([1, 6], 5, input_level=10)
    with pytest.raises(ParameterError, match="levels_after"):
        place_bootstraps([1], -1)
    with pytest.raises(ParameterError, match=r"depths\[0\]"):
        place_bootstraps([1.5], 3)
    with pytest.raises(ParameterError, match="bootstrap_cost"):
        place_bootstraps([1], 3, bootstrap_cost=-1)


def test_priced_from_a_bootstrap_plan_and_a_model_plan():
    """A BootstrapPlan's operation counts price a bootstrap; a ModelPlan's stages are placed."""
    from types import SimpleNamespace

    from crypto.ckks.bootstrap import BootstrapPlan, BootstrapConfig
    from crypto.params import CKKSParameters

    params = CKKSParameters.from_literal(dict(log_n=10, log_q=[[30, 30]] + [[25, 26]] * 16, log_p=[30] * 6,
                                              log_scale=50, dnum=6, hamming_weight=32, insecure=True))
    boot = BootstrapPlan(params, BootstrapConfig(slots=16, cts_levels=2, stc_levels=2, arcsin=False))
    phases = boot.operation_counts()
    assert [name for name, _, _ in phases] == ["mod_raise", "subsum", "coeff_to_slot", "eval_mod", "slot_to_coeff"]
    assert phases[1][2]["rotations"] == len(boot.subsum_steps)
    assert phases[3][2]["ct_mults"] == boot.degree - 1 + boot.double_angles
    assert bootstrap_cost(boot) > sum(c.get("rotations", 0) for _, _, c in phases) * 0.3
    affine = SimpleNamespace(kind="affine", depth=1, baby=(0, 1, 2), giant=(0, 3), presum=(), diagonals=6,
                             ct_ct_multiplications=0)
    act = SimpleNamespace(kind="activation", depth=2, baby=(), giant=(), presum=(), diagonals=0,
                          ct_ct_multiplications=2)
    model = SimpleNamespace(params=params, stages=(affine, act) * 6)            # depth 18 > 16 levels
    p = place_for_model_plan(model, boot)
    _valid(p)
    assert p.count == naive_bootstraps([1, 2] * 6, boot.levels_left, params.max_level) >= 1
    assert p.bootstrap_cost == pytest.approx(bootstrap_cost(boot))
    assert p.cost > p.count * p.bootstrap_cost > 0                # the stages are priced on top of the bootstraps


def test_a_real_model_plan_is_read():
    """place_for_model_plan reads a ModelPlan of tensor_ops.nn (stage depths and counts): within the levels,
    no bootstrap; its stages priced."""
    import numpy as np

    from crypto.ckks.bootstrap import BootstrapConfig, BootstrapPlan
    from tensor_ops.nn import Linear, Sequential, Square

    rng = np.random.default_rng(0)
    layers = []
    for _ in range(3):
        layers += [Linear(rng.normal(size=(4, 4)) * 0.3), Square()]
    literal = dict(log_n=10, log_q=[[30, 30]] + [[25, 26]] * 16, log_p=[30] * 6, log_scale=50, dnum=6,
                   hamming_weight=32, insecure=True)
    plan = Sequential(layers, input_shape=(4,)).plan(params=literal)
    boot = BootstrapPlan(plan.params, BootstrapConfig(slots=16, cts_levels=2, stc_levels=2, arcsin=False))
    p = place_for_model_plan(plan, boot)
    assert p.count == 0 and p.depths == tuple(s.depth for s in plan.stages)
    assert p.output_level == plan.params.max_level - int(plan.depth) and p.cost > 0
