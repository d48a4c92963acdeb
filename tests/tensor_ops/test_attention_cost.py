"""Where the attention path's estimated time goes and the cuts made to it (issue 34's BERT-tiny layer):
rescales and encodings counted as they run, the estimate broken down by node, one refresh of an approximation's
input before its whole schedule (``_Refreshing.prepare``), Softmax without levels for affine maps, the signed
power-of-two rotation keys."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import hezk.model
from tensor_ops.attention import SoftmaxApprox, approximate, choose_exp, exp_error, raw_basis
from tensor_ops.attention_plan import (ATTENTION_BOOTSTRAP, ESTIMATE_COSTS, BootstrapRecorder, attention_config,
                                       plan_attention, rotation_units)
from tensor_ops.backends import rotation_route
from tensor_ops.nn import LevelRecorder
from tensor_ops.tensor import encrypt


def test_recorder_counts_rescales_and_encodes_each_constant_once_per_level():
    """A product by a constant is one ct x pt product and one rescale; the same constant at the same level is
    encoded once (the run's cache of encodings), at another level again; a ct x ct product encodes nothing."""
    recorder = BootstrapRecorder(64, 6, 6)
    x = encrypt(recorder, np.linspace(-1, 1, 8))
    c = np.linspace(0.5, 1.5, 8)
    y = x * c
    z = x * c                      # the same constant at the same level: no second encoding
    w = y * c                      # one level lower: encoded again
    _ = z * w                      # ct x ct
    assert recorder.products == {"ct_ct": 1, "ct_pt": 3, "rescale": 4, "encode": 2}


def test_products_are_priced_without_a_rescale_each_when_rescales_are_counted():
    """With rescales recorded, a node's products are priced without a rescale of their own and its rescales and
    encodings at ``CostModel.rescale`` / ``encode``; counts recorded before (no rescale kind) keep the old price."""
    c, powers = ESTIMATE_COSTS, tuple(1 << i for i in range(10))
    new = (("node_products", (("mm", "ct_pt", 10), ("mm", "rescale", 2), ("mm", "encode", 4))),)
    assert dict(dict(rotation_units(new, powers, 1 << 10))["node_units"])["mm"] == \
        round(10 * c.pt_mult + 2 * c.rescale + 4 * c.encode, 1)
    old = (("node_products", (("mm", "ct_pt", 10),)),)
    assert dict(dict(rotation_units(old, powers, 1 << 10))["node_units"])["mm"] == \
        round(10 * (c.pt_mult + c.rescale), 1)


def test_signed_powers_of_two_compose_a_negative_step_in_one_rotation():
    """The signed power-of-two key set routes -1 in one keyed rotation (15 with the positive powers alone at
    N/2 = 2^15 slots) and no step takes more rotations than with the positive set."""
    from tensor_ops.attention_plan import _power_of_two_steps, _signed_power_of_two_steps

    slots = 1 << 15
    positive, signed = _power_of_two_steps(slots), _signed_power_of_two_steps(slots)
    assert len(rotation_route(-1, positive, slots)) == 15 and rotation_route(-1, signed, slots) == (slots - 1,)
    for step in np.random.default_rng(0).integers(1, slots, 200):
        assert len(rotation_route(int(step), signed, slots)) <= len(rotation_route(int(step), positive, slots))


def test_the_attention_bootstrap_drops_the_arcsin_correction_unless_named():
    from crypto.ckks.bootstrap import BootstrapConfig

    assert attention_config(None) == attention_config(True) == ATTENTION_BOOTSTRAP and not ATTENTION_BOOTSTRAP.arcsin
    named = BootstrapConfig(cts_levels=2, stc_levels=2)
    assert attention_config(named) is named


@settings(max_examples=25, deadline=None)
@given(low=st.floats(-12.0, -0.5), tolerance=st.sampled_from([1e-5, 1e-4, 1e-3]))
def test_chosen_exp_is_within_its_target_and_no_cheaper_option_is(low, tolerance):
    """``choose_exp`` returns the fewest levels whose exp error on [low, 0] is within the target: that option
    meets it and every option with fewer levels misses it (the naive search over all options is the twin)."""
    degree, squarings = choose_exp(low, tolerance, shift=0.5)

    def levels(d, r):
        return math.ceil(math.log2(d + 1)) + r + (not raw_basis(0.5, low, d))

    most = max(0, math.ceil(math.log2(-low))) + 2
    feasible = [levels(d, r) for d in (3, 7) for r in range(most + 1) if exp_error(low, d, r) <= tolerance]
    if feasible:
        assert exp_error(low, degree, squarings) <= tolerance and levels(degree, squarings) == min(feasible)


@pytest.mark.parametrize("spread", [0.3, 0.8, 2.0])
def test_softmax_spends_no_level_on_affine_maps_and_keeps_its_tolerance(spread):
    """On a level-recording backend the Softmax consumes at most its stated depth plus the broadcast of its row
    sums (a mask in that layout), fewer levels than exp's normalisation and the reciprocal's start line took
    (one each); within 1e-3 of numpy's softmax on the calibration scores."""
    scores = spread * np.random.default_rng(1).normal(size=(1, 4, 16))
    approx = SoftmaxApprox.calibrated(scores, tolerance=1e-3)
    recorder = LevelRecorder(256)
    out = approx(encrypt(recorder, scores))
    exact = np.exp(scores - scores.max(-1, keepdims=True))
    exact /= exact.sum(-1, keepdims=True)
    assert np.max(np.abs(out.decrypt() - exact)) < 1e-3
    before = 1 + math.ceil(math.log2(approx.degree + 1)) + approx.squarings + 1 + 2 * approx.reciprocal.steps + 1
    assert recorder.consumed <= approx.depth + 1 and approx.depth < before


def _gelu_graph():
    return hezk.model.Graph("x", (8, 8), (hezk.model.Activation("act", "Gelu", ("x",), "y", "gelu"),), "y")


def test_an_activation_runs_on_one_refresh_of_its_input():
    """An input below the levels a GELU polynomial needs is bootstrapped once before it (``prepare``): one site of
    the input, none of its powers; values kept."""
    graph = _gelu_graph()
    x = np.random.default_rng(2).normal(size=(4, 8, 8))
    model = approximate(graph, x)
    recorder = BootstrapRecorder(256, 3, 8)      # refreshed as they ran out: two of its powers at level 0
    y = model.forward(encrypt(recorder, x[:1]))
    assert [(s.node, s.ciphertexts, s.level_in) for s in recorder.sites] == [("act", 1, 3)]
    np.testing.assert_allclose(y.decrypt(), model.forward(x[:1]), atol=1e-9)
    assert model.node_depth(graph.nodes[0], encrypt(LevelRecorder(256), x[:1])) <= 8


@pytest.mark.slow
def test_time_breakdown_sums_to_the_estimate():
    """The breakdown by node (operations and bootstraps) sums to the plan's estimate and names the bootstraps'
    nodes; every row's seconds are non-negative."""
    from tests.tensor_ops.test_attention_bootstrap import CONFIG, INPUT_LEVEL, _calibration, _graph, _toy

    plan, _ = plan_attention(_graph(), _calibration(), params=_toy(), bootstrap=CONFIG, allow_insecure=True,
                             input_level=INPUT_LEVEL)
    rows = plan.time_breakdown()
    assert sum(r[1] + r[3] for r in rows) == pytest.approx(plan.estimated_seconds, rel=1e-3)
    assert sum(r[2] for r in rows) == plan.bootstrap_count and all(r[1] >= 0 and r[3] >= 0 for r in rows)
    assert {r[0] for r in rows if r[2]} == {s.node for s in plan.bootstraps}


def test_operations_are_priced_at_the_level_they_ran_at():
    """Rotations and products recorded with their level weigh ``weight(level)`` (limbs relative to the reference);
    entries without a level (-1, or the older shorter records) weigh 1."""
    c, slots = ESTIMATE_COSTS, 1 << 10
    operations = (("amounts", (("a", 1, False, 4, 2), ("a", 2, True, -1, 2), ("b", 4, False, 1, 1))),
                  ("node_products", (("a", "ct_ct", 4, 1), ("a", "rescale", 4, 1), ("b", "ct_pt", 1, 3))))
    weight = {4: 2.0, 1: 0.5}.get
    out = dict(rotation_units(operations, None, slots, weight))
    assert out["rotation_units"] == round(2 * 2.0 + 2 * c.hoisted_rotation + 0.5, 2)
    assert out["product_units"] == round((c.ct_mult + c.rescale) * 2.0 + 3 * c.pt_mult * 0.5, 2)
    plain = dict(rotation_units(operations, None, slots))
    assert plain["rotation_units"] == round(2 + 2 * c.hoisted_rotation + 1, 2)


def test_encodings_are_counted_as_the_runs_bounded_cache_keeps_them():
    """The recorder drops its oldest encoding past ``cache_size`` as the run's cache does (a constant dropped is
    encoded again); the cache of a bootstrapping run at N16_BOOT holds at most ``PLAINTEXT_CACHE_BYTES`` (the default
    2,048 entries would be 25 GB there)."""
    from crypto import CKKSParameters
    from tensor_ops.attention_plan import PLAINTEXT_CACHE_BYTES, plaintext_cache_entries

    recorder = BootstrapRecorder(64, 6, 6, cache_size=1)
    x = encrypt(recorder, np.linspace(-1, 1, 8))
    a, b = np.full(8, 0.5), np.full(8, 0.25)
    _ = (x * a, x * b, x * a)
    assert recorder.products["encode"] == 3
    params = CKKSParameters.preset("N16_BOOT")
    entries = plaintext_cache_entries(params, 8)
    assert 16 <= entries < 2048 and entries * params.limbs_at(10) * params.n * 8 <= PLAINTEXT_CACHE_BYTES


def test_a_rotation_near_level_zero_touches_fewer_key_switching_digits():
    """``switching_work``: (digits holding a limb of the level + 1) x (limbs + P), rising with the level; on
    N16_BOOT the top's 6 digits, 3 at 8 levels (0.28 of the top's work, where the limbs alone give 0.48), 1 at
    level 3; rotations weigh it apart from products in ``rotation_units``."""
    from crypto import CKKSParameters
    from tensor_ops.attention_plan import switching_work

    params = CKKSParameters.preset("N16_BOOT")
    works = [switching_work(params, level) for level in range(params.max_level + 1)]
    assert works == sorted(works) and works[-1] == 7 * 58 and works[8] == 4 * 28 and works[3] == 2 * 18
    operations = (("amounts", (("a", 1, False, 4, 1),)), ("node_products", (("a", "ct_pt", 4, 1),
                                                                           ("a", "rescale", 4, 1))))
    out = dict(rotation_units(operations, None, 1 << 10, lambda level: 2.0, lambda level: 0.5))
    c = ESTIMATE_COSTS
    assert out["rotation_units"] == 0.5 and out["product_units"] == round((c.pt_mult + c.rescale) * 2.0, 2)


@settings(max_examples=20, deadline=None)
@given(low=st.floats(0.2, 2.0), ratio=st.floats(1.05, 6.0), tolerance=st.sampled_from([1e-4, 1e-3]))
def test_inverse_sqrt_takes_the_interpolant_where_it_is_shallower_and_keeps_the_tolerance(low, ratio, tolerance):
    """The inverse square root is within its tolerance on its range in either form, takes the Chebyshev
    interpolant only where it needs no more levels than the line and Newton's steps, and consumes its stated depth
    on a level-recording backend (the normalisation folded with scale and offset)."""
    from tensor_ops.attention import InverseSqrtApprox

    approx = InverseSqrtApprox(low, low * ratio, tolerance)
    grid = np.linspace(low, low * ratio, 301)
    assert np.max(np.abs(approx(4.0 * grid, 0.25, 0.0) * np.sqrt(grid) - 1.0)) <= tolerance * 1.01
    assert approx.depth <= 1 + 2 * approx.steps
    recorder = LevelRecorder(64)
    approx(encrypt(recorder, 4.0 * grid[:32]), 0.25, 0.0)
    assert recorder.consumed == approx.depth
