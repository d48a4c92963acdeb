"""The ``auto`` NTT backend's choice, measured rather than believed, and robust to a noisy measurement.

For each (operation, N, number of limbs rounded up to a power of two) the candidates (``fourstep``,
``numba`` and ``numpy`` radix-2, ``cross``) are timed on the caller's own moduli in *process CPU time*
(another process stealing the core does not count): one warm-up call each (numba compilation, CROSS
matrix construction), then ``repeats`` interleaved rounds (A B A B ..., each round in a rotated order, so a
burst of load lands on every candidate rather than on one), keeping each candidate's fastest sample (noise only
ever adds time). A candidate more than ``PRUNE_FACTOR`` times slower than the best on the one-limb pilot
(fastest of two interleaved rounds), or in the first full round, is not timed further; the default is
never pruned.

The choice is not simply the fastest: ``default_backend`` (four-step from N = 1024 up, radix-2 below: what
every quiet measurement on this project's machines found) keeps the job unless another candidate is at least
``MARGIN`` (10 %) faster *and* faster in most rounds; anything closer is a tie and the default stays. So one
spike can neither flip a clear default nor, recorded on disk, stick: the choice is recomputed from the stored
timings by the same rule whenever they are read. (An earlier single-sample pilot on wall time cached numba
for N = 65536 with 17-32 limbs at 0.50 ms per limb against four-step's 0.32 ms: ~3 s per N16 bootstrap.)
Measured at N = 65536 (2 loaded cores, load 2.3-3.1): forward+inverse of 17 / 32 limbs, best of 5, four-step
12.0 / 21.6 ms against numba 19.2 / 33.1 ms; with two busy processes added the old rule picked numba in 1 of 22
calibrations, this one in none of 22; first-use calibration 2.2-2.3 s either way (JAX warm-up included), +1-3
ms for a small (N, limbs) key (samples of at least ``MIN_SAMPLE_SECONDS``).

The result is kept on the selector and, unless ``cache_file=None``, in a JSON file under ``~/.cache/hezk/``
keyed by a fingerprint of the machine and library versions (with each entry's margin, rounds, load average
and time of measurement), so later processes skip the measurement. The file is under the user's home, so it
is validated, never trusted: an unreadable file or an entry with unknown keys, backend names or non-finite
times is ignored with a warning and measured again. Nothing is measured or read at import or construction.
"""
from __future__ import annotations

import importlib.util
import json
import math
import os
import platform
import re
import time
import warnings
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from .errors import ParameterError
from .modarith import find_ntt_primes
from .cross import CrossBackend, FourStepBackend
from .ntt_base import BasisConversion, NTTBackend, NTTTables, NumbaRadix2, NumpyRadix2

CANDIDATES = ("fourstep", "numba", "cross", "numpy", "jax")
#: What ``auto`` measures by default: the compiled backends. CROSS-on-BLAS and numpy radix-2 were 10-70x
#: slower at every size measured here (benchmarks/ntt.py) and their constants cost memory at large N;
#: pass ``candidates=CANDIDATES`` to measure them too. ``jax`` (``crypto.jax_backend``) is measured by default only
#: where JAX has an accelerator plugin (``jax_accelerated``), when named only where JAX is installed (a selector
#: drops it otherwise, without importing anything).
DEFAULT_CANDIDATES = ("fourstep", "numba", "jax")
DEFAULT_CACHE_FILE = Path.home() / ".cache" / "hezk" / "ntt_backends.json"
CACHE_FORMAT = 3                          # 3: CPU time, interleaved rounds, margin over a default (2: wall time)
PRUNE_FACTOR = 3.0
#: A non-default candidate must be this much faster (fraction of its own time) for the choice to leave the default.
MARGIN = 0.10
#: A timed sample repeats the call until this much CPU time has passed (tiny transforms: clock resolution, overhead).
MIN_SAMPLE_SECONDS = 2e-4
MAX_CALLS_PER_SAMPLE = 1000
OPERATIONS = ("ntt", "convert")
_KEY = re.compile(r"(ntt|convert):([1-9][0-9]{0,9}):([1-9][0-9]{0,5}|[1-9][0-9]{0,5}to[1-9][0-9]{0,5})")
_ENTRY_FIELDS = {"seconds", "default", "clear", "margin", "rounds", "load", "measured_at", "timer"}


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


#: JAX's accelerator plugins (CUDA, ROCm, TPU): with none installed, JAX runs on the CPU
JAX_ACCELERATOR_PLUGINS = ("jax_cuda12_plugin", "jax_cuda13_plugin", "jax_rocm60_plugin", "jax_rocm7_plugin",
                           "libtpu")


def jax_accelerated() -> bool:
    """True when JAX is installed with an accelerator plugin (nothing is imported). Without one JAX runs the NTT
    on the CPU, about 10x slower than four-step here (8.7 vs 0.7 ms per limb at N=2^16), and measuring it imports
    JAX into the process (hundreds of MB of resident memory): the default candidates then leave it out."""
    return jax_installed() and any(importlib.util.find_spec(name) is not None for name in JAX_ACCELERATOR_PLUGINS)


def limb_bucket(limbs: int) -> int:
    """Limb counts are calibrated in power-of-two buckets: 1, 2, 4, 8, 16, 32, ..."""
    if limbs < 1:
        raise ParameterError(f"limbs={limbs} must be >= 1")
    return 1 << (int(limbs) - 1).bit_length()


def machine_fingerprint() -> str:
    """What a cached timing depends on: CPU, core count, Python, numpy, and the calibration format."""
    return "|".join([platform.machine(), platform.processor() or "?", str(os.cpu_count()),
                     platform.python_version(), np.__version__, f"format{CACHE_FORMAT}"])


def default_backend(operation: str, n: int, candidates) -> str:
    """The choice that stands unless a measurement clearly beats it: four-step from n = 1024 up, numba radix-2
    below (where these are candidates; else the first candidate). Every uncontended calibration on the
    project's machines agreed with this from 1024 up (four-step 1.2-4x faster) and below 256; 512 is a tossup."""
    if operation not in OPERATIONS:
        raise ParameterError(f"operation={operation!r} not one of {OPERATIONS}")
    preference = ("fourstep", "numba") if n >= 1024 else ("numba", "fourstep")
    candidates = tuple(candidates)
    if not candidates:
        raise ParameterError("candidates=(): need at least one backend name")
    return next((name for name in preference if name in candidates), candidates[0])


@dataclass(frozen=True)
class Calibration:
    """Seconds per call of each candidate for one (operation, n, limb bucket), and the choice they make.

    ``seconds``: (backend name, fastest CPU seconds per call), fastest first. ``default``: the backend that
    keeps the job on a tie ("" for none: the fastest wins). ``clear``: whether the fastest also won most of the
    interleaved rounds against the default. ``margin``: how much faster (fraction) a non-default must be.
    ``rounds``, ``load`` (1-minute load average) and ``measured_at`` (Unix time): how it was measured.
    """

    operation: str
    n: int
    limbs: str                                # limb bucket, e.g. "8" (NTT) or "8to4" (conversion)
    seconds: tuple[tuple[str, float], ...]   # (backend name, seconds per call), fastest first
    default: str = ""
    clear: bool = True
    margin: float = MARGIN
    rounds: int = 0
    load: float | None = None
    measured_at: float | None = None

    @property
    def fastest(self) -> str:
        return self.seconds[0][0]

    @property
    def best(self) -> str:
        """The backend to use: the fastest if it beats the default by ``margin`` in a clear measurement, else
        the default (a tie)."""
        times = dict(self.seconds)
        fastest = self.fastest
        if not self.default or self.default not in times or fastest == self.default:
            return fastest
        if self.clear and times[fastest] * (1 + self.margin) <= times[self.default]:
            return fastest
        return self.default

    @property
    def key(self) -> str:
        return f"{self.operation}:{self.n}:{self.limbs}"

    def to_json(self) -> dict:
        return {"seconds": [[name, t] for name, t in self.seconds], "default": self.default,
                "clear": self.clear, "margin": self.margin, "rounds": self.rounds, "load": self.load,
                "measured_at": self.measured_at, "timer": "process_time"}


def calibration_from_json(key, entry, candidates) -> Calibration:
    """A cache entry checked field by field (it is a file under the user's home: never trusted). Raises
    ValueError naming what is wrong. Times of backends outside ``candidates`` are dropped; the choice's
    default is recomputed for ``candidates``."""
    match = _KEY.fullmatch(key) if isinstance(key, str) else None
    if match is None:
        raise ValueError(f"key {key!r} is not 'ntt|convert:<n>:<limbs>'")
    operation, n, limbs = match.group(1), int(match.group(2)), match.group(3)
    if n & (n - 1):
        raise ValueError(f"key {key!r}: n={n} is not a power of two")
    if not isinstance(entry, dict) or not set(entry) <= _ENTRY_FIELDS or "seconds" not in entry:
        raise ValueError(f"entry {key!r} is not an object with 'seconds' and only {sorted(_ENTRY_FIELDS)}")
    pairs = entry["seconds"]
    if not isinstance(pairs, list) or not pairs:
        raise ValueError(f"entry {key!r}: seconds must be a non-empty list")
    seen = {}
    for pair in pairs:
        if not (isinstance(pair, list) and len(pair) == 2 and pair[0] in CANDIDATES and pair[0] not in seen
                and type(pair[1]) in (int, float) and math.isfinite(pair[1]) and 0 < pair[1] < 1e6):
            raise ValueError(f"entry {key!r}: {pair!r} is not [distinct backend name, positive finite seconds]")
        seen[pair[0]] = float(pair[1])
    clear, margin, rounds = entry.get("clear", True), entry.get("margin", MARGIN), entry.get("rounds", 0)
    load, measured_at = entry.get("load"), entry.get("measured_at")
    if not isinstance(clear, bool):
        raise ValueError(f"entry {key!r}: clear={clear!r} is not a boolean")
    if type(margin) not in (int, float) or not 0 <= margin <= 10:
        raise ValueError(f"entry {key!r}: margin={margin!r} is not a number in [0, 10]")
    if type(rounds) is not int or rounds < 0:
        raise ValueError(f"entry {key!r}: rounds={rounds!r} is not a non-negative integer")
    for name, value in (("load", load), ("measured_at", measured_at)):
        if value is not None and (type(value) not in (int, float) or not math.isfinite(value) or value < 0):
            raise ValueError(f"entry {key!r}: {name}={value!r} is not a non-negative number or null")
    for name in ("default", "timer"):
        if name in entry and not isinstance(entry[name], str):
            raise ValueError(f"entry {key!r}: {name} is not a string")
    ours = tuple(sorted(((name, t) for name, t in seen.items() if name in candidates), key=lambda item: item[1]))
    return Calibration(operation, n, limbs, ours, default=default_backend(operation, n, candidates),
                       clear=clear, margin=float(margin), rounds=rounds, load=load, measured_at=measured_at)


class BackendSelector:
    """Chooses an NTT backend per (operation, n, limbs) from a calibration measured once per key.

    ``candidates``: backend names to compare (a backend whose import fails, e.g. numba missing, is
    skipped). ``cache_file``: JSON file for the measurements, or None to keep them in memory only.
    ``repeats``: interleaved timed rounds per candidate (the fastest sample is kept). ``margin``: how much
    faster a non-default candidate must be to be chosen (``MARGIN``). ``timer``: the clock (default
    ``time.process_time``, CPU seconds of this process; tests inject a fake one). ``min_sample_seconds``: a
    sample repeats the call until this much time has passed on ``timer`` (0: one call per sample).
    """

    def __init__(self, candidates=None, cache_file: str | os.PathLike | None = DEFAULT_CACHE_FILE,
                 repeats: int = 3, margin: float = MARGIN, timer=time.process_time,
                 min_sample_seconds: float = MIN_SAMPLE_SECONDS):
        if candidates is None:  # the defaults: JAX only with an accelerator (on the CPU it never wins)
            candidates = tuple(c for c in DEFAULT_CANDIDATES if c != "jax" or jax_accelerated())
        candidates = tuple(c for c in candidates if c != "jax" or jax_installed())
        unknown = [c for c in candidates if c not in CANDIDATES]
        if not candidates or unknown:
            raise ParameterError(f"candidates={candidates!r}: each must be one of {CANDIDATES}")
        if not isinstance(repeats, int) or repeats < 1:
            raise ParameterError(f"repeats={repeats!r} must be a positive integer")
        if not isinstance(margin, (int, float)) or not 0 <= margin <= 10:
            raise ParameterError(f"margin={margin!r} must be a number in [0, 10]")
        if not isinstance(min_sample_seconds, (int, float)) or not 0 <= min_sample_seconds <= 1:
            raise ParameterError(f"min_sample_seconds={min_sample_seconds!r} must be a number in [0, 1]")
        if not callable(timer):
            raise ParameterError(f"timer={timer!r} must be a callable returning seconds")
        self.candidates = candidates
        self.cache_file = None if cache_file is None else Path(cache_file)
        self.repeats = repeats
        self.margin = float(margin)
        self.timer = timer
        self.min_sample_seconds = float(min_sample_seconds)
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
        """CPU seconds of ``call`` per candidate: the fastest of ``repeats`` interleaved rounds. With a ``pilot`` (the
        same work on one limb), every candidate first runs the pilot (fastest of two interleaved rounds); a
        non-default one more than ``PRUNE_FACTOR`` times the best is not built at full size and is recorded as
        pilot·``pilot_scale``. Without a pilot, a non-default candidate that slow in the first full round is not
        timed again. The default (``default_backend``) is always timed in full, so noise can only ever cost a
        challenger its chance, never make one of them win."""
        default = default_backend(operation, n, self.candidates)
        timings: dict[str, float] = {}
        runnable = [name for name in self.candidates if self._loads(name)]
        if pilot is not None and pilot_scale > 1 and len(runnable) > 1:   # hopeless ones: pruned on one limb
            pilots = self._rounds(pilot, runnable, 2)
            runnable = [name for name in runnable if name in pilots]
            best_pilot = min((min(t) for t in pilots.values()), default=float("inf"))
            for name in list(runnable):
                if name != default and min(pilots[name]) > PRUNE_FACTOR * best_pilot:
                    runnable.remove(name)
                    timings[name] = min(pilots[name]) * pilot_scale
        piloted = pilot is not None and pilot_scale > 1
        samples = self._rounds(call, runnable, self.repeats, prune_keep=None if piloted else default)
        timings.update({name: min(times) for name, times in samples.items()})
        if not timings:
            raise ParameterError(f"none of the candidates {self.candidates} could run")
        ranked = tuple(sorted(timings.items(), key=lambda item: item[1]))
        fastest = ranked[0][0]
        clear = True
        if fastest != default and fastest in samples and default in samples:
            wins = sum(f < d for f, d in zip(samples[fastest], samples[default]))
            clear = 2 * wins > min(len(samples[fastest]), len(samples[default]))
        try:
            load = round(os.getloadavg()[0], 2)
        except (AttributeError, OSError):       # no load average on this platform
            load = None
        return Calibration(operation, n, limbs, ranked, default=default, clear=clear, margin=self.margin,
                           rounds=self.repeats, load=load, measured_at=round(time.time(), 1))

    def _loads(self, name) -> bool:
        try:
            self.backend(name)
            return True
        except ImportError:                     # numba (or jax) missing
            return False

    def _rounds(self, call, names, rounds, prune_keep=None) -> dict[str, list[float]]:
        """One untimed call per backend, then ``rounds`` interleaved rounds of one sample each, the order rotated
        every round. A backend that fails with MemoryError is dropped; with ``prune_keep`` set, one other than it
        more than ``PRUNE_FACTOR`` times the fastest of the first round is not timed again."""
        names = list(names)
        for name in list(names):
            try:
                call(self.backend(name))        # compilation, constant tables
            except MemoryError:                 # matrices too large for this machine
                names.remove(name)
        samples: dict[str, list[float]] = {name: [] for name in names}
        for r in range(rounds):
            order = names[r % len(names):] + names[:r % len(names)] if names else []
            for name in order:
                samples[name].append(self._sample(call, self.backend(name)))
            if r == 0 and prune_keep is not None and names:
                fastest = min(samples[name][0] for name in names)
                names = [name for name in names
                         if name == prune_keep or samples[name][0] <= PRUNE_FACTOR * fastest]
        return samples

    def _sample(self, call, backend) -> float:
        """Seconds per call on ``self.timer``: the call repeated until ``min_sample_seconds`` have passed."""
        calls = 0
        start = self.timer()
        while True:
            call(backend)
            calls += 1
            elapsed = self.timer() - start
            if elapsed >= self.min_sample_seconds or calls >= MAX_CALLS_PER_SAMPLE:
                return max(elapsed, 0.0) / calls

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
        with warnings.catch_warnings():          # already said when it was read
            warnings.simplefilter("ignore", RuntimeWarning)
            entries = {key: cal.to_json() for key, cal in self._read_disk(raw=True).items()}
        entries[calibration.key] = calibration.to_json()
        payload = {"fingerprint": machine_fingerprint(), "entries": entries}
        try:
            self.cache_file.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.cache_file.with_name(f"{self.cache_file.name}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps(payload, indent=1))
            os.replace(tmp, self.cache_file)
        except OSError:
            pass    # a read-only home only costs a re-measurement in the next process

    def _read_disk(self, raw: bool = False) -> dict[str, Calibration]:
        """Valid entries of the cache file for this machine that timed all our candidates ({} when absent or
        stale). A file that is not ours, or an invalid entry, is ignored with a warning. ``raw``: every valid
        entry, whatever its candidates (to write the file back without losing them)."""
        if self.cache_file is None:
            return {}
        try:
            text = self.cache_file.read_text()
        except OSError:
            return {}                                        # absent or unreadable: measure
        try:
            payload = json.loads(text)
        except ValueError as e:
            return _ignored(f"{self.cache_file} is not JSON ({e})")
        if not (isinstance(payload, dict) and set(payload) == {"fingerprint", "entries"}
                and isinstance(payload["fingerprint"], str) and isinstance(payload["entries"], dict)):
            return _ignored(f"{self.cache_file} is not a calibration cache ({{'fingerprint', 'entries'}})")
        if payload["fingerprint"] != machine_fingerprint():
            return {}                                        # another machine or library version: measure again
        out = {}
        for key, entry in payload["entries"].items():
            try:
                cal = calibration_from_json(key, entry, CANDIDATES if raw else self.candidates)
            except ValueError as e:
                _ignored(f"{self.cache_file}: ignoring {e}")
                continue
            if raw:
                out[key] = replace(cal, default=entry.get("default", ""))
            elif len(cal.seconds) == len(self.candidates):     # measured against all of our candidates
                out[key] = cal
        return out


def _ignored(message: str) -> dict:
    warnings.warn(f"NTT backend calibration cache: {message}; measuring again", RuntimeWarning, stacklevel=3)
    return {}
