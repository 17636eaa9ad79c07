"""``spotwise eject SPEC --out DIR``: a built-in or ``module:function`` job as a training script of the user's own (issue 41 item 2).

A ``module:function`` workload ends where ``loss(model, batch)`` ends: a GAN, a teacher, an EMA copy,
a loss over several batches need a loop of their own.  ``eject`` writes that loop, with the job's
training in it, so the user starts from what ran rather than from nothing:

* ``DIR/train.py`` -- :mod:`spotwise.elastic.workload_loop` (the workload's model, loss and data, the
  recipe's optimizer, schedule, clipping, accumulation, precision and evaluation, as a client of
  :mod:`spotwise.elastic`), with the job's ``workload:`` mapping written into its ``WORKLOAD``, the
  spec's seed into ``SEED`` and, for a ``module:function``, the folder its module is imported from
  into ``PATHS``.  Every value is written as a Python literal (``repr`` of plain data), read back with
  ``ast.literal_eval`` before the file is written: a value from the spec never becomes code.
* ``DIR/job.yaml`` -- the user's spec file, its comments and layout kept (``ruamel.yaml``'s round
  trip), its paths relative to ``DIR``, and ``workload`` now ``{script: train.py, batch_size:
  batch_size / accumulate, ...}`` (the recipe is the script's; the throughput fields, packages and
  requirements stay).  It is loaded back before ``eject`` returns.

``spotwise run DIR/job.yaml`` then trains the same steps as ``spotwise run SPEC`` on the collective
plane (:mod:`spotwise.elastic.workload_loop` says where they differ: full steps at an epoch's end).
Refused (exit 2, saying why): a spec that trains a script already, a synchronisation other than
S-SGD (``full`` / ``ssgd``), ``cluster.data_plane: ps`` or serverless functions (a script runs on the
collective plane), a ``batch_size`` that ``accumulate`` does not divide, and an existing
``train.py`` or ``job.yaml`` in ``DIR`` (``force`` replaces regular files spotwise wrote there; a link,
FIFO, socket, device or folder at either name is refused from ``lstat``, never opened).

Nothing the user named becomes code or YAML (issue 54 item 4): the headers' names go through
:func:`~spotwise.outputfiles.python_comment` / :func:`~spotwise.outputfiles.yaml_comment` (one comment line
whatever a file name holds; ``train.py`` declares UTF-8 on its second line, so no ``coding=`` in a name is
read as its encoding), the strings eject writes into ``job.yaml`` are double-quoted, and before anything
is written ``train.py``'s bytes are compiled (the header only comments, ``WORKLOAD`` / ``SEED`` /
``PATHS`` the intended literals) and ``job.yaml``'s text is read back as the spec loader reads it, to
exactly the spec file's mapping with eject's edits made to it; InputError (exit 2) otherwise.
"""

from __future__ import annotations

import ast
import copy
import importlib.util
import io
import os
import pprint
import stat
from pathlib import Path
from typing import Any, Mapping

from spotwise.errors import InputError

#: the first line of every file eject writes: what ``force`` may replace
MARK = "# written by spotwise eject"
#: what the loop uses of the workload mapping
LOOP_FIELDS = ("name", "params", "dataset", "batch_size", "lr", "optimizer", "schedule", "grad_clip_norm",
               "accumulate", "precision", "eval_every", "loader")
#: what stays in the spec's workload beside the script (the plan's and the emitted setups')
SPEC_FIELDS = ("family", "step_time_s", "model_mb", "packages", "requirements")


def _literal(value: Any) -> str:
    """``value`` (plain data) as a Python literal that reads back equal; InputError otherwise."""
    text = pprint.pformat(value, width=100, sort_dicts=False)
    try:
        same = ast.literal_eval(text) == value
    except (ValueError, SyntaxError):
        same = False
    if not same:
        raise InputError(f"a workload value cannot be written as a Python literal: {text[:200]}",
                         "use plain numbers, strings, lists and mappings in the workload", "workload")
    return text


def _workload_mapping(spec: Any, out_dir: str) -> dict[str, Any]:
    """The loop's ``WORKLOAD``: the spec's workload as it trains (the schedule's length resolved for the
    job's planned samples, as the run resolves it), its dataset path relative to ``out_dir``."""
    from dataclasses import asdict

    from spotwise.planner.plan.planned_spec import _rel

    w = spec.workload
    data = {k: v for k, v in spec.to_dict()["workload"].items() if k in LOOP_FIELDS}
    if w.schedule is not None:
        s = asdict(w.schedule.resolved(spec.planned_samples()))
        data["schedule"] = {k: v for k, v in s.items() if v is not None}
    if w.dataset:
        data["dataset"] = _rel(w.dataset, out_dir, out_dir)
    data["loader"] = dict(asdict(w.loader))
    return data


def _module_folder(name: str, out_dir: str) -> list[str]:
    """Where a ``module:function`` workload's module is imported from, relative to ``out_dir`` (none for
    a built-in or an installed package)."""
    if ":" not in name:
        return []
    top = name.partition(":")[0].split(".")[0]
    try:
        found = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        found = None
    origin = getattr(found, "origin", None) if found is not None else None
    places = list(getattr(found, "submodule_search_locations", None) or [])
    if origin and origin.endswith("__init__.py") or (not origin and places):  # a package (a namespace one too)
        folder = os.path.dirname(os.path.dirname(origin) if origin else places[0])
    elif origin and origin.endswith(".py"):
        folder = os.path.dirname(origin)
    else:
        return []
    if "site-packages" in folder or "dist-packages" in folder:  # installed: importable wherever it runs
        return []
    return [os.path.relpath(folder, out_dir)]


def _check_ejectable(spec: Any, raw: dict[str, Any]) -> None:
    w, c = spec.workload, spec.cluster
    if w.script is not None:
        raise InputError("the spec trains a script already (workload.script)", "edit that script; eject writes one for "
                         "a built-in or module:function workload", "workload.script")
    if str(c.sync) not in ("full", "ssgd"):
        raise InputError(f"the spec synchronises with {c.sync!r}; the ejected loop is S-SGD (DDP's all-reduce each step)",
                         "use cluster.sync: full (or ssgd), or keep running this spec as it is", "cluster.sync")
    cluster = raw.get("cluster") if isinstance(raw.get("cluster"), dict) else {}
    if cluster.get("data_plane") == "ps" or c.kind != "vm" or cluster.get("pools"):
        raise InputError("a training script runs on the collective plane of one VM pool; this spec asks for "
                         f"{'a parameter server' if cluster.get('data_plane') == 'ps' else 'functions or pools'}",
                         "remove cluster.data_plane: ps / kind: serverless / pools before ejecting", "cluster")
    if int(w.batch_size) % int(w.accumulate):
        raise InputError(f"batch_size {w.batch_size} is not a multiple of accumulate {w.accumulate}",
                         "the loop takes `accumulate` micro-batches of batch_size / accumulate per step: make "
                         "batch_size a multiple of accumulate", "workload.batch_size")


def _writable(path: Path, force: bool) -> None:
    """InputError (exit 2) unless eject may write ``path``: nothing there, or (with ``force``) a regular file whose
    first line is :data:`MARK`.  What is there is looked at with ``lstat`` first, so a symbolic link, a FIFO, a
    device, a socket or a folder is refused without being opened (a FIFO would block the read forever); a regular
    file is opened ``O_NOFOLLOW | O_NONBLOCK`` and checked again on its descriptor (it may have been swapped)."""
    from spotwise.inputfiles import _kind

    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    except OSError as e:
        raise InputError(f"cannot access {path} ({e.strerror or e})", "choose another --out folder", "--out") from None
    move = "move it away or choose another --out folder; eject writes only regular files of its own"
    if stat.S_ISLNK(mode):
        raise InputError(f"{path} is a symbolic link; spotwise never writes through a link", move, "--out")
    if not stat.S_ISREG(mode):
        raise InputError(f"{path} is {'a folder' if stat.S_ISDIR(mode) else _kind(mode)}, not a file", move, "--out")
    ours = False
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
                     | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        fd = -1
    if fd >= 0:
        try:
            if stat.S_ISREG(os.fstat(fd).st_mode):
                ours = os.read(fd, len(MARK)) == MARK.encode()
        except OSError:
            ours = False
        finally:
            os.close(fd)
    if not force or not ours:
        raise InputError(f"{path} exists", "choose another --out folder" + ("" if not ours else
                         ", or pass --force to replace what spotwise eject wrote there"), "--out")


def _yaml_value(value: Any) -> Any:
    """A string eject writes into ``job.yaml`` double-quoted, where YAML escapes every character that could
    end it or be read as another value (a line break, U+0085/U+2028, ``#``, ``yes``); lists item by item."""
    from ruamel.yaml.scalarstring import DoubleQuotedScalarString

    if isinstance(value, list):
        from ruamel.yaml.comments import CommentedSeq

        seq = CommentedSeq([_yaml_value(v) for v in value])
        seq.fa.set_flow_style()
        return seq
    return DoubleQuotedScalarString(value) if isinstance(value, str) else value


def _as_script_job(doc: Any, spec: Any, src_dir: str, where: str, rt: bool) -> None:
    """Make the spec mapping ``doc`` the ejected job (module docstring): its paths relative to ``where``, its
    workload ``train.py``, a token target in samples.  ``rt``: ``doc`` is ruamel's round-trip mapping (its
    strings quoted, a comment added); else plain data, edited the same way -- what the written file must
    read back as."""
    from spotwise.planner.plan.planned_spec import PATH_FIELDS, _get, _rel

    value = _yaml_value if rt else (lambda v: v)
    w = spec.workload
    for keys in PATH_FIELDS:
        v = _get(doc, keys)
        if v is not None and keys != ("workload", "dataset"):
            _get(doc, keys[:-1])[keys[-1]] = value(_rel(list(v) if isinstance(v, list) else v, src_dir, where))
    old_w = doc.get("workload") or {}
    new_w = {"script": value("train.py"), "batch_size": int(w.batch_size) // int(w.accumulate)}
    for k in SPEC_FIELDS:
        if k in old_w:
            new_w[k] = old_w[k]
    new_w.setdefault("family", value(str(w.family)))  # the built-in's own (a script's default is mlp)
    doc["workload"] = new_w
    target = doc.get("target")
    if isinstance(target, dict) and target.get("tokens") is not None:  # a script declares no tokens per sample
        target.pop("tokens")
        target["samples"] = int(spec.target_samples())
        if rt:
            from spotwise.outputfiles import yaml_comment

            target.fa.set_block_style()  # a comment can follow a key only in block style
            note = yaml_comment([f"target.tokens {spec.target.tokens} in samples of {w.name}"]).rstrip("\n")
            target.yaml_add_eol_comment(note, "samples")


def _first_difference(got: Any, want: Any, at: str = "") -> str:
    """The first field path where two plain values differ ('' at the top)."""
    if isinstance(got, dict) and isinstance(want, dict):
        for k in list(want) + [k for k in got if k not in want]:
            if k not in got or k not in want or got[k] != want[k]:
                return _first_difference(got.get(k), want.get(k), f"{at}.{k}" if at else str(k))
    if isinstance(got, list) and isinstance(want, list) and len(got) == len(want):
        for i, (a, b) in enumerate(zip(got, want)):
            if a != b:
                return _first_difference(a, b, f"{at}[{i}]")
    return at or "the top level"


def _check_job_yaml(text: str, want: dict[str, Any]) -> None:
    """``job.yaml``'s text reads back (as every spec is read) as exactly the mapping ``want``; InputError otherwise."""
    from spotwise.safeparse import load_yaml

    got = load_yaml(text, "job.yaml", "ejected job")
    if got != want:
        raise InputError(f"the ejected job.yaml would not read back as the job: {_first_difference(got, want)} differs "
                         "(a value YAML reads another way)", "quote that value in your spec, or rename the file or "
                         "folder it names", "job.yaml")


def _check_train_py(data: bytes, header: str, values: Mapping[str, Any]) -> None:
    """``train.py``'s bytes compile as Python reads the file (its coding line honoured), the header adds no
    statement, and each of ``values`` is assigned exactly that literal; InputError otherwise."""
    try:
        if ast.parse(header.encode("utf-8")).body:
            raise SyntaxError("the header is not only comments")
        compile(data, "train.py", "exec", dont_inherit=True)
        tree = ast.parse(data)
    except (SyntaxError, ValueError) as e:
        raise InputError(f"the ejected train.py would not compile ({e})", "rename the spec file (a plain name such as "
                         "job.yaml)", "train.py") from None
    found = {t.id: node.value for node in tree.body if isinstance(node, ast.AnnAssign | ast.Assign)
             for t in (node.targets if isinstance(node, ast.Assign) else [node.target]) if isinstance(t, ast.Name)}
    for name, want in values.items():
        if name not in found or found[name] is None or ast.literal_eval(found[name]) != want:
            raise InputError(f"the ejected train.py would not hold the job's {name}", "use plain numbers, strings, "
                             "lists and mappings in the workload", "train.py")


def _source(spec_file: str | os.PathLike[str] | Mapping[str, Any]) -> tuple[Any, str, str, str]:
    """The job, its YAML text, the folder its relative paths are read against, and its name: a spec file's
    own text, or a mapping (the Python API's) written as YAML, its paths against the current folder."""
    from spotwise.config import load_spec, spec_from_dict
    from spotwise.inputfiles import read_input_text
    from spotwise.planner.plan.planned_spec import _abs

    if isinstance(spec_file, Mapping):
        from ruamel.yaml import YAML

        from spotwise.spec.input_paths import check_spec_files

        spec = spec_from_dict(dict(spec_file), "spec")
        check_spec_files(spec)  # its paths: the current folder's
        buf = io.StringIO()
        YAML(typ="rt").dump(dict(spec_file), buf)
        return spec, buf.getvalue(), _abs("."), "the spec mapping"
    src = Path(spec_file)
    spec = load_spec(src)
    return spec, read_input_text(src, "spec file", "pass a readable UTF-8 YAML file"), os.path.dirname(_abs(src)), src.name


def eject(spec_file: str | os.PathLike[str] | Mapping[str, Any], out: str | os.PathLike[str],
          force: bool = False) -> list[str]:
    """Write ``out/train.py`` and ``out/job.yaml`` for the job ``spec_file`` (a YAML file, or a spec
    mapping whose paths are the current folder's; module docstring); the paths written."""
    from ruamel.yaml import YAML

    from spotwise.config import load_spec
    from spotwise.outputfiles import python_comment, write_output_text, yaml_comment
    from spotwise.safeparse import load_yaml
    from spotwise.workloads.registry import make_workload

    spec, text, src_dir, src_name = _source(spec_file)
    raw = load_yaml(text, src_name, "spec file")
    _check_ejectable(spec, raw if isinstance(raw, dict) else {})
    out_dir = Path(out)
    if out_dir.is_symlink() or (out_dir.exists() and not out_dir.is_dir()):
        raise InputError(f"{out_dir} is not a folder", "give --out a folder (it is created)", "--out")
    train_py, job_yaml = out_dir / "train.py", out_dir / "job.yaml"
    _writable(train_py, force)  # before the workload is built: a refusal as early as it is known
    _writable(job_yaml, force)
    from spotwise.spec.resolve import resolve_epochs

    wl = make_workload(spec.workload, spec.seed)
    resolve_epochs(spec, len(wl.train))  # target.epochs / tokens in samples: the schedule's length
    if wl.sparse_grads:
        raise InputError(f"workload {spec.workload.name} has sparse gradients (embedding tables), which DDP's buckets "
                         "do not reduce", "keep running this spec as it is (the built-in step takes sparse gradients)",
                         "workload.name")
    where = os.path.abspath(out_dir)
    # train.py: the loop, with the job's workload, seed and import folder as literals
    w = spec.workload
    loop = Path(__file__).resolve().parent.parent / "elastic" / "workload_loop.py"
    source = loop.read_text(encoding="utf-8")
    literals = {"WORKLOAD": _workload_mapping(spec, where), "SEED": int(spec.seed), "PATHS": _module_folder(w.name, where)}
    values = {"WORKLOAD: dict[str, Any] | None = None": f"WORKLOAD: dict[str, Any] | None = {_literal(literals['WORKLOAD'])}",
              "SEED = 0": f"SEED = {_literal(literals['SEED'])}",
              "PATHS: list[str] = []": f"PATHS: list[str] = {_literal(literals['PATHS'])}"}
    for old, new in values.items():
        if source.count(f"\n{old}\n") != 1:  # pragma: no cover - the loop module's own lines
            raise RuntimeError(f"spotwise/elastic/workload_loop.py lost its line {old!r}")
        source = source.replace(f"\n{old}\n", f"\n{new}\n")
    # the header: the mark, the encoding (Python reads a coding line only in the first two), then the names,
    # every character that could end a comment escaped
    header = python_comment([MARK[2:] + ": the workload's loop on spotwise.elastic; yours to change",
                             "-*- coding: utf-8 -*-", f"from {src_name}: its workload {w.name!r}"])
    train_bytes = (header + source).encode("utf-8")
    _check_train_py(train_bytes, header, literals)
    # job.yaml: the user's file, paths relative to the new folder, the workload now the script
    yaml = YAML(typ="rt")
    yaml.width = 100
    yaml.preserve_quotes = True
    doc = yaml.load(text)
    _as_script_job(doc, spec, src_dir, where, rt=True)
    want = copy.deepcopy(raw)
    _as_script_job(want, spec, src_dir, where, rt=False)
    buf = io.StringIO()
    yaml.dump(doc, buf)
    job_text = yaml_comment([f"{MARK[2:]} from {src_name}: the same job, its workload now train.py (the recipe is "
                             "the script's)"]) + buf.getvalue()  # one line, whatever the name holds
    _check_job_yaml(job_text, want)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InputError(f"cannot create the folder {out_dir} ({e.strerror or e})", "give --out a folder you can "
                         "create", "--out") from None
    from spotwise.outputfiles import write_output_bytes

    write_output_bytes(train_py, train_bytes, "--out")
    write_output_text(job_yaml, job_text, "--out")
    resolve_epochs(load_spec(job_yaml), len(wl.train))  # what we wrote loads, from where it is, and has a length
    return [str(train_py), str(job_yaml)]


__all__ = ["eject"]
