"""What a run's summary adds up over its sessions, as a checkpoint carries it (issue 54 item 5).

A resumed run is the uninterrupted run: its ``summary.json`` reports the whole run, not the last
session.  Whatever the summary reads that a session accumulates -- the last step's loss, the last
evaluation, a training script's latest metrics, the per-phase step timing, the recoveries and joins
measured, the regroups -- is therefore written into every checkpoint and read back on resume (a
resume that has nothing left to train reports exactly what the finished run did).

A checkpoint is untrusted input: each reader here checks what it takes back and refuses anything
else with an :class:`~spotwise.errors.InputError` naming the field (exit 2), never half-uses it.
"""

from __future__ import annotations

import math
from typing import Any

from spotwise.errors import InputError

#: the most entries a carried list or map may hold (a run's recoveries, a script's metric names)
MAX_ENTRIES = 1_000_000
#: the longest name a carried map may use (a script's metric names are the script's: any string)
MAX_NAME = 100_000

_FIX = "resume from the run directory spotwise wrote (or start the run again with --overwrite)"


def refuse(field: str, value: Any, want: str) -> InputError:
    """The error for a checkpoint's ``field`` holding ``value`` where ``want`` belongs."""
    shown = repr(value)
    return InputError(f"the checkpoint's {field} is {shown[:80]}{'...' if len(shown) > 80 else ''}, not {want}", _FIX)


def _finite(v: Any) -> bool:
    return not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(float(v))


def optional_number(raw: Any, field: str) -> float | None:
    """A finite number or None (the last step's loss: None before any step, or a NaN step's)."""
    if raw is None:
        return None
    if not _finite(raw):
        raise refuse(field, raw, "a finite number or null")
    return float(raw)


def count(raw: Any, field: str) -> int:
    """A count (an integer >= 0)."""
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < 0:
        raise refuse(field, raw, "a count")
    return int(raw)


def number_map(raw: Any, field: str) -> dict[str, float]:
    """``{name: finite number}`` (an evaluation's values, a script's metrics, milliseconds by phase)."""
    if not isinstance(raw, dict) or len(raw) > MAX_ENTRIES:
        raise refuse(field, raw, "a map of names to numbers")
    out: dict[str, float] = {}
    for k, v in raw.items():
        if not isinstance(k, str) or len(k) > MAX_NAME or not _finite(v):
            raise refuse(f"{field}[{str(k)[:40]!r}]", v, "a finite number under a name")
        out[k] = float(v)
    return out


def durations(raw: Any, field: str) -> list[float]:
    """A list of finite milliseconds >= 0 (recoveries, joins, regroups measured so far)."""
    if not isinstance(raw, (list, tuple)) or len(raw) > MAX_ENTRIES:
        raise refuse(field, raw, "a list of milliseconds")
    for v in raw:
        if not _finite(v) or float(v) < 0:
            raise refuse(field, v, "a list of milliseconds >= 0")
    return [float(v) for v in raw]


def section(state: dict[str, Any], key: str) -> dict[str, Any]:
    """The checkpoint's ``key`` map (``{}`` in a checkpoint written before it existed)."""
    raw = state.get(key, {})
    if not isinstance(raw, dict):
        raise refuse(key, raw, "a map")
    return raw
