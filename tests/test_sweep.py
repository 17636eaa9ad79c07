"""Trace sweeps (spotwise.sim.sweep.engine), the hindsight oracle, and the two sweep policies.

Hand-computed tiny cases on synthetic step series first (every number below is worked out in
the comments, not read back from the code), then the policies' rules one by one, bad inputs,
and sweeps over the real traces under ../shared/data/traces (skipped, with the reason, when
they are absent).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from spotwise.errors import InfeasibleError, InputError
from spotwise.market.catalog import Catalog
from spotwise.market.series import SeriesMeta, StepSeries
from spotwise.policies.base import Migrate, Observation, PlaceQuote, SwitchMarket
from spotwise.policies.deadline_guard import UniformProgress
from spotwise.policies.migration import PriceMigration
from spotwise.sim.bounds.oracle import hindsight_oracle, place_oracle
from spotwise.sim.sweep.places import Place, build_places
from spotwise.sim.sweep.engine import (
    STRATEGIES,
    Strategy,
    SweepJob,
    parse_strategies,
    run_window,
    sweep,
    window_starts,
    wilson,
)

TRACES = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "traces"
AWS_COST = TRACES / "training-on-a-dime" / "logs" / "aws" / "cost"
SKY_AVAIL = TRACES / "skypilot-spot-traces" / "availability" / "1-node" / "aws-02-15-2023"
GCP_DIR = TRACES / "gcp-transient-lifetime" / "data"

H = 3600.0
T0 = 1_000_000.0  # an epoch-like origin: the engine must work in absolute times
OD = 3.06         # p3.2xlarge on-demand $/h (the catalog's)
P3 = Catalog.default().instance("p3.2xlarge")


def need(path: Path) -> Path:
    if not path.exists():
        pytest.skip(f"real traces not found at {path} (clone the project next to shared/ to run these)")
    return path


# ----------------------------------------------------------------------------- synthetic places
def price_series(points: list[tuple[float, float]], end: float, zone: str = "z-1a") -> StepSeries:
    t, v = zip(*points)
    return StepSeries(np.array(t, float), np.array(v, float), end,
                      SeriesMeta(f"price:{zone}", "price", "aws", zone[:-1], zone, "p3.2xlarge"))


def cap_series(points: list[tuple[float, float]], end: float, zone: str = "z-1a") -> StepSeries:
    t, v = zip(*points)
    return StepSeries(np.array(t, float), np.array(v, float), end,
                      SeriesMeta(f"cap:{zone}", "availability", "aws", zone[:-1], zone, "p3.2xlarge"))


def place(prices: list[tuple[float, float]], end: float, cap: list[tuple[float, float]] | None = None,
          zone: str = "z-1a", region: str | None = None, speed: float = 1.0, od: float = OD) -> Place:
    return Place(zone, region or zone[:-1], P3, price_series(prices, end, zone), od, speed,
                 None if cap is None else cap_series(cap, end, zone))


SPOT_NO_GUARD = Strategy("spot", "home", "on-demand", "spot", ())


# ----------------------------------------------------------------------------- hand cases: run_window
def test_constant_price_cost_and_finish_are_exact() -> None:
    # 2 h of work, 4 h deadline, 300 s restart, 2 workers at 0.9 $/h, coordinator 0.5 $/h.
    # The job starts at once, restarts for 300 s, computes 2 h: finish 7500 s.
    job = SweepJob(2 * H, 4 * H, workers=2, restart_s=300, coordinator_per_hour=0.5)
    p = place([(T0, 0.9)], T0 + 20 * H)
    for strat in (SPOT_NO_GUARD, STRATEGIES["spot+guard"], STRATEGIES["no-interruptions"]):
        r = run_window(job, [p], p, T0, strat)
        assert r.finish_s == pytest.approx(7500.0, abs=1e-6), strat.name
        assert r.deadline_met and r.revocations == 0 and r.market_switches == 0
        assert r.cost == pytest.approx(7500 / H * 0.9 * 2 + 7500 / H * 0.5, rel=1e-9), strat.name
        assert r.spot_s == pytest.approx(7500.0) and r.on_demand_s == 0.0


def test_on_demand_strategy_cost() -> None:
    job = SweepJob(2 * H, 4 * H, workers=2, restart_s=300, coordinator_per_hour=0.5)
    p = place([(T0, 0.9)], T0 + 20 * H)
    r = run_window(job, [p], p, T0, STRATEGIES["on-demand"])
    assert r.finish_s == pytest.approx(7500.0)
    assert r.cost == pytest.approx(7500 / H * OD * 2 + 7500 / H * 0.5, rel=1e-9)
    assert r.on_demand_s == pytest.approx(7500.0) and r.spot_s == 0.0 and r.bid is None


def test_price_above_bid_revokes_and_restart_is_counted() -> None:
    # price 0.9, then 5.0 (> the on-demand bid 3.06) on [1 h, 1.5 h), then 0.9 again.
    # run 0..3600: 300 s restart + 3300 s progress; revoked at 3600 (billed 3600 s at 0.9);
    # back at 5400, restart to 5700, 7200 - 3300 = 3900 s left -> finish 9600, billed 4200 s at 0.9.
    job = SweepJob(2 * H, 4 * H, workers=1, restart_s=300, coordinator_per_hour=0.2)
    p = place([(T0, 0.9), (T0 + 3600, 5.0), (T0 + 5400, 0.9)], T0 + 20 * H)
    r = run_window(job, [p], p, T0, SPOT_NO_GUARD)
    assert r.revocations == 1
    assert r.finish_s == pytest.approx(9600.0)
    assert r.cost == pytest.approx((3600 + 4200) / H * 0.9 + 9600 / H * 0.2, rel=1e-9)
    assert r.spot_s == pytest.approx(3600 + 4200)
    # bidding without a limit ("no-interruptions") pays the 5.0 $/h instead and is never revoked
    r2 = run_window(job, [p], p, T0, STRATEGIES["no-interruptions"])
    assert r2.revocations == 0 and r2.finish_s == pytest.approx(7500.0)
    assert r2.cost == pytest.approx((3600 * 0.9 + 1800 * 5.0 + 2100 * 0.9) / H + 7500 / H * 0.2, rel=1e-9)


def test_billing_minimum_applies_to_a_short_interval() -> None:
    # capacity for the first 30 s only, then from 1 h on: the first interval (30 s) is billed 60 s.
    # second start at 3600: restart to 3900, 7200 s of work -> finish 11100, billed 7500 s.
    job = SweepJob(2 * H, 4 * H, restart_s=300)
    p = place([(T0, 0.9)], T0 + 20 * H, cap=[(T0, 1), (T0 + 30, 0), (T0 + 3600, 1)])
    r = run_window(job, [p], p, T0, SPOT_NO_GUARD)
    assert r.revocations == 1 and r.finish_s == pytest.approx(11100.0)
    assert r.cost == pytest.approx((60 + 7500) / H * 0.9, rel=1e-9)


def test_no_interruptions_ignores_an_availability_trace() -> None:
    # "as if never revoked": also where an availability trace says there is no capacity
    job = SweepJob(2 * H, 4 * H, restart_s=300)
    p = place([(T0, 0.9)], T0 + 20 * H, cap=[(T0, 1), (T0 + 30, 0), (T0 + 3600, 1)])
    r = run_window(job, [p], p, T0, STRATEGIES["no-interruptions"])
    assert r.revocations == 0 and r.finish_s == pytest.approx(7500.0) and r.cost == pytest.approx(7500 / H * 0.9)


def test_thm3_bid_is_the_history_median() -> None:
    # 2 h work / 4 h deadline: Thm 3 level J E[R] / theta = 0.5, the time-weighted median of the
    # history_s = 4 h before the start: 1 h at 0.5, 2 h at 0.7, 1 h at 1.2 -> F(0.5) = 0.25,
    # F(0.7) = 0.75: median 0.7.  From the start the price is 0.6 (<= 0.7): the job runs.
    job = SweepJob(2 * H, 4 * H, restart_s=300, history_s=4 * H)
    p = place([(T0 - 4 * H, 0.5), (T0 - 3 * H, 0.7), (T0 - H, 1.2), (T0, 0.6)], T0 + 20 * H)
    r = run_window(job, [p], p, T0, STRATEGIES["thm3-bid"])
    assert r.bid == pytest.approx(0.7)
    assert r.finish_s == pytest.approx(7500.0) and r.cost == pytest.approx(7500 / H * 0.6)
    # at 0.75 (above the bid, below on-demand) the Thm 3 bid never runs; the on-demand bid does
    p2 = place([(T0 - 4 * H, 0.5), (T0 - 3 * H, 0.7), (T0 - H, 1.2), (T0, 0.75)], T0 + 20 * H)
    r2 = run_window(job, [p2], p2, T0, STRATEGIES["thm3-bid"])
    assert r2.bid == pytest.approx(0.7) and r2.finish_s is None and not r2.deadline_met and r2.spent == 0.0
    # it spent nothing, but still owes the whole job: priced at on-demand (work + one restart), never "free"
    assert r2.cost == pytest.approx((2 * H + 300) / H * p2.on_demand_per_hour)
    assert run_window(job, [p2], p2, T0, SPOT_NO_GUARD).finish_s == pytest.approx(7500.0)


def _outage_place() -> Place:
    # spot (0.9 $/h) for 30 min, none on [30 min, 2 h), back from 2 h on
    return place([(T0 - 2 * H, 0.9)], T0 + 30 * H, cap=[(T0 - 2 * H, 1), (T0 + 1800, 0), (T0 + 7200, 1)])


def test_guard_switches_to_on_demand_then_back_to_spot() -> None:
    # C = 3 h, D = 4 h, d = 300 s, decisions every 600 s; ep(t) = 0.75 t.
    # 0..1800 on spot: 1500 s done.  Revoked at 1800 (ep = 1350: ahead, wait).  At 2400
    # ep = 1800 > 1500 and idle: on-demand (rule 1), ready at 2700.  Spot is back at 7200:
    # done = 1500 + 4500 = 6000 >= ep(7200 + 2d) = 5850 and slack 2400 - 2d > net 1200: back to
    # spot (rule 3), ready 7500, 4800 s left -> finish 12300 <= 14400.
    job = SweepJob(3 * H, 4 * H, restart_s=300, history_s=H)
    p = _outage_place()
    r = run_window(job, [p], p, T0, STRATEGIES["spot+guard"], tick_s=600)
    assert r.deadline_met and r.finish_s == pytest.approx(12300.0)
    assert r.market_switches == 2 and r.revocations == 1
    assert r.on_demand_s == pytest.approx(7200 - 2400)
    assert r.spot_s == pytest.approx(1800 + 12300 - 7200)
    assert r.cost == pytest.approx(((1800 + 5100) * 0.9 + 4800 * OD) / H, rel=1e-9)
    # without a guard (Thm 3 bid = 0.9, the only price in the history; or the on-demand bid) the
    # job waits out the outage: restart at 7200, ready 7500, 10800 - 1500 s left -> 16800 > 14400
    for strat in (STRATEGIES["thm3-bid"], SPOT_NO_GUARD):
        miss = run_window(job, [p], p, T0, strat, tick_s=600)
        assert not miss.deadline_met and miss.finish_s == pytest.approx(16800.0), strat.name
        assert miss.on_demand_s == 0.0


def test_guard_safety_net_on_a_tight_deadline() -> None:
    # C = 3 h, D = 3 h 20 min: 1200 s of slack, 900 s after the first restart.  Spot until
    # 4200, then none until 2 h later.  At the 4200 tick the job is idle but *ahead* of
    # uniform progress (done 3900 >= ep(4200) = 0.9 * 4200 = 3780), so rule 1 would wait; the
    # slack 12000 - 4200 - 6900 = 900 is below 2d + the decision gap = 1200: safety net
    # (rule 4), on-demand at 4200, ready 4500, 6900 s left -> finish 11400.  Spot returns at
    # 6200 but the job stays on on-demand (until the end).
    job = SweepJob(3 * H, 3 * H + 1200, restart_s=300, history_s=H)
    p = place([(T0 - 2 * H, 0.9)], T0 + 30 * H, cap=[(T0 - 2 * H, 1), (T0 + 4200, 0), (T0 + 6200, 1)])
    r = run_window(job, [p], p, T0, STRATEGIES["spot+guard"], tick_s=600)
    assert r.deadline_met and r.finish_s == pytest.approx(11400.0)
    assert r.market_switches == 1 and r.on_demand_s == pytest.approx(11400 - 4200)
    # without the guard: restart at 6200, ready 6500, 6900 s left -> 13400 > 12000
    miss = run_window(job, [p], p, T0, SPOT_NO_GUARD, tick_s=600)
    assert not miss.deadline_met and miss.finish_s == pytest.approx(13400.0)


# ----------------------------------------------------------------------------- oracle
def test_oracle_picks_cheapest_place_and_slots() -> None:
    # A: 1.0 $/h for 2 h then 0.5 $/h; B: 0.8 $/h flat.  2 h of work in a 4 h window, coordinator
    # 0.1 $/h while computing: A = 2 h * (0.5 + 0.1) = 1.2, B = 2 h * 0.9 = 1.8.
    job = SweepJob(2 * H, 4 * H, coordinator_per_hour=0.1)
    a = place([(T0, 1.0), (T0 + 2 * H, 0.5)], T0 + 10 * H, zone="z-1a")
    b = place([(T0, 0.8)], T0 + 10 * H, zone="z-1b")
    o = hindsight_oracle(job, [b, a], T0)
    assert o.place == a.id and o.cost == pytest.approx(1.2) and o.spot_h == pytest.approx(2.0) and o.on_demand_h == 0.0
    assert place_oracle(job, b, T0)[0] == pytest.approx(1.8)
    # 3 h of work at A: both 0.5 $/h hours plus one at 1.0: 2 * 0.6 + 1.1 = 2.3 (B: 3 * 0.9 = 2.7)
    job3 = SweepJob(3 * H, 4 * H, coordinator_per_hour=0.1, restart_s=0)
    o3 = hindsight_oracle(job3, [a, b], T0)
    assert o3.place == a.id and o3.cost == pytest.approx(2.3)


def test_oracle_caps_at_on_demand_and_skips_no_capacity() -> None:
    # spot above on-demand (5 $/h > 3.06): on-demand for the whole 2 h, 2 workers: 2 * 2 * 3.06
    job = SweepJob(2 * H, 4 * H, workers=2)
    c = place([(T0, 5.0)], T0 + 10 * H)
    o = hindsight_oracle(job, [c], T0)
    assert o.cost == pytest.approx(2 * 2 * OD) and o.on_demand_h == pytest.approx(2.0) and o.spot_h == 0.0
    # 0.5 $/h but capacity only in the first hour: 1 h spot + 1 h on-demand
    d = place([(T0, 0.5)], T0 + 10 * H, cap=[(T0, 1), (T0 + H, 0)])
    o2 = hindsight_oracle(SweepJob(2 * H, 4 * H), [d], T0)
    assert o2.cost == pytest.approx(0.5 + OD) and o2.spot_h == pytest.approx(1.0) and o2.on_demand_h == pytest.approx(1.0)


def test_oracle_infeasible() -> None:
    job = SweepJob(2 * H, 4 * H)
    short = place([(T0, 0.5)], T0 + 3 * H)  # the trace ends before the deadline
    with pytest.raises(InfeasibleError):
        hindsight_oracle(job, [short], T0)
    slow = place([(T0, 0.5)], T0 + 10 * H, speed=0.4)  # 5 h of compute at this speed > 4 h
    with pytest.raises(InfeasibleError):
        hindsight_oracle(job, [slow], T0)
    with pytest.raises(InfeasibleError):
        place_oracle(job, slow, T0)


def test_window_never_beats_oracle() -> None:
    job = SweepJob(3 * H, 4 * H, restart_s=300, history_s=H)
    p = _outage_place()
    orc = hindsight_oracle(job, [p], T0)
    # oracle: 3 h of compute, spot 0.9 on [0, 0.5 h) and [2 h, 4 h): 2.5 h spot + 0.5 h on-demand
    assert orc.cost == pytest.approx(2.5 * 0.9 + 0.5 * OD)
    for name in ("spot+guard", "on-demand", "spotwise"):
        assert run_window(job, [p], p, T0, STRATEGIES[name]).cost >= orc.cost - 1e-9


# ----------------------------------------------------------------------------- UniformProgress rules
def obs(step: int, t: float, *, active: int = 0, market: str = "spot", spot: bool | None = False, deadline: float = 4 * H,
        restart: float = 300.0, gap: float = 0.0, places: tuple[PlaceQuote, ...] = (), place_key=("z-1a", "p3.2xlarge"),
        target: int = 100, step_s: float = 72.0) -> Observation:
    """C = target * step_s = 7200 s by default; D = 4 h; d = 300 s."""
    return Observation(step=step, t=t, active=active, provisioned=1, max_workers=1, reference_workers=1, base_lr=1.0,
                       lr=1.0, sync="full", deadline_s=deadline, target_iterations=target, market=market,
                       spot_available=spot, step_s=step_s, restart_s=restart, place=place_key, places=places,
                       next_decision_s=gap)


def markets(decisions) -> list[str]:
    assert all(isinstance(d, SwitchMarket) for d in decisions)
    return [d.market for d in decisions]


def test_rule1_idle_and_behind_goes_on_demand() -> None:
    g = UniformProgress()
    # t = 2 h: ep = 3600; done 20 steps * 72 = 1440 < 3600, idle, no spot -> on-demand
    assert markets(g.decide(obs(20, 2 * H))) == ["on-demand"]
    # ahead (done 3600 >= ep(1 h) = 1800): wait for spot
    assert g.decide(obs(50, H)) == []
    # behind but spot is available (capacity coming back): take the risk (rule 2)
    assert g.decide(obs(20, 2 * H, spot=True)) == []


def test_exploitation_no_decision_while_running_on_spot() -> None:
    g = UniformProgress()
    # far behind and with slack below the net, but running on spot: stay (rules 2/exploitation)
    assert g.decide(obs(0, 4 * H - 7200 - 100, active=1, spot=True)) == []
    assert g.decide(obs(10, 3 * H, active=1, spot=True)) == []


def test_rule3_hysteresis_returns_only_when_ahead_of_ep_t_plus_2d() -> None:
    g = UniformProgress()
    # on-demand at t = 1 h: ep(t) = 1800, ep(t + 2d) = ep(4200) = 2100
    assert g.decide(obs(28, H, market="on-demand", spot=True)) == []  # 2016: ahead of ep(t), not of ep(t+2d)
    assert markets(g.decide(obs(30, H, market="on-demand", spot=True))) == ["spot"]  # 2160 >= 2100
    assert g.decide(obs(30, H, market="on-demand", spot=False)) == []  # no spot to go back to
    # hysteresis_restarts=0 returns as soon as done >= ep(t)
    assert markets(UniformProgress(hysteresis_restarts=0).decide(obs(28, H, market="on-demand", spot=True))) == ["spot"]
    # ahead of ep(t + 2d) but the slack after two more restarts would fall into the net: stay.
    # D = 8000, t = 7000: ep(7600) = 6840 = done (95 steps); slack = 1000 - 360 = 640; 640 - 600 < 600
    assert g.decide(obs(95, 7000, market="on-demand", spot=True, deadline=8000)) == []


def test_rule4_safety_net_counts_the_decision_gap() -> None:
    g = UniformProgress()
    # 50 steps done (3600 s left); t = D - 3600 - 700: slack 700 s; net = 2d = 600 (+ gap)
    t = 4 * H - 3600 - 700
    assert g.decide(obs(50, t, spot=True)) == []                            # 700 >= 600, spot back: rule 2
    assert markets(g.decide(obs(50, t, spot=True, gap=200))) == ["on-demand"]  # 700 < 600 + 200
    # the net fires even when ahead of uniform progress (where rule 1 would wait)
    t2 = 13300.0  # ep = 6650; done 93 * 72 = 6696 (ahead), 504 s left, slack 1100 - 504 = 596 < 600
    assert markets(g.decide(obs(93, t2, spot=False))) == ["on-demand"]
    # with safety_restarts=1 the net is d = 300 <= 596: rule 1 applies, and the job is ahead: wait
    assert UniformProgress(safety_restarts=1).decide(obs(93, t2, spot=False)) == []
    # finished, or nothing to guard
    assert g.decide(obs(100, 2 * H)) == []
    assert g.decide(Observation(0, 0.0, 0, 1, 1, 1, 1.0, 1.0, "full")) == []


def test_guard_defers_to_available_spot_elsewhere() -> None:
    other = PlaceQuote("z-1b", "p3.2xlarge", 0.9, 1.0, True, "z-1")
    here = PlaceQuote("z-1a", "p3.2xlarge", 0.9, 1.0, False, "z-1")
    o = obs(20, 2 * H, places=(here, other))
    assert markets(UniformProgress().decide(o)) == ["on-demand"]
    assert UniformProgress(defer_to_places=True).decide(o) == []
    none_free = obs(20, 2 * H, places=(here, PlaceQuote("z-1b", "p3.2xlarge", 0.9, 1.0, False, "z-1")))
    assert markets(UniformProgress(defer_to_places=True).decide(none_free)) == ["on-demand"]


def test_uniform_progress_bad_params() -> None:
    with pytest.raises(ValueError):
        UniformProgress(safety_restarts=0.5)
    with pytest.raises(ValueError):
        UniformProgress(hysteresis_restarts=-1)


# ----------------------------------------------------------------------------- PriceMigration
def q(zone: str, price: float, available: bool = True, region: str = "r-1", speed: float = 1.0) -> PlaceQuote:
    return PlaceQuote(zone, "p3.2xlarge", price, speed, available, region)


def mig_obs(places, *, active: int = 1, deadline: float = 10 * H, t: float = 0.0, gap: float = 0.0) -> Observation:
    # 100 steps * 72 s = 2 h left; restart 300 s
    return obs(0, t, active=active, spot=active > 0, deadline=deadline, places=places, place_key=("a", "p3.2xlarge"), gap=gap)


def test_migration_moves_only_above_min_saving_with_restart_counted() -> None:
    m = PriceMigration(min_saving=0.05)
    # stay = 1.0 * 2 h = 2.0; move to 0.9: 0.9 * (2 h + 300 s) = 1.875 -> saves 6.25 % > 5 %
    d = m.decide(mig_obs((q("a", 1.0), q("b", 0.9))))
    assert len(d) == 1 and isinstance(d[0], Migrate) and d[0].region == "b" and d[0].instance_type == "p3.2xlarge"
    # 0.94: 6 % cheaper per hour, but 0.94 * 2.0833 = 1.958 saves only 2.1 % once the restart counts
    assert m.decide(mig_obs((q("a", 1.0), q("b", 0.94)))) == []
    # the cheapest available candidate wins; unavailable ones are ignored
    d = m.decide(mig_obs((q("a", 1.0), q("b", 0.9), q("c", 0.85), q("e", 0.1, available=False))))
    assert d[0].region == "c"
    # a faster type needs fewer hours: speed 2 at 1.8 $/h: 1.8 * (1 h + 300 s) = 1.95 < 2.0 but < 5 %
    assert m.decide(mig_obs((q("a", 1.0), q("f", 1.8, speed=2.0)))) == []
    assert m.decide(mig_obs((q("a", 1.0), q("f", 1.6, speed=2.0))))[0].region == "f"  # 1.7333: 13 %


def test_migration_counts_egress_across_regions() -> None:
    m = PriceMigration(min_saving=0.05, checkpoint_gb=10, egress_per_gb=0.09)  # 0.9 $ per cross-region move
    # 0.5 $/h in another region: 0.5 * 2.0833 + 0.9 = 1.9417 vs 2.0: 2.9 % -> stay
    assert m.decide(mig_obs((q("a", 1.0), q("x", 0.5, region="r-2")))) == []
    # the same price in the same region: 1.0417, 48 % -> move
    assert m.decide(mig_obs((q("a", 1.0), q("b", 0.5))))[0].region == "b"
    # both offered: the same-region one is cheaper once egress counts
    assert m.decide(mig_obs((q("a", 1.0), q("x", 0.45, region="r-2"), q("b", 0.5))))[0].region == "b"


def test_migration_idle_goes_to_cheapest_available_elsewhere() -> None:
    m = PriceMigration(min_saving=0.5)
    places = (q("a", 0.5, available=False), q("b", 0.99), q("c", 0.95), q("e", 0.1, available=False))
    d = m.decide(mig_obs(places, active=0))
    assert len(d) == 1 and d[0].region == "c"  # pricier than home, below any threshold: beats waiting
    # nothing available elsewhere: no move
    assert m.decide(mig_obs((q("a", 0.5, available=False), q("e", 0.1, available=False)), active=0)) == []


def test_migration_not_when_slack_is_short() -> None:
    m = PriceMigration()
    # 2 h left, deadline 2 h + 899 s: slack 899 < 3 restarts (900)
    assert m.decide(mig_obs((q("a", 1.0), q("b", 0.1)), deadline=2 * H + 899)) == []
    assert m.decide(mig_obs((q("a", 1.0, available=False), q("b", 0.1)), active=0, deadline=2 * H + 899)) == []
    assert m.decide(mig_obs((q("a", 1.0), q("b", 0.1)), deadline=2 * H + 900))[0].region == "b"
    # the decision gap counts too
    assert m.decide(mig_obs((q("a", 1.0), q("b", 0.1)), deadline=2 * H + 900, gap=1)) == []
    # on on-demand the policy stays out (the guard owns the job)
    on_dem = obs(0, 0.0, active=1, market="on-demand", places=(q("a", 1.0), q("b", 0.1)), place_key=("a", "p3.2xlarge"))
    assert m.decide(on_dem) == []


def test_spotwise_migrates_during_an_outage_and_never_pays_on_demand() -> None:
    # home a: no capacity on [30 min, 5 h); b: 1.0 $/h, always there.  The cheapest start is a
    # (0.9 < 1.0).  Revoked at 1800; at the 1800 tick it moves to b (idle rule): ready 2100,
    # 7200 - 1500 = 5700 s left -> finish 7800, no on-demand at all.
    job = SweepJob(2 * H, 4 * H, restart_s=300, history_s=H)
    a = place([(T0 - H, 0.9)], T0 + 30 * H, cap=[(T0 - H, 1), (T0 + 1800, 0), (T0 + 5 * H, 1)], zone="z-1a")
    b = place([(T0 - H, 1.0)], T0 + 30 * H, zone="z-1b")
    r = run_window(job, [a, b], a, T0, STRATEGIES["spotwise"], tick_s=600)
    assert r.place_start == a.id and r.moves == 1 and r.on_demand_s == 0.0
    assert r.finish_s == pytest.approx(7800.0) and r.deadline_met
    assert r.cost == pytest.approx((1800 * 0.9 + (7800 - 1800) * 1.0) / H, rel=1e-9)


# ----------------------------------------------------------------------------- bad inputs
def test_bad_inputs_raise_input_error() -> None:
    with pytest.raises(InputError, match="deadline"):
        SweepJob(2 * H, 2 * H + 299, restart_s=300)
    SweepJob(2 * H, 2 * H + 300, restart_s=300)  # exactly feasible
    for bad in (dict(work_s=0, deadline_s=H), dict(work_s=H, deadline_s=-1), dict(work_s=H, deadline_s=2 * H, workers=0),
                dict(work_s=H, deadline_s=2 * H, restart_s=math.nan)):
        with pytest.raises(InputError):
            SweepJob(**bad)
    with pytest.raises(InputError, match="did you mean 'spotwise'"):
        parse_strategies("on-demand,spotwize")
    with pytest.raises(InputError):
        parse_strategies("nothing-like-it")
    assert [s.name for s in parse_strategies(None)] == ["on-demand", "no-interruptions", "thm3-bid", "spot+guard", "spotwise",
                                                         "spotwise-avail"]
    with pytest.raises(InputError):
        Strategy("x", start="nowhere")  # type: ignore[arg-type]
    job = SweepJob(2 * H, 4 * H, history_s=H)
    p = place([(T0, 0.5)], T0 + 4.5 * H)  # 1 h of history + 4 h of deadline need 5 h
    with pytest.raises(InputError, match="too short"):
        window_starts([p], job, 600)
    with pytest.raises(InputError):
        window_starts([p], job, 0)
    long = place([(T0, 0.5)], T0 + 7 * H)
    assert window_starts([long], job, H) == [T0 + H, T0 + 2 * H, T0 + 3 * H]
    with pytest.raises(InputError, match="home place"):
        sweep(job, [long], [("nowhere", "p3.2xlarge")], parse_strategies("on-demand"), [T0 + H])


def test_wilson_interval() -> None:
    lo, hi = wilson(10, 10)
    assert hi == 1.0 and 0.69 < lo < 0.73  # 95 % Wilson for 10/10: [0.722, 1]
    assert wilson(0, 0) == (0.0, 1.0)
    lo, hi = wilson(5, 10)
    assert lo < 0.5 < hi and hi - 0.5 == pytest.approx(0.5 - lo)


# ----------------------------------------------------------------------------- real traces
@pytest.fixture(scope="module")
def aws_p3() -> list[Place]:
    from spotwise.market.traces import load_traces

    places, _ = build_places(load_traces(need(AWS_COST)), Catalog.default(), "resnet", "p3.2xlarge")
    return places


def test_real_aws_p3_sweep_spotwise_meets_every_deadline_near_the_oracle(aws_p3: list[Place]) -> None:
    # every zone with a p3.2xlarge price trace is a home; a start every 4 days (a week of history
    # before each); 24 h of work due in 48 h
    job = SweepJob(24 * H, 48 * H)
    starts = window_starts(aws_p3, job, 96 * H)
    assert len(aws_p3) >= 10 and len(starts) >= 10
    res = sweep(job, aws_p3, [p.key for p in aws_p3], parse_strategies("on-demand,thm3-bid,spot+guard,spotwise"), starts)
    by = {s.strategy: s for s in res.summaries}
    rows = [r for r in res.rows if r.strategy == "spotwise"]
    assert len(rows) >= 100 and all(r.deadline_met for r in rows)
    assert by["spotwise"].deadline_met == 1.0 and by["spotwise"].mean_vs_oracle <= 1.05
    assert by["spot+guard"].deadline_met == 1.0
    assert by["on-demand"].mean_vs_oracle > 2.0 and by["on-demand"].deadline_met == 1.0
    # no finished run beats the hindsight oracle, window by window (an unfinished Thm 3 run paid
    # for part of the work only, possibly nothing: its bid was never met)
    done = [r for r in res.rows if r.finish_s is not None]
    assert len(done) > len(res.rows) // 2 and all(r.cost >= r.oracle_cost * (1 - 1e-9) for r in done)
    assert any(r.finish_s is None for r in res.rows if r.strategy == "thm3-bid")
    assert res.worker_iterations > 0 and res.to_dict()["windows"] == len(starts)


def skypilot_places() -> tuple[list[Place], list[str]]:
    """The 45-day SkyPilot 1-node V100 availability traces (9 AWS zones, 195 s ticks).

    The traces name the type ``v100_1`` (one V100), read as the AWS type they were collected on,
    p3.2xlarge (:data:`spotwise.sim.sweep.places.SKYPILOT_AWS_TYPES`), and hold no prices: without a
    spot price (the catalog has none for AWS types) they cannot be placed; with an *assumed*
    fixed spot price of 30 % of on-demand they can (the deadline assertions below do not depend
    on that level: any spot price below on-demand)."""
    from spotwise.market.traces import load_traces

    series = load_traces(need(SKY_AVAIL))
    with pytest.raises(InputError, match="no price"):
        build_places(series, Catalog.default(), "resnet50", "p3.2xlarge")
    with pytest.raises(InputError, match="--spot-price"):
        build_places(series, Catalog.default(), "resnet50", "p3.2xlarge", spot_price=-1.0)
    return build_places(series, Catalog.default(), "resnet50", "p3.2xlarge", spot_price=round(0.3 * OD, 4))


def test_real_skypilot_availability_sweep_guard_meets_deadlines_no_guard_misses() -> None:
    places, skipped = skypilot_places()
    assert len(places) == 9 and not skipped
    assert all(p.capacity is not None and p.spot_price(p.start) == pytest.approx(0.918) for p in places)
    # 12 h of work due in 24 h, a start every 40 h (1 h of history for the Thm 3 bid)
    job = SweepJob(12 * H, 24 * H, history_s=H)
    starts = window_starts(places, job, 40 * H)
    assert len(starts) >= 25
    strategies = parse_strategies("on-demand,no-interruptions,thm3-bid,spot+guard,spotwise") + [SPOT_NO_GUARD]
    res = sweep(job, places, [p.key for p in places], strategies, starts)
    by = {s.strategy: s for s in res.summaries}
    n = len(starts) * len(places)
    assert all(s.windows == n for s in res.summaries)
    # the Uniform Progress guard meets every deadline, with or without moves
    assert by["spot+guard"].deadline_met == 1.0 and by["spotwise"].deadline_met == 1.0
    assert by["spot+guard"].mean_on_demand_h > 0  # ...by buying on-demand when spot is gone
    # plain spot without a guard (on-demand bid, or the Thm 3 bid = the constant price) misses
    # many: capacity-only places are revoked whatever the bid
    for name in ("thm3-bid", "spot"):
        assert by[name].deadline_met < 0.9 and by[name].mean_on_demand_h == 0.0, name
    # "no-interruptions" is the optimistic estimate: never revoked, 12 h + the first restart
    assert by["no-interruptions"].deadline_met == 1.0
    assert all(r.finish_s == pytest.approx(12 * H + 300) for r in res.rows if r.strategy == "no-interruptions")
    # moving to available spot elsewhere beats waiting on on-demand at the home zone
    assert by["spotwise"].mean_cost < by["spot+guard"].mean_cost < by["on-demand"].mean_cost


# ----------------------------------------------------------------------------- GCP lifetimes -> capacity
def test_capacity_from_lifetimes_synthetic_renewal() -> None:
    from spotwise.market.preemption import LifetimeRevocation
    from spotwise.market.traces import LifetimeRecord, LifetimeTable
    from spotwise.sim.sweep.places import capacity_from_lifetimes

    # every life is 2 h, every gap 60 s: up [0, 2 h), down 60 s, up [2 h + 60, 4 h + 60), ...
    table = LifetimeTable([LifetimeRecord("vm", "V100", "us-central1-a", None, None, 7200.0),
                           LifetimeRecord("vm0", "V100", "us-central1-a", None, None, 0.0)])  # the 0 s life is dropped
    s = capacity_from_lifetimes(table, T0, T0 + 10 * H, 7, "us-central1-a", "gce-v100")
    assert s.kind == "availability" and s.meta.zone == "us-central1-a" and s.meta.region == "us-central1"
    assert s.meta.instance == "gce-v100" and s.start == T0 and s.end == T0 + 10 * H
    assert list(s.times - T0) == [0, 7200, 7260, 14460, 14520, 21720, 21780, 28980, 29040]
    assert list(s.values) == [1, 0, 1, 0, 1, 0, 1, 0, 1]
    # a model works as well (and params only go with a table)
    m = LifetimeRevocation(np.array([3600.0]), restart_delay_s=0.0)
    s2 = capacity_from_lifetimes(m, T0, T0 + 3 * H, 0, "z-1a", "gce-v100")
    assert list(s2.values) == [1]  # zero-length gaps merge: always up
    with pytest.raises(InputError):
        capacity_from_lifetimes(m, T0, T0 + H, 0, "z-1a", "gce-v100", restart_delay_s=5.0)
    with pytest.raises(InputError):
        capacity_from_lifetimes(table, T0, T0, 0, "z-1a", "gce-v100")
    with pytest.raises(InputError):
        capacity_from_lifetimes(object(), T0, T0 + H, 0, "z-1a", "gce-v100")
    with pytest.raises(InputError):
        capacity_from_lifetimes(LifetimeTable([]), T0, T0 + H, 0, "z-1a", "gce-v100")


@pytest.fixture(scope="module")
def gcp_lifetimes():
    from spotwise.market.traces import load_gcp_lifetime_csv

    return load_gcp_lifetime_csv(need(GCP_DIR / "lifetime" / "lifetime.csv"))


def test_capacity_from_gcp_lifetimes_is_seeded_and_matches_capped_mean(gcp_lifetimes) -> None:
    from spotwise.sim.sweep.places import capacity_from_lifetimes

    year = 365 * 86400.0
    for gpu in ("V100", ""):  # "": the table's VMs without a GPU (412 lives, ~1.6 h)
        table = gcp_lifetimes.by_gpu(gpu)
        capped_mean = float(np.mean(np.minimum(table.lifetimes_s[table.lifetimes_s > 0], 24 * H)))
        a = capacity_from_lifetimes(table, 0.0, year, 11, "us-central1-a", "gce-v100")
        b = capacity_from_lifetimes(table, 0.0, year, 11, "us-central1-a", "gce-v100")
        c = capacity_from_lifetimes(table, 0.0, year, 12, "us-central1-a", "gce-v100")
        assert np.array_equal(a.times, b.times) and np.array_equal(a.values, b.values)
        assert not np.array_equal(a.times, c.times)
        assert set(np.unique(a.values)) <= {0.0, 1.0} and a.values[0] == 1.0
        lengths = np.diff(np.append(a.times, a.end))
        up, down = lengths[a.values == 1][:-1], lengths[a.values == 0]  # the last life is cut by the window
        assert np.all(up <= 24 * H + 1e-6) and np.allclose(down, 60.0)  # LifetimeRevocation's default gap
        assert up.size > 300
        # the mean of n bootstrap draws: within 4 standard errors of the table's capped mean
        capped = np.minimum(table.lifetimes_s[table.lifetimes_s > 0], 24 * H)
        assert abs(up.mean() - capped_mean) <= 4 * capped.std() / math.sqrt(up.size), gpu
        assert up.mean() == pytest.approx(capped_mean, rel=0.1), gpu


def test_gcp_lifetime_capacity_sweep(gcp_lifetimes) -> None:
    # three zones of GCE V100 preemptibles, capacity drawn from the V100 lifetimes with a 2 h
    # mean (exponential) wait for a replacement; priced at the catalog's fixed preemptible price
    from spotwise.sim.sweep.places import capacity_from_lifetimes

    table = gcp_lifetimes.by_gpu("V100")
    t0, t1 = 0.0, 60 * 86400.0
    caps = [capacity_from_lifetimes(table, t0, t1, seed, zone, "gce-v100", restart_delay_s=2 * H, restart="exponential")
            for seed, zone in enumerate(("us-central1-a", "us-central1-b", "us-east1-c"))]
    places, skipped = build_places(caps, Catalog.default(), "resnet50", "gce-v100")
    assert len(places) == 3 and not skipped and all(p.spot_price(t0) == pytest.approx(0.861) for p in places)
    job = SweepJob(12 * H, 18 * H, history_s=H)
    starts = window_starts(places, job, 36 * H)
    res = sweep(job, places, [p.key for p in places], parse_strategies("on-demand,thm3-bid,spot+guard,spotwise"), starts)
    by = {s.strategy: s for s in res.summaries}
    assert by["spot+guard"].deadline_met == 1.0 and by["spotwise"].deadline_met == 1.0
    assert by["spotwise"].mean_cost < by["on-demand"].mean_cost
    assert sum(r.revocations for r in res.rows if r.strategy == "thm3-bid") > 0
