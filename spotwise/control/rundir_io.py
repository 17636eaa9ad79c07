"""What a run directory already holds, read back for ``--resume``: its spec and whether it has a checkpoint.

The directory itself (marker, lock, safe removal) is :mod:`spotwise.rundir`'s; the checkpoints'
format is :mod:`spotwise.control.checkpoint`'s.
"""

from __future__ import annotations

import json
import os
from typing import Any
from pathlib import Path

from spotwise.config import JobSpec, spec_from_dict
from spotwise.errors import InputError
from spotwise.safeparse import loads_json
from spotwise.control.checkpoint import load_latest_checkpoint
from spotwise.rundir_files import read_run_file
from spotwise.rundir_names import SPEC_FILE  # noqa: F401 (re-exported: the file of the job spec the run was started with)
from spotwise.spec.trust import check_resume_trust



def load_run_spec(out_dir: str | Path) -> JobSpec:
    """The spec a run directory was started with (for ``--resume``).

    InputError (exit 2) when ``spec.json`` is missing, unreadable, not UTF-8 (binary), not JSON
    (truncated), not one object, or not a valid job spec -- naming the file and how to fix it.
    """
    path = Path(out_dir) / SPEC_FILE
    if not os.path.lexists(path):  # a dangling link is named by the reader below, not called missing
        raise InputError("not a spotwise run directory (no spec.json)", "pass the --out directory of an earlier `spotwise run`",
                         str(out_dir))
    fix = "restore spec.json from a backup, or start the run again with `spotwise run SPEC --out DIR`"
    raw = read_run_file(out_dir, SPEC_FILE)  # a regular file inside the run directory, size-capped (never /dev/zero, a FIFO)
    try:
        data = loads_json(raw.decode("utf-8"), str(path), "spec.json")  # InputError for a nesting bomb
    except UnicodeDecodeError:
        raise InputError("spec.json is not UTF-8 text (binary or corrupted)", fix, str(path)) from None
    except ValueError as e:  # JSONDecodeError: truncated or not JSON
        raise InputError(f"spec.json is not valid JSON (truncated or corrupted: {e})", fix, str(path)) from None
    if not isinstance(data, dict):
        raise InputError("spec.json must hold one JSON object (the job spec)", fix, str(path))
    try:
        return spec_from_dict(data, str(path))
    except InputError:
        raise
    except (TypeError, ValueError, KeyError, AttributeError) as e:  # a hand-edited spec of the wrong shape
        raise InputError(f"spec.json is not a valid job spec ({e.__class__.__name__}: {e})", fix, str(path)) from None


def load_resume_spec(out_dir: str | Path, given: JobSpec | None = None, trust_code: bool = False,
                     allow_changes: bool = False) -> JobSpec:
    """:func:`load_run_spec`, checked before a resume imports, runs, installs or reads what it names
    (:func:`spotwise.spec.trust.check_resume_trust`): the user's own spec ``given`` must name the same
    code references (workload, optimizers, policies, anything ``module:Name``), script and arguments,
    and ``workload.dataset`` (``workload.packages`` / ``requirements`` a resume takes from ``given``), or
    ``trust_code`` must be set; InputError otherwise.  ``allow_changes`` (``--allow-changes``): the
    user says a resume may also change :data:`RESUME_WITH_CONSENT` (a script's own arguments)."""
    recorded = load_run_spec(out_dir)
    where = str(Path(out_dir) / SPEC_FILE)
    if given is not None and not allow_changes:
        _refuse_args_without_consent(recorded, given, where)  # its message names the flag that allows it
    may_change = _changeable_with_consent if allow_changes else _changeable
    check_resume_trust(recorded, given, trust_code, where, may_change=may_change)
    if given is not None and check_resume_changes(recorded, given, where, allow_changes):
        return given  # changes a resume applies (the controller logs and applies them when it restores)
    return recorded


def _flat(d: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(d, dict) and d:
        out: dict[str, Any] = {}
        for k, v in d.items():
            out.update(_flat(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: d}


#: fields a resume may change (issue 41 item 5), each applied from the resumed step: the learning
#: rate (the run's current rate, policies' scaling included, is rescaled by new / old), the schedule
#: and clipping (pure functions of the committed samples / the step), the job's length and targets
#: (a finished run can be extended), money and time limits, and how often the run evaluates,
#: checkpoints and offers replicas; what the nodes install (``workload.packages``, ``requirements``).
#: A prefix ends with ".": every field under it.
RESUME_CHANGEABLE = ("workload.lr", "workload.schedule.", "workload.grad_clip_norm", "workload.eval_every",
                     "target.", "budget_usd", "deadline", "outputs.checkpoint_every", "outputs.plots",
                     "cluster.replica_every", "cluster.replica_budget", "name", "workload.packages",
                     "workload.requirements")


#: fields a resume changes only when the user says so (``--allow-changes``, issue 55 item 7): a training
#: script's own arguments -- spotwise cannot tell which of them change the model or the data (those make
#: the restore fail) and which only the rest of the run (a learning rate, an eval interval)
RESUME_WITH_CONSENT = ("workload.args",)


def _matches(field: str, prefixes: tuple[str, ...]) -> bool:
    return any(field == p.rstrip(".") or field.startswith(p if p.endswith(".") else p + ".") for p in prefixes)


def _changeable(field: str) -> bool:
    return _matches(field, RESUME_CHANGEABLE)


def _changeable_with_consent(field: str) -> bool:
    return _matches(field, RESUME_CHANGEABLE + RESUME_WITH_CONSENT)


def spec_changes(recorded: JobSpec, given: JobSpec) -> dict[str, tuple[Any, Any]]:
    """Every field whose value differs between the two specs: ``{"workload.lr": (old, new)}``."""
    mine, theirs = _flat(recorded.to_dict()), _flat(given.to_dict())
    return {k: (mine.get(k), theirs.get(k)) for k in sorted(set(mine) | set(theirs))
            if mine.get(k, "<absent>") != theirs.get(k, "<absent>")}


def check_resume_changes(recorded: JobSpec, given: JobSpec, where: str,
                         allow_changes: bool = False) -> dict[str, tuple[Any, Any]]:
    """The changes a spec passed with ``--resume`` makes to the run's recorded one (issue 41 item 5):
    those a resume applies from the resumed step (:data:`RESUME_CHANGEABLE`) are returned; any other
    (the model, the batch size, the data order, the cluster) exits 2 naming every such field."""
    changes = spec_changes(recorded, given)
    may_change = _changeable_with_consent if allow_changes else _changeable
    fixed = [k for k in changes if not may_change(k)]
    if not fixed:
        return changes
    _refuse_args_without_consent(recorded, given, where, changes)

    def shown(v: Any) -> str:
        text = json.dumps(v) if v is not None else "absent"
        return text if len(text) <= 40 else text[:37] + "..."

    listed = "; ".join(f"{k}: {shown(changes[k][0])} in the run, {shown(changes[k][1])} in your spec"
                       for k in fixed[:6]) + (f"; and {len(fixed) - 6} more" if len(fixed) > 6 else "")
    raise InputError(f"your spec changes what a resumed run cannot change ({listed}): the checkpoint holds a model, "
                     "optimizer state and data position made with the recorded values",
                     "resume with the recorded values of these fields (a resume may change the learning rate, "
                     "workload.schedule, workload.grad_clip_norm, workload.eval_every, target.*, budget_usd, deadline, "
                     "outputs.checkpoint_every/plots and cluster.replica_every); to train with the other changes start a "
                     "new run with --out", where)


def _refuse_args_without_consent(recorded: JobSpec, given: JobSpec, where: str,
                                 changes: dict[str, tuple[Any, Any]] | None = None) -> None:
    """A resume whose only change a resume may not make by itself is the script's arguments: exit 2 naming
    ``--allow-changes`` (any other fixed change is refused by the trust and change checks, naming it)."""
    changes = spec_changes(recorded, given) if changes is None else changes
    fixed = [k for k in changes if not _changeable(k)]
    if fixed and all(_matches(k, RESUME_WITH_CONSENT) for k in fixed):
        k = fixed[0]
        raise InputError(f"your spec changes the training script's arguments on resume ({k}: "
                         f"{json.dumps(changes[k][0])} in the run, {json.dumps(changes[k][1])} in yours)",
                         "pass --allow-changes to resume with the new arguments (they apply from the resumed step; an "
                         "argument that changes the model or the data makes the restore fail), or resume with the "
                         "recorded ones", where)


def has_checkpoint(out_dir: str | Path) -> bool:
    return load_latest_checkpoint(out_dir) is not None
