"""`spotwise plan` on a spec with cluster.pools (issue 21 item 4): the pool mix.

The planner solves paper 003 Sec. 4.3's LP over the pools with X = instances used at once (gang
allocation) and rounds it by evaluating integer mixes exactly.  The error model is given by the
caller (no pilot), so these plans are fast; the plan-vs-simulate check runs the simulator.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from _specs import spec_with

from spotwise.config import spec_from_dict
from spotwise.errors import InfeasibleError
from spotwise.planner.placement.lp import SLO, AllocationProblem, min_cost_with_slos
from spotwise.planner.plan import apply_plan, make_plan
from spotwise.theory.bounds import ErrorModel

pytestmark = pytest.mark.timeout(300)

MODEL = ErrorModel(alpha=0.1, c=1.0, mu=0.05, L=1.0, M=2.0, G1=2.0)
BASE: dict[str, Any] = {
    "name": "mix",
    "seed": 3,
    "workload": {"name": "mlp-digits", "family": "resnet32", "batch_size": 8, "lr": 0.1, "eval_every": 100000,
                 "step_time_s": 2.0},
    "target": {"iterations": 4000},
    "cluster": {"sync": "async", "sync_overhead_s": 0.001, "coordinator_instance": "gce-ps"},
    "outputs": {"checkpoint_every": 0, "plots": False},
}


def zone_pool(zone: str, price: float, workers: int = 4) -> dict[str, Any]:
    return {"instance_type": "gce-k80", "workers": workers, "zone": zone, "name": zone,
            "market": {"synthetic": {"kind": "constant", "price": price}}}


def counts(plan) -> dict[str, int]:
    return {p["name"]: p["workers"] for p in plan.extra["pools"]}


def cheap_coordinator(tmp_path: Path) -> str:
    """A catalog file with a near-free coordinator, so the pools' own cost per unit of work decides."""
    path = tmp_path / "cheap-ps.yaml"
    path.write_text(yaml.safe_dump({"instances": [{"name": "cheap-ps", "cloud": "gcp", "vcpus": 1, "memory_gb": 1.0,
                                                   "on_demand_per_hour": 0.001, "source": "test"}]}))
    return str(path)


def test_gang_lp_counts_instances_used_at_once() -> None:
    """Paper 003 Sec. 4.3 with X = instances at once: 10 units/h from types of 1 and 3 units/h at 1 and 2 $/h,
    3 of each: the cheaper per unit (1 $/unit vs 0.67 $/unit: the second) first, then the first."""
    prob = AllocationProblem(("job",), ("slow", "fast"), np.array([[1.0, 3.0]]), np.array([1.0, 2.0]),
                             np.array([3.0, 3.0]), gang=True)
    alloc = min_cost_with_slos(prob, {"job": SLO(10.0, 1.0)}, objective="dollars")
    assert alloc.X[0] == pytest.approx([1.0, 3.0], abs=1e-6)  # 3 fast give 9 units, 1 slow the 10th
    assert alloc.X.sum() > 1  # several instances at once: the paper's row limit is gone


def test_the_mix_moves_to_the_other_zone_when_one_zones_price_doubles() -> None:
    """Same type in two zones; the deadline needs 6 of the 8 workers: the cheaper zone is filled first."""
    spec = spec_with(BASE, deadline=1400.0, cluster__pools=[zone_pool("us-east1-b", 0.5), zone_pool("us-east1-c", 0.6)])
    plan = make_plan(spec, error_model=MODEL)
    assert plan.strategy == "pool-mix"
    before = counts(plan)
    assert before["us-east1-b"] == 4 and 1 <= before["us-east1-c"] < 4
    doubled = spec_with(BASE, deadline=1400.0, cluster__pools=[zone_pool("us-east1-b", 1.0), zone_pool("us-east1-c", 0.6)])
    after = counts(make_plan(doubled, error_model=MODEL))
    assert after["us-east1-c"] == 4 and after["us-east1-b"] < before["us-east1-b"]
    assert plan.expected_time_s <= 1400.0
    by = {p["name"]: p for p in plan.extra["pools"]}
    assert by["us-east1-b"]["price_per_hour"] == pytest.approx(0.5)
    shown = {a.strategy for a in plan.alternatives}
    assert {"pool:us-east1-b", "pool:us-east1-c", "lp-mix", "all-pools", "pool-mix"} <= shown


def k80_v100(tmp_path: Path, deadline: float, **over: Any):
    return spec_with(BASE, deadline=deadline, cluster__coordinator_instance="cheap-ps",
                     market__catalog=[cheap_coordinator(tmp_path)],
                     cluster__pools=[{"instance_type": "gce-k80", "workers": 4, "region": "us-east1"},
                                     {"instance_type": "gce-v100", "workers": 4, "region": "us-east1"}], **over)


def test_a_tight_deadline_takes_the_v100s_and_a_loose_one_the_cheaper_k80s(tmp_path: Path) -> None:
    """resnet32: K80 0.256 $/h at speed 1 vs V100 0.861 $/h at 3.179 (0.271 $ per K80-hour of work): four K80s
    need 2000 s for the 4000 mini-batches of 2 s."""
    loose = make_plan(k80_v100(tmp_path, 10_000.0), error_model=MODEL)
    assert counts(loose) == {"gce-k80@us-east1": 4, "gce-v100@us-east1": 0}
    tight = make_plan(k80_v100(tmp_path, 1200.0), error_model=MODEL)
    c = counts(tight)
    assert c["gce-v100@us-east1"] >= 1 and tight.expected_time_s <= 1200.0
    assert tight.expected_cost > loose.expected_cost
    assert "gce-v100" in tight.why and "pool mix" in tight.why


def test_budget_and_objective_time_pick_the_fastest_mix_within_the_budget(tmp_path: Path) -> None:
    rich = make_plan(k80_v100(tmp_path, 10_000.0, budget_usd=100.0), error_model=MODEL, objective="time")
    assert counts(rich) == {"gce-k80@us-east1": 4, "gce-v100@us-east1": 4}
    cheapest = make_plan(k80_v100(tmp_path, 10_000.0), error_model=MODEL)
    budget = 1.03 * cheapest.expected_cost  # the V100s cost a little more per unit of work: a few fit
    tight = make_plan(k80_v100(tmp_path, 10_000.0, budget_usd=budget), error_model=MODEL, objective="time")
    assert tight.expected_cost <= budget
    assert rich.expected_time_s <= tight.expected_time_s < cheapest.expected_time_s
    assert "budget" in tight.why
    with pytest.raises(InfeasibleError) as info:
        make_plan(k80_v100(tmp_path, 10_000.0, budget_usd=0.5 * cheapest.expected_cost), error_model=MODEL, objective="time")
    assert "budget_usd" in info.value.fix


def test_plan_matches_the_simulator_on_a_mix_without_revocations(tmp_path: Path) -> None:
    """The plan's expected time and cost of its mix within 15% of the simulator's mean over two seeds."""
    from spotwise.sim.simulate import simulate_job

    spec = spec_with(BASE, deadline=400.0, target__iterations=600,
                     cluster__pools=[{"instance_type": "gce-k80", "workers": 3, "region": "us-east1"},
                                     {"instance_type": "gce-v100", "workers": 2, "region": "us-east1"}])
    plan = make_plan(spec, error_model=MODEL)
    c = counts(plan)
    assert c["gce-k80@us-east1"] >= 1 and c["gce-v100@us-east1"] >= 1, c
    times, costs = [], []
    for seed in (1, 2):
        d = apply_plan(spec, plan)
        d["seed"] = seed
        s, _, _ = simulate_job(spec_from_dict(d), tmp_path / f"sim{seed}", pilot_steps=20)
        times.append(s.virtual_s)
        costs.append(s.cost_usd)
    assert plan.expected_time_s == pytest.approx(np.mean(times), rel=0.15)
    assert plan.expected_cost == pytest.approx(np.mean(costs), rel=0.15)


def test_an_infeasible_deadline_exits_2_naming_the_fix(tmp_path: Path, cli) -> None:
    spec = spec_with(BASE, deadline=10.0, cluster__pools=[zone_pool("us-east1-b", 0.5), zone_pool("us-east1-c", 0.6)])
    with pytest.raises(InfeasibleError) as info:
        make_plan(spec, error_model=MODEL)
    assert "deadline" in info.value.message and "allow at least" in info.value.fix
    path = tmp_path / "tight.yaml"
    path.write_text(yaml.safe_dump(spec.to_dict()))
    code, _out, err = cli("plan", str(path), "--json", "--pilot-steps", "20")
    assert code == 2 and "allow at least" in err


def test_plan_json_holds_the_pools_and_write_spec_applies_them(tmp_path: Path, cli) -> None:
    spec = spec_with(BASE, deadline=1400.0, cluster__pools=[zone_pool("us-east1-b", 0.5), zone_pool("us-east1-c", 0.6)])
    path = tmp_path / "pools.yaml"
    path.write_text(yaml.safe_dump(spec.to_dict()))
    out_spec = tmp_path / "planned.yaml"
    code, out, err = cli("plan", str(path), "--json", "--pilot-steps", "20", "--write-spec", str(out_spec))
    assert code == 0, err
    doc = json.loads(out)
    assert doc["strategy"] == "pool-mix"
    pools = doc["extra"]["pools"]
    assert {p["name"] for p in pools} == {"us-east1-b", "us-east1-c"}
    for key in ("instance", "workers", "bid", "price_per_hour", "speed", "expected_cost_usd"):
        assert all(key in p for p in pools)
    assert doc["workers"] == sum(p["workers"] for p in pools)
    planned = yaml.safe_load(out_spec.read_text())
    kept = {p["name"]: p["workers"] for p in planned["cluster"]["pools"]}
    assert kept == {p["name"]: p["workers"] for p in pools if p["workers"] > 0}
    assert spec_from_dict(planned).cluster.workers == doc["workers"]


def test_bid_pools_get_a_bid_written_back(tmp_path: Path) -> None:
    """A pool on the bid model gets a bid from its price law; the written spec carries it."""
    def pool(zone: str, lo: float, hi: float) -> dict[str, Any]:
        return {"instance_type": "gce-k80", "workers": 3, "zone": zone, "name": zone, "bids": hi,
                "revocation": {"model": "bid"},
                "market": {"synthetic": {"kind": "uniform", "low": lo, "high": hi, "interval_s": 60.0}}}
    spec = spec_with(BASE, deadline=4000.0, cluster__pools=[pool("us-east1-b", 0.2, 0.6), pool("us-east1-c", 0.3, 0.9)])
    plan = make_plan(spec, error_model=MODEL)
    chosen = [p for p in plan.extra["pools"] if p["workers"] > 0]
    assert chosen and all(p["bid"] is not None for p in chosen)
    assert plan.expected_time_s <= 4000.0
    d = apply_plan(spec, plan)
    for p in d["cluster"]["pools"]:
        assert p["bids"] == pytest.approx(next(c["bid"] for c in chosen if c["name"] == p["name"]))
    spec_from_dict(d)


def test_the_mix_reports_its_probability_of_meeting_the_deadline_and_simulate_agrees(tmp_path: Path) -> None:
    """P(deadline) of the chosen mix is sampled from the pools' revocation timelines; across seeds of the
    step-by-step simulator the measured share of runs meeting the deadline is close to it."""
    from spotwise.sim.simulate import simulate_job

    churn = {"model": "lifetime", "mttf_s": 120.0, "mttr_s": 120.0}
    d = {**BASE, "target": {"iterations": 400}, "deadline": 440.0,
         "cluster": {**BASE["cluster"], "pools": [{**zone_pool("us-east1-b", 0.2, 2), "revocation": churn},
                                                  {**zone_pool("us-east1-c", 0.2, 2), "revocation": churn}]}}
    spec = spec_from_dict(d)
    plan = make_plan(spec, error_model=MODEL)
    p = plan.deadline_probability
    assert p is not None and 0.05 < p < 0.95, p
    assert plan.extra["recommendation"]["deadline_probability"] == p
    assert any("sampled timelines" in a for a in plan.assumed)
    met = 0
    seeds = range(12)
    applied = apply_plan(spec, plan)
    for s in seeds:
        one = spec_from_dict({**applied, "seed": s})
        summary, _, _ = simulate_job(one, tmp_path / f"s{s}", train_size=1797)
        met += bool(summary.extra.get("deadline_met"))
    assert abs(met / len(seeds) - p) <= 0.35, (met, p)
