"""Every subcommand and option of the command lines has a help line (read from the argparse objects), the
secret files say they are secret, and the ``hezk`` console script holds the commands of both."""
import argparse
import os
import pathlib
import shutil
import subprocess
import sys
import sysconfig

import pytest

import hezk.cli
from proofs import cli as proofs_cli
from tensor_ops import cli as tensor_cli
from tensor_ops import serve

TENSOR_COMMANDS = {"plan", "keygen", "encrypt", "infer", "decrypt", "serve", "remote"}
PROOFS_COMMANDS = {"commit", "prove", "verify"}
PARSERS = {"tensor_ops": tensor_cli.parser, "proofs": proofs_cli.build_parser, "hezk": hezk.cli.build_parser,
           "tensor_ops.serve": serve.build_parser}


def _subcommands(parser):
    """{name: (help, subparser)} of a parser with subcommands ({} without)."""
    action = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
    if action is None:
        return {}
    helps = {choice.dest: choice.help for choice in action._choices_actions}
    return {name: (helps.get(name), sub) for name, sub in action.choices.items()}


def _options(parser):
    return [a for a in parser._actions if a.option_strings and not isinstance(a, argparse._HelpAction)]


def _undocumented(parser, where):
    """Subcommands and options of ``parser`` (recursively) whose help is missing or blank."""
    missing = [f"{where} {a.option_strings[0]}" for a in _options(parser) if not (a.help or "").strip()]
    for name, (text, sub) in _subcommands(parser).items():
        if not (text or "").strip():
            missing.append(f"{where} {name} (the subcommand)")
        missing += _undocumented(sub, f"{where} {name}")
    return missing


@pytest.mark.parametrize("name", sorted(PARSERS))
def test_every_subcommand_and_option_has_help(name):
    parser = PARSERS[name]()
    assert _undocumented(parser, name) == []
    assert all(_options(sub) for _, sub in _subcommands(parser).values())


def test_the_check_finds_a_missing_help_line():
    """The check above can fail: an option added without help is reported."""
    parser = tensor_cli.parser()
    _subcommands(parser)["plan"][1].add_argument("--undocumented")
    assert _undocumented(parser, "tensor_ops") == ["tensor_ops plan --undocumented"]


@pytest.mark.parametrize("command", ["keygen", "encrypt", "decrypt"])
def test_the_client_file_is_called_secret(command):
    sub = _subcommands(tensor_cli.parser())[command][1]
    (client,) = [a for a in _options(sub) if "--client" in a.option_strings]
    assert "SECRET" in client.help
    others = [a for a in _options(sub) if "--client" not in a.option_strings]
    assert not any("SECRET" in (a.help or "") for a in others), "only the client file is secret"
    if command == "keygen":
        assert "SECRET" in _subcommands(tensor_cli.parser())["keygen"][0]


@pytest.mark.parametrize("command", ["commit", "prove"])
def test_the_prover_state_is_called_secret(command):
    sub = _subcommands(proofs_cli.build_parser())[command][1]
    (state,) = [a for a in _options(sub) if "--state" in a.option_strings]
    assert "secret" in state.help.lower()


def test_hezk_has_the_commands_of_both_command_lines():
    commands = _subcommands(hezk.cli.build_parser())
    assert set(commands) == TENSOR_COMMANDS | PROOFS_COMMANDS
    assert set(_subcommands(tensor_cli.parser())) == TENSOR_COMMANDS
    assert set(_subcommands(proofs_cli.build_parser())) == PROOFS_COMMANDS
    # the same options as the command line each comes from (built from its parser, not copied)
    for source in (tensor_cli.parser(), proofs_cli.build_parser()):
        for name, (text, sub) in _subcommands(source).items():
            ours = commands[name][1]
            assert [a.option_strings for a in _options(ours)] == [a.option_strings for a in _options(sub)]
            assert commands[name][0] == text


def test_serve_subcommand_takes_the_servers_options():
    sub = _subcommands(tensor_cli.parser())["serve"][1]
    assert [a.option_strings for a in _options(sub)] == [a.option_strings for a in _options(serve.build_parser())]
    text = " ".join(sub.format_help().split())
    assert "least recently used" in text and "413" in text


def _hezk_script():
    name = "hezk.exe" if os.name == "nt" else "hezk"
    path = pathlib.Path(sysconfig.get_path("scripts")) / name
    return str(path) if path.exists() else shutil.which("hezk")


def test_hezk_console_script_is_installed():
    script = _hezk_script()
    assert script, "no hezk script: run pip install -e . again after editing pyproject.toml"
    result = subprocess.run([script, "infer", "--help"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: hezk infer") and "--context" in result.stdout
    result = subprocess.run([script, "--help"], capture_output=True, text=True, timeout=120)
    assert all(command in result.stdout for command in TENSOR_COMMANDS | PROOFS_COMMANDS)


def test_hezk_runs_both_sides(tmp_path, capsys):
    """hezk plan runs the tensor_ops command, hezk verify the proofs one (with its exit codes)."""
    import numpy as np

    from tensor_ops.nn import Linear, Sequential, Square

    rng = np.random.default_rng(0)
    Sequential([Linear(rng.normal(size=(3, 4))), Square(), Linear(rng.normal(size=(2, 3)))],
               input_shape=(4,)).save(tmp_path / "model.npz")
    assert hezk.cli.main(["plan", "--model", tmp_path / "model.npz"]) == 0
    assert "rotation keys" in capsys.readouterr().out
    assert hezk.cli.main(["plan", "--model", tmp_path / "missing.npz"]) == 2
    (tmp_path / "junk").write_bytes(b"junk")
    np.save(tmp_path / "x.npy", np.zeros(4))
    assert hezk.cli.main(["verify", "--commitment", tmp_path / "junk", "--input", tmp_path / "x.npy",
                          "--proof", tmp_path / "junk"]) == 1
    assert capsys.readouterr().out.strip() == "reject"
    with pytest.raises(SystemExit) as exit_info:
        hezk.cli.main(["commit"])  # --model is required: argparse's usage error
    assert exit_info.value.code == 2
