"""hezk's programs keep freed memory for reuse (hezk.memory.for_a_program) unless HEZK_KEEP_FREED_MEMORY=0; the
library itself, imported, leaves its host's allocator alone."""
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import hezk.cli
import hezk.memory

ROOT = Path(__file__).resolve().parents[1]
#: resident MB a freed 256 MB array leaves behind, in a child process (the setting is process-wide): kept for reuse
#: (reuse_freed_memory), or returned to the system (glibc's default: a block that large is its own mmap)
KEPT_MB = ("import sys, numpy as np, hezk.memory as m\n"
           "def rss():\n"
           "    return int([l for l in open('/proc/self/status') if l.startswith('VmRSS')][0].split()[1]) / 1024\n"
           "applied = m.for_a_program() if sys.argv[1] == 'program' else False\n"
           "before = rss()\n"
           "a = np.ones(1 << 25)\n"
           "del a\n"
           "print(applied, rss() - before)\n")


def _kept(mode, **env):
    out = subprocess.run([sys.executable, "-c", KEPT_MB, mode], capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, **env), check=True).stdout.split()
    return out[0] == "True", float(out[1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_a_program_keeps_freed_memory_unless_told_not_to():
    applied, kept = _kept("program")
    refused, returned = _kept("program", HEZK_KEEP_FREED_MEMORY="0")
    library, default = _kept("library")
    assert applied and not refused and not library
    assert kept > 200 and returned < 50 and default < 50


#: numpy's huge page hint in a child process, at start and after the program's settings (or none: a library)
HINT = ("import sys, hezk.memory as m\n"
        "if sys.argv[1] == 'program-first':\n"
        "    m.for_a_program()\n"
        "from numpy._core import multiarray as a\n"
        "start = a._get_madvise_hugepage()\n"
        "if sys.argv[1] == 'program':\n"
        "    m.for_a_program()\n"
        "print(start, a._get_madvise_hugepage())\n")


def _hint(mode, **env):
    inherited = {k: v for k, v in os.environ.items() if k not in ("NUMPY_MADVISE_HUGEPAGE", "HEZK_HUGE_PAGES")}
    out = subprocess.run([sys.executable, "-c", HINT, mode], capture_output=True, text=True, timeout=120,
                         env=dict(inherited, **env), check=True).stdout.split()
    return out[0] == "True", out[1] == "True"


def test_a_program_turns_numpys_huge_page_hint_off_unless_told_not_to():
    """A program's first touches of fresh proof tables: no synchronous huge page compaction (hezk.memory.
    numpy_huge_pages); HEZK_HUGE_PAGES=1 keeps numpy's hint, and an importing library leaves it as it was."""
    start, program = _hint("program")
    assert not program
    assert _hint("program-first") == (False, False)  # before numpy's import: its NUMPY_MADVISE_HUGEPAGE
    assert _hint("program", HEZK_HUGE_PAGES="1") == (start, start)
    assert _hint("library") == (start, start)
    previous = hezk.memory.numpy_huge_pages(False)
    try:
        assert hezk.memory.numpy_huge_pages(True) is False
    finally:
        hezk.memory.numpy_huge_pages(previous)


def test_every_program_entry_applies_it(monkeypatch):
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["hezk"] == "hezk.cli:program"
    calls = []
    monkeypatch.setattr(hezk.memory, "for_a_program", lambda: calls.append(1) or True)
    monkeypatch.setattr(sys, "argv", ["hezk", "--version"])
    with pytest.raises(SystemExit) as done:
        hezk.cli.program()
    assert done.value.code == 0 and calls == [1]
    for main in ("hezk/__main__.py", "tensor_ops/__main__.py", "proofs/__main__.py"):
        text = (ROOT / main).read_text()
        assert "for_a_program()" in text or "program()" in text, main
