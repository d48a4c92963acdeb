"""Crafted CipherTensor records and model plans: any field of a genuine one replaced by any JSON value gives a
working object or the library's own error naming the field (SerializationError, ParameterError, ShapeError),
never a TypeError, ValueError, OverflowError or MemoryError; sizes are bounded before anything is allocated."""
from __future__ import annotations

import copy

import numpy as np
import pytest
from hypothesis import given, strategies as st

import hezk.record
from crypto import CKKSContext, CKKSParameters, SerializationError
from crypto.errors import HEError, ParameterError
from tensor_ops import CipherTensor, encrypt
from tensor_ops.model_plan import ModelPlan
from tensor_ops.nn import Linear, Sequential, Square
from tensor_ops.tensor_base import RECORD_KIND

JSON = st.recursive(st.none() | st.booleans() | st.integers(-2 ** 70, 2 ** 70) | st.floats() | st.text(max_size=4),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner,
                                                                                max_size=3),
                    max_leaves=10)
INTS = st.sampled_from([-1, 0, 1, 2, 3, 7, 2 ** 13, 2 ** 31, 2 ** 62, 2 ** 70])
VALUE = st.one_of(JSON, INTS, st.lists(INTS, max_size=4))


def paths(value, prefix=()):
    """Every path to a value inside nested dicts and lists (the root excluded)."""
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    else:
        return
    for key, item in items:
        yield prefix + (key,)
        yield from paths(item, prefix + (key,))


def mutated(document, edits):
    """``document`` with the value at each (path, value) of ``edits`` replaced (an edit inside a value an
    earlier edit replaced is skipped)."""
    document = copy.deepcopy(document)
    for path, value in edits:
        if path in set(paths(document)):
            target = document
            for key in path[:-1]:
                target = target[key]
            target[path[-1]] = value
    return document


def edits_of(document):
    return st.lists(st.tuples(st.sampled_from(list(paths(document))), VALUE), min_size=1, max_size=2)


# -- CipherTensor records --------------------------------------------------------------------------------------
PARAMS = CKKSParameters.preset("TOY")
CTX = CKKSContext.keygen(PARAMS, seed=5)
X = np.arange(24, dtype=float).reshape(2, 3, 4) / 10
RECORD = hezk.record.unpack(encrypt(CTX, X).to_bytes(), RECORD_KIND)
PARTS = [a.tobytes() for a in RECORD.arrays]


def craft_tensor(meta, parts=PARTS) -> bytes:
    return hezk.record.pack(RECORD_KIND, meta, parts)


def test_a_genuine_record_reads_back():
    """Positive control: the crafting path reproduces the tensor."""
    tensor = CipherTensor.from_bytes(craft_tensor(RECORD.meta), CTX)
    np.testing.assert_allclose(tensor.decrypt(CTX), X, atol=1e-6)


@pytest.mark.parametrize("field,value,match", [
    ("shape", [1 << 40], "shape"),  # with stride 0 once allocated 2^40 elements on decrypting
    ("slots", 1 << 40, "slots"),
    ("slots", 2 * PARAMS.slots, "its context"),
    ("strides", [0, 0, 0.5], "strides"),
    ("clean", "yes", "clean"),
    ("replicas", [[0, 1]], "replica"),
    ("tiles", [[-1, [0, 0, 0], [2, 3, 4], 0]], r"tiles\[0\].ct"),
    ("tiles", [[0, [0, 0, 0], [2, 3, 4], float("inf")]], r"tiles\[0\].offset"),
    ("tiles", {"a": 1}, "tiles"),
])
def test_crafted_layout_fields_are_refused_by_name(field, value, match):
    meta = dict(RECORD.meta, **{field: value})
    if field == "shape":
        meta.update(strides=[0], tiles=[[0, [0], [1 << 40], 0]])
    with pytest.raises(SerializationError, match=match):
        CipherTensor.from_bytes(craft_tensor(meta), CTX)


def test_a_tile_cannot_hold_more_elements_than_slots_with_zero_strides():
    slots = PARAMS.slots
    meta = dict(RECORD.meta, shape=[slots, 2], strides=[1, 0], tiles=[[0, [0, 0], [slots, 2], 0]])
    with pytest.raises(SerializationError, match="more than slots"):
        CipherTensor.from_bytes(craft_tensor(meta), CTX)


@given(edits_of(RECORD.meta))
def test_mutated_layouts_give_a_tensor_or_a_library_error(edits):
    try:
        tensor = CipherTensor.from_bytes(craft_tensor(mutated(RECORD.meta, edits)), CTX)
        values = tensor.decrypt(CTX)
    except HEError:
        return
    assert values.shape == tensor.shape


# -- model plans ------------------------------------------------------------------------------------------------
def _plan_dict():
    rng = np.random.default_rng(0)
    model = Sequential([Linear(rng.normal(0, .5, (4, 6)), rng.normal(0, .5, 4)), Square(),
                        Linear(rng.normal(0, .5, (3, 4)))], input_shape=(6,))
    return model.plan().to_dict()


PLAN = _plan_dict()


def test_a_genuine_plan_round_trips():
    plan = ModelPlan.from_dict(copy.deepcopy(PLAN))
    assert plan.to_dict() == PLAN


@pytest.mark.parametrize("path,value,match", [
    (("stages", 0, "depth"), "2", r"stages\[0\].depth"),
    (("stages", 0, "depth"), float("inf"), r"stages\[0\].depth"),
    (("stages", 2, "baby", 0), 1 << 62, r"stages\[2\].baby\[0\]"),
    (("stages", 0, "g"), {}, r"stages\[0\].g"),
    (("stages", 0, "kind"), ["affine"], r"stages\[0\].kind"),
    (("layers", 1, "dense_cost"), "cheap", r"layers\[1\].dense_cost"),
    (("layers", 1, "stage"), 9, r"layers\[1\].stage"),
    (("input_shape",), [1 << 31, 1 << 31], "input_shape"),
    (("block",), 12, "block"),
    (("key_budget",), 1.5, "key_budget"),
    (("stages",), {"a": 1}, "stages"),
])
def test_crafted_plan_fields_are_refused_by_name(path, value, match):
    with pytest.raises(ParameterError, match=match):
        ModelPlan.from_dict(mutated(PLAN, [(path, value)]))


def test_patches_too_wide_for_the_slots_are_refused_before_the_gather_is_built():
    data = dict(copy.deepcopy(PLAN), input_shape=[1, 4096, 4096], patches=[3, 3, 1, 1])
    with pytest.raises(ParameterError, match="patches"):
        ModelPlan.from_dict(data)


@given(edits_of(PLAN))
def test_mutated_plans_give_a_plan_or_a_library_error(edits):
    try:
        plan = ModelPlan.from_dict(mutated(PLAN, edits))
        plan.explain()
        plan.input_layout(1)
        plan.output_layout(1)
        assert plan.rotations == tuple(sorted(plan.rotations))
    except HEError:
        return
