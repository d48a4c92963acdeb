"""The record format: round trips, and every kind of damage is a typed error."""
import numpy as np
import pytest
from hypothesis import given, strategies as st

from crypto.errors import ContextMismatchError, SerializationError
from crypto.serialize import MAGIC, pack, unpack

FP = bytes(range(32))


@given(shape=st.lists(st.integers(0, 5), min_size=1, max_size=3), seed=st.integers(0, 2**32 - 1),
       meta=st.dictionaries(st.text(max_size=5), st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
                            max_size=4))
def test_record_round_trip(shape, seed, meta):
    a = np.random.default_rng(seed).integers(0, 2**31, size=shape).astype(np.uint32)
    b = np.arange(3, dtype=np.float64)
    fp, meta2, (a2, b2) = unpack(pack("ciphertext", FP, meta, [a, b]), "ciphertext", FP)
    assert fp == FP and meta2 == meta
    assert np.array_equal(a2, a) and a2.shape == a.shape and np.array_equal(b2, b)


def _record():
    return pack("ciphertext", FP, {"level": 3}, [np.arange(10, dtype=np.uint32)])


@given(cut=st.integers(0, 200))
def test_truncation_is_detected(cut):
    blob = _record()
    cut = min(cut, len(blob) - 1)
    with pytest.raises(SerializationError):
        unpack(blob[:cut], "ciphertext")


@given(position=st.integers(0, 10_000), flip=st.integers(1, 255))
def test_any_flipped_byte_is_detected(position, flip):
    blob = bytearray(_record())
    blob[position % len(blob)] ^= flip
    with pytest.raises((SerializationError, ContextMismatchError)):
        unpack(bytes(blob), "ciphertext", FP)


def test_wrong_kind_foreign_bytes_and_version():
    with pytest.raises(SerializationError, match="holds a ciphertext, expected a public_key"):
        unpack(_record(), "public_key")
    with pytest.raises(SerializationError, match="magic"):
        unpack(b"PK\x03\x04" + bytes(100), "ciphertext")
    future = bytearray(_record())
    future[4] = 9
    with pytest.raises(SerializationError, match="version=9"):
        unpack(bytes(future), "ciphertext")
    with pytest.raises(SerializationError, match="expected bytes"):
        unpack("HEZK", "ciphertext")
    with pytest.raises(SerializationError, match="padded"):
        unpack(_record() + b"\x00", "ciphertext")
    assert _record().startswith(MAGIC)


def test_foreign_fingerprint_is_a_context_mismatch():
    with pytest.raises(ContextMismatchError, match="fingerprint"):
        unpack(_record(), "ciphertext", bytes(32))
