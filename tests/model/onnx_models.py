"""Small ONNX models built with onnx.helper (no downloads), and onnxruntime as their reference."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


class Builder:
    """Appends nodes and float32 initializers; ``model()`` makes a checked ModelProto."""

    def __init__(self, input_shape, seed=0, batch="N", opset=17):
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits, self.count = [], [], 0
        self.input_shape, self.batch, self.opset = tuple(input_shape), batch, opset
        self.last = "x"

    def const(self, array, name=None):
        self.count += 1
        name = name or f"c{self.count}"
        array = np.asarray(array)
        array = array.astype(np.int64 if array.dtype.kind in "iu" else np.float32)
        self.inits.append(numpy_helper.from_array(array, name))
        return name

    def weight(self, *shape, scale=None):
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else 1
        return self.rng.normal(0, scale or 1 / np.sqrt(fan_in), shape)

    def node(self, op, inputs, name=None, **attrs):
        self.count += 1
        out = f"t{self.count}"
        self.nodes.append(helper.make_node(op, list(inputs), [out], name=name or f"{op.lower()}{self.count}",
                                           **attrs))
        self.last = out
        return out

    def gemm(self, x, n_in, n_out, name=None):
        return self.node("Gemm", [x, self.const(self.weight(n_out, n_in)), self.const(self.weight(n_out, scale=.1))],
                         name, transB=1)

    def conv(self, x, c_in, c_out, k, name=None, group=1, bias=True, **attrs):
        inputs = [x, self.const(self.weight(c_out, c_in // group, k, k))]
        if bias:
            inputs.append(self.const(self.weight(c_out, scale=.1)))
        return self.node("Conv", inputs, name, kernel_shape=[k, k], group=group, **attrs)

    def act(self, x, kind):
        if kind == "square":
            return self.node("Mul", [x, x])
        if kind == "silu":
            return self.node("Mul", [x, self.node("Sigmoid", [x])])
        return self.node({"relu": "Relu", "sigmoid": "Sigmoid", "tanh": "Tanh", "gelu": "Gelu"}[kind], [x])

    def model(self, output=None, out_shape=None):
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [self.batch, *self.input_shape])
        y = helper.make_tensor_value_info(output or self.last, TensorProto.FLOAT, None)
        graph = helper.make_graph(self.nodes, "test", [x], [y], self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)])
        model.ir_version = min(model.ir_version, 9)
        model = onnx.shape_inference.infer_shapes(model)  # fills in the output's shape
        onnx.checker.check_model(model)
        return model


def run_onnx(model, x):
    """onnxruntime's output for the float32 input x."""
    import onnxruntime

    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": np.asarray(x, dtype=np.float32)})[0]


def mlp(sizes=(784, 128, 10), activation="square", seed=0):
    b = Builder((sizes[0],), seed)
    x = "x"
    for i, (n_in, n_out) in enumerate(zip(sizes, sizes[1:])):
        x = b.gemm(x, n_in, n_out, name=f"fc{i + 1}")
        if i < len(sizes) - 2:
            x = b.act(x, activation)
    return b.model()


def lenet(activation="square", seed=1):
    """conv 5x5 -> 6, avgpool, conv 5x5 -> 16, avgpool, 120, 84, 10 on 1x28x28."""
    b = Builder((1, 28, 28), seed)
    x = b.act(b.conv("x", 1, 6, 5, name="conv1"), activation)
    x = b.node("AveragePool", [x], "pool1", kernel_shape=[2, 2], strides=[2, 2])
    x = b.act(b.conv(x, 6, 16, 5, name="conv2"), activation)
    x = b.node("AveragePool", [x], "pool2", kernel_shape=[2, 2], strides=[2, 2])
    x = b.node("Flatten", [x], "flatten")
    x = b.act(b.gemm(x, 256, 120, "fc1"), activation)
    x = b.act(b.gemm(x, 120, 84, "fc2"), activation)
    b.gemm(x, 84, 10, "fc3")
    return b.model()


def cifar(activation="square", seed=2):
    """conv 3x3 -> 16 pad 1, activation, avgpool, conv 3x3 -> 32, activation, global average pool, 10."""
    b = Builder((3, 32, 32), seed)
    x = b.act(b.conv("x", 3, 16, 3, name="conv1", pads=[1, 1, 1, 1]), activation)
    x = b.node("AveragePool", [x], "pool1", kernel_shape=[2, 2], strides=[2, 2])
    x = b.act(b.conv(x, 16, 32, 3, name="conv2", pads=[1, 1, 1, 1]), activation)
    x = b.node("GlobalAveragePool", [x], "gap")
    x = b.node("Flatten", [x], "flatten")
    b.gemm(x, 32, 10, "fc")
    return b.model()


def batchnorm_model(seed=3):
    """BatchNormalization after a conv (folded), after a Relu (kept as an affine node) and after a Gemm."""
    b = Builder((2, 8, 8), seed)

    def bn(x, c, name):
        stats = [b.const(b.rng.uniform(0.5, 1.5, c)), b.const(b.rng.normal(0, .2, c)),
                 b.const(b.rng.normal(0, .2, c)), b.const(b.rng.uniform(0.5, 2.0, c))]
        return b.node("BatchNormalization", [x, *stats], name, epsilon=1e-3)

    x = bn("x", 2, "bn0")
    x = b.node("Relu", [bn(b.conv(x, 2, 4, 3, name="conv1"), 4, "bn1")])
    x = bn(x, 4, "bn2")
    x = b.node("Flatten", [x], "flatten")
    bn(b.gemm(x, 4 * 6 * 6, 5, "fc"), 5, "bn3")
    return b.model()


def residual_block(seed=4):
    """x -> conv -> relu -> conv -> + x -> relu -> global average pool -> Gemm."""
    b = Builder((4, 6, 6), seed)
    h = b.node("Relu", [b.conv("x", 4, 4, 3, name="conv1", pads=[1, 1, 1, 1])])
    h = b.conv(h, 4, 4, 3, name="conv2", pads=[1, 1, 1, 1])
    s = b.node("Relu", [b.node("Add", [h, "x"], "residual")])
    g = b.node("Flatten", [b.node("GlobalAveragePool", [s], "gap")])
    b.gemm(g, 4, 3, "fc")
    return b.model()
