"""Wall time at 1 and 2 kernel threads (``hezk.set_threads``) and the ratio, for the operations whose kernels split
their independent work (limbs, rows, coefficient tiles, Merkle leaves, encoded columns; see hezk.threads).

Each case runs at 1, then 2 threads, interleaved ``--repeats`` times, and keeps the best of each (a shared machine
only ever adds time); the outputs at both counts are checked to be equal first. The load average is printed with
the table: with other work on the cores, a second thread may find no core free, and the ratio says little. So one
more run of each case is measured on one thread by ``hezk.threads.CriticalPath`` (thread CPU time, whatever the
load): the serial part's share of it and the speed-up ``--threads`` idle cores would give (its split calls' longest
pieces plus the serial part; memory bandwidth shared by the cores is not in it), and the share of kernel time
(page faults of fresh arrays and the returns of freed ones, which two threads of one process may not halve;
``--reuse-freed-memory`` keeps freed pages for the next arrays).

    python benchmarks/threads.py [--repeats 5] [--threads 2] [--n16] [--bootstrap] [--lenet] [--openfhe PYTHON|none]
                                 [--reuse-freed-memory]

Default cases: ct x ct + relin + rescale and one rotation at N14, a 64x64 BSGS matrix-vector product at N14, a
Basefold commitment + opening of a 2^20-entry table (the provers' encoding, leaf and Merkle hashing, round sums and
folds) and the inference proof of a ~1M-parameter MLP (784-1024-256-10, batch 64: sumcheck round sums and folds).
``--n16``: ct x ct and rotation at N16; ``--bootstrap``: one N16_BOOT bootstrap (keys: tens of GB); ``--lenet``:
LeNet-5 (x^2) encrypted inference and the LeNet-5 graph proof.

OpenFHE at the same thread counts in the same run (``--openfhe``: the 3.10 venv of ../shared/PEERS.md, default
``benchmarks.bootstrap.OPENFHE_PYTHON``; ``none`` skips it): after each group of hezk's CKKS cases, and once hezk's
keys are freed, one worker process per thread count, started with OMP_NUM_THREADS=n (OpenFHE fixes its count when
it starts; ``benchmarks/peers/openfhe_ops.py``: ct x ct + relin + rescale and one rotation at the preset's N, levels
and scale; ``openfhe_bootstrap.py``: the bootstrap of benchmarks/bootstrap.py), best of ``--repeats``; a second table
gives hezk's time over OpenFHE's at each count.

Measured 2026-12-06, 2 cores, load 9 falling to 5 (other sessions: the wall ratios say nothing; the model columns
do), ``--n16 --bootstrap --repeats 2``: serial % / model speed-up at 2 threads: N14 ct x ct 46 / 1.33 (its
element-wise kernels, 14 limbs of 2^14, are below the piece size that pays), rotation 51 / 1.28, 64x64 BSGS 49 /
1.28, Basefold 2^20 7.6 / 1.83, 1.07M-parameter MLP proof 9.0 / 1.78, N16 ct x ct 1.0 / 1.93, rotation 0.9 /
1.93, N16_BOOT bootstrap 1.8 / 1.85 (3.7 / 1.82 before the scattered-basis NTT split, the column products and the
giant steps' permuted sums were split; the model leaves out the idle caller's help, which shortens the hoisted
babies' 3 + 4 split); outputs at 1 and 2 threads equal.  OpenFHE in that run (wall, loaded) is void:
its '1 thread' figures ran on all cores (the count was switched inside one process, which OpenFHE ignores).

One N16_BOOT bootstrap under ``CriticalPath(2)`` (load 2), best of 2: 15.4 s CPU, serial 1.9%, kernel time 7.7%
(1.2 s of page faults), model 1.84x; with ``--reuse-freed-memory``: 13.8 s CPU, serial 1.7%, kernel time 0.1%,
model 1.91x.  The page faults are the largest part that the split may not halve on two threads of one process.

Measured 2026-12-06 on the idle machine (load 1.0 -> 1.4), ``--n16 --bootstrap --lenet --repeats 2
--reuse-freed-memory``, best of 2 wall ms at 1 -> 2 threads, outputs equal: N14 ct x ct 15.45 -> 13.78 (1.12x),
rotation 1.12x, 64x64 BSGS 1.13x; Basefold 2^20 281.7 -> 163.6 (1.72x); 1.07M-parameter MLP proof 1050 -> 604
(1.74x); N16 ct x ct 366.7 -> 203.3 (1.80x), rotation 1.83x; N16_BOOT bootstrap 13.62 -> 8.13 s (1.67x); LeNet-5
encrypted 2165 -> 1265 (1.71x); LeNet-5 proof 106 -> 86 (1.24x: Python overhead of many small sumchecks).  OpenFHE
1.6.1 in the same run, one process per count (hezk / OpenFHE at 1 and 2 threads): N14 ct x ct 0.67 / 0.95, rotation
0.80 / 1.13; N16 ct x ct 0.51 / 0.53, rotation 0.55 / 0.57; bootstrap 13.6 / 21.2 s = 0.64 and 8.13 / 13.90 s =
0.59 (OpenFHE's own speed-up 1.53x).  With glibc's default allocator (``--openfhe none``, load 0.25 -> 1.3): Basefold
1.81x, bootstrap 14.40 -> 8.76 s (1.64x), and the MLP proof 1161 -> 1258 ms (0.92x: both threads faulting fresh pages
at once contend in the kernel; hezk's programs therefore keep freed memory, ``hezk.memory.for_a_program``).

Measured 2026-12-06 after the bootstrap's fused sums (``keyswitch.muladd_pairs``, ``Evaluator.mul_int_sum``, the
fused tensor and the scratch temporaries of ``mul_add_rescale`` and ModDown; ``benchmarks/bootstrap.py``: -5 to -7%
one-thread CPU), ``--n16 --bootstrap --repeats 2 --reuse-freed-memory --openfhe none`` at load 1.9 rising to 4.4
(other sessions: no second core free, the wall ratios are void, 0.74-1.11): N16_BOOT bootstrap serial 1.72% (1.8
before), model speed-up 1.90x (1.85x; 1.91x with freed memory kept), outputs at 1 and 2 threads equal; N16 ct x ct
serial 1.09% / 1.94x, rotation 1.13% / 1.92x; Basefold 6.3% / 1.81x, MLP proof 8.6% / 1.81x.

Measured 2026-12-06 on the idle machine after those changes and the provers' faster encoding (load 0.4 -> 1.5),
``--n16 --bootstrap --repeats 2 --reuse-freed-memory``, outputs equal: N16_BOOT bootstrap 13.75 -> 7.78 s (1.77x;
goal 1.7 met), OpenFHE 1.6.1 in the same run 22.98 -> 14.69 s (1.56x): hezk / OpenFHE 0.60 at one thread, 0.53 at
two; N16 ct x ct 0.41 / 0.58, rotation 0.65 / 0.66.  Best of 3 (``--n16 --repeats 3 --openfhe none``, load 0.5):
Basefold 2^20 277.5 -> 160.1 (1.73x), 1.07M-parameter MLP proof 1095 -> 655 (1.67x), N16 ct x ct 368.3 -> 215.7
(1.71x), rotation 1.70x, N14 1.02-1.21x (that run's best of 2 with OpenFHE gave Basefold 1.35x, MLP 1.46x, ct x ct
1.51x at the same one-thread times: the two-thread figures vary between runs of this length).

Measured 2026-12-06 after the eq tables' doublings and the Ligero Merkle transpose were split (they were serial),
``--lenet --repeats 3 --openfhe none --reuse-freed-memory``, load 1.2 -> 1.4, outputs equal: Basefold 2^20 274.7 ->
149.6 ms (1.84x), 1.07M-parameter MLP proof 1069.9 -> 628.5 (1.70x; serial 8.7%, model 1.81x), LeNet-5 (x^2)
encrypted 2289 -> 1449 (1.58x; model 1.86x), LeNet-5 proof one sample 93.9 -> 87.3 (1.08x: serial 55%, its ~85
small sumchecks' Python), batch 64 3077 -> 2165 (1.42x; serial 10.7% (20% before), model 1.78x; separate runs of
the batch-64 proof: 1.55-1.68x, up to 2.1x), N14 1.08-1.15x.

Measured 2026-12-07 on an AMD EPYC 2-core machine (load 0.4 -> 1.3), ``--n16 --bootstrap --lenet --repeats 2
--reuse-freed-memory``, best of 2 wall ms at 1 -> 2 threads, outputs equal:
- N16_BOOT bootstrap 8256 -> 4650 (1.78x); N16 ct x ct 205.7 -> 118.0 (1.74x); rotation 201.8 -> 116.7 (1.73x);
- Basefold 2^20 192.7 -> 108.1 (1.78x); 1.07M-parameter MLP proof 764 -> 435 (1.76x);
- LeNet-5 (x^2) encrypted 1580 -> 952 (1.66x; serial 2.1%, model 1.92x); LeNet-5 proof, batch 64, 1987 -> 1223
  (1.62x; serial 11.3%); one sample 68.7 -> 62.6 (1.10x; serial 57%: its small sumchecks' Python);
- N14 1.21-1.27x (serial 45-51%).
- After the bits sumcheck's weight table went to the threaded kernel, LeNet-5 batch 64, best of 4, interleaved with
  the code before: 1937 -> 1868 ms at one thread, 1208 -> 1181 ms at two. The ratio stays at 1.58-1.60x. The
  serial part is still about 11%: the bits rounds' Python, the packed tables' allocation, the transcript.
OpenFHE 1.6.1 in the same run (hezk / OpenFHE at 1 and 2 threads): bootstrap 8.26 / 14.76 s = 0.56 and 4.65 / 9.21 s
= 0.50 (OpenFHE's own speed-up 1.60x); N16 ct x ct 0.45 / 0.38, rotation 0.48 / 0.55; N14 ct x ct 0.49 / 0.68,
rotation 0.59 / 0.83.
"""
import argparse
import gc
import json
import os
import sys
import time

if __name__ == "__main__":
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import numpy as np  # noqa: E402

import hezk.threads as T  # noqa: E402
from hezk.memory import release_freed_memory  # noqa: E402
from benchmarks._timing import print_table  # noqa: E402


def _flat(value):
    """Comparable bytes of an operation's result (ciphertexts, proofs, arrays, tuples of them)."""
    if hasattr(value, "parts"):
        return b"".join(np.ascontiguousarray(p.data).tobytes() for p in value.parts)
    if hasattr(value, "to_bytes"):
        return value.to_bytes()
    if isinstance(value, dict):
        return b"".join(_flat(v) for _, v in sorted(value.items()))
    if isinstance(value, (tuple, list)):
        return b"".join(_flat(v) for v in value)
    return np.ascontiguousarray(value).tobytes()


def compare(label, fn, threads, repeats):
    """[label, ms at 1 thread, at ``threads``, ratio, serial %, system %, model speed-up, equal outputs]: best of
    ``repeats``, interleaved; then one run measured on one thread by ``hezk.threads.CriticalPath`` (thread CPU
    time: the serial part's share, the kernel time's, and the speed-up ``threads`` idle cores would give, whatever
    the machine's load)."""
    outputs = {}
    for n in (1, threads):       # warm-up at each count (compilation, tables), and the outputs compared
        T.set_threads(n)
        outputs[n] = _flat(fn())
    best = {1: float("inf"), threads: float("inf")}
    for _ in range(repeats):
        for n in (1, threads):
            T.set_threads(n)
            start = time.perf_counter()
            fn()
            best[n] = min(best[n], time.perf_counter() - start)
    with T.CriticalPath(threads) as path:      # the load-independent figure: see hezk.threads.CriticalPath
        fn()
    row = [label, 1e3 * best[1], 1e3 * best[threads], best[1] / best[threads], 100 * path.serial_fraction,
           100 * path.system_fraction, path.predicted_speedup, "yes" if outputs[1] == outputs[threads] else "NO"]
    print("  ".join(str(c) if not isinstance(c, float) else f"{c:.2f}" for c in row), flush=True)
    return row


def ckks_cases(preset, with_matvec):
    from crypto import CKKSContext, CKKSParameters

    params = CKKSParameters.preset(preset)
    steps = sorted(set(range(1, 8)) | {8 * g for g in range(1, 8)}) if with_matvec else [1]
    ctx = CKKSContext.keygen(params, rotations=steps, seed=1, backend="fourstep")
    ev, rng = ctx.evaluator, np.random.default_rng(0)
    a, b = ctx.encrypt(rng.uniform(-1, 1, params.slots)), ctx.encrypt(rng.uniform(-1, 1, params.slots))
    cases = [(f"ct x ct + relin + rescale {preset}", lambda: ev.mul_rescale(a, b)),
             (f"rotation {preset}", lambda: ev.rotate(a, 1))]
    if with_matvec:
        from crypto.ckks.jax_device import bsgs_diagonals, tiled
        from crypto.ckks.linear import bsgs_sum
        d = 64
        ct = ctx.encrypt(tiled(rng.uniform(-1, 1, d), params.slots))
        groups = [(m, [(i, ev.encode(v, ct.level, params.scale)) for i, v in pairs])
                  for m, pairs in bsgs_diagonals(rng.uniform(-1, 1, (d, d)), params.slots)]
        babies = sorted({i for _, pairs in groups for i, _ in pairs})
        cases.append((f"{d}x{d} matvec (BSGS) {preset}",
                      lambda: ev.rescale(bsgs_sum(ev, ev.rotate_hoisted(ct, babies), groups))))
    return cases


def basefold_case(log_n=20):
    from proofs import basefold as B
    from proofs import field as F
    from proofs.transcript import Transcript

    table, point = F.random_elements(1 << log_n, seed=1), F.ext_random((log_n,), seed=2)

    def prove():
        commitment, witness = B.commit(table)
        value, proof = B.open_commitment(witness, point, Transcript("bench"))
        return commitment, proof

    return [(f"Basefold commit + open 2^{log_n}", prove)]


def mlp_proof_case():
    """The ~1M-parameter MLP's inference proof (784-1024-256-10, batch 64, public weights, Basefold): the sumcheck
    provers' round sums and folds and the Basefold opening at the size of the issue's proofs."""
    from benchmarks.proofs import CASES, float_mlp
    from proofs.basefold import BasefoldParams
    from proofs.layers.network import Network
    from proofs.quantize import quantize_fixed_point, quantize_input

    _, sizes, batch, frac_bits = CASES["c"]
    model = quantize_fixed_point(*float_mlp(sizes), frac_bits=frac_bits)
    x = quantize_input(model, np.random.default_rng(1).uniform(-1, 1, (batch, sizes[0])))
    network = Network(model, zk=False, params=BasefoldParams())
    return [(f"{model.num_parameters / 1e6:.2f}M-parameter MLP proof, batch {batch}", lambda: network.prove(x))]


def bootstrap_case():
    from crypto import CKKSContext, CKKSParameters
    from crypto.ckks.bootstrap import BootstrapConfig

    params = CKKSParameters.preset("N16_BOOT")
    ctx = CKKSContext.keygen(params, seed=1, bootstrap=BootstrapConfig())
    ct = ctx.encrypt(np.random.default_rng(1).uniform(-1, 1, ctx.evaluator.bootstrap_plan().slots), level=0)
    return [("bootstrap N16_BOOT", lambda: ctx.evaluator.bootstrap(ct))]


def lenet_cases():
    import pathlib
    import tempfile

    import onnx

    from hezk.model import read_onnx
    from proofs.graph_quantize import quantize_graph
    from proofs.layers.graph import GraphNetwork
    from tensor_ops import Client, Server
    from tensor_ops.nn import Sequential
    from tests.model.onnx_models import lenet

    with tempfile.TemporaryDirectory() as folder:
        path = pathlib.Path(folder) / "lenet.onnx"
        onnx.save(lenet("square"), path)
        model = Sequential.load(path)
        onnx.save(lenet("relu"), pathlib.Path(folder) / "relu.onnx")
        graph = read_onnx(pathlib.Path(folder) / "relu.onnx")
    client = Client(plan=model.plan())
    server = Server(model, client.public_context())
    one = client.encrypt(np.random.default_rng(0).uniform(-1, 1, (1, 1, 28, 28)))
    calibration = np.random.default_rng(0).normal(size=(64, *graph.input_shape))
    network = GraphNetwork(quantize_graph(graph, calibration))
    one_sample, batch = calibration[:1], calibration[:LENET_PROOF_BATCH]
    return [("LeNet-5 (x^2) encrypted inference", lambda: server.evaluate(one)),
            ("LeNet-5 proof, one sample", lambda: network.prove(one_sample)),
            (f"LeNet-5 proof, batch {LENET_PROOF_BATCH}", lambda: network.prove(batch))]


#: the LeNet-5 proof's batch beside its one-sample latency (the MLP case's batch: a prover's throughput; one
#: sample's ~85 small sumchecks are mostly serial Python)
LENET_PROOF_BATCH = 64


#: the OpenFHE settings that match each hezk group: ops worker (log_n, levels, scale bits, first dnum tried) keyed by
#: preset, and the bootstrap worker's (benchmarks/bootstrap.py's defaults)
OPENFHE_OPS = {"N14": (14, 6, 50, 3), "N16": (16, 29, 50, 8)}
#: OpenFHE's labels for hezk's: the row each of its timings is compared against
OPENFHE_LABELS = {"mul_rescale": "ct x ct + relin + rescale {}", "rotate": "rotation {}"}


def openfhe_worker(python, script, args, omp_threads=None, timeout=3600) -> dict:
    """The peer worker ``benchmarks/peers/<script>``'s JSON line (``benchmarks.bootstrap.run_worker``)."""
    from benchmarks.bootstrap import run_worker
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "peers", script)
    return run_worker(python, path, args, omp_threads=omp_threads, timeout=timeout)


def openfhe_counts(python, script, args, counts, repeats) -> dict:
    """One worker process per thread count (OMP_NUM_THREADS=n), their figures merged as one worker's JSON.

    OpenFHE fixes its thread count when it starts: switching the OpenMP count inside one process left its times
    unchanged (measured: ct x ct N14 405 ms at '1' and 401 ms at '2' threads with OMP_NUM_THREADS=2, 36 ms
    in a process started with OMP_NUM_THREADS=1)."""
    merged = {}
    for n in counts:
        result = openfhe_worker(python, script, list(args) + ["--threads", n, "--repeats", repeats], omp_threads=n)
        if "skipped" in result:
            return result
        if not merged:
            merged = result
        elif "by_threads" in result:            # the bootstrap worker
            merged["by_threads"].update(result["by_threads"])
        else:
            for op, times in result["best"].items():
                merged["best"][op].update(times)
    return merged


def openfhe_rows(result: dict, threads: int) -> dict:
    """{hezk's label: (OpenFHE seconds at 1 thread, at ``threads``)} from a worker's JSON (ops or bootstrap)."""
    if "skipped" in result:
        return {}
    if "by_threads" in result:       # the bootstrap worker
        by = result["by_threads"]
        return {"bootstrap N16_BOOT": (by["1"]["best"], by[str(threads)]["best"])}
    preset = {14: "N14", 16: "N16"}.get(result["log_n"], f"N{result['log_n']}")
    return {OPENFHE_LABELS[op].format(preset): (v["1"], v[str(threads)]) for op, v in result["best"].items()}


def ratio_rows(rows, peer: dict, threads: int) -> list:
    """[label, hezk 1t ms, OpenFHE 1t ms, hezk/OpenFHE, hezk nt ms, OpenFHE nt ms, hezk/OpenFHE, OpenFHE speed-up]
    for each hezk row OpenFHE timed."""
    out = []
    for label, one, many, *_ in rows:
        if label in peer:
            o1, on = (1e3 * t for t in peer[label])
            out.append([label, one, o1, one / o1, many, on, many / on, o1 / on])
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--n16", action="store_true")
    parser.add_argument("--bootstrap", action="store_true")
    parser.add_argument("--lenet", action="store_true")
    parser.add_argument("--log-n", type=int, default=20, help="Basefold table size 2^log_n")
    parser.add_argument("--openfhe", default=None, metavar="PYTHON",
                        help="the 3.10 interpreter with openfhe 1.6.1 (default: benchmarks.bootstrap.OPENFHE_PYTHON); "
                             "'none' skips OpenFHE")
    parser.add_argument("--reuse-freed-memory", action="store_true",
                        help="hezk.memory.reuse_freed_memory() first (freed arrays' pages kept for the next ones: "
                             "fewer page faults, at both thread counts)")
    args = parser.parse_args(argv)
    if args.reuse_freed_memory:
        import hezk.memory
        print(f"reuse_freed_memory applied: {hezk.memory.reuse_freed_memory()}", flush=True)
    from benchmarks.bootstrap import openfhe_interpreter
    python, skipped = openfhe_interpreter(args.openfhe)
    if skipped:
        print(f"OpenFHE {skipped}", flush=True)
    print(f"cores available: {T.available_cores()}, load average before: {os.getloadavg()}", flush=True)
    rows, peer = [], {}
    ops = lambda preset: ("openfhe_ops.py", ["--log-n", OPENFHE_OPS[preset][0], "--depth", OPENFHE_OPS[preset][1],
                                             "--scale-bits", OPENFHE_OPS[preset][2], "--dnum", OPENFHE_OPS[preset][3]])
    groups = [(lambda: ckks_cases("N14", True), ops("N14")), (lambda: basefold_case(args.log_n), None),
              (mlp_proof_case, None)]
    if args.n16:
        groups.append((lambda: ckks_cases("N16", False), ops("N16")))
    if args.bootstrap:
        groups.append((bootstrap_case, ("openfhe_bootstrap.py", [])))
    if args.lenet:
        groups.append((lenet_cases, None))
    for make, worker in groups:
        cases = make()
        while cases:
            label, fn = cases.pop(0)
            rows.append(compare(label, fn, args.threads, args.repeats))
            del fn                        # hezk's keys freed before the peer's (the bootstrap: ~10 GB each)
        gc.collect()
        release_freed_memory()            # and given back to the system (malloc keeps freed heap pages)
        if worker is not None and python is not None:
            result = openfhe_counts(python, worker[0], worker[1], (1, args.threads), args.repeats)
            print(f"OpenFHE {worker[0]}: {json.dumps(result)}", flush=True)
            peer.update(openfhe_rows(result, args.threads))
    print_table(f"best of {args.repeats} wall ms at 1 and {args.threads} threads (load average after: "
                f"{os.getloadavg()}; serial % and model speed-up: hezk.threads.CriticalPath, thread CPU time)",
                ["operation", "1 thread ms", f"{args.threads} threads ms", "speed-up", "serial %", "system %",
                 "model speed-up", "same output"], rows)
    if peer:
        n = args.threads
        print_table(f"hezk against OpenFHE 1.6.1 at the same thread count, same run (best of {args.repeats} wall ms; "
                    f"ratio = hezk / OpenFHE, below 1: hezk faster)",
                    ["operation", "hezk 1t", "OpenFHE 1t", "ratio 1t", f"hezk {n}t", f"OpenFHE {n}t", f"ratio {n}t",
                     "OpenFHE speed-up"], ratio_rows(rows, peer, n))
    return 0 if all(r[-1] == "yes" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
