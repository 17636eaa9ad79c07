"""The Ledger: what a job costs, event by event, on a clock the caller owns.

The simulator and the runtime drive one :class:`Ledger` with the same calls and their own
(virtual or wall) clock: :meth:`Ledger.start` / :meth:`Ledger.stop` for instances,
:meth:`Ledger.function_call` for serverless workers, :meth:`Ledger.storage` and
:meth:`Ledger.egress` for checkpoints, :meth:`Ledger.close` at the end.  Times are seconds on
the caller's clock; a price :class:`~spotwise.market.series.StepSeries` must use the same time
base.

What an instance is charged
---------------------------
An instance is charged for the time it is *active* at the **prevailing** price -- the spot
price in force, never the bid (``papers/000_3c734f3ffedcac15.txt`` Sec. IV: a worker that bids
``b`` pays the spot price ``p <= b`` while it runs) -- or at a fixed $/h (on-demand price; GCE
preemptible price, ``papers/002_a246f6afe29b4bfb.txt`` Table II).  Prices are $/hour.

A :class:`BillingPolicy` turns an active interval ``[t0, t1)`` of length ``d`` into a billed
duration ``B`` and a charge:

* granularity ``g`` (seconds; ``0`` = continuous): ``B = ceil(d / g) * g``;
* **revocation rule** (``revoked_partial_free``, the pre-2017 AWS spot rule): if the *provider*
  revoked a *spot* instance, the partial last period is free: ``B = floor(d / g) * g`` and no
  minimum applies.  A stop by the user (``released`` / ``finished``) pays the started period;
* minimum charge ``m`` (e.g. AWS / GCE per-second billing with a 60 s minimum):
  ``B = max(B, m)`` for any ``d > 0`` (except under the revocation rule above);
* price rule ``"integral"``: charge ``= int_{t0}^{t0+B} price(t) dt / 3600`` (via
  :meth:`StepSeries.integral`; the extension beyond ``t1`` added by rounding or the minimum is
  charged at the price in force then, as if the instance had run that long);
* price rule ``"period_start"`` (the old EC2 spot rule, used by the per-hour preset): each
  started period ``k`` (``[t0 + k g, t0 + (k+1) g)``) is charged in full at the price in force at
  its *start*, ``price(t0 + k g) * g / 3600``.

Paper 004 (``papers/004_9dc2adb66dc8d26e.txt``, "Cost computation") bills VMs per second with no
minimum to be conservative; that is :meth:`BillingPolicy.exact`.

Serverless calls cost ``n * (gb * seconds * $/GB-s + $/request)`` (paper 004 Table 2 prices, see
:class:`~spotwise.market.catalog.FunctionPricing`).  Storage is prorated GB-months
(``gb * (t1 - t0) / SECONDS_PER_MONTH * $/GB-month``, with a month of 730 hours, the AWS
convention); egress is ``gb * $/GB`` (paper 003, Sec. 3.2, counts checkpoint moves this way).

Running cost
------------
:meth:`Ledger.cost_until` ``(t)`` charges every interval as it stood at ``t``: finished
intervals at their final charge, intervals still open at ``t`` as if the user released them at
``t``.  It is non-decreasing in ``t`` except under ``revoked_partial_free``, where a revocation
refunds the partial period it had been showing.

Checkpoint and resume
---------------------
A job that is checkpointed at virtual time ``T`` and resumed later must be billed exactly like
the job that never stopped (the interrupted wall-clock gap is not virtual time).  So a checkpoint
must not settle the intervals still open at ``T`` -- settling them would charge a minimum (or a
started hour) that the uninterrupted job never pays, and the resumed job would then start a new
interval with a new minimum.  :meth:`Ledger.snapshot` ``(T)`` therefore separates the money that
is *settled* at ``T`` (stopped intervals at their final charge; other charges as they stood at
``T``) from the intervals still *open* (instance id, original start, category, market, policy).
The resuming side adds the settled money to its own totals and calls :meth:`Ledger.reopen` for
each open interval with the *original* start time, so the minimum charge, the rounding and the
per-hour periods continue where they were.  A storage charge whose interval extends past ``T`` is
settled only up to ``T`` (record the rest again after the resume).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal, Union

from spotwise.errors import InputError
from spotwise.market.catalog import FunctionPricing, InstanceType, StoragePricing
from spotwise.market.series import StepSeries

SECONDS_PER_HOUR = 3600.0
#: A billing month: 730 hours (365 * 24 / 12), the AWS convention for GB-month proration.
SECONDS_PER_MONTH = 730.0 * 3600.0

PriceRule = Literal["integral", "period_start"]
PRICE_RULES: tuple[str, ...] = ("integral", "period_start")
MARKETS: tuple[str, ...] = ("spot", "on_demand")
#: Instance categories: training workers, the job coordinator, a parameter server, and
#: auxiliary services (MLLess's Redis store and messaging VM, paper 004 Table 2).
INSTANCE_CATEGORIES: tuple[str, ...] = ("worker", "coordinator", "parameter_server", "service")
STOP_REASONS: tuple[str, ...] = ("revoked", "released", "finished")
#: Categories of the non-instance charges.
OTHER_CATEGORIES: tuple[str, ...] = ("function", "storage", "egress")

#: What :meth:`Ledger.start` accepts as a price: a constant $/h, a price series, or a catalog entry.
PriceLike = Union[float, int, StepSeries, InstanceType]

_EPS = 1e-9


def _finite(x: object, name: str, where: str, *, nonneg: bool = False) -> float:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise InputError(f"{name} must be a number, got {x!r}", f"pass {name} as a number", where)
    v = float(x)
    if not math.isfinite(v):
        raise InputError(f"{name} must be finite, got {x!r}", f"pass a finite {name}", where)
    if nonneg and v < 0:
        raise InputError(f"{name} must be >= 0, got {x!r}", f"{name} cannot be negative", where)
    return v


# ---------------------------------------------------------------------------- policy
@dataclass(frozen=True)
class BillingPolicy:
    """How an active interval becomes a charge (see the module docstring for the maths)."""

    name: str = "per-second-60s-min"
    granularity_s: float = 1.0
    minimum_s: float = 60.0
    revoked_partial_free: bool = False
    price_rule: PriceRule = "integral"

    def __post_init__(self) -> None:
        where = f"billing policy {self.name!r}"
        object.__setattr__(self, "granularity_s", _finite(self.granularity_s, "granularity_s", where, nonneg=True))
        object.__setattr__(self, "minimum_s", _finite(self.minimum_s, "minimum_s", where, nonneg=True))
        if self.price_rule not in PRICE_RULES:
            raise InputError(f"unknown price_rule {self.price_rule!r}", f"valid rules are {list(PRICE_RULES)}", where)
        if self.price_rule == "period_start" and self.granularity_s == 0:
            raise InputError(
                "price_rule 'period_start' needs billing periods", "set granularity_s > 0 (e.g. 3600) or use price_rule 'integral'", where
            )
        if self.revoked_partial_free and self.granularity_s == 0:
            raise InputError(
                "revoked_partial_free needs billing periods", "set granularity_s > 0 (e.g. 3600 for per-hour billing)", where
            )

    # presets ------------------------------------------------------------------
    @classmethod
    def per_second(cls, minimum_s: float = 60.0) -> "BillingPolicy":
        """Per-second billing with a minimum charge (AWS EC2 Linux and GCE: 60 s)."""
        return cls(f"per-second-{minimum_s:g}s-min", 1.0, minimum_s, False, "integral")

    @classmethod
    def per_hour(cls, revoked_partial_free: bool = True) -> "BillingPolicy":
        """Per-hour billing, each started hour at the price at its start (old EC2 spot rule).

        With ``revoked_partial_free`` (default, the pre-2017 AWS spot rule) a partial hour
        ended by a provider revocation is not billed; a partial hour ended by the user is.
        """
        name = "per-hour-revocation-free" if revoked_partial_free else "per-hour"
        return cls(name, SECONDS_PER_HOUR, 0.0, revoked_partial_free, "period_start")

    @classmethod
    def exact(cls) -> "BillingPolicy":
        """Continuous billing, no rounding or minimum (paper 004's conservative $/s VM cost)."""
        return cls("exact", 0.0, 0.0, False, "integral")

    # maths --------------------------------------------------------------------
    def billed_seconds(self, duration: float, revoked: bool = False) -> float:
        """Billed duration ``B`` for an active duration ``d`` (``revoked``: provider revocation of a spot instance)."""
        d = max(0.0, float(duration))
        if d == 0:
            return 0.0
        g = self.granularity_s
        free_partial = revoked and self.revoked_partial_free
        if g == 0:
            billed = d
        elif free_partial:
            billed = math.floor(d / g + _EPS) * g
        else:
            billed = math.ceil(d / g - _EPS) * g
        if not free_partial:
            billed = max(billed, self.minimum_s)
        return billed

    def charge(self, price: float | StepSeries, t0: float, t1: float, revoked: bool = False) -> float:
        """USD for one instance active on ``[t0, t1)`` at ``price`` ($/h constant or price series)."""
        billed = self.billed_seconds(t1 - t0, revoked)
        if billed == 0:
            return 0.0
        if self.price_rule == "integral":
            if isinstance(price, StepSeries):
                return price.integral(t0, t0 + billed) / SECONDS_PER_HOUR
            return float(price) * billed / SECONDS_PER_HOUR
        g = self.granularity_s
        n = math.ceil(billed / g - _EPS)
        total = 0.0
        for k in range(n):
            length = min(g, billed - k * g)
            p = price.value_at(t0 + k * g) if isinstance(price, StepSeries) else float(price)
            total += float(p) * length / SECONDS_PER_HOUR
        return total

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "granularity_s": self.granularity_s,
            "minimum_s": self.minimum_s,
            "revoked_partial_free": self.revoked_partial_free,
            "price_rule": self.price_rule,
        }


# ---------------------------------------------------------------------------- records
@dataclass
class _Interval:
    instance_id: str
    category: str
    market: str
    instance_type: str
    price: float | StepSeries
    policy: BillingPolicy
    t0: float
    t1: float | None = None
    reason: str | None = None
    cost: float | None = None

    def charge_at(self, t: float) -> float:
        """Charge as the interval stood at time ``t``."""
        if t < self.t0:
            return 0.0
        if self.t1 is not None and t >= self.t1:
            assert self.cost is not None
            return self.cost
        return self.policy.charge(self.price, self.t0, t, revoked=False)

    def to_dict(self) -> dict[str, Any]:
        price: Any = (
            {"series": self.price.meta.id, "mean_per_hour": self.price.mean()} if isinstance(self.price, StepSeries) else self.price
        )
        return {
            "instance_id": self.instance_id,
            "category": self.category,
            "market": self.market,
            "instance_type": self.instance_type,
            "price_per_hour": price,
            "policy": self.policy.name,
            "start": self.t0,
            "stop": self.t1,
            "reason": self.reason,
            "usd": self.cost,
        }


@dataclass(frozen=True)
class Charge:
    """A non-instance charge: a function call, storage, or egress."""

    category: str
    t0: float
    t1: float
    usd: float
    detail: dict[str, Any] = field(default_factory=dict)

    def at(self, t: float) -> float:
        """Portion charged by time ``t`` (storage is prorated over ``[t0, t1]``, others at ``t0``)."""
        if t < self.t0:
            return 0.0
        if self.t1 > self.t0 and t < self.t1:
            return self.usd * (t - self.t0) / (self.t1 - self.t0)
        return self.usd


# ---------------------------------------------------------------------------- ledger
class Ledger:
    """Event-driven cost accounting for one job.

    ``policy`` bills spot instances; ``on_demand_policy`` (default: ``policy`` without the
    revocation rule) bills on-demand ones -- an on-demand instance, such as the coordinator, is
    never revoked by the provider, so it is always billed for its whole active time.
    ``functions`` and ``storage`` are the default serverless and object-store prices.

    Instance ids may be reused after a stop (a replacement VM in the same slot); each start
    begins a new billing interval with its own minimum charge.
    """

    def __init__(
        self,
        policy: BillingPolicy | None = None,
        *,
        on_demand_policy: BillingPolicy | None = None,
        functions: FunctionPricing | None = None,
        storage: StoragePricing | None = None,
    ) -> None:
        self.policy = policy if policy is not None else BillingPolicy.per_second()
        if on_demand_policy is None:
            p = self.policy
            on_demand_policy = BillingPolicy(p.name, p.granularity_s, p.minimum_s, False, p.price_rule)
        self.on_demand_policy = on_demand_policy
        self.functions = functions
        self.storage_pricing = storage
        self._intervals: list[_Interval] = []
        self._open: dict[str, _Interval] = {}
        self._charges: list[Charge] = []
        #: USD of the stopped intervals and the latest stop time: the running cost at a time past
        #: every stop is that plus the open intervals (the coordinator asks at every step)
        self._stopped_usd = 0.0
        self._last_stop = -math.inf

    # ------------------------------------------------------------------ instances
    def start(
        self,
        instance_id: str,
        t: float,
        price: PriceLike,
        *,
        category: str = "worker",
        market: str = "spot",
        policy: BillingPolicy | None = None,
    ) -> None:
        """An instance becomes active (billable) at ``t``.

        ``price``: a constant $/h; a :class:`StepSeries` of kind ``"price"`` (the prevailing spot
        price, same clock as ``t``; before its first point is an error, after its end the last
        price holds); or an :class:`InstanceType`, whose ``on_demand_per_hour`` or fixed
        ``spot_per_hour`` is used according to ``market``.  ``policy`` overrides the ledger's.
        """
        where = f"ledger start({instance_id!r})"
        if not isinstance(instance_id, str) or not instance_id:
            raise InputError(f"instance_id must be a non-empty string, got {instance_id!r}", "name each instance", where)
        t = _finite(t, "t", where)
        if category not in INSTANCE_CATEGORIES:
            raise InputError(f"unknown category {category!r}", f"valid categories are {list(INSTANCE_CATEGORIES)}", where)
        if market not in MARKETS:
            raise InputError(f"unknown market {market!r}", f"valid markets are {list(MARKETS)}", where)
        if instance_id in self._open:
            raise InputError(
                f"instance {instance_id!r} is already running (since t={self._open[instance_id].t0:g})",
                "stop it before starting it again, or use a different instance id",
                where,
            )
        type_name = ""
        resolved: float | StepSeries
        if isinstance(price, InstanceType):
            type_name = price.label
            resolved = price.price_per_hour(market)
        elif isinstance(price, StepSeries):
            if price.kind != "price":
                raise InputError(f"series {price.meta.id!r} is of kind {price.kind!r}", "pass a series of kind 'price' ($/h)", where)
            if t < price.start - _EPS:
                raise InputError(
                    f"t={t:g} is before the price series {price.meta.id!r} begins (t={price.start:g})",
                    "the ledger clock and the price series must share a time base (shift the series or the clock)",
                    where,
                )
            type_name = price.meta.instance
            resolved = price
        else:
            resolved = _finite(price, "price", where, nonneg=True)
        if policy is None:
            policy = self.policy if market == "spot" else self.on_demand_policy
        iv = _Interval(instance_id, category, market, type_name, resolved, policy, t)
        self._open[instance_id] = iv
        self._intervals.append(iv)

    def stop(self, instance_id: str, t: float, reason: str = "released") -> float:
        """The instance stops being billable at ``t``; returns the interval's charge in USD.

        ``reason``: ``"revoked"`` (by the provider: the revocation rule may apply to spot
        instances), ``"released"`` (by the user/policy) or ``"finished"`` (job done).
        """
        where = f"ledger stop({instance_id!r})"
        t = _finite(t, "t", where)
        if reason not in STOP_REASONS:
            raise InputError(f"unknown stop reason {reason!r}", f"valid reasons are {list(STOP_REASONS)}", where)
        iv = self._open.get(instance_id)
        if iv is None:
            running = sorted(self._open)
            known = any(i.instance_id == instance_id for i in self._intervals)
            state = "was already stopped" if known else "was never started"
            raise InputError(
                f"instance {instance_id!r} is not running (it {state})",
                f"stop only running instances; running now: {running if running else 'none'}",
                where,
            )
        if t < iv.t0:
            raise InputError(
                f"stop time t={t:g} is before the start time t={iv.t0:g}", "events must follow the clock forward", where
            )
        revoked = reason == "revoked" and iv.market == "spot"
        iv.t1, iv.reason = t, reason
        iv.cost = iv.policy.charge(iv.price, iv.t0, t, revoked=revoked)
        del self._open[instance_id]
        self._stopped_usd += iv.cost
        self._last_stop = max(self._last_stop, t)
        return iv.cost

    def close(self, t: float) -> float:
        """Stop everything still running at ``t`` (reason ``"finished"``); returns :meth:`total`."""
        for iid in list(self._open):
            self.stop(iid, t, reason="finished")
        return self.total()

    def running(self) -> list[str]:
        """Ids of the instances active now."""
        return sorted(self._open)

    def is_running(self, instance_id: str) -> bool:
        return instance_id in self._open

    # ------------------------------------------------------------------ other charges
    def function_call(
        self, t: float, gb: float, seconds: float, n_requests: int = 1, pricing: FunctionPricing | None = None
    ) -> float:
        """``n_requests`` serverless calls of ``gb`` GB, each lasting ``seconds``, made at ``t``."""
        where = "ledger function_call"
        t = _finite(t, "t", where)
        fp = pricing or self.functions
        if fp is None:
            raise InputError(
                "no serverless pricing given", "pass functions=Catalog.default().function('ibm-functions') to Ledger(), or pricing=", where
            )
        usd = fp.call_cost(gb, seconds, n_requests)
        self._charges.append(
            Charge("function", t, t, usd, {"gb": gb, "seconds": seconds, "n_requests": n_requests, "pricing": fp.name})
        )
        return usd

    def storage(self, t0: float, t1: float, gb: float, pricing: StoragePricing | None = None) -> float:
        """``gb`` GB stored on ``[t0, t1]``, prorated GB-months (month = 730 h)."""
        where = "ledger storage"
        t0, t1 = _finite(t0, "t0", where), _finite(t1, "t1", where)
        gb = _finite(gb, "gb", where, nonneg=True)
        if t1 < t0:
            raise InputError(f"t1={t1:g} is before t0={t0:g}", "give the storage interval as (start, end)", where)
        sp = pricing or self.storage_pricing
        if sp is None:
            raise InputError("no storage pricing given", "pass storage=Catalog.default().storage('aws-s3-standard') to Ledger(), or pricing=", where)
        usd = gb * (t1 - t0) / SECONDS_PER_MONTH * sp.per_gb_month
        self._charges.append(Charge("storage", t0, t1, usd, {"gb": gb, "pricing": sp.name}))
        return usd

    def egress(self, t: float, gb: float, pricing: StoragePricing | None = None) -> float:
        """``gb`` GB sent out of the cloud at ``t`` (e.g. a checkpoint moved to another cloud)."""
        where = "ledger egress"
        t = _finite(t, "t", where)
        gb = _finite(gb, "gb", where, nonneg=True)
        sp = pricing or self.storage_pricing
        if sp is None:
            raise InputError("no egress pricing given", "pass storage=Catalog.default().storage('aws-s3-standard') to Ledger(), or pricing=", where)
        usd = gb * sp.egress_per_gb
        self._charges.append(Charge("egress", t, t, usd, {"gb": gb, "pricing": sp.name}))
        return usd

    # ------------------------------------------------------------------ totals
    def _require_closed(self, what: str) -> None:
        if self._open:
            raise RuntimeError(
                f"Ledger.{what}() with instances still running ({', '.join(sorted(self._open))}): "
                f"call close(t) first, or pass t to get the running cost at time t"
            )

    def cost_until(self, t: float) -> float:
        """Cost accrued by time ``t`` (see "Running cost" in the module docstring)."""
        return self._cost_at(_finite(t, "t", "ledger cost_until"))

    def _cost_at(self, t: float) -> float:
        charges = sum(c.at(t) for c in self._charges)
        if t >= self._last_stop:  # every stopped interval is charged in full by now
            return self._stopped_usd + sum(iv.charge_at(t) for iv in self._open.values()) + charges
        return sum(iv.charge_at(t) for iv in self._intervals) + charges

    def total(self, t: float | None = None) -> float:
        """Total USD.  Without ``t`` every instance must be stopped; with ``t`` = :meth:`cost_until`."""
        if t is not None:
            return self.cost_until(t)
        self._require_closed("total")
        return self._cost_at(math.inf)

    def breakdown(self, t: float | None = None) -> dict[str, dict[str, float]]:
        """``{"by_category": {...}, "by_instance": {...}, "by_market": {...}}`` in USD.

        ``by_category`` sums to :meth:`total`; ``by_instance`` and ``by_market`` cover instance
        charges only.  Without ``t`` every instance must be stopped.
        """
        if t is None:
            self._require_closed("breakdown")
            t = math.inf
        by_cat: dict[str, float] = {}
        by_inst: dict[str, float] = {}
        by_market: dict[str, float] = {}
        for iv in self._intervals:
            c = iv.charge_at(t)
            by_cat[iv.category] = by_cat.get(iv.category, 0.0) + c
            by_inst[iv.instance_id] = by_inst.get(iv.instance_id, 0.0) + c
            by_market[iv.market] = by_market.get(iv.market, 0.0) + c
        for ch in self._charges:
            by_cat[ch.category] = by_cat.get(ch.category, 0.0) + ch.at(t)
        return {"by_category": by_cat, "by_instance": by_inst, "by_market": by_market}

    def snapshot(self, t: float) -> dict[str, Any]:
        """The ledger's state at ``t`` for a checkpoint (see "Checkpoint and resume" above).

        Returns ``{"settled": {"total", "by_category", "by_instance", "by_market"}, "open": [...]}``:
        ``settled`` holds the money of every interval stopped by ``t`` and of every other charge as
        it stood at ``t``; ``open`` lists each interval running at ``t`` as ``{"instance_id", "t0",
        "category", "market", "policy"}`` (``policy`` is :meth:`BillingPolicy.to_dict`).  Prices
        are not included (a series is not serialisable): the resuming side supplies them again.
        An interval stopped *after* ``t`` counts as open (its stop has not happened at ``t``).
        """
        t = _finite(t, "t", "ledger snapshot")
        by_cat: dict[str, float] = {}
        by_inst: dict[str, float] = {}
        by_market: dict[str, float] = {}
        open_: list[dict[str, Any]] = []
        for iv in self._intervals:
            if iv.t0 > t:
                continue
            if iv.t1 is None or iv.t1 > t:
                open_.append({"instance_id": iv.instance_id, "t0": iv.t0, "category": iv.category, "market": iv.market,
                              "policy": iv.policy.to_dict()})
                continue
            assert iv.cost is not None
            by_cat[iv.category] = by_cat.get(iv.category, 0.0) + iv.cost
            by_inst[iv.instance_id] = by_inst.get(iv.instance_id, 0.0) + iv.cost
            by_market[iv.market] = by_market.get(iv.market, 0.0) + iv.cost
        for ch in self._charges:
            by_cat[ch.category] = by_cat.get(ch.category, 0.0) + ch.at(t)
        return {"settled": {"total": sum(by_cat.values()), "by_category": by_cat, "by_instance": by_inst,
                            "by_market": by_market},
                "open": open_}

    def reopen(self, entry: dict[str, Any], price: PriceLike) -> None:
        """Continue an interval listed in :meth:`snapshot`'s ``open`` (after a resume).

        The interval keeps its original start ``entry["t0"]`` and billing policy, so it is charged
        as if it had never been interrupted.  ``price`` is the same price (constant, series or
        instance type) it was started with.  Raises :class:`InputError` on a malformed entry or if
        the instance is already running.
        """
        where = "ledger reopen"
        try:
            iid, t0 = str(entry["instance_id"]), float(entry["t0"])
            category, market = str(entry["category"]), str(entry["market"])
            pol = entry.get("policy")
            policy = BillingPolicy(**pol) if isinstance(pol, dict) else None
        except (KeyError, TypeError, ValueError) as e:
            raise InputError(f"malformed open-interval entry {entry!r} ({e})", "pass an entry of Ledger.snapshot()['open']",
                             where) from None
        self.start(iid, t0, price, category=category, market=market, policy=policy)

    def instance_seconds(self) -> dict[str, float]:
        """Active seconds per instance id, stopped intervals only."""
        out: dict[str, float] = {}
        for iv in self._intervals:
            if iv.t1 is not None:
                out[iv.instance_id] = out.get(iv.instance_id, 0.0) + (iv.t1 - iv.t0)
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary for ``summary.json`` (every instance must be stopped)."""
        self._require_closed("to_dict")
        return {
            "total_usd": self.total(),
            **self.breakdown(),
            "policy": self.policy.to_dict(),
            "on_demand_policy": self.on_demand_policy.to_dict(),
            "intervals": [iv.to_dict() for iv in self._intervals],
            "charges": [
                {"category": c.category, "t0": c.t0, "t1": c.t1, "usd": c.usd, **c.detail} for c in self._charges
            ],
        }
