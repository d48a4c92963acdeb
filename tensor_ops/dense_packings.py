"""Which packing runs a model, and the two dense-network packings behind one client/server face for the command
line (``hezk plan|keygen|encrypt|infer|decrypt --packing``).

Three packings run a model under CKKS:

- ``slots``: the slot-blocked plan of ``tensor_ops.model_plan`` / ``tensor_ops.inference`` (several samples per
  ciphertext in blocks, the diagonal method, the plan's Galois keys). Every model: convolutions, pooling,
  residual blocks, bootstrapping, Dask.
- ``replicated``: ``tensor_ops.replicated``, one sample per ciphertext laid out so every slot works, a few
  power-of-two rotations per layer: latency, for few samples.
- ``samples``: ``tensor_ops.sample_packing``, one sample per slot and one ciphertext per feature, each dense
  layer an exact modular matrix product, no rotation: throughput, for many samples.

The last two take a *dense chain* only: dense (and batch-norm, flatten) layers with univariate fitted
activations between them (``dense_chain_problem`` says why a model is not one). ``choose_packing`` is the one
rule: ``auto`` takes the slot path for every other model (and where only it has what was asked: bootstrapping,
Dask), else ``replicated`` below ``SAMPLE_PACKING_MIN_BATCH`` samples and ``samples`` from it up
(``packing_for_batch``; the FHE-suite entry uses the same function). The measured break-even on the MNIST MLP
(784-128-64-10, degree-4 ReLUs, one core): a sample-packed set costs ~13 s of server and ~12 s of client time
whatever its fill (1 or 8,192 samples), the replicated plan ~0.2 s per sample, so server time alone breaks even
near 76 samples and server plus client near 125: 100 lies between (``benchmarks/fhe_suite/README.md``).

Records carry their packing: a plan's JSON (``plan_record``: ``"packing"``), the secret client file
(``save_client``: the record of ``Client.save`` with the plan of its packing), a request (slot-blocked and
replicated requests are ``pack_message`` records whose header names the layout; a sample-packed request is a
run of ciphertext records), so a file of one packing given to a command of another is refused naming both.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import hezk.record
from hezk.record import RecordError
from crypto.errors import ContextMismatchError, HEError, ParameterError, SerializationError, ShapeError

# tensor_ops.inference and crypto.context are imported where used: the rule above them (``packing_for_batch``)
# is read by the FHE-suite entry's every stage, whose start-up time is measured

#: a batch of at least this many samples takes sample packing under ``auto``, a smaller one the replicated plan
SAMPLE_PACKING_MIN_BATCH = 100
#: --packing's choices
CHOICES = ("auto", "slots", "replicated", "samples")
#: how each packing is named in the records (plan JSON, client files; the FHE-suite entry's packing.json)
RECORD_NAMES = {"slots": "slot-blocked", "replicated": "replicated-per-sample", "samples": "samples-per-slot"}
DESCRIPTIONS = {"slots": "slot-blocked: several samples per ciphertext, the plan's Galois keys",
                "replicated": "replicated: one sample per ciphertext, power-of-two rotations (latency)",
                "samples": "sample packing: one sample per slot, one ciphertext per feature, no rotation "
                           "(throughput)"}
_DENSE_LAYERS = ("Linear", "Flatten", "BatchNorm", "Activation")
MAX_REQUEST_CIPHERTEXTS = 256  # replicated: ciphertexts per request (ReplicatedServer's default limit)


def packing_for_batch(samples: int) -> str:
    """The dense-chain packing of a batch of ``samples``: ``samples`` from ``SAMPLE_PACKING_MIN_BATCH`` up,
    ``replicated`` below."""
    return "samples" if int(samples) >= SAMPLE_PACKING_MIN_BATCH else "replicated"


def dense_chain_problem(model) -> str | None:
    """None when ``model`` (a ``tensor_ops.nn.Sequential``) is a chain of dense layers with univariate fitted
    activations (what ``replicated`` and ``samples`` evaluate); else why not, in a few words."""
    from tensor_ops.model_plan import ActivationStage, AffineStage

    layers = getattr(model, "plan_layers", None) or getattr(model, "layers", ())
    for index, layer in enumerate(layers):
        name = type(layer).__name__
        if name not in _DENSE_LAYERS:
            return f"layer {index} is a {name} (only dense layers and elementwise activations)"
        if name == "Activation" and type(getattr(layer, "poly", None)).__name__ != "PolyActivation":
            return f"layer {index}'s activation is a {type(layer.poly).__name__}, not one fitted polynomial"
    try:
        stages = model.stages()
    except HEError as error:
        return f"the model does not compile ({error})"
    for index, stage in enumerate(stages):
        if type(stage) not in (AffineStage, ActivationStage):
            return f"stage {index} is a {type(stage).__name__}"
        if isinstance(stage, ActivationStage) and stage.depth == 0:
            return f"stage {index} is a constant activation polynomial"
    if not any(isinstance(stage, AffineStage) for stage in stages):
        return "the model has no dense layer"
    return None


@dataclass(frozen=True)
class Choice:
    """A packing (``slots``, ``replicated``, ``samples``) and why it was chosen."""

    packing: str
    reason: str

    def line(self) -> str:
        return f"packing: {self.packing} ({DESCRIPTIONS[self.packing]}): {self.reason}"


def choose_packing(model, samples: int | None, requested: str = "auto", *, bootstrap=None,
                   dask: bool = False, split: bool = False, slot_options: tuple = ()) -> Choice:
    """The packing of ``model`` for a batch of ``samples`` (None: unknown). ``requested``: ``auto`` or one of
    the packings; an explicit choice the model (or the options: ``bootstrap`` True, ``dask``; ``split``, keys
    for the client/server files, of a model whose outputs have client-side steps) cannot use is refused with
    ParameterError naming --packing and why. ``slot_options``: options given that only the slot plan reads (e.g.
    "--key-budget"): ``auto`` then takes the slot path."""
    if requested not in CHOICES:
        raise ParameterError(f"--packing {requested!r} must be one of {', '.join(CHOICES)}")
    problem = dense_chain_problem(model)
    if problem is None and split and tuple(getattr(model, "postprocess", ())):
        problem = ("the model's outputs have client-side steps (softmax, argmax, labels, ...) that only the slot "
                   "plan's records carry to the client")
    if problem is None and bootstrap:
        problem = "--bootstrap: bootstraps are placed on the slot path only"
    if problem is None and dask:
        problem = "--dask: only the slot path runs as tasks"
    if requested == "slots":
        return Choice("slots", "asked for (--packing slots)")
    if requested != "auto":
        if problem is not None:
            raise ParameterError(f"--packing {requested} cannot run this: {problem} (it takes a chain of dense layers "
                                 f"with fitted activations; use --packing slots or auto)")
        return Choice(requested, f"asked for (--packing {requested})")
    if problem is not None:
        return Choice("slots", f"auto: {problem}")
    if slot_options:
        return Choice("slots", f"auto: {', '.join(slot_options)} given, which only the slot plan reads")
    if samples is None:
        return Choice("slots", "auto: the number of samples is unknown (pass --samples N to choose by it: "
                               f"replicated below {SAMPLE_PACKING_MIN_BATCH}, sample packing from it up)")
    chosen = packing_for_batch(samples)
    relation = "<" if chosen == "replicated" else ">="
    return Choice(chosen, f"auto: a dense chain and {samples} sample{'s' * (samples != 1)} {relation} "
                          f"{SAMPLE_PACKING_MIN_BATCH} (SAMPLE_PACKING_MIN_BATCH)")


# --- the plans of the two dense packings -----------------------------------------------------------------------

def replicated_fold(model, params, input_shape=None) -> int:
    """The smallest fold (a power of two) that puts a sample's input in one ciphertext under ``params``, within
    what the first layer's output period allows; 1 where none does."""
    from crypto.context import as_parameters
    from tensor_ops.replicated import plan_stages

    stages, _ = model.compile(input_shape)
    slots = as_parameters(params).slots
    first = plan_stages(stages, slots, 1)[0]
    fold = 1
    while first.inputs > 1 and fold * 2 <= first.period:
        fold *= 2
        try:
            first = plan_stages(stages, slots, fold)[0]
        except (ShapeError, ParameterError):
            return fold // 2
    return fold


def dense_plan(packing: str, model, input_shape=None, params=None):
    """The public plan of a dense packing: a ``ReplicatedPlan`` (folded by ``replicated_fold``) or a
    ``SamplePackedSpec``; ``params``: the CKKS parameters (None: the packing's 128-bit choice)."""
    if packing == "replicated":
        from tensor_ops.replicated import replicated_plan

        plan = replicated_plan(model, input_shape, params=params)
        fold = replicated_fold(model, plan.params, input_shape)
        return plan if fold == 1 else replicated_plan(model, input_shape, params=plan.params, fold=fold)
    if packing == "samples":
        return sample_packed_model(model, params).spec
    raise ParameterError(f"packing {packing!r} is not a dense packing (replicated, samples)")


def sample_packed_model(model, params=None):
    from tensor_ops.sample_packing import SamplePackedModel

    return SamplePackedModel.from_sequential(model, params=params)


def plan_record(packing: str, plan, reason: str) -> dict:
    """The plan's JSON: its ``to_dict`` with ``"packing"`` (the record name) and ``"packing_reason"``."""
    data = dict(plan.to_dict())
    data["packing"] = RECORD_NAMES[packing]
    data["packing_reason"] = reason
    return data


def packing_of_record(data) -> str:
    """The packing a plan JSON was made for (``plan_record``; a plan without the field: ``slots``)."""
    if not isinstance(data, dict):
        raise ParameterError(f"a plan must be a JSON object, not {type(data).__name__}")
    name = data.get("packing")
    if name is None:
        return "replicated" if data.get("layout") == "replicated" else "slots"
    for short, long in RECORD_NAMES.items():
        if name == long:
            return short
    raise ParameterError(f"plan packing {name!r:.60} is none of {sorted(RECORD_NAMES.values())}")


def plan_from_record(data):
    """(packing, plan object) of a plan JSON: ``ModelPlan``, ``ReplicatedPlan`` or ``SamplePackedSpec``."""
    packing = packing_of_record(data)
    if packing == "replicated":
        from tensor_ops.replicated import ReplicatedPlan

        return packing, ReplicatedPlan.from_dict(data)
    if packing == "samples":
        from tensor_ops.sample_packing import SamplePackedSpec

        return packing, SamplePackedSpec.from_dict(data)
    from tensor_ops.model_plan import ModelPlan

    return packing, ModelPlan.from_dict(data)


def explain(packing: str, plan, model=None) -> str:
    """A few lines on a dense packing's plan (the slot path has ``ModelPlan.explain``); with the ``model``, each
    layer as the slot plan states it (``lowering.lower_layers``: an activation's polynomial, interval, error)."""
    params = plan.params
    lines = [f"parameters: {params!r} ({params.security})"]
    if model is not None:
        from tensor_ops.lowering import lower_layers

        shape = plan.input_shape if packing == "replicated" else model.input_shape
        _, stage_of_layer = model.compile(shape)
        lines.append("layers:")
        lines += [f"  {layer.describe()}" for layer in lower_layers(model.plan_layers, shape, stage_of_layer, params)]
    if packing == "replicated":
        counts = plan.operation_counts()
        lines += [f"replicated plan: {plan.input_shape} -> {plan.output_shape}, depth {plan.depth}, "
                  f"{plan.input_ciphertexts} input ciphertext(s) per sample (fold {plan.stages[0].fold})",
                  f"per sample: {counts['ct_pt']} plaintext products, {counts['rotations']} rotations; "
                  f"{counts['galois_keys']} Galois keys (powers of two) {list(plan.rotations)}"]
    else:
        lines += [f"sample packing: {plan.features} features -> {plan.outputs} outputs, level {plan.level}, "
                  f"{params.slots} samples per set ({2 * params.slots} paired, with the conjugation key), "
                  f"{plan.features} input and {plan.outputs} output ciphertexts per set; no Galois key"]
    if plan.input_range is not None:
        lines.append(f"calibrated input range [{plan.input_range[0]:.6g}, {plan.input_range[1]:.6g}] "
                     f"(encrypt refuses values outside it; --clip clips them)")
    lines.append("output range: " + ("checked at decryption" if plan.output_range is not None else
                                     "none stated (only non-finite outputs are refused)"))
    return "\n".join(lines)


# --- clients: made, saved, loaded --------------------------------------------------------------------------------

def make_client(packing: str, plan, *, allow_insecure: bool = False, samples: int | None = None, seed=None):
    """The client of a dense plan: keys from the OS CSPRNG (``seed``: tests only); parameters below 128 bits
    refused unless ``allow_insecure``. Sample packing pairs sets (conjugation key) when ``samples`` exceeds the
    slots."""
    if packing == "replicated":
        from tensor_ops.replicated import ReplicatedClient

        return ReplicatedClient(plan, allow_insecure=allow_insecure, seed=seed)
    from tensor_ops.sample_packing import SamplePackedClient

    pairs = samples is not None and samples > plan.params.slots
    return SamplePackedClient(plan, pairs=pairs, allow_insecure=allow_insecure, seed=seed)


def save_client(packing: str, client, path) -> None:
    """The SECRET client file (mode 0600, ``write_secret_file``): ``Client.save``'s record kind, its meta
    naming the packing and holding the plan, the secret context without Galois keys (the server's)."""
    from tensor_ops.inference import CLIENT_KIND, write_secret_file

    if packing == "replicated":
        client.save(path)  # CLIENT_KIND, meta "replicated_plan" and "packing"
        return
    write_secret_file(path, hezk.record.pack(CLIENT_KIND, {"plan": None, "packing": RECORD_NAMES["samples"],
                                                           "sample_packed_spec": client.spec.to_dict()},
                                             [client.context.to_bytes(include_secret_key=True)]))


def client_file_packing(path) -> str:
    """The packing of a secret client file (``Client.save`` / ``save_client``)."""
    from tensor_ops.inference import CLIENT_KIND, read_client_file

    blob = read_client_file(path)
    try:
        meta = hezk.record.unpack(blob, CLIENT_KIND).meta
    except RecordError:
        return "slots"  # not a client record: Client.load names the problem
    if "replicated_plan" in meta:
        return "replicated"
    if "sample_packed_spec" in meta:
        return "samples"
    return "slots"


def load_client(path):
    """(packing, client) of a secret client file: ``Client``, ``ReplicatedClient`` or ``SamplePackedClient``."""
    packing = client_file_packing(path)
    if packing == "slots":
        from tensor_ops.inference import Client

        return packing, Client.load(path)
    if packing == "replicated":
        from tensor_ops.replicated import ReplicatedClient

        return packing, ReplicatedClient.load(path)
    from crypto.context import CKKSContext
    from tensor_ops.inference import CLIENT_KIND
    from tensor_ops.sample_packing import SamplePackedClient, SamplePackedSpec

    with open(path, "rb") as handle:
        record = hezk.record.unpack(handle.read(), CLIENT_KIND)
    spec = SamplePackedSpec.from_dict(record.meta.get("sample_packed_spec"))
    context = CKKSContext.from_bytes(hezk.record.array_bytes(record, 0, "the saved context"))
    return packing, SamplePackedClient(spec, context=context)


def client_plan(packing: str, client):
    return client.spec if packing == "samples" else client.plan


def key_report(packing: str, client) -> str:
    """One line: the public context's bytes, its rotation keys and the security of the parameters."""
    public = client.public_context()
    params = client_plan(packing, client).params
    keys = (f"{len(client.plan.rotations)} rotation keys" if packing == "replicated" else
            "no rotation key" + (", the conjugation key (paired sets)" if client.pairs else ""))
    return f"{len(public)} bytes, {keys}; security: {params.security} (N=2^{params.log_n}, " \
           f"log2(QP)={params.log_qp:.1f})"


# --- requests, replies --------------------------------------------------------------------------------------------

def flat_batch(x, shape) -> tuple[np.ndarray, bool]:
    """(batch (n, *shape), single) of one sample or a batch along axis 0."""
    x = np.asarray(x, dtype=np.float64)
    shape = tuple(shape)
    if x.shape == shape:
        return x[None], True
    if x.ndim != len(shape) + 1 or tuple(x.shape[1:]) != shape or not len(x):
        raise ShapeError(f"input shape {x.shape} is neither {shape} nor (batch, *{shape})")
    return x, False


def encrypt(packing: str, client, x, *, clip: bool = False) -> bytes:
    """One request of ``x`` (one sample or a batch): replicated, every sample's ciphertexts (a request of more
    than ``MAX_REQUEST_CIPHERTEXTS`` is refused by the server: ``encrypt_batches`` splits); sample packing, one
    set (at most ``client.set_size`` samples)."""
    if packing == "replicated":
        return client.encrypt(x, clip=clip)
    batch, _ = flat_batch(x, (client.spec.features,) if np.ndim(x) <= 2 else np.shape(x)[1:])
    batch = batch.reshape(len(batch), -1)
    if len(batch) > client.set_size:
        raise ShapeError(f"{len(batch)} samples exceed the {client.set_size} of one sample-packed set of these keys "
                         f"({'paired' if client.pairs else 'unpaired: keygen --samples N pairs up to twice as many'});"
                         f" split the input")
    return b"".join(client.encrypt_set(batch, clip=clip))


def message_packing(blob: bytes, kind: str = "request") -> str:
    """The packing a request (or reply, ``kind``) was made for: a run of ciphertext records is sample-packed; a
    message record names its layout (``replicated``), else slot-blocked (the slot path names any other problem)."""
    from tensor_ops.inference import unpack_message

    try:
        if hezk.record.peek_kind(blob) == "crypto.Ciphertext":
            return "samples"
        header, _ = unpack_message(blob, kind, max_ciphertexts=1 << 20)
    except (HEError, RecordError):
        return "slots"
    return "replicated" if header.get("layout") == "replicated" else "slots"


def server_for(packing: str, model, public, input_shape=None, request: bytes | None = None, fold: int = 1):
    """A server of a dense packing under the client's public context (bytes or a context): the plan is made
    from the model at the context's parameters, folded ``fold`` times (replicated; a request's header, when given,
    names its fold)."""
    from tensor_ops.inference import server_context, unpack_message

    context = server_context(public)
    if packing == "replicated":
        from tensor_ops.replicated import ReplicatedServer, replicated_plan

        if request is not None:
            header, _ = unpack_message(request, "request", max_ciphertexts=1 << 20)
            fold = header.get("fold", 1)
            if not isinstance(fold, int) or isinstance(fold, bool) or fold < 1 or fold & (fold - 1):
                raise SerializationError(f"request fold={fold!r} must be a power of two")
        plan = replicated_plan(model, input_shape, params=context.params, fold=fold)
        if not set(plan.rotations) <= set(context.rotation_steps):
            raise ContextMismatchError(f"the context lacks the replicated plan's Galois keys "
                                       f"{sorted(set(plan.rotations) - set(context.rotation_steps))}: it was made by "
                                       f"keygen for another packing or model")
        return ReplicatedServer(model, context, plan, max_ciphertexts=1 << 20)
    from tensor_ops.sample_packing import SamplePackedServer

    return SamplePackedServer(sample_packed_model(model, context.params), context)


def run_local(packing: str, model, x, shape, *, params=None, allow_insecure: bool = False, report=print,
              plan=None):
    """Keys, encryption, evaluation and decryption of ``x`` (one sample or a batch) in this process under a dense
    packing; the server holds the client's public keys only. ``plan``: made by ``dense_plan`` if None. Raises
    OutputRangeError naming samples by their index in ``x``."""
    from tensor_ops.inference import OutputRangeError

    batch, single = flat_batch(x, shape)
    plan = dense_plan(packing, model, shape, params) if plan is None else plan
    client = make_client(packing, plan, allow_insecure=allow_insecure, samples=len(batch))
    server = server_for(packing, model, client.public_context(), shape,
                        fold=plan.stages[0].fold if packing == "replicated" else 1)
    if packing == "replicated":
        per = max(1, MAX_REQUEST_CIPHERTEXTS // plan.input_ciphertexts)
        server.prepare()
        chunks = [batch[s:s + per] for s in range(0, len(batch), per)]
    else:
        batch = batch.reshape(len(batch), -1)
        chunks = [batch[s:s + client.set_size] for s in range(0, len(batch), client.set_size)]
    outputs, invalid, sizes, received = [], [], [], 0

    def counted(records):
        for record in records:
            sizes.append(len(record))
            yield record

    for k, chunk in enumerate(chunks):
        if packing == "samples":  # streamed to the server record by record: the request is never held whole
            reply = server.evaluate(counted(client.encrypt_set(chunk)))
        else:
            request = encrypt(packing, client, chunk)
            sizes.append(len(request))
            reply = server.evaluate(request)
        received += len(reply)
        offset = sum(len(c) for c in chunks[:k])
        try:
            y = client.decrypt(reply) if packing == "replicated" else client.decrypt(reply, count=len(chunk))
        except OutputRangeError as error:
            y = error.outputs
            invalid += [offset + int(i) for i in error.untrusted]
        outputs.append(np.asarray(y).reshape(len(chunk), *model.output_shape(shape)))
    report(f"client: {len(chunks)} request(s) of {sum(sizes)} bytes, replies {received} bytes; public keys "
           f"{len(client.public_context())} bytes (no secret key with the server)")
    y = np.concatenate(outputs, axis=0)
    if invalid:
        raise OutputRangeError(f"invalid result: samples {invalid[:20]}{' ...' if len(invalid) > 20 else ''} decrypt "
                               f"to values outside the plan's output range (or not finite): an activation input left "
                               f"its fitted interval there", invalid, (), invalid, y)
    return y[0] if single else y


__all__ = ["SAMPLE_PACKING_MIN_BATCH", "CHOICES", "RECORD_NAMES", "DESCRIPTIONS", "Choice", "packing_for_batch",
           "dense_chain_problem", "choose_packing", "replicated_fold", "dense_plan", "sample_packed_model",
           "plan_record", "packing_of_record", "plan_from_record", "explain", "make_client", "save_client",
           "client_file_packing", "load_client", "client_plan", "key_report", "flat_batch", "encrypt",
           "message_packing", "server_for", "run_local"]
