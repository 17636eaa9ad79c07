"""``workload.script``: the user's own training script as a job's workload (issue 41, spotwise.elastic)."""

from __future__ import annotations

from typing import Any

from spotwise.errors import InputError


def check_script_workload(w: Any) -> None:
    """``workload.script`` (issue 41): a .py file, with string args, and no recipe of spotwise's own (the
    script has its own); ``name`` becomes ``script``."""
    if not isinstance(w.script, str) or not w.script.strip():
        raise InputError(f"must be the path of a Python file, got {w.script!r}", "e.g. script: train.py", "script")
    if not w.script.endswith(".py"):
        raise InputError(f"{w.script!r} is not a .py file", "name your training script, e.g. script: train.py",
                         "script")
    if w.name not in ("", "script"):
        raise InputError(f"workload.name {w.name!r} and workload.script both say what to train",
                         "keep one: a script trains with its own loop (remove name)", "name")
    w.name = "script"
    if not isinstance(w.args, list) or not all(isinstance(a, (str, int, float)) and not isinstance(a, bool)
                                                  for a in w.args):
        raise InputError(f"must be a list of strings, got {w.args!r}", "e.g. args: [--compile, 'false']", "args")
    w.args = [str(a) for a in w.args]
    if w.optimizer is not None or w.schedule is not None or w.grad_clip_norm is not None \
            or w.accumulate != 1 or w.precision != "fp32":
        raise InputError("a script's recipe is its own: workload.optimizer, schedule, grad_clip_norm, accumulate "
                         "and precision do not apply to it", "set them in your script (its optimizer, its "
                         "learning rate as a function of job.samples, clip_grad_norm_, autocast) and remove them "
                         "from the spec", "script")
