"""The HTTP endpoint over loopback: a real uvicorn server started in the test, bounded requests, stopped after."""
import contextlib
import logging
import threading
import time

import httpx
import numpy as np
import pytest

from tensor_ops.inference import Client, pack_message
from tensor_ops.nn import Linear, Sequential, Square
from tensor_ops.serve import RemoteError, create_app, fetch_plan, register_context, remote_infer

from .helpers import free_port
from .test_inference import assert_precise

uvicorn = pytest.importorskip("uvicorn")
TIMEOUT = 60.0
MAX_REQUEST = 1 << 20


@pytest.fixture(scope="module")
def model():
    rng = np.random.default_rng(0)
    return Sequential([Linear(rng.normal(0, 0.5, (4, 6)), rng.normal(0, 0.5, 4)), Square(),
                       Linear(rng.normal(0, 0.5, (3, 4)))], input_shape=(6,))


@contextlib.contextmanager
def _running(app):
    """The app served by uvicorn on a free loopback port; yields its URL, stops it afterwards."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                                           http=app.state.http_protocol))  # as serve.run: header deadline
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            pytest.fail("the test server did not start")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)


@pytest.fixture(scope="module")
def url(model):
    with _running(create_app(model, max_request_bytes=MAX_REQUEST, max_contexts=4)) as address:
        yield address


@pytest.fixture(scope="module")
def client(url):
    return Client(plan=fetch_plan(url), seed=21)


@pytest.fixture(scope="module")
def context_id(url, client):
    return register_context(url, client)


def _post(url, path, body):
    return httpx.post(url + path, content=body, timeout=TIMEOUT, headers={"content-type": "application/octet-stream"})


def test_health_and_plan(url, model):
    assert httpx.get(url + "/health", timeout=TIMEOUT).json()["status"] == "ok"
    plan = httpx.get(url + "/plan", timeout=TIMEOUT).json()
    assert plan["plan"]["input_shape"] == [6] and "depth" in plan["explain"]


def test_remote_inference_equals_plaintext(url, client, context_id, model):
    x = np.random.default_rng(1).uniform(-1, 1, (10, 6))
    assert_precise(remote_infer(url, client, x, context_id), model.forward(x), client.plan.params)


def test_errors_are_4xx_with_a_message_and_the_server_keeps_serving(url, client, context_id, model):
    assert _post(url, "/infer/" + context_id, b"garbage").status_code == 400
    assert "not an encrypted request" in _post(url, "/infer/" + context_id, b"garbage").json()["detail"]
    unknown = _post(url, "/infer/" + "ab" * 16, client.encrypt(np.zeros(6)))
    assert unknown.status_code == 404 and "POST /contexts" in unknown.json()["detail"]
    big = _post(url, "/infer/" + context_id, b"\x00" * (MAX_REQUEST + 1))
    assert big.status_code == 413 and str(MAX_REQUEST) in big.json()["detail"]
    assert _post(url, "/infer/" + context_id, b"").status_code == 400
    assert _post(url, "/contexts", b"not a context").status_code == 400
    x = np.full(6, 0.25)
    assert_precise(remote_infer(url, client, x, context_id), model.forward(x), client.plan.params)


def test_context_mismatch_is_409(url, client, context_id, model):
    other = Client(plan=client.plan, seed=22)
    response = _post(url, "/infer/" + context_id, other.encrypt(np.zeros(6)))
    assert response.status_code == 409 and "key set" in response.json()["detail"]


def test_wrong_level_is_422(url, client, context_id):
    ct = client._context.encrypt(np.zeros(8), level=client.plan.input_level - 1)
    request = pack_message("request", {"key_id": client.key_id.hex(), "samples": 1, "block": client.plan.block,
                                       "sample_shape": [6]}, [ct])
    response = _post(url, "/infer/" + context_id, request)
    assert response.status_code == 422 and "level" in response.json()["detail"]


def test_secret_key_context_is_refused(url, client):
    response = _post(url, "/contexts", client._context.to_bytes(include_secret_key=True))
    assert response.status_code == 400 and "secret key" in response.json()["detail"]


def test_remote_errors_raise_with_status(url, client):
    with pytest.raises(RemoteError) as info:
        remote_infer(url, client, np.zeros(6), context_id="00" * 16)
    assert info.value.status == 404


def test_nothing_secret_can_be_requested(model):
    app = create_app(model)
    routes = {(route.path, method) for route in app.routes if hasattr(route, "methods") for method in route.methods}
    public = {("/health", "GET"), ("/plan", "GET"), ("/contexts", "POST"), ("/infer/{context_id}", "POST")}
    assert {r for r in routes if not r[0].startswith(("/docs", "/openapi", "/redoc"))} == public


def test_context_with_too_few_levels_is_400(url):
    shallow = Client(plan=None, params="N13", seed=23)  # 2 levels, the model needs 3
    response = _post(url, "/contexts", shallow.public_context())
    assert response.status_code == 400 and "depth=3" in response.json()["detail"]


def test_contexts_are_evicted_least_recently_used_and_logged(model, caplog):
    """max_contexts=2: A and B registered, A used, C registered -> B (least recently used) is dropped, A stays
    (it was dropped before: eviction followed registration order); registration, eviction and the refusal are
    logged by the module logger, with no payload."""
    app = create_app(model, max_contexts=2)
    plan = model.plan()
    clients = [Client(plan=plan, seed=40 + i) for i in range(3)]
    x = np.full(6, 0.5)
    with _running(app) as address, caplog.at_level(logging.INFO, logger="tensor_ops.serve"):
        ids = [register_context(address, client) for client in clients[:2]]
        reply = _post(address, f"/infer/{ids[0]}", clients[0].encrypt(x))  # A is now the most recent
        assert_precise(clients[0].decrypt(reply.content), model.forward(x), plan.params)
        ids.append(register_context(address, clients[2]))
        assert httpx.get(address + "/health", timeout=TIMEOUT).json()["contexts"] == 2
        assert _post(address, f"/infer/{ids[0]}", clients[0].encrypt(x)).status_code == 200
        assert _post(address, f"/infer/{ids[2]}", clients[2].encrypt(x)).status_code == 200
        dropped = _post(address, f"/infer/{ids[1]}", clients[1].encrypt(x))
        assert dropped.status_code == 404 and "evicted" in dropped.json()["detail"]
    messages = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "tensor_ops.serve"]
    assert sum(m.startswith("registered context") for _, m in messages) == 3
    evictions = [m for _, m in messages if m.startswith("evicted")]
    assert len(evictions) == 1 and ids[1][:16] in evictions[0] and ids[0][:16] not in evictions[0]
    assert any(level == "WARNING" and "refused (404)" in m for level, m in messages)
    assert all(len(m) < 400 for _, m in messages)  # ids and sizes, never key or ciphertext bytes


def test_refusals_are_logged_as_warnings(model, caplog):
    with _running(create_app(model)) as address, caplog.at_level(logging.INFO, "tensor_ops.serve"):
        assert _post(address, "/contexts", b"not a context").status_code == 400
        assert _post(address, "/infer/" + "ab" * 16, b"x").status_code == 404
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and r.name == "tensor_ops.serve"]
    refusals = [m for m in warnings if not m.startswith("no access tokens")]  # an open endpoint also says so
    assert len(refusals) == 2 and refusals[0].startswith("refused (400)") and refusals[1].startswith("refused (404)")
