"""Client/server split of encrypted inference: the client keeps the secret key, the server sees bytes.

    plan = model.plan()                              # public: parameters, packing, rotations (server side)
    client = Client(plan=plan)                       # keys for exactly plan.rotations
    server = Server(model, client.public_context())  # bytes, no secret key inside
    reply = server.evaluate(client.encrypt(x))       # bytes -> bytes
    y = client.decrypt(reply)                        # numpy, equal to model.forward(x) up to CKKS noise

``EncryptedModel`` runs a plan's stages on one ciphertext (diagonal method with baby-step/giant-step
rotations for the affine stages, the activation schedule on ciphertexts), composing any rotation the
context has no key for from the keys it has.

Requests, replies and the saved client are records of the one hezk container (:mod:`hezk.record`, kinds
``tensor_ops.Request`` / ``Reply`` / ``Client``): a request or reply's meta is its header (the key set, the
number of samples and ciphertexts, the sample (or output) shape and the slots per sample), its arrays the
ciphertexts' own records; every length, the checksum, the kind and every field are checked before use.
"""
from __future__ import annotations

import contextlib
import math
import os
import threading
import warnings
from collections import OrderedDict

import numpy as np

import hezk.record
from hezk.record import RecordError
from crypto.ckks.flooding import STATISTICAL_SECURITY
from crypto.context import CKKSContext, as_parameters, check_value_bound
from crypto.errors import (ContextMismatchError, HEError, HEWarning, KeyMissingError, LevelError, ParameterError,
                           SerializationError, ShapeError)
from crypto.ckks.evaluator_protocol import CKKSEvaluator
from crypto.ckks.linear import bsgs_sum
from crypto.rlwe import Ciphertext
from tensor_ops.model_plan import (DEFAULT_KEY_BUDGET, ActivationStage, ModelPlan, batch_of, einsum_stage,
                                  known_paddings, pack_samples, unpack_samples)
from tensor_ops.plan.affine import EvaluatorBackend
from tensor_ops.packing import PackedAffine, PackedFork, PackedJoin, packed_stages, release_sparse_maps
from tensor_ops.nn import Sequential
from tensor_ops.progress import as_progress

MAGIC = hezk.record.MAGIC  # every record's, messages included
REQUEST_KIND, REPLY_KIND, CLIENT_KIND = "tensor_ops.Request", "tensor_ops.Reply", "tensor_ops.Client"
_MESSAGE_KINDS = {"request": REQUEST_KIND, "reply": REPLY_KIND}
_CONTEXT_KINDS = ("crypto.PublicContext", "crypto.FullContext")
DEFAULT_MAX_CIPHERTEXTS = 64


# ---------------------------------------------------------------------------------------------------------
# Server-side execution of a ModelPlan (the layout and the diagonal method are described in tensor_ops.nn).

def _diagonal_vectors(stage, plan_stage, block, slots):
    """For each giant step m: the list of (baby step i, a callable giving rot(d_{m+i}, -m) tiled over the
    blocks), so a caller can make one slot vector at a time (the diagonals themselves are block-long)."""
    result = {}
    for k, diagonal in sorted(stage.diagonal_makers(block).items()):
        m, i = plan_stage.split(k)
        result.setdefault(m, []).append((i, lambda d=diagonal, m=m: np.roll(np.tile(d(), slots // block), m)))
    return result


def _keeps(encoded, size: int) -> bool:
    """Whether the weights store ``encoded`` keeps a stage of ``size`` encoded bytes (a dict keeps all; an
    ``EncodedCache`` what fits its bound): a stage it would not keep is encoded one plaintext at a time where
    it is used, never held whole."""
    return size <= getattr(encoded, "max_bytes", size)


def rotation_routes(needed, available, slots) -> dict:
    """For each needed step, the shortest sequence of available key steps (as the context names them)
    whose sum is the step modulo ``slots`` (breadth-first search in Z_slots), so a context with e.g.
    power-of-two keys still serves the plan. An unreachable step raises ``KeyMissingError`` naming it."""
    keys = {int(k) % slots: int(k) for k in available if int(k) % slots}
    parent = {0: None}
    frontier = [0]
    targets = {int(k) % slots for k in needed}
    while frontier and not targets <= parent.keys():
        following = []
        for node in frontier:
            for residue, key in keys.items():
                nxt = (node + residue) % slots
                if nxt not in parent:
                    parent[nxt] = (node, key)
                    following.append(nxt)
        frontier = following
    unreachable = sorted(int(k) for k in needed if int(k) % slots not in parent)
    if unreachable:
        raise KeyMissingError(f"the context lacks Galois keys for rotations {unreachable} and cannot compose "
                              f"them from its keys {sorted(keys.values())}")
    routes = {0: ()}
    for k in needed:
        path, node = [], int(k) % slots
        while parent[node] is not None:
            node, key = parent[node]
            path.append(key)
        routes[int(k)] = tuple(path)
    return routes


def model_evaluator(context, evaluator=None):
    """The evaluator a model plan runs on: ``context.evaluator`` (None), an evaluator of the context's keys
    (a ``CKKSEvaluator``: host or device) or a callable making one from the context (e.g. ``DeviceEvaluator``
    itself, for a server that receives its context as bytes)."""
    if evaluator is None:
        return context.evaluator
    if isinstance(evaluator, type) or not isinstance(evaluator, CKKSEvaluator):
        if not callable(evaluator):
            raise ParameterError(f"evaluator must be a CKKSEvaluator (crypto.ckks.evaluator_protocol) or a callable "
                                 f"making one from the context, got {type(evaluator).__name__}")
        evaluator = evaluator(context)
        if not isinstance(evaluator, CKKSEvaluator):
            raise ParameterError(f"the evaluator factory returned {type(evaluator).__name__}, not a CKKSEvaluator")
    if evaluator.key_id != context.key_id or evaluator.fingerprint != context.params.fingerprint:
        raise ContextMismatchError(f"the evaluator holds key set {evaluator.key_id.hex()[:12]}…, the context "
                                   f"{context.key_id.hex()[:12]}…: make it from this context")
    return evaluator


class _Encrypted:
    """A ciphertext with + and * through an explicit evaluator, so the activation schedule runs on it."""

    __slots__ = ("ct", "evaluator")

    def __init__(self, ct, evaluator):
        self.ct, self.evaluator = ct, evaluator

    def __mul__(self, other):
        other = other.ct if isinstance(other, _Encrypted) else other
        return _Encrypted(self.evaluator.mul_rescale(self.ct, other), self.evaluator)

    def __add__(self, other):
        other = other.ct if isinstance(other, _Encrypted) else other
        return _Encrypted(self.evaluator.add(self.ct, other), self.evaluator)

    def __neg__(self):
        return _Encrypted(self.evaluator.neg(self.ct), self.evaluator)


def _encoded_bytes(value) -> int:
    """Bytes of one stage's encoded diagonals ({giant step: [(baby step, Plaintext)]})."""
    return sum(pt.poly.data.nbytes for pairs in value.values() for _, pt in pairs)


class EncodedCache:
    """The encoded weights shared by the servers of one model, least recently used first, at most
    ``max_bytes`` bytes of plaintext polynomials: storing past the bound drops the least recently used stages
    (a server that needs one again encodes it again). Thread-safe (servers evaluate in worker threads). Used
    as ``encoded=`` of ``Server`` / ``EncryptedModel`` (``get`` and item assignment)."""

    def __init__(self, max_bytes: int):
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, (int, np.integer)) or max_bytes <= 0:
            raise ParameterError(f"max_bytes={max_bytes!r} must be a positive integer")
        self.max_bytes = int(max_bytes)
        self._entries: OrderedDict = OrderedDict()  # key -> (value, bytes)
        self._bytes = 0
        self._lock = threading.Lock()

    def __len__(self):
        return len(self._entries)

    @property
    def nbytes(self) -> int:
        return self._bytes

    def get(self, key, default=None):
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return default
            self._entries.move_to_end(key)
            return entry[0]

    def __contains__(self, key):
        return key in self._entries

    def __setitem__(self, key, value):
        size = _encoded_bytes(value)
        with self._lock:
            previous = self._entries.pop(key, None)
            self._bytes -= 0 if previous is None else previous[1]
            if size > self.max_bytes:
                return  # larger than the whole cache: used once by its caller, not kept
            while self._entries and self._bytes + size > self.max_bytes:
                _, (_, gone) = self._entries.popitem(last=False)
                self._bytes -= gone
            self._entries[key] = (value, size)
            self._bytes += size


class EncryptedModel:
    """The server half of a plan: encoded diagonals cached once, then ``forward(ciphertext)``.

    Built from public material only (an evaluator and a context that can encode plaintexts). Encoded
    diagonals depend on the parameters, not on the keys: servers of one model may share ``encoded``.
    ``evaluator``: any ``crypto.ckks.evaluator_protocol.CKKSEvaluator`` of the context's keys (default the
    host one, ``context.evaluator``; ``crypto.ckks.jax_device.DeviceEvaluator(context)`` runs the plan on the
    device: ``forward`` uploads its ciphertext once and downloads the result).
    """

    def __init__(self, model, plan: ModelPlan, context, encoded: dict | None = None, evaluator=None):
        self.plan = plan
        self._context = context
        self._evaluator = model_evaluator(context, evaluator)
        self._stages, _ = packed_stages(model, plan.input_shape, plan.choices, ActivationStage)
        release_sparse_maps(model.layers)  # the planner's copy of the maps: the stages hold what is evaluated
        kinds = tuple("fork" if isinstance(s, PackedFork) else "join" if isinstance(s, PackedJoin) else "affine"
                      if isinstance(s, PackedAffine) else "activation" for s in self._stages)
        if kinds != tuple(s.kind for s in plan.stages):
            raise ShapeError(f"the model compiles to the stages {kinds}, the plan has "
                             f"{tuple(s.kind for s in plan.stages)}")
        self._encoded = {} if encoded is None else encoded
        self._routes = rotation_routes(plan.stage_rotations, context.rotation_steps, plan.params.slots)
        # stages the plan runs by the einsum planner's plan (``tensor_ops.plan.affine``): built and checked here
        paddings = known_paddings(self._stages, plan.packed_width)
        self._einsum = {i: einsum_stage(stage, s, paddings[i], plan.block, plan.params.slots)
                        for i, (stage, s) in enumerate(zip(self._stages, plan.stages)) if s.strategy == "einsum"}
        if plan.bootstraps:  # the bootstrap rotates by its own steps: each needs its key
            missing = sorted(set(plan.bootstrap_plan.rotation_steps) - set(context.rotation_steps))
            if missing or not context.has_conjugation_key:
                raise KeyMissingError(f"the plan bootstraps before stages {list(plan.bootstraps)}; the context lacks "
                                      f"the bootstrap's Galois keys for rotations {missing[:8]}"
                                      f"{'...' if len(missing) > 8 else ''}"
                                      f"{'' if context.has_conjugation_key else ' and the conjugation key'} "
                                      f"(make keys with Client(plan=...))")
            weight = plan.bootstrap_plan.encapsulation_weight
            keys = getattr(context, "encapsulation_keys", None)
            if weight is not None and (keys is None or keys.weight != weight):
                raise KeyMissingError(f"the plan's bootstrap encapsulates to a sparse secret of weight {weight}; the "
                                      "context lacks its encapsulation keys (make keys with Client(plan=...))")

    def _rotate(self, ct, step):
        for k in self._routes[step]:
            ct = self._evaluator.rotate(ct, k)
        return ct

    def _affine(self, index, stage, plan_stage, ct, scale=None):
        """The stage's map on ``ct``, rescaled; ``scale``: the diagonals' scale (default q_top * Delta /
        ct.scale, so the rescaled output lands exactly on the parameters' scale Delta: the drift that chains of
        ct x ct products leave (each rescale divides by a prime near, not equal to, Delta, and a squaring
        doubles the deviation) stops at every affine stage instead of growing past the modulus, e.g. after a
        MaxPool's 10-level composite sign)."""
        ev, ctx = self._evaluator, self._context
        for step in plan_stage.presum:  # window sums (average pools): no level
            ct = ev.add(ct, self._rotate(ct, step))
        if scale is None:
            params = self.plan.params
            scale = math.prod(params.q_levels[ct.level]) * params.scale / ct.scale
        if index in self._einsum:
            return self._einsum_affine(index, stage, ct, scale)
        key = (self.plan.params.fingerprint, self.plan.block, self.plan.choices_key, index, ct.level, scale)
        encoded = self._encoded.get(key)  # held here: a bounded cache may drop it while this stage runs
        if encoded is None:
            vectors = _diagonal_vectors(stage, plan_stage, self.plan.block, self.plan.params.slots)
            extra = {} if scale is None else {"scale": scale}

            def encode(pairs):
                return ((i, ctx.encode(vector(), level=ct.level, **extra)) for i, vector in pairs)

            size = plan_stage.diagonals * self.plan.params.limbs_at(ct.level) * self.plan.params.n * 8
            if _keeps(self._encoded, size):
                encoded = {m: list(encode(pairs)) for m, pairs in vectors.items()}
                self._encoded[key] = encoded
                groups = encoded.items()
            else:  # encoded where used, one plaintext at a time, and dropped (the memory plan's choice)
                groups = ((m, encode(pairs)) for m, pairs in vectors.items())
        else:
            groups = encoded.items()
        single = {i: self._routes[i][0] for i in plan_stage.baby if len(self._routes[i]) == 1}
        hoisted = ev.rotate_hoisted(ct, sorted(set(single.values()))) if single else {}
        rotated = {i: hoisted[key] for i, key in single.items()}
        rotated.update({i: self._rotate(ct, i) for i in plan_stage.baby if i not in rotated})
        total = ev.rescale(bsgs_sum(ev, rotated, groups, rotate=self._rotate))
        return ev.add(total, np.tile(stage.bias_vector(self.plan.block), self.plan.batch))

    def _einsum_affine(self, index, stage, ct, scale):
        """The stage by the einsum planner's plan (its steps rescale), plus the bias less the known padding's
        image (``model_plan.einsum_stage``). Its encoded constants live in the weights store as the packed
        stages' do (one group {0: [(content key, plaintext)]}), kept only when the store keeps a stage that large."""
        plan, weights, correction = self._einsum[index]
        params = self.plan.params
        key = (params.fingerprint, self.plan.block, self.plan.choices_key, index, ct.level, scale, "einsum")
        stored = self._encoded.get(key)
        size = self.plan.stages[index].diagonals * params.limbs_at(ct.level) * params.n * 8
        keep = stored is None and _keeps(self._encoded, size)
        backend = EvaluatorBackend(self._evaluator, self._context.encode, self._routes, params.slots, scale,
                                   encoded=None if stored is None else stored[0], keep=stored is not None or keep)
        (total,) = plan.run(backend, [[ct], weights])
        if keep:
            self._encoded[key] = {0: list(backend.encoded.items())}
        return self._evaluator.add(total, np.tile(stage.bias_vector(self.plan.block), self.plan.batch) - correction)

    def _join(self, index, stage, plan_stage, ct, skip):
        """ct + T(skip): the kept ciphertext dropped to one level above ``ct``, through the join's map with
        diagonals encoded at scale ct.scale * q_top / skip.scale, so the rescaled product's scale is exactly
        ct.scale (no rounding alignment), then added."""
        target = ct.level + 1
        if skip.level < target:
            raise LevelError(f"stage {index}: the residual skip is at level {skip.level}, the branch's output at "
                             f"{ct.level}: the skip needs level >= {target} (a bootstrap inside the block?)")
        skip = self._evaluator.to_level(skip, target)
        scale = ct.scale * math.prod(self.plan.params.q_levels[target]) / skip.scale
        branch = self._affine(index, stage, plan_stage, skip, scale=scale)
        return self._evaluator.add(ct, branch)

    def forward(self, ct, on_stage=None):
        """The model on one ciphertext of ``plan.batch`` packed samples; ``on_stage(index)`` after each stage.
        A bootstrap runs before each stage of ``plan.bootstraps`` (``Evaluator.bootstrap``)."""
        if ct.level < self.plan.input_level:
            raise LevelError(f"ciphertext level={ct.level} is below the model's depth {self.plan.input_level}: "
                             f"encrypt at level {self.plan.input_level} or higher")
        ct = self._evaluator.from_host(ct)  # the identity on the host evaluator; one upload on a device
        if ct.level > self.plan.input_level:
            ct = self._evaluator.to_level(ct, self.plan.input_level)
        bootstraps, kept = set(self.plan.bootstraps), []
        for index, (stage, plan_stage) in enumerate(zip(self._stages, self.plan.stages)):
            if index in bootstraps:
                ct = self._evaluator.bootstrap(ct, self.plan.bootstrap)
            if isinstance(stage, PackedFork):
                kept.append(ct)
            elif isinstance(stage, PackedJoin):
                ct = self._join(index, stage, plan_stage, ct, kept.pop())
            elif isinstance(stage, PackedAffine):
                ct = self._affine(index, stage, plan_stage, ct)
            else:
                result = stage.poly.evaluate(_Encrypted(ct, self._evaluator))
                ct = result.ct if isinstance(result, _Encrypted) else self._evaluator.add(
                    self._evaluator.mul(ct, 0.0), result)
            if on_stage is not None:
                on_stage(index)
        return self._evaluator.to_host(ct)


# ---------------------------------------------------------------------------------------------------------
# Messages, client and server.

def pack_message(kind: str, header: dict, ciphertexts) -> bytes:
    """One record of ``kind`` ("request" / "reply"): the header as its meta, each ciphertext's bytes an array."""
    blobs = [ct.to_bytes() for ct in ciphertexts]
    return hezk.record.pack(_MESSAGE_KINDS[kind], dict(header, kind=kind, ciphertexts=len(blobs)), blobs)


def _record_kind(blob) -> str | None:
    """The container kind of ``blob``, or None when it is no (readable) record."""
    try:
        return hezk.record.peek_kind(blob)
    except RecordError:
        return None


def describe_bytes(blob: bytes) -> str:
    """What a file's bytes are, in words, for error messages: a saved (secret) client, a request or reply, a
    crypto record of some kind, a numpy array or archive, text, or unknown bytes."""
    if hezk.record.is_record(blob):
        return hezk.record.describe(blob)
    if blob.startswith(b"\x93NUMPY"):
        return "a numpy .npy array"
    if blob.startswith(b"PK\x03\x04"):
        return "a zip archive (a model .npz?)"
    if not blob:
        return "an empty file"
    try:
        blob[:256].decode("utf-8")
        return "a text file"
    except UnicodeDecodeError:
        return f"unknown bytes (starting {blob[:8]!r})"


def _is_int(value) -> bool:
    """A JSON integer: bool is an int subclass in Python, and ``true`` is not a count."""
    return isinstance(value, int) and not isinstance(value, bool)


def unpack_message(blob, kind: str, max_ciphertexts: int = DEFAULT_MAX_CIPHERTEXTS) -> tuple[dict, list[bytes]]:
    """(header, ciphertext blobs) of a framed message; malformed bytes raise ``SerializationError``."""
    if not isinstance(blob, (bytes, bytearray, memoryview)):
        raise SerializationError(f"message must be bytes, got {type(blob).__name__}")
    try:
        record = hezk.record.unpack(blob, _MESSAGE_KINDS[kind])
    except RecordError as error:
        raise SerializationError(f"not a readable encrypted-inference {kind}: {error}") from None
    header = record.meta
    if header.get("kind") != kind:
        raise SerializationError(f"message kind={header.get('kind') if isinstance(header, dict) else None!r}, "
                                 f"expected {kind!r}")
    count = header.get("ciphertexts")
    if not _is_int(count) or not 1 <= count <= max_ciphertexts:
        raise SerializationError(f"ciphertexts={count!r} must be an integer in [1, {max_ciphertexts}]")
    if len(record.arrays) != count:
        raise SerializationError(f"message header says ciphertexts={count}, the record holds {len(record.arrays)}")
    try:
        blobs = [hezk.record.array_bytes(record, i, f"ciphertext {i}") for i in range(count)]
    except RecordError as error:
        raise SerializationError(str(error)) from None
    return header, blobs


def _numeric(x) -> np.ndarray:
    """x as a float64 array, or a ShapeError naming what it got (strings, ragged lists, objects)."""
    try:
        return np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError):
        raise ShapeError(f"input x must be a numeric array (one sample or a batch), got {type(x).__name__}") from None


class _CallableBytes(bytes):
    """Bytes that return themselves when called."""

    def __call__(self):
        return bytes(self)


def require_secure(params, what: str, opt_in: str) -> None:
    """ParameterError (one line) unless ``params`` are checked to 128 bits (``params.security_bits``): ``what``
    names their source, ``opt_in`` how the caller accepts insecure ones."""
    if params.security_bits is None or params.security_bits < 128:
        raise ParameterError(f"{what} are not 128-bit secure ({params!r}): a ring or sparse secret chosen by the "
                             f"server may let it recover the secret key, so no keys are made; {opt_in} accepts "
                             f"them (tests only)")


class InputRangeError(ParameterError):
    """Samples outside the plan's calibrated input range (``ModelPlan.input_range``), refused by
    ``Client.encrypt``; ``samples``: their indices in the batch."""

    def __init__(self, message: str, samples=()):
        super().__init__(message)
        self.samples = tuple(int(i) for i in samples)


class InputRangeWarning(HEWarning):
    """``Client.encrypt(..., clip=True)`` clipped samples into the plan's calibrated input range."""


class OutputRangeWarning(HEWarning):
    """``Client.decrypt`` of a reply under a plan stating no output range: the result is not checked."""


#: the OutputRangeWarning of a decryption under a plan (of any packing) that states no output range
UNCHECKED_OUTPUTS = ("the plan states no output range: the decrypted result is unchecked (only non-finite values "
                     "are refused); re-plan or fetch a current plan to have it checked")


class OutputRangeError(HEError):
    """A decrypted reply whose samples leave the plan's output range (``ModelPlan.output_range`` +- its margin,
    or not finite): an activation input left its interval there. ``invalid``: those samples' indices;
    ``ciphertexts``: the ciphertexts that hold them; ``untrusted``: every sample of those ciphertexts (a
    polynomial far outside its interval can exceed the ciphertext's modulus, which corrupts every slot, so no
    sample of such a ciphertext is trusted); ``outputs``: the decrypted values as they came (untrusted rows
    included), for inspection only."""

    def __init__(self, message: str, invalid=(), ciphertexts=(), untrusted=(), outputs=None):
        super().__init__(message)
        self.invalid, self.ciphertexts = tuple(int(i) for i in invalid), tuple(int(i) for i in ciphertexts)
        self.untrusted, self.outputs = tuple(int(i) for i in untrusted), outputs


def _indices(indices, limit: int = 20) -> str:
    """Sample indices for a message: the first ``limit`` of them, and how many in all."""
    indices = [int(i) for i in indices]
    text = ", ".join(map(str, indices[:limit]))
    return f"[{text}{', ...' if len(indices) > limit else ''}]" + (f" ({len(indices)} in all)"
                                                                  if len(indices) > limit else "")


def _checked_inputs(plan, batch, clip: bool):
    """``batch`` when every value lies in the plan's calibrated input range; clipped into it with an
    InputRangeWarning naming the samples when ``clip``; else InputRangeError naming them and the range."""
    outside = plan.inputs_outside(batch)
    if not outside.size:
        return batch
    low, high = plan.input_range
    flat = batch[outside].reshape(len(outside), -1)
    reach = (float(flat.min()), float(flat.max()))
    what = (f"samples {_indices(outside)} have values in [{reach[0]:.4g}, {reach[1]:.4g}], outside the plan's "
            f"calibrated input range [{low:.6g}, {high:.6g}]")
    if clip:
        warnings.warn(InputRangeWarning(f"{what}: clipped into it (their results are the model's on the clipped "
                                        f"inputs)"), stacklevel=3)
        return np.clip(batch, low, high)
    raise InputRangeError(f"{what}: refused (the model's activations were fitted for the calibrated inputs; far "
                          f"outside them a polynomial gives garbage and can spoil every sample of its "
                          f"ciphertext); pass clip=True (hezk encrypt --clip) to clip them, or calibrate on "
                          f"inputs like them", outside)


def _checked_outputs(plan, out, per_ciphertext: int):
    """OutputRangeError when a decrypted sample leaves the plan's output range (``OutputRangeError``)."""
    invalid = plan.outputs_outside(out)
    if not invalid.size:
        return
    ciphertexts = np.unique(invalid // per_ciphertext)
    untrusted = np.flatnonzero(np.isin(np.arange(len(out)) // per_ciphertext, ciphertexts))
    others = np.setdiff1d(untrusted, invalid)
    flat = np.asarray(out, dtype=np.float64).reshape(len(out), -1)[invalid]
    seen = flat[~np.isnan(flat)]  # +-inf kept: it is the value that came back
    reach = (float(seen.min()), float(seen.max())) if seen.size else (math.nan, math.nan)
    if plan.output_range is None:  # only non-finite values are caught without a range
        bound = "not finite"
    else:
        low, high = min(plan.output_range[0]), max(plan.output_range[1])
        bound = (f"outside the plan's output range (overall [{low:.6g}, {high:.6g}], +- margin "
                 f"{plan.output_margin:.3g})")
    spread = (f"; samples {_indices(others)} share the ciphertext" if others.size else "")
    raise OutputRangeError(
        f"invalid result: samples {_indices(invalid)} decrypt to values in [{reach[0]:.4g}, {reach[1]:.4g}], "
        f"{bound}: "
        f"an activation input left its fitted interval there, so the whole ciphertext{'s' * (len(ciphertexts) > 1)} "
        f"{_indices(ciphertexts)} holding them {'are' if len(ciphertexts) > 1 else 'is'} untrustworthy (a polynomial "
        f"far outside its interval can overflow the ciphertext's modulus and corrupt every slot){spread}; "
        f"encrypt those samples apart, clip them (hezk encrypt --clip), or calibrate on inputs like them",
        invalid, ciphertexts, untrusted, out)


def _as_plan(plan) -> ModelPlan:
    if isinstance(plan, ModelPlan):
        return plan
    if isinstance(plan, dict):
        return ModelPlan.from_dict(plan)
    raise ParameterError(f"plan must be a ModelPlan or its to_dict(), got {type(plan).__name__}")


class Client:
    """Owns the secret key: makes keys, encrypts inputs, decrypts replies.

    - ``Client(plan=model.plan())`` / ``Client(plan=server_plan_dict)`` / ``Client(params, model=model)``
      (``input_shape=`` for a model that does not know it; ``key_budget=``: bytes the Galois keys may take, as
      ``Sequential.plan``):
      Galois keys for exactly the plan's rotations, many samples packed per ciphertext, inputs at the
      plan's level (``params=None`` takes the plan's automatically chosen parameters);
    - ``Client(params)`` alone: the model is unknown, so the client makes the power-of-two Galois keys (the
      server composes every rotation from them), puts one sample per ciphertext at the top level, and
      needs ``input_shape=`` in ``encrypt`` only when a single sample has more than one axis.
    ``seed`` is for tests only: by default every key and encryption draws from the OS CSPRNG. ``progress``:
    off by default; True draws a bar on stderr during key generation, a callable gets ``(done, total, label)``.

    The client decides its security: parameters that reach it only through a plan (the server's choice) are keyed
    only when 128-bit (``params.security_bits``); an insecure plan (a test ring, a sparse secret outside the cited
    sets: a server could recover the secret by search) raises ParameterError unless ``allow_insecure=True``.
    Parameters the caller names itself (``params=``, e.g. the "TOY" test ring) are its own choice.
    """

    def __init__(self, params=None, *, model: Sequential | None = None, plan=None, input_shape=None, seed=None,
                 backend="auto", progress=None, key_budget: int = DEFAULT_KEY_BUDGET, allow_insecure: bool = False):
        if not isinstance(allow_insecure, bool):
            raise ParameterError(f"allow_insecure={allow_insecure!r} must be True or False")
        chosen_here = params is not None
        if plan is not None or model is not None:
            plan = (_as_plan(plan) if plan is not None
                    else model.plan(input_shape, params=params, key_budget=key_budget))
            if params is not None and as_parameters(params) != plan.params:
                raise ParameterError(f"params={params!r} differ from the plan's parameters {plan.params!r}")
            params, rotations = plan.params, plan.rotations
        elif params is not None:
            params = as_parameters(params)
            rotations = tuple(1 << i for i in range(params.slots.bit_length() - 1))
        else:
            raise ParameterError("Client needs params, the model's plan (plan=) or the model (model=)")
        if not (chosen_here or allow_insecure):
            require_secure(params, "the plan's parameters", "allow_insecure=True (hezk keygen --insecure)")
        self.plan, self.params = plan, params
        boot = plan.bootstrap if plan is not None and plan.bootstraps else False
        self._context = CKKSContext.keygen(params, rotations=rotations, seed=seed, backend=backend,
                                           progress=as_progress(progress, "rotation keys"), bootstrap=boot)
        self._public_bytes = None

    def save(self, path, galois_keys: bool = True):
        """Write the plan and the full context, SECRET KEY INCLUDED (file mode 0600); keep it private.
        ``galois_keys=False`` leaves the rotation keys out (the server's, already in ``public_context``): the
        file then only encrypts and decrypts, and is smaller by their bytes (hundreds of MB at N = 2^14)."""
        if not isinstance(galois_keys, bool):
            raise ParameterError(f"galois_keys={galois_keys!r} must be True or False")
        context = self._context
        if not galois_keys:
            public = CKKSContext.from_key_bytes(context.public_key_bytes(), context.relin_key_bytes())
            context = CKKSContext.from_bytes(public.to_bytes(), secret_key=context.secret_key_bytes())
        blob = hezk.record.pack(CLIENT_KIND, {"plan": self.plan.to_dict() if self.plan else None},
                                [context.to_bytes(include_secret_key=True)])
        write_secret_file(path, blob)

    @classmethod
    def load(cls, path, backend="auto") -> "Client":
        """A client written by ``save``."""
        with open(path, "rb") as handle:
            blob = handle.read()
        advice = "pass the secret client file written by Client.save (keygen --client)"
        if _record_kind(blob) is None:
            raise SerializationError(f"{path!s} is {describe_bytes(blob)}, not a saved inference client: {advice}")
        try:
            record = hezk.record.unpack(blob, CLIENT_KIND)
            context = hezk.record.array_bytes(record, 0, "the saved context")
        except hezk.record.KindError as error:
            raise SerializationError(f"{path!s}: {error}: {advice}") from None
        except RecordError as error:
            raise SerializationError(f"{path!s}: damaged client file: {error}") from None
        if record.meta.get("packing") == "attention":
            raise SerializationError(f"{path!s} is the client file of a model with attention: load it with "
                                     f"tensor_ops.attention_split.AttentionClient.load (hezk encrypt / decrypt do)")
        plan = record.meta.get("plan")
        if plan is not None and not isinstance(plan, dict) or len(record.arrays) != 1:
            raise SerializationError(f"{path!s}: the saved plan is not an object or null, or the file holds "
                                     f"{len(record.arrays)} contexts (expected 1)")
        client = cls.__new__(cls)
        client.plan = None if plan is None else ModelPlan.from_dict(plan)
        client._public_bytes = None
        client._context = CKKSContext.from_bytes(context, backend=backend)
        client.params = client._context.params
        if not client._context.has_secret_key or (client.plan and client.params != client.plan.params):
            raise SerializationError(f"{path!s}: the saved context has no secret key or other parameters than its plan")
        return client

    @property
    def key_id(self) -> bytes:
        return self._context.key_id

    @property
    def public_context(self) -> bytes:
        """Parameters, public key, relinearization key and the Galois keys; never the secret key.
        Bytes that may also be called (``client.public_context`` and ``client.public_context()`` both work)."""
        if self._public_bytes is None:
            self._public_bytes = _CallableBytes(self._context.public_context().to_bytes())
        return self._public_bytes

    def server_context(self):
        """The public context as an object (parameters, public, relinearization and Galois keys; never the secret
        key) sharing this client's key arrays: for a server in the same process, which then holds no second copy
        of the keys (the bytes of ``public_context()`` and their deserialized arrays would be two more)."""
        return self._context.public_context()

    @property
    def key_bytes(self) -> int:
        """Size of the exported public context (public, relinearization and Galois keys), in bytes."""
        return len(self.public_context())

    def key_report(self) -> dict:
        """Sizes of what the server receives, in bytes, and the rotation keys it holds."""
        steps = list(self._context.rotation_steps)
        return {"public_context_bytes": self.key_bytes, "rotation_keys": len(steps), "rotations": steps,
                "security": self.params.security, "security_bits": self.params.security_bits}

    def encrypt(self, x, input_shape=None, level=None, *, clip: bool = False) -> bytes:
        """A request: x (one sample or a batch along axis 0) packed and encrypted, at ``level`` (default: the
        plan's input level, or the top level when the model is unknown). A plan with a calibrated input range
        (``ModelPlan.input_range``) refuses samples with a value outside it (InputRangeError naming them and the
        range) or, with ``clip=True``, clips them into it and warns (InputRangeWarning naming them)."""
        if not isinstance(clip, bool):
            raise ParameterError(f"clip={clip!r} must be True or False")
        x = _numeric(x)
        if self.plan is not None:
            shape, block, default_level = self.plan.input_shape, self.plan.block, self.plan.input_level
        else:
            shape = tuple(input_shape) if input_shape is not None else (x.shape if x.ndim == 1 else x.shape[1:])
            block, default_level = self.params.slots, self.params.max_level
        level = default_level if level is None else level
        if isinstance(level, bool) or not isinstance(level, (int, np.integer)) or not 0 <= level <= self.params.max_level:
            raise ParameterError(f"level={level!r} must be an integer in [0, max_level={self.params.max_level}]")
        batch, single = batch_of(x, shape)
        if self.plan is not None and self.plan.input_range is not None:
            batch = _checked_inputs(self.plan, batch, clip)
        check_value_bound(self.params, batch, name="input x")
        patches = self.plan is not None and self.plan.patches is not None
        vectors = self.plan.pack(batch) if patches else pack_samples(batch, shape, block, self.params.slots)
        cts = [self._context.encrypt(v, level=level) for v in vectors]
        header = {"key_id": self.key_id.hex(), "samples": len(batch), "single": single,
                  "sample_shape": list(shape), "block": block, "model": self.plan.model if self.plan else None}
        if self.plan is not None and self.plan.fit is not None:  # the activations' polynomials it was planned with
            header["fit"] = self.plan.fit
        if patches:  # only then: requests in the flat layout keep their header as before
            header["layout"] = "patches"
        return pack_message("request", header, cts)

    def decrypt(self, reply, flood_bits=None, *, statistical_security: int = STATISTICAL_SECURITY,
                queries: int | None = None, check: bool = True) -> np.ndarray:
        """The model's outputs from a reply: (samples, *output_shape), or output_shape for a single sample.

        Checked (``check=True``, the default) against the plan's output range (``ModelPlan.output_range``, the
        bound every sample meets while its activation inputs stay in their intervals, +- ``output_margin``): a
        sample outside it (or not finite) raises OutputRangeError naming it, its ciphertext and the other
        samples of that ciphertext (all untrusted: one sample far outside can corrupt the whole ciphertext);
        ``check=False`` returns the values unchecked.

        Exact by default: for this client's own use. Outputs that will be SHARED (sent to the server or anyone
        holding the reply) must be flooded, else they reveal the secret key: ``flood_bits="auto"`` (or a
        number), or ``decrypt_shared``, which also reports the precision left (``CKKSContext.decrypt_flooded``)."""
        return self._decrypt(reply, flood_bits, statistical_security, queries, check)[0]

    def decrypt_shared(self, reply, flood_bits="auto", *, statistical_security: int = STATISTICAL_SECURITY,
                       queries: int | None = None, check: bool = True) -> tuple[np.ndarray, float]:
        """(outputs, bits of precision left) of a noise-flooded decryption, safe to hand to another party
        (IND-CPA-D, ``crypto.ckks.flooding``): each ciphertext's flood is sized from its own noise (read from
        its imaginary slots) plus ``statistical_security`` bits, for ``queries`` decryptions seen together
        (default: the reply's ciphertexts). The precision is the worst ciphertext's ``precision_bits``. Checked
        like ``decrypt``."""
        return self._decrypt(reply, flood_bits, statistical_security, queries, check)

    def _decrypt(self, reply, flood_bits, statistical_security, queries, check=True) -> tuple[np.ndarray, float]:
        if not isinstance(check, bool):
            raise ParameterError(f"check={check!r} must be True or False")
        header, blobs = unpack_message(reply, "reply", max_ciphertexts=1 << 20)
        _not_attention(header, "reply")
        _check_key(header, self.key_id)
        block, samples, output_shape = _layout(header, len(blobs), self.params.slots, "output_shape")
        if self.plan is not None:  # the reply must be the planned model's, in the planned layout
            _check_model(header, self.plan.model, "reply from", "this client planned for")
            _check_fit(header, self.plan.fit, "reply computed with", "this client planned")
            if (block, output_shape) != (self.plan.block, self.plan.output_shape):
                raise ShapeError(f"reply layout block={block}, output_shape={output_shape} differs from the plan's "
                                 f"block={self.plan.block}, output_shape={self.plan.output_shape}")
        cts = [Ciphertext.from_bytes(b, self._context) for b in blobs]
        if flood_bits is None:
            vectors, precision = [self._context.decrypt(ct) for ct in cts], math.inf
        else:
            shared = [self._context.decrypt_flooded(ct, flood_bits, statistical_security=statistical_security,
                                                    queries=len(cts) if queries is None else queries) for ct in cts]
            vectors, precision = [f.values for f in shared], min(f.precision_bits for f in shared)
            if precision < 1.0:
                raise ParameterError(
                    f"a flooded output would keep {precision:.1f} bits of precision at scale 2^{self.params.log_scale} "
                    f"(the flood costs about {statistical_security // 2 + 4} bits): plan the client at scale 2^50 "
                    f"(params=choose_parameters(depth, log_scale=50)) to share outputs")
        out = unpack_samples(vectors, samples, output_shape, block, self.params.slots)
        if check and self.plan is not None:
            if self.plan.output_range is None:  # an old plan, or one a server rewrote without it
                warnings.warn(OutputRangeWarning(UNCHECKED_OUTPUTS), stacklevel=3)
            _checked_outputs(self.plan, out, self.params.slots // block)
        if self.plan is not None:
            out = self.plan.finished(out)  # the model's last activation, exact, where the plan leaves it to us
        return (out[0] if header.get("single") else out), precision


def server_context(public_context, backend="auto") -> CKKSContext:
    """The context a server evaluates under: ``public_context`` as bytes (a public or full context record, checked
    to be one before parsing) or a ``CKKSContext``; a secret key it holds is dropped."""
    if isinstance(public_context, (bytes, bytearray, memoryview)):
        public_context = bytes(public_context)
        if _record_kind(public_context) not in _CONTEXT_KINDS:
            raise SerializationError(f"public_context is {describe_bytes(public_context)}, not a public context: "
                                     f"pass the client's public_context() (the file keygen --context wrote)")
        context = CKKSContext.from_bytes(public_context, backend=backend)
    elif isinstance(public_context, CKKSContext):
        context = public_context
    else:
        raise ParameterError(f"public_context must be bytes or a CKKSContext, got {type(public_context).__name__}")
    return context.public_context() if context.has_secret_key else context


def read_client_file(path) -> bytes:
    """The bytes of a secret client file; SerializationError naming ``--client PATH`` where it cannot be read."""
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError as error:
        raise SerializationError(f"--client {path}: {error.strerror or error}") from None


def write_secret_file(path, blob: bytes) -> None:
    """Write ``blob`` to ``path`` readable by its owner only (mode 0600), whatever was there before: a new file
    made with O_EXCL and mode 0600 next to it, then renamed over ``path`` (an existing 0644 file, or a link,
    is replaced, never written through); the mode is checked after the rename."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    temp = os.path.join(folder, f".{os.path.basename(path)}.{os.getpid()}.{os.urandom(6).hex()}.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        with open(fd, "wb") as handle:
            os.fchmod(handle.fileno(), 0o600)  # whatever the umask
            handle.write(blob)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
    mode = os.stat(path).st_mode & 0o777
    if mode != 0o600:
        raise SerializationError(f"{path}: the secret client file has mode {mode:o} after writing, not 600")


def _layout(header, n_ciphertexts, slots, shape_key):
    """(block, samples, shape) from a message header, each checked against the slot count."""
    block, samples, shape = header.get("block"), header.get("samples"), header.get(shape_key)
    if not _is_int(block) or block < 1 or block & (block - 1) or block > slots:
        raise SerializationError(f"header block={block!r} must be a power of two <= slots={slots}")
    if not _is_int(samples) or not 1 <= samples <= n_ciphertexts * (slots // block):
        raise SerializationError(f"header samples={samples!r} does not fit {n_ciphertexts} ciphertexts "
                                 f"of {slots // block} samples")
    if not isinstance(shape, list) or not shape or not all(_is_int(d) and d > 0 for d in shape) \
            or math.prod(shape) > block:
        raise SerializationError(f"header {shape_key}={shape!r} must be positive sizes fitting block={block}")
    if not isinstance(header.get("single", False), bool):
        raise SerializationError(f"header single={header.get('single')!r} must be true or false")
    return block, samples, tuple(shape)


def _check_model(header, model, said: str, have: str):
    """A message made for another model than ``model`` (hex digests; None on either side: not checked)."""
    other = header.get("model")
    if other is not None and not isinstance(other, str):
        raise SerializationError(f"header model={other!r:.80} must be a hex digest or null")
    if other is not None and model is not None and other != model:
        raise ContextMismatchError(f"{said} model {other[:12]}…, {have} model {model[:12]}… (a request is "
                                   f"answered only by the model it was planned for)")


def _check_fit(header, fit, said: str, have: str):
    """A message whose polynomial activations (``Sequential.activation_fit``) differ from ``fit`` (absent or
    None on either side: not checked)."""
    other = header.get("fit")
    if other is not None and not (isinstance(other, str) and len(other) == 64):
        raise SerializationError(f"header fit={other!r:.80} must be a hex digest or null")
    if other is not None and fit is not None and other != fit:
        raise ContextMismatchError(f"{said} activations fitted as {other[:12]}…, {have} {fit[:12]}… (the same "
                                   f"model file with another --calibration or --degree: load it with the same "
                                   f"ones on both sides)")


def _not_attention(header, kind: str) -> None:
    """ContextMismatchError for a message of a model with attention (``tensor_ops.attention_split``) on this path."""
    if header.get("layout") == "attention":
        raise ContextMismatchError(f"the {kind} was made for a model with attention (its keygen), this "
                                   f"{'server runs' if kind == 'request' else 'client holds keys of'} a model without "
                                   f"attention: pass the files of one keygen and one model")


def _check_key(header, key_id: bytes):
    if header.get("key_id") != key_id.hex():
        raise ContextMismatchError(f"message made under key set {str(header.get('key_id'))[:12]}…, "
                                   f"this context holds key set {key_id.hex()[:12]}…")


class Server:
    """Holds the model and a client's public context; evaluates request bytes into reply bytes.

    ``encoded``: a dict shared by the servers of one model (the encoded weights depend on the parameters
    only, not on the keys). A full context handed over by mistake is stripped of its secret key. Refuses a
    context whose Galois keys cannot make the plan's rotations or that has too few levels; refuses requests
    under another key or made for another model (its ``identity``), below the model's level, of another
    sample shape or too large. Inputs above the model's level are dropped to it. A model that does not know
    its input shape and no ``input_shape``: ``plan`` is None and each request is planned for its sample shape
    (the checks then happen per request). ``key_budget``: the one the client planned with (``Client``).
    ``evaluator``: what runs the plans (``model_evaluator``): None (the host evaluator), a ``CKKSEvaluator`` of
    this context, or a callable making one from it (``crypto.ckks.jax_device.DeviceEvaluator``: on the device).
    """

    def __init__(self, model: Sequential, public_context, *, input_shape=None,
                 max_ciphertexts: int = DEFAULT_MAX_CIPHERTEXTS, backend="auto", encoded: dict | None = None,
                 key_budget: int = DEFAULT_KEY_BUDGET, evaluator=None):
        if not isinstance(model, Sequential):
            raise ParameterError(f"model must be a Sequential, got {type(model).__name__}")
        self.context = context = server_context(public_context, backend)
        self.evaluator = model_evaluator(context, evaluator)  # EncryptedModel's: host (default) or device
        self.max_ciphertexts = int(max_ciphertexts)
        self._model = model
        self.key_budget = key_budget  # plans as the client did (another budget: other rotations, refused)
        self.model_id = model.identity().hex()  # requests made for another model are refused (409)
        self.fit_id = model.activation_fit()  # and those planned with other activation polynomials
        self._encoded = {} if encoded is None else encoded
        self._by_shape = {}  # sample shape -> (plan, {block: EncryptedModel})
        self._input_shape = input_shape if input_shape is not None else model.input_shape
        # a model that does not know its input shape (e.g. a CNN) is planned per request sample shape
        self.plan = None if self._input_shape is None else self._planned(self._input_shape)[0]

    @property
    def key_id(self) -> bytes:
        return self.context.key_id

    def _planned(self, shape):
        """(plan, {block: EncryptedModel}) for samples of ``shape``, made once."""
        shape = tuple(int(d) for d in np.atleast_1d(shape))
        if shape not in self._by_shape:
            # bootstraps only where the client made their keys (its context carries the config)
            boot = self.context.bootstrap_config if self.context.bootstrap_config is not None else False
            plan = self._model.plan(shape, params=self.context.params, bootstrap=boot, key_budget=self.key_budget)
            if plan.needs_relinearization and self.context.relin_key is None:
                raise KeyMissingError("the public context has no relinearization key; the model multiplies ciphertexts")
            self._by_shape[shape] = (plan, {plan.block: EncryptedModel(self._model, plan, self.context, self._encoded,
                                                                       self.evaluator)})
        return self._by_shape[shape]

    def _model_shape(self, shape, samples):
        """The model's sample shape for request samples of ``shape`` (samples travel flattened in C order,
        so a client that does not know the model may have sent e.g. one (1, 8, 8) image as a batch of one
        (8, 8) sample: equal sizes mean equal data) and whether the request was one unbatched sample."""
        if self.plan is not None:
            want = self.plan.input_shape
            if math.prod(shape) != math.prod(want):
                raise ShapeError(f"request samples have shape {shape}, the model takes {want}")
            return want, shape != want and (samples,) + shape == want
        refusal = None
        for candidate in (shape, (1,) + shape):
            try:
                self._model.output_shape(candidate)
            except ShapeError as error:
                refusal = refusal or error
                continue
            return candidate, candidate != shape and samples == 1
        raise ShapeError(f"request samples have shape {shape}, which the model does not take ({refusal})")

    def evaluate(self, request, progress=None) -> bytes:
        """Run the model on every ciphertext of a request; returns the reply bytes. ``progress``: off by
        default; True draws a bar on stderr, a callable gets ``(done, total, label)`` after each layer stage."""
        if isinstance(request, (bytes, bytearray, memoryview)) and _record_kind(request) != REQUEST_KIND:
            raise SerializationError(f"request is {describe_bytes(bytes(request))}, not an encrypted request: pass "
                                     f"the bytes of Client.encrypt (the file 'encrypt --out' wrote)")
        header, blobs = unpack_message(request, "request", self.max_ciphertexts)
        _not_attention(header, "request")
        _check_key(header, self.key_id)
        _check_model(header, self.model_id, "request made for", "this server runs")
        _check_fit(header, self.fit_id, "request planned with", "this server's model has them fitted as")
        block, samples, shape = _layout(header, len(blobs), self.context.params.slots, "sample_shape")
        model_shape, unbatched = self._model_shape(shape, samples)
        single = bool(header.get("single")) or unbatched
        plan, by_block = self._planned(model_shape)
        layout = header.get("layout", "flat")
        if layout != plan.layout:
            raise ShapeError(f"request samples are packed in the {layout!r} layout, this server's plan reads "
                             f"{plan.layout!r} (plan the client with the server's parameters: Client(plan=...))")
        if block < plan.block:
            raise ShapeError(f"request block={block} is below the model's block {plan.block} (its widest layer)")
        if block not in by_block:
            by_block[block] = EncryptedModel(self._model, plan.with_block(block), self.context, self._encoded,
                                              self.evaluator)
        outputs = []
        report = as_progress(progress, "evaluate")
        total = len(blobs) * len(plan.stages)
        for i, blob in enumerate(blobs):
            ct = Ciphertext.from_bytes(blob, self.context)
            if ct.key_id != self.key_id:
                raise ContextMismatchError(f"ciphertext {i} was encrypted under key set {ct.key_id.hex()[:12]}…, "
                                           f"the server holds key set {self.key_id.hex()[:12]}…")
            if ct.level < plan.input_level:
                raise LevelError(f"ciphertext {i} has level={ct.level}, the model needs inputs at level >= "
                                 f"{plan.input_level} (its depth)")
            def on_stage(index, first=i * len(plan.stages), label=f"ciphertext {i + 1}/{len(blobs)}"):
                report(first + index + 1, total, label)
            outputs.append(by_block[block].forward(ct, None if report is None else on_stage))
        reply = {"key_id": self.key_id.hex(), "samples": samples, "single": single,
                 "block": block, "output_shape": list(plan.output_shape), "model": self.model_id,
                 "fit": self.fit_id}
        return pack_message("reply", reply, outputs)

    __call__ = infer = evaluate
