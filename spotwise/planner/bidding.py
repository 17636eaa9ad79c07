"""Cost-optimal bids, workers, iterations and growth rates (``papers/000_3c734f3ffedcac15.txt`` Sec. IV-V).

Every planner solves the paper's problem (1)-(3)::

    minimise E[C]   subject to   E[error] <= eps  (Thm 1 / Thm 2 bound),   E[tau] <= theta

with the expectations of :mod:`spotwise.theory.cost` (Lemma 1-2 and their heterogeneous-bid forms)
and returns a plan dataclass holding the decision, ``expected_cost``, ``expected_time``,
``expected_error`` (the bound at the plan), ``method`` (``"closed-form"`` or ``"numerical"``) and
``notes``.  Where a theorem's assumptions fail -- prices from a trace (``PriceModel.iid`` is False),
non-exponential runtimes (empirical :class:`RuntimeModel`) where the theorem needs exponential ones,
or a server time ``delta > 0`` that breaks the monotonicity the proof uses -- the *same* objective is
optimised numerically and ``notes`` says why.  (Numerically optimising the i.i.d. objective on a
trace's time-weighted CDF does not model the trace's autocorrelation; check such plans by
simulating on the trace.)

| paper 000 | function |
| --- | --- |
| Thm 3 (uniform bid) | :func:`optimal_uniform_bid` (the bid itself: :func:`thm3_bid`) |
| Thm 4 (two bids, fixed J) | :func:`optimal_two_bids` |
| Corollary 2 (co-optimise J and two bids) | :func:`optimal_two_bids_with_iterations` |
| Thm 5 (N-sync, exponential runtimes) | :func:`optimal_nsync_bids` |
| Thm 6 (N-batch-sync, exponential runtimes) | :func:`optimal_nbatch_bids` |
| Thm 7 (preemptible: co-optimise n and J) | :func:`optimal_workers_and_iterations` |
| eq. (25)-(28) (growth rate eta, iterate over J) | :func:`optimal_growth_rate` |
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Literal

import numpy as np
from scipy import optimize

from spotwise.errors import InfeasibleError, InputError
from spotwise.planner.prices import PriceModel
from spotwise.theory.bounds import (
    ErrorModel,
    error_bound,
    error_bound_growth,
    error_constraint_q,
    iterations_for_error,
)
from spotwise.theory.cost import (
    bids_expectation,
    expected_cost_uniform,
    expected_time_uniform,
    preemptible_expectation,
    runtime_table,
    two_bid_expectation,
)
from spotwise.theory.runtime import RuntimeModel, SyncMode

Method = Literal["closed-form", "numerical"]
Status = Literal["optimal", "trivial", "infeasible"]
_TOL = 1e-9
#: gamma* this close to 1 means both Thm 4 bids are equal (the uniform case), up to rounding in Q(eps)
_GAMMA_TOL = 1e-6
_GRID = 256


@dataclass(frozen=True)
class BidPlan:
    """Bids for ``n_workers`` spot workers (``bids[i]`` for worker ``i``, highest first)."""

    strategy: str
    bids: tuple[float, ...]
    n_workers: int
    iterations: int
    expected_cost: float
    expected_time: float
    expected_error: float
    inv_active: float  # E[1/y | the job runs]
    method: Method
    status: Status = "optimal"
    reason: str = ""
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.method not in ("closed-form", "numerical"):
            raise ValueError(f"method must be 'closed-form' or 'numerical', got {self.method!r}")
        if self.status not in ("optimal", "trivial", "infeasible"):
            raise ValueError(f"bad status {self.status!r}")
        if self.status != "infeasible" and len(self.bids) != self.n_workers:
            raise ValueError("one bid per worker")


@dataclass(frozen=True)
class WorkerPlan:
    """Number of preemptible workers and iterations (paper 000 Thm 7)."""

    n_workers: int
    iterations: int
    expected_cost: float
    expected_time: float
    expected_error: float
    method: Method
    objective: float  # J * n, the quantity Thm 7 minimises
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.n_workers < 1 or self.iterations < 1:
            raise ValueError("a worker plan needs n_workers >= 1 and iterations >= 1")


@dataclass(frozen=True)
class GrowthPlan:
    """Exponentially growing workers ``n_j = n1 eta^{j-1}`` (paper 000 Thm 2, eq. (25)-(28))."""

    eta: float
    n1: float
    iterations: int
    n_last: int
    expected_cost: float
    expected_time: float
    expected_error: float
    method: Method
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.eta >= 1 or self.iterations < 1:
            raise ValueError("a growth plan needs eta >= 1 and iterations >= 1")


# ===================================================================================== helpers
def _check_common(n: int, eps: float, deadline: float) -> None:
    if int(n) != n or n < 1:
        raise InputError(f"the number of workers must be an integer >= 1, got {n!r}", where="n")
    if not (math.isfinite(deadline) and deadline > 0):
        raise InputError(f"the deadline must be a finite number of seconds > 0, got {deadline!r}", where="deadline")
    if not (math.isfinite(eps) and eps > 0):
        raise InputError(f"the error target must be a finite number > 0, got {eps!r}", where="eps")


def _deadline_infeasible(deadline: float, min_deadline: float, detail: str) -> InfeasibleError:
    return InfeasibleError(
        f"deadline theta={deadline:.6g}s is shorter than the uninterrupted runtime {detail} = {min_deadline:.6g}s "
        f"(the job cannot finish even if no worker is ever interrupted)",
        f"extend the deadline to at least {min_deadline:.6g}s, relax the error target (fewer iterations), "
        "or use faster workers",
        "deadline constraint",
    )


def bid_at_level(prices: PriceModel, level: float) -> float:
    """The smallest bid ``b`` with ``F(b) >= level`` (``level`` clipped to ``[0, 1]``), within the
    finite bid range (``prices.upper``); for a trace, one of its price levels (a quantile that round-off
    put just below the level is moved up to the next level)."""
    q = min(max(float(level), 0.0), 1.0)
    b = float(prices.ppf(q))
    levels = prices.levels()
    if levels is not None and prices.cdf(b) < q - 1e-12:
        ok = levels[np.asarray(prices.cdf(levels)) >= q - 1e-12]
        b = float(ok.min()) if ok.size else prices.upper
    return min(b, prices.upper) if math.isfinite(b) else prices.upper


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


def _candidate_bids(prices: PriceModel, size: int = 512) -> np.ndarray:
    """Bids worth trying: a trace's distinct levels (subsampled by quantile), else ``F^-1`` of a level grid."""
    lv = prices.levels()
    if lv is not None:
        if lv.size > size:
            lv = np.unique(np.asarray(prices.ppf(np.linspace(0.0, 1.0, size)), dtype=float))
        return lv
    return np.unique(np.minimum(np.asarray(prices.ppf(np.linspace(0.0, 1.0, size + 1)[1:]), dtype=float), prices.upper))


def _inv_y(sync: SyncMode, n: int, n_sync: int | None) -> float:
    return 1.0 / n if sync == "full" else 1.0 / int(n_sync)  # type: ignore[arg-type]


def _check_sync(sync: SyncMode, n: int, n_sync: int | None) -> None:
    if sync == "full":
        return
    if n_sync is None or int(n_sync) != n_sync or n_sync < 1:
        raise InputError(f"{sync} SGD needs n_sync = N >= 1", where="n_sync")
    if sync == "n-sync" and n_sync > n:
        raise InputError(f"N-sync with N={n_sync} needs at least N workers, got n={n}", where="n_sync")


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


# ===================================================================================== Thm 7
def _thm7_n(J: np.ndarray | float, model: ErrorModel, eps: float) -> np.ndarray:
    b, A, B = model.beta, model.G1, model.B
    J = np.asarray(J, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(eps > A * b**J, B * (1 - b**J) / ((1 - b) * (eps - A * b**J)), np.inf)


def optimal_workers_and_iterations(model: ErrorModel, *, eps: float, deadline: float, runtime: float, price: float,
                                   q: float, p_idle: float | None = None, exact_integer: bool = False) -> WorkerPlan:
    """Paper 000 Thm 7: preemptible workers at a fixed price; co-optimise ``n`` and ``J``.

    Assumptions (the theorem's): ``E[y] ~ n``, ``E[1/y] <= d/n`` (``model.d``; for binomial
    preemption :func:`spotwise.theory.workers.binomial_d_chi_one` gives a valid ``d``), deterministic
    per-iteration ``runtime`` and a probability ``p_idle`` of no active worker that does not depend
    on ``n`` -- so the deadline is ``J <= theta delta`` with ``delta = (1 - p_idle)/runtime``.
    ``p_idle`` defaults to ``q`` (its value at ``n = 1``, an upper bound of ``q^n``: conservative).

    Minimise ``J n`` s.t. ``A beta^J + B (1 - beta^J)/(n (1 - beta)) <= eps``; with
    ``n(J) = B(1-beta^J)/((1-beta)(eps - A beta^J))``, ``J~`` solves
    ``H(J~) = A beta^J~ (J~ ln(1/beta) + 1 - beta^J~)/(1 + beta^J~ (J~ ln(1/beta) - 1)) = eps``;
    ``J* = min{argmin_{J in {floor J~, ceil J~}} J n(J), floor(theta delta)}``.

    Deviation: the paper prints ``n* = ceil(n(J~))``; we use ``n* = ceil(n(J*))`` (the proof's
    "least integer making the error constraint tight" at ``J*``) -- ``n(J~)`` can violate the error
    constraint when ``J* = floor(J~)`` or ``J* = floor(theta delta) < J~``.  Reported cost and time
    are exact for binomial preemption (``y ~ Bin(n, 1-q) | y >= 1``, only active workers billed).

    Thm 7 optimises the continuous relaxation ``J n(J)``; rounding ``n`` up can cost noticeably
    more when ``n*`` is small (e.g. ``n(J) = 2.4 -> 3``), and then ``notes`` reports the gap.
    ``exact_integer=True`` instead searches every integer ``J <= floor(theta delta)`` for the least
    ``J ceil(n(J))`` (``method="numerical"``).
    """
    if not (math.isfinite(deadline) and deadline > 0 and runtime > 0 and price >= 0 and 0 <= q < 1):
        raise InputError("Thm 7 needs deadline > 0, runtime > 0, price >= 0 and 0 <= q < 1", where="preemptible plan")
    if not (math.isfinite(eps) and eps > 0):
        raise InputError(f"the error target must be > 0, got {eps!r}", where="eps")
    p0 = q if p_idle is None else float(p_idle)
    delta = (1.0 - p0) / runtime
    J_dead = math.floor(deadline * delta + 1e-9)
    b, A = model.beta, model.G1
    lnb = math.log(1.0 / b)
    J_lo = math.log(eps / A) / math.log(b) if A > eps else 0.0  # need A beta^J < eps
    J_min_int = max(1, math.floor(J_lo) + 1) if A > eps else 1
    if J_dead < J_min_int:
        raise InfeasibleError(
            f"deadline theta={deadline:.6g}s allows at most floor(theta delta) = {J_dead} iterations "
            f"(delta = (1-p_idle)/runtime = {delta:.6g}/s) but eps={eps:g} needs more than {J_lo:.6g} "
            "iterations for any number of workers (A beta^J < eps)",
            f"extend the deadline to more than {J_min_int / delta:.6g}s or relax eps", "deadline constraint")

    def H(x: float) -> float:
        bx = b**x
        return A * bx * (x * lnb + 1 - bx) / (1 + bx * (x * lnb - 1))

    lo = max(J_lo, 1e-9) * (1 + 1e-12) + 1e-12
    if H(lo) <= eps:
        Jt = lo
    else:
        hi = max(2 * lo, 1.0)
        while H(hi) > eps:
            hi *= 2
        Jt = optimize.brentq(lambda x: H(x) - eps, lo, hi, xtol=1e-10)
    cands = [j for j in {math.floor(Jt), math.ceil(Jt)} if j >= J_min_int]
    if not cands:
        cands = [J_min_int]
    g = {j: j * float(_thm7_n(j, model, eps)) for j in cands}
    J_star = min(min(cands, key=lambda j: g[j]), J_dead)
    n_star = max(1, math.ceil(float(_thm7_n(J_star, model, eps)) - 1e-9))
    notes = [f"J~ = {Jt:.6g} solves H(J~) = eps; deadline allows J <= {J_dead}",
             "n* = ceil(n(J*)) (the paper prints n(J~); see docstring)",
             f"expected_error uses E[1/y] <= d/n with d = {model.d:g}"]
    method: Method = "closed-form"
    relaxed = min(J_star, Jt) * float(_thm7_n(min(J_star, Jt), model, eps))
    if exact_integer:
        Js = np.arange(J_min_int, J_dead + 1, dtype=float)
        obj = Js * np.maximum(1.0, np.ceil(_thm7_n(Js, model, eps) - 1e-9))
        k = int(np.argmin(obj))
        J_star, n_star = int(Js[k]), int(obj[k] / Js[k])
        method = "numerical"
        notes.append("exact_integer: searched every integer J for the least J ceil(n(J))")
    elif J_star * n_star > 1.02 * relaxed:
        notes.append(f"rounding n up costs {100 * (J_star * n_star / relaxed - 1):.1f}% over Thm 7's continuous "
                     "optimum; exact_integer=True finds the integer optimum")
    R = np.full(n_star + 1, float(runtime))
    e = preemptible_expectation(J_star, n_star, q, price, R)
    return WorkerPlan(n_star, J_star, float(e.cost), float(e.time),
                      float(error_bound(J_star, model, model.d / n_star)), method, float(J_star * n_star), tuple(notes))


# ===================================================================================== eq. (25)-(28)
def growth_objective(J: int, eta: float | np.ndarray, *, n1: float, q: float, runtime_of: Callable[[np.ndarray], np.ndarray],
                     price: float = 1.0) -> np.ndarray:
    """eq. (25) times ``price``: ``sum_j price E[R_j] (1-q) n1 eta^{j-1}``."""
    j = np.arange(J, dtype=float)
    ea = np.atleast_1d(np.asarray(eta, dtype=float))[:, None]
    y = (1 - q) * n1 * ea**j
    return price * np.sum(runtime_of(y) * y, axis=1)


def growth_time(J: int, eta: float | np.ndarray, *, n1: float, q: float, runtime_of: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """eq. (26) left side: ``sum_j E[R_j] / (1 - q^{n1 eta^{j-1}})``."""
    j = np.arange(J, dtype=float)
    ea = np.atleast_1d(np.asarray(eta, dtype=float))[:, None]
    nj = n1 * ea**j
    with np.errstate(divide="ignore"):
        return np.sum(runtime_of((1 - q) * nj) / (1 - q**nj), axis=1)


def _growth_runtime(runtime: float | RuntimeModel) -> Callable[[np.ndarray], np.ndarray]:
    if isinstance(runtime, RuntimeModel):
        if runtime.kind == "exponential":
            mu = float(runtime.mu)  # type: ignore[arg-type]
            # paper 000 Sec. V "Modified (26)": E[R(y_j)] ~ log(n1 (1-q) eta^{j-1}) / lambda (needs n1(1-q) >= 1)
            return lambda y: np.log(np.maximum(y, 1.0)) / mu + runtime.delta
        return lambda y: np.vectorize(lambda v: runtime.expected(max(1, int(round(v)))), otypes=[float])(y)
    R = float(runtime)
    if not (math.isfinite(R) and R > 0):
        raise InputError(f"runtime must be > 0 seconds, got {runtime!r}", where="growth plan")
    return lambda y: np.full_like(np.asarray(y, dtype=float), R)


def optimal_growth_rate(model: ErrorModel, *, eps: float, deadline: float, runtime: float | RuntimeModel, q: float,
                        n1: float, price: float = 1.0, n_max: float = 10_000.0, max_J_evals: int = 3000) -> GrowthPlan:
    """eq. (25)-(28): the growth rate ``eta`` of ``n_j = n1 eta^{j-1}`` preemptible workers, iterating over ``J``.

    For each ``J`` (``1 .. floor(theta / min E[R])``, the largest ``J`` for which (26) can hold)
    the objective (25) increases with ``eta``, so the optimal ``eta`` is the smallest feasible one:
    ``eta > beta^{-1/chi}`` (28, strict: we use ``(1+1e-9)`` times the bound), the error
    constraint (27) (the Thm 2 bound, decreasing in ``eta``; bisection) and the deadline (26)
    (decreasing in ``eta`` for a constant ``R``; with the straggler model of "Modified (26)" it may
    not be monotone, so the first feasible point of a log-grid is refined by bisection).  The best
    ``J`` wins.  ``runtime``: a constant ``R`` (negligible stragglers) or a :class:`RuntimeModel`
    (exponential: the paper's ``log(n1 (1-q) eta^{j-1})/lambda``; empirical: ``E[R(round(E[y_j]))]``).
    ``n_j`` is continuous here, as in (25)-(27).  If there are more than ``max_J_evals`` values of
    ``J``, a geometric grid of ``J`` is searched and refined around the best (noted).
    ``expected_cost`` is ``price`` times (25).
    """
    if not (0 <= q < 1 and n1 >= 1 and math.isfinite(deadline) and deadline > 0 and n_max >= n1):
        raise InputError("growth plan needs 0 <= q < 1, n1 >= 1, deadline > 0 and n_max >= n1", where="growth plan")
    if not (math.isfinite(eps) and eps > 0):
        raise InputError(f"the error target must be > 0, got {eps!r}", where="eps")
    if model.chi <= 0:
        raise InputError("constraint (28) eta^chi > 1/beta needs chi > 0", where="error model")
    R_of = _growth_runtime(runtime)
    R_min = float(R_of(np.array([(1 - q) * n1]))[0])
    if isinstance(runtime, (int, float)):
        J_max = math.floor(deadline / R_min + 1e-9)
    else:
        J_max = math.floor(deadline / max(1e-12, float(np.min(R_of(np.geomspace(max(1.0, (1 - q) * n1), n_max, 64))))))
    if J_max < 1:
        raise InfeasibleError(f"deadline theta={deadline:.6g}s is shorter than one iteration ({R_min:.6g}s)",
                              f"extend the deadline to at least {R_min:.6g}s", "deadline constraint")
    eta28 = model.beta ** (-1.0 / model.chi) * (1 + 1e-9)
    notes: list[str] = ["eq. (28) is strict: eta = (1 + 1e-9) beta^(-1/chi) at the bound",
                        "n_j = n1 eta^(j-1) treated as continuous, as in (25)-(27)"]

    def best_eta(J: int) -> float | None:
        eta_hi = (n_max / n1) ** (1.0 / (J - 1)) if J > 1 else max(eta28, 2.0)
        if eta_hi < eta28:
            return None
        err = lambda e: float(error_bound_growth(J, model, n1, e))  # noqa: E731
        if err(eta_hi) > eps:
            return None
        if err(eta28) <= eps:
            e_lo = eta28
        else:
            e_lo = optimize.brentq(lambda e: err(e) - eps, eta28, eta_hi, xtol=1e-13, rtol=1e-13)
            e_lo = min(eta_hi, e_lo * (1 + 1e-12))
        tm = lambda e: float(growth_time(J, e, n1=n1, q=q, runtime_of=R_of)[0])  # noqa: E731
        if tm(e_lo) <= deadline:
            return e_lo
        grid = 1 + np.geomspace(max(e_lo - 1, 1e-12), max(eta_hi - 1, 1e-12), 200)
        grid = grid[grid > e_lo]
        if grid.size == 0:
            return None
        t = growth_time(J, grid, n1=n1, q=q, runtime_of=R_of)
        ok = np.nonzero(t <= deadline)[0]
        if ok.size == 0:
            return None
        k = int(ok[0])
        left = e_lo if k == 0 else float(grid[k - 1])
        e = optimize.brentq(lambda x: tm(x) - deadline, left, float(grid[k]), xtol=1e-13, rtol=1e-13)
        return min(float(grid[k]), e * (1 + 1e-12))

    def cost(J: int, eta: float) -> float:
        return float(growth_objective(J, eta, n1=n1, q=q, runtime_of=R_of, price=price)[0])

    if J_max <= max_J_evals:
        Js = list(range(1, J_max + 1))
    else:
        Js = sorted(set(int(v) for v in np.round(np.geomspace(1, J_max, max_J_evals // 2))))
        notes.append(f"J searched on a geometric grid of {len(Js)} values up to {J_max}, then refined locally")
    results: dict[int, tuple[float, float]] = {}
    for J in Js:
        e = best_eta(J)
        if e is not None:
            results[J] = (e, cost(J, e))
    if results and J_max > max_J_evals:
        Jb = min(results, key=lambda j: results[j][1])
        idx = Js.index(Jb)
        lo_, hi_ = Js[max(0, idx - 1)], Js[min(len(Js) - 1, idx + 1)]
        for J in range(lo_, hi_ + 1):
            if J not in results:
                e = best_eta(J)
                if e is not None:
                    results[J] = (e, cost(J, e))
    if not results:
        raise InfeasibleError(
            f"no number of iterations J <= {J_max} (what the deadline theta={deadline:.6g}s allows) and growth rate "
            f"eta with n1={n1:g}, n_j <= n_max={n_max:g} meets the error target eps={eps:g} (eq. (27)) and the deadline (26)",
            "extend the deadline, relax eps, start with more workers n1, or raise n_max", "error/deadline constraints")
    J = min(results, key=lambda j: results[j][1])
    eta, c = results[J]
    return GrowthPlan(eta, float(n1), J, math.ceil(n1 * eta ** (J - 1) - 1e-9), c,
                      float(growth_time(J, eta, n1=n1, q=q, runtime_of=R_of)[0]),
                      float(error_bound_growth(J, model, n1, eta)), "numerical", tuple(notes))


__all__ = [
    "BidPlan", "WorkerPlan", "GrowthPlan", "Thm3Bid", "thm3_bid", "bid_at_level",
    "optimal_uniform_bid", "optimal_two_bids", "optimal_two_bids_with_iterations", "optimal_nsync_bids",
    "optimal_nbatch_bids", "optimal_workers_and_iterations", "optimal_growth_rate", "growth_objective", "growth_time",
]
