"""Market actions of the job controller: switching the workers' market, migrating the job, the restart window.

:class:`MarketActionsMixin` is mixed into :class:`~spotwise.control.controller.JobController`
and carries out the :class:`~spotwise.policies.base.SwitchMarket` and
:class:`~spotwise.policies.base.Migrate` decisions: checkpoint, release every worker, change the
provider's capacity (or place), then a billed restart window of ``restart_s`` before the new
workers compute.
"""

from __future__ import annotations

import dataclasses

from spotwise.errors import InputError
from spotwise.market.world import Market, market_for_place
from spotwise.policies.base import Migrate
from spotwise.theory.runtime import MiniBatchTimeLaw

#: seconds a change of market or place costs when nothing else says (new workers start, load the
#: checkpoint's parameters): billed, no progress; a JobController's ``restart_s`` overrides it
DEFAULT_RESTART_S = 120.0

#: the ledger's market names (billing) for the policies' (:data:`spotwise.policies.base.MARKETS`)
LEDGER_MARKET = {"spot": "spot", "on-demand": "on_demand"}


class MarketActionsMixin:
    """Market switches and migrations of a :class:`~spotwise.control.controller.JobController`."""

    def _switch_market(self, market: str) -> str | None:
        """Run the workers on ``market`` from now on; ``None`` if done, else why not.

        Checkpoint, release every worker (their billing stops), switch the provider's capacity,
        then the restart: the new workers are billed from now but join only ``restart_s`` later
        (:meth:`_restart`).  Logged as a ``market_switch`` event (from, to, restart cost).
        """
        if not self.provider.supports_markets:
            return "the provider cannot switch markets (a real cluster's capacity is what it is)"
        old = self.market_name
        if market == old:
            return f"the workers already run on {market}"
        try:
            self.market.on_demand_price  # noqa: B018  (on-demand billing needs it: refuse before releasing anything)
        except InputError as e:
            return e.message
        t0 = self.T
        self._checkpoint("market-switch")
        self._release_all()
        self.provider.switch_market(market, self.T)
        self.worker_market = LEDGER_MARKET[market]
        cost = self._restart()
        self.log.emit("market_switch", **{"from": old, "to": market}, start=t0, restart_s=self.T - t0, cost=cost,
                      active=len(self.members))
        return None

    def _migrate(self, d: Migrate) -> str | None:
        """Move the job to ``d.instance_type`` in ``d.region``; ``None`` if done, else why not.

        The new place's market (:func:`~spotwise.market.world.market_for_place`: its prices,
        revocation model, throughput) replaces the current one; the workers are released and
        re-acquired there with a restart as for a market switch (:meth:`_switch_market`), on the
        market in force.  Logged as a ``migrate`` event (from, to, restart cost).
        """
        if not self.provider.supports_migration:
            return "the provider cannot move the job to another place"
        if d.cloud is not None and d.cloud != self.market.instance.cloud:
            return f"moving to another cloud ({d.cloud}) is not supported"
        region = d.region if d.region is not None else self.region
        old = (self.region or self.market.instance.region or "", self.market.instance.name)
        if (region or "", d.instance_type) == (self.region or "", self.market.instance.name):
            return "the job already runs there"
        try:
            place = market_for_place(self.spec, d.instance_type, region, self.market.catalog, self.market.horizon_s)
            if self.worker_market == "on_demand":
                place.on_demand_price  # noqa: B018
        except InputError as e:
            return f"no market for {d.instance_type} in {region or 'any region'}: {e.message}"
        t0 = self.T
        self._checkpoint("migrate")
        self._release_all()
        self.provider.migrate(place, self.T)
        self._enter_place(place, region)
        self.log.emit("price", instance=self.market.instance.name, price=self.market.spot_price(self.T))
        self.last_price_T = self.T
        cost = self._restart()
        self.log.emit("migrate", **{"from": list(old), "to": [region or "", self.market.instance.name]}, start=t0,
                      restart_s=self.T - t0, cost=cost, active=len(self.members))
        return None

    def _enter_place(self, place: Market, region: str | None) -> None:
        """The job's market is ``place``'s from now on (prices, instance, throughput); the coordinator stays."""
        self.market = dataclasses.replace(place, coordinator=self.market.coordinator)
        self.region = region
        self.mean_step_s = self.market.step_seconds(self.spec.workload.family, float(self.spec.workload.step_time_s))
        self.time_law = MiniBatchTimeLaw(self.mean_step_s, self.straggler)

    def _release_all(self) -> None:
        for w in sorted(self.members):
            self._drop_member(w, "released")

    def _restart(self) -> float:
        """New capacity starts: billed from now, it computes only ``restart_s`` later; returns the
        cost of the restart window (everything billed in it, the coordinator included).

        Market events in the window are applied in order: a slot that gets capacity starts then
        (billed from then), a starting slot that is revoked is billed until its revocation and
        does not join.  At the end of the window every started slot joins.
        """
        t0 = self.T
        c0 = self.cost_so_far()
        t_end = t0 + self.restart_s
        if self.provider.iteration_driven:
            self._iteration_market()
        starting = {w: t0 for w in sorted(self.provider.available_at_start()) if w < self.provisioned}
        while (t := self.provider.peek_time()) is not None and t <= t_end:
            ev = self.provider.pop_event()
            self.clock.advance_to(ev.t)
            self._emit_prices()
            w = ev.worker
            if ev.kind == "available" and w < self.provisioned:
                starting.setdefault(w, ev.t)
            elif ev.kind == "revoke" and w in starting:
                iid = f"worker-{w}"
                self.ledger.start(iid, starting.pop(w), self._worker_price(), category="worker", market=self.worker_market)
                self.ledger.stop(iid, ev.t, reason="revoked")
                self.counters.revocations += 1
                self.log.emit("revoke", worker=w, reason="market", active=len(self.members), starting=True)
        self.clock.advance_to(t_end)
        self._emit_prices()
        for w, since in sorted(starting.items()):
            self._add_member(w, self.provider.acquire(w), billed_from=since)
        self.counters.restarts += 1
        self.counters.restart_s += self.T - t0
        return self.cost_so_far() - c0
