"""A plaintext stand-in for the CKKS context API (slots as numpy vectors, levels counted, no noise).

It checks packing and rotation logic independently of the real scheme: rotate is np.roll(v, -k), every
rescale consumes a level, and an operation needing a missing rotation key fails like the real one.
"""
from dataclasses import dataclass

import numpy as np

from crypto.errors import KeyMissingError, LevelError


@dataclass(frozen=True)
class SimCiphertext:
    values: np.ndarray
    level: int
    pending: int = 0  # multiplications not yet rescaled
    scale: float = 1.0  # not tracked: the stand-in has no noise, so a plaintext's scale changes nothing


class SimEvaluator:
    def __init__(self, slots, rotations):
        self.slots, self.rotation_steps = slots, set(rotations)

    def from_host(self, ct):  # crypto.ckks.evaluator_protocol: the stand-in's ciphertexts are its own
        return ct

    def to_host(self, ct):
        return ct

    def _vec(self, x):
        if isinstance(x, SimCiphertext):
            return x.values
        return np.resize(np.asarray(x, dtype=np.float64), self.slots) if np.ndim(x) else float(x)

    def _level(self, *xs):
        return min(x.level for x in xs if isinstance(x, SimCiphertext))

    def add(self, a, b):
        return SimCiphertext(self._vec(a) + self._vec(b), self._level(a, b), max(getattr(a, "pending", 0), getattr(b, "pending", 0)))

    def neg(self, a):
        return SimCiphertext(-a.values, a.level, a.pending)

    def mul(self, a, b):
        pending = a.pending + getattr(b, "pending", 0) + 1
        return SimCiphertext(self._vec(a) * self._vec(b), self._level(a, b), pending)

    def rescale(self, a):
        if a.level == 0:
            raise LevelError("rescale at level 0")
        return SimCiphertext(a.values, a.level - 1, max(a.pending - 1, 0))

    def mul_rescale(self, a, b):
        return self.rescale(self.mul(a, b))

    def rotate(self, a, k):
        if k % self.slots and k % self.slots not in {s % self.slots for s in self.rotation_steps}:
            raise KeyMissingError(f"no rotation key for step {k}")
        return SimCiphertext(np.roll(a.values, -k), a.level, a.pending)

    def rotate_hoisted(self, a, steps):
        return {k: self.rotate(a, k) for k in steps}

    def to_level(self, a, level):
        return SimCiphertext(a.values, level, a.pending)


class SimContext:
    def __init__(self, slots, rotations=(), max_level=3):
        self.slots, self.max_level = slots, max_level
        self.evaluator = SimEvaluator(slots, rotations)
        self.rotation_steps = tuple(rotations)

    def encode(self, values, level=None, scale=None):
        return np.resize(np.asarray(values, dtype=np.float64), self.slots)

    def encrypt(self, values, level=None):
        return SimCiphertext(np.resize(np.asarray(values, dtype=np.float64), self.slots),
                             self.max_level if level is None else level)

    def decrypt(self, ct):
        return ct.values.copy()
