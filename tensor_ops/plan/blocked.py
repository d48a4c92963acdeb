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
from .steps import Replicate, Rescale, Rotate, Step, UnaryStep, bsgs_evaluator, norm_shift


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
    """Output blocks ``y[..., j0 + j'] (j' < size) = sum_k M[j0 + j', k] x[..., k]``, one per copy (``blocks``: (j0,
    size, shift) with the copy ``shift`` strides after the first), from the baby rotations ``srcs`` of the input
    registers, by generalized diagonals. ``inputs_``: per input tile, (source index, k0, K, delta) with k in
    ``[k0, k0 + K)`` and its vectors ``delta`` strides after the output's; ``bases``: the output's first slots."""

    srcs: tuple[int, ...]
    source: int
    indices: str
    rows: int
    cols: int
    blocks: tuple[tuple[int, int, int], ...]
    inputs_: tuple[tuple[int, int, int, int], ...]
    stride: int
    bases: tuple = field(repr=False)
    baby: int

    def inputs(self):
        return self.srcs

    def terms(self) -> list[tuple[int, int]]:
        """(source index, offset d in strides) of every generalized diagonal: input tile u's term t = k - j' sits
        at d = delta_u + t."""
        widest = max(size for _, size, _ in self.blocks)
        return sorted({(src, delta + t) for src, _, width, delta in self.inputs_ for t in range(1 - widest, width)})

    def _giants(self) -> list[int]:
        return sorted({d - d % self.baby for _, d in self.terms()})

    def rotation_steps(self, slots):
        return sorted({norm_shift(g * self.stride, slots) for g in self._giants() if g})

    def counts(self, slots):
        n = len(self.terms())
        return Counter(rotations=sum(1 for g in self._giants() if g), pt_mults=n, additions=n)

    def __str__(self):
        spans = ", ".join(f"{j0}..{j0 + size}" for j0, size, _ in self.blocks)
        return (f"r{self.out} = block(s) {spans} of plaintext {self.source} [{self.indices}] ({self.rows}x{self.cols}) "
                f"* {', '.join(f'r{s}' for s in self.srcs)}: {len(self.terms())} generalized diagonals, "
                f"{sum(1 for g in self._giants() if g)} giant rotations")

    def diagonal(self, matrix, src: int, d: int, slots: int) -> np.ndarray:
        """``rot(d_d, -g stride)`` of source ``src`` (g the giant step of d): every input tile of that source and
        every output copy, the same for every vector."""
        g = d - d % self.baby
        vec = np.zeros(slots, dtype=matrix.dtype if np.iscomplexobj(matrix) else np.float64)
        bases = np.asarray(self.bases, dtype=np.int64)[:, None]
        for source, k0, width, delta in self.inputs_:
            t = d - delta
            if source != src:
                continue
            for j0, size, shift in self.blocks:
                j = np.arange(max(0, -t), min(size, width - t))
                if len(j):
                    vec[((bases + (shift + j + g) * self.stride) % slots).ravel()] = np.broadcast_to(
                        matrix[j0 + j, k0 + j + t], (len(self.bases), len(j))).ravel()
        return vec

    def apply(self, be, regs, data):
        matrix = data.plain_in(self.source, self.indices, (self.rows, self.cols))
        babies = {(u, r): ct for u, s in enumerate(self.srcs) for r, ct in regs[s].items()}
        groups = {}
        for src, d in self.terms():
            g = d - d % self.baby
            groups.setdefault(g, []).append(((src, (d - g) * self.stride), data.constant(
                self.diagonal(matrix, src, d, data.slots))))
        items = [(norm_shift(g * self.stride, data.slots), pairs) for g, pairs in sorted(groups.items())]
        regs[self.out] = bsgs_sum(bsgs_evaluator(be), babies, items, rotate=be.rotate)


def _groups(lay: SlotLayout, axis: int) -> dict:
    """The input tiles grouped by their box on the other axes: {(start, size) without axis: [tile index]}."""
    groups: dict = {}
    for n, t in enumerate(lay.tiles):
        key = (t.start[:axis] + t.start[axis + 1:], t.size[:axis] + t.size[axis + 1:])
        groups.setdefault(key, []).append(n)
    return groups


def _copies(lay: SlotLayout, cts, bases, stride: int, block: int, count: int, slots: int) -> tuple[int, int]:
    """(R, Delta): the input ciphertexts ``cts`` copied R times at Delta slots (rotate-and-add) hold R output blocks
    each, where the layout is clean and every tile of those ciphertexts and every output block fits below Delta
    (a power of two, a multiple of the stride); (1, 0) otherwise."""
    if count < 2 or not lay.clean or lay.replicas:
        return 1, 0
    used = [int(lay.positions(t).max()) for t in lay.tiles if t.ct in cts]
    used.append(int(max(bases)) + (block - 1) * stride)
    delta = 1 << max(used).bit_length()
    copies = min(slots // delta, count)
    return (copies, delta) if copies > 1 and delta % stride == 0 else (1, 0)


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


def _best_baby(spans, size: int, blocks: int, c) -> int:
    """The baby step count with the least rotation cost (hoisted babies per input, giants per block, new keys) over
    the offsets ``spans`` (lowest, highest) of the inputs' terms."""
    low, high = min(lo for lo, _ in spans), max(hi for _, hi in spans)

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
    if stride <= 0:
        return None
    fb = b.fork()
    n0 = len(fb.steps)
    regs, tiles, blocks_total = [], [], 0
    for members in _groups(lay, axis).values():
        widths = [lay.tiles[n].size[axis] for n in members]
        ref = lay.tiles[members[widths.index(max(widths))]]
        if any((lay.tiles[n].offset - ref.offset) % stride for n in members):
            return None                      # vectors that do not line up in strides
        bases = tuple(int(v) for v in np.take(lay.positions(ref), 0, axis=axis).ravel())
        block = _block_size(bases, stride, ref.size[axis], rows, b.slots)
        count = ceil(rows / block)
        # a source per input ciphertext and offset: a tile whose vectors sit elsewhere in its ciphertext (several
        # tiles in one, as these blocks leave them) is first rotated onto the output's vectors
        keyed = [(lay.tiles[n].ct, (lay.tiles[n].offset - ref.offset) // stride) for n in members]
        sources = list(dict.fromkeys(keyed))
        shifted = any(shift for _, shift in sources)
        copies, delta = (1, 0) if shifted else _copies(lay, {ct for ct, _ in sources}, bases, stride, block, count,
                                                       b.slots)
        inputs = tuple((sources.index(key), lay.tiles[n].start[axis], lay.tiles[n].size[axis], 0)
                       for key, n in zip(keyed, members))
        spans = [(1 - block, width - 1) for _, _, width, _ in inputs]
        outputs = ceil(count / copies)
        baby = _best_baby(spans, block, outputs, b.costs)
        first_reg = {lay.tiles[n].ct: x.regs[n] for n in reversed(members)}
        sources = [first_reg[ct] if not shift else fb.emit(Rotate, first_reg[ct], shift * stride)
                   for ct, shift in sources]
        if copies > 1:
            sources = [fb.emit(Replicate, r, copies, delta) for r in sources]
        babies = tuple(fb.emit(BabyRotations, r, stride, baby) for r in sources)
        for first in range(0, count, copies):
            blocks = tuple((c * block, min(block, rows - c * block), (c - first) * delta // stride)
                           for c in range(first, min(count, first + copies)))
            out = fb.emit(Rescale, fb.emit(BlockDiagonal, babies, y.source, j + k, rows, cols, blocks, inputs,
                                           stride, bases, baby))
            for j0, size, shift in blocks:      # a register per tile, as every Sym holds them
                start = ref.start[:axis] + (j0,) + ref.start[axis + 1:]
                tiles.append(Tile(len(regs), start, ref.size[:axis] + (size,) + ref.size[axis + 1:],
                                  ref.offset + shift * stride))
                regs.append(out)
        blocks_total += count
    shape = lay.shape[:axis] + (rows,) + lay.shape[axis + 1:]
    out = SlotLayout(shape, lay.strides, b.slots, tuple(tiles), (), True)
    return (fb.cost_since(n0), fb, Sym(tuple(regs), out, x.indices.replace(k, j)),
            f"block generalized diagonals (in place, {blocks_total} output block(s) in {len(set(regs))} "
            f"ciphertext(s), "
            f"hoisted baby steps shared)")
