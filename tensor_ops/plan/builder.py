"""Lowering machinery: symbolic tensors over registers and the step builder (masked moves with
baby-step/giant-step rotations, replication, rotate-and-sum, tile-wise products) shared by the strategies."""
from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import dataclass

import numpy as np

from ..layout import SlotLayout, Tile
from .cost import DEFAULT_COSTS
from .steps import Add, Mask, Multiply, Pack, Replicate, Rescale, Rotate, RotateSum, Step, norm_shift


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


class Builder:
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
        b = Builder(self.slots, self.costs)
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
        return len({norm_shift(k, self.slots) for k in amounts} - self.keys - {0})

    # ---------------------------------------------------------------- primitive tensor ops
    def multiply_rescale(self, a, b, plain=False):
        return self.emit(Rescale, self.emit(Multiply, a, b, plain))

    def _decompose(self, flat, split=True):
        """Cheapest baby/giant split of the shifts of ``flat`` = [(reg, src, shift, axis parts)], an axis
        part being (index array, shift per index step). Baby candidates: none, shift mod 2^e, the part
        due to a subset of axes, or the part due to ``index mod f`` of one axis (classic BSGS along a
        moved axis). Returns (cost, [(reg, src, giant, baby)]). The winning candidate is remembered per
        relative shift pattern (tiles of one tensor repeat it) while no new key appears: a heuristic
        that only affects which split is used, never the result. Index arrays count from the first index
        moved, so the tiles of one tensor share an entry; shifts that start at 0 (a source rotated first)
        have their own."""
        slots = self.slots
        if all(d.size and not (d != d[0]).any() for _, _, d, _ in flat):
            # one shift per source (a tile translated): nothing to split, priced without the search
            giants = {int(d[0]) % slots for _, _, d, _ in flat} - {0}
            c = self.costs
            cost = (len(giants) * c.rotation + len(flat) * c.pt_mult + self._new_keys({-g for g in giants}) * c.key)
            return cost, [(reg, src, d, np.zeros_like(d)) for reg, src, d, _ in flat]
        signature = (len(self.keys), split, tuple((bool(d[0] % slots), ((d - d[0]) % slots).tobytes(),
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
        (index array counted from the first index moved, shift per index step) for each axis, for
        axis-aligned baby/giant splits) and a rescale.

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
                    cur_reg = self.emit(Rotate, cur_reg, -norm_shift(want - cur, slots))
                    shifts[reg] = (cur_reg, want)
                rename[reg] = cur_reg
            best = (best[0], [(rename[reg], src, g, b) for reg, src, g, b in best[1]])
        terms = []
        for reg, src, g, b in best[1]:
            keys = (g * slots + b).ravel()
            pos = (src.ravel() + b.ravel()) % slots
            order = np.lexsort((pos, keys))     # one sort: grouped by (giant, baby), slots ascending
            keys, pos = keys[order], pos[order]
            bounds = [0, *(np.flatnonzero(np.diff(keys)) + 1).tolist(), len(keys)]
            for lo, hi in zip(bounds[:-1], bounds[1:]):
                gg, bb = divmod(int(keys[lo]), slots)
                terms.append((gg, reg, bb, pos[lo:hi]))
        srcs = tuple(dict.fromkeys(reg for reg, _, _, _ in best[1]))
        return self.emit(Rescale, self.emit(Mask, srcs, tuple(terms), note))

    # ---------------------------------------------------------------- tensor-level ops
    def rotate_sum_axes(self, sym: Sym, axes: list[int]) -> Sym:
        """Sum ``sym`` over ``axes``; axes removed. Tiles that differ only along ``axes`` are added first
        and rotated-and-summed once (``sum_t RotSum(x_t) = RotSum(sum_t x_t)``: rotations are linear),
        so a reduction over T tiles of one ciphertext each costs log2(slots) rotations, not T times as
        many; tiles at different offsets are then aligned by one rotation each and added."""
        if not axes:
            return sym
        lay = sym.layout
        keep = [a for a in range(lay.ndim) if a not in axes]
        # a smaller tile may share the rotate-and-sum of a larger one when the slots past its box are
        # zero (clean, no replica copies) and the larger box contains it (same offset and strides)
        pad_ok = lay.clean and not lay.replicas
        groups: dict = {}
        for t, reg in zip(lay.tiles, sym.regs):
            key = (tuple(t.start[a] for a in keep), tuple(t.size[a] for a in keep))
            sub = groups.setdefault(key, {})
            sizes = tuple(t.size[a] for a in axes)
            sub.setdefault((t.offset, None if pad_ok else sizes), []).append((sizes, reg))
        tiles, regs = [], []
        for n, ((start, size), subs) in enumerate(groups.items()):
            ref = next(iter(subs))[0]
            acc = None
            for (offset, _), members in subs.items():
                for cls in _size_classes(members):
                    r = None
                    for _, reg in cls:
                        r = reg if r is None else self.emit(Add, r, reg)
                    top = tuple(max(sz[i] for sz, _ in cls) for i in range(len(axes)))
                    for a, count in zip(axes, top):
                        if count > 1:
                            r = self.emit(RotateSum, r, count, lay.strides[a], self.radix)
                    r = self.emit(Rotate, r, offset - ref) if offset != ref else r
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
        regs, shifts, done = [], {}, {}
        box_lo = np.array([st.start for st in src_lay.tiles], dtype=np.int64).reshape(len(src_lay.tiles), len(axes))
        box_hi = box_lo + np.array([st.size for st in src_lay.tiles], dtype=np.int64).reshape(box_lo.shape)
        for t in u.tiles:
            # the moved register depends only on the tile's box along other's axes, its offset and its
            # sizes along the lacking axes: U tiles that agree on these share one register
            key = (t.offset, tuple(t.start[a] for a in axes), tuple(t.size[a] for a in axes),
                   tuple(t.size[a] for a in lacking))
            if key in done:
                regs.append(done[key])
                continue
            fits = self._fits(other, u, t, axes, lacking)
            if fits is not None:
                r = other.regs[fits]
            else:
                sources = []
                t_lo = np.array([t.start[a] for a in axes], dtype=np.int64)
                t_hi = t_lo + np.array([t.size[a] for a in axes], dtype=np.int64)
                los, his = np.maximum(box_lo, t_lo), np.minimum(box_hi, t_hi)
                for n in np.flatnonzero((his > los).all(axis=1)).tolist():   # source tiles meeting t
                    st, sreg, lo, hi = src_lay.tiles[n], other.regs[n], los[n].tolist(), his[n].tolist()
                    grids = np.meshgrid(*[np.arange(l, h) for l, h in zip(lo, hi)], indexing="ij") \
                        if axes else []
                    src = np.full(grids[0].shape if axes else (), st.offset, dtype=np.int64)
                    dst = np.full(src.shape, t.offset, dtype=np.int64)
                    parts = []
                    for i, (a, g) in enumerate(zip(axes, grids)):
                        src = src + (g - st.start[i]) * src_lay.strides[i]
                        dst = dst + (g - t.start[a]) * u.strides[a]
                        parts.append((np.atleast_1d(g - lo[i]), u.strides[a] - src_lay.strides[i]))
                    sources.append((sreg, np.atleast_1d(src), np.atleast_1d(dst), parts))
                r = self.mask_move(sources, shifts=shifts if len(u.tiles) > 1 else None)
            covered = self._fits_replicas(other, u, t, lacking) if fits is not None else set()
            for a in lacking:
                if t.size[a] > 1 and a not in covered:
                    r = self.emit(Replicate, r, t.size[a], u.strides[a], self.radix)
            done[key] = r
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
        lay = SlotLayout(u.shape, u.strides, u.slots, u.tiles)  # one layout shared by every tile's Pack
        regs = [self.emit(Pack, other.source, lay, u_indices, n) for n in range(len(u.tiles))]
        return Sym(tuple(regs), u, u_indices)


def combine_floor(b: Builder, u: SlotLayout, u_idx: str, keep: str, op: str, plain: bool) -> float:
    """A lower bound on what :func:`combine` spends on operands laid out in ``u``, from the tiles alone
    (nothing is built): per tile a multiply and a rescale (``mul``) or an addition, and per output tile
    with something to sum inside at least one rotation. A strategy whose bound exceeds the cheapest
    plan found so far is skipped (the plan chosen is the same)."""
    c = b.costs
    per_tile = (c.pt_mult if plain else c.ct_mult) + c.rescale if op == "mul" else c.add
    summed = [a for a, ch in enumerate(u_idx) if ch not in keep]
    kept = [a for a, ch in enumerate(u_idx) if ch in keep]
    groups = {(tuple(t.start[a] for a in kept), tuple(t.size[a] for a in kept))
              for t in u.tiles if any(t.size[a] > 1 for a in summed)}
    return len(u.tiles) * per_tile + len(groups) * min(c.rotation, c.hoisted_rotation)


def combine(b: Builder, first: Sym, second: Sym, u: SlotLayout, u_idx: str, keep: str, op: str,
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


def _size_classes(members):
    """Split [(sizes along the summed axes, reg)] into classes summed together before one rotate-and-sum:
    each class has a member whose box contains every other member's (sizes elementwise >= the others').
    Members of equal sizes always share a class."""
    classes = []
    for m in sorted(members, key=lambda m: m[0], reverse=True):
        for cls in classes:
            if all(a >= b for a, b in zip(cls[0][0], m[0])):
                cls.append(m)
                break
        else:
            classes.append([m])
    return classes
