"""Encrypted compute: RNS-CKKS with hybrid key switching over word-size primes.

    from crypto import CKKSParameters, CKKSContext
    ctx = CKKSContext.keygen(CKKSParameters.preset("N14"), rotations=[1, -3])
    ct = ctx.encrypt(values); y = ctx.decrypt(ctx.evaluator.rotate(ct * ct, 1))
"""
from typing import TYPE_CHECKING

from hezk._lazy import lazy_package

# the names of the block below are imported on first use, not now:
# ``from crypto.errors import HEError`` loads no kernel
lazy_package(__name__)

if TYPE_CHECKING:  # static tools (and lazy_package, which reads this block) see the imports
    from .context import CKKSContext
    from .errors import (ContextMismatchError, HEError, KeyMissingError, LevelError, ParameterError,
                         ScaleError, SerializationError, ShapeError)
    from .params import CKKSParameters, CKKSParametersLiteral
    from .rlwe import Ciphertext, Plaintext

__all__ = [
    "CKKSContext", "CKKSParameters", "CKKSParametersLiteral", "Ciphertext", "Plaintext",
    "HEError", "ParameterError", "ShapeError", "LevelError", "ScaleError", "KeyMissingError",
    "ContextMismatchError", "SerializationError",
]

from importlib.metadata import PackageNotFoundError as _NotInstalled, version as _version  # noqa: E402

try:
    __version__ = _version("hezk")  # one source: the version in pyproject.toml
except _NotInstalled:  # a source tree that was never installed
    __version__ = "0+unknown"
