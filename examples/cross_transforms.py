"""CROSS transforms for students: a 4-bit BAT by hand, then a 16-point NTT as two matrix products.

CROSS (Tong et al., "Leveraging ASIC AI Chips for Homomorphic Encryption", 2025) runs HE on matrix
engines. BAT turns "multiply by a constant mod q" into a small low-precision matrix product; MAT
writes the NTT itself as matrix products. Run: python examples/cross_transforms.py
"""
import numpy as np

from crypto.cross import (CrossBackend, ChunkSpec, bat_mulmod, mat_constants, mat_shape,
                          widest_chunk_bits)
from crypto.modarith import primitive_2n_root
from crypto.ntt import NTTTables, bit_reverse_indices, get_backend


def check(condition: bool, what: str):
    if not condition:
        raise RuntimeError(f"check failed: {what}")


def chunks(value: int, width: int, count: int) -> list[int]:
    """value = Σ_t chunks[t]·2^(width·t)."""
    return [(value >> (width * t)) & (2**width - 1) for t in range(count)]


def bat_by_hand():
    q, c, x, w = 241, 100, 213, 4
    print(f"== BAT: {c}·{x} mod {q} with {w}-bit chunks ==")
    x_chunks = chunks(x, w, 2)
    print(f"x = {x} = {x_chunks[0]} + {x_chunks[1]}·16             -> data chunks {x_chunks}")
    shifted = [c * pow(2, w * t, q) % q for t in range(2)]
    print(f"c·2^(4t) mod q for t = 0, 1: {shifted}")
    matrix = np.array([chunks(v, w, 2) for v in shifted]).T        # M[s, t] = chunk_s(c·2^(4t) mod q)
    print(f"constant matrix M[s, t] = chunk_s(c·2^(4t) mod q):\n{matrix}")
    z = matrix @ np.array(x_chunks)
    print(f"M @ x_chunks = {z.tolist()}  (a 4-bit x 4-bit matmul: small exact integers)")
    combined = int(z[0] + z[1] * 16)
    print(f"recombine: {z[0]} + {z[1]}·16 = {combined};  one Barrett reduction: {combined} mod {q} = {combined % q}")
    library = int(bat_mulmod(np.array([x]), c, q, chunk_bits=w)[0])
    print(f"check: {c}·{x} mod {q} = {c * x % q}, crypto.cross.bat_mulmod gives {library}\n")
    check(combined % q == c * x % q == library, "BAT by hand equals Python and the library")


def ntt_as_two_matmuls():
    n, q = 16, 97                          # 97 = 3·32 + 1 has a primitive 32nd root of unity
    psi = primitive_2n_root(q, n)
    rows, cols = mat_shape(n)
    print(f"== 16-point negacyclic NTT mod {q} (ψ = {psi}) as ((F1·X) ∘ T)·F2 with R = {rows}, C = {cols} ==")
    m = mat_constants(n, q, psi)
    for name in ("F1", "T", "F2"):
        print(f"{name} =\n{m[name].astype(int)}")
    a = np.arange(1, n + 1, dtype=np.int64) * 7 % q
    x = a.reshape(rows, cols)
    print(f"coefficients a = {a.tolist()}, as the {rows}x{cols} matrix X (row major)")
    step1 = (m["F1"].astype(np.int64) @ x) % q
    step2 = (step1 * m["T"].astype(np.int64)) % q
    out = ((step2 @ m["F2"].astype(np.int64)) % q).reshape(n)
    print(f"F1·X mod q        =\n{step1}\n(F1·X) ∘ T mod q  =\n{step2}")
    print(f"((F1·X) ∘ T)·F2   = {out.tolist()}")
    brv = bit_reverse_indices(n)
    direct = [sum(int(a[j]) * pow(psi, (2 * int(brv[i]) + 1) * j, q) for j in range(n)) % q for i in range(n)]
    print(f"definition a(ψ^(2·brv(i)+1)) = {direct}")
    tables = NTTTables(n, [q])
    radix2 = get_backend("numpy").forward(a[None].astype(np.uint64), tables)[0]
    cross8 = CrossBackend(chunk_bits=8).forward(a[None].astype(np.uint64), tables)[0]
    print(f"radix-2 backend        = {radix2.tolist()}\nCROSS 8-bit BAT backend = {cross8.tolist()}")
    check(out.tolist() == direct == radix2.tolist() == cross8.tolist(), "4-step NTT equals the definition")
    back = CrossBackend(chunk_bits=8).inverse(cross8[None], tables)[0]
    check(back.tolist() == a.tolist(), "inverse NTT")
    print("inverse (1/N folded into F1^-1, F2^-1) gives back a: True\n")


def chunk_widths():
    print("== widest exact float64 chunk per 4-step size (partial sums below 2^53) ==")
    for log_n in (12, 14, 16):
        rows, _ = mat_shape(1 << log_n)
        width = widest_chunk_bits(rows)
        spec = ChunkSpec(width, rows)
        print(f"N = 2^{log_n}: R = {rows}, widest chunk {width} bits ({spec.count} chunks), "
              f"partial sums ≤ 2^{np.log2(float(spec.partial_sum_bound)):.2f}")


if __name__ == "__main__":
    bat_by_hand()
    ntt_as_two_matmuls()
    chunk_widths()
