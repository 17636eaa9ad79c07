"""What a resumed run may import, run, install or read of what its recorded ``spec.json`` names.

A run directory may come from someone else: its ``spec.json`` is untrusted input (issue 30 item 1).
Before a resume builds anything, every value of the recorded spec that names code or data a run
would use is found by **one walk** over the spec's plain form (:meth:`JobSpec.to_dict`, what
``spec.json`` holds), keyed by its field path (:func:`code_references`):

* every string -- anywhere, at any depth, in lists and as a mapping's key -- that reads as a code
  reference, ``package.module:Name`` (:func:`spotwise.usercode.is_code_reference`): a workload, an
  optimizer (one, or each entry of a list), a policy, and whatever field names code later, without a
  list of those fields to forget one in (issue 54 item 1).  The text fields that spotwise checks as
  names or places and never imports (:data:`NOT_CODE`) are skipped, so a job called ``team:run`` still
  resumes; a value with a colon that is no reference (``V100:1``, ``s3://bucket``, ``10:30:00``) is
  none;
* the fields that name code or data by a path or a list, not by that syntax (:data:`PATH_FIELDS`):
  the training script and its arguments, the pip packages and requirements file the nodes install
  (installing runs code), and the dataset a resume reads.

:func:`check_resume_trust` then lets the resume go on only when the user passed their own spec
naming the same values, field by field (fields a resume may change -- the packages -- are the
user's spec's from then on, so they need not match), or ``--trust-code``; otherwise InputError
(exit 2) naming every such field and how to go on.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from typing import Any, Protocol

from spotwise.errors import InputError
from spotwise.usercode import is_code_reference

#: fields that name code or data by a path or a list of words (not ``module:Name``), and how their
#: values compare: ``path`` (absolute, ``~`` expanded, normalised) or ``list`` (the whole list)
PATH_FIELDS: dict[str, str] = {"workload.script": "path", "workload.args": "list", "workload.packages": "list",
                               "workload.requirements": "path", "workload.dataset": "path"}
#: of those, the ones a resume reads (by spotwise's own readers) rather than imports, runs or installs
READ_ONLY_FIELDS = frozenset({"workload.dataset"})
#: text fields spotwise validates as names, places or times and never imports: a value there that
#: happens to read ``a:b`` is not code (``[*]``: any list index)
NOT_CODE = frozenset({
    "name", "workload.family", "cluster.instance_type", "cluster.coordinator_instance", "cluster.accelerators",
    "cluster.region", "cluster.functions", "cluster.redis_instance", "cluster.pools[*].name",
    "cluster.pools[*].instance_type", "cluster.pools[*].region", "cluster.pools[*].zone",
    "cluster.pools[*].market.start", "market.start", "outputs.dir", "outputs.uri",
})
_INDEX = re.compile(r"\[\d+\]")
#: how many fields one message lists
_LISTED = 6


class HasPlainForm(Protocol):
    """What :func:`code_references` reads of a job spec (a :class:`spotwise.config.JobSpec`): its plain form."""

    def to_dict(self) -> dict[str, Any]: ...


def code_references(job: HasPlainForm | dict[str, Any]) -> dict[str, str]:
    """Every value of ``job`` (a spec, or its plain form) that names code or data a run would import, run,
    install or read, by field path (``workload.optimizer[1].name``, ``policies[0].name``,
    ``workload.script``), each as one comparable string (module docstring)."""
    plain = job if isinstance(job, dict) else job.to_dict()
    refs: dict[str, str] = {}
    for key, kind in PATH_FIELDS.items():
        value = _at(plain, key)
        if value is None or value == "" or value == []:
            continue
        if kind == "path":
            refs[key] = os.path.normpath(os.path.abspath(os.path.expanduser(str(value))))
        else:
            refs[key] = json.dumps(value if isinstance(value, list) else [value], ensure_ascii=True)
    _walk(plain, "", refs)
    return refs


def _at(plain: Any, key: str) -> Any:
    node = plain
    for part in key.split("."):
        if not isinstance(node, dict):
            return None
        node = node.get(part)
    return node


def _walk(node: Any, path: str, refs: dict[str, str]) -> None:
    """Every string under ``node`` that reads as a code reference, into ``refs`` by its path."""
    pattern = _INDEX.sub("[*]", path)
    if pattern in PATH_FIELDS or pattern in NOT_CODE:
        return
    if isinstance(node, str):
        if is_code_reference(node):
            refs[path] = node.strip()
    elif isinstance(node, dict):
        for k, v in node.items():
            sub = f"{path}.{k}" if path else str(k)
            if is_code_reference(k):  # a mapping's key names code too, should a field ever read it
                refs[f"{sub} (a key)"] = str(k).strip()
            _walk(v, sub, refs)
    elif isinstance(node, (list, tuple)):
        for i, v in enumerate(node):
            _walk(v, f"{path}[{i}]", refs)


def _shown(value: str) -> str:
    return value if is_code_reference(value) else repr(value)


def check_resume_trust(recorded: HasPlainForm, given: HasPlainForm | None, trust_code: bool, where: str,
                       may_change: Callable[[str], bool] = lambda key: False) -> None:
    """May a resume use the code and data the run's recorded spec names (:func:`code_references`)?

    ``given`` (the spec the user passed): every field must name the same, except those ``may_change``
    says a resume takes from ``given`` (what then runs is the user's own).  Without ``given``:
    nothing must be named, or ``trust_code`` set.  :class:`~spotwise.errors.InputError` (exit 2)
    otherwise, before anything is imported, run, installed or read.
    """
    refs = code_references(recorded)
    if given is not None:
        theirs = code_references(given)
        plain = recorded.to_dict()

        def shown(found: dict[str, str], key: str, job: dict[str, Any]) -> str:
            if key in found:
                return repr(found[key])
            return f"{_at(job, key)!r} (built in)" if key == "workload.name" else "absent"

        for key in sorted(set(refs) | set(theirs)):
            if refs.get(key) != theirs.get(key) and not may_change(_INDEX.sub("", key)):
                raise InputError(
                    f"the run's spec.json does not match the spec you passed: {key} is {shown(refs, key, plain)} in the "
                    f"run directory but {shown(theirs, key, given.to_dict())} in your spec",
                    "pass the spec the run was started with, or start a new run with --out", where)
        return
    if not refs or trust_code:
        return
    code = {k: v for k, v in refs.items() if k not in READ_ONLY_FIELDS}
    data = {k: v for k, v in refs.items() if k in READ_ONLY_FIELDS}
    read = " and ".join(f"the dataset {v!r}" for v in data.values())
    if code:
        items = [f"{k}={_shown(v)}" for k, v in code.items()]
        names = ", ".join(items[:_LISTED]) + (f", and {len(items) - _LISTED} more" if len(items) > _LISTED else "")
        what = (f"the run's spec.json names user code ({names}); resuming would import, run or install it"
                + (f", and read {read}" if read else ""))
    else:
        what = f"the run's spec.json names {read}; resuming would read it"
    raise InputError(what, "pass the spec you started the run with (spotwise run SPEC --resume DIR) so spotwise can check "
                     "it, or --trust-code if you trust whoever wrote this run directory", where)
