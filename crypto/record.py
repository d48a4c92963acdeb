"""crypto's records in the one hezk container (:mod:`hezk.record`; ``crypto.serialize`` lists every object's).

Layout (see :mod:`hezk.record`)::

    b"HEZK" | version u16 | kind u8 | fingerprint length u8 | fingerprint | payload length u64 |
    payload | SHA-256(everything before)[:16]

crypto names its kinds briefly ("ciphertext" is the container's ``crypto.Ciphertext``). The fingerprint
is the parameter set's, so bytes made under other parameters raise ContextMismatchError; truncated,
corrupted, foreign (another kind, e.g. a proof or a request, named in the message) or future-version bytes
raise SerializationError. Residues are stored as uint32 (all primes < 2^31).
"""
from __future__ import annotations

import numpy as np

import hezk.record
from hezk.record import MAGIC, VERSION, RecordError

from .errors import ContextMismatchError, SerializationError

_FULL = {"parameters": "crypto.Parameters", "plaintext": "crypto.Plaintext", "ciphertext": "crypto.Ciphertext",
         "public_key": "crypto.PublicKey", "relin_key": "crypto.RelinKey", "galois_keys": "crypto.GaloisKeys",
         "public_context": "crypto.PublicContext", "secret_key": "crypto.SecretKey",
         "full_context": "crypto.FullContext"}
_SHORT = {full: short for short, full in _FULL.items()}
KINDS = {short: hezk.record.KINDS[full] for short, full in _FULL.items()}

__all__ = ["MAGIC", "VERSION", "KINDS", "pack", "unpack", "field", "peek_kind"]


def pack(kind: str, fingerprint: bytes, meta: dict, arrays=()) -> bytes:
    """One record of ``kind``: JSON-serialisable ``meta`` plus numpy ``arrays`` (stored in order)."""
    try:
        return hezk.record.pack(_FULL[kind], meta, arrays, fingerprint)
    except RecordError as error:
        raise SerializationError(str(error)) from None


def unpack(blob, kind, fingerprint: bytes | None = None) -> tuple[bytes, dict, list[np.ndarray]]:
    """Parse a record made by :func:`pack` of ``kind`` (a name or a tuple of names): (fingerprint, meta, arrays).

    Checks magic, version, every length, the checksum and the kind (SerializationError, naming the record's
    kind and the expected one), then, when ``fingerprint`` is given, that the record was made under those
    parameters (ContextMismatchError).
    """
    kinds = (kind,) if isinstance(kind, str) else tuple(kind)
    try:
        record = hezk.record.unpack(blob, tuple(_FULL[k] for k in kinds))
    except RecordError as error:
        raise SerializationError(str(error)) from None
    if fingerprint is not None and record.fingerprint != fingerprint:
        raise ContextMismatchError(f"{_SHORT[record.kind]} was made under parameters with fingerprint "
                                   f"{record.fingerprint.hex()[:16]}…, this context has {fingerprint.hex()[:16]}…")
    return record.fingerprint, record.meta, record.arrays


def field(meta: dict, name: str, kind: type):
    """meta[name] checked to be of ``kind``; SerializationError otherwise."""
    try:
        return hezk.record.field(meta, name, kind)
    except RecordError as error:
        raise SerializationError(str(error)) from None


def peek_kind(blob) -> str:
    """The kind of a record (crypto's short name, or the container's full name for another package's record),
    after checking only its magic, version and kind code."""
    try:
        kind = hezk.record.peek_kind(blob)
    except RecordError as error:
        raise SerializationError(str(error)) from None
    return _SHORT.get(kind, kind)


# -- checks shared by the scheme's records -----------------------------------------------------------
def residue_array(data: np.ndarray) -> np.ndarray:
    """Residues as stored: little-endian uint32 (every prime is below 2^31); no copy when already so."""
    return np.asarray(data).astype("<u4", copy=False)


def checked_residues(arr: np.ndarray, shape: tuple, moduli, what: str, dtype=np.uint64) -> np.ndarray:
    """A copy of ``arr`` as ``dtype`` (uint64, or uint32 for keys: no widened copy) after checking its shape
    and that row i is below moduli[i] (axis -2)."""
    if tuple(arr.shape) != tuple(shape):
        raise SerializationError(f"{what} has shape {tuple(arr.shape)}, expected {tuple(shape)}")
    out = np.array(arr, dtype=dtype, order="C")
    q = np.array(moduli, dtype=out.dtype)[:, None]
    rows = out.reshape(-1, *out.shape[-2:]) if out.ndim >= 2 else out
    if out.size and any((block >= q).any() for block in rows):      # one block at a time: small temporaries
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

