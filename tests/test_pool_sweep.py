"""Trace sweeps of a job of several pools, each pool on its own trace (issue 21 item 4)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from spotwise.errors import InputError
from spotwise.market.billing import BillingPolicy
from spotwise.market.catalog import Catalog
from spotwise.market.series import SeriesMeta, StepSeries
from spotwise.sim.sweep.places import Place
from spotwise.sim.sweep.pools import PoolPlace, pool_sweep, run_pool_window
from spotwise.sim.sweep.records import SweepJob

H = 3600.0
CAT = Catalog.default()


def place(zone: str, inst: str, price: float, outages: list[tuple[float, float]] = (), end: float = 10 * 24 * H) -> Place:
    it = CAT.instance(inst)
    prices = StepSeries(np.array([0.0]), np.array([price]), end, SeriesMeta(f"p:{zone}:{inst}", "price", zone=zone, instance=inst))
    times, vals = [0.0], [1.0]
    for a, b in outages:
        times += [a, b]
        vals += [0.0, 1.0]
    cap = StepSeries(np.array(times), np.array(vals), end, SeriesMeta(f"a:{zone}:{inst}", "availability", zone=zone, instance=inst))
    return Place(zone, zone[:-1], it, prices, float(it.on_demand_per_hour), 1.0, cap)


def job(work_h: float, deadline_h: float) -> SweepJob:
    return SweepJob(work_s=work_h * H, deadline_s=deadline_h * H, workers=3, restart_s=300.0, coordinator_per_hour=0.2,
                    iterations=1000, billing=BillingPolicy.per_second(minimum_s=0.0))


def test_without_outages_each_pool_is_billed_at_its_price_for_the_run() -> None:
    k80 = PoolPlace("k80", place("us-east-1a", "p2.xlarge", 0.3), 2, 1.0, 0.9)
    v100 = PoolPlace("v100", place("us-west-2a", "p3.2xlarge", 0.9), 1, 3.0, 3.06)
    r = run_pool_window(job(10, 24), [k80, v100], 0.0, "pools", full_rate_s=10 * H)
    # 300 s start, then 10 h at the full rate; coordinator for the whole run
    assert r.deadline_met and r.finish_s == pytest.approx(10 * H + 300)
    want = (2 * 0.3 + 0.9 + 0.2) * (10 * H + 300) / H
    assert r.cost == pytest.approx(want, rel=1e-9) and r.revocations == 0


def test_an_outage_of_one_pool_slows_the_job_by_its_share_of_the_rate() -> None:
    k80 = PoolPlace("k80", place("us-east-1a", "p2.xlarge", 0.3), 2, 1.0, 0.9)
    v100 = PoolPlace("v100", place("us-west-2a", "p3.2xlarge", 0.9, outages=[(2 * H, 6 * H)]), 1, 3.0, 3.06)
    r = run_pool_window(job(10, 24), [k80, v100], 0.0, "pools", full_rate_s=10 * H)
    # during the 4 h outage the fleet runs at 2/5 of its rate; the V100 restarts (300 s) when it returns
    lost = 4 * H * 3 / 5 + 300 * 3 / 5
    assert r.revocations == 1 and r.finish_s == pytest.approx(10 * H + 300 + lost, rel=1e-6)


def test_the_guard_buys_on_demand_when_the_pools_cannot_make_the_deadline() -> None:
    out = [(1 * H, 20 * H)]
    pools = [PoolPlace("a", place("us-east-1a", "p2.xlarge", 0.3, outages=out), 2, 1.0, 0.9),
             PoolPlace("b", place("us-west-2a", "p2.xlarge", 0.3, outages=out), 2, 1.0, 0.9)]
    spot = run_pool_window(job(10, 16), pools, 0.0, "pools", full_rate_s=10 * H)
    guard = run_pool_window(job(10, 16), pools, 0.0, "pools+guard", full_rate_s=10 * H, tick_s=300.0)
    assert not spot.deadline_met and guard.deadline_met and guard.market_switches == 1 and guard.on_demand_s > 0


def test_the_sweep_tabulates_every_strategy_against_the_oracle() -> None:
    pools = [PoolPlace("a", place("us-east-1a", "p2.xlarge", 0.3, outages=[(30 * H, 34 * H)]), 2, 1.0, 0.9),
             PoolPlace("b", place("us-west-2a", "p3.2xlarge", 0.9), 1, 3.0, 3.06)]
    res = pool_sweep(job(10, 24), pools, [0.0, 24 * H, 48 * H], full_rate_s=10 * H)
    by = {s.strategy: s for s in res.summaries}
    assert set(by) == {"pools", "pools+guard", "on-demand"} and all(s.windows == 3 for s in by.values())
    assert by["pools"].mean_cost < by["on-demand"].mean_cost
    assert all(r.cost >= r.oracle_cost - 1e-9 for r in res.rows), "the oracle is a lower bound"


def test_a_pools_window_outside_a_trace_is_skipped_and_none_left_is_an_error() -> None:
    pools = [PoolPlace("a", place("us-east-1a", "p2.xlarge", 0.3, end=30 * H), 1, 1.0, 0.9)]
    with pytest.raises(InputError) as e:
        pool_sweep(job(10, 24), pools, [10 * H], full_rate_s=10 * H)
    assert "every pool's trace" in str(e.value)


def test_cli_sweeps_pools_in_two_aws_zones_on_the_real_traces(traces_dir: Path, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from spotwise.cli import app

    spec = tmp_path / "spec.yaml"
    spec.write_text("""
name: pools-traces
workload: {name: mlp-digits, family: resnet50, step_time_s: 1.0}
target: {iterations: 20000}
deadline: 24h
cluster:
  sync: async
  coordinator_instance: m4.xlarge
  pools:
    - {instance_type: p2.xlarge, workers: 4, zone: us-east-1a}
    - {instance_type: p3.2xlarge, workers: 1, zone: us-west-2a}
""")
    cost = traces_dir / "training-on-a-dime" / "logs" / "aws" / "cost"
    res = CliRunner().invoke(app, ["simulate", str(spec), "--trace", str(cost), "--starts", "2d", "--json"])
    assert res.exit_code == 0, res.output
    d = json.loads(res.stdout)
    assert {s["strategy"] for s in d["strategies"]} == {"pools", "pools+guard", "on-demand"}
    assert sorted(d["homes"]) == ["us-east-1a/p2.xlarge", "us-west-2a/p3.2xlarge"] and d["windows"] > 20
    pools = next(s for s in d["strategies"] if s["strategy"] == "pools")
    assert pools["deadline_met"] == 1.0 and pools["vs_on_demand"] < 0.6 and math.isfinite(pools["mean_cost"])
    bad = CliRunner().invoke(app, ["simulate", str(spec), "--trace", str(cost), "--strategies", "spotwise"])
    assert bad.exit_code == 2 and "does not run a job of several pools" in bad.output
