"""The three packages import without side effects and keep their layering."""
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
