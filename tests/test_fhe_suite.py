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
    every stage's time and the key, input and result bytes; single passes its label check, small's encrypted
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
    assert (root / "measurements" / "small" / "results-1.json").exists()
    assert "Server: Encrypted ML Inference computation" in local_harness.table(root)


#: an insecure tiny ring (N = 2^4: 8 slots, 7 levels of 30 bits) for the in-process run of the sample-packed stages
TEST_RING = dict(log_n=4, log_q=[[30, 30]] + [30] * 7, log_p=[30, 30, 30], log_scale=30, dnum=5, insecure=True)
STAGE_ORDER = [executable for _, _, executable, _ in local_harness.STAGE_STEPS]


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

    rng = np.random.default_rng(0)
    shapes = {"fc1": (128, 784), "fc2": (64, 128), "fc3": (10, 64)}
    weights = {f"{name}.weight": rng.normal(0, 1.5 / np.sqrt(shape[1]), shape) for name, shape in shapes.items()}
    weights.update({f"{name}.bias": rng.normal(0, 0.1, shape[0]) for name, shape in shapes.items()})
    np.savez(tmp_path / "weights.npz", activation="relu", **weights)
    pixels = rng.uniform(0, 1, (215, 784))
    model_dir = tmp_path / "model"
    hezk_entry.export(tmp_path / "weights.npz", pixels[15:], model_dir, degree=2,
                      packed_params=CKKSParameters.from_literal(TEST_RING))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HEZK_FHE_MODEL_DIR", str(model_dir))
    monkeypatch.setenv("HEZK_FHE_PACKING", "samples")
    standin.write_pixels(tmp_path / "datasets" / "small" / "intermediate" / "test_pixels.txt", pixels[:15])
    assert hezk_entry.run_stage("client_key_generation", ["1"]) == 1  # an insecure ring needs the opt-in
    monkeypatch.setenv("HEZK_FHE_TEST_RING", "1")
    for name in STAGE_ORDER:
        assert hezk_entry.run_stage(name, [] if name == "server_preprocess_model" else ["1"]) == 0, name

    io = tmp_path / "io" / "small"
    assert hezk_entry.uses_sample_packing(1)
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


def test_packing_choice_and_test_ring_opt_in(tmp_path, monkeypatch):
    """Rule: key generation takes sample packing from 100 images (medium, large) and the slot-blocked plan below
    (single, small) unless HEZK_FHE_PACKING says otherwise (another value is refused); later stages follow the
    packing.json it wrote; a published spec below 128 bits is refused without HEZK_FHE_TEST_RING=1."""
    from crypto import CKKSParameters
    from tensor_ops.sample_packing import SamplePackedSpec

    monkeypatch.delenv("HEZK_FHE_PACKING", raising=False)
    assert [hezk_entry.sample_packing_chosen(size) for size in range(4)] == [False, False, True, True]
    monkeypatch.setenv("HEZK_FHE_PACKING", "slots")
    assert not hezk_entry.sample_packing_chosen(3)
    monkeypatch.setenv("HEZK_FHE_PACKING", "rows")
    with pytest.raises(hezk_entry.EntryError, match="auto, slots or samples"):
        hezk_entry.sample_packing_chosen(3)
    monkeypatch.chdir(tmp_path)
    assert not hezk_entry.uses_sample_packing(2)
    (tmp_path / "model").mkdir()
    spec = SamplePackedSpec(CKKSParameters.preset("TOY"), 4, 784, 10)
    (tmp_path / "model" / "packed.json").write_text(json.dumps(spec.to_dict()))
    monkeypatch.setenv("HEZK_FHE_MODEL_DIR", str(tmp_path / "model"))
    monkeypatch.setenv("HEZK_FHE_PACKING", "samples")
    monkeypatch.delenv("HEZK_FHE_TEST_RING", raising=False)
    assert hezk_entry.run_stage("client_key_generation", ["2"]) == 1
    monkeypatch.setenv("HEZK_FHE_TEST_RING", "1")
    assert hezk_entry.run_stage("client_key_generation", ["2"]) == 0
    assert hezk_entry.uses_sample_packing(2)
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
