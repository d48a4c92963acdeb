"""Zero-knowledge network proofs: the :class:`~proofs.layers.network.Network` statement over masked stores.

**Why a second protocol.** The plain Network proof (:mod:`proofs.layers.network`) hands claims from layer to
layer and settles the weight claims by one opening of a non-hiding Ligero commitment: its opened columns are
plain Reed-Solomon symbols of the weight rows (for a 16->16->4 model the queries cover a whole row length,
so one proof reveals all the weights), and every stated value is an MLE value of the witness. Hiding needs
three things: (1) a hiding commitment (random tails, salted leaves, masking rows: :mod:`proofs.zk`), (2)
zero-knowledge sumchecks and (3) stated values that are uniform. :mod:`proofs.relations` already gives all
three for chains of sumchecks (Libra, Xie et al., CRYPTO 2019, section 4.2: masked extensions, each relation
one sumcheck with a public claim), and :mod:`proofs.layers.step_relations` runs such relations through a
:class:`~proofs.layers.step_relations.Channel`. This module reuses both: it only states the Network's
relations (biases, per-layer shifts, widths and ReLU flags) over two masked stores.

**Stores.** The model store ``w`` holds W_i (index k + N o) and b_i (padded to >= 16 entries); it is
committed once by :class:`~proofs.layers.network.Network` with ``zk=True`` as ``max_proofs`` hiding copies
with a proof that they agree (:mod:`proofs.layers.reusable`), and each proof opens its own copy, so any
number of proofs up to ``max_proofs`` stays zero knowledge (a store's masks and row tails hide one proof's
values and columns, not an unbounded number). The proof store ``p`` (fresh per proof) holds the hidden
activations A_i (i >= 1) and every requantized layer's bit planes (:mod:`proofs.layers.requant`). Feature
axes are padded to >= 8 and the batch axis to the fewest rows giving each stored tensor >= 4 element
variables (:func:`batch_width`: enough masked variables for the values it states).

**Basefold stores** (``params=basefold_params()``, :mod:`proofs.basefold_zk`): the same relations over a
:class:`~proofs.layers.basefold_channel.BasefoldChannel`: the model copies are hiding Basefold commitments
(two openings each: the agreement and one proof), the proof store also holds every relation's sumcheck mask
(committed before the first challenge; the relation shapes are public), and the copy, the proof store and the
masks open in ONE batch at the end (one proof item instead of one opening per store and per mask).

**Alternative considered.** Calling :func:`~proofs.layers.step_proof.prove_forward` directly: its model has
no biases, one shift and one activation width for every layer, ReLU on every hidden layer; the Network's
statement (biases, per-layer shifts, widths and ReLU flags, a public input) would not fit without changing
its relations, which the training proofs share. Stating the Network's relations over the same Channel
reuses the whole machinery instead (hiding commitment, ZK sumcheck, masked values, copies).

**Relations** (tau a fresh point per relation; c, c' and h a layer's rebuild and output coefficients and
offset, s its sign plane, valid_B(b) = [b < batch], valid_N(k) = [k < in_features]):

- layer i: sum_k valid_N(k) A_i(tau_b, k) W_i(tau_o, k) + valid_B~(tau_b) sum_o eq(tau_o, o) b_i(o)
  - sum_e eq(tau, e) sum_j c_j B_i(e, j) + h = 0 (the public input X in place of A_0; without a
  decomposition the last term is A_(i+1), or the claim is O~(tau) for the last layer);
- select: sum_e eq(tau, e) [A_(i+1)(e) - q_i(e) + s_i(e) q_i(e)] = 0 (no s without ReLU), q_i = sum_j c'_j B_i;
- output: sum_e eq(tau, e) [q(e) - s(e) q(e)] = O~(tau) for the public output O (zero on padded positions);
- bits: every entry of every plane is a bit (one batched relation).

The valid_N and valid_B indicators make the padded positions of the weights, biases and hidden activations
irrelevant (so the committed tensors prove the declared shape); the output relation forces the padded
output to zero. Soundness: the union bound of :func:`soundness_bits` (every sumcheck, its mask opening,
every store opening). Zero knowledge: as :mod:`proofs.relations` (honest verifier, random oracle).
"""
from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass

import numpy as np

from .. import basefold as B
from .. import basefold_zk as BZ
from .. import field as F
from ..errors import ModelError
from ..proof_format import ByteReader, ByteWriter, from_record, parse_nested, to_record
from ..mle import mle_evaluate
from ..relations import MIN_ELEMENT_VARS, Slot, StoreLayout, Stored, Term, commit_store, eq_factor, table_factor
from ..transcript import Transcript
from ..pcs.scheme import HIDING_BASEFOLD, HIDING_LIGERO, scheme_of
from ..zk import HidingCommitment, HidingParams, opening_bytes, opening_field_error
from .basefold_channel import BasefoldChannel, StorePlan, commit_hosted
from .common import log2, pad_matrix, padded, prefix_sum_of_eq, require
from .requant import decompose
from . import reusable as reusable_module
from .reusable import Reusable, agreement_shapes, commit_reusable, verify_reusable
from .step_proof import TrainingProof, union_bound_error
from .step_relations import Channel, Protocol, ShapeChannel, factor_key, locate
from .step_stores import balanced_rows, bits_tables, decomposition_keys, params_for, store_params
from .training import MIN_PADDED

TRANSCRIPT_LABEL = "hezk.proofs.network.zk.v1"
PROOF_MAGIC, PROOF_VERSION = b"HZKZPRF1", 1  # inner encoding (the record container alone starts with HEZK)
#: proofs a hiding Network commitment supports by default (each is one more hiding copy at commit time)
DEFAULT_MAX_PROOFS = 16
MIN_BIAS_VARS = 4  #: a masked tensor needs >= 4 element variables (:data:`proofs.relations.MIN_ELEMENT_VARS`)


def default_params() -> HidingParams:
    """The hiding parameters of a zero-knowledge Network (those of the relation proofs; the model's copies get
    log2(copies) more query bits, :func:`proofs.layers.reusable.copy_params`)."""
    return params_for(True)


def width(n: int) -> int:
    return padded(n, MIN_PADDED)


def batch_width(layers, batch: int) -> int:
    """The padded batch axis: the fewest rows (a power of two >= batch) giving every proof-store tensor (A_i,
    i >= 1, and each decomposition's planes) >= MIN_ELEMENT_VARS element variables; the feature axes stay padded
    to >= 8. Sized to what the store holds (batch 1 of a 16-wide layer: 1 row, not 8); the padded rows stay
    constrained by valid_B as before."""
    sizes, stored = _sizes(layers), []
    for i, info in enumerate(layers):
        if i:
            stored.append(width(sizes[i]))
        if info.decomposition is not None:
            stored.append(width(sizes[i + 1]))
    need = max([MIN_ELEMENT_VARS - log2(w) for w in stored], default=0)
    return max(padded(batch, 1), 1 << max(0, need))


def _sizes(layers) -> list:
    return [layers[0].in_features] + [info.out_features for info in layers]


def model_layout(layers) -> StoreLayout:
    """The model store: W_i (width(i+1) x width(i)) and b_i (>= 16 entries) for every layer."""
    sizes, slots = _sizes(layers), []
    for i in range(len(layers)):
        slots.append(Slot(f"W{i}", log2(width(sizes[i + 1]) * width(sizes[i]))))
        slots.append(Slot(f"b{i}", max(MIN_BIAS_VARS, log2(width(sizes[i + 1])))))
    return StoreLayout(tuple(slots), True)


def model_tables(model) -> dict:
    tables = {}
    for i, layer in enumerate(model.layers):
        tables[f"W{i}"] = F.to_field(pad_matrix(layer.weight, width(layer.out_features),
                                                width(layer.in_features)).reshape(-1))
        tables[f"b{i}"] = F.to_field(layer.bias.astype(np.int64))
    return tables


def commit_model(model, layers, params: HidingParams, max_proofs: int = DEFAULT_MAX_PROOFS):
    """(Reusable, ReusableWitness): ``max_proofs`` hiding copies of the model store and their agreement proof
    (:mod:`proofs.layers.reusable`; each proof uses a fresh copy), shaped by :func:`balanced_rows`."""
    layout = model_layout(layers)
    rows = None if scheme_of(params).batched else balanced_rows(layout, params)
    params = fit_basefold_rows(params, layout, max_proofs)  # many copies: shorter rows (its docstring)
    return commit_reusable(layout, model_tables(model), params, max_proofs, rows)


def basefold_params() -> BZ.HidingBasefoldParams:
    """The hiding Basefold parameters of a zero-knowledge Network (``Network(zk=True, params=basefold_params())``):
    rate 1/8, leaves of 2^3 values, folding to 2^10, rows of <= 2^16 symbols (the smallest 16->16->4 proofs
    measured among rates 1/4..1/16, arities 2..5, final sizes 4..11 and rows 2^15..2^22; short rows also keep the
    field terms of 16 copies' agreement small), and 12 grinding bits (:mod:`proofs.grinding`): 111 queries instead
    of 126 for the same 104 query bits per hash. Measured (16->16->4, batch 1, 12 proofs): 93.1 kB mean, 93.9 kB
    max, proved in 56 ms (median; 2^12 BLAKE2b hashes, ~1 ms) against 101.7 / 103.1 kB and 51 ms without
    grinding; 16 bits: 90.6 kB but 66 ms (87 ms worst: 2^16 hashes, geometric); 20 bits: 88.3 kB, 278 ms."""
    return BZ.HidingBasefoldParams(B.BasefoldParams(rate_inv=8, arity=3, final_vars=10, max_log_codeword=16,
                                                    grinding_bits=12))


def is_basefold(params) -> bool:
    """True for hiding Basefold stores (:mod:`proofs.basefold_zk`): one batch opening per proof (the name the
    graph proofs import; the scheme is ``scheme_of(params)``)."""
    return scheme_of(params, error=None) is HIDING_BASEFOLD


def proof_layout(layers, batch: int):
    """The proof store (None when the network has neither hidden layers nor decompositions)."""
    sizes, b_vars = _sizes(layers), log2(batch_width(layers, batch))
    slots = []
    for i, info in enumerate(layers):
        if i:
            slots.append(Slot(f"t0.A{i}", b_vars + log2(width(sizes[i]))))
        spec = info.decomposition
        if spec is not None:
            elem_vars = b_vars + log2(width(sizes[i + 1]))
            slots += [Slot(f"t0.fwd{i}" if g == 0 else f"t0.fwd{i}.g{g}", elem_vars, log2(count))
                      for g, (_, count) in enumerate(spec.groups)]
    return StoreLayout(tuple(slots), True) if slots else None


def _layouts(layers, batch: int) -> dict:
    layouts = {"w": model_layout(layers)}
    proof = proof_layout(layers, batch)
    if proof is not None:
        layouts["p"] = proof
    return layouts


def proof_tables(layers, trace, batch: int) -> dict:
    """The proof store's tables from the integer forward trace (padded, decompositions of every layer)."""
    tables, b_pad = {}, batch_width(layers, batch)
    for i, (info, layer_trace) in enumerate(zip(layers, trace)):
        out_pad = width(info.out_features)
        if i + 1 < len(layers):
            tables[f"t0.A{i + 1}"] = F.to_field(pad_matrix(layer_trace.out, b_pad, out_pad).reshape(-1))
        if info.decomposition is not None:
            acc = pad_matrix(layer_trace.acc, b_pad, out_pad).reshape(-1)
            tables.update(bits_tables(f"t0.fwd{i}", decompose(acc, info.decomposition)))
    return tables


class StatedViews(ShapeChannel):
    """The protocol's structure: each relation's (variables, degree) and the slots of the values it states."""

    def __init__(self, params, layouts):
        super().__init__(params, layouts)
        self.stated = []

    def relation(self, label, terms, claim=None) -> None:
        super().relation(label, terms, claim)
        unique = {factor_key(f): f for term in terms for f in term.stored}
        self.stated += [(f.store, f.name) for f in unique.values()]


def _structure(layers, batch: int):
    layouts = _layouts(layers, batch)
    channel = StatedViews(default_params(), layouts)
    _run(layers, batch, channel, np.zeros(1, dtype=np.uint64), None)
    return layouts, channel


def proof_rows(layers, batch: int, params: HidingParams):
    """log_rows of the proof store minimising its opening's bytes, from the exact pieces of the values the
    protocol states (:func:`proofs.relations.view_pieces`: a value of a tensor narrower than a row is one data
    piece, a wider one one piece per row, plus its mask block's pieces), each sending a row of 2^c + tail F_p4
    entries, against the opened columns (2^(n - c) data and the mask rows per query) and their Merkle paths.
    Shapes whose random tail doubles the code are allowed only below 2^20 entries (where encoding is cheap).
    Prover and verifier compute it from the public shapes alone."""
    layouts, channel = _structure(layers, batch)
    layout = layouts.get("p")
    if layout is None:
        return None
    return best_rows(layout, [name for store, name in channel.stated if store == "p"], params)


def best_rows(layout, names, params: HidingParams) -> int:
    """log_rows of a proof store minimising its opening's bytes (:func:`proofs.zk.opening_bytes`) for the values
    stated on the slots ``names`` (several pieces: one reduced value row); shapes whose random tail doubles the
    code only below 2^20 entries (where encoding is cheap)."""
    n, cost = layout.num_vars, {}
    for c in range(n + 1):
        shape = HidingCommitment(b"", n, n - c, store_params(layout, params, n - c))
        if n >= 20 and c < n and shape.codeword_length > params.rate_inv << c:
            continue
        cost[c] = opening_bytes(shape, len(names) + 1)
    return n - min(cost, key=cost.get)


# ------------------------------------------------------------------------------------------- relations
def _ext_table(values) -> np.ndarray:
    return F.ext_from_base(F.to_field(np.asarray(values, dtype=np.int64)))


def _run(layers, batch: int, channel: Channel, x_table, output_table) -> None:
    """The module's relations, identical for prover, verifier and the shape count."""
    where = locate({}, {k: v for k, v in channel.layouts.items() if k != "w"})
    protocol = Protocol(None, channel, where, x_table)
    sizes, b_vars = _sizes(layers), log2(batch_width(layers, batch))
    one = F.ext_one()
    for i, info in enumerate(layers):
        in_vars, out_vars = log2(width(sizes[i])), log2(width(sizes[i + 1]))
        last = i + 1 == len(layers)
        tau = channel.point(f"network.layer{i}", out_vars + b_vars)
        tau_o, tau_b = tau[:out_vars], tau[out_vars:]
        valid_b = prefix_sum_of_eq(tau_b, batch)
        weight = Stored("w", f"W{i}", high=tau_o)
        if i == 0:
            product = Term(one, (protocol.input_factor(0, tau_b, in_vars),), (weight,), in_vars)
        else:
            publics = ()
            if sizes[i] < width(sizes[i]):
                indicator = np.zeros(width(sizes[i]), dtype=np.int64)
                indicator[:sizes[i]] = 1
                publics = (table_factor(_ext_table(indicator)),)
            product = Term(one, publics, (Stored(where[f"t0.A{i}"], f"t0.A{i}", high=tau_b), weight), in_vars)
        bias_vars = channel.layouts["w"].slot(f"b{i}").elem_vars
        tau_bias = np.concatenate([tau_o, F.ext_zero((bias_vars - out_vars,))])
        bias = Term(valid_b, (eq_factor(tau_bias),), (Stored("w", f"b{i}"),), bias_vars)
        spec = info.decomposition
        eq, n = eq_factor(tau), tau.shape[0]
        if spec is not None:
            rebuilt = protocol.rebuilt(0, f"fwd{i}", spec)
            channel.relation(f"network.layer{i}", [product, bias]
                             + [Term(F.ext_neg(c), (eq,), (part,), n) for c, part in rebuilt]
                             + [Term(_ext_table(spec.offset), (), (), 0)])
            quotient = protocol.quotient(0, f"fwd{i}", spec)
            sign = protocol.sign(0, f"fwd{i}", spec) if spec.relu else None
            tau = channel.point(f"network.select{i}", out_vars + b_vars)
            if not last:
                protocol.select(f"network.select{i}", Stored(where[f"t0.A{i + 1}"], f"t0.A{i + 1}"), quotient,
                                sign, tau)
                continue
            eq = eq_factor(tau)
            terms = [Term(c, (eq,), (q,), n) for c, q in quotient]
            if sign is not None:
                scale, factor = sign
                terms += [Term(F.ext_neg(F.ext_mul(scale, c)), (eq,), (factor, q), n) for c, q in quotient]
            channel.relation("network.output", terms, _output_value(output_table, tau))
        elif not last:
            channel.relation(f"network.layer{i}", [product, bias, Term(F.ext_neg(one), (eq,),
                                                                       (Stored(where[f"t0.A{i + 1}"],
                                                                               f"t0.A{i + 1}"),), n)])
        else:
            channel.relation("network.output", [product, bias], _output_value(output_table, tau))
    keys = decomposition_keys({k: v for k, v in channel.layouts.items() if k != "w"})
    if keys:
        protocol.bits(keys)


def _output_value(output_table, tau) -> np.ndarray:
    return F.ext_zero() if output_table is None else mle_evaluate(output_table, tau)


def _field_matrix(values, rows: int, cols: int) -> np.ndarray:
    return F.to_field(pad_matrix(values, rows, cols).reshape(-1))


def _transcript(commitment, x, output, proof_commitments, copy: int) -> Transcript:
    transcript = Transcript(TRANSCRIPT_LABEL)
    transcript.absorb("model", commitment.statement_bytes())
    transcript.absorb("copy", int(copy))
    transcript.absorb("input", np.asarray(x, dtype=np.int64))
    transcript.absorb("output", np.asarray(output, dtype=np.int64))
    transcript.absorb("proof commitments", [c.to_bytes() for c in proof_commitments])
    return transcript


# ------------------------------------------------------------------------------------------- the proof
@dataclass(frozen=True, eq=False)
class HidingNetworkProof:
    """A zero-knowledge Network proof: the claimed output and the relation proof (its store commitments and
    items in protocol order, serialized as :class:`~proofs.layers.step_proof.TrainingProof`)."""

    output: np.ndarray
    relations: TrainingProof

    def __eq__(self, other) -> bool:
        return isinstance(other, HidingNetworkProof) and self.to_bytes() == other.to_bytes()

    __hash__ = None

    def __bytes__(self) -> bytes:
        return self.to_bytes()

    KIND = "proofs.HidingNetworkProof"

    def to_bytes(self) -> bytes:
        """A ``proofs.HidingNetworkProof`` record (:func:`proofs.proof_format.to_record`) of :meth:`inner_bytes`."""
        return to_record(self.KIND, self.inner_bytes())

    def inner_bytes(self) -> bytes:
        """Magic ``HZKZPRF1``, u16 version, the output (i64 array), the relation proof's record (blob)."""
        writer = ByteWriter(PROOF_MAGIC, PROOF_VERSION)
        writer.i64_array(self.output)
        writer.blob(self.relations.to_bytes())
        return writer.getvalue()

    def __reduce__(self):
        """Pickle (Dask, multiprocessing, concurrent.futures) through the versioned bytes of ``to_bytes``."""
        return type(self).from_bytes, (self.to_bytes(),)

    @classmethod
    def from_bytes(cls, data) -> "HidingNetworkProof":
        """Parse; anything malformed, truncated or of another kind raises ProofRejected."""
        return cls.from_inner_bytes(from_record(data, cls.KIND, "hiding network proof"))

    @classmethod
    def from_inner_bytes(cls, data) -> "HidingNetworkProof":
        return parse_nested(cls._parse, data, "hiding network proof")

    @classmethod
    def _parse(cls, data) -> "HidingNetworkProof":
        reader = ByteReader(data, PROOF_MAGIC, PROOF_VERSION, "hiding network proof")
        output = reader.i64_array()
        relations = parse_nested(TrainingProof.from_bytes, reader.blob(), "relation proof")
        reader.finish()
        return cls(output, relations)


def base_params(commitment) -> HidingParams:
    """The statement's parameters: those the model's copies were made for (:func:`reusable.base_params`)."""
    params = reusable_module.base_params(commitment.weights)
    if scheme_of(params).batched:
        return params
    return dataclasses.replace(params, mask_rows=params_for(True).mask_rows)


PROVE_STEPS = 3


def prove(network, x, trace, report=None, copy: int | None = None) -> HidingNetworkProof:
    """Prove y = model(x) for ``network`` (committed with zk=True) on a fresh copy of its model store (copy
    ``copy`` when given); ``trace`` is the integer forward trace of x (int64, checked); ``report(label)`` after
    each of the PROVE_STEPS steps."""
    report = report or (lambda label: None)
    commitment, statement = network.commitment, network._weights_witness
    layers, batch = commitment.layers, x.shape[0]
    layouts = _layouts(layers, batch)
    params = base_params(commitment)
    if scheme_of(params).batched:
        return _prove_basefold(network, x, trace, report, copy)
    proof_layouts = {k: v for k, v in layouts.items() if k != "w"}
    copy = statement.take("Network.prove", copy)
    made = {}
    if "p" in layouts:
        log_rows = proof_rows(layers, batch, params)
        tables = proof_tables(layers, trace, batch)
        made["p"] = commit_store(layouts["p"], {s.name: tables[s.name] for s in layouts["p"].slots},
                                 store_params(layouts["p"], params, log_rows), log_rows=log_rows)
    proof_commitments = tuple(made[key][0] for key in proof_layouts)
    report("committed the proof's tensors")
    output = trace[-1].out
    witnesses = {"w": statement.witnesses[copy], **{key: pair[1] for key, pair in made.items()}}
    transcript = _transcript(commitment, x, output, proof_commitments, copy)
    channel = Channel(transcript, params, layouts, {k: w.commitment for k, w in witnesses.items()}, witnesses,
                      mask_shapes=_structure(layers, batch)[1].shapes)
    channel.prior_views = {"w": statement.agreement_views[copy]}
    b_pad = batch_width(layers, batch)
    _run(layers, batch, channel, _field_matrix(x, b_pad, width(layers[0].in_features)),
         _field_matrix(output, b_pad, width(layers[-1].out_features)))
    report("proved the relations")
    channel.open_all()
    report("opened the stores")
    return HidingNetworkProof(np.array(output, dtype=np.int64),
                              TrainingProof("aggregate", proof_commitments, tuple(channel.items), copy))


@functools.lru_cache(maxsize=32)
def _basefold_structure(layers, batch: int):
    """(layouts, plans, relation shapes, decomposition keys) of a Basefold proof, from the public shapes alone
    (memoised: prover and verifier rebuild it for every proof). Plans: the model copy "w" and the proof store
    "p" (its tensors, if any, and every relation's zero-knowledge mask)."""
    layouts, channel = _structure(layers, batch)
    plans = {"w": StorePlan(layouts["w"]), "p": StorePlan(layouts.get("p"), tuple(channel.shapes))}
    keys = decomposition_keys({k: v for k, v in layouts.items() if k != "w"})
    return layouts, plans, tuple(channel.shapes), len(keys)


def _plans(layers, batch: int) -> dict:
    return _basefold_structure(layers, batch)[1]


def _prove_basefold(network, x, trace, report, copy) -> HidingNetworkProof:
    commitment, statement = network.commitment, network._weights_witness
    layers, batch = commitment.layers, x.shape[0]
    layouts, plans, params = _layouts(layers, batch), _plans(layers, batch), base_params(commitment)
    copy = statement.take("Network.prove", copy)
    tables = proof_tables(layers, trace, batch) if "p" in layouts else {}
    tables = {s.name: tables[s.name] for s in layouts["p"].slots} if "p" in layouts else {}
    p_commitment, p_store, coefficients, p_opener = commit_hosted(plans["p"], tables, params)
    report("committed the proof's tensors")
    output = trace[-1].out
    w_store = statement.witnesses[copy]
    witnesses = {"w": w_store, **({"p": p_store} if p_store is not None else {})}
    transcript = _transcript(commitment, x, output, (p_commitment,), copy)
    channel = BasefoldChannel(transcript, params, layouts, plans, {"w": w_store.commitment, "p": p_commitment}, "p",
                              witnesses=witnesses, openers={"w": w_store.commitment_witness, "p": p_opener},
                              mask_coefficients=coefficients)
    channel.prior_views = {"w": statement.agreement_views[copy]}
    b_pad = batch_width(layers, batch)
    _run(layers, batch, channel, _field_matrix(x, b_pad, width(layers[0].in_features)),
         _field_matrix(output, b_pad, width(layers[-1].out_features)))
    report("proved the relations")
    channel.open_all()
    report("opened the stores")
    return HidingNetworkProof(np.array(output, dtype=np.int64),
                              TrainingProof("aggregate", (p_commitment,), tuple(channel.items), copy))


def _verify_basefold(commitment, x, proof, params, where: str) -> np.ndarray:
    layers, batch, relations = commitment.layers, x.shape[0], proof.relations
    layouts, plans = _layouts(layers, batch), _plans(layers, batch)
    require(len(relations.commitments) == 1, f"{len(relations.commitments)} proof commitments, expected 1", where)
    p_commitment = relations.commitments[0]
    require_basefold_store(p_commitment, params, plans["p"], where)
    commitments = {"w": commitment.weights.copies[relations.copy], "p": p_commitment}
    transcript = _transcript(commitment, x, proof.output, relations.commitments, relations.copy)
    channel = BasefoldChannel(transcript, params, layouts, plans, commitments, "p", items=relations.items)
    b_pad = batch_width(layers, batch)
    _run(layers, batch, channel, _field_matrix(x, b_pad, width(layers[0].in_features)),
         _field_matrix(proof.output, b_pad, width(layers[-1].out_features)))
    channel.open_all()
    channel.finish()
    return proof.output.copy()


def require_basefold_store(commitment, params, plan: StorePlan, where: str) -> None:
    """ProofRejected unless a proof store's commitment is hiding Basefold at the statement's parameters and of
    its plan's size."""
    require(scheme_of(commitment, error=None) is HIDING_BASEFOLD and commitment.params == params
            and commitment.num_vars == plan.num_vars,
            "the proof store's commitment does not have the statement's shape and parameters", where)


def check_store_commitments(layouts, commitments, rows, params, model_params, where: str) -> None:
    """Raise ProofRejected unless every store commitment has its layout's variables, the statement's rows and
    parameters (``model_params`` for the model's copy "w", masks aside). The relations' mask commitment is
    checked by the channel (:class:`proofs.layers.step_relations.Channel`)."""
    for key, layout in layouts.items():
        c, expected = commitments[key], params if key != "w" else model_params
        require(HIDING_LIGERO.is_commitment(c) and c.num_vars == layout.num_vars
                and c.log_rows == rows[key]
                and dataclasses.replace(c.params, mask_rows=0) == dataclasses.replace(expected, mask_rows=0),
                f"commitment {key} does not have the statement's shape and parameters", where)


def verify(commitment, x, proof: HidingNetworkProof) -> np.ndarray:
    """Raise ProofRejected unless ``proof`` shows proof.output = model(x) (x already checked, int64)."""
    where = "hiding network proof"
    require(isinstance(proof, HidingNetworkProof) and isinstance(proof.relations, TrainingProof),
            "a model committed with zk=True needs a HidingNetworkProof", where)
    layers, batch, relations = commitment.layers, x.shape[0], proof.relations
    params = base_params(commitment)
    bits = soundness_bits(commitment, batch)
    require(bits >= MIN_SOUNDNESS_BITS, f"the statement's soundness is {bits:.1f} bits < {MIN_SOUNDNESS_BITS}", where)
    layouts = _layouts(layers, batch)
    verify_reusable(layouts["w"], commitment.weights, dataclasses.replace(params, openings=1), f"{where}: model")
    require(0 <= relations.copy < len(commitment.weights), f"copy {relations.copy} of a model committed "
            f"{len(commitment.weights)} times", where)
    if scheme_of(params).batched:
        return _verify_basefold(commitment, x, proof, params, where)
    proof_layouts = [k for k in layouts if k != "w"]
    require(len(relations.commitments) == len(proof_layouts),
            f"{len(relations.commitments)} proof commitments, expected {len(proof_layouts)}", where)
    commitments = {"w": commitment.weights.copies[relations.copy], **dict(zip(proof_layouts, relations.commitments))}
    rows = {"w": balanced_rows(layouts["w"], params), "p": proof_rows(layers, batch, params)}
    check_store_commitments(layouts, commitments, rows, params, commitment.weights.params, where)
    transcript = _transcript(commitment, x, proof.output, relations.commitments, relations.copy)
    channel = Channel(transcript, params, layouts, commitments, items=relations.items,
                      mask_shapes=_structure(layers, batch)[1].shapes)
    b_pad = batch_width(layers, batch)
    _run(layers, batch, channel, _field_matrix(x, b_pad, width(layers[0].in_features)),
         _field_matrix(proof.output, b_pad, width(layers[-1].out_features)))
    channel.open_all()
    channel.finish()
    return proof.output.copy()


MIN_SOUNDNESS_BITS = 100


def soundness_bits(commitment, batch: int) -> float:
    """-log2 of a proof's soundness error per attempt: :func:`proofs.layers.step_proof.union_bound_error`
    over the relations (each sumcheck, its random point, its mask's batching and opening; the bit-check
    weights) and the openings of the proof store and of the model copy, plus the agreement proof of the
    model's copies that the verifier relies on (:func:`agreement_error`). A prover who grinds 2^k
    Fiat-Shamir transcripts succeeds w.p. about 2^(k - bits)."""
    params = base_params(commitment)
    if scheme_of(params).batched:
        return -math.log2(_basefold_error(commitment, batch) + agreement_error(commitment))
    layouts, channel = _structure(commitment.layers, batch)
    keys = decomposition_keys({k: v for k, v in layouts.items() if k != "w"})
    error = union_bound_error(channel.shapes, len(keys), {"w": layouts["w"]}, params, {"w": commitment.weights.params},
                              hosted_masks=True)
    if "p" in layouts:  # the proof store's opening, at its own shape (:func:`proof_rows`)
        shape = HidingCommitment(b"", layouts["p"].num_vars, proof_rows(commitment.layers, batch, params), params)
        error += 2.0 ** -shape.security_bits + opening_field_error(shape)
    return -math.log2(error + agreement_error(commitment))


def _basefold_error(commitment, batch: int) -> float:
    """A Basefold proof's error (:func:`basefold_proof_error` of the network's structure)."""
    _, plans, shapes, keys = _basefold_structure(commitment.layers, batch)
    return basefold_proof_error(commitment.weights, plans["p"], shapes, keys, base_params(commitment))


def basefold_proof_error(weights, proof_plan: StorePlan, shapes, keys: int, params) -> float:
    """A hiding Basefold proof's error: per relation its point, rounds and rho ((n + n d + 1) / |F|; ``shapes``
    their (n, d)), the ``keys`` bit-check weights, and ONE batch opening of a model copy (of ``weights``) and the
    proof store (:func:`proofs.basefold_zk.batch_error`: in the "tail" layout with the mask table's own batch and
    the masked reduction)."""
    field = float(F.P) ** F.EXT_DEGREE
    error = (keys + sum(n + n * d + 1 for n, d in shapes)) / field
    p_vars = BZ.inner_vars(proof_plan.num_vars, params)
    store = BZ.HidingBasefoldCommitment(B.BasefoldCommitment(bytes(32), p_vars, params.base), proof_plan.num_vars, 1,
                                        params.layout)
    return error + BZ.batch_error([weights.copies[0], store])


def basefold_agreement_error(weights, layout: StoreLayout, params) -> float:
    """The agreement proof's error for hiding Basefold copies of ``layout`` (:mod:`proofs.layers.reusable`): its
    relations (point, rounds, rho), alpha and beta (2 / |F|), and the batch opening of every copy and the masks;
    0 for a single copy."""
    return _basefold_agreement_error(weights.copies, layout, params)


def _basefold_agreement_error(copies, layout: StoreLayout, params) -> float:
    if len(copies) < 2:
        return 0.0
    field = float(F.P) ** F.EXT_DEGREE
    plan = reusable_module.mask_plan(layout, len(copies))
    masks = BZ.HidingBasefoldCommitment(B.BasefoldCommitment(bytes(32), BZ.inner_vars(plan.num_vars, params),
                                                             params.base), plan.num_vars, 1, params.layout)
    return (2 + sum(n + n * d + 1 for n, d in plan.mask_shapes)) / field + BZ.batch_error(list(copies) + [masks])


#: the bits the copies' agreement proof keeps beyond MIN_SOUNDNESS_BITS (:func:`fit_basefold_rows`): its error
#: <= 2^-100.5 leaves 2^-101.8 to a proof's own relations and opening (2^-103 for a 64-64-10 graph at batch 1)
AGREEMENT_MARGIN_BITS = 0.5


def fit_basefold_rows(params, layout: StoreLayout, copies: int):
    """The hiding Basefold ``params`` with the longest interleaved rows (``max_log_codeword``, at most the
    given one) whose ``copies`` copies of ``layout`` have an agreement proof of at least MIN_SOUNDNESS_BITS +
    AGREEMENT_MARGIN_BITS: the agreement opens every copy in one batch, whose field error sums (s + 1) N' over
    the copies (N' = 2^max_log_codeword, s = the rows' count, log2), so many copies of a large table need shorter
    rows (64 copies of a 2^13-entry model: 98.8 bits with rows of 2^16, 101.1 with 2^13). The commitment's bytes
    record the rows used; ``params`` unchanged when they already suffice (or are not Basefold). ModelError when
    no row length reaches the floor: commit with fewer max_proofs."""
    if scheme_of(params, error=None) is not HIDING_BASEFOLD or isinstance(copies, bool) \
            or not isinstance(copies, (int, np.integer)) \
            or not 2 <= copies <= reusable_module.MAX_COPIES:  # (commit_reusable refuses a bad max_proofs)
        return params
    plan = StorePlan(layout)
    target = MIN_SOUNDNESS_BITS + AGREEMENT_MARGIN_BITS
    bits = None
    for log_codeword in range(params.base.max_log_codeword, params.base.final_vars - 1, -1):
        fitted = dataclasses.replace(params, base=dataclasses.replace(params.base, max_log_codeword=log_codeword))
        made = reusable_module.copy_params(fitted, copies)
        copy = BZ.HidingBasefoldCommitment(B.BasefoldCommitment(bytes(32), BZ.inner_vars(plan.num_vars, made),
                                                                made.base), plan.num_vars, made.openings, made.layout)
        error = _basefold_agreement_error([copy] * copies, layout, fitted)
        bits = -math.log2(error)
        if bits >= target:
            return fitted
    raise ModelError(f"max_proofs={copies} hiding Basefold copies of a model of {plan.num_vars} variables give an "
                     f"agreement proof of at most {bits:.1f} bits < {target} (its field error grows with the "
                     "copies): commit with fewer max_proofs")


def agreement_error(commitment) -> float:
    """The soundness error of the copies' agreement proof (:mod:`proofs.layers.reusable`): its sumcheck (random
    point, rounds, mask batching and opening), the bilinear batching by alpha and beta 2 / |F|, and the opening
    of every copy; 0 for a single copy (nothing to agree)."""
    return copies_agreement_error(commitment.weights, model_layout(commitment.layers), base_params(commitment))


def copies_agreement_error(weights, layout: StoreLayout, params) -> float:
    """:func:`agreement_error` of the Reusable ``weights`` (copies of ``layout``, proof parameters ``params``):
    shared by the MLP and graph figures."""
    if len(weights.copies) < 2:
        return 0.0
    if scheme_of(params).batched:
        return basefold_agreement_error(weights, layout, params)
    shapes, layouts, batching = agreement_shapes(layout, len(weights.copies), params)
    return union_bound_error(shapes, batching, layouts, params, {key: weights.params for key in layouts})


def check_commitment(commitment, where: str) -> None:
    """The model copies have the model store's size and hiding parameters (ProofRejected otherwise)."""
    layout = model_layout(commitment.layers)
    weights = commitment.weights
    require(isinstance(weights, Reusable) and len(weights) >= 1, "the weights are not a Reusable commitment", where)
    for k, c in enumerate(weights.copies):
        if scheme_of(c, error=None) is HIDING_BASEFOLD:
            require(c.num_vars == StorePlan(layout).num_vars,
                    f"model copy {k} is not a hiding commitment with num_vars={layout.num_vars}", where)
            continue
        require(HIDING_LIGERO.is_commitment(c) and c.params.hiding and c.num_vars == layout.num_vars,
                f"model copy {k} is not a hiding commitment with num_vars={layout.num_vars}", where)


def check_params(params) -> HidingParams:
    """The statement's proof parameters, one opening per store (:func:`reusable.copy_params` gives each model copy
    its openings; a caller's ``openings`` would otherwise reach a single copy and the verifier, which expects one,
    would refuse the network's own proofs)."""
    if params is None:
        return default_params()
    scheme = scheme_of(params, error=None)
    if scheme is not HIDING_BASEFOLD and (scheme is not HIDING_LIGERO or not params.hiding):
        raise ModelError(f"params must be HidingParams with hiding=True for zk=True, got {params!r}")
    return dataclasses.replace(params, openings=1)
