"""SlotLayout: where each element of a logical tensor sits in the slots of one or more ciphertexts.

A layout is a frozen description, never data. Element ``idx`` of a tile ``t`` lives in ciphertext
``t.ct`` at slot

    t.offset + sum_a (idx[a] - t.start[a]) * strides[a]   (+ r * rstride for each replica (count, rstride))

Tiles are boxes of the logical index space (``start``, ``size`` per axis); a tensor larger than one
ciphertext is split into several tiles, one per ciphertext, so nothing ever aborts for size.
All tiles share the strides. ``replicas`` are extra copies of every element at further strides (a
tensor packed already replicated saves rotations). ``clean`` says the slots that hold no element
are zero; rotate-and-add replication needs a clean input, a rotate-and-sum leaves garbage behind.
Strides may leave gaps (padding) and may be zero for size-1 axes.

The layout idea (axes mapped to slot strides, packing made explicit) follows EinHops (Garimella,
Ebel and Reagen, "EinHops: Einsum Notation for Expressive Homomorphic Operations on RNS-CKKS
Tensors", arXiv:2507.07972, 2025), extended with tiles, replicas and a clean flag.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from math import prod

import numpy as np

from crypto.errors import ShapeError

__all__ = ["Tile", "SlotLayout"]


@dataclass(frozen=True)
class Tile:
    """One ciphertext's share of a tensor: the box ``[start, start + size)`` stored from slot ``offset``."""

    ct: int
    start: tuple[int, ...]
    size: tuple[int, ...]
    offset: int = 0

    @property
    def count(self) -> int:
        return prod(self.size)


@dataclass(frozen=True)
class SlotLayout:
    """How a tensor of ``shape`` maps to slots (see the module docstring for the formula)."""

    shape: tuple[int, ...]
    strides: tuple[int, ...]
    slots: int
    tiles: tuple[Tile, ...] | None = None  # None: one tile, the whole tensor in ciphertext 0 from slot 0
    replicas: tuple[tuple[int, int], ...] = ()
    clean: bool = True

    def __post_init__(self):
        object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))
        object.__setattr__(self, "strides", tuple(int(s) for s in self.strides))
        if self.tiles is None:
            object.__setattr__(self, "tiles", (Tile(0, (0,) * len(self.shape), self.shape),))
        object.__setattr__(self, "tiles", tuple(self.tiles))
        object.__setattr__(self, "replicas", tuple((int(c), int(s)) for c, s in self.replicas))
        if len(self.strides) != len(self.shape):
            raise ShapeError(f"strides {self.strides} must have one entry per axis of shape {self.shape}")
        if self.slots < 1 or self.slots & (self.slots - 1):
            raise ShapeError(f"slots={self.slots} must be a power of two")
        if not self.tiles:
            raise ShapeError("a layout needs at least one tile")
        for t in self.tiles:
            if len(t.start) != len(self.shape) or len(t.size) != len(self.shape):
                raise ShapeError(f"tile {t} does not have one start/size per axis of shape {self.shape}")
            if any(s < 0 or n < 1 or s + n > d for s, n, d in zip(t.start, t.size, self.shape)):
                raise ShapeError(f"tile {t} leaves the shape {self.shape}")
            lo, hi = self._extent(t)
            if lo < 0 or hi >= self.slots:
                raise ShapeError(f"tile {t} uses slots [{lo}, {hi}], outside [0, slots={self.slots})")

    # ------------------------------------------------------------------ constructors
    @classmethod
    def compact(cls, shape, slots: int, order=None) -> "SlotLayout":
        """Row-major packing (``order`` lists the axes from outermost to innermost), no padding.

        When the tensor needs more than ``slots`` slots it is tiled along its outer axes: the
        innermost axes that fit stay whole, the next axis is cut into chunks, the outer ones into
        single indices.
        """
        shape = tuple(int(d) for d in shape)
        if any(d < 1 for d in shape):
            raise ShapeError(f"shape {shape}: every axis needs size >= 1")
        order = tuple(range(len(shape))) if order is None else tuple(order)
        if sorted(order) != list(range(len(shape))):
            raise ShapeError(f"order {order} is not a permutation of the axes of shape {shape}")
        strides = [0] * len(shape)
        chunk = list(shape)
        step = 1
        for axis in reversed(order):
            strides[axis] = step
            room = slots // step
            if room < shape[axis]:
                chunk[axis] = max(room, 1)
            step *= chunk[axis]
        return cls.tiled(shape, strides, slots, chunk)

    @classmethod
    def tiled(cls, shape, strides, slots: int, chunk, offset: int = 0, replicas=(), clean: bool = True):
        """Tiles of ``chunk`` elements per axis (the last ones smaller), one ciphertext each, row-major."""
        shape = tuple(shape)
        grids = [range(0, d, max(c, 1)) for d, c in zip(shape, chunk)]
        starts = np.stack(np.meshgrid(*[np.array(g) for g in grids], indexing="ij"), -1).reshape(-1, len(shape)) \
            if shape else np.zeros((1, 0), dtype=int)
        tiles = tuple(Tile(n, tuple(int(s) for s in st), tuple(min(c, d - s) for s, c, d in zip(st, chunk, shape)),
                           offset) for n, st in enumerate(starts))
        return cls(shape, tuple(strides), slots, tiles, replicas, clean)

    # ------------------------------------------------------------------ geometry
    def _extent(self, t: Tile) -> tuple[int, int]:
        lo = hi = t.offset
        for n, s in zip(t.size, self.strides):
            (lo, hi) = (lo + (n - 1) * s, hi) if s < 0 else (lo, hi + (n - 1) * s)
        for c, s in self.replicas:
            (lo, hi) = (lo + (c - 1) * s, hi) if s < 0 else (lo, hi + (c - 1) * s)
        return lo, hi

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def n_ciphertexts(self) -> int:
        return max(t.ct for t in self.tiles) + 1

    def positions(self, tile: Tile) -> np.ndarray:
        """Slot of every element of ``tile`` (first replica), as an int array of shape ``tile.size``."""
        pos = np.full(tile.size, tile.offset, dtype=np.int64)
        for a, (n, s) in enumerate(zip(tile.size, self.strides)):
            shape = [1] * len(tile.size)
            shape[a] = n
            pos = pos + (np.arange(n, dtype=np.int64) * s).reshape(shape)
        return pos

    def replica_shifts(self) -> np.ndarray:
        """Slot shift of each replica copy (0 for the original), flattened."""
        shifts = np.zeros(1, dtype=np.int64)
        for c, s in self.replicas:
            shifts = (shifts[:, None] + np.arange(c, dtype=np.int64)[None, :] * s).ravel()
        return shifts

    def index(self, tile: Tile) -> tuple[slice, ...]:
        """The numpy index of the tile's box in the logical tensor."""
        return tuple(slice(s, s + n) for s, n in zip(tile.start, tile.size))

    def span(self) -> int:
        """One past the highest slot used by any tile."""
        return max(self._extent(t)[1] for t in self.tiles) + 1

    # ------------------------------------------------------------------ data
    def pack(self, array) -> list[np.ndarray]:
        """Slot vectors (one per ciphertext) holding ``array`` in this layout, zeros elsewhere."""
        array = np.asarray(array)
        if array.shape != self.shape:
            raise ShapeError(f"array of shape {array.shape} does not match the layout shape {self.shape}")
        dtype = np.complex128 if np.iscomplexobj(array) else np.float64
        vectors = [np.zeros(self.slots, dtype=dtype) for _ in range(self.n_ciphertexts)]
        shifts = self.replica_shifts()
        for t in self.tiles:
            pos = self.positions(t)
            vals = array[self.index(t)]
            for sh in shifts:
                vectors[t.ct][pos + sh] = vals
        return vectors

    def unpack(self, vectors) -> np.ndarray:
        """The logical tensor read back from slot vectors (first replica of each element)."""
        if len(vectors) < self.n_ciphertexts:
            raise ShapeError(f"layout needs {self.n_ciphertexts} slot vectors, got {len(vectors)}")
        dtype = np.result_type(*[np.asarray(v).dtype for v in vectors], np.float64)
        out = np.zeros(self.shape, dtype=dtype)
        for t in self.tiles:
            out[self.index(t)] = np.asarray(vectors[t.ct])[self.positions(t)]
        return out

    # ------------------------------------------------------------------ metadata-only transforms
    def with_clean(self, clean: bool) -> "SlotLayout":
        return replace(self, clean=clean)

    def transpose(self, axes) -> "SlotLayout":
        """Reorder the axes (free: only the description changes)."""
        axes = tuple(axes)
        return replace(self, shape=tuple(self.shape[a] for a in axes),
                       strides=tuple(self.strides[a] for a in axes),
                       tiles=tuple(replace(t, start=tuple(t.start[a] for a in axes),
                                           size=tuple(t.size[a] for a in axes)) for t in self.tiles))

    def diagonal(self, a: int, b: int) -> "SlotLayout":
        """Keep only elements with ``idx[a] == idx[b]`` and drop axis ``b`` (free; the layout turns dirty)."""
        tiles = []
        for t in self.tiles:
            lo = max(t.start[a], t.start[b])
            hi = min(t.start[a] + t.size[a], t.start[b] + t.size[b])
            if hi <= lo:
                continue
            offset = t.offset + (lo - t.start[a]) * self.strides[a] + (lo - t.start[b]) * self.strides[b]
            start = list(t.start); size = list(t.size)
            start[a], size[a] = lo, hi - lo
            del start[b], size[b]
            tiles.append(Tile(t.ct, tuple(start), tuple(size), offset))
        strides = list(self.strides)
        strides[a] += strides[b]
        del strides[b]
        shape = list(self.shape)
        del shape[b]
        return SlotLayout(tuple(shape), tuple(strides), self.slots, tuple(tiles), self.replicas, clean=False)

    def drop_axis(self, a: int) -> "SlotLayout":
        """Remove axis ``a``, keeping the elements at each tile's first index along it.

        For a size-1 axis this is a squeeze (the layout stays clean); after a rotate-and-sum the sums
        sit at the first index, the other slots hold partial sums (dirty).
        """
        full = self.shape[a] == 1
        strides = self.strides[:a] + self.strides[a + 1:]
        shape = self.shape[:a] + self.shape[a + 1:]
        tiles = tuple(Tile(t.ct, t.start[:a] + t.start[a + 1:], t.size[:a] + t.size[a + 1:], t.offset)
                      for t in self.tiles if full or t.start[a] == 0)
        return SlotLayout(shape, strides, self.slots, tiles, self.replicas, clean=self.clean and full)

    def insert_axis(self, a: int) -> "SlotLayout":
        """Insert a size-1 axis at position ``a`` (free)."""
        return replace(self, shape=self.shape[:a] + (1,) + self.shape[a:],
                       strides=self.strides[:a] + (0,) + self.strides[a:],
                       tiles=tuple(replace(t, start=t.start[:a] + (0,) + t.start[a:],
                                           size=t.size[:a] + (1,) + t.size[a:]) for t in self.tiles))

    def index_view(self, key) -> "SlotLayout":
        """The layout of ``tensor[key]`` (free: only the description changes; the view is dirty
        unless it keeps every element). ``key``: ints, slices with a positive step, ``None`` and one
        ``...``, as in numpy basic indexing. Tiles the view does not touch are dropped; ``Tile.ct``
        still names the original ciphertexts."""
        key = key if isinstance(key, tuple) else (key,)
        if sum(k is Ellipsis for k in key) > 1:
            raise ShapeError("an index can only have a single ellipsis ('...')")
        named = sum(k is not None and k is not Ellipsis for k in key)
        if named > self.ndim:
            raise ShapeError(f"too many indices ({named}) for a tensor with {self.ndim} axes")
        if Ellipsis in key:
            at = key.index(Ellipsis)
            key = key[:at] + (slice(None),) * (self.ndim - named) + key[at + 1:]
        else:
            key = key + (slice(None),) * (self.ndim - named)
        lay, axis, full = self, 0, True
        for k in key:
            if k is None:
                lay, axis = lay.insert_axis(axis), axis + 1
                continue
            n = lay.shape[axis]
            if isinstance(k, slice):
                start, stop, step = k.indices(n)
                if step < 1:
                    raise ShapeError(f"slice step {step} on axis {axis}: only positive steps are supported")
                picks = range(start, stop, step)
                full = full and len(picks) == n
                lay, axis = lay._take(axis, start, step, len(picks)), axis + 1
            elif isinstance(k, (int, np.integer)) and not isinstance(k, bool):
                if not -n <= int(k) < n:
                    raise ShapeError(f"index {k} is out of bounds for axis {axis} with size {n}")
                full = full and n == 1
                lay = lay._take(axis, int(k) % n, 1, 1).drop_axis(axis)
            else:
                raise ShapeError(f"index {k!r}: only ints, slices, None and ... are supported")
        return lay if full else lay.with_clean(False)

    def _take(self, axis: int, start: int, step: int, count: int) -> "SlotLayout":
        """Keep indices ``start + step*m`` (m < count) of ``axis``."""
        tiles = []
        for t in self.tiles:
            ts, tn = t.start[axis], t.size[axis]
            lo = max(0, -(-(ts - start) // step))
            hi = min(count, -(-(ts + tn - start) // step))
            if hi <= lo:
                continue
            first = start + step * lo
            offset = t.offset + (first - ts) * self.strides[axis]
            tiles.append(Tile(t.ct, t.start[:axis] + (lo,) + t.start[axis + 1:],
                              t.size[:axis] + (hi - lo,) + t.size[axis + 1:], offset))
        if not tiles:
            raise ShapeError(f"axis {axis}: an empty selection is not supported")
        strides = self.strides[:axis] + (self.strides[axis] * step,) + self.strides[axis + 1:]
        shape = self.shape[:axis] + (count,) + self.shape[axis + 1:]
        return SlotLayout(shape, strides, self.slots, tuple(tiles), self.replicas, self.clean)

    def describe(self) -> str:
        """One line: shape, strides, tiles, replicas, clean."""
        reps = f", replicas {list(self.replicas)}" if self.replicas else ""
        return (f"shape {self.shape} strides {self.strides} in {len(self.tiles)} tile(s) / "
                f"{self.n_ciphertexts} ct of {self.slots} slots{reps}{'' if self.clean else ', dirty'}")
