"""Zero-knowledge graph proofs (issue 13, item 3): the :mod:`proofs.layers.graph` statement with the weights private.

The plain graph proof passes claims from op to op (GKR style) and opens the weights: every stated value is an
MLE value of the witness. Here, as in :mod:`proofs.layers.network_zk` (whose docstring argues the design), every
relation between tensors is one zero-knowledge sumcheck with a public claim over masked stores
(:mod:`proofs.relations`, Libra section 4.2): the model store ``w`` (every contraction's weight and bias) is
committed as K hiding copies with an agreement proof (:mod:`proofs.layers.reusable`; each proof uses its own
copy), the proof store ``p`` (fresh per proof) holds every hidden tensor, every op's bit planes and, for a Conv
or a pool, its patch view P (the im2col copy: the patch index map is not multilinear, so a hidden convolution
is a contraction of a committed P, and P = patches(X) is one more relation whose public factor is the gather
weight table). The claimed output is public; the input is public, or private (``prove(x, private_input=True)``,
``verify_graph_zk(commitment, None, proof)``): then it is one more stored tensor whose bits prove it within
:func:`input_decomposition`'s range (inside the input bound the quantizer's field checks assume) and whose
padding is zero, so the statement is "some input in range gives this output".

**Layout.** As the plain proof: batch first, each axis padded to a power of two, but the batch axis padded
further when some stored tensor would have fewer than 4 variables (a masked tensor needs >= 4,
:data:`proofs.relations.MIN_ELEMENT_VARS`). A tensor's letters are 'b' then its sample axes.

**Relations** (tau fresh per relation, over the op's output):

- contraction Y = requant(einsum(view(X), W) + bias): sum_S X(tau_H, S, tau_L) W(tau_H', S, tau_L')
  + valid~(tau) b~(tau_bias) - sum_e eq(tau, e) sum_j c_j B(e, j) + h = 0, the summed letters S a contiguous block
  of both operands (the free letters fixed at tau: ``high``/``low`` views); shared letters (an elementwise Affine)
  add eq(tau_S, S). Then the select: Y - q + s q = 0 (or the public output's value);
- patches: sum_v eq(tau, v) P(v) = sum_p G_tau(p) X(p), G_tau(p) = sum_(real v, gather(v) = p) eq(tau, v)
  (public: the verifier builds it in O(|P|));
- bilinear Y = requant(einsum(X1, X2)) of two computed tensors (attention's q k^T, its weighted sum, the products
  of lowered Softmax and LayerNorm): sum_(b S C) eq(tau_(b S), (b, S)) X1(b, S, C, tau_1) X2(b, S, C, tau_2) - rebuilt
  + h = 0 (degree 3), the operands laid out b, shared S, contracted C, own letters (the quantizer transposes them
  there), their own letters fixed at the output's tau; then the select;
- relu (after an add): X - rebuilt + h = 0, then the select;  add: Y - 2^k1 X1 - 2^k2 X2 = 0;
  reshape: Y(tau) - sum_p G_tau(p) X(p) = 0 (a reshape of the same padded layout is the same tensor);
  transpose: Y(tau) - X(tau permuted) = 0;  bits: every plane entry is a bit (one batched relation);
- lookup Y = T[X] (Sigmoid, Tanh, Gelu, ...: a public table, :func:`proofs.graph_quantize.lookup_table`): LogUp
  (Haboeck 2022) with the inverses committed: the multiplicities m are in the proof store; alpha, beta are drawn
  after it and the lookup store "q" of H = S / (beta + X + alpha Y) and G = m / (beta + t + alpha T) (F_p4 tables
  as four base coordinates) is committed then; three relations (:meth:`_Run.lookup`) show H, G are those
  inverses (Y zero off its box) and sum H = sum G, so every real (x, y) is a table row. The plain proof uses
  LogUp-GKR instead (:mod:`proofs.lookup`); here committed inverses keep every stated value a masked one (no GKR
  layer value, which would be a function of the hidden activations, is ever stated). Over hiding Basefold stores
  the lookup store is a hiding Basefold commitment of its own, its claims in the proof's one batch opening;
- range lookup (issue 34; a graph with lookups, :meth:`Shapes._range_ops`): a requantization without ReLU keeps no
  bit planes: acc - 2^R z' - rem + h = 0 with z' its (stored or public) output and rem stored, and both are looked
  up (LogUp as above) in one public table of rows (v, w), v in [0, 2^w) for every width w used: rem with w = R and
  z' + 2^(Q-1) with w = Q, one committed inverse H = 1 / (D_rem D_z) per entry (D = beta + v + alpha w; sum_e
  H (D_rem + D_z) = sum 1 / D), G = m / D over the table, the multiplicities m in the proof store (:meth:`_Run.
  range_check`, :meth:`_Run.range_table`). R + Q <= 30 makes acc's rebuild injective as the bits' was. An F_p4
  table is one slot of four coordinate planes, read as one factor sum_k u^k H_k.

A public tensor's part of a relation moves to its claim (the verifier evaluates it); a pool's kernel is public
(:func:`proofs.graph_quantize.public_weight`, derived from the structure by both sides, never in the model store), a
public factor of its contraction's term, so a prover cannot average with another kernel. Every stored tensor is the
target of one relation over its whole padded cube, so its padding is fixed by its inputs; a requantized one's select
relation also shows it is zero off its declared box (:meth:`Protocol.select` with a box: a gamma-weighted
:func:`proofs.relations.padding_factor` term, no stated value added). By induction every stored tensor (adds,
reshapes, patch copies included) is then zero-padded, so a contraction reads the weights' padding only against zeros
and the weights' padding (the committer's) cannot change the output.
A grouped convolution (G > 1, a depthwise one included) sums the group letter with the others: the model store
holds its weight as (O/G, G, C/G, kh, kw) and its view P as (b, i, j | g, c, u, v) (:func:`_weight_order`), so
g c u v is one block of both operands and the output's eq(tau_g, g) is one more public factor of the sumcheck.
Not yet: a grouped convolution with other than 1 or a power of two output channels per group (its einsum output
and its output differ in layout), a contraction whose summed letters are not one block of both operands. Soundness: the union bound of :func:`soundness_bits`; zero knowledge as :mod:`proofs.relations`.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import math
from dataclasses import dataclass

import numpy as np

from .. import basefold as B
from .. import basefold_zk as BZ
from .. import field as F
from ..errors import ModelError, ProofError, ProofRejected
from ..verdict import Verdict, rejecting
from ..graph_quantize import QuantizedGraph, bilinear_terms, lookup_table, public_weight, validate_structure
from ..lookup import multiplicities
from ..mle import bind_high, eq_eval, eq_table, mle_evaluate
from ..pcs.choice import AUTO, choose_scheme
from ..progress import as_progress
from ..proof_format import ByteReader, ByteWriter, from_record, parse_nested, to_record
from ..public_values import require_bounded
from ..quantize import round_shift
from ..relations import (Public, Slot, StoreLayout, Stored, Term, box_indicator, commit_store, eq_factor,
                         table_factor)
from ..transcript import Transcript
from ..zk import HidingCommitment, HidingParams, opening_field_error
from . import prover_state
from .basefold_channel import BasefoldChannel, StorePlan, commit_hosted
from .common import prefix_sum_of_eq, require
from .contraction import PatchGeometry, einsum_subscripts, join_point, masked_eq, padded_size, split_point
from .network_zk import (StatedViews, base_params, best_rows, check_store_commitments,
                         basefold_params, copies_agreement_error, default_params, fit_basefold_rows, is_basefold,
                         require_basefold_store)
from .proof_items import TrainingProof
from .requant import Decomposition, decompose
from .reusable import Reusable, commit_reusable, verify_reusable
from .step_proof import union_bound_error
from .step_relations import Channel, Protocol, ShapeChannel, ext_int, locate
from .step_stores import bits_tables, decomposition_keys, store_params

TRANSCRIPT_LABEL = "hezk.proofs.graph.zk.v3"  # v2: requantizations range-checked by the range lookup (issue 34);
# v3: its real entries only
COMMITMENT_MAGIC, PROOF_MAGIC, FORMAT_VERSION = b"HZKGZCM1", b"HZKGZPF1", 1
PROOF_VERSION = 3  #: 2: the range lookup's relations and stores (a graph with lookups); 3: the range lookup
#: checks the real entries only, hiding Basefold stores commit their tensors' boxes
DEFAULT_MAX_PROOFS = 16
MIN_VARS = 4
MIN_SOUNDNESS_BITS = 100
_SAMPLE = "pqrstuvwxyzacdefghijklmno"


def _bits(n: int) -> int:
    return padded_size(n).bit_length() - 1


# ------------------------------------------------------------------------------------------- structure
class Shapes:
    """Public shapes of one proof: padded batch, every tensor's padded shape, aliases (free reshapes), which
    tensors are stored (the input too when ``private_input``), the patch views' letters; refuses (ModelError) what
    the hiding proof cannot state."""

    def __init__(self, q: QuantizedGraph, batch: int, private_input: bool = False):
        self.q, self.batch, self.private_input = q, int(batch), bool(private_input)
        self.alias = {}
        for op in q.ops:
            source = self.alias.get(op.inputs[0], op.inputs[0])
            if op.kind == "reshape" and _same_layout(q.shapes[source], q.shapes[op.output]):
                self.alias[op.output] = source
        self.lookups = [index for index, op in enumerate(q.ops) if op.kind == "lookup"]
        self.views = {}  # op index -> (P letters, summed letters) for patch contractions
        for index, op in enumerate(q.ops):
            if op.kind == "contraction" and op.patches is not None:
                data, weight, out = einsum_subscripts(op.equation)
                if op.patches.groups == 1:
                    summed = "".join(l for l in weight if l in data and l not in out)
                    free = "".join(l for l in out if l in data)
                else:  # the group letter is summed with the others (its eq factor shared with the output)
                    summed = "".join(l for l in _weight_order(op) if l in data)
                    free = "".join(l for l in out if l in data and l not in summed)
                self.views[index] = (free + summed, summed)
        self.input_name, self.output_name = self.alias.get(q.input, q.input), self.alias.get(q.output, q.output)
        # in op order (not the shapes dict's order, which a parsed structure does not keep)
        stored = [op.output for op in q.ops if op.output not in (self.input_name, self.output_name)
                  and op.output not in self.alias]
        self.stored = ([self.input_name] if self.private_input else []) + stored
        pb = padded_size(batch)
        smallest = [self.sample_vars(q.shapes[t]) for t in self.stored] + \
            [self.sample_vars(q.shapes[op.output]) for op in q.ops if op.has_bits] + \
            [self.sample_vars(self.view_shape(i)[1:]) for i in self.views] + \
            [self.sample_vars(q.shapes[q.ops[i].output]) for i in self.lookups]
        while smallest and min(smallest) + _bits(pb) < MIN_VARS:
            pb *= 2
        self.pb = pb
        self.range_ops, self.range_widths = self._range_ops()

    def _range_ops(self) -> tuple:
        """(op indices, sorted widths) of the requantizations whose remainder and output are range-checked by the
        LogUp range lookup (:meth:`_Run.range_check`) instead of bit planes: those without ReLU (a ReLU reads its
        sign bit), when the graph has lookups (its lookup store exists) and
        the lookup commits fewer entries than the planes would (:data:`RANGE_LOOKUPS`: "auto", or "always"/"never"),
        and R, Q <= :data:`RANGE_MAX_WIDTH` (the table, which the verifier evaluates, stays under 2^17 rows; a wider
        op keeps its planes). The widths: each op's R (when R > 0) and Q, the tags of :meth:`range_table`'s rows."""
        eligible = [i for i, op in enumerate(self.q.ops) if op.has_bits and not _decomposition(op).relu
                    and max(op.shift, op.q_bits) <= RANGE_MAX_WIDTH]
        if RANGE_LOOKUPS == "never" or not eligible or not (self.lookups or RANGE_LOOKUPS == "always"):
            return (), ()
        widths = sorted({w for i in eligible for w in (self.q.ops[i].shift, self.q.ops[i].q_bits) if w > 0})
        tb = _range_table_bits(widths)
        planes = sum(_decomposition(self.q.ops[i]).padded_width << self.vars(self.q.ops[i].output) for i in eligible)
        lookup = sum((1 + bool(self.q.ops[i].shift) + F.EXT_DEGREE) << self.vars(self.q.ops[i].output)
                     for i in eligible) + ((1 + F.EXT_DEGREE) << tb)
        if RANGE_LOOKUPS == "auto" and lookup >= planes:
            return (), ()
        return tuple(eligible), tuple(widths)

    @property
    def range_bits(self) -> int:
        """log2 of the range table's padded rows (:meth:`range_table`)."""
        return _range_table_bits(self.range_widths)

    def range_table(self) -> tuple:
        """(values, tags) of the range table (int64, 2^range_bits rows): for each width w, the rows (v, w) for
        v in [0, 2^w); the padding rows (v, 0) (tag 0: no range check uses it; the rows stay distinct)."""
        size = 1 << self.range_bits
        values, tags = np.zeros(size, dtype=np.int64), np.zeros(size, dtype=np.int64)
        start = 0
        for w in self.range_widths:
            values[start:start + (1 << w)] = np.arange(1 << w)
            tags[start:start + (1 << w)] = w
            start += 1 << w
        values[start:] = np.arange(size - start)
        return values, tags

    def table_bits(self, index: int) -> int:
        """A lookup's table in the hiding proof: 2^max(b, 4) rows (a stored table has >= 4 variables; a wider
        table of the same function holds the b-bit one)."""
        return max(self.q.ops[index].q_bits, MIN_VARS)

    def lookup_table(self, index: int) -> tuple:
        """(inputs, outputs) of the lookup's table at :meth:`table_bits` (int64)."""
        op = self.q.ops[index]
        return lookup_table(op.function, self.table_bits(index), self.q.fracs[op.inputs[0]], self.q.fracs[op.output])

    @staticmethod
    def sample_vars(shape) -> int:
        return sum(_bits(n) for n in shape)

    def real(self, tensor: str) -> tuple:
        return (self.batch, *self.q.shapes[self.alias.get(tensor, tensor)])

    def padded(self, tensor: str) -> tuple:
        return (self.pb, *(padded_size(n) for n in self.q.shapes[self.alias.get(tensor, tensor)]))

    def box(self, tensor: str) -> tuple:
        """(real lengths, padded bits) per axis, lowest variables (the last axis) first: the tensor's real box
        (:func:`proofs.relations.box_indicator`)."""
        real, padded = self.real(tensor), self.padded(tensor)
        return tuple(int(k) for k in real[::-1]), tuple(_bits(k) for k in padded[::-1])

    def inside(self, tensor: str) -> np.ndarray:
        """The flat padded table's entries inside the real box (bool)."""
        keep = np.zeros(self.padded(tensor), dtype=bool)
        keep[tuple(slice(0, n) for n in self.real(tensor))] = True
        return keep.reshape(-1)

    def vars(self, tensor: str) -> int:
        return sum(_bits(n) for n in self.padded(tensor))

    def name(self, tensor: str) -> str:
        return self.alias.get(tensor, tensor)

    def view_shape(self, index: int) -> tuple:
        """P's real shape in its letters' order (batch first)."""
        op = self.q.ops[index]
        letters, _ = self.views[index]
        x_shape = (self.batch, *self.q.shapes[op.inputs[0]])
        c, h, w = x_shape[1:]
        oh, ow = op.patches.output_hw(h, w)
        groups = op.patches.groups
        sizes = dict(zip("bgcuvij", (self.batch, groups, c // groups, *op.patches.kernel, oh, ow)))
        return tuple(sizes[l] for l in letters)

    def letter_bits(self, letters: str, real) -> dict:
        out = {}
        for l, n in zip(letters, real):
            out[l] = _bits(self.pb) if l == "b" else _bits(n)
        return out


#: when a requantization without ReLU is range-checked by the LogUp range lookup instead of its bit planes
#: (:meth:`Shapes._range_ops`): "auto" (when it commits fewer entries, in a graph with lookups), "always", "never"
RANGE_LOOKUPS = "auto"
RANGE_MAX_WIDTH = 16  #: the widest remainder or output a range lookup checks (as MAX_LOOKUP_BITS for a function)


def _range_table_bits(widths) -> int:
    return max(MIN_VARS, padded_size(sum(1 << w for w in widths)).bit_length() - 1) if widths else 0


def _high_eq_factor(point, low: int, k: int) -> Public:
    """The factor over k variables equal to eq(point, its top k - low variables), constant in the low ones."""
    return Public(lambda: np.repeat(eq_table(point), 1 << low, axis=0), lambda sigma: eq_eval(point, sigma[low:k]))


def _bound_public(table, high, low, k: int) -> Public:
    """A public table T(high, S, low) with high/low fixed: the factor S -> T(high, S, low) over k variables."""
    lo = 0 if low is None else low.shape[0]
    if lo:
        table = F.matmul(table.reshape(-1, 1 << lo), eq_table(low))
    bound = table if high is None else bind_high(table, high)
    return Public(lambda: bound, lambda sigma: mle_evaluate(bound, sigma[:k]))


def _shifted_public(factor: Public, constant) -> Public:
    """constant + factor, a public factor."""
    def table():
        values = np.asarray(factor.table(), dtype=np.uint64)
        return F.ext_add(F.ext_from_base(values) if values.ndim == 1 else values, constant[None, :])
    return Public(table, lambda sigma: F.ext_add(factor.at(sigma), constant))


def _same_layout(a, b) -> bool:
    from .contraction import reshape_is_free
    return reshape_is_free((1, *a), (1, *b))


def _decomposition(op) -> Decomposition:
    return Decomposition(op.shift, op.q_bits, op.relu or op.kind == "relu")  # shift 0 on a relu op


def _weight_order(op) -> str:
    """The letters of a contraction's weight as the model store holds it: for a grouped convolution (G > 1) the
    letters it shares with the view last, in the equation's order ('gocuv' -> 'ogcuv': one block of both
    operands, the group letter among them), else the equation's own."""
    data, weight, _ = einsum_subscripts(op.equation)
    if op.patches is None or op.patches.groups == 1:
        return weight
    return "".join(l for l in weight if l not in data) + "".join(l for l in weight if l in data)


def _stored_weight(op) -> np.ndarray:
    """The weight's axes in :func:`_weight_order`."""
    weight = einsum_subscripts(op.equation)[1]
    return np.transpose(op.weight, [weight.index(l) for l in _weight_order(op)])


def _array_box(shape) -> tuple:
    """(real length, padded bits) per axis of an array zero-padded per axis, lowest variables (last axis) first."""
    return tuple((int(n), _bits(n)) for n in reversed(shape))


def model_layout(q: QuantizedGraph) -> StoreLayout:
    """The model store: each committed weight (its axes as :func:`_weight_order` holds them) and bias, zero-padded
    per axis (their boxes: a hiding Basefold store commits the real pieces only)."""
    slots = []
    for index, op in enumerate(q.ops):
        if op.kind == "contraction":
            if op.committed_weight:
                letters = einsum_subscripts(op.equation)[1]
                shape = [op.weight_shape[letters.index(l)] for l in _weight_order(op)]
                slots.append(Slot(f"W{index}", max(MIN_VARS, sum(_bits(n) for n in shape)), box=_array_box(shape)))
            if op.has_bias:
                slots.append(Slot(f"b{index}", max(MIN_VARS, sum(_bits(n) for n in op.bias_shape)),
                                  box=_array_box(op.bias_shape)))
    return StoreLayout(tuple(slots), True)


def model_tables(q: QuantizedGraph) -> dict:
    tables = {}
    for index, op in enumerate(q.ops):
        if op.kind == "contraction":
            if op.committed_weight:
                weight = _stored_weight(op)
                tables[f"W{index}"] = _field(weight, tuple(padded_size(n) for n in weight.shape))
            if op.has_bias:
                tables[f"b{index}"] = _field(op.bias, tuple(padded_size(n) for n in op.bias.shape))
    return tables


def _field(values, padded_shape) -> np.ndarray:
    values = np.asarray(values, dtype=np.int64)
    table = np.zeros(padded_shape, dtype=np.int64)
    table[tuple(slice(0, n) for n in values.shape)] = values
    return F.to_field(table.reshape(-1))


def input_decomposition(q: QuantizedGraph) -> Decomposition:
    """The range a private input is proven in: signed Q' = bitlen(input_bound) bits, [-2^(Q'-1), 2^(Q'-1)), inside
    [-input_bound, input_bound] (what the quantizer's field checks assume; with the default bound 2^(A-1+m) - 1 and
    margin m = 1, the calibrated range)."""
    return Decomposition(0, int(q.input_bound).bit_length(), False)


INPUT_BITS = "t0.fwdx"  #: the private input's bit planes (its range proof) in the proof store
RANGE_M = "r.m"  #: the range table's multiplicities in the proof store
RANGE_G = "r.g"  #: the range table's m / (beta + v + alpha w) in the lookup store (four coordinate planes)


def range_witness(acc, op) -> tuple:
    """(z', rem) of a requantization checked by the range lookup: z' = round(acc / 2^R), rem = acc + h - 2^R z'
    (int64); ModelError when z' is outside its signed width."""
    acc = np.asarray(acc, dtype=np.int64)
    shifted = round_shift(acc, op.shift)
    limit = 1 << (op.q_bits - 1)
    if acc.size and (shifted.min() < -limit or shifted.max() >= limit):
        raise ModelError(f"requantized value out of its declared range [-{limit}, {limit}) (q_bits={op.q_bits}): "
                         f"got [{shifted.min()}, {shifted.max()}]")
    offset = 1 << (op.shift - 1) if op.shift else 0
    return shifted, acc + offset - (shifted << op.shift)
MAX_BATCH = 1 << 16  #: the largest batch a verifier of a private-input proof accepts (it sizes the relations)


def tensor_box(shapes: Shapes, tensor: str) -> tuple:
    """The tensor's (real length, padded bits) per axis, lowest variables (its last axis) first: a slot whose
    honest table is zero outside it (:class:`proofs.relations.Slot`)."""
    return tuple(zip(*shapes.box(tensor)))


def proof_layout(shapes: Shapes) -> StoreLayout:
    slots = [Slot(f"a.{t}", shapes.vars(t), box=tensor_box(shapes, t)) for t in shapes.stored]
    if shapes.private_input:
        for g, (_, count) in enumerate(input_decomposition(shapes.q).groups):
            slots.append(Slot(INPUT_BITS if g == 0 else f"{INPUT_BITS}.g{g}", shapes.vars(shapes.input_name),
                              count.bit_length() - 1))
    for index in shapes.views:
        slots.append(Slot(f"v.{index}", sum(shapes.letter_bits(shapes.views[index][0], shapes.view_shape(index))
                                            .values())))
    for index in shapes.lookups:  # the multiplicities, committed before the lookups' challenges
        slots.append(Slot(f"m.{index}", shapes.table_bits(index)))
    for index in shapes.range_ops:  # the remainders (range lookup), then the range table's multiplicities
        if shapes.q.ops[index].shift:
            output = shapes.q.ops[index].output  # zero in the padding (range_requantized's relation)
            slots.append(Slot(f"r.{index}", shapes.vars(output), box=tensor_box(shapes, output)))
    if shapes.range_ops:
        slots.append(Slot(RANGE_M, shapes.range_bits))
    for index, op in enumerate(shapes.q.ops):  # bit planes, zero in the output's padding (requantized's relation)
        if op.has_bits and index not in shapes.range_ops:
            for g, (_, count) in enumerate(_decomposition(op).groups):
                slots.append(Slot(f"t0.fwd{index}" if g == 0 else f"t0.fwd{index}.g{g}", shapes.vars(op.output),
                                  count.bit_length() - 1, tensor_box(shapes, op.output)))
    return StoreLayout(tuple(slots), True)


def _view_tables(shapes: Shapes, index: int, x) -> np.ndarray:
    op = shapes.q.ops[index]
    letters, _ = shapes.views[index]
    x = np.asarray(x).reshape(len(x), *shapes.q.shapes[op.inputs[0]])  # (a free reshape's alias has another shape)
    view = op.patches.apply(x)  # (B, G, C, kh, kw, Ho, Wo): letters b g c u v i j
    view = np.transpose(view, ["bgcuvij".index(l) for l in letters])
    return view


def proof_tables(shapes: Shapes, values: dict, accs: dict) -> dict:
    tables = {}
    for t in shapes.stored:
        tables[f"a.{t}"] = _field(values[t], shapes.padded(t))
    for index in shapes.views:
        op = shapes.q.ops[index]
        view = _view_tables(shapes, index, values[op.inputs[0]])
        padded = tuple(shapes.pb if l == "b" else padded_size(n) for l, n in zip(shapes.views[index][0], view.shape))
        tables[f"v.{index}"] = _field(view, padded)
    keys = []  # the range lookups' (value, tag) pairs, for the range table's multiplicities
    for index, op in enumerate(shapes.q.ops):
        if op.has_bits:
            acc = np.zeros(shapes.padded(op.output), dtype=np.int64)
            a = accs[index]
            acc[tuple(slice(0, n) for n in a.shape)] = a
            inside = shapes.inside(op.output)  # the relations check the real entries' bits or ranges only
            if index not in shapes.range_ops:
                witness = decompose(acc.reshape(-1), _decomposition(op))
                witness.bits[:, ~inside] = 0  # the padding's planes are zero (its rem = h is not decomposed)
                tables.update(bits_tables(f"t0.fwd{index}", witness))
                continue
            shifted, remainder = range_witness(acc.reshape(-1), op)
            if op.shift:
                tables[f"r.{index}"] = F.to_field(np.where(inside, remainder, 0))  # zero in the padding
                keys.append((remainder[inside], op.shift))
            keys.append((shifted[inside] + (1 << (op.q_bits - 1)), op.q_bits))
    if shapes.range_ops:
        rows, tags = shapes.range_table()
        code = rows + (tags << 32)  # one int64 key per (value, tag) row: values < 2^31
        tables[RANGE_M] = F.to_field(multiplicities(np.concatenate([v + (np.int64(w) << 32) for v, w in keys]), code))
    for index in shapes.lookups:
        inputs, _ = shapes.lookup_table(index)
        tables[f"m.{index}"] = F.to_field(multiplicities(values[shapes.q.ops[index].inputs[0]], inputs))
    if shapes.private_input:
        x = np.zeros(shapes.padded(shapes.input_name), dtype=np.int64)
        real = values[shapes.q.input]
        x[tuple(slice(0, n) for n in real.shape)] = real
        tables.update(bits_tables(INPUT_BITS, decompose(x.reshape(-1), input_decomposition(shapes.q))))
    return tables


# ------------------------------------------------------------------------------------------- relations
def _positions(real, padded) -> np.ndarray:
    return np.ravel_multi_index(np.unravel_index(np.arange(math.prod(real)), real), padded)


_UNITS = np.eye(F.EXT_DEGREE, dtype=np.uint64)  #: u^k, the F_p4 basis: an F_p4 table is sum_k u^k (its coordinate k)


class _Run:
    """The relations of the module docstring, identical for prover, verifier and the shape count."""

    def __init__(self, shapes: Shapes, channel: Channel, x_table, y_table):
        self.s, self.ch = shapes, channel
        self.public = {shapes.output_name: y_table}
        if not shapes.private_input:
            self.public[shapes.input_name] = x_table
        self.where = locate({}, {k: v for k, v in channel.layouts.items() if k != "w"})
        self.protocol = Protocol(None, channel, self.where, None)
        self.one, self.minus = F.ext_one(), F.ext_neg(F.ext_one())

    # -- factors ----------------------------------------------------------------------------------------
    def is_public(self, tensor: str) -> bool:
        return self.s.name(tensor) in self.public

    def value(self, tensor: str, point) -> np.ndarray:
        table = self.public[self.s.name(tensor)]
        return F.ext_zero() if table is None else mle_evaluate(table, point)

    def stored(self, tensor: str, **fix) -> Stored:
        name = f"a.{self.s.name(tensor)}"
        return Stored(self.where[name], name, **fix)

    def operand(self, tensor: str, high, low, k: int):
        """The tensor with its high/low variables fixed, as a factor over the k variables left."""
        if not self.is_public(tensor):
            return self.stored(tensor, high=high, low=low)
        table = self.public[self.s.name(tensor)]
        if table is None:  # the shape pass
            return Public(lambda: F.ext_zero(1 << k), lambda sigma: F.ext_zero())
        return _bound_public(table, high, low, k)

    def tensor_term(self, coefficient, tensor: str, tau, claim):
        """coefficient sum_e eq(tau, e) T(e): a Term (stored) or its value moved to the claim (public)."""
        if self.is_public(tensor):
            return None, F.ext_sub(claim, F.ext_mul(coefficient, self.value(tensor, tau)))
        return Term(coefficient, (eq_factor(tau),), (self.stored(tensor),), tau.shape[0]), claim

    def gather_term(self, coefficient, tensor: str, gather, claim):
        """coefficient sum_p G(p) X(p) for a public weight table G over X's padded layout (a table, or a
        :class:`Public` whose MLE the verifier evaluates without the table)."""
        factor = gather if isinstance(gather, Public) else table_factor(gather)
        if self.is_public(tensor):
            table = self.public[self.s.name(tensor)]
            value = F.ext_zero() if table is None else F.ext_sum(F.ext_mul_base(factor.table(), table), axis=0)
            return None, F.ext_sub(claim, F.ext_mul(coefficient, value))
        return Term(coefficient, (factor,), (self.stored(tensor),), self.s.vars(tensor)), claim

    def relation(self, label, terms, claim=None):
        self.ch.relation(label, [t for t in terms if t is not None], claim)

    # -- the walk ----------------------------------------------------------------------------------------
    def run(self) -> None:
        if self.s.private_input:
            self.input_range()
        if self.s.lookups or self.s.range_ops:
            self.lookup_store()
        for index, op in enumerate(self.s.q.ops):
            if op.kind == "contraction":
                self.contraction(index, op)
            elif op.kind == "lookup":
                self.lookup(index, op)
            elif op.kind == "bilinear":
                self.bilinear(index, op)
            elif op.kind == "relu":
                self.requantized(index, op, [], F.ext_zero(), op.inputs[0])
            elif op.kind == "square":
                self.square(index, op)
            elif op.kind == "add":
                tau = self.ch.point(f"graph.add{index}", self.s.vars(op.output))
                claim = F.ext_zero()
                y, claim = self.tensor_term(self.one, op.output, tau, claim)
                a, claim = self.tensor_term(F.ext_neg(ext_int(1 << op.lefts[0])), op.inputs[0], tau, claim)
                b, claim = self.tensor_term(F.ext_neg(ext_int(1 << op.lefts[1])), op.inputs[1], tau, claim)
                self.relation(f"graph.add{index}", [y, a, b], claim)
            elif op.kind == "reshape":
                if op.output in self.s.alias:
                    continue
                tau = self.ch.point(f"graph.reshape{index}", self.s.vars(op.output))
                x = op.inputs[0]
                gather = F.ext_zero(math.prod(self.s.padded(x)))
                gather[_positions(self.s.real(x), self.s.padded(x))] = \
                    eq_table(tau)[_positions(self.s.real(op.output), self.s.padded(op.output))]
                y, claim = self.tensor_term(self.one, op.output, tau, F.ext_zero())
                g, claim = self.gather_term(self.minus, x, gather, claim)
                self.relation(f"graph.reshape{index}", [y, g], claim)
            else:  # transpose: the padded table with permuted axes
                tau = self.ch.point(f"graph.transpose{index}", self.s.vars(op.output))
                rank = len(self.s.padded(op.output))
                x_letters = "b" + _SAMPLE[:rank - 1]
                y_letters = "b" + "".join(x_letters[1 + p] for p in op.shape)
                parts = split_point(tau, y_letters, self.s.letter_bits(y_letters, self.s.padded(op.output)).get)
                y, claim = self.tensor_term(self.one, op.output, tau, F.ext_zero())
                x, claim = self.tensor_term(self.minus, op.inputs[0], join_point(parts, x_letters), claim)
                self.relation(f"graph.transpose{index}", [y, x], claim)
        if self.s.range_ops:
            self.range_table()
        keys = decomposition_keys({k: v for k, v in self.ch.layouts.items() if k != "w"})
        if keys:
            self.protocol.bits(keys)

    def contraction(self, index: int, op) -> None:
        s = self.s
        data, weight, out = einsum_subscripts(op.equation)
        x = op.inputs[0]
        if index in s.views:  # P = patches(X), then the contraction reads P
            letters, _ = s.views[index]
            view_real = s.view_shape(index)
            view_padded = tuple(s.pb if l == "b" else padded_size(n) for l, n in zip(letters, view_real))
            tau = self.ch.point(f"graph.patches{index}", sum(_bits(n) for n in view_padded))
            gather = Public(lambda: self.patch_gather(index, tau, letters, view_real, view_padded),
                            lambda sigma: self.patch_gather_eval(index, tau, letters, view_real, sigma))
            name = f"v.{index}"
            p_term = Term(self.one, (eq_factor(tau),), (Stored(self.where[name], name),), tau.shape[0])
            if self.is_public(x):  # sum_p G(p) X(p) = P~(tau) for the public view P = patches(X): no G
                table = self.public[s.name(x)]
                value = F.ext_zero() if table is None else mle_evaluate(self.public_view(index, table, view_padded), tau)
                g_term, claim = None, value  # 0 - (-1) P~(tau)
            else:
                g_term, claim = self.gather_term(self.minus, x, gather, F.ext_zero())
            self.relation(f"graph.patches{index}", [p_term, g_term], claim)
            data_letters, data_real = letters, view_real
        else:
            data_letters, data_real = data, (s.batch, *s.q.shapes[x])
        out_real = (s.batch, *op.einsum_shape)
        if not _same_layout(op.einsum_shape, s.q.shapes[op.output]):
            grouped = " (a grouped convolution's output channels per group must be 1 or a power of two)" \
                if op.patches is not None and op.patches.groups > 1 else ""
            raise ModelError(f"{op.name}: its einsum output {op.einsum_shape} and its output {s.q.shapes[op.output]} "
                             f"have different layouts{grouped}: not provable with hidden weights yet (use "
                             f"--public-weights)")
        tau = self.ch.point(f"graph.layer{index}", s.vars(op.output))
        parts = split_point(tau, out, s.letter_bits(out, out_real).get)
        sizes = dict(zip(data_letters, data_real))
        sizes.update(zip(weight, op.weight_shape))
        # a size-1 letter (b aside) has no variable: it splits no block and is dropped from the layouts below
        width = {l: _bits(s.pb) if l == "b" else _bits(n) for l, n in sizes.items()}
        summed = "".join(l for l in _weight_order(op) if l in data_letters and width[l])
        shared = "".join(l for l in summed if l in out)
        if shared and not summed.startswith(shared):
            raise ModelError(f"{op.name}: einsum {op.equation!r} mixes shared and contracted letters: not provable "
                             f"with hidden weights yet")
        sizes = dict(zip(data_letters, data_real))
        sizes.update(zip(weight, op.weight_shape))
        k = sum(_bits(sizes[l]) for l in summed)
        factors, publics = [], []
        for letters, tensor in ((data_letters, None), (_weight_order(op), "W")):
            letters = "".join(l for l in letters if width[l])
            at = letters.find(summed) if summed else len(letters)
            if summed and at < 0:
                raise ModelError(f"{op.name}: einsum {op.equation!r}: the summed letters {summed!r} are not one block "
                                 f"of {letters!r}: not provable with hidden weights yet")
            high_letters, low_letters = letters[:at], letters[at + len(summed):]
            high = join_point(parts, high_letters) if high_letters else None
            low = join_point(parts, low_letters) if low_letters else None
            if tensor is None:
                if index in s.views:
                    name = f"v.{index}"
                    factors.append(Stored(self.where[name], name, high=high, low=low))
                else:
                    factor = self.operand(x, high, low, k)
                    (publics if isinstance(factor, Public) else factors).append(factor)
            elif op.constant:  # a public kernel: the verifier's own table, bound like a public operand
                kernel = _field(public_weight(op, s.q.shapes[x]), tuple(padded_size(n) for n in op.weight_shape))
                publics.append(_bound_public(kernel, high, low, k))
            else:
                slot = self.ch.layouts["w"].slot(f"W{index}")
                extra = slot.elem_vars - sum(_bits(n) for n in op.weight_shape)
                if extra:
                    high = np.concatenate([np.zeros((0, F.EXT_DEGREE), np.uint64) if high is None else high,
                                           F.ext_zero((extra,))])
                factors.append(Stored("w", f"W{index}", high=high, low=low))
        if shared == summed and shared:
            publics.append(eq_factor(join_point(parts, shared)))
        elif shared:  # a grouped convolution: eq(tau_g, g) on the block's high letters, 1 on the rest
            publics.append(_high_eq_factor(join_point(parts, shared), k - sum(_bits(sizes[l]) for l in shared), k))
        terms = [Term(self.one, tuple(publics), tuple(factors), k)]
        if op.has_bias:
            sample = _SAMPLE[:len(op.shape)]
            out_letters = "b" + sample
            out_parts = split_point(tau, out_letters, s.letter_bits(out_letters, s.padded(op.output)).get)
            bias_letters = op.bias_letters
            valid = F.ext_one()
            for l, n in zip(out_letters, (s.batch, *op.shape)):
                if l not in bias_letters:
                    valid = F.ext_mul(valid, prefix_sum_of_eq(out_parts[l], n))
            slot = self.ch.layouts["w"].slot(f"b{index}")
            point = join_point(out_parts, bias_letters)
            point = np.concatenate([point, F.ext_zero((slot.elem_vars - point.shape[0],))])
            terms.append(Term(valid, (eq_factor(point),), (Stored("w", f"b{index}"),), slot.elem_vars))
        self.requantized(index, op, terms, F.ext_zero(), None, tau)

    def bilinear(self, index: int, op) -> None:
        """acc = einsum(X1, X2) of two computed tensors (attention's q k^T and its weighted sum): the layer
        relation's accumulator term sum_(b S C) eq(tau_(b S), (b, S)) X1(b, S, C, tau_1) X2(b, S, C, tau_2), the
        operands laid out b, shared S, contracted C, own letters (:func:`proofs.graph_quantize.bilinear_layout`,
        checked by the validator), so b S C is one block of both, their own letters fixed at the output's tau."""
        s = self.s
        left, right, out = bilinear_terms(op.equation)
        shared = "".join(l for l in left[1:] if l in right and l in out)
        block = "b" + shared + "".join(l for l in left[1:] if l in right and l not in out)
        if all(self.is_public(t) for t in op.inputs):
            raise ModelError(f"{op.name}: a product of two public tensors is a public value: not provable with hidden "
                             f"weights (use --public-weights)")
        sizes = dict(zip(left[1:] + right[1:], s.q.shapes[op.inputs[0]] + s.q.shapes[op.inputs[1]]))
        bits = {l: _bits(sizes[l]) for l in sizes}
        bits["b"] = _bits(s.pb)
        tau = self.ch.point(f"graph.layer{index}", s.vars(op.output))
        parts = split_point(tau, out, {l: bits[l] for l in out}.get)
        for letter in left + right:  # a letter on one operand only (size 1): no variable
            parts.setdefault(letter, F.ext_zero((0,)))
        k = sum(bits[l] for l in block)
        factors, publics = [], []
        for letters, tensor in ((left, op.inputs[0]), (right, op.inputs[1])):
            low = join_point(parts, letters[len(block):]) if len(letters) > len(block) else None
            factor = self.operand(tensor, None, low, k)
            (publics if isinstance(factor, Public) else factors).append(factor)
        high = sum(bits[l] for l in "b" + shared)
        if high:
            point = join_point(parts, "b" + shared)
            publics.append(eq_factor(point) if high == k else _high_eq_factor(point, k - high, k))
        self.requantized(index, op, [Term(self.one, tuple(publics), tuple(factors), k)], F.ext_zero(), None, tau)

    # -- lookups (LogUp, Haboeck 2022, with committed inverses) ------------------------------------------
    def lookup_store(self) -> None:
        """alpha, beta drawn after the proof store (the multiplicities m and every stored tensor), then the lookup
        store of the inverses H, G (:func:`lookup_layout`): the prover commits it, the verifier reads and checks
        its shape; a dry run (the shape channels) commits nothing."""
        self.alpha, self.beta = self.ch.point("graph.lookups", 2)
        if isinstance(self.ch, ShapeChannel):
            return
        layout = self.ch.layouts["q"]
        basefold = isinstance(self.ch, BasefoldChannel)
        rows = None if basefold else lookup_rows(self.s, self.ch.params)
        if self.ch.proving:
            tables = {}
            for index in self.s.lookups:
                tables.update(self.inverse_tables(index))
            if self.s.range_ops:
                tables.update(self.range_inverse_tables())
            if basefold:  # a hiding Basefold store of its own, opened in the proof's one batch (open_all)
                commitment, witness, _, opener = commit_hosted(self.ch.plans["q"], tables, self.ch.params)
                self.ch.openers["q"] = opener
            else:
                commitment, witness = commit_store(layout, tables, store_params(layout, self.ch.params, rows),
                                                   log_rows=rows)
            self.ch.items.append(commitment)
            self.ch.witnesses["q"] = witness
        elif basefold:
            commitment = self.ch._next(BZ.HidingBasefoldCommitment, "lookup store")
            require_basefold_store(commitment, self.ch.params, self.ch.plans["q"], "lookup store")
        else:
            commitment = self.ch._next(HidingCommitment, "lookup store")
            check_store_commitments({"q": layout}, {"q": commitment}, {"q": rows}, self.ch.params, None, "lookup store")
        self.ch.commitments["q"] = commitment
        self.ch.transcript.absorb("lookup store", commitment.to_bytes())

    def denominators(self, a, b) -> np.ndarray:
        """beta + a + alpha b over field tables a, b (F_p4)."""
        return F.ext_add(F.ext_add(F.ext_mul_base(self.alpha[None], b), F.ext_from_base(a)), self.beta[None])

    def table_denominators(self, index: int) -> np.ndarray:
        inputs, outputs = self.s.lookup_table(index)
        return self.denominators(F.to_field(inputs), F.to_field(outputs))

    def inverse_tables(self, index: int) -> dict:
        """The prover's H = S / (beta + X + alpha Y) and G = m / (beta + t + alpha T), coordinates as base tables."""
        op, witness = self.s.q.ops[index], self.ch.witnesses["p"]

        def table(tensor):
            name = self.s.name(tensor)
            return self.public[name] if name in self.public else witness.tables[f"a.{name}"]

        selector = self.s.inside(op.output).astype(np.uint64)
        h = F.ext_mul_base(F.ext_inv(self.denominators(table(op.inputs[0]), table(op.output))), selector)
        g = F.ext_mul_base(F.ext_inv(self.table_denominators(index)), witness.tables[f"m.{index}"])
        return {f"h.{index}": np.ascontiguousarray(h.T).reshape(-1),  # plane k: coordinate k
                f"g.{index}": np.ascontiguousarray(g.T).reshape(-1)}

    def lookup(self, index: int, op) -> None:
        """Every real (x, y) is a row of the public table (LogUp with the inverses committed after alpha, beta):
        sum_e eq(tau, e) H(e) (beta + X(e) + alpha Y(e)) = S~(tau) (with Y zero off its box when stored),
        sum_j eq(tau', j) [G(j) (beta + t_j + alpha T_j) - m(j)] = 0 and sum_e H(e) - sum_j G(j) = 0, so
        sum_e S_e / (beta + x_e + alpha y_e) = sum_j m_j / (beta + t_j + alpha T_j) (error (N + 2^b) / |F|)."""
        s, n, tb = self.s, self.s.vars(op.output), self.s.table_bits(index)
        h, g = self.ext_factor(f"h.{index}"), self.ext_factor(f"g.{index}")
        label = f"graph.lookup{index}"
        tau = self.ch.point(label, n)
        eq = eq_factor(tau)
        operands = []
        for tensor, scale in ((op.inputs[0], self.one), (op.output, self.alpha)):
            operands.append((scale, self.operand(tensor, None, None, n)))
        terms = [Term(self.beta, (eq,), (h,), n)]
        for scale, factor in operands:
            if isinstance(factor, Public):
                terms.append(Term(scale, (eq, factor), (h,), n))
            else:
                terms.append(Term(scale, (eq,), (h, factor), n))
        box = s.box(op.output)
        if not self.is_public(op.output):
            terms += self.protocol.padding(label, self.stored(op.output), box, tau)
        self.relation(label, terms, box_indicator(tau, *box))
        tau = self.ch.point(f"{label}.table", tb)
        eq = eq_factor(tau)
        denominators = Public(lambda: self.table_denominators(index),
                              lambda sigma: mle_evaluate(self.table_denominators(index), sigma[:tb]))
        m = Stored(self.where[f"m.{index}"], f"m.{index}")
        self.relation(f"{label}.table", [Term(self.one, (eq, denominators), (g,), tb),
                                         Term(self.minus, (eq,), (m,), tb)], F.ext_zero())
        self.relation(f"{label}.sum", [Term(self.one, (), (h,), n), Term(self.minus, (), (g,), tb)], F.ext_zero())

    # -- range checks of requantizations (LogUp into the range table, committed inverses) -----------------
    def range_parts(self, index: int, op) -> list:
        """The looked-up values of a range-checked requantization as (constant, factor): D = constant + factor is
        beta + v + alpha w for the remainder (v = rem, w = R; when R > 0) and the output (v = z' + 2^(Q-1), w = Q; a
        stored factor, or the public output's table)."""
        n, parts = self.s.vars(op.output), []
        if op.shift:
            parts.append((F.ext_add(self.beta, F.ext_mul(self.alpha, ext_int(op.shift))),
                          Stored(self.where[f"r.{index}"], f"r.{index}")))
        constant = F.ext_add(F.ext_add(self.beta, ext_int(1 << (op.q_bits - 1))),
                             F.ext_mul(self.alpha, ext_int(op.q_bits)))
        parts.append((constant, self.operand(op.output, None, None, n)))
        return parts

    def range_requantized(self, index, op, terms, claim, tau) -> None:
        """acc - 2^R z' - rem + h = 0 over the output's cube (z' the output, stored or public; with a gamma term
        showing a stored z' zero off its box) and the range check of rem and z' (:meth:`range_check`) at the same
        tau, as ONE relation: the layer's terms plus delta times the check's (delta drawn after both are fixed;
        claim: the layer's + delta). If either zero check fails as a table, its MLE vanishes at tau with
        probability <= n / |F| and the combination then at delta with <= 1 / |F| (the union bound counts the
        relation's n d + n and this 1, :func:`lookup_soundness_error`)."""
        n = self.s.vars(op.output)
        eq = eq_factor(tau)
        z, claim = self.tensor_term(F.ext_neg(ext_int(1 << op.shift)), op.output, tau, claim)
        terms = terms + [z]
        if op.shift:
            terms.append(Term(self.minus, (eq,), (Stored(self.where[f"r.{index}"], f"r.{index}"),), n))
        box = self.s.box(op.output)
        if not self.is_public(op.output):
            terms += self.protocol.padding(f"graph.layer{index}", self.stored(op.output), box, tau)
        delta = self.ch.point(f"graph.range{index}", 1)[0]  # error 1 / |F|
        terms.append(self.range_check(index, op, tau, delta))
        # + h on the real entries only (h S~(tau) in the claim): the padding's acc, z' and rem are all zero
        offset = ext_int(1 << (op.shift - 1) if op.shift else 0)
        indicator = box_indicator(tau, *box)
        self.relation(f"graph.layer{index}", terms,
                      F.ext_add(F.ext_sub(claim, F.ext_mul(offset, indicator)), F.ext_mul(delta, indicator)))

    def range_check(self, index: int, op, tau, scale) -> Term:
        """scale sum_e eq(tau, e) H(e) prod_i D_i(e), whose value is scale S~(tau) (S the output's real box) when
        H = S / prod_i D_i on every entry of the output's padded cube: the real entries are range-checked and H is
        zero in the padding (whose z' is zero, checked by the layer's padding terms, and whose rem is zero by the
        layer relation, which adds h on the real entries only), so a store may leave the padding out (the box).
        H, the F_p4 inverse committed in the lookup store as four coordinate planes. Degree: eq, H and up to two
        stored factors."""
        n = self.s.vars(op.output)
        eq = eq_factor(tau)
        parts = self.range_parts(index, op)
        h = self.ext_factor(f"rh.{index}")
        publics, stored, offsets = [eq], [h], [None]
        for constant, factor in parts:  # prod_i (c_i + f_i): each an affine factor (a term's offset)
            if isinstance(factor, Public):
                publics.append(_shifted_public(factor, constant))
            else:
                stored.append(factor)
                offsets.append(constant)
        return Term(scale, tuple(publics), tuple(stored), n, tuple(offsets))

    def ext_factor(self, name: str) -> Stored:
        """An F_p4 table stored as its four coordinate planes, as one factor: sum_k u^k H_k."""
        return Stored(self.where[name], name, planes=_UNITS)

    def range_denominators(self) -> np.ndarray:
        values, tags = self.s.range_table()
        return self.denominators(F.to_field(values), F.to_field(tags))

    def range_inverse_tables(self) -> dict:
        """The prover's H_i = 1 / prod D_i per range-checked op and G = m / (beta + v + alpha w) over the table."""
        witness = self.ch.witnesses["p"]
        out = {}
        for index in self.s.range_ops:
            op = self.s.q.ops[index]
            product = None
            for constant, factor in self.range_parts(index, op):
                table = witness.tables[factor.name] if isinstance(factor, Stored) else factor.table()
                d = F.ext_add(F.ext_from_base(table) if table.ndim == 1 else table, constant[None])
                product = d if product is None else F.ext_mul(product, d)
            inverse = F.ext_mul_base(F.ext_inv(product), self.s.inside(op.output).astype(np.uint64))
            out[f"rh.{index}"] = np.ascontiguousarray(inverse.T).reshape(-1)  # plane k: coordinate k
        g = F.ext_mul_base(F.ext_inv(self.range_denominators()), witness.tables[RANGE_M])
        out[RANGE_G] = np.ascontiguousarray(g.T).reshape(-1)
        return out

    def range_table(self) -> None:
        """sum_j eq(tau, j) [G(j) (beta + v_j + alpha w_j) - m(j)] = 0 over the range table, and
        sum_i sum_e H_i(e) sum_a prod_(b != a) D_ib(e) - sum_j G(j) = 0: with every H_i = 1 / prod D_i, the sum of
        1 / D over every looked-up (value, width) equals sum_j m_j / (beta + v_j + alpha w_j), so each is a table row
        (error (lookups + rows) / |F|, :func:`lookup_soundness_error`)."""
        tb = self.s.range_bits
        label = "graph.range.table"
        tau = self.ch.point(label, tb)
        eq = eq_factor(tau)
        denominators = Public(self.range_denominators,
                              lambda sigma: mle_evaluate(self.range_denominators(), sigma[:tb]))
        g = self.ext_factor(RANGE_G)
        m = Stored(self.where[RANGE_M], RANGE_M)
        self.relation(label, [Term(self.one, (eq, denominators), (g,), tb), Term(self.minus, (eq,), (m,), tb)],
                      F.ext_zero())
        terms = []
        for index in self.s.range_ops:
            op = self.s.q.ops[index]
            n, parts = self.s.vars(op.output), self.range_parts(index, op)
            h = self.ext_factor(f"rh.{index}")
            if len(parts) == 1:  # sum H
                terms.append(Term(self.one, (), (h,), n))
                continue
            for constant, factor in parts:  # sum H (D_1 + D_2): two terms of affine factors
                if isinstance(factor, Public):
                    terms.append(Term(self.one, (_shifted_public(factor, constant),), (h,), n))
                else:
                    terms.append(Term(self.one, (), (h, factor), n, (None, constant)))
        terms.append(Term(self.minus, (), (g,), tb))
        self.relation("graph.range.sum", terms, F.ext_zero())

    def input_range(self) -> None:
        """A private input: X - rebuilt(bits) + h = 0 with its bits checked as every op's (X within
        :func:`input_decomposition`'s range), and X = 0 off its real box (its padding, as a select's)."""
        s, name = self.s, self.s.input_name
        n, spec = s.vars(name), input_decomposition(s.q)
        tau = self.ch.point("graph.input", n)
        eq, x = eq_factor(tau), self.stored(name)
        terms = [Term(self.one, (eq,), (x,), n)]
        terms += [Term(F.ext_neg(c), (eq,), (part,), n) for c, part in self.protocol.rebuilt(0, INPUT_BITS[3:], spec)]
        terms.append(Term(ext_int(spec.offset), (), (), 0))
        box = s.box(name)
        terms += self.protocol.padding("graph.input", x, box, tau)
        self.relation("graph.input", terms, F.ext_zero())

    def square(self, index: int, op) -> None:
        """acc = X * X entrywise: the layer relation's accumulator term sum_e eq(tau, e) X(e) X(e) (degree 3;
        X's value at the sumcheck's point is stated once), or, for a public X, its value moved to the claim."""
        tau = self.ch.point(f"graph.layer{index}", self.s.vars(op.output))
        x = op.inputs[0]
        if self.is_public(x):
            table = self.public[self.s.name(x)]
            value = F.ext_zero() if table is None else mle_evaluate(F.mul(table, table), tau)
            self.requantized(index, op, [], F.ext_neg(value), None, tau)
            return
        factor = self.stored(x)
        term = Term(self.one, (eq_factor(tau),), (factor, factor), tau.shape[0])
        self.requantized(index, op, [term], F.ext_zero(), None, tau)

    def patch_gather(self, index, tau, letters, view_real, view_padded) -> np.ndarray:
        """G_tau over X's padded layout: sum of eq(tau, v) over the real view entries v gathering from p."""
        s, op = self.s, self.s.q.ops[index]
        x = op.inputs[0]
        x_real, x_padded = s.real(x), s.padded(x)
        positions = _positions(x_real, x_padded).reshape(x_real) + 1  # 0: the zero padding of the window
        view = _view_tables(s, index, positions)
        p_positions = _positions(view_real, view_padded)
        valid = view.reshape(-1) > 0
        weights = eq_table(tau)[p_positions[valid]]
        gather = np.zeros((math.prod(x_padded), F.EXT_DEGREE), dtype=np.uint64)
        np.add.at(gather, view.reshape(-1)[valid] - 1, weights)  # < kh kw 2^31 per entry: no overflow
        return gather % np.uint64(F.P)

    def public_view(self, index, x_table, view_padded) -> np.ndarray:
        """The padded view table of a public X (field table over X's padded layout)."""
        s, x = self.s, self.s.q.ops[index].inputs[0]
        real = s.real(x)
        values = x_table.reshape(s.padded(x))[tuple(slice(0, n) for n in real)].astype(np.int64)
        view = _view_tables(s, index, values)
        table = np.zeros(view_padded, dtype=np.uint64)
        table[tuple(slice(0, n) for n in view.shape)] = view
        return table.reshape(-1)

    def patch_gather_eval(self, index, tau, letters, view_real, sigma) -> np.ndarray:
        """G_tau~(sigma) without G (the verifier's side): eq(tau, v) factors over P's letters and
        eq(sigma, gather(v)) = eq(sigma_b, b) eq(sigma_c, c) eq(sigma_h, row(u, i)) eq(sigma_w, col(v, j)) (zero
        where the window reads padding), so the sum over the real view is a product of four small sums,
        O(B + C + kh Ho + kw Wo) (G groups: channel g C/G + c, the (g, c) sum over the C channels)."""
        s, op = self.s, self.s.q.ops[index]
        own = (s.batch, *s.q.shapes[op.inputs[0]])  # X's own shape (a free reshape's alias: the same table)
        geometry = PatchGeometry.of(own, op.patches)
        real = dict(zip(letters, view_real))
        t = split_point(tau, letters, s.letter_bits(letters, view_real).get)
        x_bits = dict(zip("bchw", (_bits(n) for n in (s.pb, *own[1:]))))
        sg = split_point(np.asarray(sigma)[:sum(x_bits.values())], "bchw", x_bits.get)
        value = F.ext_one()
        for letter in "bc":
            n, mine = real[letter], eq_table(t[letter])[:real[letter]]
            if letter == "c" and real["g"] > 1:
                mine = F.ext_mul(eq_table(t["g"])[:real["g"], None], mine[None]).reshape(-1, F.EXT_DEGREE)
                n = mine.shape[0]
            value = F.ext_mul(value, F.ext_sum(F.ext_mul(mine, eq_table(sg[letter])[:n]), axis=0))
        for axis, (k_letter, o_letter, x_letter) in enumerate((("u", "i", "h"), ("v", "j", "w"))):
            weights = F.ext_mul(eq_table(t[k_letter])[:real[k_letter], None], eq_table(t[o_letter])[None, :real[o_letter]])
            reads = masked_eq(sg[x_letter], geometry.positions(axis))  # (k, out, 4)
            value = F.ext_mul(value, F.ext_sum(F.ext_mul(weights, reads).reshape(-1, F.EXT_DEGREE), axis=0))
        return value

    def requantized(self, index, op, terms, claim, source=None, tau=None) -> None:
        """The layer relation (terms - rebuilt + h = 0, or source - rebuilt + h) and the select; a range-checked
        op's instead (:meth:`range_requantized`)."""
        spec = _decomposition(op)
        n = self.s.vars(op.output)
        if tau is None:
            tau = self.ch.point(f"graph.layer{index}", n)
        if index in self.s.range_ops:
            if source is not None:  # range_requantized reads terms only: a source would lose its input term
                raise ProofError(f"graph op {index}: a range-checked requantization takes terms, not a source")
            return self.range_requantized(index, op, terms, claim, tau)
        if source is not None:
            term, claim = self.tensor_term(self.one, source, tau, claim)
            terms = [term]
        rebuilt = self.protocol.rebuilt(0, f"fwd{index}", spec)
        eq = eq_factor(tau)
        terms = terms + [Term(F.ext_neg(c), (eq,), (part,), n) for c, part in rebuilt]
        box = self.s.box(op.output)
        # + h on the real entries only (h S~(tau) moved to the claim): the padding's acc and bits are both zero
        claim = F.ext_sub(claim, F.ext_mul(ext_int(spec.offset), box_indicator(tau, *box)))
        self.relation(f"graph.layer{index}", terms, claim)
        quotient = self.protocol.quotient(0, f"fwd{index}", spec)
        sign = self.protocol.sign(0, f"fwd{index}", spec) if spec.relu else None
        tau = self.ch.point(f"graph.select{index}", n)
        if not self.is_public(op.output):
            self.protocol.select(f"graph.select{index}", self.stored(op.output), quotient, sign, tau, box=box)
            return
        eq = eq_factor(tau)
        terms = [Term(c, (eq,), (q,), n) for c, q in quotient]
        if sign is not None:
            scale, factor = sign
            terms += [Term(F.ext_neg(F.ext_mul(scale, c)), (eq,), (factor, q), n) for c, q in quotient]
        self.relation(f"graph.output{index}", terms, self.value(op.output, tau))


# ------------------------------------------------------------------------------------------- objects
@dataclass(frozen=True, eq=False)
class HidingGraphCommitment:
    """The public statement of a hiding graph commitment: the quantized structure and the model's copies."""

    structure: QuantizedGraph
    weights: Reusable

    KIND = "proofs.HidingGraphCommitment"

    @property
    def zk(self) -> bool:
        return True

    def statement_bytes(self) -> bytes:
        return self.to_bytes()

    @functools.cached_property
    def statement_digest(self) -> bytes:
        """SHA3-256 of :meth:`statement_bytes` (structure, every copy, their agreement proof: about a megabyte),
        computed once per commitment object: what each proof's transcript absorbs."""
        return hashlib.sha3_256(self.statement_bytes()).digest()

    def to_bytes(self) -> bytes:
        writer = ByteWriter(COMMITMENT_MAGIC, FORMAT_VERSION)
        writer.text(self.structure.public_text())
        writer.blob(self.weights.to_bytes())
        return to_record(self.KIND, writer.getvalue())

    @classmethod
    def from_bytes(cls, data) -> "HidingGraphCommitment":
        return parse_nested(cls._parse, from_record(data, cls.KIND, "hiding graph commitment"),
                            "hiding graph commitment")

    @classmethod
    def _parse(cls, data) -> "HidingGraphCommitment":
        reader = ByteReader(data, COMMITMENT_MAGIC, FORMAT_VERSION, "hiding graph commitment")
        structure = QuantizedGraph.from_public_text(reader.text(), "hiding graph commitment")
        weights = parse_nested(Reusable.from_bytes, reader.blob(), "model copies")
        reader.finish()
        return cls(structure, weights)

    def soundness_bits(self, batch: int = 1, private_input: bool = False) -> float:
        return soundness_bits(self, batch, private_input=private_input)


@dataclass(frozen=True, eq=False)
class HidingGraphProof:
    """The claimed output (batch, prod of the output shape) and the relation proof (store commitments, items)."""

    output: np.ndarray
    relations: TrainingProof

    KIND = "proofs.HidingGraphProof"

    def to_bytes(self) -> bytes:
        writer = ByteWriter(PROOF_MAGIC, PROOF_VERSION)
        writer.i64_array(np.asarray(self.output, dtype=np.int64).reshape(len(self.output), -1))
        writer.blob(self.relations.to_bytes())
        return to_record(self.KIND, writer.getvalue())

    @classmethod
    def from_bytes(cls, data) -> "HidingGraphProof":
        return parse_nested(cls._parse, from_record(data, cls.KIND, "hiding graph proof"), "hiding graph proof")

    @classmethod
    def _parse(cls, data) -> "HidingGraphProof":
        reader = ByteReader(data, PROOF_MAGIC, PROOF_VERSION, "hiding graph proof")
        output = reader.i64_array()
        relations = parse_nested(TrainingProof.from_bytes, reader.blob(), "relation proof")
        reader.finish()
        return cls(output, relations)


def _layouts(shapes: Shapes, q: QuantizedGraph) -> dict:
    layouts = {"w": model_layout(q), "p": proof_layout(shapes)}
    if shapes.lookups or shapes.range_ops:
        layouts["q"] = lookup_layout(shapes)
    return layouts





def lookup_layout(shapes: Shapes) -> StoreLayout:
    """The lookup store, committed after the lookups' challenges: per lookup op its inverses H = S / (beta + X +
    alpha Y) over the output's padded layout and G = m / (beta + t + alpha T) over the table, each as its four
    base-field coordinate planes (slots h.i, g.i of four planes each; one factor sum_k u^k H_k in a relation)."""
    slots = []
    for index in shapes.lookups:
        output = shapes.q.ops[index].output  # four coordinate planes, zero outside the output's box
        slots.append(Slot(f"h.{index}", shapes.vars(output), 2, tensor_box(shapes, output)))
        slots.append(Slot(f"g.{index}", shapes.table_bits(index), 2))
    for index in shapes.range_ops:  # the range lookups' 1 / (D_r D_z) per entry, then the range table's G: an F_p4
        # table as one slot of four planes (its coordinates), read as one factor sum_k u^k H_k (planes contracted)
        output = shapes.q.ops[index].output
        slots.append(Slot(f"rh.{index}", shapes.vars(output), 2, tensor_box(shapes, output)))
    if shapes.range_ops:
        slots.append(Slot(RANGE_G, shapes.range_bits, 2))
    return StoreLayout(tuple(slots), True)


def _public_tables(shapes: Shapes, x_int, output):
    """(input table, or None for a private input; output table), padded."""
    q = shapes.q
    x_table = None if shapes.private_input else _field(x_int, shapes.padded(q.input))
    return x_table, _field(output.reshape(shapes.real(q.output)), shapes.padded(q.output))


def _transcript(commitment, x_int, output, proof_commitments, copy: int) -> Transcript:
    """The statement: model, copy, the input (x_int None: a private input, its absence stated), output, stores."""
    transcript = Transcript(TRANSCRIPT_LABEL)
    transcript.absorb("model", commitment.statement_digest)
    transcript.absorb("copy", int(copy))
    if x_int is None:
        transcript.absorb("private input", 1)
    else:
        transcript.absorb("input", np.asarray(x_int, dtype=np.int64).reshape(-1))
    transcript.absorb("output", np.asarray(output, dtype=np.int64).reshape(-1))
    transcript.absorb("proof commitments", [c.to_bytes() for c in proof_commitments])
    return transcript


LARGE_PROOF_ENTRIES = 1 << 19  #: proof and lookup stores (batch 1) from which the default rate is 1/4


def default_graph_params(qgraph: QuantizedGraph) -> HidingParams:
    """The default hiding Ligero parameters of a graph proof: :func:`proofs.layers.network_zk.default_params`
    (rate 1/2), at rate 1/4 when the proof's stores hold at least LARGE_PROOF_ENTRIES entries at batch 1. An
    opening's bytes grow as the square root of its column queries (about 256 at rate 1/2, 154 at rate 1/4 for the
    same query bits), the encoding as the codeword; measured (issue 34, one core, load ~6): the GPT-2-size block's
    proof 4.84 -> 3.80 MB for 7.0-7.9 -> 8.1-9.3 s of prove CPU (peak RSS 1.6 -> 2.2 GB), BERT-tiny's 1.90 ->
    1.47 MB, the 16 x 32 layer's 1.18 -> 0.92 MB at about the same CPU time."""
    params = default_params()
    try:
        shapes = Shapes(qgraph, 1)
        layouts = [proof_layout(shapes)] + ([lookup_layout(shapes)] if shapes.lookups or shapes.range_ops else [])
    except (ProofError, ModelError):  # nothing to store: the commitment refuses the graph with its own reason
        return params
    entries = sum(slot.size for layout in layouts for slot in layout.slots)
    return dataclasses.replace(params, rate_inv=4) if entries >= LARGE_PROOF_ENTRIES else params


#: the hiding Basefold candidates of :func:`graph_basefold_params` for graphs with a store of at least
#: 2^TAIL_MIN_VARS entries, smallest proofs first: (rate_inv, max_log_codeword, arity, final_vars, grinding_bits,
#: fold_grinding_bits). The first two grind before every fold (:mod:`proofs.basefold`, ``fold_grinding_bits``), which
#: lets rows of 2^20-2^22 symbols reach 100 bits (without it they give 97-99.8 bits): a query opens a few symbols per
#: store instead of 2^11+
GRAPH_BASEFOLD_CANDIDATES = ((4, 20, 3, 10, 16, 12), (2, 22, 5, 10, 16, 12), (4, 16, 3, 10, 12, 0),
                             (2, 16, 3, 10, 12, 0))


def graph_basefold_params(qgraph: QuantizedGraph, batch: int = 1):
    """The hiding Basefold parameters of a graph proof (``--scheme basefold``): :func:`proofs.layers.network_zk.
    basefold_params` (random slots, 16-32x a store) when every store is small; else the "tail" layout (one random
    slot and a random tail per large store, a masked batch opening; :mod:`proofs.basefold_zk`) at the first of
    :data:`GRAPH_BASEFOLD_CANDIDATES` whose proof reaches MIN_SOUNDNESS_BITS at ``batch`` (the batch opening's
    field error grows with the stores' rows, :func:`proofs.basefold.batch_security_bits`); ModelError when none
    does (the graph is too large for hiding Basefold over F_p^4). Measured (issue 34, one core, prove CPU), the
    candidates with a proof of work before each fold against the earlier ones (rows of 2^16 symbols, no fold
    grinding), best of 2 in one run at load 6-7: the 16 x 32 layer 0.56 -> 0.41 MB (2.40 -> 2.77 s; hiding Ligero
    0.92 MB), BERT-tiny's layer 0.95 -> 0.50 MB (4.22 -> 4.63 s; Ligero 1.46 MB), both >= 102.8 bits (rows of 2^22
    instead of 2^20: the same bytes, 1.6-1.9x the time); ``benchmarks/transformer_proof.py --gpt2 --scheme basefold``
    at load 4: the GPT-2-small block (stores of 2^24, 2^23, 2^23 entries: rate 1/4 had no room
    for their slot tables, so rate 1/2, rows of 2^22, arity 5, 213 queries) 7.83 -> 0.97 MB (batch opening 0.66 MB),
    20.3 -> 22.2 s prove CPU (load 8-11 before), verify 0.44 s CPU, 102.0 bits per hash (87.4 statistical), peak
    RSS 3.3 -> 4.9 GB: a quarter of hiding Ligero's 3.80 MB (10.1 s, 2.2 GB). With the stores' boxes committed
    (2^23, 2^22, 2^22: :attr:`proofs.relations.StoreLayout.blocks`) the first candidate fits: rate 1/4,
    130 queries, 0.88 MB, 11.9-12.2 s against 21.1-22.1 s before (interleaved, one thread), 101.4 bits; with the
    provers' loops in functions of their own and the programs' memory settings (:func:`hezk.memory.for_a_program`)
    9.4 s, the first prove of its process (``benchmarks/transformer_proof.py --gpt2 --scheme basefold``)."""
    small = basefold_params()
    shapes = Shapes(qgraph, batch)
    layouts = _layouts(shapes, qgraph)
    if max(layout.num_vars for layout in layouts.values()) < BZ.TAIL_MIN_VARS:
        return small
    _, plans, relation_shapes, keys = _basefold_structure(shapes)
    bits = 0.0
    for rate_inv, log_codeword, arity, final_vars, grinding_bits, fold_bits in GRAPH_BASEFOLD_CANDIDATES:
        params = BZ.HidingBasefoldParams(B.BasefoldParams(  # queries: the fewest for the code's query bits
            rate_inv=rate_inv, arity=arity, final_vars=final_vars, max_log_codeword=log_codeword,
            grinding_bits=grinding_bits, fold_grinding_bits=fold_bits), layout="tail")
        try:
            weights = BZ.HidingBasefoldCommitment(B.BasefoldCommitment(
                bytes(32), BZ.inner_vars(plans["w"].num_vars, params), params.base), plans["w"].num_vars, 1, "tail")
            error = _basefold_error(_Copies((weights,)), [plans[k] for k in ("p", "q") if k in plans],
                                    relation_shapes, keys, params)
        except ProofError:  # a store too large for the code's domain at this rate
            continue
        error += lookup_soundness_error(shapes) if "q" in plans else 0.0
        bits = -math.log2(error)
        if bits >= MIN_SOUNDNESS_BITS:
            return params
    sizes = ", ".join(f"{key} 2^{layout.num_vars}" for key, layout in layouts.items())
    raise ModelError(f"the stores of this graph at batch {batch} ({sizes} entries) are too large for hiding Basefold "
                     f"over F_p^4 (its batch opening's field error grows with the stores; best of "
                     f"{len(GRAPH_BASEFOLD_CANDIDATES)} parameter sets: {bits:.1f} bits < {MIN_SOUNDNESS_BITS}): use "
                     f"the default hiding Ligero commitment (--scheme ligero)")


@dataclass(frozen=True)
class _Copies:
    copies: tuple


class HidingGraphNetwork:
    """The prover of zero-knowledge graph proofs: ``max_proofs`` hiding copies of the weights (each proof uses
    one: commit again when they are spent)."""

    def __init__(self, qgraph: QuantizedGraph, params: HidingParams | None = None,
                 max_proofs: int = DEFAULT_MAX_PROOFS, state=None, *, progress=None):
        """``progress``: True draws a bar on stderr over the commitment's steps, a callable gets ``(done, total,
        label)``; the commitment is the same either way (its masks come from the same randomness). ``params=None``
        (or "auto"): the default of every command and API (:func:`proofs.pcs.choice.choose_scheme`): hiding Ligero,
        the smaller graph proof (a small CNN: 436 kB against hiding Basefold's 3.7 MB, proved 25x faster), at the
        rate of :func:`default_graph_params`."""
        report = as_progress(progress, "committing")
        if not isinstance(qgraph, QuantizedGraph):
            raise ModelError(f"qgraph must be a QuantizedGraph, got {type(qgraph).__name__}")
        if params is None or (isinstance(params, str) and params == AUTO):  # the one default rule: hiding Ligero
            scheme = choose_scheme(AUTO, strategy="graph", hiding=True)
            params = basefold_params() if scheme == "basefold" else default_graph_params(qgraph)
        if is_basefold(params):
            params = dataclasses.replace(params, openings=1)
        elif not isinstance(params, HidingParams) or not params.hiding:
            raise ModelError(f"params must be hiding HidingParams or HidingBasefoldParams, got {params!r}")
        qgraph.require_private_constants()
        self.qgraph = qgraph
        shapes = Shapes(qgraph, 1)
        _Run(shapes, ShapeChannel(params, _layouts(shapes, qgraph)), None, None).run()  # refuses unsupported ops
        if report is not None:
            report(1, 2, "checked the operators")
        layout = model_layout(qgraph)
        if state is None:  # many copies: shorter rows (network_zk.fit_basefold_rows)
            params = fit_basefold_rows(params, layout, max_proofs)
        if is_basefold(params):
            require_basefold_fits(Shapes(qgraph, 1), params)
        if state is not None:  # prove later against a published commitment (``save_state``)
            commitment, witness = prover_state.load(state, model_tables(qgraph), layout,
                                                    HidingGraphCommitment.from_bytes)
            if commitment.structure.public_text() != qgraph.public_text():
                raise ModelError(f"prover state {state!r} was saved for another quantized model")
            self._weights = (commitment.weights, witness)
        else:
            rows = None if is_basefold(params) else model_rows(qgraph, params)
            self._weights = commit_reusable(layout, model_tables(qgraph), params, max_proofs, rows)
        self.commitment = HidingGraphCommitment(qgraph, self._weights[0])
        if report is not None:
            report(2, 2, "loaded the prover state" if state is not None else f"committed {max_proofs} copies")

    def save_state(self, path) -> None:
        """Write the SECRET prover state (masks, row tails, salts, spent copies) to ``path``, so that
        ``HidingGraphNetwork(qgraph, state=path)`` proves against the same commitment later."""
        prover_state.save(path, self.commitment, self._weights[1], model_layout(self.qgraph))

    @property
    def proofs_left(self) -> int:
        witness = self._weights[1]
        return len(witness.witnesses) - len(witness.spent)

    def state_bytes(self) -> bytes:
        """The SECRET prover state as bytes (what :meth:`save_state` writes; ``state=`` reads them back)."""
        return prover_state.to_bytes(self.commitment, self._weights[1], model_layout(self.qgraph))

    def reserve(self, where: str, count: int) -> list:
        """``count`` unused copies, marked spent (in the state file's journal first when read from one)."""
        return self._weights[1].reserve(where, count)

    def prove(self, x, progress=None, private_input: bool = False, copy: int | None = None) -> HidingGraphProof:
        """Prove y = graph(x) with the weights hidden; with ``private_input`` x is hidden too (a stored tensor
        proven within :func:`input_decomposition`'s range; the verifier gets no input: ``verify_graph_zk(c, None,
        proof)``). ``progress``: a callable ``progress(done, total, label)`` or True (a tqdm bar on stderr). ``copy``:
        the hiding copy to use (one :meth:`reserve` handed out; default the next unused one)."""
        progress = as_progress(progress, "proving")
        q = self.qgraph
        x_int = q.quantize_input(x)
        shapes = Shapes(q, x_int.shape[0], private_input)
        if private_input:
            try:
                decompose(x_int.reshape(-1), input_decomposition(q))
            except ModelError:
                half = 1 << (input_decomposition(q).q_bits - 1)
                raise ModelError(f"a private input must lie in [-{half}, {half}) at scale 2^{q.input_frac} (|x| < "
                                 f"{half * 2.0 ** -q.input_frac:g}): its range is proven in "
                                 f"{input_decomposition(q).q_bits} signed bits") from None
        values, accs = q.forward_int(x_int, trace=True)
        for index, op in enumerate(q.ops):  # range check first: an input outside the calibration is refused
            if op.has_bits:
                try:
                    decompose(accs[index].reshape(-1), _decomposition(op))
                except ModelError as error:
                    raise ModelError(f"op {op.name!r}: {error} (an input outside the calibrated range)") from None
        output = values[q.output]
        statement = self._weights[1]
        params = base_params(self.commitment)
        layouts = _layouts(shapes, q)
        tables = proof_tables(shapes, values, accs)
        if is_basefold(params):
            require_basefold_fits(shapes, params)
            return self._prove_basefold(shapes, x_int, output, tables, params, progress, copy)
        structure = _structure(shapes, params)
        log_rows = proof_rows(shapes, params, structure)
        made = commit_store(layouts["p"], {s.name: tables[s.name] for s in layouts["p"].slots},
                            store_params(layouts["p"], params, log_rows), log_rows=log_rows)
        copy = statement.take("HidingGraphNetwork.prove", copy)
        if progress is not None:
            progress(1, 3, "committed the proof's tensors")
        transcript = _transcript(self.commitment, None if private_input else x_int, output, (made[0],), copy)
        witnesses = {"w": statement.witnesses[copy], "p": made[1]}
        channel = Channel(transcript, params, layouts, {k: w.commitment for k, w in witnesses.items()}, witnesses,
                          mask_shapes=structure[1].shapes)
        channel.prior_views = {"w": statement.agreement_views[copy]}
        return _prove_relations(shapes, channel, x_int, output, made[0], copy, progress)

    def _prove_basefold(self, shapes: Shapes, x_int, output, tables, params, progress, copy=None) -> HidingGraphProof:
        """The same relations over hiding Basefold stores: the proof store hosts every relation's mask, and the
        model copy, the proof store and the masks open in ONE batch (:class:`BasefoldChannel`)."""
        layouts, plans = _basefold_structure(shapes)[:2]
        statement = self._weights[1]
        p_tables = {s.name: tables[s.name] for s in layouts["p"].slots}
        p_commitment, p_store, coefficients, p_opener = commit_hosted(plans["p"], p_tables, params)
        copy = statement.take("HidingGraphNetwork.prove", copy)
        if progress is not None:
            progress(1, 3, "committed the proof's tensors")
        transcript = _transcript(self.commitment, None if shapes.private_input else x_int, output, (p_commitment,),
                                 copy)
        w_store = statement.witnesses[copy]
        channel = BasefoldChannel(transcript, params, layouts, plans, {"w": w_store.commitment, "p": p_commitment},
                                  "p", witnesses={"w": w_store, "p": p_store},
                                  openers={"w": w_store.commitment_witness, "p": p_opener},
                                  mask_coefficients=coefficients)
        channel.prior_views = {"w": statement.agreement_views[copy]}
        return _prove_relations(shapes, channel, x_int, output, p_commitment, copy, progress)


def _prove_relations(shapes: Shapes, channel, x_int, output, p_commitment, copy: int, progress) -> HidingGraphProof:
    """Run the relations on ``channel`` (either commitment's), open its stores, and assemble the proof."""
    _Run(shapes, channel, *_public_tables(shapes, x_int, output)).run()
    if progress is not None:
        progress(2, 3, "proved the relations")
    channel.open_all()
    if progress is not None:
        progress(3, 3, "opened the stores")
    return HidingGraphProof(output.reshape(len(output), -1).copy(),
                            TrainingProof("aggregate", (p_commitment,), tuple(channel.items), copy))


def require_basefold_fits(shapes: Shapes, params) -> None:
    """Refuse (ModelError) a proof store too large for a hiding Basefold slot table (:func:`proofs.basefold_zk.shape`:
    the table with its random slots must fit BabyBear's 2-adic domain at the code's rate), or a graph with a lookup
    (its store of inverses is committed mid-proof: the Ligero channel's)."""
    _, plans, _, _ = _basefold_structure(shapes)
    for key, what in (("p", "proof store"), ("q", "lookup store")):
        if key not in plans:
            continue
        try:
            BZ.shape(plans[key].num_vars, params)
        except ProofError:
            raise ModelError(f"the {what} of this graph at batch {shapes.batch} (2^{plans[key].num_vars} entries) is "
                             f"too large for hiding Basefold at rate 1/{params.base.rate_inv} (its slot table is 16x "
                             f"the store): use the default hiding Ligero commitment (--scheme ligero), the tail "
                             f"layout (graph_basefold_params), or a smaller batch") from None


def _basefold_error(weights, store_plans, relation_shapes, keys: int, params) -> float:
    """A hiding Basefold graph proof's error: per relation its point, rounds and rho ((n + n d + 1) / |F|), the
    ``keys`` bit-check weights, and ONE batch opening of a model copy (of ``weights``) and the proof's stores
    (``store_plans``: the proof store, and the lookup store when the graph has lookups;
    :func:`proofs.basefold_zk.batch_error`; each store at the size :func:`proofs.basefold_zk.inner_vars` gives
    without a free end, the larger when they differ, so the figure is an upper bound)."""
    field = float(F.P) ** F.EXT_DEGREE
    error = (keys + sum(n + n * d + 1 for n, d in relation_shapes)) / field
    stores = [BZ.HidingBasefoldCommitment(B.BasefoldCommitment(bytes(32), BZ.inner_vars(plan.num_vars, params),
                                                               params.base), plan.num_vars, 1, params.layout)
              for plan in store_plans]
    return error + BZ.batch_error([weights.copies[0]] + stores)


def _basefold_structure(shapes: Shapes):
    """(layouts, plans, relation shapes, decomposition keys) of a hiding Basefold proof, from the public shapes
    alone: the model copy "w", and the proof store "p" hosting every relation's zero-knowledge mask (their
    (variables, degree) from one dry run of the relations)."""
    return _basefold_structure_of(shapes.q.public_text(), shapes.batch, shapes.private_input)


@functools.lru_cache(maxsize=16)
def _basefold_structure_of(text: str, batch: int, private_input: bool):
    """:func:`_basefold_structure` memoised by the public structure's text (prover and verifier rebuild it for
    every proof; the verifier's structure is parsed from bytes each time)."""
    shapes = Shapes(QuantizedGraph.from_public_text(text, "hiding graph structure"), batch, private_input)
    layouts, channel = _structure(shapes, default_params())
    plans = {"w": StorePlan(layouts["w"]), "p": StorePlan(layouts["p"], tuple(channel.shapes))}
    if "q" in layouts:  # the lookup store: committed after alpha, beta, opened in the same batch
        plans["q"] = StorePlan(layouts["q"])
    return layouts, plans, tuple(channel.shapes), len(decomposition_keys({"p": layouts["p"]}))


def _structure(shapes: Shapes, params: HidingParams):
    """One dry run of the relations on the public shapes: (layouts, channel with each relation's shape and the
    stated values' slots), shared by the soundness count and both stores' row choices; memoised by the public
    structure's text (:func:`_structure_of`, read only; a test that patches the protocol clears it)."""
    return _structure_of(shapes.q.public_text(), shapes.batch, shapes.private_input, params)


@functools.lru_cache(maxsize=16)
def _structure_of(text: str, batch: int, private_input: bool, params: HidingParams):
    shapes = Shapes(QuantizedGraph.from_public_text(text, "hiding graph structure"), batch, private_input)
    layouts = _layouts(shapes, shapes.q)
    channel = StatedViews(params, layouts)
    _Run(shapes, channel, None, None).run()
    return layouts, channel


def _stated(structure, store: str) -> tuple:
    layouts, channel = structure
    return layouts[store], [name for key, name in channel.stated if key == store]


def proof_rows(shapes: Shapes, params: HidingParams, structure=None) -> int:
    """log_rows of the proof store minimising its opening's bytes for the values the relations state on it
    (:func:`proofs.layers.network_zk.best_rows`), from the public shapes alone (``structure``: a
    :func:`_structure` of ``shapes`` already run)."""
    return best_rows(*_stated(structure or _structure(shapes, params), "p"), params)


def lookup_rows(shapes: Shapes, params: HidingParams, structure=None) -> int:
    """log_rows of the lookup store (:func:`lookup_layout`), as :func:`proof_rows`."""
    return best_rows(*_stated(structure or _structure(shapes, params), "q"), params)


def lookup_soundness_error(shapes: Shapes) -> float:
    """The LogUp identities' (N + 2^b) / |F_p^4| per lookup (Haboeck 2022, Lemma 5; Schwartz-Zippel over alpha,
    beta): the relations themselves are in the union bound. The lemma needs fewer than p looked-up values per table
    (a value outside the table looked up p times has multiplicity 0 mod p): a lookup of N >= p values (a large
    private-input batch) errs with probability 1, and the figure is then 1 (the verifier's minimum refuses it)."""
    counts = [1 << shapes.vars(shapes.q.ops[i].output) for i in shapes.lookups]
    error = sum(n + (1 << shapes.table_bits(i)) for n, i in zip(counts, shapes.lookups))
    if shapes.range_ops:  # one identity over every range check's looked-up values (1 or 2 per entry) and the table,
        # and each check's combination with its layer relation (delta: 1 / |F|)
        counts.append(sum((1 + bool(shapes.q.ops[i].shift)) << shapes.vars(shapes.q.ops[i].output)
                          for i in shapes.range_ops))
        error += counts[-1] + (1 << shapes.range_bits) + len(shapes.range_ops)
    if any(n >= F.P for n in counts):
        return 1.0
    return error * 2.0 ** -F.EXT_BITS


def model_rows(q: QuantizedGraph, params: HidingParams, structure=None) -> int:
    """log_rows of the model's copies: the same for the values one proof states on the model store (the same at
    any batch: ``structure`` may be that of any batch) and the agreement proof's one value per slot."""
    layout, names = _stated(structure or _structure(Shapes(q, 1), params), "w")
    return best_rows(layout, names + [slot.name for slot in layout.slots], params)


def soundness_bits(commitment: HidingGraphCommitment, batch: int = 1, structure=None,
                   private_input: bool = False) -> float:
    """-log2 of the union bound over the relations, their masks and the openings, plus the copies' agreement proof
    (as network_zk)."""
    shapes = Shapes(commitment.structure, batch, private_input)
    params = base_params(commitment)
    agreement = copies_agreement_error(commitment.weights, model_layout(shapes.q), params)
    if is_basefold(params):  # one batch opening of the model copy, the proof store (masks included), the lookups'
        _, plans, relation_shapes, keys = _basefold_structure(shapes)
        error = _basefold_error(commitment.weights, [plans[k] for k in ("p", "q") if k in plans], relation_shapes,
                                keys, params)
        if "q" in plans:
            error += lookup_soundness_error(shapes)
        return -math.log2(error + agreement)
    layouts, channel = structure or _structure(shapes, params)
    keys = decomposition_keys({"p": layouts["p"]})
    error = union_bound_error(channel.shapes, len(keys), {"w": layouts["w"]}, params,
                              {"w": commitment.weights.params}, hosted_masks=True)
    shape = HidingCommitment(b"", layouts["p"].num_vars, proof_rows(shapes, params, (layouts, channel)), params)
    error += 2.0 ** -shape.security_bits + opening_field_error(shape)
    if shapes.lookups or shapes.range_ops:  # the lookup store's opening and the LogUp identities
        shape = HidingCommitment(b"", layouts["q"].num_vars, lookup_rows(shapes, params, (layouts, channel)), params)
        error += 2.0 ** -shape.security_bits + opening_field_error(shape) + lookup_soundness_error(shapes)
    return -math.log2(error + agreement)


#: the proof kind named by :func:`verify_graph_zk`'s verdicts and rejections
KIND = "zero-knowledge graph inference"


def verify_graph_zk(commitment, x, proof) -> Verdict:
    """Verify a zero-knowledge graph proof of y = graph(x) for the public input ``x``, or, with ``x`` None, for a
    private input (some x within :func:`input_decomposition`'s range, hidden); returns a
    :class:`~proofs.verdict.Verdict` (truthy; ``.output`` the proven output, int64, batch first;
    ``.soundness_bits``). Raises only ProofRejected (``where`` beginning "zero-knowledge graph inference proof")."""
    with rejecting(KIND):
        if isinstance(commitment, (bytes, bytearray, memoryview)):
            commitment = HidingGraphCommitment.from_bytes(bytes(commitment))
        if isinstance(proof, (bytes, bytearray, memoryview)):
            proof = HidingGraphProof.from_bytes(bytes(proof))
        output = _verify(commitment, x, proof)
        return Verdict.measured(KIND, output, commitment.soundness_bits, len(output), private_input=x is None)


def _verify(commitment, x, proof) -> np.ndarray:
    where = "statement"
    require(isinstance(commitment, HidingGraphCommitment), "commitment is not a HidingGraphCommitment", where)
    require(isinstance(proof, HidingGraphProof) and isinstance(proof.relations, TrainingProof),
            "proof is not a HidingGraphProof", where)
    q = commitment.structure
    validate_structure(q, "hiding graph commitment")  # parsed ones were; an object handed in is checked here
    if x is None:  # a private input: the batch is the claimed output's
        x_int = None
        require(isinstance(proof.output, np.ndarray) and proof.output.ndim == 2 and 1 <= proof.output.shape[0] <=
                MAX_BATCH, f"claimed output of shape {getattr(proof.output, 'shape', None)}: expected (batch <= "
                f"{MAX_BATCH}, outputs)", where)
        batch = proof.output.shape[0]
    else:
        try:
            x_int = q.quantize_input(x)
        except ModelError as error:
            raise ProofRejected(str(error), "input") from None
        x_int = require_bounded(x_int, q.input_bound, "input", "input")
        batch = x_int.shape[0]
    shapes = Shapes(q, batch, x is None)
    out_real = shapes.real(q.output)
    require_bounded(proof.output, q.bounds[q.output], "claimed output", where, shape=(batch, math.prod(out_real[1:])))
    params = base_params(commitment)
    basefold = is_basefold(params)
    structure = _basefold_structure(shapes)[:2] if basefold else _structure(shapes, params)
    bits = soundness_bits(commitment, batch, None if basefold else structure, x is None)
    require(bits >= MIN_SOUNDNESS_BITS, f"the statement's soundness is {bits:.1f} bits < {MIN_SOUNDNESS_BITS}", where)
    layouts = structure[0]
    verify_reusable(layouts["w"], commitment.weights, dataclasses.replace(params, openings=1), f"{where}: model")
    relations = proof.relations
    require(0 <= relations.copy < len(commitment.weights), f"copy {relations.copy} of a model committed "
            f"{len(commitment.weights)} times", where)
    require(len(relations.commitments) == 1, f"{len(relations.commitments)} proof commitments, expected 1", where)
    if basefold:
        return _verify_basefold(commitment, shapes, x_int, proof, params, structure[1], where)
    commitments = {"w": commitment.weights.copies[relations.copy], "p": relations.commitments[0]}
    rows = {"w": model_rows(q, params, structure if batch == 1 else None), "p": proof_rows(shapes, params, structure)}
    check_store_commitments({k: layouts[k] for k in commitments}, commitments, rows, params, commitment.weights.params,
                            where)
    transcript = _transcript(commitment, x_int, proof.output, relations.commitments, relations.copy)
    channel = Channel(transcript, params, layouts, commitments, items=relations.items, mask_shapes=structure[1].shapes)
    _Run(shapes, channel, *_public_tables(shapes, x_int, proof.output)).run()
    channel.open_all()
    channel.finish()
    return proof.output.reshape(shapes.batch, *q.output_shape).copy()  # the output's shape, not its alias's


def _verify_basefold(commitment, shapes: Shapes, x_int, proof, params, plans, where: str) -> np.ndarray:
    """The relations over hiding Basefold stores, then ONE batch opening (the copy's commitment, the proof store's
    of the plan's size and the statement's parameters)."""
    relations = proof.relations
    p_commitment = relations.commitments[0]
    require_basefold_store(p_commitment, params, plans["p"], where)
    commitments = {"w": commitment.weights.copies[relations.copy], "p": p_commitment}
    transcript = _transcript(commitment, x_int, proof.output, relations.commitments, relations.copy)
    channel = BasefoldChannel(transcript, params, _layouts(shapes, shapes.q), plans, commitments, "p",
                              items=relations.items)
    _Run(shapes, channel, *_public_tables(shapes, x_int, proof.output)).run()
    channel.open_all()
    channel.finish()
    return proof.output.reshape(shapes.batch, *shapes.q.output_shape).copy()  # the output's shape, not its alias's


__all__ = ["HidingGraphCommitment", "HidingGraphNetwork", "HidingGraphProof", "default_graph_params",
           "graph_basefold_params", "soundness_bits",
           "verify_graph_zk"]
