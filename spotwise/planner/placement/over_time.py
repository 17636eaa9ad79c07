"""Placement of one training job over time on real spot price traces (paper 003 Sec. 3.2).

``papers/003_c06237e546a4f08e.txt`` Sec. 3.2.3 / Figure 5 compares, for one single-GPU training
job of a fixed amount of work, the compute cost of five cumulative strategies:

======================  =====================================================================
``cheapest_v100``       the cheapest 1xV100 instance (zone) in the home region (AWS us-east-1)
                        at the start, kept for the whole job (the baseline of Figure 5);
``gpu_type``            the single-GPU instance type of the home region with the highest
                        *cost-normalised throughput* (Sec. 3.1, Table 1) at the start, kept;
``multi_gpu``           as ``gpu_type`` but 4x/8x/16x-GPU instances count too, compared per
                        unit of work (Sec. 3.2.2 "Per-GPU price for multi-GPU instances");
``multi_cloud``         the best option across AWS (every region loaded) and Azure at the start,
                        kept ("picks the cheapest instance across AWS and Azure at the start of
                        training, and then sticks with this choice");
``dynamic``             re-decides every ``period_s`` (default hourly): "continually picks the
                        cheapest instance across AWS and Azure through training as prices
                        change" -- here moving only when the saving over the remaining work, at
                        current prices, exceeds the cost of the move (below).
======================  =====================================================================

``dynamic`` is the paper's *online* rule (decisions use only prices known at the decision
time), not an offline optimum: no dynamic programme over future prices is solved.

Units and models
----------------
* Work is in **V100-hours** of the job's model family: ``W`` V100-hours take ``W`` hours on one
  V100 and ``W * T(V100) / T(g)`` hours on one GPU ``g``, where ``T`` is the catalog's relative
  throughput (paper 003 Table 1).  On an ``n``-GPU instance the job is by default *packed*: it
  is one of ``n`` single-GPU jobs sharing the instance, pays ``price / n`` and runs at one GPU's
  speed (the per-GPU view of Sec. 3.2.2 / Figure 4; Figure 5 shows single-GPU jobs).
  ``multi_gpu="data_parallel"`` instead gives it the whole instance at the catalog's linear
  scaling (``n x`` one GPU -- an upper bound).  Per unit of work both cost the same; only the
  duration, hence the price history the job sees, differs.
* Compute is billed per second at the trace price in force (``StepSeries.integral``).
* A **move** (any change of option: instance type, zone, region or cloud) costs ``restart_s``
  seconds on the *new* instance at its price with no progress, plus ``checkpoint_gb *
  egress_per_gb`` when the region or cloud changes (Sec. 3.2.1, Table 2: a model checkpoint
  crosses to the internet once; ingress is free).  Datasets are assumed present on every cloud,
  as in Figure 5 ("All results assume that datasets are available on each cloud").
* The first start is free for every strategy (all would pay it), so strategies differ only by
  compute and moves.

Failure behaviour: a job that cannot be finished inside the price data (the chosen option's
trace, or every trace for ``dynamic``, ends first) raises :class:`~spotwise.errors.InfeasibleError`
saying how much work was left and how to fix it; no series usable for the job's family is an
:class:`~spotwise.errors.InputError`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Literal, Sequence

from spotwise.errors import InfeasibleError, InputError
from spotwise.market.catalog import Catalog, InstanceType
from spotwise.market.series import StepSeries, iso8601

__all__ = [
    "PlacementJob",
    "MoveCost",
    "PlacementOption",
    "Segment",
    "PlacementResult",
    "STRATEGIES",
    "DEFAULT_STRATEGY",
    "build_options",
    "plan_placement",
    "compare_strategies",
]

Strategy = Literal["cheapest_v100", "gpu_type", "multi_gpu", "multi_cloud", "dynamic"]
#: Figure 5's strategies, in its (cumulative) order.
STRATEGIES: tuple[str, ...] = ("cheapest_v100", "gpu_type", "multi_gpu", "multi_cloud", "dynamic")
DEFAULT_STRATEGY = "dynamic"
#: Work below this many V100-hours counts as done (float round-off).
_EPS_WORK = 1e-9


def _pos(v: object, name: str, where: str, *, zero_ok: bool = False) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or math.isnan(v) or not math.isfinite(v):
        raise InputError(f"{name} must be a finite number, got {v!r}", f"give {name} as a plain number", where)
    if v < 0 or (v == 0 and not zero_ok):
        raise InputError(f"{name} must be {'>= 0' if zero_ok else '> 0'}, got {v!r}", f"give a {'non-negative' if zero_ok else 'positive'} {name}", where)
    return float(v)


@dataclass(frozen=True)
class PlacementJob:
    """One training job: ``work_v100_hours`` of model ``family`` (paper 003 Figure 5: "4 V100-days").

    ``checkpoint_gb`` is what a move transfers (paper 003 Table 2: ResNet-50 0.098 GB,
    BERT-Base 0.408 GB).
    """

    work_v100_hours: float
    family: str
    checkpoint_gb: float = 0.098
    name: str = "job"

    def __post_init__(self) -> None:
        where = f"placement job {self.name!r}"
        object.__setattr__(self, "work_v100_hours", _pos(self.work_v100_hours, "work_v100_hours", where))
        object.__setattr__(self, "checkpoint_gb", _pos(self.checkpoint_gb, "checkpoint_gb", where, zero_ok=True))
        if not isinstance(self.family, str) or not self.family.strip():
            raise InputError(f"family must be a model family name, got {self.family!r}", "e.g. 'resnet50' or 'transformer'", where)
        object.__setattr__(self, "family", self.family.strip().lower())

    @classmethod
    def from_iterations(cls, iterations: float, iterations_per_v100_hour: float, family: str, **kw: Any) -> "PlacementJob":
        """A job given as iterations and its measured speed on one V100."""
        it = _pos(iterations, "iterations", "placement job")
        rate = _pos(iterations_per_v100_hour, "iterations_per_v100_hour", "placement job")
        return cls(it / rate, family, **kw)


@dataclass(frozen=True)
class MoveCost:
    """What moving the job to another option costs (paper 003 Sec. 3.2.1).

    ``restart_s`` seconds on the new instance at its price without progress (provision, load
    the checkpoint, warm up) for every move; ``egress_per_gb`` $ per GB of checkpoint when the
    region or cloud changes.  The default egress price is the catalog's ``aws-s3-standard``
    internet egress (0.09 $/GB, 2020); the default restart time (5 min) is an assumption, not a
    paper figure.
    """

    restart_s: float = 300.0
    egress_per_gb: float = 0.09

    def __post_init__(self) -> None:
        object.__setattr__(self, "restart_s", _pos(self.restart_s, "restart_s", "move cost", zero_ok=True))
        object.__setattr__(self, "egress_per_gb", _pos(self.egress_per_gb, "egress_per_gb", "move cost", zero_ok=True))


@dataclass(frozen=True, eq=False)
class PlacementOption:
    """A place the job can run: one price series (cloud/region/zone/instance) and its speed.

    ``throughput`` is in V100-hours of work per hour (1.0 for one V100).
    """

    series: StepSeries
    instance: InstanceType
    throughput: float
    share: float = 1.0

    def __post_init__(self) -> None:
        _pos(self.throughput, "throughput", f"option {self.series.meta.id!r}")
        if not 0 < _pos(self.share, "share", f"option {self.series.meta.id!r}") <= 1:
            raise InputError(f"share must lie in (0, 1], got {self.share!r}", "share is the fraction of the instance the job pays for", f"option {self.series.meta.id!r}")

    @property
    def id(self) -> str:
        return self.series.meta.id

    @property
    def cloud(self) -> str:
        return self.series.meta.cloud or self.instance.cloud

    @property
    def region(self) -> str:
        return self.series.meta.region

    @property
    def zone(self) -> str:
        return self.series.meta.zone

    @property
    def gpus(self) -> int:
        return self.instance.accelerator_count

    def price(self, t: float) -> float:
        """$/h the job pays at ``t``: the trace price times ``share``."""
        return float(self.series.value_at(t)) * self.share

    def cost(self, t0: float, t1: float) -> float:
        """$ the job pays on ``[t0, t1)`` (per-second billing at the trace price, times ``share``)."""
        return self.series.integral(t0, t1) / 3600.0 * self.share

    def unit_price(self, t: float) -> float:
        """$ per V100-hour of work at time ``t``: price / throughput (inverse cost-normalised throughput)."""
        return self.price(t) / self.throughput

    def covers(self, t: float) -> bool:
        return self.series.start <= t < self.series.end


def build_options(
    series: Iterable[StepSeries],
    catalog: Catalog,
    family: str,
    *,
    multi_gpu: Literal["packed", "data_parallel"] = "packed",
) -> tuple[list[PlacementOption], list[str]]:
    """Pair every price series with its catalog instance and the job's throughput there.

    ``multi_gpu`` says how a single-GPU job of Figure 5 uses an instance with ``n > 1`` GPUs:
    ``"packed"`` (default, the paper's per-GPU view of Sec. 3.2.2 / Figure 4: ``n`` such jobs
    share the instance) -- the job pays ``price / n`` and runs at one GPU's speed;
    ``"data_parallel"`` -- the job pays the whole price and runs ``n`` times faster (the
    catalog's linear-scaling upper bound).

    Returns ``(options, skipped)``; ``skipped`` lists ``"id: reason"`` for series that are not
    prices, name an instance the catalog lacks, or have no throughput for ``family``.  The
    reference is the catalog's V100 profile for the family (Table 1), so a 1xV100 option has
    throughput 1.0.
    """
    fam = family.lower()
    ref = catalog.accelerator_profile("V100").get(fam)
    if ref is None:
        raise InputError(f"no V100 throughput for model family {family!r} in the catalog",
                         f"known families: {catalog.families()}; add 'accelerators: {{V100: {{{fam}: <speed>}}}}' to a user catalog", "placement")
    options: list[PlacementOption] = []
    skipped: list[str] = []
    for s in series:
        if s.meta.kind != "price":
            skipped.append(f"{s.meta.id}: not a price series")
            continue
        try:
            it = catalog.instance(s.meta.instance, cloud=s.meta.cloud or None, region=s.meta.region or None)
            thr = catalog.throughput(it, fam)
        except InputError as exc:
            skipped.append(f"{s.meta.id}: {exc.what}")
            continue
        if multi_gpu == "packed" and it.accelerator_count > 1:
            n = it.accelerator_count
            options.append(PlacementOption(s, it, thr / ref / n, 1.0 / n))
        elif multi_gpu in ("packed", "data_parallel"):
            options.append(PlacementOption(s, it, thr / ref))
        else:
            raise InputError(f"unknown multi_gpu mode {multi_gpu!r}", "use 'packed' or 'data_parallel'", "placement")
    return options, skipped


@dataclass(frozen=True)
class Segment:
    """One stretch of the schedule on one option: running (``kind="run"``) or restarting after a move.

    ``price_per_hour`` is the time-weighted mean price over the segment; ``throughput`` is in
    V100-hours per hour (0 while restarting); ``work`` in V100-hours; ``cost`` is compute $ and
    ``egress_cost`` the checkpoint transfer charged with the restart of a cross-region move.
    """

    start: float
    end: float
    option: str
    cloud: str
    region: str
    zone: str
    instance: str
    kind: Literal["run", "restart"]
    price_per_hour: float
    throughput: float
    work: float
    cost: float
    egress_cost: float = 0.0

    @property
    def hours(self) -> float:
        return (self.end - self.start) / 3600.0

    def to_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "start": iso8601(self.start), "end": iso8601(self.end)}


@dataclass(frozen=True)
class PlacementResult:
    """A strategy's schedule and totals.  ``total_cost = compute_cost + move_cost``; ``move_cost``
    is restart compute plus egress; ``total_time_h`` is wall time from start to finish."""

    strategy: str
    job: PlacementJob
    start: float
    end: float
    segments: tuple[Segment, ...]
    total_cost: float
    compute_cost: float
    move_cost: float
    moves: int
    notes: tuple[str, ...] = field(default=())

    @property
    def total_time_h(self) -> float:
        return (self.end - self.start) / 3600.0

    @property
    def options_used(self) -> list[str]:
        out: list[str] = []
        for s in self.segments:
            if not out or out[-1] != s.option:
                out.append(s.option)
        return out

    def stints(self) -> list[dict[str, Any]]:
        """Consecutive segments on one option merged: ``option, start, end, hours, work, cost``."""
        out: list[dict[str, Any]] = []
        for s in self.segments:
            if out and out[-1]["option"] == s.option:
                o = out[-1]
                o["end"] = s.end
                o["work"] += s.work
                o["cost"] += s.cost + s.egress_cost
            else:
                out.append({"option": s.option, "instance": s.instance, "zone": s.zone, "region": s.region, "cloud": s.cloud,
                            "start": s.start, "end": s.end, "work": s.work, "cost": s.cost + s.egress_cost})
        for o in out:
            o["hours"] = (o["end"] - o["start"]) / 3600.0
        return out

    def to_dict(self, with_segments: bool = False) -> dict[str, Any]:
        d: dict[str, Any] = {
            "strategy": self.strategy, "start": iso8601(self.start), "end": iso8601(self.end),
            "total_cost": self.total_cost, "compute_cost": self.compute_cost, "move_cost": self.move_cost,
            "total_time_h": self.total_time_h, "moves": self.moves, "options_used": self.options_used,
            "notes": list(self.notes),
        }
        if with_segments:
            d["segments"] = [s.to_dict() for s in self.segments]
        return d


# ------------------------------------------------------------------------------------ strategies
def _static_pool(options: Sequence[PlacementOption], strategy: str, home: tuple[str, str]) -> list[PlacementOption]:
    cloud, region = home
    local = [o for o in options if o.cloud == cloud and o.region == region]
    if strategy == "cheapest_v100":
        return [o for o in local if o.instance.accelerator.upper() == "V100" and o.gpus == 1]
    if strategy == "gpu_type":
        return [o for o in local if o.gpus == 1]
    if strategy == "multi_gpu":
        return list(local)
    return list(options)  # multi_cloud, dynamic


def _pick(pool: Sequence[PlacementOption], t: float) -> PlacementOption:
    """Highest cost-normalised throughput (lowest $ per V100-hour) at ``t``; ties -> fewer GPUs, then id."""
    return min(pool, key=lambda o: (round(o.unit_price(t), 12), o.gpus, o.id))


def plan_placement(
    job: PlacementJob,
    series: Iterable[StepSeries] | Sequence[PlacementOption],
    catalog: Catalog | None = None,
    *,
    strategy: str = DEFAULT_STRATEGY,
    start: float | None = None,
    period_s: float = 3600.0,
    move: MoveCost = MoveCost(),
    home: tuple[str, str] = ("aws", "us-east-1"),
    multi_gpu: Literal["packed", "data_parallel"] = "packed",
) -> PlacementResult:
    """Schedule ``job`` from ``start`` with one of the Figure 5 strategies (paper 003 Sec. 3.2.3).

    ``series`` are price series from :func:`~spotwise.market.traces.load_traces` (paired with
    ``catalog`` by :func:`build_options`, with its ``multi_gpu`` mode) or ready
    :class:`PlacementOption` s.  ``start``
    defaults to the latest series start (every option priced).  ``home`` is the (cloud, region)
    of the single-cloud strategies (the paper's AWS us-east-1).  Decisions are taken at
    ``start + k * period_s``; static strategies never move (unless their trace ends, which is an
    error), ``dynamic`` moves from option ``a`` to the cheapest option ``b`` (lowest price per
    V100-hour) when ``(u_a - u_b) * remaining_work > restart_h * price_b + egress``, with ``u``
    the current $ per V100-hour, and is forced to move when ``a``'s trace ends.
    """
    if strategy not in STRATEGIES:
        raise InputError(f"unknown placement strategy {strategy!r}", f"valid names are {', '.join(STRATEGIES)}", "placement")
    period_s = _pos(period_s, "period_s", "placement")
    opts = list(series)
    notes: list[str] = []
    if opts and isinstance(opts[0], PlacementOption):
        options = opts  # type: ignore[assignment]
    else:
        if catalog is None:
            catalog = Catalog.default()
        options, skipped = build_options(opts, catalog, job.family, multi_gpu=multi_gpu)  # type: ignore[arg-type]
        if skipped:
            notes.append(f"{len(skipped)} series skipped (not in catalog / no {job.family} throughput)")
    if not options:
        raise InputError(f"no price series usable for model family {job.family!r}",
                         "load AWS/Azure price traces whose instances are in the catalog", "placement")
    t0 = max(o.series.start for o in options) if start is None else float(start)
    pool = [o for o in _static_pool(options, strategy, home) if o.covers(t0)]
    if not pool:
        where = f"{home[0]} {home[1]}" if strategy in ("cheapest_v100", "gpu_type", "multi_gpu") else "any cloud"
        raise InfeasibleError(
            f"strategy {strategy!r}: no eligible price series at {iso8601(t0)} in {where}",
            "load traces that cover the start time (and the home region), or pick another start", "placement")
    dynamic = strategy == "dynamic"
    restart_h = move.restart_s / 3600.0

    segments: list[Segment] = []
    remaining = job.work_v100_hours
    t = t0
    cur: PlacementOption | None = None
    moves = 0
    compute = move_cost = 0.0
    while remaining > _EPS_WORK:
        # ---- decide
        if cur is None:
            new = _pick(pool, t)
        elif not dynamic:
            new = cur
        else:
            live = [o for o in pool if o.covers(t)]
            if not live:
                raise InfeasibleError(
                    f"strategy 'dynamic': every price trace ends by {iso8601(t)} with {remaining:.4g} V100-hours of work left",
                    "start earlier, shorten the job, or load longer traces", "placement")
            best = _pick(live, t)
            if not cur.covers(t):
                new = best  # forced: the current option's data ended
            elif best is not cur:
                egress = job.checkpoint_gb * move.egress_per_gb if (best.cloud, best.region) != (cur.cloud, cur.region) else 0.0
                saving = (cur.unit_price(t) - best.unit_price(t)) * remaining
                new = best if saving > restart_h * best.price(t) + egress else cur
            else:
                new = cur
        t_run = t
        if cur is not None and new is not cur:
            moves += 1
            egress = job.checkpoint_gb * move.egress_per_gb if (new.cloud, new.region) != (cur.cloud, cur.region) else 0.0
            t_run = t + move.restart_s
            c = new.cost(t, t_run)
            segments.append(Segment(t, t_run, new.id, new.cloud, new.region, new.zone, new.instance.name, "restart",
                                    c / restart_h if restart_h > 0 else new.price(t), 0.0, 0.0, c, egress))
            move_cost += c + egress
        cur = new
        # ---- run until the next decision, the end of the work, or the end of the data
        k = math.floor((t_run - t0) / period_s + 1e-9) + 1
        t_next = t0 + k * period_s
        t_done = t_run + remaining / cur.throughput * 3600.0
        t_end = min(t_next, t_done)
        if t_end > cur.series.end + 1e-6:
            if not dynamic:
                need_h = (t_done - t0) / 3600.0
                raise InfeasibleError(
                    f"strategy {strategy!r}: the job needs {need_h:.4g} h on {cur.id} from {iso8601(t0)} but its price trace "
                    f"ends at {iso8601(cur.series.end)}",
                    "start earlier, shorten the job, or load traces that run longer", "placement")
            t_end = cur.series.end
        if t_end > t_run:
            c = cur.cost(t_run, t_end)
            w = remaining if t_end == t_done else cur.throughput * (t_end - t_run) / 3600.0
            segments.append(Segment(t_run, t_end, cur.id, cur.cloud, cur.region, cur.zone, cur.instance.name, "run",
                                    c / ((t_end - t_run) / 3600.0), cur.throughput, w, c))
            compute += c
            remaining -= w
        t = t_end
    return PlacementResult(strategy, job, t0, t, tuple(segments), compute + move_cost, compute, move_cost, moves, tuple(notes))


def compare_strategies(
    job: PlacementJob,
    series: Iterable[StepSeries] | Sequence[PlacementOption],
    catalog: Catalog | None = None,
    *,
    strategies: Sequence[str] = STRATEGIES,
    **kw: Any,
) -> dict[str, PlacementResult]:
    """Run several strategies on the same job, traces and start (paper 003 Figure 5)."""
    opts = list(series)
    if opts and not isinstance(opts[0], PlacementOption):
        opts, _ = build_options(opts, catalog or Catalog.default(), job.family, multi_gpu=kw.pop("multi_gpu", "packed"))  # type: ignore[arg-type]
    kw.pop("multi_gpu", None)
    return {s: plan_placement(job, opts, catalog, strategy=s, **kw) for s in strategies}
