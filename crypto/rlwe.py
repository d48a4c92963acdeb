"""Scheme-agnostic RLWE objects: plaintexts, ciphertexts, keys, key generation, encryption, decryption.

Ring R_Q = Z_Q[X]/(X^N + 1) in RNS form.  A ciphertext (c0, c1) at level ℓ lives over the primes
Q_ℓ = q_moduli[:limbs_at(ℓ)], always in NTT form, and decrypts to c0 + c1·s ≈ m (Lyubashevsky, Peikert,
Regev, "On ideal lattices and learning with errors over rings", EUROCRYPT 2010).  Public key
(b, a) = (-a·s + e, a); public-key encryption (b·u + e0 + m, a·u + e1) with u ternary, e0, e1 Gaussian
(σ = 3.2); secret-key encryption (-a·s + e + m, a).
"""
from __future__ import annotations

import hashlib
import threading
import weakref
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from .errors import ContextMismatchError, KeyMissingError, LevelError, ParameterError, SerializationError
from .keyswitch import GaloisKeys, SwitchingKey, conjugation_element, galois_element, make_switching_key
from .modarith import inv_mod
from .params import CKKSParameters, parameters_from_bytes
from .record import check_key_id, checked_residues, key_id_of, level_of, pack, residue_array, unpack, value_meta
from .ring import RingContext, RNSPoly

ERROR_SIGMA = 3.2


class _Serializable:
    """``to_bytes()`` / ``from_bytes(blob, ctx)`` through this module's codec functions named by ``_kind``."""

    _kind: ClassVar[str] = ""

    def to_bytes(self) -> bytes:
        return _CODECS[self._kind][0](self)

    @classmethod
    def from_bytes(cls, blob, ctx):
        """The object stored in ``blob``, for the context ``ctx`` (a CKKSContext)."""
        return _CODECS[cls._kind][1](blob, ctx)


@dataclass(frozen=True, eq=False)
class Plaintext(_Serializable):
    """An encoded vector: ``poly`` in NTT form over Q_level, with its exact ``scale``.

    ``length`` is the caller's vector length, ``is_complex`` whether decoding returns complex values."""

    poly: RNSPoly
    level: int
    scale: float
    length: int
    is_complex: bool
    fingerprint: bytes = field(repr=False)
    _kind: ClassVar[str] = "plaintext"


@dataclass(frozen=True, eq=False)
class Ciphertext(_Serializable):
    """RLWE ciphertext (c0, c1) in NTT form over Q_level, with its exact scale and key-set id.

    When it knows its evaluator (``evaluator``), ``+``, ``-`` and ``*`` work with ciphertexts,
    plaintexts, numpy arrays and scalars; ``*`` multiplies and rescales.
    """

    parts: tuple[RNSPoly, ...]
    level: int
    scale: float
    length: int
    is_complex: bool
    fingerprint: bytes = field(repr=False)
    key_id: bytes = field(repr=False)
    evaluator: object = field(default=None, repr=False)
    params: object = field(default=None, repr=False)  # CKKSParameters of a detached (unpickled) ciphertext
    _kind: ClassVar[str] = "ciphertext"

    __array_ufunc__ = None  # numpy arrays defer to our reflected operators (array + ct -> ct.__radd__)

    def __repr__(self):
        return (f"Ciphertext(level={self.level}, scale=2^{np.log2(self.scale):.3f}, length={self.length}, "
                f"{'complex' if self.is_complex else 'real'}, N={self.parts[0].ring.n})")

    def with_evaluator(self, evaluator) -> "Ciphertext":
        return Ciphertext(self.parts, self.level, self.scale, self.length, self.is_complex,
                          self.fingerprint, self.key_id, evaluator)

    def __reduce__(self):
        """Pickle through the versioned bytes (``to_bytes``) plus the parameters' record: the keys never travel
        with a ciphertext. Unpickling attaches the evaluator of a live public context of the same key set in
        the receiving process (e.g. one scattered to a Dask worker), else gives a detached ciphertext (it
        decrypts; evaluating it needs ``Ciphertext.from_bytes(ct.to_bytes(), ctx)``)."""
        params = self.params if self.evaluator is None else self.evaluator.params
        if params is None:
            raise SerializationError("this ciphertext knows neither its evaluator nor its parameters: it cannot "
                                     "be pickled; pickle ct.to_bytes() and read it with Ciphertext.from_bytes")
        return ciphertext_from_pickle, (self.to_bytes(), params.to_bytes())

    def _ev(self):
        if self.evaluator is None:
            raise KeyMissingError("this ciphertext knows no evaluator: use ctx.evaluator.add/mul/... or "
                                  "Ciphertext.from_bytes(blob, ctx), which attaches one")
        return self.evaluator

    def __add__(self, other):
        return self._ev().add(self, other)

    __radd__ = __add__

    def __sub__(self, other):
        return self._ev().sub(self, other)

    def __rsub__(self, other):
        return self._ev().add(self._ev().neg(self), other)

    def __neg__(self):
        return self._ev().neg(self)

    def __mul__(self, other):
        return self._ev().mul_rescale(self, other)

    __rmul__ = __mul__

    def __truediv__(self, other):
        """Division by a plaintext scalar or vector: a product with its reciprocal (CKKS has no
        encrypted division without a polynomial approximation)."""
        divisor = np.asarray(other)
        if isinstance(other, (Ciphertext, Plaintext)) or not np.issubdtype(divisor.dtype, np.number):
            raise ParameterError(f"cannot divide a ciphertext by {type(other).__name__}: only by plaintext "
                                 "scalars and arrays")
        if np.any(divisor == 0):
            raise ParameterError("division by zero: the divisor has a zero entry")
        return self * (1 / other if divisor.ndim == 0 else 1 / divisor)


@dataclass(frozen=True, eq=False)
class SecretKey:
    """Ternary secret s: integer coefficients and the NTT form over all moduli (Q ∪ P)."""

    coeffs: np.ndarray
    poly: RNSPoly = field(repr=False)

    def __repr__(self):
        return "SecretKey(<hidden>)"


@dataclass(frozen=True, eq=False)
class PublicKey:
    """(b, a) = (-a·s + e, a) over the Q primes, NTT form."""

    b: RNSPoly
    a: RNSPoly

    @property
    def key_id(self) -> bytes:
        """16-byte identifier of the key set (a hash of the public key)."""
        return hashlib.sha256(b"hezk/key-id" + self.b.data.tobytes() + self.a.data.tobytes()).digest()[:16]


class KeyGenerator:
    """Secret, public, relinearization and Galois keys, drawn from ``sampler``."""

    def __init__(self, params, ring, sampler):
        self.params, self.ring, self.sampler = params, ring, sampler
        self.all_idx = tuple(range(len(params.moduli)))
        self.q_idx = tuple(range(len(params.q_moduli)))

    def secret_key(self) -> SecretKey:
        coeffs = self.sampler.ternary(self.params.n, self.params.hamming_weight)
        return SecretKey(coeffs, RNSPoly.from_ints(self.ring, coeffs, self.all_idx, is_ntt=True))

    def secret_key_from_coeffs(self, coeffs) -> SecretKey:
        return SecretKey(np.asarray(coeffs, dtype=np.int64),
                         RNSPoly.from_ints(self.ring, coeffs, self.all_idx, is_ntt=True))

    def public_key(self, sk: SecretKey) -> PublicKey:
        a = RNSPoly(self.ring, self.sampler.uniform(self.params.q_moduli, self.params.n), self.q_idx, True)
        e = self._gaussian(self.q_idx)
        return PublicKey(e - a * sk.poly.keep(self.q_idx), a)

    def relin_key(self, sk: SecretKey) -> SwitchingKey:
        s = sk.poly.data
        return self._switching_key(sk, (s * s) % self.ring.q_column(self.all_idx))

    def galois_keys(self, sk: SecretKey, steps=(), conjugation: bool = False, progress=None) -> GaloisKeys:
        """One switching key per Galois element; ``progress(done, total, label)`` after each, if given."""
        n = self.params.n
        steps = tuple(sorted({int(k) for k in steps}))
        elements = {galois_element(k, n) for k in steps if k % (n // 2)}
        if conjugation:
            elements.add(conjugation_element(n))
        keys = {}
        for g in sorted(elements):
            # stored form σ_g^-1(k) of the key k from σ_g(s) to s, generated directly: σ_g^-1 maps a uniform
            # a and a Gaussian e to the same distributions, so σ_g^-1(k) = (-a'·σ_g^-1(s) + e' + P·s, a')
            # is a key from s to σ_g^-1(s) with fresh a', e' (no permutation of the key's rows)
            g_inv = pow(g, -1, 2 * n)
            keys[g] = make_switching_key(self.params, self.ring, self.sampler, sk.poly.automorphism(g_inv).data,
                                         sk.poly.data)
            if progress is not None:
                progress(len(keys), len(elements), f"Galois element {g}")
        return GaloisKeys(keys, steps, bool(conjugation))

    def _switching_key(self, sk: SecretKey, s_from: np.ndarray) -> SwitchingKey:
        return make_switching_key(self.params, self.ring, self.sampler, sk.poly.data, s_from)

    def _gaussian(self, idx) -> RNSPoly:
        return RNSPoly.from_ints(self.ring, self.sampler.gaussian(self.params.n, ERROR_SIGMA), idx, is_ntt=True)


class Encryptor:
    """Public-key encryption (or secret-key encryption when given ``secret_key``, lower noise)."""

    def __init__(self, params, ring, sampler, public_key: PublicKey, secret_key: SecretKey | None = None):
        self.params, self.ring, self.sampler = params, ring, sampler
        self.public_key, self.secret_key = public_key, secret_key

    def encrypt(self, pt: Plaintext) -> tuple[RNSPoly, RNSPoly]:
        """(c0, c1) over pt's primes, NTT form, decrypting to pt.poly + small noise."""
        idx = pt.poly.idx
        n = self.params.n
        e0 = RNSPoly.from_ints(self.ring, self.sampler.gaussian(n, ERROR_SIGMA), idx, is_ntt=True)
        if self.secret_key is not None:
            a = RNSPoly(self.ring, self.sampler.uniform([self.ring.moduli[i] for i in idx], n), idx, True)
            return pt.poly + e0 - a * self.secret_key.poly.keep(idx), a
        u = RNSPoly.from_ints(self.ring, self.sampler.ternary(n), idx, is_ntt=True)
        e1 = RNSPoly.from_ints(self.ring, self.sampler.gaussian(n, ERROR_SIGMA), idx, is_ntt=True)
        b, a = self.public_key.b.keep(idx), self.public_key.a.keep(idx)
        c0 = b * u + e0 + pt.poly
        del e0                      # fewer temporaries alive at once: fewer fresh pages per encryption
        return c0, a * u + e1


class Decryptor:
    """m = c0 + c1·s (+ c2·s²), returned as centered coefficients in float64."""

    def __init__(self, params, ring, secret_key: SecretKey | None):
        self.params, self.ring, self.secret_key = params, ring, secret_key

    def decrypt(self, parts) -> np.ndarray:
        if self.secret_key is None:
            raise KeyMissingError("this is a public context: it holds no secret key and cannot decrypt "
                                  "(decrypt with the context that ran keygen)")
        idx = parts[0].idx
        s = self.secret_key.poly.keep(idx)
        acc, power = parts[0], s
        for part in parts[1:]:
            acc = acc + part * power
            power = power * s
        return centered_coefficients(acc.to_coeff().data, acc.moduli)


def centered_coefficients(residues: np.ndarray, moduli) -> np.ndarray:
    """float64 values of the centered integers x ∈ (-Q/2, Q/2] with x ≡ residues[i] mod moduli[i].

    Balanced mixed-radix (Garner) digits x = a_0 + a_1·q_0 + a_2·q_0·q_1 + ..., |a_t| <= q_t/2; the
    digits of a small x vanish above its size, so the loop stops as soon as the remainder is zero, and
    the float sum has no cancellation.  Exact up to the final float64 rounding.
    """
    moduli = [int(q) for q in moduli]
    rest = np.array(residues, dtype=np.uint64)
    q_col = np.array(moduli, dtype=np.uint64)[:, None]
    digits = []
    for t, q_t in enumerate(moduli):
        r = rest[t].astype(np.int64)
        a_t = np.where(r > q_t // 2, r - q_t, r)
        digits.append(a_t)
        if t + 1 == len(moduli):
            break
        tail_q = q_col[t + 1:]
        inv = np.array([inv_mod(q_t, q) for q in moduli[t + 1:]], dtype=np.uint64)[:, None]
        a_mod = np.mod(a_t[None, :], tail_q.astype(np.int64)).astype(np.uint64)
        rest[t + 1:] = (rest[t + 1:] + tail_q - a_mod) % tail_q * inv % tail_q
        if not rest[t + 1:].any():
            break
    value = digits[-1].astype(np.float64)
    for t in range(len(digits) - 2, -1, -1):
        value = value * float(moduli[t]) + digits[t]
    return value


def check_same_context(obj, fingerprint: bytes, key_id: bytes | None, what: str):
    """ContextMismatchError unless ``obj`` was made under these parameters (and this key set)."""
    if obj.fingerprint != fingerprint:
        raise ContextMismatchError(f"{what} was made under parameters {obj.fingerprint.hex()[:12]}…, "
                                   f"this context has parameters {fingerprint.hex()[:12]}…")
    if key_id is not None and getattr(obj, "key_id", key_id) != key_id:
        raise ContextMismatchError(f"{what} was encrypted under key set {obj.key_id.hex()[:12]}…, "
                                   f"this context holds key set {key_id.hex()[:12]}…")


def check_level(level, max_level: int, name: str = "level") -> int:
    if isinstance(level, bool) or not isinstance(level, (int, np.integer)) or not 0 <= level <= max_level:
        raise LevelError(f"{name}={level!r} not in [0, {max_level}]")
    return int(level)


# -- bytes -------------------------------------------------------------------------------------------
def ciphertext_to_bytes(ct) -> bytes:
    meta = {"level": ct.level, "scale": ct.scale, "length": ct.length, "is_complex": ct.is_complex,
            "key_id": ct.key_id.hex()}
    return pack("ciphertext", ct.fingerprint, meta, [residue_array(np.stack([p.data for p in ct.parts]))])


def _check_context(ctx):
    """``ctx`` must be a CKKSContext (checked by what this module uses of it: parameters, ring, key set id)."""
    if not (isinstance(getattr(ctx, "params", None), CKKSParameters) and hasattr(ctx, "ring")
            and hasattr(ctx, "key_id") and hasattr(ctx, "evaluator")):
        raise ParameterError(f"ctx must be a CKKSContext, got {type(ctx).__name__}")


def ciphertext_from_bytes(blob, ctx):
    """A ciphertext for ``ctx`` (a CKKSContext); its evaluator is attached."""
    _check_context(ctx)
    return _read_ciphertext(blob, ctx.params, lambda key_id: (check_key_id(key_id, ctx.key_id, "ciphertext")
                                                              or (ctx.ring, ctx.evaluator)))


# -- pickling: a weak, process-wide index of the live public contexts by key set -------------------------------
_PUBLIC_CONTEXTS: "dict[bytes, weakref.WeakSet]" = {}
_RINGS: "weakref.WeakValueDictionary[bytes, RingContext]" = weakref.WeakValueDictionary()
_INDEX_LOCK = threading.Lock()  # Dask workers may unpickle on several threads at once


def register_public_context(ctx) -> None:
    """Note a public context (no secret key) so that ciphertexts unpickled in this process while it lives find
    its evaluator (held weakly: the index never keeps a context alive)."""
    with _INDEX_LOCK:
        for key in [k for k, live in _PUBLIC_CONTEXTS.items() if not live]:
            del _PUBLIC_CONTEXTS[key]
        _PUBLIC_CONTEXTS.setdefault(bytes(ctx.key_id), weakref.WeakSet()).add(ctx)


def live_public_context(key_id: bytes, params):
    """The live public context of key set ``key_id`` and these parameters in this process, or None."""
    with _INDEX_LOCK:
        live = list(_PUBLIC_CONTEXTS.get(bytes(key_id), ()))
    return next((ctx for ctx in live if ctx.params == params), None)


def _live_ring(params):
    """A ring of ``params`` already in use in this process (a live context's or an unpickled ciphertext's),
    else a new one (its NTT tables take milliseconds)."""
    with _INDEX_LOCK:
        ring = _RINGS.get(params.fingerprint)
        if ring is None:
            ring = next((c.ring for live in _PUBLIC_CONTEXTS.values() for c in list(live) if c.params == params),
                        None) or RingContext(params.n, params.moduli)
            _RINGS[params.fingerprint] = ring
        return ring


def ciphertext_from_pickle(blob, params_blob):
    """Inverse of ``Ciphertext.__reduce__``: attached to a live public context of its key set, else detached."""
    params = parameters_from_bytes(params_blob)

    def resolve(key_id):
        ctx = live_public_context(key_id, params)
        return (_live_ring(params), None) if ctx is None else (ctx.ring, ctx.evaluator)
    return _read_ciphertext(blob, params, resolve)


def _read_ciphertext(blob, params, resolve):
    """A ciphertext from its record; ``resolve(key_id) -> (ring, evaluator or None)`` (may raise on a foreign
    key set). A detached ciphertext (no evaluator) keeps ``params``."""
    _, meta, arrays = unpack(blob, "ciphertext", params.fingerprint)
    key_id = key_id_of(meta)
    ring, evaluator = resolve(key_id)
    level = level_of(meta, params)
    scale, length, is_complex = value_meta(meta, params)
    if len(arrays) != 1 or arrays[0].ndim != 3 or arrays[0].shape[0] not in (2, 3):
        raise SerializationError("a ciphertext holds one array of 2 or 3 parts")
    idx = tuple(range(params.limbs_at(level)))
    shape = (arrays[0].shape[0], len(idx), params.n)
    data = checked_residues(arrays[0], shape, params.q_moduli[: len(idx)], "ciphertext data")
    parts = tuple(RNSPoly(ring, d, idx, True) for d in data)
    return Ciphertext(parts, level, scale, length, is_complex, params.fingerprint, key_id, evaluator,
                      params if evaluator is None else None)


def plaintext_to_bytes(pt) -> bytes:
    meta = {"level": pt.level, "scale": pt.scale, "length": pt.length, "is_complex": pt.is_complex}
    return pack("plaintext", pt.fingerprint, meta, [residue_array(pt.poly.data)])


def plaintext_from_bytes(blob, ctx):
    _check_context(ctx)
    params = ctx.params
    _, meta, arrays = unpack(blob, "plaintext", params.fingerprint)
    level = level_of(meta, params)
    scale, length, is_complex = value_meta(meta, params)
    if len(arrays) != 1:
        raise SerializationError("a plaintext holds exactly one array")
    idx = tuple(range(params.limbs_at(level)))
    data = checked_residues(arrays[0], (len(idx), params.n), params.q_moduli[: len(idx)], "plaintext data")
    return Plaintext(RNSPoly(ctx.ring, data, idx, True), level, scale, length, is_complex, params.fingerprint)


_CODECS = {"plaintext": (plaintext_to_bytes, plaintext_from_bytes),
           "ciphertext": (ciphertext_to_bytes, ciphertext_from_bytes)}
