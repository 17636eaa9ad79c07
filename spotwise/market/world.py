"""Assembling the market a job lives in from its spec: prices, revocations, billing, instances.

:func:`build_market` is the one place that turns ``spec.market`` + ``spec.cluster`` into objects
the executors (simulator, emulated runtime) and the planner share:

* the worker and coordinator :class:`~spotwise.market.catalog.InstanceType` (from the packaged
  catalog plus ``market.catalog`` files);
* the worker's spot price over *virtual* time (``t = 0`` is the job's start): a synthetic series
  (paper 000 Sec. VI distributions, a constant, or a Markov model fitted to a trace) or the real
  trace replayed from ``market.start`` (default: the trace's first point);
* the revocation model (bid / Bernoulli / lifetime / availability trace / none) with the
  provider's notice;
* the billing policy.

The :class:`~spotwise.market.job_market.Market` it returns is defined in
:mod:`spotwise.market.job_market` (and importable from here as well); a job with ``cluster.pools``
gets one market per pool (:func:`spotwise.market.pools.build_pools`, each built here).
"""

from __future__ import annotations

import dataclasses
import math
from datetime import datetime, timezone

import numpy as np

from spotwise.config import JobSpec
from spotwise.market.price_points import check_price_points
from spotwise.errors import InputError
from spotwise.market.billing import BillingPolicy
from spotwise.market.coordinator import coordinator_for
from spotwise.market.catalog import Catalog, InstanceType
from spotwise.market.job_market import Market
from spotwise.market.pools import PooledRevocation, build_pools
from spotwise.market.preemption import (
    AvailabilityTraceRevocation,
    BernoulliRevocation,
    BidRevocation,
    ExponentialLifetime,
    LifetimeRevocation,
    NoRevocation,
    RevocationModel,
    notice_seconds,
)
from spotwise.market.series import SeriesMeta, StepSeries


def load_catalog(spec: JobSpec) -> Catalog:
    catalog = Catalog.default()
    for path in spec.market.catalog:
        catalog = catalog.extend(path)
    return catalog


def _parse_start(text: str) -> float:
    try:
        dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise InputError(f"market.start {text!r} is not an ISO 8601 time", "write e.g. 2020-02-25T00:00:00Z", "market.start") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return dt.timestamp()


def _pick(series: list[StepSeries], kind: str, spec: JobSpec) -> StepSeries:
    cands = [s for s in series if s.kind == kind]
    inst = spec.cluster.instance_type
    if kind == "price":
        named = [s for s in cands if s.meta.instance == inst]
        cands = named or cands
    region = spec.cluster.region
    if region:
        local = [s for s in cands if s.meta.zone == region or s.meta.region == region or s.meta.zone.startswith(region)]
        cands = local or cands
    if not cands:
        raise InputError(f"no {kind} series in market.traces", f"add a {kind} trace (see `spotwise traces show`)", "market.traces")
    if len(cands) > 1 and kind == "price":
        # several zones: the cheapest on average is what a user would choose to replay
        cands = sorted(cands, key=lambda s: s.mean())
    return cands[0]


def _to_virtual(s: StepSeries, origin: float, horizon: float) -> StepSeries:
    """Shift a trace so that ``origin`` becomes ``t = 0``; hold the last value to the horizon."""
    if origin < s.start or origin >= s.end:
        if origin < s.start:
            origin = s.start
        else:
            raise InputError("market.start is after the end of the trace", "pick a start inside the trace's time range", "market.start")
    shifted = s.slice(origin, max(s.end, origin + 1.0)).shift(-origin)
    if shifted.end < horizon:
        shifted = StepSeries(shifted.times, shifted.values, horizon, shifted.meta)
    return shifted


def build_prices(spec: JobSpec, horizon_s: float, instance: InstanceType) -> tuple[StepSeries, list[StepSeries]]:
    """The worker's price series in virtual time, and every loaded trace series (for reuse).

    Raises :class:`InputError` for unreadable traces, a missing price, or a synthetic market whose
    number of price points over the horizon would be absurd (see :func:`check_price_points`).
    """
    from spotwise.market import synthetic as syn
    from spotwise.market.traces import load_traces

    m = spec.market
    loaded: list[StepSeries] = load_traces(m.traces) if m.traces else []
    if m.traces:
        if not any(s.kind == "price" for s in loaded):
            # availability-only traces: the instance's spot price from the catalog, constant
            price = instance.spot_per_hour if instance.spot_per_hour is not None else instance.on_demand_per_hour
            if price is None:
                raise InputError(f"no price for {instance.name}: the traces hold availability only and the catalog has no price",
                                 "add spot_per_hour to the instance in a catalog file", "market.traces")
            return _constant(float(price), horizon_s, instance.name), loaded
        src = _pick(loaded, "price", spec)
        origin = _parse_start(m.start) if m.start else src.start
        return _to_virtual(src, origin, horizon_s), loaded
    synth = m.synthetic
    if synth is None:
        price = instance.spot_per_hour if instance.spot_per_hour is not None else instance.on_demand_per_hour
        if price is None:
            raise InputError(f"the catalog has no price for {instance.name}",
                             "set market.synthetic or market.traces, or add prices to your catalog file", "market")
        return _constant(float(price), horizon_s, instance.name), loaded
    duration = max(synth.duration_s, horizon_s)
    meta = SeriesMeta(id=f"synthetic:{synth.kind}:{instance.name}", kind="price", cloud="synthetic", instance=instance.name,
                      source="synthetic")
    if synth.kind == "constant":
        return _constant(synth.price, duration, instance.name), loaded
    if synth.kind in ("uniform", "gaussian"):
        # the horizon (4 x the deadline) may stretch the market beyond duration_s: bound the points
        check_price_points(duration, float(synth.interval_s), "market.synthetic.interval_s")
    if synth.kind == "uniform":
        dist: syn.PriceDistribution = syn.UniformPrice(low=synth.low, high=synth.high)
        return syn.iid_price_series(dist, duration, synth.interval_s, seed=synth.seed, meta=meta), loaded
    if synth.kind == "gaussian":
        dist = syn.TruncatedGaussianPrice(mu=synth.mean, variance=synth.variance, low=float(synth.low or 0.0))
        return syn.iid_price_series(dist, duration, synth.interval_s, seed=synth.seed, meta=meta), loaded
    # markov: fit to a trace
    assert synth.fit_to is not None
    fitted_src = [s for s in load_traces([synth.fit_to]) if s.kind == "price"]
    if not fitted_src:
        raise InputError("market.synthetic.fit_to holds no price series", "point it at a price trace", "market.synthetic.fit_to")
    model = syn.MarkovRegimeModel.fit(fitted_src[0], k=synth.regimes)
    return model.generate(duration, seed=synth.seed, ident=meta.id), loaded


def _constant(price: float, duration: float, instance: str) -> StepSeries:
    meta = SeriesMeta(id=f"constant:{instance}", kind="price", instance=instance, source="catalog/constant")
    return StepSeries(np.array([0.0]), np.array([price]), duration, meta)


def build_revocation(spec: JobSpec, prices: StepSeries, loaded: list[StepSeries], instance: InstanceType) -> RevocationModel:
    r = spec.market.revocation
    cloud = spec.cluster.cloud or instance.cloud
    if r.notice_s is not None:
        notice = float(r.notice_s)
    else:
        try:
            notice = notice_seconds(cloud)
        except InputError:
            notice = 0.0
    if r.model == "none":
        return NoRevocation(notice_s=notice)
    if r.model == "bid":
        bids = spec.cluster.bid_list()
        assert bids is not None  # JobSpec validation guarantees it
        slots = max(spec.cluster.workers, spec.cluster.max_workers or 0)
        bids = bids + [min(bids)] * (slots - len(bids))  # slots a growth policy may add bid low until rebid
        return BidRevocation(prices, tuple(bids) if len(set(bids)) > 1 else bids[0], persistent=True, notice_s=notice)
    if r.model == "bernoulli":
        assert r.q is not None
        return BernoulliRevocation(q=r.q, rejoin_p=r.rejoin_p, notice_s=notice)
    if r.model == "lifetime":
        if r.lifetimes is not None:
            from spotwise.market.traces import load_gcp_lifetime_csv

            table = load_gcp_lifetime_csv(r.lifetimes)
            if instance.accelerator:
                sub = table.by_gpu(instance.accelerator)
                if len(sub) >= 5:
                    table = sub
            restart = float(r.mttr_s) if r.mttr_s is not None else 60.0
            lifetimes = table.lifetimes_s
            lifetimes = lifetimes[np.isfinite(lifetimes) & (lifetimes > 0)]  # same-minute start/stop rows carry no lifetime
            if lifetimes.size == 0:
                raise InputError("the lifetime file holds no positive lifetimes", "check the file", "market.revocation.lifetimes")
            return LifetimeRevocation(lifetimes, restart_delay_s=restart, notice_s=notice)
        assert r.mttf_s is not None
        return ExponentialLifetime(mttf_s=float(r.mttf_s), mttr_s=float(r.mttr_s or 60.0), notice_s=notice)
    # availability trace
    avail = _pick(loaded, "availability", spec)
    origin = _parse_start(spec.market.start) if spec.market.start else avail.start
    return AvailabilityTraceRevocation(avail, origin=origin, loop=True, notice_s=notice)


def build_market(spec: JobSpec, horizon_s: float | None = None, catalog: Catalog | None = None) -> Market:
    """The market of ``spec`` over ``[0, horizon_s)`` virtual seconds (default: deadline x 4, at least a week)."""
    catalog = catalog or load_catalog(spec)
    if spec.cluster.pools:
        pools = build_pools(spec, lambda one: build_market(one, horizon_s, catalog))
        first = pools.pools[0].market
        revocation = first.revocation if len(pools.pools) == 1 else PooledRevocation(
            [(p.market.revocation, len(p.slots)) for p in pools.pools])
        return dataclasses.replace(first, revocation=revocation, pools=pools)
    instance = catalog.instance(spec.cluster.instance_type, cloud=spec.cluster.cloud, region=spec.cluster.region)
    coordinator = coordinator_for(spec, catalog)  # one rule for plan, simulate, sweep, run and emit (issue 29)
    if horizon_s is None:
        horizon_s = max(7 * 24 * 3600.0, 4 * (spec.deadline_s or 0.0))
    if not (horizon_s > 0 and math.isfinite(horizon_s)):
        raise ValueError("horizon_s must be positive and finite")
    prices, loaded = build_prices(spec, horizon_s, instance)
    revocation = build_revocation(spec, prices, loaded, instance)
    billing = BillingPolicy.per_second(minimum_s=spec.market.min_charge_s) if spec.market.billing == "per-second" else BillingPolicy.per_hour()
    return Market(instance=instance, coordinator=coordinator, prices=prices, revocation=revocation, billing=billing,
                  catalog=catalog, horizon_s=float(horizon_s))


def market_for_place(spec: JobSpec, instance_type: str, region: str | None = None, catalog: Catalog | None = None,
                     horizon_s: float | None = None) -> Market:
    """The market ``spec``'s job would live in on ``instance_type`` in ``region`` (a migration's target).

    The same spec -- traces, synthetic generator, revocation model, billing -- with
    ``cluster.instance_type`` and ``cluster.region`` replaced (``region=None`` keeps the spec's),
    built by :func:`build_market`: a trace market replays the series of the new instance and zone
    or region (if the traces hold one), a catalog-priced market takes the new instance's prices.
    Time is the job's virtual time (``t = 0`` is the job's start), so the caller can switch to it
    mid-run.  InputError for an instance or region the catalog does not know.
    """
    import dataclasses

    if not instance_type:
        raise InputError("a migration needs an instance type", "name an instance type from the catalog", "Migrate.instance_type")
    cluster = dataclasses.replace(spec.cluster, instance_type=instance_type,
                                  region=spec.cluster.region if region is None else region)
    return build_market(dataclasses.replace(spec, cluster=cluster), horizon_s=horizon_s, catalog=catalog)
