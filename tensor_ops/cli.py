"""``python -m tensor_ops``: encrypted inference with files, the same flow as the HTTP endpoint.

    python -m tensor_ops plan    --model model.npz [--out plan.json]
    python -m tensor_ops keygen  --model model.npz --client client.key --context public.ctx   (client side)
    python -m tensor_ops encrypt --client client.key --input x.npy --out request.bin         (client side)
    python -m tensor_ops infer   --model model.npz --context public.ctx --request request.bin --out reply.bin
    python -m tensor_ops infer   --model model.npz --input x.npy --out y.npy     (all steps in one process)
    python -m tensor_ops decrypt --client client.key --reply reply.bin --out y.npy            (client side)

``keygen`` may take ``--plan plan.json`` (the server's public plan) instead of the model; ``plan``, ``keygen``
and ``infer`` take ``--input-shape 1,8,8`` for a model file that does not record its sample shape. Errors
print one line naming the problem and exit with status 2.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import sys

import numpy as np

from crypto.errors import HEError, ParameterError
from tensor_ops.inference import Client, Server
from tensor_ops.model_plan import ModelPlan
from tensor_ops.nn import Sequential


def parse_shape(text: str) -> tuple[int, ...]:
    """``"1,8,8"`` or ``"1x8x8"`` -> (1, 8, 8); anything else raises ``ParameterError`` naming the text."""
    try:
        shape = tuple(int(d) for d in text.replace("x", ",").split(",") if d.strip())
    except ValueError:
        shape = ()
    if not shape or min(shape) < 1:
        raise ParameterError(f"--input-shape={text!r} must be positive sizes like 1,8,8")
    return shape


def _shape(args):
    return None if args.input_shape is None else parse_shape(args.input_shape)


def _plan(args):
    plan = Sequential.load(args.model).plan(_shape(args))
    print(plan.explain())
    if args.out:
        pathlib.Path(args.out).write_text(json.dumps(plan.to_dict()))
        print(f"plan written to {args.out}")


def _keygen(args):
    if args.plan:
        client = Client(plan=ModelPlan.from_dict(json.loads(pathlib.Path(args.plan).read_text())))
    elif args.model:
        client = Client(model=Sequential.load(args.model), input_shape=_shape(args))
    else:
        raise HEError("keygen needs --model or --plan")
    client.save(args.client)
    pathlib.Path(args.context).write_bytes(client.public_context())
    report = client.key_report()
    print(f"secret client state -> {args.client} (keep private); public context -> {args.context} "
          f"({report['public_context_bytes']} bytes, {report['rotation_keys']} rotation keys)")


def _encrypt(args):
    client = Client.load(args.client)
    x = _load_array(args.input)
    request = client.encrypt(x)
    pathlib.Path(args.out).write_bytes(request)
    print(f"encrypted input of shape {x.shape} -> {args.out} ({len(request)} bytes)")


def _infer(args):
    if args.context is None:
        return _infer_locally(args)
    request = pathlib.Path(args.request).read_bytes()
    if request.startswith(_NPY_MAGIC):
        raise HEError(f"--request {args.request} is a plain numpy array: encrypt it first "
                      f"(python -m tensor_ops encrypt), or omit --context to run the whole flow locally")
    server = Server(Sequential.load(args.model), pathlib.Path(args.context).read_bytes(), input_shape=_shape(args))
    reply = server.evaluate(request)
    pathlib.Path(args.out).write_bytes(reply)
    print(f"evaluated {args.request} -> {args.out} ({len(reply)} bytes)")


def _infer_locally(args):
    """Without --context: the whole flow in one process (keys, encrypt, server evaluation, decrypt)."""
    model = Sequential.load(args.model)
    x = _load_array(args.request)
    client = Client(model=model, input_shape=_shape(args) or model.sample_shape(x))
    print(client.plan.explain())
    server = Server(model, client.public_context())
    request = client.encrypt(x)
    print(f"client: public context {client.key_bytes} bytes (no secret key), request {len(request)} bytes")
    reply = server.evaluate(request)
    print(f"server: evaluated the encrypted input -> reply {len(reply)} bytes")
    y = client.decrypt(reply)
    np.save(args.out, y)
    print(f"client: decrypted output of shape {y.shape} -> {args.out}")
    print("predicted classes:", np.argmax(y, axis=-1))


def _decrypt(args):
    y = Client.load(args.client).decrypt(pathlib.Path(args.reply).read_bytes())
    np.save(args.out, y)
    print(f"decrypted output of shape {y.shape} -> {args.out}")
    if y.ndim >= 1:
        print("predicted classes:", np.argmax(y, axis=-1))


_NPY_MAGIC = b"\x93NUMPY"


def _load_array(path):
    try:
        return np.load(path, allow_pickle=False)
    except (OSError, ValueError) as error:
        raise HEError(f"--input {path}: not a numpy .npy file ({error})") from None


# other spellings accepted on the command line
_ALIASES = {(c, "--out"): ("--output", "-o") for c in ("plan", "encrypt", "infer", "decrypt")}
_ALIASES[("infer", "--request")] = ("--input", "-i")
_ALIASES[("decrypt", "--reply")] = ("--input", "-i")
_ALIASES[("encrypt", "--input")] = ("-i",)


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="python -m tensor_ops", description="encrypted inference with files")
    commands = root.add_subparsers(dest="command", required=True)
    spec = {
        "plan": (_plan, [("--model", True), ("--out", False), ("--input-shape", False)]),
        "keygen": (_keygen, [("--model", False), ("--plan", False), ("--client", True), ("--context", True),
                             ("--input-shape", False)]),
        "encrypt": (_encrypt, [("--client", True), ("--input", True), ("--out", True)]),
        "infer": (_infer, [("--model", True), ("--context", False), ("--request", True), ("--out", True),
                           ("--input-shape", False)]),
        "decrypt": (_decrypt, [("--client", True), ("--reply", True), ("--out", True)]),
    }
    for name, (handler, options) in spec.items():
        command = commands.add_parser(name)
        for option, required in options:
            aliases = _ALIASES.get((name, option), ())
            command.add_argument(option, *aliases, required=required, dest=option[2:].replace("-", "_"))
        command.set_defaults(handler=handler)
    return root


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    try:
        args.handler(args)
    except (HEError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0
