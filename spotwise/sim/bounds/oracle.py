"""The hindsight oracle of a trace sweep: the cheapest way the job could have run, knowing the future.

For one start time the oracle sees every place's whole price and capacity history over the
window ``[start, start + deadline)`` and, for each place (zone, instance type), buys the
cheapest compute time that finishes the job by the deadline: the window splits into stretches
of constant price and capacity; in each the job of ``N`` = ``workers`` nodes may run ``n`` of them,
``n`` from ``min_nodes`` (1 elastic, ``N`` a gang) to ``N``: ``s = min(k, n)`` on spot where the
place gives ``k`` spot nodes (:meth:`~spotwise.sim.sweep.places.Place.nodes_at`; spot only where its
price is below on-demand) and ``n - s`` on on-demand, doing ``speed * rate(n)`` seconds of work per
second (:meth:`~spotwise.sim.sweep.records.SweepJob.rate`) for ``s * spot + (n - s) * on-demand +
coordinator`` $/s (issue 31: partial capacity).  Running a stretch partly at one count and partly
at another, or partly not at all, reaches every point of the lower convex hull of these options
and the origin; the oracle buys work cheapest first from the hulls' segments (a fractional
knapsack: greedy is optimal, each stretch's segments coming in the order of their slopes).  For
one node, or a 0/1 series, each stretch has one option -- spot or on-demand at ``N`` nodes, as
before.  The oracle is the cheapest place.

It pays the coordinator only while it computes and pays no restart, no billing minimum and no
move.  It never moves between places: ``min`` over places of a single-place schedule -- so it is a
lower bound only for strategies that stay where they start.  A strategy that migrates can beat it
(issue 23 item 0).

:func:`free_move_bound` is a lower bound for every strategy: at every instant the job may run at whichever
place and node count is cheapest per unit of progress then, moving and resizing for free, and it
buys the cheapest such instants first until the work is done (the LP of a fractional
multiple-choice knapsack: per stretch of constant prices and capacity, at most the stretch's
length at one place and count; greedy over the stretches' convex-hull segments -- every place's
options together -- is optimal).  A schedule of the sweep holding ``a`` computing nodes pays at
least the cheapest price of ``a`` nodes there (nodes that restart are billed and do no work), so
it lies on or above the hull.  No online strategy -- migrating or not -- can pay less; the sweep reports both columns
and the goal is stated against this one.  It charges no restart, so on traces where capacity
comes and goes every few hours no schedule comes near it:
:func:`spotwise.sim.bounds.restart.restart_bound` is the lower bound that charges them, and
:func:`spotwise.sim.bounds.hindsight.hindsight_schedule` the matching upper bound on what hindsight can do.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from spotwise.errors import InfeasibleError
from spotwise.sim.sweep.places import Place
from spotwise.sim.sweep.records import OracleResult, SweepJob


def rate_table(job: SweepJob) -> np.ndarray:
    """``rate(n)`` for ``n = 0..workers`` (:meth:`SweepJob.rate`: 0 below ``min_nodes``)."""
    return np.array([job.rate(n) for n in range(job.workers + 1)], dtype=float)


def node_options(job: SweepJob, p: Place, mids: np.ndarray, strict: bool = True
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per stretch (``mids``) and node count ``n = min_nodes..workers`` at ``p`` (issue 31): ``(work per
    second, $ per second, spot work per second, spot nodes)``, each ``(stretches, counts)``.

    ``n`` nodes hold ``s = min(k, n)`` spot nodes (``k``: :meth:`Place.nodes_at`; spot only where its
    price is below on-demand -- ``strict=False``: not above it) and ``n - s`` on-demand ones, and do
    ``speed * rate(n)`` seconds of work per second; the coordinator is in the $; the spot work is the
    work times ``s / n`` (the nodes' share).  For one node, or a 0/1 series, ``s`` is all or nothing."""
    n = np.arange(job.min_nodes, job.workers + 1)
    price = np.asarray(p.price.value_at(mids), dtype=float)
    k = p.nodes_at(mids, job.workers)
    use = price < p.on_demand_per_hour if strict else price <= p.on_demand_per_hour
    s = np.where(use[:, None], np.minimum(k[:, None], n[None, :]), 0)
    cost = (s * price[:, None] + (n[None, :] - s) * p.on_demand_per_hour + job.coordinator_per_hour) / 3600.0
    work = np.broadcast_to(p.speed * rate_table(job)[n], cost.shape)
    return work, cost, work * (s / n[None, :]), s


def hull_segments(work: np.ndarray, cost: np.ndarray, spot: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The lower convex hull, from the origin, of each row's options (``work``, ``cost`` and ``spot``
    rates, ``(rows, options)``): ``(row, marginal $ per work, work, spot work)`` of every hull
    segment, the segments of a row in the order of their slopes (gift wrapping, vectorised over the
    rows: as many rounds as the longest hull has vertices)."""
    rows = work.shape[0]
    cw, cc, cs = np.zeros(rows), np.zeros(rows), np.zeros(rows)
    out_r, out_u, out_w, out_s = [], [], [], []
    live = np.arange(rows)
    while live.size:
        w, c = work[live], cost[live]
        dw = w - cw[live, None]
        ok = dw > 1e-12 * np.maximum(1.0, np.abs(w))
        slope = np.where(ok, (c - cc[live, None]) / np.where(ok, dw, 1.0), np.inf)
        smin = slope.min(axis=1)
        has = np.isfinite(smin)
        if not has.any():
            break
        tie = ok & (slope <= (smin + 1e-12 * np.abs(smin))[:, None])
        j = np.argmax(np.where(tie, w, -np.inf), axis=1)
        live, j, smin = live[has], j[has], smin[has]
        wj, cj, sj = work[live, j], cost[live, j], spot[live, j]
        out_r.append(live)
        out_u.append(smin)
        out_w.append(wj - cw[live])
        out_s.append(sj - cs[live])
        cw[live], cc[live], cs[live] = wj, cj, sj
    if not out_r:
        return np.zeros(0, dtype=np.int64), np.zeros(0), np.zeros(0), np.zeros(0)
    return np.concatenate(out_r), np.concatenate(out_u), np.concatenate(out_w), np.concatenate(out_s)


def _buy(job: SweepJob, options: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]], lengths: np.ndarray,
         why: str) -> tuple[float, float]:
    """``(cost, spot work seconds)`` of ``job.work_s`` seconds of work bought cheapest first from the
    hull segments of every stretch (``options``: :func:`node_options` of each place)."""
    work = np.concatenate([o[0] for o in options], axis=1)
    cost = np.concatenate([o[1] for o in options], axis=1)
    spot = np.concatenate([o[2] for o in options], axis=1)
    row, unit, dw, ds = hull_segments(work, cost, spot)
    amount = dw * lengths[row]
    frac = np.clip(ds / np.where(dw > 0, dw, 1.0), -1.0, 1.0)
    return cheapest_first(unit, amount, frac, float(job.work_s), why)


def place_oracle(job: SweepJob, place: Place, start: float) -> tuple[float, float, float]:
    """``(cost, spot hours, on-demand hours)`` of the cheapest schedule at one place: per stretch the
    lower convex hull of its node counts (:func:`node_options`), the cheapest work first.  The hours
    are of the whole job (work at the place's speed): a share of the nodes on spot counts as that
    share of an hour."""
    end = start + job.deadline_s
    cuts = np.concatenate(([start], place.change_points(start, end), [end]))
    need = job.work_s / place.speed / 3600.0
    cost, spot_work = _buy(job, [node_options(job, place, cuts[:-1])], np.diff(cuts),
                           f"{place.id} cannot fit {need:.2f} h of compute in the window")
    sp = spot_work / place.speed / 3600.0
    return cost, sp, float(need - sp)


def cheapest_first(unit: np.ndarray, amount: np.ndarray, spot: np.ndarray, need: float, why: str) -> tuple[float, float]:
    """The fractional knapsack of unit weights: ``need`` bought from the items (``unit`` price each, ``amount``
    available) cheapest first; ``(cost, amount bought from spot)`` -- ``spot``: per item, whether it is
    spot, or the share of it that is.  InfeasibleError when short."""
    order = np.argsort(unit, kind="stable")
    cum = np.cumsum(amount[order])
    k = int(np.searchsorted(cum, need - 1e-9 * max(1.0, need)))
    if k >= order.size:
        raise InfeasibleError(why, "extend the deadline")
    take = amount[order].copy()
    take[k] = need - (cum[k - 1] if k > 0 else 0.0)
    take[k + 1:] = 0.0
    return float(np.sum(take * unit[order])), float(np.sum(take * spot[order]))


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
    mids = cuts[:-1]
    need = float(job.work_s)
    cost, spot_s = _buy(job, [node_options(job, p, mids) for p in live], np.diff(cuts),
                        f"no schedule fits {need / 3600:.2f} h of compute in the window")
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
