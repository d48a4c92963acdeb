"""The skewed strategy for two encrypted matrices (``tensor_ops.plan.skewed``: Jiang et al. 2018's diagonal products,
as THOR uses them for attention): forced (the other strategies withheld) it equals numpy.einsum for batched
products in random layouts (hypothesis, PlainBackend) and encrypted on an INSECURE N = 2^10 ring (tests only); at
attention's sizes the planner chooses it on its cost (fewer rotations than replicate-multiply-reduce, O(K) per output
ciphertext) and its output is one compact ciphertext."""
from __future__ import annotations

import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tensor_ops import PlainBackend, einsum, encrypt
from tensor_ops.layout import SlotLayout
from tensor_ops.parse import parse
from tensor_ops.plan import build_plan, plan

from .test_plan_two_encrypted import SMALL_RING, packed, random_layout

build = sys.modules["tensor_ops.plan.build"]


@pytest.fixture
def skewed_only(monkeypatch):
    """The planner with only the skewed strategy for two encrypted operands."""
    monkeypatch.setattr(build, "pair_with", lambda *args, **kw: None)
    monkeypatch.setattr(build, "pair_stationary", lambda *args, **kw: None)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_skewed_products_equal_numpy_in_random_layouts(skewed_only, data):
    """(the fixture only withholds strategies: the same for every example)"""
    expr = data.draw(st.sampled_from(("hid,hjd->hij", "hij,hjd->hid", "ij,jk->ik", "ik,jk->ij", "bhid,bhjd->bhij")))
    k = data.draw(st.sampled_from((2, 4, 8)))
    contracted = {"hid,hjd->hij": "d", "hij,hjd->hid": "j", "ij,jk->ik": "j", "ik,jk->ij": "k",
                  "bhid,bhjd->bhij": "d"}[expr]
    sizes = {c: data.draw(st.sampled_from((k // 2 or 1, k, 2 * k, 3 * k))) for c in "ijkd"}
    sizes.update({"h": data.draw(st.integers(1, 3)), "b": data.draw(st.integers(1, 2)), contracted: k})
    slots = data.draw(st.sampled_from((256, 512, 1024)))
    inputs = expr.split("->")[0].split(",")
    shapes = [tuple(sizes[c] for c in term) for term in inputs]
    layouts = tuple(random_layout(data, s, slots) for s in shapes)
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    arrays = [rng.normal(size=s) for s in shapes]
    try:
        p = build_plan(parse(expr, *shapes), (True, True), layouts, slots)
    except IndexError:      # nothing applies (a block larger than the slots, sizes neither dividing the other)
        return
    assert any("skewed" in note for note in p.notes)
    out = p.run(PlainBackend(slots), [packed(lay, a, rng) for lay, a in zip(layouts, arrays)])
    np.testing.assert_allclose(p.output_layout.unpack(out), np.einsum(expr, *arrays), atol=1e-8)


@pytest.mark.parametrize("expr, first, second", [("hid,hjd->hij", (2, 16, 8), (2, 16, 8)),
                                                 ("hij,hjd->hid", (2, 16, 16), (2, 16, 8))])
def test_skewed_products_encrypted(skewed_only, expr, first, second):
    """Encrypted at a small INSECURE ring (tests only): within 1e-6 of numpy (the TOY bound)."""
    from crypto import CKKSContext, CKKSParameters

    params = CKKSParameters.from_literal(SMALL_RING)
    p = plan(expr, first, second, params=params)
    assert any("skewed" in note for note in p.notes)
    ctx = CKKSContext.keygen(params, rotations=p.rotations(), seed=5)
    rng = np.random.default_rng(6)
    a, b = rng.uniform(-1, 1, first), rng.uniform(-1, 1, second)
    got = einsum(expr, encrypt(ctx, a), encrypt(ctx, b), plan=p).decrypt()
    assert np.max(np.abs(got - np.einsum(expr, a, b))) <= 1e-6 * max(1.0, np.max(np.abs(got)))


def test_attention_products_choose_the_skewed_layout():
    """Attention's scores and weighted sum at sequence 64, head size 32, 2 heads (8192 slots), with q, k, v in the
    layout the head reshape leaves: the planner prices the skewed products below the alternatives and takes them
    (scores in one ciphertext instead of one per pair of key rows); rotations grow like K per output ciphertext."""
    sequence, heads, dim, slots = 64, 2, 32, 8192
    q = SlotLayout((1, heads, sequence, dim), (0, dim, heads * dim, 1), slots)
    scores = build_plan(parse("bhid,bhjd->bhij", q.shape, q.shape), (True, True), (q, q), slots)
    assert "skewed" in scores.notes[0].split("over")[0] and scores.output_layout.n_ciphertexts == 1
    weighted = build_plan(parse("bhij,bhjd->bhid", scores.output_layout.shape, q.shape), (True, True),
                          (scores.output_layout, q), slots)
    assert "skewed" in weighted.notes[0].split("over")[0]
    for p in (scores, weighted):
        others = [float(part.rsplit("est. ", 1)[1]) for part in p.notes[0].split("over", 1)[1].split(";")]
        assert p.cost()["estimate"] < min(others)
        assert p.cost()["rotations"] <= 4 * sequence + 2 * (sequence + dim) + 16
    rng = np.random.default_rng(0)
    qa, ka, va = (rng.normal(size=q.shape) for _ in range(3))
    s = scores.simulate(qa, ka)
    np.testing.assert_allclose(s, np.einsum("bhid,bhjd->bhij", qa, ka), atol=1e-9)
    np.testing.assert_allclose(weighted.simulate(s, va), np.einsum("bhij,bhjd->bhid", s, va), atol=1e-8)
