"""NTT backends on this machine: radix-2 numpy, radix-2 numba, CROSS (8-bit BAT, widest exact chunk)
on BLAS, and the MAT layout with compiled butterflies (fourstep).

For N = 2^12 ... 2^16 and 1, 8, 32 limbs of 31-bit primes: the median ms of one forward NTT of all
limbs and the limb-NTTs per second of each backend, the backend ``auto`` picks (its own
calibration), the speed-up of the fastest over numpy radix-2 and its ratio to the machine floor.

The floor is measured here, per cell: a compiled (numba) loop doing the same number of radix-2
butterflies (L·N/2·log2 N, Shoup products, branch-free reductions) as log2 N contiguous passes over
an array of the same size, i.e. the arithmetic and memory traffic of an ideal NTT without its
strided access. "(minima)" repeats the best/floor ratio with the fastest call of each instead of
the median, which is what a loaded, shared machine distorts least. BLAS threads are fixed
(default 1, one core for every backend).

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
from crypto.ntt import BasisConversion, NTTTables, get_backend  # noqa: E402


@numba.njit(cache=True)
def _butterflies(data, w, ws, q, passes):
    """passes × len(data)/2 Cooley–Tukey butterflies between the two halves of data (Shoup, branch-free)."""
    half = data.shape[0] // 2
    x, y = data[:half], data[half:]
    for _ in range(passes):
        for j in range(half):
            u = x[j]
            t = (y[j] * ws) >> np.uint64(32)
            v = y[j] * w - t * q
            v = min(v, v - q)
            s = u + v
            x[j] = min(s, s - q)
            d = u + q - v
            y[j] = min(d, d - q)


def floor_ms(n: int, limbs: int) -> tuple[float, float]:
    """(median, min) ms of L·N/2·log2 N compiled butterflies streaming over an array of L·N residues."""
    q = find_ntt_primes(31, 1, 2)[0]
    data = np.random.default_rng(0).integers(0, q, n * limbs).astype(np.uint64)
    w = np.uint64(123456789 % q)
    ws = np.uint64(int(shoup_precompute(int(w), q)))
    passes = n.bit_length() - 1
    med, low = timings(lambda: _butterflies(data, w, ws, np.uint64(q), passes), 5)
    return med * 1e3, low * 1e3


def matmul_gflops() -> float:
    """float64 BLAS throughput of a CROSS-shaped product (512 x 512 times 512 x 256)."""
    a, b = np.random.rand(512, 512), np.random.rand(512, 256)
    return 2 * 512 * 512 * 256 / median_seconds(lambda: a @ b, 7) / 1e9


def median_seconds(call, repeats: int) -> float:
    return timings(call, repeats)[0]


def timings(call, repeats: int) -> tuple[float, float]:
    """(median, minimum) seconds of ``call`` after one warm-up call."""
    call()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        samples.append(time.perf_counter() - start)
    return float(np.median(samples)), float(np.min(samples))


def cross_matrix_mb(n: int, limbs: int, width: int) -> float:
    rows, cols = mat_shape(n)
    count = ChunkSpec(width, rows).count
    return limbs * ((count * rows) ** 2 + (count * cols) ** 2) * 8 / 2**20


def conversion_table(repeats: int):
    """Fast basis conversion (ModUp-shaped: a few limbs to many) per backend, median ms."""
    cases = [(12, 2, 6), (14, 3, 9)] if ARGS.quick else [(12, 2, 6), (14, 3, 9), (15, 6, 20), (16, 8, 32)]
    names = ["numpy", "numba", "cross", "fourstep"]
    print(f"\nbasis conversion y_j = Σ_i [x_i·(Q/q_i)^-1]·(Q/q_i) mod p_j, median ms")
    print(f"{'N':>7} {'from':>5} {'to':>4} | " + " ".join(f"{n + ' ms':>12}" for n in names)
          + f" | {'auto picks':>10} | {'numba/best':>10}")
    for log_n, k_from, k_to in cases:
        n = 1 << log_n
        primes = find_ntt_primes(31, k_from + k_to, n)
        conv = BasisConversion(primes[:k_from], primes[k_from:])
        rng = np.random.default_rng(log_n)
        x = np.array([rng.integers(0, q, n) for q in primes[:k_from]], dtype=np.uint64)
        ms = {name: median_seconds(lambda: get_backend(name).convert_basis(x, conv), repeats) * 1e3
              for name in names}
        auto = BackendSelector(cache_file=None).for_conversion(conv, n).name
        print(f"{'2^' + str(log_n):>7} {k_from:>5} {k_to:>4} | " + " ".join(f"{ms[k]:>12.3f}" for k in names)
              + f" | {auto:>10} | {ms['numba'] / min(ms.values()):>9.1f}x", flush=True)


def main():
    sizes = [12, 14] if ARGS.quick else [12, 13, 14, 15, 16]
    limb_counts = [1, 8] if ARGS.quick else [1, 8, 32]
    repeats = 2 if ARGS.quick else ARGS.repeats
    in_cache = floor_ms(4096, 1)[1] * 1e6 / (2048 * 12)
    gflops = matmul_gflops()
    print(f"machine floor: {in_cache:.2f} ns per compiled radix-2 butterfly in cache (Shoup, contiguous); "
          f"float64 BLAS {gflops:.1f} GFLOP/s; BLAS threads = {ARGS.threads}; "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    names = ["numpy", "numba", "cross-8", "cross-wide", "fourstep"]
    header = (f"{'N':>7} {'limbs':>5} | " + " ".join(f"{n + ' ms':>12}" for n in names)
              + f" | {'auto picks':>10} | {'numpy/best':>10} | {'best/floor':>10} | {'(minima)':>8}")
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
                        "cross-8": CrossBackend(8), "cross-wide": CrossBackend(wide, max_n=n),
                        "fourstep": get_backend("fourstep")}
            ms, low = {}, {}
            for name, backend in backends.items():
                width = 8 if name == "cross-8" else wide
                if name.startswith("cross") and cross_matrix_mb(n, limbs, width) > ARGS.max_matrix_mb:
                    ms[name] = low[name] = float("nan")
                    continue
                ms[name], low[name] = (t * 1e3 for t in timings(lambda: backend.forward(a, tables), repeats))
                backends[name] = None               # free CROSS matrices before the next cell
            auto = BackendSelector(cache_file=None).for_ntt(tables).name
            best = np.nanmin(list(ms.values()))
            floor, floor_low = floor_ms(n, limbs)
            rows.append((n, limbs, ms, wide))
            print(f"{'2^' + str(log_n):>7} {limbs:>5} | " + " ".join(f"{ms[k]:>12.3f}" for k in names)
                  + f" | {auto:>10} | {ms['numpy'] / best:>9.1f}x | {best / floor:>9.2f}x"
                  + f" | {np.nanmin(list(low.values())) / floor_low:>7.2f}x", flush=True)
    print("\nlimb-NTTs per second (cross-wide uses the widest exact chunk: "
          + ", ".join(f"2^{r[0].bit_length() - 1}: {r[3]} bits" for r in rows if r[1] == limb_counts[0]) + ")")
    print(f"{'N':>7} {'limbs':>5} | " + " ".join(f"{n + ' /s':>12}" for n in names))
    for n, limbs, ms, _ in rows:
        print(f"{'2^' + str(n.bit_length() - 1):>7} {limbs:>5} | "
              + " ".join(f"{limbs / (ms[k] * 1e-3):>12.0f}" if ms[k] == ms[k] else f"{'skipped':>12}" for k in names))
    conversion_table(repeats)


if __name__ == "__main__":
    main()
