"""The diagonal method (Halevi-Shoup, baby-step/giant-step, hoisted rotations) for ``x[..., k] M[k, j]``
with ``M`` plaintext; and its client-side packing (each vector followed by a copy)."""
from __future__ import annotations

from dataclasses import replace
from math import ceil

import numpy as np

from ..layout import SlotLayout, Tile
from ..parse import EinsumSpec
from .builder import Builder, PlainSym, Sym
from .steps import MatVecDiagonal, Replicate, Rescale


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


def diagonal_target(shape, axis: int, dim: int, slots: int):
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


def matrix_on_vectors(x: Sym, y: PlainSym, keep: str):
    """(k, j, rows, cols) when the pair is ``x[..., k] M[j, k] -> y[..., j]``: one contracted axis k of x, a
    plaintext matrix M over (j, k) of rows x cols, j new and kept; else None."""
    summed = [c for c in x.indices if c not in keep]
    if len(summed) != 1 or len(y.indices) != 2 or summed[0] not in y.indices:
        return None
    k = summed[0]
    j = y.indices.replace(k, "")
    if j not in keep or j in x.indices or any(c in y.indices for c in x.indices if c != k):
        return None
    return k, j, y.shape[y.indices.index(j)], y.shape[y.indices.index(k)]


def try_diagonal(b: Builder, x: Sym, y: PlainSym, keep: str):
    """Halevi–Shoup diagonal candidate for ``x[..., k] M[j, k] -> y[..., j]`` (x encrypted, M plaintext,
    k contracted, the other axes of x a batch, tiled over ciphertexts if needed). x is first moved to
    a layout where each vector has room for its copy, unless it has one already (client packing)."""
    found = matrix_on_vectors(x, y, keep)
    if found is None:
        return None
    k, j, rows, cols = found
    dim, axis = max(rows, cols), x.indices.index(k)
    fb = b.fork()
    n0 = len(fb.steps)
    ready = _diagonal_ready(x.layout, axis, dim)
    if ready is None:  # move x so that axis k has stride 1 and each vector owns 2*dim slots
        target = diagonal_target(x.layout.shape, axis, dim, b.slots)
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
    target = diagonal_target(shape, axis, dim, slots)
    if target is None:
        return None
    layouts = [None] * len(spec.inputs)
    layouts[enc[0]] = replace(target, replicas=((2, dim),))
    return tuple(layouts)
