"""The client/server split, first with bytes on disk (the ``python -m tensor_ops`` CLI), then over HTTP
(``python -m tensor_ops.serve`` started here on a free loopback port, stopped at the end).

Who holds what: the server holds the model (weights in model.npz) and, per client, a public context
(public key, relinearization key and only the Galois keys its plan needs). The client holds the secret
key (out/client.key, or in $HEZK_OUT) and never sends it; the server only ever sees ciphertexts.
"""
import os
import pathlib
import secrets
import socket
import subprocess
import sys
import time

import numpy as np

from digits_models import QUICK, digits_split, train_mlp
from tensor_ops import cli
from tensor_ops.inference import Client
from tensor_ops.serve import fetch_plan, register_context, remote_infer

OUT = pathlib.Path(os.environ.get("HEZK_OUT", "out"))


def run(*args):
    print("$ python -m tensor_ops " + " ".join(str(a) for a in args))
    status = cli.main([str(a) for a in args])
    if status:
        raise SystemExit(f"command failed with status {status}")


def on_disk(model_path, x, expected):
    print("\n== 1. bytes on disk ==")
    files = {name: OUT / name for name in ("plan.json", "client.key", "public.ctx", "x.npy", "request.bin",
                                           "reply.bin", "y.npy")}
    run("plan", "--model", model_path, "--out", files["plan.json"])            # server publishes its plan
    run("keygen", "--plan", files["plan.json"], "--client", files["client.key"], "--context", files["public.ctx"])
    np.save(files["x.npy"], x)
    run("encrypt", "--client", files["client.key"], "--input", files["x.npy"], "--out", files["request.bin"])
    run("infer", "--model", model_path, "--context", files["public.ctx"], "--request", files["request.bin"],
        "--out", files["reply.bin"])                                           # server side, no secret key
    run("decrypt", "--client", files["client.key"], "--reply", files["reply.bin"], "--out", files["y.npy"])
    y = np.load(files["y.npy"])
    assert np.max(np.abs(y - expected)) <= 2.0 ** -14 * max(1.0, np.max(np.abs(expected)))  # scale 2^30, 16 bits noise
    print(f"on disk: max |decrypted - plaintext model| = {np.max(np.abs(y - expected)):.2e}, "
          f"predictions agree on {100 * np.mean(y.argmax(1) == expected.argmax(1)):.1f}%")


def _free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def over_http(model_path, x, expected):
    print("\n== 2. over HTTP ==")
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    command = [sys.executable, "-m", "tensor_ops.serve", "--model", str(model_path), "--port", str(port)]
    token = secrets.token_urlsafe(32)  # this client's access token: the server reads it from $HEZK_TOKENS
    print("$ HEZK_TOKENS=demo:<token> python " + " ".join(command[1:]))
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              env=dict(os.environ, HEZK_TOKENS=f"demo:{token}"))
    try:
        import httpx

        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(url + "/health", timeout=2.0)
                break
            except httpx.TransportError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise SystemExit("the server did not start")
                time.sleep(0.2)
        client = Client(plan=fetch_plan(url, token=token))        # GET /plan: packing and rotations
        context_id = register_context(url, client, token=token)   # POST /contexts: public keys only
        print(f"registered a public context of {len(client.public_context()) / 2**20:.1f} MiB as {context_id[:12]}…")
        t0 = time.perf_counter()
        y = remote_infer(url, client, x, context_id, token=token)  # POST /infer/<id>: ciphertexts both ways
        assert np.max(np.abs(y - expected)) <= 2.0 ** -14 * max(1.0, np.max(np.abs(expected)))
        print(f"over HTTP: {len(x)} images in {time.perf_counter() - t0:.2f} s; max |decrypted - plaintext| "
              f"= {np.max(np.abs(y - expected)):.2e}, predictions agree on "
              f"{100 * np.mean(y.argmax(1) == expected.argmax(1)):.1f}%")
        anonymous = httpx.post(f"{url}/infer/{context_id}", content=b"", timeout=30.0)
        print(f"without the token -> HTTP {anonymous.status_code}")
        bad = httpx.post(f"{url}/infer/{context_id}", content=b"not a ciphertext", timeout=30.0,
                         headers={"authorization": f"Bearer {token}"})
        print(f"garbage bytes -> HTTP {bad.status_code}: {bad.json()['detail']}")
        print(f"and the server still answers: GET /health -> {httpx.get(url + '/health', timeout=10.0).json()}")
    finally:
        server.terminate()
        server.wait(timeout=30)


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    x_train, y_train, x_test, _ = digits_split()
    x = x_test[:16] if QUICK else x_test[:64]
    model = train_mlp(x_train, y_train, steps=150 if QUICK else 400)
    model_path = OUT / "model.npz"
    model.save(model_path)
    print(f"server: trained {model!r} and saved it to {model_path}")
    expected = model.forward(x)
    on_disk(model_path, x, expected)
    over_http(model_path, x, expected)


if __name__ == "__main__":
    main()
