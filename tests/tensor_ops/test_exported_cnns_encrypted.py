"""CNNs as users export them run encrypted within their memory plan: a MaxPool CNN (each max a residual
join b + relu(a - b), Lee et al. 2021) and a MobileNetV2 inverted-residual block (1x1 expand, 3x3 depthwise,
ReLU6, 1x1 project, residual; Sandler et al. 2018) agree with onnxruntime; a convolution's sparse map is
built from its kernel (grouped, strided, dilated, padded) and equals the probing of its forward; a plan over
--memory-budget is refused naming the figure. The rings of the encrypted tests are INSECURE test rings
(N = 2^11) chosen for speed: the same plans at 128-bit parameters only cost more time."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import hezk.model as hm
from tensor_ops import cli
from tensor_ops.inference import Client, EncodedCache, Server
from tensor_ops.nn import from_graph
from tensor_ops.packing import node_sparse, probe_sparse
from tests.model.exported_models import onnxruntime_outputs, torch_export

#: an insecure N = 2^11 ring deep enough for a 2x2 MaxPool (two halvings of 10 levels) after a conv and a relu
DEEP_RING = dict(log_n=11, log_q=[[30, 30]] + [[25, 26]] * 28, log_p=[30] * 8, log_scale=50, dnum=8, insecure=True)
SHALLOW_RING = dict(log_n=11, log_q=[[30, 30]] + [[25, 26]] * 14, log_p=[30] * 5, log_scale=50, dnum=5,
                    insecure=True)


def _torch():
    return pytest.importorskip("torch")


def maxpool_cnn():
    nn = _torch().nn
    _torch().manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 2, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(2 * 2 * 2, 3)), \
        (1, 6, 6)


def depthwise_block():
    torch = _torch()
    nn = torch.nn
    torch.manual_seed(1)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Sequential(nn.Conv2d(2, 4, 1, bias=False), nn.BatchNorm2d(4), nn.ReLU6(),
                                      nn.Conv2d(4, 4, 3, padding=1, groups=4, bias=False), nn.BatchNorm2d(4),
                                      nn.ReLU6(), nn.Conv2d(4, 2, 1, bias=False), nn.BatchNorm2d(2))

        def forward(self, x):
            return x + self.body(x)

    return nn.Sequential(Block(), nn.Flatten(), nn.Linear(2 * 4 * 4, 3)), (2, 4, 4)


def encrypted_against_onnxruntime(module, shape, params, degree=None, samples=3, cache=None):
    """(decrypted, onnxruntime's, the model's plain reference) for ``samples`` inputs of the exported module."""
    proto = torch_export(module, shape)
    rng = np.random.default_rng(0)
    model = from_graph(hm.read_onnx(proto), degree=degree, calibration=rng.normal(size=(64, *shape)))
    x = np.clip(rng.normal(size=(samples, *shape)), -2, 2).astype(np.float32)
    client = Client(plan=model.plan(params=params), seed=0, allow_insecure=True)
    server = Server(model, client.server_context(), encoded=cache)
    return client.decrypt(server.evaluate(client.encrypt(x))), onnxruntime_outputs(proto, x)[0], model.forward(x)


@pytest.mark.slow
def test_maxpool_cnn_at_degree_3_runs_encrypted_and_agrees_with_onnxruntime():
    """relu of degree 3 (2 levels) before a 2x2 MaxPool (two residual joins): the joins' scales land on the
    branch's (the bug was a scale overflow there); argmax equal, error within the fits' stated error."""
    module, shape = maxpool_cnn()
    y, want, plain = encrypted_against_onnxruntime(module, shape, DEEP_RING, degree=3)
    np.testing.assert_allclose(y, plain, atol=1e-3 * max(1.0, np.abs(plain).max()))    # CKKS noise only
    assert np.array_equal(y.argmax(axis=1), want.argmax(axis=1))
    assert np.abs(y - want).max() <= 0.2 * max(1.0, np.abs(want).max())


def test_depthwise_inverted_residual_block_runs_encrypted_and_agrees_with_onnxruntime():
    """A grouped (depthwise) conv between ReLU6s and a residual add; weights encoded where used and not kept
    (a one-byte cache), the same result as a server that keeps them."""
    module, shape = depthwise_block()
    y, want, plain = encrypted_against_onnxruntime(module, shape, SHALLOW_RING, cache=EncodedCache(1))
    np.testing.assert_allclose(y, plain, atol=1e-3 * max(1.0, np.abs(plain).max()))
    assert np.array_equal(y.argmax(axis=1), want.argmax(axis=1))
    assert np.abs(y - want).max() <= 0.1 * max(1.0, np.abs(want).max())


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 3), st.integers(1, 3), st.integers(1, 3), st.integers(1, 3), st.integers(1, 2),
       st.integers(1, 2), st.tuples(*[st.integers(0, 2)] * 4), st.integers(0, 3), st.integers(0, 3),
       st.booleans(), st.integers(0, 2**31))
def test_conv_map_built_from_the_kernel_equals_the_probed_one(groups, c_per, o_per, kh, stride, dilation, pads,
                                                              extra_h, extra_w, bias, seed):
    """node_sparse (nonzeros from the kernel, composed with the window gather) equals probe_sparse (basis
    vectors through the forward), the naive twin, for grouped, strided, dilated, asymmetrically padded convs."""
    rng = np.random.default_rng(seed)
    kw = max(1, kh - 1)
    h, w = dilation * (kh - 1) + 1 + extra_h, dilation * (kw - 1) + 1 + extra_w
    patches = hm.Patches((kh, kw), (stride, stride), pads, (dilation, dilation), groups)
    shape = (groups * c_per, h, w)
    ho, wo = patches.output_hw(h, w)
    weight = rng.normal(size=(groups, o_per, c_per, kh, kw)) * (rng.random((groups, o_per, c_per, kh, kw)) < 0.8)
    node = hm.Contraction("conv", "Conv", ("x",), "y", "bgcuvij,gocuv->bgoij", weight,
                          rng.normal(size=(groups * o_per, 1, 1)) if bias else None, patches,
                          (groups * o_per, ho, wo))
    direct, offset = node_sparse(node, shape)
    probed, zero = probe_sparse(node.forward, shape, node.output_shape((shape,)))
    np.testing.assert_allclose(direct.toarray(), probed.toarray(), atol=1e-12)
    np.testing.assert_allclose(offset, zero, atol=1e-12)


@pytest.mark.parametrize("node", [
    hm.Contraction("pool", "AveragePool", ("x",), "y", "bgcuvij,uv->bgcij", np.full((2, 2), 0.25), None,
                   hm.Patches((2, 2), (2, 2), (1, 1, 0, 0)), (3, 2, 2)),
    hm.Affine("bn", "Mul", ("x",), "y", np.arange(3.0)[:, None, None], np.ones((1, 1, 4))),
    hm.Transpose("t", "Transpose", ("x",), "y", (2, 0, 1)),
    hm.Reshape("r", "Flatten", ("x",), "y", (48,)),
])
def test_other_affine_nodes_built_directly_equal_their_probing(node):
    shape = (3, 4, 4)
    direct, offset = node_sparse(node, shape)
    probed, zero = probe_sparse(node.forward, shape, node.output_shape((shape,)))
    np.testing.assert_array_equal(direct.toarray(), probed.toarray())
    np.testing.assert_array_equal(offset, zero)


def test_a_plan_over_the_memory_budget_is_refused_naming_the_figure(tmp_path, capsys):
    """Even at the fewest keys (powers of two) the plan needs more than 150 MB: refused before any key exists,
    naming the peak, the budget and what to change; a budget it fits plans (positive control)."""
    module, shape = depthwise_block()
    path = tmp_path / "m.onnx"
    path.write_bytes(torch_export(module, shape).SerializeToString())
    args = ["--model", str(path)]
    assert cli.main(["plan", *args, "--memory-budget", "150MB"]) == 2
    error = capsys.readouterr().err
    assert "at its peak, over --memory-budget=150000000 bytes (143 MiB)" in error and "refused before any work" in error
    assert "GiB" in error or "MiB" in error
    assert cli.main(["plan", *args, "--memory-budget", "64GiB"]) == 0


@pytest.mark.slow
def test_estimate_is_within_a_quarter_of_the_measured_peak_of_a_cnns_local_infer(tmp_path):
    """A small ReLU + AvgPool CNN at N14 (the case whose local infer peaked 26% above the estimate): the peak
    RSS (VmHWM) of a fresh interpreter running ``infer`` within 25% of ``memory_estimate(1).local_peak``."""
    import subprocess
    import sys

    from tensor_ops.nn import AvgPool2d, Conv2d, Flatten, Linear, Poly, Sequential
    from tests.tensor_ops.test_memory_plan import _MEASURE

    rng = np.random.default_rng(0)
    model = Sequential([Conv2d(rng.normal(size=(4, 1, 3, 3)) * 0.3), Poly("relu", 7), AvgPool2d(2), Flatten(),
                        Linear(rng.normal(size=(10, 144)) * 0.1)], input_shape=(1, 14, 14))
    model.save(tmp_path / "cnn.npz")
    np.save(tmp_path / "x.npy", rng.uniform(-1, 1, (2, 1, 14, 14)))
    run = subprocess.run([sys.executable, "-c", _MEASURE, "infer", "--model", tmp_path / "cnn.npz", "--params",
                          "N14", "--input", tmp_path / "x.npy", "--out", tmp_path / "y.npy"],
                         capture_output=True, text=True, check=True)
    measured = int(run.stdout.strip().splitlines()[-1])
    estimated = model.plan(params="N14").memory_estimate(1).local_peak
    assert 0.75 <= estimated / measured <= 1.25, (estimated, measured)


def test_two_maxpools_plan_with_fitted_relus_where_the_composite_sign_cannot_fit_between_bootstraps(tmp_path,
                                                                                                   capsys):
    """A CNN with two MaxPools needs bootstraps, and the composite sign's 10 levels exceed what one leaves: the
    plan was refused (StageTooDeep); the command line now gives each pairwise max a fitted ReLU polynomial
    (3 levels) and says so, and the plan states those activations' errors."""
    torch = pytest.importorskip("torch")
    import onnx

    from tensor_ops.nn import Sequential, StageTooDeep

    nn = torch.nn
    torch.manual_seed(0)
    module = nn.Sequential(nn.Conv2d(1, 2, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(2, 2, 3, padding=1),
                           nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(2 * 2 * 2, 3))
    onnx.save(torch_export(module, (1, 8, 8)), str(tmp_path / "m.onnx"))
    calibration = np.random.default_rng(0).normal(size=(16, 1, 8, 8))
    np.save(tmp_path / "cal.npy", calibration)
    with pytest.raises(StageTooDeep, match="replace a MaxPool"):
        Sequential.load(tmp_path / "m.onnx", calibration=calibration).plan()
    assert cli.main(["plan", "--model", str(tmp_path / "m.onnx"), "--calibration", str(tmp_path / "cal.npy")]) == 0
    out = capsys.readouterr().out
    assert "its relu is a fitted polynomial instead" in out and "relu of degree 7" in out
