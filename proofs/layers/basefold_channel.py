"""Relation proofs over hiding Basefold stores: every store and every sumcheck mask in ONE batched opening.

:class:`~proofs.layers.step_relations.Channel` opens each store with its own hiding Ligero opening and each
zero-knowledge sumcheck commits and opens its own mask. :class:`BasefoldChannel` runs the same relations with

- stores committed by :func:`proofs.basefold_zk.commit` (:func:`commit_hosted`), a stated value being a
  :class:`~proofs.basefold.Functional` of the packed store (:func:`view_functional`: the tensor's MLE at the
  element point with the plane weights as a dense block, plus its Libra mask coefficients as a dense block);
- the zero-knowledge sumchecks' masks (Libra's g(x) = sum_i g_i(x_i), section 4.1) committed BEFORE the
  protocol, all in one store (a :class:`StorePlan` hosts them after its tensors): prover and verifier know
  every relation's (variables, degree) from the public shapes, so the masks are fixed before any challenge,
  which is all Libra's argument needs (g is bound before rho is drawn); g(sigma) is stated and becomes one more
  functional claim of the host store (:func:`mask_functional`);
- one :func:`proofs.basefold_zk.open_batch` of every claim of every store at the end (:meth:`open_all`).

Soundness per relation as the Ligero channel (rounds n d / |F|, its point n / |F|, rho 1 / |F|), plus one
batch opening (:func:`proofs.basefold.batch_security_bits` of the stores' slot tables); zero knowledge: the
batch reveals the stated values only (:mod:`proofs.basefold_zk`), each store is opened once per proof (a model
copy twice: its agreement and its proof).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from .. import basefold as B
from .. import basefold_zk as BZ
from .. import field as F
from ..errors import ProofError, ProofRejected
from ..relations import Relation, RelationProver, StoreLayout, StoreWitness, View, expected_summand, mask_rank, \
    pack_store, piece_point, store_tables
from ..basefold_zk import MaskedSumcheckProof, prove_masked, verify_masked
from ..zk import powers_table, mask_entries, mask_table, random_mask
from .common import boolean_point
from .packing import Packing
from .step_relations import Channel, factor_key


def mask_length(num_vars: int, degree: int) -> int:
    """Entries of a mask's coefficient table (:func:`proofs.zk.mask_table`: F_p4 coefficients), padded to a power of two."""
    return 1 << (mask_entries(num_vars, degree) - 1).bit_length()


@dataclass(frozen=True)
class StorePlan:
    """A committed table: the packed tensors of ``layout`` (or None; its own packing, slots cut into their boxes'
    pieces, :class:`~proofs.relations.StoreLayout`) then the coefficient tables of the masks of the relations
    with ``mask_shapes`` ((variables, degree) each). The layout's table sits at 0 and the masks' blocks follow,
    largest first, each at a multiple of its own power-of-two length (selected by Boolean high coordinates, as
    in :class:`Packing`): inside the layout's power-of-two padding when they fit after its used entries (the
    table stays the layout's size instead of doubling for a few masks), else placed by one :class:`Packing`
    with the layout's whole table."""

    layout: StoreLayout | None
    mask_shapes: tuple = ()

    def pieces(self, name: str) -> tuple:
        return self.layout.pieces(name)

    @functools.cached_property
    def _placement(self) -> tuple:
        """(num_vars, the layout's start, {block key: (offset, length)}): keys the layout's ("slot", name, i)
        and ("mask", name), and ("relation", j)."""
        masks = [mask_length(n, d) for n, d in self.mask_shapes]
        relation_keys = [("relation", j) for j in range(len(masks))]
        layout = self.layout
        inner = {} if layout is None else {key: (layout.block_offset(key), length) for key, length in layout.blocks}
        if layout is not None and masks:
            used, biggest = sum(layout.packing.lengths), max(masks)
            position = -(-used // biggest) * biggest
            if position + sum(masks) <= 1 << layout.num_vars:
                blocks = dict(inner)
                for j in sorted(range(len(masks)), key=lambda j: (-masks[j], j)):
                    blocks[relation_keys[j]], position = (position, masks[j]), position + masks[j]
                return layout.num_vars, 0, blocks
        packing = Packing(tuple(([1 << layout.num_vars] if layout is not None else []) + masks))
        start = packing.offsets[0] if layout is not None else 0
        blocks = {key: (start + offset, length) for key, (offset, length) in inner.items()}
        blocks.update(zip(relation_keys, zip(packing.offsets[layout is not None:], masks)))
        return packing.num_vars, start, blocks

    @property
    def num_vars(self) -> int:
        return self._placement[0]

    @property
    def blocks(self) -> dict:
        """{("slot", name, piece) | ("mask", name) | ("relation", j): (offset, length)}."""
        return dict(self._placement[2])

    @property
    def used_end(self) -> int:
        """One past the last entry any block uses (entries from there on are weighed by no claim)."""
        return max((o + n for o, n in self._placement[2].values()), default=0)

    def selector(self, key) -> np.ndarray:
        """The Boolean high coordinates selecting block ``key`` in the packed table."""
        offset, length = self._placement[2][key]
        size = (length - 1).bit_length()
        return boolean_point(offset >> size, self.num_vars - size)

    def mask_selector(self, j: int) -> np.ndarray:
        return self.selector(("relation", j))

    def pack(self, tables: dict, masks: dict | None, relation_blocks=()) -> np.ndarray:
        """The committed base-field table: the layout's packed table (:func:`~proofs.relations.pack_store`) at its
        start and the relations' mask blocks at their offsets, zeros elsewhere."""
        num_vars, start, blocks = self._placement
        table = np.zeros(1 << num_vars, dtype=np.uint64)
        if self.layout is not None:
            pack_store(self.layout, tables, masks, out=table[start:start + (1 << self.layout.num_vars)])
        for j, block in enumerate(relation_blocks):
            offset = blocks[("relation", j)][0]
            table[offset:offset + block.size] = block
        return table


def unused_end(plan: StorePlan) -> int:
    """Entries at the end of the plan's table that no claim weighs (past every block's used entries)."""
    return (1 << plan.num_vars) - plan.used_end


def commit_hosted(plan: StorePlan, tables: dict, params: BZ.HidingBasefoldParams, seed=None):
    """Commit the plan's tensors (fresh Libra masks) and fresh sumcheck masks -> (HidingBasefoldCommitment,
    StoreWitness or None, mask coefficients ((n, d + 1, 4) each, F_p4), HidingBasefoldWitness). ``seed``: tests only."""
    rng = None if seed is None else np.random.default_rng(seed)
    full, masks = store_tables(plan.layout, tables, rng) if plan.layout is not None else (None, None)
    coefficients, blocks = [], []
    for n, d in plan.mask_shapes:
        c = random_mask(n, d, rng)
        coefficients.append(c)
        blocks.append(mask_table(c))
    commitment, witness = BZ.commit(plan.pack(full, masks, blocks), params,
                                    seed=None if rng is None else int(rng.integers(1 << 62)), free=unused_end(plan))
    store = None if plan.layout is None else StoreWitness(plan.layout, full, masks if plan.layout.hiding else None,
                                                          witness)
    return commitment, store, tuple(coefficients), witness


def view_functional(plan: StorePlan, view: View) -> B.Functional:
    """The view's value as a functional of the plan's packed table: sum_j w(j) T~(e, j) (lo = e, D = w, hi = the
    slot's selector; a slot cut into its box's pieces, one term per piece: factor x piece~(point),
    :func:`~proofs.relations.piece_point`) plus its mask coefficients' weights z_i(e) w(j) (a dense block at the
    mask block)."""
    layout = plan.layout
    slot = layout.slot(view.name)
    e = np.asarray(view.e, dtype=np.uint64).reshape(-1, F.EXT_DEGREE)
    if e.shape[0] != slot.elem_vars:
        raise ProofError(f"view of {slot.name}: element point of {e.shape[0]} variables, expected {slot.elem_vars}")
    w = None
    if slot.plane_vars or view.w is not None:
        w = np.asarray(view.w, dtype=np.uint64)
        if w.shape != (1 << slot.plane_vars, F.EXT_DEGREE):
            raise ProofError(f"view of {slot.name}: plane weights of shape {w.shape}")
    dense = None if w is None or slot.plane_vars == 0 else w
    scale = F.ext_one() if w is None or slot.plane_vars else w[0]
    terms = []
    for i, piece in enumerate(plan.pieces(view.name)):
        lo, factor = piece_point(e, piece)
        terms.append((F.ext_mul(scale, factor), lo, dense, plan.selector(("slot", view.name, i))))
    if layout.hiding:
        planes = F.ext_one((1,)) if w is None else w
        weights = F.ext_mul(view.mask_weights(slot)[:, None, :], planes[None, :, :]).reshape(-1, F.EXT_DEGREE)
        units = F.ext_mul(weights[:, None, :], np.eye(F.EXT_DEGREE, dtype=np.uint64)[None]).reshape(-1, F.EXT_DEGREE)
        block = (slot.mask_count - 1).bit_length()
        padded = np.concatenate([units, F.ext_zero(((1 << block) - units.shape[0],))])
        terms.append((F.ext_one(), F.ext_zero((0,)), padded, plan.selector(("mask", view.name))))
    return B.Functional(plan.num_vars, tuple(terms))


def mask_functional(plan: StorePlan, j: int, point) -> B.Functional:
    """g_j(point) = sum_i sum_e c[i, e] point_i^e as a functional of the plan's packed table."""
    n, d = plan.mask_shapes[j]
    return B.Functional(plan.num_vars, ((F.ext_one(), F.ext_zero((0,)), powers_table(point, d),
                                         plan.mask_selector(j)),))


# ---------------------------------------------------------------------------------------------- channel
class BasefoldChannel(Channel):
    """:class:`Channel` over hiding Basefold stores: ``plans`` (key -> StorePlan, the layouts' keys and the mask
    host's), ``mask_host`` (the key whose plan holds the relations' masks, in protocol order), ``openers``
    (prover: key -> HidingBasefoldWitness) and ``mask_coefficients`` (prover: the host's masks)."""

    def __init__(self, transcript, params: BZ.HidingBasefoldParams, layouts: dict, plans: dict, commitments: dict,
                 mask_host: str, witnesses=None, items=None, openers=None, mask_coefficients=None):
        super().__init__(transcript, params, layouts, commitments, witnesses, items)
        self.plans, self.mask_host, self.openers = plans, mask_host, openers or {}
        self.mask_coefficients = mask_coefficients
        self.mask_claims = []  # (relation index, sigma, g(sigma))

    def relation(self, label: str, terms, claim=None) -> None:
        """One relation sumcheck, masked by the next committed mask; the prover states every distinct stored
        factor's value at its end."""
        claim = F.ext_zero() if claim is None else np.asarray(claim, dtype=np.uint64)
        relation = Relation(tuple(terms), claim)
        self.relations.append((label, relation))
        n, d = relation.num_vars(), relation.degree(self.layouts)
        j = len(self.mask_claims)
        shapes = self.plans[self.mask_host].mask_shapes
        label = f"sumcheck.training.{label}"
        if j >= len(shapes) or tuple(shapes[j]) != (n, d):
            error = ProofError if self.proving else ProofRejected
            raise error(f"relation {j} of shape {(n, d)} has no committed mask (masks for {list(shapes)})", label)
        unique = list({factor_key(f): f for term in relation.terms for f in term.stored}.values())
        if self.proving:
            prover = RelationProver(relation, self.witnesses, self.layouts)
            proof, sigma, finals = prove_masked(prover, claim, self.transcript, label, self.mask_coefficients[j])
            self.items.append(proof)
            by_key = {factor_key(f): v for term, values in zip(relation.terms, finals)
                      for f, v in zip(term.stored, values)}
            values = np.stack([by_key[factor_key(f)] for f in unique])
            self.items.append(values)
        else:
            proof = self._next(MaskedSumcheckProof, label)
            sub = verify_masked(proof, claim, n, d, self.transcript, label)
            sigma = sub.point
            values = self._next(np.ndarray, label)
            if values.shape != (len(unique), F.EXT_DEGREE) or not F.is_canonical(values):
                raise ProofRejected(f"values of shape {values.shape}, expected ({len(unique)}, 4) canonical", label)
            by_key = {factor_key(f): v for f, v in zip(unique, values)}
            finals = [[by_key[factor_key(f)] for f in term.stored] for term in relation.terms]
            if not F.ext_eq(expected_summand(relation, sigma, finals), sub.expected_value):
                raise ProofRejected("the stated values do not satisfy the relation at the sumcheck's point", label)
        self.mask_claims.append((j, sigma, proof.mask_eval))
        self.transcript.absorb(f"{label}.values", values)
        for f, v in zip(unique, values):
            self.claims[f.store].append((f.view_at(self.layouts[f.store].slot(f.name), sigma), v))

    def _claim_sets(self):
        """(keys, functionals, values) of every store with claims, in the plans' order."""
        keys, functionals, values = [], [], []
        host = self.plans[self.mask_host]
        for key, plan in self.plans.items():
            fs = [view_functional(plan, view) for view, _ in self.claims.get(key, ())]
            vs = [v for _, v in self.claims.get(key, ())]
            if key == self.mask_host:
                fs += [mask_functional(host, j, sigma) for j, sigma, _ in self.mask_claims]
                vs += [value for _, _, value in self.mask_claims]
            if fs:
                keys.append(key)
                functionals.append(fs)
                values.append(np.stack(vs))
        return keys, functionals, values

    def open_all(self) -> None:
        """Every claim of every store (and every mask value) in one hiding Basefold batch opening."""
        shapes = self.plans[self.mask_host].mask_shapes
        if len(self.mask_claims) != len(shapes):
            error = ProofError if self.proving else ProofRejected
            raise error(f"{len(self.mask_claims)} relations ran, {len(shapes)} masks were committed", "opening")
        keys, functionals, values = self._claim_sets()
        if self.proving:
            for key, layout in self.layouts.items():
                views = list(self.prior_views.get(key, ())) + [view for view, _ in self.claims[key]]
                if views and mask_rank(layout, views) != len(views):
                    raise ProofError(f"store {key}: the stated values' masks are dependent, zero knowledge would be "
                                     "lost (a tensor with too few variables for its values)")
            _, proof = BZ.open_batch([self.openers[k] for k in keys], functionals, self.transcript, values)
            self.items.append(proof)
        else:
            BZ.verify_batch([self.commitments[k] for k in keys], functionals, values,
                            self._next(BZ.MaskedBatchProof if self.params.layout == "tail" else B.BasefoldProof,
                                       "batch opening"), self.transcript)
