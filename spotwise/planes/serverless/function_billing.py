"""Accounting of function time for a serverless job (``papers/004_9dc2adb66dc8d26e.txt`` Sec. 3.1, 5).

Every invocation is billed per request and per GB-second of its duration at the cluster's function
price (``catalog.functions``); the supervisor itself runs as a function for the whole job (as in
MLLess); the Redis node is an on-demand instance billed by the :class:`~spotwise.market.billing.Ledger`
(started and closed by the supervisor).  :class:`FunctionMeter` holds the ledger, the function
seconds billed so far and what earlier sessions of a resumed run spent; :class:`FunctionAccounting`
is the job controller's money component (:class:`~spotwise.control.accounting.Billing`) over it.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Protocol

from spotwise.control.carried import MAX_ENTRIES, amount, money, refuse, section
from spotwise.events import EventLog
from spotwise.market.billing import BillingPolicy, Ledger
from spotwise.market.job_market import Market


_SLOT = re.compile(r"^worker-(\d{1,9})$")


class BilledJob(Protocol):
    """What :class:`FunctionAccounting` reads of the job: its clock, market (the Redis node's
    price), event log and members (the function slots a checkpoint names)."""

    @property
    def market(self) -> Market: ...
    @property
    def log(self) -> EventLog: ...
    @property
    def members(self) -> dict[int, Any]: ...

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
        #: a resumed run: what the earlier sessions spent (:meth:`spent`'s shape)
        self.carried_cost: dict[str, Any] = {"total": 0.0, "by_category": {}, "by_market": {}, "by_instance": {}}
        #: this session's start: the supervisor runs as a function from then on
        self.session_start = 0.0

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

    def open_seconds(self, T: float, running_s: float) -> float:
        """Function seconds not billed yet at ``T``: the open invocations' (``running_s``) and the
        supervisor's session so far."""
        return max(0.0, running_s) + max(0.0, T - self.session_start)

    def _open_cost(self, T: float, running_s: float) -> float:
        """The open function seconds at the GB-second price, plus one request (a call with no
        request, ``call_cost(..., 0)``, is free: the open time was counted as nothing before)."""
        open_s = self.open_seconds(T, running_s)
        return self.pricing.call_cost(self.gb, open_s, 1) if open_s > 0 else 0.0

    def cost_so_far(self, T: float, running_s: float) -> float:
        """Billed so far, plus the open invocations (``running_s`` function seconds) and the
        supervisor's session so far, plus earlier sessions."""
        return self.ledger.total(T) + self._open_cost(T, running_s) + float(self.carried_cost["total"])

    def spent(self, T: float, final: bool = False, running_s: float | None = None) -> dict[str, Any]:
        """Money spent so far (total, by category, by market and by instance), earlier sessions of a
        resumed run included; ``running_s`` given: the open function seconds at ``T`` too (what a
        checkpoint carries: the uninterrupted run's money at that instant)."""
        bd = self.ledger.breakdown() if final else self.ledger.breakdown(T)
        if running_s is not None:
            fn = self._open_cost(T, running_s)
            bd["by_category"]["function"] = bd["by_category"].get("function", 0.0) + fn
        out: dict[str, Any] = {}
        for key in ("by_category", "by_market", "by_instance"):
            merged = {k: float(v) for k, v in self.carried_cost.get(key, {}).items()}
            for k, v in bd.get(key, {}).items():
                merged[k] = merged.get(k, 0.0) + float(v)
            out[key] = merged
        return {"total": float(sum(out["by_category"].values())), **out}


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
        self.last_price_T = -1.0
        self.member_step_samples = 0  # (Billing's; a function step is one mini-batch per function)

    def start_coordinator(self, t: float) -> None:
        """The Redis node is billed from ``t`` (this session's start)."""
        self.meter.session_start = float(t)
        self.ledger.start("redis", float(t), self.job.market.coordinator, category="service", market="on_demand")

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
        return self.meter.cost_so_far(T, self.running_seconds(T))

    def cost_breakdown(self, final: bool) -> dict[str, Any]:
        return self.meter.spent(self.job.T, final=final)

    def ledger_state(self) -> dict[str, Any]:
        """What a checkpoint carries: the money spent up to ``T`` -- the open invocations and the
        supervisor's session so far included, as the uninterrupted run bills them -- and the
        function seconds likewise; ``open``: the function slots that are members (a resume
        continues them: no new join).  The Redis node's interval restarts with the next session,
        as the functions do."""
        T = self.job.T
        running = self.running_seconds(T)
        return {"settled": self.meter.spent(T, running_s=running),
                "function_seconds": self.meter.function_seconds + self.meter.open_seconds(T, running),
                "open": [{"instance_id": f"worker-{w}"} for w in sorted(self.job.members)]}

    def restore(self, state: dict[str, Any]) -> dict[str, dict[str, Any]]:
        """The checkpoint's money and function seconds carried (checked: :func:`restored_ledger`),
        the Redis node billed from ``T``; returns the member slots to continue."""
        settled, seconds, slots = restored_ledger(state)
        self.meter.carried_cost = settled
        self.meter.function_seconds = seconds
        self.start_coordinator(self.job.T)
        return {f"worker-{w}": {"instance_id": f"worker-{w}"} for w in slots}

    def settle_gone(self, entries: dict[str, dict[str, Any]]) -> int:
        return 0

    def on_demand_estimate(self) -> dict[str, Any] | None:
        return None

    def close(self, t: float, members: list[int]) -> None:
        """The supervisor ran as a function for the whole session; the ledger closes."""
        self.meter.bill_supervisor(t, self.meter.session_start)
        self.ledger.close(t)


def restored_ledger(state: dict[str, Any]) -> tuple[dict[str, Any], float, list[int]]:
    """A serverless checkpoint's ``ledger`` (:meth:`FunctionAccounting.ledger_state`), checked -- it is
    read from a run directory: ``settled`` money (:func:`~spotwise.control.carried.money`), the
    ``function_seconds`` so far, the ``open`` member slots ``worker-N`` (those of ``available``); nothing else.  Returns
    ``(settled, function seconds, slots)``; InputError (exit 2) naming the field otherwise."""
    led = section(state, "ledger")
    unknown = [k for k in led if k not in ("settled", "function_seconds", "open")]
    if unknown:
        raise refuse(f"ledger[{str(unknown[0])[:40]!r}]", led[unknown[0]], "absent (a serverless ledger holds settled, "
                     "function_seconds and open)")
    for key in ("settled", "function_seconds", "open"):
        if key not in led:
            raise refuse("ledger", led, f"a serverless run's ledger with its {key}")
    settled = money(led["settled"], "ledger.settled")
    seconds = amount(led["function_seconds"], "ledger.function_seconds")
    raw = led["open"]
    if not isinstance(raw, list) or len(raw) > MAX_ENTRIES:
        raise refuse("ledger.open", raw, "a list of function slots")
    slots: list[int] = []
    for entry in raw:
        m = _SLOT.match(entry.get("instance_id", "")) if isinstance(entry, dict) and set(entry) == {"instance_id"} \
            and isinstance(entry.get("instance_id"), str) else None
        if m is None or int(m.group(1)) in slots:
            raise refuse("ledger.open", entry, '{"instance_id": "worker-N"}, once per slot')
        slots.append(int(m.group(1)))
    if sorted(slots) != sorted(state.get("available", slots)):  # the members are the slots the job held
        raise refuse("ledger.open", raw, f"the function slots the checkpoint holds ({sorted(state['available'])!r:.60})")
    return settled, seconds, slots
