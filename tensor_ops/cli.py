"""``python -m tensor_ops`` (also ``hezk``): encrypted inference with files, the same flow as the HTTP endpoint.

    python -m tensor_ops plan    --model model.onnx|model.npz [--out plan.json] [--measure]
    python -m tensor_ops keygen  --model model.npz --client client.key --context public.ctx   (client side)
    python -m tensor_ops encrypt --client client.key --input x.npy --out request.bin         (client side)
    python -m tensor_ops infer   --model model.npz --context public.ctx --request request.bin --out reply.bin
    python -m tensor_ops infer   --model model.npz --input x.npy --out y.npy     (all steps in one process)
    python -m tensor_ops decrypt --client client.key --reply reply.bin --out y.npy [--flood]  (client side)
    python -m tensor_ops serve   --model model.npz [--port 8000] [--tokens-file tokens.txt]  (HTTP, serve extra)
    python -m tensor_ops remote  --url URL --client client.key --input x.npy --out y.npy [--token-file t] (client)

A model file is ONNX or hezk's ``.npz`` (read through the shared description ``hezk.model``; the same file
means the same network to ``python -m proofs``).
``client.key`` is SECRET (it holds the secret key); every other file may be shared. ``keygen`` may take
``--plan plan.json`` (the server's public plan) instead of the model, and refuses a plan below 128-bit security
unless given ``--insecure``; it prints the security level with the key sizes; ``plan``, ``keygen`` and ``infer`` take
``--input-shape 1,8,8`` for a model file that does not record its sample shape, and ``--calibration x.npy``
(representative inputs: each fitted activation is fitted on the range its input takes there, weighted by where
they lie), ``--degree 7`` (of each fitted activation) and ``--key-budget 2GiB`` (bytes the Galois keys may take;
the server side takes the same as its clients); ``--params N14|N16_BOOT|params.json`` names the CKKS parameters and
``--bootstrap`` / ``--no-bootstrap`` asks for bootstrapping or forbids it (default: the smallest secure parameters,
or N16_BOOT with bootstraps placed for a model deeper than the deepest secure preset; the plan prints where each
bootstrap sits and its precision). Parameters below 128 bits named by ``--params`` need ``--insecure``. Local ``infer`` runs the plain reference on the input
too and prints a warning when an activation's input leaves its fitted interval. Key generation and evaluation
show a progress bar on stderr when it is a terminal (``--progress`` / ``--no-progress``).
Errors print one line naming the problem and exit with status 2.

``plan``, ``keygen`` and ``infer`` take ``--packing auto|slots|replicated|samples`` (``tensor_ops.dense_packings``):
for a chain of dense layers with fitted activations, ``auto`` runs the replicated plan (one sample per ciphertext:
latency) below ``SAMPLE_PACKING_MIN_BATCH`` = 100 samples and sample packing (one sample per slot: throughput) from
it up, the slot-blocked plan for every other model; ``plan`` and ``keygen`` learn the batch from ``--samples N``
(without it: the slot plan). The plan JSON, the client file and the requests carry the packing; ``encrypt``,
``decrypt`` and server-side ``infer`` follow it and refuse a file of another packing.

A model with attention (an exported transformer layer: ``tensor_ops.attention_plan``) runs through ``plan``, local
``infer`` and the split flow alike (``tensor_ops.attention_split``): ``keygen`` plans it from --model and
--calibration (or reads ``plan --out``'s JSON) and makes its rotation, relinearisation and bootstrap keys; ``encrypt``
packs each sample in the plan's input layout; server-side ``infer`` plans it again from the same files and options
and evaluates from the public context; ``decrypt`` unpacks the output layout. Messages name the model's and the
plan's digests: keys or requests of another model, calibration, degree or parameters are refused (status 2).

Right or refused: a plan calibrated on inputs states their range, and ``encrypt`` refuses samples outside it
(``--clip`` clips them, with a warning naming them); ``decrypt`` and ``remote`` check every output against the
plan's output range and, for a sample outside it, write nothing and exit with status 3 naming the sample, its
ciphertext and the samples that share it (all untrusted). Local ``infer`` encrypts only the samples whose plain
reference keeps every activation input in its interval, writes NaN rows for the others and exits with status 3
naming them.
"""
from __future__ import annotations

import json
import pathlib
import sys
import warnings

import numpy as np

import hezk.memory
from crypto.ckks.flooding import STATISTICAL_SECURITY
from crypto.errors import HEError, SerializationError, ShapeError
from tensor_ops import dense_packings, serve
from tensor_ops.activations import CompositeRelu
from tensor_ops.inference import (DEFAULT_MAX_CIPHERTEXTS, Client, EncodedCache, OutputRangeError, Server,
                                  describe_bytes, unpack_message)
from tensor_ops.model_plan import DEFAULT_KEY_BUDGET, MemoryBudgetError, default_memory_budget
from tensor_ops.nn import ActivationRangeWarning, Sequential, StageTooDeep
from tensor_ops.cli_args import COMMANDS, SECRET, add_commands, parser  # noqa: F401 (re-exported)
from tensor_ops.progress import command_of, progress_bar, run_command
from tensor_ops.serve import parse_shape

__all__ = ["main", "parser", "add_commands", "run", "parse_shape"]


def _shape(args):
    return None if args.input_shape is None else parse_shape(args.input_shape)


def _degree(args) -> int | None:
    """--degree as an integer (None when absent); HEError naming it otherwise."""
    degree = getattr(args, "degree", None)
    if degree is None:
        return None
    try:
        return int(degree)
    except ValueError:
        raise HEError(f"--degree {degree!r} must be an integer (of each fitted activation)") from None


def _load(args, x=None) -> Sequential:
    """The model of --model (ONNX or .npz, see ``Sequential.load``) at --input-shape; a file that does not
    state its sample shape takes it from the input x when there is one."""
    calibration = None
    if getattr(args, "calibration", None):
        calibration = _load_array(args.calibration, "--calibration")
    degree = _degree(args)
    try:
        model = Sequential.load(args.model, _shape(args), calibration=calibration, degree=degree)
    except ShapeError:
        if x is None or args.input_shape is not None:
            raise
        x = np.asarray(x)
        sample = x.shape[-3:] if x.ndim in (3, 4) else x.shape[1:] if x.ndim == 2 else x.shape
        model = Sequential.load(args.model, sample, calibration=calibration, degree=degree)
    model = _maxpool_between_bootstraps(args, model, calibration, degree)
    model = _relus(args, model)
    if model.calibration_report is not None:
        mean, worst = model.calibration_report
        print(f"calibration: activations fitted on the ranges their inputs take on {args.calibration} "
              f"({len(calibration)} samples); error against the float model there: mean {mean:.3g}, max {worst:.3g}")
    return model


def _maxpool_between_bootstraps(args, model, calibration, degree):
    """``model``, or, when its plan needs bootstraps and a MaxPool's composite sign (10 levels) does not fit the
    levels a bootstrap leaves, the model with each pairwise max's relu a fitted ReLU polynomial (3 levels; the
    plan states its larger error). The plan is memoised: the command's own planning is not repeated."""
    if not _has_composite_sign(model.layers):
        return model
    try:
        _model_plan(args, model, model.input_shape)
    except StageTooDeep:
        shallow = Sequential.load(args.model, model.input_shape, calibration=calibration, degree=degree,
                                  sign_degrees=None)
        if shallow.activation_fit() != model.activation_fit():
            print("MaxPool: the composite sign of each pairwise max (10 levels) does not fit between bootstraps; "
                  "its relu is a fitted polynomial instead (larger error, stated below)")
            return shallow
    except HEError:
        pass  # the command's own planning names the problem
    return model


def _relus(args, model):
    """--relu (fit, composite, auto; default fit): each calibrated ReLU's fit kept or replaced by the composite sign
    (``Sequential.choose_relus`` under --params, --bootstrap and --key-budget); the plan states both errors."""
    relu = getattr(args, "relu", None) or "fit"
    if relu == "fit":
        return model
    chosen = model.choose_relus(key_budget=_budget(args), relu=relu, **_choice(args))
    taken = sum(choice.chose == "composite" for choice in chosen.relu_choices.values())
    print(f"relu: {taken} of {len(chosen.relu_choices)} ReLUs take the composite sign (--relu {relu})")
    return chosen


def _has_composite_sign(layers) -> bool:
    """Whether a layer (nested in residual blocks) is a MaxPool's composite-sign relu."""
    return any(isinstance(getattr(layer, "poly", None), CompositeRelu)
               or _has_composite_sign(getattr(layer, "layers", ())) for layer in layers)


def _progress(args, label: str):
    """A tqdm bar on stderr if --progress, or by default when stderr is a terminal; else None."""
    wanted = args.progress if args.progress is not None else sys.stderr.isatty()
    return progress_bar(label) if wanted else None


def _budget(args) -> int:
    """--key-budget in bytes (default: DEFAULT_KEY_BUDGET)."""
    text = getattr(args, "key_budget", None)
    return DEFAULT_KEY_BUDGET if text is None else serve.parse_bytes(text)


def _choice(args) -> dict:
    """``params`` / ``bootstrap`` of --params and --bootstrap/--no-bootstrap (``serve.plan_keywords``), read once."""
    if not hasattr(args, "_choice"):
        args._choice = serve.plan_keywords(args)
    return args._choice


def _model_plan(args, model, shape=None, role=None, ciphertexts=1, progress=None):
    """The model's plan under --key-budget, --params and --bootstrap (automatic without them); with ``role``
    ("server", "client", "local"), refused when its estimated peak memory exceeds --memory-budget (local: a
    smaller key budget is tried first, the keys held twice there). ``progress``: of the planning."""
    shape = shape if shape is not None else _shape(args)
    plan = model.plan(shape, key_budget=_budget(args), progress=progress, **_choice(args))
    hezk.memory.release_freed_memory()  # the planner's transient maps: free heap, resident until reused
    return plan if role is None else _within_memory(args, plan, role, ciphertexts, model, shape)


def _memory_budget(args) -> int | None:
    """--memory-budget in bytes (default: MEMORY_FRACTION of MemAvailable now; None where unknown)."""
    text = getattr(args, "memory_budget", None)
    return default_memory_budget() if text is None else serve.parse_bytes(text, "--memory-budget")


def _within_memory(args, plan, role, ciphertexts=1, model=None, shape=None):
    """``plan`` when its ``role`` peak fits --memory-budget; else (given the model) the plan of the largest key
    budget that fits (fewer Galois keys: composite rotations, down to the powers of two); else
    ParameterError with the figure and what to change."""
    budget = _memory_budget(args)
    estimate = plan.memory_estimate(ciphertexts)
    if budget is None or estimate.peak(role) <= budget:
        return plan
    if model is not None:
        copies = {"server": 1.5, "client": 2.0, "local": 1.0}[role]     # the keys' forms held at the peak
        fewer = int(plan.galois_key_bytes - (estimate.peak(role) - budget) / copies)
        if fewer > 0:
            try:
                smaller = model.plan(shape, key_budget=fewer, **_choice(args))
            except HEError:
                smaller = None
            if smaller is not None and smaller.memory_estimate(ciphertexts).peak(role) <= budget:
                print(f"memory: the plan under --key-budget {_budget(args)} needs {estimate.describe(role)}, over "
                      f"--memory-budget {budget}; planned with a key budget of {fewer} bytes instead")
                return smaller
    estimate.check(role, budget, key_budget=_budget(args))
    return plan


def _weights_cache(args, plan, role, ciphertexts):
    """The encoded-weights store of a server that evaluates ``ciphertexts`` ciphertexts: none kept for one
    (each stage's diagonals are encoded where used, one plaintext at a time, and dropped: a stage runs once per
    ciphertext), else a cache of what --memory-budget leaves beside the plan's other parts."""
    budget = _memory_budget(args)
    if ciphertexts <= 1:
        return EncodedCache(1)
    left = plan.weight_bytes if budget is None else budget - plan.memory_estimate(ciphertexts).peak(role)
    return EncodedCache(max(min(left, plan.weight_bytes), 1))


def _attention(args, command: str, x=None):
    """(plan, model) of ``tensor_ops.attention_plan`` when --model holds attention (Bilinear, Softmax, LayerNorm
    nodes: an exported transformer layer), its plan printed; None for every other model (the Sequential path).
    ``x``, the local input: its shape and values checked before the plan (seconds to minutes) is made.
    ``plan``, ``keygen``, local ``infer`` and server-side ``infer --context`` plan it alike (the same options give
    the same plan on both sides: ``tensor_ops.attention_split.plan_identity``); ``infer --dask`` is refused."""
    from tensor_ops import attention_plan

    graph = attention_plan.read_graph(args.model, _shape(args))
    if graph is None:
        return None
    if x is not None:
        attention_plan.input_batch(graph, x)  # ShapeError / ParameterError naming the shapes or the values
    if command == "infer --dask":
        raise HEError("--dask: a model with attention runs in this process (local infer without --dask) or split "
                      "into keygen, encrypt, infer --context and decrypt; Dask tasks are built for the slot path only")
    packing = getattr(args, "packing", None) or "auto"
    if packing != "auto":
        raise HEError(f"--packing {packing}: a model with attention is laid out by its own plan (each sample in the "
                      f"compact layout the planner's products start from); omit --packing")
    calibration = _load_array(args.calibration, "--calibration") if getattr(args, "calibration", None) else None
    # the server side plans what it is given (as for every model: the client decides its security at keygen)
    insecure = _insecure(args) or (command in ("plan", "infer --context") and _choice(args)["params"] is not None)

    def planned(degree):
        return attention_plan.plan_attention(graph, calibration, params=_choice(args)["params"],
                                             bootstrap=_choice(args)["bootstrap"], allow_insecure=insecure,
                                             key_budget=_budget(args), activation_degree=degree)

    plan, model = planned(ATTENTION_DEGREES[0] if _degree(args) is None else _degree(args))
    if _degree(args) is None and calibration is not None and \
            plan.model_error > ATTENTION_ERROR_SHARE * plan.output_magnitude:
        first = plan.model_error / plan.output_magnitude
        plan, model = planned(ATTENTION_DEGREES[1])
        print(f"activations refitted at degree {ATTENTION_DEGREES[1]}: degree {ATTENTION_DEGREES[0]} erred "
              f"{first:.2%} of the largest output on the calibration data, more than "
              f"{ATTENTION_ERROR_SHARE:.0%} (--degree chooses)")
    print(plan.explain())
    plan.require_parameters()  # no parameters: the refusal says why, after the plan
    return plan, model


ATTENTION_DEGREES = (7, 15)
"""An attention model's activation degree without --degree: the first, or the second where the first errs more than
ATTENTION_ERROR_SHARE of the largest output on the calibration data (a ReLU layer at degree 7: ~2.3%)."""
ATTENTION_ERROR_SHARE = 0.01
"""Half the 2% an approximated transformer is held to: fresh inputs err more than the calibration data."""


def _samples(args) -> int | None:
    """--samples (None when absent); HEError naming it below 1."""
    samples = getattr(args, "samples", None)
    if samples is not None and samples < 1:
        raise HEError(f"--samples {samples} must be at least 1 (the samples the keys will encrypt at once)")
    return samples


def _packing(args, model, samples, split: bool = False, shape=None):
    """(choice, plan): the packing of --packing for ``model`` and ``samples`` (``dense_packings.choose_packing``:
    the one rule) and, for a dense packing, its plan at --params (its own 128-bit choice without), both printed;
    plan None for the slot path. A dense packing ``auto`` chose that cannot plan the model (too deep for its
    parameters, a layout that does not fit them) falls back to the slot path, saying why."""
    slot_options = tuple(option for option, dest in (("--key-budget", "key_budget"), ("--measure", "measure"))
                         if getattr(args, dest, None))
    choice = dense_packings.choose_packing(model, samples, getattr(args, "packing", None) or "auto",
                                           bootstrap=_choice(args)["bootstrap"],
                                           dask=getattr(args, "dask", None) is not None, split=split,
                                           slot_options=slot_options)
    plan = None
    if choice.packing != "slots":
        try:
            plan = dense_packings.dense_plan(choice.packing, model, shape if shape is not None else _shape(args),
                                             _choice(args)["params"])
        except HEError as error:
            if not choice.reason.startswith("auto"):
                raise HEError(f"--packing {choice.packing}: {error}") from None
            choice = dense_packings.Choice("slots", f"auto: the {choice.packing} packing cannot plan the model "
                                                    f"({error})")
    print(choice.line())
    if plan is not None:
        print(dense_packings.explain(choice.packing, plan, model))
    return choice, plan


def _plan(args):
    attention = _attention(args, "plan")
    if attention is not None:
        if args.out:
            from tensor_ops.attention_split import AttentionSpec

            spec = AttentionSpec.of(attention[0], attention[1].graph)
            pathlib.Path(args.out).write_text(json.dumps(spec.to_dict()))
            print(f"plan written to {args.out} (the public part a client keys from: keygen --plan)")
        return
    model = _load(args)
    choice, plan = _packing(args, model, _samples(args), split=True)
    if plan is None:
        plan = _model_plan(args, model, role="server", progress=_progress(args, "planning"))
        if getattr(args, "measure", False):
            plan = plan.calibrated()  # per-operation times measured here (about a second) instead of the built-in
        print(plan.explain())
    if args.out:
        pathlib.Path(args.out).write_text(json.dumps(dense_packings.plan_record(choice.packing, plan, choice.reason)))
        print(f"plan written to {args.out}")


def _read(path, what: str) -> bytes:
    try:
        return pathlib.Path(path).read_bytes()
    except OSError as error:
        raise SerializationError(f"{what} {path}: {error.strerror or error}") from None


def _read_plan(path):
    """(packing, plan) of a plan JSON (``dense_packings.plan_from_record``: the packing it names; an attention
    model's: ("attention", ``AttentionSpec``))."""
    from tensor_ops.attention_split import PACKING, spec_from_record

    blob = _read(path, "--plan")
    try:
        data = json.loads(blob.decode())
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise SerializationError(f"--plan {path} is {describe_bytes(blob)}, not a plan: pass the JSON written by "
                                 f"'plan --out' (or served at GET /plan)") from None
    spec = spec_from_record(data)
    if spec is not None:
        return PACKING, spec
    return dense_packings.plan_from_record(data)


def _agree(args, packing: str, what: str) -> None:
    """HEError when an explicit --packing differs from the packing ``what`` was made for."""
    asked = getattr(args, "packing", None) or "auto"
    if asked not in ("auto", packing):
        raise HEError(f"--packing {asked}, but {what} was made for packing {packing!r} "
                      f"({dense_packings.RECORD_NAMES[packing]}): omit --packing or pass a file of that packing")


def _agree_files(expected: str, found: str, what: str, client) -> None:
    """HEError when ``what`` was made for another packing than the client file ``client``."""
    if found != expected:
        raise HEError(f"{what} was made for packing {found!r}, but --client {client} holds keys of packing "
                      f"{expected!r}: pass the files of one keygen")


def _keygen(args):
    progress = _progress(args, "rotation keys")
    if args.plan:
        packing, plan = _read_plan(args.plan)
        if packing == "attention":
            return _keygen_attention(args, plan, args.insecure)
        _agree(args, packing, f"--plan {args.plan}")
        if packing != "slots":
            return _keygen_dense(args, packing, plan, args.insecure)
        client = Client(plan=_within_memory(args, plan, "client"), progress=progress,
                        allow_insecure=args.insecure)
    elif args.model:
        attention = _attention(args, "keygen")
        if attention is not None:
            from tensor_ops.attention_split import AttentionSpec

            return _keygen_attention(args, AttentionSpec.of(attention[0], attention[1].graph), _insecure(args))
        model = _load(args)
        choice, plan = _packing(args, model, _samples(args), split=True)
        if plan is not None:
            return _keygen_dense(args, choice.packing, plan, _insecure(args))
        client = Client(plan=_model_plan(args, model, role="client"), progress=progress,
                        allow_insecure=_insecure(args))
    else:
        raise HEError("keygen needs --model or --plan")
    client.save(args.client)
    pathlib.Path(args.context).write_bytes(client.public_context())
    report = client.key_report()
    print(f"SECRET client state -> {args.client} (keep private, never send it); public context -> {args.context} "
          f"({report['public_context_bytes']} bytes, {report['rotation_keys']} rotation keys); security: "
          f"{report['security']} (N=2^{client.params.log_n}, log2(QP)={client.params.log_qp:.1f})")


def _keygen_attention(args, spec, insecure: bool):
    """keygen of a model with attention (``tensor_ops.attention_split``): the SECRET client file (the plan's public
    part inside, no Galois key) and the public context (the plan's rotation keys, relinearisation key and, when it
    bootstraps, the bootstrap's keys)."""
    from tensor_ops.attention_split import AttentionClient

    client = AttentionClient(spec, progress=_progress(args, "rotation keys"), allow_insecure=insecure)
    client.save(args.client)
    pathlib.Path(args.context).write_bytes(client.public_context())
    report = client.key_report()
    boot = ", the bootstrap's keys and the conjugation key" if report["bootstrap"] else ""
    print(f"SECRET client state (attention) -> {args.client} (keep private, never send it); public context -> "
          f"{args.context} ({report['public_context_bytes']} bytes, {report['rotation_keys']} rotation keys{boot}); "
          f"security: {report['security']} (N=2^{client.params.log_n}, log2(QP)={client.params.log_qp:.1f})")


def _keygen_dense(args, packing, plan, insecure: bool):
    """keygen of a dense packing: the SECRET client file (its packing and plan inside) and the public context."""
    client = dense_packings.make_client(packing, plan, allow_insecure=insecure, samples=_samples(args))
    dense_packings.save_client(packing, client, args.client)
    pathlib.Path(args.context).write_bytes(client.public_context())
    print(f"SECRET client state ({packing}) -> {args.client} (keep private, never send it); public context -> "
          f"{args.context} ({dense_packings.key_report(packing, client)})")


def _insecure(args) -> bool:
    """--insecure, allowed only with --params naming the parameters (an automatic choice is always secure)."""
    return bool(getattr(args, "insecure", False)) and _choice(args)["params"] is not None


def _one_line_warnings(call):
    """``call()``, each warning it gives printed as one line on stderr (``warning: ...``: no file name and source
    line, as Python's default display has)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = call()
    for message in dict.fromkeys(str(warning.message) for warning in caught):  # each once (several requests)
        print(f"warning: {message}", file=sys.stderr)
    return result


def _encrypt(args):
    from tensor_ops import attention_split

    clip = bool(getattr(args, "clip", False))
    if attention_split.is_client_file(args.client):
        client = attention_split.AttentionClient.load(args.client)
        x = _load_array(args.input, "--input")
        request = _one_line_warnings(lambda: client.encrypt(x, clip=clip))
        pathlib.Path(args.out).write_bytes(request)
        print(f"encrypted input of shape {x.shape} (attention: one tensor a sample, the plan's input layout) -> "
              f"{args.out} ({len(request)} bytes)")
        return
    packing, client = dense_packings.load_client(args.client)
    x = _load_array(args.input, "--input")
    if packing == "slots":
        request = _one_line_warnings(lambda: client.encrypt(x, clip=clip))
    else:
        request = _one_line_warnings(lambda: dense_packings.encrypt(packing, client, x, clip=clip))
    pathlib.Path(args.out).write_bytes(request)
    print(f"encrypted input of shape {x.shape} -> {args.out} ({len(request)} bytes)")


def _infer(args):
    if args.dask is not None and args.context is not None:
        raise HEError("--dask runs the whole flow as tasks (keys, encryption and decryption here, evaluation on the "
                      "workers): omit --context and pass the plain input .npy")
    if args.context is None:
        return _infer_locally(args)
    from tensor_ops import attention_split

    request = _read(args.request, "--request")
    if request.startswith(_NPY_MAGIC):
        raise HEError(f"--request {args.request} is a plain numpy array: encrypt it first "
                      f"(python -m tensor_ops encrypt), or omit --context to run the whole flow locally")
    attention = _attention(args, "infer --context")
    if attention is not None:
        return _infer_attention(args, *attention, request)
    if attention_split.message_is_attention(request):
        raise HEError(f"--request {args.request} was encrypted for a model with attention, but --model "
                      f"{args.model} has none: pass the model the keys were made for")
    packing = dense_packings.message_packing(request)
    _agree(args, packing, f"--request {args.request}")
    model = _load(args)
    if packing != "slots":
        return _infer_dense(args, packing, model, request)
    try:
        count = len(unpack_message(request, "request")[1])
    except HEError:
        count = 1  # not a request: Server.evaluate names the problem
    encoded = EncodedCache(1)       # one ciphertext: nothing kept (see _weights_cache)
    try:
        plan = _model_plan(args, model, role="server", ciphertexts=count)   # refused before reading the keys
        encoded = _weights_cache(args, plan, "server", count)
    except MemoryBudgetError:
        raise
    except HEError:
        pass  # a plan of other parameters than the context's: the server plans with the context's below
    server = Server(model, _read(args.context, "--context"), input_shape=_shape(args), key_budget=_budget(args),
                    encoded=encoded)
    named = _choice(args)["params"]
    if named is not None and named != server.context.params:
        raise HEError(f"--params names {named!r} but the context was made for {server.context.params!r}: the "
                      f"server evaluates under the client's parameters (omit --params)")
    reply = server.evaluate(request, progress=_progress(args, "evaluate"))
    pathlib.Path(args.out).write_bytes(reply)
    print(f"evaluated {args.request} -> {args.out} ({len(reply)} bytes)")


def _infer_attention(args, plan, model, request):
    """Server side of a model with attention: the plan made here from --model and the options (the client's), the
    client's public context (no secret key), each sample evaluated (``attention_split.AttentionServer``)."""
    from tensor_ops.attention_split import AttentionServer

    server = AttentionServer(plan, model, _read(args.context, "--context"))
    reply = server.evaluate(request, progress=_progress(args, "evaluate"))
    pathlib.Path(args.out).write_bytes(reply)
    boots = f", {server.bootstraps} ciphertext bootstraps" if server.spec.bootstrap is not None else ""
    print(f"evaluated {args.request} (attention, public keys only{boots}) -> {args.out} ({len(reply)} bytes)")


def _infer_dense(args, packing, model, request):
    """Server side of a dense packing: the plan made from the model at the context's parameters."""
    context = _read(args.context, "--context")
    server = dense_packings.server_for(packing, model, context, _shape(args), request)
    named = _choice(args)["params"]
    if named is not None and named != server.context.params:
        raise HEError(f"--params names {named!r} but the context was made for {server.context.params!r}: the "
                      f"server evaluates under the client's parameters (omit --params)")
    reply = server.evaluate(request)
    pathlib.Path(args.out).write_bytes(reply)
    print(f"evaluated {args.request} ({packing}) -> {args.out} ({len(reply)} bytes)")


def _infer_locally(args):
    """Without --context: the whole flow in one process (keys, encrypt, server evaluation, decrypt)."""
    x = _load_array(args.request, "--input")
    attention = _attention(args, "infer --dask" if args.dask is not None else "local", x)
    if attention is not None:
        from tensor_ops.attention_plan import run_attention
        y = run_attention(*attention, x, progress=_progress(args, "rotation keys"), report=print)
        np.save(args.out, y)
        print(f"client: decrypted output of shape {y.shape} -> {args.out}")
        return
    model = _load(args, x)
    shape = _shape(args) or model.sample_shape(x)
    count = 1 if np.asarray(x).shape == tuple(shape) else len(x)
    args._packing, args._dense_plan = _packing(args, model, count, shape=shape)
    _reference_warnings(model, x, shape, args.request)
    refused = _outside(args, model, x, shape)
    if refused.size:
        single = np.asarray(x).shape == tuple(shape)
        kept = np.setdiff1d(np.arange(1 if single else len(x)), refused)
        if not kept.size:
            raise OutputRangeError(f"refused: samples {refused.tolist()} of {args.request} {_WHY_REFUSED}; nothing to "
                                   f"compute, nothing written", refused, (), refused)
        y = np.full((1 if single else len(x),) + tuple(model.output_shape(shape)), np.nan)
        y[kept] = _infer_encrypted(args, model, shape, np.asarray(x)[kept])
        _save_outputs(args.out, y[0] if single else y, getattr(model, "postprocess", ()), single, missing=refused)
        raise OutputRangeError(f"refused: samples {refused.tolist()} of {args.request} {_WHY_REFUSED}, and encrypted "
                               f"beside the others could spoil them; the other {kept.size} samples were computed "
                               f"apart and written to {args.out} (rows of refused samples are NaN)",
                               refused, (), refused)
    y = _infer_encrypted(args, model, shape, x)
    print(f"client: decrypted output of shape {y.shape}")
    _save_outputs(args.out, y, getattr(model, "postprocess", ()), np.asarray(x).shape == tuple(shape))


_WHY_REFUSED = ("leave the model's calibrated ranges (a value outside the plan's input range, or an activation "
                "input outside its fitted interval in the plain reference): their results would be wrong (fix: "
                "recalibrate on inputs like these, --calibration, or clip them at encryption, hezk encrypt --clip)")


def _outside(args, model, x, shape) -> np.ndarray:
    """The samples outside the plan's calibrated input range or whose plain reference leaves an activation's
    interval (none if the model or its plan refuses x: the encrypted path names that problem)."""
    try:
        batch = np.asarray(x, dtype=np.float64)
        batch = batch[None] if batch.shape == tuple(shape) else batch
        if args._packing.packing != "slots":  # the model's calibrated range: the dense plans state the same
            low, high = model.input_range if model.input_range is not None else (-np.inf, np.inf)
            flat = batch.reshape(len(batch), -1)
            outside = np.flatnonzero(np.any((flat < low) | (flat > high), axis=1))
        else:
            outside = _model_plan(args, model, shape).inputs_outside(batch)
        return np.union1d(model.samples_outside(x, shape), outside)
    except HEError:
        return np.zeros(0, dtype=np.int64)


def _infer_encrypted(args, model, shape, x):
    """Keys, encryption, server evaluation and decryption of x in this process (or on --dask)."""
    x = np.asarray(x)
    if args._dense_plan is not None:
        return _one_line_warnings(lambda: dense_packings.run_local(
            args._packing.packing, model, x, shape, plan=args._dense_plan, allow_insecure=_insecure(args),
            report=print))
    plan = _model_plan(args, model, shape)
    # the ciphertexts held at once: one request's (``_slot_requests`` sends a larger batch request by request)
    count = min(plan.ciphertexts_for(1 if x.shape == tuple(shape) else len(x)), DEFAULT_MAX_CIPHERTEXTS)
    plan = _within_memory(args, plan, "local", count, model, shape)
    budget = plan.key_budget if plan.key_budget is not None else _budget(args)
    client = Client(plan=plan, progress=_progress(args, "rotation keys"), allow_insecure=_insecure(args))
    print(client.plan.explain())
    if args.dask is not None:
        y = _infer_on_dask(args, model, client, x)
    else:
        server = Server(model, client.server_context(), key_budget=budget,  # the client's key arrays, not a copy
                        encoded=_weights_cache(args, client.plan, "local", count))
        y = _one_line_warnings(lambda: _slot_requests(args, client, server, x, tuple(shape)))
    return y


def _slot_requests(args, client, server, x, shape):
    """x through the local slot-path server in requests of at most the server's ``max_ciphertexts`` ciphertexts
    (one request for a batch that fits, as before; a larger batch in turn, so only one request is held at a
    time); an OutputRangeError of a later request names the samples by their index in x."""
    per = client.plan.batch * server.max_ciphertexts
    starts = [0] if x.shape == shape else list(range(0, len(x), per))
    outputs = []
    for k, start in enumerate(starts):
        request = client.encrypt(x if len(starts) == 1 else x[start:start + per])
        print(f"client: keys shared in memory with the local server (no secret key), request {len(request)} bytes"
              + (f" ({k + 1} of {len(starts)}: samples {start}..{min(start + per, len(x)) - 1})"
                 if len(starts) > 1 else ""))
        reply = server.evaluate(request, progress=_progress(args, "evaluate"))
        print(f"server: evaluated the encrypted input -> reply {len(reply)} bytes")
        try:
            outputs.append(client.decrypt(reply))
        except OutputRangeError as error:
            if len(starts) == 1:
                raise
            shift = [start + i for i in error.untrusted]
            raise OutputRangeError(f"request {k + 1} of {len(starts)} (samples from {start}): {error}",
                                   [start + i for i in error.invalid], error.ciphertexts, shift) from None
    return outputs[0] if len(starts) == 1 else np.concatenate(outputs, axis=0)


def _reference_warnings(model, x, input_shape, source) -> None:
    """Run the plain reference on the plain input x and print each ActivationRangeWarning it gives (an input
    outside the interval an activation's polynomial was fitted on: the encrypted result is off there too)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            model.forward(x, input_shape)
        except HEError:
            return  # the encrypted path names the problem
    for warning in caught:
        if issubclass(warning.category, ActivationRangeWarning):
            print(f"warning: {warning.message} (the plain reference on {source})", file=sys.stderr)
        else:
            warnings.warn_explicit(warning.message, warning.category, warning.filename, warning.lineno)


def _infer_on_dask(args, model, client, x):
    """--dask: one task per batch of samples (tensor_ops.distributed), the keys sent to each worker once."""
    from tensor_ops.distributed import batch_requests, evaluate_batches
    try:
        batch = None if args.batch is None else int(args.batch)
    except ValueError:
        raise HEError(f"--batch {args.batch!r} must be a positive integer (samples per task)") from None
    requests = batch_requests(client, x if x.shape != client.plan.input_shape else x[None], batch)
    print(f"client: public context {client.key_bytes} bytes (no secret key), {len(requests)} requests "
          f"({sum(map(len, requests))} bytes) -> tasks on --dask {args.dask}")
    replies = evaluate_batches(model, client.public_context(), requests, input_shape=client.plan.input_shape,
                               dask=args.dask, progress=_progress(args, "tasks"), key_budget=client.plan.key_budget)
    print(f"workers: evaluated {len(replies)} requests")
    y = np.concatenate(_one_line_warnings(lambda: [client.decrypt(reply) for reply in replies]), axis=0)
    return y[0] if x.shape == client.plan.input_shape else y


def _decrypt(args):
    """Exact for the key holder's own use; ``--flood`` for an output that will be shared (IND-CPA-D: an exact
    decryption handed to whoever has the reply gives away the secret key; ``Client.decrypt_shared``)."""
    from tensor_ops import attention_split

    if attention_split.is_client_file(args.client):
        if getattr(args, "flood", False):
            raise HEError(f"--flood: noise flooding is built for the slot path only; {args.client} holds keys of a "
                          f"model with attention")
        client = attention_split.AttentionClient.load(args.client)
        y = _one_line_warnings(lambda: client.decrypt(_read(args.reply, "--reply")))
        np.save(args.out, y)
        print(f"decrypted output of shape {y.shape} (attention) -> {args.out}")
        return
    packing, client = dense_packings.load_client(args.client)
    reply = _read(args.reply, "--reply")
    _agree_files(packing, dense_packings.message_packing(reply, "reply"), f"--reply {args.reply}", args.client)
    if packing != "slots":
        if getattr(args, "flood", False):
            raise HEError(f"--flood: noise flooding is built for the slot path only; {args.client} holds keys of "
                          f"packing {packing!r}")
        y = _one_line_warnings(lambda: client.decrypt(reply))
        print(f"decrypted output of shape {y.shape} ({packing})")
        return _save_outputs(args.out, y, (), False)
    if getattr(args, "flood", False):
        y, bits = _one_line_warnings(lambda: client.decrypt_shared(reply))
        print(f"noise-flooded for sharing: about {bits:.1f} bits of precision left per output (flood sized for "
              f"{STATISTICAL_SECURITY}-bit statistical security)")
    else:
        y = _one_line_warnings(lambda: client.decrypt(reply))
    print(f"decrypted output of shape {y.shape}")
    _save_outputs(args.out, y, *_postprocess_of(client, y))


def _print_classes(y) -> None:
    """The argmax of each sample's outputs, for a model with several outputs (one output is a score, not a
    class: nothing to print)."""
    if y.ndim >= 1 and y.shape[-1] > 1:
        print("predicted classes:", np.argmax(y, axis=-1))


def _remote(args):
    """Client side over HTTP: the context is registered on first use, and again if the server evicted it."""
    import httpx

    from tensor_ops import attention_split

    if attention_split.is_client_file(args.client):
        raise HEError(f"remote: the HTTP server runs the slot path only; {args.client} holds keys of a model with "
                      f"attention (run keygen, encrypt, infer --context and decrypt with files)")
    packing, client = dense_packings.load_client(args.client)
    if packing != "slots":
        raise HEError(f"remote: the HTTP server runs the slot path only; {args.client} holds keys of packing "
                      f"{packing!r} (run keygen with --packing slots)")
    x = _load_array(args.input, "--input")
    token = serve.read_token(args.token_file)
    try:
        with serve.Endpoint(args.url, token) as endpoint:
            y = _one_line_warnings(lambda: endpoint.infer(client, x, client.key_id.hex()))
    except serve.RemoteError as error:
        raise HEError(f"{args.url}: {error}") from None
    except httpx.TransportError as error:
        raise HEError(f"{args.url}: cannot reach the server ({error})") from None
    print(f"remote inference at {args.url}: output of shape {y.shape}")
    _save_outputs(args.out, y, *_postprocess_of(client, y))


def _postprocess_of(client, y) -> tuple:
    """(the plan's postprocess, whether y is one sample) for a client's decrypted output."""
    plan = client.plan
    if plan is None:
        return (), False
    return plan.postprocess, y.shape == tuple(plan.output_shape)


def _save_outputs(path, y, postprocess, single: bool, missing=()) -> None:
    """The model's outputs as its source (and onnxruntime) gives them: the client's ``postprocess`` (softmax,
    argmax, labels, zipmap, ...) applied to the decrypted output y, the first named output written to ``path``,
    each other one beside it (``stem.NAME.npy``); no postprocess: y itself. A ZipMap's dictionaries are written
    as one column per label, in the labels' order (the column order is printed). ``missing``: rows (refused
    samples) that get no value in any output: NaN (numeric outputs as float64), "" for text labels; the
    postprocess runs on the other rows only (an argmax of a NaN row would look like a label)."""
    if not postprocess:
        np.save(path, y)
        print(f"output -> {path}")
        _print_classes(y)
        return
    batched = np.asarray(y)[None] if single else np.asarray(y)
    kept = np.setdiff1d(np.arange(len(batched)), np.asarray(missing, dtype=np.int64))
    target = pathlib.Path(path)
    for i, out in enumerate(postprocess):
        value = out.apply(batched[kept])
        note = ""
        if isinstance(value, list):  # ZipMap: one dict per sample
            labels = list(out.steps[-1].labels)
            value, note = np.array([[d[k] for k in labels] for d in value]), f" (columns: labels {labels})"
        value = _with_missing_rows(np.asarray(value), kept, len(batched))
        value = value[0] if single else value
        where = target if i == 0 else target.with_name(f"{target.stem}.{_file_safe(out.name)}.npy")
        np.save(where, value)
        print(f"output {out.name!r} = {out.text().split(' = ', 1)[1]} (computed by the client after decryption)"
              f"{note} -> {where}")


def _with_missing_rows(value: np.ndarray, kept: np.ndarray, rows: int) -> np.ndarray:
    """``value`` (one row per kept sample) spread over ``rows`` rows, the others NaN ("" for text)."""
    if len(kept) == rows:
        return value
    text = value.dtype.kind in "US"
    full = np.full((rows,) + value.shape[1:], "" if text else np.nan, dtype=value.dtype if text else np.float64)
    full[kept] = value
    return full


def _file_safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in name)[:64] or "output"


_NPY_MAGIC = b"\x93NUMPY"


def _load_array(path, option: str):
    blob = _read(path, option)
    if not blob.startswith(_NPY_MAGIC):
        raise SerializationError(f"{option} {path} is {describe_bytes(blob)}, not a numpy .npy array "
                                 f"(write one with numpy.save)")
    try:
        return np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as error:
        raise SerializationError(f"{option} {path}: a damaged .npy array ({error})") from None


_HANDLERS = {"plan": _plan, "keygen": _keygen, "encrypt": _encrypt, "infer": _infer, "decrypt": _decrypt,
             "serve": serve.run, "remote": _remote}
assert set(_HANDLERS) == set(COMMANDS)


#: exit status of a result refused as wrong (``OutputRangeError``: outputs outside the plan's range)
INVALID_RESULT = 3


def _run(args) -> int:
    try:
        return _HANDLERS[args.command](args) or 0
    except OutputRangeError as error:
        print(f"error: {error}", file=sys.stderr)
        return INVALID_RESULT
    except (HEError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


def run(args) -> int:
    """Run parsed arguments; library errors print one line and give exit status 2 (a missing extra too, naming
    its pip command), a result refused as wrong (outputs outside the plan's range) status 3; Ctrl-C prints ``interrupted`` and gives 130 (:func:`hezk.progress.run_command`)."""
    return run_command(_run, args)


def main(argv=None) -> int:
    """``python -m tensor_ops``: parse ``argv`` (default: the process arguments) and run the command."""
    argv = sys.argv[1:] if argv is None else [str(a) for a in argv]
    return run_command(lambda: run(parser(command_of(argv)).parse_args(argv)))
