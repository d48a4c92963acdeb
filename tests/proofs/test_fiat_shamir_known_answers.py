"""Known answers for the Fiat-Shamir transcripts of the commitments and the sumchecks.

Prover and verifier call the same labelling code, so a changed domain-separation label, a dropped absorption
or a changed encoding keeps every proof of this version verifying; it only breaks proofs exchanged with
another version or another implementation of the same protocol. These tests pin the protocol: the proof
bytes of a fixed statement (fixed seeds) hash to recorded digests, and the recorded proof still verifies.
A deliberate protocol change updates the digests (and the format version).
"""
import hashlib

import pytest

from proofs import field as F
from proofs import zk
from proofs.commit import CommitParams, commit, open_batch, verify_batch
from proofs.sumcheck import prove_sumcheck, verify_sumcheck
from proofs.transcript import Transcript


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:32]


KNOWN = {
    "plain opening": "51d9bd041ec9d4e132dd90b9e55fb415",
    "hiding opening": "bdea8136afc31abdd0fcb45c3aae5c71",
    "hiding opening, separate masks": "bf50a8d6558b14fd44a38c4845fef50f",
    "sumcheck": "cbcc2f34c7b359cd3547c566f223b8ac",
    "zk sumcheck": "7e536113b8213ba1a55aa661fb1f3fc4",
}


def _plain():
    commitment, witness = commit(F.random_elements(256, seed=91), CommitParams())
    points = F.ext_random((2, 8), seed=92)
    values, proof = open_batch(witness, points, Transcript("kat"))
    verify_batch(commitment, points, values, proof, Transcript("kat"))
    return commitment.to_bytes() + values.tobytes() + proof.to_bytes()


def _hiding(count):
    commitment, witness = zk.hiding_commit(F.random_elements(64, seed=93), zk.HidingParams(mask_rows=8), seed=94)
    points = F.ext_random((count, 6), seed=95)
    values, opening = zk.open_points(witness, points, Transcript("kat"), seed=96)
    zk.verify_points(commitment, points, values, opening, Transcript("kat"))
    assert (len(opening.mask_root) == 32) == (count > 1)  # 8 mask rows: one piece inline, two need 13 (fresh masks)
    return commitment.to_bytes() + values.tobytes() + opening.to_bytes()


def _sumcheck():
    a, b = F.random_elements(32, seed=97), F.random_elements(32, seed=98)
    claim = (int(F.dot(a, b)) + int(F.sum_(a))) % F.P
    proof, point, _ = prove_sumcheck([(1, [a, b]), (1, [a])], claim, Transcript("kat"), "kat")
    verify_sumcheck(proof, claim, 5, 2, Transcript("kat"), "kat")
    return proof.to_bytes() + point.tobytes()


def _zk_sumcheck():
    table = F.random_elements(16, seed=99)
    claim = F.sum_(table)
    proof, point, _ = zk.prove_zk_sumcheck([(1, [table])], claim, Transcript("kat"), "kat", seed=100)
    zk.verify_zk_sumcheck(proof, claim, 4, 1, Transcript("kat"), "kat")
    return proof.to_bytes() + point.tobytes()


MAKERS = {"plain opening": _plain, "hiding opening": lambda: _hiding(1),
          "hiding opening, separate masks": lambda: _hiding(2), "sumcheck": _sumcheck, "zk sumcheck": _zk_sumcheck}


@pytest.mark.parametrize("name", sorted(KNOWN))
def test_proof_bytes_match_the_recorded_transcript(name):
    assert _digest(MAKERS[name]()) == KNOWN[name]
