"""Einsum, elementwise and scalar plans: inputs squeezed and diagonalised, private indices summed, operands
contracted pairwise by the cheapest strategy, the result put in output order."""
from __future__ import annotations

import string

from crypto.errors import ShapeError

from ..layout import SlotLayout, Tile
from ..parse import EinsumSpec, broadcast_shapes, parse
from .blocked import try_blocked
from .builder import Builder, PlainSym, Sym
from .core import PlainPrep, Plan
from .cost import DEFAULT_COSTS
from .diagonal import try_diagonal
from .replicate import pair_with
from .skewed import try_skewed
from .stationary import pair_stationary
from .steps import Input, MulScalar, Negate, Rescale


def _pair(b: Builder, x, y, keep: str, op: str):
    """Contract or combine ``x`` (encrypted Sym) with ``y`` (Sym or PlainSym); returns a Sym over the
    kept indices in U order. ``op`` is 'mul', 'add' or 'sub' (x - y).

    The diagonal method is tried first, then both anchors, then output-stationary; a strategy whose
    lower bound (from its tiles) exceeds the cheapest so far is not built. Ties go to the earlier
    strategy in the order replicate (x anchored, y anchored), stationary, diagonal, skewed (two encrypted
    matrices: ``skewed``), block generalized diagonals in place (``blocked``)."""
    found = {}  # rank -> (cost, fork, result, why)
    if op == "mul" and isinstance(y, PlainSym):
        diag = try_diagonal(b, x, y, keep)
        if diag is not None:
            found[3] = diag
        blocked = try_blocked(b, x, y, keep)
        if blocked is not None:
            found[5] = blocked

    def bound():
        return min((c[0] for c in found.values()), default=None)

    if op == "mul" and isinstance(y, Sym):
        skewed = try_skewed(b, x, y, keep)
        if skewed is not None:
            found[4] = skewed

    anchors = [(x, y, False)] + ([(y, x, True)] if isinstance(y, Sym) else [])
    for rank, (anchor, other, swapped) in enumerate(anchors):
        fb = b.fork()
        n0 = len(fb.steps)
        res = pair_with(fb, anchor, other, keep, op, swapped, bound=bound())
        if res is not None:
            found[rank] = (fb.cost_since(n0), fb, res, f"replicate-multiply-reduce, operand {2 if swapped else 1} "
                                                       "stays, the other moves to it")
    stationary = pair_stationary(b, x, y, keep, op, bound=bound()) if isinstance(y, Sym) else None
    if stationary is not None:
        found[2] = stationary
    candidates = [found[r] for r in sorted(found)]
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


def build_plan(spec: EinsumSpec, encrypted, layouts, slots: int, max_level=None, costs=DEFAULT_COSTS) -> Plan:
    """Lower ``spec`` (see the module docstring). ``layouts[n]`` is the SlotLayout of encrypted operand n."""
    b = Builder(slots, costs)
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


def _finish(b: Builder, cur: Sym, spec: EinsumSpec, encrypted, layouts, preps, max_level) -> Plan:
    """Put the result's axes in output order (size-1 axes squeezed earlier come back) and wrap up."""
    lay, idx = cur.layout, cur.indices
    for c in spec.output:
        if c not in idx:
            lay, idx = lay.insert_axis(lay.ndim), idx + c
    lay = lay.transpose([idx.index(c) for c in spec.output])
    return Plan(spec, tuple(encrypted), tuple(layouts), tuple(b.steps), tuple(preps), cur.regs, lay, b.slots,
                tuple(b.notes), max_level, b.costs)


def _input_syms(b: Builder, spec: EinsumSpec, encrypted, layouts) -> dict:
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
    b = Builder(slots)
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
    b = Builder(layout.slots)
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


def _sum_private(b: Builder, sym: Sym, needed: set) -> Sym:
    return b.rotate_sum_axes(sym, [a for a, c in enumerate(sym.indices) if c not in needed])
