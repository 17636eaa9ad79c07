"""Turning series, event logs and summaries into tables, JSON and plots for people."""

from __future__ import annotations

import math


def fmt_duration(seconds: float | None, digits: int = 1) -> str:
    """``"-"``, ``"42 s"``, ``"3.5 min"``, ``"25.2 h"`` or ``"2.1 d"``: :func:`spotwise.reports.units.human_duration`
    (hours below 48 h, days above), the one formatter for durations a person reads."""
    from spotwise.reports.units import human_duration

    if seconds is None or not math.isfinite(seconds):
        return "-"
    return human_duration(seconds, digits=digits)
