"""What the collective plane adds up over a run, across its sessions (issue 54 item 5): step phases, a training
script's metrics, join latencies, regroups and their times, steps rolled back.

A checkpoint carries these (``plane_carried``) so that a resumed run's summary equals the uninterrupted run's;
read back from a run directory they are untrusted input (:mod:`spotwise.control.carried`: malformed -> exit 2).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from spotwise.control.carried import count, durations, exact, number_map
from spotwise.control.phases import PhaseTotals


#: the keys of a checkpoint's ``plane_carried`` on the collective plane
_KEYS = ("phases", "metrics", "join_ms", "regroup_ms", "regroups", "rolled_back_steps")


@dataclasses.dataclass
class CollectiveTotals:
    """The plane's run totals.  ``join_ms``: capacity available -> the first step the joiner contributed to
    (wall, members' clock); ``regroup_ms``: each regroup's time; ``metrics``: the latest value of each metric a
    training script logged."""

    phases: PhaseTotals = dataclasses.field(default_factory=PhaseTotals)
    metrics: dict[str, float] = dataclasses.field(default_factory=dict)
    join_ms: list[float] = dataclasses.field(default_factory=list)
    regroup_ms: list[float] = dataclasses.field(default_factory=list)
    regroups: int = 0
    rolled_back_steps: int = 0
    #: the rate a training script's optimizer last stepped with (its param_groups at the commit; the summary's
    #: ``lr``).  Not carried: every session's commits say it again
    stepped_lr: float | None = None

    def __post_init__(self) -> None:
        if self.regroups < 0 or self.rolled_back_steps < 0:
            raise ValueError("regroups and rolled_back_steps count up from 0")

    def state(self) -> dict[str, Any]:
        """The checkpoint's ``plane_carried`` section."""
        return {"phases": self.phases.state(), "metrics": dict(self.metrics), "join_ms": list(self.join_ms),
                "regroup_ms": list(self.regroup_ms), "regroups": self.regroups,
                "rolled_back_steps": self.rolled_back_steps}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> "CollectiveTotals":
        """The totals a checkpoint's state carries (exactly :meth:`state`'s keys, each checked)."""
        carried = exact(state.get("plane_carried"), "plane_carried", _KEYS)
        return cls(phases=PhaseTotals.from_state(carried["phases"]),
                   metrics=number_map(carried["metrics"], "plane_carried.metrics"),
                   join_ms=durations(carried["join_ms"], "plane_carried.join_ms"),
                   regroup_ms=durations(carried["regroup_ms"], "plane_carried.regroup_ms"),
                   regroups=count(carried["regroups"], "plane_carried.regroups"),
                   rolled_back_steps=count(carried["rolled_back_steps"], "plane_carried.rolled_back_steps"))

    def summary(self) -> dict[str, Any]:
        """The summary's ``extra`` fields these make."""
        j = self.join_ms
        return {"regroups": self.regroups, "rolled_back_steps": self.rolled_back_steps,
                "regroup_ms_median": float(np.median(self.regroup_ms)) if self.regroup_ms else None,
                "join_ms": {"count": len(j), "median": float(np.median(j)) if j else None,
                            "p99": float(np.percentile(j, 99)) if j else None, "max": max(j) if j else None},
                # where a step's time went, by phase (the leader's timing: spotwise.control.phases)
                "step_phases": self.phases.summary(),
                **({"metrics": dict(self.metrics)} if self.metrics else {}),
                **({"lr": self.stepped_lr} if self.stepped_lr is not None else {})}
