"""Basefold verifier checks that the mutation run of issue 19 found unpinned (tests/mutation/survivors.md,
"Survivors of proofs/basefold.py"): each rejection's reason and location, the arguments verify_opening passes on,
the inclusive security minimum, the claim-set checks of functionals, and a consistent cheater that only
distinct claim coefficients catch."""
import dataclasses
import re

import numpy as np
import pytest

from proofs import basefold as B
from proofs import field as F
from proofs.transcript import Transcript
from tests.proofs.rejection_helpers import rejected
from tests.proofs.test_basefold import COUNTS, SIZES, SMALL, _claims, _opened

WHERE = "basefold opening"
FEW = dataclasses.replace(SMALL, num_queries=10)  # about 4 proven query bits: below any default minimum


@pytest.fixture(scope="module")
def batch():
    return _opened(SIZES, COUNTS, seed=19)


def _verify(commitments, points, values, proof, bits=0, **kwargs):
    return lambda: B.verify_batch(commitments, points, values, proof, Transcript("test"), min_security_bits=bits,
                                  **kwargs)


def _single(params, seed=3, n=6):
    witnesses, points = _claims([n], [1], seed, params)
    value, proof = B.open_commitment(witnesses[0], points[0][0], Transcript("t"))
    return witnesses[0].commitment, points[0][0], value, proof


def test_verify_opening_passes_on_its_minimum_and_conjectured_choice():
    commitment, point, value, proof = _single(FEW)
    bits = commitment.security_bits
    assert bits < 20
    B.verify_opening(commitment, point, value, proof, Transcript("t"), min_security_bits=0)
    rejected(lambda: B.verify_opening(commitment, point, value, proof, Transcript("t"), min_security_bits=bits + 1),
             f"parameters give {bits:.1f} proven bits < {bits + 1} required", WHERE)
    rejected(lambda: B.verify_opening(commitment, point, value[:3], proof, Transcript("t"), min_security_bits=0),
             "value of shape (3,), expected (4,)", WHERE)
    guess = dataclasses.replace(FEW, conjectured=True)
    commitment, point, value, proof = _single(guess)
    rejected(lambda: B.verify_opening(commitment, point, value, proof, Transcript("t"), min_security_bits=0),
             re.compile(r"parameter conjectured=True .* did not allow conjectured soundness .*"), WHERE)
    B.verify_opening(commitment, point, value, proof, Transcript("t"), min_security_bits=0, allow_conjectured=True)
    conjectured_bits = commitment.security_bits
    rejected(lambda: B.verify_opening(commitment, point, value, proof, Transcript("t"), min_security_bits=1000,
                                      allow_conjectured=True),
             f"parameters give {conjectured_bits:.1f} conjectured bits < 1000 required", WHERE)


def test_the_security_minimum_is_inclusive(batch):
    commitments, points, values, proof, _ = batch
    bits = B.batch_security_bits(commitments)
    _verify(commitments, points, values, proof, bits)()
    rejected(_verify(commitments, points, values, proof, bits + 1e-9),
             f"parameters give {bits:.1f} proven bits < {bits + 1e-9} required", WHERE)


def test_statement_shape_rejections_name_their_check(batch):
    commitments, points, values, proof, _ = batch
    rejected(_verify(commitments[:1], points, values, proof),
             f"1 commitments, {len(points)} point sets, {len(values)} value sets", WHERE)
    rejected(_verify([], [], [], proof), "0 commitments, 0 point sets, 0 value sets", WHERE)
    rejected(_verify([object()] + commitments[1:], points, values, proof), "expected BasefoldCommitments", WHERE)
    other = B.BasefoldCommitment(commitments[1].root, commitments[1].num_vars,
                                 dataclasses.replace(SMALL, num_queries=SMALL.num_queries + 1))
    rejected(_verify([commitments[0], other] + commitments[2:], points, values, proof),
             "the commitments' parameters differ", WHERE)
    rejected(_verify(commitments, points, values, object()), "expected a BasefoldProof, got object", WHERE)
    rejected(_verify(5, points, values, proof), "malformed input: TypeError: 'int' object is not iterable", WHERE)
    bad = [points[0][:, :-1]] + points[1:]
    rejected(_verify(commitments, bad, values, proof),
             f"points of shape {bad[0].shape} and dtype uint64, expected canonical (m, {SIZES[0]}, 4) uint64", WHERE)
    rejected(_verify(commitments, points, [values[0][:1]] + values[1:], proof),
             f"values of commitment 0 of shape (1, 4), expected canonical {values[0].shape}", WHERE)


def test_the_claim_limit_is_inclusive(batch, monkeypatch):
    commitments, points, values, proof, _ = batch
    total = sum(len(p) for p in points)
    monkeypatch.setattr(B, "MAX_CLAIMS", total)
    _verify(commitments, points, values, proof)()
    monkeypatch.setattr(B, "MAX_CLAIMS", total - 1)
    rejected(_verify(commitments, points, values, proof), f"more than {total - 1} claims", WHERE)


def _shape(arr):
    return f"of shape {np.asarray(arr).shape}, expected canonical "


def test_proof_component_rejections_name_the_component(batch):
    commitments, points, values, proof, _ = batch
    assert proof.reduction.size and proof.layer_roots and proof.tables
    for field, name in (("reduction", "reduction messages"), ("evals", "evaluations"), ("rounds", "round messages"),
                        ("final", "final table")):
        short = getattr(proof, field)[:-1]
        rejected(_verify(commitments, points, values, dataclasses.replace(proof, **{field: short})),
                 re.compile(re.escape(f"{name} {_shape(short)}") + r"\(.*\)"), WHERE)
    n = len(proof.layer_roots)
    rejected(_verify(commitments, points, values, dataclasses.replace(proof, layer_roots=list(proof.layer_roots) +
                                                                      [b"\0" * 32])),
             f"{n + 1} layer roots, expected {n}", WHERE)
    rejected(_verify(commitments, points, values,
                     dataclasses.replace(proof, layer_roots=[b"\0" * 31] + list(proof.layer_roots[1:]))),
             "layer roots: Merkle digests must be 32-byte strings", WHERE)
    rejected(_verify(commitments, points, values, dataclasses.replace(proof, tables=list(proof.tables) * 2)),
             "wrong number of small tables", WHERE)
    k = [i for i, n in enumerate(SIZES) if n <= SMALL.final_vars][0]
    short = proof.tables[0][:-1]
    rejected(_verify(commitments, points, values, dataclasses.replace(proof, tables=[short] + list(proof.tables[1:]))),
             f"table of commitment {k} {_shape(short)}({1 << SIZES[k]},)", WHERE)


def test_functional_claim_sets_are_checked_and_mix_with_points():
    witnesses, points = _claims([6, 5], [1, 2], seed=4)
    commitments = [w.commitment for w in witnesses]
    # one functional claim alone is still reduced (the point shortcut needs a point)
    single = [[B.Functional.point(points[0][0])]]
    values, proof = B.open_batch(witnesses[:1], single, Transcript("test"))
    _verify(commitments[:1], single, values, proof)()
    # a point set among functional sets: converted to functionals by the verifier too
    mixed = [points[0], [B.Functional.point(z) for z in points[1]]]
    values, proof = B.open_batch(witnesses, mixed, Transcript("test"))
    _verify(commitments, mixed, values, proof)()
    wrong = [points[0], [B.Functional.point(points[0][0])] * 2]  # 6 variables for a table of 5
    rejected(_verify(commitments, wrong, values, proof), "expected Functionals of 5 variables", WHERE)
    rejected(_verify(commitments, [points[0], [object(), object()]], values, proof),
             "expected Functionals of 5 variables", WHERE)
    z = points[1][0]
    for bad in (z.astype(np.int64), np.asarray(z)[:, :3].copy(), np.full_like(z, F.P)):
        term = (F.ext_one(), np.asarray(bad), None, F.ext_zero((0,)))
        bad_f = B.Functional(5, (term,)) if bad.shape[-1:] == (4,) else B.Functional(5, (term,))
        rejected(_verify(commitments, [points[0], [bad_f, mixed[1][1]]], values, proof),
                 "a functional's term is not canonical F_p4 data", WHERE)
    dense = np.full((4, 4), F.P, dtype=np.uint64)  # a non-canonical dense block
    term = (F.ext_one(), z[:1], dense, z[3:])
    rejected(_verify(commitments, [points[0], [B.Functional(5, (term,)), mixed[1][1]]], values, proof),
             "a functional's term is not canonical F_p4 data", WHERE)


def test_claims_get_distinct_coefficients_across_claim_sets():
    """A consistent cheater: two claims of different tables shifted so that the combined claim is unchanged if
    they shared one coefficient (sets 0 and 3 of SIZES overlap when a set's start is not accumulated)."""
    witnesses, points = _claims(SIZES, COUNTS, seed=23)
    values, _ = B.open_batch(witnesses, points, Transcript("test"))
    n_max = max(SIZES)
    fake = [np.array(v, copy=True) for v in values]
    delta = F.ext_one()
    fake[3][0] = F.ext_add(fake[3][0], delta)  # weight 2^(n_max - n_3) in the reduction's claim
    scale = np.uint64(pow(2, n_max - SIZES[3], F.P))
    fake[0][1] = F.ext_sub(fake[0][1], F.ext_mul_base(delta, scale))
    _, proof = B.open_batch(witnesses, points, Transcript("test"), values=fake)
    rejected(_verify([w.commitment for w in witnesses], points, fake, proof),
             "reduction round 0: h(0) + h(1) != the running claim", WHERE)


def test_fiat_shamir_known_answers_of_point_and_functional_batches(batch):
    """The proof bytes of fixed statements (tables from fixed seeds): every transcript label and absorbed item
    of the opening is pinned (a changed label changes the challenges, so the proof)."""
    import hashlib
    proof = batch[3]
    assert hashlib.sha256(proof.to_bytes()).hexdigest() == \
        "69cc5a582a57e3182fdfd5857e4229354384e47e417efa61a034a139ef351f5c"
    witnesses, points = _claims([6, 5], [1, 2], seed=4)
    mixed = [points[0], [B.Functional.point(z) for z in points[1]]]
    _, proof = B.open_batch(witnesses, mixed, Transcript("test"))
    assert hashlib.sha256(proof.to_bytes()).hexdigest() == \
        "d59625b1b6af350a687f517e0ca30fe2ead5244a106c9a83c834bc5e134dc21e"


def test_value_and_final_table_rejections_name_their_check():
    commitment, point, value, proof = _single(SMALL)
    rejected(lambda: B.verify_opening(commitment, point, F.ext_add(value, F.ext_one()), proof, Transcript("t"),
                                      min_security_bits=0),
             "the evaluation differs from the claimed value", WHERE)
    final = np.array(proof.final, copy=True)
    final[0, 0] = (final[0, 0] + 1) % F.P
    rejected(lambda: B.verify_opening(commitment, point, value, dataclasses.replace(proof, final=final),
                                      Transcript("t"), min_security_bits=0),
             "the final table does not match the last sumcheck claim", WHERE)


def test_conjectured_refusal_states_both_bounds_at_the_callers_location():
    import math
    params = dataclasses.replace(SMALL, num_queries=30, conjectured=True)
    proven = 30 * -math.log2((1 + 1 / 4) / 2)
    conjectured = 30 * math.log2(4)
    rejected(lambda: B.check_conjectured(params, False, "network proof"),
             f"parameter conjectured=True (30 queries at rate 1/4: {conjectured:.1f} conjectured query bits, "
             f"{proven:.1f} proven): the verifier did not allow conjectured soundness (allow_conjectured=True opts "
             f"in)", "network proof")
    B.check_conjectured(params, True, "network proof")
    B.check_conjectured(dataclasses.replace(params, conjectured=False), False, "network proof")


def test_malformed_items_among_functionals_and_arrays_name_their_check(batch):
    commitments, points, values, proof, _ = batch
    rejected(_verify(commitments, points, values, dataclasses.replace(proof, evals="junk")),
             f"evaluations of shape None, expected canonical ({len(proof.evals)}, 4)", WHERE)
    witnesses, pts = _claims([6, 5], [1, 2], seed=4)
    commitments = [w.commitment for w in witnesses]
    functionals = [B.Functional.point(z) for z in pts[1]]
    mixed = [pts[0], functionals]
    values, proof = B.open_batch(witnesses, mixed, Transcript("test"))
    bad = pts[0][:, :-1]  # a point set among functionals: checked as points
    rejected(_verify(commitments, [bad, functionals], values, proof),
             f"points of shape {bad.shape} and dtype uint64, expected canonical (m, 6, 4) uint64", WHERE)
    listed = B.Functional(5, ((F.ext_one(), np.asarray(pts[1][0]), None, F.ext_zero((0,))),))
    object.__setattr__(listed, "terms", ((F.ext_one().tolist(),) + listed.terms[0][1:],))  # a list, not an array
    rejected(_verify(commitments, [pts[0], [listed, functionals[1]]], values, proof),
             "a functional's term is not canonical F_p4 data", WHERE)


def test_opened_layer_counts_are_checked(batch):
    commitments, points, values, proof, _ = batch
    assert proof.layer_leaves
    for field in ("layer_leaves", "layer_paths"):
        extra = list(getattr(proof, field)) + [getattr(proof, field)[-1]]
        rejected(_verify(commitments, points, values, dataclasses.replace(proof, **{field: extra})),
                 "wrong number of opened layers", WHERE)
    for field in ("initial_leaves", "initial_paths"):
        rejected(_verify(commitments, points, values,
                         dataclasses.replace(proof, **{field: list(getattr(proof, field))[:-1]})),
                 "wrong number of opened initial layers", WHERE)


def test_a_reduction_that_hides_a_lie_names_its_last_check():
    from tests.proofs.test_basefold import _ShiftingTranscript, _honest_values, _lie
    witnesses, points = _claims(SIZES, COUNTS, seed=11)
    values = _lie(_honest_values(witnesses, points), 0)
    transcript = _ShiftingTranscript("test", "basefold.reduction", F.ext_mul_base(
        B.begin(Transcript("test"), [w.commitment for w in witnesses], points, values)[0][0],
        np.uint64(pow(2, max(SIZES) - SIZES[0], F.P))))
    _, proof = B.open_batch(witnesses, points, transcript, values)
    rejected(_verify([w.commitment for w in witnesses], points, values, proof),
             "the evaluations do not match the reduction's last claim", WHERE)
