"""Batch encrypted inference and batch proving as tasks (issue 15): on a loopback dask.distributed cluster the
outputs equal the single-process run's (the same reply bytes, so the same decrypted values; proofs that
verify), each result arrives once and in input order, a killed worker's tasks are rerun elsewhere, and without
``distributed`` installed the same calls run in this process."""
import os
import signal
import sys
import warnings

import numpy as np
import pytest

import hezk.tasks
from proofs.batch import prove_batch, verify_batch, verify_each
from proofs.errors import ModelError, ProofRejected
from proofs.layers.network import Network
from proofs.layers.spec import Linear as ProofLinear, ReLU
from tensor_ops.distributed import batch_infer, batch_requests, evaluate_batches
from tensor_ops.inference import Client
from tensor_ops.nn import Linear, Sequential, Square

distributed = pytest.importorskip("distributed")


@pytest.fixture(scope="module")
def model():
    rng = np.random.default_rng(0)
    return Sequential([Linear(rng.normal(0, .3, (8, 16)), rng.normal(0, .1, 8)), Square(),
                       Linear(rng.normal(0, .3, (3, 8)), rng.normal(0, .1, 3))], input_shape=(16,))


@pytest.fixture(scope="module")
def client(model):
    return Client("TOY", model=model, seed=11)


@pytest.fixture(scope="module")
def inputs():
    return np.random.default_rng(1).uniform(-1, 1, (7, 16))


@pytest.fixture(scope="module")
def requests(client, inputs):
    return batch_requests(client, inputs, batch=2)                       # 4 tasks: 2, 2, 2 and 1 samples


@pytest.fixture(scope="module")
def single_process(model, client, requests):
    return evaluate_batches(model, client.public_context(), requests)


@pytest.fixture(scope="module")
def proof_layers():
    rng = np.random.default_rng(2)
    return [ProofLinear(rng.normal(0, .3, (8, 16)), rng.normal(0, .1, 8)), ReLU(),
            ProofLinear(rng.normal(0, .3, (4, 8)), rng.normal(0, .1, 4))]


@pytest.fixture(scope="module")
def threads_cluster():
    """Two in-process workers, one thread each (fast: no process start)."""
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=":0") \
            as cluster, distributed.Client(cluster) as dask_client:
        yield dask_client


def test_single_process_batches_match_the_model(model, client, inputs, requests, single_process):
    assert len(requests) == 4
    y = np.concatenate([client.decrypt(reply) for reply in single_process])
    np.testing.assert_allclose(y, model.forward(inputs), atol=1e-6)


def test_batch_inference_on_dask_equals_single_process(model, client, inputs, requests, single_process,
                                                       threads_cluster):
    seen = []
    replies = evaluate_batches(model, client.public_context(), requests, dask=threads_cluster,
                               progress=lambda done, total, label: seen.append((done, total)))
    assert replies == single_process                                     # same bytes, in input order
    assert seen == [(i, 4) for i in range(1, 5)]                         # one report per task
    y = batch_infer(model, client, inputs, batch=3, dask=threads_cluster)
    np.testing.assert_allclose(y, model.forward(inputs), atol=1e-6)


def test_batch_proving_on_dask(proof_layers, threads_cluster):
    network = Network(proof_layers, max_proofs=4)
    x = np.random.default_rng(3).uniform(-1, 1, (3, 16))
    proofs = prove_batch(network, x, dask=threads_cluster)
    assert sorted(p.relations.copy for p in proofs) == [0, 1, 2] and network.proofs_left == 1
    verdict = verify_batch(network.commitment, x, proofs, dask=threads_cluster)
    assert verdict and verdict.kind == "MLP inference batch" and verdict.output.shape[0] == 3
    for i, part in enumerate(verdict.parts):
        np.testing.assert_array_equal(part.output, network.verify(x[i:i + 1], proofs[i]).output)
    with pytest.raises(ProofRejected, match=r"proofs \[0\] rejected"):
        verify_batch(network.commitment, x[[1, 1, 2]], proofs, dask=threads_cluster)
    with pytest.raises(ModelError, match="2 unused copies"):
        prove_batch(network, x[:2], dask=threads_cluster)               # one copy left: refused before work
    assert network.proofs_left == 1


def test_plain_batch_proving_in_process(proof_layers):
    network = Network(proof_layers, zk=False)
    x = np.random.default_rng(4).uniform(-1, 1, (4, 16))
    proofs = prove_batch(network, x, per_proof=2)
    assert [p.to_bytes() for p in proofs] == [network.prove(x[:2]).to_bytes(), network.prove(x[2:]).to_bytes()]
    assert len(verify_batch(network.commitment, x, proofs, per_proof=2).parts) == 2


def test_without_distributed_the_same_tasks_run_in_process(monkeypatch, model, client, requests, single_process):
    monkeypatch.setitem(sys.modules, "distributed", None)                # import distributed -> ImportError
    assert not hezk.tasks.distributed_available()
    with pytest.warns(RuntimeWarning, match="not installed"):
        replies = evaluate_batches(model, client.public_context(), requests, dask="local:2")
    assert replies == single_process


def test_dask_option_is_checked():
    for bad in ("local:0", "local:x", "http://host:1", "2"):
        with pytest.raises(ModelError, match="local:K"):
            prove_batch(Network([ProofLinear(np.eye(8), np.zeros(8))], zk=False), np.zeros((1, 8)), dask=bad)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert hezk.tasks.connect(None).client is None


@pytest.mark.slow
def test_local_workers_run_without_the_statistical_profiler():
    """hezk's local:K worker processes have Dask's profiler off even where the caller's config turns it on (it samples
    sys._current_frames() every 10 ms; on CPython 3.11 a collection inside that call deadlocked a test run)."""
    import dask

    with dask.config.set({"distributed.worker.profile.enabled": True}):
        runner = hezk.tasks.connect("local:1")
    with runner:
        replies = runner.client.run(lambda dask_worker: ("profile" in dask_worker.periodic_callbacks,
                                                         dask.config.get("distributed.worker.profile.enabled")))
    assert list(replies.values()) == [(False, False)]


def _fail_on_two(item, shared):
    if item == 2:
        raise ArithmeticError(f"task {item} fails")
    return item * shared


def test_runner_keeps_order_and_raises_a_failing_task(threads_cluster):
    runner = hezk.tasks.connect(threads_cluster)
    assert runner.workers == 2
    assert runner.map(_fail_on_two, [5, 4, 3, 1, 0], runner.share(10)) == [50, 40, 30, 10, 0]
    with pytest.raises(ArithmeticError, match="task 2 fails"):
        runner.map(_fail_on_two, [0, 1, 2, 3], runner.share(1))
    with pytest.raises(ModelError, match="distributed.Client"):
        prove_batch(Network([ProofLinear(np.eye(8), np.zeros(8))], zk=False), np.zeros((1, 8)), dask=42)


@pytest.mark.slow
def test_killed_worker_tasks_rerun_elsewhere(model, client, requests, single_process):
    """Two worker processes (one thread each); when the first reply arrives, one worker is killed (SIGKILL) with
    tasks still queued on it: they are rerun elsewhere, every reply arrives once and equals the single-process
    run's bytes."""
    many = requests * 3                                                  # 12 tasks
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") \
            as cluster, distributed.Client(cluster) as dask_client:
        pids = dask_client.run(os.getpid)
        killed, reports = [], []

        def progress(done, total, label):
            reports.append(done)
            if not killed:
                victim = max(pids.values())
                os.kill(victim, signal.SIGKILL)
                killed.append(victim)

        replies = evaluate_batches(model, client.public_context(), many, dask=dask_client, progress=progress)
    assert killed and reports == list(range(1, 13))
    assert replies == single_process * 3


# -- command lines ----------------------------------------------------------------------------------------------
def test_tensor_ops_infer_on_dask(tmp_path, model, threads_cluster, capsys):
    from tensor_ops.cli import main
    model.save(tmp_path / "m.npz")
    x = np.random.default_rng(5).uniform(-1, 1, (5, 16))
    np.save(tmp_path / "x.npy", x)
    address = threads_cluster.scheduler.address
    assert main(["infer", "--model", str(tmp_path / "m.npz"), "--input", str(tmp_path / "x.npy"), "--out",
                 str(tmp_path / "y.npy"), "--dask", address, "--batch", "2", "--no-progress"]) == 0
    assert "3 requests" in capsys.readouterr().out
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), model.forward(x), atol=1e-3)
    assert main(["infer", "--model", str(tmp_path / "m.npz"), "--input", str(tmp_path / "x.npy"), "--out",
                 str(tmp_path / "y.npy"), "--dask", "local:0"]) == 2
    assert "local:K" in capsys.readouterr().err


def test_proofs_prove_batch_without_distributed(tmp_path, monkeypatch, capsys):
    from proofs.cli import main
    rng = np.random.default_rng(6)
    np.savez(tmp_path / "m.npz", w0=rng.normal(0, .3, (8, 16)), b0=rng.normal(0, .1, 8),
             w1=rng.normal(0, .3, (4, 8)), b1=rng.normal(0, .1, 4), activation="relu")
    x = rng.uniform(-1, 1, (3, 16))
    np.save(tmp_path / "x.npy", x)
    folder = tmp_path / "inputs"
    folder.mkdir()
    for i in range(2):
        np.save(folder / f"x{i}.npy", x[i])
    args = ["--model", str(tmp_path / "m.npz"), "--commitment", str(tmp_path / "c.bin"), "--quiet"]
    assert main(["commit", "--model", str(tmp_path / "m.npz"), "--out", str(tmp_path / "c.bin"),
                 "--max-proofs", "5"]) == 0
    monkeypatch.setitem(sys.modules, "distributed", None)
    with pytest.warns(RuntimeWarning, match="not installed"):
        assert main(["prove", *args, "--inputs", str(tmp_path / "x.npy"), "--out", str(tmp_path / "p"),
                     "--dask", "local:2"]) == 0
    assert main(["prove", *args, "--inputs", str(folder), "--out", str(tmp_path / "q")]) == 0
    assert "0 proofs left" in capsys.readouterr().out
    assert main(["prove", *args, "--inputs", str(folder), "--out", str(tmp_path / "r")]) == 2   # no copy left
    assert "unused copies" in capsys.readouterr().err
    for i in range(3):
        np.save(tmp_path / "xi.npy", x[i])
        for out in ("p", "q")[: 1 + (i < 2)]:
            assert main(["verify", "--commitment", str(tmp_path / "c.bin"), "--input", str(tmp_path / "xi.npy"),
                         "--proof", str(tmp_path / out / f"proof_{i:05d}.bin")]) == 0


def test_proofs_verify_batch_cli(tmp_path, threads_cluster, capsys):
    """``verify --inputs --proofs``: a line per proof, exit 0 only when all verify, in process and as tasks on a
    cluster; a tampered proof and swapped inputs give exit 1 naming the proof; usage errors exit 2."""
    import shutil
    from proofs.cli import main
    rng = np.random.default_rng(7)
    np.savez(tmp_path / "m.npz", w0=rng.normal(0, .3, (8, 16)), b0=rng.normal(0, .1, 8),
             w1=rng.normal(0, .3, (4, 8)), b1=rng.normal(0, .1, 4), activation="relu")
    x = rng.uniform(-1, 1, (3, 16))
    np.save(tmp_path / "x.npy", x)
    c = str(tmp_path / "c.bin")
    assert main(["commit", "--model", str(tmp_path / "m.npz"), "--out", c, "--max-proofs", "3"]) == 0
    assert main(["prove", "--model", str(tmp_path / "m.npz"), "--commitment", c, "--quiet", "--inputs",
                 str(tmp_path / "x.npy"), "--out", str(tmp_path / "p")]) == 0
    capsys.readouterr()
    verify = ["verify", "--commitment", c, "--inputs", str(tmp_path / "x.npy"), "--quiet"]
    names = [f"proof_{i:05d}.bin" for i in range(3)]

    assert main([*verify, "--proofs", str(tmp_path / "p"), "--outputs", str(tmp_path / "y")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [f"{name}: accept" for name in names] + ["accept"]
    np.save(tmp_path / "x1.npy", x[1])
    assert main(["verify", "--commitment", c, "--input", str(tmp_path / "x1.npy"), "--proof",
                 str(tmp_path / "p" / names[1]), "--output", str(tmp_path / "y1.npy")]) == 0
    np.testing.assert_array_equal(np.load(tmp_path / "y" / "output_00001.npy"), np.load(tmp_path / "y1.npy"))
    capsys.readouterr()

    address = threads_cluster.scheduler.address
    assert main([*verify, "--proofs", str(tmp_path / "p"), "--dask", address]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "accept"

    shutil.copytree(tmp_path / "p", tmp_path / "t")
    blob = bytearray((tmp_path / "t" / names[1]).read_bytes())
    blob[len(blob) // 2] ^= 1
    (tmp_path / "t" / names[1]).write_bytes(bytes(blob))
    assert main([*verify, "--proofs", str(tmp_path / "t"), "--dask", address]) == 1
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    assert lines[0] == f"{names[0]}: accept" and lines[1].startswith(f"{names[1]}: reject")
    assert lines[2:] == [f"{names[2]}: accept", "reject"]
    assert f"1 of 3 proofs rejected: {names[1]}" in captured.err

    np.save(tmp_path / "swapped.npy", x[[0, 2, 1]])
    assert main(["verify", "--commitment", c, "--inputs", str(tmp_path / "swapped.npy"), "--proofs",
                 str(tmp_path / "p"), "--quiet"]) == 1
    assert f"2 of 3 proofs rejected: {names[1]}, {names[2]}" in capsys.readouterr().err
    np.save(tmp_path / "two.npy", x[:2])
    assert main(["verify", "--commitment", c, "--inputs", str(tmp_path / "two.npy"), "--proofs",
                 str(tmp_path / "p"), "--quiet"]) == 1
    assert "3 proofs in" in capsys.readouterr().err

    for bad in (["--proofs", str(tmp_path / "p"), "--dask", "local:0"], ["--proofs", str(tmp_path / "none")],
                ["--proofs", str(tmp_path / "p"), "--per-proof", "0"]):
        assert main([*verify, *bad]) == 2, bad
        assert "error:" in capsys.readouterr().err
    assert main(["verify", "--commitment", c, "--input", str(tmp_path / "x1.npy"), "--proof",
                 str(tmp_path / "p" / names[1]), "--dask", address]) == 2


def test_verify_each_rejects_malformed_proofs_and_inputs(proof_layers):
    """A batch verifier raises only ProofRejected: a proof that is neither bytes nor a proof, or malformed inputs."""
    network = Network(proof_layers, zk=False)
    x = np.random.default_rng(1).uniform(-1, 1, (2, 16))
    proofs = prove_batch(network, x)
    with pytest.raises(ProofRejected, match="proof 1: a NoneType"):
        verify_each(network.commitment, x, [proofs[0], None])
    with pytest.raises(ProofRejected, match="input"):
        verify_each(network.commitment, np.zeros((2, 3, 4)), proofs)
