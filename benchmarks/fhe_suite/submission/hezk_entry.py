"""hezk's entry to the FHE Benchmarking Suite's ML-inference workload (github.com/fhe-benchmarking/ml-inference).

The harness runs seven stage executables from ``submission/build/`` with the harness root as the working
directory, each given the instance size (0 single, 1 small, 2 medium, 3 large) as its one argument
(``server_preprocess_model`` gets none), and passes every file through ``io/<size>/``. Here each stage is a few
lines over hezk's public API (``tensor_ops.replicated``, ``tensor_ops.sample_packing``, ``Client`` / ``Server``,
``tensor_ops.distributed``) and its file formats (records of ``hezk.record``):

=============================  ===============================================================================
stage                          reads -> writes
=============================  ===============================================================================
client_key_generation          build/model/replicated_plan.json, packed.json or plan.json -> io/<size>/public_keys/
                               context.bin (public, relin. and the packing's Galois keys), public_keys/packing.json
                               (the choice) and io/<size>/secret_key/client.bin (mode 0600, no Galois key)
server_preprocess_model        build/model/server_model.npz, checked against the three published plans
client_preprocess_input        datasets/<size>/intermediate/test_pixels.txt -> io/<size>/intermediate/inputs.npy
                               (parsed, checked, normalised as the harness normalises: (p - 0.1307) / 0.3081)
client_encode_encrypt_input    inputs.npy -> io/<size>/ciphertexts_upload/request-<k>.bin: replicated, one image
                               per ciphertext (``plan.input_ciphertexts``), <= 256 ciphertexts per request;
                               sample packing, one request per set of <= N/2 images (N, two per slot, when
                               the instance has more images than slots), one ciphertext per pixel; slot-blocked,
                               ``plan.batch`` images per ciphertext, ``CIPHERTEXTS_PER_REQUEST`` per request
server_encrypted_compute       requests + public context -> io/<size>/ciphertexts_download/reply-<k>.bin, and
                               io/<size>/server_timings.json: the set-up (model, keys, plaintext encoding) and
                               the compute (the evaluation of the requests) timed apart (one task per request:
                               in this process, or, slot-blocked, on Dask workers when HEZK_FHE_DASK)
client_decrypt_decode          replies -> io/<size>/intermediate/scores.npy (the 10 logits of each image)
client_postprocess             scores.npy -> io/<size>/encrypted_model_predictions.txt (argmax, one per line)
=============================  ===============================================================================

Three packings (``packing_chosen``): single and small (< ``SAMPLE_PACKING_MIN_BATCH`` images) use the replicated
plan (one image per ciphertext, 13 power-of-two rotation keys: ``tensor_ops.replicated``); medium and large use
sample packing (one image per slot, a dense layer is a modular matrix product across ciphertexts, no rotation:
``tensor_ops.sample_packing``); the slot-blocked plan (8 images per ciphertext, 67 rotation keys:
``tensor_ops.inference``) only when HEZK_FHE_PACKING=slots (the one path that runs on Dask).

The model is made once, at build time (``export``): the trained float weights (the harness's
``mnist_ffnn_model.pth`` or a named-weights ``.npz``) are read by ``Sequential.load`` with calibration images,
which fits each ReLU to a polynomial on the range its input takes on them (refitted by ``weighted_fit`` by
default); the fitted model is saved and its plans (parameters, packing, rotations: public) published next to
it, since the client's keys (made before the server's stage 3) must be the plan's. Environment: HEZK_FHE_DASK
(None: this process; "local:K", a scheduler address), HEZK_FHE_MODEL_DIR (default: ``build/model/``),
HEZK_FHE_PACKING (``auto``, ``replicated``, ``samples``, ``slots``), HEZK_FHE_TEST_RING=1 (accept published
parameters below 128 bits: tests only).

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
FITS = ("weighted", "minimax")  # of the ReLU polynomials (``weighted_fit``); HEZK_FHE_FIT at build
DEFAULT_FIT = "weighted"
DEFAULT_DEGREE = 4  # of each ReLU polynomial: depth 9 at N = 2^14 (degree 2-3: depth 7, about 3 points less)
CIPHERTEXTS_PER_REQUEST = 32  # slot-blocked: one request is one task (Server's default limit: 64 ciphertexts)
# The packing by instance size is hezk's one rule (tensor_ops.dense_packings.packing_for_batch: sample packing from
# SAMPLE_PACKING_MIN_BATCH = 100 images, the replicated plan below; the command line's --packing auto uses it too).
# Sample packing: a set of up to 8,192 images costs ~13 s of one core, 1.1 GB of input and ~12 s of client
# encryption whatever its fill; the replicated plan ~0.17 s of one warm core per image after a ~0.4 s set-up,
# ~0.03 s of client encryption per image. Server compute alone breaks even at 13 / 0.17 = ~76 images, server and
# client together at (13 + 12) / (0.17 + 0.03) = ~125; 100 lies between and no instance size does (single and
# small: 1 and 15 images, replicated; medium and large: 1,000 and 10,000, sample packing).
# HEZK_FHE_PACKING=replicated|samples|slots forces one at key generation.
PACKING_FILE = "packing.json"  # in io/<size>/public_keys/: the choice key generation made (public)
PACKINGS = {"replicated": "replicated-per-sample", "samples": "samples-per-slot", "slots": "slot-blocked"}
REPLICATED_FOLD = 16  # the client sends 784 / (64 x 16) -> 1 ciphertext per image, the server rotates it 15 times
TIMINGS_FILE = "server_timings.json"  # in io/<size>/: the server stage's set-up and compute seconds


def __getattr__(name):
    """``SAMPLE_PACKING_MIN_BATCH``: ``tensor_ops.dense_packings``' (imported on use, so that a stage's usage line
    needs no hezk)."""
    if name == "SAMPLE_PACKING_MIN_BATCH":
        from tensor_ops.dense_packings import SAMPLE_PACKING_MIN_BATCH

        return SAMPLE_PACKING_MIN_BATCH
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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


def packing_chosen(size: int) -> str:
    """Key generation's choice for ``size``: HEZK_FHE_PACKING (``replicated`` / ``samples`` / ``slots``), else by
    the instance's images: sample packing from ``SAMPLE_PACKING_MIN_BATCH``, the replicated plan below."""
    forced = os.environ.get("HEZK_FHE_PACKING", "").strip().lower()
    if forced not in ("", "auto", *PACKINGS):
        raise EntryError(f"HEZK_FHE_PACKING={forced!r} must be auto, replicated, samples or slots")
    if forced in PACKINGS:
        return forced
    from tensor_ops.dense_packings import packing_for_batch

    return packing_for_batch(BATCH_SIZES[size])


def packing_used(size: int) -> str:
    """The packing the keys of ``io/<size>/`` were made for (``packing.json`` beside them; none: ``slots``, the
    files of the entry before the file was written for every packing)."""
    path = io_dir(size) / "public_keys" / PACKING_FILE
    try:
        name = json.loads(path.read_text()).get("packing")
    except FileNotFoundError:
        return "slots"
    except (OSError, ValueError, AttributeError) as error:
        raise EntryError(f"{path}: unreadable ({error})") from None
    for short, long in PACKINGS.items():
        if name == long:
            return short
    raise EntryError(f"{path}: packing {name!r} is none of {sorted(PACKINGS.values())} (run key generation again)")


def _insecure_allowed(params, path) -> bool:
    """True for 128-bit ``params``; below, True with HEZK_FHE_TEST_RING=1 (tests), else EntryError naming ``path``."""
    if (params.security_bits or 0) >= 128:
        return False
    if os.environ.get("HEZK_FHE_TEST_RING") != "1":
        raise EntryError(f"{path}: parameters {params!r} are below 128 bits (HEZK_FHE_TEST_RING=1 allows them, "
                         f"for tests only)")
    return True


def _replicated_plan():
    from tensor_ops.replicated import ReplicatedPlan

    path = model_dir() / "replicated_plan.json"
    try:
        return ReplicatedPlan.from_dict(json.loads(path.read_text()))
    except (OSError, ValueError) as error:
        raise EntryError(f"{path}: no published replicated plan ({error}); run the build") from None


def _replicated_client(size: int):
    from tensor_ops.replicated import ReplicatedClient

    return ReplicatedClient.load(io_dir(size) / "secret_key" / "client.bin")


def _write_timings(size: int, packing: str, setup: dict, compute: list, stages: dict | None = None) -> float:
    """io/<size>/server_timings.json: the server stage's set-up seconds by step, the compute seconds per request
    (the evaluation alone: deserialising the request, the layers, serialising the reply; not the file reads)."""
    import hezk

    total = sum(compute)
    record = {"packing": packing, "setup_s": setup, "compute_s": total, "requests_s": compute,
              "images": BATCH_SIZES[size], "stages_s": stages or {}, "threads": hezk.get_threads()}
    (io_dir(size) / TIMINGS_FILE).write_text(json.dumps(record, indent=2))
    _log("server", f"set-up {sum(setup.values()):.3f} s ("
                   + ", ".join(f"{k} {v:.3f}" for k, v in setup.items())
                   + f"); server compute {total:.3f} s for {len(compute)} request(s), "
                     f"{total / BATCH_SIZES[size]:.4f} s per image, {record['threads']} thread(s)")
    return total


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
           packed_params=None, replicated_params=None, fold: int = REPLICATED_FOLD, fit: str = DEFAULT_FIT) -> dict:
    """Fit the float model's ReLUs on the calibration images' ranges and publish the model and its plan.

    ``weights``: an ``.npz`` of named weights (``fc1.weight`` (128, 784), ``fc1.bias``, ... and
    ``activation="relu"``), what ``pth_to_npz`` makes of the harness's model; ``calibration``: (n, 784) pixels
    in [0, 1] (training images). Writes ``server_model.npz`` (the fitted model, ``Sequential.save``),
    ``replicated_plan.json`` (the replicated plan, folded ``fold`` times), ``packed.json`` (the public spec of
    sample packing), ``plan.json`` (the slot-blocked plan) and ``entry.json`` (the choices and the fit's error
    against the float model on the calibration images); returns the last. ``packed_params``,
    ``replicated_params``: the parameters of sample packing and of the replicated plan (default: chosen for the
    model's depth, 128-bit; the tests pass insecure small rings, which key generation refuses unless
    HEZK_FHE_TEST_RING=1). ``fit``: "weighted" (``weighted_fit``) or "minimax" (the library's calibrated fit)."""
    from tensor_ops.nn import Sequential

    if fit not in FITS:
        raise EntryError(f"fit={fit!r} must be one of {FITS}")
    out = pathlib.Path(out_dir) if out_dir is not None else model_dir()
    out.mkdir(parents=True, exist_ok=True)
    fitted = Sequential.load(weights, input_shape=(PIXELS,), calibration=normalise(calibration), degree=degree)
    report = fitted.calibration_report
    if fit == "weighted":
        fitted, report = weighted_fit(fitted, normalise(calibration), degree)
    fitted.save(out / "server_model.npz")
    model = Sequential.load(out / "server_model.npz")  # the server's model: its identity is the saved file's
    plan = model.plan() if key_budget is None else model.plan(key_budget=int(key_budget))
    (out / "plan.json").write_text(json.dumps(plan.to_dict()))
    from tensor_ops.sample_packing import SamplePackedModel

    packed = SamplePackedModel.from_sequential(model, params=packed_params)
    (out / "packed.json").write_text(json.dumps(packed.spec.to_dict()))
    from tensor_ops.replicated import replicated_plan

    replicated = replicated_plan(model, params=replicated_params, fold=fold)
    (out / "replicated_plan.json").write_text(json.dumps(replicated.to_dict()))
    mean_error, max_error = report
    entry = {"degree": degree, "fit": fit, "key_budget": plan.key_budget, "params": repr(plan.params),
             "samples_per_ciphertext": plan.batch, "rotation_keys": len(plan.rotations),
             "sample_packing": {"params": repr(packed.params), "level": packed.depth,
                                "samples_per_set": packed.params.slots},
             "replicated": {"params": repr(replicated.params), "level": replicated.depth, "fold": fold,
                            "rotation_keys": len(replicated.rotations),
                            "ciphertexts_per_image": replicated.input_ciphertexts,
                            "operations_per_image": replicated.operation_counts()},
             "calibration_images": len(calibration), "fit_mean_error": mean_error, "fit_max_error": max_error,
             "intervals": [[layer.poly.center - layer.poly.radius, layer.poly.center + layer.poly.radius]
                           for layer in model.layers if hasattr(layer, "poly")]}
    (out / "entry.json").write_text(json.dumps(entry, indent=2))
    return entry


def weighted_fit(model, x, degree: int = DEFAULT_DEGREE):
    """(the model with each ReLU polynomial refitted on the same interval by least squares weighted by the values
    its input takes on the calibration inputs ``x``, (mean, max) |logits - float logits| on ``x``).

    ``Sequential.load(..., calibration=x)`` fits each activation by minimax on its calibrated interval: the
    smallest largest error over the whole interval, which the plan can state. The inputs of a ReLU lie mostly
    near 0, far inside that interval (here about [-22, 19] and [-23, 29]), where the weighted fit is closer to
    the ReLU: on the stand-in's 10,000-image pool, 0.9728 accuracy against 0.9637 for the minimax fit (float
    model 0.9804; an unweighted least-squares fit: 0.9492). The intervals, hence the plans' depth and ranges,
    are the same."""
    import warnings

    from tensor_ops.activations import fit_activation
    from tensor_ops.nn import Activation, ActivationRangeWarning, Sequential

    layers, h, float_h = list(model.layers), np.asarray(x, dtype=np.float64), np.asarray(x, dtype=np.float64)
    for index, layer in enumerate(layers):
        if isinstance(layer, Activation):  # its input as the float model computes it (as calibration sees it)
            poly = layer.poly
            if poly.name != "relu":
                raise EntryError(f"layer {index}: activation {poly.name!r}, the entry's model has ReLUs only")
            layers[index] = Activation(fit_activation("relu", degree, poly.interval, method="least_squares",
                                                      samples=float_h.ravel()))
            float_h = np.maximum(float_h, 0.0)
        else:
            float_h = float_h @ np.asarray(layer.weight).T + np.asarray(layer.bias)
    refitted = Sequential(layers, model.input_shape)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ActivationRangeWarning)
        error = np.abs(refitted.forward(h) - float_h)
    return refitted, (float(error.mean()), float(error.max()))


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
    packing = packing_chosen(size)
    public, secret = io_dir(size) / "public_keys", io_dir(size) / "secret_key"
    public.mkdir(parents=True, exist_ok=True)
    secret.mkdir(parents=True, exist_ok=True)
    (public / PACKING_FILE).unlink(missing_ok=True)
    if packing == "replicated":  # public, relinearization and the plan's power-of-two Galois keys
        from tensor_ops.replicated import ReplicatedClient

        plan = _replicated_plan()
        client = ReplicatedClient(plan, allow_insecure=_insecure_allowed(plan.params, model_dir() /
                                                                         "replicated_plan.json"))
        keys = client.public_context()
        (public / "context.bin").write_bytes(keys)
        client.save(secret / "client.bin")  # mode 0600, without the Galois keys (the server's)
        report = client.key_report()
        _log("client", f"replicated, {plan.params!r}: {report['security']}, {report['rotation_keys']} rotation keys "
                       f"{report['rotations']}, {len(keys) / 2**20:.2f} MiB of public keys")
    elif packing == "samples":  # public and relinearization keys only: no rotation
        from tensor_ops.sample_packing import SamplePackedClient, SamplePackedSpec

        spec = SamplePackedSpec.from_dict(_packed_spec())  # the build's parameters: choose_parameters, 128-bit
        insecure = _insecure_allowed(spec.params, model_dir() / "packed.json")
        # more images than slots: pair them (two per slot, real and imaginary part; the conjugation key added)
        client = SamplePackedClient(spec, pairs=BATCH_SIZES[size] > spec.params.slots, allow_insecure=insecure)
        keys = client.public_context()
        (public / "context.bin").write_bytes(keys)
        client.save(secret / "client.bin")
        _log("client", f"sample packing, {client.spec.params!r}: public + relinearization"
                       f"{' + conjugation' if client.pairs else ''} keys, {len(keys) / 2**20:.2f} MiB")
    else:
        from tensor_ops.inference import Client

        client = Client(plan=_plan_dict())  # refuses parameters below 128 bits
        (public / "context.bin").write_bytes(client.public_context())
        client.save(secret / "client.bin", galois_keys=False)  # the client only encrypts and decrypts
        report = client.key_report()
        _log("client", f"slot-blocked, {report['security']}, {report['rotation_keys']} rotation keys, "
                       f"{report['public_context_bytes'] / 2**20:.1f} MiB of public keys")
    (public / PACKING_FILE).write_text(json.dumps({"packing": PACKINGS[packing]}))


def server_preprocess_model() -> None:
    """The model the server runs, checked against the plan the client keyed for (its identity and fit)."""
    model, plan = _load_model(), _plan_dict()
    if model.identity().hex() != plan.get("model") or model.activation_fit() != plan.get("fit"):
        raise EntryError(f"{model_dir() / 'server_model.npz'} is not the model of the published plan.json "
                         f"(rebuild: scripts/build_task.sh)")
    if _packed_spec().get("model") != plan.get("model") or _packed_spec().get("fit") != plan.get("fit"):
        raise EntryError(f"{model_dir() / 'packed.json'} is not the model of the published plan.json (rebuild)")
    replicated = _replicated_plan()
    if replicated.model != plan.get("model") or replicated.fit != plan.get("fit"):
        raise EntryError(f"{model_dir() / 'replicated_plan.json'} is not the model of the published plan.json "
                         f"(rebuild)")
    _log("server", f"model {plan['model'][:12]}: {model!r}")


def client_preprocess_input(size: int) -> None:
    pixels = read_pixels(test_pixels_file(size), BATCH_SIZES[size])
    folder = io_dir(size) / "intermediate"
    folder.mkdir(parents=True, exist_ok=True)
    np.save(folder / "inputs.npy", normalise(pixels))


def client_encode_encrypt_input(size: int) -> None:
    x = np.load(io_dir(size) / "intermediate" / "inputs.npy")
    packing = packing_used(size)
    if packing == "replicated":  # plan.input_ciphertexts per image, <= MAX ciphertexts per request
        from tensor_ops.replicated import DEFAULT_MAX_CIPHERTEXTS

        client = _replicated_client(size)
        per = max(1, DEFAULT_MAX_CIPHERTEXTS // client.plan.input_ciphertexts)
        requests = [client.encrypt(x[start:start + per]) for start in range(0, len(x), per)]
        total = _write_numbered(io_dir(size) / "ciphertexts_upload", "request", requests)
        _log("client", f"{len(x)} images, {client.plan.input_ciphertexts} ciphertext(s) each, {len(requests)} "
                       f"request(s), {total / 2**20:.1f} MiB")
        return
    if packing == "samples":  # one request per set of <= N/2 images, written record by record
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
    """The server's stage: set-up (model and keys loaded, plaintexts encoded, kernels loaded) and compute (each
    request evaluated) timed apart, logged and written to io/<size>/server_timings.json."""
    (io_dir(size) / TIMINGS_FILE).unlink(missing_ok=True)
    packing = packing_used(size)
    if packing == "replicated":
        return _server_replicated(size)
    if packing == "samples":
        return _server_sample_packed(size)
    from tensor_ops.distributed import ServerShare, evaluate_batches

    start = time.perf_counter()
    model, plan = _load_model(), _plan_dict()
    public = (io_dir(size) / "public_keys" / "context.bin").read_bytes()
    requests = [path.read_bytes() for path in _numbered(io_dir(size) / "ciphertexts_upload", "request")]
    dask = os.environ.get("HEZK_FHE_DASK") or None
    setup = {"model and files read": time.perf_counter() - start}
    if dask is None:  # the same tasks as on Dask, run here: the key loading and each request timed apart
        begin = time.perf_counter()
        server = ServerShare(model, public, (PIXELS,), plan["key_budget"]).server
        setup["keys loaded"] = time.perf_counter() - begin
        replies, compute = [], []  # the first request encodes the weights (~1,200 plaintexts): counted as compute
        for request in requests:
            begin = time.perf_counter()
            replies.append(server.evaluate(request))
            compute.append(time.perf_counter() - begin)
    else:  # on Dask the set-up (keys sent, weights encoded per worker) is inside the one call
        begin = time.perf_counter()
        replies = evaluate_batches(model, public, requests, input_shape=(PIXELS,), dask=dask,
                                   key_budget=plan["key_budget"])
        compute = [time.perf_counter() - begin]
    _write_numbered(io_dir(size) / "ciphertexts_download", "reply", replies)
    _write_timings(size, "slots" if dask is None else f"slots on Dask {dask}", setup, compute)


def _server_replicated(size: int) -> None:
    """The replicated plan: the model and keys loaded and every plaintext encoded (``prepare``) before the
    requests are read; then each request (<= 256 images) evaluated in this process."""
    from tensor_ops.replicated import ReplicatedServer

    start = time.perf_counter()
    model, plan = _load_model(), _replicated_plan()
    setup = {"model and plan read": time.perf_counter() - start}
    begin = time.perf_counter()
    server = ReplicatedServer(model, (io_dir(size) / "public_keys" / "context.bin").read_bytes(), plan)
    setup["keys loaded"] = time.perf_counter() - begin
    begin = time.perf_counter()
    server.prepare()
    setup["prepare (plaintexts encoded, kernels loaded)"] = time.perf_counter() - begin
    folder = io_dir(size) / "ciphertexts_download"
    _write_numbered(folder, "reply", [])
    compute, stages = [], {}
    for k, path in enumerate(_numbered(io_dir(size) / "ciphertexts_upload", "request")):
        request = path.read_bytes()
        begin = time.perf_counter()
        reply = server.evaluate(request, stages)
        compute.append(time.perf_counter() - begin)
        (folder / f"reply-{k:05d}.bin").write_bytes(reply)
    _write_timings(size, "replicated", setup, compute, stages)


def _server_sample_packed(size: int) -> None:
    """Sample packing: each request (a set of images, one per slot) read record by record and evaluated in this
    process (dense layers as modular matrix products, no rotation)."""
    from tensor_ops.sample_packing import SamplePackedServer

    start = time.perf_counter()
    packed = _packed_model()
    server = SamplePackedServer(packed, (io_dir(size) / "public_keys" / "context.bin").read_bytes())
    setup = {"model and keys loaded": time.perf_counter() - start}
    folder = io_dir(size) / "ciphertexts_download"
    _write_numbered(folder, "reply", [])
    compute = []
    for k, request in enumerate(_numbered(io_dir(size) / "ciphertexts_upload", "request")):
        begin = time.perf_counter()  # the set is read from its file record by record: reading is compute here
        reply = server.evaluate(request)
        compute.append(time.perf_counter() - begin)
        (folder / f"reply-{k:05d}.bin").write_bytes(reply)
        _log("server", f"set {k}: {compute[-1]:.3f} s")
    _write_timings(size, "samples", setup, compute)


def client_decrypt_decode(size: int) -> None:
    replies = _numbered(io_dir(size) / "ciphertexts_download", "reply")
    packing = packing_used(size)
    if packing == "replicated":
        client = _replicated_client(size)
        width = math.prod(client.plan.output_shape)
        scores = np.concatenate([client.decrypt(path.read_bytes()).reshape(-1, width) for path in replies], axis=0)
    elif packing == "samples":
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
    make.add_argument("--fit", choices=FITS, default=DEFAULT_FIT, help="the ReLU polynomials' fit")
    make.add_argument("--key-budget", type=float, default=None, help="bytes of Galois keys the plan may take")
    convert = commands.add_parser("pth-to-npz", help="the harness's mnist_ffnn_model.pth as named weights")
    convert.add_argument("pth")
    convert.add_argument("out")
    args = parser.parse_args(argv[1:])
    try:
        if args.command == "pth-to-npz":
            pth_to_npz(args.pth, args.out)
        else:
            entry = export(args.weights, load_calibration(args.calibration), args.out, args.degree, args.key_budget,
                           fit=args.fit)
            print(f"[hezk-entry] model published in {args.out}: {json.dumps(entry)}")
    except EntryError as error:
        print(f"stage.py {args.command}: {error}", file=sys.stderr)
        return 1
    return 0
