"""``hezk``: one console script for both command lines.

    hezk plan | keygen | encrypt | infer | decrypt | serve    encrypted inference (tensor_ops.cli)
    hezk commit | prove | verify                             proofs of quantized networks (proofs.cli)

The parser is built from the two command lines' own parsers (``tensor_ops.cli.add_commands`` and
``proofs.cli.build_parser``), so options and help texts are written once; each command then runs in the
command line it comes from, with the same exit codes (0 success, 1 ``verify`` reject, 2 usage errors).
"""
from __future__ import annotations

import argparse
import sys

from importlib.metadata import PackageNotFoundError, version as _version

from proofs import cli as proofs_cli
from tensor_ops import cli as tensor_cli

try:
    __version__ = _version("hezk")
except PackageNotFoundError:  # a source tree that is not installed
    __version__ = "0+unknown"

__all__ = ["build_parser", "main", "__version__"]


def _subparsers(parser: argparse.ArgumentParser) -> argparse._SubParsersAction:
    return next(action for action in parser._actions if isinstance(action, argparse._SubParsersAction))


def build_parser() -> argparse.ArgumentParser:
    """``hezk``'s parser: the tensor_ops commands, then the proofs commands (each under its own name)."""
    root = argparse.ArgumentParser(prog="hezk", description="hezk: encrypted inference (plan, keygen, encrypt, "
                                   "infer, decrypt, serve) and zero-knowledge proofs (commit, prove, verify).")
    root.add_argument("--version", action="version", version=f"hezk {__version__}")
    commands = root.add_subparsers(dest="command", required=True, metavar="COMMAND")
    tensor_cli.add_commands(commands)
    proofs = _subparsers(proofs_cli.build_parser())
    helps = {choice.dest: choice.help for choice in proofs._choices_actions}
    for name, sub in proofs.choices.items():
        if name in commands.choices:
            raise RuntimeError(f"command {name!r} is defined by both tensor_ops.cli and proofs.cli")
        command = commands.add_parser(name, parents=[sub], add_help=False, help=helps.get(name),
                                      description=sub.description or helps.get(name))
        command.set_defaults(handler=None)
    return root


def main(argv=None) -> int:
    """Parse ``argv`` (default: the process arguments) and run the command; returns the exit code."""
    argv = sys.argv[1:] if argv is None else [str(a) for a in argv]
    args = build_parser().parse_args(argv)
    if args.handler is None:  # a proofs command: its own main runs it (and its error handling)
        return proofs_cli.main(argv)
    return tensor_cli.run(args)


if __name__ == "__main__":  # python -m hezk.cli, as python -m hezk
    sys.exit(main())
