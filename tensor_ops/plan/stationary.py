"""Output-stationary packing: kept indices keep their native strides, contracted ones go outer; and its
client-side packing (both operands tiled straight into that layout)."""
from __future__ import annotations

import numpy as np

from ..layout import SlotLayout, Tile
from ..parse import EinsumSpec
from .builder import Builder, PlainSym, Sym, combine, combine_floor


def stationary_layout(x, y, keep: str, slots: int):
    """The U layout of output-stationary packing (see :func:`pair_stationary`), with its index
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


def pair_stationary(b: Builder, x: Sym, y, keep: str, op: str, bound=None):
    """Output-stationary packing: kept indices keep a native stride (from ``x``, else ``y``) when the
    positions stay distinct; the other indices (contracted ones included) get new outer strides,
    inside the ciphertext while they fit, across tiles after that. Both operands then move only the
    axes whose stride changed, so a move has few distinct shifts (few masks), e.g. a large matmul
    moves only the contracted axis of each operand. None when no kept index has a native stride, or
    when it cannot beat ``bound`` (:func:`combine_floor`: a U layout of many tiles is priced out before
    anything is built)."""
    found = stationary_layout(x, y, keep, b.slots)
    if found is None:
        return None
    u, u_idx = found
    if bound is not None and combine_floor(b, u, u_idx, keep, op, isinstance(y, PlainSym)) > bound:
        return None
    fb = b.fork()
    n0 = len(fb.steps)
    x_u = fb.move_into(x, u, u_idx)
    plain = isinstance(y, PlainSym)
    y_u = fb.pack_into(y, u, u_idx) if plain else fb.move_into(y, u, u_idx)
    res = combine(fb, x_u, y_u, u, u_idx, keep, op, plain, True)
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
    found = stationary_layout(syms[0], syms[1], spec.output, slots)
    if found is None:
        return None
    u, u_idx = found
    layouts = tuple(_restrict(u, u_idx, spec.inputs[n]) for n in enc)
    return None if None in layouts else layouts
