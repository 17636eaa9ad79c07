"""AD-PSGD's step records on the collective plane: assembling one step from every member's record.

Under AD-PSGD (``papers/001_30a454edd897cf47.txt`` Sec. 3.3) there is no leader that sees every
step whole: each member sends its own record of a step at its barriers, and a step is whole (and
logged by the controller) once all of its members' records are in.  :class:`GossipRecords` keeps
the partial steps; :func:`combine` makes one step's record (loss weighted by the members' samples).
:class:`Replicas` keeps the parameter replicas the leader sends (every strategy).
"""

from __future__ import annotations

import math
import time
from typing import Any, Callable

import numpy as np

from spotwise.planes.collective.heartbeat import BEAT_S


def combine(parts: dict[int, dict[str, Any]], partial: bool = False) -> dict[str, Any]:
    """One step's record from its members' records (loss weighted by their samples); ``partial``:
    settled at a regroup with the records that arrived (their members listed in ``partial``)."""
    rs = list(parts.values())
    n = [int(r.get("n", 0)) for r in rs]
    losses = [(float(r["loss"]), m) for r, m in zip(rs, n) if m and math.isfinite(float(r["loss"]))]
    tot = sum(m for _, m in losses)
    rec = dict(rs[0])
    rec.pop("member", None)
    rec.update(loss=sum(v * m for v, m in losses) / tot if tot else float("nan"),
               wall=max(float(r["wall"]) for r in rs), first_of_gen=any(r.get("first_of_gen") for r in rs))
    for r in rs:
        if r.get("eval"):
            rec["eval"] = r["eval"]
        if r.get("timing"):
            rec["timing"] = r["timing"]
    if partial:
        rec["partial"] = sorted(parts)
    return rec


#: what a step's record may add to its ``step`` event: the leader's timing and phases, a step whose record
#: died with its leader (``unreported``), a script's learning rates when its parameter groups differ
STEP_FIELDS = ("timing", "phases", "unreported", "lrs")


def step_fields(rec: dict[str, Any]) -> dict[str, Any]:
    """The optional fields of a committed record's ``step`` event (:data:`STEP_FIELDS` it holds)."""
    return {k: rec[k] for k in STEP_FIELDS if rec.get(k)}


def split_halts(raw: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, Any] | None, dict[str, Any] | None]:
    """The members' records, the first saying a step diverged (``nonfinite``), the first saying a
    training script is over (``script``, issue 41): ``(steps' records, nonfinite or None, script or None)``."""
    def first(key: str) -> dict[str, Any] | None:
        hits = [r for r in raw if r.get(key)]
        return min(hits, key=lambda r: int(r["step"])) if hits else None

    return [r for r in raw if not r.get("nonfinite") and not r.get("script")], first("nonfinite"), first("script")


def unreported_records(rec: dict[str, Any], logged: int, cursor: Any, sync: str) -> list[dict[str, Any]]:
    """The steps between the last logged one (``logged``) and ``rec``'s whose records died with a
    leader: counted, loss unknown; their samples together are what the data ``cursor`` moved by
    before ``rec``'s step, split evenly among them."""
    m = int(rec["step"]) - 1 - logged
    n = cursor.n
    gap = max(0, (int(rec["epoch"]) * n + int(rec["pos"])) - (cursor.epoch * n + cursor.pos) - int(rec.get("samples", 0)))
    return [{"step": logged + 1 + j, "k": rec["k"], "loss": float("nan"), "samples": gap // m + (1 if j < gap % m else 0),
             "epoch": rec["epoch"], "pos": rec["pos"], "unreported": True, "strategy": rec.get("strategy", sync)}
            for j in range(max(0, m))]


class GossipRecords:
    """The member records of steps not yet whole (step -> member -> record)."""

    def __init__(self) -> None:
        self.partial: dict[int, dict[int, dict[str, Any]]] = {}

    def whole(self, recs: list[dict[str, Any]], logged: int, gen: int | None = None) -> list[dict[str, Any]]:
        """The records of whole steps among ``recs`` and what was kept: a leader's record (no
        ``member``) as it is, a step whose members' records are all in combined.  Ignored: steps up to
        ``logged`` (already logged; kept ones too are dropped) and member records of a generation
        before ``gen`` -- an ended generation's records were settled at its regroup, and one that
        arrives later would sit incomplete for ever, holding back every whole step after it."""
        out = [r for r in recs if "member" not in r]
        for r in recs:
            if "member" in r and int(r["step"]) > logged and (gen is None or int(r.get("gen", gen)) >= gen):
                self.partial.setdefault(int(r["step"]), {})[int(r["member"])] = r
        for s in [s for s in self.partial if s <= logged]:
            del self.partial[s]
        for s in sorted(self.partial):
            parts = self.partial[s]
            if len(parts) < int(next(iter(parts.values()))["k"]):
                break
            out.append(combine(self.partial.pop(s)))
        return out

    def settle(self, committed: int) -> list[dict[str, Any]]:
        """A regroup: the steps up to ``committed`` are committed with the records that arrived
        (every member computed them); the rest are dropped (redone)."""
        settled = [combine(parts, partial=True) for s, parts in sorted(self.partial.items()) if s <= committed]
        self.partial.clear()
        return settled

    def clear(self) -> None:
        self.partial.clear()


class StallWatch:
    """The controller's watch on a generation's progress: no wait in the controller is unbounded.

    A generation whose leased steps bring no record for ``max(min_s, 10 group timeouts, 20 times
    the usual gap between two arrivals)`` is failed and regrouped (its members report or are
    declared lost).  Members' own waits are bounded by the group's timeout; this bounds the
    controller's, whatever the cause (a record lost, a member stuck where no timeout reaches).
    A member at work (its training thread using CPU: compiling, importing, a long step; see
    :mod:`~spotwise.planes.collective.heartbeat`) is no stall: the idle time counts from the later
    of the last record and the last work seen."""

    def __init__(self, min_s: float = 60.0, clock: Any = time.monotonic, look_every_s: float = BEAT_S) -> None:
        self.min_s, self.clock, self.look_every_s = float(min_s), clock, float(look_every_s)
        self.since = clock()
        self.worked = self.looked = self.since
        self.gap: float | None = None

    def start(self) -> None:
        """Steps were leased: progress is expected from now."""
        self.since = self.worked = self.looked = self.clock()

    def progressed(self) -> None:
        now = self.clock()
        gap = now - self.since
        self.gap = gap if self.gap is None else 0.9 * self.gap + 0.1 * gap
        self.since = now

    def stalled(self, timeout_s: float, working: Callable[[], bool] | None = None) -> float | None:
        """Seconds without progress if that is a stall, else ``None``.  ``working()`` (asked at most
        every ``look_every_s`` while no record comes) tells whether a member was at work since it
        was last asked: that is progress too (the gap between records is not changed)."""
        now = self.clock()
        if working is not None and now - self.since >= self.look_every_s and now - self.looked >= self.look_every_s:
            self.looked = now
            if working():
                self.worked = now
        idle = now - max(self.since, self.worked)
        return idle if idle > max(self.min_s, 10.0 * timeout_s, 20.0 * (self.gap or 0.0)) else None


class Replicas:
    """The controller's copy of the members' state: the replicas the leader sent, by step.

    The newest adopted replica is what a checkpoint holds and what a loss of every member rolls
    back to (``step`` and the data cursor ``pos`` it was taken at); ``samples`` remembers the
    committed samples at each step since, so a roll-back restores that count too.
    """

    def __init__(self) -> None:
        self.pending: dict[int, tuple[dict[str, Any], np.ndarray, bytes]] = {}
        self.step = 0
        self.pos: tuple[int, int] = (0, 0)
        self.samples: dict[int, int] = {}

    def reset(self, step: int, pos: tuple[int, int], samples: int) -> None:
        """The job's state at ``step`` (fresh or restored) is the controller's copy."""
        self.step, self.pos, self.samples = int(step), pos, {int(step): int(samples)}

    def receive(self, replicas: list[tuple[dict[str, Any], np.ndarray, bytes]]) -> None:
        for head, params, extra in replicas:
            self.pending[int(head["step"])] = (head, params, extra)

    def adopt(self, step: int) -> tuple[np.ndarray, bytes] | None:
        """The replica of ``step`` (its flat vector and the encoded optimizer/extra state) if one
        arrived (it becomes the copy; older ones are dropped)."""
        for s in [s for s in self.pending if s < step]:
            del self.pending[s]
        got = self.pending.pop(step, None)
        if got is None:
            return None
        self.step = step
        self.pos = (int(got[0]["epoch"]), int(got[0]["pos"]))
        for s in [s for s in self.samples if s < step]:
            del self.samples[s]
        return got[1], got[2]
