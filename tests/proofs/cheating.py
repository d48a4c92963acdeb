"""Cheating provers for negative tests: they prove claims that are false.

Two kinds. The *echoing* cheater (:func:`cheating_sumcheck`) is caught at the first round check. The
*consistent* cheaters keep every earlier check satisfied and lie only where one chosen check must catch
the lie, so a test built on them fails when that check alone is removed: :class:`ConsistentCheater`
(every sumcheck round passes, the sub-claim is off), :func:`forge_opening` and :func:`forge_hiding_opening`
(an opening of value + delta with honest columns: only the row-against-columns consistency check catches it).

The honest :func:`proofs.sumcheck.prove_sumcheck` refuses a claim that differs from the sum of its
terms; a cheater sends the round messages anyway. Patching ``SumcheckProver.claimed_sum`` to echo the
claim turns the honest wrapper into that cheater, so tampered witnesses still yield a proof to reject.
"""
import contextlib
import dataclasses
import importlib
from unittest import mock

import numpy as np

import proofs.basefold_zk as basefold_zk_module
import proofs.commit as commit_module
import proofs.sumcheck as sumcheck_module
import proofs.zk as zk_module
from proofs import field as F
from proofs.errors import ProofError

_honest = sumcheck_module.prove_sumcheck
_honest_masked = basefold_zk_module.prove_masked  # kept: consistent_cheating may patch the module's own name


def lenient_prove_sumcheck(terms, claim, transcript, label="sumcheck", **options):
    with mock.patch.object(sumcheck_module.SumcheckProver, "claimed_sum", lambda self: np.asarray(claim)):
        return _honest(terms, claim, transcript, label, **options)


@contextlib.contextmanager
def cheating_sumcheck():
    """Within the block the layer provers use the cheating sumcheck."""
    with mock.patch("proofs.layers.matmul.prove_sumcheck", lenient_prove_sumcheck), \
            mock.patch("proofs.layers.relu.prove_sumcheck", lenient_prove_sumcheck):
        yield


def walk(node, rebuild, kind):
    """Every ``kind`` object inside a proof tree (dataclasses and tuples), each with a function that
    returns the whole proof with that object replaced."""
    if isinstance(node, kind):
        yield node, rebuild
    elif dataclasses.is_dataclass(node) and not isinstance(node, type):
        for item in dataclasses.fields(node):
            yield from walk(getattr(node, item.name), lambda new, item=item: rebuild(
                dataclasses.replace(node, **{item.name: new})), kind)
    elif isinstance(node, tuple):
        for i, child in enumerate(node):
            yield from walk(child, lambda new, i=i: rebuild(node[:i] + (new,) + node[i + 1:]), kind)


# ------------------------------------------------------------------------------- consistent cheaters
def _ramp(delta, degree):
    """delta * X at X = 0..degree, (degree + 1, 4): adds delta to g(0) + g(1) and delta r to g(r)."""
    return F.ext_mul_base(np.asarray(delta, dtype=np.uint64)[None, :], np.arange(degree + 1, dtype=np.uint64))


class ConsistentCheater:
    """A sumcheck prover for a *false* claim whose every round passes g(0) + g(1) = running claim.

    It wraps an honest prover (same interface as :class:`proofs.sumcheck.SumcheckProver`) and adds delta_j X
    to round j's message, delta_0 = claim - true sum, delta_(j+1) = delta_j r_j. Every round check passes; the
    sub-claim's expected value ends ``delta_final`` away from the true summand at the point, so only the
    check that settles the sub-claim (the final-value check) can catch the lie, given honest evaluations.
    """

    def __init__(self, prover, claim):
        self._prover, self._claim = prover, np.asarray(claim, dtype=np.uint64)
        self.num_vars, self.degree = prover.num_vars, prover.degree
        self.delta = None

    @property
    def challenges(self):
        return self._prover.challenges

    def round_message(self):
        message = self._prover.round_message()
        if self.delta is None:
            self.delta = F.ext_sub(self._claim, F.ext_add(message[0], message[1]))
        return F.ext_add(message, _ramp(self.delta, self.degree))

    def claimed_sum(self):
        return self._claim if self.delta is None else F.ext_add(self._prover.claimed_sum(), self.delta)

    def bind(self, r):
        self._prover.bind(r)
        self.delta = F.ext_mul(self.delta, np.asarray(r, dtype=np.uint64))

    def final_evaluations(self):
        return self._prover.final_evaluations()


def _as_prover(terms):
    return terms if hasattr(terms, "round_message") else sumcheck_module.SumcheckProver(terms)


def consistent_prove_sumcheck(terms, claim, transcript, label="sumcheck", **options):
    """:func:`proofs.sumcheck.prove_sumcheck` for any claim, every round consistent (a :class:`ConsistentCheater`)."""
    options["strict"] = False
    return _honest(ConsistentCheater(_as_prover(terms), sumcheck_module.as_ext_scalar(claim, "claim")), claim,
                   transcript, label, **options)


def consistent_prove_zk_sumcheck(terms, claim, transcript, label="sumcheck", *args, **options):
    """:func:`proofs.zk.prove_zk_sumcheck` for any claim, every round consistent."""
    return zk_module.prove_zk_sumcheck(ConsistentCheater(_as_prover(terms), sumcheck_module.as_ext_scalar(
        claim, "claim")), claim, transcript, label, *args, **options)


def consistent_prove_masked(prover, claim, transcript, label, coefficients):
    """:func:`proofs.basefold_zk.prove_masked` (a committed mask) for any claim, every round consistent."""
    return _honest_masked(ConsistentCheater(prover, sumcheck_module.as_ext_scalar(claim, "claim")), claim,
                          transcript, label, coefficients)


@contextlib.contextmanager
def consistent_cheating(*modules):
    """Within the block the named prover modules (default: every layer prover) use the consistent cheaters."""
    modules = modules or ("proofs.layers.matmul", "proofs.layers.relu", "proofs.layers.step_relations")
    with contextlib.ExitStack() as stack:
        for name in modules:
            module = importlib.import_module(name)
            if hasattr(module, "prove_sumcheck"):
                stack.enter_context(mock.patch.object(module, "prove_sumcheck", consistent_prove_sumcheck))
            if hasattr(module, "prove_zk_sumcheck"):
                stack.enter_context(mock.patch.object(module, "prove_zk_sumcheck", consistent_prove_zk_sumcheck))
            if hasattr(module, "prove_masked"):
                stack.enter_context(mock.patch.object(module, "prove_masked", consistent_prove_masked))
        yield


# ------------------------------------------------------------------------------------ opening forgers
def forge_opening(witness, points, delta, transcript, row=0, column=0):
    """A plain Ligero opening (:func:`proofs.commit.open_batch`) claiming value_row + delta at ``points[row]``.

    Evaluation row ``row`` is shifted by delta / eq(z_col)[column] at ``column`` (so <u, eq(z_col)> gains delta),
    the queries are re-derived from the transcript over the forged rows, and honest columns are opened there.
    Only the consistency check of the evaluation rows against the opened columns can catch it.
    Returns (values, OpeningProof)."""
    commitment = witness.commitment
    points = np.asarray(points, dtype=np.uint64)
    col_eqs, row_eqs = commit_module._split_points(points, commitment, ProofError)
    gamma = commit_module._begin(transcript, commitment, points)
    combined = commit_module._combine_rows(np.stack([gamma] + row_eqs), witness.matrix)
    u_rand, u_evals = combined[0], combined[1:].copy()
    shift = F.ext_mul(np.asarray(delta, dtype=np.uint64), F.ext_inv(col_eqs[row][column][None])[0])
    u_evals[row, column] = F.ext_add(u_evals[row, column], shift)
    values = np.stack([F.ext_dot(u, c) for u, c in zip(u_evals, col_eqs)])
    indices = commit_module._queries(transcript, commitment, values, u_rand, u_evals)
    proof = commit_module.OpeningProof(u_rand, u_evals, witness.encoded[:, indices].copy(),
                                       tuple(commit_module.merkle_open(witness.levels, indices)))
    return values, proof


def forge_hiding_opening(witness, points, delta, transcript, row=1, column=0):
    """A hiding opening (:func:`proofs.zk.open_functionals`) whose sent row ``row`` alone is inconsistent.

    row 1 (the value row): the prover runs the whole opening on the committed table with one data entry
    (matrix row 0, ``column``) plus ``delta`` (a base element): the stated values are that table's, the
    reduction and the value check hold for them, the proximity row is put back to the committed table's and
    the committed (honest) columns are opened, so only the value row's consistency check can catch the lie.
    row 0 (proximity) or 2 (the reduction's mask row): that sent row shifted by delta at its last entry (outside
    every weighted coordinate), the queries re-derived. Returns (values, HidingOpening)."""
    commitment = witness.commitment
    functionals = [zk_module.mle_functional(commitment, z) for z in points]
    delta = np.uint64(np.asarray(delta, dtype=np.uint64).reshape(-1)[0])
    real_queries, real_challenges, captured = zk_module._queries, zk_module._challenges, {}

    def challenges(*args):
        captured["gamma"] = out = real_challenges(*args)
        return out

    def queries(transcript_, commitment_, rows):
        rows = rows.copy()
        if row == 1:  # the proximity row of the committed table: the lie moved gamma_0 delta into entry column
            rows[0, column] = F.ext_sub(rows[0, column], F.ext_mul_base(captured["gamma"][0][0], delta))
        else:
            rows[row, -1] = F.ext_add(rows[row, -1], F.ext_from_base(delta))
        captured["rows"] = rows
        return real_queries(transcript_, commitment_, rows)

    lying = witness
    if row == 1:
        table = witness.rows.copy()
        table[0, column] = (table[0, column] + delta) % F.P
        lying = dataclasses.replace(witness, rows=table, spent=witness.spent)
    with mock.patch.object(zk_module, "_queries", queries), mock.patch.object(zk_module, "_challenges", challenges):
        values, opening = zk_module.open_functionals(lying, functionals, transcript)
    return values, dataclasses.replace(opening, rows=captured["rows"])


def bumped(array, index: int = 0) -> np.ndarray:
    """A copy of a field array with entry ``index`` (flat, wrapped) plus one mod p."""
    out = np.array(array, copy=True)
    flat = out.reshape(-1)
    flat[index % flat.size] = (flat[index % flat.size] + 1) % F.P
    return out


def tampered_agreements(agreement):
    """For each item after the mask commitment of a hiding Basefold agreement proof: the agreement with that item's
    value changed (a stated array bumped, a masked sumcheck's mask value, a Basefold opening's final table)."""
    from proofs.layers.basefold_channel import MaskedSumcheckProof
    mask, *rest = agreement
    for i, item in enumerate(rest):
        if isinstance(item, np.ndarray):
            bad = bumped(item)
        elif isinstance(item, MaskedSumcheckProof):
            bad = dataclasses.replace(item, mask_eval=bumped(item.mask_eval))
        else:
            bad = dataclasses.replace(item, final=bumped(item.final))
        yield (mask, *rest[:i], bad, *rest[i + 1:])


def dirty_graph_proof(declared, dirty, x, zk: bool):
    """Prove `x` with `dirty`'s committed weights under `declared`'s (public) structure, by the honest prover code.

    Checks that the cheat changes the output (else the attack proves nothing) and returns ``(commitment, verify,
    proof)`` with the declared commitment and the matching graph verifier (``verify_graph_zk`` when ``zk``)."""
    from proofs.layers.graph import GraphCommitment, GraphNetwork, verify_graph
    from proofs.layers.graph_zk import HidingGraphCommitment, HidingGraphNetwork, verify_graph_zk
    if zk:
        net = HidingGraphNetwork(dirty, max_proofs=1)
        net.commitment, verify = HidingGraphCommitment(declared, net.commitment.weights), verify_graph_zk
    else:
        net = GraphNetwork(dirty)
        net.commitment, verify = GraphCommitment(declared, net.commitment.weights), verify_graph
    proof = net.prove(x)
    honest = declared.forward_int(declared.quantize_input(x))
    assert not np.array_equal(proof.output, honest.reshape(len(x), -1)), "the cheat does not change the output"
    return net.commitment, verify, proof
