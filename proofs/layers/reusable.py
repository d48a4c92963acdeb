"""Commitments that many zero-knowledge proofs can use: K hiding copies of one store and a proof they agree.

**Why copies.** A masked store (:mod:`proofs.relations`) is zero knowledge for *one* proof: its masks l_i and
the random tails of its rows are fixed when it is committed. A second proof against the same store states
fresh linear functionals of the same tensor and the same masks (after about n_e + |T| proofs the system
T~(e_k) + z(e_k) l = v_k is solved for T), and its opening reveals fresh columns of the same encoded rows
(once more positions are known than a row has random tail coefficients, the rows are determined). With
hash-based commitments this is unavoidable for one committed string: every opening reveals symbols of it.

So a reusable commitment is K independent hiding commitments C_0..C_(K-1) to the same tables (fresh masks,
tails and salts each), and one zero-knowledge proof, made at commit time, that they agree on the whole
Boolean cube (padding included):

    sum_x eq(tau, x) sum_k alpha_k C_k(x) = 0   with sum_k alpha_k = 0 (alpha_1..alpha_(K-1) random),

one sumcheck per store layout with every slot batched by random weights (Schwartz-Zippel: if some C_k differs
from C_0 on the cube, the sum is nonzero except w.p. (n + 1) / |F_p4|). Proof j then uses copy j alone:
each copy is opened twice in its life (by the agreement proof and by its one proof), so it is committed
with ``openings=2`` (:class:`proofs.zk.HidingParams`: a random tail of 2 q coefficients per row), and its
stated values are those of one proof plus one agreement value per slot, with independent masks (the prover
checks the joint mask rank). Copies are never reused: the prover refuses a proof once all K are spent; a copy
is reserved (:meth:`ReusableWitness.reserve`, under a lock across threads, and for a witness bound to a prover
state file under that file's lock, appended durably to its journal: :mod:`proofs.layers.prover_state`) before
it is used. A
prover state must never be copied or restored: two holders of one state would prove with the same copies.

The verifier checks the agreement proof once per :class:`Reusable` object (memoized on it); each proof names
its copy, and the transcript absorbs the whole bundle's digest and the copy index.
Cost: K commitments and K openings at commit time; proofs are unchanged.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import threading
from dataclasses import dataclass, field as dataclass_field

import numpy as np

import hezk.memory

from .. import field as F
from ..errors import ProofError, ProofRejected
from ..pcs.scheme import HIDING_BASEFOLD, HIDING_LIGERO, scheme_of
from ..proof_format import from_record, to_record
from ..relations import StoreLayout, Stored, Term, commit_store, eq_factor
from ..transcript import Transcript
from ..zk import HidingParams, without_code
from .basefold_channel import BasefoldChannel, StorePlan, commit_hosted
from .proof_items import TrainingProof, read_store_commitment
from .step_relations import Channel, ShapeChannel

TRANSCRIPT_LABEL = "hezk.proofs.reusable.v1"
#: proofs one model commitment supports by default (each is one more hiding copy at commit time): a model
#: serves many inferences
DEFAULT_MAX_PROOFS = 64
#: the same for the commitments of a training step, usually proved once
DEFAULT_STEP_PROOFS = 8
MAX_COPIES = 4096
_MAGIC, _VERSION = b"HZKREUSE", 1


def _copy_key(k: int) -> str:
    return f"c{k}"


@dataclass(frozen=True, eq=False)
class Reusable:
    """The public part: the K copies' commitments and the agreement proof's items."""

    copies: tuple
    agreement: tuple
    _verified: list = dataclass_field(default_factory=list, repr=False, compare=False)

    def __len__(self) -> int:
        return len(self.copies)

    @property
    def max_proofs(self) -> int:
        return len(self.copies)

    def digest(self) -> bytes:
        """BLAKE2b of every copy's commitment (what a proof's transcript absorbs)."""
        h = hashlib.blake2b(digest_size=32, person=b"hezk.reusable")
        for c in self.copies:
            h.update(c.to_bytes())
        return h.digest()

    @property
    def root(self) -> bytes:
        """The bundle's identity (:meth:`digest`), as a single commitment's Merkle root is."""
        return self.digest()

    @property
    def params(self) -> HidingParams:
        return self.copies[0].params

    KIND = "proofs.Reusable"

    def to_bytes(self) -> bytes:
        """A ``proofs.Reusable`` record (:func:`proofs.proof_format.to_record`) of :meth:`inner_bytes`."""
        return to_record(self.KIND, self.inner_bytes())

    def __reduce__(self):
        """Pickle (Dask, multiprocessing, concurrent.futures) through the versioned bytes of ``to_bytes``."""
        return type(self).from_bytes, (self.to_bytes(),)

    @classmethod
    def from_bytes(cls, data) -> "Reusable":
        return cls.from_inner_bytes(from_record(data, cls.KIND, "reusable commitment"))

    def inner_bytes(self) -> bytes:
        """Magic, version, copies (u16 count, each a hiding commitment), the agreement proof's record."""
        parts = [_MAGIC, bytes([_VERSION]), len(self.copies).to_bytes(2, "little")]
        parts += [c.to_bytes() for c in self.copies]
        parts.append(TrainingProof("aggregate", (), self.agreement).to_bytes())
        return b"".join(parts)

    @classmethod
    def from_inner_bytes(cls, data) -> "Reusable":
        reader = F.ByteReader(data, "reusable commitment")
        if reader.raw(len(_MAGIC)) != _MAGIC or reader.uint(1) != _VERSION:
            raise ProofRejected("bad magic or version of a reusable commitment", reader.where)
        count = reader.uint(2)
        if not 1 <= count <= MAX_COPIES:
            raise ProofRejected(f"{count} copies, expected 1..{MAX_COPIES}", reader.where)
        copies = tuple(read_store_commitment(reader) for _ in range(count))
        agreement = TrainingProof.from_bytes(reader.raw(reader.remaining))
        return cls(copies, agreement.items)


#: one lock for every witness's reservations: a copy is handed out once across this process's threads
_RESERVE_LOCK = threading.RLock()


@dataclass(frozen=True, eq=False)
class ReusableWitness:
    """The prover's side: the copies' store witnesses, the views each copy's agreement value states (for the
    joint mask-rank check) and the indices already spent by proofs (mutable: a copy is used once).

    ``ledger``: empty, or the prover-state file this witness is bound to (:mod:`proofs.layers.prover_state`, set
    by its ``load`` and ``save``): then every reservation is made under the file's lock and appended durably to
    its journal BEFORE the copy is used, so concurrent provers of one state file never share a copy."""

    public: Reusable
    witnesses: tuple
    agreement_views: tuple
    spent: list = dataclass_field(default_factory=list)
    ledger: list = dataclass_field(default_factory=list, repr=False, compare=False)

    def take(self, where: str, copy: int | None = None) -> int:
        """The next unused copy, or copy ``copy`` when given (a batch prover hands out copies ahead of the
        proofs); ProofError when all are spent or ``copy`` is: zero knowledge would be lost."""
        return self.reserve(where, 1, None if copy is None else [copy])[0]

    def reserve(self, where: str, count: int = 1, copies=None) -> list:
        """``count`` unused copies (or exactly ``copies``), all or none, marked spent before they are returned
        (in the bound state file's journal too, durably, when there is one): no copy is ever handed out twice."""
        with _RESERVE_LOCK:
            if self.ledger:
                return self.ledger[0].reserve(self, lambda: self._pick(where, count, copies))
            return self._pick(where, count, copies)

    def _pick(self, where: str, count: int, copies) -> list:
        total = len(self.witnesses)
        if copies is not None:
            for copy in copies:
                if isinstance(copy, bool) or not isinstance(copy, (int, np.integer)) \
                        or not 0 <= copy < total or copy in self.spent:
                    raise ProofError(f"{where}: copy={copy!r} is not an unused copy in [0, {total}) "
                                     f"(spent: {sorted(self.spent)})")
            picked = [int(c) for c in copies]
            if len(set(picked)) != len(picked):
                raise ProofError(f"{where}: copies {picked} name one copy twice")
        else:
            picked = [k for k in range(total) if k not in self.spent][:count]
            if len(picked) < count:
                raise ProofError(f"{where}: {total - len(picked)} of the max_proofs={total} copies of this commitment "
                                 f"are used and {count} more are needed; another proof would reveal the committed "
                                 "values: commit again (with a larger max_proofs)")
        self.spent.extend(picked)
        return picked


def copy_params(params: HidingParams, copies: int) -> HidingParams:
    """The copies' commitment parameters: two openings' random tails each, and log2(K) more query bits, so
    that the agreement proof's K openings together err w.p. at most 2^-target_bits (a union bound)."""
    if scheme_of(params, error=None) is HIDING_BASEFOLD:  # the agreement opens all K copies in ONE batch
        return dataclasses.replace(params, openings=1 if copies == 1 else 2)
    if not params.hiding or copies == 1:
        return params
    return dataclasses.replace(params, openings=2, target_bits=params.target_bits + (copies - 1).bit_length())


def base_params(reusable: "Reusable") -> HidingParams:
    """The proof parameters a reusable commitment was made for (the inverse of :func:`copy_params`)."""
    params = reusable.params
    if scheme_of(params, error=None) is HIDING_BASEFOLD:
        return dataclasses.replace(params, openings=1)
    if not params.hiding or len(reusable.copies) == 1:
        return params
    return dataclasses.replace(params, openings=1, target_bits=params.target_bits - (len(reusable.copies) - 1).bit_length())


def agreement_shapes(layout: StoreLayout, copies: int, params: HidingParams):
    """The agreement proof's structure for a soundness count: ([(variables, degree)] of its sumchecks, its
    stores key -> layout, the challenges it batches with (alpha, beta: 1 / |F| each))."""
    keys = [_copy_key(k) for k in range(copies)]
    channel = ShapeChannel(params, {key: layout for key in keys})
    _agreement(channel, layout, copies)
    return channel.shapes, ({key: layout for key in keys} if copies > 1 else {}), 2 if copies > 1 else 0


def _transcript(layout: StoreLayout, copies) -> Transcript:
    transcript = Transcript(TRANSCRIPT_LABEL)
    transcript.absorb("reusable.layout", [int(layout.hiding)] + [[s.name, s.elem_vars, s.plane_vars]
                                                                  for s in layout.slots])
    transcript.absorb("reusable.copies", [c.to_bytes() for c in copies])
    return transcript


def _agreement(channel, layout: StoreLayout, count: int) -> None:
    """sum_x eq(tau, x) sum_s beta_s sum_k alpha_k C_k[s](x) = 0, sum_k alpha_k = 0 (the module's relation)."""
    if count < 2:
        return
    n = max(s.elem_vars + s.plane_vars for s in layout.slots)
    tau = channel.point("reusable.tau", n)
    alphas = channel.transcript.challenge_ext_vector("reusable.alpha", count - 1)  # each 1/|F| (SZ in alpha)
    alphas = np.concatenate([F.ext_neg(F.ext_sum(alphas, axis=0))[None], alphas])
    betas = channel.transcript.challenge_ext_vector("reusable.beta", len(layout.slots))
    terms = []
    for s, beta in zip(layout.slots, betas):
        m = s.elem_vars + s.plane_vars
        eq = eq_factor(tau[:m])
        for k in range(count):
            terms.append(Term(F.ext_mul(beta, alphas[k]), (eq,), (Stored(_copy_key(k), s.name),), m))
    channel.relation("reusable.agreement", terms)


def commit_reusable(layout: StoreLayout, tables: dict, params: HidingParams, max_proofs: int, log_rows: int,
                    seed=None):
    """K = ``max_proofs`` hiding copies of ``tables`` and their agreement proof -> (Reusable, ReusableWitness).
    ``seed``: tests only (the copies' masks, tails and salts reproducible)."""
    if not isinstance(max_proofs, (int, np.integer)) or not 1 <= max_proofs <= MAX_COPIES:
        raise ProofError(f"max_proofs={max_proofs!r} not in [1, {MAX_COPIES}]")
    if scheme_of(params, error=None) is HIDING_BASEFOLD:
        return _commit_basefold(layout, tables, params, max_proofs, seed)
    def seeded(k):
        return None if seed is None else seed * MAX_COPIES + k

    if not params.hiding:  # nothing to hide: one store serves any number of proofs
        made = commit_store(layout, tables, params, log_rows=log_rows, seed=seeded(0))
        public = Reusable((made[0],), ())
        return public, ReusableWitness(public, (made[1],), ((),), [])
    made = []
    for k in range(max_proofs):  # one code at a time in memory: large copies keep their Merkle trees only
        commitment, store = commit_store(layout, tables, copy_params(params, max_proofs), log_rows=log_rows,
                                         seed=seeded(k))
        first = made[0][1].tables if made else store.tables
        same = first is store.tables or all(np.array_equal(first[name], table) for name, table in store.tables.items())
        made.append((commitment, dataclasses.replace(  # equal tables held once, not K times
            store, tables=first if same else store.tables, commitment_witness=without_code(store.commitment_witness))))
    commitments = tuple(c for c, _ in made)
    keys = [_copy_key(k) for k in range(max_proofs)]
    witnesses = {key: w for key, (_, w) in zip(keys, made)}
    channel = Channel(_transcript(layout, commitments), params, {key: layout for key in keys},
                      dict(zip(keys, commitments)), witnesses)
    _agreement(channel, layout, max_proofs)
    views = tuple(tuple(view for view, _ in channel.claims[key]) for key in keys)
    channel.open_all()
    public = Reusable(commitments, tuple(channel.items))
    return public, ReusableWitness(public, tuple(w for _, w in made), views, [])


@functools.lru_cache(maxsize=32)
def mask_plan(layout: StoreLayout, copies: int) -> StorePlan:
    """The agreement proof's mask store: one Libra mask per relation of :func:`_agreement` (shapes public)."""
    keys = [_copy_key(k) for k in range(copies)]
    channel = ShapeChannel(HidingParams(), {key: layout for key in keys})
    _agreement(channel, layout, copies)
    return StorePlan(None, tuple(channel.shapes))


def _basefold_channel(layout, copies, mask_commitment, params, **side) -> BasefoldChannel:
    keys = [_copy_key(k) for k in range(len(copies))]
    transcript = _transcript(layout, copies)
    transcript.absorb("reusable.masks", mask_commitment.to_bytes())
    plans = {**{key: StorePlan(layout) for key in keys}, "m": mask_plan(layout, len(copies))}
    return BasefoldChannel(transcript, params, {key: layout for key in keys}, plans,
                           {**dict(zip(keys, copies)), "m": mask_commitment}, "m", **side)


#: bytes per slot-table entry per copy of a hiding Basefold commitment, times (1 + rate_inv) (the table and its
#: codeword), while the agreement proof's one batch opening holds every copy with its folded tables: measured on a
#: GPT-2-small block (2^25 entries a copy, rate 1/2) through ``hezk commit``: 2 copies 4.47 GB peak, 4 copies 7.82
#: GB, so 1.56 GiB a copy (16.6 bytes); 16 copies were killed past 24 GB
BASEFOLD_COPY_ENTRY_BYTES = 17
#: the share of the available memory the copies may take (the rest: the process's own and the opening's transients)
BASEFOLD_MEMORY_SHARE = 0.9


def basefold_copies_bytes(layout: StoreLayout, params, copies: int) -> int:
    """About the memory committing ``copies`` hiding Basefold copies of ``layout`` holds at once (the agreement's
    batch opening of them all): copies x slot-table entries x (1 + rate_inv) x BASEFOLD_COPY_ENTRY_BYTES."""
    from .. import basefold_zk as BZ
    from .basefold_channel import unused_end

    plan, each = StorePlan(layout), copy_params(params, copies)
    v, m = BZ.shape(plan.num_vars, each, unused_end(plan))
    return copies * (1 << (v + m)) * (1 + each.base.rate_inv) * BASEFOLD_COPY_ENTRY_BYTES


def _check_basefold_memory(layout, params, max_proofs: int) -> None:
    """ProofError naming the estimate, the memory available and the fixes, before a commitment that would not fit
    (the process would be killed part-way)."""
    available = hezk.memory.available_memory()
    if max_proofs < 2 or available is None:
        return
    need, usable = basefold_copies_bytes(layout, params, max_proofs), int(BASEFOLD_MEMORY_SHARE * available)
    if need <= usable:
        return
    fits = max(1, usable * max_proofs // need)
    raise ProofError(f"committing {max_proofs} hiding Basefold copies of this model needs about {need / 2**30:.1f} "
                     f"GiB at once (their agreement proof opens them together), more than {usable / 2**30:.1f} GiB "
                     f"({BASEFOLD_MEMORY_SHARE:.0%} of the {available / 2**30:.1f} GiB available): commit at most "
                     f"{fits} (max_proofs, --max-proofs) or use hiding Ligero (--scheme ligero), whose copies are "
                     f"committed one at a time")


def _commit_basefold(layout, tables, params, max_proofs: int, seed):
    """K hiding Basefold copies (openings=2 each when K > 1) and their agreement proof, all its claims and masks
    in one batch opening; the agreement's mask commitment is the first agreement item. Refused first when they
    would not fit in the memory available (:func:`basefold_copies_bytes`)."""
    _check_basefold_memory(layout, params, max_proofs)

    def seeded(k):
        return None if seed is None else seed * MAX_COPIES + k

    made = [commit_hosted(StorePlan(layout), tables, copy_params(params, max_proofs), seed=seeded(k))
            for k in range(max_proofs)]
    commitments = tuple(c for c, *_ in made)
    if max_proofs == 1:
        public = Reusable(commitments, ())
        return public, ReusableWitness(public, (made[0][1],), ((),), [])
    mask_commitment, _, coefficients, mask_witness = commit_hosted(
        mask_plan(layout, max_proofs), {}, dataclasses.replace(params, openings=1), seed=seeded(max_proofs))
    keys = [_copy_key(k) for k in range(max_proofs)]
    channel = _basefold_channel(layout, commitments, mask_commitment, params,
                                witnesses={key: m[1] for key, m in zip(keys, made)},
                                openers={**{key: m[3] for key, m in zip(keys, made)}, "m": mask_witness},
                                mask_coefficients=coefficients)
    _agreement(channel, layout, max_proofs)
    views = tuple(tuple(view for view, _ in channel.claims[key]) for key in keys)
    channel.open_all()
    public = Reusable(commitments, (mask_commitment,) + tuple(channel.items))
    return public, ReusableWitness(public, tuple(m[1] for m in made), views, [])


def _verify_basefold(layout: StoreLayout, reusable: Reusable, params, where: str) -> None:
    expected = copy_params(params, len(reusable.copies))
    plan = StorePlan(layout)
    for k, c in enumerate(reusable.copies):
        if not HIDING_BASEFOLD.is_commitment(c) or c.params != expected or c.num_vars != plan.num_vars:
            raise ProofRejected(f"copy {k} does not match the statement (num_vars {plan.num_vars}, {expected})", where)
    if len(reusable.copies) == 1:
        if reusable.agreement:
            raise ProofRejected("a single copy has no agreement proof", where)
        return
    if not reusable.agreement or not HIDING_BASEFOLD.is_commitment(reusable.agreement[0]):
        raise ProofRejected("the agreement proof does not start with its mask commitment", where)
    masks = reusable.agreement[0]
    if masks.params != dataclasses.replace(params, openings=1) or \
            masks.num_vars != mask_plan(layout, len(reusable.copies)).num_vars:
        raise ProofRejected("the agreement's mask commitment does not have the statement's shape", where)
    channel = _basefold_channel(layout, reusable.copies, masks, params, items=reusable.agreement[1:])
    _agreement(channel, layout, len(reusable.copies))
    channel.open_all()
    channel.finish()


def verify_reusable(layout: StoreLayout, reusable: Reusable, params: HidingParams, where: str) -> None:
    """Raise ProofRejected unless the copies have the layout's size and ``params`` (2 openings each when
    there are several) and the agreement proof holds. Checked once per object."""
    if not isinstance(reusable, Reusable) or not 1 <= len(reusable.copies) <= MAX_COPIES:
        raise ProofRejected("expected a Reusable commitment", where)
    key = (tuple((sl.name, sl.elem_vars, sl.plane_vars) for sl in layout.slots), layout.hiding, params)
    if key in reusable._verified:
        return
    if scheme_of(params, error=None) is HIDING_BASEFOLD:
        _verify_basefold(layout, reusable, params, where)
        reusable._verified.append(key)
        return
    expected = copy_params(params, len(reusable.copies))
    for k, c in enumerate(reusable.copies):
        if not HIDING_LIGERO.is_commitment(c) or c.num_vars != layout.num_vars or \
                dataclasses.replace(c.params, mask_rows=params.mask_rows) != \
                dataclasses.replace(expected, mask_rows=params.mask_rows):
            raise ProofRejected(f"copy {k} does not match the statement (num_vars {layout.num_vars}, {expected})",
                                where)
    if not params.hiding and len(reusable.copies) != 1:
        raise ProofRejected("a non-hiding commitment has exactly one copy", where)
    keys = [_copy_key(k) for k in range(len(reusable.copies))]
    channel = Channel(_transcript(layout, reusable.copies), params, {key: layout for key in keys},
                      dict(zip(keys, reusable.copies)), items=reusable.agreement)
    _agreement(channel, layout, len(reusable.copies))
    channel.open_all()
    channel.finish()
    reusable._verified.append(key)
