"""What a spotwise member and the script it runs hand each other (:mod:`spotwise.elastic.host`).

The member thread hands the script a :class:`Go` for each step; the script thread reports how the
step (or the script) ended as an :class:`Outcome`; :class:`Parts` is what the script registered
before its first batch.
"""

from __future__ import annotations

import math
import sys
import traceback
from dataclasses import dataclass, field
from typing import Any

import torch

#: entries of a step's commit vector after the float buffers: the loss sum, whether there is one, the
#: gradient hook's failure flag, the batches taken and their square, a GradScaler's non-finite count,
#: the commit point's index and its square
#: (:meth:`~spotwise.planes.collective.script_member.ScriptReplica.fill_tail`); the learning rates follow
TAIL_HEAD = 8
#: outcomes after which the script thread is over (no :class:`Go` follows)
TERMINAL = ("ended", "raised", "usage")


@dataclass
class Go:
    """What the member hands the script for one step (or ``stop``: the job is over)."""

    stop: bool = False
    #: end the script where it waits (its first batch) without running the rest of it: the probe's end
    abandon: bool = False
    group: Any = None
    k: int = 1
    r: int = 0
    step: int = 0
    epoch: int = 0
    pos: int = 0


class Abandoned(BaseException):
    """Raised in a script's thread that is ended where it stands (:meth:`ScriptHost.abandon
    <spotwise.elastic.host.ScriptHost.abandon>`): a ``BaseException``, so a script's ``except Exception``
    does not keep it running."""


@dataclass
class Outcome:
    """How the script's step (or the script) ended, for the member thread."""

    kind: str  # registered | committed | dropped | diverged | ended | raised | usage
    loss: float = math.nan
    samples: int = 0
    why: str = ""
    metrics: dict[str, float] = field(default_factory=dict)
    late_metrics: dict[str, float] = field(default_factory=dict)
    #: a committed step's learning rates, one per parameter group of the job's optimizers, as the
    #: members stepped with them (read from ``param_groups`` at the commit: the script's own, whatever
    #: the spec says)
    lrs: list[float] = field(default_factory=list)


@dataclass
class Parts:
    """What the script registered before its first batch.  ``module`` is the job's model: the one the
    script wrapped, or a ``ModuleList`` of the several it wrapped (``modules``, in order)."""

    module: torch.nn.Module
    optimizers: list[torch.optim.Optimizer]
    n_train: int
    find_unused: list[bool]
    states: dict[str, Any]
    ordered: bool
    modules: list[torch.nn.Module] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.modules:
            self.modules = [self.module]
        if len(self.find_unused) != len(self.modules):
            raise ValueError(f"{len(self.find_unused)} find_unused flags for {len(self.modules)} models")


def user_traceback() -> str:
    """The user's part of the current exception's traceback (frames inside spotwise left out)."""
    et, ev, tb = sys.exc_info()
    frames = [f for f in traceback.extract_tb(tb) if "/spotwise/" not in f.filename.replace("\\", "/")
              or f.filename.endswith("runpy.py")]
    frames = [f for f in frames if not f.filename.endswith("runpy.py")]
    if not frames:  # raised by spotwise itself under the script: the whole traceback (a bug to report)
        return traceback.format_exc().strip()
    text = "".join(traceback.format_list(frames[-8:])) + "".join(traceback.format_exception_only(et, ev))
    return text.strip()
