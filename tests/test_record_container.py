"""hezk.record, the one container of every record: round trips, kind checks naming both kinds, and damaged
bytes (truncations, bit flips, crafted specs) raising only RecordError."""
import hashlib
import json
import struct

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import hezk.record as R


def _record(kind="proofs.TrainingProof"):
    return R.pack(kind, {"a": 1, "name": "x"}, [np.arange(6, dtype="<i8").reshape(2, 3), b"\x01\x02\x03"],
                  fingerprint=b"fp")


def _forge(meta_doc: bytes, arrays: bytes = b"", code=37) -> bytes:
    """A record with a crafted meta document and a valid checksum (what an attacker can make)."""
    payload = struct.pack("<I", len(meta_doc)) + meta_doc + arrays
    body = struct.pack("<4sHBB", b"HEZK", 1, code, 0) + struct.pack("<Q", len(payload)) + payload
    return body + hashlib.sha256(body).digest()[:16]


def test_round_trip_every_kind():
    for kind in R.KINDS:
        record = R.unpack(_record(kind), kind)
        assert record.kind == kind and record.fingerprint == b"fp" and record.meta == {"a": 1, "name": "x"}
        assert np.array_equal(record.arrays[0], np.arange(6).reshape(2, 3))
        assert R.array_bytes(record, 1, "blob") == b"\x01\x02\x03"
        assert R.peek_kind(_record(kind)) == kind


def test_kind_codes_are_unique_and_crypto_codes_unchanged():
    assert len(set(R.KINDS.values())) == len(R.KINDS)
    assert R.KINDS["crypto.SecretKey"] == 8 and R.KINDS["crypto.FullContext"] == 9
    assert R.SECRET_KINDS <= set(R.KINDS)


@pytest.mark.parametrize("found, expected", [("proofs.TrainingProof", "crypto.PublicContext"),
                                             ("tensor_ops.Client", "crypto.PublicContext"),
                                             ("crypto.Ciphertext", "proofs.ModelCommitment")])
def test_a_record_of_another_kind_is_named(found, expected):
    with pytest.raises(R.KindError, match=f"this is a {found} record .*expected a {expected} record") as info:
        R.unpack(_record(found), expected)
    assert info.value.found == found and info.value.expected == (expected,)


def test_truncations_and_bit_flips_raise_record_error():
    blob = _record()
    for cut in range(len(blob)):
        with pytest.raises(R.RecordError):
            R.unpack(blob[:cut], "proofs.TrainingProof")
    for position in range(len(blob)):
        for bit in (0, 7):
            damaged = bytearray(blob)
            damaged[position] ^= 1 << bit
            with pytest.raises(R.RecordError):
                R.unpack(bytes(damaged), "proofs.TrainingProof")


@pytest.mark.parametrize("doc", [b"[]", b'{"meta": 3, "arrays": []}', b'{"meta": {}, "arrays": 3}',
                                 b'{"meta": {}, "arrays": [["u1", [-1]]]}', b'{"meta": {}, "arrays": [["u1", [true]]]}',
                                 b'{"meta": {}, "arrays": [["u1", [4294967296, 4294967296, 4294967296]]]}',
                                 b'{"meta": {}, "arrays": [["f2", [1]]]}', b'{"meta": {}, "arrays": [["u1", 1]]}',
                                 b"\xff\xfe", b"[" * 100000, b'{"meta": {}, "arrays": []}xx'])
def test_crafted_meta_raises_record_error(doc):
    with pytest.raises(R.RecordError):
        R.unpack(_forge(doc), "proofs.TrainingProof")


def test_trailing_array_bytes_and_unknown_codes_are_refused():
    doc = json.dumps({"meta": {}, "arrays": [["u1", [2]]]}).encode()
    assert R.array_bytes(R.unpack(_forge(doc, b"ab"), "proofs.TrainingProof"), 0, "x") == b"ab"
    with pytest.raises(R.RecordError, match="unexpected bytes"):
        R.unpack(_forge(doc, b"abc"), "proofs.TrainingProof")
    with pytest.raises(R.RecordError, match="unknown record kind code 200"):
        R.unpack(_forge(doc, b"ab", code=200), "proofs.TrainingProof")
    with pytest.raises(R.RecordError, match="not a record kind"):
        R.pack("proofs.Nothing", {})


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_raise_record_error(data):
    with pytest.raises(R.RecordError):
        R.unpack(b"HEZK" + data, "proofs.TrainingProof")


def test_describe_names_what_a_file_is():
    assert "SECRET client" in R.describe(_record("tensor_ops.Client"))
    assert R.describe(b"PK\x03\x04") == "not a hezk record"
    assert R.describe(b"HEZK\x09\x00") == "a damaged or foreign hezk record"


def test_packaged_typed_and_versioned():
    import pathlib
    import tomllib
    from importlib.resources import files

    root = pathlib.Path(__file__).resolve().parent.parent
    project = tomllib.loads((root / "pyproject.toml").read_text())
    assert "hezk*" in project["tool"]["setuptools"]["packages"]["find"]["include"]
    assert files("hezk.record").joinpath("py.typed").is_file()
    assert R.__version__ == project["project"]["version"]


def test_zero_dimensional_arrays_keep_their_shape():
    """np.ascontiguousarray would make a 0-d array 1-d; the container keeps scalars' shape ()."""
    record = R.unpack(R.pack("proofs.ProverState", {}, [np.array(5), np.zeros((0, 3))]), "proofs.ProverState")
    assert record.arrays[0].shape == () and int(record.arrays[0]) == 5 and record.arrays[1].shape == (0, 3)
