"""Wall time at 1 and 2 kernel threads (``hezk.set_threads``) and the ratio, for the operations whose kernels split
their independent work (limbs, rows, coefficient tiles, Merkle leaves, encoded columns; see hezk.threads).

Each case runs at 1, then 2 threads, interleaved ``--repeats`` times, and keeps the best of each (a shared machine
only ever adds time); the outputs at both counts are checked to be equal first. The load average is printed with
the table: with other work on the cores, a second thread may find no core free, and the ratio says little.

    python benchmarks/threads.py [--repeats 5] [--threads 2] [--n16] [--bootstrap] [--lenet]

Default cases: ct x ct + relin + rescale and one rotation at N14, a 64x64 BSGS matrix-vector product at N14, a
Basefold commitment + opening of a 2^20-entry table (the provers' encoding, leaf and Merkle hashing, round sums and
folds) and the inference proof of a ~1M-parameter MLP (784-1024-256-10, batch 64: sumcheck round sums and folds).
``--n16``: ct x ct and rotation at N16; ``--bootstrap``: one N16_BOOT bootstrap (keys: tens of GB); ``--lenet``:
LeNet-5 (x^2) encrypted inference and the LeNet-5 graph proof.
"""
import argparse
import os
import sys
import time

if __name__ == "__main__":
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import numpy as np  # noqa: E402

import hezk.threads as T  # noqa: E402
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
    """[label, seconds at 1 thread, at ``threads``, ratio, equal outputs]: best of ``repeats``, interleaved."""
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
    row = [label, 1e3 * best[1], 1e3 * best[threads], best[1] / best[threads],
           "yes" if outputs[1] == outputs[threads] else "NO"]
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
    x = calibration[:1]
    return [("LeNet-5 (x^2) encrypted inference", lambda: server.evaluate(one)),
            ("LeNet-5 proof", lambda: network.prove(x))]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--n16", action="store_true")
    parser.add_argument("--bootstrap", action="store_true")
    parser.add_argument("--lenet", action="store_true")
    parser.add_argument("--log-n", type=int, default=20, help="Basefold table size 2^log_n")
    args = parser.parse_args(argv)
    print(f"cores available: {T.available_cores()}, load average before: {os.getloadavg()}", flush=True)
    rows = []
    groups = [lambda: ckks_cases("N14", True), lambda: basefold_case(args.log_n), mlp_proof_case]
    if args.n16:
        groups.append(lambda: ckks_cases("N16", False))
    if args.bootstrap:
        groups.append(bootstrap_case)
    if args.lenet:
        groups.append(lenet_cases)
    for make in groups:
        for label, fn in make():
            rows.append(compare(label, fn, args.threads, args.repeats))
    print_table(f"best of {args.repeats} wall ms at 1 and {args.threads} threads (load average after: "
                f"{os.getloadavg()})", ["operation", "1 thread ms", f"{args.threads} threads ms", "speed-up",
                                        "same output"], rows)
    return 0 if all(r[-1] == "yes" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
