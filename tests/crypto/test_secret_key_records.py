"""A secret key record is accepted only for the key set it is the secret of: b + a·s, the public key's error,
must be small (|coefficients| <= KEY_NOISE_BOUND modulo every prime; a genuine one is at most 6·sigma = 20).
The key id in the record is only a label: relabelled with another key set's id, a secret of another key set
used to be accepted and decrypted garbage."""
from __future__ import annotations

import numpy as np
import pytest

from crypto import CKKSContext, CKKSParameters, SerializationError
from crypto.key_records import KEY_NOISE_BOUND
from crypto.record import pack, unpack

PARAMS = CKKSParameters.preset("TOY")


@pytest.fixture(scope="module")
def contexts():
    return CKKSContext.keygen(PARAMS, seed=1), CKKSContext.keygen(PARAMS, seed=2)


def relabelled(secret_record: bytes, key_id: bytes) -> bytes:
    """The same secret coefficients under another key set's id (a re-packed, well-formed record)."""
    fingerprint, meta, arrays = unpack(secret_record, "secret_key")
    return pack("secret_key", fingerprint, dict(meta, key_id=key_id.hex()), arrays)


def test_a_secret_key_relabelled_with_another_key_id_is_refused(contexts):
    mine, other = contexts
    forged = relabelled(other.secret_key_bytes(), mine.key_id)
    with pytest.raises(SerializationError, match="does not belong to this key set"):
        CKKSContext.from_bytes(mine.to_bytes(), secret_key=forged)


def test_a_full_context_holding_another_key_sets_secret_is_refused(contexts):
    mine, other = contexts
    fingerprint, meta, arrays = unpack(mine.to_bytes(include_secret_key=True), "full_context")
    _, _, (foreign,) = unpack(other.secret_key_bytes(), "secret_key")
    forged = pack("full_context", fingerprint, meta, arrays[:-1] + [foreign])
    with pytest.raises(SerializationError, match="does not belong"):
        CKKSContext.from_bytes(forged)


def test_the_genuine_secret_key_is_accepted_and_decrypts(contexts):
    """Positive control: its own record (separate, relabelled with its own id, or inside a full context)."""
    mine, _ = contexts
    x = np.linspace(-1, 1, 8)
    ct = mine.encrypt(x)
    for restored in (CKKSContext.from_bytes(mine.public_context().to_bytes(), secret_key=mine.secret_key_bytes()),
                     CKKSContext.from_bytes(mine.to_bytes(), secret_key=relabelled(mine.secret_key_bytes(),
                                                                                    mine.key_id)),
                     CKKSContext.from_bytes(mine.to_bytes(include_secret_key=True))):
        np.testing.assert_allclose(restored.decrypt(ct)[:8].real, x, atol=1e-6)


def test_the_bound_is_far_above_a_genuine_error_and_far_below_the_primes():
    """A wrong secret leaves each coefficient uniform mod q: it passes with probability (2B + 1) / q per
    coefficient, so ((2B + 1) / q)^n for the key: below 2^-1000 here."""
    q = min(PARAMS.q_moduli)
    assert 20 < KEY_NOISE_BOUND and PARAMS.n * np.log2(q / (2 * KEY_NOISE_BOUND + 1)) > 1000
