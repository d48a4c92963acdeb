"""A tiny encrypted CNN on the digits: conv 4@3x3 -> average pool 2 -> x^2 -> linear 10.

Convolution, pooling and flattening are affine, so the planner folds them into one matrix on the flattened
image; the server evaluates it with the diagonal method and baby-step/giant-step rotations, where the
zero diagonals of a convolution cost nothing. Depth: 1 (conv+pool) + 1 (square) + 1 (linear) = 3.
"""
import time

import numpy as np

from digits_models import QUICK, digits_split, report_agreement, train_cnn
from tensor_ops.inference import Client, Server
from tensor_ops.nn import AffineStage


def main():
    x_train, y_train, x_test, y_test = digits_split()
    if QUICK:
        x_test, y_test = x_test[:64], y_test[:64]
    images = x_test.reshape(-1, 1, 8, 8)
    model = train_cnn(x_train, y_train, steps=150 if QUICK else 400)
    plain = model.forward(images)
    print(f"trained {model!r}: plaintext accuracy {np.mean(plain.argmax(1) == y_test):.3f} on {len(y_test)} images")
    stages = model.stages()
    print(f"folded into {len(stages)} stages: " + ", ".join(
        f"affine {s.matrix.shape[1]}->{s.matrix.shape[0]}" if isinstance(s, AffineStage) else
        f"activation of degree {s.poly.degree}" for s in stages))
    plan = model.plan()
    print(plan.explain())

    client = Client(plan=plan)
    server = Server(model, client.public_context())
    t0 = time.perf_counter()
    reply = server.evaluate(client.encrypt(images))
    t_eval = time.perf_counter() - t0
    print(f"server: {t_eval:.2f} s for {len(images)} images ({1000 * t_eval / len(images):.1f} ms per image, "
          f"{plan.ciphertexts_for(len(images))} ciphertext(s))")
    report_agreement(client.decrypt(reply), plain, y_test)


if __name__ == "__main__":
    main()
