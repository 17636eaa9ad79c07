"""The hindsight oracle of a trace sweep: the cheapest way the job could have run, knowing the future.

For one start time the oracle sees every place's whole price and capacity history over the
window ``[start, start + deadline)`` and, for each place (zone, instance type), buys the
cheapest compute time that finishes the job by the deadline: the window splits into stretches
of constant price and capacity; in each the job can run at ``min(spot, on-demand)`` $/h per
worker (spot only where the place has capacity; on-demand always), and the oracle takes the
cheapest stretches first until ``work / speed`` hours are bought (fractional knapsack with unit
weights: greedy is optimal).  The oracle is the cheapest place.

It pays the coordinator only while it computes and pays no restart, no billing minimum and no
move: it is a *lower bound* no online strategy can beat, which is what the sweep's
"cost vs oracle" column is measured against (issue 8's "hindsight oracle: cheapest zone/type and
slots").  It never moves between places: ``min`` over places of a single-place schedule.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from spotwise.errors import InfeasibleError
from spotwise.sim.places import Place
from spotwise.sim.sweep_types import OracleResult, SweepJob


def place_oracle(job: SweepJob, place: Place, start: float) -> tuple[float, float, float]:
    """``(cost, spot hours, on-demand hours)`` of the cheapest schedule at one place."""
    end = start + job.deadline_s
    cuts = np.concatenate(([start], place.change_points(start, end), [end]))
    lengths = np.diff(cuts) / 3600.0
    mids = cuts[:-1]
    spot = np.asarray(place.price.value_at(mids), dtype=float)
    has = np.ones_like(spot, dtype=bool) if place.capacity is None else np.asarray(place.capacity.value_at(mids)) >= 1
    od = place.on_demand_per_hour
    use_spot = has & (spot < od)
    unit = np.where(use_spot, spot, od) * job.workers + job.coordinator_per_hour
    need = job.work_s / place.speed / 3600.0
    order = np.argsort(unit, kind="stable")
    cum = np.cumsum(lengths[order])
    k = int(np.searchsorted(cum, need - 1e-12))
    if k >= order.size:
        raise InfeasibleError(f"{place.id} cannot fit {need:.2f} h of compute in the window", "extend the deadline")
    take = lengths[order].copy()
    take[k] = need - (cum[k - 1] if k > 0 else 0.0)
    take[k + 1:] = 0.0
    cost = float(np.sum(take * unit[order]))
    sp = float(np.sum(take[use_spot[order]]))
    return cost, sp, float(need - sp)


def hindsight_oracle(job: SweepJob, places: Sequence[Place], start: float) -> OracleResult:
    """The cheapest place's cheapest schedule from ``start`` (places whose traces cover the window)."""
    best: OracleResult | None = None
    end = start + job.deadline_s
    for p in places:
        if not p.covers(start, end) or job.work_s / p.speed > job.deadline_s:
            continue
        cost, sp, od = place_oracle(job, p, start)
        if best is None or cost < best.cost:
            best = OracleResult(start, cost, p.id, sp, od)
    if best is None:
        raise InfeasibleError(f"no place covers the window from t={start:.0f} for {end - start:.0f} s",
                              "pick start times inside the traces")
    if not math.isfinite(best.cost):
        raise InfeasibleError("the oracle's cost is not finite", "check the traces' prices")
    return best
