"""Attacks on the hiding graph proof's range lookup (issue 34, proof version 3): a cheating prover against each of
its relations, the structure a verifier binds, the downgrade to the bit planes, and byte-level fuzzing.

The range lookup (:meth:`proofs.layers.graph_zk._Run.range_requantized`) replaces a requantization's R + Q bit
planes by acc - 2^R z' - rem + h = 0 and one LogUp lookup of (rem, R) and (z' + 2^(Q-1), Q) into a public table of
(value, width) rows, with three checks: per entry H (D_rem D_z) = S, the output's real box (joined to the layer relation by delta),
G D_j = m_j per table row (``graph.range.table``) and sum H (D_rem + D_z) = sum G (``graph.range.sum``). Each
cheater below lies in the committed witness (a remainder or output outside its width; a wider width; a padding
row; an inverse or a quotient that is not one) with every sumcheck round consistent
(:func:`tests.proofs.cheating.consistent_cheating`), so exactly the check named in its test must catch it; the
same patches without a lie verify (the control). Also: the zero-denominator bad event forced (the lie then verifies,
which is why the table's rows are in the figure), the premise N < p of LogUp (a lookup of p or more values is
counted unsound), the width cap that keeps the verifier's table small, older versions and bit-plane downgrades, and
damaged proofs (ProofRejected only).

A two-layer MLP without ReLU (8 -> 8 -> 4, both requantizations range-checked with ``RANGE_LOOKUPS="always"``): its
hidden output is a stored (hidden) tensor, its last a public one.
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
from unittest import mock

import numpy as np
import pytest

import proofs.layers.graph_zk as GZ
import proofs.layers.step_relations as SR
from hezk.model import Contraction, Graph
from proofs import field as F
from proofs.errors import ProofRejected
from proofs.lookup import lookup_error
from proofs.graph_quantize import (MAX_LOOKUP_BITS, TABLE_FUNCTIONS, QOp, QuantizedGraph, contract_int,
                                   lookup_table, quantize_graph, validate_structure, verifier_memory_bytes)
from proofs.proof_format import ByteReader, ByteWriter, from_record, to_record
from proofs.quantize import FIELD_BITS, round_shift
from proofs.relations import Slot, StoreLayout, Stored, commit_store, view_value
from proofs.zk import HidingParams

from .cheating import consistent_cheating, walk

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@contextlib.contextmanager
def range_mode(mode: str):
    """RANGE_LOOKUPS set to ``mode`` (the memoised structures cleared on entry and exit)."""
    GZ._structure_of.cache_clear()
    with mock.patch.object(GZ, "RANGE_LOOKUPS", mode):
        try:
            yield
        finally:
            GZ._structure_of.cache_clear()


def _mlp(seed: int = 0):
    rng = np.random.default_rng(seed)
    nodes = [Contraction("fc1", "Gemm", ("x",), "h", "bk,nk->bn", rng.normal(size=(8, 8)), rng.normal(size=8), None,
                         (8,)),
             Contraction("fc2", "Gemm", ("h",), "o", "bk,nk->bn", rng.normal(size=(4, 8)), rng.normal(size=4), None,
                         (4,))]
    graph = Graph("x", (8,), tuple(nodes), "o")
    calibration = rng.normal(size=(16, 8))
    return quantize_graph(graph, calibration), calibration


@pytest.fixture(scope="module")
def mlp():
    """(quantized graph, network, x, honest proof bytes) with the range lookup on both requantizations."""
    q, calibration = _mlp()
    x = calibration[:1]
    with range_mode("always"):
        shapes = GZ.Shapes(q, 1)
        assert shapes.range_ops == (0, 1) and all(op.shift > 0 for op in q.ops)
        net = GZ.HidingGraphNetwork(q, max_proofs=16)
        proof = net.prove(x).to_bytes()
    return q, net, x, proof


def _verify(net, x, proof):
    with range_mode("always"):
        return GZ.verify_graph_zk(net.commitment, x, proof)


# ------------------------------------------------------------------------------------------ the cheaters
TARGET = 0  #: the op whose range-checked witness the cheaters lie about (the hidden layer: z' stored)


def _key(value, width) -> int:
    return int(value) + (int(width) << 32)  # proof_tables' code of a (value, width) row


class Cheat:
    """Patches of the prover's witness generation for one lie at entry 0 of op TARGET's output:

    * ``"none"``: no lie (the control; the same patches, lenient multiplicities);
    * ``"remainder"``: z' + 1 and rem - 2^R (a field element p - ..., outside [0, 2^R)), the hidden layer's
      successor recomputed from the lying z' (so every other relation holds); multiplicities of the in-table keys;
    * ``"wider"``: z' - 1 and rem + 2^R (in [2^R, 2^(R+1)), a value of the Q-wide rows), counted in the row
      (rem, Q): a remainder claiming the output's larger width;
    * ``"padding"``: the same lie counted in the table's padding row (rem, 0);
    * ``"inverse"``: the "remainder" lie with the honest multiplicities and H at the entry set to
      (1/D_rem + 1/D_z)(honest) / (D_rem + D_z)(lie), so graph.range.sum and graph.range.table hold and only the
      per-entry H D_rem D_z = 1 (inside graph.layer{TARGET}) can catch it;
    * ``"quotient"``: the "remainder" lie with its true inverse H, the honest multiplicities and G at row 0 raised
      by the lie's excess in sum H (D_rem + D_z), so graph.range.sum holds and only graph.range.table can catch it.
    """

    def __init__(self, q: QuantizedGraph, mode: str):
        self.q, self.mode = q, mode
        self.op = q.ops[TARGET]
        self.step = {"none": 0, "remainder": 1, "wider": -1, "padding": -1, "inverse": 1, "quotient": 1,
                     "collision": 1, "padded entry": 0}[mode]

    # the lying trace: z' of op TARGET moved by step at entry 0, the next ops recomputed from it
    def forward(self, honest):
        q, step = self.q, self.step

        def forward_int(graph, x_int, *, trace=False):
            values, accs = honest(graph, x_int, trace=True)
            if step:
                values = dict(values)
                out = values[q.ops[TARGET].output] = values[q.ops[TARGET].output].copy()
                out.reshape(-1)[0] += step
                for index in range(TARGET + 1, len(q.ops)):
                    op = q.ops[index]
                    assert op.kind == "contraction" and not op.relu
                    accs[index] = contract_int(op, values[op.inputs[0]])
                    values[op.output] = round_shift(accs[index], op.shift)
            return (values, accs) if trace else values[q.output]
        return forward_int

    def witness(self, honest):
        target, step = self.op, self.step

        def range_witness(acc, op):
            shifted, remainder = honest(acc, op)
            if step and op is target:
                shifted, remainder = shifted.copy(), remainder.copy()
                shifted[0] += step
                remainder[0] -= step << op.shift
            return shifted, remainder
        return range_witness

    def counts(self, honest, shapes):
        op, mode, step = self.op, self.mode, self.step
        n = int(np.prod(shapes.real(op.output)))  # the range lookup checks the real entries only

        def multiplicities(keys, code, selector=None):
            keys = np.array(keys, dtype=np.int64).reshape(-1)
            if step:  # op TARGET's keys come first: its remainders (entry 0 first), then its outputs
                lie_rem, lie_z = int(keys[0]) - (op.shift << 32), int(keys[n]) - (op.q_bits << 32)
                if mode == "wider":
                    keys[0] = _key(lie_rem, op.q_bits)
                elif mode == "padding":
                    keys[0] = _key(lie_rem, 0)
                if mode in ("wider", "padding"):
                    assert lie_rem >= 1 << op.shift and keys[0] in code  # out of its range, in the other row
                elif mode in ("inverse", "quotient", "collision"):  # the honest histogram
                    keys[0] = _key(lie_rem + (step << op.shift), op.shift)
                    keys[n] = _key(lie_z - step, op.q_bits)
            if mode == "padded entry":  # the padding's (rem = 0, R) and (z' + 2^(Q-1) = 2^(Q-1), Q) counted once more
                keys = np.concatenate([keys, [_key(0, op.shift), _key(1 << (op.q_bits - 1), op.q_bits)]])
            return honest(keys[np.isin(keys, code)], code)
        return multiplicities

    def inverses(self, honest):
        op, mode, step = self.op, self.mode, self.step

        def range_inverse_tables(run):
            if mode == "padded entry":  # H = 1 / (D_rem D_z) at the first padding entry instead of 0
                out = honest(run)
                real, padded = run.s.real(op.output), run.s.padded(op.output)
                inside = np.zeros(padded, dtype=bool)
                inside[tuple(slice(0, n) for n in real)] = True
                entry = int(np.flatnonzero(~inside.reshape(-1))[0])
                tables = run.ch.witnesses["p"].tables
                rem, z = int(tables[f"r.{TARGET}"][entry]), int(tables[f"a.{run.s.name(op.output)}"][entry])
                assert z == 0  # the padding's
                d_rem = F.ext_add(F.ext_add(run.beta, GZ.ext_int(rem)), F.ext_mul(run.alpha, GZ.ext_int(op.shift)))
                d_z = F.ext_add(F.ext_add(run.beta, GZ.ext_int(1 << (op.q_bits - 1))),
                                F.ext_mul(run.alpha, GZ.ext_int(op.q_bits)))
                table = out[f"rh.{TARGET}"].copy()
                entries = table.size // F.EXT_DEGREE
                table[np.arange(F.EXT_DEGREE) * entries + entry] = F.ext_inv(F.ext_mul(d_rem, d_z))
                out[f"rh.{TARGET}"] = table
                return out
            if mode not in ("inverse", "quotient", "collision"):
                return honest(run)
            real = type(run).range_denominators

            def invertible(self):  # a zero denominator (the forced collision) read as 1: its G row m / 1 = 0
                d = real(self)
                return np.where(np.all(d == 0, axis=1)[:, None], F.ext_one()[None, :], d)
            with mock.patch.object(type(run), "range_denominators", invertible):
                out = honest(run)
            tables = run.ch.witnesses["p"].tables
            rem = int(tables[f"r.{TARGET}"][0])
            z = int(tables[f"a.{run.s.name(op.output)}"][0])
            half = 1 << (op.q_bits - 1)

            def d(value, width):  # beta + v + alpha w
                return F.ext_add(F.ext_add(run.beta, GZ.ext_int(value)), F.ext_mul(run.alpha, GZ.ext_int(width)))

            d_rem, d_z = d(rem, op.shift), d(z + half, op.q_bits)  # the lie's (field values: rem wraps)
            h_rem, h_z = d(rem + (step << op.shift), op.shift), d(z - step + half, op.q_bits)  # the truth's
            honest_part = F.ext_add(F.ext_inv(h_rem), F.ext_inv(h_z))
            lie_part = F.ext_add(F.ext_inv(d_rem), F.ext_inv(d_z))
            entries = out[f"rh.{TARGET}"].size // F.EXT_DEGREE
            if mode == "inverse":
                forged = F.ext_mul(honest_part, F.ext_inv(F.ext_add(d_rem, d_z)))
                table = out[f"rh.{TARGET}"].copy()
                table[np.arange(F.EXT_DEGREE) * entries] = forged  # plane k, entry 0: coordinate k
                out[f"rh.{TARGET}"] = table
            else:  # "quotient": row 0; "collision": the row whose denominator the forced beta zeroes
                rows = out[GZ.RANGE_G].size // F.EXT_DEGREE
                g = out[GZ.RANGE_G].reshape(F.EXT_DEGREE, rows).T.copy()
                row = _collision_row(run.s) if mode == "collision" else 0
                g[row] = F.ext_add(g[row], F.ext_sub(lie_part, honest_part))
                out[GZ.RANGE_G] = np.ascontiguousarray(g.T).reshape(-1)
            return out
        return range_inverse_tables

    def patches(self, shapes):
        return [mock.patch.object(QuantizedGraph, "forward_int", self.forward(QuantizedGraph.forward_int)),
                mock.patch.object(GZ, "range_witness", self.witness(GZ.range_witness)),
                mock.patch.object(GZ, "multiplicities", self.counts(GZ.multiplicities, shapes)),
                mock.patch.object(GZ._Run, "range_inverse_tables", self.inverses(GZ._Run.range_inverse_tables))]


def _collision_row(shapes) -> int:
    """A padding row (1, 0) of the range table: no lookup counts it (m = 0)."""
    values, tags = shapes.range_table()
    return int(np.flatnonzero((values == 1) & (tags == 0))[0])


@contextlib.contextmanager
def forced_collision():
    """The lookups' challenge beta drawn as -1 (alpha as drawn): the table row (1, 0)'s denominator beta + 1 + 0 alpha
    is 0, the bad event of probability <= (rows) / |F| the soundness figure counts. Prover and verifier alike."""
    real = SR.Channel.point

    def point(channel, label, num_vars):
        out = real(channel, label, num_vars)
        if label == "graph.lookups":
            out = out.copy()
            out[1] = F.ext_from_base(F.to_field(np.array([-1], dtype=np.int64)))[0]
        return out
    with mock.patch.object(SR.Channel, "point", point):
        yield


def _cheating_proof(q, net, x, mode: str, private_input: bool = False):
    cheat = Cheat(q, mode)
    with range_mode("always"), contextlib.ExitStack() as stack:
        for patch in cheat.patches(GZ.Shapes(q, len(x), private_input)):
            stack.enter_context(patch)
        with consistent_cheating():
            return net.prove(x, private_input=private_input)


def test_the_control_cheater_without_a_lie_verifies(mlp):
    """The cheaters' patches with no lie give a proof that verifies: each rejection below is its lie's."""
    q, net, x, _ = mlp
    proof = _cheating_proof(q, net, x, "none")
    assert np.array_equal(_verify(net, x, proof.to_bytes()).output, q.forward_int(q.quantize_input(x)))


@pytest.mark.parametrize("mode, check", [
    ("remainder", "graph.range.sum"),  # a remainder p - k (wraps the field), the hidden output one above the truth
    ("wider", "graph.range.sum"),  # a remainder of the output's width Q > R: the width is the verifier's constant
    ("padding", "graph.range.sum"),  # counted in a padding row (v, 0): no range check has width 0
    ("inverse", f"graph.layer{TARGET}"),  # H not 1 / (D_rem D_z) at one entry, the sums balanced
    ("quotient", "graph.range.table"),  # G not m / D at one row, the sums balanced
])
def test_a_cheating_range_prover_is_rejected_by_the_check_that_must_catch_it(mlp, mode, check):
    """Rejected (ProofRejected naming the check); and a verifier that only records its relations' final checks
    finds exactly that one failing, the openings passing: no other check would catch the lie."""
    q, net, x, _ = mlp
    proof = _cheating_proof(q, net, x, mode).to_bytes()
    truth = q.forward_int(q.quantize_input(x))
    assert not np.array_equal(GZ.HidingGraphProof.from_bytes(proof).output.reshape(-1), truth.reshape(-1))
    with pytest.raises(ProofRejected, match=check):
        _verify(net, x, proof)
    with recorded_relation_checks() as failed:
        _verify(net, x, proof)
    assert failed == [f"sumcheck.training.{check}"]


@pytest.mark.parametrize("mode, check", [("remainder", "graph.range.sum"), ("inverse", f"graph.layer{TARGET}")])
def test_a_cheating_range_prover_of_a_private_batch_is_rejected(mlp, mode, check):
    """The same lies with the input hidden and a batch of 3 (a padded batch row): rejected by the same checks."""
    q, net, _, _ = mlp
    x = _mlp()[1][:3]
    honest = _cheating_proof(q, net, x, "none", private_input=True).to_bytes()
    assert _verify(net, None, honest)
    with pytest.raises(ProofRejected, match=check):
        _verify(net, None, _cheating_proof(q, net, x, mode, private_input=True).to_bytes())


@contextlib.contextmanager
def recorded_relation_checks():
    """Within the block a verifier's relation whose stated values miss its sumcheck's final value is recorded
    (its label) instead of refused; every other check (rounds, openings) stays."""
    failed, last = [], {}
    real_verify, real_summand = SR.verify_masked, SR.expected_summand

    def verify_masked(proof, claim, n, d, transcript, label):
        last["sub"], last["label"] = real_verify(proof, claim, n, d, transcript, label), label
        return last["sub"]

    def expected_summand(relation, sigma, finals):
        value = real_summand(relation, sigma, finals)
        if "sub" not in last:  # no sumcheck yet: a structure's dry run (its memo cold when this test runs first)
            return value
        if not F.ext_eq(value, last["sub"].expected_value):
            failed.append(last["label"])
            return last["sub"].expected_value
        return value

    with mock.patch.object(SR, "verify_masked", verify_masked), \
            mock.patch.object(SR, "expected_summand", expected_summand):
        yield failed


def test_a_padding_entry_counted_in_the_range_lookup_is_rejected_by_the_per_entry_check(mlp):
    """The range lookup checks the output's real entries only (H = S / (D_rem D_z), S the real box: a store may
    leave the padding out). A cheater that counts a padding entry anyway (H = 1 / (D_rem D_z) there, its values
    in the multiplicities, so both sums balance) is caught by the per-entry check inside the layer relation
    among the relations (H D_rem D_z = S, zero in the padding); the store, which commits H's real box only (a
    cheater skipping its own check of the padding), refuses the stated value too."""
    q, net, x, _ = mlp
    with range_mode("always"):
        shapes = GZ.Shapes(q, 1)
        assert np.prod(shapes.real(q.ops[TARGET].output)) < np.prod(shapes.padded(q.ops[TARGET].output))
    from proofs import relations
    with mock.patch.object(relations, "check_box", lambda *a: None):  # the cheater skips its own padding check
        proof = _cheating_proof(q, net, x, "padded entry").to_bytes()
    with pytest.raises(ProofRejected, match=f"graph.layer{TARGET}"):
        _verify(net, x, proof)
    with recorded_relation_checks() as failed:
        with pytest.raises(ProofRejected, match="opening"):  # and the store, which holds H's real box only
            _verify(net, x, proof)
    assert failed == [f"sumcheck.training.graph.layer{TARGET}"]


def test_a_remainder_nonzero_in_the_padding_is_rejected(mlp):
    """The layer relation adds h on the real entries only, so the padding's remainder must be zero: a cheater
    that stores rem = h there (the old relation's padding) and skips its own check of the box is rejected."""
    from proofs import relations
    q, _, x, _ = mlp
    with range_mode("always"):
        net = GZ.HidingGraphNetwork(q, max_proofs=1)  # its own copy: the module's network serves the other tests
    honest = GZ.proof_tables

    def dirty(shapes, values, accs):
        tables = honest(shapes, values, accs)
        op = q.ops[TARGET]
        outside = np.flatnonzero(~shapes.inside(op.output))
        assert outside.size  # the output has padding
        table = tables[f"r.{TARGET}"].copy()
        table[outside[0]] = 1 << (op.shift - 1)
        tables[f"r.{TARGET}"] = table
        return tables

    with range_mode("always"), mock.patch.object(GZ, "proof_tables", dirty), \
            mock.patch.object(relations, "check_box", lambda *a: None):
        proof = net.prove(x).to_bytes()
    with pytest.raises(ProofRejected):
        _verify(net, x, proof)


def test_a_table_row_whose_denominator_is_zero_frees_its_quotient_the_counted_bad_event(mlp):
    """Why the figure counts the table's rows: were beta + v_j + alpha w_j = 0 for some row j (probability <= rows /
    |F| over beta), G_j D_j = m_j = 0 would leave G_j free and a cheater's lie (the "remainder" one) would balance the
    sums there and verify. Forced here (prover and verifier given beta = -1); the same cheater without the forced
    challenge is refused by graph.range.table; the rows are in lookup_soundness_error."""
    q, net, x, _ = mlp
    with forced_collision():
        proof = _cheating_proof(q, net, x, "collision").to_bytes()
        assert not np.array_equal(GZ.HidingGraphProof.from_bytes(proof).output, q.forward_int(q.quantize_input(x)))
        assert _verify(net, x, proof)  # the bad event: the lie passes every check
    with pytest.raises(ProofRejected, match="graph.range.table"):
        _verify(net, x, _cheating_proof(q, net, x, "collision").to_bytes())
    with range_mode("always"):
        shapes = GZ.Shapes(q, 1)
        assert GZ.lookup_soundness_error(shapes) >= (1 << shapes.range_bits) * 2.0 ** -F.EXT_BITS


def test_the_relation_recorder_records_nothing_on_an_honest_proof(mlp):
    _, net, x, proof = mlp
    with recorded_relation_checks() as failed:
        assert _verify(net, x, proof)
    assert failed == []


# ----------------------------------------------------------------------------- what the verifier binds
def test_the_widths_and_the_table_are_the_verifiers_own(mlp):
    """The looked-up widths are the structure's shift R and Q (constants alpha w in D), the table is public and
    its rows distinct, the multiplicities are committed in the proof store (before alpha, beta) and the inverses
    H, G (F_p4, four planes) in the lookup store after them."""
    q, _, _, _ = mlp
    with range_mode("always"):
        shapes = GZ.Shapes(q, 1)
        values, tags = shapes.range_table()
        rows = set(zip(values.tolist(), tags.tolist()))
        assert len(rows) == len(values) == 1 << shapes.range_bits
        assert set(shapes.range_widths) == {w for i in shapes.range_ops for w in (q.ops[i].shift, q.ops[i].q_bits)}
        assert 0 not in shapes.range_widths  # the padding rows' tag 0 is no range check's width
        proof_slots = {slot.name for slot in GZ.proof_layout(shapes).slots}
        lookup_slots = {slot.name: slot for slot in GZ.lookup_layout(shapes).slots}
        assert GZ.RANGE_M in proof_slots and all(f"r.{i}" in proof_slots for i in shapes.range_ops)
        assert GZ.RANGE_M not in lookup_slots
        for name in [GZ.RANGE_G] + [f"rh.{i}" for i in shapes.range_ops]:
            assert lookup_slots[name].plane_vars == 2  # four coordinate planes


def test_a_structure_whose_rebuild_wraps_the_field_is_refused(mlp):
    """R + Q <= FIELD_BITS keeps acc = 2^R z' + rem - h injective mod p (2^(R+Q) <= p); one bit more and a cheater
    could claim z' + floor(p / 2^R) with rem + p mod 2^R: the validator refuses such a structure."""
    q, _, _, _ = mlp
    assert (1 << FIELD_BITS) <= F.P < 1 << (FIELD_BITS + 1)
    op = q.ops[TARGET]
    wide = dataclasses.replace(op, q_bits=FIELD_BITS + 1 - op.shift)
    forged = dataclasses.replace(q, ops=(wide,) + q.ops[1:])
    with pytest.raises(ProofRejected, match="q_bits"):
        validate_structure(forged)


def _wide(ops: int, n: int = 20, bound: int = 127, q_bits: int = 16) -> QuantizedGraph:
    """A validated structure (no proof made): a lookup on x (2^n entries) and ``ops`` squares of x, each at shift 0
    and ``q_bits``, so "auto" range-checks them when the planes outweigh the table."""
    function = TABLE_FUNCTIONS[0]
    _, outputs = lookup_table(function, 8, 0, 0)
    shapes, fracs, bounds = {"x": (1 << n,), "y": (1 << n,)}, {"x": 0, "y": 0}, {"x": bound,
                                                                              "y": int(np.max(np.abs(outputs)))}
    nodes = [QOp("lookup", "l", ("x",), "y", q_bits=8, function=function)]
    for i in range(ops):
        nodes.append(QOp("square", f"s{i}", ("x",), f"s{i}", shift=0, q_bits=q_bits))
        shapes[f"s{i}"], fracs[f"s{i}"], bounds[f"s{i}"] = (1 << n,), 0, bound * bound
    q = QuantizedGraph("x", (1 << n,), 0, bound, tuple(nodes), f"s{ops - 1}", shapes, fracs, bounds,
                       hashlib.sha256(b"wide").digest())
    validate_structure(q)
    return q


def test_the_range_table_stays_within_the_verifiers_memory_whatever_the_widths():
    """A commitment declaring 25-bit requantizations would make "auto" choose a 2^25-row table (its F_p4
    denominators alone 1 GiB, over the verifier's bound :func:`verifier_memory_bytes`) were the widths not capped:
    with RANGE_MAX_WIDTH they keep their planes, and a range table has at most 2^(RANGE_MAX_WIDTH + 1) rows."""
    q = _wide(8, bound=(1 << 12) - 1, q_bits=25)
    with range_mode("auto"), mock.patch.object(GZ, "RANGE_MAX_WIDTH", FIELD_BITS):
        uncapped = GZ.Shapes(q, 1)
        assert uncapped.range_ops and (32 << uncapped.range_bits) > verifier_memory_bytes(q)
    for mode in ("auto", "always"):
        with range_mode(mode):
            assert GZ.Shapes(q, 1).range_ops == ()
            capped = GZ.Shapes(_wide(4), 1)
            assert capped.range_ops and capped.range_bits <= GZ.RANGE_MAX_WIDTH + 1 <= MAX_LOOKUP_BITS + 1


def test_a_lookup_of_p_or_more_values_is_refused_by_the_soundness_figure():
    """LogUp shows every looked-up value is a table row only when fewer than p values are looked up (Haboeck 2022,
    Lemma 5: a value outside the table looked up p times has multiplicity 0 mod p, so a cheater may repeat one
    forged value p times). A private-input batch of 4096 (MAX_BATCH allows 2^16) of a validated structure looks up
    2^34 > p values; its figure must then be >= 1 (the verifier's minimum refuses the statement), not ~2^-89."""
    q = _wide(4)
    with range_mode("auto"):
        small, large = GZ.Shapes(q, 1, True), GZ.Shapes(q, 1 << 12, True)
        assert small.range_ops == large.range_ops != ()
        counted = sum((1 + bool(q.ops[i].shift)) << large.vars(q.ops[i].output) for i in large.range_ops)
        assert counted >= F.P and (1 << 12) <= GZ.MAX_BATCH
        assert GZ.lookup_soundness_error(small) < 2.0 ** -GZ.MIN_SOUNDNESS_BITS
        assert GZ.lookup_soundness_error(large) >= 1


def test_the_plain_lookups_error_needs_fewer_than_p_values_too():
    """The plain proof's LogUp-GKR (:func:`proofs.lookup.lookup_error`, the figure of proofs.layers.graph): the same
    premise N < p; a witness of 2^31 > p entries errs w.p. 1, one of 2^30 < p keeps its Schwartz-Zippel figure."""
    assert (1 << 30) < F.P < (1 << 31)
    assert lookup_error(30, 16) < 2.0 ** -90
    assert lookup_error(31, 16) >= 1


def test_an_f_p4_table_as_four_planes_is_one_extension_factor():
    """A slot of four coordinate planes read with the basis weights (graph_zk's ext factors) states the MLE of the
    F_p4 table itself, masked or not."""
    n = 5
    table = F.ext_random((1 << n,), seed=3)
    point = F.ext_random((n,), seed=4)
    for hiding in (False, True):
        layout = StoreLayout((Slot("H", n, 2),), hiding)
        _, witness = commit_store(layout, {"H": np.ascontiguousarray(table.T).reshape(-1)}, HidingParams(hiding=hiding),
                                  seed=5)
        view = Stored("s", "H", planes=GZ._UNITS).view_at(layout.slot("H"), point)
        if not hiding:
            assert F.ext_eq(view_value(witness, view), GZ.mle_evaluate(table, point))
        else:  # the stated value: the MLE plus the mask term
            plain = dataclasses.replace(witness, masks=None)
            assert F.ext_eq(view_value(plain, view), GZ.mle_evaluate(table, point))


# --------------------------------------------------------------------------------------------- downgrades
def _with_version(proof: bytes, version: int) -> bytes:
    inner = from_record(proof, GZ.HidingGraphProof.KIND, "proof")
    reader = ByteReader(inner, GZ.PROOF_MAGIC, GZ.PROOF_VERSION, "proof")
    output, blob = reader.i64_array(), reader.blob()
    writer = ByteWriter(GZ.PROOF_MAGIC, version)
    writer.i64_array(output)
    writer.blob(blob)
    return to_record(GZ.HidingGraphProof.KIND, writer.getvalue())


@pytest.mark.parametrize("old", [1, 2])
def test_an_older_version_header_is_refused(mlp, old):
    _, net, x, proof = mlp
    assert _verify(net, x, _with_version(proof, GZ.PROOF_VERSION))  # the rewrite alone keeps it valid
    with pytest.raises(ProofRejected, match="version"):
        _verify(net, x, _with_version(proof, old))


def test_a_bit_plane_proof_is_refused_where_the_range_lookup_is_due_and_back(mlp):
    """The structure (range lookup or bit planes) is the verifier's choice from the public shapes, not the proof's:
    a proof with the other structure is refused either way."""
    q, net, x, proof = mlp
    with range_mode("never"):
        planes = net.prove(x).to_bytes()
        assert GZ.verify_graph_zk(net.commitment, x, planes)
        with pytest.raises(ProofRejected):
            GZ.verify_graph_zk(net.commitment, x, proof)
    with pytest.raises(ProofRejected):
        _verify(net, x, planes)


# ------------------------------------------------------------------------------------- zero knowledge
def test_the_witness_of_the_range_lookup_is_not_in_the_proof_bytes(mlp):
    """A weak leak check: no run of 4 consecutive words of the remainders, the multiplicities' used rows or the
    hidden output appears in the proof; two proofs of one input commit different lookup stores."""
    q, net, x, proof = mlp
    with range_mode("always"):
        shapes = GZ.Shapes(q, 1)
        values, accs = q.forward_int(q.quantize_input(x), trace=True)
        acc = np.zeros(shapes.padded(q.ops[TARGET].output), dtype=np.int64)
        acc[tuple(slice(0, k) for k in accs[TARGET].shape)] = accs[TARGET]
        z, remainder = GZ.range_witness(acc.reshape(-1), q.ops[TARGET])
        second = net.prove(x).to_bytes()
    for secret in (remainder, z, values[q.ops[TARGET].output].reshape(-1)):
        words = np.asarray(np.asarray(secret, dtype=np.int64)[:4] % F.P, dtype="<u4").tobytes()
        assert words not in proof and words not in second
    assert proof != second


# ------------------------------------------------------------------------------------------------ fuzzing
def _damaged(proof: bytes, rng) -> bytes:
    """One damaged proof: a truncation or bit flip of its bytes (the record's checksum catches those), or, mostly,
    one leaf of the parsed proof changed (an array entry's bit flipped, an array cut short or grown, a byte string's
    bit flipped) and the proof re-encoded: those reach the parsers and the checks."""
    kind = int(rng.integers(0, 8))
    if kind == 0:
        return proof[:int(rng.integers(0, len(proof)))]
    if kind == 1:
        data = bytearray(proof)
        data[int(rng.integers(0, len(data)))] ^= 1 << int(rng.integers(0, 8))
        return bytes(data)
    parsed = GZ.HidingGraphProof.from_bytes(proof)
    kinds = (np.ndarray, bytes) if kind == 7 else (np.ndarray,)  # mostly arrays (Merkle paths: many byte strings)
    leaves = [leaf for k in kinds for leaf in walk(parsed, lambda new: new, k)]
    leaf, rebuild = leaves[int(rng.integers(0, len(leaves)))]
    if isinstance(leaf, bytes):
        data = bytearray(leaf)
        if data:
            data[int(rng.integers(0, len(data)))] ^= 1 << int(rng.integers(0, 8))
        return rebuild(bytes(data)).to_bytes()
    array = np.array(leaf, copy=True)
    if kind == 2 and array.ndim and array.shape[0] > 1:
        array = array[:-1]
    elif kind == 3 and array.ndim:
        array = np.concatenate([array, array[:1]])
    elif array.size:
        flat = array.reshape(-1)
        bit = int(rng.integers(0, 32 if array.dtype == np.uint64 else 8 * array.dtype.itemsize))  # field: u32
        flat[int(rng.integers(0, flat.size))] ^= np.array(1, dtype=array.dtype) << np.array(bit, dtype=array.dtype)
    return rebuild(array).to_bytes()


def _fuzz(net, x, proof: bytes, count: int, seed: int) -> tuple:
    """(damaged proofs verified, of them rejected with ProofRejected); any other exception fails the test."""
    rng = np.random.default_rng(seed)
    tried = rejected = 0
    for _ in range(count):
        try:
            damaged = _damaged(proof, rng)
        except (ValueError, OverflowError, TypeError):  # an encoder refusing the damage: nothing to verify
            continue
        if damaged == proof:  # a change the encoding undoes: nothing to verify
            continue
        tried += 1
        try:
            _verify(net, x, damaged)
        except ProofRejected:
            rejected += 1
    return tried, rejected


def test_damaged_proofs_raise_proof_rejected_only(mlp):
    _, net, x, proof = mlp
    tried, rejected = _fuzz(net, x, proof, 8, 1)
    assert rejected == tried >= 6


@pytest.mark.slow
def test_hundreds_of_damaged_proofs_raise_proof_rejected_only(mlp):
    _, net, x, proof = mlp
    tried, rejected = _fuzz(net, x, proof, 300, 2)
    assert rejected == tried >= 270


@pytest.fixture(scope="module")
def transformer():
    """(network, sample, proof bytes) of a small encoder layer (d_model 8, GELU and Softmax lookups) with the range
    lookup on: function lookups' H, G and the range lookup's in one lookup store."""
    pytest.importorskip("onnxruntime")
    import hezk
    from ..model.test_transformer_reader import encoder, export
    model = export(encoder(1, "gelu", d_model=8, heads=2, feedforward=16), False, sequence=4, d_model=8)
    rng = np.random.default_rng(0)
    q = quantize_graph(hezk.model.read_onnx(model), rng.normal(size=(16, 1, 4, 8)))
    x = q.quantize_input(rng.normal(size=(1, 1, 4, 8)))
    with range_mode("always"):
        assert GZ.Shapes(q, 1).lookups and GZ.Shapes(q, 1).range_ops
        net = GZ.HidingGraphNetwork(q, max_proofs=2)
        return net, x, net.prove(x).to_bytes()


@pytest.mark.slow
def test_damaged_proofs_of_an_encoder_layer_raise_proof_rejected_only(transformer):
    net, x, proof = transformer
    assert _verify(net, x, proof)
    tried, rejected = _fuzz(net, x, proof, 100, 3)
    assert rejected == tried >= 90
