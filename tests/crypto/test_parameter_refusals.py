"""CKKS parameters, keys and records an attacker crafts are refused (issue 11, items 6, 7, 9: the audit's attacks)."""
import warnings

import numpy as np
import pytest

from crypto import CKKSContext, CKKSParameters, Ciphertext
from crypto.errors import HEError, ParameterError
from crypto.params import HE_STANDARD_128, PRESETS
from crypto.rlwe import Encryptor
from crypto.sampling import Sampler


@pytest.fixture(scope="module")
def toy():
    return CKKSContext.keygen("TOY", seed=11)


# ------------------------------------------------------------------ item 6: sparse secrets
def test_sparse_secret_at_n16_is_not_labelled_128_bit():
    """The audit: hamming_weight=192 at N=2^16 was accepted and printed as 128-bit."""
    with pytest.raises(ParameterError, match="hamming_weight=192"):
        CKKSParameters.from_literal(dict(PRESETS["N16"], hamming_weight=192))
    with pytest.raises(HEError):
        CKKSParameters.from_literal(dict(PRESETS["N16"], hamming_weight=192, insecure=True))


def test_a_sparse_secret_is_only_an_insecure_test_ring():
    p = CKKSParameters.from_literal(dict(PRESETS["TOY"], hamming_weight=64))
    assert "128-bit" not in repr(p) and "128-bit" not in str(p) and "INSECURE" in repr(p)


# ------------------------------------------------------------------ item 7: cited security table
def test_table_rows_no_higher_than_openfhe():
    assert HE_STANDARD_128[16] <= 1747 and HE_STANDARD_128[17] <= 3523
    assert [HE_STANDARD_128[k] for k in range(10, 16)] == [27, 54, 109, 218, 438, 881]


@pytest.mark.parametrize("name", [n for n in sorted(PRESETS) if not PRESETS[n].get("insecure")])
def test_every_secure_preset_within_the_table(name):
    p = CKKSParameters.preset(name)
    assert p.log_qp <= HE_STANDARD_128[p.log_n] and "128-bit" in repr(p)


def test_n16_below_1747():
    p = CKKSParameters.preset("N16")
    assert p.log_qp <= 1747 and p.max_level == 29


# ------------------------------------------------------------------ item 9: values that cannot decrypt
def test_encrypt_2e6_at_toy_is_refused_naming_the_bound(toy):
    """The audit: 2e6 encrypted at TOY and taken to level 0 decrypted wrong by 1.8e6 without a word."""
    with pytest.raises(HEError) as info:
        toy.encrypt([2e6])
    assert isinstance(info.value, ValueError)
    assert "2e+06" in str(info.value) and f"{toy.params.value_bound():.6g}" in str(info.value)
    assert "q_0 / (2 scale)" in str(info.value)


def test_decrypting_a_wrapped_value_warns(toy):
    pt = toy.encode([2e6])                          # the old, unchecked encryption of the audit
    parts = Encryptor(toy.params, toy.ring, Sampler(1), toy.public_key, None).encrypt(pt)
    ct = Ciphertext(parts, pt.level, pt.scale, pt.length, pt.is_complex, toy.params.fingerprint, toy.key_id,
                    toy.evaluator)
    with pytest.warns(UserWarning, match="wrapped"):
        toy.decrypt(toy.evaluator.to_level(ct, 0))


@pytest.mark.parametrize("bad", [[1e300], [np.nan], [np.inf], [-np.inf]])
def test_huge_and_non_finite_inputs_give_the_library_error_and_no_numpy_warning(toy, bad):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(HEError):
            toy.encrypt(bad)


def test_client_and_context_refuse_at_the_same_limit(toy):
    from tensor_ops.inference import Client
    client = Client("TOY", input_shape=(4,), seed=2)
    limit = client.params.value_bound()
    below = float(np.nextafter(limit, 0))
    client.encrypt(np.array([below, 0, 0, -below]))
    toy.encrypt([below, -below])
    for encrypt in (client.encrypt, toy.encrypt):
        with pytest.raises(ParameterError, match=f"limit {limit:.6g}"):
            encrypt(np.array([0.0, limit, 0.0, 0.0]))
