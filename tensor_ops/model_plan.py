"""The compiled form of a model and its encrypted-inference plan (public, known before any key exists).

``AffineStage`` / ``ActivationStage``: what ``Sequential.compile`` folds a model's layers into. ``ModelPlan``:
the packed layout (``block`` slots per sample, ``batch`` samples per ciphertext), each stage's baby-step /
giant-step rotations, the Galois keys they need, operation counts and a time model; ``choose_parameters``:
the smallest secure CKKS parameters for a depth. The server half that runs a plan is ``tensor_ops.inference``.
"""
from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass, field, replace

import numpy as np

from crypto.errors import ParameterError, ShapeError
from crypto.params import CKKSParameters
from tensor_ops.activations import PolyActivation
from tensor_ops.lowering import LayerLowering
from tensor_ops.plan.cost import CostModel


@dataclass(frozen=True, eq=False)
class AffineStage:
    """x -> matrix @ x + bias on flattened samples; what the server evaluates as one encrypted matmul."""

    matrix: np.ndarray
    bias: np.ndarray

    def __post_init__(self):
        for name in ("matrix", "bias"):
            array = np.array(getattr(self, name), dtype=np.float64)
            array.setflags(write=False)
            object.__setattr__(self, name, array)

    @property
    def depth(self):
        return 1

    def apply(self, x):
        return x @ self.matrix.T + self.bias


@dataclass(frozen=True, eq=False)
class ActivationStage:
    """t -> p(t) elementwise, t already normalised by the affine stage before."""

    poly: PolyActivation

    @property
    def depth(self):
        return self.poly.depth

    def apply(self, x):
        result = self.poly.evaluate(x)
        return result if not isinstance(result, float) else np.full_like(x, result)



# ----------------------------------------------------------------------------------------------------------
# Encrypted evaluation: every affine stage as a block-diagonal matrix-vector product by the diagonal
# method with baby-step/giant-step rotations (Halevi and Shoup, "Algorithms in HElib", CRYPTO 2014;
# "Faster homomorphic linear transformations in HElib", CRYPTO 2018).
#
# Layout: sample b of a ciphertext sits in slots [b*block, b*block + n) with zeros after it, block a power
# of two >= every stage's width, so one ciphertext carries slots // block samples. On the whole slot
# vector v the stage is the block-diagonal map L = I (x) M, and L v = sum_k d_k * rot(v, k) with
# d_k[b*block + r] = M[r, r + k]: only offsets -(n_out - 1) <= k <= n_in - 1 occur and a row r >= n_out
# or a column outside [0, n_in) contributes zero, so the output is again clean in the same layout (no
# masks, no extra level) and whatever the activation leaves in the padding is never read.
# With k = m_j + i (0 <= i < g): L v = sum_j rot(sum_i rot(d_{m_j + i}, -m_j) * rot(v, i), m_j), so
# g - 1 hoisted baby rotations and one giant rotation per j replace one rotation per diagonal.

@dataclass(frozen=True)
class StagePlan:
    """Public description of one stage: an affine map's rotations, or an activation's depth."""

    kind: str
    n_in: int
    n_out: int
    depth: int
    baby: tuple[int, ...] = ()
    giant: tuple[int, ...] = ()
    diagonals: int = 0
    ct_ct_multiplications: int = 0

    @property
    def rotations(self) -> tuple[int, ...]:
        return tuple(sorted(set(self.baby) | set(self.giant)))


def _offsets(matrix):
    """The offsets k with a nonzero diagonal d_k[r] = M[r, r + k]."""
    rows, cols = np.nonzero(matrix)
    return np.unique(cols - rows)


def _split(offsets, g):
    """(baby steps, giant steps) writing every offset k as low + g*j + i with 0 <= i < g."""
    low = int(offsets[0])
    shifted = offsets.astype(np.int64) - low
    giant = tuple(int(v) for v in np.unique(low + g * (shifted // g)))
    baby = tuple(int(v) for v in np.unique(shifted % g))
    return baby, giant


def stage_plans(stages, n_in):
    """One StagePlan per stage; the baby-step size g is shared by all affine stages and chosen to minimise
    the number of distinct rotations (Galois keys), then the number of key switches."""
    offsets = [_offsets(s.matrix) if isinstance(s, AffineStage) else None for s in stages]
    spans = [int(o[-1] - o[0]) + 1 for o in offsets if o is not None and len(o)]
    best = None
    widest = max(spans, default=1)
    # about sqrt(span) baby and giant steps each is optimal for a dense band; look a few times beyond it
    for g in range(1, min(widest, 4 * math.isqrt(widest) + 4) + 1):
        splits = [_split(o, g) if o is not None and len(o) else ((), ()) for o in offsets]
        keys = {k for baby, giant in splits for k in baby + giant} - {0}
        switches = sum(sum(1 for k in baby + giant if k) for baby, giant in splits)
        if best is None or (len(keys), switches) < best[0]:
            best = ((len(keys), switches), splits)
    plans = []
    for stage, offs, (baby, giant) in zip(stages, offsets, best[1]):
        if isinstance(stage, ActivationStage):
            ct_ct, _ = stage.poly.multiplications
            plans.append(StagePlan("activation", n_in, n_in, stage.depth, ct_ct_multiplications=ct_ct))
        else:
            plans.append(StagePlan("affine", stage.matrix.shape[1], stage.matrix.shape[0], 1, baby, giant, len(offs)))
            n_in = stage.matrix.shape[0]
    return tuple(plans)


# Time model: seconds per operation at N = 2^13 with 5 + 2 limbs of 30 bits, measured on this machine (re-measured
# 2026-11-21 after the crypto kernels got faster; the plan's estimate was 5x too high before)
# (baby-step rotations are hoisted, hence cheaper; a ct x ct product includes relinearization and rescale), scaled
# linearly in N and in the number of limbs. Used by ``ModelPlan.estimated_seconds``.
_SECONDS = {"baby_rotation": 0.0015, "giant_rotation": 0.0025, "ct_ct": 0.0026, "ct_pt": 0.00008, "rescale": 0.0007,
            "encode": 0.0006}
_REFERENCE_SIZE = (1 << 13) * 7

_LOG_SCALE = 30


def choose_parameters(depth: int, min_slots: int = 1, log_scale: int = _LOG_SCALE):
    """The smallest 128-bit-secure CKKS parameters with exactly ``depth`` levels and >= ``min_slots`` slots.

    Levels are one 30-bit prime each (scale 2^30, about 20 bits of precision after a few levels), the base
    level two primes (2^30 of headroom for the outputs), two special primes, and the fewest key-switching
    digits the noise check accepts (fewer digits, smaller keys). Cached: the parameters are immutable and
    building them (finding NTT primes) takes about a second.
    """
    if isinstance(depth, bool) or not isinstance(depth, (int, np.integer)) or depth < 0:
        raise ParameterError(f"depth={depth!r} must be a non-negative integer")
    return _choose_parameters(int(depth), max(1, int(min_slots)), int(log_scale))


@functools.lru_cache(maxsize=32)
def _choose_parameters(depth: int, min_slots: int, log_scale: int):
    """``choose_parameters`` after validation (memoised)."""
    last_error = None
    for log_n in range(max(13, (2 * min_slots - 1).bit_length()), 18):
        n_q = 2 + depth
        for dnum in range(1, n_q + 1):
            literal = dict(log_n=log_n, log_q=[[30, 30]] + [[log_scale]] * depth, log_p=[30, 30],
                           log_scale=log_scale, dnum=dnum)
            try:
                return CKKSParameters.from_literal(literal)
            except ParameterError as error:
                last_error = error
                if "HE-standard" in str(error):
                    break
    raise ParameterError(f"depth={depth} needs more levels than any 128-bit ring up to N=2^17 holds ({last_error})")


class _CallableInt(int):
    """An int that returns itself when called (``plan.depth`` and ``plan.depth()`` both work)."""

    def __call__(self):
        return int(self)


class _CallableTuple(tuple):
    """A tuple that returns itself when called (``plan.rotations`` and ``plan.rotations()`` both work)."""

    def __call__(self):
        return tuple(self)


DEFAULT_KEY_BUDGET = 12 << 30  # bytes: half of a 24 GB machine (the keys share it with weights and ciphertexts)


@dataclass(frozen=True)
class ModelPlan:
    """What encrypted inference of a model will cost, known before any key exists.

    ``block`` slots per sample, ``batch`` samples per ciphertext, inputs encrypted at ``input_level``
    (= ``depth``, so the output arrives at level 0), Galois keys for ``rotations`` only.
    """

    params: CKKSParameters
    input_shape: tuple[int, ...]
    output_shape: tuple[int, ...]
    block: int
    stages: tuple[StagePlan, ...]
    layers: tuple[LayerLowering, ...] = ()
    costs: CostModel | None = field(default=None, compare=False, repr=False)  # measured times (``calibrated``)
    model: str | None = None  # the model's identity: hex sha256 digest (``Sequential.identity``), carried by requests
    key_budget: int | None = None  # bytes the public keys may take (``Sequential.plan`` refuses a plan above it)

    @property
    def depth(self) -> int:
        """Levels consumed; an int that may also be called, like ``tensor_ops.Plan.depth()``."""
        return _CallableInt(sum(stage.depth for stage in self.stages))

    @property
    def input_level(self) -> int:
        return int(self.depth)

    @property
    def batch(self) -> int:
        return self.params.slots // self.block

    @property
    def rotations(self) -> tuple[int, ...]:
        """Rotation steps needing a Galois key (a tuple that may also be called, like ``Plan.rotations()``)."""
        steps = set()
        for stage in self.stages:
            steps.update(stage.rotations)
        steps.discard(0)
        return _CallableTuple(sorted(steps))

    @property
    def keys(self) -> dict:
        """The evaluation keys the client must make: Galois keys (steps, estimated bytes), relinearization."""
        return {"rotations": tuple(self.rotations), "galois_keys": len(self.rotations),
                "galois_key_bytes": self.galois_key_bytes, "relinearization": self.needs_relinearization}

    def cost(self) -> dict:
        """Operation counts per ciphertext and the time estimates in seconds."""
        return dict(self.operation_counts(), seconds=self.estimated_seconds, setup_seconds=self.estimated_setup_seconds)

    @property
    def needs_relinearization(self) -> bool:
        return any(stage.ct_ct_multiplications for stage in self.stages)

    @property
    def galois_key_bytes(self) -> int:
        """Estimated bytes of the Galois keys: per key, digits x 2 polynomials x (Q + P limbs) x N x 4."""
        params = self.params
        limbs = len(params.q_moduli) + len(params.p_moduli)
        return len(self.rotations) * len(params.digits) * 2 * limbs * params.n * 4

    @staticmethod
    def _stage_counts(stage) -> dict:
        return {"baby_rotation": sum(1 for b in stage.baby if b), "giant_rotation": sum(1 for m in stage.giant if m),
                "ct_pt": stage.diagonals, "encode": stage.diagonals, "ct_ct": stage.ct_ct_multiplications,
                "rescale": 1 if stage.kind == "affine" else 0}

    def operation_counts(self) -> dict:
        """Homomorphic operations per ciphertext (``encode``: plaintext diagonals, once per server)."""
        counts = {}
        for stage in self.stages:
            for op, count in self._stage_counts(stage).items():
                counts[op] = counts.get(op, 0) + count
        return counts

    def calibrated(self, costs: CostModel | None = None) -> "ModelPlan":
        """This plan with its time estimates from ``costs`` (default: ``CostModel.measure(self.params)``, about a
        second: per-operation times measured on this machine) instead of the built-in table."""
        costs = CostModel.measure(self.params) if costs is None else costs
        if not isinstance(costs, CostModel) or not costs.rotation_seconds:
            raise ParameterError(f"costs={costs!r} must be a measured CostModel (CostModel.measure(params))")
        return replace(self, costs=costs)

    def _table(self, size: int) -> dict:
        """Seconds per operation at parameters of ``size`` = N x (limbs + P limbs): measured (``calibrated``) or
        the built-in table scaled from its reference size."""
        if self.costs is None:
            return {op: t * size / _REFERENCE_SIZE for op, t in _SECONDS.items()}
        c = self.costs
        return {"baby_rotation": c.seconds("hoisted_rotation", size), "giant_rotation": c.seconds("rotation", size),
                "ct_ct": c.seconds("ct_mult", size) + c.seconds("rescale", size),
                "ct_pt": c.seconds("pt_mult", size), "rescale": c.seconds("rescale", size),
                "encode": c.seconds("encode", size)}

    def _seconds(self, operations) -> float:
        """The time model, each stage scaled by the limbs of the level it runs at."""
        total, level = 0.0, self.input_level
        for stage in self.stages:
            table = self._table(self.params.n * (self.params.limbs_at(level) + len(self.params.p_moduli)))
            counts = self._stage_counts(stage)
            total += sum(table[op] * counts[op] for op in operations)
            if self.costs is not None and "rescale" in operations and stage.kind == "affine":
                # measured model only: the baby steps' shared decomposition (the first one costs a whole
                # rotation) and the bias, encoded and added on every evaluation
                total += (table["giant_rotation"] - table["baby_rotation"]) * bool(counts["baby_rotation"])
                total += table["encode"]
            level -= stage.depth
        return total

    @property
    def estimated_seconds(self) -> float:
        """Server time per ciphertext (``batch`` samples) from the operation counts and the time model."""
        return self._seconds(("baby_rotation", "giant_rotation", "ct_ct", "ct_pt", "rescale"))

    @property
    def estimated_throughput(self) -> float:
        """Samples per second of server time with full ciphertexts (``batch`` / ``estimated_seconds``)."""
        return self.batch / self.estimated_seconds if self.estimated_seconds > 0 else math.inf

    @property
    def estimated_setup_seconds(self) -> float:
        """One-time server cost of encoding the plaintext diagonals."""
        return self._seconds(("encode",))

    def explain(self) -> str:
        lines = [f"encrypted inference plan: input {self.input_shape} -> output {self.output_shape}",
                 f"  parameters: {self.params!r}",
                 f"  packing: {self.block} slots per sample, {self.batch} samples per ciphertext, "
                 f"inputs at level {self.input_level}"]
        if self.layers:
            lines.append("  layers, each lowered to an einsum with plaintext weights:")
            lines += [f"    {layer.describe()}" for layer in self.layers]
        for i, stage in enumerate(self.stages):
            if stage.kind == "affine":
                lines.append(f"  stage {i}: affine {stage.n_in} -> {stage.n_out}, {stage.diagonals} diagonals, "
                             f"baby steps {len(stage.baby)}, giant steps {len(stage.giant)}, depth 1")
            else:
                lines.append(f"  stage {i}: polynomial activation, {stage.ct_ct_multiplications} ct x ct "
                             f"multiplications, depth {stage.depth}")
        if self.model is not None:
            lines.append(f"  model digest (sha256 of the model, carried by requests and replies): {self.model}")
        budget = "" if self.key_budget is None else f" of a key budget of {self.key_budget / 2**30:.3g} GiB"
        lines.append(f"  depth {self.depth}, {len(self.rotations)} rotation keys "
                     f"(~{self.galois_key_bytes / 2**20:.1f} MiB{budget}), relinearization key: "
                     f"{self.needs_relinearization}")
        source = ("per-operation times measured on this machine" if self.costs is not None else
                  "built-in per-operation times of the development machine; plan.calibrated() measures this one")
        lines.append(f"  estimated time: {self.estimated_seconds:.2f} s per ciphertext of {self.batch} samples "
                     f"(+ {self.estimated_setup_seconds:.2f} s once to encode the weights), "
                     f"~{self.estimated_throughput:.0f} samples/s with full ciphertexts; warm: excludes JIT "
                     f"compilation on a fresh install's first run (seconds) ({source})")
        return "\n".join(lines)

    __str__ = explain

    def to_dict(self) -> dict:
        """Public, JSON-serialisable description (what a client needs to make keys and pack inputs)."""
        return {"params": self.params.to_dict(), "input_shape": list(self.input_shape),
                "output_shape": list(self.output_shape), "block": self.block,
                "stages": [dict(vars(stage), baby=list(stage.baby), giant=list(stage.giant)) for stage in self.stages],
                "layers": [dict(vars(layer), input_shape=list(layer.input_shape), output_shape=list(layer.output_shape))
                           for layer in self.layers], "model": self.model, "key_budget": self.key_budget}

    @classmethod
    def from_dict(cls, data: dict) -> "ModelPlan":
        try:
            stages = tuple(StagePlan(**dict(s, baby=tuple(s["baby"]), giant=tuple(s["giant"]))) for s in data["stages"])
            layers = tuple(LayerLowering(**dict(layer, input_shape=tuple(layer["input_shape"]),
                                                output_shape=tuple(layer["output_shape"])))
                           for layer in data.get("layers", ()))
            model = data.get("model")
            if model is not None and not (isinstance(model, str) and re.fullmatch(r"[0-9a-f]{64}", model)):
                raise ParameterError(f"model plan: model={model!r:.80} must be a hex sha256 digest or null")
            return cls(CKKSParameters.from_dict(data["params"]), tuple(data["input_shape"]),
                       tuple(data["output_shape"]), int(data["block"]), stages, layers, model=model,
                       key_budget=None if data.get("key_budget") is None else int(data["key_budget"]))
        except (KeyError, TypeError, ValueError) as error:
            if isinstance(error, ParameterError):
                raise
            raise ParameterError(f"malformed model plan: {error!r}") from None

    def __reduce__(self):
        """Pickle through the public description (``to_dict``, validated again by ``from_dict``) and the cost
        model, if any."""
        return _plan_from_pickle, (self.to_dict(), self.costs)

    # -- packing -------------------------------------------------------------------------------------
    def pack(self, x) -> list[np.ndarray]:
        """Slot vectors (one per ciphertext) holding the samples of x, one per ``block`` slots."""
        return pack_samples(x, self.input_shape, self.block, self.params.slots)

    def unpack(self, vectors, count: int) -> np.ndarray:
        """The (count, *output_shape) outputs from decrypted slot vectors."""
        return unpack_samples(vectors, count, self.output_shape, self.block, self.params.slots)

    def with_block(self, block: int) -> "ModelPlan":
        """The same plan with ``block`` slots per sample (a power of two from the plan's block to slots)."""
        if isinstance(block, bool) or not isinstance(block, (int, np.integer)) or block & (block - 1) \
                or not self.block <= block <= self.params.slots:
            raise ShapeError(f"block={block!r} must be a power of two in [{self.block}, slots={self.params.slots}]")
        return replace(self, block=int(block))

    def ciphertexts_for(self, count: int) -> int:
        return -(-int(count) // self.batch)


def batch_of(x, sample_shape):
    """(x as (batch, *sample_shape), single) or a ShapeError naming both shapes."""
    x = np.asarray(x, dtype=np.float64)
    single = x.shape == tuple(sample_shape)
    if single:
        x = x[None]
    if x.ndim == 0 or x.shape[1:] != tuple(sample_shape) or x.shape[0] < 1:
        raise ShapeError(f"input shape {x.shape} is neither the model's {tuple(sample_shape)} "
                         f"nor (batch, *{tuple(sample_shape)}) with batch >= 1")
    if not np.all(np.isfinite(x)):
        raise ShapeError("input contains non-finite values (nan or inf)")
    return x, single


def pack_samples(x, sample_shape, block, slots) -> list[np.ndarray]:
    """Slot vectors with sample b of each ciphertext, flattened, in slots [b*block, b*block + n), zeros after."""
    x, _ = batch_of(x, sample_shape)
    flat = x.reshape(x.shape[0], -1)
    if flat.shape[1] > block:
        raise ShapeError(f"a sample of {flat.shape[1]} values does not fit block={block} slots")
    per_ct = slots // block
    vectors = []
    for start in range(0, len(flat), per_ct):
        chunk = flat[start:start + per_ct]
        packed = np.zeros((per_ct, block))
        packed[:len(chunk), :flat.shape[1]] = chunk
        vectors.append(packed.reshape(-1))
    return vectors


def unpack_samples(vectors, count, output_shape, block, slots) -> np.ndarray:
    """The (count, *output_shape) values from slot vectors packed like ``pack_samples``."""
    n_out = math.prod(output_shape)
    rows = np.concatenate([np.asarray(v)[:slots].real.reshape(slots // block, block)[:, :n_out] for v in vectors])
    return rows[:count].reshape(count, *output_shape)


def _plan_from_pickle(data: dict, costs) -> ModelPlan:
    """Inverse of ``ModelPlan.__reduce__``."""
    plan = ModelPlan.from_dict(data)
    return plan if costs is None else replace(plan, costs=costs)
