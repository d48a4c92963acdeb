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
