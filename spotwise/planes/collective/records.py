"""AD-PSGD's step records on the collective plane: assembling one step from every member's record.

Under AD-PSGD (``papers/001_30a454edd897cf47.txt`` Sec. 3.3) there is no leader that sees every
step whole: each member sends its own record of a step at its barriers, and a step is whole (and
logged by the controller) once all of its members' records are in.  :class:`GossipRecords` keeps
the partial steps; :func:`combine` makes one step's record (loss weighted by the members' samples).
"""

from __future__ import annotations

import math
from typing import Any


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


class GossipRecords:
    """The member records of steps not yet whole (step -> member -> record)."""

    def __init__(self) -> None:
        self.partial: dict[int, dict[int, dict[str, Any]]] = {}

    def whole(self, recs: list[dict[str, Any]], logged: int) -> list[dict[str, Any]]:
        """The records of whole steps among ``recs`` and what was kept: a leader's record (no
        ``member``) as it is, a step whose members' records are all in combined; steps up to
        ``logged`` (already logged) are ignored."""
        out = [r for r in recs if "member" not in r]
        for r in recs:
            if "member" in r and int(r["step"]) > logged:
                self.partial.setdefault(int(r["step"]), {})[int(r["member"])] = r
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
