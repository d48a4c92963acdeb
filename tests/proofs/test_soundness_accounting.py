"""Soundness figures count every check the verifier relies on, and state the statistical bits apart from grinding.

Rules recomputed here independently of the figure functions:
* a hiding Basefold batch in the "tail" layout errs w.p. (its Basefold batch) + (the mask table R's own batch) +
  (2 n + 1) / |F_p4| (the masked reduction over the n variables of the largest committed table);
* R's own opening shows at most ``mask_shown`` base-field values: its final table, evaluations, claim values,
  reduction and round messages, and per query one leaf of its codeword and of each committed layer;
* a hiding graph figure includes the agreement proof of the model's copies (as the MLP figure does);
* grinding buys at most MAX_GRINDING_CREDIT bits: a verifier refuses parameters whose statistical bits (the
  figure without grinding) fall below min_security_bits - MAX_GRINDING_CREDIT, whatever the grinding.
"""
from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from proofs import basefold as B
from proofs import basefold_zk as Z
from proofs import field as F
from proofs.cli import soundness_text
from proofs.errors import ModelError, ProofError, ProofRejected
from proofs.layers import graph_zk as G
from proofs.layers import network_zk as N
from proofs.layers import reusable as R
from proofs.layers.basefold_channel import StorePlan
from proofs.layers.reusable import agreement_shapes
from proofs.relations import Slot, StoreLayout
from proofs.layers.step_proof import union_bound_error
from proofs.transcript import Transcript

FIELD = 2.0 ** -F.EXT_BITS
NETWORK_BASE = N.basefold_params().base


def _fake(num_vars: int, params: Z.HidingBasefoldParams) -> Z.HidingBasefoldCommitment:
    inner = B.BasefoldCommitment(bytes(32), Z.inner_vars(num_vars, params), params.base)
    return Z.HidingBasefoldCommitment(inner, num_vars, params.openings, params.layout)


@pytest.mark.parametrize("n", [16, 20])
def test_tail_layout_proof_figure_counts_the_mask_tables_own_batch(n):
    """basefold_proof_error of a tail-layout model copy and proof store = the two tables' batch + R's batch +
    (2 n_inner + 1) / |F_p4|; the slot layout (no R) keeps its figure."""
    tail = Z.HidingBasefoldParams(NETWORK_BASE, 1, "tail")
    weights, store = _fake(n, tail), _fake(n - 2, tail)
    figure = N.basefold_proof_error(SimpleNamespace(copies=[weights]), SimpleNamespace(num_vars=n - 2), [], 0, tail)
    n_inner = max(weights.inner.num_vars, store.inner.num_vars)
    mask = B.BasefoldCommitment(bytes(32), Z.mask_vars(n_inner, NETWORK_BASE), NETWORK_BASE)
    expected = 2.0 ** -B.batch_security_bits([weights.inner, store.inner]) + 2.0 ** -B.batch_security_bits([mask]) \
        + (2 * n_inner + 1) * FIELD
    assert math.isclose(figure, expected, rel_tol=1e-12)
    tables_only = 2.0 ** -B.batch_security_bits([weights.inner, store.inner])
    assert -math.log2(tables_only) - -math.log2(figure) > 0.25  # what the old figure claimed too much
    slots = Z.HidingBasefoldParams(NETWORK_BASE, 1, "slots")
    w, p = _fake(12, slots), _fake(10, slots)
    assert math.isclose(N.basefold_proof_error(SimpleNamespace(copies=[w]), SimpleNamespace(num_vars=10), [], 0,
                                               slots), 2.0 ** -B.batch_security_bits([w.inner, p.inner]), rel_tol=1e-12)


def test_mask_shown_counts_every_value_the_mask_tables_opening_shows():
    """Count what a real tail-layout batch's opening of R shows (final table, evaluations, the two claim values,
    reduction and round messages, per query a leaf of the codeword and of each layer): mask_shown equals it
    (the leaves are de-duplicated in the proof, so they are bounded by queries x leaf size)."""
    base = B.BasefoldParams(rate_inv=2, arity=2, final_vars=4, max_log_codeword=14)
    params = Z.HidingBasefoldParams(base, 1, "tail")
    rng = np.random.default_rng(3)
    commitment, witness = Z.commit(rng.integers(0, 1 << 20, 1 << 16).astype(np.uint64), params)
    point = rng.integers(0, F.P, (1, 16, 4), dtype=np.uint64)
    values, proof = Z.open_batch([witness], [point], Transcript(b"shown"))
    Z.verify_batch([commitment], [point], values, proof, Transcript(b"shown"), min_security_bits=0)
    opening = proof.mask_opening
    claim_values = 2 * F.EXT_DEGREE  # g(point) and R at its own point
    per_query = sum(leaves[0].size for leaves in opening.initial_leaves + opening.layer_leaves)
    shown = (opening.final.size + opening.evals.size + opening.reduction.size + opening.rounds.size + claim_values
             + base.num_queries * per_query)
    assert opening.evals.size == F.EXT_DEGREE  # the value the old count left out
    assert Z.mask_shown(proof.mask.num_vars, base) == shown


def test_mask_shown_of_the_network_parameters():
    """The hiding Network parameters' R of 2^m: 6,100 values shown (6,096 before the evaluation was counted), and
    mask_vars still leaves twice that plus g's coefficients."""
    m = Z.mask_vars(20, NETWORK_BASE)
    assert Z.mask_shown(m, NETWORK_BASE) == 6100
    assert (1 << m) >= 2 * Z.mask_shown(m, NETWORK_BASE) + Z.mask_entries(20, 2)


onnx = pytest.importorskip("onnx")


@pytest.fixture(scope="module")
def graph_commitment(tmp_path_factory):
    from hezk.model import read_onnx
    from proofs.graph_quantize import quantize_graph
    from tests.model import onnx_models as M
    path = str(tmp_path_factory.mktemp("graph") / "m.onnx")
    onnx.save(M.mlp((8, 6, 3), activation="relu"), path)
    graph = read_onnx(path)
    q = quantize_graph(graph, np.random.default_rng(0).normal(size=(16, *graph.input_shape)))
    return G.HidingGraphNetwork(q, max_proofs=4).commitment


def test_ligero_graph_figure_counts_the_agreement_proof(graph_commitment, monkeypatch):
    """The hiding (Ligero) graph figure's error = the proof's own error + the copies' agreement proof's, the
    latter recomputed here from the agreement's public structure."""
    c = graph_commitment
    params = G.base_params(c)
    layout = G.model_layout(c.structure)
    shapes, layouts, batching = agreement_shapes(layout, len(c.weights.copies), params)
    agreement = union_bound_error(shapes, batching, layouts, params, {key: c.weights.params for key in layouts})
    full = 2.0 ** -G.soundness_bits(c, 1)
    monkeypatch.setattr(G, "copies_agreement_error", lambda *args: 0.0)
    proof_only = 2.0 ** -G.soundness_bits(c, 1)
    assert agreement > 0 and math.isclose(full, proof_only + agreement, rel_tol=1e-9)


def test_statistical_bits_are_the_figure_without_grinding():
    """One opening of the hiding Network parameters (12 grinding bits): the per-hash figure, its statistical part
    (no grinding: 111 queries at rate 1/8), and the printed text states both."""
    c = B.BasefoldCommitment(bytes(32), 12, NETWORK_BASE)
    total, statistical = B.batch_security_bits([c]), B.statistical_bits(B.batch_security_bits, [c])
    queries = NETWORK_BASE.num_queries * -math.log2((1 + 1 / 8) / 2)
    field_terms = c.field_terms + 2 * (c.codeword_length >> NETWORK_BASE.interleave(12))  # + the combined folds
    assert math.isclose(statistical, -math.log2(2.0 ** -queries + field_terms * FIELD), rel_tol=1e-12)
    assert 11.5 < total - statistical <= 12  # grinding divides the query error only, not the field terms
    assert statistical >= B.MIN_STATISTICAL_BITS and total >= B.MIN_VERIFY_BITS  # the defaults pass the floor
    assert B.batch_security_bits([c]) == total  # the context is left as it was
    text = soundness_text(total, "proven", statistical)
    assert f"{statistical:.1f} statistical" in text and "bits per attempt" in text


@pytest.mark.parametrize("grinding, accepted", [(12, True), (20, True), (30, False)])
def test_the_verifier_refuses_statistical_bits_below_the_floor_whatever_the_grinding(grinding, accepted):
    """Parameters reaching 104 bits per hash with g grinding bits have 104 - g statistical ones: 30 (74 bits) is
    refused before the proof is read; 12 and 20 pass the parameter checks (and fail only on the missing proof)."""
    params = B.BasefoldParams(rate_inv=8, grinding_bits=grinding)
    c = B.BasefoldCommitment(bytes(32), 12, params)
    assert B.batch_security_bits([c]) >= B.MIN_VERIFY_BITS  # the per-hash figure alone would accept all three
    point, value = np.zeros((1, 12, 4), dtype=np.uint64), np.zeros((1, 4), dtype=np.uint64)
    with pytest.raises(ProofRejected) as rejection:
        B.verify_batch([c], [point], [value], None, Transcript(b"floor"))
    assert ("statistical" in str(rejection.value)) != accepted
    if not accepted:
        assert "expected a BasefoldProof" not in str(rejection.value)


def test_a_prover_is_told_before_any_work_when_its_statistical_bits_are_below_the_floor():
    params = Z.HidingBasefoldParams(B.BasefoldParams(rate_inv=8, grinding_bits=30))
    with pytest.raises(ProofError, match="statistical"):
        Z.check_verified_bits([_fake(12, params)], "test")
    Z.check_verified_bits([_fake(12, Z.HidingBasefoldParams(NETWORK_BASE))], "test")  # positive control


# ------------------------------------------------------------------ many hiding Basefold copies reach the floor
def _agreement_bits(layout, copies: int, params) -> float:
    """The agreement figure of ``copies`` copies of ``layout`` committed with ``params`` (fake roots)."""
    made = R.copy_params(params, copies)
    copy = _fake(StorePlan(layout).num_vars, made)
    return -math.log2(N._basefold_agreement_error([copy] * copies, layout, params))


def test_many_basefold_copies_get_rows_short_enough_for_the_floor():
    """64 copies of a 2^13-entry model: the agreement opens all in one batch, whose field error sums (s + 1) N'
    over the copies: the default rows of 2^16 give < 100 bits (every proof refused); the fitted rows are shorter
    and give >= 100 + the margin. Positive control: 16 copies of a small model keep the defaults."""
    layout = StoreLayout((Slot("W", 12), Slot("b", 7)), True)
    default = N.basefold_params()
    assert StorePlan(layout).num_vars == 13 and _agreement_bits(layout, 64, default) < N.MIN_SOUNDNESS_BITS
    fitted = N.fit_basefold_rows(default, layout, 64)
    assert fitted.base.max_log_codeword < default.base.max_log_codeword
    assert fitted.base.num_queries == default.base.num_queries and fitted.base.grinding_bits == 12
    assert _agreement_bits(layout, 64, fitted) >= N.MIN_SOUNDNESS_BITS + N.AGREEMENT_MARGIN_BITS
    small = StoreLayout((Slot("W", 7),), True)
    assert N.fit_basefold_rows(default, small, 16) == default
    with pytest.raises(ModelError, match="max_proofs=4096.*commit with fewer max_proofs"):
        N.fit_basefold_rows(default, layout, 4096)


@pytest.mark.slow
def test_a_default_hiding_basefold_graph_proof_with_64_copies_verifies():
    """A 32-32-10 graph committed with the default hiding Basefold parameters and 64 copies (the rows of 2^16
    gave its agreement 99.2 bits, below the verifier's 100): the proof verifies and states >= 100 bits, its
    statistical part >= the floor."""
    from hezk.model import read_onnx
    from proofs.graph_quantize import quantize_graph
    from tests.model import onnx_models as M
    import tempfile
    with tempfile.TemporaryDirectory() as folder:
        onnx.save(M.mlp((32, 32, 10), activation="relu"), folder + "/m.onnx")
        graph = read_onnx(folder + "/m.onnx")
    calibration = np.random.default_rng(0).normal(size=(16, *graph.input_shape))
    q = quantize_graph(graph, calibration)
    network = G.HidingGraphNetwork(q, params=N.basefold_params(), max_proofs=64)
    assert network.commitment.soundness_bits(1) >= G.MIN_SOUNDNESS_BITS
    assert B.statistical_bits(network.commitment.soundness_bits, 1) >= B.MIN_STATISTICAL_BITS
    proof = network.prove(calibration[:1])
    assert np.array_equal(G.verify_graph_zk(network.commitment.to_bytes(), calibration[:1], proof.to_bytes()),
                          q.forward_int(q.quantize_input(calibration[:1])))
