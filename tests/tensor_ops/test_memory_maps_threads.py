"""The memory estimate after the server drops the planner's copy of the maps, and with the kernel thread count.

A planned model's layers memoise their sparse maps (planning packs each layer once per lowering); a server drops
them once its packed stages are built (``packing.release_sparse_maps``), so the model's maps are held once, twice
only while the stages are built. Each kernel thread beyond the first keeps its own key-switching scratch and its
share of a stage's temporaries in its own malloc arena: the estimate counts them per thread (``threads``)."""
import os
import subprocess
import sys

import numpy as np
import pytest

from crypto.errors import ParameterError
from hezk.threads import get_threads
from tensor_ops.model_plan import model_map_bytes, switching_scratch_bytes
from tensor_ops.nn import Residual, Sequential
from tensor_ops.packing import SPARSE_MEMO, release_sparse_maps
from tests.tensor_ops.test_memory_plan import conv_model


def memoised(layers) -> int:
    return sum(len(vars(layer).get(SPARSE_MEMO, {})) + memoised(getattr(layer, "layers", ()))
               + memoised(getattr(layer, "shortcut", ())) for layer in layers)


@pytest.mark.slow
def test_a_server_drops_the_layers_maps_and_keeps_no_reference_to_the_context_bytes():
    """(2-4 s: a TOY keygen) What the server's "loading" part rests on: once built, it holds neither the layers'
    maps nor the bytes."""
    from tensor_ops.inference import Client, Server

    model = conv_model()
    plan = model.plan(params="TOY")
    blob = Client(plan=plan, seed=0, allow_insecure=True).public_context()
    assert memoised(model.layers) == 1                   # the conv's map, memoised by the planner
    before = sys.getrefcount(blob)
    server = Server(model, blob)
    assert memoised(model.layers) == 0
    assert sys.getrefcount(blob) == before and server.plan is plan


@pytest.mark.slow
def test_a_server_without_the_layers_maps_computes_the_same():
    """(3.5 s) The encrypted result equals the plain reference; a memoised plan packs nothing again."""
    from tensor_ops.inference import Client, Server

    model = conv_model()
    plan = model.plan(params="TOY")
    assert memoised(model.layers) == 1                   # the conv's map, memoised by the planner
    client = Client(plan=plan, seed=0, allow_insecure=True)
    x = np.random.default_rng(3).uniform(-1, 1, (2, 2, 8, 8))
    reference = model.forward(x)                         # the plain reference compiles the maps too
    server = Server(model, client.public_context())
    assert memoised(model.layers) == 0
    y = client.decrypt(server.evaluate(client.encrypt(x)))
    np.testing.assert_allclose(y, reference, atol=1e-2)
    assert model.plan(params="TOY") is plan and memoised(model.layers) == 0    # a memoised plan packs nothing


def test_release_walks_residual_branches_and_shortcuts():
    from tensor_ops.nn import Conv2d, Square

    rng = np.random.default_rng(0)
    conv = lambda: Conv2d(rng.normal(size=(2, 2, 3, 3)), np.zeros(2), padding=1)  # noqa: E731
    block = Residual((conv(), Square(), conv()), (conv(),))
    model = Sequential([conv(), block], input_shape=(2, 4, 4))
    for layer in (model.layers[0], *block.layers, *block.shortcut):
        if layer.kind == "conv2d":
            layer.sparse((2, 4, 4))
    assert memoised(model.layers) == 4
    assert release_sparse_maps(model.layers) == 4 and memoised(model.layers) == 0
    assert release_sparse_maps(model.layers) == 0


def test_the_maps_count_once_and_twice_only_while_the_server_loads():
    plan = conv_model().plan(params="N14")
    maps = model_map_bytes(plan.stages)
    one = plan.memory_estimate(threads=1)
    assert one.server["model maps"] == one.local["model maps"] == one.client["model maps"] == maps
    evaluation = one.server["key-switching scratch"] + one.server["working ciphertexts"] \
        + one.server["bootstrap constants"]
    assert one.local["loading"] == max(0, maps - evaluation)         # the second copy while stages are built


def test_each_thread_beyond_the_first_adds_its_scratch_and_a_stages_working_set():
    plan = conv_model().plan(params="N14")
    one, two, four = (plan.memory_estimate(threads=t) for t in (1, 2, 4))
    scratch = switching_scratch_bytes(plan.params, plan.input_level)
    messages = plan.memory_estimate(threads=1, ciphertexts=1).server["working ciphertexts"]
    per_thread = two.local_peak - one.local_peak
    assert one.server["more threads"] == 0 and two.server["more threads"] == per_thread
    assert scratch < per_thread < scratch + messages                 # the working set less the request's messages
    assert four.local_peak - one.local_peak == 3 * per_thread
    assert plan.memory_estimate().local_peak == plan.memory_estimate(threads=get_threads()).local_peak
    assert two.client_peak == one.client_peak                        # keygen does not key-switch
    for bad in (0, -1, 1.5, True, "2"):
        with pytest.raises(ParameterError, match="threads="):
            plan.memory_estimate(threads=bad)


_MEASURE = """
import sys
from tensor_ops import cli
code = cli.main(sys.argv[1:])
with open("/proc/self/status") as status:
    print(next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmHWM:")))
sys.exit(code)
"""


@pytest.mark.slow
def test_estimate_at_two_threads_is_within_a_quarter_of_the_measured_peak(tmp_path):
    """A 4-channel CNN's local infer at HEZK_THREADS=2 (4 s; measured 657-688 MB against 628 MB estimated, 646 MB
    at one thread against 592 MB)."""
    model = conv_model()
    model.save(tmp_path / "cnn.npz")
    np.save(tmp_path / "x.npy", np.random.default_rng(1).uniform(-1, 1, (4, 2, 8, 8)))
    run = subprocess.run([sys.executable, "-c", _MEASURE, "infer", "--model", tmp_path / "cnn.npz", "--params", "N14",
                          "--input", tmp_path / "x.npy", "--out", tmp_path / "y.npy"],
                         capture_output=True, text=True, check=True, env={**os.environ, "HEZK_THREADS": "2"})
    measured = int(run.stdout.strip().splitlines()[-1])
    estimated = model.plan(params="N14").memory_estimate(1, threads=2).local_peak
    assert 0.75 <= estimated / measured <= 1.25, (estimated, measured)


def test_the_server_peaks_either_while_loading_or_while_evaluating_not_both():
    plan = conv_model().plan(params="N14")
    estimate = plan.memory_estimate(threads=1)
    server = estimate.server
    evaluation = sum(server[part] for part in ("key-switching scratch", "more threads", "working ciphertexts",
                                               "bootstrap constants", "encoded weights"))
    serialized = estimate.client["serialized keys"] // 2           # keygen writes it and holds its own
    fixed = server["baseline"] + server["NTT tables"] + server["keys"] + server["model maps"]
    assert estimate.server_peak == fixed + max(serialized + server["model maps"], evaluation)
    assert server["loading"] > 0                                  # here the bytes outweigh the evaluation
