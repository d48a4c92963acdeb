"""The model owner's secret prover state of a hiding Network commitment, saved between commit and prove.

A hiding commitment is randomized (masks, random row tails, salted leaves: :mod:`proofs.zk`), so proving
later against the published commitment needs the same randomness, and each of its copies may serve one proof
only (:mod:`proofs.layers.reusable`), so the state also records which copies are spent. The file is a
``proofs.ProverState`` record of the one hezk container (:mod:`hezk_record`, a kind listed as secret): named
plain arrays, per copy its masks, its coefficient rows (data, tails and mask rows), its salts, and the views
its agreement value stated; plus the public commitment.
The tables, encodings and Merkle trees are rebuilt from the model and checked against the commitment's roots.
The file reveals the weights' masks: keep it as private as the weights.
"""
from __future__ import annotations

import os
import tempfile

import numpy as np

import hezk_record

from .. import basefold
from ..basefold_zk import HidingBasefoldCommitment, HidingBasefoldWitness, shape
from ..commit import _merkle_levels
from ..errors import ModelError, ProofRejected
from ..relations import StoreWitness, View
from ..zk import SALT_SIZE, HidingWitness, _encode, _leaves
from .reusable import ReusableWitness

STATE_VERSION = 1
KIND = "proofs.ProverState"


def _to_record(arrays: dict) -> bytes:
    """Named arrays as one record: names (and text values) in the meta, the arrays in that order."""
    names, values, text = [], [], {}
    for name, value in arrays.items():
        value = np.asarray(value)
        if value.dtype.kind == "U":
            text[name] = str(value)
        else:
            names.append(name)
            values.append(value)
    return hezk_record.pack(KIND, {"names": names, "text": text}, values)


def _from_record(blob: bytes, path) -> dict:
    try:
        record = hezk_record.unpack(blob, KIND)
    except hezk_record.RecordError as error:
        raise ModelError(f"prover state {path!r} is not readable: {error}") from None
    names, text = record.meta.get("names"), record.meta.get("text")
    if not (isinstance(names, list) and len(names) == len(record.arrays) and all(isinstance(n, str) for n in names)
            and isinstance(text, dict) and all(isinstance(v, str) for v in text.values())):
        raise ModelError(f"prover state {path!r}: its names do not match its arrays")
    return {**dict(zip(names, record.arrays)), **{k: np.array(v) for k, v in text.items()}}


def save(path, commitment, witness: ReusableWitness, layout) -> None:
    """Write the prover state (atomically, readable by the owner only)."""
    blob = to_bytes(commitment, witness, layout)
    folder = os.path.dirname(os.path.abspath(path))
    handle, temporary = tempfile.mkstemp(dir=folder, suffix=".state")
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(blob)
        os.chmod(temporary, 0o600)
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise


def to_bytes(commitment, witness: ReusableWitness, layout) -> bytes:
    """The prover state as one ``proofs.ProverState`` record (SECRET: the weights' masks)."""
    arrays = {"version": np.array(STATE_VERSION), "commitment": np.frombuffer(commitment.to_bytes(), dtype=np.uint8),
              "spent": np.array(sorted(witness.spent), dtype=np.int64)}
    for k, store in enumerate(witness.witnesses):
        hidden = store.commitment_witness
        if isinstance(hidden, HidingBasefoldWitness):  # hiding Basefold: the slot table (tail, random slots)
            arrays[f"c{k}.slots"] = hidden.inner.table
        else:
            arrays[f"c{k}.rows"] = hidden.rows
            arrays[f"c{k}.salts"] = np.frombuffer(b"".join(hidden.salts), dtype=np.uint8)
        arrays[f"c{k}.masks_spent"] = np.array(len(hidden.spent))
        for slot in layout.slots:
            arrays[f"c{k}.mask.{slot.name}"] = store.masks[slot.name]
        for v, view in enumerate(witness.agreement_views[k]):
            arrays[f"c{k}.view{v}.name"] = np.array(view.name)
            arrays[f"c{k}.view{v}.e"] = view.e
            arrays[f"c{k}.view{v}.active"] = np.array(view.active if view.active is not None else (-1, -1))
            if view.w is not None:
                arrays[f"c{k}.view{v}.w"] = view.w
    return _to_record(arrays)


def load(path, tables: dict, layout, parse=None):
    """(commitment bytes, ReusableWitness) from a state file (or the bytes of :func:`to_bytes`), checked against
    the copies' Merkle roots (ModelError when the file is not a prover state of this model). ``parse`` reads the
    commitment (default: ``ModelCommitment.from_bytes``; a graph commitment passes its own)."""
    from .statement import ModelCommitment
    parse = ModelCommitment.from_bytes if parse is None else parse
    if isinstance(path, (bytes, bytearray, memoryview)):
        data, path = _from_record(bytes(path), "<bytes>"), "<bytes>"
    else:
        try:
            with open(path, "rb") as handle:
                data = _from_record(handle.read(), path)
        except OSError as error:
            raise ModelError(f"prover state {path!r} is not readable: {error}") from None
    if int(data.get("version", -1)) != STATE_VERSION:
        raise ModelError(f"prover state {path!r} has no version {STATE_VERSION} marker")
    try:
        commitment = parse(data["commitment"].tobytes())
    except ProofRejected as error:
        raise ModelError(f"prover state {path!r}: its commitment does not parse ({error})") from None
    reusable = commitment.weights
    full = {}
    for slot in layout.slots:
        table = np.zeros(slot.size, dtype=np.uint64)
        table[:tables[slot.name].size] = tables[slot.name]
        full[slot.name] = table
    stores, views = [], []
    for k, copy in enumerate(reusable.copies):
        if isinstance(copy, HidingBasefoldCommitment):
            stores.append(_basefold_store(copy, layout, full, data, k, path))
            views.append(_views(data, k))
            continue
        rows = data[f"c{k}.rows"]
        salts = data[f"c{k}.salts"].tobytes()
        salts = tuple(salts[i:i + SALT_SIZE] for i in range(0, len(salts), SALT_SIZE))
        encoded = _encode(rows, copy.codeword_length)
        levels = _merkle_levels(_leaves(encoded, salts))
        data_rows = 1 << copy.log_rows
        expected = np.asarray(rows[:data_rows, :1 << copy.log_cols]).reshape(-1)
        if levels[-1][0] != copy.root or not np.array_equal(expected[:1 << layout.num_vars],
                                                            _packed(layout, full, data, k)):
            raise ModelError(f"prover state {path!r} does not belong to this model (copy {k})")
        hidden = HidingWitness(copy, rows, encoded, salts, levels, [True] * int(data[f"c{k}.masks_spent"]))
        masks = {slot.name: data[f"c{k}.mask.{slot.name}"] for slot in layout.slots}
        stores.append(StoreWitness(layout, full, masks, hidden))
        views.append(_views(data, k))
    witness = ReusableWitness(reusable, tuple(stores), tuple(views), [int(k) for k in data["spent"]])
    return commitment, witness


def _views(data: dict, k: int) -> tuple:
    count = sum(1 for name in data if name.startswith(f"c{k}.view") and name.endswith(".name"))
    return tuple(View(str(data[f"c{k}.view{v}.name"]), data[f"c{k}.view{v}.e"], data.get(f"c{k}.view{v}.w"),
                      _active(data[f"c{k}.view{v}.active"])) for v in range(count))


def _basefold_store(copy, layout, full: dict, data: dict, k: int, path) -> StoreWitness:
    """Copy k of a hiding Basefold commitment: its slot table re-committed and checked against the root, its
    slot 0 against the model's packed tables and masks."""
    slots = data.get(f"c{k}.slots")
    v, m = shape(copy.num_vars, copy.params)
    packed = _packed(layout, full, data, k)
    if slots is None or slots.shape != (1 << (v + m),):
        raise ModelError(f"prover state {path!r} does not belong to this model (copy {k})")
    inner_commitment, inner = basefold.commit(slots, copy.inner.params)
    if inner_commitment.root != copy.root or not np.array_equal(slots.reshape(1 << m, 1 << v)[:packed.size, 0],
                                                                 packed):
        raise ModelError(f"prover state {path!r} does not belong to this model (copy {k})")
    hidden = HidingBasefoldWitness(copy, packed, inner, [1] * int(data[f"c{k}.masks_spent"]))
    return StoreWitness(layout, full, {s.name: data[f"c{k}.mask.{s.name}"] for s in layout.slots}, hidden)


def _active(pair):
    lo, hi = (int(v) for v in pair)
    return None if lo < 0 else (lo, hi)


def _packed(layout, full: dict, data: dict, k: int) -> np.ndarray:
    """The committed table of copy k: the slots, then each slot's mask block (as :func:`commit_store` packs)."""
    lengths = layout.packing.lengths
    blocks = [data[f"c{k}.mask.{s.name}"].reshape(-1) for s in layout.slots]
    padded = [np.concatenate([b, np.zeros(n - b.size, dtype=np.uint64)])
              for b, n in zip(blocks, lengths[len(layout.slots):])]
    return layout.packing.pack([full[s.name] for s in layout.slots] + padded)

