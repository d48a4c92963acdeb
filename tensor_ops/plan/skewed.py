"""Skewed (diagonal) products of two encrypted matrices, batched: ``x[b.., m, k] y[b.., n, k] -> [b.., m, n]``
(attention's scores ``q k^T`` and, with ``k`` the key axis, its weighted sum ``a v``), the method of Jiang, Kim,
Lauter and Song ("Secure Outsourced Matrix Computation and Application to Neural Networks", CCS 2018: E2DM's
sigma/tau skews, then one column shift and one row shift per step), which THOR (Moon et al., "THOR: Secure
Transformer Inference with Homomorphic Encryption", 2024) builds its encrypted x encrypted attention products on.

Every batch element owns a block of ``Rm x Rn`` slots (row stride ``Rn``; ``Rm``, ``Rn`` the multiples of the
contracted size ``K`` covering ``M`` and ``N``; one of ``N``, ``K`` divides the other), blocks packed side by side,
several per ciphertext. Product step ``t`` pairs, at slot (m, n'), ``x[m, (m + n' + t) mod K]`` with
``y[n' mod N, (m + n' + t) mod K]``, so that the steps together visit every ``k`` once per output element and the
products add up in place: no replication and no rotate-and-sum (where ``N < K`` the ``Rn / N`` column groups of a row
split the ``k`` range, ``N`` steps, and one rotate-and-sum over the groups closes). The operands are laid out once:

1. skewed: ``A0[m, n'] = x[m, (m + n') mod K]`` for ``n' < Rn`` and ``B0[m', n'] = y[n' mod N, (m' + n') mod K]``
   for ``m' < Rm``, each one masked move (baby-step/giant-step) gathered straight from the operand's layout, or,
   where the cost model finds it cheaper, from the operand first aligned to (row, k) -> slot ``row Rn + k`` for
   ``x`` and ``row + k Rn`` for ``y`` (a transpose for attention's keys: a move whose baby/giant split runs along
   k - row; where both strides change by unrelated amounts, through the swapped strides first);

then step ``t`` takes ``A_t[m, n'] = A0[m, (n' + t) mod Rn]`` and ``B_t[m, n'] = B0[(m + t) mod Rm, n']``: chains of
rotations by 1 and by ``Rn`` (the wrapped part from copies rotated back by a row or a block once), masked to the
outputs, multiplied and accumulated; one rescale closes the sum. Rotations: 4 per step per output ciphertext, by 1 and
``Rn`` only (keys a power-of-two set holds), plus the skews, against ``K (log M + log d)`` for
replicate-multiply-reduce; the output compact. Depth: the alignment moves (when taken), the skew, the step's mask and
the product. A weighted sum (``M = K``: ``m`` replaces the values' contracted axis) leaves its output compacted in the
values' axis order (one more move, a level), where a head merge that follows finds the head axis beside the head size.
"""
from __future__ import annotations

from dataclasses import replace
from math import ceil

import numpy as np

from crypto.errors import ShapeError

from ..layout import SlotLayout, Tile
from .builder import Builder, Sym
from .steps import AlignLevel, Mask, MultiplyAccumulate, Relinearize, Rescale, Rotate, RotateSum


def skewed_indices(x: Sym, y, keep: str):
    """(batch, m, k, n) index letters when ``x`` and ``y`` (both encrypted) form a batched matrix product with one
    contracted index, else None."""
    if not isinstance(y, Sym):
        return None
    shared = [c for c in x.indices if c in y.indices]
    contracted = [c for c in shared if c not in keep]
    own_x = [c for c in x.indices if c not in y.indices]
    own_y = [c for c in y.indices if c not in x.indices]
    if len(contracted) != 1 or len(own_x) != 1 or len(own_y) != 1 or own_x[0] not in keep or own_y[0] not in keep:
        return None
    return "".join(c for c in shared if c in keep), own_x[0], contracted[0], own_y[0]


def skewed_grid(batch_shape, M: int, N: int, K: int, slots: int):
    """(output layout over (batch.., m, n), Rm, Rn) or None when one batch element's block exceeds the slots."""
    rn, rm = K * ceil(N / K), K * ceil(M / K)
    block = rm * rn
    if block > slots:
        return None
    strides, chunk, step, room = [], [], block, slots // block
    for size in reversed(batch_shape):
        c = max(1, min(size, room))
        strides.insert(0, step if c > 1 else 0)
        chunk.insert(0, c)
        step *= c
        room //= c
    layout = SlotLayout.tiled(tuple(batch_shape) + (M, N), tuple(strides) + (rn, 1), slots, tuple(chunk) + (M, N))
    return layout, rm, rn


def _bases(layout: SlotLayout, nb: int):
    """Per tile, the first slot of each batch element's block (flattened)."""
    out = []
    for t in layout.tiles:
        pos = layout.positions(t)
        out.append(pos[(Ellipsis,) + (0,) * (layout.ndim - nb)].ravel() if nb else pos.ravel()[:1])
    return out


def _gather(sym: Sym, order: str, index, dst, parts=None):
    """Move sources [(register, source slots, destination slots, axis parts)] bringing element ``index`` (one index
    array per letter of ``order``) of ``sym`` to slots ``dst``, each from the tile of ``sym`` that holds it; ``parts``
    (a function of the selection) gives the axis parts ``Builder.mask_move`` splits baby and giant steps along."""
    lay = sym.layout
    idx = [index[order.index(c)] for c in sym.indices]
    sources, left = [], np.ones(dst.shape, dtype=bool)
    for t, reg in zip(lay.tiles, sym.regs):
        inside = left.copy()
        for a, i in enumerate(idx):
            inside &= (i >= t.start[a]) & (i < t.start[a] + t.size[a])
        if not inside.any():
            continue
        left &= ~inside
        src = np.full(int(inside.sum()), t.offset, dtype=np.int64)
        for a, i in enumerate(idx):
            src = src + (i[inside] - t.start[a]) * lay.strides[a]
        sources.append((reg, src, dst[inside], [] if parts is None else parts(inside)))
    return sources


def _skew(b: Builder, sym: Sym, order: str, index, dst, note: str) -> int:
    """One masked move (baby-step/giant-step, ``Builder.mask_move``) gathering ``index`` of ``sym`` to ``dst``."""
    return b.mask_move(_gather(sym, order, index, dst), note=note)


def _depth(b: Builder, reg: int) -> int:
    """Levels the steps built so far consume on the way to register ``reg`` (from this plan's inputs)."""
    levels: dict = {}
    for s in b.steps:
        levels[s.out] = max((levels.get(r, 0) for r in s.inputs()), default=0) + s.levels()
    return levels.get(reg, 0)


def _same_depth(b: Builder, a: int, c: int) -> tuple[int, int]:
    """``a`` and ``c`` with the shallower one masked (a plain mask of its nonzero slots: one level) until both
    have consumed the same levels, so that the step products meet at one level."""
    da, dc = _depth(b, a), _depth(b, c)
    while da != dc:
        low = a if da < dc else c
        ones = np.flatnonzero(np.ones(b.slots))
        lowered = b.emit(Rescale, b.emit(Mask, (low,), ((0, low, 0, ones),), " (level alignment)"))
        a, c = (lowered, c) if low == a else (a, lowered)
        da, dc = _depth(b, a), _depth(b, c)
    return a, c


def _align(b: Builder, sym: Sym, lay: SlotLayout, indices: str, first: bool = False) -> Sym:
    """``sym`` moved into ``lay`` (axes ``indices``: batch.., row, k), one masked move per tile. Where the row and k
    strides change by opposite amounts (a transpose: ``y``'s rows at stride Rn become stride 1) the shift depends on
    k - row alone, and the baby-step/giant-step split is offered along that difference: about 2 sqrt(rows + K)
    rotations instead of one per diagonal."""
    if not set(sym.indices) <= set(indices):
        return b.move_into(sym, lay, indices)
    src_strides = {c: sym.layout.strides[a] for a, c in enumerate(sym.indices)}
    delta = [lay.strides[a] - src_strides[c] for a, c in enumerate(indices)]
    nb = len(indices) - 2
    rs, ks = lay.strides[nb], lay.strides[nb + 1]
    if delta[nb] and delta[nb + 1] and delta[nb] != -delta[nb + 1] and not first:
        # both strides change, by unrelated amounts (a 2-D set of shifts): first to the strides swapped (then only
        # one of them changes when the source's k stride is the target's row stride), then the transpose
        try:
            swapped = replace(lay, strides=lay.strides[:nb] + (ks, rs))
        except ShapeError:          # the swapped strides leave the ciphertext
            swapped = None
        if swapped is not None and _fits(swapped):
            return _align(b, _align(b, sym, swapped, indices, first=True), lay, indices, first=True)
    regs = []
    for t in lay.tiles:
        grids = [g.ravel() for g in np.meshgrid(*[np.arange(t.start[a], t.start[a] + t.size[a])
                                                  for a in range(len(indices))], indexing="ij")]
        dst = t.offset + sum((g - t.start[a]) * lay.strides[a] for a, g in enumerate(grids))
        row, kk = grids[nb], grids[nb + 1]

        def parts(inside, grids=grids, row=row, kk=kk):
            batch_parts = [(g[inside] - g[inside].min(), d) for g, d in zip(grids[:nb], delta[:nb])]
            if delta[nb] == -delta[nb + 1] and delta[nb]:
                diff = kk[inside] - row[inside]
                return [(diff - diff.min(), delta[nb + 1])] + batch_parts
            return [(row[inside] - row[inside].min(), delta[nb]), (kk[inside] - kk[inside].min(), delta[nb + 1])] \
                + batch_parts
        sources = _gather(sym, indices, grids, dst, parts)
        regs.append(b.mask_move(sources, note=" (align)"))
    return Sym(tuple(regs), lay, indices)


def _fits(lay: SlotLayout) -> bool:
    """Whether every tile's elements land on distinct slots inside the ciphertext."""
    for t in lay.tiles:
        pos = lay.positions(t).ravel()
        if pos.min() < 0 or pos.max() >= lay.slots or len(np.unique(pos)) != len(pos):
            return False
    return True


def _skew_from(fb: Builder, src: Sym, sym: Sym, tile: int, order: str, index, dst, note: str) -> int:
    """The skew of output tile ``tile`` from ``sym`` itself or from its aligned copy ``src`` (one tile per output
    tile)."""
    return _skew(fb, sym if src is sym else _single(src, tile), order, index, dst, note)


def _single(sym: Sym, tile: int) -> Sym:
    """Tile ``tile`` of ``sym`` alone."""
    lay, t = sym.layout, sym.layout.tiles[tile]
    return Sym((sym.regs[tile],), SlotLayout(lay.shape, lay.strides, lay.slots, (Tile(0, t.start, t.size, t.offset),),
                                            lay.replicas, lay.clean), sym.indices)


def _distinct_shifts(sym: Sym, order: str, index, dst) -> int:
    slots = sym.layout.slots
    return sum(len(np.unique((d - s) % slots)) for _, s, d, _ in _gather(sym, order, index, dst))


def try_skewed(b: Builder, x: Sym, y, keep: str):
    """The skewed strategy for ``x`` and ``y`` (see the module docstring): (cost, builder fork, result Sym, note), or
    None where the expression or the sizes do not suit it."""
    found = skewed_indices(x, y, keep)
    if found is None:
        return None
    batch, m, k, n = found

    def size(sym, c):
        return sym.layout.shape[sym.indices.index(c)]

    M, N, K = size(x, m), size(y, n), size(x, k)
    if K < 2 or (N % K and K % N):
        return None
    batch_shape = tuple(size(x, c) for c in batch)
    grid = skewed_grid(batch_shape, M, N, K, b.slots)
    if grid is None:
        return None
    out, rm, rn = grid
    steps = min(K, N)                 # N < K: the Rn / N column groups of a row take K / (Rn / N) steps each
    nb = len(batch)
    fb = b.fork()
    n0 = len(fb.steps)
    starts = _bases(out, nb)
    # A0[m, n'] = x[m, (m + n') mod K] (n' < Rn); B0[m', n'] = y[n' mod N, (m' + n') mod K] (m' < Rm, n' < Rn)
    am, an = (v.ravel() for v in np.meshgrid(np.arange(M), np.arange(rn), indexing="ij"))
    bm, bn = (v.ravel() for v in np.meshgrid(np.arange(rm), np.arange(rn), indexing="ij"))
    order = batch + m + k + n

    def indices(tile, rows, cols, which):
        """Index arrays (in ``order``) and destination slots of every batch element of ``tile``."""
        box = [np.arange(tile.start[a], tile.start[a] + tile.size[a]) for a in range(nb)]
        grids = [g.ravel() for g in np.meshgrid(*box, indexing="ij")] if nb else []
        count = len(grids[0]) if nb else 1
        rep = lambda v: np.tile(v, count)                                       # noqa: E731
        per = lambda g: np.repeat(g, len(rows))                                 # noqa: E731
        kk = rep((rows + cols) % K)
        if which == "x":
            idx = [per(g) for g in grids] + [rep(rows), kk, np.zeros_like(kk)]
        else:
            idx = [per(g) for g in grids] + [np.zeros_like(kk), kk, rep(cols % N)]
        return idx

    boxes = tuple((t.start, t.size, t.offset) for t in out.tiles)

    def layout_of(sizes, strides):
        tiles = tuple(Tile(j, st[:nb] + (0, 0), sz[:nb] + sizes, off) for j, (st, sz, off) in enumerate(boxes))
        return SlotLayout(batch_shape + sizes, out.strides[:nb] + strides, b.slots, tiles)

    lay_x, lay_y = layout_of((M, K), (rn, 1)), layout_of((N, K), (1, rn))
    tile0, base0 = out.tiles[0], starts[0][:, None]
    # each operand skewed straight from its layout, or aligned first (one or two masked moves shared by the tiles,
    # a level each): the cheaper on the first output tile
    sources = {}
    for name, sym, lay, idx, rows, cols in (("x", x, lay_x, batch + m + k, am, an),
                                            ("y", y, lay_y, batch + n + k, bm, bn)):
        dst = (base0 + rows * rn + cols).ravel()
        priced = []
        for how in ("direct", "aligned"):
            g = fb.fork()
            n1 = len(g.steps)
            src = sym if how == "direct" else _align(g, sym, lay, idx)
            _skew(g, _single(src, 0) if how == "aligned" else src, order, indices(tile0, rows, cols, name), dst, "")
            priced.append((g.cost_since(n1), how))
        sources[name] = sym if min(priced)[1] == "direct" else _align(fb, sym, lay, idx)
    regs = []
    for i, (tile, base) in enumerate(zip(out.tiles, starts)):
        a_dst = (base[:, None] + am * rn + an).ravel()
        b_dst = (base[:, None] + bm * rn + bn).ravel()
        a0 = _skew_from(fb, sources["x"], x, i, order, indices(tile, am, an, "x"), a_dst, " (skew x)")
        b0 = _skew_from(fb, sources["y"], y, i, order, indices(tile, bm, bn, "y"), b_dst, " (skew y)")
        a0, b0 = _same_depth(fb, a0, b0)
        # at one level once (operands from different depths of the graph: attention's weights and its values), so
        # that no step's product aligns them again and the sum's relinearization waits for its end
        a0, b0 = fb.emit(AlignLevel, a0, b0), fb.emit(AlignLevel, b0, a0)
        # step t: A_t[m, n'] = A0[m, (n' + t) mod Rn], B_t[m, n'] = B0[(m + t) mod Rm, n']: chains of rotations by
        # 1 and by Rn (the wrapped part from copies rotated back by one row / one block first), masked
        keep_a = (base[:, None] + am * rn + an).ravel()
        keep_b = (base[:, None] + np.repeat(np.arange(M), rn) * rn + np.tile(np.arange(rn), M)).ravel()
        row_a = np.tile(an, len(base))
        row_b = np.tile(np.repeat(np.arange(M), rn), len(base))
        ra, ra_wrap = a0, fb.emit(Rotate, a0, -rn)
        rb, rb_wrap = b0, fb.emit(Rotate, b0, -rm * rn)
        acc = None
        for t in range(steps):
            if t:
                ra, ra_wrap = fb.emit(Rotate, ra, 1), fb.emit(Rotate, ra_wrap, 1)
                rb, rb_wrap = fb.emit(Rotate, rb, rn), fb.emit(Rotate, rb_wrap, rn)
            a_terms = [(0, ra, 0, np.sort(keep_a[row_a + t < rn]))]
            b_terms = [(0, rb, 0, np.sort(keep_b[row_b + t < rm]))]
            if t:
                a_terms.append((0, ra_wrap, 0, np.sort(keep_a[row_a + t >= rn])))
                b_terms.append((0, rb_wrap, 0, np.sort(keep_b[row_b + t >= rm])))
            a_t = fb.emit(Rescale, fb.emit(Mask, tuple(dict.fromkeys(r for _, r, _, _ in a_terms)), tuple(a_terms),
                                           f" (x step {t})"))
            b_t = fb.emit(Rescale, fb.emit(Mask, tuple(dict.fromkeys(r for _, r, _, _ in b_terms)), tuple(b_terms),
                                           f" (y step {t})"))
            acc = fb.emit(MultiplyAccumulate, acc, a_t, b_t)      # relinearized once, below
        acc = fb.emit(Rescale, fb.emit(Relinearize, acc))
        if rn > N:                    # the column groups hold partial sums over k: add them
            acc = fb.emit(RotateSum, acc, rn // N, N, fb.radix)
        regs.append(acc)
    layout = SlotLayout(out.shape, out.strides, out.slots, out.tiles, (), clean=rn == N)
    res = Sym(tuple(regs), layout, batch + m + n)
    where = ""
    if M == K and len(y.indices) == nb + 2:
        # a weighted sum (m replaces y's contracted axis: attention's a v): the output goes where the values were,
        # compacted in y's axis order (heads beside the head size, as the head merge that follows wants), not in
        # per-batch blocks (whose merge would split the tensor into a tile per row)
        stride_of = {c: y.layout.strides[a] for a, c in enumerate(y.indices)}
        ranked = sorted(batch + m + n, key=lambda c: -stride_of[k if c == m else c])
        target = SlotLayout.compact(out.shape, b.slots, order=[(batch + m + n).index(c) for c in ranked])
        if target.strides != layout.strides:
            res = fb.move_into(res, target, batch + m + n)
            where = ", output moved to the values' axis order"
    return (fb.cost_since(n0), fb, res,
            f"skewed diagonal products (Jiang et al. 2018, as in THOR): {steps} steps per ciphertext (rotations by "
            f"1 and {rn}), {len(out.tiles)} output ciphertext(s), {rm}x{rn} blocks{where}")
