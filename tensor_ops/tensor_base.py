"""What every CipherTensor is without the planner: ciphertexts (one per tile), a frozen SlotLayout and a
backend; properties, decryption, bytes, free layout changes (transpose, indexing), and ``run_plan``, which
executes a Plan on such tensors. ``tensor_ops.tensor.CipherTensor`` adds the operations lowered to plans."""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

import hezk.record
from crypto.errors import ContextMismatchError, KeyMissingError, SerializationError, ShapeError
from crypto.params import parameters_from_bytes
from crypto.rlwe import Ciphertext, ciphertext_from_pickle, live_public_context

from .backends import CKKSBackend, PlainBackend
from .layout import SlotLayout, Tile

RECORD_KIND = "tensor_ops.CipherTensor"
MAX_SLOTS = 1 << 16  # the largest ring (N = 2^17) a CipherTensor record may name
MAX_AXES = 64


def backend_of(ctx):
    """The backend a CipherTensor of ``ctx`` runs on (a context gets a new CKKSBackend)."""
    if isinstance(ctx, (PlainBackend, CKKSBackend)):
        return ctx
    if hasattr(ctx, "evaluator") and hasattr(ctx, "params"):
        return CKKSBackend(ctx)
    raise ShapeError(f"ctx must be a CKKSContext or a PlainBackend, got {type(ctx).__name__}")


class DetachedBackend:
    """The backend of a CipherTensor unpickled in a process where no public context of its key set lives: it
    decrypts with a context passed in (``tensor.decrypt(ctx)``) and refuses to compute (KeyMissingError)."""

    name = "detached"
    ctx = None

    def __init__(self, params, key_id: bytes):
        self.params, self.key_id, self.slots = params, key_id, params.slots

    def _refuse(self, *args, **kwargs):
        raise KeyMissingError(f"this CipherTensor was unpickled where no public context of its key set "
                              f"{self.key_id.hex()[:12]}… lives: unpickle (or scatter) that public context first, "
                              f"or read it with CipherTensor.from_bytes(tensor.to_bytes(), ctx); decrypt(ctx) works")

    decrypt = encrypt = run = rotate = rotate_many = add = mul = _refuse
    plans = property(_refuse)  # every lowered operation looks up its plan here first


class CipherTensorBase:
    """Ciphertexts (one per tile) and the SlotLayout that says where each element lives (the planner-free part
    of :class:`~tensor_ops.tensor.CipherTensor`)."""

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
        be = self._backend if ctx is None else backend_of(ctx)
        vectors = [be.decrypt(c) for c in self._cts]
        vectors = [np.pad(v, (0, self._layout.slots - len(v))) if len(v) < self._layout.slots else v for v in vectors]
        out = self._layout.unpack(vectors)
        return out.real.copy() if np.iscomplexobj(out) and not self._complex() else out

    def _complex(self) -> bool:
        return any(getattr(c, "is_complex", np.iscomplexobj(c)) for c in self._cts)

    # ------------------------------------------------------------------ bytes
    def to_bytes(self) -> bytes:
        """A ``tensor_ops.CipherTensor`` record (:mod:`hezk.record`): the layout as its meta, each ciphertext's
        own record as an array (CKKS backend only)."""
        if not isinstance(self._backend, (CKKSBackend, DetachedBackend)):
            raise SerializationError("only CipherTensors of a CKKS context have a byte form")
        lay = self._layout
        ints = lambda values: [int(v) for v in values]  # noqa: E731 (a tiled layout's numbers may be numpy ints)
        header = {"shape": ints(lay.shape), "strides": ints(lay.strides), "slots": int(lay.slots),
                  "tiles": [[int(t.ct), ints(t.start), ints(t.size), int(t.offset)] for t in lay.tiles],
                  "replicas": [ints(r) for r in lay.replicas], "clean": bool(lay.clean)}
        return hezk.record.pack(RECORD_KIND, header, [c.to_bytes() for c in self._cts])

    def __reduce__(self):
        """Pickle through ``to_bytes`` plus the parameters' record (never the keys); unpickling attaches a live
        public context of the key set in the receiving process (one scattered to a Dask worker), else a
        :class:`DetachedBackend`. Plain-backend tensors pickle their slot vectors."""
        if isinstance(self._backend, PlainBackend):
            return type(self), (self._cts, self._layout, self._backend)
        params = self._backend.params if isinstance(self._backend, DetachedBackend) else self._backend.ctx.params
        return _tensor_from_pickle, (type(self), self.to_bytes(), params.to_bytes())

    @staticmethod
    def _read(blob) -> tuple[list, SlotLayout]:
        """(ciphertext records, layout) of a ``tensor_ops.CipherTensor`` record."""
        try:
            record = hezk.record.unpack(blob, RECORD_KIND)
            parts = [hezk.record.array_bytes(record, i, f"ciphertext {i}") for i in range(len(record.arrays))]
        except hezk.record.RecordError as error:
            raise SerializationError(f"not readable CipherTensor bytes: {error}") from None
        return parts, layout_from_header(record.meta, len(parts))

    @classmethod
    def from_bytes(cls, blob, ctx) -> "CipherTensorBase":
        """A CipherTensor from ``to_bytes`` output, for ``ctx`` (a public context is enough)."""
        parts, layout = cls._read(blob)
        backend = backend_of(ctx)
        _check_slots(layout, backend.slots)
        return cls([Ciphertext.from_bytes(p, ctx) for p in parts], layout, backend)

    # ------------------------------------------------------------------ free layout changes
    def transpose(self, *axes) -> "CipherTensorBase":
        """Permute the axes (no ciphertext work: the layout records the new order)."""
        if len(axes) == 1 and isinstance(axes[0], (tuple, list, type(None))):
            axes = tuple(axes[0]) if axes[0] is not None else ()
        if any(isinstance(a, bool) or not isinstance(a, (int, np.integer)) for a in axes):
            raise ShapeError(f"axes {axes!r} must be integers (a permutation of the {self.ndim} axes)")
        axes = tuple(range(self.ndim))[::-1] if not axes else tuple(int(a) for a in axes)
        if len(axes) != self.ndim or any(not -self.ndim <= a < self.ndim for a in axes) or \
                sorted(a % self.ndim for a in axes) != list(range(self.ndim)):
            raise ShapeError(f"axes {axes} are not a permutation of the {self.ndim} axes of shape {self.shape}")
        return type(self)(self._cts, self._layout.transpose([a % self.ndim for a in axes]), self._backend)

    @property
    def T(self) -> "CipherTensorBase":
        return self.transpose()

    def __getitem__(self, key) -> "CipherTensorBase":
        """Basic numpy indexing (ints, positive-step slices, None, ...): free, only the layout changes."""
        lay = self._layout.index_view(key)
        used = sorted({t.ct for t in lay.tiles})
        renumber = {ct: n for n, ct in enumerate(used)}
        tiles = tuple(replace(t, ct=renumber[t.ct]) for t in lay.tiles)
        return type(self)([self._cts[ct] for ct in used], replace(lay, tiles=tiles), self._backend)


def _header_int(value, what: str, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise SerializationError(f"CipherTensor layout header: {what}={value!r:.60} must be an integer in "
                                 f"[{lo}, {hi}]")
    return value


def _header_ints(value, what: str, lo: int, hi: int, length: int | None = None) -> tuple[int, ...]:
    if not isinstance(value, list) or (length is not None and len(value) != length) or len(value) > MAX_AXES:
        raise SerializationError(f"CipherTensor layout header: {what}={value!r:.60} must be a list of "
                                 f"{length if length is not None else f'at most {MAX_AXES}'} integers")
    return tuple(_header_int(v, f"{what}[{i}]", lo, hi) for i, v in enumerate(value))


def layout_from_header(head: dict, ciphertexts: int) -> SlotLayout:
    """The SlotLayout a CipherTensor record's meta describes, every field checked for its JSON type and range
    before use: slots a power of two up to ``MAX_SLOTS``, tiles naming ciphertexts 0 .. ``ciphertexts`` - 1,
    at most ``slots`` elements per tile and ``ciphertexts * slots`` in the tensor (so nothing that decrypting
    allocates is larger than the ciphertexts themselves), replica counts >= 1. Raises SerializationError."""
    keys = ("shape", "strides", "slots", "tiles", "replicas", "clean")
    if not isinstance(head, dict) or set(head) != set(keys):
        raise SerializationError(f"CipherTensor layout header must be an object with the keys {keys}")
    slots = _header_int(head["slots"], "slots", 1, MAX_SLOTS)
    shape = _header_ints(head["shape"], "shape", 1, slots * max(ciphertexts, 1))
    strides = _header_ints(head["strides"], "strides", -slots, slots, len(shape))
    if not isinstance(head["tiles"], list) or not 1 <= len(head["tiles"]) <= max(ciphertexts, 1) * slots:
        raise SerializationError(f"CipherTensor layout header: tiles must be a non-empty list")
    tiles = []
    for n, tile in enumerate(head["tiles"]):
        if not isinstance(tile, list) or len(tile) != 4:
            raise SerializationError(f"CipherTensor layout header: tiles[{n}]={tile!r:.60} must be [ct, start, size, "
                                     f"offset]")
        size = _header_ints(tile[2], f"tiles[{n}].size", 1, slots, len(shape))
        if math.prod(size) > slots:
            raise SerializationError(f"CipherTensor layout header: tiles[{n}] of size {list(size)} holds more than "
                                     f"slots={slots} elements")
        tiles.append(Tile(_header_int(tile[0], f"tiles[{n}].ct", 0, ciphertexts - 1),
                          _header_ints(tile[1], f"tiles[{n}].start", 0, slots * max(ciphertexts, 1), len(shape)),
                          size, _header_int(tile[3], f"tiles[{n}].offset", 0, slots - 1)))
    if math.prod(shape) > ciphertexts * slots:
        raise SerializationError(f"CipherTensor layout header: shape {list(shape)} holds more elements than "
                                 f"{ciphertexts} ciphertexts of {slots} slots")
    if not isinstance(head["replicas"], list) or len(head["replicas"]) > MAX_AXES:
        raise SerializationError("CipherTensor layout header: replicas must be a list of [count, stride] pairs")
    replicas = tuple(_header_ints(r, f"replicas[{i}]", -slots, slots, 2) for i, r in enumerate(head["replicas"]))
    if any(count < 1 for count, _ in replicas) or math.prod(count for count, _ in replicas) > slots:
        raise SerializationError(f"CipherTensor layout header: replica counts {[c for c, _ in replicas]} must be "
                                 f">= 1 and multiply to at most slots={slots}")
    if not isinstance(head["clean"], bool):
        raise SerializationError(f"CipherTensor layout header: clean={head['clean']!r:.20} must be a boolean")
    try:
        layout = SlotLayout(shape, strides, slots, tuple(tiles), replicas, head["clean"])
    except ShapeError as error:
        raise SerializationError(f"CipherTensor layout header describes no layout: {error}") from None
    if layout.n_ciphertexts != ciphertexts:
        raise SerializationError(f"CipherTensor layout header names {layout.n_ciphertexts} ciphertexts, the record "
                                 f"holds {ciphertexts}")
    return layout


def _check_slots(layout: SlotLayout, slots: int) -> None:
    if layout.slots != slots:
        raise SerializationError(f"CipherTensor layout has slots={layout.slots}, its context {slots}")


def _tensor_from_pickle(cls, blob, params_blob) -> CipherTensorBase:
    """Inverse of ``CipherTensorBase.__reduce__``."""
    parts, layout = cls._read(blob)
    params = parameters_from_bytes(params_blob)
    _check_slots(layout, params.slots)
    cts = [ciphertext_from_pickle(p, params_blob) for p in parts]
    key_id = cts[0].key_id if cts else b""
    ctx = live_public_context(key_id, params)
    return cls(cts, layout, DetachedBackend(params, key_id) if ctx is None else backend_of(ctx))


def check_same_backend(a: CipherTensorBase, b: CipherTensorBase):
    """ContextMismatchError unless ``a`` and ``b`` come from one key set (or plain backends of one slot count)."""
    if a.backend is not b.backend:
        pa, pb = getattr(a.backend, "ctx", None), getattr(b.backend, "ctx", None)
        same = pa is not None and pb is not None and getattr(pa, "key_id", 1) == getattr(pb, "key_id", 2)
        if not same and not (isinstance(a.backend, PlainBackend) and isinstance(b.backend, PlainBackend)
                             and a.backend.slots == b.backend.slots):
            raise ContextMismatchError("CipherTensors come from different contexts/backends (keys differ)")
    if a.layout.slots != b.layout.slots:
        raise ContextMismatchError(f"slot counts differ: {a.layout.slots} and {b.layout.slots}")


def run_plan(plan, operands) -> CipherTensorBase:
    """Execute ``plan`` (a Plan) on the backend of the encrypted operands, refusing too-deep plans first; the
    result is a tensor of the operands' class (a CipherTensor)."""
    tensors = [o for o in operands if isinstance(o, CipherTensorBase)]
    if len(operands) != len(plan.encrypted) or \
            any(isinstance(o, CipherTensorBase) != e for o, e in zip(operands, plan.encrypted)):
        raise ShapeError(f"plan expects operands encrypted={plan.encrypted}, got "
                         f"{tuple(isinstance(o, CipherTensorBase) for o in operands)}")
    for n, (o, lay) in enumerate(zip(operands, plan.input_layouts)):
        if isinstance(o, CipherTensorBase) and o.layout != lay:
            raise ShapeError(f"operand {n} has layout {o.layout.describe()}, the plan expects {lay.describe()}")
    be = tensors[0].backend
    refresh = getattr(be, "refresh_operands", None)  # a bootstrapping backend (tensor_ops.attention_plan)
    if refresh is not None:
        operands = refresh(plan, operands)
        tensors = [o for o in operands if isinstance(o, CipherTensorBase)]
    levels = [t.level for t in tensors]
    if None not in levels:
        plan.check_levels(min(levels))
    ops = [list(o.ciphertexts) if isinstance(o, CipherTensorBase) else np.asarray(o) for o in operands]
    regs = plan.run(be, ops)
    produced = getattr(be, "produced", None)  # a bootstrapping backend notes which plan made which ciphertexts
    if produced is not None:
        produced(regs)
    return type(tensors[0])(regs, plan.output_layout, be)
