"""Expected time and cost of a job on a volatile market, priced like the run it plans (issue 18 item 1).

The closed forms of ``papers/000_3c734f3ffedcac15.txt`` (Lemma 2, Thm 3-7) assume that all workers of
a bid group are up or down together, or that the active count is ``Binomial(n, 1 - q)`` afresh in
every iteration, and price continuous running.  A run on a market with churn differs in ways that
decide its cost: a Bernoulli market with ``rejoin_p`` has a *Markov* active count (a revoked worker
stays down for ``1 / rejoin_p`` iterations on average); a lifetime market revokes workers *during* a
round, restarts them after a delay and may leave the job with no worker at all; and every new
instance is billed at least the billing minimum (60 s), which at fast churn costs more than the
computation itself.  So the planner prices the strategy a spec actually runs with this model of the
*same process* the runtime and ``spotwise simulate`` execute (:mod:`spotwise.control.controller`,
:mod:`spotwise.planes.ps.rounds`):

* **rounds** -- paper 000 eq. (14)-(15): a fully-synchronous round of the ``y`` members takes
  ``max_k r_k + Delta`` (N-sync: the ``N``-th smallest ``r_k``), with ``r_k`` drawn from the job's
  mini-batch law :class:`~spotwise.theory.runtime.MiniBatchTimeLaw`; a member revoked before its
  mini-batch finishes contributes nothing and does not hold the round up; a round none of whose
  members survives is aborted and retried (its time is lost).  Continuous modes (``n-batch``,
  ``async``) take ``E[R(y)]`` per committed step (eq. 42).  Each committed step adds ``1 / y`` to
  the error recursion (Thm 1, eq. 10) with ``y`` its contributions.
* **active workers** -- the revocation model's own process: the Bernoulli chain of paper 000
  Remark 2 stepped before every round (revocations with ``q``, re-joins with ``rejoin_p``; with no
  member, time advances by one mean mini-batch per step), or the per-slot up/down timeline of a
  time-driven model (:meth:`~spotwise.market.preemption.RevocationModel.all_intervals`: bids against
  the price path, lifetimes with restart delays (paper 002 Sec. I-II), availability traces); with no
  member, time jumps to the next capacity.
* **money** -- every up interval of a slot is one instance, billed by the market's
  :class:`~spotwise.market.billing.BillingPolicy` exactly as the run's Ledger bills it (minimum
  charge, rounding, the price path), plus the on-demand coordinator for the whole time.

The active-worker process with revocations inside rounds, aborted rounds and restart delays has no
closed form (the paper's Lemma 3 needs i.i.d. iterations), so the expectation is a seeded average over
``replications`` independent histories of this process (reproducible for a given seed); a job of more
than :data:`MAX_ROUNDS` steps is extrapolated from its first :data:`MAX_ROUNDS` (after the first
revocations the per-step time and cost are stationary).  Bid and trace markets start the replications
at different offsets of the price/availability path (an average over start times).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from spotwise.market.billing import BillingPolicy
from spotwise.market.preemption import BernoulliRevocation, NoRevocation, RevocationModel
from spotwise.market.series import StepSeries
from spotwise.theory.runtime import MiniBatchTimeLaw

SECONDS_PER_HOUR = 3600.0
#: committed steps replayed per history; longer jobs are extrapolated linearly from these
MAX_ROUNDS = 20_000
#: aborted rounds in a row after which a history is declared stuck (the runtime's no-progress rule
#: stops far earlier; check_progress_possible refuses such specs up front)
_MAX_ABORTS = 100_000


@dataclass(frozen=True)
class ChurnEstimate:
    """Expected outcome of ``iterations`` committed steps on ``workers`` slots of a volatile market."""

    workers: int
    iterations: int
    time_s: float
    worker_cost: float
    coordinator_cost: float
    #: mean of ``1 / contributions`` over the committed steps (``E[1/y]`` of Thm 1)
    inv_y: float
    #: mean instance-seconds the workers were up (before billing rounding and minimums)
    worker_seconds: float
    #: mean number of instances started (each billed at least the minimum)
    instances: float
    revocations: float
    idle_s: float
    aborted_rounds: float
    replications: int
    #: standard deviation of the histories' times (deadline probability)
    time_sd_s: float = 0.0
    #: histories that could not finish (no capacity until the end of the market's path)
    stuck: int = 0

    def __post_init__(self) -> None:
        if self.workers < 1 or self.iterations < 1 or self.replications < 1:
            raise ValueError("a churn estimate needs workers, iterations and replications >= 1")
        for name in ("time_s", "worker_cost", "coordinator_cost", "inv_y", "worker_seconds"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v >= 0):
                raise ValueError(f"{name} must be finite and >= 0, got {v!r}")

    @property
    def cost(self) -> float:
        """Expected USD: workers plus coordinator."""
        return self.worker_cost + self.coordinator_cost

    def describe(self) -> str:
        return (f"{self.replications} seeded histories of the market's churn: {self.revocations:.0f} revocations, "
                f"{self.instances:.0f} instances started (each billed >= the minimum), {self.idle_s:.0f} s with no "
                f"worker, {self.aborted_rounds:.0f} aborted rounds, E[1/y] = {self.inv_y:.3g}")


@dataclass(frozen=True)
class ChurnJob:
    """What the round process needs to know about the job and its market."""

    workers: int
    iterations: int
    law: MiniBatchTimeLaw
    delta_s: float
    #: "full" / "n-sync" (barrier rounds) or "n-batch" (continuous: async is N = 1)
    sync: str
    n_sync: int | None
    model: RevocationModel
    #: worker price: a constant $/h or the price path (bid markets)
    price: float | StepSeries
    coordinator_price: float
    billing: BillingPolicy
    horizon_s: float
    #: E[R(y)] per committed step for continuous modes, index y (0 unused)
    continuous_round_s: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        if self.workers < 1 or self.iterations < 1:
            raise ValueError("a job needs workers >= 1 and iterations >= 1")
        if self.sync not in ("full", "n-sync", "n-batch"):
            raise ValueError(f"unknown sync mode {self.sync!r}")
        if self.sync == "n-batch" and len(self.continuous_round_s) < self.workers + 1:
            raise ValueError("continuous modes need E[R(y)] for y = 1..workers")
        if not (self.horizon_s > 0 and math.isfinite(self.horizon_s)):
            raise ValueError("horizon_s must be positive and finite")


def _on_demand(p: BillingPolicy) -> BillingPolicy:
    return BillingPolicy(p.name, p.granularity_s, p.minimum_s, False, p.price_rule)


def _needed(job: ChurnJob, y: int) -> int:
    if job.sync == "n-sync" and job.n_sync is not None:
        return min(int(job.n_sync), y)
    if job.sync == "n-batch":
        return min(int(job.n_sync or 1), max(1, y)) if job.n_sync else 1
    return y


class _History:
    """One history of the round process on ``[t0, ...)`` (see the module docstring)."""

    def __init__(self, job: ChurnJob, rng: np.random.Generator, t0: float, span: float) -> None:
        self.job, self.rng, self.t0 = job, rng, t0
        n = job.workers
        self.iter_driven = bool(job.model.is_iteration_driven)
        self.intervals: list[list[tuple[float, float]]] = []
        self.pos = [0] * n
        if not self.iter_driven:
            t1 = min(job.horizon_s, t0 + span)
            self.intervals = [list(iv) for iv in job.model.all_intervals(n, t0, t1, np.random.default_rng(rng.integers(2**63)))]
            self.t1 = t1
        self.up_since: list[float | None] = [t0] * n if self.iter_driven else [None] * n
        self.billed: list[tuple[float, float, bool]] = []  # (start, end, revoked)
        self.revocations = 0
        self.idle = 0.0
        self.aborted = 0

    # ---------------------------------------------------------------- time-driven capacity
    def _sync_slots(self, t: float) -> list[int]:
        """Members at ``t``: the slots whose current interval holds ``t`` (events at or before ``t`` applied)."""
        members = []
        for k, iv in enumerate(self.intervals):
            i = self.pos[k]
            while i < len(iv) and iv[i][1] <= t:  # revoked at or before t
                a, b = iv[i]
                self.billed.append((a, b, b < self.t1))
                self.revocations += b < self.t1
                i += 1
            self.pos[k] = i
            if i < len(iv) and iv[i][0] <= t:
                members.append(k)
        return members

    def _next_capacity(self, t: float) -> float | None:
        nxt = [iv[self.pos[k]][0] for k, iv in enumerate(self.intervals) if self.pos[k] < len(iv) and iv[self.pos[k]][0] > t]
        return min(nxt) if nxt else None

    # ---------------------------------------------------------------- per-iteration capacity (Bernoulli)
    def _chain_step(self, t: float) -> None:
        m = self.job.model
        assert isinstance(m, BernoulliRevocation)
        u = self.rng.random(self.job.workers)
        for k in range(self.job.workers):
            s = self.up_since[k]
            if s is not None and u[k] < m.q:
                self.billed.append((s, t, True))
                self.revocations += 1
                self.up_since[k] = None
            elif s is None and m.rejoin_p is not None and u[k] < m.rejoin_p:
                self.up_since[k] = t

    def _bernoulli_members(self) -> list[int]:
        return [k for k, s in enumerate(self.up_since) if s is not None]

    # ---------------------------------------------------------------- the loop
    def run(self, steps: int) -> tuple[float, float, float] | None:
        """``(end time, sum of 1/contributions, instances started)``; None if stuck without capacity."""
        job, rng = self.job, self.rng
        t = self.t0
        commits, inv = 0, 0.0
        aborts_in_row = 0
        while commits < steps:
            if self.iter_driven:
                members = self._bernoulli_members()
                if not members:  # as the controller's outage wait: one mean mini-batch, then one chain step
                    t += job.law.mean
                    self.idle += job.law.mean
                    self._chain_step(t)
                    continue
                self._chain_step(t)  # _barrier_round / after a commit: the chain steps first
                members = self._bernoulli_members()
                if not members:
                    continue
                ends = None
            else:
                members = self._sync_slots(t)
                if not members:
                    nxt = self._next_capacity(t)
                    if nxt is None:
                        return None
                    self.idle += nxt - t
                    t = nxt
                    continue
                ends = [self.intervals[k][self.pos[k]][1] for k in members]
            y = len(members)
            if job.sync == "n-batch":  # continuous: E[R(y)] per commit (eq. 42), revocations between commits
                t += job.continuous_round_s[y]
                commits += 1
                inv += 1.0 / _needed(job, y)
                continue
            r = np.asarray(job.law.draw(rng, y), dtype=float)
            if ends is None:
                done = np.sort(r)
            else:
                finish = t + r
                ok = finish < np.asarray(ends)
                if not ok.any():  # every member revoked mid-round: aborted, retried from the last revocation
                    t = float(np.max(np.asarray(ends)))
                    self.aborted += 1
                    aborts_in_row += 1
                    if aborts_in_row > _MAX_ABORTS:
                        return None
                    continue
                done = np.sort(r[ok])
            aborts_in_row = 0
            k = _needed(job, len(done))
            t += float(done[k - 1]) + job.delta_s
            commits += 1
            inv += 1.0 / k
        return t, inv, 0.0

    def close(self, t_end: float) -> tuple[float, float, int]:
        """Bill every instance up before ``t_end``: ``(worker USD, up seconds, instances)``."""
        job = self.job
        if self.iter_driven:
            for s in self.up_since:
                if s is not None:
                    self.billed.append((s, t_end, False))
        else:
            for k, iv in enumerate(self.intervals):
                for a, b in iv[self.pos[k]:]:
                    if a >= t_end:
                        break
                    self.billed.append((a, min(b, t_end), False) if b > t_end else (a, b, b < self.t1))
        usd, secs = 0.0, 0.0
        for a, b, revoked in self.billed:
            if b <= a:
                continue
            usd += job.billing.charge(job.price, a, b, revoked=revoked)
            secs += b - a
        return usd, secs, len(self.billed)


def estimate(job: ChurnJob, *, seed: int = 0, replications: int = 8, span_s: float | None = None,
             offsets: bool = False) -> ChurnEstimate | None:
    """Expected time, cost and ``E[1/y]`` of ``job`` (module docstring); None when no history finishes
    (the market offers no capacity for the job within its path)."""
    steps = min(job.iterations, MAX_ROUNDS)
    scale = job.iterations / steps
    reps = max(1, int(replications))
    rng = np.random.default_rng([int(seed), 29])
    span = float(span_s) if span_s is not None else job.horizon_s
    times, wcost, invs, secs, insts, revs, idles, aborts = [], [], [], [], [], [], [], []
    stuck = 0
    od = _on_demand(job.billing)
    for i in range(reps):
        t0 = 0.0
        if offsets and reps > 1:
            t0 = max(0.0, job.horizon_s - span) * i / (reps - 1)
        h = _History(job, rng, t0, span if not job.model.is_iteration_driven else math.inf)
        out = h.run(steps)
        if out is None and not job.model.is_iteration_driven and t0 + span < job.horizon_s:
            h = _History(job, rng, t0, job.horizon_s)  # the short path ran out: the whole market
            out = h.run(steps)
        if out is None:
            stuck += 1
            continue
        t_end, inv, _ = out
        usd, up, n_inst = h.close(t_end)
        times.append((t_end - t0) * scale)
        wcost.append(usd * scale)
        invs.append(inv / steps)
        secs.append(up * scale)
        insts.append(job.workers + (n_inst - job.workers) * scale)
        revs.append(h.revocations * scale)
        idles.append(h.idle * scale)
        aborts.append(h.aborted * scale)
    if not times:
        return None
    T = float(np.mean(times))
    coord = float(np.mean([od.charge(job.coordinator_price, 0.0, x) for x in times]))
    return ChurnEstimate(job.workers, job.iterations, T, float(np.mean(wcost)), coord, float(np.mean(invs)),
                         float(np.mean(secs)), float(np.mean(insts)), float(np.mean(revs)), float(np.mean(idles)),
                         float(np.mean(aborts)), len(times), float(np.std(times)), stuck)


def has_churn(model: RevocationModel) -> bool:
    """Whether workers come and go on this market (anything but :class:`NoRevocation`)."""
    return not isinstance(model, NoRevocation)


__all__ = ["ChurnEstimate", "ChurnJob", "estimate", "has_churn", "MAX_ROUNDS"]
