"""Progress reporting for long operations (:mod:`hezk.progress` bound to tensor_ops' error type): the library
takes ``progress(done, total, label)`` callbacks; :func:`progress_bar` draws a tqdm bar (what the CLI passes)."""
from __future__ import annotations

import hezk.progress
from hezk.progress import command_of, run_command  # noqa: F401 (the command lines' runner)
from hezk.progress import progress_bar

from crypto.errors import ParameterError

__all__ = ["progress_bar", "as_progress", "run_command", "command_of"]


def as_progress(progress, description: str):
    """``progress`` as a callback (:func:`hezk.progress.as_progress`); a bad value raises ``ParameterError``."""
    return hezk.progress.as_progress(progress, description, ParameterError)
