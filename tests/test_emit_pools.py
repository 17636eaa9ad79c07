"""``plan --emit`` of a pool mix (issue 21): one pool's cluster, checked by Ray's validator; a mix of several refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from test_emit import ray_validate
from test_plan_pools import BASE, MODEL, zone_pool

from spotwise.config import spec_from_dict
from spotwise.errors import InputError
from spotwise.planner.emit import EmitPlan, EmitRequest, Install, write_emits
from spotwise.planner.plan import make_plan


def plan_for(pools: list[dict[str, Any]], deadline: float):
    spec = spec_from_dict({**BASE, "target": {"iterations": 600}, "deadline": deadline,
                           "cluster": {**BASE["cluster"], "pools": pools}})
    return spec, make_plan(spec, error_model=MODEL)


def emits(tmp_path: Path) -> EmitPlan:
    return EmitPlan((EmitRequest("ray-cluster", tmp_path / "cluster.yaml"),), Install(None), tmp_path / "spec.yaml", False)


def test_a_mix_from_one_pool_is_that_pools_cluster_and_passes_rays_validator(tmp_path: Path) -> None:
    spec, plan = plan_for([zone_pool("us-east1-b", 0.2, 4), zone_pool("us-east1-c", 0.5, 4)], deadline=3600.0)
    assert [p["workers"] for p in plan.extra["pools"]] == [4, 0] or [p["workers"] for p in plan.extra["pools"]][1] == 0
    lines = write_emits(emits(tmp_path), spec, plan)
    assert any("gce-k80 node(s) in us-east1-b" in line for line in lines), lines
    cfg = yaml.safe_load((tmp_path / "cluster.yaml").read_text())
    ray_validate(cfg)
    assert cfg["provider"]["availability_zone"] == "us-east1-b"
    workers = [v for k, v in cfg["available_node_types"].items() if k != "head"]
    assert sum(v["max_workers"] for v in workers) == sum(p["workers"] for p in plan.extra["pools"])


def test_a_mix_of_several_pools_is_refused_with_what_to_do(tmp_path: Path) -> None:
    spec, plan = plan_for([zone_pool("us-east1-b", 0.2, 2), zone_pool("us-east1-c", 0.5, 2)], deadline=330.0)
    assert sum(p["workers"] > 0 for p in plan.extra["pools"]) == 2, plan.extra["pools"]
    with pytest.raises(InputError) as e:
        write_emits(emits(tmp_path), spec, plan)
    assert "spans 2 pools" in str(e.value) and "one cluster per pool" in e.value.fix
