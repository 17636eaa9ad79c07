"""The plane GPU jobs get (issue 40 item 4): ``cluster.data_plane: auto``, the default.

Where the workers have GPUs the default is the collective plane (its S-SGD step runs on PyTorch's
DDP); a CPU job, a parameter-server sync mode, pools, shards and serverless keep the parameter
server; a spec that names its plane keeps it.  ``plan`` and ``run`` say which plane and why.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from spotwise.config import data_plane_why, load_spec, spec_from_dict
from spotwise.errors import InputError

BASE: dict[str, Any] = {"name": "plane", "workload": {"name": "mlp-digits", "batch_size": 16},
                        "target": {"iterations": 20}}


def _spec(**cluster: Any) -> Any:
    return spec_from_dict({**BASE, "cluster": cluster})


@pytest.mark.parametrize("cluster, plane, sync, says", [
    ({"instance_type": "p3.2xlarge"}, "collective", "ssgd", "p3.2xlarge: 1 x V100"),
    ({"instance_type": "p3.8xlarge", "workers": 2}, "collective", "ssgd", "4 x V100"),
    ({"accelerators": "K80:1"}, "collective", "ssgd", "cluster.accelerators: K80:1"),
    ({"instance_type": "c5.xlarge", "device": "cuda"}, "collective", "ssgd", "cluster.device: cuda"),
    ({"instance_type": "c5.xlarge"}, "ps", "full", "c5.xlarge has no GPU"),
    ({"instance_type": "p3.2xlarge", "device": "cpu"}, "ps", "full", "cluster.device: cpu"),
    ({"accelerators": "V100:1", "device": "cpu"}, "ps", "full", "cluster.device: cpu"),
    ({"instance_type": "p3.2xlarge", "sync": "async"}, "ps", "async", "parameter-server mode"),
    ({"instance_type": "p3.2xlarge", "workers": 4, "sync": "n-sync", "sync_n": 2}, "ps", "n-sync", "parameter-server mode"),
    ({"instance_type": "c5.xlarge", "sync": "sma"}, "collective", "sma", "collective mode"),
    ({"instance_type": "p3.2xlarge", "data_plane": "ps"}, "ps", "full", "in the spec"),
    ({"instance_type": "c5.xlarge", "data_plane": "collective"}, "collective", "ssgd", "in the spec"),
    ({"instance_type": "p3.2xlarge", "ps_shards": 2, "ps_gbps": 8}, "ps", "full", "parameter server"),
    ({"kind": "serverless", "workers": 2}, "ps", "isp", "serverless"),
])
def test_the_default_plane_follows_the_workers_hardware(cluster: dict[str, Any], plane: str, sync: str, says: str) -> None:
    spec = _spec(**cluster)
    assert (spec.cluster.data_plane, spec.cluster.sync) == (plane, sync)
    why = data_plane_why(spec)
    assert says in why, why


def test_pools_of_gpu_types_stay_on_the_parameter_server() -> None:
    spec = _spec(pools=[{"name": "k80", "instance_type": "p2.xlarge", "workers": 1},
                        {"name": "v100", "instance_type": "p3.2xlarge", "workers": 1}])
    assert spec.cluster.data_plane == "ps" and "pools" in data_plane_why(spec)


def test_a_spec_that_names_its_plane_gets_the_usual_errors() -> None:
    with pytest.raises(InputError, match="collective mode"):
        _spec(instance_type="p3.2xlarge", data_plane="ps", sync="ssgd")
    with pytest.raises(InputError, match="valid values are .auto., .ps., .collective."):
        _spec(instance_type="p3.2xlarge", data_plane="gpu")
    with pytest.raises(InputError, match="a serverless cluster syncs with"):
        _spec(kind="serverless", workers=2, sync="ssgd")


def test_a_gpu_type_from_the_specs_own_catalog_counts(tmp_path: Path) -> None:
    (tmp_path / "catalog.yaml").write_text(yaml.safe_dump({"instances": [
        {"name": "my.gpu", "cloud": "aws", "vcpus": 8, "accelerator": "A100", "accelerator_count": 2,
         "on_demand_per_hour": 3.0, "throughput": {"mlp": 1.0}}]}))
    (tmp_path / "job.yaml").write_text(yaml.safe_dump({**BASE, "cluster": {"instance_type": "my.gpu"},
                                                       "market": {"catalog": ["catalog.yaml"]}}))
    spec = load_spec(tmp_path / "job.yaml")
    assert spec.cluster.data_plane == "collective" and "my.gpu: 2 x A100" in data_plane_why(spec)


def test_the_run_directory_records_the_chosen_plane_and_a_resume_reads_it_back() -> None:
    spec = _spec(instance_type="p3.2xlarge")
    back = spec_from_dict(json.loads(json.dumps(spec.to_dict())))  # spec.json's round trip
    assert back.cluster.data_plane == "collective" and back.cluster.sync == "ssgd"
    assert "_plane_why" not in json.dumps(spec.to_dict())


def test_plan_says_which_plane_and_why(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from spotwise.cli import app

    (tmp_path / "gpu.yaml").write_text(yaml.safe_dump({**BASE, "cluster": {"instance_type": "p3.2xlarge", "workers": 2},
                                                       "workload": {**BASE["workload"], "family": "resnet50",
                                                                    "step_time_s": 0.5}}))
    res = CliRunner().invoke(app, ["plan", str(tmp_path / "gpu.yaml"), "--pilot-steps", "20"])
    assert res.exit_code == 0, res.output
    assert "data plane: collective (the workers have GPUs (p3.2xlarge: 1 x V100)" in " ".join(res.output.split())
    res = CliRunner().invoke(app, ["plan", str(tmp_path / "gpu.yaml"), "--pilot-steps", "20", "--json"])
    assert res.exit_code == 0
    assert json.loads(res.stdout)["extra"]["data_plane"]["plane"] == "collective"
