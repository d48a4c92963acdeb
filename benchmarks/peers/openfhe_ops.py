"""OpenFHE's CKKS ct x ct (+ relinearization + rescale) and one rotation as a peer worker, at each of several OpenMP
thread counts in one process: best wall seconds per (operation, threads) as one JSON line.

Runs under the CPython 3.10 interpreter of a venv holding the ``openfhe`` wheel (1.6.1: its extension is built for
3.10 only; ../shared/PEERS.md), started by ``benchmarks/threads.py`` after hezk's half of the same run.  Imports only
openfhe, numpy and the standard library.  Several ``--threads`` counts in one process are
switched through the OpenMP runtime openfhe runs on (``omp_runtime``), but OpenFHE fixes its count when it starts
and its times do not follow: ``benchmarks/threads.py`` starts one process per count with OMP_NUM_THREADS=n.

Settings matching hezk's presets: N = 2^log_n, ``--depth`` levels of a ``--scale-bits`` scale (first modulus 60 bits),
FIXEDMANUAL rescaling, HYBRID key switching with the smallest dnum from ``--dnum`` up that OpenFHE accepts
(HEStd_128_classic; where no dnum passes its check, as at N = 2^14 with 6 levels of 2^50 and 60-bit primes,
HEStd_NotSet with the smallest dnum it accepts and "secure": false: the work per operation is the same),
ciphertexts at the top level.

    OMP_NUM_THREADS=2 python3.10 benchmarks/peers/openfhe_ops.py --log-n 14 --depth 6 --threads 1 2 [--repeats 5]
"""
import argparse
import ctypes
import json
import os
import sys
import time


def omp_runtime(fhe):
    """(set, get) of the OpenMP runtime openfhe's libraries run on, or None.

    That is the libgomp importing openfhe mapped into this process (its libraries link ``libgomp.so.1``, which the
    loader finds on the system). Loading another copy by path (the ``lib/libgomp.so`` the wheel carries is another
    file) starts a second runtime whose thread count openfhe never reads: both "counts" then run on
    OMP_NUM_THREADS. ``fhe`` must already be imported."""
    del fhe                                   # imported: its runtime is mapped
    with open("/proc/self/maps") as maps:
        mapped = sorted({line.split()[-1] for line in maps if "libgomp" in line and "/" in line})
    for name in mapped[:1] or ["libgomp.so.1"]:
        try:
            lib = ctypes.CDLL(name)
            return lib.omp_set_num_threads, lib.omp_get_max_threads
        except OSError:
            continue
    return None


def make_context(fhe, log_n, depth, scale_bits, dnum_from, rotations):
    """(context, keys, dnum, secure): the smallest accepted dnum from ``dnum_from`` at 128 bits, else NotSet."""
    errors = []
    for secure in (True, False):
        for dnum in range(dnum_from, depth + 2):
            p = fhe.CCParamsCKKSRNS()
            p.SetSecurityLevel(fhe.SecurityLevel.HEStd_128_classic if secure else fhe.SecurityLevel.HEStd_NotSet)
            p.SetRingDim(1 << log_n)
            p.SetMultiplicativeDepth(depth)
            p.SetScalingModSize(scale_bits)
            p.SetFirstModSize(60)
            p.SetScalingTechnique(fhe.ScalingTechnique.FIXEDMANUAL)
            p.SetKeySwitchTechnique(fhe.KeySwitchTechnique.HYBRID)
            p.SetNumLargeDigits(dnum)
            p.SetBatchSize(1 << (log_n - 1))
            try:
                cc = fhe.GenCryptoContext(p)
            except Exception as e:   # OpenFHE's checks raise RuntimeErrors naming what they want
                errors.append(f"dnum {dnum}: {str(e).strip().splitlines()[-1][-120:]}")
                continue
            for feature in (fhe.PKESchemeFeature.PKE, fhe.PKESchemeFeature.KEYSWITCH,
                            fhe.PKESchemeFeature.LEVELEDSHE):
                cc.Enable(feature)
            keys = cc.KeyGen()
            cc.EvalMultKeyGen(keys.secretKey)
            cc.EvalRotateKeyGen(keys.secretKey, list(rotations))
            return cc, keys, dnum, secure
    raise SystemExit(f"OpenFHE refused depth {depth} at N = 2^{log_n}: " + "; ".join(errors))


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--log-n", type=int, default=14)
    ap.add_argument("--depth", type=int, default=6)
    ap.add_argument("--scale-bits", type=int, default=50)
    ap.add_argument("--dnum", type=int, default=3)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)
    if not 10 <= args.log_n <= 17:
        raise SystemExit(f"--log-n must be in [10, 17], got {args.log_n}")
    if args.repeats < 1 or min(args.threads) < 1:
        raise SystemExit("--repeats and every --threads must be >= 1")

    import numpy as np
    import openfhe as fhe

    omp = omp_runtime(fhe)
    if omp is None and len(set(args.threads)) > 1:
        raise SystemExit("no OpenMP runtime found to switch threads: run one count per process (OMP_NUM_THREADS)")
    t0 = time.perf_counter()
    cc, keys, dnum, secure = make_context(fhe, args.log_n, args.depth, args.scale_bits, args.dnum, [1])
    keygen = time.perf_counter() - t0
    slots = 1 << (args.log_n - 1)
    rng = np.random.default_rng(0)
    a, b = (cc.Encrypt(keys.publicKey, cc.MakeCKKSPackedPlaintext(list(rng.uniform(-1, 1, slots))))
            for _ in range(2))
    ops = {"mul_rescale": lambda: cc.Rescale(cc.EvalMult(a, b)), "rotate": lambda: cc.EvalRotate(a, 1)}
    best = {op: {n: float("inf") for n in args.threads} for op in ops}
    effective = {}
    for op, fn in ops.items():
        for n in args.threads:               # warm-up at each count
            if omp:
                omp[0](n)
            fn()
        for _ in range(args.repeats):
            for n in args.threads:
                if omp:
                    omp[0](n)
                    effective[n] = omp[1]()
                start = time.perf_counter()
                fn()
                best[op][n] = min(best[op][n], time.perf_counter() - start)
    result = dict(library="openfhe", version=getattr(fhe, "__version__", "1.6.1"), python=sys.version.split()[0],
                  log_n=args.log_n, depth=args.depth, scale_bits=args.scale_bits, dnum=dnum, secure=secure,
                  keygen_seconds=keygen, threads=args.threads,
                  effective_threads={str(k): v for k, v in effective.items()},
                  best={op: {str(n): t for n, t in v.items()} for op, v in best.items()},
                  load=list(os.getloadavg()))
    print(json.dumps(result), flush=True)
    return result


if __name__ == "__main__":
    main()
