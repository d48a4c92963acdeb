"""The model owner's secret prover state of a hiding Network commitment, saved between commit and prove.

A hiding commitment is randomized (masks, random row tails, salted leaves: :mod:`proofs.zk`), so proving
later against the published commitment needs the same randomness, and each of its copies may serve one proof
only (:mod:`proofs.layers.reusable`), so the state also records which copies are spent. The file is a
``proofs.ProverState`` record of the one hezk container (:mod:`hezk_record`, a kind listed as secret): named
plain arrays, per copy its masks, its coefficient rows (data, tails and mask rows), its salts, and the views
its agreement value stated; plus the public commitment.
The tables, encodings and Merkle trees are rebuilt from the model and checked against the commitment's roots.
The file reveals the weights' masks: keep it as private as the weights.

**A prover state must never be copied or restored.** Its list of spent copies is what keeps each copy to one
proof: two provers working from two copies of one state file (or from a backup restored after some proofs)
would prove with the same copy, and a few proofs on one copy give away the weights (their opened columns solve
for the rows). So a state file is a ledger, used under a lock:

* every reservation (:meth:`StateFile.reserve`, which ``ReusableWitness.take`` / ``reserve`` call for a witness
  loaded from or saved to a file) takes an exclusive ``fcntl.flock`` on ``PATH.lock``, re-reads the spent list
  from ``PATH`` (another process may have spent copies since this one loaded it), marks the copies spent, writes
  the state durably (temporary file, fsync, ``os.replace``, fsync of the folder) and only then hands the copies
  to the proof: a crash after the reservation wastes a copy, never reuses one;
* a counter beside the state, ``PATH.spent`` (the commitment's digest and how many copies are spent, written the
  same durable way after the state), never goes down: a state file listing fewer spent copies than its counter
  (a restored backup) is refused, by :func:`load` and by every reservation. (Restoring the counter too defeats
  this check: it is a tripwire, not a guarantee.)

A state read from bytes (:func:`to_bytes`, the Dask workers' copy) is bound to no file: the process that
handed it out reserves the copies the workers use (:func:`proofs.batch.prove_batch`).
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
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
    """Write the prover state (durably, readable by the owner only) and bind ``witness`` to the file: copies
    spent by other provers of the same file are merged in first (a stale prover never un-spends a copy), and a
    file whose counter says more copies are spent is refused (:class:`StateFile`)."""
    ledger = StateFile(path, commitment, layout)
    with _locked(path):
        ledger.merge(witness)
        ledger.write(witness)
    witness.ledger[:] = [ledger]


class StateFile:
    """A prover-state file as the ledger of its copies (module docstring): reservations under its lock."""

    def __init__(self, path, commitment, layout):
        self.path, self.commitment, self.layout = os.fspath(path), commitment, layout
        self.digest = hashlib.sha256(commitment.to_bytes()).hexdigest()

    def reserve(self, witness: ReusableWitness, pick) -> list:
        """Under the file's lock: merge the file's spent copies into ``witness``, ``pick()`` (marks and returns the
        copies), write the state and its counter durably; the copies are returned only once both are written."""
        with _locked(self.path):
            if not os.path.isfile(self.path):
                raise ModelError(f"prover state {self.path!r} is gone: its copies cannot be reserved (never move or "
                                 "delete a prover state that is in use)")
            if not self.merge(witness):
                raise ModelError(f"prover state {self.path!r} now holds another commitment's state: refusing to "
                                 "prove from this one")
            picked = pick()
            self.write(witness)
            return picked

    def merge(self, witness: ReusableWitness) -> bool:
        """Add the file's spent copies to ``witness`` (after the counter check); False when the file holds
        another commitment's state (True when there is no file yet)."""
        if not os.path.isfile(self.path):
            return True
        data = _read_state(self.path)
        if bytes(data["commitment"].tobytes()) != self.commitment.to_bytes():
            return False
        spent = {int(k) for k in data["spent"]}
        _check_counter(self.path, self.digest, len(spent))
        witness.spent.extend(sorted(spent - set(witness.spent)))
        return True

    def write(self, witness: ReusableWitness) -> None:
        """The state, then its counter (a crash between leaves the counter behind, never ahead)."""
        _write_durably(self.path, to_bytes(self.commitment, witness, self.layout))
        _write_durably(counter_path(self.path),
                       json.dumps({"commitment": self.digest, "spent": len(set(witness.spent))}).encode())


def counter_path(path) -> str:
    """Where the spent-copy counter of the state at ``path`` is kept: ``PATH.spent``."""
    return os.fspath(path) + ".spent"


def _check_counter(path, digest: str, spent: int) -> None:
    """ModelError when the counter beside ``path`` (for the same commitment) says more than ``spent`` copies are
    spent: the state was restored from an older copy, and proving from it would reuse copies."""
    try:
        with open(counter_path(path), "rb") as handle:
            counter = json.loads(handle.read())
        recorded = int(counter["spent"]) if counter.get("commitment") == digest else 0
    except FileNotFoundError:
        return
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as error:
        raise ModelError(f"prover state {os.fspath(path)!r}: its counter {counter_path(path)!r} is unreadable "
                         f"({error}); refusing to prove (a copy could be reused)") from None
    if recorded > spent:
        raise ModelError(f"prover state {os.fspath(path)!r} lists {spent} spent copies but its counter "
                         f"{counter_path(path)!r} records {recorded}: the state was copied or restored from an "
                         "older version, and proving from it would reuse copies (revealing the weights); a prover "
                         "state must never be copied or restored: commit again")


@contextlib.contextmanager
def _locked(path, shared: bool = False):
    """An ``fcntl.flock`` on ``PATH.lock`` (exclusive, or shared for a read) for the block's duration."""
    try:
        handle = os.open(os.fspath(path) + ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as error:
        raise ModelError(f"prover state {os.fspath(path)!r}: its lock file cannot be opened ({error})") from None
    try:
        fcntl.flock(handle, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        yield
    finally:
        os.close(handle)  # releases the lock


def _write_durably(path, blob: bytes) -> None:
    """Write ``blob`` to ``path`` atomically and durably (owner-only): a temporary file in the same folder,
    fsync, ``os.replace``, fsync of the folder."""
    folder = os.path.dirname(os.path.abspath(path))
    handle, temporary = tempfile.mkstemp(dir=folder, suffix=".state")
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(blob)
            stream.flush()
            os.fsync(stream.fileno())
        os.chmod(temporary, 0o600)
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise
    directory = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def _read_state(path) -> dict:
    try:
        with open(path, "rb") as handle:
            return _from_record(handle.read(), path)
    except OSError as error:
        raise ModelError(f"prover state {path!r} is not readable: {error}") from None


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
    source = None
    if isinstance(path, (bytes, bytearray, memoryview)):
        data, path = _from_record(bytes(path), "<bytes>"), "<bytes>"
    else:
        with _locked(path, shared=True):
            data = _read_state(path)
            source = path
            _check_counter(path, hashlib.sha256(data["commitment"].tobytes()).hexdigest() if "commitment" in data
                           else "", len({int(k) for k in data.get("spent", ())}))
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
    if source is not None:  # bound to its file: every reservation goes through it (module docstring)
        witness.ledger[:] = [StateFile(source, commitment, layout)]
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

