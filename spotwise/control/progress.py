"""Whether a market lets a job make progress: mini-batch survival, the up-front check, the fix.

A spec whose workers cannot outlive one mini-batch is refused before any worker starts
(:func:`check_progress_possible`, :class:`~spotwise.errors.InfeasibleError`); a run that stops
committing steps at run time ends with :class:`NoProgressError` (status ``no-progress``).  Both say
how to fix the market (:func:`progress_fix`).  Issue 7 item 17.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from spotwise.config import JobSpec
from spotwise.errors import InputError, InfeasibleError
from spotwise.events import RunSummary
from spotwise.market.preemption import (
    BernoulliRevocation,
    BidRevocation,
    ExponentialLifetime,
    LifetimeRevocation,
    RevocationModel,
)
from spotwise.market.job_market import Market

#: below this chance that a round commits (more than 1000 attempts per step) a spec is refused
MIN_ROUND_SUCCESS = 1e-3


def mini_batch_survival(model: RevocationModel, mean_step_s: float, straggler: float) -> float | None:
    """P(a worker that starts a mini-batch is not revoked before it finishes); ``None`` if unknown.

    The mini-batch lasts ``r = m ((1 - s) + s E)``, ``E ~ Exp(1)`` (the controller's runtime model,
    ``papers/000_3c734f3ffedcac15.txt`` eq. 14 for ``s = 1``).  Exponential lifetimes (mean
    ``mttf``): ``exp(-m (1 - s) / mttf) / (1 + m s / mttf)`` (a lifetime cap is ignored, which
    only overestimates survival).  Empirical lifetimes ``L`` (paper 002): the mean over the table
    of ``P(r < L)``.  Bernoulli (per iteration): ``1 - q``.  Bid and trace markets, and scripted
    ones: ``None`` (their capacity is not a lifetime distribution).
    """
    m, s = float(mean_step_s), float(straggler)
    if isinstance(model, ExponentialLifetime):
        mttf = float(model.mttf_s)
        return math.exp(-m * (1.0 - s) / mttf) / (1.0 + m * s / mttf)
    if isinstance(model, LifetimeRevocation):
        life = np.minimum(np.asarray(model.lifetimes_s, dtype=float), float(model.cap_s))
        lo = m * (1.0 - s)
        if s == 0.0:
            return float(np.mean(life > m))
        with np.errstate(over="ignore"):
            p = np.where(life > lo, 1.0 - np.exp(-(life / m - (1.0 - s)) / s), 0.0)
        return float(np.mean(p))
    if isinstance(model, BernoulliRevocation):
        return 1.0 - float(model.q)
    return None


def progress_fix(market: Market, mean_step_s: float) -> str:
    """How to make a market in which no step commits usable (the fix half of the error message)."""
    model = market.revocation
    m = f"{mean_step_s:.3g} s"
    if isinstance(model, ExponentialLifetime):
        return (f"raise market.revocation.mttf_s (now {model.mttf_s:g} s) well above a step's {m} (e.g. >= {10 * mean_step_s:.3g}), "
                "or shorten workload.step_time_s / use a faster cluster.instance_type")
    if isinstance(model, LifetimeRevocation):
        return (f"use a lifetime table (market.revocation.lifetimes) of instances that live longer than a step's {m}, "
                "or shorten workload.step_time_s / use a faster cluster.instance_type")
    if isinstance(model, BernoulliRevocation):
        return f"lower market.revocation.q (now {model.q:g}) well below 1"
    if isinstance(model, BidRevocation):
        return f"raise cluster.bids so that workers keep their capacity for more than a step's {m} (see `spotwise plan`)"
    return f"use a market whose workers live longer than a step's {m}, or shorten workload.step_time_s"


def check_progress_possible(spec: JobSpec, market: Market) -> None:
    """Refuse a spec whose workers cannot outlive a mini-batch (issue 7 item 17, up-front half).

    A round commits when at least one of ``max_workers`` workers finishes its mini-batch before
    it is revoked: ``1 - (1 - p)^n`` with ``p`` from :func:`mini_batch_survival`.  Below
    :data:`MIN_ROUND_SUCCESS` (more than 1000 attempts per step on average) the run could not make
    progress, so this raises :class:`InfeasibleError` (CLI exit 2) naming the parameter to change.
    Markets whose survival is not a known distribution pass (the runtime detection covers them).
    """
    cl = spec.cluster
    m = market.step_seconds(spec.workload.family, float(spec.workload.step_time_s))
    p = mini_batch_survival(market.revocation, m, float(cl.straggler))
    if p is None:
        return
    n = max(cl.workers, cl.max_workers or cl.workers)
    p_round = 1.0 - (1.0 - p) ** n
    if p_round >= MIN_ROUND_SUCCESS:
        return
    model = market.revocation
    if isinstance(model, ExponentialLifetime):
        life = f"a mean worker lifetime of mttf_s={model.mttf_s:g} s"
    elif isinstance(model, LifetimeRevocation):
        life = f"worker lifetimes of {model.capped_mean_s:.3g} s on average"
    else:
        life = f"a per-iteration revocation probability q={getattr(model, 'q', float('nan')):g}"
    odds = f"about 1 in {1.0 / p_round:.3g}" if p_round > 0 else "never"
    raise InfeasibleError(
        f"the market makes progress impossible: {life} against about {m:.3g} s of virtual time per mini-batch; "
        f"a round of {n} worker(s) commits {odds}", progress_fix(market, m), "market.revocation")


def diverged_error(what: str, step: int) -> InputError:
    """The exit-2 error of a run stopped because step ``step + 1``'s loss or gradient is not finite."""
    return InputError(f"{what} at step {step + 1}: training diverged; the run stopped and its checkpoint holds step "
                      f"{step}, the last good one", "lower the learning rate (workload.lr or workload.optimizer.lr), add a "
                      "warm-up (workload.schedule.warmup) or gradient clipping (workload.grad_clip_norm: 1.0), or use "
                      "precision: fp32", "workload")


class NoProgressError(InfeasibleError):
    """The run was stopped because it cannot commit steps (status ``no-progress``; CLI exit 2).

    ``summary`` is the :class:`RunSummary` the run wrote before stopping (``summary.json``).
    """

    def __init__(self, what: str, fix: str, summary: RunSummary) -> None:
        super().__init__(what, fix, "spotwise run")
        self.summary = summary


@dataclass
class StallCounter:
    """Workers lost (market, node loss) since the last commit, in all, and commits this session: when
    a run is stuck (the job controller's *no progress*)."""

    lost_since_commit: int = 0
    losses_total: int = 0
    commits: int = 0

    def __post_init__(self) -> None:
        for name in ("lost_since_commit", "losses_total", "commits"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValueError(f"{name} must be an integer >= 0, got {v!r}")

    def committed(self) -> None:
        self.lost_since_commit = 0
        self.commits += 1

    def lost(self) -> None:
        self.lost_since_commit += 1
        self.losses_total += 1

    def limit(self, attempts: int, max_workers: int) -> int:
        """Failed attempts without a commit that mark a run as stuck: ``max(attempts, 5 * max_workers,
        10 * losses per commit so far)``."""
        settled = self.losses_total - self.lost_since_commit
        per_commit = settled / self.commits if self.commits else 0.0
        return max(int(attempts), 5 * int(max_workers), int(math.ceil(10.0 * per_commit)))
