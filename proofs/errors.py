"""Exceptions of the proof half (``proofs``).

A verifier raises only :class:`ProofRejected`, for any malformed, truncated or tampered input.
The prover side raises :class:`ModelError` for statements that cannot be proved (a layer whose
integers could wrap around the field, mismatched shapes); messages name the parameter, the value
and the limit.
"""


class ProofError(Exception):
    """Base class of every error raised by ``proofs``."""


class ProofRejected(ProofError):
    """A proof (or commitment, or serialized object) failed verification.

    ``reason`` says what failed, ``where`` says in which part of the proof (e.g.
    ``"layer 2 / sumcheck round 5"``); both are plain strings.
    """

    def __init__(self, reason: str, where: str = ""):
        self.reason = str(reason)
        self.where = str(where)
        super().__init__(f"{self.where}: {self.reason}" if self.where else self.reason)


class ModelError(ProofError, ValueError):
    """A model or input that cannot be proved (would wrap around the field, shape mismatch)."""


class FieldError(ProofError, ValueError):
    """Invalid field input: non-integer data, values that do not fit, inverse of zero."""
