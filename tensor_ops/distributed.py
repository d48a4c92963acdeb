"""Batch encrypted inference as tasks on dask.distributed (or in this process without it).

    client = Client(model=model)                                 # the secret key stays in this process
    y = batch_infer(model, client, x, dask="local:2")            # or a distributed.Client, "tcp://HOST:PORT", None

The N inputs are cut into batches of ``batch`` samples (default: the samples one ciphertext packs), each batch is
encrypted here into one request and evaluated by one task; the model and the client's public context (keys
included) go to every worker once (:meth:`hezk.tasks.Runner.share`) and a worker keeps its
:class:`~tensor_ops.inference.Server` (its encoded weights) across tasks; the replies come back in input order and
are decrypted here. The tasks are those of a single process run (``dask=None``), so the decrypted values are the
same whichever worker, or how many, ran them.
"""
from __future__ import annotations

import threading

import numpy as np

import hezk.tasks
from crypto.errors import ParameterError
from tensor_ops.inference import Client, Server
from tensor_ops.model_plan import DEFAULT_KEY_BUDGET, batch_of
from tensor_ops.progress import as_progress

__all__ = ["ServerShare", "batch_infer", "batch_requests", "connect", "evaluate_batches", "evaluate_request"]


def connect(dask=None) -> hezk.tasks.Runner:
    """A task runner (:func:`hezk.tasks.connect`) whose errors are ``ParameterError``."""
    return hezk.tasks.connect(dask, ParameterError)


class ServerShare:
    """What each worker holds across tasks: the model and a public context (never a secret key); the
    :class:`Server` is built on a worker's first task and kept (its encoded weights with it). Pickles as the model
    and the public context's bytes."""

    def __init__(self, model, public_context, input_shape=None, key_budget=DEFAULT_KEY_BUDGET):
        self.model, self.public_context, self.input_shape = model, public_context, input_shape
        self.key_budget = key_budget
        self._server, self._lock = None, threading.Lock()

    def __reduce__(self):
        return ServerShare, (self.model, self.public_context, self.input_shape, self.key_budget)

    @property
    def server(self) -> Server:
        with self._lock:
            if self._server is None:
                self._server = Server(self.model, self.public_context, input_shape=self.input_shape,
                                      key_budget=self.key_budget)
            return self._server


def evaluate_request(request: bytes, share: ServerShare) -> bytes:
    """One task: a request's reply, by the worker's server."""
    return share.server.evaluate(request)


def batch_requests(client: Client, x, batch: int | None = None) -> list[bytes]:
    """x (samples along axis 0) encrypted as requests of ``batch`` samples each (default: the samples one
    ciphertext packs)."""
    if client.plan is None:
        raise ParameterError("batch inference needs a client made for the model's plan (Client(model=...) or "
                             "Client(plan=...))")
    samples, _ = batch_of(x, client.plan.input_shape)
    batch = client.plan.batch if batch is None else batch
    if isinstance(batch, bool) or not isinstance(batch, (int, np.integer)) or batch < 1:
        raise ParameterError(f"batch={batch!r} must be a positive integer (samples per task)")
    return [client.encrypt(samples[i:i + batch]) for i in range(0, len(samples), int(batch))]


def evaluate_batches(model, public_context, requests, *, input_shape=None, dask=None, progress=None,
                     key_budget=DEFAULT_KEY_BUDGET) -> list[bytes]:
    """The server half: each request (bytes of :meth:`Client.encrypt`) evaluated by one task, the replies in
    request order. ``public_context``: its bytes or a public CKKSContext, sent to each worker once with the
    model. Evaluation is deterministic: the replies are the bytes a single process (``dask=None``) makes.
    ``key_budget``: the one the client planned with."""
    share = ServerShare(model, public_context, input_shape, key_budget)
    with connect(dask) as runner:
        return runner.map(evaluate_request, list(requests), runner.share(share), label="batches",
                          progress=as_progress(progress, "encrypted inference"))


def batch_infer(model, client: Client, x, *, batch: int | None = None, dask=None, progress=None) -> np.ndarray:
    """The decrypted outputs (samples, *output_shape) of ``model`` on the samples of ``x``, one task per batch of
    ``batch`` samples (:func:`batch_requests`, :func:`evaluate_batches`). ``dask``: None (this process), a
    ``distributed.Client``, "local:K" or "tcp://HOST:PORT". ``progress``: True draws a bar over the tasks, a
    callable gets ``(done, total, label)``."""
    if not isinstance(client, Client):
        raise ParameterError(f"client must be a tensor_ops Client (it holds the secret key), got "
                             f"{type(client).__name__}")
    requests = batch_requests(client, x, batch)
    replies = evaluate_batches(model, client.public_context(), requests, input_shape=client.plan.input_shape,
                               dask=dask, progress=progress)
    return np.concatenate([client.decrypt(reply) for reply in replies], axis=0)
