"""The attention plan's records of its encrypted x encrypted products (``contraction_records``: the layout the
planner's cost model chose, its estimate, rotations, depth) and its rotation pricing on the keys the plan makes
(``rotation_units``: a step without its own key composed of power-of-two ones, as ``CKKSBackend`` runs it)."""
from __future__ import annotations

import pytest

from tensor_ops.attention_plan import ESTIMATE_COSTS, contraction_records, rotation_units
from tensor_ops.backends import rotation_route
from tensor_ops.layout import SlotLayout
from tensor_ops.parse import parse
from tensor_ops.plan import build_plan, plan


def test_records_name_the_products_of_two_encrypted_tensors_only():
    q = SlotLayout((1, 2, 64, 32), (0, 32, 64, 1), 8192)
    scores = build_plan(parse("bhid,bhjd->bhij", q.shape, q.shape), (True, True), (q, q), 8192)
    square = plan("ij,ij->ij", (8, 8), (8, 8), slots=64)                 # elementwise: nothing contracted
    weights = plan("ij,jk->ik", (8, 8), (8, 8), slots=64, encrypted=(True, False))
    (record,) = contraction_records([scores, square, weights])
    expression, strategy, estimate, rotations, depth, outputs = record
    assert expression == scores.spec.expression() and strategy.startswith("skewed diagonal products")
    assert (estimate, rotations, depth, outputs) == (scores.cost()["estimate"], scores.cost()["rotations"],
                                                     scores.depth(), 1)


def test_rotation_units_price_composed_steps_as_they_run():
    slots, c = 1 << 10, ESTIMATE_COSTS
    amounts = ((1, False, 3), (5, False, 2), (slots - 128, True, 4), (64, True, 1))
    operations = (("rotations", 5), ("hoisted_rotations", 5), ("amounts", amounts))
    keyed = dict(rotation_units(operations, None, slots))      # units rounded to 0.01
    assert "amounts" not in keyed and keyed["rotations"] == 5
    assert keyed["rotation_units"] == pytest.approx(5 * c.rotation + 5 * c.hoisted_rotation, abs=0.005)
    powers = tuple(1 << i for i in range(10))
    composed = dict(rotation_units(operations, powers, slots))["rotation_units"]
    route = len(rotation_route(slots - 128, powers, slots))
    assert route == 3 and len(rotation_route(5, powers, slots)) == 2
    assert composed == pytest.approx(3 * 1 + 2 * 2 + 4 * route * c.rotation + 1 * c.hoisted_rotation, abs=0.005)
    by_node = (("rotations", 5), ("amounts", (("softmax", 5, False, 2), ("matmul", 1, False, 3))),
               ("node_products", (("matmul", "ct_ct", 2), ("softmax", "ct_pt", 10))))
    out = dict(rotation_units(by_node, powers, slots))
    assert out["rotation_units"] == 7 and "node_products" not in out
    assert out["node_units"] == (("softmax", round(4 + 10 * (c.pt_mult + c.rescale), 1)),      # largest first
                                 ("matmul", round(3 + 2 * (c.ct_mult + c.rescale), 1)))


def test_a_dirty_tensor_is_cleaned_before_its_bootstrap():
    """A dirty tensor with nothing to pack (one ciphertext: a rotate-and-sum's partial sums in its other slots) is
    masked before its bootstrap where it has the level (the bootstrap then reads its values alone: the message
    coefficients the recorder states fall to the values' size); a clean one, or one at level 0, is bootstrapped as
    it is; the site states no spread."""
    import numpy as np

    from tensor_ops.attention_plan import BootstrapRecorder
    from tensor_ops.tensor import CipherTensor

    slots = 1024
    dirty = SlotLayout((16, 16), (64, 1), slots).with_clean(False)
    rule = BootstrapRecorder(slots, 3, 6, bootstrap_units=1000.0)
    assert rule.compaction_for(dirty, 1, 2) is not None and rule.compaction_for(dirty, 0, 1) is None
    assert rule.compaction_for(dirty.with_clean(True), 1, 2) is None

    def coefficient(level):
        recorder = BootstrapRecorder(slots, level, 6, bootstrap_units=1000.0)
        values = np.zeros(slots)
        values[:] = 60.0                                   # garbage: partial sums
        values[dirty.positions(dirty.tiles[0]).ravel()] = 0.5
        vector = recorder.encrypt(values)
        tensor = CipherTensor([vector], dirty, recorder)
        recorder.at_node("n")
        deep = plan("ij,ij->ij", (16, 16), (16, 16), slots=slots)   # consumes one level: a refresh below it
        recorder.refresh_operands(type("P", (), {"depth": lambda self: 4, "spec": deep.spec})(), [tensor])
        (site,) = recorder.sites
        assert site.spread == 0 and site.ciphertexts == 1
        return site.coefficient

    assert coefficient(0) > 30 and coefficient(2) < 1.0


def test_a_refresh_of_large_coefficients_asks_for_an_earlier_one():
    """A tracking recorder names a refresh whose message coefficients exceed Delta (a tensor of values ~100, as a
    layer norm's sum of squares) among those to move earlier (``find_early_refreshes``), and not one of small
    values."""
    import numpy as np

    from tensor_ops.attention_plan import BootstrapRecorder
    from tensor_ops.tensor import CipherTensor

    slots = 1024
    layout = SlotLayout((16, 16), (64, 1), slots)
    deep = plan("ij,ij->ij", (16, 16), (16, 16), slots=slots)
    step = type("P", (), {"depth": lambda self: 4, "spec": deep.spec})()
    for value, named in ((100.0, True), (0.5, False)):
        recorder = BootstrapRecorder(slots, 0, 6, bootstrap_units=1000.0, tracking=True)
        recorder.at_node("n")
        tensor = CipherTensor([recorder.encrypt(v) for v in layout.pack(np.full((16, 16), value))], layout, recorder)
        recorder.refresh_operands(step, [tensor])
        assert (len(recorder.sites), bool(recorder.blocked)) == (1, named)
