"""The command line starts fast and ends cleanly: ``hezk --help`` and argument parsing import no engine (a
command builds only its own options), Ctrl-C ends in one line ``interrupted`` with exit status 130, a missing
optional dependency in one line naming its ``pip install "hezk[extra]"`` with exit status 2 (no traceback),
and a cold numba cache is announced once (to a terminal)."""
import os
import signal
import subprocess
import sys
import time

import pytest

import hezk.progress
from hezk.cli import build_parser, main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HEAVY = ("numpy", "numba", "scipy", "crypto.context", "tensor_ops.inference", "tensor_ops.serve", "proofs.layers")


def _loaded_after(code: str) -> set:
    """The HEAVY modules loaded by ``code`` run in a fresh interpreter."""
    probe = (f"import sys\n{code}\n"
             f"print(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r} or m in {HEAVY!r}))")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert result.returncode == 0, result.stderr
    return set(eval(result.stdout.strip().splitlines()[-1]))


def test_help_and_parsing_import_no_engine():
    """``hezk --help`` and parsing a command line load argparse-level modules only; the check sees a heavy import
    (positive control: the full parser builds ``commit``'s options, whose default comes from the prover)."""
    help_code = "from hezk.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass"
    assert _loaded_after(help_code) == set()
    parse = ("from hezk.cli import build_parser\n"
             "build_parser('verify').parse_args(['verify', '--private-input', '--commitment', sys.executable])")
    assert _loaded_after(parse) == set()
    assert "numba" in _loaded_after("from hezk.cli import build_parser\nbuild_parser()")


def test_a_command_builds_only_its_own_options():
    def options(parser, name):
        action = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
        return [a.option_strings for a in action.choices[name]._actions if a.option_strings][1:]  # minus -h

    one = build_parser("plan")
    full = build_parser()
    assert options(one, "plan") == options(full, "plan") and options(one, "verify") == []
    assert options(full, "verify")  # the full parser (docs, tests) has every command's options
    assert set(build_parser("")._subparsers._group_actions[0].choices) == \
        set(full._subparsers._group_actions[0].choices)  # --help lists every command


def test_help_is_fast():
    """`--help` stays under the 0.3 s start-up target by importing no heavy library (numpy, numba, scipy, torch,
    onnx): checked from `-X importtime`, not from wall-clock time, which a loaded CI machine makes flaky."""
    result = subprocess.run([sys.executable, "-X", "importtime", "-m", "hezk", "--help"], capture_output=True,
                            text=True, cwd=ROOT, timeout=120)
    assert result.returncode == 0 and "verify" in result.stdout
    imported = {line.rsplit("|", 1)[-1].strip().split(".")[0] for line in result.stderr.splitlines() if "|" in line}
    assert "hezk" in imported  # the import log was read
    assert not imported & {"numpy", "numba", "scipy", "torch", "onnx", "onnxruntime"}, imported


def test_ctrl_c_ends_in_one_line_and_exit_130(capsys):
    def interrupted():
        raise KeyboardInterrupt

    assert hezk.progress.run_command(interrupted) == 130
    assert capsys.readouterr().err.strip() == "interrupted"
    assert hezk.progress.run_command(lambda: None) == 0  # positive control: a normal run


@pytest.mark.skipif(os.name != "posix", reason="a FIFO and SIGINT")
def _default_sigint():
    """Python installs its KeyboardInterrupt handler only where SIGINT is not ignored at start-up."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_sigint_during_a_command_gives_130_without_traceback(tmp_path):
    """A real Ctrl-C: ``hezk plan`` blocked reading its model (a FIFO no one writes) gets SIGINT."""
    fifo = tmp_path / "model.npz"
    os.mkfifo(fifo)
    process = subprocess.Popen([sys.executable, "-m", "hezk", "plan", "--model", str(fifo)], cwd=ROOT,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               preexec_fn=_default_sigint)  # as a terminal's child: a background job ignores it
    writer = None
    try:
        deadline = time.monotonic() + 120
        while writer is None and time.monotonic() < deadline:  # the reader has opened the FIFO: it is in the command
            try:
                writer = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
            except OSError:
                time.sleep(0.05)
        assert writer is not None, "hezk plan never opened its model"
        time.sleep(0.2)
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=60)
    finally:
        if writer is not None:
            os.close(writer)
        process.kill() if process.poll() is None else None
    assert process.returncode == 130, err
    assert err.strip() == "interrupted" and "Traceback" not in err


@pytest.mark.parametrize("module, argv", [
    ("fastapi", ["serve", "--model", "{model}"]),
    ("httpx", ["remote", "--url", "http://127.0.0.1:9", "--client", "{model}", "--input", "{model}", "--out",
               "{model}.out"]),
])
def test_a_missing_extra_is_one_line_with_the_pip_command(module, argv, tmp_path, capsys, monkeypatch):
    np = pytest.importorskip("numpy")
    from tensor_ops.nn import Linear, Sequential, Square

    model = tmp_path / "model.npz"
    rng = np.random.default_rng(0)
    Sequential([Linear(rng.normal(size=(3, 4))), Square(), Linear(rng.normal(size=(2, 3)))],
               input_shape=(4,)).save(model)
    monkeypatch.setitem(sys.modules, module, None)  # `import module` now raises ModuleNotFoundError
    assert main([a.format(model=model) for a in argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f'error: {module} is not installed; this command needs the serve extra: pip install "hezk[serve]"'


def test_an_unrelated_missing_module_still_raises():
    """Only the optional dependencies of an extra become the one-line message; any other is a real bug."""
    def broken():
        import a_module_that_does_not_exist  # noqa: F401

    with pytest.raises(ModuleNotFoundError):
        hezk.progress.run_command(broken)


def test_a_cold_numba_cache_is_announced_once(tmp_path, capsys, monkeypatch):
    source = tmp_path / "kernels.py"
    source.write_text("X = 1\n")
    monkeypatch.setattr(hezk.progress, "_cache_dirs", lambda path: [str(tmp_path / "__pycache__")])
    monkeypatch.setattr(hezk.progress, "_announced", False)
    assert not hezk.progress.announce_compilation(str(source))  # stderr is no terminal here: silent
    monkeypatch.setenv("HEZK_COMPILE_NOTICE", "1")
    assert hezk.progress.cache_is_cold(str(source))
    assert hezk.progress.announce_compilation(str(source))
    assert not hezk.progress.announce_compilation(str(source))  # once per process
    assert capsys.readouterr().err == hezk.progress.COMPILING + "\n"
    (tmp_path / "__pycache__").mkdir()
    index = tmp_path / "__pycache__" / "kernels.kernel-1.py311.nbi"
    index.write_bytes(b"")
    os.utime(index, (os.stat(source).st_mtime + 1,) * 2)
    assert not hezk.progress.cache_is_cold(str(source))  # an index newer than the source: cached
    os.utime(index, (os.stat(source).st_mtime - 10,) * 2)
    assert hezk.progress.cache_is_cold(str(source))  # older than the source: numba compiles again


def test_kernel_modules_announce_with_an_empty_numba_cache(tmp_path):
    """Importing a kernel module with an empty cache folder prints the announcement (a warm one would not)."""
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path), HEZK_COMPILE_NOTICE="1")
    result = subprocess.run([sys.executable, "-c", "import proofs._kernels"], capture_output=True, text=True,
                            cwd=ROOT, env=env, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip() == hezk.progress.COMPILING
