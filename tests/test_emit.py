"""Issue 20 item 3: ``spotwise plan SPEC --emit ray-cluster=FILE | skypilot=FILE``.

The generators (:mod:`spotwise.planner.emit`) are checked against the launchers' own validators:
Ray's cluster-launcher schema (``ray.autoscaler._private.util.prepare_config`` + ``validate_config``,
what ``ray up`` runs before it talks to a cloud) and SkyPilot's task and resources schemas
(``sky.utils.schemas`` through ``sky.utils.common_utils.validate_schema``, the first step of
``sky.Task.from_yaml``; its next step looks instance types up in SkyPilot's catalog, which it downloads,
so it is not run here).  Each validator is also shown to refuse a broken file.  No cluster is started.
"""

from __future__ import annotations

import copy
import re
import importlib.util
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from spotwise.config import load_spec, spec_from_dict
from spotwise.errors import InputError
from spotwise.planner import emit

REPO = Path(__file__).resolve().parents[1]
URI = "s3://bucket/spotwise-job"
EXAMPLES = REPO / "examples"


def _spec(name: str = "p3-24h-traces.yaml", **cluster: Any) -> Any:
    d = yaml.safe_load((EXAMPLES / name).read_text())
    d.get("market", {}).pop("revocation", None)  # the GCP example's lifetimes file lives outside the repository
    d["cluster"].update(cluster)
    return spec_from_dict(d)


def _rec(**over: Any) -> dict[str, Any]:
    rec: dict[str, Any] = {"strategy": "one-bid", "place": "us-east-1b", "instance": "p3.2xlarge", "workers": 4,
                           "bids": [0.95] * 4, "expected_cost": 12.5,
                           "ranked_places": [{"zone": "us-east-1b", "instance": "p3.2xlarge"},
                                             {"zone": "us-east-1a", "instance": "p3.2xlarge"},
                                             {"zone": "us-west-2b", "instance": "p3.2xlarge"}]}
    rec.update(over)
    return rec


def _gcp_spec() -> Any:
    return _spec("gcp-preemptible.yaml", region="us-central1-f")


def _gcp_rec(**over: Any) -> dict[str, Any]:
    return {"strategy": "preemptible-thm7", "place": "us-central1-f", "instance": "gce-v100", "workers": 3, "bids": [],
            "expected_cost": 3.0, **over}


def ray_validate(cfg: dict[str, Any]) -> dict[str, Any]:
    """What ``ray up`` checks before it contacts the cloud: defaults merged, then Ray's JSON schema and rules."""
    from ray.autoscaler._private.util import prepare_config, validate_config

    prepared = prepare_config(copy.deepcopy(cfg))
    validate_config(prepared)
    return prepared


def _bash_ok(script: str) -> None:
    res = subprocess.run(["bash", "-n"], input=script, text=True, capture_output=True)
    assert res.returncode == 0, (res.stderr, script)


# ------------------------------------------------------------------------------------------ Ray
def test_ray_aws_config_passes_rays_validator_and_holds_the_plan() -> None:
    spec = _spec()
    cfg = emit.ray_cluster_config(_rec(), spec, spec_file="/x/planned.yaml",
                                  install=emit.parse_install("git+https://example.org/spotwise.git"))
    ray_validate(cfg)
    assert cfg["provider"]["type"] == "aws" and cfg["provider"]["region"] == "us-east-1"
    assert cfg["provider"]["availability_zone"] == "us-east-1b,us-east-1a"  # ranked, same region and type
    types = cfg["available_node_types"]
    head = types[cfg["head_node_type"]]
    assert head["node_config"]["InstanceType"] == "c5.large"  # the spec's coordinator_instance
    assert "InstanceMarketOptions" not in head["node_config"]  # the coordinator is on demand
    workers = types["spot-workers"]
    assert workers["node_config"]["InstanceType"] == "p3.2xlarge"
    assert workers["node_config"]["InstanceMarketOptions"] == {"MarketType": "spot", "SpotOptions": {"MaxPrice": "0.9500"}}
    assert workers["resources"] == {"spot": 1, "CPU": 8, "GPU": 1}
    assert workers["min_workers"] == 0 and workers["max_workers"] == 4 and cfg["max_workers"] == 4
    assert cfg["file_mounts"] == {emit.REMOTE_SPEC: "/x/planned.yaml"}
    assert any("git+https://example.org/spotwise.git" in c for c in cfg["setup_commands"])
    assert not any("request_resources" in c for c in cfg["head_start_ray_commands"])  # spotwise --autoscale asks
    for c in cfg["setup_commands"] + cfg["head_start_ray_commands"] + cfg["worker_start_ray_commands"]:
        _bash_ok(c)


def test_ray_gcp_config_passes_rays_validator_with_spot_vms_and_gpus() -> None:
    cfg = emit.ray_cluster_config(_gcp_rec(), _gcp_spec())
    ray_validate(cfg)
    prov = cfg["provider"]
    assert prov["type"] == "gcp" and prov["region"] == "us-central1" and prov["availability_zone"] == "us-central1-f"
    assert prov["project_id"] == emit.GCP_PROJECT_PLACEHOLDER
    head = cfg["available_node_types"]["head"]
    assert head["node_config"]["machineType"] == "n1-standard-4" and "scheduling" not in head["node_config"]
    assert head["resources"] == {"CPU": 4}  # GCP needs the resources spelled out (Ray fills them in for AWS only)
    w = cfg["available_node_types"]["spot-workers"]
    nc = w["node_config"]
    assert nc["machineType"] == "n1-standard-8"  # gce-v100: 8 vCPUs, one V100
    assert nc["guestAccelerators"] == [{"acceleratorType": "nvidia-tesla-v100", "acceleratorCount": 1}]
    assert nc["scheduling"]["provisioningModel"] == "SPOT" and isinstance(nc["scheduling"], dict)
    assert w["resources"] == {"spot": 1, "CPU": 8, "GPU": 1} and w["max_workers"] == 3


def test_rays_validator_refuses_broken_configs() -> None:
    """The check above can fail: Ray's validator refuses what is wrong."""
    import jsonschema

    good = emit.ray_cluster_config(_rec(), _spec())
    no_node_config = copy.deepcopy(good)
    del no_node_config["available_node_types"]["spot-workers"]["node_config"]
    fractional = copy.deepcopy(good)
    fractional["available_node_types"]["spot-workers"]["resources"]["spot"] = 0.5
    unknown = copy.deepcopy(good)
    unknown["available_node_types"]["spot-workers"]["min_nodes"] = 0
    for bad in (no_node_config, fractional, unknown):
        with pytest.raises(jsonschema.ValidationError):
            ray_validate(bad)
    wrong_head = copy.deepcopy(good)
    wrong_head["head_node_type"] = "nope"
    with pytest.raises(ValueError, match="head_node_type"):
        ray_validate(wrong_head)


def test_multi_gpu_types_carry_one_worker_per_gpu() -> None:
    cfg = emit.ray_cluster_config(_rec(instance="p3.8xlarge", workers=6, bids=[2.0] * 6, ranked_places=[]), _spec())
    ray_validate(cfg)
    w = cfg["available_node_types"]["spot-workers"]
    assert w["resources"]["spot"] == 4 and w["resources"]["GPU"] == 4
    assert w["max_workers"] == 2  # ceil(6 / 4) nodes
    t = emit.emit_target(_rec(instance="p3.8xlarge", workers=6, bids=[2.0] * 6), _spec())
    assert any("one spotwise worker per GPU" in n for n in t.notes)


def test_two_bids_make_two_spot_node_types() -> None:
    cfg = emit.ray_cluster_config(_rec(strategy="two-bids", bids=[1.2, 1.2, 0.8, 0.8]), _spec())
    ray_validate(cfg)
    spot_types = {k: v for k, v in cfg["available_node_types"].items() if k != "head"}
    prices = sorted(v["node_config"]["InstanceMarketOptions"]["SpotOptions"]["MaxPrice"] for v in spot_types.values())
    assert prices == ["0.8000", "1.2000"]
    assert sum(v["max_workers"] for v in spot_types.values()) == cfg["max_workers"] == 4


def test_on_demand_and_dynamic_recommendations() -> None:
    cfg = emit.ray_cluster_config(_rec(strategy="on-demand", bids=[]), _spec(coordinator_instance=None))
    ray_validate(cfg)
    w = cfg["available_node_types"]["workers"]
    assert "InstanceMarketOptions" not in w["node_config"]
    # no coordinator_instance: the cheapest on-demand CPU instance of the cloud, the machine plan/simulate bill
    from spotwise.market.coordinator import coordinator_for
    from spotwise.market.world import load_catalog

    spec = _spec(coordinator_instance=None)
    head = cfg["available_node_types"]["head"]
    assert head["node_config"]["InstanceType"] == coordinator_for(spec, load_catalog(spec)).name
    assert "InstanceMarketOptions" not in head["node_config"]
    dyn = emit.ray_cluster_config(_rec(strategy="dynamic", workers=8, bids=[1.0] * 8), _spec())
    # the dynamic strategy starts with half: spotwise run --autoscale asks for the slots it wants itself
    assert not any("request_resources" in c for c in dyn["head_start_ray_commands"])
    assert dyn["max_workers"] == 8


def test_render_writes_comments_and_yaml_that_loads_back() -> None:
    cfg = emit.ray_cluster_config(_rec(), _spec())
    text = emit.render(cfg, ["a header line"])
    assert text.startswith("# a header line\n")
    assert yaml.safe_load(text) == cfg


# ------------------------------------------------------------------------------------------ refusals
@pytest.mark.parametrize("rec, spec, says", [
    (None, "aws", "no recommended place"),
    ({}, "aws", "no recommended place"),
    (_rec(strategy="serverless"), "aws", "serverless"),
    (_rec(place=""), "aws", "cluster.region"),
    (_rec(place="eastus"), "aws", "not an AWS region"),
    (_rec(instance="NC6s v3"), "azure", "AWS and GCP"),
    (_rec(), "serverless", "serverless"),
])
def test_nothing_to_launch_is_an_input_error(rec: Any, spec: str, says: str) -> None:
    s = {"aws": lambda: _spec(), "azure": lambda: _spec(cloud=None),
         "serverless": lambda: load_spec(EXAMPLES / "serverless-pmf.yaml")}[spec]()
    with pytest.raises(InputError, match=says):
        emit.ray_cluster_config(rec, s)


def test_a_gcp_region_without_zone_gets_a_zone_and_a_note() -> None:
    t = emit.emit_target(_gcp_rec(place="europe-west4"), _gcp_spec())
    assert (t.region, t.zone) == ("europe-west4", "europe-west4-b")
    assert any("zone europe-west4-b was chosen" in n for n in t.notes)


def test_install_sources(tmp_path: Path) -> None:
    assert emit.parse_install(None).pip_arg is None
    assert emit.parse_install("git+https://x/y.git").pip_arg == "git+https://x/y.git"
    whl = tmp_path / "spotwise-0.1.0-py3-none-any.whl"
    whl.write_bytes(b"")
    inst = emit.parse_install(str(whl))
    assert inst.pip_arg == f"{emit.REMOTE_DIR}/{whl.name}" and inst.mounts == {inst.pip_arg: str(whl.resolve())}
    src = emit.parse_install(str(REPO))
    assert src.mounts == {f"{emit.REMOTE_DIR}/src": str(REPO)}
    for bad in (str(tmp_path / "missing.whl"), str(tmp_path)):
        with pytest.raises(InputError, match="--install"):
            emit.parse_install(bad)
    cfg = emit.ray_cluster_config(_rec(), _spec(), install=inst)
    ray_validate(cfg)
    assert cfg["file_mounts"][inst.pip_arg] == str(whl.resolve())


# ------------------------------------------------------------------------------------------ SkyPilot
@pytest.fixture(autouse=True)
def _keep_tracebacks(monkeypatch: pytest.MonkeyPatch) -> None:
    """SkyPilot's errors set ``sys.tracebacklimit = 0`` for the whole process; undo it after each test."""
    import sys

    monkeypatch.setattr(sys, "tracebacklimit", getattr(sys, "tracebacklimit", None), raising=False)
    if getattr(sys, "tracebacklimit", None) is None:
        monkeypatch.delattr(sys, "tracebacklimit", raising=False)


def _sky_validate(task: dict[str, Any]) -> None:
    pytest.importorskip("sky", reason="SkyPilot is not installed (pip install -e '.[skypilot]'): its schema check is skipped")
    from sky.utils import common_utils, schemas

    t = copy.deepcopy(task)
    common_utils.validate_schema(t, schemas.get_task_schema(), "Invalid task YAML: ")
    common_utils.validate_schema(t["resources"], schemas.get_resources_schema(), "Invalid resources YAML: ")


def test_skypilot_task_holds_the_plan_and_its_scripts_parse() -> None:
    task = emit.skypilot_task(_rec(), _spec(), spec_file="/x/planned.yaml", uri=URI)
    res = task["resources"]
    assert res["cloud"] == "aws" and res["use_spot"] is True
    assert res["ordered"][0] == {"region": "us-east-1", "zone": "us-east-1b", "instance_type": "p3.2xlarge"}
    assert [p["zone"] for p in res["ordered"]] == ["us-east-1b", "us-east-1a", "us-west-2b"]
    assert task["num_nodes"] == 4 and task["envs"] == {"SPOTWISE_INSTALL": "", "SPOTWISE_RAY_PORT": "6379"}
    # a managed job: recovered after preemption, across the plan's regions; the run resumes from the bucket
    assert task["resources"]["job_recovery"] == {"strategy": "EAGER_NEXT_REGION", "max_restarts_on_errors": 3}
    assert f"run --resume {URI} " in task["run"] and "nvidia-smi" in task["setup"]  # the URI quoted (plain: no quotes)
    assert "--notice-source aws" in task["run"] and "bin/spotwise\" run" in task["run"]
    _bash_ok(task["setup"])
    _bash_ok(task["run"])
    gcp = emit.skypilot_task(_gcp_rec(), _gcp_spec(), uri=URI)
    assert gcp["resources"]["instance_type"] == "n1-standard-8" and gcp["resources"]["accelerators"] == "V100:1"
    assert "--notice-source gcp" in gcp["run"]
    # issue 42 item 3: the nodes install what the bucket's scheme needs (s3fs for s3://, gcsfs for gs://)
    assert "pip install -q 's3fs>=2024.6'" in task["setup"]
    assert "gcsfs" in emit.skypilot_task(_gcp_rec(), _gcp_spec(), uri="gs://b/p")["setup"]
    assert "s3fs" not in emit.skypilot_task(_rec(), _spec(), uri="file:///shared/run")["setup"]


def test_the_ray_cluster_setup_installs_what_outputs_uri_needs() -> None:
    """issue 42 item 3: with an s3:// outputs.uri every node's setup installs s3fs after spotwise."""
    spec = _spec()
    spec.outputs.uri = URI
    cfg = emit.ray_cluster_config(_rec(), spec)
    setup = cfg["setup_commands"][0]
    lines = setup.splitlines()
    at = next(i for i, ln in enumerate(lines) if "pip install -q 's3fs>=2024.6'" in ln)
    assert "bin/spotwise\" --help" in lines[at + 1], "installed after spotwise, checked with it"
    _bash_ok(setup)
    spec.outputs.uri = None
    assert "s3fs" not in emit.ray_cluster_config(_rec(), spec)["setup_commands"][0]


def test_skypilot_task_passes_skypilots_schemas() -> None:
    _sky_validate(emit.skypilot_task(_rec(), _spec(), uri=URI))
    _sky_validate(emit.skypilot_task(_gcp_rec(), _gcp_spec(), uri=URI))
    _sky_validate(emit.skypilot_task(_rec(strategy="on-demand", ranked_places=[]), _spec(), uri=URI))


def test_skypilots_schemas_refuse_broken_tasks() -> None:
    good = emit.skypilot_task(_rec(), _spec(), uri=URI)
    unknown = copy.deepcopy(good)
    unknown["num_node"] = 2
    spot_word = copy.deepcopy(good)
    spot_word["resources"]["use_spot"] = "yes"
    for bad in (unknown, spot_word):
        with pytest.raises(ValueError):
            _sky_validate(bad)


# ------------------------------------------------------------------------------------------ the command
def test_plan_emit_writes_both_files(cli: Any, tmp_path: Path) -> None:
    cluster, task, planned = tmp_path / "cluster.yaml", tmp_path / "task.yaml", tmp_path / "planned.yaml"
    d = yaml.safe_load((EXAMPLES / "p3-24h-traces.yaml").read_text())
    d["outputs"] = {"uri": URI}
    spec = tmp_path / "p3.yaml"
    spec.write_text(yaml.safe_dump(d))
    code, _, err = cli("plan", str(spec), "--pilot-steps", "10", "--write-spec", str(planned),
                       "--emit", f"ray-cluster={cluster}", "--emit", f"skypilot={task}", "--install", "git+https://x/s.git")
    assert code == 0, err
    assert "ray-cluster file written" in err and "skypilot file written" in err
    # issue 42 item 3: the first line says a preemption relaunches the whole SkyPilot job, and what that costs
    first = " ".join(err.split("skypilot file written")[0].split())
    assert first.startswith("note: on SkyPilot every node is spot, the coordinator (rank 0) too: a preemption"), first
    assert "relaunches the whole job from its last checkpoint" in first and "emit ray-cluster" in first
    assert re.search(r"Each costs about [0-9.]+ min .* and ~\$[0-9.,]+ at the plan's rate", first), first
    cfg = yaml.safe_load(cluster.read_text())
    ray_validate(cfg)
    # the nodes read the planned spec, rewritten beside the file (its inputs at their mounted copies)
    node_spec = tmp_path / "cluster.node-spec.yaml"
    assert cfg["file_mounts"][emit.REMOTE_SPEC] == str(node_spec)
    assert load_spec(node_spec).cluster.workers == load_spec(planned).cluster.workers
    assert cfg["provider"]["availability_zone"].startswith("us-east-1b")
    text = cluster.read_text()
    assert "ray up cluster.yaml" in text and "--ray-address auto --notice-source aws --autoscale" in text
    assert "resolve:ssm:/aws/service/deeplearning/ami/" in text and "Deep Learning Base OSS NVIDIA Driver GPU AMI" in text
    assert "sky jobs launch" in task.read_text() and URI in task.read_text()
    assert yaml.safe_load(task.read_text())["resources"]["zone"] == "us-east-1b"
    # issue 29 item 1: the one on-demand machine of each file is the coordinator plan and simulate bill
    from spotwise.market.coordinator import coordinator_for
    from spotwise.market.world import load_catalog

    job = load_spec(spec)
    billed = coordinator_for(job, load_catalog(job)).name
    assert cfg["available_node_types"][cfg["head_node_type"]]["node_config"]["InstanceType"] == billed
    sky_cfg = yaml.safe_load((tmp_path / "task.sky-config.yaml").read_text())
    assert sky_cfg == emit.sky_controller_config("aws", billed)
    assert "SKYPILOT_CONFIG=task.sky-config.yaml sky jobs launch" in task.read_text()
    if importlib.util.find_spec("sky") is not None:  # SkyPilot's own config schema accepts it
        from sky.utils import common_utils, schemas

        common_utils.validate_schema(sky_cfg, schemas.get_config_schema(), "Invalid config YAML: ")
    # never overwritten: a second run refuses before planning
    code, _, err = cli("plan", str(spec), "--emit", f"ray-cluster={cluster}")
    assert code == 2 and "already exists" in err


def test_plan_emit_of_an_infeasible_plan_exits_2(cli: Any, tmp_path: Path) -> None:
    d = yaml.safe_load((EXAMPLES / "p3-24h-traces.yaml").read_text())
    d["deadline"] = "1h"  # 24 h of compute
    p = tmp_path / "tight.yaml"
    p.write_text(yaml.safe_dump(d))
    code, _, err = cli("plan", str(p), "--pilot-steps", "10", "--emit", f"ray-cluster={tmp_path / 'c.yaml'}")
    assert code == 2 and "deadline" in err and "Traceback" not in err
    assert not (tmp_path / "c.yaml").exists()
