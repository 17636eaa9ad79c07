"""What the policies see: the :class:`~spotwise.policies.base.Observation` of a job at a step boundary."""

from __future__ import annotations

from typing import Any, Protocol

from spotwise.capacity.provider import Provider
from spotwise.config import JobSpec
from spotwise.market.job_market import Market
from spotwise.policies.base import Observation


class _DecisionGap(Protocol):
    decision_s: float


class _Committed(Protocol):
    samples: int


class ObservedJob(Protocol):
    """What an observation is made of: the job's state read, never changed."""

    @property
    def spec(self) -> JobSpec: ...
    @property
    def counters(self) -> _Committed: ...
    @property
    def step(self) -> int: ...
    @property
    def members(self) -> dict[int, Any]: ...
    @property
    def provisioned(self) -> int: ...
    @property
    def max_workers(self) -> int: ...
    @property
    def base_lr(self) -> float: ...
    @property
    def lr(self) -> float: ...
    @property
    def sync(self) -> str: ...
    @property
    def sync_n(self) -> int | None: ...
    @property
    def last_loss(self) -> float | None: ...
    @property
    def market(self) -> Market: ...
    @property
    def provider(self) -> Provider: ...
    @property
    def restart_s(self) -> float: ...
    @property
    def region(self) -> str | None: ...
    @property
    def outage(self) -> _DecisionGap: ...
    @property
    def loss_history(self) -> list[tuple[int, float, float, int]]: ...
    @property
    def last_resize_t(self) -> float | None: ...
    @property
    def last_switch_t(self) -> float | None: ...

    @property
    def T(self) -> float: ...
    @property
    def market_name(self) -> str: ...
    def expected_step_s(self) -> float: ...
    def cost_so_far(self) -> float: ...


def target_iterations(job: ObservedJob) -> int | None:
    """The job's length in steps for policies: ``target.iterations``; with ``target.samples``, the
    steps taken so far plus those the samples still to commit take at full strength (a step with
    fewer members commits fewer samples, so the count grows as revocations thin the steps)."""
    spec = job.spec
    target = spec.target_samples()
    if target is None:
        return spec.target.iterations
    left = max(0, target - int(job.counters.samples))
    return int(job.step) + -(-left // spec.samples_per_step())


def observe(job: ObservedJob) -> Observation:
    """The observation of ``job`` now (shared ``extra``: policies only read it)."""
    step_s = job.expected_step_s()
    return Observation(
        step=job.step, t=job.T, active=len(job.members), provisioned=job.provisioned,
        max_workers=job.max_workers, reference_workers=job.spec.cluster.workers, base_lr=job.base_lr, lr=job.lr,
        sync=job.sync, sync_n=job.sync_n, loss=job.last_loss, price=job.market.spot_price(job.T),
        cost_so_far=job.cost_so_far(), deadline_s=job.spec.deadline_s, budget_usd=job.spec.budget_usd,
        target_iterations=target_iterations(job), market=job.market_name,
        spot_available=job.provider.spot_available(job.T), step_s=step_s, restart_s=job.restart_s,
        place=(job.region or job.market.instance.region or "", job.market.instance.name),
        on_demand_price=job.market.instance.on_demand_per_hour,
        next_decision_s=job.outage.decision_s if not job.members else step_s,
        min_workers=min(job.spec.cluster.min_workers or 1, job.max_workers),
        # shared, not copied (a copy per step would cost O(steps) each); policies only read it
        extra={"loss_history": job.loss_history, "last_resize_t": job.last_resize_t,
               "last_switch_t": job.last_switch_t},
    )
