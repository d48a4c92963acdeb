"""A loaded prover state rebuilds a copy's code and Merkle tree only when the copy is first used
(``prover_state.CopiesOnDemand``): a proof rebuilds one copy, not all of them; each copy's table is still checked
against the model at load, and a copy whose code does not hash to its root is refused, by name, when used."""
from __future__ import annotations

import numpy as np
import pytest

from proofs.errors import ModelError
from proofs.layers import prover_state
from proofs.layers.network import Network, verify_network
from proofs.quantize import forward_int, quantize_fixed_point

from .test_prover_state_reservation import committed  # noqa: F401  (the fixture: a fresh 4-copy state)


def _another_model():
    """A model of the committed one's shapes (tests/proofs/test_prover_state_reservation.py's _model), other weights."""
    rng = np.random.default_rng(5)
    return quantize_fixed_point([rng.normal(0, 0.4, (5, 6)), rng.normal(0, 0.4, (3, 5))],
                                [rng.normal(0, 0.1, 5), rng.normal(0, 0.1, 3)], frac_bits=6)


def _built(network) -> list:
    copies = network._weights_witness.witnesses
    assert isinstance(copies, prover_state.CopiesOnDemand)
    return [k for k in range(len(copies)) if copies._built[k] is not None]


def test_loading_builds_no_copy_and_a_proof_builds_the_one_it_uses(committed):
    model, x, blob, commitment = committed
    later = Network(model, state=blob)
    assert _built(later) == [] and later.proofs_left == 4
    proof = later.prove(x)
    assert len(_built(later)) == 1
    assert np.array_equal(verify_network(commitment, x, proof), forward_int(model, x))
    again = Network(model, state=later.state_bytes())  # written again: the unread copies' arrays as read
    assert _built(again) == [] and again.proofs_left == 3 and len(_built(later)) == 1
    assert np.array_equal(verify_network(commitment, x, again.prove(x)), forward_int(model, x))


def test_a_copy_whose_code_misses_its_root_is_refused_when_used(committed):
    """A state whose copy 0 has other salts (its table still this model's) loads, and refuses to prove with that
    copy, naming it; another model's tables are refused at load, as before."""
    model, x, blob, _ = committed
    arrays = prover_state._from_record(blob, "<bytes>")
    salts = arrays["c0.salts"].copy()
    salts[0] ^= 1
    arrays["c0.salts"] = salts
    tampered = Network(model, state=prover_state._to_record(arrays))
    with pytest.raises(ModelError, match=r"does not belong to this model \(copy 0\)"):
        tampered.prove(x)
    with pytest.raises(ModelError, match="does not belong"):
        Network(_another_model(), state=blob)


def test_a_state_stores_each_copys_randomness_not_the_model_again(committed):
    """Version 3 holds the rows' random parts (tails, mask rows) per copy and the model's tables once, by digest;
    a version-2 state (whole rows per copy) still loads and proves."""
    model, x, blob, commitment = committed
    arrays = prover_state._from_record(blob, "<bytes>")
    assert int(arrays["version"]) == 3 and "tables.digest" in arrays
    assert not any(name.endswith(".rows") for name in arrays)
    later = Network(model, state=blob)
    copies = later._weights_witness.witnesses
    old = {name: value for name, value in arrays.items()
           if not name.endswith((".tails", ".mask_rows")) and name != "tables.digest"}
    old["version"] = np.array(2)
    for k in range(len(copies)):
        old[f"c{k}.rows"] = copies[k].commitment_witness.rows
    older = Network(model, state=prover_state._to_record(old))
    assert np.array_equal(verify_network(commitment, x, older.prove(x)), forward_int(model, x))


def test_a_graph_committed_with_hiding_basefold_tail_layout_proves_from_its_saved_state(tmp_path):
    """A graph whose weights store takes hiding Basefold's tail layout (the table's free end holds the random tail)
    proves from its saved state: the loaded copy is the committed table, tail included (this failed, "does not
    belong to this model", before the loader read the tail layout's first slot)."""
    from hezk.model import read_onnx
    from proofs.graph_quantize import quantize_graph
    from proofs.layers.graph_zk import HidingGraphNetwork, graph_basefold_params, verify_graph_zk

    from tests.model.onnx_models import mlp

    rng = np.random.default_rng(0)
    qgraph = quantize_graph(read_onnx(mlp((512, 256, 8), "relu")), rng.normal(size=(8, 512)))
    params = graph_basefold_params(qgraph)
    network = HidingGraphNetwork(qgraph, params=params, max_proofs=2)
    copy = network.commitment.weights.copies[0]  # one slot, S_0 of the table's own size: its tail in the free end
    assert params.layout == "tail" and copy.inner.num_vars == copy.num_vars + 1
    network.save_state(tmp_path / "c.state")
    arrays = prover_state._from_record((tmp_path / "c.state").read_bytes(), "c.state")
    assert "c0.slots" not in arrays  # S_0's model-held prefix is not stored again: its random tail and slot are
    assert arrays["c0.first_tail"].size + arrays["c0.other_slots"].size < (1 << copy.inner.num_vars) * 3 // 4
    later = HidingGraphNetwork(qgraph, state=tmp_path / "c.state")
    x = qgraph.quantize_input(rng.normal(size=(1, 512)))
    verdict = verify_graph_zk(network.commitment, x, later.prove(x))
    assert np.array_equal(np.asarray(verdict.output).reshape(-1), np.asarray(qgraph.forward_int(x)).reshape(-1))
