"""``spotwise eject SPEC --out DIR`` (issue 41 item 2): the command-line face of :func:`spotwise.spec.eject.eject`."""

from __future__ import annotations

from pathlib import Path

import typer


def eject_command(
    spec: Path = typer.Argument(..., help="Job spec (YAML) of a built-in or module:function workload."),
    out: Path = typer.Option(..., "--out", help="Folder to write train.py and job.yaml into (created)."),
    force: bool = typer.Option(False, "--force", help="Replace a train.py / job.yaml that spotwise eject wrote there."),
) -> None:
    """Write the job's training as your own script on spotwise.elastic (DIR/train.py, the same steps) and the
    spec that runs it (DIR/job.yaml): start a GAN, a teacher or an EMA from what ran."""
    import shlex

    from spotwise.reports.terminal_text import clean
    from spotwise.spec.eject import eject

    train_py, job_yaml = eject(spec, out, force=force)
    def q(path: Path) -> str:  # a command to copy: a blank or a quote stays one word, a control character is shown escaped
        return clean(shlex.quote(str(path)))

    print(f"wrote {clean(train_py)} (the workload's loop on spotwise.elastic: yours to change)\n"
          f"wrote {clean(job_yaml)} (the same job, its workload now train.py)\n"
          f"run it:        spotwise run {q(job_yaml)} --out run\n"
          f"or on its own: python {q(train_py)} --epochs 1")
