"""Exceptions of the encrypted-compute half. Every message names the parameter, its value and the limit."""


class HEError(Exception):
    """Base class of every error raised by ``crypto`` and ``tensor_ops``."""


class ParameterError(HEError, ValueError):
    """Invalid or insecure parameters (e.g. ``log_q[3]=70 not in (0, 31]``)."""


class ShapeError(HEError, ValueError):
    """An input does not fit: too many values for the slots, mismatched shapes."""


class LevelError(HEError, ValueError):
    """Not enough levels left for an operation (multiplying past the last level)."""


class ScaleError(HEError, ValueError):
    """A scale would overflow the modulus, fall below the minimum, or cannot be aligned."""


class ValueRangeError(ParameterError, ScaleError):
    """A value too large to decrypt at level 0, |x| >= (1 - 2^-6) q_0 / (2 Δ): an input and a scale limit at once."""


class KeyMissingError(HEError, KeyError):
    """An operation needs a key the context does not hold (a rotation key, the secret key)."""

    def __str__(self):  # KeyError quotes its argument; keep the message readable
        return str(self.args[0]) if self.args else ""


class ContextMismatchError(HEError, ValueError):
    """Objects from different parameter sets or different keys were mixed."""


class SerializationError(HEError, ValueError):
    """Bytes that are truncated, corrupted, of an unknown version or of the wrong kind."""


class HEWarning(UserWarning):
    """Base class of every warning issued by ``crypto`` and ``tensor_ops``."""


class WrapAroundWarning(HEWarning):
    """A decrypted coefficient in the top 2^-6 of the centred range mod Q_l: the result has most likely wrapped."""


class BootstrapPrecisionWarning(HEWarning):
    """Bootstrapping keys made for parameters whose bootstrap keeps few bits (``CKKSContext.keygen``)."""
