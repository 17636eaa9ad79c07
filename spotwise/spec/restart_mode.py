"""``workload.restart``: restart mode -- an unmodified torchrun script, stopped and started again at every
membership change (issue 55 item 6; :mod:`spotwise.planes.restart`).

In place (the default) a script trains through :mod:`spotwise.elastic` and survives revocations without
a restart.  Restart mode is for a script that knows nothing of spotwise: it runs as ``torchrun`` would
run it (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``/``MASTER_PORT``: its own
``init_process_group()`` and ``DDP(...)`` work unchanged); at a membership change every rank is sent
SIGTERM (``grace_s`` seconds to save and leave, then SIGKILL) and the script is started again on the new
members with the new ``WORLD_SIZE``, resuming from its own checkpoint.  Where it checkpoints is a folder
spotwise names inside the run directory (:data:`SCRIPT_CHECKPOINTS`): ``$SPOTWISE_CHECKPOINT_DIR`` in its
environment and ``{checkpoint_dir}`` in its arguments.  ``resume_args`` are added to its arguments when
it is started again after a checkpoint (nanoGPT: ``--init_from=resume``).  The steps it redoes (those
after its newest checkpoint) are lost work, counted in the ledger and the report.

:func:`check_restart_job` refuses, at load, what restart mode cannot run: no script, a target that is
not ``target.iterations`` (the script's own optimizer steps are what spotwise counts), a sync mode other
than S-SGD, and a script that never saves a checkpoint (every revocation would restart it from step 0).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from spotwise.errors import InputError
from spotwise.rundir_names import SCRIPT_CHECKPOINTS  # the run directory's folder the script checkpoints into

#: the token in ``workload.args`` / ``restart.resume_args`` that becomes that folder's path
CHECKPOINT_TOKEN = "{checkpoint_dir}"
#: calls and names by which a script saves its state (a script without any never checkpoints)
_SAVES = re.compile(r"\b(?:torch\.save|save_pretrained|save_state|save_model|save_checkpoint|dcp\.save|"
                    r"checkpoint\.save|save_file|Trainer|save_steps|save_strategy|\w*save\w*\s*\()")


@dataclass
class RestartSpec:
    """Restart mode's settings (module docstring)."""

    #: arguments added to the script's when it is started again after it saved a checkpoint
    resume_args: list[str] = field(default_factory=list)
    #: wall seconds a stopped script has after SIGTERM (to save) before it is killed
    grace_s: float = 30.0

    def __post_init__(self) -> None:
        if not isinstance(self.resume_args, list) or not all(
                isinstance(a, (str, int, float)) and not isinstance(a, bool) for a in self.resume_args):
            raise InputError(f"must be a list of strings, got {self.resume_args!r}",
                             "e.g. resume_args: ['--init_from=resume']", "workload.restart.resume_args")
        self.resume_args = [str(a) for a in self.resume_args]
        if isinstance(self.grace_s, bool) or not isinstance(self.grace_s, (int, float)) \
                or not (math.isfinite(self.grace_s) and 0 < self.grace_s <= 3600):
            raise InputError(f"must be in (0, 3600] seconds, got {self.grace_s!r}",
                             "the seconds a script has to save after SIGTERM, e.g. 30",
                             "workload.restart.grace_s")
        self.grace_s = float(self.grace_s)


def substitute(args: list[str], checkpoint_dir: str) -> list[str]:
    """``args`` with :data:`CHECKPOINT_TOKEN` replaced by ``checkpoint_dir``."""
    return [a.replace(CHECKPOINT_TOKEN, checkpoint_dir) for a in args]


def script_saves(source: str) -> bool:
    """Whether a script's source saves anything (a call whose name says save, a HF ``Trainer``)."""
    code = "\n".join(line.split("#", 1)[0] for line in source.splitlines())  # comments do not save
    return bool(_SAVES.search(code))


def check_restart_job(job: Any) -> None:
    """Restart mode's refusals at load (module docstring); nothing when ``workload.restart`` is unset."""
    w = job.workload
    if w.restart is None:
        return
    where = "workload.restart"
    if w.script is None:
        raise InputError("restart mode runs a training script", "set workload.script (or use `spotwise launch SPEC "
                         "train.py --restart`)", where)
    t = job.target
    if t.iterations is None or any(getattr(t, k, None) is not None for k in ("samples", "epochs", "tokens")):
        raise InputError("restart mode counts the script's optimizer steps: it needs target.iterations (and no "
                         "target.samples / epochs / tokens)",
                         "set target.iterations to the steps to train (at most the script's own), e.g. 200", "target")
    c = job.cluster
    if c.sync not in ("full", "ssgd"):
        raise InputError(f"restart mode runs the script's own DDP step, not sync {c.sync!r}",
                         "remove cluster.sync (or set it to ssgd)", "cluster.sync")
    if c.data_plane == "ps":
        raise InputError("restart mode runs the script's ranks as torchrun would, not on a parameter server",
                         "remove cluster.data_plane (or set it to collective)", "cluster.data_plane")


def check_script_checkpoints(script: str, args: list[str]) -> None:
    """Refuse a script that never saves (read statically, before anything starts): in restart mode
    each revocation would restart it from step 0, losing everything it trained."""
    try:
        with open(script, encoding="utf-8", errors="replace") as f:
            source = f.read(4_000_000)
    except OSError as e:
        raise InputError(f"cannot read the training script {script}: {e}", "give a readable .py file",
                         "workload.script") from e
    if not script_saves(source):
        raise InputError(f"{script} never saves a checkpoint (no torch.save, save_pretrained, Trainer or other save "
                         "call in it): in restart mode every membership change restarts it from step 0, losing "
                         "every step it trained",
                         "make the script save its state into $SPOTWISE_CHECKPOINT_DIR (or a folder given as "
                         f"{CHECKPOINT_TOKEN} in its arguments) and resume from it (restart.resume_args), or run it "
                         "in place without --restart (docs/own-loop.md)", "workload.script")


__all__ = ["CHECKPOINT_TOKEN", "RestartSpec", "SCRIPT_CHECKPOINTS", "check_restart_job", "check_script_checkpoints",
           "script_saves", "substitute"]
