"""Turning series, event logs and summaries into tables, JSON and plots for people."""

from __future__ import annotations

import math


def fmt_duration(seconds: float | None, digits: int = 1) -> str:
    """``"-"``, ``"42 s"``, ``"3.5 min"``, ``"2.1 h"`` or ``"1.5 d"``: the unit a person reads easily."""
    if seconds is None or not math.isfinite(seconds):
        return "-"
    for unit, size in (("d", 86400.0), ("h", 3600.0), ("min", 60.0)):
        if seconds >= size:
            return f"{seconds / size:.{digits}f} {unit}"
    return f"{seconds:.{max(digits - 1, 0)}f} s"
