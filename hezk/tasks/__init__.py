"""Independent tasks on a dask.distributed cluster, or in this process when there is none (bottom package: imports
nothing of hezk; ``distributed`` only when a cluster is asked for, so it stays an optional extra).

    with connect("local:2") as runner:                  # or "tcp://HOST:PORT", a distributed.Client, None
        keys = runner.share(public_material)             # sent to each worker once, held there across tasks
        results = runner.map(task, items, keys, progress=callback)   # task(item, public_material) per item

``map`` returns the results in input order, each exactly once: Dask reruns the tasks of a worker that dies on
another worker, and the futures of ``as_completed`` each report once. Each engine binds ``error`` to its own
error type (as :mod:`hezk.progress` does). Without ``distributed`` installed, ``connect`` of a cluster spec
warns and runs the same tasks in this process.
"""
from __future__ import annotations

import importlib
import itertools
import os
import time
import warnings

__all__ = ["connect", "Runner", "parse_spec", "distributed_available", "worker_threads"]

_names = itertools.count()


def _distributed():
    """The ``distributed`` module, or None when it is not installed."""
    try:
        return importlib.import_module("distributed")
    except ImportError:
        return None


def distributed_available() -> bool:
    return _distributed() is not None


def parse_spec(spec, error=ValueError):
    """("local", K) for "local:K", ("address", spec) for "tcp://HOST:PORT" (or tls://, inproc://), ("none", None)
    for None / "" / "none"; anything else raises ``error`` naming the option and the accepted forms."""
    if spec is None or spec in ("", "none"):
        return "none", None
    if isinstance(spec, str) and spec.startswith("local:"):
        count = spec[len("local:"):]
        if not count.isdigit() or not 1 <= int(count) <= 256:
            raise error(f"--dask {spec!r}: local:K needs a worker count K in [1, 256]")
        return "local", int(count)
    if isinstance(spec, str) and spec.split("://", 1)[0] in ("tcp", "tls", "inproc", "ucx") and "://" in spec:
        return "address", spec
    raise error(f"--dask {spec!r} must be local:K (K local workers, one thread each) or a scheduler address "
                "tcp://HOST:PORT")


def worker_threads(workers: int) -> int:
    """Kernel threads of each of ``workers`` local worker processes (their ``HEZK_THREADS``, see hezk.threads): the
    cores of this process (or this process's ``HEZK_THREADS``) shared out, at least one, so that K workers never
    run more threads than there are cores."""
    try:
        total = int(os.environ.get("HEZK_THREADS", "").strip() or 0)
    except ValueError:
        total = 0
    if total < 1:
        try:
            total = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            total = os.cpu_count() or 1
    return max(1, total // max(1, workers))


class Runner:
    """Runs tasks on a ``distributed.Client`` (``client``), or in this process when ``client`` is None.
    ``owned``: a cluster and client this runner started, closed by :meth:`close`."""

    def __init__(self, client=None, owned: tuple = (), error=ValueError):
        self.client, self._owned, self._error = client, owned, error

    @property
    def workers(self) -> int:
        """Workers the tasks run on (1 in process)."""
        if self.client is None:
            return 1
        return max(1, len(self.client.scheduler_info().get("workers", {})))

    def share(self, value):
        """``value`` sent once to every worker and held there across tasks (scattered with broadcast); in
        process, the value itself. Pass the result to :meth:`map` as an extra argument."""
        if self.client is None:
            return value
        return self.client.scatter(value, broadcast=True, hash=False)

    def map(self, function, items, *shared, progress=None, label: str = "tasks", retries: int = 0) -> list:
        """``[function(item, *shared) for item in items]``, one task per item, in input order;
        ``progress(done, total, label)`` after each finished task. A task that raises stops the run with its
        exception (the other tasks are cancelled). ``retries``: extra attempts of a task that raised (a task
        lost with its worker is rerun by Dask anyway)."""
        items = list(items)
        total = len(items)
        if self.client is None:
            results = []
            for done, item in enumerate(items, 1):
                results.append(function(item, *shared))
                if progress is not None:
                    progress(done, total, label)
            return results
        distributed = _distributed()
        run = f"hezk-{getattr(function, '__name__', 'task')}-{os.getpid()}-{next(_names)}-{time.time_ns()}"
        futures = [self.client.submit(function, item, *shared, key=f"{run}-{i}", pure=False, retries=retries)
                   for i, item in enumerate(items)]
        index = {future.key: i for i, future in enumerate(futures)}
        results, seen = [None] * total, set()
        try:
            for done, future in enumerate(distributed.as_completed(futures), 1):
                i = index[future.key]
                if i in seen:  # as_completed reports each future once; kept as a checked invariant
                    raise self._error(f"task {i} of {label} reported twice")
                seen.add(i)
                results[i] = future.result()
                if progress is not None:
                    progress(done, total, label)
        finally:
            self.client.cancel([f for f in futures if not f.done()])
        return results

    def close(self) -> None:
        for thing in reversed(self._owned):
            thing.close()
        self._owned = ()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def connect(dask=None, error=ValueError, *, memory_limit="auto", silence_logs: bool = True) -> Runner:
    """A :class:`Runner` for ``dask``: None (in process), a ``distributed.Client`` (used as given, not closed),
    "local:K" (a loopback cluster of K worker processes, one thread each, closed with the runner) or a scheduler
    address "tcp://HOST:PORT". A spec given without ``distributed`` installed warns and runs in process."""
    if dask is not None and not isinstance(dask, str):
        distributed = _distributed()
        if distributed is None or not isinstance(dask, distributed.Client):
            raise error(f"dask={type(dask).__name__} must be a distributed.Client, 'local:K', 'tcp://HOST:PORT' "
                        "or None")
        return Runner(dask, (), error)
    kind, value = parse_spec(dask, error)
    if kind == "none":
        return Runner(None, (), error)
    distributed = _distributed()
    if distributed is None:
        warnings.warn(f"--dask {dask}: dask.distributed is not installed (pip install 'hezk[distributed]'); "
                      "running the tasks in this process", RuntimeWarning, stacklevel=2)
        return Runner(None, (), error)
    if kind == "local":
        import logging

        import dask
        # no statistical profiler in the workers: it samples sys._current_frames() every 10 ms, and on CPython 3.11
        # a garbage collection inside that call can deadlock the process (seen: a test run hung in it)
        with dask.config.set({"distributed.worker.profile.enabled": False}):
            cluster = distributed.LocalCluster(n_workers=value, threads_per_worker=1, processes=True,
                                               dashboard_address=":0", memory_limit=memory_limit,
                                               silence_logs=logging.CRITICAL if silence_logs else logging.INFO,
                                               env={"HEZK_THREADS": str(worker_threads(value))})
        client = distributed.Client(cluster)
        return Runner(client, (cluster, client), error)
    client = distributed.Client(value)
    return Runner(client, (client,), error)
