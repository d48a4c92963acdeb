"""Proofs for a whole model graph (issue 13): y = graph(x) for a public input batch under committed weights.

Statement: a :class:`GraphCommitment` (the model's digest, the quantized graph's public structure from
:mod:`proofs.graph_quantize` and one commitment to every weight and bias, packed as in
:mod:`proofs.layers.packing`), the public integer input batch x and the claimed integer output y.

Layout: every tensor (batch first) is its row-major table with each axis zero-padded to a power of two
(:mod:`proofs.layers.contraction`), so a transpose is a relabelling of the point's coordinates, and a
reshape whose padded layouts agree is free (otherwise a gather sumcheck, :func:`reshape_claim_reduction`).

Protocol (zkDL's layer-by-layer reduction, Sun-Li-Zhang; GKR-style, Fiat-Shamir): the prover commits to
the bits of every requantized tensor (:mod:`proofs.layers.requant`); the verifier draws r and evaluates the
claimed output's MLE at r itself; ops are walked from the last back: a tensor read by several ops has its
claims merged into one (:func:`merge_claims`); zkReLU/requantization reduces a claim on an op's output to
its accumulator by its select (a square's accumulator X * X goes to X by one degree-3 sumcheck,
:func:`square_claim_reduction`), leaving a linear claim on its bits that one sumcheck over the packed bits table
checks for every op at the end, with every entry a bit (:mod:`proofs.layers.relu_batch`); the bias is linear (:func:`bias_claim_reduction`); a Conv or
pool goes to its input by the patch map (:func:`patch_claim_reduction`), other contractions by one
sumcheck (:func:`contraction_claim_reduction`); a residual add sends one operand's value
(y = 2^k1 x1 + 2^k2 x2); a bilinear op (attention's q k^T, a product of two computed tensors) by one
sumcheck of eq(r, shared) x1 x2 over its shared and contracted letters (:func:`contraction_claim_reduction` with the
second operand in the weight's place; degree 3, 2 without shared letters), its claims to both producers; a lookup y = T[x] (Sigmoid, Tanh, Gelu, ...: :func:`proofs.graph_quantize.lookup_table`)
is LogUp-GKR (:mod:`proofs.lookup`): its multiplicities and its output y are committed per proof (one
commitment for every lookup, absorbed before the output point), the claims on y (downstream and the witness
tree's) and on m go to one merge sumcheck and opening of that commitment, x's claim to its producer. The input's claims are checked on x by the verifier, the weight claims by one
batch opening of the weights commitment, the bits' by one opening at the bits sumcheck's point. A pool's kernel is public (:func:`proofs.graph_quantize.public_weight`):
never committed, its claim is settled by the verifier's own MLE evaluation (:func:`settle_public`), so a
prover cannot average with another kernel.

**This protocol reveals the weights** (the opening sends columns of the encoded weight table, as the plain
Network protocol: see :mod:`proofs.layers.network`); it is the ``--public-weights`` mode. The default, with the
weights private, is :mod:`proofs.layers.graph_zk` (the same statement over masked stores).
Padding: the weights' merge sumcheck also shows every weight and bias is zero off its declared box
(:func:`_open_weights`: a gamma-weighted term P T, P = eq(tau, x)(1 - inside(x)) the packed table's form
of :func:`proofs.relations.padding_factor` with one box per weight table: no stated value added), so a model owner
cannot hide extra units there; then a contraction reads an activation's padding only through zero weights, and
the other ops read real entries only, so the output is the declared model's.
Soundness: every sumcheck contributes d k / p^4 (the padding term (n + 1) / p^4), the commitment its own
``security_bits`` (:meth:`GraphCommitment.soundness_bits`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .. import field as F
from ..commit import (MIN_VERIFY_BITS, CommitParams, Commitment, OpeningProof, commit, open_commitment,
                      verify_opening)
from ..errors import ModelError, ProofRejected
from ..verdict import Verdict, rejecting
from ..graph_quantize import QuantizedGraph, lookup_table, public_weight, validate_structure
from ..lookup import LookupProof, lookup_error, multiplicities, prove_lookup, verify_lookup
from ..mle import eq_eval, eq_table, mle_evaluate
from ..progress import as_progress
from ..public_values import require_bounded
from ..proof_format import ByteReader, ByteWriter, from_record, parse_nested, to_record
from ..relations import box_indicator, box_table
from ..sumcheck import SumcheckProof, prove_sumcheck, verify_sumcheck
from ..transcript import Transcript
from .common import Claim, check_ext, require
from .contraction import (ContractionProof, GatherProof, PatchProof, padded_size, bias_claim_reduction,
                          contraction_claim_reduction, join_point, merge_claims, pad_operand, patch_claim_reduction,
                          reshape_claim_reduction, reshape_is_free, split_point, square_claim_reduction,
                          verify_contraction, verify_merge, verify_patches, verify_reshape, verify_square)
from .packing import Packing
from .records import read_nested
from .relu_batch import BitsProof, SelectProof, prove_bits, prove_select, verify_bits, verify_select
from .requant import Decomposition, decompose

TRANSCRIPT_LABEL = "hezk.proofs.graph.v2"
COMMITMENT_MAGIC, PROOF_MAGIC, FORMAT_VERSION = b"HZKGCOM1", b"HZKGPRF1", 1
PROOF_VERSION = 2  # 2: the bits of every op checked by one sumcheck (relu_batch)
MAX_ITEMS = 1 << 16


# --------------------------------------------------------------------------------------------- layout
def _letters(rank: int) -> str:
    """Subscripts of a batch-first tensor of ``rank`` axes: 'b' then sample letters."""
    return "b" + "pqrstuvwxyzacdefghijklmno"[:rank - 1]


def _bits_of(shape) -> dict:
    return {letter: padded_size(n).bit_length() - 1 for letter, n in zip(_letters(len(shape)), shape)}


def _num_vars(shape) -> int:
    return sum(_bits_of(shape).values())


def _table(values) -> np.ndarray:
    """An int64 tensor as its padded field table, flat."""
    return F.to_field(pad_operand(values).reshape(-1))


def _decomposition(op, batch: int) -> Decomposition:
    return Decomposition(op.shift, op.q_bits, op.relu or op.kind == "relu")  # shift 0 on a relu op


def _full(qgraph: QuantizedGraph, tensor: str, batch: int) -> tuple:
    return (batch, *qgraph.shapes[tensor])


# --------------------------------------------------------------------------------------- commitment
def _weight_tables(qgraph: QuantizedGraph):
    """[(op index, 'w' or 'b', padded flat table)] for every committed constant, in op order."""
    tables = []
    for index, op in enumerate(qgraph.ops):
        if op.kind == "contraction":
            if op.committed_weight:
                tables.append((index, "w", _table(op.weight)))
            if op.bias is not None:
                tables.append((index, "b", _table(op.bias)))
    return tables


def _weight_lengths(qgraph: QuantizedGraph) -> list:
    """[(op index, 'w'/'b', padded length)] from the public shapes (the verifier's view of the packing)."""
    lengths = []
    for index, op in enumerate(qgraph.ops):
        if op.kind == "contraction":
            if op.committed_weight:
                lengths.append((index, "w", math.prod(padded_size(n) for n in op.weight_shape)))
            if op.has_bias:
                lengths.append((index, "b", math.prod(padded_size(n) for n in op.bias_shape)))
    return lengths


@dataclass(frozen=True, eq=False)
class GraphCommitment:
    """The public statement of a committed graph: its quantized structure and the weights commitment."""

    structure: QuantizedGraph
    weights: Commitment

    KIND = "proofs.GraphCommitment"

    @property
    def zk(self) -> bool:
        return False

    def to_bytes(self) -> bytes:
        writer = ByteWriter(COMMITMENT_MAGIC, FORMAT_VERSION)
        writer.text(self.structure.public_text())
        writer.blob(self.weights.to_bytes())
        return to_record(self.KIND, writer.getvalue())

    @classmethod
    def from_bytes(cls, data) -> "GraphCommitment":
        return parse_nested(cls._parse, from_record(data, cls.KIND, "graph commitment"), "graph commitment")

    @classmethod
    def _parse(cls, data) -> "GraphCommitment":
        reader = ByteReader(data, COMMITMENT_MAGIC, FORMAT_VERSION, "graph commitment")
        structure = QuantizedGraph.from_public_text(reader.text(), "graph commitment")
        weights = read_nested(reader, Commitment)
        reader.finish()
        return cls(structure, weights)

    def soundness_bits(self, batch: int = 1) -> float:
        """-log2 of the total error: each sumcheck's d k / p^4 (bounded generously) plus the weights' and the
        bits' commitments' (:func:`bits_params`)."""
        s = self.structure
        vars_total = sum(_num_vars(_full(s, t, batch)) + 64 for t in s.shapes) * 4 * (len(s.ops) + 1)
        error = 2.0 ** -self.weights.security_bits + 2.0 ** -bits_params(self.weights.params).security_bits + \
            3 * vars_total * 2.0 ** -F.EXT_BITS
        lookups = [op for op in s.ops if op.kind == "lookup"]  # proofs.lookup.lookup_error each, one commitment
        if lookups:
            error += 2.0 ** -bits_params(self.weights.params).security_bits + 3 * vars_total * 2.0 ** -F.EXT_BITS
            error += sum(lookup_error(_num_vars(_full(s, op.output, batch)), op.q_bits) for op in lookups)
        return -math.log2(error)


# -------------------------------------------------------------------------------------------- proof
_TAGS = {"merge": 1, "bias": 3, "reshape": 4, "contraction": 5, "patches": 6, "add": 7, "select": 8, "bits": 9,
         "square": 10, "lookup commitment": 11, "lookup": 12, "lookup opening": 13}


@dataclass(frozen=True, eq=False)
class GraphProof:
    """The claimed output (batch, prod of the output shape), the one commitment to every requantized op's bit
    planes (packed; None when no op has bits), the items of the backward walk in the order they were produced
    ((tag, object)), the batch opening of the bits at every group's claim and that of the weights."""

    output: np.ndarray
    bits_commitment: object
    items: tuple
    bits_opening: object
    weights_opening: OpeningProof

    KIND = "proofs.GraphProof"

    def to_bytes(self) -> bytes:
        writer = ByteWriter(PROOF_MAGIC, PROOF_VERSION)
        writer.i64_array(np.asarray(self.output, dtype=np.int64).reshape(len(self.output), -1))
        writer.u8(self.bits_commitment is not None)
        if self.bits_commitment is not None:
            writer.blob(self.bits_commitment.to_bytes())
        writer.u32(len(self.items))
        for tag, item in self.items:
            writer.u8(_TAGS[tag])
            if tag in ("merge", "reshape", "square"):
                writer.blob(item.sumcheck.to_bytes())
                writer.ext(item.x_eval)
            elif tag == "select":
                _write_select(writer, item)
            elif tag == "bits":
                writer.blob(item.sumcheck.to_bytes())
                writer.ext(item.bits_eval)
            elif tag in ("bias", "add"):
                writer.ext(item)
            elif tag in ("lookup commitment", "lookup opening", "lookup"):
                writer.blob(item.to_bytes())
            elif tag == "contraction":
                writer.blob(item.sumcheck.to_bytes())
                writer.ext(item.data_eval)
                writer.ext(item.weight_eval)
            else:
                writer.blob(item.x_sumcheck.to_bytes())
                writer.ext(item.x_eval)
                writer.ext(item.gather_eval)
                writer.blob(item.w_sumcheck.to_bytes())
                writer.ext(item.weight_eval)
        writer.u8(self.bits_opening is not None)
        if self.bits_opening is not None:
            writer.blob(self.bits_opening.to_bytes())
        writer.blob(self.weights_opening.to_bytes())
        return to_record(self.KIND, writer.getvalue())

    @classmethod
    def from_bytes(cls, data) -> "GraphProof":
        return parse_nested(cls._parse, from_record(data, cls.KIND, "graph proof"), "graph proof")

    @classmethod
    def _parse(cls, data) -> "GraphProof":
        reader = ByteReader(data, PROOF_MAGIC, PROOF_VERSION, "graph proof")
        output = reader.i64_array()
        bits = read_nested(reader, Commitment) if reader.flag() else None
        names = {v: k for k, v in _TAGS.items()}
        items = []
        for _ in range(reader.bounded("items", 0, MAX_ITEMS)):
            code = reader.u8()
            if code not in names:
                raise ProofRejected(f"item tag {code} is not one of {sorted(names)}", "graph proof")
            tag = names[code]
            if tag in ("merge", "reshape", "square"):
                item = GatherProof(read_nested(reader, SumcheckProof), reader.ext())
            elif tag == "select":
                item = _read_select(reader)
            elif tag == "bits":
                item = BitsProof(read_nested(reader, SumcheckProof), reader.ext())
            elif tag in ("bias", "add"):
                item = reader.ext()
            elif tag in ("lookup commitment", "lookup opening", "lookup"):
                item = read_nested(reader, {"lookup commitment": Commitment, "lookup opening": OpeningProof,
                                            "lookup": LookupProof}[tag])
            elif tag == "contraction":
                item = ContractionProof(read_nested(reader, SumcheckProof), reader.ext(), reader.ext())
            else:
                item = PatchProof(read_nested(reader, SumcheckProof), reader.ext(), reader.ext(),
                                  read_nested(reader, SumcheckProof), reader.ext())
            items.append((tag, item))
        bits_opening = read_nested(reader, OpeningProof) if reader.flag() else None
        opening = read_nested(reader, OpeningProof)
        reader.finish()
        return cls(output, bits, tuple(items), bits_opening, opening)

    def __bytes__(self) -> bytes:
        return self.to_bytes()


def _write_select(writer, proof: SelectProof) -> None:
    """The select sumcheck (optional), then S~, z'~, acc~ at its point."""
    writer.u8(proof.select is not None)
    if proof.select is not None:
        writer.blob(proof.select.to_bytes())
    for value in (proof.sign_eval, proof.shifted_eval, proof.acc_eval):
        writer.ext(value)


def _read_select(reader) -> SelectProof:
    select = read_nested(reader, SumcheckProof) if reader.flag() else None
    return SelectProof(select, reader.ext(), reader.ext(), reader.ext())


def bits_params(params: CommitParams) -> CommitParams:
    """The per-proof bits commitment's parameters: rate 1/2 (half the encoding and hashing of rate 1/4: it is
    committed in every proof) with the fewest queries giving at least the weights commitment's query soundness
    (each query misses with probability 3/4)."""
    return CommitParams(2, min(4096, math.ceil(params.security_bits / -math.log2(0.75))))  # 4096: 1700 bits


def _bits_packing(qgraph: QuantizedGraph, batch: int):
    """[(op index, group)] and the Packing of every bit group's table (count x padded elements)."""
    keys, lengths = [], []
    for index, op in enumerate(qgraph.ops):
        if op.has_bits:
            elements = math.prod(padded_size(n) for n in _full(qgraph, op.output, batch))
            for g, (_, count) in enumerate(_decomposition(op, batch).groups):
                keys.append((index, g))
                lengths.append(count * elements)
    return keys, (Packing(tuple(lengths)) if lengths else None)


def _bits_blocks(qgraph: QuantizedGraph, keys, statements: dict) -> tuple:
    """The ops' statements in op order and, per packed bit group, (statement position, plane start, count)."""
    ops = sorted(statements)
    position = {index: i for i, index in enumerate(ops)}
    blocks = []
    for index, g in keys:
        start, count = _decomposition(qgraph.ops[index], 1).groups[g]
        blocks.append((position[index], start, count))
    return [statements[index] for index in ops], blocks


# ------------------------------------------------------------------------------------------ lookups
def _lookup_ops(qgraph: QuantizedGraph) -> list:
    return [index for index, op in enumerate(qgraph.ops) if op.kind == "lookup"]


def _lookup_packing(qgraph: QuantizedGraph, batch: int):
    """[(op index, 'm' or 'y')] and the Packing of every lookup's multiplicities (2^b) and output table (padded),
    in op order, committed per proof before any lookup challenge; (keys, None) without lookups."""
    keys, lengths = [], []
    for index in _lookup_ops(qgraph):
        op = qgraph.ops[index]
        keys += [(index, "m"), (index, "y")]
        lengths += [1 << op.q_bits, math.prod(padded_size(n) for n in _full(qgraph, op.output, batch))]
    return keys, (Packing(tuple(lengths)) if lengths else None)


def _lookup_public(qgraph: QuantizedGraph, index: int) -> tuple:
    """The lookup's public table (inputs, outputs) as field tables (:func:`proofs.graph_quantize.lookup_table`)."""
    op = qgraph.ops[index]
    inputs, outputs = lookup_table(op.function, op.q_bits, qgraph.fracs[op.inputs[0]], qgraph.fracs[op.output])
    return F.to_field(inputs), F.to_field(outputs)


def _real_box(shape) -> tuple:
    """(extents, log sizes) of a batch-first tensor's real entries in its padded table, axis 0 lowest."""
    return tuple(int(n) for n in shape[::-1]), tuple(padded_size(n).bit_length() - 1 for n in shape[::-1])


def _full_boxes(packing: Packing) -> list:
    """Boxes covering every packed table whole (no padding term: a lookup's rows are all real or selected)."""
    return [((n,), (n.bit_length() - 1,)) for n in packing.lengths]


# --------------------------------------------------------------------------------------- the walk
def _absorb_statement(transcript, commitment: GraphCommitment, x, y) -> None:
    transcript.absorb("graph commitment", commitment.to_bytes())
    transcript.absorb("input", np.asarray(x, dtype=np.int64).reshape(-1))
    transcript.absorb("output", np.asarray(y, dtype=np.int64).reshape(-1))


def _output_claim(transcript, shape, output) -> Claim:
    point = transcript.challenge_ext_vector("output point", _num_vars(shape))
    return Claim(point, mle_evaluate(_table(np.asarray(output).reshape(shape)), point))


def _op_weight_index(qgraph: QuantizedGraph) -> dict:
    return {(op_index, part): position for position, (op_index, part, _) in enumerate(_weight_lengths(qgraph))}


class GraphNetwork:
    """The prover: a :class:`QuantizedGraph` whose weights are committed once (``.commitment``).

    This is the non-hiding protocol: proofs reveal the weights (public models only)."""

    def __init__(self, qgraph: QuantizedGraph, params: CommitParams | None = None, *, progress=None):
        """``progress``: True draws a bar on stderr over the commitment's steps, a callable gets ``(done, total,
        label)``; the commitment is the same either way."""
        report = as_progress(progress, "committing")
        if not isinstance(qgraph, QuantizedGraph):
            raise ModelError(f"qgraph must be a QuantizedGraph, got {type(qgraph).__name__}")
        params = CommitParams() if params is None else params
        if not isinstance(params, CommitParams) or params.security_bits < MIN_VERIFY_BITS:
            raise ModelError(f"params {params!r} must be a CommitParams with >= {MIN_VERIFY_BITS} bits")
        qgraph.require_private_constants()
        self.qgraph = qgraph
        tables = _weight_tables(qgraph)
        self._packing = Packing(tuple(len(t) for _, _, t in tables))
        if report is not None:
            report(1, 2, "weight tables")
        weights, self._weights_witness = commit(self._packing.pack([t for _, _, t in tables]), params)
        self._tables = {(i, part): t for i, part, t in tables}
        self.commitment = GraphCommitment(qgraph, weights)
        if report is not None:
            report(2, 2, "committed")

    def prove(self, x, progress=None) -> GraphProof:
        """Prove y = graph(x) for a float (quantized at the input scale) or integer batch x."""
        progress = as_progress(progress, "proving")
        q = self.qgraph
        x_int = q.quantize_input(x)
        batch = x_int.shape[0]
        values, accs = q.forward_int(x_int, trace=True)
        steps = sum(op.has_bits for op in q.ops) + len(q.ops) + 1
        done = [0]

        def report(label):
            done[0] += 1
            if progress is not None:
                progress(done[0], steps, label)

        transcript = Transcript(TRANSCRIPT_LABEL)
        output = values[q.output]
        _absorb_statement(transcript, self.commitment, x_int, output)
        witnesses = {}
        for index, op in enumerate(q.ops):
            if not op.has_bits:
                continue
            try:
                witnesses[index] = decompose(pad_operand(accs[index]).reshape(-1), _decomposition(op, batch))
            except ModelError as error:
                raise ModelError(f"op {op.name!r}: {error} (an input outside the calibrated range)") from None
        keys, packing = _bits_packing(q, batch)
        bits_commitment = bits_witness = None
        if packing is not None:
            packed = packing.pack([witnesses[index].table(g) for index, g in keys])
            bits_commitment, bits_witness = commit(packed, bits_params(self._weights_witness.commitment.params))
            transcript.absorb("bits commitment", bits_commitment.to_bytes())
        report("committed the bits")
        items, lookup_claims, lookup_tables = [], [], {}
        lookup_keys, lookup_packing = _lookup_packing(q, batch)
        if lookup_packing is not None:  # multiplicities and outputs, committed before alpha, beta
            for index in _lookup_ops(q):
                op = q.ops[index]
                inputs, _ = lookup_table(op.function, op.q_bits, q.fracs[op.inputs[0]], q.fracs[op.output])
                lookup_tables[(index, "m")] = F.to_field(multiplicities(values[op.inputs[0]], inputs))
                lookup_tables[(index, "y")] = _table(values[op.output])
            lookup_commitment, lookup_witness = commit(lookup_packing.pack([lookup_tables[k] for k in lookup_keys]),
                                                       bits_params(self._weights_witness.commitment.params))
            transcript.absorb("lookup commitment", lookup_commitment.to_bytes())
            items.append(("lookup commitment", lookup_commitment))
        lookup_at = {key: i for i, key in enumerate(lookup_keys)}
        statements = {}
        pending = {q.output: [_output_claim(transcript, _full(q, q.output, batch), output)]}
        weight_claims = []
        index_of = _op_weight_index(q)
        for index in reversed(range(len(q.ops))):
            op = q.ops[index]
            claims = pending.pop(op.output, [])
            if not claims:
                continue
            label = f"op {index}"
            out_shape = _full(q, op.output, batch)
            if len(claims) > 1:
                proof, claim = merge_claims(_table(values[op.output]), claims, transcript, f"{label} / merge")
                items.append(("merge", proof))
            else:
                claim = claims[0]
            if op.has_bits:
                proof, claim, statements[index] = prove_select(witnesses[index], claim, transcript)
                items.append(("select", proof))
            if op.kind == "contraction":
                if op.bias is not None:
                    parts = split_point(claim.point, _letters(len(out_shape)), _bits_of(out_shape).get)
                    bias_letters = _bias_letters(op)
                    bias_eval = mle_evaluate(self._tables[(index, "b")], join_point(parts, bias_letters))
                    transcript.absorb(f"{label}.bias", bias_eval)
                    items.append(("bias", bias_eval))
                    claim, b_claim = bias_claim_reduction(claim, _letters(len(out_shape)), out_shape, bias_letters,
                                                          bias_eval)
                    weight_claims.append((index_of[(index, "b")], b_claim))
                x = values[op.inputs[0]]
                z_shape = (batch, *op.einsum_shape)
                z = contract_einsum(op, x)
                proof, claim = reshape_claim_reduction(_table(z), z_shape, out_shape, claim, transcript,
                                                       f"{label} / reshape")
                if proof is not None:
                    items.append(("reshape", proof))
                if op.patches is None:
                    proof, x_claim, w_claim = contraction_claim_reduction(op.equation, pad_operand(x),
                                                                          pad_operand(op.weight), claim, transcript,
                                                                          f"{label} / contraction")
                    items.append(("contraction", proof))
                else:
                    proof, x_claim, w_claim = patch_claim_reduction(op.equation, x, op.weight, op.patches, claim,
                                                                    transcript, f"{label} / patches")
                    items.append(("patches", proof))
                if op.committed_weight:  # a public kernel's claim the verifier settles itself
                    weight_claims.append((index_of[(index, "w")], w_claim))
                pending.setdefault(op.inputs[0], []).append(x_claim)
            elif op.kind == "relu":
                pending.setdefault(op.inputs[0], []).append(claim)
            elif op.kind == "bilinear":  # one sumcheck over the summed letters of the two operands' product
                proof, a_claim, b_claim = contraction_claim_reduction(
                    op.equation, pad_operand(values[op.inputs[0]]), pad_operand(values[op.inputs[1]]), claim,
                    transcript, f"{label} / bilinear")
                items.append(("contraction", proof))
                pending.setdefault(op.inputs[0], []).append(a_claim)
                pending.setdefault(op.inputs[1], []).append(b_claim)
            elif op.kind == "lookup":
                inputs, outputs = _lookup_public(q, index)
                proof, found = prove_lookup(_table(values[op.inputs[0]]), lookup_tables[(index, "y")],
                                            box_table(*_real_box(out_shape)), inputs, outputs,
                                            lookup_tables[(index, "m")], transcript, f"{label} / lookup")
                items.append(("lookup", proof))
                lookup_claims += [(lookup_at[(index, "y")], claim),
                                  (lookup_at[(index, "y")], Claim(found.witness_point, found.y_eval)),
                                  (lookup_at[(index, "m")], Claim(found.table_point, found.m_eval))]
                pending.setdefault(op.inputs[0], []).append(Claim(found.witness_point, found.x_eval))
            elif op.kind == "square":
                proof, claim = square_claim_reduction(_table(values[op.inputs[0]]), claim, transcript,
                                                      f"{label} / square")
                items.append(("square", proof))
                pending.setdefault(op.inputs[0], []).append(claim)
            elif op.kind == "add":
                first = mle_evaluate(_table(values[op.inputs[0]]), claim.point)
                transcript.absorb(f"{label}.add", first)
                items.append(("add", first))
                for tensor, sub in zip(op.inputs, _add_claims(op, claim, first)):
                    pending.setdefault(tensor, []).append(sub)
            elif op.kind == "reshape":
                source = op.inputs[0]
                proof, claim = reshape_claim_reduction(_table(values[source]), _full(q, source, batch), out_shape,
                                                       claim, transcript, f"{label} / reshape")
                if proof is not None:
                    items.append(("reshape", proof))
                pending.setdefault(source, []).append(claim)
            else:
                pending.setdefault(op.inputs[0], []).append(_transpose_claim(op, claim, out_shape))
            report(f"proved {op.kind} {op.name}")
        bits_opening = None
        if packing is not None:
            order, blocks = _bits_blocks(q, keys, statements)
            proof, claim = prove_bits(packed, packing, blocks, order, transcript)
            items.append(("bits", proof))
            _, bits_opening = open_commitment(bits_witness, claim.point, transcript)
        if lookup_packing is not None:  # the opening item before its merge item (the verifier takes it first)
            at = len(items)
            lookup_opening = _open_weights(lookup_witness, lookup_packing, _full_boxes(lookup_packing), lookup_claims,
                                           transcript, items, "lookups / merge")
            items.insert(at, ("lookup opening", lookup_opening))
        opening = _open_weights(self._weights_witness, self._packing, _weight_boxes(q), weight_claims, transcript,
                                items)
        report("opened the bits and the weights")
        return GraphProof(output.reshape(batch, -1).copy(), bits_commitment, tuple(items), bits_opening, opening)


def contract_einsum(op, x) -> np.ndarray:
    """The einsum's own output (batch, *einsum_shape), int64, before the reshape and bias."""
    view = x if op.patches is None else op.patches.apply(x)
    y = np.einsum(op.equation, view.astype(np.float64), op.weight.astype(np.float64), optimize=True)
    return np.rint(y).astype(np.int64)


def _bias_letters(op) -> str:
    """The bias letters in the graph layout's lettering (the quantizer names sample axes p, q, r, ...)."""
    from ..graph_quantize import EINSUM_AXES
    return "".join(_letters(len(op.shape) + 1)[1 + EINSUM_AXES.index(letter)] for letter in op.bias_letters)


def _add_claims(op, claim: Claim, first) -> tuple:
    """y = 2^k1 x1 + 2^k2 x2: claims x1~(r) = first, x2~(r) = (v - 2^k1 first) / 2^k2."""
    k1, k2 = op.lefts
    rest = F.ext_sub(claim.value, F.ext_mul_base(first, F.to_field(np.int64(1 << k1))))
    rest = F.ext_mul_base(rest, F.inv(F.to_field(np.int64(1 << k2))))
    return Claim(claim.point, np.asarray(first)), Claim(claim.point, rest)


def _transpose_claim(op, claim: Claim, out_shape) -> Claim:
    """y = x.transpose(perm): the same padded table with permuted axes, so the point is relabelled."""
    x_letters = _letters(len(out_shape))
    y_letters = "b" + "".join(x_letters[1 + p] for p in op.shape)
    sizes = {y_letters[i]: out_shape[i] for i in range(len(out_shape))}
    bits = {l: padded_size(n).bit_length() - 1 for l, n in sizes.items()}
    parts = split_point(claim.point, y_letters, bits.get)
    return Claim(join_point(parts, x_letters), claim.value)


# ------------------------------------------------------------------------------------------ verifier
class _Items:
    def __init__(self, items):
        self.items, self.position = list(items), 0

    def take(self, tag: str, where: str):
        require(self.position < len(self.items), f"proof ends before its {tag} item", where)
        found, item = self.items[self.position]
        require(found == tag, f"expected a {tag} item, found {found}", where)
        self.position += 1
        return item


#: the proof kind named by :func:`verify_graph`'s verdicts and rejections
KIND = "graph inference"


def verify_graph(commitment, x, proof) -> Verdict:
    """Verify that ``proof.output`` = graph(x) under ``commitment``; returns a :class:`~proofs.verdict.Verdict`
    (truthy; ``.output`` the proven output, int64, batch first, the output's sample shape; ``.soundness_bits``).
    ``commitment``/``proof`` may be bytes. Raises only ProofRejected (``where`` beginning "graph inference
    proof")."""
    with rejecting(KIND):
        if isinstance(commitment, (bytes, bytearray, memoryview)):
            commitment = GraphCommitment.from_bytes(bytes(commitment))
        if isinstance(proof, (bytes, bytearray, memoryview)):
            proof = GraphProof.from_bytes(bytes(proof))
        require(isinstance(commitment, GraphCommitment), "commitment is not a GraphCommitment", "statement")
        require(isinstance(proof, GraphProof), "proof is not a GraphProof", "statement")
        output = _verify(commitment, x, proof)
        return Verdict.measured(KIND, output, commitment.soundness_bits, len(output))


def _verify(commitment: GraphCommitment, x, proof: GraphProof) -> np.ndarray:
    q = commitment.structure
    validate_structure(q, "graph commitment")  # parsed ones were; an object handed in is checked here
    require(commitment.weights.security_bits >= MIN_VERIFY_BITS,
            f"weights commitment gives {commitment.weights.security_bits:.1f} < {MIN_VERIFY_BITS} bits", "statement")
    try:
        x_int = q.quantize_input(x)
    except ModelError as error:
        raise ProofRejected(str(error), "input") from None
    x_int = require_bounded(x_int, q.input_bound, "input", "input")
    batch = x_int.shape[0]
    out_full = _full(q, q.output, batch)
    require_bounded(proof.output, q.bounds[q.output], "claimed output", "statement",
                    shape=(batch, math.prod(out_full[1:])))
    transcript = Transcript(TRANSCRIPT_LABEL)
    _absorb_statement(transcript, commitment, x_int, proof.output)
    specs = {i: _decomposition(op, batch) for i, op in enumerate(q.ops) if op.has_bits}
    keys, packing = _bits_packing(q, batch)
    c = proof.bits_commitment
    require((c is None) == (packing is None) and (proof.bits_opening is None) == (packing is None),
            "bits commitment and opening present iff some op is requantized", "statement")
    if packing is not None:
        require(isinstance(c, Commitment) and c.params == bits_params(commitment.weights.params)
                and c.num_vars == packing.num_vars, "bits commitment of the wrong size or parameters", "statement")
        transcript.absorb("bits commitment", c.to_bytes())
    items, lookup_claims = _Items(proof.items), []
    lookup_keys, lookup_packing = _lookup_packing(q, batch)
    if lookup_packing is not None:
        lookup_commitment = items.take("lookup commitment", "statement")
        require(isinstance(lookup_commitment, Commitment) and lookup_commitment.params == bits_params(
            commitment.weights.params) and lookup_commitment.num_vars == lookup_packing.num_vars,
            "lookup commitment of the wrong size or parameters", "statement")
        transcript.absorb("lookup commitment", lookup_commitment.to_bytes())
    lookup_at = {key: i for i, key in enumerate(lookup_keys)}
    statements = {}
    output = proof.output.reshape(out_full)
    pending = {q.output: [_output_claim(transcript, out_full, output)]}
    weight_claims = []
    index_of = _op_weight_index(q)
    lengths = _weight_lengths(q)
    for index in reversed(range(len(q.ops))):
        op = q.ops[index]
        claims = pending.pop(op.output, [])
        if not claims:
            continue
        label = f"op {index}"
        out_shape = _full(q, op.output, batch)
        try:
            if len(claims) > 1:
                claim = verify_merge(claims, items.take("merge", label), transcript, f"{label} / merge")
            else:
                claim = claims[0]
            if op.has_bits:
                claim, statements[index] = verify_select(specs[index], claim, items.take("select", label),
                                                         f"{label} / zkReLU", transcript)
            if op.kind == "contraction":
                if op.has_bias:
                    bias_eval = items.take("bias", label)
                    transcript.absorb(f"{label}.bias", bias_eval)
                    claim, b_claim = bias_claim_reduction(claim, _letters(len(out_shape)), out_shape,
                                                          _bias_letters(op), bias_eval)
                    weight_claims.append((index_of[(index, "b")], b_claim))
                x_shape = _full(q, op.inputs[0], batch)
                z_shape = (batch, *op.einsum_shape)
                proof_r = None if reshape_is_free(z_shape, out_shape) else items.take("reshape", label)
                claim = verify_reshape(z_shape, out_shape, claim, proof_r, transcript, f"{label} / reshape")
                kernel = None if op.committed_weight else public_weight(op, q.shapes[op.inputs[0]])
                if op.patches is None:
                    x_claim, w_claim = verify_contraction(op.equation, tuple(padded_size(n) for n in x_shape),
                                                          tuple(padded_size(n) for n in op.weight_shape), claim,
                                                          items.take("contraction", label), transcript,
                                                          f"{label} / contraction",
                                                          public_weight=None if kernel is None else pad_operand(kernel))
                else:
                    x_claim, w_claim = verify_patches(op.equation, x_shape, op.weight_shape, op.patches, claim,
                                                      items.take("patches", label), transcript, f"{label} / patches",
                                                      public_weight=kernel)
                if kernel is None:
                    weight_claims.append((index_of[(index, "w")], w_claim))
                pending.setdefault(op.inputs[0], []).append(x_claim)
            elif op.kind == "relu":
                pending.setdefault(op.inputs[0], []).append(claim)
            elif op.kind == "bilinear":
                shapes = [tuple(padded_size(n) for n in _full(q, t, batch)) for t in op.inputs]
                a_claim, b_claim = verify_contraction(op.equation, *shapes, claim, items.take("contraction", label),
                                                      transcript, f"{label} / bilinear")
                pending.setdefault(op.inputs[0], []).append(a_claim)
                pending.setdefault(op.inputs[1], []).append(b_claim)
            elif op.kind == "lookup":
                inputs, outputs = _lookup_public(q, index)
                box = _real_box(out_shape)
                found = verify_lookup(items.take("lookup", label), _num_vars(out_shape),
                                      lambda point: box_indicator(point, *box), inputs, outputs, transcript,
                                      f"{label} / lookup")
                lookup_claims += [(lookup_at[(index, "y")], claim),
                                  (lookup_at[(index, "y")], Claim(found.witness_point, found.y_eval)),
                                  (lookup_at[(index, "m")], Claim(found.table_point, found.m_eval))]
                pending.setdefault(op.inputs[0], []).append(Claim(found.witness_point, found.x_eval))
            elif op.kind == "square":
                claim = verify_square(claim, items.take("square", label), transcript, f"{label} / square")
                pending.setdefault(op.inputs[0], []).append(claim)
            elif op.kind == "add":
                first = items.take("add", label)
                transcript.absorb(f"{label}.add", first)
                for tensor, sub in zip(op.inputs, _add_claims(op, claim, first)):
                    pending.setdefault(tensor, []).append(sub)
            elif op.kind == "reshape":
                source = op.inputs[0]
                x_shape = _full(q, source, batch)
                proof_r = None if reshape_is_free(x_shape, out_shape) else items.take("reshape", label)
                claim = verify_reshape(x_shape, out_shape, claim, proof_r, transcript, f"{label} / reshape")
                pending.setdefault(source, []).append(claim)
            else:
                pending.setdefault(op.inputs[0], []).append(_transpose_claim(op, claim, out_shape))
        except ProofRejected as rejection:
            raise ProofRejected(rejection.reason, f"{op.name} ({label}) / {rejection.where}") from None
    require(set(pending) <= {q.input}, f"claims left on {sorted(set(pending) - {q.input})}", "graph proof")
    x_table = _table(x_int)
    for claim in pending.get(q.input, []):
        require(F.ext_eq(mle_evaluate(x_table, claim.point), claim.value),
                "the final claim does not match the public input", "input")
    if packing is not None:
        require(set(statements) == set(specs), "an op's bits were never checked", "graph proof")
        order, blocks = _bits_blocks(q, keys, statements)
        claim = verify_bits(packing, blocks, order, items.take("bits", "bits"), transcript)
        verify_opening(c, claim.point, claim.value, proof.bits_opening, transcript)
    if lookup_packing is not None:
        lookup_opening = items.take("lookup opening", "lookups")
        require(isinstance(lookup_opening, OpeningProof), "lookup opening missing", "lookups")
        _verify_weights(lookup_commitment, lookup_packing, _full_boxes(lookup_packing),
                        [Claim(lookup_packing.point(i, c.point), c.value) for i, c in lookup_claims], lookup_opening,
                        transcript, items, "lookups / merge")
    packing = Packing(tuple(n for _, _, n in lengths))
    claims = [Claim(packing.point(i, c.point), c.value) for i, c in weight_claims]
    _verify_weights(commitment.weights, packing, _weight_boxes(q), claims, proof.weights_opening, transcript, items)
    require(items.position == len(items.items), "unused items at the end of the proof", "graph proof")
    return output.copy()


# ------------------------------------------------------------------------------- the weights' padding
def _weight_boxes(qgraph: QuantizedGraph) -> list:
    """Each packed weight table's declared box (extents, log sizes), axis 0 lowest (the tensor's last axis), in
    :func:`_weight_lengths`' order."""
    shapes = []
    for op in qgraph.ops:
        if op.kind == "contraction":
            shapes += ([op.weight_shape] if op.committed_weight else []) + ([op.bias_shape] if op.has_bias else [])
    return [(tuple(int(n) for n in shape[::-1]), tuple(padded_size(n).bit_length() - 1 for n in shape[::-1]))
            for shape in shapes]


def _padding_challenges(claims, num_vars: int, transcript, label: str):
    """alpha (one per claim), then tau (the packed table's variables) and gamma, drawn after the claims."""
    transcript.absorb(f"{label}.claims", [np.concatenate([np.asarray(c.point).reshape(-1),
                                                          np.asarray(c.value).reshape(-1)]) for c in claims])
    alphas = transcript.challenge_ext_vector(f"{label}.alpha", len(claims))
    tau = transcript.challenge_ext_vector(f"{label}.padding tau", num_vars)
    gamma = transcript.challenge_ext_vector(f"{label}.padding gamma", 1)[0]
    return alphas, tau, gamma


def _padding_table(tau, packing: Packing, boxes) -> np.ndarray:
    """P(x) = eq(tau, x) (1 - inside(x)) over the packed table, inside = every table's declared box at its block."""
    inside = packing.pack([box_table(*box) for box in boxes])
    return F.ext_mul_base(eq_table(tau), np.uint64(1) - inside)


def _padding_eval(tau, sigma, packing: Packing, boxes) -> np.ndarray:
    """P~(sigma) = eq(tau, sigma) - sum_(x inside) eq(sigma, x) eq(tau, x), and eq(sigma, x) eq(tau, x) =
    prod_b w_(x_b)[b] (w1 = sigma tau, w0 = (1 - sigma)(1 - tau), as :func:`proofs.relations.padding_factor`) factors
    over table i's block: its selector bits, then per axis of its box a full axis prod (w0 + w1) or a prefix
    sum_(j < extent) prod_b w_(j_b)[b] (a table of 2^(axis bits)): O(n + sum of axis sizes), vectorized over the
    tables (a few field calls in all)."""
    n = tau.shape[0]
    one = F.ext_one((n,))
    w = np.stack([F.ext_mul(F.ext_sub(one, tau), F.ext_sub(one, sigma)), F.ext_mul(tau, sigma)])
    rows, partial, offsets = [], [], packing.offsets  # rows[i]: table i's factors; partial: (table, first var, ...)
    for i, (extents, log_sizes) in enumerate(boxes):
        k = sum(log_sizes)
        block = offsets[i] >> k
        rows.append([w[(block >> (b - k)) & 1, b] for b in range(k, n)])
        start = 0
        for extent, bits in zip(extents, log_sizes):
            if extent == 1 << bits:
                rows[i].extend(F.ext_add(w[0, start:start + bits], w[1, start:start + bits]))
            else:
                partial.append((i, start, bits, extent))
            start += bits
    if partial:  # every partial axis at once: the tables prod_b w_(j_b)[b], j < 2^bits, masked to j < extent
        top = max(bits for _, _, bits, _ in partial)
        pw = np.zeros((2, len(partial), top, F.EXT_DEGREE), dtype=np.uint64)
        pw[0] = F.ext_one((len(partial), top))  # extra bits: w0 = 1, w1 = 0
        for a, (_, start, bits, _) in enumerate(partial):
            pw[:, a, :bits] = w[:, start:start + bits]
        table = F.ext_one((len(partial), 1))
        for b in range(top):
            table = np.concatenate([F.ext_mul(table, pw[0, :, b:b + 1]), F.ext_mul(table, pw[1, :, b:b + 1])], axis=1)
        mask = np.arange(1 << top)[None, :] < np.array([extent for *_, extent in partial])[:, None]
        sums = F.ext_sum(table * mask[:, :, None].astype(np.uint64), axis=1)
        for (i, *_), value in zip(partial, sums):
            rows[i].append(value)
    length = max(1, max(len(r) for r in rows))
    product = F.ext_one((len(rows), length))
    for i, r in enumerate(rows):
        if r:
            product[i, :len(r)] = np.stack(r)
    while product.shape[1] > 1:  # pairwise products, the tables side by side
        if product.shape[1] & 1:
            product = np.concatenate([product, F.ext_one((len(rows), 1))], axis=1)
        product = F.ext_mul(product[:, 0::2], product[:, 1::2])
    return F.ext_sub(eq_eval(tau, sigma), F.ext_sum(product[:, 0], axis=0))


def _open_weights(witness, packing: Packing, boxes, local_claims, transcript, items: list,
                  label: str = "weights / merge"):
    """The weights' claims merged into one, with the padding folded in (:func:`proofs.relations.padding_factor`):
    sum_x T(x) [sum_i alpha_i eq(r_i, x) + gamma P(x)] = sum_i alpha_i v_i, a degree-2 sumcheck (one item, no
    stated value beyond T~(rho)) that also shows every weight and bias is zero off its declared box; then the
    opening at rho (``label``: also the lookups' commitment's merge)."""
    claims = [Claim(packing.point(i, c.point), c.value) for i, c in local_claims]
    table = witness.matrix.reshape(-1)
    alphas, tau, gamma = _padding_challenges(claims, packing.num_vars, transcript, label)
    weights = F.ext_mul(_padding_table(tau, packing, boxes), gamma)
    total = F.ext_zero()
    for alpha, (i, claim) in zip(alphas, local_claims):
        offset, k = packing.offsets[i], np.asarray(claim.point).reshape(-1, F.EXT_DEGREE).shape[0]
        part = weights[offset:offset + (1 << k)]
        part[:] = F.ext_add(part, F.ext_mul(eq_table(claim.point), alpha))
        total = F.ext_add(total, F.ext_mul(alpha, claim.value))
    sumcheck, rho, evals = prove_sumcheck([(1, [F.to_field(table), weights])], total, transcript, label)
    transcript.absorb(f"{label}.x_eval", evals[0][0])
    items.append(("merge", GatherProof(sumcheck, evals[0][0])))
    _, opening = open_commitment(witness, rho, transcript)
    return opening


def _verify_weights(commitment, packing: Packing, boxes, claims, opening, transcript, items,
                    label: str = "weights / merge") -> None:
    """Check :func:`_open_weights` (claims already on the packed table)."""
    proof = items.take("merge", label)
    require(isinstance(proof, GatherProof), "merge proof missing", label)
    x_eval = check_ext(proof.x_eval, label, "x_eval")
    alphas, tau, gamma = _padding_challenges(claims, packing.num_vars, transcript, label)
    total = F.ext_zero()
    for alpha, claim in zip(alphas, claims):
        total = F.ext_add(total, F.ext_mul(alpha, claim.value))
    sub = verify_sumcheck(proof.sumcheck, total, packing.num_vars, 2, transcript, label)
    g_value = F.ext_mul(gamma, _padding_eval(tau, sub.point, packing, boxes))
    for alpha, claim in zip(alphas, claims):
        g_value = F.ext_add(g_value, F.ext_mul(alpha, eq_eval(claim.point, sub.point)))
    sub.check(F.ext_mul(x_eval, g_value), label)
    transcript.absorb(f"{label}.x_eval", x_eval)
    verify_opening(commitment, sub.point, x_eval, opening, transcript)
