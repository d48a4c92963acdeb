"""Fiat-Shamir transcript: one per proof, labelled absorbs and challenges.

Construction (a hash chain with domain separation): the state is a 32-byte SHA3-256 digest;
``absorb`` replaces it by H(state || "absorb" || label || encoding(value)) and ``challenge_*``
expands SHAKE-256(state || "squeeze" || label || n) into as many 64-bit words as needed, then
chains the state forward. Encodings are canonical and length-prefixed (type tag, dtype, shape,
little-endian data), so distinct statements never collide into the same byte string.

Field challenges are unbiased: 64-bit words at or above the largest multiple of p below 2^64 are
rejected (probability ~2^-33 per word) before reduction mod p.
"""
from __future__ import annotations

import hashlib
import sys

import numpy as np

from .errors import ProofError
from .field import EXT_DEGREE, P


_SHORT_DRAW = 64  #: draws of at most this many values run on Python ints (numpy's per-call overhead dominates)


def _length_prefixed(data: bytes) -> bytes:
    return len(data).to_bytes(8, "little") + data


def encode(value) -> bytes:
    """Canonical, length-prefixed encoding of bytes, str, int, numpy arrays and lists/tuples of those."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return b"b" + _length_prefixed(bytes(value))
    if isinstance(value, str):
        return b"s" + _length_prefixed(value.encode("utf-8"))
    if isinstance(value, (bool, np.bool_)):
        return b"i" + _length_prefixed(int(value).to_bytes(1, "little", signed=True))
    if isinstance(value, (int, np.integer)):
        value = int(value)
        size = (value.bit_length() + 8) // 8
        return b"i" + _length_prefixed(value.to_bytes(size, "little", signed=True))
    if isinstance(value, np.ndarray):
        if value.dtype.hasobject:
            raise ProofError(f"transcript: cannot absorb an array of dtype={value.dtype}")
        dtype = value.dtype
        if dtype.byteorder != ">" and (dtype.byteorder != "=" or sys.byteorder == "little"):
            canonical = value  # already little-endian (or byte-order free): no conversion, the same bytes
        else:
            canonical = np.ascontiguousarray(value, dtype=dtype.newbyteorder("<"))
        header = (canonical.dtype.newbyteorder("<").str + "|" + ",".join(map(str, value.shape))).encode()
        return b"a" + _length_prefixed(header) + _length_prefixed(canonical.tobytes())
    if isinstance(value, (list, tuple)):
        return b"l" + len(value).to_bytes(8, "little") + b"".join(encode(v) for v in value)
    raise ProofError(f"transcript: cannot absorb a value of type {type(value).__name__}")


class Transcript:
    """A labelled Fiat-Shamir transcript. Prover and verifier build identical ones from the same label.

    Absorb the whole statement (commitments, public inputs, claimed outputs, shapes, parameters)
    before drawing the first challenge.
    """

    def __init__(self, label: str):
        self._state = hashlib.sha3_256(b"hezk.transcript.v1" + encode(str(label))).digest()

    def _chain(self, kind: bytes, label: str, payload: bytes) -> None:
        self._state = hashlib.sha3_256(self._state + kind + encode(str(label)) + payload).digest()

    def absorb(self, label: str, value) -> None:
        """Mix ``value`` (bytes, str, int, numpy array or a list of those) into the state."""
        self._chain(b"absorb", label, encode(value))

    def _word_bytes(self, label: str, count: int) -> bytes:
        """8 ``count`` pseudo-random bytes (``count`` little-endian uint64 words) bound to the current state; chains
        the state forward."""
        seed = self._state + b"squeeze" + encode(str(label)) + encode(int(count))
        data = hashlib.shake_256(seed).digest(8 * count)
        self._chain(b"squeezed", label, encode(int(count)))
        return data

    def _words(self, label: str, count: int) -> np.ndarray:
        """``count`` pseudo-random uint64 words bound to the current state; chains the state forward."""
        return np.frombuffer(self._word_bytes(label, count), dtype="<u8").astype(np.uint64)

    def _uniform(self, label: str, count: int, bound: int) -> np.ndarray:
        """``count`` uniform integers in [0, bound) as uint64, by rejection sampling (unbiased). A short draw
        (a challenge's few words) runs on Python ints, a long one on numpy: the same words either way."""
        limit = (1 << 64) - (1 << 64) % bound  # largest multiple of bound not above 2^64
        if count <= _SHORT_DRAW:
            values, attempt = [], 0
            while len(values) < count:
                data = self._word_bytes(f"{label}#{attempt}", count - len(values) + 4)
                words = (int.from_bytes(data[i:i + 8], "little") for i in range(0, len(data), 8))
                values += [w % bound for w in words if w < limit]
                attempt += 1
            return np.array(values[:count], dtype=np.uint64)
        out = np.empty(0, dtype=np.uint64)
        attempt = 0
        while out.size < count:
            words = self._words(f"{label}#{attempt}", count - out.size + 4)
            accepted = words if limit == 1 << 64 else words[words < np.uint64(limit)]
            out = np.concatenate([out, accepted % np.uint64(bound)])
            attempt += 1
        return out[:count]

    def _field_words(self, label: str, count: int) -> np.ndarray:
        return self._uniform(label, count, P)

    def challenge_ext(self, label: str) -> np.ndarray:
        """One uniform F_p4 challenge, shape (4,). Hits a fixed degree-d polynomial root w.p. <= d / p^4."""
        return self._field_words(label, EXT_DEGREE)

    def challenge(self, label: str, n: int | None = None) -> np.ndarray:
        """A verifier challenge from the extension field: one (4,) element, or ``n`` of them, shape (n, 4)."""
        return self.challenge_ext(label) if n is None else self.challenge_ext_vector(label, n)

    def challenge_ext_vector(self, label: str, n: int) -> np.ndarray:
        """``n`` uniform F_p4 challenges, shape (n, 4)."""
        n = int(n)
        if n < 0:
            raise ProofError(f"challenge_ext_vector: n={n} must be >= 0")
        return self._field_words(label, EXT_DEGREE * n).reshape(n, EXT_DEGREE)

    def challenge_base(self, label: str, n: int) -> np.ndarray:
        """``n`` uniform base-field challenges, shape (n,) (only where 31-bit soundness is enough)."""
        return self._field_words(label, int(n))

    def challenge_indices(self, label: str, count: int, bound: int) -> np.ndarray:
        """``count`` independent uniform integers in [0, bound) (rejection sampling, unbiased)."""
        count, bound = int(count), int(bound)
        if bound < 1 or bound > 1 << 62:
            raise ProofError(f"challenge_indices: bound={bound} not in [1, 2^62]")
        if count < 0:
            raise ProofError(f"challenge_indices: count={count} must be >= 0")
        return self._uniform(label, count, bound).astype(np.int64)

    def state_digest(self) -> bytes:
        """The current 32-byte state (for tests and debugging; absorbing nothing)."""
        return self._state
