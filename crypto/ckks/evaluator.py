"""CKKS evaluation from public material: add, sub, mul, relinearize, rescale, rotate, conjugate.

Operands: a Ciphertext with a Ciphertext, a Plaintext, a numpy vector or a scalar.  Every operation
returns a new ciphertext; inputs are never mutated.  (Cheon, Kim, Kim, Song, ASIACRYPT 2017; RNS
variant: Cheon, Han, Kim, Kim, Song, "A full RNS variant of approximate homomorphic encryption", SAC 2018.)

Alignment rules
---------------
* Levels: the operand at the higher level is dropped to the lower level (dropping primes is free).
* Scales (add/sub): scales within a relative 2^-45 of each other are treated as equal (the error is far
  below the stated precision).  Otherwise the operand at the higher level (at equal levels: the one
  with the smaller scale) is multiplied by the integer c = round(ratio · q_top) and rescaled, landing
  on the other's scale up to a relative 2^-(log q_top) - 1; this costs that operand one level.
  Vectors and scalars are encoded directly at the ciphertext's scale; a Plaintext must match it.
* mul: scales multiply; vectors and scalars are encoded at the scale q_top (the product of the primes
  of the ciphertext's top level), so ``rescale`` restores the ciphertext's scale exactly.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

import hezk.progress
from hezk.threads import parallel

from .._ntt_kernels import (SUM_TERMS, add_permuted_into, mul_int_sum_rows, muladd_scalar_rows, mulmod_scalar_rows,
                            permute_rows)
from ..errors import LevelError, ParameterError, ScaleError
from ..modarith import shoup_precompute
from ..keyswitch import (KeySwitcher, add_permuted_pair_into, conjugation_element, galois_element, muladd_pair,
                         muladd_pairs)
from ..ring import RingContext, RNSPoly, int_residues, scratch_rows
from ..rlwe import Ciphertext, Plaintext, check_level, check_same_context
from .bootstrap import Bootstrapper, as_config, plan_for
from .encoder import CKKSEncoder, as_slot_vector, encoding_period

#: a rescale that would leave a scale below 2^MIN_SCALE_BITS is refused (no precision would be left)
MIN_SCALE_BITS = 10
#: scales closer than this relative difference count as equal in add/sub
SCALE_TOLERANCE = 2.0**-45


@dataclass(frozen=True)
class ProductSum:
    """A sum of ciphertext products before relinearization: the parts (d0, d1, d2) of degree-2 ciphertexts added,
    decrypting to d0 + d1 s + d2 s^2 (``Evaluator.mul_accumulate``, closed by ``Evaluator.relinearize_sum``)."""

    parts: tuple
    level: int
    scale: float
    length: int
    is_complex: bool
    fingerprint: bytes = b""   # the parameters and the key set it was made under (``check_same_context``)
    key_id: bytes | None = None


class Evaluator:
    """Homomorphic operations for one parameter set and one key set (public keys only)."""

    #: its operations may run from several threads at once (per-thread key-switching scratch; caches filled
    #: idempotently): ``rotate_hoisted`` and ``crypto.ckks.linear.bsgs_sum`` spread independent rotations and
    #: giant steps over the threads of ``hezk.threads``
    thread_safe = True

    def __init__(self, params, ring, relin_key, galois_keys, key_id: bytes, encoder: CKKSEncoder | None = None,
                 bootstrap_config=None, encapsulation_keys=None):
        self.params, self.ring = params, ring
        self.bootstrap_config = bootstrap_config
        self.encapsulation_keys = encapsulation_keys     # crypto.ckks.encapsulation, for encapsulating bootstraps
        self._bootstrappers: dict = {}
        self.relin_key, self.galois_keys, self.key_id = relin_key, galois_keys, key_id
        self.fingerprint = params.fingerprint
        self.encoder = encoder or CKKSEncoder(params.n)
        self.switcher = KeySwitcher(params, ring)
        self._monomial_cache: dict = {}
        self._period_encoders: dict = {}    # period d -> the encoder of degree 2d (``encode``'s subring path)
        self._subrings: dict = {}           # (2d, basis) -> its RingContext (``encode_extended(compact=True)``)

    @property
    def rotation_steps(self) -> tuple[int, ...]:
        return self.galois_keys.steps

    # -- helpers ------------------------------------------------------------------------------------
    def _q_idx(self, level: int) -> tuple[int, ...]:
        return tuple(range(self.params.limbs_at(level)))

    def _check(self, ct, what="ciphertext"):
        if not isinstance(ct, Ciphertext):
            raise ParameterError(f"{what} must be a Ciphertext, got {type(ct).__name__}")
        check_same_context(ct, self.fingerprint, self.key_id, what)
        return ct

    def _make(self, parts, level, scale, length, is_complex) -> Ciphertext:
        return Ciphertext(tuple(parts), level, float(scale), length, is_complex, self.fingerprint,
                          self.key_id, self)

    def _top_modulus(self, level: int) -> int:
        return math.prod(self.params.q_levels[level])

    def _log_modulus(self, level: int) -> float:
        return sum(math.log2(q) for q in self.params.q_moduli[: self.params.limbs_at(level)])

    def encode(self, values, level: int, scale: float) -> Plaintext:
        """A vector encoded at ``level`` and exactly ``scale`` (ScaleError if it overflows Q_level). A vector of
        all slots with period d < slots/2 (bootstrapping's diagonals, replicated inputs) is encoded in the
        subring Z[X^(N/2d)]: the 2d-coefficient encoding of one period and its NTT repeated
        (``RNSPoly.from_subring_ints``; the same polynomial as the full encoding, without its float noise)."""
        poly, is_complex = self._encode_poly(values, level, scale, self._q_idx(level))
        length = int(np.size(values)) if np.ndim(values) else 1
        return Plaintext(poly, level, float(scale), length, is_complex, self.fingerprint)

    def encode_extended(self, values, level: int, scale: float, compact: bool = False):
        """The polynomial of ``encode(values, level, scale)`` over Q_level ∪ P, the key-switching basis (rows in the
        order of ``KeySwitcher.plan(level).ext_idx``): the same integer coefficients (below Q_level/2, so exact
        over Q_level·P too), for ``linear_transform_hoisted``, whose products stay over Q·P.  ``compact``: its NTT
        residues as a (rows, n') uint64 array, n' = 2·period for a vector of a short period (the subring
        polynomial's NTT, which the full one repeats: ``RingContext.subring_ntt``), else n' = N."""
        idx = self.switcher.plan(level).ext_idx
        if not compact:
            return self._encode_poly(values, level, scale, idx)[0]
        return self._encode_poly(values, level, scale, idx, compact=True)[0]

    def _encode_poly(self, values, level: int, scale: float, idx, compact: bool = False) -> tuple:
        z, is_complex = as_slot_vector(values, self.params.slots)
        period = encoding_period(values, self.params.slots)
        modulus_bits = self._log_modulus(level)
        if period is not None:
            if period not in self._period_encoders:
                self._period_encoders[period] = CKKSEncoder(2 * period)
            coeffs = self._period_encoders[period].encode(z[:period], scale, modulus_bits=modulus_bits)
            if compact:
                key = (2 * period, tuple(idx))
                if key not in self._subrings:
                    self._subrings[key] = RingContext(2 * period, [self.ring.moduli[i] for i in idx])
                small = int_residues(self.ring, np.asarray(coeffs), idx)
                return self._subrings[key].ntt(small, range(len(idx)), out=small), is_complex
            return RNSPoly.from_subring_ints(self.ring, coeffs, idx), is_complex
        coeffs = self.encoder.encode(values, scale, modulus_bits=modulus_bits)
        poly = RNSPoly.from_ints(self.ring, coeffs, idx, is_ntt=True)
        return (poly.data if compact else poly), is_complex

    def _constant_ints(self, value, level: int, scale: float) -> tuple[int, int]:
        """(round(Re(v)·scale), round(Im(v)·scale)), checked finite and below Q_level/2 (ScaleError)."""
        v = complex(value)
        if not (math.isfinite(v.real) and math.isfinite(v.imag)):
            raise ParameterError(f"scalar={value!r} is not finite")
        bound = self._log_modulus(level) - 1
        largest = max(abs(v.real), abs(v.imag)) * scale
        if largest > 0 and math.log2(largest) >= bound:          # (2.0**bound overflows above 1024 bits)
            raise ScaleError(f"scalar {value!r} at scale 2^{math.log2(scale):.1f} is 2^{math.log2(largest):.1f}; "
                             f"the modulus at level {level} allows < 2^{bound:.1f}")
        re, im = round(v.real * scale), round(v.imag * scale)
        return re, im

    def _constant(self, value, level: int, scale: float) -> RNSPoly:
        """NTT form of the constant polynomial round(Re(v)·Δ) + round(Im(v)·Δ)·X^(N/2) (every slot = v)."""
        re, im = self._constant_ints(value, level, scale)
        idx = self._q_idx(level)
        moduli = [self.ring.moduli[i] for i in idx]
        data = np.array([[re % q] for q in moduli], dtype=np.uint64).repeat(self.params.n, axis=1)
        if im:
            mono = self._half_monomial(idx)
            im_col = np.array([[im % q] for q in moduli], dtype=np.uint64)
            q = self.ring.q_column(idx)
            data = (data + mono * im_col % q) % q
        return RNSPoly(self.ring, data, idx, True)

    def _half_monomial(self, idx) -> np.ndarray:
        """NTT form of X^(N/2) over ``idx`` (cached)."""
        if idx not in self._monomial_cache:
            coeffs = np.zeros(self.params.n, dtype=np.int64)
            coeffs[self.params.n // 2] = 1
            self._monomial_cache[idx] = RNSPoly.from_ints(self.ring, coeffs, idx, is_ntt=True).data
        return self._monomial_cache[idx]

    # -- levels and scales --------------------------------------------------------------------------
    def drop_level(self, ct: Ciphertext, levels: int = 1) -> Ciphertext:
        """The same ciphertext ``levels`` levels lower (primes dropped; scale unchanged)."""
        self._check(ct)
        if isinstance(levels, bool) or not isinstance(levels, (int, np.integer)) or not 0 <= levels <= ct.level:
            raise LevelError(f"levels={levels!r} not in [0, {ct.level}] for a ciphertext at level {ct.level}")
        return self.to_level(ct, ct.level - int(levels))

    def to_level(self, ct: Ciphertext, level: int) -> Ciphertext:
        """The ciphertext at a lower (or its own) ``level``."""
        self._check(ct)
        level = check_level(level, ct.level, "level")
        if level == ct.level:
            return ct if ct.evaluator is self else ct.with_evaluator(self)
        idx = self._q_idx(level)
        return self._make([p.keep(idx) for p in ct.parts], level, ct.scale, ct.length, ct.is_complex)

    def rescale(self, ct: Ciphertext) -> Ciphertext:
        """Divide by the primes of the top level: level ℓ -> ℓ-1, scale -> scale / Π q_ℓ.

        Each coefficient c of each part becomes round(c / Π q_ℓ) exactly (one rounding by the product,
        integers only: ``RNSPoly.rescale``), so ct×plaintext, ct×scalar and scale alignment lose no more
        than the fused ModDown of ct×ct."""
        self._check(ct)
        new_scale = self._rescaled_scale(ct.level, ct.scale)
        count = len(self.params.q_levels[ct.level])
        return self._make([p.rescale(count) for p in ct.parts], ct.level - 1, new_scale, ct.length, ct.is_complex)

    def _rescaled_scale(self, level: int, scale: float) -> float:
        if level == 0:
            raise LevelError(f"cannot rescale at level 0: no level left (level={level}, minimum 1)")
        new_scale = scale / self._top_modulus(level)
        if new_scale < 2.0**MIN_SCALE_BITS:
            raise ScaleError(f"rescaling scale=2^{math.log2(scale):.2f} at level {level} would leave "
                             f"2^{math.log2(new_scale):.2f}, below the minimum 2^{MIN_SCALE_BITS}")
        return new_scale

    def _align_levels(self, a: Ciphertext, b: Ciphertext) -> tuple[Ciphertext, Ciphertext]:
        level = min(a.level, b.level)
        return self.to_level(a, level), self.to_level(b, level)

    def _scale_factor(self, level: int, scale: float, target: float) -> int:
        """The integer c = round(target/scale · q_top) whose product, rescaled, lands a ciphertext of ``scale``
        at ``level`` on ``target`` (``ScaleError`` where no level is left or c is too small to be exact)."""
        if level == 0:
            raise ScaleError(f"scales 2^{math.log2(scale):.4f} and 2^{math.log2(target):.4f} differ and the "
                             "ciphertext is at level 0: no level left to align them (minimum level 1)")
        top = self._top_modulus(level)
        factor = round(target / scale * top)
        if factor < 2**20:
            raise ScaleError(f"cannot align scale 2^{math.log2(scale):.2f} to 2^{math.log2(target):.2f}: "
                             f"the ratio is below the limit 2^{20 - math.log2(top):.1f}")
        self._check_product_scale(level, scale * factor)
        return factor

    def _scale_to(self, ct: Ciphertext, target: float) -> Ciphertext:
        """Multiply by round(target/scale · q_top) and rescale: the scale lands on target (one level)."""
        factor = self._scale_factor(ct.level, ct.scale, target)
        parts = [p.mul_scalars([factor] * len(p.idx)) for p in ct.parts]
        scaled = self._make(parts, ct.level, ct.scale * factor, ct.length, ct.is_complex)
        return self.rescale(scaled)

    def _align(self, a: Ciphertext, b: Ciphertext) -> tuple[Ciphertext, Ciphertext]:
        return align(self, a, b)

    def _check_product_scale(self, level: int, scale: float):
        bound = self._log_modulus(level) - 1
        if math.log2(scale) >= bound:
            message = (f"product scale 2^{math.log2(scale):.1f} does not fit the modulus at level {level} "
                       f"(limit 2^{bound:.1f})")
            if level == 0:
                raise LevelError(f"multiplying past the last level: {message}; rescale earlier or use more levels")
            raise ScaleError(message + "; rescale the operands first")

    # -- operand normalisation ----------------------------------------------------------------------
    def _as_operand(self, other, level: int, scale: float):
        """Ciphertext, Plaintext or RNSPoly (constant/vector encoded at ``level``/``scale``)."""
        if isinstance(other, Ciphertext):
            return self._check(other, "operand")
        if isinstance(other, Plaintext):
            check_same_context(other, self.fingerprint, None, "plaintext")
            return other
        if isinstance(other, np.ndarray) and other.ndim == 0:
            other = other.item()                  # a 0-d array is a scalar: it fills every slot
        if isinstance(other, (int, float, complex, np.number)) and not isinstance(other, bool):
            return self._constant(other, level, scale)
        if isinstance(other, (np.ndarray, list, tuple)):
            return self.encode(other, level, scale)
        raise ParameterError(f"operand of type {type(other).__name__} is not a Ciphertext, Plaintext, "
                             "numpy array or scalar")

    def _plain_at(self, pt: Plaintext, ct: Ciphertext) -> tuple[RNSPoly, Ciphertext]:
        level = min(pt.level, ct.level)
        return pt.poly.keep(self._q_idx(level)), self.to_level(ct, level)

    @staticmethod
    def _meta(a: Ciphertext, other) -> tuple[int, bool]:
        length = max(a.length, getattr(other, "length", int(np.size(other)) if np.ndim(other) else 1))
        is_complex = a.is_complex or getattr(other, "is_complex", bool(np.iscomplexobj(other)))
        return length, is_complex

    # -- addition -----------------------------------------------------------------------------------
    def add(self, a, b) -> Ciphertext:
        """a + b; one of them a Ciphertext."""
        if not isinstance(a, Ciphertext):
            a, b = b, a
        self._check(a)
        op = self._as_operand(b, a.level, a.scale)
        length, is_complex = self._meta(a, b)
        if isinstance(op, Ciphertext):
            a, op = self._align(a, op)
            parts = [x + y for x, y in zip(a.parts, op.parts)]
            return self._make(parts, a.level, a.scale, length, is_complex)
        if isinstance(op, Plaintext):
            if abs(op.scale / a.scale - 1) > SCALE_TOLERANCE:
                raise ScaleError(f"plaintext scale 2^{math.log2(op.scale):.4f} differs from the ciphertext "
                                 f"scale 2^{math.log2(a.scale):.4f}; encode it at scale=ct.scale")
            op, a = self._plain_at(op, a)
        return self._make([a.parts[0] + op] + list(a.parts[1:]), a.level, a.scale, length, is_complex)

    def neg(self, a: Ciphertext) -> Ciphertext:
        self._check(a)
        return self._make([-p for p in a.parts], a.level, a.scale, a.length, a.is_complex)

    negate = neg

    def sub(self, a, b) -> Ciphertext:
        """a - b; one of them a Ciphertext."""
        if isinstance(a, Ciphertext):
            if isinstance(b, Ciphertext):
                return self.add(a, self.neg(b))
            if isinstance(b, Plaintext):
                return self.add(a, Plaintext(-b.poly, b.level, b.scale, b.length, b.is_complex, b.fingerprint))
            return self.add(a, -np.asarray(b) if np.ndim(b) else -b)
        return self.add(self.neg(b), a)

    # -- multiplication -----------------------------------------------------------------------------
    def mul(self, a, b) -> Ciphertext:
        """a·b, relinearized, not rescaled; the scale is the product of the operands' scales."""
        a, op = self._mul_operands(a, b)
        length, is_complex = self._meta(a, b)
        if isinstance(op, Ciphertext):
            return self._mul_relinearize(a, op, 0, a.scale * op.scale, length, is_complex)
        poly, a, scale = op
        return self._make([p * poly for p in a.parts], a.level, a.scale * scale, length, is_complex)

    def mul_plain_sum(self, pairs) -> Ciphertext:
        """Σ ct_i·pt_i over (ciphertext, plaintext or vector) pairs at one level and one product scale, not
        rescaled: the ciphertext that adding the ``mul`` products gives (same residues), accumulated in
        place by a fused multiply-add per limb row (one pass per term, no product array)."""
        acc, level, scale, length, is_complex = None, None, None, 0, False
        for ct, pt in pairs:
            a, op = self._mul_operands(ct, pt)
            if isinstance(op, Ciphertext) or not isinstance(op[0], RNSPoly):
                raise ParameterError("mul_plain_sum multiplies ciphertexts by plaintexts")
            poly, a, s = op
            n_len, n_complex = self._meta(a, pt)
            length, is_complex = max(length, n_len), is_complex or n_complex
            if acc is None:
                level, scale, idx = a.level, a.scale * s, a.parts[0].idx
                acc = [p.ring.mul(p.data, poly.data, idx) for p in a.parts]       # fresh, writable arrays
                acc = [x if x.flags.writeable else x.copy() for x in acc]
                continue
            if a.level != level or len(a.parts) != len(acc):
                raise LevelError(f"mul_plain_sum: a term at level {a.level} differs from level {level}")
            if abs(a.scale * s / scale - 1) > SCALE_TOLERANCE:
                raise ScaleError(f"mul_plain_sum: product scale 2^{math.log2(a.scale * s):.4f} differs from "
                                 f"2^{math.log2(scale):.4f}")
            for x, p in zip(acc, a.parts):
                p.ring.muladd_into(x, p.data, poly.data, idx)
        if acc is None:
            raise ParameterError("mul_plain_sum needs at least one term")
        ring = a.parts[0].ring
        return self._make([RNSPoly(ring, x, idx, True) for x in acc], level, scale, length, is_complex)

    def mul_rescale(self, a, b) -> Ciphertext:
        """rescale(mul(a, b)); for two ciphertexts the relinearization's ModDown and the rescale share
        one division by P·q_top (same result up to the final rounding)."""
        a, op = self._mul_operands(a, b)
        if not isinstance(op, Ciphertext):
            return self.rescale(self.mul(a, b))
        length, is_complex = self._meta(a, b)
        scale = self._rescaled_scale(a.level, a.scale * op.scale)
        return self._mul_relinearize(a, op, len(self.params.q_levels[a.level]), scale, length, is_complex)

    def mul_add_rescale(self, a: Ciphertext, b: Ciphertext, add=None, factor: int = 1, add_factor: int = 1,
                        rescale: bool = True) -> Ciphertext:
        """rescale(factor·a·b + add) for two ciphertexts with ONE rounding: the integer ``factor`` multiplies ``a``
        before the tensor, ``add`` joins the tensor's (d0, d1) before the relinearization lifts them by P, and a
        single ModDown divides by P and (``rescale``) the top level's primes, as ``mul_rescale`` fuses its two.
        ``add``: None, a ciphertext at the product's scale a.scale·b.scale (at or above the product's level; times
        the integer ``add_factor``, in the same pass) or a scalar (encoded at that scale); ``factor`` and
        ``add_factor`` leave the scales as they are (the values are multiplied).  Against
        ``mul``, integer products, an ``add`` and a ``rescale`` (the Chebyshev recurrence 2·T_a·T_b - T_(a-b), the
        double angle 2c² - 1 and the q·T_n + r of baby-step giant-step in bootstrapping's EvalMod): one
        rescale's NTTs and rounding fewer; the result differs from theirs only by the roundings saved."""
        a, op = self._mul_operands(a, b)
        if not isinstance(op, Ciphertext):
            raise ParameterError("mul_add_rescale multiplies two ciphertexts (use mul for plaintexts)")
        for name, v in (("factor", factor), ("add_factor", add_factor)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
                raise ParameterError(f"{name}={v!r} must be an integer")
        length, is_complex = self._meta(a, op)
        level, scale = a.level, a.scale * op.scale
        x0 = x1 = None
        if isinstance(add, Ciphertext):
            self._check(add, "add")
            if add.level < level:
                raise LevelError(f"mul_add_rescale: add at level {add.level} is below the product's level {level}")
            if abs(add.scale / scale - 1) > SCALE_TOLERANCE:
                raise ScaleError(f"mul_add_rescale: add at scale 2^{math.log2(add.scale):.4f} differs from the "
                                 f"product's 2^{math.log2(scale):.4f}")
            if len(add.parts) != 2:
                raise ParameterError("mul_add_rescale: add must have two parts")
            x0, x1 = (p.data for p in self.to_level(add, level).parts)
            length, is_complex = max(length, add.length), is_complex or add.is_complex
        elif isinstance(add, (int, float, complex, np.number)) and not isinstance(add, bool):
            x0, add_factor = self._constant(add * add_factor, level, scale).data, 1
            is_complex = is_complex or bool(np.iscomplexobj(add))
        elif add is not None:
            raise ParameterError(f"add of type {type(add).__name__} must be None, a Ciphertext or a scalar")
        if len(a.parts) != 2 or len(op.parts) != 2:
            raise ParameterError("ciphertexts must have two parts (they are relinearized on every mul)")
        (a0, a1), (b0, b1) = a.parts, op.parts
        if not (a0.idx == a1.idx == b0.idx == b1.idx and a0.is_ntt and a1.is_ntt and b0.is_ntt and b1.is_ntt):
            raise ParameterError("ciphertext parts must share one basis in NTT form (aligned operands)")
        rescale_primes = len(self.params.q_levels[level]) if rescale else 0
        out_scale = self._rescaled_scale(level, scale) if rescale else scale
        idx, ring, rows = a0.idx, self.ring, len(a0.idx)
        # the tensor with the factor and the added part in one pass, into this thread's scratch (consumed by the
        # key switch below: no fresh 25-60 MB arrays per product)
        with scratch_rows("tensor_d0", rows, ring.n) as d0, scratch_rows("tensor_d1", rows, ring.n) as d1, \
                scratch_rows("tensor_d2", rows, ring.n) as d2:
            ring.tensor_into(a0.data, a1.data, b0.data, b1.data, idx, (d0, d1, d2), factor=int(factor),
                             add=(x0, x1), add_factor=int(add_factor))
            d0, d1, d2 = (RNSPoly(ring, d.view(), idx, True) for d in (d0, d1, d2))
            kb, ka = self._switch_transient(d2, self.relin_key, lift=(d0, d1))
        parts = [self.switcher.mod_down(kb, rescale_primes), self.switcher.mod_down(ka, rescale_primes)]
        return self._make(parts, level - (rescale_primes > 0), out_scale, length, is_complex)

    def _switch_transient(self, c: RNSPoly, key, lift=None) -> tuple[RNSPoly, RNSPoly]:
        """``switcher.streamed_product(c, key, lift)``, the same residues, from all the digits at once in this
        thread's transient scratch (``KeySwitcher.decompose``/``inner_product`` with ``transient``): one pass over
        the sums instead of one per digit (N16_BOOT, level 23: 178 ms instead of 196).  The scratch is the one
        double hoisting's babies fill (``linear_transform_hoisted``): a bootstrap holds it already; elsewhere it
        costs the digits of one polynomial (~160 MB at N = 2^16's top level) for the thread's lifetime."""
        digits = self.switcher.decompose(c, transient=True)
        return self.switcher.inner_product(digits, key, lift=lift, transient=True)

    def _int_row_constants(self, idx, c: int):
        """(c mod q_l, its Shoup companion, q_l) per limb of ``idx``, for the one-pass integer products."""
        moduli = [self.ring.moduli[i] for i in idx]
        w = np.array([int(c) % q for q in moduli], dtype=np.uint64)
        q = np.array(moduli, dtype=np.uint64)
        return w, shoup_precompute(w, q), q

    def mul_int(self, ct: Ciphertext, c: int) -> Ciphertext:
        """ct·c for an integer c, exactly, the scale unchanged (the values are multiplied by c): one pass per part
        (a Shoup product by c mod q_l per limb; ``*`` by a scalar encodes it at a scale and costs a level)."""
        self._check(ct)
        if isinstance(c, bool) or not isinstance(c, (int, np.integer)):
            raise ParameterError(f"c={c!r} must be an integer")
        w, ws, q = self._int_row_constants(ct.parts[0].idx, c)
        parts = [RNSPoly(self.ring, mulmod_scalar_rows(np.ascontiguousarray(p.data), w, ws, q), p.idx, p.is_ntt)
                 for p in ct.parts]
        return self._make(parts, ct.level, ct.scale, ct.length, ct.is_complex)

    def mul_int_add(self, acc: Ciphertext, ct: Ciphertext, c: int) -> Ciphertext:
        """acc + c·ct for an integer c, exactly, at acc's level (``ct`` brought down to it) and scale: one pass per
        part.  The caller picks c so that c·ct reads at acc's scale (ct's scale is not checked: an integer
        combination, as bootstrapping's Chebyshev leaves Σ round(c_k·S/s_k)·T_k)."""
        self._check(acc)
        self._check(ct, "operand")
        if isinstance(c, bool) or not isinstance(c, (int, np.integer)):
            raise ParameterError(f"c={c!r} must be an integer")
        if ct.level < acc.level:
            raise LevelError(f"mul_int_add: operand at level {ct.level} is below the sum's level {acc.level}")
        ct = self.to_level(ct, acc.level)
        w, ws, q = self._int_row_constants(acc.parts[0].idx, c)
        parts = [RNSPoly(self.ring, muladd_scalar_rows(np.ascontiguousarray(p.data), w, ws,
                                                       np.ascontiguousarray(s.data), q), s.idx, s.is_ntt)
                 for p, s in zip(ct.parts, acc.parts)]
        return self._make(parts, acc.level, acc.scale, max(acc.length, ct.length), acc.is_complex or ct.is_complex)

    def mul_int_sum(self, terms, level: int, scale: float, constant: float = 0.0) -> Ciphertext:
        """Σ c_i·ct_i + constant for integers c_i, exactly, at ``level`` (each ct_i at or above it) labelled
        ``scale``, the real ``constant`` encoded at that scale (as ``add`` encodes a scalar): one pass per part
        (``mul_int_sum_rows``), each term read once, where ``mul_int`` and ``mul_int_add`` per term (its twin:
        the same residues) read and write the running sum once per term.  The caller picks c_i so that c_i·ct_i
        reads at ``scale`` (not checked: bootstrapping's Chebyshev leaves Σ round(c_k·S/s_k)·T_k + c_0)."""
        terms = list(terms)
        if not terms:
            raise ParameterError("mul_int_sum needs at least one (ciphertext, integer) term")
        for ct, c in terms:
            self._check(ct, "operand")
            if isinstance(c, bool) or not isinstance(c, (int, np.integer)):
                raise ParameterError(f"c={c!r} must be an integer")
            if ct.level < level:
                raise LevelError(f"mul_int_sum: a term at level {ct.level} is below the sum's level {level}")
            if len(ct.parts) != 2:
                raise ParameterError("mul_int_sum: ciphertexts must have two parts")
        if isinstance(constant, (bool, complex)) or not isinstance(constant, (int, float, np.integer, np.floating)):
            raise ParameterError(f"constant={constant!r} must be a real number")
        re, _ = self._constant_ints(float(constant), level, scale)
        idx = self._q_idx(level)
        moduli = [self.ring.moduli[i] for i in idx]
        q = np.array(moduli, dtype=np.uint64)
        w = np.array([[int(c) % p for p in moduli] for _, c in terms], dtype=np.uint64)
        ws = shoup_precompute(w, q[None, :])
        zero = np.zeros(len(idx), dtype=np.uint64)
        init = np.array([re % p for p in moduli], dtype=np.uint64)
        one = np.ones((1, len(idx)), dtype=np.uint64)
        parts = []
        for t in range(2):
            out, start = None, 0
            while start < len(terms):       # SUM_TERMS a pass; a later pass takes the partial sum as a term times 1
                stop = start + SUM_TERMS - (out is not None)
                xs = [ct.parts[t].data for ct, _ in terms[start:stop]]
                ww, wws = w[start:stop], ws[start:stop]
                if out is not None:
                    xs, ww, wws = [out] + xs, np.vstack([one, ww]), np.vstack([shoup_precompute(one, q[None, :]), wws])
                out = mul_int_sum_rows(xs, ww, wws, init if t == 0 and start == 0 else zero, q,
                                       np.empty((len(idx), self.ring.n), dtype=np.uint64))
                start = stop
            parts.append(RNSPoly(self.ring, out, idx, True))
        length = max(ct.length for ct, _ in terms)
        return self._make(parts, level, scale, length, any(ct.is_complex for ct, _ in terms))

    def _mul_relinearize(self, a: Ciphertext, b: Ciphertext, rescale_primes: int, scale, length, is_complex):
        """Tensor, then relinearize (``_relinearize``)."""
        return self._relinearize(self._tensor(a, b), a.level, rescale_primes, scale, length, is_complex)

    def _relinearize(self, parts, level: int, rescale_primes: int, scale, length, is_complex) -> Ciphertext:
        """(d0, d1) + ModDown(Σ digits(d2)·rlk) computed as ModDown(P·(d0, d1) + Σ digits(d2)·rlk), dividing by P
        and the top ``rescale_primes`` primes."""
        d0, d1, d2 = parts
        switcher = self.switcher
        kb, ka = switcher.streamed_product(d2, self.relin_key, lift=(d0, d1))
        parts = [switcher.mod_down(kb, rescale_primes), switcher.mod_down(ka, rescale_primes)]
        return self._make(parts, level - (rescale_primes > 0), scale, length, is_complex)

    def mul_accumulate(self, acc: ProductSum | None, a: Ciphertext, b: Ciphertext) -> ProductSum:
        """``acc`` + a·b for two ciphertexts, not relinearized: the tensor products of a sum added part by part, so
        that ``relinearize_sum`` key-switches the sum once instead of every product (lazy relinearization, as
        SEAL's and OpenFHE's users sum EvalMultNoRelin results before one Relinearize). Every product of one sum
        at one level and one scale (ScaleError otherwise)."""
        if not isinstance(a, Ciphertext) or not isinstance(b, Ciphertext):
            raise ParameterError("mul_accumulate multiplies two ciphertexts (a plaintext product needs no "
                                 "relinearization: mul_plain_sum)")
        a, b = self._mul_operands(a, b)
        length, is_complex = self._meta(a, b)
        scale = a.scale * b.scale
        parts = self._tensor(a, b)
        if acc is None:
            return ProductSum(parts, a.level, scale, length, is_complex, self.fingerprint, self.key_id)
        self._check_sum(acc)
        if acc.level != a.level or abs(scale / acc.scale - 1) > SCALE_TOLERANCE:
            raise ScaleError(f"a product at level {a.level}, scale 2^{math.log2(scale):.4f} cannot join a sum at "
                             f"level {getattr(acc, 'level', None)}, scale 2^{math.log2(getattr(acc, 'scale', 1.0)):.4f}")
        return ProductSum(tuple(x + y for x, y in zip(acc.parts, parts)), acc.level, acc.scale,
                          max(acc.length, length), acc.is_complex or is_complex, acc.fingerprint, acc.key_id)

    def _check_sum(self, acc) -> None:
        """ParameterError unless ``acc`` is a ``mul_accumulate`` sum; ContextMismatchError unless made here."""
        if not isinstance(acc, ProductSum):
            raise ParameterError(f"expected a mul_accumulate sum, not {type(acc).__name__}")
        check_same_context(acc, self.fingerprint, self.key_id, "product sum")

    def relinearize_sum(self, acc: ProductSum) -> Ciphertext:
        """The ciphertext of a ``mul_accumulate`` sum: one relinearization (key switch of its d2), not rescaled."""
        self._check_sum(acc)
        return self._relinearize(acc.parts, acc.level, 0, acc.scale, acc.length, acc.is_complex)

    def _mul_operands(self, a, b):
        """(ciphertext, Ciphertext) aligned in level, or (ciphertext, (poly, ciphertext, scale))."""
        if not isinstance(a, Ciphertext):
            a, b = b, a
        self._check(a)
        if isinstance(b, Ciphertext):
            self._check(b, "operand")
            a, b = self._align_levels(a, b)
            self._check_product_scale(a.level, a.scale * b.scale)
            return a, b
        if isinstance(b, Plaintext):
            check_same_context(b, self.fingerprint, None, "plaintext")
            poly, a = self._plain_at(b, a)
            self._check_product_scale(a.level, a.scale * b.scale)
            return a, (poly, a, b.scale)
        scale = float(self._top_modulus(a.level)) if a.level > 0 else self.params.scale
        self._check_product_scale(a.level, a.scale * scale)
        op = self._as_operand(b, a.level, scale)
        return a, (op.poly if isinstance(op, Plaintext) else op, a, scale)

    def _tensor(self, a: Ciphertext, b: Ciphertext):
        if len(a.parts) != 2 or len(b.parts) != 2:
            raise ParameterError("ciphertexts must have two parts (they are relinearized on every mul)")
        (a0, a1), (b0, b1) = a.parts, b.parts
        if not (a0.idx == a1.idx == b0.idx == b1.idx and a0.is_ntt and a1.is_ntt and b0.is_ntt and b1.is_ntt):
            raise ParameterError("ciphertext parts must share one basis in NTT form (aligned operands)")
        parts = a0.ring.tensor(a0.data, a1.data, b0.data, b1.data, a0.idx)    # one pass (= a0*b0, a0*b1 + a1*b0, a1*b1)
        return tuple(RNSPoly(a0.ring, d, a0.idx, True) for d in parts)

    def relinearize(self, a: Ciphertext) -> Ciphertext:
        """``mul`` relinearizes already (every ciphertext has two parts): the ciphertext itself."""
        return self._check(a)

    def square(self, a: Ciphertext) -> Ciphertext:
        return self.mul(a, a)

    # -- automorphisms ------------------------------------------------------------------------------
    def rotate(self, ct: Ciphertext, step: int) -> Ciphertext:
        """Cyclic left rotation of the slots by ``step`` (negative: right), like np.roll(x, -step)."""
        step = self._check_step(step)
        return self.rotate_hoisted(ct, [step])[step]

    def rotate_hoisted(self, ct: Ciphertext, steps) -> dict[int, Ciphertext]:
        """{step: rotate(ct, step)} sharing one ModUp decomposition of c1 (hoisting)."""
        self._check(ct)
        if isinstance(steps, (str, bytes)) or not hasattr(steps, "__iter__"):
            raise ParameterError(f"steps={steps!r} must be a list of integer rotation steps")
        steps = [self._check_step(k) for k in steps]
        n = self.params.n
        keys = {k: self.galois_keys.key_for_step(k, n) for k in steps if k % (n // 2)}
        # transient digits: every key below consumes them before this switcher decomposes again; one key
        # streams its digits instead (no decomposition held)
        digits = self.switcher.decompose(ct.parts[1], transient=True) if len(keys) > 1 else None
        todo = list(keys)         # distinct steps: independent switches of the shared digits, on the threads

        def some(start, stop):    # each thread's inner products and ModDowns use its own scratch
            return {k: self._apply_galois(ct, digits, galois_element(k, n), keys[k]) for k in todo[start:stop]}

        done = {}
        for piece in parallel(some, len(todo)):
            done.update(piece)
        return {k: done[k] if k in keys else self.to_level(ct, ct.level) for k in steps}

    rotate_many = rotate_hoisted

    def rotate_sum(self, terms) -> Ciphertext:
        """Σ rotate(ct, step) over (ciphertext, step) pairs at one level and scale, with ONE ModDown per part
        for all the rotations (hoisted ModDown, as in the giant steps of Bossuat, Mouchet, Troncoso-Pastoriza,
        Hubaux, "Efficient bootstrapping for approximate homomorphic encryption with non-sparse keys",
        EUROCRYPT 2021, section 4.4).  σ_g commutes with ModDown (a permutation of NTT slots, the same on every
        prime), so Σ σ_g(c0 + ModDown(x_g)) = Σ σ_g(c0) + ModDown(Σ σ_g(x_g)) up to the rounding of one
        division instead of one per term; the key-switch sums stay over Q_ℓ·P until the end.  ``terms`` may
        be a generator (each term is consumed before the next is drawn: one extended sum is held)."""
        n, switcher, ring = self.params.n, self.switcher, self.ring
        acc_b = acc_a = plain = first = None
        for ct, step in terms:
            self._check(ct)
            step = self._check_step(step)
            if first is None:
                first = ct
            elif ct.level != first.level:
                raise LevelError(f"rotate_sum: a term at level {ct.level} differs from level {first.level}")
            elif abs(ct.scale / first.scale - 1) > SCALE_TOLERANCE:
                raise ScaleError(f"rotate_sum: scale 2^{math.log2(ct.scale):.4f} differs from "
                                 f"2^{math.log2(first.scale):.4f}")
            if step % (n // 2) == 0:
                plain = ct if plain is None else self.add(plain, ct)
                continue
            g = galois_element(step, n)
            kb, ka = switcher.streamed_product(ct.parts[1], self.galois_keys.key_for_step(step, n))
            perm = ring.automorphism_indices(g, True)
            if acc_b is None:       # the first term's permutation starts the sums (no zeroed pages to fault in)
                acc_b, acc_a = permute_rows(kb.data, perm), permute_rows(ka.data, perm)
                acc_c0 = permute_rows(np.ascontiguousarray(ct.parts[0].data), perm)
                ext_idx, q_ext = kb.idx, kb.q.reshape(-1)
                continue
            add_permuted_into(acc_b, kb.data, perm, q_ext)     # the scratch sums are consumed here
            add_permuted_into(acc_a, ka.data, perm, q_ext)
            add_permuted_into(acc_c0, ct.parts[0].data, perm, ct.parts[0].q.reshape(-1))
        if first is None:
            raise ParameterError("rotate_sum needs at least one term")
        if acc_b is None:
            return plain
        c0 = RNSPoly(ring, acc_c0, first.parts[0].idx, True)
        parts = [switcher.mod_down(RNSPoly(ring, acc_b, ext_idx, True)) + c0,
                 switcher.mod_down(RNSPoly(ring, acc_a, ext_idx, True))]
        out = self._make(parts, first.level, first.scale, first.length, first.is_complex)
        return out if plain is None else self.add(out, plain)

    def linear_transform_hoisted(self, ct: Ciphertext, baby_steps, groups, scale: float, *, rescale: bool = False,
                                 length: int | None = None, is_complex: bool | None = None) -> Ciphertext:
        """Σ over giant steps m of rot_m(Σ over (i, pt) of pt ⊙ rot_i(ct)), by double hoisting (Bossuat, Mouchet,
        Troncoso-Pastoriza, Hubaux, "Efficient bootstrapping for approximate homomorphic encryption with non-sparse
        keys", EUROCRYPT 2021, section 4.4, Algorithm 3): one ModUp of c1 for every baby step, whose rotations stay
        over Q_ℓ·P (P·σ_i(c0) + σ_i(KS_b), σ_i(KS_a): no ModDown); each giant step's products with its plaintexts
        are summed over Q_ℓ·P; a rotated giant divides only its part a by P (the input of its key switch), its
        part b and its key switch's output are added, permuted, to sums over Q_ℓ·P; ONE ModDown per part at the
        end (also dividing by the top level's primes with ``rescale``: the rescale fused).  Against a ModDown per
        baby (``rotate_hoisted`` then ``crypto.ckks.linear.bsgs_sum``): 2·babies + 2 ModDowns become giants + 2,
        and the roundings come after the products instead of being multiplied by the plaintexts.

        ``baby_steps``: every i the groups use; ``groups``: (m, pairs) items, pairs (i, poly) with ``poly`` a
        plaintext over Q_ℓ ∪ P in NTT form (``encode_extended``), or its residues as a uint32/uint64 array (kept
        plaintexts; a short period's compact form, ``encode_extended(compact=True)``), drawn one group at a time (so
        they may be encoded lazily); a group's products are summed in one fused pass over both parts
        (``crypto.keyswitch.muladd_pairs``: each baby and plaintext read once, the sums written once); ``scale``: the
        products' scale (ct.scale · the plaintexts' scale).  The result has the input's length and complexity unless ``length``/``is_complex`` are given.  Bit for bit the same on any number of
        threads (exact modular arithmetic; the babies' key switches run on the threads of ``hezk.threads``)."""
        self._check(ct)
        n, ring, switcher = self.params.n, self.ring, self.switcher
        half = n // 2
        level = ct.level
        plan = switcher.plan(level)
        ext, q_ext = plan.ext_idx, plan.ext_q
        limbs = self.params.limbs_at(level)
        c0, c1 = ct.parts
        if isinstance(baby_steps, (str, bytes)) or not hasattr(baby_steps, "__iter__"):
            raise ParameterError(f"baby_steps={baby_steps!r} must be a list of integer rotation steps")
        steps = sorted({self._check_step(k) for k in baby_steps})
        keys = {k: self.galois_keys.key_for_step(k, n) for k in steps if k % half}
        babies: dict = {}
        if len(keys) < len(steps):      # the unrotated baby over Q_ℓ·P: P·(c0, c1) on Q_ℓ, 0 on P
            zeros = np.zeros((len(ext) - limbs, n), dtype=np.uint64)
            lifted = [np.concatenate([p.mul_scalars(plan.p_mod_q.tolist()).data, zeros]) for p in (c0, c1)]
            babies.update({k: lifted for k in steps if not k % half})
        if keys:        # transient digits: consumed by the babies' inner products before anything decomposes again
            digits = switcher.decompose(c1, transient=True)
            todo = list(keys)

            def some(start, stop):      # per-thread scratch sums, permuted into arrays of their own
                done = {}
                for k in todo[start:stop]:
                    kb, ka = switcher.inner_product(digits, keys[k], lift=(c0, None), transient=True)
                    perm = ring.automorphism_indices(galois_element(k, n), True)
                    done[k] = [permute_rows(kb.data, perm), permute_rows(ka.data, perm)]
                return done

            for piece in parallel(some, len(todo)):
                babies.update(piece)
        total = spare = None
        for m, pairs in groups:
            m = self._check_step(m)
            acc, xs_b, xs_a, pts = None, [], [], []
            for i, poly in pairs:
                if i not in babies:
                    raise ParameterError(f"linear_transform_hoisted: baby step {i} is not in baby_steps {steps}")
                if isinstance(poly, RNSPoly) and poly.idx == ext and poly.is_ntt:
                    data = poly.data
                elif isinstance(poly, np.ndarray) and poly.dtype in (np.uint32, np.uint64) and poly.ndim == 2 and \
                        poly.shape[0] == len(ext) and 0 < poly.shape[1] <= n and n % poly.shape[1] == 0:
                    data = poly         # residues, or a subring polynomial's NTT (``encode_extended(compact=True)``)
                else:
                    raise ParameterError(f"linear_transform_hoisted: a plaintext must be an NTT-form RNSPoly over "
                                         f"Q_{level} ∪ P (Evaluator.encode_extended) or its residues, got {poly!r}")
                b, a = babies[i]
                xs_b.append(b)
                xs_a.append(a)
                pts.append(data)
            if not pts:
                continue
            # the previous rotated giant's sums, consumed: their pages reused
            acc = spare if spare is not None else [np.empty((len(ext), n), dtype=np.uint64) for _ in range(2)]
            spare = None
            # the giant's products summed in one pass (a group beyond SUM_TERMS: the rest added term by term)
            muladd_pairs(acc[0], acc[1], xs_b[:SUM_TERMS], xs_a[:SUM_TERMS], pts[:SUM_TERMS], q_ext)
            for b, a, data in zip(xs_b[SUM_TERMS:], xs_a[SUM_TERMS:], pts[SUM_TERMS:]):
                muladd_pair(acc[0], acc[1], b, a, data, q_ext, init=False)
            if m % half == 0:           # the unrotated giant: added as it is
                total = acc if total is None else [ring.add(x, y, ext) for x, y in zip(total, acc)]
                continue
            # a rotated giant: its part a over Q_ℓ (ModDown) is key-switched; part b stays over Q_ℓ·P
            a_q = switcher.mod_down(RNSPoly(ring, acc[1].view(), ext, True))     # (a view: acc stays writable)
            kb, ka = self._switch_transient(a_q, self.galois_keys.key_for_step(m, n))    # scratch sums
            perm = ring.automorphism_indices(galois_element(m, n), True)
            if total is None:
                total = [permute_rows(acc[0], perm), permute_rows(ka.data, perm)]
                add_permuted_into(total[0], kb.data, perm, q_ext)
            else:
                add_permuted_pair_into(total[0], acc[0], kb.data, perm, q_ext)
                add_permuted_into(total[1], ka.data, perm, q_ext)
            spare = acc
        if total is None:
            raise ParameterError("linear_transform_hoisted needs at least one plaintext")
        extra = len(self.params.q_levels[level]) if rescale else 0
        out_scale = self._rescaled_scale(level, scale) if rescale else scale
        parts = [switcher.mod_down(RNSPoly(ring, x, ext, True), extra) for x in total]
        return self._make(parts, level - (extra > 0), out_scale, ct.length if length is None else length,
                          ct.is_complex if is_complex is None else is_complex)

    def conjugate(self, ct: Ciphertext) -> Ciphertext:
        """Complex conjugation of every slot."""
        self._check(ct)
        key = self.galois_keys.conjugation_key(self.params.n)
        return self._apply_galois(ct, None, conjugation_element(self.params.n), key)

    def _apply_galois(self, ct: Ciphertext, digits, g: int, key) -> Ciphertext:
        """σ_g(c0) + KS(σ_g(c1)) = σ_g(c0 + ModDown(Σ d_j·σ_g^-1(b_j)), ModDown(Σ d_j·σ_g^-1(a_j))).
        ``digits``: the hoisted decomposition of c1, or None to stream them (one switch)."""
        switcher = self.switcher      # transient sums: consumed by the ModDowns below
        kb, ka = switcher.streamed_product(ct.parts[1], key) if digits is None else \
            switcher.inner_product(digits, key, transient=True)
        parts = [switcher.mod_down_galois(kb, g, add=ct.parts[0]), switcher.mod_down_galois(ka, g)]
        return self._make(parts, ct.level, ct.scale, ct.length, ct.is_complex)

    # -- bootstrapping ------------------------------------------------------------------------------
    def bootstrap(self, ct: Ciphertext, config=None, *, progress=None) -> Ciphertext:
        """The values of ``ct`` in a ciphertext with ``bootstrap_plan(config).levels_left`` levels left
        (``crypto.ckks.bootstrap``).  ``config``: a BootstrapConfig, a slot count or None (the config the
        keys were made for, else full slots); its rotation keys and the conjugation key must exist.
        ``progress``: True draws a bar on stderr over the stages (the first bootstrap also sets up: it builds
        the plan's matrices and encodes the transforms' diagonals), a callable gets ``(done, total, label)``;
        the result is the same either way."""
        report = hezk.progress.as_progress(progress, "bootstrapping", ParameterError)
        self._check(ct)
        if report is not None:
            report(0, 4, "plan")
        return self._bootstrapper(config).bootstrap(ct, report)

    def bootstrap_plan(self, config=None):
        """The BootstrapPlan ``bootstrap`` follows: levels used and left, rotation steps, polynomial."""
        return self._bootstrapper(config).plan

    def bootstrapper(self, config=None) -> Bootstrapper:
        """The ``Bootstrapper`` ``bootstrap(ct, config)`` runs (one per configuration, kept: its encoded diagonals
        with it); its ``double_hoisting`` attribute selects the linear transforms' path and ``fused_products`` EvalMod's
        (both default True; False: the separate operations, as ``crypto.ckks.jax_device`` runs them)."""
        return self._bootstrapper(config)

    def _bootstrapper(self, config):
        cfg = as_config(self.bootstrap_config if config is None else config)
        if cfg not in self._bootstrappers:
            self._bootstrappers[cfg] = Bootstrapper(self, plan_for(self.params, cfg))
        return self._bootstrappers[cfg]

    # -- the evaluator protocol's transfers (crypto.ckks.evaluator_protocol): host ciphertexts are its own ----
    def from_host(self, ct: Ciphertext) -> Ciphertext:
        """``ct`` itself (checked: a ciphertext of this context)."""
        return self._check(ct)

    def to_host(self, ct: Ciphertext) -> Ciphertext:
        """``ct`` itself (checked: a ciphertext of this context)."""
        return self._check(ct)

    @staticmethod
    def _check_step(step) -> int:
        if isinstance(step, bool) or not isinstance(step, (int, np.integer)):
            raise ParameterError(f"rotation step={step!r} must be an integer")
        return int(step)


def align(ev, a, b):
    """Two ciphertexts of ``ev`` at one level and one scale (the module docstring's rule): where the scales
    differ by more than ``SCALE_TOLERANCE``, the operand at the higher level (at equal levels the smaller scale)
    is brought onto the other's scale (``ev._scale_to``, one level); then both go to the lower level.  Shared by
    the host and device evaluators (the device's results equal the host's limb for limb)."""
    if abs(a.scale / b.scale - 1) > SCALE_TOLERANCE:
        if a.level > b.level or (a.level == b.level and a.scale < b.scale):
            a = ev._scale_to(a, b.scale)
        else:
            b = ev._scale_to(b, a.scale)
    level = min(a.level, b.level)
    return ev.to_level(a, level), ev.to_level(b, level)
