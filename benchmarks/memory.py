"""Peak resident memory (MB) of the same CKKS work in hezk, SEAL (TenSEAL's sealapi) and desilofhe.

Each library runs in a fresh subprocess of its own (so no library's arrays or allocator pools count against
another), single-threaded, with the like-for-like settings of ``benchmarks/ckks.py`` (same N, levels,
scale and key set): keygen (secret, public, relinearization and the 8 rotation keys of ``ROTATIONS``), two
public-key encryptions, ct×ct + relinearize + rescale, and one rotation.  The child reports its peak RSS
(``VmHWM``, the ru_maxrss of the child's own program) after the work, and its RSS after imports alone (the
interpreter, numpy, numba or the peer's extension), so that the key material's share is visible.  The
last columns are hezk's peak over each peer's.

    python benchmarks/memory.py [--presets N14,N15] [--n16] [--libraries hezk,SEAL,desilofhe]

N16 takes GBs per library (children run one after another, never at once).
"""
import argparse
import json
import os
import resource
import subprocess
import sys

if __name__ == "__main__":
    for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
        os.environ.setdefault(_var, "1")
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

LIBRARIES = ("hezk", "SEAL", "desilofhe")


def _rss_mb() -> float:
    """Current resident set size (MB) from /proc (Linux), else the peak so far."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:
        return _peak_mb()


def _peak_mb() -> float:
    """Peak RSS of this process in MB: VmHWM on Linux (the high-water mark of this program's memory map;
    ru_maxrss would also count the parent's RSS at fork, which an exec does not reset), else ru_maxrss
    (KiB on Linux, bytes on macOS)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 2**10
    except OSError:
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 2**10


def _work_hezk(s):
    import numpy as np
    from crypto import CKKSContext, CKKSParameters
    params = CKKSParameters.preset(s["preset"])
    yield "imports"
    ctx = CKKSContext.keygen(params, rotations=s["rotations"])
    yield "keygen"
    pub, ev = ctx.public_context(), ctx.evaluator
    rng = np.random.default_rng(0)
    x, y = rng.uniform(-1, 1, params.slots), rng.uniform(-1, 1, params.slots)
    cx, cy = pub.encrypt(x), pub.encrypt(y)
    yield "encrypt"
    prod = ev.mul_rescale(cx, cy)
    yield "ct*ct+relin+rescale"
    rot = ev.rotate(cx, 1)
    yield "rotate"
    del prod, rot   # no decryption: the peers' children do not decrypt either (benchmarks/ckks.py checks results)


def _work_seal(s):
    import numpy as np
    import tenseal.sealapi as sa
    lib = s["SEAL"]
    n = lib["n"]
    yield "imports"
    parms = sa.EncryptionParameters(sa.SCHEME_TYPE.CKKS)
    parms.set_poly_modulus_degree(n)
    parms.set_coeff_modulus(sa.CoeffModulus.Create(n, list(lib["moduli_bits"])))
    context = sa.SEALContext(parms, True, sa.SEC_LEVEL_TYPE.TC128)
    kg = sa.KeyGenerator(context)
    pk, rk, gk = sa.PublicKey(), sa.RelinKeys(), sa.GaloisKeys()
    kg.create_public_key(pk)
    kg.create_relin_keys(rk)
    kg.create_galois_keys([pow(3, k, 2 * n) for k in lib["rotations"]], gk)
    yield "keygen"
    encoder, encryptor = sa.CKKSEncoder(context), sa.Encryptor(context, pk)
    evaluator, scale = sa.Evaluator(context), 2.0 ** lib["log_scale"]
    rng = np.random.default_rng(0)
    cts = []
    for v in (rng.uniform(-1, 1, n // 2), rng.uniform(-1, 1, n // 2)):
        pt, ct = sa.Plaintext(), sa.Ciphertext()
        encoder.encode(v.tolist(), scale, pt)
        encryptor.encrypt(pt, ct)
        cts.append(ct)
    yield "encrypt"
    prod = sa.Ciphertext()
    evaluator.multiply(cts[0], cts[1], prod)
    evaluator.relinearize_inplace(prod, rk)
    evaluator.rescale_to_next_inplace(prod)
    yield "ct*ct+relin+rescale"
    rot = sa.Ciphertext()
    evaluator.rotate_vector(cts[0], 1, gk, rot)
    yield "rotate"


def _work_desilo(s):
    import desilofhe
    import numpy as np
    lib = s["desilofhe"]
    yield "imports"
    engine = desilofhe.Engine(max_level=lib["levels"], mode="cpu", thread_count=1)
    if 2 * engine.slot_count != lib["n"]:
        raise RuntimeError(f"Engine(max_level={lib['levels']}) runs at N={2 * engine.slot_count}, not N={lib['n']}")
    sk = engine.create_secret_key()
    pk, rk = engine.create_public_key(sk), engine.create_relinearization_key(sk)
    rotation_keys = [engine.create_fixed_rotation_key(sk, k) for k in lib["rotations"]]
    yield "keygen"
    rng = np.random.default_rng(0)
    cx = engine.encrypt(rng.uniform(-1, 1, engine.slot_count), pk)
    cy = engine.encrypt(rng.uniform(-1, 1, engine.slot_count), pk)
    yield "encrypt"
    prod = engine.multiply(cx, cy, rk)
    yield "ct*ct+relin+rescale"
    rot = engine.rotate(cx, rotation_keys[0])
    yield "rotate"
    del prod, rot


WORK = {"hezk": _work_hezk, "SEAL": _work_seal, "desilofhe": _work_desilo}


def child(library: str, spec: dict) -> dict:
    """Run one library's work in this process; {stage: peak MB after it} plus the RSS after imports.
    ``spec``: the preset name and rotations, and each library's settings (plain JSON: the child imports
    nothing of hezk unless it runs hezk)."""
    out = {}
    for stage in WORK[library](spec):
        out[stage] = _peak_mb()
        if stage == "imports":
            out["imports rss"] = _rss_mb()
    out["peak"] = _peak_mb()
    return out


def spec_of(preset: str) -> dict:
    """The settings of ``benchmarks.ckks.settings(preset)`` as plain JSON-able values."""
    from benchmarks.ckks import settings
    s = settings(preset)
    spec = {"preset": preset, "rotations": list(s.rotations)}
    for name, lib in s.libraries.items():
        spec[name] = {"n": lib.n, "levels": lib.levels, "log_scale": lib.log_scale,
                      "rotations": list(lib.rotations),
                      "moduli_bits": None if lib.moduli_bits is None else list(lib.moduli_bits)}
    return spec


def measure(library: str, preset: str) -> dict | None:
    """Peak RSS figures of ``library`` at ``preset`` from a fresh subprocess (None, with the reason printed,
    when the library is missing or fails)."""
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", library,
                           json.dumps(spec_of(preset))], capture_output=True, text=True)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        print(f"{library} {preset} skipped: {last}")
        return None
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", default="N14,N15", help="comma-separated presets (default N14,N15)")
    parser.add_argument("--n16", action="store_true", help="also N16 (GBs per library)")
    parser.add_argument("--libraries", default=",".join(LIBRARIES), help="comma-separated subset of "
                        + ", ".join(LIBRARIES))
    parser.add_argument("--child", nargs=2, metavar=("LIBRARY", "SPEC"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child[0], json.loads(args.child[1]))))
        return
    from benchmarks._timing import print_table
    presets = [p.strip() for p in args.presets.split(",") if p.strip()]
    if args.n16 and "N16" not in presets:
        presets.append("N16")
    libraries = [name.strip() for name in args.libraries.split(",")]
    unknown = sorted(set(libraries) - set(LIBRARIES))
    if unknown:
        parser.error(f"unknown libraries {unknown}; choose from {list(LIBRARIES)}")
    print("peak RSS in MB (VmHWM of a fresh subprocess per library, one thread): keygen with relin + "
          "8 rotation keys, 2 encryptions, ct*ct+relin+rescale, rotate")
    for preset in presets:
        results = {name: measure(name, preset) for name in libraries}
        results = {k: v for k, v in results.items() if v is not None}
        if not results:
            continue
        stages = ["imports rss", "imports", "keygen", "encrypt", "ct*ct+relin+rescale", "rotate", "peak"]
        rows = [[stage] + [results[k].get(stage) for k in results] for stage in stages]
        print_table(f"{preset}: peak RSS (MB) after each stage", ["stage"] + list(results), rows)
        peers = [k for k in results if k != "hezk"]
        if "hezk" in results and peers:
            best = min(peers, key=lambda k: results[k]["peak"])
            ratios = ", ".join(f"hezk/{k} {results['hezk']['peak'] / results[k]['peak']:.2f}x" for k in peers)
            print(f"  {preset} peak: {ratios} (best peer {best}: "
                  f"{results['hezk']['peak'] / results[best]['peak']:.2f}x)")


if __name__ == "__main__":
    main()
