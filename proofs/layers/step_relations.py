"""The relations of a training-step or inference proof, run identically by prover and verifier.

Every relation is one sumcheck with a public claim over masked stores (:mod:`proofs.relations`); the list
is in :mod:`proofs.layers.step_proof`'s docstring. :class:`Channel` carries the transcript, the proof items
(written or read) and the values stated on each store, opened once per store at the end.

**Padding.** Tensors are padded to powers of two; the statement is about the declared shapes, so every
padded entry must be zero (or the padding would hold extra hidden units or samples that change W' and O).
Each tensor that a relation holds entrywise (sum_x eq(tau, x) R(x) = 0) gets, in that relation, a term
gamma eq(tau, x) (1 - box(x)) T(x) (:meth:`Protocol.padding`): W_t, X_t, Y_t in their range relations (the
committer is not trusted), W' in the update, A_i in the ReLU select, G_i in its select. It reuses the factor
T, so it adds no stated value and no degree. Then, inductively, every product of the padded network is zero
outside the declared box, and the bit decompositions there are those of 0 (fixed by the rebuild relations);
planes past a decomposition's width get random rebuild weights (:meth:`Protocol.rebuilt`), so they are zero.
"""
from __future__ import annotations

import numpy as np

from .. import field as F
from ..errors import ProofError, ProofRejected
from ..mle import bind_high, mle_evaluate
from ..relations import (BitTerm, Public, Relation, RelationProver, Stored, Term, eq_factor, expected_summand,
                         mask_rank, padding_factor, view_pieces)
from ..sumcheck import SumcheckProof, prove_sumcheck, verify_sumcheck
from ..transcript import Transcript
from ..basefold_zk import MaskedSumcheckProof, prove_masked, verify_masked
from ..zk import HidingCommitment, HidingOpening, HidingParams, ZKSumcheckProof, commit_masks, masks_functional, \
    masks_shape, open_functionals, prove_zk_sumcheck, verify_functionals, verify_zk_sumcheck
from .common import log2
from .requant import Decomposition
from .step_stores import batch_box, data_range, decomposition_keys, weight_box, weight_range
from .training import TrainingSpec


# ------------------------------------------------------------------------------------------ the channel
def factor_key(factor: Stored) -> tuple:
    """Stored factors with equal fields are one view: its value is stated once."""
    def raw(a):
        return None if a is None else np.asarray(a, dtype=np.uint64).tobytes()
    return factor.store, factor.name, raw(factor.low), raw(factor.high), raw(factor.planes)


class Channel:
    """What prover and verifier share: the transcript, the stores, the proof items (written or read) and the
    values stated on each store. The protocol runs once per side.

    ``mask_shapes`` (with hiding): every relation's (variables, degree), known to both sides from the public
    shapes; then the relations' Libra masks are ONE commitment (:func:`proofs.zk.commit_masks`, the first proof
    item, absorbed before any relation) and their values one opening in :meth:`open_all`, instead of a mask
    commitment and opening per relation (:func:`proofs.zk.prove_zk_sumcheck`)."""

    def __init__(self, transcript, params: HidingParams, layouts: dict, commitments: dict, witnesses=None,
                 items=None, mask_shapes=None):
        self.transcript, self.params, self.layouts, self.commitments = transcript, params, layouts, commitments
        self.witnesses = witnesses
        self.proving = items is None
        self.items = [] if items is None else list(items)
        self._position = 0
        self.claims = {key: [] for key in layouts}  # store key -> [(View, value)]
        self.prior_views = {}  # store key -> views its masks already answered (a reusable copy's agreement value)
        self.relations = []  # (label, Relation) in protocol order
        self.mask_shapes = None
        if mask_shapes is not None and getattr(params, "hiding", False) and isinstance(params, HidingParams):
            self.mask_shapes = tuple((int(n), int(d)) for n, d in mask_shapes)
            self.mask_claims = []  # (relation index, sigma, g(sigma))
            self._commit_masks()

    def _commit_masks(self) -> None:
        where = "relation masks"
        if self.proving:
            self.mask_coefficients, commitment, self.mask_witness = commit_masks(self.mask_shapes, self.params)
            self.items.append(commitment)
        else:
            commitment = self._next(HidingCommitment, where)
            expected = masks_shape(self.mask_shapes, self.params)
            if (commitment.num_vars, commitment.log_rows, commitment.params) != \
                    (expected.num_vars, expected.log_rows, expected.params):
                raise ProofRejected(f"the masks' commitment has the shape ({commitment.num_vars} variables, "
                                    f"{commitment.log_rows} row variables, {commitment.params}), expected "
                                    f"({expected.num_vars}, {expected.log_rows}, {expected.params})", where)
        self.mask_commitment = commitment
        self.transcript.absorb(where, commitment.to_bytes())

    def _masked(self, prover, relation, claim, label):
        """The relation's sumcheck masked by its committed mask -> (proof, sigma, finals or the SubClaim)."""
        j = len(self.mask_claims)
        n, d = relation.num_vars(), relation.degree(self.layouts)
        if j >= len(self.mask_shapes) or self.mask_shapes[j] != (n, d):
            error = ProofError if self.proving else ProofRejected
            raise error(f"relation {j} of shape {(n, d)} has no committed mask (masks for {list(self.mask_shapes)})",
                        label)
        if self.proving:
            proof, sigma, finals = prove_masked(prover, claim, self.transcript, label, self.mask_coefficients[j])
            out = finals
        else:
            proof = self._next(MaskedSumcheckProof, label)
            out = verify_masked(proof, claim, n, d, self.transcript, label)
            sigma = out.point
        self.mask_claims.append((j, sigma, proof.mask_eval))
        return proof, sigma, out

    def _next(self, kind, where):
        if self._position >= len(self.items):
            raise ProofRejected("the proof ends early", where)
        item = self.items[self._position]
        self._position += 1
        if not isinstance(item, kind):
            raise ProofRejected(f"expected {kind.__name__}, got {type(item).__name__}", where)
        return item

    def point(self, label: str, num_vars: int) -> np.ndarray:
        return self.transcript.challenge_ext_vector(label, num_vars)  # error num_vars / |F| for a zero check

    def relation(self, label: str, terms, claim=None) -> None:
        """One relation sumcheck; the prover states every distinct stored factor's value at its end."""
        claim = F.ext_zero() if claim is None else np.asarray(claim, dtype=np.uint64)
        relation = Relation(tuple(terms), claim)
        self.relations.append((label, relation))
        n, d = relation.num_vars(), relation.degree(self.layouts)
        unique = list({factor_key(f): f for term in relation.terms for f in term.stored}.values())
        label = f"sumcheck.training.{label}"
        if self.proving:
            prover = RelationProver(relation, self.witnesses, self.layouts)
            if self.mask_shapes is not None:
                proof, sigma, finals = self._masked(prover, relation, claim, label)
            elif self.params.hiding:
                proof, sigma, finals = prove_zk_sumcheck(prover, claim, self.transcript, label, self.params)
            else:
                proof, sigma, finals = prove_sumcheck(prover, claim, self.transcript, label, strict=False)
            self.items.append(proof)
            by_key = {factor_key(f): v for term, values in zip(relation.terms, finals)
                      for f, v in zip(term.stored, values)}
            values = np.stack([by_key[factor_key(f)] for f in unique])
            self.items.append(values)
        else:
            if self.mask_shapes is not None:
                sub = self._masked(None, relation, claim, label)[2]
            elif self.params.hiding:
                sub = verify_zk_sumcheck(self._next(ZKSumcheckProof, label), claim, n, d, self.transcript, label)
            else:
                sub = verify_sumcheck(self._next(SumcheckProof, label), claim, n, d, self.transcript, label)
            sigma = sub.point
            values = self._next(np.ndarray, label)
            if values.shape != (len(unique), F.EXT_DEGREE) or not F.is_canonical(values):
                raise ProofRejected(f"values of shape {values.shape}, expected ({len(unique)}, 4) canonical", label)
            by_key = {factor_key(f): v for f, v in zip(unique, values)}
            finals = [[by_key[factor_key(f)] for f in term.stored] for term in relation.terms]
            if not F.ext_eq(expected_summand(relation, sigma, finals), sub.expected_value):
                raise ProofRejected("the stated values do not satisfy the relation at the sumcheck's point", label)
        self.transcript.absorb(f"{label}.values", values)
        for f, v in zip(unique, values):
            self.claims[f.store].append((f.view_at(self.layouts[f.store].slot(f.name), sigma), v))

    def open_all(self) -> None:
        """One hiding opening per store of every value stated on it (in the layouts' order)."""
        for key, layout in self.layouts.items():
            claims = self.claims[key]
            if not claims:
                continue
            values = np.stack([v for _, v in claims])
            if self.proving:
                views = list(self.prior_views.get(key, ())) + [view for view, _ in claims]
                if self.params.hiding and mask_rank(layout, views) != len(views):
                    raise ProofError(f"store {key}: the stated values' masks are dependent, zero knowledge would be "
                                     "lost (a tensor with too few variables for its values)")
                witness = self.witnesses[key]
                functionals = [view_pieces(layout, witness.commitment, view) for view, _ in claims]
                _, opening = open_functionals(witness.commitment_witness, functionals, self.transcript, values=values,
                                              bound=True)  # views: from the transcript's points
                self.items.append(opening)
            else:
                commitment = self.commitments[key]
                functionals = [view_pieces(layout, commitment, view) for view, _ in claims]
                verify_functionals(commitment, functionals, values, self._next(HidingOpening, f"opening of {key}"),
                                   self.transcript, bound=True)
        if self.mask_shapes is not None:
            self._open_masks()

    def _open_masks(self) -> None:
        """Every relation's g_j(sigma_j) in one opening of the masks' commitment."""
        where = "opening of the relation masks"
        if len(self.mask_claims) != len(self.mask_shapes):
            error = ProofError if self.proving else ProofRejected
            raise error(f"{len(self.mask_claims)} relations ran, {len(self.mask_shapes)} masks were committed", where)
        if not self.mask_claims:
            return
        functionals = [masks_functional(self.mask_shapes, j, sigma) for j, sigma, _ in self.mask_claims]
        values = np.stack([value for _, _, value in self.mask_claims])
        if self.proving:
            _, opening = open_functionals(self.mask_witness, functionals, self.transcript, values=values, bound=True)
            self.items.append(opening)
        else:
            verify_functionals(self.mask_commitment, functionals, values, self._next(HidingOpening, where),
                               self.transcript, bound=True)

    def finish(self) -> None:
        if not self.proving and self._position != len(self.items):
            raise ProofRejected(f"{len(self.items) - self._position} unused proof items", "proof items")


class ShapeChannel(Channel):
    """Runs the protocol's structure only: records each relation's (variables, degree), proves nothing."""

    def __init__(self, params: HidingParams, layouts: dict):
        super().__init__(Transcript("hezk.proofs.training.shape"), params, layouts, {}, {})
        self.shapes = []

    def relation(self, label: str, terms, claim=None) -> None:
        relation = Relation(tuple(terms), F.ext_zero())
        self.shapes.append((relation.num_vars(), relation.degree(self.layouts)))


# ------------------------------------------------------------------------------------------ the protocol
def ext_int(value: int) -> np.ndarray:
    return F.ext_from_base(F.to_field(np.array([value], dtype=np.int64)))[0]


class Protocol:
    """The relations of the module docstring, run identically by prover and verifier."""

    def __init__(self, spec: TrainingSpec, channel: Channel, where: dict, public_input=None):
        self.spec, self.ch, self.where, self.public_input = spec, channel, where, public_input
        self.one, self.minus = F.ext_one(), F.ext_neg(F.ext_one())

    def stored(self, t: int, name: str, **fix) -> Stored:
        key = f"t{t}.{name}"
        return Stored(self.where[key], key, **fix)

    def combination(self, t: int, name: str, decomposition: Decomposition, coefficients, pad_planes=False) -> list:
        """sum_j c_j B(., j) as (scale, stored factor) pairs, one per plane group the coefficients touch; a
        one-plane group is the plane itself times its coefficient (so equal views are stated once).
        ``pad_planes``: each plane past the width (c_j = 0) gets a fresh random weight instead (:meth:`rebuilt`)."""
        coefficients = F.ext_from_base(F.to_field(np.asarray(coefficients, dtype=np.int64)))
        if pad_planes and decomposition.padded_width > decomposition.width:
            coefficients[decomposition.width:] = self.ch.point(
                f"training.t{t}.{name}.planes", decomposition.padded_width - decomposition.width)
        out = []
        for g, (start, count) in enumerate(decomposition.groups):
            part = coefficients[start:start + count]
            key = name if g == 0 else f"{name}.g{g}"
            if count == 1 and part[0].any():
                out.append((part[0], self.stored(t, key)))
            elif part.any():
                out.append((self.one, self.stored(t, key, planes=part)))
        return out

    def rebuilt(self, t, name, decomposition):
        """sum_j c_j B(., j) + sum_(j >= width) gamma_j B(., j), gamma_j fresh: a relation Z = rebuilt - h then
        also forces every plane past the width to zero (the planes no other relation reads; error 1 / |F|)."""
        return self.combination(t, name, decomposition, decomposition.rebuild_coefficients(), pad_planes=True)

    def quotient(self, t, name, decomposition):
        return self.combination(t, name, decomposition, decomposition.output_coefficients())

    def sign(self, t, name, decomposition):
        indicator = np.zeros(decomposition.padded_width, dtype=np.int64)
        indicator[decomposition.sign_index] = 1
        (pair,) = self.combination(t, name, decomposition, indicator)
        return pair

    def rescaled_matmul(self, label, left, right, k_vars, rebuilt: list, decomposition, tau) -> None:
        """sum_k left(k) right(k) - sum_e eq(tau, e) sum_j c_j B(e, j) + h = 0 (Z(tau) = rebuilt(tau))."""
        publics = tuple(f for f in (left,) if isinstance(f, Public))
        stored = tuple(f for f in (left, right) if isinstance(f, Stored))
        eq = eq_factor(tau)
        self.ch.relation(label, [Term(self.one, publics, stored, k_vars)]
                         + [Term(F.ext_neg(c), (eq,), (part,), tau.shape[0]) for c, part in rebuilt]
                         + [Term(ext_int(decomposition.offset), (), (), 0)])

    def padding(self, label: str, tensor: Stored, box, tau) -> list:
        """[gamma eq(tau, x) (1 - box(x)) T(x)] with gamma fresh, joined to a relation sum_x eq(tau, x) R(x) = 0:
        it then also shows T = 0 outside its declared box (:func:`proofs.relations.padding_factor`). The term
        reuses the relation's factor T (no value is stated for it); [] when nothing is padded."""
        extents, log_sizes = box
        if all(e == 1 << k for e, k in zip(extents, log_sizes)):
            return []
        gamma = self.ch.point(f"training.{label}.padding", 1)[0]  # error 1 / |F|
        return [Term(gamma, (padding_factor(tau, extents, log_sizes),), (tensor,), tau.shape[0])]

    def select(self, label, target, quotient: list, sign, tau, extra=None, box=None) -> None:
        """sum_e eq(tau, e) [target(e) - q(e) + s(e) q(e) (+ extra(e))] = 0 (no sign: no ReLU), and target = 0
        outside ``box``."""
        eq, n = eq_factor(tau), tau.shape[0]
        terms = [Term(self.one, (eq,), (target,), n)] + [Term(F.ext_neg(c), (eq,), (q,), n) for c, q in quotient]
        if sign is not None:
            scale, factor = sign
            terms += [Term(F.ext_mul(scale, c), (eq,), (factor, q), n) for c, q in quotient]
        if extra is not None:
            terms.append(Term(self.one, (eq,), (extra,), n))
        if box is not None:
            terms += self.padding(label, target, box, tau)
        self.ch.relation(label, terms)

    def input_factor(self, t: int, tau_b, k_vars: int):
        """A_0 = X contracted over the batch at tau_b: the committed batch, or the public input."""
        if self.public_input is None:
            return Stored(self.where[f"x{t}"], "X", high=tau_b)
        x = self.public_input
        return Public(lambda: bind_high(x, tau_b),
                      lambda sigma: mle_evaluate(x, np.concatenate([sigma[:k_vars], tau_b])))

    def forward(self, t: int) -> None:
        spec, ch = self.spec, self.ch
        B, L = spec.batch_padded, spec.num_layers
        for i in range(L):
            decomposition = spec.forward_spec(i)
            out_vars, in_vars, b_vars = log2(spec.width(i + 1)), log2(spec.width(i)), log2(B)
            tau = ch.point(f"training.t{t}.forward{i}", out_vars + b_vars)
            tau_o, tau_b = tau[:out_vars], tau[out_vars:]
            left = self.stored(t, f"A{i}", high=tau_b) if i else self.input_factor(t, tau_b, in_vars)
            self.rescaled_matmul(f"t{t}.forward{i}", left, Stored(self.where[f"w{t}"], f"W{i}", high=tau_o), in_vars,
                                 self.rebuilt(t, f"fwd{i}", decomposition), decomposition, tau)
            if i + 1 < L:
                tau = ch.point(f"training.t{t}.relu{i}", out_vars + b_vars)
                self.select(f"t{t}.relu{i}", self.stored(t, f"A{i + 1}"), self.quotient(t, f"fwd{i}", decomposition),
                            self.sign(t, f"fwd{i}", decomposition), tau, box=batch_box(spec, i + 1))

    def output(self, t: int, public_output) -> None:
        """O = q_(L-1): equal to the public output, or G_(L-1) = O - Y (training)."""
        spec, ch = self.spec, self.ch
        i = spec.num_layers - 1
        tau = ch.point(f"training.t{t}.output", log2(spec.batch_padded * spec.width(i + 1)))
        quotient = self.quotient(t, f"fwd{i}", spec.forward_spec(i))
        if public_output is not None:
            ch.relation(f"t{t}.output", [Term(c, (eq_factor(tau),), (q,), tau.shape[0]) for c, q in quotient],
                        mle_evaluate(public_output, tau))
            return
        self.select(f"t{t}.output", self.stored(t, f"G{i}"), quotient, None, tau,
                    extra=Stored(self.where[f"x{t}"], "Y"), box=batch_box(spec, i + 1))

    def backward(self, t: int) -> None:
        spec, ch = self.spec, self.ch
        B, L = spec.batch_padded, spec.num_layers
        b_vars = log2(B)
        for i in range(L - 2, -1, -1):  # G_A_i = G_(i+1) W_(i+1);  G_i = (1 - s_i) round(G_A_i)
            decomposition = spec.backward_spec()
            k_vars, o_vars = log2(spec.width(i + 1)), log2(spec.width(i + 2))
            tau = ch.point(f"training.t{t}.backward{i}", k_vars + b_vars)
            tau_k, tau_b = tau[:k_vars], tau[k_vars:]
            self.rescaled_matmul(f"t{t}.backward{i}", self.stored(t, f"G{i + 1}", high=tau_b),
                                 Stored(self.where[f"w{t}"], f"W{i + 1}", low=tau_k), o_vars,
                                 self.rebuilt(t, f"bwd{i}", decomposition), decomposition, tau)
            tau = ch.point(f"training.t{t}.mask{i}", k_vars + b_vars)
            self.select(f"t{t}.mask{i}", self.stored(t, f"G{i}"), self.quotient(t, f"bwd{i}", decomposition),
                        self.sign(t, f"fwd{i}", spec.forward_spec(i)), tau, box=batch_box(spec, i + 1))

    def update(self, t: int) -> None:
        spec, ch = self.spec, self.ch
        b_vars = log2(spec.batch_padded)
        for i in range(spec.num_layers):  # G_W_i = G_i^T A_i;  W'_i = W_i - round(G_W_i / 2^k)
            decomposition = spec.update_spec()
            k_vars, o_vars = log2(spec.width(i)), log2(spec.width(i + 1))
            tau = ch.point(f"training.t{t}.gradw{i}", k_vars + o_vars)
            tau_k, tau_o = tau[:k_vars], tau[k_vars:]
            activation = self.stored(t, f"A{i}", low=tau_k) if i else Stored(self.where[f"x{t}"], "X", low=tau_k)
            self.rescaled_matmul(f"t{t}.gradw{i}", self.stored(t, f"G{i}", low=tau_o), activation, b_vars,
                                 self.rebuilt(t, f"upd{i}", decomposition), decomposition, tau)
            tau = ch.point(f"training.t{t}.update{i}", k_vars + o_vars)
            eq, n = eq_factor(tau), tau.shape[0]
            new = Stored(self.where[f"w{t + 1}"], f"W{i}")
            ch.relation(f"t{t}.update{i}", [
                Term(self.one, (eq,), (new,), n),
                Term(self.minus, (eq,), (Stored(self.where[f"w{t}"], f"W{i}"),), n)]
                + [Term(c, (eq,), (q,), n) for c, q in self.quotient(t, f"upd{i}", decomposition)]
                + self.padding(f"t{t}.update{i}", new, weight_box(spec, i), tau))

    def in_range(self, label, tensor: Stored, name: str, t: int, decomposition: Decomposition, box) -> None:
        """sum_e eq(tau, e) [T(e) - sum_j c_j B(e, j)] = 0: T is its own bit decomposition (range checked), and
        T = 0 outside its declared ``box`` (a statement tensor: the committer is not trusted with its padding)."""
        n = sum(box[1])
        tau = self.ch.point(f"training.t{t}.{label}", n)
        eq = eq_factor(tau)
        self.ch.relation(f"t{t}.{label}", [Term(self.one, (eq,), (tensor,), n)]
                         + [Term(F.ext_neg(c), (eq,), (part,), n) for c, part in self.rebuilt(t, name, decomposition)]
                         + self.padding(f"t{t}.{label}", tensor, box, tau))

    def ranges(self, t: int, private_input: bool, targets: bool) -> None:
        """The step's inputs lie in their declared ranges: W_t (weight_bits), X and Y (act_bits)."""
        spec = self.spec
        for i in range(spec.num_layers):
            self.in_range(f"range.w{i}", Stored(self.where[f"w{t}"], f"W{i}"), f"rngw{i}", t, weight_range(spec),
                          weight_box(spec, i))
        if private_input:
            self.in_range("range.x", Stored(self.where[f"x{t}"], "X"), "rngx", t, data_range(spec), batch_box(spec, 0))
        if targets:
            self.in_range("range.y", Stored(self.where[f"x{t}"], "Y"), "rngy", t, data_range(spec),
                          batch_box(spec, spec.num_layers))

    def bits(self, keys) -> None:
        """Every entry of every decomposition is a bit: batched over ``keys`` with random weights."""
        ch = self.ch
        betas = ch.point("training.bits.beta", len(keys))
        terms = []
        for key, beta in zip(keys, betas):
            store = self.where[key]
            slot = ch.layouts[store].slot(key)
            n = slot.elem_vars + slot.plane_vars
            terms.append(BitTerm(beta, ch.point(f"training.bits.{key}", n), Stored(store, key)))
        ch.relation("bits", terms)


def locate(statement_keys: dict, layouts: dict) -> dict:
    """Slot or statement name -> store key."""
    where = dict(statement_keys)
    for key, layout in layouts.items():
        where.update({s.name: key for s in layout.slots})
    return where


def bit_check_groups(layouts: dict, mode: str) -> list:
    """Decompositions checked by one sumcheck: all of them (aggregate) or one each (layer)."""
    keys = decomposition_keys(layouts)
    return [keys] if mode == "aggregate" else [[k] for k in keys]
