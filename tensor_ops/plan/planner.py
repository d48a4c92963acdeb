"""``plan(expr, *shapes, ...)``: operands checked, a plan built and, with ``layouts="auto"``, client-side
packings priced against it (the cheapest kept)."""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from crypto.context import as_parameters
from crypto.errors import ShapeError

from ..layout import SlotLayout
from ..parse import parse
from .build import build_plan
from .core import Plan
from .cost import DEFAULT_COSTS
from .diagonal import diagonal_layouts
from .replicate import prepacked_layouts
from .stationary import stationary_layouts


def plan(expr: str, *shapes, params=None, slots=None, encrypted=None, layouts=None, costs=DEFAULT_COSTS) -> Plan:
    """Plan ``expr`` for operands of ``shapes`` (tuples or arrays) without any key or ciphertext.

    ``params`` (CKKSParameters or a preset name) gives the slot count and the level budget: a plan
    deeper than ``params.max_level`` is refused here, before any encryption (LevelError naming the
    depth needed and available). ``encrypted`` flags each operand (default: all encrypted).
    ``layouts``: None (row-major compact, tiled if needed), a list with a SlotLayout per encrypted
    operand (None entries: compact), or ``"auto"``: the planner also tries client-side packing
    (operands encrypted already replicated, see :func:`prepacked_layouts`) and keeps the cheaper
    plan; encrypt with ``layout=plan.input_layouts[n]``.
    """
    if params is not None:
        params = as_parameters(getattr(params, "params", params))   # a context, a preset name, a dict
    if params is None and slots is None:
        raise ShapeError("plan needs params=CKKSParameters (or slots=<power of two>)")
    slots = params.slots if params is not None else slots
    if isinstance(slots, bool) or not isinstance(slots, (int, np.integer)) or slots < 1 or slots & (slots - 1):
        raise ShapeError(f"slots={slots!r} must be a power of two")
    slots = int(slots)
    if len(shapes) == 1 and isinstance(expr, str) and expr.split("->")[0].count(",") > 0 \
            and isinstance(shapes[0], (list, tuple)) and all(isinstance(s, (list, tuple)) for s in shapes[0]):
        shapes = tuple(shapes[0])          # plan("ij,jk->ik", [(3, 4), (4, 5)]): one list of shapes
    spec = parse(expr, *shapes)
    n_ops = len(spec.shapes)
    if encrypted is None or isinstance(encrypted, (bool, np.bool_)):
        encrypted = [True if encrypted is None else bool(encrypted)] * n_ops
    encrypted = tuple(bool(e) for e in encrypted)
    if len(encrypted) != n_ops:
        raise ShapeError(f"encrypted has {len(encrypted)} flags for {n_ops} operands")
    auto = isinstance(layouts, str)
    if auto and layouts != "auto":
        raise ShapeError(f"layouts={layouts!r}: expected None, 'auto' or a list of SlotLayouts")
    layouts = [None] * n_ops if layouts is None or auto else list(layouts)
    if len(layouts) != n_ops:
        raise ShapeError(f"layouts has {len(layouts)} entries for {n_ops} operands")
    layouts = tuple(lay if lay is not None or not e else SlotLayout.compact(s, slots)
                    for lay, e, s in zip(layouts, encrypted, spec.shapes))
    for n, lay in enumerate(layouts):
        if lay is not None and (lay.slots != slots or lay.shape != spec.shapes[n]):
            raise ShapeError(f"operand {n}: layout ({lay.describe()}) does not fit shape {spec.shapes[n]} "
                             f"and {slots} slots")
    max_level = params.max_level if params is not None else None
    p = build_plan(spec, encrypted, layouts, slots, max_level, costs)
    if auto and any(encrypted):
        for packed in (prepacked_layouts(spec, encrypted, slots), diagonal_layouts(spec, encrypted, slots),
                       stationary_layouts(spec, encrypted, slots)):
            if packed is None:
                continue
            q = build_plan(spec, encrypted, packed, slots, max_level, costs)
            if (q.cost()["estimate"], q.depth()) < (p.cost()["estimate"], p.depth()):
                note = f"client-side packing: est. {q.cost()['estimate']} vs {p.cost()['estimate']} otherwise"
                p = replace(q, notes=q.notes + (note,))
    if max_level is not None:
        p.check_levels(max_level)
    return p
