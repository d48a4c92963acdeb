"""A 20-layer polynomial MLP evaluated encrypted, deeper than its parameters' levels: the model compiler
(``Sequential.plan``) places the fewest bootstraps (``tensor_ops.bootstrap_placement``), prices and prints
them, the client makes their keys and the server runs them (``tensor_ops.inference``); checked against numpy.

Each layer is x -> p(W x + b) with p(t) = t + c·t², W 0.8 times a random orthogonal matrix: 3 levels a layer
(the affine map, then p), 60 in all, against the parameters' 24.  The full-slot bootstrap
(``crypto.ckks.bootstrap``, two transform levels each way, no arcsin correction) refreshes to 10 levels.

INSECURE toy parameters (N = 2^12, sparse secret of weight 32, 24 levels of two 25/26-bit primes at
scale 2^50), chosen so the example runs in about a minute on one core; real parameters for
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

from crypto import CKKSParameters  # noqa: E402
from crypto.ckks.bootstrap import BootstrapConfig  # noqa: E402
from tensor_ops.activations import PolyActivation  # noqa: E402
from tensor_ops.inference import Client, Server  # noqa: E402
from tensor_ops.nn import Activation, Linear, Sequential  # noqa: E402

PARAMS = dict(log_n=12, log_q=[[30, 30]] + [[25, 26]] * 24, log_p=[30] * 6, log_scale=50, dnum=9,
              hamming_weight=32, insecure=True)
FEATURES, C = 8, 0.3
#: two transform levels each way, no arcsin correction: 14 levels a bootstrap, 10 left at 24 levels
BOOT = BootstrapConfig(cts_levels=2, stc_levels=2, arcsin=False)


def make_network(layers: int, seed: int) -> Sequential:
    """``layers`` x (Linear: W 0.8 times a random orthogonal matrix, b small; t -> t + C t²)."""
    rng = np.random.default_rng(seed)
    stack = []
    for _ in range(layers):
        q, _ = np.linalg.qr(rng.normal(size=(FEATURES, FEATURES)))
        stack += [Linear(0.8 * q, rng.uniform(-0.1, 0.1, FEATURES)),
                  Activation(PolyActivation("t+0.3t^2", (0.0, 2.0, 4 * C), radius=2.0))]  # u = t/2 on [-2, 2]
    return Sequential(stack, input_shape=(FEATURES,))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # HEZK_QUICK=1 (the test suite): 10 layers, 31 levels, one bootstrap
    ap.add_argument("--layers", type=int, default=10 if os.environ.get("HEZK_QUICK") else 20)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    params = CKKSParameters.from_literal(PARAMS)
    model = make_network(args.layers, args.seed)
    x = np.random.default_rng(args.seed + 1).uniform(-1, 1, (4, FEATURES))

    t0 = time.perf_counter()
    plan = model.plan(params=params, bootstrap=BOOT)
    print(f"{args.layers} layers, depth {plan.depth}; parameters: {params.max_level} levels (INSECURE toy: "
          f"N = 2^{params.log_n}, sparse secret)\n{plan.bootstrap_plan!r}")
    print("\n".join(line for line in plan.explain().splitlines() if "bootstrap" in line or "rotation keys" in line))
    client = Client(plan=plan, seed=args.seed, allow_insecure=True)  # the toy ring above: insecure
    server = Server(model, client.public_context())
    setup = time.perf_counter() - t0
    executed = []
    ev, original = server.context.evaluator, server.context.evaluator.bootstrap

    def counted(ct, config=None):
        executed.append(ct.level)
        return original(ct, config)

    ev.bootstrap = counted
    t0 = time.perf_counter()
    y = client.decrypt(server.evaluate(client.encrypt(x)))
    seconds = time.perf_counter() - t0

    expected = model.forward(x)
    err = float(np.abs(y - expected).max())
    print(f"encrypted {args.layers}-layer MLP, {len(x)} samples in one ciphertext: {len(executed)} bootstraps "
          f"(entered at levels {executed}), {seconds:.1f} s (plan + keygen {setup:.1f} s), output level "
          f"{plan.output_level}, max |error| vs numpy {err:.2e} ({-np.log2(err):.1f} bits), max |output| "
          f"{np.abs(expected).max():.2f}")
    assert len(executed) == len(plan.bootstraps)
    assert err < 1e-3, err
    return dict(error=err, bootstraps=len(executed), seconds=seconds, levels=params.max_level)


if __name__ == "__main__":
    main()
