"""Where a training or inference proof's tensors live: masked stores, their shapes and contents.

The statement's stores hold W (one slot per layer) and each batch (X, Y); the proof's own stores hold every
intermediate tensor (activations A_i, gradients G_i), every bit decomposition (one slot per plane group)
and the range bits of each step's inputs. ``mode="aggregate"`` (FAC4DNN) stacks the tensors of every layer
and step into power-of-two stores; ``mode="layer"`` gives each (step, layer) its own. Store shapes (rows x
columns) are chosen to keep openings small (:func:`balanced_rows`). The relations over them are
:mod:`proofs.layers.step_relations`; the public API is :mod:`proofs.layers.step_proof`.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ..errors import ModelError, ProofError
from ..relations import Slot, StoreLayout, commit_store
from ..zk import HidingCommitment, HidingParams, mask_rows_needed, opening_bytes
from .common import log2
from .proof_items import MODES
from .requant import Decomposition, decompose
from .training import TrainingSpec, TrainingTrace, flat_field

#: Reed-Solomon rate 1/2: half the encoding and hashing of rate 1/4 for 1.6x the column queries
DEFAULT_RATE_INV = 2
#: random rows committed with each store, so one opening of up to 39 pieces needs no second Merkle tree
DEFAULT_MASK_ROWS = mask_rows_needed(2)  #: the most one opening uses
#: a store holds at most 2^23 entries: larger matrices cost more in memory traffic than the commitments they save
MAX_STORE_VARS = 23
SMALL_STORE_VARS = 21  #: the tensors left over once the large stores are full share one store up to 2^21


def params_for(zk: bool, params=None) -> HidingParams:
    """The commitment parameters of a proof: ``params`` checked, or the defaults for ``zk``."""
    if params is None:
        return HidingParams(rate_inv=DEFAULT_RATE_INV, hiding=bool(zk), mask_rows=DEFAULT_MASK_ROWS if zk else 0)
    if not isinstance(params, HidingParams) or params.hiding != bool(zk):
        raise ProofError(f"params must be HidingParams with hiding={bool(zk)}, got {params!r}")
    return params


# ------------------------------------------------------------------------------------------- layouts
def _group_slots(name: str, elem_vars: int, decomposition: Decomposition) -> list:
    """One slot per committed group of bit planes (:attr:`Decomposition.groups`: 18 bits are 16 + 2 planes,
    not 32): ``name`` for the first group, ``name.g1`` for the second."""
    return [Slot(name if g == 0 else f"{name}.g{g}", elem_vars, log2(count))
            for g, (_, count) in enumerate(decomposition.groups)]


def weight_layout(spec: TrainingSpec, hiding: bool) -> StoreLayout:
    return StoreLayout(tuple(Slot(f"W{i}", log2(spec.width(i + 1) * spec.width(i))) for i in range(spec.num_layers)),
                       hiding)


def batch_layout(spec: TrainingSpec, hiding: bool, targets: bool = True) -> StoreLayout:
    B = spec.batch_padded
    slots = [Slot("X", log2(B * spec.width(0)))]
    if targets:
        slots.append(Slot("Y", log2(B * spec.width(spec.num_layers))))
    return StoreLayout(tuple(slots), hiding)


def weight_box(spec: TrainingSpec, i: int) -> tuple:
    """(extents, log sizes) of W_i's declared region, columns (low variables) first: d_i x d_(i+1) in the padded
    width(i) x width(i + 1). Every entry outside it must be zero (:func:`proofs.relations.padding_factor`)."""
    return (spec.sizes[i], spec.sizes[i + 1]), (log2(spec.width(i)), log2(spec.width(i + 1)))


def batch_box(spec: TrainingSpec, j: int) -> tuple:
    """(extents, log sizes) of the declared region of a batch tensor of width d_j (X: j = 0, Y: j = L, A_i: i,
    G_i: i + 1): d_j columns (low variables) of ``batch`` rows, in width(j) x batch_padded."""
    return (spec.sizes[j], spec.batch), (log2(spec.width(j)), log2(spec.batch_padded))


def weight_range(spec: TrainingSpec) -> Decomposition:
    """W's two's-complement bits (range [-2^(b-1), 2^(b-1)) for b = weight_bits)."""
    return Decomposition(0, spec.weight_bits, False)


def data_range(spec: TrainingSpec) -> Decomposition:
    """X's and Y's two's-complement bits (act_bits)."""
    return Decomposition(0, spec.act_bits, False)


def _layer_slots(spec: TrainingSpec, t: int, i: int, forward_only: bool, private_input: bool = True) -> list:
    """The proof's tensors of step t, layer i: activation A_i (i >= 1), gradient G_i, the decompositions, and
    the range bits of the step's inputs (W_i; X and Y with layer 0)."""
    B, L = spec.batch_padded, spec.num_layers
    slots = _group_slots(f"t{t}.rngw{i}", log2(spec.width(i + 1) * spec.width(i)), weight_range(spec))
    if i == 0 and private_input:
        slots += _group_slots(f"t{t}.rngx", log2(B * spec.width(0)), data_range(spec))
    if i == 0 and not forward_only:
        slots += _group_slots(f"t{t}.rngy", log2(B * spec.width(L)), data_range(spec))
    if i:
        slots.append(Slot(f"t{t}.A{i}", log2(B * spec.width(i))))
    slots += _group_slots(f"t{t}.fwd{i}", log2(B * spec.width(i + 1)), spec.forward_spec(i))
    if not forward_only:
        slots.append(Slot(f"t{t}.G{i}", log2(B * spec.width(i + 1))))
        if i < L - 1:
            slots += _group_slots(f"t{t}.bwd{i}", log2(B * spec.width(i + 1)), spec.backward_spec())
        slots += _group_slots(f"t{t}.upd{i}", log2(spec.width(i + 1) * spec.width(i)), spec.update_spec())
    return slots


def proof_layouts(spec: TrainingSpec, steps: int, mode: str, hiding: bool, forward_only: bool = False,
                  private_input: bool = True, reserve=None) -> dict:
    """Store key -> layout of the tensors the proof commits (one store, or one per step and layer).
    ``reserve``: (store variables -> entries) left free at the end of each aggregated store (a hiding Basefold
    store's tail, :func:`proofs.basefold_zk.tail_reserve`), or None."""
    if mode not in MODES:
        raise ProofError(f"mode={mode!r} not in {MODES}")
    per_layer = {(t, i): _layer_slots(spec, t, i, forward_only, private_input)
                 for t in range(steps) for i in range(spec.num_layers)}
    if mode == "aggregate":
        bins = _power_of_two_bins([s for slots in per_layer.values() for s in slots], hiding, reserve)
        return {("p" if k == 0 else f"p{k}"): StoreLayout(tuple(b), hiding) for k, b in enumerate(bins)}
    return {f"p{t}.{i}": StoreLayout(tuple(slots), hiding) for (t, i), slots in per_layer.items()}


def _power_of_two_bins(slots, hiding: bool, reserve=None) -> list:
    """Tensors of every layer and step stacked into as few stores as keep the padding small (FAC4DNN).

    A store is padded to a power of two, so stacking 27.6M entries in one would commit 33.5M. While padding all
    the rest would waste more than 1/8 of it, the largest tensors fill the largest power of two not above the
    remaining total (sizes, with each tensor's mask block, are powers of two: largest first fills it exactly).
    """
    def footprint(slot):  # the tensor and its mask block
        return slot.size + (1 << (slot.mask_count - 1).bit_length() if hiding else 0)

    remaining = sorted(slots, key=lambda s: -footprint(s))
    bins = []
    while remaining:
        total = sum(footprint(s) for s in remaining)
        capacity = max(min(1 << (total.bit_length() - 1), 1 << MAX_STORE_VARS), footprint(remaining[0]))
        if reserve is not None and total > capacity:  # a full store keeps its reserve free (the fill below)
            capacity = max(capacity - reserve(capacity.bit_length() - 1), footprint(remaining[0]))
        padded_total = capacity if capacity == total else 2 * capacity
        small = padded_total <= 1 << SMALL_STORE_VARS  # padding a small remainder costs little
        if total <= capacity or len(remaining) == 1 or \
                ((small or padded_total - total <= total // 8) and padded_total <= 1 << MAX_STORE_VARS):
            bins.append(remaining)
            break
        chosen, filled = [], 0
        for slot in remaining:
            if filled + footprint(slot) <= capacity:
                chosen.append(slot)
                filled += footprint(slot)
        bins.append(chosen)
        remaining = [s for s in remaining if all(s is not c for c in chosen)]
    return bins


def bits_tables(name: str, witness) -> dict:
    """The slot tables of a decomposition's planes, one per plane group (planes past the width are zero)."""
    tables = {}
    for g, (start, count) in enumerate(witness.spec.groups):
        table = np.zeros((count, witness.bits.shape[1]), dtype=np.uint64)
        stop = min(start + count, witness.spec.width)
        table[:stop - start] = witness.bits[start:stop]
        tables[name if g == 0 else f"{name}.g{g}"] = table.reshape(-1)
    return tables


def _range_tables(name: str, values, decomposition: Decomposition) -> dict:
    try:
        witness = decompose(np.asarray(values).reshape(-1), decomposition)
    except ModelError as error:
        raise ModelError(f"{name}: {error}") from None
    return bits_tables(name, witness)


def proof_tables(trace: TrainingTrace, t: int, forward_only: bool, private_input: bool = True) -> dict:
    spec = trace.spec
    tables = {}
    for i, w in enumerate(trace.weights):
        tables.update(_range_tables(f"t{t}.rngw{i}", w, weight_range(spec)))
    if private_input:
        tables.update(_range_tables(f"t{t}.rngx", trace.x, data_range(spec)))
    if not forward_only:
        tables.update(_range_tables(f"t{t}.rngy", trace.y, data_range(spec)))
    for i in range(spec.num_layers):
        if i:
            tables[f"t{t}.A{i}"] = flat_field(trace.acts[i])
        tables.update(bits_tables(f"t{t}.fwd{i}", trace.fwd[i]))
        if not forward_only:
            tables[f"t{t}.G{i}"] = flat_field(trace.grads[i])
            if i < spec.num_layers - 1:
                tables.update(bits_tables(f"t{t}.bwd{i}", trace.bwd[i]))
            tables.update(bits_tables(f"t{t}.upd{i}", trace.upd[i]))
    return tables


def balanced_rows(layout: StoreLayout, params: HidingParams) -> int:
    """log_rows minimising the opening's bytes (:func:`proofs.zk.opening_bytes`: a constant number of sent rows of
    2^c + tail F_p4 entries against the queries' opened columns of 2^(n - c) base entries). Shapes whose random
    tail would push the code to twice the length (:meth:`HidingParams.code_shape`) are skipped: they double the
    encoding."""
    n, cost = layout.num_vars, {}
    for c in range(n + 1):
        shape = HidingCommitment(b"", n, n - c, store_params(layout, params, n - c))
        if c < n and shape.codeword_length > params.rate_inv << c:
            continue
        cost[c] = opening_bytes(shape)
    return n - min(cost, key=cost.get)


def store_params(layout: StoreLayout, params: HidingParams, log_rows: int) -> HidingParams:
    """With hiding, the mask rows of the store's one opening committed with it (:func:`proofs.zk.mask_rows_needed`:
    a constant), so the opening needs no second Merkle tree of fresh masks."""
    if not params.hiding:
        return params
    return dataclasses.replace(params, mask_rows=max(params.mask_rows, mask_rows_needed(2)))


def commit_stores(layouts: dict, tables: dict, params: HidingParams, seed=None) -> dict:
    """Commit each proof store (shape by :func:`balanced_rows`, mask rows by :func:`store_params`)."""
    made = {}
    for k, (key, layout) in enumerate(layouts.items()):
        log_rows = balanced_rows(layout, params)
        made[key] = commit_store(layout, {s.name: tables[s.name] for s in layout.slots},
                                 store_params(layout, params, log_rows), log_rows=log_rows,
                                 seed=None if seed is None else seed + k)
    return made


def weight_tables(spec, weights) -> dict:
    return {f"W{i}": flat_field(w) for i, w in enumerate(weights)}


def statement_layouts(spec: TrainingSpec, steps: int, hiding: bool) -> dict:
    layouts = {f"w{t}": weight_layout(spec, hiding) for t in range(steps + 1)}
    layouts.update({f"b{t}": batch_layout(spec, hiding) for t in range(steps)})
    return layouts


def decomposition_keys(layouts: dict) -> list:
    """The slots holding bit planes (a plane group may be a single plane)."""
    return [s.name for layout in layouts.values() for s in layout.slots
            if s.name.split(".")[1][:3] in ("fwd", "bwd", "upd", "rng")]
