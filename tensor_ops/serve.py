"""HTTP endpoint for encrypted inference (FastAPI + uvicorn, the ``serve`` extra).

    python -m tensor_ops.serve --model model.npz --port 8000 --tokens-file tokens.txt

Routes (bodies are raw bytes, ``application/octet-stream``):
- ``GET  /plan``                   the model's public plan (parameters, packing, rotations) as JSON;
- ``POST /contexts``               register a client's public context -> ``{"context_id": ...}``;
- ``POST /infer/{context_id}``     a request made by ``Client.encrypt`` -> the reply bytes;
- ``GET  /health``                 status, the number of contexts, whether access is open, every limit.
The server never holds a secret key (a context carrying one is refused) and has no route that returns
keys or contexts. Bodies above the size limits get 413, malformed bytes 400, an unknown context 404, a
ciphertext under another key 409, a wrong shape or level 422; the server keeps serving after each.

Access (:mod:`tensor_ops.access`): with tokens (``--tokens-file``, or ``$HEZK_TOKENS``), every route but
``/health`` needs ``Authorization: Bearer <token>`` (401 without a known token; an address sending more than
``auth_failure_burst`` of those gets 429 for a while, and the 401s are logged once a minute). Each token has its
own namespace of context ids: a context belongs to the token that registered it, another token's ids are
unknown to it (404), and uploading someone's public context first takes nothing from them (no squatting).
Each token keeps at most ``max_contexts_per_token`` contexts and ``max_bytes_per_token`` bytes, its own least
recently used dropped first (a dropped client gets 404 and registers again: ``Endpoint.infer`` does it by itself), never another
token's; the server as a whole keeps ``max_contexts`` and ``max_total_bytes`` (503 when the rest is other
tokens' contexts). Each token sends at most ``rate`` requests per second (bursts of ``burst``) with at most
``max_concurrent`` in flight, else 429 with Retry-After. Without tokens every caller is one client (the
server-wide quota) and the start-up log says the endpoint is open; it listens on 127.0.0.1 unless ``--host``
says otherwise. Headers must arrive within ``header_timeout`` seconds (else the connection is closed: run
through ``run``, or give uvicorn ``http=app.state.http_protocol``), a body without a pause above
``body_timeout`` and at ``min_body_rate`` on average (else 408); the model's encoded weights are kept for at
most ``max_encoded_bytes``, least recently used dropped. Registrations, evictions, refusals and per-request timings are logged through
:mod:`logging` (logger ``tensor_ops.serve``: token names, context ids, sizes and times, never tokens or
payloads).
"""

import argparse
import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import re
import sys
import time

import numpy as np

from crypto.errors import (ContextMismatchError, HEError, KeyMissingError, LevelError, ParameterError,
                           SerializationError, ShapeError)
from tensor_ops.access import (TOKENS_ENV, AuthFailures, Limits, LogWindow, Quota, Refused, Throttle, Tokens,
                               bearer)
from tensor_ops.option_texts import BOOTSTRAP_HELP, MEMORY_HELP, PARAMS_HELP
from tensor_ops.inference import Client, EncodedCache, Server
from tensor_ops.model_plan import DEFAULT_KEY_BUDGET, default_memory_budget
from tensor_ops.nn import Sequential

_DEFAULTS = Limits()
DEFAULT_MAX_CONTEXT_BYTES = _DEFAULTS.max_context_bytes
DEFAULT_MAX_REQUEST_BYTES = _DEFAULTS.max_request_bytes
DEFAULT_MAX_CONTEXTS = _DEFAULTS.max_contexts
TOKEN_ENV = "HEZK_TOKEN"
logger = logging.getLogger(__name__)
_STATUS = ((ContextMismatchError, 409), (LevelError, 422), (ShapeError, 422), (KeyMissingError, 422),
           (SerializationError, 400), (ParameterError, 400), (HEError, 400))


def _status_of(error: Exception) -> int:
    return next((status for kind, status in _STATUS if isinstance(error, kind)), 400)


def create_app(model: Sequential, *, input_shape=None, tokens: Tokens | None = None, limits: Limits | None = None,
               backend="auto", key_budget: int = DEFAULT_KEY_BUDGET, params=None, bootstrap=None, **bounds):
    """A FastAPI app serving ``model`` on samples of ``input_shape`` (default: the model's own).

    ``tokens``: a :class:`~tensor_ops.access.Tokens` (every route but ``/health`` then needs
    ``Authorization: Bearer <token>``: 401 without a known one, 404 on another token's context); None serves
    everyone as one client and logs that the endpoint is open. ``limits``: a :class:`~tensor_ops.access.Limits`,
    or its fields as keywords (``max_contexts=4, rate=5.0``). A context belongs to the token that registered it;
    past a token's quota its own least recently used contexts are dropped (registering or running an
    inference counts as a use), never another token's. ``params`` / ``bootstrap``: the published plan's
    (``Sequential.plan``; default the automatic choice); each client's Server follows its own context."""
    from fastapi import FastAPI, HTTPException, Request, Response
    from fastapi.concurrency import run_in_threadpool

    if limits is None:
        limits = Limits(**bounds)
    elif bounds:
        limits = dataclasses.replace(limits, **bounds)
    app = FastAPI(title="hezk encrypted inference")
    quota, throttle, failures, quiet = Quota(limits), Throttle(limits), AuthFailures(limits), LogWindow()
    # the model's encoded weights, shared by every client's Server (key-independent), bounded in bytes
    encoded = EncodedCache(limits.max_encoded_bytes)
    app.state.limits = limits
    app.state.http_protocol = header_deadline_protocol(limits.header_timeout)  # for uvicorn's ``http=``
    plan = model.plan(input_shape, key_budget=key_budget, params=params, bootstrap=bootstrap)
    input_shape = plan.input_shape
    if tokens is None:
        logger.warning("no access tokens: the endpoint is OPEN to every caller that reaches it, served as one "
                       "client (give tokens, e.g. --tokens-file, before listening beyond 127.0.0.1)")
    else:
        logger.info("access by bearer token; clients: %s", ", ".join(tokens.names))

    def label(principal) -> str:
        return "open" if principal is None else principal

    def refused(status: int, message: str, retry_after: int | None = None, principal=None,
                quietly: bool = False) -> HTTPException:
        """The HTTPException, logged; ``quietly``: at most one line per status a minute (floods of bad tokens)."""
        silenced = quiet.note(status) if quietly else 0
        if silenced is not None:
            more = f" (and {silenced} more like it in the last minute, not logged)" if silenced else ""
            logger.warning("refused (%d) %s: %s%s", status, label(principal), message, more)
        headers = {"Retry-After": str(retry_after)} if retry_after is not None else None
        if status == 401:
            headers = {"WWW-Authenticate": "Bearer"}
        if status == 408:
            headers = {"Connection": "close"}
        return HTTPException(status, message, headers=headers)

    def from_rule(error: Refused, principal) -> HTTPException:
        return refused(error.status, error.message, error.retry_after, principal)

    def principal_of(request: Request):
        """The token's name (None when open); 401 without a known token, 429 for an address past its failures."""
        if tokens is None:
            return None
        address = request.client.host if request.client is not None else "unknown"
        try:
            failures.check(address)
        except Refused as error:
            raise refused(error.status, error.message, error.retry_after, "(no valid token)", quietly=True) from None
        presented = bearer(request.headers.get("authorization"))
        name = tokens.match(presented)
        if name is None:
            failures.failed(address)
            raise refused(401, "a valid access token is needed: send 'Authorization: Bearer <token>'"
                          if presented is None else "the access token is not known to this server",
                          principal="(no valid token)", quietly=True)
        return name

    @contextlib.asynccontextmanager
    async def admitted(request: Request):
        """Authenticate, then hold one of the principal's request slots (429 past its rate or concurrency)."""
        principal = principal_of(request)
        try:
            throttle.enter(principal)
        except Refused as error:
            raise from_rule(error, principal) from None
        try:
            yield principal
        finally:
            throttle.leave(principal)

    async def read_body(request: Request, limit: int, what: str, principal) -> bytes:
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise refused(413, f"{what} of {declared} bytes exceeds the limit of {limit} bytes", principal=principal)
        chunks, size = [], 0
        started = last = time.monotonic()
        stream = request.stream().__aiter__()
        while True:
            # the next chunk within body_timeout, and never below min_body_rate once body_timeout has passed
            deadline = min(last + limits.body_timeout, started + limits.body_timeout + size / limits.min_body_rate)
            try:
                chunk = await asyncio.wait_for(stream.__anext__(), max(0.0, deadline - time.monotonic()))
            except StopAsyncIteration:
                break
            except asyncio.TimeoutError:
                raise refused(408, f"{what} arrived too slowly ({size} bytes in {time.monotonic() - started:.1f} s; "
                                   f"limits: a pause of body_timeout={limits.body_timeout:g} s, then min_body_rate="
                                   f"{limits.min_body_rate} bytes/s)", principal=principal) from None
            last = time.monotonic()
            size += len(chunk)
            if size > limit:
                raise refused(413, f"{what} exceeds the limit of {limit} bytes", principal=principal)
            chunks.append(chunk)
        if not size:
            raise refused(400, f"{what} is empty", principal=principal)
        return b"".join(chunks)

    def register(blob: bytes) -> Server:
        from crypto.context import CKKSContext

        context = CKKSContext.from_bytes(blob, backend=backend)
        if context.has_secret_key:
            raise ParameterError("the context holds a secret key: send only Client.public_context() bytes")
        return Server(model, context, input_shape=input_shape, backend=backend, encoded=encoded,
                      key_budget=key_budget)

    @app.get("/health")
    def health():
        return {"status": "ok", "contexts": len(quota), "access": "open" if tokens is None else "token",
                "encoded_bytes": encoded.nbytes, "limits": limits.report()}

    @app.get("/plan")
    async def get_plan(request: Request):
        async with admitted(request):
            return {"plan": plan.to_dict(), "explain": plan.explain()}

    @app.post("/contexts", status_code=201)
    async def post_context(request: Request):
        async with admitted(request) as principal:
            started = time.perf_counter()
            blob = await read_body(request, min(limits.max_context_bytes, limits.quota(principal)[1]),
                                   "public context", principal)
            try:
                server = await run_in_threadpool(register, blob)
            except HEError as error:
                raise refused(_status_of(error), f"public context refused: {error}", principal=principal) from None
            context_id = server.key_id.hex()
            try:
                dropped = quota.admit(context_id, principal, len(blob), server)
            except Refused as error:
                raise from_rule(error, principal) from None
            logger.info("registered context %s for %s (%d bytes, %d rotation keys; %d registered, %d of theirs) "
                        "in %.3f s", context_id[:16], label(principal), len(blob), len(server.context.rotation_steps),
                        len(quota), len(quota.owned(principal)), time.perf_counter() - started)
            for evicted in dropped:
                logger.info("evicted context %s of %s, its least recently used (quota %d contexts, %d bytes)",
                            evicted[:16], label(principal), *limits.quota(principal))
            return {"context_id": context_id, "rotation_keys": len(server.context.rotation_steps),
                    "bytes": len(blob), "depth": int(server.plan.depth), "batch": server.plan.batch,
                    "model": server.model_id, "fit": server.fit_id}

    @app.post("/infer/{context_id}")
    async def infer(context_id: str, request: Request):
        async with admitted(request) as principal:
            started = time.perf_counter()
            try:
                server = quota.get(context_id, principal)  # now its owner's most recently used
            except Refused as error:
                raise from_rule(error, principal) from None
            blob = await read_body(request, limits.max_request_bytes, "request", principal)
            try:
                reply = await run_in_threadpool(server.evaluate, blob)
            except HEError as error:
                raise refused(_status_of(error), f"request refused: {error}", principal=principal) from None
            logger.info("inference on context %s for %s: %d bytes in, %d bytes out, %.3f s", context_id[:16],
                        label(principal), len(blob), len(reply), time.perf_counter() - started)
            return Response(content=reply, media_type="application/octet-stream")

    return app


def header_deadline_protocol(header_timeout: float):
    """uvicorn's h11 protocol with a deadline on request headers: a connection whose request line and headers
    are not complete ``header_timeout`` seconds after it opened (or after its previous response) is closed, so
    half-open and trickling connections do not pile up (uvicorn's own keep-alive timeout stops at the first
    byte). Pass it as ``uvicorn.run(app, http=...)`` (``run`` does; ``create_app`` keeps it as
    ``app.state.http_protocol``)."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class HeaderDeadlineProtocol(H11Protocol):
        _deadline = None

        def _arm(self):
            self._disarm()
            self._deadline = self.loop.call_later(header_timeout, self._expired)

        def _disarm(self):
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _expired(self):
            self._deadline = None
            busy = self.cycle is not None and not self.cycle.response_complete  # a request is being served
            if not busy and not self.transport.is_closing():
                _slow_headers.note()
                self.transport.close()

        def connection_made(self, transport):
            super().connection_made(transport)
            self._arm()

        def data_received(self, data):
            idle = self.conn.their_state is h11.IDLE
            super().data_received(data)
            if idle and self.conn.their_state is not h11.IDLE:
                self._disarm()  # a request's headers are in: the app bounds its body

        def on_response_complete(self):
            super().on_response_complete()
            if not self.transport.is_closing():
                # the next request gets the same deadline; so does the rest of a body the route did not read
                self._arm()

        def connection_lost(self, exc):
            self._disarm()
            super().connection_lost(exc)

    return HeaderDeadlineProtocol


class _SlowHeaders:
    """Connections closed for slow headers, logged at most once a minute."""

    def __init__(self):
        self._window = LogWindow()

    def note(self):
        silenced = self._window.note("headers")
        if silenced is not None:
            logger.warning("closed a connection whose request headers did not arrive in time%s",
                           f" (and {silenced} more in the last minute, not logged)" if silenced else "")


_slow_headers = _SlowHeaders()


# ---------------------------------------------------------------------------------------------------------
# Client side over HTTP (httpx).

class RemoteError(RuntimeError):
    """The server answered with an error status; ``status``, the server's message and ``retry_after`` (seconds,
    from a 429 or 503, else None) are kept."""

    def __init__(self, status: int, message: str, retry_after: int | None = None):
        super().__init__(f"HTTP {status}: {message}")
        self.status, self.message, self.retry_after = status, message, retry_after


def _check(response):
    if response.status_code >= 400:
        try:
            message = response.json().get("detail", response.text)
        except ValueError:
            message = response.text
        retry = response.headers.get("retry-after", "")
        raise RemoteError(response.status_code, str(message), int(retry) if retry.isdigit() else None)
    return response


class Endpoint:
    """A connection to the HTTP endpoint at ``url``, sending ``token`` (``Authorization: Bearer``) when one
    is given; reuses one HTTP connection pool (use as a context manager, or call ``close``)."""

    def __init__(self, url: str, token: str | None = None, timeout: float = 300.0):
        import httpx

        headers = {"authorization": f"Bearer {token}"} if token else {}
        self.url = url.rstrip("/")
        self._http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return f"Endpoint({self.url!r})"  # never the token

    def close(self):
        self._http.close()

    def _post(self, path: str, body: bytes):
        return self._http.post(path, content=body, headers={"content-type": "application/octet-stream"})

    def health(self) -> dict:
        return _check(self._http.get("/health")).json()

    def plan(self) -> dict:
        """The server model's public plan (pass it as ``Client(plan=...)``)."""
        return _check(self._http.get("/plan")).json()["plan"]

    def register(self, client: Client) -> str:
        """Upload ``client``'s public context; returns its context id (``client.key_id.hex()``)."""
        return _check(self._post("/contexts", client.public_context())).json()["context_id"]

    def infer(self, client: Client, x, context_id: str | None = None) -> np.ndarray:
        """Encrypt x, have the server evaluate it, decrypt the reply. Registers the context if no id is given,
        and again, once, when the server answers 404 for the client's own context (it was evicted)."""
        own = client.key_id.hex()
        context_id = context_id or self.register(client)
        request = client.encrypt(x)
        response = self._post(f"/infer/{context_id}", request)
        if response.status_code == 404 and context_id == own:
            logger.info("context %s is no longer registered (evicted): registering it again", own[:16])
            self.register(client)
            response = self._post(f"/infer/{context_id}", request)
        return client.decrypt(_check(response).content)


def fetch_plan(url: str, timeout: float = 30.0, token: str | None = None) -> dict:
    """The server model's public plan (pass it as ``Client(plan=...)``)."""
    with Endpoint(url, token, timeout) as endpoint:
        return endpoint.plan()


def register_context(url: str, client: Client, timeout: float = 120.0, token: str | None = None) -> str:
    """Upload ``client``'s public context; returns the context id to use with ``remote_infer``."""
    with Endpoint(url, token, timeout) as endpoint:
        return endpoint.register(client)


def remote_infer(url: str, client: Client, x, context_id: str | None = None, timeout: float = 300.0,
                 token: str | None = None) -> np.ndarray:
    """Encrypt x, have the server evaluate it, decrypt the reply (registers the context if no id is given, and
    registers it again once if the server evicted it: see ``Endpoint.infer``)."""
    with Endpoint(url, token, timeout) as endpoint:
        return endpoint.infer(client, x, context_id)


def read_token(path=None, environ=None) -> str | None:
    """A client's token: the first line of the file at ``path``, else environment variable ``HEZK_TOKEN``
    (None when neither is given); refuses an empty file with ParameterError naming it."""
    if path is not None:
        try:
            with open(path, encoding="utf-8") as handle:
                token = handle.readline().strip()
        except (OSError, UnicodeDecodeError) as error:
            raise ParameterError(f"--token-file {path}: {getattr(error, 'strerror', None) or error}") from None
        if not token:
            raise ParameterError(f"--token-file {path} is empty: its first line must be the token")
        return token
    return (os.environ if environ is None else environ).get(TOKEN_ENV, "").strip() or None


def parse_shape(text: str) -> tuple[int, ...]:
    """``"1,8,8"`` or ``"1x8x8"`` -> (1, 8, 8); anything else raises ``ParameterError`` naming the text."""
    try:
        shape = tuple(int(d) for d in text.replace("x", ",").split(",") if d.strip())
    except ValueError:
        shape = ()
    if not shape or min(shape) < 1:
        raise ParameterError(f"--input-shape={text!r} must be positive sizes like 1,8,8")
    return shape


_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30}


def parse_bytes(text: str, option: str = "--key-budget") -> int:
    """``"2GiB"``, ``"1.5GB"``, ``"500MiB"`` or ``"123456"`` -> bytes; anything else raises ``ParameterError``
    naming ``option``."""
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]*)?)\s*([A-Za-z]*)\s*", str(text))
    if match is None or match.group(2).lower() not in _UNITS or float(match.group(1)) <= 0:
        raise ParameterError(f"{option}={text!r} must be a positive size in bytes, e.g. 2GiB, 1.5GB, 500MiB "
                             f"or 2000000000")
    return int(float(match.group(1)) * _UNITS[match.group(2).lower()])


def read_parameters(text: str):
    """``--params``: (CKKSParameters, BootstrapConfig or None) from a preset name, a JSON file (a literal, or
    ``CKKSParameters.to_dict``, with an optional "bootstrap" object of ``BootstrapConfig`` fields) or a
    parameters record; anything else raises ParameterError naming the option."""
    from crypto.ckks.bootstrap import BootstrapConfig
    from crypto.params import PRESETS, CKKSParameters

    text = str(text)
    if text.upper() in PRESETS:
        return CKKSParameters.preset(text.upper()), None
    try:
        with open(text, "rb") as handle:
            blob = handle.read()
    except OSError as error:
        raise ParameterError(f"--params {text!r} is neither a preset ({', '.join(PRESETS)}) nor a readable file "
                             f"({error.strerror or error})") from None
    if blob.startswith(b"HEZK") or blob.lstrip()[:1] not in (b"{", b"["):
        try:
            return CKKSParameters.from_bytes(blob), None
        except HEError as error:
            raise ParameterError(f"--params {text}: neither a JSON object of parameters nor a parameters record "
                                 f"({error})") from None
    try:
        data = json.loads(blob.decode())
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        config = data.pop("bootstrap", None)
        params = CKKSParameters.from_dict(data) if "q_levels" in data else CKKSParameters.from_literal(data)
        return params, None if config is None else BootstrapConfig(**config)
    except HEError as error:
        raise ParameterError(f"--params {text}: {error}") from None
    except (ValueError, TypeError, KeyError) as error:
        raise ParameterError(f"--params {text}: not a JSON object of parameters ({error})") from None


def plan_keywords(args) -> dict:
    """``params`` and ``bootstrap`` for ``Sequential.plan`` from ``--params`` and ``--bootstrap`` /
    ``--no-bootstrap`` (None each when absent: the automatic choice, ``model_plan.auto_parameters``); a
    bootstrap config in the --params file applies unless --no-bootstrap."""
    text, flag = getattr(args, "params", None), getattr(args, "bootstrap", None)
    params, config = (None, None) if text is None else read_parameters(text)
    bootstrap = False if flag is False else config if config is not None else flag
    return {"params": params, "bootstrap": bootstrap}


def _bytes(text: str, option: str = "--key-budget") -> int:
    try:
        return parse_bytes(text, option)
    except ParameterError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _shape(text: str) -> tuple[int, ...]:
    try:
        return parse_shape(text)
    except ParameterError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be a positive integer")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} must be a positive number")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The server's options (shared by ``python -m tensor_ops.serve`` and ``python -m tensor_ops serve``)."""
    parser.add_argument("--model", required=True, help="model file (stays on the server): ONNX, or .npz written by "
                                                       "Sequential.save / hezk.model.save_npz, or weights that name "
                                                       "their activation")
    parser.add_argument("--calibration", default=None,
                        help="representative inputs .npy: fit each activation on the range its input takes there "
                             "(as the clients' keygen --calibration: requests planned with other polynomials get 409)")
    parser.add_argument("--key-budget", type=_bytes, default=DEFAULT_KEY_BUDGET,
                        help="bytes the Galois keys may take, e.g. 2GiB (default 12 GiB, half of a 24 GB machine; as "
                             "the clients' keygen --key-budget)")
    parser.add_argument("--degree", type=_positive, default=None,
                        help="degree of each fitted activation's polynomial (as the clients' keygen --degree)")
    parser.add_argument("--relu", choices=("fit", "composite", "auto"), default="fit",
                        help="each calibrated ReLU as its fitted polynomial, the composite sign, or chosen per "
                             "activation (as the clients' keygen --relu; Sequential.choose_relus)")
    parser.add_argument("--params", default=None, help=PARAMS_HELP)
    parser.add_argument("--memory-budget", type=lambda text: _bytes(text, "--memory-budget"), default=None,
                        help=MEMORY_HELP + " (for one client's context)")
    parser.add_argument("--bootstrap", action=argparse.BooleanOptionalAction, default=None, help=BOOTSTRAP_HELP)
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: loopback only)")
    parser.add_argument("--port", type=int, default=8000, help="TCP port to listen on (default 8000)")
    parser.add_argument("--input-shape", type=_shape, default=None,
                        help="sample shape, e.g. 1,8,8 (needed when the model file does not record it)")
    parser.add_argument("--max-request-bytes", type=_positive, default=DEFAULT_MAX_REQUEST_BYTES,
                        help=f"largest request body, larger ones get HTTP 413 "
                             f"(default {DEFAULT_MAX_REQUEST_BYTES >> 20} MiB)")
    parser.add_argument("--max-context-bytes", type=_positive, default=DEFAULT_MAX_CONTEXT_BYTES,
                        help=f"largest public context, larger ones get HTTP 413 "
                             f"(default {DEFAULT_MAX_CONTEXT_BYTES >> 20} MiB)")
    parser.add_argument("--max-contexts", type=_positive, default=DEFAULT_MAX_CONTEXTS,
                        help=f"client contexts kept at once by the whole server (default {DEFAULT_MAX_CONTEXTS})")
    parser.add_argument("--max-total-bytes", type=_positive, default=_DEFAULTS.max_total_bytes,
                        help=f"public-context bytes kept at once by the whole server "
                             f"(default {_DEFAULTS.max_total_bytes >> 30} GiB)")
    parser.add_argument("--tokens-file", default=None,
                        help=f"file of access tokens, one 'name:token' per line (default: ${TOKENS_ENV}, same "
                             f"format, comma-separated); without tokens the endpoint is open to every caller")
    parser.add_argument("--max-contexts-per-token", type=_positive, default=_DEFAULTS.max_contexts_per_token,
                        help=f"contexts one token keeps, its own least recently used dropped first "
                             f"(default {_DEFAULTS.max_contexts_per_token})")
    parser.add_argument("--max-bytes-per-token", type=_positive, default=_DEFAULTS.max_bytes_per_token,
                        help=f"public-context bytes one token keeps "
                             f"(default {_DEFAULTS.max_bytes_per_token >> 30} GiB)")
    parser.add_argument("--rate", type=_positive_float, default=_DEFAULTS.rate,
                        help=f"requests per second per token, past it HTTP 429 with Retry-After "
                             f"(default {_DEFAULTS.rate:g})")
    parser.add_argument("--burst", type=_positive, default=_DEFAULTS.burst,
                        help=f"requests one token may send at once above --rate (default {_DEFAULTS.burst})")
    parser.add_argument("--max-concurrent", type=_positive, default=_DEFAULTS.max_concurrent,
                        help=f"requests in flight per token, past it HTTP 429 (default {_DEFAULTS.max_concurrent})")
    parser.add_argument("--max-encoded-bytes", type=_positive, default=_DEFAULTS.max_encoded_bytes,
                        help=f"bytes of encoded model weights kept for all parameter sets in use, least recently "
                             f"used dropped (default {_DEFAULTS.max_encoded_bytes >> 30} GiB)")
    parser.add_argument("--header-timeout", type=_positive_float, default=_DEFAULTS.header_timeout,
                        help=f"seconds a connection has to send its request headers, else it is closed "
                             f"(default {_DEFAULTS.header_timeout:g})")
    parser.add_argument("--body-timeout", type=_positive_float, default=_DEFAULTS.body_timeout,
                        help=f"longest pause in a request body, after which it must also arrive at "
                             f"{_DEFAULTS.min_body_rate >> 10} KiB/s on average, else HTTP 408 "
                             f"(default {_DEFAULTS.body_timeout:g})")
    return parser


def _read_array(path) -> np.ndarray:
    try:
        return np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as error:
        raise SerializationError(f"--calibration {path}: not a readable numpy .npy array ({error})") from None


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``python -m tensor_ops.serve``."""
    return add_arguments(argparse.ArgumentParser(prog="python -m tensor_ops.serve",
                                                 description=__doc__.split("\n")[0]))


_LIMIT_OPTIONS = ("max_request_bytes", "max_context_bytes", "max_contexts", "max_total_bytes",
                  "max_contexts_per_token", "max_bytes_per_token", "rate", "burst", "max_concurrent",
                  "max_encoded_bytes", "header_timeout", "body_timeout")


def _refuse_attention(path, input_shape) -> None:
    """HEError for a model with attention (an exported transformer layer): the HTTP server runs the slot path."""
    from tensor_ops.attention_plan import read_graph

    try:
        graph = read_graph(path, input_shape)
    except HEError:
        return  # Sequential.load names the problem
    if graph is not None:
        raise HEError(f"serve: {path} holds attention (Softmax, LayerNorm, products of two encrypted tensors); the "
                      f"HTTP server runs models without attention only: run it with files (hezk keygen, encrypt, "
                      f"infer --context, decrypt) or locally (hezk infer --input)")


def run(args) -> int:
    """Serve ``args.model`` until interrupted (``args``: the options of :func:`add_arguments`); tokens from
    ``--tokens-file``, else from ``$HEZK_TOKENS``, else none (open: logged, and loopback unless --host)."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s:     %(name)s: %(message)s")
    try:
        tokens = Tokens.from_file(args.tokens_file) if args.tokens_file else Tokens.from_env()
        limits = Limits(**{name: getattr(args, name) for name in _LIMIT_OPTIONS})
        calibration = None if getattr(args, "calibration", None) is None else _read_array(args.calibration)
        _refuse_attention(args.model, args.input_shape)
        model = Sequential.load(args.model, args.input_shape, calibration=calibration,
                                degree=getattr(args, "degree", None))
        choice = plan_keywords(args)
        if getattr(args, "relu", "fit") != "fit":
            model = model.choose_relus(args.input_shape, key_budget=args.key_budget, relu=args.relu, **choice)
        budget = args.memory_budget if args.memory_budget is not None else default_memory_budget()
        model.plan(args.input_shape, key_budget=args.key_budget, **choice).memory_estimate().check(
            "server", budget, key_budget=args.key_budget)
        app = create_app(model, input_shape=args.input_shape, tokens=tokens, limits=limits,
                         key_budget=args.key_budget, **choice)
    except HEError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    import uvicorn

    if tokens is None and args.host not in ("127.0.0.1", "localhost", "::1"):
        logger.warning("listening on %s WITHOUT access tokens: anyone who reaches this port may use it", args.host)
    print(model.plan(args.input_shape, key_budget=args.key_budget, **choice).explain())
    uvicorn.run(app, host=args.host, port=args.port, log_level="info", http=app.state.http_protocol,
                timeout_keep_alive=5)
    return 0


def main(argv=None) -> int:
    """``python -m tensor_ops.serve``: parse the options and serve."""
    return run(build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
