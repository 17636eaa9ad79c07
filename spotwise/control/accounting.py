"""The job controller's money: worker prices, the ledger across resumes, the price log, cost breakdowns.

:class:`Accounting` is a component held by :class:`~spotwise.control.controller.JobController`
(``job.accounting``): it owns the billing :class:`~spotwise.market.billing.Ledger`, the money
carried from earlier sessions of a resumed run and the price log, and answers what a worker costs
on the market in force, the cost so far and its breakdown, and the model estimate of the same work
on on-demand workers.  It reads the job (clock, market, event log) and never changes it.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from spotwise.market.billing import Ledger
from spotwise.market.series import SeriesMeta, StepSeries

if TYPE_CHECKING:  # type only: the controller holds this component
    from spotwise.control.controller import JobController


class Billing(Protocol):
    """What the controller asks of its money component: :class:`Accounting` (instances billed by
    the hour on their market) or the serverless plane's
    :class:`~spotwise.planes.serverless.accounting.FunctionAccounting` (functions billed per
    request and GB-second).  A data plane says which (:meth:`DataPlane.make_accounting`)."""

    ledger: Ledger
    #: clock time up to which ``price`` events were logged
    last_price_T: float

    def start_coordinator(self, t: float) -> None: ...
    def emit_prices(self) -> None: ...
    def worker_price(self, market: str | None = None) -> Any: ...
    def member_started(self, w: int, t: float, reopen: dict[str, Any] | None) -> None: ...
    def member_stopped(self, w: int, t: float, reason: str) -> None: ...
    def cost_so_far(self) -> float: ...
    def cost_breakdown(self, final: bool) -> dict[str, Any]: ...
    def ledger_state(self) -> dict[str, Any]: ...
    def restore(self, state: dict[str, Any]) -> dict[str, dict[str, Any]]: ...
    def settle_gone(self, entries: dict[str, dict[str, Any]]) -> int: ...
    def on_demand_estimate(self) -> dict[str, Any] | None: ...
    def close(self, t: float, members: list[int]) -> None: ...


class Accounting:
    """Prices, billing and cost of one job on instances (see the module docstring)."""

    def __init__(self, job: "JobController") -> None:
        self.job = job
        #: every instance's billed intervals (this session)
        self.ledger = Ledger(job.market.billing)
        #: settled money of earlier sessions (a resumed run), in :meth:`Ledger.breakdown`'s shape
        self.carried_cost: dict[str, Any] = {"total": 0.0, "by_category": {}, "by_market": {}, "by_instance": {}}
        #: the on-demand price of the current instance as a series (billing), built when first needed
        self._od_series: tuple[Any, StepSeries] | None = None
        #: clock time up to which ``price`` events were logged (-1: none yet)
        self.last_price_T = -1.0

    def worker_price(self, market: str | None = None) -> Any:
        """What a worker costs on ``market`` (ledger name; default: the one in force): the spot price
        series, or the instance's on-demand $/h."""
        job = self.job
        if (market or job.worker_market) == "on_demand":
            inst = job.market.instance
            if self._od_series is None or self._od_series[0] != inst:
                meta = SeriesMeta(id=f"on-demand:{inst.name}", kind="price", instance=inst.name, source="catalog/on-demand")
                series = StepSeries(np.array([0.0]), np.array([job.market.on_demand_price]), job.market.horizon_s, meta)
                self._od_series = (inst, series)
            return self._od_series[1]
        return job.market.prices

    def start_coordinator(self, t: float) -> None:
        """The coordinator (on-demand, the controller's own machine) is billed from ``t``."""
        self.ledger.start("coordinator", t, self.job.market.coordinator, category="coordinator", market="on_demand")

    def member_started(self, w: int, t: float, reopen: dict[str, Any] | None) -> None:
        """Worker ``w`` is billed from ``t`` on the market in force (``reopen``: its interval from a
        checkpoint, continued -- a resume charges no second minimum)."""
        if reopen is not None:
            self.ledger.reopen(reopen, self.worker_price(str(reopen.get("market", self.job.worker_market))))
        else:
            self.ledger.start(f"worker-{w}", t, self.worker_price(), category="worker", market=self.job.worker_market)

    def member_stopped(self, w: int, t: float, reason: str) -> None:
        """Worker ``w``'s billing stops at ``t`` (revoked by the market or a node loss, else released)."""
        self.ledger.stop(f"worker-{w}", t, reason="revoked" if reason in ("market", "node-lost") else "released")

    def restore(self, state: dict[str, Any]) -> dict[str, dict[str, Any]]:
        """A checkpoint's money: what it had spent is carried, its open intervals reopened (returned
        by instance id for the members that come back); prices are logged again from ``T``."""
        self.carried_cost = state["cost"]
        entries = self.reopen_ledger(state)
        self.last_price_T = self.job.T - 1e-9
        return entries

    def settle_gone(self, entries: dict[str, dict[str, Any]]) -> int:
        """Workers that were running at the checkpoint but whose capacity is gone at ``T`` (their
        revocation fell on the checkpoint's instant): billed up to ``T``, as without the restart;
        returns how many."""
        job = self.job
        for iid, entry in sorted(entries.items()):
            self.ledger.reopen(entry, self.worker_price(str(entry.get("market", job.worker_market))))
            self.ledger.stop(iid, job.T, reason="revoked")
            job.log.emit("revoke", worker=int(iid.split("-")[-1]), reason="market", active=len(job.members))
        return len(entries)

    def close(self, t: float, members: list[int]) -> None:
        """The end: every member's billing stops at ``t`` and the ledger closes (the coordinator's too)."""
        for w in members:
            self.ledger.stop(f"worker-{w}", t, reason="finished")
        self.ledger.close(t)

    def reopen_ledger(self, state: dict[str, Any]) -> dict[str, dict[str, Any]]:
        """Continue the checkpoint's billing: settled money carried, open intervals reopened.

        A checkpoint that holds ``ledger = {"settled", "open"}`` (:meth:`Ledger.snapshot`
        merged with what earlier sessions carried).  The coordinator's interval is reopened here
        with its original start, so a resume charges no second minimum and restarts no billing
        hour (issue 7 item 6); the open worker intervals are returned by instance id for the
        controller's ``_add_member``.  An older checkpoint (no ``ledger``) falls back to carrying
        its running cost and starting new intervals at ``T`` (which over-bills by the restarted
        minimums).
        """
        led = state.get("ledger")
        if not led:
            self.start_coordinator(self.job.T)
            return {}
        self.carried_cost = led["settled"]
        entries = {str(e["instance_id"]): e for e in led["open"]}
        coord = entries.pop("coordinator", None)
        if coord is None:
            self.start_coordinator(self.job.T)
        else:
            self.ledger.reopen(coord, self.job.market.coordinator)
        return entries

    def ledger_state(self) -> dict[str, Any]:
        """The ledger at ``T`` for a checkpoint: settled money (this and earlier sessions) and open intervals."""
        snap = self.ledger.snapshot(self.job.T)
        return {"settled": _merge_costs(self.carried_cost, snap["settled"]), "open": snap["open"]}

    def emit_prices(self) -> None:
        """Log the ``price`` events of the market's price changes up to now."""
        job = self.job
        prices = job.market.prices
        lo = self.last_price_T
        if lo < 0:
            job.log.emit("price", t=0.0, instance=job.market.instance.name, price=float(prices.value_at(0.0)))
            lo = 0.0
        for t in prices.change_points(lo, job.T + 1e-9):
            job.log.emit("price", t=float(t), instance=job.market.instance.name, price=float(prices.value_at(t)))
        self.last_price_T = job.T

    def cost_so_far(self) -> float:
        return float(self.carried_cost.get("total", 0.0)) + self.ledger.cost_until(self.job.T)

    def cost_breakdown(self, final: bool) -> dict[str, Any]:
        bd = self.ledger.breakdown(self.job.T) if not final else self.ledger.breakdown()
        out: dict[str, Any] = {"total": float(self.carried_cost.get("total", 0.0)) + sum(bd["by_category"].values())}
        for key in ("by_category", "by_market", "by_instance"):
            merged = dict(self.carried_cost.get(key, {}))
            for k, v in bd.get(key, {}).items():
                merged[k] = merged.get(k, 0.0) + float(v)
            out[key] = merged
        return out

    def on_demand_estimate(self) -> dict[str, Any]:
        """Expected time and cost of the *same work* on ``cluster.workers`` on-demand workers.

        Like for like: the same number of samples as this run committed (not the same number of
        steps -- a spot step with fewer active workers holds fewer samples), the same runtime
        model (eq. 14-15 of ``papers/000_3c734f3ffedcac15.txt``), the coordinator included, every
        instance billed by the market's billing policy.  A model estimate (``basis: "model"``):
        the demo and ``run --compare-on-demand`` replace it by a measured baseline run, which
        also reports the baseline's accuracy.  The time of a step is the sync strategy's
        closed-form expectation under the run's mini-batch time law
        (:meth:`~spotwise.control.sync.SyncStrategy.expected_round_s`).
        """
        job = self.job
        n = job.spec.cluster.workers
        strategy = job.sync_strategy
        per = strategy.expected_round_s(job.time_law, n, job.delta)
        samples = int(job.counters.samples)
        steps = math.ceil(samples / strategy.samples_per_step(n, job.batch))
        t = float(per * steps)
        od = job.market.on_demand_price
        bill = self.ledger.on_demand_policy
        cost = n * bill.charge(od, 0.0, t) + bill.charge(float(job.market.coordinator.on_demand_per_hour or 0.0), 0.0, t)
        return {"basis": "model", "workers": n, "samples": samples, "steps": steps, "time_s": t, "cost_usd": float(cost),
                "worker_price_per_hour": od, "metric": None}


def _merge_costs(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Sum two cost breakdowns (``total`` plus the ``by_*`` maps)."""
    out: dict[str, Any] = {"total": float(a.get("total", 0.0)) + float(b.get("total", 0.0))}
    for key in ("by_category", "by_market", "by_instance"):
        merged = {k: float(v) for k, v in a.get(key, {}).items()}
        for k, v in b.get(key, {}).items():
            merged[k] = merged.get(k, 0.0) + float(v)
        out[key] = merged
    return out
