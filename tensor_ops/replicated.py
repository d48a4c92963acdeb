"""One sample per ciphertext, replicated: a dense network (affine layers and elementwise activations) on a
single sample in a few rotations, every one by a power of two (a small key set).

The packed plan of ``tensor_ops.model_plan`` puts ``slots // block`` samples in one ciphertext and runs each
affine layer by the diagonal method, one plaintext product per nonzero diagonal: for one sample most of that
work multiplies empty blocks. Here one sample fills the ciphertext and its values are laid out so that every
slot does useful work (the client lays out the input; each layer leaves the layout the next one reads):

- ``rows`` (the first affine layer, n_out x n_in, P = the power of two >= n_out, Q = slots / P): the client
  encrypts T = ceil(n_in / Q) ciphertexts, ciphertext t holding x[Q t + q] in the P slots [P q, P q + P);
  the server multiplies ciphertext t by the plaintext W[r, Q t + q] (slot P q + r), sums the T products and
  rotate-and-sums by P, 2P, ..., slots/2: slot s then holds y[s mod P], the output replicated with period P
  (no rotation before the products: the client's replication takes their place);
- ``gather`` (input replicated with period P, n_out <= slots / P): one plaintext, W[r, c] in slot P r + (the
  slot of c), then rotate-and-sum by 1, 2, ..., P/2: slot P r holds y[r] (the other slots partial sums,
  never read);
- ``spread`` (input y[c] in slot H c, n_out <= H): for j < n_out, rot(v, j) times the plaintext holding W[j, c]
  in slot H c - j (zero elsewhere: the partial sums are masked out, no level), summed, then rotate-and-sum
  by H, 2H, ..., slots/2: slot s holds y[(-s) mod H], replicated with period H for the next ``gather``.

So a chain rows, (gather, spread)... costs, per affine layer, one rescale and log2 of a slot count in
rotations (plus those making a ``spread``'s n_out rotated terms, by baby-step giant-step), with Galois keys
for powers of two only. A degree-4 activation
takes two levels (``quartic_form``: its leading coefficient folded into the affine map before it), and the
parameters take the special primes that make key switching cheapest (``fast_parameters``). ``fold`` = R
trades the client's replication for server rotations: each input ciphertext carries R times more values and
the server rotates it by 0 .. R-1 (R - 1 key switches per ciphertext, the same keys). The MNIST MLP
784 -> 128 -> 64 -> 10 of the FHE Benchmarking Suite: 13 input ciphertexts (fold 16: one, and 6 more
rotations), 13 + 1 + 10 plaintext products and 6 + 7 + 11 rotations, depth 7, 13 Galois keys, 34 MB of public
keys (the packed plan: 1,175 products, 62 rotations, depth 9, 67 keys, 333 MiB). It is the
"hybrid" diagonal method of GAZELLE (Juvekar, Vaikuntanathan and Chandrakasan, USENIX Security 2018) with
the input replication moved to the client (as in EinHops' client-side packing, arXiv:2507.07972) and the
reduction's layout chosen so consecutive layers need no masking level.

    plan = replicated_plan(model, fold=16)              # public, JSON (to_dict / from_dict)
    client = ReplicatedClient(plan)                     # keys for plan.rotations; save / load (secret, 0600)
    server = ReplicatedServer(model, client.public_context(), plan)
    server.prepare()                                    # optional: plaintexts encoded, kernels loaded
    y = client.decrypt(server.evaluate(client.encrypt(x)))   # x: one sample or (n, *input_shape)
"""
from __future__ import annotations

import functools
import math
import time
import warnings
from dataclasses import dataclass, field

import numpy as np

import hezk.record
from hezk.record import RecordError
from crypto.context import CKKSContext, check_value_bound
from crypto.errors import ContextMismatchError, ParameterError, SerializationError, ShapeError
from crypto.params import CKKSParameters
from crypto.rlwe import Ciphertext
from hezk.model.graph import activate
from tensor_ops.model_plan import (ActivationStage, AffineStage, choose_parameters, output_ranges,
                                   outputs_outside)
from tensor_ops.inference import (CLIENT_KIND, UNCHECKED_OUTPUTS, OutputRangeError, OutputRangeWarning, pack_message,
                                  require_secure, server_context, unpack_message, write_secret_file)

KINDS = ("rows", "gather", "spread", "activation")
LAYOUT = "replicated"
DEFAULT_MAX_CIPHERTEXTS = 256  # per request: 15 samples at fold 1 (13 ciphertexts each, ~300 MB), more folded


def _pow2_at_least(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())


def quartic_form(poly):
    """(alpha, gamma, delta, sign, e, f) writing a degree-4 activation p(t) = a4 t^4 + ... + a0 (t normalised) as
    p = sign v^2 + e t' + f with t' = alpha t (alpha = |a4|^(1/4), folded into the affine map before it) and
    v = t'^2 + gamma t' + delta: depth 2 (t'^2 and gamma t' side by side, then v^2 and e t' side by side)
    where the power-series schedule takes 3. From a4 (t^2 + beta t + c)^2 + e t + f with beta = a3 / (2 a4),
    c = (a2 / a4 - beta^2) / 2, e = a1 - 2 a4 beta c, f = a0 - a4 c^2. None for another polynomial (not a
    plain power series of degree exactly 4)."""
    coefficients = getattr(poly, "coefficients", None)
    if type(poly).__name__ != "PolyActivation" or coefficients is None or len(coefficients) != 5 \
            or coefficients[4] == 0.0:
        return None
    a0, a1, a2, a3, a4 = (float(c) for c in coefficients)
    beta = a3 / (2.0 * a4)
    c = (a2 / a4 - beta * beta) / 2.0
    e, f = a1 - 2.0 * a4 * beta * c, a0 - a4 * c * c
    alpha = abs(a4) ** 0.25
    return alpha, alpha * beta, alpha * alpha * c, 1.0 if a4 > 0 else -1.0, e / alpha, f


def evaluate_quartic(form, t):
    """p(t / alpha) of ``quartic_form`` on numpy values t (= alpha t): the naive twin of the encrypted schedule."""
    _, gamma, delta, sign, e, f = form
    v = t * t + gamma * t + delta
    return sign * v * v + e * t + f


@dataclass(frozen=True)
class ReplicatedStage:
    """One stage: an affine map of ``kind`` "rows" / "gather" / "spread" (``period``: P of the layout it
    reads or makes, see the module text; ``inputs``: ciphertexts it reads; ``fold``: for "rows", the server
    rotations by 0 .. fold-1 of each input ciphertext that stand for the client's replication, so the client
    sends fold times fewer ciphertexts) or an "activation" of ``depth`` levels."""

    kind: str
    n_in: int
    n_out: int
    period: int = 0
    inputs: int = 1
    depth: int = 1
    fold: int = 1

    def terms(self) -> tuple[int, int]:
        """(copies, terms): the stage sums P_{t,k} rot(c_t, k) over ``copies`` ciphertexts c_t and k < ``terms``
        (``rows``: its inputs and fold; ``spread``: one and n_out; otherwise one and one)."""
        if self.kind == "rows":
            return self.inputs, self.fold
        return (1, self.n_out) if self.kind == "spread" else (1, 1)

    @property
    def baby(self) -> int:
        """The baby step g of the stage's sum (``terms``): k = i + g j (i < g, j < ceil(terms / g)) takes
        copies x (g - 1) baby rotations and ceil(terms / g) - 1 giant rotations by g of the summed products
        (Horner), g the power of two with the fewest in all (the larger of equals: baby rotations by powers of
        two share one decomposition, ``_rotate_chain``)."""
        copies, terms = self.terms()
        return -min((copies * (g - 1) + -(-terms // g) - 1, -g)
                    for g in (1 << e for e in range((terms - 1).bit_length() + 1)))[1]

    @property
    def chained(self) -> int:
        """How many of ``rotations`` make the sum's rotated terms (the rest are the reduction's)."""
        copies, terms = self.terms()
        return copies * (self.baby - 1) + -(-terms // self.baby) - 1

    def rotations(self, slots: int) -> tuple[int, ...]:
        """The rotation steps the stage performs, in order (all powers of two)."""
        copies, terms = self.terms()
        g = self.baby
        chain = tuple(1 << (i.bit_length() - 1) for i in range(1, g)) * copies + (g,) * (-(-terms // g) - 1)
        if self.kind == "rows":
            return chain + tuple(1 << e for e in range(self.period.bit_length() - 1, slots.bit_length() - 1))
        if self.kind == "gather":
            return tuple(1 << e for e in range(self.period.bit_length() - 1))
        if self.kind == "spread":
            return chain + tuple(1 << e for e in range(self.period.bit_length() - 1, slots.bit_length() - 1))
        return ()


def layout_maps(stages, slots: int):
    """Per stage, the map after it: an int array over the slots, the output index a slot holds (-1: a zero or
    a partial sum never read). The input of the first ``rows`` stage is the client's (``ReplicatedPlan.pack``)."""
    maps, current = [], None
    s = np.arange(slots)
    for stage in stages:
        if stage.kind == "rows":
            r = s % stage.period
            current = np.where(r < stage.n_out, r, -1)
        elif stage.kind == "gather":
            r = s // stage.period
            current = np.where((s % stage.period == 0) & (r < stage.n_out), r, -1)
        elif stage.kind == "spread":
            r = (-s) % stage.period
            current = np.where(r < stage.n_out, r, -1)
        maps.append(current)
    return maps


def plan_stages(stages, slots: int, fold: int = 1) -> tuple[ReplicatedStage, ...]:
    """The replicated stages of compiled ``stages`` (``Sequential.compile``: AffineStage / ActivationStage only,
    an affine first) at ``slots`` slots, the first folded ``fold`` times (``ReplicatedStage``); ShapeError naming
    the layer and the limit where one does not fit."""
    out, layout, period = [], None, 0
    for index, stage in enumerate(stages):
        if isinstance(stage, ActivationStage):
            if layout is None:
                raise ShapeError(f"stage {index}: an activation before the first affine layer (the replicated "
                                 f"layout starts with an affine map)")
            depth = 2 if quartic_form(stage.poly) is not None else int(stage.depth)
            out.append(ReplicatedStage("activation", out[-1].n_out, out[-1].n_out, depth=depth))
            continue
        if type(stage) is not AffineStage:
            raise ShapeError(f"stage {index}: {type(stage).__name__} is not supported by the replicated layout "
                             f"(dense affine layers and elementwise activations only)")
        n_out, n_in = stage.shape
        if layout is None:
            period = _pow2_at_least(n_out)
            if period > slots:
                raise ShapeError(f"stage {index}: {n_out} outputs exceed slots={slots}")
            if isinstance(fold, bool) or not isinstance(fold, (int, np.integer)) or fold < 1 or fold & (fold - 1) \
                    or fold > period:
                raise ParameterError(f"fold={fold!r} must be a power of two in [1, {period}] (the first layer's "
                                     f"output period)")
            inputs = -(-n_in // (slots // period * fold))
            out.append(ReplicatedStage("rows", n_in, n_out, period, inputs, fold=int(fold)))
            layout = "replicated"
        elif layout == "replicated":
            if n_out * period > slots:
                raise ShapeError(f"stage {index}: {n_out} outputs x period {period} exceed slots={slots} (a "
                                 f"'gather' needs n_out * period <= slots)")
            out.append(ReplicatedStage("gather", n_in, n_out, period))
            layout = "sparse"
        else:
            if n_out > period:
                raise ShapeError(f"stage {index}: {n_out} outputs exceed the spacing {period} of its input (a "
                                 f"'spread' needs n_out <= spacing)")
            out.append(ReplicatedStage("spread", n_in, n_out, period))
            layout = "replicated"
    if layout is None:
        raise ShapeError("the model has no affine layer")
    return tuple(out)


def fits(stages, slots: int) -> bool:
    try:
        plan_stages(stages, slots, 1)
    except ShapeError:
        return False
    return True


@dataclass(frozen=True)
class ReplicatedPlan:
    """The public plan: parameters, stages, the model's identity and activation fit, the calibrated input
    range (``None``: unchecked). ``rotations``: the Galois keys (powers of two); ``input_ciphertexts``: per
    sample; ``input_level``: the depth (outputs at level 0)."""

    params: CKKSParameters
    input_shape: tuple[int, ...]
    output_shape: tuple[int, ...]
    stages: tuple[ReplicatedStage, ...]
    model: str | None = None
    fit: str | None = None
    input_range: tuple[float, float] | None = None
    # (lows, highs) every output meets while the activation inputs stay in their intervals (``value_bounds``),
    # checked by ``ReplicatedClient.decrypt`` widened by ``output_margin`` (None: only finiteness is checked)
    output_range: tuple[tuple[float, ...], tuple[float, ...]] | None = None
    output_margin: float = 0.0
    maps: tuple = field(default=(), compare=False, repr=False)
    finish: str = ""  # the model's exact last activation (``Sequential.finish``), applied by the client after decryption

    def __post_init__(self):
        if not self.maps:
            object.__setattr__(self, "maps", tuple(layout_maps(self.stages, self.params.slots)))

    @property
    def layout(self) -> str:
        return LAYOUT

    @property
    def depth(self) -> int:
        return sum(s.depth for s in self.stages)

    @property
    def input_level(self) -> int:
        return self.depth

    @property
    def input_ciphertexts(self) -> int:
        return self.stages[0].inputs

    @property
    def rotations(self) -> tuple[int, ...]:
        steps = set()
        for stage in self.stages:
            steps.update(stage.rotations(self.params.slots))
        return tuple(sorted(steps))

    @property
    def output_slots(self) -> np.ndarray:
        """The slot holding each output value (the first slot whose map names it)."""
        final = self.maps[-1]
        n = math.prod(self.output_shape)
        slots = np.full(n, -1)
        for value in range(n):
            where = np.flatnonzero(final == value)
            if not where.size:
                raise ParameterError(f"replicated plan: output {value} is in no slot of the last stage's layout "
                                     f"(the stages do not make the output shape {self.output_shape})")
            slots[value] = where[0]
        return slots

    def operation_counts(self) -> dict:
        """Per sample: plaintext products, rotations (key switches), rescales of the affine stages."""
        products = rotations = 0
        for stage in self.stages:
            if stage.kind == "rows":
                products += stage.inputs * stage.fold
            elif stage.kind == "gather":
                products += 1
            elif stage.kind == "spread":
                products += stage.n_out
            rotations += len(stage.rotations(self.params.slots))
        return {"ct_pt": products, "rotations": rotations, "galois_keys": len(self.rotations),
                "input_ciphertexts": self.input_ciphertexts}

    def pack(self, x) -> list[np.ndarray]:
        """The ``input_ciphertexts`` slot vectors of one sample (``rows``: ciphertext t holds x[Q R t + R q + i]
        in the slots P q + r with r = i mod R, R the fold: x[Q t + q] in slots [P q, P q + P) unfolded)."""
        first = self.stages[0]
        flat = np.asarray(x, dtype=np.float64).reshape(-1)
        if flat.size != first.n_in:
            raise ShapeError(f"a sample of {flat.size} values, the plan takes {first.n_in}")
        return [np.where(index < flat.size, flat[np.minimum(index, flat.size - 1)], 0.0)
                for index in (rows_columns(first, self.params.slots, t) for t in range(first.inputs))]

    def to_dict(self) -> dict:
        return {"layout": LAYOUT, "params": self.params.to_dict(), "input_shape": list(self.input_shape),
                "output_shape": list(self.output_shape), "model": self.model, "fit": self.fit,
                "input_range": None if self.input_range is None else list(self.input_range),
                "output_range": None if self.output_range is None else [list(v) for v in self.output_range],
                "output_margin": self.output_margin, "finish": self.finish,
                "stages": [{"kind": s.kind, "n_in": s.n_in, "n_out": s.n_out, "period": s.period,
                            "inputs": s.inputs, "depth": s.depth, "fold": s.fold} for s in self.stages]}

    @classmethod
    def from_dict(cls, data) -> "ReplicatedPlan":
        """The plan of ``to_dict``; every field checked (ParameterError naming it)."""
        if not isinstance(data, dict) or data.get("layout") != LAYOUT:
            layout = data.get("layout") if isinstance(data, dict) else None
            raise ParameterError(f"not a replicated plan (layout={layout!r})")
        try:
            params = CKKSParameters.from_dict(data["params"])
            slots = params.slots
            stages = []
            for entry in data["stages"]:
                stage = ReplicatedStage(str(entry["kind"]), int(entry["n_in"]), int(entry["n_out"]),
                                        int(entry["period"]), int(entry["inputs"]), int(entry["depth"]),
                                        int(entry.get("fold", 1)))
                if stage.kind not in KINDS or min(stage.n_in, stage.n_out, stage.inputs, stage.fold) < 1 \
                        or stage.fold & (stage.fold - 1) or stage.fold > max(stage.period, 1) \
                        or not 0 <= stage.depth <= 64:
                    raise ParameterError(f"stage {entry!r:.120} has an unknown kind or a size out of range")
                if stage.kind != "activation" and (stage.period < 1 or stage.period & (stage.period - 1)
                                                   or stage.period > slots):
                    raise ParameterError(f"stage {entry!r:.120}: period must be a power of two <= slots={slots}")
                stages.append(stage)
            shape_in = tuple(int(d) for d in data["input_shape"])
            shape_out = tuple(int(d) for d in data["output_shape"])
            low_high = data.get("input_range")
            rng = None if low_high is None else (float(low_high[0]), float(low_high[1]))
            bounds = data.get("output_range")
            if bounds is not None:
                bounds = (tuple(float(v) for v in bounds[0]), tuple(float(v) for v in bounds[1]))
            margin = float(data.get("output_margin", 0.0))
            finish = data.get("finish", "")
            if not isinstance(finish, str) or len(finish) > 64:
                raise ParameterError(f"replicated plan: finish={finish!r:.80} must be an activation's name")
        except (KeyError, TypeError, ValueError) as error:
            raise ParameterError(f"replicated plan: a field is missing or malformed ({error})") from None
        if not stages or stages[0].kind != "rows" or math.prod(shape_in) != stages[0].n_in \
                or math.prod(shape_out) != stages[-1].n_out:
            raise ParameterError("replicated plan: the stages must start with 'rows' and match the input and output "
                                 "shapes")
        if bounds is not None and not (len(bounds[0]) == len(bounds[1]) == math.prod(shape_out)) \
                or not math.isfinite(margin) or margin < 0:
            raise ParameterError("replicated plan: output_range must give one low and one high per output value, "
                                 "output_margin a finite number >= 0")
        plan = cls(params, shape_in, shape_out, tuple(stages), data.get("model"), data.get("fit"), rng, bounds,
                   margin, finish=finish)
        plan.output_slots  # noqa: B018 (raises for stages that do not lay out every output)
        return plan


def switch_levels(stages, slots: int) -> list[int]:
    """The level of every key switch of the stages (rotations, and a relinearization per activation level),
    inputs at the top (sum of the depths)."""
    level, out = sum(s.depth for s in stages), []
    for stage in stages:
        if stage.kind == "activation":
            out += [level - i for i in range(stage.depth)]
        else:
            out += [level] * len(stage.rotations(slots))
        level -= stage.depth
    return out


def switch_cost(params, levels) -> float:
    """Relative cost of key switches at ``levels``: per switch (digits it decomposes into + 2) x (Q_l + P) limb
    transforms (the ModUp of each digit and the ModDown of both halves)."""
    total, specials = 0.0, len(params.p_moduli)
    for level in levels:
        limbs = params.limbs_at(level)
        digits = sum(1 for digit in params.digits if min(digit) < limbs)
        total += (digits + 2) * (limbs + specials)
    return total


@functools.lru_cache(maxsize=16)
def fast_parameters(depth: int, min_slots: int, levels: tuple[int, ...]):
    """The 128-bit parameters of ``choose_parameters(depth, min_slots)`` with the special primes (2 to 6 of 30
    bits, each with the fewest key-switching digits the parameters accept) that minimise ``switch_cost`` at
    ``levels``: more special primes, fewer digits, cheaper and smaller keys while log QP stays under the
    security bound. Parameters at another scale than 2^30 are returned as chosen."""
    base = choose_parameters(depth, min_slots=min_slots)
    if base.log_scale != 30 or base.hamming_weight is not None:
        return base
    best = (switch_cost(base, levels), base)
    for specials in range(len(base.p_moduli) + 1, 7):
        try:
            primes = CKKSParameters.from_literal(dict(log_n=base.log_n, log_q=[[30, 30]] + [[30]] * depth,
                                                      log_p=[30] * specials, log_scale=30, dnum=depth + 2))
        except ParameterError:
            break
        if primes.security_bits is None or primes.security_bits < 128 or primes.scale_drift_bits > 1.0:
            break
        for dnum in range(1, depth + 2):
            try:
                params = CKKSParameters(log_n=primes.log_n, q_levels=primes.q_levels, p_moduli=primes.p_moduli,
                                        log_scale=30, dnum=dnum)
            except ParameterError:
                continue
            cost = switch_cost(params, levels)
            if cost < best[0]:
                best = (cost, params)
            break
    return best[1]


def replicated_plan(model, input_shape=None, params=None, fold: int = 1) -> ReplicatedPlan:
    """The replicated plan of ``model`` (a ``tensor_ops.nn.Sequential`` of dense layers and elementwise
    activations) for one sample: ``params`` None chooses 128-bit parameters with the model's depth and enough
    slots for the layout (``fast_parameters``). ``fold``: a power of two up to the first layer's output period;
    the client sends ``fold`` times fewer input ciphertexts and the server rotates each by 0 .. fold-1 instead
    (fold - 1 more key switches per input ciphertext, the same keys)."""
    from crypto.context import as_parameters

    stages, _ = model.compile(input_shape)
    if params is None:
        slots = 1
        while not fits(stages, slots) and slots < 1 << 16:
            slots *= 2
        rstages = plan_stages(stages, slots, fold)
        depth = sum(s.depth for s in rstages)
        params = fast_parameters(depth, slots, tuple(switch_levels(rstages, slots)))
    else:
        params = as_parameters(params)
        depth = sum(s.depth for s in plan_stages(stages, params.slots, fold))
        if params.max_level < depth:
            raise ParameterError(f"params have {params.max_level} levels, the model needs {depth}")
    rstages = plan_stages(stages, params.slots, fold)
    shape = tuple(input_shape if input_shape is not None else model.input_shape)
    input_range = getattr(model, "input_range", None)
    ranges = output_ranges(stages, math.prod(shape), input_range)
    return ReplicatedPlan(params, shape, tuple(model.output_shape(shape)), rstages, model.identity().hex(),
                          model.activation_fit(), input_range, **ranges, finish=getattr(model, "finish", "") or "")


# ---------------------------------------------------------------------------------------------------------
# The server.

class _Value:
    """A ciphertext with + and * through an evaluator, for the activations' schedules."""

    __slots__ = ("ct", "ev")

    def __init__(self, ct, ev):
        self.ct, self.ev = ct, ev

    def __mul__(self, other):
        return _Value(self.ev.mul_rescale(self.ct, other.ct if isinstance(other, _Value) else other), self.ev)

    def __add__(self, other):
        return _Value(self.ev.add(self.ct, other.ct if isinstance(other, _Value) else other), self.ev)

    def __neg__(self):
        return _Value(self.ev.neg(self.ct), self.ev)


def stage_vectors(stage: ReplicatedStage, matrix: np.ndarray, before, slots: int) -> list[np.ndarray]:
    """The plaintext slot vectors of an affine stage: ``rows``: one per input ciphertext; ``gather``: one;
    ``spread``: one per output j (for rot(v, j)). ``before``: the map of the stage's input (None for rows)."""
    n_out, n_in = matrix.shape
    s = np.arange(slots)
    if stage.kind == "rows":  # one per (input ciphertext t, rotation k), t major
        r = s % stage.period
        vectors = []
        for t in range(stage.inputs):
            for k in range(stage.fold):
                c = np.roll(rows_columns(stage, slots, t), -k)
                ok = (r < n_out) & (c < n_in)
                v = np.zeros(slots)
                v[ok] = matrix[r[ok], c[ok]]
                vectors.append(v)
        return vectors
    if stage.kind == "gather":
        r, j = s // stage.period, s % stage.period
        c = before[j]  # the input is replicated with this period: slot j names the value of every slot j + P k
        ok = (r < n_out) & (c >= 0)
        v = np.zeros(slots)
        v[ok] = matrix[r[ok], c[ok]]
        return [v]
    vectors = []  # spread: input value c at slot H c; rot(v, j) puts it at slot H c - j
    for j in range(n_out):
        v = np.zeros(slots)
        c = np.arange(n_in)
        v[(stage.period * c - j) % slots] = matrix[j, c]
        vectors.append(v)
    return vectors


def rows_columns(stage: ReplicatedStage, slots: int, t: int) -> np.ndarray:
    """The input index each slot of ``rows`` input ciphertext t holds (>= n_in: a zero): Q R t + R q + (r mod R)
    at slot P q + r (Q = slots / P, R = fold). Rotated by k < R, slot P q + r of row r reads index
    Q R t + R q' + ((r + k) mod R), q' = q or the next block (cyclically): over q and k every index once."""
    s = np.arange(slots)
    per = slots // stage.period
    return per * stage.fold * t + stage.fold * (s // stage.period) + (s % stage.period) % stage.fold


def bias_vector(bias: np.ndarray, after: np.ndarray) -> np.ndarray:
    """The bias laid out on a stage's output map (zero where the map names no value)."""
    return np.where(after >= 0, bias[np.maximum(after, 0)], 0.0)


def _rotate_chain(ev, ct, n_out: int) -> list:
    """[rot(ct, j) for j < n_out], each one key switch by a power of two from an earlier one (those from ct
    itself, the powers of two, hoisted: one decomposition)."""
    if n_out <= 1:
        return [ct]
    powers = [1 << e for e in range((n_out - 1).bit_length())]
    hoisted = ev.rotate_hoisted(ct, powers) if len(powers) > 1 else {1: ev.rotate(ct, 1)}
    out = [ct]
    for j in range(1, n_out):
        high = 1 << (j.bit_length() - 1)
        out.append(hoisted[j] if j == high else ev.rotate(out[j - high], high))
    return out


def _lap(timings: dict, name: str, start: float) -> None:
    timings[name] = timings.get(name, 0.0) + time.perf_counter() - start


def _rotate_sum(ev, ct, steps):
    for step in steps:
        ct = ev.add(ct, ev.rotate(ct, step))
    return ct


class ReplicatedServer:
    """Runs a ``ReplicatedPlan`` of ``model`` under a client's public context (bytes or a CKKSContext; a full
    context is stripped of its secret key). The plaintexts are encoded at the first request (``encode_weights``
    does it now) and kept. Refuses a plan of another model or fit, a context lacking the plan's keys."""

    def __init__(self, model, public_context, plan, *, max_ciphertexts: int = DEFAULT_MAX_CIPHERTEXTS,
                 backend="auto"):
        plan = plan if isinstance(plan, ReplicatedPlan) else ReplicatedPlan.from_dict(plan)
        context = server_context(public_context, backend)
        if context.params != plan.params:
            raise ContextMismatchError(f"the context's parameters {context.params!r} are not the plan's "
                                       f"{plan.params!r}")
        missing = sorted(set(plan.rotations) - set(context.rotation_steps))
        if missing:
            raise ContextMismatchError(f"the context lacks Galois keys for rotations {missing}: make the keys with "
                                       f"ReplicatedClient(plan)")
        if plan.model is not None and plan.model != model.identity().hex():
            raise ContextMismatchError(f"the plan is for model {plan.model[:12]}…, this model is "
                                       f"{model.identity().hex()[:12]}…")
        if plan.fit is not None and plan.fit != model.activation_fit():
            raise ContextMismatchError("the plan's activation fit differs from this model's")
        stages, _ = model.compile(plan.input_shape)
        if plan_stages(stages, plan.params.slots, plan.stages[0].fold) != plan.stages:
            raise ShapeError("the model compiles to other replicated stages than the plan's")
        self.plan, self.context, self.evaluator = plan, context, context.evaluator
        self.max_ciphertexts = int(max_ciphertexts)
        self._stages = stages
        # a depth-2 quartic activation reads alpha t: the affine map before it is scaled by alpha
        self._forms = {i: quartic_form(stage.poly) for i, stage in enumerate(stages)
                       if plan.stages[i].kind == "activation" and plan.stages[i].depth == 2
                       and quartic_form(stage.poly) is not None}
        self._alpha = {i - 1: form[0] for i, form in self._forms.items()}
        self._encoded = {}

    @property
    def key_id(self) -> bytes:
        return self.context.key_id

    def _plaintexts(self, index, level, scale):
        key = (index, level, scale)
        if key not in self._encoded:
            stage, plan_stage = self._stages[index], self.plan.stages[index]
            before = self.plan.maps[index - 1] if index else None
            matrix = np.asarray(stage.matrix) * self._alpha.get(index, 1.0)
            vectors = stage_vectors(plan_stage, matrix, before, self.plan.params.slots)
            g, (_, terms) = plan_stage.baby, plan_stage.terms()  # the term of rotation k = i + g j pre-rotated
            vectors = [np.roll(v, g * ((n % terms) // g)) for n, v in enumerate(vectors)]  # by -g j (_bsgs_sum)
            self._encoded[key] = [self.context.encode(v, level=level, scale=scale) for v in vectors]
        return self._encoded[key]

    def _bsgs_sum(self, stage, cts, plaintexts):
        """sum over ciphertexts t and k < terms of P_{t,k} rot(c_t, k) (``ReplicatedStage.terms``), by baby-step
        giant-step: inner_j = sum_{t,i} rot(P_{t,i+gj}, -gj) rot(c_t, i), then inner_0 + rot(inner_1 + rot(...,
        g), g) (Horner: every giant rotation by g)."""
        ev, g = self.evaluator, stage.baby
        _, terms = stage.terms()
        babies = [_rotate_chain(ev, c, g) for c in cts]
        inner = [ev.mul_plain_sum((babies[t][i], plaintexts[t * terms + j * g + i])
                                  for t in range(len(cts)) for i in range(g) if j * g + i < terms)
                 for j in range(-(-terms // g))]
        total = inner[-1]
        for term in reversed(inner[:-1]):
            total = ev.add(term, ev.rotate(total, g))
        return total

    def prepare(self) -> None:
        """The server's one-time set-up apart from a request: every plaintext (weights, biases, the activations'
        constants) encoded and kept (``encode_weights``) and the process's kernels loaded (a rotation, a hoisted
        one and a relinearized product of a zero encryption at level 1), so the first request then costs what
        every later one does. A model with an activation whose scales are not traced (not ``quartic_form``)
        runs once on an encryption of zeros instead."""
        ev, p = self.evaluator, self.plan.params
        if not self.encode_weights()[1]:
            zero = self.context.encrypt(np.zeros(p.slots), level=self.plan.input_level)
            self.forward([zero] * self.plan.input_ciphertexts)
            return
        zero = self.context.encrypt(np.zeros(p.slots), level=min(1, p.max_level))
        steps = sorted(self.plan.rotations)[:2]
        if steps:
            ev.rotate(zero, steps[0])
            ev.rotate_hoisted(zero, steps)
        if zero.level >= 1:
            ev.mul_rescale(zero, zero)

    @property
    def encoded_plaintexts(self) -> int:
        """How many plaintexts the server keeps encoded (weights, biases, constants)."""
        total = 0
        for value in self._encoded.values():
            total += len(value) if isinstance(value, list) else 1
        return total

    def encode_weights(self) -> tuple[int, bool]:
        """Encode the stages' plaintexts now, at the levels and scales a request's ciphertexts will have there
        (traced with the evaluator's rules: a product's scale is the product of the scales, a rescale divides
        by the level's primes; inputs at the parameters' scale): (how many are kept, whether every stage was
        reached: the trace stops at an activation that is not ``quartic_form``'s)."""
        p = self.plan.params
        level, scale = self.plan.input_level, p.scale
        for index, stage in enumerate(self.plan.stages):
            top = math.prod(p.q_levels[level])
            if stage.kind == "activation":
                if index not in self._forms:
                    return self.encoded_plaintexts, False
                _, gamma, _, _, e, _ = self._forms[index]
                square = scale * scale / top
                out = square * square / math.prod(p.q_levels[level - 1])
                if gamma:
                    self._constant(index, "gamma", gamma, level, scale)
                if e:
                    self._constant(index, "e", e, level, out * top / scale)
                level, scale = level - 2, out
                continue
            plain = top * p.scale / scale
            self._plaintexts(index, level, plain)
            level, scale = level - 1, scale * plain / top
            self._bias(index, level, scale)
        return self.encoded_plaintexts, True

    def forward(self, cts, timings: dict | None = None):
        """The model on one sample's input ciphertexts (``plan.input_ciphertexts``, at ``input_level`` or above);
        returns the output ciphertext at level 0. ``timings``: a dict that gets each stage's seconds added under
        "index:kind"."""
        ev, p = self.evaluator, self.plan.params
        if len(cts) != self.plan.input_ciphertexts:
            raise ShapeError(f"{len(cts)} ciphertexts for a sample, the plan takes {self.plan.input_ciphertexts}")
        cts = [ev.to_level(ct, self.plan.input_level) if ct.level > self.plan.input_level else ct for ct in cts]
        ct = None
        for index, (stage, plan_stage) in enumerate(zip(self._stages, self.plan.stages)):
            start = time.perf_counter()
            if plan_stage.kind == "activation":
                if index in self._forms:
                    ct = self._quartic(index, ct)
                else:
                    result = stage.poly.evaluate(_Value(ct, ev))
                    ct = result.ct if isinstance(result, _Value) else ev.add(ev.mul(ct, 0.0), result)
                if timings is not None:
                    _lap(timings, f"{index}:{plan_stage.kind}", start)
                continue
            source = cts if plan_stage.kind == "rows" else [ct]
            level, scale = source[0].level, source[0].scale
            plaintexts = self._plaintexts(index, level, math.prod(p.q_levels[level]) * p.scale / scale)
            total = self._bsgs_sum(plan_stage, cts if plan_stage.kind == "rows" else [ct], plaintexts)
            steps = plan_stage.rotations(p.slots)[plan_stage.chained:]
            # summed before the rescale: each key switch's rounding noise is then divided by the level's prime
            total = ev.rescale(_rotate_sum(ev, total, steps))
            ct = ev.add(total, self._bias(index, total.level, total.scale))
            if timings is not None:
                _lap(timings, f"{index}:{plan_stage.kind}", start)
        return ct

    def _bias(self, index, level, scale):
        key = (index, "bias", level, scale)
        if key not in self._encoded:
            bias = np.asarray(self._stages[index].bias) * self._alpha.get(index, 1.0)
            self._encoded[key] = self.context.encode(bias_vector(bias, self.plan.maps[index]), level=level,
                                                     scale=scale)
        return self._encoded[key]

    def _constant(self, index, which, value, level, scale):
        """A plaintext of ``value`` in every slot at ``level`` and ``scale`` (kept, like the weights)."""
        key = (index, which, level, scale)
        if key not in self._encoded:
            self._encoded[key] = self.context.encode(np.full(self.plan.params.slots, value), level=level, scale=scale)
        return self._encoded[key]

    def _quartic(self, index, ct):
        """``quartic_form``'s schedule in two levels, each product's scale chosen so the sums need no alignment:
        gamma t' by a plaintext at scale(t') lands on t'^2's scale, e t' (dropped a level) on v^2's."""
        ev = self.evaluator
        _, gamma, delta, sign, e, f = self._forms[index]
        level, scale = ct.level, ct.scale
        v = ev.mul_rescale(ct, ct)
        if gamma:
            v = ev.add(v, ev.rescale(ev.mul(ct, self._constant(index, "gamma", gamma, level, scale))))
        v = ev.add(v, delta) if delta else v
        out = ev.mul_rescale(v, v)
        out = ev.neg(out) if sign < 0 else out
        if e:
            top = math.prod(self.plan.params.q_levels[level])
            linear = ev.rescale(ev.mul(ct, self._constant(index, "e", e, level, out.scale * top / scale)))
            out = ev.add(out, ev.to_level(linear, out.level))
        return ev.add(out, f) if f else out

    def evaluate(self, request, timings: dict | None = None) -> bytes:
        """Reply bytes for request bytes (``ReplicatedClient.encrypt``): one output ciphertext per sample.
        ``timings``: a dict that gets seconds added under "read" (the ciphertexts' bytes), each stage's
        "index:kind" (``forward``) and "reply"."""
        header, blobs = unpack_message(request, "request", self.max_ciphertexts)
        _check_header(header, self.key_id, self.plan)
        per = self.plan.input_ciphertexts
        samples = header.get("samples")
        if not isinstance(samples, int) or isinstance(samples, bool) or samples < 1 or samples * per != len(blobs):
            raise SerializationError(f"request samples={samples!r} with {len(blobs)} ciphertexts: expected "
                                     f"{per} ciphertexts per sample")
        outputs = []
        for i in range(samples):
            start = time.perf_counter()
            cts = [Ciphertext.from_bytes(b, self.context) for b in blobs[i * per:(i + 1) * per]]
            for ct in cts:
                if ct.key_id != self.key_id:
                    raise ContextMismatchError("a ciphertext of the request is under another key set")
                if ct.level < self.plan.input_level:
                    raise ParameterError(f"a ciphertext at level {ct.level}, the plan needs {self.plan.input_level}")
            if timings is not None:
                _lap(timings, "read", start)
            outputs.append(self.forward(cts, timings))
        start = time.perf_counter()
        reply = {"key_id": self.key_id.hex(), "samples": samples, "single": bool(header.get("single")),
                 "layout": LAYOUT, "model": self.plan.model, "fit": self.plan.fit}
        blob = pack_message("reply", reply, outputs)
        if timings is not None:
            _lap(timings, "reply", start)
        return blob

    __call__ = evaluate


def _check_header(header, key_id: bytes, plan: ReplicatedPlan):
    if header.get("key_id") != key_id.hex():
        raise ContextMismatchError(f"message made under key set {str(header.get('key_id'))[:12]}…, this context "
                                   f"holds {key_id.hex()[:12]}…")
    if header.get("layout") != LAYOUT:
        raise ShapeError(f"message layout {header.get('layout')!r}, this plan reads {LAYOUT!r}")
    for name in ("model", "fit"):
        if header.get(name) is not None and getattr(plan, name) is not None and header.get(name) != getattr(plan, name):
            raise ContextMismatchError(f"message {name} {str(header.get(name))[:12]}… is not this plan's "
                                       f"{getattr(plan, name)[:12]}…")


# ---------------------------------------------------------------------------------------------------------
# The client.

class ReplicatedClient:
    """Keeps the secret key of a ``ReplicatedPlan``: Galois keys for ``plan.rotations`` only; encrypts samples
    into requests and decrypts replies. Refuses parameters below 128 bits unless ``allow_insecure``; ``seed``
    for tests only (default: the OS CSPRNG)."""

    def __init__(self, plan, *, seed=None, backend="auto", allow_insecure: bool = False, _context=None):
        plan = plan if isinstance(plan, ReplicatedPlan) else ReplicatedPlan.from_dict(plan)
        if not allow_insecure:
            require_secure(plan.params, "the plan's parameters", "allow_insecure=True")
        self.plan, self.params = plan, plan.params
        self._context = _context if _context is not None else CKKSContext.keygen(
            plan.params, rotations=plan.rotations, seed=seed, backend=backend)
        self._public = None

    @property
    def key_id(self) -> bytes:
        return self._context.key_id

    def public_context(self) -> bytes:
        """Parameters, public, relinearization and Galois keys (never the secret key)."""
        if self._public is None:
            self._public = self._context.public_context().to_bytes()
        return self._public

    def key_report(self) -> dict:
        return {"public_context_bytes": len(self.public_context()), "rotation_keys": len(self.plan.rotations),
                "rotations": list(self.plan.rotations), "security": self.params.security}

    def save(self, path, galois_keys: bool = False):
        """The plan and the context, SECRET KEY INCLUDED (mode 0600); without the Galois keys by default (the
        server's: the client only encrypts and decrypts). The record is the inference client's (CLIENT_KIND:
        ``Client.load`` reads it as a client without a packed plan), the plan in its meta "replicated_plan"."""
        context = self._context
        if not galois_keys:
            public = CKKSContext.from_key_bytes(context.public_key_bytes(), context.relin_key_bytes())
            context = CKKSContext.from_bytes(public.to_bytes(), secret_key=context.secret_key_bytes())
        write_secret_file(path, hezk.record.pack(CLIENT_KIND, {"plan": None, "packing": "replicated-per-sample",
                                                              "replicated_plan": self.plan.to_dict()},
                                                 [context.to_bytes(include_secret_key=True)]))

    @classmethod
    def load(cls, path, backend="auto") -> "ReplicatedClient":
        with open(path, "rb") as handle:
            blob = handle.read()
        try:
            record = hezk.record.unpack(blob, CLIENT_KIND)
            context = CKKSContext.from_bytes(hezk.record.array_bytes(record, 0, "the saved context"), backend=backend)
        except RecordError as error:
            raise SerializationError(f"{path!s}: not a saved replicated client ({error})") from None
        plan = ReplicatedPlan.from_dict(record.meta.get("replicated_plan"))
        if not context.has_secret_key or context.params != plan.params:
            raise SerializationError(f"{path!s}: the saved context has no secret key or other parameters than its plan")
        return cls(plan, allow_insecure=True, _context=context)

    def encrypt(self, x, *, clip: bool = False) -> bytes:
        """A request of one sample (``input_shape``) or a batch along axis 0: ``input_ciphertexts`` ciphertexts
        per sample at the plan's input level. A plan with an input range refuses values outside it (ParameterError
        naming the range), or clips them with ``clip=True``."""
        x = np.asarray(x, dtype=np.float64)
        shape = self.plan.input_shape
        single = x.shape == shape
        batch = x[None] if single else x
        if batch.ndim < 1 or batch.shape[1:] != shape or not len(batch):
            raise ShapeError(f"input shape {x.shape} is neither {shape} nor (batch, *{shape})")
        if self.plan.input_range is not None:
            low, high = self.plan.input_range
            if clip:
                batch = np.clip(batch, low, high)
            elif batch.min() < low or batch.max() > high:
                raise ParameterError(f"input values in [{batch.min():.4g}, {batch.max():.4g}] leave the plan's "
                                     f"calibrated input range [{low:.4g}, {high:.4g}] (clip=True clips them)")
        check_value_bound(self.params, batch, name="input x")
        level = self.plan.input_level
        cts = [self._context.encrypt(v, level=level) for sample in batch for v in self.plan.pack(sample)]
        header = {"key_id": self.key_id.hex(), "samples": len(batch), "single": single, "layout": LAYOUT,
                  "model": self.plan.model, "fit": self.plan.fit, "fold": self.plan.stages[0].fold}
        return pack_message("request", header, cts)

    def decrypt(self, reply) -> np.ndarray:
        """The outputs of a reply: (samples, *output_shape), or output_shape for a single sample."""
        header, blobs = unpack_message(reply, "reply", max_ciphertexts=1 << 20)
        _check_header(header, self.key_id, self.plan)
        if header.get("samples") != len(blobs):
            raise SerializationError(f"reply samples={header.get('samples')!r} with {len(blobs)} ciphertexts")
        where = self.plan.output_slots
        out = np.stack([np.asarray(self._context.decrypt(Ciphertext.from_bytes(b, self._context))).real[where]
                        for b in blobs]).reshape(len(blobs), *self.plan.output_shape)
        if self.plan.output_range is None:  # as Client.decrypt: only non-finite values are caught
            warnings.warn(OutputRangeWarning(UNCHECKED_OUTPUTS), stacklevel=2)
        invalid = outputs_outside(out, self.plan.output_range, self.plan.output_margin)
        if invalid.size:
            raise OutputRangeError(f"invalid result: samples {invalid.tolist()[:20]} decrypt to values outside the "
                                   f"plan's output range (or not finite): an activation input left its fitted "
                                   f"interval there; encrypt them clipped or calibrate on inputs like them",
                                   invalid, invalid, invalid, out)
        if self.plan.finish:  # the model's last activation, exact, as Client and SamplePackedClient apply it
            out = activate(self.plan.finish, out)
        return out[0] if header.get("single") else out


__all__ = ["ReplicatedPlan", "ReplicatedStage", "ReplicatedClient", "ReplicatedServer", "replicated_plan",
           "plan_stages", "stage_vectors", "layout_maps", "rows_columns", "bias_vector", "quartic_form",
           "evaluate_quartic", "fast_parameters", "switch_cost", "switch_levels"]
