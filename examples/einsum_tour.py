"""A tour of encrypted einsum: transpose, matmul, batched matmul, attention scores, a 1x1 convolution.

For each expression: plan it (no keys needed), print the plan (packing, strategy, rotations, depth),
check it on the plain backend (numpy, no encryption), then run it encrypted and compare with numpy.
Keys are generated once, for exactly the rotations the plans use.

    python examples/einsum_tour.py          # N=2^14 (128-bit secure)
    HEZK_QUICK=1 python examples/einsum_tour.py   # small ring, small sizes (insecure, fast)
"""
import os
import time

import numpy as np

import tensor_ops
from crypto import CKKSContext, CKKSParameters

QUICK = os.environ.get("HEZK_QUICK") == "1"


def workloads(rng):
    d = 4 if QUICK else 8
    image = rng.uniform(-1, 1, (3, d, d))
    return [
        ("transpose", "ij->ji", [rng.uniform(-1, 1, (d, 2 * d))], (True,)),
        ("matmul (encrypted x encrypted)", "ij,jk->ik", [rng.uniform(-1, 1, (d, d)), rng.uniform(-1, 1, (d, d))],
         (True, True)),
        ("matmul (encrypted x plaintext weights)", "ij,jk->ik",
         [rng.uniform(-1, 1, (d, d)), rng.uniform(-1, 1, (d, d))], (True, False)),
        ("batched matmul", "bij,bjk->bik", [rng.uniform(-1, 1, (2, d, d)), rng.uniform(-1, 1, (2, d, d))],
         (True, True)),
        ("attention scores", "bhqd,bhkd->bhqk", [rng.uniform(-1, 1, (1, 2, d, d)), rng.uniform(-1, 1, (1, 2, d, d))],
         (True, True)),
        ("1x1 convolution (plaintext kernel)", "chw,oc->ohw", [image, rng.uniform(-1, 1, (4, 3))], (True, False)),
    ]


def main():
    params = CKKSParameters.preset("TOY" if QUICK else "N14")
    print(f"parameters: {params}")
    rng = np.random.default_rng(2025)
    jobs = []
    for name, expr, arrays, enc in workloads(rng):
        plan = tensor_ops.plan(expr, *[a.shape for a in arrays], params=params, encrypted=enc, layouts="auto")
        print(f"\n=== {name}: {expr} ===")
        print(plan.explain(max_steps=12))
        simulated = tensor_ops.PlainBackend(params).run(plan, *arrays)
        print(f"plain backend (no keys) matches numpy: {np.allclose(simulated, np.einsum(expr, *arrays))}")
        np.testing.assert_allclose(simulated, np.einsum(expr, *arrays), rtol=1e-12, atol=1e-12)
        jobs.append((name, expr, arrays, enc, plan))

    rotations = sorted({k for *_, plan in jobs for k in plan.rotations()})
    start = time.perf_counter()
    ctx = CKKSContext.keygen(params, rotations=rotations)
    print(f"\nkeygen: {len(rotations)} rotation keys {rotations} in {time.perf_counter() - start:.2f} s")

    print(f"\n{'workload':40s} {'time (s)':>9s} {'rotations':>9s} {'depth':>5s} {'max rel error':>14s}")
    for name, expr, arrays, enc, plan in jobs:
        ops = [tensor_ops.encrypt(ctx, a, layout=lay) if e else a
               for a, e, lay in zip(arrays, enc, plan.input_layouts)]
        start = time.perf_counter()
        result = tensor_ops.einsum(expr, *ops)
        elapsed = time.perf_counter() - start
        want = np.einsum(expr, *arrays)
        err = np.max(np.abs(result.decrypt(ctx) - want)) / max(1.0, np.max(np.abs(want)))
        print(f"{name:40s} {elapsed:9.3f} {plan.cost()['rotations']:9d} {plan.depth():5d} {err:14.2e}")
        if err > 1e-4:
            raise SystemExit(f"{name}: error {err} above 1e-4")


if __name__ == "__main__":
    main()
