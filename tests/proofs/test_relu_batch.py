"""The batched zkReLU bits sumcheck (proofs.layers.relu_batch): its prover against the generic sumcheck, the fused
kernels against their numpy twin, the verifier's W~ against the table, and a non-bit plane entry rejected."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from proofs import field as F
from proofs.errors import ProofRejected
from proofs.layers.common import Claim
from proofs.layers.packing import Packing
from proofs.layers.relu_batch import (BitsProver, prove_bits, prove_select, round_sums_numpy, verify_bits,
                                      verify_select, weight_eval, weight_table)
from proofs.layers.requant import Decomposition, decompose
from proofs.mle import eq_table, mle_evaluate
from proofs.sumcheck import SumcheckProver
from proofs.transcript import Transcript

SETTINGS = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _ext(rng, *shape):
    return F.to_field(rng.integers(0, F.P, size=(*shape, F.EXT_DEGREE)))


def _check_prover(n, seed, boolean):
    rng = np.random.default_rng(seed)
    lin, tau, beta = _ext(rng, 1 << n), _ext(rng, n), _ext(rng)
    bits = rng.integers(0, 2, size=1 << n).astype(np.uint64) if boolean else \
        F.to_field(rng.integers(0, F.P, size=1 << n))
    eq = eq_table(tau)
    reference = SumcheckProver([(1, [F.ext_add(lin, F.ext_mul(eq, beta)), bits]), (F.ext_neg(beta), [eq, bits, bits])])
    mine = BitsProver(lin, tau, bits, beta)
    for _ in range(n):
        assert np.array_equal(reference.round_message(), mine.round_message())
        r = _ext(rng)
        reference.bind(r)
        mine.bind(r)
    for ours, theirs in zip(reference.final_evaluations(), mine.final_evaluations()):
        assert all(np.array_equal(a, b) for a, b in zip(ours, theirs))


@SETTINGS
@given(st.integers(1, 8), st.integers(0, 2 ** 32 - 1), st.booleans())
def test_bits_prover_equals_the_generic_sumcheck(n, seed, boolean):
    """Gruen's split eq changes the prover's work, not its messages."""
    _check_prover(n, seed, boolean)


def test_bits_prover_equals_the_generic_sumcheck_on_the_kernel_path():
    _check_prover(16, 3, True)  # >= NUMBA_MIN_SIZE: the fused kernels run in the first rounds


@pytest.mark.parametrize("ext", [False, True])
def test_round_kernels_equal_their_numpy_twin(ext):
    from proofs import _graph_kernels as kernels
    rng = np.random.default_rng(int(ext))
    n = 1 << 12
    lin, eq = _ext(rng, n), _ext(rng, n // 2)
    bits = _ext(rng, n) if ext else F.to_field(rng.integers(0, F.P, size=n))
    bits[:64] = 0  # the base kernel skips zero entries
    out = np.zeros((2, 3, F.EXT_DEGREE), dtype=np.uint64)
    (kernels.bits_round_ext if ext else kernels.bits_round_base)(lin, eq, bits, out)
    first, second = round_sums_numpy(lin, eq, bits)
    assert np.array_equal(out[0], first) and np.array_equal(out[1], second)
    pairs = np.empty((n // 4, F.EXT_DEGREE), dtype=np.uint64)
    kernels.pair_sums(eq, pairs)
    assert np.array_equal(pairs, F.ext_add(eq[0::2], eq[1::2]))


SPECS = (Decomposition(3, 6, True), Decomposition(0, 5, False), Decomposition(2, 4, True))


def _witnesses(rng):
    witnesses = []
    for spec, k in zip(SPECS, (3, 2, 4)):
        limit = 1 << (spec.q_bits - 1 + spec.shift)
        witnesses.append(decompose(rng.integers(-limit // 2, limit // 2, size=1 << k), spec))
    return witnesses


def _packed(witnesses):
    keys, tables = [], []
    for i, w in enumerate(witnesses):
        for g, (start, count) in enumerate(w.spec.groups):
            keys.append((i, start, count))
            tables.append(w.table(g))
    packing = Packing(tuple(len(t) for t in tables))
    return keys, packing, packing.pack(tables)


def _run(witnesses, packed=None, strict=True):
    """Prove and verify the selects and the batched bits of ``witnesses`` (``packed`` overrides the table)."""
    rng = np.random.default_rng(7)
    keys, packing, honest = _packed(witnesses)
    packed = honest if packed is None else packed
    claims = []
    for w in witnesses:
        point = _ext(rng, w.acc.size.bit_length() - 1)
        claims.append(Claim(point, mle_evaluate(F.to_field(w.out), point)))
    transcript, statements = Transcript("t"), []
    items = []
    for w, claim in zip(witnesses, claims):
        proof, acc_claim, statement = prove_select(w, claim, transcript)
        assert np.array_equal(acc_claim.value, mle_evaluate(F.to_field(w.acc), acc_claim.point))
        items.append(proof)
        statements.append(statement)
    bits_proof, bits_claim = prove_bits(packed, packing, keys, statements, transcript, strict=strict)
    transcript, checked = Transcript("t"), []
    for w, claim, proof in zip(witnesses, claims, items):
        checked.append(verify_select(w.spec, claim, proof, "op", transcript)[1])
    final = verify_bits(packing, keys, checked, bits_proof, transcript)
    if not np.array_equal(mle_evaluate(packed, final.point), final.value):
        raise ProofRejected("the opening would fail", "test")
    return packing, keys, statements


def test_batched_bits_accept_and_the_verifier_weight_is_the_tables_mle():
    rng = np.random.default_rng(1)
    packing, keys, statements = _run(_witnesses(rng))
    alphas = _ext(rng, len(statements))
    sigma = _ext(rng, packing.num_vars)
    assert np.array_equal(weight_eval(packing, keys, statements, alphas, sigma),
                          mle_evaluate(weight_table(packing, keys, statements, alphas), sigma))


def test_a_plane_entry_that_is_not_a_bit_is_rejected():
    """(b_R, b_R+1) = (0, 1) rewritten as (2, 0): every linear claim still holds, only the bit check fails."""
    rng = np.random.default_rng(2)
    witnesses = _witnesses(rng)
    _run(witnesses)
    w = witnesses[0]
    r = w.spec.shift
    column = int(np.flatnonzero((w.bits[r] == 0) & (w.bits[r + 1] == 1))[0])
    w.bits[r, column], w.bits[r + 1, column] = 2, 0
    with pytest.raises(ProofRejected):
        _run(witnesses, strict=False)


def test_a_nonzero_gap_of_the_packed_table_is_rejected():
    rng = np.random.default_rng(3)
    witnesses = _witnesses(rng)
    _, packing, packed = _packed(witnesses)
    assert sum(packing.lengths) < packed.size
    packed = packed.copy()
    packed[-1] = 5
    with pytest.raises(ProofRejected):
        _run(witnesses, packed=packed, strict=False)


@pytest.mark.parametrize("k", [0, 1, 15, 16])
def test_eq_table_kernel_equals_its_numpy_twin(k):
    """proofs.mle.eq_table's in-place numba kernel (tables of >= 2^15 entries) against the numpy steps."""
    from proofs import _kernels
    from proofs.mle import _eq_table_numpy
    point = _ext(np.random.default_rng(k), k)
    out = np.empty((1 << k, F.EXT_DEGREE), dtype=np.uint64)
    _kernels.eq_table_into(point, out)
    assert np.array_equal(out, _eq_table_numpy(point))
    assert np.array_equal(eq_table(point), out)


def test_fused_fold_round_kernel_equals_fold_then_round():
    from proofs import _graph_kernels as kernels
    from proofs.mle import fold
    rng = np.random.default_rng(5)
    n = 1 << 10
    lin, bits, eq, r = _ext(rng, n), _ext(rng, n), _ext(rng, n // 4), _ext(rng)
    lin_out, bits_out = (np.empty((n // 2, F.EXT_DEGREE), dtype=np.uint64) for _ in range(2))
    out = np.zeros((2, 3, F.EXT_DEGREE), dtype=np.uint64)
    kernels.bits_fold_round(lin, bits, r, eq, lin_out, bits_out, out)
    assert np.array_equal(lin_out, fold(lin, r)) and np.array_equal(bits_out, fold(bits, r))
    first, second = round_sums_numpy(fold(lin, r), eq, fold(bits, r))
    assert np.array_equal(out[0], first) and np.array_equal(out[1], second)
