"""Verifier checks tested one at a time, found by the mutation run of issue 19 (tests/mutation/survivors.md):
each test fails when its check alone is weakened (an ``and`` made ``or``, a comparison loosened)."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from proofs import field as F
from proofs.commit import CommitParams, commit
from proofs.errors import ProofRejected
from proofs.layers.relu import prove_decomposition, verify_decomposition
from proofs.transcript import Transcript

from .test_verifier_checks import _relu_case


# ----------------------------------------------------------------------------------------------- zkReLU
def _relu_proof(relu):
    spec, witness, claim = _relu_case(relu)
    pairs = [commit(witness.table(g), CommitParams()) for g in range(len(spec.groups))]
    proof, _ = prove_decomposition(witness, [w for _, w in pairs], claim, Transcript("t"))
    return spec, claim, [c for c, _ in pairs], proof

def _verify(spec, claim, commitments, proof):
    return verify_decomposition(commitments, spec, claim, proof, Transcript("t"), "test")

@pytest.mark.parametrize("field", ["sign_eval", "shifted_eval"])
def test_zkrelu_without_relu_each_stated_value_is_checked_on_its_own(field):
    """Without ReLU the sign value must be 0 *and* the shifted value the claim: each one changed alone is refused
    by that check (the shifted value is read nowhere else, so it is the only line of defence)."""
    spec, claim, commitments, proof = _relu_proof(False)
    _verify(spec, claim, commitments, proof)  # the honest proof passes
    changed = F.ext_add(getattr(proof, field), F.ext_one())
    with pytest.raises(ProofRejected, match="without ReLU"):
        _verify(spec, claim, commitments, dataclasses.replace(proof, **{field: changed}))


# ---------------------------------------------------------------------------------- reusable commitments
@pytest.fixture(scope="module")
def reusable_case():
    """An honest hiding Reusable with 2 copies, its layout and base params."""
    from proofs.layers import reusable as R
    from proofs.layers import step_proof as S

    from tests.proofs.test_commitment_reuse_hiding import _forward

    trace = _forward(1)
    committed = S.commit_forward(trace, zk=True, private_input=False, max_proofs=2)
    reusable = committed.weights["w0"] if isinstance(committed.weights, dict) else committed.weights
    return S.weight_layout(trace.spec, True), reusable, R.base_params(reusable)


def _fresh(reusable):
    """The same public object with an empty verified-cache."""
    from proofs.layers.reusable import Reusable

    return Reusable(reusable.copies, reusable.agreement)


def test_reusable_honest_passes_and_is_cached(reusable_case):
    from proofs.layers.reusable import verify_reusable

    layout, reusable, params = reusable_case
    fresh = _fresh(reusable)
    verify_reusable(layout, fresh, params, "test")
    assert len(fresh._verified) == 1
    verify_reusable(layout, fresh, params, "test")  # cached: no second entry
    assert len(fresh._verified) == 1


def test_reusable_copy_count_limits(reusable_case):
    """Zero copies, and more than MAX_COPIES, are refused before anything else."""
    from proofs.layers import reusable as R

    layout, reusable, params = reusable_case
    for copies in ((), reusable.copies[:1] * (R.MAX_COPIES + 1)):
        with pytest.raises(ProofRejected, match="expected a Reusable"):
            R.verify_reusable(layout, R.Reusable(copies, reusable.agreement), params, "test")
    with pytest.raises(ProofRejected, match="expected a Reusable"):
        R.verify_reusable(layout, reusable.copies, params, "test")


def test_reusable_each_copy_condition_is_checked_on_its_own(reusable_case):
    """A copy that is not a HidingCommitment, one of another size, one with other params: each refused."""
    from proofs.layers import reusable as R

    layout, reusable, params = reusable_case
    first = reusable.copies[0]
    wrong_size = dataclasses.replace(first, num_vars=first.num_vars + 1)
    wrong_params = dataclasses.replace(first, params=dataclasses.replace(first.params, rate_inv=2 * first.params.rate_inv))
    for bad in ("not a commitment", wrong_size, wrong_params):
        copies = (reusable.copies[0], bad)
        with pytest.raises(ProofRejected, match="copy 1 does not match"):
            R.verify_reusable(layout, R.Reusable(copies, reusable.agreement), params, "test")


def test_reusable_mask_rows_may_differ_from_the_base(reusable_case):
    """The copies' mask_rows are not compared (they follow the copy count); only the rest of the params are."""
    from proofs.layers import reusable as R

    layout, reusable, params = reusable_case
    other = dataclasses.replace(params, mask_rows=params.mask_rows + 1)
    R.verify_reusable(layout, _fresh(reusable), other, "test")


def test_reusable_cache_is_per_statement(reusable_case):
    """A Reusable verified for one statement is checked again (and refused) for another: the cache key holds the
    layout and the params, not just "verified once"."""
    from proofs.layers.reusable import verify_reusable

    layout, reusable, params = reusable_case
    fresh = _fresh(reusable)
    verify_reusable(layout, fresh, params, "test")
    other = dataclasses.replace(params, target_bits=params.target_bits + 1)
    with pytest.raises(ProofRejected, match="does not match"):
        verify_reusable(layout, fresh, other, "test")


def test_reusable_exactly_max_copies_passes_the_count_check(reusable_case):
    """MAX_COPIES copies are within the limit: the next check (the copies' params) is the one that refuses."""
    from proofs.layers import reusable as R

    layout, reusable, params = reusable_case
    copies = reusable.copies[:1] * R.MAX_COPIES
    with pytest.raises(ProofRejected, match="copy 0 does not match"):
        R.verify_reusable(layout, R.Reusable(copies, reusable.agreement), params, "test")


# ------------------------------------------------------------------------------------------------ training
@pytest.mark.parametrize("mode", ["aggregate", "layer"])
def test_training_bit_check_groups_follow_the_mode(mode):
    """aggregate: one batched bit check over every decomposition; layer: one bit check per decomposition."""
    from proofs.layers.step_proof import proof_layouts
    from proofs.layers.step_relations import bit_check_groups
    from proofs.layers.step_stores import decomposition_keys

    from .test_zk_training import SPEC

    layouts = proof_layouts(SPEC, 1, mode, True)
    keys = decomposition_keys(layouts)
    assert len(keys) > 1
    expected = [keys] if mode == "aggregate" else [[k] for k in keys]
    assert bit_check_groups(layouts, mode) == expected


@pytest.fixture(scope="module")
def training_case():
    """A plain (non-hiding) training step, committed and proven honestly."""
    from proofs.layers import step_proof as S

    from .test_zk_training import SPEC, _trace

    trace, _ = _trace(10)
    committed = S.commit_step(trace, zk=False)
    return SPEC, committed, S.prove_training_step(trace, committed, zk=False)


def test_training_proof_items_are_read_in_order_and_all_used(training_case):
    """Items missing at the end, one item of the wrong kind, one item too many: each refused by the channel."""
    from proofs.layers import step_proof as S

    spec, committed, proof = training_case
    S.verify_training_step(spec, committed, proof)
    items = proof.items
    cases = {"the proof ends early": items[:-1],
             "expected SumcheckProof, got str": ("not a sumcheck",) + items[1:],
             "1 unused proof items": items + (items[-1],)}
    for match, changed in cases.items():
        with pytest.raises(ProofRejected, match=match):
            S.verify_training_step(spec, committed, dataclasses.replace(proof, items=changed))


def test_training_stated_values_shape_and_canonicity_each_checked(training_case):
    """The first relation's stated values with one row dropped, or one entry p (not canonical): each refused by
    the values check itself."""
    from proofs.layers import step_proof as S

    spec, committed, proof = training_case
    index = next(i for i, item in enumerate(proof.items) if isinstance(item, np.ndarray))
    values = proof.items[index]
    non_canonical = values.copy()
    non_canonical[0, 0] = np.uint64(F.P)
    for changed in (values[:-1], non_canonical):
        items = proof.items[:index] + (changed,) + proof.items[index + 1:]
        with pytest.raises(ProofRejected, match="values of shape"):
            S.verify_training_step(spec, committed, dataclasses.replace(proof, items=items))
