"""MaxPool, Clip (ReLU6, clamp, Min / Max with a constant) and grouped convolutions in the graph proofs, on models
exported by ``torch.onnx.export`` (the default exporter, ``dynamo=True``, and TorchScript's, ``dynamo=False``).

MaxPool and Clip are lowered by the quantizer to ops the proofs already prove, with public 0/+-1 kernels the
verifier derives from the structure (:func:`proofs.graph_quantize.selection_kernel`): max(a, b) = relu(a - b) +
relu(b) - relu(-b) level by level over the window (exact: a max of integers is one of them), and
clip(x, lo, hi) = lo + relu(x - lo) - relu(x - hi) at the input's scale. So the proven output is the integer
reference ``forward_int`` exactly, within the commitment's stated error of onnxruntime; a prover that takes the
smaller value, or a structure whose selection kernels differ from the derived ones, is rejected.
"""
import dataclasses
import io
import json

import numpy as np
import onnxruntime
import pytest
import torch
from hypothesis import given, settings, strategies as st

import hezk.cli
import hezk.model
from proofs.errors import ModelError, ProofRejected
from proofs.graph_quantize import QuantizedGraph, max_split, quantize_graph, selection_kernel, validate_structure
from proofs.layers.graph import GraphNetwork, verify_graph
from proofs.layers.graph_zk import HidingGraphNetwork, verify_graph_zk

from .cheating import dirty_graph_proof
from .rejection_helpers import only_rejected


class _Clamps(torch.nn.Module):
    """torch.clamp on both sides and on one side (Clip with an empty min), then their sum."""

    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(4, 6), torch.nn.Linear(6, 2)

    def forward(self, x):
        h = self.a(x)
        return self.b(torch.clamp(h, min=-0.3, max=0.5) + torch.clamp(h, max=0.25))


class _PaddedPools(torch.nn.Module):
    """A ResNet stem's MaxPool (3, stride 2, padding 1) then one with ceil_mode, over mostly negative values (so a
    window that read its padding as 0 would be wrong)."""

    def __init__(self):
        super().__init__()
        self.conv, self.head = torch.nn.Conv2d(1, 2, 3), torch.nn.Linear(2 * 2 * 2, 3)
        self.stem = torch.nn.MaxPool2d(3, stride=2, padding=1)
        self.ceil = torch.nn.MaxPool2d(2, ceil_mode=True)

    def forward(self, x):
        return self.head(torch.flatten(self.ceil(self.stem(self.conv(x) - 1.0)), 1))


class _OnTheEnds(torch.nn.Module):
    """A MaxPool of the (public) input and a padded MaxPool as the output (a free reshape of the last max level:
    the verifier returns the output's shape); ``clip``: the same with clamps."""

    def __init__(self, clip: bool):
        super().__init__()
        self.clip = clip
        self.inner = torch.nn.Linear(4, 3) if clip else torch.nn.Conv2d(1, 2, 3, padding=1)

    def forward(self, x):
        if self.clip:
            return torch.clamp(self.inner(torch.clamp(x, -0.5, 0.5)), max=0.1)
        pool = torch.nn.functional.max_pool2d
        return pool(self.inner(pool(x, 2)), 2, padding=1)


class _Depthwise(torch.nn.Module):
    """A MobileNetV2 inverted residual: 1x1 expand, ReLU6, 3x3 depthwise, ReLU6, 1x1 project, + x."""

    def __init__(self):
        super().__init__()
        self.expand, self.project = torch.nn.Conv2d(2, 4, 1), torch.nn.Conv2d(4, 2, 1)
        self.depthwise = torch.nn.Conv2d(4, 4, 3, padding=1, groups=4)
        self.head = torch.nn.Linear(2 * 4 * 4, 3)

    def forward(self, x):
        h = torch.nn.functional.relu6(self.depthwise(torch.nn.functional.relu6(self.expand(x))))
        return self.head(torch.flatten(self.project(h) + x, 1))


def _models():
    """name -> (module, sample shape); tiny, seeded."""
    torch.manual_seed(0)
    nn = torch.nn
    return {
        "maxpool2d": (nn.Sequential(nn.Conv2d(1, 2, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(18, 3)),
                      (1, 8, 8)),
        # 3 x 3 windows, stride 2, over values of both signs: levels of 9 -> 5 -> 3 -> 2 -> 1 candidates
        "maxpool3x3": (nn.Sequential(nn.Conv2d(1, 2, 3), nn.MaxPool2d(3, stride=2), nn.Flatten(), nn.Linear(8, 3)),
                       (1, 7, 7)),
        "maxpool_padded": (_PaddedPools(), (1, 8, 8)),
        "maxpool_ends": (_OnTheEnds(clip=False), (1, 8, 8)),
        "clip_ends": (_OnTheEnds(clip=True), (4,)),
        "maxpool1d": (nn.Sequential(nn.Conv1d(1, 2, 3), nn.ReLU(), nn.MaxPool1d(2), nn.Flatten(), nn.Linear(6, 3)),
                      (1, 8)),
        "relu6": (nn.Sequential(nn.Linear(4, 6), nn.ReLU6(), nn.Linear(6, 3)), (4,)),
        "clamp": (_Clamps(), (4,)),
        "depthwise": (_Depthwise(), (2, 4, 4)),
    }


_EXPORTED = {}


def exported(name: str, dynamo: bool):
    """(ONNX bytes, hezk graph, calibration inputs) of model ``name`` exported with ``dynamo`` (cached)."""
    if (name, dynamo) not in _EXPORTED:
        module, shape = _models()[name]
        module.eval()
        buffer = io.BytesIO()
        torch.onnx.export(module, (torch.zeros(1, *shape),), buffer, dynamo=dynamo)
        data = buffer.getvalue()
        scale = 12.0 if name in ("relu6", "clamp") else 1.0  # inputs that reach both clip bounds
        calibration = np.random.default_rng(1).uniform(-scale, scale, (16, *shape))
        _EXPORTED[name, dynamo] = data, hezk.model.read_onnx(data), calibration
    return _EXPORTED[name, dynamo]


def onnxruntime_outputs(data: bytes, x) -> np.ndarray:
    session = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"])
    feed = session.get_inputs()[0].name
    return np.concatenate([session.run(None, {feed: row[None].astype(np.float32)})[0] for row in x])


def prove_and_verify(q: QuantizedGraph, x, zk: bool) -> np.ndarray:
    """The verified output of an honest proof of ``x`` under a fresh commitment (hiding when ``zk``)."""
    if zk:
        net = HidingGraphNetwork(q, max_proofs=1)
        return verify_graph_zk(net.commitment, x, net.prove(x)).output
    net = GraphNetwork(q)
    return verify_graph(net.commitment, x, net.prove(x)).output


CASES = [("maxpool2d", True), ("maxpool2d", False), ("maxpool3x3", False), ("maxpool_padded", False), ("maxpool_ends", False),
         ("clip_ends", False), ("maxpool1d", True),
         ("maxpool1d", False), ("relu6", False), ("clamp", True), ("depthwise", False)]


@pytest.mark.parametrize("zk", [False, True], ids=["plain", "hiding"])
@pytest.mark.parametrize("name, dynamo", CASES, ids=[f"{n}-{'dynamo' if d else 'torchscript'}" for n, d in CASES])
def test_exported_models_prove_the_integer_reference(name, dynamo, zk):
    """The proven output is forward_int exactly, and within the stated error (the calibration's max error) of
    onnxruntime on the same inputs."""
    data, graph, calibration = exported(name, dynamo)
    q = quantize_graph(graph, calibration)
    x = calibration[:2]
    y = prove_and_verify(q, x, zk)
    assert np.array_equal(y, q.forward_int(q.quantize_input(x)))
    stated = q.error_report(graph, calibration)["max_error"]
    reference = onnxruntime_outputs(data, x)
    assert np.abs(q.dequantize(y).reshape(reference.shape) - reference).max() <= stated + 1e-5
    assert np.abs(graph.forward(x).reshape(reference.shape) - reference).max() <= 1e-5


def test_lowered_ops_are_exact_and_public():
    """MaxPool and Clip become contractions with public kernels at weight_frac 0 and shift 0 (no rounding: the
    pooled and clipped integers equal numpy's max and clip of the input's integers)."""
    for name, levels in (("maxpool3x3", [4]), ("maxpool_padded", [4, 2])):  # 3 x 3: 9 -> 5 -> 3 -> 2 -> 1
        _, graph, calibration = exported(name, False)
        q = quantize_graph(graph, calibration)
        lowered = [op for op in q.ops if op.constant in ("max_split", "max_join")]
        assert len(lowered) == sum(n + 1 for n in levels)  # a split per level, one join per pool
        assert all(op.shift == 0 and op.weight_frac == 0 and not op.has_bias for op in lowered)
        values = q.forward_int(q.quantize_input(calibration), trace=True)[0]
        for pool in (node for node in graph.nodes if node.kind == "maxpool"):
            source = next(op.inputs[0] for op in q.ops if op.constant == "max_split" and op.patches == pool.patches)
            expected = pool.patches.apply(values[source].astype(np.float64), fill=-np.inf).max(axis=(3, 4))[:, 0]
            assert np.array_equal(values[pool.output], expected.astype(np.int64))

    _, graph, calibration = exported("relu6", False)
    q = quantize_graph(graph, calibration)
    values = q.forward_int(q.quantize_input(calibration), trace=True)[0]
    clip = next(node for node in graph.nodes if node.kind == "activation" and node.function == "clip")
    split = next(op for op in q.ops if op.constant == "clip_split")
    six = 6 * 2 ** q.fracs[split.inputs[0]]
    assert np.array_equal(values[clip.output], np.clip(values[split.inputs[0]], 0, six))
    assert values[clip.output].max() == six and values[clip.output].min() == 0  # both bounds reached


@given(st.lists(st.integers(-2 ** 20, 2 ** 20), min_size=1, max_size=12))
def test_max_tree_levels_give_the_maximum(values):
    """Levels of split (public kernel, then relu) and join (1, 1, -1) reduce n candidates to their maximum."""
    t = np.array(values, dtype=np.int64)
    while True:  # at least one level, as the lowering (a 1 x 1 window passes through one)
        t = np.einsum("tl,t->l", np.maximum(np.einsum("k,ktl->tl", t, max_split(len(t))), 0), [1, 1, -1])
        if len(t) == 1:
            break
    assert t[0] == max(values)


def _with_kernel(q: QuantizedGraph, kind: str, change) -> QuantizedGraph:
    """A prover's copy of ``q`` whose first op of public kernel ``kind`` holds change(kernel)."""
    index = next(i for i, op in enumerate(q.ops) if op.constant == kind)
    op = q.ops[index]
    ops = q.ops[:index] + (dataclasses.replace(op, weight=change(op.weight.copy())),) + q.ops[index + 1:]
    return dataclasses.replace(q, ops=ops)


def _min_pool(q: QuantizedGraph) -> QuantizedGraph:
    """Every max level turned into a min: split (b - a, b, -b), join (-1, 1, -1): b - relu(b - a) = min(a, b)
    (component 0 negated on each split's output and on a folded join's input)."""
    flip = np.array([-1, 1, 1])
    ops = []
    for op in q.ops:
        if op.constant == "max_split":
            weight = op.weight * flip[:, None]
            op = dataclasses.replace(op, weight=weight if op.patches else weight * flip[:, None, None, None])
        elif op.constant == "max_join":
            op = dataclasses.replace(op, weight=op.weight * flip)
        ops.append(op)
    return dataclasses.replace(q, ops=tuple(ops))


@pytest.mark.parametrize("zk", [False, True], ids=["plain", "hiding"])
def test_a_prover_taking_the_smaller_value_is_rejected(zk):
    """The honest prover code run on a min-pool witness (its outputs and bits consistent with the smaller value)
    under the max-pool commitment: rejected, the verifier using the kernels it derives; the positive control
    (the honest max-pool) is accepted."""
    _, graph, calibration = exported("maxpool2d", False)
    q = quantize_graph(graph, calibration)
    x = calibration[:1]
    assert np.array_equal(prove_and_verify(q, x, zk), q.forward_int(q.quantize_input(x)))
    commitment, verify, proof = dirty_graph_proof(q, _min_pool(q), x, zk)
    only_rejected(lambda: verify(commitment, x, proof))


@pytest.mark.parametrize("zk", [False, True], ids=["plain", "hiding"])
def test_a_prover_misapplying_the_clip_bound_is_rejected(zk):
    """A clip's join kernel (1, -1) replaced by (1, -2) (the excess over the upper bound subtracted twice: a value
    below 6 claimed where x > 6, still within the declared range): rejected."""
    _, graph, calibration = exported("relu6", False)
    q = quantize_graph(graph, calibration)
    x = calibration[:8]

    def twice(kernel):
        kernel[1] = -2
        return kernel
    commitment, verify, proof = dirty_graph_proof(q, _with_kernel(q, "clip_join", twice), x, zk)
    only_rejected(lambda: verify(commitment, x, proof))


def _public_tampered(q: QuantizedGraph, kind: str, **changes) -> dict:
    header = q.public()
    entry = next(op for op in header["ops"] if op["constant"] == kind)
    entry.update(changes)
    return header


@pytest.mark.parametrize("kind, changes", [
    ("max_split", {"weight_shape": [2, 2, 3, 1]}),  # a kernel of another size
    ("max_split", {"weight_frac": 1}),  # a kernel scaled by 2
    ("max_split", {"equation": "bgcuvij,uvtl->bgctlij".replace("uvtl", "vutl")}),
    ("max_split", {"patches": {"kernel": [2, 2], "stride": [2, 2], "pads": [1, 1, 0, 0], "dilation": [1, 1],
                               "groups": 1}}),  # a padded window read as unpadded: zeros as candidates
    ("max_join", {"constant": "clip_join"}),
    ("clip_split", {"constant": "max_split"}),
])
def test_tampered_selection_kernels_are_refused_by_validate_structure(kind, changes):
    """A structure declaring a selection other than the one its fields derive is refused naming the op, before
    any proof is read; so is a prover's copy whose kernel differs from the derived one. Positive control: the
    honest structure round-trips."""
    name = "relu6" if kind.startswith("clip") else "maxpool2d"
    _, graph, calibration = exported(name, False)
    q = quantize_graph(graph, calibration)
    QuantizedGraph.from_public(json.loads(q.public_text()))
    with pytest.raises(ProofRejected, match="op "):
        QuantizedGraph.from_public(_public_tampered(q, kind, **changes))
    with pytest.raises(ProofRejected, match="kernel differs"):
        validate_structure(_with_kernel(q, kind, lambda kernel: -kernel))


def test_selection_kernels_are_derived_from_the_structure_only():
    """selection_kernel refuses an equation, window or shape that does not fit its kind (ModelError)."""
    from hezk.model import Patches
    window = Patches((2, 2), (2, 2))
    assert selection_kernel("max_split", "bgcuvij,uvtl->bgctlij", window, (1, 4, 4)).shape == (2, 2, 3, 2)
    for args in (("max_split", "bgcuvij,uvtl->bgctlij", Patches((2, 2), (2, 2), (1, 0, 0, 0)), (1, 4, 4)),
                 ("max_split", "bctkij,tksl->bcslij", None, (1, 3, 1, 2, 2)),
                 ("max_join", "bctlij,t->bclij", None, (1, 2, 1, 2, 2)),
                 ("clip_split", "bp,kp->bkp", None, (3, 3)),
                 ("clip_join", "bkp,k->bp", None, (3, 4))):
        with pytest.raises(ModelError):
            selection_kernel(*args)


def test_grouped_convolution_needs_power_of_two_outputs_per_group_with_hidden_weights():
    """Hidden weights: a grouped convolution with 3 output channels per group is refused naming the op and the
    reason (its einsum output's layout differs from its output's); the plain proof proves it."""
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Conv2d(4, 6, 3, groups=2), torch.nn.Flatten(), torch.nn.Linear(24, 2))
    buffer = io.BytesIO()
    torch.onnx.export(module, (torch.zeros(1, 4, 4, 4),), buffer, dynamo=False)
    calibration = np.random.default_rng(0).uniform(-1, 1, (8, 4, 4, 4))
    q = quantize_graph(hezk.model.read_onnx(buffer.getvalue()), calibration)
    with pytest.raises(ModelError, match="output channels per group must be 1 or a power of two"):
        HidingGraphNetwork(q, max_proofs=1)
    assert np.array_equal(prove_and_verify(q, calibration[:1], False), q.forward_int(q.quantize_input(calibration[:1])))


def test_command_line_commit_prove_verify(tmp_path, capsys):
    """hezk commit | prove | verify on an exported MaxPool + ReLU6 CNN (hiding, the default)."""
    torch.manual_seed(0)
    nn = torch.nn
    module = nn.Sequential(nn.Conv2d(1, 2, 3), nn.ReLU6(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(18, 3)).eval()
    torch.onnx.export(module, (torch.zeros(1, 1, 8, 8),), str(tmp_path / "m.onnx"), dynamo=False)
    rng = np.random.default_rng(0)
    np.save(tmp_path / "cal.npy", rng.uniform(-1, 1, (16, 1, 8, 8)))
    np.save(tmp_path / "x.npy", rng.uniform(-1, 1, (1, 1, 8, 8)))
    c, p, x = (str(tmp_path / name) for name in ("c.bin", "p.bin", "x.npy"))
    model = str(tmp_path / "m.onnx")
    assert hezk.cli.main(["commit", "-m", model, "-o", c, "--calibration", str(tmp_path / "cal.npy"),
                          "--max-proofs", "2", "--quiet"]) == 0
    assert hezk.cli.main(["prove", "-m", model, "-c", c, "-i", x, "-o", p]) == 0
    capsys.readouterr()
    assert hezk.cli.main(["verify", "-c", c, "-i", x, "--proof", p]) == 0
    assert "accept" in capsys.readouterr().out.lower()


@pytest.mark.parametrize("scheme", ["ligero", pytest.param("basefold", marks=pytest.mark.slow)])  # basefold: ~17 s
def test_one_liners_prove_a_grouped_relu6_maxpool_cnn(scheme):
    """hezk.commit / prove / verify (hidden weights, either commitment scheme) on the ONNX export of a torch module
    with a grouped convolution, ReLU6 and MaxPool: the verified output is the integer reference's."""
    import hezk.api
    torch.manual_seed(0)
    nn = torch.nn
    module = nn.Sequential(nn.Conv2d(2, 4, 3, padding=1, groups=2), nn.ReLU6(), nn.MaxPool2d(2), nn.Flatten(),
                           nn.Linear(4 * 4 * 4, 3)).eval()
    x = np.random.default_rng(0).uniform(-1, 1, (8, 2, 8, 8)).astype(np.float32)
    buffer = io.BytesIO()
    torch.onnx.export(module, (torch.zeros(1, 2, 8, 8),), buffer, dynamo=False)
    prover = hezk.api.commit(buffer.getvalue(), x, max_proofs=1, scheme=scheme)
    verified = hezk.api.verify(prover.commitment, x[:1], hezk.api.prove(prover, x[:1]))
    assert verified.zero_knowledge
    assert np.array_equal(verified.output_int, prover.quantized.forward_int(prover.quantized.quantize_input(x[:1])))


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 3), st.integers(1, 3), st.integers(1, 2), st.integers(1, 2), st.integers(1, 2),
       st.lists(st.integers(0, 2), min_size=4, max_size=4), st.integers(0, 2 ** 32 - 1))
def test_lowered_maxpool_equals_the_window_maximum(kh, kw, sh, sw, dilation, pads, seed):
    """For any window (kernel, stride, padding smaller than the kernel, dilation), the lowered ops' integers equal
    the maximum over each window's real entries (padding as -inf), and the structure validates."""
    from hezk.model import Graph, MaxPool, ModelFileError, Patches
    pads = [min(p, k - 1) for p, k in zip(pads, (kh, kw, kh, kw))]
    try:
        pool = MaxPool("pool", "MaxPool", ("x",), "y", Patches((kh, kw), (sh, sw), pads, (dilation, dilation)))
        graph = Graph("x", (2, 5, 6), (pool,), "y")
    except ModelFileError:  # a window that does not fit the image
        return
    x = np.random.default_rng(seed).normal(size=(3, 2, 5, 6))
    q = quantize_graph(graph, x)
    x_int = q.quantize_input(x)
    expected = pool.patches.apply(x_int.astype(np.float64), fill=-np.inf).max(axis=(3, 4))[:, 0]
    assert np.array_equal(q.forward_int(x_int), expected.astype(np.int64))
