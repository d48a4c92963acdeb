"""CKKS bootstrapping: time (one thread), precision (worst slot, bits), levels left and peak RSS.

Reference (same machine, /work/shared/PEERS.md): OpenFHE 1.6 bootstraps N = 2^16 with 2^15 slots in
14.1 s single thread at 16.3 bits with 7 levels left, 10.9 GB peak RSS.

    python benchmarks/bootstrap.py [--preset N16] [--slots 32768] [--toy | --precise] [--log-n 15]
                                   [--cts-levels 3 --stc-levels 3]

``--toy``: the insecure N = 2^12 test literal of tests/crypto/test_bootstrap.py (sparse secret h = 32,
20 levels), the size that fits a shared two-core machine; N16 needs about 40 rotation keys of 280 MB.
``--precise``: q_0 of 58 bits (q_0/Δ = 2^8) and 24 levels (BOOT_PRECISE of the tests): >= 20 bits full
slots, 6 levels left; ``--log-n`` runs either literal at another ring degree (same moduli: insecure).
``--cts-levels/--stc-levels``: level collapsing of the transforms (5/5 needs 28 rotation keys instead of 38:
what fits 12 GB at N16 with the 128-bit dense preset; 3 levels left).  Times are CPU (process_time) and wall.
"""
import argparse
import os
import resource
import sys
import time

if __name__ == "__main__":
    for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
        os.environ.setdefault(_var, "1")
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import numpy as np  # noqa: E402

from crypto import CKKSContext, CKKSParameters  # noqa: E402
from crypto.ckks.bootstrap import BootstrapConfig, BootstrapPlan  # noqa: E402
from crypto.ckks.precision import precision_bits  # noqa: E402

TOY = dict(log_n=12, log_q=[[30, 30]] + [[25, 26]] * 20, log_p=[30] * 6, log_scale=50, dnum=7,
           hamming_weight=32, insecure=True)
PRECISE = dict(log_n=12, log_q=[[29, 29]] + [[25, 26]] * 24, log_p=[30] * 6, log_scale=50, dnum=9,
               hamming_weight=32, insecure=True)
OPENFHE = dict(seconds=14.1, bits=16.3, levels_left=7, rss_gb=10.9)


def run(params, slots=None, seed=1, cts_levels=3, stc_levels=3):
    config = BootstrapConfig(slots=slots, cts_levels=cts_levels, stc_levels=stc_levels)
    plan = BootstrapPlan(params, config)
    t0, c0 = time.perf_counter(), time.process_time()
    ctx = CKKSContext.keygen(params, seed=seed, bootstrap=config)
    keygen, keygen_cpu = time.perf_counter() - t0, time.process_time() - c0
    key_bytes = ctx.relin_key.nbytes + sum(k.nbytes for k in ctx.galois_keys.keys.values())
    x = np.random.default_rng(seed).uniform(-1, 1, plan.slots)
    ct = ctx.encrypt(x, level=0)
    ctx.evaluator.bootstrap_plan()                      # the plan (matrices, polynomial) outside the timing
    t0, c0 = time.perf_counter(), time.process_time()
    out = ctx.evaluator.bootstrap(ct)
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    bits = precision_bits(x, ctx.decrypt(out))
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20       # KiB -> GiB
    return dict(plan=plan, keygen=keygen, keygen_cpu=keygen_cpu, key_gb=key_bytes / 2**30, seconds=seconds,
                cpu=cpu, bits=bits, levels_left=out.level, rss_gb=rss)


def q_budget(params, plan, levels_left=8, eval_scale_bits=None) -> str:
    """Bits of Q·P a bootstrap needs (levels at the preset's sizes, the levels the bootstrap consumes at
    ``eval_scale_bits`` each when given) against the 128-bit dense-ternary bound at this N."""
    from crypto.params import HE_STANDARD_128
    bits = [sum(np.log2(params.q_levels[lv])) for lv in range(len(params.q_levels))]
    per_level = eval_scale_bits or float(np.mean(bits[1:]))
    need = bits[0] + levels_left * params.log_scale + plan.levels_used * per_level \
        + sum(np.log2(params.p_moduli))
    return (f"{plan.levels_used} levels consumed + {levels_left} left at {per_level:.0f} bits/level: "
            f"log2(QP) = {need:.0f} bits vs the 128-bit dense-ternary bound {HE_STANDARD_128[params.log_n]} at "
            f"N=2^{params.log_n}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="N16")
    ap.add_argument("--slots", type=int, default=None)
    ap.add_argument("--toy", action="store_true")
    ap.add_argument("--precise", action="store_true")
    ap.add_argument("--log-n", type=int, default=None)
    ap.add_argument("--cts-levels", type=int, default=3)
    ap.add_argument("--stc-levels", type=int, default=3)
    args = ap.parse_args(argv)
    literal = TOY if args.toy else PRECISE if args.precise else None
    if literal is not None and args.log_n:
        literal = dict(literal, log_n=args.log_n)
    params = CKKSParameters.from_literal(literal) if literal else CKKSParameters.preset(args.preset)
    r = run(params, args.slots, cts_levels=args.cts_levels, stc_levels=args.stc_levels)
    print(f"{params!r}\n{r['plan']!r}")
    print(f"hezk:    bootstrap {r['seconds']:.2f} s wall, {r['cpu']:.2f} s CPU (keygen {r['keygen']:.1f} s wall, "
          f"{r['keygen_cpu']:.1f} s CPU, keys {r['key_gb']:.2f} GiB), precision {r['bits']:.1f} bits "
          f"(stated {r['plan'].precision_bits:.1f}), levels left {r['levels_left']}, peak RSS {r['rss_gb']:.2f} GB")
    print(f"needs:   {q_budget(params, r['plan'])}")
    print(f"OpenFHE: bootstrap {OPENFHE['seconds']} s, {OPENFHE['bits']} bits, {OPENFHE['levels_left']} levels "
          f"left, {OPENFHE['rss_gb']} GB (N = 2^16, 2^15 slots; PEERS.md)")
    return r


if __name__ == "__main__":
    main()
