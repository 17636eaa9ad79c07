"""The job controller's money: worker prices, the ledger across resumes, the price log, cost breakdowns.

:class:`Accounting` is a component held by the job controller (``job.accounting``;
what it reads of the job is :class:`AccountedJob`): it owns the billing :class:`~spotwise.market.billing.Ledger`, the money
carried from earlier sessions of a resumed run and the price log, and answers what a worker costs
on the market in force, the cost so far and its breakdown, and the model estimate of the same work
on on-demand workers.  It reads the job (clock, market, event log) and never changes it.

Pools (issue 21): every worker is billed at its own pool's prices (``job.pools``), the breakdown
adds ``by_pool`` (the coordinators under ``coordinator``), and the inter-region egress of the
pools' exchanges with the parameter server (:meth:`egress`) is a category of its own, by pool.
With ``cluster.ps_shards: k`` the k parameter-server shards are k on-demand coordinators.
"""

from __future__ import annotations

import math
from typing import Any, Protocol

import numpy as np

from spotwise.config import JobSpec
from spotwise.control.records import Counters
from spotwise.control.sync import SyncStrategy
from spotwise.events import EventLog
from spotwise.market.billing import Ledger
from spotwise.market.pools import PoolSet
from spotwise.market.series import SeriesMeta, StepSeries
from spotwise.market.job_market import Market
from spotwise.theory.runtime import MiniBatchTimeLaw


class Billing(Protocol):
    """What the controller asks of its money component: :class:`Accounting` (instances billed by
    the hour on their market) or the serverless plane's
    :class:`~spotwise.planes.serverless.accounting.FunctionAccounting` (functions billed per
    request and GB-second).  A data plane says which (:meth:`DataPlane.make_accounting`)."""

    ledger: Ledger
    #: clock time up to which ``price`` events were logged
    last_price_T: float
    #: the most samples one member committed in a step (a script's accumulation: A x batch; 0: unknown),
    #: so that the on-demand estimate counts optimizer steps as the run does
    member_step_samples: int

    def start_coordinator(self, t: float) -> None: ...
    def emit_prices(self) -> None: ...
    def worker_price(self, market: str | None = None) -> Any: ...
    def member_started(self, w: int, t: float, reopen: dict[str, Any] | None) -> None: ...
    def member_stopped(self, w: int, t: float, reason: str) -> None: ...
    def egress(self, w: int, usd: float, nbytes: float) -> None: ...
    def cost_so_far(self) -> float: ...
    def cost_breakdown(self, final: bool) -> dict[str, Any]: ...
    def ledger_state(self) -> dict[str, Any]: ...
    def restore(self, state: dict[str, Any]) -> dict[str, dict[str, Any]]: ...
    def settle_gone(self, entries: dict[str, dict[str, Any]]) -> int: ...
    def on_demand_estimate(self) -> dict[str, Any] | None: ...
    def close(self, t: float, members: list[int]) -> None: ...


class _Pools(Protocol):
    pools: PoolSet


class AccountedJob(Protocol):
    """What :class:`Accounting` reads of the job (it never changes it): the clock, the market in
    force and the pools, the work done and the runtime model of its estimate, and the event log."""

    @property
    def spec(self) -> JobSpec: ...
    @property
    def market(self) -> Market: ...
    @property
    def worker_market(self) -> str: ...
    @property
    def speeds(self) -> _Pools: ...
    @property
    def members(self) -> dict[int, Any]: ...
    @property
    def counters(self) -> Counters: ...
    @property
    def log(self) -> EventLog: ...
    @property
    def batch(self) -> int: ...
    @property
    def delta(self) -> float: ...
    @property
    def time_law(self) -> MiniBatchTimeLaw: ...

    @property
    def T(self) -> float: ...
    @property
    def sync_strategy(self) -> SyncStrategy: ...


class Accounting:
    """Prices, billing and cost of one job on instances (see the module docstring)."""

    def __init__(self, job: AccountedJob) -> None:
        self.job = job
        #: every instance's billed intervals (this session)
        self.ledger = Ledger(job.market.billing)
        #: settled money of earlier sessions (a resumed run), in :meth:`Ledger.breakdown`'s shape
        self.carried_cost: dict[str, Any] = {"total": 0.0, "by_category": {}, "by_market": {}, "by_instance": {}}
        #: the on-demand price of each instance type as a series (billing), built when first needed
        self._od_series: dict[Any, StepSeries] = {}
        #: inter-region egress of this session by pool (USD) and bytes (issue 21 item 2)
        self.egress_usd: dict[str, float] = {}
        self.egress_bytes = 0.0
        #: clock time up to which ``price`` events were logged (-1: none yet)
        self.last_price_T = -1.0
        #: the most samples one member committed in a step (the data plane says; :meth:`on_demand_estimate`)
        self.member_step_samples = 0

    def worker_price(self, market: str | None = None, w: int | None = None) -> Any:
        """What worker ``w`` costs on ``market`` (ledger name; default: the one in force): its pool's
        spot price series, or its instance's on-demand $/h (``w`` None: the first pool's)."""
        job = self.job
        place = job.market if w is None or not job.speeds.pools.multi else job.speeds.pools.pool_of(w).market
        if (market or job.worker_market) == "on_demand":
            inst = place.instance
            if inst not in self._od_series:
                meta = SeriesMeta(id=f"on-demand:{inst.name}", kind="price", instance=inst.name, source="catalog/on-demand")
                self._od_series[inst] = StepSeries(np.array([0.0]), np.array([place.on_demand_price]), place.horizon_s, meta)
            return self._od_series[inst]
        return place.prices

    def start_coordinator(self, t: float) -> None:
        """The coordinator (on-demand, the controller's own machine) is billed from ``t``; with
        ``ps_shards: k`` the other k - 1 parameter-server shards too (``coordinator-1`` ...)."""
        for iid in self.coordinator_ids():
            self.ledger.start(iid, t, self.job.market.coordinator, category="coordinator", market="on_demand")

    def coordinator_ids(self) -> list[str]:
        return ["coordinator"] + [f"coordinator-{k}" for k in range(1, int(self.job.spec.cluster.ps_shards))]

    def egress(self, w: int, usd: float, nbytes: float) -> None:
        """Worker ``w``'s exchange of ``nbytes`` left its region: ``usd`` of egress, on its pool."""
        pool = self.job.speeds.pools.pool_of(w).name
        self.egress_usd[pool] = self.egress_usd.get(pool, 0.0) + float(usd)
        self.egress_bytes += float(nbytes)

    def pool_of_instance(self, iid: str) -> str:
        """The pool an instance id of this job belongs to (``coordinator`` for the coordinators)."""
        if iid.startswith("coordinator"):
            return "coordinator"
        return self.job.speeds.pools.pool_of(int(iid.rsplit("-", 1)[-1])).name

    def member_started(self, w: int, t: float, reopen: dict[str, Any] | None) -> None:
        """Worker ``w`` is billed from ``t`` on the market in force (``reopen``: its interval from a
        checkpoint, continued -- a resume charges no second minimum)."""
        if reopen is not None:
            self.ledger.reopen(reopen, self.worker_price(str(reopen.get("market", self.job.worker_market)), w))
        else:
            self.ledger.start(f"worker-{w}", t, self.worker_price(w=w), category="worker", market=self.job.worker_market)

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
            self.ledger.reopen(entry, self.worker_price(str(entry.get("market", job.worker_market)), int(iid.split("-")[-1])))
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
        coords = [entries.pop(iid, None) for iid in self.coordinator_ids()]
        for iid, coord in zip(self.coordinator_ids(), coords):
            if coord is None:
                self.ledger.start(iid, self.job.T, self.job.market.coordinator, category="coordinator", market="on_demand")
            else:
                self.ledger.reopen(coord, self.job.market.coordinator)
        return entries

    def ledger_state(self) -> dict[str, Any]:
        """The ledger at ``T`` for a checkpoint: settled money (this and earlier sessions) and open intervals."""
        snap = self.ledger.snapshot(self.job.T)
        # by pool too (the ledger knows instances, not pools): a resume carries it as the uninterrupted run sums it
        settled = _merge_costs(self.carried_cost, self._with_pools(snap["settled"]))
        return {"settled": _merge_costs(settled, self._egress_costs()), "open": snap["open"]}

    def _egress_costs(self) -> dict[str, Any]:
        """This session's egress in the breakdown's shape."""
        usd = sum(self.egress_usd.values())
        return {"total": usd, "by_category": {"egress": usd} if usd else {}, "by_pool": dict(self.egress_usd)}

    def emit_prices(self) -> None:
        """Log the ``price`` events of the market's price changes up to now (every pool's, by pool)."""
        job = self.job
        lo = self.last_price_T
        markets = [(None, job.market)] if not job.speeds.pools.multi else [(p.name, p.market) for p in job.speeds.pools.pools]
        for pool, m in markets:
            extra = {} if pool is None else {"pool": pool}
            if lo < 0:
                job.log.emit("price", t=0.0, instance=m.instance.name, price=float(m.prices.value_at(0.0)), **extra)
            for t in m.prices.change_points(max(lo, 0.0), job.T + 1e-9):
                job.log.emit("price", t=float(t), instance=m.instance.name, price=float(m.prices.value_at(t)), **extra)
        self.last_price_T = job.T

    def cost_so_far(self) -> float:
        return float(self.carried_cost.get("total", 0.0)) + self.ledger.cost_until(self.job.T) + sum(self.egress_usd.values())

    def cost_breakdown(self, final: bool) -> dict[str, Any]:
        """Total and ``by_category`` / ``by_market`` / ``by_instance`` / ``by_pool`` (USD); ``by_pool``
        and ``by_category`` each add up to the total."""
        bd = self._with_pools(self.ledger.breakdown(self.job.T) if not final else self.ledger.breakdown())
        return _merge_costs(_merge_costs(self.carried_cost, {"total": sum(bd["by_category"].values()), **bd}),
                            self._egress_costs())

    def _with_pools(self, bd: dict[str, Any]) -> dict[str, Any]:
        """A ledger breakdown with ``by_pool`` added (its instances' money summed by pool)."""
        by_pool: dict[str, float] = {}
        for iid, usd in bd.get("by_instance", {}).items():
            name = self.pool_of_instance(iid)
            by_pool[name] = by_pool.get(name, 0.0) + float(usd)
        return {**bd, "by_pool": by_pool}

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
        unit = strategy.samples_per_step(n, job.batch)  # one mini-batch of ``batch`` per member (H for S-MA)
        rounds = math.ceil(samples / unit)  # the runtime model's steps: one mini-batch each
        # a script that accumulates A micro-batches per optimizer step (its members committed A x batch
        # each) takes A such rounds per step: the estimate's steps are optimizer steps, like the run's
        acc = max(1, round(self.member_step_samples * n / unit))
        steps = math.ceil(samples / (unit * acc))
        t = float(per * rounds)
        bill = self.ledger.on_demand_policy
        # every pool's workers at their own on-demand price (one pool: the instance's); every shard
        fleet = [(len(p.slots), p.market.on_demand_price) for p in job.speeds.pools.pools] if job.speeds.pools.multi else [(n, job.market.on_demand_price)]
        coord = float(job.market.coordinator.on_demand_per_hour or 0.0)
        cost = sum(k * bill.charge(od, 0.0, t) for k, od in fleet) + len(self.coordinator_ids()) * bill.charge(coord, 0.0, t)
        od = sum(k * od for k, od in fleet) / max(1, sum(k for k, _ in fleet))
        return {"basis": "model", "workers": n, "samples": samples, "steps": steps,
                "micro_batches_per_step": acc, "time_s": t, "cost_usd": float(cost),
                "worker_price_per_hour": od, "metric": None}


def _merge_costs(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Sum two cost breakdowns (``total`` plus the ``by_*`` maps)."""
    out: dict[str, Any] = {"total": float(a.get("total", 0.0)) + float(b.get("total", 0.0))}
    for key in ("by_category", "by_market", "by_instance", "by_pool"):
        merged = {k: float(v) for k, v in a.get(key, {}).items()}
        for k, v in b.get(key, {}).items():
            merged[k] = merged.get(k, 0.0) + float(v)
        out[key] = merged
    return out
