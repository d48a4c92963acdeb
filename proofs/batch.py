"""Batch proving and verification as tasks on dask.distributed (or in this process without it), for every model.

    proofs = prove_batch(network, x, dask="local:2")            # one proof per input (per_proof=1)
    verdict = verify_batch(network.commitment, x, proofs, dask="local:2")   # .output: every group's, stacked

``network`` is any inference prover: the MLP strategy's :class:`~proofs.layers.network.Network`, or the graph
strategy's :class:`~proofs.layers.graph.GraphNetwork` / :class:`~proofs.layers.graph_zk.HidingGraphNetwork` (CNNs,
lookups, MaxPool, a ReLU MLP committed by the graph proof); verification goes through the one entry point
:func:`proofs.inference.verify`, which picks the strategy from the commitment.

Proving: the inputs (along axis 0) are cut into groups of ``per_proof``; each group is one task proving
y = model(group). A hiding commitment's copies are handed out here, ahead of the tasks (task i uses copy c_i,
marked spent in ``network`` before any task runs, and, for a network read from a prover-state file, appended to
that file's journal under its lock first: :mod:`proofs.layers.prover_state`), so no copy serves two proofs even when Dask
reruns the task of a worker that died or another process proves from the same state file; each worker receives
the model and the SECRET prover state once, sent explicitly as the prover's ``state_bytes()`` (a zero-knowledge
Network refuses to pickle), and keeps its prover across tasks. Verification: one task per proof, against the
public commitment (sent once).
"""
from __future__ import annotations

import threading

import numpy as np

import hezk.tasks

from . import inference
from .errors import ModelError, ProofRejected
from .layers.graph import GraphNetwork, GraphProof
from .layers.graph_zk import HidingGraphNetwork, HidingGraphProof
from .layers.network import Network, read_proof
from .progress import as_progress
from .verdict import Verdict

#: the proof kind named by :func:`verify_batch`'s verdict and rejections (an MLP commitment's batch keeps its name)
BATCH_KIND = "MLP inference batch"
GRAPH_BATCH_KIND = "graph inference batch"
#: the provers :func:`prove_batch` takes
PROVERS = (Network, GraphNetwork, HidingGraphNetwork)

__all__ = ["ProverShare", "connect", "prove_batch", "verify_batch", "verify_each", "input_groups"]


def connect(dask=None) -> hezk.tasks.Runner:
    """A task runner (:func:`hezk.tasks.connect`) whose errors are ``ModelError``."""
    return hezk.tasks.connect(dask, ModelError)


class ProverShare:
    """What each worker holds across proving tasks: the quantized model and the prover state of its hiding
    commitment (bytes, SECRET), from which the worker's prover (``prover``: Network or HidingGraphNetwork) is
    rebuilt on its first task and kept."""

    def __init__(self, model, state: bytes, prover=Network):
        self.model, self.state, self.prover = model, bytes(state), prover
        self._network, self._lock = None, threading.Lock()

    def __reduce__(self):
        return ProverShare, (self.model, self.state, self.prover)

    @property
    def network(self):
        with self._lock:
            if self._network is None:
                self._network = self.prover(self.model, state=self.state)
            return self._network


def prove_task(job, share, private_input: bool = False) -> bytes:
    """One task: the bytes of the proof of ``job = (inputs, copy)`` (copy None for a plain commitment)."""
    x, copy = job
    network = share.network if isinstance(share, ProverShare) else share
    if copy is None:
        return network.prove(x).to_bytes()
    hidden = {"private_input": True} if private_input else {}
    return network.prove(x, copy=copy, **hidden).to_bytes()


def verify_task(job, commitment, allow_conjectured: bool = False):
    """One task: (True, its Verdict) for a proof of ``job = (inputs, proof bytes)`` that verifies, else (False, the
    rejection's message)."""
    x, proof = job
    try:
        return True, inference.verify(commitment, x, proof, allow_conjectured=allow_conjectured)
    except ProofRejected as rejection:
        return False, str(rejection)


def input_groups(x, per_proof: int = 1, sample_ndim: int = 1) -> list[np.ndarray]:
    """The inputs (N, *sample) (or one input, of ``sample_ndim`` dimensions: (in_features,) for an MLP) cut into
    groups of ``per_proof`` samples; a list of arrays is taken as the groups themselves (each a batch or one
    sample)."""
    if isinstance(x, (list, tuple)):
        groups = [np.asarray(g)[None] if np.ndim(g) == sample_ndim else np.asarray(g) for g in x]
        if not groups or any(g.ndim != sample_ndim + 1 or g.shape[0] < 1 for g in groups):
            raise ModelError(f"input groups must be a non-empty list of (batch, *sample) arrays, each sample of "
                             f"{sample_ndim} dimensions")
        return groups
    x = np.asarray(x)
    if x.ndim == sample_ndim:
        x = x[None]
    if x.ndim != sample_ndim + 1 or x.shape[0] < 1:
        what = "(N, in_features)" if sample_ndim == 1 else f"(N, *sample) with samples of {sample_ndim} dimensions"
        raise ModelError(f"inputs of shape {x.shape} must be {what} with N >= 1")
    if isinstance(per_proof, bool) or not isinstance(per_proof, (int, np.integer)) or per_proof < 1:
        raise ModelError(f"per_proof={per_proof!r} must be a positive integer (inputs per proof)")
    return [x[i:i + int(per_proof)] for i in range(0, x.shape[0], int(per_proof))]


def _prover_parts(network):
    """(whether it is hiding, its model, its sample rank) of an inference prover."""
    if isinstance(network, Network):
        return network.zk, network.model, 1
    return isinstance(network, HidingGraphNetwork), network.qgraph, len(network.qgraph.input_shape)


def prove_batch(network, x, *, per_proof: int = 1, dask=None, progress=None, private_input: bool = False) -> list:
    """Proofs of y = model(group) for the groups of :func:`input_groups`, one task each, in input order.
    ``network``: one of :data:`PROVERS`. ``dask``: None (this process), a ``distributed.Client``, "local:K" or
    "tcp://HOST:PORT"; ``progress``: True draws a bar over the tasks, a callable gets ``(done, total, label)``. A
    hiding commitment must have a copy left per proof (ModelError otherwise, before any work); the copies used are
    spent in ``network`` (and in its state file's journal). ``private_input``: every proof hides its inputs (a
    HidingGraphNetwork only)."""
    if not isinstance(network, PROVERS):
        raise ModelError(f"network must be a proofs Network, GraphNetwork or HidingGraphNetwork, got "
                         f"{type(network).__name__}")
    hiding, model, ndim = _prover_parts(network)
    if private_input and not isinstance(network, HidingGraphNetwork):
        raise ModelError("private_input=True: only a hiding graph commitment proves a private input (commit the "
                         "model with the graph proof, hiding)")
    groups = input_groups(x, per_proof, ndim)
    if not isinstance(network, Network):  # the input's shape and range, before any copy is reserved
        for i, group in enumerate(groups):
            try:
                model.quantize_input(group)
            except ModelError as error:
                raise ModelError(f"input group {i}: {error}") from None
    if hiding:
        if network.proofs_left < len(groups):
            raise ModelError(f"{len(groups)} proofs need {len(groups)} unused copies of the hiding commitment, it has "
                             f"{network.proofs_left} left: commit again with a larger max_proofs")
        share = ProverShare(model, network.state_bytes(), type(network))  # before the copies below are spent
        copies = network.reserve("prove_batch", len(groups))  # all at once, in the journal if on file
    else:
        share, copies = network, [None] * len(groups)
    with connect(dask) as runner:
        blobs = runner.map(prove_task, list(zip(groups, copies)), runner.share(share), bool(private_input),
                           label="proofs", progress=as_progress(progress, "proving"))
    return [_read_proof(blob, network) for blob in blobs]


def _read_proof(blob: bytes, network):
    """The proof object of ``blob``, of the prover's proof type."""
    if isinstance(network, Network):
        return read_proof(blob)
    return (HidingGraphProof if isinstance(network, HidingGraphNetwork) else GraphProof).from_bytes(blob)


def _proof_bytes(proof, index: int) -> bytes:
    """A proof's bytes (bytes-like or an object with ``to_bytes``); anything else is ProofRejected."""
    if isinstance(proof, (bytes, bytearray, memoryview)):
        return bytes(proof)
    if hasattr(proof, "to_bytes"):
        return proof.to_bytes()
    raise ProofRejected(f"proof {index}: a {type(proof).__name__} is neither bytes nor a proof",
                         f"{BATCH_KIND} proof")


def _batch_kind(commitment) -> str:
    return BATCH_KIND if isinstance(commitment, inference.ModelCommitment) else GRAPH_BATCH_KIND


def verify_each(commitment, x, proofs, *, per_proof: int = 1, dask=None, progress=None,
                allow_conjectured: bool = False) -> list[tuple[bool, object]]:
    """Per proof, in order: (True, its :class:`~proofs.verdict.Verdict`) or (False, the reason it was rejected): a
    report that never raises for a rejected proof (see :func:`verify_batch` for one verdict), one task per proof
    against the public commitment (any kind of :func:`proofs.inference.read_commitment`, parsed once, sent to each
    worker once). ``proofs``: objects or bytes, one per group of :func:`input_groups`; ``x`` None: proofs of
    private inputs (a hiding graph commitment), one per proof; a count that differs raises ProofRejected (no
    proof is checked)."""
    commitment = inference.read_commitment(commitment)
    try:
        groups = None if x is None else input_groups(x, per_proof, inference.sample_ndim(commitment))
    except ModelError as error:
        raise ProofRejected(str(error), "input") from None
    proofs = [_proof_bytes(p, i) for i, p in enumerate(proofs)]
    groups = [None] * len(proofs) if groups is None else groups
    if len(proofs) != len(groups) or not proofs:
        raise ProofRejected(f"{len(proofs)} proofs for {len(groups)} input groups", f"{_batch_kind(commitment)} proof")
    with connect(dask) as runner:
        return runner.map(verify_task, list(zip(groups, proofs)), runner.share(commitment), bool(allow_conjectured),
                          label="proofs", progress=as_progress(progress, "verifying"))


def verify_batch(commitment, x, proofs, *, per_proof: int = 1, dask=None, progress=None,
                 allow_conjectured: bool = False) -> Verdict:
    """One :class:`~proofs.verdict.Verdict` for all ``proofs`` (objects or bytes) of the groups of
    :func:`input_groups`, one task per proof (:func:`verify_each`): ``output`` every group's proven output stacked
    in input order, ``parts`` each proof's verdict, ``soundness_bits`` the weakest proof's; ProofRejected
    ("MLP inference batch proof", or "graph inference batch proof") naming every rejected proof (by index) and the
    first reason."""
    commitment = inference.read_commitment(commitment)
    kind = _batch_kind(commitment)
    results = verify_each(commitment, x, proofs, per_proof=per_proof, dask=dask, progress=progress,
                          allow_conjectured=allow_conjectured)
    rejected = [i for i, (ok, _) in enumerate(results) if not ok]
    if rejected:
        raise ProofRejected(f"proofs {rejected} rejected; proof {rejected[0]}: {results[rejected[0]][1]}",
                            f"{kind} proof")
    parts = tuple(verdict for _, verdict in results)
    return Verdict(kind=kind, output=np.concatenate([part.output for part in parts]), parts=parts,
                   soundness_bits=min(part.soundness_bits for part in parts),
                   statistical_bits=min((part.statistical_bits for part in parts if part.statistical_bits is not None),
                                        default=None))
