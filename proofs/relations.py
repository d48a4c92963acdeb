"""Masked tensor stores and relation sumchecks: zero knowledge for chains of sumchecks (Libra, section 4.2).

A zero-knowledge sumcheck (:func:`proofs.zk.prove_zk_sumcheck`) hides its round messages, but it ends at a
random point sigma where the factors' values are stated; if those are multilinear-extension values of the
witness, each is a random linear functional of it. This module makes every stated value uniform.

**Masked extensions** (Chiesa-Forbes-Spooner 2017; Libra, Xie et al., CRYPTO 2019, section 4.2). A stored
tensor T has n_e *element* variables e and n_j *plane* variables j (bit planes of a decomposition; n_j = 0
for an ordinary tensor). Its committed masks l_i(j) (i < n_e, one F_p4 value per plane) define

    T^(e, j) = T~(e, j) + sum_(i < n_e) e_i (1 - e_i) l~_i(j)

which equals T on the Boolean cube, so any sum over the cube is unchanged, while off the cube the mask
term is a fresh uniform value: at a point with z_i = e_i (1 - e_i) != 0 (challenges avoid {0, 1} except
w.p. 2 / |F_p4| each), a value sum_j w(j) T^(e, j) carries the uniform mask sum_i z_i sum_j w(j) l_i(j).
m stated values of one tensor are jointly uniform when their mask functionals are linearly independent,
which holds w.h.p. for m <= n_e 2^(n_j) at random points; the protocols state at most a handful per tensor
and require n_e >= 4 (:data:`MIN_ELEMENT_VARS`); :func:`mask_rank` checks the condition on a real proof.

**Relations with public claims.** Claims are never passed from one sumcheck to the next (that would reveal
the intermediate value or need Libra's corrections): every relation between stored tensors is one
sumcheck whose claim is public (0, or a value of public data),

    sum_(x in {0,1}^n) sum_t c_t [x_(m_t..n-1) = 0] prod_(public P) P(x_(<m_t)) prod_(stored F) F^(x_(<m_t)) = claim,

a term t living on the first m_t variables (tensors of different sizes share one sumcheck). A stored
factor is a view of a tensor: some element variables contracted with public weights eq(tau, .) over the
cube (where their masks vanish, so the term still sums to the unmasked value), the planes contracted with
public weights or kept as variables; the remaining element variables are bound by the sumcheck, and their
masks make the factor's final value uniform.
The sumcheck ends at sigma; the prover states every stored factor's value (uniform, masked), the verifier
checks the summand and records each value as a linear functional of its store, opened at the end by one
hiding opening per store (:func:`proofs.zk.open_functionals`: only the values are revealed).

What the verifier sees is therefore simulatable: hiding commitments, ZK sumchecks (Libra theorem 3, from
the public claim and the final summand), and stated values that are uniform subject to the one checked
relation per sumcheck. Soundness: a sumcheck of degree d over n variables errs w.p. n d / |F_p4|, its mask
1 / |F_p4|, each opening 2^-(commitment bits); the store binds T and l, and T^ restricted to the cube is
T, so a relation that holds for T^ at a random point holds for T on the cube except w.p. (Schwartz-Zippel)
n / |F_p4| for the random point of each zero check.
Assumptions: as :mod:`proofs.zk` (BLAKE2b a random oracle; honest-verifier ZK made non-interactive by
Fiat-Shamir). Without hiding (``params.hiding=False``) the same code runs with no masks: the plain baseline.
"""
from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass

import numpy as np

from . import field as F
from .errors import ProofError
from .layers.packing import Packing
from .mle import bind_high, eq_eval, eq_table, fold, is_ext, mle_evaluate
from .zk import BlockWeights, EqWeights, HidingCommitment, HidingParams, hiding_commit

MIN_ELEMENT_VARS = 4  #: a masked tensor has >= 4 element variables (>= 4 independent mask values per plane)


def zeta(point) -> np.ndarray:
    """z_i = p_i (1 - p_i) for a point (k, 4): the mask weight of each variable (0 on Boolean values)."""
    point = np.asarray(point, dtype=np.uint64).reshape(-1, F.EXT_DEGREE)
    return F.ext_mul(point, F.ext_sub(F.ext_one(point.shape[:1]), point))


def _ext(table) -> np.ndarray:
    return table if is_ext(table) else F.ext_from_base(table)


# ---------------------------------------------------------------------------------------------- stores
@dataclass(frozen=True)
class Slot:
    """A stored tensor: ``elem_vars`` element variables (low) and ``plane_vars`` plane variables (high).
    ``box``: the tensor's (real length, padded bits) per axis, lowest variables first, when every entry
    outside that box is zero in an honest table (its layout then commits the box's power-of-two pieces only:
    :func:`slot_pieces`, :attr:`StoreLayout.blocks`); empty: stored whole."""

    name: str
    elem_vars: int
    plane_vars: int = 0
    box: tuple = ()

    @property
    def size(self) -> int:
        return 1 << (self.elem_vars + self.plane_vars)

    @property
    def mask_count(self) -> int:
        """Base-field mask coefficients: one F_p4 value per (element variable, plane)."""
        return self.elem_vars * (1 << self.plane_vars) * F.EXT_DEGREE


#: the most pieces a slot's box is cut into (the product over its axes): each piece is one more term of every view
MAX_SLOT_PIECES = 8
#: the most pieces of one axis
MAX_AXIS_PIECES = 3


def axis_pieces(real: int, bits: int, most: int = 2) -> tuple:
    """(start, free bits) of at most ``most`` ranges covering [0, real) of an axis of 2^bits entries: the binary
    digits of ``real`` from the top, the last range the smallest power of two over what is left (768 = 512 + 256,
    784 = 512 + 256 + 16, 12 -> 8 + 4); the smallest power-of-two range from 0 when cutting saves nothing."""
    k = (real - 1).bit_length()  # the entries lie in [0, 2^k)
    out, start, left = [], 0, real
    while len(out) < most - 1 and left & (left - 1):  # a digit, while what is left is not a power of two
        top = 1 << (left.bit_length() - 1)
        out.append((start, top.bit_length() - 1))
        start, left = start + top, left - top
    out.append((start, (left - 1).bit_length()))
    return ((0, k),) if sum(1 << free for _, free in out) >= 1 << k else tuple(out)


def slot_pieces(slot: Slot) -> tuple:
    """(None,) for a slot stored whole; else its box's pieces, the product of its axes' ranges
    (:func:`axis_pieces`), each piece a tuple per axis (lowest first) of (start, free bits, axis bits): the
    entries whose axis index lies in [start, start + 2^free) on every axis (element variables past the box's
    axes are one axis of real length 1). Axes are cut greedily, the largest saving of entries first, while the
    pieces stay at most MAX_SLOT_PIECES (MAX_AXIS_PIECES an axis)."""
    if not slot.box:
        return (None,)
    axes = list(slot.box)
    extra = slot.elem_vars - sum(bits for _, bits in axes)
    if extra:
        axes.append((1, extra))
    counts = [1] * len(axes)

    def ranges(i, most):
        return axis_pieces(*axes[i], most=most)

    def entries(option):
        return math.prod(sum(1 << free for _, free in ranges(i, most)) for i, most in enumerate(option))

    while True:  # an axis to cut into more ranges (2 may save nothing where 3 do: 784 = 512 + 256 + 16)
        options = [counts[:i] + [more] + counts[i + 1:] for i in range(len(axes))
                   for more in range(counts[i] + 1, MAX_AXIS_PIECES + 1)
                   if math.prod(counts) // counts[i] * more <= MAX_SLOT_PIECES]
        best = min(options, key=lambda option: (entries(option), math.prod(option)), default=None)
        if best is None or entries(best) >= entries(counts):
            break
        counts = best
    per_axis = [ranges(i, most) for i, most in enumerate(counts)]
    if all(r == ((0, bits),) for r, (_, bits) in zip(per_axis, axes)):
        return (None,)
    return tuple(tuple((start, free, bits) for (start, free), (_, bits) in zip(combo, axes))
                 for combo in itertools.product(*per_axis))


def piece_size(slot: Slot, piece) -> int:
    """Entries of a piece of the slot (its planes included; the whole slot for None)."""
    return slot.size if piece is None else 1 << (sum(free for _, free, _ in piece) + slot.plane_vars)


def piece_point(e: np.ndarray, piece) -> tuple:
    """(the piece's element point, eq of the point's fixed coordinates with the piece's start): T~(e) = sum over
    the pieces of factor x piece~(point) for a table zero outside its pieces (eq factorizes over the variables;
    a piece's start fixes the axis's top bits). The whole point and one for None."""
    if piece is None:
        return e, F.ext_one()
    parts, factor, position = [], F.ext_one(), 0
    for start, free, bits in piece:
        parts.append(e[position:position + free])
        for b in range(free, bits):
            x = e[position + b]
            factor = F.ext_mul(factor, x if (start >> b) & 1 else F.ext_sub(F.ext_one(), x))
        position += bits
    return np.concatenate(parts) if parts else F.ext_zero((0,)), factor


def piece_table(table: np.ndarray, slot: Slot, piece) -> np.ndarray:
    """The piece's entries of a slot's (planes-major) table, in the piece's own order (planes high)."""
    if piece is None:
        return table
    shape = [1 << slot.plane_vars] + [1 << bits for _, _, bits in reversed(piece)]
    index = (slice(None),) + tuple(slice(start, start + (1 << free)) for start, free, _ in reversed(piece))
    return np.ascontiguousarray(table.reshape(shape)[index]).reshape(-1)


def check_box(slot: Slot, table: np.ndarray, kept: int) -> None:
    """ProofError unless the ``kept`` nonzero entries of the slot's pieces are all of its table's (an honest
    table is zero outside its box: the prover's own check; a table that is not would be committed without those
    entries, and its stated values would then miss the commitment's)."""
    if kept != np.count_nonzero(table):
        raise ProofError(f"store slot {slot.name}: nonzero entries outside its box {slot.box}")


@dataclass(frozen=True)
class StoreLayout:
    """Tensors packed into one committed table (:class:`~proofs.layers.packing.Packing`), followed by the
    block of their masks when ``hiding``: each slot whole, or the power-of-two pieces of its box
    (:func:`slot_pieces`: the zero padding of a tensor padded per axis is not committed). Public: prover and
    verifier build the same layout."""

    slots: tuple
    hiding: bool

    def __post_init__(self):
        names = [s.name for s in self.slots]
        if not self.slots or len(set(names)) != len(names):
            raise ProofError(f"store layout: slot names {names} must be non-empty and distinct")
        for s in self.slots:
            if s.elem_vars < MIN_ELEMENT_VARS or s.plane_vars < 0:
                raise ProofError(f"store layout: slot {s.name} has {s.elem_vars} element variables "
                                 f"(at least {MIN_ELEMENT_VARS}) and {s.plane_vars} plane variables")
            if sum(bits for _, bits in s.box) > s.elem_vars or any(not 1 <= real <= 1 << bits for real, bits in s.box):
                raise ProofError(f"store layout: slot {s.name}'s box {s.box} does not fit its {s.elem_vars} element "
                                 "variables (each axis 1 <= real length <= 2^bits)")

    @property
    def mask_total(self) -> int:
        return sum(s.mask_count for s in self.slots) if self.hiding else 0

    @functools.cached_property
    def blocks(self) -> tuple:
        """((key, length), ...): each slot's pieces ("slot", name, i) (i = 0 the whole slot when uncut), then
        (hiding) each slot's mask block ("mask", name) padded to a power of two."""
        out = [(("slot", s.name, i), piece_size(s, piece)) for s in self.slots
               for i, piece in enumerate(self.pieces(s.name))]
        if self.hiding:
            out += [(("mask", s.name), 1 << (s.mask_count - 1).bit_length()) for s in self.slots]
        return tuple(out)

    @functools.cached_property
    def packing(self) -> Packing:
        """The blocks (:attr:`blocks`), aligned to their size, so a block no wider than a matrix row lies in one
        row (one extra piece per opened value); computed once (the layout is immutable)."""
        return Packing(tuple(length for _, length in self.blocks))

    @functools.cached_property
    def _offsets(self) -> dict:
        return {key: offset for (key, _), offset in zip(self.blocks, self.packing.offsets)}

    @property
    def num_vars(self) -> int:
        return self.packing.num_vars

    def slot(self, name: str) -> Slot:
        for s in self.slots:
            if s.name == name:
                return s
        raise ProofError(f"store layout: no slot {name!r}")

    @functools.cached_property
    def _pieces(self) -> dict:
        return {s.name: slot_pieces(s) for s in self.slots}

    def pieces(self, name: str) -> tuple:
        """The slot's pieces (:func:`slot_pieces`), computed once per layout."""
        if name not in self._pieces:
            raise ProofError(f"store layout: no slot {name!r}")
        return self._pieces[name]

    def block_offset(self, key) -> int:
        return self._offsets[key]

    def offset(self, name: str) -> int:
        """Where the slot (its first piece when cut) starts in the committed table."""
        return self.block_offset(("slot", name, 0))

    def mask_offset(self, name: str) -> int:
        """Where the slot's masks start in the committed table (hiding layouts only)."""
        return self.block_offset(("mask", name))


def pack_store(layout: StoreLayout, tables: dict, masks: dict, out: np.ndarray | None = None) -> np.ndarray:
    """The committed table of ``layout`` (into ``out`` when given, of 2^num_vars zeros): each slot's table
    (name -> planes-major table; its pieces when cut) and (hiding) its mask coefficients at their offsets.
    ProofError when a cut table is not zero outside its box (:func:`check_box`)."""
    table = np.zeros(1 << layout.num_vars, dtype=np.uint64) if out is None else out
    for s in layout.slots:
        full, pieces, kept = tables[s.name], layout.pieces(s.name), 0
        for i, piece in enumerate(pieces):
            part = piece_table(full, s, piece)
            if piece is not None:
                kept += int(np.count_nonzero(part))
            offset = layout.block_offset(("slot", s.name, i))
            table[offset:offset + part.size] = part
        if pieces != (None,):
            check_box(s, full, kept)
        if layout.hiding:
            block = np.asarray(masks[s.name], dtype=np.uint64).reshape(-1)
            offset = layout.mask_offset(s.name)
            table[offset:offset + block.size] = block
    return table


@dataclass(frozen=True, eq=False)
class StoreWitness:
    """The prover's side of a store: tables (name -> base (2^n_j * 2^n_e,), plane-major), masks
    (name -> (n_e, 2^n_j, 4) ext; None without hiding) and the commitment witness."""

    layout: StoreLayout
    tables: dict
    masks: dict
    commitment_witness: object

    @property
    def commitment(self) -> HidingCommitment:
        return self.commitment_witness.commitment


def commit_store(layout: StoreLayout, tables: dict, params: HidingParams, seed=None, log_rows=None):
    """Commit to ``tables`` (name -> base-field values, zero-padded to the slot) with fresh masks.

    Returns (HidingCommitment, StoreWitness). ``log_rows`` overrides the matrix layout (:func:`proofs.zk.hiding_commit`);
    ``seed``: tests only (masks, tails and salts reproducible).
    """
    if params.hiding != layout.hiding:
        raise ProofError(f"commit_store: params.hiding={params.hiding}, layout.hiding={layout.hiding}")
    rng = None if seed is None else np.random.default_rng(seed)
    packed, full, masks = packed_store(layout, tables, rng)
    commitment, witness = hiding_commit(packed, params, log_rows=log_rows,
                                        seed=None if rng is None else int(rng.integers(1 << 62)))
    return commitment, StoreWitness(layout, full, masks if layout.hiding else None, witness)


def store_tables(layout: StoreLayout, tables: dict, rng=None):
    """(name -> zero-padded table, name -> masks (n_e, 2^n_j, 4); empty without hiding) with fresh masks
    (``rng``: tests only), the tables checked against their slots."""
    full, masks = {}, {}
    for s in layout.slots:
        values = np.asarray(tables[s.name])
        if values.dtype != np.uint64 or values.ndim != 1 or values.size > s.size or not F.is_canonical(values):
            raise ProofError(f"commit_store: table {s.name} must be at most {s.size} canonical field elements, "
                             f"got {values.dtype} {values.shape}")
        table = np.zeros(s.size, dtype=np.uint64)
        table[:values.size] = values
        full[s.name] = table
        if layout.hiding:
            coefficients = F.random_elements(s.mask_count) if rng is None else \
                rng.integers(0, F.P, size=s.mask_count, dtype=np.uint64)
            masks[s.name] = coefficients.reshape(s.elem_vars, 1 << s.plane_vars, F.EXT_DEGREE)
    return full, masks


def packed_store(layout: StoreLayout, tables: dict, rng=None):
    """(packed table, name -> zero-padded table, name -> masks (n_e, 2^n_j, 4)) with fresh masks (``rng``:
    tests only): what :func:`commit_store` commits."""
    full, masks = store_tables(layout, tables, rng)
    return pack_store(layout, full, masks), full, masks


# ----------------------------------------------------------------------------------------------- views
@dataclass(frozen=True, eq=False)
class View:
    """A value of a stored tensor: sum_j w(j) [T~(e, j) + sum_(i active) z_i(e) l~_i(j)] at the element point
    ``e`` ((n_e, 4)), plane weights ``w`` ((2^n_j, 4); None without planes) and the element variables
    ``active`` in [lo, hi) (by default all). Variables outside were contracted with public weights over the
    cube (where their masks vanish); active ones were bound by the sumcheck."""

    name: str
    e: np.ndarray
    w: object = None
    active: tuple = None

    def mask_weights(self, slot: Slot) -> np.ndarray:
        """z_i(e) on the active element variables, 0 elsewhere: (n_e, 4)."""
        z = zeta(self.e)
        lo, hi = (0, slot.elem_vars) if self.active is None else self.active
        z[:lo] = 0
        z[hi:] = 0
        return z


def _plane_weights(slot: Slot, view: View) -> np.ndarray:
    if view.w is None and slot.plane_vars == 0:
        return F.ext_one((1,))
    w = np.asarray(view.w, dtype=np.uint64)
    if w.shape != (1 << slot.plane_vars, F.EXT_DEGREE):
        raise ProofError(f"view of {slot.name}: plane weights of shape {w.shape}, expected "
                         f"({1 << slot.plane_vars}, 4)")
    return w


def _unit_weights(weights) -> np.ndarray:
    """The weights of the 4 base coefficients of an F_p4 value v = sum_k v_k u^k, times each weight: (m * 4, 4)."""
    units = np.eye(F.EXT_DEGREE, dtype=np.uint64)
    return F.ext_mul(weights[:, None, :], units[None, :, :]).reshape(-1, F.EXT_DEGREE)


def _dense_pieces(start: int, weights, rows: int, cols: int) -> list:
    """Pieces (one per matrix row touched) of the functional with ``weights`` at table positions start...."""
    pieces, position, end = [], start, start + weights.shape[0]
    while position < end:
        row, col = divmod(position, cols)
        take = min(cols - col, end - position)
        row_weights = F.ext_zero((rows,))
        row_weights[row] = F.ext_one()
        pieces.append((row_weights, BlockWeights(col, weights[position - start:position - start + take], cols)))
        position += take
    return pieces


def view_pieces(layout: StoreLayout, commitment: HidingCommitment, view: View) -> list:
    """The view's value as pieces (row weights, column weights) of one linear functional of the store."""
    slot = layout.slot(view.name)
    e = np.asarray(view.e, dtype=np.uint64).reshape(-1, F.EXT_DEGREE)
    if e.shape[0] != slot.elem_vars:
        raise ProofError(f"view of {slot.name}: element point of {e.shape[0]} variables, expected {slot.elem_vars}")
    w = _plane_weights(slot, view)
    rows, b = 1 << commitment.log_rows, commitment.log_cols
    cols, pieces = 1 << b, []
    for i, piece in enumerate(layout.pieces(view.name)):  # the slot's value: the sum of its pieces' values
        point, factor = piece_point(e, piece)
        scaled, offset = F.ext_mul(w, factor[None, :]), layout.block_offset(("slot", view.name, i))
        if point.shape[0] >= b:  # columns hold low element variables only: one product piece
            row_weights = F.ext_zero((rows,))
            block = F.ext_mul(scaled[:, None, :], eq_table(point[b:])[None, :, :]).reshape(-1, F.EXT_DEGREE)
            row_weights[offset >> b:(offset >> b) + block.shape[0]] = block
            pieces.append((row_weights, EqWeights(point[:b])))  # its MLE at a point: eq(e_low, point), O(b)
        else:
            dense = F.ext_mul(scaled[:, None, :], eq_table(point)[None, :, :]).reshape(-1, F.EXT_DEGREE)
            pieces += _dense_pieces(offset, dense, rows, cols)
    if layout.hiding:
        mask_weights = F.ext_mul(view.mask_weights(slot)[:, None, :], w[None, :, :]).reshape(-1, F.EXT_DEGREE)
        pieces += _dense_pieces(layout.mask_offset(view.name), _unit_weights(mask_weights), rows, cols)
    return pieces


def view_value(witness: StoreWitness, view: View) -> np.ndarray:
    """The view's value computed from the witness (what its opening reveals)."""
    slot = witness.layout.slot(view.name)
    e = np.asarray(view.e, dtype=np.uint64).reshape(-1, F.EXT_DEGREE)
    w = _plane_weights(slot, view)
    table = witness.tables[view.name].reshape(1 << slot.plane_vars, 1 << slot.elem_vars)
    contracted = F.matmul(table.T, w)
    value = mle_evaluate(contracted, e)
    if witness.masks is not None:
        mask = F.ext_sum(F.ext_mul(witness.masks[view.name], w[None, :, :]), axis=1)  # (n_e, 4)
        value = F.ext_add(value, F.ext_sum(F.ext_mul(view.mask_weights(slot), mask), axis=0))
    return value


# --------------------------------------------------------------------------------------------- factors
@dataclass(frozen=True, eq=False)
class Stored:
    """A sumcheck factor that is a view of a stored tensor: element variables ``low`` (the lowest ones) or
    ``high`` (the highest) fixed at a public point, planes contracted with ``planes`` weights or kept as
    the highest sumcheck variables (``planes=None``). Remaining variables: element ones, then planes."""

    store: str
    name: str
    low: object = None
    high: object = None
    planes: object = None

    def num_vars(self, slot: Slot) -> int:
        return self.elem_remaining(slot) + (slot.plane_vars if self.planes is None else 0)

    def elem_remaining(self, slot: Slot) -> int:
        fixed = sum(0 if p is None else np.asarray(p).reshape(-1, F.EXT_DEGREE).shape[0] for p in (self.low, self.high))
        return slot.elem_vars - fixed

    def view_at(self, slot: Slot, sigma) -> View:
        """The View whose value is this factor at the sumcheck point ``sigma`` (its first num_vars coordinates)."""
        r = self.elem_remaining(slot)
        parts = [p for p in (self.low, sigma[:r], self.high) if p is not None]
        e = np.concatenate([np.asarray(p, dtype=np.uint64).reshape(-1, F.EXT_DEGREE) for p in parts])
        lo = 0 if self.low is None else np.asarray(self.low).reshape(-1, F.EXT_DEGREE).shape[0]
        w = self.planes
        if w is None and slot.plane_vars:
            w = eq_table(sigma[r:r + slot.plane_vars])
        return View(self.name, e, w, (lo, lo + r))


@dataclass(frozen=True, eq=False)
class Public:
    """A public sumcheck factor: ``table()`` (prover, 2^m entries) and ``at(point)`` (verifier, its MLE)."""

    table: object
    at: object


def eq_factor(point) -> Public:
    point = np.asarray(point, dtype=np.uint64).reshape(-1, F.EXT_DEGREE)
    return Public(lambda: eq_table(point), lambda sigma: eq_eval(point, sigma[:point.shape[0]]))


def table_factor(table) -> Public:
    """A public factor given by its (small or cheap) table; the verifier evaluates the MLE itself."""
    return Public(lambda: table, lambda sigma: mle_evaluate(table, sigma[:int(table.shape[0]).bit_length() - 1]))


def _prefix_sum(w0, w1, count: int) -> np.ndarray:
    """sum_(i < count) prod_b w_(i_b)[b] for per-bit weights w0, w1 (k, 4), in O(k). Splitting on the top bit b:
    S_n = w0_b Full_(<b) + w1_b S'_(n - 2^b) when bit b of n is set, else w0_b S'_n, with
    Full_(<b) = prod_(c < b) (w0_c + w1_c)."""
    k = w0.shape[0]
    full = [F.ext_one()]
    for b in range(k):
        full.append(F.ext_mul(full[-1], F.ext_add(w0[b], w1[b])))
    if count >= 1 << k:
        return full[k]
    total, prefix = F.ext_zero(), F.ext_one()
    for b in range(k - 1, -1, -1):
        if (count >> b) & 1:
            total = F.ext_add(total, F.ext_mul(prefix, F.ext_mul(w0[b], full[b])))
            prefix = F.ext_mul(prefix, w1[b])
        else:
            prefix = F.ext_mul(prefix, w0[b])
    return total


def _box_sum(w0, w1, extents, log_sizes) -> np.ndarray:
    """sum over the box of prod_b w_(x_b)[b]: a product over the axes (each a run of bits) of :func:`_prefix_sum`."""
    value, start = F.ext_one(), 0
    for extent, k in zip(extents, log_sizes):
        value = F.ext_mul(value, _prefix_sum(w0[start:start + k], w1[start:start + k], extent))
        start += k
    return value


def prefix_indicator(point, count: int) -> np.ndarray:
    """sum_(i < count) eq(point, i) at ``point`` (k, 4), in O(k): the MLE of [index < count] on {0,1}^k."""
    point = np.asarray(point, dtype=np.uint64).reshape(-1, F.EXT_DEGREE)
    return _prefix_sum(F.ext_sub(F.ext_one(point.shape[:1]), point), point, count)


def box_indicator(point, extents, log_sizes) -> np.ndarray:
    """The MLE at ``point`` of the box indicator prod_a [coordinate_a < extents[a]] of a table whose axes, lowest
    first, take ``log_sizes[a]`` variables each: a product of :func:`prefix_indicator`, O(sum log_sizes)."""
    point = np.asarray(point, dtype=np.uint64).reshape(-1, F.EXT_DEGREE)
    return _box_sum(F.ext_sub(F.ext_one(point.shape[:1]), point), point, extents, log_sizes)


def box_table(extents, log_sizes) -> np.ndarray:
    """The box indicator as a base table of 0/1 (axis 0 lowest: index = sum_a coordinate_a 2^(sum_(b < a) k_b))."""
    table = np.ones(1, dtype=np.uint64)
    for extent, k in zip(extents, log_sizes):
        table = np.kron((np.arange(1 << k) < extent).astype(np.uint64), table)
    return table


def padding_factor(tau, extents, log_sizes) -> Public:
    """P(x) = eq(tau, x) (1 - box(x)) for a tensor declared on the box ``extents`` and padded to 2^(log_sizes):
    a term gamma P(x) T(x) joined to a relation sum_x eq(tau, x) R(x) = 0 with gamma random forces R = 0 on the
    cube and T = 0 off the box (Schwartz-Zippel in tau and gamma: error (n + 1) / |F|).

    One multilinear factor (degree 1): its MLE at sigma is eq(tau, sigma) - sum_(x in box) eq(sigma, x) eq(tau, x),
    and eq(sigma, x) eq(tau, x) = prod_b w_(x_b)[b] with w1 = sigma tau, w0 = (1 - sigma)(1 - tau), so the
    verifier's value is O(n) (:func:`_box_sum`)."""
    tau = np.asarray(tau, dtype=np.uint64).reshape(-1, F.EXT_DEGREE)
    n = tau.shape[0]
    if sum(log_sizes) != n or len(extents) != len(log_sizes) or \
            any(not 0 <= e <= 1 << k for e, k in zip(extents, log_sizes)):
        raise ProofError(f"padding factor: box {tuple(extents)} in 2^{tuple(log_sizes)} for a point of {n} variables")

    def table():
        outside = np.uint64(1) - box_table(extents, log_sizes)
        return F.ext_mul_base(eq_table(tau), outside)

    def at(sigma):
        x = np.asarray(sigma, dtype=np.uint64).reshape(-1, F.EXT_DEGREE)[:n]
        one = F.ext_one((n,))
        w0 = F.ext_mul(F.ext_sub(one, x), F.ext_sub(one, tau))
        return F.ext_sub(eq_eval(tau, x), _box_sum(w0, F.ext_mul(x, tau), extents, log_sizes))

    return Public(table, at)


@dataclass(frozen=True, eq=False)
class Term:
    """c * [x_(m..n-1) = 0] * prod publics * prod (stored + offset), on the first m = the factors' variables.
    ``offsets``: per stored factor an F_p4 constant added to it, or None (empty: none); an affine factor
    (beta + v) is then one factor of the product, not two terms (the stated value is the stored factor's own)."""

    coefficient: object
    publics: tuple = ()
    stored: tuple = ()
    num_vars: int = 0
    offsets: tuple = ()

    def __post_init__(self):
        # the checks zip offsets with the stored factors: a shorter tuple would drop factors from the product
        if self.offsets and len(self.offsets) != len(self.stored):
            raise ProofError(f"Term: {len(self.offsets)} offsets for {len(self.stored)} stored factors (give one "
                             f"per stored factor, None where there is none, or no offsets)")


@dataclass(frozen=True, eq=False)
class BitTerm:
    """c * eq(tau, x) F^(x) (1 - F^(x)) on the first m = len(tau) variables: zero over the cube iff every entry
    of F is a bit (for tau random, Schwartz-Zippel). ``factor`` is a stored factor with m variables."""

    coefficient: object
    tau: np.ndarray
    factor: Stored

    @property
    def num_vars(self) -> int:
        return self.tau.shape[0]

    @property
    def publics(self) -> tuple:
        return ()

    @property
    def stored(self) -> tuple:
        return (self.factor,)


@dataclass(frozen=True, eq=False)
class Relation:
    """A relation sumcheck's public description: terms and the claim (the sum over the cube)."""

    terms: tuple
    claim: object

    def num_vars(self) -> int:
        return max(t.num_vars for t in self.terms)

    def degree(self, layouts: dict) -> int:
        """Per-round degree: 1 per public factor, 2 per stored factor with masked element variables left."""
        def factor_degree(f):
            slot = layouts[f.store].slot(f.name)
            return 2 if layouts[f.store].hiding and f.elem_remaining(slot) else 1
        return max(1, max((1 + 2 * factor_degree(t.factor)) if isinstance(t, BitTerm) else
                          len(t.publics) + sum(factor_degree(f) for f in t.stored) for t in self.terms))


def check_relation(relation: Relation, layouts: dict) -> None:
    """Every stored factor of a term has the term's number of variables (a programming error otherwise)."""
    for k, term in enumerate(relation.terms):
        for f in term.stored:
            if f.num_vars(layouts[f.store].slot(f.name)) != term.num_vars:
                raise ProofError(f"relation term {k}: factor {f.name} has "
                                 f"{f.num_vars(layouts[f.store].slot(f.name))} variables, the term {term.num_vars}")


# ---------------------------------------------------------------------------------------------- prover
class _MaskedState:
    """A stored factor on the prover's side: the table over its remaining variables (planes contracted or kept,
    fixed element variables contracted with eq weights, their masks dropped) and the masks l_i of its remaining
    element variables ((r, 2^k, 4)); binding element variable i adds z(r_i) l_i to every entry of its plane."""

    def __init__(self, factor: Stored, witness: StoreWitness):
        slot = witness.layout.slot(factor.name)
        table = witness.tables[factor.name].reshape(1 << slot.plane_vars, 1 << slot.elem_vars)
        masks = None if witness.masks is None else witness.masks[factor.name]  # (n_e, 2^n_j, 4)
        if factor.planes is not None:
            w = np.asarray(factor.planes, dtype=np.uint64)
            table = F.matmul(table.T, w)[None]  # (1, 2^n_e, 4)
            if masks is not None:
                masks = F.ext_sum(F.ext_mul(masks, w[None, :, :]), axis=1)[:, None, :]
        if factor.low is not None:  # contracted with eq(low) over the cube: those variables' masks drop out
            low = np.asarray(factor.low, dtype=np.uint64).reshape(-1, F.EXT_DEGREE)
            table = _contract_low(table, low)
            masks = None if masks is None else masks[low.shape[0]:]
        if factor.high is not None:
            high = np.asarray(factor.high, dtype=np.uint64).reshape(-1, F.EXT_DEGREE)
            if table.shape[0] != 1:
                raise ProofError(f"factor {factor.name}: fixing high element variables needs contracted planes")
            table = bind_high(table[0], high)[None]
            masks = None if masks is None else masks[:masks.shape[0] - high.shape[0]]
        self.table = table.reshape((-1,) + table.shape[2:])  # plane-major, element variables low
        self.masks = masks if masks is not None and masks.shape[0] else None
        self.bound = 0
        self._owned = False  # self.table is the caller's until the first bind, then this state's own (folded in place)

    def mask_now(self):
        """(2^k, 4) masks of the variable bound this round, or None (no masks, or planes reached)."""
        if self.masks is None or self.bound >= self.masks.shape[0]:
            return None
        return self.masks[self.bound]

    def bind(self, r) -> None:
        mask = self.mask_now()
        kernels = F.numba_kernels() if mask is not None and self.table.shape[0] >= F.KERNEL_MIN_SIZE else None
        inside = self._owned and self.table.ndim == 2 and self.table.flags.c_contiguous
        if kernels is not None:  # fold and add z(r) l_j in one pass (into its own first half: it reads 2j, 2j + 1
            half = self.table.shape[0] // 2  # before it writes j)
            out = self.table[:half] if inside else np.empty((half, F.EXT_DEGREE), dtype=np.uint64)
            kernels.fold_add_planes(np.ascontiguousarray(self.table), np.ascontiguousarray(r),
                                    np.ascontiguousarray(F.ext_mul(mask, zeta(r)[0][None, :])), out)
            self.table = out
        else:
            self.table = fold(self.table, r, in_place=inside)
            if mask is not None:
                self.table = _add_planes(self.table, F.ext_mul(mask, zeta(r)[0][None, :]))
        self._owned = True
        self.bound += 1


def _add_planes(table, values) -> np.ndarray:
    """table (plane-major, (n,) or (n, 4)) + values[plane] ((P, 4)), broadcast over each plane's entries."""
    table = _ext(table)
    kernels = F.numba_kernels() if table.shape[0] >= F.KERNEL_MIN_SIZE else None
    if kernels is not None:
        out = np.empty_like(table)
        kernels.add_plane_constants(np.ascontiguousarray(table), np.ascontiguousarray(values), out)
        return out
    shaped = table.reshape(values.shape[0], -1, F.EXT_DEGREE)
    return F.ext_add(shaped, values[:, None, :]).reshape(-1, F.EXT_DEGREE)


def _contract_low(table, point) -> np.ndarray:
    """(planes, 2^n, [4]) -> (planes, 2^(n-f), 4): the lowest f element variables bound to ``point``."""
    f = point.shape[0]
    planes = table.shape[0]
    if table.ndim == 3:
        shaped = table.reshape(-1, 1 << f, F.EXT_DEGREE)
        return F.ext_sum(F.ext_mul(shaped, eq_table(point)[None]), axis=1).reshape(planes, -1, F.EXT_DEGREE)
    return F.matmul(table.reshape(-1, 1 << f), eq_table(point)).reshape(planes, -1, F.EXT_DEGREE)


def _lines(table, degree: int) -> list:
    """The table restricted to x_0 = X for X = 0..degree (each of half length)."""
    low, high = np.ascontiguousarray(table[0::2]), np.ascontiguousarray(table[1::2])
    diff = F.sub(high, low)
    values = [low]
    for _ in range(degree):
        values.append(F.add(values[-1], diff))
    return values


def _sum_product(arrays) -> np.ndarray:
    product = arrays[0]
    for a in arrays[1:]:
        if is_ext(product) and is_ext(a):
            product = F.ext_mul(product, a)
        elif is_ext(product):
            product = F.ext_mul_base(product, a)
        elif is_ext(a):
            product = F.ext_mul_base(a, product)
        else:
            product = F.mul(product, a)
    return F.ext_sum(product, axis=0) if is_ext(product) else F.ext_from_base(F.sum_(product))


def _shifted(factors, publics: int, offsets) -> list:
    """The (table, mask) factors with each stored factor's offset added to its table (the mask is unchanged: the
    line of table + c is the table's line + c)."""
    if not offsets or all(c is None for c in offsets):
        return factors
    out = list(factors)
    for k, c in enumerate(offsets):
        if c is not None:
            table, mask = out[publics + k]
            out[publics + k] = (F.ext_add(_ext(table), np.asarray(c, dtype=np.uint64)[None, :]), mask)
    return out


class RelationProver:
    """Sumcheck prover of a :class:`Relation` (the :class:`proofs.sumcheck.SumcheckProver` interface).

    Factors are shared between terms by identity (a stored factor used twice is folded once). Long tables go
    through one numba pass per term (``_kernels.masked_round_sums``); short ones through numpy (the twin).
    """

    def __init__(self, relation: Relation, witnesses: dict, layouts: dict, fused: bool = True):
        check_relation(relation, layouts)
        self.num_vars = relation.num_vars()
        self.degree = relation.degree(layouts)
        self.challenges = []
        self._fused = fused
        self._publics, self._states = {}, {}
        self._owned_publics = set()  # public tables folded at least once: this prover's own, folded in place
        for term in relation.terms:
            for p in term.publics:
                if id(p) not in self._publics:
                    self._publics[id(p)] = np.asarray(p.table(), dtype=np.uint64)
            for f in term.stored:
                if id(f) not in self._states:
                    self._states[id(f)] = _MaskedState(f, witnesses[f.store])
        self._terms = [(term, [id(p) for p in term.publics], [id(f) for f in term.stored]) for term in relation.terms]
        self._tails = [F.ext_one() for _ in relation.terms]  # prod (1 - r_i) over the rounds past a term's m

    def _factors(self, public_ids, state_ids):
        """(table, mask this round or None) of every factor of a term."""
        return [(self._publics[i], None) for i in public_ids] + \
            [(self._states[i].table, self._states[i].mask_now()) for i in state_ids]

    def round_message(self) -> np.ndarray:
        j, d = len(self.challenges), self.degree
        message = F.ext_zero((d + 1,))
        for (term, public_ids, state_ids), tail in zip(self._terms, self._tails):
            coefficient = np.asarray(term.coefficient, dtype=np.uint64)
            factors = _shifted(self._factors(public_ids, state_ids), len(public_ids), getattr(term, "offsets", ()))
            if j >= term.num_vars:  # the term is a constant times eq(0, x_j)
                value = F.ext_mul(F.ext_mul(coefficient, tail), self._final_product(factors, term))
                message[0] = F.ext_add(message[0], value)
                for x in range(2, d + 1):  # (1 - X) at X = x
                    message[x] = F.ext_sub(message[x], F.ext_mul_base(value, F.to_field(np.array([x - 1])))[0])
                continue
            if isinstance(term, BitTerm):
                sums = self._bit_sums(term, tail, factors[0], d)
            else:
                sums = self._fused_sums(factors, d) if factors else None
                if sums is None:
                    sums = self._numpy_sums(factors, d)
            message = F.ext_add(message, F.ext_mul(sums, coefficient[None, :]))
        return message

    def _bit_sums(self, term: BitTerm, scale, factor, d) -> np.ndarray:
        """g(X) = scale eq(tau_j, X) S(X), S(X) = sum_rest eq(tau_rest, rest) h(F^(r, X, rest)), h(t) = t - t^2;
        ``scale`` = prod_(i < j) eq(tau_i, r_i) (kept in the term's tail slot while j < m)."""
        j = len(self.challenges)
        table, mask = factor
        rest = term.tau[j + 1:]
        kernels = F.numba_kernels() if self._fused and table.shape[0] >= F.KERNEL_MIN_SIZE else None
        if kernels is not None:
            sums = self._bit_sums_fused(kernels, table, mask, rest, d)
        else:
            eq_rest = np.repeat(eq_table(rest), 2, axis=0)  # constant in the current variable
            sums = self._numpy_sums([(eq_rest, None), factor], d)
            square = self._numpy_sums([(eq_rest, None), factor, factor], d)
            sums = F.ext_sub(sums, square)
        t = term.tau[j]
        xs = F.ext_from_base(np.arange(d + 1, dtype=np.uint64))
        eq_x = F.ext_add(F.ext_sub(F.ext_one((d + 1,)), t[None, :]),
                         F.ext_mul(xs, F.ext_sub(F.ext_add(t, t), F.ext_one())[None, :]))
        return F.ext_mul(F.ext_mul(eq_x, sums), scale[None, :])

    def _fused_sums(self, factors, d):
        kernels = F.numba_kernels() if self._fused and factors[0][0].shape[0] >= F.KERNEL_MIN_SIZE else None
        if kernels is None:
            return None
        length = factors[0][0].shape[0]
        ext = [(_ext(t), m) for t, m in factors if is_ext(t) or m is not None]
        base = [t for t, m in factors if not is_ext(t) and m is None]
        widest = max([1] + [m.shape[0] for _, m in ext if m is not None])
        masks = np.zeros((len(ext), widest, F.EXT_DEGREE), dtype=np.uint64)
        blocks = np.zeros(len(ext), dtype=np.int64)
        for k, (_, m) in enumerate(ext):
            if m is not None:
                masks[k, :m.shape[0]] = m
                blocks[k] = (length // 2) // m.shape[0]
        zs = F.to_field(np.array([x * (1 - x) for x in range(d + 1)], dtype=np.int64))
        out = np.empty((d + 1, F.EXT_DEGREE), dtype=np.uint64)
        if len(ext) == 2 and not base:  # the common term: two F_p4 factors in registers, no stacked copies
            (a, _), (b, _) = [(np.ascontiguousarray(t), m) for t, m in ext]
            kernels.masked_product_round_sums(a, b, masks[0], blocks[0], masks[1], blocks[1], zs, d, out)
            return out
        ext_factors = np.stack([t for t, _ in ext]) if ext else np.empty((0, length, F.EXT_DEGREE), dtype=np.uint64)
        if len(ext) == 3 and not base:  # three F_p4 factors: the cubic at four points, masks' parts per plane
            kernels.masked_triple_round_sums(ext_factors, masks, blocks, zs, d, out)
            return out
        base_factors = np.stack(base) if base else np.empty((0, length), dtype=np.uint64)
        kernels.masked_round_sums(ext_factors, masks, blocks, base_factors, zs, d, out)
        return out

    @staticmethod
    def _numpy_sums(factors, d) -> np.ndarray:
        """The round sums by whole-table numpy operations (the fused kernel's twin)."""
        z = [F.to_field(np.array([x * (1 - x)]))[0] for x in range(d + 1)]
        lines = []
        for table, mask in factors:
            table_lines = _lines(table, d)
            if mask is not None:
                table_lines = [table_lines[0], table_lines[1]] + [
                    _add_planes(table_lines[x], F.ext_mul_base(mask, z[x])) for x in range(2, d + 1)]
            lines.append(table_lines)
        sums = F.ext_zero((d + 1,))
        for x in range(d + 1):
            sums[x] = _sum_product([line[x] for line in lines]) if lines else F.ext_one()
        return sums

    @staticmethod
    def _bit_sums_fused(kernels, table, mask, rest, d) -> np.ndarray:
        """S(x), x = 0..d, from one kernel pass: with t = u + z(x) m_p (u linear in x, m_p the plane's mask),
        h(t) = (u - u^2) + z m_p (1 - 2u) - z^2 m_p^2, so S is U(x) (degree 2, from x = 0, 1, 2) plus the
        per-plane sums A_p = sum eq (1 - 2 u(0)), B_p = sum eq (u(1) - u(0)), C_p = sum eq times the masks."""
        half = rest.shape[0] // 2
        eq_lo, eq_hi = eq_table(rest[:half]), eq_table(rest[half:])
        planes = 1 if mask is None else mask.shape[0]
        block = 0 if mask is None else (table.shape[0] // 2) // planes
        plain = np.empty((3, F.EXT_DEGREE), dtype=np.uint64)
        buckets = np.empty((3, planes, F.EXT_DEGREE), dtype=np.uint64)
        kernels.bit_round_sums(np.ascontiguousarray(table), block, eq_lo, eq_hi, plain, buckets)
        sums = F.ext_zero((d + 1,))
        for x in range(d + 1):
            weights = F.to_field(np.array([(x - 1) * (x - 2) // 2, -x * (x - 2), x * (x - 1) // 2], dtype=np.int64))
            sums[x] = F.ext_sum(F.ext_mul_base(plain, weights), axis=0)
        if mask is not None:
            m_a = F.ext_sum(F.ext_mul(mask, buckets[0]), axis=0)
            m_b = F.ext_sum(F.ext_mul(mask, buckets[1]), axis=0)
            m_2 = F.ext_sum(F.ext_mul(F.ext_mul(mask, mask), buckets[2]), axis=0)
            for x in range(2, d + 1):
                z = F.to_field(np.array([x * (1 - x), 2 * x], dtype=np.int64))
                linear = F.ext_sub(m_a, F.ext_mul_base(m_b, z[1:2])[0])
                sums[x] = F.ext_add(sums[x], F.ext_mul_base(linear, z[0:1])[0])
                sums[x] = F.ext_sub(sums[x], F.ext_mul_base(m_2, F.mul(z[0:1], z[0:1]))[0])
        return sums

    @staticmethod
    def _final_product(factors, term) -> np.ndarray:
        """The term's value at the bound point, without its coefficient (and tail, for a BitTerm its eq)."""
        if isinstance(term, BitTerm):
            v = _ext(factors[0][0])[0]
            return F.ext_sub(v, F.ext_mul(v, v))
        value = F.ext_one()
        for table, _ in factors:
            value = F.ext_mul(value, _ext(table)[0])
        return value

    def bind(self, r) -> None:
        r = np.asarray(r, dtype=np.uint64)
        j = len(self.challenges)
        live_publics, live_states = set(), set()
        for k, (term, public_ids, state_ids) in enumerate(self._terms):
            if j >= term.num_vars:
                self._tails[k] = F.ext_mul(self._tails[k], F.ext_sub(F.ext_one(), r))
            else:
                if isinstance(term, BitTerm):  # the tail holds prod eq(tau_i, r_i) while j < m
                    self._tails[k] = F.ext_mul(self._tails[k], eq_eval(term.tau[j:j + 1], r[None, :]))
                live_publics.update(public_ids)
                live_states.update(state_ids)
        for i in live_publics:
            self._publics[i] = fold(self._publics[i], r, in_place=i in self._owned_publics)
            self._owned_publics.add(i)
        for i in live_states:
            self._states[i].bind(r)
        self.challenges.append(r)

    def final_evaluations(self):
        """[[stored factor values] per term] (the values the prover states)."""
        return [[_ext(self._states[i].table)[0].copy() for i in state_ids] for _, _, state_ids in self._terms]


def _ints(value) -> list:
    """An F_p4 value (4,) or a base scalar (as (c, 0, 0, 0)) as a list of Python ints."""
    value = np.asarray(value, dtype=np.uint64)
    return [int(c) for c in value] if value.shape == (F.EXT_DEGREE,) else [int(value) % F.P, 0, 0, 0]


def expected_summand(relation: Relation, sigma, values) -> np.ndarray:
    """The verifier's value of the summand at sigma from the stated stored-factor values (per term); scalar work
    on Python ints (numpy's per-call overhead would dominate)."""
    mul, p = F.ext_mul_ints, F.P
    total = [0, 0, 0, 0]
    n = sigma.shape[0]
    one_minus = [[(1 - c) % p if k == 0 else (-c) % p for k, c in enumerate(row)] for row in sigma.tolist()]
    for term, term_values in zip(relation.terms, values):
        value = _ints(term.coefficient)
        if isinstance(term, BitTerm):
            v = _ints(term_values[0])
            value = mul(mul(value, _ints(eq_eval(term.tau, sigma[:term.num_vars]))),
                        [(a - b) % p for a, b in zip(v, mul(v, v))])
            term_values = ()
        for public in term.publics:
            value = mul(value, _ints(public.at(sigma)))
        offsets = getattr(term, "offsets", ()) or (None,) * len(term_values)
        for v, offset in zip(term_values, offsets):
            value = mul(value, _ints(v) if offset is None else [(a + b) % p for a, b in zip(_ints(v), _ints(offset))])
        for i in range(term.num_vars, n):
            value = mul(value, one_minus[i])
        total = [(a + b) % p for a, b in zip(total, value)]
    return np.array(total, dtype=np.uint64)


def simulate_relation(relation: Relation, layouts: dict, seed=None):
    """The verifier's view of one relation without the witness (Libra, theorem 3): the stated values drawn
    uniform (as the masks make them), and a ZK sumcheck transcript ending at the summand they give.

    Returns (:class:`proofs.zk.SimulatedSumcheck`, values per term). ``seed``: tests only.
    """
    from .zk import simulate_zk_sumcheck
    unique = list({id(f): f for term in relation.terms for f in term.stored}.values())
    drawn = F.ext_random((len(unique),), seed=seed)
    by_id = {id(f): v for f, v in zip(unique, drawn)}
    values = [[by_id[id(f)] for f in term.stored] for term in relation.terms]
    transcript = simulate_zk_sumcheck(relation.claim, relation.num_vars(), relation.degree(layouts),
                                      lambda sigma: expected_summand(relation, sigma, values),
                                      seed=None if seed is None else seed + 1)
    return transcript, values


def mask_rank(layout: StoreLayout, views) -> int:
    """The F_p4 rank of the views' mask functionals (z_i(e) w(j) on the slot's masks l_i(j)): stated values of
    one slot are jointly uniform exactly when this equals their number. Views of different slots use
    different masks, so the rank is summed slot by slot."""
    total = 0
    for slot in layout.slots:
        rows = [F.ext_mul(v.mask_weights(slot)[:, None, :], _plane_weights(slot, v)[None, :, :]).reshape(-1, 4)
                for v in views if v.name == slot.name]
        total += _ext_rank(rows)
    return total


def _ext_rank(rows) -> int:
    """Rank over F_p4 of a list of (k, 4) vectors, by Gaussian elimination."""
    matrix = [r.copy() for r in rows]
    rank, columns = 0, matrix[0].shape[0] if matrix else 0
    for col in range(columns):
        pivot = next((i for i in range(rank, len(matrix)) if matrix[i][col].any()), None)
        if pivot is None:
            continue
        matrix[rank], matrix[pivot] = matrix[pivot], matrix[rank]
        inverse = F.ext_inv(matrix[rank][col][None])[0]
        for i in range(len(matrix)):
            if i != rank and matrix[i][col].any():
                factor = F.ext_mul(matrix[i][col], inverse)
                matrix[i] = F.ext_sub(matrix[i], F.ext_mul(matrix[rank], factor[None, :]))
        rank += 1
    return rank
