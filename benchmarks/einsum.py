"""Encrypted einsum benchmark: the EinHops workloads, large matmuls and a plain-matrix x encrypted-vector.

    python benchmarks/einsum.py [--quick] [--repeat 3] [--only mm8,mv64]

Each workload is planned once (client-side packing allowed: ``layouts="auto"``; planning time is
printed apart), keys are generated for exactly ``plan.rotations()``, and the server-side
``einsum(..., plan=plan)`` is timed: median of ``--repeat`` runs after a warm-up run (which also
encodes the plaintext masks/weights once; later runs reuse those encodings, as a server with fixed
weights would); single runs for the large matmuls. Printed per workload: median time, rotations used
(hoisted ones in brackets), number and bytes of rotation keys, depth, and the max error against numpy
relative to the result's magnitude.

Peers measured in the same run (single thread): TenSEAL (SEAL) ``CKKSVector.mm`` for the matrix-vector
product and ``dot`` for the 1024-element dot product, N = 2^14, coefficient moduli
[60, 40 x 6, 60], scale 2^40, Galois keys for all powers of two. EinHops figures come from the issue
(measured earlier on this machine, its default parameters) and are quoted, not re-measured.
Primitive timings (rotation, hoisted rotation, multiplies) are printed too: they calibrate
``tensor_ops.CostModel``.
"""
import argparse
import gc
import os
import statistics
import time

if __name__ == "__main__":  # one core, set before the libraries read it (never when imported: see _repo.py)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("NUMBA_NUM_THREADS", "1")

import numpy as np  # noqa: E402

import tensor_ops  # noqa: E402
from crypto import CKKSContext, CKKSParameters  # noqa: E402

EINHOPS_SECONDS = {"mm8-ee": 41.0, "bmm4x8x8": 59.0, "T8x16": 163.0, "dot1024": 23.0}
TARGETS = {"mm8-ee": 0.4, "mm8-ep": 0.4, "bmm4x8x8": 0.4, "T8x16": 0.4, "dot1024": 0.4, "mv64": 0.1}


def workloads(quick: bool):
    """(name, expression, shapes, encrypted flags, repeats override)."""
    big = [] if quick else [
        ("mm32-ee", "ij,jk->ik", [(32, 32), (32, 32)], (True, True), 1),
        ("mm32-ep", "ij,jk->ik", [(32, 32), (32, 32)], (True, False), 1),
        ("mm64-ee", "ij,jk->ik", [(64, 64), (64, 64)], (True, True), 1),
        ("mm64-ep", "ij,jk->ik", [(64, 64), (64, 64)], (True, False), 1),
    ]
    return [
        ("mm8-ee", "ij,jk->ik", [(8, 8), (8, 8)], (True, True), None),
        ("mm8-ep", "ij,jk->ik", [(8, 8), (8, 8)], (True, False), None),
        ("bmm4x8x8", "bij,bjk->bik", [(4, 8, 8), (4, 8, 8)], (True, True), None),
        ("T8x16", "ij->ji", [(8, 16)], (True,), None),
        ("dot1024", "i,i->", [(1024,), (1024,)], (True, True), None),
        ("mv64", "ik,k->i", [(64, 64), (64,)], (False, True), None),
    ] + big


def _median(fn, repeats):
    fn()  # warm-up: numba compilation, cached plaintext encodings
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def key_bytes(ctx) -> int:
    return sum(k.b.nbytes + k.a.nbytes for k in ctx.galois_keys.keys.values())


def run_hezk(params, name, expr, shapes, enc, repeats, layouts):
    rng = np.random.default_rng(1)
    arrays = [rng.uniform(-1, 1, s) for s in shapes]
    t0 = time.perf_counter()
    plan = tensor_ops.plan(expr, *shapes, params=params, encrypted=enc, layouts=layouts)
    plan_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    ctx = CKKSContext.keygen(params, rotations=plan.rotations())
    keygen_s = time.perf_counter() - t0
    ops = [tensor_ops.encrypt(ctx, a, layout=lay) if e else a for a, e, lay in zip(arrays, enc, plan.input_layouts)]
    seconds, result = _median(lambda: tensor_ops.einsum(expr, *ops, plan=plan), repeats)
    want = np.einsum(expr, *arrays)
    err = float(np.max(np.abs(result.decrypt(ctx) - want)) / max(1.0, np.max(np.abs(want))))
    cost = plan.cost()
    row_major = tuple(tensor_ops.SlotLayout.compact(s, params.slots) if e else None for s, e in zip(shapes, enc))
    row = dict(name=name, expr=expr, packing="row-major" if plan.input_layouts == row_major else "client",
               seconds=seconds, rotations=cost["rotations"], hoisted=cost["hoisted_rotations"],
               keys=cost["rotation_keys"], key_mb=key_bytes(ctx) / 2**20, depth=plan.depth(), err=err,
               plan_s=plan_s, keygen_s=keygen_s, strategy=plan.notes[0] if plan.notes else "")
    del ctx, ops, result
    gc.collect()
    return row


def primitive_timings(params, repeats):
    """Median seconds of one rotation, one of 8 hoisted rotations, ct*ct (relinearized), ct*pt, rescale."""
    ctx = CKKSContext.keygen(params, rotations=list(range(1, 9)))
    ev = ctx.evaluator
    ct = ctx.encrypt(np.ones(params.slots) * 0.5)
    vec = np.full(params.slots, 0.25)
    pt = ev.encode(vec, ct.level, float(np.prod([float(q) for q in params.q_levels[ct.level]])))
    product = ev.mul(ct, pt)
    out = {
        "rotation": _median(lambda: ev.rotate(ct, 1), repeats)[0],
        "hoisted rotation (of 8)": _median(lambda: ev.rotate_hoisted(ct, list(range(1, 9))), repeats)[0] / 8,
        "ct*ct + relin": _median(lambda: ev.mul(ct, ct), repeats)[0],
        "ct*pt (encoded)": _median(lambda: ev.mul(ct, pt), repeats)[0],
        "rescale": _median(lambda: ev.rescale(product), repeats)[0],
    }
    del ctx
    gc.collect()
    return out


def run_tenseal(repeats):
    """TenSEAL: 64x64 plain matrix x encrypted vector (CKKSVector.mm) and the 1024-element dot product."""
    try:
        import tenseal as ts
    except ImportError:
        return {}
    ctx = ts.context(ts.SCHEME_TYPE.CKKS, 16384, coeff_mod_bit_sizes=[60] + [40] * 6 + [60])
    ctx.global_scale = 2**40
    ctx.generate_galois_keys()
    rng = np.random.default_rng(1)
    m, x = rng.uniform(-1, 1, (64, 64)), rng.uniform(-1, 1, 64)
    v = ts.ckks_vector(ctx, x.tolist())
    mv_s, mv = _median(lambda: v.mm(m.T.tolist()), repeats)
    a, b = rng.uniform(-1, 1, 1024), rng.uniform(-1, 1, 1024)
    va, vb = ts.ckks_vector(ctx, a.tolist()), ts.ckks_vector(ctx, b.tolist())
    dot_s, dot = _median(lambda: va.dot(vb), repeats)
    return {"mv64": (mv_s, float(np.max(np.abs(np.array(mv.decrypt()) - m @ x)))),
            "dot1024": (dot_s, float(abs(dot.decrypt()[0] - a @ b)))}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", default=os.environ.get("HEZK_QUICK") == "1",
                        help="TOY parameters, small workloads only (a smoke run, insecure)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--only", default="", help="comma-separated workload names")
    parser.add_argument("--row-major", action="store_true", help="also time the row-major (no client packing) plans")
    parser.add_argument("--no-peers", action="store_true")
    args = parser.parse_args()
    params = CKKSParameters.preset("TOY" if args.quick else "N14")
    print(f"parameters: {params}")

    prims = primitive_timings(params, args.repeat)
    print("\nprimitive timings (ms):  " + ",  ".join(f"{k} {v * 1e3:.1f}" for k, v in prims.items()))
    rot = prims["rotation"]
    print(f"cost-model ratios (rotation = 1): hoisted {prims['hoisted rotation (of 8)'] / rot:.2f}, "
          f"ct*ct {prims['ct*ct + relin'] / rot:.2f}, ct*pt {prims['ct*pt (encoded)'] / rot:.3f}")

    only = set(filter(None, args.only.split(",")))
    rows = []
    for name, expr, shapes, enc, rep in workloads(args.quick):
        if only and name not in only:
            continue
        for layouts in ("auto", None) if args.row_major else ("auto",):
            row = run_hezk(params, name, expr, shapes, enc, rep or args.repeat, layouts)
            rows.append(row)
            print(f"  {name:9s} {row['packing']:9s} {row['seconds']:8.3f} s  ({row['strategy'][:110]})", flush=True)

    peers = {} if args.no_peers or args.quick else run_tenseal(args.repeat)
    header = (f"\n{'workload':10s} {'expr':16s} {'packing':9s} {'median s':>9s} {'target':>7s} {'rotations':>12s} "
              f"{'keys':>5s} {'key MB':>8s} {'depth':>5s} {'max rel err':>11s} {'EinHops s':>9s} "
              f"{'TenSEAL s':>9s} {'vs TenSEAL':>10s} {'plan s':>7s} {'keygen s':>8s}")
    print(header)
    print("-" * len(header.strip()))
    for r in rows:
        target, peer, einhops = TARGETS.get(r["name"]), peers.get(r["name"]), EINHOPS_SECONDS.get(r["name"])
        rotations = f"{r['rotations']} ({r['hoisted']}h)"
        target_s = f"{target:.1f}" if target else "-"
        einhops_s = f"{einhops:.0f}" if einhops else "-"
        peer_s = f"{peer[0]:.3f}" if peer else "-"
        ratio = f"{peer[0] / r['seconds']:.2f}x" if peer else "-"
        print(f"{r['name']:10s} {r['expr']:16s} {r['packing']:9s} {r['seconds']:9.3f} {target_s:>7s} {rotations:>12s} "
              f"{r['keys']:5d} {r['key_mb']:8.1f} {r['depth']:5d} {r['err']:11.1e} {einhops_s:>9s} {peer_s:>9s} "
              f"{ratio:>10s} {r['plan_s']:7.2f} {r['keygen_s']:8.2f}")
    if peers:
        print("\nTenSEAL max abs errors: " + ", ".join(f"{k} {v[1]:.1e}" for k, v in peers.items()))
    print("(EinHops: figures from the issue, its default parameters on this machine; 32x32 and 64x64 aborted there.)")


if __name__ == "__main__":
    main()
