"""Trace sweeps: one job, many start times over real price/availability traces, several strategies.

``spotwise simulate SPEC --trace ...`` replays each strategy from every start time and tabulates
cost, time, the probability of meeting the deadline, and cost against the hindsight oracle
(:mod:`spotwise.sim.bounds.oracle`) and against on-demand.

It is the one executor that does not run under the job controller
(:mod:`spotwise.control.controller`), on purpose: a sweep replays thousands of
jobs, and the controller's per-step loop (every mini-batch, every commit) would make each one cost
as much as a step-by-step simulation.  The engine is event-driven and exact for
piecewise-constant markets: between two events (a price or capacity change at the job's place,
the end of a restart, the job's completion, or a decision tick) nothing changes, so progress
advances in closed form -- ``speed * dt`` compute seconds -- instead of one mini-batch at a time.
That is what makes a sweep of thousands of 24-hour jobs take seconds
(``benchmarks/trace_sweep.py`` counts simulated worker-iterations per second).  What it shares with ``spotwise run`` and the step-by-step simulator
(:func:`spotwise.sim.simulate.simulate_job`): the policies (the same :class:`Policy` objects,
consulted with the same :class:`Observation` and acted on through the same decisions:
:class:`SwitchMarket`, :class:`Migrate`), the bid rule (:func:`spotwise.planner.bids.thm3_bid`),
the :class:`~spotwise.market.billing.Ledger` and billing policy (per-second, 60 s minimum, the
coordinator billed on-demand for the whole run), and the trace loaders.
``benchmarks/trace_sweep.py`` checks its time and cost against the step-by-step simulator.

Model (:mod:`spotwise.sim.sweep.window`, the executor of one window; issue 31): the job is ``workers``
nodes of data-parallel training at one place at a time (Can't Be Late's single-job model, with
node counts):

* at a spot place the job holds the spot nodes the place gives (:meth:`Place.nodes_at`:
  ``min(count, N)`` on a count trace, all or none on a 0/1 trace) and trains on them when there
  are at least ``min_workers``, at ``rate(k)`` of its full width; committed progress is kept (the
  coordinator holds it: spotwise survives revocations in place), so a revocation costs the
  restart ``d`` of the nodes that come back, not lost work;
* on-demand nodes may fill what spot does not give (:class:`~spotwise.policies.base.TopUp`);
* every node acquired costs seconds billed at its price with no progress: ``restart_s`` after a
  switch of market or a move (a move across regions also ships the checkpoint: egress),
  ``start_s`` for the first start and ``rejoin_s`` for a node joining at the same place (both
  default to ``restart_s``);
* on-demand capacity is always there, at the catalog's on-demand price.

Hold-out: a strategy decides only from what is known at the time -- the prices in force, and for
the Thm 3 bid the ``history_s`` before the start.  The oracle alone sees the future.
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np

from spotwise.errors import InputError
from spotwise.market.series import iso8601
from spotwise.policies.base import Policy
from spotwise.policies.registry import make_policy
from spotwise.policies.user import guard
from spotwise.sim.bounds.oracle import free_move_bound, hindsight_oracle
from spotwise.sim.sweep.partial import check_reading
from spotwise.sim.sweep.places import Place
from spotwise.sim.bounds.hindsight import hindsight_schedule
from spotwise.sim.bounds.restart import restart_bound
from spotwise.sim.sweep.window import WindowRun
from spotwise.sim.sweep.records import (DEFAULT_STRATEGIES, STRATEGIES, BidRule, OracleResult, StartRule, Strategy,  # noqa: F401
                                        StrategySummary, SweepJob, SweepResult, WindowResult, parse_strategies)

_EPS = 1e-6


def run_window(job: SweepJob, places: Sequence[Place], home: Place, start: float, strategy: Strategy, *,
               tick_s: float = 600.0, horizon: float | None = None) -> WindowResult:
    """Run ``strategy`` from ``start``; the run may go past the deadline (a miss) up to ``horizon``
    (default: three deadlines, or the end of the data first: the home trace's for a strategy
    that starts at home, any trace's for one that picks its place)."""
    if horizon is None:  # a home-free strategy (cheapest place) may run wherever the data lasts
        data_end = home.end if strategy.start == "home" else max(p.end for p in places)
        horizon = min(data_end, start + 3 * job.deadline_s)
    policies = [make_policy(n) if isinstance(n, str) else guard(n) if isinstance(n, Policy) else make_policy(n[0], n[1])
                for n in strategy.policies]
    return WindowRun(job, places, home, start, strategy, policies, tick_s, horizon).run()


# ------------------------------------------------------------------------------------ the sweep

def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval for a proportion ``k / n`` (95 % by default)."""
    if n == 0:
        return (0.0, 1.0)
    p = k / n
    den = 1 + z * z / n
    mid = (p + z * z / (2 * n)) / den
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return (max(0.0, mid - half), min(1.0, mid + half))


#: The most window runs (start times x homes x strategies) one sweep may do unless told otherwise
#: (``--max-runs``).  A run costs 1-3 ms, more for strategies with policies (the README's sweep of
#: ``examples/p3-24h-traces.yaml`` over the real AWS p3 traces, 23,120 runs, took 25 s on 2 cores;
#: 30,455 runs of the same job on a three-point trace 55 s; 3,656 runs of on-demand and spotwise
#: 11 s), so the default bounds a sweep to a few minutes: a trace spanning decades (three points
#: from 1970 to 2020: 365,445 runs at a start every 6 h) or a tiny ``--starts`` is refused at once,
#: with the step that would fit, instead of running for hours.
MAX_RUNS: int = 60_000


def start_range(places: Sequence[Place], job: SweepJob, every_s: float, *, first: float | None = None,
                last: float | None = None, warmup_s: float | None = None) -> tuple[float, float, int]:
    """``(lo, hi, count)`` of :func:`window_starts` without building the list (a huge count is
    refused by :func:`check_sweep_size` before any memory is spent on it)."""
    if not (math.isfinite(every_s) and every_s > 0):
        raise InputError(f"--starts step must be > 0, got {every_s!r}", "e.g. --starts 6h", "--starts")
    lo = min(p.start for p in places) + (job.history_s if warmup_s is None else warmup_s)
    hi = max(p.end for p in places) - job.deadline_s
    if first is not None:
        lo = max(lo, first)
    if last is not None:
        hi = min(hi, last)
    if hi < lo:
        raise InputError("the traces are too short for one window (history before the start, the deadline after it)",
                         "use longer traces, a shorter --history, or a shorter deadline", "--trace")
    return lo, hi, int(math.floor((hi + 1e-6 - lo) / every_s)) + 1


def window_starts(places: Sequence[Place], job: SweepJob, every_s: float, *, first: float | None = None,
                  last: float | None = None, warmup_s: float | None = None) -> list[float]:
    """Start times every ``every_s`` seconds such that the home trace has ``warmup_s`` of history
    before each (hold-out decisions need it) and the deadline ends inside the data."""
    lo, hi, _ = start_range(places, job, every_s, first=first, last=last, warmup_s=warmup_s)
    return [float(t) for t in np.arange(lo, hi + 1e-6, every_s)]


def sweep_runs(n_starts: int, n_homes: int, strategies: Sequence[Strategy]) -> int:
    """Window runs a sweep does at most: a home strategy runs per start and home, a
    cheapest-place strategy once per start (see :func:`sweep`)."""
    per_start = sum(n_homes if s.start == "home" else 1 for s in strategies)
    return n_starts * per_start


def _span(seconds: float) -> str:
    """A duration for a message: years beyond one, else :func:`~spotwise.reports.fmt_duration`."""
    from spotwise.reports import fmt_duration

    year = 365.25 * 86400.0
    if seconds < 1:
        return f"{seconds:g} s"
    return f"{seconds / year:.1f} years" if seconds >= year else fmt_duration(seconds)


def _nice_step(seconds: float) -> str:
    """The smallest whole number of hours (or days) >= ``seconds``, as ``--starts`` takes it."""
    if seconds <= 3600:
        return f"{max(1, math.ceil(seconds / 60))}m"
    if seconds <= 2 * 86400:
        return f"{math.ceil(seconds / 3600)}h"
    return f"{math.ceil(seconds / 86400)}d"


def check_sweep_size(n_starts: int, n_homes: int, strategies: Sequence[Strategy], every_s: float, span_s: float,
                     max_runs: int = MAX_RUNS, places: Sequence[Place] = ()) -> int:
    """Refuse (exit 2) a sweep of more than ``max_runs`` window runs; returns the run count.

    The message gives the sizes, the ``--starts`` step that fits, and -- when the traces have
    long stretches without a point (a three-point trace spanning fifty years) -- the longest gap.
    """
    runs = sweep_runs(n_starts, n_homes, strategies)
    if runs <= max_runs:
        return runs
    per_start = max(1, sweep_runs(1, n_homes, strategies))
    fit = _nice_step(span_s / max(1, max_runs // per_start - 1)) if max_runs >= per_start else None
    gaps = [float(np.max(np.diff(p.price.times))) for p in places if len(p.price.times) > 1]
    gap = f"; the longest gap between two points of the traces is {_span(max(gaps))}" if gaps and max(gaps) > 30 * 86400 else ""
    raise InputError(
        f"the sweep would do {runs:,} window runs ({n_starts:,} start times every {_span(every_s)} over "
        f"{_span(span_s)} of trace x {n_homes} home place(s) x {len(strategies)} strategies), more than the "
        f"{max_runs:,} allowed (1-3 ms each){gap}",
        (f"pass --starts {fit} or coarser, " if fit else "")
        + "fewer --strategies, no --all-zones, shorter traces, or raise --max-runs", "--starts")


def sweep(job: SweepJob, places: Sequence[Place], homes: Sequence[tuple[str, str]], strategies: Sequence[Strategy],
          starts: Sequence[float], *, tick_s: float = 600.0,
          progress: Callable[[int, int], None] | None = None, hindsight: bool = False) -> SweepResult:
    """Every strategy from every start, for every home place ``(zone, type)``; the oracle and the table.

    A strategy that starts at the cheapest place (``start="cheapest"``) does not depend on the home
    and runs once per start; its result counts for every home, so each strategy's row averages
    the same (home, start) windows.  A window needs the home's trace over the whole deadline.
    ``hindsight``: also build each window's hindsight schedule (:mod:`spotwise.sim.bounds.hindsight`, ~10-50 ms
    a start), the clairvoyant schedule that pays its restarts: how far each strategy is from it.
    """
    import time

    by_key = {p.key: p for p in places}
    missing = [h for h in homes if h not in by_key]
    if missing or not homes:
        h = missing[0] if missing else ("?", "?")
        raise InputError(f"no trace for the home place {h[0]}/{h[1]}",
                         f"set cluster.region to one of {', '.join(sorted({p.zone for p in places})[:10])}, or use --all-zones",
                         "cluster.region")
    check_reading(job, places)
    t_wall = time.perf_counter()
    rows: list[WindowResult] = []
    oracle: list[OracleResult] = []
    free: list[OracleResult] = []
    restart: list[float] = []
    clair: list[float] = []
    used: list[float] = []
    total = len(starts)
    for i, st in enumerate(starts):
        live = [by_key[h] for h in homes if by_key[h].covers(st, st + job.deadline_s)]
        if not live:
            continue
        orc = hindsight_oracle(job, places, st)
        if not orc.cost > 0:  # every cost is compared with the oracle's: a free job has no ratio
            raise InputError(f"the hindsight oracle runs the job for $0 from {iso8601(st)} at {orc.place}: the traces "
                             "price spot capacity at $0/h over the whole window and the job has no coordinator",
                             "check the trace's prices (no cloud sells spot capacity for $0/h), or use another trace",
                             "--trace")
        bound = free_move_bound(job, places, st)
        rbound = max(restart_bound(job, places, st), bound.cost)  # both are bounds: the larger is the tighter
        hs = hindsight_schedule(job, places, st) if hindsight else None
        shared: dict[str, WindowResult] = {}
        for home in live:
            oracle.append(orc)
            free.append(bound)
            restart.append(rbound)
            if hs is not None:
                clair.append(hs)
            for s in strategies:
                if s.start == "cheapest" and s.name in shared:
                    r = shared[s.name]
                else:
                    r = run_window(job, places, home, st, s, tick_s=tick_s)
                    r.oracle_cost, r.free_cost, r.restart_bound, r.hindsight_cost = orc.cost, bound.cost, rbound, hs
                    if s.start == "cheapest":
                        shared[s.name] = r
                rows.append(r)
        used.append(st)
        if progress is not None:
            progress(i + 1, total)
    wall = time.perf_counter() - t_wall
    if not used:
        raise InputError("no start time has a home place's trace over a whole window",
                         "pick start times inside the home trace (spotwise traces show)", "--starts")
    od_mean = None
    by = {s.name: [r for r in rows if r.strategy == s.name] for s in strategies}
    if "on-demand" in by:
        od_mean = float(np.mean([r.cost for r in by["on-demand"]]))
    orc_mean = float(np.mean([o.cost for o in oracle]))
    summaries = [summarise(s.name, by[s.name], od_mean, orc_mean, float(np.mean([o.cost for o in free])), s.description,
                           float(np.mean(restart)), float(np.mean(clair)) if clair else None) for s in strategies]
    # worker-iterations the sweep simulated: each run's completed work in the job's steps (a
    # shared cheapest-start run is simulated once and counted once)
    seen: set[int] = set()
    wi = 0.0
    for r in rows:
        if id(r) not in seen:
            seen.add(id(r))
            wi += r.work_done * job.iterations * job.workers
    return SweepResult(job, used, rows, oracle, summaries, wi, wall, len(places), free, restart, clair)


def breakdown_hours(rows: Sequence[WindowResult]) -> dict[str, float]:
    """Mean hours per window: spot computing, on-demand computing, restarts/moves billed, idle (issue 23 item 1)."""
    n = max(1, len(rows))
    return {"spot": sum(r.spot_s - r.restart_spot_s for r in rows) / n / 3600,
            "on_demand": sum(r.on_demand_s - r.restart_od_s for r in rows) / n / 3600,
            "restart": sum(r.restart_spot_s + r.restart_od_s for r in rows) / n / 3600,
            "idle": sum(r.idle_s for r in rows) / n / 3600}


def summarise(name: str, rs: Sequence[WindowResult], od_mean: float | None, orc_mean: float, free_mean: float | None,
              description: str = "", restart_mean: float | None = None,
              hindsight_mean: float | None = None) -> StrategySummary:
    """One strategy's row of the sweep table from its windows."""
    k = sum(r.deadline_met for r in rs)
    costs = np.array([r.cost for r in rs])
    fin = [r.finish_s / 3600 for r in rs if r.finish_s is not None]
    frees = [r.cost / r.free_cost for r in rs if r.free_cost]
    return StrategySummary(
        name, len(rs), k / len(rs), wilson(k, len(rs)), float(costs.mean()), float(np.median(costs)),
        float(np.mean([r.cost / r.oracle_cost for r in rs])), float(costs.mean() / orc_mean),
        None if od_mean is None else float(costs.mean() / od_mean),
        float(np.quantile(fin, 0.95)) if fin else None, sum(r.finish_s is None for r in rs),
        float(np.mean([r.moves for r in rs])), float(np.mean([r.on_demand_s for r in rs]) / 3600), description,
        None if not free_mean else float(costs.mean() / free_mean), float(np.mean(frees)) if frees else None,
        breakdown_hours(rs), None if not restart_mean else float(costs.mean() / restart_mean),
        None if not hindsight_mean else float(costs.mean() / hindsight_mean))
