"""hezk.record on crafted bytes with a valid checksum (what an attacker can always produce): any meta, any
array specs, any payload bytes give a Record or a RecordError, never a TypeError (an array spec whose dtype
was a list or dict raised TypeError, an HTTP 500 from serve), and the engines' boundaries turn it into their
own error (tensor_ops: SerializationError, which serve answers with 400)."""
from __future__ import annotations

import hashlib
import json
import struct

import numpy as np
import pytest
from hypothesis import given, strategies as st

import hezk.record
from crypto.errors import SerializationError
from hezk.record import KINDS, MAGIC, VERSION, RecordError, pack, unpack
from tensor_ops.inference import unpack_message
from tensor_ops.serve import _status_of


def craft(kind: str, doc, data: bytes = b"", fingerprint: bytes = b"") -> bytes:
    """A record of ``kind`` whose payload is the JSON ``doc`` plus ``data``, framed and checksummed as
    ``pack`` does, without ``pack``'s checks."""
    meta = json.dumps(doc, separators=(",", ":")).encode()
    payload = struct.pack("<I", len(meta)) + meta + data
    body = (struct.pack("<4sHBB", MAGIC, VERSION, KINDS[kind], len(fingerprint)) + fingerprint
            + struct.pack("<Q", len(payload)) + payload)
    return body + hashlib.sha256(body).digest()[:16]


@pytest.mark.parametrize("dtype", [["u1"], {"u1": 1}, 1, None, True, 1.5])
def test_an_array_spec_whose_dtype_is_not_a_string_is_a_record_error(dtype):
    blob = craft("tensor_ops.Request", {"meta": {"kind": "request", "ciphertexts": 1}, "arrays": [[dtype, [4]]]},
                 bytes(4))
    with pytest.raises(RecordError, match="array spec"):
        unpack(blob, "tensor_ops.Request")
    with pytest.raises(SerializationError, match="array spec") as caught:  # serve's request path
        unpack_message(blob, "request")
    assert _status_of(caught.value) == 400


def test_the_same_record_with_a_string_dtype_reads():
    """Positive control: the crafting helper frames records exactly as pack does."""
    doc = {"meta": {"kind": "request", "ciphertexts": 1}, "arrays": [["u1", [4]]]}
    blob = craft("tensor_ops.Request", doc, b"abcd")
    assert blob == pack("tensor_ops.Request", doc["meta"], [b"abcd"])
    header, blobs = unpack_message(blob, "request")
    assert header["ciphertexts"] == 1 and blobs == [b"abcd"]


JSON = st.recursive(st.none() | st.booleans() | st.integers(-2 ** 70, 2 ** 70) | st.floats() | st.text(max_size=4),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
                    max_leaves=8)
SPEC = st.one_of(JSON, st.tuples(st.sampled_from(sorted(hezk.record._DTYPES)) | JSON,
                                 st.lists(st.integers(-2, 2 ** 66) | JSON, max_size=3)).map(list))


@given(st.lists(SPEC, max_size=3) | JSON, st.binary(max_size=64), JSON)
def test_any_specs_and_payload_give_a_record_or_a_record_error(specs, data, meta):
    blob = craft("crypto.Ciphertext", {"meta": meta, "arrays": specs}, data)
    try:
        record = unpack(blob, "crypto.Ciphertext")
    except RecordError:
        return
    assert isinstance(record.meta, dict) and all(isinstance(a, np.ndarray) for a in record.arrays)
    assert sum(a.nbytes for a in record.arrays) == len(data)


VALID = pack("crypto.Ciphertext", {"level": 2, "scale": 2.0 ** 40}, [np.arange(6, dtype="<u8").reshape(2, 3)])


@given(st.lists(st.tuples(st.integers(0, len(VALID) - 17), st.integers(0, 255)), min_size=1, max_size=6))
def test_mutated_records_rechecksummed_give_a_record_or_a_record_error(edits):
    body = bytearray(VALID[:-16])
    for offset, value in edits:
        body[offset] = value
    blob = bytes(body) + hashlib.sha256(bytes(body)).digest()[:16]
    try:
        unpack(blob, "crypto.Ciphertext")
    except RecordError:
        pass
