"""Lazy package attributes (PEP 562) for the engines' ``__init__``: the names a package re-exports are imported
on first use, so importing one light submodule (an error type, a command line's argument definitions) does not
import the whole engine (``hezk --help`` in a fraction of a second).

A package writes its re-exports once, as ordinary ``from .module import name`` statements under
``if TYPE_CHECKING:`` (so documentation tools, type checkers and readers see them), and calls
``lazy_package(__name__)``, which reads that block from the package's source. Bottom module: imports nothing
of hezk or the engines."""
from __future__ import annotations

import ast
import importlib
import importlib.util
import sys
import types

__all__ = ["lazy_package", "lazy_names"]


def lazy_names(source: str, package: str) -> dict[str, tuple[str, str | None]]:
    """The re-exports of the ``if TYPE_CHECKING:`` blocks of a package's ``__init__`` source: public name ->
    (absolute module, attribute), attribute None for ``from . import module`` (the module itself)."""
    names = {}
    for node in ast.parse(source).body:
        if not (isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"):
            continue
        for statement in node.body:
            if not isinstance(statement, ast.ImportFrom):
                raise ValueError(f"{package}: only 'from ... import ...' statements may stand in the "
                                 f"TYPE_CHECKING block of a lazy package (line {statement.lineno})")
            base = importlib.util.resolve_name("." * statement.level + (statement.module or ""), package)
            for alias in statement.names:
                if statement.module is None:  # from . import module
                    names[alias.asname or alias.name] = (f"{base}.{alias.name}", None)
                else:
                    names[alias.asname or alias.name] = (base, alias.name)
    return names


class _LazyPackage(types.ModuleType):
    """A package whose re-exported names are imported on first use. A submodule named like one of the package's
    attributes (``tensor_ops.plan`` the function, in the module ``tensor_ops.plan``) does not replace that
    attribute when the import system binds the loaded submodule to the package: the attribute wins, as it did
    when the ``__init__`` imported it eagerly."""

    def __setattr__(self, name, value):
        target = self.__dict__.get("_lazy_names", {}).get(name)
        if target is not None and isinstance(value, types.ModuleType):
            module, attribute = target
            if value.__name__ == module and attribute is not None:
                value = getattr(value, attribute)
        super().__setattr__(name, value)

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}")
        target = self.__dict__["_lazy_names"].get(name)
        if target is None:  # a submodule not imported yet (``crypto.ckks``): imported on use, as any attribute
            full = f"{self.__name__}.{name}"
            try:
                value = importlib.import_module(full)
            except ModuleNotFoundError as error:
                if error.name != full:
                    raise
                raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}") from None
        else:
            module, attribute = target
            value = importlib.import_module(module)
            if attribute is not None:
                value = getattr(value, attribute)
        types.ModuleType.__setattr__(self, name, value)  # later lookups skip this method
        return value

    def __dir__(self):
        return sorted(set(self.__dict__) | set(self.__dict__["_lazy_names"]))


def lazy_package(name: str) -> None:
    """Make the package ``name`` (call with ``__name__`` from its ``__init__``) import the names of its
    ``if TYPE_CHECKING:`` block on first use instead of now."""
    package = sys.modules[name]
    with open(package.__spec__.origin, encoding="utf-8") as handle:
        package.__dict__["_lazy_names"] = lazy_names(handle.read(), name)
    package.__class__ = _LazyPackage
