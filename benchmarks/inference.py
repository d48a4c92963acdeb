"""Encrypted inference benchmark: the digits MLP and CNN with hezk, and the same MLP with TenSEAL.

    python benchmarks/inference.py [--quick]

hezk runs at the automatically chosen parameters (the smallest 128-bit ring for the model's depth) with
Galois keys for the plan's rotations only, many images per ciphertext. TenSEAL (the ``bench`` extra; skipped
when it does not import) runs the same trained weights with its ``CKKSVector.mm`` / ``polyval`` API, one
image per vector, with the Galois keys of ``generate_galois_keys()``, at two settings: N = 8192 with
coefficient moduli [40, 21, 21, 21, 40] and scale 2^21 (its MNIST tutorial's choice: a depth-3 model does
not fit 128-bit security at N = 8192 with larger primes) and N = 16384 with [60, 40, 40, 40, 60], 2^40. Both run single-threaded in the same process. Latency is
the server time of one encrypted inference (one ciphertext), median of several runs after a warm-up;
"cold" is hezk's first call (it encodes the weight diagonals once); throughput is server time only.
"""
import argparse
import os
import pathlib
import statistics
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("NUMBA_NUM_THREADS", "1")

import numpy as np  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "examples"))
from digits_models import digits_split, train_cnn, train_mlp  # noqa: E402

from crypto import CKKSContext  # noqa: E402
from tensor_ops.inference import Client, Server  # noqa: E402


def _median_seconds(fn, repeats):
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), result


def bench_hezk(name, model, x, repeats):
    plan = model.plan()
    t0 = time.perf_counter()
    client = Client(plan=plan)
    keygen = time.perf_counter() - t0
    public = client.public_context()
    no_rotations = CKKSContext.keygen(plan.params).public_context().to_bytes()
    galois = len(public) - len(no_rotations)
    server = Server(model, public)
    one = client.encrypt(x[:1])
    t0 = time.perf_counter()
    server.evaluate(one)
    cold = time.perf_counter() - t0
    latency, _ = _median_seconds(lambda: server.evaluate(one), repeats)
    t0 = time.perf_counter()
    request = client.encrypt(x)
    encrypt = time.perf_counter() - t0
    batch_time, reply = _median_seconds(lambda: server.evaluate(request), 1)
    y = client.decrypt(reply)
    reference = model.forward(x)
    return {"system": f"hezk {name}", "params": f"N=2^{plan.params.log_n}, {plan.params.max_level} levels, 2^{plan.params.log_scale}",
            "keygen_s": keygen, "eval_keys_mib": len(public) / 2**20, "galois_mib": galois / 2**20,
            "rotation_keys": len(plan.rotations), "cold_ms": 1000 * cold, "latency_ms": 1000 * latency,
            "per_ct": plan.batch, "throughput": len(x) / batch_time, "encrypt_ms_per_image": 1000 * encrypt / len(x),
            "agree": np.mean(y.argmax(1) == reference.argmax(1)), "max_err": np.max(np.abs(y - reference)),
            "estimate_ms": 1000 * plan.estimated_seconds}


TENSEAL_SETTINGS = ((8192, [40, 21, 21, 21, 40], 21), (16384, [60, 40, 40, 40, 60], 40))


def bench_tenseal(model, x, repeats, n, moduli, scale_bits):
    try:
        import tenseal as ts
    except ImportError:
        print("tenseal does not import: install the bench extra to compare (pip install -e '.[bench]')")
        return None
    first, activation, second = model.layers
    t0 = time.perf_counter()
    ctx = ts.context(ts.SCHEME_TYPE.CKKS, poly_modulus_degree=n, coeff_mod_bit_sizes=moduli, n_threads=1)
    ctx.global_scale = 2**scale_bits
    ctx.generate_galois_keys()
    ctx.generate_relin_keys()
    keygen = time.perf_counter() - t0
    eval_keys = len(ctx.serialize(save_public_key=False, save_secret_key=False, save_galois_keys=True, save_relin_keys=True))
    galois = eval_keys - len(ctx.serialize(save_public_key=False, save_secret_key=False, save_galois_keys=False,
                                           save_relin_keys=True))
    # ckks_vector replicates the input over the slots and mm relies on it; adding the first bias after mm
    # would touch one replica only and corrupt the second mm (max error ~2 on the logits), so the first
    # bias rides along as a weight row on a constant-1 input feature.
    w1 = np.vstack([first.weight.T, first.bias]).tolist()
    w2, b2 = second.weight.T.tolist(), second.bias.tolist()
    coefficients = list(activation.poly.coefficients)

    def infer(vector):
        return vector.mm(w1).polyval(coefficients).mm(w2) + b2

    encrypted = [ts.ckks_vector(ctx, np.append(row, 1.0).tolist()) for row in x]
    infer(encrypted[0])
    latency, _ = _median_seconds(lambda: infer(encrypted[0]), repeats)
    t0 = time.perf_counter()
    results = [infer(v) for v in encrypted]
    total = time.perf_counter() - t0
    outputs = np.array([r.decrypt() for r in results])
    reference = model.forward(x)
    return {"system": "TenSEAL mlp (mm/polyval)", "params": f"N=2^{n.bit_length() - 1}, {moduli}, 2^{scale_bits}",
            "keygen_s": keygen, "eval_keys_mib": eval_keys / 2**20, "galois_mib": galois / 2**20,
            "rotation_keys": 2 * (n.bit_length() - 2) - 1, "cold_ms": float("nan"), "latency_ms": 1000 * latency, "per_ct": 1,
            "throughput": len(x) / total, "encrypt_ms_per_image": float("nan"),
            "agree": np.mean(outputs.argmax(1) == reference.argmax(1)), "max_err": np.max(np.abs(outputs - reference)),
            "estimate_ms": float("nan")}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer images and repeats")
    args = parser.parse_args()
    x_train, y_train, x_test, y_test = digits_split()
    count, repeats = (64, 3) if args.quick else (len(x_test), 5)
    x = x_test[:count]
    mlp, cnn = train_mlp(x_train, y_train), train_cnn(x_train, y_train)
    print(f"digits: {count} test images; MLP accuracy {np.mean(mlp.predict(x) == y_test[:count]):.3f}, "
          f"CNN accuracy {np.mean(cnn.predict(x.reshape(-1, 1, 8, 8)) == y_test[:count]):.3f} (plaintext)")
    rows = [bench_hezk("mlp", mlp, x, repeats), bench_hezk("cnn", cnn, x.reshape(-1, 1, 8, 8), repeats)]
    # TenSEAL takes one image per vector (seconds each): its throughput is measured on fewer images
    tenseal = [bench_tenseal(mlp, x[:16 if args.quick else 48], repeats, *setting) for setting in TENSEAL_SETTINGS]
    rows += [row for row in tenseal if row]
    header = ("system", "params", "keygen s", "eval keys MiB", "galois MiB", "rot keys", "cold ms",
              "latency ms", "est. ms", "images/ct", "images/s", "agree %", "max err")
    print(" | ".join(header))
    print(" | ".join("---" for _ in header))
    for r in rows:
        print(f"{r['system']} | {r['params']} | {r['keygen_s']:.2f} | {r['eval_keys_mib']:.1f} | {r['galois_mib']:.1f} | "
              f"{r['rotation_keys']} | {r['cold_ms']:.0f} | {r['latency_ms']:.0f} | {r['estimate_ms']:.0f} | {r['per_ct']} | "
              f"{r['throughput']:.1f} | {100 * r['agree']:.1f} | {r['max_err']:.1e}")
    hezk = rows[0]
    for peer in (row for row in tenseal if row):
        print(f"\nMLP, hezk vs TenSEAL at {peer['params']}: latency x{peer['latency_ms'] / hezk['latency_ms']:.2f} "
              f"faster, throughput x{hezk['throughput'] / peer['throughput']:.0f}, evaluation keys "
              f"x{peer['eval_keys_mib'] / hezk['eval_keys_mib']:.2f} smaller, Galois keys "
              f"x{peer['galois_mib'] / hezk['galois_mib']:.2f} smaller")


if __name__ == "__main__":
    main()
