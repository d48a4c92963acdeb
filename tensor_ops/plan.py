"""Einsum -> a printable HE plan: Pack, Replicate, Multiply, RotateSum, Mask, Rescale (and a few helpers).

Public surface::

    p = tensor_ops.plan("ij,jk->ik", (8, 8), (8, 8), params=params, encrypted=(True, False))
    print(p.explain())          # the packing, the strategy chosen and why, every step
    p.rotations()               # exact rotation steps to give CKKSContext.keygen(rotations=...)
    p.depth()                   # levels consumed (multiplications and masks, each followed by a rescale)
    p.cost()                    # counts: rotations (hoisted ones apart), multiplies, ciphertexts, keys
    p.input_layouts             # how to encrypt each operand (layouts="auto" may ask for client packing)
    p.run(backend, operands)    # operands: lists of backend ciphertexts (encrypted) or numpy arrays (plain)
    p.simulate(*arrays)         # the same steps on the PlainBackend (numpy), no keys

Lowering (each operand in its current :class:`SlotLayout`; nothing here touches a key):

1. repeated indices of an encrypted operand become a diagonal layout (free: strides add up), size-1
   broadcast axes are squeezed (free); plaintext operands are combined in the clear with numpy;
2. indices private to one encrypted operand are summed by rotate-and-sum;
3. operands are contracted pairwise, each pair by the cheapest of these strategies (cost model:
   rotations, hoisted rotations, multiplies, rescales and new rotation keys):

   * replicate-multiply-reduce: one operand (the anchor) keeps its layout; the indices it lacks are
     appended at new slot strides (inside the ciphertext while they fit, across extra ciphertext
     tiles after that: tiling, never an abort) and filled by rotate-and-add replication; the other
     operand is moved there by one masked baby-step/giant-step diagonal move (a ``Mask`` step:
     plaintext 0/1 diagonals, hoisted baby rotations, shared giant rotations) and replicated along
     the anchor's other axes; a plaintext operand is simply packed in the clear. Both anchors are
     tried. SIMD multiply, rescale, rotate-and-sum over contracted axes, add the tiles;
   * output-stationary: kept indices keep their native strides, contracted ones go outer (and across
     tiles), so each operand moves only its contracted axis (large encrypted matmuls);
   * the diagonal method of Halevi and Shoup ("Algorithms in HElib", CRYPTO 2014) with
     baby-step/giant-step and hoisted rotations ("Faster homomorphic linear transformations in
     HElib", CRYPTO 2018) for ``x[..., k] M[k, j]`` with ``M`` plaintext, batched over x's other axes;
4. the result's axes are put in output order (free: a layout transpose).

With ``layouts="auto"`` the planner also prices client-side packings (operands encrypted already
replicated, or with a copy for the diagonal method, or tiled straight into the stationary layout)
and keeps the cheapest; the notes say which strategy won and the estimates of the others.
The step vocabulary follows EinHops (Garimella, Ebel and Reagen, arXiv:2507.07972, 2025): pack,
expand by rotations, multiply, reduce by rotations.
"""
from __future__ import annotations

import itertools
import string
from collections import Counter
from dataclasses import dataclass, field, replace
from math import ceil

import numpy as np

from crypto.errors import LevelError, ShapeError

from .layout import SlotLayout, Tile
from .parse import EinsumSpec, broadcast_shapes, parse

__all__ = ["Plan", "CostModel", "plan", "build_plan", "Step", "Input", "Pack", "Replicate", "RotateSum",
           "Multiply", "Rescale", "Mask", "MatVecDiagonal", "Add", "Rotate", "MulScalar", "Negate"]


# ---------------------------------------------------------------------------------------- cost model
@dataclass(frozen=True)
class CostModel:
    """Relative cost of the HE primitives (one key-switched rotation = 1).

    Defaults are the ratios benchmarks/einsum.py measured for hezk's CKKS at N=2^14 on a 2-core
    machine (noisy under load): a hoisted rotation (sharing the key-switch decomposition) 0.43-0.78,
    0.5 at 3-8 rotations on a quiet machine; ct*ct with relinearization 0.74-0.92; rescale 0.22;
    ct*pt under 0.01 once encoded (0.05 leaves room for the encoding). Pass another CostModel to
    ``plan(costs=...)`` for other hardware.
    """

    rotation: float = 1.0
    hoisted_rotation: float = 0.5
    ct_mult: float = 0.8
    pt_mult: float = 0.05
    rescale: float = 0.2
    add: float = 0.01
    key: float = 0.6  # each distinct rotation key: keygen time, memory and bytes sent to the server

    def of(self, counts: Counter) -> float:
        return (counts["rotations"] * self.rotation + counts["hoisted_rotations"] * self.hoisted_rotation
                + counts["ct_mults"] * self.ct_mult + counts["pt_mults"] * self.pt_mult
                + counts["rescales"] * self.rescale + counts["additions"] * self.add)


DEFAULT_COSTS = CostModel()


def _norm(k: int, slots: int) -> int:
    """A rotation amount as the representative in [-slots/2, slots/2)."""
    return (int(k) + slots // 2) % slots - slots // 2


def _chain(count: int, radix: int = 2) -> list[tuple[tuple[int, ...], str]]:
    """Stages (in units of the stride) that sum ``count`` shifted copies in about log2(count) rounds.

    Returns (multiples, source) stages applied in order: ``acc += sum_m rot(src, m*stride)``, where
    src is ``'acc'`` or ``'x'`` (one extra copy of the input) and a stage with several multiples
    shares one hoisted decomposition. S(2m) = S(m) + rot(S(m), m); with ``radix=4``
    S(4m) = S(m) + rot(S(m), m) + rot(S(m), 2m) + rot(S(m), 3m) (3 hoisted rotations instead of 2
    sequential ones); S(m+1) = S(m) + rot(x, m).
    """
    if count <= 1:
        return []
    if radix == 4 and count % 4 == 0:
        q = count // 4
        return _chain(q, radix) + [((q, 2 * q, 3 * q), "acc")]
    if count % 2:
        return _chain(count - 1, radix) + [((count - 1,), "x")]
    return _chain(count // 2, radix) + [((count // 2,), "acc")]


# ---------------------------------------------------------------------------------------- steps
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
        return [_norm(self.sign * m * self.stride, slots) for ms, _ in self.stages() for m in ms]

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
        return [_norm(self.k, slots)]

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
        return sorted({_norm(-b, slots) for _, b in self._babies()} | {_norm(-g, slots) for g in self._giants()})

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
        return sorted({_norm(r * self.stride, slots) for r in range(1, min(self.baby, self.dim))}
                      | {_norm(g * self.stride, slots) for g in self._giants() if g})

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
        matrix = data.plain_in(self.source, self.indices, (self.rows, self.cols))
        diags = self.diagonals(matrix, data.slots)
        x = regs[self.src]
        shifts = [r * self.stride for r in range(1, min(self.baby, self.dim))]
        babies = be.rotate_many(x, shifts) if shifts else {}
        babies[0] = x
        out = None
        for g in self._giants():
            inner = None
            for r in range(min(self.baby, self.dim - g)):
                term = be.multiply(babies[r * self.stride], data.constant(diags[g + r]))
                inner = term if inner is None else be.add(inner, term)
            inner = be.rotate(inner, g * self.stride) if g else inner
            out = inner if out is None else be.add(out, inner)
        regs[self.out] = out


# ---------------------------------------------------------------------------------------- plan
@dataclass(frozen=True)
class PlainPrep:
    """A plaintext tensor computed in the clear: ``numpy.einsum(expr, *plain operands)`` (or a constant)."""

    expr: str
    operands: tuple[int, ...]
    indices: str
    value: complex | None = None


@dataclass(frozen=True)
class Plan:
    """A lowered einsum: steps over registers, the output layout and the notes of the strategies chosen."""

    spec: EinsumSpec
    encrypted: tuple[bool, ...]
    input_layouts: tuple
    steps: tuple
    preps: tuple
    output_regs: tuple[int, ...]
    output_layout: SlotLayout | None
    slots: int
    notes: tuple[str, ...]
    max_level: int | None = None
    costs: CostModel = DEFAULT_COSTS

    # -------------------------------------------------------------- queries
    def rotations(self) -> list[int]:
        """Exact rotation amounts the plan uses (give them to ``CKKSContext.keygen(rotations=...)``)."""
        return sorted({k for s in self.steps for k in s.rotation_steps(self.slots) if k})

    def depth(self) -> int:
        """Levels consumed on the longest path from an input to the output."""
        lv: dict[int, int] = {}
        for s in self.steps:
            lv[s.out] = max((lv.get(i, 0) for i in s.inputs()), default=0) + s.levels()
        return max((lv.get(r, 0) for r in self.output_regs), default=0)

    def cost(self) -> dict:
        """Operation counts: ``rotations`` (all; ``hoisted_rotations`` of them share a decomposition),
        ``multiplies`` (ct*ct + ct*pt), rescales, additions, ``ciphertexts`` (encrypted inputs, after
        tiling), output ciphertexts, rotation keys, and the cost model's estimate (1 = one rotation;
        keys included, as in the strategy notes)."""
        c = Counter()
        for s in self.steps:
            c.update(s.counts(self.slots))
        inputs = sum(lay.n_ciphertexts for lay, e in zip(self.input_layouts, self.encrypted) if e)
        return {"rotations": c["rotations"] + c["hoisted_rotations"], "hoisted_rotations": c["hoisted_rotations"],
                "multiplies": c["ct_mults"] + c["pt_mults"], "ct_mults": c["ct_mults"], "pt_mults": c["pt_mults"],
                "rescales": c["rescales"], "additions": c["additions"], "ciphertexts": inputs,
                "output_ciphertexts": len(self.output_regs), "rotation_keys": len(self.rotations()),
                "estimate": round(self.costs.of(c) + self.costs.key * len(self.rotations()), 2)}

    def explain(self, max_steps: int = 80) -> str:
        """A readable account: expression, layouts, strategy notes, depth, cost, then the steps."""
        lines = [f"plan for {self.spec.expression()}  (slots={self.slots})"]
        for n, (lay, enc) in enumerate(zip(self.input_layouts, self.encrypted)):
            what = lay.describe() if enc else f"plaintext shape {self.spec.shapes[n]}"
            lines.append(f"  operand {n} [{self.spec.inputs[n]}]: {'encrypted' if enc else 'plain'}, {what}")
        lines += [f"  * {n}" for n in self.notes]
        lines.append(f"  depth {self.depth()}" + (f" of {self.max_level} levels" if self.max_level is not None else ""))
        lines.append(f"  cost {self.cost()}")
        lines.append(f"  rotations {self.rotations()}")
        if self.output_layout is not None:
            lines.append(f"  output: {self.output_layout.describe()}")
        for s in self.steps[:max_steps]:
            lines.append(f"    {type(s).__name__:<14} {s}")
        if len(self.steps) > max_steps:
            lines.append(f"    ... {len(self.steps) - max_steps} more steps")
        return "\n".join(lines)

    def __str__(self):
        return self.explain()

    def check_levels(self, available: int) -> None:
        """Refuse (LevelError) when the plan needs more levels than ``available``."""
        need = self.depth()
        if need > available:
            raise LevelError(f"plan for {self.spec.expression()} needs depth {need} but only {available} "
                             f"level(s) are available")

    # -------------------------------------------------------------- execution
    def run(self, backend, operands, on_step=None):
        """Execute on ``backend``; operands are ciphertext lists (encrypted) or arrays (plain).

        Returns the list of output registers (one per tile of ``output_layout``) or, when every
        operand is plaintext, the numpy result. ``on_step(step, value)`` is called after each step
        with the register it wrote (on the plain backend: the slot vector, to debug a packing).
        """
        if len(operands) != len(self.encrypted):
            raise ShapeError(f"plan expects {len(self.encrypted)} operands, got {len(operands)}")
        data = _RunData(self, backend, operands)
        if not any(self.encrypted):
            return data.prep(0)
        regs: dict = {}
        last_use = {}
        for n, s in enumerate(self.steps):
            for r in s.inputs():
                last_use[r] = n
        keep = set(self.output_regs)
        for n, s in enumerate(self.steps):
            s.apply(backend, regs, data)
            if on_step is not None:
                on_step(s, regs[s.out])
            for r in s.inputs():
                if last_use.get(r) == n and r not in keep:
                    regs.pop(r, None)
        return [regs[r] for r in self.output_regs]


    def execute(self, backend, *operands, on_step=None):
        """Run on ``backend`` with operands as the user holds them: CipherTensors or numpy arrays
        (on a PlainBackend, encrypted operands may be plain numpy arrays: they are packed with the
        plan's input layouts). Returns a CipherTensor, or a numpy array on the PlainBackend."""
        from .backends import PlainBackend
        from .tensor import CipherTensor, run_plan

        if isinstance(backend, PlainBackend) and not any(isinstance(o, CipherTensor) for o in operands):
            return backend.run(self, *operands, on_step=on_step)
        return run_plan(self, list(operands))

    def simulate(self, *arrays, backend=None, on_step=None):
        """Run the plan on the :class:`PlainBackend` (numpy slot vectors) and return the numpy result.

        Encrypted operands are packed with their input layouts; with ``backend`` given (e.g. one that
        checks rotation keys) it is used instead; ``on_step`` as in :meth:`run`.
        """
        from .backends import PlainBackend

        be = backend if backend is not None else PlainBackend(self.slots, rotations=self.rotations())
        ops = [lay.pack(np.asarray(a)) if enc else np.asarray(a)
               for a, enc, lay in zip(arrays, self.encrypted, self.input_layouts)]
        out = self.run(be, ops, on_step)
        if not any(self.encrypted):
            return out
        return self.output_layout.unpack(out)


class _RunData:
    """Per-run inputs: operand ciphertexts, plaintext tensors computed once, constants encoded once."""

    def __init__(self, plan: Plan, backend, operands):
        self.plan, self.backend, self.slots = plan, backend, plan.slots
        self.cts = [list(op) if enc else None for op, enc in zip(operands, plan.encrypted)]
        self.plains = [None if enc else np.asarray(op) for op, enc in zip(operands, plan.encrypted)]
        self._preps: dict = {}

    def prep(self, n):
        if n not in self._preps:
            p = self.plan.preps[n]
            self._preps[n] = np.asarray(p.value) if p.value is not None else \
                np.einsum(p.expr, *[self.plains[i] for i in p.operands])
        return self._preps[n]

    def plain_in(self, source, indices, shape):
        """Plaintext tensor ``source`` with axes reordered to ``indices`` + broadcast to ``shape``."""
        p = self.plan.preps[source]
        arr = self.prep(source)
        have = [c for c in indices if c in p.indices]
        arr = np.transpose(arr, [p.indices.index(c) for c in have]) if have else arr
        arr = arr.reshape([arr.shape[have.index(c)] if c in have else 1 for c in indices])
        return np.broadcast_to(arr, shape)

    def constant(self, vec):
        """A plaintext constant (mask, diagonal), encoded by the backend (which may cache it)."""
        return self.backend.constant(vec)


# ---------------------------------------------------------------------------------------- lowering
@dataclass(frozen=True)
class Sym:
    """A symbolic tensor during lowering: registers (one per tile ciphertext), layout, index letters."""

    regs: tuple[int, ...]
    layout: SlotLayout
    indices: str


@dataclass(frozen=True)
class PlainSym:
    """A plaintext tensor (a ``PlainPrep``) during lowering."""

    source: int
    indices: str
    shape: tuple[int, ...]


class _Builder:
    """Accumulates steps during lowering; tracks the rotation keys used so far (new keys cost extra)."""

    def __init__(self, slots, costs=DEFAULT_COSTS):
        self.slots, self.costs = slots, costs
        self.steps: list[Step] = []
        self.notes: list[str] = []
        self.keys: set[int] = set()
        self.next = 0
        self.fork_point = None
        self._memo: dict = {}  # shift pattern -> best baby/giant candidate (see _decompose)
        # rotate-and-add in radix 4 when 3 hoisted rotations (and their keys) cost less than 2
        # sequential ones (and theirs); measured at N=2^14 the gain was ~3%, not worth 50% more keys
        self.radix = 4 if 3 * (costs.hoisted_rotation + costs.key) < 2 * (costs.rotation + costs.key) else 2

    def fork(self):
        """A copy to try a strategy on; ``cost_since(len(steps))`` then prices what it adds."""
        b = _Builder(self.slots, self.costs)
        b.steps, b.notes, b.keys, b.next = list(self.steps), list(self.notes), set(self.keys), self.next
        b.fork_point, b._memo = (len(self.steps), frozenset(self.keys)), self._memo
        return b

    def adopt(self, other):
        self.steps, self.notes, self.keys, self.next = other.steps, other.notes, other.keys, other.next

    def emit(self, cls, *args, **kw):
        step = cls(self.next, *args, **kw)
        self.next += 1
        self.steps.append(step)
        self.keys.update(k for k in step.rotation_steps(self.slots) if k)
        return step.out

    def cost_since(self, n_steps):
        """Cost of the steps from ``n_steps`` on, new rotation keys included."""
        c = Counter()
        point = self.fork_point
        before = point[1] if point is not None and point[0] == n_steps else \
            {k for s in self.steps[:n_steps] for k in s.rotation_steps(self.slots)}
        for s in self.steps[n_steps:]:
            c.update(s.counts(self.slots))
        return self.costs.of(c) + self.costs.key * len(self.keys - before - {0})

    def _new_keys(self, amounts) -> int:
        return len({_norm(k, self.slots) for k in amounts} - self.keys - {0})

    # ---------------------------------------------------------------- primitive tensor ops
    def multiply_rescale(self, a, b, plain=False):
        return self.emit(Rescale, self.emit(Multiply, a, b, plain))

    def _decompose(self, flat, split=True):
        """Cheapest baby/giant split of the shifts of ``flat`` = [(reg, src, shift, axis parts)], an axis
        part being (index array, shift per index step). Baby candidates: none, shift mod 2^e, the part
        due to a subset of axes, or the part due to ``index mod f`` of one axis (classic BSGS along a
        moved axis). Returns (cost, [(reg, src, giant, baby)]). The winning candidate is remembered per
        relative shift pattern (tiles of one tensor repeat it) while no new key appears: a heuristic
        that only affects which split is used, never the result."""
        slots = self.slots
        signature = (len(self.keys), split, tuple((((d - d[0]) % slots).tobytes(),
                                                   tuple((idx.tobytes(), delta) for idx, delta in ax))
                                                  for _, _, d, ax in flat))
        known = self._memo.get(signature)
        if known is not None:
            return self._price(flat, *known)
        n_parts = min((len(f[3]) for f in flat), default=0)
        candidates = [("none", None)] + [("mod", 1 << e) for e in range(1, slots.bit_length())]
        candidates += [("axes", subset) for r in range(1, n_parts + 1)
                       for subset in itertools.combinations(range(n_parts), r)]
        for a in range(n_parts if split else 0):
            top = max(int(f[3][a][0].max(initial=0)) for f in flat)
            candidates += [("split", (a, 1 << e)) for e in range(1, max(top, 1).bit_length())]
        if all(len(np.unique(f[2])) <= 2 for f in flat):
            candidates = candidates[:1]  # one or two shifts per source: nothing to split
        best, winner = None, None
        for kind, arg in candidates:
            priced = self._price(flat, kind, arg)
            if best is None or priced[0] < best[0]:
                best, winner = priced, (kind, arg)
        self._memo[signature] = winner
        return best

    def _price(self, flat, kind, arg):
        """(cost, parts) of one baby/giant candidate (see ``_decompose``)."""
        slots, c = self.slots, self.costs
        parts = []
        for reg, src, d, axparts in flat:
            if kind == "none":
                b = np.zeros_like(d)
            elif kind == "mod":
                b = d % arg
            elif kind == "axes":
                b = sum(idx * delta for idx, delta in (axparts[i] for i in arg)) % slots
            else:
                idx, delta = axparts[arg[0]]
                b = (idx % arg[1]) * delta % slots
            parts.append((reg, src, (d - b) % slots, b))
        baby_sets = [set(np.unique(b).tolist()) - {0} for _, _, _, b in parts]
        giants = set().union(*[set(np.unique(g).tolist()) for _, _, g, _ in parts]) - {0}
        terms = sum(len(np.unique(g * slots + b)) for _, _, g, b in parts)
        amounts = {-b for bs in baby_sets for b in bs} | {-g for g in giants}
        cost = (sum(map(len, baby_sets)) * c.hoisted_rotation + len(giants) * c.rotation
                + terms * c.pt_mult + self._new_keys(amounts) * c.key)
        return cost, parts

    def mask_move(self, sources, note="", shifts=None):
        """One ``Mask`` step moving ``sources`` = [(reg, src_pos, dst_pos, axis parts)] (axis parts:
        (index array, shift per index step) for each axis, for axis-aligned baby/giant splits) and a
        rescale.

        With several tiles to fill from the same sources, ``shifts`` (a dict reg -> (shifted reg, shift))
        lets each source be rotated first so the remaining shifts -- and so the keys -- repeat from tile
        to tile; the cheaper of shifting and not shifting is taken."""
        slots = self.slots
        flat = [(reg, src.ravel(), ((dst - src) % slots).ravel(), [(idx.ravel(), delta) for idx, delta in parts])
                for reg, src, dst, parts in sources]
        best = self._decompose(flat)
        pre = None
        if shifts is not None:
            moved, extra, amounts = [], 0.0, []
            for reg, src, d, parts in flat:
                cur = shifts.get(reg, (reg, 0))
                want = int(d[0])
                if want != cur[1]:
                    extra += self.costs.rotation
                    amounts.append(-(want - cur[1]))
                moved.append((reg, (src + want) % slots, (d - want) % slots, parts))
            alt = self._decompose(moved)
            # the shift's key is not charged: the next tiles shift by the same step and reuse it
            if alt[0] + extra <= best[0]:
                pre = moved
                best = alt
        if pre is not None:
            rename = {}
            for (reg, src, d, _), (_, _, d2, _) in zip(flat, pre):
                want = int((d[0] - d2[0]) % slots)
                cur_reg, cur = shifts.get(reg, (reg, 0))
                if want != cur:
                    cur_reg = self.emit(Rotate, cur_reg, -_norm(want - cur, slots))
                    shifts[reg] = (cur_reg, want)
                rename[reg] = cur_reg
            best = (best[0], [(rename[reg], src, g, b) for reg, src, g, b in best[1]])
        terms = []
        for reg, src, g, b in best[1]:
            uniq, inv = np.unique(g * slots + b, return_inverse=True)
            inv = inv.ravel()
            for n, key in enumerate(uniq):
                gg, bb = divmod(int(key), slots)
                terms.append((gg, reg, bb, np.sort((src[inv == n] + bb) % slots)))
        srcs = tuple(dict.fromkeys(reg for reg, _, _, _ in best[1]))
        return self.emit(Rescale, self.emit(Mask, srcs, tuple(terms), note))

    # ---------------------------------------------------------------- tensor-level ops
    def rotate_sum_axes(self, sym: Sym, axes: list[int]) -> Sym:
        """Sum ``sym`` over ``axes`` (rotate-and-sum inside tiles, add across tiles); axes removed."""
        if not axes:
            return sym
        lay = sym.layout
        keep = [a for a in range(lay.ndim) if a not in axes]
        groups: dict = {}
        for t, reg in zip(lay.tiles, sym.regs):
            r = reg
            for a in axes:
                if t.size[a] > 1:
                    r = self.emit(RotateSum, r, t.size[a], lay.strides[a], self.radix)
            key = (tuple(t.start[a] for a in keep), tuple(t.size[a] for a in keep))
            groups.setdefault(key, []).append((t, r))
        tiles, regs = [], []
        for n, ((start, size), members) in enumerate(groups.items()):
            ref = members[0][0].offset
            acc = None
            for t, r in members:
                r = self.emit(Rotate, r, t.offset - ref) if t.offset != ref else r
                acc = r if acc is None else self.emit(Add, acc, r)
            tiles.append(Tile(n, start, size, ref))
            regs.append(acc)
        summed = any(lay.shape[a] > 1 for a in axes)
        out = SlotLayout(tuple(lay.shape[a] for a in keep), tuple(lay.strides[a] for a in keep), lay.slots,
                         tuple(tiles), lay.replicas, clean=lay.clean and not summed)
        return Sym(tuple(regs), out, "".join(sym.indices[a] for a in keep))

    def clean(self, sym: Sym) -> Sym:
        """Zero every slot that holds no element (a plain mask, one level)."""
        lay = sym.layout
        regs = []
        for t, reg in zip(lay.tiles, sym.regs):
            pos = (lay.positions(t).reshape(-1, 1) + lay.replica_shifts().reshape(1, -1)).ravel()
            regs.append(self.mask_move([(reg, pos, pos, [])], note=" (clean garbage slots)"))
        return Sym(tuple(regs), SlotLayout(lay.shape, lay.strides, lay.slots,
                                           tuple(Tile(n, t.start, t.size, t.offset) for n, t in enumerate(lay.tiles)),
                                           lay.replicas, True), sym.indices)

    def extend(self, anchor: Sym, missing: list[tuple[str, int]]):
        """Layout over ``anchor.indices + missing``: anchor axes unchanged, missing axes appended at new
        strides (inside the ciphertext while they fit, else across tiles). Returns (U layout, tile->anchor
        tile, per-axis flag 'replicated inside')."""
        lay = anchor.layout
        span = lay.span()
        room = max(self.slots // span, 1)
        free_reps = list(lay.replicas)
        strides, chunks, inside = [], [], []
        step = span
        for _, size in missing:
            rep = next((r for r in free_reps if r[0] >= size), None)
            if rep is not None:
                free_reps.remove(rep)
                strides.append(rep[1]); chunks.append(size); inside.append(False)
                continue
            c = max(min(size, room), 1)
            room //= c
            strides.append(step if c > 1 else 0)
            chunks.append(c); inside.append(c > 1)
            step *= c
        tiles, owner = [], []
        grids = [range(0, size, c) for (_, size), c in zip(missing, chunks)]
        for n, t in enumerate(lay.tiles):
            for starts in itertools.product(*grids):
                size = tuple(min(c, s_full - st) for c, st, (_, s_full) in zip(chunks, starts, missing))
                tiles.append(Tile(len(tiles), t.start + tuple(starts), t.size + size, t.offset))
                owner.append(n)
        u = SlotLayout(lay.shape + tuple(s for _, s in missing), lay.strides + tuple(strides), self.slots,
                       tuple(tiles), tuple(free_reps), lay.clean)
        return u, owner, inside

    def broadcast_anchor(self, anchor: Sym, u: SlotLayout, owner, inside) -> Sym:
        """Anchor tiles replicated along the appended axes that live inside the ciphertext."""
        k = anchor.layout.ndim
        need_rep = any(inside[a - k] and t.size[a] > 1 for t in u.tiles for a in range(k, u.ndim))
        if need_rep and not anchor.layout.clean:
            anchor = self.clean(anchor)
        cache, regs = {}, []
        for t, o in zip(u.tiles, owner):
            key = (o, tuple(t.size[k:]))
            if key not in cache:
                r = anchor.regs[o]
                for a in range(k, u.ndim):
                    if inside[a - k] and t.size[a] > 1:
                        r = self.emit(Replicate, r, t.size[a], u.strides[a], self.radix)
                cache[key] = r
            regs.append(cache[key])
        return Sym(tuple(regs), u, anchor.indices)

    def move_into(self, other: Sym, u: SlotLayout, u_indices: str) -> Sym:
        """``other`` (indices a subset of ``u_indices``) moved into ``u``: a masked move per U tile to the
        slots of the first index of the axes it lacks, then replication along those axes."""
        src_lay = other.layout
        axes = [u_indices.index(c) for c in other.indices]
        lacking = [a for a in range(u.ndim) if a not in axes]
        regs, shifts = [], {}
        for t in u.tiles:
            fits = self._fits(other, u, t, axes, lacking)
            if fits is not None:
                r = other.regs[fits]
            else:
                sources = []
                for st, sreg in zip(src_lay.tiles, other.regs):
                    lo = [max(st.start[i], t.start[a]) for i, a in enumerate(axes)]
                    hi = [min(st.start[i] + st.size[i], t.start[a] + t.size[a]) for i, a in enumerate(axes)]
                    if any(h <= l for l, h in zip(lo, hi)):
                        continue
                    grids = np.meshgrid(*[np.arange(l, h) for l, h in zip(lo, hi)], indexing="ij") \
                        if axes else []
                    src = np.full(grids[0].shape if axes else (), st.offset, dtype=np.int64)
                    dst = np.full(src.shape, t.offset, dtype=np.int64)
                    parts = []
                    for i, (a, g) in enumerate(zip(axes, grids)):
                        src = src + (g - st.start[i]) * src_lay.strides[i]
                        dst = dst + (g - t.start[a]) * u.strides[a]
                        parts.append((np.atleast_1d(g), u.strides[a] - src_lay.strides[i]))
                    sources.append((sreg, np.atleast_1d(src), np.atleast_1d(dst), parts))
                r = self.mask_move(sources, shifts=shifts if len(u.tiles) > 1 else None)
            covered = self._fits_replicas(other, u, t, lacking) if fits is not None else set()
            for a in lacking:
                if t.size[a] > 1 and a not in covered:
                    r = self.emit(Replicate, r, t.size[a], u.strides[a], self.radix)
            regs.append(r)
        return Sym(tuple(regs), u, u_indices)

    def _fits(self, other, u, t, axes, lacking):
        """Index of the tile of ``other`` that already sits in the slots of U tile ``t`` (same box,
        strides and offset, clean, every replica standing for a lacking axis), else None."""
        lay = other.layout
        if not lay.clean or len(self._fits_replicas(other, u, t, lacking)) != len(lay.replicas) or \
                any(lay.strides[i] != u.strides[a] and t.size[a] > 1 for i, a in enumerate(axes)):
            return None
        for n, st in enumerate(lay.tiles):
            if st.offset == t.offset and all(st.start[i] == t.start[a] and st.size[i] == t.size[a]
                                             for i, a in enumerate(axes)):
                return n
        return None

    @staticmethod
    def _fits_replicas(other, u, t, lacking):
        """Lacking axes of ``u`` that a replica of ``other`` already fills (same stride and count)."""
        reps = list(other.layout.replicas)
        covered = set()
        for a in lacking:
            if (t.size[a], u.strides[a]) in reps:
                reps.remove((t.size[a], u.strides[a]))
                covered.add(a)
        return covered

    def pack_into(self, other: PlainSym, u: SlotLayout, u_indices: str) -> Sym:
        regs = [self.emit(Pack, other.source, SlotLayout(u.shape, u.strides, u.slots, u.tiles), u_indices, n)
                for n in range(len(u.tiles))]
        return Sym(tuple(regs), u, u_indices)


def _pair(b: _Builder, x, y, keep: str, op: str):
    """Contract or combine ``x`` (encrypted Sym) with ``y`` (Sym or PlainSym); returns a Sym over the
    kept indices in U order. ``op`` is 'mul', 'add' or 'sub' (x - y)."""
    candidates = []
    anchors = [(x, y, False)] + ([(y, x, True)] if isinstance(y, Sym) else [])
    for anchor, other, swapped in anchors:
        fb = b.fork()
        n0 = len(fb.steps)
        res = _pair_with(fb, anchor, other, keep, op, swapped)
        candidates.append((fb.cost_since(n0), fb, res, f"replicate-multiply-reduce, operand {2 if swapped else 1} "
                                                        "stays, the other moves to it"))
    stationary = _pair_stationary(b, x, y, keep, op) if isinstance(y, Sym) else None
    if stationary is not None:
        candidates.append(stationary)
    if op == "mul" and isinstance(y, PlainSym):
        diag = _try_diagonal(b, x, y, keep)
        if diag is not None:
            candidates.append(diag)
    candidates.sort(key=lambda c: c[0])
    cost, fb, res, why = candidates[0]
    if len(candidates) > 1:
        others = "; ".join(f"{w}: est. {c:.1f}" for c, _, _, w in candidates[1:])
        fb.notes.append(f"[{x.indices}]x[{y.indices}]->[{res.indices}]: chose {why} (est. cost {cost:.1f}) "
                        f"over {others}")
    else:
        fb.notes.append(f"[{x.indices}]x[{y.indices}]->[{res.indices}]: {why} (est. cost {cost:.1f})")
    b.adopt(fb)
    return res


def _pair_with(b: _Builder, anchor: Sym, other, keep: str, op: str, swapped: bool) -> Sym:
    """Anchor keeps its layout, the indices it lacks are appended; ``other`` is moved/packed into it."""
    missing = [(c, other.layout.shape[i] if isinstance(other, Sym) else other.shape[i])
               for i, c in enumerate(other.indices) if c not in anchor.indices]
    u, owner, inside = b.extend(anchor, missing)
    u_idx = anchor.indices + "".join(c for c, _ in missing)
    a_u = b.broadcast_anchor(anchor, u, owner, inside)
    plain = isinstance(other, PlainSym)
    o_u = b.pack_into(other, u, u_idx) if plain else b.move_into(other, u, u_idx)
    first, second = (o_u, a_u) if swapped else (a_u, o_u)
    # the moved / packed operand is zero outside U's elements, so a product is clean; a sum only
    # when the anchor was clean without extra replicas
    clean = op == "mul" or (a_u.layout.clean and not a_u.layout.replicas)
    return _combine(b, first, second, u, u_idx, keep, op, plain, clean)


def _combine(b: _Builder, first: Sym, second: Sym, u: SlotLayout, u_idx: str, keep: str, op: str,
             plain: bool, clean: bool) -> Sym:
    """Tile-wise product (rescaled) or sum of two operands laid out in ``u``, then the contraction."""
    regs = []
    for ra, rb in zip(first.regs, second.regs):
        if op == "mul":
            regs.append(b.multiply_rescale(ra, rb, plain))
        else:
            regs.append(b.emit(Add, ra, rb, op == "sub", plain))
    out_lay = SlotLayout(u.shape, u.strides, u.slots, tuple(Tile(n, t.start, t.size, t.offset)
                                                          for n, t in enumerate(u.tiles)), (), clean)
    res = Sym(tuple(regs), out_lay, u_idx)
    return b.rotate_sum_axes(res, [n for n, c in enumerate(u_idx) if c not in keep])


def _stationary_layout(x, y, keep: str, slots: int):
    """The U layout of output-stationary packing (see :func:`_pair_stationary`), with its index
    string; None when no kept index has a usable native stride. ``x``/``y``: Sym or PlainSym."""
    sizes, native = {}, {}
    for sym in (x, y):
        shape = sym.layout.shape if isinstance(sym, Sym) else sym.shape
        for n, c in enumerate(sym.indices):
            sizes[c] = shape[n]
            if isinstance(sym, Sym) and c not in native and sym.layout.strides[n] > 0:
                native[c] = sym.layout.strides[n]
    union = "".join(dict.fromkeys(x.indices + y.indices))
    kept = [c for c in union if c in keep]
    fixed, pos = {}, np.zeros(1, dtype=np.int64)
    for c in kept:
        if c in native:
            cand = (pos[:, None] + np.arange(sizes[c]) * native[c]).ravel()
            if cand.max() < slots and len(np.unique(cand)) == len(cand):
                fixed[c], pos = native[c], cand
    if not fixed:
        return None
    order = [c for c in kept if c in fixed] + [c for c in union if c not in fixed]
    strides, chunks = dict(fixed), {c: sizes[c] for c in fixed}
    step = int(pos.max()) + 1
    room = slots // step
    for c in order[len(fixed):]:
        chunks[c] = max(min(sizes[c], room), 1)
        room //= chunks[c]
        strides[c] = step if chunks[c] > 1 else 0
        step *= chunks[c]
    u = SlotLayout.tiled(tuple(sizes[c] for c in order), tuple(strides[c] for c in order), slots,
                         tuple(chunks[c] for c in order))
    return u, "".join(order)


def _pair_stationary(b: _Builder, x: Sym, y, keep: str, op: str):
    """Output-stationary packing: kept indices keep a native stride (from ``x``, else ``y``) when the
    positions stay distinct; the other indices (contracted ones included) get new outer strides,
    inside the ciphertext while they fit, across tiles after that. Both operands then move only the
    axes whose stride changed, so a move has few distinct shifts (few masks), e.g. a large matmul
    moves only the contracted axis of each operand. None when no kept index has a native stride."""
    found = _stationary_layout(x, y, keep, b.slots)
    if found is None:
        return None
    u, u_idx = found
    fb = b.fork()
    n0 = len(fb.steps)
    x_u = fb.move_into(x, u, u_idx)
    plain = isinstance(y, PlainSym)
    y_u = fb.pack_into(y, u, u_idx) if plain else fb.move_into(y, u, u_idx)
    res = _combine(fb, x_u, y_u, u, u_idx, keep, op, plain, True)
    return fb.cost_since(n0), fb, res, "output-stationary packing (native strides kept, contracted axes outer)"


def _restrict(u: SlotLayout, u_idx: str, indices: str):
    """``u`` seen by an operand with ``indices``: its axes at U's strides, one tile per distinct box,
    and the axes it lacks as replicas (None when a lacking axis is split across tiles)."""
    axes = [u_idx.index(c) for c in indices]
    lacking = [a for a in range(u.ndim) if a not in axes]
    if any(t.start[a] != 0 or t.size[a] != u.shape[a] for t in u.tiles for a in lacking):
        return None
    boxes = list(dict.fromkeys((tuple(t.start[a] for a in axes), tuple(t.size[a] for a in axes), t.offset)
                               for t in u.tiles))
    if len(boxes) != len(u.tiles):
        return None
    tiles = tuple(Tile(n, st, sz, off) for n, (st, sz, off) in enumerate(boxes))
    return SlotLayout(tuple(u.shape[a] for a in axes), tuple(u.strides[a] for a in axes), u.slots, tiles,
                      tuple((u.shape[a], u.strides[a]) for a in lacking if u.shape[a] > 1))


def _diagonal_ready(lay: SlotLayout, axis: int, dim: int):
    """Base slots of the vectors along ``axis``, per tile, when the layout suits the diagonal method:
    clean, axis ``axis`` whole in every tile, and every vector's block of ``2*dim`` slots (the
    vector, then its copy) disjoint from the others'. Returns (bases per tile, has_copy) or None."""
    if not lay.clean or lay.strides[axis] <= 0:
        return None
    s = lay.strides[axis]
    if lay.replicas not in ((), ((2, dim * s),)):
        return None
    per_tile = []
    for t in lay.tiles:
        if t.start[axis] != 0 or t.size[axis] != lay.shape[axis]:
            return None
        bases = np.take(lay.positions(t), 0, axis=axis).ravel()
        blocks = (bases[:, None] + np.arange(2 * dim) * s).ravel()
        if blocks.max() >= lay.slots or len(np.unique(blocks)) != len(blocks):
            return None
        per_tile.append(tuple(int(v) for v in bases))
    return per_tile, bool(lay.replicas)


def _diagonal_target(shape, axis: int, dim: int, slots: int):
    """Layout with ``axis`` innermost (stride 1) and ``2*dim`` slots per vector; the other (batch) axes
    row-major, tiled over several ciphertexts when the vectors do not all fit. None if one vector
    does not fit."""
    if 2 * dim > slots:
        return None
    order = [a for a in range(len(shape)) if a != axis]
    chunk, strides, step = list(shape), [0] * len(shape), 2 * dim
    strides[axis] = 1
    for a in reversed(order):
        chunk[a] = max(1, min(shape[a], slots // step))
        strides[a] = step if chunk[a] > 1 else 0
        step *= chunk[a]
    return SlotLayout.tiled(shape, strides, slots, chunk)


def _try_diagonal(b: _Builder, x: Sym, y: PlainSym, keep: str):
    """Halevi–Shoup diagonal candidate for ``x[..., k] M[j, k] -> y[..., j]`` (x encrypted, M plaintext,
    k contracted, the other axes of x a batch, tiled over ciphertexts if needed). x is first moved to
    a layout where each vector has room for its copy, unless it has one already (client packing)."""
    summed = [c for c in x.indices if c not in keep]
    if len(summed) != 1 or len(y.indices) != 2 or summed[0] not in y.indices:
        return None
    k = summed[0]
    j = y.indices.replace(k, "")
    if j not in keep or j in x.indices or any(c in y.indices for c in x.indices if c != k):
        return None
    rows, cols = y.shape[y.indices.index(j)], y.shape[y.indices.index(k)]
    dim, axis = max(rows, cols), x.indices.index(k)
    fb = b.fork()
    n0 = len(fb.steps)
    ready = _diagonal_ready(x.layout, axis, dim)
    if ready is None:  # move x so that axis k has stride 1 and each vector owns 2*dim slots
        target = _diagonal_target(x.layout.shape, axis, dim, b.slots)
        if target is None:
            return None
        x = fb.move_into(x, target, x.indices)
        ready = _diagonal_ready(target, axis, dim)
    per_tile, has_copy = ready
    stride = x.layout.strides[axis]
    c = b.costs
    best = min(range(1, dim + 1), key=lambda bb: (bb - 1) * c.hoisted_rotation + (ceil(dim / bb) - 1) * c.rotation)
    lay, regs, tiles = x.layout, [], []
    for n, (t, reg, bases) in enumerate(zip(lay.tiles, x.regs, per_tile)):
        src = reg if has_copy else fb.emit(Replicate, reg, 2, dim * stride)
        regs.append(fb.emit(Rescale, fb.emit(MatVecDiagonal, src, y.source, j + k, rows, cols, dim, stride,
                                             bases, best)))
        tiles.append(Tile(n, t.start, t.size[:axis] + (rows,) + t.size[axis + 1:], t.offset))
    shape = lay.shape[:axis] + (rows,) + lay.shape[axis + 1:]
    out = SlotLayout(shape, lay.strides, b.slots, tuple(tiles), (), True)
    vectors = sum(len(v) for v in per_tile)
    return (fb.cost_since(n0), fb, Sym(tuple(regs), out, x.indices.replace(k, j)),
            f"diagonal method (Halevi-Shoup, BSGS baby={best}, hoisted baby steps, {vectors} vector(s) "
            f"in {len(per_tile)} ciphertext(s))")


def build_plan(spec: EinsumSpec, encrypted, layouts, slots: int, max_level=None, costs=DEFAULT_COSTS) -> Plan:
    """Lower ``spec`` (see the module docstring). ``layouts[n]`` is the SlotLayout of encrypted operand n."""
    b = _Builder(slots, costs)
    enc_syms = list(_input_syms(b, spec, encrypted, layouts).values())
    plain_ids = [n for n, e in enumerate(encrypted) if not e]
    if not enc_syms:
        preps = (PlainPrep(spec.expression(), tuple(plain_ids), spec.output),)
        return Plan(spec, tuple(encrypted), tuple(layouts), (), preps, (), None, slots,
                    ("every operand is plaintext: numpy.einsum in the clear",), max_level, costs)
    enc_idx = set("".join(s.indices for s in enc_syms))
    preps = []
    plain_sym = None
    if plain_ids:
        labels = [spec.inputs[n] for n in plain_ids]
        full = {c for n in plain_ids for c, d in zip(spec.inputs[n], spec.shapes[n]) if d == spec.size(c)}
        kept = "".join(c for c in dict.fromkeys("".join(labels))
                       if c in full and (c in spec.output or c in enc_idx) and spec.size(c) > 1)
        preps.append(PlainPrep(",".join(labels) + "->" + kept, tuple(plain_ids), kept))
        plain_sym = PlainSym(0, kept, tuple(spec.size(c) for c in kept))
    queue = enc_syms[1:]
    if plain_sym is not None:
        queue = [plain_sym] + queue

    def needed(rest):
        return set(spec.output) | set("".join(o.indices for o in rest))

    cur = enc_syms[0]
    cur = _sum_private(b, cur, needed(queue))
    for n, other in enumerate(queue):
        rest = queue[n + 1:]
        if isinstance(other, Sym):
            other = _sum_private(b, other, needed(rest) | set(cur.indices))
        keep = "".join(c for c in dict.fromkeys(cur.indices + other.indices) if c in needed(rest))
        cur = _pair(b, cur, other, keep, "mul")
    cur = _sum_private(b, cur, set(spec.output))
    return _finish(b, cur, spec, encrypted, layouts, preps, max_level)


def _finish(b: _Builder, cur: Sym, spec: EinsumSpec, encrypted, layouts, preps, max_level) -> Plan:
    """Put the result's axes in output order (size-1 axes squeezed earlier come back) and wrap up."""
    lay, idx = cur.layout, cur.indices
    for c in spec.output:
        if c not in idx:
            lay, idx = lay.insert_axis(lay.ndim), idx + c
    lay = lay.transpose([idx.index(c) for c in spec.output])
    return Plan(spec, tuple(encrypted), tuple(layouts), tuple(b.steps), tuple(preps), cur.regs, lay, b.slots,
                tuple(b.notes), max_level, b.costs)


def _input_syms(b: _Builder, spec: EinsumSpec, encrypted, layouts) -> dict:
    """Input registers of every encrypted operand, diagonals taken and broadcast axes squeezed."""
    syms = {}
    for n, (labels, e) in enumerate(zip(spec.inputs, encrypted)):
        if not e:
            continue
        lay = layouts[n]
        if lay.shape != spec.shapes[n]:
            raise ShapeError(f"operand {n}: layout shape {lay.shape} differs from operand shape {spec.shapes[n]}")
        regs = tuple(b.emit(Input, n, c) for c in range(lay.n_ciphertexts))
        syms[n] = _squeeze_and_diagonal(Sym(tuple(regs[t.ct] for t in lay.tiles), _renumber(lay), labels), spec)
    return syms


def build_elementwise(op: str, shapes, encrypted, layouts, slots: int, max_level=None) -> Plan:
    """``a + b``, ``a - b`` or ``a * b`` with numpy broadcasting (at least one operand encrypted)."""
    out_shape = broadcast_shapes(*shapes)
    letters = string.ascii_letters[:len(out_shape)]
    terms = [letters[len(out_shape) - len(s):] for s in shapes]
    spec = parse(",".join(terms) + "->" + letters, *shapes)
    if op == "mul":
        return build_plan(spec, encrypted, layouts, slots, max_level)
    b = _Builder(slots)
    syms = _input_syms(b, spec, encrypted, layouts)
    preps, ops = [], []
    for n, e in enumerate(encrypted):
        if e:
            ops.append(syms[n])
            continue
        kept = "".join(c for c, d in zip(spec.inputs[n], spec.shapes[n]) if d > 1)
        preps.append(PlainPrep(f"{spec.inputs[n]}->{kept}", (n,), kept))
        ops.append(PlainSym(len(preps) - 1, kept, tuple(spec.size(c) for c in kept)))
    first, second = ops
    negate = isinstance(first, PlainSym)
    if negate:  # p - x = -(x - p), p + x = x + p
        first, second = second, first
    cur = _pair(b, first, second, letters, op)
    if negate and op == "sub":
        cur = Sym(tuple(b.emit(Negate, r) for r in cur.regs), cur.layout, cur.indices)
    return _finish(b, cur, spec, encrypted, layouts, preps, max_level)


def build_scalar(op: str, layout: SlotLayout, value, max_level=None) -> Plan:
    """``x * c`` (one plaintext-constant multiply and a rescale) or ``x + c`` for a Python scalar ``c``."""
    letters = string.ascii_letters[:layout.ndim]
    spec = parse(f"{letters}->{letters}", layout.shape)
    b = _Builder(layout.slots)
    (x,) = _input_syms(b, spec, (True,), (layout,)).values()
    if op == "mul":
        regs = tuple(b.emit(Rescale, b.emit(MulScalar, r, value)) for r in x.regs)
        return _finish(b, Sym(regs, x.layout, x.indices), spec, (True,), (layout,), (), max_level)
    preps = (PlainPrep("->", (), "", value),)
    cur = _pair(b, x, PlainSym(0, "", ()), letters, op)
    return _finish(b, cur, spec, (True,), (layout,), preps, max_level)


def _squeeze_and_diagonal(sym: Sym, spec: EinsumSpec) -> Sym:
    """Repeated indices -> diagonal layout; size-1 axes broadcast against a larger size -> squeezed."""
    lay, idx = sym.layout, sym.indices
    a = 0
    while a < len(idx):
        c = idx[a]
        dup = idx.find(c, a + 1)
        if dup >= 0:
            lay, idx = lay.diagonal(a, dup), idx[:dup] + idx[dup + 1:]
            continue
        if lay.shape[a] == 1 and spec.size(c) > 1:
            lay, idx = lay.drop_axis(a), idx[:a] + idx[a + 1:]
            continue
        a += 1
    return Sym(tuple(sym.regs[t.ct] for t in lay.tiles), _renumber(lay), idx)


def _renumber(lay: SlotLayout) -> SlotLayout:
    return SlotLayout(lay.shape, lay.strides, lay.slots, tuple(Tile(n, t.start, t.size, t.offset)
                                                               for n, t in enumerate(lay.tiles)),
                      lay.replicas, lay.clean)


def _sum_private(b: _Builder, sym: Sym, needed: set) -> Sym:
    return b.rotate_sum_axes(sym, [a for a, c in enumerate(sym.indices) if c not in needed])


def prepacked_layouts(spec: EinsumSpec, encrypted, slots: int):
    """Input layouts that let the first contraction run without moves or replication: the first
    encrypted operand row-major with replicas along the indices it lacks, its partner packed at the
    same strides with replicas along the indices *it* lacks (EinHops-style client-side packing).
    None when the expression does not suit it (repeated/broadcast/private indices, more than one
    ciphertext)."""
    enc = [n for n, e in enumerate(encrypted) if e]
    plain = [n for n, e in enumerate(encrypted) if not e]
    for n in range(len(spec.inputs)):
        labels = spec.inputs[n]
        if len(set(labels)) != len(labels) or any(d != spec.size(c) for c, d in zip(labels, spec.shapes[n])):
            return None
    first = spec.inputs[enc[0]]
    if plain:
        partner_idx = "".join(dict.fromkeys(c for n in plain for c in spec.inputs[n]))
        partner_idx = "".join(c for c in partner_idx if c in spec.output or any(c in spec.inputs[m] for m in enc))
        partner = None
    elif len(enc) > 1:
        partner = enc[1]
        partner_idx = spec.inputs[partner]
    else:
        return None
    others = "".join(spec.inputs[n] for n in range(len(spec.inputs)) if n != enc[0])
    if any(c not in spec.output and c not in others for c in first):
        return None
    base = SlotLayout.compact(spec.shapes[enc[0]], slots)
    step = max(base.span(), 1)
    if len(base.tiles) > 1:
        return None
    strides = dict(zip(first, base.strides))
    reps = []
    for c in partner_idx:
        if c not in strides:
            strides[c] = step
            reps.append((spec.size(c), step))
            step *= spec.size(c)
    if step > slots:
        return None
    layouts = [None] * len(spec.inputs)
    layouts[enc[0]] = SlotLayout(base.shape, base.strides, slots, base.tiles, tuple(reps))
    if partner is not None:
        labels = spec.inputs[partner]
        if any(c not in spec.output and c not in first and
               all(c not in spec.inputs[m] for m in range(len(spec.inputs)) if m != partner) for c in labels):
            return None
        layouts[partner] = SlotLayout(spec.shapes[partner], tuple(strides[c] for c in labels), slots,
                                      (Tile(0, (0,) * len(labels), spec.shapes[partner]),),
                                      tuple((spec.size(c), strides[c]) for c in first if c not in labels))
    for n in enc:
        if layouts[n] is None:
            layouts[n] = SlotLayout.compact(spec.shapes[n], slots)
    return tuple(layouts)


def stationary_layouts(spec: EinsumSpec, encrypted, slots: int):
    """Client-side packing for two encrypted operands of any size: both packed straight into the
    output-stationary U layout (tiles over the contracted axes, replicas along the indices each one
    lacks), so the server only multiplies tile by tile and sums. Costs bandwidth: one ciphertext per
    U tile for each operand. None when the expression does not suit it."""
    enc = [n for n, e in enumerate(encrypted) if e]
    if len(enc) != 2 or not all(encrypted) or len(spec.inputs) != 2:
        return None
    for n in enc:
        labels = spec.inputs[n]
        if len(set(labels)) != len(labels) or spec.shapes[n] != tuple(spec.size(c) for c in labels):
            return None
    syms = [Sym((), SlotLayout.compact(spec.shapes[n], slots), spec.inputs[n]) for n in enc]
    found = _stationary_layout(syms[0], syms[1], spec.output, slots)
    if found is None:
        return None
    u, u_idx = found
    layouts = tuple(_restrict(u, u_idx, spec.inputs[n]) for n in enc)
    return None if None in layouts else layouts


def diagonal_layouts(spec: EinsumSpec, encrypted, slots: int):
    """Client-side packing for the diagonal method: the one encrypted operand with its contracted
    axis innermost and each vector followed by a copy (replica at ``D`` slots), so the server needs
    neither a move nor a replication. None when the expression is not x[..., k] * M[k, j]."""
    enc = [n for n, e in enumerate(encrypted) if e]
    plain = [n for n, e in enumerate(encrypted) if not e]
    if len(enc) != 1 or not plain:
        return None
    x = spec.inputs[enc[0]]
    y = "".join(dict.fromkeys(c for n in plain for c in spec.inputs[n]))
    summed = [c for c in x if c not in spec.output]
    if len(set(x)) != len(x) or len(summed) != 1 or summed[0] not in y or len(y) != 2:
        return None
    (k,), j = summed, y.replace(summed[0], "")
    if j in x or spec.shapes[enc[0]] != tuple(spec.size(c) for c in x):
        return None
    dim, axis, shape = max(spec.size(k), spec.size(j)), x.index(k), spec.shapes[enc[0]]
    target = _diagonal_target(shape, axis, dim, slots)
    if target is None:
        return None
    layouts = [None] * len(spec.inputs)
    layouts[enc[0]] = replace(target, replicas=((2, dim),))
    return tuple(layouts)


def plan(expr: str, *shapes, params=None, slots=None, encrypted=None, layouts=None, costs=DEFAULT_COSTS) -> Plan:
    """Plan ``expr`` for operands of ``shapes`` (tuples or arrays) without any key or ciphertext.

    ``params`` (CKKSParameters or a preset name) gives the slot count and the level budget: a plan
    deeper than ``params.max_level`` is refused here, before any encryption (LevelError naming the
    depth needed and available). ``encrypted`` flags each operand (default: all encrypted).
    ``layouts``: None (row-major compact, tiled if needed), a list with a SlotLayout per encrypted
    operand (None entries: compact), or ``"auto"``: the planner also tries client-side packing
    (operands encrypted already replicated, see :func:`prepacked_layouts`) and keeps the cheaper
    plan; encrypt with ``layout=plan.input_layouts[n]``.
    """
    if params is not None:
        from crypto.context import as_parameters
        params = as_parameters(getattr(params, "params", params))   # a context, a preset name, a dict
    if params is None and slots is None:
        raise ShapeError("plan needs params=CKKSParameters (or slots=<power of two>)")
    slots = params.slots if params is not None else slots
    if isinstance(slots, bool) or not isinstance(slots, (int, np.integer)) or slots < 1 or slots & (slots - 1):
        raise ShapeError(f"slots={slots!r} must be a power of two")
    slots = int(slots)
    if len(shapes) == 1 and isinstance(expr, str) and expr.split("->")[0].count(",") > 0 \
            and isinstance(shapes[0], (list, tuple)) and all(isinstance(s, (list, tuple)) for s in shapes[0]):
        shapes = tuple(shapes[0])          # plan("ij,jk->ik", [(3, 4), (4, 5)]): one list of shapes
    spec = parse(expr, *shapes)
    n_ops = len(spec.shapes)
    if encrypted is None or isinstance(encrypted, (bool, np.bool_)):
        encrypted = [True if encrypted is None else bool(encrypted)] * n_ops
    encrypted = tuple(bool(e) for e in encrypted)
    if len(encrypted) != n_ops:
        raise ShapeError(f"encrypted has {len(encrypted)} flags for {n_ops} operands")
    auto = isinstance(layouts, str)
    if auto and layouts != "auto":
        raise ShapeError(f"layouts={layouts!r}: expected None, 'auto' or a list of SlotLayouts")
    layouts = [None] * n_ops if layouts is None or auto else list(layouts)
    if len(layouts) != n_ops:
        raise ShapeError(f"layouts has {len(layouts)} entries for {n_ops} operands")
    layouts = tuple(lay if lay is not None or not e else SlotLayout.compact(s, slots)
                    for lay, e, s in zip(layouts, encrypted, spec.shapes))
    for n, lay in enumerate(layouts):
        if lay is not None and (lay.slots != slots or lay.shape != spec.shapes[n]):
            raise ShapeError(f"operand {n}: layout ({lay.describe()}) does not fit shape {spec.shapes[n]} "
                             f"and {slots} slots")
    max_level = params.max_level if params is not None else None
    p = build_plan(spec, encrypted, layouts, slots, max_level, costs)
    if auto and any(encrypted):
        for packed in (prepacked_layouts(spec, encrypted, slots), diagonal_layouts(spec, encrypted, slots),
                       stationary_layouts(spec, encrypted, slots)):
            if packed is None:
                continue
            q = build_plan(spec, encrypted, packed, slots, max_level, costs)
            if (q.cost()["estimate"], q.depth()) < (p.cost()["estimate"], p.depth()):
                note = f"client-side packing: est. {q.cost()['estimate']} vs {p.cost()['estimate']} otherwise"
                p = replace(q, notes=q.notes + (note,))
    if max_level is not None:
        p.check_levels(max_level)
    return p
