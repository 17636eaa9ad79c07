"""The best schedule hindsight can build when every (re)start costs what the sweep charges: an
*upper* bound on the clairvoyant optimum, to pair with the lower bound of
:mod:`spotwise.sim.restart_bound`.

The two bounds of a trace sweep's window say where the cheapest schedule that pays its restarts
lies: no cheaper than :func:`~spotwise.sim.restart_bound.restart_bound`, no dearer than the
schedule built here.  Where they are close, the gap between a strategy and them is the price of
not knowing the future, and where the lower one is above a goal, no strategy can reach the goal.

The schedule (exact dynamic programming on a grid).  Time is cut into steps of ``dt`` (the restart
``d`` divided into whole steps, at most 300 s); a step runs in one mode -- idle, spot at a place,
on-demand at a place -- or the job is done.  A stint's first ``ceil(d / dt)`` steps are its
(re)start and progress nothing; every other step progresses the place's speed times ``dt``.  The
state is ``(mode, steps of restart left, work done in steps)``; the value is the cheapest cost to
get there.  Everything is rounded against the schedule, so it is a schedule the sweep's model
would charge no less for: spot at a place only in steps whose whole span has capacity, at the
highest price in the step; every entry charged the longest of the start, rejoin and restart
delays; work counted in whole units (a step at the slowest place's speed, or at 1/8 of the
fastest's if that is coarser: slower places then do no work), rounded down; the coordinator
billed from the start until the step the work is done in ends (Can't Be Late, NSDI'24, Sec. 3
gives the model: the changeover delay ``d``, the deadline, spot or on-demand at each instant).
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from spotwise.errors import InfeasibleError
from spotwise.market.series import StepSeries
from spotwise.sim.oracle import live_places
from spotwise.sim.places import Place
from spotwise.sim.sweep_types import SweepJob


def _per_step(series: StepSeries, grid: np.ndarray, end: float, reduce: np.ufunc) -> np.ndarray:
    """Per step ``[grid[i], grid[i + 1])`` (the last ends at ``end``), the highest (``np.maximum``)
    or lowest (``np.minimum``) value in force during the step."""
    times = np.asarray(series.times, dtype=float)
    pts = np.unique(np.concatenate([grid, times[(times > grid[0]) & (times < end)]]))
    vals = np.asarray(series.value_at(pts), dtype=float)
    return reduce.reduceat(vals, np.searchsorted(pts, grid))


def hindsight_schedule(job: SweepJob, places: Sequence[Place], start: float) -> float:
    """The cost of the cheapest schedule on the grid (module docstring); InfeasibleError if none finishes."""
    live = live_places(job, places, start)
    d = max(job.restart_s, float(job.start_s or 0.0), float(job.rejoin_s or 0.0))
    r = max(1, math.ceil(d / 300.0)) if d > 0 else 0  # restart steps
    dt = d / r if d > 0 else 300.0
    steps = math.floor(job.deadline_s / dt)
    if steps < 1:
        raise InfeasibleError("the deadline is shorter than one step of the schedule's grid", "extend the deadline")
    grid = start + dt * np.arange(steps)
    n = len(live)
    # modes: 0..n-1 spot, n..2n-1 on-demand; per step: $ for the step (coordinator included), allowed, work units
    cost = np.empty((2 * n, steps))
    ok = np.ones((2 * n, steps), dtype=bool)
    gain = np.empty(2 * n, dtype=np.int64)
    coord = job.coordinator_per_hour / 3600.0 * dt
    # a work unit is a step at the slowest place's speed, but no finer than 1/8 of the fastest place's
    # step: a place slower than that cannot progress on the grid (rounded against the schedule)
    speeds = [p.speed for p in live]
    unit = 1.0 / max(min(speeds), max(speeds) / 8.0)
    for i, p in enumerate(live):
        price = _per_step(p.price, grid, grid[-1] + dt, np.maximum)
        cap_ok = np.ones(steps, dtype=bool) if p.capacity is None else _per_step(p.capacity, grid, grid[-1] + dt, np.minimum) >= 1
        cost[i] = price * job.workers * dt / 3600.0 + coord
        ok[i] = cap_ok & (price < p.on_demand_per_hour)
        cost[n + i] = p.on_demand_per_hour * job.workers * dt / 3600.0 + coord
        gain[i] = gain[n + i] = math.floor(p.speed * unit + 1e-9)
    need = math.ceil(job.work_s / (dt / unit) - 1e-9)  # work in units
    inf = math.inf
    k_n = max(r, 1)
    # value[m, k, w]: in mode m with k restart steps still to go after this one (k = 0: computing), w units done
    value = np.full((2 * n, k_n, need + 1), inf)
    idle = np.full(need + 1, inf)  # holding nothing: before the first start or between stints
    idle[0] = 0.0
    best = inf

    order = np.argsort(gain, kind="stable")  # modes of one gain side by side: each group is a slice (a view)
    cost, ok, gain = cost[order], ok[order], gain[order]
    edges = np.flatnonzero(np.diff(gain)) + 1
    groups = [(int(gain[a]), slice(int(a), int(b))) for a, b in zip(np.r_[0, edges], np.r_[edges, gain.size])]

    def advance(v: np.ndarray) -> np.ndarray:
        """Per mode (rows of ``v``), one step of computing: ``gain`` units more, capped at ``need``."""
        out = np.full_like(v, inf)
        for g, rows in groups:
            if g <= 0:
                out[rows] = v[rows]
                continue
            out[rows, g:] = v[rows, : need + 1 - g]
            out[rows, need] = np.minimum(out[rows, need], v[rows, max(0, need + 1 - g):].min(axis=1))
        return out

    for s in range(steps):
        held = value.min(axis=(0, 1))
        enter = np.minimum(idle, held)  # a stint may start from anything held, or from nothing
        nv = np.full_like(value, inf)
        if r >= 2:
            nv[:, : r - 1] = value[:, 1:r]                              # restarting: one step less to go
        nv[:, 0] = np.minimum(nv[:, 0], advance(value[:, 0]))           # computing
        if r >= 1:
            nv[:, r - 1] = np.minimum(nv[:, r - 1], enter[None, :])     # entering: this step restarts
        else:
            nv[:, 0] = np.minimum(nv[:, 0], advance(np.broadcast_to(enter, (2 * n, need + 1))))
        nv += cost[:, s][:, None, None]
        nv[~ok[:, s]] = inf
        idle = np.minimum(idle, held) + coord
        value = nv
        best = min(best, float(value[:, 0, need].min()))
    if not math.isfinite(best):
        raise InfeasibleError(f"no schedule on the grid finishes {job.work_s / 3600:.2f} h of work in the window",
                              "extend the deadline")
    return best
