"""Lookups over hiding Basefold stores (issue 34): the graph proof's lookup store (the LogUp inverses, committed
after alpha, beta) is a hiding Basefold commitment of its own whose claims join the proof's ONE batch opening with
the model copy's, the proof store's and the relations' masks (:class:`proofs.layers.basefold_channel.
BasefoldChannel`); before, ``--scheme basefold`` refused any graph with a lookup. A cheating lookup, another
store's commitment in the lookup store's place, a changed stated value, a proof of the other scheme and damaged
bytes are rejected with ProofRejected; :func:`proofs.layers.graph_zk.graph_basefold_params` picks the tail layout
(with the query count of its own rate) for large stores."""
from __future__ import annotations

import dataclasses
from unittest import mock

import numpy as np
import pytest

import hezk
import hezk.model
from proofs import basefold as B
from proofs import basefold_zk as BZ
from proofs.errors import ProofError, ProofRejected
from proofs.layers import graph_zk as GZ
from proofs.graph_quantize import quantize_graph
from proofs.layers.graph_zk import (GRAPH_BASEFOLD_CANDIDATES, HidingGraphCommitment, HidingGraphProof, Shapes,
                                    graph_basefold_params, lookup_layout, model_layout, proof_layout, verify_graph_zk)
from proofs.layers.network_zk import basefold_params, is_basefold
from proofs.pcs.scheme import scheme_of
from proofs.proof_format import from_record, to_record

torch = pytest.importorskip("torch")
from tests.proofs.test_graph_lookup_activations import export_mlp  # noqa: E402


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """A Tanh MLP, its calibration samples and its quantized structure."""
    nn = torch.nn
    torch.manual_seed(0)
    path = export_mlp(nn.Sequential(nn.Linear(10, 8), nn.Tanh(), nn.Linear(8, 2)), 10,
                   tmp_path_factory.mktemp("tanh") / "tanh.onnx")
    x = np.random.default_rng(0).normal(size=(64, 10)).astype(np.float32)
    return path, x, quantize_graph(hezk.model.read_onnx(path), x)


@pytest.fixture(scope="module")
def tanh(exported):
    """The Tanh MLP committed with hidden weights over hiding Basefold (its lookup store too) and over Ligero
    (about 7 s: the tests using it are slow)."""
    path, x, _ = exported
    basefold = hezk.commit(path, x, scheme="basefold", max_proofs=4)
    ligero = hezk.commit(path, x, max_proofs=2)
    sample = x[:2]
    proofs = (basefold.prove(sample), basefold.prove(sample))  # a second: its parts in the first one's place
    return path, x, sample, (basefold, *proofs), (ligero, ligero.prove(sample))


def _commitment(prover) -> HidingGraphCommitment:
    return HidingGraphCommitment.from_bytes(prover.commitment)


def _lookup_store_position(proof: HidingGraphProof) -> int:
    return next(i for i, item in enumerate(proof.relations.items) if isinstance(item, BZ.HidingBasefoldCommitment))


@pytest.mark.slow
def test_a_lookup_is_proven_over_hiding_basefold(tanh):
    """The proven output is forward_int's, the statement >= 100 bits; the lookup store is a hiding Basefold
    commitment in the proof (not Ligero's), the model copy and the proof store too."""
    _, _, sample, (prover, proof, _), _ = tanh
    assert is_basefold(_commitment(prover).weights.params)
    verdict = hezk.verify(prover.commitment, sample, proof)
    q = prover.quantized
    reference = q.forward_int(q.quantize_input(sample))
    assert np.array_equal(verdict.output_int.reshape(reference.shape), reference)
    assert verdict.soundness_bits >= 100
    parsed = HidingGraphProof.from_bytes(proof)
    store = parsed.relations.items[_lookup_store_position(parsed)]
    assert scheme_of(store).name == "hiding-basefold"
    assert scheme_of(parsed.relations.commitments[0]).name == "hiding-basefold"


@pytest.mark.slow
def test_another_stores_commitment_in_the_lookup_stores_place_is_rejected(tanh):
    """The proof store's commitment (a valid hiding Basefold commitment of another size) and the lookup store's
    commitment of another proof (the right size, another table: its claims fail the batch) are refused."""
    path, x, sample, (prover, proof, second), _ = tanh
    parsed, other = HidingGraphProof.from_bytes(proof), HidingGraphProof.from_bytes(second)
    position = _lookup_store_position(parsed)
    for replacement in (parsed.relations.commitments[0], other.relations.items[position]):
        items = list(parsed.relations.items)
        items[position] = replacement
        forged = dataclasses.replace(parsed, relations=dataclasses.replace(parsed.relations, items=tuple(items)))
        with pytest.raises(ProofRejected):
            verify_graph_zk(_commitment(prover), sample, forged)


@pytest.mark.slow
def test_a_changed_stated_value_or_batch_opening_is_rejected(tanh):
    """A stated value changed (the batch's coefficients are drawn after it, the claims no longer hold) and the
    batch opening of another proof (another transcript's coefficients) are refused."""
    _, _, sample, (prover, proof, second), _ = tanh
    parsed = HidingGraphProof.from_bytes(proof)
    items = list(parsed.relations.items)
    values = [i for i, item in enumerate(items) if isinstance(item, np.ndarray)]
    changed = list(items)
    changed[values[-1]] = changed[values[-1]].copy()
    changed[values[-1]][0, 0] = (int(changed[values[-1]][0, 0]) + 1) % 2013265921
    other = HidingGraphProof.from_bytes(second).relations.items
    swapped = list(items)
    swapped[-1] = other[-1]
    for forged_items in (changed, swapped):
        forged = dataclasses.replace(parsed, relations=dataclasses.replace(parsed.relations, items=tuple(forged_items)))
        with pytest.raises(ProofRejected):
            verify_graph_zk(_commitment(prover), sample, forged)


@pytest.mark.slow
def test_a_cheating_lookup_over_basefold_is_rejected(tanh, monkeypatch):
    """A prover whose lookup returns T[x] + 1 for one element (its claimed output follows it) is rejected."""
    import proofs.graph_quantize as GQ
    _, _, sample, (prover, _, _), _ = tanh
    honest = GQ.lookup_int

    def off_by_one(op, values, f_in, f_out):
        y = honest(op, values, f_in, f_out).copy()
        y.reshape(-1)[1] += 1
        return y

    monkeypatch.setattr(GQ, "lookup_int", off_by_one)
    with pytest.raises(ProofRejected, match="lookup"):
        hezk.verify(prover.commitment, sample, prover.prove(sample))


@pytest.mark.slow
def test_a_lookup_store_with_nonzero_padding_is_rejected(tanh, monkeypatch):
    """One sample (the batch axis padded to 2): a prover whose inverse H is nonzero at a padding entry (batch row
    1, which no real sample fills) is rejected: the lookup relation weighs H by the real box's indicator, so the
    padding must hold zeros (H D = 0 there), and the store commits H's real box only (the cheater skips its own
    check of the padding: its sumcheck's stated values then miss the commitment)."""
    _, _, sample, (prover, _, _), _ = tanh
    honest = GZ._Run.inverse_tables
    q = prover.quantized
    shapes = Shapes(q, 1)
    index = shapes.lookups[0]
    real, padded = shapes.real(q.ops[index].output), shapes.padded(q.ops[index].output)
    assert padded[0] > real[0] == 1  # batch row 1 is padding
    position = int(np.prod(padded[1:]))  # plane 0, batch row 1, first feature

    def padded_inverse(run, at):
        tables = honest(run, at)
        if at == index:
            h = tables[f"h.{at}"].copy()
            assert h[position] == 0  # the honest prover's padding
            h[position] = 1
            tables[f"h.{at}"] = h
        return tables

    monkeypatch.setattr(GZ._Run, "inverse_tables", padded_inverse)
    from proofs import relations
    monkeypatch.setattr(relations, "check_box", lambda *args: None)
    proof = prover.prove(sample[:1])
    with pytest.raises(ProofRejected, match="lookup"):
        hezk.verify(prover.commitment, sample[:1], proof)


@pytest.mark.slow
def test_proofs_of_the_other_scheme_and_damaged_bytes_are_rejected(tanh):
    _, _, sample, (prover, proof, _), (ligero, ligero_proof) = tanh
    with pytest.raises(ProofRejected):
        verify_graph_zk(_commitment(prover), sample, ligero_proof)
    with pytest.raises(ProofRejected):
        verify_graph_zk(_commitment(ligero), sample, proof)
    inner = bytearray(from_record(proof, HidingGraphProof.KIND, "proof"))
    rng = np.random.default_rng(5)
    for position in sorted(set(rng.integers(0, len(inner), 12).tolist()) | {len(inner) - 1}):
        damaged = bytearray(inner)
        damaged[position] ^= 1 + int(rng.integers(0, 255))
        with pytest.raises(ProofRejected):
            verify_graph_zk(_commitment(prover), sample, to_record(HidingGraphProof.KIND, bytes(damaged)))


def test_graph_basefold_params_take_the_tail_layout_for_large_stores(exported, monkeypatch):
    """A store of >= 2^TAIL_MIN_VARS entries (the Tanh lookup's table of inverses): the tail layout at a candidate
    rate, with that rate's own query count (not the slot layout's 111 at rate 1/8); small stores only: the slot
    layout of the MLP proofs."""
    _, _, q = exported
    shapes = Shapes(q, 1)
    stores = (model_layout(q), proof_layout(shapes), lookup_layout(shapes))
    assert max(layout.num_vars for layout in stores) >= BZ.TAIL_MIN_VARS
    params = graph_basefold_params(q)
    assert params.layout == "tail"
    base = params.base
    assert (base.rate_inv, base.max_log_codeword, base.arity, base.final_vars, base.grinding_bits,
            base.fold_grinding_bits) in GRAPH_BASEFOLD_CANDIDATES
    expected = B.BasefoldParams(rate_inv=params.base.rate_inv, arity=params.base.arity,
                                final_vars=params.base.final_vars, grinding_bits=params.base.grinding_bits)
    assert params.base.num_queries == expected.num_queries and params.base.query_bits >= 104
    # rows of 2^20 symbols with a proof of work before each fold (the first candidate)
    assert params.base.fold_grinding_bits > 0 and params.base.max_log_codeword >= 20
    monkeypatch.setattr(BZ, "TAIL_MIN_VARS", 30)
    assert graph_basefold_params(q) == basefold_params()


def test_the_ground_candidates_prove_gpt2_size_stores_that_short_rows_need_rate_half_for():
    """GPT-2-small's block (stores of 2^24, 2^23, 2^23 entries, the tail layout's second halves: 2^26, 2^25, 2^25):
    the rate-1/2 candidate with rows of 2^22 reaches 100 bits per hash only with its fold proof of work (the fold
    terms count 2^-12), its statistical bits stay above the verifiers' floor; rate 1/4 has no room for the 2^26."""
    ground = next(c for c in GRAPH_BASEFOLD_CANDIDATES if c[0] == 2 and c[5])
    rate, log_codeword, arity, final, grinding_bits, fold_bits = ground

    def bits(fold):
        params = BZ.HidingBasefoldParams(B.BasefoldParams(rate_inv=rate, arity=arity, final_vars=final,
                                                          max_log_codeword=log_codeword, grinding_bits=grinding_bits,
                                                          fold_grinding_bits=fold), layout="tail")
        stores = [BZ.HidingBasefoldCommitment(B.BasefoldCommitment(bytes(32), BZ.inner_vars(n, params), params.base),
                                              n, 1, "tail") for n in (24, 23, 23)]
        assert [c.inner.num_vars for c in stores] == [26, 25, 25]
        return BZ.verified_bits(stores), B.statistical_bits(BZ.verified_bits, stores)

    (ground_bits, statistical), (plain_bits, _) = bits(fold_bits), bits(0)
    assert ground_bits >= 101 > 100 > plain_bits
    assert B.MIN_STATISTICAL_BITS <= statistical < plain_bits
    first = GRAPH_BASEFOLD_CANDIDATES[0]
    with pytest.raises(ProofError):  # the first candidate (rate 1/4) cannot hold the 2^24 store's slot table
        BZ.inner_vars(24, BZ.HidingBasefoldParams(B.BasefoldParams(rate_inv=first[0], max_log_codeword=first[1]),
                                                  layout="tail"))


@pytest.mark.slow
def test_a_transformer_layer_with_range_lookups_is_proven_over_hiding_basefold():
    """The 8-wide, 2-head encoder layer (GELU, Softmax and LayerNorm lookups, range-checked requantizations): the
    tail-layout proof verifies with forward_int's output at >= 100 bits, in fewer bytes than hiding Ligero's
    (0.43 against 1.02 MB measured without range lookups); range lookups forced on ("always")."""
    from proofs.layers.graph_zk import HidingGraphNetwork

    from ..model.test_transformer_reader import encoder, export

    pytest.importorskip("onnxruntime")
    model = export(encoder(1, "gelu", d_model=8, heads=2, feedforward=16), False, sequence=4, d_model=8)
    rng = np.random.default_rng(0)
    q = quantize_graph(hezk.model.read_onnx(model), rng.normal(size=(16, 1, 4, 8)))
    x = rng.normal(size=(1, 1, 4, 8)).astype(np.float32)
    with mock.patch.object(GZ, "RANGE_LOOKUPS", "always"):  # at this size "auto" keeps bit planes
        GZ._structure_of.cache_clear()
        GZ._basefold_structure_of.cache_clear()
        try:
            shapes = Shapes(q, 1)
            assert shapes.lookups and shapes.range_ops
            params = graph_basefold_params(q)
            assert params.layout == "tail"
            proof = HidingGraphNetwork(q, params, max_proofs=1)
            blob = proof.prove(x).to_bytes()
            verdict = verify_graph_zk(proof.commitment, x, blob)
            assert np.array_equal(verdict.output, q.forward_int(q.quantize_input(x)))
            assert verdict.soundness_bits >= 100
            ligero = HidingGraphNetwork(q, max_proofs=1)
            assert len(blob) < len(ligero.prove(x).to_bytes())
        finally:
            GZ._structure_of.cache_clear()
            GZ._basefold_structure_of.cache_clear()


def test_graph_basefold_params_refuse_a_graph_no_parameter_set_proves_at_100_bits(exported, monkeypatch):
    """Without a candidate reaching MIN_SOUNDNESS_BITS (here: none to try, or the floor raised past them) the choice
    is refused with ModelError naming the stores and the fix, not a proof the verifier would refuse later."""
    from proofs.errors import ModelError
    _, _, q = exported
    monkeypatch.setattr(GZ, "MIN_SOUNDNESS_BITS", 200)
    with pytest.raises(ModelError, match=r"too large for hiding Basefold.*< 200.*--scheme ligero"):
        graph_basefold_params(q)


@pytest.mark.slow
def test_cli_commit_prove_verify_a_lookup_with_scheme_basefold(exported, tmp_path, capsys):
    """``commit --scheme basefold`` of a model with a lookup (refused before issue 34), prove, verify: accepted."""
    import contextlib

    from proofs import cli as proofs_cli
    path, x, _ = exported
    np.save(tmp_path / "x.npy", x[:2])
    np.save(tmp_path / "calibration.npy", x)
    steps = [("commit", "--model", path, "--out", "c.bin", "--calibration", "calibration.npy", "--max-proofs", "1",
              "--scheme", "basefold"),
             ("prove", "--model", path, "--input", "x.npy", "--commitment", "c.bin", "--out", "p.bin", "--quiet"),
             ("verify", "--commitment", "c.bin", "--input", "x.npy", "--proof", "p.bin")]
    with contextlib.chdir(tmp_path):
        assert [proofs_cli.main(list(step)) for step in steps] == [0] * len(steps)
        assert is_basefold(HidingGraphCommitment.from_bytes(open("c.bin", "rb").read()).weights.params)
    assert "accept" in capsys.readouterr().out
