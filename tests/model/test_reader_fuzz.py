"""The ONNX reader on crafted graphs: every tensor is defined once and the nodes form no cycle (an Identity
``X -> X`` or a 2-cycle of Identities used to hang the reader forever), and declared dims are bounded before
anything is allocated. Whatever the wiring, the reader returns a Graph or raises ModelFileError, quickly."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager

import numpy as np
import pytest
from hypothesis import given, strategies as st
from onnx import TensorProto, helper, numpy_helper

from hezk.model import Graph, ModelFileError, read_onnx
from hezk.model.graph import MAX_ELEMENTS

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@contextmanager
def deadline(seconds: int):
    """Fail (instead of hanging the suite) if the block runs longer than ``seconds``."""
    def expired(*_):
        raise TimeoutError(f"the reader ran longer than {seconds} s")
    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def model(nodes, output="X", inputs=(("X", [1, 4]),), inits=()):
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
                              [helper.make_tensor_value_info(output, TensorProto.FLOAT, None)], list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def read(proto):
    with deadline(10):
        return read_onnx(proto.SerializeToString())


def identity(src, dst, name=""):
    return helper.make_node("Identity", [src], [dst], name=name)


def test_the_77_byte_identity_onto_its_own_input_is_refused_naming_the_node():
    proto = model([identity("X", "X", "loop")])
    assert len(proto.SerializeToString()) < 100
    with pytest.raises(ModelFileError, match=r"'loop'.*writes 'X', which is a graph input"):
        read(proto)


def test_a_two_cycle_of_identities_is_refused():
    with pytest.raises(ModelFileError, match="graph input"):  # the cycle closes on the input
        read(model([identity("X", "Y", "a"), identity("Y", "X", "b")]))
    with pytest.raises(ModelFileError, match=r"cycle through the nodes \['[pq]', '[pq]'\]"):  # between two nodes
        read(model([helper.make_node("Relu", ["X"], ["R"]), identity("B", "A", "p"), identity("A", "B", "q")],
                   output="R"))


def test_longer_cycles_self_loops_and_double_writes_are_refused_by_node():
    relu = helper.make_node("Relu", ["X"], ["R"], name="r")
    ring = [helper.make_node("Add", ["R", "C"], ["A"], name="n0"), identity("A", "B", "n1"),
            identity("B", "C", "n2")]
    with pytest.raises(ModelFileError, match=r"cycle through the nodes \['n\d', 'n\d', 'n\d'\]"):
        read(model([relu, *ring], output="C"))
    with pytest.raises(ModelFileError, match=r"'self'\) reads its own output"):
        read(model([relu, helper.make_node("Add", ["R", "S"], ["S"], name="self")], output="S"))
    with pytest.raises(ModelFileError, match=r"'second'\) writes 'R', which node 'r' already writes"):
        read(model([relu, helper.make_node("Relu", ["X"], ["R"], name="second")], output="R"))
    weight = numpy_helper.from_array(np.ones((4, 4), np.float32), "W")
    with pytest.raises(ModelFileError, match=r"'shadow'\) writes 'W', which is an initializer"):
        read(model([helper.make_node("Relu", ["X"], ["W"], name="shadow")], output="W", inits=[weight]))


def test_honest_identity_chains_still_read():
    """Positive control: Identity and Dropout chains alias their input as before."""
    graph = read(model([identity("X", "A"), helper.make_node("Dropout", ["A"], ["B", ""]), identity("B", "C"),
                        helper.make_node("Relu", ["C"], ["Y"])], output="Y"))
    x = np.linspace(-1, 1, 8).reshape(2, 4)
    np.testing.assert_array_equal(graph.forward(x), np.maximum(x, 0))


def test_hezk_plan_on_the_77_byte_file_exits_quickly_with_one_line(tmp_path):
    (tmp_path / "loop.onnx").write_bytes(model([identity("X", "X")]).SerializeToString())
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    start = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "hezk", "plan", "--model", "loop.onnx"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode != 0 and time.monotonic() - start < 120
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "graph input" in lines[0], result.stderr


# -- declared dims: bounded before allocation -------------------------------------------------------------------
def test_huge_zero_and_negative_dims_are_refused_before_allocating():
    huge = TensorProto()
    huge.name, huge.data_type = "W", TensorProto.FLOAT
    huge.dims.extend([1 << 20, 1 << 20])
    gemm = helper.make_node("Gemm", ["X", "W"], ["Y"])
    with pytest.raises(ModelFileError, match=rf"initializer 'W'.*limit of {MAX_ELEMENTS}"):
        read(model([gemm], output="Y", inits=[huge]))
    huge.dims[:] = [4, -2]
    with pytest.raises(ModelFileError, match="initializer 'W'.*negative"):
        read(model([gemm], output="Y", inits=[huge]))
    huge.dims[:] = [4, 4]  # no data for its 16 values
    with pytest.raises(ModelFileError, match="initializer 'W'.*does not fit dims"):
        read(model([gemm], output="Y", inits=[huge]))
    relu = helper.make_node("Relu", ["X"], ["Y"])
    with pytest.raises(ModelFileError, match=rf"ONNX input 'X'.*limit of {MAX_ELEMENTS}"):
        read(model([relu], output="Y", inputs=[("X", [1, 1 << 16, 1 << 16])]))
    for dims in ([1, 0], [1, -3]):
        with pytest.raises(ModelFileError, match="ONNX input 'X'"):
            read(model([relu], output="Y", inputs=[("X", dims)]))
    with pytest.raises(ModelFileError, match="input_shape"):
        read_onnx(model([relu], output="Y", inputs=[("X", [1, 4])]), input_shape=(0,))


def test_a_padded_pool_window_too_large_is_refused_before_it_is_built():
    pool = helper.make_node("AveragePool", ["X"], ["Y"], kernel_shape=[2, 2], pads=[1 << 14] * 4, name="pool")
    with pytest.raises(ModelFileError, match="'pool'.*limit"):
        read(model([pool], output="Y", inputs=[("X", [1, 1, 4, 4])]))


def test_a_reshape_to_a_huge_sample_is_refused():
    shape = numpy_helper.from_array(np.array([0, 1 << 30], np.int64), "S")
    with pytest.raises(ModelFileError):
        read(model([helper.make_node("Reshape", ["X", "S"], ["Y"])], output="Y", inits=[shape]))


# -- the fuzzer: random small graphs with random wiring ---------------------------------------------------------
OPS = {"Identity": 1, "Dropout": 1, "Relu": 1, "Sigmoid": 1, "Add": 2, "Mul": 2, "Sub": 2, "Gemm": 2,
       "MatMul": 2, "Flatten": 1}


@st.composite
def crafted(draw):
    """A graph of up to 6 nodes whose inputs and outputs are drawn from one small pool of names: the data input,
    an initializer, earlier or later node outputs, a name nobody writes; so self-loops, cycles, aliases of the
    input or initializer and double writes all occur."""
    count = draw(st.integers(1, 6))
    pool = ["X", "W", "missing"] + [f"t{i}" for i in range(count)]
    nodes = []
    for i in range(count):
        op = draw(st.sampled_from(sorted(OPS)))
        inputs = [draw(st.sampled_from(pool)) for _ in range(OPS[op])]
        out = draw(st.one_of(st.just(f"t{i}"), st.sampled_from(pool)))
        nodes.append(helper.make_node(op, inputs, [out], name=f"n{i}"))
    output = draw(st.sampled_from(pool))
    dims = draw(st.sampled_from([[1, 4], [1, 0], [1, -1], [1, 1 << 40], ["N", 4], [1, 2, 2]]))
    weight = numpy_helper.from_array(np.ones((4, 4), np.float32), "W")
    return model(nodes, output=output, inputs=[("X", dims)], inits=[weight])


@given(crafted())
def test_the_reader_returns_a_graph_or_its_own_error_on_any_wiring(proto):
    try:
        graph = read(proto)
    except ModelFileError:
        return
    assert isinstance(graph, Graph)
    assert graph.forward(np.ones((1, *graph.input_shape))).shape == (1, *graph.output_shape)


def test_operators_on_constants_or_with_too_few_inputs_are_refused_by_node():
    weight = numpy_helper.from_array(np.ones((4, 4), np.float32), "W")
    with pytest.raises(ModelFileError, match=r"Relu \(node 'r'\).*reads the constant 'W'"):
        read(model([helper.make_node("Relu", ["W"], ["Y"], name="r")], output="Y", inits=[weight]))
    with pytest.raises(ModelFileError, match=r"Add.*'lonely'"):
        read(model([helper.make_node("Add", ["X"], ["Y"], name="lonely")], output="Y"))
    with pytest.raises(ModelFileError, match=r"AveragePool.*'pool'.*kernel_shape"):
        read(model([helper.make_node("AveragePool", ["X"], ["Y"], name="pool")], output="Y",
                   inputs=[("X", [1, 1, 4, 4])]))
