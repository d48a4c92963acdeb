"""A Softmax with a constant 0/1 mask (a causal attention's) is proven: the max tree reads each row with its dropped
entries replaced by the row's first kept one (``row_fill``), so the max is over the kept entries, and exp's output is
multiplied by the public mask (``row_keep``) before the row sum and the product: a dropped entry weighs exactly 0.
Both kernels are derived by prover and verifier from the mask text in the structure (no new commitment); a prover
whose trace puts mass on a dropped entry is rejected; the validator refuses a mask that does not fit."""
from __future__ import annotations

import dataclasses
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import proofs.graph_quantize as GQ
from proofs.errors import ModelError, ProofRejected
from proofs.graph_quantize import QuantizedGraph, mask_kernel, mask_text, quantize_graph, row_equation
from proofs.layers.graph import GraphNetwork, verify_graph
from proofs.layers.graph_zk import HidingGraphNetwork, verify_graph_zk

from .cheating import consistent_cheating

N = 4


def _graph(n: int = N, seed: int = 0):
    from hezk.model.graph import Contraction, Graph, Softmax
    rng = np.random.default_rng(seed)
    fc = Contraction("fc", "MatMul", ("x",), "h", "bpk,kn->bpn", rng.normal(size=(n, n)) * 2, None, None, (n, n))
    causal = np.tril(np.ones((n, n)))
    return Graph("x", (n, n), (fc, Softmax("softmax", "Softmax", ("h",), "y", 1, causal)), "y"), causal


@pytest.fixture(scope="module")
def masked():
    graph, causal = _graph()
    calibration = np.random.default_rng(1).uniform(-1, 1, size=(16, N, N))
    return graph, causal, quantize_graph(graph, calibration), calibration


def test_the_masked_softmax_is_within_its_error_and_dropped_entries_are_zero(masked):
    graph, causal, q, calibration = masked
    assert [op.constant for op in q.ops if op.mask] == ["row_fill", "row_keep"]
    x = q.quantize_input(calibration[:4])
    y = q.dequantize(q.forward_int(x)).reshape(4, N, N)
    floats = graph.forward(x * 2.0 ** -q.input_frac)
    assert np.all(y[:, causal == 0] == 0)
    assert np.max(np.abs(y - floats)) <= 0.02 * np.max(np.abs(floats))


def test_the_masked_softmax_is_proven_plain_and_hidden(masked):
    _, _, q, calibration = masked
    x = q.quantize_input(calibration[:2])
    reference = q.forward_int(x)
    net = GraphNetwork(q)
    assert np.array_equal(verify_graph(net.commitment, x, net.prove(x)).output.reshape(reference.shape), reference)
    hidden = HidingGraphNetwork(q, max_proofs=1)
    verified = verify_graph_zk(hidden.commitment, x, hidden.prove(x))
    assert np.array_equal(verified.output.reshape(reference.shape), reference)


@pytest.mark.parametrize("hidden", [pytest.param(False, id="public-weights"),
                                    pytest.param(True, id="hidden-weights", marks=pytest.mark.slow)])
def test_mass_on_a_dropped_entry_is_rejected(masked, hidden):
    """The prover's trace gives a dropped entry (row 0, column 1) of e * mask the weight of a kept maximum, every
    sumcheck round made consistent: the public mask kernel's relation rejects it; control: the honest proof."""
    _, causal, q, calibration = masked
    assert causal[0, 1] == 0
    target = next(op for op in q.ops if op.constant == "row_keep")
    original = GQ.contract_int

    def lying(op, *args, **kwargs):
        value = original(op, *args, **kwargs)
        if op is target:
            value = value.copy()
            value.reshape(len(value), -1)[:, 1] = 1 << q.fracs[target.output]
        return value

    x = q.quantize_input(calibration[:1])
    if hidden:
        net, verify = HidingGraphNetwork(q, max_proofs=2), verify_graph_zk
        cheating = consistent_cheating()
    else:
        net, verify = GraphNetwork(q), verify_graph
        cheating = consistent_cheating("proofs.layers.contraction", "proofs.layers.graph", "proofs.layers.relu_batch",
                                       "proofs.lookup")
    assert verify(net.commitment, x, net.prove(x))  # control
    with mock.patch.object(GQ, "contract_int", lying), cheating:
        proof = net.prove(x)
    with pytest.raises(ProofRejected):
        verify(net.commitment, x, proof)


@settings(max_examples=25, deadline=None)
@given(rows=st.integers(1, 3), n=st.integers(1, 6), seed=st.integers(0, 2**16))
def test_the_fill_kernel_gives_the_max_over_kept_entries(rows, n, seed):
    """row_fill against its naive twin: every filled entry is a kept entry of its row, kept entries unchanged, so
    max over the filled row = max over the kept entries; row_keep is the mask."""
    rng = np.random.default_rng(seed)
    keep = rng.integers(0, 2, size=(rows, n))
    keep[np.arange(rows), rng.integers(0, n, rows)] = 1
    x = rng.integers(-50, 50, size=(2, rows, n))
    text = mask_text(keep)
    filled = np.einsum(row_equation("row_fill", 2), x, mask_kernel("row_fill", text, (rows, n)))
    assert np.array_equal(filled.max(axis=-1), np.where(keep > 0, x, -10**9).max(axis=-1))
    assert np.array_equal(np.where(keep > 0, filled, 0), np.where(keep > 0, x, 0))
    assert np.array_equal(mask_kernel("row_keep", text, (rows, n)), keep)


def test_a_structure_with_a_bad_mask_is_refused(masked):
    _, _, q, _ = masked
    index = next(i for i, op in enumerate(q.ops) if op.constant == "row_keep")
    public = q.public()
    assert QuantizedGraph.from_public(public).ops[index].mask == q.ops[index].mask  # round trip
    for bad in ("1" * (N * N - 1), "1" * N * N, "2" + q.ops[index].mask[1:], "0" * N + q.ops[index].mask[N:]):
        changed = dict(public, ops=[dict(op, mask=bad) if i == index else op for i, op in enumerate(public["ops"])])
        if bad == "1" * N * N:  # a well-formed mask other than the model's: the prover's kernel differs
            ops = list(q.ops)
            ops[index] = dataclasses.replace(ops[index], mask=bad)
            with pytest.raises(ProofRejected, match="kernel differs"):
                dataclasses.replace(q, ops=tuple(ops)).validate()
            continue
        with pytest.raises(ProofRejected, match="mask"):
            QuantizedGraph.from_public(changed)
    ops = list(q.ops)
    ops[0] = dataclasses.replace(ops[0], mask="1")  # a committed contraction has no mask
    with pytest.raises((ProofRejected, ModelError)):
        dataclasses.replace(q, ops=tuple(ops)).validate()
