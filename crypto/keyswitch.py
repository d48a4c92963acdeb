"""Hybrid key switching (special primes P, dnum digits), relinearization and Galois keys, hoisting.

A switching key from s' to s holds, for each digit D_j of the Q primes (``params.digits``), an RLWE
sample over Q·P in NTT form:  b_j = -a_j·s + e_j + P·[Q/Q_j · (Q/Q_j)^-1 mod Q_j]·s'.  In RNS the
gadget factor is P mod q_i on the primes of D_j and 0 elsewhere.  To switch c (NTT form over Q_ℓ):

1. ModUp: for each digit, the residues of c on D_j ∩ Q_ℓ are extended to the other primes of Q_ℓ·P
   by fast basis conversion (its u·Q_j error is annihilated by the gadget);
2. inner product Σ_j d_j·(b_j, a_j) over Q_ℓ·P, in NTT form;
3. ModDown: divide by P and round back to Q_ℓ.

(Han & Ki, "Better bootstrapping for approximate homomorphic encryption", CT-RSA 2020; Kim, Polyakov,
Zucca, "Revisiting homomorphic encryption schemes for finite fields", ASIACRYPT 2021.)  Hoisting
(Halevi & Shoup, "Faster homomorphic linear transformations in HElib", CRYPTO 2018): the ModUp digits
of c are computed once; X -> X^g permutes them in NTT form, so many rotations share one
decomposition.  ModDown can also divide by P·q_top at once, fusing the rescale of a product.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numba
import numpy as np

from .errors import KeyMissingError, ParameterError
from .modarith import shoup_precompute
from .ring import RNSPoly

_U32 = np.uint64(32)


@numba.njit(cache=True, inline="always")
def _mulshoup(x, w, ws, q):
    t = (x * ws) >> _U32
    r = x * w - t * q
    return min(r, r - q)  # unsigned wrap-around: r - q is huge exactly when r < q


@numba.njit(cache=True)
def _inner_product(digits, digit_ids, key_b, key_bs, key_a, key_as, key_rows, q, perm):
    """out_t[r, c] = Σ_j digits[j, r, perm[c]] · key_t[digit_ids[j], key_rows[r], c] mod q[r], t = b, a.

    The key is a constant, so its Shoup companions make each product one 32x32 high multiply."""
    n_digits, n_rows, n = digits.shape
    out_b = np.zeros((n_rows, n), dtype=np.uint64)
    out_a = np.zeros((n_rows, n), dtype=np.uint64)
    for r in range(n_rows):
        qr = q[r]
        kr = key_rows[r]
        ob = out_b[r]
        oa = out_a[r]
        for j in range(n_digits):
            kj = digit_ids[j]
            d = digits[j, r]
            kb, kbs, ka, kas = key_b[kj, kr], key_bs[kj, kr], key_a[kj, kr], key_as[kj, kr]
            for c in range(n):
                x = d[perm[c]]
                s = ob[c] + _mulshoup(x, kb[c], kbs[c], qr)
                ob[c] = min(s, s - qr)
                s = oa[c] + _mulshoup(x, ka[c], kas[c], qr)
                oa[c] = min(s, s - qr)
    return out_b, out_a


def galois_element(step: int, n: int) -> int:
    """The Galois element of a left rotation by ``step`` slots: 5^(step mod N/2) mod 2N."""
    return pow(5, step % (n // 2), 2 * n)


def conjugation_element(n: int) -> int:
    """X -> X^(2N-1) = X^-1: complex conjugation of every slot."""
    return 2 * n - 1


@dataclass(frozen=True, eq=False)
class SwitchingKey:
    """dnum RLWE samples (b_j, a_j) over Q·P in NTT form, each of shape (dnum, len(moduli), n)."""

    b: np.ndarray = field(repr=False)
    a: np.ndarray = field(repr=False)
    moduli: tuple[int, ...] = field(repr=False)
    b_shoup: np.ndarray = field(init=False, repr=False)
    a_shoup: np.ndarray = field(init=False, repr=False)

    def __post_init__(self):
        q = np.array(self.moduli, dtype=np.uint64)[None, :, None]
        for name in ("b", "a"):
            arr = np.ascontiguousarray(getattr(self, name), dtype=np.uint64)
            if arr.ndim != 3 or arr.shape[1] != len(self.moduli):
                raise ParameterError(f"switching key part {name} has shape {arr.shape}; "
                                     f"expected (dnum, {len(self.moduli)}, n)")
            companion = shoup_precompute(arr, q)
            for a in (arr, companion):
                a.setflags(write=False)
            object.__setattr__(self, name, arr)
            object.__setattr__(self, f"{name}_shoup", companion)


def make_switching_key(params, ring, sampler, s_ntt: np.ndarray, s_from_ntt: np.ndarray) -> SwitchingKey:
    """A key from s' to s: s (NTT over Q ∪ P) and s' (NTT over at least the Q primes)."""
    q = ring.q_column(range(len(params.moduli)))
    big_p = math.prod(params.p_moduli)
    b = np.empty((len(params.digits), len(params.moduli), params.n), dtype=np.uint64)
    a = np.empty_like(b)
    for j, digit in enumerate(params.digits):
        a[j] = sampler.uniform(params.moduli, params.n)
        e = ring.ntt(np.mod(sampler.gaussian(params.n)[None, :], q.astype(np.int64)).astype(np.uint64),
                     tuple(range(len(params.moduli))))
        b[j] = (e + q - a[j] * s_ntt % q) % q
        rows = list(digit)
        gadget = np.array([big_p % params.moduli[i] for i in rows], dtype=np.uint64)[:, None]
        b[j, rows] = (b[j, rows] + gadget * s_from_ntt[rows] % q[rows]) % q[rows]
    return SwitchingKey(b, a, tuple(params.moduli))


@dataclass(frozen=True, eq=False)
class _LevelPlan:
    """Index bookkeeping of key switching at one level (positions into the Q_ℓ ∪ P basis)."""

    ext_idx: tuple[int, ...]                 # ring indices of Q_ℓ (positions 0..L-1) then P
    digit_ids: np.ndarray                    # the key digits that meet Q_ℓ
    digit_idx: tuple[tuple[int, ...], ...]   # each digit's primes within Q_ℓ (ring index = position)
    target_pos: tuple[np.ndarray, ...]       # positions each digit is extended to
    lifted_idx: tuple[int, ...]              # ring indices of all extensions, concatenated
    ext_q: np.ndarray
    p_mod_q: np.ndarray                      # P mod q_i on Q_ℓ, to lift a part by P before ModDown


class KeySwitcher:
    """Hybrid key switching for one parameter set on one ring; per-level plans cached on the object."""

    def __init__(self, params, ring):
        self.params, self.ring = params, ring
        self.p_idx = tuple(range(len(params.q_moduli), len(params.moduli)))
        self.identity = np.arange(params.n, dtype=np.int64)
        self._plans: dict[int, _LevelPlan] = {}

    def plan(self, level: int) -> _LevelPlan:
        if level not in self._plans:
            self._plans[level] = self._make_plan(level)
        return self._plans[level]

    def _make_plan(self, level: int) -> _LevelPlan:
        limbs = self.params.limbs_at(level)
        ext = tuple(range(limbs)) + self.p_idx
        ids, digit_idx, targets, lifted = [], [], [], []
        for j, digit in enumerate(self.params.digits):
            d = tuple(i for i in digit if i < limbs)
            if d:
                pos = np.array([k for k, i in enumerate(ext) if i not in d], dtype=np.int64)
                ids.append(j)
                digit_idx.append(d)
                targets.append(pos)
                lifted.extend(ext[k] for k in pos)
        moduli = self.ring.moduli
        big_p = math.prod(moduli[i] for i in self.p_idx)
        return _LevelPlan(ext_idx=ext, digit_ids=np.array(ids, dtype=np.int64), digit_idx=tuple(digit_idx),
                          target_pos=tuple(targets), lifted_idx=tuple(lifted),
                          ext_q=np.array([moduli[i] for i in ext], dtype=np.uint64),
                          p_mod_q=np.array([big_p % moduli[i] for i in range(limbs)], dtype=np.uint64))

    def decompose(self, c: RNSPoly) -> np.ndarray:
        """ModUp: digits (J, |Q_ℓ ∪ P|, n) of c (NTT form over Q_ℓ), each in NTT form over Q_ℓ ∪ P."""
        level = self.params.level_of(len(c.idx))
        plan, ring = self.plan(level), self.ring
        c_coeff = c.to_coeff().data
        out = np.empty((len(plan.digit_idx), len(plan.ext_idx), ring.n), dtype=np.uint64)
        lifted = []
        for j, (d, pos) in enumerate(zip(plan.digit_idx, plan.target_pos)):
            out[j, list(d)] = c.data[list(d)]
            lifted.append(ring.convert(c_coeff[list(d)], d, tuple(plan.ext_idx[k] for k in pos)))
        lifted_ntt = ring.ntt(np.concatenate(lifted), plan.lifted_idx)
        start = 0
        for j, pos in enumerate(plan.target_pos):
            out[j, pos] = lifted_ntt[start: start + len(pos)]
            start += len(pos)
        return out

    def inner_product(self, digits: np.ndarray, key: SwitchingKey, level: int,
                      perm: np.ndarray | None = None) -> tuple[RNSPoly, RNSPoly]:
        """Σ_j σ(digits_j) · key_j over Q_ℓ ∪ P (NTT form); ``perm`` is σ's NTT-form permutation."""
        plan = self.plan(level)
        rows = np.array(plan.ext_idx, dtype=np.int64)
        b, a = _inner_product(digits, plan.digit_ids, key.b, key.b_shoup, key.a, key.a_shoup,
                              rows, plan.ext_q, self.identity if perm is None else perm)
        return RNSPoly(self.ring, b, plan.ext_idx, True), RNSPoly(self.ring, a, plan.ext_idx, True)

    def lift_by_p(self, acc: RNSPoly, c: RNSPoly) -> RNSPoly:
        """acc + P·c (c over Q_ℓ, acc over Q_ℓ ∪ P, both NTT), so that a later ÷P leaves c + acc/P."""
        plan = self.plan(self.params.level_of(len(c.idx)))
        limbs = len(c.idx)
        q = plan.ext_q[:limbs, None]
        data = acc.data.copy()
        data[:limbs] = (data[:limbs] + c.data * plan.p_mod_q[:, None] % q) % q
        return RNSPoly(self.ring, data, acc.idx, True)

    def mod_down(self, x: RNSPoly, extra: int = 0) -> RNSPoly:
        """round(x / P) over Q_ℓ, or with ``extra`` > 0 round(x / (P · last ``extra`` Q primes))."""
        return x.rescale(len(self.p_idx) + extra)

    def switch(self, c: RNSPoly, key: SwitchingKey) -> tuple[RNSPoly, RNSPoly]:
        """(c0', c1') over Q_ℓ with c0' + c1'·s ≈ c·s' (s' the key's source secret)."""
        level = self.params.level_of(len(c.idx))
        b, a = self.inner_product(self.decompose(c), key, level)
        return self.mod_down(b), self.mod_down(a)


@dataclass(frozen=True, eq=False)
class GaloisKeys:
    """Switching keys from σ_g(s) to s, by Galois element g; ``steps`` are the rotations they serve."""

    keys: dict = field(repr=False)
    steps: tuple[int, ...]
    conjugation: bool

    def key_for_step(self, step: int, n: int) -> SwitchingKey:
        g = galois_element(step, n)
        if g not in self.keys:
            raise KeyMissingError(f"no Galois key for rotation step {step}; this context has keys for steps "
                                  f"{sorted(self.steps)} (pass rotations=[...] to CKKSContext.keygen)")
        return self.keys[g]

    def conjugation_key(self, n: int) -> SwitchingKey:
        if not self.conjugation:
            raise KeyMissingError("no Galois key for conjugation; pass conjugation=True to CKKSContext.keygen")
        return self.keys[conjugation_element(n)]
