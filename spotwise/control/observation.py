"""What the policies see: the :class:`~spotwise.policies.base.Observation` of a job at a step boundary."""

from __future__ import annotations

from typing import TYPE_CHECKING

from spotwise.policies.base import Observation

if TYPE_CHECKING:  # type only: the controller asks for its observation
    from spotwise.control.controller import JobController


def observe(job: "JobController") -> Observation:
    """The observation of ``job`` now (shared ``extra``: policies only read it)."""
    step_s = job.expected_step_s()
    return Observation(
        step=job.step, t=job.T, active=len(job.members), provisioned=job.provisioned,
        max_workers=job.max_workers, reference_workers=job.spec.cluster.workers, base_lr=job.base_lr, lr=job.lr,
        sync=job.sync, sync_n=job.sync_n, loss=job.last_loss, price=job.market.spot_price(job.T),
        cost_so_far=job.cost_so_far(), deadline_s=job.spec.deadline_s, budget_usd=job.spec.budget_usd,
        target_iterations=job.spec.target.iterations, market=job.market_name,
        spot_available=job.provider.spot_available(job.T), step_s=step_s, restart_s=job.restart_s,
        place=(job.region or job.market.instance.region or "", job.market.instance.name),
        on_demand_price=job.market.instance.on_demand_per_hour,
        next_decision_s=job.outage.decision_s if not job.members else step_s,
        min_workers=min(job.spec.cluster.min_workers or 1, job.max_workers),
        # shared, not copied (a copy per step would cost O(steps) each); policies only read it
        extra={"loss_history": job.loss_history, "last_resize_t": job.last_resize_t,
               "last_switch_t": job.last_switch_t},
    )
