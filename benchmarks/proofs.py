"""Proof benchmark: prover time, verifier time and proof bytes of hezk's sumcheck proofs of quantized MLPs.

    python benchmarks/proofs.py [--quick] [--no-ezkl] [--no-training]

Cases: (a) a 16 -> 16 -> 4 ReLU MLP, batch 1; (b) 784 -> 128 -> 10, batch 64; (c) 784 -> 1024 -> 256 -> 10
(about 1.07M parameters), batch 64 (skipped with --quick). Weights are uniform in +-1/sqrt(fan_in), inputs
uniform in [-1, 1], fixed point with R fractional bits (R = 8, 8, 6). Each case runs in both modes: "hiding"
(the default: zero knowledge, the weights stay private; its commitment holds one hiding copy per proof the run
makes: repeats + 2) and "public weights" (``zk=False``: proofs reveal the weights). "commit" is the model owner's one-time
weight commitment (hash-based, no trusted setup); "prove" starts from the committed model and an input batch;
"verify" is a later verification (the commitment's copies are checked once, at the first one). Soundness is
per attempt: grinding 2^k Fiat-Shamir hashes succeeds w.p. about 2^(k - bits).
Times are medians of wall-clock and of this process's CPU time (the machine is shared: CPU time does not
count the time other processes hold the cores).

Peer: EZKL (the ``bench`` extra, with ``onnx``; skipped when it does not import) on case (a) in the same run:
the same float weights as an ONNX graph, settings calibrated for resources, a local test SRS, setup, prove,
verify. EZKL keeps the parameters private, so it is compared with hezk's hiding mode. EZKL's setup needs the
SRS and produces a proving key; hezk has no setup.

Then the training-step benchmark (:mod:`benchmarks.proofs_training`: one SGD step of 784 -> 128 -> 10 and of an
8-layer ~1M-parameter MLP at batch 64, zero knowledge against plain, aggregated against layer by layer, an
inference proof with private weights and input), unless ``--no-training``.
"""
import argparse
import json
import os
import pathlib
import statistics
import tempfile
import time

try:
    import _repo  # noqa: F401  (run as a script: threads and import path first)
except ImportError:
    from benchmarks import _repo  # noqa: F401  (imported as benchmarks.<name>)

import numpy as np  # noqa: E402

from benchmarks._timing import awaited, print_table  # noqa: E402

from proofs.basefold import BasefoldParams  # noqa: E402
from proofs.layers import network_zk  # noqa: E402
from proofs.layers.network import Network, verify_network  # noqa: E402
from proofs.quantize import quantize_fixed_point, quantize_input  # noqa: E402

HIDING_BASEFOLD_CASES = "a"  #: (b), (c): 16-32x slot tables of 10^5-10^6 weights per copy take GBs and minutes here
CASES = {
    "a": ("(a) 16-16-4, batch 1", (16, 16, 4), 1, 8),
    "b": ("(b) 784-128-10, batch 64", (784, 128, 10), 64, 8),
    "c": ("(c) 784-1024-256-10, batch 64", (784, 1024, 256, 10), 64, 6),
}


def float_mlp(sizes, seed=0):
    rng = np.random.default_rng(seed)
    weights = [rng.uniform(-1, 1, (sizes[i + 1], sizes[i])) / np.sqrt(sizes[i]) for i in range(len(sizes) - 1)]
    biases = [rng.uniform(-0.1, 0.1, sizes[i + 1]) for i in range(len(sizes) - 1)]
    return weights, biases


def timed(fn, repeats):
    """(median wall seconds, median CPU seconds, last result)."""
    walls, cpus = [], []
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        result = fn()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return statistics.median(walls), statistics.median(cpus), result


def bench_hezk(key, repeats, zk=True, params=None):
    name, sizes, batch, frac_bits = CASES[key]
    weights, biases = float_mlp(sizes)
    model = quantize_fixed_point(weights, biases, frac_bits=frac_bits)
    x = quantize_input(model, np.random.default_rng(1).uniform(-1, 1, (batch, sizes[0])))
    proofs = repeats + 2
    hiding = network_zk.default_params() if params is None else params  # hiding Ligero named (None: the auto rule)
    commit_wall, _, network = timed(lambda: Network(model, zk=True, max_proofs=proofs, params=hiding) if zk else
                                    Network(model, zk=False, params=params), 1)
    verify_network(network.commitment, x, network.prove(x))  # warm-up (compiles; checks the copies once)
    prove_wall, prove_cpu, proof = timed(lambda: network.prove(x), repeats)
    verify_wall, verify_cpu, _ = timed(lambda: verify_network(network.commitment, x, proof), max(repeats, 3))
    name += (" hiding" if zk else " public weights") + (", Basefold" if params is not None else "")
    return {"name": name, "params": model.num_parameters, "commit": commit_wall, "prove": prove_wall,
            "prove_cpu": prove_cpu, "verify": verify_wall, "verify_cpu": verify_cpu,
            "proof_kb": len(proof.to_bytes()) / 1024, "proof_bytes": len(proof.to_bytes()), "commitment_b": len(network.commitment.to_bytes()),
            "bits": network.commitment.soundness_bits(batch),
            "widths": "/".join(str(info.shift + info.q_bits) for info in network.commitment.layers)}


def _onnx_mlp(weights, biases, path):
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    nodes, inits, current = [], [], "input"
    for i, (w, b) in enumerate(zip(weights, biases)):
        inits += [numpy_helper.from_array(w.T.astype(np.float32), f"w{i}"),
                  numpy_helper.from_array(b.astype(np.float32), f"b{i}")]
        nodes += [helper.make_node("MatMul", [current, f"w{i}"], [f"m{i}"]),
                  helper.make_node("Add", [f"m{i}", f"b{i}"], [f"z{i}"])]
        current = f"z{i}"
        if i < len(weights) - 1:
            nodes.append(helper.make_node("Relu", [current], [f"a{i}"]))
            current = f"a{i}"
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("input", TensorProto.FLOAT,
                                                                          [1, weights[0].shape[1]])],
                              [helper.make_tensor_value_info(current, TensorProto.FLOAT, [1, weights[-1].shape[0]])],
                              inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)


def bench_ezkl(workdir):
    """EZKL 23 on case (a): setup (settings, calibration, compile, SRS, keys), prove, verify; None if absent."""
    try:
        import ezkl
        import onnx  # noqa: F401
    except ImportError:
        return None
    _, sizes, _, _ = CASES["a"]
    weights, biases = float_mlp(sizes)
    d = pathlib.Path(workdir)
    paths = {k: str(d / v) for k, v in dict(model="mlp.onnx", data="input.json", settings="settings.json",
                                             compiled="mlp.ezkl", srs="kzg.srs", vk="vk.key", pk="pk.key",
                                             witness="witness.json", proof="proof.json").items()}
    _onnx_mlp(weights, biases, paths["model"])
    x = np.random.default_rng(1).uniform(-1, 1, (1, sizes[0]))
    with open(paths["data"], "w") as handle:
        json.dump({"input_data": [x.reshape(-1).tolist()]}, handle)
    start = time.perf_counter()
    awaited(ezkl.gen_settings(paths["model"], paths["settings"]))
    awaited(ezkl.calibrate_settings(paths["data"], paths["model"], paths["settings"], "resources"))
    awaited(ezkl.compile_circuit(paths["model"], paths["compiled"], paths["settings"]))
    with open(paths["settings"]) as handle:
        logrows = json.load(handle)["run_args"]["logrows"]
    srs_start = time.perf_counter()
    awaited(ezkl.gen_srs(paths["srs"], logrows))
    srs_time = time.perf_counter() - srs_start
    awaited(ezkl.gen_witness(paths["data"], paths["compiled"], paths["witness"]))
    keys_start = time.perf_counter()
    awaited(ezkl.setup(paths["compiled"], paths["vk"], paths["pk"], paths["srs"]))
    setup_time = time.perf_counter() - start - srs_time
    keys_time = time.perf_counter() - keys_start
    prove_start = time.perf_counter()
    awaited(ezkl.prove(paths["witness"], paths["compiled"], paths["pk"], paths["proof"], paths["srs"]))
    prove_time = time.perf_counter() - prove_start
    verify_start = time.perf_counter()
    ok = awaited(ezkl.verify(paths["proof"], paths["settings"], paths["vk"], paths["srs"]))
    verify_time = time.perf_counter() - verify_start
    with open(paths["proof"]) as handle:
        proof_json = json.load(handle)
    proof_bytes = len(bytes.fromhex(proof_json["hex_proof"][2:])) if "hex_proof" in proof_json else None
    return {"setup": setup_time, "keys": keys_time, "srs": srs_time, "prove": prove_time, "verify": verify_time,
            "ok": ok, "pk_mb": os.path.getsize(paths["pk"]) / 2 ** 20, "logrows": logrows,
            "proof_kb": proof_bytes / 1024 if proof_bytes else os.path.getsize(paths["proof"]) / 1024}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="cases (a) and (b) only, fewer repeats")
    parser.add_argument("--no-ezkl", action="store_true", help="skip EZKL even if it imports")
    parser.add_argument("--no-training", action="store_true", help="skip the training-step benchmark")
    parser.add_argument("--no-graph", action="store_true", help="skip the CNN graph proofs (benchmarks/proofs_graph.py)")
    args = parser.parse_args()
    inference_proofs(args)
    if not args.no_graph:
        from benchmarks import proofs_graph
        print()
        proofs_graph.run(args.quick, not args.no_ezkl)
    if not args.no_training:
        from benchmarks import proofs_training
        print()
        proofs_training.run(args.quick)


def inference_proofs(args) -> None:
    """The inference cases (a)-(c) and EZKL on (a)."""
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"hezk proofs benchmark ({os.cpu_count()} cores, load average {load:.1f}; BabyBear field, "
          f"F_p^4 challenges, Ligero-style commitments: plain at rate 1/4, hiding at rate 1/2)")
    keys = "ab" if args.quick else "abc"
    repeats = {"a": 9 if args.quick else 21, "b": 3, "c": 3}
    results = {}
    for key in keys:
        results[key] = bench_hezk(key, repeats[key], zk=True)
        results[key + " public"] = bench_hezk(key, repeats[key], zk=False)
        results[key + " basefold"] = bench_hezk(key, repeats[key], zk=False, params=BasefoldParams())  # issue 17
        if key in HIDING_BASEFOLD_CASES:  # issue 17: the zero-knowledge proof in one Basefold batch opening
            results[key + " hiding basefold"] = bench_hezk(key, repeats[key], zk=True,
                                                           params=network_zk.basefold_params())
    rows = [[r["name"], f"{r['params']:,}", r["widths"], f"{r['commit']:.3f}", f"{r['prove']:.3f}",
             f"{r['prove_cpu']:.3f}", f"{r['verify'] * 1e3:.1f}", f"{r['verify_cpu'] * 1e3:.1f}",
             f"{r['proof_kb']:.1f}", str(r["commitment_b"]), f"{r['bits']:.1f}"] for r in results.values()]
    print_table("hezk (medians; commit = one-time weight commitment, no setup; hiding: one copy per proof, "
                "repeats + 2 copies; soundness bits per attempt)",
                ["case", "params", "bits/layer", "commit s", "prove s", "prove cpu s", "verify ms",
                 "verify cpu ms", "proof KB", "commitment B", "soundness bits"], rows)
    a, a_public = results["a"], results["a public"]
    print(f"\nhiding / public weights on (a): proof bytes {a['proof_kb'] / a_public['proof_kb']:.1f}x, prove "
          f"{a['prove'] / a_public['prove']:.1f}x, verify {a['verify'] / a_public['verify']:.1f}x")
    for key in keys:  # issue 17: one O(log^2 n) Basefold batch opening against Ligero openings (public weights)
        ligero, basefold = results[key + " public"], results[key + " basefold"]
        print(f"Basefold / Ligero on ({key}): proof bytes {basefold['proof_kb'] / ligero['proof_kb']:.2f}x, prove cpu "
              f"{basefold['prove_cpu'] / ligero['prove_cpu']:.2f}x, verify cpu "
              f"{basefold['verify_cpu'] / ligero['verify_cpu']:.2f}x")
    for key in keys:
        if key + " hiding basefold" in results:
            ligero, basefold = results[key], results[key + " hiding basefold"]
            print(f"hiding Basefold / hiding Ligero on ({key}): proof bytes "
                  f"{basefold['proof_kb'] / ligero['proof_kb']:.2f}x, prove cpu {basefold['prove_cpu'] / ligero['prove_cpu']:.2f}x, "
                  f"verify cpu {basefold['verify_cpu'] / ligero['verify_cpu']:.2f}x")
    if "a hiding basefold" in results:
        h = results["a hiding basefold"]
        print(f"targets (issue 17, hiding Basefold): (a) proof <= 100 kB: {h['proof_bytes'] / 1000:.1f} kB "
              f"({h['proof_kb']:.1f} KiB); (a) verify <= 20 ms: "
              f"{h['verify'] * 1e3:.1f} ms (cpu {h['verify_cpu'] * 1e3:.1f} ms)")
    print(f"targets (hiding): (a) prove <= 0.13 s: {a['prove']:.3f} s; (a) verify <= 30 ms: {a['verify'] * 1e3:.1f} ms"
          + (f"; (c) prove <= 10 s: {results['c']['prove']:.2f} s" if "c" in results else ""))
    if args.no_ezkl:
        return
    with tempfile.TemporaryDirectory() as workdir:
        ezkl_result = bench_ezkl(workdir)
    if ezkl_result is None:
        print("\nEZKL: not installed (pip install -e '.[bench]'); skipped")
        return
    e = ezkl_result
    print_table(f"EZKL on (a), same run (logrows {e['logrows']}, verified: {e['ok']})",
                ["", "setup s", "(of which keys s)", "local SRS s", "prove s", "verify ms", "proof KB",
                 "proving key MB"],
                [["EZKL", f"{e['setup']:.2f}", f"{e['keys']:.2f}", f"{e['srs']:.2f}", f"{e['prove']:.3f}",
                  f"{e['verify'] * 1e3:.1f}", f"{e['proof_kb']:.1f}", f"{e['pk_mb']:.1f}"],
                 ["hezk (hiding)", "0 (commit " + f"{a['commit']:.3f})", "-", "-", f"{a['prove']:.3f}",
                  f"{a['verify'] * 1e3:.1f}", f"{a['proof_kb']:.1f}", "-"]])
    print(f"ratios EZKL / hezk (both keep the weights private) on (a): prove {e['prove'] / a['prove']:.0f}x, verify {e['verify'] / a['verify']:.2f}x, "
          f"proof bytes {e['proof_kb'] / a['proof_kb']:.2f}x")


if __name__ == "__main__":
    main()
