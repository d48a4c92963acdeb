"""One process-wide thread setting for the compiled kernels of both engines (bottom module: imports nothing of hezk).

    hezk.set_threads(2)        # or HEZK_THREADS=2 in the environment, read at first use
    hezk.get_threads()         # default: the cores this process may run on (its CPU affinity)

The kernels release the GIL (numba ``nogil``) and are split into contiguous chunks of independent work
(limbs, rows, element ranges, coefficient tiles, Merkle leaves, encoded columns, sumcheck pairs) run by one
shared pool: each chunk owns disjoint outputs, and a reduction is an exact integer sum combined in chunk order,
so results are bit for bit those of one thread, whatever the setting. Coarser independent work is split the same
way where the kernels are too small to split (the hoisted rotations of ``Evaluator.rotate_hoisted``, the giant
steps of ``crypto.ckks.linear.bsgs_sum``). Work smaller than ``min_work`` runs in the calling thread, and a
chunk no pool thread has started when the caller is done with its own is run by the caller.

A chunk's own nested call runs in its own thread, except while a caller sits idle, waiting for chunks that other
threads still run: then the nested call is split over the running thread and the idle callers, which take its
pieces from a help queue (``_HelpTask``; a coarse split's tail, e.g. 7 hoisted rotations cut 3 + 4, no longer
leaves a thread waiting for one rotation: the last rotation's kernels are shared).  No pool task ever waits on the
pool: a nested call takes back the pieces nobody has started and waits only for pieces being run, and a helper
only runs pieces (never waits in them on the queue), so callers from many threads cannot deadlock.

No oversubscription: a Dask ``local:K`` cluster (``hezk.tasks``) starts its workers with ``HEZK_THREADS`` =
cores / K; set ``HEZK_THREADS`` on the machines of a remote cluster the same way. BLAS threads are not used
by these kernels.
"""
from __future__ import annotations

import os
import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor

__all__ = ["set_threads", "get_threads", "available_cores", "using", "chunks", "run_chunks", "ThreadSettingError",
           "parallel", "CriticalPath", "ENV", "MAX_THREADS", "PIECES_PER_THREAD"]

ENV = "HEZK_THREADS"
MAX_THREADS = 1024
#: pieces per thread of a split call (the pool's threads take them from the front and the caller, once done with its
#: first, takes the ones not started from the back); 1: 2 a thread measured no faster on 2 loaded cores (load 3-4),
#: for more hand-offs
PIECES_PER_THREAD = 1


class ThreadSettingError(ValueError):
    """A thread count that is not an integer in [1, MAX_THREADS] (from ``set_threads`` or ``HEZK_THREADS``)."""


_lock = threading.Lock()
_threads: int | None = None          # None: not read yet (HEZK_THREADS or the cores, at first use)
_pool: ThreadPoolExecutor | None = None
_pool_size = 0
_local = threading.local()           # .inside: this thread is running a chunk (nested calls run inline)
_help = threading.Condition()        # guards _tasks and _idle; notified when a help task or a pool piece ends
_tasks: deque = deque()              # pieces of nested calls, for idle callers to take (``_HelpTask``)
_idle = 0                            # callers now waiting for pieces run elsewhere (they take help tasks)
_model = None                        # the CriticalPath being measured, if any (its thread's split calls run serially)


def available_cores() -> int:
    """The cores this process may run on (its CPU affinity where the OS reports one, else ``os.cpu_count()``)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def _checked(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_THREADS:
        raise ThreadSettingError(f"{name}={value!r} must be an integer in [1, {MAX_THREADS}]")
    return value


def _from_environment() -> int:
    text = os.environ.get(ENV, "").strip()
    if not text:
        return available_cores()
    try:
        value = int(text)
    except ValueError:
        raise ThreadSettingError(f"{ENV}={text!r} must be an integer in [1, {MAX_THREADS}]") from None
    return _checked(value, ENV)


def set_threads(n: int) -> None:
    """Threads the compiled kernels use from now on, process-wide (1: everything in the calling thread)."""
    global _threads
    n = _checked(n, "threads")
    with _lock:
        _threads = n


def get_threads() -> int:
    """The current setting: ``set_threads``'s, else ``HEZK_THREADS``, else ``available_cores()``."""
    global _threads
    if _threads is None:
        with _lock:
            if _threads is None:
                _threads = _from_environment()
    return _threads


class using:
    """``with hezk.threads.using(n):`` the setting is n inside the block and restored after (process-wide)."""

    def __init__(self, n: int):
        self.n = _checked(n, "threads")

    def __enter__(self):
        self._before = get_threads()
        set_threads(self.n)
        return self

    def __exit__(self, *exc):
        set_threads(self._before)


def chunks(count: int, min_work: int = 1, work_per_item: int = 1, align: int = 1) -> list[tuple[int, int]]:
    """range(count) as contiguous (start, stop) pieces, ``PIECES_PER_THREAD`` per thread at most, none of less than
    ``min_work`` units of work (``work_per_item`` units per item), every boundary a multiple of ``align``;
    [(0, count)] when one thread is set, the work is small, or the caller is itself a chunk and no other caller
    sits idle (with k idle, a chunk's call is cut for at most 1 + k threads: see the module docstring)."""
    threads = get_threads()
    if getattr(_local, "inside", False):
        threads = min(threads, 1 + _idle)        # a hint read without the lock: any split gives the same bits
    if count <= 0:
        return [(0, max(count, 0))]
    most = threads * PIECES_PER_THREAD if threads > 1 else 1
    pieces = min(most, max(1, (count * work_per_item) // max(1, min_work)), -(-count // align))
    if pieces <= 1:
        return [(0, count)]
    units = -(-count // align)               # aligned blocks, shared out as evenly as possible
    bounds = [min(count, (units * i // pieces) * align) for i in range(pieces + 1)]
    return [(a, b) for a, b in zip(bounds, bounds[1:]) if b > a]


def _executor(workers: int) -> ThreadPoolExecutor:
    global _pool, _pool_size
    with _lock:
        if _pool is None or _pool_size < workers:
            old, _pool, _pool_size = _pool, ThreadPoolExecutor(workers, thread_name_prefix="hezk"), workers
            if old is not None:
                old.shutdown(wait=False)
        return _pool


def _inside(function, start, stop):
    before = getattr(_local, "inside", False)
    _local.inside = True
    try:
        return function(start, stop)
    finally:
        _local.inside = before


class _HelpTask:
    """One piece of a nested call, queued for an idle caller (``_help`` guards ``taken`` and ``done``)."""

    __slots__ = ("function", "start", "stop", "taken", "done", "result", "error")

    def __init__(self, function, start, stop):
        self.function, self.start, self.stop = function, start, stop
        self.taken = self.done = False
        self.result = self.error = None

    def run(self):
        try:
            self.result = _inside(self.function, self.start, self.stop)
        except BaseException as exc:   # noqa: BLE001 - re-raised by the nested call that queued it
            self.error = exc


def _notify(_future=None):
    with _help:
        _help.notify_all()


def _run_nested(function, pieces: list[tuple[int, int]]) -> list:
    """A chunk's nested call cut for idle callers: the first piece here, the others queued for them; those nobody
    has taken when this thread is done with its own are taken back (last first) and run here; then this thread
    waits for the pieces being run elsewhere (helpers run pieces to the end: they never wait on this one)."""
    tasks = [_HelpTask(function, a, b) for a, b in pieces[1:]]
    with _help:
        _tasks.extend(tasks)
        _help.notify_all()
    results, error = [None] * len(pieces), None
    try:
        results[0] = function(*pieces[0])
    except BaseException as exc:   # noqa: BLE001 - re-raised below once the other pieces are done
        error = exc
    for task in reversed(tasks):
        with _help:
            mine = not task.taken
            if mine:
                task.taken = True
                _tasks.remove(task)
        if mine:
            task.run()
            task.done = True
    with _help:
        while not all(task.done for task in tasks):
            _help.wait()
    for i, task in enumerate(tasks, 1):
        results[i] = task.result
        error = error or task.error
    if error is not None:
        raise error
    return results


def _wait_helping(futures) -> None:
    """Wait for ``futures`` (pieces on the pool), meanwhile running the help tasks nested calls queue."""
    global _idle
    for future in futures:
        future.add_done_callback(_notify)
    with _help:
        _idle += 1
        try:
            while not all(future.done() for future in futures):
                if _tasks:
                    task = _tasks.popleft()
                    task.taken = True
                    _help.release()
                    try:
                        task.run()
                    finally:
                        _help.acquire()
                    task.done = True
                    _help.notify_all()
                else:
                    _help.wait()
        finally:
            _idle -= 1


def _thread_system_time() -> float:
    """This thread's kernel CPU seconds (RUSAGE_THREAD, Linux), else 0."""
    try:
        import resource
        return resource.getrusage(resource.RUSAGE_THREAD).ru_stime
    except (ImportError, AttributeError, OSError):
        return 0.0


class CriticalPath:
    """What a block would take on ``threads`` threads, measured on one: the load-independent figure of a shared
    machine, where wall-clock ratios say more about the other processes than about the split.

        with hezk.threads.CriticalPath(2) as path:
            evaluator.bootstrap(ct)
        path.serial_fraction, path.predicted_speedup

    Inside the block the setting is ``threads`` and every split call of the calling thread runs its pieces one after
    the other in that thread (the same pieces, so the same results), each timed in thread CPU time: ``split`` is
    their sum, ``longest`` the sum over calls of the largest piece, ``serial`` the rest of the block's CPU time
    (Python, numpy, unsplit kernels: Amdahl's serial part).  ``predicted_time`` = serial + longest: the block on
    ``threads`` cores with nothing else running, if a piece ran as fast beside others as alone (memory bandwidth
    shared by the cores and the pool's hand-offs are not in it; nor is the help of idle callers, which only
    shortens the longest pieces).  ``system``: the block's kernel CPU time (page faults of fresh arrays, the
    returns of freed ones: time that two threads of one process may not halve; where the OS reports it per thread,
    else 0).  Blocks do not nest; other threads' calls run as usual."""

    def __init__(self, threads: int = 2):
        self.threads = _checked(threads, "threads")
        self.total = self.split = self.longest = self.system = 0.0
        self.calls = 0
        self._owner = None

    def __enter__(self):
        global _model
        with _lock:
            if _model is not None:
                raise RuntimeError("hezk.threads.CriticalPath blocks do not nest")
            _model = self
        self._owner = threading.get_ident()
        self._setting = using(self.threads)
        self._setting.__enter__()
        self._system = _thread_system_time()
        self._start = time.thread_time()
        return self

    def __exit__(self, *exc):
        global _model
        self.total = time.thread_time() - self._start
        self.system = _thread_system_time() - self._system
        self._setting.__exit__(*exc)
        with _lock:
            _model = None

    def _run(self, function, pieces) -> list:
        results, times = [], []
        for a, b in pieces:
            start = time.thread_time()
            results.append(_inside(function, a, b))
            times.append(time.thread_time() - start)
        self.calls += 1
        self.split += sum(times)
        self.longest += max(times)
        return results

    @property
    def serial(self) -> float:
        return self.total - self.split

    @property
    def serial_fraction(self) -> float:
        return self.serial / self.total if self.total > 0 else 0.0

    @property
    def system_fraction(self) -> float:
        return self.system / self.total if self.total > 0 else 0.0

    @property
    def predicted_time(self) -> float:
        return self.serial + self.longest

    @property
    def predicted_speedup(self) -> float:
        return self.total / self.predicted_time if self.predicted_time > 0 else 1.0

    @property
    def amdahl_speedup(self) -> float:
        """Amdahl's bound at ``threads`` from the serial fraction alone (split work shared out perfectly)."""
        f = self.serial_fraction
        return 1.0 / (f + (1.0 - f) / self.threads)


def run_chunks(function, pieces: list[tuple[int, int]]) -> list:
    """[function(start, stop) for each piece], the first in the calling thread and the others on the shared pool
    at once; results in piece order (a caller combines them in that order: the same as one thread's). The pieces
    that no pool thread has started by the time the caller is done with its first (uneven pieces, or every core
    busy with other work: a loaded machine, other processes) are taken back, last first, and run by the caller, so
    a split call does not wait for a thread to get a core. The first exception raised by a piece is raised here
    after every piece has finished."""
    if len(pieces) == 1:
        return [function(*pieces[0])]
    if getattr(_local, "inside", False):        # a chunk's own call, cut for idle callers (``chunks``)
        return _run_nested(function, pieces)
    model = _model
    if model is not None and model._owner == threading.get_ident():
        return model._run(function, pieces)
    workers = max(1, min(len(pieces), get_threads()) - 1)         # the caller is the other thread
    futures = [_executor(workers).submit(_inside, function, a, b) for a, b in pieces[1:]]
    results, error = [None] * len(pieces), None

    def run_here(i):
        nonlocal error
        try:
            results[i] = _inside(function, *pieces[i])
        except BaseException as exc:   # noqa: BLE001 - re-raised below once the other pieces are done
            error = error or exc

    run_here(0)
    waiting = []
    for i in range(len(pieces) - 1, 0, -1):     # from the back: the pool's threads take pieces from the front
        if futures[i - 1].cancel():            # succeeds only for a piece not started: then it runs here, once
            run_here(i)
        else:
            waiting.append(i)
    if waiting:
        _wait_helping([futures[i - 1] for i in waiting])
    for i in reversed(waiting):
        try:
            results[i] = futures[i - 1].result()
        except BaseException as exc:  # noqa: BLE001
            error = error or exc
    if error is not None:
        raise error
    return results


def parallel(function, count: int, min_work: int = 1, work_per_item: int = 1, align: int = 1) -> list:
    """``run_chunks(function, chunks(count, min_work, work_per_item, align))``."""
    return run_chunks(function, chunks(count, min_work, work_per_item, align))
