"""O(n²) reference transforms mod q, written from the definitions with Python ints."""
from crypto.modarith import primitive_2n_root


def brv(i: int, bits: int) -> int:
    return int(format(i, f"0{bits}b")[::-1], 2) if bits else 0


def naive_negacyclic_ntt(coeffs, q: int):
    """out[i] = Σ_j a_j ψ^((2·brv(i)+1)·j) mod q: evaluations at the odd powers of ψ, bit-reversed order."""
    n = len(coeffs)
    bits = n.bit_length() - 1
    psi = primitive_2n_root(q, n)
    out = []
    for i in range(n):
        x = pow(psi, 2 * brv(i, bits) + 1, q)
        acc, xp = 0, 1
        for a in coeffs:
            acc = (acc + int(a) * xp) % q
            xp = xp * x % q
        out.append(acc)
    return out


def naive_negacyclic_mul(a, b, q: int):
    """a·b in Z_q[X]/(X^n + 1), schoolbook."""
    n = len(a)
    out = [0] * n
    for i in range(n):
        for j in range(n):
            k = i + j
            term = int(a[i]) * int(b[j])
            if k >= n:
                out[k - n] = (out[k - n] - term) % q
            else:
                out[k] = (out[k] + term) % q
    return out
