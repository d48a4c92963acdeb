"""The encrypted inference API as a user reads it: plan, keys, encrypt, serve, decrypt (issue 5).

Stated bound: at the automatically chosen parameters (30-bit scale) and inputs in [-1, 1], the decrypted
outputs of a tiny model differ from its plaintext forward by at most 1e-3 * max(1, max |plaintext|), and
the argmax agrees wherever the plaintext top two logits are more than 1e-2 apart.
"""
import math
import os
import pathlib
import subprocess
import sys
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crypto import CKKSContext, CKKSParameters
from crypto.errors import (ContextMismatchError, HEError, LevelError, ParameterError, SerializationError,
                           ShapeError)
from tensor_ops import (AvgPool2d, BatchNorm2d, Client, Conv2d, Flatten, Linear, Poly, Sequential, Server, Square,
                        load_model)
from tests.reference import naive_nn
from tests.tensor_ops.helpers import free_port

REPO = pathlib.Path(__file__).resolve().parents[2]
REL_BOUND = 1e-3


def close(got, want):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape
    bound = REL_BOUND * max(1.0, float(np.max(np.abs(want))))
    assert float(np.max(np.abs(got - want))) <= bound


def argmax_agrees(got, want):
    if want.shape[-1] < 2:
        return
    top2 = np.sort(want, axis=-1)[..., -2:]
    clear = (top2[..., 1] - top2[..., 0]) > 1e-2
    assert np.array_equal(np.argmax(got, -1)[clear], np.argmax(want, -1)[clear])


def mlp(seed=0, n_in=12, hidden=6, n_out=3, activation=None):
    rng = np.random.default_rng(seed)
    return Sequential([Linear(rng.normal(0, 0.4, (hidden, n_in)), rng.normal(0, 0.1, hidden)),
                       activation if activation is not None else Square(),
                       Linear(rng.normal(0, 0.4, (n_out, hidden)), rng.normal(0, 0.1, n_out))])


def cnn(seed=0, stride=1, padding=1):
    rng = np.random.default_rng(seed)
    conv = Conv2d(rng.normal(0, 0.4, (2, 1, 3, 3)), rng.normal(0, 0.1, 2), stride=stride, padding=padding)
    c, h, w = conv.output_shape((1, 6, 6))
    pooled = (h // 2) * (w // 2) * c
    return Sequential([conv, BatchNorm2d(np.array([1.2, 0.8]), np.array([0.1, -0.1]), np.array([0.05, 0.0]),
                                         np.array([1.5, 0.7])),
                       Square(), AvgPool2d(2), Flatten(), Linear(rng.normal(0, 0.4, (3, pooled)))], input_shape=(1, 6, 6))


# ---------------------------------------------------------------------------------------------------------
# Layers and the plaintext forward

@settings(max_examples=15)
@given(st.integers(1, 3), st.integers(1, 3), st.integers(3, 7), st.integers(1, 3), st.integers(1, 2),
       st.integers(0, 2), st.integers(0, 2**31))
def test_conv2d_stride_padding_matches_naive_loops(cin, cout, size, kernel, stride, padding, seed):
    rng = np.random.default_rng(seed)
    weight, bias = rng.normal(size=(cout, cin, kernel, kernel)), rng.normal(size=cout)
    x = rng.normal(size=(2, cin, size, size))
    conv = Conv2d(weight, bias, stride=stride, padding=padding)
    want = np.stack([naive_nn.conv2d(image, weight, bias, stride, padding) for image in x])
    np.testing.assert_allclose(conv.forward(x), want, atol=1e-10)
    assert conv.output_shape((cin, size, size)) == want.shape[1:]


@settings(max_examples=15)
@given(st.integers(1, 3), st.integers(2, 8), st.integers(1, 3), st.integers(0, 2**31))
def test_avgpool_and_flatten_match_numpy(channels, size, kernel, seed):
    kernel = min(kernel, size)
    x = np.random.default_rng(seed).normal(size=(3, channels, size, size))
    np.testing.assert_allclose(AvgPool2d(kernel).forward(x), np.stack([naive_nn.avgpool2d(image, kernel, kernel) for image in x]), atol=1e-12)
    np.testing.assert_array_equal(Flatten().forward(x), x.reshape(3, -1))


def test_linear_is_w_x_plus_b():
    rng = np.random.default_rng(1)
    w, b, x = rng.normal(size=(4, 5)), rng.normal(size=4), rng.normal(size=(7, 5))
    np.testing.assert_allclose(Linear(w, b).forward(x), x @ w.T + b)


def test_batch_norm_is_folded_into_the_preceding_layer():
    model = cnn()
    affine_stages = [s for s in model.stages() if not hasattr(s, "poly")]
    assert len(affine_stages) == 2  # conv + batch norm -> one stage; pool + flatten + linear -> one stage
    x = np.random.default_rng(2).uniform(-1, 1, (4, 1, 6, 6))
    y = x
    for layer in model.layers:
        y = layer.forward(y)
    np.testing.assert_allclose(model.forward(x), y, atol=1e-9)


@pytest.mark.parametrize("name", ["relu", "gelu", "silu", "sigmoid"])
def test_poly_is_fitted_to_the_named_function_with_the_chosen_degree(name):
    low, high = Poly(name, degree=3, interval=(-3, 3)), Poly(name, degree=8, interval=(-3, 3))
    assert (low.degree, high.degree) == (3, 8)
    assert high.effective_degree in (7, 8)  # sigmoid - 1/2 is odd: its degree-8 fit has no t^8 term
    assert high.max_error() < low.max_error() < 1.0
    # minimal depth (Paterson-Stockmeyer / BSGS)
    assert high.depth == math.ceil(math.log2(high.effective_degree + 1))
    truth = {"relu": lambda t: np.maximum(t, 0), "sigmoid": lambda t: 1 / (1 + np.exp(-t)),
             "silu": lambda t: t / (1 + np.exp(-t)),
             "gelu": lambda t: 0.5 * t * (1 + np.vectorize(math.erf)(t / math.sqrt(2)))}[name]
    x = np.linspace(-3, 3, 101)
    assert np.max(np.abs(high.forward(x) - truth(x))) <= high.max_error() + 1e-9


def test_square_is_x_squared_at_depth_one():
    x = np.linspace(-2, 2, 9)
    np.testing.assert_allclose(Square().forward(x), x ** 2)
    assert Square().depth == 1


@pytest.mark.parametrize("make, words", [
    (lambda: Poly("swish_like", degree=3), ["swish_like"]),  # softplus and tanh are fitted too
    (lambda: Poly("relu", degree=0), ["degree"]),
    (lambda: Poly("relu", degree=10_000), ["degree", "10000"]),
    (lambda: Conv2d(np.ones((1, 1, 3, 3)), stride=0), ["stride", "0"]),
    (lambda: Conv2d(np.ones((1, 1, 3, 3)), padding=-1), ["padding", "-1"]),
    (lambda: Linear(np.ones((2, 3)), np.ones(4)), ["bias", "(4,)"]),
    (lambda: AvgPool2d(0), ["kernel_size", "0"]),
    (lambda: Sequential([]), ["layers"]),
])
def test_bad_layer_arguments_name_the_parameter(make, words):
    with pytest.raises(HEError) as info:
        make()
    assert all(word in str(info.value) for word in words), str(info.value)


def test_wrong_input_shape_is_a_clear_error():
    with pytest.raises(ShapeError, match=r"\(5,\)"):
        mlp().forward(np.zeros(5))
    with pytest.raises(ShapeError, match="12"):
        mlp().plan(input_shape=(5,))


def test_npz_round_trip_and_forward_is_unchanged(tmp_path):
    for model, x in ((mlp(activation=Poly("gelu", degree=5)), np.random.default_rng(3).uniform(-1, 1, (3, 12))),
                     (cnn(stride=2), np.random.default_rng(4).uniform(-1, 1, (2, 1, 6, 6)))):
        path = tmp_path / "model.npz"
        model.save(path)
        for loaded in (Sequential.load(path), load_model(str(path))):
            np.testing.assert_array_equal(loaded.forward(x), model.forward(x))


def test_npz_of_plain_weight_arrays_loads_as_an_mlp(tmp_path):
    rng = np.random.default_rng(5)
    w1, b1, w2, b2 = rng.normal(size=(6, 12)), rng.normal(size=6), rng.normal(size=(3, 6)), rng.normal(size=3)
    path = tmp_path / "weights.npz"
    np.savez(path, W1=w1, b1=b1, W2=w2, b2=b2, activation="square")  # issue 12: the activation is named
    x = rng.uniform(-1, 1, (4, 12))
    want = ((x @ w1.T + b1) ** 2) @ w2.T + b2
    np.testing.assert_allclose(Sequential.load(path).forward(x), want, atol=1e-9)
    np.savez(path, activation="square",
             **{"fc1.kernel": w1.T, "fc1.bias": b1, "fc2.kernel": w2.T, "fc2.bias": b2})  # (in, out)
    np.testing.assert_allclose(Sequential.load(path).forward(x), want, atol=1e-9)
    np.savez(path, W1=w1, W2=w1, activation="square")
    with pytest.raises(ParameterError, match="chain"):
        Sequential.load(path)


def test_garbage_npz_is_refused_clearly(tmp_path):
    path = tmp_path / "bad.npz"
    path.write_bytes(b"not a zip file at all")
    with pytest.raises(ParameterError, match="bad.npz"):
        Sequential.load(path)


def test_forward_does_not_mutate_its_input():
    x = np.random.default_rng(6).uniform(-1, 1, (3, 12))
    before = x.copy()
    mlp().forward(x)
    np.testing.assert_array_equal(x, before)


# ---------------------------------------------------------------------------------------------------------
# Plans and parameters

def test_plan_reports_depth_rotations_keys_and_time_before_encryption():
    model = mlp(activation=Poly("relu", degree=3))
    plan = model.plan()
    assert int(plan.depth) == 1 + 2 + 1  # linear, degree-3 polynomial, linear
    assert len(plan.rotations()) > 0 and all(isinstance(k, int) for k in plan.rotations())
    assert plan.keys["galois_keys"] == len(plan.rotations()) and plan.keys["relinearization"]
    assert plan.estimated_seconds > 0 and plan.cost()["seconds"] == plan.estimated_seconds
    assert plan.batch > 1 and plan.estimated_throughput == pytest.approx(plan.batch / plan.estimated_seconds)
    text = plan.explain()
    assert "depth" in text and "rotation" in text and "estimated time" in text and str(plan) == text


def test_parameters_are_chosen_from_the_depth_when_not_passed():
    shallow, deep = mlp().plan(), mlp(activation=Poly("silu", degree=7)).plan()
    assert shallow.params.max_level >= shallow.depth and deep.params.max_level >= deep.depth
    assert deep.params.max_level > shallow.params.max_level
    assert "INSECURE" not in repr(shallow.params)


@pytest.mark.parametrize("params", ["TOY", "toy", CKKSParameters.preset("TOY")])
def test_plan_accepts_a_preset_name_or_parameters(params):
    assert mlp().plan(params=params).params == CKKSParameters.preset("TOY")


def test_plan_refuses_parameters_with_too_few_levels():
    with pytest.raises(HEError, match="depth"):
        mlp(activation=Poly("relu", degree=15)).plan(params="N13")


def test_plan_explain_shows_each_layer_lowering_and_conv_choice():
    plan = cnn().plan()
    text = plan.explain()
    assert "conv2d" in text and "linear" in text and "prefers" in text
    conv = plan.layers[0]
    assert conv.kind == "conv2d" and conv.preferred in ("dense", "patches")
    assert conv.dense_cost > 0 and conv.patches_cost > 0
    assert [layer.stage for layer in plan.layers] == [0, 0, 1, 2, 2, 2]  # batch norm, pool, flatten folded


# ---------------------------------------------------------------------------------------------------------
# Client / server

@pytest.fixture(scope="module")
def toy_client():
    return Client("TOY", seed=11)


def test_client_server_bytes_round_trip_equals_plaintext(toy_client):
    model = mlp()
    context = toy_client.public_context()
    assert isinstance(context, bytes)
    assert not CKKSContext.from_bytes(context).has_secret_key
    request = toy_client.encrypt(np.random.default_rng(7).uniform(-1, 1, (5, 12)))
    assert isinstance(request, bytes)
    for server in (Server(model, context), Server(model, CKKSContext.from_bytes(context))):
        reply = server.evaluate(request)
        assert isinstance(reply, bytes)
        y = toy_client.decrypt(reply)
        assert isinstance(y, np.ndarray) and y.shape == (5, 3)
        x = np.random.default_rng(7).uniform(-1, 1, (5, 12))
        close(y, model.forward(x))
        argmax_agrees(y, model.forward(x))


@settings(max_examples=6)
@given(st.integers(1, 20), st.integers(1, 9), st.integers(1, 6), st.integers(1, 40),
       st.sampled_from(["square", "relu", "gelu", "silu", "sigmoid"]), st.integers(0, 2**31))
def test_random_mlps_encrypted_equal_plaintext(toy_client, n_in, hidden, n_out, batch, activation, seed):
    rng = np.random.default_rng(seed)
    act = Square() if activation == "square" else Poly(activation, degree=int(rng.integers(2, 4)))  # TOY: 4 levels
    model = Sequential([Linear(rng.normal(0, 0.5, (hidden, n_in)), rng.normal(0, 0.2, hidden)), act,
                        Linear(rng.normal(0, 0.5, (n_out, hidden)), rng.normal(0, 0.2, n_out))])
    x = rng.uniform(-1, 1, (batch, n_in))
    y = toy_client.decrypt(Server(model, toy_client.public_context()).evaluate(toy_client.encrypt(x)))
    close(y, model.forward(x))
    argmax_agrees(y, model.forward(x))


def test_client_accepts_parameters_object():
    client = Client(CKKSParameters.preset("TOY"), seed=12)
    assert client.params == CKKSParameters.preset("TOY")


@pytest.fixture(scope="module")
def planned():
    model = cnn()
    client = Client(model=model, seed=13)
    return model, client, Server(model, client.public_context())


def test_cnn_encrypted_equals_plaintext_with_batching(planned):
    model, client, server = planned
    x = np.random.default_rng(8).uniform(-1, 1, (20, 1, 6, 6))
    request = client.encrypt(x)
    assert client.plan.batch >= 20
    reply = server.evaluate(request)
    y = client.decrypt(reply)
    close(y, model.forward(x))
    argmax_agrees(y, model.forward(x))
    single = client.decrypt(server.evaluate(client.encrypt(x[0])))
    assert single.shape == (3,)
    close(single, model.forward(x[0]))


def test_only_the_plan_rotation_keys_are_exported_and_their_size_is_reported(planned):
    model, client, _ = planned
    report = client.key_report()
    assert sorted(report["rotations"]) == sorted(model.plan().rotations())
    assert report["public_context_bytes"] == len(client.public_context()) == client.key_bytes > 0
    # fewer Galois keys than the +-2^i set a model-agnostic library (SEAL / TenSEAL default) makes
    assert len(report["rotations"]) < 2 * int(math.log2(client.params.slots)) - 1
    assert model.plan().keys["galois_key_bytes"] > 0


def test_context_from_another_key_is_refused(planned):
    model, client, server = planned
    other = Client(model=model, seed=15)
    with pytest.raises(ContextMismatchError, match="key"):
        server.evaluate(other.encrypt(np.zeros((1, 6, 6))))
    with pytest.raises(ContextMismatchError):
        client.decrypt(Server(model, other.public_context()).evaluate(other.encrypt(np.zeros((1, 6, 6)))))


def test_wrong_shape_wrong_level_garbage_and_oversize_are_refused(planned):
    model, client, server = planned
    with pytest.raises(ShapeError, match=r"\(1, 6, 6\)"):
        client.encrypt(np.zeros((1, 5, 5)))
    with pytest.raises(LevelError, match="level"):
        server.evaluate(client.encrypt(np.zeros((1, 6, 6)), level=client.plan.input_level - 1))
    for garbage in (b"", b"garbage", client.encrypt(np.zeros((1, 6, 6)))[:-7], os.urandom(300)):
        with pytest.raises(SerializationError):
            server.evaluate(garbage)
    small = Server(model, client.public_context(), max_ciphertexts=1)
    with pytest.raises(SerializationError, match="1"):
        small.evaluate(client.encrypt(np.zeros((client.plan.batch + 1, 1, 6, 6))))
    x = np.full((1, 6, 6), 0.5)
    close(client.decrypt(server.evaluate(client.encrypt(x))), model.forward(x))  # still serving


def test_cnn_built_without_an_input_shape_plans_and_serves(toy_client):
    rng = np.random.default_rng(18)
    model = Sequential([Conv2d(rng.normal(0, 0.4, (2, 1, 3, 3)), stride=2, padding=1), Square(), AvgPool2d(2),
                        Flatten(), Linear(rng.normal(0, 0.4, (3, 8)))])
    x = rng.uniform(-1, 1, (3, 1, 8, 8))
    assert model.forward(x).shape == (3, 3) and model.forward(x[0]).shape == (3,)
    assert model.plan((1, 8, 8), "TOY").depth == 3
    server = Server(model, toy_client.public_context())
    close(toy_client.decrypt(server.evaluate(toy_client.encrypt(x))), model.forward(x))
    close(toy_client.decrypt(server.evaluate(toy_client.encrypt(x[0]))), model.forward(x[0]))
    with pytest.raises(ShapeError, match="channels"):
        server.evaluate(toy_client.encrypt(np.zeros((2, 2, 8, 8))))


@pytest.mark.parametrize("make, error, words", [
    (lambda c: Server("model.npz", c.public_context()), ParameterError, ["model", "str"]),
    (lambda c: Server(mlp(), 42), ParameterError, ["public_context", "int"]),
    (lambda c: Server(mlp(), b"garbage"), SerializationError, []),
    (lambda c: c.encrypt("abc"), ShapeError, ["str"]),
    (lambda c: c.encrypt(np.full(12, np.nan)), ShapeError, ["nan"]),
    (lambda c: c.encrypt(np.full(12, 1e30)), ParameterError, ["1e+30", "limit"]),
    (lambda c: c.encrypt(np.zeros(12), level=99), ParameterError, ["level=99", "max_level"]),
    (lambda c: c.decrypt(b"garbage"), SerializationError, ["magic"]),
    (lambda c: c.decrypt(c.encrypt(np.zeros(12))), SerializationError, ["request"]),
    (lambda c: Client("N99"), ParameterError, ["N99"]),
    (lambda c: Client(), ParameterError, ["params"]),
])
def test_bad_client_and_server_input_is_a_clear_library_error(toy_client, make, error, words):
    with pytest.raises(error) as info:
        make(toy_client)
    assert all(word in str(info.value) for word in words), str(info.value)


def test_server_with_a_mismatched_model_shape_refuses_requests(toy_client):
    server = Server(mlp(n_in=10), toy_client.public_context())
    with pytest.raises(ShapeError, match="10"):
        server.evaluate(toy_client.encrypt(np.zeros(12)))


# ---------------------------------------------------------------------------------------------------------
# HTTP endpoint and CLI as subprocesses

@pytest.fixture(scope="module")
def endpoint(tmp_path_factory):
    pytest.importorskip("fastapi")
    pytest.importorskip("uvicorn")
    httpx = pytest.importorskip("httpx")
    model = mlp()
    path = tmp_path_factory.mktemp("serve") / "model.npz"
    model.save(path)
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "tensor_ops.serve", "--model", str(path), "--port", str(port),
                                "--max-request-bytes", str(1 << 22)], cwd=REPO,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline or process.poll() is not None:
                pytest.fail("python -m tensor_ops.serve did not start")
            time.sleep(0.2)
        yield model, url
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=20)


def test_http_endpoint_round_trip_and_errors(endpoint):
    import httpx

    from tensor_ops.serve import RemoteError, fetch_plan, register_context, remote_infer

    model, url = endpoint
    client = Client(plan=fetch_plan(url), seed=16)
    context_id = register_context(url, client)
    x = np.random.default_rng(9).uniform(-1, 1, (6, 12))
    y = remote_infer(url, client, x, context_id)
    close(y, model.forward(x))
    argmax_agrees(y, model.forward(x))

    def post(path, body):
        return httpx.post(url + path, content=body, timeout=60, headers={"content-type": "application/octet-stream"})

    other = Client(plan=client.plan, seed=17)
    refusals = [post("/infer/" + context_id, b"\x00garbage"),
                post("/infer/" + context_id, other.encrypt(np.zeros(12))),
                post("/infer/" + context_id, client.encrypt(np.zeros(12), level=client.plan.input_level - 1)),
                post("/infer/" + context_id, b"\x01" * ((1 << 22) + 1)),
                post("/contexts", b"not a context"),
                post("/contexts", other._context.to_bytes(include_secret_key=True))]
    for response in refusals:
        assert 400 <= response.status_code < 500 and response.json()["detail"]
    with pytest.raises(RemoteError):
        remote_infer(url, client, np.zeros(12), context_id="0" * 32)
    with pytest.raises(ShapeError):
        remote_infer(url, client, np.zeros(11), context_id)
    close(remote_infer(url, client, x[:1], context_id), model.forward(x[:1]))  # still serving


def _cli(*args, cwd):
    return subprocess.run([sys.executable, "-m", "tensor_ops", *map(str, args)], cwd=cwd, capture_output=True,
                          text=True, timeout=240, env=dict(os.environ, PYTHONPATH=str(REPO)))


@pytest.mark.slow  # 6-9 s: the default run stays under 10 minutes on 2 cores (pytest -m slow runs it)
def test_cli_infer_with_files(tmp_path):
    model = mlp()
    model.save(tmp_path / "model.npz")
    x = np.random.default_rng(10).uniform(-1, 1, (4, 12))
    np.save(tmp_path / "x.npy", x)
    steps = [("keygen", "--model", "model.npz", "--client", "client.key", "--context", "public.ctx"),
             ("encrypt", "--client", "client.key", "--input", "x.npy", "--out", "request.bin"),
             ("infer", "--model", "model.npz", "--context", "public.ctx", "--request", "request.bin", "--out", "reply.bin"),
             ("decrypt", "--client", "client.key", "--reply", "reply.bin", "--out", "y.npy")]
    for step in steps:
        done = _cli(*step, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
    close(np.load(tmp_path / "y.npy"), model.forward(x))
    done = _cli("infer", "--model", "model.npz", "--input", "x.npy", "--output", "y2.npy", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    close(np.load(tmp_path / "y2.npy"), model.forward(x))
    rng = np.random.default_rng(19)
    Sequential([Conv2d(rng.normal(0, 0.4, (2, 1, 3, 3)), stride=2, padding=1), Square(), Flatten(),
                Linear(rng.normal(0, 0.4, (3, 32)))]).save(tmp_path / "cnn.npz")
    np.save(tmp_path / "images.npy", rng.uniform(-1, 1, (2, 1, 8, 8)))
    done = _cli("infer", "--model", "cnn.npz", "--input", "images.npy", "--out", "y3.npy", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    close(np.load(tmp_path / "y3.npy"), Sequential.load(tmp_path / "cnn.npz").forward(np.load(tmp_path / "images.npy")))
    bad = _cli("infer", "--model", "model.npz", "--context", "public.ctx", "--request", "x.npy", "--out", "r.bin",
               cwd=tmp_path)
    assert bad.returncode != 0 and "Traceback" not in bad.stderr and bad.stderr.strip()
