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
