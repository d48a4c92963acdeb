"""Encrypted digit classification: the client's images stay secret, the server runs an MLP on ciphertexts.

1. Train a small MLP with the square activation on the scikit-learn digits (numpy only).
2. Plan: the model is folded into affine stages and polynomial activations; the plan states the depth,
   the rotations (hence which Galois keys the client must make), the packing and a time estimate, and
   picks the smallest 128-bit-secure CKKS parameters for that depth.
3. The client makes keys and sends the server its public context (no secret key) and encrypted images,
   many images packed into each ciphertext.
4. The server evaluates bytes -> bytes; the client decrypts and compares with the plaintext model.
"""
import time

import numpy as np

from digits_models import QUICK, digits_split, report_agreement, train_mlp
from tensor_ops.inference import Client, Server


def main():
    x_train, y_train, x_test, y_test = digits_split()
    if QUICK:
        x_test, y_test = x_test[:64], y_test[:64]
    model = train_mlp(x_train, y_train, steps=150 if QUICK else 400)
    plain = model.forward(x_test)
    print(f"trained {model!r}: plaintext test accuracy {np.mean(plain.argmax(1) == y_test):.3f} "
          f"on {len(y_test)} images")

    plan = model.plan().calibrated()  # the time estimate from operations timed on this machine
    print(f"plan: 128-bit CKKS at N=2^{plan.params.log_n}, depth {plan.depth}, {len(plan.rotations)} rotation keys, "
          f"up to {plan.batch} images per ciphertext (the whole plan is printed at the end)")

    t0 = time.perf_counter()
    client = Client(plan=plan)
    public = client.public_context()
    print(f"client: keys made in {time.perf_counter() - t0:.2f} s; public context {len(public) / 2**20:.1f} MiB "
          f"({len(plan.rotations)} rotation keys, the plan's only), secret key kept by the client")

    server = Server(model, public)
    t0 = time.perf_counter()
    request = client.encrypt(x_test)
    t_encrypt = time.perf_counter() - t0
    t0 = time.perf_counter()
    reply = server.evaluate(request)
    t_eval = time.perf_counter() - t0
    t_warm = []
    for _ in range(3):  # warm: the weights are encoded and every kernel compiled by now
        t0 = time.perf_counter()
        server.evaluate(request)
        t_warm.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    encrypted = client.decrypt(reply)
    t_decrypt = time.perf_counter() - t0

    t0 = time.perf_counter()
    single = client.decrypt(server.evaluate(client.encrypt(x_test[0])))
    t_single = time.perf_counter() - t0
    n_ct = plan.ciphertexts_for(len(x_test))
    print(f"encrypted {len(x_test)} images into {n_ct} ciphertext(s) of up to {plan.batch} images "
          f"({len(request) / 2**10:.0f} KiB) in {t_encrypt:.2f} s")
    warm = min(t_warm) / n_ct
    print(f"server: {t_eval:.2f} s for the batch on the first run (encodes the weights), warm {warm:.3f} s per "
          f"ciphertext (plan's estimate {plan.estimated_seconds:.3f} s, {plan.estimated_seconds / warm:.2f}x), "
          f"{1000 * min(t_warm) / len(x_test):.1f} ms per image, throughput {len(x_test) / min(t_warm):.0f} images/s")
    print(f"one image alone (encrypt, evaluate, decrypt): {1000 * t_single:.0f} ms, class {single.argmax()} "
          f"(plaintext model: {plain[0].argmax()}); a ciphertext costs the same with 1 or {plan.batch} images")
    print(f"client: decrypted in {t_decrypt:.2f} s")
    report_agreement(encrypted, plain, y_test)
    print("\nthe plan, step by step (public: the server and the client agree on it before any key exists):")
    print(plan.explain())


if __name__ == "__main__":
    main()
