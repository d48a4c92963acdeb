"""One entry point for proofs of inference: the commitment's record kind picks the strategy.

Two strategies prove y = model(x) (``docs/architecture.md``, "Proofs of inference"):

- the **graph proof** (:mod:`proofs.layers.graph`, :mod:`proofs.layers.graph_zk`): every model the quantizer
  reads (convolutions, pools, lookups, residual adds, a ReLU MLP too), plain or hiding, the input stated or
  private;
- the **MLP proof** (:mod:`proofs.layers.network`): a ReLU MLP quantized at a worst-case error bound
  (``proofs.model``), kept as a strategy because its hiding Basefold proofs of small MLPs are 2.7x smaller and
  prove 7x faster than the graph proof's (30-16-1: 117 against 316 kB, 0.11 against 0.77 s; measured, see the
  module's tests), and because existing MLP commitments must keep verifying.

:func:`read_commitment` parses either kind of commitment (its validator runs at parse time: rule 4),
:func:`verify` checks one proof against it, :func:`statement_input` is the one check of a stated input (floats
quantized at the committed scale, integers within the committed input bound, compared as Python integers: rule 5),
:func:`sample_ndim` the rank of one input. Every path range-checks the claimed output against the committed
output range with :func:`proofs.public_values.require_bounded` / ``require_within`` before any transcript is
replayed. Verifiers raise only :class:`~proofs.errors.ProofRejected`.
"""
from __future__ import annotations

import numpy as np

from .errors import ModelError, ProofRejected
from .layers.graph import GraphCommitment, verify_graph
from .layers.graph_zk import HidingGraphCommitment, verify_graph_zk
from .layers.network import ModelCommitment, read_proof, verify_network
from .proof_format import from_record, record_kind
from .public_values import require_bounded
from .quantize import quantize_values
from .verdict import Verdict

__all__ = ["COMMITMENT_KINDS", "GRAPH_KINDS", "read_commitment", "sample_ndim", "statement_input", "verify",
           "is_graph_commitment"]

#: the record kinds of the graph strategy's commitments
GRAPH_KINDS = (GraphCommitment.KIND, HidingGraphCommitment.KIND)
#: every commitment kind :func:`read_commitment` reads
COMMITMENT_KINDS = (ModelCommitment.KIND, *GRAPH_KINDS)


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


def verify(commitment, x, proof, *, allow_conjectured: bool = False) -> Verdict:
    """Check ``proof`` (bytes or a parsed proof) that y = model(x) under ``commitment`` (bytes or parsed, any
    kind of :func:`read_commitment`); ``x`` None for a proof of a private input (hiding graph commitments only).
    Returns the strategy's :class:`~proofs.verdict.Verdict` (``output``: the proven integers); raises only
    ProofRejected."""
    commitment = read_commitment(commitment)
    if isinstance(commitment, ModelCommitment):
        if x is None:
            raise ProofRejected("a private input (no x): an MLP commitment's proofs state their input; commit the "
                                "model with the graph proof (hezk commit --private-input) to hide it", "statement")
        x = statement_input(x, commitment.input_frac, commitment.input_bound, "input")
        if isinstance(proof, (bytes, bytearray, memoryview)):
            proof = read_proof(bytes(proof))
        return verify_network(commitment, x, proof, allow_conjectured=allow_conjectured)
    if isinstance(commitment, HidingGraphCommitment):
        return verify_graph_zk(commitment, x, proof)
    if x is None:
        raise ProofRejected("a private input (no x): a public-weights graph proof states its input", "statement")
    return verify_graph(commitment, x, proof)
