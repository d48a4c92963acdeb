"""The interactive sumcheck verifier's contract, as the mutation run of proofs/sumcheck.py found it untested
(tests/mutation/survivors.md): its default location is "sumcheck" (`SumcheckVerifier.__init__` 1, 2), a
challenge is bound once per checked message (`bind` 16), and the running claim and the subclaim's value are
canonical uint64 field elements, the only form the field's checks accept (`lagrange_eval` 66, 68)."""
import numpy as np

from proofs import field as F
from proofs.sumcheck import SumcheckVerifier

from .rejection_helpers import raises_error, rejected


def _message(seed, claim):
    """A degree-2 round message (3, 4) with g(0) + g(1) = claim."""
    g = F.ext_random((3,), seed=seed)
    g[1] = F.ext_sub(claim, g[0])
    return g


def test_default_location_is_sumcheck():
    verifier = SumcheckVerifier(0, 1, 2)
    rejected(lambda: verifier.check_round(np.zeros((2, 4), dtype=np.uint64)),
             "round message of shape (2, 4), expected (3, 4) canonical field elements", "sumcheck round 0")
    rejected(lambda: SumcheckVerifier([1, 2], 1, 1),
             "sumcheck: claim must be an int or a canonical (4,) uint64 array, got shape (2,)", "sumcheck")


def test_each_checked_message_is_bound_once():
    verifier = SumcheckVerifier(5, 2, 2, where="here")
    verifier.check_round(_message(1, F.ext_from_base(np.uint64(5))))
    verifier.bind(F.ext_random((), seed=2))
    raises_error(lambda: verifier.bind(F.ext_random((), seed=3)), "sumcheck verifier: bind before check_round")


def test_running_claim_and_subclaim_are_canonical_field_elements():
    verifier = SumcheckVerifier(7, 2, 2)
    claim = F.ext_from_base(np.uint64(7))
    for j in range(2):
        message = _message(10 + j, claim)
        verifier.check_round(message)
        verifier.bind(F.ext_random((), seed=20 + j))
        claim = verifier.claim
        assert F.is_canonical(claim) and claim.shape == (4,)
    sub = verifier.subclaim()
    assert F.is_canonical(sub.point) and sub.point.shape == (2, 4)
    assert F.is_canonical(sub.expected_value) and F.ext_eq(sub.expected_value, claim)
