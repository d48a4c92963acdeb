"""A hiding commitment's copies are reserved before use and never handed out twice.

Rule: a prover state file is a ledger. Every proof reserves its copy under the file's lock, writes the spent list
durably, and only then proves; a counter beside the state (PATH.spent) never goes down, so a copied or restored
state (fewer spent copies than the counter) is refused. In one process, reservations are serialised across
threads. (Two proofs on one copy reveal fresh columns of the same rows: three give every weight.)
"""
from __future__ import annotations

import shutil
import threading

import numpy as np
import pytest

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
    network = Network(model, zk=True, max_proofs=4)
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
    """A backup taken before a proof and restored after it lists copy 0 unused; its counter says 1 is spent: the
    state is refused (load and reservation). Positive control: the current state loads and proves."""
    model, x, _, _ = committed
    backup = tmp_path / "backup"
    shutil.copyfile(state, backup)
    Network(model, state=state).prove(x)
    current = Network(model, state=state)  # positive control
    assert current.proofs_left == 3
    shutil.copyfile(backup, state)
    with pytest.raises(ModelError, match="copied or restored"):
        Network(model, state=state)
    with pytest.raises(ModelError, match="copied or restored"):
        current.prove(x)  # its reservation re-reads the (restored) file


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


def test_the_counter_sits_beside_the_state_and_counts_the_spent_copies(state, committed):
    model, x, _, _ = committed
    Network(model, state=state).prove(x)
    text = open(prover_state.counter_path(state)).read()
    assert '"spent": 1' in text


def test_cli_prove_from_a_restored_state_is_a_usage_error(tmp_path, capsys):
    """Two `prove` runs around a restore of the state: the second is refused (exit 2), not a proof on copy 0."""
    save_model(tmp_path / "model.npz", _model())
    np.save(tmp_path / "x.npy", np.random.default_rng(1).uniform(-1, 1, (1, 6)))
    args = ["--model", tmp_path / "model.npz", "--commitment", tmp_path / "c.bin"]
    assert main(["commit", "--model", str(tmp_path / "model.npz"), "--out", str(tmp_path / "c.bin"),
                 "--max-proofs", "2"]) == 0
    shutil.copyfile(tmp_path / "c.bin.state", tmp_path / "backup")
    prove = ["prove", *map(str, args), "--input", str(tmp_path / "x.npy"), "--quiet", "--out"]
    assert main(prove + [str(tmp_path / "p1.bin")]) == 0
    shutil.copyfile(tmp_path / "backup", tmp_path / "c.bin.state")
    capsys.readouterr()
    assert main(prove + [str(tmp_path / "p2.bin")]) == 2
    assert "copied or restored" in capsys.readouterr().err and not (tmp_path / "p2.bin").exists()


def test_cli_help_says_never_copy_or_restore_the_state(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["prove", "--help"])
    assert "NEVER copy or restore" in " ".join(capsys.readouterr().out.split())


def test_two_graph_provers_of_one_state_file_get_different_copies(tmp_path):
    """The graph path reserves the same way: two HidingGraphNetworks loaded from one state file before either
    proves use different copies, both proofs verify; a restored state is refused."""
    onnx = pytest.importorskip("onnx")
    from hezk_model import read_onnx
    from proofs.graph_quantize import quantize_graph
    from proofs.layers.graph_zk import HidingGraphNetwork, verify_graph_zk
    from tests.model import onnx_models as M

    onnx.save(M.mlp((8, 6, 3), activation="relu"), str(tmp_path / "m.onnx"))
    graph = read_onnx(str(tmp_path / "m.onnx"))
    calibration = np.random.default_rng(0).normal(size=(16, *graph.input_shape))
    q = quantize_graph(graph, calibration)
    path = tmp_path / "g.state"
    HidingGraphNetwork(q, max_proofs=3).save_state(path)
    shutil.copyfile(path, tmp_path / "backup")
    first, second = HidingGraphNetwork(q, state=path), HidingGraphNetwork(q, state=path)
    x = calibration[:1]
    proofs = [first.prove(x), second.prove(x)]
    assert sorted(p.relations.copy for p in proofs) == [0, 1]
    for proof in proofs:
        assert np.array_equal(verify_graph_zk(first.commitment, x, proof), q.forward_int(q.quantize_input(x)))
    shutil.copyfile(tmp_path / "backup", path)
    with pytest.raises(ModelError, match="copied or restored"):
        HidingGraphNetwork(q, state=path)
