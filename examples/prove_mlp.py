"""Prove the inference of a small trained MLP, verify it, then tamper with it and watch it fail.

1. train a 64 -> 32 -> 10 ReLU MLP on scikit-learn's 8x8 digits with plain numpy;
2. quantize it (fixed point, values round(x * 2^R) as in zkDL) and check the worst-case bounds fit the field;
3. the model owner commits to the weights once (a hiding hash-based commitment, no trusted setup, good for
   ``max_proofs`` zero-knowledge proofs);
4. the prover proves y = model(x) for a batch of test images in zero knowledge (the weights stay private);
   the verifier checks it;
5. a wrong output, a wrong input, another model's commitment and a corrupted byte are all rejected.

``Network(model, zk=False)`` is the plain protocol: smaller and faster proofs that REVEAL THE WEIGHTS (for
public models only).

Run: python examples/prove_mlp.py   (HEZK_QUICK=1 for a smaller batch; files in ./out/, or HEZK_OUT=dir)
"""
import dataclasses
import os
import pathlib
import time

import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

from proofs import ProofRejected
from proofs.cli import main as cli
from proofs.layers.network import ModelCommitment, Network, read_proof, verify_network
from proofs.model import save_float_model
from proofs.quantize import dequantize_output, float_forward, forward_int, quantize_fixed_point, quantize_input

QUICK = os.environ.get("HEZK_QUICK") == "1"
OUT = pathlib.Path(os.environ.get("HEZK_OUT", "out"))


def train_mlp(x, labels, hidden=32, epochs=60, lr=0.1, seed=0):
    """Softmax regression through one ReLU hidden layer, full-batch gradient descent in numpy."""
    rng = np.random.default_rng(seed)
    w1 = rng.normal(0, 1 / np.sqrt(x.shape[1]), (hidden, x.shape[1]))
    w2 = rng.normal(0, 1 / np.sqrt(hidden), (10, hidden))
    b1, b2 = np.zeros(hidden), np.zeros(10)
    onehot = np.eye(10)[labels]
    for _ in range(epochs * 5):
        h = np.maximum(x @ w1.T + b1, 0)
        logits = h @ w2.T + b2
        p = np.exp(logits - logits.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        g = (p - onehot) / len(x)
        gh = (g @ w2) * (h > 0)
        w2, b2 = w2 - lr * g.T @ h, b2 - lr * g.sum(0)
        w1, b1 = w1 - lr * gh.T @ x, b1 - lr * gh.sum(0)
    return [w1, w2], [b1, b2]


def rejected(what, check):
    try:
        check()
    except ProofRejected as rejection:
        print(f"  {what:<34} -> rejected ({rejection.where}: {rejection.reason[:60]})")
        return True
    print(f"  {what:<34} -> ACCEPTED (this must not happen)")
    return False


def main():
    digits = load_digits()
    x_all = digits.data / 16.0
    x_train, x_test, y_train, y_test = train_test_split(x_all, digits.target, test_size=0.25, random_state=0)
    weights, biases = train_mlp(x_train, y_train, epochs=20 if QUICK else 60)
    float_acc = np.mean(float_forward(weights, biases, x_test).argmax(1) == y_test)
    print(f"trained 64 -> 32 -> 10 MLP on digits: float test accuracy {float_acc:.3f}")

    model = quantize_fixed_point(weights, biases, frac_bits=8, input_bound=1.0)
    network = Network(model, max_proofs=4)  # checks the field bounds and commits (hiding) to the weights
    commitment_bytes = network.commitment.to_bytes()
    print(f"quantized with R = 8 fractional bits; worst-case bits per layer "
          f"{[info.shift + info.q_bits for info in network.commitment.layers]}; "
          f"stated output error <= {model.error_bound:.3g}")
    print(f"hiding weight commitment: {len(commitment_bytes)} bytes for {model.num_parameters} parameters and "
          f"{network.proofs_left} proofs (digest {network.commitment.weights.digest().hex()[:16]}...)")

    batch = 8 if QUICK else 64
    x = quantize_input(model, x_test[:batch])
    start = time.perf_counter()
    proof = network.prove(x)
    prove_time = time.perf_counter() - start
    proof_bytes = proof.to_bytes()
    start = time.perf_counter()
    output = verify_network(ModelCommitment.from_bytes(commitment_bytes), x, read_proof(proof_bytes)).output
    verify_time = time.perf_counter() - start
    assert np.array_equal(output, forward_int(model, x)), "the proven output is the integer reference"
    error = np.max(np.abs(dequantize_output(model, output) - float_forward(weights, biases, x_test[:batch])))
    print(f"proved a batch of {batch} in zero knowledge in {prove_time:.3f} s, verified in {verify_time * 1e3:.1f} ms "
          f"(the first verification also checks the commitment's copies), proof {len(proof_bytes)} bytes")
    print(f"accept: output equals the numpy integer reference bit for bit; dequantized error {error:.2e} "
          f"(stated bound {model.error_bound:.3g}); predictions {output.argmax(1)[:10]} vs labels {y_test[:10]}")
    bits = network.commitment.soundness_bits(batch)
    print(f"soundness: {bits:.1f} bits per attempt (grinding 2^k hashes: 2^(k-{bits:.1f})); challenges from F_p^4, "
          f"every sumcheck, mask and store opening counted")

    print("tampering:")
    wrong_output = proof.output.copy()
    wrong_output[0, 0] += 1
    other = Network(quantize_fixed_point([w * 1.01 for w in weights], biases, frac_bits=8), max_proofs=1).commitment
    corrupted = bytearray(proof_bytes)
    corrupted[len(corrupted) // 3] ^= 0x40
    checks = [
        ("a wrong output", lambda: verify_network(network.commitment, x, dataclasses.replace(proof,
                                                                                             output=wrong_output))),
        ("a wrong input", lambda: verify_network(network.commitment, x[::-1], proof)),
        ("another model's commitment", lambda: verify_network(other, x, proof)),
        ("one corrupted byte of the proof", lambda: verify_network(
            network.commitment, x, read_proof(bytes(corrupted)))),
    ]
    assert all(rejected(what, check) for what, check in checks)

    OUT.mkdir(parents=True, exist_ok=True)
    save_float_model(OUT / "model.npz", weights, biases, frac_bits=8, input_bound=1.0)  # the float model: one format
    np.save(OUT / "x.npy", x)
    print("the same with the scripts:")
    for argv in (["commit", "--model", OUT / "model.npz", "--out", OUT / "c.bin", "--max-proofs", "2"],
                 ["prove", "--model", OUT / "model.npz", "--input", OUT / "x.npy", "--commitment", OUT / "c.bin",
                  "--out", OUT / "proof.bin", "--quiet"],
                 ["verify", "--commitment", OUT / "c.bin", "--input", OUT / "x.npy", "--proof", OUT / "proof.bin"]):
        print("$ python -m proofs " + " ".join(str(a) for a in argv))
        assert cli([str(a) for a in argv]) == 0


if __name__ == "__main__":
    main()
