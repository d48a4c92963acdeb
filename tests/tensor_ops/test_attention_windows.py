"""Windowed contractions (Conv, AveragePool) on the attention path (a ViT's patch embedding): on CipherTensors
(PlainBackend: the plans without encryption) they equal the float model's Contraction.forward, for non-overlapping
windows (a reshape and a transpose) and for strided, padded, dilated, grouped ones (one 0/1 selection)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from crypto.errors import ParameterError
from hezk.model import Contraction, Patches
from tensor_ops.attention import MAX_WINDOW_SELECTION, windowed_contraction
from tensor_ops.backends import PlainBackend
from tensor_ops.tensor import encrypt


def _conv(patches, channels, out_channels, height, width, seed=0):
    rng = np.random.default_rng(seed)
    g = patches.groups
    weight = rng.normal(size=(g, out_channels // g, channels // g, *patches.kernel))
    oh, ow = patches.output_hw(height, width)
    return Contraction("conv", "Conv", ("x",), "y", "bgcuvij,gocuv->bgoij", weight,
                       rng.normal(size=(out_channels, 1, 1)), patches, (out_channels, oh, ow))


@settings(max_examples=15, deadline=None)
@given(st.sampled_from([(2, 2), (3, 3), (2, 3)]), st.integers(1, 2), st.sampled_from([1, 2]),
       st.booleans(), st.integers(0, 3))
def test_a_windowed_contraction_on_cipher_tensors_equals_the_float_model(kernel, stride, groups, pad, seed):
    channels, out_channels, height, width = 2 * groups, 2 * groups, 6, 6
    patches = Patches(kernel, (stride, stride), (1, 0, 1, 0) if pad else (0, 0, 0, 0), (1, 1), groups)
    node = _conv(patches, channels, out_channels, height, width, seed)
    x = np.random.default_rng(seed + 1).normal(size=(2, channels, height, width))
    got = windowed_contraction(node, encrypt(PlainBackend(1 << 12), x)).decrypt()
    assert np.allclose(got, node.forward(x), atol=1e-9)


def test_non_overlapping_patches_and_average_pools():
    """A ViT's patch embedding (stride = kernel) and an AveragePool read their windows as the float model does."""
    node = _conv(Patches((4, 4), (4, 4)), 3, 5, 8, 8)
    x = np.random.default_rng(2).normal(size=(1, 3, 8, 8))
    assert np.allclose(windowed_contraction(node, encrypt(PlainBackend(1 << 12), x)).decrypt(), node.forward(x))
    pool = Contraction("pool", "AveragePool", ("x",), "y", "bgcuvij,uv->bgcij", np.full((2, 2), .25), None,
                       Patches((2, 2), (1, 1)), (3, 7, 7))
    assert np.allclose(windowed_contraction(pool, encrypt(PlainBackend(1 << 12), x)).decrypt(), pool.forward(x))


def test_a_selection_above_the_limit_is_refused_naming_it():
    node = _conv(Patches((3, 3), (1, 1), (1, 1, 1, 1)), 1, 1, 64, 64)
    with pytest.raises(ParameterError, match="MAX_WINDOW_SELECTION"):
        windowed_contraction(node, np.zeros((1, 1, 64, 64)))
    assert 64 * 64 * 9 * 64 * 64 > MAX_WINDOW_SELECTION
