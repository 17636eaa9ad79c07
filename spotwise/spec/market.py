"""The market side of a job spec: synthetic prices, revocations, the market, and pools (issue 21).

Split from :mod:`spotwise.config` (which re-exports every name) to keep each module small.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from spotwise.errors import InputError
from spotwise.market.price_points import check_price_points
from spotwise.spec.checks import _non_negative, _plain_text, _positive, _seed
from spotwise.spec.load import Duration

def _check_start(start: str | None) -> None:
    """``market.start`` (or a pool's): an ISO 8601 time, or nothing."""
    if start is not None:
        try:
            datetime.fromisoformat(str(start).replace("Z", "+00:00"))
        except ValueError:
            raise InputError(f"{start!r} is not an ISO 8601 time", "write e.g. 2020-02-25T00:00:00Z", "start") from None


SyntheticKind = Literal["uniform", "gaussian", "markov", "constant"]
RevocationKind = Literal["none", "bid", "bernoulli", "lifetime", "trace"]
Billing = Literal["per-second", "per-hour"]


@dataclass
class SyntheticSpec:
    """A generated market: i.i.d. prices redrawn every ``interval_s`` (paper 000 Sec. VI) or a Markov regime model."""

    kind: SyntheticKind = "uniform"
    low: float | None = None
    high: float = 1.0
    mean: float = 0.6
    variance: float = 0.175
    price: float = 1.0
    interval_s: Duration = 4.0
    duration_s: Duration = 7 * 24 * 3600.0
    fit_to: str | None = None
    regimes: int = 3
    seed: int = 0

    def __post_init__(self) -> None:
        if self.low is None:
            # paper 000 Sec. VI: uniform on [0.2, 1]; the Gaussian is truncated to the positive support
            self.low = 0.2 if self.kind == "uniform" else 0.0
        _non_negative(self.low, "low", "prices cannot be negative")
        if self.kind == "uniform" and not self.high > self.low:
            raise InputError(f"high ({self.high}) must exceed low ({self.low})", "widen the uniform price range", "high")
        _positive(self.variance, "variance", "use a positive variance")
        _positive(self.price, "price", "use a positive constant price")
        _positive(self.interval_s, "interval_s", "redraw the price every few seconds, e.g. 4")
        _positive(self.duration_s, "duration_s", "generate at least the job's deadline, e.g. '7d'")
        if self.kind in ("uniform", "gaussian"):
            check_price_points(float(self.duration_s), float(self.interval_s))
        _seed(self.seed, "seed")
        if self.kind == "markov" and self.fit_to is None:
            raise InputError("a markov market needs fit_to", "set market.synthetic.fit_to to a price trace file to fit the regimes to", "fit_to")
        _positive(self.regimes, "regimes", "use at least one regime")


@dataclass
class RevocationSpec:
    """How workers disappear.

    ``bid``: a worker is active iff its bid is at least the spot price (paper 000 Sec. III);
    ``bernoulli``: each worker is revoked with probability ``q`` per iteration (paper 000 Remark 2);
    ``lifetime``: lifetimes drawn from ``lifetimes`` (a GCP lifetime CSV; 24 h cap, paper 002) or
    exponential with ``mttf_s``; ``trace``: replay an availability trace from ``market.traces``.
    ``notice_s`` defaults to the provider's notice (AWS 120 s, GCP 30 s, Azure 30 s).
    """

    model: RevocationKind = "none"
    q: float | None = None
    rejoin_p: float | None = None
    lifetimes: str | None = None
    mttf_s: Duration | None = None
    mttr_s: Duration | None = None
    notice_s: Duration | None = None

    def __post_init__(self) -> None:
        for name in ("q", "rejoin_p"):
            v = getattr(self, name)
            if v is not None and not 0.0 <= v <= 1.0:
                raise InputError(f"must be a probability in [0, 1], got {v}", f"set {name} between 0 and 1", name)
        if self.model == "bernoulli" and self.q is None:
            raise InputError("the bernoulli model needs q", "set market.revocation.q, the per-iteration revocation probability, e.g. 0.05", "q")
        if self.model == "lifetime" and self.lifetimes is None and self.mttf_s is None:
            raise InputError(
                "the lifetime model needs lifetimes or mttf_s",
                "set market.revocation.lifetimes to a GCP lifetime CSV, or mttf_s to a mean time to failure in seconds", "lifetimes",
            )
        _positive(self.mttf_s, "mttf_s", "use a positive mean time to failure in seconds")
        _positive(self.mttr_s, "mttr_s", "use a positive mean time to repair in seconds")
        _non_negative(self.notice_s, "notice_s", "use a non-negative notice in seconds (AWS gives 120, GCP and Azure 30)")


@dataclass
class MarketSpec:
    """The world outside: price/availability traces or a synthetic market, revocations, billing.

    Exactly one of ``traces`` (files or folders in any format ``spotwise traces show`` reads) and
    ``synthetic`` provides prices; ``catalog`` adds user instance types (YAML/CSV).
    """

    traces: list[str] = field(default_factory=list)
    synthetic: SyntheticSpec | None = None
    revocation: RevocationSpec = field(default_factory=RevocationSpec)
    billing: Billing = "per-second"
    min_charge_s: Duration = 60.0
    catalog: list[str] = field(default_factory=list)
    start: str | None = None

    def __post_init__(self) -> None:
        if self.traces and self.synthetic is not None:
            raise InputError("both traces and synthetic are set", "keep one price source: market.traces or market.synthetic", "")
        if self.revocation.model == "trace" and not self.traces:
            raise InputError("the trace revocation model needs market.traces", "list an availability trace under market.traces", "revocation.model")
        _non_negative(self.min_charge_s, "min_charge_s", "use 0 for no minimum charge, or e.g. 60")
        _check_start(self.start)


@dataclass
class PoolMarketSpec:
    """A pool's own price source (issue 21): trace files or a synthetic market, replayed from
    ``start``; fields left out are the job's (``market.traces`` / ``market.synthetic`` / ``market.start``)."""

    traces: list[str] = field(default_factory=list)
    synthetic: SyntheticSpec | None = None
    start: str | None = None

    def __post_init__(self) -> None:
        if self.traces and self.synthetic is not None:
            raise InputError("both traces and synthetic are set", "keep one price source for the pool", "")
        _check_start(self.start)


@dataclass
class PoolSpec:
    """One pool of a heterogeneous cluster (issue 21; paper 002 Sec. III-G): ``workers`` instances
    of ``instance_type`` in one ``region`` or ``zone``, with its own bids, revocation model (default:
    ``market.revocation``) and market (default: the job's, replayed for this type and place)."""

    instance_type: str
    workers: int = 1
    name: str | None = None
    region: str | None = None
    zone: str | None = None
    bids: list[float] | float | None = None
    revocation: RevocationSpec | None = None
    market: PoolMarketSpec | None = None

    def __post_init__(self) -> None:
        if not self.instance_type:
            raise InputError("required field is missing", "name an instance type from the catalog, e.g. 'gce-k80'", "instance_type")
        for f in ("instance_type", "region", "zone"):  # they reach generated YAML and shell (--emit)
            _plain_text(getattr(self, f), f, "write it on one line, e.g. us-central1-a or gce-k80")
        if isinstance(self.workers, bool) or not isinstance(self.workers, int) or self.workers < 1:
            raise InputError(f"a pool needs at least one worker, got {self.workers!r}",
                             "set workers >= 1, or remove the pool from cluster.pools", "workers")
        if self.region and self.zone and not self.zone.startswith(self.region):
            raise InputError(f"zone {self.zone!r} is not in region {self.region!r}",
                             "give the zone alone (its region follows), or a zone of that region", "zone")
        if self.bids is not None:
            bids = [self.bids] if isinstance(self.bids, float) else list(self.bids)
            if isinstance(self.bids, list) and len(bids) != self.workers:
                raise InputError(f"{len(bids)} bids for the pool's {self.workers} workers",
                                 "give one bid for the pool (a number) or one per worker (a list)", "bids")
            for b in bids:
                if not (b > 0 and b < float("inf")):
                    raise InputError(f"bid {b!r} is not a positive price", "bids are maximum prices in $/hour, e.g. 0.3", "bids")
        if self.name is None:
            self.name = f"{self.instance_type}@{self.place}" if self.place else self.instance_type
        elif not str(self.name) or not all(c.isalnum() or c in "-_.@:" for c in str(self.name)):
            raise InputError(f"pool name {self.name!r} is not a plain name", "use letters, digits and - _ . @ :", "name")

    @property
    def place(self) -> str | None:
        """Where the pool runs: its zone, else its region (``None``: the cluster's)."""
        return self.zone or self.region

    def bid_list(self) -> list[float] | None:
        if self.bids is None:
            return None
        return [float(self.bids)] * self.workers if isinstance(self.bids, (int, float)) else [float(b) for b in self.bids]
