"""Bytes of every object: round trips, and every kind of damage or foreign origin is a typed error."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from crypto import CKKSContext, Ciphertext, KeyMissingError, Plaintext
from crypto.errors import ContextMismatchError, SerializationError
from crypto.serialize import MAGIC, pack, parameters_from_bytes, parameters_to_bytes, unpack
from tests.crypto.ckks_helpers import bits

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
    with pytest.raises(SerializationError, match="this is a crypto.Ciphertext record .*, expected a crypto.PublicKey record"):
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


# -- the scheme's objects -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def public_blob(ctx):
    return ctx.public_context().to_bytes()


@given(length=st.integers(1, 2048), seed=st.integers(0, 2**32 - 1), complex_values=st.booleans(),
       level=st.integers(0, 4))
def test_ciphertext_round_trip(ctx, length, seed, complex_values, level):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, length) + (1j * rng.uniform(-1, 1, length) if complex_values else 0)
    ct = ctx.encrypt(x, level=level)
    back = Ciphertext.from_bytes(ct.to_bytes(), ctx)
    assert (back.level, back.scale, back.length, back.is_complex) == (level, ct.scale, length, complex_values)
    assert all(np.array_equal(a.data, b.data) for a, b in zip(ct.parts, back.parts))
    assert back.evaluator is ctx.evaluator
    assert np.array_equal(ctx.decrypt(back), ctx.decrypt(ct))


@given(seed=st.integers(0, 2**32 - 1), level=st.integers(0, 4))
def test_plaintext_round_trip(ctx, seed, level):
    x = np.random.default_rng(seed).uniform(-1, 1, 17)
    pt = ctx.encode(x, level=level)
    back = Plaintext.from_bytes(pt.to_bytes(), ctx)
    assert back.level == level and np.array_equal(back.poly.data, pt.poly.data)
    assert np.array_equal(ctx.decode(back), ctx.decode(pt))


def test_parameters_round_trip(ctx):
    params = parameters_from_bytes(parameters_to_bytes(ctx.params))
    assert params == ctx.params and params.fingerprint == ctx.params.fingerprint


def test_public_context_has_no_secret_and_can_evaluate(ctx, public_blob):
    server = CKKSContext.from_bytes(public_blob)
    assert not server.has_secret_key and server.key_id == ctx.key_id
    assert server.rotation_steps == ctx.rotation_steps and server.has_conjugation_key
    coeffs = ctx._secret_key.poly.data[0].astype("<u4").tobytes()
    assert coeffs[:64] not in public_blob
    x = np.linspace(-1, 1, 50)
    ct = Ciphertext.from_bytes(ctx.encrypt(x).to_bytes(), server)
    result = server.evaluator.rotate(ct * ct, 1)
    back = Ciphertext.from_bytes(result.to_bytes(), ctx)
    assert bits(np.roll(x * x, -1)[:49], ctx.decrypt(back)[:49]) > 25
    with pytest.raises(KeyMissingError, match="public context"):
        server.decrypt(ct)
    # a public context encrypts with the public key, and the owner decrypts
    assert bits(x, ctx.decrypt(Ciphertext.from_bytes(server.encrypt(x).to_bytes(), ctx))) > 25


def test_secret_key_only_on_explicit_request(ctx, public_blob):
    x = np.linspace(0, 1, 8)
    ct = ctx.encrypt(x)
    full = CKKSContext.from_bytes(ctx.to_bytes(include_secret_key=True))
    assert full.has_secret_key and bits(x, full.decrypt(ct)) > 30
    joined = CKKSContext.from_bytes(public_blob, secret_key=ctx.secret_key_bytes())
    assert bits(x, joined.decrypt(ct)) > 30
    other = CKKSContext.keygen("TOY", seed=1234)
    with pytest.raises(ContextMismatchError, match="key set"):
        CKKSContext.from_bytes(public_blob, secret_key=other.secret_key_bytes())
    with pytest.raises(SerializationError, match="public context"):
        ctx.public_context().secret_key_bytes()
    with pytest.raises(SerializationError, match="public context"):
        ctx.public_context().to_bytes(include_secret_key=True)


def test_objects_from_another_context_are_detected(ctx):
    other_keys = CKKSContext.keygen("TOY", seed=4321)
    with pytest.raises(ContextMismatchError, match="key set"):
        Ciphertext.from_bytes(other_keys.encrypt([1.0]).to_bytes(), ctx)
    small = CKKSContext.keygen({"log_n": 5, "log_q": [[30, 30], [25, 25]], "log_p": [30, 30],
                                "log_scale": 50, "insecure": True}, seed=1)
    with pytest.raises(ContextMismatchError, match="fingerprint"):
        Ciphertext.from_bytes(small.encrypt([1.0]).to_bytes(), ctx)
    with pytest.raises(ContextMismatchError, match="fingerprint"):
        Plaintext.from_bytes(small.encode([1.0]).to_bytes(), ctx)


@given(cut=st.integers(1, 10**6))
@settings(max_examples=10)
def test_truncated_objects(ctx, public_blob, cut):
    ct_blob = ctx.encrypt([0.5]).to_bytes()
    with pytest.raises(SerializationError):
        Ciphertext.from_bytes(ct_blob[: len(ct_blob) - 1 - cut % (len(ct_blob) - 1)], ctx)
    with pytest.raises(SerializationError):
        CKKSContext.from_bytes(public_blob[: cut % len(public_blob)])


def test_corrupted_and_foreign_bytes(ctx, public_blob):
    ct_blob = bytearray(ctx.encrypt([0.5]).to_bytes())
    ct_blob[len(ct_blob) // 2] ^= 1
    with pytest.raises(SerializationError, match="checksum"):
        Ciphertext.from_bytes(bytes(ct_blob), ctx)
    with pytest.raises(SerializationError, match="expected a crypto.Ciphertext record"):
        Ciphertext.from_bytes(ctx.encode([1.0]).to_bytes(), ctx)
    with pytest.raises(SerializationError, match="expected a crypto.PublicContext or crypto.FullContext record"):
        CKKSContext.from_bytes(ctx.encrypt([1.0]).to_bytes())
    with pytest.raises(SerializationError):
        CKKSContext.from_bytes(b"\x89PNG\r\n\x1a\n" + bytes(64))
    with pytest.raises(SerializationError):
        Ciphertext.from_bytes(b"", ctx)


def test_well_formed_records_with_bad_content(ctx):
    ct = ctx.encrypt([0.5])
    meta = {"level": 4, "scale": ct.scale, "length": 1, "is_complex": False, "key_id": ct.key_id.hex()}
    data = np.stack([p.data for p in ct.parts]).astype("<u4")
    fp = ctx.params.fingerprint

    def load(meta_changes=None, array=data):
        return Ciphertext.from_bytes(pack("ciphertext", fp, {**meta, **(meta_changes or {})}, [array]), ctx)

    assert bits([0.5], ctx.decrypt(load())) > 30
    with pytest.raises(SerializationError, match="level"):
        load({"level": 9})
    with pytest.raises(SerializationError, match="shape"):
        load({"level": 3})
    with pytest.raises(SerializationError, match="scale"):
        load({"scale": -1.0})
    with pytest.raises(SerializationError, match="length"):
        load({"length": 5000})
    with pytest.raises(SerializationError, match="is_complex"):
        load({"is_complex": "no"})
    unreduced = data.copy()
    unreduced[0, 0, 0] = 2**32 - 1
    with pytest.raises(SerializationError, match="reduced"):
        load(array=unreduced)


def test_separate_key_records(ctx):
    x = np.linspace(-1, 1, 32)
    server = CKKSContext.from_key_bytes(ctx.public_key_bytes(), ctx.relin_key_bytes(), ctx.galois_keys_bytes())
    assert not server.has_secret_key and server.key_id == ctx.key_id
    assert server.rotation_steps == ctx.rotation_steps
    ct = Ciphertext.from_bytes(server.encrypt(x).to_bytes(), server)
    result = Ciphertext.from_bytes(server.evaluator.rotate(ct * ct, 1).to_bytes(), ctx)
    assert bits(np.roll(x * x, -1)[:31], ctx.decrypt(result)[:31]) > 25
    no_rotations = CKKSContext.from_key_bytes(ctx.public_key_bytes(), ctx.relin_key_bytes())
    with pytest.raises(KeyMissingError, match="step 1"):
        no_rotations.evaluator.rotate(Ciphertext.from_bytes(ct.to_bytes(), no_rotations), 1)
    other = CKKSContext.keygen("TOY", seed=77)
    with pytest.raises(ContextMismatchError, match="key set"):
        CKKSContext.from_key_bytes(ctx.public_key_bytes(), other.relin_key_bytes())
    with pytest.raises(SerializationError, match="expected a crypto.RelinKey record"):
        CKKSContext.from_key_bytes(ctx.public_key_bytes(), ctx.galois_keys_bytes())
