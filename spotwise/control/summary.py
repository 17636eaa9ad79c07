"""The summary of a job controller's run: ``summary.json``'s counters, costs and extras.

:func:`run_summary` reads a finished job (:class:`SummarisedJob`: its counters, sampler, ledger
breakdown, final evaluation and its plane's extras) into the
:class:`~spotwise.events.RunSummary` that every executor writes (``summary.json``, the run
directory contract of ``DESIGN.md``).
"""

from __future__ import annotations

import time
from typing import Any, Protocol

import numpy as np

from spotwise.config import JobSpec
from spotwise.control.records import Counters
from spotwise.control.sampler import EpochSampler
from spotwise.control.state import TrainingState
from spotwise.events import RunSummary
from spotwise.market.job_market import Market


class _OnDemandEstimate(Protocol):
    def on_demand_estimate(self) -> dict[str, Any] | None: ...


class _PlaneExtras(Protocol):
    def summary_extra(self) -> dict[str, Any]: ...


class SummarisedJob(Protocol):
    """What the summary reads of a finished job."""

    @property
    def spec(self) -> JobSpec: ...
    @property
    def mode(self) -> str: ...
    @property
    def status(self) -> str: ...
    @property
    def step(self) -> int: ...
    @property
    def lr(self) -> float: ...
    @property
    def sync(self) -> str: ...
    @property
    def last_loss(self) -> float | None: ...
    @property
    def stop_message(self) -> str | None: ...
    @property
    def wall0(self) -> float: ...
    @property
    def market(self) -> Market: ...
    @property
    def counters(self) -> Counters: ...
    @property
    def sampler(self) -> EpochSampler: ...
    @property
    def state(self) -> TrainingState: ...
    @property
    def accounting(self) -> _OnDemandEstimate: ...
    @property
    def plane(self) -> _PlaneExtras: ...

    @property
    def T(self) -> float: ...


def run_summary(job: SummarisedJob, final_eval: dict[str, float], cost: dict[str, Any]) -> RunSummary:
    """The run's summary: ``final_eval`` the last evaluation, ``cost`` the final cost breakdown."""
    rec = job.counters.recoveries_ms
    extra: dict[str, Any] = {
        "deadline_s": job.spec.deadline_s,
        # an unfinished run has not met its deadline, however early it stopped (issue 7 item 9)
        "deadline_met": None if job.spec.deadline_s is None else (
            job.status == "completed" and job.T <= job.spec.deadline_s),
        "idle_s": job.counters.idle_s, "notices": job.counters.notices, "aborted_steps": job.counters.aborted_steps,
        "checkpoints": job.counters.checkpoints, "epochs": job.sampler.epoch, "stop_message": job.stop_message, "samples": job.counters.samples,
        # the length asked for: a run commits whole steps, so up to one step's samples past it (docs/spec.md)
        "target_samples": job.spec.target_samples(),
        "recovery_ms": {"count": len(rec), "median": float(np.median(rec)) if rec else None,
                        "p99": float(np.percentile(rec, 99)) if rec else None},
        "on_demand": job.accounting.on_demand_estimate() if job.step else None,
        "final_eval": final_eval, "instance": job.market.instance.name, "sync": job.sync, "lr": job.lr,
        # gradient payload bytes received from workers (sparse updates for sparse workloads)
        # and what dense float32 vectors would have cost (issue 9)
        "grad_bytes": int(job.counters.grad_bytes), "grad_bytes_dense": int(job.counters.grad_bytes_dense),
        **job.plane.summary_extra(),
    }
    return RunSummary(
        mode=job.mode, status=job.status, steps=job.step, final_loss=final_eval.get("loss", job.last_loss),
        final_metric=None if job.state.metric_name is None else final_eval.get(job.state.metric_name),
        metric_name=job.state.metric_name,
        wall_s=time.perf_counter() - job.wall0, virtual_s=job.T, cost_usd=cost["total"], cost_breakdown=cost,
        revocations=job.counters.revocations, joins=job.counters.joins, decisions=job.counters.decisions,
        spec=job.spec.to_dict(), plan=None, extra=extra,
    )
