"""A reshape that merges axes a transpose left apart (attention's heads after ``transpose(1, 2)``, then
``reshape(b, s, d)``, as hand-written attention does) runs on the encrypted path as one 0/1 plaintext
contraction (``tensor_ops.attention.reshape_or_contract``) where a layout change cannot express it; before,
``hezk plan`` refused the hand-written block ('is not a layout change')."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crypto.errors import ShapeError
from tensor_ops.attention import reshape, reshape_or_contract
from tensor_ops.backends import PlainBackend
from tensor_ops.tensor import encrypt


@settings(max_examples=20, deadline=None)
@given(heads=st.integers(1, 3), sequence=st.integers(1, 4), width=st.integers(1, 4), seed=st.integers(0, 99))
def test_merging_transposed_heads_equals_numpy(heads, sequence, width, seed):
    x = np.random.default_rng(seed).normal(size=(2, heads, sequence, width))
    t = encrypt(PlainBackend(256), x).transpose((0, 2, 1, 3))
    got = reshape_or_contract(t, (2, sequence, heads * width)).decrypt()
    assert np.allclose(got, x.transpose(0, 2, 1, 3).reshape(2, sequence, heads * width), atol=1e-9)


def test_the_plain_reshape_still_refuses_and_a_layout_change_stays_free():
    """``reshape`` itself still refuses what is no layout change; where it is one, ``reshape_or_contract``
    returns the same ciphertexts (no contraction); a size mismatch stays a ShapeError."""
    x = np.arange(24.0).reshape(2, 3, 4)
    t = encrypt(PlainBackend(64), x)
    with pytest.raises(ShapeError, match="not a layout change"):
        reshape(t.transpose((0, 2, 1)), (2, 12))
    free = reshape_or_contract(t, (2, 12))
    assert free.ciphertexts is t.ciphertexts and np.array_equal(free.decrypt(), x.reshape(2, 12))
    with pytest.raises(ShapeError, match="cannot reshape"):
        reshape_or_contract(t.transpose((0, 2, 1)), (2, 13))
