"""The architecture's rules, checked on the source tree (issue 19).

* No import circles among ``spotwise`` modules: every import counts, module-level or inside a
  function (a lazy import is still an edge), and importing ``a.b.c`` also runs the packages
  ``a`` and ``a.b``; left out are imports under ``if TYPE_CHECKING:`` (never executed) and a
  module's edges to the packages that contain it (a package's ``__init__`` importing its own
  submodules is Python's package protocol, not a circle: the package is initialising already).
* No source file over 600 lines.
* One controller by composition: no class in ``spotwise`` subclasses ``JobController``, no mixin
  classes, and both data planes implement every method of the ``DataPlane`` protocol.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "spotwise"
MAX_LINES = 600


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST, module: str, is_pkg: bool) -> set[str]:
    """Every ``spotwise`` module ``tree`` imports, outside ``if TYPE_CHECKING:`` blocks."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                pkg = module if is_pkg else module.rsplit(".", 1)[0]
                for _ in range(node.level - 1):
                    pkg = pkg.rsplit(".", 1)[0]
                base = f"{pkg}.{base}" if base else pkg
            found.add(base)
            found.update(f"{base}.{a.name}" for a in node.names)  # ``from pkg import module``
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return {m for m in found if m == "spotwise" or m.startswith("spotwise.")}


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        edges: set[str] = set()
        for target in _imports(ast.parse(path.read_text()), name, path.name == "__init__.py"):
            parts = target.split(".")
            for i in range(1, len(parts) + 1):  # importing a.b.c runs a and a.b first
                prefix = ".".join(parts[:i])
                if prefix in mods and prefix != name and not name.startswith(prefix + "."):
                    edges.add(prefix)
        graph[name] = edges
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def strong(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    import sys

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10_000))
    try:
        for v in sorted(graph):
            if v not in index:
                strong(v)
    finally:
        sys.setrecursionlimit(limit)
    return out



def test_the_checker_finds_a_circle() -> None:
    """The checker itself: a planted circle (and a lazy edge closing it) is found, a type-only import is not."""
    a = ast.parse("from spotwise.b import f\n")
    b = ast.parse("def g():\n    from spotwise import a\n")
    c = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from spotwise.a import X\n")
    assert _imports(a, "spotwise.a", False) == {"spotwise.b", "spotwise.b.f"}
    assert _imports(b, "spotwise.b", False) == {"spotwise", "spotwise.a"}
    assert _imports(c, "spotwise.c", False) == set()
    assert _cycles({"spotwise.a": {"spotwise.b"}, "spotwise.b": {"spotwise.a"}, "spotwise.c": set()}) == [
        ["spotwise.a", "spotwise.b"]]


def test_no_import_circles() -> None:
    graph = _graph()
    assert len(graph) > 100  # the whole package was read
    assert _cycles(graph) == []


def test_no_source_file_over_600_lines() -> None:
    long = {str(p.relative_to(ROOT.parent)): n for p in ROOT.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}


def test_one_controller_by_composition() -> None:
    """No subclass of the controller and no mixins anywhere in spotwise; the controller holds its parts."""
    subclasses: list[str] = []
    mixins: list[str] = []
    for path in ROOT.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                bases = {b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases}
                if "JobController" in bases:
                    subclasses.append(f"{path.name}:{node.name}")
                if node.name.endswith("Mixin") or any(b.endswith("Mixin") for b in bases):
                    mixins.append(f"{path.name}:{node.name}")
    assert subclasses == [] and mixins == []
    from spotwise.control.controller import JobController

    assert JobController.__bases__ == (object,)


@pytest.mark.parametrize("plane_path", ["spotwise.planes.ps.plane:ParameterServerPlane",
                                        "spotwise.planes.collective.data_plane:CollectivePlane",
                                        "spotwise.planes.serverless.plane:ServerlessPlane"])
def test_each_plane_implements_the_data_plane_protocol(plane_path: str) -> None:
    import importlib

    from spotwise.control.dataplane import DataPlane

    mod, cls_name = plane_path.split(":")
    cls = getattr(importlib.import_module(mod), cls_name)
    wanted = {n for n, v in vars(DataPlane).items() if inspect.isfunction(v) and not n.startswith("_")}
    assert wanted >= {"attach", "tick", "on_join", "on_leave", "ready_for_checkpoint", "stop", "summary_extra"}
    for name in sorted(wanted):
        impl = getattr(cls, name, None)
        assert inspect.isfunction(impl), f"{cls_name} lacks {name}"
        want = list(inspect.signature(getattr(DataPlane, name)).parameters)
        got = list(inspect.signature(impl).parameters)
        assert got == want, f"{cls_name}.{name}{got} != DataPlane.{name}{want}"
    assert isinstance(cls.name, str)
