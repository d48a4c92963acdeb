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

import string

import numpy as np

from crypto.errors import ShapeError

from .backends import CKKSBackend, PlainBackend
from .layout import SlotLayout
from .parse import parse
from .plan import Plan, build_elementwise, build_plan, build_scalar
from .tensor_base import CipherTensorBase, backend_of, check_same_backend, run_plan

__all__ = ["CipherTensor", "encrypt", "einsum", "matmul_expression", "run_plan"]


class CipherTensor(CipherTensorBase):
    """Ciphertexts (one per tile) and the SlotLayout that says where each element lives; the operators below
    lower to plans (properties, ``decrypt``, bytes, ``transpose`` and indexing come from CipherTensorBase)."""

    __slots__ = ()

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
            check_same_backend(self, other)
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


def encrypt(ctx, array, layout: SlotLayout | None = None, level: int | None = None) -> CipherTensor:
    """Encrypt a numpy array (default layout: row-major compact, tiled over several ciphertexts when
    it needs more than ``params.slots`` slots)."""
    be = backend_of(ctx)
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
        check_same_backend(tensors[0], t)
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
