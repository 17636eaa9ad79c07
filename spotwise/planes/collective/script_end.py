"""The coordinator's side of a training script that is over (issue 41; :mod:`spotwise.elastic.host`).

A member whose script returned, raised or misused the API sends a ``script`` record
(:func:`~spotwise.planes.collective.script_member.report_script_end`); once the steps before it are
logged, :func:`end_script` ends the run: completed when the script returned, else the last
committed step is checkpointed and the run exits 2 with the script's own words (its traceback).
"""

from __future__ import annotations

from typing import Any

from spotwise.control.sampler import EpochSampler
from spotwise.errors import InputError


def end_script(job: Any, copy: Any, cursor: Any, rec: dict[str, Any]) -> None:
    """End the run for the script's ``rec`` (module docstring); ``copy`` fetches the last step's replica."""
    kind, why = str(rec["script"]), str(rec.get("why", ""))
    job.log.emit("script", outcome=kind, why=why[-2000:], member=rec.get("member"))
    if kind == "ended":
        job.status = "completed"
        return
    if copy.replicas.step == job.step or copy.fetch(job.step, lambda: False):
        job.sampler = EpochSampler.from_state(cursor.sampler_state())
        job.checkpointer.take("script-error")
    job.status = "script-error"
    script = job.spec.workload.script
    if kind == "usage":
        raise InputError(f"your training script {script} (member {rec.get('member')}, step {job.step + 1}): {why}",
                         "see docs/own-loop.md for the spotwise.elastic API; the run is resumable from its last "
                         f"committed step {job.step} (spotwise run --resume)", "workload.script")
    raise InputError(f"your training script {script} raised in step {job.step + 1} (member {rec.get('member')}):\n"
                     f"{why}", f"fix the script; the run keeps its last committed step {job.step} "
                     "(spotwise run SPEC --resume DIR continues from it)", "workload.script")
