"""Backends that execute a :class:`~tensor_ops.plan.Plan` step by step.

Both expose the same small instruction set (``rotate``, ``rotate_many``, ``add``, ``sub``, ``negate``,
``multiply``, ``rescale``, ``constant``) with the rotation convention of the CKKS evaluator:
``rotate(x, k)`` is a cyclic *left* rotation, ``rotate(x, k) == np.roll(x, -k)``.

* :class:`PlainBackend`: a "ciphertext" is a numpy slot vector; rotations are ``np.roll``, masks are
  products, rescale is the identity. It runs the very same plan, so a packing bug shows without keys.
  It can also check that every rotation used has a key (``rotations=``) and counts the operations.
* :class:`CKKSBackend`: the CKKS evaluator of a context (public material is enough). Plaintext
  constants (masks, diagonals) are encoded once per (vector, level) and reused.
"""
from __future__ import annotations

import hashlib
from collections import Counter
from math import prod

import numpy as np

from crypto.errors import KeyMissingError, ShapeError

__all__ = ["PlainBackend", "CKKSBackend"]


class PlainBackend:
    """numpy slot vectors standing for ciphertexts (no encryption, exact up to float rounding)."""

    name = "plain"

    def __init__(self, slots=None, rotations=None):
        """``slots``: a power of two, or CKKSParameters (their slot count); None adopts the slot count
        of the first plan run. ``rotations``: when given, a rotation without a "key" raises
        KeyMissingError, as it would under encryption."""
        slots = getattr(slots, "slots", slots)
        if slots is not None and (isinstance(slots, bool) or int(slots) < 1 or int(slots) & (int(slots) - 1)):
            raise ShapeError(f"slots={slots} must be a power of two")
        self.slots = None if slots is None else int(slots)
        self._rotations = None if rotations is None else tuple(int(k) for k in rotations)
        self.counts = Counter()
        self.plans: dict = {}  # plans already made for this backend (see tensor._cached)

    @property
    def keys(self):
        if self._rotations is None or self.slots is None:
            return None
        return frozenset(k % self.slots for k in self._rotations)

    def run(self, plan, *arrays, on_step=None) -> np.ndarray:
        """Execute ``plan`` on numpy arrays (packed with the plan's input layouts) and return the numpy
        result: the very steps the encrypted run performs, rotations as np.roll, masks as products.
        ``on_step(step, slot_vector)`` sees every intermediate register."""
        if self.slots is None:
            self.slots = plan.slots
        if self.slots != plan.slots:
            raise ShapeError(f"plan has {plan.slots} slots but this backend has {self.slots}")
        return plan.simulate(*arrays, backend=self, on_step=on_step)

    execute = run

    def _check(self, k):
        keys = self.keys
        if keys is not None and k % self.slots and k % self.slots not in keys:
            raise KeyMissingError(f"rotation by {k} needs a Galois key; keys exist for {sorted(self.keys)}")

    def encrypt(self, vector) -> np.ndarray:
        if self.slots is None:
            raise ShapeError("PlainBackend(slots=None) cannot encrypt before it knows its slot count")
        vec = np.asarray(vector)
        if vec.ndim != 1 or len(vec) > self.slots:
            raise ShapeError(f"vector of shape {vec.shape} does not fit {self.slots} slots")
        out = np.zeros(self.slots, dtype=np.complex128 if np.iscomplexobj(vec) else np.float64)
        out[:len(vec)] = vec
        return out

    def decrypt(self, x) -> np.ndarray:
        return np.asarray(x)

    def rotate(self, x, k):
        self._check(k)
        self.counts["rotations"] += 1
        return np.roll(x, -int(k))

    def rotate_many(self, x, ks):
        for k in ks:
            self._check(k)
        self.counts["hoisted_rotations"] += len(ks)
        return {int(k): np.roll(x, -int(k)) for k in ks}

    def add(self, a, b):
        return a + b

    def sub(self, a, b):
        return a - b

    def negate(self, a):
        return -a

    def multiply(self, a, b):
        self.counts["multiplies"] += 1
        return a * b

    def rescale(self, x):
        return x

    def constant(self, vec):
        return vec


class CKKSBackend:
    """Executes plans on ciphertexts with a context's evaluator (``ctx.evaluator``).

    Needs only public material: rotation keys for ``plan.rotations()``, the relinearization key for
    ciphertext products. Plaintext constants are encoded at the ciphertext's level and cached.
    """

    name = "ckks"

    def __init__(self, ctx, cache_size: int = 2048):
        self.ctx = ctx
        self.cache_size = int(cache_size)
        self.ev = ctx.evaluator
        self.slots = int(ctx.params.slots)
        self._encoded: dict = {}
        self.plans: dict = {}  # plans already made for this backend (see tensor._cached)

    def encrypt(self, vector):
        return self.ctx.encrypt(np.asarray(vector))

    def run(self, plan, *operands):
        """Execute ``plan`` on CipherTensors / numpy arrays; returns a CipherTensor."""
        from .tensor import run_plan  # tensor.py builds on this module
        return run_plan(plan, list(operands))

    execute = run

    def decrypt(self, x) -> np.ndarray:
        return np.asarray(self.ctx.decrypt(x))

    def rotate(self, x, k):
        return self.ev.rotate(x, int(k))

    def rotate_many(self, x, ks):
        ks = [int(k) for k in ks]
        hoisted = getattr(self.ev, "rotate_hoisted", None)
        if hoisted is None:
            return {k: self.ev.rotate(x, k) for k in ks}
        return dict(hoisted(x, ks))

    def add(self, a, b):
        return self.ev.add(a, b)

    def sub(self, a, b):
        return self.ev.sub(a, b)

    def negate(self, a):
        return self.ev.neg(a)

    def multiply(self, a, b):
        if isinstance(b, _Constant):
            b = self._encode(b, a)
        return self.ev.mul(a, b)

    def rescale(self, x):
        return self.ev.rescale(x)

    def constant(self, vec):
        return _Constant(np.asarray(vec))

    def _encode(self, const: "_Constant", ct):
        """Encode a constant at the ciphertext's level and at the scale of that level's primes, so the
        rescale that follows restores the ciphertext's scale (cached by content and level)."""
        key = (const.digest, ct.level)
        pt = self._encoded.get(key)
        if pt is None:
            if len(self._encoded) >= self.cache_size:
                self._encoded.pop(next(iter(self._encoded)))
            params = self.ctx.params
            scale = float(prod(params.q_levels[ct.level])) if ct.level > 0 else params.scale
            pt = self._encoded[key] = self.ev.encode(const.vec, ct.level, scale)
        return pt


class _Constant:
    """A plaintext slot vector with a content digest (the cache key of its encodings)."""

    __slots__ = ("vec", "digest")

    def __init__(self, vec: np.ndarray):
        self.vec = vec
        self.digest = hashlib.blake2b(np.ascontiguousarray(vec).tobytes(), digest_size=16).digest()
