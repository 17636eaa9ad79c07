"""Issue 29 item 5: ``cluster.accelerators: V100:1`` picks the instance type, ``target.hours`` sizes the job."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from spotwise.config import load_spec, spec_from_dict
from spotwise.errors import InputError
from spotwise.market.catalog import Catalog
from spotwise.spec.hardware import cloud_of_region, expected_step_s, parse_accelerators, pick_instance

BASE: dict[str, Any] = {"name": "h", "workload": {"name": "mlp-digits", "family": "resnet50"}, "target": {"hours": 24},
                        "deadline": "36h", "cluster": {"accelerators": "V100:1", "region": "us-east-1", "straggler": 0,
                                                       "sync_overhead_s": 0}}


def _spec(**cluster: Any) -> Any:
    return spec_from_dict({**BASE, "cluster": {**BASE["cluster"], **cluster}})


def test_accelerators_pick_the_cheapest_type_of_the_regions_cloud() -> None:
    s = _spec()
    assert (s.cluster.instance_type, s.cluster.cloud) == ("p3.2xlarge", "aws")
    assert _spec(region="us-central1").cluster.instance_type == "gce-v100"
    assert _spec(region="eastus").cluster.instance_type == "NC6s v3"
    assert _spec(accelerators="V100:4").cluster.instance_type == "p3.8xlarge"
    assert _spec(accelerators="k80").cluster.instance_type == "p2.xlarge"  # case-insensitive, count defaults to 1
    assert parse_accelerators("A100:8") == ("A100", 8)
    assert [cloud_of_region(r) for r in ("us-east-1b", "us-central1-a", "us_east", None)] == ["aws", "gcp", "azure", None]


def test_target_hours_is_the_jobs_compute_time_on_its_cluster() -> None:
    s = _spec()
    cat = Catalog.default()
    assert s.target.iterations * expected_step_s(s, cat) == pytest.approx(24 * 3600, rel=1e-3)
    # with iterations given, the step time is derived instead
    both = spec_from_dict({**BASE, "target": {"hours": 24, "iterations": 86400}})
    assert both.target.iterations == 86400 and both.workload.step_time_s == pytest.approx(9.6)  # V100 resnet50 = 9.6 x K80
    # the same hours on more workers: the round is as long, the job as long
    two = _spec(workers=2)
    assert two.target.iterations * expected_step_s(two, cat) == pytest.approx(24 * 3600, rel=1e-3)


@pytest.mark.parametrize("cluster, says", [
    ({"accelerators": "K99:1"}, "knows K80, P100, V100"),
    ({"accelerators": "A100:1"}, "did you mean"),
    ({"accelerators": "V100:3"}, "V100:1, V100:4, V100:8"),
    ({"accelerators": "V100:x"}, "NAME:COUNT"),
    ({"accelerators": "V100:1", "cloud": "ibm"}, "has no V100"),
    ({"accelerators": "V100:1", "instance_type": "p2.xlarge"}, "carries 1 x K80"),
])
def test_bad_accelerators_exit_2_with_the_valid_names(cluster: dict[str, Any], says: str) -> None:
    with pytest.raises(InputError, match="cluster.accelerators") as info:
        _spec(**cluster)
    assert says in info.value.message


def test_hours_iterations_and_step_time_that_disagree_are_refused() -> None:
    with pytest.raises(InputError, match="disagree"):
        spec_from_dict({**BASE, "workload": {**BASE["workload"], "step_time_s": 5.0}, "target": {"hours": 24, "iterations": 1000}})
    with pytest.raises(InputError, match="target.hours"):
        spec_from_dict({**BASE, "target": {"hours": -1}})


def test_the_cli_exits_2_naming_the_valid_accelerators(tmp_path: Path, cli) -> None:
    import yaml

    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({**BASE, "cluster": {"accelerators": "H200:1"}}))
    code, out, err = cli("plan", str(bad))
    assert code == 2 and "K80, P100, V100" in err and "Traceback" not in err
    good = tmp_path / "good.yaml"
    good.write_text(yaml.safe_dump(BASE))
    assert load_spec(good).cluster.instance_type == "p3.2xlarge"


def test_an_unquoted_yaml_timestamp_is_a_start_time(tmp_path: Path) -> None:
    p = tmp_path / "s.yaml"
    p.write_text("name: t\nworkload: {name: mlp-digits}\ntarget: {iterations: 10}\ncluster: {instance_type: c5.xlarge}\n"
                 "market:\n  synthetic: {kind: constant, price: 0.1}\n  start: 2020-03-21T23:50:20Z\n")
    assert load_spec(p).market.start == "2020-03-21T23:50:20Z"


def test_target_hours_alone_sizes_a_schedule_too() -> None:
    """Issue 42 item 2: hours alone with a cosine schedule used to exit 2 ("the job has no
    target.iterations"); the schedule now spans the samples the iterations hours became commit."""
    from spotwise.training.recipe import recipe_of

    d = {**BASE, "workload": {**BASE["workload"], "schedule": {"decay": "cosine", "warmup_fraction": 0.02}}}
    s = spec_from_dict(d)
    assert s.target.iterations and recipe_of(s.workload, s.planned_samples()).schedule.total == s.planned_samples()
    too_long = {**BASE, "workload": {**BASE["workload"], "schedule": {"decay": "cosine", "total": 10 ** 12}}}
    with pytest.raises(InputError, match="schedule spans"):
        spec_from_dict(too_long)


def test_a_built_in_workload_implies_its_family_where_the_instance_has_it() -> None:
    """Issue 42 item 2: resnet18-cifar on a V100 failed with "no throughput for model family 'mlp'";
    a built-in without ``family:`` is its own family where the type has a profile for it, else mlp."""
    gpu = {"name": "g", "workload": {"name": "resnet18-cifar", "batch_size": 128}, "target": {"hours": 2},
           "cluster": {"accelerators": "V100:1", "region": "us-east-1", "workers": 4}}
    s = spec_from_dict(gpu)
    assert (s.workload.family, s.cluster.instance_type) == ("resnet18", "p3.2xlarge") and s.target.iterations > 0
    assert spec_from_dict(s.to_dict()).workload.family == "resnet18", "written into spec.json"
    gpt = spec_from_dict({**gpu, "workload": {"name": "gpt-bytes", "batch_size": 16}})
    assert gpt.workload.family == "transformer"
    cpu = spec_from_dict({**gpu, "target": {"iterations": 10}, "cluster": {"instance_type": "c5.xlarge", "workers": 2}})
    assert cpu.workload.family == "mlp", "the CPU types' profile"
    given = spec_from_dict({**gpu, "workload": {"name": "resnet18-cifar", "family": "resnet50"}})
    assert given.workload.family == "resnet50", "a family the spec gives is kept"
