"""Preemptible workers at a fixed price: how many, for how long, and how fast to grow them.

* paper 000 Thm 7 (``papers/000_3c734f3ffedcac15.txt``): co-optimise the number of workers ``n`` and
  iterations ``J`` (:func:`optimal_workers_and_iterations`);
* eq. (25)-(28) (Thm 2's growing workers): the growth rate ``eta`` of ``n_j = n1 eta^{j-1}``,
  iterating over ``J`` (:func:`optimal_growth_rate`, with the objective :func:`growth_objective` and
  the expected time :func:`growth_time`).
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np
from scipy import optimize

from spotwise.errors import InfeasibleError, InputError
from spotwise.planner.bids.plans import GrowthPlan, Method, WorkerPlan
from spotwise.theory.bounds import ErrorModel, error_bound, error_bound_growth
from spotwise.theory.cost import preemptible_expectation
from spotwise.theory.runtime import RuntimeModel


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
