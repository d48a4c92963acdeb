"""One entry point for proofs of inference: the commitment's record kind picks the strategy.

Two strategies prove y = model(x) (``docs/architecture.md``, "Proofs of inference"):

- the **graph proof** (:mod:`proofs.layers.graph`, :mod:`proofs.layers.graph_zk`): every model the quantizer
  reads (convolutions, pools, lookups, residual adds, a ReLU MLP too), plain or hiding, the input stated or
  private;
- the **MLP proof** (:mod:`proofs.layers.network`): a ReLU MLP quantized at a worst-case error bound
  (``proofs.model``), kept as a strategy because it is clearly better where ``commit --scheme auto`` sends small
  MLPs, and never worse. Measured (one CPU core, median of 3, batch 1; proof bytes / prove s / verify s, MLP
  against graph): 30-16-1 hiding Basefold 117 kB / 0.11 / 0.046 against 316 kB / 0.77 / 0.049 (2.7x the bytes,
  7x the prover), hiding Ligero 274 kB / 0.18 / 0.10 against 273 kB / 0.18 / 0.065, plain Ligero 35 kB / 0.021 /
  0.015 against 26 kB / 0.045 / 0.026; 784-128-10 hiding Ligero 498 kB / 0.22 / 0.16 against 518 kB / 0.40 /
  0.24, hiding Basefold 7.45 MB / 7.4 / 0.39 against 7.49 MB / 7.4 / 0.37, plain Ligero 295 kB / 0.16 / 0.039
  against 198 kB / 0.30 / 0.047. Existing MLP commitments keep verifying through it.

:func:`read_commitment` parses either kind of commitment (its validator runs at parse time: rule 4),
:func:`verify` checks one proof against it after :func:`check_statement`, the statement checks both strategies
share: the stated input within the committed input bound (:func:`statement_input` for an MLP, the structure's
input scale and bound for a graph) and the claimed output within the committed output range
(:func:`output_range`), compared as Python integers (``docs/architecture.md`` rule 5) before any proof bytes are
replayed (each strategy's verifier checks them again for its direct callers). :func:`sample_ndim` is the rank of
one input. Verifiers raise only :class:`~proofs.errors.ProofRejected`.
"""
from __future__ import annotations

import os

import numpy as np

from .errors import ModelError, ProofRejected
from .layers import graph, graph_zk, network
from .graph_quantize import quantize_graph
from .layers.graph import GraphCommitment, GraphNetwork, GraphProof, verify_graph
from .layers.graph_zk import HidingGraphCommitment, HidingGraphNetwork, HidingGraphProof, verify_graph_zk
from .layers.network import ModelCommitment, read_proof, verify_network
from .proof_format import from_record, record_kind
from .public_values import require_bounded, require_within
from .quantize import quantize_values
from .verdict import Verdict, rejecting

__all__ = ["COMMITMENT_KINDS", "GRAPH_KINDS", "check_statement", "graph_prover", "is_graph_commitment",
           "output_range", "read_commitment", "read_inference_proof", "sample_ndim", "statement_input", "verify"]

#: the record kinds of the graph strategy's commitments
GRAPH_KINDS = (GraphCommitment.KIND, HidingGraphCommitment.KIND)
#: every commitment kind :func:`read_commitment` reads
COMMITMENT_KINDS = (ModelCommitment.KIND, *GRAPH_KINDS)
#: per commitment type: the proof kind its rejections name, its strategy's verifier
STRATEGIES = {ModelCommitment: (network.KIND, verify_network), GraphCommitment: (graph.KIND, verify_graph),
              HidingGraphCommitment: (graph_zk.KIND, verify_graph_zk)}


def is_graph_commitment(data: bytes) -> bool:
    """Whether ``data`` is the record of a graph commitment (plain or hiding)."""
    return record_kind(data) in GRAPH_KINDS


def read_commitment(data):
    """The commitment of ``data`` (bytes; a parsed commitment is returned as it is): a :class:`ModelCommitment`
    (the MLP strategy), a :class:`GraphCommitment` or a :class:`HidingGraphCommitment`; ProofRejected naming
    every accepted kind otherwise."""
    if isinstance(data, (ModelCommitment, GraphCommitment, HidingGraphCommitment)):
        return data
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise ProofRejected(f"commitment must be bytes, got {type(data).__name__}", "commitment")
    data = bytes(data)
    kind = record_kind(data)
    if kind == HidingGraphCommitment.KIND:
        return HidingGraphCommitment.from_bytes(data)
    if kind == GraphCommitment.KIND:
        return GraphCommitment.from_bytes(data)
    if kind is not None and kind != ModelCommitment.KIND:
        from_record(data, COMMITMENT_KINDS, "commitment")  # raises, naming the kinds it accepts
    return ModelCommitment.from_bytes(data)


def graph_prover(graph, commitment, state=None, *, names=("the commitment", "the model")):
    """The graph strategy's prover of a published ``commitment`` (bytes or parsed) for ``graph`` (a
    :class:`hezk.model.Graph` of the same weights), re-quantized with the committed scales: a GraphNetwork, or a
    HidingGraphNetwork read from ``state`` (the SECRET prover state its commit wrote; each proof reserves its copy
    there). ``names``: how errors call the commitment and the model. ModelError for another kind of commitment,
    a missing state or other weights."""
    try:
        committed = read_commitment(commitment)
    except ProofRejected as error:
        raise ModelError(f"{names[0]} is not a graph commitment: {error}") from None
    if isinstance(committed, ModelCommitment):
        raise ModelError(f"{names[0]} is an MLP commitment, not a graph commitment")
    if graph.digest() != committed.structure.digest:
        raise ModelError(f"{names[0]} was made for another model than {names[1]} (their graphs' digests differ): "
                         f"prove with the model file it was committed from")
    q = quantize_graph(graph, like=committed.structure)
    if committed.zk:
        if state is None or (not isinstance(state, (bytes, bytearray, memoryview)) and not os.path.isfile(state)):
            raise ModelError(f"no prover state {state!r}: a hiding commitment is proven with the prover state its "
                             f"commit wrote (beside it, or where --state / save_state named it)")
        network = HidingGraphNetwork(q, state=state)
    else:
        network = GraphNetwork(q, committed.weights.params)
    if network.commitment.to_bytes() != committed.to_bytes():
        raise ModelError(f"{names[0]} was made for other weights than {names[1]}")
    return network


def sample_ndim(commitment) -> int:
    """The rank of one input sample of ``commitment`` (1 for an MLP; the graph's input rank otherwise)."""
    if isinstance(commitment, ModelCommitment):
        return 1
    return len(commitment.structure.input_shape)


def statement_input(values, input_frac: int, input_bound: int, where: str) -> np.ndarray:
    """``values`` (integers, or floats quantized at 2^input_frac) as int64 within the committed input_bound;
    ProofRejected naming input_bound otherwise (the one check of public integers, compared as Python ints: no
    uint64 or -2^63 wraps; a float beyond the field is outside it too)."""
    values = np.asarray(values)
    if values.dtype.kind == "f":
        try:
            values = quantize_values(values, input_frac)
        except ModelError as error:
            raise ProofRejected(f"{error}, outside input_bound={input_bound}", where) from None
    return require_bounded(values, input_bound, f"input (input_bound={input_bound})", where).astype(np.int64)


def output_range(commitment) -> tuple[int, int]:
    """[low, high] of every entry of a proven output under ``commitment``: the MLP's last layer's range, or the
    graph structure's bound of its output tensor."""
    if isinstance(commitment, ModelCommitment):
        return commitment.layers[-1].output_range()
    q = commitment.structure
    return -int(q.bounds[q.output]), int(q.bounds[q.output])


def read_inference_proof(commitment, proof):
    """The proof object of ``proof`` (bytes; a parsed proof is returned as it is) for ``commitment``'s strategy;
    ProofRejected if malformed."""
    if not isinstance(proof, (bytes, bytearray, memoryview)):
        return proof
    if isinstance(commitment, ModelCommitment):
        return read_proof(bytes(proof))
    return (HidingGraphProof if isinstance(commitment, HidingGraphCommitment) else GraphProof).from_bytes(bytes(proof))


def check_statement(commitment, x, output, where: str = "statement"):
    """The statement checks of every strategy: ``x`` (None: a private input) within the committed input bound
    at its scale, and every entry of the claimed ``output`` within :func:`output_range`; returns x as int64
    (None for a private input). ProofRejected naming the bound otherwise."""
    commitment = read_commitment(commitment)
    require_within(output, *output_range(commitment), "claimed output", where)
    if x is None:
        return None
    if isinstance(commitment, ModelCommitment):
        return statement_input(x, commitment.input_frac, commitment.input_bound, "input")
    q = commitment.structure
    try:
        x_int = q.quantize_input(x)
    except ModelError as error:
        raise ProofRejected(str(error), "input") from None
    return require_bounded(x_int, q.input_bound, "input", "input").astype(np.int64)


def verify(commitment, x, proof, *, allow_conjectured: bool = False) -> Verdict:
    """Check ``proof`` (bytes or a parsed proof) that y = model(x) under ``commitment`` (bytes or parsed, any
    kind of :func:`read_commitment`); ``x`` None for a proof of a private input (hiding graph commitments only).
    :func:`check_statement` first, then the strategy's verifier. Returns its :class:`~proofs.verdict.Verdict`
    (``output``: the proven integers); raises only ProofRejected."""
    commitment = read_commitment(commitment)
    kind, check = STRATEGIES[type(commitment)]
    with rejecting(kind):
        if x is None and not isinstance(commitment, HidingGraphCommitment):
            what = "an MLP commitment" if isinstance(commitment, ModelCommitment) else "a public-weights proof"
            raise ProofRejected(f"a private input (no x): {what} states its input; only a hiding graph commitment's "
                                f"proofs hide it (hezk commit --private-input)", "statement")
        proof = read_inference_proof(commitment, proof)
        output = getattr(proof, "output", None)
        if not isinstance(output, np.ndarray):
            raise ProofRejected(f"proof is a {type(proof).__name__}, not an inference proof", "statement")
        x = check_statement(commitment, x, output)
        if isinstance(commitment, ModelCommitment):
            return check(commitment, x, proof, allow_conjectured=allow_conjectured)
        return check(commitment, x, proof)
