"""The model path for graphs with attention (``Bilinear``, ``Softmax``, ``LayerNorm`` nodes: an exported
``nn.TransformerEncoderLayer``): plan, keys, encryption, evaluation and decryption of ``tensor_ops.attention``'s
node-by-node evaluation, the route ``hezk plan`` / ``hezk infer`` take for such a model.

``plan_attention(graph, calibration)`` calibrates every approximation (``tensor_ops.attention.approximate``:
Softmax by a calibrated shift, exp by squaring and a Newton reciprocal; LayerNorm by a Newton inverse square
root; activations by minimax fits), states each one's largest error on the calibration data, measures the
levels the whole evaluation consumes and the rotations it performs by running it on recording backends (the
same einsum plans, attention's two products included, as the encrypted run), and chooses 128-bit parameters
with that many levels (``model_plan.choose_parameters``) whose Galois keys fit the key budget. A model deeper
than a 128-bit ring holds within the budget bootstraps on N16_BOOT (``BootstrappingBackend``: a tensor refreshed
before an operation needing more levels than it has, compacted into fewer ciphertexts first where cheaper,
``tensor_ops.compaction``, and a dirty tensor with nothing to pack masked clean first, so that the bootstrap reads
its values alone; ``BootstrapRecorder`` places them in the plan); parameters below 128 bits only with
``allow_insecure``, for tests. The plan records how the einsum planner laid out attention's two products
(``contractions``: the strategy its cost model chose, e.g. ``tensor_ops.plan.skewed``'s diagonal products, with its
estimate, rotations and depth) and prices the recorded rotations as they run on the keys it makes (``rotation_units``:
with power-of-two keys a step without its key is composed), node by node. ``run_attention`` refuses samples whose
plain reference leaves a calibrated range (the input range, a Softmax's shift or row-sum range, a LayerNorm's
variance range, an activation's interval): the polynomials are only right there.
"""
from __future__ import annotations

import math
import weakref
from dataclasses import dataclass
from math import prod

import numpy as np

import hezk.model
from crypto.ckks.bootstrap import BootstrapConfig, as_config, natural_scales
from crypto.ckks.encoder import encoding_period
from crypto.context import LOW_BOOTSTRAP_BITS
from crypto.rlwe import Ciphertext
from crypto.errors import LevelError, ParameterError, ShapeError

from .backends import CKKSBackend, multiply_then_add
from .attention import MARGIN, NEWTON_TOLERANCE, RANGE_MARGIN, GraphApproximation, approximate
from .bootstrap_placement import bootstrap_cost, cached_bootstrap_plan
from .inference import InputRangeError, require_secure
from .model_plan import (BOOTSTRAP_PRESET, DEFAULT_KEY_BUDGET, auto_parameters, check_scale_drift, choose_parameters,
                         deepest_secure_preset)
from .nn import LevelRecorder
from .plan.cost import CostModel
from .tensor_base import CipherTensorBase

__all__ = ["ATTENTION_BOOTSTRAP", "ATTENTION_KINDS", "AttentionPlan", "BootstrapRecorder", "BootstrapSite",
           "BootstrappingBackend", "ESTIMATE_COSTS", "PLAINTEXT_CACHE_BYTES", "plaintext_cache_entries",
           "switching_work",
           "contraction_records", "find_early_refreshes", "rotation_units", "has_attention", "plan_attention",
           "read_graph", "run_attention", "attention_config",
           "samples_outside"]

#: node kinds that only this path evaluates (``tensor_ops.nn.from_graph`` refuses them)
ATTENTION_KINDS = ("bilinear", "softmax", "layernorm")
#: slots the rotations are recorded at when no parameters are found (N = 2^16)
_DEFAULT_SLOTS = 1 << 15
#: levels asked beyond the recorded depth: the evaluator aligns the scales of two ciphertexts at one level by a
#: rescale of one of them (a level the recording backend does not see; one on the tiny encoder layer)
ALIGNMENT_LEVELS = 2
#: the per-operation costs the time estimates price with, measured at N16_BOOT's top level (``CostModel.measure``:
#: CPU time, best of 3, one thread, idle AMD EPYC 2-core machine, 2026-12-07): a key-switched rotation 0.147 s at
#: N = 2^16 with 49 + 9 limbs (scaled linearly with N x limbs to other parameters: the unit), a hoisted one 0.365 of
#: it, ct x ct with relinearization 1.02, ct x pt 0.055, a rescale 0.159, an encoding 0.072. (Measured before at
#: a load of 3-5 on a slower machine, 2026-12-06: a rotation 0.310 s, the ratios within 15% of these; earlier, 2.5
#: ms at N = 2^13 with 7 limbs scaled up priced it at 0.166 s.)
ESTIMATE_COSTS = CostModel(hoisted_rotation=0.365, ct_mult=1.02, pt_mult=0.055, rescale=0.159, encode=0.072,
                           rotation_seconds=0.147, measured_size=(1 << 16) * 58)
ROTATION_SECONDS, REFERENCE_SIZE = ESTIMATE_COSTS.rotation_seconds, ESTIMATE_COSTS.measured_size
#: measured over priced seconds of a bootstrap: its operation counts priced as above give 18.4 s for N16_BOOT's
#: bootstrap without arcsin (3/3 levels), measured 8.93 s on the same machine (``benchmarks/bootstrap.py``: best
#: of 2, one thread; double hoisting, subring diagonals and fused EvalMod products that the counts do not see;
#: 14.86 s of 36.8 priced, 0.404, on the slower machine)
BOOTSTRAP_MEASURED_SHARE = 0.486


class ScaleKeepingBackend(CKKSBackend):
    """A CKKSBackend whose products land on the scale Delta of the parameters after their rescale, so that scales
    do not drift along attention's long chains of products (Softmax's squarings and Newton steps: s' = s^2 / q
    doubles a relative drift at every squaring, and the chain runs out of scale; the evaluator's own rule keeps
    each ciphertext's scale through a product by a constant, drift included). A constant is encoded at
    q_l Delta / s (s the ciphertext's scale, q_l its top level's primes); of two ciphertexts at different
    levels, the higher one is first brought to the lower one's level + 1 and multiplied by ones encoded at
    q Delta q_low / (s s_low), landing on the scale that makes the product's rescale give Delta (a level it had to
    spare anyway). Two ciphertexts at one level multiply as they are."""

    def _delta_scale(self, level: int, scale: float) -> float:
        params = self.ctx.params
        return float(prod(params.q_levels[level])) * params.scale / scale if level > 0 else params.scale

    def _encode(self, const, ct):
        key = (const.digest, ct.level, ct.scale)
        pt = self._encoded.get(key)
        if pt is None:
            if len(self._encoded) >= self.cache_size:
                self._encoded.pop(next(iter(self._encoded)))
            pt = self._encoded[key] = self.ev.encode(const.vec, ct.level, self._delta_scale(ct.level, ct.scale))
        return pt

    def multiply(self, a, b):
        level_a, level_b = getattr(a, "level", None), getattr(b, "level", None)
        if isinstance(b, Ciphertext) and isinstance(a, Ciphertext) and level_a != level_b:
            high, low = (a, b) if level_a > level_b else (b, a)
            high = self.ev.to_level(high, low.level + 1)
            target = self._delta_scale(low.level, low.scale)     # the product's rescale then gives Delta
            ones = self.ev.encode(np.ones(self.slots), high.level,
                                  float(prod(self.ctx.params.q_levels[high.level])) * target / high.scale)
            high = self.ev.rescale(self.ev.mul(high, ones))
            return self.ev.mul(low, high)
        return super().multiply(a, b)


@dataclass(frozen=True)
class BootstrapSite:
    """One refresh: the ``ciphertexts`` of one tensor bootstrapped together before an operation of ``node`` (the
    node evaluated after ``after``; None: the graph's input), which needed more levels than the lowest of them,
    ``level_in``, had left; ``magnitude``: the largest |value| bootstrapped there on the recorded sample (the
    bootstrap's stated precision is for |x| <= 1; NaN where not recorded); ``spread``: the tensor's ciphertexts
    when they were compacted (``tensor_ops.compaction``) into the ``ciphertexts`` bootstrapped (0: not compacted);
    ``coefficient``: the largest |coefficient| of the message polynomials bootstrapped, in units of the scale (what
    EvalMod's sine reads: its error grows as the cube of it; NaN where not recorded)."""

    node: str
    after: str | None
    ciphertexts: int
    level_in: int
    magnitude: float = float("nan")
    spread: int = 0                 # the tensor's ciphertexts when compacted into ``ciphertexts`` first (0: not)
    coefficient: float = float("nan")   # the largest |message coefficient| / Delta bootstrapped (recorded)

    def __post_init__(self):
        if not isinstance(self.node, str) or not (self.after is None or isinstance(self.after, str)):
            raise ParameterError(f"bootstrap site: node={self.node!r} and after={self.after!r} must be node names")
        if isinstance(self.spread, bool) or not isinstance(self.spread, (int, np.integer)) or \
                not (self.spread == 0 or self.spread > self.ciphertexts):
            raise ParameterError(f"bootstrap site at {self.node}: spread={self.spread!r} must be 0 or an integer above "
                                 f"ciphertexts={self.ciphertexts}")
        for name in ("ciphertexts", "level_in"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < (name == "ciphertexts"):
                raise ParameterError(f"bootstrap site at {self.node}: {name}={value!r} must be an integer >= "
                                     f"{int(name == 'ciphertexts')}")


class _Refreshing:
    """The bootstrap rule shared by the encrypted backend and its recording twin (``refresh_operands``, called by
    ``tensor_ops.tensor_base.run_plan`` before every plan): a plan that consumes d >= 1 levels (``Plan.depth``)
    first bootstraps every encrypted operand whose lowest ciphertext is below level d, all the tensor's ciphertexts
    together (they leave at the bootstrap's ``levels_left``); a plan deeper than ``levels_left`` is refused
    (LevelError). Each refresh is kept in ``sites`` (``BootstrapSite``), by the node ``at_node`` last named.

    A tensor spread over several ciphertexts is first compacted into as few as hold its values where that costs
    less than the bootstraps it saves (``compaction_for``; ``tensor_ops.compaction``: a rotation a tile, masks
    where other values share the slots), bootstrapped, and moved back to its layout; the site states both counts.

    A refreshed tensor is remembered by its ciphertexts (the last ``REMEMBERED`` ciphertexts): an operand made of
    the same ciphertexts again (a value used by several operations, as Newton's iterations use the row sum s in
    y (2 - s y) at every step) takes the refreshed ones instead of a second bootstrap."""

    levels_left: int
    REMEMBERED = 64

    def _init_sites(self, bootstrap_units: float | None = None, forced=(), tracking: bool = False):
        self.sites: list[BootstrapSite] = []
        self.forced = frozenset((int(a), int(b)) for a, b in forced)   # (plan ordinal, operand): refresh early
        self.ordinal, self._lowest = -1, None
        self.tracking = bool(tracking)
        self.blocked: list = []       # ((ordinal, operand) of a refresh whose compaction lacked a level, producer)
        self.wide: list = []          # the producers of tensors refreshed as several ciphertexts
        self._producers: dict = {}    # id(ct) -> (weak reference, (ordinal, operand) of the plan that made it)
        self.bootstrap_units = None if bootstrap_units is None else float(bootstrap_units)
        self.compaction_steps: set = set()   # rotation steps the compactions took (their keys)
        self._compactions: dict = {}
        self._node, self._after = None, None
        self._refreshed: dict = {}   # ids of the ciphertexts -> (those ciphertexts, their bootstrapped ones)

    def at_node(self, name: str) -> None:
        """The node evaluated from now on (``GraphApproximation.forward`` names each)."""
        self._node, self._after = name, self._node

    @property
    def bootstraps(self) -> int:
        """Ciphertexts bootstrapped so far."""
        return sum(site.ciphertexts for site in self.sites)

    def refresh_operands(self, plan, operands):
        self.ordinal += 1
        need = plan.depth()
        if need == 0 and not any(where[0] == self.ordinal for where in self.forced):
            self._lowest = _lowest_operand(operands)
            return operands
        out = []
        for index, operand in enumerate(operands):
            level = operand.level if isinstance(operand, CipherTensorBase) else None
            early = (self.ordinal, index) in self.forced and level is not None and level < self.levels_left - 1
            if level is not None and (level < need or early):
                if need > self.levels_left:
                    raise LevelError(f"{self._node or 'an operation'}: {plan.spec.expression()} consumes {need} "
                                     f"levels in one plan, more than the {self.levels_left} a bootstrap leaves")
                compaction, blocked = self.compaction_for(operand.layout, int(level), max(need, 1), blocked=True)
                if blocked and self.tracking:
                    self.blocked.append(((self.ordinal, index), self._producer_of(operand.ciphertexts)))
                before = len(self.sites)
                fresh = (self._bootstrapped(operand.ciphertexts, int(level)) if compaction is None
                         else self._compacted(operand.ciphertexts, compaction))
                if self.tracking and len(self.sites) > before and self.sites[-1].coefficient > 1:
                    # message coefficients above Delta (e.g. a layer norm's sum of squares, values ~ the width):
                    # EvalMod's error grows as their cube; an earlier refresh of the plan that made it is tried
                    self.blocked.append(((self.ordinal, index), self._producer_of(operand.ciphertexts)))
                self._note_wide(before, operand.ciphertexts)
                operand = type(operand)(fresh, operand.layout, operand.backend)
            out.append(operand)
        self._lowest = _lowest_operand(out)
        return out

    def prepare(self, tensor, need: int):
        """``tensor`` refreshed now (as ``refresh_operands`` refreshes an operand, compacted first where cheaper)
        when it is below ``need`` levels and a bootstrap leaves at least ``need``: called before a node whose
        approximation consumes ``need`` levels (``GraphApproximation.node_depth``), so that its whole schedule runs
        on one refresh of its input, the fewest ciphertexts live, instead of refreshes of its intermediates (an
        activation's powers, a Newton iteration's iterates) as each runs out: the placement of bootstraps at the
        narrowest point of the graph, as THOR (ePrint 2024/1881) and NEXUS (ePrint 2024/136) place theirs."""
        level = getattr(tensor, "level", None)
        if not isinstance(tensor, CipherTensorBase) or level is None or level >= need or need > self.levels_left:
            return tensor
        compaction = self.compaction_for(tensor.layout, int(level), need)
        before = len(self.sites)
        fresh = (self._bootstrapped(tensor.ciphertexts, int(level)) if compaction is None
                 else self._compacted(tensor.ciphertexts, compaction))
        self._note_wide(before, tensor.ciphertexts)
        return type(tensor)(fresh, tensor.layout, tensor.backend)

    def _note_wide(self, before: int, ciphertexts) -> None:
        """A tracking recorder notes the producer of a tensor just refreshed as several ciphertexts (a wide tensor,
        e.g. an MLP's hidden layer): refreshing the plan that made it early, on its narrower input, may take
        fewer bootstraps (``find_early_refreshes``)."""
        if self.tracking and len(self.sites) > before and self.sites[-1].ciphertexts > 1:
            self.wide.append(self._producer_of(ciphertexts))

    def produced(self, ciphertexts) -> None:
        """The output ciphertexts of the plan just run (``tensor_base.run_plan``): a tracking recorder notes which
        plan made them and its lowest operand, where an earlier refresh would have left them levels."""
        if self.tracking and self._lowest is not None:
            where = (self.ordinal, self._lowest)
            for ct in ciphertexts:
                self._producers[id(ct)] = (weakref.ref(ct), where)

    def _producer_of(self, ciphertexts):
        """(plan ordinal, operand index) of the plan that made ``ciphertexts`` (the latest of them), or None."""
        found = []
        for ct in ciphertexts:
            entry = self._producers.get(id(ct))
            if entry is not None and entry[0]() is ct:
                found.append(entry[1])
        return max(found) if found else None

    def compaction_for(self, layout, level: int, need: int, blocked: bool = False):
        """The ``tensor_ops.compaction.Compaction`` a refresh of a tensor of ``layout`` at ``level`` before a plan
        consuming ``need`` levels takes, or None (bootstrap each ciphertext): taken when it bootstraps fewer
        ciphertexts, its masks have the levels (one before the bootstrap where the layout is dirty, one after it
        where it is clean, within the plan's need) and the bootstraps it saves (``bootstrap_units`` each,
        CostModel units) cost more than its rotations and masks; None always when ``bootstrap_units`` is None.
        ``blocked``: return (compaction or None, whether only the mask before the bootstrap lacked a level)."""
        from .compaction import plan_compaction

        chosen, short = None, False
        if self.bootstrap_units is not None and (layout.n_ciphertexts > 1 or not layout.clean):
            compaction = self._compactions.get(layout)
            if compaction is None:
                compaction = self._compactions[layout] = plan_compaction(layout)
            saved = (compaction.spread - compaction.ciphertexts) * self.bootstrap_units
            if compaction.ciphertexts < compaction.spread and compaction.cost() < saved and \
                    not (compaction.mask_after and need > self.levels_left - 1):
                short = compaction.mask_before and level < 1
                chosen = None if short else compaction
            elif compaction.ciphertexts == compaction.spread and compaction.mask_before and \
                    not compaction.mask_after and level >= 1:
                # cleaning only (a dirty tensor, nothing to pack): its garbage slots (a rotate-and-sum's partial
                # sums, e.g. Softmax's row sums over a row inside the ciphertext) zeroed by a mask first, so that
                # the bootstrap reads the values alone: EvalMod's error grows as the cube of the message
                # coefficients, and garbage of 60 x the values made coefficients of ~63 Delta
                chosen = compaction
        return (chosen, short) if blocked else chosen

    def _compacted(self, ciphertexts, compaction) -> list:
        """The tensor's ciphertexts compacted, bootstrapped and expanded back to its layout (remembered as
        ``_bootstrapped`` remembers, by the ciphertexts and the layout)."""
        from .compaction import compact, expand

        key = (tuple(id(ct) for ct in ciphertexts), compaction.layout)
        kept = self._refreshed.get(key)
        if kept is not None:
            return kept[1]
        small = compact(self, list(ciphertexts), compaction)
        level = min(int(ct.level) for ct in small)
        self.sites.append(BootstrapSite(self._node or "", self._after, len(small), level, self._magnitude(small),
                                        spread=len(ciphertexts) if len(ciphertexts) > len(small) else 0,
                                        coefficient=self._coefficient(small)))
        self.compaction_steps.update(compaction.rotation_steps())
        fresh = expand(self, [self.bootstrap(ct) for ct in small], compaction)
        self._remember(key, ciphertexts, fresh)
        return fresh

    def _bootstrapped(self, ciphertexts, level: int) -> list:
        key = tuple(id(ct) for ct in ciphertexts)
        kept = self._refreshed.get(key)
        if kept is not None:
            return kept[1]
        self.sites.append(BootstrapSite(self._node or "", self._after, len(ciphertexts), level,
                                        self._magnitude(ciphertexts), coefficient=self._coefficient(ciphertexts)))
        fresh = [self.bootstrap(ct) for ct in ciphertexts]
        self._remember(key, ciphertexts, fresh)
        return fresh

    def _remember(self, key, ciphertexts, fresh) -> None:
        self._refreshed[key] = (tuple(ciphertexts), fresh)   # the originals kept: their ids stay theirs
        while sum(len(v[0]) for v in self._refreshed.values()) > self.REMEMBERED and len(self._refreshed) > 1:
            self._refreshed.pop(next(iter(self._refreshed)))

    def _magnitude(self, ciphertexts) -> float:
        return float("nan")

    def _coefficient(self, ciphertexts) -> float:
        return float("nan")


def _lowest_operand(operands):
    """The index of the encrypted operand at the lowest level (None without one)."""
    levels = [(operand.level, index) for index, operand in enumerate(operands)
              if isinstance(operand, CipherTensorBase) and operand.level is not None]
    return min(levels)[1] if levels else None


class BootstrappingBackend(_Refreshing, ScaleKeepingBackend):
    """A ScaleKeepingBackend that bootstraps (``Evaluator.bootstrap`` with ``config``; the context needs the
    bootstrap's rotation keys and conjugation key: ``CKKSContext.keygen(bootstrap=config)``) by the rule of
    ``_Refreshing``: before an operation (one einsum / elementwise plan) that consumes d levels, each encrypted
    operand tensor with a ciphertext below level d is bootstrapped, all its ciphertexts together; the refreshed
    ciphertexts are at the bootstrap's ``levels_left``.

    Scales follow the parameters' natural chain (``crypto.ckks.bootstrap.natural_scales``: s_L = Delta,
    s_(l-1) = s_l^2 / q_l, where a bootstrap lands): a constant is encoded so that the product's rescale gives
    s_(l-1), so two ciphertexts at one level always share a scale and an addition never spends a level aligning
    them (the evaluator aligns ciphertexts at two levels on the higher one). The levels a run takes are then those
    of the level-recording twin (``BootstrapRecorder``), and so are its bootstraps; inputs are encrypted at the
    natural scale of their level (``encrypt_tensor``)."""

    def __init__(self, ctx, config=None, cache_size: int | None = None, compaction: bool = True, forced=()):
        config = as_config(config)
        boot = cached_bootstrap_plan(ctx.params, config)
        super().__init__(ctx, plaintext_cache_entries(ctx.params, boot.levels_left) if cache_size is None
                         else cache_size)
        self.config = config
        self.bootstrap_plan = boot
        self.levels_left = self.bootstrap_plan.levels_left
        self.natural = natural_scales(ctx.params)
        self._init_sites(bootstrap_cost(self.bootstrap_plan) if compaction else None, forced)
        self.bootstrap_wall, self.node_wall, self._since = 0.0, {}, 0.0   # measured seconds (``at_node``)

    def _delta_scale(self, level: int, scale: float) -> float:
        params = self.ctx.params
        if level == 0:
            return self.natural[0]
        return float(prod(params.q_levels[level])) * self.natural[level - 1] / scale

    def bootstrap(self, ct):
        import time

        start = time.perf_counter()
        out = self.ev.bootstrap(ct, self.config)
        self.bootstrap_wall += time.perf_counter() - start
        return out

    def at_node(self, name: str) -> None:
        """The node evaluated from now on; the wall time since the last node is booked to that one
        (``node_wall``: {node: seconds, its bootstraps included})."""
        import time

        now = time.perf_counter()
        if self._node is not None:
            self.node_wall[self._node] = self.node_wall.get(self._node, 0.0) + now - self._since
        self._since = now
        super().at_node(name)

    def encrypt_tensor(self, array, level: int):
        """``array`` encrypted in the compact layout (as ``tensor_ops.encrypt``) at ``level`` and the natural scale
        there."""
        from .layout import SlotLayout
        from .tensor import CipherTensor

        layout = SlotLayout.compact(array.shape, self.slots)
        cts = [self.ctx.encrypt(v, level=level, scale=self.natural[level]) for v in layout.pack(array)]
        return CipherTensor(cts, layout, self)


class BootstrapRecorder(_Refreshing, LevelRecorder):
    """The level-recording twin of ``BootstrappingBackend``: slot vectors carry levels (``LevelRecorder``), inputs
    start at ``input_level``, the same rule refreshes tensors (a refreshed vector is at ``levels_left``; its values
    unchanged), and ``sites`` states where the encrypted run will bootstrap, how many ciphertexts and the largest
    value bootstrapped; ``products`` counts ciphertext x ciphertext and ciphertext x constant products apart (for
    the time estimate). A rescale below level 0 raises LevelError (the rule failed to refresh in time)."""

    def __init__(self, slots: int, input_level: int, levels_left: int, bootstrap_units: float | None = None,
                 forced=(), tracking: bool = False, cache_size: int | None = None):
        super().__init__(slots)
        self.cache_size = cache_size     # the run's cache of encodings (entries, first in first out; None: all)
        self.input_level, self.levels_left = int(input_level), int(levels_left)
        self.products = {"ct_ct": 0, "ct_pt": 0, "rescale": 0, "encode": 0}
        self.amounts: dict = {}       # (node, step mod slots, hoisted) -> rotations by it (priced per key set later)
        #: (node, "ct_ct" | "ct_pt" | "rescale" | "encode") -> count: products, rescales, and the constants a run
        #: encodes (one per distinct constant and level, as ``CKKSBackend``'s cache of encodings does)
        self.node_products: dict = {}
        self._encoded: dict = {}
        self._lazy: set = set()     # ids of the sums of ``multiply_accumulate`` not relinearized yet
        self._init_sites(bootstrap_units, forced, tracking)

    def rotate(self, x, k):
        key = (self._node or "", int(k) % self.slots, False, getattr(x, "level", None))
        self.amounts[key] = self.amounts.get(key, 0) + 1
        return super().rotate(x, k)

    def rotate_many(self, x, ks):
        for k in ks:
            key = (self._node or "", int(k) % self.slots, True, getattr(x, "level", None))
            self.amounts[key] = self.amounts.get(key, 0) + 1
        return super().rotate_many(x, ks)

    def encrypt(self, vector):
        out = super().encrypt(vector)
        out.level = self.input_level
        return out

    def _count(self, kind: str, level) -> None:
        self.products[kind] = self.products.get(kind, 0) + 1
        key = (self._node or "", kind, level)
        self.node_products[key] = self.node_products.get(key, 0) + 1

    def rescale(self, x):
        out = super().rescale(x)
        if getattr(out, "level", 0) < 0:
            raise LevelError(f"{self._node}: a rescale below level 0 (the bootstrap rule did not refresh in time)")
        if getattr(x, "level", None) is not None:
            self._count("rescale", x.level)
        return out

    def multiply(self, a, b):
        level_a, level_b = getattr(a, "level", None), getattr(b, "level", None)
        both = level_a is not None and level_b is not None
        level = min(level_a, level_b) if both else (level_a if level_b is None else level_b)
        self._count("ct_ct" if both else "ct_pt", level)
        if not both and (level_a is not None or level_b is not None):
            constant = np.asarray(b if level_b is None else a, dtype=np.float64).ravel()
            # a cheap fingerprint of the constant (a strided sample and two sums): the run encodes each distinct
            # constant once per level (its cache of encodings)
            key = (constant.size, float(constant.sum()), float(np.abs(constant).sum()),
                   constant[::97].tobytes(), level_a if level_b is None else level_b)
            if key not in self._encoded:
                if self.cache_size is not None and len(self._encoded) >= self.cache_size:
                    self._encoded.pop(next(iter(self._encoded)))      # as the run's cache drops its oldest
                self._encoded[key] = True
                if encoding_period(constant, self.slots) is None:      # else a short transform (not priced)
                    self._count("encode", level)
        return super().multiply(a, b)

    def multiply_accumulate(self, acc, a, b):
        """As ``CKKSBackend.multiply_accumulate``: two ciphertexts at the sum's level join it unrelinearized (counted
        as a tensor product, ``ct_tensor``; the sum's one relinearization at ``relinearize_sum``), else ``multiply``
        and ``add``."""
        level_a, level_b = getattr(a, "level", None), getattr(b, "level", None)
        if level_a is None or level_a != level_b or (acc is not None and (id(acc) not in self._lazy
                                                                         or getattr(acc, "level", None) != level_a)):
            return multiply_then_add(self, acc, a, b)
        self._count("ct_tensor", level_a)
        product = LevelRecorder.multiply(self, a, b)
        out = product if acc is None else self.add(acc, product)
        self._lazy.discard(id(acc))
        self._lazy.add(id(out))
        return out

    def relinearize_sum(self, acc):
        if acc is not None and id(acc) in self._lazy:
            self._lazy.discard(id(acc))
            self._count("relinearize", getattr(acc, "level", None))
        return acc

    def bootstrap(self, x):
        out = np.array(x).view(type(x))
        out.level = self.levels_left
        return out

    def _magnitude(self, ciphertexts) -> float:
        return float(max(np.max(np.abs(v)) for v in ciphertexts))

    def _coefficient(self, ciphertexts) -> float:
        from crypto.ckks.encoder import CKKSEncoder

        encoder = CKKSEncoder(2 * self.slots)
        return float(max(np.max(np.abs(encoder.embed_inverse(np.asarray(v)))) for v in ciphertexts))


def has_attention(graph) -> bool:
    """Whether ``graph`` holds a node only the attention path evaluates."""
    return any(node.kind in ATTENTION_KINDS for node in graph.nodes)


def read_graph(path, input_shape=None):
    """The ``hezk.model.Graph`` of the model file ``path`` when it holds attention, else None (also when it
    cannot be read as a description: the Sequential path then names the problem)."""
    import hezk.model

    try:
        graph = (hezk.model.read_onnx(path, input_shape) if hezk.model.is_onnx(path)
                 else hezk.model.read_npz(path, input_shape))
    except (hezk.model.ModelFileError, OSError):
        return None
    return graph if has_attention(graph) else None


def input_batch(graph, x) -> tuple[np.ndarray, str]:
    """(x batch first, the form it came in: :func:`hezk.model.input_form`) or ShapeError naming the shapes."""
    try:
        x = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError):
        raise ShapeError("the input is not a numeric array") from None
    form = hezk.model.input_form(x.shape, graph.input_shape)
    if form is None:
        raise ShapeError(f"input of shape {x.shape} is {hezk.model.input_forms_text(graph.input_shape)}")
    batch = hezk.model.as_batch(x, form)
    if not np.all(np.isfinite(batch)):
        raise ParameterError("the input holds NaN or infinite values")
    return batch, form


def _describe(node, approx) -> str:
    if node.kind == "softmax":
        r = approx.reciprocal
        return (f"softmax (THOR / NEXUS style): shift by the calibrated bound c = {approx.shift:.4g}, exp(x - c) = "
                f"p(t / 2^{approx.squarings})^(2^{approx.squarings}) with p of degree {approx.degree} on "
                f"[{approx.low:.4g}, 0], 1/sum by {r.steps} Newton (Goldschmidt) steps from the minimax line on "
                f"[{r.low:.4g}, {r.high:.4g}]")
    if node.kind == "layernorm":
        if getattr(approx, "degree", 0):
            return (f"layer norm: 1/sqrt(var + eps) by its degree-{approx.degree} Chebyshev interpolant on the "
                    f"calibrated variance range [{approx.low:.4g}, {approx.high:.4g}] (no more levels than "
                    f"{approx.steps} Newton steps)")
        return (f"layer norm: 1/sqrt(var + eps) by {approx.steps} Newton steps (Panda 2022) from the least-squares "
                f"line on the calibrated variance range [{approx.low:.4g}, {approx.high:.4g}]")
    if approx is None:
        return "square (exact)"
    low, high = approx.interval
    return f"{node.function}: degree-{approx.degree} minimax polynomial on [{low:.4g}, {high:.4g}]"


@dataclass(frozen=True)
class AttentionPlan:
    """What the attention path will do, before any key exists: the operators, each approximation with its
    largest error on the calibration data, the levels and rotations measured on recording runs, and the
    parameters (None with ``refusal`` saying why none were found). A plan that bootstraps names the
    ``bootstrap`` config and its ``bootstraps`` (``BootstrapSite``, recorded on one calibration sample by
    ``BootstrapRecorder``: where, how many ciphertexts), inputs encrypted at ``input_level`` (None: the top level);
    ``key_steps``: the rotation keys when one per step would exceed the key budget (the powers of two, every other
    step composed); ``operations``: the recorded operation counts the time estimate prices."""

    input_shape: tuple
    output_shape: tuple
    operators: tuple
    approximations: tuple          # (node name, description, max error on the calibration data)
    model_error: float             # max |approximated - exact| over the calibration outputs
    output_magnitude: float        # max |exact| over the calibration outputs
    depth: int
    rotations: tuple
    slots: int
    params: object
    refusal: str | None
    input_range: tuple
    calibration_samples: int
    bootstrap: BootstrapConfig | None = None
    bootstraps: tuple = ()
    input_level: int | None = None
    key_steps: tuple | None = None
    operations: tuple = ()         # (name, count): rotations, hoisted_rotations, ct_ct, ct_pt
    compaction: bool = True        # tensors compacted before bootstrapping where cheaper (tensor_ops.compaction)
    compaction_rotations: tuple = ()   # the compactions' rotation steps (their keys)
    early_refreshes: tuple = ()    # (plan ordinal, operand index): operands refreshed before they run out of levels
    #: (expression, strategy, cost-model estimate, rotations, depth, output ciphertexts) of each product of two
    #: encrypted tensors (``contraction_records``): the layouts the einsum planner's cost model chose for attention
    contractions: tuple = ()

    def __post_init__(self):
        """Checks a bootstrapping plan's fields: a BootstrapConfig with parameters that can run it (full slots), the
        sites ``BootstrapSite`` records at levels below the parameters', the input level within them."""
        if self.bootstrap is None:
            if self.bootstraps or self.input_level is not None:
                raise ParameterError(f"attention plan: bootstraps={self.bootstraps!r:.80} and input_level="
                                     f"{self.input_level!r} need a bootstrap config (bootstrap=None)")
            return
        if not isinstance(self.bootstrap, BootstrapConfig):
            raise ParameterError(f"attention plan: bootstrap={self.bootstrap!r:.80} must be a BootstrapConfig")
        if self.params is None:
            raise ParameterError("attention plan: a bootstrap config needs parameters (params=None)")
        if self.bootstrap.slots not in (None, self.params.slots):
            raise ParameterError(f"attention plan: bootstrap slots={self.bootstrap.slots} must be the parameters' "
                                 f"slots={self.params.slots} (the tensors' layouts may fill every slot)")
        top = self.params.max_level
        level = self.input_level
        if isinstance(level, bool) or not isinstance(level, (int, np.integer)) or not 0 <= level <= top:
            raise ParameterError(f"attention plan: input_level={level!r} must be an integer in [0, {top}]")
        if not isinstance(self.bootstraps, tuple) or not all(isinstance(b, BootstrapSite) for b in self.bootstraps):
            raise ParameterError(f"attention plan: bootstraps={self.bootstraps!r:.80} must be a tuple of "
                                 f"BootstrapSite")
        left = self.bootstrap_plan.levels_left  # LevelError where the parameters cannot bootstrap
        for site in self.bootstraps:
            if site.level_in >= left:
                raise ParameterError(f"attention plan: a bootstrap at {site.node} from level {site.level_in}, not "
                                     f"below the {left} levels a bootstrap leaves (no refresh would happen there)")

    @property
    def bootstrap_plan(self):
        """The ``crypto.ckks.bootstrap.BootstrapPlan`` of the plan's bootstraps (None without)."""
        return None if self.bootstrap is None else cached_bootstrap_plan(self.params, self.bootstrap)

    @property
    def bootstrap_count(self) -> int:
        """Ciphertexts bootstrapped in one evaluation of one sample."""
        return sum(site.ciphertexts for site in self.bootstraps)

    @property
    def key_rotations(self) -> tuple:
        """The Galois keys' rotation steps: the evaluation's (or ``key_steps``) and the bootstrap's."""
        steps = set(self.rotations) | set(self.compaction_rotations) if self.key_steps is None else set(self.key_steps)
        if self.bootstrap is not None:
            steps |= set(self.bootstrap_plan.rotation_steps)
        return tuple(sorted(steps))

    @property
    def galois_key_bytes(self) -> int:
        """Estimated Galois key bytes: per key, digits x 2 x (Q + P limbs) x N x 4 (as ``ModelPlan``); a bootstrapping
        plan's conjugation key counted."""
        if self.params is None:
            return 0
        return _key_bytes(self.params, len(self.key_rotations) + (self.bootstrap is not None))

    @property
    def bootstrap_seconds(self) -> float:
        """Estimated seconds of one bootstrap: its cost in rotations (``bootstrap_placement.bootstrap_cost`` with
        ``ESTIMATE_COSTS``) times a rotation at the top level (``ROTATION_SECONDS`` scaled by the size) times
        ``BOOTSTRAP_MEASURED_SHARE`` (what a measured N16_BOOT bootstrap takes of that price); 0 without bootstraps."""
        if self.bootstrap is None:
            return 0.0
        return (bootstrap_cost(self.bootstrap_plan, ESTIMATE_COSTS)
                * _rotation_seconds(self.params, self.params.max_level) * BOOTSTRAP_MEASURED_SHARE)

    @property
    def estimated_seconds(self) -> float:
        """Estimated server seconds of one evaluation with bootstraps: the bootstraps, plus the recorded rotations and
        products, rescales and encodings priced by the cost model's ratios (``tensor_ops.plan.cost.CostModel``), each
        at the level it runs at (its limbs against those of the levels a bootstrap leaves, the unit: the operations
        before the first bootstrap run on more limbs, those near level 0 on fewer), rotations as they run on the
        plan's keys (``rotation_units``: a step without its own key composed of power-of-two ones); 0 without
        bootstraps."""
        if self.bootstrap is None:
            return 0.0
        c, counts = ESTIMATE_COSTS, dict(self.operations)
        turns = counts.get("rotation_units")     # composed rotations priced as they run (``rotation_units``)
        if turns is None:
            turns = counts.get("rotations", 0) * c.rotation + counts.get("hoisted_rotations", 0) * c.hoisted_rotation
        if "product_units" in counts:        # priced by level (``rotation_units``)
            units = turns + counts["product_units"]
        else:
            price = _product_prices(c, {"rescale"} if "rescales" in counts else ())
            units = (turns + counts.get("ct_ct", 0) * price["ct_ct"] + counts.get("ct_pt", 0) * price["ct_pt"]
                     + counts.get("rescales", 0) * price["rescale"] + counts.get("encodes", 0) * price["encode"])
        return self.bootstrap_count * self.bootstrap_seconds + units * self.unit_seconds

    @property
    def unit_seconds(self) -> float:
        """Estimated seconds of one CostModel unit (a key-switched rotation) at the levels a bootstrap leaves."""
        return _rotation_seconds(self.params, min(self.bootstrap_plan.levels_left, self.params.max_level))

    def time_breakdown(self) -> tuple:
        """Where the estimated time goes: ((node, seconds of its rotations, products, rescales and encodings,
        ciphertexts bootstrapped before it, seconds of those bootstraps), ...), the largest total first (a
        bootstrapping plan; () otherwise). The rows sum to ``estimated_seconds`` (recorded counts; a plan made
        before the counts by node has its bootstraps alone)."""
        if self.bootstrap is None:
            return ()
        units = dict(dict(self.operations).get("node_units", ()))
        boots: dict = {}
        for site in self.bootstraps:
            boots[site.node] = boots.get(site.node, 0) + site.ciphertexts
        rows = [(node, units.get(node, 0.0) * self.unit_seconds, boots.get(node, 0),
                 boots.get(node, 0) * self.bootstrap_seconds) for node in dict.fromkeys([*units, *boots])]
        return tuple(sorted(rows, key=lambda r: -(r[1] + r[3])))

    def require_parameters(self):
        """The parameters, or ParameterError stating why none were found."""
        if self.params is None:
            raise ParameterError(self.refusal)
        return self.params

    def explain(self) -> str:
        lines = [f"attention model: input {self.input_shape} -> output {self.output_shape}, evaluated node by node "
                 f"on encrypted tensors (tensor_ops.attention)"]
        lines += [f"  {text}" for text in self.operators]
        lines.append(f"approximations, each with its largest error on the calibration data "
                     f"({self.calibration_samples} samples; activation ranges widened by {MARGIN:.0%} of their width, "
                     f"the others by {RANGE_MARGIN:.0%}):")
        lines += [f"  {name}: {text}: max error {error:.3g}" for name, text, error in self.approximations]
        share = self.model_error / self.output_magnitude if self.output_magnitude else 0.0
        lines.append(f"whole model on the calibration data: max error {self.model_error:.3g} ({share:.3%} of the "
                     f"largest output magnitude {self.output_magnitude:.4g})")
        lines.append(f"input range (calibrated): [{self.input_range[0]:.4g}, {self.input_range[1]:.4g}]; samples "
                     f"whose plain reference leaves any calibrated range are refused")
        for expression, strategy, estimate, rotations, depth, outputs in self.contractions:
            lines.append(f"  {expression}: {strategy}; est. {estimate:.0f} (cost model, 1 = a rotation), {rotations} "
                         f"rotations, depth {depth}, {outputs} output ciphertext(s)")
        lines.append(f"depth: {self.depth} levels (measured on a level-recording run; {ALIGNMENT_LEVELS} more asked "
                     f"of the parameters for scale alignments); {len(self.rotations)} "
                     f"rotation keys at {self.slots} slots")
        if self.bootstrap is not None:
            lines += self._explain_bootstraps()
        if self.params is None:
            lines.append(f"parameters: none: {self.refusal}")
        else:
            p = self.params
            keys = len(self.key_rotations)
            how = "" if self.key_steps is None else (", the powers of two (over the key budget with one key a step: "
                                                     "every other step composed)")
            conjugation = " + the conjugation key" if self.bootstrap is not None else ""
            lines.append(f"parameters: N=2^{p.log_n}, {p.max_level} levels, scale 2^{p.log_scale}, "
                         f"log2(QP)={p.log_qp:.1f}, security {p.security}; Galois keys ~"
                         f"{self.galois_key_bytes / 2**20:.1f} MiB ({keys} rotation keys{how}{conjugation})")
        return "\n".join(lines)

    def _explain_bootstraps(self) -> list:
        boot, sites = self.bootstrap_plan, self.bootstraps
        lines = [f"bootstraps: {self.bootstrap_count} ciphertext bootstraps at {len(sites)} sites (recorded on one "
                 f"calibration sample, inputs at level {self.input_level}; rule: before an operation consuming d "
                 f"levels, a tensor below level d is bootstrapped, all its ciphertexts together"
                 f"{', compacted into fewer first where cheaper' if self.compaction else ''}); each uses "
                 f"{boot.levels_used} levels and leaves {boot.levels_left}, keeps about {boot.precision_bits:.1f} "
                 f"bits worst case (|x| <= 1) and {boot.noise_bits:.1f} bits on random slots, needs "
                 f"{len(boot.rotation_steps)} rotation keys and the conjugation key"]
        by_node: dict = {}
        for site in sites:
            by_node.setdefault((site.node, site.after), []).append(site)
        for (node, after), group in by_node.items():
            where = "the input" if after is None else after
            magnitude = max(site.magnitude for site in group)
            packed = [s for s in group if s.spread]
            compacted = (f" ({sum(s.ciphertexts for s in packed)} of them compacted from "
                         f"{sum(s.spread for s in packed)})" if packed else "")
            lines.append(f"  in {node} (after {where}): {sum(s.ciphertexts for s in group)} ciphertexts{compacted} in "
                         f"{len(group)} refreshes, from levels {sorted({s.level_in for s in group})}, values up to "
                         f"{magnitude:.3g}")
        coefficient = _largest_coefficient(sites)
        if coefficient:
            lines.append(f"  the message coefficients bootstrapped reach {coefficient:.3g} Delta on the recorded "
                         f"sample (what EvalMod reads; the worst case stated is for 1 Delta)")
        if self.early_refreshes:
            lines.append(f"  {len(self.early_refreshes)} operands refreshed early, where a dirty tensor would "
                         f"otherwise reach level 0 spread over ciphertexts that a mask could not compact")
        largest = max((site.magnitude for site in sites), default=0.0)
        if largest > 1:
            lines.append(f"  slots bootstrapped reach {largest:.3g} on the recorded sample: the worst case stated is "
                         f"for slots |x| <= 1 (a coefficient as large as Delta); EvalMod's sine error grows with the "
                         f"coefficients' size, so larger slots may keep fewer bits")
        lines.append(f"estimated time: {self.estimated_seconds:.0f} s of server compute, of which bootstraps "
                     f"{self.bootstrap_count} x ~{self.bootstrap_seconds:.1f} s (priced from their operation counts; "
                     f"built-in per-operation times of the development machine, one thread)")
        return lines


def _operators(graph) -> tuple:
    kinds = [node.kind for node in graph.nodes]
    bilinear = [node.equation for node in graph.nodes if node.kind == "bilinear"]
    texts = []
    if bilinear:
        texts.append(f"{len(bilinear)} products of two encrypted tensors through the einsum planner's encrypted x "
                     f"encrypted plans: {', '.join(repr(e) for e in bilinear)}")
    for kind, what in (("contraction", "plaintext-weight contractions (einsum plans)"), ("softmax", "softmax"),
                       ("layernorm", "layer norms"), ("activation", "activations"), ("add", "residual adds"),
                       ("affine", "constant scales / shifts")):
        if kinds.count(kind):
            texts.append(f"{kinds.count(kind)} {what}")
    free = kinds.count("reshape") + kinds.count("transpose")
    if free:
        texts.append(f"{free} reshapes / transposes (layout changes, no arithmetic)")
    return tuple(texts)


def _record(model: GraphApproximation, x: np.ndarray, slots: int, products: dict | None = None) -> tuple[int, tuple]:
    """(levels consumed, rotation steps) of the evaluation of one sample at ``slots`` slots; ``products`` (a dict)
    receives ``{slots: contraction_records(...)}``: how the einsum planner laid out each product of two encrypted
    tensors."""
    from .nn import LevelRecorder, RotationRecorder
    from .tensor import encrypt

    levels = LevelRecorder(slots)
    model.forward(encrypt(levels, x))
    rotations = RotationRecorder(slots)
    model.forward(encrypt(rotations, x))
    if products is not None:
        products[slots] = contraction_records(rotations.plans.values())
    return levels.consumed, tuple(sorted(s for s in rotations.steps if s % slots))


def contraction_records(plans) -> tuple:
    """(expression, strategy chosen, cost-model estimate, rotations, depth, output ciphertexts) of each einsum plan
    in ``plans`` that contracts two encrypted tensors (attention's scores and weighted sum): the layout the planner's
    cost model chose for them (``tensor_ops.plan``: e.g. the skewed diagonal products of ``plan.skewed``)."""
    out = []
    for p in plans:
        inputs = p.spec.inputs
        if sum(p.encrypted) != 2 or len(inputs) != 2 or all(c in p.spec.output for c in "".join(inputs)):
            continue
        note = next((n for n in p.notes if "]x[" in n), "")
        strategy = note.split(": ", 1)[-1].removeprefix("chose ").split(" (est.")[0]
        cost = p.cost()
        out.append((p.spec.expression(), strategy, cost["estimate"], cost["rotations"], p.depth(),
                     cost["output_ciphertexts"]))
    return tuple(out)


def _record_bootstraps(model: GraphApproximation, x: np.ndarray, params, config, input_level: int,
                       compaction: bool = True, forced=(), tracking: bool = False):
    """(sites, operation counts, the compactions' rotation steps, blocked compactions, the producers of the tensors
    refreshed as several ciphertexts) of the bootstrapping
    evaluation of ``x`` at ``params`` (``BootstrapRecorder``, compacting and refreshing early at ``forced`` as
    ``BootstrappingBackend(compaction=..., forced=...)`` does); LevelError when one operation needs more levels
    than a bootstrap leaves."""
    from .tensor import encrypt

    boot = cached_bootstrap_plan(params, config)
    recorder = BootstrapRecorder(params.slots, input_level, boot.levels_left,
                                 bootstrap_cost(boot) if compaction else None, forced, tracking,
                                 plaintext_cache_entries(params, boot.levels_left))
    model.forward(encrypt(recorder, x))
    counts = (("rotations", recorder.counts["rotations"]), ("hoisted_rotations", recorder.counts["hoisted_rotations"]),
              ("ct_ct", recorder.products["ct_ct"] + recorder.products.get("ct_tensor", 0)),
              ("ct_pt", recorder.products["ct_pt"]),
              ("rescales", recorder.products["rescale"]), ("encodes", recorder.products["encode"]),
              ("amounts", tuple(sorted(((node, k, h, -1 if level is None else int(level), n)
                                        for (node, k, h, level), n in recorder.amounts.items())))),
              ("node_products", tuple(sorted((node, kind, -1 if level is None else int(level), n)
                                             for (node, kind, level), n in recorder.node_products.items()))))
    return (tuple(recorder.sites), counts, tuple(sorted(recorder.compaction_steps)), tuple(recorder.blocked),
            tuple(recorder.wide))


#: the bootstrap a plan takes when none is named: without the arcsin correction (2 levels more for the layer: 8
#: left on N16_BOOT instead of 6). EvalMod's sine error grows as the cube of the message coefficients; the layer's
#: are recorded at each site (``BootstrapSite.coefficient``: about 0.5 Delta at most on the BERT-tiny layer, the
#: refreshes placed where the values are small) and the bootstrap keeps 14.3 bits even at 1 Delta (stated worst
#: case; 20.5 on random slots), far inside the 2% error budget of the layer's output
ATTENTION_BOOTSTRAP = BootstrapConfig(arcsin=False)


def attention_config(bootstrap) -> BootstrapConfig:
    """The BootstrapConfig of a plan's ``bootstrap`` argument: ``ATTENTION_BOOTSTRAP`` for None or True, else
    ``as_config``'s (an int: the slot count; a BootstrapConfig as it is)."""
    return ATTENTION_BOOTSTRAP if bootstrap is None or bootstrap is True else as_config(bootstrap)


#: bytes the encrypted run keeps of encoded constants (``CKKSBackend``'s cache of encodings): at N16_BOOT one
#: plaintext at 10 levels is 23 limbs x 2^16 x 8 bytes = 12 MB, and the cache's default 2,048 entries would hold
#: 25 GB on the BERT-tiny layer (3,800 distinct constants); the cache keeps what fits this budget
PLAINTEXT_CACHE_BYTES = 1 << 30


def plaintext_cache_entries(params, levels_left: int) -> int:
    """Entries of the cache of encodings within ``PLAINTEXT_CACHE_BYTES``, priced at two levels above
    ``levels_left`` (where most constants are encoded; at least 16)."""
    level = min(int(levels_left) + 2, params.max_level)
    return max(16, PLAINTEXT_CACHE_BYTES // (params.limbs_at(level) * params.n * 8))


#: rounds of early refreshes tried (``find_early_refreshes``): for blocked compactions and large coefficients, then
#: for tensors refreshed as several ciphertexts
EARLY_ROUNDS = 4
WIDE_ROUNDS = 3


def find_early_refreshes(model, sample, params, config, level, compaction):
    """(forced, sites, operation counts, compaction steps) with the smallest message coefficients, then the fewest
    ciphertext bootstraps, found: a refresh whose compaction lacked the level for its mask (a dirty tensor at level
    0: every ciphertext bootstrapped), or whose message coefficients exceed Delta (``BootstrapSite.coefficient``: a
    tensor of large values, where EvalMod loses precision), is moved to the plan that made the tensor, refreshing
    that plan's lowest operand early (``forced``: (plan ordinal, operand index)); at most ``EARLY_ROUNDS`` rounds,
    each recorded again, a round kept where (max(Delta, its largest coefficient), its bootstraps) is smaller than the
    best so far; then, at most ``WIDE_ROUNDS`` times, a tensor refreshed as several ciphertexts is refreshed early in
    the same way, on the plan that made it, kept by the same rule. Without compaction, no early refresh."""

    def recorded(forced):
        """(rank, (count, forced, sites, operations, moves), blocked, wide) of a recording with ``forced``."""
        sites, operations, moves, blocked, wide = _record_bootstraps(model, sample, params, config, level,
                                                                     compaction, forced, tracking=compaction)
        count = sum(s.ciphertexts for s in sites)
        return (max(1.0, _largest_coefficient(sites)), count), (count, forced, sites, operations, moves), blocked, wide

    rank, best, blocked, best_wide = recorded(())
    forced = ()
    for _ in range(EARLY_ROUNDS if compaction else 0):
        wanted = set(forced)
        for where, producer in blocked:
            if producer is not None:
                wanted.discard(where)      # an early refresh that was itself blocked moves further back
                wanted.add(producer)
        if wanted == set(forced):
            break
        forced = tuple(sorted(wanted))
        try:
            found, kept, blocked, wide = recorded(forced)
        except LevelError:
            break
        if found < rank:
            rank, best, best_wide = found, kept, wide
    # a wide tensor's refresh moved to the plan that made it, and on to the plan that made that one's input while the
    # refresh stays as wide (a bias added after the product): kept where it bootstraps fewer ciphertexts (the
    # BERT-tiny layer's MLP: its 128-wide input, one ciphertext, instead of GELU's 512-wide input, two)
    tried, queue, tries = set(best[1]), [producer for producer in best_wide if producer is not None], 0
    while queue and compaction and tries < WIDE_ROUNDS:
        producer = queue.pop(0)
        if producer in tried:
            continue
        tried.add(producer)
        tries += 1
        try:
            found, kept, _, wide = recorded(tuple(sorted(set(best[1]) | {producer})))
        except LevelError:
            continue
        if found < rank:
            rank, best = found, kept
        queue += [made for made in wide if made is not None and made not in tried]
    return best[1:]


def rotation_units(operations, key_steps, slots: int, weight=None, rotation_weight=None) -> tuple:
    """``operations`` with the recorded rotation amounts replaced by ``("rotation_units", u)`` (and the recorded
    products by node dropped) plus ``("product_units", u)`` (the products, rescales and encodings) and
    ``("node_units", ((node, units), ...))``: each node's rotations and products in CostModel units, largest first
    (where the time goes). The rotations are priced as they will run, in CostModel units (a key-switched rotation
    = 1, a hoisted one ``hoisted_rotation``). With one key per step (``key_steps`` None) every recorded rotation is
    keyed; with a power-of-two key set a step without its key is composed of ``backends.rotation_route``'s keyed
    steps, each a full rotation, and a hoisted one composed loses its hoisting (``CKKSBackend.rotate_many``): what
    the plain counts left out. ``weight(level)``: the cost of an operation at the level it was recorded at relative
    to the reference level (its limbs; entries recorded without a level, or -1, weigh 1); ``rotation_weight(level)``:
    a rotation's (default ``weight``; ``switching_work``'s digits make it fall faster than the limbs)."""
    from .backends import rotation_route

    c, units, products, out, by_node = ESTIMATE_COSTS, 0.0, 0.0, [], {}
    keys = None if key_steps is None else {int(k) % slots for k in key_steps}
    scaled = (lambda level: 1.0) if weight is None else (lambda level: 1.0 if level < 0 else weight(level))
    turned = scaled if rotation_weight is None else (lambda level: 1.0 if level < 0 else rotation_weight(level))
    for name, value in operations:
        if name == "node_products":
            price = _product_prices(c, {entry[1] for entry in value})
            for entry in value:
                node, kind, level, count = entry if len(entry) == 4 else (entry[0], entry[1], -1, entry[2])
                cost = count * price[kind] * scaled(level)
                products += cost
                by_node[node] = by_node.get(node, 0.0) + cost
            continue
        if name != "amounts":
            out.append((name, value))
            continue
        for entry in value:
            if len(entry) == 5:
                node, step, hoisted, level, count = entry
            else:
                node, (step, hoisted, count), level = (entry[0], entry[1:], -1) if len(entry) == 4 else \
                    ("", entry, -1)
            if keys is None or step in keys or step == 0:
                turn = count * (c.hoisted_rotation if hoisted else c.rotation)
            else:
                turn = count * len(rotation_route(step, keys, slots) or (step,)) * c.rotation
            turn *= turned(level)
            units += turn
            by_node[node] = by_node.get(node, 0.0) + turn
    nodes = tuple(sorted(((node, round(u, 1)) for node, u in by_node.items()), key=lambda e: -e[1]))
    return tuple(out) + (("rotation_units", round(units, 2)), ("product_units", round(products, 2)),
                         ("node_units", nodes))


def _product_prices(c, kinds) -> dict:
    """CostModel units of each recorded kind: a product, a rescale, an encoding (``c.encode``), a lazy sum's tensor
    product and relinearization. Counts recorded
    before rescales were (no "rescale" kind among ``kinds``) price a rescale with every product, as they did."""
    rescale = 0.0 if "rescale" in kinds else c.rescale
    # a tensor product joining a lazy sum (``multiply_accumulate``): four ring products, as two plaintext products;
    # the sum's relinearization: a product's key switch
    return {"ct_ct": c.ct_mult + rescale, "ct_pt": c.pt_mult + rescale, "rescale": c.rescale, "encode": c.encode,
            "ct_tensor": 2 * c.pt_mult, "relinearize": c.ct_mult}


def _largest_coefficient(sites) -> float:
    return max((s.coefficient for s in sites if s.coefficient == s.coefficient), default=0.0)


def _site_key(site: BootstrapSite) -> tuple:
    """What a site states independently of the sample's values."""
    return site.node, site.after, site.ciphertexts, site.level_in, site.spread


def _power_of_two_steps(slots: int) -> tuple:
    return tuple(1 << i for i in range(slots.bit_length() - 1))


def _signed_power_of_two_steps(slots: int) -> tuple:
    """The powers of two and their negatives: every step composed along its non-adjacent form
    (``backends.rotation_route``), at most about half the keyed rotations of the positive set; a rotate-and-sum's
    broadcast back (steps -1, -2, ..., -64) one rotation each instead of up to 15."""
    powers = _power_of_two_steps(slots)
    return tuple(sorted(set(powers) | {slots - p for p in powers}))


def _cheapest_bootstrapping(model, sample, params, config, input_level, rotations, key_budget,
                            compaction=True) -> dict:
    """``_bootstrapping``'s fields, the inputs encrypted at ``input_level``, or where it is None at the level
    estimated fastest of the top, the levels a bootstrap leaves, and 2 above those: the layer's first
    operations (attention's projections and products) then run on fewer limbs than the top's (on N16_BOOT 19 + 9
    at 8 levels instead of 49 + 9), for the bootstrap or two that the fewer levels add (BERT-tiny: 10 levels)."""
    top = _bootstrapping(model, sample, params, config, input_level, rotations, key_budget, compaction)
    if input_level is not None:
        return top
    left = cached_bootstrap_plan(params, attention_config(config)).levels_left
    options = [top]
    for level in range(left, min(left + 3, params.max_level), 2):
        try:
            options.append(_bootstrapping(model, sample, params, config, level, rotations, key_budget, compaction))
        except ParameterError:
            continue
    return min(options, key=lambda boot: _estimated_seconds(params, boot))


def _estimated_seconds(params, boot: dict) -> float:
    """``AttentionPlan.estimated_seconds`` of a plan with the bootstrapping fields ``boot`` at ``params``."""
    bootstrap = cached_bootstrap_plan(params, boot["bootstrap"])
    counts = dict(boot["operations"])
    units = counts.get("rotation_units", 0.0) + counts.get("product_units", 0.0)
    count = sum(site.ciphertexts for site in boot["bootstraps"])
    return (count * bootstrap_cost(bootstrap, ESTIMATE_COSTS) * _rotation_seconds(params, params.max_level)
            * BOOTSTRAP_MEASURED_SHARE
            + units * _rotation_seconds(params, min(bootstrap.levels_left, params.max_level)))


def _bootstrapping(model, sample, params, config, input_level, rotations, key_budget, compaction=True) -> dict:
    """The bootstrapping fields of a plan at ``params`` (ParameterError naming why there are none): the config
    (full slots), the sites recorded on ``sample`` with inputs at ``input_level`` (None: the top level), the key
    steps when one key a step exceeds ``key_budget``, the operation counts."""
    config = attention_config(config)
    if config.slots not in (None, params.slots):
        raise ParameterError(f"bootstrap slots={config.slots} must be the parameters' slots={params.slots} (the "
                             f"attention path's layouts may fill every slot)")
    try:
        boot = cached_bootstrap_plan(params, config)
    except LevelError as why:
        raise ParameterError(f"the parameters (N=2^{params.log_n}, {params.max_level} levels) cannot bootstrap: "
                             f"{why}") from None
    if boot.precision_bits < LOW_BOOTSTRAP_BITS:
        raise ParameterError(f"a bootstrap at these parameters keeps {boot.precision_bits:.1f} bits (stated, worst "
                             f"slot), below {LOW_BOOTSTRAP_BITS:g} (q_0 / Delta = "
                             f"2^{math.log2(params.q_moduli[0]) - params.log_scale:.1f}): bootstrap on a ring made for it, as the preset {BOOTSTRAP_PRESET!r}")
    check_scale_drift(params)
    level = params.max_level if input_level is None else input_level
    if isinstance(level, bool) or not isinstance(level, (int, np.integer)) or not 0 <= level <= params.max_level:
        raise ParameterError(f"input_level={level!r} must be an integer in [0, {params.max_level}]")
    try:
        forced, sites, operations, moves = find_early_refreshes(model, sample, params, config, int(level), compaction)
    except LevelError as why:
        raise ParameterError(f"no bootstrap placement: {why}") from None
    rotations = tuple(sorted(set(rotations) | set(moves)))
    boot_steps = set(boot.rotation_steps)
    key_steps = None
    if _key_bytes(params, len(set(rotations) | boot_steps) + 1) > key_budget:
        # the signed powers of two where they fit the budget (on N16_BOOT 7 keys beyond the bootstrap's, which
        # hold the positive powers: the BERT-tiny layer's composed rotations fall from 5,464 units to 3,039)
        key_steps = _signed_power_of_two_steps(params.slots)
        if _key_bytes(params, len(set(key_steps) | boot_steps) + 1) > key_budget:
            key_steps = _power_of_two_steps(params.slots)
        keys = len(set(key_steps) | boot_steps) + 1
        if _key_bytes(params, keys) > key_budget:
            raise ParameterError(f"the bootstrapping ring N=2^{params.log_n} needs {_key_bytes(params, keys) / 2**20:.0f} "
                                 f"MiB of Galois keys even with power-of-two keys ({keys} keys, the bootstrap's "
                                 f"included), over the key budget of {key_budget / 2**20:.0f} MiB")
    left = min(boot.levels_left, params.max_level)    # the estimate's unit: a rotation at the levels a bootstrap leaves
    size = lambda level: params.limbs_at(min(level, params.max_level)) + len(params.p_moduli)  # noqa: E731
    work, top = (lambda level: switching_work(params, level)), params.max_level  # noqa: E731
    unit = work(left) / work(top)            # a rotation at ``left`` over one at the top
    operations = rotation_units(operations, key_steps, params.slots, lambda level: size(level) / size(top) / unit,
                                lambda level: work(level) / work(left))
    return dict(bootstrap=config, bootstraps=sites, input_level=int(level), key_steps=key_steps,
                operations=operations, compaction=bool(compaction), compaction_rotations=moves,
                early_refreshes=forced)


def plan_attention(graph, calibration, *, params=None, bootstrap=None, allow_insecure: bool = False,
                   key_budget: int = DEFAULT_KEY_BUDGET, activation_degree: int = 7, tolerance: float = NEWTON_TOLERANCE,
                   input_level: int | None = None, compaction: bool = True
                   ) -> tuple[AttentionPlan, GraphApproximation]:
    """(plan, calibrated model) of ``graph`` on the float batch ``calibration``.

    ``params``: CKKSParameters (below 128 bits only with ``allow_insecure``), or None for the smallest 128-bit
    ring with the measured depth whose keys fit ``key_budget``. ``bootstrap`` (as ``Sequential.plan``): None
    bootstraps only a model deeper than the parameters named (or than a 128-bit ring holds within the key budget:
    then on the bootstrappable preset ``model_plan.BOOTSTRAP_PRESET``, N16_BOOT); True or a ``BootstrapConfig``
    bootstraps in any case (on N16_BOOT without ``params``); False never (a model deeper than the levels is refused
    naming its depth: ParameterError for named parameters, else the plan's ``refusal``). Bootstraps are placed by
    recording (``BootstrapRecorder``, the rule of ``BootstrappingBackend``), the sites stated in the plan.
    ``input_level``: the level inputs are encrypted at in a bootstrapping plan (default: the top level or the levels
    a bootstrap leaves, whichever is estimated faster, ``_cheapest_bootstrapping``; tests force a small level budget
    with it, and bootstrapping with it). ``compaction``: a tensor spread over several ciphertexts
    is compacted into fewer before a bootstrap where that costs less (``tensor_ops.compaction``; False bootstraps
    each ciphertext, for comparison)."""
    if calibration is None:
        raise ParameterError("a model with attention needs calibration inputs (--calibration x.npy): Softmax, "
                             "LayerNorm and the activations are approximated on the ranges they take there")
    if bootstrap is not None and bootstrap is not False:
        bootstrap = attention_config(bootstrap)
    batch, _ = input_batch(graph, calibration)
    model = approximate(graph, batch, activation_degree=activation_degree, tolerance=tolerance)
    exact = graph.forward(batch)
    error = float(np.max(np.abs(model.forward(batch) - exact)))
    by_name = {node.name: node for node in graph.nodes}
    approximations = tuple((name, _describe(by_name[name], model.approximations[name]), model.errors[name])
                           for name in model.errors)
    low, high = float(batch.min()), float(batch.max())
    pad = RANGE_MARGIN * max(high - low, 1e-6)
    sample = batch[:1]
    refusal, boot, products = None, {}, {}
    wants = bootstrap is not None and bootstrap is not False
    if input_level is not None and bootstrap is False:
        raise ParameterError("input_level sets the level of a bootstrapping plan's inputs; bootstrap=False forbids "
                             "bootstraps")
    forbidden = ("--no-bootstrap (bootstrap=False) forbids the bootstraps that would run it: drop it (bootstraps are "
                 f"then placed, on {BOOTSTRAP_PRESET} without --params) or name parameters with at least {{}} levels "
                 f"(--params; below 128 bits only with --insecure, for tests)").format
    if params is not None:
        if not allow_insecure:
            require_secure(params, "the parameters named", "--insecure (allow_insecure=True)")
        depth, rotations = _record(model, sample, params.slots, products)
        slots = params.slots
        if depth + ALIGNMENT_LEVELS > params.max_level and bootstrap is False:
            raise ParameterError(f"the model consumes {depth} levels (+{ALIGNMENT_LEVELS} for scale alignments) but "
                                 f"the parameters named hold {params.max_level}: "
                                 f"{forbidden(depth + ALIGNMENT_LEVELS)}")
        if wants or input_level is not None or depth + ALIGNMENT_LEVELS > params.max_level:
            try:
                boot = _cheapest_bootstrapping(model, sample, params, bootstrap, input_level, rotations,
                                               key_budget, compaction)
            except ParameterError as why:
                raise ParameterError(f"the model consumes {depth} levels (+{ALIGNMENT_LEVELS} for scale "
                                     f"alignments) but the parameters named hold {params.max_level}: name parameters "
                                     f"with at least {depth + ALIGNMENT_LEVELS} levels, or parameters that bootstrap "
                                     f"it (bootstrapping with these fails: {why})") from None
    else:
        depth, rotations = _record(model, sample, _DEFAULT_SLOTS, products)
        slots = _DEFAULT_SLOTS
        if not wants and input_level is None:
            params, rotations, slots, depth, refusal = _without_bootstraps(model, sample, depth, rotations, key_budget,
                                                                           products)
        if params is None and bootstrap is not False:   # deeper than a 128-bit ring holds within the budget
            chosen = auto_parameters(depth, True)
            if chosen.slots != slots:
                depth, rotations = _record(model, sample, chosen.slots, products)
            try:
                boot = _cheapest_bootstrapping(model, sample, chosen, bootstrap, input_level, rotations,
                                               key_budget, compaction)
                params, slots, refusal = chosen, chosen.slots, None
            except ParameterError as why:
                refusal = f"the model consumes {depth} levels; bootstrapping on {BOOTSTRAP_PRESET} fails: {why}"
        elif params is None:
            refusal = f"{refusal}; {forbidden(depth + ALIGNMENT_LEVELS)}"
    plan = AttentionPlan(tuple(graph.input_shape), tuple(graph.output_shape), _operators(graph), approximations,
                         error, float(np.max(np.abs(exact))), int(depth), tuple(rotations), slots, params, refusal,
                         (low - pad, high + pad), len(batch), **boot, contractions=products.get(slots, ()))
    return plan, model


def _without_bootstraps(model, sample, depth, rotations, key_budget, products=None):
    """(params, rotations, slots, depth, refusal) of the smallest 128-bit ring holding the model's depth within the
    key budget (params None and the refusal saying why when there is none)."""
    try:
        chosen = choose_parameters(depth + ALIGNMENT_LEVELS, 1)
    except ParameterError as why:
        return None, rotations, _DEFAULT_SLOTS, depth, (f"the model consumes {depth} levels, more than a 128-bit ring "
                                                        f"holds ({why})")
    depth, at_slots = _record(model, sample, chosen.slots, products)
    if depth + ALIGNMENT_LEVELS > chosen.max_level:  # another slot count, another layout: its own depth
        chosen = choose_parameters(depth + ALIGNMENT_LEVELS, 1)
        depth, at_slots = _record(model, sample, chosen.slots, products)
    keys = _key_bytes(chosen, len(at_slots))
    if keys <= key_budget:
        return chosen, at_slots, chosen.slots, depth, None
    return None, rotations, _DEFAULT_SLOTS, depth, (
        f"the model consumes {depth} levels; the smallest 128-bit ring with them (N=2^{chosen.log_n}, "
        f"{len(chosen.digits)} key-switching digits) needs {keys / 2**20:.0f} MiB of Galois keys for {len(at_slots)} "
        f"rotations, over the key budget of {key_budget / 2**20:.0f} MiB (the deepest 128-bit preset without "
        f"bootstrapping holds {deepest_secure_preset()[1]} levels)")


def _key_bytes(params, rotations: int) -> int:
    """Estimated Galois key bytes: per key, digits x 2 x (Q + P limbs) x N x 4 (as ``ModelPlan``)."""
    return rotations * len(params.digits) * 2 * (len(params.q_moduli) + len(params.p_moduli)) * params.n * 4


def _rotation_seconds(params, level: int) -> float:
    """Estimated seconds of one key-switched rotation at ``level`` of ``params``: ``ROTATION_SECONDS`` scaled by
    N x (limbs + P) to the top level, then by ``switching_work`` to ``level``."""
    top = params.max_level
    return (ROTATION_SECONDS * params.n * (params.limbs_at(top) + len(params.p_moduli)) / REFERENCE_SIZE
            * switching_work(params, level) / switching_work(params, top))


def switching_work(params, level: int) -> int:
    """The NTT rows one hybrid key switch (a rotation) transforms at ``level``: ModUp of each digit that holds one of
    the level's Q limbs to the limbs and P (digits x (limbs + P)), then ModDown (limbs + P). A rotation near level
    0 touches one digit of six on N16_BOOT: its cost falls faster than its limbs (at 8 levels 0.28 of the top's,
    not 0.48; the BERT-tiny layer's products measured about half of the limb-scaled estimate)."""
    level = min(int(level), params.max_level)
    limbs = params.limbs_at(level)
    digits = sum(1 for digit in params.digits if min(digit) < limbs)
    return (digits + 1) * (limbs + len(params.p_moduli))


def samples_outside(plan: AttentionPlan, model: GraphApproximation, x) -> dict:
    """{sample index: the first calibrated range its plain reference leaves (text)}: the input range, a Softmax's
    shift (x <= c), exponent range or row-sum range, a LayerNorm's variance range, an activation's interval."""
    graph = model.graph
    batch, _ = input_batch(graph, x)
    found = {}

    def note(mask, text):
        for i in np.flatnonzero(mask):
            found.setdefault(int(i), text)

    def per_sample(a, reduce):
        return reduce(a.reshape(len(a), -1), axis=1)

    low, high = plan.input_range
    note((per_sample(batch, np.min) < low) | (per_sample(batch, np.max) > high),
         f"the input leaves its calibrated range [{low:.4g}, {high:.4g}]")
    values = {graph.input: batch}
    # a sample far outside overflows its plain reference: it is refused by the ranges below, not warned about
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        for node in graph.nodes:
            inputs = [values[name] for name in node.inputs]
            approx = model.approximations.get(node.name)
            t = inputs[0] if inputs else None
            if node.kind == "softmax":
                exponents = t - approx.shift
                sums = (np.exp(exponents) * (1.0 if node.mask is None else node.mask)).sum(axis=-1)
                r = approx.reciprocal
                note((per_sample(exponents, np.max) > 0) | (per_sample(exponents, np.min) < approx.low),
                     f"{node.where()}: its input leaves [{approx.shift + approx.low:.4g}, {approx.shift:.4g}] (the "
                     f"calibrated shift and exponent range)")
                note((per_sample(sums, np.min) < r.low) | (per_sample(sums, np.max) > r.high),
                     f"{node.where()}: its row sums leave the reciprocal's range [{r.low:.4g}, {r.high:.4g}]")
            elif node.kind == "layernorm":
                variance = t.var(axis=node.axes(t.ndim)) + node.epsilon
                note((per_sample(variance, np.min) < approx.low) | (per_sample(variance, np.max) > approx.high),
                     f"{node.where()}: its variance leaves [{approx.low:.4g}, {approx.high:.4g}]")
            elif node.kind == "activation" and approx is not None:
                a, b = approx.interval
                note((per_sample(t, np.min) < a) | (per_sample(t, np.max) > b),
                     f"{node.where()}: its input leaves the fitted interval [{a:.4g}, {b:.4g}]")
            values[node.output] = node.forward(*inputs)
    return found


def run_attention(plan: AttentionPlan, model: GraphApproximation, x, *, seed=None, progress=None,
                  report=None, timings: dict | None = None) -> np.ndarray:
    """Keys, encryption, encrypted evaluation and decryption of ``x`` (one sample or a batch) in this process;
    InputRangeError naming the samples whose plain reference leaves a calibrated range (nothing is computed
    then). ``report``: a callable given one line per step (keys, encryption, evaluation). A bootstrapping plan
    runs on ``BootstrappingBackend`` (keys with the bootstrap's); its bootstrap sites are recorded again for
    ``x`` first, and a plan whose stated sites differ from the model's at its parameters is refused (ParameterError)
    before any key is made. ``timings`` (a dict; bootstrapping plans): receives the measured wall seconds of the
    bootstraps (``bootstrap``) and of each node, its bootstraps included (``nodes``)."""
    import time

    from crypto.context import CKKSContext

    from .tensor import encrypt

    batch, form = input_batch(model.graph, x)
    outside = samples_outside(plan, model, batch)
    if outside:
        first = min(outside)
        raise InputRangeError(f"refused: samples {sorted(outside)} leave the model's calibrated ranges (sample "
                              f"{first}: {outside[first]}); the approximations are only right inside them, so "
                              f"nothing was computed (recalibrate on inputs like these)", sorted(outside))
    params = plan.require_parameters()
    say = report or (lambda text: None)
    if plan.bootstrap is not None:
        return _run_bootstrapping(plan, model, batch, form, seed, progress, say, timings)
    depth, steps = _record(model, batch, params.slots) if len(batch) > 1 else (plan.depth, plan.rotations)
    if depth + ALIGNMENT_LEVELS > params.max_level:  # a batch packs otherwise than the one sample planned
        raise ParameterError(f"a batch of {len(batch)} samples consumes {depth} levels (+{ALIGNMENT_LEVELS}), more "
                             f"than the plan's {params.max_level}: send fewer samples at once")
    rotations = tuple(sorted(set(plan.rotations) | set(steps)))
    start = time.perf_counter()
    ctx = CKKSContext.keygen(params, rotations=rotations, seed=seed, progress=progress)
    say(f"client: keys for N=2^{params.log_n} ({len(rotations)} rotation keys) in "
        f"{time.perf_counter() - start:.1f} s")
    start = time.perf_counter()
    tensor = encrypt(ScaleKeepingBackend(ctx), batch)
    say(f"client: encrypted {len(batch)} sample(s) into {len(tensor.ciphertexts)} ciphertext(s)")
    y = model.forward(tensor)
    say(f"server: evaluated the model encrypted in {time.perf_counter() - start:.1f} s")
    out = y.decrypt().reshape(len(batch), *plan.output_shape)
    return hezk.model.in_form(out, form)


def _run_bootstrapping(plan, model, batch, form, seed, progress, say, timings=None):
    import time

    from crypto.context import CKKSContext

    params = plan.params
    sites, _, moves, _, _ = _record_bootstraps(model, batch, params, plan.bootstrap, plan.input_level, plan.compaction,
                                            plan.early_refreshes)
    if len(batch) == 1 and [_site_key(s) for s in sites] != [_site_key(s) for s in plan.bootstraps]:
        raise ParameterError(f"the plan states {plan.bootstrap_count} ciphertext bootstraps at {len(plan.bootstraps)} "
                             f"sites; this model at the plan's parameters takes {sum(s.ciphertexts for s in sites)} at "
                             f"{len(sites)}: the plan was altered or made for another model (plan it again)")
    steps = () if len(batch) == 1 else _record(model, batch, params.slots)[1]
    rotations = plan.key_rotations if plan.key_steps is not None else \
        tuple(sorted(set(plan.key_rotations) | set(steps) | set(moves)))   # a batch's compactions: their own steps
    start = time.perf_counter()
    ctx = CKKSContext.keygen(params, rotations=rotations, seed=seed, progress=progress, bootstrap=plan.bootstrap)
    say(f"client: keys for N=2^{params.log_n} ({len(rotations)} rotation keys, the bootstrap's included, and the "
        f"conjugation key) in {time.perf_counter() - start:.1f} s")
    start = time.perf_counter()
    backend = BootstrappingBackend(ctx, plan.bootstrap, compaction=plan.compaction, forced=plan.early_refreshes)
    tensor = backend.encrypt_tensor(batch, plan.input_level)
    say(f"client: encrypted {len(batch)} sample(s) into {len(tensor.ciphertexts)} ciphertext(s) at level "
        f"{plan.input_level}")
    y = model.forward(tensor)
    backend.at_node("")                       # books the last node's time
    say(f"server: evaluated the model encrypted in {time.perf_counter() - start:.1f} s with {backend.bootstraps} "
        f"ciphertext bootstraps at {len(backend.sites)} sites (recorded: {sum(s.ciphertexts for s in sites)}) taking "
        f"{backend.bootstrap_wall:.1f} s (estimated {plan.bootstrap_count * plan.bootstrap_seconds:.1f} s); the "
        f"rest {time.perf_counter() - start - backend.bootstrap_wall:.1f} s (estimated "
        f"{plan.estimated_seconds - plan.bootstrap_count * plan.bootstrap_seconds:.1f} s)")
    if timings is not None:
        timings.update(bootstrap=backend.bootstrap_wall, nodes=dict(backend.node_wall))
    out = y.decrypt().reshape(len(batch), *plan.output_shape)
    return hezk.model.in_form(out, form)
