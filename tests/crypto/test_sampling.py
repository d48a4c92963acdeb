"""Samplers: distributions, CSPRNG by default, reproducible only with a seed."""
import numpy as np
import pytest

from crypto.errors import ParameterError
from crypto.sampling import Sampler


def test_seeded_is_reproducible_and_unseeded_is_not():
    assert np.array_equal(Sampler(7).ternary(64), Sampler(7).ternary(64))
    assert not np.array_equal(Sampler().uniform([12289], 256), Sampler().uniform([12289], 256))
    assert not Sampler().seeded and Sampler(1).seeded


def test_distributions():
    s = Sampler(3)
    t = s.ternary(30000)
    assert set(np.unique(t)) <= {-1, 0, 1}
    assert abs(np.mean(t == 0) - 1 / 3) < 0.02
    sparse = s.ternary(1024, hamming_weight=64)
    assert np.count_nonzero(sparse) == 64
    g = s.gaussian(50000, sigma=3.2)
    assert abs(g.std() - 3.2) < 0.1 and abs(g.mean()) < 0.1 and np.abs(g).max() <= 20
    u = s.uniform([12289, 40961], 20000)
    assert u.shape == (2, 20000) and u[0].max() < 12289 and u[1].max() < 40961
    assert abs(u[0].mean() / 12288 - 0.5) < 0.02
    with pytest.raises(ParameterError, match="hamming_weight"):
        s.ternary(16, hamming_weight=17)
