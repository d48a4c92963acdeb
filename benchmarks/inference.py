"""Encrypted inference benchmark: the digits MLP and CNN with hezk, and the same MLP with TenSEAL; LeNet-5 and
the CIFAR CNN from ONNX (square activations) with hezk, TenSEAL's im2col LeNet-5 and orion-fhe where they run.

    python benchmarks/inference.py [--quick] [--models digits,lenet,cifar,peers]

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

if __name__ == "__main__":  # one core, set before the libraries read it (never when imported: see _repo.py)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("NUMBA_NUM_THREADS", "1")

import numpy as np  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "examples"))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
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


def bench_onnx(name, proto, sample_shape, repeats):
    """hezk on an ONNX model (square activations) read by ``Sequential.load``: latency of one image (warm
    median), throughput of one full ciphertext (``plan.batch`` images), key bytes, parameters, and the
    precision in bits against the numpy float model and onnxruntime: -log2(max error / max |output|)."""
    import tempfile

    import onnx

    from tensor_ops.nn import Sequential
    from tests.model.onnx_models import run_onnx

    with tempfile.TemporaryDirectory() as folder:
        path = pathlib.Path(folder) / f"{name}.onnx"
        onnx.save(proto, path)
        model = Sequential.load(path)
    t0 = time.perf_counter()
    plan = model.plan()
    planning = time.perf_counter() - t0
    t0 = time.perf_counter()
    client = Client(plan=plan)
    keygen = time.perf_counter() - t0
    public = client.public_context()
    server = Server(model, public)
    x = np.random.default_rng(0).uniform(-1, 1, (plan.batch, *sample_shape))
    one = client.encrypt(x[:1])
    t0 = time.perf_counter()
    server.evaluate(one)
    cold = time.perf_counter() - t0
    latency, _ = _median_seconds(lambda: server.evaluate(one), repeats)
    request = client.encrypt(x)
    batch_time, reply = _median_seconds(lambda: server.evaluate(request), 1)
    y = client.decrypt(reply)
    reference, runtime = model.forward(x), run_onnx(proto, x)
    calibrated = plan.calibrated()
    return {"system": f"hezk {name}", "params": f"N=2^{plan.params.log_n}, {plan.params.max_level} levels, "
                                               f"2^{plan.params.log_scale}, dnum={plan.params.dnum}",
            "planning_s": planning, "keygen_s": keygen, "eval_keys_mib": len(public) / 2**20,
            "galois_mib": plan.galois_key_bytes / 2**20, "rotation_keys": len(plan.rotations), "cold_ms": 1000 * cold,
            "latency_ms": 1000 * latency, "per_ct": plan.batch, "throughput": len(x) / batch_time,
            "batch_s": batch_time, "estimate_ms": 1000 * calibrated.estimated_seconds,
            "bits_numpy": -np.log2(np.abs(y - reference).max() / np.abs(reference).max()),
            "bits_onnxruntime": -np.log2(np.abs(y - runtime).max() / np.abs(runtime).max()),
            "stated_bits": plan.precision_bits}


def bench_tenseal_lenet(proto, repeats):
    """TenSEAL on the same LeNet-5 weights, one image per vector (its im2col tutorial's layout): conv1 by
    ``im2col_encoding`` + ``conv2d_im2col`` per output channel, ``pack_vectors``, square; the rest (avgpool,
    conv2, avgpool folded into one matrix; fc1, fc2, fc3) by ``mm`` on the packed vector, squares between.
    N = 2^16 (im2col of 28x28 by 5x5 windows: 576 windows padded to 1024, times 25 slots), coefficient moduli
    [60] + [40] * 9 + [60], scale 2^40 (nine multiplicative levels). Measured 2026-11-25 with tenseal 0.3.18:
    N = 2^15 holds only 16384 slots (the vector is chunked and ``conv2d_im2col`` refuses chunked vectors) and
    N = 2^16 is refused ("encryption parameters are not set correctly"): reported as a failure."""
    try:
        import tenseal as ts
    except ImportError as error:
        print(f"TenSEAL LeNet-5 skipped: tenseal does not import ({error}); pip install -e '.[bench]'")
        return None
    import tempfile

    import onnx

    from tensor_ops.nn import Sequential

    with tempfile.TemporaryDirectory() as folder:
        path = pathlib.Path(folder) / "lenet.onnx"
        onnx.save(proto, path)
        model = Sequential.load(path)
    conv1, _, pool1, conv2, _, pool2, flatten, fc1, _, fc2, _, fc3 = model.layers
    middle = [pool1, conv2, pool2, flatten]  # linear: probe its matrix on the basis of 6x24x24

    def linear(x):
        for layer in middle:
            x = layer.forward(x)
        return x

    basis = np.eye(6 * 24 * 24).reshape(-1, 6, 24, 24)
    offset = linear(np.zeros((1, 6, 24, 24)))
    matrix = (linear(basis) - offset).reshape(6 * 24 * 24, -1)
    t0 = time.perf_counter()
    ctx = ts.context(ts.SCHEME_TYPE.CKKS, poly_modulus_degree=65536, coeff_mod_bit_sizes=[60] + [40] * 9 + [60],
                     n_threads=1)
    ctx.global_scale = 2**40
    ctx.generate_galois_keys()
    ctx.generate_relin_keys()
    keygen = time.perf_counter() - t0
    eval_keys = len(ctx.serialize(save_public_key=False, save_secret_key=False, save_galois_keys=True,
                                  save_relin_keys=True))
    image = np.random.default_rng(0).uniform(-1, 1, (1, 28, 28))
    stages = {}

    def infer(encrypted, windows):
        t = time.perf_counter()
        channels = [encrypted.conv2d_im2col(kernel[0].tolist(), windows) + float(bias)
                    for kernel, bias in zip(conv1.weight, conv1.bias)]
        x = ts.CKKSVector.pack_vectors(channels)
        x.square_()
        stages["conv1+square"] = time.perf_counter() - t
        t = time.perf_counter()
        x = x.mm(matrix.tolist()) + offset.ravel().tolist()
        x.square_()
        stages["pool+conv2+pool (mm 3456x256)+square"] = time.perf_counter() - t
        t = time.perf_counter()
        for layer, last in ((fc1, False), (fc2, False), (fc3, True)):
            x = x.mm(layer.weight.T.tolist()) + layer.bias.tolist()
            if not last:
                x.square_()
        stages["fc1..fc3"] = time.perf_counter() - t
        return x

    encrypted, windows = ts.im2col_encoding(ctx, image[0].tolist(), 5, 5, 1)
    t0 = time.perf_counter()
    out = infer(encrypted, windows)
    latency = time.perf_counter() - t0
    y = np.array(out.decrypt())
    reference = model.forward(image)[0]
    print("TenSEAL LeNet-5 stages (s): " + ", ".join(f"{k} {v:.1f}" for k, v in stages.items()))
    return {"system": "TenSEAL lenet (im2col + mm)", "params": "N=2^16, [60, 40 x9, 60], 2^40", "planning_s": 0.0,
            "keygen_s": keygen, "eval_keys_mib": eval_keys / 2**20, "galois_mib": float("nan"), "rotation_keys": 29,
            "cold_ms": float("nan"), "latency_ms": 1000 * latency, "per_ct": 1, "throughput": 1 / latency,
            "batch_s": latency, "estimate_ms": float("nan"),
            "bits_numpy": -np.log2(np.abs(y - reference).max() / np.abs(reference).max()),
            "bits_onnxruntime": float("nan"), "stated_bits": float("nan")}


def bench_orion():
    """orion-fhe (PyPI): reports whether it imports; its models are PyTorch modules it compiles itself."""
    try:
        import orion  # noqa: F401
    except Exception as error:  # noqa: BLE001 (any failure of a third-party import is a skip)
        print(f"orion-fhe skipped: it does not import here ({type(error).__name__}: {error})")
        return None
    print("orion-fhe imports; running its LeNet needs its PyTorch front end and a Lattigo backend (not run here)")
    return None


def print_onnx_rows(rows):
    header = ("system", "params", "plan s", "keygen s", "eval keys MiB", "galois MiB", "rot keys", "cold ms",
              "latency ms (1 image)", "est. ms (calibrated)", "images/ct", "full batch s", "images/s",
              "bits vs numpy (worst slot, test images)", "bits vs onnxruntime (worst slot)", "stated bits/op (worst case)")
    print(" | ".join(header))
    print(" | ".join("---" for _ in header))
    for r in rows:
        print(f"{r['system']} | {r['params']} | {r['planning_s']:.1f} | {r['keygen_s']:.1f} | {r['eval_keys_mib']:.0f} | "
              f"{r['galois_mib']:.0f} | {r['rotation_keys']} | {r['cold_ms']:.0f} | {r['latency_ms']:.0f} | "
              f"{r['estimate_ms']:.0f} | {r['per_ct']} | {r['batch_s']:.1f} | {r['throughput']:.2f} | "
              f"{r['bits_numpy']:.1f} | {r['bits_onnxruntime']:.1f} | {r['stated_bits']:.1f}")


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
    parser.add_argument("--models", default="digits,lenet,cifar,peers",
                        help="comma-separated: digits (MLP, CNN, TenSEAL MLP), lenet, cifar (ONNX, square "
                             "activations), peers (TenSEAL LeNet-5 by im2col, orion-fhe)")
    args = parser.parse_args()
    chosen = set(args.models.split(","))
    if chosen & {"lenet", "cifar", "peers"}:
        from tests.model.onnx_models import cifar, lenet

        repeats = 2 if args.quick else 3
        rows = [bench_onnx("lenet", lenet("square"), (1, 28, 28), repeats)] if "lenet" in chosen else []
        rows += [bench_onnx("cifar", cifar("square"), (3, 32, 32), repeats)] if "cifar" in chosen else []
        print_onnx_rows(rows)
        if "peers" in chosen:
            bench_orion()
            try:
                peer = bench_tenseal_lenet(lenet("square"), repeats)
            except (ValueError, RuntimeError, MemoryError) as error:
                print(f"TenSEAL LeNet-5 failed: {type(error).__name__}: {error} (its im2col layout of conv1 needs "
                      f"1024 x 25 slots: more than N = 2^15 holds, and N = 2^16 is refused)")
                peer = None
            if peer:
                print_onnx_rows([peer])
    if "digits" not in chosen:
        return
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
