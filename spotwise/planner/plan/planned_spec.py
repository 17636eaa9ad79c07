"""``spotwise plan --write-spec FILE``: the user's spec with the plan's decisions applied (issue 42 item 5).

What is written is the user's own file, not a dump of every default: it is read back with
``ruamel.yaml``'s round-trip loader, so its comments, key order and layout stay; only the fields
the plan decides (workers, bids, iterations, the place, the market the strategy was tested on,
policies, the deadline) are changed or added, each marked ``# planned``, under a header naming the
strategy and why.  Paths in it (traces, catalogs, lifetimes, the dataset, a training script) are
relative to the *written* file's folder -- as a spec's paths are read -- computed without resolving
symbolic links, so the written spec loads from where it is written, and the pair moves together.  A
spec given as a dict or :class:`~spotwise.config.JobSpec` (no file) is written whole, its paths made
relative the same way.  A job whose length is in samples, epochs or tokens keeps it (the plan's
iterations are its estimate, not a new length).
"""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

from spotwise.config import JobSpec
from spotwise.outputfiles import yaml_comment
from spotwise.planner.plan.compose import apply_plan
from spotwise.planner.plan.records import Plan

#: the spec fields that hold paths, relative to the spec file's folder when read
PATH_FIELDS: tuple[tuple[str, ...], ...] = (("market", "traces"), ("market", "catalog"), ("market", "synthetic", "fit_to"),
                                             ("market", "revocation", "lifetimes"), ("workload", "dataset"),
                                             ("workload", "script"), ("workload", "requirements"))
MARK = "planned"


def _changes(base: Any, new: Any, at: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    """The leaves (key paths) where ``new`` differs from ``base`` -- nested mappings compared key by key."""
    if isinstance(base, dict) and isinstance(new, dict):
        out: list[tuple[tuple[str, ...], Any]] = []
        for k in new:
            out += _changes(base.get(k), new[k], (*at, str(k))) if k in base else [((*at, str(k)), new[k])]
        return out
    return [] if base == new else [(at, new)]


def _rel(value: Any, src_dir: str, out_dir: str) -> Any:
    """A path (or list of paths) read against ``src_dir``, rewritten relative to ``out_dir``; no link is resolved."""
    if isinstance(value, list):
        return [_rel(v, src_dir, out_dir) for v in value]
    if not isinstance(value, str) or not value or "://" in value:
        return value
    p = os.path.expanduser(value)
    full = p if os.path.isabs(p) else os.path.normpath(os.path.join(src_dir, p))
    return os.path.relpath(full, out_dir)


def _abs(path: str | Path) -> str:
    """``path`` made absolute against the shell's current folder as the user sees it (``$PWD``, which
    keeps the symbolic links they came through) where that is this process's folder; no link resolved."""
    p = os.fspath(path)
    if os.path.isabs(p):
        return os.path.normpath(p)
    here = os.getcwd()
    pwd = os.environ.get("PWD")
    try:
        if pwd and os.path.isabs(pwd) and os.path.samefile(pwd, here):
            here = pwd
    except OSError:
        pass
    return os.path.normpath(os.path.join(here, p))


def _get(doc: Any, keys: tuple[str, ...]) -> Any:
    for k in keys:
        if not isinstance(doc, dict) or k not in doc:
            return None
        doc = doc[k]
    return doc


def _set(doc: Any, keys: tuple[str, ...], value: Any, mark: bool) -> None:
    from ruamel.yaml.comments import CommentedMap, CommentedSeq

    node = doc
    for k in keys[:-1]:
        if not isinstance(node.get(k), dict):
            node[k] = CommentedMap()
        node = node[k]
        node.fa.set_block_style()  # a comment can follow a key only in block style
    node.fa.set_block_style()
    if isinstance(value, list):
        seq = CommentedSeq(value)
        seq.fa.set_flow_style()
        value = seq
    node[keys[-1]] = value
    if mark:
        node.yaml_add_eol_comment(MARK, keys[-1])


def planned_text(spec: JobSpec, plan: Plan, path: str | Path, source: str | Path | None = None) -> str:
    """The YAML ``--write-spec`` writes to ``path`` (module docstring); ``source``: the user's spec file."""
    from ruamel.yaml import YAML

    planned = apply_plan(spec, plan)
    out_dir = os.path.dirname(_abs(path))
    base = spec.to_dict()
    yaml = YAML(typ="rt")
    yaml.width = 100
    yaml.preserve_quotes = True
    if source is not None and Path(source).is_file():
        from spotwise.inputfiles import read_input_text
        from spotwise.safeparse import load_yaml

        src_dir = os.path.dirname(_abs(source))
        text = read_input_text(Path(source), "spec file", "pass a readable UTF-8 YAML file")
        load_yaml(text, str(source), "spec file")  # checked as every spec is, before the round trip reads it
        doc = yaml.load(text)
        for keys in PATH_FIELDS:  # the user's own paths, now relative to the written file
            v = _get(doc, keys)
            if v is not None:
                _get(doc, keys[:-1])[keys[-1]] = _rel(list(v) if isinstance(v, list) else v, src_dir, out_dir)
        for keys, value in _changes(base, planned):
            if keys == ("deadline",) and plan.deadline_s == spec.deadline_s:
                continue  # the same deadline, written another way
            if keys in PATH_FIELDS:
                value = _rel(value, out_dir, out_dir)  # the plan's are absolute
            _set(doc, keys, value, mark=True)
    else:
        doc = planned
        for keys in PATH_FIELDS:
            v = _get(doc, keys)
            if v is not None:
                _get(doc, keys[:-1])[keys[-1]] = _rel(v, out_dir, out_dir)
    buf = io.StringIO()
    yaml.dump(doc, buf)
    import textwrap

    lines = textwrap.wrap(f"{spec.name} with the plan applied: {plan.strategy} -- {plan.why}", 98) + \
        [f"fields the plan set are marked '# {MARK}'; paths are relative to this file"]
    header = yaml_comment(lines)  # one comment line each, whatever the plan's text holds
    return header + buf.getvalue()


def write_planned_spec(spec: JobSpec, plan: Plan, path: str | Path, source: str | Path | None = None) -> str:
    """Write :func:`planned_text` to ``path`` and check it loads back from there (its paths against its
    folder); returns the message saying where it went.  InputError when it cannot be written."""
    from spotwise.config import load_spec
    from spotwise.outputfiles import write_output_text

    write_output_text(path, planned_text(spec, plan, path, source), "--write-spec")
    load_spec(path)  # what we wrote loads, from where it is
    return f"planned spec written to {path}"


__all__ = ["PATH_FIELDS", "planned_text", "write_planned_spec"]
