"""Layering (docs/architecture.md): no import cycles among crypto.*, tensor_ops.*, proofs.* and hezk.* modules, and the engines
stay apart (crypto never imports tensor_ops or proofs; proofs never imports crypto or tensor_ops; the record
container hezk.record, which both use, imports none of them).

The checker reads the sources (``import`` and ``from ... import`` statements anywhere, those inside functions
included: a lazy import is still an import) and finds strongly connected components of the module graph.
"""
import ast
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGES = ("crypto", "tensor_ops", "proofs", "hezk")
#: the foundations under the one namespace, below both engines
FOUNDATIONS = ("hezk.model", "hezk.record", "hezk.progress", "hezk.tasks", "hezk.memory")


def module_files(root: pathlib.Path, packages) -> dict[str, pathlib.Path]:
    """Dotted module name -> source file, for every .py file of ``packages`` under ``root``."""
    files = {}
    for pkg in packages:
        for path in sorted((root / pkg).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            files[".".join(parts)] = path
    return files


def imported_modules(path: pathlib.Path, module: str, known) -> set[str]:
    """The modules of ``known`` that ``module`` (at ``path``) imports, anywhere in its source."""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - node.level + 1]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            names = [prefix] + [f"{prefix}.{alias.name}" for alias in node.names]
        else:
            continue
        for name in names:
            while name and name not in known:       # `from pkg.mod import func` -> pkg.mod
                name = name.rpartition(".")[0]
            if name and name != module:
                found.add(name)
    return found


def import_graph(root: pathlib.Path, packages=PACKAGES) -> dict[str, set[str]]:
    """module -> modules it imports. An edge from a module to a package containing it is left out: a
    package's ``__init__`` re-exporting its children is how packages are made, not a cycle of design."""
    files = module_files(root, packages)
    return {m: {d for d in imported_modules(f, m, files) if not m.startswith(d + ".")} for m, f in files.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative), each sorted."""
    index, low, on_stack, stack, out = {}, {}, set(), [], []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            v, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[v] = min(low[v], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def _top(module: str) -> str:
    """The unit a module belongs to: its top package, or ``hezk.<foundation>`` under the namespace package."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "hezk" and len(parts) > 1 else parts[0]


def upward_imports(graph: dict[str, set[str]], engine: str, forbidden) -> list[str]:
    """Edges 'module -> dependency' from package ``engine`` into any package of ``forbidden``."""
    return sorted(f"{m} -> {d}" for m, deps in graph.items() if _top(m) == engine for d in deps if _top(d) in forbidden)


# -- the checker itself ---------------------------------------------------------------------------------
def _write(root: pathlib.Path, files: dict[str, str]):
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_checker_finds_lazy_relative_and_absolute_cycles(tmp_path):
    _write(tmp_path, {
        "pkg/__init__.py": "from .a import f\n",
        "pkg/a.py": "def f():\n    from .sub.b import g\n    return g\n",          # lazy and relative
        "pkg/sub/__init__.py": "",
        "pkg/sub/b.py": "from ..c import h\n",
        "pkg/c.py": "import pkg.a\nfrom pkg import a as again\n",                  # absolute, both forms
        "pkg/d.py": "from pkg.c import h\n",                                       # on no cycle
    })
    graph = import_graph(tmp_path, ("pkg",))
    assert graph["pkg.a"] == {"pkg.sub.b"} and graph["pkg.sub.b"] == {"pkg.c"} and graph["pkg.c"] == {"pkg.a"}
    assert "pkg" not in graph["pkg.c"]                     # child -> own package: left out
    assert cycles(graph) == [["pkg.a", "pkg.c", "pkg.sub.b"]]


def test_checker_passes_a_layered_package(tmp_path):
    _write(tmp_path, {"pkg/__init__.py": "from .top import t\n", "pkg/low.py": "X = 1\n",
                      "pkg/mid.py": "from .low import X\n", "pkg/top.py": "from . import mid\nfrom .low import X\n"})
    graph = import_graph(tmp_path, ("pkg",))
    assert graph["pkg.top"] == {"pkg.mid", "pkg.low"}
    assert cycles(graph) == []


def test_checker_finds_an_engine_importing_upward(tmp_path):
    _write(tmp_path, {"low/__init__.py": "", "low/x.py": "def f():\n    import high.y\n",
                      "high/__init__.py": "", "high/y.py": "from low.x import f\n"})
    graph = import_graph(tmp_path, ("low", "high"))
    assert upward_imports(graph, "low", ("high",)) == ["low.x -> high.y"]
    assert upward_imports(graph, "high", ("low",)) == ["high.y -> low.x"]


# -- the repository -------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def graph():
    return import_graph(ROOT)


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_cycle(graph, package):
    assert any(m.split(".")[0] == package for m in graph)
    bad = [comp for comp in cycles(graph) if any(m.split(".")[0] == package for m in comp)]
    assert not bad, "import cycles: " + "; ".join(" <-> ".join(c) for c in bad)


def test_benchmarks_share_helpers_through_their_helper_modules_not_each_other():
    """No benchmark imports another in a loop or reads another's private names (``benchmarks/_timing.py`` holds
    what they share; ``proofs.py`` and ``proofs_graph.py`` once imported each other for a private helper)."""
    graph = import_graph(ROOT, ("benchmarks",))
    assert "benchmarks.proofs" in graph
    assert not cycles(graph), cycles(graph)
    assert not private_names_read(ROOT, ("benchmarks",))


@pytest.mark.parametrize("engine, forbidden", [("crypto", ("tensor_ops", "proofs")),
                                               ("proofs", ("crypto", "tensor_ops")),
                                               *[(foundation, ("crypto", "tensor_ops", "proofs", "hezk"))
                                                 for foundation in FOUNDATIONS]])
def test_engines_do_not_import_upward(graph, engine, forbidden):
    assert any(_top(m) == engine for m in graph)
    wrong = upward_imports(graph, engine, forbidden)
    assert not wrong, f"{engine} must not import {forbidden}: {wrong}"


def test_import_hezk_gives_both_halves_and_a_foundation_stays_below_the_engines():
    """``import hezk`` works and names the API of both halves; importing a foundation (as the engines do) loads
    no engine: the facade resolves its names on first use."""
    code = ("import sys, hezk.record, hezk.model\n"
            "assert not {'crypto', 'tensor_ops', 'proofs'} & set(sys.modules), sorted(sys.modules)\n"
            "import hezk\n"
            "assert hezk.CKKSContext.__module__.startswith('crypto') and hezk.Network.__module__.startswith('proofs')\n"
            "assert callable(hezk.einsum) and callable(hezk.load_model) and 'CKKSContext' in dir(hezk)\n"
            "print('ok')")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert result.stdout.strip() == "ok", result.stderr
    import hezk
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        hezk.nope


def test_no_other_top_level_package():
    """One distribution, four import names: the three of the layout and ``hezk``."""
    tops = sorted(p.parent.name for p in ROOT.glob("*/__init__.py") if p.parent.name not in ("tests", "benchmarks"))
    assert tops == ["crypto", "hezk", "proofs", "tensor_ops"]


def private_names_read(root: pathlib.Path, packages=PACKAGES) -> list[tuple[str, str, str]]:
    """(reader, module, name) for every private name (one leading underscore) a module reads from another
    project module: ``from m import _x`` or ``m._x`` through an imported module. A private module of a package
    (``proofs/_kernels.py``) is the package's own: its siblings may import it, not its private names."""
    files = module_files(root, packages)
    found = []
    for module, path in files.items():
        package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        aliases = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                source = ".".join(package[:len(package) - node.level + 1] + ([node.module] if node.module else [])) \
                    if node.level else (node.module or "")
                if source.split(".")[0] not in packages:
                    continue
                for alias in node.names:
                    full = f"{source}.{alias.name}"
                    if full in files:
                        aliases[alias.asname or alias.name] = full
                    elif _private(alias.name) and source != module:
                        found.append((module, source, alias.name))
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name in files and alias.asname:
                        aliases[alias.asname] = alias.name
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and _private(node.attr) \
                    and node.value.id in aliases and aliases[node.value.id] != module:
                found.append((module, aliases[node.value.id], node.attr))
    return sorted(set(found))


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def test_checker_finds_private_names_read_across_modules(tmp_path):
    pkg = tmp_path / "proofs"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def _helper():\n    return 1\n\n\ndef public():\n    return _helper()\n")
    (pkg / "_kernels.py").write_text("def fast():\n    return 2\n")
    (pkg / "b.py").write_text("from .a import _helper, public\nfrom . import _kernels\n")
    (pkg / "c.py").write_text("from proofs import a as A\n\n\ndef f():\n    return A._helper()\n")
    assert private_names_read(tmp_path, ("proofs",)) == [("proofs.b", "proofs.a", "_helper"),
                                                        ("proofs.c", "proofs.a", "_helper")]


def test_no_private_name_crosses_a_module_boundary():
    """Each module's underscore names are its own (docs/architecture.md): what another module needs is public."""
    found = private_names_read(ROOT)
    assert not found, "private names read across modules: " + "; ".join(f"{r} reads {m}.{n}" for r, m, n in found)


_IMPORT_ALONE = """
import importlib, sys
failed = []
for name in sys.argv[1:]:
    for loaded in [m for m in sys.modules if m.split(".")[0] in ("crypto", "proofs", "tensor_ops", "hezk")]:
        del sys.modules[loaded]
    try:
        importlib.import_module(name)
    except ImportError as error:
        failed.append(f"{name}: {error}")
print("\\n".join(failed))
"""


def _modules(*packages):
    names = []
    for package in packages:
        for path in sorted((ROOT / package).rglob("*.py")):
            if path.name != "__main__.py":
                parts = path.relative_to(ROOT).with_suffix("").parts
                names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def _import_each_alone(names):
    run = subprocess.run([sys.executable, "-c", _IMPORT_ALONE, *names], capture_output=True, text=True,
                         cwd=ROOT, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    return run.stdout.strip()


def test_a_lower_module_imports_alone_though_its_package_init_re_exports_higher_ones():
    """Rule: importing ``proofs.relations`` first works (it takes ``proofs.layers.packing``; the package's
    ``__init__`` re-exported the network prover eagerly, which imports ``proofs.relations`` back: a cycle
    through a package ``__init__`` that the import-graph checker does not see)."""
    assert _import_each_alone(["proofs.relations", "proofs.layers.packing"]) == ""


@pytest.mark.slow
def test_every_module_imports_alone():
    """Rule: every module of the four packages imports in a process where none of them is loaded yet."""
    assert _import_each_alone(_modules("hezk", "crypto", "proofs", "tensor_ops")) == ""
