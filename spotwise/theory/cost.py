"""Expected completion time (with idle time) and expected cost of a synchronous SGD job.

``papers/000_3c734f3ffedcac15.txt`` Sec. III-C, IV and V.  Model (the paper's):

* Spot prices ``p`` are i.i.d. with CDF ``F``; a worker bidding ``b`` is active iff ``p <= b`` and
  then pays the spot price ``p`` (not its bid) per unit time.  The price does not change within an
  iteration (Sec. IV-B).  ``PM(b) = E[p 1{p <= b}] = int_low^b p f(p) dp`` is the *partial mean*.
* The job runs when at least one worker is active (the top bid ``b_1`` is honoured,
  probability ``F(b_1)``); "iterations" with 0 active workers are not counted (Sec. III-A).
* **Idle time** (Lemma 1): the fraction of wall-clock time during which the job runs equals
  ``F(b_1)``, so ``E[tau] = J E[R | running] / F(b_1)``.  (This is exact when the price is redrawn
  once per iteration-length slot -- prices i.i.d. per slot; with prices redrawn every ``delta``
  seconds while idle the idle part would instead be ``J delta (1-F)/F``.)

Lemma 1, eq. (16): identical bids ``b`` for ``n`` workers: ``E[tau] = J E[R(n)] / F(b)``.

Lemma 2, eq. (17): ``E[C] = J n E[R(n)] (low + int_low^b (1 - F(p)/F(b)) dp)
= J n E[R(n)] PM(b) / F(b)`` (integration by parts, Appendix proof of Lemma 2).

Heterogeneous bids (eq. (18), (20), (35)-(36), (41)-(43)): with bids sorted
``b_(1) >= ... >= b_(n)``, ``y = k`` active workers when ``b_(k+1) < p <= b_(k)``::

    E[R | running] = sum_k E[R(k)] (F(b_(k)) - F(b_(k+1))) / F(b_(1))
    E[tau]         = J E[R | running] / F(b_(1))
    E[C]           = J sum_k k E[R(k)] (PM(b_(k)) - PM(b_(k+1))) / F(b_(1))
    E[1/y]         = sum_k (1/k) (F(b_(k)) - F(b_(k+1))) / F(b_(1))

(Two bids: ``n_h`` workers at ``b_h``, ``n - n_h`` at ``b_l``.)

Sec. V, preemptible instances at a fixed price ``pi`` per worker-second, each of ``n`` workers
preempted independently with probability ``q`` per iteration: ``y ~ Bin(n, 1-q) | y >= 1``,
``E[tau] = sum_j E[R(y_j)] / (1 - q^{n_j})`` (Sec. III-C example) and
``E[C] = pi sum_j E[y_j R(y_j)]`` (only active workers are billed).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol

import numpy as np
from scipy import integrate

from spotwise.errors import InputError
from spotwise.theory.workers import active_pmf_binomial

ArrayLike = float | np.ndarray


class PriceLaw(Protocol):
    """What the cost expressions need of a price distribution (``planner.bids.prices.PriceModel``)."""

    @property
    def low(self) -> float: ...

    def cdf(self, p: ArrayLike) -> ArrayLike: ...

    def partial_mean(self, b: ArrayLike) -> ArrayLike: ...


@dataclass(frozen=True)
class Expectation:
    """Expected time, cost and ``E[1/y | running]`` of a job (fields may be arrays when vectorised)."""

    time: ArrayLike
    cost: ArrayLike
    inv_y: ArrayLike
    p_run: ArrayLike  # probability that the job runs in a slot (F(b_1), or 1 - q^n)
    runtime: ArrayLike  # E[R | running], per iteration


# -------------------------------------------------------------------------------- Lemma 1, 2
def expected_time_uniform(J: float, runtime_n: float, F_b: ArrayLike) -> ArrayLike:
    """Lemma 1 / eq. (16): ``E[tau] = J E[R(n)] / F(b)`` (``inf`` if ``F(b) = 0``)."""
    with np.errstate(divide="ignore"):
        out = J * runtime_n / np.asarray(F_b, dtype=float)
    return float(out) if np.ndim(out) == 0 else out


def expected_cost_uniform(J: float, n: int, runtime_n: float, prices: PriceLaw, b: ArrayLike) -> ArrayLike:
    """Lemma 2 / eq. (17): ``E[C] = J n E[R(n)] PM(b) / F(b) = J n E[R(n)] E[p | p <= b]``."""
    F = np.asarray(prices.cdf(b), dtype=float)
    pm = np.asarray(prices.partial_mean(b), dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(F > 0, J * n * runtime_n * pm / np.where(F > 0, F, 1.0), np.nan)
    return float(out) if np.ndim(out) == 0 else out


def expected_cost_uniform_eq17(J: float, n: int, runtime_n: float, prices: PriceLaw, b: float) -> float:
    """Lemma 2 evaluated literally as printed: ``J n E[R(n)] (low + int_low^b (1 - F(p)/F(b)) dp)``.

    Equal to :func:`expected_cost_uniform` for a continuous ``F`` with ``F(low) = 0`` (the proof's
    last step); kept to check that identity.
    """
    Fb = float(prices.cdf(b))
    val, _ = integrate.quad(lambda p: 1.0 - float(prices.cdf(p)) / Fb, prices.low, b, limit=200)
    return J * n * runtime_n * (prices.low + val)


# -------------------------------------------------------------------------------- heterogeneous bids
def bids_expectation(J: float, bids: np.ndarray, prices: PriceLaw, runtime_of_y: np.ndarray) -> Expectation:
    """Expected time/cost/``E[1/y]`` for per-worker bids (vectorised over leading axes of ``bids``).

    ``runtime_of_y[k]`` is ``E[R(k)]`` for ``k = 0..n`` (``inf`` where ``k`` active workers cannot
    finish an iteration, e.g. ``k < N`` in N-sync); a bid vector that gives such a ``k`` positive
    probability raises :class:`InputError`.
    """
    b = np.sort(np.asarray(bids, dtype=float), axis=-1)[..., ::-1]
    n = b.shape[-1]
    R = np.asarray(runtime_of_y, dtype=float)
    if R.shape != (n + 1,):
        raise InputError(f"runtime_of_y must have n+1 = {n + 1} entries", where="bids_expectation")
    F = np.asarray(prices.cdf(b), dtype=float)
    PM = np.asarray(prices.partial_mean(b), dtype=float)
    zeros = np.zeros(b.shape[:-1] + (1,))
    prob = F - np.concatenate([F[..., 1:], zeros], axis=-1)
    pm = PM - np.concatenate([PM[..., 1:], zeros], axis=-1)
    k = np.arange(1, n + 1, dtype=float)
    Rk = R[1:]
    bad = (prob > 1e-15) & ~np.isfinite(Rk)
    if np.any(bad):
        kk = int(k[np.nonzero(np.any(bad.reshape(-1, n), axis=0))[0][0]])
        raise InputError(f"these bids leave only {kk} workers active at some prices, too few to finish an iteration",
                         "give the N (N-sync) highest-bidding workers the same bid", "bids")
    Rk = np.where(np.isfinite(Rk), Rk, 0.0)
    F1 = F[..., 0]
    safe = np.where(F1 > 0, F1, 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        run = np.sum(prob * Rk, axis=-1) / safe
        time = np.where(F1 > 0, J * run / safe, np.inf)
        cost = np.where(F1 > 0, J * np.sum(k * Rk * pm, axis=-1) / safe, np.nan)
        inv = np.where(F1 > 0, np.sum(prob / k, axis=-1) / safe, np.nan)
    sq = (lambda a: float(a) if np.ndim(a) == 0 else a)
    return Expectation(sq(time), sq(cost), sq(inv), sq(F1), sq(run))


def two_bid_expectation(J: float, n: int, n_high: int, b_high: ArrayLike, b_low: ArrayLike, prices: PriceLaw,
                        runtime_n: float, runtime_high: float) -> Expectation:
    """Two bids (paper 000 Sec. IV-B1, eq. (18), (20), proof sketch of Thm 4), vectorised.

    ``gamma = F(b_l)/F(b_h)``; ``E[1/y] = (1-gamma)/n_h + gamma/n``;
    ``E[R | running] = (1-gamma) E[R(n_h)] + gamma E[R(n)]``;
    ``E[C] = J (n_h E[R(n_h)] (PM(b_h) - PM(b_l)) + n E[R(n)] PM(b_l)) / F(b_h)``.
    ``b_low`` must be ``<= b_high`` (``-inf``: the low group is never active).
    """
    if not (1 <= n_high < n):
        raise InputError(f"two bids need 1 <= n_high < n, got n_high={n_high}, n={n}", where="two bids")
    bh = np.asarray(b_high, dtype=float)
    bl = np.asarray(b_low, dtype=float)
    if np.any(bl > bh):
        raise InputError("the low bid must not exceed the high bid", where="two bids")
    Fh = np.asarray(prices.cdf(bh), dtype=float)
    Fl = np.where(np.isneginf(bl), 0.0, np.asarray(prices.cdf(np.where(np.isneginf(bl), bh, bl)), dtype=float))
    PMh = np.asarray(prices.partial_mean(bh), dtype=float)
    PMl = np.where(np.isneginf(bl), 0.0, np.asarray(prices.partial_mean(np.where(np.isneginf(bl), bh, bl)), dtype=float))
    safe = np.where(Fh > 0, Fh, 1.0)
    gamma = Fl / safe
    run = (1 - gamma) * runtime_high + gamma * runtime_n
    with np.errstate(divide="ignore", invalid="ignore"):
        time = np.where(Fh > 0, J * run / safe, np.inf)
        cost = np.where(Fh > 0, J * (n_high * runtime_high * (PMh - PMl) + n * runtime_n * PMl) / safe, np.nan)
    inv = (1 - gamma) / n_high + gamma / n
    sq = (lambda a: float(a) if np.ndim(a) == 0 else a)
    return Expectation(sq(time), sq(cost), sq(inv), sq(Fh), sq(run))


# -------------------------------------------------------------------------------- Sec. V
def preemptible_expectation(J: int, n: int, q: float, price: float, runtime_of_y: np.ndarray) -> Expectation:
    """Sec. V: ``n`` preemptible workers at a fixed ``price``, each preempted w.p. ``q`` per iteration.

    ``runtime_of_y[k] = E[R(k)]`` for ``k = 0..n``.  ``y ~ Bin(n, 1-q) | y >= 1``;
    ``E[tau] = J E[R(y)] / (1 - q^n)``, ``E[C] = price J E[y R(y)]``, ``E[1/y]`` exact.
    """
    if not (0 <= q < 1):
        raise InputError(f"the preemption probability q must lie in [0, 1), got {q!r}", where="preemptible workers")
    if price < 0:
        raise InputError("price must be >= 0", where="preemptible workers")
    pmf = active_pmf_binomial(n, 1.0 - q)
    R = np.asarray(runtime_of_y, dtype=float)[1 : n + 1]
    k = np.arange(1, n + 1, dtype=float)
    Rk = np.where(pmf > 0, R, 0.0)
    if np.any((pmf > 1e-15) & ~np.isfinite(R)):
        raise InputError("some likely numbers of active workers cannot finish an iteration (N-sync with y < N)",
                         "provision more workers or lower N", "preemptible workers")
    p_run = 1.0 - q**n
    run = float(np.sum(pmf * Rk))
    return Expectation(J * run / p_run, price * J * float(np.sum(pmf * k * Rk)), float(np.sum(pmf / k)), p_run, run)


def runtime_table(n: int, expected: Callable[[int, str, int | None], float], sync: str = "full",
                  n_sync: int | None = None) -> np.ndarray:
    """``[E[R(0)], E[R(1)], ..., E[R(n)]]`` from ``expected(y, sync, n_sync)`` (``inf`` where undefined)."""
    out = np.full(n + 1, np.inf)
    for y in range(1, n + 1):
        if sync == "n-sync" and n_sync is not None and y < n_sync:
            continue
        out[y] = expected(y, sync, n_sync)
    return out
