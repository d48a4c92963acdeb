"""ONNX (opset 13 and later) -> ``Graph``.

Initializers and Constant nodes are constants; the one graph input that is not an initializer is the data,
batch first, its sample shape taken from the graph's declared input shape (``input_shape`` overrides it
where the file leaves it symbolic). Operators covered: Gemm (alpha, beta, transB, C broadcast; transA on a
constant), MatMul, Conv (stride, pads, auto_pad, dilation, group), AveragePool (count_include_pad),
GlobalAveragePool, Add / Sub / Mul / Div by a constant, Add of two tensors (residual), Mul(x, x) and
Pow(x, 2) as square, Mul(x, Sigmoid(x)) as silu, Relu, Sigmoid, Tanh, Gelu (also written out with Erf, as
torch.onnx.export writes it below opset 20), BatchNormalization (folded into
the contraction before it when that contraction feeds nothing else), Flatten, Reshape, Transpose, Identity,
Dropout; MaxPool and GlobalMaxPool; Clip (ReLU6) and Min / Max with a constant as clip activations;
LeakyRelu (a x + (1 - a) relu(x)) and HardSigmoid (clip(a x + b, 0, 1)); ReduceMean; Conv, AveragePool and
MaxPool over 1-D windows (read as 2-D windows of height 1 between two Reshapes); Slice, Pad (constant, edge,
reflect) and Concat of computed tensors as public linear maps (constant 0/1 contractions, a constant
shift where the padding or a concatenated constant is not zero), Split of a computed tensor (its parts such
maps); Where with a constant condition (an attention mask before a Softmax: its 0/1 mask; else a public
elementwise map); the ONNX-ML linear models skl2onnx writes (LinearClassifier, LinearRegressor, Scaler;
Normalizer, ZipMap and Cast on their outputs) and a classifier's label as skl2onnx writes it for an
MLPClassifier (ArrayFeatureExtractor of the classes at an ArgMax, Reshape([-1]), Cast: client steps). Softmax,
LogSoftmax, ArgMax, Normalizer, ZipMap and a LinearClassifier's label and probabilities are computed by
the client after decryption (``Graph.postprocess``), so they may only end the graph; several outputs are
read when all of them derive from one computed tensor. Every other operator is refused: one
``UnsupportedOperator`` lists every node the description cannot hold, each with the rewrite that would
make it run where one exists (``REWRITES``).
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from .errors import MissingInputShape, ModelFileError, UnsupportedOperator
from .graph import (SELU_ALPHA, SELU_SCALE, Activation, Add, Affine, Bilinear, ClientOutput, ClientStep, Contraction,
                    Graph, LayerNorm, MaxPool, Patches, Reshape, Softmax, Transpose, require_size)

MIN_OPSET = 13
_WINDOW_OPS = ("Conv", "AveragePool", "MaxPool", "GlobalAveragePool", "GlobalMaxPool")  #: read per (C, ...) sample
_SHAPE_OPS = ("Gather", "Unsqueeze", "Squeeze", "Concat", "Cast", "Identity", "Slice")
_ML_DOMAIN = "ai.onnx.ml"
_ML_OPS = ("LinearClassifier", "LinearRegressor", "Normalizer", "ZipMap", "Scaler", "ArrayFeatureExtractor")
_CLIENT_OPS = ("Softmax", "LogSoftmax", "ArgMax", "Normalizer", "ZipMap", "Cast", "Identity", "ArrayFeatureExtractor",
               "Reshape")
_LAST = ("only as the model's last operations, which the client computes after decryption: move it after every "
         "other operator (or drop it: the argmax of the scores is the same)")
REWRITES = {
    "Softmax": _LAST, "LogSoftmax": _LAST, "ArgMax": _LAST, "Normalizer": _LAST, "ZipMap": _LAST,
    "Hardmax": "export the scores and take their argmax on the client (ArgMax at the end of the graph is read)",
    "Erf": "only inside GELU as torch exports it (x * 0.5 * (1 + erf(x / sqrt 2))): write nn.GELU()",
    "PRelu": "a learned slope per channel: export nn.LeakyReLU (read as a x + (1 - a) relu(x)) or nn.ReLU",
    "LayerNormalization": "divides by a computed norm: use BatchNorm (folded into the layer before) instead",
    "GroupNormalization": "divides by a computed norm: use BatchNorm (folded into the layer before) instead",
    "InstanceNormalization": "divides by a computed norm: use BatchNorm (folded into the layer before) instead",
    "LpNormalization": "divides by a computed norm: normalise on the client after decryption instead",
    "ReduceMax": "a maximum over computed values: use MaxPool over the same window (read) or ReduceMean",
    "ReduceSum": "a sum is a public linear map: export it as ReduceMean times the count (read)",
    "Div": "only division by a constant is a linear map",
    "Sqrt": "no polynomial form over a computed tensor here",
}
UNIVARIATE = {"Relu": "relu", "Sigmoid": "sigmoid", "Tanh": "tanh", "Softplus": "softplus", "Softsign": "softsign",
              "HardSwish": "hardswish", "Mish": "mish"}
"""ONNX operators read as the ``hezk.model.graph.ACTIVATIONS`` function they name (attribute-free)."""
_LETTERS = "acdefghijklmnopqrstuvwxyz"  # never 'b', the batch axis
_MASK_FILL = -1e9
"""Where(mask, scores, fill) read by a Softmax is its 0/1 mask when every dropped entry fills with at most this
(-inf, or masked_fill(-1e9) / finfo.min): exp(fill - max) is 0 in floating point for any scores below 1e8."""


def _onnx_div(a, b):
    """ONNX Div: integer division truncates toward zero."""
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype.kind in "iu" and b.dtype.kind in "iu":
        return (np.trunc(a / b)).astype(np.result_type(a, b))
    return a / b


_FOLDS = {  # elementwise operators on constants only (shape arithmetic): folded to their value
    "Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": _onnx_div, "Mod": np.mod, "Sqrt": np.sqrt,
    "Neg": np.negative, "Pow": np.power, "Equal": np.equal, "Where": np.where, "Expand": lambda a, s: a * np.ones(
        [int(d) for d in np.asarray(s).reshape(-1)], dtype=np.asarray(a).dtype), "Reciprocal": np.reciprocal,
    "Range": lambda a, b, c: np.arange(np.asarray(a).reshape(()), np.asarray(b).reshape(()), np.asarray(c).reshape(())),
}


def read_onnx(source, input_shape=None) -> Graph:
    """The description of the ONNX model at ``source`` (a path, bytes or an ``onnx.ModelProto``)."""
    import onnx
    from onnx import numpy_helper

    if isinstance(source, onnx.ModelProto):
        model = source
    else:
        try:
            model = onnx.load_from_string(source) if isinstance(source, bytes) else onnx.load(str(source))
        except Exception as error:  # noqa: BLE001 (protobuf raises its own DecodeError family)
            raise ModelFileError(f"model file {source!s:.200}: not a readable ONNX model ({error})") from None
    model = _at_least_min_opset(model)
    check_wiring(model.graph)
    try:
        return _Reader(model.graph, numpy_helper, input_shape, model).graph()
    except UnsupportedOperator as error:
        moves = any(_BATCH_MOVES in p.detail for p in error.problems)
        if moves and input_shape is None and not _unit_batch(model.graph):
            error.args = (f"{error.args[0]}; the file's batch axis is not a fixed 1: export the model on a batch of "
                          f"1 without a dynamic batch axis, and its batch axis is read as a sample axis (each "
                          f"sample then runs on its own)",)
        if input_shape is not None or not _unit_batch(model.graph) or not moves:
            raise
        first = error
    try:  # the batch dimension is 1: the whole tensor is the sample, the engines' batch a new axis before it
        return _Reader(model.graph, numpy_helper, None, model, unit_batch=True).graph()
    except UnsupportedOperator as error:
        if any(_BATCH_MOVES in p.detail for p in error.problems):
            raise first from None
        raise


_BATCH_MOVES = "batch"


def _at_least_min_opset(model):
    """``model`` itself when its default-domain opset is >= MIN_OPSET, else its upgrade by ONNX's version
    converter (skl2onnx writes the smallest opset its operators need, e.g. 9 for a LogisticRegression; the
    converter rewrites attribute forms such as Clip's min/max into the inputs the reader expects)."""
    opsets = {entry.domain or "ai.onnx": entry.version for entry in model.opset_import}
    found = opsets.get("ai.onnx")
    if found is not None and found >= MIN_OPSET:
        return model
    if found is None:
        if all(node.domain not in ("", "ai.onnx") for node in model.graph.node):
            return model  # only ai.onnx.ml nodes: nothing to upgrade
        raise ModelFileError("ONNX model imports no default-domain opset but uses default-domain operators: "
                             f"re-export the model with opset_version >= {MIN_OPSET}")
    from onnx import version_converter

    try:
        return version_converter.convert_version(model, MIN_OPSET)
    except Exception as error:  # noqa: BLE001 (the converter raises RuntimeError, ConvertError, ...)
        raise ModelFileError(f"ONNX opset {found} < {MIN_OPSET} and ONNX's version converter could not upgrade it "
                             f"({str(error)[:200]}): re-export the model with opset_version >= {MIN_OPSET}") from None


def _unit_batch(graph) -> bool:
    """Whether the graph's one data input declares a fixed shape with a batch dimension of 1: the first, or
    another one (a sequence-first transformer's (sequence, 1, width) input, nn.TransformerEncoderLayer's
    default batch_first=False)."""
    initializers = {t.name for t in graph.initializer}
    inputs = [i for i in graph.input if i.name not in initializers]
    if len(inputs) != 1:
        return False
    dims = inputs[0].type.tensor_type.shape.dim
    return len(dims) >= 1 and all(d.HasField("dim_value") and d.dim_value >= 1 for d in dims) \
        and any(d.dim_value == 1 for d in dims)


def _tensor_array(tensor, numpy_helper, what: str) -> np.ndarray:
    """The array of an ONNX TensorProto, its declared dims checked (each >= 0, at most ``graph.MAX_ELEMENTS`` values)
    before any is allocated; a tensor whose data does not match its dims raises ModelFileError."""
    dims = tuple(tensor.dims)
    if any(d < 0 for d in dims):
        raise ModelFileError(f"{what} {tensor.name!r}: dims {dims} has a negative entry")
    require_size(dims, f"{what} {tensor.name!r}")
    try:
        return numpy_helper.to_array(tensor)
    except Exception as error:  # noqa: BLE001 (onnx raises ValueError, TypeError, KeyError, ... on bad data)
        raise ModelFileError(f"{what} {tensor.name!r}: its data does not fit dims {dims} and data type "
                             f"{tensor.data_type} ({type(error).__name__}: {error})"[:400]) from None


def _node_name(node, index: int) -> str:
    return node.name or f"{node.op_type}_{index}"


def check_wiring(graph) -> None:
    """Refuse a graph whose tensors are not each defined once, ahead of any node: a node output that is a
    graph input or an initializer (``Identity X -> X``), written by two nodes, or read by its own node or
    around a cycle of nodes (a 2-cycle of Identities). Linear in the graph's size; without it the reader's
    alias chase of such a graph never ends."""
    defined = {value.name: "a graph input" for value in graph.input}
    defined.update({tensor.name: "an initializer" for tensor in graph.initializer})
    producer: dict[str, int] = {}
    nodes = list(graph.node)
    for index, node in enumerate(nodes):
        for out in node.output:
            if not out:  # an optional output left out
                continue
            if out in defined:
                raise ModelFileError(f"{node.op_type} (node {_node_name(node, index)!r}) writes {out!r}, which is "
                                     f"{defined[out]}: every tensor must be defined once")
            if out in producer:
                first = producer[out]
                raise ModelFileError(f"{node.op_type} (node {_node_name(node, index)!r}) writes {out!r}, which "
                                     f"node {_node_name(nodes[first], first)!r} already writes: every tensor must "
                                     f"be defined once")
            producer[out] = index
        if any(name and producer.get(name) == index for name in node.input):
            raise ModelFileError(f"{node.op_type} (node {_node_name(node, index)!r}) reads its own output: a "
                                 f"cycle")
    # iterative depth-first search over the nodes (edges: producer -> consumer), three colours
    state = [0] * len(nodes)  # 0 unseen, 1 on the current path, 2 done
    for start in range(len(nodes)):
        if state[start]:
            continue
        path, stack = [], [(start, iter(nodes[start].input))]
        state[start] = 1
        path.append(start)
        while stack:
            index, pending = stack[-1]
            step = next((producer[name] for name in pending if name in producer), None)
            if step is None:
                state[index] = 2
                stack.pop()
                path.pop()
            elif state[step] == 1:
                cycle = path[path.index(step):]
                raise ModelFileError(f"the ONNX graph has a cycle through the nodes "
                                     f"{[_node_name(nodes[i], i) for i in cycle]}: a model is acyclic")
            elif state[step] == 0:
                state[step] = 1
                path.append(step)
                stack.append((step, iter(nodes[step].input)))


def _wiring(nodes, initializers, numpy_helper) -> tuple:
    """(constants by tensor name: initializers and Constant nodes' values, producer index by tensor, consumer
    indices by tensor) of a node list."""
    const = dict(initializers)
    for node in nodes:
        if node.op_type == "Constant":
            for attribute in node.attribute:
                if attribute.name == "value":
                    const[node.output[0]] = _tensor_array(attribute.t, numpy_helper, "Constant")
                elif attribute.name == "value_float":
                    const[node.output[0]] = np.float32(attribute.f)
    producer = {out: i for i, node in enumerate(nodes) for out in node.output}
    consumers: dict[str, list[int]] = {}
    for i, node in enumerate(nodes):
        for tensor in node.input:
            consumers.setdefault(tensor, []).append(i)
    return const, producer, consumers


def _is_scalar(const: dict, tensor, value) -> bool:
    """Whether ``tensor`` is a constant of one entry equal to ``value`` (to 1e-3 relative)."""
    array = const.get(tensor)
    return (array is not None and np.asarray(array).size == 1
            and abs(float(np.asarray(array).reshape(())) - value) <= 1e-3 * abs(value))


def _only_consumer(nodes, consumers, tensor, op):
    """The index of the one node reading ``tensor`` when it is an ``op``, else None."""
    readers = consumers.get(tensor, [])
    return readers[0] if len(readers) == 1 and nodes[readers[0]].op_type == op else None


def _other(node, tensor):
    """The operand of a binary ``node`` beside ``tensor`` (None if ``tensor`` is not one of its two)."""
    operands = list(node.input[:2])
    if len(operands) != 2 or tensor not in operands:
        return None
    operands.remove(tensor)
    return operands[0]


def _gelu_tail(nodes, const, producer, consumers, x, total):
    """(indices, y) of y = 0.5 x total as exporters write GELU's last products, (x total) 0.5, x (total 0.5) or
    (0.5 x) total, from the one Mul reading ``total``; None if it is none of them."""
    mul_index = _only_consumer(nodes, consumers, total, "Mul")
    if mul_index is None:
        return None
    operand, product = _other(nodes[mul_index], total), nodes[mul_index].output[0]
    if operand == x or _is_scalar(const, operand, 0.5):  # (x * total) * 0.5 or (total * 0.5) * x
        last = _only_consumer(nodes, consumers, product, "Mul")
        if last is None:
            return None
        factor = _other(nodes[last], product)
        if not (_is_scalar(const, factor, 0.5) if operand == x else factor == x):
            return None
        return (mul_index, last), nodes[last].output[0]
    half_index = producer.get(operand)  # (x * 0.5) * total
    if half_index is None or consumers.get(operand) != [mul_index] or nodes[half_index].op_type != "Mul" \
            or not _is_scalar(const, _other(nodes[half_index], x), 0.5):
        return None
    return (half_index, mul_index), product


def _fuse_erf_gelu(nodes, initializers, numpy_helper) -> list:
    """``nodes`` with each exact GELU written out with Erf replaced by one Gelu node: torch.onnx.export below
    opset 20 writes nn.GELU() as Mul(Mul(x, Add(Erf(Div(x, sqrt 2)), 1)), 0.5) (other exporters: x * 1/sqrt 2,
    the 0.5 on x or on the sum first). The Gelu takes the place of the group's last node, named after its Erf
    node; every intermediate tensor must feed only the next node of the group, else nothing is fused (and the
    Erf is refused by name as before)."""
    import onnx

    const, producer, consumers = _wiring(nodes, initializers, numpy_helper)

    def match(erf_index):
        """(the group's node indices, x, y) of the GELU around nodes[erf_index], or None."""
        erf = nodes[erf_index]
        pre_index = producer.get(erf.input[0])
        if pre_index is None or consumers.get(erf.input[0]) != [erf_index]:
            return None
        pre = nodes[pre_index]
        x = None
        if pre.op_type == "Div" and _is_scalar(const, pre.input[1], 2 ** 0.5):
            x = pre.input[0]
        elif pre.op_type == "Mul":
            for a, b in (pre.input[:2], pre.input[1::-1]):
                if _is_scalar(const, b, 2 ** -0.5):
                    x = a
        if x is None or x in const:
            return None
        add_index = _only_consumer(nodes, consumers, erf.output[0], "Add")
        if add_index is None or not _is_scalar(const, _other(nodes[add_index], erf.output[0]), 1.0):
            return None
        tail = _gelu_tail(nodes, const, producer, consumers, x, nodes[add_index].output[0])
        return None if tail is None else ((pre_index, erf_index, add_index) + tail[0], x, tail[1])

    replaced, dropped = {}, set()
    for i, node in enumerate(nodes):
        if node.op_type == "Erf" and i not in dropped:
            found = match(i)
            if found is not None:
                group, x, y = found
                name = node.name or f"Erf_{i}"
                replaced[max(group)] = onnx.helper.make_node("Gelu", [x], [y], name=name)
                dropped.update(group)
    return [replaced.get(i, node) for i, node in enumerate(nodes) if i not in dropped or i in replaced]


def _fuse_tanh_gelu(nodes, initializers, numpy_helper) -> list:
    """``nodes`` with each GELU's tanh approximation written out (torch.onnx.export below opset 20 writes
    nn.GELU(approximate="tanh") as 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), x^3 as Mul(x, Mul(x, x)) or
    Pow(x, 3)) replaced by one Gelu(approximate="tanh") named after its Tanh node; every intermediate tensor must
    feed only its group, else nothing is fused (and the nodes are read one by one)."""
    import onnx

    const, producer, consumers = _wiring(nodes, initializers, numpy_helper)

    def made(tensor, op):
        """The index of the ``op`` node making ``tensor``, read once, or None."""
        index = producer.get(tensor)
        ok = index is not None and nodes[index].op_type == op and len(consumers.get(tensor, [])) == 1
        return index if ok else None

    def scaled(tensor, factor):
        """(index, the other operand) of a Mul making ``tensor`` from a constant ``factor``, or None."""
        index = made(tensor, "Mul")
        for a, b in (() if index is None else (nodes[index].input[:2], nodes[index].input[1::-1])):
            if _is_scalar(const, b, factor):
                return index, a
        return None

    def cube(tensor, x):
        """The indices making ``tensor`` = x^3, or None."""
        index = made(tensor, "Pow")
        if index is not None and nodes[index].input[0] == x and _is_scalar(const, nodes[index].input[1], 3.0):
            return (index,)
        index = made(tensor, "Mul")
        for a, b in (() if index is None else (nodes[index].input[:2], nodes[index].input[1::-1])):
            square = made(b, "Mul") if a == x else None
            if square is not None and list(nodes[square].input[:2]) == [x, x]:
                return index, square
            square = made(b, "Pow") if a == x else None
            if square is not None and nodes[square].input[0] == x and _is_scalar(const, nodes[square].input[1], 2.0):
                return index, square
        return None

    def match(tanh_index):
        outer = scaled(nodes[tanh_index].input[0], math.sqrt(2 / math.pi))
        inner = None if outer is None else made(outer[1], "Add")
        for x, term in (() if inner is None else (nodes[inner].input[:2], nodes[inner].input[1::-1])):
            cubic = scaled(term, 0.044715)
            powers = None if cubic is None or x in const else cube(cubic[1], x)
            if powers is None:
                continue
            add_index = _only_consumer(nodes, consumers, nodes[tanh_index].output[0], "Add")
            if add_index is None or not _is_scalar(const, _other(nodes[add_index], nodes[tanh_index].output[0]), 1.0):
                return None
            tail = _gelu_tail(nodes, const, producer, consumers, x, nodes[add_index].output[0])
            if tail is None:
                return None
            return (*powers, cubic[0], inner, outer[0], tanh_index, add_index, *tail[0]), x, tail[1]
        return None

    replaced, dropped = {}, set()
    for i, node in enumerate(nodes):
        if node.op_type == "Tanh" and i not in dropped:
            found = match(i)
            if found is not None and not dropped.intersection(found[0]):
                group, x, y = found
                replaced[max(group)] = onnx.helper.make_node("Gelu", [x], [y], name=node.name or f"Tanh_{i}",
                                                             approximate="tanh")
                dropped.update(group)
    return [replaced.get(i, node) for i, node in enumerate(nodes) if i not in dropped or i in replaced]


def _fuse_layernorm(nodes, initializers, numpy_helper) -> list:
    """``nodes`` with each LayerNorm written out (torch.onnx.export below opset 17: ReduceMean(x), Sub(x, mean),
    Pow(d, 2) or Mul(d, d), ReduceMean, Add(var, epsilon), Sqrt, Div(d, std), then Mul by a constant scale and Add
    of a constant shift when present) replaced by one LayerNormalization over the same trailing axes, named
    after its Div node. Both ReduceMeans must take the same trailing axes (negative, keepdims) and every
    intermediate tensor must feed only its group, else nothing is fused (and the nodes are read one by one)."""
    import onnx

    const, producer, consumers = _wiring(nodes, initializers, numpy_helper)

    def only(tensor, *ops):
        readers = consumers.get(tensor, [])
        return readers[0] if len(readers) == 1 and nodes[readers[0]].op_type in ops else None

    def trailing_axes(index):
        node = nodes[index]
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        axes = attrs.get("axes")
        if axes is None and len(node.input) > 1 and node.input[1] in const:
            axes = np.asarray(const[node.input[1]]).reshape(-1).tolist()
        if not axes or int(attrs.get("keepdims", 1)) != 1 or sorted(int(a) for a in axes) != \
                list(range(-len(axes), 0)):
            return None
        return -len(axes)

    def constant_operand(node, tensor):
        operands = list(node.input[:2])
        if len(operands) != 2 or tensor not in operands:
            return None
        operands.remove(tensor)
        return operands[0] if operands[0] in const else None

    def match(mean_index):
        x, axis = nodes[mean_index].input[0], trailing_axes(mean_index)
        sub_index = only(nodes[mean_index].output[0], "Sub")
        if axis is None or x in const or sub_index is None or list(nodes[sub_index].input[:2]) != \
                [x, nodes[mean_index].output[0]]:
            return None
        d = nodes[sub_index].output[0]
        readers = consumers.get(d, [])
        square = [i for i in readers if (nodes[i].op_type == "Pow" and _is_scalar(const, nodes[i].input[1], 2.0))
                  or (nodes[i].op_type == "Mul" and list(nodes[i].input[:2]) == [d, d])]
        divide = [i for i in readers if nodes[i].op_type == "Div" and list(nodes[i].input[:2])[0] == d]
        if len(readers) != 2 or len(square) != 1 or len(divide) != 1:
            return None
        var_index = only(nodes[square[0]].output[0], "ReduceMean")
        if var_index is None or trailing_axes(var_index) != axis:
            return None
        add_index = only(nodes[var_index].output[0], "Add")
        epsilon = None if add_index is None else constant_operand(nodes[add_index], nodes[var_index].output[0])
        if epsilon is None or np.asarray(const[epsilon]).size != 1:
            return None
        sqrt_index = only(nodes[add_index].output[0], "Sqrt")
        if sqrt_index is None or nodes[divide[0]].input[1] != nodes[sqrt_index].output[0] \
                or consumers.get(nodes[sqrt_index].output[0]) != [divide[0]]:
            return None
        group = [mean_index, sub_index, square[0], var_index, add_index, sqrt_index, divide[0]]
        y, scale, shift = nodes[divide[0]].output[0], "", ""
        mul_index = only(y, "Mul")
        if mul_index is not None and constant_operand(nodes[mul_index], y) is not None:
            scale, y = constant_operand(nodes[mul_index], y), nodes[mul_index].output[0]
            group.append(mul_index)
            add_index = only(y, "Add")
            if add_index is not None and constant_operand(nodes[add_index], y) is not None:
                shift, y = constant_operand(nodes[add_index], y), nodes[add_index].output[0]
                group.append(add_index)
        value = float(np.asarray(const[epsilon]).reshape(()))
        return group, onnx.helper.make_node("LayerNormalization", [x, scale, shift], [y], axis=axis, epsilon=value,
                                            name=nodes[divide[0]].name or f"LayerNorm_{mean_index}")

    replaced, dropped = {}, set()
    for i, node in enumerate(nodes):
        if node.op_type == "ReduceMean" and i not in dropped:
            found = match(i)
            if found is not None and not dropped.intersection(found[0]):
                replaced[max(found[0])] = found[1]
                dropped.update(found[0])
    return [replaced.get(i, node) for i, node in enumerate(nodes) if i not in dropped or i in replaced]


SOFTPLUS_THRESHOLD_MIN = 10.0
"""Where(x > c, x, softplus(x)) reads as softplus(x) for c >= this: they differ by log(1 + e^-x) < e^-c there."""


def _fuse_univariate(nodes, initializers, numpy_helper) -> list:
    """``nodes`` with the written-out forms torch's exporters give three univariate activations replaced by
    one node each, the activation's input read only by the group: Where(Greater(x, c), x, Softplus(x)) ->
    Softplus(x) for c >= SOFTPLUS_THRESHOLD_MIN (F.softplus's threshold=20), Mul(x, Tanh(Softplus(x))) ->
    Mish(x), Div(x, Add(Abs(x), 1)) -> Softsign(x)."""
    import onnx

    const, producer, consumers = _wiring(nodes, initializers, numpy_helper)

    def made(tensor, op, x):
        """The index of the node of type ``op`` making ``tensor`` from x alone, read only once, or None."""
        index = producer.get(tensor)
        if index is None or nodes[index].op_type != op or len(consumers.get(tensor, [])) != 1:
            return None
        return index if nodes[index].input[0] == x else None

    def group(node):
        """(fused op, x, indices the fused node replaces) or None."""
        if node.op_type == "Where" and len(node.input) == 3:
            condition, x, value = node.input
            greater, softplus = made(condition, "Greater", x), made(value, "Softplus", x)
            threshold = const.get(nodes[greater].input[1]) if greater is not None else None
            if softplus is not None and threshold is not None and np.asarray(threshold).size == 1 and \
                    float(np.asarray(threshold).reshape(())) >= SOFTPLUS_THRESHOLD_MIN:
                return "Softplus", x, (greater, softplus)
        if node.op_type == "Mul" and len(node.input) == 2:
            for x, other in (node.input, node.input[::-1]):
                tanh = producer.get(other)
                source = nodes[tanh].input[0] if tanh is not None and nodes[tanh].input else None  # a Constant
                if made(other, "Tanh", source) is not None:
                    softplus = made(nodes[tanh].input[0], "Softplus", x)
                    if softplus is not None:
                        return "Mish", x, (tanh, softplus)
        if node.op_type == "Div" and len(node.input) == 2:
            x, denominator = node.input
            add = producer.get(denominator)
            if add is not None and nodes[add].op_type == "Add" and len(consumers.get(denominator, [])) == 1:
                for absolute, one in (nodes[add].input, nodes[add].input[::-1]):
                    index = made(absolute, "Abs", x)
                    if index is not None and _is_scalar(const, one, 1.0):
                        return "Softsign", x, (add, index)
        return None

    replaced, dropped = {}, set()
    for i, node in enumerate(nodes):
        found = group(node) if i not in dropped else None
        if found is not None and not dropped.intersection(found[2]):
            op, x, indices = found
            replaced[i] = onnx.helper.make_node(op, [x], [node.output[0]], name=node.name or f"{op}_{i}")
            dropped.update(indices)
    return [replaced.get(i, node) for i, node in enumerate(nodes) if i not in dropped]


def _attrs(node) -> dict:
    import onnx

    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


class _Reader:
    def __init__(self, graph, numpy_helper, input_shape, model=None, unit_batch=False):
        self.source, self.helper, self.model = graph, numpy_helper, model
        self.lead = 0 if unit_batch else 1  # 0: the batch axis (of size 1) is read as a sample axis
        self.client: dict[str, tuple[str, tuple]] = {}  # tensor the client computes -> (computed tensor, steps)
        self.outputs = tuple(out.name for out in graph.output)
        self.const = {t.name: _tensor_array(t, numpy_helper, "initializer") for t in graph.initializer}
        self.batch_mask: dict[str, np.ndarray] = {}  # constants from Shape: where they hold the batch size
        self.nodes: list = []
        self.producer: dict[str, int] = {}
        self.alias: dict[str, str] = {}
        self.softmax_masks: dict[str, np.ndarray] = {}  # Add output -> the 0/1 mask its -inf entries make
        self.uses: dict[str, int] = {}
        nodes = _fuse_layernorm(list(graph.node), self.const, numpy_helper)
        nodes = _fuse_tanh_gelu(nodes, self.const, numpy_helper)
        self.source_nodes = _fuse_univariate(_fuse_erf_gelu(nodes, self.const, numpy_helper),
                                             self.const, numpy_helper)
        self.readers: dict[str, list[str]] = {}  # tensor -> the op types of the source nodes reading it
        for node in self.source_nodes:
            for name in node.input:
                self.uses[name] = self.uses.get(name, 0) + 1
                self.readers.setdefault(name, []).append(node.op_type)
        for out in graph.output:
            self.uses[out.name] = self.uses.get(out.name, 0) + 1
        inputs = [i for i in graph.input if i.name not in self.const]
        if len(inputs) != 1:
            raise ModelFileError(f"the ONNX graph has {len(inputs)} data inputs {[i.name for i in inputs]}; "
                                 f"exactly one is supported")
        self.input = inputs[0].name
        dims = inputs[0].type.tensor_type.shape.dim
        declared = [d.dim_value if d.HasField("dim_value") else None for d in dims]
        if input_shape is not None:
            try:
                self.input_shape = tuple(int(d) for d in input_shape)
            except (TypeError, ValueError, OverflowError):
                raise ModelFileError(f"input_shape={input_shape!r:.80} is not a sequence of integers") from None
            if not self.input_shape or min(self.input_shape) < 1:
                raise ModelFileError(f"input_shape={self.input_shape}: every axis must be >= 1")
        elif unit_batch:
            self.input_shape = tuple(declared)
        elif len(declared) < 2 or any(d is None or d < 1 for d in declared[1:]):
            raise MissingInputShape(f"ONNX input {self.input!r} declares the shape {declared} (None: symbolic); the "
                                 f"sample axes after the batch must be fixed numbers (or pass input_shape)")
        else:
            self.input_shape = tuple(declared[1:])
        require_size(self.input_shape, f"ONNX input {self.input!r}")
        self.shapes = {self.input: self.input_shape}
        if not graph.output:
            raise ModelFileError("the ONNX graph has no output")

    # -- helpers ------------------------------------------------------------------------------------------
    def name(self, tensor: str) -> str:
        while tensor in self.alias:
            tensor = self.alias[tensor]
        return tensor

    def is_const(self, tensor: str) -> bool:
        return tensor in self.const

    def emit(self, node) -> None:
        shapes = tuple(self.shapes[i] for i in node.inputs)
        self.shapes[node.output] = tuple(node.output_shape(shapes))
        require_size(self.shapes[node.output], f"{node.where()} output {node.output!r}")
        self.producer[node.output] = len(self.nodes)
        self.nodes.append(node)

    def sole_use(self, tensor: str) -> bool:
        """``tensor`` feeds exactly one node and is not a graph output."""
        return self.uses.get(tensor, 0) == 1 and tensor not in self.outputs

    def replace(self, tensor: str, node) -> None:
        """Put ``node`` where the producer of ``tensor`` was (a fold), under the new output name."""
        index = self.producer.pop(tensor)
        del self.shapes[tensor]
        self.nodes[index] = node
        self.producer[node.output] = index
        self.shapes[node.output] = tuple(node.output_shape(tuple(self.shapes[i] for i in node.inputs)))

    def sample_const(self, value, tensor: str, where: str) -> np.ndarray:
        """A constant operand of an elementwise op, as broadcast over the sample (a leading 1 dropped)."""
        shape = self.shapes[tensor]
        array = np.asarray(value, dtype=np.float64)
        if not self.lead and array.ndim > len(shape):
            raise UnsupportedOperator(where.split(" ")[0], where, f"a constant of shape {array.shape} of more axes "
                                                               f"than the tensor {shape}")
        if self.lead and array.ndim == len(shape) + 1:
            if array.shape[0] != 1:
                raise ModelFileError(f"{where}: constant of shape {array.shape} varies along the batch axis")
            array = array[0]
        if array.ndim > len(shape) or np.broadcast_shapes(shape, array.shape) != shape:
            raise ModelFileError(f"{where}: constant of shape {array.shape} does not broadcast to the sample "
                                 f"shape {shape}")
        return array

    # -- the graph ----------------------------------------------------------------------------------------
    def graph(self) -> Graph:
        problems, poisoned = [], set()  # every refusal; tensors after a refused node (their nodes are skipped)
        for index, node in enumerate(self.source_nodes):
            name = node.name or f"{node.op_type}_{index}"
            handler = getattr(self, f"op_{node.op_type}", None)
            if handler is None and node.op_type in UNIVARIATE:
                handler = self.univariate
            if node.op_type in _FOLDS and node.domain in ("", "ai.onnx") and node.input \
                    and all(self.is_const(t) for t in node.input if t):
                handler = self.fold_constants
            if node.domain not in ("", "ai.onnx", _ML_DOMAIN) or handler is None or \
                    (node.domain == _ML_DOMAIN) != (node.op_type in _ML_OPS):
                problems.append(UnsupportedOperator(node.op_type, name, "" if node.domain in ("", "ai.onnx") else
                                                    f"domain {node.domain!r}", REWRITES.get(node.op_type, "")))
                self.placeholder(node, poisoned)
                continue
            if any(t in poisoned for t in node.input if t):
                poisoned.update(node.output)
                continue
            client = [t for t in node.input if t and self.name(t) in self.client]
            if client and node.op_type not in _CLIENT_OPS:
                base, steps = self.client[self.name(client[0])]
                problems.append(UnsupportedOperator(
                    node.op_type, name, f"reads {client[0]!r}, which the client computes after decryption "
                    f"({' -> '.join(step.function for step in steps)} of {base!r})",
                    "Softmax, LogSoftmax, ArgMax, Normalizer and ZipMap are read only as the model's last "
                    "operations: move them after every other operator"))
                self.placeholder(node, poisoned)
                continue
            marked = [t for t in node.input if t in self.batch_mask and np.any(self.batch_mask[t])]
            shape_input = node.op_type == "Reshape" and marked == [node.input[1]]
            try:
                if marked and node.op_type not in _SHAPE_OPS and not shape_input:
                    raise UnsupportedOperator(node.op_type, name, "computes with the batch size (from Shape), which "
                                                                  "is unknown when the model is read")
                if node.op_type != "Constant":
                    for tensor in node.input:
                        if tensor and not self.is_const(tensor) and self.name(tensor) not in self.shapes \
                                and self.name(tensor) not in self.client:
                            raise ModelFileError(f"{node.op_type} (node {name!r}) reads {tensor!r}, which no "
                                                 f"earlier node produces")
                if not self.lead and node.op_type in _WINDOW_OPS:
                    self.unit_batch_window(handler, node, name, _attrs(node))
                else:
                    handler(node, name, _attrs(node))
            except UnsupportedOperator as error:
                problems.append(error if error.hint or not REWRITES.get(error.op) else
                                UnsupportedOperator(error.op, error.node, error.detail, REWRITES[error.op]))
                self.placeholder(node, poisoned)
            except ModelFileError:
                if any(_BATCH_MOVES in p.detail for p in problems):  # after a refused move of the batch axis,
                    raise UnsupportedOperator.collect(problems) from None  # the shapes it left are not the file's
                raise
            except KeyError as error:  # a tensor with no sample shape, or a missing attribute
                key = error.args[0] if error.args else None
                detail = (f"reads the constant {key!r} where a computed tensor is needed" if key in self.const
                          else f"lacks {key!r}")
                problems.append(UnsupportedOperator(node.op_type, name, detail))
                self.placeholder(node, poisoned)
            except (IndexError, TypeError, ValueError, ArithmeticError) as error:  # too few inputs, odd attributes
                if problems:  # after a refused node its placeholder's shapes may not be what this node expects
                    raise UnsupportedOperator.collect(problems) from None
                raise ModelFileError(f"{node.op_type} (node {name!r}): malformed ({type(error).__name__}: "
                                     f"{error})"[:400]) from None
        if problems:
            raise UnsupportedOperator.collect(problems)
        return self.finish()

    def placeholder(self, node, poisoned: set) -> None:
        """After a refused node: its outputs take the sample shapes ONNX shape inference gives them, so the
        nodes after it are still checked (and refused too where they cannot be read); an output whose shape
        is not inferred is poisoned (the nodes reading it are skipped)."""
        if not hasattr(self, "_inferred"):
            self._inferred = {}
            try:
                import onnx

                inferred = onnx.shape_inference.infer_shapes(self.model) if self.model is not None else None
                for value in () if inferred is None else inferred.graph.value_info:
                    dims = value.type.tensor_type.shape.dim
                    sample = [d.dim_value if d.HasField("dim_value") else 0 for d in dims][self.lead:]
                    if dims and all(d > 0 for d in sample):
                        self._inferred[value.name] = tuple(sample)
            except Exception:  # noqa: BLE001 (inference is best effort: without it the rest is skipped)
                pass
        for out in node.output:
            if out and out in self._inferred:
                self.shapes[out] = self._inferred[out]
            elif out:
                poisoned.add(out)

    def finish(self) -> Graph:
        """The Graph: its one computed output, and the client's steps for each named output of the file."""
        found = []
        for out in self.outputs:
            tensor = self.name(out)
            if tensor in self.client:
                found.append((out,) + self.client[tensor])
            elif tensor in self.shapes and tensor != self.input or tensor == self.input and not self.nodes:
                found.append((out, tensor, ()))
            else:
                raise ModelFileError(f"the ONNX graph output {out!r} is a constant, not computed from the input")
        bases = list(dict.fromkeys(base for _, base, _ in found))
        if len(bases) > 1:
            raise UnsupportedOperator("Graph outputs", ",".join(self.outputs), f"{len(bases)} outputs {bases} are "
                                      f"computed separately; the engines compute one output",
                                      "concatenate them into one output before exporting (torch.cat of the "
                                      "flattened outputs), or export one model per output")
        output = bases[0]
        post = () if found == [(self.outputs[0], output, ())] else \
            tuple(ClientOutput(out, steps) for out, _, steps in found)
        return Graph(self.input, self.input_shape, tuple(self.nodes), output, post)

    def data_and_const(self, node, name):
        """(data tensor, constant array, data_first) of a binary node with one data and one constant input."""
        a, b = node.input[0], node.input[1]
        if self.is_const(a) == self.is_const(b):
            raise UnsupportedOperator(node.op_type, name, "needs exactly one constant operand" if self.is_const(a)
                                      else "of two computed tensors (only Add of two tensors, and Mul(x, x), are "
                                           "supported)")
        return (self.name(b), self.const[a], False) if self.is_const(a) else (self.name(a), self.const[b], True)

    # -- operators ----------------------------------------------------------------------------------------
    def op_Constant(self, node, name, attrs):
        if "value" in attrs:
            self.const[node.output[0]] = _tensor_array(attrs["value"], self.helper, f"Constant (node {name!r})")
            return
        for key, dtype in (("value_float", np.float32), ("value_floats", np.float32), ("value_int", np.int64),
                           ("value_ints", np.int64)):
            if key in attrs:
                self.const[node.output[0]] = np.array(attrs[key], dtype=dtype)
                return
        raise UnsupportedOperator("Constant", name, f"attributes {sorted(attrs)}")

    # -- shape arithmetic on constants (torch's x.view(x.size(0), -1) exports Shape, Gather, Unsqueeze, Concat)
    def op_Shape(self, node, name, attrs):
        x = self.name(node.input[0])
        full = np.array([0] * self.lead + list(self.shapes[x]), dtype=np.int64)  # batch size unknown: 0, "copy it"
        mask = (np.arange(len(full)) == 0) & bool(self.lead)
        start, end = int(attrs.get("start", 0)), attrs.get("end")
        cut = slice(start, None if end is None else int(end))
        self.const[node.output[0]], self.batch_mask[node.output[0]] = full[cut], mask[cut]

    def fold(self, node, compute) -> None:
        """A node on constants only: its value, and where it holds the batch size."""
        if not all(self.is_const(t) for t in node.input if t):
            raise UnsupportedOperator(node.op_type, node.name, "only on constants")
        values = [self.const[t] if t else None for t in node.input]
        masks = [self.batch_mask.get(t, np.zeros(np.shape(v), bool)) if t else None for t, v in zip(node.input, values)]
        self.const[node.output[0]] = compute(*values)
        mask = compute(*masks) if any(m is not None and np.any(m) for m in masks) else None
        if mask is not None:
            self.batch_mask[node.output[0]] = np.asarray(mask, dtype=bool)

    def squeeze_axes(self, node, attrs):
        if len(node.input) > 1 and node.input[1]:
            return [int(a) for a in np.asarray(self.const[node.input[1]]).reshape(-1)]
        return [int(a) for a in attrs.get("axes", ())]

    def op_Unsqueeze(self, node, name, attrs):
        axes = self.squeeze_axes(node, attrs)
        if not self.is_const(node.input[0]):
            return self.data_reshape(node, name, lambda full: np.expand_dims(np.broadcast_to(0.0, full), axes).shape)
        self.fold(node, lambda data, *_: np.expand_dims(data, [a if a >= 0 else a + np.ndim(data) + len(axes)
                                                               for a in axes]))

    def op_Squeeze(self, node, name, attrs):
        axes = self.squeeze_axes(node, attrs)
        if not self.is_const(node.input[0]):
            return self.data_reshape(node, name, lambda full: np.squeeze(np.broadcast_to(0.0, full), tuple(axes) or None).shape)
        self.fold(node, lambda data, *_: np.squeeze(data, tuple(axes) or None))

    def op_Concat(self, node, name, attrs):
        axis = int(attrs["axis"])
        if all(self.is_const(t) for t in node.input if t):
            self.fold(node, lambda *parts: np.concatenate([np.atleast_1d(p) for p in parts], axis=axis))
            return
        self.concat(node, name, axis)

    def op_Cast(self, node, name, attrs):
        if self.is_const(node.input[0]):
            self.fold(node, lambda data: data)
            return
        import onnx

        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(int(attrs["to"])))
        x = self.name(node.input[0])
        if x not in self.client and dtype.kind == "f":
            self.bind(node.output[0], x)  # float to float: the engines compute in their own number type
            return
        self.client_step(node, ClientStep("cast", dtype=dtype.name))

    def data_reshape(self, node, name, new_full_shape):
        """Squeeze / Unsqueeze of a computed tensor: a Reshape, as long as the batch axis stays first."""
        x = self.name(node.input[0])
        if not self.lead:
            self.emit(Reshape(name, node.op_type, (x,), node.output[0], tuple(new_full_shape(self.shapes[x]))))
            return
        probe = (2, *self.shapes[x])  # a batch of 2 tells the batch axis apart from unit axes
        full = tuple(new_full_shape(probe))
        if not full or full[0] != 2:
            raise UnsupportedOperator(node.op_type, name, "moves or removes the batch axis")
        self.emit(Reshape(name, node.op_type, (x,), node.output[0], full[1:]))

    def op_Identity(self, node, name, attrs):
        if self.is_const(node.input[0]):
            self.const[node.output[0]] = self.const[node.input[0]]
            if node.input[0] in self.batch_mask:
                self.batch_mask[node.output[0]] = self.batch_mask[node.input[0]]
        else:
            self.alias[node.output[0]] = self.name(node.input[0])

    op_Dropout = op_Identity  # inference: the identity (its mask output, if any, is never read here)

    # -- rewrites into the description's nodes ----------------------------------------------------------------
    def internal(self, base: str, suffix: str) -> str:
        """A new tensor name for a rewrite's intermediate (fed to one node)."""
        tensor = f"{base}/{suffix}"
        while tensor in self.shapes or tensor in self.const:
            tensor += "'"
        self.uses[tensor] = 1
        return tensor

    def bind(self, out: str, tensor: str) -> None:
        """The source tensor ``out`` is the computed ``tensor`` (its consumers and graph-output role carried)."""
        self.alias[out] = tensor
        self.uses[tensor] = self.uses.get(tensor, 0) + self.uses.get(out, 0)
        if out in self.outputs:
            self.outputs += (tensor,)

    def select(self, name, op, x, axis, index_map) -> str:
        """y = x re-indexed along sample axis ``axis``: y[.., o, ..] = x[.., index_map[o], ..], zero where the
        entry is -1 (a constant 0/1 contraction, the public linear map of a slice, pad or concat); x itself
        where the map is the identity. Returns y's name."""
        shape = self.shapes[x]
        if list(index_map) == list(range(shape[axis])):
            return x
        weight = np.zeros((len(index_map), shape[axis]))
        for o, i in enumerate(index_map):
            if i >= 0:
                weight[o, i] = 1.0
        letters = _LETTERS[:len(shape)]
        equation = f"b{letters},z{letters[axis]}->b{letters.replace(letters[axis], 'z')}"
        out = self.internal(name, f"axis{axis + 1}")
        self.emit(Contraction(name, op, (x,), out, equation, weight, None, None,
                              (*shape[:axis], len(index_map), *shape[axis + 1:])))
        return out

    def shift_where(self, name, op, x, shift) -> str:
        """x + shift (a constant of x's sample shape), or x when the shift is zero."""
        if not np.any(shift):
            return x
        out = self.internal(name, "shift")
        self.affine(_Proxy(op, out), name, x, None, _compact(np.asarray(shift, dtype=np.float64)))
        return out

    def sample_axis(self, axis: int, rank: int, op: str, name: str) -> int:
        """The sample axis of the ONNX axis ``axis`` of a rank-``rank`` batch-first tensor (refusing the batch)."""
        axis = axis + rank if axis < 0 else axis
        if not 0 <= axis < rank:
            raise ModelFileError(f"{op} (node {name!r}): axis {axis} outside a tensor of rank {rank}")
        if axis == 0 and self.lead:
            raise UnsupportedOperator(op, name, "acts along the batch axis")
        return axis - self.lead

    def rank(self, tensor: str) -> int:
        """The ONNX rank of the computed ``tensor`` (its sample axes, and the batch axis unless read as one)."""
        return len(self.shapes[tensor]) + self.lead

    def concat(self, node, name, axis):
        """Concat with computed parts: each part placed by a 0/1 map into the output's shape, summed, and the
        constant parts added as a shift."""
        parts = [t for t in node.input if t]
        first = next(self.name(t) for t in parts if not self.is_const(t))
        rank = self.rank(first)
        k = self.sample_axis(axis, rank, "Concat", name)
        arrays = {}
        for t in parts:
            if self.is_const(t):
                array = np.asarray(self.const[t], dtype=np.float64)
                if array.ndim != rank or array.shape[0] != 1:
                    raise UnsupportedOperator("Concat", name, f"a constant part of shape {array.shape} (only a "
                                              f"batch of one, broadcast to every sample)")
                arrays[t] = array[0]
        sizes = [arrays[t].shape[k] if t in arrays else self.shapes[self.name(t)][k] for t in parts]
        total, offset, terms = sum(sizes), 0, []
        out_shape = list(self.shapes[first])
        out_shape[k] = total
        shift = np.zeros(out_shape)
        for t, size in zip(parts, sizes):
            if t in arrays:
                place = [slice(None)] * len(out_shape)
                place[k] = slice(offset, offset + size)
                shift[tuple(place)] = arrays[t]
            else:
                x = self.name(t)
                if tuple(np.delete(self.shapes[x], k)) != tuple(np.delete(out_shape, k)):
                    raise ModelFileError(f"Concat (node {name!r}): part {t!r} of shape {self.shapes[x]} does not "
                                         f"fit {tuple(out_shape)} off axis {axis}")
                terms.append(self.select(name, "Concat", x, k,
                                         [o - offset if offset <= o < offset + size else -1 for o in range(total)]))
            offset += size
        total_tensor = terms[0]
        for term in terms[1:]:
            out = self.internal(name, "sum")
            self.emit(Add(name, "Concat", (total_tensor, term), out))
            total_tensor = out
        self.bind(node.output[0], self.shift_where(name, "Concat", total_tensor, shift))

    def op_Slice(self, node, name, attrs):
        values = [self.const.get(t) if t else None for t in node.input[1:5]]
        if any(t and not self.is_const(t) for t in node.input[1:5]):
            raise UnsupportedOperator("Slice", name, "starts, ends, axes and steps must be constants")
        starts, ends = (np.asarray(v, dtype=np.int64).reshape(-1) for v in values[:2])
        data_rank = (np.ndim(self.const[node.input[0]]) if self.is_const(node.input[0])
                     else self.rank(self.name(node.input[0])))
        axes = (np.arange(len(starts)) if len(values) < 3 or values[2] is None
                else np.asarray(values[2], dtype=np.int64).reshape(-1))
        steps = (np.ones(len(starts), np.int64) if len(values) < 4 or values[3] is None
                 else np.asarray(values[3], dtype=np.int64).reshape(-1))
        if not len(starts) == len(ends) == len(axes) == len(steps) or np.any(steps == 0):
            raise ModelFileError(f"Slice (node {name!r}): starts, ends, axes, steps of lengths {len(starts)}, "
                                 f"{len(ends)}, {len(axes)}, {len(steps)} (steps never 0)")
        cuts = {int(a) + data_rank if a < 0 else int(a): slice(int(b), int(e), int(st))
                for a, b, e, st in zip(axes, starts, ends, steps)}
        if self.is_const(node.input[0]):
            self.fold(node, lambda data, *_: data[tuple(cuts.get(i, slice(None)) for i in range(np.ndim(data)))])
            return
        x = self.name(node.input[0])
        for axis, cut in sorted(cuts.items()):
            if axis == 0 and self.lead:
                if cut.indices(1 << 62) != (0, 1 << 62, 1):
                    raise UnsupportedOperator("Slice", name, "slices the batch axis")
                continue
            k = self.sample_axis(axis, data_rank, "Slice", name)
            index_map = list(range(*cut.indices(self.shapes[x][k])))
            if not index_map:
                raise ModelFileError(f"Slice (node {name!r}): the slice {cut} of axis {axis} is empty")
            x = self.select(name, "Slice", x, k, index_map)
        self.bind(node.output[0], x)

    def op_Split(self, node, name, attrs):
        """Split along one axis (attention's fused q, k, v projection): each output a Slice of the input, a
        public 0/1 map; the sizes from the ``split`` input (or attribute below opset 18), else ``num_outputs``
        equal parts (the last one smaller when the axis does not divide)."""
        outputs = list(node.output)
        axis = int(attrs.get("axis", 0))
        given = node.input[1] if len(node.input) > 1 and node.input[1] else None
        if given is not None and not self.is_const(given):
            raise UnsupportedOperator("Split", name, "the split sizes must be a constant")
        sizes = (np.asarray(self.const[given], dtype=np.int64).reshape(-1).tolist() if given is not None
                 else [int(v) for v in attrs["split"]] if "split" in attrs else None)
        if self.is_const(node.input[0]):
            data = np.asarray(self.const[node.input[0]])
            length = data.shape[axis]
        else:
            x = self.name(node.input[0])
            k = self.sample_axis(axis, self.rank(x), "Split", name)
            length = self.shapes[x][k]
        if sizes is None:
            part = -(-length // len(outputs))
            sizes = [min(part, length - i * part) for i in range(len(outputs))]
        if len(sizes) != len(outputs) or sum(sizes) != length or min(sizes) < 1:
            raise ModelFileError(f"Split (node {name!r}): sizes {sizes} into {len(outputs)} outputs do not split an "
                                 f"axis of length {length} into non-empty parts")
        offsets = np.cumsum([0] + sizes)
        for out, start, stop in zip(outputs, offsets[:-1], offsets[1:]):
            if not out:
                continue
            if self.is_const(node.input[0]):
                self.const[out] = np.take(data, np.arange(start, stop), axis=axis)
            else:
                self.bind(out, self.select(f"{name}/{out}", "Split", x, k, list(range(start, stop))))

    def op_Where(self, node, name, attrs):
        """Where(mask, a, b) with a constant condition: an attention mask (a, the scores, kept where the mask
        holds; b a constant of -inf or <= -1e9, torch's masked_fill) read by a Softmax alone is the Softmax's
        0/1 mask (the dropped entries weigh 0: exp(-1e9) is 0 in floating point); else y = m a + (1 - m) b,
        a public elementwise map (two of them and an Add when both branches are computed)."""
        condition, a, b = node.input[:3]
        if not self.is_const(condition):
            raise UnsupportedOperator("Where", name, "a condition computed from the input (only a constant "
                                      "condition, such as an attention mask, is a public map)")
        computed = [t for t in (a, b) if not self.is_const(t)]
        x = self.name(computed[0])
        where = f"Where (node {name!r})"
        mask = self.sample_const(np.asarray(self.const[condition]).astype(bool).astype(np.float64), x, where)
        if len(computed) == 2:
            if self.shapes[self.name(a)] != self.shapes[self.name(b)]:
                raise UnsupportedOperator("Where", name, f"branches of shapes {self.shapes[self.name(a)]} and "
                                          f"{self.shapes[self.name(b)]} (only of one shape)")
            kept, other = self.internal(name, "kept"), self.internal(name, "other")
            self.emit(Affine(name + "/kept", "Where", (self.name(a),), kept,
                             np.broadcast_to(mask, self.shapes[x]).copy(), None))
            self.emit(Affine(name + "/other", "Where", (self.name(b),), other,
                             np.broadcast_to(1.0 - mask, self.shapes[x]).copy(), None))
            self.emit(Add(name, "Where", (kept, other), node.output[0]))
            return
        data_first = not self.is_const(a)
        if not data_first:
            mask = 1.0 - mask
        fill = self.sample_const(self.const[b if data_first else a], x, where)
        shape = self.shapes[x]
        fill, mask = (np.broadcast_to(np.asarray(v, dtype=np.float64), shape) for v in (fill, mask))
        dropped = mask == 0
        if self.readers.get(node.output[0]) == ["Softmax"] and np.any(dropped) and \
                np.all(fill[dropped] <= _MASK_FILL) and np.all(np.isfinite(fill) | (fill == -np.inf)):
            self.softmax_masks[node.output[0]] = _compact(mask)
            self.bind(node.output[0], x)
            return
        if not np.all(np.isfinite(fill[dropped])):
            raise ModelFileError(f"{where}: a constant branch with NaN or infinite entries (only an attention mask "
                                 f"read by a Softmax alone may fill with -inf)")
        self.affine(node, name, x, _compact(mask), _compact(np.where(dropped, fill, 0.0)))

    def op_Pad(self, node, name, attrs):
        mode = attrs.get("mode", b"constant")
        mode = mode.decode() if isinstance(mode, bytes) else str(mode)
        if any(t and not self.is_const(t) for t in node.input[1:4]):
            raise UnsupportedOperator("Pad", name, "pads, constant_value and axes must be constants")
        pads = (np.asarray(self.const[node.input[1]] if len(node.input) > 1 and node.input[1] else attrs["pads"],
                           dtype=np.int64).reshape(-1))
        value = (float(np.asarray(self.const[node.input[2]]).reshape(-1)[0])
                 if len(node.input) > 2 and node.input[2] else float(attrs.get("value", 0.0)))
        if mode not in ("constant", "edge", "reflect", "wrap"):
            raise UnsupportedOperator("Pad", name, f"mode={mode!r}")
        data_rank = (np.ndim(self.const[node.input[0]]) if self.is_const(node.input[0])
                     else self.rank(self.name(node.input[0])))
        axes = (list(range(data_rank)) if len(node.input) < 4 or not node.input[3]
                else [int(a) + data_rank if a < 0 else int(a) for a in np.asarray(self.const[node.input[3]]).reshape(-1)])
        if len(pads) != 2 * len(axes):
            raise ModelFileError(f"Pad (node {name!r}): {len(pads)} pads for {len(axes)} axes")
        widths = {a: (int(pads[i]), int(pads[i + len(axes)])) for i, a in enumerate(axes)}
        if self.is_const(node.input[0]):
            raise UnsupportedOperator("Pad", name, "of a constant")
        if widths.get(0, (0, 0)) != (0, 0) and self.lead:
            raise UnsupportedOperator("Pad", name, "pads the batch axis")
        x = self.name(node.input[0])
        mask = np.ones(self.shapes[x])
        for axis, (lo, hi) in sorted(widths.items()):
            if (axis == 0 and self.lead) or (lo, hi) == (0, 0):
                continue
            k = self.sample_axis(axis, data_rank, "Pad", name)
            n = self.shapes[x][k]
            if n + lo + hi < 1 or mode == "reflect" and max(lo, hi) >= n:
                raise ModelFileError(f"Pad (node {name!r}): pads ({lo}, {hi}) of axis {axis} (size {n}) in mode "
                                     f"{mode}")
            index_map = [_pad_index(o - lo, n, mode) for o in range(n + lo + hi)]
            x = self.select(name, "Pad", x, k, index_map)
            taken = np.take(mask, [max(i, 0) for i in index_map], axis=k)
            mask = taken * np.reshape([i >= 0 for i in index_map], [-1 if d == k else 1 for d in range(mask.ndim)])
        self.bind(node.output[0], self.shift_where(name, "Pad", x, value * (1.0 - mask)) if mode == "constant" else x)

    def op_ConstantOfShape(self, node, name, attrs):
        if node.input[0] in self.batch_mask and np.any(self.batch_mask[node.input[0]]):
            raise UnsupportedOperator("ConstantOfShape", name, "a shape holding the batch size")
        value = attrs.get("value")
        fill = np.zeros(1, np.float32) if value is None else _tensor_array(value, self.helper, "ConstantOfShape")
        shape = [int(d) for d in np.asarray(self.const[node.input[0]]).reshape(-1)]
        require_size(shape, f"ConstantOfShape (node {name!r})")
        self.const[node.output[0]] = np.full(shape, fill.reshape(-1)[0], dtype=fill.dtype)

    def unit_batch_window(self, handler, node, name, attrs):
        """A window operator (Conv, the pools) in a graph read with its batch axis of 1 as a sample axis (lead 0):
        its input (1, C, ...) is read as the one sample (C, ...) the window takes (a Reshape drops the unit axis)
        and its output gets the unit axis back (a Reshape), so a ViT's patch embedding reads before attention
        whose transposes move the batch axis."""
        x = self.name(node.input[0])
        shape = self.shapes[x]
        if len(shape) not in (3, 4) or shape[0] != 1:
            raise UnsupportedOperator(node.op_type, name, f"a window on the sample shape {shape} in a graph whose "
                                                          f"batch axis moves (only (1, C, L) or (1, C, H, W))")
        sample = self.internal(name, "sample")
        self.emit(Reshape(name + "/sample", node.op_type, (x,), sample, shape[1:]))
        inner = self.internal(name, "window")
        self.lead = 1
        try:
            handler(_Proxy(node.op_type, inner, [sample, *node.input[1:]]), name, attrs)
        finally:
            self.lead = 0
        out = self.name(inner)
        self.emit(Reshape(name + "/unit_batch", node.op_type, (out,), node.output[0], (1, *self.shapes[out])))

    def one_d(self, node, name, attrs, handler):
        """Conv / AveragePool / MaxPool over a 1-D window: the sample (C, L) seen as (C, 1, L), the 2-D
        operator with a (1, k) window (the same sums), and the result seen as (C', L') again."""
        x = self.name(node.input[0])
        if len(self.shapes[x]) != 2:
            raise UnsupportedOperator(node.op_type, name, f"a 1-D window on the sample shape {self.shapes[x]} "
                                                          f"(only (C, L))")
        c, length = self.shapes[x]
        flat = self.internal(name, "as_2d")
        self.emit(Reshape(name + "/as_2d", node.op_type, (x,), flat, (c, 1, length)))
        two = dict(attrs)
        for key, first in (("kernel_shape", 1), ("strides", 1), ("dilations", 1)):
            if key in attrs:
                two[key] = [first, *attrs[key]]
        if "pads" in attrs:
            two["pads"] = [0, attrs["pads"][0], 0, attrs["pads"][1]]
        inputs = [flat, *node.input[1:]]
        if node.op_type == "Conv":
            weight = np.asarray(self.const[node.input[1]])
            inputs[1] = self.internal(node.input[1], "2d")
            self.const[inputs[1]] = weight.reshape(*weight.shape[:2], 1, *weight.shape[2:])
        wide = self.internal(name, "2d")
        handler(_Proxy(node.op_type, wide, inputs), name, two)
        out_c, _, out_length = self.shapes[self.name(wide)]
        self.emit(Reshape(name + "/as_1d", node.op_type, (self.name(wide),), node.output[0], (out_c, out_length)))

    def op_MaxPool(self, node, name, attrs):
        if len(node.output) > 1 and node.output[1]:
            raise UnsupportedOperator("MaxPool", name, "its Indices output")
        if len(attrs["kernel_shape"]) == 1:
            return self.one_d(node, name, attrs, self.op_MaxPool)
        x, shape, patches = self.window(node, name, attrs, attrs["kernel_shape"], ceil=True)
        self.emit(MaxPool(name, "MaxPool", (x,), node.output[0], patches))

    def op_GlobalMaxPool(self, node, name, attrs):
        x = self.name(node.input[0])
        shape = self.shapes[x]
        if len(shape) == 2:
            return self.one_d(node, name, {"kernel_shape": [shape[1]]}, self.op_MaxPool)
        self.op_MaxPool(node, name, {"kernel_shape": list(shape[1:])})

    def op_Clip(self, node, name, attrs):
        bounds = []
        for position, key in ((1, "min"), (2, "max")):
            if len(node.input) > position and node.input[position]:
                if not self.is_const(node.input[position]):
                    raise UnsupportedOperator("Clip", name, f"{key} must be a constant")
                value = np.asarray(self.const[node.input[position]], dtype=np.float64)
                if value.size != 1:
                    raise UnsupportedOperator("Clip", name, f"{key} of shape {value.shape} (only a scalar)")
                bounds.append(float(value.reshape(())))
            else:
                bounds.append(float(attrs[key]) if key in attrs else None)
        self.clip(node, name, *bounds)

    def clip(self, node, name, low, high):
        x = self.name(node.input[0])
        if low is not None and high is not None and low >= high:
            raise UnsupportedOperator(node.op_type, name, f"bounds ({low}, {high}) make every output {high}")
        if low is None and high is None:
            self.bind(node.output[0], x)
        elif low == 0.0 and high is None:
            self.emit(Activation(name, node.op_type, (x,), node.output[0], "relu"))
        else:
            self.emit(Activation(name, node.op_type, (x,), node.output[0], "clip", (low, high)))

    def min_max(self, node, name, pick):
        computed = [t for t in node.input if t and not self.is_const(t)]
        constants = [np.asarray(self.const[t], dtype=np.float64) for t in node.input if t and self.is_const(t)]
        if len(computed) != 1:
            raise UnsupportedOperator(node.op_type, name, f"of {len(computed)} computed tensors (only one and "
                                      f"constants)", "max(a, b) = b + relu(a - b), min(a, b) = a - relu(a - b)")
        if not constants or any(c.size != 1 for c in constants):
            raise UnsupportedOperator(node.op_type, name, "only with scalar constants",
                                      "a per-element bound: write max(x, c) = c + relu(x - c)")
        bound = float(pick([float(c.reshape(())) for c in constants]))
        self.clip(_Proxy(node.op_type, node.output[0], computed), name,
                  *((bound, None) if pick is max else (None, bound)))

    def op_Max(self, node, name, attrs):
        self.min_max(node, name, max)

    def op_Min(self, node, name, attrs):
        self.min_max(node, name, min)

    def op_LeakyRelu(self, node, name, attrs):
        """a x + (1 - a) relu(x): an affine shortcut plus a scaled ReLU branch (exact)."""
        alpha = float(attrs.get("alpha", 0.01))
        x = self.name(node.input[0])
        relu, branch, skip = (self.internal(name, s) for s in ("relu", "branch", "skip"))
        self.emit(Activation(name + "/relu", "LeakyRelu", (x,), relu, "relu"))
        self.emit(Affine(name + "/branch", "LeakyRelu", (relu,), branch, np.float64(1.0 - alpha), None))
        self.emit(Affine(name + "/skip", "LeakyRelu", (x,), skip, np.float64(alpha), None))
        self.emit(Add(name, "LeakyRelu", (branch, skip), node.output[0]))

    def op_HardSigmoid(self, node, name, attrs):
        """clip(a x + b, 0, 1)."""
        alpha, beta = float(attrs.get("alpha", 0.2)), float(attrs.get("beta", 0.5))
        x = self.name(node.input[0])
        inner = self.internal(name, "affine")
        self.affine(_Proxy("HardSigmoid", inner), name, x, np.float64(alpha), np.float64(beta))
        self.clip(_Proxy("HardSigmoid", node.output[0], [inner]), name, 0.0, 1.0)

    def op_ReduceMean(self, node, name, attrs):
        x = self.name(node.input[0])
        shape = self.shapes[x]
        if len(node.input) > 1 and node.input[1]:
            if not self.is_const(node.input[1]):
                raise UnsupportedOperator("ReduceMean", name, "axes must be a constant")
            axes = [int(a) for a in np.asarray(self.const[node.input[1]]).reshape(-1)]
        else:
            axes = [int(a) for a in attrs.get("axes", ())]
        if not axes:
            raise UnsupportedOperator("ReduceMean", name, "over every axis, the batch axis included")
        axes = sorted({self.sample_axis(a, self.rank(x), "ReduceMean", name) for a in axes})
        letters = _LETTERS[:len(shape)]
        reduced = "".join(letters[a] for a in axes)
        kept = "".join(letter for letter in letters if letter not in reduced)
        keepdims = int(attrs.get("keepdims", 1))
        out = tuple(1 if a in axes else d for a, d in enumerate(shape)) if keepdims else \
            tuple(d for a, d in enumerate(shape) if a not in axes)
        sizes = [shape[a] for a in axes]
        weight = np.full(sizes, 1.0 / int(np.prod(sizes)))
        self.emit(Contraction(name, "ReduceMean", (x,), node.output[0], f"b{letters},{reduced}->b{kept}", weight,
                              None, None, out or (1,)))

    # -- what the client computes after decryption (Graph.postprocess) -------------------------------------------
    def client_step(self, node, *steps, output=None) -> None:
        x = self.name(node.input[0])
        base, before = self.client.get(x, (x, ()))
        self.client[output or node.output[0]] = (base, before + steps)

    def op_Softmax(self, node, name, attrs):
        x = self.name(node.input[0])
        if x not in self.client and any(op not in _CLIENT_OPS for op in self.readers.get(node.output[0], ())):
            # read by the model's own operators (attention's weights): a node the engines compute
            axis = self.sample_axis(int(attrs.get("axis", -1)), self.rank(x), "Softmax", name)
            if axis != len(self.shapes[x]) - 1:
                raise UnsupportedOperator("Softmax", name, f"along sample axis {axis} of {self.shapes[x]} (only the "
                                          f"last axis)", "transpose the axis last before the Softmax")
            self.emit(Softmax(name, "Softmax", (x,), node.output[0], axis, self.softmax_masks.get(node.input[0])))
            return
        self.client_step(node, ClientStep("softmax", self.client_axis(node, name, int(attrs.get("axis", -1)))))

    def op_LogSoftmax(self, node, name, attrs):
        self.client_step(node, ClientStep("logsoftmax", self.client_axis(node, name, int(attrs.get("axis", -1)))))

    def op_ArgMax(self, node, name, attrs):
        if int(attrs.get("select_last_index", 0)):
            raise UnsupportedOperator("ArgMax", name, "select_last_index=1")
        axis = self.client_axis(node, name, int(attrs.get("axis", 0)))
        self.client_step(node, ClientStep("argmax", axis, keepdims=bool(int(attrs.get("keepdims", 1)))))

    def client_axis(self, node, name, axis) -> int:
        """``axis`` if it is a sample axis of the input (the client works batch first too)."""
        x = self.name(node.input[0])
        if x not in self.client:
            self.sample_axis(axis, self.rank(x), node.op_type, name)
        elif axis == 0 and self.lead:
            raise UnsupportedOperator(node.op_type, name, "acts along the batch axis")
        return axis + (1 - self.lead if axis >= 0 else 0)

    def op_Normalizer(self, node, name, attrs):
        norm = attrs.get("norm", b"MAX")
        norm = (norm.decode() if isinstance(norm, bytes) else str(norm)).lower()
        if norm not in ("l1", "l2", "max"):
            raise UnsupportedOperator("Normalizer", name, f"norm={norm!r}")
        self.client_step(node, ClientStep(f"normalize_{norm}"))

    def op_ZipMap(self, node, name, attrs):
        labels = _labels(attrs, "classlabels_int64s", "classlabels_strings")
        self.client_step(node, ClientStep("zipmap", labels=labels))

    def op_LinearClassifier(self, node, name, attrs):
        """Scores = x W^T + b, computed by the engines; the label (argmax, then the class label) and the
        probabilities (``post_transform``) by the client."""
        x, coefficients = self.linear_model(node, name, attrs)
        labels = _labels(attrs, "classlabels_ints", "classlabels_strings")
        transform = attrs.get("post_transform", b"NONE")
        transform = transform.decode() if isinstance(transform, bytes) else str(transform)
        post = {"NONE": (), "SOFTMAX": (ClientStep("softmax", -1),), "LOGISTIC": (ClientStep("sigmoid"),)}
        if transform not in post:
            raise UnsupportedOperator("LinearClassifier", name, f"post_transform={transform!r} (NONE, SOFTMAX, "
                                                                f"LOGISTIC are read)")
        if len(labels) < 2 or coefficients.shape[0] not in (1, len(labels)) or \
                coefficients.shape[0] == 1 and len(labels) != 2:
            raise ModelFileError(f"LinearClassifier (node {name!r}): {coefficients.shape[0]} rows of coefficients "
                                 f"for {len(labels)} class labels")
        scores = self.internal(name, "scores")
        self.emit_linear(node, name, x, coefficients, attrs, scores)
        binary = (ClientStep("binary"),) if coefficients.shape[0] == 1 else ()
        self.client[node.output[0]] = (scores, binary + (ClientStep("argmax", -1), ClientStep("labels", labels=labels)))
        if len(node.output) > 1 and node.output[1]:
            self.client[node.output[1]] = (scores, binary + post[transform])

    def op_LinearRegressor(self, node, name, attrs):
        transform = attrs.get("post_transform", b"NONE")
        if (transform.decode() if isinstance(transform, bytes) else str(transform)) != "NONE":
            raise UnsupportedOperator("LinearRegressor", name, f"post_transform={transform!r} (only NONE)")
        x, coefficients = self.linear_model(node, name, attrs)
        if coefficients.shape[0] != int(attrs.get("targets", 1)):
            raise ModelFileError(f"LinearRegressor (node {name!r}): {coefficients.shape[0]} rows of coefficients "
                                 f"for targets={attrs.get('targets', 1)}")
        self.emit_linear(node, name, x, coefficients, attrs, node.output[0])

    def linear_model(self, node, name, attrs):
        x = self.name(node.input[0])
        if len(self.shapes[x]) != 1:
            raise UnsupportedOperator(node.op_type, name, f"input sample shape {self.shapes[x]} (only (K,))")
        flat = np.asarray(attrs["coefficients"], dtype=np.float64)
        if flat.size % self.shapes[x][0] or not flat.size:
            raise ModelFileError(f"{node.op_type} (node {name!r}): {flat.size} coefficients for {self.shapes[x][0]} "
                                 f"features")
        return x, flat.reshape(-1, self.shapes[x][0])

    def emit_linear(self, node, name, x, coefficients, attrs, out):
        intercepts = attrs.get("intercepts")
        bias = None if not intercepts else np.broadcast_to(np.asarray(intercepts, dtype=np.float64),
                                                           (coefficients.shape[0],))
        self.emit(Contraction(name, node.op_type, (x,), out, "bk,nk->bn", coefficients, bias, None,
                              (coefficients.shape[0],)))

    def op_Scaler(self, node, name, attrs):
        """(x - offset) * scale (scikit-learn's StandardScaler)."""
        x = self.name(node.input[0])
        n = self.shapes[x][-1]
        offset = np.broadcast_to(np.asarray(attrs.get("offset", [0.0]), dtype=np.float64), (n,))
        scale = np.broadcast_to(np.asarray(attrs.get("scale", [1.0]), dtype=np.float64), (n,))
        self.affine(node, name, x, scale, -offset * scale)

    def op_Gemm(self, node, name, attrs):
        alpha, beta = float(attrs.get("alpha", 1.0)), float(attrs.get("beta", 1.0))
        trans_a, trans_b = int(attrs.get("transA", 0)), int(attrs.get("transB", 0))
        a, b = node.input[0], node.input[1]
        if self.is_const(a) or not self.is_const(b):
            raise UnsupportedOperator("Gemm", name, "the data must be operand A (batch first) and B a constant")
        if trans_a:
            raise UnsupportedOperator("Gemm", name, "transA=1 on the data operand would contract the batch axis")
        x = self.name(a)
        if len(self.shapes[x]) != 2 - self.lead:
            raise ModelFileError(f"Gemm (node {name!r}): input sample shape {self.shapes[x]} must be "
                                 f"{'(K,)' if self.lead else '(M, K)'}")
        weight = alpha * np.asarray(self.const[b], dtype=np.float64)
        weight = weight if trans_b else weight.T  # (N, K)
        bias = None
        if len(node.input) > 2 and node.input[2]:
            c = np.asarray(self.const.get(node.input[2], None) if self.is_const(node.input[2]) else np.nan)
            if not self.is_const(node.input[2]):
                raise UnsupportedOperator("Gemm", name, "C must be a constant")
            c = beta * c.astype(np.float64)
            if c.ndim == 2 and not self.lead:
                bias = np.broadcast_to(c, (self.shapes[x][0], weight.shape[0]))
            elif c.ndim == 2:
                if c.shape[0] != 1:
                    raise ModelFileError(f"Gemm (node {name!r}): C of shape {c.shape} varies along the batch axis")
                c = c[0]
            if bias is None:
                bias = np.broadcast_to(c, (weight.shape[0],))
        if not self.lead:
            self.emit(Contraction(name, "Gemm", (x,), node.output[0], "bmk,nk->bmn", weight, _compact(bias)
                                  if bias is not None else None, None, (self.shapes[x][0], weight.shape[0])))
            return
        self.emit(Contraction(name, "Gemm", (x,), node.output[0], "bk,nk->bn", weight, bias, None,
                              (weight.shape[0],)))

    def product(self, node, name, a, b, matrix: bool) -> None:
        """Emit the ``Bilinear`` of two computed tensors: MatMul (``matrix``: numpy's rules, the leading axes
        broadcast) or an elementwise Mul (broadcast). A size-1 axis facing a longer one gets a letter of its
        own, summed over its one value: broadcasting as an einsum."""
        a, b = self.name(a), self.name(b)
        sa, sb = self.shapes[a], self.shapes[b]
        if self.lead and len(sa) != len(sb):
            raise UnsupportedOperator(node.op_type, name, f"of computed tensors of sample shapes {sa} and {sb}: "
                                      f"numpy broadcasting would align the batch axis with a sample axis")
        tail = 2 if matrix else 0
        if matrix and min(len(sa), len(sb)) < 2:
            raise UnsupportedOperator(node.op_type, name, f"of computed tensors of sample shapes {sa} and {sb} "
                                      f"(only matrices, or stacks of them)")
        lead_a, lead_b = sa[:len(sa) - tail], sb[:len(sb) - tail]
        width = max(len(lead_a), len(lead_b))
        letters = iter(_LETTERS)
        ta, tb, out, out_shape = "", "", "", []
        for position in range(width):
            da = lead_a[position - width + len(lead_a)] if position >= width - len(lead_a) else None
            db = lead_b[position - width + len(lead_b)] if position >= width - len(lead_b) else None
            if da is not None and db is not None and da != db and 1 not in (da, db):
                raise ModelFileError(f"{node.op_type} (node {name!r}): sample shapes {sa} and {sb} do not "
                                     f"broadcast")
            shared = next(letters)
            wide = max(d for d in (da, db) if d is not None)
            for dim, term in ((da, "a"), (db, "b")):
                if dim is None:
                    continue
                letter = shared if dim == wide else next(letters)
                if term == "a":
                    ta += letter
                else:
                    tb += letter
            out += shared
            out_shape.append(wide)
        if matrix:
            m, k, n = next(letters), next(letters), next(letters)
            if sa[-1] != sb[-2]:
                raise ModelFileError(f"{node.op_type} (node {name!r}): sample shapes {sa} @ {sb}: {sa[-1]} != "
                                     f"{sb[-2]}")
            ta, tb, out = ta + m + k, tb + k + n, out + m + n
        self.emit(Bilinear(name, node.op_type, (a, b), node.output[0], f"b{ta},b{tb}->b{out}"))

    def op_Einsum(self, node, name, attrs):
        """Einsum of two operands: two computed tensors (a ``Bilinear``) or one computed and one constant (a
        ``Contraction``). The computed operands' batch axis is the letter that starts each of them and the
        output (read as a sample axis where the batch axis is one)."""
        equation = attrs["equation"]
        equation = (equation.decode() if isinstance(equation, bytes) else str(equation)).replace(" ", "")
        terms, arrow, result = equation.partition("->")
        terms = terms.split(",")
        if len(terms) != 2 or len(node.input) != 2 or "." in equation or not arrow:
            raise UnsupportedOperator("Einsum", name, f"equation {equation!r} (only two operands, an explicit "
                                      f"output, no ellipsis)")
        computed = [not self.is_const(t) for t in node.input]
        used = set(equation)
        spare = iter(c for c in _LETTERS if c not in used)
        if self.lead:
            batch = {terms[i][:1] for i in range(2) if computed[i]}
            if len(batch) != 1 or result[:1] not in batch or any(not computed[i] and batch & set(terms[i])
                                                                 for i in range(2)):
                raise UnsupportedOperator("Einsum", name, f"equation {equation!r} does not keep the batch axis "
                                          f"first on the computed operands and the output")
            letter = batch.pop()
            rename = {letter: "b", **({"b": next(spare)} if letter != "b" and "b" in used else {})}
            terms = ["".join(rename.get(c, c) for c in t) for t in terms]
            result = "".join(rename.get(c, c) for c in result)
        else:
            rename = {"b": next(spare)} if "b" in used else {}
            terms = [("b" if computed[i] else "") + "".join(rename.get(c, c) for c in t) for i, t in enumerate(terms)]
            result = "b" + "".join(rename.get(c, c) for c in result)
        if all(computed):
            self.emit(Bilinear(name, "Einsum", tuple(self.name(t) for t in node.input), node.output[0],
                               f"{terms[0]},{terms[1]}->{result}"))
            return
        data = computed.index(True)
        x, w = self.name(node.input[data]), np.asarray(self.const[node.input[1 - data]], dtype=np.float64)
        sizes = dict(zip(terms[data][1:], self.shapes[x]))
        sizes.update(zip(terms[1 - data], w.shape))
        out_shape = tuple(sizes[c] for c in result[1:]) or (1,)
        self.emit(Contraction(name, "Einsum", (x,), node.output[0], f"{terms[data]},{terms[1 - data]}->{result}", w,
                              None, None, out_shape))

    def op_Trilu(self, node, name, attrs):
        """The upper (``upper=1``, the default) or lower triangle of the last two axes from diagonal k (input 2,
        default 0), the rest zero: folded on a constant (torch's causal masks), a public 0/1 scale of a tensor."""
        k = 0
        if len(node.input) > 1 and node.input[1]:
            if not self.is_const(node.input[1]):
                raise UnsupportedOperator("Trilu", name, "the diagonal k must be a constant")
            k = int(np.asarray(self.const[node.input[1]]).reshape(()))
        triangle = np.triu if int(attrs.get("upper", 1)) else np.tril
        if self.is_const(node.input[0]):
            self.fold(node, lambda data, *_: triangle(data, k))
            return
        x = self.name(node.input[0])
        shape = self.shapes[x]
        if len(shape) < 2 and self.lead:  # the file's last two axes include the batch axis
            raise UnsupportedOperator("Trilu", name, f"on a tensor of sample shape {shape}: its triangle takes the "
                                                     f"batch axis")
        if len(shape) < 2:
            raise ModelFileError(f"Trilu (node {name!r}): a tensor of shape {shape} has no two last axes")
        self.affine(node, name, x, np.broadcast_to(triangle(np.ones(shape[-2:]), k), shape).copy(), None)

    def fold_constants(self, node, name, attrs):
        """An elementwise operator of ``_FOLDS`` on constants only (shape arithmetic): its value."""
        self.fold(node, _FOLDS[node.op_type])

    def op_Gather(self, node, name, attrs):
        axis = int(attrs.get("axis", 0))
        index = self.const.get(node.input[1])
        if self.is_const(node.input[0]):
            self.fold(node, lambda data, *_: np.take(data, np.asarray(index, dtype=np.int64), axis=axis))
            return
        if index is None:
            raise UnsupportedOperator("Gather", name, "the indices must be a constant")
        x = self.name(node.input[0])
        k = self.sample_axis(axis, self.rank(x), "Gather", name)
        index = np.asarray(index, dtype=np.int64)
        size = self.shapes[x][k]
        if index.ndim > 1 or np.any(index < -size) or np.any(index >= size):
            raise ModelFileError(f"Gather (node {name!r}): indices {index.tolist()} of axis {axis} (size {size}): "
                                 f"only a scalar or a vector of indices in range")
        picked = self.select(name, "Gather", x, k, [int(i) % size for i in index.reshape(-1)]) if \
            index.ndim or size > 1 else x
        if index.ndim:
            self.bind(node.output[0], picked)
            return
        shape = self.shapes[picked]
        self.emit(Reshape(name + "/squeeze", "Gather", (picked,), node.output[0], shape[:k] + shape[k + 1:] or (1,)))

    def op_LayerNormalization(self, node, name, attrs):
        if any(node.output[1:]):
            raise UnsupportedOperator("LayerNormalization", name, "its Mean and InvStdDev outputs")
        x = self.name(node.input[0])
        axis = self.sample_axis(int(attrs.get("axis", -1)), self.rank(x), "LayerNormalization", name)
        arrays = []
        for position in (1, 2):
            tensor = node.input[position] if len(node.input) > position else ""
            if tensor and not self.is_const(tensor):
                raise UnsupportedOperator("LayerNormalization", name, "Scale and B must be constants")
            arrays.append(np.asarray(self.const[tensor], dtype=np.float64) if tensor else None)
        self.emit(LayerNorm(name, "LayerNormalization", (x,), node.output[0], axis,
                            float(attrs.get("epsilon", 1e-5)), *arrays))

    def op_MatMul(self, node, name, attrs):
        if not self.is_const(node.input[0]) and not self.is_const(node.input[1]):
            self.product(node, name, node.input[0], node.input[1], matrix=True)
            return
        x, w, data_first = self.data_and_const(node, name)
        shape, w = self.shapes[x], np.asarray(w, dtype=np.float64)
        if w.ndim != 2:
            raise UnsupportedOperator("MatMul", name, f"a constant operand of shape {w.shape} (only matrices)")
        if data_first:  # (..., K) @ (K, N)
            lead = _LETTERS[:len(shape) - 1]
            equation = f"b{lead}k,kn->b{lead}n"
            if shape[-1] != w.shape[0]:
                raise ModelFileError(f"MatMul (node {name!r}): sample shape {shape} does not end in {w.shape[0]}")
            out = (*shape[:-1], w.shape[1])
        else:  # (M, K) @ (..., K, N): the data needs a batch-free matrix part
            if len(shape) < 2:
                raise UnsupportedOperator("MatMul", name, "a constant times a batch of vectors contracts the batch")
            lead = _LETTERS[:len(shape) - 2]
            equation = f"b{lead}kn,mk->b{lead}mn"
            out = (*shape[:-2], w.shape[0], shape[-1])
        self.emit(Contraction(name, "MatMul", (x,), node.output[0], equation, w, None, None, out))

    def window(self, node, name, attrs, kernel, ceil=False):
        """(x, its sample shape, the Patches) of a 2-D window operator; ``ceil``: ceil_mode=1 is read as the
        extra bottom / right padding that gives the same windows (a MaxPool's padding never wins)."""
        if len(kernel) != 2:
            raise UnsupportedOperator(node.op_type, name, f"only 1-D and 2-D windows (kernel_shape {tuple(kernel)})")
        stride = tuple(attrs.get("strides", (1, 1)))
        dilation = tuple(attrs.get("dilations", (1, 1)))
        pads = tuple(attrs.get("pads", (0, 0, 0, 0)))
        auto_pad = attrs.get("auto_pad", b"NOTSET")
        auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else str(auto_pad)
        x = self.name(node.input[0])
        shape = self.shapes[x]
        if not self.lead:
            raise UnsupportedOperator(node.op_type, name, "a window in a graph whose batch axis moves (read as a "
                                                          "sample axis): export with a dynamic batch axis")
        if len(shape) != 3:
            raise UnsupportedOperator(node.op_type, name, f"input sample shape {shape} is not (C, H, W)")
        if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            pads = [0] * 4
            for axis, (size, k, s, d) in enumerate(zip(shape[1:], kernel, stride, dilation)):
                total = max(0, (-(-size // s) - 1) * s + d * (k - 1) + 1 - size)
                small, big = total // 2, total - total // 2
                pads[axis], pads[axis + 2] = (small, big) if auto_pad == "SAME_UPPER" else (big, small)
        elif auto_pad == "VALID":
            pads = (0, 0, 0, 0)
        elif auto_pad != "NOTSET":
            raise UnsupportedOperator(node.op_type, name, f"auto_pad={auto_pad!r}")
        if int(attrs.get("ceil_mode", 0)):
            if not ceil:
                raise UnsupportedOperator(node.op_type, name, "ceil_mode=1", "export with ceil_mode=False after "
                                          "padding the input by the missing rows (Pad, read)")
            pads = list(pads)
            for axis, (size, k, s, d) in enumerate(zip(shape[1:], kernel, stride, dilation)):
                span = size + pads[axis] + pads[axis + 2] - d * (k - 1) - 1
                count = -(-span // s) + 1
                if (count - 1) * s >= size + pads[axis]:  # the last window must start inside the input
                    count -= 1
                pads[axis + 2] += max(0, (count - 1) * s - span)
        patches = Patches(tuple(kernel), stride, tuple(pads), dilation, int(attrs.get("group", 1)))
        require_size((shape[0], *patches.kernel, *patches.output_hw(*shape[1:])),  # before any window is built
                     f"{node.op_type} (node {name!r}) windows")
        return x, shape, patches

    def op_Conv(self, node, name, attrs):
        if not self.is_const(node.input[1]):
            raise UnsupportedOperator("Conv", name, "the weight W must be a constant")
        w = np.asarray(self.const[node.input[1]], dtype=np.float64)
        if len(attrs.get("kernel_shape", w.shape[2:])) == 1:
            return self.one_d(node, name, attrs, self.op_Conv)
        x, shape, patches = self.window(node, name, attrs, attrs.get("kernel_shape", w.shape[2:]))
        groups, (out_c, in_c) = patches.groups, w.shape[:2]
        if out_c % groups or shape[0] != in_c * groups:
            raise ModelFileError(f"Conv (node {name!r}): weight {w.shape} with group={groups} does not fit "
                                 f"{shape[0]} input channels")
        weight = w.reshape(groups, out_c // groups, in_c, *w.shape[2:])
        bias = None
        if len(node.input) > 2 and node.input[2]:
            if not self.is_const(node.input[2]):
                raise UnsupportedOperator("Conv", name, "the bias B must be a constant")
            bias = np.asarray(self.const[node.input[2]], dtype=np.float64).reshape(out_c, 1, 1)
        oh, ow = patches.output_hw(*shape[1:])
        self.emit(Contraction(name, "Conv", (x,), node.output[0], "bgcuvij,gocuv->bgoij", weight, bias, patches,
                              (out_c, oh, ow)))

    def op_AveragePool(self, node, name, attrs):
        if len(attrs["kernel_shape"]) == 1:
            return self.one_d(node, name, attrs, self.op_AveragePool)
        x, shape, patches = self.window(node, name, attrs, attrs["kernel_shape"])
        kh, kw = patches.kernel
        oh, ow = patches.output_hw(*shape[1:])
        if any(patches.pads) and not int(attrs.get("count_include_pad", 0)):
            # windows count only the input's own pixels: 1 / (real pixels in window (i, j))
            ones = patches.apply(np.ones((1, 1, *shape[1:])))[0, 0, 0]  # (kh, kw, Ho, Wo)
            weight = np.broadcast_to(1.0 / ones.sum(axis=(0, 1)), ones.shape)
            equation = "bgcuvij,uvij->bgcij"
        else:
            weight, equation = np.full((kh, kw), 1.0 / (kh * kw)), "bgcuvij,uv->bgcij"
        self.emit(Contraction(name, "AveragePool", (x,), node.output[0], equation, weight, None, patches,
                              (shape[0], oh, ow)))

    def op_GlobalAveragePool(self, node, name, attrs):
        x = self.name(node.input[0])
        shape = self.shapes[x]
        if len(shape) == 2:  # (C, L)
            self.emit(Contraction(name, "GlobalAveragePool", (x,), node.output[0], "bcl,l->bc",
                                  np.full(shape[1:], 1.0 / shape[1]), None, None, (shape[0], 1)))
            return
        if len(shape) != 3:
            raise UnsupportedOperator("GlobalAveragePool", name, f"input sample shape {shape} is not (C, H, W)")
        weight = np.full(shape[1:], 1.0 / (shape[1] * shape[2]))
        self.emit(Contraction(name, "GlobalAveragePool", (x,), node.output[0], "bchw,hw->bc", weight, None, None,
                              (shape[0], 1, 1)))

    def affine(self, node, name, x, scale, shift):
        """Emit x * scale + shift, folded into the contraction (or affine node) that produced x if that
        node feeds nothing else."""
        index = self.producer.get(x)
        previous = None if index is None else self.nodes[index]
        if previous is not None and self.sole_use(x) and isinstance(previous, Affine):
            old_scale = 1.0 if previous.scale is None else previous.scale
            old_shift = 0.0 if previous.shift is None else previous.shift
            new_scale = old_scale * (1.0 if scale is None else scale)
            new_shift = old_shift * (1.0 if scale is None else scale) + (0.0 if shift is None else shift)
            self.replace(x, Affine(previous.name, previous.op, previous.inputs, node.output[0],
                                   None if scale is None and previous.scale is None else new_scale,
                                   None if shift is None and previous.shift is None else new_shift))
            return
        if previous is not None and self.sole_use(x) and isinstance(previous, Contraction):
            folded = _fold_into(previous, self.shapes[previous.inputs[0]], scale, shift, node.output[0])
            if folded is not None:
                self.replace(x, folded)
                return
        self.emit(Affine(name, node.op_type, (x,), node.output[0], scale, shift))

    def elementwise_const(self, node, name):
        x, c, data_first = self.data_and_const(node, name)
        c = self.sample_const(c, x, f"{node.op_type} (node {name!r})")
        return x, c, data_first

    def op_Add(self, node, name, attrs):
        a, b = node.input[0], node.input[1]
        if not self.is_const(a) and not self.is_const(b):
            self.emit(Add(name, "Add", (self.name(a), self.name(b)), node.output[0]))
            return
        x, c, _ = self.elementwise_const(node, name)
        c = np.asarray(c, dtype=np.float64)
        dropped = (c == -np.inf) | (c <= _MASK_FILL)
        if np.any(dropped) and np.all(np.isfinite(c) | (c == -np.inf)) \
                and self.readers.get(node.output[0]) == ["Softmax"]:
            # an attention mask (-inf or a fill <= _MASK_FILL such as torch's finfo.min: dropped) read by a Softmax
            # alone: its other entries a shift, its dropped entries the Softmax's 0/1 mask
            self.softmax_masks[node.output[0]] = (~dropped).astype(np.float64)
            c = np.where(dropped, 0.0, c)
        self.affine(node, name, x, None, c)

    def op_Sub(self, node, name, attrs):
        a, b = node.input[0], node.input[1]
        if not self.is_const(a) and not self.is_const(b):  # a + (-1) b
            negated = self.internal(name, "negated")
            self.emit(Affine(name + "/negate", "Sub", (self.name(b),), negated, np.float64(-1.0), None))
            self.emit(Add(name, "Sub", (self.name(a), negated), node.output[0]))
            return
        x, c, data_first = self.elementwise_const(node, name)
        self.affine(node, name, x, None if data_first else np.full(self.shapes[x], -1.0),
                    -c if data_first else c)

    def op_Mul(self, node, name, attrs):
        a, b = (self.name(t) if not self.is_const(t) else t for t in node.input[:2])
        if a == b and not self.is_const(a):
            self.emit(Activation(name, "Mul", (a,), node.output[0], "square"))
            return
        if not self.is_const(a) and not self.is_const(b):
            for x, s in ((a, b), (b, a)):
                index = self.producer.get(s)
                sig = None if index is None else self.nodes[index]
                if isinstance(sig, Activation) and sig.function == "sigmoid" and sig.inputs == (x,) \
                        and self.sole_use(s):
                    self.replace(s, Activation(sig.name, "Mul", (x,), node.output[0], "silu"))
                    return
        x, c, _ = self.elementwise_const(node, name)
        self.affine(node, name, x, c, None)

    def op_Div(self, node, name, attrs):
        x, c, data_first = self.elementwise_const(node, name)
        if not data_first:
            raise UnsupportedOperator("Div", name, "a constant divided by a tensor")
        self.affine(node, name, x, 1.0 / c, None)

    def op_Pow(self, node, name, attrs):
        exponent = self.const.get(node.input[1])
        if exponent is None or np.asarray(exponent).size != 1 or float(np.asarray(exponent).reshape(())) != 2.0:
            raise UnsupportedOperator("Pow", name, "only Pow(x, 2) (square)")
        self.emit(Activation(name, "Pow", (self.name(node.input[0]),), node.output[0], "square"))

    def activation(self, node, name, function):
        self.emit(Activation(name, node.op_type, (self.name(node.input[0]),), node.output[0], function))

    def univariate(self, node, name, attrs):
        """An elementwise activation read by name (``UNIVARIATE``), no attributes."""
        self.activation(node, name, UNIVARIATE[node.op_type])

    def op_Elu(self, node, name, attrs):
        self._default_parameters(node, name, attrs, {"alpha": 1.0})
        self.activation(node, name, "elu")

    def op_Celu(self, node, name, attrs):  # celu with alpha 1 is elu
        self._default_parameters(node, name, attrs, {"alpha": 1.0})
        self.activation(node, name, "elu")

    def op_Selu(self, node, name, attrs):
        self._default_parameters(node, name, attrs, {"alpha": SELU_ALPHA, "gamma": SELU_SCALE})
        self.activation(node, name, "selu")

    @staticmethod
    def _default_parameters(node, name, attrs, defaults: dict) -> None:
        """Refuse an activation whose attributes differ from ``defaults`` (the functions are read by name)."""
        for key, default in defaults.items():
            value = float(attrs.get(key, default))
            if abs(value - default) > 1e-6 * max(1.0, abs(default)):
                raise UnsupportedOperator(node.op_type, name, f"{key}={value:g}: only the default {key}={default:g} "
                                          f"is read (write the activation with its default parameters)")

    def op_Gelu(self, node, name, attrs):
        approximate = attrs.get("approximate", b"none")
        approximate = approximate.decode() if isinstance(approximate, bytes) else str(approximate)
        self.activation(node, name, "gelu_tanh" if approximate == "tanh" else "gelu")

    def op_BatchNormalization(self, node, name, attrs):
        if int(attrs.get("training_mode", 0)) or len(node.output) > 1 and any(node.output[1:]):
            raise UnsupportedOperator("BatchNormalization", name, "training mode")
        if not all(self.is_const(t) for t in node.input[1:5]):
            raise UnsupportedOperator("BatchNormalization", name, "scale, B, mean and var must be constants")
        gamma, beta, mean, var = (np.asarray(self.const[t], dtype=np.float64) for t in node.input[1:5])
        x = self.name(node.input[0])
        eps = float(attrs.get("epsilon", 1e-5))
        expand = (slice(None),) + (None,) * (len(self.shapes[x]) - 1)
        factor = gamma / np.sqrt(var + eps)
        self.affine(node, name, x, factor[expand], (beta - factor * mean)[expand])

    def op_Flatten(self, node, name, attrs):
        x = self.name(node.input[0])
        axis, shape = int(attrs.get("axis", 1)), self.shapes[x]
        if not self.lead:
            axis = axis + len(shape) if axis < 0 else axis
            self.emit(Reshape(name, "Flatten", (x,), node.output[0],
                              (int(np.prod(shape[:axis])), int(np.prod(shape[axis:])))))
            return
        axis = axis + len(shape) + 1 if axis < 0 else axis
        if axis < 1:
            raise UnsupportedOperator("Flatten", name, f"axis={axis} merges the batch axis")
        target = ((int(np.prod(shape)),) if axis == 1
                  else (int(np.prod(shape[:axis - 1])), int(np.prod(shape[axis - 1:]))))
        self.emit(Reshape(name, "Flatten", (x,), node.output[0], target))

    def op_ArrayFeatureExtractor(self, node, name, attrs):
        """classes[argmax] (skl2onnx's label of an MLPClassifier and other non-linear classifiers): the class
        labels of a constant array at the indices the client's argmax gives, a client step."""
        classes, index = node.input[0], self.name(node.input[1])
        steps = self.client.get(index, (None, ()))[1]
        if not self.is_const(classes) or not steps or steps[-1].function != "argmax":
            raise UnsupportedOperator("ArrayFeatureExtractor", name, "only a constant array of class labels indexed "
                                      "by an ArgMax at the end of the graph (a classifier's label) is read")
        labels = np.asarray(self.const[classes]).reshape(-1)
        labels = tuple(v.decode() if isinstance(v, bytes) else v.item() if hasattr(v, "item") else v for v in labels)
        base, before = self.client[index]
        self.client[node.output[0]] = (base, before + (ClientStep("labels", labels=labels),))

    def client_reshape(self, node, name) -> None:
        """Reshape of what the client computes: only the flattening of a per-sample label or index of one
        entry (skl2onnx's Reshape(labels, [-1])), read as an argmax without its kept axis."""
        base, steps = self.client[self.name(node.input[0])]
        target = np.asarray(self.const.get(node.input[1], [0, 0])).reshape(-1).tolist()
        argmax = [i for i, step in enumerate(steps) if step.function == "argmax"]
        if target != [-1] or not argmax or not all(s.function in ("labels", "cast") for s in steps[argmax[-1] + 1:]):
            raise UnsupportedOperator("Reshape", name, f"reshapes {node.input[0]!r}, which the client computes "
                                      f"after decryption (only a label's Reshape to [-1] is read)")
        steps = list(steps)
        steps[argmax[-1]] = dataclasses.replace(steps[argmax[-1]], keepdims=False)
        self.client[node.output[0]] = (base, tuple(steps))

    def op_Reshape(self, node, name, attrs):
        if self.name(node.input[0]) in self.client:
            return self.client_reshape(node, name)
        if self.is_const(node.input[0]) and self.is_const(node.input[1]):
            target = [int(v) for v in np.asarray(self.const[node.input[1]]).reshape(-1)]
            self.fold(node, lambda data, *_: np.reshape(data, [np.shape(data)[i] if v == 0 and not
                                                               int(attrs.get("allowzero", 0)) else v
                                                               for i, v in enumerate(target)]))
            return
        x = self.name(node.input[0])
        if not self.is_const(node.input[1]):
            raise UnsupportedOperator("Reshape", name, "the target shape must be a constant")
        target = [int(v) for v in np.asarray(self.const[node.input[1]]).reshape(-1)]
        if not self.lead:  # the whole tensor is the sample
            target = [0] + target
        mask = self.batch_mask.get(node.input[1])
        if mask is not None and (np.any(mask.reshape(-1)[1:]) or target[0] != 0):
            raise UnsupportedOperator("Reshape", name, "puts the batch size elsewhere than the first axis")
        shape = self.shapes[x]
        if not target:
            raise ModelFileError(f"Reshape (node {name!r}): an empty target shape")
        sample = target[1:]
        if target[0] not in (0, -1) and target[0] < 1:
            raise ModelFileError(f"Reshape (node {name!r}): target {target} has a batch entry {target[0]}")
        if target[0] == -1 and -1 in sample:
            raise ModelFileError(f"Reshape (node {name!r}): target {target} has two -1 entries")
        zero = not int(attrs.get("allowzero", 0))
        sample = [shape[i] if (v == 0 and zero and i < len(shape)) else v for i, v in enumerate(sample)]
        if -1 in sample:
            known = int(np.prod([v for v in sample if v != -1]))
            sample[sample.index(-1)] = int(np.prod(shape)) // max(known, 1)
        if self.lead and target[0] not in (0, 1) and math.prod(sample) != math.prod(shape):
            # e.g. (1, heads, s, s) -> (heads, s, s): the file's batch of 1 merged into a sample axis
            raise UnsupportedOperator("Reshape", name, f"target {tuple(target)} merges the batch axis with sample "
                                                       f"axes of {shape}")
        self.emit(Reshape(name, "Reshape", (x,), node.output[0], tuple(sample)))

    def op_Transpose(self, node, name, attrs):
        if self.is_const(node.input[0]):
            self.fold(node, lambda data: np.transpose(data, attrs.get("perm")))
            return
        x = self.name(node.input[0])
        shape = self.shapes[x]
        perm = tuple(attrs.get("perm", tuple(range(len(shape) - self.lead, -1, -1))))
        if not self.lead:
            self.emit(Transpose(name, "Transpose", (x,), node.output[0], perm))
            return
        if not perm or perm[0] != 0:
            raise UnsupportedOperator("Transpose", name, f"perm={perm} moves the batch axis")
        self.emit(Transpose(name, "Transpose", (x,), node.output[0], tuple(p - 1 for p in perm[1:])))


class _Proxy:
    """A stand-in for an ONNX node inside a rewrite: its ``op_type``, one output and its inputs."""

    def __init__(self, op_type, output, inputs=()):
        self.op_type, self.output, self.input = op_type, [output], list(inputs)


def _pad_index(i: int, n: int, mode: str) -> int:
    """The input index an output of Pad reads at position i of an axis of size n (-1: the constant)."""
    if 0 <= i < n:
        return i
    if mode == "constant":
        return -1
    if mode == "edge":
        return min(max(i, 0), n - 1)
    if mode == "wrap":
        return i % n
    period = 2 * (n - 1) if n > 1 else 1  # reflect, the edge itself not repeated
    i %= period
    return i if i < n else period - i


def _labels(attrs, ints: str, strings: str) -> tuple:
    if attrs.get(ints):
        return tuple(int(v) for v in attrs[ints])
    return tuple(v.decode() if isinstance(v, bytes) else str(v) for v in attrs.get(strings, ()))


def _fold_into(previous: Contraction, in_shape, scale, shift, output: str):
    """``previous`` followed by x * scale + shift as one contraction, or None where the scale varies along
    an axis the weight does not carry (then the affine stays a node of its own)."""
    out_shape = previous.out_shape
    bias = previous.bias
    if scale is not None:
        operands, result = previous.equation.split("->")
        w_letters = operands.split(",")[1]
        einsum_shape = previous.einsum_shape(in_shape)
        full = np.broadcast_to(scale, out_shape).reshape(einsum_shape)
        keep = [axis for axis in range(full.ndim) if not np.all(full == full.take([0], axis=axis))]
        letters = [result[1 + axis] for axis in keep]
        if any(letter not in w_letters for letter in letters):
            return None
        reduced = full[tuple(slice(None) if axis in keep else 0 for axis in range(full.ndim))]
        weight = np.einsum(f"{w_letters},{''.join(letters)}->{w_letters}", previous.weight, reduced)
        bias = None if bias is None else bias * scale
    else:
        weight = previous.weight
    if shift is not None:
        bias = shift if bias is None else bias + shift
    if bias is not None:
        bias = _compact(np.broadcast_to(bias, np.broadcast_shapes(np.shape(bias), (1,) * len(out_shape))))
    return Contraction(previous.name, previous.op, previous.inputs, output, previous.equation, weight, bias,
                       previous.patches, out_shape)


def _compact(array: np.ndarray) -> np.ndarray:
    """``array`` with the axes it is constant along kept at length 1 (a per-channel bias stays (C, 1, 1))."""
    for axis in range(array.ndim):
        if array.shape[axis] > 1 and np.all(array == array.take([0], axis=axis)):
            array = array.take([0], axis=axis)
    return np.ascontiguousarray(array)
