"""Two bids for fully-synchronous SGD: paper 000 Thm 4 and Corollary 2 (``papers/000_3c734f3ffedcac15.txt``).

``n_h`` workers bid ``b_h`` and ``n - n_h`` bid ``b_l``: :func:`optimal_two_bids` for a fixed number of
iterations ``J`` (eq. (22)-(23), with the footnote's trivial and infeasible cases), and
:func:`optimal_two_bids_with_iterations` co-optimising ``J`` with the bids (eq. (24), numerically).
With a trace, both search pairs of the trace's price levels.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import optimize

from spotwise.errors import InfeasibleError, InputError
from spotwise.planner.bids.plans import (
    _GAMMA_TOL,
    _TOL,
    BidPlan,
    Method,
    Status,
    _candidate_bids,
    _check_common,
    _deadline_infeasible,
    bid_at_level,
)
from spotwise.planner.bids.prices import PriceModel
from spotwise.theory.bounds import ErrorModel, error_bound, error_constraint_q, iterations_for_error
from spotwise.theory.cost import two_bid_expectation
from spotwise.theory.runtime import RuntimeModel


# ===================================================================================== Thm 4
def optimal_two_bids(prices: PriceModel, runtime: RuntimeModel, model: ErrorModel, *, n: int, n_high: int, eps: float,
                     deadline: float, iterations: int) -> BidPlan:
    """Paper 000 Thm 4 (fully-synchronous SGD, fixed ``J``): ``n_h`` workers bid ``b_h``, ``n - n_h`` bid ``b_l``.

    With ``Q = Q(eps)`` of eq. (22) and ``gamma* = (1/n_h - Q)/(1/n_h - 1/n)``, eq. (23)::

        F(b_h*) = (J/theta) ((E[R(n)] - E[R(n_h)]) gamma* + E[R(n_h)]),   F(b_l*) = gamma* F(b_h*)

    Status (footnote 1 of Thm 4):

    * ``"infeasible"`` -- ``Q < 1/n`` (even all ``n`` workers active in every iteration miss
      ``eps`` in ``J`` iterations) or ``F(b_h*) > 1`` (deadline shorter than the uninterrupted
      runtime ``J E[R | running]``); ``reason`` names the constraint and the fix;
    * ``"trivial"`` -- ``Q >= 1/n_h`` (``gamma* = 0``: the ``n_h`` high-bid workers alone reach
      ``eps``; the low group is never needed and gets bid 0) or ``Q = 1/n`` (``gamma* = 1``: both
      bids equal, i.e. the uniform bid of Thm 3 for ``n`` workers);
    * ``"optimal"`` otherwise.

    Thm 4 holds for any i.i.d. runtime law; with a trace the same problem (18)-(21) is solved by a
    grid over pairs of the trace's price levels.
    """
    _check_common(n, eps, deadline)
    if not (1 <= n_high < n):
        raise InputError(f"two bids need 1 <= n_high < n, got n_high={n_high}, n={n}", where="n_high")
    J = int(iterations)
    if J < 1:
        raise InputError("iterations must be >= 1", where="iterations")
    Q = error_constraint_q(eps, J, model)
    Rn, Rh = runtime.expected(n), runtime.expected(n_high)
    base = dict(strategy="two-bids", n_workers=n, iterations=J)
    notes: list[str] = []
    if runtime.kind == "empirical":
        notes.append("E[R(n)], E[R(n_h)] estimated from the empirical runtime samples; Thm 4 holds for any i.i.d. runtime law")

    def infeasible(reason: str) -> BidPlan:
        return BidPlan(bids=(), expected_cost=math.nan, expected_time=math.nan, expected_error=math.nan,
                       inv_active=math.nan, method="closed-form", status="infeasible", reason=reason,
                       notes=tuple(notes), **base)  # type: ignore[arg-type]

    if Q < 1.0 / n * (1 - 1e-12):
        try:
            need = iterations_for_error(eps, model, inv_y=1.0 / n)
            fix = f"raise the number of iterations to at least {need} (phi^-1(eps) with all {n} workers active)"
        except InfeasibleError:
            fix = f"eps is below the error floor even with {n} workers: add workers or use a smaller step size"
        return infeasible(f"error constraint: Q(eps)={Q:.6g} < 1/n={1.0 / n:.6g}, so even with all {n} workers "
                          f"active in every iteration {J} iterations cannot reach eps={eps:g}; {fix}, or relax eps")
    gamma = min(1.0, max(0.0, (1.0 / n_high - Q) / (1.0 / n_high - 1.0 / n)))
    run = (Rn - Rh) * gamma + Rh
    Fh = J * run / deadline
    if Fh > 1.0 + _TOL:
        return infeasible(f"deadline constraint: theta={deadline:.6g}s is shorter than the uninterrupted runtime "
                          f"J E[R | running] = {J * run:.6g}s (J={J}, gamma*={gamma:.4g}); extend the deadline to at "
                          f"least {J * run:.6g}s, use fewer iterations or relax eps")
    status: Status = "optimal"
    reason = ""
    if gamma <= 0.0:
        status, reason = "trivial", (f"Q(eps)={Q:.6g} >= 1/n_h={1.0 / n_high:.6g}: the {n_high} high-bid workers alone "
                                     f"reach eps; the {n - n_high} low-bid workers are never needed (bid 0, do not provision)")
    elif gamma >= 1.0 - _GAMMA_TOL:
        status, reason = "trivial", (f"Q(eps)={Q:.6g} = 1/n: every iteration needs all {n} workers; both bids are equal "
                                     "(the uniform bid of Thm 3)")
    if prices.iid:
        bh = bid_at_level(prices, Fh)
        bl = -math.inf if gamma <= 0.0 else (bh if gamma >= 1.0 - _GAMMA_TOL else bid_at_level(prices, gamma * Fh))
        method: Method = "closed-form"
    else:
        notes.append("prices come from a trace (not i.i.d.): Thm 4's closed form does not apply; minimised the same "
                     "objective (18) s.t. (19)-(21) over pairs of the trace's price levels (autocorrelation not modelled)")
        cand = _candidate_bids(prices, 600)
        BH, BL = np.meshgrid(cand, np.concatenate([[-math.inf], cand]), indexing="ij")
        ok_pair = BL <= BH
        BL = np.where(ok_pair, BL, -math.inf)
        e = two_bid_expectation(J, n, n_high, BH, BL, prices, Rn, Rh)
        c = np.where(ok_pair & (np.asarray(e.time) <= deadline * (1 + _TOL)) & (np.asarray(e.inv_y) <= Q * (1 + 1e-12)),
                     np.asarray(e.cost), np.inf)
        if not np.any(np.isfinite(c)):
            return infeasible("no pair of the trace's price levels meets both the error constraint (19) and the "
                              f"deadline theta={deadline:.6g}s; extend the deadline or relax eps")
        i, j = np.unravel_index(int(np.argmin(c)), c.shape)
        bh, bl = float(BH[i, j]), float(BL[i, j])
        method = "numerical"
    e1 = two_bid_expectation(J, n, n_high, bh, bl, prices, Rn, Rh)
    bids = (bh,) * n_high + ((0.0 if bl == -math.inf else bl),) * (n - n_high)
    return BidPlan(bids=bids, expected_cost=float(e1.cost), expected_time=float(e1.time),
                   expected_error=float(error_bound(J, model, float(e1.inv_y))), inv_active=float(e1.inv_y),
                   method=method, status=status, reason=reason, notes=tuple(notes), **base)  # type: ignore[arg-type]


# ===================================================================================== Corollary 2
def optimal_two_bids_with_iterations(prices: PriceModel, runtime: RuntimeModel, model: ErrorModel, *, n: int,
                                     n_high: int, eps: float, deadline: float) -> BidPlan:
    """Paper 000 Corollary 2: co-optimise ``J`` with the two bids.

    ``J(b) = ceil(log_beta((eps - floor)/(G1 - floor)))`` with ``floor = alpha L M E[1/y(b)]/(2 c mu)``
    (eq. (24)) replaces ``J`` in (18) and (20); (19) then holds by construction.  No closed form:
    for i.i.d. prices the problem is one-dimensional in ``gamma = F(b_l)/F(b_h)`` because at fixed
    ``gamma`` cost increases with ``F(b_h)`` (so the deadline is tight: ``F(b_h) = J(gamma)
    E[R | running](gamma)/theta``); it is solved on a fine ``gamma`` grid refined by bounded scalar
    minimisation.  For a trace, a grid over pairs of price levels.  ``method="numerical"``.
    """
    _check_common(n, eps, deadline)
    if not (1 <= n_high < n):
        raise InputError(f"two bids need 1 <= n_high < n, got n_high={n_high}, n={n}", where="n_high")
    Rn, Rh = runtime.expected(n), runtime.expected(n_high)
    fl_n = model.floor(1.0 / n)
    if eps <= fl_n:
        iterations_for_error(eps, model, inv_y=1.0 / n)  # raises the floor InfeasibleError
    notes = ["Corollary 2 has no closed form: J from eq. (24) substituted into (18), (20); bids found numerically"]

    def J_of(inv: np.ndarray) -> np.ndarray:
        inv = np.asarray(inv, dtype=float)
        fl = model.floor(inv)
        with np.errstate(divide="ignore", invalid="ignore"):
            Jr = np.where(model.G1 > eps, np.log((eps - fl) / (model.G1 - fl)) / math.log(model.beta), 0.0)
        Jr = np.where(eps > fl, Jr, np.inf)
        return np.where(np.isfinite(Jr), np.maximum(1.0, np.ceil(Jr - 1e-9)), np.inf)

    if prices.iid:
        def metrics(gamma: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
            inv = (1 - gamma) / n_high + gamma / n
            J = J_of(inv)
            Fh = J * ((1 - gamma) * Rh + gamma * Rn) / deadline
            feas = np.isfinite(J) & (Fh <= 1 + _TOL)
            Fh_c = np.clip(np.where(feas, Fh, 1.0), 0.0, 1.0)
            bh = np.minimum(np.asarray(prices.ppf(Fh_c), dtype=float), prices.upper)
            bl = np.where(gamma > 0, np.minimum(np.asarray(prices.ppf(np.clip(gamma * Fh_c, 0, 1)), dtype=float), bh), -np.inf)
            e = two_bid_expectation(np.where(feas, J, 1.0), n, n_high, bh, bl, prices, Rn, Rh)
            return np.where(feas, np.asarray(e.cost), np.inf), bh, bl, J

        g = np.linspace(0.0, 1.0, 4001)
        c, _, _, _ = metrics(g)
        if not np.any(np.isfinite(c)):
            J_need = J_of(np.array([1.0 / n]))[0]
            raise _deadline_infeasible(deadline, float(J_need * Rn), f"J E[R(n)] = {int(J_need)} x {Rn:.6g}s (best case, all workers)")
        k = int(np.argmin(c))
        lo, hi = g[max(0, k - 1)], g[min(g.size - 1, k + 1)]
        res = optimize.minimize_scalar(lambda x: float(metrics(np.array([x]))[0][0]), bounds=(lo, hi), method="bounded",
                                       options={"xatol": 1e-7})
        best = g[k]
        if res.success and np.isfinite(res.fun) and res.fun < c[k]:
            best = float(res.x)
        _, bh_a, bl_a, J_a = metrics(np.array([best]))
        bh, bl, J = float(bh_a[0]), float(bl_a[0]), int(J_a[0])
    else:
        notes.append("prices come from a trace (not i.i.d.): searched pairs of the trace's price levels "
                     "(autocorrelation not modelled)")
        cand = _candidate_bids(prices, 600)
        BH, BL = np.meshgrid(cand, np.concatenate([[-math.inf], cand]), indexing="ij")
        ok = BL <= BH
        BL = np.where(ok, BL, -math.inf)
        e = two_bid_expectation(1.0, n, n_high, BH, BL, prices, Rn, Rh)
        J = J_of(np.asarray(e.inv_y))
        c = np.where(ok & np.isfinite(J) & (J * np.asarray(e.time) <= deadline * (1 + _TOL)), J * np.asarray(e.cost), np.inf)
        if not np.any(np.isfinite(c)):
            J_need = J_of(np.array([1.0 / n]))[0]
            raise _deadline_infeasible(deadline, float(J_need * Rn), f"J E[R(n)] = {int(J_need)} x {Rn:.6g}s (best case)")
        i, j = np.unravel_index(int(np.argmin(c)), c.shape)
        bh, bl, J = float(BH[i, j]), float(BL[i, j]), int(J[i, j])
    e1 = two_bid_expectation(J, n, n_high, bh, bl, prices, Rn, Rh)
    gamma_v = float(prices.cdf(bl)) / float(prices.cdf(bh)) if bl != -math.inf else 0.0
    status: Status = "trivial" if (gamma_v <= 0.0 or gamma_v >= 1.0 - 1e-9) else "optimal"
    reason = ""
    if status == "trivial":
        reason = ("gamma* = 0: the low-bid workers are never needed" if gamma_v <= 0.0
                  else "gamma* = 1: both bids equal (uniform bid)")
    bids = (bh,) * n_high + ((0.0 if bl == -math.inf else bl),) * (n - n_high)
    return BidPlan("two-bids+J", bids, n, J, float(e1.cost), float(e1.time),
                   float(error_bound(J, model, float(e1.inv_y))), float(e1.inv_y), "numerical", status, reason, tuple(notes))
