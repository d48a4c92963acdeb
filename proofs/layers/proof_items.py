"""A relation proof's bytes: its store commitments and its items (stated values, sumchecks, openings).

Shared by the training and inference proofs (:mod:`proofs.layers.step_proof`) and the agreement proofs of
reusable commitments (:mod:`proofs.layers.reusable`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import field as F
from ..errors import ProofRejected
from ..proof_format import from_record, to_record
from ..basefold import BasefoldProof
from ..basefold_zk import HidingBasefoldCommitment, MaskedBatchProof, MaskedSumcheckProof
from ..sumcheck import SumcheckProof
from ..pcs.scheme import HIDING_BASEFOLD, HIDING_LIGERO
from ..zk import HidingCommitment, HidingOpening, HidingParams, ZKSumcheckProof

#: "aggregate": every tensor of every layer and step in a few power-of-two stores (FAC4DNN); "layer": one
#: store per step and layer
MODES = ("aggregate", "layer")


@dataclass(frozen=True, eq=False)
class TrainingProof:
    """The proof's store commitments and its items in protocol order: stated F_p4 values, sumchecks
    (ZK or plain) and one hiding opening per store."""

    mode: str
    commitments: tuple  #: the proof's own stores (activations, gradients, bit planes, range bits)
    items: tuple
    copy: int = 0  #: which copy of each reusable statement commitment the proof uses (:mod:`.reusable`)

    KIND = "proofs.TrainingProof"

    def to_bytes(self) -> bytes:
        """A ``proofs.TrainingProof`` record (:func:`proofs.proof_format.to_record`) of :meth:`inner_bytes`."""
        return to_record(self.KIND, self.inner_bytes())

    def __reduce__(self):
        """Pickle (Dask, multiprocessing, concurrent.futures) through the versioned bytes of ``to_bytes``."""
        return type(self).from_bytes, (self.to_bytes(),)

    @classmethod
    def from_bytes(cls, data) -> "TrainingProof":
        """Inverse of :meth:`to_bytes`; anything malformed, truncated, trailing or of another kind raises
        ProofRejected."""
        return cls.from_inner_bytes(from_record(data, cls.KIND, "training proof"))

    def inner_bytes(self) -> bytes:
        """Magic, version, mode (u8), copy (u16), commitments (u16 count), items (u32 count, each a u8 tag + body)."""
        parts = [_PROOF_MAGIC, bytes([_PROOF_VERSION, MODES.index(self.mode)]), int(self.copy).to_bytes(2, "little"),
                 len(self.commitments).to_bytes(2, "little")] + [c.to_bytes() for c in self.commitments]
        parts.append(len(self.items).to_bytes(4, "little"))
        for item in self.items:
            tag = next(t for t, kind in enumerate(_ITEM_KINDS) if isinstance(item, kind))
            if tag < 2:  # F_p4 values (with their dimension count), or a plain sumcheck's messages
                body = (bytes([item.ndim]) if tag == 0 else b"") + F.elements_to_bytes(
                    item if tag == 0 else item.round_messages)
            elif tag in (5, 8):  # a Basefold batch opening: its length first (its own parser reads to the end)
                raw = item.to_bytes()
                body = len(raw).to_bytes(4, "little") + raw
            else:
                body = item.to_bytes()
            parts.append(bytes([tag]) + body)
        return b"".join(parts)

    @classmethod
    def from_inner_bytes(cls, data) -> "TrainingProof":
        """Inverse of :meth:`inner_bytes`; anything malformed, truncated or trailing raises ProofRejected."""
        reader = F.ByteReader(data, "training proof bytes")
        if reader.raw(len(_PROOF_MAGIC)) != _PROOF_MAGIC or reader.uint(1) != _PROOF_VERSION:
            raise ProofRejected("bad magic or version", reader.where)
        mode = reader.uint(1)
        if mode >= len(MODES):
            raise ProofRejected(f"mode {mode} unknown", reader.where)
        copy = reader.uint(2)
        commitments = tuple(read_store_commitment(reader)
                            for _ in range(reader.count(2, _commitment_bytes(), "commitment count")))
        count = reader.count(4, _MIN_ITEM_BYTES, "item count", limit=1 << 20)
        items = []
        for _ in range(count):
            tag = reader.uint(1)
            if tag >= len(_ITEM_KINDS):
                raise ProofRejected(f"item tag {tag} unknown", reader.where)
            items.append(_read_item(reader, tag))
        reader.finish()
        return cls(MODES[mode], commitments, tuple(items), copy)

    @property
    def num_bytes(self) -> int:
        return len(self.to_bytes())


_PROOF_MAGIC, _PROOF_VERSION = b"HZKTRAIN", 4  # 4: a Ligero commitment of the relations' masks as an item
_ITEM_KINDS = (np.ndarray, SumcheckProof, ZKSumcheckProof, HidingOpening,
               MaskedSumcheckProof, BasefoldProof, HidingBasefoldCommitment,  # 5, 6: Basefold stores
               HidingCommitment,  # the relations' masks (:class:`proofs.layers.step_relations.Channel`)
               MaskedBatchProof)  # 8: a "tail" layout Basefold batch opening (:mod:`proofs.basefold_zk`)


def read_store_commitment(reader):
    """A store commitment: a (Ligero) HidingCommitment or a HidingBasefoldCommitment, by its magic."""
    magic = HIDING_BASEFOLD.commitment_magic
    scheme = HIDING_BASEFOLD if reader._data[reader._pos:reader._pos + len(magic)] == magic else HIDING_LIGERO
    return scheme.commitment_type.read(reader)
def _commitment_bytes() -> int:
    """The (fixed) length of a HidingCommitment's bytes."""
    return len(HidingCommitment(bytes(32), 0, 0, HidingParams()).to_bytes())


_MIN_ITEM_BYTES = 7  # the smallest item: tag, ndim, an empty 1-D array's header (1 + 4 bytes)


def _read_item(reader, tag: int):
    """One proof item: an F_p4 array (its dimension count first: 1 or 2), or a proof object."""
    if tag == 0:
        ndim = reader.uint(1)
        if ndim not in (1, 2):
            raise ProofRejected(f"value array with {ndim} dimensions", reader.where)
        return reader.elements(ndim)
    if tag == 1:
        return SumcheckProof(reader.elements(3))
    if tag in (5, 8):
        size = reader.count(4, 1, "basefold proof length")
        return (BasefoldProof if tag == 5 else MaskedBatchProof).from_bytes(reader.raw(size))
    return {2: ZKSumcheckProof, 3: HidingOpening, 4: MaskedSumcheckProof, 6: HidingBasefoldCommitment,
            7: HidingCommitment}[tag].read(reader)
