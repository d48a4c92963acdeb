"""The hiding graph proof's range lookup (issue 34): a requantization without ReLU shows its remainder in
[0, 2^R) and its output in [-2^(Q-1), 2^(Q-1)) by one LogUp lookup into a table of (value, width) rows, with the
inverse 1 / (D_rem D_out) committed per entry, instead of committing R + Q bit planes.

On a small ``nn.TransformerEncoderLayer`` (d_model 8, the range lookup forced on): the proof verifies and its output
is ``forward_int``'s; the soundness figure counts the range identity; cheating provers (a remainder outside its
range with the claimed output off by one, moved multiplicities) and tampered proofs are rejected with
ProofRejected only. The "auto" rule chooses the lookup where it commits fewer entries than the planes."""
from __future__ import annotations

import contextlib
from unittest import mock

import numpy as np
import pytest

import hezk
import proofs.layers.graph_zk as GZ
from proofs import field as F
from proofs.errors import ProofRejected
from proofs.graph_quantize import QuantizedGraph, quantize_graph
from proofs.layers.step_stores import decomposition_keys

from ..model.test_transformer_reader import encoder, export
from .cheating import consistent_cheating

pytest.importorskip("onnxruntime")
D_MODEL, HEADS, FEEDFORWARD, SEQUENCE = 8, 2, 16, 4


@contextlib.contextmanager
def range_mode(mode: str):
    """RANGE_LOOKUPS set to ``mode`` (the memoised structures cleared on entry and exit)."""
    with mock.patch.object(GZ, "RANGE_LOOKUPS", mode):
        GZ._structure_of.cache_clear()
        try:
            yield
        finally:
            GZ._structure_of.cache_clear()
    GZ._structure_of.cache_clear()


@pytest.fixture(scope="module")
def layer():
    model = export(encoder(1, "gelu", d_model=D_MODEL, heads=HEADS, feedforward=FEEDFORWARD), False,
                   sequence=SEQUENCE, d_model=D_MODEL)
    rng = np.random.default_rng(0)
    q = quantize_graph(hezk.model.read_onnx(model), rng.normal(size=(16, 1, SEQUENCE, D_MODEL)))
    return q, q.quantize_input(rng.normal(size=(1, 1, SEQUENCE, D_MODEL)))


@pytest.fixture(scope="module")
def proven(layer):
    """(network, sample, proof bytes) with the range lookup on."""
    q, x = layer
    with range_mode("always"):
        net = GZ.HidingGraphNetwork(q, max_proofs=4)
        proof = net.prove(x).to_bytes()
    return net, x, proof


def _eligible(q: QuantizedGraph) -> list:
    return [i for i, op in enumerate(q.ops) if op.has_bits and not (op.relu or op.kind == "relu")]


@pytest.mark.parametrize("log_size", [5, 14])
@pytest.mark.parametrize("hiding", [True, False])
def test_a_term_with_offsets_is_its_expansion(hiding, log_size):
    """eq H (c1 + r) (c2 + z) as one term with offsets sends the messages of its four expanded terms (numba at 2^14
    entries, numpy below), and the verifier's summand from the stated values is the final claim."""
    from proofs.relations import Relation, RelationProver, Slot, StoreLayout, Stored, Term, commit_store, eq_factor, \
        expected_summand
    from proofs.sumcheck import lagrange_eval
    from proofs.zk import HidingParams
    n = log_size
    layout = StoreLayout((Slot("H", n, 2), Slot("r", n), Slot("z", n)), hiding)
    rng = np.random.default_rng(7)
    tables = {"H": F.random_elements(4 << n, seed=8), "r": rng.integers(0, 1 << 10, 1 << n).astype(np.uint64),
              "z": rng.integers(0, 1 << 12, 1 << n).astype(np.uint64)}
    _, witness = commit_store(layout, tables, HidingParams(hiding=hiding), seed=9)
    tau, c1, c2 = F.ext_random((n,), seed=10), F.ext_random((), seed=11), F.ext_random((), seed=12)
    h, r, z, eq = Stored("s", "H", planes=GZ._UNITS), Stored("s", "r"), Stored("s", "z"), eq_factor(tau)
    one = F.ext_one()
    shifted = Relation((Term(one, (eq,), (h, r, z), n, (None, c1, c2)),), one)
    expanded = Relation((Term(F.ext_mul(c1, c2), (eq,), (h,), n), Term(c2, (eq,), (h, r), n),
                         Term(c1, (eq,), (h, z), n), Term(one, (eq,), (h, r, z), n)), one)
    provers = [RelationProver(shifted, {"s": witness}, {"s": layout}),
               RelationProver(shifted, {"s": witness}, {"s": layout}, fused=False),
               RelationProver(expanded, {"s": witness}, {"s": layout})]
    claim = None
    for j in range(n):
        messages = [p.round_message() for p in provers]
        assert np.array_equal(messages[0], messages[2]) and np.array_equal(messages[1], messages[2]), f"round {j}"
        r_j = F.ext_random((), seed=40 + j)
        claim = lagrange_eval(messages[0], r_j)
        for p in provers:
            p.bind(r_j)
    sigma = np.stack(provers[0].challenges)
    assert F.ext_eq(expected_summand(shifted, sigma, provers[0].final_evaluations()), claim)
    assert F.ext_eq(expected_summand(expanded, sigma, provers[2].final_evaluations()), claim)


def test_the_rule_chooses_the_lookup_where_it_commits_less(layer):
    """"always": every requantization without ReLU is range-checked and its bit planes leave the proof store;
    "never": none; "auto" on this small layer: none (the 2^16-row table outweighs its few planes), and the rule's
    two counts decide it."""
    q, _ = layer
    eligible = _eligible(q)
    assert eligible
    with range_mode("always"):
        shapes = GZ.Shapes(q, 1)
        assert list(shapes.range_ops) == eligible
        keys = decomposition_keys({"p": GZ.proof_layout(shapes)})
        assert not any(key.startswith(f"t0.fwd{i}") for i in eligible for key in keys)
        values, tags = shapes.range_table()
        assert len(values) == 1 << shapes.range_bits
        assert len(set(zip(values.tolist(), tags.tolist()))) == len(values)  # distinct rows
        for w in shapes.range_widths:
            assert sorted(values[tags == w].tolist()) == list(range(1 << w))
    with range_mode("never"):
        assert GZ.Shapes(q, 1).range_ops == ()
    narrow = min(max(q.ops[i].shift, q.ops[i].q_bits) for i in eligible)
    with range_mode("always"), mock.patch.object(GZ, "RANGE_MAX_WIDTH", narrow):  # a wider op keeps its planes
        shapes = GZ.Shapes(q, 1)
        assert list(shapes.range_ops) == [i for i in eligible if max(q.ops[i].shift, q.ops[i].q_bits) <= narrow]
        assert len(shapes.range_ops) < len(eligible) and max(shapes.range_widths) <= narrow
    with range_mode("auto"):
        shapes = GZ.Shapes(q, 1)
        planes = sum(GZ._decomposition(q.ops[i]).padded_width << shapes.vars(q.ops[i].output) for i in eligible)
        assert planes < (1 + F.EXT_DEGREE) << 16
        assert shapes.range_ops == ()


def test_the_proof_verifies_with_the_forward_output(layer, proven):
    q, x = layer
    net, _, proof = proven
    with range_mode("always"):
        verdict = GZ.verify_graph_zk(net.commitment, x, proof)
    assert np.array_equal(verdict.output.reshape(-1), q.forward_int(x).reshape(-1))
    assert verdict.soundness_bits >= GZ.MIN_SOUNDNESS_BITS


def test_the_soundness_figure_counts_the_range_identity(layer, proven):
    """lookup_soundness_error adds (sum over range-checked ops of (1 + [R > 0]) 2^n + 2^table bits + one delta per
    op) / |F_p^4|, and the whole figure stays above the verifier's floor."""
    q, _ = layer
    net, _, _ = proven
    with range_mode("never"):
        plain = GZ.lookup_soundness_error(GZ.Shapes(q, 1))
    with range_mode("always"):
        shapes = GZ.Shapes(q, 1)
        ranged = GZ.lookup_soundness_error(shapes)
        bits = GZ.soundness_bits(net.commitment)
    count = sum((1 + bool(q.ops[i].shift)) << shapes.vars(q.ops[i].output) for i in shapes.range_ops)
    assert ranged - plain == pytest.approx((count + (1 << shapes.range_bits) + len(shapes.range_ops)) *
                                           2.0 ** -F.EXT_BITS, rel=1e-9)
    assert GZ.MIN_SOUNDNESS_BITS <= bits < 124


def _cheat_output(q: QuantizedGraph, target: int, mode: str):
    """A prover claiming the last requantization's output one above the truth at entry 0 with the remainder 2^R
    lower (the layer relation holds; the remainder is outside [0, 2^R)), or ("multiplicity") an honest trace with
    one count of the range table's multiplicities moved to another row. Lenient multiplicities count only the
    values in the table. The sumchecks are the consistent cheater's."""
    honest_forward, honest_witness, honest_counts = QuantizedGraph.forward_int, GZ.range_witness, GZ.multiplicities

    def forward(self, x_int, *, trace=False):
        values, accs = honest_forward(self, x_int, trace=True)
        if mode == "remainder":
            for name in {q.output, q.ops[target].output}:
                values[name] = values[name].copy()
                values[name].reshape(-1)[0] += 1
        return (values, accs) if trace else values[q.output]

    def witness(acc, op):
        shifted, remainder = honest_witness(acc, op)
        if mode == "remainder" and op is q.ops[target]:
            shifted, remainder = shifted.copy(), remainder.copy()
            shifted[0] += 1
            remainder[0] -= 1 << op.shift
        return shifted, remainder

    def counts(x, table_in, selector=None):
        table_in = np.asarray(table_in)
        if table_in.max() < 1 << 32:  # a function's lookup: honest
            return honest_counts(x, table_in, selector)
        x = np.asarray(x).reshape(-1)
        m = honest_counts(x[np.isin(x, table_in)], table_in)
        if mode == "multiplicity":
            used = int(np.flatnonzero(m)[0])
            m[used] -= 1
            m[(used + 1) % len(m)] += 1
        return m

    return contextlib.ExitStack(), [mock.patch.object(QuantizedGraph, "forward_int", forward),
                                    mock.patch.object(GZ, "range_witness", witness),
                                    mock.patch.object(GZ, "multiplicities", counts)]


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["remainder", "multiplicity"])
def test_a_cheating_range_prover_is_rejected(layer, proven, mode):
    q, x = layer
    net, _, _ = proven
    target = max(_eligible(q))
    assert q.ops[target].shift > 0 and GZ.Shapes(q, 1).name(q.output) == q.ops[target].output
    stack, patches = _cheat_output(q, target, mode)
    with range_mode("always"):
        with stack:
            for patch in patches:
                stack.enter_context(patch)
            with consistent_cheating():
                proof = net.prove(x)
        if mode == "remainder":  # the lie is in the claimed output
            assert proof.output.reshape(-1)[0] == q.forward_int(x).reshape(-1)[0] + 1
        with pytest.raises(ProofRejected, match="graph.range.sum"):  # every other relation holds
            GZ.verify_graph_zk(net.commitment, x, proof.to_bytes())


@pytest.mark.slow
def test_the_cheaters_control_an_honest_proof_through_the_same_patches_verifies(layer, proven):
    """The patches with no lie (lenient multiplicities only) give a proof that verifies: the rejections above are
    the lies'."""
    q, x = layer
    net, _, _ = proven
    stack, patches = _cheat_output(q, max(_eligible(q)), "none")
    with range_mode("always"):
        with stack:
            for patch in patches:
                stack.enter_context(patch)
            with consistent_cheating():
                proof = net.prove(x)
        assert GZ.verify_graph_zk(net.commitment, x, proof.to_bytes())


def test_a_tampered_proof_is_rejected_with_proof_rejected_only(layer, proven):
    """Bytes flipped across the proof: every verification raises ProofRejected (no other exception)."""
    _, x = layer
    net, _, proof = proven
    rng = np.random.default_rng(5)
    with range_mode("always"):
        for position in rng.choice(len(proof), size=6, replace=False):
            tampered = bytearray(proof)
            tampered[position] ^= 0x21
            with pytest.raises(ProofRejected):
                GZ.verify_graph_zk(net.commitment, x, bytes(tampered))


def test_large_graphs_default_to_rate_one_quarter(layer):
    """default_graph_params: rate 1/2 below LARGE_PROOF_ENTRIES entries of proof and lookup stores, 1/4 from it."""
    q, _ = layer
    assert GZ.default_graph_params(q).rate_inv == 2
    with mock.patch.object(GZ, "LARGE_PROOF_ENTRIES", 1):
        assert GZ.default_graph_params(q).rate_inv == 4


@pytest.mark.slow
def test_the_default_of_a_large_graph_proves_at_rate_one_quarter(layer):
    """HidingGraphNetwork's default follows default_graph_params and the rate-1/4 proof verifies."""
    q, x = layer
    with mock.patch.object(GZ, "LARGE_PROOF_ENTRIES", 1):
        net = GZ.HidingGraphNetwork(q, max_proofs=1)
        assert GZ.base_params(net.commitment).rate_inv == 4
        verdict = GZ.verify_graph_zk(net.commitment, x, net.prove(x).to_bytes())
    assert np.array_equal(verdict.output.reshape(-1), q.forward_int(x).reshape(-1))


@pytest.mark.slow
def test_a_batch_with_a_private_input_is_proven_with_range_lookups(layer):
    """Two samples, the input private (its range by bit planes, the requantizations by the range lookup): the proof
    verifies without the input and its output is forward_int's."""
    q, _ = layer
    x = q.quantize_input(np.random.default_rng(3).normal(size=(2, 1, SEQUENCE, D_MODEL)) * 0.5)
    with range_mode("always"):
        net = GZ.HidingGraphNetwork(q, max_proofs=1)
        verdict = GZ.verify_graph_zk(net.commitment, None, net.prove(x, private_input=True).to_bytes())
    assert np.array_equal(verdict.output.reshape(-1), q.forward_int(x).reshape(-1))


def test_a_term_refuses_offsets_that_do_not_match_its_stored_factors():
    """The prover's and verifier's products zip offsets with stored factors: a short offsets tuple would silently
    drop a factor from the check, so a Term is refused unless it has one offset per stored factor (or none)."""
    from proofs.errors import ProofError
    from proofs.relations import Term

    assert Term(1, stored=("a", "b"), offsets=(None, 3)).offsets == (None, 3)
    assert Term(1, stored=("a", "b")).offsets == ()
    with pytest.raises(ProofError, match="1 offsets for 2 stored factors"):
        Term(1, stored=("a", "b"), offsets=(3,))
