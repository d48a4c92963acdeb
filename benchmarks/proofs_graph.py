"""Graph-proof benchmark (issue 13): CNNs from ONNX proved by :mod:`proofs.layers.graph`, single thread.

    python benchmarks/proofs_graph.py [--quick] [--no-ezkl]

Cases: LeNet-5 (1x28x28: conv 5x5 -> 6, avgpool, conv 5x5 -> 16, avgpool, 120, 84, 10) at batch 1 and 64, and at
batch 1 with x^2 activations (the import issue's default LeNet-5);
the CIFAR CNN (3x32x32: conv 3x3 -> 16 pad 1, relu, avgpool 2, conv 3x3 -> 32 pad 1, relu, global average
pool, 10); a CNN of about 266k parameters on 3x32x32 (three conv 3x3 pad 1 -> 32, 64, 64 each with relu and
avgpool 2, then 1024 -> 192 -> 64 -> 10), the size of DeepProve's published CNN. Random weights (seeded),
Relu activations unless said, scales calibrated on 64 seeded normal inputs. Modes: PUBLIC WEIGHTS (the non-hiding graph
protocol) and hiding (the default: weights private, :mod:`proofs.layers.graph_zk`). Reported: commit (weights commitment), prove,
verify (medians of CPU time and of wall clock: on a shared machine the CPU time is the figure that does not count other
processes; the 1-minute load average is printed beside), proof bytes, peak traced memory of one proof (tracemalloc),
soundness bits, and the mean / max error of the proven output against the float model on the calibration data.
The verifier loads the commitment once (bytes -> object; the hiding copies' agreement proof is checked at the first
verification of that object, before the timed ones) and verifies each proof from its bytes.
EZKL on LeNet-5 in the same run when ``ezkl`` imports (the ``bench`` extra).
"""
import argparse
import os
import statistics
import tempfile
import time
import tracemalloc

try:
    import _repo  # noqa: F401  (run as a script: threads and import path first)
except ImportError:
    from benchmarks import _repo  # noqa: F401

import numpy as np  # noqa: E402

from benchmarks._timing import awaited, print_table  # noqa: E402

TARGETS = {"LeNet-5, batch 1": (0.5, 0.05), "CNN 266k, batch 1": (1.2, 0.2)}


def cnn_264k(seed=5):
    """Three conv 3x3 pad 1 (32, 64, 64) + relu + avgpool 2, then 1024 -> 192 -> 64 -> 10 (266,122 parameters)."""
    from tests.model.onnx_models import Builder

    b = Builder((3, 32, 32), seed)
    x, c = "x", 3
    for i, width in enumerate((32, 64, 64)):
        x = b.node("Relu", [b.conv(x, c, width, 3, name=f"conv{i + 1}", pads=[1, 1, 1, 1])])
        x = b.node("AveragePool", [x], f"pool{i + 1}", kernel_shape=[2, 2], strides=[2, 2])
        c = width
    x = b.node("Flatten", [x], "flatten")
    x = b.node("Relu", [b.gemm(x, 1024, 192, "fc1")])
    x = b.node("Relu", [b.gemm(x, 192, 64, "fc2")])
    b.gemm(x, 64, 10, "fc3")
    return b.model()


def _models():
    from tests.model.onnx_models import cifar, lenet

    return {"LeNet-5": lambda: lenet("relu"), "LeNet-5 (x^2)": lambda: lenet("square"),
            "CIFAR CNN": lambda: cifar("relu"), "CNN 266k": cnn_264k}


def _median(fn, repeats):
    """(median wall seconds, median CPU seconds, last result)."""
    walls, cpus, result = [], [], None
    for _ in range(repeats):
        start, cpu = time.perf_counter(), time.process_time()
        result = fn()
        cpus.append(time.process_time() - cpu)
        walls.append(time.perf_counter() - start)
    return statistics.median(walls), statistics.median(cpus), result


def bench_graph(name, make, batch, repeats, workdir, zk=True):
    import onnx

    from hezk.model import read_onnx
    from proofs.graph_quantize import quantize_graph
    from proofs.layers.graph import GraphNetwork, verify_graph
    from proofs.layers.graph_zk import HidingGraphNetwork, verify_graph_zk

    path = os.path.join(workdir, f"{name.replace(' ', '_')}.onnx")
    onnx.save(make(), path)
    graph = read_onnx(path)
    rng = np.random.default_rng(0)
    calibration = rng.normal(size=(64, *graph.input_shape))
    q = quantize_graph(graph, calibration)
    x = calibration[:batch]
    GraphNetwork(q).prove(x)  # warm-up (numba compilation)
    make_network = (lambda: HidingGraphNetwork(q, max_proofs=repeats + 2)) if zk else (lambda: GraphNetwork(q))
    check = verify_graph_zk if zk else verify_graph
    commit_s, commit_cpu, network = _median(make_network, 1)
    prove_s, prove_cpu, proof = _median(lambda: network.prove(x), repeats)
    data = proof.to_bytes()
    commitment = type(network.commitment).from_bytes(network.commitment.to_bytes())  # loaded once
    check(commitment, x, data)  # the first verification checks the copies' agreement once
    verify_s, verify_cpu, y = _median(lambda: check(commitment, x, data), max(repeats, 3))
    assert np.array_equal(y, q.forward_int(q.quantize_input(x)))
    tracemalloc.start()
    network.prove(x)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    report = q.error_report(graph, calibration)
    return {"case": f"{name}, batch {batch}", "mode": "hiding" if zk else "public", "params": q.num_parameters,
            "commit": commit_s, "prove": prove_s, "verify": verify_s, "prove_cpu": prove_cpu, "verify_cpu": verify_cpu,
            "load": os.getloadavg()[0], "proof_kb": len(data) / 1024, "peak_mb": peak / 2 ** 20,
            "bits": network.commitment.soundness_bits(batch), "mean_error": report["mean_error"],
            "max_error": report["max_error"], "magnitude": report["output_magnitude"]}


def _ezkl_ready(model):
    """The same network as EZKL 23's importer needs it: batch fixed at 1, Conv and AveragePool with explicit
    strides, pads (and dilations), shapes inferred (it refuses a symbolic batch and omitted defaults)."""
    import onnx
    from onnx import helper

    model.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 1
    for node in model.graph.node:
        if node.op_type in ("Conv", "AveragePool"):
            present = {a.name for a in node.attribute}
            defaults = {"strides": [1, 1], "pads": [0, 0, 0, 0]}
            if node.op_type == "Conv":
                defaults["dilations"] = [1, 1]
            node.attribute.extend(helper.make_attribute(k, v) for k, v in defaults.items() if k not in present)
    return onnx.shape_inference.infer_shapes(model)


def bench_ezkl_lenet(workdir):
    """EZKL on LeNet-5 (batch 1): setup (settings, calibration, compile, SRS, keys), prove, verify; None if absent."""
    try:
        import ezkl  # noqa: F401
    except ImportError:
        return None
    import json

    import onnx

    paths = {k: os.path.join(workdir, v) for k, v in dict(model="lenet.onnx", data="input.json",
                                                         settings="settings.json", compiled="lenet.ezkl",
                                                         srs="kzg.srs", vk="vk.key", pk="pk.key",
                                                         witness="witness.json", proof="proof.json").items()}
    onnx.save(_ezkl_ready(_models()["LeNet-5"]()), paths["model"])
    x = np.random.default_rng(0).normal(size=(1, 1, 28, 28))
    with open(paths["data"], "w") as handle:
        json.dump({"input_data": [x.reshape(-1).tolist()]}, handle)
    start = time.perf_counter()
    awaited(ezkl.gen_settings(paths["model"], paths["settings"]))
    awaited(ezkl.calibrate_settings(paths["data"], paths["model"], paths["settings"], "resources"))
    awaited(ezkl.compile_circuit(paths["model"], paths["compiled"], paths["settings"]))
    with open(paths["settings"]) as handle:
        logrows = json.load(handle)["run_args"]["logrows"]
    awaited(ezkl.gen_srs(paths["srs"], logrows))
    awaited(ezkl.gen_witness(paths["data"], paths["compiled"], paths["witness"]))
    awaited(ezkl.setup(paths["compiled"], paths["vk"], paths["pk"], paths["srs"]))
    setup = time.perf_counter() - start
    prove_start = time.perf_counter()
    awaited(ezkl.prove(paths["witness"], paths["compiled"], paths["pk"], paths["proof"], paths["srs"]))
    prove = time.perf_counter() - prove_start
    verify_start = time.perf_counter()
    ok = awaited(ezkl.verify(paths["proof"], paths["settings"], paths["vk"], paths["srs"]))
    return {"setup": setup, "prove": prove, "verify": time.perf_counter() - verify_start, "ok": ok,
            "logrows": logrows, "proof_kb": os.path.getsize(paths["proof"]) / 1024,
            "pk_mb": os.path.getsize(paths["pk"]) / 2 ** 20, "vk_kb": os.path.getsize(paths["vk"]) / 1024}


def run(quick=False, ezkl=True):
    models = _models()
    cases = [("LeNet-5", 1, 5), ("LeNet-5 (x^2)", 1, 5), ("LeNet-5", 64, 1), ("CIFAR CNN", 1, 3), ("CNN 266k", 1, 3)]
    if quick:
        cases = cases[:1]
    results = []
    with tempfile.TemporaryDirectory() as workdir:
        for name, batch, repeats in cases:
            for zk in (True, False):
                results.append(bench_graph(name, models[name], batch, repeats, workdir, zk))
        peer = bench_ezkl_lenet(workdir) if ezkl else None
    print_table("hezk graph proofs (medians, one thread; hiding: weights private, one copy per proof, commit makes "
                "repeats + 2 copies; public: proofs REVEAL the weights; commit = one-time, no setup; cpu = process "
                "CPU time, wall = wall clock, load = 1-minute load average after the case)",
                ["case", "mode", "params", "commit s", "prove cpu s", "prove wall s", "verify cpu ms", "verify wall ms",
                 "load", "proof KB", "peak MB", "soundness bits", "mean err", "max err", "|y| max"],
                [[r["case"], r["mode"], f"{r['params']:,}", f"{r['commit']:.3f}", f"{r['prove_cpu']:.3f}",
                  f"{r['prove']:.3f}", f"{r['verify_cpu'] * 1e3:.1f}", f"{r['verify'] * 1e3:.1f}", f"{r['load']:.1f}",
                  f"{r['proof_kb']:.1f}", f"{r['peak_mb']:.1f}", f"{r['bits']:.1f}",
                  f"{r['mean_error']:.2g}", f"{r['max_error']:.2g}", f"{r['magnitude']:.2g}"] for r in results])
    for r in results:
        if r["case"] in TARGETS:
            prove, verify = TARGETS[r["case"]]
            print(f"target {r['case']} ({r['mode']}): prove <= {prove} s: {r['prove_cpu']:.3f} s cpu "
                  f"({r['prove']:.3f} s wall); verify <= {verify * 1e3:.0f} ms: {r['verify_cpu'] * 1e3:.1f} ms cpu "
                  f"({r['verify'] * 1e3:.1f} ms wall), load {r['load']:.1f}")
    if not ezkl:
        return results
    if peer is None:
        print("EZKL: not installed (pip install -e '.[bench]'); skipped")
        return results
    lenet = results[0]
    print(f"EZKL on LeNet-5 (logrows {peer['logrows']}, verified {peer['ok']}): setup {peer['setup']:.1f} s, prove "
          f"{peer['prove']:.2f} s, verify {peer['verify'] * 1e3:.1f} ms, proof {peer['proof_kb']:.1f} KB, proving key "
          f"{peer['pk_mb']:.1f} MB, verifying key {peer['vk_kb']:.1f} KB; prover ratio EZKL / hezk "
          f"{peer['prove'] / lenet['prove']:.0f}x")
    return results


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="LeNet-5 batch 1 only")
    parser.add_argument("--no-ezkl", action="store_true", help="skip EZKL even if it imports")
    args = parser.parse_args()
    run(args.quick, not args.no_ezkl)


if __name__ == "__main__":
    main()
