"""Progress reporting shared by the engines: the library takes ``progress(done, total, label)`` callbacks;
:func:`progress_bar` makes one drawing a tqdm bar on stderr. Bottom package: imports nothing of hezk (tqdm only
when a bar is drawn); each engine binds :func:`as_progress` to its own error type."""
from __future__ import annotations

import sys

__all__ = ["progress_bar", "as_progress"]


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
