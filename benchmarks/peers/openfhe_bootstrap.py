"""OpenFHE's CKKS bootstrap as a peer worker: keygen, bootstrap time, precision, levels left, peak RSS as one JSON line.

Runs under the CPython 3.10 interpreter of a venv holding the ``openfhe`` wheel (1.6.1: its extension is built for
3.10 only; ../shared/PEERS.md), started by ``benchmarks/bootstrap.py --openfhe PYTHON`` after hezk's half of the
same run.  Imports only openfhe, numpy and the standard library.

Settings (those of the earlier comparison): N = 2^16, 2^15 slots, level budget [3, 3], scaling moduli of 59 bits
(first modulus 60), FLEXIBLEAUTO rescaling, HYBRID key switching (dnum: the smallest from 4 that OpenFHE's 128-bit check accepts: 4 at 6 levels
after the bootstrap (depth 6 + 16), 6 at 7 levels), the sparse secret with encapsulation
(``SPARSE_ENCAPSULATED``), HEStd_128_classic; one thread (set OMP_NUM_THREADS=1 before starting this process), or
with ``--threads 1 2`` each count in turn, interleaved repeats on the same keys (the count switched through the
OpenMP runtime openfhe runs on: ``openfhe_ops.omp_runtime``; ``benchmarks/threads.py``).

    OMP_NUM_THREADS=1 python3.10 benchmarks/peers/openfhe_bootstrap.py [--repeats 3] [--log-n 16] [--slots 32768]
        [--levels-after 6] [--dnum 4] [--insecure] [--threads 1 2]

Printed: one JSON object on the last stdout line, with keygen/setup seconds, bootstrap seconds (every repeat, best
and median), precision bits (-log2 of the largest absolute slot error) on uniform inputs in [-1, 1] and on the worst
case hezk's benchmark uses (a constant 1.0 in every slot), levels left, peak RSS (VmHWM) in GB.
"""
import argparse
import json
import math
import os
import resource
import statistics
import sys
import time


def peak_rss_gb() -> float:
    """Peak resident set of this process in GB (10^9 bytes): VmHWM, that of this program's own address space;
    ru_maxrss (KiB) only where /proc is absent, since Linux carries the parent's RSS at fork over exec into it."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024 / 1e9
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9


def bits(expected, got) -> float:
    """-log2 of the largest absolute error over the slots (inf where exact)."""
    import numpy as np
    err = float(np.max(np.abs(np.asarray(got, dtype=float) - np.asarray(expected, dtype=float))))
    return math.inf if err == 0 else -math.log2(err)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3, help="timed bootstraps of one ciphertext (best and median)")
    ap.add_argument("--log-n", type=int, default=16)
    ap.add_argument("--slots", type=int, default=None, help="default: N/2")
    ap.add_argument("--levels-after", type=int, default=6,
                    help="multiplicative depth left for use after the bootstrap (added to its own depth)")
    ap.add_argument("--level-budget", type=int, nargs=2, default=[3, 3])
    ap.add_argument("--dnum", type=int, default=0,
                    help="key-switching digits; default: the smallest from 4 up that OpenFHE's 128-bit check accepts "
                         "(4 at 6 levels after the bootstrap, 6 at 7)")
    ap.add_argument("--insecure", action="store_true", help="HEStd_NotSet (small --log-n for a quick check)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, nargs="+", default=None,
                    help="OpenMP thread counts to time in turn (interleaved repeats; best, median and the list of each "
                         "under 'by_threads'; the top-level figures are the first count's); default: OMP_NUM_THREADS")
    args = ap.parse_args(argv)
    if args.repeats < 1:
        raise SystemExit(f"--repeats must be >= 1, got {args.repeats}")
    if not 10 <= args.log_n <= 17:
        raise SystemExit(f"--log-n must be in [10, 17], got {args.log_n}")
    slots = args.slots or (1 << (args.log_n - 1))
    if slots > 1 << (args.log_n - 1) or slots & (slots - 1):
        raise SystemExit(f"--slots must be a power of two <= N/2 = {1 << (args.log_n - 1)}, got {slots}")

    import numpy as np
    import openfhe as fhe

    dist = fhe.SecretKeyDist.SPARSE_ENCAPSULATED
    depth = args.levels_after + fhe.CryptoContext.GetBootstrapDepth(args.level_budget, dist)

    def params(dnum):
        p = fhe.CCParamsCKKSRNS()
        p.SetSecretKeyDist(dist)
        p.SetSecurityLevel(fhe.SecurityLevel.HEStd_NotSet if args.insecure else fhe.SecurityLevel.HEStd_128_classic)
        p.SetRingDim(1 << args.log_n)
        p.SetScalingModSize(59)
        p.SetFirstModSize(60)
        p.SetScalingTechnique(fhe.ScalingTechnique.FLEXIBLEAUTO)
        p.SetKeySwitchTechnique(fhe.KeySwitchTechnique.HYBRID)
        p.SetNumLargeDigits(dnum)
        p.SetBatchSize(slots)
        p.SetMultiplicativeDepth(depth)
        return p

    t0 = time.perf_counter()
    cc, errors = None, []
    for dnum in ([args.dnum] if args.dnum else range(4, depth + 2)):
        try:
            cc = fhe.GenCryptoContext(params(dnum))
            break
        except Exception as e:  # OpenFHE's security check raises a RuntimeError naming the ring it wants
            errors.append(f"dnum {dnum}: {str(e).strip().splitlines()[-1][-160:]}")
    if cc is None:
        raise SystemExit(f"OpenFHE refused depth {depth} at N = 2^{args.log_n}: " + "; ".join(errors))
    for feature in (fhe.PKESchemeFeature.PKE, fhe.PKESchemeFeature.KEYSWITCH, fhe.PKESchemeFeature.LEVELEDSHE,
                    fhe.PKESchemeFeature.ADVANCEDSHE, fhe.PKESchemeFeature.FHE):
        cc.Enable(feature)
    cc.EvalBootstrapSetup(args.level_budget, [0, 0], slots)
    setup = time.perf_counter() - t0
    t0, c0k = time.perf_counter(), time.process_time()
    keys = cc.KeyGen()
    cc.EvalMultKeyGen(keys.secretKey)
    cc.EvalBootstrapKeyGen(keys.secretKey, slots)
    keygen, keygen_cpu = time.perf_counter() - t0, time.process_time() - c0k

    def encrypt(x):
        # encrypted at the last level (depth - 1), as a ciphertext that has used up its levels
        pt = cc.MakeCKKSPackedPlaintext(np.ascontiguousarray(x, dtype=np.float64), 1, depth - 1, None, slots)
        pt.SetLength(slots)
        return cc.Encrypt(keys.publicKey, pt)

    def decrypt(ct):
        pt = cc.Decrypt(ct, keys.secretKey)
        pt.SetLength(slots)
        return np.asarray(pt.GetRealPackedValue(), dtype=float)

    x = np.random.default_rng(args.seed).uniform(-1, 1, slots)
    ct = encrypt(x)
    counts = args.threads or [None]
    omp = None
    if args.threads:
        from openfhe_ops import omp_runtime     # the worker beside this one (its folder is sys.path[0])
        omp = omp_runtime(fhe)
        if omp is None:
            raise SystemExit("--threads: no OpenMP runtime found to switch threads (set OMP_NUM_THREADS instead)")
    timed = {n: ([], []) for n in counts}
    for _ in range(args.repeats):
        for n in counts:
            if omp is not None:
                omp[0](n)
            t0, c0 = time.perf_counter(), time.process_time()
            out = cc.EvalBootstrap(ct)
            timed[n][0].append(time.perf_counter() - t0)
            timed[n][1].append(time.process_time() - c0)
    walls, cpus = timed[counts[0]]
    worst = np.full(slots, 1.0)               # hezk's stated worst case: a constant input
    worst_out = cc.EvalBootstrap(encrypt(worst))
    result = dict(
        library="openfhe", version=getattr(fhe, "__version__", "1.6.1"), python=sys.version.split()[0],
        log_n=args.log_n, slots=slots, depth=depth, level_budget=list(args.level_budget), dnum=dnum,
        secure=not args.insecure, threads=os.environ.get("OMP_NUM_THREADS"),
        setup_seconds=setup, keygen_seconds=keygen, keygen_cpu=keygen_cpu,
        seconds=walls, cpu=cpus, best=min(walls), median=statistics.median(walls), best_cpu=min(cpus),
        bits=bits(x, decrypt(out)), worst_bits=bits(worst, decrypt(worst_out)),
        # levels still usable: the depth less the levels consumed, less the pending rescale FLEXIBLEAUTO keeps
        # (depth - level alone counts one more: the earlier "7 levels left" at dnum 4 was this count)
        levels_left=depth - out.GetLevel() - (out.GetNoiseScaleDeg() - 1),
        level=out.GetLevel(), noise_scale_deg=out.GetNoiseScaleDeg(),
        rss_gb=peak_rss_gb(), load=list(os.getloadavg()))
    if args.threads:
        result["by_threads"] = {str(n): dict(seconds=w, best=min(w), median=statistics.median(w),
                                             effective=(omp[0](n), omp[1]())[1]) for n, (w, _) in timed.items()}
    print(json.dumps(result), flush=True)
    return result


if __name__ == "__main__":
    main()
