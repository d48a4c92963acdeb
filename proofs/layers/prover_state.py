"""The model owner's secret prover state of a hiding Network commitment, saved between commit and prove.

A hiding commitment is randomized (masks, random row tails, salted leaves: :mod:`proofs.zk`), so proving
later against the published commitment needs the same randomness, and each of its copies may serve one proof
only (:mod:`proofs.layers.reusable`), so the state also records which copies are spent. The file is a
``proofs.ProverState`` record of the one hezk container (:mod:`hezk.record`, a kind listed as secret): named
plain arrays, per copy its masks, the random parts of its committed table (Ligero: each data row's tail and the
mask rows; hiding Basefold: its first slot past the prefix the model's table holds, and the other slots; version
3: versions 1 and 2 held whole rows and slot tables, the model's data in every copy), its salts, and the views
its agreement value stated; the digest of the model's tables; plus the public commitment.
The tables, data blocks, encodings and Merkle trees are rebuilt from the model (checked against the digest at
load) and each copy's code against its commitment's root when the copy is first used.
The file reveals the weights' masks: keep it as private as the weights.

**A prover state must never be copied or restored.** Its list of spent copies is what keeps each copy to one
proof: two provers working from two copies of one state file (or from a backup restored after some proofs)
would prove with the same copy, and a few proofs on one copy give away the weights (their opened columns solve
for the rows). So the copies are reserved in a journal beside the state, under a lock:

* ``PATH.spent``, the **journal of reserved copies**: a header line (the commitment's digest and the state's
  identity, a random id drawn when the state is first written to ``PATH``), then one line per reservation (the
  copy indices and a CRC-32). A reservation (:meth:`StateFile.reserve`, which ``ReusableWitness.take`` /
  ``reserve`` call for a witness loaded from or saved to a file) takes an exclusive ``fcntl.flock`` on
  ``PATH.lock``, reads the journal (another process may have reserved copies since this one loaded the state),
  marks the copies spent, appends their line (``O_APPEND``, fdatasync) and only then hands the copies to the proof:
  a crash after the reservation wastes a copy, never reuses one. A line cut short by a crash (no newline: its
  fsync never returned, so its copies were never used) is dropped. The big state file is not touched.
* the state file is rewritten only by an explicit :func:`save` (the journal first, compacted, then the state,
  each durably: temporary file, fsync, ``os.replace``, fsync of the folder); it lists the spent copies and its
  identity, which says that its journal must exist. The spent copies are those of the state and of the
  journal together; a state whose journal is missing (deleted, or the state was copied elsewhere or restored
  from a backup without it), is another state's or another commitment's, or lacks copies the state lists
  spent is refused, by :func:`load` and by every reservation. (Restoring the journal with the state defeats
  this: it is a tripwire, not a guarantee.) A version-1 state (no journal) is bound to a new journal when
  loaded, after checking the old ``PATH.spent`` counter.

A state read from bytes (:func:`to_bytes`, the Dask workers' copy) is bound to no file: the process that
handed it out reserves the copies the workers use (:func:`proofs.batch.prove_batch`).
"""
from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import json
import os
import secrets
import tempfile
import threading
import zlib
from dataclasses import dataclass

import numpy as np

import hezk.record

from .. import basefold
from ..basefold_zk import HidingBasefoldWitness, slots_of
from ..pcs.merkle import merkle_levels
from ..errors import ModelError, ProofRejected
from ..pcs.scheme import HIDING_BASEFOLD, scheme_of
from ..relations import StoreWitness, View, pack_store
from ..pcs.merkle import column_leaves
from ..pcs.reed_solomon import rs_encode_rows
from ..zk import SALT_SIZE, HidingWitness
from .reusable import ReusableWitness

#: 2: bound to a journal of reserved copies (version 1, read too: a counter beside it)
STATE_VERSION = 3
READABLE_VERSIONS = (1, 2, 3)
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
    return hezk.record.pack(KIND, {"names": names, "text": text}, values)


def _from_record(blob: bytes, path) -> dict:
    try:
        record = hezk.record.unpack(blob, KIND)
    except hezk.record.RecordError as error:
        raise ModelError(f"prover state {path!r} is not readable: {error}") from None
    names, text = record.meta.get("names"), record.meta.get("text")
    if not (isinstance(names, list) and len(names) == len(record.arrays) and all(isinstance(n, str) for n in names)
            and isinstance(text, dict) and all(isinstance(v, str) for v in text.values())):
        raise ModelError(f"prover state {path!r}: its names do not match its arrays")
    return {**dict(zip(names, record.arrays)), **{k: np.array(v) for k, v in text.items()}}


def save(path, commitment, witness: ReusableWitness, layout) -> None:
    """Write the prover state and its journal (durably, readable by the owner only) and bind ``witness`` to the
    file: copies spent by other provers of the same file are merged in first (a stale prover never un-spends a
    copy), and a state whose journal is missing or another's is refused (module docstring)."""
    digest, copies = _digest(commitment.to_bytes()), len(witness.witnesses)
    with _locked(path):
        state_id, spent = _recorded(os.fspath(path), digest, copies)
        witness.spent.extend(sorted(spent - set(witness.spent)))
        state_id = secrets.token_hex(16) if state_id is None else state_id
        spent = sorted(set(witness.spent))
        _write_durably(journal_path(path), _header(digest, state_id) + (_record(spent) if spent else b""))
        _write_durably(path, to_bytes(commitment, witness, layout, state_id))
    witness.ledger[:] = [StateFile(path, digest, state_id, witness.spent, copies)]


def journal_path(path) -> str:
    """Where the journal of reserved copies of the state at ``path`` is kept: ``PATH.spent``."""
    return os.fspath(path) + ".spent"


JOURNAL_MAGIC = "hezk.prover-state.journal.v1"


@dataclass(frozen=True)
class Journal:
    """A parsed journal: its header, the copies it reserves, the length of its complete lines and its size (a
    longer size: a torn last line); ``legacy``: the spent count of a version-1 counter file instead."""

    commitment: str
    state: str | None
    spent: frozenset
    length: int
    size: int
    legacy: int | None = None


def _digest(commitment_bytes: bytes) -> str:
    return hashlib.sha256(commitment_bytes).hexdigest()


def _header(digest: str, state_id: str) -> bytes:
    return json.dumps({"journal": JOURNAL_MAGIC, "commitment": digest, "state": state_id}).encode() + b"\n"


def _record(copies) -> bytes:
    """One reservation's line: the copy indices and the CRC-32 of their text."""
    body = " ".join(str(int(k)) for k in copies).encode()
    return body + b" %08x\n" % zlib.crc32(body)


def _missing(path) -> ModelError:
    return _refused(path, f"it requires its journal of reserved copies {journal_path(path)!r}, which is missing")


def _refused(path, why: str) -> ModelError:
    return ModelError(f"prover state {os.fspath(path)!r}: {why}; the state was copied or restored (or its journal "
                      "deleted or replaced), and proving from it could reuse copies (revealing the weights): a "
                      "prover state must never be copied or restored: commit again")


def _parse_journal(blob: bytes, where: str, copies: int) -> Journal:
    """The journal (or version-1 counter) ``blob``; ModelError when it is neither, or names a copy outside
    [0, copies)."""
    def unreadable(why):
        return ModelError(f"prover state journal {where!r} is unreadable ({why}); refusing to prove (a copy could "
                          "be reused)")

    length = blob.rfind(b"\n") + 1  # past the last complete line: a torn tail was never fsynced, never used
    lines = blob[:length].split(b"\n")[:-1]
    try:
        header = json.loads(lines[0] if lines else blob)
    except ValueError as error:
        raise unreadable(f"its header: {error}") from None
    if not isinstance(header, dict) or not isinstance(header.get("commitment"), str):
        raise unreadable("its header names no commitment")
    if header.get("journal") != JOURNAL_MAGIC:  # the counter of a version-1 state
        count = header.get("spent")
        if lines or isinstance(count, bool) or not isinstance(count, int):
            raise unreadable(f"its header is not a {JOURNAL_MAGIC} header")
        return Journal(header["commitment"], None, frozenset(), len(blob), len(blob), count)
    if not isinstance(header.get("state"), str):
        raise unreadable("its header names no state")
    spent = set()
    for number, line in enumerate(lines[1:], 2):
        body, _, crc = line.rpartition(b" ")
        try:
            picked = [int(k) for k in body.split()]
            valid = int(crc, 16) == zlib.crc32(body) and len(crc) == 8
        except ValueError:
            valid = False
        if not valid or not picked or not all(0 <= k < copies for k in picked):
            raise unreadable(f"line {number} is not a reservation of copies in [0, {copies})")
        spent.update(picked)
    return Journal(header["commitment"], header["state"], frozenset(spent), length, len(blob))


def _read_journal(path: str, copies: int) -> Journal | None:
    try:
        with open(path, "rb") as handle:
            return _parse_journal(handle.read(), path, copies)
    except FileNotFoundError:
        return None
    except OSError as error:
        raise ModelError(f"prover state journal {path!r} is not readable: {error}") from None


def _check_journal(path, journal: Journal | None, digest: str, state_id: str, listed) -> None:
    """ModelError unless ``journal`` is the journal of the state ``state_id`` of commitment ``digest`` and reserves
    every copy in ``listed`` (those the state lists spent)."""
    if journal is None:
        raise _missing(path)
    if journal.legacy is not None or journal.commitment != digest or journal.state != state_id:
        raise _refused(path, f"its journal {journal_path(path)!r} belongs to another state or commitment")
    missing = set(listed) - journal.spent
    if missing:
        raise _refused(path, f"it lists {len(set(listed))} spent copies, its journal {journal_path(path)!r} only "
                             f"{len(journal.spent)} (copies {sorted(missing)[:8]} are missing)")


def _recorded(path: str, digest: str, copies: int, data: dict | None = None):
    """(identity, spent copies) that the state at ``path`` (``data``: already read) and its journal record for
    the commitment ``digest``; identity None when no journal of this commitment exists yet (a new state, or a
    version-1 one). ModelError when they disagree (module docstring). Call under the file's lock."""
    if data is None and os.path.isfile(path):
        data = _read_state(path)
    journal = _read_journal(journal_path(path), copies)
    same = data is not None and "commitment" in data and _digest(data["commitment"].tobytes()) == digest
    listed = _listed(data, path, copies) if same else set()
    if same and "state" in data:  # a state bound to its journal
        _check_journal(path, journal, digest, str(data["state"]), listed)
        return str(data["state"]), set(journal.spent)
    if journal is None or journal.commitment != digest:
        return None, listed
    if journal.legacy is not None:  # a version-1 state and its counter
        if journal.legacy > len(listed):
            raise _refused(path, f"it lists {len(listed)} spent copies but its counter {journal_path(path)!r} "
                                 f"records {journal.legacy}")
        return None, listed
    return journal.state, listed | journal.spent


def _listed(data: dict, path, copies: int) -> set:
    """The copies the state ``data`` lists spent (ModelError for an index outside [0, copies))."""
    listed = {int(k) for k in np.asarray(data.get("spent", ()), dtype=np.int64).reshape(-1)}
    if not all(0 <= k < copies for k in listed):
        raise ModelError(f"prover state {os.fspath(path)!r} lists spent copies outside [0, {copies})")
    return listed


class StateFile:
    """A prover-state file's journal as the ledger of its copies (module docstring): reservations under its lock.
    ``floor``: the copies the state file lists spent (its journal must reserve them all)."""

    def __init__(self, path, digest: str, state_id: str, floor, copies: int):
        self.path, self.digest, self.state_id = os.fspath(path), digest, state_id
        self.floor, self.copies = frozenset(int(k) for k in floor), copies

    def reserve(self, witness: ReusableWitness, pick) -> list:
        """Under the file's lock: merge the journal's copies into ``witness``, ``pick()`` (marks and returns the
        copies), append them to the journal and fsync; the copies are returned only once that is durable."""
        journal = journal_path(self.path)
        with _locked(self.path):
            if not os.path.isfile(self.path):
                raise ModelError(f"prover state {self.path!r} is gone: its copies cannot be reserved (never move or "
                                 "delete a prover state that is in use)")
            try:
                handle = os.open(journal, os.O_RDWR | os.O_APPEND)
            except FileNotFoundError:
                raise _missing(self.path) from None
            except OSError as error:
                raise ModelError(f"prover state journal {journal!r} cannot be opened ({error})") from None
            try:
                size = os.fstat(handle).st_size
                parsed = _parse_journal(os.pread(handle, size, 0), journal, self.copies)
                _check_journal(self.path, parsed, self.digest, self.state_id, self.floor)
                witness.spent.extend(sorted(parsed.spent - set(witness.spent)))
                picked = pick()
                new = sorted(set(witness.spent) - parsed.spent)
                if new:
                    if parsed.length != parsed.size:  # drop a torn line first
                        os.ftruncate(handle, parsed.length)
                    _write_all(handle, _record(new))
                    _sync(handle)
            finally:
                os.close(handle)
            return picked


#: the data and the size of an appended file reach the disk (fdatasync where there is one: no timestamps)
_sync = getattr(os, "fdatasync", os.fsync)


def _write_all(handle: int, blob: bytes) -> None:
    view = memoryview(blob)
    while view:
        view = view[os.write(handle, view):]


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


def to_bytes(commitment, witness: ReusableWitness, layout, state_id: str | None = None) -> bytes:
    """The prover state as one ``proofs.ProverState`` record (SECRET: the weights' masks); ``state_id``: the
    identity of a state file, which then requires its journal (:func:`save`)."""
    arrays = {"version": np.array(STATE_VERSION), "commitment": np.frombuffer(commitment.to_bytes(), dtype=np.uint8),
              "spent": np.array(sorted(witness.spent), dtype=np.int64)}
    if state_id is not None:
        arrays["state"] = np.array(state_id)
    copies = witness.witnesses
    loaded = isinstance(copies, CopiesOnDemand)
    tables = copies.tables if loaded else copies[0].tables if len(copies) else None
    if tables is not None:  # the model's tables, shared by every copy, by their digest (each copy: its randomness)
        arrays["tables.digest"] = np.frombuffer(_tables_digest(layout, tables), dtype=np.uint8)
    for k in range(len(copies)):
        unused = copies.unbuilt(k) if loaded else None
        if unused is not None:  # a loaded copy no proof has read: its arrays as they were read, nothing rebuilt
            arrays.update(unused)
            continue
        store = copies[k]
        hidden = store.commitment_witness
        if scheme_of(hidden, error=None) is HIDING_BASEFOLD:  # hiding Basefold: the slot table's random parts
            first, others = _split_slots(hidden.commitment, hidden.inner.table)
            model = _padded_to(pack_store(layout, store.tables, store.masks), first.size)
            same = first.size if np.array_equal(first, model) else int(np.flatnonzero(first != model)[0])
            arrays[f"c{k}.first_tail"] = first[same:]  # S_0 past its model-held prefix: a tail layout's random tail
            arrays[f"c{k}.other_slots"] = others
        else:  # the rows' random parts: each data row's tail, then the mask rows (the data block is the model's)
            data_rows, cols = 1 << hidden.commitment.log_rows, 1 << hidden.commitment.log_cols
            arrays[f"c{k}.tails"] = hidden.rows[:data_rows, cols:]
            arrays[f"c{k}.mask_rows"] = hidden.rows[data_rows:]
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
    """(commitment bytes, ReusableWitness) from a state file (or the bytes of :func:`to_bytes`): each copy's table
    checked against the model's tables now, its code and Merkle root when the copy is first used
    (:class:`CopiesOnDemand`; ModelError when the file is not a prover state of this model). ``parse`` reads the
    commitment (default: ``ModelCommitment.from_bytes``; a graph commitment passes its own)."""
    from .statement import ModelCommitment
    parse = ModelCommitment.from_bytes if parse is None else parse
    recorded = None
    if isinstance(path, (bytes, bytearray, memoryview)):
        data, path = _from_record(bytes(path), "<bytes>"), "<bytes>"
        commitment = _parse_commitment(data, path, parse)
    else:
        with _locked(path, shared=True):  # the state and its journal as of one moment
            data = _read_state(path)
            commitment = _parse_commitment(data, path, parse)
            recorded = _recorded(os.fspath(path), _digest(data["commitment"].tobytes()),
                                 len(commitment.weights.copies), data)
    reusable = commitment.weights
    full = {}
    for slot in layout.slots:
        table = np.zeros(slot.size, dtype=np.uint64)
        table[:tables[slot.name].size] = tables[slot.name]
        full[slot.name] = table
    if "tables.digest" in data:  # version 3: the model's tables by their digest, each copy's randomness apart
        if data["tables.digest"].tobytes() != _tables_digest(layout, full):
            raise ModelError(f"prover state {path!r} does not belong to this model (the digest of its tables "
                             f"differs): prove with the model file it was committed from")
    else:  # versions 1 and 2: each copy's stored table holds this model
        for k, copy in enumerate(reusable.copies):
            if not _holds(copy, layout, data, k, _packed(layout, full, data, k)):
                raise ModelError(f"prover state {path!r} does not belong to this model (copy {k})")
    stores = CopiesOnDemand(len(reusable.copies), lambda k: _store(reusable.copies[k], layout, full, data, k, path),
                            full, lambda k: {name: a for name, a in data.items() if name.startswith(f"c{k}.")})
    views = [_views(data, k) for k in range(len(reusable.copies))]
    if recorded is None:
        return commitment, ReusableWitness(reusable, stores, tuple(views), [int(k) for k in data["spent"]])
    state_id, spent = recorded
    witness = ReusableWitness(reusable, stores, tuple(views), sorted(spent))
    if "state" in data:  # bound to its file: every reservation goes through its journal (module docstring)
        witness.ledger[:] = [StateFile(path, _digest(data["commitment"].tobytes()), state_id, spent, len(stores))]
    else:  # version 1 (or bytes written to a file): bound to a journal now, once
        save(path, commitment, witness, layout)
    return commitment, witness


def _parse_commitment(data: dict, path, parse):
    if data.get("version") is None or int(data["version"]) not in READABLE_VERSIONS or "commitment" not in data:
        raise ModelError(f"prover state {path!r} has no version {STATE_VERSION} marker")
    try:
        return parse(data["commitment"].tobytes())
    except ProofRejected as error:
        raise ModelError(f"prover state {path!r}: its commitment does not parse ({error})") from None


def _views(data: dict, k: int) -> tuple:
    count = sum(1 for name in data if name.startswith(f"c{k}.view") and name.endswith(".name"))
    return tuple(View(str(data[f"c{k}.view{v}.name"]), data[f"c{k}.view{v}.e"], data.get(f"c{k}.view{v}.w"),
                      _active(data[f"c{k}.view{v}.active"])) for v in range(count))


class CopiesOnDemand:
    """The store witnesses of a loaded state's copies, each rebuilt (its code re-encoded, its Merkle tree re-hashed
    and checked against the copy's root) when first read: a proof uses one copy, so loading a state of 16 copies
    no longer encodes all 16 (the 16 x 32 layer's ``hezk prove``: 1.6 s of its 5.7 s). A sequence (len, index,
    iteration) like the tuple it stands for; thread-safe. ``tables``: the model's (every copy's); ``arrays(k)``:
    copy k's arrays as the state file holds them."""

    def __init__(self, count: int, build, tables: dict, arrays):
        self._built, self._build, self._arrays, self._lock = [None] * count, build, arrays, threading.Lock()
        self.tables = tables

    def unbuilt(self, k: int):
        """Copy k's arrays as read when no proof has read the copy (to write the state again), else None."""
        with self._lock:
            return self._arrays(k) if self._built[k] is None else None

    def __len__(self) -> int:
        return len(self._built)

    def __getitem__(self, k: int):
        k = range(len(self))[k]  # IndexError as a tuple's
        with self._lock:
            if self._built[k] is None:
                self._built[k] = self._build(k)
            return self._built[k]

    def __iter__(self):
        return (self[k] for k in range(len(self)))


def _holds(copy, layout, data: dict, k: int, packed: np.ndarray) -> bool:
    """Whether copy k's stored table (Ligero rows, or the Basefold slot table's first column) holds ``packed``."""
    if HIDING_BASEFOLD.is_commitment(copy):
        first = _first_slot(copy, data, k, packed)
        if first is None or first.size < packed.size:
            return False
        differ = np.flatnonzero(first[:packed.size] != packed)  # a tail layout's random tail fills the free end
        return differ.size == 0 or not np.any(packed[differ[0]:])
    rows = data.get(f"c{k}.rows")
    if rows is None or rows.ndim != 2 or rows.shape[0] < 1 << copy.log_rows or rows.shape[1] < 1 << copy.log_cols:
        return False
    expected = np.asarray(rows[:1 << copy.log_rows, :1 << copy.log_cols]).reshape(-1)
    return np.array_equal(expected[:1 << layout.num_vars], packed)


def _split_slots(copy, slots: np.ndarray) -> tuple:
    """(S_0, the other slots (2^m, 2^v - 1)) of a slot table C[c + 2^v x] = S_c[x] (``basefold_zk.slot_table``)."""
    v = slots_of(copy)
    table = np.asarray(slots).reshape(-1, 1 << v)
    return np.ascontiguousarray(table[:, 0]), np.ascontiguousarray(table[:, 1:])


def _padded_to(values: np.ndarray, size: int) -> np.ndarray:
    out = np.zeros(size, dtype=np.uint64)
    out[:min(size, values.size)] = values[:size]
    return out


def _slot_table(copy, data: dict, k: int, packed: np.ndarray):
    """Copy k's whole slot table: stored (versions 1-2), or (version 3) S_0 as the model's ``packed`` table up to
    its stored tail, beside the stored other slots; None when the stored parts have other sizes."""
    if f"c{k}.slots" in data:
        slots = data[f"c{k}.slots"]
        return slots if slots.ndim == 1 and slots.size == 1 << copy.inner.num_vars else None
    tail, others = data.get(f"c{k}.first_tail"), data.get(f"c{k}.other_slots")
    v = slots_of(copy)
    m = copy.inner.num_vars - v
    if tail is None or others is None or tail.ndim != 1 or tail.size > 1 << m or others.shape != (1 << m, (1 << v) - 1):
        return None
    first = _padded_to(packed, 1 << m)
    first[(1 << m) - tail.size:] = tail
    table = np.empty((1 << m, 1 << v), dtype=np.uint64)
    table[:, 0], table[:, 1:] = first, others
    return table.reshape(-1)


def _first_slot(copy, data: dict, k: int, packed: np.ndarray):
    """S_0 of a hiding Basefold copy's slot table (the committed table, with a tail layout's random tail in its free
    end: what the committing witness holds, ``basefold_zk.commit``), or None when the stored table has another size."""
    slots = _slot_table(copy, data, k, packed)
    v = slots_of(copy)
    if slots is None or slots.size < 1 << (v + copy.num_vars):
        return None
    return np.ascontiguousarray(slots[::1 << v][:1 << copy.num_vars])


def _store(copy, layout, full: dict, data: dict, k: int, path) -> StoreWitness:
    """Copy k's store witness: its code re-encoded and re-hashed, checked against the copy's root (ModelError:
    the state does not belong to this commitment)."""
    if HIDING_BASEFOLD.is_commitment(copy):
        packed = _packed(layout, full, data, k)
        if not _holds(copy, layout, data, k, packed):  # its slot table's first column: this model's and masks
            raise ModelError(f"prover state {path!r} does not belong to this model (copy {k})")
        inner_commitment, inner = basefold.commit(_slot_table(copy, data, k, packed), copy.inner.params)
        if inner_commitment.root != copy.root:
            raise ModelError(f"prover state {path!r} does not belong to this model (copy {k})")
        spent = [1] * int(data[f"c{k}.masks_spent"])
        hidden = HidingBasefoldWitness(copy, _first_slot(copy, data, k, packed), inner, spent)
        return StoreWitness(layout, full, _masks(layout, data, k), hidden)
    stored = _stored_copy(copy, layout, full, data, k, path)
    hidden = stored.commitment_witness
    encoded = rs_encode_rows(hidden.rows, copy.codeword_length)
    levels = merkle_levels(column_leaves(encoded, hidden.salts))
    if levels[-1][0] != copy.root:
        raise ModelError(f"prover state {path!r} does not belong to this model (copy {k})")
    return dataclasses.replace(stored, commitment_witness=dataclasses.replace(hidden, encoded=encoded, levels=levels))


def _stored_copy(copy, layout, full: dict, data: dict, k: int, path) -> StoreWitness:
    """Copy k of a Ligero state as stored (rows, salts, masks; no code, no Merkle tree: ``_store`` rebuilds and
    checks them): version 3 rows assembled from the model's data block, the copy's tails and mask rows."""
    salts = data[f"c{k}.salts"].tobytes()
    salts = tuple(salts[i:i + SALT_SIZE] for i in range(0, len(salts), SALT_SIZE))
    rows = data.get(f"c{k}.rows")
    if rows is None:
        data_rows, cols = 1 << copy.log_rows, 1 << copy.log_cols
        tails, mask_rows = data.get(f"c{k}.tails"), data.get(f"c{k}.mask_rows")
        packed = _packed(layout, full, data, k)
        if tails is None or mask_rows is None or tails.shape != (data_rows, copy.width - cols) or \
                mask_rows.shape != (copy.mask_rows, copy.width) or packed.size > data_rows * cols:
            raise ModelError(f"prover state {path!r} does not belong to this model (copy {k})")
        block = np.zeros(data_rows * cols, dtype=np.uint64)
        block[:packed.size] = packed
        rows = np.empty((data_rows + copy.mask_rows, copy.width), dtype=np.uint64)
        rows[:data_rows, :cols] = block.reshape(data_rows, cols)
        rows[:data_rows, cols:] = tails
        rows[data_rows:] = mask_rows
    hidden = HidingWitness(copy, rows, None, salts, None, [True] * int(data[f"c{k}.masks_spent"]))
    return StoreWitness(layout, full, _masks(layout, data, k), hidden)


def _masks(layout, data: dict, k: int) -> dict:
    """Copy k's mask blocks by slot name, as stored."""
    return {slot.name: data[f"c{k}.mask.{slot.name}"] for slot in layout.slots}


def _tables_digest(layout, full: dict) -> bytes:
    """SHA-256 of the model's zero-padded tables in the layout's slot order (shape and bytes of each)."""
    digest = hashlib.sha256(b"hezk.prover-state.tables.v1")
    for slot in layout.slots:
        table = np.ascontiguousarray(full[slot.name], dtype=np.uint64)
        digest.update(f"{slot.name}:{table.size};".encode())
        digest.update(table.tobytes())
    return digest.digest()


def _active(pair):
    lo, hi = (int(v) for v in pair)
    return None if lo < 0 else (lo, hi)


def _packed(layout, full: dict, data: dict, k: int) -> np.ndarray:
    """The committed table of copy k: the slots (their boxes' pieces), then each slot's mask block, as
    :func:`commit_store` and a Basefold store plan pack them (:func:`~proofs.relations.pack_store`)."""
    return pack_store(layout, full, _masks(layout, data, k))
