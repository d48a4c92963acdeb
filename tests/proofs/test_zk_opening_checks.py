"""Checks of proofs.zk.verify_functionals that an honest opening never meets, each tested on its own (kills
surviving mutants, tests/mutation/survivors.md): the security threshold is "at least", and every salt of a
hiding opening must be a 16-byte string, exactly as many as queries."""
import dataclasses

import numpy as np
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


@pytest.mark.parametrize("which", ["commitment", "opening"])
def test_each_argument_type_is_checked(which):
    commitment, functionals, opened, opening = _opening()
    if which == "commitment":
        commitment = None
    else:
        opening = None
    with pytest.raises(ProofRejected, match="expected a HidingCommitment"):
        zk.verify_functionals(commitment, functionals, opened, opening, Transcript("o"))


@pytest.mark.parametrize("root", [b"\x01" * 31, None, "r" * 32])
def test_a_malformed_mask_root_is_rejected(root):
    commitment, functionals, opened, opening = _opening()
    with pytest.raises(ProofRejected, match="mask root"):
        zk.verify_functionals(commitment, functionals, opened, dataclasses.replace(opening, mask_root=root),
                              Transcript("o"))


@pytest.mark.parametrize("change", ["non-canonical", "one row too many"])
def test_values_shape_and_canonicity_are_checked_apart(change):
    commitment, functionals, opened, opening = _opening()
    if change == "non-canonical":
        bad = opened.copy()
        bad[0, 0] = F.P
    else:
        bad = np.concatenate([opened, opened])
    with pytest.raises(ProofRejected, match="values of shape"):
        zk.verify_functionals(commitment, functionals, bad, opening, Transcript("o"))


@pytest.mark.parametrize("change", ["non-canonical", "wrong length"])
def test_points_shape_and_canonicity_are_checked_apart(change):
    commitment, functionals, opened, opening = _opening()
    points = F.ext_random((1, 6), seed=42)
    if change == "non-canonical":
        points[0, 0, 0] = F.P
    else:
        points = F.ext_random((1, 7), seed=42)
    with pytest.raises(ProofRejected, match="points of shape"):
        zk.verify_points(commitment, points, opened, opening, Transcript("o"))
