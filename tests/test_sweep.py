"""Trace sweeps (spotwise.sim.sweep), the hindsight oracle, and the two sweep policies.

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
from spotwise.market.catalog import Catalog, InstanceType
from spotwise.market.series import SeriesMeta, StepSeries
from spotwise.policies.base import Migrate, Observation, PlaceQuote, SwitchMarket
from spotwise.policies.deadline_guard import UniformProgress
from spotwise.policies.migration import PriceMigration
from spotwise.sim.oracle import hindsight_oracle, place_oracle
from spotwise.sim.places import Place, build_places
from spotwise.sim.sweep import (
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
    assert r2.bid == pytest.approx(0.7) and r2.finish_s is None and not r2.deadline_met and r2.cost == 0.0
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
