"""Bids for N-sync and N-batch-sync SGD: paper 000 Thm 5 and Thm 6 (``papers/000_3c734f3ffedcac15.txt``).

With exponential runtimes both theorems give equal bids at Thm 3's level (:func:`thm3_bid`);
where their assumptions fail (trace prices, empirical runtimes, server time ``delta > 0``) the same
objective is minimised numerically over the bid vector by :func:`_coordinate_descent`, a local search
on the bid grids of :func:`_candidates_fn` starting from the uniform bid.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

from spotwise.errors import InputError
from spotwise.planner.bids.plans import (
    _GRID,
    _TOL,
    BidPlan,
    Method,
    _candidate_bids,
    _check_common,
    _deadline_infeasible,
)
from spotwise.planner.bids.prices import PriceModel
from spotwise.planner.bids.uniform import thm3_bid
from spotwise.theory.bounds import ErrorModel, error_bound, iterations_for_error
from spotwise.theory.cost import bids_expectation, runtime_table
from spotwise.theory.runtime import RuntimeModel


# ===================================================================================== Thm 5, 6
def _coordinate_descent(evaluate: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]], x0: np.ndarray,
                        cands: Callable[[int, np.ndarray, int], np.ndarray], deadline: float) -> np.ndarray:
    """Minimise cost over bid vectors ``x`` (``x[0]`` the top bid) on candidate grids, coarse then fine.

    Moves: each coordinate alone, and each lower coordinate ``i`` *jointly* with the top bid
    (a 2-D grid over ``(x[0], x[i])``) -- a lower bid usually can only fall if the top bid rises to
    keep the deadline, which single-coordinate moves cannot find.  A local method: it returns a
    point no single or (top, i) pair move on the grids improves.
    """
    x = np.array(x0, dtype=float)
    c0, t0 = evaluate(x[None, :])
    best = float(c0[0]) if t0[0] <= deadline * (1 + _TOL) else math.inf

    def try_rows(X: np.ndarray) -> bool:
        nonlocal x, best
        c, t = evaluate(X)
        c = np.where(t <= deadline * (1 + _TOL), c, np.inf)
        j = int(np.argmin(c))
        if c[j] < best * (1 - 1e-12):
            x, best = X[j].copy(), float(c[j])
            return True
        return False

    for stage in (0, 1):
        for _ in range(60):
            improved = False
            for i in range(x.size):
                ci = cands(i, x, stage)
                X = np.repeat(x[None, :], ci.size, axis=0)
                X[:, i] = ci
                improved |= try_rows(X)
                if i > 0:
                    c0s = cands(0, x, stage)
                    A, Bm = np.meshgrid(c0s, ci, indexing="ij")
                    X = np.repeat(x[None, :], A.size, axis=0)
                    X[:, 0], X[:, i] = A.ravel(), Bm.ravel()
                    improved |= try_rows(X)
            if not improved:
                break
    return x


def _candidates_fn(prices: PriceModel) -> Callable[[int, np.ndarray, int], np.ndarray]:
    coarse = _candidate_bids(prices, _GRID)
    lv = prices.levels()

    def f(i: int, x: np.ndarray, stage: int) -> np.ndarray:
        if stage == 0 or lv is not None:
            return coarse if lv is None or stage == 0 else lv
        Fi = float(prices.cdf(x[i]))
        qs = np.clip(np.linspace(Fi - 2.0 / _GRID, Fi + 2.0 / _GRID, 201), 0.0, 1.0)
        return np.minimum(np.asarray(prices.ppf(qs), dtype=float), prices.upper)

    return f


def optimal_nsync_bids(prices: PriceModel, runtime: RuntimeModel, model: ErrorModel, *, n: int, n_sync: int, eps: float,
                       deadline: float, approx: bool = False) -> BidPlan:
    """Paper 000 Thm 5 (N-sync SGD, ``r ~ Exp(lambda)``): all bids equal,
    ``b = F^-1(phi^-1(eps, N) E[R(n)] / theta)``.

    The paper's setting: the ``N+1`` highest bids are equal (so ``y >= N+1`` whenever the job runs)
    and the ``n-N-1`` others may differ; ``J = phi^-1(eps, N)`` uses ``E[1/y] = 1/N``.  The paper
    writes ``E[R(n)] ~ log(n/(n-N))/lambda`` (``approx=True`` reproduces it); by default the exact
    ``(H_n - H_{n-N})/lambda + delta`` is used -- the proof (eq. (37)-(39)) only needs
    ``y E[R(y)]`` non-increasing in ``y``, which holds for both.

    Closed form iff prices are i.i.d., runtimes exponential and ``y E[R(y)]`` is non-increasing on
    ``[N+1, n]`` (always when ``delta = 0``; ``delta > 0`` can break it).  Otherwise the same
    objective (35) s.t. (36) is minimised numerically over the ``n-N`` free bids (single and pair
    moves on bid grids, from the uniform bid; a local method).
    """
    _check_common(n, eps, deadline)
    if int(n_sync) != n_sync or not (1 <= n_sync <= n - 1):
        raise InputError(f"N-sync bidding needs 1 <= N <= n-1 (N+1 workers share the top bid), got N={n_sync}, n={n}",
                         where="n_sync")
    N = int(n_sync)
    J = iterations_for_error(eps, model, inv_y=1.0 / N)
    Rtab = runtime_table(n, lambda y, s, k: runtime.expected(y, s, k, approx=approx), "n-sync", N)
    Rtab[:N + 1] = np.inf  # y <= N never happens: N+1 workers share the top bid
    Rn = float(Rtab[n])
    thm3 = thm3_bid(prices, J, Rn, deadline)
    if not thm3.feasible:
        raise _deadline_infeasible(deadline, J * Rn, f"J E[R(n)] = {J} x {Rn:.6g}s (N-sync, N={N})")
    ys = np.arange(N + 1, n + 1)
    yR = ys * Rtab[N + 1:]
    monotone = bool(np.all(np.diff(yR) <= 1e-12 * np.abs(yR[:-1])))
    closed = prices.iid and runtime.kind == "exponential" and monotone
    notes: list[str] = []
    if approx:
        notes.append("E[R(y)] uses the paper's approximation log(y/(y-N))/lambda")
    b_uniform = thm3.bid
    if closed:
        bids = np.full(n, b_uniform)
        method: Method = "closed-form"
    else:
        if not prices.iid:
            notes.append("prices come from a trace (not i.i.d.): Thm 5 does not apply")
        if runtime.kind != "exponential":
            notes.append("runtimes are empirical, not exponential: Thm 5 does not apply")
        elif not monotone:
            notes.append("y E[R(y)] increases with y (server time delta > 0): the proof of Thm 5 (eq. (39)) fails")
        notes.append("minimised the same objective (35) s.t. (36) numerically over the n-N free bids "
                     "(single and (top, i) pair moves on bid grids from the uniform bid; a local optimum)")

        def to_bids(X: np.ndarray) -> np.ndarray:
            top = X[:, :1]
            return np.concatenate([np.repeat(top, N + 1, axis=1), np.minimum(X[:, 1:], top)], axis=1)

        def evaluate(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            e = bids_expectation(J, to_bids(X), prices, Rtab)
            return np.asarray(e.cost), np.asarray(e.time)

        x = _coordinate_descent(evaluate, np.full(n - N, b_uniform), _candidates_fn(prices), deadline)
        bids = to_bids(x[None, :])[0]
        method = "numerical"
    e1 = bids_expectation(J, bids, prices, Rtab)
    return BidPlan("n-sync", tuple(float(b) for b in np.sort(bids)[::-1]), n, J, float(e1.cost), float(e1.time),
                   float(error_bound(J, model, 1.0 / N)), float(e1.inv_y), method, notes=tuple(notes))


def optimal_nbatch_bids(prices: PriceModel, runtime: RuntimeModel, model: ErrorModel, *, n: int, n_sync: int, eps: float,
                        deadline: float) -> BidPlan:
    """Paper 000 Thm 6 (N-batch-sync SGD, ``r ~ Exp(lambda)``): all bids equal,
    ``b = F^-1(N phi^-1(eps, N) / (n lambda theta))``.

    With exponential runtimes and no server time, ``y E[R(y)] = N/lambda`` is constant (the
    "resource-time"), so cost (41) depends only on the top bid and (43) is tightest with equal bids.
    Closed form iff prices are i.i.d., runtimes exponential and ``delta = 0``; otherwise (44)-(46) is
    minimised numerically over all ``n`` bids (grid moves from the uniform bid; a local method).
    """
    _check_common(n, eps, deadline)
    if int(n_sync) != n_sync or n_sync < 1:
        raise InputError(f"N-batch-sync needs N >= 1, got {n_sync!r}", where="n_sync")
    N = int(n_sync)
    J = iterations_for_error(eps, model, inv_y=1.0 / N)
    Rtab = runtime_table(n, runtime.expected, "n-batch", N)
    Rn = float(Rtab[n])
    thm3 = thm3_bid(prices, J, Rn, deadline)
    if not thm3.feasible:
        raise _deadline_infeasible(deadline, J * Rn, f"J E[R(n)] = J N/(n lambda) = {J} x {Rn:.6g}s")
    closed = prices.iid and runtime.kind == "exponential" and runtime.delta == 0.0
    notes: list[str] = []
    b_uniform = thm3.bid
    if closed:
        bids = np.full(n, b_uniform)
        method: Method = "closed-form"
    else:
        if not prices.iid:
            notes.append("prices come from a trace (not i.i.d.): Thm 6 does not apply")
        if runtime.kind != "exponential":
            notes.append("runtimes are empirical, not exponential: Thm 6 does not apply (E[R(y)] by bootstrap)")
        elif runtime.delta != 0.0:
            notes.append("server time delta > 0 makes y E[R(y)] grow with y: Thm 6's constant resource-time fails")
        notes.append("minimised the same objective (44) s.t. (45)-(46) numerically over all n bids "
                     "(single and (top, i) pair moves on bid grids from the uniform bid; a local optimum)")

        def to_bids(X: np.ndarray) -> np.ndarray:  # x[0] is the top bid b_1; the others are clipped to it
            return np.concatenate([X[:, :1], np.minimum(X[:, 1:], X[:, :1])], axis=1)

        def evaluate(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            e = bids_expectation(J, to_bids(X), prices, Rtab)
            return np.asarray(e.cost), np.asarray(e.time)

        x = _coordinate_descent(evaluate, np.full(n, b_uniform), _candidates_fn(prices), deadline)
        bids = to_bids(x[None, :])[0]
        method = "numerical"
    e1 = bids_expectation(J, bids, prices, Rtab)
    return BidPlan("n-batch", tuple(float(b) for b in np.sort(bids)[::-1]), n, J, float(e1.cost), float(e1.time),
                   float(error_bound(J, model, 1.0 / N)), float(e1.inv_y), method, notes=tuple(notes))
