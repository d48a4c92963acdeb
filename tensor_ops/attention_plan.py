"""The model path for graphs with attention (``Bilinear``, ``Softmax``, ``LayerNorm`` nodes: an exported
``nn.TransformerEncoderLayer``): plan, keys, encryption, evaluation and decryption of ``tensor_ops.attention``'s
node-by-node evaluation, the route ``hezk plan`` / ``hezk infer`` take for such a model.

``plan_attention(graph, calibration)`` calibrates every approximation (``tensor_ops.attention.approximate``:
Softmax by a calibrated shift, exp by squaring and a Newton reciprocal; LayerNorm by a Newton inverse square
root; activations by minimax fits), states each one's largest error on the calibration data, measures the
levels the whole evaluation consumes and the rotations it performs by running it on recording backends (the
same einsum plans, attention's two products included, as the encrypted run), and chooses 128-bit parameters
with that many levels (``model_plan.choose_parameters``) whose Galois keys fit the key budget. Bootstraps are
not placed on this path yet: a model deeper than a 128-bit ring holds within the budget is refused naming
its depth and the limit (named parameters with enough levels run it; parameters below 128 bits only with
``allow_insecure``, for tests). ``run_attention`` refuses samples whose plain reference leaves a calibrated
range (the input range, a Softmax's shift or row-sum range, a LayerNorm's variance range, an activation's
interval): the polynomials are only right there.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod

import numpy as np

from crypto.rlwe import Ciphertext
from crypto.errors import ParameterError, ShapeError

from .backends import CKKSBackend
from .attention import MARGIN, GraphApproximation, approximate
from .inference import InputRangeError, require_secure
from .model_plan import DEFAULT_KEY_BUDGET, choose_parameters, deepest_secure_preset

__all__ = ["ATTENTION_KINDS", "AttentionPlan", "has_attention", "plan_attention", "read_graph", "run_attention",
           "samples_outside"]

#: node kinds that only this path evaluates (``tensor_ops.nn.from_graph`` refuses them)
ATTENTION_KINDS = ("bilinear", "softmax", "layernorm")
#: slots the rotations are recorded at when no parameters are found (N = 2^16)
_DEFAULT_SLOTS = 1 << 15
#: levels asked beyond the recorded depth: the evaluator aligns the scales of two ciphertexts at one level by a
#: rescale of one of them (a level the recording backend does not see; one on the tiny encoder layer)
ALIGNMENT_LEVELS = 2


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


def _batch(graph, x) -> tuple[np.ndarray, bool]:
    """(x batch first, whether x was one sample) or ShapeError naming the shapes."""
    try:
        x = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError):
        raise ShapeError("the input is not a numeric array") from None
    single = x.shape == tuple(graph.input_shape)
    batch = x[None] if single else x
    if batch.shape[1:] != tuple(graph.input_shape) or not len(batch):
        raise ShapeError(f"input of shape {x.shape} is neither (batch, *{graph.input_shape}) nor one sample "
                         f"{graph.input_shape}")
    if not np.all(np.isfinite(batch)):
        raise ParameterError("the input holds NaN or infinite values")
    return batch, single


def _describe(node, approx) -> str:
    if node.kind == "softmax":
        r = approx.reciprocal
        return (f"softmax (THOR / NEXUS style): shift by the calibrated bound c = {approx.shift:.4g}, exp(x - c) = "
                f"p(t / 2^{approx.squarings})^(2^{approx.squarings}) with p of degree {approx.degree} on "
                f"[{approx.low:.4g}, 0], 1/sum by {r.steps} Newton (Goldschmidt) steps from the minimax line on "
                f"[{r.low:.4g}, {r.high:.4g}]")
    if node.kind == "layernorm":
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
    parameters (None with ``refusal`` saying why none were found)."""

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

    @property
    def galois_key_bytes(self) -> int:
        """Estimated Galois key bytes: per key, digits x 2 x (Q + P limbs) x N x 4 (as ``ModelPlan``)."""
        return 0 if self.params is None else _key_bytes(self.params, len(self.rotations))

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
                     f"({self.calibration_samples} samples, ranges widened by {MARGIN:.0%} of their width):")
        lines += [f"  {name}: {text}: max error {error:.3g}" for name, text, error in self.approximations]
        share = self.model_error / self.output_magnitude if self.output_magnitude else 0.0
        lines.append(f"whole model on the calibration data: max error {self.model_error:.3g} ({share:.3%} of the "
                     f"largest output magnitude {self.output_magnitude:.4g})")
        lines.append(f"input range (calibrated): [{self.input_range[0]:.4g}, {self.input_range[1]:.4g}]; samples "
                     f"whose plain reference leaves any calibrated range are refused")
        lines.append(f"depth: {self.depth} levels (measured on a level-recording run; {ALIGNMENT_LEVELS} more asked "
                     f"of the parameters for scale alignments); {len(self.rotations)} "
                     f"rotation keys at {self.slots} slots")
        if self.params is None:
            lines.append(f"parameters: none: {self.refusal}")
        else:
            p = self.params
            lines.append(f"parameters: N=2^{p.log_n}, {p.max_level} levels, scale 2^{p.log_scale}, "
                         f"log2(QP)={p.log_qp:.1f}, security {p.security}; Galois keys ~"
                         f"{self.galois_key_bytes / 2**20:.1f} MiB")
        return "\n".join(lines)


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


def _record(model: GraphApproximation, x: np.ndarray, slots: int) -> tuple[int, tuple]:
    """(levels consumed, rotation steps) of the evaluation of one sample at ``slots`` slots."""
    from .nn import LevelRecorder, RotationRecorder
    from .tensor import encrypt

    levels = LevelRecorder(slots)
    model.forward(encrypt(levels, x))
    rotations = RotationRecorder(slots)
    model.forward(encrypt(rotations, x))
    return levels.consumed, tuple(sorted(s for s in rotations.steps if s % slots))


def plan_attention(graph, calibration, *, params=None, allow_insecure: bool = False,
                   key_budget: int = DEFAULT_KEY_BUDGET, activation_degree: int = 7,
                   tolerance: float = 1e-4) -> tuple[AttentionPlan, GraphApproximation]:
    """(plan, calibrated model) of ``graph`` on the float batch ``calibration``; ``params``: CKKSParameters with
    at least the measured depth (ParameterError otherwise; below 128 bits only with ``allow_insecure``), or None
    for the smallest 128-bit ring with that depth whose keys fit ``key_budget`` (the plan's ``refusal`` says
    why when there is none)."""
    if calibration is None:
        raise ParameterError("a model with attention needs calibration inputs (--calibration x.npy): Softmax, "
                             "LayerNorm and the activations are approximated on the ranges they take there")
    batch, _ = _batch(graph, calibration)
    model = approximate(graph, batch, activation_degree=activation_degree, tolerance=tolerance)
    exact = graph.forward(batch)
    error = float(np.max(np.abs(model.forward(batch) - exact)))
    by_name = {node.name: node for node in graph.nodes}
    approximations = tuple((name, _describe(by_name[name], model.approximations[name]), model.errors[name])
                           for name in model.errors)
    low, high = float(batch.min()), float(batch.max())
    pad = MARGIN * max(high - low, 1e-6)
    sample = batch[:1]
    refusal = None
    fix = ("bootstraps are not placed on the attention path yet: name parameters with at least {} levels (--params; "
           "below 128 bits only with --insecure, for tests)").format
    if params is not None:
        if not allow_insecure:
            require_secure(params, "the parameters named", "--insecure (allow_insecure=True)")
        depth, rotations = _record(model, sample, params.slots)
        if depth + ALIGNMENT_LEVELS > params.max_level:
            raise ParameterError(f"the model consumes {depth} levels (+{ALIGNMENT_LEVELS} for scale alignments) but "
                                 f"the parameters named hold {params.max_level}: name parameters with at least "
                                 f"{depth + ALIGNMENT_LEVELS} levels (bootstraps "
                                 f"are not placed on the attention path yet)")
        slots = params.slots
    else:
        depth, rotations = _record(model, sample, _DEFAULT_SLOTS)
        slots = _DEFAULT_SLOTS
        try:
            chosen = choose_parameters(depth + ALIGNMENT_LEVELS, 1)
        except ParameterError as why:
            chosen = None
            refusal = (f"the model consumes {depth} levels, more than a 128-bit ring holds ({why}); "
                       f"{fix(depth + ALIGNMENT_LEVELS)}")
        if chosen is not None:
            depth, at_slots = _record(model, sample, chosen.slots)
            if depth + ALIGNMENT_LEVELS > chosen.max_level:  # another slot count, another layout: its own depth
                chosen = choose_parameters(depth + ALIGNMENT_LEVELS, 1)
                depth, at_slots = _record(model, sample, chosen.slots)
            keys = _key_bytes(chosen, len(at_slots))
            if keys <= key_budget:
                params, rotations, slots = chosen, at_slots, chosen.slots
            else:
                refusal = (f"the model consumes {depth} levels; the smallest 128-bit ring with them "
                           f"(N=2^{chosen.log_n}, {len(chosen.digits)} key-switching digits) needs "
                           f"{keys / 2**20:.0f} MiB of Galois keys for {len(at_slots)} rotations, over the key "
                           f"budget of {key_budget / 2**20:.0f} MiB (the deepest 128-bit preset without "
                           f"bootstrapping holds {deepest_secure_preset()[1]} levels); "
                           f"{fix(depth + ALIGNMENT_LEVELS)}")
    plan = AttentionPlan(tuple(graph.input_shape), tuple(graph.output_shape), _operators(graph), approximations,
                         error, float(np.max(np.abs(exact))), int(depth), tuple(rotations), slots, params, refusal,
                         (low - pad, high + pad), len(batch))
    return plan, model


def _key_bytes(params, rotations: int) -> int:
    """Estimated Galois key bytes: per key, digits x 2 x (Q + P limbs) x N x 4 (as ``ModelPlan``)."""
    return rotations * len(params.digits) * 2 * (len(params.q_moduli) + len(params.p_moduli)) * params.n * 4


def samples_outside(plan: AttentionPlan, model: GraphApproximation, x) -> dict:
    """{sample index: the first calibrated range its plain reference leaves (text)}: the input range, a Softmax's
    shift (x <= c), exponent range or row-sum range, a LayerNorm's variance range, an activation's interval."""
    graph = model.graph
    batch, _ = _batch(graph, x)
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
                  report=None) -> np.ndarray:
    """Keys, encryption, encrypted evaluation and decryption of ``x`` (one sample or a batch) in this process;
    InputRangeError naming the samples whose plain reference leaves a calibrated range (nothing is computed
    then). ``report``: a callable given one line per step (keys, encryption, evaluation)."""
    import time

    from crypto.context import CKKSContext

    from .tensor import encrypt

    batch, single = _batch(model.graph, x)
    outside = samples_outside(plan, model, batch)
    if outside:
        first = min(outside)
        raise InputRangeError(f"refused: samples {sorted(outside)} leave the model's calibrated ranges (sample "
                              f"{first}: {outside[first]}); the approximations are only right inside them, so "
                              f"nothing was computed (recalibrate on inputs like these)", sorted(outside))
    params = plan.require_parameters()
    depth, steps = _record(model, batch, params.slots) if len(batch) > 1 else (plan.depth, plan.rotations)
    if depth + ALIGNMENT_LEVELS > params.max_level:  # a batch packs otherwise than the one sample planned
        raise ParameterError(f"a batch of {len(batch)} samples consumes {depth} levels (+{ALIGNMENT_LEVELS}), more "
                             f"than the plan's {params.max_level}: send fewer samples at once")
    rotations = tuple(sorted(set(plan.rotations) | set(steps)))
    say = report or (lambda text: None)
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
    return out[0] if single else out

