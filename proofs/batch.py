"""Batch proving and verification as tasks on dask.distributed (or in this process without it).

    proofs = prove_batch(network, x, dask="local:2")            # one proof per input (per_proof=1)
    verdict = verify_batch(network.commitment, x, proofs, dask="local:2")   # .output: every group's, stacked

Proving: the inputs (along axis 0) are cut into groups of ``per_proof``; each group is one task proving
y = model(group). A hiding commitment's copies are handed out here, ahead of the tasks (task i uses copy c_i,
marked spent in ``network`` before any task runs, and, for a network read from a prover-state file, appended to
that file's journal under its lock first: :mod:`proofs.layers.prover_state`), so no copy serves two proofs even when Dask
reruns the task of a worker that died or another process proves from the same state file; each worker receives
the model and the SECRET prover state once, sent explicitly as
:meth:`~proofs.layers.network.Network.state_bytes` (a zero-knowledge Network refuses to pickle), and keeps its
prover across tasks. Verification: one task per proof, against the public commitment (sent once).
"""
from __future__ import annotations

import threading

import numpy as np

import hezk.tasks

from .errors import ModelError, ProofRejected
from .layers.network import Network, read_proof, verify_network
from .progress import as_progress
from .verdict import Verdict

#: the proof kind named by :func:`verify_batch`'s verdict and rejections
BATCH_KIND = "MLP inference batch"

__all__ = ["ProverShare", "connect", "prove_batch", "verify_batch", "verify_each", "input_groups"]


def connect(dask=None) -> hezk.tasks.Runner:
    """A task runner (:func:`hezk.tasks.connect`) whose errors are ``ModelError``."""
    return hezk.tasks.connect(dask, ModelError)


class ProverShare:
    """What each worker holds across proving tasks: the quantized model and the prover state of its hiding
    commitment (bytes, SECRET), from which the worker's Network is rebuilt on its first task and kept."""

    def __init__(self, model, state: bytes):
        self.model, self.state = model, bytes(state)
        self._network, self._lock = None, threading.Lock()

    def __reduce__(self):
        return ProverShare, (self.model, self.state)

    @property
    def network(self) -> Network:
        with self._lock:
            if self._network is None:
                self._network = Network(self.model, state=self.state)
            return self._network


def prove_task(job, share) -> bytes:
    """One task: the bytes of the proof of ``job = (inputs, copy)`` (copy None for a plain commitment)."""
    x, copy = job
    network = share.network if isinstance(share, ProverShare) else share
    return network.prove(x, copy=copy).to_bytes()


def verify_task(job, commitment, allow_conjectured: bool = False):
    """One task: (True, its Verdict) for a proof of ``job = (inputs, proof bytes)`` that verifies, else (False, the
    rejection's message)."""
    x, proof = job
    try:
        return True, verify_network(commitment, x, read_proof(proof), allow_conjectured=allow_conjectured)
    except ProofRejected as rejection:
        return False, str(rejection)


def input_groups(x, per_proof: int = 1) -> list[np.ndarray]:
    """The inputs (N, in_features) (or one input (in_features,)) cut into groups of ``per_proof`` rows; a list
    of arrays is taken as the groups themselves (each (batch, in_features) or (in_features,))."""
    if isinstance(x, (list, tuple)):
        groups = [np.asarray(g)[None] if np.ndim(g) == 1 else np.asarray(g) for g in x]
        if not groups or any(g.ndim != 2 or g.shape[0] < 1 for g in groups):
            raise ModelError("input groups must be a non-empty list of (batch, in_features) arrays")
        return groups
    x = np.asarray(x)
    if x.ndim == 1:
        x = x[None]
    if x.ndim != 2 or x.shape[0] < 1:
        raise ModelError(f"inputs of shape {x.shape} must be (N, in_features) with N >= 1")
    if isinstance(per_proof, bool) or not isinstance(per_proof, (int, np.integer)) or per_proof < 1:
        raise ModelError(f"per_proof={per_proof!r} must be a positive integer (inputs per proof)")
    return [x[i:i + int(per_proof)] for i in range(0, x.shape[0], int(per_proof))]


def prove_batch(network: Network, x, *, per_proof: int = 1, dask=None, progress=None) -> list:
    """Proofs of y = model(group) for the groups of :func:`input_groups`, one task each, in input order.
    ``dask``: None (this process), a ``distributed.Client``, "local:K" or "tcp://HOST:PORT"; ``progress``: True
    draws a bar over the tasks, a callable gets ``(done, total, label)``. A hiding commitment must have a copy
    left per proof (ProofError otherwise, before any work); the copies used are spent in ``network``."""
    if not isinstance(network, Network):
        raise ModelError(f"network must be a proofs Network, got {type(network).__name__}")
    groups = input_groups(x, per_proof)
    if network.zk:
        if network.proofs_left < len(groups):
            raise ModelError(f"{len(groups)} proofs need {len(groups)} unused copies of the hiding commitment, it has "
                             f"{network.proofs_left} left: commit again with a larger max_proofs")
        share = ProverShare(network.model, network.state_bytes())   # before the copies below are marked spent
        copies = network._weights_witness.reserve("prove_batch", len(groups))  # all at once, in the journal if on file
    else:
        share, copies = network, [None] * len(groups)
    with connect(dask) as runner:
        blobs = runner.map(prove_task, list(zip(groups, copies)), runner.share(share), label="proofs",
                           progress=as_progress(progress, "proving"))
    return [read_proof(blob) for blob in blobs]


def _proof_bytes(proof, index: int) -> bytes:
    """A proof's bytes (bytes-like or an object with ``to_bytes``); anything else is ProofRejected."""
    if isinstance(proof, (bytes, bytearray, memoryview)):
        return bytes(proof)
    if hasattr(proof, "to_bytes"):
        return proof.to_bytes()
    raise ProofRejected(f"proof {index}: a {type(proof).__name__} is neither bytes nor a proof",
                         f"{BATCH_KIND} proof")


def verify_each(commitment, x, proofs, *, per_proof: int = 1, dask=None, progress=None,
                allow_conjectured: bool = False) -> list[tuple[bool, object]]:
    """Per proof, in order: (True, its :class:`~proofs.verdict.Verdict`) or (False, the reason it was rejected): a
    report that never raises for a rejected proof (see :func:`verify_batch` for one verdict), one task per proof
    against the public commitment (sent to each worker once). ``proofs``: objects or bytes, one per group of
    :func:`input_groups`; a count that differs raises ProofRejected (no proof is checked)."""
    try:
        groups = input_groups(x, per_proof)
    except ModelError as error:
        raise ProofRejected(str(error), "input") from None
    proofs = [_proof_bytes(p, i) for i, p in enumerate(proofs)]
    if len(proofs) != len(groups):
        raise ProofRejected(f"{len(proofs)} proofs for {len(groups)} input groups", f"{BATCH_KIND} proof")
    with connect(dask) as runner:
        return runner.map(verify_task, list(zip(groups, proofs)), runner.share(commitment), bool(allow_conjectured),
                          label="proofs", progress=as_progress(progress, "verifying"))


def verify_batch(commitment, x, proofs, *, per_proof: int = 1, dask=None, progress=None,
                 allow_conjectured: bool = False) -> Verdict:
    """One :class:`~proofs.verdict.Verdict` for all ``proofs`` (objects or bytes) of the groups of
    :func:`input_groups`, one task per proof (:func:`verify_each`): ``output`` every group's proven output stacked
    in input order, ``parts`` each proof's verdict, ``soundness_bits`` the weakest proof's; ProofRejected
    ("MLP inference batch proof") naming every rejected proof (by index) and the first reason."""
    results = verify_each(commitment, x, proofs, per_proof=per_proof, dask=dask, progress=progress,
                          allow_conjectured=allow_conjectured)
    rejected = [i for i, (ok, _) in enumerate(results) if not ok]
    if rejected:
        raise ProofRejected(f"proofs {rejected} rejected; proof {rejected[0]}: {results[rejected[0]][1]}",
                            f"{BATCH_KIND} proof")
    parts = tuple(verdict for _, verdict in results)
    return Verdict(kind=BATCH_KIND, output=np.concatenate([part.output for part in parts]), parts=parts,
                   soundness_bits=min(part.soundness_bits for part in parts),
                   statistical_bits=min((part.statistical_bits for part in parts if part.statistical_bits is not None),
                                        default=None))
