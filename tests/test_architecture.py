"""The architecture's rules, checked on the source tree (issues 19 and 32).

* No import circles among ``spotwise`` modules.  Every import statement is an edge: at module
  level, inside a function (a lazy import runs when called), and under ``if TYPE_CHECKING:`` (never
  executed, but a reader must follow it and the two modules are tied by it all the same); edges
  between modules of one package count like any other.  ``import a.b.c`` (or ``from a.b.c import
  x``) is an edge to ``a.b.c`` and to the packages ``a`` and ``a.b`` that Python runs first.  Left
  out is only that implicit run of a module's *own* containing packages (importing ``spotwise.a.b``
  from ``spotwise.a.c`` runs ``spotwise`` and ``spotwise.a``, which are initialising already: the
  package protocol, not a dependency).  An explicit ``from spotwise.a import name``, where ``name``
  is defined in ``spotwise/a/__init__.py`` and is no submodule, is an edge to ``spotwise.a`` even
  from inside ``spotwise.a``.
* No source file over 600 lines.
* One controller by composition: no class in ``spotwise`` subclasses ``JobController``, no mixin
  classes, and every data plane implements every method of the ``DataPlane`` protocol.
* The controller sits above its components and the planes: only the modules that build a controller
  (:data:`MAY_IMPORT_CONTROLLER`) import ``spotwise.control.controller`` or name ``JobController``;
  the controller imports no plane but the ``Compute`` protocol (the plane is chosen above it).
"""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "spotwise"
MAX_LINES = 600
CONTROLLER = "spotwise.control.controller"

#: the modules that may import the controller (and name ``JobController``): those above it, which
#: build one for a spec.  Everything the controller holds (its components in spotwise.control, the
#: data planes in spotwise.planes) gets what it needs from the controller as narrow arguments or a
#: protocol, so it never names the controller -- not even in a docstring or a string annotation.
MAY_IMPORT_CONTROLLER = frozenset({
    "spotwise.assemble",                  # assembles a controller from a spec: the plane, market and provider
    "spotwise.control.runner",            # `spotwise run`: builds the controller for a run directory and runs it
    "spotwise.control.baseline",          # runs the same job on on-demand capacity for comparison
    "spotwise.sim.simulate",              # `spotwise simulate`: one controller on the simulated provider
    "spotwise.capacity.cluster",          # `cluster_controller`: a controller on a real cluster's capacity
    "spotwise.planes.serverless.runner",  # `serverless_controller`: a controller with the serverless world injected
})


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def _imports(tree: ast.AST, module: str, is_pkg: bool, modules: set[str] | dict[str, Path]) -> set[str]:
    """The ``spotwise`` modules ``tree`` (the source of ``module``) names in its import statements:
    every one, wherever it stands (module level, a function, ``if TYPE_CHECKING:``).

    ``from p import x`` names ``p.x`` when that is a module, else ``p`` (``x`` is defined in
    ``p/__init__.py``).  Only the module named is returned; the packages Python runs on the way
    (``p``'s parents) are added by :func:`_edges`."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                pkg = module if is_pkg else module.rsplit(".", 1)[0]
                for _ in range(node.level - 1):
                    pkg = pkg.rsplit(".", 1)[0]
                base = f"{pkg}.{base}" if base else pkg
            for a in node.names:
                sub = f"{base}.{a.name}"
                found.add(sub if sub in modules else base)
    return {m for m in found if m in modules}


def _edges(module: str, imported: set[str], modules: set[str] | dict[str, Path]) -> set[str]:
    """``module``'s edges: every module it imports, and the packages above each that Python runs
    first -- except ``module``'s own containing packages (the package protocol, module docstring)."""
    edges = {m for m in imported if m != module}
    for target in imported:
        parts = target.split(".")
        for i in range(1, len(parts)):  # importing a.b.c runs a and a.b first
            prefix = ".".join(parts[:i])
            if prefix in modules and prefix != module and not module.startswith(prefix + "."):
                edges.add(prefix)
    return edges


def _graph_of(sources: dict[str, tuple[str, bool]]) -> dict[str, set[str]]:
    """The import graph of ``sources``: module name -> (its source text, whether it is a package)."""
    names = set(sources)
    return {name: _edges(name, _imports(ast.parse(text), name, is_pkg, names), names)
            for name, (text, is_pkg) in sources.items()}


def _graph() -> dict[str, set[str]]:
    return _graph_of({name: (path.read_text(), path.name == "__init__.py") for name, path in _modules().items()})


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
    """The checker itself: a circle closed by a type-only import, by a lazy import, or between two
    modules of one package is found; a package's ``__init__`` importing its submodules is not one."""
    type_only = _graph_of({
        "spotwise.a": ("from spotwise.b import f\n", False),
        "spotwise.b": ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from spotwise.a import X\n", False)})
    assert type_only == {"spotwise.a": {"spotwise.b"}, "spotwise.b": {"spotwise.a"}}
    assert _cycles(type_only) == [["spotwise.a", "spotwise.b"]]
    lazy = _graph_of({"spotwise.a": ("from spotwise.b import f\n", False),
                      "spotwise.b": ("def g():\n    from spotwise import a\n", False)})
    assert lazy["spotwise.b"] == {"spotwise.a"}
    assert _cycles(lazy) == [["spotwise.a", "spotwise.b"]]
    same_package = _graph_of({
        "spotwise.p": ("", True),
        "spotwise.p.x": ("from .y import f\n", False),
        "spotwise.p.y": ("def f():\n    from spotwise.p import x\n", False)})
    assert same_package == {"spotwise.p": set(), "spotwise.p.x": {"spotwise.p.y"}, "spotwise.p.y": {"spotwise.p.x"}}
    assert _cycles(same_package) == [["spotwise.p.x", "spotwise.p.y"]]
    # importing a sibling runs the package they sit in: the package protocol, no edge
    ancestors = _graph_of({
        "spotwise": ("from spotwise.p.x import f\n", True),
        "spotwise.p": ("from spotwise.p.x import f\nfrom . import y\n", True),
        "spotwise.p.x": ("import spotwise.p.y\nfrom spotwise.q import g\n", False),
        "spotwise.p.y": ("", False),
        "spotwise.q": ("", False),
        "spotwise.r": ("import spotwise.p.y\n", False)})
    assert ancestors["spotwise.p.x"] == {"spotwise.p.y", "spotwise.q"}
    assert ancestors["spotwise.r"] == {"spotwise.p", "spotwise.p.y"}  # another package's __init__ runs: an edge
    assert _cycles(ancestors) == []
    # ... but a name taken from the package's own __init__ is an edge to it, from inside too
    own_init = _graph_of({
        "spotwise.p": ("from spotwise.p.x import f\nX = 1\n", True),
        "spotwise.p.x": ("def f():\n    from spotwise.p import X\n", False)})
    assert own_init["spotwise.p.x"] == {"spotwise.p"}
    assert _cycles(own_init) == [["spotwise.p", "spotwise.p.x"]]


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


def _names_controller(path: Path) -> bool:
    return re.search(r"\bJobController\b", path.read_text()) is not None


def test_only_the_modules_above_the_controller_import_it() -> None:
    """Components and planes never import the controller, not even for a type: what they need
    comes in as arguments.  Only :data:`MAY_IMPORT_CONTROLLER` (they build one) import it."""
    graph = _graph()
    assert MAY_IMPORT_CONTROLLER <= set(graph)  # the allow-list names real modules
    importers = sorted(m for m, edges in graph.items() if CONTROLLER in edges and m not in MAY_IMPORT_CONTROLLER)
    assert importers == []


def test_only_the_modules_above_the_controller_name_it() -> None:
    """No module but the controller and :data:`MAY_IMPORT_CONTROLLER` names ``JobController`` --
    in code, a string annotation, a comment or a docstring's ``:class:`` reference."""
    naming = sorted(name for name, path in _modules().items()
                    if name != CONTROLLER and name not in MAY_IMPORT_CONTROLLER and _names_controller(path))
    assert naming == []


def test_the_controller_imports_no_plane_but_the_compute_protocol() -> None:
    """The data plane is chosen above the controller (:data:`MAY_IMPORT_CONTROLLER`) and passed in:
    the controller imports nothing from ``spotwise.planes`` but ``spotwise.planes.ps.compute``."""
    mods = _modules()
    path = mods[CONTROLLER]
    planes = sorted(m for m in _imports(ast.parse(path.read_text()), CONTROLLER, False, mods)
                    if m == "spotwise.planes" or m.startswith("spotwise.planes."))
    assert planes in ([], ["spotwise.planes.ps.compute"])
    # the packages Python runs on the way to the protocol import no plane either
    graph = _graph()
    assert {m for p in ("spotwise.planes", "spotwise.planes.ps") for m in graph[p]} <= {"spotwise.planes.ps.compute"}
