"""Issue 29 item 1: one job, one cost -- plan, simulate, the sweep, run and the emitted files bill the same
coordinator and agree on the expected cost.

Before issue 29 a spec without ``cluster.coordinator_instance`` billed the worker's type (a V100 box) as the
parameter server in ``plan``/``simulate``, no coordinator at all in the sweep, and emitted an m5.xlarge head.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from spotwise import api
from spotwise.config import spec_from_dict
from spotwise.errors import InputError
from spotwise.market.catalog import Catalog
from spotwise.market.coordinator import coordinator_for, default_coordinator
from spotwise.market.world import build_market

#: 2 workers of c5.xlarge at a constant 0.05 $/h, never revoked; 240 steps of 30 virtual seconds: 2 h of work
JOB: dict[str, Any] = {
    "name": "one-cost",
    "seed": 3,
    "workload": {"name": "mlp-digits", "family": "mlp", "step_time_s": 30.0, "eval_every": 1000},
    "target": {"iterations": 240},
    "deadline": "4h",
    "cluster": {"instance_type": "c5.xlarge", "workers": 2, "region": "us-east-1", "straggler": 0, "sync_overhead_s": 0},
    "market": {"synthetic": {"kind": "constant", "price": 0.05}, "revocation": {"model": "none"}, "billing": "per-second",
               "min_charge_s": 0},
    "outputs": {"plots": False, "checkpoint_every": 0},
}
WORK_H = 240 * 30.0 / 3600.0  # c5.xlarge has mlp throughput 1.0


def _expected() -> float:
    return WORK_H * (2 * 0.05 + 0.085)  # two workers + the default coordinator c5.large (0.085 $/h on-demand)


def test_default_coordinator_is_a_cheap_on_demand_cpu_type_of_the_workers_cloud() -> None:
    cat = Catalog.default()
    for instance, cloud, want in (("p3.2xlarge", "aws", "c5.large"), ("gce-v100", "gcp", "gce-ps"),
                                  ("NC6s v3", "azure", "D2s v3")):
        spec = spec_from_dict({**JOB, "cluster": {"instance_type": instance, "workers": 1}})
        got = coordinator_for(spec, cat)
        assert (got.name, got.cloud, got.accelerator) == (want, cloud, ""), got
        assert got.on_demand_per_hour is not None and got.on_demand_per_hour < 0.2
        assert build_market(spec, catalog=cat).coordinator == got  # the market bills exactly it
    # the spec's own choice wins, and a GPU type is never picked by default
    spec = spec_from_dict({**JOB, "cluster": {"instance_type": "p3.2xlarge", "workers": 1, "coordinator_instance": "m4.xlarge"}})
    assert coordinator_for(spec, cat).name == "m4.xlarge"
    assert all(not default_coordinator(cat, c).accelerator for c in ("aws", "gcp", "azure", "ibm"))


def test_a_cloud_with_no_cpu_type_says_how_to_name_a_coordinator() -> None:
    cat = Catalog.from_mapping({"instances": [{"name": "g1", "cloud": "aws", "accelerator": "V100", "accelerator_count": 1,
                                               "vcpus": 8, "memory_gb": 61, "on_demand_per_hour": 3.0}]})
    with pytest.raises(InputError, match="coordinator_instance"):
        default_coordinator(cat, "aws")


@pytest.fixture(scope="module")
def costs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("one-cost")
    plan = api.plan(JOB, pilot_steps=40)
    sim = api.simulate(JOB, tmp / "sim")
    sw = api.sweep(JOB, spec_market=True, strategies="no-interruptions", restart="0s", starts="6h", horizon="3d",
                   history="1h")
    return {"plan": plan, "sim": sim, "sweep": sw, "tmp": tmp}


def test_plan_simulate_and_sweep_quote_one_cost(costs: dict[str, Any]) -> None:
    want = _expected()
    plan, sim, sw = costs["plan"], costs["sim"], costs["sweep"]
    assert plan.extra["coordinator"] == "c5.large" and plan.extra["coordinator_price"] == pytest.approx(0.085)
    assert plan.expected_cost == pytest.approx(want, rel=0.05), plan
    assert sim.cost_usd == pytest.approx(want, rel=0.05)
    assert sim.cost_usd == pytest.approx(plan.expected_cost, rel=0.05)
    (row,) = [s for s in sw.summaries if s.strategy == "no-interruptions"]
    assert sw.job.coordinator_per_hour == pytest.approx(0.085)  # the sweep bills the same coordinator
    assert row.mean_cost == pytest.approx(want, rel=0.05)
    lo, hi = min(r.cost for r in sw.rows), max(r.cost for r in sw.rows)
    assert lo * 0.95 <= plan.expected_cost <= hi * 1.05  # the plan within the sweep's spread of windows


def test_the_simulated_bill_names_the_coordinator(costs: dict[str, Any]) -> None:
    summary = json.loads((costs["tmp"] / "sim" / "summary.json").read_text())
    coord = summary["cost_breakdown"]["by_category"]["coordinator"]
    assert coord == pytest.approx(WORK_H * 0.085, rel=0.05)  # a c5.large: not a c5.xlarge (0.17) nor free
    assert summary["cost_usd"] == pytest.approx(costs["sim"].cost_usd)


@pytest.mark.slow
def test_run_bills_what_plan_and_simulate_quote(ray_session, costs: dict[str, Any], tmp_path: Path) -> None:
    from spotwise.control.runner import run_job

    summary = run_job(spec_from_dict(JOB), tmp_path / "run", progress=False, plots=False)
    assert summary.status == "completed"
    assert summary.cost_usd == pytest.approx(costs["plan"].expected_cost, rel=0.05)
    assert summary.cost_usd == pytest.approx(costs["sim"].cost_usd, rel=0.05)
    assert math.isfinite(summary.cost_usd)


def test_the_emitted_cluster_starts_the_coordinator_that_was_billed(costs: dict[str, Any]) -> None:
    from spotwise.planner import emit

    spec = spec_from_dict(JOB)
    rec = costs["plan"].extra["recommendation"]
    cfg = emit.ray_cluster_config(rec, spec, install=emit.parse_install("git+https://example.org/spotwise.git"))
    head = cfg["available_node_types"][cfg["head_node_type"]]
    assert head["node_config"]["InstanceType"] == costs["plan"].extra["coordinator"] == "c5.large"
    assert "InstanceMarketOptions" not in head["node_config"]  # on demand, as billed
    sky = emit.sky_controller_config("aws", costs["plan"].extra["coordinator"])
    assert sky["jobs"]["controller"]["resources"]["instance_type"] == "c5.large"
