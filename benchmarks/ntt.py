"""NTT backends on this machine: radix-2 numpy, radix-2 numba, CROSS (8-bit BAT, widest exact chunk).

For N = 2^12 ... 2^16 and 1, 8, 32 limbs of 31-bit primes: the median ms of one forward NTT of all
limbs and the limb-NTTs per second of each backend, the backend ``auto`` picks (its own
calibration), the speed-up of the fastest over numpy radix-2 and its ratio to the machine floor.

The floor is measured here: a compiled (numba) loop of radix-2 butterflies with Shoup products on
contiguous, cache-resident data, i.e. the cost of the N/2·log2(N) butterflies alone, without the
strided access of a real NTT. BLAS threads are fixed (default 1, one core for every backend).

    python benchmarks/ntt.py [--quick] [--threads 1] [--repeats 5] [--max-matrix-mb 1024]
"""
import argparse
import os
import sys
import time

QUICK = os.environ.get("HEZK_QUICK") == "1"


def _args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", default=QUICK, help="N = 2^12, 2^14; 1 and 8 limbs")
    parser.add_argument("--threads", type=int, default=1, help="BLAS threads (default 1)")
    parser.add_argument("--repeats", type=int, default=5, help="timed calls per cell (median)")
    parser.add_argument("--max-matrix-mb", type=int, default=1024,
                        help="skip a CROSS cell whose constant matrices would exceed this")
    return parser.parse_args()


ARGS = _args()
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = str(ARGS.threads)   # must precede the numpy import

import numba  # noqa: E402
import numpy as np  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from crypto.backend_select import BackendSelector  # noqa: E402
from crypto.cross import CrossBackend, ChunkSpec, mat_shape, widest_chunk_bits  # noqa: E402
from crypto.modarith import find_ntt_primes, shoup_precompute  # noqa: E402
from crypto.ntt import NTTTables, get_backend  # noqa: E402


@numba.njit(cache=True)
def _butterflies(x, y, w, ws, q, passes):
    """passes × len(x) Cooley–Tukey butterflies (Shoup product, branch-free reductions)."""
    for _ in range(passes):
        for j in range(len(x)):
            u = x[j]
            t = (y[j] * ws) >> np.uint64(32)
            v = y[j] * w - t * q
            v = min(v, v - q)
            s = u + v
            x[j] = min(s, s - q)
            d = u + q - v
            y[j] = min(d, d - q)


def butterfly_floor_ns() -> float:
    """Median ns per butterfly of the compiled loop above (4096 pairs, in cache)."""
    q = find_ntt_primes(31, 1, 2)[0]
    rng = np.random.default_rng(0)
    x, y = (rng.integers(0, q, 4096).astype(np.uint64) for _ in range(2))
    w = np.uint64(123456789 % q)
    ws = np.uint64(int(shoup_precompute(int(w), q)))
    passes = 200
    _butterflies(x, y, w, ws, np.uint64(q), 1)
    return median_seconds(lambda: _butterflies(x, y, w, ws, np.uint64(q), passes), 7) / (passes * 4096) * 1e9


def matmul_gflops() -> float:
    """float64 BLAS throughput of a CROSS-shaped product (512 x 512 times 512 x 256)."""
    a, b = np.random.rand(512, 512), np.random.rand(512, 256)
    return 2 * 512 * 512 * 256 / median_seconds(lambda: a @ b, 7) / 1e9


def median_seconds(call, repeats: int) -> float:
    call()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        samples.append(time.perf_counter() - start)
    return float(np.median(samples))


def cross_matrix_mb(n: int, limbs: int, width: int) -> float:
    rows, cols = mat_shape(n)
    count = ChunkSpec(width, rows).count
    return limbs * ((count * rows) ** 2 + (count * cols) ** 2) * 8 / 2**20


def main():
    sizes = [12, 14] if ARGS.quick else [12, 13, 14, 15, 16]
    limb_counts = [1, 8] if ARGS.quick else [1, 8, 32]
    repeats = 2 if ARGS.quick else ARGS.repeats
    floor_ns = butterfly_floor_ns()
    gflops = matmul_gflops()
    print(f"machine floor: {floor_ns:.2f} ns per compiled radix-2 butterfly (Shoup, contiguous, in cache); "
          f"float64 BLAS {gflops:.1f} GFLOP/s; BLAS threads = {ARGS.threads}")
    names = ["numpy", "numba", "cross-8", "cross-wide"]
    header = (f"{'N':>7} {'limbs':>5} | " + " ".join(f"{n + ' ms':>12}" for n in names)
              + f" | {'auto picks':>10} | {'best/numpy':>10} | {'best/floor':>10}")
    print(header)
    print("-" * len(header))
    rows = []
    for log_n in sizes:
        n = 1 << log_n
        for limbs in limb_counts:
            moduli = find_ntt_primes(31, limbs, n)
            tables = NTTTables(n, moduli)
            rng = np.random.default_rng(log_n * 100 + limbs)
            a = np.array([rng.integers(0, q, n) for q in moduli], dtype=np.uint64)
            wide = widest_chunk_bits(mat_shape(n)[0])
            backends = {"numpy": get_backend("numpy"), "numba": get_backend("numba"),
                        "cross-8": CrossBackend(8), "cross-wide": CrossBackend(wide, max_n=n)}
            ms = {}
            for name, backend in backends.items():
                width = 8 if name == "cross-8" else wide
                if name.startswith("cross") and cross_matrix_mb(n, limbs, width) > ARGS.max_matrix_mb:
                    ms[name] = float("nan")
                    continue
                ms[name] = median_seconds(lambda: backend.forward(a, tables), repeats) * 1e3
                backends[name] = None               # free CROSS matrices before the next cell
            auto = BackendSelector(cache_file=None).for_ntt(tables).name
            best = np.nanmin(list(ms.values()))
            floor_ms = limbs * n // 2 * log_n * floor_ns * 1e-6
            rows.append((n, limbs, ms, wide))
            print(f"{'2^' + str(log_n):>7} {limbs:>5} | " + " ".join(f"{ms[k]:>12.3f}" for k in names)
                  + f" | {auto:>10} | {ms['numpy'] / best:>9.1f}x | {best / floor_ms:>9.2f}x", flush=True)
    print("\nlimb-NTTs per second (cross-wide uses the widest exact chunk: "
          + ", ".join(f"2^{r[0].bit_length() - 1}: {r[3]} bits" for r in rows if r[1] == limb_counts[0]) + ")")
    print(f"{'N':>7} {'limbs':>5} | " + " ".join(f"{n + ' /s':>12}" for n in names))
    for n, limbs, ms, _ in rows:
        print(f"{'2^' + str(n.bit_length() - 1):>7} {limbs:>5} | "
              + " ".join(f"{limbs / (ms[k] * 1e-3):>12.0f}" if ms[k] == ms[k] else f"{'skipped':>12}" for k in names))


if __name__ == "__main__":
    main()
