"""Paper 003 Sec. 4 allocation LPs on literal inputs: invariants, hand-solved optima, infeasibility."""

from __future__ import annotations

import math

import numpy as np
import pytest

from spotwise.errors import InfeasibleError, InputError
from spotwise.market.catalog import Catalog
from spotwise.planner.placement.lp import (
    SLO,
    AllocationProblem,
    max_throughput_per_dollar,
    max_total_throughput,
    min_cost,
    min_cost_with_slos,
    min_makespan_under_budget,
)


def two_by_two(prices=(1.0, 3.0), quotas=(10.0, 1.0), T=((1.0, 4.0), (1.0, 2.0))) -> AllocationProblem:
    """Jobs a, b on types K80, V100 (throughput in units/h)."""
    return AllocationProblem(("a", "b"), ("K80", "V100"), np.array(T), np.array(prices), np.array(quotas),
                             accelerators=("K80", "V100"))


def assert_invariants(p: AllocationProblem, alloc) -> None:
    X = alloc.X
    assert X.shape == p.shape
    assert np.all(X >= 0) and np.all(X <= 1)
    assert np.all(X.sum(axis=1) <= 1 + 1e-7)
    assert np.all(X.sum(axis=0) <= p.quotas + 1e-7)
    np.testing.assert_allclose(alloc.throughput_per_job, (p.throughput * X).sum(axis=1), rtol=1e-9)
    assert alloc.cost_per_hour == pytest.approx(float((X @ p.prices).sum()))


# ------------------------------------------------------------------------ Sec. 4.1
def test_max_total_throughput_hand_solved() -> None:
    # One V100 (quota 1), K80s plentiful.  Giving the V100 to a gains 4-1 = 3 units/h, to b only
    # 2-1 = 1, so a: V100, b: K80; total = 4 + 1 = 5.
    p = two_by_two()
    r = max_total_throughput(p)
    assert_invariants(p, r)
    np.testing.assert_allclose(r.X, [[0, 1], [1, 0]], atol=1e-8)
    assert r.objective == pytest.approx(5.0)
    assert r.cost_per_hour == pytest.approx(3 + 1)


def test_normalised_throughput_changes_the_winner() -> None:
    # a: K80 4, V100 10 (absolute gain 6, relative 0.6); b: K80 1, V100 5 (gain 4, relative 0.8).
    # Unnormalised the V100 goes to a (10 + 1 = 11); normalised to b (0.4 + 1 = 1.4).
    p = two_by_two(T=((4.0, 10.0), (1.0, 5.0)))
    raw = max_total_throughput(p)
    np.testing.assert_allclose(raw.X, [[0, 1], [1, 0]], atol=1e-8)
    assert raw.objective == pytest.approx(11.0)
    norm = max_total_throughput(p, normalise=True)
    assert_invariants(p, norm)
    np.testing.assert_allclose(norm.X, [[1, 0], [0, 1]], atol=1e-8)
    assert norm.objective == pytest.approx(1.4)


# ------------------------------------------------------------------------ Sec. 4.2
def test_throughput_per_dollar_hand_solved() -> None:
    # Units per dollar: a K80 1/1 = 1, V100 4/3 = 1.333; b K80 1, V100 2/3.  a -> V100, b -> K80,
    # objective 4/3 + 1.
    p = two_by_two()
    r = max_throughput_per_dollar(p)
    assert_invariants(p, r)
    np.testing.assert_allclose(r.X, [[0, 1], [1, 0]], atol=1e-8)
    assert r.objective == pytest.approx(4 / 3 + 1)
    assert min_cost is max_throughput_per_dollar


def test_throughput_per_dollar_splits_at_a_fractional_quota() -> None:
    # Half a V100: a takes it (0.5 * 4/3) and fills the rest of its time with K80 (0.5 * 1).
    p = two_by_two(quotas=(10.0, 0.5))
    r = max_throughput_per_dollar(p)
    assert_invariants(p, r)
    np.testing.assert_allclose(r.X, [[0.5, 0.5], [1, 0]], atol=1e-8)
    assert r.objective == pytest.approx(0.5 * 4 / 3 + 0.5 + 1)


def test_catalog_profiles_pick_table1_winners() -> None:
    # paper 003 Table 1 throughputs with the catalog's GCE on-demand prices: per dollar the
    # Transformer is best on the P100 (3.3/1.43 > 3.3/2.144 > 1/0.723), ResNet-50 on the V100.
    cat = Catalog.default()
    p = AllocationProblem.from_catalog(cat, {"t": "transformer", "r": "resnet50"}, ["gce-k80", "gce-p100", "gce-v100"])
    np.testing.assert_allclose(p.throughput, [[1.0, 3.3, 3.3], [1.0, 3.7, 9.6]])
    r = max_throughput_per_dollar(p)
    np.testing.assert_allclose(r.X, [[0, 1, 0], [0, 0, 1]], atol=1e-8)
    # max throughput puts both on the V100 (ties for the Transformer broken either way)
    r2 = max_total_throughput(p)
    assert r2.throughput_per_job == pytest.approx([3.3, 9.6])


def test_from_catalog_overrides_and_errors() -> None:
    cat = Catalog.default()
    p = AllocationProblem.from_catalog(cat, {"t": "transformer"}, ["gce-k80", "gce-v100"],
                                       prices={"gce-v100": 0.9}, quotas={"gce-v100": 2},
                                       throughputs={("t", "gce-k80"): 1.5}, unit="iterations")
    assert p.prices.tolist() == [0.723, 0.9]
    assert p.quotas.tolist() == [math.inf, 2.0]
    assert p.throughput[0, 0] == 1.5
    with pytest.raises(InputError, match="unknown model family"):
        AllocationProblem.from_catalog(cat, {"t": "nosuch"}, ["gce-k80"])
    with pytest.raises(InputError, match="quotas given for unknown"):
        AllocationProblem.from_catalog(cat, {"t": "transformer"}, ["gce-k80"], quotas={"gce-v100": 1})


def test_problem_validation() -> None:
    with pytest.raises(InputError, match="shape"):
        AllocationProblem(("a",), ("K80", "V100"), np.array([[1.0]]), np.array([1.0, 2.0]))
    with pytest.raises(InputError, match="price"):
        AllocationProblem(("a",), ("K80",), np.array([[1.0]]), np.array([0.0]))
    with pytest.raises(InputError, match="zero throughput"):
        AllocationProblem(("a",), ("K80",), np.array([[0.0]]), np.array([1.0]))
    with pytest.raises(InputError, match="appears twice"):
        AllocationProblem(("a", "a"), ("K80",), np.array([[1.0], [1.0]]), np.array([1.0]))
    with pytest.raises(InputError, match="quotas"):
        AllocationProblem(("a",), ("K80",), np.array([[1.0]]), np.array([1.0]), np.array([-1.0]))


# ------------------------------------------------------------------------ Sec. 4.3 SLOs
def test_slo_forces_the_faster_type_hand_solved() -> None:
    # V100 at $5: per dollar a prefers the K80 (1 vs 4/5).  Its SLO, 30 units in 10 h, needs
    # 3 units/h: with x_V = t on the V100 and 1 - t on the K80 the rate is 1 + 3t >= 3, so
    # t >= 2/3, and the objective 1 - 0.2 t is best at t = 2/3.  b (1 unit/h) stays on the K80.
    p = two_by_two(prices=(1.0, 5.0))
    slos = {"a": SLO(30, 10), "b": SLO(10, 10)}
    r = min_cost_with_slos(p, slos)
    assert_invariants(p, r)
    np.testing.assert_allclose(r.X, [[1 / 3, 2 / 3], [1, 0]], atol=1e-7)
    assert r.throughput_per_job[0] >= 3 - 1e-7 and r.throughput_per_job[1] >= 1 - 1e-7
    # without the SLO a would sit on the K80
    np.testing.assert_allclose(max_throughput_per_dollar(p).X, [[1, 0], [1, 0]], atol=1e-8)


def test_slo_dollars_objective_hand_solved() -> None:
    # min 10 (x_K + 5 x_V) s.t. x_K + 4 x_V >= 3, x_K + x_V <= 1: vertices (1/3, 2/3) -> 11/3 $/h
    # and (0, 3/4) -> 15/4 $/h, so (1/3, 2/3); b: K80 full time, 1 $/h.  Total 10*11/3 + 10*1.
    p = two_by_two(prices=(1.0, 5.0))
    r = min_cost_with_slos(p, {"a": SLO(30, 10), "b": SLO(10, 10)}, objective="dollars")
    assert_invariants(p, r)
    np.testing.assert_allclose(r.X, [[1 / 3, 2 / 3], [1, 0]], atol=1e-7)
    assert r.total_cost == pytest.approx(10 * 11 / 3 + 10)
    with pytest.raises(InputError, match="needs a finite SLO for every job"):
        min_cost_with_slos(p, {"a": SLO(30, 10)}, objective="dollars")


def test_slo_infeasible_single_job_names_quota_and_fix() -> None:
    # a needs 50/10 = 5 units/h; the best it can get alone is one V100 = 4 units/h.
    p = two_by_two()
    with pytest.raises(InfeasibleError) as ei:
        min_cost_with_slos(p, {"a": SLO(50, 10)})
    msg = str(ei.value)
    assert "SLO of job 'a' needs 5 units/h but at most 4 are possible with the quota of 1 V100" in msg
    assert "deadline to at least 12.5 h" in msg and "work to at most 40 units" in msg
    # the suggested deadline is indeed feasible
    min_cost_with_slos(p, {"a": SLO(50, 12.5)})


def test_slo_jointly_infeasible_names_binding_quota_and_factor() -> None:
    # a needs 3.9, b 1.9 units/h; each alone is fine, together the single V100 is too little.
    # max lambda: 1 + 3t = 3.9 lambda, 2 - t = 1.9 lambda  ->  lambda = 7 / 9.6 = 72.9 %.
    p = two_by_two()
    slos = {"a": SLO(39, 10), "b": SLO(19, 10)}
    with pytest.raises(InfeasibleError) as ei:
        min_cost_with_slos(p, slos)
    msg = str(ei.value)
    assert "72.9%" in msg and "binding: quota of 1 V100" in msg and "1.371" in msg
    f = 9.6 / 7 * (1 + 1e-6)
    r = min_cost_with_slos(p, {k: SLO(v.work, v.deadline_h * f) for k, v in slos.items()})
    assert_invariants(p, r)


def test_slo_rejects_bad_input() -> None:
    with pytest.raises(InputError):
        SLO(0, 10)
    with pytest.raises(InputError, match="unknown job"):
        min_cost_with_slos(two_by_two(), {"zz": SLO(1, 1)})


# ------------------------------------------------------------------------ Sec. 4.3 makespan
@pytest.mark.parametrize("method", ["bisection", "lp"])
def test_makespan_budget_binding_hand_solved(method: str) -> None:
    # Work a 40, b 20.  Cheapest per unit: a on the V100 (0.75 $/unit), b on the K80 (1 $/unit):
    # the least possible bill is 40*0.75 + 20*1 = $50.  With B = 50 only that placement is
    # affordable; a on the single V100 can run at 4/h (10 h), b on the K80 at 1/h (20 h), so M = 20.
    p = two_by_two()
    r = min_makespan_under_budget(p, {"a": 40, "b": 20}, 50.0, method=method)
    assert_invariants(p, r)
    assert r.makespan_h == pytest.approx(20.0, rel=1e-5)
    assert r.total_cost <= 50.0 * (1 + 1e-6)
    assert np.all(r.throughput_per_job * r.makespan_h >= np.array([40, 20]) * (1 - 1e-5))


@pytest.mark.parametrize("method", ["bisection", "lp"])
def test_makespan_budget_slack_hand_solved(method: str) -> None:
    # With money to spare the fastest makespan rules: max s s.t. a 1 + 3t >= 40 s, b 1 + t' >=
    # 20 s, t + t' <= 1  ->  a gets 0.6 V100, b 0.4 V100: rates 2.8 and 1.4, M = 100/7 h; the
    # bill is (1 K80 + 1 V100) * 100/7 = 4 * 100/7 = $57.14.
    p = two_by_two()
    r = min_makespan_under_budget(p, {"a": 40, "b": 20}, 1000.0, method=method)
    assert r.makespan_h == pytest.approx(100 / 7, rel=1e-5)
    np.testing.assert_allclose(r.X, [[0.4, 0.6], [0.6, 0.4]], atol=1e-5)
    assert r.total_cost == pytest.approx(400 / 7, rel=1e-5)


def test_makespan_budget_too_small_is_infeasible() -> None:
    with pytest.raises(InfeasibleError, match=r"least possible cost \$50.*at least \$50"):
        min_makespan_under_budget(two_by_two(), {"a": 40, "b": 20}, 49.0)
    with pytest.raises(InputError, match="budget"):
        min_makespan_under_budget(two_by_two(), {"a": 40}, -1.0)


# ------------------------------------------------------------------------ random invariants
@pytest.mark.parametrize("seed", range(8))
def test_invariants_on_random_problems(seed: int) -> None:
    rng = np.random.default_rng(seed)
    m, n = int(rng.integers(2, 6)), int(rng.integers(2, 5))
    T = rng.uniform(0.5, 10, size=(m, n)) * (rng.uniform(size=(m, n)) > 0.2)
    T[:, 0] = np.maximum(T[:, 0], 0.5)  # every job can run somewhere
    prices = rng.uniform(0.2, 5, size=n)
    quotas = rng.choice([0.5, 1, 2, 3, np.inf], size=n)
    quotas[0] = np.inf
    p = AllocationProblem(tuple(f"j{i}" for i in range(m)), tuple(f"t{k}" for k in range(n)), T, prices, quotas)
    for pol in (max_total_throughput, max_throughput_per_dollar):
        assert_invariants(p, pol(p))
    # SLOs at half of what each job gets under max-throughput are jointly feasible
    ref = max_total_throughput(p).throughput_per_job
    slos = {job: SLO(0.5 * ref[i] * 10, 10) for i, job in enumerate(p.jobs) if ref[i] > 0}
    r = min_cost_with_slos(p, slos)
    assert_invariants(p, r)
    for i, job in enumerate(p.jobs):
        if job in slos:
            assert r.throughput_per_job[i] >= slos[job].rate * (1 - 1e-6)
    work = {job: float(rng.uniform(5, 50)) for job in p.jobs}
    floor = sum(w * min(prices[k] / T[i, k] for k in range(n) if T[i, k] > 0) for i, w in enumerate(work.values()))
    budget = floor * 1.3
    b = min_makespan_under_budget(p, work, budget)
    e = min_makespan_under_budget(p, work, budget, method="lp")
    assert_invariants(p, b)
    assert b.total_cost <= budget * (1 + 1e-6)
    assert b.makespan_h == pytest.approx(e.makespan_h, rel=1e-4)
