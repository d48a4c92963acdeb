"""The JAX backend (crypto.jax_backend, crypto.ckks.jax_device) against the CPU backends, in one run.

Rows: the forward NTT of N = 2^14 and 2^16 with 1 and 32 limbs of 31-bit primes; ct×ct + relinearise +
rescale, one rotation and a 64×64 plaintext matrix-vector product (baby-step giant-step diagonals, the
8 baby rotations hoisted, then rescale) on the N14 and N16 presets at their top level.  Columns: the
CPU backends of the host evaluator (numba radix-2, the MAT layout with compiled butterflies
"fourstep", CROSS on BLAS "cross"; numba and BLAS on one thread), the JAX device path on
``jax.devices()[0]`` (CPU XLA, one thread unless --jax-threads; the GPU when the machine has one), and
the JAX speed-up over single-thread numba.  Every JAX result is checked bit-identical to numba's.

Timing: median of --repeats calls, each JAX call ending in ``block_until_ready``; the first call of every
jitted function (XLA compilation) and the one-off uploads (keys, tables, constants) are excluded and
reported apart ("compile s").  CPU columns are process CPU time (a shared machine's other load does not
count); JAX on a GPU is wall time (the host thread idles while the device works), on CPU XLA CPU time.

Targets (issue 20), printed as "open: no GPU" when no GPU is present: ct×ct+relin and rotation at N16
at least 50× single-thread numba; the NTT within 3× of the device's memory-bandwidth bound, the bound
being the bytes an NTT must move at least (limbs in and out as uint32, the twiddle tables and BAT
matrices read once) over the bandwidth measured here by a device copy.

Memory: N16 keys are 280 MB each (dnum 8 × 67 limbs × 2^16 × 2 × 4 bytes) and live at least twice (host
and device); the setup's peak is higher: key generation's intermediates and the stacked staging copy the
device evaluator uploads from (on CPU XLA the device copy is host memory too).  Measured here: the N16
matrix-vector product's 14 Galois keys and relinearisation key (4.2 GB per copy) had taken the process to
15.6 GB of resident memory before its first row, so a cell is budgeted at 4 copies of its keys and the N16
product is skipped unless --max-gb allows that (17 GB).

Bootstrapping (--bootstrap, off by default: its ~60 XLA compilations take minutes on CPU): the sparse
bootstrap (64 slots) of tests/crypto/test_bootstrap.py's insecure N = 2^12 ring, host evaluator against
``DeviceEvaluator.bootstrap`` (the whole pipeline on the device), checked bit-identical.

    python benchmarks/gpu.py [--quick] [--repeats 3] [--jax-threads 1] [--max-gb 6] [--no-cross] [--bootstrap]
                             [--presets N14,N16] [--no-ntt]
"""
import argparse
import os
import sys
import time

QUICK = os.environ.get("HEZK_QUICK") == "1"


def _args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", default=QUICK, help="N = 2^14 only")
    parser.add_argument("--repeats", type=int, default=3, help="timed calls per cell (median)")
    parser.add_argument("--jax-threads", type=int, default=1, help="CPU XLA threads (default 1; a GPU ignores it)")
    parser.add_argument("--max-gb", type=float, default=6.0, help="skip cells whose keys would exceed this (GB)")
    parser.add_argument("--no-cross", action="store_true", help="leave out the CROSS (BLAS) column")
    parser.add_argument("--presets", default=None,
                        help="comma-separated presets of the CKKS rows (default N14,N16; N14 with --quick)")
    parser.add_argument("--no-ntt", action="store_true", help="leave out the NTT rows")
    parser.add_argument("--bootstrap", action="store_true",
                        help="also the sparse bootstrap of an insecure N = 2^12 ring (minutes of compilation on CPU)")
    return parser.parse_args(argv)


if __name__ == "__main__":
    ARGS = _args()
    for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
        os.environ[_var] = "1"                      # one core for every CPU backend (before numpy/numba)
    if ARGS.jax_threads == 1:
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                                   " --xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1").strip()
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import numpy as np  # noqa: E402

from benchmarks._timing import median_ms, print_table  # noqa: E402

KEY_COPIES = 4                                # keys' peak footprint during setup, in copies (docstring: Memory)
N16_KEY_GB = 8 * 67 * 2**16 * 2 * 4 / 1e9     # one N16 switching key (b and a, uint32)
MATVEC_D = 64
TARGET_SPEEDUP = 50.0
TARGET_NTT_BOUND = 3.0


def gpu_device(jax):
    """The first GPU device, or None."""
    return next((d for d in jax.devices() if d.platform in ("gpu", "cuda", "rocm")), None)


def bandwidth_gbs(jax, device, mib: int = 512) -> float:
    """Device memory bandwidth (GB/s) measured by y = x + 1 over ``mib`` MiB of uint32 (read + write)."""
    x = jax.device_put(np.zeros(mib * 2**18, dtype=np.uint32), device)
    f = jax.jit(lambda v: v + 1)
    f(x).block_until_ready()
    best = min(_wall(lambda: f(x).block_until_ready()) for _ in range(5))
    return 2 * x.nbytes / best / 1e9


def _wall(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def ntt_bytes(n: int, limbs: int) -> int:
    """Least bytes one MAT-form NTT moves: limbs in and out (uint32), twiddles and Shoup companions (2 ×
    uint32 per coefficient), the two int8 BAT matrices (4R)² and (4C)² per limb."""
    from crypto.cross import mat_shape
    rows, cols = mat_shape(n)
    return limbs * (2 * 4 * n + 2 * 4 * n + 16 * (rows * rows + cols * cols))


def _speedup(base, value):
    return base / value if base and value else None


def ntt_rows(args, jax, device, clock, bandwidth):
    from crypto import jax_backend as kb
    from crypto.modarith import find_ntt_primes
    from crypto.ntt import NTTTables, get_backend
    rows, timings = [], {}
    sizes = [2**14] if args.quick else [2**14, 2**16]
    forward = jax.jit(kb.ntt)
    for n in sizes:
        for limbs in (1, 32):
            tables = NTTTables(n, find_ntt_primes(31, limbs, n))
            a = np.array([np.random.default_rng(l).integers(0, q, n) for l, q in enumerate(tables.moduli)],
                         dtype=np.uint64)
            cpu = {}
            for name in ("numba", "fourstep") + (() if args.no_cross else ("cross",)):
                backend = get_backend(name)
                cpu[name] = median_ms(lambda: backend.forward(a, tables), args.repeats)
            start = time.perf_counter()
            dt = kb.DeviceTables.of(tables)
            x = jax.device_put(a.astype(np.uint32), device)
            out = forward(x, dt).block_until_ready()
            compile_s = time.perf_counter() - start
            same = np.array_equal(np.asarray(out).astype(np.uint64), get_backend("numba").forward(a, tables))
            jx = median_ms(lambda: forward(x, dt).block_until_ready(), args.repeats, clock=clock)
            bound = ntt_bytes(n, limbs) / (bandwidth * 1e9) * 1e3 if bandwidth else None
            timings[(n, limbs)] = (cpu["numba"], jx, bound)
            rows.append([f"NTT 2^{n.bit_length() - 1} x {limbs}", cpu["numba"], cpu["fourstep"], cpu.get("cross"),
                         jx, _speedup(cpu["numba"], jx), compile_s, "yes" if same else "NO",
                         bound if bound else "open: no GPU"])
    return rows, timings


def _matvec_groups(ctx, level, rng):
    from crypto.ckks.jax_device import bsgs_diagonals
    matrix = rng.uniform(-1, 1, (MATVEC_D, MATVEC_D))
    ev = ctx.evaluator
    return [(m, [(i, ev.encode(v, level, ctx.params.scale)) for i, v in pairs])
            for m, pairs in bsgs_diagonals(matrix, ctx.params.slots)]


def op_rows(args, jax, device, clock, on_preset=None):
    from crypto import CKKSContext, CKKSParameters
    from crypto.ckks.jax_device import DeviceEvaluator, tiled
    from crypto.ckks.linear import bsgs_sum
    rows, timings, notes = [], {}, []
    presets = args.presets.split(",") if args.presets else ["N14"] if args.quick else ["N14", "N16"]
    for preset in presets:
        params = CKKSParameters.preset(preset)
        key_gb = KEY_COPIES * len(params.digits) * len(params.moduli) * params.n * 2 * 4 / 1e9   # peak, see Memory
        steps = sorted({i for i in range(1, 8)} | {8 * g for g in range(1, 8)})
        with_matvec = key_gb * (1 + len(steps)) <= args.max_gb
        if not with_matvec:
            notes.append(f"{preset} matrix-vector product skipped: its {len(steps)} Galois keys and the relinearisation "
                         f"key need {key_gb * (1 + len(steps)):.1f} GB (setup peak, {KEY_COPIES} copies) > --max-gb "
                         f"{args.max_gb:g}")
        ctx = CKKSContext.keygen(params, rotations=steps if with_matvec else [1], seed=1, backend="numba")
        rng = np.random.default_rng(0)
        x = rng.uniform(-1, 1, params.slots)
        a, b = ctx.encrypt(x), ctx.encrypt(rng.uniform(-1, 1, params.slots))
        start = time.perf_counter()
        dev = DeviceEvaluator(ctx, device)
        da, db = dev.to_device(a), dev.to_device(b)
        upload_s = time.perf_counter() - start
        cases = [("ct x ct + relin + rescale", lambda ev: ev.mul_rescale(a, b), lambda: dev.mul_rescale(da, db)),
                 ("rotation", lambda ev: ev.rotate(a, 1), lambda: dev.rotate(da, 1))]
        if with_matvec:
            ct = ctx.encrypt(tiled(x[:MATVEC_D], params.slots))
            groups = _matvec_groups(ctx, ct.level, rng)
            babies = sorted({i for _, pairs in groups for i, _ in pairs})
            lin, dct = dev.linear(groups), dev.to_device(ct)
            cases.append((f"{MATVEC_D}x{MATVEC_D} matvec (BSGS)",
                          lambda ev: ev.rescale(bsgs_sum(ev, ev.rotate_hoisted(ct, babies), groups)),
                          lambda: dev.matvec(dct, lin)))
        evaluators = {name: ctx.with_backend(name).evaluator
                      for name in ("numba", "fourstep") + (() if args.no_cross or preset == "N16" else ("cross",))}
        if preset == "N16" and not args.no_cross:
            notes.append("N16 cross column left out: CROSS on BLAS is 13-100x slower than numba (benchmarks/ntt.py)")
        for label, host_op, dev_op in cases:
            cpu = {name: median_ms(lambda: host_op(ev), args.repeats) for name, ev in evaluators.items()}
            start = time.perf_counter()
            got = dev_op().block_until_ready()
            compile_s = time.perf_counter() - start
            expected = host_op(evaluators["numba"])
            same = all(np.array_equal(p.data, q.data) for p, q in zip(dev.to_host(got).parts, expected.parts))
            jx = median_ms(lambda: dev_op().block_until_ready(), args.repeats, clock=clock)
            timings[(preset, label)] = (cpu["numba"], jx)
            rows.append([f"{label} {preset}", cpu["numba"], cpu["fourstep"], cpu.get("cross"), jx,
                         _speedup(cpu["numba"], jx), compile_s, "yes" if same else "NO"])
        notes.append(f"{preset}: keys on the device {dev.keys_bytes / 1e6:.0f} MB, uploaded once in {upload_s:.1f} s")
        if on_preset is not None:
            on_preset(preset, rows)
    return rows, timings, notes


#: tests/crypto/test_bootstrap.py's ring: N = 2^12, 20 levels, sparse secret (h = 32); insecure, for speed
BOOT_TOY = dict(log_n=12, log_q=[[30, 30]] + [[25, 26]] * 20, log_p=[30] * 6, log_scale=50, dnum=7,
                hamming_weight=32, insecure=True)
BOOT_SLOTS = 64


def bootstrap_rows(args, jax, device, clock):
    """One row: the sparse bootstrap on the host backends and on the device (``DeviceEvaluator.bootstrap``)."""
    from crypto import CKKSContext, CKKSParameters
    from crypto.ckks.bootstrap import BootstrapConfig, plan_for
    from crypto.ckks.jax_device import DeviceEvaluator
    params = CKKSParameters.from_literal(BOOT_TOY)
    cfg = BootstrapConfig(slots=BOOT_SLOTS)
    plan = plan_for(params, cfg)
    ctx = CKKSContext.keygen(params, rotations=list(plan.rotation_steps), conjugation=True, seed=1, backend="numba")
    ct = ctx.encrypt(np.random.default_rng(0).uniform(-1, 1, BOOT_SLOTS), level=0)
    evaluators = {name: ctx.with_backend(name).evaluator for name in ("numba", "fourstep")}
    cpu = {name: median_ms(lambda: ev.bootstrap(ct, cfg), args.repeats) for name, ev in evaluators.items()}
    dev = DeviceEvaluator(ctx, device)
    dct = dev.to_device(ct)
    start = time.perf_counter()
    got = dev.bootstrap(dct, cfg).block_until_ready()
    compile_s = time.perf_counter() - start
    expected = evaluators["numba"].bootstrap(ct, cfg)
    same = all(np.array_equal(p.data, q.data) for p, q in zip(dev.to_host(got).parts, expected.parts))
    jx = median_ms(lambda: dev.bootstrap(dct, cfg).block_until_ready(), args.repeats, warmup=0, clock=clock)
    return [[f"bootstrap N12 insecure, {BOOT_SLOTS} slots", cpu["numba"], cpu["fourstep"], None, jx,
             _speedup(cpu["numba"], jx), compile_s, "yes" if same else "NO"]]


def main(args):
    import jax
    gpu = gpu_device(jax)
    device = gpu if gpu is not None else jax.devices()[0]
    clock = time.perf_counter if gpu is not None else time.process_time
    where = f"{device.platform} ({getattr(device, 'device_kind', '?')})"
    bandwidth = bandwidth_gbs(jax, device) if gpu is not None else None
    print(f"JAX {jax.__version__} on {where}"
          f"{f'; measured device bandwidth {bandwidth:.0f} GB/s' if bandwidth else ''}; "
          f"{'wall' if gpu is not None else 'CPU'} time, JIT compilation and uploads excluded (first call)")
    ntt, ntt_t = ([], {}) if args.no_ntt else ntt_rows(args, jax, device, clock, bandwidth)
    if ntt:
        print_table("Forward NTT (ms, median; speed-up = numba / jax)",
                    ["case", "numba", "fourstep", "cross", "jax", "speed-up", "compile s", "bit-identical",
                     "bandwidth bound ms"], ntt)
    headers = ["operation", "numba", "fourstep", "cross", "jax", "speed-up", "compile s", "bit-identical"]
    shown = []

    def show(preset, rows):                 # each preset's rows as soon as they are measured
        print_table(f"CKKS operations at the top level, {preset} (ms, median; speed-up = numba / jax)", headers,
                    rows[len(shown):])
        shown.extend(rows[len(shown):])
        sys.stdout.flush()
    _, op_t, notes = op_rows(args, jax, device, clock, show)
    for note in notes:
        print(f"  note: {note}")
    if args.bootstrap:
        print_table("Bootstrapping (ms, median; speed-up = numba / jax; compile s: the first device bootstrap)",
                    headers, bootstrap_rows(args, jax, device, clock))
        sys.stdout.flush()
    targets = []
    for label in ("ct x ct + relin + rescale", "rotation"):
        t = op_t.get(("N16", label))
        if gpu is None:
            status = "open: no GPU"
        elif t is None:
            status = "not measured"
        else:
            speed = t[0] / t[1]
            status = f"{speed:.1f}x: {'met' if speed >= TARGET_SPEEDUP else 'not met'}"
        targets.append([f"{label} N16 >= {TARGET_SPEEDUP:.0f}x numba", status])
    for (n, limbs), (_, jx, bound) in sorted(ntt_t.items()):
        if gpu is None:
            status = "open: no GPU"
        else:
            ratio = jx / bound
            status = f"{ratio:.1f}x the bound: {'met' if ratio <= TARGET_NTT_BOUND else 'not met'}"
        targets.append([f"NTT 2^{n.bit_length() - 1} x {limbs} within {TARGET_NTT_BOUND:.0f}x of bandwidth", status])
    print_table("GPU targets (issue 20)", ["target", "status"], targets)
    if gpu is None:
        print("  closing note: no GPU on this machine; the figures above are CPU XLA, the GPU targets stay open.")


if __name__ == "__main__":
    main(ARGS)
