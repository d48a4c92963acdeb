"""The two strategies of a model-path affine stage (``tensor_ops.plan.affine``), measured against the planner's
estimates: does the CostModel's choice match the measured order?

    python benchmarks/affine_strategies.py [--repeat 5] [--log-n 13]

128-bit parameters of depth 1 with at least 2^(log_n - 1) slots.

Each case is one affine stage on the packed layout (``block`` slots per sample, a full ciphertext), run by
``EncryptedModel.forward`` under each strategy (forced with ``stage_plans(force=...)``), warm, best of
``--repeat`` in CPU time of this process (one kernel thread); the table gives both estimates (CostModel units,
new keys included), both times, which the cost model chose and which was faster.
"""
import argparse
import math
import os
import sys
import time
from dataclasses import replace

if __name__ == "__main__":
    for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS", "HEZK_THREADS"):
        os.environ.setdefault(_var, "1")
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import numpy as np  # noqa: E402

from crypto import CKKSContext  # noqa: E402
from tensor_ops.inference import EncryptedModel  # noqa: E402
from tensor_ops.model_plan import ActivationStage, choose_parameters, stage_plans  # noqa: E402
from tensor_ops.nn import Linear, Sequential  # noqa: E402
from tensor_ops.packing import packed_stages  # noqa: E402


def cases(rng):
    dense = lambda n_out, n_in: rng.normal(size=(n_out, n_in)) / math.sqrt(n_in)  # noqa: E731
    return [("dense 16x16, block 64", dense(16, 16), 64),
            ("dense 32x32, block 64", dense(32, 32), 64),
            ("dense 64x64, block 128", dense(64, 64), 128),
            ("dense 10x32, block 64", dense(10, 32), 64),
            ("one diagonal 16x16, block 64", np.diag(rng.normal(size=16)), 64),
            ("band of 3, 32x32, block 64", np.triu(np.tril(dense(32, 32), 1), -1), 64)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--log-n", type=int, default=13, help="at least this ring (128-bit parameters of depth 1)")
    args = parser.parse_args()
    params = choose_parameters(1, min_slots=1 << (args.log_n - 1))
    rng = np.random.default_rng(0)
    print(f"{params!r}, one kernel thread, best of {args.repeat} (CPU seconds); load {os.getloadavg()}")
    print(f"{'case':32} {'est packed':>10} {'est einsum':>10} {'packed s':>9} {'einsum s':>9}  chosen / faster")
    for name, weights, block in cases(rng):
        model = Sequential([Linear(weights, rng.normal(size=len(weights)) * 0.1)], input_shape=(weights.shape[1],))
        stages, _ = packed_stages(model, (weights.shape[1],), {}, ActivationStage)
        plan = model.plan(params=params).with_block(block)
        variants, times = {}, {}
        for strategy in ("packed", "einsum"):
            plans, _ = stage_plans(stages, weights.shape[1], slots=params.slots, block=block, force={0: strategy})
            variants[strategy] = replace(plan, stages=plans)
        steps = sorted(set(variants["packed"].rotations) | set(variants["einsum"].rotations))
        ctx = CKKSContext.keygen(params, rotations=steps, seed=0)
        x = rng.normal(size=(params.slots // block, weights.shape[1]))
        for strategy, p in variants.items():
            server = EncryptedModel(model, p, ctx)
            ct = ctx.encrypt(p.pack(x)[0], level=p.input_level)
            got = p.unpack([ctx.decrypt(server.forward(ct))], len(x))   # warm: the diagonals encoded once
            assert np.abs(got - model.forward(x)).max() < 1e-4, strategy
            best = math.inf
            for _ in range(args.repeat):
                start = time.process_time()
                server.forward(ct)
                best = min(best, time.process_time() - start)
            times[strategy] = best
        priced = dict(variants["packed"].stages[0].priced)
        chosen = min(priced, key=lambda s: (math.inf if priced[s] is None else priced[s], s != "packed"))
        faster = min(times, key=times.get)
        print(f"{name:32} {priced['packed']:>10.2f} {priced['einsum']:>10.2f} {times['packed']:>9.4f} "
              f"{times['einsum']:>9.4f}  {chosen} / {faster}{'' if chosen == faster else '  (MISMATCH)'}")
    whole_model(args.repeat)


def whole_model(repeat):
    """A 64-16-16-4 MLP with square activations at its automatic 128-bit parameters: the plan as the cost model
    chose (einsum for the 16-wide stages) against every stage forced packed, server seconds per ciphertext."""
    from tensor_ops.nn import Square
    rng = np.random.default_rng(1)
    model = Sequential([Linear(rng.normal(size=(16, 64)) / 8, rng.normal(size=16) * 0.1), Square(),
                        Linear(rng.normal(size=(16, 16)) / 4, rng.normal(size=16) * 0.1), Square(),
                        Linear(rng.normal(size=(4, 16)) / 4)], input_shape=(64,))
    chosen = model.plan()
    stages, block = packed_stages(model, (64,), {}, ActivationStage)
    force = {i: "packed" for i, s in enumerate(chosen.stages) if s.kind == "affine"}
    plans, _ = stage_plans(stages, 64, slots=chosen.params.slots, block=block, force=force)
    packed = replace(chosen, stages=plans)
    ctx = CKKSContext.keygen(chosen.params, rotations=sorted(set(chosen.rotations) | set(packed.rotations)), seed=0)
    x = rng.normal(size=(chosen.batch, 64)) * 0.5
    print(f"\nwhole model 64-16-16-4 (square), {chosen.params!r}: strategies "
          f"{[s.strategy for s in chosen.stages if s.kind == 'affine']}")
    for name, p in (("as chosen", chosen), ("all packed", packed)):
        server = EncryptedModel(model, p, ctx)
        ct = ctx.encrypt(p.pack(x)[0], level=p.input_level)
        error = np.abs(p.unpack([ctx.decrypt(server.forward(ct))], len(x)) - model.forward(x)).max()
        best = math.inf
        for _ in range(repeat):
            start = time.process_time()
            server.forward(ct)
            best = min(best, time.process_time() - start)
        print(f"  {name:10} {best:.4f} s per ciphertext, {len(p.rotations)} rotation keys, max error {error:.2g}")


if __name__ == "__main__":
    main()
