"""Allocation policies over heterogeneous instance types as linear programs (paper 003 Sec. 4).

``papers/003_c06237e546a4f08e.txt`` Sec. 4 represents how a collection of training jobs uses a
set of instance types by an *allocation matrix* ``X`` (jobs x instance types): ``X[m, j]`` is the
fraction of wall-clock time job ``m`` spends on one instance of type ``j``.  With the throughput
matrix ``T`` (``T[m, j]`` = work units per hour of job ``m`` on one instance of type ``j``) and
the per-hour prices ``c``, the *effective throughput* and *effective cost* of job ``m`` are

    throughput_T(m, X) = sum_j T[m, j] X[m, j]        cost(m, X) = sum_j c[j] X[m, j]

and every policy shares the base constraints (Sec. 4.1)

    X >= 0,     sum_j X[m, j] <= 1  (each job is not over-allocated),
                sum_m X[m, j] <= quota[j]  (at most ``quota[j]`` instances of type j at a time).

A data-parallel job uses several instances at once (issue 21): with ``AllocationProblem(...,
gang=True)`` ``X[m, j]`` is the number of instances of type ``j`` job ``m`` uses at once and the
row constraint ``sum_j X[m, j] <= 1`` is dropped (the quota rows stay); the objectives and the SLO
and budget constraints below are the paper's, unchanged.  :mod:`spotwise.planner.plan.pools` uses
it to mix a job's pools and rounds the fractional counts to workers.

Each policy below is a small cvxpy program solved with HiGHS, a pure function of literal inputs
(in the style of Gavel's ``scheduler/policies``, whose ``ThroughputNormalizedByCostSum*``
policies are the reference implementation of Sec. 4.2/4.3 by the same authors):

* :func:`max_total_throughput` -- Sec. 4.1, ``max sum_m throughput_T(m, X)``; optionally each
  job's throughput normalised by its best single-instance throughput.
* :func:`max_throughput_per_dollar` (alias :func:`min_cost`) -- Sec. 4.2.  The paper writes
  ``max sum_m throughput_T(m, X) / cost(m, X)``, a sum of linear-fractional terms that is not
  concave.  As in Gavel we solve its linearisation ``max sum_{m,j} (T[m, j] / c[j]) X[m, j]``
  (time-weighted samples per dollar).  It equals the paper's objective whenever every job runs
  full time (``sum_j X[m, j] = 1``) on a single type, which is what the optimum does unless
  quotas force a split.
* :func:`min_cost_with_slos` -- Sec. 4.3, the Sec. 4.2 objective with the SLO constraints
  ``throughput_T(m, X) >= work_m / deadline_m``; or (``objective="dollars"``) the *exact*
  minimum total dollars ``sum_m deadline_m * cost(m, X)`` when every job has an SLO (a job
  running at exactly its required rate finishes at its deadline, so its bill is
  ``deadline_m * cost(m, X)``).
* :func:`min_makespan_under_budget` -- Sec. 4.3, ``min M`` subject to
  ``work_m / M <= throughput_T(m, X)`` and ``M * sum_m cost(m, X) <= B``, by bisection on
  ``M`` with an LP feasibility check as the paper says ("binary searching for the smallest M").
  Feasibility is monotone in ``M`` (the least budget needed, ``g(1/M) * M`` with ``g`` convex
  and ``g(0) = 0``, does not increase with ``M``).  ``method="lp"`` solves the same problem
  exactly as one LP with ``s = 1/M`` (``max s`` s.t. ``T X >= work * s``, ``c.X <= B s``), used
  to cross-check the bisection.

Failure behaviour: malformed inputs raise :class:`~spotwise.errors.InputError`; a well-formed
but unsatisfiable request raises :class:`~spotwise.errors.InfeasibleError` whose message names
the binding constraint and what would make it feasible (e.g. ``SLO of job 'x' needs 12.0
units/h but at most 8.0 are possible with the quota of 4 V100 -- extend its deadline to at
least 15.0 h or reduce its work to at most 80.0 units``).
"""

from __future__ import annotations

import math
from typing import Any, Literal, Mapping, Sequence

import numpy as np

from spotwise.errors import InfeasibleError, InputError, SpotwiseError

__all__ = [
    "AllocationProblem",
    "Allocation",
    "SLO",
    "throughput_matrix",
    "max_total_throughput",
    "max_throughput_per_dollar",
    "min_cost",
    "min_cost_with_slos",
    "min_makespan_under_budget",
    "solve_lp",
]

SOLVER = "HIGHS"


from spotwise.planner.placement.problem import (  # noqa: F401  (re-exported)
    SLO, TOL, Allocation, AllocationProblem, _as_matrix, _result, throughput_matrix,
)


# ------------------------------------------------------------------------------------ LP core
def solve_lp(problem: Any) -> str:
    """Solve a cvxpy problem with HiGHS; returns cvxpy's status string."""
    import cvxpy as cp

    try:
        problem.solve(solver=SOLVER)
    except cp.error.SolverError as exc:  # pragma: no cover - a solver crash, not a user error
        raise SpotwiseError(f"the LP solver {SOLVER} failed: {exc}") from exc
    return str(problem.status)


def _base(problem: AllocationProblem):
    """``X`` and the Sec. 4.1 constraints; returns ``(X, constraints, quota_constraint_or_None)``."""
    import cvxpy as cp

    m, n = problem.shape
    X = cp.Variable((m, n), nonneg=True, name="X")
    cons = [] if problem.gang else [cp.sum(X, axis=1) <= 1]  # gang: X counts instances, no row limit
    finite = np.isfinite(problem.quotas)
    quota_con = None
    if np.any(finite):
        quota_con = cp.sum(X, axis=0)[np.nonzero(finite)[0]] <= problem.quotas[finite]
        cons.append(quota_con)
    # a job cannot use a type it has no throughput on (keeps cost-only objectives honest)
    zero = problem.throughput == 0
    if np.any(zero):
        cons.append(cp.multiply(zero.astype(float), X) == 0)
    return X, cons, quota_con


def _check(problem: AllocationProblem, alloc: Allocation) -> Allocation:
    """Assert the invariants of every allocation (cheap; catches solver or modelling bugs)."""
    X = alloc.X
    assert np.all(X >= 0)
    if not problem.gang:
        assert np.all(X <= 1 + TOL) and np.all(X.sum(axis=1) <= 1 + 1e-6)
    assert np.all(X.sum(axis=0) <= problem.quotas + 1e-6)
    return alloc


def max_total_throughput(problem: AllocationProblem, *, normalise: bool = False) -> Allocation:
    """Paper 003 Sec. 4.1: ``max_X sum_m throughput_T(m, X)`` under the base constraints.

    With ``normalise=True`` each job's throughput is divided by its best single-instance
    throughput ``max_j T[m, j]`` (Gavel's normalisation), so a fast job does not crowd out a
    slow one merely by producing more units per hour.  Always feasible (``X = 0`` is allowed).
    """
    import cvxpy as cp

    X, cons, _ = _base(problem)
    T = problem.throughput
    W = T / T.max(axis=1, keepdims=True) if normalise else T
    prob = cp.Problem(cp.Maximize(cp.sum(cp.multiply(W, X))), cons)
    status = solve_lp(prob)
    if status != cp.OPTIMAL:  # pragma: no cover - the problem is always feasible and bounded
        raise SpotwiseError(f"max_total_throughput: solver status {status}")
    return _check(problem, _result(problem, "max_total_throughput" + ("_normalised" if normalise else ""), X.value, prob.value, status))


def max_throughput_per_dollar(problem: AllocationProblem) -> Allocation:
    """Paper 003 Sec. 4.2 "Minimizing total cost": maximise throughput per dollar.

    Solves Gavel's linearisation of ``max sum_m throughput_T(m, X) / cost(m, X)``:
    ``max sum_{m,j} (T[m, j] / c[j]) X[m, j]`` (``objective`` is in units per dollar, summed over
    jobs, weighted by time fraction).  Each job goes to the type with the best cost-normalised
    throughput ``T[m, j] / c[j]`` (paper 003 Table 1, right half) while quotas allow, then to
    the next best.  Always feasible.
    """
    import cvxpy as cp

    X, cons, _ = _base(problem)
    W = problem.throughput / problem.prices[None, :]
    prob = cp.Problem(cp.Maximize(cp.sum(cp.multiply(W, X))), cons)
    status = solve_lp(prob)
    if status != cp.OPTIMAL:  # pragma: no cover
        raise SpotwiseError(f"max_throughput_per_dollar: solver status {status}")
    return _check(problem, _result(problem, "max_throughput_per_dollar", X.value, prob.value, status))


#: Sec. 4.2 is titled "Minimizing Total Cost"; the policy is the throughput-per-dollar LP.
min_cost = max_throughput_per_dollar


def _slo_rates(problem: AllocationProblem, slos: Mapping[str, SLO]) -> np.ndarray:
    rates = np.zeros(len(problem.jobs))
    for job, slo in slos.items():
        if not isinstance(slo, SLO):
            raise InputError(f"SLO of job {job!r} must be an SLO(work, deadline_h), got {slo!r}", "wrap it in spotwise.planner.placement.lp.SLO", "SLO")
        rates[problem.job_index(job)] = slo.rate
    return rates


def _best_alone(problem: AllocationProblem, m: int) -> tuple[float, list[int]]:
    """The most throughput job ``m`` can get alone: fill fastest types first up to their quota."""
    T = problem.throughput[m]
    left, total, used = (math.inf if problem.gang else 1.0), 0.0, []
    for j in np.argsort(-T, kind="stable"):
        if T[j] <= 0 or left <= 0:
            break
        take = min(left, float(problem.quotas[j]))
        if take > 0:
            total += take * T[j]
            left -= take
            used.append(int(j))
    return total, used


def _quota_words(problem: AllocationProblem, types: Sequence[int]) -> str:
    parts = []
    for j in types:
        q = problem.quotas[j]
        qs = "no quota" if not math.isfinite(q) else f"quota of {q:g}"
        parts.append(f"{qs} {problem.type_label(j)}")
    return ", ".join(parts) if parts else "no usable instance type"


def _diagnose_slos(problem: AllocationProblem, rates: np.ndarray, slos: Mapping[str, SLO]) -> InfeasibleError:
    """Explain why the SLO constraints cannot all hold (called only when the LP is infeasible)."""
    import cvxpy as cp

    u = problem.unit
    # 1. a single job that cannot meet its SLO even with every quota to itself
    for m, job in enumerate(problem.jobs):
        if rates[m] <= 0:
            continue
        best, used = _best_alone(problem, m)
        if rates[m] > best * (1 + 1e-9):
            slo = slos[job]
            need_deadline = slo.work / best if best > 0 else math.inf
            return InfeasibleError(
                f"SLO of job {job!r} needs {rates[m]:.4g} {u}/h but at most {best:.4g} are possible "
                f"with the {_quota_words(problem, used)}",
                f"extend its deadline to at least {need_deadline:.4g} h, reduce its work to at most "
                f"{best * slo.deadline_h:.4g} {u}, or raise the quota of its fastest instance type",
                "min_cost_with_slos",
            )
    # 2. jointly infeasible: the largest common fraction lambda of the required rates that fits
    X, cons, quota_con = _base(problem)
    lam = cp.Variable(nonneg=True)
    cons = cons + [cp.sum(cp.multiply(problem.throughput, X), axis=1) >= lam * rates]
    prob = cp.Problem(cp.Maximize(lam), cons)
    solve_lp(prob)
    frac = float(lam.value) if lam.value is not None else 0.0
    tight: list[int] = []
    if quota_con is not None and quota_con.dual_value is not None:
        finite_idx = np.nonzero(np.isfinite(problem.quotas))[0]
        duals = np.atleast_1d(quota_con.dual_value)
        tight = [int(finite_idx[k]) for k in np.nonzero(duals > 1e-9)[0]]
    jobs_with = [problem.jobs[m] for m in np.nonzero(rates > 0)[0]]
    binding = _quota_words(problem, tight) if tight else ("the quotas" if problem.gang else "the one-instance-per-job limit (row sums <= 1)")
    return InfeasibleError(
        f"the SLOs of jobs {jobs_with} cannot all be met together: at most {frac:.1%} of the required "
        f"throughput is reachable; binding: {binding}",
        f"raise {'those quotas' if tight else 'capacity'}, or extend every deadline by a factor of at least {1 / frac if frac > 0 else math.inf:.4g}",
        "min_cost_with_slos",
    )


def min_cost_with_slos(
    problem: AllocationProblem,
    slos: Mapping[str, SLO],
    *,
    objective: Literal["throughput_per_dollar", "dollars"] = "throughput_per_dollar",
) -> Allocation:
    """Paper 003 Sec. 4.3: cost objective subject to per-job SLOs.

    Constraints: the base constraints plus ``throughput_T(m, X) >= work_m / deadline_m`` for
    every job in ``slos`` (jobs not in ``slos`` have ``SLO_m = inf``).

    * ``objective="throughput_per_dollar"`` (the paper's formulation, and Gavel's
      ``ThroughputNormalizedByCostSumWithPerfSLOs``): the Sec. 4.2 objective
      ``max sum_{m,j} (T[m, j] / c[j]) X[m, j]``.
    * ``objective="dollars"``: ``min sum_m deadline_m * cost(m, X)`` -- the total bill when every
      job runs at its allocation until its deadline; needs an SLO with a finite deadline for
      every job.  ``total_cost`` is set.

    An unsatisfiable set of SLOs raises :class:`InfeasibleError` naming the job or the quotas
    that bind and by how much deadlines or quotas would have to change.
    """
    import cvxpy as cp

    rates = _slo_rates(problem, slos)
    X, cons, _ = _base(problem)
    tput = cp.sum(cp.multiply(problem.throughput, X), axis=1)
    has = np.nonzero(rates > 0)[0]
    if has.size:
        cons = cons + [tput[has] >= rates[has]]
    if objective == "throughput_per_dollar":
        W = problem.throughput / problem.prices[None, :]
        prob = cp.Problem(cp.Maximize(cp.sum(cp.multiply(W, X))), cons)
        deadlines = None
    elif objective == "dollars":
        missing = [j for j in problem.jobs if j not in slos or not math.isfinite(slos[j].deadline_h)]
        if missing:
            raise InputError(f"objective 'dollars' needs a finite SLO for every job; missing for {missing}",
                             "give those jobs an SLO, or use objective='throughput_per_dollar'", "min_cost_with_slos")
        deadlines = np.array([slos[j].deadline_h for j in problem.jobs])
        prob = cp.Problem(cp.Minimize(deadlines @ (X @ problem.prices)), cons)
    else:
        raise InputError(f"unknown objective {objective!r}", "use 'throughput_per_dollar' or 'dollars'", "min_cost_with_slos")
    status = solve_lp(prob)
    if status in (cp.INFEASIBLE, cp.INFEASIBLE_INACCURATE):
        raise _diagnose_slos(problem, rates, slos)
    if status != cp.OPTIMAL:  # pragma: no cover
        raise SpotwiseError(f"min_cost_with_slos: solver status {status}")
    alloc = _result(problem, f"min_cost_with_slos[{objective}]", X.value, prob.value, status,
                    total_cost=float(prob.value) if deadlines is not None else None)
    # SLOs hold up to solver tolerance
    assert np.all(alloc.throughput_per_job[has] >= rates[has] * (1 - 1e-6) - 1e-9)
    return _check(problem, alloc)


def _min_budget_lp(problem: AllocationProblem, work: np.ndarray, M: float):
    """LP feasibility core: least ``M * sum_m cost(m, X)`` s.t. ``throughput_T(m, X) >= work_m / M``."""
    import cvxpy as cp

    X, cons, _ = _base(problem)
    tput = cp.sum(cp.multiply(problem.throughput, X), axis=1)
    prob = cp.Problem(cp.Minimize(M * cp.sum(X @ problem.prices)), cons + [tput >= work / M])
    status = solve_lp(prob)
    return status, X, prob


def min_makespan_under_budget(
    problem: AllocationProblem,
    work: Mapping[str, float],
    budget: float,
    *,
    method: Literal["bisection", "lp"] = "bisection",
    rel_tol: float = 1e-6,
) -> Allocation:
    """Paper 003 Sec. 4.3: ``min M`` s.t. ``work_m / M <= throughput_T(m, X)`` for all ``m`` and
    ``M * sum_m cost(m, X) <= B``, plus the base constraints.

    ``work`` maps every job to its remaining work (units of ``T``); jobs missing from it have
    no work and get no allocation.  ``method="bisection"`` (the paper's): bracket ``M`` between
    the fastest possible makespan ``M_lo`` (the throughput-only LP) and a doubling upper bound,
    then bisect until ``(hi - lo) / hi <= rel_tol``, each step one LP (the least budget for that
    ``M``).  ``method="lp"``: the exact LP in ``s = 1/M``.  Returns the allocation at the
    smallest feasible ``M`` (``makespan_h``) and its ``total_cost = M * cost_per_hour``.

    Raises :class:`InfeasibleError` when the budget is below the least possible cost of the
    work (every job on its cheapest-per-unit type, at any makespan), saying how much is needed.
    """
    import cvxpy as cp

    if isinstance(budget, bool) or not isinstance(budget, (int, float)) or not budget > 0 or not math.isfinite(budget):
        raise InputError(f"budget must be a finite number > 0, got {budget!r}", "give the budget in dollars", "min_makespan_under_budget")
    w = np.zeros(len(problem.jobs))
    for job, v in work.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            raise InputError(f"work of job {job!r} must be a finite number >= 0, got {v!r}", "give the remaining work in units", "min_makespan_under_budget")
        w[problem.job_index(job)] = float(v)
    if not np.any(w > 0):
        raise InputError("no job has work to do", "give at least one job positive work", "min_makespan_under_budget")
    # Least possible cost at any makespan (M -> inf, quotas never bind): cheapest $ per unit.
    per_unit = np.where(problem.throughput > 0, problem.prices[None, :] / np.where(problem.throughput > 0, problem.throughput, 1), np.inf)
    usable = np.isfinite(per_unit) & (problem.quotas[None, :] > 0)
    per_unit = np.where(usable, per_unit, np.inf)
    floor = float(np.sum(w * per_unit.min(axis=1)))
    if not math.isfinite(floor):
        m = int(np.argmax(~np.isfinite(per_unit.min(axis=1)) & (w > 0)))
        raise InfeasibleError(f"job {problem.jobs[m]!r} has no instance type with throughput and a non-zero quota",
                              "raise the quota of a type it can run on", "min_makespan_under_budget")
    if budget < floor * (1 - 1e-9):
        raise InfeasibleError(
            f"budget ${budget:.4g} is below the least possible cost ${floor:.4g} of the work "
            f"(every job on its cheapest type per unit of work, at any makespan)",
            f"raise the budget to at least ${floor:.4g} or reduce the work", "min_makespan_under_budget")

    if method == "lp":
        X, cons, _ = _base(problem)
        s = cp.Variable(nonneg=True)
        tput = cp.sum(cp.multiply(problem.throughput, X), axis=1)
        prob = cp.Problem(cp.Maximize(s), cons + [tput >= w * s, cp.sum(X @ problem.prices) <= budget * s])
        status = solve_lp(prob)
        if status != cp.OPTIMAL or s.value is None or s.value <= 0:  # pragma: no cover
            raise SpotwiseError(f"min_makespan_under_budget: solver status {status}")
        M = 1.0 / float(s.value)
        alloc = _result(problem, "min_makespan_under_budget[lp]", X.value, M, status)
        return _check(problem, Allocation(**{**alloc.__dict__, "makespan_h": M, "total_cost": M * alloc.cost_per_hour}))
    if method != "bisection":
        raise InputError(f"unknown method {method!r}", "use 'bisection' or 'lp'", "min_makespan_under_budget")

    # Lower bracket: the fastest makespan with unlimited money, max s s.t. T X >= w s.
    X0, cons0, _ = _base(problem)
    s0 = cp.Variable(nonneg=True)
    p0 = cp.Problem(cp.Maximize(s0), cons0 + [cp.sum(cp.multiply(problem.throughput, X0), axis=1) >= w * s0])
    solve_lp(p0)
    lo = 1.0 / float(s0.value)

    def feasible(M: float):
        status, X, prob = _min_budget_lp(problem, w, M)
        ok = status == cp.OPTIMAL and prob.value <= budget * (1 + 1e-9)
        return ok, X, prob

    ok, X, prob = feasible(lo)
    steps = 1
    if ok:
        hi, best = lo, (X.value, prob.value)
    else:
        hi = lo * 2
        while True:
            ok, X, prob = feasible(hi)
            steps += 1
            if ok:
                best = (X.value, prob.value)
                break
            lo, hi = hi, hi * 2
            if steps > 200:  # pragma: no cover - the floor check above guarantees termination
                raise SpotwiseError("min_makespan_under_budget: no feasible makespan found")
        while (hi - lo) / hi > rel_tol:
            mid = 0.5 * (lo + hi)
            ok, X, prob = feasible(mid)
            steps += 1
            if ok:
                hi, best = mid, (X.value, prob.value)
            else:
                lo = mid
    alloc = _result(problem, "min_makespan_under_budget[bisection]", best[0], hi, cp.OPTIMAL,
                    notes=(f"bisection: {steps} LPs, relative tolerance {rel_tol:g}",))
    out = Allocation(**{**alloc.__dict__, "makespan_h": hi, "total_cost": hi * alloc.cost_per_hour})
    assert out.total_cost <= budget * (1 + 1e-6)
    return _check(problem, out)
