"""The restart-aware lower bound of a trace sweep: what no strategy -- not even one that knows the
future -- can beat once every (re)start costs what the sweep charges for it.

:func:`spotwise.sim.oracle.free_move_bound` lets the job hop to the cheapest place with capacity at
every instant for free.  Every real schedule pays a restart each time it (re)acquires instances
-- the first start, a rejoin after a revocation, a move, a switch to on-demand -- ``d`` seconds
billed at the new capacity's price with no progress (Can't Be Late, NSDI'24, Sec. 3's
changeover delay ``d``; the sweep's model, :mod:`spotwise.sim.sweep`).  On traces where spot
vanishes every few hours the free-move bound is therefore out of reach for *any* schedule, and a
ratio against it mixes the policy's mistakes with costs nobody can avoid.  This module computes a
bound that charges them.

The problem.  A schedule is a sequence of *stints*: ``L`` seconds in one mode (spot at place
``i``, allowed only while ``i`` has capacity; on-demand at place ``i``; or idle) paying ``r``
$/s (instances and coordinator) and progressing ``s * max(0, L - d)`` seconds of work
(``s`` the place's speed); it must do ``W`` seconds of work by the deadline.  Minimise the cost.

The bound (Lagrangian relaxation; weak duality).  For a price ``lam >= 0`` on progress,

    g(lam) = min over schedules of  sum over stints [ (r - lam s) L + lam s d ]  +  lam W

is a lower bound on the optimum for every ``lam``: the bracket equals the stint's true cost
minus ``lam`` times its progress when ``L >= d`` and exceeds the true ``r L`` otherwise, so for the
optimal schedule ``s*`` (no stint shorter than ``d``: such a stint costs money and progresses
nothing, idling instead is cheaper) ``g(lam) <= cost(s*) - lam (progress(s*) - W) <= cost(s*)``.
With progress priced, the minimisation needs no progress dimension: a dynamic programme over the
window's stretches of constant prices and capacity (switching only at stretch boundaries is optimal:
within a stretch the objective is linear in every switching time) and the ``2n + 3`` modes (idle
before the first start, spot or on-demand at each of ``n`` places, idle after a start, done), with
an entry charge ``lam s_j d`` into mode ``j``.  ``g`` is concave in ``lam`` (a minimum of affine
functions); :func:`restart_bound` maximises it on a grid refined around the best point.

The coordinator is billed from the start until the job is done, idle stretches included, as the
sweep bills it: a *done* mode (free, never left) ends the schedule; ending it before the work is
done only forfeits progress, which the relaxation prices.  Every schedule that does work starts at
least once, so the programme tracks whether it has (done is reachable only after a start); the
bound is then exact for a job at one place that never loses capacity.

What the bound leaves out, each making it lower (so it stays a bound): billing minimums,
checkpoint egress on moves, and the difference between a rejoin, a start and a restart (it
charges the smallest of the three for every entry).  The sweep's tests
check, window by window, that no strategy that meets the deadline pays less (a run past the
deadline uses capacity outside the window, and the ``no-interruptions`` estimate ignores outages).

How loose it can be: the dual prices progress linearly, so it may sit below the cheapest schedule
by up to about one restart per window -- e.g. a job that must move once to finish is bounded by
the straight line between "stop where capacity ends" and "move and run to the deadline"
(``tests/test_restart_bound.py`` works such cases out by hand).
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from spotwise.errors import InfeasibleError
from spotwise.sim.oracle import live_places, window_cuts
from spotwise.sim.places import Place
from spotwise.sim.sweep_types import SweepJob

#: points of the grid over the progress price, per refinement round
_GRID = 48
_ROUNDS = 4


def _stretches(job: SweepJob, places: Sequence[Place], start: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(lengths s, rates $/s per mode and stretch, allowed per mode and stretch, speeds per mode)``.

    Mode 0 waits before the first start (the coordinator alone), modes ``1..n`` are spot and
    ``n+1..2n`` on-demand at each place, mode ``2n+1`` waits after a start (the coordinator alone)
    and mode ``2n+2`` is *done* (nothing billed; entered once started, never left)."""
    live = live_places(job, places, start)
    cuts = window_cuts(job, live, start)
    lengths = np.diff(cuts)
    mids = cuts[:-1]
    n, k = len(live), mids.size
    rates = np.zeros((2 * n + 3, k))
    rates[0] = rates[2 * n + 1] = job.coordinator_per_hour / 3600.0
    allowed = np.ones((2 * n + 3, k), dtype=bool)
    speeds = np.zeros(2 * n + 3)
    for i, p in enumerate(live):
        spot = np.asarray(p.price.value_at(mids), dtype=float)
        has = np.ones(k, dtype=bool) if p.capacity is None else np.asarray(p.capacity.value_at(mids)) >= 1
        rates[1 + i] = (spot * job.workers + job.coordinator_per_hour) / 3600.0
        allowed[1 + i] = has & (spot < p.on_demand_per_hour)
        rates[1 + n + i] = (p.on_demand_per_hour * job.workers + job.coordinator_per_hour) / 3600.0
        speeds[1 + i] = speeds[1 + n + i] = p.speed
    return lengths, rates, allowed, speeds


def _dual(lams: np.ndarray, lengths: np.ndarray, rates: np.ndarray, allowed: np.ndarray, speeds: np.ndarray,
          d: float, work: float) -> np.ndarray:
    """``g(lam)`` for each progress price in ``lams`` (module docstring): one pass of the programme.

    Every schedule that does any work starts at least once, so *done* is reachable only from a
    started mode: without that, mixing with "do nothing" (the Lagrangian's convex hull through the
    origin) would spread the first start's cost over the work and loosen the bound."""
    m = rates.shape[0]
    run = slice(1, m - 2)  # the running modes
    entry = lams[:, None] * speeds[None, run] * d
    value = np.full((lams.size, m), np.inf)
    value[:, 0] = 0.0  # at the start the job holds nothing (the coordinator is up)
    lam_s = lams[:, None] * speeds[None, :]
    for k in range(lengths.size):
        best = value[:, :-1].min(axis=1, keepdims=True)        # any mode but done may (re)start
        # started: running or waiting after a start, or a start of no length (its entry charge only):
        # the schedules the programme compares switch at stretch boundaries, so a stint that would
        # end inside the stretch it began in shrinks to nothing -- it must still count as a start
        started = np.minimum(value[:, 1:-1].min(axis=1), best[:, 0] + entry.min(axis=1))
        value[:, run] = np.minimum(value[:, run], best + entry)
        value[:, -2] = np.minimum(value[:, -2], started)
        value[:, -1] = np.minimum(value[:, -1], started)
        value[:, ~allowed[:, k]] = np.inf
        value += (rates[None, :, k] - lam_s) * lengths[k]
    return value[:, 1:].min(axis=1) + lams * work


def _maximiser(job: SweepJob, lengths: np.ndarray, rates: np.ndarray, allowed: np.ndarray, speeds: np.ndarray,
               d: float) -> tuple[float, float]:
    """``(lam*, g(lam*))``: the dual's maximum on a grid refined ``_ROUNDS`` times around the best point."""
    work = float(job.work_s)
    # a progress price above the dearest mode's cost per unit of work (restart included) buys
    # every second it can: the dual's slope there is W minus the most work that fits, so the
    # maximiser lies below it unless the job cannot fit (then the bound grows without limit)
    run = speeds > 0
    hi = float(np.max(rates[run] / speeds[run, None])) * (1.0 + job.deadline_s / max(job.deadline_s - d, 1.0)) * 4.0
    lo = 0.0
    best_lam, best = 0.0, -math.inf
    for _ in range(_ROUNDS):
        lams = np.linspace(lo, hi, _GRID)
        g = _dual(lams, lengths, rates, allowed, speeds, d, work)
        i = int(np.argmax(g))
        if g[i] > best:
            best, best_lam = float(g[i]), float(lams[i])
        step = lams[1] - lams[0]
        lo, hi = max(0.0, lams[i] - step), lams[i] + step
    return best_lam, best


def restart_bound(job: SweepJob, places: Sequence[Place], start: float) -> float:
    """A lower bound on the cost of any schedule from ``start`` that pays its restarts (module docstring)."""
    if job.work_s <= 0:
        return 0.0
    d = min(job.restart_s, float(job.start_s or 0.0), float(job.rejoin_s or 0.0))
    lengths, rates, allowed, speeds = _stretches(job, places, start)
    best = _maximiser(job, lengths, rates, allowed, speeds, d)[1]
    if not math.isfinite(best):
        raise InfeasibleError("the restart-aware bound is not finite", "check the traces' prices")
    return best

