"""The places a job can run in a trace sweep: one (zone, instance type) each, with its spot price,
its spot capacity, its on-demand price and the job's speed there.

Prices come from price traces (AWS ``DescribeSpotPriceHistory`` dumps, Azure CSVs: a series per
zone and type); capacity from availability traces (SkyPilot: 0/1 or counts per zone and type).
A place with only a price trace has capacity whenever ``price <= bid`` (paper 000 Sec. III's
bid model; with the bid at the on-demand price -- AWS's default maximum price since 2017 -- that
is "whenever spot is cheaper than on-demand"); a place with only an availability trace is priced
at the catalog's spot price for its type; a place with both needs both.

Speeds follow the catalog's relative throughput for the job's model family
(``papers/003_c06237e546a4f08e.txt`` Table 1), relative to the job's *home* instance type: the
same type is 1.0 everywhere; another type with ``n`` accelerators scales linearly (the catalog's
upper bound, :meth:`~spotwise.market.catalog.Catalog.throughput`).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

from spotwise.errors import InputError
from spotwise.market.catalog import Catalog, InstanceType
from spotwise.market.series import SeriesMeta, StepSeries


@dataclass(frozen=True, eq=False)
class Place:
    """One (zone, instance type) the job can run on."""

    zone: str
    region: str
    instance: InstanceType
    price: StepSeries
    on_demand_per_hour: float
    speed: float = 1.0
    capacity: StepSeries | None = None

    def __post_init__(self) -> None:
        where = f"place {self.zone}/{self.instance.name}"
        if self.price.kind != "price":
            raise InputError(f"{where}: the price series is of kind {self.price.kind!r}", "pass a price series", where)
        if self.capacity is not None and self.capacity.kind != "availability":
            raise InputError(f"{where}: the capacity series is of kind {self.capacity.kind!r}", "pass an availability series", where)
        if not (math.isfinite(self.on_demand_per_hour) and self.on_demand_per_hour > 0):
            raise InputError(f"{where}: on-demand price must be > 0, got {self.on_demand_per_hour!r}",
                             "add on_demand_per_hour to the instance in a user catalog", where)
        if not (math.isfinite(self.speed) and self.speed > 0):
            raise InputError(f"{where}: speed must be > 0, got {self.speed!r}", where=where)

    @property
    def key(self) -> tuple[str, str]:
        return (self.zone, self.instance.name)

    @property
    def id(self) -> str:
        return f"{self.zone}/{self.instance.name}"

    @property
    def start(self) -> float:
        return max(self.price.start, self.capacity.start) if self.capacity is not None else self.price.start

    @property
    def end(self) -> float:
        return min(self.price.end, self.capacity.end) if self.capacity is not None else self.price.end

    def covers(self, t0: float, t1: float) -> bool:
        return self.start <= t0 and t1 <= self.end

    def spot_price(self, t: float) -> float:
        return float(self.price.value_at(t))

    @property
    def trace_nodes(self) -> int | None:
        """The node count the capacity trace was collected for (SkyPilot's ``16-node`` folders:
        ``meta.extra["nodes"]``), ``None`` when the trace does not say."""
        if self.capacity is None:
            return None
        n = self.capacity.meta.extra.get("nodes")
        return int(n) if isinstance(n, int) and not isinstance(n, bool) and n >= 1 else None

    @functools.cached_property
    def counts_nodes(self) -> bool:
        """Whether the capacity series counts nodes (issue 31): a trace of more than one node, or one
        whose values exceed 1.  A 1-node trace (or a 0/1 series) says "the job can run" instead."""
        if self.capacity is None:
            return False
        n = self.trace_nodes
        if n is not None:
            return n > 1
        return bool(np.max(np.asarray(self.capacity.values, dtype=float)) > 1)

    def nodes_at(self, times: np.ndarray | float, workers: int) -> np.ndarray:
        """Spot nodes a job of ``workers`` nodes can have at ``times`` (price aside): ``min(k, workers)``
        for a count series, ``workers`` or 0 for a 0/1 series, ``workers`` without a capacity trace."""
        ts = np.atleast_1d(np.asarray(times, dtype=float))
        if self.capacity is None:
            return np.full(ts.shape, int(workers), dtype=np.int64)
        v = np.floor(np.asarray(self.capacity.value_at(ts), dtype=float) + 1e-9).astype(np.int64)
        if self.counts_nodes:
            return np.minimum(v, int(workers))
        return np.where(v >= 1, int(workers), 0)

    def nodes(self, t: float, workers: int) -> int:
        """:meth:`nodes_at` at one time (the scalar path the sweep takes at every event)."""
        if self.capacity is None:
            return int(workers)
        v = math.floor(float(self.capacity.value_at(float(t))) + 1e-9)
        if self.counts_nodes:
            return min(int(v), int(workers))
        return int(workers) if v >= 1 else 0

    def has_capacity(self, t: float, bid: float, price: float | None = None, need: int = 1) -> bool:
        """Spot capacity at ``t`` for a job bidding ``bid`` $/h (``price``: the spot price at ``t`` if
        known): at least ``need`` nodes on a count series (issue 31), the job on a 0/1 series."""
        if self.capacity is not None:
            v = float(self.capacity.value_at(t))
            if v < (max(1, int(need)) if self.counts_nodes else 1) - 1e-9:
                return False
        return (self.spot_price(t) if price is None else price) <= bid

    def next_change(self, t: float) -> float:
        """The first time after ``t`` when the price or the capacity changes (``inf`` if none)."""
        nxt = math.inf
        for s in (self.price, self.capacity):
            if s is None:
                continue
            i = int(np.searchsorted(s.times, t, side="right"))
            if i < s.times.size:
                nxt = min(nxt, float(s.times[i]))
        return nxt

    @functools.cached_property
    def _runs_cache(self) -> dict[int, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
        return {}

    def _capacity_runs(self, need: int = 1) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
        """Capacity as runs of "at least ``need`` nodes" (the job on a 0/1 series): point times, up
        flags, the start of each point's run, the up-seconds before each point."""
        if self.capacity is None:
            return None
        need = max(1, int(need)) if self.counts_nodes else 1
        if need in self._runs_cache:
            return self._runs_cache[need]
        times = np.asarray(self.capacity.times, dtype=float)
        up = np.asarray(self.capacity.values, dtype=float) >= need - 1e-9
        starts = times.copy()
        for i in range(1, times.size):
            if up[i] == up[i - 1]:
                starts[i] = starts[i - 1]
        widths = np.diff(np.append(times, self.capacity.end))
        cum = np.concatenate([[0.0], np.cumsum(np.where(up, widths, 0.0))])
        self._runs_cache[need] = (times, up, starts, cum)
        return times, up, starts, cum

    def streak(self, t: float, need: int = 1) -> float | None:
        """Seconds the place has been in its current capacity state at ``t`` (``> 0`` up, ``< 0`` down;
        up: at least ``need`` nodes on a count series; ``None`` without an availability trace).  Only data up to ``t``."""
        runs = self._capacity_runs(need)
        if runs is None:
            return None
        times, up, starts, _ = runs
        i = int(np.searchsorted(times, t, side="right")) - 1
        if i < 0:
            return None
        age = max(float(t - starts[i]), 1e-9)
        return age if up[i] else -age

    def availability_before(self, t: float, window_s: float, need: int = 1) -> float | None:
        """Share of ``[t - window_s, t)`` with capacity (at least ``need`` nodes on a count series;
        ``None`` without a trace or with no data there)."""
        runs = self._capacity_runs(need)
        if runs is None or window_s <= 0:
            return None
        times, up, _, cum = runs
        lo = max(float(t) - window_s, float(times[0]))
        if lo >= t:
            return None

        def upto(x: float) -> float:
            i = int(np.searchsorted(times, x, side="right")) - 1
            return float(cum[i] + (x - times[i]) * (1.0 if up[i] else 0.0))

        return (upto(float(t)) - upto(lo)) / (float(t) - lo)

    def change_points(self, t0: float, t1: float) -> np.ndarray:
        pts = [self.price.change_points(t0, t1)]
        if self.capacity is not None:
            pts.append(self.capacity.change_points(t0, t1))
        return np.unique(np.concatenate(pts))


def _constant_price(value: float, cap: StepSeries, instance: str) -> StepSeries:
    meta = SeriesMeta(f"catalog-spot:{cap.meta.zone}:{instance}", "price", cap.meta.cloud, cap.meta.region, cap.meta.zone, instance,
                      "catalog spot_per_hour")
    return StepSeries(np.array([cap.start]), np.array([value]), cap.end, meta)


#: SkyPilot's availability traces name an accelerator and count (``v100_1``); on AWS, where they
#: were collected, these are the instance types below (``skypilot-spot-traces/SOURCE.txt``)
SKYPILOT_AWS_TYPES = {"k80_1": "p2.xlarge", "k80_8": "p2.8xlarge", "k80_16": "p2.16xlarge",
                      "v100_1": "p3.2xlarge", "v100_4": "p3.8xlarge", "v100_8": "p3.16xlarge"}


def _type_name(s: StepSeries) -> str:
    name = s.meta.instance
    if s.kind == "availability" and (s.meta.cloud in ("", "aws")) and name in SKYPILOT_AWS_TYPES:
        return SKYPILOT_AWS_TYPES[name]
    return name


def check_instance_types(catalog: Catalog, types: Sequence[str] | None) -> None:
    """Raise InputError (exit 2) naming every type of ``types`` (``--types``) the catalog does not hold."""
    known = {n.lower() for n in catalog.names()}
    unknown = [t for t in (types or []) if str(t).lower() not in known]
    if unknown:
        raise InputError(f"unknown instance type(s) {', '.join(map(repr, unknown))} in --types",
                         "list catalog types such as p3.2xlarge,p2.xlarge (or add yours under market.catalog)", "--types")


def build_places(series: Iterable[StepSeries], catalog: Catalog, family: str, home_instance: str,
                 instance_types: Sequence[str] | None = None, spot_price: float | None = None) -> tuple[list[Place], list[str]]:
    """Places from loaded trace series (:func:`spotwise.market.traces.load_traces`).

    ``instance_types``: the types the job may use (default: ``home_instance`` only).  SkyPilot's
    accelerator names are read as the AWS types they were collected on (:data:`SKYPILOT_AWS_TYPES`).
    A place with an availability trace and no price trace is priced at ``spot_price`` ($/h) if
    given, else at the catalog's fixed spot price of its type.  Returns ``(places, skipped)``,
    ``skipped`` naming each series left out and why.  No place at all is an :class:`InputError`
    saying which zones and types the traces hold.
    """
    if spot_price is not None and not (math.isfinite(spot_price) and spot_price > 0):
        raise InputError(f"--spot-price must be a positive $/h, got {spot_price!r}", "e.g. --spot-price 0.92", "--spot-price")
    types = list(instance_types) if instance_types else [home_instance]
    check_instance_types(catalog, types)
    home = catalog.instance(home_instance)
    try:
        home_thr = catalog.throughput(home, family)
    except InputError:
        home_thr = None
    prices: dict[tuple[str, str], StepSeries] = {}
    caps: dict[tuple[str, str], StepSeries] = {}
    skipped: list[str] = []
    seen: list[str] = []
    for s in series:
        key = (s.meta.zone or s.meta.region, _type_name(s))
        seen.append(f"{key[0]}/{key[1]}")
        if key[1] not in types:
            skipped.append(f"{s.meta.id}: type {key[1]!r} not among {types}")
            continue
        (prices if s.kind == "price" else caps)[key] = s
    places: list[Place] = []
    for key in sorted(set(prices) | set(caps)):
        zone, inst_name = key
        try:
            inst = catalog.instance(inst_name)
        except InputError as exc:
            skipped.append(f"{zone}/{inst_name}: {exc.what}")
            continue
        if inst.on_demand_per_hour is None:
            skipped.append(f"{zone}/{inst_name}: the catalog has no on-demand price")
            continue
        cap = caps.get(key)
        price = prices.get(key)
        if price is None:
            assert cap is not None
            fixed = spot_price if spot_price is not None else inst.spot_per_hour
            if fixed is None:
                skipped.append(f"{zone}/{inst_name}: availability only, and no spot price (pass --spot-price, "
                               "or add spot_per_hour to the type in a user catalog)")
                continue
            price = _constant_price(float(fixed), cap, inst_name)
        if inst_name == home_instance or home_thr is None:
            speed = 1.0
        else:
            try:
                speed = catalog.throughput(inst, family) / home_thr
            except InputError as exc:
                skipped.append(f"{zone}/{inst_name}: {exc.what}")
                continue
        region = (price.meta.region or (cap.meta.region if cap is not None else "")) or zone
        places.append(Place(zone, region, inst, price, float(inst.on_demand_per_hour), speed, cap))
    if not places:
        unpriced = [k for k in skipped if "no spot price" in k]
        if unpriced:
            raise InputError(f"the availability traces of {home_instance} have no price ({unpriced[0]})",
                             "pass --spot-price P ($/h), or price traces of the same zones and period", "--spot-price")
        raise InputError(f"no place to run {home_instance} in the traces (they hold {', '.join(sorted(set(seen))[:12]) or 'nothing'})",
                         "pass traces of the job's instance type, or list the types it may use with --types", "--trace")
    return places, skipped


def capacity_from_lifetimes(table_or_model: object, start: float, end: float, seed: int, zone: str, instance: str,
                            **params: object) -> StepSeries:
    """A 0/1 capacity series drawn from a preemptible-VM lifetime distribution, so that a sweep can
    replay e.g. GCP preemptible lifetimes (:func:`spotwise.market.traces.load_gcp_lifetime_csv`).

    Renewal process (:class:`spotwise.market.preemption.LifetimeRevocation`): capacity is up for
    a lifetime drawn from the table (capped, 24 h on GCE), down for the restart gap after each
    revocation, up again for a fresh lifetime, ... over ``[start, end)``.  ``table_or_model`` is
    a lifetime table (anything with ``lifetimes_s``; lifetimes <= 0 are dropped; ``params`` go to
    :class:`LifetimeRevocation`, e.g. ``restart_delay_s``, ``cap_s``) or a revocation model with
    ``active_intervals`` (worker 0's intervals are used).  Deterministic for a given ``seed``.
    The series' meta names ``zone``, its region and ``instance`` so that :func:`build_places`
    pairs it with the catalog's fixed spot price (GCE types have one).
    """
    from spotwise.market.preemption import LifetimeRevocation

    where = "capacity_from_lifetimes"
    if not (isinstance(start, (int, float)) and isinstance(end, (int, float)) and math.isfinite(start)
            and math.isfinite(end) and end > start):
        raise InputError(f"need finite start < end, got {start!r}, {end!r}", where=where)
    if not zone or not instance:
        raise InputError("zone and instance must be non-empty", "name the place the series stands for", where)
    if hasattr(table_or_model, "active_intervals"):
        if params:
            raise InputError("params apply to a lifetime table, not to a model", "set them on the model", where)
        model = table_or_model
    elif hasattr(table_or_model, "lifetimes_s"):
        lifes = np.asarray(getattr(table_or_model, "lifetimes_s"), dtype=float)
        lifes = lifes[np.isfinite(lifes) & (lifes > 0)]  # a zero-length life is no up-time (one K80 row of lifetime.csv)
        if lifes.size == 0:
            raise InputError("the lifetime table has no positive lifetime", "check the filter (by_gpu, by_zone)", where)
        model = LifetimeRevocation(lifes, **params)  # type: ignore[arg-type]
    else:
        raise InputError(f"{type(table_or_model).__name__} is neither a lifetime table nor a revocation model",
                         "pass load_gcp_lifetime_csv(...) or a LifetimeRevocation", where)
    intervals = model.active_intervals(0, float(start), float(end), rng=np.random.default_rng(seed))  # type: ignore[attr-defined]
    times: list[float] = [float(start)]
    values: list[float] = [0.0]
    for a, b in intervals:
        if b <= a:
            continue
        if times[-1] == a and values[-1] == 0.0 and len(times) > 1 and values[-2] == 1.0:
            times.pop()  # a zero-length gap: the capacity stays up
            values.pop()
        elif times[-1] == a:
            values[-1] = 1.0
        else:
            times.append(float(a))
            values.append(1.0)
        if b < end:
            times.append(float(b))
            values.append(0.0)
    region = zone.rsplit("-", 1)[0] if zone.count("-") >= 2 else zone
    cloud = "gcp" if hasattr(table_or_model, "lifetimes_s") else ""
    meta = SeriesMeta(f"lifetimes:{zone}:{instance}:seed{seed}", "availability", cloud, region, zone, instance,
                      str(getattr(table_or_model, "source", "") or type(table_or_model).__name__),
                      {"seed": seed, "model": type(model).__name__})
    return StepSeries(np.array(times), np.array(values), float(end), meta)
