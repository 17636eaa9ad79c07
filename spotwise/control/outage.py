"""Waiting without workers: the job controller's outage component.

:class:`OutageWait` is held by the job controller
(``job.outage``).  While no worker computes (every spot worker revoked, no capacity yet) time
passes to the next capacity change, the policies are consulted at least every
:attr:`OutageWait.decision_s` seconds (a deadline guard may buy on-demand, a migration may move the
job: ``papers/000_3c734f3ffedcac15.txt`` Thm 1's idle time is what a policy can cut), and the idle
period is counted (``extra.idle_s``) and logged (``idle`` event).  The coordinator stays billed.
"""

from __future__ import annotations

import math
from typing import Any, Protocol

from spotwise.capacity.provider import Provider
from spotwise.config import JobSpec
from spotwise.control.clock import Clock
from spotwise.control.records import Counters
from spotwise.events import EventLog
from spotwise.market.job_market import Market
from spotwise.policies.base import Policy


class _Prices(Protocol):
    def emit_prices(self) -> None: ...


class OutageHost(Protocol):
    """What :class:`OutageWait` reads of the job and asks it to do: the clock, capacity and the
    market to wait on, the policies to consult meanwhile, and the price log (nothing else)."""

    @property
    def spec(self) -> JobSpec: ...
    @property
    def clock(self) -> Clock: ...
    @property
    def provider(self) -> Provider: ...
    @property
    def market(self) -> Market: ...
    @property
    def policies(self) -> list[Policy]: ...
    @property
    def members(self) -> dict[int, Any]: ...
    @property
    def counters(self) -> Counters: ...
    @property
    def log(self) -> EventLog: ...
    @property
    def accounting(self) -> _Prices: ...
    @property
    def mean_step_s(self) -> float: ...

    @property
    def T(self) -> float: ...
    def apply_policies(self) -> None: ...
    def iteration_market(self) -> None: ...
    def drain_market(self, until: float) -> None: ...
    def poll_joins(self, timeout: float = 0.0) -> None: ...

#: seconds between two consultations of the policies while no worker computes (an outage)
IDLE_DECISION_S = 60.0


class OutageWait:
    """The idle periods of one job (see the module docstring)."""

    def __init__(self, job: OutageHost) -> None:
        self.job = job
        #: while no worker computes, the policies are consulted at least this often (virtual or
        #: wall seconds): the executor's decision gap that a deadline guard adds to its margin
        self.decision_s = IDLE_DECISION_S
        self.next_decision = -math.inf
        #: clock time at which the fleet became empty (an idle period in progress), else None
        self.since: float | None = None

    def wait(self) -> bool:
        """No active worker, or fewer than ``cluster.min_workers`` (issue 31: a gang waits for all of its
        nodes; those it has stay held and billed): let time pass until capacity returns (billed: the coordinator).

        Virtual time jumps to the next scheduled capacity change (or one iteration of a
        per-iteration market); requested capacity (a real cluster) is polled for up to the
        provider's ``capacity_timeout_s``.  False when no capacity can come.  The idle period is
        logged (``idle``, ``t`` = its end) once workers are back or the wait is given up.
        """
        job = self.job
        if self.since is None:
            self.since = job.T
        if job.policies and job.T >= self.next_decision:
            # a policy may act on the outage (a deadline guard switches to on-demand, a migration
            # moves the job): consulted at least every decision_s seconds while no worker computes
            self.next_decision = job.T + self.decision_s
            job.apply_policies()
            if len(job.members) >= (job.spec.cluster.min_workers or 1):
                self.end()
                return True
        if job.provider.iteration_driven:
            job.clock.advance(job.mean_step_s)
            job.iteration_market()
        else:
            t = job.provider.peek_time()
            # virtual time jumps to the next capacity change, but no further than the next idle
            # decision while policies could act (and, with no capacity in sight, up to the horizon)
            cap = self.next_decision if (job.policies and not job.clock.measured) else math.inf
            if t is not None and t < job.market.horizon_s and t <= cap:
                job.drain_market(t)
            elif cap < job.market.horizon_s:
                job.clock.advance_to(cap)
                job.accounting.emit_prices()
            elif job.provider.requests_capacity and job.T - self.since < job.provider.capacity_timeout_s:
                job.poll_joins(timeout=0.25)
            else:
                self.end()
                return False
        if len(job.members) >= (job.spec.cluster.min_workers or 1):
            self.end()
        return True

    def end(self) -> None:
        """Close the idle period in progress (if any): count it and log it."""
        job = self.job
        if self.since is None:
            return
        start, self.since = self.since, None
        if job.T > start:
            job.counters.idle_s += job.T - start
            job.log.emit("idle", start=start, duration=job.T - start)  # t = when the idle period ends
