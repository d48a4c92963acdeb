"""Progress reporting shared by the engines: the library takes ``progress(done, total, label)`` callbacks;
:func:`progress_bar` makes one drawing a tqdm bar on stderr. Bottom package: imports nothing of hezk (tqdm only
when a bar is drawn); each engine binds :func:`as_progress` to its own error type.

Also what the user sees of a long run besides bars: :func:`run_command` ends a command line's run on Ctrl-C or a
missing optional dependency in one line (exit codes 130 and 2), and :func:`announce_compilation` says once per
process that numba's kernels are being compiled (the first run, or after an upgrade), when their cache is cold."""
from __future__ import annotations

import glob
import os
import sys

__all__ = ["progress_bar", "as_progress", "run_command", "command_of", "EXTRAS", "announce_compilation", "COMPILING"]


class _TqdmProgress:
    """``progress(done, total, label)`` drawn as a tqdm bar; a new bar starts whenever ``total`` changes."""

    def __init__(self, description: str, stream=None):
        self.description, self.stream, self._bar = description, stream, None

    def __call__(self, done: int, total: int, label: str = "") -> None:
        from tqdm import tqdm

        if self._bar is None or self._bar.total != total:
            self.close()
            self._bar = tqdm(total=total, desc=self.description, file=self.stream or sys.stderr, unit="step",
                             leave=True, dynamic_ncols=True)
        if label:
            self._bar.set_postfix_str(label, refresh=False)
        self._bar.update(done - self._bar.n)
        if done >= total:
            self.close()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None


def progress_bar(description: str, stream=None) -> _TqdmProgress:
    """A ``progress(done, total, label)`` callback drawing a tqdm bar named ``description`` on ``stream``
    (stderr by default)."""
    return _TqdmProgress(description, stream)


def as_progress(progress, description: str, error=ValueError):
    """``progress`` as a callback: None/False -> None (no output), True -> a tqdm bar on stderr, a callable
    ``progress(done, total, label)`` as given; anything else raises ``error`` naming the parameter."""
    if progress is None or progress is False:
        return None
    if progress is True:
        return progress_bar(description)
    if callable(progress):
        return progress
    raise error(f"progress={progress!r} must be True, False, None or a callable(done, total, label)")


#: top-level module -> the extra of ``pip install "hezk[extra]"`` that installs it
EXTRAS = {"fastapi": "serve", "uvicorn": "serve", "httpx": "serve", "starlette": "serve", "distributed": "distributed",
          "dask": "distributed", "jax": "jax", "jaxlib": "jax"}
INTERRUPTED = 130  #: exit status after Ctrl-C (128 + SIGINT, as shells report it)


def run_command(function, *args) -> int:
    """``function(*args)`` as a command line runs it: Ctrl-C prints ``interrupted`` and gives exit status 130,
    and an optional dependency that is not installed prints one line with its ``pip install "hezk[extra]"``
    command and gives 2 (no traceback for either); otherwise its return value (None -> 0)."""
    try:
        return function(*args) or 0
    except KeyboardInterrupt:
        print("\ninterrupted" if _bar_open() else "interrupted", file=sys.stderr)
        return INTERRUPTED
    except ModuleNotFoundError as error:
        top = (error.name or "").partition(".")[0]
        if top not in EXTRAS:
            raise
        print(f'error: {top} is not installed; this command needs the {EXTRAS[top]} extra: '
              f'pip install "hezk[{EXTRAS[top]}]"', file=sys.stderr)
        return 2


def command_of(argv) -> str:
    """The command an argument list names (its first word), or "" (``--help``, ``--version``, nothing): the
    command lines build only that command's options (none for "")."""
    return next((str(word) for word in argv[:1] if not str(word).startswith("-")), "")


def _bar_open() -> bool:
    """Whether a tqdm bar may be mid-line on stderr (so ``interrupted`` starts a line of its own)."""
    tqdm = sys.modules.get("tqdm")
    return bool(tqdm is not None and getattr(tqdm.tqdm, "_instances", None))


COMPILING = "compiling hezk's numba kernels once (about 20 s); later runs start at once"
_announced = False


def _cache_dirs(source: str) -> list[str]:
    """Where numba keeps the compiled kernels of ``source``: the folder of the first of numba's cache locators
    that takes it (numba's own choice), else the in-tree ``__pycache__``."""
    try:
        from numba.core import caching

        impl = getattr(caching, "CacheImpl", None) or getattr(caching, "_CacheImpl")  # numba >= 0.59, older
        namespace = {}
        exec(compile("def kernel(): pass", source, "exec"), namespace)  # a function "defined" in source
        for locator in impl._locator_classes:
            found = locator.from_function(namespace["kernel"], source)
            if found is not None:
                return [found.get_cache_path()]
    except Exception:  # noqa: BLE001 (a numba without these internals: the in-tree cache)
        pass
    return [os.path.join(os.path.dirname(source), "__pycache__")]


def cache_is_cold(source: str) -> bool:
    """Whether numba has no up-to-date cached kernel of the module at ``source``: no index file (``.nbi``)
    of it, or only ones older than the source (numba then compiles again)."""
    stem = os.path.splitext(os.path.basename(source))[0]
    try:
        changed = os.stat(source).st_mtime
    except OSError:
        return False
    for folder in _cache_dirs(source):
        for index in glob.glob(os.path.join(glob.escape(folder), f"{glob.escape(stem)}.*.nbi")):
            try:
                if os.stat(index).st_mtime >= changed:
                    return False
            except OSError:
                continue
    return True


def announce_compilation(source: str, stream=None) -> bool:
    """Print :data:`COMPILING` on stderr (once per process) when the numba kernels of the module at ``source``
    (a kernel module passes its ``__file__`` as it is imported) are not cached yet; returns whether it printed.
    Only for a person watching: stderr a terminal, or ``HEZK_COMPILE_NOTICE=1`` (piped output and logs stay
    as they were)."""
    global _announced
    stream = stream or sys.stderr
    watched = os.environ.get("HEZK_COMPILE_NOTICE") == "1" or getattr(stream, "isatty", lambda: False)()
    if _announced or not watched or not cache_is_cold(source):
        return False
    _announced = True
    print(COMPILING, file=stream, flush=True)
    return True
