"""The best schedule hindsight can build when every (re)start costs what the sweep charges: an
*upper* bound on the clairvoyant optimum, to pair with the lower bound of
:mod:`spotwise.sim.bounds.restart`.

The two bounds of a trace sweep's window say where the cheapest schedule that pays its restarts
lies: no cheaper than :func:`~spotwise.sim.bounds.restart.restart_bound`, no dearer than the
schedule built here.  Where they are close, the gap between a strategy and them is the price of
not knowing the future, and where the lower one is above a goal, no strategy can reach the goal.

The schedule (exact dynamic programming on a grid).  Time is cut into steps of ``dt`` (the restart
``d`` divided into whole steps, at most 300 s); a step runs in one mode or the job is idle or
done.  The modes, per place: *spot* -- the spot nodes the place gives through the whole step (none
where the step's highest spot price is not below on-demand), no on-demand: for one node, or a 0/1
series, the job's ``N`` nodes or none; *on-demand* -- ``N`` on-demand nodes; and, at a place whose
trace counts nodes (issue 31), *topped up* -- those spot nodes plus on-demand ones up to ``N``.
Entering a mode (from idle or another mode) is a (re)start: its first ``ceil(d / dt)`` steps
progress nothing.  Within a mode the nodes follow the trace at step boundaries (the others
computing on, as in the sweep): a node that joins -- a spot node the place gives again, an
on-demand node that replaces a lost one -- computes only after ``ceil(d / dt)`` steps, so a step
progresses ``speed * rate(a) * dt`` with ``a`` the nodes held through the step and the restart
steps before it (spot), or ``N`` less the nodes that joined at the last ``ceil(d / dt)`` boundaries
(topped up) -- :meth:`~spotwise.sim.sweep.records.SweepJob.rate`, 0 below ``min_nodes``.  The state
is ``(mode, work done in units)`` (the restart in progress kept as the last ``ceil(d / dt)``
entries); the value is the cheapest cost to get there.

Everything is rounded against the schedule, so it is a schedule the sweep's model would charge
no less for: spot only through whole steps, at the step's highest price; every entry and every
node's join charged the longest of the start, rejoin and restart delays, in whole steps; a
change of mode a full restart of every node (the sweep's model restarts only the new ones);
work counted in whole units, rounded down -- a unit is a step at the slowest place's speed (but
no finer than 1/8 of the fastest's: slower places then do no work), divided by ``N`` where some
place's trace counts nodes and the job trains on fewer than ``N`` (so that one node of ``N``
progresses; by the fewest nodes' rate for rates below ``1 / N``); the coordinator billed from the start until the step the work is done in
ends (Can't Be Late, NSDI'24, Sec. 3 gives the model: the changeover delay ``d``, the deadline,
spot or on-demand at each instant).  For one node, or 0/1 series, the schedule is the one of the
spot and on-demand modes as before.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from spotwise.errors import InfeasibleError
from spotwise.market.series import StepSeries
from spotwise.sim.bounds.oracle import live_places, rate_table
from spotwise.sim.sweep.places import Place
from spotwise.sim.sweep.records import SweepJob


def _per_step(series: StepSeries, grid: np.ndarray, end: float, reduce: np.ufunc) -> np.ndarray:
    """Per step ``[grid[i], grid[i + 1])`` (the last ends at ``end``), the highest (``np.maximum``)
    or lowest (``np.minimum``) value in force during the step."""
    times = np.asarray(series.times, dtype=float)
    pts = np.unique(np.concatenate([grid, times[(times > grid[0]) & (times < end)]]))
    vals = np.asarray(series.value_at(pts), dtype=float)
    return reduce.reduceat(vals, np.searchsorted(pts, grid))


def _held_spot(p: Place, grid: np.ndarray, end: float, price: np.ndarray, workers: int) -> np.ndarray:
    """Per step, the spot nodes ``p`` gives through the whole step (0 where the highest price in
    the step is not below on-demand): :meth:`Place.nodes_at` of the step's lowest capacity."""
    steps = grid.size
    if p.capacity is None:
        k = np.full(steps, workers, dtype=np.int64)
    else:
        low = _per_step(p.capacity, grid, end, np.minimum)
        if p.counts_nodes:
            k = np.minimum(np.floor(low + 1e-9).astype(np.int64), workers)
        else:
            k = np.where(low >= 1, workers, 0).astype(np.int64)
    return np.where(price < p.on_demand_per_hour, k, 0)


def _window_min(x: np.ndarray, r: int) -> np.ndarray:
    """``min(x[max(0, t - r):t + 1])`` for every ``t``."""
    out = x.copy()
    for j in range(1, r + 1):
        np.minimum(out[j:], x[:-j], out=out[j:])
    return out


def _joined(s: np.ndarray, r: int) -> np.ndarray:
    """Nodes that joined at the last ``r`` step boundaries before each step ends (``|s[b] - s[b-1]|``
    for ``b`` in ``(t - r, t]``): on-demand nodes replacing lost spot ones, or spot nodes replacing
    on-demand ones."""
    change = np.concatenate([[0], np.abs(np.diff(s))])
    cum = np.concatenate([[0], np.cumsum(change)])
    t = np.arange(s.size)
    return cum[t + 1] - cum[np.maximum(0, t - r + 1)]


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
    end = grid[-1] + dt
    nodes = job.workers
    partial = nodes > 1 and any(p.counts_nodes for p in live)
    rates = rate_table(job)
    # a work unit is a step at the slowest place's speed, but no finer than 1/8 of the fastest place's
    # step: a place slower than that cannot progress on the grid (rounded against the schedule);
    # divided by N (or more, for rates below 1/N) where some place counts nodes and the job trains on fewer
    speeds = [p.speed for p in live]
    unit = 1.0 / max(min(speeds), max(speeds) / 8.0)
    if partial and job.min_nodes < nodes:  # a gang computes at rate(N) or not at all
        low = float(rates[rates > 0].min())
        unit *= max(nodes, math.ceil(1.0 / low - 1e-9))
    coord = job.coordinator_per_hour / 3600.0 * dt
    # modes: per place spot, on-demand (and topped up); per step: $ for the step (coordinator included), work units
    cost, gain = [], []
    for p in live:
        price = _per_step(p.price, grid, end, np.maximum)
        s = _held_spot(p, grid, end, price, nodes)
        units = np.floor(p.speed * rates * unit + 1e-9).astype(np.int64)  # per step, by nodes computing
        cost.append(price * s * dt / 3600.0 + coord)
        gain.append(units[_window_min(s, r)])
        cost.append(np.full(steps, p.on_demand_per_hour * nodes * dt / 3600.0 + coord))
        gain.append(np.full(steps, units[nodes]))
        if partial and p.counts_nodes:
            cost.append((price * s + p.on_demand_per_hour * (nodes - s)) * dt / 3600.0 + coord)
            gain.append(units[np.maximum(0, nodes - _joined(s, r))])
    return _programme(job, np.array(cost), np.array(gain), r, coord, unit, dt)


def _programme(job: SweepJob, cost: np.ndarray, gain: np.ndarray, r: int, coord: float, unit: float, dt: float) -> float:
    """The dynamic programme over the steps: ``cost`` and ``gain`` per mode and step."""
    modes, steps = cost.shape
    need = math.ceil(job.work_s / (dt / unit) - 1e-9)  # work in units
    inf = math.inf
    # value[m, w]: computing in mode m (its restart done), w units done; a stint entered at step s
    # restarts through steps s..s+r-1 and computes from s+r: its value then is what it entered
    # with (kept in ``entered``) plus the mode's cost of those steps
    value = np.full((modes, need + 1), inf)
    idle = np.full(need + 1, inf)  # holding nothing: before the first start or between stints
    idle[0] = 0.0
    entered = np.full((max(r, 1), need + 1), inf)
    cum = np.concatenate([np.zeros((modes, 1)), np.cumsum(cost, axis=1)], axis=1)
    best = inf
    nv = np.empty_like(value)
    for s in range(steps):
        held = value.min(axis=0)
        enter = np.minimum(idle, held)  # a stint may start from anything held, or from nothing
        for m in range(modes):  # computing: gain units more, capped at need
            g = int(gain[m, s])
            if g <= 0:
                nv[m] = value[m]
                continue
            nv[m, :g] = inf
            nv[m, g:] = value[m, : need + 1 - g]
            nv[m, need] = min(nv[m, need], value[m, max(0, need + 1 - g):].min())
        nv += cost[:, s][:, None]
        if r >= 1:
            entered[s % r] = enter
            if s >= r - 1:  # entered at s - r + 1, restarted through s
                np.minimum(nv, entered[(s - r + 1) % r][None, :] + (cum[:, s + 1] - cum[:, s - r + 1])[:, None], out=nv)
        else:
            for m in range(modes):
                g = int(gain[m, s])
                shifted = np.full(need + 1, inf)
                shifted[max(g, 0):] = enter[: need + 1 - max(g, 0)]
                if g > 0:
                    shifted[need] = min(shifted[need], enter[need + 1 - g:].min())
                np.minimum(nv[m], shifted + cost[m, s], out=nv[m])
        idle = np.minimum(idle, held) + coord
        value, nv = nv, value
        best = min(best, float(value[:, need].min()))
    if not math.isfinite(best):
        raise InfeasibleError(f"no schedule on the grid finishes {job.work_s / 3600:.2f} h of work in the window",
                              "extend the deadline")
    return best
