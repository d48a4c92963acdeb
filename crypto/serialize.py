"""Versioned, magic-tagged, length-checked bytes for every public object of the scheme: one place that
lists them all.

The record container (layout, checks, errors) is ``crypto.record``; each object's codec lives beside the
object, so that nothing imports this module back: parameters in ``crypto.params``, plaintexts and
ciphertexts in ``crypto.rlwe``, key material in ``crypto.key_records``, contexts in ``crypto.context``.
"""
from __future__ import annotations

from .context import CKKSContext
from .key_records import (context_to_bytes, galois_keys_to_bytes, public_key_to_bytes, relin_key_to_bytes,
                          secret_key_to_bytes)
from .params import parameters_from_bytes, parameters_to_bytes
from .record import KINDS, MAGIC, VERSION, field, pack, peek_kind, unpack
from .rlwe import ciphertext_from_bytes, ciphertext_to_bytes, plaintext_from_bytes, plaintext_to_bytes

__all__ = ["KINDS", "MAGIC", "VERSION", "pack", "unpack", "field", "peek_kind", "parameters_to_bytes",
           "parameters_from_bytes", "ciphertext_to_bytes", "ciphertext_from_bytes", "plaintext_to_bytes",
           "plaintext_from_bytes", "public_key_to_bytes", "relin_key_to_bytes", "galois_keys_to_bytes",
           "context_to_bytes", "secret_key_to_bytes", "context_from_bytes", "context_from_key_bytes"]


def context_from_bytes(blob, backend="auto", secret_key=None) -> CKKSContext:
    """A CKKSContext from ``context_to_bytes`` output (plus optional ``secret_key_to_bytes`` output)."""
    return CKKSContext.from_bytes(blob, backend, secret_key)


def context_from_key_bytes(public_key, relin_key, galois_keys=None, backend="auto") -> CKKSContext:
    """A public CKKSContext from separate key records (``public_key_to_bytes`` and friends); the
    records must share parameters and key set."""
    return CKKSContext.from_key_bytes(public_key, relin_key, galois_keys, backend)
