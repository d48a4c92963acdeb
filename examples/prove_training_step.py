"""Prove one SGD training step of a small quantized ReLU MLP, and an inference, with zero knowledge.

The model owner commits to the weights W, the data owner to a batch (X, Y); after one step the prover
publishes a commitment to W' and a proof that W' = W - 2^-k round(G_W) for the committed batch
(forward pass with zkReLU, backward pass masked by the same sign bits, weight gradients, update).
The commitments hide W, W' and the batch, and every value the proof states is masked: the verifier
learns only that the step is honest. The same machinery proves an inference y = model(x) with private
weights (and, optionally, a private input) where only y is public.
Environment: HEZK_QUICK=1 for a smaller model.
"""
import dataclasses
import os
import time

import numpy as np

import proofs
from proofs import ProofRejected
from proofs.layers import step_proof as S
from proofs.layers import training as T


def numpy_step(weights, x, y, spec):
    """The integer SGD step written out with numpy alone (what the proof's W' must equal bit for bit)."""
    def rescale(v, shift):  # round(v / 2^shift), halves up
        return (v + (1 << shift >> 1)) >> shift if shift else v
    acts, masks = [x], []
    for i, w in enumerate(weights):
        z = rescale(acts[-1] @ w.T, spec.shift)
        if i + 1 < len(weights):
            masks.append(z >= 0)
            acts.append(np.where(masks[-1], z, 0))
    grad = z - y
    new = [None] * len(weights)
    for i in range(len(weights) - 1, -1, -1):
        new[i] = weights[i] - rescale(grad.T @ acts[i], spec.lr_shift)
        if i:
            grad = np.where(masks[i - 1], rescale(grad @ weights[i], spec.grad_shift), 0)
    return new


def numpy_forward(weights, x, spec):
    """The integer forward pass with numpy alone: z_i = round(a_i W_i^T / 2^shift), a_(i+1) = ReLU(z_i)."""
    a = x
    for i, w in enumerate(weights):
        z = (a @ w.T + (1 << spec.shift >> 1)) >> spec.shift if spec.shift else a @ w.T
        a = np.maximum(z, 0)
    return z


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
    assert all(np.array_equal(a, b) for a, b in zip(new_weights, numpy_step(weights, x, y, spec)))
    changed = sum(int(np.count_nonzero(a != b)) for a, b in zip(new_weights, weights))
    print(f"one integer SGD step changes {changed} of {sum(w.size for w in weights)} weights "
          "(equal to the numpy reference step)")

    for zk in (False, True):
        start = time.perf_counter()
        committed = S.commit_step(trace, zk=zk)
        proof = S.prove_training_step(trace, committed, zk=zk)
        proved = time.perf_counter() - start
        start = time.perf_counter()
        S.verify_training_step(spec, committed, proof)
        checked = time.perf_counter() - start
        kind = "zero-knowledge" if zk else "non-hiding"
        print(f"{kind:>15}: commit + prove {proved:.2f} s, verify {checked:.2f} s, proof {proof.num_bytes / 1024:.0f} KiB")
    # the same zero-knowledge proof over hiding Basefold stores, all opened in one batch: smaller proofs for a
    # slower prover (784->128->10 at batch 64: 0.7 MB instead of 2.6 MB; benchmarks/proofs_training.py)
    start = time.perf_counter()
    committed = proofs.commit_step(trace, params=proofs.basefold_training_params())
    proof = proofs.prove_training_step(trace, committed)
    proved = time.perf_counter() - start
    start = time.perf_counter()
    proofs.verify_training_step(spec, committed, proof)
    checked = time.perf_counter() - start
    print(f"{'zk, Basefold':>15}: commit + prove {proved:.2f} s, verify {checked:.2f} s, proof "
          f"{proof.num_bytes / 1024:.0f} KiB")

    cheat = [w.copy() for w in trace.new_weights]
    cheat[0][0, 0] += 1  # a W' that is not the honest step
    bad = dataclasses.replace(trace, new_weights=tuple(cheat))
    committed = S.commit_step(bad, zk=True)
    try:
        S.verify_training_step(spec, committed, S.prove_training_step(bad, committed, zk=True))
        print("a wrong update was accepted (this must not happen)")
        raise SystemExit(1)
    except ProofRejected as error:
        print(f"a wrong update is rejected: {error}")

    # inference with private weights and a private input: only the output is public
    forward = T.forward_trace(weights, x, spec)
    committed = S.commit_forward(forward, zk=True, private_input=True)
    output = S.forward_output(forward)
    proof = S.prove_forward(forward, committed, zk=True)
    S.verify_forward(spec, committed, output, proof)
    assert np.array_equal(output, numpy_forward(weights, x, spec)), "the proven output is the numpy forward pass"
    print(f"inference proof (weights and input hidden, output public): {proof.num_bytes / 1024:.0f} KiB, verified")


if __name__ == "__main__":
    main()
