"""spotwise.planner.bids against brute-force optimisation of the same objectives.

Paper: ``papers/000_3c734f3ffedcac15.txt`` Thm 3-7, Corollary 2, eq. (25)-(28).  The objectives
themselves (Lemma 1-2 and their heterogeneous forms) are checked by Monte Carlo in
``test_theory.py``; here every closed form is compared with a fine grid search (2 %).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from spotwise.errors import InfeasibleError
from spotwise.market.synthetic import TruncatedGaussianPrice, UniformPrice
from spotwise.planner import (
    PriceModel,
    optimal_growth_rate,
    optimal_nbatch_bids,
    optimal_nsync_bids,
    optimal_two_bids,
    optimal_two_bids_with_iterations,
    optimal_uniform_bid,
    optimal_workers_and_iterations,
)
from spotwise.planner.bids import growth_objective, growth_time
from spotwise.theory import (
    ErrorModel,
    RuntimeModel,
    bids_expectation,
    error_bound,
    error_bound_growth,
    error_constraint_q,
    expected_cost_uniform,
    expected_time_uniform,
    iterations_for_error,
    runtime_table,
    two_bid_expectation,
)

REL = 0.02
UNIF = PriceModel.from_distribution(UniformPrice(0.2, 1.0))
GAUSS = PriceModel.from_distribution(TruncatedGaussianPrice(0.6, 0.175))
MODEL = ErrorModel(alpha=0.1, c=0.5, mu=1.0, L=1.0, M=1.0, G1=1.0)
EXP = RuntimeModel.exponential(1.0)


def grid_min(cost: np.ndarray, feasible: np.ndarray) -> float:
    c = np.where(feasible, cost, np.inf)
    assert np.any(np.isfinite(c)), "brute force found no feasible point"
    return float(np.min(c))


def bid_grid(prices: PriceModel, k: int) -> np.ndarray:
    """``k`` bids evenly spaced in probability (``F^-1`` of a level grid), clipped to a finite range."""
    return np.minimum(np.asarray(prices.ppf(np.linspace(0.0, 1.0, k)), dtype=float), prices.upper)


# ------------------------------------------------------------------------------------------ Thm 3
def test_paper_setup_uniform_bid_is_the_median() -> None:
    """Prices U[0.2, 1], 8 workers, fully sync, theta = 2 J E[R]: Thm 3 gives F^-1(1/2) = 0.6."""
    eps = 0.05
    J = iterations_for_error(eps, MODEL, inv_y=1 / 8)
    plan = optimal_uniform_bid(UNIF, EXP, MODEL, n=8, eps=eps, deadline=2 * J * EXP.expected(8))
    assert plan.method == "closed-form" and plan.iterations == J
    assert plan.bids == pytest.approx((0.6,) * 8)
    assert plan.expected_time == pytest.approx(2 * J * EXP.expected(8))
    assert plan.expected_error <= eps


@pytest.mark.parametrize("prices", [UNIF, GAUSS], ids=["uniform", "truncnorm"])
@pytest.mark.parametrize("sync,N", [("full", None), ("n-sync", 3), ("n-batch", 5)])
def test_thm3_vs_grid(prices: PriceModel, sync: str, N: int | None) -> None:
    n, eps = 8, 0.05
    inv = 1 / n if sync == "full" else 1 / N
    J = iterations_for_error(eps, MODEL, inv_y=inv)
    R = EXP.expected(n, sync, N)
    theta = 1.7 * J * R
    plan = optimal_uniform_bid(prices, EXP, MODEL, n=n, eps=eps, deadline=theta, sync=sync, n_sync=N)
    b = bid_grid(prices, 20_001)
    t = expected_time_uniform(J, R, prices.cdf(b))
    c = expected_cost_uniform(J, n, R, prices, b)
    best = grid_min(c, t <= theta)
    assert plan.expected_cost == pytest.approx(best, rel=REL)
    assert plan.expected_cost <= best * (1 + 1e-9)
    assert plan.expected_time == pytest.approx(theta, rel=1e-6)  # deadline tight


def test_thm3_trace_falls_back_to_numerical() -> None:
    s = UniformPrice().series(4.0 * 20_000, seed=5)
    tr = PriceModel.from_series(s)
    J = iterations_for_error(0.05, MODEL, inv_y=1 / 8)
    plan = optimal_uniform_bid(tr, EXP, MODEL, n=8, eps=0.05, deadline=2 * J * EXP.expected(8))
    assert plan.method == "numerical" and any("not i.i.d." in x for x in plan.notes)
    assert plan.bids[0] == pytest.approx(0.6, abs=0.01)
    assert plan.expected_time <= 2 * J * EXP.expected(8) * (1 + 1e-9)
    # same answer as the generalised inverse on the trace's CDF (the objective is monotone)
    assert plan.bids[0] == pytest.approx(float(tr.ppf(0.5)), abs=1e-9)


def test_cost_falls_and_time_rises_with_the_deadline() -> None:
    J = iterations_for_error(0.05, MODEL, inv_y=1 / 8)
    base = J * EXP.expected(8)
    plans = [optimal_uniform_bid(GAUSS, EXP, MODEL, n=8, eps=0.05, deadline=f * base) for f in np.geomspace(1.01, 20, 25)]
    costs = np.array([p.expected_cost for p in plans])
    times = np.array([p.expected_time for p in plans])
    assert np.all(np.diff(costs) < 0) and np.all(np.diff(times) > 0)


def test_infeasible_deadline_names_the_constraint() -> None:
    J = iterations_for_error(0.05, MODEL, inv_y=1 / 8)
    need = J * EXP.expected(8)
    with pytest.raises(InfeasibleError) as err:
        optimal_uniform_bid(UNIF, EXP, MODEL, n=8, eps=0.05, deadline=0.5 * need)
    msg = str(err.value)
    assert "deadline" in msg and f"{need:.6g}" in msg and "uninterrupted" in msg


def test_infeasible_error_target_names_the_floor() -> None:
    with pytest.raises(InfeasibleError) as err:
        optimal_uniform_bid(UNIF, EXP, MODEL, n=8, eps=MODEL.floor(1 / 8) * 0.99, deadline=1e6)
    msg = str(err.value)
    assert "floor" in msg and "error constraint" in msg and "workers" in msg


# ------------------------------------------------------------------------------------------ Thm 4
def two_bid_setup(Q: float = 0.18) -> tuple[int, int, int, float, float]:
    n, nh, J = 8, 4, 120
    eps = error_bound(J, MODEL, Q)
    theta = 2.0 * J * EXP.expected(n)
    return n, nh, J, eps, theta


@pytest.mark.parametrize("prices", [UNIF, GAUSS], ids=["uniform", "truncnorm"])
def test_thm4_vs_grid(prices: PriceModel) -> None:
    n, nh, J, eps, theta = two_bid_setup()
    plan = optimal_two_bids(prices, EXP, MODEL, n=n, n_high=nh, eps=eps, deadline=theta, iterations=J)
    assert plan.status == "optimal" and plan.method == "closed-form"
    Q = error_constraint_q(eps, J, MODEL)
    b = bid_grid(prices, 1200)
    BH, BL = np.meshgrid(b, b, indexing="ij")
    ok = BL <= BH
    e = two_bid_expectation(J, n, nh, BH, np.where(ok, BL, BH), prices, EXP.expected(n), EXP.expected(nh))
    best = grid_min(e.cost, ok & (e.time <= theta) & (e.inv_y <= Q))
    assert plan.expected_cost == pytest.approx(best, rel=REL)
    assert plan.expected_cost <= best * (1 + 1e-9)
    assert plan.expected_error == pytest.approx(eps, rel=1e-9) and plan.expected_time == pytest.approx(theta, rel=1e-9)


def test_thm4_trivial_and_infeasible_cases() -> None:
    n, nh, J, _, theta = two_bid_setup()
    # Q >= 1/n_h: the high group alone suffices
    p = optimal_two_bids(UNIF, EXP, MODEL, n=n, n_high=nh, eps=error_bound(J, MODEL, 0.3), deadline=theta, iterations=J)
    assert p.status == "trivial" and "never needed" in p.reason and p.bids[-1] == 0.0
    # Q = 1/n: both bids equal = the uniform bid of Thm 3 at this J
    p = optimal_two_bids(UNIF, EXP, MODEL, n=n, n_high=nh, eps=error_bound(J, MODEL, 1 / n), deadline=theta, iterations=J)
    assert p.status == "trivial" and "equal" in p.reason
    assert p.bids == pytest.approx((float(UNIF.ppf(J * EXP.expected(n) / theta)),) * n)
    # Q < 1/n: infeasible error target
    p = optimal_two_bids(UNIF, EXP, MODEL, n=n, n_high=nh, eps=error_bound(J, MODEL, 0.1), deadline=theta, iterations=J)
    assert p.status == "infeasible" and p.reason.startswith("error constraint") and "iterations" in p.reason
    # deadline shorter than the uninterrupted runtime
    _, _, _, eps, _ = two_bid_setup()
    p = optimal_two_bids(UNIF, EXP, MODEL, n=n, n_high=nh, eps=eps, deadline=0.5 * J * EXP.expected(nh), iterations=J)
    assert p.status == "infeasible" and p.reason.startswith("deadline constraint") and "at least" in p.reason


def test_thm4_trace_numerical() -> None:
    tr = PriceModel.from_series(UniformPrice().series(4.0 * 3000, seed=6))
    n, nh, J, eps, theta = two_bid_setup()
    closed = optimal_two_bids(UNIF, EXP, MODEL, n=n, n_high=nh, eps=eps, deadline=theta, iterations=J)
    num = optimal_two_bids(tr, EXP, MODEL, n=n, n_high=nh, eps=eps, deadline=theta, iterations=J)
    assert num.method == "numerical" and num.status == "optimal"
    assert num.expected_cost == pytest.approx(closed.expected_cost, rel=0.05)  # different (sampled) CDF
    assert num.expected_time <= theta * (1 + 1e-9) and num.expected_error <= eps * (1 + 1e-9)


# ------------------------------------------------------------------------------------------ Corollary 2
def test_corollary2_vs_grid() -> None:
    n, nh = 8, 3
    eps = MODEL.floor(1 / n) * 1.6
    J8 = iterations_for_error(eps, MODEL, inv_y=1 / n)
    theta = 1.6 * J8 * EXP.expected(n)
    plan = optimal_two_bids_with_iterations(UNIF, EXP, MODEL, n=n, n_high=nh, eps=eps, deadline=theta)
    assert plan.method == "numerical" and plan.expected_error <= eps and plan.expected_time <= theta * (1 + 1e-9)
    b = bid_grid(UNIF, 1500)
    BH, BL = np.meshgrid(b, b, indexing="ij")
    ok = BL <= BH
    e1 = two_bid_expectation(1.0, n, nh, BH, np.where(ok, BL, BH), UNIF, EXP.expected(n), EXP.expected(nh))
    fl = MODEL.floor(e1.inv_y)
    with np.errstate(invalid="ignore", divide="ignore"):
        J = np.maximum(1, np.ceil(np.log((eps - fl) / (MODEL.G1 - fl)) / math.log(MODEL.beta) - 1e-9))
    feas = ok & (eps > fl) & (J * e1.time <= theta)
    best = grid_min(J * e1.cost, feas)
    assert plan.expected_cost == pytest.approx(best, rel=REL)
    # co-optimising J is never worse than Thm 4 at J = phi^-1(eps) with all n workers
    fixed = optimal_uniform_bid(UNIF, EXP, MODEL, n=n, eps=eps, deadline=theta)
    assert plan.expected_cost <= fixed.expected_cost * (1 + 1e-9)


# ------------------------------------------------------------------------------------------ Thm 5
def nsync_grid(prices: PriceModel, rt: RuntimeModel, n: int, N: int, J: int, theta: float, k: int = 90) -> float:
    g = bid_grid(prices, k)
    b1, b2, b3 = np.meshgrid(g, g, g, indexing="ij")
    ok = (b2 <= b1) & (b3 <= b2)
    b2c = np.minimum(b2, b1)
    X = np.stack([b1, b1, b1, b2c, np.minimum(b3, b2c)], axis=-1).reshape(-1, n)  # N+1 = 3 share the top bid
    tab = runtime_table(n, rt.expected, "n-sync", N)
    tab[: N + 1] = np.inf
    e = bids_expectation(J, X, prices, tab)
    return grid_min(e.cost, ok.ravel() & (e.time <= theta))


@pytest.mark.parametrize("delta", [0.0, 0.6])
def test_thm5_vs_grid(delta: float) -> None:
    n, N, eps = 5, 2, 0.1
    rt = RuntimeModel.exponential(1.0, delta)
    J = iterations_for_error(eps, MODEL, inv_y=1 / N)
    theta = 1.8 * J * rt.expected(n, "n-sync", N)
    plan = optimal_nsync_bids(UNIF, rt, MODEL, n=n, n_sync=N, eps=eps, deadline=theta)
    assert plan.method == ("closed-form" if delta == 0 else "numerical")
    best = nsync_grid(UNIF, rt, n, N, J, theta)
    assert plan.expected_cost == pytest.approx(best, rel=REL)
    assert plan.expected_cost <= best * (1 + 1e-6)
    if delta == 0:
        assert len(set(plan.bids)) == 1
        assert plan.bids[0] == pytest.approx(float(UNIF.ppf(J * rt.expected(n, "n-sync", N) / theta)))


def test_thm5_paper_log_form() -> None:
    n, N, eps = 8, 3, 0.1
    J = iterations_for_error(eps, MODEL, inv_y=1 / N)
    theta = 3 * J * math.log(n / (n - N))
    plan = optimal_nsync_bids(UNIF, EXP, MODEL, n=n, n_sync=N, eps=eps, deadline=theta, approx=True)
    assert plan.bids[0] == pytest.approx(float(UNIF.ppf(J * math.log(n / (n - N)) / (1.0 * theta))))


# ------------------------------------------------------------------------------------------ Thm 6
@pytest.mark.parametrize("delta", [0.0, 0.3])
def test_thm6_vs_grid(delta: float) -> None:
    n, N, eps = 3, 4, 0.1
    rt = RuntimeModel.exponential(2.0, delta)
    J = iterations_for_error(eps, MODEL, inv_y=1 / N)
    theta = 1.5 * J * rt.expected(n, "n-batch", N)
    plan = optimal_nbatch_bids(GAUSS, rt, MODEL, n=n, n_sync=N, eps=eps, deadline=theta)
    assert plan.method == ("closed-form" if delta == 0 else "numerical")
    if delta == 0:  # b = F^-1(N J / (n lambda theta))
        assert plan.bids == pytest.approx((float(GAUSS.ppf(N * J / (n * 2.0 * theta))),) * n)
    g = bid_grid(GAUSS, 90)
    X = np.stack(np.meshgrid(g, g, g, indexing="ij"), axis=-1).reshape(-1, n)
    e = bids_expectation(J, X, GAUSS, runtime_table(n, rt.expected, "n-batch", N))
    best = grid_min(e.cost, e.time <= theta)
    assert plan.expected_cost == pytest.approx(best, rel=REL)
    assert plan.expected_cost <= best * (1 + 1e-6)


def test_thm6_empirical_runtime_is_numerical_with_note() -> None:
    rt = RuntimeModel.empirical(np.random.default_rng(2).gamma(2.0, 0.25, 300), n_boot=4000)
    J = iterations_for_error(0.1, MODEL, inv_y=1 / 4)
    plan = optimal_nbatch_bids(UNIF, rt, MODEL, n=3, n_sync=4, eps=0.1, deadline=2 * J * rt.expected(3, "n-batch", 4))
    assert plan.method == "numerical" and any("empirical" in x for x in plan.notes)


# ------------------------------------------------------------------------------------------ Thm 7
@pytest.mark.parametrize("eps,theta,exact", [(0.002, 1000.0, False), (0.001, 2000.0, False), (0.002, 200.0, False),
                                             (0.05, 1000.0, True), (0.004, 2000.0, True)])
def test_thm7_vs_brute_force(eps: float, theta: float, exact: bool) -> None:
    """Brute force: every integer J within the deadline, least integer n meeting the error bound.

    Thm 7 is the continuous relaxation; it is within 2 % of the integer optimum when n* is not
    tiny (the first three cases; the third has the deadline binding: J* = floor(theta delta)).
    ``exact_integer=True`` must match exactly.
    """
    R, q = 1.0, 0.3
    plan = optimal_workers_and_iterations(MODEL, eps=eps, deadline=theta, runtime=R, price=0.5, q=q, exact_integer=exact)
    assert plan.method == ("numerical" if exact else "closed-form")
    b, A, B = MODEL.beta, MODEL.G1, MODEL.B
    J = np.arange(1, math.floor(theta * (1 - q) / R) + 1, dtype=float)
    ok = eps > A * b**J
    n = np.ceil(B * (1 - b**J[ok]) / ((1 - b) * (eps - A * b**J[ok])) - 1e-9)
    best = float(np.min(J[ok] * n))
    assert plan.objective == pytest.approx(best, rel=1e-12 if exact else REL)
    assert plan.expected_error <= eps * (1 + 1e-9)
    assert plan.iterations <= theta * (1 - q) / R
    if theta == 200.0 and not exact:
        assert plan.iterations == math.floor(theta * (1 - q) / R)


def test_thm7_small_n_reports_the_rounding_gap() -> None:
    plan = optimal_workers_and_iterations(MODEL, eps=0.05, deadline=1000.0, runtime=1.0, price=0.5, q=0.3)
    assert any("rounding n up" in x for x in plan.notes)


def test_thm7_infeasible_deadline() -> None:
    with pytest.raises(InfeasibleError, match="deadline"):
        optimal_workers_and_iterations(MODEL, eps=0.05, deadline=5.0, runtime=1.0, price=1.0, q=0.3)


# ------------------------------------------------------------------------------------------ eq. (25)-(28)
@pytest.mark.parametrize("runtime", [1.0, RuntimeModel.exponential(1.0, 0.5)], ids=["constant", "straggler"])
def test_growth_rate_vs_grid(runtime: float | RuntimeModel) -> None:
    m = ErrorModel(alpha=0.1, c=0.5, mu=1.0, L=1.0, M=1.0, G1=1.0, d=1.5, chi=0.8)
    eps, q, n1 = 0.02, 0.5, 2.0
    theta = 600.0 if isinstance(runtime, RuntimeModel) else 120.0
    plan = optimal_growth_rate(m, eps=eps, deadline=theta, runtime=runtime, q=q, n1=n1, price=0.4, n_max=5000)
    assert plan.expected_error <= eps * (1 + 1e-9) and plan.expected_time <= theta * (1 + 1e-9)
    if isinstance(runtime, RuntimeModel):
        R_of = lambda y: np.log(np.maximum(y, 1.0)) + 0.5  # noqa: E731 - the paper's log approximation
    else:
        R_of = lambda y: np.full_like(y, 1.0)  # noqa: E731
    eta28 = m.beta ** (-1 / m.chi)
    best = math.inf
    for J in range(1, int(theta) + 1):
        hi = (5000 / n1) ** (1 / (J - 1)) if J > 1 else 2.0
        if hi <= eta28:
            continue
        etas = 1 + np.geomspace(eta28 - 1, hi - 1, 3000)[1:]
        ok = (np.asarray(error_bound_growth(J, m, n1, etas)) <= eps) & (growth_time(J, etas, n1=n1, q=q, runtime_of=R_of) <= theta)
        if np.any(ok):
            best = min(best, float(np.min(growth_objective(J, etas[ok], n1=n1, q=q, runtime_of=R_of, price=0.4))))
    assert math.isfinite(best)
    assert plan.expected_cost == pytest.approx(best, rel=REL)
    assert plan.expected_cost <= best * (1 + 1e-6)


def test_growth_rate_infeasible() -> None:
    with pytest.raises(InfeasibleError, match="eps"):
        optimal_growth_rate(MODEL, eps=1e-4, deadline=10.0, runtime=1.0, q=0.5, n1=2.0, n_max=50)
