"""Naive twins of the CROSS kernels, written from the definitions with Python ints."""
from tests.reference.naive_ntt import naive_negacyclic_ntt


def naive_mulmod(values, c: int, q: int):
    """[x·c mod q for x in values] (the twin of a BAT product by a constant)."""
    return [int(x) * int(c) % q for x in values]


def naive_matmul_mod(matrix, data, q: int):
    """(matrix · data) mod q for nested lists of Python ints."""
    cols = len(data[0])
    return [[sum(int(row[j]) * int(data[j][c]) for j in range(len(row))) % q for c in range(cols)]
            for row in matrix]


def naive_basis_conversion(residues, from_moduli, to_moduli):
    """y_j = Σ_i [x_i·(Q/q_i)^-1]_{q_i}·(Q/q_i) mod p_j for each coefficient (Bajard et al. 2016)."""
    big_q = 1
    for q in from_moduli:
        big_q *= q
    n = len(residues[0])
    out = []
    for p in to_moduli:
        row = []
        for c in range(n):
            total = 0
            for x_i, q in zip(residues, from_moduli):
                q_hat = big_q // q
                total += (int(x_i[c]) * pow(q_hat % q, -1, q) % q) * q_hat
            row.append(total % p)
        out.append(row)
    return out


def naive_ntt_rows(rows, moduli):
    """The O(n²) negacyclic NTT of each row mod its modulus (bit-reversed output order)."""
    return [naive_negacyclic_ntt(row, q) for row, q in zip(rows, moduli)]
