"""Sync strategies, the mini-batch time law and the one Thm 3 bid (issue 8, part 1).

Paper: ``papers/000_3c734f3ffedcac15.txt`` Sec. III (eq. 14-15, N-batch in Sec. III-C) and Thm 3.
Expectations are checked against Monte Carlo of the same law (2 %); the unified Thm 3 bid is
checked against the values the three implementations it replaced produced on the same inputs.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from spotwise.config import load_spec
from spotwise.errors import InputError
from spotwise.market.synthetic import TruncatedGaussianPrice, UniformPrice
from spotwise.planner import PriceModel, optimal_uniform_bid
from spotwise.planner.bids import bid_at_level, thm3_bid
from spotwise.planner.plan import gather_inputs
from spotwise.planner.plan.strategies import _uniform
from spotwise.policies import Observation, Rebid, make_policy
from spotwise.control.sync import AsyncSync, FullSync, NBatchSync, NSync, SyncStrategy, make_sync
from spotwise.theory import ErrorModel, RuntimeModel
from spotwise.theory.runtime import MiniBatchTimeLaw

REL = 0.02
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


# ------------------------------------------------------------------------------ the strategies
@pytest.mark.parametrize("name, n, barrier, needed", [
    ("full", None, True, {1: 1, 3: 3, 8: 8}),
    ("n-sync", 4, True, {1: 1, 3: 3, 4: 4, 8: 4}),
    ("n-batch", 4, False, {1: 4, 3: 4, 8: 4}),
    ("async", None, False, {1: 1, 3: 1, 8: 1}),
])
def test_needed_barrier_and_samples(name: str, n: int | None, barrier: bool, needed: dict[int, int]) -> None:
    s = make_sync(name, n)
    assert s.name == name and s.barrier is barrier
    assert s.n == (1 if name == "async" else n)
    for active, k in needed.items():
        assert s.needed(active) == k
        assert s.samples_per_step(active, 32) == 32 * k


def test_make_sync_builds_each_class_and_ignores_n_where_the_mode_has_none() -> None:
    assert isinstance(make_sync("full"), FullSync) and isinstance(make_sync("async", 7), AsyncSync)
    assert make_sync("n-sync", 3) == NSync(3) and make_sync("n-batch", 2) == NBatchSync(2)
    assert make_sync("full", 5).needed(6) == 6


def test_make_sync_names_the_valid_modes() -> None:
    with pytest.raises(InputError) as e:
        make_sync("nsync", 2)
    msg = e.value.message
    assert "unknown sync mode 'nsync'" in msg
    assert "valid names are full, n-sync, n-batch, async" in msg
    assert "did you mean 'n-sync'?" in msg


@pytest.mark.parametrize("bad", [None, 0, -1, 1.5, True])
def test_n_modes_refuse_a_bad_n(bad: object) -> None:
    for name in ("n-sync", "n-batch"):
        with pytest.raises(InputError, match="sync_n"):
            make_sync(name, bad)  # type: ignore[arg-type]


def test_a_step_needs_an_active_worker() -> None:
    for s in (FullSync(), NSync(2), NBatchSync(2), AsyncSync()):
        with pytest.raises(InputError, match="active worker"):
            s.needed(0)
    with pytest.raises(InputError, match="batch size"):
        FullSync().samples_per_step(2, 0)
    with pytest.raises(InputError, match="overhead"):
        FullSync().expected_round_s(MiniBatchTimeLaw(1.0, 1.0), 2, -1.0)


# ------------------------------------------------------------------------------ the time law
def test_draw_consumes_the_rng_like_the_coordinator_did() -> None:
    """The coordinator's old ``_draw`` (one ``exponential(1.0)`` per call), bit for bit."""
    m, s = 1.7, 0.3
    law = MiniBatchTimeLaw(m, s)
    a, b = np.random.default_rng([5, 3]), np.random.default_rng([5, 3])
    new = [law.draw(a) for _ in range(50)]
    old = [m * ((1.0 - s) + s * float(b.exponential(1.0))) for _ in range(50)]
    assert new == old and all(isinstance(x, float) for x in new)
    arr = law.draw(np.random.default_rng(9), (4, 3))
    ref = m * ((1 - s) + s * np.random.default_rng(9).exponential(1.0, size=(4, 3)))
    assert isinstance(arr, np.ndarray) and np.array_equal(arr, ref)


def test_mean_and_variance_match_monte_carlo() -> None:
    law = MiniBatchTimeLaw(2.0, 0.4)
    x = np.asarray(law.draw(np.random.default_rng(1), 400_000))
    assert law.mean == 2.0 and x.mean() == pytest.approx(law.mean, rel=REL)
    assert law.variance == pytest.approx(0.64) and x.var() == pytest.approx(law.variance, rel=REL)


@pytest.mark.parametrize("m, s, n, ks", [(2.0, 1.0, 6, (1, 3, 6)), (1.5, 0.3, 8, (1, 4, 8)), (0.5, 0.7, 3, (2, 3))])
def test_order_stat_mean_and_variance_match_monte_carlo(m: float, s: float, n: int, ks: tuple[int, ...]) -> None:
    law = MiniBatchTimeLaw(m, s)
    draws = np.sort(np.asarray(law.draw(np.random.default_rng([n, 7]), (200_000, n))), axis=1)
    for k in ks:
        col = draws[:, k - 1]
        assert col.mean() == pytest.approx(law.order_stat_mean(k, n), rel=REL), (k, n)
        assert col.var() == pytest.approx(law.order_stat_variance(k, n), rel=3 * REL), (k, n)


def test_order_stat_closed_forms_and_limits() -> None:
    law = MiniBatchTimeLaw(3.0, 1.0)
    assert law.order_stat_mean(4, 4) == pytest.approx(3.0 * (1 + 1 / 2 + 1 / 3 + 1 / 4))  # m H_4 (eq. 14)
    assert law.order_stat_mean(2, 5) == pytest.approx(3.0 * (1 / 5 + 1 / 4))  # m (H_5 - H_3) (eq. 15)
    assert MiniBatchTimeLaw(3.0, 0.0).order_stat_mean(3, 7) == 3.0  # no straggler noise: every draw is m
    with pytest.raises(InputError):
        law.order_stat_mean(5, 4)
    with pytest.raises(InputError):
        MiniBatchTimeLaw(1.0, 1.5)
    with pytest.raises(InputError):
        MiniBatchTimeLaw(float("nan"), 0.5)


def test_the_exponential_runtime_model_is_the_law_with_straggler_one() -> None:
    rm = RuntimeModel.exponential(0.5, delta=0.25)
    law = MiniBatchTimeLaw.exponential(0.5)
    assert law == MiniBatchTimeLaw(2.0, 1.0) and rm.law == law
    assert rm.expected(6, "full") == pytest.approx(law.order_stat_mean(6, 6) + 0.25, rel=1e-12)
    assert rm.expected(6, "n-sync", 2) == pytest.approx(NSync(2).expected_round_s(law, 6, 0.25), rel=1e-12)
    assert rm.expected(6, "n-batch", 3) == pytest.approx(NBatchSync(3).expected_round_s(law, 6, 0.25), rel=1e-12)


# ------------------------------------------------------------------------------ expected round time
def _mc_barrier(law: MiniBatchTimeLaw, strategy: SyncStrategy, active: int, rng: np.random.Generator) -> float:
    """Rounds of ``active`` workers, one mini-batch each; the step commits with the ``needed`` fastest."""
    draws = np.sort(np.asarray(law.draw(rng, (200_000, active))), axis=1)
    return float(draws[:, strategy.needed(active) - 1].mean())


def _mc_continuous(law: MiniBatchTimeLaw, strategy: SyncStrategy, active: int, rng: np.random.Generator) -> float:
    """Workers that never wait: ``active`` renewal processes; a commit every ``needed`` completions.

    The long-run mean time per commit (the first 10 % of the horizon dropped as warm-up)."""
    per_worker = 40_000
    finish = np.cumsum(np.asarray(law.draw(rng, (active, per_worker))), axis=1)
    horizon = float(finish[:, -1].min())  # every worker still busy up to here: no truncation
    done = np.sort(finish[finish <= horizon])
    commits = done[strategy.needed(active) - 1::strategy.needed(active)]
    warm = commits[commits.size // 10:]
    return float((warm[-1] - warm[0]) / (warm.size - 1))


@pytest.mark.parametrize("strategy", [FullSync(), NSync(1), NSync(3), NSync(8), NBatchSync(1), NBatchSync(3),
                                      NBatchSync(10), AsyncSync()], ids=lambda s: s.describe())
@pytest.mark.parametrize("active", [1, 4, 6])
@pytest.mark.parametrize("m, s", [(1.0, 1.0), (2.0, 0.3)])
def test_expected_round_s_matches_monte_carlo(strategy: SyncStrategy, active: int, m: float, s: float) -> None:
    law = MiniBatchTimeLaw(m, s)
    rng = np.random.default_rng([active, int(10 * m), int(10 * s)])
    mc = (_mc_barrier if strategy.barrier else _mc_continuous)(law, strategy, active, rng)
    expected = strategy.expected_round_s(law, active)
    assert mc == pytest.approx(expected, rel=REL)
    assert strategy.expected_round_s(law, active, 0.5) == pytest.approx(expected + 0.5)


def test_nbatch_from_a_synchronised_start_is_n_over_y_mu_for_exponential_times() -> None:
    """Paper 000 Sec. III-C: with ``r ~ Exp(mu)`` the N-th completion of ``y`` fresh workers has mean N/(y mu)."""
    law = MiniBatchTimeLaw.exponential(2.0)
    y, N = 4, 6
    finish = np.cumsum(np.asarray(law.draw(np.random.default_rng(3), (100_000, y, N))), axis=2).reshape(100_000, -1)
    nth = np.partition(finish, N - 1, axis=1)[:, N - 1]
    assert nth.mean() == pytest.approx(NBatchSync(N).expected_round_s(law, y), rel=REL)
    assert NBatchSync(N).expected_round_s(law, y) == pytest.approx(N / (y * 2.0))


# ------------------------------------------------------------------------------ the one Thm 3 bid
UNIF = PriceModel.from_distribution(UniformPrice(0.2, 1.0))
GAUSS = PriceModel.from_distribution(TruncatedGaussianPrice(0.6, 0.175))
BID_MODEL = ErrorModel(alpha=0.1, c=0.5, mu=1.0, L=1.0, M=1.0, G1=1.0)
PLAN_MODEL = ErrorModel(alpha=0.1, c=1.0, mu=0.05, L=1.0, M=2.0, G1=2.0)
EXP = RuntimeModel.exponential(1.0)


def _same(x: float) -> object:
    return pytest.approx(x, rel=1e-12, abs=0.0)


# Expected values: printed by spotwise.planner.bidding.optimal_uniform_bid at commit e4d4ac6 (before the
# Thm 3 bid was unified), for n=8, eps=0.05, deadline=400 s, EXP runtimes and BID_MODEL.
@pytest.mark.parametrize("prices, kw, J, bid", [
    (UNIF, {}, 64, 0.5478857142857143),
    (UNIF, {"sync": "n-sync", "n_sync": 4}, 72, 0.2913714285714286),
    (UNIF, {"sync": "n-batch", "n_sync": 4}, 72, 0.272),
    (GAUSS, {}, 64, 0.576567336607893),
    (GAUSS, {"sync": "n-sync", "n_sync": 4}, 72, 0.2191588531655403),
    (GAUSS, {"sync": "n-batch", "n_sync": 4}, 72, 0.1821443077418105),
])
def test_thm3_bid_equals_the_old_optimal_uniform_bid(prices: PriceModel, kw: dict, J: int, bid: float) -> None:
    plan = optimal_uniform_bid(prices, EXP, BID_MODEL, n=8, eps=0.05, deadline=400.0, **kw)
    assert plan.iterations == J and plan.bids == (_same(bid),) * 8
    R = EXP.expected(8, kw.get("sync", "full"), kw.get("n_sync"))
    one = thm3_bid(prices, J, R, 400.0)
    assert one.feasible and one.level == pytest.approx(J * R / 400.0) and one.bid == _same(bid)


# Expected values: printed by spotwise.planner.plan._uniform at commit e4d4ac6 (before the unification) on
# gather_inputs(examples/zhang-uniform.yaml, PLAN_MODEL): (n, J, deadline, sync, N) -> (bid, E[time], E[cost] $).
@pytest.mark.parametrize("args, out", [
    ((8, None, None, "full", None), (0.6000000000000001, 732.0001127173734, 0.3253333834299438)),
    ((4, 100, 500.0, "full", None), (0.2522233576480396, 499.99999999999994, 0.008200216021962112)),
    ((8, 50, 300.0, "n-sync", 4), (0.23141540268307623, 299.9999999999999, 0.005647120249570962)),
])
def test_thm3_bid_equals_the_old_planner_uniform(args: tuple, out: tuple[float, float, float]) -> None:
    inp = gather_inputs(load_spec(EXAMPLES / "zhang-uniform.yaml"), error_model=PLAN_MODEL)
    n, J, deadline, sync, N = args
    J = inp.J if J is None else J
    deadline = inp.deadline if deadline is None else deadline
    assert _uniform(inp, n, J, deadline, sync, N) == tuple(_same(v) for v in out)
    assert thm3_bid(inp.prices, J, inp.runtime.expected(n, sync, N), deadline).bid == _same(out[0])


def test_thm3_bid_of_n_batch_uses_the_continuous_step_time() -> None:
    """N-batch workers never wait (paper 000 Sec. III): ``y`` of them commit a step of ``N``
    mini-batches every ``N (E[r] + Delta) / y`` s in the long run (renewal-reward; eq. 42's
    ``N / (y mu)`` plus the overhead), not the first-``N``-of-``y`` order statistic of eq. 14-15 the
    planner used before issue 18 (which made N-batch look ~3x slower and dearer: 0.2136 $/h bid,
    $0.0078 on this job).  The Thm 3 bid and Lemma 2 cost follow from that step time."""
    import numpy as np

    from spotwise.planner.bids import expected_cost_uniform, expected_time_uniform

    inp = gather_inputs(load_spec(EXAMPLES / "zhang-uniform.yaml"), error_model=PLAN_MODEL)
    n, J, deadline, N = 8, 80, 1000.0, 2
    R = N * (float(np.mean(inp.runtime.samples)) + float(inp.runtime.delta)) / n
    assert R < 0.5 * inp.runtime.expected(n, "n-batch", N)  # far below the order statistic
    one = thm3_bid(inp.prices, J, R, deadline)
    assert one.feasible and one.level == pytest.approx(J * R / deadline)
    F = float(inp.prices.cdf(one.bid))
    assert _uniform(inp, n, J, deadline, "n-batch", N) == (
        _same(one.bid), _same(float(expected_time_uniform(J, R, F))),
        _same(float(expected_cost_uniform(J, n, R, inp.prices, one.bid)) / 3600.0))


# Expected values: printed by DynamicBids.decide at commit e4d4ac6 (before the unification), for switch_step=5,
# workers=8, iterations=100, deadline_s=900, mean_round_s=3, at step 5 with 4 workers provisioned, at time t.
@pytest.mark.parametrize("price, t, bid", [
    ({"kind": "uniform", "low": 0.2, "high": 1.0}, 100.0, 0.48500000000000004),
    ({"kind": "uniform", "low": 0.2, "high": 1.0}, 600.0, 0.96),
    ({"kind": "uniform", "low": 0.2, "high": 1.0}, 1000.0, 1.0),
    ({"kind": "gaussian", "mean": 0.6, "variance": 0.175, "low": 0.0}, 100.0, 0.4994356663425309),
    ({"kind": "gaussian", "mean": 0.6, "variance": 0.175, "low": 0.0}, 600.0, 1.303940936603111),
    ({"kind": "gaussian", "mean": 0.6, "variance": 0.175, "low": 0.0}, 1000.0, 3.1144097359220515),
    ({"kind": "quantiles", "values": [0.1, 0.3, 0.35, 0.5, 0.9]}, 100.0, 0.32125),
    ({"kind": "quantiles", "values": [0.1, 0.3, 0.35, 0.5, 0.9]}, 600.0, 0.82),
    ({"kind": "quantiles", "values": [0.1, 0.3, 0.35, 0.5, 0.9]}, 1000.0, 0.9),
])
def test_thm3_bid_equals_the_old_dynamic_bids_policy(price: dict, t: float, bid: float) -> None:
    pol = make_policy("dynamic-bids", {"switch_step": 5, "workers": 8, "iterations": 100, "deadline_s": 900.0,
                                       "mean_round_s": 3.0, "price": price})
    obs = Observation(step=5, t=t, active=4, provisioned=4, max_workers=8, reference_workers=8, base_lr=0.1, lr=0.1,
                      sync="full")
    decisions = pol.decide(obs)
    assert decisions == pol.decide(obs), "pure: the same observation gives the same decisions"
    rebid = decisions[0]
    assert isinstance(rebid, Rebid) and rebid.bids == (_same(bid),) * 8


def test_thm3_bid_levels_and_the_top_of_the_range() -> None:
    b = thm3_bid(UNIF, 10, 2.0, 40.0)
    assert b.level == 0.5 and b.bid == pytest.approx(0.6) and b.feasible
    late = thm3_bid(UNIF, 10, 2.0, 10.0)
    assert late.level == 2.0 and not late.feasible and late.bid == pytest.approx(1.0)
    over = thm3_bid(lambda q: 7.0 * q, 3, 1.0, 0.0)  # no time left: the top of the price range
    assert over.level == float("inf") and over.bid == 7.0
    assert bid_at_level(GAUSS, 1.0) == GAUSS.upper  # F^-1(1) = inf for an unbounded law: the finite top
