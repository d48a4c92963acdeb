"""The LogUp-GKR lookup argument (proofs.lookup; Haboeck 2022, Papini-Haboeck 2023): an honest lookup verifies and
leaves claims equal to the tables' MLEs; a pair outside the table, wrong multiplicities, a tampered layer, or a
real row passed off as padding are rejected (each negative next to its honest control)."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from proofs import field as F
from proofs.errors import ProofError, ProofRejected
from proofs.lookup import (FractionSumProof, LookupProof, lookup_error, multiplicities, prove_fraction_sum,
                           prove_lookup, verify_fraction_sum, verify_lookup)
from proofs.mle import mle_evaluate
from proofs.transcript import Transcript


def _table(bits: int, seed: int = 0):
    """A random public table over [-2^(b-1), 2^(b-1))."""
    inputs = np.arange(-(1 << (bits - 1)), 1 << (bits - 1), dtype=np.int64)
    return inputs, np.random.default_rng(seed).integers(-1000, 1000, len(inputs))


def _witness(bits: int, num_vars: int, real: int, seed: int = 1):
    """x drawn from the table's inputs, y = T[x], the selector's first ``real`` rows real (padding: junk)."""
    inputs, outputs = _table(bits, seed)
    rng = np.random.default_rng(seed + 1)
    x = rng.choice(inputs, 1 << num_vars)
    y = outputs[x - inputs[0]]
    selector = (np.arange(1 << num_vars) < real).astype(np.int64)
    x[real:] = rng.integers(-10 ** 6, 10 ** 6, (1 << num_vars) - real)  # padding rows hold anything
    return inputs, outputs, x, y, selector


def _prove(inputs, outputs, x, y, selector, m=None):
    m = multiplicities(x, inputs, selector) if m is None else m
    return prove_lookup(x, y, selector, inputs, outputs, m, Transcript("test lookup"))


def _verify(proof, num_vars, inputs, outputs, selector):
    table = F.to_field(selector)
    return verify_lookup(proof, num_vars, lambda point: mle_evaluate(table, point), F.to_field(inputs),
                         F.to_field(outputs), Transcript("test lookup"))


@settings(max_examples=12, deadline=None)
@given(bits=st.integers(1, 6), num_vars=st.integers(0, 7), fraction=st.floats(0.0, 1.0), seed=st.integers(0, 99))
def test_honest_lookup_verifies_and_its_claims_are_the_tables_mles(bits, num_vars, fraction, seed):
    real = max(1, round(fraction * (1 << num_vars)))
    inputs, outputs, x, y, selector = _witness(bits, num_vars, real, seed)
    m = multiplicities(x, inputs, selector)
    assert m.sum() == real
    proof, claims = _prove(inputs, outputs, x, y, selector, m)
    proof = LookupProof.from_bytes(proof.to_bytes())
    found = _verify(proof, num_vars, inputs, outputs, selector)
    for point, value, table in ((found.witness_point, found.x_eval, x), (found.witness_point, found.y_eval, y),
                                (found.table_point, found.m_eval, m)):
        assert F.ext_eq(mle_evaluate(F.to_field(table), point), value)
    assert F.ext_eq(claims.x_eval, found.x_eval) and F.ext_eq(claims.m_eval, found.m_eval)


@settings(max_examples=8, deadline=None)
@given(num_vars=st.integers(0, 6), seed=st.integers(0, 99))
def test_fraction_tree_root_is_the_sum_of_the_leaves(num_vars, seed):
    """The GKR root p/q equals sum_i p_i / q_i computed with inverses (the plain recomputation)."""
    rng = np.random.default_rng(seed)
    p, q = F.to_field(rng.integers(0, 1 << 20, 1 << num_vars)), F.to_field(rng.integers(1, 1 << 20, 1 << num_vars))
    proof, point, p_eval, q_eval = prove_fraction_sum(p, q, Transcript("t"), "tree")
    expected = F.sum_(F.mul(p, F.inv(q)))
    root_p, root_q = proof.root
    assert F.ext_eq(root_p, F.ext_mul(F.ext_from_base(expected), root_q))
    root, point2, p2, q2 = verify_fraction_sum(proof, num_vars, Transcript("t"), "tree")
    assert np.array_equal(point, point2) and F.ext_eq(p_eval, mle_evaluate(p, point)) and F.ext_eq(q2, q_eval)


def test_a_pair_outside_the_table_is_rejected():
    inputs, outputs, x, y, selector = _witness(5, 6, 50)
    _verify(_prove(inputs, outputs, x, y, selector)[0], 6, inputs, outputs, selector)  # control
    y = y.copy()
    y[7] += 1  # (x_7, T[x_7] + 1) is no row
    with pytest.raises(ProofRejected, match="fraction sum differs"):
        _verify(_prove(inputs, outputs, x, y, selector)[0], 6, inputs, outputs, selector)


def test_an_input_outside_the_table_range_has_no_multiplicity_and_no_proof():
    inputs, outputs, x, y, selector = _witness(4, 4, 16)
    x = x.copy()
    x[0] = inputs[-1] + 1  # one past the range: the table's range is proven by the lookup itself
    with pytest.raises(ProofError, match="no table row"):
        multiplicities(x, inputs, selector)
    m = multiplicities(np.where(np.arange(16) == 0, inputs[-1], x), inputs, selector)  # the wrong count
    with pytest.raises(ProofRejected, match="fraction sum differs"):
        _verify(_prove(inputs, outputs, x, y, selector, m)[0], 4, inputs, outputs, selector)


def test_wrong_multiplicities_are_rejected():
    inputs, outputs, x, y, selector = _witness(4, 5, 32)
    m = multiplicities(x, inputs, selector)
    moved = m.copy()
    source = int(np.flatnonzero(m)[0])
    moved[source] -= 1
    moved[(source + 1) % len(m)] += 1  # same total, one count on the wrong row
    with pytest.raises(ProofRejected, match="fraction sum differs"):
        _verify(_prove(inputs, outputs, x, y, selector, moved)[0], 5, inputs, outputs, selector)


@pytest.mark.parametrize("tamper", ["root", "layer values", "round message", "x_eval", "m_eval", "layers dropped"])
def test_a_tampered_proof_is_rejected(tamper):
    inputs, outputs, x, y, selector = _witness(4, 5, 30)
    proof, _ = _prove(inputs, outputs, x, y, selector)
    _verify(proof, 5, inputs, outputs, selector)
    one = F.ext_one()
    witness = proof.witness
    if tamper == "root":
        witness = dataclasses.replace(witness, root=np.stack([F.ext_add(witness.root[0], one), witness.root[1]]))
    elif tamper == "layer values":
        layers = list(witness.layers)
        sumcheck, values = layers[3]
        layers[3] = (sumcheck, np.concatenate([F.ext_add(values[:1], one[None]), values[1:]]))
        witness = dataclasses.replace(witness, layers=tuple(layers))
    elif tamper == "round message":
        layers = list(witness.layers)
        sumcheck, values = layers[2]
        messages = sumcheck.round_messages.copy()
        messages[0, 2] = F.ext_add(messages[0, 2], one)
        layers[2] = (type(sumcheck)(messages), values)
        witness = dataclasses.replace(witness, layers=tuple(layers))
    elif tamper == "layers dropped":
        witness = FractionSumProof(witness.root, witness.layers[:-1])
    if tamper == "x_eval":
        proof = dataclasses.replace(proof, x_eval=F.ext_add(proof.x_eval, one))
    elif tamper == "m_eval":
        proof = dataclasses.replace(proof, m_eval=F.ext_add(proof.m_eval, one))
    else:
        proof = dataclasses.replace(proof, witness=witness)
    with pytest.raises(ProofRejected):
        _verify(proof, 5, inputs, outputs, selector)


def test_padding_rows_add_nothing_and_a_real_row_cannot_pass_as_padding():
    """Padding rows (selector 0) may hold anything (control: junk there verifies); a prover that zeroes the
    selector of a real row holding a bad pair is caught by the verifier's own selector."""
    inputs, outputs, x, y, selector = _witness(4, 5, 20)
    _verify(_prove(inputs, outputs, x, y, selector)[0], 5, inputs, outputs, selector)  # junk in rows 20..31
    y = y.copy()
    y[3] += 5
    hidden = selector.copy()
    hidden[3] = 0
    proof, _ = _prove(inputs, outputs, x, y, hidden)
    _verify(proof, 5, inputs, outputs, hidden)  # consistent with the prover's selector ...
    with pytest.raises(ProofRejected, match="selector"):
        _verify(proof, 5, inputs, outputs, selector)  # ... not with the real one


def test_truncated_or_garbage_bytes_are_rejected():
    inputs, outputs, x, y, selector = _witness(3, 3, 8)
    data = _prove(inputs, outputs, x, y, selector)[0].to_bytes()
    for bad in (b"", data[:-5], data + b"\0", b"HZKLKUP1" + b"\xff" * 40):
        with pytest.raises(ProofRejected):
            LookupProof.from_bytes(bad)


def test_soundness_error_is_small_and_grows_with_the_sizes():
    assert lookup_error(24, 16) < 2.0 ** -95
    assert lookup_error(10, 8) < lookup_error(20, 8) < lookup_error(20, 16)
