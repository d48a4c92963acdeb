"""hezk's entry to the FHE Benchmarking Suite's ML-inference workload (github.com/fhe-benchmarking/ml-inference).

The harness runs seven stage executables from ``submission/build/`` with the harness root as the working
directory, each given the instance size (0 single, 1 small, 2 medium, 3 large) as its one argument
(``server_preprocess_model`` gets none), and passes every file through ``io/<size>/``. Here each stage is a few
lines over hezk's public API (``Client`` / ``Server``, ``tensor_ops.distributed``) and its file formats
(records of ``hezk.record``):

=============================  ===============================================================================
stage                          reads -> writes
=============================  ===============================================================================
client_key_generation          build/model/plan.json -> io/<size>/public_keys/context.bin (public, relin. and
                               Galois keys) and io/<size>/secret_key/client.bin (``Client.save``, mode 0600)
server_preprocess_model        build/model/server_model.npz, checked against the published plan.json
client_preprocess_input        datasets/<size>/intermediate/test_pixels.txt -> io/<size>/intermediate/inputs.npy
                               (parsed, checked, normalised as the harness normalises: (p - 0.1307) / 0.3081)
client_encode_encrypt_input    inputs.npy -> io/<size>/ciphertexts_upload/request-<k>.bin (``plan.batch`` images
                               per ciphertext, ``CIPHERTEXTS_PER_REQUEST`` ciphertexts per request)
server_encrypted_compute       requests + public context -> io/<size>/ciphertexts_download/reply-<k>.bin (one task
                               per request: in this process, or on Dask workers when HEZK_FHE_DASK is set)
client_decrypt_decode          replies -> io/<size>/intermediate/scores.npy (the 10 logits of each image)
client_postprocess             scores.npy -> io/<size>/encrypted_model_predictions.txt (argmax, one per line)
=============================  ===============================================================================

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


def _log(who: str, message: str) -> None:
    print(f"         [{who}] {message}", flush=True)


# --- the model, once (the build step) -------------------------------------------------------------------

def export(weights, calibration, out_dir=None, degree: int = DEFAULT_DEGREE, key_budget: int | None = None) -> dict:
    """Fit the float model's ReLUs on the calibration images' ranges and publish the model and its plan.

    ``weights``: an ``.npz`` of named weights (``fc1.weight`` (128, 784), ``fc1.bias``, ... and
    ``activation="relu"``), what ``pth_to_npz`` makes of the harness's model; ``calibration``: (n, 784) pixels
    in [0, 1] (training images). Writes ``server_model.npz`` (the fitted model, ``Sequential.save``),
    ``plan.json`` (its public plan) and ``entry.json`` (the choices and the fit's error against the float model
    on the calibration images); returns the last."""
    from tensor_ops.nn import Sequential

    out = pathlib.Path(out_dir) if out_dir is not None else model_dir()
    out.mkdir(parents=True, exist_ok=True)
    fitted = Sequential.load(weights, input_shape=(PIXELS,), calibration=normalise(calibration), degree=degree)
    fitted.save(out / "server_model.npz")
    model = Sequential.load(out / "server_model.npz")  # the server's model: its identity is the saved file's
    plan = model.plan() if key_budget is None else model.plan(key_budget=int(key_budget))
    (out / "plan.json").write_text(json.dumps(plan.to_dict()))
    mean_error, max_error = fitted.calibration_report
    entry = {"degree": degree, "key_budget": plan.key_budget, "params": repr(plan.params),
             "samples_per_ciphertext": plan.batch, "rotation_keys": len(plan.rotations),
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
    from tensor_ops.inference import Client

    plan = _plan_dict()
    client = Client(plan=plan)  # refuses parameters below 128 bits
    public = io_dir(size) / "public_keys"
    public.mkdir(parents=True, exist_ok=True)
    (public / "context.bin").write_bytes(client.public_context())
    secret = io_dir(size) / "secret_key"
    secret.mkdir(parents=True, exist_ok=True)
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
    _log("server", f"model {plan['model'][:12]}: {model!r}")


def client_preprocess_input(size: int) -> None:
    pixels = read_pixels(test_pixels_file(size), BATCH_SIZES[size])
    folder = io_dir(size) / "intermediate"
    folder.mkdir(parents=True, exist_ok=True)
    np.save(folder / "inputs.npy", normalise(pixels))


def client_encode_encrypt_input(size: int) -> None:
    from tensor_ops.distributed import batch_requests

    client = _client(size)
    x = np.load(io_dir(size) / "intermediate" / "inputs.npy")
    requests = batch_requests(client, x, client.plan.batch * CIPHERTEXTS_PER_REQUEST)
    total = _write_numbered(io_dir(size) / "ciphertexts_upload", "request", requests)
    _log("client", f"{len(x)} images in {math.ceil(len(x) / client.plan.batch)} ciphertexts "
                   f"({client.plan.batch} per ciphertext), {len(requests)} requests, {total / 2**20:.1f} MiB")


def server_encrypted_compute(size: int) -> None:
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


def client_decrypt_decode(size: int) -> None:
    client = _client(size)
    scores = [client.decrypt(path.read_bytes()) for path in _numbered(io_dir(size) / "ciphertexts_download", "reply")]
    scores = np.concatenate([np.atleast_2d(s) for s in scores], axis=0)
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
