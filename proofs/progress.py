"""Progress reporting for proofs (:mod:`hezk.progress` bound to the proofs' error type): the library takes
``progress(done, total, label)`` callbacks; :func:`progress_bar` draws a tqdm bar (what ``python -m proofs
prove`` passes)."""
from __future__ import annotations

import hezk.progress
from hezk.progress import command_of, run_command  # noqa: F401 (the command lines' runner)

from .errors import ModelError

__all__ = ["progress_bar", "as_progress", "run_command", "command_of"]


def progress_bar(description: str = "proving", stream=None):
    """A ``progress(done, total, label)`` callback drawing a tqdm bar named ``description``."""
    return hezk.progress.progress_bar(description, stream)


def as_progress(progress, description: str = "proving"):
    """``progress`` as a callback (:func:`hezk.progress.as_progress`); a bad value raises ``ModelError``."""
    return hezk.progress.as_progress(progress, description, ModelError)
