"""Prove one SGD training step of a small quantized ReLU MLP, with zero knowledge.

The model owner commits to the weights W, the data owner to a batch (X, Y); after one step the prover
publishes a commitment to W' and a proof that W' = W - 2^-k round(G_W) for the committed batch
(forward pass with zkReLU, backward pass masked by the same sign bits, weight gradients, update).
The commitments hide W, W' and the batch; the verifier learns only that the step is honest.
Environment: HEZK_QUICK=1 for a smaller model.
"""
import dataclasses
import os
import time

import numpy as np

from proofs import ProofRejected
from proofs.layers import training as T


def main():
    quick = os.environ.get("HEZK_QUICK") == "1"
    sizes, batch = ((16, 8, 4), 8) if quick else ((64, 32, 10), 16)
    rng = np.random.default_rng(7)
    weights = [rng.integers(-40, 40, size=(sizes[i + 1], sizes[i])) for i in range(len(sizes) - 1)]
    x = rng.integers(0, 100, size=(batch, sizes[0]))
    y = rng.integers(-30, 30, size=(batch, sizes[-1]))
    spec = T.fit_spec(weights, x, y)
    print(f"MLP {' -> '.join(map(str, sizes))}, batch {batch}: shifts forward {spec.shift}, backward "
          f"{spec.grad_shift}, learning rate 2^-{spec.lr_shift}")

    trace = T.training_trace(weights, x, y, spec)
    new_weights = trace.new_weights_unpadded()
    changed = sum(int(np.count_nonzero(a != b)) for a, b in zip(new_weights, weights))
    print(f"one integer SGD step changes {changed} of {sum(w.size for w in weights)} weights")

    for zk in (False, True):
        start = time.perf_counter()
        committed = T.commit_step(trace, zk=zk)
        proof = T.prove_training_step(trace, committed, zk=zk)
        proved = time.perf_counter() - start
        start = time.perf_counter()
        T.verify_training_step(spec, committed, proof)
        checked = time.perf_counter() - start
        kind = "zero-knowledge" if zk else "non-hiding"
        print(f"{kind:>15}: commit + prove {proved:.2f} s, verify {checked:.2f} s, proof {proof.num_bytes / 1024:.0f} KiB")

    cheat = [w.copy() for w in trace.new_weights]
    cheat[0][0, 0] += 1  # a W' that is not the honest step
    bad = dataclasses.replace(trace, new_weights=tuple(cheat))
    committed = T.commit_step(bad, zk=True)
    try:
        T.verify_training_step(spec, committed, T.prove_training_step(bad, committed, zk=True))
        print("a wrong update was accepted (this must not happen)")
        raise SystemExit(1)
    except ProofRejected as error:
        print(f"a wrong update is rejected: {error}")


if __name__ == "__main__":
    main()
