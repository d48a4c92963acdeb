"""CKKS operation timings (median CPU ms, one thread) and precision, against SEAL and desilofhe in the same run.

For N14 and N15 (N16 with --n16): keygen (secret, public, relinearization and one rotation key),
public-key encrypt, decrypt, add, ct×pt, ct×ct + relinearize + rescale, one rotation, hoisted rotations
(per rotation, 8 steps), and the worst-slot precision in bits after one multiply of inputs in [-1, 1].
Peers at matching ring degree and depth: Microsoft SEAL through TenSEAL's ``sealapi`` bindings
(coefficient moduli [60, 40 × depth, 60], scale 2^40, exact scales kept), and desilofhe 2.0
(``Engine(max_level=depth)``, which picks its own N and scale).  The last column block is our time over
the fastest peer's.

Memory: SEAL serves its temporaries from a memory pool; numpy gets fresh pages from the kernel for
every large temporary unless glibc keeps freed memory.  By default this script raises glibc's mmap and
trim thresholds (``mallopt``, process-wide, this script only) so numpy reuses memory too; pass
``--no-malloc-pool`` to measure without (about a third slower at N14 on this machine).

    python benchmarks/ckks.py [--quick] [--n16] [--presets N14,N16] [--repeats 5] [--backend auto] [--no-malloc-pool]
"""
import argparse
import os
import sys

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ.setdefault(_var, "1")   # one core for every library (before numpy is imported)

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from benchmarks._timing import median_ms, print_table  # noqa: E402
from crypto import CKKSContext, CKKSParameters  # noqa: E402
from crypto.ckks.precision import precision_bits  # noqa: E402

OPS = ["keygen", "encrypt", "decrypt", "add", "ct*pt", "ct*ct+relin+rescale", "rotate", "hoisted rotate (each)"]
HOISTED_STEPS = list(range(1, 9))


def bench_hezk(preset, repeats, backend):
    params = CKKSParameters.preset(preset)
    ctx = CKKSContext.keygen(params, rotations=HOISTED_STEPS, backend=backend)
    # keygen on an existing ring (NTT tables built once, as SEAL builds its SEALContext once)
    out = {"keygen": median_ms(lambda: CKKSContext.keygen(params, rotations=[1], ring=ctx.ring),
                               repeats=max(1, repeats // 2), warmup=0)}
    pub, ev = ctx.public_context(), ctx.evaluator
    rng = np.random.default_rng(0)
    x, y = rng.uniform(-1, 1, params.slots), rng.uniform(-1, 1, params.slots)
    cx, cy, py = pub.encrypt(x), pub.encrypt(y), ctx.encode(y)
    out["encrypt"] = median_ms(lambda: pub.encrypt(x), repeats)
    out["decrypt"] = median_ms(lambda: ctx.decrypt(cx), repeats)
    out["add"] = median_ms(lambda: ev.add(cx, cy), repeats)
    out["ct*pt"] = median_ms(lambda: ev.mul(cx, py), repeats)
    out["ct*ct+relin+rescale"] = median_ms(lambda: ev.mul_rescale(cx, cy), repeats)
    out["rotate"] = median_ms(lambda: ev.rotate(cx, 1), repeats)
    out["hoisted rotate (each)"] = median_ms(lambda: ev.rotate_hoisted(cx, HOISTED_STEPS), repeats) / len(HOISTED_STEPS)
    out["bits"] = precision_bits(x * y, ctx.decrypt(ev.mul_rescale(cx, cy)))
    out["params"] = f"N=2^{params.log_n}, {params.max_level} levels, logQP={params.log_qp:.0f}"
    return out


def bench_seal(log_n, depth, repeats):
    try:
        import tenseal.sealapi as sa
    except ImportError:
        return None
    n = 1 << log_n
    parms = sa.EncryptionParameters(sa.SCHEME_TYPE.CKKS)
    parms.set_poly_modulus_degree(n)
    parms.set_coeff_modulus(sa.CoeffModulus.Create(n, [60] + [40] * depth + [60]))
    scale = 2.0**40
    context = sa.SEALContext(parms, True, sa.SEC_LEVEL_TYPE.TC128)

    def keygen():
        kg = sa.KeyGenerator(context)
        pk, rk, gk = sa.PublicKey(), sa.RelinKeys(), sa.GaloisKeys()
        kg.create_public_key(pk)
        kg.create_relin_keys(rk)
        kg.create_galois_keys([3], gk)            # SEAL's Galois element of a rotation by 1: 3^1
        return kg, pk, rk, gk

    out = {"keygen": median_ms(keygen, repeats=max(1, repeats // 2))}
    kg, pk, rk, _ = keygen()
    gk = sa.GaloisKeys()
    kg.create_galois_keys([pow(3, k, 2 * n) for k in HOISTED_STEPS], gk)
    encoder, encryptor = sa.CKKSEncoder(context), sa.Encryptor(context, pk)
    decryptor, evaluator = sa.Decryptor(context, kg.secret_key()), sa.Evaluator(context)
    rng = np.random.default_rng(0)
    x, y = rng.uniform(-1, 1, n // 2), rng.uniform(-1, 1, n // 2)

    def encode(v):
        pt = sa.Plaintext()
        encoder.encode(v.tolist(), scale, pt)
        return pt

    def encrypt(v):
        ct = sa.Ciphertext()
        encryptor.encrypt(encode(v), ct)
        return ct

    def decrypt(ct):
        pt = sa.Plaintext()
        decryptor.decrypt(ct, pt)
        return np.array(encoder.decode_double(pt))

    def mul_relin_rescale(a, b):
        ct = sa.Ciphertext()
        evaluator.multiply(a, b, ct)
        evaluator.relinearize_inplace(ct, rk)
        evaluator.rescale_to_next_inplace(ct)
        return ct

    def binary(op, a, b):
        ct = sa.Ciphertext()
        op(a, b, ct)
        return ct

    def rotate(a, k):
        ct = sa.Ciphertext()
        evaluator.rotate_vector(a, k, gk, ct)
        return ct

    cx, cy, py = encrypt(x), encrypt(y), encode(y)
    out["encrypt"] = median_ms(lambda: encrypt(x), repeats)
    out["decrypt"] = median_ms(lambda: decrypt(cx), repeats)
    out["add"] = median_ms(lambda: binary(evaluator.add, cx, cy), repeats)
    out["ct*pt"] = median_ms(lambda: binary(evaluator.multiply_plain, cx, py), repeats)
    out["ct*ct+relin+rescale"] = median_ms(lambda: mul_relin_rescale(cx, cy), repeats)
    out["rotate"] = median_ms(lambda: rotate(cx, 1), repeats)
    out["bits"] = precision_bits(x * y, decrypt(mul_relin_rescale(cx, cy)))
    out["params"] = f"N=2^{log_n}, {depth} levels, logQP={120 + 40 * depth}, scale 2^40"
    return out


def bench_desilo(depth, repeats):
    try:
        import desilofhe
    except ImportError:
        return None
    engine = desilofhe.Engine(max_level=depth, mode="cpu", thread_count=1)

    def keygen():
        sk = engine.create_secret_key()
        return sk, engine.create_public_key(sk), engine.create_relinearization_key(sk), \
            engine.create_rotation_key(sk)

    out = {"keygen": median_ms(keygen, repeats=max(1, repeats // 2))}
    sk, pk, rk, rot = keygen()
    rng = np.random.default_rng(0)
    slots = engine.slot_count
    x, y = rng.uniform(-1, 1, slots), rng.uniform(-1, 1, slots)
    cx, cy, py = engine.encrypt(x, pk), engine.encrypt(y, pk), engine.encode(y)
    out["encrypt"] = median_ms(lambda: engine.encrypt(x, pk), repeats)
    out["decrypt"] = median_ms(lambda: engine.decrypt(cx, sk), repeats)
    out["add"] = median_ms(lambda: engine.add(cx, cy), repeats)
    out["ct*pt"] = median_ms(lambda: engine.multiply(cx, py), repeats)
    out["ct*ct+relin+rescale"] = median_ms(lambda: engine.multiply(cx, cy, rk), repeats)  # rescales itself
    rotated = engine.decrypt(engine.rotate(cx, rot, 1), sk)
    assert np.abs(rotated - np.roll(x, -1)).max() < 1e-3, "desilofhe rotation direction changed"
    out["rotate"] = median_ms(lambda: engine.rotate(cx, rot, 1), repeats)
    out["bits"] = precision_bits(x * y, engine.decrypt(engine.multiply(cx, cy, rk), sk))
    out["params"] = f"N={2 * slots}, {depth} levels, its own scale"
    return out


def _peer(name, bench, *args):
    """A peer's results, or None (with the reason printed) when it cannot run these parameters."""
    try:
        return bench(*args)
    except Exception as exc:  # noqa: BLE001  (a peer's failure is a missing column, not a crash)
        print(f"{name} skipped: {type(exc).__name__}: {exc}")
        return None


def keep_freed_memory() -> bool:
    """glibc: serve large allocations from the heap and never trim it (a memory pool for numpy)."""
    import ctypes
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    m_trim_threshold, m_mmap_threshold = -1, -3
    return bool(libc.mallopt(m_mmap_threshold, 1 << 25) and libc.mallopt(m_trim_threshold, 1 << 30))  # glibc's maxima


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", default=os.environ.get("HEZK_QUICK") == "1",
                        help="N14 only, 3 repeats")
    parser.add_argument("--n16", action="store_true", help="also N16 (slow: minutes, GBs of keys)")
    parser.add_argument("--presets", default=None, help="comma-separated presets (overrides --quick/--n16)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--backend", default="auto", help="NTT backend: auto, numba, numpy, cross, fourstep")
    parser.add_argument("--no-malloc-pool", action="store_true", help="leave glibc's malloc thresholds alone")
    args = parser.parse_args()
    pool = False if args.no_malloc_pool else keep_freed_memory()
    print(f"timings: median CPU ms of {args.repeats if not args.quick else 3} runs, one thread; "
          f"glibc keeps freed memory: {pool}")
    repeats = 3 if args.quick else args.repeats
    presets = ["N14"] if args.quick else ["N14", "N15"] + (["N16"] if args.n16 else [])
    if args.presets:
        presets = [p.strip() for p in args.presets.split(",")]
    for preset in presets:
        params = CKKSParameters.preset(preset)
        results = {"hezk": bench_hezk(preset, repeats, args.backend),
                   "SEAL": _peer("SEAL", bench_seal, params.log_n, params.max_level, repeats),
                   "desilofhe": _peer("desilofhe", bench_desilo, params.max_level, repeats)}
        results = {k: v for k, v in results.items() if v is not None}
        peers = [k for k in results if k != "hezk"]
        headers = ["operation"] + [f"{k} ms" for k in results] + [f"hezk/{k}" for k in peers]
        rows = []
        for op in OPS:
            times = [results[k].get(op) for k in results]
            ratios = [results["hezk"][op] / results[k][op] if results[k].get(op) else None for k in peers]
            rows.append([op] + times + ratios)
        rows.append(["precision (bits)"] + [results[k]["bits"] for k in results] + [None] * len(peers))
        print_table(f"{preset}, backend={args.backend}: " + "; ".join(f"{k}: {v['params']}" for k, v in results.items()),
                    headers, rows)


if __name__ == "__main__":
    main()
