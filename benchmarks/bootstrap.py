"""CKKS bootstrapping: time (one thread), precision (worst slot, bits), levels left and peak RSS.

Reference (same machine, /work/shared/PEERS.md): OpenFHE 1.6 bootstraps N = 2^16 with 2^15 slots in
14.1 s single thread at 16.3 bits on random slots with 7 levels left, 10.9 GB peak RSS.

    python benchmarks/bootstrap.py [--preset N16_BOOT] [--slots 32768] [--toy | --precise | --n16] [--log-n 15]
                                   [--cts-levels 3 --stc-levels 3] [--no-arcsin] [--encapsulation auto|none|H]
                                   [--estimate] [--max-key-gb 12] [--single-hoisting]

Default: the 128-bit ``N16_BOOT`` preset (Δ = 2^60, q_0/Δ ≈ 2^8.5, 23 levels, P = 9 primes, dnum 6) with
sparse-secret encapsulation (h = 32: K = 18; EvalMod degree 28 with 4 double angles), CoeffToSlot taking
ModRaise's output without a rescale of its own, and without the arcsin correction: 15 levels used, 8 left.
Measured 2026-11-28, one thread, two-core machine (load ~1.0): bootstrap 13.5-14.7 s over five runs with glibc's
default allocator, 12.2 s with freed memory kept (``hezk.memory.reuse_freed_memory``: the 25-60 MB arrays of every
operation reuse pages already faulted in; 1-2 s of system time less), both the best of three after an untimed
setup bootstrap (18.2 s before 252 of the 316 CoeffToSlot/SlotToCoeff diagonals, those of period 32 or 1024,
were encoded in the subring, the other 64 kept, and the BSGS giants aligned: one giant is 0), keygen 30 s (41
keys of 182 MB), 20.5 bits on uniform inputs in [-1, 1] (stated 14.3: the worst case, a constant input, whose
one large coefficient meets the sine's cubic error without arcsin), 8 levels left, peak RSS (VmHWM) 10.25 GB.

Measured 2026-12-06 after double hoisting (``--single-hoisting`` turns it off), integer Barrett key-switching
products and one CoeffToSlot conjugation instead of two, against the code before them (0e29ad7) in separate
processes, one thread, best of 3: on the machine at load ~1, 19.99 s against 21.70 s (-8%; CoeffToSlot 8.04 s
against 8.98, EvalMod 8.59 against 8.79, SlotToCoeff 3.03 against 3.60); at load 4-6 (wall time then mostly
waits: compare CPU) 19.8 / 20.4 s CPU against 22.3 / 22.8 s.  20.6 bits random (20.5 before), 14.29 bits worst
case (unchanged), 8 levels left, VmHWM 10.05 GB (9.76 before: the Q·P babies and the kept diagonals' P rows).
One 63-diagonal CoeffToSlot transform at the top level: 2.87 s CPU against 3.24 s; SlotToCoeff's at level 10:
1.16 s against 1.35 s.  OpenFHE is not run in the same process here: it needs ~11 GB next to hezk's ~10 GB,
more than the 23 GB machine shared by six sessions allows at once.

``--n16``: the earlier 128-bit N = 2^16 literal at Δ = 2^50 (``N16_DELTA50``, 28 levels, dnum 6, keys of
208 MB): without encapsulation (``--encapsulation none``) 1.6 bits (K = 542, 7 double angles: EvalMod's
noise times q_0/Δ·sqrt(N)), 20-25 s, 8 levels left, 10.6 GB; Δ = 2^50 caps it near 10 bits even encapsulated.
``--estimate``: the plan and the key memory (bytes per switching key x keys) only, no keygen
(``--max-key-gb`` refuses a run whose keys exceed it).

``--toy``: the insecure N = 2^12 test literal of tests/crypto/test_bootstrap.py (sparse secret h = 32,
20 levels), the size that fits a shared two-core machine; N16 needs about 40 rotation keys of 240 MB.
``--precise``: q_0 of 58 bits (q_0/Δ = 2^8) and 24 levels (BOOT_PRECISE of the tests): >= 20 bits full
slots, 6 levels left; ``--log-n`` runs either literal at another ring degree (same moduli: insecure).
``--cts-levels/--stc-levels``: level collapsing of the transforms (5/5 needs 28 rotation keys instead of 38,
4 levels more).  Times are CPU (process_time) and wall, the best of three bootstraps of one ciphertext after an
untimed one (the setup: it encodes and keeps the full-period diagonals).
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

import hezk.memory  # noqa: E402
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
N16_DELTA50 = dict(log_n=16, log_q=[[30, 30]] + [[25, 26]] * 12 + [[24, 27]] * 12 + [[23, 28]] * 4,
                log_p=[31] * 8, log_scale=50, dnum=6)
OPENFHE = dict(seconds=14.1, bits=16.3, levels_left=7, rss_gb=10.9)


def key_estimate(params, plan) -> tuple[int, int]:
    """(switching keys, bytes each) that ``keygen(bootstrap=...)`` makes: relinearization, conjugation, one per
    rotation step and the encapsulation's key back from the sparse secret (its key to it is tiny); each holds
    dnum digits x (Q and P limbs) x N residues, two uint32 parts."""
    keys = 2 + len(plan.rotation_steps) + (plan.encapsulation_weight is not None)
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


def run(params, slots=None, seed=1, cts_levels=3, stc_levels=3, arcsin=True, encapsulation="auto", repeats=3,
        double_hoisting=True):
    config = BootstrapConfig(slots=slots, cts_levels=cts_levels, stc_levels=stc_levels, arcsin=arcsin,
                             encapsulation=encapsulation)
    plan = BootstrapPlan(params, config)
    keys, per_key = key_estimate(params, plan)
    t0, c0 = time.perf_counter(), time.process_time()
    ctx = CKKSContext.keygen(params, seed=seed, bootstrap=config)
    keygen, keygen_cpu = time.perf_counter() - t0, time.process_time() - c0
    key_bytes = ctx.relin_key.nbytes + sum(k.nbytes for k in ctx.galois_keys.keys.values()) + \
        (0 if ctx.encapsulation_keys is None else ctx.encapsulation_keys.nbytes)
    x = np.random.default_rng(seed).uniform(-1, 1, plan.slots)
    ct = ctx.encrypt(x, level=0)
    ctx.evaluator.bootstrap_plan()                      # the plan (matrices, polynomial) outside the timing
    ctx.evaluator.bootstrapper().double_hoisting = double_hoisting
    ctx.evaluator.bootstrap(ct)     # setup, untimed: encodes and keeps the full-period diagonals (as OpenFHE's
                                    # EvalBootstrapSetup precomputes its plaintexts)

    def best():                     # best of ``repeats``: the machine is shared
        seconds = cpu = float("inf")
        for _ in range(repeats):
            t0, c0 = time.perf_counter(), time.process_time()
            out = ctx.evaluator.bootstrap(ct)
            seconds, cpu = min(seconds, time.perf_counter() - t0), min(cpu, time.process_time() - c0)
        return seconds, cpu, out

    seconds, cpu, out = best()                          # glibc's default allocator
    reused = hezk.memory.reuse_freed_memory()           # then freed blocks kept (hezk.memory): fewer page faults
    reuse_seconds, reuse_cpu, _ = best() if reused else (float("nan"), float("nan"), None)
    hezk.memory.reuse_freed_memory(False)
    bits = precision_bits(x, ctx.decrypt(out))
    worst = np.full(plan.slots, 1.0)                    # the worst case the plan states: a constant input, whose one
    worst_bits = precision_bits(worst, ctx.decrypt(ctx.evaluator.bootstrap(ctx.encrypt(worst, level=0))))
    # large coefficient meets the sine's cubic error
    return dict(worst_bits=worst_bits, plan=plan, keygen=keygen, keygen_cpu=keygen_cpu, key_gb=key_bytes / 1e9, seconds=seconds,
                cpu=cpu, reuse_seconds=reuse_seconds, reuse_cpu=reuse_cpu, bits=bits, levels_left=out.level,
                rss_gb=peak_rss_gb(), keys=keys, key_estimate_gb=keys * per_key / 1e9, load=os.getloadavg())


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
    ap.add_argument("--preset", default="N16_BOOT")
    ap.add_argument("--slots", type=int, default=None)
    ap.add_argument("--toy", action="store_true")
    ap.add_argument("--precise", action="store_true")
    ap.add_argument("--n16", action="store_true", help="N16_DELTA50: the 128-bit N = 2^16 literal at Δ = 2^50 (implies --no-arcsin)")
    ap.add_argument("--encapsulation", default="auto",
                    help="sparse-secret encapsulation: a Hamming weight, 'none' or 'auto' (default: h = 32 at N = 2^16)")
    ap.add_argument("--no-arcsin", action="store_true", help="EvalMod without y + y^3/6 (two levels fewer)")
    ap.add_argument("--log-n", type=int, default=None)
    ap.add_argument("--cts-levels", type=int, default=3)
    ap.add_argument("--stc-levels", type=int, default=3)
    ap.add_argument("--estimate", action="store_true")
    ap.add_argument("--max-key-gb", type=float, default=None)
    ap.add_argument("--single-hoisting", action="store_true",
                    help="the linear transforms without double hoisting (a ModDown per baby step), for comparison")
    args = ap.parse_args(argv)
    literal = TOY if args.toy else PRECISE if args.precise else N16_DELTA50 if args.n16 else None
    encapsulation = {"auto": "auto", "none": None}.get(args.encapsulation.lower()) if \
        args.encapsulation.lower() in ("auto", "none") else int(args.encapsulation)
    if literal is not None and args.log_n:
        literal = dict(literal, log_n=args.log_n)
    params = CKKSParameters.from_literal(literal) if literal else CKKSParameters.preset(args.preset)
    # the dense N = 2^16 literal and the N16_BOOT preset leave 8 levels without arcsin's two
    arcsin = not (args.no_arcsin or args.n16 or (literal is None and args.preset.upper() == "N16_BOOT"))
    plan = BootstrapPlan(params, BootstrapConfig(slots=args.slots, cts_levels=args.cts_levels,
                                                 stc_levels=args.stc_levels, arcsin=arcsin,
                                                 encapsulation=encapsulation))
    keys, per_key = key_estimate(params, plan)
    print(f"{params!r}\n{plan!r}\nkeys:    {keys} switching keys (relin, conjugation, {len(plan.rotation_steps)} rotations, "
          f"{keys - 2 - len(plan.rotation_steps)} encapsulation) x "
          f"{per_key / 1e6:.0f} MB = {keys * per_key / 1e9:.2f} GB", flush=True)
    if args.estimate:
        print(f"needs:   {q_budget(params, plan)}")
        return dict(plan=plan, keys=keys, key_estimate_gb=keys * per_key / 1e9)
    if args.max_key_gb is not None and keys * per_key / 1e9 > args.max_key_gb:
        raise SystemExit(f"keys need {keys * per_key / 1e9:.2f} GB > --max-key-gb {args.max_key_gb}")
    r = run(params, args.slots, cts_levels=args.cts_levels, stc_levels=args.stc_levels, arcsin=arcsin,
            encapsulation=encapsulation, double_hoisting=not args.single_hoisting)
    print(f"hezk:    bootstrap {r['seconds']:.2f} s wall, {r['cpu']:.2f} s CPU; {r['reuse_seconds']:.2f} s wall, "
          f"{r['reuse_cpu']:.2f} s CPU with freed memory kept (hezk.memory.reuse_freed_memory) (keygen {r['keygen']:.1f} s wall, "
          f"{r['keygen_cpu']:.1f} s CPU, keys {r['key_gb']:.2f} GB), precision {r['bits']:.1f} bits on random slots "
          f"(uniform in [-1, 1]), {r['worst_bits']:.1f} bits worst case (a constant input) (stated "
          f"{r['plan'].noise_bits:.1f} random slots, {r['plan'].precision_bits:.1f} worst case), levels left {r['levels_left']}, peak RSS (VmHWM) "
          f"{r['rss_gb']:.2f} GB, load average {r['load'][0]:.2f}")
    print(f"needs:   {q_budget(params, r['plan'])}")
    print(f"threads: OMP {os.environ.get('OMP_NUM_THREADS')}, NUMBA {os.environ.get('NUMBA_NUM_THREADS')}, "
          f"OPENBLAS {os.environ.get('OPENBLAS_NUM_THREADS')}; load average {' '.join(f'{x:.2f}' for x in r['load'])}")
    print(f"OpenFHE: bootstrap {OPENFHE['seconds']} s, {OPENFHE['bits']} bits on random slots, {OPENFHE['levels_left']} levels "
          f"left, {OPENFHE['rss_gb']} GB (N = 2^16, 2^15 slots; PEERS.md)")
    return r


if __name__ == "__main__":
    main()
