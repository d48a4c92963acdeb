"""CKKS operation timings (median CPU ms, one thread) and precision, against SEAL and desilofhe in the same run.

Like for like: :func:`settings` gives every library the same ring degree N, the same number of levels,
the same scale 2^log_scale and the same key set (secret, public, relinearization, and rotation keys for
the steps ``ROTATIONS`` only); where a peer cannot take exactly that, the closest equal choice is made and a
note printed with the table (SEAL: one special prime of at most 60 bits; desilofhe: its own moduli and an
unexposed scale). Nothing is tuned for one side only: every library runs single-threaded in this one
process with the allocator left alone.

Operations: keygen (all keys above), public-key encrypt, decrypt, add, ct×pt + rescale, ct×ct +
relinearize + rescale (desilofhe rescales inside its multiply), one rotation, ``len(ROTATIONS)``
rotations of one ciphertext (per rotation; hoisted where the library offers it), and the worst-slot
precision in bits after one multiply of inputs in [-1, 1]. The last column block is our time over each
peer's. Peers that are not installed are skipped with a note (``pip install tenseal desilofhe``).

    python benchmarks/ckks.py [--quick] [--n16] [--presets N14,N16] [--repeats 5] [--backend auto]
"""
import argparse
import math
import os
import sys
from dataclasses import dataclass

if __name__ == "__main__":
    for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
        os.environ.setdefault(_var, "1")   # one core for every library (before numpy is imported)
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import numpy as np  # noqa: E402

from benchmarks._timing import median_ms, print_table  # noqa: E402
from crypto import CKKSContext, CKKSParameters  # noqa: E402
from crypto.ckks.precision import precision_bits  # noqa: E402

OPS = ["keygen", "encrypt", "decrypt", "add", "ct*pt+rescale", "ct*ct+relin+rescale", "rotate",
       "rotations (each of 8)"]
ROTATIONS = tuple(range(1, 9))  #: the rotation keys every library generates (and the steps rotated by)
SEAL_MAX_PRIME_BITS = 60


@dataclass(frozen=True)
class LibrarySettings:
    """What one library is asked to run: ring degree, levels, scale (None: not settable), rotation keys,
    coefficient moduli bit sizes (None: chosen by the library)."""

    n: int
    levels: int
    log_scale: int | None
    rotations: tuple
    moduli_bits: tuple | None


@dataclass(frozen=True)
class Settings:
    """The common choice for one preset, each library's settings, and notes on every difference."""

    preset: str
    n: int
    levels: int
    log_scale: int
    rotations: tuple
    libraries: dict
    notes: tuple

    def rows(self):
        """(library, N, levels, scale, moduli bits, rotation keys) for the settings table."""
        for name, lib in self.libraries.items():
            moduli = "its own" if lib.moduli_bits is None else _moduli_text(lib.moduli_bits)
            yield [name, f"2^{lib.n.bit_length() - 1}", str(lib.levels),
                   "not settable" if lib.log_scale is None else f"2^{lib.log_scale}", moduli,
                   f"{len(lib.rotations)} rotation keys (steps {lib.rotations[0]}..{lib.rotations[-1]}), relin"]


def _moduli_text(bits) -> str:
    """[60, 50 x 6, 60] style, with logQP."""
    parts, k = [], 0
    while k < len(bits):
        run = next((j for j in range(k, len(bits)) if bits[j] != bits[k]), len(bits)) - k
        parts.append(f"{bits[k]}" if run == 1 else f"{bits[k]} x {run}")
        k += run
    return f"[{', '.join(parts)}] (logQP {sum(bits)})"


def settings(preset: str) -> Settings:
    """The like-for-like settings of ``preset`` (one of CKKSParameters' presets) for hezk, SEAL and desilofhe.

    hezk: the preset (q0, one 2^log_scale level per level, special moduli P). SEAL: the same N, levels and
    scale with coefficient moduli [q0, log_scale x levels, P], each prime capped at 60 bits (SEAL has one
    special prime). desilofhe: ``Engine(max_level=levels)``; its N is checked at run time, its moduli and
    scale are its own.
    """
    params = CKKSParameters.preset(preset)
    n, levels, log_scale = params.n, params.max_level, int(round(params.log_scale))
    q_bits = [round(math.log2(q)) for q in params.q_moduli]
    q0_bits = round(math.log2(params.modulus_at(0)))
    p_bits = round(sum(math.log2(p) for p in params.p_moduli))
    hezk_moduli = (q0_bits,) + (log_scale,) * levels + (p_bits,)
    seal_moduli = tuple(min(b, SEAL_MAX_PRIME_BITS) for b in hezk_moduli)
    notes = [f"hezk: each modulus above is a product of word-size primes ({len(q_bits)} Q limbs, "
             f"{len(params.p_moduli)} P limbs, dnum={params.dnum})"]
    if seal_moduli != hezk_moduli:
        notes.append(f"SEAL: primes of at most {SEAL_MAX_PRIME_BITS} bits and one special prime, so its moduli "
                     f"are {_moduli_text(seal_moduli)} against hezk's {_moduli_text(hezk_moduli)} (the closest "
                     "equal choice: same q0 up to the cap, same scale and levels)")
    notes.append("SEAL: no hoisted rotations in its API; its 'rotations' row is separate rotate_vector calls")
    notes.append(f"desilofhe: Engine(max_level={levels}) picks its own moduli and an unexposed scale (not "
                 f"2^{log_scale}): its precision is printed apart, not in the table; N is checked at run time")
    libraries = {
        "hezk": LibrarySettings(n, levels, log_scale, ROTATIONS, hezk_moduli),
        "SEAL": LibrarySettings(n, levels, log_scale, ROTATIONS, seal_moduli),
        "desilofhe": LibrarySettings(n, levels, None, ROTATIONS, None),
    }
    return Settings(preset, n, levels, log_scale, ROTATIONS, libraries, tuple(notes))


def _check_rotation(name, decrypted, x):
    """Each library's rotate by +1 must move slot i+1 to slot i (numpy's roll by -1)."""
    if np.abs(np.asarray(decrypted)[:x.size].real - np.roll(x, -1)).max() > 1e-3:
        raise RuntimeError(f"{name}: rotation by 1 does not match np.roll(x, -1)")


def bench_hezk(s: Settings, preset, repeats, backend):
    params = CKKSParameters.preset(preset)
    ctx = CKKSContext.keygen(params, rotations=s.rotations, backend=backend)
    # keygen on an existing ring (NTT tables built once, as SEAL builds its SEALContext once)
    out = {"keygen": median_ms(lambda: CKKSContext.keygen(params, rotations=s.rotations, ring=ctx.ring),
                               repeats=max(1, repeats // 2), warmup=0)}
    pub, ev = ctx.public_context(), ctx.evaluator
    rng = np.random.default_rng(0)
    x, y = rng.uniform(-1, 1, params.slots), rng.uniform(-1, 1, params.slots)
    cx, cy, py = pub.encrypt(x), pub.encrypt(y), ctx.encode(y)
    _check_rotation("hezk", ctx.decrypt(ev.rotate(cx, 1)), x)
    out["encrypt"] = median_ms(lambda: pub.encrypt(x), repeats)
    out["decrypt"] = median_ms(lambda: ctx.decrypt(cx), repeats)
    out["add"] = median_ms(lambda: ev.add(cx, cy), repeats)
    out["ct*pt+rescale"] = median_ms(lambda: ev.mul_rescale(cx, py), repeats)
    out["ct*ct+relin+rescale"] = median_ms(lambda: ev.mul_rescale(cx, cy), repeats)
    out["rotate"] = median_ms(lambda: ev.rotate(cx, 1), repeats)
    out["rotations (each of 8)"] = median_ms(lambda: ev.rotate_hoisted(cx, s.rotations), repeats) / len(s.rotations)
    out["bits"] = precision_bits(x * y, ctx.decrypt(ev.mul_rescale(cx, cy)))
    return out


def bench_seal(s: Settings, repeats):
    try:
        import tenseal.sealapi as sa
    except ImportError:
        return None
    lib = s.libraries["SEAL"]
    n = lib.n
    parms = sa.EncryptionParameters(sa.SCHEME_TYPE.CKKS)
    parms.set_poly_modulus_degree(n)
    parms.set_coeff_modulus(sa.CoeffModulus.Create(n, list(lib.moduli_bits)))
    scale = 2.0 ** lib.log_scale
    context = sa.SEALContext(parms, True, sa.SEC_LEVEL_TYPE.TC128)
    galois = [pow(3, k, 2 * n) for k in lib.rotations]  # SEAL's Galois element of a left rotation by k: 3^k

    def keygen():
        kg = sa.KeyGenerator(context)
        pk, rk, gk = sa.PublicKey(), sa.RelinKeys(), sa.GaloisKeys()
        kg.create_public_key(pk)
        kg.create_relin_keys(rk)
        kg.create_galois_keys(galois, gk)
        return kg, pk, rk, gk

    out = {"keygen": median_ms(keygen, repeats=max(1, repeats // 2))}
    kg, pk, rk, gk = keygen()
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

    def rescale(ct):
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
    _check_rotation("SEAL", decrypt(rotate(cx, 1)), x)
    out["encrypt"] = median_ms(lambda: encrypt(x), repeats)
    out["decrypt"] = median_ms(lambda: decrypt(cx), repeats)
    out["add"] = median_ms(lambda: binary(evaluator.add, cx, cy), repeats)
    out["ct*pt+rescale"] = median_ms(lambda: rescale(binary(evaluator.multiply_plain, cx, py)), repeats)
    out["ct*ct+relin+rescale"] = median_ms(lambda: mul_relin_rescale(cx, cy), repeats)
    out["rotate"] = median_ms(lambda: rotate(cx, 1), repeats)
    out["rotations (each of 8)"] = median_ms(lambda: [rotate(cx, k) for k in lib.rotations],
                                             repeats) / len(lib.rotations)
    out["bits"] = precision_bits(x * y, decrypt(mul_relin_rescale(cx, cy)))
    return out


def bench_desilo(s: Settings, repeats):
    try:
        import desilofhe
    except ImportError:
        return None
    lib = s.libraries["desilofhe"]
    engine = desilofhe.Engine(max_level=lib.levels, mode="cpu", thread_count=1)
    if 2 * engine.slot_count != lib.n:
        raise RuntimeError(f"Engine(max_level={lib.levels}) runs at N={2 * engine.slot_count}, not N={lib.n}")

    def keygen():
        sk = engine.create_secret_key()
        return sk, engine.create_public_key(sk), engine.create_relinearization_key(sk), \
            [engine.create_fixed_rotation_key(sk, k) for k in lib.rotations]

    out = {"keygen": median_ms(keygen, repeats=max(1, repeats // 2))}
    sk, pk, rk, rotation_keys = keygen()
    rng = np.random.default_rng(0)
    x, y = rng.uniform(-1, 1, engine.slot_count), rng.uniform(-1, 1, engine.slot_count)
    cx, cy, py = engine.encrypt(x, pk), engine.encrypt(y, pk), engine.encode(y)
    _check_rotation("desilofhe", engine.decrypt(engine.rotate(cx, rotation_keys[0]), sk), x)
    out["encrypt"] = median_ms(lambda: engine.encrypt(x, pk), repeats)
    out["decrypt"] = median_ms(lambda: engine.decrypt(cx, sk), repeats)
    out["add"] = median_ms(lambda: engine.add(cx, cy), repeats)
    out["ct*pt+rescale"] = median_ms(lambda: engine.multiply(cx, py), repeats)  # rescales itself
    out["ct*ct+relin+rescale"] = median_ms(lambda: engine.multiply(cx, cy, rk), repeats)  # rescales itself
    out["rotate"] = median_ms(lambda: engine.rotate(cx, rotation_keys[0]), repeats)
    out["rotations (each of 8)"] = median_ms(lambda: engine.rotate_many(cx, rotation_keys),
                                             repeats) / len(rotation_keys)
    out["own-scale bits"] = precision_bits(x * y, engine.decrypt(engine.multiply(cx, cy, rk), sk))
    return out


def _peer(name, bench, *args):
    """A peer's results, or None (with the reason printed) when it is missing or cannot run these settings."""
    try:
        result = bench(*args)
    except Exception as exc:  # noqa: BLE001  (a peer's failure is a missing column, not a crash)
        print(f"{name} skipped: {type(exc).__name__}: {exc}")
        return None
    if result is None:
        print(f"{name} skipped: not installed (pip install tenseal desilofhe)")
    return result


def print_settings(s: Settings) -> None:
    print_table(f"{s.preset}: settings given to every library (scale 2^{s.log_scale}, {s.levels} levels, "
                f"N=2^{s.n.bit_length() - 1}, rotation steps {list(s.rotations)})",
                ["library", "N", "levels", "scale", "coefficient moduli bits", "keys generated"], list(s.rows()))
    for note in s.notes:
        print(f"  note: {note}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", default=os.environ.get("HEZK_QUICK") == "1",
                        help="N14 only, 3 repeats")
    parser.add_argument("--n16", action="store_true", help="also N16 (slow: minutes, GBs of keys)")
    parser.add_argument("--presets", default=None, help="comma-separated presets (overrides --quick/--n16)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--backend", default="auto", help="NTT backend: auto, numba, numpy, cross, fourstep, jax")
    args = parser.parse_args()
    repeats = 3 if args.quick else args.repeats
    print(f"timings: median CPU ms of {repeats} runs, one thread for every library, default allocator")
    presets = ["N14"] if args.quick else ["N14", "N15"] + (["N16"] if args.n16 else [])
    if args.presets:
        presets = [p.strip() for p in args.presets.split(",")]
    for preset in presets:
        s = settings(preset)
        print_settings(s)
        results = {"hezk": bench_hezk(s, preset, repeats, args.backend),
                   "SEAL": _peer("SEAL", bench_seal, s, repeats),
                   "desilofhe": _peer("desilofhe", bench_desilo, s, repeats)}
        results = {k: v for k, v in results.items() if v is not None}
        peers = [k for k in results if k != "hezk"]
        headers = ["operation"] + [f"{k} ms" for k in results] + [f"hezk/{k}" for k in peers]
        rows = []
        for op in OPS:
            times = [results[k].get(op) for k in results]
            ratios = [results["hezk"][op] / results[k][op] if results[k].get(op) else None for k in peers]
            rows.append([op] + times + ratios)
        rows.append([f"precision at 2^{s.log_scale} (bits, worst of random slots)"] + [results[k].get("bits") for k in results]
                    + [None] * len(peers))
        print_table(f"{preset}, backend={args.backend}", headers, rows)
        if "own-scale bits" in results.get("desilofhe", {}):
            print(f"  desilofhe precision at its own scale: {results['desilofhe']['own-scale bits']:.2f} bits "
                  "(not comparable)")


if __name__ == "__main__":
    main()
