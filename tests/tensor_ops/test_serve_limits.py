"""The endpoint's resource limits: slow headers and bodies are cut off, failed authentication is rate-limited per
address (and logged once a minute), a context id cannot be squatted by another token, and the encoded weights
kept for every parameter set stay within their byte bound. Loopback only, bounded loops."""
import logging
import socket
import time

import httpx
import numpy as np
import pytest

from crypto.errors import ParameterError
from tensor_ops.access import AuthFailures, Limits, LogWindow, Refused, Tokens
from tensor_ops.inference import Client, EncodedCache, Server, _encoded_bytes
from tensor_ops.model_plan import choose_parameters
from tensor_ops.serve import create_app, fetch_plan, register_context, remote_infer

from .test_inference import assert_precise
from .test_serve import _running, model  # noqa: F401  (the module fixture)

pytest.importorskip("uvicorn")
ALICE, BOB = "alice-" + "a" * 24, "bob-" + "b" * 26
TOKENS = Tokens({"alice": ALICE, "bob": BOB})
X = np.full(6, 0.5)
QUICK = dict(header_timeout=1.0, body_timeout=1.0, min_body_rate=1000)


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def _closed(sock: socket.socket) -> bool:
    """True once the server closed the connection (EOF or reset), False while it is still open."""
    try:
        return sock.recv(4096) == b""
    except (BlockingIOError, socket.timeout):
        return False
    except ConnectionError:
        return True


def test_half_open_and_trickling_header_connections_are_closed(model):  # noqa: F811
    with _running(create_app(model, **QUICK)) as url:
        socks = [socket.create_connection(("127.0.0.1", _port(url)), timeout=5) for _ in range(30)]
        for sock in socks:
            sock.setblocking(False)
        trickling = socks[15:]
        for sock in trickling:
            sock.send(b"POST /contexts HTTP/1.1\r\nHost: x\r\n")
        deadline, open_ = time.monotonic() + 6, list(socks)
        while open_ and time.monotonic() < deadline:
            for sock in trickling:
                if sock in open_:
                    try:
                        sock.send(b"X")  # one more header byte now and then: no extension of the deadline
                    except OSError:
                        pass
            time.sleep(0.2)
            open_ = [sock for sock in open_ if not _closed(sock)]
        for sock in socks:
            sock.close()
        assert not open_, f"{len(open_)} of 30 connections still open"
        assert httpx.get(url + "/health", timeout=10).status_code == 200  # an honest client is served


@pytest.mark.slow
def test_a_body_trickled_at_2_bytes_per_second_gets_408(model):  # noqa: F811
    with _running(create_app(model, **QUICK)) as url:
        sock = socket.create_connection(("127.0.0.1", _port(url)), timeout=5)
        sock.sendall(b"POST /contexts HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\n"
                     b"Content-Length: 4000\r\n\r\n")
        sock.setblocking(False)
        answer, started = b"", time.monotonic()
        while b"\r\n" not in answer and time.monotonic() - started < 8:
            try:
                sock.send(b"ab")
                answer += sock.recv(4096)
            except (BlockingIOError, socket.timeout):
                pass
            except OSError:
                break
            time.sleep(1.0)
        sock.close()
        assert answer.startswith(b"HTTP/1.1 408"), answer[:80]
        assert time.monotonic() - started < 6


def test_failed_authentication_is_rate_limited_per_address_and_logged_once(model, caplog):  # noqa: F811
    app = create_app(model, tokens=TOKENS, auth_failure_burst=3, auth_failure_rate=0.01)
    with _running(app) as url, caplog.at_level(logging.INFO, "tensor_ops.serve"):
        assert httpx.get(url + "/plan", headers={"authorization": f"Bearer {ALICE}"}, timeout=30).status_code == 200
        answers = [httpx.get(url + "/plan", headers={"authorization": f"Bearer wrong-{i:020d}"}, timeout=30)
                   for i in range(8)]
    assert [a.status_code for a in answers] == [401] * 3 + [429] * 5
    assert int(answers[-1].headers["retry-after"]) >= 1
    lines = [r.getMessage() for r in caplog.records if r.name == "tensor_ops.serve" and r.levelno >= logging.WARNING]
    assert sum("refused (401)" in m for m in lines) == 1 and sum("refused (429)" in m for m in lines) == 1


def test_auth_failures_bucket_refills_and_remembers_a_bounded_number_of_addresses():
    now = [0.0]
    failures = AuthFailures(Limits(auth_failure_burst=2, auth_failure_rate=0.5), max_addresses=100,
                            clock=lambda: now[0])
    for _ in range(2):
        failures.check("10.0.0.1")
        failures.failed("10.0.0.1")
    with pytest.raises(Refused) as info:
        failures.check("10.0.0.1")
    assert info.value.status == 429 and info.value.retry_after == 2
    failures.check("10.0.0.2")  # another address is not affected
    now[0] = 2.0
    failures.check("10.0.0.1")  # one failure refilled
    for i in range(10_000):
        failures.failed(f"addr{i}")
    assert len(failures) == 100
    window = LogWindow(60, clock=lambda: now[0])
    assert [window.note(401) for _ in range(3)] == [0, None, None]
    now[0] = 70.0
    assert window.note(401) == 2  # the next line says how many were not logged
    with pytest.raises(ParameterError, match="auth_failure_burst"):
        Limits(auth_failure_burst=0)
    with pytest.raises(ParameterError, match="header_timeout"):
        Limits(header_timeout=float("nan"))


def test_another_token_cannot_squat_a_context_id(model):  # noqa: F811
    app = create_app(model, tokens=TOKENS, max_encoded_bytes=1 << 30)
    with _running(app) as url:
        alice = Client(plan=fetch_plan(url, token=ALICE), seed=71)
        # bob uploads alice's public context first (it is public): his own copy, under his own quota
        squat = httpx.post(url + "/contexts", content=alice.public_context(), timeout=60,
                           headers={"authorization": f"Bearer {BOB}", "content-type": "application/octet-stream"})
        assert squat.status_code == 201
        context_id = register_context(url, alice, token=ALICE)  # alice is not refused (was 409)
        assert context_id == alice.key_id.hex()
        assert_precise(remote_infer(url, alice, X, context_id, token=ALICE), model.forward(X), alice.plan.params)
        health = httpx.get(url + "/health", timeout=30).json()
        assert health["contexts"] == 2 and 0 < health["encoded_bytes"] <= health["limits"]["max_encoded_bytes"]


def test_encoded_weights_stay_within_their_bound_over_many_parameter_sets(model):  # noqa: F811
    """Four parameter sets (41 MB of encoded weights kept by an unbounded dict) through one bounded cache: it
    never holds more than its bound, each result is right, and an entry above the whole bound is used once."""
    bound = 16 << 20
    cache, unbounded = EncodedCache(bound), {}
    for depth, log_scale in ((3, 30), (3, 50), (4, 30), (4, 50)):
        client = Client(model=model, params=choose_parameters(depth, log_scale=log_scale), seed=depth + log_scale)
        for shared in (cache, unbounded):
            reply = Server(model, client.public_context(), encoded=shared).evaluate(client.encrypt(X))
            assert_precise(client.decrypt(reply), model.forward(X), client.params)
        assert 0 < cache.nbytes <= bound
        assert cache.nbytes == sum(_encoded_bytes(cache.get(key)) for key in list(cache._entries))
    assert sum(_encoded_bytes(v) for v in unbounded.values()) > 2 * bound  # the positive control: it grows
    tiny = EncodedCache(1 << 10)
    reply = Server(model, client.public_context(), encoded=tiny).evaluate(client.encrypt(X))
    assert_precise(client.decrypt(reply), model.forward(X), client.params)
    assert len(tiny) == 0 and tiny.nbytes == 0
    with pytest.raises(ParameterError, match="max_bytes"):
        EncodedCache(0)
