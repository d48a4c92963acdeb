"""Key-switching behaviours the mutation run of crypto/keyswitch.py found untested (issue 19;
tests/mutation/survivors.md): the switching key's validation and immutability, the form of the inner
product's output, the missing-key error, and the uint64 tables handed to the numba kernels."""
import numpy as np
import pytest

from crypto import CKKSParameters
from crypto.errors import KeyMissingError, ParameterError
from crypto.keyswitch import CenteredConversion, GaloisKeys, KeySwitcher, SwitchingKey, galois_element
from crypto.modarith import find_ntt_primes
from crypto.ring import RingContext, RNSPoly
from crypto.sampling import Sampler


def _params():
    return CKKSParameters.from_literal({"log_n": 5, "log_q": [[30, 30], [25, 25]], "log_p": [30, 30],
                                        "log_scale": 50, "dnum": 2, "insecure": True})


def test_switching_key_shape_checks_each_refuse():
    """A part that is not 3-D, or whose second axis is not the moduli count, is refused on its own."""
    moduli = (3, 5, 7)
    good = np.zeros((2, 3, 8), dtype=np.uint32)
    SwitchingKey(good, good, moduli)
    for bad in (np.zeros((2, 3), dtype=np.uint32),       # 2-D, second axis = len(moduli)
                np.zeros((2, 4, 8), dtype=np.uint32)):    # 3-D, wrong moduli count
        with pytest.raises(ParameterError, match="switching key part b"):
            SwitchingKey(bad, good, moduli)
        with pytest.raises(ParameterError, match="switching key part a"):
            SwitchingKey(good, bad, moduli)


def test_switching_key_is_stored_as_frozen_uint32():
    """Parts are stored as read-only uint32 (half of uint64), whatever integer dtype they come in."""
    values = np.arange(2 * 3 * 8, dtype=np.uint64).reshape(2, 3, 8) * 1000
    key = SwitchingKey(values, values.copy(), (3, 5, 7))
    for part in (key.b, key.a):
        assert part.dtype == np.uint32 and part.tolist() == values.tolist()
        assert not part.flags.writeable
        with pytest.raises(ValueError):
            part[0, 0, 0] = 1


def test_missing_galois_key_is_a_key_missing_error():
    """An absent rotation names the steps that have keys; an absent conjugation key says how to get one."""
    key = SwitchingKey(np.zeros((1, 1, 8), np.uint32), np.zeros((1, 1, 8), np.uint32), (17,))
    keys = GaloisKeys({galois_element(1, 16): key}, (1, -3), False)
    assert keys.key_for_step(1, 16) is key
    with pytest.raises(KeyMissingError, match=r"rotation step 2; this context has keys for steps \[-3, 1\]"):
        keys.key_for_step(2, 16)
    with pytest.raises(KeyMissingError, match="conjugation"):
        keys.conjugation_key(16)


def test_inner_product_output_is_ntt_form_over_q_and_p():
    """inner_product returns both parts in NTT form over Q_ℓ ∪ P (what ModDown and the automorphism read)."""
    params = _params()
    ring = RingContext(params.n, params.moduli)
    switcher = KeySwitcher(params, ring)
    idx = tuple(range(params.limbs_at(params.max_level)))
    c = RNSPoly(ring, Sampler(1).uniform([ring.moduli[i] for i in idx], params.n), idx, True)
    shape = (len(params.digits), len(params.moduli), params.n)
    rng = np.random.default_rng(2)
    key = SwitchingKey(rng.integers(0, 2**20, shape), rng.integers(0, 2**20, shape), tuple(params.moduli))
    for lift in (None, (c, c)):
        b, a = switcher.inner_product(switcher.decompose(c), key, lift=lift)
        assert b.is_ntt is True and a.is_ntt is True
        assert b.idx == a.idx == switcher.plan(params.max_level).ext_idx


def test_kernel_tables_are_uint64():
    """The numba kernels are compiled for uint64 tables (an int64 table compiles them again): the centred
    conversion's and the level plan's constants are uint64."""
    primes = find_ntt_primes(30, 4, 32)
    conv = CenteredConversion(primes[:2], primes[2:])
    for name in ("q_from", "q_to", "qhat_inv", "qhat_inv_shoup", "qhat_mod_p", "qhat_mod_p_shoup", "big_q_mod_p",
                 "big_q_mod_p_shoup"):
        assert getattr(conv, name).dtype == np.uint64, name
    assert conv.q_from_inv.dtype == np.float64
    params = _params()
    switcher = KeySwitcher(params, RingContext(params.n, params.moduli))
    plan = switcher.plan(params.max_level)
    assert plan.p_mod_q.dtype == np.uint64 and plan.ext_q.dtype == np.uint64
    assert switcher._no_lift.dtype == np.uint64 and switcher._no_lift.shape == (0, params.n)
