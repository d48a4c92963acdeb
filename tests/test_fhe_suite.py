"""hezk's entry to the FHE Benchmarking Suite's ML-inference workload (benchmarks/fhe_suite).

The seven stage executables run in the harness's order on the single and small instances against a stand-in
dataset in the harness's file formats; the results file has the harness's keys, the encrypted predictions are
the fitted model's and the accuracy is the float model's up to the polynomial ReLU. Also: stage inputs are
refused with a message (never a traceback), and a client file saved without Galois keys still encrypts and
decrypts (``Client.save(galois_keys=False)``, what the entry's key generation writes).
"""
import json
import os
import pathlib
import stat
import subprocess
import sys

import numpy as np
import pytest

SUITE = pathlib.Path(__file__).resolve().parent.parent / "benchmarks" / "fhe_suite"
sys.path.insert(0, str(SUITE))
sys.path.insert(0, str(SUITE / "submission"))

import hezk_entry  # noqa: E402
import local_harness  # noqa: E402
import standin  # noqa: E402

STAGE_NAMES = [title for _, title, _, _ in local_harness.STAGE_STEPS] + ["Harness: Input generation for MNIST"]
SIZE_NAMES = [label for _, label in local_harness.SIZE_LOGS.values()]


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    """A harness root with a quickly trained stand-in model (fewer images and epochs than standin.py's) and
    the entry installed and built at its default (128-bit) parameters."""
    root = tmp_path_factory.mktemp("suite")
    standin.make_root(root, train_count=3000, pool=300, epochs=10, sizes=("single", "small"))
    local_harness.install(root)
    return root


@pytest.mark.slow
def test_stages_in_harness_order_single_and_small(root):
    """Rule: each stage reads only what the previous ones wrote under io/<size>/; the results JSON carries
    every stage's time and the key, input and result bytes, and (ours) the packing (replicated: 13 power-of-two
    Galois keys at 128 bits), the server's compute apart and each stage's peak RSS; single passes its label
    check, small's encrypted
    predictions equal the fitted model's (CKKS noise is far below the logits' gaps) and its accuracy is the
    float model's up to what the degree-4 ReLU loses."""
    from crypto import CKKSContext
    from tensor_ops.nn import Sequential

    single = local_harness.run_size(root, 0, seed=3)[0]
    small = local_harness.run_size(root, 1, seed=3)[0]
    for record in (single, small):
        assert set(STAGE_NAMES) <= set(record["per_stage"])
        assert all(value.endswith("s") and float(value[:-1]) >= 0 for value in record["per_stage"].values())
        assert set(SIZE_NAMES) <= set(record["bandwidth"])
        assert record["hezk_entry"]["bytes"]["Client: Public and evaluation keys"] > 0
        # single and small take the replicated plan: the server stage reports its compute apart from its set-up
        entry = record["hezk_entry"]
        assert entry["packing"] == "replicated" and 0 < entry["server_compute_s"]
        assert entry["server_compute_s"] < float(record["per_stage"]["Server: Encrypted ML Inference computation"][:-1])
        if local_harness.TIME:
            assert set(entry["peak_rss_kib"]) == set(STAGE_NAMES) - {"Harness: Input generation for MNIST"}
    assert "mnist_model_quality" not in single
    assert single["hezk_entry"]["agreement_with_float_model"] in (0.0, 1.0)

    quality = small["mnist_model_quality"]
    encrypted, harness = quality["Encrypted model quality"], quality["Harness model quality"]
    assert encrypted["total_samples"] == harness["total_samples"] == 15
    assert encrypted["accuracy"] >= harness["accuracy"] - 2 / 15 and encrypted["accuracy"] >= 0.8

    io = root / "io" / "small"
    predictions = [int(v) for v in (io / "encrypted_model_predictions.txt").read_text().split()]
    fitted = Sequential.load(root / "submission" / "build" / "model" / "server_model.npz")
    inputs = np.load(io / "intermediate" / "inputs.npy")
    assert predictions == fitted.forward(inputs).argmax(axis=1).tolist()
    scores = np.load(io / "intermediate" / "scores.npy")
    assert np.max(np.abs(scores - fitted.forward(inputs))) < 0.05

    # the secret key stays with the client: mode 0600, and the server's file holds none
    assert stat.S_IMODE(os.stat(io / "secret_key" / "client.bin").st_mode) == 0o600
    public = CKKSContext.from_bytes((io / "public_keys" / "context.bin").read_bytes())
    assert not public.has_secret_key and public.params.security_bits >= 128
    assert len(public.rotation_steps) == 13 and all(step & (step - 1) == 0 for step in public.rotation_steps)
    assert (root / "measurements" / "small" / "results-1.json").exists()
    assert "Server: Encrypted ML Inference computation" in local_harness.table(root)


@pytest.mark.slow
def test_slot_blocked_path_when_forced(root, monkeypatch):
    """Rule: HEZK_FHE_PACKING=slots keeps the first entry's slot-blocked plan reachable (the one path that runs
    on Dask): key generation writes its packing.json and its 67 Galois keys, and the encrypted prediction of
    single is the fitted model's; the server stage reports its compute apart from loading the keys."""
    from crypto import CKKSContext
    from tensor_ops.model_plan import ModelPlan
    from tensor_ops.nn import Sequential

    monkeypatch.setenv("HEZK_FHE_PACKING", "slots")
    record = local_harness.run_size(root, 0, seed=4)[0]
    assert record["hezk_entry"]["packing"] == "slots" and record["hezk_entry"]["server_compute_s"] > 0
    io = root / "io" / "single"
    assert json.loads((io / "public_keys" / "packing.json").read_text()) == {"packing": "slot-blocked"}
    public = CKKSContext.from_bytes((io / "public_keys" / "context.bin").read_bytes())
    plan = ModelPlan.from_dict(json.loads((root / "submission" / "build" / "model" / "plan.json").read_text()))
    assert set(public.rotation_steps) == set(plan.rotations) and len(plan.rotations) > 13
    fitted = Sequential.load(root / "submission" / "build" / "model" / "server_model.npz")
    inputs = np.load(io / "intermediate" / "inputs.npy")
    predictions = [int(v) for v in (io / "encrypted_model_predictions.txt").read_text().split()]
    assert predictions == fitted.forward(inputs).argmax(axis=1).tolist()


#: an insecure tiny ring (N = 2^4: 8 slots, 7 levels of 30 bits) for the in-process run of the sample-packed stages
TEST_RING = dict(log_n=4, log_q=[[30, 30]] + [30] * 7, log_p=[30, 30, 30], log_scale=30, dnum=5, insecure=True)
STAGE_ORDER = [executable for _, _, executable, _ in local_harness.STAGE_STEPS]


def _random_mlp_weights(path, hidden, seed):
    """A SimpleFFNN-shaped named-weights file (784 -> hidden[0] -> hidden[1] -> 10, ReLU) of random weights at
    ``path``; returns 215 random pixel rows (the first 15 an instance, the rest calibration)."""
    rng = np.random.default_rng(seed)
    widths = (784, *hidden, 10)
    shapes = {f"fc{i + 1}": (n_out, n_in) for i, (n_in, n_out) in enumerate(zip(widths[:-1], widths[1:]))}
    weights = {f"{name}.weight": rng.normal(0, 1.5 / np.sqrt(shape[1]), shape) for name, shape in shapes.items()}
    weights.update({f"{name}.bias": rng.normal(0, 0.1, shape[0]) for name, shape in shapes.items()})
    np.savez(path, activation="relu", **weights)
    return rng.uniform(0, 1, (215, 784))


def _run_small_on_a_test_ring(tmp_path, monkeypatch, pixels):
    """The small instance's pixels written, key generation refused without HEZK_FHE_TEST_RING=1, then the seven
    stages in the harness's order, each exiting 0."""
    standin.write_pixels(tmp_path / "datasets" / "small" / "intermediate" / "test_pixels.txt", pixels)
    assert hezk_entry.run_stage("client_key_generation", ["1"]) == 1  # an insecure ring needs the opt-in
    monkeypatch.setenv("HEZK_FHE_TEST_RING", "1")
    for name in STAGE_ORDER:
        assert hezk_entry.run_stage(name, [] if name == "server_preprocess_model" else ["1"]) == 0, name


@pytest.mark.slow
def test_sample_packed_stages_on_a_test_ring(tmp_path, monkeypatch):
    """Rule: with sample packing (HEZK_FHE_PACKING=samples; medium and large choose it by default) the seven stages
    run in the harness's order through io/<size>/: the keys are the public, relinearization and (the instance
    having more images than slots: a paired set) conjugation keys, no rotation key, with packing.json beside
    them; the secret file has mode 0600, the one request holds one complex ciphertext per pixel, and the
    predictions are the fitted model's. Run in process on an insecure test ring (8 slots for the 15 images of
    small; degree-2 ReLUs: depth 7), which key generation refuses without the explicit HEZK_FHE_TEST_RING=1."""
    from crypto import CKKSContext, CKKSParameters
    from tensor_ops.nn import Sequential

    pixels = _random_mlp_weights(tmp_path / "weights.npz", (128, 64), seed=0)
    model_dir = tmp_path / "model"
    hezk_entry.export(tmp_path / "weights.npz", pixels[15:], model_dir, degree=2,
                      packed_params=CKKSParameters.from_literal(TEST_RING))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HEZK_FHE_MODEL_DIR", str(model_dir))
    monkeypatch.setenv("HEZK_FHE_PACKING", "samples")
    _run_small_on_a_test_ring(tmp_path, monkeypatch, pixels[:15])

    io = tmp_path / "io" / "small"
    assert hezk_entry.packing_used(1) == "samples"
    public = CKKSContext.from_bytes((io / "public_keys" / "context.bin").read_bytes())
    assert public.rotation_steps == () and public.has_conjugation_key and not public.has_secret_key
    assert stat.S_IMODE(os.stat(io / "secret_key" / "client.bin").st_mode) == 0o600
    requests = sorted((io / "ciphertexts_upload").glob("request-*.bin"))
    assert len(requests) == 1 and len(sorted((io / "ciphertexts_download").glob("reply-*.bin"))) == 1
    one = len(public.encrypt(np.zeros(8, dtype=complex), level=public.params.max_level).to_bytes())  # 15 = 8 + 7
    assert requests[0].stat().st_size == 784 * one
    fitted = Sequential.load(model_dir / "server_model.npz")
    inputs = np.load(io / "intermediate" / "inputs.npy")
    scores = np.load(io / "intermediate" / "scores.npy")
    assert scores.shape == (15, 10) and np.max(np.abs(scores - fitted.forward(inputs))) < 0.05
    predictions = [int(v) for v in (io / "encrypted_model_predictions.txt").read_text().split()]
    assert predictions == fitted.forward(inputs).argmax(axis=1).tolist()


#: an insecure tiny ring (N = 2^8: 128 slots, 7 levels) for the replicated stages of a narrow 784 -> 16 -> 8 -> 10 MLP
#: (the replicated layout of 784 -> 128 -> 64 -> 10 needs 128 x 64 slots: N = 2^14, the 128-bit run below)
REPLICATED_TEST_RING = dict(log_n=8, log_q=[[30, 30]] + [30] * 7, log_p=[30, 30, 30], log_scale=30, dnum=3,
                            insecure=True)


@pytest.mark.slow
def test_replicated_stages_on_a_test_ring(tmp_path, monkeypatch):
    """Rule: single and small choose the replicated plan by default; the seven stages then run in the harness's
    order through io/<size>/: packing.json says so, the keys are the public, relinearization and the plan's
    power-of-two Galois keys (no secret key), the secret file has mode 0600 and holds no Galois key, the one
    request holds plan.input_ciphertexts ciphertexts per image, the server stage writes its set-up and compute
    seconds apart (server_timings.json), and the predictions are the fitted (degree-4) model's. In process on an
    insecure tiny ring with a narrow MLP, which key generation refuses without HEZK_FHE_TEST_RING=1."""
    from crypto import CKKSContext, CKKSParameters
    from tensor_ops.inference import unpack_message
    from tensor_ops.nn import Sequential
    from tensor_ops.replicated import ReplicatedPlan

    pixels = _random_mlp_weights(tmp_path / "weights.npz", (16, 8), seed=1)
    model_dir = tmp_path / "model"
    hezk_entry.export(tmp_path / "weights.npz", pixels[15:], model_dir, degree=4,
                      replicated_params=CKKSParameters.from_literal(REPLICATED_TEST_RING))
    plan = ReplicatedPlan.from_dict(json.loads((model_dir / "replicated_plan.json").read_text()))
    assert plan.stages[0].fold == hezk_entry.REPLICATED_FOLD and plan.depth == 7
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HEZK_FHE_MODEL_DIR", str(model_dir))
    monkeypatch.delenv("HEZK_FHE_PACKING", raising=False)
    monkeypatch.delenv("HEZK_FHE_TEST_RING", raising=False)
    _run_small_on_a_test_ring(tmp_path, monkeypatch, pixels[:15])

    io = tmp_path / "io" / "small"
    assert hezk_entry.packing_used(1) == "replicated"
    public = CKKSContext.from_bytes((io / "public_keys" / "context.bin").read_bytes())
    assert public.rotation_steps == plan.rotations and not public.has_secret_key
    assert all(step & (step - 1) == 0 for step in plan.rotations) and public.params == plan.params
    assert stat.S_IMODE(os.stat(io / "secret_key" / "client.bin").st_mode) == 0o600
    assert (io / "secret_key" / "client.bin").stat().st_size < (io / "public_keys" / "context.bin").stat().st_size
    requests = sorted((io / "ciphertexts_upload").glob("request-*.bin"))
    assert len(requests) == 1 and len(sorted((io / "ciphertexts_download").glob("reply-*.bin"))) == 1
    header, blobs = unpack_message(requests[0].read_bytes(), "request", 1 << 10)
    assert header["samples"] == 15 and len(blobs) == 15 * plan.input_ciphertexts
    timings = json.loads((io / "server_timings.json").read_text())
    assert timings["packing"] == "replicated" and timings["images"] == 15 and len(timings["requests_s"]) == 1
    assert timings["compute_s"] > 0 and set(timings["setup_s"]) >= {"keys loaded"} and timings["threads"] >= 1
    assert any(key.endswith(":rows") for key in timings["stages_s"])
    fitted = Sequential.load(model_dir / "server_model.npz")
    inputs = np.load(io / "intermediate" / "inputs.npy")
    scores = np.load(io / "intermediate" / "scores.npy")
    assert scores.shape == (15, 10) and np.max(np.abs(scores - fitted.forward(inputs))) < 0.05
    predictions = [int(v) for v in (io / "encrypted_model_predictions.txt").read_text().split()]
    assert predictions == fitted.forward(inputs).argmax(axis=1).tolist()


def test_weighted_fit_refits_each_relu_where_its_calibration_inputs_lie(tmp_path):
    """Rule: the build's default fit (``weighted_fit``) replaces each ReLU polynomial of the library's calibrated
    (minimax) model by the least-squares fit on the same interval weighted by the values the float model's
    activation input takes on the calibration images (naive twin: those values computed from the weight file);
    its squared error there is below the minimax fit's; export names the fit and refuses another."""
    from tensor_ops.activations import fit_activation
    from tensor_ops.nn import Activation, Sequential

    rng = np.random.default_rng(2)
    shapes = {"fc1": (16, 784), "fc2": (8, 16), "fc3": (10, 8)}
    weights = {f"{name}.weight": rng.normal(0, 1.5 / np.sqrt(shape[1]), shape) for name, shape in shapes.items()}
    weights.update({f"{name}.bias": rng.normal(0, 0.1, shape[0]) for name, shape in shapes.items()})
    np.savez(tmp_path / "weights.npz", activation="relu", **weights)
    x = hezk_entry.normalise(rng.uniform(0, 1, (200, 784)) ** 3)
    minimax = Sequential.load(tmp_path / "weights.npz", input_shape=(784,), calibration=x, degree=4)
    weighted, (mean_error, max_error) = hezk_entry.weighted_fit(minimax, x, 4)
    h1 = x @ weights["fc1.weight"].T + weights["fc1.bias"]
    h2 = np.maximum(h1, 0) @ weights["fc2.weight"].T + weights["fc2.bias"]
    old = [layer.poly for layer in minimax.layers if isinstance(layer, Activation)]
    new = [layer.poly for layer in weighted.layers if isinstance(layer, Activation)]
    assert len(new) == 2 and [p.interval for p in new] == [p.interval for p in old]
    for poly, before, inputs in zip(new, old, (h1, h2)):
        twin = fit_activation("relu", 4, before.interval, method="least_squares", samples=inputs.ravel())
        assert np.allclose(poly.coefficients, twin.coefficients)
        assert np.mean((poly(inputs) - np.maximum(inputs, 0)) ** 2) < np.mean((before(inputs) -
                                                                                np.maximum(inputs, 0)) ** 2)
    logits = np.maximum(h2, 0) @ weights["fc3.weight"].T + weights["fc3.bias"]
    assert np.isclose(max_error, np.max(np.abs(weighted.forward(x) - logits)))
    assert 0 < mean_error <= max_error
    with pytest.raises(hezk_entry.EntryError, match="fit='cubic' must be one of"):
        hezk_entry.export(tmp_path / "weights.npz", rng.uniform(0, 1, (20, 784)), tmp_path / "m", fit="cubic")


def test_packing_choice_and_test_ring_opt_in(tmp_path, monkeypatch):
    """Rule: key generation takes sample packing from 100 images (medium, large) and the replicated plan below
    (single, small) unless HEZK_FHE_PACKING says otherwise (replicated, samples or slots; another value is
    refused); later stages follow the packing.json it wrote (none: the slot-blocked files of the first entry; an
    unknown name is refused); a published spec below 128 bits is refused without HEZK_FHE_TEST_RING=1."""
    from crypto import CKKSParameters
    from tensor_ops.sample_packing import SamplePackedSpec

    monkeypatch.delenv("HEZK_FHE_PACKING", raising=False)
    assert [hezk_entry.packing_chosen(size) for size in range(4)] == ["replicated", "replicated", "samples", "samples"]
    assert hezk_entry.BATCH_SIZES[1] < hezk_entry.SAMPLE_PACKING_MIN_BATCH <= hezk_entry.BATCH_SIZES[2]
    for forced in ("slots", "samples", "replicated"):
        monkeypatch.setenv("HEZK_FHE_PACKING", forced.upper())
        assert [hezk_entry.packing_chosen(size) for size in range(4)] == [forced] * 4
    monkeypatch.setenv("HEZK_FHE_PACKING", "auto")
    assert hezk_entry.packing_chosen(0) == "replicated"
    monkeypatch.setenv("HEZK_FHE_PACKING", "rows")
    with pytest.raises(hezk_entry.EntryError, match="auto, replicated, samples or slots"):
        hezk_entry.packing_chosen(3)
    monkeypatch.chdir(tmp_path)
    assert hezk_entry.run_stage("client_key_generation", ["0"]) == 1 and not (tmp_path / "io").exists()
    assert hezk_entry.packing_used(2) == "slots"
    keys = tmp_path / "io" / "medium" / "public_keys"
    keys.mkdir(parents=True)
    (keys / "packing.json").write_text(json.dumps({"packing": "replicated-per-sample"}))
    assert hezk_entry.packing_used(2) == "replicated"
    (keys / "packing.json").write_text(json.dumps({"packing": "diagonal"}))
    with pytest.raises(hezk_entry.EntryError, match="packing 'diagonal' is none of"):
        hezk_entry.packing_used(2)
    (tmp_path / "model").mkdir()
    spec = SamplePackedSpec(CKKSParameters.preset("TOY"), 4, 784, 10)
    (tmp_path / "model" / "packed.json").write_text(json.dumps(spec.to_dict()))
    monkeypatch.setenv("HEZK_FHE_MODEL_DIR", str(tmp_path / "model"))
    monkeypatch.setenv("HEZK_FHE_PACKING", "samples")
    monkeypatch.delenv("HEZK_FHE_TEST_RING", raising=False)
    assert hezk_entry.run_stage("client_key_generation", ["2"]) == 1
    monkeypatch.setenv("HEZK_FHE_TEST_RING", "1")
    assert hezk_entry.run_stage("client_key_generation", ["2"]) == 0
    assert hezk_entry.packing_used(2) == "samples"
    assert (tmp_path / "io" / "medium" / "secret_key" / "client.bin").exists()


def test_stage_refuses_bad_arguments_and_inputs(tmp_path, monkeypatch):
    """Rule: a stage given no size, a size outside 0-3 or a pixel file of the wrong shape or range exits
    with status 2 (usage) or 1 and one line naming the problem; a well-formed file is read (positive control)."""
    monkeypatch.chdir(tmp_path)
    assert hezk_entry.run_stage("client_preprocess_input", []) == 2
    assert hezk_entry.run_stage("client_preprocess_input", ["7"]) == 2
    pixels = tmp_path / "datasets" / "small" / "intermediate" / "test_pixels.txt"
    standin.write_pixels(pixels, np.full((15, 784), 0.5))
    assert hezk_entry.run_stage("client_preprocess_input", ["1"]) == 0  # positive control
    assert np.allclose(np.load(tmp_path / "io" / "small" / "intermediate" / "inputs.npy"), (0.5 - 0.1307) / 0.3081)
    for bad, reason in ((np.full((14, 784), 0.5), "the instance takes 15"),
                        (np.full((15, 783), 0.5), "784 per line"),
                        (np.full((15, 784), 2.0), "in [0, 1]")):
        standin.write_pixels(pixels, bad)
        with pytest.raises(hezk_entry.EntryError, match=reason.replace("[", r"\[").replace("]", r"\]")):
            hezk_entry.read_pixels(pixels, 15)
        assert hezk_entry.run_stage("client_preprocess_input", ["1"]) == 1
    pixels.write_text("0.5 x\n")
    with pytest.raises(hezk_entry.EntryError, match="not a number"):
        hezk_entry.read_pixels(pixels)


def test_stage_executable_prints_usage_not_traceback(tmp_path):
    """Rule: the installed executable (stage.py under a stage's name) answers a missing size with usage."""
    link = tmp_path / "client_postprocess"
    link.symlink_to(SUITE / "submission" / "stage.py")
    done = subprocess.run([sys.executable, str(link)], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 2 and "usage: client_postprocess <instance-size>" in done.stderr
    assert "Traceback" not in done.stderr


def test_client_file_without_galois_keys_encrypts_and_decrypts(tmp_path):
    """Rule: Client.save(galois_keys=False) writes the secret key without the rotation keys (which the server
    has in the public context): the file is smaller, keeps the key set, and its client decrypts the replies
    of a server keyed by the full client; a non-bool galois_keys is refused."""
    from crypto.errors import ParameterError
    from tensor_ops.inference import Client, Server
    from tensor_ops.nn import Linear, Sequential, Square

    rng = np.random.default_rng(0)
    model = Sequential([Linear(rng.normal(0, 0.3, (4, 8)), np.zeros(4)), Square(),
                        Linear(rng.normal(0, 0.3, (3, 4)), np.zeros(3))], input_shape=(8,))
    client = Client("TOY", model=model, seed=1)
    client.save(tmp_path / "full.bin")
    client.save(tmp_path / "lean.bin", galois_keys=False)
    assert os.path.getsize(tmp_path / "lean.bin") < os.path.getsize(tmp_path / "full.bin") / 2
    lean = Client.load(tmp_path / "lean.bin")
    assert lean.key_id == client.key_id and lean.plan.to_dict() == client.plan.to_dict()
    x = rng.uniform(-1, 1, (3, 8))
    reply = Server(model, client.public_context()).evaluate(lean.encrypt(x))
    assert np.allclose(lean.decrypt(reply), model.forward(x), atol=1e-2)
    with pytest.raises(ParameterError, match="galois_keys"):
        client.save(tmp_path / "bad.bin", galois_keys="no")


def test_harness_pth_converts_to_named_weights(tmp_path):
    """Rule: the harness's model file (a torch state_dict of SimpleFFNN: fc1 (128, 784), fc2 (64, 128), fc3
    (10, 64)) becomes the named-weights .npz the build exports, its arrays unchanged; another shape is refused
    naming the layer."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    layers = {"fc1": torch.nn.Linear(784, 128), "fc2": torch.nn.Linear(128, 64), "fc3": torch.nn.Linear(64, 10)}
    state = {f"{name}.{key}": value for name, layer in layers.items() for key, value in layer.state_dict().items()}
    torch.save(state, tmp_path / "mnist_ffnn_model.pth")
    hezk_entry.pth_to_npz(tmp_path / "mnist_ffnn_model.pth", tmp_path / "weights.npz")
    arrays = np.load(tmp_path / "weights.npz")
    assert str(arrays["activation"]) == "relu"
    for key, value in state.items():
        assert np.array_equal(arrays[key], value.double().numpy())
    pixels = np.random.default_rng(0).uniform(0, 1, (4, 784))
    assert np.array_equal(standin.float_predict(dict(arrays), pixels),
                          layers["fc3"](torch.relu(layers["fc2"](torch.relu(layers["fc1"](
                              torch.tensor(standin.normalise(pixels), dtype=torch.float32)))))).argmax(1).numpy())
    state["fc2.weight"] = torch.zeros(64, 100)
    torch.save(state, tmp_path / "other.pth")
    with pytest.raises(hezk_entry.EntryError, match=r"fc2.weight must have shape \(64, 128\)"):
        hezk_entry.pth_to_npz(tmp_path / "other.pth", tmp_path / "other.npz")
