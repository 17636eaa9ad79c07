"""The job controller's money: worker prices, the ledger across resumes, the price log, cost breakdowns.

:class:`AccountingMixin` is mixed into :class:`~spotwise.control.controller.JobController`: what a
worker costs on the market in force, the ledger continued from a checkpoint (no second minimum,
no restarted billing hour), the ``price`` events, the cost so far and its breakdown, and the
model estimate of the same work on on-demand workers.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from spotwise.market.series import SeriesMeta, StepSeries


class AccountingMixin:
    """Prices, billing and cost of a :class:`~spotwise.control.controller.JobController`."""

    def _worker_price(self, market: str | None = None) -> Any:
        """What a worker costs on ``market`` (ledger name; default: the one in force): the spot price
        series, or the instance's on-demand $/h."""
        if (market or self.worker_market) == "on_demand":
            inst = self.market.instance
            if self._od_series is None or self._od_series[0] != inst:
                meta = SeriesMeta(id=f"on-demand:{inst.name}", kind="price", instance=inst.name, source="catalog/on-demand")
                series = StepSeries(np.array([0.0]), np.array([self.market.on_demand_price]), self.market.horizon_s, meta)
                self._od_series = (inst, series)
            return self._od_series[1]
        return self.market.prices

    def _reopen_ledger(self, state: dict[str, Any]) -> dict[str, dict[str, Any]]:
        """Continue the checkpoint's billing: settled money carried, open intervals reopened.

        A checkpoint that holds ``ledger = {"settled", "open"}`` (:meth:`Ledger.snapshot`
        merged with what earlier sessions carried).  The coordinator's interval is reopened here
        with its original start, so a resume charges no second minimum and restarts no billing
        hour (issue 7 item 6); the open worker intervals are returned by instance id for
        :meth:`_add_member`.  An older checkpoint (no ``ledger``) falls back to carrying its running
        cost and starting new intervals at ``T`` (which over-bills by the restarted minimums).
        """
        led = state.get("ledger")
        if not led:
            self.ledger.start("coordinator", self.T, self.market.coordinator, category="coordinator", market="on_demand")
            return {}
        self.carried_cost = led["settled"]
        entries = {str(e["instance_id"]): e for e in led["open"]}
        coord = entries.pop("coordinator", None)
        if coord is None:
            self.ledger.start("coordinator", self.T, self.market.coordinator, category="coordinator", market="on_demand")
        else:
            self.ledger.reopen(coord, self.market.coordinator)
        return entries

    def _ledger_state(self) -> dict[str, Any]:
        """The ledger at ``T`` for a checkpoint: settled money (this and earlier sessions) and open intervals."""
        snap = self.ledger.snapshot(self.T)
        return {"settled": _merge_costs(self.carried_cost, snap["settled"]), "open": snap["open"]}

    def _emit_prices(self) -> None:
        prices = self.market.prices
        lo = self.last_price_T
        if lo < 0:
            self.log.emit("price", t=0.0, instance=self.market.instance.name, price=float(prices.value_at(0.0)))
            lo = 0.0
        for t in prices.change_points(lo, self.T + 1e-9):
            self.log.emit("price", t=float(t), instance=self.market.instance.name, price=float(prices.value_at(t)))
        self.last_price_T = self.T

    def cost_so_far(self) -> float:
        return float(self.carried_cost.get("total", 0.0)) + self.ledger.cost_until(self.T)

    def _cost_breakdown(self, final: bool) -> dict[str, Any]:
        bd = self.ledger.breakdown(self.T) if not final else self.ledger.breakdown()
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
        n = self.spec.cluster.workers
        strategy = self.sync_strategy
        per = strategy.expected_round_s(self.time_law, n, self.delta)
        samples = int(self.counters.samples)
        steps = math.ceil(samples / strategy.samples_per_step(n, self.batch))
        t = float(per * steps)
        od = self.market.on_demand_price
        bill = self.ledger.on_demand_policy
        cost = n * bill.charge(od, 0.0, t) + bill.charge(float(self.market.coordinator.on_demand_per_hour or 0.0), 0.0, t)
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
