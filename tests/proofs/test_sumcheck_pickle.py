"""SumcheckProof pickles through its versioned bytes: the copy is a SumcheckProof with the same round messages
and verifies like the original (kills the mutation-run survivor `SumcheckProof.__reduce__`, which no other test
reached: tests/mutation/survivors.md)."""
import pickle

import numpy as np

from proofs.sumcheck import SumcheckProof, prove_sumcheck, verify_sumcheck
from proofs.transcript import Transcript
from tests.proofs.test_sumcheck import random_instance
from tests.reference.sumcheck_naive import naive_sum


def test_sumcheck_proof_pickles_through_its_bytes():
    terms = random_instance(7, 3, 2)
    claim = naive_sum(terms)
    proof, point, _ = prove_sumcheck(terms, claim, Transcript("test"))
    copy = pickle.loads(pickle.dumps(proof))
    assert type(copy) is SumcheckProof and copy.to_bytes() == proof.to_bytes()
    assert np.array_equal(copy.round_messages, proof.round_messages)
    degree = max(len(f) for _, f in terms)
    sub = verify_sumcheck(copy, claim, 3, degree, Transcript("test"))
    assert np.array_equal(sub.point, point)
