"""CKKS in a few lines: keys, encryption, arithmetic, rotations, a client/server split, precision in bits.

Run: python examples/ckks_basics.py   (HEZK_QUICK=1 uses the small insecure TOY ring)
"""
import os
import time

import numpy as np

from crypto import CKKSContext, CKKSParameters, Ciphertext
from crypto.ckks.precision import precision_stats


def main():
    preset = "TOY" if os.environ.get("HEZK_QUICK") else "N14"
    params = CKKSParameters.preset(preset)
    print(f"parameters {preset}: {params}")

    start = time.perf_counter()
    client = CKKSContext.keygen(params, rotations=[1, -3, 5])       # secret + public + evaluation keys
    print(f"keygen with rotation keys for steps {list(client.rotation_steps)}: {time.perf_counter() - start:.2f} s")

    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, params.slots)
    y = rng.uniform(-1, 1, params.slots)
    ct_x, ct_y = client.encrypt(x), client.encrypt(y)
    print(f"encrypted two vectors of {params.slots} values: {ct_x}")

    # The server gets the public context only: it can evaluate but not decrypt.
    server = CKKSContext.from_bytes(client.public_context().to_bytes())
    ev = server.evaluator
    a, b = Ciphertext.from_bytes(ct_x.to_bytes(), server), Ciphertext.from_bytes(ct_y.to_bytes(), server)
    start = time.perf_counter()
    results = {
        "x + y": (a + b, x + y),
        "x * y (relinearized, rescaled)": (a * b, x * y),
        "x * y + 0.5 * x": (a * b + a * 0.5, x * y + 0.5 * x),
        "rotate(x * y, 1)": (ev.rotate(a * b, 1), np.roll(x * y, -1)),
        "rotate(x, -3)": (ev.rotate(a, -3), np.roll(x, 3)),
    }
    print(f"server evaluated {len(results)} expressions in {time.perf_counter() - start:.2f} s "
          f"(has secret key: {server.has_secret_key})")

    for name, (ct, expected) in results.items():
        back = Ciphertext.from_bytes(ct.to_bytes(), client)
        stats = precision_stats(expected, client.decrypt(back))
        print(f"  {name:32s} level {ct.level}  {stats}")
        error = np.max(np.abs(client.decrypt(back) - expected))  # the scale 2^log_scale less 16 bits of noise
        assert error <= 2.0 ** -(params.log_scale - 16) * max(1.0, np.max(np.abs(expected))), (name, error)


if __name__ == "__main__":
    main()
