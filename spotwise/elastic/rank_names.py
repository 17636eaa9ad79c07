"""Names a script computes from its rank at its top level, computed again when its rank changes (issue 55 item 2).

A torchrun script decides once, at its top, what this process is::

    ddp_rank = int(os.environ["RANK"])
    master_process = ddp_rank == 0          # logging, evaluation, torch.save

Under torchrun that is right for the life of the process.  A spotwise member lives through
regroups: when the leader (rank 0) is lost, a survivor becomes rank 0 -- its ``RANK``, ``dist.get_rank()``
and ``job.rank`` say so from its next step on, and the script's own ``master_process`` must too.
So spotwise finds, in the script's source, the module-level assignments whose value follows from
the rank -- a pure expression (names, constants, arithmetic, comparisons, ``int(...)``,
``os.environ[...]`` / ``os.environ.get`` / ``os.getenv`` of torchrun's variables,
``dist.get_rank()`` / ``dist.get_world_size()``) of a rank variable or of a name already found --
inside ``if`` blocks whose test is pure too (nanoGPT's ``if ddp:``), and runs exactly those
statements again in the script's module namespace at the step where its rank or world size
changed (:meth:`RankNames.refresh`).  Nothing else is run again: no call of the script's own
functions, no augmented assignment (``gradient_accumulation_steps //= ddp_world_size`` is done
once), no statement inside a function.  A name assigned anywhere else at the top level too (the
script changes it itself later) is left alone.

What this does not reach: a value computed inside a function (``def main(): is_master = rank ==
0``) keeps its first value -- read ``dist.get_rank() == 0`` (or ``job.is_leader``) where it is used.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Any

#: the environment variables that say where a process is (torchrun's, :mod:`spotwise.elastic.torchrun`)
RANK_VARS = frozenset({"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
                       "ROLE_RANK", "ROLE_WORLD_SIZE"})
#: calls that answer the rank or the world size (``dist.get_rank()``, ``torch.distributed.get_world_size()``)
RANK_CALLS = frozenset({"get_rank", "get_world_size", "get_node_local_rank"})
#: calls without side effects an expression may make
PURE_CALLS = frozenset({"int", "str", "bool", "float", "abs", "min", "max"})
_OPS = (ast.BoolOp, ast.BinOp, ast.UnaryOp, ast.Compare, ast.IfExp, ast.JoinedStr, ast.FormattedValue, ast.Tuple,
        ast.List)


def _is_environ(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "environ" and isinstance(node.value, ast.Name) \
        and node.value.id == "os"


def _reads(node: ast.AST, derived: set[str]) -> tuple[bool, bool]:
    """(whether ``node`` is a pure expression, whether it reads the rank: a rank variable, a rank
    call or a name in ``derived``)."""
    if isinstance(node, ast.Constant):
        return True, False
    if isinstance(node, ast.Name):
        return True, node.id in derived
    if isinstance(node, ast.Subscript) and _is_environ(node.value):  # os.environ["RANK"]
        key = node.slice
        return isinstance(key, ast.Constant), isinstance(key, ast.Constant) and key.value in RANK_VARS
    if isinstance(node, ast.Call):
        f = node.func
        if node.keywords:
            return False, False
        env_get = (isinstance(f, ast.Attribute) and f.attr == "get" and _is_environ(f.value)) or \
            (isinstance(f, ast.Attribute) and f.attr == "getenv" and isinstance(f.value, ast.Name) and f.value.id == "os")
        if env_get and node.args and isinstance(node.args[0], ast.Constant):
            rest = [_reads(a, derived) for a in node.args[1:]]
            return all(p for p, _ in rest), node.args[0].value in RANK_VARS or any(r for _, r in rest)
        name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
        if name in RANK_CALLS and not node.args:
            return True, True
        if isinstance(f, ast.Name) and f.id in PURE_CALLS:
            parts = [_reads(a, derived) for a in node.args]
            return all(p for p, _ in parts), any(r for _, r in parts)
        return False, False
    if isinstance(node, _OPS):
        parts = [_reads(c, derived) for c in ast.iter_child_nodes(node)
                 if not isinstance(c, (ast.operator, ast.boolop, ast.unaryop, ast.cmpop, ast.expr_context))]
        return all(p for p, _ in parts), any(r for _, r in parts)
    return False, False


def _targets(stmt: ast.stmt) -> list[str] | None:
    """The plain names an assignment binds (None: not a plain assignment of names)."""
    if isinstance(stmt, ast.Assign):
        names: list[str] = []
        for t in stmt.targets:
            if isinstance(t, ast.Name):
                names.append(t.id)
            elif isinstance(t, (ast.Tuple, ast.List)) and all(isinstance(e, ast.Name) for e in t.elts):
                names.extend(e.id for e in t.elts if isinstance(e, ast.Name))  # ``rank, world = 0, 1``
            else:
                return None
        return names
    if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
        return [stmt.target.id]
    return None


def _bound(stmt: ast.stmt) -> set[str]:
    """Every name a statement binds at the top level (assignments, imports, defs, loops, with)."""
    out: set[str] = set()
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {stmt.name}
    for node in ast.walk(stmt):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            out.add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            out.update((a.asname or a.name).split(".")[0] for a in node.names)
    return out


@dataclass
class RankNames:
    """The script's rank-derived top-level statements (module docstring)."""

    #: the statements run again, in order (assignments, and ``if`` blocks holding some)
    body: list[ast.stmt] = field(default_factory=list)
    #: the names they bind
    names: set[str] = field(default_factory=set)
    filename: str = "<script>"

    @classmethod
    def of_source(cls, source: str, filename: str = "<script>") -> RankNames:
        try:
            tree = ast.parse(source, filename)
        except SyntaxError:
            return cls(filename=filename)  # the script's own run reports it
        derived: set[str] = set()
        others: set[str] = set()
        body = _scan(tree.body, derived, others, False)[0]
        names = {n for s in ast.walk(ast.Module(body=body, type_ignores=[])) if isinstance(s, (ast.Assign, ast.AnnAssign))
                 for n in _targets(s) or ()} - others
        out = cls(_prune(body, names), names, filename)
        out._code = compile(ast.fix_missing_locations(ast.Module(body=out.body, type_ignores=[])), filename, "exec") \
            if out.body else None
        return out

    def refresh(self, namespace: dict[str, Any]) -> list[str]:
        """Run the statements again in ``namespace`` (the script's module globals); the names whose
        value changed.  A statement that fails (a name the script deleted) leaves the rest as they were."""
        code = getattr(self, "_code", None)
        if code is None:
            return []
        before = {n: namespace.get(n) for n in self.names}
        scratch = dict(namespace)
        try:
            exec(code, scratch)  # noqa: S102 - the script's own statements, pure expressions only
        except Exception:
            return []
        changed = []
        for n in sorted(self.names):
            if n in scratch and scratch[n] is not before[n] and scratch[n] != before[n]:
                namespace[n] = scratch[n]
                changed.append(n)
        return changed


def _scan(stmts: list[ast.stmt], derived: set[str], others: set[str], in_if: bool) -> tuple[list[ast.stmt], bool]:
    """The statements of ``stmts`` to run again, and whether one of them reads the rank.  ``derived``
    grows by the names that follow the rank; ``others`` by the names bound otherwise (a call's
    value, an augmented assignment, a loop, an import): those are the script's own to change.
    Inside an ``if`` block with a pure test every pure assignment is kept (the alternatives of a
    ``if ddp: ... else: master_process = True``)."""
    kept: list[ast.stmt] = []
    reads = False
    for s in stmts:
        names = _targets(s)
        if names is not None:
            value = s.value
            pure, rank = _reads(value, derived) if value is not None else (False, False)
            if pure and rank:
                derived.update(names)
                kept.append(s)
                reads = True
            elif pure and in_if:
                kept.append(s)
            elif not pure:
                others.update(names)
            continue
        if isinstance(s, ast.If) and _reads(s.test, derived)[0]:
            body, r1 = _scan(s.body, derived, others, True)
            orelse, r2 = _scan(s.orelse, derived, others, True)
            if r1 or r2:
                kept.append(ast.If(test=s.test, body=body or [ast.Pass()], orelse=orelse))
                reads = True
            continue
        others.update(_bound(s))
    return kept, reads


def _prune(stmts: list[ast.stmt], keep: set[str]) -> list[ast.stmt]:
    """``stmts`` without the assignments of names not in ``keep`` (and ``if`` blocks left empty)."""
    out: list[ast.stmt] = []
    for s in stmts:
        if isinstance(s, ast.If):
            body, orelse = _prune(s.body, keep), _prune(s.orelse, keep)
            if body or orelse:
                out.append(ast.If(test=s.test, body=body or [ast.Pass()], orelse=orelse))
        elif not isinstance(s, ast.Pass) and set(_targets(s) or ()) <= keep:
            out.append(s)
    return out
