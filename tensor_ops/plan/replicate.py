"""Replicate-multiply-reduce: one operand (the anchor) keeps its layout, the other moves to it; and its
client-side packing (operands encrypted already replicated)."""
from __future__ import annotations

from ..layout import SlotLayout, Tile
from ..parse import EinsumSpec
from .builder import Builder, PlainSym, Sym, combine, combine_floor


def pair_with(b: Builder, anchor: Sym, other, keep: str, op: str, swapped: bool, bound=None):
    """Anchor keeps its layout, the indices it lacks are appended; ``other`` is moved/packed into it.
    None (nothing built) when the U layout's :func:`combine_floor` exceeds ``bound``."""
    missing = [(c, other.layout.shape[i] if isinstance(other, Sym) else other.shape[i])
               for i, c in enumerate(other.indices) if c not in anchor.indices]
    u, owner, inside = b.extend(anchor, missing)
    u_idx = anchor.indices + "".join(c for c, _ in missing)
    plain = isinstance(other, PlainSym)
    if bound is not None and combine_floor(b, u, u_idx, keep, op, plain) > bound:
        return None
    a_u = b.broadcast_anchor(anchor, u, owner, inside)
    o_u = b.pack_into(other, u, u_idx) if plain else b.move_into(other, u, u_idx)
    first, second = (o_u, a_u) if swapped else (a_u, o_u)
    # the moved / packed operand is zero outside U's elements, so a product is clean; a sum only
    # when the anchor was clean without extra replicas
    clean = op == "mul" or (a_u.layout.clean and not a_u.layout.replicas)
    return combine(b, first, second, u, u_idx, keep, op, plain, clean)


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
