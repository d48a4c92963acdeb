"""Einsum expressions -> a validated :class:`EinsumSpec`.

Accepts every form ``numpy.einsum`` accepts: explicit (``ij,jk->ik``) and implicit output
(``ij,jk``: the indices seen once, in alphabetical order), ellipsis (``...ij,...jk->...ik``, with
numpy broadcasting of the ellipsis dimensions), repeated indices inside an operand (trace ``ii``,
diagonal ``ii->i``), indices summed away, outer products, any number of operands, and size-1
broadcasting of a labelled axis (an axis of size 1 stretches to the size the index has elsewhere).

Ellipsis dimensions are given fresh letters, so downstream code only sees plain index letters.
Errors are :class:`EinsumSyntaxError` (a malformed expression) or :class:`crypto.errors.ShapeError`
(operands that do not fit it); both are ``ValueError``\\ s and name the operand, the axis and the sizes.
"""
from __future__ import annotations

import string
from dataclasses import dataclass

from crypto.errors import HEError, ShapeError

__all__ = ["EinsumSpec", "EinsumSyntaxError", "parse", "broadcast_shapes"]

LETTERS = string.ascii_letters


class EinsumSyntaxError(HEError, ValueError):
    """A malformed einsum expression (bad character, misplaced ``->`` or ``...``, unknown output index)."""


@dataclass(frozen=True)
class EinsumSpec:
    """A parsed einsum: one index string per operand (ellipsis expanded), the output indices,
    the size of every index, and which operand axes are size-1 broadcasts.

    ``inputs[n][a]`` labels axis ``a`` of operand ``n``; a letter may repeat inside one operand.
    ``sizes`` maps each index to its (broadcast) size. ``shapes`` are the operand shapes as given.
    """

    inputs: tuple[str, ...]
    output: str
    sizes: tuple[tuple[str, int], ...]
    shapes: tuple[tuple[int, ...], ...]

    def size(self, index: str) -> int:
        """Size of one index letter."""
        return dict(self.sizes)[index]

    @property
    def output_shape(self) -> tuple[int, ...]:
        return tuple(self.size(c) for c in self.output)

    @property
    def contracted(self) -> str:
        """Indices summed over (in some operand, not in the output), in first-seen order."""
        seen = dict.fromkeys("".join(self.inputs))
        return "".join(c for c in seen if c not in self.output)

    def expression(self) -> str:
        """The explicit expression (``ij,jk->ik``) with the ellipsis expanded."""
        return ",".join(self.inputs) + "->" + self.output


def broadcast_shapes(*shapes: tuple[int, ...], what: str = "operands") -> tuple[int, ...]:
    """numpy broadcasting of shapes (aligned on the right); raises ShapeError naming the axis."""
    ndim = max((len(s) for s in shapes), default=0)
    out = []
    for axis in range(ndim):
        sizes = {s[len(s) - ndim + axis] for s in shapes if len(s) - ndim + axis >= 0}
        big = sizes - {1}
        if len(big) > 1:
            raise ShapeError(f"{what}: axis {axis - ndim} has sizes {sorted(sizes)} that do not broadcast "
                             f"(each must be 1 or the same size)")
        out.append(big.pop() if big else 1)
    return tuple(out)


def _split_term(term: str, where: str) -> tuple[str, str, bool]:
    """Split one subscript term into (before ..., after ..., has_ellipsis), checking its characters."""
    if term.count("...") > 1 or term.replace("...", "").count(".") > 0:
        raise EinsumSyntaxError(f"{where}: '{term}' has a '.' that is not part of a single '...' ellipsis")
    bad = [c for c in term.replace("...", "") if c not in LETTERS]
    if bad:
        raise EinsumSyntaxError(f"{where}: character {bad[0]!r} in '{term}' is not an index letter "
                                f"(allowed: a-z, A-Z and one '...')")
    if "..." in term:
        head, tail = term.split("...")
        return head, tail, True
    return term, "", False


def _as_shape(s, n: int) -> tuple[int, ...]:
    try:
        return tuple(int(d) for d in getattr(s, "shape", s))
    except (TypeError, ValueError):
        raise ShapeError(f"operand {n}: shape {s!r} is not a tuple of ints (or an array)") from None


def _is_shape_list(obj) -> bool:
    return isinstance(obj, (list, tuple)) and all(isinstance(s, (list, tuple)) or hasattr(s, "shape") for s in obj)


def parse(expr: str, *shapes) -> EinsumSpec:
    """Parse ``expr`` for operands of the given shapes (tuples, or anything with ``.shape``)."""
    if not isinstance(expr, str):
        raise EinsumSyntaxError(f"expr must be a str like 'ij,jk->ik', got {type(expr).__name__}")
    expr = "".join(expr.split())
    if len(shapes) == 1 and expr.split("->")[0].count(",") >= 1 and _is_shape_list(shapes[0]):
        shapes = tuple(shapes[0])  # plan("ij,jk", [(2, 3), (3, 4)]) as well as plan("ij,jk", (2, 3), (3, 4))
    shapes = tuple(_as_shape(s, n) for n, s in enumerate(shapes))
    if expr.count("->") > 1 or expr.replace("->", "").count(">") or expr.replace("->", "").count("-"):
        raise EinsumSyntaxError(f"expr '{expr}': '->' must appear at most once (and '-'/'>' only as '->')")
    lhs, arrow, rhs = expr.partition("->")
    terms = lhs.split(",")
    if not shapes:
        raise EinsumSyntaxError("einsum needs at least one operand")
    if len(terms) != len(shapes):
        raise EinsumSyntaxError(f"expr '{expr}' has {len(terms)} operand term(s) but {len(shapes)} "
                                "operand(s) were given")
    parts = [_split_term(t, f"operand {n}") for n, t in enumerate(terms)]
    used = set(lhs + rhs)
    fresh = [c for c in LETTERS if c not in used]

    ell_shapes = []
    for n, ((head, tail, has_ell), shape) in enumerate(zip(parts, shapes)):
        named = len(head) + len(tail)
        if (not has_ell and named != len(shape)) or (has_ell and named > len(shape)):
            raise ShapeError(f"operand {n}: subscripts '{terms[n]}' name {named} axes but the operand has "
                             f"{len(shape)} (shape {shape})")
        ell_shapes.append(shape[len(head):len(shape) - len(tail)] if has_ell else ())
    ell_shape = broadcast_shapes(*ell_shapes, what="ellipsis dimensions")
    if len(ell_shape) > len(fresh):
        raise EinsumSyntaxError(f"too many ellipsis dimensions ({len(ell_shape)}); at most {len(fresh)} free letters")
    ell_letters = "".join(fresh[:len(ell_shape)])
    inputs = tuple(head + (ell_letters[len(ell_letters) - len(e):] if has_ell else "") + tail
                   for (head, tail, has_ell), e in zip(parts, ell_shapes))

    sizes: dict[str, int] = {}
    for n, (labels, shape) in enumerate(zip(inputs, shapes)):
        for axis, (c, d) in enumerate(zip(labels, shape)):
            if d < 1:
                raise ShapeError(f"operand {n}: axis {axis} ('{c}') has size {d}; sizes must be at least 1")
            # repeated letters inside one operand must agree exactly (numpy: no broadcasting there)
            first = labels.index(c)
            if first != axis and shape[first] != d:
                raise ShapeError(f"operand {n}: repeated index '{c}' has sizes {shape[first]} (axis {first}) "
                                 f"and {d} (axis {axis}); they must be equal")
            old = sizes.get(c, 1)
            if d != 1 and old != 1 and d != old:
                raise ShapeError(f"operand {n}: axis {axis} (index '{c}') has size {d}, but '{c}' has size "
                                 f"{old} in an earlier operand (sizes must match or be 1)")
            sizes[c] = max(old, d)

    if arrow:
        head, tail, has_ell = _split_term(rhs, "output")
        if not has_ell and len(ell_letters):
            raise EinsumSyntaxError(f"output '{rhs}' has no '...' but the operands have {len(ell_letters)} "
                                    f"ellipsis dimension(s) to keep")
        output = head + (ell_letters if has_ell else "") + tail
        for c in output:
            if output.count(c) > 1:
                raise EinsumSyntaxError(f"output '{rhs}': index '{c}' appears more than once")
            if c not in sizes:
                raise EinsumSyntaxError(f"output '{rhs}': index '{c}' does not appear in any operand")
    else:
        counts = "".join(inputs)
        output = ell_letters + "".join(sorted(c for c in set(counts) if counts.count(c) == 1
                                              and c not in ell_letters))
    return EinsumSpec(inputs, output, tuple(sorted(sizes.items())), shapes)
