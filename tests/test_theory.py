"""spotwise.theory against brute force: Monte Carlo of runtimes, active workers and whole jobs.

Paper: ``papers/000_3c734f3ffedcac15.txt`` (Zhang et al.).  Tolerance 2 % unless stated.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from spotwise.errors import InfeasibleError, InputError
from spotwise.market.synthetic import TruncatedGaussianPrice, UniformPrice
from spotwise.planner.bids.prices import PriceModel
from spotwise.theory import (
    ErrorModel,
    RuntimeModel,
    bids_expectation,
    binomial_d_chi_one,
    error_bound,
    error_bound_capped,
    error_bound_capped_exact,
    error_bound_growth,
    error_bound_sequence,
    error_constraint_q,
    expected_cost_uniform,
    expected_cost_uniform_eq17,
    expected_time_uniform,
    inv_active_binomial,
    inv_active_uniform,
    inv_plus_one_binomial,
    iterations_for_error,
    preemptible_expectation,
    runtime_table,
    smallest_d,
    two_bid_expectation,
)

REL = 0.02
MODEL = ErrorModel(alpha=0.1, c=0.5, mu=1.0, L=1.0, M=1.0, G1=1.0)


# ------------------------------------------------------------------------------- Monte Carlo job
def simulate_job(price_sampler, bids: np.ndarray, runtime: RuntimeModel, sync: str, N: int | None, slots: int,
                 seed: int) -> dict[str, float]:
    """Brute force of the paper's job model, per iteration-length slot.

    Each slot draws an i.i.d. spot price ``p``; worker ``i`` is active iff ``bids[i] >= p``.  A slot
    with no active worker is idle; otherwise an iteration runs: runtimes are drawn per active worker
    (full sync: max; N-sync: N-th smallest; N-batch: each active worker processes mini-batches back
    to back until N have finished in total), plus ``delta``; the active workers pay ``p`` each for
    the iteration.  Idle slots last as long as an average iteration (the slot model under which
    Lemma 1's "fraction of time running = F(b)" holds).  Returns per-iteration averages.
    """
    rng = np.random.default_rng(seed)
    p = price_sampler(slots, rng)
    active = bids[None, :] >= p[:, None]
    y = active.sum(axis=1)
    run = y >= 1
    p, active, y = p[run], active[run], y[run]
    m, n = active.shape
    if sync == "n-batch":
        draws = runtime.sample((m, n, N), rng)
        fin = np.cumsum(draws, axis=2)
        fin = np.where(active[:, :, None], fin, np.inf).reshape(m, n * N)
        R = np.partition(fin, N - 1, axis=1)[:, N - 1]
    else:
        r = np.where(active, runtime.sample((m, n), rng), np.inf)
        if sync == "full":
            R = np.max(np.where(active, r, -np.inf), axis=1)
        else:
            R = np.partition(r, N - 1, axis=1)[:, N - 1]
    R = R + runtime.delta
    frac_run = m / slots
    return {"runtime": R.mean(), "time": R.mean() / frac_run, "cost": float(np.mean(p * y * R)),
            "inv_y": float(np.mean(1.0 / y)), "p_run": frac_run}


def uniform_sampler(lo: float = 0.2, hi: float = 1.0):
    return lambda k, rng: rng.uniform(lo, hi, k)


# ------------------------------------------------------------------------------- runtime (eq. 14, 15)
@pytest.mark.parametrize("y", [1, 3, 8])
def test_expected_max_exponential_vs_monte_carlo(y: int) -> None:
    rt = RuntimeModel.exponential(mu=2.0, delta=0.1)
    mc = np.random.default_rng(y).exponential(0.5, (200_000, y)).max(axis=1).mean() + 0.1
    assert rt.expected(y) == pytest.approx(mc, rel=REL)
    # H_y / mu exactly
    assert rt.expected(y) == pytest.approx(sum(1 / k for k in range(1, y + 1)) / 2.0 + 0.1, rel=1e-12)


@pytest.mark.parametrize("y,N", [(8, 3), (5, 5), (6, 1)])
def test_nth_order_statistic_vs_monte_carlo(y: int, N: int) -> None:
    rt = RuntimeModel.exponential(mu=1.5)
    mc = np.sort(np.random.default_rng(10 + y).exponential(1 / 1.5, (200_000, y)), axis=1)[:, N - 1].mean()
    assert rt.expected(y, "n-sync", N) == pytest.approx(mc, rel=REL)
    if y > N:  # paper's approximation log(y/(y-N))/mu is finite and in the same ballpark
        assert rt.expected(y, "n-sync", N, approx=True) == pytest.approx(math.log(y / (y - N)) / 1.5)


def test_nbatch_runtime_vs_renewal_simulation() -> None:
    rt = RuntimeModel.exponential(mu=1.0)
    rng = np.random.default_rng(3)
    y, N = 3, 5
    fin = np.cumsum(rng.exponential(1.0, (100_000, y, N)), axis=2).reshape(100_000, y * N)
    mc = np.partition(fin, N - 1, axis=1)[:, N - 1].mean()
    assert rt.expected(y, "n-batch", N) == pytest.approx(N / (y * 1.0))
    assert rt.expected(y, "n-batch", N) == pytest.approx(mc, rel=REL)


def test_empirical_runtime_order_statistics_vs_resampling() -> None:
    samples = np.random.default_rng(0).lognormal(0.0, 0.5, 400)
    rt = RuntimeModel.empirical(samples, delta=0.05, n_boot=20_000)
    rng = np.random.default_rng(1)
    draws = rng.choice(samples, (200_000, 8))
    assert rt.expected(8) == pytest.approx(draws.max(axis=1).mean() + 0.05, rel=REL)
    assert rt.expected(8, "n-sync", 3) == pytest.approx(np.sort(draws, axis=1)[:, 2].mean() + 0.05, rel=REL)
    fin = np.cumsum(rng.choice(samples, (50_000, 4, 6)), axis=2).reshape(50_000, 24)
    assert rt.expected(4, "n-batch", 6) == pytest.approx(np.partition(fin, 5, axis=1)[:, 5].mean() + 0.05, rel=REL)
    assert rt.expected(4, "n-batch", 6) == rt.expected(4, "n-batch", 6)  # seeded: reproducible


def test_runtime_model_rejects_bad_input() -> None:
    with pytest.raises(InputError):
        RuntimeModel.exponential(0.0)
    with pytest.raises(InputError, match="N-synchronous"):
        RuntimeModel.exponential(1.0).expected(2, "n-sync", 3)
    with pytest.raises(InputError, match="valid modes"):
        RuntimeModel.exponential(1.0).expected(2, "async")  # type: ignore[arg-type]


# ------------------------------------------------------------------------------- E[1/y] (Lemma 3)
@pytest.mark.parametrize("n,p", [(1, 0.3), (4, 0.5), (8, 0.3), (30, 0.9)])
def test_inv_active_binomial_vs_monte_carlo(n: int, p: float) -> None:
    y = np.random.default_rng(n).binomial(n, p, 400_000)
    y = y[y >= 1]  # the paper's convention: iterations with 0 active workers are not counted
    assert inv_active_binomial(n, p) == pytest.approx(np.mean(1.0 / y), rel=REL)
    z = np.random.default_rng(n + 1).binomial(n, p, 400_000)
    assert inv_plus_one_binomial(n, p) == pytest.approx(np.mean(1.0 / (z + 1)), rel=REL)


def test_inv_active_uniform_and_chi() -> None:
    for n in (1, 5, 40):
        y = np.random.default_rng(n).integers(1, n + 1, 400_000)
        assert inv_active_uniform(n) == pytest.approx(np.mean(1.0 / y), rel=REL)
        assert inv_active_uniform(n) <= (math.log(n) + 1) / n + 1e-12  # Lemma 3
    ns = np.arange(1, 301)
    for p in (0.1, 0.5, 0.9):  # chi = 1 with d = 2(1+q)/p holds (tighter than Lemma 3's chi < 1)
        inv = np.array([inv_active_binomial(int(k), p) for k in ns])
        assert smallest_d(inv, ns, 1.0) <= binomial_d_chi_one(p)
    uni = np.array([inv_active_uniform(int(k)) for k in ns])
    assert smallest_d(uni, ns, 0.5) < 1.3  # Lemma 3: O(n^-1/2)


# ------------------------------------------------------------------------------- bounds (Thm 1, 2, Rem 3)
def test_thm1_closed_form_equals_recursion() -> None:
    for J in (1, 10, 200):
        assert error_bound(J, MODEL, 0.2) == pytest.approx(error_bound_sequence(MODEL, [0.2] * J), rel=1e-12)
    assert error_bound(10**6, MODEL, 0.2) == pytest.approx(MODEL.floor(0.2))


def test_thm2_closed_form_equals_thm1_sum() -> None:
    m = ErrorModel(alpha=0.1, c=0.5, mu=1.0, L=1.0, M=2.0, G1=3.0, d=1.5, chi=0.7)
    for eta in (1.0, 1.02, m.beta ** (-1 / m.chi), 1.3):  # includes x = 1
        for J in (1, 7, 150):
            seq = [m.d / (2.0 * eta ** (j - 1)) ** m.chi for j in range(1, J + 1)]
            assert error_bound_growth(J, m, 2.0, eta) == pytest.approx(error_bound_sequence(m, seq), rel=1e-9)


def test_remark3_as_printed_vs_exact_sum() -> None:
    m = ErrorModel(alpha=0.2, c=0.5, mu=1.0, L=1.0, M=1.0, G1=1.0, d=1.0, chi=1.0)
    floor = m.alpha * m.L * m.M * m.d / (2 * m.c * m.mu * 16)
    for J in (5, 40, 400):
        printed = error_bound_capped(J, m, 2.0, 1.1, 16.0)
        exact = error_bound_capped_exact(J, m, 2.0, 1.1, 16.0)
        var_printed = printed - m.beta**J * m.G1
        var_exact = exact - m.beta**J * m.G1
        assert var_printed <= var_exact + 1e-15 <= 2 * var_printed + 1e-12  # max of sums <= sum of maxes <= 2 max
    assert error_bound_capped(5000, m, 2.0, 1.1, 16.0) == pytest.approx(floor, rel=1e-6)
    assert error_bound_capped_exact(5000, m, 2.0, 1.1, 16.0) == pytest.approx(floor, rel=1e-6)


def test_iterations_for_error_is_the_smallest_j() -> None:
    for inv in (1 / 8, 1 / 2, 1.0):
        eps = MODEL.floor(inv) * 1.5
        J = iterations_for_error(eps, MODEL, inv_y=inv)
        assert error_bound(J, MODEL, inv) <= eps < error_bound(J - 1, MODEL, inv)
    J = iterations_for_error(0.01, MODEL, n1=2, eta=1.05)
    assert error_bound_growth(J, MODEL, 2, 1.05) <= 0.01
    assert all(error_bound_growth(j, MODEL, 2, 1.05) > 0.01 for j in range(1, J))
    J = iterations_for_error(0.05, MODEL, n1=2, eta=1.05, n_max=16)
    assert error_bound_capped(J, MODEL, 2, 1.05, 16) <= 0.05 < error_bound_capped(J - 1, MODEL, 2, 1.05, 16)
    Je = iterations_for_error(0.05, MODEL, n1=2, eta=1.05, n_max=16, exact_cap=True)
    assert Je >= J and error_bound_capped_exact(Je, MODEL, 2, 1.05, 16) <= 0.05


def test_iterations_for_error_below_floor_is_infeasible() -> None:
    floor = MODEL.floor(1 / 8)
    with pytest.raises(InfeasibleError, match="floor") as err:
        iterations_for_error(floor * 0.9, MODEL, inv_y=1 / 8)
    assert "more" in str(err.value) and "step size" in str(err.value)
    with pytest.raises(InfeasibleError, match="n_max"):
        iterations_for_error(1e-6, MODEL, n1=2, eta=1.1, n_max=16)


def test_q_of_eps_inverts_the_bound() -> None:
    J = 50
    eps = error_bound(J, MODEL, 0.3)
    assert error_constraint_q(eps, J, MODEL) == pytest.approx(0.3)


def test_error_model_validation() -> None:
    with pytest.raises(InputError, match="c <= L"):
        ErrorModel(alpha=0.1, c=2.0, mu=1.0, L=1.0, M=1.0, G1=1.0)
    with pytest.raises(InputError, match="step size"):
        ErrorModel(alpha=0.9, c=0.5, mu=1.0, L=1.0, M=1.0, G1=1.0, M_G=2.0)


# ------------------------------------------------------------------------------- cost (Lemma 1, 2, Sec. V)
PRICES = PriceModel.from_distribution(UniformPrice(0.2, 1.0))


def test_lemma1_lemma2_vs_monte_carlo() -> None:
    rt = RuntimeModel.exponential(1.0, delta=0.2)
    n, J, b = 8, 100, 0.55
    sim = simulate_job(uniform_sampler(), np.full(n, b), rt, "full", None, 300_000, 7)
    Rn = rt.expected(n)
    assert expected_time_uniform(J, Rn, PRICES.cdf(b)) == pytest.approx(J * sim["time"], rel=REL)
    assert expected_cost_uniform(J, n, Rn, PRICES, b) == pytest.approx(J * sim["cost"], rel=REL)
    # eq. (17) as printed equals the partial-mean form
    assert expected_cost_uniform_eq17(J, n, Rn, PRICES, b) == pytest.approx(expected_cost_uniform(J, n, Rn, PRICES, b), rel=1e-9)
    tg = PriceModel.from_distribution(TruncatedGaussianPrice(0.6, 0.175, 0.2, 1.0))
    assert expected_cost_uniform_eq17(J, n, Rn, tg, 0.7) == pytest.approx(expected_cost_uniform(J, n, Rn, tg, 0.7), rel=1e-7)


def test_two_bids_vs_monte_carlo() -> None:
    rt = RuntimeModel.exponential(1.0, delta=0.1)
    n, nh, J, bh, bl = 8, 3, 50, 0.8, 0.45
    sim = simulate_job(uniform_sampler(), np.array([bh] * nh + [bl] * (n - nh)), rt, "full", None, 300_000, 8)
    e = two_bid_expectation(J, n, nh, bh, bl, PRICES, rt.expected(n), rt.expected(nh))
    assert e.time == pytest.approx(J * sim["time"], rel=REL)
    assert e.cost == pytest.approx(J * sim["cost"], rel=REL)
    assert e.inv_y == pytest.approx(sim["inv_y"], rel=REL)
    g = bids_expectation(J, np.array([bh] * nh + [bl] * (n - nh)), PRICES, runtime_table(n, rt.expected))
    assert (g.time, g.cost, g.inv_y) == pytest.approx((e.time, e.cost, e.inv_y), rel=1e-12)


@pytest.mark.parametrize("sync,N,bids", [
    ("n-sync", 2, [0.9, 0.9, 0.9, 0.7, 0.4]),
    ("n-batch", 4, [0.9, 0.75, 0.5, 0.3]),
    ("full", None, [0.95, 0.6, 0.35]),
])
def test_heterogeneous_bids_vs_monte_carlo(sync: str, N: int | None, bids: list[float]) -> None:
    rt = RuntimeModel.exponential(2.0)
    b = np.array(bids)
    J = 40
    tab = runtime_table(b.size, rt.expected, sync, N)
    if sync == "n-sync":
        tab[: N + 1] = np.inf
    e = bids_expectation(J, b, PRICES, tab)
    sim = simulate_job(uniform_sampler(), b, rt, sync, N, 200_000, 9)
    assert e.time == pytest.approx(J * sim["time"], rel=REL)
    assert e.cost == pytest.approx(J * sim["cost"], rel=REL)
    assert e.inv_y == pytest.approx(sim["inv_y"], rel=REL)


def test_preemptible_fixed_price_vs_monte_carlo() -> None:
    rt = RuntimeModel.exponential(1.0, delta=0.05)
    n, q, price, J = 6, 0.4, 0.3, 30
    e = preemptible_expectation(J, n, q, price, runtime_table(n, rt.expected))
    rng = np.random.default_rng(11)
    slots = 300_000
    active = rng.random((slots, n)) >= q
    y = active.sum(axis=1)
    run = y >= 1
    r = np.where(active[run], rng.exponential(1.0, (int(run.sum()), n)), -np.inf).max(axis=1) + 0.05
    assert e.time == pytest.approx(J * r.mean() * slots / run.sum(), rel=REL)  # Sec. III-C: sum E[R]/(1-q^n)
    assert e.cost == pytest.approx(J * price * np.mean(y[run] * r), rel=REL)
    assert e.inv_y == pytest.approx(np.mean(1.0 / y[run]), rel=REL)


def test_price_model_from_series() -> None:
    s = UniformPrice().series(4.0 * 50_000, seed=4)
    pm = PriceModel.from_series(s)
    assert pm.iid is False and pm.kind == "empirical"
    for b in (0.3, 0.6, 0.9):
        assert pm.cdf(b) == pytest.approx(PRICES.cdf(b), abs=0.01)
        assert pm.partial_mean(b) == pytest.approx(PRICES.partial_mean(b), abs=0.01)
    assert pm.ppf(0.5) == pytest.approx(0.6, abs=0.01)
    assert pm.partial_mean(-math.inf) == 0.0 and PRICES.partial_mean(0.1) == 0.0
    with pytest.raises(InputError, match="too few points for a CDF"):
        PriceModel.from_series(UniformPrice().series(4.0 * 9, seed=1))
