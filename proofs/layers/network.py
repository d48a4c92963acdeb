"""Whole-network proofs: y = model(x) for a public batch x under committed weights.

Statement: the :class:`ModelCommitment` (shapes, quantization parameters, per-layer worst-case
bounds, commitments to every weight matrix and bias), the public integer input batch x and the
claimed integer output y. All of it is absorbed into one transcript before the first challenge.

Protocol (zkDL's layer-by-layer reduction, Sun-Li-Zhang, section 4, made non-interactive by
Fiat-Shamir): the prover commits to the bits of every requantized/ReLU layer; the verifier draws a
random point r and evaluates y~(r) itself; from the last layer back to the first, each zkReLU
reduces the claim on a layer's output to one on its accumulator (:mod:`proofs.layers.relu`) and each
matmul sumcheck reduces that to one on the layer's input (:mod:`proofs.layers.matmul`), opening the
committed weights on the way; finally the verifier checks the claim on x~ itself. The whole batch
(any size) is proved at once: the batch axis is a variable block of every table.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields

import numpy as np

from .. import field as F
from ..commit import CommitParams, Commitment, OpeningProof, commit
from ..errors import ModelError, ProofRejected
from ..mle import mle_evaluate
from ..proof_format import ByteReader, ByteWriter, parse_nested
from ..quantize import FIELD_BITS, FIELD_HALF, QuantizedMLP, check_field, check_input, forward_trace
from ..sumcheck import SumcheckProof
from ..transcript import Transcript
from .common import Claim, log2, pad_matrix, padded, require
from .matmul import CommittedLinear, LinearProof, LinearShape, commit_linear, prove_linear, verify_linear
from .relu import DecompositionProof, prove_decomposition, verify_decomposition
from .requant import Decomposition, DecompositionWitness, decompose

TRANSCRIPT_LABEL = "hezk.proofs.network.v1"
COMMITMENT_MAGIC, PROOF_MAGIC, FORMAT_VERSION = b"HEZKMCOM", b"HEZKPRF\x00", 1
MAX_FEATURES = 1 << 24
MAX_LAYERS = 64


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

    def output_range(self) -> tuple:
        """[lo, hi] every output integer lies in."""
        if self.decomposition is None:
            return self.acc_lo, self.acc_hi
        half = 1 << (self.q_bits - 1)
        return (0 if self.relu else -half), half - 1


@dataclass(frozen=True, eq=False)
class ModelCommitment:
    """What the model owner publishes once: layer descriptions and short weight commitments."""

    scheme: str
    input_frac: int
    input_bound: int
    error_bound: float
    layers: tuple
    weight_commitments: tuple
    bias_commitments: tuple

    @property
    def in_features(self) -> int:
        return self.layers[0].in_features

    @property
    def output_frac(self) -> int:
        last = self.layers[-1]
        return last.in_frac + last.weight_frac - last.shift

    @property
    def params(self) -> CommitParams:
        """The commitment parameters (the same for every weight, bias and bits commitment)."""
        return self.weight_commitments[0].params

    def soundness_bits(self, batch: int) -> float:
        """-log2 of the whole proof's soundness error for a batch of ``batch`` inputs (union bound).

        Terms, with |F| = p^4: the output point (kM + kB)/|F|; per zkReLU the batching 2/|F|, the
        bit-check point and the degree-3 sumcheck 4 (kE + kJ)/|F| and one batch opening; per matmul the
        degree-2 sumcheck 2 kN/|F| and two openings; each opening fails w.p. 2^-security_bits of its
        commitment (:attr:`proofs.commit.Commitment.security_bits`).
        """
        batch_vars = log2(padded(batch, 1))
        field_errors = log2(padded(self.layers[-1].out_features)) + batch_vars
        opening_error = 0.0
        for info, weight, bias in zip(self.layers, self.weight_commitments, self.bias_commitments):
            field_errors += 2 * log2(padded(info.in_features))
            opening_error += 2.0 ** -weight.security_bits + 2.0 ** -bias.security_bits
            if info.decomposition is not None:
                bits_vars = batch_vars + log2(padded(info.out_features)) + log2(info.decomposition.padded_width)
                field_errors += 2 + 4 * bits_vars
                opening_error += 2.0 ** -Commitment(b"", bits_vars, self.params).security_bits
        return -math.log2(field_errors * 2.0 ** -F.EXT_BITS + opening_error)

    def to_bytes(self) -> bytes:
        writer = ByteWriter(COMMITMENT_MAGIC, FORMAT_VERSION)
        writer.text(self.scheme)
        writer.i64(self.input_frac)
        writer.i64(self.input_bound)
        writer.f64(self.error_bound)
        writer.u32(len(self.layers))
        for info, weight, bias in zip(self.layers, self.weight_commitments, self.bias_commitments):
            for value in (info.in_features, info.out_features, info.weight_frac, info.in_frac, info.shift,
                          int(info.relu), info.q_bits, info.acc_lo, info.acc_hi):
                writer.i64(value)
            writer.blob(weight.to_bytes())
            writer.blob(bias.to_bytes())
        return writer.getvalue()

    @classmethod
    def from_bytes(cls, data) -> "ModelCommitment":
        """Parse and validate; anything malformed raises ProofRejected."""
        reader = ByteReader(data, COMMITMENT_MAGIC, FORMAT_VERSION, "model commitment")
        scheme, input_frac, input_bound, error_bound = reader.text(), reader.i64(), reader.i64(), reader.f64()
        count = reader.bounded("layer count", 1, MAX_LAYERS)
        layers, weights, biases = [], [], []
        for _ in range(count):
            values = [reader.i64() for _ in range(9)]
            require(values[5] in (0, 1), f"relu flag {values[5]} is not 0 or 1", reader.what)
            layers.append(LayerInfo(*values[:5], bool(values[5]), *values[6:]))
            weights.append(parse_nested(Commitment.from_bytes, reader.blob(), "weight commitment"))
            biases.append(parse_nested(Commitment.from_bytes, reader.blob(), "bias commitment"))
        reader.finish()
        commitment = cls(scheme, input_frac, input_bound, error_bound, tuple(layers), tuple(weights), tuple(biases))
        commitment.validate()
        return commitment

    def validate(self) -> None:
        """Check the description is consistent and provable in the field (ProofRejected otherwise)."""
        where = "model commitment"
        require(0 < self.input_bound <= FIELD_HALF, f"input_bound={self.input_bound} not in (0, {FIELD_HALF}]", where)
        require(math.isfinite(self.error_bound) or self.error_bound == math.inf, "error_bound is nan", where)
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
            _check_commitment(self.weight_commitments[i], padded(info.out_features) * padded(info.in_features),
                              f"{at} / weights")
            _check_commitment(self.bias_commitments[i], padded(info.out_features), f"{at} / bias")
            require(self.weight_commitments[i].params == self.params and self.bias_commitments[i].params == self.params,
                    "commitment parameters differ between layers", at)


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
    """The claimed output, the bits commitments (one per requantized layer) and per-layer proofs
    (``layer_proofs[i]`` = (DecompositionProof or None, LinearProof) of layer i)."""

    output: np.ndarray
    bits_commitments: tuple
    layer_proofs: tuple

    def to_bytes(self) -> bytes:
        writer = ByteWriter(PROOF_MAGIC, FORMAT_VERSION)
        writer.i64_array(self.output)
        writer.u32(len(self.bits_commitments))
        for bits_commitment in self.bits_commitments:
            writer.blob(bits_commitment.to_bytes())
        writer.u32(len(self.layer_proofs))
        for decomposition, linear in self.layer_proofs:
            writer.u8(decomposition is not None)
            if decomposition is not None:
                _write_fields(writer, decomposition)
            _write_fields(writer, linear)
        return writer.getvalue()

    @classmethod
    def from_bytes(cls, data) -> "NetworkProof":
        """Parse; anything malformed or truncated raises ProofRejected."""
        reader = ByteReader(data, PROOF_MAGIC, FORMAT_VERSION, "network proof")
        output = reader.i64_array()
        bits = tuple(parse_nested(Commitment.from_bytes, reader.blob(), "bits commitment")
                     for _ in range(reader.bounded("bits commitment count", 0, MAX_LAYERS)))
        layer_proofs = []
        for _ in range(reader.bounded("layer count", 1, MAX_LAYERS)):
            decomposition = _read_fields(reader, DecompositionProof) if reader.flag() else None
            layer_proofs.append((decomposition, _read_fields(reader, LinearProof)))
        reader.finish()
        return cls(output, bits, tuple(layer_proofs))


# Field kinds of each layer proof, in dataclass field order: F_p4 elements or nested objects with bytes.
_SCHEMAS = {
    DecompositionProof: ("ext", SumcheckProof, "ext", "ext", OpeningProof),
    LinearProof: ("ext", SumcheckProof, "ext", "ext", OpeningProof, OpeningProof),
}


def _write_fields(writer: ByteWriter, proof) -> None:
    for kind, item in zip(_SCHEMAS[type(proof)], fields(proof)):
        value = getattr(proof, item.name)
        if kind == "ext":
            writer.ext(value)
        else:
            writer.blob(value.to_bytes())


def _read_fields(reader: ByteReader, cls):
    values = [reader.ext() if kind == "ext" else parse_nested(kind.from_bytes, reader.blob(), kind.__name__)
              for kind in _SCHEMAS[cls]]
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
        self._committed = tuple(commit_linear(layer, self.params) for layer in model.layers)
        infos = tuple(LayerInfo(layer.in_features, layer.out_features, layer.weight_frac, layer.in_frac,
                                layer.shift, layer.relu, bound.q_bits, bound.acc_lo, bound.acc_hi)
                      for layer, bound in zip(model.layers, bounds))
        self.commitment = ModelCommitment(model.scheme, model.input_frac, model.input_bound, model.error_bound,
                                          infos, tuple(c.weight_commitment for c in self._committed),
                                          tuple(c.bias_commitment for c in self._committed))

    @property
    def committed_layers(self) -> tuple:
        return self._committed

    def witness(self, x_int) -> NetworkWitness:
        """The integer forward pass on padded tables with every layer's bit decomposition."""
        x = inputs = check_input(self.model, x_int)
        batch_padded = padded(x.shape[0], 1)
        layers = []
        for info, trace in zip(self.commitment.layers, forward_trace(self.model, x)):
            rows = pad_matrix(x, batch_padded, padded(info.in_features))
            acc = pad_matrix(trace.acc, batch_padded, padded(info.out_features))
            spec = info.decomposition
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
        report = _Progress(progress, len(witness.layers) + 2 * decomposed)  # matmuls, bit commitments, zkReLUs
        transcript = Transcript(TRANSCRIPT_LABEL)
        _absorb_statement(transcript, self.commitment, witness.input, witness.output)
        bits_commitments, bits_witnesses = [], {}
        for i, layer in enumerate(witness.layers):
            if layer.decomposition is not None:
                bits_commitment, bits_witnesses[i] = commit(layer.decomposition.table(), self.params)
                transcript.absorb(f"bits commitment {i}", bits_commitment.to_bytes())
                bits_commitments.append(bits_commitment)
                report(f"committed bits of layer {i}")
        point = _output_point(transcript, self.commitment.layers[-1], witness.batch)
        claim = Claim(point, mle_evaluate(_field_table(witness.layers[-1].out), point))
        layer_proofs = [None] * len(witness.layers)
        for i in reversed(range(len(witness.layers))):
            layer, info = witness.layers[i], self.commitment.layers[i]
            decomposition_proof = None
            if layer.decomposition is not None:
                decomposition_proof, claim = prove_decomposition(layer.decomposition, bits_witnesses[i],
                                                                 _field_table(layer.acc), claim, transcript)
                report(f"proved zkReLU of layer {i}")
            shape = LinearShape(witness.batch, info.in_features, info.out_features)
            linear_proof, claim = prove_linear(self._committed[i], _field_table(layer.input), shape, claim,
                                               transcript)
            report(f"proved matmul of layer {i}")
            layer_proofs[i] = (decomposition_proof, linear_proof)
        report("done")
        return NetworkProof(np.array(witness.output, dtype=np.int64), tuple(bits_commitments), tuple(layer_proofs))


class _Progress:
    def __init__(self, callback, total: int):
        self.callback, self.total, self.done = callback, total + 1, 0

    def __call__(self, label: str) -> None:
        self.done += 1
        if self.callback is not None:
            self.callback(self.done, self.total, label)


def _check_statement(commitment: ModelCommitment, x_int, proof: NetworkProof):
    """Shape-first checks of the statement; returns the int64 input batch."""
    where = "statement"
    require(isinstance(commitment, ModelCommitment), "commitment is not a ModelCommitment", where)
    require(isinstance(proof, NetworkProof), "proof is not a NetworkProof", where)
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
    decomposed = [i for i, info in enumerate(commitment.layers) if info.decomposition is not None]
    require(len(proof.bits_commitments) == len(decomposed),
            f"{len(proof.bits_commitments)} bits commitments for {len(decomposed)} requantized layers", where)
    require(len(proof.layer_proofs) == len(commitment.layers),
            f"{len(proof.layer_proofs)} layer proofs for {len(commitment.layers)} layers", where)
    for i, (info, (decomposition, _)) in enumerate(zip(commitment.layers, proof.layer_proofs)):
        require((decomposition is None) == (info.decomposition is None),
                "zkReLU proof present iff the layer is requantized", f"layer {i}")
    batch_padded = padded(x.shape[0], 1)
    for i, bits in zip(decomposed, proof.bits_commitments):
        info = commitment.layers[i]
        require(bits.params == commitment.params, f"bits commitment parameters {bits.params} differ from the "
                f"model's {commitment.params}", f"layer {i} / bits commitment")
        _check_commitment(bits, batch_padded * padded(info.out_features) * info.decomposition.padded_width,
                          f"layer {i} / bits commitment")
    return x.astype(np.int64)


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
    bits = {}
    decomposed = [i for i, info in enumerate(commitment.layers) if info.decomposition is not None]
    for i, bits_commitment in zip(decomposed, proof.bits_commitments):
        transcript.absorb(f"bits commitment {i}", bits_commitment.to_bytes())
        bits[i] = bits_commitment
    last = commitment.layers[-1]
    point = _output_point(transcript, last, batch)
    claim = Claim(point, mle_evaluate(_field_table(pad_matrix(proof.output, padded(batch, 1),
                                                                  padded(last.out_features))), point))
    for i in reversed(range(len(commitment.layers))):
        info, (decomposition_proof, linear_proof) = commitment.layers[i], proof.layer_proofs[i]
        where = f"layer {i}"
        try:
            if decomposition_proof is not None:
                claim = verify_decomposition(bits[i], info.decomposition, claim, decomposition_proof, transcript,
                                             f"{where} / zkReLU")
            shape = LinearShape(batch, info.in_features, info.out_features)
            claim = verify_linear(commitment.weight_commitments[i], commitment.bias_commitments[i], shape, claim,
                                  linear_proof, transcript, f"{where} / matmul")
        except ProofRejected as rejection:
            raise ProofRejected(rejection.reason, f"{where} / {rejection.where}"
                                if not rejection.where.startswith(where) else rejection.where) from None
    input_table = _field_table(pad_matrix(x, padded(batch, 1), padded(commitment.in_features)))
    require(F.ext_eq(mle_evaluate(input_table, claim.point), claim.value),
            "the final claim does not match the public input", "input")
    return proof.output.copy()
