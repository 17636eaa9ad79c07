"""The sweep's lower bounds and where the money goes (issue 23 items 0-1)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from test_sweep import OD, T0, H, place

from spotwise.sim.bounds.oracle import free_move_bound, hindsight_oracle
from spotwise.sim.sweep.engine import STRATEGIES, SweepJob, run_window, sweep

END = T0 + 30 * H


def two_halves():
    """Zone a has spot for the first 7 h, zone b from 5 h on: each alone holds 7 h of a 12 h window."""
    a = place([(T0, 1.0)], END, cap=[(T0, 1.0), (T0 + 7 * H, 0.0)], zone="z-1a")
    b = place([(T0, 1.0)], END, cap=[(T0, 0.0), (T0 + 5 * H, 1.0)], zone="z-1b")
    return [a, b]


def job() -> SweepJob:
    return SweepJob(work_s=10 * H, deadline_s=12 * H, restart_s=300.0, coordinator_per_hour=0.0, iterations=1000)


def test_a_migrating_strategy_beats_the_single_place_oracle_but_not_the_free_move_bound() -> None:
    places, j = two_halves(), job()
    single = hindsight_oracle(j, places, T0)
    free = free_move_bound(j, places, T0)
    assert single.cost == pytest.approx(7 * 1.0 + 3 * OD)        # 7 h spot, then 3 h on-demand at one place
    assert free.cost == pytest.approx(10 * 1.0) and free.spot_h == pytest.approx(10.0)
    r = run_window(j, places, places[0], T0, STRATEGIES["spotwise"], tick_s=60.0)
    assert r.deadline_met and r.moves == 1
    assert free.cost < r.cost < single.cost, (free.cost, r.cost, single.cost)


def test_the_free_move_bound_never_exceeds_the_single_place_oracle_and_handles_speeds() -> None:
    fast = place([(T0, 2.5)], END, zone="z-1c", speed=2.0)
    places, j = two_halves() + [fast], job()
    free = free_move_bound(j, places, T0)
    assert free.cost <= hindsight_oracle(j, places, T0).cost + 1e-9
    # per unit of work the fast place costs 1.25 $/h against 1.0 at a or b: spot at a/b first (12 h of slots
    # hold 10 h of work at speed 1 only if both halves are used), so the bound is still 10 $
    assert free.cost == pytest.approx(10.0)


def test_where_the_time_goes_adds_up_per_window(tmp_path: Path) -> None:
    from spotwise.reports.sweep_view import write_sweep

    places, j = two_halves(), job()
    res = sweep(j, places, [p.key for p in places], [STRATEGIES[n] for n in ("on-demand", "spot+guard", "spotwise")],
                [T0], tick_s=60.0)
    for r in res.rows:
        wall = (r.finish_s if r.finish_s is not None else j.deadline_s)
        parts = (r.spot_s - r.restart_spot_s) + (r.on_demand_s - r.restart_od_s) + r.restart_spot_s + r.restart_od_s + r.idle_s
        assert parts == pytest.approx(wall, rel=1e-9), r.strategy
        # progress happens only while computing: the compute hours are the work (speed 1)
        assert (r.spot_s - r.restart_spot_s) + (r.on_demand_s - r.restart_od_s) == pytest.approx(10 * H, rel=1e-6)
    s = {x.strategy: x for x in res.summaries}
    assert s["spotwise"].breakdown_h["restart"] == pytest.approx(2 * 300 / H)  # the start and one move
    assert s["spotwise"].cost_ratio_free is not None and s["spotwise"].cost_ratio_free > 1.0
    files = write_sweep(res, tmp_path)
    assert (tmp_path / "breakdown.png").stat().st_size > 5000
    rows = list(csv.DictReader((tmp_path / "windows.csv").open()))
    assert {"spot_compute_h", "on_demand_compute_h", "restart_h", "idle_h", "vs_free_move"} <= set(rows[0])
    d = json.loads((tmp_path / "sweep.json").read_text())
    assert d["free_move_mean_cost"] == pytest.approx(10.0) and tmp_path / "breakdown.png" in files
