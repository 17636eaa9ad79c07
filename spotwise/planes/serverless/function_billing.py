"""Accounting of function time for a serverless job (``papers/004_9dc2adb66dc8d26e.txt`` Sec. 3.1, 5).

Every invocation is billed per request and per GB-second of its duration at the cluster's function
price (``catalog.functions``); the supervisor itself runs as a function for the whole job (as in
MLLess); the Redis node is an on-demand instance billed by the :class:`~spotwise.market.billing.Ledger`
(started and closed by the supervisor).  :class:`FunctionMeter` holds the ledger, the function
seconds billed so far and what earlier sessions of a resumed run spent; :class:`FunctionAccounting`
is the job controller's money component (:class:`~spotwise.control.accounting.Billing`) over it.
"""

from __future__ import annotations

from typing import Any, Callable, Protocol

from spotwise.events import EventLog
from spotwise.market.billing import BillingPolicy, Ledger
from spotwise.market.job_market import Market


class BilledJob(Protocol):
    """What :class:`FunctionAccounting` reads of the job: its clock, market (the Redis node's
    price) and event log."""

    @property
    def market(self) -> Market: ...
    @property
    def log(self) -> EventLog: ...

    @property
    def T(self) -> float: ...


class FunctionMeter:
    """The money side of a serverless job: functions of ``gb`` GB at ``pricing`` (a catalog function price)."""

    def __init__(self, pricing: Any, gb: float) -> None:
        self.pricing = pricing
        self.gb = float(gb)
        self.ledger = Ledger(BillingPolicy.exact(), functions=pricing)
        #: seconds of function time billed so far (workers and the supervisor)
        self.function_seconds = 0.0
        #: a resumed run: what the earlier sessions spent
        self.carried_cost: dict[str, Any] = {"total": 0.0, "by_category": {}}

    @property
    def price_per_hour(self) -> float:
        """One function's price in $/h (per GB-second x size x 3600)."""
        return float(self.pricing.per_gb_second * self.gb * 3600.0)

    def bill(self, T: float, seconds: float) -> None:
        """One finished invocation of ``seconds`` (one request), billed at virtual time ``T``."""
        seconds = max(0.0, float(seconds))
        self.function_seconds += seconds
        self.ledger.function_call(T, self.gb, seconds, 1)

    def bill_supervisor(self, T_end: float, T_start: float) -> None:
        """The supervisor ran as a function for the whole session (MLLess Sec. 3.1)."""
        self.function_seconds += T_end - T_start
        self.ledger.function_call(T_end, self.gb, T_end - T_start, 1)

    def cost_so_far(self, T: float, running_s: float, supervisor_s: float) -> float:
        """Billed so far, plus the open invocations (``running_s`` function seconds) and the
        supervisor's session so far, plus earlier sessions."""
        open_s = running_s + supervisor_s
        open_fn = self.pricing.call_cost(self.gb, open_s, 0) if open_s > 0 else 0.0
        return self.ledger.total(T) + open_fn + float(self.carried_cost["total"])

    def spent(self, T: float, final: bool = False) -> dict[str, Any]:
        """Money spent so far by category, earlier sessions of a resumed run included."""
        bd = self.ledger.breakdown() if final else self.ledger.breakdown(T)
        by = dict(self.carried_cost.get("by_category", {}))
        for k, v in bd["by_category"].items():
            by[k] = by.get(k, 0.0) + float(v)
        out: dict[str, Any] = {"total": float(sum(by.values())), "by_category": by}
        if final:
            out["by_instance"], out["by_market"] = bd.get("by_instance", {}), bd.get("by_market", {})
        return out


class FunctionAccounting:
    """The controller's :class:`~spotwise.control.accounting.Billing` for a serverless job.

    Members (function slots) are not billed by the hour: every invocation is billed when it ends
    (:class:`~spotwise.planes.serverless.invocations.FunctionPool` calls :meth:`FunctionMeter.bill`),
    ``running_seconds(T)`` tells the function seconds still running.  The controller's coordinator
    is the Redis node (an on-demand ``service``); the supervisor is billed as one function for the
    whole session at the end (MLLess Sec. 3.1).  No on-demand estimate: functions are on demand.
    """

    def __init__(self, job: BilledJob, meter: FunctionMeter, running_seconds: Callable[[float], float]) -> None:
        self.job = job
        self.meter = meter
        self.ledger = meter.ledger
        self.running_seconds = running_seconds
        #: this session's start (0, or the checkpoint's time when resumed)
        self.T_start = 0.0
        self.last_price_T = -1.0

    def start_coordinator(self, t: float) -> None:
        """The Redis node is billed from ``t`` (this session's start)."""
        self.T_start = float(t)
        self.ledger.start("redis", self.T_start, self.job.market.coordinator, category="service", market="on_demand")

    def emit_prices(self) -> None:
        """The function's price and the Redis node's, once per session (they never change)."""
        if self.last_price_T >= 0:
            return
        job = self.job
        redis = job.market.coordinator
        job.log.emit("price", instance=self.meter.pricing.name, price=self.meter.price_per_hour, unit="$/h per function",
                     redis=redis.label, redis_price=redis.on_demand_per_hour)
        self.last_price_T = job.T

    def worker_price(self, market: str | None = None) -> Any:
        return self.meter.price_per_hour

    def member_started(self, w: int, t: float, reopen: dict[str, Any] | None) -> None:
        return None  # billed per invocation, by the pool

    def member_stopped(self, w: int, t: float, reason: str) -> None:
        return None  # a leaving function's last invocation is billed when it returns

    def egress(self, w: int, usd: float, nbytes: float) -> None:
        """Never billed here: functions exchange through the job's store in its region, not with a
        parameter server in another region (only pools of VMs do, :class:`~spotwise.control.speeds.WorkerSpeeds`)."""
        raise RuntimeError(f"a serverless job has no cross-region exchange to bill (function slot {w})")

    def cost_so_far(self) -> float:
        T = self.job.T
        return self.meter.cost_so_far(T, self.running_seconds(T), T - self.T_start)

    def cost_breakdown(self, final: bool) -> dict[str, Any]:
        return self.meter.spent(self.job.T, final=final)

    def ledger_state(self) -> dict[str, Any]:
        """What a checkpoint carries: the money spent so far (the Redis node's interval restarts
        with the next session, as the functions do)."""
        return {"settled": self.meter.spent(self.job.T), "open": []}

    def restore(self, state: dict[str, Any]) -> dict[str, dict[str, Any]]:
        led = state.get("ledger") or {}
        self.meter.carried_cost = dict(led.get("settled") or state.get("cost") or {"total": 0.0, "by_category": {}})
        self.start_coordinator(self.job.T)
        return {}

    def settle_gone(self, entries: dict[str, dict[str, Any]]) -> int:
        return 0

    def on_demand_estimate(self) -> dict[str, Any] | None:
        return None

    def close(self, t: float, members: list[int]) -> None:
        """The supervisor ran as a function for the whole session; the ledger closes."""
        self.meter.bill_supervisor(t, self.T_start)
        self.ledger.close(t)
