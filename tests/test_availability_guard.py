"""The availability guard (issue 23 item 2): wait, move or buy on-demand by the slack left."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_sweep import OD, T0, H, SPOT_NO_GUARD, _outage_place, place

from spotwise.policies.availability_guard import AvailabilityGuard
from spotwise.policies.base import Decision, Observation, Policy
from spotwise.sim.sweep.engine import STRATEGIES, SweepJob, run_window
from spotwise.sim.sweep.records import Strategy

GUARD = Strategy("avail", "home", "on-demand", "spot", ("availability-guard",))


def _down(zone: str = "z-1b") -> Any:
    """A second zone with no capacity at all: the job *could* move, so the guard's own rules apply
    (at a single place it runs Uniform Progress's, issue 31: see test_guard_one_place.py)."""
    return place([(T0 - 2 * H, 0.9)], T0 + 30 * H, cap=[(T0 - 2 * H, 0)], zone=zone)


def test_waiting_beats_on_demand_when_the_slack_covers_the_outage() -> None:
    # C = 3 h, D = 6.5 h, d = 300 s, decisions every 600 s.  Spot until 1800 (1500 s done after the
    # start's restart), none until 7200, nor in z-1b.  Waiting spends slack: 23400 - t - 9300 reaches the
    # on-demand point, net (2 d + 600) + 15 d = 5700 s, only at t = 8400, after the outage ends: the
    # guard waits.  Capacity returns at 7200 (rejoin 300 s): 9300 s left -> finish 16800 <= 23400, no
    # on-demand.  Uniform Progress falls behind its line (ep = C t / D) at 3250 and buys on-demand at the
    # 3600 tick.
    job = SweepJob(3 * H, 6.5 * H, restart_s=300, history_s=H)
    p = _outage_place()
    avail = run_window(job, [p, _down()], p, T0, GUARD, tick_s=600)
    up = run_window(job, [p], p, T0, STRATEGIES["spot+guard"], tick_s=600)
    assert avail.deadline_met and avail.finish_s == pytest.approx(16800.0) and avail.on_demand_s == 0.0
    assert up.deadline_met and up.on_demand_s > 0
    assert avail.cost < up.cost
    assert avail.cost == pytest.approx(((1800 + 16800 - 7200) * 0.9) / H, rel=1e-9)
    # at the one place alone the guard cannot move: it runs Uniform Progress's rule, at its cost (issue 31)
    alone = run_window(job, [p], p, T0, GUARD, tick_s=600)
    assert alone.cost == pytest.approx(up.cost, rel=1e-12) and alone.finish_s == pytest.approx(up.finish_s)


def test_on_demand_beats_waiting_when_the_outage_outlasts_the_slack() -> None:
    # The same job, but spot never returns (nor is there any in z-1b): the slack reaches 5700 s at 3000 ->
    # on-demand, ready at 3300, 9300 s left -> finish 12600.  Waiting alone misses the deadline.
    job = SweepJob(3 * H, 5 * H, restart_s=300, history_s=H)
    p = place([(T0 - 2 * H, 0.9)], T0 + 30 * H, cap=[(T0 - 2 * H, 1), (T0 + 1800, 0)])
    r = run_window(job, [p, _down()], p, T0, GUARD, tick_s=600)
    assert r.deadline_met and r.market_switches == 1 and r.finish_s == pytest.approx(12600.0)
    assert r.on_demand_s == pytest.approx(12600.0 - 3000.0)
    assert r.cost == pytest.approx((1800 * 0.9 + (12600 - 3000) * OD) / H, rel=1e-9)
    assert not run_window(job, [p], p, T0, SPOT_NO_GUARD, tick_s=600).deadline_met


def test_it_moves_to_the_place_up_the_longest_and_returns_from_on_demand() -> None:
    job = SweepJob(3 * H, 5 * H, restart_s=300, history_s=H)
    home = place([(T0 - 2 * H, 0.9)], T0 + 30 * H, cap=[(T0 - 2 * H, 1), (T0 + 1800, 0)], zone="z-1a")
    young = place([(T0 - 2 * H, 0.9)], T0 + 30 * H, cap=[(T0 - 2 * H, 0), (T0 + 1700, 1)], zone="z-1b")
    old = place([(T0 - 2 * H, 0.9)], T0 + 30 * H, cap=[(T0 - 2 * H, 1)], zone="z-1c")
    r = run_window(job, [home, young, old], home, T0, GUARD, tick_s=600)
    assert r.moves == 1 and r.deadline_met and r.on_demand_s == 0.0
    obs = Observation(step=10, t=1800.0, active=0, provisioned=1, max_workers=1, reference_workers=1, base_lr=1.0, lr=1.0,
                      sync="full", deadline_s=5 * H, target_iterations=100, step_s=108.0, restart_s=300.0,
                      place=("z-1a", "p3.2xlarge"), market="on-demand", next_decision_s=600.0,
                      places=(dataclasses.replace(_q("z-1b"), up_s=100.0), _q("z-1c", up_s=7200.0)))
    out = AvailabilityGuard().decide(obs)
    assert [type(d).__name__ for d in out] == ["SwitchMarket", "Migrate"] and out[1].region == "z-1c"


def _q(zone: str, up_s: float | None = None):
    from spotwise.policies.base import PlaceQuote

    return PlaceQuote(zone, "p3.2xlarge", 0.9, 1.0, True, "z-1", up_s, 1.0)


class Recording(Policy):
    """Wraps a policy and records what it decided when."""

    name = "recording"
    uses_places = True

    def __init__(self, inner: Policy) -> None:
        self.inner, self.log = inner, []

    def decide(self, obs: Observation) -> list[Decision]:
        out = self.inner.decide(obs)
        self.log.append((obs.t, tuple(d.describe() for d in out)))
        return out


def _random_place(zone: str, seed: int, flip_after: float | None = None) -> Any:
    rng = np.random.default_rng(seed)
    times = T0 - 2 * H + np.cumsum(rng.exponential(1.5 * H, 60))
    keep = times < T0 + 55 * H
    times = times[keep]
    vals = (np.arange(times.size) % 2).astype(float)
    if flip_after is not None:
        vals = np.where(times > T0 + flip_after, 1.0 - vals, vals)
    p = place([(T0 - 2 * H, 0.9)], T0 + 60 * H, cap=[(T0 - 2 * H, 1.0)] + list(zip(times.tolist(), vals.tolist())), zone=zone)
    return p


def test_decisions_never_read_the_future() -> None:
    """Perturbing every trace after X changes no decision made before X."""
    job = SweepJob(10 * H, 20 * H, restart_s=300, history_s=4 * H)
    x = 6 * H
    logs = []
    for flip in (None, x):
        places = [_random_place(z, i, flip) for i, z in enumerate(("z-1a", "z-1b", "z-1c"))]
        rec = Recording(AvailabilityGuard())
        run_window(job, places, places[0], T0, Strategy("rec", "home", "on-demand", "spot", (rec,)), tick_s=600)
        logs.append([e for e in rec.log if e[0] < x])
    assert logs[0] == logs[1] and len(logs[0]) > 5 and any(e[1] for e in logs[0])


def test_the_same_policy_object_runs_in_spotwise_run_and_in_the_sweep(tmp_path: Path, ray_unimportable: None) -> None:
    from _specs import spec_with

    from spotwise.assemble import build_controller
    from spotwise.events import read_events
    from spotwise.planes.ps.compute import LocalCompute
    from spotwise.planes.ps.worker import worker_args_for

    guard = AvailabilityGuard(return_restarts=2.0)
    spec = spec_with({"name": "g", "seed": 1, "workload": {"name": "mlp-digits", "batch_size": 8, "step_time_s": 20.0,
                                                             "eval_every": 1000},
                      "target": {"iterations": 60}, "deadline": "40m",
                      "cluster": {"instance_type": "c5.xlarge", "workers": 1, "coordinator_instance": "c5.large"},
                      "market": {"revocation": {"model": "lifetime", "mttf_s": 300, "mttr_s": 3000}},
                      "outputs": {"checkpoint_every": 0, "plots": False}})
    coord = build_controller(spec, tmp_path / "run", compute=LocalCompute(worker_args_for(spec)))
    coord.policies = [guard]
    summary = coord.run()
    acted = [e for e in read_events(tmp_path / "run" / "events.jsonl", kinds=["decision"]) if e["policy"] == guard.name]
    assert acted and any("on-demand" in e["decision"] for e in acted) and summary.extra["deadline_met"]
    job = SweepJob(3 * H, 5 * H, restart_s=300, history_s=H)
    p = place([(T0 - 2 * H, 0.9)], T0 + 30 * H, cap=[(T0 - 2 * H, 1), (T0 + 1800, 0)])
    r = run_window(job, [p], p, T0, Strategy("same", "home", "on-demand", "spot", (guard,)), tick_s=600)
    assert r.deadline_met and r.market_switches == 1


def _home_and_pricier(other_price: float) -> list:
    home = place([(T0 - 2 * H, 0.9)], T0 + 30 * H, cap=[(T0 - 2 * H, 1), (T0 + 1800, 0), (T0 + 3600, 1)], zone="z-1a")
    other = place([(T0 - 2 * H, other_price)], T0 + 30 * H, cap=[(T0 - 2 * H, 1)], zone="z-1b")
    return [home, other]


def test_it_waits_for_its_cheaper_place_rather_than_move_to_a_pricier_one_and_back() -> None:
    # C = 3 h, D = 6.5 h, d = 300 s, no coordinator.  Home (0.9 $/h) is down from 1800 to 3600; z-1b is always
    # up at 1.5 $/h (67% more: the price rule would bring the job back as soon as home returns).  The guard
    # waits (slack 23400 - 1800 - 9300 = 12300 s > the on-demand point 5700 s), rejoins at 3600 (ready 3900),
    # 9300 s left -> finish 13200; cost (1800 + 13200 - 3600) s at 0.9 $/h = 2.85 $.  Moving there and back
    # would pay 1800 s at 1.5 $/h and a second restart.
    job = SweepJob(3 * H, 6.5 * H, restart_s=300, history_s=H)
    places = _home_and_pricier(1.5)
    r = run_window(job, places, places[0], T0, GUARD, tick_s=600)
    assert r.moves == 0 and r.deadline_met and r.on_demand_s == 0.0
    assert r.finish_s == pytest.approx(13200.0) and r.cost == pytest.approx((1800 + 13200 - 3600) * 0.9 / H, rel=1e-9)
    # at an equal price a move costs the same restart as the rejoin and no idle time: it moves
    places = _home_and_pricier(0.9)
    r2 = run_window(job, places, places[0], T0, GUARD, tick_s=600)
    assert r2.moves == 1 and r2.deadline_met and r2.finish_s < r.finish_s


def test_without_the_slack_to_wait_it_moves_to_the_pricier_place_not_to_on_demand() -> None:
    # D = 3.6 h: at 1800 the slack is 12960 - 1800 - 9300 = 1860 s, under the on-demand point (5700 s) but
    # above the net (2 d + 600 s) plus the move's restart: spot at 1.5 $/h beats on-demand at 3.06 $/h
    job = SweepJob(3 * H, 3.6 * H, restart_s=300, history_s=H)
    places = _home_and_pricier(1.5)
    r = run_window(job, places, places[0], T0, GUARD, tick_s=600)
    assert r.moves >= 1 and r.deadline_met and r.on_demand_s == 0.0
