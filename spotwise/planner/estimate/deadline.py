"""The probability that a plan meets its deadline, not just its expected completion time.

``papers/000_3c734f3ffedcac15.txt`` Lemma 1 gives ``E[tau] = J E[R | running] / F(b_1)`` and
Thm 3 makes that *expectation* equal to the deadline ``theta`` -- so under the paper's own model
the job is late about half the time.  This module puts the distribution back.

Model (the planner's price model, with the time scale of its prices)
--------------------------------------------------------------------
* **Work.**  The job needs ``W = sum_{j=1}^J R_j`` seconds of running time, ``R_j`` i.i.d. with
  mean ``m = E[R | running]`` and variance ``v`` (eq. (14)-(15) order statistics,
  :meth:`spotwise.theory.runtime.RuntimeModel.variance`).  By the central limit theorem
  ``W ~ N(J m, J v)`` (J is in the hundreds or more for any real job).
* **Availability.**  Prices are constant over *epochs* of ``Delta`` seconds and i.i.d. across
  epochs (paper 000 Sec. VI redraws the price every few seconds; a synthetic market redraws it every
  ``market.synthetic.interval_s``).  The job's capacity is up in an epoch with probability
  ``p = F(b_1)`` and the job progresses only while it is up (work is kept across outages:
  checkpoint/restore or persistent requests).  The job finishes in its ``M = ceil(W/Delta)``-th
  up-epoch, after ``K ~ NegBin(M, p)`` down epochs (failures before the M-th success), so::

      tau = W + Delta K,      E[tau] ~= W / p  (Lemma 1 when Delta = E[R])

  and, conditioning on ``W`` and integrating it out by Gauss-Hermite quadrature::

      P(tau <= theta) = E_W[ P(K <= floor((theta - W) / Delta)) ],   K | W ~ NegBin(ceil(W/Delta), p)

  (exact given the epoch model; the only approximation is the CLT for ``W``).  Several phases
  (the dynamic strategy) are independent: their ``tau`` are summed by a seeded Monte Carlo of the
  same model (:func:`phases_deadline_probability`).
* **Traces.**  A real trace is autocorrelated.  :func:`effective_epoch` maps it to the epoch model
  by matching run lengths: i.i.d. epochs of length ``Delta`` have mean up-run ``U = Delta/(1-p)``
  and mean down-run ``D = Delta/p``, so ``Delta = U D / (U + D)`` is read off the mean up- and
  down-runs of the bid on the trace's history.  Long outages (large ``D``) give a large ``Delta``
  and a wide spread of ``tau``.

Failure behaviour: invalid arguments raise :class:`ValueError` (these are internal quantities
computed by the planner, not user input); ``p = 0`` gives probability 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy import stats

from spotwise.market.series import StepSeries

_GH_NODES = 96
#: Monte Carlo samples for several phases: standard error <= 0.5/sqrt(50000) ~ 0.002
MC_SAMPLES = 50_000


@lru_cache(maxsize=4)
def _gauss_hermite(nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """Probabilists' Gauss-Hermite nodes and normalised weights (weight ``exp(-x^2/2)``)."""
    x, w = np.polynomial.hermite_e.hermegauss(nodes)
    return x, w / w.sum()


@dataclass(frozen=True)
class Phase:
    """One stretch of a job with a constant availability law (see the module docstring).

    ``iterations`` J, per-iteration running time mean ``run_mean`` and variance ``run_var``
    (seconds, seconds^2), ``p_up`` the probability the job's capacity is up in an epoch, and
    ``epoch_s`` the epoch length Delta.
    """

    iterations: int
    run_mean: float
    run_var: float
    p_up: float
    epoch_s: float

    def __post_init__(self) -> None:
        if int(self.iterations) != self.iterations or self.iterations < 0:
            raise ValueError(f"iterations must be an integer >= 0, got {self.iterations!r}")
        if not (math.isfinite(self.run_mean) and self.run_mean > 0):
            raise ValueError(f"run_mean must be finite and > 0, got {self.run_mean!r}")
        if not (math.isfinite(self.run_var) and self.run_var >= 0):
            raise ValueError(f"run_var must be finite and >= 0, got {self.run_var!r}")
        if not (0.0 <= self.p_up <= 1.0):
            raise ValueError(f"p_up must lie in [0, 1], got {self.p_up!r}")
        if not (math.isfinite(self.epoch_s) and self.epoch_s > 0):
            raise ValueError(f"epoch_s must be finite and > 0, got {self.epoch_s!r}")

    def sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        """Completion times of this phase drawn from the model (CLT work, negative-binomial outages)."""
        if self.iterations == 0:
            return np.zeros(size)
        if self.p_up <= 0:
            return np.full(size, math.inf)
        W = np.maximum(rng.normal(self.iterations * self.run_mean, math.sqrt(self.iterations * self.run_var), size), 1e-12)
        if self.p_up >= 1:
            return W
        M = np.ceil(W / self.epoch_s - 1e-12).astype(np.int64)
        return W + self.epoch_s * rng.negative_binomial(np.maximum(M, 1), self.p_up)


def deadline_probability(J: int, run_mean: float, run_var: float, p_up: float, epoch_s: float, deadline: float) -> float:
    """``P(tau <= deadline)`` for one phase (module docstring: exact negative binomial given the
    work, Gauss-Hermite quadrature over the CLT law of the work)."""
    ph = Phase(int(J), float(run_mean), float(run_var), float(p_up), float(epoch_s))
    if not math.isfinite(deadline):
        return 1.0
    if ph.iterations == 0:
        return 1.0 if deadline >= 0 else 0.0
    if ph.p_up <= 0:
        return 0.0
    mean_w = ph.iterations * ph.run_mean
    sd_w = math.sqrt(ph.iterations * ph.run_var)
    if sd_w == 0:
        W = np.array([mean_w])
        weights = np.array([1.0])
    else:
        x, weights = _gauss_hermite(_GH_NODES)
        W = np.maximum(mean_w + sd_w * x, 1e-12)
    slack = deadline - W
    if ph.p_up >= 1:
        return float(np.sum(weights * (slack >= 0)))
    M = np.maximum(np.ceil(W / ph.epoch_s - 1e-12), 1.0)
    k = np.floor(slack / ph.epoch_s + 1e-12)
    with np.errstate(invalid="ignore"):
        cdf = np.where(k >= 0, stats.nbinom.cdf(np.maximum(k, 0), M, ph.p_up), 0.0)
    return float(min(1.0, max(0.0, np.sum(weights * cdf))))


def phases_deadline_probability(phases: list[Phase], deadline: float, samples: int = MC_SAMPLES, seed: int = 0) -> float:
    """``P(tau_1 + ... + tau_k <= deadline)`` for independent phases (seeded Monte Carlo of the model;
    one phase uses the quadrature of :func:`deadline_probability`)."""
    live = [p for p in phases if p.iterations > 0]
    if not live:
        return 1.0
    if len(live) == 1:
        p = live[0]
        return deadline_probability(p.iterations, p.run_mean, p.run_var, p.p_up, p.epoch_s, deadline)
    rng = np.random.default_rng(seed)
    total = np.zeros(samples)
    for p in live:
        total += p.sample(rng, samples)
    return float(np.mean(total <= deadline))


def effective_epoch(series: StepSeries, bid: float, fallback_s: float) -> float:
    """``Delta = U D / (U + D)`` from the mean up-run ``U`` and down-run ``D`` of ``price <= bid`` on
    ``series`` (run-length matching, module docstring); ``fallback_s`` when the bid is never or always
    honoured (the epoch length then does not matter) or the series has no weight."""
    t = np.append(series.times, series.end)
    dur = np.diff(t)
    up = series.values <= bid + 1e-12
    keep = dur > 0
    dur, up = dur[keep], up[keep]
    if dur.size == 0 or up.all() or not up.any():
        return float(fallback_s)
    change = np.flatnonzero(np.diff(up.astype(np.int8)) != 0) + 1
    starts = np.concatenate([[0], change])
    run_len = np.add.reduceat(dur, starts)
    run_up = up[starts]
    U = float(run_len[run_up].mean())
    D = float(run_len[~run_up].mean())
    return U * D / (U + D)


__all__ = ["Phase", "deadline_probability", "phases_deadline_probability", "effective_epoch", "MC_SAMPLES"]
