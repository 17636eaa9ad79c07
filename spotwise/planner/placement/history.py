"""Where to run, chosen from price history, and how often that choice met the deadline in the past.

``spotwise plan SPEC --trace DIR`` with traces of several zones (and ``--types``): before the
job's start (``market.start``, else one deadline before the traces end -- the planner's rule,
:func:`spotwise.planner.estimate.models._plan_start`) the planner

1. picks the place -- zone and instance type -- with the lowest spot price per unit of progress in
   force at the start (the hold-out rule of the sweep's ``spotwise`` strategy,
   :mod:`spotwise.sim.sweep.engine`: nothing after the start is looked at);
2. replays the job on the past: one start every ``every_s`` over the ``lookback_s`` before the
   start, each window ending before it, with the spotwise strategy (cheapest place at each
   window's start, Uniform Progress guard, migration) and the alternatives (spot with the guard at
   the chosen place, the Thm 3 bid there, on-demand);
3. reports the **probability of meeting the deadline** as the fraction of past windows that met it
   (Wilson 95% interval), with the mean and 95th-percentile cost -- a frequency measured on this
   job's own history, not an expectation under a fitted model.

The job is the spec's (its iterations, workers and step-time law, :func:`spotwise.sim.sweep.from_spec.job_work_s`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from spotwise.config import JobSpec
from spotwise.errors import InputError
from spotwise.market.series import iso8601
from spotwise.market.world import load_catalog
from spotwise.sim.sweep.engine import parse_strategies, sweep
from spotwise.sim.sweep.from_spec import sweep_job
from spotwise.sim.sweep.places import Place, build_places

#: the strategies a trace plan replays on the past windows; the first one leads the recommendation
#: (issue 23: the availability guard, with the previous default beside it)
BACKTEST_STRATEGIES = ("spotwise-avail", "spotwise", "spot+guard", "thm3-bid", "on-demand")


@dataclass(frozen=True)
class PlaceChoice:
    zone: str
    instance: str
    price: float
    speed: float
    on_demand: float
    start: float
    candidates: int

    def to_dict(self) -> dict[str, Any]:
        return {"zone": self.zone, "instance": self.instance, "spot_price": self.price, "speed": self.speed,
                "on_demand_price": self.on_demand, "start": iso8601(self.start), "candidates": self.candidates}


def choose_place(places: Sequence[Place], start: float) -> PlaceChoice:
    """The place with the lowest spot price per unit of progress in force at ``start`` (hold-out)."""
    live = [p for p in places if p.start <= start < p.end]
    if not live:
        raise InputError(f"no trace has a price at the job's start {iso8601(start)}",
                         "set market.start inside the traces", "market.start")
    best = min(live, key=lambda p: (p.spot_price(start) / p.speed, p.id))
    return PlaceChoice(best.zone, best.instance.name, best.spot_price(start), best.speed, best.on_demand_per_hour, start, len(live))


def rank_places(places: Sequence[Place], start: float, k: int = 5) -> list[dict[str, Any]]:
    """The ``k`` places with the lowest spot price per unit of progress in force at ``start``, best first (the
    order of :func:`choose_place`; ``spotwise plan --emit`` offers them to SkyPilot as ordered fall-backs)."""
    live = sorted((p for p in places if p.start <= start < p.end), key=lambda p: (p.spot_price(start) / p.speed, p.id))
    return [{"zone": p.zone, "instance": p.instance.name, "spot_price": p.spot_price(start), "speed": p.speed} for p in live[:k]]


def plan_placement(spec: JobSpec, traces: list[str], start: float, *, types: Sequence[str] | None = None,
                   lookback_s: float = 30 * 86400.0, every_s: float = 6 * 3600.0, restart_s: float = 300.0) -> dict[str, Any]:
    """Choose the place at ``start`` and backtest the strategies on the ``lookback_s`` before it."""
    from spotwise.market.traces import load_traces

    series = [s for s in load_traces(traces)]
    places, _ = build_places(series, load_catalog(spec), spec.workload.family, spec.cluster.instance_type, types)
    choice = choose_place(places, start)
    job = sweep_job(spec, restart_s=restart_s)
    chosen = next(p for p in places if p.key == (choice.zone, choice.instance))
    lo = max(chosen.start + job.history_s, start - lookback_s)
    hi = start - job.deadline_s
    out: dict[str, Any] = {"choice": choice.to_dict(), "job": {"work_h": job.work_s / 3600, "deadline_h": job.deadline_s / 3600,
                                                              "workers": job.workers, "restart_s": job.restart_s}}
    out["ranked"] = rank_places(places, start)
    out["traces"] = [str(Path(t).expanduser().resolve()) for t in traces]  # a planned spec replays the same traces
    if hi < lo:
        out["backtest"] = None
        out["note"] = (f"no past window fits before {iso8601(start)} (needs {job.history_s / 86400:.0f} d of history plus "
                       f"a {job.deadline_s / 3600:.0f} h deadline): the probability of meeting the deadline is not measured")
        return out
    starts = [float(t) for t in np.arange(lo, hi + 1e-6, every_s)]
    res = sweep(job, places, [chosen.key], parse_strategies(list(BACKTEST_STRATEGIES)), starts)
    out["backtest"] = {
        "windows": len(res.starts), "first_start": iso8601(res.starts[0]), "last_start": iso8601(res.starts[-1]),
        "every_h": every_s / 3600, "strategies": [
            {"strategy": s.strategy, "deadline_met": s.deadline_met, "ci95": list(s.deadline_met_ci), "mean_cost": s.mean_cost,
             "p95_cost": float(np.quantile([r.cost for r in res.rows if r.strategy == s.strategy], 0.95)),
             "p5_cost": float(np.quantile([r.cost for r in res.rows if r.strategy == s.strategy], 0.05)),
             "mean_finish_h": _mean_finish_h(res.rows, s.strategy), "bid": _first_bid(res.rows, s.strategy, start),
             "vs_oracle": s.cost_ratio_of_means, "vs_free_move": s.cost_ratio_free, "vs_restart_bound": s.cost_ratio_restart, "vs_on_demand": s.vs_on_demand}
            for s in res.summaries],
    }
    return out


def _mean_finish_h(rows: Sequence[Any], strategy: str) -> float | None:
    """Mean hours from start to finish over the windows the strategy finished (``None``: none finished)."""
    done = [r.finish_s for r in rows if r.strategy == strategy and r.finish_s is not None]
    return float(np.mean(done)) / 3600.0 if done else None


def _first_bid(rows: Sequence[Any], strategy: str, start: float) -> float | None:
    """The bid of the strategy's last past window (its rule applied nearest the job's start), if it bids."""
    bids = [(r.start, r.bid) for r in rows if r.strategy == strategy and r.bid is not None]
    return float(max(bids)[1]) if bids else None
