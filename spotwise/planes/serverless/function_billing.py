"""Accounting of function time for a serverless job (``papers/004_9dc2adb66dc8d26e.txt`` Sec. 3.1, 5).

Every invocation is billed per request and per GB-second of its duration at the cluster's function
price (``catalog.functions``); the supervisor itself runs as a function for the whole job (as in
MLLess); the Redis node is an on-demand instance billed by the :class:`~spotwise.market.billing.Ledger`
(started and closed by the supervisor).  :class:`FunctionMeter` holds the ledger, the function
seconds billed so far and what earlier sessions of a resumed run spent.
"""

from __future__ import annotations

from typing import Any

from spotwise.market.billing import BillingPolicy, Ledger


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
