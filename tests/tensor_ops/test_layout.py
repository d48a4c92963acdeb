"""SlotLayout: packing round trips, tiling, free transforms and validation."""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from crypto.errors import ShapeError
from tensor_ops.layout import SlotLayout, Tile

shapes = st.lists(st.integers(1, 9), min_size=1, max_size=4).map(tuple)


@given(shape=shapes, log_slots=st.integers(2, 9))
def test_compact_pack_unpack_round_trip_with_tiling(shape, log_slots):
    slots = 1 << log_slots
    lay = SlotLayout.compact(shape, slots)
    arr = np.arange(np.prod(shape), dtype=float).reshape(shape) + 1
    vectors = lay.pack(arr)
    assert len(vectors) == lay.n_ciphertexts == len(lay.tiles)
    assert all(len(v) == slots for v in vectors)
    np.testing.assert_array_equal(lay.unpack(vectors), arr)
    # every element stored exactly once, the rest zero (a clean layout)
    assert sorted(np.concatenate(vectors)[np.concatenate(vectors) != 0]) == sorted(arr.ravel())
    # tiles partition the index space
    cover = np.zeros(shape, dtype=int)
    for t in lay.tiles:
        cover[lay.index(t)] += 1
    assert (cover == 1).all()


def test_row_major_strides_and_single_tile():
    lay = SlotLayout.compact((3, 5), 16)
    assert lay.strides == (5, 1) and len(lay.tiles) == 1
    assert SlotLayout.compact((3, 5), 16, order=(1, 0)).strides == (1, 3)


def test_tiling_splits_outer_axis():
    lay = SlotLayout.compact((64, 64, 64), 8192)
    assert lay.n_ciphertexts == 32
    assert {t.size for t in lay.tiles} == {(2, 64, 64)}


def test_transpose_is_free_and_correct():
    arr = np.arange(24.0).reshape(2, 3, 4)
    lay = SlotLayout.compact(arr.shape, 32)
    vectors = lay.pack(arr)
    np.testing.assert_array_equal(lay.transpose((2, 0, 1)).unpack(vectors), arr.transpose(2, 0, 1))


def test_diagonal_reads_the_diagonal_and_turns_dirty():
    arr = np.arange(16.0).reshape(4, 4)
    for slots in (16, 4):  # one tile, and tiles of one row each
        lay = SlotLayout.compact(arr.shape, slots)
        diag = lay.diagonal(0, 1)
        assert not diag.clean
        np.testing.assert_array_equal(diag.unpack(lay.pack(arr)), np.diag(arr))


def test_single_tile_by_default_with_padding_strides():
    lay = SlotLayout((2, 3), (4, 1), 16)  # rows padded to 4 slots
    vec = lay.pack(np.arange(1.0, 7.0).reshape(2, 3))[0]
    np.testing.assert_array_equal(vec[:8], [1, 2, 3, 0, 4, 5, 6, 0])
    assert lay.n_ciphertexts == 1 and lay.span() == 7


def test_replicas_are_packed():
    lay = SlotLayout((3,), (1,), 16, (Tile(0, (0,), (3,)),), replicas=((2, 4),))
    vec = lay.pack(np.array([1.0, 2.0, 3.0]))[0]
    np.testing.assert_array_equal(vec[:7], [1, 2, 3, 0, 1, 2, 3])


def test_insert_and_drop_size_one_axis():
    arr = np.arange(6.0).reshape(2, 3)
    lay = SlotLayout.compact(arr.shape, 8)
    wide = lay.insert_axis(1)
    assert wide.shape == (2, 1, 3)
    np.testing.assert_array_equal(wide.unpack(lay.pack(arr)), arr[:, None, :])
    assert wide.drop_axis(1).shape == (2, 3) and wide.drop_axis(1).clean


def test_validation_errors_name_the_problem():
    with pytest.raises(ShapeError, match="power of two"):
        SlotLayout.compact((2,), 12)
    with pytest.raises(ShapeError, match="outside"):
        SlotLayout((4,), (6,), 16, (Tile(0, (0,), (4,)),))
    with pytest.raises(ShapeError, match="leaves the shape"):
        SlotLayout((4,), (1,), 16, (Tile(0, (2,), (4,)),))
    with pytest.raises(ShapeError, match="does not match"):
        SlotLayout.compact((2, 2), 8).pack(np.zeros(3))
    with pytest.raises(ShapeError, match="size >= 1"):
        SlotLayout.compact((0, 2), 8)


def test_layout_is_frozen():
    lay = SlotLayout.compact((2,), 4)
    with pytest.raises(AttributeError):
        lay.shape = (3,)
