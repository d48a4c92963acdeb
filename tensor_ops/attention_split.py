"""The client/server split for models with attention (``tensor_ops.attention_plan``): the flow ``hezk keygen |
encrypt | infer --context | decrypt`` takes for a CNN or an MLP, for an exported transformer layer.

    plan, model = attention_plan.plan_attention(graph, calibration)      # both sides, from the same files
    spec = AttentionSpec.of(plan, graph)                                 # public: what the client needs
    client = AttentionClient(spec)                                       # keys for exactly the plan's rotations
    server = AttentionServer(plan, model, client.public_context())       # public keys only, no secret key
    y = client.decrypt(server.evaluate(client.encrypt(x)))

The client keeps the secret key. Its keys are those ``run_attention`` makes: the plan's rotation keys
(``AttentionPlan.key_rotations``: the evaluation's, its compactions' and its bootstraps'), the relinearisation key
and, when the plan bootstraps, the bootstrap's keys and the conjugation key (``CKKSContext.keygen(bootstrap=)``).
Every sample travels as its own ``tensor_ops.CipherTensor`` record in the plan's input layout (the compact layout of
one sample, ``SlotLayout.compact``: the layout the plan was recorded on, so a batch needs no other rotation),
at the plan's input level (and, when the plan bootstraps, the natural scale there, as ``BootstrappingBackend``
encrypts). The server evaluates each sample node by node (``GraphApproximation.forward`` on a
``ScaleKeepingBackend`` or ``BootstrappingBackend`` of the public context) and replies with each output tensor,
whose layout record the client reads to unpack it (checked: the plan's output shape, the client's key set).

Requests and replies are the ``tensor_ops.Request`` / ``Reply`` records of :mod:`tensor_ops.inference` with
``layout: "attention"``; the secret client file is a ``tensor_ops.Client`` record with ``packing: "attention"``.
Each message names the model (``hezk.model.Graph.digest``) and the plan (``plan_identity``: its parameters,
rotations, bootstraps and each approximation as calibrated), so keys or requests made for another model, another
calibration or degree, or other parameters are refused by name before any evaluation.
"""
from __future__ import annotations

import hashlib
import json
import math
import warnings
from dataclasses import dataclass

import numpy as np

import hezk.model
import hezk.record
from crypto.ckks.bootstrap import BootstrapConfig, natural_scales
from crypto.context import CKKSContext, check_value_bound
from crypto.errors import (ContextMismatchError, HEError, KeyMissingError, LevelError, ParameterError, SerializationError,
                           ShapeError)
from crypto.params import CKKSParameters

from .attention_plan import BootstrappingBackend, ScaleKeepingBackend
from .backends import CKKSBackend
from .inference import (CLIENT_KIND, InputRangeError, InputRangeWarning, OutputRangeError, describe_bytes,
                        pack_message, read_client_file, require_secure, server_context, unpack_message,
                        write_secret_file)
from .layout import SlotLayout
from .progress import as_progress
from .tensor import CipherTensor

__all__ = ["PACKING", "RECORD_NAME", "MAX_SAMPLES", "OUTPUT_SLACK", "FORMS", "AttentionSpec", "AttentionClient",
           "AttentionServer", "plan_identity", "is_client_file", "message_is_attention", "spec_from_record"]

#: the ``packing`` a client file, a plan JSON and a message of this path name
PACKING = "attention"
#: the plan JSON's ``packing`` entry (``dense_packings.RECORD_NAMES`` style)
RECORD_NAME = "attention-per-sample"
#: samples one request may carry (one CipherTensor each)
MAX_SAMPLES = 64
#: a decrypted output beyond OUTPUT_SLACK x the largest output magnitude on the calibration data is refused (its
#: sample left a calibrated range the client could not check, or the evaluation failed): LayerNorm-ended layers stay
#: near their calibrated magnitude, a failed bootstrap or a wrong key gives values orders of magnitude beyond
OUTPUT_SLACK = 4.0
#: how a request's input held its samples (``hezk.model.input_form``)
FORMS = ("sample", "batch", "unit")


def plan_identity(plan, graph) -> str:
    """Hex sha256 of what a client's keys and requests depend on: the model (``graph.digest()``), the shapes, the
    parameters, the key rotations, the bootstrap config, sites and input level, and each approximation as the plan
    states it (its method and calibrated range, to 4 digits: two machines calibrating on one file agree, another
    calibration file or --degree does not)."""
    boot = plan.bootstrap
    data = {"model": graph.digest().hex(), "input_shape": list(plan.input_shape),
            "output_shape": list(plan.output_shape), "params": plan.params.to_dict() if plan.params else None,
            "rotations": [int(r) for r in plan.key_rotations] if plan.params else [],
            "approximations": [[name, text] for name, text, _ in plan.approximations], "depth": int(plan.depth),
            "bootstrap": None if boot is None else _config_dict(boot),
            "sites": [[s.node, s.after, int(s.ciphertexts), int(s.level_in), int(s.spread)] for s in plan.bootstraps],
            "input_level": None if plan.input_level is None else int(plan.input_level),
            "early": [[int(a), int(b)] for a, b in plan.early_refreshes], "compaction": bool(plan.compaction),
            "input_range": [f"{plan.input_range[0]:.6g}", f"{plan.input_range[1]:.6g}"]}
    return hashlib.sha256(json.dumps(data, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _config_dict(config: BootstrapConfig) -> dict:
    return {f: getattr(config, f) for f in BootstrapConfig.__dataclass_fields__}


def _ints(value, what: str, low: int = 1) -> tuple:
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) and v >= low
                                              for v in value):
        raise SerializationError(f"attention plan: {what}={value!r:.80} must be a list of integers >= {low}")
    return tuple(value)


def _hex(value, what: str) -> str:
    if not isinstance(value, str) or len(value) != 64 or any(c not in "0123456789abcdef" for c in value):
        raise SerializationError(f"attention plan: {what}={value!r:.80} must be a hex sha256 digest")
    return value


@dataclass(frozen=True)
class AttentionSpec:
    """The public part of an ``AttentionPlan`` a client needs: parameters, the Galois keys' rotation steps, the
    bootstrap config (None: the plan does not bootstrap), the input level, the sample shapes, the calibrated input
    range (``encrypt`` refuses values outside it, or clips them), the largest output magnitude on the calibration
    data (``decrypt`` refuses outputs beyond ``OUTPUT_SLACK`` times it), the model digest and the plan identity."""

    params: CKKSParameters
    rotations: tuple
    bootstrap: BootstrapConfig | None
    input_level: int
    input_shape: tuple
    output_shape: tuple
    input_range: tuple
    output_magnitude: float
    model: str
    plan: str

    @classmethod
    def of(cls, plan, graph) -> "AttentionSpec":
        """The spec of ``plan`` (``plan_attention``'s, with parameters) for the model ``graph``."""
        params = plan.require_parameters()
        level = params.max_level if plan.bootstrap is None else int(plan.input_level)
        return cls(params, tuple(int(r) for r in plan.key_rotations), plan.bootstrap, level,
                   tuple(plan.input_shape), tuple(plan.output_shape),
                   (float(plan.input_range[0]), float(plan.input_range[1])), float(plan.output_magnitude),
                   graph.digest().hex(), plan_identity(plan, graph))

    @property
    def input_layout(self) -> SlotLayout:
        """The layout every sample is encrypted in: compact, one sample (its batch axis of 1 first)."""
        return SlotLayout.compact((1, *self.input_shape), self.params.slots)

    @property
    def input_scale(self) -> float:
        """The scale inputs are encrypted at: Delta, or the natural scale of the input level when bootstrapping."""
        return self.params.scale if self.bootstrap is None else natural_scales(self.params)[self.input_level]

    def to_dict(self) -> dict:
        return {"packing": RECORD_NAME, "params": self.params.to_dict(), "rotations": list(self.rotations),
                "bootstrap": None if self.bootstrap is None else _config_dict(self.bootstrap),
                "input_level": self.input_level, "input_shape": list(self.input_shape),
                "output_shape": list(self.output_shape), "input_range": list(self.input_range),
                "output_magnitude": self.output_magnitude, "model": self.model, "plan": self.plan}

    @classmethod
    def from_dict(cls, data) -> "AttentionSpec":
        """The inverse of ``to_dict``, every field checked (SerializationError naming the one that is not)."""
        keys = ("packing", "params", "rotations", "bootstrap", "input_level", "input_shape", "output_shape",
                "input_range", "output_magnitude", "model", "plan")
        if not isinstance(data, dict) or set(data) != set(keys) or data["packing"] != RECORD_NAME:
            raise SerializationError(f"an attention plan must be an object with the keys {keys} and packing "
                                     f"{RECORD_NAME!r}")
        try:
            params = CKKSParameters.from_dict(data["params"])
            boot = None if data["bootstrap"] is None else BootstrapConfig(**data["bootstrap"])
        except (TypeError, ValueError, ParameterError) as error:
            raise SerializationError(f"attention plan: unreadable params or bootstrap ({error})") from None
        level = data["input_level"]
        if isinstance(level, bool) or not isinstance(level, int) or not 0 <= level <= params.max_level:
            raise SerializationError(f"attention plan: input_level={level!r} must be an integer in "
                                     f"[0, {params.max_level}]")
        rotations = _ints(data["rotations"], "rotations", -params.slots + 1)
        if any(r >= params.slots for r in rotations):
            raise SerializationError(f"attention plan: rotations must lie in ({-params.slots}, {params.slots})")
        bounds = data["input_range"]
        if not (isinstance(bounds, list) and len(bounds) == 2 and all(isinstance(b, (int, float)) and
                                                                       not isinstance(b, bool) for b in bounds)
                and bounds[0] <= bounds[1]):
            raise SerializationError(f"attention plan: input_range={bounds!r:.80} must be [low, high]")
        magnitude = data["output_magnitude"]
        if isinstance(magnitude, bool) or not isinstance(magnitude, (int, float)) or not magnitude >= 0 or \
                not math.isfinite(magnitude):
            raise SerializationError(f"attention plan: output_magnitude={magnitude!r:.40} must be a number >= 0")
        shape, out = _ints(data["input_shape"], "input_shape"), _ints(data["output_shape"], "output_shape")
        if math.prod(shape) > params.slots * MAX_SAMPLES:
            raise SerializationError(f"attention plan: input_shape {list(shape)} is too large for its parameters")
        return cls(params, rotations, boot, level, shape, out, (float(bounds[0]), float(bounds[1])),
                   float(magnitude), _hex(data["model"], "model"), _hex(data["plan"], "plan"))


def spec_from_record(data) -> AttentionSpec | None:
    """The spec of a plan JSON written for an attention model (``AttentionSpec.to_dict``), None for another plan."""
    if isinstance(data, dict) and data.get("packing") == RECORD_NAME:
        return AttentionSpec.from_dict(data)
    return None


def _meta(blob):
    """The meta of a ``tensor_ops.Client`` record, or None."""
    try:
        return hezk.record.unpack(blob, CLIENT_KIND).meta
    except hezk.record.RecordError:
        return None


def is_client_file(path) -> bool:
    """Whether ``path`` is a secret client file of this path (False for any other file or none)."""
    try:
        with open(path, "rb") as handle:
            blob = handle.read()
    except OSError:
        return False
    meta = _meta(blob)
    return isinstance(meta, dict) and meta.get("packing") == PACKING


def message_is_attention(blob, kind: str = "request") -> bool:
    """Whether ``blob`` is a request (or reply, ``kind``) of this path."""
    try:
        header, _ = unpack_message(blob, kind, max_ciphertexts=1 << 20)
    except (HEError, ValueError, TypeError):
        return False
    return header.get("layout") == PACKING


def _check_header(header, key_id: bytes, spec_model: str, spec_plan: str, said: str, have: str) -> None:
    if header.get("layout") != PACKING:
        raise ContextMismatchError(f"{said} a model without attention (the slot-path layout), {have} a model with "
                                   f"attention: pass the files of one keygen and one model")
    if header.get("key_id") != key_id.hex():
        raise ContextMismatchError(f"{said} key set {str(header.get('key_id'))[:12]}…, {have} key set "
                                   f"{key_id.hex()[:12]}… (pass the files of one keygen)")
    if header.get("model") != spec_model:
        raise ContextMismatchError(f"{said} model {str(header.get('model'))[:12]}…, {have} model {spec_model[:12]}… "
                                   f"(a request is answered only by the model its keys were made for)")
    if header.get("plan") != spec_plan:
        raise ContextMismatchError(f"{said} plan {str(header.get('plan'))[:12]}…, {have} plan {spec_plan[:12]}…: "
                                   f"the same model planned otherwise (another --calibration, --degree, --params or "
                                   f"--key-budget): plan it with the same options on both sides")


def _unpack(blob, kind: str, advice: str) -> tuple[dict, list]:
    """(header, tensor records) of a request or reply (``kind``); SerializationError saying what the bytes are."""
    try:
        return unpack_message(blob, kind, max_ciphertexts=1 << 20)
    except SerializationError as error:
        if isinstance(blob, (bytes, bytearray, memoryview)):
            raise SerializationError(f"the {kind} is {describe_bytes(bytes(blob))}, not an encrypted {kind} "
                                     f"({error}): pass {advice}") from None
        raise


def _samples(header, count: int, shape_key: str, limit: int) -> tuple[int, bool, tuple]:
    """(samples, form, sample or output shape) of a message header of ``count`` tensors, at most ``limit``; the
    form is how the client's input held its samples (``hezk.model.input_form``: its outputs are given back so)."""
    if count > limit:
        raise ShapeError(f"the message carries {count} samples, more than the {limit} one request may: split the "
                         f"input")
    samples, form, shape = header.get("samples"), header.get("form"), header.get(shape_key)
    if samples != count or form not in FORMS or (form == "sample" and count != 1):
        raise SerializationError(f"message header samples={samples!r}, form={form!r:.20} do not match its {count} "
                                 f"tensors")
    if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) for d in shape):
        raise SerializationError(f"message header {shape_key}={shape!r:.80} must be a list of sizes")
    return samples, form, tuple(shape)


def _tensor(blob, context, index: int, what: str) -> CipherTensor:
    tensor = CipherTensor.from_bytes(blob, context)
    for i, ct in enumerate(tensor.ciphertexts):
        if ct.key_id != context.key_id:
            raise ContextMismatchError(f"{what} {index}: ciphertext {i} was encrypted under key set "
                                       f"{ct.key_id.hex()[:12]}…, this context holds {context.key_id.hex()[:12]}…")
    return tensor


class AttentionClient:
    """Owns the secret key of an attention plan (``AttentionSpec``): makes the keys, encrypts samples, decrypts
    replies. Parameters below 128 bits are keyed only with ``allow_insecure=True`` (tests); ``seed``: tests only
    (default: every key and encryption from the OS CSPRNG); ``progress``: as ``CKKSContext.keygen``'s."""

    def __init__(self, spec: AttentionSpec, *, seed=None, progress=None, allow_insecure: bool = False,
                 context: CKKSContext | None = None):
        if not isinstance(spec, AttentionSpec):
            raise ParameterError(f"spec must be an AttentionSpec, got {type(spec).__name__}")
        if not isinstance(allow_insecure, bool):
            raise ParameterError(f"allow_insecure={allow_insecure!r} must be True or False")
        self.spec = spec
        if context is None:
            if not allow_insecure:
                require_secure(spec.params, "the plan's parameters", "allow_insecure=True (hezk keygen --insecure)")
            context = CKKSContext.keygen(spec.params, rotations=spec.rotations, seed=seed,
                                         progress=as_progress(progress, "rotation keys"),
                                         bootstrap=spec.bootstrap if spec.bootstrap is not None else False)
        self._context = context
        self._public = None

    @property
    def params(self) -> CKKSParameters:
        return self.spec.params

    @property
    def key_id(self) -> bytes:
        return self._context.key_id

    def public_context(self) -> bytes:
        """Parameters, public, relinearisation and Galois keys (the bootstrap's included); never the secret key."""
        if self._public is None:
            self._public = self._context.public_context().to_bytes()
        return self._public

    def server_context(self) -> CKKSContext:
        """The public context as an object sharing this client's key arrays (a server in this process)."""
        return self._context.public_context()

    def key_report(self) -> dict:
        return {"public_context_bytes": len(self.public_context()), "rotation_keys": len(self._context.rotation_steps),
                "bootstrap": self.spec.bootstrap is not None, "security": self.params.security}

    def save(self, path) -> None:
        """The SECRET client file (mode 0600): a ``tensor_ops.Client`` record naming this packing, its meta the
        spec, its array the context with the secret key and without the Galois keys (the server's)."""
        context = self._context
        public = CKKSContext.from_key_bytes(context.public_key_bytes(), context.relin_key_bytes())
        slim = CKKSContext.from_bytes(public.to_bytes(), secret_key=context.secret_key_bytes())
        write_secret_file(path, hezk.record.pack(CLIENT_KIND, {"plan": None, "packing": PACKING,
                                                               "attention_plan": self.spec.to_dict()},
                                                 [slim.to_bytes(include_secret_key=True)]))

    @classmethod
    def load(cls, path) -> "AttentionClient":
        """A client written by ``save`` (SerializationError naming the file otherwise)."""
        blob = read_client_file(path)
        try:
            record = hezk.record.unpack(blob, CLIENT_KIND)
            context = CKKSContext.from_bytes(hezk.record.array_bytes(record, 0, "the saved context"))
        except hezk.record.RecordError as error:
            raise SerializationError(f"{path}: {describe_bytes(blob)}, not a readable client file ({error})") from None
        if record.meta.get("packing") != PACKING:
            raise SerializationError(f"{path}: a client file of another model path, not an attention model's")
        spec = AttentionSpec.from_dict(record.meta.get("attention_plan"))
        if not context.has_secret_key or context.params != spec.params:
            raise SerializationError(f"{path}: the saved context has no secret key or other parameters than its plan")
        return cls(spec, context=context)

    def encrypt(self, x, *, clip: bool = False) -> bytes:
        """A request: each sample of ``x`` (one sample of ``spec.input_shape``, a batch along axis 0, or, for a
        sample shape (1, ...), a batch along that axis of 1: ``hezk.model.input_form``) encrypted in the plan's input
        layout and level; ``decrypt`` gives the outputs in the same form. Values outside the calibrated input range are refused (InputRangeError
        naming the samples and the range) or, with ``clip=True``, clipped into it (InputRangeWarning)."""
        if not isinstance(clip, bool):
            raise ParameterError(f"clip={clip!r} must be True or False")
        spec = self.spec
        try:
            x = np.asarray(x, dtype=np.float64)
        except (TypeError, ValueError):
            raise ShapeError("the input is not a numeric array") from None
        form = hezk.model.input_form(x.shape, spec.input_shape)
        if form is None or not x.size:
            raise ShapeError(f"input of shape {x.shape} is {hezk.model.input_forms_text(spec.input_shape)}: the "
                             f"model's plan takes samples of {spec.input_shape}")
        batch = hezk.model.as_batch(x, form)
        if len(batch) > MAX_SAMPLES:
            raise ShapeError(f"{len(batch)} samples exceed the {MAX_SAMPLES} one request carries: split the input")
        if not np.all(np.isfinite(batch)):
            raise ParameterError("the input holds NaN or infinite values")
        low, high = spec.input_range
        flat = batch.reshape(len(batch), -1)
        outside = np.flatnonzero(np.any((flat < low) | (flat > high), axis=1))
        if outside.size:
            text = (f"samples {outside.tolist()[:20]} hold values outside the plan's calibrated input range "
                    f"[{low:.6g}, {high:.6g}]")
            if not clip:
                raise InputRangeError(f"{text}: refused (the approximations are only right inside it; --clip clips "
                                      f"them, recalibrating on inputs like these widens it)", outside.tolist())
            warnings.warn(InputRangeWarning(f"{text}: clipped into it"), stacklevel=2)
            batch = np.clip(batch, low, high)
        check_value_bound(self.params, batch, name="input x")
        layout, scale, backend = spec.input_layout, spec.input_scale, CKKSBackend(self._context)
        tensors = [CipherTensor([self._context.encrypt(v, level=spec.input_level, scale=scale)
                                 for v in layout.pack(sample[None])], layout, backend)
                   for sample in batch]
        header = {"layout": PACKING, "key_id": self.key_id.hex(), "model": spec.model, "plan": spec.plan,
                  "samples": len(batch), "form": form, "sample_shape": list(spec.input_shape)}
        return pack_message("request", header, tensors)

    def decrypt(self, reply) -> np.ndarray:
        """The outputs of a reply in the form of the request's input (``hezk.model.in_form``: (samples,
        *output_shape), output_shape for one sample, (samples, *output_shape[1:]) for a batch along the sample's
        axis of 1). Refused
        (OutputRangeError, naming the samples) where an output is not finite or beyond ``OUTPUT_SLACK`` times the
        largest output magnitude on the calibration data."""
        spec = self.spec
        header, blobs = _unpack(reply, "reply", "the file 'infer --context ... --out' wrote")
        _check_header(header, self.key_id, spec.model, spec.plan, "reply made for", "this client holds")
        _, form, shape = _samples(header, len(blobs), "output_shape", MAX_SAMPLES)
        if shape != spec.output_shape:
            raise ShapeError(f"reply output_shape {shape} differs from the plan's {spec.output_shape}")
        outputs = []
        for i, blob in enumerate(blobs):
            tensor = _tensor(blob, self._context, i, "reply tensor")
            if tuple(tensor.shape) != (1, *spec.output_shape):
                raise ShapeError(f"reply tensor {i} has shape {tuple(tensor.shape)}, the plan's output is "
                                 f"{(1, *spec.output_shape)}")
            outputs.append(tensor.decrypt(self._context).reshape(spec.output_shape))
        out = np.stack(outputs)
        bound = OUTPUT_SLACK * spec.output_magnitude
        bad = np.flatnonzero(~np.all(np.isfinite(out.reshape(len(out), -1)), axis=1)
                             | np.any(np.abs(np.nan_to_num(out.reshape(len(out), -1))) > bound, axis=1))
        if bad.size:
            raise OutputRangeError(f"refused: samples {bad.tolist()[:20]} decrypted to values beyond {bound:.4g} "
                                   f"({OUTPUT_SLACK:g} x the largest output magnitude on the calibration data) or not "
                                   f"finite: their plain reference left a calibrated range or the evaluation failed; "
                                   f"nothing written", bad.tolist(), bad.tolist(), bad.tolist())
        return hezk.model.in_form(out, form)


class AttentionServer:
    """Evaluates requests of an attention plan under a client's public context (bytes or a context; a secret key
    handed over by mistake is dropped): refused when the context was made for other parameters or lacks a key
    the plan needs (a rotation key, the relinearisation key, the bootstrap's keys), and, per request, when it was
    made under another key set, for another model or plan, in another layout or at another level."""

    def __init__(self, plan, model, public_context, *, max_samples: int = MAX_SAMPLES):
        self.plan, self.model = plan, model
        self.spec = AttentionSpec.of(plan, model.graph)
        self.context = context = server_context(public_context)
        self.max_samples = int(max_samples)
        self.bootstraps = 0     # ciphertexts bootstrapped by the evaluations so far
        if context.params != self.spec.params:
            raise ContextMismatchError(f"the public context was made for other parameters ({context.params!r}) than "
                                       f"this server's plan ({self.spec.params!r}): plan with the client's options "
                                       f"(--params, --calibration, --degree, --key-budget) or key again")
        missing = sorted(set(self.spec.rotations) - set(context.rotation_steps))
        if missing:
            raise KeyMissingError(f"the public context lacks {len(missing)} of the plan's {len(self.spec.rotations)} "
                                  f"rotation keys (e.g. steps {missing[:8]}): it was made for another model or plan "
                                  f"(run keygen with this model and the same options)")
        if context.relin_key is None:
            raise KeyMissingError("the public context has no relinearisation key; attention multiplies ciphertexts")
        if self.spec.bootstrap is not None and (context.bootstrap_config != self.spec.bootstrap
                                                or not context.has_conjugation_key):
            raise KeyMissingError(f"the plan bootstraps ({self.plan.bootstrap_count} ciphertext bootstraps) but the "
                                  f"public context holds no bootstrap keys for its config: run keygen with this "
                                  f"model and the same options")

    @property
    def key_id(self) -> bytes:
        return self.context.key_id

    def _backend(self):
        if self.spec.bootstrap is None:
            return ScaleKeepingBackend(self.context)
        return BootstrappingBackend(self.context, self.spec.bootstrap, compaction=self.plan.compaction,
                                    forced=self.plan.early_refreshes)

    def evaluate(self, request, progress=None) -> bytes:
        """The reply to ``request`` bytes: each sample's output tensor. ``progress``: a callable given (done,
        total, label) after each sample, or True for a bar on stderr."""
        spec = self.spec
        header, blobs = _unpack(request, "request", "the file 'encrypt --out' wrote")
        _check_header(header, self.key_id, spec.model, spec.plan, "request made for", "this server runs")
        samples, form, shape = _samples(header, len(blobs), "sample_shape", self.max_samples)
        if shape != spec.input_shape:
            raise ShapeError(f"request samples have shape {shape}, the model takes {spec.input_shape}")
        report = as_progress(progress, "evaluate")
        layout, outputs = spec.input_layout, []
        for i, blob in enumerate(blobs):
            tensor = _tensor(blob, self.context, i, "request tensor")
            if tensor.layout != layout:
                raise ShapeError(f"request tensor {i} is packed in another layout (shape {tuple(tensor.shape)}, "
                                 f"{len(tensor.ciphertexts)} ciphertexts) than the plan's compact layout of one "
                                 f"sample {(1, *spec.input_shape)}")
            for ct in tensor.ciphertexts:
                if ct.level != spec.input_level or not math.isclose(ct.scale, spec.input_scale, rel_tol=1e-9):
                    raise LevelError(f"request tensor {i}: a ciphertext at level {ct.level}, scale 2^"
                                     f"{math.log2(ct.scale):.2f}; the plan encrypts inputs at level "
                                     f"{spec.input_level}, scale 2^{math.log2(spec.input_scale):.2f}")
            backend = self._backend()
            y = self.model.forward(CipherTensor(tensor.ciphertexts, layout, backend))
            self.bootstraps += getattr(backend, "bootstraps", 0)
            outputs.append(y)
            if report is not None:
                report(i + 1, samples, f"sample {i + 1}/{samples}")
        reply = {"layout": PACKING, "key_id": self.key_id.hex(), "model": spec.model, "plan": spec.plan,
                 "samples": samples, "form": form, "output_shape": list(spec.output_shape)}
        return pack_message("reply", reply, outputs)

    __call__ = infer = evaluate
