"""Versioned byte format of commitments and proofs: a strict little-endian writer and reader.

Every object starts with an 8-byte magic and a 2-byte version. Integers are fixed width, field
elements are 4-byte words that must be canonical (< p), arrays and nested blobs carry their length.
The reader checks every length against what is left and every value against its range, and raises
:class:`ProofRejected` (never another exception) for anything malformed or truncated; ``finish``
rejects trailing bytes. There are no unused bytes: changing any byte changes some checked value.
The reader extends :class:`proofs.field.ByteReader` (raw bytes, bounds, trailing bytes), which the
primitives (commitments, openings, sumcheck proofs) read their own bytes with.

What a user stores or sends (model commitments, network and training proofs, reusable commitments, the prover
state) is one record of the hezk container (:mod:`hezk.record`, :func:`to_record`): its kind (``proofs.*``),
version and checksum around the object's own encoding (``inner_bytes``) held as one field.
"""
from __future__ import annotations

import struct

import numpy as np

import hezk.record

from . import field as F
from .errors import ProofRejected
from .field import EXT_DEGREE

MAX_BLOB = 1 << 31
MAX_COUNT = F.MAX_ARRAY_ELEMENTS  # most entries of one array (the same cap as the primitives' arrays)


class ByteWriter:
    """Appends fixed-width little-endian values to a buffer."""

    def __init__(self, magic: bytes, version: int):
        self._parts = [magic, struct.pack("<H", version)]

    def u8(self, value: int) -> None:
        self._parts.append(struct.pack("<B", value))

    def u32(self, value: int) -> None:
        self._parts.append(struct.pack("<I", value))

    def i64(self, value: int) -> None:
        self._parts.append(struct.pack("<q", value))

    def f64(self, value: float) -> None:
        self._parts.append(struct.pack("<d", value))

    def text(self, value: str) -> None:
        self.blob(value.encode("utf-8"))

    def blob(self, data: bytes) -> None:
        self.u32(len(data))
        self._parts.append(bytes(data))

    def i64_array(self, values) -> None:
        """A 2-D int64 array: rows, cols, data."""
        values = np.asarray(values, dtype="<i8")
        self.u32(values.shape[0])
        self.u32(values.shape[1])
        self._parts.append(values.tobytes())

    def ext_array(self, values) -> None:
        """F_p4 elements (..., 4): count, then 4 words per element (shape is the caller's business)."""
        words = np.asarray(values, dtype=np.uint64).reshape(-1, EXT_DEGREE)
        self.u32(words.shape[0])
        self._parts.append(words.astype("<u4").tobytes())

    def ext(self, value) -> None:
        """One F_p4 element as 4 words."""
        self._parts.append(np.asarray(value, dtype=np.uint64).reshape(EXT_DEGREE).astype("<u4").tobytes())

    def getvalue(self) -> bytes:
        return b"".join(self._parts)


class ByteReader(F.ByteReader):
    """Reads what :class:`ByteWriter` wrote, on top of :class:`proofs.field.ByteReader` (which reads the
    primitives' bytes); every failure is a ProofRejected naming ``what``."""

    def __init__(self, data, magic: bytes, version: int, what: str):
        super().__init__(data, what)
        if self.raw(len(magic)) != magic:
            raise ProofRejected(f"bad magic (not a {what})", what)
        found = self.u16()
        if found != version:
            raise ProofRejected(f"unsupported version {found} (expected {version})", what)

    @property
    def what(self) -> str:
        return self.where

    def u8(self) -> int:
        return self.uint(1)

    def u16(self) -> int:
        return self.uint(2)

    def u32(self) -> int:
        return self.uint(4)

    def i64(self) -> int:
        return struct.unpack("<q", self.raw(8))[0]

    def f64(self) -> float:
        return struct.unpack("<d", self.raw(8))[0]

    def flag(self) -> bool:
        value = self.u8()
        if value > 1:
            raise ProofRejected(f"boolean byte is {value}, not 0 or 1", self.where)
        return bool(value)

    def bounded(self, name: str, low: int, high: int) -> int:
        """A u32 that must lie in [low, high]."""
        value = self.u32()
        if not low <= value <= high:
            raise ProofRejected(f"{name}={value} not in [{low}, {high}]", self.where)
        return value

    def text(self) -> str:
        try:
            return self.blob().decode("utf-8")
        except UnicodeDecodeError:
            raise ProofRejected("text field is not UTF-8", self.where) from None

    def blob(self) -> bytes:
        return self.raw(self.bounded("blob length", 0, MAX_BLOB))

    def i64_array(self) -> np.ndarray:
        rows = self.bounded("rows", 0, MAX_COUNT)
        cols = self.bounded("cols", 0, MAX_COUNT)
        if rows * cols > MAX_COUNT:
            raise ProofRejected(f"array of {rows} x {cols} entries is too large", self.where)
        return np.frombuffer(self.raw(8 * rows * cols), dtype="<i8").astype(np.int64).reshape(rows, cols)

    def _words(self, count: int) -> np.ndarray:
        words = np.frombuffer(self.raw(4 * count), dtype="<u4").astype(np.uint64)
        if not F.is_canonical(words):
            raise ProofRejected("a field element is not canonical (>= p)", self.where)
        return words

    def ext_array(self) -> np.ndarray:
        count = self.bounded("element count", 0, MAX_COUNT)
        return self._words(EXT_DEGREE * count).reshape(count, EXT_DEGREE)

    def ext(self) -> np.ndarray:
        return self._words(EXT_DEGREE)


def to_record(kind: str, inner: bytes) -> bytes:
    """The one hezk container (:mod:`hezk.record`) around a top-level object's own encoding: a record of
    ``kind`` (e.g. ``proofs.ModelCommitment``) whose one field holds ``inner``; the container adds the kind
    (so a file of another kind is named), the version and a checksum."""
    return hezk.record.pack(kind, {}, [inner])


def from_record(data, kind, what: str) -> bytes:
    """The inner encoding of a record of ``kind`` (a name, or a tuple of accepted names) made by
    :func:`to_record`; ProofRejected names what the bytes are when they are another record ("this is a
    crypto.PublicContext record, expected a ...")."""
    try:
        record = hezk.record.unpack(data, kind)
        if len(record.arrays) != 1:
            raise hezk.record.RecordError(f"{kind} record holds {len(record.arrays)} fields, expected 1")
        return hezk.record.array_bytes(record, 0, what)
    except hezk.record.RecordError as error:
        raise ProofRejected(str(error), what) from None


def record_kind(data) -> str | None:
    """The container kind of ``data`` (None when it is no readable record)."""
    try:
        return hezk.record.peek_kind(data)
    except hezk.record.RecordError:
        return None


def parse_nested(parse, data: bytes, what: str):
    """Run another module's ``from_bytes`` on a nested blob, turning any failure into ProofRejected.

    A last guard only: the readers reject malformed bytes themselves before anything else can raise, and
    tests/proofs/test_parsers.py fails on any rejection made here ("malformed nested ...")."""
    try:
        return parse(data)
    except ProofRejected:
        raise
    except Exception as exc:  # a nested parser must never leak another exception type
        raise ProofRejected(f"malformed nested {what}: {type(exc).__name__}: {exc}", what) from None
