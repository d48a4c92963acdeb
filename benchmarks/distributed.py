"""Batch encrypted inference and batch proving on dask.distributed (issue 15): throughput with 1 and 2 local
workers (one thread each), memory per worker, and the scheduling overhead per task with 8 workers.

    python benchmarks/distributed.py [--quick] [--lenet]

- Inference: the digits MLP (64 -> 32 -> x^2 -> 10, trained as in examples/digits_models.py) at its automatically
  chosen parameters; one task per ciphertext of ``plan.batch`` samples; the model and public context are
  scattered once per cluster and a warm-up round lets every worker build its Server (encode the weights), so
  the measured round is the steady state. ``--lenet`` adds LeNet-5 (1x28x28, square activations, random
  weights; off by default: measured in one process, 84 s of key generation, 1.6 GiB of rotation keys, 77 s for
  the first ciphertext (encoding the weights) and 9.8 s per ciphertext of 2 samples after, 9.6 GiB peak resident
  for client and server together, so 2 workers need about 20 GiB).
- Proving: the 784 -> 128 -> ReLU -> 10 MLP (random weights), zero knowledge, one input per proof; the secret
  prover state is sent to each worker once (warm-up: each worker rebuilds its prover).
- Memory per worker: resident set size of each worker process after the runs.
- Scheduling overhead: 8 single-thread worker processes on loopback run tasks that sleep for a fixed time equal
  to the measured inference task time (sleeping, so 8 workers on a 2-core machine do not contend for the
  cores); maps of 2 and 5 (8 without --quick) rounds of 8 tasks give the overhead per task (the slope, less the
  sleep, as a share of the task time) apart from the fixed latency of a map (submitting, first and last reply).

Wall times (``time.perf_counter``) of the coordinator: on a 2-core machine shared with other processes the
1 -> 2 worker speedup is bounded by the free cores, so read it with the load average printed beside it.
"""
import argparse
import os
import pathlib
import sys
import time

try:
    import _repo  # noqa: F401  (run as a script: one BLAS/numba thread, and this folder off the import path, since
except ImportError:  # this file is named like the ``distributed`` package it drives)
    from benchmarks import _repo  # noqa: F401  (imported as benchmarks.<name>)

import numpy as np  # noqa: E402

sys.path.append(str(pathlib.Path(__file__).resolve().parent.parent / "examples"))

from benchmarks._timing import print_table  # noqa: E402

import hezk.tasks  # noqa: E402


def _load() -> str:
    return "/".join(f"{v:.1f}" for v in os.getloadavg())


def _sleep_task(seconds, _shared=None):
    time.sleep(seconds)
    return seconds


def _timed(job, share):
    """``function(item, share)`` for ``job = (function, item)``, with the task's CPU seconds and worker pid."""
    function, item = job
    start = time.process_time()
    result = function(item, share)
    return result, time.process_time() - start, os.getpid()


def _timed_map(runner, function, items, share):
    """(results, CPU seconds per task, workers used) of one map."""
    out = runner.map(_timed, [(function, item) for item in items], share)
    return [r for r, _, _ in out], sum(c for _, c, _ in out) / len(out), len({p for _, _, p in out})


def _rss(dask_client) -> list[float]:
    """Resident set size of each worker process, MiB."""
    import psutil
    return sorted(v / 2**20 for v in dask_client.run(lambda: psutil.Process().memory_info().rss).values())


def _cluster(workers: int):
    return hezk.tasks.connect(f"local:{workers}")


def _warm(runner, function, items, share):
    """Run ``function(item, share)`` once on every worker (pinned), so each builds its server or prover."""
    addresses = sorted(runner.client.scheduler_info()["workers"])
    futures = [runner.client.submit(function, item, share, workers=[address], pure=False, allow_other_workers=False)
               for address, item in zip(addresses, items)]
    runner.client.gather(futures)


def bench_inference(name, model, x, workers_list, rounds: int = 2):
    """Rows (name, workers, tasks, samples/s, speedup, s/task, worker RSS MiB); and the task time."""
    from tensor_ops.distributed import ServerShare, batch_requests, evaluate_request
    from tensor_ops.inference import Client

    start = time.perf_counter()
    client = Client(model=model)
    keygen = time.perf_counter() - start
    requests = batch_requests(client, x)
    reference = None
    rows, base, task_time = [], None, None
    for workers in workers_list:
        with _cluster(workers) as runner:
            share = runner.share(ServerShare(model, client.public_context(), client.plan.input_shape))
            _warm(runner, evaluate_request, requests[:1] * workers, share)    # every worker encodes the weights
            walls = []
            for _ in range(rounds):                                          # the best of ``rounds`` maps
                start = time.perf_counter()
                replies, cpu, used = _timed_map(runner, evaluate_request, requests, share)
                walls.append(time.perf_counter() - start)
            wall = min(walls)
            rss = _rss(runner.client)
        reference = replies if reference is None else reference
        assert replies == reference, "replies differ between runs"
        throughput = len(x) / wall
        base = base or throughput
        task_time = task_time or wall / len(requests)
        rows.append((name, f"{workers} ({used} used)", str(len(requests)), throughput, throughput / base,
                     wall * workers / len(requests), cpu, "/".join(f"{r:.0f}" for r in rss)))
    y = np.concatenate([client.decrypt(r) for r in reference])
    error = float(np.abs(y - model.forward(x)).max())
    print(f"{name}: keygen {keygen:.1f} s, {client.plan.batch} samples per ciphertext, public context "
          f"{client.key_bytes / 2**20:.1f} MiB, max |decrypted - plain| = {error:.2e}")
    return rows, task_time


def bench_proving(proofs_per_run, workers_list, rounds: int = 2):
    from proofs.batch import ProverShare, prove_task, verify_batch
    from proofs.layers.network import Network, read_proof
    from proofs.layers.spec import Linear, ReLU

    rng = np.random.default_rng(0)
    layers = [Linear(rng.normal(0, .05, (128, 784)), rng.normal(0, .1, 128)), ReLU(),
              Linear(rng.normal(0, .1, (10, 128)), rng.normal(0, .1, 10))]
    copies = sum(w + rounds * proofs_per_run for w in workers_list)
    start = time.perf_counter()
    network = Network(layers, max_proofs=copies)
    commit = time.perf_counter() - start
    state = network.state_bytes()
    x = rng.uniform(0, 1, (proofs_per_run, 784))
    rows, base, spent = [], None, 0
    for workers in workers_list:
        with _cluster(workers) as runner:
            share = runner.share(ProverShare(network.model, state))
            warm = [(x[:1], spent + i) for i in range(workers)]
            spent += workers
            _warm(runner, prove_task, warm, share)                           # every worker rebuilds its prover
            walls = []
            for _ in range(rounds):                                          # the best of ``rounds`` maps
                jobs = [(x[i:i + 1], spent + i) for i in range(proofs_per_run)]
                spent += proofs_per_run
                start = time.perf_counter()
                blobs, cpu, used = _timed_map(runner, prove_task, jobs, share)
                walls.append(time.perf_counter() - start)
            wall = min(walls)
            rss = _rss(runner.client)
        verify_batch(network.commitment, x, [read_proof(b) for b in blobs])
        throughput = proofs_per_run / wall
        base = base or throughput
        rows.append(("784-128-10 MLP (zk)", f"{workers} ({used} used)", str(proofs_per_run), throughput,
                     throughput / base, wall * workers / proofs_per_run, cpu, "/".join(f"{r:.0f}" for r in rss)))
    print(f"proving: commitment of {copies} hiding copies in {commit:.1f} s, prover state {len(state) / 2**20:.1f} MiB "
          "(sent to each worker once); every proof verified")
    return rows


def bench_engine_scaling(task_seconds, workers_list, tasks: int = 8):
    """Rows: wall time of ``tasks`` sleeping tasks of ``task_seconds`` on 1 and 2 workers (the distribution layer
    alone: no core contention)."""
    rows, base = [], None
    for workers in workers_list:
        with _cluster(workers) as runner:
            runner.map(_sleep_task, [0.0] * 2 * workers)
            start = time.perf_counter()
            runner.map(_sleep_task, [task_seconds] * tasks)
            wall = time.perf_counter() - start
        base = base or wall
        rows.append(("sleeping tasks", str(workers), str(tasks), tasks / wall, base / wall, wall * workers / tasks, 0.0,
                     "-"))
    return rows


def bench_overhead(task_seconds, workers: int = 8, rounds=(2, 6)):
    """Rows (workers, tasks, task ms, overhead ms per task, %, fixed ms per map, RSS): the wall time of a map of
    ``rounds[i] x workers`` sleeping tasks is fixed + rounds x (task + overhead); two round counts give both."""
    walls = []
    with _cluster(workers) as runner:
        runner.map(_sleep_task, [0.0] * 4 * workers)                  # warm-up
        for count in rounds:
            best = None
            for _ in range(2):                                               # the best of two maps
                start = time.perf_counter()
                runner.map(_sleep_task, [task_seconds] * (count * workers))
                best = min(best or 1e9, time.perf_counter() - start)
            walls.append(best)
        rss = _rss(runner.client)
    per_round = (walls[1] - walls[0]) / (rounds[1] - rounds[0])
    per_task = per_round - task_seconds
    fixed = walls[0] - rounds[0] * per_round
    return [(str(workers), f"{rounds[0] * workers} + {rounds[1] * workers}", task_seconds * 1e3, per_task * 1e3,
             100 * per_task / task_seconds, fixed * 1e3, f"{min(rss):.0f}-{max(rss):.0f}")]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (one minute or two)")
    parser.add_argument("--lenet", action="store_true", help="also LeNet-5 (about 1.6 GiB of keys per process)")
    args = parser.parse_args(argv)
    if not hezk.tasks.distributed_available():
        print("dask.distributed is not installed (pip install 'hezk[distributed]'): nothing to measure")
        return 0
    from digits_models import digits_split, train_mlp

    workers_list = (1, 2)
    x_train, y_train, x_test, _ = digits_split()
    mlp = train_mlp(x_train, y_train, steps=100 if args.quick else 300)
    tasks = 4 if args.quick else 8
    batch = mlp.plan().batch
    x = np.resize(x_test, (tasks * batch, x_test.shape[1]))
    print(f"load average before: {_load()} (2 cores here: the 1 -> 2 worker speedup is bounded by the free cores)")
    rows, task_time = bench_inference("digits MLP", mlp, x, workers_list)
    if args.lenet:
        import onnx
        import tempfile
        from tests.model.onnx_models import lenet
        from tensor_ops.nn import Sequential
        with tempfile.TemporaryDirectory() as folder:
            onnx.save(lenet("square"), f"{folder}/lenet.onnx")
            model = Sequential.load(f"{folder}/lenet.onnx")
        images = np.random.default_rng(1).uniform(0, 1, (2 * model.plan().batch, 1, 28, 28))   # two tasks
        rows += bench_inference("LeNet-5", model, images, workers_list, rounds=1)[0]
    else:
        print("LeNet-5: skipped (pass --lenet: it runs, with 1.6 GiB of rotation keys and several GiB of encoded "
              "weights per worker)")
    rows += bench_engine_scaling(task_time, workers_list)
    print_table("Batch encrypted inference (one task per ciphertext; warm workers; sleeping tasks of the same "
                "duration: the engine alone)",
                ["model", "workers", "tasks", "samples/s", "speedup", "wall s per task", "CPU s per task",
                 "worker RSS MiB"], rows)
    proving = bench_proving(4 if args.quick else 8, workers_list)
    print_table("Batch proving (one proof per task; warm workers)",
                ["model", "workers", "proofs", "proofs/s", "speedup", "wall s per proof", "CPU s per proof",
                 "worker RSS MiB"], proving)
    overhead = bench_overhead(task_time, rounds=(2, 5) if args.quick else (2, 8))
    print_table("Scheduling overhead per task (8 single-thread workers on loopback, sleeping tasks)",
                ["workers", "tasks", "task ms", "overhead ms", "overhead %", "fixed ms per map", "worker RSS MiB"],
                overhead)
    print(f"\nload average after: {_load()}; targets: speedup >= 1.8 from 1 to 2 workers, overhead <= 5% of the "
          f"task time")
    return 0


if __name__ == "__main__":
    sys.exit(main())
