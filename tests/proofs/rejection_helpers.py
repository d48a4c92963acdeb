"""Assertions on which check rejected: ProofRejected's reason and where, ProofError's message."""
import re

import pytest

from proofs.errors import ProofError, ProofRejected


def rejected(call, reason, where):
    """``call()`` raises ProofRejected whose reason equals ``reason`` (a str) or fully matches it (a Pattern),
    at exactly ``where``; returns the exception."""
    with pytest.raises(ProofRejected) as info:
        call()
    error = info.value
    assert error.where == where, error
    if isinstance(reason, re.Pattern):
        assert reason.fullmatch(error.reason), error
    else:
        assert error.reason == reason, error
    assert str(error) == (f"{where}: {error.reason}" if where else error.reason)
    return error


def raises_error(call, message):
    """``call()`` raises ProofError (not ProofRejected) with exactly ``message``."""
    with pytest.raises(ProofError) as info:
        call()
    assert not isinstance(info.value, ProofRejected), info.value
    assert str(info.value) == message
    return info.value
