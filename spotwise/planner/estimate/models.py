"""The price and runtime models ``spotwise plan`` rests on (``papers/000_3c734f3ffedcac15.txt``).

* **runtime** -- :func:`runtime_model`: a worker's mini-batch takes ``m ((1 - s) + s Exp(1))`` with
  ``m = step_time_s / throughput`` (catalog) and straggler coefficient ``s`` -- exponential (eq. 14-15)
  when ``s = 1``, else its empirical law -- plus ``Delta = sync_overhead_s``;
* **prices** -- :func:`price_model`: ``F(p)`` of the spec's synthetic distribution (exact), or the
  time-weighted empirical CDF of a trace.  A trace must be of the spec's instance type and region
  (:func:`_trace_candidates`, else :class:`InputError`); the job starts at ``market.start`` if the
  spec sets it, else one deadline before the last point of the trace (:func:`_plan_start`), and only
  the prices strictly before that start are used, in the zone with the lowest mean price of that
  past (:func:`_trace_history`).
"""

from __future__ import annotations

import numpy as np

from spotwise.config import JobSpec
from spotwise.errors import InputError
from spotwise.market.series import StepSeries
from spotwise.market.job_market import Market
from spotwise.planner.bids.prices import MIN_TRACE_POINTS, PriceModel
from spotwise.theory.runtime import MiniBatchTimeLaw, RuntimeModel


def runtime_model(spec: JobSpec, market: Market, samples: int = 20000) -> tuple[RuntimeModel, str]:
    m = market.step_seconds(spec.workload.family, float(spec.workload.step_time_s))
    s = float(spec.cluster.straggler)
    delta = float(spec.cluster.sync_overhead_s)
    if s >= 1.0:
        return RuntimeModel.exponential(1.0 / m, delta), f"mini-batch time Exp(mean {m:.3g} s) + Delta {delta:g} s (eq. 14)"
    rng = np.random.default_rng([spec.seed, 17])
    draws = np.asarray(MiniBatchTimeLaw(m, s).draw(rng, samples))
    return (RuntimeModel.empirical(draws, delta),
            f"mini-batch time {m:.3g} s x ((1 - {s:g}) + {s:g} Exp(1)) + Delta {delta:g} s, empirical law")


def _trace_candidates(spec: JobSpec, traces: list[str], where: str) -> list[StepSeries]:
    """The price series of ``traces`` for the spec's instance type (and region, if the spec names one).

    Raises :class:`InputError` naming both sides when the traces hold another instance type or
    another region: planning a p3.2xlarge job on p2.xlarge prices is not a plan.
    """
    from spotwise.market.traces import load_traces

    prices = [s for s in load_traces(traces) if s.kind == "price"]
    if not prices:
        raise InputError("the traces hold no price series", "pass a spot price trace (see `spotwise traces show`)", where)
    inst = spec.cluster.instance_type
    typed = [s for s in prices if s.meta.instance == inst]
    if not typed:
        have = sorted({s.meta.instance or "(unnamed)" for s in prices})
        raise InputError(f"the traces hold prices of {', '.join(have)}, but the spec's cluster.instance_type is {inst}",
                         f"pass a trace of {inst}, or set cluster.instance_type to {have[0]} if that is the machine you "
                         "mean to rent", where)
    region = spec.cluster.region
    if region:
        local = [s for s in typed if s.meta.region == region or s.meta.zone == region or s.meta.zone.startswith(region)]
        if not local:
            have = sorted({s.meta.region or s.meta.zone or "(unknown)" for s in typed})
            raise InputError(f"the traces of {inst} are from {', '.join(have)}, but the spec's cluster.region is {region}",
                             f"pass a trace of {region}, or set cluster.region to {have[0]}", where)
        typed = local
    return typed


def _plan_start(spec: JobSpec, cands: list[StepSeries], deadline: float) -> tuple[float, str]:
    """The job's start (UNIX seconds) and how it was chosen.

    ``market.start`` if the spec sets it; else one deadline before the last point of the traces:
    the last deadline-long window is the job's future, everything before it is its past.
    """
    from spotwise.market.world import _parse_start

    if spec.market.start:
        return _parse_start(spec.market.start), f"market.start {spec.market.start}"
    last = max(float(s.times[-1]) for s in cands)
    return last - deadline, "one deadline before the trace's last point (no market.start)"


def _iso(t: float) -> str:
    from datetime import datetime, timezone

    return datetime.fromtimestamp(t, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _trace_history(spec: JobSpec, cands: list[StepSeries], deadline: float, where: str) -> tuple[StepSeries, float, str]:
    """The chosen zone's prices strictly before the job's start (zone: lowest time-weighted mean of that past)."""
    start, how = _plan_start(spec, cands, deadline)
    past: list[StepSeries] = []
    for s in cands:
        if float(s.start) < start:
            h = s.slice(float(s.start), start)
            if int(np.sum(h.times < start)) >= MIN_TRACE_POINTS:
                past.append(h)
    if not past:
        n = max(int(np.sum(s.times < start)) for s in cands)
        raise InputError(f"the traces hold {n} price points before the job's start {_iso(start)} ({how}); planning uses "
                         f"only data before the start and needs at least {MIN_TRACE_POINTS}",
                         "set market.start later, or pass a trace with a longer history", where)
    best = min(past, key=lambda h: h.mean())
    src = (f"empirical CDF of {best.meta.id} before the job's start {_iso(start)} ({how}; {len(best)} points"
           + (f"; zone with the lowest mean price before the start among {len(past)}" if len(past) > 1 else "") + ")")
    return best, start, src


def price_model(spec: JobSpec, market: Market, traces: list[str], deadline: float | None = None
                ) -> tuple[PriceModel | None, float | None, str, StepSeries | None, float | None]:
    """The spot price law (or a fixed price for preemptible/on-demand markets), its history and the job's start.

    Traces (``--trace``, else ``market.traces``) go through :func:`_trace_candidates` and
    :func:`_trace_history`: only prices strictly before the job's start are used.
    """
    from spotwise.market import synthetic as syn

    src_traces, where = (traces, "--trace") if traces else (list(spec.market.traces), "market.traces")
    if src_traces:
        cands = _trace_candidates(spec, src_traces, where)
        hist, start, src = _trace_history(spec, cands, float(deadline or 0.0), where)
        if hist.max() > hist.min():
            return PriceModel.from_series(hist), None, src, hist, start
        return PriceModel.from_series(hist), None, src + "; constant price", hist, start
    synth = spec.market.synthetic
    if synth is not None and synth.kind == "uniform":
        return PriceModel.from_distribution(syn.UniformPrice(synth.low, synth.high)), None, \
            f"i.i.d. uniform on [{synth.low:g}, {synth.high:g}] $/h (spec)", None, None
    if synth is not None and synth.kind == "gaussian":
        dist = syn.TruncatedGaussianPrice(mu=synth.mean, variance=synth.variance, low=float(synth.low or 0.0))
        return PriceModel.from_distribution(dist), None, \
            f"i.i.d. Gaussian mean {synth.mean:g}, variance {synth.variance:g}, truncated at {dist.low:g} (spec)", None, None
    series: StepSeries = market.prices
    if len(series) >= 10 and series.max() > series.min():
        return PriceModel.from_series(series), None, f"empirical CDF of the spec's market ({series.meta.id})", series, None
    return None, float(series.values[0]), f"fixed price {float(series.values[0]):g} $/h ({series.meta.id})", None, None
