"""What the serverless plane counts over a run, across its sessions (issue 54): invocations, lost functions,
errors, leases, leavers, store re-seeds, update bytes and entries merged.

A checkpoint carries these (``plane_carried.counters``) so that a resumed run's ``summary.json`` reports the
whole run, as on the VM planes (:mod:`spotwise.planes.collective.totals`).  Read back from a run directory
they are untrusted input (:mod:`spotwise.control.carried`): exactly these counters, each a count, else exit 2.
A resume invokes every member again (a new incarnation each): ``invocations`` then counts those too -- the
functions a resumed run really ran and was billed for.
"""

from __future__ import annotations

from typing import Any

from spotwise.control.carried import count, refuse, section

#: the plane's counters, in the summary's order
COUNTERS = ("invocations", "lost", "errors", "leases", "left", "store_reseeds", "bytes_in", "entries_merged",
            "entries_computed")


def fresh_counters() -> dict[str, int]:
    """Every counter at 0 (a new run)."""
    return dict.fromkeys(COUNTERS, 0)


def carried_counters(counters: dict[str, int]) -> dict[str, Any]:
    """The checkpoint's ``plane_carried`` section."""
    return {"counters": {k: int(counters[k]) for k in COUNTERS}}


def restored_counters(state: dict[str, Any]) -> dict[str, int]:
    """The counters a checkpoint's state carries, checked: ``plane_carried`` must hold ``counters`` and
    nothing else, ``counters`` every name of :data:`COUNTERS` (no other) as a count."""
    carried = section(state, "plane_carried")
    extra = [k for k in carried if k != "counters"]
    if extra:
        raise refuse(f"plane_carried[{str(extra[0])[:40]!r}]", carried[extra[0]], "absent (a serverless run carries counters only)")
    raw = carried.get("counters")
    if not isinstance(raw, dict):
        raise refuse("plane_carried.counters", raw, "a map of the serverless plane's counters")
    unknown = [k for k in raw if k not in COUNTERS]
    missing = [k for k in COUNTERS if k not in raw]
    if unknown or missing:
        name = unknown[0] if unknown else missing[0]
        raise refuse(f"plane_carried.counters[{str(name)[:40]!r}]", raw.get(name, "<absent>"),
                     f"exactly the counters {', '.join(COUNTERS)}")
    return {k: count(raw[k], f"plane_carried.counters.{k}") for k in COUNTERS}
