"""Compaction of a tensor spread thinly over many ciphertexts into as few as hold its values, and back.

A CipherTensor's tiles (``tensor_ops.layout.Tile``) often fill a few dozen slots of each of many ciphertexts
(the einsum planner spreads a contraction's output over tiles along the contracted axis: the 16 x 32 encoder
layer's projections leave 16 ciphertexts of 32 values each). Bootstrapping each costs one bootstrap a
ciphertext; moving the tiles into one ciphertext first (a rotation a tile, their sum) costs a few rotations
and bootstraps once. ``plan_compaction(layout)`` places every tile's slot footprint (its elements and their
replicas) at a translation where it overlaps no other tile's, the first ciphertext first (``Compaction``);
``compact`` runs it (masking each tile's footprint first where the slots around it are not zero: a dirty
layout, or a ciphertext holding several tiles; one level), ``expand`` moves the tiles back to the original
layout (masking again where the original layout is clean or a ciphertext holds several tiles; one level).
Both use only the backend operations of a plan (``rotate_many``, ``multiply`` by ``constant``, ``rescale``,
``add``), so the level- and rotation-recording backends count them as the encrypted run performs them.

The compact layout is a ``SlotLayout`` like any other (tiles of one ciphertext at several offsets); the
attention path expands back to the layout the next plan was made for, so no plan meets it.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, replace

import numpy as np

from crypto.errors import ShapeError

from .layout import SlotLayout
from .plan.steps import norm_shift

__all__ = ["Compaction", "compact", "expand", "footprint", "plan_compaction"]


def footprint(layout: SlotLayout, tile) -> np.ndarray:
    """The sorted slots ``tile`` occupies in its ciphertext (every element, every replica)."""
    slots = (layout.positions(tile).reshape(-1, 1) + layout.replica_shifts().reshape(1, -1)).ravel()
    return np.unique(slots)


@dataclass(frozen=True)
class Compaction:
    """Where each tile of ``layout`` goes: ``moves[i] = (source ciphertext, target ciphertext, k)`` for tile i,
    its slots rotated by k (slot s + k to s, as ``backend.rotate``); ``compact_layout`` the tensor in the
    ``ciphertexts`` targets; ``mask_before`` / ``mask_after``: whether ``compact`` / ``expand`` mask each tile's
    footprint (one level each)."""

    layout: SlotLayout
    compact_layout: SlotLayout
    moves: tuple
    mask_before: bool
    mask_after: bool

    @property
    def ciphertexts(self) -> int:
        return self.compact_layout.n_ciphertexts

    @property
    def spread(self) -> int:
        return self.layout.n_ciphertexts

    def rotation_steps(self) -> tuple:
        """Every rotation step ``compact`` and ``expand`` perform (keys), both directions."""
        slots = self.layout.slots
        steps = {norm_shift(k, slots) for _, _, k in self.moves} | {norm_shift(-k, slots) for _, _, k in self.moves}
        return tuple(sorted(s for s in steps if s))

    def rotations(self) -> int:
        """Rotations ``compact`` and ``expand`` perform together: one a moved tile (masked apart) or a distinct move
        of one source (unmasked) into the compact form, one a distinct move out of a compact ciphertext back."""
        slots = self.layout.slots
        moved = [(source, target, k % slots) for source, target, k in self.moves if k % slots]
        into = len(moved) if self.mask_before else len({(source, k) for source, _, k in moved})
        return into + len({(target, k) for _, target, k in moved})

    def masks(self) -> int:
        """Constant products (each followed by a rescale) of ``compact`` and ``expand`` together."""
        return len(self.moves) * (int(self.mask_before) + int(self.mask_after))

    def cost(self, costs=None) -> float:
        """``compact`` and ``expand`` in CostModel units (``tensor_ops.plan.cost``; one rotation = 1): every rotation
        priced as a key-switched one (hoisting only makes it cheaper), each mask a constant product and a rescale,
        each addition."""
        from .plan.cost import CostModel

        c = costs or CostModel()
        return (self.rotations() * c.rotation + self.masks() * (c.pt_mult + c.rescale)
                + 2 * (len(self.moves) - 1) * c.add)


def plan_compaction(layout: SlotLayout) -> Compaction:
    """The ``Compaction`` of ``layout``: each tile, in order, at the first ciphertext and the lowest slot where its
    footprint overlaps no tile placed before (its own place kept when free: no rotation), found for all
    translations at once by a cyclic correlation of the footprint with the ciphertext's occupied slots."""
    slots = layout.slots
    occupied: list[np.ndarray] = []
    moves, tiles = [], []
    for tile in layout.tiles:
        slots_of = footprint(layout, tile)
        lo, width = int(slots_of[0]), int(slots_of[-1] - slots_of[0]) + 1
        shape = np.zeros(slots)
        shape[slots_of - lo] = 1.0
        spectrum = np.conj(np.fft.rfft(shape))
        for target, busy in enumerate(occupied + [np.zeros(slots)]):
            if target == len(occupied):
                occupied.append(busy)
            if not busy[slots_of].any():
                base = lo
            else:
                overlap = np.fft.irfft(np.fft.rfft(busy) * spectrum, slots)[:slots - width + 1]
                free = np.flatnonzero(overlap < 0.5)
                if not len(free):
                    continue
                base = int(free[0])
            busy[slots_of - lo + base] = 1.0
            k = lo - base
            moves.append((tile.ct, target, k))
            tiles.append(replace(tile, ct=target, offset=tile.offset - k))
            break
    shared = len(layout.tiles) != layout.n_ciphertexts
    compact_layout = replace(layout, tiles=tuple(tiles), clean=True)   # masked first where anything else was there
    return Compaction(layout, compact_layout, tuple(moves), mask_before=not layout.clean or shared,
                      mask_after=layout.clean or shared)


def _mask(backend, layout, tile, ct):
    vec = np.zeros(layout.slots)
    vec[footprint(layout, tile)] = 1.0
    return backend.rescale(backend.multiply(ct, backend.constant(vec)))


def _sum(backend, parts):
    out = parts[0]
    for part in parts[1:]:
        out = backend.add(out, part)
    return out


def compact(backend, ciphertexts, compaction: Compaction) -> list:
    """The ciphertexts of ``compaction.compact_layout`` from those of ``compaction.layout`` (a rotation a moved
    tile, hoisted per source; a mask a tile first where ``mask_before``)."""
    layout = compaction.layout
    if len(ciphertexts) != layout.n_ciphertexts:
        raise ShapeError(f"compaction of {layout.n_ciphertexts} ciphertexts given {len(ciphertexts)}")
    by_source = defaultdict(list)
    for tile, (source, target, k) in zip(layout.tiles, compaction.moves):
        by_source[source].append((tile, target, k))
    parts = defaultdict(list)
    for source, moved in by_source.items():
        inputs = [_mask(backend, layout, tile, ciphertexts[source]) if compaction.mask_before
                  else ciphertexts[source] for tile, _, _ in moved]
        _rotate_each(backend, inputs, [k for _, _, k in moved], [t for _, t, _ in moved], parts, layout.slots)
    return [_sum(backend, parts[target]) for target in range(compaction.ciphertexts)]


def expand(backend, ciphertexts, compaction: Compaction) -> list:
    """The ciphertexts of ``compaction.layout`` from those of ``compaction.compact_layout`` (each tile rotated back,
    hoisted per compact ciphertext; masked where ``mask_after``)."""
    layout, packed = compaction.layout, compaction.compact_layout
    if len(ciphertexts) != packed.n_ciphertexts:
        raise ShapeError(f"expansion of {packed.n_ciphertexts} ciphertexts given {len(ciphertexts)}")
    by_target = defaultdict(list)
    for tile, (source, target, k) in zip(layout.tiles, compaction.moves):
        by_target[target].append((tile, source, k))
    parts = defaultdict(list)
    for target, moved in by_target.items():
        rotated: dict = defaultdict(list)
        _rotate_each(backend, [ciphertexts[target]] * len(moved), [-k for _, _, k in moved],
                     list(range(len(moved))), rotated, layout.slots)
        for n, (tile, source, _) in enumerate(moved):
            ct = rotated[n][0]
            parts[source].append(_mask(backend, layout, tile, ct) if compaction.mask_after else ct)
    return [_sum(backend, parts[source]) for source in range(layout.n_ciphertexts)]


def _rotate_each(backend, inputs, amounts, keys, into, slots):
    """into[keys[i]] gets inputs[i] rotated by amounts[i]; rotations of one ciphertext object hoisted together."""
    groups = defaultdict(list)
    for n, (ct, k) in enumerate(zip(inputs, amounts)):
        groups[id(ct)].append((n, k))
    for members in groups.values():
        ct = inputs[members[0][0]]
        wanted = sorted({norm_shift(k, slots) for _, k in members} - {0})
        if len(wanted) > 1:
            rotated = backend.rotate_many(ct, wanted)
        else:
            rotated = {k: backend.rotate(ct, k) for k in wanted}
        for n, k in members:
            into[keys[n]].append(ct if k % slots == 0 else rotated[norm_shift(k, slots)])
