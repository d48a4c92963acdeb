"""A 20-layer polynomial MLP evaluated encrypted, deeper than its parameters' levels: bootstraps placed
automatically (``tensor_ops.bootstrap_placement``), the result checked against numpy.

Each layer is x -> p(W x + b) with p(t) = t + c·t², computed as t·(1 + c·t): the two affine maps
(W, b) and (c·W, c·b + 1) share the rotations of one diagonal-method product (Halevi-Shoup), then one
ciphertext product: 2 levels a layer, 40 in all, against the parameters' 24.  The vector x (8 features)
is held twice, [x, x, 0, ...], so that rotations by 1..7 read slots 0..7 cyclically; the diagonals
are zero beyond slot 8, and one rotation by -8 copies the layer's output back into slots 8..15.  The
64-slot sparse bootstrap (``crypto.ckks.bootstrap``) refreshes it to 10 levels.

INSECURE toy parameters (N = 2^12, sparse secret of weight 32, 24 levels of two 25/26-bit primes at
scale 2^50), chosen so the example runs in well under a minute on one core; real parameters for
bootstrapping start at N = 2^15 (benchmarks/bootstrap.py).

    python examples/deep_mlp_bootstrap.py [--layers 20] [--seed 0]
"""
import argparse
import os
import sys
import time

if __name__ == "__main__":
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import numpy as np  # noqa: E402

from crypto import CKKSContext, CKKSParameters  # noqa: E402
from crypto.ckks.bootstrap import BootstrapConfig, BootstrapPlan  # noqa: E402
from tensor_ops.bootstrap_placement import bootstrap_cost, place_bootstraps, stage_cost_model  # noqa: E402

PARAMS = dict(log_n=12, log_q=[[30, 30]] + [[25, 26]] * 24, log_p=[30] * 6, log_scale=50, dnum=9,
              hamming_weight=32, insecure=True)
FEATURES, SLOTS, C = 8, 64, 0.3
#: two transform levels each way, no arcsin correction: 14 levels a bootstrap, 10 left at 24 levels
BOOT = BootstrapConfig(slots=SLOTS, cts_levels=2, stc_levels=2, arcsin=False)


def make_network(layers: int, seed: int):
    """[(W, b)]: W 0.8 times a random orthogonal matrix, b small."""
    rng = np.random.default_rng(seed)
    net = []
    for _ in range(layers):
        q, _ = np.linalg.qr(rng.normal(size=(FEATURES, FEATURES)))
        net.append((0.8 * q, rng.uniform(-0.1, 0.1, FEATURES)))
    return net


def reference(net, x):
    for w, b in net:
        t = w @ x + b
        x = t + C * t * t
    return x


def diagonals(w):
    """d_k[j] = W[j, (j + k) mod n]: W x = Σ_k d_k ⊙ roll(x, -k)."""
    n = len(w)
    return [np.array([w[j, (j + k) % n] for j in range(n)]) for k in range(n)]


def twice(v):
    return np.concatenate([v, v])


def encrypted_layer(ev, ct, w, b):
    """p(W x + b) = t·(1 + C t), t = W x + b: two levels; input and output [x, x, 0, ...]."""
    rots = ev.rotate_hoisted(ct, list(range(1, FEATURES)))
    rots[0] = ct
    outs = []
    for mat, bias in ((w, b), (C * w, C * b + 1)):
        acc = None
        for k, d in enumerate(diagonals(mat)):
            term = ev.mul(rots[k], d)
            acc = term if acc is None else ev.add(acc, term)
        acc = ev.rescale(acc)
        outs.append(ev.add(acc, bias))
    out = ev.mul_rescale(outs[0], outs[1])                  # in slots 0..7, zero after
    return ev.add(out, ev.rotate(out, -FEATURES))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # HEZK_QUICK=1 (the test suite): 14 layers, 28 levels, one bootstrap
    ap.add_argument("--layers", type=int, default=14 if os.environ.get("HEZK_QUICK") else 20)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    params = CKKSParameters.from_literal(PARAMS)
    net = make_network(args.layers, args.seed)
    x = np.random.default_rng(args.seed + 1).uniform(-1, 1, FEATURES)

    t0 = time.perf_counter()
    boot = BootstrapPlan(params, BOOT)
    layer_counts = {"hoisted_rotations": FEATURES - 1, "rotations": 1, "pt_mults": 2 * FEATURES,
                    "additions": 2 * FEATURES + 3,
                    "rescales": 3, "ct_mults": 1}
    placement = place_bootstraps([2] * args.layers, boot.levels_left, input_level=params.max_level,
                                 stage_cost=stage_cost_model(params, lambda i: layer_counts),
                                 bootstrap_cost=bootstrap_cost(boot))
    print(f"{args.layers} layers of depth 2 = {2 * args.layers} levels; parameters: {params.max_level} levels "
          f"(INSECURE toy: N = 2^{params.log_n}, sparse secret)\n{boot!r}\n{placement.explain()}")

    ctx = CKKSContext.keygen(params, seed=args.seed, bootstrap=BOOT, rotations=list(range(1, FEATURES)) + [-FEATURES])
    ev = ctx.evaluator
    setup = time.perf_counter() - t0
    t0 = time.perf_counter()
    ct = ctx.encrypt(twice(x))
    bootstraps = set(placement.before)
    for i, (w, b) in enumerate(net):
        if i in bootstraps:
            ct = ev.bootstrap(ct)
            print(f"  layer {i:2d}: bootstrapped, level {ct.level}")
        ct = encrypted_layer(ev, ct, w, b)
    seconds = time.perf_counter() - t0

    got = ctx.decrypt(ct)[:FEATURES].real
    expected = reference(net, x)
    err = float(np.abs(got - expected).max())
    print(f"encrypted {args.layers}-layer MLP: {len(bootstraps)} bootstraps, {seconds:.1f} s "
          f"(plan + keygen {setup:.1f} s), output level {ct.level}, max |error| vs numpy {err:.2e} "
          f"({-np.log2(err):.1f} bits), max |output| {np.abs(expected).max():.2f}")
    assert ct.level == placement.output_level
    assert err < 1e-3, err
    return dict(error=err, bootstraps=len(bootstraps), seconds=seconds, levels=params.max_level)


if __name__ == "__main__":
    main()
