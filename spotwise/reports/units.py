"""The one time-unit family a person reads (issue 29): hours below 48 h, days above.

JSON output keeps seconds; everything printed for people goes through :func:`human_duration`, so
one job never reads as ``129600 s``, ``1513.4 min`` and ``1.05 d`` at once.  Durations under an
hour (a demo, a recovery) keep minutes, and under a minute seconds: an hour written as ``0.0 h``
would say nothing.
"""

from __future__ import annotations

import math
import re

HOURS_UNTIL_DAYS = 48.0


def human_duration(seconds: float | None, *, short: bool = False, digits: int = 1) -> str:
    """``seconds`` for a person: ``25.2 h`` below 48 h, ``2.1 d`` above; ``12.5 min`` / ``42 s`` below an hour.

    ``None`` or a non-finite value is ``-``; negative durations keep their sign.
    ``short`` drops the space (a narrow cell); ``digits`` is the number of decimals (seconds get one fewer).
    """
    if seconds is None:
        return "-"
    try:
        s = float(seconds)
    except (TypeError, ValueError):
        return "-"
    if not math.isfinite(s):
        return "-"
    sign, s = ("-" if s < 0 else ""), abs(s)
    h = s / 3600.0
    if h >= HOURS_UNTIL_DAYS:
        num, unit = f"{h / 24.0:.{digits}f}", "d"
    elif h >= 1.0:
        num, unit = f"{h:.{digits}f}", "h"
    elif s >= 60.0:
        num, unit = f"{s / 60.0:.{digits}f}", "min"
    else:
        num, unit = f"{s:.{max(digits - 1, 0)}f}", "s"
    return f"{sign}{num}{'' if short else ' '}{unit}"


def human_hours(hours: float | None) -> str:
    """:func:`human_duration` for a value given in hours."""
    if hours is None:
        return "-"
    try:
        return human_duration(float(hours) * 3600.0)
    except (TypeError, ValueError):
        return "-"


_SECONDS = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)\s?s\b")


def humanize_seconds(text: str) -> str:
    """``text`` with every duration of a minute or more written in seconds (``129600 s``, ``975s``) rewritten
    by :func:`human_duration` (``36.0 h``, ``16.2 min``); shorter ones (a step's ``1.05 s``) stay as they are.
    For messages composed elsewhere (the planner's reasons) before a person reads them."""
    def sub(m: re.Match[str]) -> str:
        v = float(m.group(1))
        return human_duration(v) if v >= 60 else m.group(0)

    return _SECONDS.sub(sub, text)


__all__ = ["HOURS_UNTIL_DAYS", "human_duration", "human_hours", "humanize_seconds"]
