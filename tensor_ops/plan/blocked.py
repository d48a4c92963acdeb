"""Block diagonals for ``x[..., k] M[j, k]`` (x encrypted, M plaintext) in place: no move, no copy.

The output axis j is cut into blocks, one ciphertext each, written where the vectors of x sit (x's layout with k
replaced by j): as long as the slots after each vector are free of the other vectors, at least the vector's length
K (all of j in one block where the vectors are spaced widely enough). With ``y_c[j'] = sum_k M[cB + j', k] x[k]``, the
offset ``t = k - j'`` of every term runs over ``-(B - 1) .. K - 1``, so in slot space (vectors at ``base + k s``)

    y_c = sum_t d_t * rot(x, t s),    d_t[base + j' s] = M[cB + j', j' + t]  (0 <= j' + t < K, else 0),

the generalized diagonals of the block (Halevi and Shoup, "Algorithms in HElib", CRYPTO 2014): each ``d_t`` is zero
wherever ``rot(x, t s)`` would read another vector's slot, so x may be packed compactly (its slots beyond the vectors
need not be clean). Baby-step/giant-step: ``t = g + r`` with ``r < baby``; the baby rotations of each input
ciphertext are hoisted once and shared by every block, ``y_c = sum_g rot(sum_r rot(x, r s) * rot(d_(g+r), -g s),
g s)``. Against the cyclic diagonal method over ``max(rows, cols)`` (``diagonal.py``) it needs no move to a layout
with room for a copy and, when j is wider than k (a transformer's QKV projection or its MLP's first layer), ``rows /
K`` blocks of ``B + K - 1`` products instead of ``rows`` products on vectors padded to ``2 rows`` slots. When k is
split over several ciphertexts (the MLP's second layer reading the first one's blocks), their terms are summed
under shared giant steps.

When the vectors start every P slots (P a power of two, each vector and its output block inside its P slots) and
x is clean with no other tensor in its ciphertexts, each diagonal is written for the whole ring of bases
``b0 + i P``, as if every P slots held a vector: the slots past x's vectors are zero, so the extra products add
zeros (the output stays clean), and the diagonal has period P, which encodes in the subring Z[X^(N/2P)]
(``Evaluator.encode``: one 2P-point transform instead of an N-point NTT per limb).
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from math import ceil

import numpy as np

from crypto.ckks.linear import bsgs_sum

from ..layout import SlotLayout, Tile
from .builder import Builder, PlainSym, Sym
from .diagonal import matrix_on_vectors
from .steps import Rescale, Step, UnaryStep, bsgs_evaluator, norm_shift


@dataclass(frozen=True, eq=False)
class BabyRotations(UnaryStep):
    """``{r stride: rot(x, r stride)}`` for ``0 <= r < baby``: the hoisted baby steps shared by the blocks."""

    stride: int
    baby: int

    def shifts(self) -> list[int]:
        return [r * self.stride for r in range(1, self.baby)]

    def rotation_steps(self, slots):
        return sorted({norm_shift(k, slots) for k in self.shifts()})

    def counts(self, slots):
        return Counter(hoisted_rotations=self.baby - 1)

    def __str__(self):
        return f"r{self.out} = {self.baby - 1} hoisted baby rotations of r{self.src} (stride {self.stride})"

    def apply(self, be, regs, data):
        x = regs[self.src]
        babies = be.rotate_many(x, self.shifts()) if self.baby > 1 else {}
        babies[0] = x
        regs[self.out] = babies


@dataclass(frozen=True, eq=False)
class BlockDiagonal(Step):
    """One output block ``y[..., j0 + j'] (j' < size) = sum_k M[j0 + j', k] x[..., k]`` from the baby rotations
    ``srcs`` of the input ciphertexts holding k in ``[k0, k0 + K)`` (``spans``), by generalized diagonals."""

    srcs: tuple[int, ...]
    source: int
    indices: str
    rows: int
    cols: int
    j0: int
    size: int
    spans: tuple[tuple[int, int], ...]
    stride: int
    bases: tuple = field(repr=False)
    baby: int
    period: int = 0     # > 0: the diagonals are periodic with this period (bases cover the ring every period slots)

    def inputs(self):
        return self.srcs

    def terms(self) -> list[tuple[int, int]]:
        """(input, offset t) of every generalized diagonal."""
        return [(u, t) for u, (_, width) in enumerate(self.spans) for t in range(1 - self.size, width)]

    def _giants(self) -> list[int]:
        return sorted({t - t % self.baby for _, t in self.terms()})

    def rotation_steps(self, slots):
        return sorted({norm_shift(g * self.stride, slots) for g in self._giants() if g})

    def counts(self, slots):
        n = len(self.terms())
        return Counter(rotations=sum(1 for g in self._giants() if g), pt_mults=n, additions=n)

    def __str__(self):
        return (f"r{self.out} = block {self.j0}..{self.j0 + self.size} of plaintext {self.source} [{self.indices}] "
                f"({self.rows}x{self.cols}) * {', '.join(f'r{s}' for s in self.srcs)}: {len(self.terms())} "
                f"generalized diagonals, {sum(1 for g in self._giants() if g)} giant rotations")

    def diagonal(self, matrix, u: int, t: int, slots: int) -> np.ndarray:
        """``rot(d_t, -g stride)`` of input ``u`` (g the giant step of t), the same for every vector."""
        k0, width = self.spans[u]
        g = t - t % self.baby
        lo, hi = max(0, -t), min(self.size, width - t)
        j = np.arange(lo, hi)
        dtype = matrix.dtype if np.iscomplexobj(matrix) else np.float64
        values = matrix[self.j0 + j, k0 + j + t]
        if self.period:         # one period, repeated: the same vector as every base of the ring written out
            vec = np.zeros(self.period, dtype=dtype)
            vec[(self.bases[0] + (j + g) * self.stride) % self.period] = values
            return np.tile(vec, slots // self.period)
        vec = np.zeros(slots, dtype=dtype)
        bases = np.asarray(self.bases, dtype=np.int64)[:, None]
        vec[((bases + (j + g) * self.stride) % slots).ravel()] = np.broadcast_to(
            values, (len(self.bases), len(j))).ravel()
        return vec

    def apply(self, be, regs, data):
        matrix = data.plain_in(self.source, self.indices, (self.rows, self.cols))
        babies = {(u, r): ct for u, s in enumerate(self.srcs) for r, ct in regs[s].items()}
        groups = {}
        for u, t in self.terms():
            g = t - t % self.baby
            groups.setdefault(g, []).append(((u, (t - g) * self.stride), data.constant(
                self.diagonal(matrix, u, t, data.slots))))
        items = [(norm_shift(g * self.stride, data.slots), pairs) for g, pairs in sorted(groups.items())]
        regs[self.out] = bsgs_sum(bsgs_evaluator(be), babies, items, rotate=be.rotate)


def _groups(lay: SlotLayout, axis: int):
    """The input tiles grouped by their box on the other axes: {(start, size, offset) without axis: [tile index]}.
    None when a box's tiles sit at different offsets (their vectors would not line up)."""
    groups: dict = {}
    for n, t in enumerate(lay.tiles):
        key = (t.start[:axis] + t.start[axis + 1:], t.size[:axis] + t.size[axis + 1:])
        groups.setdefault(key, []).append(n)
    for members in groups.values():
        if len({lay.tiles[n].offset for n in members}) != 1:
            return None
    return groups


def _block_size(bases, stride: int, width: int, rows: int, slots: int) -> int:
    """The longest output block (at most ``rows``, at least the vectors' length ``width``) whose positions
    ``base + j' stride`` stay inside the slots and apart from the other vectors' blocks (the slots past a vector
    may hold anything: they are written, never read)."""
    starts = np.asarray(bases, dtype=np.int64)[:, None]

    def fits(size):
        blocks = (starts + np.arange(size, dtype=np.int64) * stride).ravel()
        return blocks.max() < slots and len(np.unique(blocks)) == len(blocks)
    low, high = min(width, rows), rows
    while low < high:
        mid = (low + high + 1) // 2
        low, high = (mid, high) if fits(mid) else (low, mid - 1)
    return low


def _ring_period(lay: SlotLayout, members, bases, stride: int, extent: int, slots: int) -> int:
    """The spacing P of the vectors (one vector: its extent rounded up to a power of two) when their diagonals may
    be written every P slots around the ring (see the module docstring), else 0: bases ``b0 + i P`` with P a power
    of two below the slots, each vector and its output block (``extent`` steps of ``stride``) inside its P slots,
    and x's ciphertexts clean, unreplicated and holding only these tiles where the bases do not cover the ring
    already."""
    period = bases[1] - bases[0] if len(bases) > 1 else 1 << (extent * stride - 1).bit_length()
    if period < 1 or period & (period - 1) or period >= slots or extent * stride > period \
            or any(b - a != period for a, b in zip(bases, bases[1:])):
        return 0
    if len(bases) * period == slots:
        return period
    cts = {lay.tiles[n].ct for n in members}
    others = any(t.ct in cts for n, t in enumerate(lay.tiles) if n not in members)
    return period if lay.clean and not lay.replicas and not others else 0


def _best_baby(spans, size: int, blocks: int, c) -> int:
    """The baby step count with the least rotation cost (hoisted babies per input, giants per block, new keys)."""
    low, high = 1 - size, max(width for _, width in spans) - 1

    def price(baby):
        giants = len({t - t % baby for t in range(low, high + 1)} - {0})
        return (len(spans) * (baby - 1) * c.hoisted_rotation + blocks * giants * c.rotation
                + (baby - 1 + giants) * c.key)
    return min(range(1, high - low + 2), key=price)


def try_blocked(b: Builder, x: Sym, y: PlainSym, keep: str):
    """Block generalized-diagonal candidate for ``x[..., k] M[j, k] -> y[..., j]`` (see the module
    docstring); None when the expression or x's layout does not fit."""
    found = matrix_on_vectors(x, y, keep)
    if found is None:
        return None
    k, j, rows, cols = found
    lay, axis = x.layout, x.indices.index(k)
    stride = lay.strides[axis]
    groups = _groups(lay, axis)
    if stride <= 0 or groups is None:
        return None
    fb = b.fork()
    n0 = len(fb.steps)
    regs, tiles, blocks_total = [], [], 0
    for members in groups.values():
        spans = tuple((lay.tiles[n].start[axis], lay.tiles[n].size[axis]) for n in members)
        ref = lay.tiles[members[max(range(len(members)), key=lambda m: spans[m][1])]]
        bases = tuple(int(v) for v in np.take(lay.positions(ref), 0, axis=axis).ravel())
        block = _block_size(bases, stride, ref.size[axis], rows, b.slots)
        period = _ring_period(lay, members, bases, stride, max(block, max(w for _, w in spans)), b.slots)
        count = ceil(rows / block)
        baby = _best_baby(spans, block, count, b.costs)
        babies = tuple(fb.emit(BabyRotations, x.regs[n], stride, baby) for n in members)
        for c in range(count):
            size = min(block, rows - c * block)
            regs.append(fb.emit(Rescale, fb.emit(BlockDiagonal, babies, y.source, j + k, rows, cols, c * block, size,
                                                 spans, stride, bases, baby, period)))
            start = ref.start[:axis] + (c * block,) + ref.start[axis + 1:]
            tiles.append(Tile(len(tiles), start, ref.size[:axis] + (size,) + ref.size[axis + 1:], ref.offset))
        blocks_total += count
    shape = lay.shape[:axis] + (rows,) + lay.shape[axis + 1:]
    out = SlotLayout(shape, lay.strides, b.slots, tuple(tiles), (), True)
    return (fb.cost_since(n0), fb, Sym(tuple(regs), out, x.indices.replace(k, j)),
            f"block generalized diagonals (in place, {blocks_total} output block(s), hoisted baby steps shared)")
