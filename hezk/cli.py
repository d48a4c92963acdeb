"""``hezk``: one console script for both command lines.

    hezk plan | keygen | encrypt | infer | decrypt | serve    encrypted inference (tensor_ops.cli)
    hezk commit | prove | verify                             proofs of quantized networks (proofs.cli)

The parser is built from the two command lines' own argument definitions (``tensor_ops.cli_args.add_commands``
and ``proofs.cli_args.build_parser``), so options and help texts are written once; each command then runs in
the command line it comes from, with the same exit codes (0 success, 1 ``verify`` reject, 2 usage errors and a
missing extra, 130 after Ctrl-C). Parsing imports argparse-level modules only: ``hezk --help`` loads no engine,
and a command builds only its own options (``benchmarks/cli.py`` measures the start-up).
"""
from __future__ import annotations

import argparse
import sys

from importlib.metadata import PackageNotFoundError, version as _version

import hezk.memory
from hezk.progress import command_of, run_command
from proofs import cli_args as proofs_args
from tensor_ops import cli_args as tensor_args

try:
    __version__ = _version("hezk")
except PackageNotFoundError:  # a source tree that is not installed
    __version__ = "0+unknown"

__all__ = ["build_parser", "main", "__version__"]


def _subparsers(parser: argparse.ArgumentParser) -> argparse._SubParsersAction:
    return next(action for action in parser._actions if isinstance(action, argparse._SubParsersAction))


def build_parser(only=None) -> argparse.ArgumentParser:
    """``hezk``'s parser: the tensor_ops commands, then the proofs commands (each under its own name). With
    ``only`` (a command name, "" for none), the other commands are listed without their options."""
    root = argparse.ArgumentParser(prog="hezk", description="hezk: encrypted inference (plan, keygen, encrypt, "
                                   "infer, decrypt, serve) and zero-knowledge proofs (commit, prove, verify).")
    root.add_argument("--version", action="version", version=f"hezk {__version__}")
    commands = root.add_subparsers(dest="command", required=True, metavar="COMMAND")
    tensor_args.add_commands(commands, only)
    proofs = _subparsers(proofs_args.build_parser(only))
    helps = {choice.dest: choice.help for choice in proofs._choices_actions}
    for name, sub in proofs.choices.items():
        if name in commands.choices:
            raise RuntimeError(f"command {name!r} is defined by both tensor_ops.cli and proofs.cli")
        commands.add_parser(name, parents=[sub], add_help=False, help=helps.get(name),
                            description=sub.description or helps.get(name))
    return root


def _run(argv) -> int:
    args = build_parser(command_of(argv)).parse_args(argv)
    if args.command in tensor_args.COMMANDS:
        from tensor_ops import cli as tensor_cli

        return tensor_cli.run(args)
    from proofs import cli as proofs_cli  # a proofs command: its own main runs it (and its error handling)

    return proofs_cli.main(argv)


def main(argv=None) -> int:
    """Parse ``argv`` (default: the process arguments) and run the command; returns the exit code (Ctrl-C: 130,
    and a missing extra: 2, each with one line on stderr)."""
    argv = sys.argv[1:] if argv is None else [str(a) for a in argv]
    return run_command(_run, argv)


def program() -> int:
    """The ``hezk`` program (console script, ``python -m hezk``): :func:`main` in a process whose allocator keeps
    freed memory (``hezk.memory.for_a_program``; ``HEZK_KEEP_FREED_MEMORY=0`` keeps glibc's default)."""
    hezk.memory.for_a_program()
    return main()


if __name__ == "__main__":  # python -m hezk.cli, as python -m hezk
    sys.exit(program())
