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

from crypto.ckks.evaluator import ProductSum
from crypto.errors import KeyMissingError, ShapeError
from crypto.rlwe import Ciphertext

__all__ = ["PlainBackend", "CKKSBackend", "has_power_of_two_keys", "multiply_then_add", "rotation_route"]

#: slot count a PlainBackend() without one takes when it first packs a tensor: the N14 preset's
DEFAULT_PLAIN_SLOTS = 2**13


def _powers(slots: int) -> list[int]:
    return [1 << i for i in range(slots.bit_length() - 1)]


def has_power_of_two_keys(keyed, slots: int) -> bool:
    """Whether the keys hold every power of two below ``slots`` (all positive or all negative steps):
    SEAL's default Galois key set, from which any rotation is composed."""
    keys = {int(k) % slots for k in keyed}
    return all(p in keys for p in _powers(slots)) or all(-p % slots in keys for p in _powers(slots))


def rotation_route(step: int, keyed, slots: int) -> tuple[int, ...] | None:
    """Keyed steps (each in [1, slots)) summing to ``step`` mod ``slots`` from a power-of-two key set:
    the binary digits of step (positive powers), of −step (negative powers), or with both its
    non-adjacent form (fewest terms); None when the keys are not a power-of-two set.

    The backends compose only from such sets; keys made from ``plan.rotations()`` must hold every
    step the plan uses."""
    keys = {int(k) % slots for k in keyed}
    target = int(step) % slots
    pos = all(p in keys for p in _powers(slots))
    neg = all(-p % slots in keys for p in _powers(slots))
    routes = []
    if pos:
        routes.append([p for p in _powers(slots) if target & p])
    if neg:
        routes.append([-p % slots for p in _powers(slots) if (-target % slots) & p])
    if pos and neg:
        naf, n, bit = [], target, 1
        while n:
            if n & 1:
                digit = 2 - (n & 3)           # ±1, chosen so that the next bit becomes 0
                naf.append(digit * bit % slots)
                n -= digit
            n >>= 1
            bit <<= 1
        routes.append([k for k in naf if k])
    return tuple(min(routes, key=len)) if routes else None


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

    def ensure_slots(self) -> int:
        """The slot count, adopting ``DEFAULT_PLAIN_SLOTS`` when none was given (or learnt from a plan)."""
        if self.slots is None:
            self.slots = DEFAULT_PLAIN_SLOTS
        return self.slots

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
        if keys is not None and k % self.slots and k % self.slots not in keys \
                and not has_power_of_two_keys(keys, self.slots):
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


def multiply_then_add(be, acc, a, b):
    """``acc + a b`` by the backend's ``multiply`` and ``add``, a pending lazy sum (``relinearize_sum``, where the
    backend has one) closed first: a product that does not join a lazy sum (``MultiplyAccumulate``)."""
    close = getattr(be, "relinearize_sum", None)
    acc = acc if close is None else close(acc)
    product = be.multiply(a, b)
    return product if acc is None else be.add(acc, product)


class CKKSBackend:
    """Executes plans on ciphertexts with a context's evaluator (``ctx.evaluator``).

    Needs only public material: rotation keys for ``plan.rotations()`` (or a power-of-two key set, from
    which the other steps are composed, as SEAL does), the relinearization key for ciphertext
    products. Plaintext constants are encoded at the ciphertext's level and cached.
    """

    name = "ckks"

    def __init__(self, ctx, cache_size: int = 2048):
        self.ctx = ctx
        self.cache_size = int(cache_size)
        self.ev = ctx.evaluator
        self.slots = int(ctx.params.slots)
        steps = getattr(ctx, "rotation_steps", None)      # None: keys unknown, every rotation goes through
        self._keys = None if steps is None else frozenset(int(k) % self.slots for k in steps)
        self._compose = steps is not None and has_power_of_two_keys(self._keys, self.slots)
        self._routes: dict = {}     # rotation step without a key -> keyed steps composing it
        self._encoded: dict = {}
        self.plans: dict = {}  # plans already made for this backend (see tensor._cached)

    def encrypt(self, vector):
        return self.ctx.encrypt(np.asarray(vector))

    def run(self, plan, *operands):
        """Execute ``plan`` on CipherTensors / numpy arrays; returns a CipherTensor (``plan.execute``)."""
        return plan.execute(self, *operands)

    execute = run

    def decrypt(self, x) -> np.ndarray:
        return np.asarray(self.ctx.decrypt(x))

    def _keyed(self, k: int) -> bool:
        return not self._compose or k % self.slots == 0 or k % self.slots in self._keys

    def rotate(self, x, k):
        """Rotation by ``k`` with its Galois key, else (power-of-two key sets only) composed from the
        keys present; otherwise the evaluator's KeyMissingError names the step and the keys."""
        k = int(k)
        if self._keyed(k):
            return self.ev.rotate(x, k)
        if k not in self._routes:
            self._routes[k] = rotation_route(k, self._keys, self.slots)
        if self._routes[k] is None:             # defensive: a power-of-two set reaches every step
            return self.ev.rotate(x, k)         # raises KeyMissingError naming the step and the keys
        for step in self._routes[k]:
            x = self.ev.rotate(x, step)
        return x

    def rotate_many(self, x, ks):
        ks = [int(k) for k in ks]
        keyed = [k for k in ks if self._keyed(k)]
        out = dict(self.ev.rotate_hoisted(x, keyed)) if keyed else {}
        out.update({k: self.rotate(x, k) for k in ks if k not in out})
        return out

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

    def align_level(self, x, other):
        """``x`` brought down to ``other``'s level where it is higher: its extra primes dropped (no level spent, the
        scale kept), so that the products of a sum that follows meet at one level."""
        if isinstance(x, Ciphertext) and isinstance(other, Ciphertext) and x.level > other.level:
            return self.ev.to_level(x, other.level)
        return x

    def multiply_accumulate(self, acc, a, b):
        """``acc`` + a b for two ciphertexts: on an evaluator with ``mul_accumulate``, two ciphertexts at the sum's
        level are tensored and summed unrelinearized (``relinearize_sum`` closes the sum with one key switch); else, or
        for other operands, ``multiply`` and ``add`` (a pending sum relinearized first)."""
        fused = getattr(self.ev, "mul_accumulate", None)
        if fused is not None and isinstance(a, Ciphertext) and isinstance(b, Ciphertext) and a.level == b.level \
                and (acc is None or isinstance(acc, ProductSum) and acc.level == a.level):
            return fused(acc, a, b)
        return multiply_then_add(self, acc, a, b)

    def relinearize_sum(self, acc):
        """The ciphertext of a ``multiply_accumulate`` sum (itself where it was relinearized already)."""
        return self.ev.relinearize_sum(acc) if isinstance(acc, ProductSum) else acc

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
