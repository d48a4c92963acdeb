"""Whole-network proofs: y = model(x) for a public batch x under committed weights.

Two protocols prove the same statement. **By default (``zk=True``) the weights stay private**: a hiding
commitment (one fresh copy per proof) and relation sumchecks over masked stores, :mod:`proofs.layers.network_zk`
(its docstring argues the design). **``zk=False`` is the plain protocol below, which REVEALS THE WEIGHTS**: its
opening sends columns of the Reed-Solomon encoded weight rows, and once the queried positions reach a row's
length (154 queries cover the 128-entry rows of a 16->16->4 model) every weight and bias can be interpolated
from one proof; use it for public models only (measured: 18x smaller proofs and 4x less prover time on
16->16->4 at batch 1, 3x and 2x on 784->128->10 at batch 64).

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

from dataclasses import dataclass

import numpy as np

from .. import basefold
from .. import field as F
from ..commit import MIN_VERIFY_BITS, CommitParams, Commitment, OpeningProof, commit
from ..errors import ModelError, ProofRejected
from ..mle import mle_evaluate
from ..proof_format import ByteReader, ByteWriter, from_record, parse_nested, record_kind, to_record
from ..progress import as_progress
from ..public_values import require_bounded, require_within
from ..quantize import QuantizedMLP, as_integer_input, check_field, check_input, forward_trace
from ..transcript import Transcript
from ..verdict import Verdict, rejecting
from .common import Claim, log2, pad_matrix, padded, require
from .matmul import LinearProof, LinearShape, prove_linear, verify_linear, weight_tables
from ..pcs.choice import AUTO, choose_scheme
from ..pcs.scheme import scheme_of
from .commitments import PARAMS_TYPES, commit_table, read_commitment, read_opening
from .packing import Packing
from .records import read_record, write_record
from .spec import build_model
from .relu import DecompositionProof, prove_decomposition, verify_decomposition
from .requant import decompose
from . import network_zk, prover_state
from .network_zk import HidingNetworkProof
from .statement import (FORMAT_VERSION, MAX_LAYERS, LayerInfo, ModelCommitment, check_commitment_size,  # noqa: F401
                        weight_packing)

TRANSCRIPT_LABEL = "hezk.proofs.network.v1"
PROOF_MAGIC = b"HZKNPRF1"  # inner encoding (the record container alone starts with HEZK)
MAX_BATCH = 1 << 24


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

    def __eq__(self, other) -> bool:
        return isinstance(other, NetworkProof) and self.to_bytes() == other.to_bytes()

    __hash__ = None  # compared by value, holds arrays

    def __bytes__(self) -> bytes:
        return self.to_bytes()

    KIND = "proofs.NetworkProof"

    def to_bytes(self) -> bytes:
        """A ``proofs.NetworkProof`` record (:func:`proofs.proof_format.to_record`) of :meth:`inner_bytes`."""
        return to_record(self.KIND, self.inner_bytes())

    def inner_bytes(self) -> bytes:
        """Versioned bytes: magic ``HZKNPRF1``, u16 version, then the parts (see :meth:`from_inner_bytes`)."""
        writer = ByteWriter(PROOF_MAGIC, FORMAT_VERSION)
        writer.i64_array(self.output)
        writer.u32(len(self.bits_commitments))
        for bits_commitment in self.bits_commitments:
            writer.blob(bits_commitment.to_bytes())
        writer.u32(len(self.layer_proofs))
        for decomposition, linear in self.layer_proofs:
            write_record(writer, decomposition, optional=True)
            write_record(writer, linear)
        writer.blob(self.weights_opening.to_bytes())
        return writer.getvalue()

    def __reduce__(self):
        """Pickle (Dask, multiprocessing, concurrent.futures) through the versioned bytes of ``to_bytes``."""
        return type(self).from_bytes, (self.to_bytes(),)

    @classmethod
    def from_bytes(cls, data) -> "NetworkProof":
        """Parse; anything malformed, truncated or of another kind raises ProofRejected."""
        return cls.from_inner_bytes(from_record(data, cls.KIND, "network proof"))

    @classmethod
    def from_inner_bytes(cls, data) -> "NetworkProof":
        return parse_nested(cls._parse, data, "network proof")

    @classmethod
    def _parse(cls, data) -> "NetworkProof":
        reader = ByteReader(data, PROOF_MAGIC, FORMAT_VERSION, "network proof")
        output = reader.i64_array()
        bits = tuple(read_commitment(reader.blob())
                     for _ in range(reader.bounded("bits commitment count", 0, MAX_LAYERS)))
        layer_proofs = tuple((read_record(reader, DecompositionProof, optional=True),
                              read_record(reader, LinearProof))
                             for _ in range(reader.bounded("layer count", 1, MAX_LAYERS)))
        opening = read_opening(reader.blob())
        reader.finish()
        return cls(output, bits, layer_proofs, opening)


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


def _auto_params(model: QuantizedMLP, zk: bool, max_proofs) -> object:
    """The parameters of ``Network(params=None)``: hiding Basefold's where :func:`choose_scheme` picks it for this
    MLP, else None (the scheme's defaults: hiding or plain Ligero)."""
    copies = max_proofs if zk and isinstance(max_proofs, (int, np.integer)) and not isinstance(max_proofs, bool) \
        else 1
    scheme = choose_scheme(AUTO, strategy="mlp", hiding=zk, parameter_copies=model.num_parameters * int(copies))
    return network_zk.basefold_params() if scheme == "basefold" else None


class Network:
    """The prover side: a quantized model whose weights are committed once at construction.

    ``model`` is a :class:`QuantizedMLP` or a list ``[Linear(W0, b0), ReLU(), Linear(W1, b1)]`` of float
    layers (quantized by :func:`~proofs.layers.spec.build_model` with ``frac_bits`` and ``input_bound``).
    ``Network(model).commitment`` is the public :class:`ModelCommitment`; :meth:`prove` proves
    y = model(x) for a batch x of shape (batch, in_features) or (in_features,): integers are taken as
    quantized, floats are quantized at the input scale. ``batch_size``, when given, is the batch every
    proof must have (any batch size otherwise).

    ``zk=True`` (the default): zero-knowledge proofs, the weights stay private; the commitment holds
    ``max_proofs`` hiding copies and each proof uses one (then :meth:`prove` refuses: commit again);
    ``params`` are :class:`~proofs.zk.HidingParams` (hiding Ligero) or hiding Basefold's
    (:func:`~proofs.layers.network_zk.basefold_params`); ``state`` is a file from :meth:`save_state` (or the bytes
    of :meth:`state_bytes`: prove later against the same commitment). ``zk=False``: the plain protocol, whose proofs REVEAL THE WEIGHTS (every
    weight and bias can be decoded from one proof's opened columns); ``params`` are
    :class:`~proofs.commit.CommitParams` (Ligero-style, the default) or :class:`~proofs.basefold.BasefoldParams`
    (Basefold: the weights and the packed bits tables in one O(log^2 n) batched opening; measured on
    784-1024-256-10 at batch 64: 267 KB against 1747 KB, verification 46 against 96 ms of CPU, the prover 2.4x
    the CPU time; on 16-16-4 at batch 1: 26 against 32 KB, 1.4x the prover time).
    Parameters giving a verifier less than 100 bits are refused.

    ``params=None`` (or "auto") takes the default of every command and API, :func:`proofs.pcs.choice.choose_scheme`:
    the smallest proof at the soundness floor, hiding Basefold for ``zk=True`` up to 2^17 parameters x
    ``max_proofs`` (16->16->4: 92 kB proofs against hiding Ligero's 250 kB, for about the same prover time),
    Ligero beyond and for ``zk=False``; a ``state`` keeps the scheme it was committed with.
    """

    def __init__(self, model, params=None, *, zk: bool = True, max_proofs: int = network_zk.DEFAULT_MAX_PROOFS,
                 batch_size: int | None = None, frac_bits: int = 8, input_bound: float = 1.0, state=None,
                 progress=None):
        """``progress``: True draws a bar on stderr over the commitment's steps, a callable gets ``(done, total,
        label)``; the commitment is the same either way."""
        report = as_progress(progress, "committing")
        if isinstance(model, (list, tuple)):
            model = build_model(model, frac_bits=frac_bits, input_bound=input_bound)
        if not isinstance(model, QuantizedMLP):
            raise ModelError(f"model must be a QuantizedMLP or a list of Linear/ReLU layers, "
                             f"got {type(model).__name__}")
        if not isinstance(zk, bool):
            raise ModelError(f"zk must be True or False, got {zk!r}")
        if params is None or (isinstance(params, str) and params == AUTO):
            params = None if state is not None else _auto_params(model, zk, max_proofs)
        if zk:
            params = network_zk.check_params(params)
            if params.target_bits < MIN_VERIFY_BITS:
                raise ModelError(f"params {params} give {params.target_bits} bits of commitment security "
                                 f"< {MIN_VERIFY_BITS} (verifiers refuse them)")
        elif params is not None and not isinstance(params, PARAMS_TYPES):
            raise ModelError(f"params must be a CommitParams or BasefoldParams for zk=False, got "
                             f"{type(params).__name__}")
        elif params is not None and params.security_bits < MIN_VERIFY_BITS:
            raise ModelError(f"params {params} give {params.security_bits:.1f} bits of commitment security "
                             f"< {MIN_VERIFY_BITS} (verifiers refuse them); use more queries")
        if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer))
                                       or not 1 <= batch_size <= MAX_BATCH):
            raise ModelError(f"batch_size={batch_size!r} must be an int in [1, {MAX_BATCH}] (or None for any batch)")
        bounds = check_field(model)
        self.model = model
        self.batch_size = None if batch_size is None else int(batch_size)
        self.zk = zk
        self.params = params if params is not None else CommitParams()
        infos = tuple(LayerInfo(layer.in_features, layer.out_features, layer.weight_frac, layer.in_frac,
                                layer.shift, layer.relu, bound.q_bits, bound.acc_lo, bound.acc_hi)
                      for layer, bound in zip(model.layers, bounds))
        self._weight_tables = tuple(weight_tables(layer) for layer in model.layers)
        if report is not None:
            report(1, 2, "weight tables")
        if zk and state is not None:
            saved, self._weights_witness = prover_state.load(state, network_zk.model_tables(model),
                                                             network_zk.model_layout(infos))
            if saved.layers != infos or saved.input_frac != model.input_frac:
                where = "<bytes>" if isinstance(state, (bytes, bytearray, memoryview)) else repr(state)
                raise ModelError(f"prover state {where} was saved for another model")
            weights = saved.weights
        elif zk:
            weights, self._weights_witness = network_zk.commit_model(model, infos, self.params, max_proofs)
        else:
            if state is not None:
                raise ModelError("state is the prover state of a hiding commitment: zk=False commits anew")
            packed = weight_packing(infos).pack([table for pair in self._weight_tables for table in pair])
            weights, self._weights_witness = commit_table(packed, self.params)
        self.commitment = ModelCommitment(model.scheme, model.input_frac, model.input_bound, model.error_bound,
                                          infos, weights)
        if report is not None:
            report(2, 2, "committed")
        if zk and self.commitment.soundness_bits(self.batch_size or 1) < network_zk.MIN_SOUNDNESS_BITS:
            raise ModelError(f"params {params} give {self.commitment.soundness_bits(self.batch_size or 1):.1f} "
                             f"bits of proof soundness < {network_zk.MIN_SOUNDNESS_BITS} (verifiers refuse them)")

    def __reduce_ex__(self, protocol):
        """A zero-knowledge Network refuses to pickle: it holds the SECRET prover state; send
        :meth:`state_bytes` explicitly and rebuild it with ``Network(model, state=blob)``."""
        if self.zk:
            raise ModelError("pickling a zero-knowledge Network is refused: it holds the secret prover state (the "
                             "weights' masks); send network.state_bytes() explicitly and rebuild the prover with "
                             "Network(model, state=blob)")
        return super().__reduce_ex__(protocol)

    def state_bytes(self) -> bytes:
        """The SECRET prover state of a hiding commitment as bytes (what :meth:`save_state` writes);
        ``Network(model, state=blob)`` reads them."""
        if not self.zk:
            raise ModelError("state_bytes: a zk=False commitment is deterministic, it has no prover state")
        return prover_state.to_bytes(self.commitment, self._weights_witness,
                                     network_zk.model_layout(self.commitment.layers))

    def save_state(self, path) -> None:
        """Write the secret prover state of a hiding commitment (masks, row tails, salts, spent copies) to
        ``path``, so that ``Network(model, state=path)`` proves against the same commitment later. Keep it as
        private as the weights."""
        if not self.zk:
            raise ModelError("save_state: a zk=False commitment is deterministic, it has no prover state")
        prover_state.save(path, self.commitment, self._weights_witness,
                          network_zk.model_layout(self.commitment.layers))

    @property
    def proofs_left(self) -> int:
        """How many more proofs this hiding commitment supports (each uses a fresh copy); None with zk=False."""
        if not self.zk:
            return None
        return len(self._weights_witness.witnesses) - len(self._weights_witness.spent)

    def reserve(self, where: str, count: int) -> list:
        """``count`` unused hiding copies, marked spent (in the state file's journal first when read from one):
        a batch prover hands them out ahead of its proofs (``prove(x, copy=c)``)."""
        if not self.zk:
            raise ModelError("reserve: a zk=False commitment has no hiding copies")
        return self._weights_witness.reserve(where, count)

    def soundness_bits(self, batch: int | None = None) -> float:
        """-log2 of the soundness error of a proof for ``batch`` inputs (default: batch_size, else 1)."""
        return self.commitment.soundness_bits(batch or self.batch_size or 1)

    @property
    def soundness_label(self) -> str:
        """"conjectured" or "proven": what :meth:`soundness_bits` rests on (:attr:`ModelCommitment.soundness_label`)."""
        return self.commitment.soundness_label

    def verify(self, x, proof, *, allow_conjectured: bool = False) -> Verdict:
        """:func:`verify_network` against this network's commitment."""
        return verify_network(self.commitment, x, proof, allow_conjectured=allow_conjectured)

    def witness(self, x_int) -> NetworkWitness:
        """The integer forward pass on padded tables with every layer's bit decomposition."""
        x = inputs = check_input(self.model, x_int)
        if self.batch_size is not None and x.shape[0] != self.batch_size:
            raise ModelError(f"input batch {x.shape[0]} != batch_size={self.batch_size} of this Network")
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

    def prove(self, x_int, progress=None, copy: int | None = None) -> NetworkProof:
        """Prove y = model(x); ``progress(done, total, label)`` is called after each step
        (``progress=True``: a tqdm bar on stderr). ``copy``: the hiding copy to use (zk only; default the next
        unused one)."""
        progress = as_progress(progress, "proving")
        if self.zk:
            x = check_input(self.model, x_int)
            if self.batch_size is not None and x.shape[0] != self.batch_size:
                raise ModelError(f"input batch {x.shape[0]} != batch_size={self.batch_size} of this Network")
            report = _Progress(progress, network_zk.PROVE_STEPS)
            return network_zk.prove(self, x, forward_trace(self.model, x), report, copy)
        return self.prove_witness(self.witness(x_int), progress, strict=True)

    def prove_witness(self, witness: NetworkWitness, progress=None, strict: bool = False) -> NetworkProof:
        """Prove from a (possibly hand-modified, for tests) witness (zk=False networks only).

        A tampered witness (a flipped sign bit, a cheating remainder) still yields a proof, which the
        verifier rejects; ``strict=True`` raises ProofError at the first false sumcheck claim instead.
        """
        if self.zk:
            raise ModelError("prove_witness proves with the plain protocol: build the Network with zk=False")
        scheme = scheme_of(self.params)
        decomposed = sum(layer.decomposition is not None for layer in witness.layers)
        report = _Progress(progress, len(witness.layers) + 2 * decomposed + 1)
        transcript = Transcript(TRANSCRIPT_LABEL)
        _absorb_statement(transcript, self.commitment, witness.input, witness.output)
        bits_commitments, bits_witnesses = [], {}
        if scheme.batched:  # Basefold: every bits group of the proof in one packed table
            bits_tables = [layer.decomposition.table(g) for layer in witness.layers if layer.decomposition
                           is not None for g in range(len(layer.decomposition.spec.groups))]
            if bits_tables:
                packing = Packing(tuple(table.size for table in bits_tables))
                packed_commitment, packed_witness = commit_table(packing.pack(bits_tables), self.params)
                transcript.absorb("bits commitment", packed_commitment.to_bytes())
                bits_commitments.append(packed_commitment)
        for i, layer in enumerate(witness.layers):
            if layer.decomposition is not None and scheme.batched:
                bits_witnesses[i] = None  # opened in the batch, through the packed commitment
                report(f"committed bits of layer {i}")
            elif layer.decomposition is not None:
                bits_witnesses[i] = []
                for g in range(len(layer.decomposition.spec.groups)):
                    bits_commitment, bits_witness = commit_table(layer.decomposition.table(g), self.params)
                    transcript.absorb(f"bits commitment {i}", bits_commitment.to_bytes())
                    bits_commitments.append(bits_commitment)
                    bits_witnesses[i].append(bits_witness)
                report(f"committed bits of layer {i}")
        point = _output_point(transcript, self.commitment.layers[-1], witness.batch)
        claim = Claim(point, mle_evaluate(_field_table(witness.layers[-1].out), point))
        layer_proofs, weight_claims = [None] * len(witness.layers), []
        deferred = {i: [] for i in bits_witnesses} if scheme.batched else {}  # bits claims, one opening
        for i in reversed(range(len(witness.layers))):
            layer, info = witness.layers[i], self.commitment.layers[i]
            decomposition_proof = None
            if layer.decomposition is not None:
                decomposition_proof, claim = prove_decomposition(layer.decomposition, bits_witnesses[i], claim,
                                                                 transcript, strict, deferred.get(i))
                report(f"proved zkReLU of layer {i}")
            shape = LinearShape(witness.batch, info.in_features, info.out_features)
            linear_proof, claim, claims = prove_linear(*self._weight_tables[i], _field_table(layer.input), shape,
                                                       claim, transcript, strict)
            weight_claims = list(claims) + weight_claims
            report(f"proved matmul of layer {i}")
            layer_proofs[i] = (decomposition_proof, linear_proof)
        points = _weight_points(self.commitment, weight_claims)
        claims = [c for i in sorted(deferred) for c in deferred[i]]  # Basefold: the bits claims, deferred
        witnesses, point_sets, values = [self._weights_witness], [points], [np.stack([c.value for c in
                                                                                      weight_claims])]
        if claims:  # the packed bits table, in the weights' batch
            witnesses.append(packed_witness)
            point_sets.append(np.stack([packing.point(j, c.point) for j, c in enumerate(claims)]))
            values.append(np.stack([c.value for c in claims]))
        _, opening = scheme.open(witnesses, point_sets, transcript, values)
        if not scheme.batched:  # Ligero: one opening per commitment, here the weights' alone
            (opening,) = opening
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
    kind = HidingNetworkProof if commitment.zk else NetworkProof
    require(isinstance(proof, kind), f"proof is not a {kind.__name__} (the model was committed with "
            f"zk={commitment.zk})", where)
    commitment.validate()
    x = np.asarray(x_int)
    if x.ndim == 1:
        x = x[None, :]
    require(x.ndim == 2 and x.shape[0] >= 1 and x.shape[1] == commitment.in_features,
            f"input shape {np.shape(x_int)} is not (batch, {commitment.in_features})", where)
    require(x.dtype.kind in "iuf", f"input dtype {x.dtype} is not an integer or float type", where)
    try:
        x = as_integer_input(x, commitment.input_frac)
    except ModelError as error:
        raise ProofRejected(str(error), where) from None
    x = require_bounded(x, commitment.input_bound, f"input (input_bound={commitment.input_bound})", where)
    last = commitment.layers[-1]
    require_within(proof.output, *last.output_range(), "claimed output", where,
                   shape=(x.shape[0], last.out_features))
    if commitment.zk:
        return x.astype(np.int64)
    batched = scheme_of(commitment.params, ProofRejected, where).batched
    groups = sum(len(info.decomposition_for(x.shape[0]).groups) for info in commitment.layers
                 if info.decomposition is not None)
    if batched:  # one packed bits commitment for every group
        require(len(proof.bits_commitments) == min(groups, 1),
                f"{len(proof.bits_commitments)} bits commitments, expected {min(groups, 1)} (packed)", where)
        for bits in proof.bits_commitments:
            require(isinstance(bits, type(commitment.weights)) and bits.params == commitment.params,
                    f"bits commitment parameters differ from the model's {commitment.params}", "bits commitment")
            check_commitment_size(bits, 1 << _bits_packing(commitment, x.shape[0]).num_vars, "bits commitment")
        groups = len(proof.bits_commitments)
    require(len(proof.bits_commitments) == groups,
            f"{len(proof.bits_commitments)} bits commitments for {groups} groups of bit planes", where)
    require(len(proof.layer_proofs) == len(commitment.layers),
            f"{len(proof.layer_proofs)} layer proofs for {len(commitment.layers)} layers", where)
    for i, (info, (decomposition, _)) in enumerate(zip(commitment.layers, proof.layer_proofs)):
        require((decomposition is None) == (info.decomposition is None),
                "zkReLU proof present iff the layer is requantized", f"layer {i}")
    batch_padded = padded(x.shape[0], 1)
    for i, layer_bits in ({} if batched else
                          _bits_commitments_by_layer(commitment, proof, x.shape[0])).items():
        info = commitment.layers[i]
        for bits, (_, count) in zip(layer_bits, info.decomposition_for(x.shape[0]).groups):
            at = f"layer {i} / bits commitment"
            require(isinstance(bits, type(commitment.weights)) and bits.params == commitment.params,
                    f"bits commitment parameters differ from the model's {commitment.params}", at)
            check_commitment_size(bits, batch_padded * padded(info.out_features) * count, at)
    return x.astype(np.int64)


def _bits_packing(commitment: ModelCommitment, batch: int) -> Packing:
    """Where each bits group (layers in order, then groups) sits in a Basefold proof's packed bits table."""
    batch_padded = padded(batch, 1)
    return Packing(tuple(batch_padded * padded(info.out_features) * count for info in commitment.layers
                         if info.decomposition is not None for _, count in info.decomposition_for(batch).groups))


def _bits_commitments_by_layer(commitment: ModelCommitment, proof: NetworkProof, batch: int) -> dict:
    """{layer index: [bits commitment per group]} for the requantized layers, in order."""
    by_layer, position = {}, 0
    for i, info in enumerate(commitment.layers):
        if info.decomposition is not None:
            count = len(info.decomposition_for(batch).groups)
            by_layer[i] = list(proof.bits_commitments[position:position + count])
            position += count
    return by_layer


def read_proof(data):
    """A NetworkProof or a HidingNetworkProof from its bytes (by its record kind); ProofRejected if malformed or
    another record (naming what it is)."""
    kind = record_kind(data)
    if kind == HidingNetworkProof.KIND:
        return HidingNetworkProof.from_bytes(data)
    if kind is not None and kind != NetworkProof.KIND:  # another record: name both proof kinds
        from_record(data, (NetworkProof.KIND, HidingNetworkProof.KIND), "proof")
    return NetworkProof.from_bytes(data)


#: the proof kind named by :func:`verify_network`'s verdicts and rejections
KIND = "MLP inference"


def verify_network(commitment: ModelCommitment, x_int, proof, *, allow_conjectured: bool = False) -> Verdict:
    """Verify ``proof`` that proof.output = model(x) under ``commitment``; return a :class:`~proofs.verdict.Verdict`
    (truthy; ``.output`` the proven output, int64; ``np.asarray(verdict)`` too; ``.soundness_bits``).

    ``commitment`` and ``proof`` may also be given as their bytes. Raises :class:`ProofRejected` (and
    only that, its ``where`` beginning "MLP inference proof") when anything is malformed, inconsistent or false.
    Basefold parameters ``conjectured=True`` (chosen by the prover, in the commitment's bytes) are refused unless
    ``allow_conjectured=True``; then the soundness is conjectured (:attr:`ModelCommitment.soundness_label`).
    """
    with rejecting(KIND):
        if isinstance(commitment, (bytes, bytearray, memoryview)):
            commitment = ModelCommitment.from_bytes(commitment)
        if isinstance(proof, (bytes, bytearray, memoryview)):
            proof = read_proof(proof)
        if isinstance(commitment, ModelCommitment) and commitment.zk:
            output = network_zk.verify(commitment, _check_statement(commitment, x_int, proof), proof)
        else:
            output = _verify(commitment, x_int, proof, allow_conjectured)
        return Verdict.measured(KIND, output, commitment.soundness_bits, len(output))


def _verify(commitment: ModelCommitment, x_int, proof: NetworkProof, allow_conjectured: bool) -> np.ndarray:
    x = _check_statement(commitment, x_int, proof)
    scheme = scheme_of(commitment.params, ProofRejected, "model commitment")
    batched = scheme.batched
    if batched:  # the verifier's choice, before any work
        basefold.check_conjectured(commitment.params, allow_conjectured, "model commitment")
    batch = x.shape[0]
    transcript = Transcript(TRANSCRIPT_LABEL)
    _absorb_statement(transcript, commitment, x, proof.output)
    if batched:  # one packed bits commitment, opened in the batch
        bits = {i: None for i, info in enumerate(commitment.layers) if info.decomposition is not None}
        for bits_commitment in proof.bits_commitments:
            transcript.absorb("bits commitment", bits_commitment.to_bytes())
    else:
        bits = _bits_commitments_by_layer(commitment, proof, batch)
        for i, layer_bits in bits.items():
            for bits_commitment in layer_bits:
                transcript.absorb(f"bits commitment {i}", bits_commitment.to_bytes())
    last = commitment.layers[-1]
    point = _output_point(transcript, last, batch)
    claim = Claim(point, mle_evaluate(_field_table(pad_matrix(proof.output, padded(batch, 1),
                                                                  padded(last.out_features))), point))
    weight_claims = []
    deferred = {i: [] for i in bits} if batched else {}
    for i in reversed(range(len(commitment.layers))):
        info, (decomposition_proof, linear_proof) = commitment.layers[i], proof.layer_proofs[i]
        where = f"layer {i}"
        try:
            if decomposition_proof is not None:
                claim = verify_decomposition(bits[i], info.decomposition_for(batch), claim, decomposition_proof,
                                             transcript, "zkReLU", deferred.get(i))
            shape = LinearShape(batch, info.in_features, info.out_features)
            claim, claims = verify_linear(shape, claim, linear_proof, transcript, "matmul")  # prefixed below
            weight_claims = list(claims) + weight_claims
        except ProofRejected as rejection:
            raise ProofRejected(rejection.reason, f"{where} / {rejection.where}") from None
    input_table = _field_table(pad_matrix(x, padded(batch, 1), padded(commitment.in_features)))
    require(F.ext_eq(mle_evaluate(input_table, claim.point), claim.value),
            "the final claim does not match the public input", "input")
    values = np.stack([weight_claim.value for weight_claim in weight_claims])
    if batched:  # the weights and every bits group in one batched opening
        require(all(group.opening is None for pair in proof.layer_proofs if pair[0] is not None
                    for group in pair[0].groups), "Basefold proofs open the bits groups in the batch only", "bits")
    claims = [c for i in sorted(deferred) for c in deferred[i]]
    commitments, points, all_values = [commitment.weights], [_weight_points(commitment, weight_claims)], [values]
    if claims:
        packing = _bits_packing(commitment, batch)
        commitments.append(proof.bits_commitments[0])
        points.append(np.stack([packing.point(j, c.point) for j, c in enumerate(claims)]))
        all_values.append(np.stack([c.value for c in claims]))
    scheme.verify(commitments, points, all_values, proof.weights_opening if batched else (proof.weights_opening,),
                  transcript, allow_conjectured=allow_conjectured)
    return proof.output.copy()
