"""Checks of proofs.zk.verify_functionals that an honest opening never meets, each tested on its own (kills
surviving mutants, tests/mutation/survivors.md): the security threshold is "at least", and every salt of a
hiding opening must be a 16-byte string, exactly as many as queries."""
import dataclasses

import pytest

from proofs import field as F
from proofs import zk
from proofs.errors import ProofRejected
from proofs.transcript import Transcript


def _opening(seed=41):
    values = F.random_elements(64, seed=seed)
    points = F.ext_random((1, 6), seed=seed + 1)
    commitment, witness = zk.hiding_commit(values, zk.HidingParams(), seed=seed)
    opened, opening = zk.open_points(witness, points, Transcript("o"), seed=seed)
    functionals = [zk.mle_functional(commitment, z) for z in points]
    return commitment, functionals, opened, opening


def test_the_security_threshold_is_inclusive():
    commitment, functionals, opened, opening = _opening()
    bits = commitment.security_bits
    zk.verify_functionals(commitment, functionals, opened, opening, Transcript("o"), min_bits=bits)
    with pytest.raises(ProofRejected, match="bits"):
        zk.verify_functionals(commitment, functionals, opened, opening, Transcript("o"), min_bits=bits + 1e-9)


@pytest.mark.parametrize("change", ["extra", "short", "text"])
def test_each_malformed_salt_list_is_rejected_by_the_salt_check(change):
    commitment, functionals, opened, opening = _opening()
    salts = list(opening.salts)
    assert salts and all(len(s) == zk.SALT_SIZE for s in salts)
    if change == "extra":
        salts.append(bytes(zk.SALT_SIZE))  # a well-formed salt too many: _leaves would ignore it
    elif change == "short":
        salts[0] = salts[0][:-1]
    else:
        salts[0] = "s" * zk.SALT_SIZE
    tampered = dataclasses.replace(opening, salts=tuple(salts))
    with pytest.raises(ProofRejected, match="salts"):
        zk.verify_functionals(commitment, functionals, opened, tampered, Transcript("o"))


@pytest.mark.parametrize("change", ["no pieces", "short weights"])
def test_malformed_functionals_are_a_proof_rejected(change):
    """The verifier's functional-shape check raises ProofRejected (never a TypeError from its error factory)."""
    commitment, functionals, opened, opening = _opening()
    (w, c), = functionals[0]
    bad = [[]] if change == "no pieces" else [[(w, c[:-1])]]
    with pytest.raises(ProofRejected, match="functional 0"):
        zk.verify_functionals(commitment, bad, opened, opening, Transcript("o"))


@pytest.mark.parametrize("change", ["short", "text"])
def test_each_malformed_merkle_digest_is_rejected_by_the_digest_check(change):
    commitment, functionals, opened, opening = _opening()
    merkle = list(opening.merkle)
    merkle[0] = merkle[0][:-1] if change == "short" else "d" * len(merkle[0])
    tampered = dataclasses.replace(opening, merkle=tuple(merkle))
    with pytest.raises(ProofRejected, match="32-byte"):
        zk.verify_functionals(commitment, functionals, opened, tampered, Transcript("o"))
