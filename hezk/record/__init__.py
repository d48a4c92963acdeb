"""The one byte container of every hezk record (docs/architecture.md, rule 2): crypto's keys and ciphertexts,
tensor_ops' messages, tensors and saved clients, proofs' commitments, proofs and prover state.

Layout of one record (all integers little-endian)::

    b"HEZK" | version u16 | kind u8 | fingerprint length u8 | fingerprint | payload length u64 |
    payload | SHA-256(everything before)[:16]

The payload is ``meta length u32 | meta (UTF-8 JSON object) | arrays``: typed fields, the meta naming each
array's dtype and shape, so every length is checked before a byte is read. ``kind`` says what the record is
(:data:`KINDS`, one table for every package, so a record given where another is expected is named:
"this is a proofs.TrainingProof record, expected a crypto.PublicContext record"); the checksum catches any
changed byte. Anything malformed raises :class:`RecordError` (a ValueError); each engine turns it into its
own error type at its boundary (crypto: SerializationError, proofs: ProofRejected). Bottom-level: numpy only.
"""
from __future__ import annotations

import hashlib
import json
import math
import struct
from dataclasses import dataclass

import numpy as np

try:
    from importlib.metadata import PackageNotFoundError, version as _version
    __version__ = _version("hezk")
except PackageNotFoundError:  # a source tree that is not installed
    __version__ = "0+unknown"

__all__ = ["__version__", "MAGIC", "VERSION", "KINDS", "SECRET_KINDS", "Record", "RecordError", "KindError", "pack",
           "unpack", "peek_kind", "is_record", "describe", "field", "array_bytes"]

MAGIC = b"HEZK"
VERSION = 1
_DIGEST = 16
_HEAD = struct.Struct("<4sHBB")
_LEN64 = struct.Struct("<Q")
_LEN32 = struct.Struct("<I")
_DTYPES = {"u4": np.dtype("<u4"), "u8": np.dtype("<u8"), "i8": np.dtype("<i8"), "f8": np.dtype("<f8"),
           "u1": np.dtype("u1")}
MIN_SIZE = _HEAD.size + _LEN64.size + _DIGEST

# Every record kind of every package: name -> (code, what it is, in words). Codes 1-9 are crypto's
# original codes (files written before this table read unchanged).
_TABLE = {
    "crypto.Parameters": (1, "CKKS parameters"),
    "crypto.Plaintext": (2, "a plaintext"),
    "crypto.Ciphertext": (3, "a ciphertext"),
    "crypto.PublicKey": (4, "a public key"),
    "crypto.RelinKey": (5, "a relinearization key"),
    "crypto.GaloisKeys": (6, "Galois (rotation) keys"),
    "crypto.PublicContext": (7, "a public context"),
    "crypto.SecretKey": (8, "a SECRET key record"),
    "crypto.FullContext": (9, "a context holding a SECRET key"),
    "tensor_ops.Request": (16, "an encrypted-inference message (request)"),
    "tensor_ops.Reply": (17, "an encrypted-inference message (reply)"),
    "tensor_ops.CipherTensor": (18, "an encrypted tensor"),
    "tensor_ops.Client": (19, "the SECRET client file (written by Client.save / keygen --client)"),
    "proofs.ModelCommitment": (32, "a model commitment (written by proofs commit)"),
    "proofs.NetworkProof": (33, "a plain network proof"),
    "proofs.HidingNetworkProof": (34, "a zero-knowledge network proof"),
    "proofs.ProverState": (35, "the SECRET prover state of a hiding commitment"),
    "proofs.Reusable": (36, "a reusable hiding commitment"),
    "proofs.TrainingProof": (37, "a training-step proof"),
    "proofs.GraphCommitment": (38, "a model-graph commitment (written by proofs commit --model M.onnx)"),
    "proofs.GraphProof": (39, "a model-graph proof"),
    "proofs.HidingGraphCommitment": (40, "a hiding model-graph commitment (written by proofs commit --model M.onnx)"),
    "proofs.HidingGraphProof": (41, "a zero-knowledge model-graph proof"),
}
KINDS = {name: code for name, (code, _) in _TABLE.items()}
_NAMES = {code: name for name, code in KINDS.items()}
SECRET_KINDS = frozenset({"crypto.SecretKey", "crypto.FullContext", "tensor_ops.Client", "proofs.ProverState"})


class RecordError(ValueError):
    """Bytes that are not a well-formed record (or not of the expected kind)."""


class KindError(RecordError):
    """A well-formed record of another kind than expected; ``found`` and ``expected`` are kind names."""

    def __init__(self, found: str, expected: tuple):
        self.found, self.expected = found, tuple(expected)
        super().__init__(f"this is a {found} record ({_TABLE[found][1]}), expected a "
                         f"{' or '.join(self.expected)} record")


@dataclass(frozen=True)
class Record:
    """A parsed record: its kind's name, the fingerprint it was made under, its meta and its arrays."""

    kind: str
    fingerprint: bytes
    meta: dict
    arrays: list


def _checksum(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()[:_DIGEST]


def _code(kind: str) -> int:
    if kind not in KINDS:
        raise RecordError(f"kind={kind!r} is not a record kind ({', '.join(sorted(KINDS))})")
    return KINDS[kind]


def pack(kind: str, meta: dict, arrays=(), fingerprint: bytes = b"") -> bytes:
    """One record of ``kind``: a JSON-serialisable ``meta`` object plus numpy ``arrays`` (stored in order;
    bytes are stored as uint8 arrays)."""
    code = _code(kind)
    if len(fingerprint) > 255:
        raise RecordError(f"fingerprint of {len(fingerprint)} bytes exceeds 255")
    arrays = [np.frombuffer(bytes(a), dtype="u1") if isinstance(a, (bytes, bytearray, memoryview))
              else np.asarray(a, order="C") for a in arrays]
    specs = []
    for a in arrays:
        code_name = next((c for c, dt in _DTYPES.items() if a.dtype == dt), None)
        if code_name is None:
            raise RecordError(f"array dtype {a.dtype} cannot be stored; use one of {sorted(_DTYPES)}")
        specs.append([code_name, list(a.shape)])
    meta_bytes = json.dumps({"meta": meta, "arrays": specs}, separators=(",", ":")).encode()
    # the arrays' own buffers (no intermediate copies: a record of keys can be gigabytes), joined once
    data = [np.ascontiguousarray(a.astype(_DTYPES[s[0]], copy=False)).reshape(-1).view(np.uint8)
            for a, s in zip(arrays, specs)]
    payload = [_LEN32.pack(len(meta_bytes)), meta_bytes] + data
    parts = [_HEAD.pack(MAGIC, VERSION, code, len(fingerprint)), bytes(fingerprint),
             _LEN64.pack(sum(len(x) for x in payload))] + payload
    digest = hashlib.sha256()
    for x in parts:
        digest.update(x)
    return b"".join(parts + [digest.digest()[:_DIGEST]])


def is_record(blob) -> bool:
    """Whether ``blob`` starts like a record (magic only: cheap, for telling file types apart)."""
    return isinstance(blob, (bytes, bytearray, memoryview)) and bytes(blob[:len(MAGIC)]) == MAGIC


def peek_kind(blob) -> str:
    """The kind's name of a record, after checking only its magic, version and kind code."""
    if not isinstance(blob, (bytes, bytearray, memoryview)) or len(blob) < _HEAD.size:
        raise RecordError(f"not a hezk record: too short for its magic {MAGIC!r} and header, or not bytes")
    magic, version, code, _ = _HEAD.unpack_from(bytes(blob[:_HEAD.size]), 0)
    if magic != MAGIC:
        raise RecordError(f"magic={magic!r} is not a hezk record (expected {MAGIC!r})")
    if version != VERSION:
        raise RecordError(f"version={version} is not supported (this library reads version {VERSION})")
    if code not in _NAMES:
        raise RecordError(f"unknown record kind code {code}")
    return _NAMES[code]


def describe(blob) -> str:
    """What a record is, in words ("a public context", "the SECRET client file", ...), or why it is none."""
    try:
        return _TABLE[peek_kind(blob)][1]
    except RecordError:
        return "a damaged or foreign hezk record" if is_record(blob) else "not a hezk record"


def unpack(blob, kind) -> Record:
    """Parse a record made by :func:`pack` whose kind is ``kind`` (a name, or a tuple of accepted names).

    Checks magic, version, every length and the checksum, then the kind (:class:`KindError` names both), then
    the meta and array specs; any failure raises :class:`RecordError`."""
    expected = (kind,) if isinstance(kind, str) else tuple(kind)
    for name in expected:
        _code(name)
    if not isinstance(blob, (bytes, bytearray, memoryview)):
        raise RecordError(f"expected bytes, got {type(blob).__name__}")
    blob = bytes(blob)
    if len(blob) < MIN_SIZE:
        raise RecordError(f"{len(blob)} bytes is too short for a hezk record (at least {MIN_SIZE}: its magic {MAGIC!r}, version, kind, lengths and checksum)")
    magic, version, code, fp_len = _HEAD.unpack_from(blob, 0)
    if magic != MAGIC:
        raise RecordError(f"magic={magic!r} is not a hezk record (expected {MAGIC!r})")
    if version != VERSION:
        raise RecordError(f"version={version} is not supported (this library reads version {VERSION})")
    end = _HEAD.size + fp_len + _LEN64.size
    if len(blob) < end + _DIGEST:
        raise RecordError(f"record truncated: {len(blob)} bytes, header alone needs {end + _DIGEST}")
    (payload_length,) = _LEN64.unpack_from(blob, _HEAD.size + fp_len)
    if len(blob) != end + payload_length + _DIGEST:
        raise RecordError(f"record length {len(blob)} bytes does not match its header "
                          f"({end + payload_length + _DIGEST} bytes): truncated or padded")
    end += payload_length
    view = memoryview(blob)          # slices of a view: no copies of a large record
    if _checksum(view[:end]) != blob[end:]:
        raise RecordError("checksum mismatch: the bytes are corrupted")
    if code not in _NAMES:
        raise RecordError(f"unknown record kind code {code}, expected a {' or '.join(expected)} record")
    if _NAMES[code] not in expected:
        raise KindError(_NAMES[code], expected)
    meta, arrays = _parse_payload(view[_HEAD.size + fp_len + _LEN64.size:end])
    return Record(_NAMES[code], blob[_HEAD.size:_HEAD.size + fp_len], meta, arrays)


def _parse_payload(payload: memoryview) -> tuple[dict, list]:
    if len(payload) < _LEN32.size:
        raise RecordError(f"payload of {len(payload)} bytes has no meta length")
    (meta_length,) = _LEN32.unpack_from(payload, 0)
    if _LEN32.size + meta_length > len(payload):
        raise RecordError(f"meta length {meta_length} runs past the payload ({len(payload)} bytes)")
    try:
        doc = json.loads(bytes(payload[_LEN32.size:_LEN32.size + meta_length]).decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise RecordError(f"record meta is not valid JSON: {type(exc).__name__}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("meta"), dict) or not isinstance(doc.get("arrays"), list):
        raise RecordError("record meta is not an object with a 'meta' object and an 'arrays' list: corrupted or "
                          "crafted bytes")
    offset, arrays = _LEN32.size + meta_length, []
    for spec in doc["arrays"]:
        if not (isinstance(spec, list) and len(spec) == 2 and isinstance(spec[0], str) and spec[0] in _DTYPES
                and isinstance(spec[1], list)
                and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in spec[1])):
            raise RecordError(f"array spec {spec!r} is not [dtype code, shape of non-negative integers]")
        dtype, shape = _DTYPES[spec[0]], tuple(spec[1])
        size = math.prod(shape) * dtype.itemsize  # Python integers: no overflow
        if offset + size > len(payload):
            raise RecordError(f"array of shape {shape} runs past the payload end")
        arrays.append(np.frombuffer(payload, dtype=dtype, count=math.prod(shape), offset=offset).reshape(shape))
        offset += size
    if offset != len(payload):
        raise RecordError(f"{len(payload) - offset} unexpected bytes after the last array")
    return doc["meta"], arrays


def field(meta: dict, name: str, kind: type):
    """meta[name] checked to be of ``kind`` (an int is accepted as a float, a bool never as an int)."""
    value = meta.get(name) if isinstance(meta, dict) else None
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise RecordError(f"field {name!r}={value!r} is missing or not a {kind.__name__}")
    return value


def array_bytes(record: Record, index: int, name: str) -> bytes:
    """The bytes stored as uint8 array ``index`` of ``record`` (a nested encoding), checked."""
    if index >= len(record.arrays):
        raise RecordError(f"{record.kind} record holds {len(record.arrays)} arrays, {name} (array {index}) is missing")
    array = record.arrays[index]
    if array.dtype != np.dtype("u1") or array.ndim != 1:
        raise RecordError(f"{name} (array {index}) is a {array.dtype} array of shape {array.shape}, not bytes")
    return array.tobytes()
