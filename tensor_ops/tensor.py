"""CipherTensor: an immutable encrypted numpy-shaped tensor (ciphertexts + a frozen SlotLayout).

    ctx = CKKSContext.keygen(params, rotations=tensor_ops.plan("ij,jk->ik", a.shape, b.shape,
                                                                params=params).rotations())
    A = tensor_ops.encrypt(ctx, a)                  # row-major layout, tiled when larger than the slots
    C = tensor_ops.einsum("ij,jk->ik", A, b)        # CipherTensor; plaintext operands stay in the clear
    C.decrypt(ctx)                                  # numpy array of the logical shape

Operators lower to plans: ``+ - *`` with CipherTensors, arrays and scalars (numpy broadcasting),
``@`` (numpy matmul rules), ``.sum(axis)``, ``.T`` / ``.transpose(axes)`` (free: only the layout
changes). Nothing mutates: every operation returns a new CipherTensor.

``encrypt`` also accepts a :class:`~tensor_ops.backends.PlainBackend` instead of a context: the
"ciphertexts" are then numpy slot vectors and every plan runs unencrypted, for debugging a packing.
It accepts a :class:`~tensor_ops.backends.CKKSBackend` too: tensors encrypted through one backend
object share its caches (plans already made, plaintext masks already encoded).
"""
from __future__ import annotations

import json
import string
import struct
from dataclasses import replace

import numpy as np

from crypto.errors import ContextMismatchError, SerializationError, ShapeError

from .backends import CKKSBackend, PlainBackend
from .layout import SlotLayout, Tile
from .parse import parse
from .plan import Plan, build_elementwise, build_plan, build_scalar

__all__ = ["CipherTensor", "encrypt", "einsum", "matmul_expression", "run_plan"]

_MAGIC = b"hezk/CipherTensor/v1\0"


def _backend_of(ctx):
    if isinstance(ctx, (PlainBackend, CKKSBackend)):
        return ctx
    if hasattr(ctx, "evaluator") and hasattr(ctx, "params"):
        return CKKSBackend(ctx)
    raise ShapeError(f"ctx must be a CKKSContext or a PlainBackend, got {type(ctx).__name__}")


class CipherTensor:
    """Ciphertexts (one per tile) and the SlotLayout that says where each element lives."""

    __slots__ = ("_cts", "_layout", "_backend")
    __array_ufunc__ = None  # numpy defers ``array op CipherTensor`` to our reflected operators

    def __init__(self, ciphertexts, layout: SlotLayout, backend):
        cts = tuple(ciphertexts)
        if not isinstance(layout, SlotLayout):
            raise ShapeError(f"layout must be a SlotLayout, got {type(layout).__name__}")
        if len(cts) != layout.n_ciphertexts:
            raise ShapeError(f"layout needs {layout.n_ciphertexts} ciphertexts, got {len(cts)}")
        object.__setattr__(self, "_cts", cts)
        object.__setattr__(self, "_layout", layout)
        object.__setattr__(self, "_backend", backend)

    def __setattr__(self, name, value):
        raise AttributeError("CipherTensor is immutable")

    # ------------------------------------------------------------------ properties
    @property
    def ciphertexts(self) -> tuple:
        return self._cts

    @property
    def layout(self) -> SlotLayout:
        return self._layout

    @property
    def backend(self):
        return self._backend

    @property
    def shape(self) -> tuple[int, ...]:
        return self._layout.shape

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape))

    @property
    def level(self):
        """The lowest level of the ciphertexts (None on the plain backend)."""
        levels = [getattr(c, "level", None) for c in self._cts]
        return None if None in levels else min(levels)

    def __len__(self):
        if not self.shape:
            raise TypeError("len() of a 0-d CipherTensor")
        return self.shape[0]

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def __repr__(self):
        lv = "" if self.level is None else f", level={self.level}"
        return f"CipherTensor(shape={self.shape}{lv}, {len(self._cts)} ciphertext(s), {self._backend.name})"

    # ------------------------------------------------------------------ decryption
    def decrypt(self, ctx=None) -> np.ndarray:
        """The numpy array of the logical shape (``ctx`` must hold the secret key; on the plain
        backend it may be omitted)."""
        be = self._backend if ctx is None else _backend_of(ctx)
        vectors = [be.decrypt(c) for c in self._cts]
        vectors = [np.pad(v, (0, self._layout.slots - len(v))) if len(v) < self._layout.slots else v for v in vectors]
        out = self._layout.unpack(vectors)
        return out.real.copy() if np.iscomplexobj(out) and not self._complex() else out

    def _complex(self) -> bool:
        return any(getattr(c, "is_complex", np.iscomplexobj(c)) for c in self._cts)

    # ------------------------------------------------------------------ bytes
    def to_bytes(self) -> bytes:
        """Versioned bytes: the layout (JSON) and each ciphertext's own bytes (CKKS backend only)."""
        if not isinstance(self._backend, CKKSBackend):
            raise SerializationError("only CipherTensors of a CKKS context have a byte form")
        lay = self._layout
        header = json.dumps({"shape": lay.shape, "strides": lay.strides, "slots": lay.slots,
                             "tiles": [[t.ct, t.start, t.size, t.offset] for t in lay.tiles],
                             "replicas": lay.replicas, "clean": lay.clean}).encode()
        parts = [header] + [c.to_bytes() for c in self._cts]
        return _MAGIC + struct.pack("<I", len(parts)) + b"".join(struct.pack("<Q", len(p)) + p for p in parts)

    @classmethod
    def from_bytes(cls, blob, ctx) -> "CipherTensor":
        """A CipherTensor from ``to_bytes`` output, for ``ctx`` (a public context is enough)."""
        from crypto.rlwe import Ciphertext

        blob = bytes(blob)
        if not blob.startswith(_MAGIC) or len(blob) < len(_MAGIC) + 4:
            raise SerializationError("not CipherTensor bytes (bad magic or version)")
        (count,), pos, parts = struct.unpack_from("<I", blob, len(_MAGIC)), len(_MAGIC) + 4, []
        for _ in range(count):
            if pos + 8 > len(blob):
                raise SerializationError("CipherTensor bytes are truncated")
            (size,) = struct.unpack_from("<Q", blob, pos)
            parts.append(blob[pos + 8:pos + 8 + size])
            pos += 8 + size
            if pos > len(blob):
                raise SerializationError("CipherTensor bytes are truncated")
        if pos != len(blob) or count < 1:
            raise SerializationError(f"CipherTensor bytes have {len(blob) - pos} trailing bytes or no header")
        try:
            head = json.loads(parts[0])
            layout = SlotLayout(tuple(head["shape"]), tuple(head["strides"]), int(head["slots"]),
                                tuple(Tile(int(c), tuple(st), tuple(sz), int(off)) for c, st, sz, off in head["tiles"]),
                                tuple(tuple(r) for r in head["replicas"]), bool(head["clean"]))
        except (ValueError, KeyError, TypeError) as exc:
            raise SerializationError(f"CipherTensor layout header is malformed: {exc}") from None
        return cls([Ciphertext.from_bytes(p, ctx) for p in parts[1:]], layout, _backend_of(ctx))

    # ------------------------------------------------------------------ free layout changes
    def transpose(self, *axes) -> "CipherTensor":
        """Permute the axes (no ciphertext work: the layout records the new order)."""
        if len(axes) == 1 and isinstance(axes[0], (tuple, list, type(None))):
            axes = tuple(axes[0]) if axes[0] is not None else ()
        if any(isinstance(a, bool) or not isinstance(a, (int, np.integer)) for a in axes):
            raise ShapeError(f"axes {axes!r} must be integers (a permutation of the {self.ndim} axes)")
        axes = tuple(range(self.ndim))[::-1] if not axes else tuple(int(a) for a in axes)
        if len(axes) != self.ndim or any(not -self.ndim <= a < self.ndim for a in axes) or \
                sorted(a % self.ndim for a in axes) != list(range(self.ndim)):
            raise ShapeError(f"axes {axes} are not a permutation of the {self.ndim} axes of shape {self.shape}")
        return CipherTensor(self._cts, self._layout.transpose([a % self.ndim for a in axes]), self._backend)

    @property
    def T(self) -> "CipherTensor":
        return self.transpose()

    def __getitem__(self, key) -> "CipherTensor":
        """Basic numpy indexing (ints, positive-step slices, None, ...): free, only the layout changes."""
        lay = self._layout.index_view(key)
        used = sorted({t.ct for t in lay.tiles})
        renumber = {ct: n for n, ct in enumerate(used)}
        tiles = tuple(replace(t, ct=renumber[t.ct]) for t in lay.tiles)
        return CipherTensor([self._cts[ct] for ct in used], replace(lay, tiles=tiles), self._backend)

    # ------------------------------------------------------------------ lowered operations
    def sum(self, axis=None, keepdims: bool = False, dtype=None, out=None) -> "CipherTensor":
        """Sum over ``axis`` (int, tuple or None for all) by rotate-and-sum (``np.sum(t, axis)`` works
        too; ``dtype`` is ignored, ``out`` refused: CipherTensors are immutable)."""
        if out is not None:
            raise ShapeError("out= is not supported: a CipherTensor is immutable, sum returns a new one")
        axes = tuple(range(self.ndim)) if axis is None else (axis,) if isinstance(axis, (int, np.integer)) \
            else tuple(axis) if isinstance(axis, (tuple, list)) else (axis,)
        norm = []
        for a in axes:
            if isinstance(a, bool) or not isinstance(a, (int, np.integer)) or not -self.ndim <= a < self.ndim:
                raise ShapeError(f"axis={a!r} is not an integer in [{-self.ndim}, {self.ndim}) for a tensor "
                                 f"with {self.ndim} axes")
            norm.append(int(a) % self.ndim)
        if len(set(norm)) != len(norm):
            raise ShapeError(f"axis={axis!r} repeats an axis")
        letters = string.ascii_letters[:self.ndim]
        out = "".join(c for n, c in enumerate(letters) if n not in norm)
        res = einsum(f"{letters}->{out}", self)
        if keepdims:
            lay = res.layout
            for a in sorted(norm):
                lay = lay.insert_axis(a)
            res = CipherTensor(res.ciphertexts, lay, res.backend)
        return res

    def _binary(self, other, op: str, reflected: bool = False) -> "CipherTensor":
        if isinstance(other, (int, float, complex, np.number)) and not isinstance(other, bool):
            if op == "sub":
                other, op = -other, "add"
            plan = _cached(self._backend, ("scalar", op, self._layout, other),
                           lambda: build_scalar(op, self._layout, other))
            return run_plan(plan, [self])
        if isinstance(other, CipherTensor):
            _check_same(self, other)
        elif not isinstance(other, np.ndarray):
            try:
                other = np.asarray(other, dtype=np.result_type(np.asarray(other), np.float64))
            except (TypeError, ValueError):
                return NotImplemented
        if isinstance(other, np.ndarray) and not (np.issubdtype(other.dtype, np.number) or other.dtype == bool):
            raise ShapeError(f"operand of dtype {other.dtype} is not numeric (expected a CipherTensor, a numeric "
                             "array or a scalar)")
        operands = [other, self] if reflected else [self, other]
        enc = tuple(isinstance(o, CipherTensor) for o in operands)
        layouts = [o.layout if isinstance(o, CipherTensor) else None for o in operands]
        shapes = tuple(o.shape for o in operands)
        plan = _cached(self._backend, ("elementwise", op, shapes, enc, tuple(layouts)),
                       lambda: build_elementwise(op, shapes, enc, layouts, self._layout.slots))
        return run_plan(plan, operands)

    def __add__(self, other):
        return self._binary(other, "add")

    def __radd__(self, other):
        return self._binary(other, "add", reflected=True)

    def __sub__(self, other):
        return self._binary(other, "sub")

    def __rsub__(self, other):
        if isinstance(other, (int, float, complex, np.number)) and not isinstance(other, bool):
            return (-self)._binary(other, "add")
        return self._binary(other, "sub", reflected=True)

    def __mul__(self, other):
        return self._binary(other, "mul")

    def __rmul__(self, other):
        return self._binary(other, "mul", reflected=True)

    def __truediv__(self, other):
        """Division by a plaintext scalar or array (a multiplication by its inverse)."""
        if isinstance(other, CipherTensor):   # no encrypted division in CKKS without a polynomial approximation
            raise ShapeError("division by a CipherTensor is not supported (only by plaintext scalars and arrays)")
        divisor = np.asarray(other)
        if not np.issubdtype(divisor.dtype, np.number):
            raise ShapeError(f"divisor of dtype {divisor.dtype} is not numeric")
        if np.any(divisor == 0):
            raise ShapeError("division by zero: the divisor has a zero entry")
        return self._binary(1.0 / other if divisor.ndim == 0 else 1.0 / divisor.astype(np.result_type(divisor, float)),
                            "mul")

    def __neg__(self):
        return CipherTensor([self._backend.negate(c) for c in self._cts], self._layout, self._backend)

    def __matmul__(self, other):
        return einsum(matmul_expression(self.ndim, np.ndim(other)), self, other)

    def __rmatmul__(self, other):
        return einsum(matmul_expression(np.ndim(other), self.ndim), other, self)


def matmul_expression(ndim_a: int, ndim_b: int) -> str:
    """The einsum expression of ``a @ b`` for operands with these numbers of axes (numpy rules)."""
    if ndim_a == 0 or ndim_b == 0:
        raise ShapeError("matmul: an operand is 0-d; use * for scalars")
    a = "...ij" if ndim_a >= 2 else "j"
    b = "...jk" if ndim_b >= 2 else "j"
    out = ("..." if max(ndim_a, ndim_b) >= 2 else "") + ("i" if ndim_a >= 2 else "") + ("k" if ndim_b >= 2 else "")
    return f"{a},{b}->{out}"


def _check_same(a: CipherTensor, b: CipherTensor):
    if a.backend is not b.backend:
        pa, pb = getattr(a.backend, "ctx", None), getattr(b.backend, "ctx", None)
        same = pa is not None and pb is not None and getattr(pa, "key_id", 1) == getattr(pb, "key_id", 2)
        if not same and not (isinstance(a.backend, PlainBackend) and isinstance(b.backend, PlainBackend)
                             and a.backend.slots == b.backend.slots):
            raise ContextMismatchError("CipherTensors come from different contexts/backends (keys differ)")
    if a.layout.slots != b.layout.slots:
        raise ContextMismatchError(f"slot counts differ: {a.layout.slots} and {b.layout.slots}")


def run_plan(plan: Plan, operands) -> CipherTensor:
    """Execute ``plan`` on the backend of the encrypted operands, refusing too-deep plans first."""
    tensors = [o for o in operands if isinstance(o, CipherTensor)]
    if len(operands) != len(plan.encrypted) or \
            any(isinstance(o, CipherTensor) != e for o, e in zip(operands, plan.encrypted)):
        raise ShapeError(f"plan expects operands encrypted={plan.encrypted}, got "
                         f"{tuple(isinstance(o, CipherTensor) for o in operands)}")
    for n, (o, lay) in enumerate(zip(operands, plan.input_layouts)):
        if isinstance(o, CipherTensor) and o.layout != lay:
            raise ShapeError(f"operand {n} has layout {o.layout.describe()}, the plan expects {lay.describe()}")
    be = tensors[0].backend
    levels = [t.level for t in tensors]
    if None not in levels:
        plan.check_levels(min(levels))
    ops = [list(o.ciphertexts) if isinstance(o, CipherTensor) else np.asarray(o) for o in operands]
    regs = plan.run(be, ops)
    return CipherTensor(regs, plan.output_layout, be)


def encrypt(ctx, array, layout: SlotLayout | None = None, level: int | None = None) -> CipherTensor:
    """Encrypt a numpy array (default layout: row-major compact, tiled over several ciphertexts when
    it needs more than ``params.slots`` slots)."""
    be = _backend_of(ctx)
    if isinstance(be, PlainBackend):
        be.ensure_slots()
    try:
        arr = np.asarray(array)
    except ValueError as exc:          # ragged nested lists
        raise ShapeError(f"array is not a regular numeric array: {exc}") from None
    if arr.dtype == object or not np.issubdtype(arr.dtype, np.number):
        raise ShapeError(f"array of dtype {arr.dtype} is not numeric")
    if layout is None:
        layout = SlotLayout.compact(arr.shape, be.slots)
    if layout.shape != arr.shape:
        raise ShapeError(f"layout shape {layout.shape} differs from the array shape {arr.shape}")
    if layout.slots != be.slots:
        raise ShapeError(f"layout has {layout.slots} slots but the context has {be.slots}")
    vectors = layout.pack(arr)
    if isinstance(be, CKKSBackend):
        cts = [be.ctx.encrypt(v, level=level) for v in vectors]
    else:
        cts = [be.encrypt(v) for v in vectors]
    return CipherTensor(cts, layout, be)


def _sublist_form(args) -> tuple[str, list]:
    """numpy's interleaved form ``einsum(op0, [0, 1], op1, [1, 2], [0, 2])`` as (expression, operands)."""
    def term(sub) -> str:
        try:
            return "".join("..." if i is Ellipsis else string.ascii_letters[int(i)] for i in sub)
        except (TypeError, ValueError, IndexError):
            raise ShapeError(f"subscript list {sub!r} must hold integers in [0, 52) or Ellipsis") from None
    args = list(args)
    if len(args) < 2 or not all(isinstance(sub, (list, tuple)) for sub in args[1::2]):
        raise ShapeError(f"expr={args[0]!r} must be an einsum string, or numpy's interleaved form "
                         "(operand, [indices], operand, [indices], ..., [output indices])")
    operands, terms = args[0:len(args) - len(args) % 2:2], [term(s) for s in args[1::2]]
    out = "->" + term(args[-1]) if len(args) % 2 else ""
    return ",".join(terms[:len(operands)]) + out, operands


def einsum(expr: str, *operands, plan: Plan | None = None, optimize=None):
    """``numpy.einsum`` over any mix of CipherTensors and numpy arrays (see tensor_ops.plan).

    Returns a CipherTensor when an operand is encrypted, else the numpy result. Raises LevelError
    before any work when the plan needs more levels than the operands have. ``plan``: a plan made
    earlier for these operands (same expression, encrypted flags and layouts) to skip planning.
    Also numpy's interleaved form ``einsum(A, [0, 1], B, [1, 2], [0, 2])``; ``optimize`` is accepted
    for numpy compatibility and ignored (the planner orders the contraction itself).
    """
    if not isinstance(expr, str):
        expr, operands = _sublist_form((expr,) + operands)
    tensors = [o for o in operands if isinstance(o, CipherTensor)]
    arrays = [o if isinstance(o, CipherTensor) else np.asarray(o) for o in operands]
    spec = parse(expr, *[o.shape for o in arrays])
    if not tensors:
        return np.einsum(spec.expression(), *arrays)
    for t in tensors[1:]:
        _check_same(tensors[0], t)
    enc = tuple(isinstance(o, CipherTensor) for o in arrays)
    if plan is not None:
        if plan.spec != spec:
            raise ShapeError(f"plan is for {plan.spec.expression()} with shapes {plan.spec.shapes}, not "
                             f"{spec.expression()} with shapes {spec.shapes}")
        return run_plan(plan, arrays)
    layouts = [o.layout if isinstance(o, CipherTensor) else None for o in arrays]
    be = tensors[0].backend
    plan = _cached(be, ("einsum", spec, enc, tuple(layouts)),
                   lambda: build_plan(spec, enc, layouts, tensors[0].layout.slots))
    return run_plan(plan, arrays)


def _cached(backend, key, make) -> Plan:
    """Plans are pure functions of expression, shapes and layouts: each backend object keeps the
    ones it ran (bounded), so repeating an operation does not plan again."""
    cache = backend.plans
    plan = cache.get(key)
    if plan is None:
        if len(cache) >= 256:
            cache.pop(next(iter(cache)))
        plan = cache[key] = make()
    return plan
