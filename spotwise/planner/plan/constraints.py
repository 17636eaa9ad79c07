"""What ``spotwise plan`` says when no strategy fits (issue 29): which constraint binds and by how much to
relax it, in the user's units; the theorems' reasons follow in a parenthesis at the end."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from spotwise.reports.units import human_duration as _hours
from spotwise.reports.units import humanize_seconds


def _ceil_hours(seconds: float) -> str:
    """A deadline to ask for, rounded up (to the formatter's last digit) so that it does relax the constraint."""
    unit = 86400.0 if seconds >= 48 * 3600.0 else 3600.0 if seconds >= 3600.0 else 60.0
    return _hours(math.ceil(seconds / unit * 10) / 10 * unit)


def infeasible_message(alts: Sequence[Any], deadline_s: float, budget: float | None) -> tuple[str, str]:
    """``(what, fix)`` for the plan's InfeasibleError: the budget binds when some strategy meets the deadline
    but costs more; else the deadline binds (the fastest strategy's expected time says by how much)."""
    reasons = humanize_seconds("; ".join(f"{a.strategy}: {a.reason or 'over budget'}" for a in alts))
    tail = f" ({reasons})" if reasons else ""
    in_time = [a for a in alts if a.feasible and a.expected_cost is not None]
    if budget is not None and in_time:
        cheapest = min(in_time, key=lambda a: float(a.expected_cost))
        need = float(cheapest.expected_cost)
        what = (f"the budget ${budget:g} is below the cheapest plan's ${need:.4g} ({cheapest.strategy} within the "
                f"{_hours(deadline_s)} deadline)")
        fix = (f"raise budget_usd to at least ${math.ceil(need * 100) / 100:,.2f}, or relax the deadline (a longer one "
               f"lets a lower bid or fewer workers finish cheaper){tail}")
        return what, fix
    timed = [a for a in alts if a.expected_time_s is not None and a.expected_time_s > 0]
    what = f"no strategy finishes within the {_hours(deadline_s)} deadline" + (f" and the ${budget:g} budget" if budget else "")
    if timed:
        fastest = min(timed, key=lambda a: float(a.expected_time_s))
        t = float(fastest.expected_time_s)
        if t > deadline_s:
            return (f"{what}: the fastest plan ({fastest.strategy}) needs {_hours(t)}",
                    f"relax the deadline to at least {_ceil_hours(t)}, or add workers (cluster.workers){tail}")
    return what, f"relax the deadline (or the budget), or add workers (cluster.workers){tail}"


__all__ = ["infeasible_message"]
