"""The packed inference layout is the einsum planner's SlotLayout with a batch axis (issue 12): pack and
unpack against their naive twin (one block of slots per sample), and a stage on it is 'bi,oi->bo'."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from crypto.errors import ShapeError
from tensor_ops.model_plan import ActivationStage, batch_layout, pack_samples, unpack_samples
from tensor_ops.nn import Linear, Sequential, Square
from tensor_ops.packing import PackedAffine, packed_stages


def naive_pack(flat, block, slots):
    """Sample b in slots [(b mod per) * block, ... + n) of ciphertext b // per, zeros elsewhere."""
    per = slots // block
    vectors = [np.zeros(slots) for _ in range(-(-len(flat) // per))]
    for b, sample in enumerate(flat):
        vectors[b // per][(b % per) * block:(b % per) * block + len(sample)] = sample
    return vectors


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 40), st.integers(1, 16), st.sampled_from([16, 32, 64]), st.sampled_from([64, 128]),
       st.integers(0, 2**31))
def test_pack_and_unpack_are_the_batch_axis_layout(count, width, block, slots, seed):
    if block > slots:
        block = slots
    x = np.random.default_rng(seed).normal(size=(count, width))
    vectors = pack_samples(x, (width,), block, slots)
    want = naive_pack(x, block, slots)
    assert len(vectors) == len(want) == batch_layout(count, width, block, slots).n_ciphertexts
    for got, expect in zip(vectors, want):
        np.testing.assert_array_equal(got, expect)
    np.testing.assert_array_equal(unpack_samples(vectors, count, (width,), block, slots), x)
    layout = batch_layout(count, width, block, slots)
    assert layout.strides == (block, 1) and layout.shape == (count, width)


def test_a_sample_wider_than_its_block_and_too_few_vectors_are_refused():
    with pytest.raises(ShapeError, match="does not fit block=8"):
        pack_samples(np.zeros((2, 9)), (9,), 8, 64)
    with pytest.raises(ShapeError, match="need 2 ciphertexts"):
        unpack_samples([np.zeros(64)], 9, (4,), 8, 64)


def test_a_packed_stage_is_the_einsum_along_the_batch_axis():
    """On the batch layout one affine stage's naive twin equals einsum('bi,oi->bo') + bias for every sample
    of the ciphertext (block-diagonal I (x) M: no separate packing of the batch)."""
    rng = np.random.default_rng(0)
    w, bias = rng.normal(size=(3, 5)), rng.normal(size=3)
    model = Sequential([Linear(w, bias), Square()], input_shape=(5,))
    (stage, _, final), block = packed_stages(model, (5,), {}, ActivationStage)
    assert isinstance(stage, PackedAffine)
    x = rng.normal(size=(64 // block, 5))
    layout = batch_layout(len(x), 5, block, 64)
    (v,) = layout.pack(x)
    out = batch_layout(len(x), 3, block, 64).unpack([stage.apply_slots(v, block)])
    np.testing.assert_allclose(out, np.einsum("bi,oi->bo", x, w) + bias, atol=1e-12)
