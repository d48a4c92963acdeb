"""hezk's entry to the FHE Benchmarking Suite's ML-inference workload (github.com/fhe-benchmarking/ml-inference).

The harness runs seven stage executables from ``submission/build/`` with the harness root as the working
directory, each given the instance size (0 single, 1 small, 2 medium, 3 large) as its one argument
(``server_preprocess_model`` gets none), and passes every file through ``io/<size>/``. Here each stage is a few
lines over hezk's public API (``Client`` / ``Server``, ``tensor_ops.distributed``) and its file formats
(records of ``hezk.record``):

=============================  ===============================================================================
stage                          reads -> writes
=============================  ===============================================================================
client_key_generation          build/model/plan.json or packed.json -> io/<size>/public_keys/context.bin (public,
                               relin. and, for the slot-blocked plan, Galois keys; ``packing.json`` when sample
                               packing is chosen) and io/<size>/secret_key/client.bin (mode 0600)
server_preprocess_model        build/model/server_model.npz, checked against the published plan.json, packed.json
client_preprocess_input        datasets/<size>/intermediate/test_pixels.txt -> io/<size>/intermediate/inputs.npy
                               (parsed, checked, normalised as the harness normalises: (p - 0.1307) / 0.3081)
client_encode_encrypt_input    inputs.npy -> io/<size>/ciphertexts_upload/request-<k>.bin: slot-blocked,
                               ``plan.batch`` images per ciphertext, ``CIPHERTEXTS_PER_REQUEST`` per request;
                               sample packing, one request per set of <= N/2 images (N, two per slot, when
                               the instance has more images than slots), one ciphertext per pixel
server_encrypted_compute       requests + public context -> io/<size>/ciphertexts_download/reply-<k>.bin (one task
                               per request: in this process, or, slot-blocked, on Dask workers when HEZK_FHE_DASK)
client_decrypt_decode          replies -> io/<size>/intermediate/scores.npy (the 10 logits of each image)
client_postprocess             scores.npy -> io/<size>/encrypted_model_predictions.txt (argmax, one per line)
=============================  ===============================================================================

Two packings (``SAMPLE_PACKING_MIN_BATCH``): single and small use the model's slot-blocked plan (8 images per
ciphertext, rotations: ``tensor_ops.inference``); medium and large use sample packing (one image per slot, a
dense layer is a modular matrix product across ciphertexts, no rotation: ``tensor_ops.sample_packing``).

The model is made once, at build time (``export``): the trained float weights (the harness's
``mnist_ffnn_model.pth`` or a named-weights ``.npz``) are read by ``Sequential.load`` with calibration images, which
fits each ReLU to a polynomial on the range its input takes on them; the fitted model is saved and its plan
(parameters, packing, rotations: public) published next to it, since the client's keys (made before the
server's stage 3) must be the plan's. Environment: HEZK_FHE_DASK (None: this process; "local:K", a scheduler
address), HEZK_FHE_MODEL_DIR (default: ``build/model/``).

    python3 stage.py export --weights W.npz --calibration C --out build/model   # the build step
    submission/build/client_key_generation 0                                  # a stage (a link to stage.py)
"""
from __future__ import annotations

import json
import math
import os
import pathlib
import sys
import time

import numpy as np

SIZES = ("single", "small", "medium", "large")
BATCH_SIZES = (1, 15, 1000, 10000)  # images per instance (the harness's params.py)
PIXELS = 784
MEAN, STD = 0.1307, 0.3081  # the harness's normalisation (harness/mnist/test.py)
DEFAULT_DEGREE = 4  # of each ReLU polynomial: depth 9 at N = 2^14 (degree 2-3: depth 7, about 3 points less)
CIPHERTEXTS_PER_REQUEST = 32  # one request is one task (Server's default limit: 64 ciphertexts)
# Instances of at least this many images use sample packing (tensor_ops.sample_packing: one image per slot, a set of
# up to 8,192 images costs ~15 s of one core and 1.1 GB of input whatever its fill); smaller ones the slot-blocked
# plan (8 images per ciphertext, ~0.18 s of one core per image plus ~10 s of key loading and weight encoding, 333 MiB
# of keys). They break even near 50 images; 100 keeps single and small (1, 15) on the plan, medium and large
# (1,000, 10,000) on sample packing. HEZK_FHE_PACKING=slots|samples forces one at key generation.
SAMPLE_PACKING_MIN_BATCH = 100
PACKING_FILE = "packing.json"  # in io/<size>/public_keys/: the choice key generation made (public)


class EntryError(Exception):
    """A stage refused its input: the message names the file and what is wrong."""


def model_dir() -> pathlib.Path:
    """HEZK_FHE_MODEL_DIR, else ``model/`` beside the executable as invoked (``submission/build/<stage>``: the
    links the build makes), else beside this file."""
    if os.environ.get("HEZK_FHE_MODEL_DIR"):
        return pathlib.Path(os.environ["HEZK_FHE_MODEL_DIR"])
    invoked = pathlib.Path(sys.argv[0]).absolute().parent / "model"
    return invoked if invoked.is_dir() else pathlib.Path(__file__).resolve().parent / "model"


def io_dir(size: int) -> pathlib.Path:
    """``io/<size>/`` under the harness root (the working directory, as the harness's params.py)."""
    return pathlib.Path.cwd() / "io" / SIZES[size]


def test_pixels_file(size: int) -> pathlib.Path:
    return pathlib.Path.cwd() / "datasets" / SIZES[size] / "intermediate" / "test_pixels.txt"


def predictions_file(size: int) -> pathlib.Path:
    return io_dir(size) / "encrypted_model_predictions.txt"


def normalise(pixels) -> np.ndarray:
    return (np.asarray(pixels, dtype=np.float64) - MEAN) / STD


def read_pixels(path, count: int | None = None) -> np.ndarray:
    """A harness pixel file (one image a line, 784 values in [0, 1]) as (n, 784); ``count``: the lines expected."""
    path = pathlib.Path(path)
    try:
        text = path.read_text()
    except OSError as error:
        raise EntryError(f"{path}: cannot be read ({error.strerror or error})") from None
    lines = [line for line in text.splitlines() if line.strip()]
    try:
        values = np.array(" ".join(lines).split(), dtype=np.float64)
    except ValueError as error:
        raise EntryError(f"{path}: a pixel value is not a number ({error})") from None
    if not lines or values.size != len(lines) * PIXELS:
        raise EntryError(f"{path}: {len(lines)} lines holding {values.size} values, expected {PIXELS} per line")
    pixels = values.reshape(len(lines), PIXELS)
    if count is not None and len(pixels) != count:
        raise EntryError(f"{path}: {len(pixels)} images, the instance takes {count}")
    if not np.all(np.isfinite(pixels)) or pixels.min() < 0.0 or pixels.max() > 1.0:
        raise EntryError(f"{path}: pixel values must lie in [0, 1] (found [{pixels.min()}, {pixels.max()}])")
    return pixels


def _numbered(folder: pathlib.Path, stem: str) -> list[pathlib.Path]:
    files = sorted(folder.glob(f"{stem}-*.bin"))
    if not files:
        raise EntryError(f"{folder}: no {stem}-<k>.bin files (run the previous stage first)")
    return files


def _write_numbered(folder: pathlib.Path, stem: str, blobs) -> int:
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob(f"{stem}-*.bin"):
        old.unlink()
    for k, blob in enumerate(blobs):
        (folder / f"{stem}-{k:05d}.bin").write_bytes(blob)
    return sum(len(b) for b in blobs)


def _plan_dict() -> dict:
    path = model_dir() / "plan.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise EntryError(f"{path}: no published plan ({error}); run the build (scripts/build_task.sh)") from None


def _load_model():
    from tensor_ops.nn import Sequential

    return Sequential.load(model_dir() / "server_model.npz")


def _client(size: int):
    from tensor_ops.inference import Client

    return Client.load(io_dir(size) / "secret_key" / "client.bin")


def sample_packing_chosen(size: int) -> bool:
    """Key generation's choice for ``size``: HEZK_FHE_PACKING (``slots`` / ``samples``), else by the batch."""
    forced = os.environ.get("HEZK_FHE_PACKING", "").strip().lower()
    if forced not in ("", "auto", "slots", "samples"):
        raise EntryError(f"HEZK_FHE_PACKING={forced!r} must be auto, slots or samples")
    if forced in ("slots", "samples"):
        return forced == "samples"
    return BATCH_SIZES[size] >= SAMPLE_PACKING_MIN_BATCH


def uses_sample_packing(size: int) -> bool:
    """Whether the keys of ``io/<size>/`` were made for sample packing (``packing.json`` beside them)."""
    path = io_dir(size) / "public_keys" / PACKING_FILE
    try:
        return json.loads(path.read_text()).get("packing") == "samples-per-slot"
    except FileNotFoundError:
        return False
    except (OSError, ValueError) as error:
        raise EntryError(f"{path}: unreadable ({error})") from None


def _packed_spec() -> dict:
    path = model_dir() / "packed.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise EntryError(f"{path}: no published sample-packing spec ({error}); run the build") from None


def _packed_model():
    """The sample-packed model: the saved model at the published spec's parameters, checked to be its model."""
    from crypto.params import CKKSParameters
    from tensor_ops.sample_packing import SamplePackedModel

    model, spec = _load_model(), _packed_spec()
    if spec.get("model") != model.identity().hex() or spec.get("fit") != model.activation_fit():
        raise EntryError(f"{model_dir() / 'packed.json'} is not the spec of {model_dir() / 'server_model.npz'} "
                         f"(rebuild: scripts/build_task.sh)")
    return SamplePackedModel.from_sequential(model, params=CKKSParameters.from_dict(spec["params"]))


def _packed_client(size: int):
    from tensor_ops.sample_packing import SamplePackedClient

    return SamplePackedClient.load(io_dir(size) / "secret_key" / "client.bin", _packed_spec())


def _log(who: str, message: str) -> None:
    print(f"         [{who}] {message}", flush=True)


# --- the model, once (the build step) -------------------------------------------------------------------

def export(weights, calibration, out_dir=None, degree: int = DEFAULT_DEGREE, key_budget: int | None = None,
           packed_params=None) -> dict:
    """Fit the float model's ReLUs on the calibration images' ranges and publish the model and its plan.

    ``weights``: an ``.npz`` of named weights (``fc1.weight`` (128, 784), ``fc1.bias``, ... and
    ``activation="relu"``), what ``pth_to_npz`` makes of the harness's model; ``calibration``: (n, 784) pixels
    in [0, 1] (training images). Writes ``server_model.npz`` (the fitted model, ``Sequential.save``),
    ``plan.json`` (its public plan), ``packed.json`` (the public spec of sample packing) and ``entry.json`` (the
    choices and the fit's error against the float model on the calibration images); returns the last.
    ``packed_params``: the parameters of sample packing (default ``choose_parameters(depth)``, 128-bit; the tests
    pass an insecure small ring, which key generation refuses unless HEZK_FHE_TEST_RING=1)."""
    from tensor_ops.nn import Sequential

    out = pathlib.Path(out_dir) if out_dir is not None else model_dir()
    out.mkdir(parents=True, exist_ok=True)
    fitted = Sequential.load(weights, input_shape=(PIXELS,), calibration=normalise(calibration), degree=degree)
    fitted.save(out / "server_model.npz")
    model = Sequential.load(out / "server_model.npz")  # the server's model: its identity is the saved file's
    plan = model.plan() if key_budget is None else model.plan(key_budget=int(key_budget))
    (out / "plan.json").write_text(json.dumps(plan.to_dict()))
    from tensor_ops.sample_packing import SamplePackedModel

    packed = SamplePackedModel.from_sequential(model, params=packed_params)
    (out / "packed.json").write_text(json.dumps(packed.spec.to_dict()))
    mean_error, max_error = fitted.calibration_report
    entry = {"degree": degree, "key_budget": plan.key_budget, "params": repr(plan.params),
             "samples_per_ciphertext": plan.batch, "rotation_keys": len(plan.rotations),
             "sample_packing": {"params": repr(packed.params), "level": packed.depth,
                                "samples_per_set": packed.params.slots},
             "calibration_images": len(calibration), "fit_mean_error": mean_error, "fit_max_error": max_error,
             "intervals": [[layer.poly.center - layer.poly.radius, layer.poly.center + layer.poly.radius]
                           for layer in model.layers if hasattr(layer, "poly")]}
    (out / "entry.json").write_text(json.dumps(entry, indent=2))
    return entry


def pth_to_npz(pth, out) -> None:
    """The harness's ``mnist_ffnn_model.pth`` (a torch ``state_dict`` of ``SimpleFFNN``) as a named-weights
    ``.npz`` (torch needed here only)."""
    import torch

    state = torch.load(pth, map_location="cpu", weights_only=True)
    arrays = {k: v.detach().double().numpy() for k, v in state.items()}
    expected = {"fc1.weight": (128, PIXELS), "fc2.weight": (64, 128), "fc3.weight": (10, 64)}
    for name, shape in expected.items():
        if name not in arrays or arrays[name].shape != shape:
            raise EntryError(f"{pth}: {name} must have shape {shape} (SimpleFFNN), found "
                             f"{None if name not in arrays else arrays[name].shape}")
    np.savez(out, activation="relu", **arrays)


# --- the seven stages ---------------------------------------------------------------------------------------

def client_key_generation(size: int) -> None:
    public, secret = io_dir(size) / "public_keys", io_dir(size) / "secret_key"
    public.mkdir(parents=True, exist_ok=True)
    secret.mkdir(parents=True, exist_ok=True)
    if sample_packing_chosen(size):  # public and relinearization keys only: no rotation
        from tensor_ops.sample_packing import SamplePackedClient

        from tensor_ops.sample_packing import SamplePackedSpec

        spec = SamplePackedSpec.from_dict(_packed_spec())  # the build's parameters: choose_parameters, 128-bit
        if (spec.params.security_bits or 0) < 128 and os.environ.get("HEZK_FHE_TEST_RING") != "1":
            raise EntryError(f"{model_dir() / 'packed.json'}: parameters {spec.params!r} are below 128 bits "
                             f"(HEZK_FHE_TEST_RING=1 allows them, for tests only)")
        # more images than slots: pair them (two per slot, real and imaginary part; the conjugation key added)
        client = SamplePackedClient(spec, pairs=BATCH_SIZES[size] > spec.params.slots)
        keys = client.public_context()
        (public / "context.bin").write_bytes(keys)
        (public / PACKING_FILE).write_text(json.dumps({"packing": "samples-per-slot"}))
        client.save(secret / "client.bin")
        _log("client", f"sample packing, {client.spec.params!r}: public + relinearization"
                       f"{' + conjugation' if client.pairs else ''} keys, {len(keys) / 2**20:.2f} MiB")
        return
    (public / PACKING_FILE).unlink(missing_ok=True)
    from tensor_ops.inference import Client

    plan = _plan_dict()
    client = Client(plan=plan)  # refuses parameters below 128 bits
    (public / "context.bin").write_bytes(client.public_context())
    client.save(secret / "client.bin", galois_keys=False)  # the client only encrypts and decrypts
    report = client.key_report()
    _log("client", f"{report['security']}, {report['rotation_keys']} rotation keys, "
                   f"{report['public_context_bytes'] / 2**20:.1f} MiB of public keys")


def server_preprocess_model() -> None:
    """The model the server runs, checked against the plan the client keyed for (its identity and fit)."""
    model, plan = _load_model(), _plan_dict()
    if model.identity().hex() != plan.get("model") or model.activation_fit() != plan.get("fit"):
        raise EntryError(f"{model_dir() / 'server_model.npz'} is not the model of the published plan.json "
                         f"(rebuild: scripts/build_task.sh)")
    if _packed_spec().get("model") != plan.get("model") or _packed_spec().get("fit") != plan.get("fit"):
        raise EntryError(f"{model_dir() / 'packed.json'} is not the model of the published plan.json (rebuild)")
    _log("server", f"model {plan['model'][:12]}: {model!r}")


def client_preprocess_input(size: int) -> None:
    pixels = read_pixels(test_pixels_file(size), BATCH_SIZES[size])
    folder = io_dir(size) / "intermediate"
    folder.mkdir(parents=True, exist_ok=True)
    np.save(folder / "inputs.npy", normalise(pixels))


def client_encode_encrypt_input(size: int) -> None:
    x = np.load(io_dir(size) / "intermediate" / "inputs.npy")
    if uses_sample_packing(size):  # one request per set of <= N/2 images, written record by record
        client = _packed_client(size)
        folder = io_dir(size) / "ciphertexts_upload"
        _write_numbered(folder, "request", [])
        total = 0
        for k, start in enumerate(range(0, len(x), client.set_size)):
            with open(folder / f"request-{k:05d}.bin", "wb") as stream:
                for record in client.encrypt_set(x[start:start + client.set_size]):
                    total += stream.write(record)
        _log("client", f"{len(x)} images in {k + 1} sets of <= {client.set_size} ("
                       f"{'two images per slot' if client.pairs else 'one image per slot'}, "
                       f"{client.spec.features} ciphertexts each), {total / 2**20:.1f} MiB")
        return
    from tensor_ops.distributed import batch_requests

    client = _client(size)
    requests = batch_requests(client, x, client.plan.batch * CIPHERTEXTS_PER_REQUEST)
    total = _write_numbered(io_dir(size) / "ciphertexts_upload", "request", requests)
    _log("client", f"{len(x)} images in {math.ceil(len(x) / client.plan.batch)} ciphertexts "
                   f"({client.plan.batch} per ciphertext), {len(requests)} requests, {total / 2**20:.1f} MiB")


def server_encrypted_compute(size: int) -> None:
    if uses_sample_packing(size):
        return _server_sample_packed(size)
    from tensor_ops.distributed import ServerShare, evaluate_batches

    model, plan = _load_model(), _plan_dict()
    public = (io_dir(size) / "public_keys" / "context.bin").read_bytes()
    requests = [path.read_bytes() for path in _numbered(io_dir(size) / "ciphertexts_upload", "request")]
    dask = os.environ.get("HEZK_FHE_DASK") or None
    start = time.perf_counter()
    if dask is None:  # the same tasks as on Dask, run here: the key loading and each request timed apart
        server = ServerShare(model, public, (PIXELS,), plan["key_budget"]).server
        _log("server", f"keys loaded: {time.perf_counter() - start:.3f} s")
        replies = []
        for k, request in enumerate(requests):
            begin = time.perf_counter()
            replies.append(server.evaluate(request))
            _log("server", f"request {k}: {time.perf_counter() - begin:.3f} s"
                           f"{' (encodes the weights first)' if k == 0 else ''}")
    else:
        replies = evaluate_batches(model, public, requests, input_shape=(PIXELS,), dask=dask,
                                   key_budget=plan["key_budget"])
    _log("server", f"{len(requests)} requests on {dask or 'this process'}: {time.perf_counter() - start:.3f} s "
                   f"(keys loaded, weights encoded, evaluated)")
    _write_numbered(io_dir(size) / "ciphertexts_download", "reply", replies)


def _server_sample_packed(size: int) -> None:
    """Sample packing: each request (a set of images, one per slot) read record by record and evaluated in this
    process (dense layers as modular matrix products, no rotation)."""
    from tensor_ops.sample_packing import SamplePackedServer

    start = time.perf_counter()
    packed = _packed_model()
    server = SamplePackedServer(packed, (io_dir(size) / "public_keys" / "context.bin").read_bytes())
    _log("server", f"model and keys loaded: {time.perf_counter() - start:.3f} s")
    folder = io_dir(size) / "ciphertexts_download"
    _write_numbered(folder, "reply", [])
    requests = _numbered(io_dir(size) / "ciphertexts_upload", "request")
    for k, request in enumerate(requests):
        begin = time.perf_counter()
        (folder / f"reply-{k:05d}.bin").write_bytes(server.evaluate(request))
        _log("server", f"set {k}: {time.perf_counter() - begin:.3f} s")
    _log("server", f"{len(requests)} sets: {time.perf_counter() - start:.3f} s (model and keys loaded, evaluated)")


def client_decrypt_decode(size: int) -> None:
    replies = _numbered(io_dir(size) / "ciphertexts_download", "reply")
    if uses_sample_packing(size):
        scores = _packed_client(size).decrypt(replies, count=BATCH_SIZES[size])
    else:
        client = _client(size)
        scores = np.concatenate([np.atleast_2d(client.decrypt(path.read_bytes())) for path in replies], axis=0)
    if len(scores) != BATCH_SIZES[size]:
        raise EntryError(f"the replies hold {len(scores)} results, the instance has {BATCH_SIZES[size]} images")
    np.save(io_dir(size) / "intermediate" / "scores.npy", scores)


def client_postprocess(size: int) -> None:
    scores = np.load(io_dir(size) / "intermediate" / "scores.npy")
    predictions_file(size).write_text("".join(f"{int(label)}\n" for label in scores.argmax(axis=1)))


STAGES = {f.__name__: f for f in (client_key_generation, server_preprocess_model, client_preprocess_input,
                                  client_encode_encrypt_input, server_encrypted_compute, client_decrypt_decode,
                                  client_postprocess)}


def load_calibration(spec: str, count: int = 2000) -> np.ndarray:
    """Calibration pixels (n, 784) in [0, 1]: a ``.npy``, a harness pixel file, or ``torchvision:DIR`` (MNIST's
    training images as the harness downloads them to DIR, e.g. harness/mnist/data; the first ``count``)."""
    if spec.startswith("torchvision:"):
        from torchvision import datasets

        train = datasets.MNIST(spec.split(":", 1)[1], train=True, download=True)
        return train.data[:count].numpy().reshape(-1, PIXELS) / 255.0
    if spec.endswith(".npy"):
        pixels = np.load(spec, allow_pickle=False)
        if pixels.ndim != 2 or pixels.shape[1] != PIXELS:
            raise EntryError(f"{spec}: calibration images must have shape (n, {PIXELS}), found {pixels.shape}")
        return pixels[:count]
    return read_pixels(spec)[:count]


def run_stage(name: str, argv=None) -> int:
    """The stage executable ``name``: ``<name> <size>`` (0-3), ``server_preprocess_model`` without one. A
    refused input or a library error is one line on stderr and exit status 1; bad arguments, usage and 2."""
    from crypto.errors import HEError

    argv = sys.argv[1:] if argv is None else list(argv)
    stage = STAGES[name]
    try:
        if name == "server_preprocess_model":
            stage()
            return 0
        if len(argv) != 1 or argv[0] not in ("0", "1", "2", "3"):
            print(f"usage: {name} <instance-size>  (0-single, 1-small, 2-medium, 3-large)", file=sys.stderr)
            return 2
        stage(int(argv[0]))
    except (EntryError, HEError, OSError) as error:
        print(f"{name}: {type(error).__name__}: {error}", file=sys.stderr)
        return 1
    return 0


def main(argv=None) -> int:
    """Dispatch on the name the executable was invoked by (the build links each stage name to stage.py), or
    ``stage.py <stage> <size>``, ``stage.py export ...``, ``stage.py pth-to-npz PTH OUT``."""
    import argparse

    argv = sys.argv if argv is None else list(argv)
    invoked = pathlib.Path(argv[0]).name
    if invoked in STAGES:
        return run_stage(invoked, argv[1:])
    if len(argv) > 1 and argv[1] in STAGES:
        return run_stage(argv[1], argv[2:])
    parser = argparse.ArgumentParser(prog="stage.py", description="hezk's entry: build steps")
    commands = parser.add_subparsers(dest="command", required=True)
    make = commands.add_parser("export", help="fit the ReLUs and publish the model and its plan")
    make.add_argument("--weights", required=True, help="named-weights .npz (fc1.weight, ..., activation=relu)")
    make.add_argument("--calibration", required=True, help=".npy, harness pixel file, or torchvision:DIR")
    make.add_argument("--out", required=True)
    make.add_argument("--degree", type=int, default=DEFAULT_DEGREE)
    make.add_argument("--key-budget", type=float, default=None, help="bytes of Galois keys the plan may take")
    convert = commands.add_parser("pth-to-npz", help="the harness's mnist_ffnn_model.pth as named weights")
    convert.add_argument("pth")
    convert.add_argument("out")
    args = parser.parse_args(argv[1:])
    try:
        if args.command == "pth-to-npz":
            pth_to_npz(args.pth, args.out)
        else:
            entry = export(args.weights, load_calibration(args.calibration), args.out, args.degree, args.key_budget)
            print(f"[hezk-entry] model published in {args.out}: {json.dumps(entry)}")
    except EntryError as error:
        print(f"stage.py {args.command}: {error}", file=sys.stderr)
        return 1
    return 0
