"""Every ```python snippet of README.md runs on its own: each in a fresh interpreter, in an empty working directory,
with nothing from the snippets before it (a snippet that needs a model file writes it). A snippet that imports
torch is skipped where torch is not installed."""
import importlib.util
import pathlib
import re
import subprocess
import sys

import pytest

README = pathlib.Path(__file__).resolve().parent.parent / "README.md"
TIMEOUT = 300  # seconds per snippet: well above the ~10 s each takes once the numba kernels are cached


def python_snippets(text: str) -> list[tuple[int, str]]:
    """(first line number, code) of every fenced ```python block of ``text``, in order."""
    return [(text.count("\n", 0, match.start(1)) + 1, match.group(1))
            for match in re.finditer(r"^```python[ \t]*\n(.*?)^```[ \t]*$", text, re.S | re.M)]


SNIPPETS = python_snippets(README.read_text(encoding="utf-8"))


def _needs_torch(code: str) -> bool:
    return re.search(r"^\s*(import\s+(\w+\s*,\s*)*torch\b|from\s+torch\b)", code, re.M) is not None


def test_the_extractor_finds_fenced_python_blocks_only():
    text = "intro\n```python\na = 1\n```\n```bash\nls\n```\n\n```python\nimport hezk, torch\n```\n"
    assert python_snippets(text) == [(3, "a = 1\n"), (10, "import hezk, torch\n")]
    assert _needs_torch("import hezk, torch\n") and _needs_torch("from torch import nn\n")
    assert not _needs_torch("import numpy as np\n# torch is optional\n")


def test_the_readme_has_both_one_liner_snippets():
    """The README starts from the user's model: its first two snippets compile and prove one."""
    assert len(SNIPPETS) >= 2
    assert "hezk.compile(" in SNIPPETS[0][1] and "hezk.verify(" in SNIPPETS[1][1]


@pytest.mark.parametrize("line, code", SNIPPETS, ids=[f"line{line}" for line, _ in SNIPPETS])
def test_snippet_runs_alone(line, code, tmp_path):
    if _needs_torch(code) and importlib.util.find_spec("torch") is None:
        pytest.skip("the snippet uses PyTorch, which is not installed (pip install torch)")
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                            timeout=TIMEOUT)
    assert result.returncode == 0, f"README.md snippet at line {line} failed:\n{code}\n{result.stderr[-3000:]}"
