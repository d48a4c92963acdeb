"""Access to the HTTP endpoint: bearer tokens, per-token quotas (each token's own least recently used contexts
dropped, never another's), rate and concurrency limits, and the client's transparent re-registration. The
rules are tested alone (tensor_ops.access, against a naive twin) and over loopback (a real uvicorn server)."""
import concurrent.futures
import logging
import threading
import time

import httpx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crypto.errors import ParameterError
from tensor_ops.access import Limits, Quota, Refused, Throttle, Tokens, bearer
from tensor_ops.inference import Client
from tensor_ops.serve import (Endpoint, RemoteError, build_parser, create_app, fetch_plan, read_token,
                              register_context, remote_infer)

from .test_inference import assert_precise
from .test_serve import _running

pytest.importorskip("uvicorn")
ALICE, BOB, CAROL = "alice-" + "a" * 24, "bob-" + "b" * 26, "carol-" + "c" * 24
TOKENS = Tokens({"alice": ALICE, "bob": BOB, "carol": CAROL})
X = np.full(6, 0.5)


# ---------------------------------------------------------------------------------------------------------
# The rules alone.

def test_tokens_parse_match_and_never_show_the_secret():
    tokens = Tokens.parse(f"# clients\nalice:{ALICE}\n{BOB}, carol:{CAROL}\n")
    assert tokens.names == ("alice", "client2", "carol")
    assert tokens.match(ALICE) == "alice" and tokens.match(BOB) == "client2" and tokens.match(CAROL) == "carol"
    for wrong in (None, "", ALICE[:-1], ALICE + "x", ALICE.upper(), "é" * 30):
        assert tokens.match(wrong) is None
    assert ALICE not in repr(tokens) and ALICE not in str(vars(tokens).keys())
    assert Tokens.from_env(environ={}) is None
    assert Tokens.from_env(environ={"HEZK_TOKENS": f"alice:{ALICE}"}).names == ("alice",)


@pytest.mark.parametrize("text, needle", [("alice:short", "at least 16"), (f"a:{ALICE}\na:{BOB}", "twice"),
                                          (f"a:{ALICE}\nb:{ALICE}", "share one token"), ("# none\n", "no token"),
                                          (f"a b:{ALICE}", "bad name")])
def test_bad_tokens_are_refused_naming_the_rule(text, needle):
    with pytest.raises(ParameterError, match=needle) as info:
        Tokens.parse(text)
    assert "aaaaaaaaaaaaaaaaaaaaaaaa" not in str(info.value)  # the secret is not repeated back


def test_bearer_header():
    assert bearer("Bearer abc") == "abc" and bearer("bearer  abc ") == "abc"
    assert bearer(None) is None and bearer("Basic abc") is None and bearer("Bearer") is None


@pytest.mark.parametrize("field, value", [("rate", 0), ("burst", 0), ("max_contexts", -1), ("max_concurrent", 1.5),
                                          ("max_contexts_per_token", True), ("rate", float("inf"))])
def test_limits_name_the_bad_parameter(field, value):
    with pytest.raises(ParameterError, match=field):
        Limits(**{field: value})
    with pytest.raises(ParameterError, match="max_bytes_per_token"):
        Limits(max_context_bytes=100, max_bytes_per_token=99)


class NaiveQuota:
    """The twin of Quota: a plain list in use order; admission drops the principal's own oldest until both its
    quota and the server's hold, or refuses (503) leaving everything as it was."""

    def __init__(self, limits):
        self.limits, self.items = limits, []  # [id, owner, size], least recently used first

    def admit(self, cid, owner, size):
        count, cap = self.limits.quota(owner)
        if size > cap:
            raise Refused(413, "")
        kept = [item for item in self.items if (item[0], item[1]) != (cid, owner)] + [[cid, owner, size]]
        dropped = []

        def fits(items):
            own = [s for _, o, s in items if o == owner]
            return (len(own) <= count and sum(own) <= cap and len(items) <= self.limits.max_contexts
                    and sum(s for *_, s in items) <= self.limits.max_total_bytes)

        while not fits(kept):
            oldest = next((item for item in kept[:-1] if item[1] == owner), None)
            if oldest is None:
                raise Refused(503, "")
            kept.remove(oldest)
            dropped.append(oldest[0])
        self.items = kept
        return dropped

    def get(self, cid, owner):
        item = next((item for item in self.items if (item[0], item[1]) == (cid, owner)), None)
        if item is None:  # ids are per owner: another owner's is unknown
            raise Refused(404, "")
        self.items.remove(item)
        self.items.append(item)


_OPS = st.lists(st.tuples(st.sampled_from(["admit", "get"]), st.sampled_from([None, "a", "b", "c"]),
                          st.integers(0, 7), st.integers(1, 5)), max_size=60)


@settings(max_examples=150, deadline=None)
@given(ops=_OPS, per_token=st.integers(1, 3), per_bytes=st.integers(5, 9), total=st.integers(1, 6),
       total_bytes=st.integers(9, 20))
def test_quota_equals_its_naive_twin_and_never_drops_another_owners_context(ops, per_token, per_bytes, total,
                                                                           total_bytes):
    limits = Limits(max_contexts=total, max_total_bytes=total_bytes, max_contexts_per_token=per_token,
                    max_bytes_per_token=per_bytes, max_context_bytes=5)
    fast, naive = Quota(limits), NaiveQuota(limits)
    for op, owner, key, size in ops:
        cid = f"id{key}"
        before = set(fast._entries)  # (owner, id)
        results = []
        for call in ((lambda: fast.admit(cid, owner, size, "v")) if op == "admit" else (lambda: fast.get(cid, owner)),
                     (lambda: naive.admit(cid, owner, size)) if op == "admit" else (lambda: naive.get(cid, owner))):
            try:
                outcome = call()
                results.append(("ok", outcome if op == "admit" else None))
            except Refused as error:
                results.append(("refused", error.status))
        assert results[0] == results[1], (op, owner, cid, size)
        if op == "admit" and results[0][0] == "ok":
            assert all((owner, d) in before for d in results[0][1])  # only the registering owner's
        assert [(o, i) for i, o, _ in naive.items] == list(fast._entries)
        for who in {o for _, o, _ in naive.items}:
            count, cap = limits.quota(who)
            assert len(fast.owned(who)) <= count and fast.total_bytes(who) <= cap
        assert len(fast) <= total and fast.total_bytes() <= total_bytes


def test_quota_drops_only_the_registering_owners_least_recently_used():
    quota = Quota(Limits(max_contexts=8, max_contexts_per_token=2))
    assert quota.admit("a1", "alice", 10, 1) == [] and quota.admit("b1", "bob", 10, 2) == []
    assert quota.admit("a2", "alice", 10, 3) == []
    quota.get("a1", "alice")  # a1 is now alice's most recently used
    assert quota.admit("a3", "alice", 10, 4) == ["a2"]
    assert quota.owned("alice") == ["a1", "a3"] and quota.owned("bob") == ["b1"]
    with pytest.raises(Refused) as info:
        quota.get("b1", "alice")
    assert info.value.status == 404  # bob's id is not alice's (nor is it told that bob has it)
    assert quota.admit("b1", "alice", 10, 5) == ["a1"]  # alice's own copy, in alice's quota
    assert quota.owned("bob") == ["b1"] and quota.get("b1", "bob") == 2 and quota.get("b1", "alice") == 5


def test_throttle_rate_burst_and_concurrency_with_a_fake_clock():
    now = [100.0]
    throttle = Throttle(Limits(rate=2.0, burst=3, max_concurrent=2), clock=lambda: now[0])
    for _ in range(3):
        throttle.enter("a")
        throttle.leave("a")
    with pytest.raises(Refused) as info:
        throttle.enter("a")
    assert info.value.status == 429 and info.value.retry_after == 1 and "rate=2" in info.value.message
    throttle.enter("b")  # another principal has its own bucket
    throttle.leave("b")
    now[0] += 0.5  # one request regained at 2 per second
    throttle.enter("a")
    throttle.leave("a")
    now[0] += 10  # the bucket holds at most `burst`
    throttle.enter("a"), throttle.enter("a")
    with pytest.raises(Refused, match="max_concurrent=2") as info:
        throttle.enter("a")
    assert info.value.retry_after == 1 and throttle.in_flight("a") == 2
    throttle.leave("a"), throttle.leave("a")
    throttle.enter("a")
    assert throttle.in_flight("a") == 1
    slow = Throttle(Limits(rate=0.25, burst=1), clock=lambda: now[0])
    slow.enter("a")
    with pytest.raises(Refused) as info:
        slow.enter("a")
    assert info.value.retry_after == 4  # ceil(1 / 0.25)


# ---------------------------------------------------------------------------------------------------------
# Over loopback.

@pytest.fixture(scope="module")
def model():
    rng = np.random.default_rng(0)
    from tensor_ops.nn import Linear, Sequential, Square

    return Sequential([Linear(rng.normal(0, 0.5, (4, 6)), rng.normal(0, 0.5, 4)), Square(),
                       Linear(rng.normal(0, 0.5, (3, 4)))], input_shape=(6,))


@pytest.fixture(scope="module")
def clients(model):
    """Five clients of the model's plan (keys made once): alice uses 0-3, bob 4."""
    plan = model.plan()
    return [Client(plan=plan, seed=60 + i) for i in range(5)]


def _post(url, path, body, token=None):
    headers = {"content-type": "application/octet-stream"}
    if token:
        headers["authorization"] = f"Bearer {token}"
    return httpx.post(url + path, content=body, timeout=60, headers=headers)


def _get(url, path, token=None):
    return httpx.get(url + path, timeout=60, headers={"authorization": f"Bearer {token}"} if token else {})


def test_no_token_is_401_another_tokens_context_is_404(model, clients):
    app = create_app(model, tokens=TOKENS)
    alice = clients[0]
    with _running(app) as url:
        health = _get(url, "/health").json()  # the one open route
        assert health["access"] == "token" and health["limits"]["max_contexts_per_token"] == 4
        for response in (_get(url, "/plan"), _post(url, "/contexts", alice.public_context()),
                         _post(url, "/infer/" + alice.key_id.hex(), alice.encrypt(X)),
                         _get(url, "/plan", "wrong-token-" + "x" * 20), _get(url, "/plan", ALICE[:-1])):
            assert response.status_code == 401 and response.headers["www-authenticate"] == "Bearer"
        with pytest.raises(RemoteError) as info:
            fetch_plan(url)
        assert info.value.status == 401 and "Bearer" in info.value.message
        assert fetch_plan(url, token=ALICE)["input_shape"] == [6]
        context_id = register_context(url, alice, token=ALICE)
        forbidden = _post(url, "/infer/" + context_id, alice.encrypt(X), BOB)
        assert forbidden.status_code == 404 and "not registered" in forbidden.json()["detail"]
        copied = _post(url, "/contexts", alice.public_context(), BOB)  # bob's own copy: alice's id stays alice's
        assert copied.status_code == 201
        assert_precise(remote_infer(url, alice, X, context_id, token=ALICE), model.forward(X), alice.plan.params)


def test_a_flood_of_registrations_evicts_only_its_own_contexts(model, clients, caplog):
    """alice keeps at most 2 contexts and registers 4, again and again, while bob keeps inferring: each of bob's
    requests succeeds, and every eviction logged is one of alice's."""
    app = create_app(model, tokens=TOKENS, max_contexts=3, max_contexts_per_token=2, rate=1000, burst=1000)
    bob = clients[4]
    with _running(app) as url, caplog.at_level(logging.INFO, "tensor_ops.serve"):
        bob_id = register_context(url, bob, token=BOB)
        stop = threading.Event()

        def flood():
            with Endpoint(url, ALICE) as endpoint:
                for _ in range(2):
                    for client in clients[:4]:
                        endpoint.register(client)
            stop.set()

        def keep_inferring():
            done = 0
            with Endpoint(url, BOB) as endpoint:
                while not stop.is_set() or done < 3:
                    assert_precise(endpoint.infer(bob, X, bob_id), model.forward(X), bob.plan.params)
                    done += 1
            return done

        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            flooding, inferring = pool.submit(flood), pool.submit(keep_inferring)
            flooding.result(timeout=120)
            assert inferring.result(timeout=120) >= 3
        health = _get(url, "/health").json()
        assert health["contexts"] == 3
        ours = [c.key_id.hex() for c in clients[:4]]
        assert _post(url, f"/infer/{ours[3]}", clients[3].encrypt(X), ALICE).status_code == 200
        assert _post(url, f"/infer/{ours[0]}", clients[0].encrypt(X), ALICE).status_code == 404
    evictions = [r.getMessage() for r in caplog.records if r.getMessage().startswith("evicted")]
    assert len(evictions) == 6 and all(" of alice," in m and bob_id[:16] not in m for m in evictions)


def test_server_full_of_other_tokens_contexts_is_503_with_retry_after(model, clients):
    app = create_app(model, tokens=TOKENS, max_contexts=2, max_contexts_per_token=1)
    with _running(app) as url:
        register_context(url, clients[0], token=ALICE)
        register_context(url, clients[4], token=BOB)
        full = _post(url, "/contexts", clients[1].public_context(), CAROL)
        assert full.status_code == 503 and full.headers["retry-after"] == "60" and "max_contexts=2" in full.text
        register_context(url, clients[1], token=ALICE)  # alice replaces her own
        assert _get(url, "/health").json()["contexts"] == 2


def test_a_context_above_the_tokens_byte_quota_is_413(model, clients):
    size = len(clients[0].public_context())
    app = create_app(model, tokens=TOKENS, max_context_bytes=size - 1, max_bytes_per_token=size - 1)
    with _running(app) as url:
        response = _post(url, "/contexts", clients[0].public_context(), ALICE)
        assert response.status_code == 413 and str(size - 1) in response.json()["detail"]


def test_rate_limit_is_429_with_retry_after_per_token(model):
    app = create_app(model, tokens=TOKENS, rate=0.5, burst=2)
    with _running(app) as url:
        assert [_get(url, "/plan", ALICE).status_code for _ in range(2)] == [200, 200]
        limited = _get(url, "/plan", ALICE)
        assert limited.status_code == 429 and int(limited.headers["retry-after"]) in (1, 2)
        assert "rate=0.5" in limited.json()["detail"]
        assert _get(url, "/plan", BOB).status_code == 200  # bob has his own bucket
        assert _get(url, "/health").status_code == 200  # /health is not counted
        with pytest.raises(RemoteError) as info:
            fetch_plan(url, token=ALICE)
        assert info.value.status == 429 and info.value.retry_after >= 1


def test_concurrency_limit_is_429_while_a_request_is_in_flight(model, clients):
    """max_concurrent=1: a request whose body is still arriving holds alice's slot; her next one is refused,
    bob's is not; after it completes, alice is served again."""
    app = create_app(model, tokens=TOKENS, max_concurrent=1, rate=1000, burst=1000)
    alice = clients[0]
    release = threading.Event()
    request = alice.encrypt(X)

    def slow_body():
        yield request[:1000]
        release.wait(30)
        yield request[1000:]

    with _running(app) as url:
        context_id = register_context(url, alice, token=ALICE)
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            pending = pool.submit(httpx.post, f"{url}/infer/{context_id}", content=slow_body(), timeout=60,
                                  headers={"authorization": f"Bearer {ALICE}"})
            deadline = time.monotonic() + 30
            while (busy := _get(url, "/plan", ALICE)).status_code == 200:
                assert time.monotonic() < deadline, "the slow request never held its slot"
                time.sleep(0.02)
            assert busy.status_code == 429 and "max_concurrent=1" in busy.json()["detail"]
            assert busy.headers["retry-after"] == "1"
            assert _get(url, "/plan", BOB).status_code == 200
            release.set()
            answer = pending.result(timeout=60)
        assert answer.status_code == 200
        assert_precise(alice.decrypt(answer.content), model.forward(X), alice.plan.params)
        assert _get(url, "/plan", ALICE).status_code == 200


def test_the_client_registers_again_after_an_eviction(model, clients, caplog):
    app = create_app(model, tokens=TOKENS, max_contexts_per_token=1)
    first, second = clients[0], clients[1]
    with _running(app) as url, caplog.at_level(logging.INFO, "tensor_ops.serve"):
        first_id = register_context(url, first, token=ALICE)
        register_context(url, second, token=ALICE)  # evicts first
        assert _post(url, f"/infer/{first_id}", first.encrypt(X), ALICE).status_code == 404
        y = remote_infer(url, first, X, first_id, token=ALICE)  # 404 -> register -> retried once
        assert_precise(y, model.forward(X), first.plan.params)
        with pytest.raises(RemoteError) as info:  # an id that is not the client's own is not re-registered
            remote_infer(url, first, X, "00" * 16, token=ALICE)
        assert info.value.status == 404
    messages = [r.getMessage() for r in caplog.records]
    assert sum("registering it again" in m for m in messages) == 1


def test_tokens_never_appear_in_the_logs(model, clients, caplog):
    app = create_app(model, tokens=TOKENS, rate=1000, burst=1000)
    with caplog.at_level(logging.DEBUG), _running(app) as url:
        register_context(url, clients[0], token=ALICE)
        remote_infer(url, clients[0], X, token=ALICE)
        _get(url, "/plan", ALICE[:-1] + "z")
        _get(url, "/plan", BOB)
        _post(url, "/infer/" + clients[0].key_id.hex(), b"garbage", BOB)
    text = "\n".join(f"{r.getMessage()} {r.args!r}" for r in caplog.records)
    assert "refused (401)" in text and "refused (404)" in text and "inference on context" in text
    for secret in (ALICE, BOB, CAROL, ALICE[:-1]):
        assert secret[-20:] not in text


def test_an_open_endpoint_says_so_and_listens_on_loopback_by_default(model, clients, caplog):
    with caplog.at_level(logging.INFO, "tensor_ops.serve"):
        app = create_app(model)
    assert any(r.levelno == logging.WARNING and "OPEN" in r.getMessage() for r in caplog.records)
    assert build_parser().parse_args(["--model", "m.npz"]).host == "127.0.0.1"
    with _running(app) as url:
        health = _get(url, "/health").json()
        assert health["access"] == "open" and health["limits"]["rate"] == 10.0
        assert _get(url, "/plan").status_code == 200


def test_read_token(tmp_path):
    path = tmp_path / "token"
    path.write_text(ALICE + "\n")
    assert read_token(path) == ALICE
    assert read_token(environ={"HEZK_TOKEN": BOB}) == BOB and read_token(environ={}) is None
    path.write_text("\n")
    with pytest.raises(ParameterError, match="empty"):
        read_token(path)
    assert ALICE not in repr(Endpoint("http://127.0.0.1:1", ALICE))


# ---------------------------------------------------------------------------------------------------------
# Load.

def _rss_bytes() -> int:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * 4096


def _load(model, clients, requests: int, concurrency: int):
    """``requests`` inferences from ``concurrency`` threads (alice and bob alternately, each thread its own
    connection) after a warm-up, timed; then a quarter as many again under tracemalloc. Returns (seconds,
    latencies, RSS growth over the timed run, growth of the memory Python traced over the second run)."""
    import gc
    import tracemalloc

    app = create_app(model, tokens=TOKENS, rate=10_000, burst=10_000, max_concurrent=concurrency)
    owners = [(clients[0], ALICE), (clients[4], BOB)]
    with _running(app) as url:
        for client, token in owners:
            register_context(url, client, token=token)

        def worker(index, count):
            client, token = owners[index % 2]
            latencies = []
            with Endpoint(url, token) as endpoint:
                for _ in range(count):
                    started = time.perf_counter()
                    y = endpoint.infer(client, X, client.key_id.hex())
                    latencies.append(time.perf_counter() - started)
                    assert np.max(np.abs(y - model.forward(X))) < 1e-2
            return latencies

        def run(total):
            with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
                shares = [total // concurrency + (i < total % concurrency) for i in range(concurrency)]
                return [t for f in [pool.submit(worker, i, n) for i, n in enumerate(shares)] for t in f.result()]

        run(concurrency)  # warm-up: connections, thread pools, tables, compiled kernels
        gc.collect()
        rss = _rss_bytes()
        started = time.perf_counter()
        latencies = run(requests)
        seconds = time.perf_counter() - started
        gc.collect()
        grown_rss = _rss_bytes() - rss
        tracemalloc.start()
        traced = tracemalloc.get_traced_memory()[0]
        latencies_traced = run(max(concurrency, requests // 4))
        gc.collect()
        grown_traced = tracemalloc.get_traced_memory()[0] - traced
        tracemalloc.stop()
        assert _get(url, "/health").json()["contexts"] == 2
    return seconds, latencies + latencies_traced, grown_rss, grown_traced


def _check_load(model, clients, requests, concurrency):
    seconds, latencies, rss, traced = _load(model, clients, requests, concurrency)
    timed = np.sort(latencies[:requests])
    print(f"\nload: {requests} requests, concurrency {concurrency}: {requests / seconds:.1f} requests/s, "
          f"latency p50 {1e3 * timed[len(timed) // 2]:.1f} ms, p95 {1e3 * timed[int(0.95 * len(timed))]:.1f} ms; "
          f"RSS {rss / 2**20:+.1f} MiB; Python memory traced over {len(latencies) - requests} more requests "
          f"{traced / 2**20:+.3f} MiB")
    assert len(latencies) == requests + max(concurrency, requests // 4)  # each answered and decrypted right
    assert traced < 2 << 20, "memory traced by Python grew under load"
    assert rss < 64 << 20, "the process grew under load"


@pytest.mark.slow
def test_load_with_tokens_small(model, clients):
    _check_load(model, clients, requests=16, concurrency=4)


@pytest.mark.slow
def test_load_with_tokens_200_requests_concurrency_8(model, clients):
    _check_load(model, clients, requests=200, concurrency=8)


def test_cli_remote_sends_the_token_and_registers_by_itself(model, clients, tmp_path, capsys):
    from tensor_ops import cli

    client = clients[2]
    client.save(tmp_path / "client.key")
    np.save(tmp_path / "x.npy", np.stack([X, -X]))
    (tmp_path / "token").write_text(BOB + "\n")
    (tmp_path / "wrong").write_text("z" * 30 + "\n")
    args = ["remote", "--client", tmp_path / "client.key", "--input", tmp_path / "x.npy", "--out", tmp_path / "y.npy"]
    with _running(create_app(model, tokens=TOKENS)) as url:
        args = [str(a) for a in args + ["--url", url]]
        assert cli.main(args + ["--token-file", str(tmp_path / "wrong")]) == 2
        assert "HTTP 401" in capsys.readouterr().err
        assert cli.main(args + ["--token-file", str(tmp_path / "token")]) == 0  # 404 -> registered -> retried
        assert cli.main(args + ["--token-file", str(tmp_path / "token")]) == 0  # registered already
        assert _get(url, "/health").json()["contexts"] == 1
    y = np.load(tmp_path / "y.npy")
    assert_precise(y, model.forward(np.stack([X, -X])), client.plan.params)
    assert cli.main(args + ["--token-file", str(tmp_path / "token")]) == 2  # the server is gone
    assert "cannot reach" in capsys.readouterr().err


def test_serve_refuses_bad_tokens_and_limits_before_listening(model, tmp_path, capsys):
    from tensor_ops.serve import main

    model.save(tmp_path / "m.npz")
    (tmp_path / "weak").write_text("alice:short\n")
    base = ["--model", str(tmp_path / "m.npz"), "--port", "1"]
    assert main(base + ["--tokens-file", str(tmp_path / "missing")]) == 2
    assert "--tokens-file" in capsys.readouterr().err
    assert main(base + ["--tokens-file", str(tmp_path / "weak")]) == 2
    assert "at least 16" in capsys.readouterr().err
    assert main(base + ["--tokens-file", str(tmp_path / "weak"), "--max-bytes-per-token", "10"]) == 2
    assert main(base + ["--max-context-bytes", "100", "--max-bytes-per-token", "99"]) == 2
    assert "max_bytes_per_token=99" in capsys.readouterr().err


def test_tokens_refuse_to_pickle():
    """Bearer secrets never travel implicitly: pickling Tokens raises, naming what to pass instead."""
    import pickle

    tokens = Tokens({"alice": "a" * 32})
    with pytest.raises(TypeError, match="HEZK_TOKENS"):
        pickle.dumps(tokens)
