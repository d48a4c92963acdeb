"""Plan steps: instructions on ciphertext registers (Input, Pack, Replicate, RotateSum, Rotate, Multiply,
MulScalar, Rescale, Add, Negate, Mask, MatVecDiagonal), each with its rotations, counts and levels."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from crypto.ckks.linear import bsgs_sum

from ..backends import multiply_then_add
from ..layout import SlotLayout


def norm_shift(k: int, slots: int) -> int:
    """A rotation amount as the representative in [-slots/2, slots/2)."""
    return (int(k) + slots // 2) % slots - slots // 2


@lru_cache(maxsize=None)
def _chain(count: int, radix: int = 2) -> tuple[tuple[tuple[int, ...], str], ...]:
    """Stages (in units of the stride) that sum ``count`` shifted copies in about log2(count) rounds.

    Returns (multiples, source) stages applied in order: ``acc += sum_m rot(src, m*stride)``, where
    src is ``'acc'`` or ``'x'`` (one extra copy of the input) and a stage with several multiples
    shares one hoisted decomposition. S(2m) = S(m) + rot(S(m), m); with ``radix=4``
    S(4m) = S(m) + rot(S(m), m) + rot(S(m), 2m) + rot(S(m), 3m) (3 hoisted rotations instead of 2
    sequential ones); S(m+1) = S(m) + rot(x, m).
    """
    if count <= 1:
        return ()
    if radix == 4 and count % 4 == 0:
        q = count // 4
        return _chain(q, radix) + (((q, 2 * q, 3 * q), "acc"),)
    if count % 2:
        return _chain(count - 1, radix) + (((count - 1,), "x"),)
    return _chain(count // 2, radix) + (((count // 2,), "acc"),)


@dataclass(frozen=True, eq=False)
class Step:
    """One instruction on ciphertext registers. ``out`` is the register written."""

    out: int

    def inputs(self) -> tuple[int, ...]:
        return ()

    def rotation_steps(self, slots: int) -> list[int]:
        return []

    def counts(self, slots: int) -> Counter:
        return Counter()

    def levels(self) -> int:
        return 0


@dataclass(frozen=True, eq=False)
class Input(Step):
    """Register <- ciphertext ``ct`` of encrypted operand ``operand``."""

    operand: int
    ct: int

    def __str__(self):
        return f"r{self.out} = input operand {self.operand} ciphertext {self.ct}"

    def apply(self, be, regs, data):
        regs[self.out] = data.cts[self.operand][self.ct]


@dataclass(frozen=True, eq=False)
class Pack(Step):
    """Plaintext register <- plaintext tensor ``source`` (axes ``indices``) broadcast to ``layout`` tile ``tile``."""

    source: int
    layout: SlotLayout
    indices: str
    tile: int

    def __str__(self):
        t = self.layout.tiles[self.tile]
        return (f"p{self.out} = pack plaintext {self.source} [{self.indices}] box {t.start}+{t.size} "
                f"strides {self.layout.strides}")

    def apply(self, be, regs, data):
        arr = data.plain_in(self.source, self.indices, self.layout.shape)
        t = self.layout.tiles[self.tile]
        vec = np.zeros(self.layout.slots, dtype=np.complex128 if np.iscomplexobj(arr) else np.float64)
        vec[self.layout.positions(t)] = arr[self.layout.index(t)]
        regs[self.out] = vec


@dataclass(frozen=True, eq=False)
class UnaryStep(Step):
    """A step that reads one register, ``src``."""

    src: int

    def inputs(self):
        return (self.src,)


@dataclass(frozen=True, eq=False)
class _Chain(UnaryStep):
    """``sum_{m<count} rot(x, sign*m*stride)`` in about log2(count) rounds (see ``_chain``)."""

    count: int
    stride: int
    radix: int = 2
    sign = 1

    def stages(self):
        return _chain(self.count, self.radix)

    def rotation_steps(self, slots):
        return [norm_shift(self.sign * m * self.stride, slots) for ms, _ in self.stages() for m in ms]

    def counts(self, slots):
        stages = self.stages()
        single = sum(len(ms) == 1 for ms, _ in stages)
        hoisted = sum(len(ms) for ms, _ in stages if len(ms) > 1)
        return Counter(rotations=single, hoisted_rotations=hoisted, additions=single + hoisted)

    def _rotations_text(self):
        c = self.counts(0)
        hoisted = f" + {c['hoisted_rotations']} hoisted" if c["hoisted_rotations"] else ""
        return f"{c['rotations']} rotations{hoisted}"

    def apply(self, be, regs, data):
        regs[self.out] = _sum_chain(be, regs[self.src], self.stages(), self.sign * self.stride)


@dataclass(frozen=True, eq=False)
class Replicate(_Chain):
    """Copies at ``m*stride`` for ``m < count`` by rotate-and-add (needs zeros where the copies land)."""

    sign = -1

    def __str__(self):
        return f"r{self.out} = replicate r{self.src} x{self.count} at stride {self.stride} ({self._rotations_text()})"


@dataclass(frozen=True, eq=False)
class RotateSum(_Chain):
    """``sum_{m<count} rot(x, m*stride)``: the sum over one axis lands at its first index."""

    def __str__(self):
        return (f"r{self.out} = rotate-and-sum r{self.src} over {self.count} at stride {self.stride} "
                f"({self._rotations_text()})")


def _sum_chain(be, x, stages, stride):
    acc = x
    for multiples, src in stages:
        base = acc if src == "acc" else x
        if len(multiples) == 1:
            acc = be.add(acc, be.rotate(base, multiples[0] * stride))
            continue
        for rotated in be.rotate_many(base, [m * stride for m in multiples]).values():
            acc = be.add(acc, rotated)
    return acc


@dataclass(frozen=True, eq=False)
class Rotate(UnaryStep):
    """``rot(x, k)`` (used to align tiles whose offsets differ)."""

    k: int

    def rotation_steps(self, slots):
        return [norm_shift(self.k, slots)]

    def counts(self, slots):
        return Counter(rotations=1)

    def __str__(self):
        return f"r{self.out} = rotate r{self.src} by {self.k}"

    def apply(self, be, regs, data):
        regs[self.out] = be.rotate(regs[self.src], self.k)


@dataclass(frozen=True, eq=False)
class Multiply(Step):
    """SIMD product of two registers (ciphertext x ciphertext, relinearized, or ciphertext x plaintext)."""

    a: int
    b: int
    plain: bool

    def inputs(self):
        return (self.a,) if self.plain else (self.a, self.b)

    def counts(self, slots):
        return Counter(pt_mults=1) if self.plain else Counter(ct_mults=1)

    def __str__(self):
        return f"r{self.out} = r{self.a} * {'p' if self.plain else 'r'}{self.b}"

    def apply(self, be, regs, data):
        b = data.constant(regs[self.b]) if self.plain else regs[self.b]
        regs[self.out] = be.multiply(regs[self.a], b)


@dataclass(frozen=True, eq=False)
class MultiplyAccumulate(Step):
    """``acc + a * b`` of two ciphertext registers (``acc`` None: the first product of a sum). A backend with
    ``multiply_accumulate`` may keep the sum unrelinearized until the ``Relinearize`` step that closes it (one key
    switch for the whole sum); elsewhere a relinearized product and an addition."""

    acc: int | None
    a: int
    b: int

    def inputs(self):
        return (self.a, self.b) if self.acc is None else (self.acc, self.a, self.b)

    def counts(self, slots):
        return Counter(ct_mults=1, additions=int(self.acc is not None))

    def __str__(self):
        return f"r{self.out} = {'' if self.acc is None else f'r{self.acc} + '}r{self.a} * r{self.b}"

    def apply(self, be, regs, data):
        acc = None if self.acc is None else regs[self.acc]
        fused = getattr(be, "multiply_accumulate", None)
        regs[self.out] = (multiply_then_add(be, acc, regs[self.a], regs[self.b]) if fused is None
                          else fused(acc, regs[self.a], regs[self.b]))


@dataclass(frozen=True, eq=False)
class AlignLevel(UnaryStep):
    """``src`` at the lower of its level and ``other``'s, where the backend can drop primes (``align_level``;
    elsewhere itself): the operands of a sum of products that follows meet at one level once, not in every product
    (which ``MultiplyAccumulate`` needs to defer the relinearization)."""

    other: int

    def inputs(self):
        return (self.src, self.other)

    def __str__(self):
        return f"r{self.out} = r{self.src} at the level of r{self.other}"

    def apply(self, be, regs, data):
        align = getattr(be, "align_level", None)
        regs[self.out] = regs[self.src] if align is None else align(regs[self.src], regs[self.other])


@dataclass(frozen=True, eq=False)
class Relinearize(UnaryStep):
    """The ciphertext of a ``MultiplyAccumulate`` sum (its one relinearization, where the backend deferred it)."""

    def __str__(self):
        return f"r{self.out} = relinearize r{self.src}"

    def apply(self, be, regs, data):
        close = getattr(be, "relinearize_sum", None)
        regs[self.out] = regs[self.src] if close is None else close(regs[self.src])


@dataclass(frozen=True, eq=False)
class MulScalar(UnaryStep):
    """``x * c`` for a Python scalar ``c`` (encoded as a constant plaintext)."""

    value: complex

    def counts(self, slots):
        return Counter(pt_mults=1)

    def __str__(self):
        return f"r{self.out} = r{self.src} * {self.value}"

    def apply(self, be, regs, data):
        regs[self.out] = be.multiply(regs[self.src], self.value)


@dataclass(frozen=True, eq=False)
class Rescale(UnaryStep):
    """Divide by the top level's primes: one level consumed."""

    def counts(self, slots):
        return Counter(rescales=1)

    def levels(self):
        return 1

    def __str__(self):
        return f"r{self.out} = rescale r{self.src}"

    def apply(self, be, regs, data):
        regs[self.out] = be.rescale(regs[self.src])


@dataclass(frozen=True, eq=False)
class Add(Step):
    """``a + b`` or ``a - b`` (``b`` a ciphertext or plaintext register)."""

    a: int
    b: int
    subtract: bool = False
    plain: bool = False

    def inputs(self):
        return (self.a,) if self.plain else (self.a, self.b)

    def counts(self, slots):
        return Counter(additions=1)

    def __str__(self):
        return f"r{self.out} = r{self.a} {'-' if self.subtract else '+'} {'p' if self.plain else 'r'}{self.b}"

    def apply(self, be, regs, data):
        regs[self.out] = (be.sub if self.subtract else be.add)(regs[self.a], regs[self.b])


@dataclass(frozen=True, eq=False)
class Negate(UnaryStep):
    """``-x``."""

    def __str__(self):
        return f"r{self.out} = -r{self.src}"

    def apply(self, be, regs, data):
        regs[self.out] = be.negate(regs[self.src])


@dataclass(frozen=True, eq=False)
class Mask(Step):
    """Masked diagonal move ``y = sum_g rot( sum_(s,b) m_(g,s,b) * rot(x_s, -b), -g )``.

    Moves every listed slot of the sources to its new slot (element ``e`` shifts by ``g + b``) and zeroes
    everything else; with all shifts 0 it is a plain mask. Baby shifts of each source share one hoisted
    decomposition; giant rotations are shared by all sources (baby-step/giant-step, Halevi–Shoup 2018).
    ``terms`` holds (giant, source register, baby, slots where the 0/1 mask -- already rotated by
    -baby -- is 1); the dense masks are built at run time.
    """

    srcs: tuple[int, ...]
    terms: tuple = field(repr=False)
    note: str = ""

    def inputs(self):
        return self.srcs

    def __post_init__(self):
        object.__setattr__(self, "babies", frozenset((s, b) for _, s, b, _ in self.terms if b))
        object.__setattr__(self, "giants", frozenset(g for g, _, _, _ in self.terms if g))

    def _babies(self):
        return self.babies

    def _giants(self):
        return self.giants

    def rotation_steps(self, slots):
        return sorted({norm_shift(-b, slots) for _, b in self._babies()} | {norm_shift(-g, slots) for g in self._giants()})

    def counts(self, slots):
        return Counter(hoisted_rotations=len(self._babies()), rotations=len(self._giants()),
                       pt_mults=len(self.terms), additions=len(self.terms))

    def __str__(self):
        srcs = ", ".join(f"r{s}" for s in self.srcs)
        if not self._babies() and not self._giants():
            return f"r{self.out} = mask {srcs} ({len(self.terms)} plaintext mask){self.note}"
        return (f"r{self.out} = move {srcs}: {len(self.terms)} masked diagonals, {len(self._babies())} hoisted baby + "
                f"{len(self._giants())} giant rotations{self.note}")

    def apply(self, be, regs, data):
        babies = {}
        for s in self.srcs:
            shifts = sorted({-b for _, src, b, _ in self.terms if src == s and b})
            babies[s] = be.rotate_many(regs[s], shifts) if shifts else {}
            babies[s][0] = regs[s]
        out = None
        for g in sorted({g for g, _, _, _ in self.terms}):
            inner = None
            for gg, s, b, ones in self.terms:
                if gg == g:
                    mask = np.zeros(data.slots)
                    mask[ones] = 1.0
                    term = be.multiply(babies[s][-b], data.constant(mask))
                    inner = term if inner is None else be.add(inner, term)
            inner = be.rotate(inner, -g) if g else inner
            out = inner if out is None else be.add(out, inner)
        regs[self.out] = out


@dataclass(frozen=True, eq=False)
class MatVecDiagonal(UnaryStep):
    """Halevi–Shoup diagonal method with baby-step/giant-step: ``y[j] = sum_t M[j, j+t mod D] x[j+t mod D]``,
    for every vector ``x`` of a batch at once (one per base slot in ``bases``).

    ``src`` holds each ``x`` twice (at ``base + k*stride`` and again ``D*stride`` later); the matrix is
    plaintext tensor ``source`` with axes (row, col) = ``indices``. Baby rotations by ``r*stride``
    (r < baby) are hoisted; giant rotations by ``g*stride`` (g a multiple of baby).
    """

    source: int
    indices: str
    rows: int
    cols: int
    dim: int
    stride: int
    bases: tuple
    baby: int

    def _giants(self):
        return range(0, self.dim, self.baby)

    def rotation_steps(self, slots):
        return sorted({norm_shift(r * self.stride, slots) for r in range(1, min(self.baby, self.dim))}
                      | {norm_shift(g * self.stride, slots) for g in self._giants() if g})

    def counts(self, slots):
        return Counter(hoisted_rotations=min(self.baby, self.dim) - 1, rotations=len(self._giants()) - 1,
                       pt_mults=self.dim, additions=self.dim)

    def __str__(self):
        return (f"r{self.out} = diagonal matvec plaintext {self.source} [{self.indices}] ({self.rows}x{self.cols}) "
                f"* r{self.src}: {self.dim} diagonals, {min(self.baby, self.dim) - 1} hoisted baby + "
                f"{len(self._giants()) - 1} giant rotations")

    def diagonals(self, matrix, slots):
        """Plaintext vectors ``rot(diag_(g+r), -g*stride)`` for every t = g + r (same for every base)."""
        d, s = self.dim, self.stride
        bases = np.asarray(self.bases, dtype=np.int64)[:, None]
        j = np.arange(self.rows)
        out = {}
        for t in range(d):
            col = (j + t) % d
            ok = col < self.cols
            vec = np.zeros(slots, dtype=matrix.dtype if np.iscomplexobj(matrix) else np.float64)
            g = t - t % self.baby
            vec[((bases + (j[ok] + g) * s) % slots).ravel()] = np.broadcast_to(
                matrix[j[ok], col[ok]], (len(self.bases), int(ok.sum()))).ravel()
            out[t] = vec
        return out

    def apply(self, be, regs, data):
        """The accumulation is ``crypto.ckks.linear.bsgs_sum``, the one the packed model path and bootstrapping's
        transforms use: on a backend with ``mul`` (``plan.affine.EvaluatorBackend``) its fused products and
        threads, else through the backend's ``multiply``/``add`` (the same order of operations)."""
        matrix = data.plain_in(self.source, self.indices, (self.rows, self.cols))
        diags = self.diagonals(matrix, data.slots)
        x = regs[self.src]
        shifts = [r * self.stride for r in range(1, min(self.baby, self.dim))]
        babies = be.rotate_many(x, shifts) if shifts else {}
        babies[0] = x
        groups = [(g * self.stride, [(r * self.stride, data.constant(diags[g + r]))
                                     for r in range(min(self.baby, self.dim - g))]) for g in self._giants()]
        regs[self.out] = bsgs_sum(bsgs_evaluator(be), babies, groups, rotate=be.rotate)


def bsgs_evaluator(be):
    """``be`` as ``crypto.ckks.linear.bsgs_sum``'s evaluator: itself where it has ``mul`` (its fused products and
    threads), else its ``multiply``/``add`` under those names."""
    return be if hasattr(be, "mul") else _Accumulate(be)


class _Accumulate:
    """``bsgs_sum``'s evaluator (``mul``, ``add``) over a plan backend (``multiply``, ``add``)."""

    __slots__ = ("be",)

    def __init__(self, be):
        self.be = be

    def mul(self, a, b):
        return self.be.multiply(a, b)

    def add(self, a, b):
        return self.be.add(a, b)
