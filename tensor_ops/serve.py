"""HTTP endpoint for encrypted inference (FastAPI + uvicorn, the ``serve`` extra).

    python -m tensor_ops.serve --model model.npz --port 8000

Routes (bodies are raw bytes, ``application/octet-stream``):
- ``GET  /plan``                   the model's public plan (parameters, packing, rotations) as JSON;
- ``POST /contexts``               register a client's public context -> ``{"context_id": ...}``;
- ``POST /infer/{context_id}``     a request made by ``Client.encrypt`` -> the reply bytes;
- ``GET  /health``.
The server never holds a secret key (a context carrying one is refused) and has no route that returns
keys or contexts. Bodies above the size limits get 413, malformed bytes 400, an unknown context 404, a
ciphertext under another key 409, a wrong shape or level 422; the server keeps serving after each.

Limits (each a ``create_app`` argument and a ``serve`` option): a public context of at most
``max_context_bytes`` (512 MiB), a request of at most ``max_request_bytes`` (64 MiB), at most
``max_contexts`` (16) registered contexts, the least recently used (registered or used for inference)
dropped first; a dropped client gets 404 and registers again. Registrations, evictions and refusals are
logged through :mod:`logging` (logger ``tensor_ops.serve``, context ids and sizes only, never payloads).
"""

import argparse
import logging
import sys
from collections import OrderedDict

import numpy as np

from crypto.errors import (ContextMismatchError, HEError, KeyMissingError, LevelError, ParameterError,
                           SerializationError, ShapeError)
from tensor_ops.inference import Client, Server
from tensor_ops.nn import Sequential

DEFAULT_MAX_CONTEXT_BYTES = 512 << 20
DEFAULT_MAX_REQUEST_BYTES = 64 << 20
DEFAULT_MAX_CONTEXTS = 16
logger = logging.getLogger(__name__)
_STATUS = ((ContextMismatchError, 409), (LevelError, 422), (ShapeError, 422), (KeyMissingError, 422),
           (SerializationError, 400), (ParameterError, 400), (HEError, 400))


def _status_of(error: Exception) -> int:
    return next((status for kind, status in _STATUS if isinstance(error, kind)), 400)


def create_app(model: Sequential, *, input_shape=None, max_context_bytes: int = DEFAULT_MAX_CONTEXT_BYTES,
               max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES, max_contexts: int = DEFAULT_MAX_CONTEXTS,
               backend="auto"):
    """A FastAPI app serving ``model`` on samples of ``input_shape`` (default: the model's own); registered
    contexts live in this app only (at most ``max_contexts``, least recently used dropped first: registering
    or running an inference counts as a use)."""
    from fastapi import FastAPI, HTTPException, Request, Response
    from fastapi.concurrency import run_in_threadpool

    app = FastAPI(title="hezk encrypted inference")
    servers = OrderedDict()  # context id -> Server, least recently used first
    encoded = {}  # the model's encoded weights, shared by every client's Server (key-independent)
    plan = model.plan(input_shape)
    input_shape = plan.input_shape

    async def read_body(request: Request, limit: int, what: str) -> bytes:
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise refused(413, f"{what} of {declared} bytes exceeds the limit of {limit} bytes")
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise refused(413, f"{what} exceeds the limit of {limit} bytes")
            chunks.append(chunk)
        if not size:
            raise refused(400, f"{what} is empty")
        return b"".join(chunks)

    def refused(status: int, message: str) -> HTTPException:
        logger.warning("refused (%d): %s", status, message)
        return HTTPException(status, message)

    def register(blob: bytes) -> Server:
        from crypto.context import CKKSContext

        context = CKKSContext.from_bytes(blob, backend=backend)
        if context.has_secret_key:
            raise ParameterError("the context holds a secret key: send only Client.public_context() bytes")
        return Server(model, context, input_shape=input_shape, backend=backend, encoded=encoded)

    @app.get("/health")
    def health():
        return {"status": "ok", "contexts": len(servers)}

    @app.get("/plan")
    def get_plan():
        return {"plan": plan.to_dict(), "explain": plan.explain()}

    @app.post("/contexts", status_code=201)
    async def post_context(request: Request):
        blob = await read_body(request, max_context_bytes, "public context")
        try:
            server = await run_in_threadpool(register, blob)
        except HEError as error:
            raise refused(_status_of(error), f"public context refused: {error}") from None
        context_id = server.key_id.hex()
        servers[context_id] = server
        servers.move_to_end(context_id)
        logger.info("registered context %s (%d bytes, %d rotation keys; %d registered)", context_id[:16], len(blob),
                    len(server.context.rotation_steps), len(servers))
        while len(servers) > max_contexts:
            evicted, _ = servers.popitem(last=False)
            logger.info("evicted context %s, the least recently used (max_contexts=%d)", evicted[:16], max_contexts)
        return {"context_id": context_id, "rotation_keys": len(server.context.rotation_steps),
                "bytes": len(blob), "depth": int(server.plan.depth), "batch": server.plan.batch,
                "model": server.model_id}

    @app.post("/infer/{context_id}")
    async def infer(context_id: str, request: Request):
        server = servers.get(context_id)
        if server is None:
            raise refused(404, f"context_id={context_id[:40]!r} is not registered (or was evicted): "
                               "POST /contexts first")
        servers.move_to_end(context_id)  # least recently used goes first
        blob = await read_body(request, max_request_bytes, "request")
        try:
            reply = await run_in_threadpool(server.evaluate, blob)
        except HEError as error:
            raise refused(_status_of(error), f"request refused: {error}") from None
        return Response(content=reply, media_type="application/octet-stream")

    return app


# ---------------------------------------------------------------------------------------------------------
# Client side over HTTP (httpx).

class RemoteError(RuntimeError):
    """The server answered with an error status; ``status`` and the server's message are kept."""

    def __init__(self, status: int, message: str):
        super().__init__(f"HTTP {status}: {message}")
        self.status, self.message = status, message


def _check(response):
    if response.status_code >= 400:
        try:
            message = response.json().get("detail", response.text)
        except ValueError:
            message = response.text
        raise RemoteError(response.status_code, str(message))
    return response


def fetch_plan(url: str, timeout: float = 30.0) -> dict:
    """The server model's public plan (pass it as ``Client(plan=...)``)."""
    import httpx

    return _check(httpx.get(f"{url.rstrip('/')}/plan", timeout=timeout)).json()["plan"]


def register_context(url: str, client: Client, timeout: float = 120.0) -> str:
    """Upload ``client``'s public context; returns the context id to use with ``remote_infer``."""
    import httpx

    response = httpx.post(f"{url.rstrip('/')}/contexts", content=client.public_context(), timeout=timeout,
                          headers={"content-type": "application/octet-stream"})
    return _check(response).json()["context_id"]


def remote_infer(url: str, client: Client, x, context_id: str | None = None, timeout: float = 300.0) -> np.ndarray:
    """Encrypt x, have the server evaluate it, decrypt the reply (registers the context if no id is given)."""
    import httpx

    context_id = context_id or register_context(url, client, timeout)
    response = httpx.post(f"{url.rstrip('/')}/infer/{context_id}", content=client.encrypt(x), timeout=timeout,
                          headers={"content-type": "application/octet-stream"})
    return client.decrypt(_check(response).content)


def parse_shape(text: str) -> tuple[int, ...]:
    """``"1,8,8"`` or ``"1x8x8"`` -> (1, 8, 8); anything else raises ``ParameterError`` naming the text."""
    try:
        shape = tuple(int(d) for d in text.replace("x", ",").split(",") if d.strip())
    except ValueError:
        shape = ()
    if not shape or min(shape) < 1:
        raise ParameterError(f"--input-shape={text!r} must be positive sizes like 1,8,8")
    return shape


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


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The server's options (shared by ``python -m tensor_ops.serve`` and ``python -m tensor_ops serve``)."""
    parser.add_argument("--model", required=True, help="model .npz written by Sequential.save (stays on the server)")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: loopback only)")
    parser.add_argument("--port", type=int, default=8000, help="TCP port to listen on (default 8000)")
    parser.add_argument("--input-shape", type=_shape, default=None,
                        help="sample shape, e.g. 1,8,8 (needed when the model file does not record it)")
    parser.add_argument("--max-request-bytes", type=_positive, default=DEFAULT_MAX_REQUEST_BYTES,
                        help=f"largest request body, larger ones get HTTP 413 (default {DEFAULT_MAX_REQUEST_BYTES >> 20} MiB)")
    parser.add_argument("--max-context-bytes", type=_positive, default=DEFAULT_MAX_CONTEXT_BYTES,
                        help=f"largest public context, larger ones get HTTP 413 "
                             f"(default {DEFAULT_MAX_CONTEXT_BYTES >> 20} MiB)")
    parser.add_argument("--max-contexts", type=_positive, default=DEFAULT_MAX_CONTEXTS,
                        help=f"client contexts kept at once, the least recently used dropped first "
                             f"(default {DEFAULT_MAX_CONTEXTS})")
    return parser


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``python -m tensor_ops.serve``."""
    return add_arguments(argparse.ArgumentParser(prog="python -m tensor_ops.serve",
                                                 description=__doc__.split("\n")[0]))


def run(args) -> int:
    """Serve ``args.model`` until interrupted (``args``: the options of :func:`add_arguments`)."""
    try:
        model = Sequential.load(args.model)
        app = create_app(model, input_shape=args.input_shape, max_context_bytes=args.max_context_bytes,
                         max_request_bytes=args.max_request_bytes, max_contexts=args.max_contexts)
    except HEError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    import uvicorn

    logging.basicConfig(level=logging.INFO, format="%(levelname)s:     %(name)s: %(message)s")
    print(model.plan(args.input_shape).explain())
    uvicorn.run(app, host=args.host, port=args.port, log_level="info")
    return 0


def main(argv=None) -> int:
    """``python -m tensor_ops.serve``: parse the options and serve."""
    return run(build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
