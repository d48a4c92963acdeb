"""CKKS bootstrapping: time (one thread), precision (worst slot, bits), levels left and peak RSS.

OpenFHE's bootstrap runs in the same run, after hezk's (never next to it: each needs ~10-11 GB; either half is
refused below ``--min-available-gb``, 12 at N = 2^16), in a worker process under the CPython 3.10 venv that holds
the openfhe 1.6.1 wheel (``--openfhe PYTHON``, default /work/peers/openfhe310/bin/python; skipped with the reason
when absent; ../shared/PEERS.md): ``benchmarks/peers/openfhe_bootstrap.py`` at N = 2^16, 2^15 slots, level budget
[3, 3], 59-bit scaling moduli (first 60), FLEXIBLEAUTO, HYBRID key switching with dnum 4, SPARSE_ENCAPSULATED,
128-bit, 6 levels after the bootstrap (``--openfhe-levels-after 7`` needs dnum 6: OpenFHE's 128-bit check refuses
dnum 4 or 5 at depth 23), OMP_NUM_THREADS=1.  Both
halves run one thread (HEZK_THREADS=1) on the same inputs (uniform in [-1, 1]; the worst case a constant 1.0) and a
table prints best/median time, precision (random, worst case), levels left, peak RSS, keygen and hezk/OpenFHE.

    python benchmarks/bootstrap.py [--preset N16_BOOT] [--slots 32768] [--toy | --precise | --n16] [--log-n 15]
                                   [--cts-levels 3 --stc-levels 3] [--no-arcsin] [--encapsulation auto|none|H]
                                   [--estimate] [--max-key-gb 12] [--single-hoisting] [--repeats 3]
                                   [--openfhe PYTHON|none] [--openfhe-levels-after 6]
                                   [--min-available-gb 12]

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
1.16 s against 1.35 s.  OpenFHE runs in a separate process after hezk's half (see above), not beside it.

Measured 2026-12-06 in one run (hezk then OpenFHE 1.6.1, both one thread, load ~1.0, --repeats 3): hezk 16.22 s
best / 16.39 median, OpenFHE (dnum 4, 6 levels after) 22.06 / 23.30 s: 0.74x best, 0.70x median; precision 20.6 /
16.2 bits random, 14.3 / 13.1 worst case (constant 1.0); levels left 8 / 6; peak RSS 10.56 / 11.46 GB; keygen
25.5 / 24.6 s (OpenFHE's setup 11.7 s besides).  At 7 levels after (dnum 6), an earlier run at load ~1-2.5: OpenFHE
25.58 / 27.13 s, 17.5 / 13.2 bits, 14.6 GB, keygen 43.5 s, against hezk 17.57 / 18.55 s (0.69x / 0.68x).

Measured 2026-12-06, EvalMod's products fused (``Evaluator.mul_add_rescale``: one ModDown with the rescale per
product, the recurrences' 2· and subtrahends and the BSGS remainders added before it, one-pass integer products)
and the key switches of EvalMod, the giant steps and the encapsulation from all digits at once (transient scratch,
the same residues), against the operations before them in the same process (alternating, one thread, load 8-10,
best of 3 CPU): 15.46 s against 17.07 (-9.4%; CoeffToSlot 6.56 against 7.14, EvalMod 5.99 against 7.14,
SlotToCoeff 2.49 against 2.50, ModRaise 0.29); 20.5 bits random (20.6), 14.29 worst case (unchanged), 8 levels
left, VmHWM 9.94 GB, keys unchanged (41, 7.49 GB).  Against the 16.22 s of the same-run figures above that is
about 14.7 s, 0.67x OpenFHE's 22.06 s.  In separate processes at load ~4.5-5 (best of 3 CPU): 14.86 s against
16.93 s for the code before (7d42a5f: EvalMod 5.48 against 7.36, CoeffToSlot 6.70
against 6.69, SlotToCoeff 2.38 against 2.38), 0.65x OpenFHE's 22.06 s when scaled to the same-run 16.22 s.  ``--cts-levels 4 --stc-levels 4`` (SlotToCoeff's groups now mirror
CoeffToSlot's, so both share 32 rotation keys) leaves 6 levels, as many as OpenFHE's run, for fewer giant steps and
a lower EvalMod: at load ~5, best of 3 CPU, 12.44 s against 14.86 s for 3/3 (CoeffToSlot 4.87 against 6.70,
EvalMod 5.56 against 5.48, SlotToCoeff 1.64 against 2.38), the same 20.6 / 14.29 bits, keys 35 of 6.39 GB instead
of 41 of 7.49 GB, VmHWM 8.30 GB instead of 9.96.

Measured 2026-12-06 in one run each after those changes (hezk then OpenFHE 1.6.1, both one thread, idle machine,
load ~1.0, --repeats 3; OpenFHE dnum 4, 6 levels after):
- default (3/3, 8 levels left): hezk 15.06 s best / 15.23 median (13.92 s with ``reuse_freed_memory``), OpenFHE
  20.97 / 21.30 s: 0.72x best and median (0.66x with freed memory kept); 20.5 / 16.6 bits random, 14.3 / 13.2
  worst case; VmHWM 10.68 / 11.46 GB; keygen 25.6 / 23.8 s.
- ``--cts-levels 4 --stc-levels 4`` (6 levels left, as OpenFHE's): hezk 12.37 / 12.68 s (11.46 s with freed memory
  kept), OpenFHE 20.82 / 20.99 s: 0.59x best, 0.60x median; 20.6 / 16.3 bits random, 14.3 / 13.1 worst case;
  VmHWM 8.86 / 11.46 GB; keys 35 of 6.39 GB; keygen 21.9 / 23.8 s.

Measured 2026-12-07 on another machine of this kind (same code; one thread, load ~1, ``--repeats 1``): hezk 31.08 s
(30.30 s with freed memory kept), OpenFHE 1.6.1 31.39 s: **0.99x**, 20.5 / 16.2 bits random, 14.3 / 13.1 worst
case, keygen 45.4 / 41.4 s. There hezk took 2.2x its time of the day before and OpenFHE 1.5x: the goal of 0.7x
holds on one machine and not on the other (89% of hezk's time is in its compiled kernels; the 2026-12-06 note above
found hezk's lead shrinking where memory bandwidth is scarce). Compare only within one run.

Measured 2026-12-07 later on a third machine (AMD EPYC, 2 cores; same code; one thread, load ~0.9, ``--repeats
2``): hezk 8.93 s best, 9.24 s median (8.25 s with freed memory kept); OpenFHE 1.6.1 14.61 s best, 15.70 s median:
**0.61x best, 0.59x median**. Precision 20.5 / 16.3 bits random, 14.3 / 13.2 worst case; 8 / 6 levels left; peak
11.13 / 11.46 GB; keygen 39.5 / 27.3 s (hezk's keygen is the slower one). ``--cts-levels 4``: 7.96 s (7.49 s with
freed memory kept), 7 levels left, 48 rotation keys, 9.31 GB of keys.

Measured 2026-12-06 after fewer passes and fresh arrays per key switch (issue 36: a giant step's plaintext products
summed in one pass, ``keyswitch.muladd_pairs``; a Chebyshev leaf in one pass, ``Evaluator.mul_int_sum``;
``mul_add_rescale``'s factor, tensor and added part in one pass into thread scratch; ModDown's INTT and correction in
scratch; the centred conversion and the divide-and-round tiled by 2048 columns), residues bit-identical to the code
before (same output hash), one thread, separate processes alternating with the code before (5e55818^), best of 2
CPU (process user + sys): at load ~1.5-2, 13.85 s (wall 13.86) against 14.60 s (wall 14.98): -5.1% CPU, -7.5% wall
(CoeffToSlot 5.76 user against 5.80, EvalMod 5.02 against 5.17, SlotToCoeff 2.11 against 2.23; system time 0.68
against 1.04-1.16 s: the tensor, integer products, sums and ModDown temporaries no longer fault fresh pages);
a second pair (load 1.6-2.5): 14.06 s against 15.07 (-6.7%); at load ~4 earlier, 14.68 against 15.95 and then 16.30
against 15.21 (a loaded pair either way).  Against the same-run idle figures above (15.06 s, OpenFHE 20.97 s) that
is about 14.2 s, 0.68x.  Same-run comparison (this script, load 4-6: wall times mostly waits, compare CPU): hezk
19.40 s best wall, 15.13 s CPU (13.34 s CPU with freed memory kept), OpenFHE 30.92 s wall, 22.27 s CPU: 0.68x by
CPU (0.63x wall best, 0.85x median); 20.5 / 16.4 bits random, 14.3 / 13.1 worst case; 8 / 6 levels left; VmHWM
10.82 / 11.46 GB.  The same script on the idle machine (load 0.96-1.0), ``--repeats 3``: hezk 13.79 s best (14.80
median; 13.48 s with freed memory kept), OpenFHE 21.97 s (22.02): 0.63x best, 0.67x median, at 20.5 / 16.5 bits
random and 14.3 / 13.1 worst case, 8 / 6 levels left, 10.81 / 11.46 GB, keygen 26.2 / 24.5 s.
Kernels, one thread, interleaved in one process (best of 5-8 process CPU, load 2-8): the conversion 9 -> 49 primes
7.3 ms against 8.4, ModDown with the rescale 11 -> 47 primes 10.6 against 13.0, a giant step's 8 products over 58
rows 31-33 ms against 40-44, a 7-term leaf over 43 rows 9.5 against 14.2.

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
4 levels more).  Times are CPU (process_time) and wall, the best (and median) of ``--repeats`` bootstraps of one
ciphertext after an untimed one (the setup: it encodes and keeps the full-period diagonals; OpenFHE's
EvalBootstrapSetup does its precomputation before its keygen).  ``--toy`` runs OpenFHE at N = 2^12 insecure too.
"""
import argparse
import gc
import json
import os
import resource
import statistics
import subprocess
import sys
import time

if __name__ == "__main__":
    for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS", "HEZK_THREADS"):
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
#: OpenFHE's figures from an earlier run on this machine kind (../shared/PEERS.md), printed when its worker is skipped
OPENFHE = dict(seconds=35.1, bits=15.9, levels_left=7, rss_gb=10.9)
#: the 3.10 venv holding the openfhe 1.6.1 wheel (its extension is built for CPython 3.10 only; PEERS.md)
OPENFHE_PYTHON = "/work/peers/openfhe310/bin/python"
OPENFHE_WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "peers", "openfhe_bootstrap.py")


def key_estimate(params, plan) -> tuple[int, int]:
    """(switching keys, bytes each) that ``keygen(bootstrap=...)`` makes: relinearization, conjugation, one per
    rotation step and the encapsulation's key back from the sparse secret (its key to it is tiny); each holds
    dnum digits x (Q and P limbs) x N residues, two uint32 parts."""
    keys = 2 + len(plan.rotation_steps) + (plan.encapsulation_weight is not None)
    return keys, 2 * 4 * len(params.digits) * len(params.moduli) * params.n


def proc_gb(path: str, field: str) -> float | None:
    """The kB figure ``field`` of the /proc file ``path`` in GB (10^9 bytes), or None where it cannot be read."""
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024 / 1e9
    except OSError:
        pass
    return None


def peak_rss_gb() -> float:
    """VmHWM of this process (GB, 10^9 bytes), or ru_maxrss where /proc is absent."""
    peak = proc_gb("/proc/self/status", "VmHWM")
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9 if peak is None else peak


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

    walls = []

    def best():                     # best of ``repeats``: the machine is shared
        seconds = cpu = float("inf")
        walls.clear()
        for _ in range(repeats):
            t0, c0 = time.perf_counter(), time.process_time()
            out = ctx.evaluator.bootstrap(ct)
            walls.append(time.perf_counter() - t0)
            seconds, cpu = min(seconds, walls[-1]), min(cpu, time.process_time() - c0)
        return seconds, cpu, out

    seconds, cpu, out = best()                          # glibc's default allocator
    median = statistics.median(walls)
    reused = hezk.memory.reuse_freed_memory()           # then freed blocks kept (hezk.memory): fewer page faults
    reuse_seconds, reuse_cpu, _ = best() if reused else (float("nan"), float("nan"), None)
    hezk.memory.reuse_freed_memory(False)
    bits = precision_bits(x, ctx.decrypt(out))
    worst = np.full(plan.slots, 1.0)                    # the worst case the plan states: a constant input, whose one
    worst_bits = precision_bits(worst, ctx.decrypt(ctx.evaluator.bootstrap(ctx.encrypt(worst, level=0))))
    # large coefficient meets the sine's cubic error
    return dict(worst_bits=worst_bits, plan=plan, keygen=keygen, keygen_cpu=keygen_cpu, key_gb=key_bytes / 1e9, seconds=seconds,
                cpu=cpu, median=median, reuse_seconds=reuse_seconds, reuse_cpu=reuse_cpu, bits=bits, levels_left=out.level,
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


def available_gb() -> float:
    """MemAvailable of /proc/meminfo in GB (10^9 bytes); inf where it cannot be read."""
    available = proc_gb("/proc/meminfo", "MemAvailable")
    return float("inf") if available is None else available


def check_memory(who: str, need_gb: float, available=available_gb) -> None:
    """Refuse (SystemExit naming ``--min-available-gb``) when less than ``need_gb`` GB is available before a half."""
    have = available()
    if have < need_gb:
        raise SystemExit(f"{who}: only {have:.1f} GB available (MemAvailable) < --min-available-gb {need_gb:g}: "
                         f"the bootstrap needs ~10-11 GB; run it on a quieter machine")


def openfhe_interpreter(choice) -> tuple:
    """(path, None) for the interpreter that runs the OpenFHE worker, or (None, reason) when it is skipped.
    ``choice``: None for the default venv (``OPENFHE_PYTHON``), 'none' to skip, else a path."""
    if choice is not None and str(choice).lower() == "none":
        return None, "skipped: --openfhe none"
    path = OPENFHE_PYTHON if choice is None else str(choice)
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        return None, (f"skipped: no interpreter at {path} (make the 3.10 venv: python3.10 -m venv "
                      f"{os.path.dirname(os.path.dirname(OPENFHE_PYTHON))} && its pip install openfhe==1.6.1.0.22.4 "
                      f"numpy; ../shared/PEERS.md)")
    return path, None


def run_worker(python, script, args, omp_threads=None, timeout=3600) -> dict:
    """A peer worker's last JSON line as a dict, or {'skipped': reason} (not raised: hezk's figures stand on their
    own).  ``script`` is a path; the worker runs with OMP_NUM_THREADS=``omp_threads`` (None: unset, all cores) and
    without PYTHONPATH (the 3.10 venv must not see this 3.11 checkout's packages)."""
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    env.pop("OMP_NUM_THREADS", None)
    if omp_threads is not None:
        env["OMP_NUM_THREADS"] = str(omp_threads)
    try:
        proc = subprocess.run([python, script] + [str(a) for a in args], capture_output=True, text=True, env=env,
                              timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as e:
        return dict(skipped=f"failed: {e}")
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        return dict(skipped=f"failed (exit {proc.returncode}): {' / '.join(tail)[-400:]}")
    return json.loads(lines[-1])


def run_openfhe(python, repeats=3, log_n=16, slots=None, insecure=False, levels_after=None, timeout=3600) -> dict:
    """OpenFHE's bootstrap in a worker process (one thread: OMP_NUM_THREADS=1); its JSON line as a dict, or
    {'skipped': reason} when the worker fails."""
    args = ["--repeats", repeats, "--log-n", log_n]
    args += ["--slots", slots] if slots else []
    args += ["--insecure"] if insecure else []
    args += ["--levels-after", levels_after] if levels_after is not None else []
    return run_worker(python, OPENFHE_WORKER, args, omp_threads=1, timeout=timeout)


def comparison_table(hezk: dict, openfhe: dict) -> str:
    """hezk against OpenFHE, one row per figure, and the time ratio hezk/OpenFHE (best against best and median
    against median).  ``hezk``: ``run``'s dict; ``openfhe``: the worker's JSON dict."""
    def num(v, fmt):
        return "n/a" if v is None else format(v, fmt)
    rows = [("bootstrap best (s)", hezk["seconds"], openfhe["best"], ".2f"),
            ("bootstrap median (s)", hezk.get("median"), openfhe["median"], ".2f"),
            ("bootstrap best CPU (s)", hezk.get("cpu"), openfhe.get("best_cpu"), ".2f"),
            ("precision random (bits)", hezk["bits"], openfhe["bits"], ".1f"),
            ("precision worst (bits)", hezk["worst_bits"], openfhe["worst_bits"], ".1f"),
            ("levels left", hezk["levels_left"], openfhe["levels_left"], "d"),
            ("peak RSS (GB)", hezk["rss_gb"], openfhe["rss_gb"], ".2f"),
            ("keygen (s)", hezk["keygen"], openfhe["keygen_seconds"], ".1f")]
    out = [f"{'':26}{'hezk':>10}{'OpenFHE':>10}"]
    out += [f"{name:26}{num(a, fmt):>10}{num(b, fmt):>10}" for name, a, b, fmt in rows]
    ratio = hezk["seconds"] / openfhe["best"]
    median = hezk.get("median")
    ratio_median = None if median is None else median / openfhe["median"]
    at_precision = hezk["worst_bits"] >= openfhe["worst_bits"]
    out.append(f"ratio hezk/OpenFHE: {ratio:.2f}x best, {num(ratio_median, '.2f')}x median (goal <= 0.7x at >= its "
               f"worst-case precision: {'met' if ratio <= 0.7 and at_precision else 'not met'}; worst case "
               f"{hezk['worst_bits']:.1f} vs {openfhe['worst_bits']:.1f} bits)")
    return "\n".join(out)


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
    ap.add_argument("--repeats", type=int, default=3, help="timed bootstraps (best and median), both libraries")
    ap.add_argument("--openfhe", default=None, metavar="PYTHON",
                    help=f"the 3.10 interpreter with openfhe 1.6.1 that runs OpenFHE's bootstrap after hezk's in the "
                         f"same run (default {OPENFHE_PYTHON} when it exists; 'none' skips it)")
    ap.add_argument("--openfhe-levels-after", type=int, default=6,
                    help="OpenFHE's levels after its bootstrap: 6 keeps dnum 4 (its fastest at 128 bits); 7 needs dnum 6")
    ap.add_argument("--min-available-gb", type=float, default=None,
                    help="refuse either half below this much available memory (default 12 at N >= 2^16, else 1)")
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
    if args.repeats < 1:
        raise SystemExit(f"--repeats must be >= 1, got {args.repeats}")
    need_gb = args.min_available_gb if args.min_available_gb is not None else 12.0 if params.log_n >= 16 else 1.0
    python, skipped = openfhe_interpreter(args.openfhe)
    check_memory("hezk", need_gb)
    r = run(params, args.slots, cts_levels=args.cts_levels, stc_levels=args.stc_levels, arcsin=arcsin,
            encapsulation=encapsulation, double_hoisting=not args.single_hoisting, repeats=args.repeats)
    print(f"hezk:    bootstrap {r['seconds']:.2f} s wall, {r['cpu']:.2f} s CPU; {r['reuse_seconds']:.2f} s wall, "
          f"{r['reuse_cpu']:.2f} s CPU with freed memory kept (hezk.memory.reuse_freed_memory) (keygen {r['keygen']:.1f} s wall, "
          f"{r['keygen_cpu']:.1f} s CPU, keys {r['key_gb']:.2f} GB), precision {r['bits']:.1f} bits on random slots "
          f"(uniform in [-1, 1]), {r['worst_bits']:.1f} bits worst case (a constant input) (stated "
          f"{r['plan'].noise_bits:.1f} random slots, {r['plan'].precision_bits:.1f} worst case), levels left {r['levels_left']}, peak RSS (VmHWM) "
          f"{r['rss_gb']:.2f} GB, load average {r['load'][0]:.2f}")
    print(f"needs:   {q_budget(params, r['plan'])}")
    print(f"threads: OMP {os.environ.get('OMP_NUM_THREADS')}, NUMBA {os.environ.get('NUMBA_NUM_THREADS')}, "
          f"OPENBLAS {os.environ.get('OPENBLAS_NUM_THREADS')}; load average {' '.join(f'{x:.2f}' for x in r['load'])}")
    gc.collect()                                        # the context (10 GB of keys) went with run's frame
    hezk.memory.release_freed_memory()
    if python is not None:                              # sequentially, never next to hezk: each needs ~10-11 GB
        check_memory("OpenFHE", need_gb)
        o = run_openfhe(python, repeats=args.repeats, log_n=params.log_n, slots=r["plan"].slots,
                        insecure=bool(literal and literal.get("insecure")), levels_after=args.openfhe_levels_after)
        skipped = o.get("skipped")
    if skipped is None:
        r["openfhe"] = o
        print(f"OpenFHE: {o['version']} (Python {o['python']}), N = 2^{o['log_n']}, {o['slots']} slots, level "
              f"budget {o['level_budget']}, dnum {o['dnum']}, depth {o['depth']}, SPARSE_ENCAPSULATED, OMP threads "
              f"{o['threads']}: bootstraps {', '.join(f'{t:.2f}' for t in o['seconds'])} s, setup "
              f"{o['setup_seconds']:.1f} s, load average {o['load'][0]:.2f}")
        print(comparison_table(r, o))
    else:
        r["openfhe"] = dict(skipped=skipped)
        print(f"OpenFHE: {skipped}; earlier on this machine kind (PEERS.md): bootstrap {OPENFHE['seconds']} s median, "
              f"{OPENFHE['bits']} bits on random slots, {OPENFHE['levels_left']} levels left, {OPENFHE['rss_gb']} GB "
              f"(N = 2^16, 2^15 slots)")
    return r


if __name__ == "__main__":
    main()
