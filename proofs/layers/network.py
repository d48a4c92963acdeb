"""Whole-network proofs: y = model(x) for a public batch x under committed weights.

Statement: the :class:`ModelCommitment` (shapes, quantization parameters, per-layer worst-case
bounds, one commitment to all weight matrices and biases packed in one table, see
:mod:`proofs.layers.packing`), the public integer input batch x and the claimed integer output y.
All of it is absorbed into one transcript before the first challenge.

Protocol (zkDL's layer-by-layer reduction, Sun-Li-Zhang, section 4, made non-interactive by
Fiat-Shamir): the prover commits to the bits of every requantized/ReLU layer; the verifier draws a
random point r and evaluates y~(r) itself; from the last layer back to the first, each zkReLU
reduces the claim on a layer's output to one on its accumulator (:mod:`proofs.layers.relu`) and each
matmul sumcheck reduces that to one on the layer's input (:mod:`proofs.layers.matmul`) plus claims on
the weights; the verifier checks the last claim on x~ itself, and one batch opening of the model
commitment settles every weight and bias claim. The whole batch (any size) is proved at once: the
batch axis is a variable block of every table.

Trust in the declared bounds: the layer descriptions (Q bits, accumulator bounds) come from the model
owner, whose quantizer refuses any model that could wrap around the field (:func:`check_field`). The
bit decompositions prove every requantized value's range, the verifier checks the public input and
claimed output against their declared ranges, but the committed weights' own range is not proved: a
dishonest owner committing to huge weights could make field identities differ from integer ones.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields

import numpy as np

from .. import field as F
from ..commit import CommitParams, Commitment, OpeningProof, commit, open_batch, verify_batch
from ..errors import ModelError, ProofRejected
from ..mle import mle_evaluate
from ..proof_format import ByteReader, ByteWriter, parse_nested
from ..quantize import FIELD_BITS, FIELD_HALF, QuantizedMLP, check_field, check_input, forward_trace
from ..sumcheck import SumcheckProof
from ..transcript import Transcript
from .common import Claim, log2, pad_matrix, padded, require
from .matmul import LinearProof, LinearShape, prove_linear, verify_linear, weight_tables
from .packing import Packing
from .relu import BitGroupProof, DecompositionProof, prove_decomposition, verify_decomposition
from .requant import Decomposition, decompose

TRANSCRIPT_LABEL = "hezk.proofs.network.v1"
COMMITMENT_MAGIC, PROOF_MAGIC, FORMAT_VERSION = b"HEZKMCOM", b"HEZKPRF\x00", 1
MAX_FEATURES = 1 << 24
MAX_LAYERS = 64
SPLIT_MIN_ENTRIES = 1 << 15  # below this many bits per layer one group (fewer rounds and openings) is faster


@dataclass(frozen=True)
class LayerInfo:
    """The public description of one layer: shapes, quantization, declared worst-case bounds."""

    in_features: int
    out_features: int
    weight_frac: int
    in_frac: int
    shift: int
    relu: bool
    q_bits: int
    acc_lo: int
    acc_hi: int

    @property
    def decomposition(self):
        """The layer's :class:`Decomposition`, or None when its output is the raw accumulator."""
        if self.relu or self.shift:
            return Decomposition(self.shift, self.q_bits, self.relu)
        return None

    def decomposition_for(self, batch: int):
        """The decomposition used on a batch: bit planes split into two groups only for large tables."""
        spec = self.decomposition
        if spec is None:
            return None
        elements = padded(batch, 1) * padded(self.out_features)
        return Decomposition(spec.shift, spec.q_bits, spec.relu, elements * padded(spec.width, 1) >= SPLIT_MIN_ENTRIES)

    def output_range(self) -> tuple:
        """[lo, hi] every output integer lies in."""
        if self.decomposition is None:
            return self.acc_lo, self.acc_hi
        half = 1 << (self.q_bits - 1)
        return (0 if self.relu else -half), half - 1


def weight_packing(layers) -> Packing:
    """Where each layer's W (index 2i) and b (index 2i + 1) sit in the packed model table."""
    lengths = []
    for info in layers:
        lengths += [padded(info.out_features) * padded(info.in_features), padded(info.out_features)]
    return Packing(tuple(lengths))


@dataclass(frozen=True, eq=False)
class ModelCommitment:
    """What the model owner publishes once: layer descriptions and one short commitment to all weights."""

    scheme: str
    input_frac: int
    input_bound: int
    error_bound: float
    layers: tuple
    weights: Commitment

    @property
    def in_features(self) -> int:
        return self.layers[0].in_features

    @property
    def output_frac(self) -> int:
        last = self.layers[-1]
        return last.in_frac + last.weight_frac - last.shift

    @property
    def params(self) -> CommitParams:
        """The commitment parameters (the bits commitments of a proof must use the same)."""
        return self.weights.params

    def soundness_bits(self, batch: int) -> float:
        """-log2 of the whole proof's soundness error for a batch of ``batch`` inputs (union bound).

        Terms, with |F| = p^4: the output point (kM + kB)/|F|; per zkReLU the select sumcheck 3 kE/|F|,
        the batching 3/|F|, per bit group the bit-check point and sumcheck 4 (kE + kJ)/|F| and one opening;
        per matmul the sumcheck 2 kN/|F|; one batch opening of the weights. An opening fails w.p.
        2^-security_bits of its commitment (:attr:`proofs.commit.Commitment.security_bits`).
        """
        batch_vars = log2(padded(batch, 1))
        field_errors = log2(padded(self.layers[-1].out_features)) + batch_vars
        opening_error = 2.0 ** -self.weights.security_bits
        for info in self.layers:
            field_errors += 2 * log2(padded(info.in_features))
            if info.decomposition is not None:
                element_vars = batch_vars + log2(padded(info.out_features))
                field_errors += 3 * element_vars * info.relu + 3
                for _, count in info.decomposition_for(batch).groups:
                    bits_vars = element_vars + log2(count)
                    field_errors += 4 * bits_vars
                    opening_error += 2.0 ** -Commitment(b"", bits_vars, self.params).security_bits
        return -math.log2(field_errors * 2.0 ** -F.EXT_BITS + opening_error)

    def to_bytes(self) -> bytes:
        writer = ByteWriter(COMMITMENT_MAGIC, FORMAT_VERSION)
        writer.text(self.scheme)
        writer.i64(self.input_frac)
        writer.i64(self.input_bound)
        writer.f64(self.error_bound)
        writer.u32(len(self.layers))
        for info in self.layers:
            for item in fields(info):
                writer.i64(int(getattr(info, item.name)))
        writer.blob(self.weights.to_bytes())
        return writer.getvalue()

    @classmethod
    def from_bytes(cls, data) -> "ModelCommitment":
        """Parse and validate; anything malformed raises ProofRejected."""
        return parse_nested(cls._parse, data, "model commitment")

    @classmethod
    def _parse(cls, data) -> "ModelCommitment":
        reader = ByteReader(data, COMMITMENT_MAGIC, FORMAT_VERSION, "model commitment")
        scheme, input_frac, input_bound, error_bound = reader.text(), reader.i64(), reader.i64(), reader.f64()
        layers = []
        for _ in range(reader.bounded("layer count", 1, MAX_LAYERS)):
            values = [reader.i64() for _ in fields(LayerInfo)]
            require(values[5] in (0, 1), f"relu flag {values[5]} is not 0 or 1", reader.what)
            layers.append(LayerInfo(*values[:5], bool(values[5]), *values[6:]))
        weights = parse_nested(Commitment.from_bytes, reader.blob(), "weights commitment")
        reader.finish()
        commitment = cls(scheme, input_frac, input_bound, error_bound, tuple(layers), weights)
        commitment.validate()
        return commitment

    def validate(self) -> None:
        """Check the description is consistent and provable in the field (ProofRejected otherwise)."""
        where = "model commitment"
        require(0 < self.input_bound <= FIELD_HALF, f"input_bound={self.input_bound} not in (0, {FIELD_HALF}]", where)
        require(not math.isnan(self.error_bound), "error_bound is nan", where)
        require(isinstance(self.weights, Commitment), "weights is not a Commitment", where)
        for i, info in enumerate(self.layers):
            at = f"{where} / layer {i}"
            require(1 <= info.in_features <= MAX_FEATURES and 1 <= info.out_features <= MAX_FEATURES,
                    f"features {info.in_features}->{info.out_features} not in [1, {MAX_FEATURES}]", at)
            expected_in = self.layers[i - 1].out_features if i else info.in_features
            require(info.in_features == expected_in, f"takes {info.in_features} features, previous gives {expected_in}",
                    at)
            require(abs(info.weight_frac) <= 64 and abs(info.in_frac) <= 64, "scale exponents out of range", at)
            require(-FIELD_HALF <= info.acc_lo <= info.acc_hi <= FIELD_HALF,
                    f"accumulator bounds [{info.acc_lo}, {info.acc_hi}] exceed the field's half {FIELD_HALF}", at)
            require(0 <= info.shift and 1 <= info.q_bits and info.shift + info.q_bits <= FIELD_BITS,
                    f"shift {info.shift} + q_bits {info.q_bits} not within [1, {FIELD_BITS}]", at)
        _check_commitment(self.weights, 1 << weight_packing(self.layers).num_vars, f"{where} / weights")


def _check_commitment(commitment, length: int, where: str) -> None:
    require(getattr(commitment, "num_vars", None) == log2(length),
            f"commitment has num_vars={getattr(commitment, 'num_vars', None)}, the layer needs {log2(length)}", where)


# ----------------------------------------------------------------------------------------- witness

@dataclass(frozen=True, eq=False)
class LayerWitness:
    """One layer's prover tables on a batch (padded): input (int64, B x N), accumulator (int64, B x M)
    and, for a requantized/ReLU layer, the committed bits with its integers; ``out`` is B x M int64."""

    input: np.ndarray
    acc: np.ndarray
    decomposition: object
    out: np.ndarray


@dataclass(frozen=True, eq=False)
class NetworkWitness:
    """Everything the prover knows about one batch: the public input and claimed output (unpadded,
    int64) and each layer's padded tables."""

    input: np.ndarray
    output: np.ndarray
    layers: tuple

    @property
    def batch(self) -> int:
        return int(self.input.shape[0])


# ------------------------------------------------------------------------------------------- proof

@dataclass(frozen=True, eq=False)
class NetworkProof:
    """The claimed output, the bits commitments (one per requantized layer), per-layer proofs
    (``layer_proofs[i]`` = (DecompositionProof or None, LinearProof) of layer i) and the batch opening
    of the model commitment at every weight and bias claim."""

    output: np.ndarray
    bits_commitments: tuple
    layer_proofs: tuple
    weights_opening: OpeningProof

    def to_bytes(self) -> bytes:
        writer = ByteWriter(PROOF_MAGIC, FORMAT_VERSION)
        writer.i64_array(self.output)
        writer.u32(len(self.bits_commitments))
        for bits_commitment in self.bits_commitments:
            writer.blob(bits_commitment.to_bytes())
        writer.u32(len(self.layer_proofs))
        for decomposition, linear in self.layer_proofs:
            _write_fields(writer, decomposition, optional=True)
            _write_fields(writer, linear)
        writer.blob(self.weights_opening.to_bytes())
        return writer.getvalue()

    @classmethod
    def from_bytes(cls, data) -> "NetworkProof":
        """Parse; anything malformed or truncated raises ProofRejected."""
        return parse_nested(cls._parse, data, "network proof")

    @classmethod
    def _parse(cls, data) -> "NetworkProof":
        reader = ByteReader(data, PROOF_MAGIC, FORMAT_VERSION, "network proof")
        output = reader.i64_array()
        bits = tuple(_read_nested(reader, Commitment)
                     for _ in range(reader.bounded("bits commitment count", 0, MAX_LAYERS)))
        layer_proofs = tuple((_read_fields(reader, DecompositionProof, optional=True),
                              _read_fields(reader, LinearProof))
                             for _ in range(reader.bounded("layer count", 1, MAX_LAYERS)))
        opening = _read_nested(reader, OpeningProof)
        reader.finish()
        return cls(output, bits, layer_proofs, opening)


# Field kinds of each layer proof, in dataclass field order: F_p4 elements, nested objects with bytes,
# (kind, "optional") for a nested object that may be None (a presence byte precedes it), or
# (BitGroupProof, "list") for a counted list of bit-group records.
_SCHEMAS = {
    DecompositionProof: ((SumcheckProof, "optional"), "ext", "ext", "ext", (BitGroupProof, "list")),
    BitGroupProof: ("ext", SumcheckProof, "ext", OpeningProof),
    LinearProof: ("ext", SumcheckProof, "ext", "ext"),
}


def _write_fields(writer: ByteWriter, proof, optional: bool = False) -> None:
    if optional:
        writer.u8(proof is not None)
        if proof is None:
            return
    for kind, item in zip(_SCHEMAS[type(proof)], fields(proof)):
        value = getattr(proof, item.name)
        if kind == "ext":
            writer.ext(value)
        elif kind == (BitGroupProof, "list"):
            writer.u32(len(value))
            for group in value:
                _write_fields(writer, group)
        elif isinstance(kind, tuple):
            writer.u8(value is not None)
            if value is not None:
                writer.blob(value.to_bytes())
        else:
            writer.blob(value.to_bytes())


def _read_nested(reader: ByteReader, kind):
    return parse_nested(kind.from_bytes, reader.blob(), kind.__name__)


def _read_fields(reader: ByteReader, cls, optional: bool = False):
    if optional and not reader.flag():
        return None
    values = []
    for kind in _SCHEMAS[cls]:
        if kind == "ext":
            values.append(reader.ext())
        elif kind == (BitGroupProof, "list"):
            values.append(tuple(_read_fields(reader, BitGroupProof) for _ in range(reader.bounded("groups", 1, 2))))
        elif isinstance(kind, tuple):
            values.append(_read_nested(reader, kind[0]) if reader.flag() else None)
        else:
            values.append(_read_nested(reader, kind))
    return cls(*values)


# ------------------------------------------------------------------------------- prover and verifier

def _absorb_statement(transcript: Transcript, commitment: ModelCommitment, x, y) -> None:
    transcript.absorb("model", commitment.to_bytes())
    transcript.absorb("input", np.asarray(x, dtype=np.int64))
    transcript.absorb("output", np.asarray(y, dtype=np.int64))


def _output_point(transcript: Transcript, info: LayerInfo, batch: int) -> np.ndarray:
    """r over (output feature, batch): the verifier's first challenge (error 2^-124 per output mismatch)."""
    return transcript.challenge_ext_vector("output point", log2(padded(info.out_features)) + log2(padded(batch, 1)))


def _field_table(values) -> np.ndarray:
    return F.to_field(np.asarray(values, dtype=np.int64).reshape(-1))


class Network:
    """The prover side: a quantized model whose weights are committed once at construction.

    ``Network(model).commitment`` is the short public :class:`ModelCommitment`; :meth:`prove` proves
    y = model(x) for an integer batch x (shape (batch, in_features), any batch size).
    """

    def __init__(self, model: QuantizedMLP, params: CommitParams | None = None):
        if not isinstance(model, QuantizedMLP):
            raise ModelError(f"model must be a QuantizedMLP, got {type(model).__name__}")
        bounds = check_field(model)
        self.model = model
        self.params = params if params is not None else CommitParams()
        infos = tuple(LayerInfo(layer.in_features, layer.out_features, layer.weight_frac, layer.in_frac,
                                layer.shift, layer.relu, bound.q_bits, bound.acc_lo, bound.acc_hi)
                      for layer, bound in zip(model.layers, bounds))
        self._weight_tables = tuple(weight_tables(layer) for layer in model.layers)
        packed = weight_packing(infos).pack([table for pair in self._weight_tables for table in pair])
        weights, self._weights_witness = commit(packed, self.params)
        self.commitment = ModelCommitment(model.scheme, model.input_frac, model.input_bound, model.error_bound,
                                          infos, weights)

    def witness(self, x_int) -> NetworkWitness:
        """The integer forward pass on padded tables with every layer's bit decomposition."""
        x = inputs = check_input(self.model, x_int)
        batch_padded = padded(x.shape[0], 1)
        layers = []
        for info, trace in zip(self.commitment.layers, forward_trace(self.model, x)):
            rows = pad_matrix(x, batch_padded, padded(info.in_features))
            acc = pad_matrix(trace.acc, batch_padded, padded(info.out_features))
            spec = info.decomposition_for(x.shape[0])
            decomposition = decompose(acc.reshape(-1), spec) if spec is not None else None
            out = pad_matrix(trace.out, batch_padded, padded(info.out_features))
            layers.append(LayerWitness(rows, acc, decomposition, out))
            x = trace.out
        return NetworkWitness(inputs, x, tuple(layers))

    def prove(self, x_int, progress=None) -> NetworkProof:
        """Prove y = model(x); ``progress(done, total, label)`` is called after each step."""
        return self.prove_witness(self.witness(x_int), progress)

    def prove_witness(self, witness: NetworkWitness, progress=None) -> NetworkProof:
        """Prove from a (possibly hand-modified, for tests) witness."""
        decomposed = sum(layer.decomposition is not None for layer in witness.layers)
        report = _Progress(progress, len(witness.layers) + 2 * decomposed + 1)
        transcript = Transcript(TRANSCRIPT_LABEL)
        _absorb_statement(transcript, self.commitment, witness.input, witness.output)
        bits_commitments, bits_witnesses = [], {}
        for i, layer in enumerate(witness.layers):
            if layer.decomposition is not None:
                bits_witnesses[i] = []
                for g in range(len(layer.decomposition.spec.groups)):
                    bits_commitment, bits_witness = commit(layer.decomposition.table(g), self.params)
                    transcript.absorb(f"bits commitment {i}", bits_commitment.to_bytes())
                    bits_commitments.append(bits_commitment)
                    bits_witnesses[i].append(bits_witness)
                report(f"committed bits of layer {i}")
        point = _output_point(transcript, self.commitment.layers[-1], witness.batch)
        claim = Claim(point, mle_evaluate(_field_table(witness.layers[-1].out), point))
        layer_proofs, weight_claims = [None] * len(witness.layers), []
        for i in reversed(range(len(witness.layers))):
            layer, info = witness.layers[i], self.commitment.layers[i]
            decomposition_proof = None
            if layer.decomposition is not None:
                decomposition_proof, claim = prove_decomposition(layer.decomposition, bits_witnesses[i], claim,
                                                                 transcript)
                report(f"proved zkReLU of layer {i}")
            shape = LinearShape(witness.batch, info.in_features, info.out_features)
            linear_proof, claim, claims = prove_linear(*self._weight_tables[i], _field_table(layer.input), shape,
                                                       claim, transcript)
            weight_claims = list(claims) + weight_claims
            report(f"proved matmul of layer {i}")
            layer_proofs[i] = (decomposition_proof, linear_proof)
        points = _weight_points(self.commitment, weight_claims)
        _, opening = open_batch(self._weights_witness, points, transcript)
        report("opened the weights")
        return NetworkProof(np.array(witness.output, dtype=np.int64), tuple(bits_commitments), tuple(layer_proofs),
                            opening)


def _weight_points(commitment: ModelCommitment, weight_claims) -> np.ndarray:
    """Packed points of the claims [W_0, b_0, W_1, b_1, ...] in the model table."""
    packing = weight_packing(commitment.layers)
    return np.stack([packing.point(index, claim.point) for index, claim in enumerate(weight_claims)])


class _Progress:
    def __init__(self, callback, total: int):
        self.callback, self.total, self.done = callback, total, 0

    def __call__(self, label: str) -> None:
        self.done += 1
        if self.callback is not None:
            self.callback(self.done, self.total, label)


def _check_statement(commitment: ModelCommitment, x_int, proof: NetworkProof):
    """Shape-first checks of the statement; returns the int64 input batch."""
    where = "statement"
    require(isinstance(commitment, ModelCommitment), "commitment is not a ModelCommitment", where)
    require(isinstance(proof, NetworkProof), "proof is not a NetworkProof", where)
    commitment.validate()
    x = np.asarray(x_int)
    if x.ndim == 1:
        x = x[None, :]
    require(x.ndim == 2 and x.shape[0] >= 1 and x.shape[1] == commitment.in_features,
            f"input shape {np.shape(x_int)} is not (batch, {commitment.in_features})", where)
    require(x.dtype.kind in "iu", f"input dtype {x.dtype} is not an integer type", where)
    require(int(np.max(np.abs(x.astype(np.float64)))) <= commitment.input_bound,
            f"input exceeds input_bound={commitment.input_bound}", where)
    last = commitment.layers[-1]
    require(proof.output.shape == (x.shape[0], last.out_features),
            f"claimed output shape {proof.output.shape} is not {(x.shape[0], last.out_features)}", where)
    lo, hi = last.output_range()
    require(bool(np.all((proof.output >= lo) & (proof.output <= hi))),
            f"claimed output outside the declared range [{lo}, {hi}]", where)
    groups = sum(len(info.decomposition_for(x.shape[0]).groups) for info in commitment.layers
                 if info.decomposition is not None)
    require(len(proof.bits_commitments) == groups,
            f"{len(proof.bits_commitments)} bits commitments for {groups} groups of bit planes", where)
    require(len(proof.layer_proofs) == len(commitment.layers),
            f"{len(proof.layer_proofs)} layer proofs for {len(commitment.layers)} layers", where)
    for i, (info, (decomposition, _)) in enumerate(zip(commitment.layers, proof.layer_proofs)):
        require((decomposition is None) == (info.decomposition is None),
                "zkReLU proof present iff the layer is requantized", f"layer {i}")
    batch_padded = padded(x.shape[0], 1)
    for i, layer_bits in _bits_commitments_by_layer(commitment, proof, x.shape[0]).items():
        info = commitment.layers[i]
        for bits, (_, count) in zip(layer_bits, info.decomposition_for(x.shape[0]).groups):
            require(isinstance(bits, Commitment) and bits.params == commitment.params,
                    f"bits commitment parameters differ from the model's {commitment.params}",
                    f"layer {i} / bits commitment")
            _check_commitment(bits, batch_padded * padded(info.out_features) * count, f"layer {i} / bits commitment")
    return x.astype(np.int64)


def _bits_commitments_by_layer(commitment: ModelCommitment, proof: NetworkProof, batch: int) -> dict:
    """{layer index: [bits commitment per group]} for the requantized layers, in order."""
    by_layer, position = {}, 0
    for i, info in enumerate(commitment.layers):
        if info.decomposition is not None:
            count = len(info.decomposition_for(batch).groups)
            by_layer[i] = list(proof.bits_commitments[position:position + count])
            position += count
    return by_layer


def verify_network(commitment: ModelCommitment, x_int, proof: NetworkProof) -> np.ndarray:
    """Verify ``proof`` that proof.output = model(x) under ``commitment``; return the output (int64).

    Raises :class:`ProofRejected` (and only that) when anything is malformed, inconsistent or false.
    """
    try:
        return _verify(commitment, x_int, proof)
    except ProofRejected:
        raise
    except Exception as exc:  # a malformed proof object must never escape as another exception
        raise ProofRejected(f"malformed proof: {type(exc).__name__}: {exc}", "network") from None


def _verify(commitment: ModelCommitment, x_int, proof: NetworkProof) -> np.ndarray:
    x = _check_statement(commitment, x_int, proof)
    batch = x.shape[0]
    transcript = Transcript(TRANSCRIPT_LABEL)
    _absorb_statement(transcript, commitment, x, proof.output)
    bits = _bits_commitments_by_layer(commitment, proof, batch)
    for i, layer_bits in bits.items():
        for bits_commitment in layer_bits:
            transcript.absorb(f"bits commitment {i}", bits_commitment.to_bytes())
    last = commitment.layers[-1]
    point = _output_point(transcript, last, batch)
    claim = Claim(point, mle_evaluate(_field_table(pad_matrix(proof.output, padded(batch, 1),
                                                                  padded(last.out_features))), point))
    weight_claims = []
    for i in reversed(range(len(commitment.layers))):
        info, (decomposition_proof, linear_proof) = commitment.layers[i], proof.layer_proofs[i]
        where = f"layer {i}"
        try:
            if decomposition_proof is not None:
                claim = verify_decomposition(bits[i], info.decomposition_for(batch), claim, decomposition_proof,
                                             transcript, f"{where} / zkReLU")
            shape = LinearShape(batch, info.in_features, info.out_features)
            claim, claims = verify_linear(shape, claim, linear_proof, transcript, f"{where} / matmul")
            weight_claims = list(claims) + weight_claims
        except ProofRejected as rejection:
            raise ProofRejected(rejection.reason, f"{where} / {rejection.where}") from None
    input_table = _field_table(pad_matrix(x, padded(batch, 1), padded(commitment.in_features)))
    require(F.ext_eq(mle_evaluate(input_table, claim.point), claim.value),
            "the final claim does not match the public input", "input")
    values = np.stack([weight_claim.value for weight_claim in weight_claims])
    verify_batch(commitment.weights, _weight_points(commitment, weight_claims), values, proof.weights_opening,
                 transcript)
    return proof.output.copy()
