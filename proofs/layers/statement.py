"""The public statement of a network proof: layer descriptions and the model owner's weight commitment.

:class:`ModelCommitment` is what the model owner publishes once: for every layer its shapes, its
quantization (scales, requantization shift, ReLU) and its declared worst-case bounds (accumulator
interval, signed width Q of the requantized values), plus the commitment to all weights and biases: a
:class:`~proofs.layers.reusable.Reusable` hiding commitment (zero knowledge, the default) or one plain
commitment to the packed table (:mod:`proofs.layers.packing`; ``zk=False``, which reveals the weights).
It serializes to versioned bytes (the weights' blob is told apart by its magic); parsing validates it and
rejects anything malformed with :class:`ProofRejected`. The declared bounds are public: they reveal, per
layer, the extreme accumulator values over all admissible inputs (a few numbers about the weights).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields
from numbers import Integral

import numpy as np

from .. import field as F
from ..commit import Commitment
from ..proof_format import ByteReader, ByteWriter, from_record, parse_nested, record_kind, to_record
from ..quantize import FIELD_BITS, FIELD_HALF, MAX_FRAC_BITS
from ..pcs.scheme import scheme_of
from .commitments import COMMITMENT_TYPES, opening_error, read_commitment, soundness_label
from .common import log2, padded, require
from .packing import Packing
from .requant import Decomposition
from .reusable import Reusable

COMMITMENT_MAGIC, FORMAT_VERSION = b"HZKMCOM1", 1  # inner encoding (the record container alone starts with HEZK)
MAX_FEATURES = 1 << 24
MAX_LAYERS = 64
MAX_LAYER_ENTRIES = 1 << 26  #: padded entries of one layer's weight table (a verifier's memory grows with them)
MAX_MODEL_ENTRIES = 1 << 27  #: padded entries of all the weights and biases
SCHEMES = ("fixed_point", "int8")
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
    def params(self):
        """The commitment parameters (CommitParams, or the hiding copies' HidingParams with zk)."""
        return self.weights.params

    @property
    def zk(self) -> bool:
        """True when the weights are hidden (a :class:`~proofs.layers.reusable.Reusable` hiding commitment)."""
        return not isinstance(self.weights, COMMITMENT_TYPES)

    def statement_bytes(self) -> bytes:
        """What a proof's transcript absorbs: the bytes, with the weights' part replaced by its digest for a
        hiding commitment (the copies' agreement proof is checked once, not hashed into every proof)."""
        if not self.zk:
            return self.to_bytes()
        return self._bytes(self.weights.digest())

    def soundness_bits(self, batch: int) -> float:
        """-log2 of a proof's soundness error for a batch of ``batch`` inputs, per attempt (union bound): a
        prover who grinds 2^k Fiat-Shamir transcripts succeeds w.p. about 2^(k - bits).

        Hiding (zk) commitments: :func:`proofs.layers.network_zk.soundness_bits`. Plain ones:

        Terms, with |F| = p^4: the output point (kM + kB)/|F|; per zkReLU the select sumcheck 3 kE/|F|,
        the batching 3/|F|, per bit group the bit-check point and sumcheck 4 (kE + kJ)/|F| and one opening;
        per matmul the sumcheck 2 kN/|F|; one batch opening of the weights. An opening fails w.p.
        2^-security_bits of its commitment (:attr:`proofs.commit.Commitment.security_bits`). With Basefold
        parameters ``conjectured=True`` the figure is conjectured (:attr:`soundness_label`).
        """
        if self.zk:
            from .network_zk import soundness_bits
            return soundness_bits(self, batch)
        batch_vars = log2(padded(batch, 1))
        field_errors = log2(padded(self.layers[-1].out_features)) + batch_vars
        opened = [self.weights]  # Ligero: each opened alone; Basefold: all in one batch (commitments.opening_error)
        for info in self.layers:
            field_errors += 2 * log2(padded(info.in_features))
            if info.decomposition is not None:
                element_vars = batch_vars + log2(padded(info.out_features))
                field_errors += 3 * element_vars * info.relu + 3
                for _, count in info.decomposition_for(batch).groups:
                    bits_vars = element_vars + log2(count)
                    field_errors += 4 * bits_vars
                    opened.append(type(self.weights)(b"", bits_vars, self.params))
        if len(opened) > 1 and scheme_of(self.weights).batched:  # Basefold: the groups packed in one table
            packed = log2(padded(sum(1 << c.num_vars for c in opened[1:]), 1))
            opened = [self.weights, type(self.weights)(b"", packed, self.params)]
        return -math.log2(field_errors * 2.0 ** -F.EXT_BITS + opening_error(opened))

    @property
    def soundness_label(self) -> str:
        """"conjectured" when :meth:`soundness_bits` rests on the RS proximity conjecture (Basefold parameters
        ``conjectured=True``, which verifiers refuse unless they opt in), else "proven"."""
        return "proven" if self.zk else soundness_label(self.params)

    def __eq__(self, other) -> bool:
        return isinstance(other, ModelCommitment) and self.to_bytes() == other.to_bytes()

    def __hash__(self) -> int:
        return hash(self.to_bytes())

    def __bytes__(self) -> bytes:
        return self.to_bytes()

    KIND = "proofs.ModelCommitment"

    def to_bytes(self) -> bytes:
        """A ``proofs.ModelCommitment`` record (:func:`proofs.proof_format.to_record`) of :meth:`inner_bytes`."""
        return to_record(self.KIND, self.inner_bytes())

    def inner_bytes(self) -> bytes:
        """Versioned bytes: magic ``HZKMCOM1``, u16 version, then the statement (see :meth:`from_inner_bytes`)."""
        return self._bytes(self.weights.to_bytes())

    def _bytes(self, weights: bytes) -> bytes:
        writer = ByteWriter(COMMITMENT_MAGIC, FORMAT_VERSION)
        writer.text(self.scheme)
        writer.i64(self.input_frac)
        writer.i64(self.input_bound)
        writer.f64(self.error_bound)
        writer.u32(len(self.layers))
        for info in self.layers:
            for item in fields(info):
                writer.i64(int(getattr(info, item.name)))
        writer.blob(weights)
        return writer.getvalue()

    def __reduce__(self):
        """Pickle (Dask, multiprocessing, concurrent.futures) through the versioned bytes of ``to_bytes``."""
        return type(self).from_bytes, (self.to_bytes(),)

    @classmethod
    def from_bytes(cls, data) -> "ModelCommitment":
        """Parse and validate; anything malformed or of another kind raises ProofRejected."""
        return cls.from_inner_bytes(from_record(data, cls.KIND, "model commitment"))

    @classmethod
    def from_inner_bytes(cls, data) -> "ModelCommitment":
        """Inverse of :meth:`inner_bytes` (parsed and validated; ProofRejected otherwise)."""
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
        blob = reader.blob()
        if record_kind(blob) == Reusable.KIND:
            weights = parse_nested(Reusable.from_bytes, blob, "weights commitment")
        else:
            weights = read_commitment(blob)
        reader.finish()
        commitment = cls(scheme, input_frac, input_bound, error_bound, tuple(layers), weights)
        commitment.validate()
        return commitment

    def validate(self) -> None:
        """Check every field against what the soundness argument and the verifier's memory need (ProofRejected
        naming the layer and the field otherwise); every parse runs it, and so does ``commit`` before it writes.

        A layer proved by a bit decomposition (ReLU or a shift) needs shift >= 0, q_bits >= 1 and shift + q_bits <=
        FIELD_BITS (one accumulator, one decomposition); a raw-accumulator layer's output is its accumulator, checked
        in [acc_lo, acc_hi] (its q_bits, the signed width of that interval, may reach FIELD_BITS + 1). Accumulator
        bounds and the input bound lie within (p-1)/2, scales within [-MAX_FRAC_BITS, MAX_FRAC_BITS] and chained
        (a layer's in_frac is the previous output's), each padded weight table within MAX_LAYER_ENTRIES and all of
        them within MAX_MODEL_ENTRIES."""
        where = "model commitment"
        require(self.scheme in SCHEMES, f"scheme {self.scheme!r} is not one of {SCHEMES}", where)
        require(0 < self.input_bound <= FIELD_HALF, f"input_bound={self.input_bound} not in (0, {FIELD_HALF}]", where)
        require(abs(self.input_frac) <= MAX_FRAC_BITS, f"input_frac={self.input_frac} not in [-{MAX_FRAC_BITS}, "
                f"{MAX_FRAC_BITS}]", where)
        require(self.error_bound >= 0, f"error_bound={self.error_bound} is not a number >= 0 (inf: not stated)",
                where)
        require(isinstance(self.weights, COMMITMENT_TYPES + (Reusable,)),
                "weights is not a Commitment, BasefoldCommitment or Reusable", where)
        require(isinstance(self.layers, tuple) and 1 <= len(self.layers) <= MAX_LAYERS,
                f"{len(self.layers)} layers: expected 1 to {MAX_LAYERS}", where)
        frac, total = self.input_frac, 0
        for i, info in enumerate(self.layers):
            at = f"{where} / layer {i}"
            require(isinstance(info, LayerInfo), f"a {type(info).__name__}, not a LayerInfo", at)
            values = {item.name: getattr(info, item.name) for item in fields(LayerInfo) if item.name != "relu"}
            wrong = [name for name, value in values.items()
                     if isinstance(value, bool) or not isinstance(value, Integral)]
            require(not wrong and isinstance(info.relu, (bool, np.bool_)), f"fields {wrong or ['relu']} are not "
                    f"integers (relu: true or false), as a parsed statement's are", at)
            require(1 <= info.in_features <= MAX_FEATURES and 1 <= info.out_features <= MAX_FEATURES,
                    f"features {info.in_features}->{info.out_features} not in [1, {MAX_FEATURES}]", at)
            expected_in = self.layers[i - 1].out_features if i else info.in_features
            require(info.in_features == expected_in, f"takes {info.in_features} features, previous gives {expected_in}",
                    at)
            entries = padded(info.out_features) * padded(info.in_features)
            require(entries <= MAX_LAYER_ENTRIES, f"weight table of {entries} padded entries > {MAX_LAYER_ENTRIES} "
                    f"(MAX_LAYER_ENTRIES)", at)
            total += entries + padded(info.out_features)
            require(abs(info.weight_frac) <= MAX_FRAC_BITS, f"weight_frac={info.weight_frac} not in "
                    f"[-{MAX_FRAC_BITS}, {MAX_FRAC_BITS}]", at)
            require(info.in_frac == frac and abs(frac) <= MAX_FRAC_BITS, f"in_frac={info.in_frac}: the previous "
                    f"output's scale is 2^{frac}, within 2^+-{MAX_FRAC_BITS}", at)
            require(-FIELD_HALF <= info.acc_lo <= info.acc_hi <= FIELD_HALF,
                    f"accumulator bounds [{info.acc_lo}, {info.acc_hi}] exceed the field's half {FIELD_HALF}", at)
            if info.decomposition is None:  # the raw accumulator: q_bits is its interval's signed width
                require(1 <= info.q_bits <= FIELD_BITS + 1, f"q_bits {info.q_bits} of a raw accumulator not within "
                        f"[1, {FIELD_BITS + 1}]", at)
            else:
                require(0 <= info.shift < FIELD_BITS and 1 <= info.q_bits and info.shift + info.q_bits <= FIELD_BITS,
                        f"shift {info.shift} + q_bits {info.q_bits} not within [1, {FIELD_BITS}]", at)
            frac = info.in_frac + info.weight_frac - info.shift
        require(total <= MAX_MODEL_ENTRIES, f"weight tables of {total} padded entries > {MAX_MODEL_ENTRIES} "
                f"(MAX_MODEL_ENTRIES)", where)
        if self.zk:
            from .network_zk import check_commitment
            check_commitment(self, f"{where} / weights")
        else:
            check_commitment_size(self.weights, 1 << weight_packing(self.layers).num_vars, f"{where} / weights")


def check_commitment_size(commitment, length: int, where: str) -> None:
    require(getattr(commitment, "num_vars", None) == log2(length),
            f"commitment has num_vars={getattr(commitment, 'num_vars', None)}, the layer needs {log2(length)}", where)
