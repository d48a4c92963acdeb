"""Bring your own model: one ONNX file, the same network to both halves of hezk.

1. make a small MLP in ONNX: with PyTorch when it is installed (``torch.onnx.export``, torch stays optional),
   else the same graph with ``onnx.helper``;
2. read it into the shared model description (``hezk.model``): its nodes, each contraction an einsum, and
   its digest (the model's identity, carried by plans, requests and replies);
3. encrypted inference of the x^2 model: ``python -m tensor_ops infer --model mlp_square.onnx`` does the same;
4. a zero-knowledge proof of the ReLU model: ``python -m proofs commit | prove | verify --model mlp_relu.onnx``;
5. what a path cannot run is refused by name (a convolution, refused by the MLP proof loader used above: the
   graph proofs, ``python -m proofs commit | prove | verify --model cnn.onnx``, prove it; bare weights that
   name no activation are refused by both halves).

Run: python examples/onnx_models.py   (HEZK_QUICK=1 for a smaller model; files in ./out/, or HEZK_OUT=dir)
"""
import os
import pathlib

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import hezk.model
from proofs import Network
from proofs.layers.network import verify_network
from proofs.model import load_model as load_proof_model
from proofs.quantize import dequantize_output, quantize_input
from tensor_ops.inference import Client, Server
from tensor_ops.nn import Sequential

QUICK = os.environ.get("HEZK_QUICK") == "1"
OUT = pathlib.Path(os.environ.get("HEZK_OUT", "out"))
SIZES = (16, 8, 4) if QUICK else (64, 32, 10)


def weights(seed=0):
    rng = np.random.default_rng(seed)
    return [(rng.normal(0, 1 / np.sqrt(n_in), (n_out, n_in)), rng.normal(0, .1, n_out))
            for n_in, n_out in zip(SIZES, SIZES[1:])]


def torch_export(layers, activation, path) -> bool:
    """``torch.onnx.export`` of the MLP; False when PyTorch is not installed."""
    try:
        import torch
    except ImportError:
        return False

    class Square(torch.nn.Module):
        def forward(self, x):
            return x * x

    modules = []
    for i, (w, b) in enumerate(layers):
        linear = torch.nn.Linear(w.shape[1], w.shape[0])
        linear.weight.data = torch.tensor(w, dtype=torch.float32)
        linear.bias.data = torch.tensor(b, dtype=torch.float32)
        modules.append(linear)
        if i < len(layers) - 1:
            modules.append(Square() if activation == "square" else torch.nn.ReLU())
    arguments = dict(input_names=["x"], output_names=["y"], dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}},
                     opset_version=17)
    net, sample = torch.nn.Sequential(*modules).eval(), torch.zeros(1, SIZES[0])
    try:  # the TorchScript exporter (torch >= 2.5 names it dynamo=False; older versions have no such option)
        torch.onnx.export(net, sample, str(path), dynamo=False, **arguments)
    except TypeError:
        torch.onnx.export(net, sample, str(path), **arguments)
    return True


def helper_export(layers, activation, path) -> None:
    """The same graph as the PyTorch export, written with onnx.helper: Gemm (transB=1), activation, Gemm."""
    nodes, inits, x = [], [], "x"
    for i, (w, b) in enumerate(layers):
        inits += [numpy_helper.from_array(w.astype(np.float32), f"w{i}"),
                  numpy_helper.from_array(b.astype(np.float32), f"b{i}")]
        nodes.append(helper.make_node("Gemm", [x, f"w{i}", f"b{i}"], [f"fc{i}"], name=f"fc{i}", transB=1))
        x = f"fc{i}"
        if i < len(layers) - 1:
            inputs = [x, x] if activation == "square" else [x]
            nodes.append(helper.make_node("Mul" if activation == "square" else "Relu", inputs, [f"a{i}"],
                                          name=f"{activation}{i}"))
            x = f"a{i}"
    graph = helper.make_graph(nodes, "mlp",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", SIZES[0]])],
                              [helper.make_tensor_value_info(x, TensorProto.FLOAT, ["batch", SIZES[-1]])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    layers = weights()
    paths = {activation: OUT / f"mlp_{activation}.onnx" for activation in ("square", "relu")}
    for activation, path in paths.items():
        how = "torch.onnx.export"
        if not torch_export(layers, activation, path):
            helper_export(layers, activation, path)
            how = "onnx.helper (PyTorch is not installed)"
        print(f"1. {path} written by {how}")

    graph = hezk.model.load(paths["square"])
    print("2. the model description both halves read:\n   " + graph.summary().replace("\n", "\n   "))
    print(f"   digest {graph.digest().hex()}")

    x = np.random.default_rng(1).uniform(-1, 1, (4, SIZES[0]))
    model = Sequential.load(paths["square"])
    client = Client(model=model)
    server = Server(model, client.public_context())
    y = client.decrypt(server.evaluate(client.encrypt(x)))
    want = graph.forward(x)
    print(f"3. encrypted inference (x^2 model): output {y.shape}, largest error {np.abs(y - want).max():.2e} "
          f"(relative {np.abs(y - want).max() / np.abs(want).max():.1e}); plan digest = description digest: "
          f"{client.plan.model == graph.digest().hex()}")

    quantized = load_proof_model(paths["relu"])
    network = Network(quantized)
    xq = quantize_input(quantized, x)
    output = verify_network(network.commitment, xq, network.prove(xq)).output  # a truthy Verdict
    relu = hezk.model.load(paths["relu"]).forward(x)
    print(f"4. proof of the ReLU model verified; proven output within "
          f"{np.abs(dequantize_output(quantized, output) - relu).max():.3f} of the float model "
          f"(stated bound {quantized.error_bound:.3f})")

    cnn = OUT / "cnn.onnx"
    conv = helper.make_node("Conv", ["x", "w"], ["y"], name="conv1", kernel_shape=[3, 3])
    onnx.save(helper.make_model(helper.make_graph(
        [conv], "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 1, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 2, 4, 4])],
        [numpy_helper.from_array(np.ones((2, 1, 3, 3), np.float32), "w")]),
        opset_imports=[helper.make_opsetid("", 17)]), str(cnn))
    bare = OUT / "bare.npz"
    np.savez(bare, w0=layers[0][0], b0=layers[0][1], w1=layers[1][0], b1=layers[1][1])
    for what, load in (("a CNN, to the MLP proof loader (the graph proofs prove it)", lambda: load_proof_model(cnn)),
                       ("bare weights, to tensor_ops", lambda: Sequential.load(bare)),
                       ("bare weights, to the proofs", lambda: load_proof_model(bare))):
        try:
            load()
            print(f"5. {what}: ACCEPTED (this must not happen)")
        except ValueError as refusal:  # ModelError and ParameterError are ValueErrors
            print(f"5. {what}: refused: {str(refusal)[:110]}...")


if __name__ == "__main__":
    main()
