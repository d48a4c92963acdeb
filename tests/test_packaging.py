"""The packages import without side effects and keep their layering."""
import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent

FORBIDDEN = {"crypto": {"tensor_ops", "proofs"}, "proofs": {"crypto", "tensor_ops"}, "tensor_ops": {"proofs"}}


def _imported_top_levels(path):
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module.split(".")[0]


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_layering(package):
    for path in (ROOT / package).rglob("*.py"):
        bad = set(_imported_top_levels(path)) & FORBIDDEN[package]
        assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}"


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_imports(package):
    __import__(package)


# -- issue 16 (item 7): package hygiene ----------------------------------------------------------------------
import os  # noqa: E402
import re  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tomllib  # noqa: E402

PACKAGES = ("crypto", "tensor_ops", "proofs", "hezk")


def _pyproject():
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


@pytest.mark.parametrize("package", PACKAGES)
def test_typed_and_versioned(package):
    from importlib.resources import files

    module = __import__(package)
    assert files(package).joinpath("py.typed").is_file(), f"{package} has no py.typed marker"
    assert module.__version__ == _pyproject()["project"]["version"]
    assert "py.typed" in _pyproject()["tool"]["setuptools"]["package-data"]["*"]


def test_galois_only_in_the_test_and_bench_extras():
    """galois is the tests' field oracle: no library module imports it, so it is not a core dependency."""
    project = _pyproject()["project"]
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            assert "galois" not in set(_imported_top_levels(path)), f"{path.relative_to(ROOT)} imports galois"
    names = lambda deps: {re.split(r"[<>=;\[ ]", d)[0].lower() for d in deps}  # noqa: E731
    assert "galois" not in names(project["dependencies"])
    assert {"galois"} <= names(project["optional-dependencies"]["test"])
    assert {"galois"} <= names(project["optional-dependencies"]["bench"])
    assert "tqdm" in names(project["dependencies"])


IMPORT_CHECK = """
import logging, os, sys, threading, warnings
import numpy as np
before = set(os.listdir("."))
environ, rng = dict(os.environ), np.random.get_state()[1].copy()
printing, errors, filters = np.get_printoptions(), np.geterr(), list(warnings.filters)
root = (logging.getLogger().level, list(logging.getLogger().handlers))
import crypto, tensor_ops, proofs, hezk.cli
assert threading.active_count() == 1, [t.name for t in threading.enumerate()]
assert set(os.listdir(".")) == before, sorted(set(os.listdir(".")) - before)
assert dict(os.environ) == environ, "environment changed"
assert np.array_equal(np.random.get_state()[1], rng), "numpy's global random state used"
assert np.get_printoptions() == printing and np.geterr() == errors, "numpy options changed"
assert list(warnings.filters) == filters, "warning filters changed"
assert (logging.getLogger().level, list(logging.getLogger().handlers)) == root, "root logger configured"
"""


def test_importing_the_packages_has_no_side_effects(tmp_path):
    """Importing crypto, tensor_ops, proofs and hezk.cli prints nothing, starts no thread, creates no file, and
    leaves the environment, numpy's global state, the warning filters and the root logger as they were."""
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", HOME=str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    result = subprocess.run([sys.executable, "-c", IMPORT_CHECK], cwd=tmp_path, env=env, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "" and result.stderr == ""
    assert os.listdir(tmp_path) == ["home"] and os.listdir(tmp_path / "home") == []


def _readme_blocks():
    return re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)


def test_readme_blocks_define_every_name_they_use():
    """Fast guard for tests/test_readme.py (which runs each block alone): each name a block reads is a builtin or
    bound by that block (the third block once used weights, x and y without defining them)."""
    import builtins

    for i, block in enumerate(_readme_blocks()):
        bound = set(dir(builtins))
        tree = ast.parse(block)
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                bound.update((a.asname or a.name).split(".")[0] for a in node.names)
        for node in ast.walk(tree):  # a name bound anywhere in the block counts (straight-line code)
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                bound.add(node.id)
        used = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)}
        assert used <= bound, f"README block {i} uses undefined names {sorted(used - bound)}"
