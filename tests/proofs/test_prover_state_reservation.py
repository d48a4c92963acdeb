"""A hiding commitment's copies are reserved before use and never handed out twice.

Rule: a prover state file has a journal of reserved copies beside it (PATH.spent). Every proof reserves its copy
under the file's lock by appending it to the journal (fsynced), and only then proves; the big state file is
rewritten only by an explicit save. The spent copies are the state's and the journal's together; a state whose
journal is missing, another state's, or short of the state's spent copies is refused (a copied or restored
state). In one process, reservations are serialised across threads, across processes by the lock.
(Two proofs on one copy reveal fresh columns of the same rows: three give every weight.)
"""
from __future__ import annotations

import multiprocessing
import os
import shutil
import threading
import zlib

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from proofs.batch import prove_batch
from proofs.cli import build_parser, main
from proofs.errors import ModelError, ProofError
from proofs.layers import network_zk, prover_state
from proofs.layers.network import Network, verify_network
from proofs.model import save_model
from proofs.quantize import forward_int, quantize_fixed_point, quantize_input


def _model():
    rng = np.random.default_rng(0)
    weights = [rng.normal(0, 0.4, (5, 6)), rng.normal(0, 0.4, (3, 5))]
    biases = [rng.normal(0, 0.1, 5), rng.normal(0, 0.1, 3)]
    return quantize_fixed_point(weights, biases, frac_bits=6)


@pytest.fixture(scope="module")
def committed():
    """(model, an input, the bytes of a fresh 4-copy prover state and its commitment)."""
    model = _model()
    x = quantize_input(model, np.random.default_rng(1).uniform(-1, 1, (1, 6)))
    network = Network(model, network_zk.default_params(), zk=True, max_proofs=4)
    return model, x, network.state_bytes(), network.commitment


@pytest.fixture
def state(tmp_path, committed):
    """A state file of the fresh commitment (every copy unused)."""
    model, _, blob, _ = committed
    path = tmp_path / "c.bin.state"
    Network(model, state=blob).save_state(path)
    return path


def test_two_provers_of_one_state_file_get_different_copies(state, committed):
    """Both provers load the state before either proves (the race of two `prove` runs): the second still gets a
    fresh copy, because it reserves in the file, not in its stale memory. Both proofs verify."""
    model, x, _, commitment = committed
    first, second = Network(model, state=state), Network(model, state=state)
    assert first.proofs_left == second.proofs_left == 4  # both loaded the same (stale) spent list
    proofs = [first.prove(x), second.prove(x)]
    assert sorted(p.relations.copy for p in proofs) == [0, 1]
    for proof in proofs:
        assert np.array_equal(verify_network(commitment, x, proof), forward_int(model, x))
    assert Network(model, state=state).proofs_left == 2


def test_concurrent_provers_in_threads_never_share_a_copy(state, committed):
    """Four provers of one state file, one per thread, reserving at once: four different copies."""
    model, _, _, _ = committed
    provers = [Network(model, state=state) for _ in range(4)]
    barrier, copies = threading.Barrier(4), []

    def reserve(network):
        barrier.wait()
        copies.append(network._weights_witness.take("test"))

    threads = [threading.Thread(target=reserve, args=(n,)) for n in provers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(copies) == [0, 1, 2, 3]
    with pytest.raises(ProofError, match="copies of this commitment are used"):
        Network(model, state=state).prove(committed[1])


def test_a_restored_state_is_refused(state, committed, tmp_path):
    """A state backed up before a proof: restored in place it rolls nothing back (its journal still reserves
    copy 0); restored where its journal is not (another folder, a fresh disk) it is refused. A journal restored
    from a backup older than the state's last save is refused (load, and the reservation of a loaded prover).
    Positive control: the current state loads and proves."""
    model, x, _, _ = committed
    backup = tmp_path / "backup"
    backup.mkdir()
    shutil.copy(state, backup)
    journal = open(prover_state.journal_path(state), "rb").read()
    Network(model, state=state).prove(x)
    current = Network(model, state=state)  # positive control
    assert current.proofs_left == 3
    shutil.copy(backup / state.name, state)
    assert Network(model, state=state).proofs_left == 3  # in place: the journal keeps copy 0 spent
    with pytest.raises(ModelError, match="missing.*copied or restored.*commit again"):
        Network(model, state=backup / state.name)
    current.save_state(state)  # the state now lists copy 0 spent
    with open(prover_state.journal_path(state), "wb") as handle:
        handle.write(journal)  # the journal as backed up before the proof
    with pytest.raises(ModelError, match="lists 1 spent copies.*copied or restored"):
        Network(model, state=state)
    with pytest.raises(ModelError, match="copied or restored"):
        current.prove(x)  # its reservation re-reads the (restored) journal


def test_deleting_the_journal_is_refused_not_a_rollback(state, committed):
    """Without its journal a state would list no spent copy: it is refused, by load and by the reservation of a
    prover loaded before, naming the path; a save then refuses too (it would un-spend). Positive control:
    with the journal, proving works."""
    model, x, _, _ = committed
    loaded = Network(model, state=state)
    assert loaded.prove(x).relations.copy == 0  # positive control
    os.unlink(prover_state.journal_path(state))
    with pytest.raises(ModelError, match=f"{state.name}.spent.*missing.*never be copied or restored"):
        Network(model, state=state)
    with pytest.raises(ProofError, match="missing"):
        loaded.prove(x)
    with pytest.raises(ModelError, match="missing"):
        loaded.save_state(state)


def test_a_journal_of_another_state_is_refused(committed, tmp_path):
    """Two state files of one commitment (two identities) and a state of another commitment: swapping in
    another's journal is refused. Positive control: each state with its own journal loads."""
    model, x, blob, _ = committed
    paths = [tmp_path / name for name in ("a.state", "b.state", "other.state")]
    for path in paths[:2]:
        Network(model, state=blob).save_state(path)
    Network(model, zk=True, max_proofs=4).save_state(paths[2])
    for path in paths[:2]:
        assert Network(model, state=path).proofs_left == 4  # positive control
    for source in paths[1:]:
        shutil.copy(prover_state.journal_path(source), prover_state.journal_path(paths[0]))
        with pytest.raises(ModelError, match="belongs to another state.*copied or restored"):
            Network(model, state=paths[0])


def test_a_torn_journal_line_is_dropped_a_corrupt_one_refused(state, committed):
    """A crash mid-append leaves a line without its newline: its fsync never returned, its copy was never used,
    so it is dropped (and cut off before the next reservation). A complete line with a wrong CRC is refused."""
    model, x, _, _ = committed
    journal = prover_state.journal_path(state)
    Network(model, state=state).prove(x)
    with open(journal, "ab") as handle:
        handle.write(b"1 ")
    assert Network(model, state=state).proofs_left == 3
    assert Network(model, state=state).prove(x).relations.copy == 1
    lines = open(journal, "rb").read().split(b"\n")
    assert lines[1:] == [b"0 %08x" % zlib.crc32(b"0"), b"1 %08x" % zlib.crc32(b"1"), b""]
    with open(journal, "ab") as handle:
        handle.write(b"2 00000000\n")
    with pytest.raises(ModelError, match="line 4 is not a reservation"):
        Network(model, state=state)


def test_a_version_1_state_is_bound_to_a_journal_when_loaded(committed, tmp_path):
    """A state without an identity (version 1, or state_bytes written to a file) is bound to a new journal when
    loaded: from then on deleting the journal is refused. Its old counter (PATH.spent as JSON) still refuses a
    restored state."""
    model, x, blob, commitment = committed
    path = tmp_path / "old.state"
    path.write_bytes(blob)
    assert Network(model, state=path).prove(x).relations.copy == 0
    assert Network(model, state=path).proofs_left == 3
    os.unlink(prover_state.journal_path(path))
    with pytest.raises(ModelError, match="missing"):
        Network(model, state=path)
    path.write_bytes(blob)
    digest = prover_state._digest(commitment.to_bytes())
    with open(prover_state.journal_path(path), "w") as handle:
        handle.write('{"commitment": "%s", "spent": 2}' % digest)
    with pytest.raises(ModelError, match="counter.*records 2.*copied or restored"):
        Network(model, state=path)


def _reserve_in_a_process(path, barrier, queue):
    model = _model()
    witness = Network(model, state=path)._weights_witness
    barrier.wait()
    queue.put(witness.take("child"))


def test_provers_in_two_processes_never_share_a_copy(state):
    """Two processes (no shared memory, no shared thread lock) load one state and reserve at once: the file
    lock and the journal give them different copies."""
    context = multiprocessing.get_context("fork")
    barrier, queue = context.Barrier(2), context.Queue()
    children = [context.Process(target=_reserve_in_a_process, args=(state, barrier, queue)) for _ in range(2)]
    for child in children:
        child.start()
    copies = sorted(queue.get(timeout=120) for _ in children)
    for child in children:
        child.join(timeout=60)
    assert copies == [0, 1]


def test_a_stale_prover_saving_never_unspends_a_copy(state, committed):
    """A prover loaded before another one proved saves its state: the copy the other spent stays spent."""
    model, x, _, _ = committed
    stale, other = Network(model, state=state), Network(model, state=state)
    assert other.prove(x).relations.copy == 0
    stale.save_state(state)
    assert Network(model, state=state).prove(x).relations.copy == 1


def test_the_copy_is_spent_on_file_before_the_proof_is_made(state, committed, monkeypatch):
    """A prover that dies after reserving (here: the proof store's commitment fails) wastes its copy: the file
    already lists it spent, so no later proof reuses it."""
    model, x, _, _ = committed

    def crash(*args, **kwargs):
        raise RuntimeError("killed mid-proof")

    network = Network(model, state=state)
    monkeypatch.setattr(network_zk, "commit_store", crash)
    with pytest.raises(RuntimeError, match="killed"):
        network.prove(x)
    monkeypatch.undo()
    assert Network(model, state=state).prove(x).relations.copy == 1


def test_a_reservation_is_all_or_nothing(committed):
    """Asking for more copies than are left (or a spent or repeated copy) spends nothing."""
    model, _, blob, _ = committed
    witness = Network(model, state=blob)._weights_witness
    assert witness.reserve("test", 3) == [0, 1, 2]
    for bad in ({"count": 2}, {"copies": [3, 3]}, {"copies": [0]}, {"copies": [True]}):
        with pytest.raises(ProofError):
            witness.reserve("test", **bad)
    assert witness.spent == [0, 1, 2] and witness.take("test") == 3


def test_batch_proving_reserves_its_copies_in_the_state_file(state, committed):
    """prove_batch of a network read from a file spends the batch's copies in the file first: a second,
    stale prover of that file proves with the copies left."""
    model, x, _, commitment = committed
    first, second = Network(model, state=state), Network(model, state=state)
    proofs = prove_batch(first, [x, x])
    assert sorted(p.relations.copy for p in proofs) == [0, 1]
    assert second.prove(x).relations.copy == 2
    assert np.array_equal(verify_network(commitment, x, proofs[1]), forward_int(model, x))


def test_a_proof_appends_to_the_journal_and_leaves_the_state_file_alone(state, committed):
    """The reservation writes one short line to PATH.spent (not the ~MB state file): the state's bytes are
    unchanged by a proof, and the journal lists the copy after its header (the commitment and the state's
    identity)."""
    model, x, _, commitment = committed
    before = state.read_bytes()
    Network(model, state=state).prove(x)
    assert state.read_bytes() == before
    header, line, end = open(prover_state.journal_path(state), "rb").read().split(b"\n")
    assert prover_state._digest(commitment.to_bytes()).encode() in header and line.startswith(b"0 ") and end == b""


def test_cli_prove_from_a_restored_state_is_a_usage_error(tmp_path, capsys):
    """A state backed up after commit and restored on a fresh disk (its journal not with it) after a proof: the
    second `prove` is refused (exit 2), not a proof on copy 0. Positive control: the first prove."""
    save_model(tmp_path / "model.npz", _model())
    np.save(tmp_path / "x.npy", np.random.default_rng(1).uniform(-1, 1, (1, 6)))
    assert main(["commit", "--model", str(tmp_path / "model.npz"), "--out", str(tmp_path / "c.bin"),
                 "--max-proofs", "2"]) == 0
    restored = tmp_path / "restored"
    restored.mkdir()
    for name in ("model.npz", "x.npy", "c.bin", "c.bin.state"):
        shutil.copy(tmp_path / name, restored)

    def prove(folder, out):
        return main(["prove", "--model", str(folder / "model.npz"), "--commitment", str(folder / "c.bin"),
                     "--input", str(folder / "x.npy"), "--quiet", "--out", str(folder / out)])

    assert prove(tmp_path, "p1.bin") == 0
    capsys.readouterr()
    assert prove(restored, "p2.bin") == 2
    assert "copied or restored" in capsys.readouterr().err and not (restored / "p2.bin").exists()


def test_cli_help_says_never_copy_or_restore_the_state(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["prove", "--help"])
    assert "NEVER copy or restore" in " ".join(capsys.readouterr().out.split())


def test_two_graph_provers_of_one_state_file_get_different_copies(tmp_path):
    """The graph path reserves the same way: two HidingGraphNetworks loaded from one state file before either
    proves use different copies, both proofs verify; a restored state is refused."""
    onnx = pytest.importorskip("onnx")
    from hezk.model import read_onnx
    from proofs.graph_quantize import quantize_graph
    from proofs.layers.graph_zk import HidingGraphNetwork, verify_graph_zk
    from tests.model import onnx_models as M

    onnx.save(M.mlp((8, 6, 3), activation="relu"), str(tmp_path / "m.onnx"))
    graph = read_onnx(str(tmp_path / "m.onnx"))
    calibration = np.random.default_rng(0).normal(size=(16, *graph.input_shape))
    q = quantize_graph(graph, calibration)
    path = tmp_path / "g.state"
    HidingGraphNetwork(q, max_proofs=3).save_state(path)
    first, second = HidingGraphNetwork(q, state=path), HidingGraphNetwork(q, state=path)
    x = calibration[:1]
    proofs = [first.prove(x), second.prove(x)]
    assert sorted(p.relations.copy for p in proofs) == [0, 1]
    for proof in proofs:
        assert np.array_equal(verify_graph_zk(first.commitment, x, proof), q.forward_int(q.quantize_input(x)))
    os.unlink(prover_state.journal_path(path))  # as if restored without its journal
    with pytest.raises(ModelError, match="copied or restored"):
        HidingGraphNetwork(q, state=path)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64), st.booleans())
def test_a_journal_parses_or_is_refused_never_crashes(tail, with_header):
    """Any bytes (after a valid header or alone) read as a journal or are a ModelError naming the journal: never
    another exception, never a copy outside [0, copies)."""
    blob = (prover_state._header("d" * 64, "s" * 32) if with_header else b"") + tail
    try:
        journal = prover_state._parse_journal(blob, "J.spent", 4)
    except ModelError as error:
        assert "J.spent" in str(error)
        return
    assert all(0 <= k < 4 for k in journal.spent) and journal.length <= journal.size == len(blob)
