"""From a job spec and trace files to a trace sweep (``spotwise simulate SPEC --trace ...``).

The spec gives the job: its work is ``target.iterations`` committed steps at the expected step
time of ``cluster.workers`` workers of ``cluster.instance_type`` (the one mini-batch time law,
:class:`~spotwise.theory.runtime.MiniBatchTimeLaw`, through the sync strategy's
``expected_round_s``: the same expectation the planner and the simulator use), or at the step
time measured by a pilot run (``--pilot DIR``, the runtime fit of :mod:`spotwise.planner.estimate.pilot`),
or ``--work-hours``;
``deadline``; the coordinator (billed on-demand for the whole run); the billing rule.  The home
place is ``cluster.region`` (a zone, or a region meaning each of its zones) of the spec's type;
``--all-zones`` makes every zone of the traces a home.  Nothing here imports a user workload.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from spotwise.config import JobSpec
from spotwise.errors import InputError
from spotwise.market.billing import BillingPolicy
from spotwise.market.series import StepSeries
from spotwise.market.world import load_catalog
from spotwise.control.sync import make_sync
from spotwise.sim.sweep.places import Place, build_places
from spotwise.sim.sweep.records import strategy_names
from spotwise.sim.sweep.engine import (MAX_RUNS, SweepJob, SweepResult, check_sweep_size, parse_strategies, start_range,
                                        sweep, window_starts)
from spotwise.theory.runtime import MiniBatchTimeLaw


def _time_law(spec: JobSpec, catalog: Any) -> MiniBatchTimeLaw:
    """The mini-batch time law of one of the spec's workers: the catalog's step time on its type, its straggler."""
    inst = catalog.instance(spec.cluster.instance_type, cloud=spec.cluster.cloud)
    return MiniBatchTimeLaw(float(spec.workload.step_time_s) / catalog.throughput(inst, spec.workload.family),
                            float(spec.cluster.straggler))


def job_work_s(spec: JobSpec, catalog: Any) -> float:
    """Compute seconds of ``spec``'s job on its own cluster (iterations x expected step time)."""
    if spec.expected_iterations() is None:
        raise InputError("a trace sweep needs the job's size: target.iterations or target.samples (or --work-hours)",
                         "set target.iterations or target.samples, or pass --work-hours H", "target.iterations")
    law = _time_law(spec, catalog)
    sync = make_sync(spec.cluster.sync, spec.cluster.sync_n)
    return spec.expected_iterations() * sync.expected_round_s(law, spec.cluster.workers, float(spec.cluster.sync_overhead_s))


def pilot_work_s(spec: JobSpec, pilot_dir: str) -> tuple[float, str]:
    """Compute seconds of ``spec``'s job from a pilot run's measured step times
    (:func:`spotwise.planner.estimate.pilot.pilot_from_run`): ``iterations x E[R(workers)]``."""
    from spotwise.planner.estimate.pilot import pilot_from_run

    if spec.expected_iterations() is None:
        raise InputError("a trace sweep needs target.iterations or target.samples to scale a pilot's step time",
                         "set target.iterations or target.samples",
                         "target.iterations")
    _, rt = pilot_from_run(pilot_dir)
    workers = int(spec.cluster.workers)
    if rt.unit == "step":
        step = float(rt.model.expected(1))
        note = f"pilot {pilot_dir}: mean step {step:.4g} s at {rt.active} active workers ({rt.n_samples} steps)"
        if rt.active is not None and rt.active != workers:
            note += f"; the spec has {workers} workers: the pilot's step time is used as measured"
    else:
        step = float(rt.model.expected(workers, spec.cluster.sync, spec.cluster.sync_n))
        note = f"pilot {pilot_dir}: E[R({workers})] = {step:.4g} s from {rt.n_samples} mini-batch times"
    return spec.expected_iterations() * step, note


def sweep_job(spec: JobSpec, *, work_hours: float | None = None, restart_s: float = 300.0,
              history_s: float = 7 * 86400.0, deadline_h: float | None = None, pilot_dir: str | None = None) -> SweepJob:
    catalog = load_catalog(spec)
    deadline = deadline_h * 3600.0 if deadline_h is not None else spec.deadline_s
    if deadline is None:
        raise InputError("a trace sweep needs a deadline", "set deadline in the spec (e.g. 48h) or pass --deadline-hours", "deadline")
    if work_hours is not None and pilot_dir is not None:
        raise InputError("--work-hours and --pilot both size the job", "give one of them", "--work-hours")
    if work_hours is not None:
        if not (math.isfinite(work_hours) and work_hours > 0):
            raise InputError(f"--work-hours must be > 0, got {work_hours!r}", "e.g. --work-hours 24", "--work-hours")
        work = work_hours * 3600.0
    elif pilot_dir is not None:
        work, _ = pilot_work_s(spec, pilot_dir)
    else:
        work = job_work_s(spec, catalog)
    from spotwise.market.coordinator import coordinator_for

    coord = float(coordinator_for(spec, catalog).on_demand_per_hour or 0.0)  # billed as in plan/simulate/run (issue 29)
    billing = BillingPolicy.per_second(minimum_s=spec.market.min_charge_s) if spec.market.billing == "per-second" else BillingPolicy.per_hour()
    its = int(spec.expected_iterations() or max(1, round(work)))
    return SweepJob(work_s=work, deadline_s=float(deadline), workers=int(spec.cluster.workers), restart_s=float(restart_s),
                    coordinator_per_hour=coord, iterations=its, history_s=float(history_s), billing=billing, name=spec.name,
                    min_workers=spec.cluster.min_workers, rates=spec_rates(spec, catalog))


def spec_rates(spec: JobSpec, catalog: Any) -> tuple[float, ...] | None:
    """The progress of ``k`` of the spec's workers relative to all of them (issue 31,
    :func:`spotwise.sim.sweep.partial.worker_rates`): the catalog's mini-batch time, the straggler
    coefficient, the sync mode and the commit overhead (paper 000 eq. 14-15).  ``None`` for one worker."""
    from spotwise.sim.sweep.partial import worker_rates

    n = int(spec.cluster.workers)
    if n <= 1 or spec.cluster.sync not in ("full", "ssgd", "n-sync", "n-batch", "async"):
        return None
    law = _time_law(spec, catalog)
    sync_n = spec.cluster.sync_n
    if spec.cluster.sync == "n-sync" and sync_n is not None:
        sync_n = min(sync_n, n)
    try:
        return worker_rates(make_sync(spec.cluster.sync, sync_n), law, n, float(spec.cluster.sync_overhead_s))
    except InputError:
        return None  # e.g. n-sync with fewer workers than N: progress read as linear


def homes_for(spec: JobSpec, places: Sequence[Place], all_zones: bool) -> list[tuple[str, str]]:
    inst = spec.cluster.instance_type
    own = [p for p in places if p.instance.name == inst]
    if not own:
        raise InputError(f"the traces hold no series for {inst}", "pass traces of cluster.instance_type (spotwise traces show)", "--trace")
    region = spec.cluster.region
    if all_zones or not region:
        return [p.key for p in own]
    picked = [p.key for p in own if p.zone == region or p.region == region]
    if not picked:
        raise InputError(f"the traces hold no {inst} series in {region!r}",
                         f"set cluster.region to one of {', '.join(sorted({p.zone for p in own}))}, or pass --all-zones",
                         "cluster.region")
    return picked


@dataclass
class SweepRequest:
    """What ``spotwise simulate --trace`` was asked for (validated as the CLI builds it)."""

    traces: list[str]
    strategies: str | None = None
    every_s: float = 6 * 3600.0
    types: list[str] = field(default_factory=list)
    all_zones: bool = False
    work_hours: float | None = None
    deadline_h: float | None = None
    restart_s: float = 300.0
    history_s: float = 7 * 86400.0
    tick_s: float = 600.0
    spot_price: float | None = None
    #: sweep over the spec's own market (``market.synthetic`` prices or ``market.traces``, and its
    #: revocation model's capacity, e.g. GCP lifetimes) for ``horizon_s`` instead of ``traces``
    spec_market: bool = False
    horizon_s: float = 30 * 86400.0
    seed: int = 0
    #: a run directory whose measured step times size the job (instead of the catalog's time law)
    pilot_dir: str | None = None
    #: the most window runs (starts x homes x strategies) the sweep may do (:data:`~spotwise.sim.sweep.engine.MAX_RUNS`)
    max_runs: int = MAX_RUNS
    #: also build each window's hindsight schedule (the clairvoyant schedule that pays its restarts)
    hindsight: bool = False

    def __post_init__(self) -> None:
        if not self.traces and not self.spec_market:
            raise InputError("no trace given", "pass --trace FILE_OR_DIR (AWS/Azure prices, SkyPilot availability), "
                             "or --spec-market to sweep over the spec's own market", "--trace")
        if self.traces and self.spec_market:
            raise InputError("--trace and --spec-market both given", "sweep over the traces or over the spec's market, not both",
                             "--spec-market")
        if not (math.isfinite(self.horizon_s) and self.horizon_s > 0):
            raise InputError(f"--horizon must be > 0, got {self.horizon_s!r}", "e.g. --horizon 30d", "--horizon")
        for name, v, lo in (("--restart", self.restart_s, 0.0), ("--history", self.history_s, 0.0), ("--tick", self.tick_s, 1.0)):
            if not (math.isfinite(v) and v >= lo):
                raise InputError(f"{name} must be a number >= {lo:g}, got {v!r}", f"e.g. {name} 300", name)
        if isinstance(self.max_runs, bool) or not isinstance(self.max_runs, int) or self.max_runs < 1:
            raise InputError(f"--max-runs must be an integer >= 1, got {self.max_runs!r}", "e.g. --max-runs 200000", "--max-runs")


class TextProgress:
    """A sweep's progress as plain lines on a stream, at most one every ``every_s`` seconds.

    For a sweep whose stderr is not a terminal (a pipe, a CI log, ``--json``), where a live
    progress bar shows nothing: a long sweep then prints ``sweep: 1,200/6,091 start times (19.7%),
    12 s, about 49 s left`` lines instead of running silently.  ``clock`` is injectable for tests.
    """

    def __init__(self, stream: Any, every_s: float = 10.0, clock: Callable[[], float] | None = None) -> None:
        import time

        if not (math.isfinite(every_s) and every_s >= 0):
            raise ValueError(f"every_s must be >= 0, got {every_s!r}")
        self.stream, self.every_s = stream, float(every_s)
        self.clock = clock or time.perf_counter
        self.t0 = self.clock()
        self.last = self.t0
        self.lines = 0

    def __call__(self, done: int, total: int) -> None:
        now = self.clock()
        if now - self.last < self.every_s or total <= 0:
            return
        self.last = now
        spent = now - self.t0
        left = spent * (total - done) / done if done > 0 else math.nan
        from spotwise.reports.units import human_duration

        eta = f", about {human_duration(left)} left" if math.isfinite(left) else ""
        self.stream.write(f"sweep: {done:,}/{total:,} start times ({100.0 * done / total:.1f}%), {human_duration(spent)}{eta}\n")
        self.stream.flush()
        self.lines += 1


def spec_market_place(spec: JobSpec, horizon_s: float, seed: int) -> Place:
    """The spec's own market as one place over ``[0, horizon_s)`` virtual seconds.

    Prices are the market's (synthetic, or the replayed trace); capacity is the revocation
    model's for one worker (a lifetime model -- GCP preemptible lifetimes, exponential -- or an
    availability trace, drawn with ``seed``); a bid model leaves capacity to the strategies' bids
    (capacity = price <= bid), as on a price trace.
    """
    from spotwise.market.world import build_market
    from spotwise.sim.sweep.places import capacity_from_lifetimes

    market = build_market(spec, horizon_s=horizon_s)
    zone = spec.cluster.region or "spec-market"
    inst = market.instance.name
    prices = market.prices.with_meta(zone=zone, region=zone, instance=inst)
    if prices.end < horizon_s:
        prices = StepSeries(prices.times, prices.values, horizon_s, prices.meta)
    cap = None
    model = spec.market.revocation.model
    if model not in ("bid", "none"):
        if market.revocation.is_iteration_driven:
            raise InputError(f"the {model!r} revocation model revokes per iteration, which a sweep in time cannot replay",
                             "sweep a lifetime, availability-trace or bid market instead", "market.revocation.model")
        cap = capacity_from_lifetimes(market.revocation, 0.0, horizon_s, seed, zone, inst)
    return Place(zone, zone, market.instance, prices, market.on_demand_price, 1.0, cap)


def run_trace_sweep(spec: JobSpec, req: SweepRequest, progress: Callable[[int, int], None] | None = None
                    ) -> tuple[SweepResult, list[Place], list[tuple[str, str]], list[str]]:
    """Load the traces, build the places and homes, run the sweep.  Returns ``(result, places, homes, skipped)``."""
    from spotwise.config import resolve_epochs
    from spotwise.market.traces import load_traces

    if req.work_hours is None:
        resolve_epochs(spec)  # target.epochs in samples (the training set's size)
    if req.spec_market:
        place = spec_market_place(spec, req.horizon_s, req.seed)
        job = sweep_job(spec, work_hours=req.work_hours, restart_s=req.restart_s, history_s=max(req.history_s, 1.0),
                        deadline_h=req.deadline_h, pilot_dir=req.pilot_dir)
        strategies = parse_strategies(req.strategies)
        lo, hi, n = start_range([place], job, req.every_s, warmup_s=req.history_s)
        check_sweep_size(n, 1, strategies, req.every_s, hi - lo, req.max_runs)
        starts = window_starts([place], job, req.every_s, warmup_s=req.history_s)
        result = sweep(job, [place], [place.key], strategies, starts, tick_s=req.tick_s, progress=progress,
                       hindsight=req.hindsight)
        return result, [place], [place.key], []
    for t in req.traces:
        if not Path(t).exists():
            raise InputError(f"trace {t!r} does not exist", "pass an existing trace file or folder", "--trace")
    series: list[StepSeries] = load_traces(req.traces)
    if not series:
        raise InputError("the traces hold no records", "pass non-empty trace files (spotwise traces show)", "--trace")
    catalog = load_catalog(spec)
    if spec.cluster.pools:
        return _run_pool_sweep(spec, req, series, catalog, progress)
    places, skipped = build_places(series, catalog, spec.workload.family, spec.cluster.instance_type, req.types or None,
                                   spot_price=req.spot_price)
    job = sweep_job(spec, work_hours=req.work_hours, restart_s=req.restart_s, history_s=req.history_s, deadline_h=req.deadline_h,
                    pilot_dir=req.pilot_dir)
    homes = homes_for(spec, places, req.all_zones)
    home_places = [p for p in places if p.key in set(homes)]
    strategies = parse_strategies(req.strategies)
    # bound the work before doing it: start times x homes x strategies (a trace spanning decades,
    # or a tiny --starts, would otherwise run for hours)
    lo, hi, n = start_range(home_places, job, req.every_s)
    check_sweep_size(n, len(homes), strategies, req.every_s, hi - lo, req.max_runs, home_places)
    starts = window_starts(home_places, job, req.every_s)
    result = sweep(job, places, homes, strategies, starts, tick_s=req.tick_s, progress=progress, hindsight=req.hindsight)
    return result, places, homes, skipped


def _run_pool_sweep(spec: JobSpec, req: SweepRequest, series: list[StepSeries], catalog: Any,
                    progress: Callable[[int, int], None] | None) -> tuple[SweepResult, list[Place], list[tuple[str, str]], list[str]]:
    """A spec with ``cluster.pools``: every pool at its own place of the traces (:mod:`spotwise.sim.sweep.pools`)."""
    from spotwise.sim.sweep.pools import POOL_STRATEGIES, PoolPlace, pool_sweep

    pools_spec = spec.cluster.pools or []
    types = sorted({p.instance_type for p in pools_spec})
    places, skipped = build_places(series, catalog, spec.workload.family, pools_spec[0].instance_type, types,
                                   spot_price=req.spot_price)
    pools: list[PoolPlace] = []
    for i, p in enumerate(pools_spec):
        mine = sorted((pl for pl in places if pl.instance.name == p.instance_type
                       and (not p.place or pl.zone == p.place or pl.zone.startswith(p.place))), key=lambda pl: pl.zone)
        if not mine:
            zones = sorted({pl.zone for pl in places if pl.instance.name == p.instance_type})
            raise InputError(f"pool {p.name!r}: the traces hold no {p.instance_type} series in {p.place or 'any zone'}",
                             f"place the pool in one of {', '.join(zones[:8]) or '(none: no series of that type)'}",
                             f"cluster.pools[{i}]")
        place = mine[0]
        bids = p.bid_list()
        speed = catalog.throughput(place.instance, spec.workload.family)
        pools.append(PoolPlace(str(p.name), place, p.workers, float(speed), bids[0] if bids else place.on_demand_per_hour))
    if spec.expected_iterations() is None and req.work_hours is None:
        raise InputError("a trace sweep needs the job's size: target.iterations or target.samples (or --work-hours)",
                         "set target.iterations or target.samples, or pass --work-hours H", "target.iterations")
    n = sum(p.workers for p in pools)
    if req.work_hours is not None:
        full = req.work_hours * 3600.0
    else:
        law = MiniBatchTimeLaw(float(spec.workload.step_time_s) * n / sum(p.rate for p in pools), float(spec.cluster.straggler))
        sync = make_sync(spec.cluster.sync, spec.cluster.sync_n)
        full = float(spec.expected_iterations() or 0) * sync.expected_round_s(law, n, float(spec.cluster.sync_overhead_s))
    base = sweep_job(spec, work_hours=max(full, 1.0) / 3600.0, restart_s=req.restart_s, history_s=req.history_s,
                     deadline_h=req.deadline_h)
    job = SweepJob(work_s=full, deadline_s=base.deadline_s, workers=n, restart_s=base.restart_s,
                   coordinator_per_hour=base.coordinator_per_hour * int(spec.cluster.ps_shards),
                   iterations=int(spec.expected_iterations() or base.iterations), history_s=base.history_s, billing=base.billing,
                   name=spec.name)
    wanted = strategy_names(req.strategies, POOL_STRATEGIES)  # '' is refused, not "all of them"
    for s in wanted:
        if s not in POOL_STRATEGIES:
            raise InputError(f"strategy {s!r} does not run a job of several pools",
                             f"use {', '.join(POOL_STRATEGIES)} (each pool stays at its place)", "--strategies")
    lo = max(p.place.start for p in pools)
    hi = min(p.place.end for p in pools) - job.deadline_s
    if hi < lo:
        raise InputError("the pools' traces do not overlap for one whole deadline", "use traces covering the same period, "
                         "or a shorter deadline", "--trace")
    starts = list(np.arange(lo, hi + 1e-9, req.every_s)) if req.every_s > 0 else [lo]
    check = len(starts) * len(wanted)
    if check > req.max_runs:
        raise InputError(f"{check:,} window runs is more than --max-runs {req.max_runs:,}",
                         f"use --starts {math.ceil((hi - lo) / max(1, req.max_runs // len(wanted)))}s or more", "--starts")
    result = pool_sweep(job, pools, starts, full_rate_s=full, strategies=wanted, tick_s=req.tick_s, progress=progress)
    return result, [p.place for p in pools], [p.place.key for p in pools], skipped
