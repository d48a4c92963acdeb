"""``progress=True`` is accepted by the long calls (one helper, :func:`hezk.progress.as_progress`): it draws a bar
on stderr and changes no result; a value that is neither a bool, None nor a callable is refused naming the
parameter."""
import numpy as np
import pytest

from crypto import CKKSContext
from crypto.errors import ParameterError


def test_keygen_accepts_progress_true(capsys):
    """Was ``TypeError: 'bool' object is not callable`` (while ``Client(progress=True)`` worked)."""
    quiet = CKKSContext.keygen("TOY", rotations=[1, 2], seed=b"progress")
    capsys.readouterr()
    shown = CKKSContext.keygen("TOY", rotations=[1, 2], seed=b"progress", progress=True)
    err = capsys.readouterr().err
    assert "keys" in err and "2/2" in err
    assert shown.galois_keys_bytes() == quiet.galois_keys_bytes()
    assert np.array_equal(shown.public_key.a.data, quiet.public_key.a.data)
    calls = []
    CKKSContext.keygen("TOY", rotations=[1], seed=b"progress", progress=lambda *a: calls.append(a))
    assert calls and calls[-1][0] == calls[-1][1]  # a callable still gets (done, total, label)


def test_keygen_refuses_a_bad_progress_value():
    with pytest.raises(ParameterError, match="progress="):
        CKKSContext.keygen("TOY", progress="yes")


def test_mlp_prove_accepts_progress_true(capsys):
    from proofs import Linear, Network, ReLU

    rng = np.random.default_rng(0)
    layers = [Linear(0.3 * rng.normal(size=(4, 3)), np.zeros(4)), ReLU(), Linear(0.3 * rng.normal(size=(2, 4)),
                                                                                 np.zeros(2))]
    network = Network(layers, frac_bits=6, zk=False)
    x = rng.uniform(-1, 1, size=(1, 3))
    quiet = network.prove(x).to_bytes()
    capsys.readouterr()
    shown = network.prove(x, progress=True).to_bytes()
    assert "proving" in capsys.readouterr().err
    assert shown == quiet


def test_hiding_graph_prove_accepts_progress_true(tmp_path, capsys):
    """Was ``TypeError`` (the callback was called without going through as_progress)."""
    onnx = pytest.importorskip("onnx")
    from hezk.model import read_onnx
    from proofs.graph_quantize import quantize_graph
    from proofs.layers.graph_zk import HidingGraphNetwork, verify_graph_zk
    from tests.model import onnx_models as M

    path = str(tmp_path / "mlp.onnx")
    onnx.save(M.mlp((6, 4, 2), "square", seed=3), path)
    calibration = np.random.default_rng(1).uniform(-1, 1, (8, 6))
    q = quantize_graph(read_onnx(path), calibration)
    network = HidingGraphNetwork(q, max_proofs=2)
    quiet = network.prove(calibration[:1])
    capsys.readouterr()
    shown = network.prove(calibration[:1], progress=True)
    assert "proving" in capsys.readouterr().err
    commitment = network.commitment.to_bytes()
    assert np.array_equal(verify_graph_zk(commitment, calibration[:1], shown.to_bytes()),
                          verify_graph_zk(commitment, calibration[:1], quiet.to_bytes()))


def _sequential(seed=0):
    from tensor_ops.nn import Linear, Sequential, Square

    rng = np.random.default_rng(seed)
    return Sequential([Linear(rng.normal(0, 0.5, (4, 6)), rng.normal(0, 0.5, 4)), Square(),
                       Linear(rng.normal(0, 0.5, (2, 4)), np.zeros(2))], input_shape=(6,))


def test_plan_accepts_progress_true(capsys):
    """Planning reports each lowering tried; a memoised plan reports one step at once; the plan is the same."""
    quiet = _sequential().plan(params="TOY")
    capsys.readouterr()
    model = _sequential()
    shown = model.plan(params="TOY", progress=True)
    assert "planning" in capsys.readouterr().err
    assert repr(shown) == repr(quiet)
    calls = []
    assert model.plan(params="TOY", progress=lambda *a: calls.append(a)) is shown
    assert calls == [(1, 1, "memoised")]
    with pytest.raises(ParameterError, match="progress="):
        model.plan(params="TOY", progress="yes")


@pytest.mark.slow
def test_bootstrap_accepts_progress_true(capsys):
    """The first bootstrap (its setup: the plan and the transforms' diagonals) and a later one report the four
    stages; the ciphertexts are identical to a bootstrap without progress. Insecure TOY ring (N = 2^12, sparse
    secret), for speed."""
    from crypto.ckks.bootstrap import BootstrapConfig, plan_for
    from crypto.params import CKKSParameters
    from tests.crypto.test_bootstrap import BOOT_TOY, SPARSE

    params = CKKSParameters.from_literal(BOOT_TOY)
    config = BootstrapConfig(slots=SPARSE)
    ctx = CKKSContext.keygen(params, rotations=plan_for(params, config).rotation_steps, conjugation=True, seed=3)
    ct = ctx.encrypt(np.linspace(-1, 1, SPARSE), level=0)
    capsys.readouterr()
    calls = []
    first = ctx.evaluator.bootstrap(ct, SPARSE, progress=lambda *a: calls.append(a))
    assert [c[:2] for c in calls] == [(0, 4), (1, 4), (2, 4), (3, 4), (4, 4)] and "setup" in calls[2][2]
    shown = ctx.evaluator.bootstrap(ct, SPARSE, progress=True)
    assert "bootstrapping" in capsys.readouterr().err
    quiet = ctx.evaluator.bootstrap(ct, SPARSE)
    for out in (first, shown):
        assert all(np.array_equal(a.data, b.data) for a, b in zip(out.parts, quiet.parts))
    with pytest.raises(ParameterError, match="progress="):
        ctx.evaluator.bootstrap(ct, SPARSE, progress=1)


def test_mlp_commit_accepts_progress_true(capsys):
    """A public-weights commitment is deterministic: the same bytes with and without progress."""
    from proofs import Linear, ModelError, Network, ReLU

    rng = np.random.default_rng(0)
    layers = [Linear(0.3 * rng.normal(size=(4, 3)), np.zeros(4)), ReLU(), Linear(0.3 * rng.normal(size=(2, 4)),
                                                                                 np.zeros(2))]
    quiet = Network(layers, frac_bits=6, zk=False).commitment.to_bytes()
    capsys.readouterr()
    shown = Network(layers, frac_bits=6, zk=False, progress=True).commitment.to_bytes()
    assert "committing" in capsys.readouterr().err
    assert shown == quiet
    with pytest.raises(ModelError, match="progress="):
        Network(layers, frac_bits=6, zk=False, progress="yes")


def _quantized(tmp_path):
    onnx = pytest.importorskip("onnx")
    from hezk.model import read_onnx
    from proofs.graph_quantize import quantize_graph
    from tests.model import onnx_models as M

    path = str(tmp_path / "mlp.onnx")
    onnx.save(M.mlp((6, 4, 2), "square", seed=3), path)
    calibration = np.random.default_rng(1).uniform(-1, 1, (8, 6))
    return path, calibration, quantize_graph(read_onnx(path), calibration)


def test_graph_commit_accepts_progress_true(tmp_path, capsys):
    """GraphNetwork (public weights: deterministic bytes) and HidingGraphNetwork (random masks: its proofs
    verify, with the output of one committed without progress) commit with progress on stderr."""
    from proofs import ModelError
    from proofs.layers.graph import GraphNetwork
    from proofs.layers.graph_zk import HidingGraphNetwork, verify_graph_zk

    _, calibration, q = _quantized(tmp_path)
    quiet = GraphNetwork(q).commitment.to_bytes()
    capsys.readouterr()
    assert GraphNetwork(q, progress=True).commitment.to_bytes() == quiet
    assert "committing" in capsys.readouterr().err
    hidden = HidingGraphNetwork(q, max_proofs=2, progress=True)
    assert "committing" in capsys.readouterr().err
    quiet_hidden = HidingGraphNetwork(q, max_proofs=2)
    x = calibration[:1]
    assert np.array_equal(verify_graph_zk(hidden.commitment.to_bytes(), x, hidden.prove(x).to_bytes()),
                          verify_graph_zk(quiet_hidden.commitment.to_bytes(), x, quiet_hidden.prove(x).to_bytes()))
    for network in (GraphNetwork, HidingGraphNetwork):
        with pytest.raises(ModelError, match="progress="):
            network(q, progress=object())


def test_api_compile_and_commit_pass_progress_down(tmp_path, capsys):
    """``hezk.compile(..., progress=True)`` plans with a bar, ``hezk.commit(..., progress=True)`` commits with
    one; the results are those without progress; a bad value is refused before any work."""
    import hezk
    from proofs import ModelError

    path, calibration, _ = _quantized(tmp_path)
    quiet = hezk.compile(path, calibration, params="TOY")
    capsys.readouterr()
    shown = hezk.compile(path, calibration, params="TOY", progress=True)
    assert "planning" in capsys.readouterr().err
    assert repr(shown.plan) == repr(quiet.plan)
    public = hezk.commit(path, calibration, hiding=False).commitment
    capsys.readouterr()
    assert hezk.commit(path, calibration, hiding=False, progress=True).commitment == public
    assert "committing" in capsys.readouterr().err
    with pytest.raises(ParameterError, match="progress="):
        hezk.compile(path, calibration, params="TOY", progress="yes")
    with pytest.raises(ModelError, match="progress="):
        hezk.commit(path, calibration, progress="yes")


def test_cli_plan_and_commit_show_progress_unless_turned_off(tmp_path, capsys):
    """``plan --progress`` draws the planning bar on stderr (``--no-progress``: none) and prints the same plan;
    ``commit`` draws the committing bar unless ``--quiet`` and writes the same public-weights commitment."""
    from proofs import cli as proofs_cli
    from tensor_ops import cli as tensor_cli

    _sequential().save(tmp_path / "m.npz")
    base = ["plan", "--model", str(tmp_path / "m.npz"), "--params", "TOY"]
    assert tensor_cli.main(base + ["--no-progress"]) == 0
    quiet = capsys.readouterr()
    assert tensor_cli.main(base + ["--progress"]) == 0
    shown = capsys.readouterr()
    assert "planning" in shown.err and "planning" not in quiet.err and shown.out == quiet.out
    from proofs.model import save_model
    from proofs.quantize import quantize_fixed_point

    rng = np.random.default_rng(0)
    save_model(tmp_path / "mlp.npz", quantize_fixed_point([rng.normal(0, 0.4, (5, 6)), rng.normal(0, 0.4, (3, 5))],
                                                          [np.zeros(5), np.zeros(3)], frac_bits=6))
    for model in (_quantized(tmp_path)[0], str(tmp_path / "mlp.npz")):  # the graph and the MLP commit
        commit = ["commit", "--model", model, "--public-weights", "--out"]
        assert proofs_cli.main(commit + [str(tmp_path / "quiet.bin"), "--quiet"]) == 0
        assert "committing" not in capsys.readouterr().err
        assert proofs_cli.main(commit + [str(tmp_path / "shown.bin")]) == 0
        assert "committing" in capsys.readouterr().err
        assert (tmp_path / "quiet.bin").read_bytes() == (tmp_path / "shown.bin").read_bytes()


# -- evaluation, prove and verify through the API, the batch paths (issue 35 item 7) --------------------------
def test_cipher_tensor_evaluation_accepts_progress_true(capsys):
    """``Sequential`` on a CipherTensor (``forward_tensor``) reports each stage; evaluation is deterministic:
    the same decrypted output, bit for bit, as without progress."""
    from tensor_ops import encrypt
    from tensor_ops.model_plan import choose_parameters

    model = _sequential()
    params = choose_parameters(model.depth())
    ctx = CKKSContext.keygen(params, rotations=model.tensor_rotations(params=params), seed=1)
    ct = encrypt(ctx, np.random.default_rng(0).uniform(-1, 1, 6))
    quiet = model(ct).decrypt(ctx)
    capsys.readouterr()
    shown = model(ct, progress=True).decrypt(ctx)
    assert "evaluate" in capsys.readouterr().err
    assert np.array_equal(shown, quiet)
    calls = []
    model.forward_tensor(ct, progress=lambda *a: calls.append(a))
    assert calls and calls[-1][0] == calls[-1][1] == len(model.stages())
    with pytest.raises(ParameterError, match="progress="):
        model(ct, progress="yes")


def test_compiled_infer_accepts_progress_true(tmp_path, capsys):
    """``hezk.compile(...).infer(x, progress=True)`` draws the key generation (first call) and evaluation bars;
    the output is the one without progress up to CKKS noise (fresh encryption randomness per call)."""
    import hezk

    path, calibration, _ = _quantized(tmp_path)
    model = hezk.compile(path, calibration, params="TOY")
    capsys.readouterr()
    shown = model.infer(calibration[:2], progress=True)
    err = capsys.readouterr().err
    assert "evaluate" in err and "keys" in err
    quiet = model.infer(calibration[:2])
    assert "evaluate" not in capsys.readouterr().err
    np.testing.assert_allclose(shown.output, quiet.output, atol=1e-3)
    with pytest.raises(ParameterError, match="progress="):
        model.infer(calibration[:1], progress="yes")


@pytest.mark.parametrize("hiding, relu", [(False, False), (True, False), (True, True)],
                         ids=["public-graph", "hiding-graph", "hiding-mlp"])
def test_api_prove_and_verify_accept_progress_true(tmp_path, capsys, hiding, relu):
    """``Prover.prove``, ``hezk.prove`` (one proof and a batch, the Dask path's in-process runner) and
    ``hezk.verify`` (one proof and a batch) take progress, for the graph proof and the MLP proof (a ReLU MLP): a
    bar on stderr, the same proofs (public weights: bytes for bytes) and the same verified outputs."""
    import hezk
    from proofs import ModelError

    path, calibration, _ = _quantized(tmp_path)
    if relu:
        rng = np.random.default_rng(4)
        path = str(tmp_path / "relu.npz")
        np.savez(path, w0=0.3 * rng.normal(size=(4, 6)), b0=np.zeros(4), w1=0.3 * rng.normal(size=(2, 4)),
                 b1=np.zeros(2), activation="relu")
    prover = hezk.commit(path, calibration, hiding=hiding, max_proofs=6)
    assert prover.strategy == ("mlp" if relu else "graph")
    x, xs = calibration[:1], calibration[:2]
    quiet = prover.prove(x)
    capsys.readouterr()
    shown = hezk.prove(prover, x, progress=True)
    assert "proving" in capsys.readouterr().err
    if not hiding:
        assert shown == quiet
    verdict = hezk.verify(prover.commitment, x, shown, progress=True)
    assert verdict and "verifying" in capsys.readouterr().err
    assert np.array_equal(verdict.output, hezk.verify(prover.commitment, x, quiet).output)
    batch = hezk.prove(prover, xs, per_proof=1, progress=True)
    assert "proving" in capsys.readouterr().err
    batch_verdict = hezk.verify(prover.commitment, xs, batch, per_proof=1, progress=True)
    assert batch_verdict and "verifying" in capsys.readouterr().err
    assert np.array_equal(batch_verdict.output, hezk.verify(prover.commitment, xs, batch, per_proof=1).output)
    if not hiding:
        assert batch == hezk.prove(prover, xs, per_proof=1)
    for call in (lambda: prover.prove(x, progress="yes"), lambda: hezk.verify(prover.commitment, x, quiet,
                                                                                progress="yes")):
        with pytest.raises(ModelError, match="progress="):
            call()


def test_plain_graph_prove_accepts_progress_true(tmp_path, capsys):
    """``GraphNetwork.prove`` (public weights): the same proof bytes with and without progress."""
    from proofs.layers.graph import GraphNetwork

    _, calibration, q = _quantized(tmp_path)
    network = GraphNetwork(q)
    quiet = network.prove(calibration[:1]).to_bytes()
    capsys.readouterr()
    assert network.prove(calibration[:1], progress=True).to_bytes() == quiet
    assert "proving" in capsys.readouterr().err


def test_batch_evaluation_accepts_progress_true(capsys):
    """The Dask batch path of encrypted inference (``evaluate_batches``, here in process) draws one bar over its
    tasks; the replies are the bytes of the run without progress."""
    from tensor_ops.distributed import batch_requests, evaluate_batches
    from tensor_ops.inference import Client

    model = _sequential()
    client = Client("TOY", model=model, seed=11)
    requests = batch_requests(client, np.random.default_rng(1).uniform(-1, 1, (3, 6)), batch=2)
    quiet = evaluate_batches(model, client.public_context(), requests)
    capsys.readouterr()
    shown = evaluate_batches(model, client.public_context(), requests, progress=True)
    assert "encrypted inference" in capsys.readouterr().err
    assert shown == quiet
