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
delays; work counted in whole steps, rounded down at speeds other than one; the coordinator
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
    unit = 1.0 / min(p.speed for p in live)  # work units of the slowest place's step
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

    def advance(v: np.ndarray, g: int, c: float) -> np.ndarray:
        out = np.full(need + 1, inf)
        if g <= 0:
            return v + c
        out[g:] = v[: need + 1 - g] + c
        out[need] = min(out[need], float(np.min(v[max(0, need + 1 - g):])) + c)
        return out

    for s in range(steps):
        held = value.min(axis=(0, 1))
        enter = np.minimum(idle, held)  # a stint may start from anything held, or from nothing
        nv = np.full_like(value, inf)
        for m in range(2 * n):
            if not ok[m, s]:
                continue
            c, g = cost[m, s], int(gain[m])
            if r >= 2:
                nv[m, : r - 1] = value[m, 1:r] + c      # restarting: one step less to go
            nv[m, 0] = np.minimum(nv[m, 0], advance(value[m, 0], g, c))  # computing
            if r >= 1:
                nv[m, r - 1] = np.minimum(nv[m, r - 1], enter + c)   # entering: this step restarts
            else:
                nv[m, 0] = np.minimum(nv[m, 0], advance(enter, g, c))
        idle = np.minimum(idle, held) + coord
        value = nv
        best = min(best, float(value[:, 0, need].min()))
    if not math.isfinite(best):
        raise InfeasibleError(f"no schedule on the grid finishes {job.work_s / 3600:.2f} h of work in the window",
                              "extend the deadline")
    return best
