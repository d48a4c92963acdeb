"""The ``auto`` NTT backend's choice, measured rather than believed.

For each (operation, N, number of limbs rounded up to a power of two) the candidates (``fourstep``,
``numba`` and ``numpy`` radix-2, ``cross``) are timed once on the caller's own moduli: one warm-up call
(numba compilation, CROSS matrix construction), then the fastest of a few calls (a loaded machine
only ever adds time, so the minimum is the steadiest estimate). A candidate more
than ``PRUNE_FACTOR`` times slower than the best on a one-limb pilot, or on its first timed call,
is not timed further (nor are its constants built for every limb). The
result is kept on the selector and, unless ``cache_file=None``, in a JSON file under
``~/.cache/hezk/`` keyed by a fingerprint of the machine and library versions, so later processes
skip the measurement. Nothing is measured or read at import or construction.
"""
from __future__ import annotations

import importlib.util
import json
import os
import platform
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .errors import ParameterError
from .modarith import find_ntt_primes
from .cross import CrossBackend, FourStepBackend
from .ntt_base import BasisConversion, NTTBackend, NTTTables, NumbaRadix2, NumpyRadix2

CANDIDATES = ("fourstep", "numba", "cross", "numpy", "jax")
#: What ``auto`` measures by default: the compiled backends. CROSS-on-BLAS and numpy radix-2 were 10-70x
#: slower at every size measured here (benchmarks/ntt.py) and their constants cost memory at large N;
#: pass ``candidates=CANDIDATES`` to measure them too. ``jax`` (``crypto.jax_backend``) is measured only where
#: JAX is installed (a selector drops it otherwise, without importing anything).
DEFAULT_CANDIDATES = ("fourstep", "numba", "jax")
DEFAULT_CACHE_FILE = Path.home() / ".cache" / "hezk" / "ntt_backends.json"
CACHE_FORMAT = 2
PRUNE_FACTOR = 3.0


def candidate_backend(name: str) -> NTTBackend:
    """A new instance of the fixed backend ``name``, one of ``CANDIDATES`` ('auto' is ``crypto.ntt``'s)."""
    makers = {"fourstep": FourStepBackend, "numba": NumbaRadix2, "cross": CrossBackend, "numpy": NumpyRadix2,
              "jax": _jax_backend}
    if name not in makers:
        raise ParameterError(f"backend={name!r} not one of {CANDIDATES}")
    return makers[name]()


def _jax_backend() -> NTTBackend:
    from .jax_backend import JaxBackend      # imports JAX: only when asked for
    return JaxBackend()


def jax_installed() -> bool:
    """True when the ``jax`` package can be found (nothing is imported)."""
    return importlib.util.find_spec("jax") is not None


def limb_bucket(limbs: int) -> int:
    """Limb counts are calibrated in power-of-two buckets: 1, 2, 4, 8, 16, 32, ..."""
    if limbs < 1:
        raise ParameterError(f"limbs={limbs} must be >= 1")
    return 1 << (int(limbs) - 1).bit_length()


def machine_fingerprint() -> str:
    """What a cached timing depends on: CPU, core count, Python, numpy, and the calibration format."""
    return "|".join([platform.machine(), platform.processor() or "?", str(os.cpu_count()),
                     platform.python_version(), np.__version__, f"format{CACHE_FORMAT}"])


@dataclass(frozen=True)
class Calibration:
    """Seconds per call of each candidate for one (operation, n, limb bucket)."""

    operation: str
    n: int
    limbs: str                                # limb bucket, e.g. "8" (NTT) or "8to4" (conversion)
    seconds: tuple[tuple[str, float], ...]   # (backend name, seconds per call), fastest first

    @property
    def best(self) -> str:
        return self.seconds[0][0]

    @property
    def key(self) -> str:
        return f"{self.operation}:{self.n}:{self.limbs}"


class BackendSelector:
    """Chooses an NTT backend per (operation, n, limbs) from a calibration measured once per key.

    ``candidates``: backend names to compare (a backend whose import fails, e.g. numba missing, is
    skipped). ``cache_file``: JSON file for the measurements, or None to keep them in memory only.
    ``repeats``: timed calls per candidate (the fastest is kept).
    """

    def __init__(self, candidates=DEFAULT_CANDIDATES, cache_file: str | os.PathLike | None = DEFAULT_CACHE_FILE,
                 repeats: int = 3):
        candidates = tuple(c for c in candidates if c != "jax" or jax_installed())
        unknown = [c for c in candidates if c not in CANDIDATES]
        if not candidates or unknown:
            raise ParameterError(f"candidates={candidates!r}: each must be one of {CANDIDATES}")
        if not isinstance(repeats, int) or repeats < 1:
            raise ParameterError(f"repeats={repeats!r} must be a positive integer")
        self.candidates = candidates
        self.cache_file = None if cache_file is None else Path(cache_file)
        self.repeats = repeats
        self._backends: dict[str, NTTBackend] = {}
        self._results: dict[str, Calibration] = {}
        self._disk_loaded = False

    def __repr__(self):
        return f"BackendSelector(candidates={self.candidates}, cache_file={self.cache_file})"

    def backend(self, name: str) -> NTTBackend:
        """This selector's instance of a candidate backend (kept, so CROSS matrices are reused)."""
        if name not in self._backends:
            self._backends[name] = candidate_backend(name)
        return self._backends[name]

    def calibrations(self) -> list[Calibration]:
        """Everything measured (or loaded from disk) so far."""
        return list(self._results.values())

    def forget(self):
        """Drop every calibration, in memory and in the cache file, so the next choice measures again."""
        self._results.clear()
        self._disk_loaded = True
        if self.cache_file is not None:
            try:
                self.cache_file.unlink()
            except OSError:
                pass

    # ------------------------------------------------------------------ choices
    def for_ntt(self, tables: NTTTables) -> NTTBackend:
        """The fastest backend for forward/inverse NTTs of len(tables.moduli) limbs of size tables.n."""
        limbs = str(limb_bucket(len(tables.moduli)))
        key = f"ntt:{tables.n}:{limbs}"
        if key not in self._known():
            rng = np.random.default_rng(0)
            a = np.array([rng.integers(0, q, tables.n) for q in tables.moduli], dtype=np.uint64)
            one = tables.subset([0])
            self._store(self._measure("ntt", tables.n, limbs, lambda b: b.forward(a, tables),
                                      pilot=lambda b: b.forward(a[:1], one), pilot_scale=len(a)))
        return self.backend(self._results[key].best)

    def for_size(self, n: int, limbs: int) -> NTTBackend:
        """The fastest backend for NTTs of ``limbs`` limbs of size n, calibrated on 31-bit NTT primes."""
        if limbs < 1 or n < 2 or n & (n - 1):
            raise ParameterError(f"n={n}, limbs={limbs}: need n a power of two >= 2 and limbs >= 1")
        key = f"ntt:{n}:{limb_bucket(limbs)}"
        if key in self._known():
            return self.backend(self._results[key].best)
        return self.for_ntt(NTTTables(n, find_ntt_primes(31, limbs, n)))

    def for_conversion(self, conv: BasisConversion, n: int) -> NTTBackend:
        """The fastest backend for a basis conversion from len(conv.from_moduli) limbs of n coefficients."""
        limbs = f"{limb_bucket(len(conv.from_moduli))}to{limb_bucket(len(conv.to_moduli))}"
        key = f"convert:{n}:{limbs}"
        if key not in self._known():
            rng = np.random.default_rng(0)
            x = np.array([rng.integers(0, q, n) for q in conv.from_moduli], dtype=np.uint64)
            self._store(self._measure("convert", n, limbs, lambda b: b.convert_basis(x, conv)))
        return self.backend(self._results[key].best)

    # ------------------------------------------------------------------ measurement
    def _measure(self, operation: str, n: int, limbs: str, call, pilot=None, pilot_scale=1) -> Calibration:
        """Seconds of ``call`` per candidate (fastest of ``repeats``). With a ``pilot`` (the same work on one limb), every
        candidate first runs the pilot; one whose pilot is more than ``PRUNE_FACTOR`` times the best is
        not built at full size and is recorded as pilot·``pilot_scale``. Without, a candidate whose
        first timed call is that much slower than the best so far is not timed further."""
        timings: dict[str, float] = {}
        runnable = []
        if pilot is not None and pilot_scale > 1:
            pilots = {}
            for name in self.candidates:
                try:
                    pilots[name] = _warm_then_time(pilot, self.backend(name))
                except (ImportError, MemoryError):   # numba missing; matrices too large for this machine
                    continue
            best_pilot = min(pilots.values(), default=float("inf"))
            for name, seconds in pilots.items():
                if seconds <= PRUNE_FACTOR * best_pilot:
                    runnable.append(name)
                else:
                    timings[name] = seconds * pilot_scale
        else:
            runnable = list(self.candidates)
        for name in runnable:
            try:
                backend = self.backend(name)
                samples = [_warm_then_time(call, backend)]
            except (ImportError, MemoryError):   # numba missing; matrices too large for this machine
                continue
            if samples[0] <= PRUNE_FACTOR * min(timings.values(), default=float("inf")):
                samples += [_timed(call, backend) for _ in range(self.repeats - 1)]
            timings[name] = min(samples)
        if not timings:
            raise ParameterError(f"none of the candidates {self.candidates} could run")
        ranked = tuple(sorted(timings.items(), key=lambda item: item[1]))
        return Calibration(operation, n, limbs, ranked)

    # ------------------------------------------------------------------ caches
    def _known(self) -> dict[str, Calibration]:
        if not self._disk_loaded:
            self._disk_loaded = True
            for key, entry in self._read_disk().items():
                self._results.setdefault(key, entry)
        return self._results

    def _store(self, calibration: Calibration):
        self._results[calibration.key] = calibration
        if self.cache_file is None:
            return
        entries = self._read_disk()
        entries[calibration.key] = calibration
        payload = {"fingerprint": machine_fingerprint(),
                   "entries": {k: {"seconds": [list(s) for s in c.seconds]} for k, c in entries.items()}}
        try:
            self.cache_file.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.cache_file.with_name(f"{self.cache_file.name}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps(payload, indent=1))
            os.replace(tmp, self.cache_file)
        except OSError:
            pass    # a read-only home only costs a re-measurement in the next process

    def _read_disk(self) -> dict[str, Calibration]:
        """Entries of the cache file for this machine that timed all our candidates ({} when absent or stale)."""
        if self.cache_file is None:
            return {}
        try:
            payload = json.loads(self.cache_file.read_text())
            if payload.get("fingerprint") != machine_fingerprint():
                return {}
            out = {}
            for key, entry in payload["entries"].items():
                operation, n, limbs = key.split(":")
                seconds = tuple((str(name), float(t)) for name, t in entry["seconds"]
                                if name in self.candidates)
                if len(seconds) == len(self.candidates):     # measured against all of our candidates
                    out[key] = Calibration(operation, int(n), limbs, seconds)
            return out
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return {}


def _warm_then_time(call, backend) -> float:
    """One untimed call (compilation, constant tables), then one timed call."""
    call(backend)
    return _timed(call, backend)


def _timed(call, backend) -> float:
    start = time.perf_counter()
    call(backend)
    return time.perf_counter() - start
