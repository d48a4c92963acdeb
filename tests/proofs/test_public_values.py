"""Public integers entering a proof (inputs, claimed outputs) pass ONE check, :mod:`proofs.public_values`: within a
declared interval narrower than p, compared as Python integers. Without it, y and y + p (one residue) are both
accepted, and ``np.abs(-2**63) == -2**63`` slips under any bound."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.extra import numpy as hnp

from proofs.errors import ProofRejected
from proofs.field import P
from proofs.layers import step_proof as S
from proofs.layers import training as T
from proofs.layers.network import Network, verify_network
from proofs.public_values import require_bounded, require_within
from proofs.quantize import quantize_fixed_point
from tests.proofs.test_training import SPEC, _data

INT64_MIN = np.iinfo(np.int64).min


# ------------------------------------------------------------------------------------------- the helper
@settings(max_examples=200, deadline=None)
@given(values=hnp.arrays(st.sampled_from([np.int8, np.int32, np.int64, np.uint32, np.uint64]), st.integers(0, 6)),
       bound=st.integers(0, (P - 1) // 2))
def test_accepted_exactly_when_every_entry_is_within_the_bound_as_python_ints(values, bound):
    inside = all(-bound <= int(v) <= bound for v in values.tolist())
    if inside:
        assert np.array_equal(require_bounded(values, bound, "v", "here"), values)
    else:
        with pytest.raises(ProofRejected, match=r"^here: v holds -?\d+, outside"):
            require_bounded(values, bound, "v", "here")


def test_int64_min_uint64_floats_objects_and_wide_intervals_are_refused():
    """-2^63 (whose np.abs is itself), 2^64 - 1 (-1 as int64), floats and Python big ints are refused; an interval
    as wide as the field is a programming error (ValueError)."""
    for values, message in ((np.array([INT64_MIN]), "holds -9223372036854775808"),
                            (np.array([2 ** 64 - 1], dtype=np.uint64), "holds 18446744073709551615"),
                            (np.array([1.0]), "dtype float64"), (np.array([2 ** 70], dtype=object), "dtype object")):
        with pytest.raises(ProofRejected, match=message):
            require_bounded(values, 1000, "v", "here")
    assert int(np.abs(np.array([INT64_MIN]))[0]) <= 1000  # why: the old np.abs check passed it
    with pytest.raises(ProofRejected, match=r"shape \(2,\), expected \(3,\)"):
        require_within([1, 2], 0, 5, "v", "here", shape=(3,))
    with pytest.raises(ValueError, match="not narrower than the field"):
        require_within([0], 0, P, "v", "here")


# ---------------------------------------------------------------------------------- verify_forward: y + p
@pytest.fixture(scope="module")
def forward(request):
    weights, x, _ = _data(SPEC, 7)
    trace = T.forward_trace(weights, x, SPEC)
    committed = S.commit_forward(trace, zk=True, private_input=False)
    return trace, committed, x


@pytest.mark.parametrize("offset", [P, -1000 * P])
def test_a_forward_proof_made_for_the_output_plus_a_multiple_of_p_is_refused(forward, offset, monkeypatch):
    """The prover states y + offset (the transcript absorbs it, the relations read it mod p: every check holds; the
    code before this check accepted it); the verifier refuses it as outside act_bits before it becomes a field
    element. Positive control: the proof of y verifies."""
    trace, committed, x = forward
    honest = S.forward_output(trace)
    S.verify_forward(SPEC, committed, honest, S.prove_forward(trace, committed, zk=True), public_input=x)
    forged = honest.copy()
    forged[0, 0] += offset
    with monkeypatch.context() as patch:
        patch.setattr(S, "forward_output", lambda _: forged)
        proof = S.prove_forward(trace, committed, zk=True)
    with pytest.raises(ProofRejected, match=rf"output \(act_bits={SPEC.act_bits}\) holds {forged[0, 0]}, outside"):
        S.verify_forward(SPEC, committed, forged, proof, public_input=x)
    for bad_input in (x + P, np.full_like(x, INT64_MIN)):
        with pytest.raises(ProofRejected, match="public input"):
            S.verify_forward(SPEC, committed, honest, proof, public_input=bad_input)


# ------------------------------------------------------------------------------- claimed outputs: -2^63
def test_the_mlp_verifier_refuses_a_claimed_output_of_int64_min_at_the_range_check():
    rng = np.random.default_rng(0)
    model = quantize_fixed_point([rng.normal(size=(4, 6)) * .3, rng.normal(size=(3, 4)) * .3],
                                 [np.zeros(4), np.zeros(3)], frac_bits=6)
    network = Network(model, zk=False)
    x = rng.integers(-20, 20, size=(2, 6))
    proof = network.prove(x)
    verify_network(network.commitment, x, proof)  # positive control
    for output in (np.full_like(proof.output, INT64_MIN), proof.output + P):
        forged = type(proof)(output, *[getattr(proof, f) for f in proof.__dataclass_fields__ if f != "output"])
        with pytest.raises(ProofRejected, match="^MLP inference proof / statement: claimed output holds"):
            verify_network(network.commitment, x, forged)
    with pytest.raises(ProofRejected, match=r"^MLP inference proof / statement: input \(input_bound=\d+\) holds -9223372036854775808"):
        verify_network(network.commitment, np.full_like(x, INT64_MIN), proof)
