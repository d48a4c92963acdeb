"""Layer proofs as byte records: a schema per proof class, written field by field in dataclass order.

Used by :class:`proofs.layers.network.NetworkProof`; the byte-level rules (fixed widths, canonical
field elements, length prefixes, ProofRejected on anything malformed) are :mod:`proofs.proof_format`'s.
"""
from __future__ import annotations

from dataclasses import fields

from ..commit import OpeningProof
from ..proof_format import ByteReader, ByteWriter, parse_nested
from ..sumcheck import SumcheckProof
from .matmul import LinearProof
from .relu import BitGroupProof, DecompositionProof

# Field kinds of each layer proof, in dataclass field order: F_p4 elements, nested objects with bytes,
# (kind, "optional") for a nested object that may be None (a presence byte precedes it), or
# (BitGroupProof, "list") for a counted list of bit-group records.
_SCHEMAS = {
    DecompositionProof: ((SumcheckProof, "optional"), "ext", "ext", "ext", (BitGroupProof, "list")),
    BitGroupProof: ("ext", SumcheckProof, "ext", OpeningProof),
    LinearProof: ("ext", SumcheckProof, "ext", "ext"),
}


def write_record(writer: ByteWriter, proof, optional: bool = False) -> None:
    if optional:
        writer.u8(proof is not None)
        if proof is None:
            return
    for kind, item in zip(_SCHEMAS[type(proof)], fields(proof)):
        value = getattr(proof, item.name)
        if kind == "ext":
            writer.ext(value)
        elif kind == (BitGroupProof, "list"):
            writer.u32(len(value))
            for group in value:
                write_record(writer, group)
        elif isinstance(kind, tuple):
            writer.u8(value is not None)
            if value is not None:
                writer.blob(value.to_bytes())
        else:  # a deferred opening (settled by the proof's one batch opening) is an empty blob
            writer.blob(b"" if value is None and kind is OpeningProof else value.to_bytes())


def read_nested(reader: ByteReader, kind):
    return parse_nested(kind.from_bytes, reader.blob(), kind.__name__)


def read_record(reader: ByteReader, cls, optional: bool = False):
    if optional and not reader.flag():
        return None
    values = []
    for kind in _SCHEMAS[cls]:
        if kind == "ext":
            values.append(reader.ext())
        elif kind == (BitGroupProof, "list"):
            values.append(tuple(read_record(reader, BitGroupProof) for _ in range(reader.bounded("groups", 1, 2))))
        elif isinstance(kind, tuple):
            values.append(read_nested(reader, kind[0]) if reader.flag() else None)
        elif kind is OpeningProof:
            blob = reader.blob()
            values.append(parse_nested(kind.from_bytes, blob, kind.__name__) if blob else None)
        else:
            values.append(read_nested(reader, kind))
    return cls(*values)
