"""What ``--help`` shows besides the options (issue 29): ``-h`` as ``--help`` everywhere, and one example
command line under every command (the ``epilog``); :mod:`spotwise.cli` passes these to typer."""

from __future__ import annotations

from typing import Any

#: ``-h`` works as ``--help`` on the root and, through click's context inheritance, on every sub-command
CONTEXT_SETTINGS: dict[str, Any] = {"help_option_names": ["-h", "--help"]}

#: one example per command, keyed by its path below ``spotwise``
EXAMPLES: dict[str, str] = {
    "": "spotwise plan examples/demo.yaml --trace traces/aws",
    "traces": "spotwise traces show traces/aws --plot prices.png",
    "traces show": "spotwise traces show traces/aws --plot prices.png",
    "demo": "spotwise demo --out spotwise-demo",
    "plan": "spotwise plan job.yaml --trace traces/aws --write-spec planned.yaml",
    "run": "spotwise run job.yaml --out runs/job1",
    "launch": "spotwise launch job.yaml train.py --out runs/job1 -- --lr 3e-4",
    "simulate": "spotwise simulate job.yaml --out runs/job1-sim",
    "report": "spotwise report runs/job1 runs/job1-sim --out compare.html",
    "runs": "spotwise runs runs/",
    "status": "spotwise status runs/job1 --watch",
}


def epilog(command: str) -> str:
    """The ``Example:`` line shown at the end of ``spotwise COMMAND --help``."""
    return f"Example:  {EXAMPLES[command]}"


def command_kw(command: str) -> dict[str, Any]:
    """Keyword arguments for ``app.command(...)`` / ``typer.Typer(...)``: ``-h`` and the example."""
    return {"context_settings": CONTEXT_SETTINGS, "epilog": epilog(command)}


__all__ = ["CONTEXT_SETTINGS", "EXAMPLES", "command_kw", "epilog"]
