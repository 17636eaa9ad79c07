"""Trace sweeps of a job of several pools, each on its own trace (issue 21 item 4).

``spotwise simulate SPEC --trace ...`` on a spec with ``cluster.pools`` replays the job from every
start time with every pool at its own place -- its zone's price series and, on availability
traces, its capacity -- and tabulates cost, time and the probability of meeting the deadline, as
the single-place sweep (:mod:`spotwise.sim.sweep.engine`) does.  Like that engine it is event-driven and
exact for piecewise-constant markets: between two changes of any pool's price or capacity (or a
decision tick) the fleet's rate is constant, so progress advances in closed form.

Model: pool ``j`` has ``n_j`` workers of speed ``s_j`` (catalog throughput for the workload
family); while its place has capacity at its bid (on a count trace: at least ``n_j`` nodes), its workers compute at ``n_j * s_j`` (work
units per second) and are billed at the spot price; when capacity returns they restart (``--restart``,
billed, no progress); committed progress is never lost (the parameter server keeps it).  The job
is ``W`` work units: the spec's iterations at the expected round time of the whole fleet at full
availability (the same time law :class:`~spotwise.control.speeds.WorkerSpeeds` uses), times the
fleet's rate.  The coordinator(s) are billed on-demand for the whole run.  Strategies:

* ``pools`` -- every pool on spot at its place, bidding its on-demand price (or its spec bids);
* ``pools+guard`` -- as ``pools``, and every pool moves to on-demand (restart billed) once the work
  left at the whole fleet's on-demand rate would need more than the time left minus one restart
  (the deadline guard of :mod:`spotwise.policies.deadline_guard`, decided every ``tick_s``);
* ``on-demand`` -- every pool on on-demand from the start.

The oracle row is a hindsight lower bound: the cheapest work units of the window bought in price
order (each pool's spot stretches and its on-demand capacity, ``n_j`` workers each, restarts free),
plus the coordinator for the shortest possible run.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from spotwise.errors import InputError
from spotwise.market.billing import Ledger
from spotwise.sim.sweep.engine import summarise
from spotwise.sim.sweep.places import Place
from spotwise.sim.sweep.records import OracleResult, SweepJob, SweepResult, WindowResult

POOL_STRATEGIES = ("pools", "pools+guard", "on-demand")


@dataclass(frozen=True)
class PoolPlace:
    """One pool of the job at its place: ``workers`` workers of speed ``speed``, bidding ``bid`` $/h."""

    name: str
    place: Place
    workers: int
    speed: float
    bid: float

    def __post_init__(self) -> None:
        if self.workers < 1 or not self.speed > 0 or not self.bid > 0:
            raise InputError(f"pool {self.name!r}: workers, speed and bid must be positive", where="cluster.pools")

    @property
    def rate(self) -> float:
        return self.workers * self.speed


def _up(pool: PoolPlace, t: float) -> bool:
    """Whether the pool's place can hold the whole pool: on a count trace (SkyPilot's k-node folders) at
    least ``workers`` nodes (a pool is a gang of its workers here, never "any node free"; issue 31)."""
    return pool.place.has_capacity(t, pool.bid, need=pool.workers)


def run_pool_window(job: SweepJob, pools: Sequence[PoolPlace], start: float, strategy: str, *,
                    full_rate_s: float, tick_s: float = 600.0) -> WindowResult:
    """One window of ``strategy`` from ``start``; ``full_rate_s``: the job's seconds at full availability."""
    if strategy not in POOL_STRATEGIES:
        raise InputError(f"unknown pool strategy {strategy!r}", f"use one of {', '.join(POOL_STRATEGIES)}", "--strategies")
    rate_all = sum(p.rate for p in pools)
    work = rate_all * full_rate_s  # work units
    end = start + job.deadline_s
    ledger = Ledger(job.billing)
    ledger.start("coordinator", 0.0, job.coordinator_per_hour, category="coordinator", market="on_demand")
    on_demand = strategy == "on-demand"
    running = [False] * len(pools)
    ready_at = [math.inf] * len(pools)
    restart = job.start_s if job.start_s is not None else job.restart_s
    rejoin = job.rejoin_s if job.rejoin_s is not None else job.restart_s
    t, done, revocations, switches, spot_s, od_s = start, 0.0, 0, 0, 0.0, 0.0
    finish: float | None = None

    def bill_start(i: int, at: float) -> None:
        p = pools[i]
        price = p.place.on_demand_per_hour if on_demand else p.place.price.shift(-start)
        for k in range(p.workers):
            ledger.start(f"{p.name}-{k}", at - start, price, market="on_demand" if on_demand else "spot")

    def bill_stop(i: int, at: float, revoked: bool) -> None:
        for k in range(pools[i].workers):
            ledger.stop(f"{pools[i].name}-{k}", at - start, reason="revoked" if revoked else "released")

    while t < end - 1e-9:
        for i, p in enumerate(pools):  # capacity changes at t
            up = on_demand or _up(p, t)
            if up and not running[i]:
                running[i], ready_at[i] = True, t + (restart if t == start or on_demand else rejoin)
                bill_start(i, t)
            elif not up and running[i]:
                running[i] = False
                bill_stop(i, t, revoked=True)
                revocations += 1
        if strategy == "pools+guard" and not on_demand:
            left_s = (work - done) / rate_all
            if left_s >= (end - t) - job.restart_s - tick_s:
                on_demand, switches = True, switches + 1
                for i in range(len(pools)):
                    if running[i]:
                        bill_stop(i, t, revoked=False)
                    running[i], ready_at[i] = True, t + job.restart_s
                    bill_start(i, t)
        rate = sum(p.rate for i, p in enumerate(pools) if running[i] and ready_at[i] <= t)
        nxt = min([end] + [ready_at[i] for i in range(len(pools)) if running[i] and ready_at[i] > t])
        if not on_demand:
            nxt = min([nxt] + [p.place.next_change(t) for p in pools])
            if strategy == "pools+guard":
                nxt = min(nxt, t + tick_s)
        if rate > 0 and done + rate * (nxt - t) >= work:
            finish = t + (work - done) / rate
            nxt = finish
        dt = nxt - t
        done = min(work, done + rate * dt)
        if any(running):
            if on_demand:
                od_s += dt
            else:
                spot_s += dt
        t = nxt
        if finish is not None:
            break
    t_end = finish if finish is not None else end
    for i in range(len(pools)):
        if running[i]:
            bill_stop(i, t_end, revoked=False)
    ledger.close(t_end - start)
    cost = ledger.total()
    return WindowResult(strategy, start, float(cost), None if finish is None else finish - start, finish is not None,
                        "+".join(p.place.zone for p in pools), done / work, market_switches=switches,
                        revocations=revocations, on_demand_s=od_s, spot_s=spot_s, spent=float(cost))


def pool_oracle(job: SweepJob, pools: Sequence[PoolPlace], start: float, full_rate_s: float) -> OracleResult:
    """Hindsight lower bound of the window (module docstring)."""
    rate_all = sum(p.rate for p in pools)
    work = rate_all * full_rate_s
    end = start + job.deadline_s
    offers: list[tuple[float, float, bool]] = []  # ($ per work unit, units available, spot?)
    for p in pools:
        pts = np.unique(np.concatenate([[start, end], p.place.change_points(start, end)]))
        for a, b in zip(pts[:-1], pts[1:]):
            if _up(p, float(a)):
                offers.append((p.place.spot_price(float(a)) / 3600.0 / p.speed, p.rate * (b - a), True))
        offers.append((p.place.on_demand_per_hour / 3600.0 / p.speed, p.rate * job.deadline_s, False))
    need, cost, spot_u, od_u = work, 0.0, 0.0, 0.0
    for unit, avail, spot in sorted(offers):
        take = min(need, avail)
        cost += take * unit
        spot_u, od_u = (spot_u + take, od_u) if spot else (spot_u, od_u + take)
        need -= take
        if need <= 1e-9:
            break
    cost += job.coordinator_per_hour * full_rate_s / 3600.0
    return OracleResult(start, float(cost), "pools", spot_u / rate_all / 3600.0, od_u / rate_all / 3600.0)


def pool_sweep(job: SweepJob, pools: Sequence[PoolPlace], starts: Sequence[float], *, full_rate_s: float,
               strategies: Sequence[str] = POOL_STRATEGIES, tick_s: float = 600.0,
               progress: Callable[[int, int], None] | None = None) -> SweepResult:
    """Every strategy from every start whose window every pool's trace covers."""
    t0 = time.perf_counter()
    rows: list[WindowResult] = []
    oracle: list[OracleResult] = []
    used: list[float] = []
    for k, st in enumerate(starts):
        if not all(p.place.covers(st, st + job.deadline_s) for p in pools):
            continue
        orc = pool_oracle(job, pools, st, full_rate_s)
        oracle.append(orc)
        for s in strategies:
            r = run_pool_window(job, pools, st, s, full_rate_s=full_rate_s, tick_s=tick_s)
            r.oracle_cost = orc.cost
            rows.append(r)
        used.append(st)
        if progress is not None:
            progress(k + 1, len(starts))
    if not used:
        raise InputError("no start time has every pool's trace over a whole window",
                         "pick start times inside every pool's trace (spotwise traces show), or a shorter deadline", "--starts")
    by = {s: [r for r in rows if r.strategy == s] for s in strategies}
    od_mean = float(np.mean([r.cost for r in by["on-demand"]])) if "on-demand" in by else None
    orc_mean = float(np.mean([o.cost for o in oracle]))
    summaries = [summarise(s, by[s], od_mean, orc_mean, None) for s in strategies]
    wi = float(sum(r.work_done for r in rows)) * job.iterations * job.workers
    return SweepResult(job, used, rows, oracle, summaries, wi, time.perf_counter() - t0, len(pools))
