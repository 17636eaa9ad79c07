"""What ``--help`` shows besides the options (issue 29): ``-h`` as ``--help`` everywhere, and one example
command line under every command (the ``epilog``); :mod:`spotwise.cli` passes these to typer."""

from __future__ import annotations

from typing import Any

#: ``-h`` works as ``--help`` on the root and, through click's context inheritance, on every sub-command
CONTEXT_SETTINGS: dict[str, Any] = {"help_option_names": ["-h", "--help"]}

#: the real AWS spot prices beside a clone (the project's shared data; README "Your first job")
AWS_TRACES = "../shared/data/traces/training-on-a-dime/logs/aws/cost"

#: one example per command, keyed by its path below ``spotwise``; they run as written from a clone's
#: root, in this order (tests/test_cli_examples.py checks each parses and its inputs exist)
EXAMPLES: dict[str, str] = {
    "": f"spotwise plan examples/resnet18-v100.yaml --trace {AWS_TRACES}",
    "traces": f"spotwise traces show {AWS_TRACES}/us-east-1 --plot prices.png",
    "traces show": f"spotwise traces show {AWS_TRACES}/us-east-1 --plot prices.png",
    "demo": "spotwise demo --out spotwise-demo",
    "plan": f"spotwise plan examples/resnet18-v100.yaml --trace {AWS_TRACES} --write-spec planned.yaml",
    "run": "spotwise run examples/demo.yaml --out runs/demo",
    "launch": "spotwise launch examples/own-loop/gpt.yaml examples/own-loop/train_gpt_spotwise.py --out runs/gpt "
              "-- --max-iters 200",
    "eject": "spotwise eject examples/demo.yaml --out my-loop",
    "simulate": "spotwise simulate examples/demo.yaml --out runs/demo-sim",
    "report": "spotwise report runs/demo runs/demo-sim --out compare.html",
    "runs": "spotwise runs runs/",
    "status": "spotwise status runs/demo --watch",
}


def epilog(command: str) -> str:
    """The ``Example:`` line shown at the end of ``spotwise COMMAND --help``."""
    return f"Example:  {EXAMPLES[command]}"


def command_kw(command: str) -> dict[str, Any]:
    """Keyword arguments for ``app.command(...)`` / ``typer.Typer(...)``: ``-h`` and the example."""
    return {"context_settings": CONTEXT_SETTINGS, "epilog": epilog(command)}


__all__ = ["CONTEXT_SETTINGS", "EXAMPLES", "command_kw", "epilog"]
