"""How the spec's job runs, step by step, as the planner models it.

The runtime model's sync mode for the spec's ``cluster.sync`` (:func:`_sync`, :func:`_n_sync`), the
mean seconds per committed step (:func:`_round_mean`: ``papers/000_3c734f3ffedcac15.txt`` eq. (14)-(15)
for barrier modes, the renewal rate for continuous ones), the mini-batches a step commits
(:func:`_contributions`), Corollary 2's iterations capped at the target (:func:`_iterations_to`), and
the spec's own strategy priced on its market's churn (:func:`_has_churn`, :func:`_churn`;
:mod:`spotwise.planner.estimate.churn`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from spotwise.config import JobSpec
from spotwise.errors import InfeasibleError
from spotwise.market.series import StepSeries
from spotwise.market.job_market import Market
from spotwise.planner.plan.records import Inputs
from spotwise.theory.bounds import ErrorModel, iterations_for_error
from spotwise.theory.runtime import RuntimeModel


def _sync(spec: JobSpec) -> str:
    """The runtime model's sync mode; the asynchronous PS is N-batch-sync with N = 1 (one update per mini-batch)."""
    return {"full": "full", "n-sync": "n-sync", "n-batch": "n-batch", "async": "n-batch",
            # a serverless spec's VM rows run fully-synchronous (its functions are priced by spotwise.planner.plan.serverless)
            "bsp": "full", "ssp": "full", "isp": "full",
            # the collective plane: S-SGD is fully synchronous; S-MA is planned as fully synchronous
            # per mini-batch (an upper bound on its time: it waits once per local_steps mini-batches)
            "ssgd": "full", "sma": "full", "adpsgd": "full"}[spec.cluster.sync]


def _round_mean(runtime: RuntimeModel, y: int, sync: str, n_sync: int | None) -> float:
    """Mean seconds per committed step with ``y`` active workers.

    Barrier modes: paper 000 eq. (14)-(15) (:meth:`RuntimeModel.expected`).  Continuous modes (``n-batch``;
    the asynchronous PS is ``N = 1``): the workers never wait, each finishes a mini-batch every
    ``E[r] + Delta`` seconds (it restarts after the commit), so by the renewal-reward theorem ``y``
    workers commit a step of ``N`` mini-batches every ``N (E[r] + Delta) / y`` seconds in the long run
    (eq. 42's ``N / (y mu)`` for exponential times, with the overhead); the time to the first ``N``
    completions from a common start, which :meth:`RuntimeModel.expected` gives for non-exponential
    times, is only the first step's.
    """
    if sync != "n-batch":
        return float(runtime.expected(y, sync, n_sync))  # type: ignore[arg-type]
    mean_r = 1.0 / float(runtime.mu) if runtime.kind == "exponential" else float(np.mean(runtime.samples))  # type: ignore[arg-type]
    return float(n_sync or 1) * (mean_r + float(runtime.delta)) / max(1, int(y))


def _contributions(spec: JobSpec) -> int:
    """Mini-batches a committed step holds with all workers active: ``n`` (fully synchronous), ``N``
    (N-sync, N-batch; paper 000 Thm 5-6 use ``E[1/y] = 1/N``), 1 (the asynchronous PS); the error
    recursion of a run adds ``1 / contributions`` per step (Thm 1, eq. 10)."""
    n = spec.cluster.workers
    if spec.cluster.kind == "serverless":
        return n
    if spec.cluster.sync == "async":
        return 1
    if spec.cluster.sync in ("n-sync", "n-batch") and spec.cluster.sync_n:
        return min(n, int(spec.cluster.sync_n))
    return n


def _iterations_to(eps: float, model: ErrorModel, inv_y: float, spec: JobSpec) -> int:
    """Corollary 2's iterations for ``eps``, capped at ``target.iterations`` (a run stops at whichever target
    comes first); with a cap, a loss the run cannot reach runs the cap."""
    cap = spec.expected_iterations()
    try:
        J = iterations_for_error(eps, model, inv_y=inv_y)
    except InfeasibleError:
        if cap is None:
            raise
        return int(cap)
    return J if cap is None else min(J, int(cap))


def _has_churn(spec: JobSpec, market: Market) -> bool:
    """Whether the spec's own workers come and go (any revocation model but none; a bid market only
    with the spec's bids)."""
    from spotwise.planner.estimate.churn import has_churn

    return spec.cluster.kind != "serverless" and has_churn(market.revocation)


def _churn(inp: Inputs, spec: JobSpec, n: int, J: int) -> Any:
    """The :class:`~spotwise.planner.estimate.churn.ChurnEstimate` of ``n`` workers for ``J`` steps on the spec's
    market (cached per inputs); :class:`InfeasibleError` when the market never lets it finish."""
    from spotwise.planner.estimate.churn import ChurnJob, estimate

    key = (int(n), int(J))
    if key in inp.churn_cache:
        return inp.churn_cache[key]
    mk = inp.market
    sync, n_sync = _sync(spec), _n_sync(spec)
    cont: tuple[float, ...] = ()
    if sync == "n-batch":
        cont = (0.0,) + tuple(_round_mean(inp.runtime, y, sync, n_sync) for y in range(1, n + 1))
    series = mk.prices
    price: float | StepSeries = series if series.max() > series.min() else float(series.values[0])
    m = mk.step_seconds(spec.workload.family, float(spec.workload.step_time_s))
    from spotwise.theory.runtime import MiniBatchTimeLaw

    job = ChurnJob(int(n), int(J), MiniBatchTimeLaw(m, float(spec.cluster.straggler)), float(spec.cluster.sync_overhead_s),
                   sync, n_sync, mk.revocation, price, inp.coordinator_price, mk.billing, float(mk.horizon_s), cont)
    reps = 16 if J <= 5000 else 8
    est = estimate(job, seed=spec.seed, replications=reps, span_s=min(float(mk.horizon_s), max(4 * inp.deadline, 3600.0)),
                   offsets=not mk.revocation.needs_rng)
    if est is None:
        raise InfeasibleError(f"the market never gives {n} worker(s) enough capacity to finish {J} steps within its "
                              f"{mk.horizon_s:.0f} s", "use a market with more capacity (bids, lifetimes, traces)",
                              "market.revocation")
    inp.churn_cache[key] = est
    return est


def _n_sync(spec: JobSpec) -> int | None:
    if spec.cluster.kind == "serverless":
        return None
    return 1 if spec.cluster.sync == "async" else spec.cluster.sync_n
