"""The argument definitions of ``python -m tensor_ops`` / ``hezk`` (see :mod:`tensor_ops.cli`): argparse only,
so building the parser (``hezk --help``, parsing a command line) imports no engine; the commands themselves live
in :mod:`tensor_ops.cli`."""
from __future__ import annotations

import argparse

from hezk.progress import command_of
from tensor_ops.option_texts import BOOTSTRAP_HELP, MEMORY_HELP, PARAMS_HELP

__all__ = ["COMMANDS", "SECRET", "PARAMS_HELP", "BOOTSTRAP_HELP", "MEMORY_HELP", "add_commands", "parser", "command_of"]


_MODEL_HELP = ("model file: ONNX (opset >= 13), or .npz written by Sequential.save / hezk.model.save_npz, or "
               "weight arrays that name their activation (activation='relu')")
_CALIBRATION_HELP = ("representative inputs .npy (samples, *input shape): each fitted activation (relu, sigmoid, ...) "
                     "is fitted on the range its input takes on them, and the error against the float model "
                     "there is printed (default interval [-4, 4]); required for a model with attention (Softmax, "
                     "LayerNorm), whose keygen and server-side infer must be given the same file")
_RELU_HELP = ("each calibrated ReLU as one fitted polynomial (fit, the default: 3 levels), as the composite minimax "
              "sign relu = (x + x sign x) / 2 (composite: 10 levels, about 0.002 of the interval's scale), or chosen "
              "per activation where the fit errs beyond 2^-7 of its interval's scale and the plan's levels allow "
              "(auto); give keygen, infer and plan the same choice")
_DEGREE_HELP = ("degree of each fitted activation's polynomial (default: the file's 'degree' entry, else relu, "
                "gelu, silu 7 and sigmoid, tanh 4; ceil(log2(degree + 1)) levels)")
_BUDGET_HELP = ("bytes the Galois keys may take, e.g. 2GiB or 1.5GB (default 12 GiB, half of a 24 GB machine); "
                "the planner trades rotations for fewer keys to fit it; client and server must use the same")
SECRET = "SECRET: holds the secret key, keep it private and never send it"
#: command -> its one-line help
COMMANDS = {
    "plan": "print the model's public plan (parameters, packing, rotations, depth, time estimate); server side",
    "keygen": ("make the keys (client side): writes the SECRET client file (--client) and the public context "
               "(--context) to send to the server; for a model with attention, the plan's rotation keys, the "
               "relinearisation key and, when it bootstraps, the bootstrap's keys"),
    "encrypt": "encrypt an input .npy into a request (client side, needs the SECRET client file)",
    "infer": ("evaluate an encrypted request under a public context (server side; every model, transformers with "
              "attention included); without --context, run keygen, encrypt, infer and decrypt in one process"),
    "decrypt": "decrypt a reply into an output .npy (client side, needs the SECRET client file)",
    "serve": "serve the model over HTTP (needs the serve extra); the server never holds a secret key",
    "remote": ("encrypt an input, have an HTTP server (serve) evaluate it, decrypt the reply (client side, needs "
               "the SECRET client file)"),
}
# (command, option) -> (aliases, required, help)
_OPTIONS = {
    "plan": {"--model": ((), True, _MODEL_HELP),
             "--calibration": ((), False, _CALIBRATION_HELP),
             "--degree": ((), False, _DEGREE_HELP),
             "--relu": ((), False, _RELU_HELP),
             "--key-budget": ((), False, _BUDGET_HELP),
             "--out": (("--output", "-o"), False, "also write the plan as JSON here (public: send it to clients)"),
             "--input-shape": ((), False, "sample shape, e.g. 1,8,8 (for a model file that does not record it)")},
    "keygen": {"--model": ((), False, _MODEL_HELP + " to plan the keys for (or give --plan)"),
               "--calibration": ((), False, _CALIBRATION_HELP),
               "--degree": ((), False, _DEGREE_HELP),
               "--relu": ((), False, _RELU_HELP),
               "--key-budget": ((), False, _BUDGET_HELP),
               "--plan": ((), False, "the server's public plan JSON (from 'plan --out' or GET /plan) instead of "
                                     "the model"),
               "--client": ((), True, f"where to write the client file ({SECRET})"),
               "--context": ((), True, "where to write the public context (public keys only: send it to the "
                                       "server)"),
               "--input-shape": ((), False, "sample shape, e.g. 1,8,8 (for a model file that does not record "
                                            "it)")},
    "encrypt": {"--client": ((), True, f"the client file written by keygen ({SECRET})"),
                "--input": (("-i",), True, "input .npy: one sample or a batch along axis 0"),
                "--out": (("--output", "-o"), True, "where to write the encrypted request (safe to send)")},
    "infer": {"--model": ((), True, _MODEL_HELP),
              "--calibration": ((), False, _CALIBRATION_HELP),
              "--degree": ((), False, _DEGREE_HELP),
              "--relu": ((), False, _RELU_HELP),
              "--key-budget": ((), False, _BUDGET_HELP),
              "--context": ((), False, "the client's public context written by keygen --context (never the "
                                       "secret client file); without it the whole flow runs locally. A model with "
                                       "attention is planned here as at keygen: pass the same --calibration, "
                                       "--degree, --params and --key-budget"),
              "--request": (("--input", "-i"), True, "encrypted request from 'encrypt' (or, without --context, "
                                                     "a plain input .npy)"),
              "--out": (("--output", "-o"), True, "where to write the encrypted reply (or, without --context, "
                                                  "the decrypted output .npy)"),
              "--input-shape": ((), False, "sample shape, e.g. 1,8,8 (for a model file that does not record "
                                           "it)"),
              "--dask": ((), False, "run the evaluation as tasks on dask.distributed (without --context): local:K "
                                    "(K local worker processes, one thread each) or tcp://HOST:PORT (a scheduler); "
                                    "without the distributed extra installed, in this process"),
              "--batch": ((), False, "samples per task with --dask (default: the samples one ciphertext packs)")},
    "decrypt": {"--client": ((), True, f"the client file written by keygen ({SECRET})"),
                "--reply": (("--input", "-i"), True, "encrypted reply from 'infer'"),
                "--out": (("--output", "-o"), True, "where to write the decrypted output .npy")},
    "remote": {"--url": ((), True, "the server's address, e.g. http://127.0.0.1:8000"),
               "--client": ((), True, f"the client file written by keygen ({SECRET})"),
               "--input": (("-i",), True, "input .npy: one sample or a batch along axis 0"),
               "--out": (("--output", "-o"), True, "where to write the decrypted output .npy"),
               "--token-file": ((), False, "file whose first line is the access token (SECRET; default: "
                                           "$HEZK_TOKEN, or none for an open server)")},
}
_PROGRESS_COMMANDS = ("plan", "keygen", "infer")
_PARAMS_COMMANDS = ("plan", "keygen", "infer")  # serve: tensor_ops.serve.add_arguments
_FLOOD_HELP = ("add noise-flooding before decoding: use it for an output that leaves your hands (sent to the "
               "server's operator or anyone who saw the reply), since an exact decryption and the reply reveal "
               "the secret key; costs about 20 bits of precision")
_INSECURE_HELP = ("key a --plan whose parameters are below 128 bits (a test ring, a sparse secret outside the cited "
                  "sets); without it such a plan is refused: the server could recover the secret key (tests only)")
_INSECURE_INFER_HELP = ("run the local flow (without --context) on --params below 128 bits (a test ring such as "
                        "TOY); without it such parameters are refused (tests only)")
_CLIP_HELP = ("clip samples outside the plan's calibrated input range into it (with a warning naming them) "
              "instead of refusing them")
_PACKING_HELP = ("how samples are laid out in ciphertexts: slots (the slot-blocked plan, every model), replicated "
                 "(one sample per ciphertext, few rotations: latency), samples (one sample per slot, no rotation: "
                 "throughput); the last two take a chain of dense layers with fitted activations only. auto "
                 "(default): for such a chain replicated below 100 samples and samples from 100 up "
                 "(tensor_ops.dense_packings), else slots")
_SAMPLES_HELP = ("how many samples the keys will encrypt at once, for --packing auto (default: unknown, the slot "
                 "path); sample packing pairs sets (two samples per slot) when it exceeds a set's slots")
_MEASURE_HELP = ("time the homomorphic operations on this machine (about a second) for the plan's time estimate, "
                 "instead of the built-in times of the development machine")


def add_commands(commands, only=None) -> None:
    """Add this CLI's subcommands to ``commands`` (an ``add_subparsers()`` result): used by ``parser()``
    and by the ``hezk`` console script. With ``only`` (a command name, "" for none, None for all), the other
    commands get their name and help line but no options: the parser of one command line (or of ``--help``) then
    imports nothing heavy (``serve``'s options come from :mod:`tensor_ops.serve`, imported only to build them)."""
    for name, text in COMMANDS.items():
        command = commands.add_parser(name, help=text, description=text[0].upper() + text[1:] + ".")
        if only is not None and name != only:
            continue
        if name == "serve":
            from tensor_ops import serve

            serve.add_arguments(command)
        for option, (aliases, required, help_text) in _OPTIONS.get(name, {}).items():
            command.add_argument(option, *aliases, required=required, dest=option[2:].replace("-", "_"),
                                 help=help_text)
        if name == "plan":
            command.add_argument("--measure", action="store_true", help=_MEASURE_HELP)
        if name == "decrypt":
            command.add_argument("--flood", action="store_true", help=_FLOOD_HELP)
        if name == "encrypt":
            command.add_argument("--clip", action="store_true", help=_CLIP_HELP)
        if name in _PARAMS_COMMANDS:
            command.add_argument("--params", default=None, help=PARAMS_HELP)
            command.add_argument("--memory-budget", default=None, help=MEMORY_HELP)
            command.add_argument("--bootstrap", action=argparse.BooleanOptionalAction, default=None,
                                 help=BOOTSTRAP_HELP)
        if name in ("plan", "keygen", "infer"):
            command.add_argument("--packing", choices=("auto", "slots", "replicated", "samples"), default="auto",
                                 help=_PACKING_HELP)
        if name in ("plan", "keygen"):
            command.add_argument("--samples", type=int, default=None, help=_SAMPLES_HELP)
        if name in ("keygen", "infer"):
            command.add_argument("--insecure", action="store_true",
                                 help=_INSECURE_HELP if name == "keygen" else _INSECURE_INFER_HELP)
        if name in _PROGRESS_COMMANDS:
            command.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                                 help="show a progress bar on stderr (default: only when stderr is a terminal)")


def parser(only=None) -> argparse.ArgumentParser:
    """The parser of ``python -m tensor_ops`` (``only``: see :func:`add_commands`)."""
    root = argparse.ArgumentParser(prog="python -m tensor_ops", description="Encrypted inference with files "
                                   "(the client keeps the SECRET client file; the server sees public bytes only).")
    add_commands(root.add_subparsers(dest="command", required=True, metavar="COMMAND"), only)
    return root
