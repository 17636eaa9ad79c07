"""Market actions of the job controller: switching the workers' market, migrating the job, the restart window.

:class:`MarketActions` is a component held by the job controller (``job.market_actions``) and carries out the :class:`~spotwise.policies.base.SwitchMarket` and
:class:`~spotwise.policies.base.Migrate` decisions: checkpoint, release every worker, change the
provider's capacity (or place), then a billed restart window of ``job.restart_s`` before the new
workers compute.  It acts on the job only through the controller's membership and checkpoint
methods (``checkpoint``, ``release_all``, ``add_member``, ``enter_place``) and its accounting: what
it may touch is :class:`MarketHost`.
"""

from __future__ import annotations

from typing import Any, Protocol

from spotwise.capacity.provider import Provider
from spotwise.config import JobSpec
from spotwise.control.accounting import Billing
from spotwise.control.clock import Clock
from spotwise.control.records import Counters
from spotwise.errors import InputError
from spotwise.events import EventLog
from spotwise.market.pools import PoolSet
from spotwise.market.job_market import Market
from spotwise.market.world import market_for_place
from spotwise.policies.base import Migrate

#: seconds a change of market or place costs when nothing else says (new workers start, load the
#: checkpoint's parameters): billed, no progress; the controller's ``restart_s`` overrides it
DEFAULT_RESTART_S = 120.0

#: the ledger's market names (billing) for the policies' (:data:`spotwise.policies.base.MARKETS`)
LEDGER_MARKET = {"spot": "spot", "on-demand": "on_demand"}


class _Pools(Protocol):
    pools: PoolSet


class MarketHost(Protocol):
    """What :class:`MarketActions` reads of the job and asks it to do."""

    @property
    def spec(self) -> JobSpec: ...
    @property
    def clock(self) -> Clock: ...
    @property
    def provider(self) -> Provider: ...
    @property
    def market(self) -> Market: ...
    @property
    def region(self) -> str | None: ...
    worker_market: str
    @property
    def restart_s(self) -> float: ...
    @property
    def provisioned(self) -> int: ...
    @property
    def members(self) -> dict[int, Any]: ...
    @property
    def counters(self) -> Counters: ...
    @property
    def log(self) -> EventLog: ...
    @property
    def accounting(self) -> Billing: ...
    @property
    def speeds(self) -> _Pools: ...

    @property
    def T(self) -> float: ...
    @property
    def market_name(self) -> str: ...
    def checkpoint(self, why: str) -> None: ...
    def release_all(self) -> None: ...
    def add_member(self, w: int, actor: Any, reopen: dict[str, Any] | None = None,
                   billed_from: float | None = None) -> None: ...
    def enter_place(self, place: Market, region: str | None) -> None: ...
    def iteration_market(self) -> None: ...


class MarketActions:
    """Market switches and migrations of one job (see the module docstring)."""

    def __init__(self, job: MarketHost) -> None:
        self.job = job

    def switch_market(self, market: str) -> str | None:
        """Run the workers on ``market`` from now on; ``None`` if done, else why not.

        Checkpoint, release every worker (their billing stops), switch the provider's capacity,
        then the restart: the new workers are billed from now but join only ``restart_s`` later
        (:meth:`restart`).  Logged as a ``market_switch`` event (from, to, restart cost).
        """
        job = self.job
        if not job.provider.supports_markets:
            return "the provider cannot switch markets (a real cluster's capacity is what it is)"
        old = job.market_name
        if market == old:
            return f"the workers already run on {market}"
        try:
            job.market.on_demand_price  # noqa: B018  (on-demand billing needs it: refuse before releasing anything)
        except InputError as e:
            return e.message
        t0 = job.T
        job.checkpoint("market-switch")
        job.release_all()
        job.provider.switch_market(market, job.T)
        job.worker_market = LEDGER_MARKET[market]
        cost = self.restart()
        job.log.emit("market_switch", **{"from": old, "to": market}, start=t0, restart_s=job.T - t0, cost=cost,
                     active=len(job.members))
        return None

    def migrate(self, d: Migrate) -> str | None:
        """Move the job to ``d.instance_type`` in ``d.region``; ``None`` if done, else why not.

        The new place's market (:func:`~spotwise.market.world.market_for_place`: its prices,
        revocation model, throughput) replaces the current one; the workers are released and
        re-acquired there with a restart as for a market switch (:meth:`switch_market`), on the
        market in force.  Logged as a ``migrate`` event (from, to, restart cost).  Paper 003
        (``papers/003_c06237e546a4f08e.txt`` Sec. 3.2): moving a job as prices change, counting the
        move's cost.
        """
        job = self.job
        if job.speeds.pools.multi:
            return "a job of several pools does not migrate: each pool keeps its own place"
        if not job.provider.supports_migration:
            return "the provider cannot move the job to another place"
        if d.cloud is not None and d.cloud != job.market.instance.cloud:
            return f"moving to another cloud ({d.cloud}) is not supported"
        region = d.region if d.region is not None else job.region
        old = (job.region or job.market.instance.region or "", job.market.instance.name)
        if (region or "", d.instance_type) == (job.region or "", job.market.instance.name):
            return "the job already runs there"
        try:
            place = market_for_place(job.spec, d.instance_type, region, job.market.catalog, job.market.horizon_s)
            if job.worker_market == "on_demand":
                place.on_demand_price  # noqa: B018
        except InputError as e:
            return f"no market for {d.instance_type} in {region or 'any region'}: {e.message}"
        t0 = job.T
        job.checkpoint("migrate")
        job.release_all()
        job.provider.migrate(place, job.T)
        job.enter_place(place, region)
        job.log.emit("price", instance=job.market.instance.name, price=job.market.spot_price(job.T))
        job.accounting.last_price_T = job.T
        cost = self.restart()
        job.log.emit("migrate", **{"from": list(old), "to": [region or "", job.market.instance.name]}, start=t0,
                     restart_s=job.T - t0, cost=cost, active=len(job.members))
        return None

    def restart(self) -> float:
        """New capacity starts: billed from now, it computes only ``restart_s`` later; returns the
        cost of the restart window (everything billed in it, the coordinator included).

        Market events in the window are applied in order: a slot that gets capacity starts then
        (billed from then), a starting slot that is revoked is billed until its revocation and
        does not join.  At the end of the window every started slot joins.
        """
        job = self.job
        acc = job.accounting
        t0 = job.T
        c0 = acc.cost_so_far()
        t_end = t0 + job.restart_s
        if job.provider.iteration_driven:
            job.iteration_market()
        starting = {w: t0 for w in sorted(job.provider.available_at_start()) if w < job.provisioned}
        while (t := job.provider.peek_time()) is not None and t <= t_end:
            ev = job.provider.pop_event()
            job.clock.advance_to(ev.t)
            acc.emit_prices()
            w = ev.worker
            if ev.kind == "available" and w < job.provisioned:
                starting.setdefault(w, ev.t)
            elif ev.kind == "revoke" and w in starting:
                iid = f"worker-{w}"
                acc.ledger.start(iid, starting.pop(w), acc.worker_price(), category="worker", market=job.worker_market)
                acc.ledger.stop(iid, ev.t, reason="revoked")
                job.counters.revocations += 1
                job.log.emit("revoke", worker=w, reason="market", active=len(job.members), starting=True)
        job.clock.advance_to(t_end)
        acc.emit_prices()
        if len(starting) > 1:
            job.provider.expect_joins(len(starting))  # their start-ups overlap
        for w, since in sorted(starting.items()):
            job.add_member(w, job.provider.acquire(w), billed_from=since)
        job.counters.restarts += 1
        job.counters.restart_s += job.T - t0
        return acc.cost_so_far() - c0
