"""Device-resident CKKS evaluation on JAX: keys uploaded once, each whole operation one jitted function.

A ``DeviceCiphertext`` holds (c0, c1) as one device array of shape (2, L, N): uint32 residues in NTT
form over the first L primes of the chain (L = ``params.limbs_at(level)``), with the host ciphertext's
level, exact scale, length and kind.  ``DeviceEvaluator(ctx)`` uploads the relinearisation key and the
Galois keys once (they stay on the device) and runs ct×ct (+ relinearise, + rescale), ct×plaintext, add,
sub, rescale, rotation, hoisted rotations, conjugation and a baby-step giant-step diagonal matrix-vector
product, each as one ``jax.jit`` function of (ciphertext arrays, device keys, device constants): no host
round trip between its kernels.  ``DeviceEvaluator.bootstrap`` runs the host bootstrap's pipeline
(``crypto.ckks.bootstrap``) as a sequence of these functions (``DeviceBootstrapper``): the ciphertext stays
on the device from input to output, its constants are uploaded on first use.

The arithmetic is the host evaluator's, step for step: hybrid key switching with the exact centred ModUp
(Halevi, Polyakov, Shoup, CT-RSA 2019, Sec. 2.3) and the exact divide-and-round ModDown/rescale (mixed
radix, ``crypto.ring.DivideRound``), ModDown fused with the rescale of a product, Galois keys stored as
σ^-1(key) so a rotation permutes once at the end (Halevi & Shoup, CRYPTO 2018).  Every step is exact
modular arithmetic except v = round(Σ_i y_i/q_i) of the centred conversion, computed here as on the host:
float64 products materialised, then summed in order (no fused multiply-add).  So ``to_host`` of a result
equals the numba evaluator's ciphertext limb for limb.

JAX is imported when a ``DeviceEvaluator`` is made, never at import of this module; 64-bit integers are
enabled only inside this module's calls (``jax.enable_x64``), not globally.  The NTT, modular products,
basis conversion and key-switching inner product are ``crypto.jax_backend``'s device kernels.
"""
from __future__ import annotations

import math
import weakref
from dataclasses import dataclass, field

import numpy as np

import hezk.progress

from ..errors import KeyMissingError, LevelError, ParameterError, ScaleError
from ..keyswitch import conjugation_element, galois_element
from ..ntt_base import BasisConversion
from ..rlwe import Ciphertext, Plaintext, check_same_context
from .bootstrap import Bootstrapper
from .evaluator import SCALE_TOLERANCE, align


def _jax():
    import jax
    import jax.numpy as jnp
    return jax, jnp


def _kernels():
    from .. import jax_backend
    return jax_backend


@dataclass(frozen=True, eq=False)
class DeviceCiphertext:
    """(c0, c1) on the device: ``data`` of shape (2, L, N), uint32, NTT form over Q_level."""

    data: object = field(repr=False)
    level: int
    scale: float
    length: int
    is_complex: bool

    def block_until_ready(self) -> "DeviceCiphertext":
        self.data.block_until_ready()
        return self


@dataclass(frozen=True, eq=False)
class DevicePlaintext:
    """An encoded vector on the device: ``data`` of shape (L, N), uint32, NTT form over Q_level."""

    data: object = field(repr=False)
    level: int
    scale: float
    length: int
    is_complex: bool


@dataclass(frozen=True, eq=False)
class DeviceLinear:
    """The diagonals of a BSGS linear transform on the device (made by ``DeviceEvaluator.linear``).

    ``plains`` (G, B, L, N) uint32: row g holds group g's plaintext for baby step ``babies[b]`` (zero where
    the group has none: adding 0 changes nothing); ``giants[g]`` its giant step; groups that need no
    rotation come first (``unrotated`` of them).  All at one level and one scale."""

    plains: object = field(repr=False)
    babies: tuple
    giants: tuple
    unrotated: int
    level: int
    scale: float
    length: int
    is_complex: bool
    key_index: object = field(repr=False)      # (babies w/o 0, rotated giants) positions in the key stack
    perms: object = field(repr=False)


def bsgs_diagonals(matrix, slots: int, baby: int | None = None) -> list:
    """Groups (m, [(i, vector)]) of the diagonal method for y = M·x, M of shape (d, d), d | slots, x tiled
    over the slots: y = Σ_k u_k ⊙ rot(x, k) with u_k[s] = M[s mod d, (s + k) mod d], split k = m + i
    (m a multiple of ``baby``, default ⌈√d⌉): u_k ⊙ rot(x, k) = rot_m(rot_i(x) ⊙ rot_-m(u_k)), so group m
    pairs baby step i with np.roll(u_(m+i), m) (Halevi & Shoup, "Algorithms in HElib", CRYPTO 2014)."""
    m_arr = np.asarray(matrix, dtype=np.float64)
    if m_arr.ndim != 2 or m_arr.shape[0] != m_arr.shape[1]:
        raise ParameterError(f"matrix must be square, got shape {m_arr.shape}")
    d = m_arr.shape[0]
    if d < 1 or slots % d:
        raise ParameterError(f"matrix size d={d} must divide slots={slots}")
    baby = math.isqrt(d - 1) + 1 if baby is None else int(baby)
    if not 1 <= baby <= d:
        raise ParameterError(f"baby={baby} not in [1, {d}]")
    s = np.arange(slots)
    groups = {}
    for k in range(d):
        u = m_arr[s % d, (s + k) % d]
        m, i = (k // baby) * baby, k % baby
        groups.setdefault(m, []).append((i, np.roll(u, m)))
    return sorted(groups.items())


def tiled(x, slots: int) -> np.ndarray:
    """x repeated to fill ``slots`` (the input layout of ``bsgs_diagonals``)."""
    x = np.asarray(x)
    if slots % x.size:
        raise ParameterError(f"vector length {x.size} must divide slots={slots}")
    return np.tile(x, slots // x.size)


# ------------------------------------------------------------------------------------------------------
# Device constants (numpy, converted to device arrays once per evaluator and level).

def _is_scalar(x) -> bool:
    """A number that fills every slot (``Evaluator._as_operand``'s scalars; a 0-d array counts)."""
    if isinstance(x, np.ndarray) and x.ndim == 0:
        x = x.item()
    return isinstance(x, (int, float, complex, np.number)) and not isinstance(x, bool)


def _col(values) -> np.ndarray:
    """A (k, 1) uint32 column (residues and moduli are below 2^31)."""
    return np.asarray(values, dtype=np.uint32).reshape(-1, 1)


class DeviceEvaluator:
    """Homomorphic operations on device ciphertexts for one context (public material only).

    The relinearisation key and every Galois key are uploaded on construction, the Galois keys as one
    stacked array (``keys_bytes`` says how much device memory they hold); per-level constants (NTT tables,
    conversion and divide-and-round constants, Barrett constants of every modulus column) and jitted
    functions are made on first use and cached.  ``to_device(ct)`` / ``to_host(dct)`` move ciphertexts;
    results are bit-identical to ``ctx.evaluator``'s.  It implements ``crypto.ckks.evaluator_protocol.
    CKKSEvaluator`` with the host's operand rules (levels and scales aligned as the host aligns them; host
    plaintexts, numpy vectors and scalars accepted as operands), so a model plan runs on either evaluator."""

    def __init__(self, ctx, device=None):
        jax, jnp = _jax()
        self._jax, self._jnp, self._kb = jax, jnp, _kernels()
        ev = ctx.evaluator if hasattr(ctx, "evaluator") else ctx
        self.ev, self.params, self.ring = ev, ev.params, ev.ring
        self.switcher = ev.switcher
        self.device = device if device is not None else jax.devices()[0]
        self._cache: dict = {}
        self._uploads: dict = {}       # id(host Plaintext) -> (weak reference, DevicePlaintext): ``_device_plain``
        self._bc_fn = jax.jit(self._kb.barrett_constants)
        self._relin = (self._put(ev.relin_key.b), self._put(ev.relin_key.a))
        gal = ev.galois_keys.keys
        self._gal_index = {g: i for i, g in enumerate(gal)}
        if gal:
            self._gal = (self._put(np.stack([k.b for k in gal.values()])),
                         self._put(np.stack([k.a for k in gal.values()])))
        else:
            shape = (1,) + ev.relin_key.b.shape
            self._gal = (self._put(np.zeros(shape, np.uint32)), self._put(np.zeros(shape, np.uint32)))
        self.keys_bytes = sum(int(x.nbytes) for x in self._relin) + (sum(int(x.nbytes) for x in self._gal)
                                                                    if gal else 0)

    # -- transfers ------------------------------------------------------------------------------------
    def _put(self, x):
        return self._jax.device_put(np.ascontiguousarray(x), self.device)

    def to_device(self, ct: Ciphertext) -> DeviceCiphertext:
        """Upload a host ciphertext of this context."""
        if not isinstance(ct, Ciphertext):
            raise ParameterError(f"to_device expects a Ciphertext, got {type(ct).__name__}")
        check_same_context(ct, self.ev.fingerprint, self.ev.key_id, "ciphertext")
        if len(ct.parts) != 2:
            raise ParameterError(f"ciphertext has {len(ct.parts)} parts; device ciphertexts have 2")
        data = self._put(np.stack([p.data for p in ct.parts]).astype(np.uint32))
        return DeviceCiphertext(data, ct.level, ct.scale, ct.length, ct.is_complex)

    def to_host(self, dct: DeviceCiphertext) -> Ciphertext:
        """The host ciphertext of a device ciphertext (the evaluator's own ``Ciphertext``)."""
        from ..ring import RNSPoly
        self._check(dct)
        data = np.asarray(self._jax.device_get(dct.data)).astype(np.uint64)
        idx = tuple(range(self.params.limbs_at(dct.level)))
        parts = [RNSPoly(self.ring, np.ascontiguousarray(data[t]), idx, True) for t in range(2)]
        return self.ev._make(parts, dct.level, dct.scale, dct.length, dct.is_complex)

    # -- the evaluator protocol (crypto.ckks.evaluator_protocol) -----------------------------------------
    @property
    def key_id(self) -> bytes:
        return self.ev.key_id

    @property
    def fingerprint(self) -> bytes:
        return self.ev.fingerprint

    def from_host(self, ct: Ciphertext) -> DeviceCiphertext:
        """``to_device`` under the protocol's name."""
        return self.to_device(ct)

    def encode(self, values, level: int, scale: float) -> DevicePlaintext:
        """``values`` encoded on the host (``Evaluator.encode``: level, exact scale) and uploaded."""
        return self.plaintext(self.ev.encode(values, level, scale))

    def drop_level(self, a: DeviceCiphertext, levels: int = 1) -> DeviceCiphertext:
        """a ``levels`` levels lower (``Evaluator.drop_level``)."""
        self._check(a)
        if isinstance(levels, bool) or not isinstance(levels, (int, np.integer)) or not 0 <= levels <= a.level:
            raise LevelError(f"levels={levels!r} not in [0, {a.level}] for a ciphertext at level {a.level}")
        return self.to_level(a, a.level - int(levels))

    def _device_plain(self, pt) -> DevicePlaintext:
        """A device plaintext as is; a host ``Plaintext`` uploaded once while it lives (the upload is kept
        beside a weak reference and dropped with the host plaintext: a model's encoded weights are uploaded
        once per cache entry, a plaintext encoded for one use is freed after it)."""
        if isinstance(pt, DevicePlaintext):
            return pt
        self._check_plain(pt)
        key = id(pt)
        hit = self._uploads.get(key)
        if hit is not None and hit[0]() is pt:
            return hit[1]
        uploads = self._uploads
        up = self.plaintext(pt)
        uploads[key] = (weakref.ref(pt, lambda _, key=key: uploads.pop(key, None)), up)
        return up

    def _operand(self, b, level: int, scale: float):
        """``Evaluator._as_operand`` on the device: a DeviceCiphertext (checked), a device plaintext (a host
        ``Plaintext`` uploaded), a scalar's constant or a vector encoded at ``level`` and ``scale``."""
        if isinstance(b, DeviceCiphertext):
            return self._check(b, "operand")
        if isinstance(b, (Plaintext, DevicePlaintext)):
            return self._device_plain(b)
        if _is_scalar(b):
            return self._constant(b, level, scale)
        if isinstance(b, (np.ndarray, list, tuple)):
            return self.encode(b, level, scale)
        raise ParameterError(f"operand must be a DeviceCiphertext, a plaintext, a numpy array or a scalar, got "
                             f"{type(b).__name__}" + (" (upload a host ciphertext with to_device / from_host)"
                                                      if isinstance(b, Ciphertext) else ""))

    def _plain_at(self, pt: DevicePlaintext, a: DeviceCiphertext):
        """(pt, a) at the lower of their levels (``Evaluator._plain_at``: a plaintext keeps its low limbs)."""
        level = min(pt.level, a.level)
        if pt.level > level:
            limbs = self.params.limbs_at(level)
            data = self._run(("keep_pt", limbs), lambda: lambda x: x[:limbs], pt.data)
            pt = DevicePlaintext(data, level, pt.scale, pt.length, pt.is_complex)
        return pt, self.to_level(a, level)

    def _levels(self, a: DeviceCiphertext, b: DeviceCiphertext):
        level = min(a.level, b.level)
        return self.to_level(a, level), self.to_level(b, level)

    def _scale_to(self, a: DeviceCiphertext, target: float) -> DeviceCiphertext:
        """``Evaluator._scale_to``: a·round(target/scale · q_top), rescaled (one level)."""
        factor = self.ev._scale_factor(a.level, a.scale, target)
        return self.rescale(self.mul_int(a, factor, a.scale * factor))

    @staticmethod
    def _ordered(a, b):
        """(ciphertext, other): the host's operands may come in either order."""
        return (b, a) if not isinstance(a, DeviceCiphertext) and isinstance(b, DeviceCiphertext) else (a, b)

    def plaintext(self, pt: Plaintext) -> DevicePlaintext:
        """Upload a host plaintext of these parameters."""
        self._check_plain(pt)
        data = self._put(pt.poly.data.astype(np.uint32))
        return DevicePlaintext(data, pt.level, pt.scale, pt.length, pt.is_complex)

    def _check_plain(self, pt):
        if not isinstance(pt, Plaintext):
            raise ParameterError(f"expected a Plaintext, got {type(pt).__name__}")
        check_same_context(pt, self.ev.fingerprint, None, "plaintext")

    def linear(self, groups) -> DeviceLinear:
        """Upload BSGS groups ((m, [(i, Plaintext)]), ...) as ``crypto.ckks.linear.bsgs_sum`` takes them (all
        plaintexts at one level and one scale); the Galois keys of every step must exist."""
        groups = [(self._step(m), [(self._step(i), pt) for i, pt in pairs]) for m, pairs in groups]
        if not groups or not all(pairs for _, pairs in groups):
            raise ParameterError("a linear transform needs at least one group and a plaintext in every group")
        for _, pairs in groups:
            for _, pt in pairs:
                self._check_plain(pt)
        pts = [pt for _, pairs in groups for _, pt in pairs]
        levels, scales = {pt.level for pt in pts}, {pt.scale for pt in pts}
        if len(levels) != 1 or len(scales) != 1:
            raise ParameterError(f"the plaintexts of a linear transform must share one level and one scale; got "
                                 f"levels {sorted(levels)} and {len(scales)} scales")
        half = self.params.n // 2
        babies = [0] + sorted({i for _, pairs in groups for i, _ in pairs if i % half})
        pos = {i: b for b, i in enumerate(babies)}
        groups.sort(key=lambda g: bool(g[0] % half))                   # unrotated groups first
        unrotated = sum(1 for m, _ in groups if not m % half)
        level = levels.pop()
        plains = np.zeros((len(groups), len(babies), self.params.limbs_at(level), self.params.n), dtype=np.uint32)
        for g, (m, pairs) in enumerate(groups):
            seen = set()
            for i, pt in pairs:
                b = pos[i] if i % half else 0
                if b in seen:
                    raise ParameterError(f"group {m} has two plaintexts for baby step {i} (mod N/2 = {half})")
                seen.add(b)
                plains[g, b] = pt.poly.data
        giants = tuple(m for m, _ in groups)
        steps = babies[1:] + [m for m in giants[unrotated:]]
        gs = [self._key_for_step(k) for k in steps]
        key_index = self._put(np.array([self._gal_index[g] for g in gs], dtype=np.int32))
        perms = self._put(np.stack([self.ring.automorphism_indices(g, True) for g in gs]).astype(np.int32)
                          if gs else np.zeros((0, self.params.n), np.int32))
        return DeviceLinear(self._put(plains), tuple(babies), giants, unrotated, level, scales.pop(),
                            max(pt.length for pt in pts), any(pt.is_complex for pt in pts), key_index, perms)

    def encode_linear(self, matrix, level: int, baby: int | None = None) -> DeviceLinear:
        """``bsgs_diagonals(matrix)`` encoded at ``level`` (scale Δ) and uploaded."""
        groups = [(m, [(i, self.ev.encode(v, level, self.params.scale)) for i, v in pairs])
                  for m, pairs in bsgs_diagonals(matrix, self.params.slots, baby)]
        return self.linear(groups)

    # -- checks -----------------------------------------------------------------------------------------
    def _check(self, dct, what="ciphertext"):
        if not isinstance(dct, DeviceCiphertext):
            raise ParameterError(f"{what} must be a DeviceCiphertext, got {type(dct).__name__}")
        limbs = self.params.limbs_at(dct.level)
        if tuple(dct.data.shape) != (2, limbs, self.params.n):
            raise ParameterError(f"{what} data has shape {tuple(dct.data.shape)}; level {dct.level} needs "
                                 f"(2, {limbs}, {self.params.n})")
        return dct

    def _key_for_step(self, step: int) -> int:
        g = galois_element(step, self.params.n)
        if g not in self._gal_index:
            raise KeyMissingError(f"no Galois key for rotation step {step}; this context has keys for steps "
                                  f"{sorted(self.ev.rotation_steps)}")
        return g

    @staticmethod
    def _step(step) -> int:
        if isinstance(step, bool) or not isinstance(step, (int, np.integer)):
            raise ParameterError(f"rotation step={step!r} must be an integer")
        return int(step)

    # -- per-level constants -----------------------------------------------------------------------------
    def _cached(self, key, make):
        if key not in self._cache:
            with self._jax.enable_x64(True):                      # float64 constants stay float64
                self._cache[key] = make()
        return self._cache[key]

    def _tables(self, idx):
        idx = tuple(int(i) for i in idx)
        return self._cached(("tables", idx), lambda: self._kb.DeviceTables.of(self.ring.tables.subset(idx)))

    def _bc(self, moduli):
        """Barrett constants (``jax_backend.barrett_constants``) of a (k, 1) column of moduli, on the device."""
        moduli = tuple(int(q) for q in np.asarray(moduli).reshape(-1))
        return self._cached(("bc", moduli), lambda: self._bc_fn(self._put(_col(moduli))))

    def _q(self, level: int):
        return self._bc(self.ring.moduli[: self.params.limbs_at(level)])

    def _divide_consts(self, head, tail):
        """Device constants of round(x / Π tail) from head ∪ tail to head (``ring.DivideRound``)."""
        def make():
            d = self.ring.divider(tuple(head), tuple(tail))
            c = {k: self._put(v) for k, v in dict(
                half_tail=_col(d.half_tail), garner=d.garner.astype(np.uint32),
                garner_shoup=d.garner_shoup.astype(np.uint32), radix_inv=_col(d.radix_inv),
                weight=d.weight.astype(np.uint32), weight_shoup=d.weight_shoup.astype(np.uint32),
                half_head=_col(d.half_head), t_inv=_col(d.t_inv)).items()}
            c.update(tail_bc=self._bc(d.q_tail), head_bc=self._bc(d.q_head), tail_tables=self._tables(tail),
                     head_tables=self._tables(head))
            return c
        return self._cached(("div", tuple(head), tuple(tail)), make)

    def _rescale_consts(self, level: int):
        limbs, count = self.params.limbs_at(level), len(self.params.q_levels[level])
        return self._divide_consts(tuple(range(limbs - count)), tuple(range(limbs - count, limbs)))

    def _mod_down_consts(self, level: int, extra: int):
        limbs, p_idx = self.params.limbs_at(level), self.switcher.p_idx
        return self._divide_consts(tuple(range(limbs - extra)), tuple(range(limbs - extra, limbs)) + p_idx)

    def _ks_consts(self, level: int):
        """Device constants of key switching at ``level`` (``KeySwitcher.plan``)."""
        def make():
            plan = self.switcher.plan(level)
            convs = [self._conv_consts(conv) for conv in plan.conversions]
            c = {k: self._put(v) for k, v in dict(
                digit_ids=plan.digit_ids.astype(np.int32), key_rows=np.array(plan.ext_idx, dtype=np.int32),
                p_mod_q=_col(plan.p_mod_q)).items()}
            c.update(convs=convs, ext_bc=self._bc(plan.ext_q), ext_tables=self._tables(plan.ext_idx),
                     q_tables=self._tables(range(self.params.limbs_at(level))))
            return c
        return self._cached(("ks", level), make)

    def _conv_consts(self, conv):
        """Device constants of a centred conversion (a ``keyswitch.CenteredConversion``; ``_centred_convert``)."""
        big_q = math.prod(int(q) for q in conv.q_from)
        cv = {k: self._put(v) for k, v in dict(
            qhat_inv=_col(conv.qhat_inv), q_from_inv=np.asarray(conv.q_from_inv, np.float64).reshape(-1, 1),
            big_q_mod_p=_col([big_q % int(p) for p in conv.q_to])).items()}
        cv.update(from_bc=self._bc(conv.q_from), to_bc=self._bc(conv.q_to),
                  conv=self._kb.DeviceConversion.of(BasisConversion(tuple(int(q) for q in conv.q_from),
                                                                    tuple(int(p) for p in conv.q_to))))
        return cv

    def _rotation_consts(self, steps):
        def make():
            gs = [galois_element(k, self.params.n) for k in steps]
            return (self._put(np.array([self._gal_index[g] for g in gs], dtype=np.int32)),
                    self._put(np.stack([self.ring.automorphism_indices(g, True) for g in gs]).astype(np.int32)))
        return self._cached(("rotc", tuple(steps)), make)

    # -- jitted operations ---------------------------------------------------------------------------------
    def _run(self, key, make, *args):
        """The jitted function ``make()`` (compiled once per key and shapes) on ``args``, 64-bit types enabled
        for the float64 step of ModUp."""
        fn = self._cached(("jit",) + key, lambda: self._jax.jit(make()))
        with self._jax.enable_x64(True):
            return fn(*args)

    def add(self, a, b) -> DeviceCiphertext:
        """a + b, one of them a device ciphertext (``Evaluator.add``'s rules): another device ciphertext (levels
        and scales aligned as the host aligns them, ``evaluator.align``), a plaintext at a's scale (device or
        host; the lower level kept), a numpy vector or a scalar (encoded at a's level and scale; a scalar's
        constant uploaded once per value, level and scale)."""
        a, b = self._ordered(a, b)
        self._check(a)
        b = self._operand(b, a.level, a.scale)
        kb = self._kb
        if isinstance(b, DevicePlaintext):
            if abs(b.scale / a.scale - 1) > SCALE_TOLERANCE:
                raise ScaleError(f"plaintext scale 2^{math.log2(b.scale):.4f} differs from the ciphertext scale "
                                 f"2^{math.log2(a.scale):.4f}; encode it at scale=ct.scale")
            b, a = self._plain_at(b, a)
            out = self._run(("add_pt",), lambda: lambda x, p, c: x.at[0].set(kb.addmod(x[0], p, c.q)),
                            a.data, b.data, self._q(a.level))
        else:
            a, b = align(self, a, b)
            out = self._run(("add",), lambda: lambda x, y, c: kb.addmod(x, y, c.q), a.data, b.data, self._q(a.level))
        return DeviceCiphertext(out, a.level, a.scale, max(a.length, b.length), a.is_complex or b.is_complex)

    def sub(self, a, b) -> DeviceCiphertext:
        """a − b, one of them a device ciphertext, aligned as ``add`` (``Evaluator.sub``: two ciphertexts at one
        level and scale by one modular subtraction, otherwise a + (−b))."""
        if not isinstance(a, DeviceCiphertext):
            return self.add(self.neg(b), a)
        self._check(a)
        if isinstance(b, (Plaintext, DevicePlaintext)):
            return self.add(a, self._neg_plain(self._device_plain(b)))
        if _is_scalar(b):
            return self.add(a, -b)
        if isinstance(b, (np.ndarray, list, tuple)):
            return self.add(a, -np.asarray(b))
        self._check(b, "operand")
        if a.level != b.level or abs(b.scale / a.scale - 1) > SCALE_TOLERANCE:
            return self.add(a, self.neg(b))
        kb = self._kb
        out = self._run(("sub",), lambda: lambda x, y, c: kb.submod(x, y, c.q), a.data, b.data, self._q(a.level))
        return DeviceCiphertext(out, a.level, a.scale, max(a.length, b.length), a.is_complex or b.is_complex)

    def _neg_plain(self, pt: DevicePlaintext) -> DevicePlaintext:
        kb = self._kb
        out = self._run(("neg",), lambda: lambda x, c: kb.negmod(x, c.q), pt.data, self._q(pt.level))
        return DevicePlaintext(out, pt.level, pt.scale, pt.length, pt.is_complex)

    def neg(self, a: DeviceCiphertext) -> DeviceCiphertext:
        """−a (``Evaluator.neg``)."""
        self._check(a)
        kb = self._kb
        out = self._run(("neg",), lambda: lambda x, c: kb.negmod(x, c.q), a.data, self._q(a.level))
        return DeviceCiphertext(out, a.level, a.scale, a.length, a.is_complex)

    def to_level(self, a: DeviceCiphertext, level: int) -> DeviceCiphertext:
        """a at a lower (or its own) ``level``: the primes above it dropped (``Evaluator.to_level``)."""
        self._check(a)
        if isinstance(level, bool) or not isinstance(level, (int, np.integer)) or not 0 <= level <= a.level:
            raise LevelError(f"level={level!r} not in [0, {a.level}] for a ciphertext at level {a.level}")
        if level == a.level:
            return a
        limbs = self.params.limbs_at(int(level))
        out = self._run(("keep", limbs), lambda: lambda x: x[:, :limbs], a.data)
        return DeviceCiphertext(out, int(level), a.scale, a.length, a.is_complex)

    def mul_int(self, a: DeviceCiphertext, c: int, scale: float | None = None) -> DeviceCiphertext:
        """a·c for an integer c, exactly (each limb times c mod its prime; ``RNSPoly.mul_scalars``); the scale
        is a's unless given.  The residues of c are uploaded once per (c, level)."""
        self._check(a)
        if isinstance(c, bool) or not isinstance(c, (int, np.integer)):
            raise ParameterError(f"c={c!r} must be an integer")
        moduli = self.ring.moduli[: self.params.limbs_at(a.level)]
        col = self._cached(("int", int(c), len(moduli)), lambda: self._put(_col([int(c) % int(q) for q in moduli])))
        kb = self._kb
        out = self._run(("mul_col",), lambda: lambda x, v, qc: _mulc(kb, x, v, qc), a.data, col, self._q(a.level))
        return DeviceCiphertext(out, a.level, float(a.scale if scale is None else scale), a.length, a.is_complex)

    def times_i(self, a: DeviceCiphertext) -> DeviceCiphertext:
        """i·a exactly: the product by X^(N/2) (i in every slot), scale unchanged."""
        self._check(a)
        limbs = self.params.limbs_at(a.level)
        mono = self._cached(("i", limbs), lambda: self._put(
            self.ev._half_monomial(tuple(range(limbs))).astype(np.uint32)))
        kb = self._kb
        out = self._run(("mul_pt",), lambda: lambda x, p, c: _mulc(kb, x, p[None], c), a.data, mono,
                        self._q(a.level))
        return DeviceCiphertext(out, a.level, a.scale, a.length, True)

    def _constant(self, value, level: int, scale: float) -> DevicePlaintext:
        """``Evaluator._constant`` (every slot = value) on the device, cached per (value, level, scale)."""
        v = complex(value)

        def make():
            data = self.ev._constant(value, level, scale).data.astype(np.uint32)
            return DevicePlaintext(self._put(data), level, float(scale), 1, bool(np.iscomplexobj(value)))
        return self._cached(("const", v, level, float(scale), bool(np.iscomplexobj(value))), make)

    def mul_plain(self, a: DeviceCiphertext, pt: DevicePlaintext) -> DeviceCiphertext:
        """a·pt (no rescale): scales multiply (``Evaluator.mul`` by a Plaintext)."""
        self._check(a)
        if not isinstance(pt, DevicePlaintext):
            raise ParameterError(f"pt must be a DevicePlaintext, got {type(pt).__name__}")
        if pt.level != a.level:
            raise LevelError(f"plaintext level {pt.level} differs from the ciphertext level {a.level}")
        self.ev._check_product_scale(a.level, a.scale * pt.scale)
        kb = self._kb
        out = self._run(("mul_pt",), lambda: lambda x, p, c: _mulc(kb, x, p[None], c), a.data, pt.data,
                        self._q(a.level))
        return DeviceCiphertext(out, a.level, a.scale * pt.scale, max(a.length, pt.length),
                                a.is_complex or pt.is_complex)

    def rescale(self, a: DeviceCiphertext) -> DeviceCiphertext:
        """Divide by the primes of the top level, exactly (``RNSPoly.rescale``): level ℓ -> ℓ-1."""
        self._check(a)
        scale = self.ev._rescaled_scale(a.level, a.scale)
        kb, jnp = self._kb, self._jnp
        out = self._run(("rescale",), lambda: lambda x, c: _rescale_parts(kb, jnp, x, c), a.data,
                        self._rescale_consts(a.level))
        return DeviceCiphertext(out, a.level - 1, scale, a.length, a.is_complex)

    def mul(self, a, b) -> DeviceCiphertext:
        """a·b, not rescaled (``Evaluator.mul``), one of them a device ciphertext: two device ciphertexts
        relinearised at the lower level; a plaintext (device or host) at the lower level; a numpy vector or a
        scalar encoded at scale q_top (Π of the top level's primes; Δ at level 0)."""
        a, b = self._ordered(a, b)
        self._check(a)
        if isinstance(b, DeviceCiphertext):
            return self._mul(*self._levels(a, self._check(b, "operand")), False)
        if isinstance(b, (Plaintext, DevicePlaintext)):
            pt, a = self._plain_at(self._device_plain(b), a)
        else:
            scale = float(self.ev._top_modulus(a.level)) if a.level > 0 else self.params.scale
            self.ev._check_product_scale(a.level, a.scale * scale)
            pt = self._operand(b, a.level, scale)
        return self.mul_plain(a, pt)

    def mul_rescale(self, a, b) -> DeviceCiphertext:
        """rescale(a·b) (``Evaluator.mul_rescale``); for two device ciphertexts the relinearisation's ModDown
        and the rescale fused."""
        a, b = self._ordered(a, b)
        if isinstance(a, DeviceCiphertext) and isinstance(b, DeviceCiphertext):
            return self._mul(*self._levels(self._check(a), self._check(b, "operand")), True)
        return self.rescale(self.mul(a, b))

    def _mul(self, a, b, rescale: bool):
        self._check(a)
        self._check(b, "operand")
        if a.level != b.level:
            raise LevelError(f"operand level {b.level} differs from the ciphertext level {a.level}")
        scale = a.scale * b.scale
        self.ev._check_product_scale(a.level, scale)
        extra = len(self.params.q_levels[a.level]) if rescale else 0
        if rescale:
            scale = self.ev._rescaled_scale(a.level, scale)
        out = self._run(("mul", a.level, extra), lambda: self._make_mul(a.level), a.data, b.data, self._q(a.level),
                        self._ks_consts(a.level), self._mod_down_consts(a.level, extra), self._relin)
        return DeviceCiphertext(out, a.level - (extra > 0), scale, max(a.length, b.length),
                                a.is_complex or b.is_complex)

    def rotate(self, a: DeviceCiphertext, step: int) -> DeviceCiphertext:
        """Cyclic left rotation of the slots by ``step`` (``Evaluator.rotate``)."""
        step = self._step(step)
        return self.rotate_hoisted(a, [step])[step]

    def rotate_hoisted(self, a: DeviceCiphertext, steps) -> dict:
        """{step: rotate(a, step)} sharing one ModUp of c1: one jitted function, the key switches of the
        steps a ``lax.scan`` over their keys (one compiled body)."""
        self._check(a)
        if isinstance(steps, (str, bytes)) or not hasattr(steps, "__iter__"):
            raise ParameterError(f"steps={steps!r} must be a list of integer rotation steps")
        steps = [self._step(k) for k in steps]
        half = self.params.n // 2
        keyed = tuple(sorted({k % half for k in steps if k % half}))
        for k in steps:
            if k % half:
                self._key_for_step(k)
        out = {}
        if keyed:
            idx, perms = self._rotation_consts(keyed)
            res = self._run(("rot", a.level), lambda: self._make_rotations(a.level), a.data, self._q(a.level),
                            self._ks_consts(a.level), self._mod_down_consts(a.level, 0), self._gal, idx, perms)
            out = {k: DeviceCiphertext(res[j], a.level, a.scale, a.length, a.is_complex) for j, k in enumerate(keyed)}
        return {k: out[k % half] if k % half else a for k in steps}

    def conjugate(self, a: DeviceCiphertext) -> DeviceCiphertext:
        """Complex conjugation of every slot (``Evaluator.conjugate``): the rotations' compiled key switch with
        the conjugation key."""
        self._check(a)
        g = conjugation_element(self.params.n)
        if g not in self._gal_index:
            raise KeyMissingError("no Galois key for conjugation; pass conjugation=True to CKKSContext.keygen")
        idx, perms = self._cached(("conj",), lambda: (
            self._put(np.array([self._gal_index[g]], dtype=np.int32)),
            self._put(self.ring.automorphism_indices(g, True)[None].astype(np.int32))))
        res = self._run(("rot", a.level), lambda: self._make_rotations(a.level), a.data, self._q(a.level),
                        self._ks_consts(a.level), self._mod_down_consts(a.level, 0), self._gal, idx, perms)
        return DeviceCiphertext(res[0], a.level, a.scale, a.length, a.is_complex)

    def mod_raise(self, a: DeviceCiphertext) -> DeviceCiphertext:
        """Bootstrapping's ModRaise (``Bootstrapper.mod_raise``): ``a`` dropped to level 0, the centred residues
        mod q_0 of each part converted exactly to every prime of the top level (one jitted function: inverse
        NTT over q_0's primes, the centred conversion, NTT over the top level); the scale is kept."""
        a = self.to_level(self._check(a), 0)
        top = self.params.max_level
        base, limbs = self.params.limbs_at(0), self.params.limbs_at(top)
        kb, jnp, jax = self._kb, self._jnp, self._jax

        def consts():
            from ..keyswitch import CenteredConversion
            moduli = [int(q) for q in self.ring.moduli[:limbs]]
            return dict(base=self._tables(range(base)), top=self._tables(range(limbs)),
                        conv=self._conv_consts(CenteredConversion(moduli[:base], moduli[base:])))

        def make():
            def fn(x, c):
                coeff = jax.vmap(kb.intt, in_axes=(0, None))(x, c["base"])
                lifted = jnp.stack([jnp.concatenate([coeff[t], _centred_convert(kb, jnp, coeff[t], c["conv"])])
                                    for t in range(2)])
                return jax.vmap(kb.ntt, in_axes=(0, None))(lifted, c["top"])
            return fn
        out = self._run(("raise",), make, a.data, self._cached(("raise",), consts))
        return DeviceCiphertext(out, top, a.scale, a.length, a.is_complex)

    def bootstrap(self, a: DeviceCiphertext, config=None, *, progress=None) -> DeviceCiphertext:
        """``Evaluator.bootstrap`` on the device (``DeviceBootstrapper``): the same ciphertext, limb for limb.
        ``config``: as the host's (None: the configuration the keys were made for, else full slots);
        ``progress``: as the host's (True: a bar on stderr; a callable gets ``(done, total, label)``)."""
        from .bootstrap import as_config, plan_for
        report = hezk.progress.as_progress(progress, "bootstrapping", ParameterError)
        self._check(a)
        if report is not None:
            report(0, 4, "plan")
        cfg = as_config(self.ev.bootstrap_config if config is None else config)
        key = ("bootstrapper", cfg)
        if key not in self._cache:
            self._cache[key] = DeviceBootstrapper(self, plan_for(self.params, cfg))
        return self._cache[key].bootstrap(a, report)

    def matvec(self, a: DeviceCiphertext, lin: DeviceLinear, rescale: bool = True) -> DeviceCiphertext:
        """The BSGS linear transform ``lin`` of ``a``: rescale(Σ_m rot_m(Σ_i rot_i(a)·pt_(m,i))) with the baby
        rotations hoisted (``crypto.ckks.linear.bsgs_sum`` after ``rotate_hoisted``), one jitted function."""
        self._check(a)
        if not isinstance(lin, DeviceLinear):
            raise ParameterError(f"lin must be a DeviceLinear, got {type(lin).__name__}")
        if lin.level != a.level:
            raise LevelError(f"the transform is encoded at level {lin.level}; the ciphertext is at level {a.level}")
        scale = a.scale * lin.scale
        self.ev._check_product_scale(a.level, scale)
        if rescale:
            scale = self.ev._rescaled_scale(a.level, scale)
        div = self._rescale_consts(a.level) if rescale else {}
        out = self._run(("matvec", a.level, len(lin.babies), lin.unrotated, bool(rescale)),
                        lambda: self._make_matvec(a.level, len(lin.babies), lin.unrotated, rescale), a.data,
                        lin.plains, self._q(a.level), self._ks_consts(a.level), self._mod_down_consts(a.level, 0),
                        self._gal, lin.key_index, lin.perms, div)
        return DeviceCiphertext(out, a.level - bool(rescale), scale, max(a.length, lin.length),
                                a.is_complex or lin.is_complex)

    # -- builders of the jitted functions (pure functions of device arrays) ---------------------------------
    def _make_mul(self, level):
        kb, jnp = self._kb, self._jnp
        plan = self.switcher.plan(level)

        def fn(a, b, qc, ks, md, relin):
            a0, a1, b0, b1 = a[0], a[1], b[0], b[1]
            d0 = _mulc(kb, a0, b0, qc)
            d1 = kb.addmod(_mulc(kb, a0, b1, qc), _mulc(kb, a1, b0, qc), qc.q)
            d2 = _mulc(kb, a1, b1, qc)
            kbb, kaa = _inner(kb, jnp, _decompose(kb, jnp, plan, d2, ks), relin, ks, lift=(d0, d1))
            return _mod_down(kb, jnp, kbb, kaa, md)
        return fn

    def _make_rotations(self, level):
        kb, jnp, lax = self._kb, self._jnp, self._jax.lax
        plan = self.switcher.plan(level)

        def fn(a, qc, ks, md, gal, idx, perms):
            digits = _decompose(kb, jnp, plan, a[1], ks)

            def body(carry, x):
                i, perm = x
                return carry, _apply_galois(kb, jnp, a[0], digits, (gal[0][i], gal[1][i]), perm, qc, ks, md)
            return lax.scan(body, 0, (idx, perms))[1]
        return fn

    def _make_matvec(self, level, n_babies, unrotated, rescale):
        kb, jnp, lax = self._kb, self._jnp, self._jax.lax
        plan = self.switcher.plan(level)
        n_baby_keys = n_babies - 1

        def fn(a, plains, qc, ks, md, gal, key_index, perms, div):
            rot = [a[None]]
            if n_baby_keys:
                digits = _decompose(kb, jnp, plan, a[1], ks)

                def baby(carry, x):
                    i, perm = x
                    return carry, _apply_galois(kb, jnp, a[0], digits, (gal[0][i], gal[1][i]), perm, qc, ks, md)
                rot.append(lax.scan(baby, 0, (key_index[:n_baby_keys], perms[:n_baby_keys]))[1])
            rot = jnp.concatenate(rot, axis=0)                               # (B, 2, L, N)

            def inner(pts):                                                  # Σ_b rot_b · pts_b
                prods = _mulc(kb, rot, pts[:, None], qc)
                acc = prods[0]
                for b in range(1, n_babies):
                    acc = kb.addmod(acc, prods[b], qc.q)
                return acc

            total = jnp.zeros_like(a)
            for g in range(unrotated):
                total = kb.addmod(total, inner(plains[g]), qc.q)

            def giant(total, x):
                pts, i, perm = x
                t = inner(pts)
                r = _apply_galois(kb, jnp, t[0], _decompose(kb, jnp, plan, t[1], ks), (gal[0][i], gal[1][i]),
                                  perm, qc, ks, md)
                return kb.addmod(total, r, qc.q), None
            if plains.shape[0] > unrotated:
                total = lax.scan(giant, total, (plains[unrotated:], key_index[n_baby_keys:], perms[n_baby_keys:]))[0]
            return _rescale_parts(kb, jnp, total, div) if rescale else total
        return fn


# ------------------------------------------------------------------------------------------------------
# Bootstrapping on the device.

class _DeviceOps:
    """The evaluator calls ``Bootstrapper`` makes, on device ciphertexts (``DeviceEvaluator`` follows the host
    evaluator's operand rules itself: levels and scales aligned, scalars as constants)."""

    def __init__(self, dev: "DeviceEvaluator"):
        self.dev, self.params = dev, dev.params

    def _check(self, ct, what="ciphertext"):
        return self.dev._check(ct, what)

    def __getattr__(self, name):
        if name in ("add", "sub", "mul", "mul_rescale", "neg", "rescale", "to_level", "rotate", "rotate_hoisted",
                    "conjugate"):
            return getattr(self.dev, name)
        raise AttributeError(name)


class DeviceBootstrapper(Bootstrapper):
    """``crypto.ckks.bootstrap.Bootstrapper`` run on device ciphertexts: the same pipeline (ModRaise, SubSum,
    CoeffToSlot, EvalMod, SlotToCoeff; Cheon et al., EUROCRYPT 2018; the BSGS linear transforms of Halevi &
    Shoup, CRYPTO 2014/2018 and the level-collapsed FFT of Chen, Chillotti & Song, EUROCRYPT 2019), each of
    its homomorphic operations a ``DeviceEvaluator`` call, so the ciphertext stays on the device from input
    to output and the result equals the host bootstrap's limb for limb.

    What the host computes per call is made once here and kept on the device: the diagonals of each
    CoeffToSlot/SlotToCoeff level (encoded on the host, as the host bootstrap encodes them, and uploaded
    once per (transform, level, scale): the SlotToCoeff scale follows the input's scale, so a new input
    scale uploads its diagonals once), the integer and constant columns of EvalMod, the monomial X^(N/2).
    Each distinct (operation, level) is one XLA compilation, the first bootstrap pays them all.  Device
    memory: besides the keys, every transform level's diagonals as a (giants, babies, limbs, N) uint32
    array (``DeviceLinear``), zeros where a group lacks a baby step."""

    def __init__(self, dev: "DeviceEvaluator", plan):
        super().__init__(_DeviceOps(dev), plan)
        self.dev = dev
        self._linear: dict = {}
        self._host = None         # the host bootstrapper that runs an encapsulated ModRaise

    def _mul_int(self, ct, c, scale=None):
        return self.dev.mul_int(ct, int(c), scale)

    def _times_i(self, ct):
        return self.dev.times_i(ct)

    def mod_raise(self, ct):
        return self.dev.mod_raise(ct)

    def encapsulated_raise(self, ct):
        """Plain ModRaise on the device; with sparse-secret encapsulation the level-0 ciphertext goes to the host
        for the two key switches and the lift (``Bootstrapper.encapsulated_raise``) and comes back raised."""
        if self.plan.encapsulation_weight is None:
            return self.dev.mod_raise(ct)
        if self._host is None:
            self._host = Bootstrapper(self.dev.ev, self.plan)
        return self.dev.to_device(self._host.encapsulated_raise(self.dev.to_host(self.dev.to_level(ct, 0))))

    def linear_transform(self, ct, t, target_scale):
        """``Bootstrapper.linear_transform``: the same groups of diagonals (encoded at the same scale), one
        device BSGS matrix-vector product with its rescale (``DeviceEvaluator.matvec``)."""
        p = target_scale * self._top(ct.level) / ct.scale
        key = (id(t), ct.level, p)
        if key not in self._linear:
            host = self.dev.ev
            groups = [(shift, [(baby, host.encode(np.roll(t.diags[k], shift), ct.level, p)) for baby, k in terms])
                      for shift, terms in sorted(t.split.items())]
            self._linear[key] = self.dev.linear(groups)
        return self._relabel(self.dev.matvec(ct, self._linear[key], rescale=True), target_scale)


# ------------------------------------------------------------------------------------------------------
# Device steps (traced inside the jitted functions).  Residues: (rows, N) uint32; a modulus column is
# given by its Barrett constants ``c`` (``c.q`` the (rows, 1) moduli).

def _mulc(kb, a, b, c):
    """a·b mod q, q's Barrett constants precomputed (``jax_backend``'s Barrett product, no per-call setup)."""
    return kb._mulmod(a, b, c)


def _row(c, i):
    """The Barrett constants of row ``i`` of a column (scalars)."""
    return type(c)(*(f[i, 0] for f in c))


def _centred_convert(kb, jnp, x, c):
    """Rows mod p of the centred representative of x mod Q (``keyswitch._convert_centered``):
    [Σ_i y_i·(Q/q_i)]_p − v·[Q]_p with y_i = x_i·(Q/q_i)^-1 mod q_i; the sum is ``convert_basis`` (one BAT
    matrix product), v = round(Σ_i y_i/q_i) in float64 as on the host."""
    import jax
    y = _mulc(kb, x, c["qhat_inv"], c["from_bc"])                      # (k, N)
    terms = y.astype(jnp.float64) * c["q_from_inv"]                  # each product rounded once
    terms = jax.lax.optimization_barrier(terms)                      # no fused multiply-add into the sum
    frac = terms[0]
    for i in range(1, terms.shape[0]):                               # the host's summation order
        frac = frac + terms[i]
    v = (frac + 0.5).astype(jnp.uint32)                               # (N,), v <= k
    fast = kb.convert_basis(x, c["conv"])
    return kb.submod(fast, _mulc(kb, v[None, :], c["big_q_mod_p"], c["to_bc"]), c["to_bc"].q)


def _decompose(kb, jnp, plan, c, ks):
    """ModUp digits of c (NTT over Q_ℓ) as one (J, |ext|, N) array over Q_ℓ ∪ P: digit j is c itself on its
    own primes D_j and the centred conversion of c mod Q_j elsewhere (``KeySwitcher.decompose``).  Each
    digit is assembled in coefficient form over the whole basis and the J digits go through one NTT
    batched over j with the basis's tables (no per-digit table copies; the D_j rows are transformed back
    to c's own rows)."""
    import jax
    coeff = kb.intt(c, ks["q_tables"])
    digits = []
    for d, cv in zip(plan.digit_idx, ks["convs"]):
        conv = _centred_convert(kb, jnp, coeff[d[0]: d[-1] + 1], cv)     # rows: the basis without D_j, in order
        digits.append(jnp.concatenate([conv[: d[0]], coeff[d[0]: d[-1] + 1], conv[d[0]:]], axis=0))
    return jax.vmap(kb.ntt, in_axes=(0, None))(jnp.stack(digits), ks["ext_tables"])


def _inner(kb, jnp, digits, key, ks, lift=None):
    """Σ_j digits_j · key_j over Q_ℓ ∪ P (+ (P mod q)·lift_t on Q_ℓ); the key's digits and rows gathered on
    the device from the whole key."""
    key_b, key_a = key
    rows, ids = ks["key_rows"], ks["digit_ids"]
    ext = ks["ext_bc"]
    out_b, out_a = kb.keyswitch_inner(digits, key_b[ids][:, rows], key_a[ids][:, rows], ext.q)
    if lift is not None:
        limbs = lift[0].shape[0]
        head = type(ext)(*(f[:limbs] for f in ext))
        pq = ks["p_mod_q"]
        out_b = out_b.at[:limbs].set(kb.addmod(out_b[:limbs], _mulc(kb, lift[0], pq, head), head.q))
        out_a = out_a.at[:limbs].set(kb.addmod(out_a[:limbs], _mulc(kb, lift[1], pq, head), head.q))
    return out_b, out_a


def _divide_round(kb, jnp, x, c):
    """round(x / T) for both parts of x (2, kh + k, N) in NTT form, T = Π of the last k primes
    (``ring.DivideRound``): the residue t = (x + ⌊T/2⌋) mod T in mixed radix (Garner digits d_i), the
    correction (⌊T/2⌋ − t)·T^-1 on each head prime, then head·T^-1 + correction; (2, kh, N) out.  The two
    parts go through each NTT together (batched over the parts, one set of tables).

    A Garner digit d_j is a residue mod t_j, multiplied by constants mod other primes (t_i, the head primes),
    which may be smaller: those products are Shoup products (exact for any 32-bit d_j, as on the host),
    not Barrett's, whose quotient estimate needs both factors below the modulus (with 31-bit special primes
    over 23-25-bit head primes, as in the N16 preset, a Barrett product left ~half the limbs unreduced)."""
    import jax
    hc = c["head_bc"]
    heads = hc.q.shape[0]
    head, tail = x[:, :heads], x[:, heads:]
    k = tail.shape[1]
    tail = jax.vmap(kb.intt, in_axes=(0, None))(tail, c["tail_tables"])
    digits = []
    for i in range(k):
        ti = _row(c["tail_bc"], i)
        acc = kb.addmod(tail[:, i], c["half_tail"][i, 0], ti.q)
        for j in range(i):                                                # digit j < t_j, maybe > t_i
            acc = kb.addmod(acc, kb._mul_shoup(digits[j], c["garner"][i, j], c["garner_shoup"][i, j], ti.q), ti.q)
        digits.append(_mulc(kb, acc, c["radix_inv"][i, 0], ti))          # (2, N)
    corr = jnp.broadcast_to(c["half_head"], head.shape)
    for j, d in enumerate(digits):                                       # d < t_j, maybe > the head primes
        corr = kb.addmod(corr, kb._mul_shoup(d[:, None, :], c["weight"][:, j:j + 1], c["weight_shoup"][:, j:j + 1],
                                             hc.q), hc.q)
    corr = jax.vmap(kb.ntt, in_axes=(0, None))(corr, c["head_tables"])
    return kb.addmod(_mulc(kb, head, c["t_inv"], hc), corr, hc.q)


def _rescale_parts(kb, jnp, x, c):
    """Both parts of x (2, L, N) divided by the product of their last rows (those ``c`` was made for)."""
    return _divide_round(kb, jnp, x, c)


def _mod_down(kb, jnp, b, a, md):
    """ModDown of the key-switched pair (b, a) over Q_ℓ ∪ P (dividing by P, and the top primes if fused)."""
    return _divide_round(kb, jnp, jnp.stack([b, a]), md)


def _apply_galois(kb, jnp, c0, digits, key, perm, qc, ks, md):
    """σ_g(c0 + ModDown(Σ d_j·σ^-1(b_j)), ModDown(Σ d_j·σ^-1(a_j))) (``Evaluator._apply_galois``)."""
    kbb, kaa = _inner(kb, jnp, digits, key, ks)
    down = _mod_down(kb, jnp, kbb, kaa, md)
    out = down.at[0].set(kb.addmod(c0, down[0], qc.q))
    return out[:, :, perm]
