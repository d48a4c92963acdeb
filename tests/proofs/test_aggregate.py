"""Aggregation: grouping, stacked tables keep every table's MLE, one bit check catches a non-bit anywhere."""
import numpy as np
import pytest
from hypothesis import given, strategies as st

from proofs import ProofError, ProofRejected, zk
from proofs import field as F
from proofs.aggregate import BitCheckProver, bit_check_terms, bit_check_value, plan_groups, stack
from proofs.mle import mle_evaluate
from proofs.sumcheck import SumcheckProver, prove_sumcheck, verify_sumcheck
from proofs.transcript import Transcript
from tests.reference.mle_naive import naive_mle


def test_groups_per_mode():
    aggregated = plan_groups([8, 4, 16, 4], "aggregate")
    assert aggregated.groups == ((0, 1, 2, 3),)  # 32 entries: one full power of two
    assert aggregated.locate(2) == (0, 2)
    assert plan_groups([16, 8, 4, 1], "aggregate").groups == ((0, 1, 2, 3),)  # 29 padded to 32: 3 < 29 / 8
    assert plan_groups([2 ** 22] * 3 + [2 ** 21, 2 ** 20, 2 ** 20, 2 ** 19], "aggregate").groups == \
        ((0, 1, 2, 3, 4, 5), (6,))  # 2^24 exactly full, and 2^19: not 17.3M padded to 33.5M
    by_kind = plan_groups([8, 4, 8, 4], "aggregate", kinds=["a", "b", "a", "b"])
    assert by_kind.groups == ((0, 2), (1, 3))
    assert by_kind.locate(3) == (1, 1)
    layered = plan_groups([8, 4, 16], "layer")
    assert layered.groups == ((0,), (1,), (2,))
    assert layered.locate(1) == (1, 0)
    with pytest.raises(ProofError, match="mode='both'"):
        plan_groups([8], "both")
    with pytest.raises(ProofError, match="powers of two"):
        plan_groups([6], "aggregate")


@given(st.lists(st.integers(0, 6), min_size=1, max_size=8))
def test_bins_cover_every_table_once_and_fill_powers_of_two(log_lengths):
    lengths = [1 << k for k in log_lengths]
    groups = plan_groups(lengths, "aggregate").groups
    assert sorted(i for g in groups for i in g) == list(range(len(lengths)))
    sums = [sum(lengths[i] for i in g) for g in groups]
    assert all(s & (s - 1) == 0 for s in sums[:-1])  # every bin but the last is exactly full
    padded_total = sum(1 << (s - 1).bit_length() for s in sums)
    assert padded_total - sum(lengths) <= max(sum(lengths) // 8, sums[-1])


@given(st.lists(st.integers(0, 5), min_size=1, max_size=5), st.integers(0, 2 ** 32))
def test_stacked_table_evaluates_every_member(log_lengths, seed):
    lengths = [1 << k for k in log_lengths]
    tables = [F.random_elements(n, seed=seed + i) for i, n in enumerate(lengths)]
    groups = plan_groups(lengths, "aggregate")
    for i, table in enumerate(tables):
        group, position = groups.locate(i)
        packed, packing = stack(tables, groups, group), groups.packing(group)
        point = F.ext_random(log_lengths[i], seed=seed + 100 + i)
        assert F.ext_eq(mle_evaluate(packed, packing.point(position, point)), naive_mle(table, point))


def _bit_check(packed, seed=1):
    n = packed.size.bit_length() - 1
    tau = F.ext_random(n, seed=seed)
    proof, _, _ = prove_sumcheck(bit_check_terms(packed, tau), 0, Transcript("b"))
    sub = verify_sumcheck(proof, 0, n, 3, Transcript("b"))
    sub.check(bit_check_value(tau, sub.point, mle_evaluate(packed, sub.point)))


def test_one_bit_check_covers_all_stacked_tables():
    rng = np.random.default_rng(2)
    sizes = (64, 32, 16, 8, 8)
    tables = [rng.integers(0, 2, size=n).astype(np.uint64) for n in sizes]
    groups = plan_groups(sizes, "aggregate")
    assert len(groups.groups) == 1
    _bit_check(stack(tables, groups, 0))
    tables[4] = tables[4].copy()
    tables[4][5] = 2  # one non-bit in the smallest table
    packed = stack(tables, groups, 0)
    with pytest.raises(ProofError):  # the honest prover's own claim check already fails
        _bit_check(packed)
    tau = F.ext_random(7, seed=3)  # a prover that claims 0 anyway (the ZK prover does not check) is rejected
    proof, _, _ = zk.prove_zk_sumcheck(bit_check_terms(packed, tau), 0, Transcript("b"))
    with pytest.raises(ProofRejected):
        sub = zk.verify_zk_sumcheck(proof, 0, 7, 3, Transcript("b"))
        sub.check(bit_check_value(tau, sub.point, mle_evaluate(packed, sub.point)))


@given(st.integers(1, 7), st.booleans(), st.integers(0, 2 ** 32))
def test_bit_check_prover_matches_the_generic_prover(num_vars, bits, seed):
    """The compiled split-eq prover against the generic sumcheck prover on the same terms (its naive twin)."""
    rng = np.random.default_rng(seed)
    table = rng.integers(0, 2, size=1 << num_vars).astype(np.uint64) if bits else \
        F.random_elements(1 << num_vars, seed=seed)
    tau = F.ext_random(num_vars, seed=seed + 1)
    fast, generic = BitCheckProver(table, tau), SumcheckProver(bit_check_terms(table, tau))
    for j in range(num_vars):
        np.testing.assert_array_equal(fast.round_message(), generic.round_message())
        r = F.ext_random((), seed=seed + 2 + j)
        fast.bind(r)
        generic.bind(r)
    np.testing.assert_array_equal(fast.final_evaluations()[0][0], generic.final_evaluations()[0][1])
