"""Proof primitives benchmark: BabyBear / F_p4 arithmetic against galois, NTT, sumcheck, commitment.

    python benchmarks/proofs_primitives.py [--quick]

Times are medians of this process's CPU time in ms (single thread; the machine is shared). The peer is
galois (the test oracle) on the same arrays in the same run; "ratio" is galois time / hezk time.
"""
import argparse
import time

try:
    import _repo  # noqa: F401  (run as a script: threads and import path first)
except ImportError:
    from benchmarks import _repo  # noqa: F401  (imported as benchmarks.<name>)

from benchmarks._timing import median_ms, print_table  # noqa: E402

import galois  # noqa: E402
import numpy as np  # noqa: E402

from proofs import field as F  # noqa: E402
from proofs.commit import CommitParams, commit, ntt, open_commitment, verify_opening  # noqa: E402
from proofs.sumcheck import prove_sumcheck, verify_sumcheck  # noqa: E402
from proofs.transcript import Transcript  # noqa: E402


def field_rows(n, repeats):
    gf = galois.GF(F.P)
    a, b = F.random_elements(n, seed=1), F.random_elements(n, seed=2)
    nonzero = a | np.uint64(1)
    ga, gb, g_nonzero = gf(a.astype(np.int64)), gf(b.astype(np.int64)), gf(nonzero.astype(np.int64))
    rows = []
    for name, ours, theirs in [("add", lambda: F.add(a, b), lambda: ga + gb),
                               ("mul", lambda: F.mul(a, b), lambda: ga * gb),
                               ("inv", lambda: F.inv(nonzero), lambda: g_nonzero ** -1)]:
        t_ours, t_theirs = median_ms(ours, repeats), median_ms(theirs, repeats)
        rows.append([f"{name}, n = 2^{n.bit_length() - 1}", t_ours, t_theirs, t_theirs / t_ours])
    return rows


def ext_rows(n, repeats):
    """F_p4 product: ours vs galois GF(p^4) (its field is built once, outside the timing)."""
    modulus = galois.Poly([1, 0, 0, 0, F.P - F.W], field=galois.GF(F.P))
    gf4 = galois.GF(F.P ** 4, irreducible_poly=modulus, primitive_element=galois.Poly([1, 0], field=galois.GF(F.P)),
                    verify=False)
    a, b = F.ext_random(n, seed=3), F.ext_random(n, seed=4)
    powers = [F.P ** k for k in range(4)]
    ga = gf4([sum(int(c) * p for c, p in zip(row, powers)) for row in a])
    gb = gf4([sum(int(c) * p for c, p in zip(row, powers)) for row in b])
    t_ours, t_theirs = median_ms(lambda: F.ext_mul(a, b), repeats), median_ms(lambda: ga * gb, repeats)
    return [[f"ext_mul, n = 2^{n.bit_length() - 1}", t_ours, t_theirs, t_theirs / t_ours]]


def protocol_rows(log_sizes, repeats):
    rows = []
    for k in log_sizes:
        n = 1 << k
        values = F.random_elements(n, seed=k)
        t_ntt = median_ms(lambda: ntt(values.reshape(16, -1)), repeats)
        a, b, c = (F.random_elements(n, seed=k + i) for i in range(3))
        terms = [(F.ext_one(), [a, b, c]), (F.ext_one(), [a])]
        claim = F.ext_add(F.ext_from_base(F.sum_(F.mul(F.mul(a, b), c))), F.ext_from_base(F.sum_(a)))
        t_prove = median_ms(lambda: prove_sumcheck(terms, claim, Transcript("b")), repeats)
        proof, _, _ = prove_sumcheck(terms, claim, Transcript("b"))
        t_verify = median_ms(lambda: verify_sumcheck(proof, claim, k, 3, Transcript("b")), repeats)
        params = CommitParams()
        t_commit = median_ms(lambda: commit(values, params), max(1, repeats // 2))
        commitment, witness = commit(values, params)
        point = F.ext_random(k, seed=9)
        t_open = median_ms(lambda: open_commitment(witness, point, Transcript("o")), repeats)
        value, opening = open_commitment(witness, point, Transcript("o"))
        t_check = median_ms(lambda: verify_opening(commitment, point, value, opening, Transcript("o")), repeats)
        rows.append([f"2^{k}", t_ntt, t_prove, t_verify, t_commit, t_open, t_check, len(opening.to_bytes()) / 1024,
                     commitment.security_bits])
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, fewer repeats")
    args = parser.parse_args()
    repeats = 3 if args.quick else 5
    sizes = [1 << 12, 1 << 16] if args.quick else [1 << 12, 1 << 16, 1 << 20]
    start = time.perf_counter()
    rows = [row for n in sizes for row in field_rows(n, repeats)]
    rows += [row for n in sizes[:2] for row in ext_rows(n, repeats)]
    print_table("BabyBear and F_p4 arithmetic (ms, CPU): hezk vs galois", ["op", "hezk", "galois", "ratio"], rows)
    log_sizes = [10, 14] if args.quick else [10, 14, 18, 20]
    print_table("NTT (16 rows), degree-3 sumcheck, commitment (ms, CPU; opening KiB; security bits)",
                ["table", "ntt", "sc prove", "sc verify", "commit", "open", "verify", "open KiB", "bits"],
                protocol_rows(log_sizes, repeats))
    print(f"\n(total {time.perf_counter() - start:.1f} s)")


if __name__ == "__main__":
    main()
