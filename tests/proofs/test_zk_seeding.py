"""Zero-knowledge sumcheck: a seed (tests only) makes the proof reproducible, and without one every random byte
of the mask and its commitment comes from the OS CSPRNG; verify_zk_sumcheck's shape checks each tested apart
(kills surviving mutants of proofs/zk.py, tests/mutation/survivors.md)."""
import dataclasses

import numpy as np
import pytest

from proofs import field as F
from proofs import zk
from proofs.errors import ProofRejected
from proofs.sumcheck import SumcheckProof
from proofs.transcript import Transcript


def _terms():
    a, b = F.random_elements(16, seed=31), F.ext_random(16, seed=32)
    return [(F.ext_one(), [a, b])]


def _claim(terms):
    (coefficient, (a, b)), = terms
    return F.ext_sum(F.ext_mul_base(b, a), axis=0)


def _prove(seed):
    terms = _terms()
    return zk.prove_zk_sumcheck(terms, _claim(terms), Transcript("s"), seed=seed)[0]


def test_a_seeded_proof_is_reproducible_and_depends_on_the_seed():
    first, again, other = _prove(5), _prove(5), _prove(6)
    assert first.to_bytes() == again.to_bytes()
    assert not F.ext_eq(first.mask_sum, other.mask_sum)
    assert first.mask_commitment.to_bytes() != other.mask_commitment.to_bytes()


def test_an_unseeded_proof_draws_from_the_os_csprng(monkeypatch):
    calls = []
    real = zk.os.urandom

    def counting(n):
        calls.append(n)
        return real(n)

    monkeypatch.setattr(zk.os, "urandom", counting)
    first, second = _prove(None), _prove(None)
    assert calls, "the unseeded prover must draw its salts from os.urandom, not from a numpy generator"
    assert not F.ext_eq(first.mask_sum, second.mask_sum)
    terms = _terms()
    sub = zk.verify_zk_sumcheck(first, _claim(terms), 4, 2, Transcript("s"))
    assert sub.point.shape == (4, 4)


@pytest.mark.parametrize("change", ["no messages", "one round short"])
def test_zk_round_messages_are_checked_before_use(change):
    """verify_zk_sumcheck checks the messages' presence and whole shape itself (not a round check's error)."""
    proof = _prove(7)
    messages = proof.sumcheck.round_messages
    sumcheck = None if change == "no messages" else SumcheckProof(messages[:-1])
    with pytest.raises(ProofRejected, match="round messages of shape"):
        zk.verify_zk_sumcheck(dataclasses.replace(proof, sumcheck=sumcheck), _claim(_terms()), 4, 2, Transcript("s"))


@pytest.mark.parametrize("name", ["mask_sum", "mask_eval"])
@pytest.mark.parametrize("change", ["non-canonical", "wrong shape"])
def test_zk_mask_values_shape_and_canonicity_are_checked_apart(name, change):
    proof = _prove(8)
    value = getattr(proof, name)
    bad = np.array([F.P, 0, 0, 0], dtype=np.uint64) if change == "non-canonical" else np.concatenate([value, value])
    with pytest.raises(ProofRejected, match=f"{name} is not a canonical"):
        zk.verify_zk_sumcheck(dataclasses.replace(proof, **{name: bad}), _claim(_terms()), 4, 2, Transcript("s"))


@pytest.mark.parametrize("change", ["none", "other size"])
def test_zk_mask_commitment_type_and_size_are_checked_apart(change):
    proof = _prove(9)
    other = None if change == "none" else zk.commit_mask(5, 2, zk.HidingParams())[1]  # log_rows 0, 5 variables
    with pytest.raises(ProofRejected, match="wrong shape"):
        zk.verify_zk_sumcheck(dataclasses.replace(proof, mask_commitment=other), _claim(_terms()), 4, 2,
                              Transcript("s"))
