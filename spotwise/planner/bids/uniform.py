"""One bid for every worker: paper 000 Thm 3 (``papers/000_3c734f3ffedcac15.txt``).

:func:`thm3_bid` is the one place ``b* = F^-1(J E[R] / theta)`` is computed (the planner, the
dynamic-bids policy and the sweep's bid rule all call it); :func:`optimal_uniform_bid` is the Thm 3
planner for ``n`` workers and any sync mode, and minimises the same Lemma 1-2 objective over a
trace's price levels when prices are not i.i.d.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from spotwise.planner.bids.plans import (
    _TOL,
    BidPlan,
    Method,
    _candidate_bids,
    _check_common,
    _check_sync,
    _deadline_infeasible,
    _inv_y,
    bid_at_level,
)
from spotwise.planner.bids.prices import PriceModel
from spotwise.theory.bounds import ErrorModel, error_bound, iterations_for_error
from spotwise.theory.cost import expected_cost_uniform, expected_time_uniform
from spotwise.theory.runtime import RuntimeModel, SyncMode


@dataclass(frozen=True)
class Thm3Bid:
    """Paper 000 Thm 3's uniform bid for ``J`` iterations of mean time ``E[R]`` within ``theta``.

    ``level = F(b*) = J E[R] / theta`` (``inf`` when no time is left); above 1 the deadline is
    shorter than the uninterrupted runtime ``J E[R]`` and no bid meets it (:attr:`feasible` is
    False; ``bid`` is then the top of the price range, never interrupted).
    """

    level: float
    bid: float

    @property
    def feasible(self) -> bool:
        return self.level <= 1.0 + _TOL


def thm3_bid(prices: PriceModel | Callable[[float], float], iterations: float, mean_round_s: float,
             deadline_s: float) -> Thm3Bid:
    """``b* = F^-1(J E[R] / theta)`` (``papers/000_3c734f3ffedcac15.txt`` Thm 3): the one place it is computed.

    ``prices`` is a :class:`PriceModel` (inverted by :func:`bid_at_level`) or any quantile function
    ``q -> F^-1(q)`` on ``[0, 1]`` (the dynamic-bids policy's price description).  Used by
    :func:`optimal_uniform_bid` (and the uniform starting points of Thm 5-6), the planner's
    one-bid and dynamic strategies, and the dynamic-bids policy (``J`` and ``theta`` the remaining
    iterations and time).  Pure: no validation beyond ``deadline_s <= 0`` meaning no time left.
    """
    level = iterations * mean_round_s / deadline_s if deadline_s > 0 else math.inf
    q = min(max(level, 0.0), 1.0)
    bid = bid_at_level(prices, q) if isinstance(prices, PriceModel) else float(prices(q))
    return Thm3Bid(float(level), bid)


# ===================================================================================== Thm 3
def optimal_uniform_bid(prices: PriceModel, runtime: RuntimeModel, model: ErrorModel, *, n: int, eps: float,
                        deadline: float, sync: SyncMode = "full", n_sync: int | None = None) -> BidPlan:
    """Paper 000 Thm 3: one bid for all ``n`` workers, ``b* = F^-1(phi^-1(eps) E[R(n)] / theta)``.

    ``J = phi^-1(eps)`` with ``E[1/y] = 1/n`` (full sync: all ``n`` workers are active whenever the
    job runs) or ``1/N`` (N-sync / N-batch-sync, below eq. (10)); ``E[R(n)]`` from ``runtime`` for
    the sync mode (Thm 3 holds for any runtime distribution).  Cost is non-decreasing and time
    non-increasing in ``b`` (Lemma 1-2), so the optimum makes the deadline tight.

    Raises :class:`InfeasibleError` if ``eps`` is below the error floor, or if
    ``theta < J E[R(n)]`` (the uninterrupted runtime), naming the minimum feasible deadline.
    With a trace (``iid=False``) the same objective is minimised over the trace's price levels.
    """
    _check_common(n, eps, deadline)
    _check_sync(sync, n, n_sync)
    inv_y = _inv_y(sync, n, n_sync)
    J = iterations_for_error(eps, model, inv_y=inv_y)
    R = runtime.expected(n, sync, n_sync)
    thm3 = thm3_bid(prices, J, R, deadline)
    if not thm3.feasible:
        raise _deadline_infeasible(deadline, J * R, f"J E[R(n)] = {J} x {R:.6g}s")
    notes: list[str] = []
    if runtime.kind == "empirical":
        notes.append("E[R(n)] estimated from the empirical runtime samples; Thm 3 holds for any runtime law")
    if prices.iid:
        b = thm3.bid
        method: Method = "closed-form"
    else:
        notes.append("prices come from a trace (not i.i.d.): Thm 3's closed form does not apply; minimised "
                     "the same Lemma 1-2 objective over the trace's price levels (autocorrelation not modelled)")
        cand = _candidate_bids(prices, 1_000_000)  # every distinct level of the trace
        t = np.asarray(expected_time_uniform(J, R, prices.cdf(cand)))
        c = np.asarray(expected_cost_uniform(J, n, R, prices, cand))
        c = np.where(t <= deadline * (1 + _TOL), c, np.inf)
        if not np.any(np.isfinite(c)):  # pragma: no cover - level <= 1 means the top level is feasible
            raise _deadline_infeasible(deadline, J * R, f"J E[R(n)] = {J} x {R:.6g}s")
        b = float(cand[int(np.argmin(c))])
        method = "numerical"
    F = float(prices.cdf(b))
    return BidPlan("uniform" if sync == "full" else f"uniform/{sync}", (b,) * n, n, J,
                   float(expected_cost_uniform(J, n, R, prices, b)), float(expected_time_uniform(J, R, F)),
                   float(error_bound(J, model, inv_y)), inv_y, method, notes=tuple(notes))
