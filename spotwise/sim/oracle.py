"""The hindsight oracle of a trace sweep: the cheapest way the job could have run, knowing the future.

For one start time the oracle sees every place's whole price and capacity history over the
window ``[start, start + deadline)`` and, for each place (zone, instance type), buys the
cheapest compute time that finishes the job by the deadline: the window splits into stretches
of constant price and capacity; in each the job can run at ``min(spot, on-demand)`` $/h per
worker (spot only where the place has capacity; on-demand always), and the oracle takes the
cheapest stretches first until ``work / speed`` hours are bought (fractional knapsack with unit
weights: greedy is optimal).  The oracle is the cheapest place.

It pays the coordinator only while it computes and pays no restart, no billing minimum and no
move.  It never moves between places: ``min`` over places of a single-place schedule -- so it is a
lower bound only for strategies that stay where they start.  A strategy that migrates can beat it
(issue 23 item 0).

:func:`free_move_bound` is a lower bound for every strategy: at every instant the job may run at whichever
place is cheapest per unit of progress then (spot where that place has capacity, else on-demand),
moving for free, and it buys the cheapest such instants first until the work is done (the LP of a
fractional multiple-choice knapsack: per stretch of constant prices and capacity, at most the
stretch's length of compute at one place; greedy over the stretches' convex-hull segments is
optimal).  No online strategy -- migrating or not -- can pay less; the sweep reports both columns
and the goal is stated against this one.  It charges no restart, so on traces where capacity
comes and goes every few hours no schedule comes near it:
:func:`spotwise.sim.restart_bound.restart_bound` is the lower bound that charges them, and
:func:`spotwise.sim.hindsight.hindsight_schedule` the matching upper bound on what hindsight can do.
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
    cost, sp = cheapest_first(unit, lengths, use_spot, need, f"{place.id} cannot fit {need:.2f} h of compute in the window")
    return cost, sp, float(need - sp)


def cheapest_first(unit: np.ndarray, amount: np.ndarray, spot: np.ndarray, need: float, why: str) -> tuple[float, float]:
    """The fractional knapsack of unit weights: ``need`` bought from the items (``unit`` price each, ``amount``
    available) cheapest first; ``(cost, amount bought from the spot items)``.  InfeasibleError when short."""
    order = np.argsort(unit, kind="stable")
    cum = np.cumsum(amount[order])
    k = int(np.searchsorted(cum, need - 1e-9 * max(1.0, need)))
    if k >= order.size:
        raise InfeasibleError(why, "extend the deadline")
    take = amount[order].copy()
    take[k] = need - (cum[k - 1] if k > 0 else 0.0)
    take[k + 1:] = 0.0
    return float(np.sum(take * unit[order])), float(np.sum(take[spot[order]]))


def _unit_rates(job: SweepJob, p: Place, mids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per stretch (``mids``): ``$ per wall-second`` at ``p`` (spot where it has capacity and is cheaper
    than on-demand, else on-demand; the coordinator included) and whether that is spot."""
    spot = np.asarray(p.price.value_at(mids), dtype=float)
    has = np.ones_like(spot, dtype=bool) if p.capacity is None else np.asarray(p.capacity.value_at(mids)) >= 1
    use_spot = has & (spot < p.on_demand_per_hour)
    per_h = np.where(use_spot, spot, p.on_demand_per_hour) * job.workers + job.coordinator_per_hour
    return per_h / 3600.0, use_spot


def live_places(job: SweepJob, places: Sequence[Place], start: float) -> list[Place]:
    """The places whose traces cover the window from ``start``; InfeasibleError if none does."""
    end = start + job.deadline_s
    live = [p for p in places if p.covers(start, end)]
    if not live:
        raise InfeasibleError(f"no place covers the window from t={start:.0f} for {end - start:.0f} s",
                              "pick start times inside the traces")
    return live


def window_cuts(job: SweepJob, live: Sequence[Place], start: float) -> np.ndarray:
    """The window's ends and every price or capacity change of ``live`` inside it: between two
    consecutive cuts nothing changes anywhere."""
    end = start + job.deadline_s
    cuts = np.unique(np.concatenate([[start, end]] + [p.change_points(start, end) for p in live]))
    return cuts[(cuts >= start) & (cuts <= end)]


def free_move_bound(job: SweepJob, places: Sequence[Place], start: float) -> OracleResult:
    """The cheapest schedule over ``places`` that may move at any instant for free (module docstring)."""
    live = live_places(job, places, start)
    cuts = window_cuts(job, live, start)
    lengths = np.diff(cuts)
    mids = cuts[:-1]
    rates = np.empty((len(live), mids.size))
    spots = np.empty((len(live), mids.size), dtype=bool)
    speeds = np.array([p.speed for p in live], dtype=float)
    for i, p in enumerate(live):
        rates[i], spots[i] = _unit_rates(job, p, mids)
    unit = rates / speeds[:, None]  # $ per second of work (at home speed)
    if np.all(speeds == speeds[0]):
        # one speed: each stretch at its cheapest place; cheapest stretches first
        best = np.argmin(unit, axis=0)
        cols = np.arange(mids.size)
        seg_unit, seg_work = unit[best, cols], lengths * speeds[best]
        seg_spot = spots[best, cols]
    else:
        # several speeds: the convex hull of (work, cost) per stretch, its segments by marginal cost
        su, sw, ss = [], [], []
        for k in range(mids.size):
            w, c = lengths[k] * speeds, lengths[k] * rates[:, k]
            order = np.argsort(w)
            hull_w, hull_c = 0.0, 0.0
            cand = list(order)
            while cand:
                j = min(cand, key=lambda i: ((c[i] - hull_c) / (w[i] - hull_w), -w[i]) if w[i] > hull_w else (np.inf, 0))
                if w[j] <= hull_w:
                    break
                su.append((c[j] - hull_c) / (w[j] - hull_w))
                sw.append(w[j] - hull_w)
                ss.append(bool(spots[j, k]))
                hull_w, hull_c = w[j], c[j]
                cand = [i for i in cand if w[i] > hull_w]
        seg_unit, seg_work, seg_spot = np.array(su), np.array(sw), np.array(ss, dtype=bool)
    need = float(job.work_s)
    cost, spot_s = cheapest_first(seg_unit, seg_work, seg_spot, need, f"no schedule fits {need / 3600:.2f} h of compute in the window")
    spot_h = spot_s / 3600.0
    if not math.isfinite(cost):
        raise InfeasibleError("the free-move bound's cost is not finite", "check the traces' prices")
    return OracleResult(start, cost, "free moves", spot_h, need / 3600.0 - spot_h)


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
