"""The record container of ``crypto``'s byte forms (``crypto.serialize`` lists every object's).

Layout of one record (all integers little-endian)::

    b"HEZK" | version u16 | kind u8 | fingerprint length u8 | fingerprint | payload length u64 |
    payload | SHA-256(everything before)[:16]

The payload is ``meta length u32 | meta (UTF-8 JSON) | arrays``; the meta lists each array's dtype
and shape, so every length is checked before a byte is read.  The fingerprint is the parameter
set's, so bytes made under other parameters raise ContextMismatchError; truncated, corrupted, foreign
or future-version bytes raise SerializationError.  Residues are stored as uint32 (all primes < 2^31).
"""
from __future__ import annotations

import hashlib
import json
import struct

import numpy as np

from .errors import ContextMismatchError, SerializationError

MAGIC = b"HEZK"
VERSION = 1
_DIGEST = 16
_HEAD = struct.Struct("<4sHBB")
_LEN64 = struct.Struct("<Q")
_LEN32 = struct.Struct("<I")
_DTYPES = {"u4": np.dtype("<u4"), "u8": np.dtype("<u8"), "i8": np.dtype("<i8"), "f8": np.dtype("<f8"),
           "u1": np.dtype("u1")}

KINDS = {
    "parameters": 1, "plaintext": 2, "ciphertext": 3, "public_key": 4, "relin_key": 5,
    "galois_keys": 6, "public_context": 7, "secret_key": 8, "full_context": 9,
}
_KIND_NAMES = {v: k for k, v in KINDS.items()}


def _checksum(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()[:_DIGEST]


def pack(kind: str, fingerprint: bytes, meta: dict, arrays=()) -> bytes:
    """One record of ``kind``: JSON-serialisable ``meta`` plus numpy ``arrays`` (stored in order)."""
    arrays = [np.ascontiguousarray(a) for a in arrays]
    specs = []
    for a in arrays:
        code = next((c for c, dt in _DTYPES.items() if a.dtype == dt), None)
        if code is None:
            raise SerializationError(f"array dtype {a.dtype} cannot be stored; use one of {sorted(_DTYPES)}")
        specs.append([code, list(a.shape)])
    meta_bytes = json.dumps({"meta": meta, "arrays": specs}, separators=(",", ":")).encode()
    payload = b"".join([_LEN32.pack(len(meta_bytes)), meta_bytes]
                       + [a.astype(_DTYPES[s[0]], copy=False).tobytes() for a, s in zip(arrays, specs)])
    body = b"".join([_HEAD.pack(MAGIC, VERSION, KINDS[kind], len(fingerprint)), fingerprint,
                     _LEN64.pack(len(payload)), payload])
    return body + _checksum(body)


def unpack(blob, kind: str, fingerprint: bytes | None = None) -> tuple[bytes, dict, list[np.ndarray]]:
    """Parse a record made by :func:`pack`: returns (fingerprint, meta, arrays).

    Checks magic, version, kind, every length and the checksum (SerializationError), then, when
    ``fingerprint`` is given, that the record was made under those parameters (ContextMismatchError).
    """
    if not isinstance(blob, (bytes, bytearray, memoryview)):
        raise SerializationError(f"expected bytes, got {type(blob).__name__}")
    blob = bytes(blob)
    if len(blob) < _HEAD.size + _LEN64.size + _DIGEST:
        raise SerializationError(f"{len(blob)} bytes is too short for a hezk record "
                                 f"(at least {_HEAD.size + _LEN64.size + _DIGEST})")
    magic, version, kind_code, fp_len = _HEAD.unpack_from(blob, 0)
    if magic != MAGIC:
        raise SerializationError(f"magic={magic!r} is not a hezk record (expected {MAGIC!r})")
    if version != VERSION:
        raise SerializationError(f"version={version} is not supported (this library reads version {VERSION})")
    expected_length = _HEAD.size + fp_len + _LEN64.size
    if len(blob) < expected_length + _DIGEST:
        raise SerializationError(f"record truncated: {len(blob)} bytes, header alone needs {expected_length}")
    (payload_length,) = _LEN64.unpack_from(blob, _HEAD.size + fp_len)
    expected_length += payload_length
    if len(blob) != expected_length + _DIGEST:
        raise SerializationError(f"record length {len(blob)} bytes does not match its header "
                                 f"({expected_length + _DIGEST} bytes): truncated or padded")
    if _checksum(blob[:expected_length]) != blob[expected_length:]:
        raise SerializationError("checksum mismatch: the bytes are corrupted")
    if kind_code not in _KIND_NAMES or _KIND_NAMES[kind_code] != kind:
        found = _KIND_NAMES.get(kind_code, f"unknown kind {kind_code}")
        raise SerializationError(f"record holds a {found}, expected a {kind}")
    record_fp = blob[_HEAD.size: _HEAD.size + fp_len]
    if fingerprint is not None and record_fp != fingerprint:
        raise ContextMismatchError(f"{kind} was made under parameters with fingerprint {record_fp.hex()[:16]}…, "
                                   f"this context has {fingerprint.hex()[:16]}…")
    payload = blob[_HEAD.size + fp_len + _LEN64.size: expected_length]
    meta, arrays = _parse_payload(payload)
    return record_fp, meta, arrays


def _parse_payload(payload: bytes) -> tuple[dict, list[np.ndarray]]:
    try:
        (meta_length,) = _LEN32.unpack_from(payload, 0)
        doc = json.loads(payload[_LEN32.size: _LEN32.size + meta_length].decode())
        meta, specs = doc["meta"], doc["arrays"]
        if not isinstance(meta, dict):
            raise SerializationError(f"record meta is a JSON {type(meta).__name__}, not an object: corrupted or "
                                     f"crafted bytes")
        offset = _LEN32.size + meta_length
        arrays = []
        for code, shape in specs:
            dtype = _DTYPES[code]
            count = int(np.prod(shape, dtype=np.int64))
            if count < 0 or any(int(d) < 0 for d in shape):
                raise ValueError(f"negative shape {shape}")
            end = offset + count * dtype.itemsize
            if end > len(payload):
                raise ValueError(f"array of shape {shape} runs past the payload end")
            arrays.append(np.frombuffer(payload, dtype=dtype, count=count, offset=offset).reshape(shape))
            offset = end
        if offset != len(payload):
            raise ValueError(f"{len(payload) - offset} unexpected bytes after the last array")
    except SerializationError:
        raise
    except Exception as exc:  # malformed JSON, missing fields, wrong types: all the same to the caller
        raise SerializationError(f"malformed payload: {exc}") from None
    return meta, arrays


def field(meta: dict, name: str, kind: type):
    """meta[name] checked to be of ``kind``; SerializationError otherwise."""
    value = meta.get(name) if isinstance(meta, dict) else None
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise SerializationError(f"field {name!r}={value!r} is missing or not a {kind.__name__}")
    return value


def peek_kind(blob) -> str:
    """The kind of a record, after checking only its magic and version."""
    if not isinstance(blob, (bytes, bytearray, memoryview)) or len(blob) < _HEAD.size:
        raise SerializationError("not a hezk record: too short or not bytes")
    magic, version, kind_code, _ = _HEAD.unpack_from(bytes(blob[: _HEAD.size]), 0)
    if magic != MAGIC:
        raise SerializationError(f"magic={magic!r} is not a hezk record (expected {MAGIC!r})")
    if kind_code not in _KIND_NAMES:
        raise SerializationError(f"unknown record kind {kind_code}")
    return _KIND_NAMES[kind_code]


# -- checks shared by the scheme's records -----------------------------------------------------------
def residue_array(data: np.ndarray) -> np.ndarray:
    """Residues as stored: little-endian uint32 (every prime is below 2^31)."""
    return np.asarray(data).astype("<u4")


def checked_residues(arr: np.ndarray, shape: tuple, moduli, what: str) -> np.ndarray:
    """uint64 copy of ``arr`` after checking its shape and that row i is below moduli[i] (axis -2)."""
    if tuple(arr.shape) != tuple(shape):
        raise SerializationError(f"{what} has shape {tuple(arr.shape)}, expected {tuple(shape)}")
    out = arr.astype(np.uint64)
    q = np.array(moduli, dtype=np.uint64)[:, None]
    if out.size and (out >= q).any():
        raise SerializationError(f"{what} holds residues that are not reduced modulo their primes")
    return out


def key_id_of(meta: dict) -> bytes:
    """The key-set id a record's meta names (hex text)."""
    try:
        return bytes.fromhex(field(meta, "key_id", str))
    except ValueError:
        value = meta.get("key_id") if isinstance(meta, dict) else None
        raise SerializationError(f"field 'key_id'={value!r} is missing or not hex") from None


def check_key_id(found: bytes, expected: bytes, what: str):
    """ContextMismatchError unless ``what`` (a record) was made under the expected key set."""
    if found != expected:
        raise ContextMismatchError(f"{what} belongs to key set {found.hex()[:12]}…, "
                                   f"this context holds key set {expected.hex()[:12]}…")


def level_of(meta: dict, params) -> int:
    """The meta's ``level``, checked against the parameters' levels."""
    level = field(meta, "level", int)
    if not 0 <= level <= params.max_level:
        raise SerializationError(f"field 'level'={level} not in [0, {params.max_level}]")
    return level


def value_meta(meta: dict, params) -> tuple[float, int, bool]:
    """(scale, length, is_complex) of an encoded value, each checked."""
    scale = field(meta, "scale", float)
    if not np.isfinite(scale) or scale <= 0:
        raise SerializationError(f"field 'scale'={scale} must be finite and positive")
    length = field(meta, "length", int)
    if not 0 <= length <= params.slots:
        raise SerializationError(f"field 'length'={length} not in [0, {params.slots}]")
    return scale, length, field(meta, "is_complex", bool)

