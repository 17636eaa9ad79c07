"""``spotwise launch SPEC train.py -- ARGS``: a job spec that says where and how long, and the training
script named on the command line (issue 41 item 2).

The spec keeps everything but the script: the cluster, the market, the target, ``workload.batch_size``
and ``outputs``.  The script given here becomes ``workload.script`` (its path relative to the current
folder, as a command line's paths are) and the arguments after ``--`` its ``workload.args`` (they
replace any the spec gives).  A spec that already says what to train -- a built-in or
``module:function`` in ``workload.name``, or another ``workload.script`` -- is refused: one job, one
thing to train.  The result is an ordinary :class:`~spotwise.config.JobSpec`, so ``run``'s checks,
resume and ``spec.json`` are the same as for a spec naming the script itself.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any, Mapping, Sequence

from spotwise.errors import InputError


def _script_path(script: str | os.PathLike[str]) -> str:
    if not isinstance(script, (str, os.PathLike)) or not str(script).strip():
        raise InputError(f"must be the path of a Python file, got {script!r}", "e.g. spotwise launch job.yaml train.py",
                         "script")
    p = Path(script).expanduser()
    if not str(p).endswith(".py"):
        raise InputError(f"{str(script)!r} is not a .py file", "name your training script, e.g. train.py", "script")
    if not p.is_file():
        raise InputError(f"training script {str(script)!r} not found", "give its path relative to the current folder",
                         "script")
    return str(p.resolve())


def with_script(data: Mapping[str, Any], script: str | os.PathLike[str], args: Sequence[str] | None,
                source: str = "spec", restart: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A copy of the spec mapping ``data`` whose workload is ``script`` with ``args`` (None: the spec's own
    ``workload.args``, if any); ``restart`` (``--restart``): restart mode's settings over the spec's
    ``workload.restart`` (:mod:`spotwise.spec.restart_mode`).  InputError when the spec already names
    something else to train."""
    path = _script_path(script)
    if args is not None and (isinstance(args, (str, bytes)) or not all(isinstance(a, str) for a in args)):
        raise InputError(f"the script's arguments must be a list of strings, got {args!r}",
                         "e.g. ['--lr', '3e-4']", "args")
    out = copy.deepcopy(dict(data))
    w = out.get("workload")
    if w is None:
        w = {}
    if not isinstance(w, dict):
        raise InputError(f"workload must be a mapping, got {type(w).__name__}", "e.g. workload: {batch_size: 64}",
                         f"{source}: workload")
    w = dict(w)
    given = w.get("script")
    if given is not None and isinstance(given, str) and given.strip():
        base = Path(source).parent if source != "spec" else Path.cwd()
        q = Path(given).expanduser()
        if str((q if q.is_absolute() else base / q).resolve()) != path:
            raise InputError(f"the spec trains workload.script {given!r} and the command line {str(script)!r}",
                             "remove workload.script from the spec (launch names the script), or use "
                             "`spotwise run SPEC`", f"{source}: workload.script")
    name = w.get("name")
    if name not in (None, "", "script"):
        raise InputError(f"the spec trains workload.name {name!r}; launch trains {str(script)!r}",
                         "remove workload.name from the spec (keep batch_size, the target and the cluster), or run "
                         "the spec as it is with `spotwise run SPEC`", f"{source}: workload.name")
    w.pop("name", None)
    w["script"] = path
    if args is not None:
        w["args"] = list(args)
    if restart is not None:
        given_restart = w.get("restart")
        w["restart"] = {**(given_restart if isinstance(given_restart, dict) else {}), **dict(restart)}
    out["workload"] = w
    return out


def launch_spec(spec: str | os.PathLike[str] | Mapping[str, Any], script: str | os.PathLike[str],
                args: Sequence[str] | None = None, restart: Mapping[str, Any] | None = None) -> Any:
    """The :class:`~spotwise.config.JobSpec` of ``spotwise launch``: ``spec`` (a YAML file, its other
    relative paths against its folder, or a mapping) training ``script`` with ``args`` (in restart mode
    with ``restart``'s settings: ``{}`` for the defaults)."""
    from spotwise.config import load_spec, read_spec_file, spec_from_dict

    if isinstance(spec, Mapping):
        from spotwise.spec.input_paths import check_spec_files

        job = spec_from_dict(with_script(spec, script, args, restart=restart), "spec")
        check_spec_files(job)  # the script and every other file the mapping names (its paths: this folder's)
        return job
    if not isinstance(spec, (str, os.PathLike)):
        raise InputError(f"cannot make a job spec of {type(spec).__name__}", "pass the spec's YAML path or a dict",
                         "spec")
    return load_spec(spec, with_script(read_spec_file(spec), script, args, str(spec), restart))


__all__ = ["launch_spec", "with_script"]
