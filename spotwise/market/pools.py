"""Heterogeneous pools in one job (issue 21; ``papers/002_a246f6afe29b4bfb.txt`` Sec. III-G).

A job's worker slots are split over pools, in the order of ``cluster.pools`` (pool 0 owns slots
``0 .. n0-1``, pool 1 the next ``n1``, ...).  Each pool is a market of its own -- its instance
type's catalog throughput and prices, its price series (trace or synthetic, replayed for its type
and zone), its revocation model and provider notice -- built by the same
:func:`~spotwise.market.world.build_market` as a single-type job, from the spec with the pool's
fields in place of the cluster's (``build_market`` calls :func:`build_pools` with itself as
``build_one``: this module builds on the :class:`~spotwise.market.job_market.Market` value alone,
never on the module that builds markets).  The single-type form is one pool
(:meth:`PoolSet.single`), so the controller has one code path.

* :class:`PooledRevocation` gives every slot its pool's revocation model (each pool's own notice
  time); a spec whose pools are all the same model gives the same timeline as one pool of their
  total size (same per-slot random streams).
* :class:`PoolSet` answers what the controller and the planes ask per slot: the pool, its mean
  mini-batch time (``step_time_s / throughput``), its price series, its batch share
  (``cluster.balance``), and whether its exchanges with the parameter server cross regions
  (:mod:`spotwise.market.network`; the parameter server sits in the region with the most
  workers, as in paper 002 Sec. III-G: "We place the parameter server in the data center with
  the largest number of workers").
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from spotwise.config import JobSpec
from spotwise.errors import InputError
from spotwise.market.job_market import Market
from spotwise.market.network import NetworkLink, region_of
from spotwise.market.revocation.base import Interval, MarketEvent, RevocationModel, events_from_intervals


class PooledRevocation(RevocationModel):
    """Each slot revoked by its pool's model (``parts``: ``(model, slots)`` in slot order)."""

    def __init__(self, parts: Sequence[tuple[RevocationModel, int]]) -> None:
        if not parts:
            raise ValueError("PooledRevocation needs at least one pool")
        kinds = {bool(m.is_iteration_driven) for m, _ in parts}
        if len(kinds) > 1:
            raise InputError("pools mix a per-iteration revocation model (bernoulli) with time-driven ones",
                             "give every pool a time-driven model (lifetime, bid, trace, none), or every pool bernoulli",
                             "cluster.pools[].revocation")
        self.parts = [(m, int(n)) for m, n in parts]
        self.is_iteration_driven = kinds.pop()  # type: ignore[misc]
        self.needs_rng = any(m.needs_rng for m, _ in parts)  # type: ignore[misc]
        self.notice_s = min(float(m.notice_s) for m, _ in parts)
        self._bounds = np.cumsum([0] + [n for _, n in self.parts])

    @property
    def slots(self) -> int:
        return int(self._bounds[-1])

    def locate(self, worker: int) -> tuple[int, int]:
        """``(pool index, slot within the pool)`` of ``worker`` (slots past the last pool: the last pool's)."""
        i = int(np.searchsorted(self._bounds, worker, side="right") - 1)
        i = min(max(i, 0), len(self.parts) - 1)
        return i, int(worker - self._bounds[i])

    def _intervals(self, worker: int, t0: float, t1: float, rng: np.random.Generator | None) -> list[Interval]:
        i, local = self.locate(worker)
        return self.parts[i][0]._intervals(local, t0, t1, rng)

    def events(self, workers: int, t0: float, t1: float, rng: np.random.Generator | None = None) -> list[MarketEvent]:
        """Every slot's events, each pool's with its own notice time (``all_intervals``' streams)."""
        ivs = self.all_intervals(workers, t0, t1, rng)
        out: list[MarketEvent] = []
        for i, (model, _) in enumerate(self.parts):
            lo, hi = int(self._bounds[i]), int(self._bounds[i + 1]) if i + 1 < len(self.parts) else workers
            mine = [ivs[w] if lo <= w < hi else [] for w in range(workers)]
            out.extend(events_from_intervals(mine, float(model.notice_s), t0, t1))
        return sorted(out, key=lambda ev: (ev.t, ev.worker))

    def step(self, active_workers: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """One iteration of per-iteration (Bernoulli) pools: one uniform per slot, as one pool would draw."""
        act = np.asarray(active_workers, dtype=bool)
        u = rng.random(act.size)
        out = act.copy()
        for i, (m, _) in enumerate(self.parts):
            lo = int(self._bounds[i])
            hi = int(self._bounds[i + 1]) if i + 1 < len(self.parts) else act.size
            a, uu = act[lo:hi], u[lo:hi]
            q, rejoin = float(getattr(m, "q")), getattr(m, "rejoin_p")
            revoked = a & (uu < q)
            rejoined = ~a & (uu < rejoin) if rejoin is not None else np.zeros_like(a)
            out[lo:hi] = (a & ~revoked) | rejoined
        return out


@dataclass(frozen=True)
class Pool:
    """One pool: its name, its market, the slots it owns and its speed for the job's model family."""

    name: str
    market: Market
    slots: range
    speed: float
    region: str

    def __post_init__(self) -> None:
        if not (self.speed > 0):
            raise ValueError(f"pool {self.name!r}: speed must be > 0")

    @property
    def cloud(self) -> str:
        return self.market.instance.cloud

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "instance": self.market.instance.name, "workers": len(self.slots),
                "slots": [self.slots.start, self.slots.stop], "region": self.region, "speed": self.speed,
                "on_demand_per_hour": self.market.instance.on_demand_per_hour}


@dataclass(frozen=True)
class PoolSet:
    """The pools of one job and the per-slot questions about them (see the module docstring)."""

    pools: tuple[Pool, ...]
    #: the parameter server's region (the region with the most workers)
    ps_region: str
    #: the inter-region link, when some pool is in another region than the parameter server
    link: NetworkLink | None = None

    def __post_init__(self) -> None:
        if not self.pools:
            raise ValueError("a PoolSet needs at least one pool")

    @classmethod
    def single(cls, market: Market, slots: int, family: str) -> PoolSet:
        """A single-type job as one pool of ``slots`` slots."""
        speed = market.catalog.throughput(market.instance, family)
        region = region_of(market.instance.region) if market.instance.region else ""
        return cls((Pool(market.instance.name, market, range(int(slots)), float(speed), region),), region)

    @property
    def multi(self) -> bool:
        return len(self.pools) > 1

    def pool_of(self, w: int) -> Pool:
        for p in self.pools:
            if w in p.slots:
                return p
        return self.pools[-1]  # slots past the pools (a growth policy's) are the last pool's

    def index_of(self, w: int) -> int:
        return self.pools.index(self.pool_of(w))

    def mean_step_s(self, w: int, step_time_s: float) -> float:
        """Mean virtual seconds of one equal-size mini-batch on slot ``w``'s instance."""
        return float(step_time_s) / self.pool_of(w).speed

    def batch_for(self, w: int, batch: int, balance: str, members: Sequence[int]) -> int:
        """Samples slot ``w`` computes per mini-batch: ``batch``; with ``balance: throughput`` a share
        of ``batch * len(members)`` proportional to its speed (at least 1), so that every member
        of a barrier round finishes together."""
        if balance != "throughput" or not self.multi or w not in members:
            return int(batch)
        total = sum(self.pool_of(m).speed for m in members)
        return max(1, int(round(batch * len(members) * self.pool_of(w).speed / total)))

    def crosses(self, w: int) -> bool:
        """Whether slot ``w``'s exchanges with the parameter server leave its region."""
        return self.link is not None and self.pool_of(w).region != self.ps_region

    def exchange(self, w: int, nbytes: float) -> tuple[float, float]:
        """``(extra seconds, egress USD)`` of one exchange of ``nbytes`` by slot ``w`` (0, 0 in region)."""
        if not self.crosses(w):
            return 0.0, 0.0
        assert self.link is not None
        return self.link.exchange_s(nbytes), self.link.egress_usd(nbytes)

    def describe(self) -> list[dict[str, Any]]:
        return [{**p.describe(), "cross_region": p.region != self.ps_region and self.link is not None} for p in self.pools]


def pool_spec(spec: JobSpec, i: int) -> JobSpec:
    """``spec`` as a single-type job on pool ``i`` alone (its type, place, workers, bids, market)."""
    p = spec.cluster.pools[i]  # type: ignore[index]
    market = spec.market
    if p.market is not None:
        market = dataclasses.replace(market, traces=list(p.market.traces) or list(market.traces),
                                     synthetic=p.market.synthetic if p.market.synthetic is not None else (
                                         None if p.market.traces else market.synthetic),
                                     start=p.market.start or market.start)
    if p.revocation is not None:
        market = dataclasses.replace(market, revocation=p.revocation)
    cluster = dataclasses.replace(spec.cluster, pools=None, instance_type=p.instance_type, workers=p.workers,
                                  region=p.place, bids=p.bids, max_workers=None, ps_shards=1)
    return dataclasses.replace(spec, cluster=cluster, market=market)


def _check_place_data(spec: JobSpec, i: int) -> None:
    """A pool placed in a zone or region replays that place's series, never another's."""
    from spotwise.market.traces import load_traces

    p = spec.cluster.pools[i]  # type: ignore[index]
    sub = pool_spec(spec, i)
    if not p.place or not sub.market.traces:
        return
    series = load_traces(sub.market.traces)
    placed = [s for s in series if s.meta.zone or s.meta.region]
    if not placed:
        return
    here = [s for s in placed if s.meta.zone == p.place or s.meta.region == p.place or s.meta.zone.startswith(p.place)]
    if not here:
        zones = sorted({s.meta.zone or s.meta.region for s in placed})
        raise InputError(f"pool {p.name!r} is in {p.place!r} but its market's traces hold no series there",
                         f"place the pool in one of {', '.join(zones[:8])}{' ...' if len(zones) > 8 else ''}, or give it "
                         "traces of its zone (pools[].market.traces)", f"cluster.pools[{i}]")


def build_pools(spec: JobSpec, build_one: Callable[[JobSpec], Market]) -> PoolSet:
    """The pools of ``spec`` (which has ``cluster.pools``), each market built by ``build_one``."""
    pools_spec = spec.cluster.pools or []
    family = spec.workload.family
    built: list[Pool] = []
    lo = 0
    for i, p in enumerate(pools_spec):
        _check_place_data(spec, i)
        try:
            market = build_one(pool_spec(spec, i))
        except InputError as e:
            e.where = f"cluster.pools[{i}] ({p.name}): {e.where}" if e.where else f"cluster.pools[{i}] ({p.name})"
            raise
        speed = market.catalog.throughput(market.instance, family)
        region = region_of(p.place) or region_of(market.instance.region)
        built.append(Pool(str(p.name), market, range(lo, lo + p.workers), float(speed), region))
        lo += p.workers
    counts: dict[str, int] = {}
    for p in built:
        counts[p.region] = counts.get(p.region, 0) + len(p.slots)
    ps_region = max(counts, key=lambda r: (counts[r], -[q.region for q in built].index(r)))
    link = None
    if len(counts) > 1:
        link = built[0].market.catalog.network(built[0].cloud)
    return PoolSet(tuple(built), ps_region, link)
