"""CKKS bootstrapping: time (one thread), precision (worst slot, bits), levels left and peak RSS.

Reference (same machine, /work/shared/PEERS.md): OpenFHE 1.6 bootstraps N = 2^16 with 2^15 slots in
14.1 s single thread at 16.3 bits with 7 levels left, 10.9 GB peak RSS.

    python benchmarks/bootstrap.py [--preset N16] [--slots 32768] [--toy | --precise | --n16] [--log-n 15]
                                   [--cts-levels 3 --stc-levels 3] [--no-arcsin] [--estimate] [--max-key-gb 12]

``--n16``: the 128-bit dense-ternary N = 2^16 figure (``N16_BOOT``, 3/3 levels, 40 keys of 208 MB; EvalMod
without the arcsin correction, which buys nothing where noise limits the precision: 8 levels left instead
of 6).  Measured 2026-11-28, one thread, shared two-core machine (load ~1.9), under ``ulimit -v`` 14 GiB:
bootstrap 24.9 s (CoeffToSlot ~11.7, EvalMod ~10.6, SlotToCoeff ~3.4), keygen 22.9 s, 8 levels left, peak
RSS (VmHWM) 10.6 GB, but 1.6 bits: EvalMod at Δ = 2^50 with a dense secret (K = 542, 7 double angles) keeps
~13.5 bits of the cosine and the output multiplies its error by q_0/(2πΔ)·sqrt(N) ≈ 2^15 (stated: 0.7 bits,
``BootstrapPlan.precision_bits``).  The N16 preset itself (dnum=8) needs 40 keys of 281 MB: 11.2 GB of keys,
over 14 GiB of address space in CoeffToSlot.
``--estimate``: the plan and the key memory (bytes per switching key x keys) only, no keygen: run it first
at N16 (40 keys of 281 MB with 3/3 levels: 11.2 GB; ``--max-key-gb`` refuses a run whose keys exceed it).

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
#: 128-bit dense-ternary N = 2^16 for bootstrapping: the N16 preset with one [23, 28] level less and dnum=6
#: (digits <= 10 primes, 255 bits, under P = 8 x 31 bits + 20): switching keys of 6 x 66 limbs instead of 8 x 67
#: (208 MB instead of 281 MB each: the 40 keys of the 3/3 plan in 8.3 GB instead of 11.2 GB), log2(QP) = 1708
#: <= 1747, 28 levels: 3/3 transform levels without the arcsin correction leave 8.
N16_BOOT = dict(log_n=16, log_q=[[30, 30]] + [[25, 26]] * 12 + [[24, 27]] * 12 + [[23, 28]] * 4,
                log_p=[31] * 8, log_scale=50, dnum=6)
OPENFHE = dict(seconds=14.1, bits=16.3, levels_left=7, rss_gb=10.9)


def key_estimate(params, plan) -> tuple[int, int]:
    """(switching keys, bytes each) that ``keygen(bootstrap=...)`` makes: relinearization, conjugation and
    one per rotation step; each holds dnum digits x (Q and P limbs) x N residues, two uint32 parts."""
    keys = 2 + len(plan.rotation_steps)
    return keys, 2 * 4 * len(params.digits) * len(params.moduli) * params.n


def peak_rss_gb() -> float:
    """VmHWM of this process (GB, 10^9 bytes), or ru_maxrss where /proc is absent."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024 / 1e9
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9


def run(params, slots=None, seed=1, cts_levels=3, stc_levels=3, arcsin=True):
    config = BootstrapConfig(slots=slots, cts_levels=cts_levels, stc_levels=stc_levels, arcsin=arcsin)
    plan = BootstrapPlan(params, config)
    keys, per_key = key_estimate(params, plan)
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
    return dict(plan=plan, keygen=keygen, keygen_cpu=keygen_cpu, key_gb=key_bytes / 1e9, seconds=seconds,
                cpu=cpu, bits=bits, levels_left=out.level, rss_gb=peak_rss_gb(), keys=keys,
                key_estimate_gb=keys * per_key / 1e9, load=os.getloadavg())


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
    ap.add_argument("--n16", action="store_true", help="N16_BOOT: the 128-bit N = 2^16 bootstrapping literal (implies --no-arcsin)")
    ap.add_argument("--no-arcsin", action="store_true", help="EvalMod without y + y^3/6 (two levels fewer)")
    ap.add_argument("--log-n", type=int, default=None)
    ap.add_argument("--cts-levels", type=int, default=3)
    ap.add_argument("--stc-levels", type=int, default=3)
    ap.add_argument("--estimate", action="store_true")
    ap.add_argument("--max-key-gb", type=float, default=None)
    args = ap.parse_args(argv)
    literal = TOY if args.toy else PRECISE if args.precise else N16_BOOT if args.n16 else None
    if literal is not None and args.log_n:
        literal = dict(literal, log_n=args.log_n)
    params = CKKSParameters.from_literal(literal) if literal else CKKSParameters.preset(args.preset)
    arcsin = not (args.no_arcsin or args.n16)
    plan = BootstrapPlan(params, BootstrapConfig(slots=args.slots, cts_levels=args.cts_levels,
                                                 stc_levels=args.stc_levels, arcsin=arcsin))
    keys, per_key = key_estimate(params, plan)
    print(f"{params!r}\n{plan!r}\nkeys:    {keys} switching keys (relin, conjugation, {keys - 2} rotations) x "
          f"{per_key / 1e6:.0f} MB = {keys * per_key / 1e9:.2f} GB", flush=True)
    if args.estimate:
        print(f"needs:   {q_budget(params, plan)}")
        return dict(plan=plan, keys=keys, key_estimate_gb=keys * per_key / 1e9)
    if args.max_key_gb is not None and keys * per_key / 1e9 > args.max_key_gb:
        raise SystemExit(f"keys need {keys * per_key / 1e9:.2f} GB > --max-key-gb {args.max_key_gb}")
    r = run(params, args.slots, cts_levels=args.cts_levels, stc_levels=args.stc_levels, arcsin=arcsin)
    print(f"hezk:    bootstrap {r['seconds']:.2f} s wall, {r['cpu']:.2f} s CPU (keygen {r['keygen']:.1f} s wall, "
          f"{r['keygen_cpu']:.1f} s CPU, keys {r['key_gb']:.2f} GB), precision {r['bits']:.1f} bits "
          f"(stated {r['plan'].precision_bits:.1f}), levels left {r['levels_left']}, peak RSS (VmHWM) "
          f"{r['rss_gb']:.2f} GB, load average {r['load'][0]:.2f}")
    print(f"needs:   {q_budget(params, r['plan'])}")
    print(f"threads: OMP {os.environ.get('OMP_NUM_THREADS')}, NUMBA {os.environ.get('NUMBA_NUM_THREADS')}, "
          f"OPENBLAS {os.environ.get('OPENBLAS_NUM_THREADS')}; load average {' '.join(f'{x:.2f}' for x in r['load'])}")
    print(f"OpenFHE: bootstrap {OPENFHE['seconds']} s, {OPENFHE['bits']} bits, {OPENFHE['levels_left']} levels "
          f"left, {OPENFHE['rss_gb']} GB (N = 2^16, 2^15 slots; PEERS.md)")
    return r


if __name__ == "__main__":
    main()
