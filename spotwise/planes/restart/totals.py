"""What restart mode adds up over a run, across its sessions (issue 55 item 6): restarts, the steps redone
after each (lost work: their virtual seconds and their cost), the wall time restarts took, the script's
checkpoints, and the state a restart resumes from.

A spotwise checkpoint carries these (``plane_carried``); read back from a run directory they are untrusted
input (:mod:`spotwise.control.carried`: malformed -> exit 2).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from spotwise.control.carried import count, durations, exact, refuse

_KEYS = ("restarts", "redone_steps", "redone_s", "redone_usd", "restart_wall_s", "script_checkpoints",
         "checkpoint_step", "checkpoint_usd", "since_checkpoint")


def _number(raw: Any, field: str) -> float:
    if isinstance(raw, bool) or not isinstance(raw, (int, float)) or not math.isfinite(float(raw)) or raw < 0:
        raise refuse(field, raw, "a number >= 0")
    return float(raw)


def _since(raw: Any) -> list[tuple[int, float, int, float]]:
    if not isinstance(raw, list) or len(raw) > 10_000_000:
        raise refuse("plane_carried.since_checkpoint", raw, "a list of [step, seconds, samples, usd]")
    out = []
    for item in raw:
        if not isinstance(item, list) or len(item) != 4:
            raise refuse("plane_carried.since_checkpoint", item, "a [step, seconds, samples, usd] entry")
        out.append((count(item[0], "plane_carried.since_checkpoint"), _number(item[1], "since_checkpoint seconds"),
                    count(item[2], "plane_carried.since_checkpoint"), _number(item[3], "since_checkpoint usd")))
    return out


@dataclasses.dataclass
class RestartTotals:
    """The plane's run totals (module docstring).  ``checkpoint_step``: the step of the newest checkpoint the
    script saved in the folder spotwise names (-1: none); ``since_checkpoint``: (step, virtual seconds,
    samples, cost so far at its end) of every committed step after it -- what a restart now would redo; a
    step's seconds are its own round time (not the restart or the idle time before it)."""

    restarts: int = 0
    redone_steps: int = 0
    redone_s: float = 0.0
    redone_usd: float = 0.0
    restart_wall_s: list[float] = dataclasses.field(default_factory=list)
    script_checkpoints: int = 0
    checkpoint_step: int = -1
    #: the cost so far when the step of the newest checkpoint was committed
    checkpoint_usd: float = 0.0
    since_checkpoint: list[tuple[int, float, int, float]] = dataclasses.field(default_factory=list)
    #: the rate the script's optimizer last stepped with (not carried: every session's steps say it again)
    stepped_lr: float | None = None

    def __post_init__(self) -> None:
        if min(self.restarts, self.redone_steps, self.script_checkpoints) < 0 or self.checkpoint_step < -1:
            raise ValueError("restart totals count up from 0")

    def checkpointed(self, step: int, usd: float) -> None:
        """The script saved a checkpoint of ``step`` (``usd``: the cost so far): the steps up to it are no
        longer at risk."""
        self.script_checkpoints += 1
        if step >= self.checkpoint_step:
            self.checkpoint_step = int(step)
            self.checkpoint_usd = next((s[3] for s in self.since_checkpoint if s[0] == step), usd)
            self.since_checkpoint = [s for s in self.since_checkpoint if s[0] > step]

    def rolled_back(self, to_step: int) -> tuple[int, float, int, float]:
        """The steps after ``to_step`` are redone: (steps, their virtual seconds, samples, and cost -- the
        money spent from the end of step ``to_step`` to the end of the last of them)."""
        lost = [s for s in self.since_checkpoint if s[0] > to_step]
        self.since_checkpoint = [s for s in self.since_checkpoint if s[0] <= to_step]
        secs = sum(s[1] for s in lost)
        samples = sum(s[2] for s in lost)
        base = self.cost_at(to_step)
        if base is None:
            base = self.checkpoint_usd if to_step == self.checkpoint_step else 0.0
        usd = max(0.0, lost[-1][3] - base) if lost else 0.0
        self.redone_steps += len(lost)
        self.redone_s += secs
        self.redone_usd += usd
        return len(lost), secs, samples, usd

    def cost_at(self, step: int) -> float | None:
        return next((s[3] for s in self.since_checkpoint if s[0] == step), None)

    def state(self) -> dict[str, Any]:
        return {"restarts": self.restarts, "redone_steps": self.redone_steps, "redone_s": self.redone_s,
                "redone_usd": self.redone_usd, "restart_wall_s": list(self.restart_wall_s),
                "script_checkpoints": self.script_checkpoints, "checkpoint_step": self.checkpoint_step,
                "checkpoint_usd": self.checkpoint_usd, "since_checkpoint": [list(s) for s in self.since_checkpoint]}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> "RestartTotals":
        c = exact(state.get("plane_carried"), "plane_carried", _KEYS)
        ck = c["checkpoint_step"]
        if isinstance(ck, bool) or not isinstance(ck, int) or ck < -1:
            raise refuse("plane_carried.checkpoint_step", ck, "a step (-1: none)")
        return cls(restarts=count(c["restarts"], "plane_carried.restarts"),
                   redone_steps=count(c["redone_steps"], "plane_carried.redone_steps"),
                   redone_s=_number(c["redone_s"], "plane_carried.redone_s"),
                   redone_usd=_number(c["redone_usd"], "plane_carried.redone_usd"),
                   restart_wall_s=durations(c["restart_wall_s"], "plane_carried.restart_wall_s"),
                   script_checkpoints=count(c["script_checkpoints"], "plane_carried.script_checkpoints"),
                   checkpoint_step=ck, checkpoint_usd=_number(c["checkpoint_usd"], "plane_carried.checkpoint_usd"),
                   since_checkpoint=_since(c["since_checkpoint"]))

    def summary(self) -> dict[str, Any]:
        walls = sorted(self.restart_wall_s)
        return {"restarts": self.restarts, "redone_steps": self.redone_steps, "redone_s": round(self.redone_s, 3),
                "redone_usd": round(self.redone_usd, 6), "script_checkpoints": self.script_checkpoints,
                "script_checkpoint_step": self.checkpoint_step,
                "restart_wall_s_median": walls[len(walls) // 2] if walls else None,
                "restart_wall_s_total": round(sum(walls), 3)}
