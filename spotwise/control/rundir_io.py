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
from spotwise.usercode import check_resume_trust

#: the file in a run directory that holds the job spec the run was started with
SPEC_FILE = "spec.json"


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


def load_resume_spec(out_dir: str | Path, given: JobSpec | None = None, trust_code: bool = False) -> JobSpec:
    """:func:`load_run_spec`, checked before a resume imports the user code it names
    (:func:`spotwise.usercode.check_resume_trust`): the user's own spec ``given`` must name the same
    workload / optimizer / policy references and the same ``workload.dataset``, or ``trust_code`` must be
    set; InputError otherwise."""
    recorded = load_run_spec(out_dir)
    check_resume_trust(recorded, given, trust_code, str(Path(out_dir) / SPEC_FILE))
    if given is not None:
        check_resume_unchanged(recorded, given, str(Path(out_dir) / SPEC_FILE))
    return recorded


def _flat(d: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(d, dict) and d:
        out: dict[str, Any] = {}
        for k, v in d.items():
            out.update(_flat(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: d}


def check_resume_unchanged(recorded: JobSpec, given: JobSpec, where: str) -> None:
    """A resume continues the run as its ``spec.json`` recorded it: a spec passed with ``--resume``
    that differs from it (a lowered learning rate, more iterations) would be ignored silently, so
    it is refused, naming every field that differs (issue 41 item 5; applying such changes from the
    resumed step is not built yet)."""
    mine, theirs = _flat(recorded.to_dict()), _flat(given.to_dict())
    diff = sorted(k for k in set(mine) | set(theirs) if mine.get(k, "<absent>") != theirs.get(k, "<absent>"))
    if not diff:
        return

    def shown(v: Any) -> str:
        text = json.dumps(v) if v != "<absent>" else "absent"
        return text if len(text) <= 40 else text[:37] + "..."

    listed = "; ".join(f"{k}: {shown(mine.get(k, '<absent>'))} in the run, {shown(theirs.get(k, '<absent>'))} in "
                       f"your spec" for k in diff[:6]) + (f"; and {len(diff) - 6} more" if len(diff) > 6 else "")
    raise InputError(f"your spec differs from the one the run was started with ({listed}); a resume continues the run "
                     "as recorded and cannot apply changes",
                     "resume without a spec (spotwise run --resume DIR) or with the spec you started it with; to train "
                     "with the changed settings start a new run with --out", where)


def has_checkpoint(out_dir: str | Path) -> bool:
    return load_latest_checkpoint(out_dir) is not None
