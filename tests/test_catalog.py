"""Tests of spotwise.market.catalog: packaged figures against the paper tables, lookup, extension."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from spotwise.errors import InputError
from spotwise.market.catalog import Catalog, FunctionPricing, InstanceType, StoragePricing

TRACES = Path(__file__).resolve().parents[2] / "shared" / "data" / "traces"
AZURE_MAPPING = TRACES / "training-on-a-dime" / "logs" / "azure" / "instance_mapping.csv"


@pytest.fixture(scope="module")
def cat() -> Catalog:
    return Catalog.default()


# ---------------------------------------------------------------------------- paper figures
@pytest.mark.parametrize(
    "name, vcpus, mem, on_demand, transient",
    [
        # papers/002_a246f6afe29b4bfb.txt TABLE II: GCE instance | Mem (GB) | vCPU | On-demand ($/hr) | Transient ($/hr)
        ("gce-k80", 4, 61, 0.723, 0.256),
        ("gce-p100", 8, 61, 1.43, 0.551),
        ("gce-v100", 8, 61, 2.144, 0.861),
        ("gce-ps", 4, 16, 0.143, 0.041),
    ],
)
def test_gce_prices_match_paper_002_table_ii(cat: Catalog, name: str, vcpus: int, mem: float, on_demand: float, transient: float) -> None:
    it = cat.instance(name)
    assert it.cloud == "gcp"
    assert (it.vcpus, it.memory_gb) == (vcpus, mem)
    assert it.on_demand_per_hour == on_demand
    assert it.spot_per_hour == transient
    assert it.price_per_hour("spot") == transient
    assert "002" in it.source and "Table II" in it.source


@pytest.mark.parametrize(
    "gpu, family, speedup",
    [
        # papers/003_c06237e546a4f08e.txt Table 1, throughput speed-ups w.r.t. one K80
        ("gce-p100", "transformer", 3.3),
        ("gce-p100", "a3c", 1.2),
        ("gce-p100", "cyclegan", 4.5),
        ("gce-p100", "resnet18", 4.0),
        ("gce-p100", "resnet50", 3.7),
        ("gce-v100", "transformer", 3.3),
        ("gce-v100", "a3c", 2.2),
        ("gce-v100", "cyclegan", 9.3),
        ("gce-v100", "resnet18", 6.8),
        ("gce-v100", "resnet50", 9.6),
        ("gce-k80", "resnet50", 1.0),
    ],
)
def test_throughputs_match_paper_003_table_1(cat: Catalog, gpu: str, family: str, speedup: float) -> None:
    assert cat.throughput(gpu, family) == speedup
    acc = cat.instance(gpu).accelerator
    assert cat.accelerator_profile(acc)[family] == speedup


def test_multi_gpu_instances_scale_the_accelerator_profile_linearly(cat: Catalog) -> None:
    # p3.8xlarge = 4 x V100; V100 ResNet-50 = 9.6x K80 (paper 003 Table 1) -> 4 * 9.6
    assert cat.throughput("p3.8xlarge", "resnet50") == pytest.approx(38.4)
    assert cat.throughput("p2.xlarge", "a3c") == 1.0
    assert cat.throughput("NC24s v2", "cyclegan") == pytest.approx(4 * 4.5)


@pytest.mark.parametrize(
    "name, vcpus, mem, price",
    [
        # papers/004_9dc2adb66dc8d26e.txt Table 2 (IBM Cloud us-east, April 2021)
        ("C1.4x4", 4, 4, 0.15),
        ("M1.2x16", 2, 16, 0.17),
        ("B1.4x8", 4, 8, 0.2),
    ],
)
def test_ibm_vm_prices_match_paper_004_table_2(cat: Catalog, name: str, vcpus: int, mem: float, price: float) -> None:
    it = cat.instance(name, cloud="ibm")
    assert (it.vcpus, it.memory_gb, it.on_demand_per_hour) == (vcpus, mem, price)


def test_ibm_function_price_matches_paper_004_table_2(cat: Catalog) -> None:
    # Table 2: "Functions (1vCPU, 2GB RAM) ... 3.4x10^-5 $/s (0.122 $/hour)"
    fp = cat.function("ibm-functions")
    assert fp.call_cost(2.0, 1.0) == pytest.approx(3.4e-5, rel=1e-12)
    assert fp.call_cost(2.0, 3600.0) == pytest.approx(0.1224)  # the paper rounds to 0.122
    assert fp.memory_gb_options[-1] == 2.0
    with pytest.raises(InputError, match="largest function size"):
        fp.call_cost(4.0, 1.0)


def test_aws_on_demand_list_prices(cat: Catalog) -> None:
    # AWS EC2 public price list, us-east-1 Linux (Feb 2020)
    expected = {
        "p2.xlarge": (0.9, "K80", 1), "p2.8xlarge": (7.2, "K80", 8), "p2.16xlarge": (14.4, "K80", 16),
        "p3.2xlarge": (3.06, "V100", 1), "p3.8xlarge": (12.24, "V100", 4), "p3.16xlarge": (24.48, "V100", 8),
    }
    for name, (price, gpu, n) in expected.items():
        it = cat.instance(name, cloud="aws")
        assert (it.on_demand_per_hour, it.accelerator, it.accelerator_count) == (price, gpu, n)
    for name in ("c5.large", "c5.xlarge", "c5.2xlarge", "c5.4xlarge"):
        assert cat.instance(name).on_demand_per_hour is not None


@pytest.mark.real_traces
def test_azure_nc_sizes_follow_training_on_a_dime_mapping(cat: Catalog) -> None:
    if not AZURE_MAPPING.is_file():
        pytest.skip(f"real trace absent: {AZURE_MAPPING}")
    with AZURE_MAPPING.open() as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 12
    for row in rows:
        it = cat.instance(row["Instance"], cloud="azure")
        assert it.accelerator == row["GPU type"]
        assert it.accelerator_count == int(row["# GPUs"])


def test_default_catalog_has_demo_family_and_sources(cat: Catalog) -> None:
    mlp = cat.instances(family="mlp")
    assert any(it.name == "c5.xlarge" for it in mlp)
    assert cat.throughput("c5.xlarge", "mlp") == 1.0
    assert {"mlp", "resnet50", "transformer"} <= set(cat.families())
    for it in cat.instances():
        assert it.source, f"{it.label} has no source"
    assert cat.storage("aws-s3-standard").per_gb_month == 0.023
    d = cat.to_dict()
    assert len(d["instances"]) == len(cat)
    assert len({it for it in cat.instances()}) == len(cat)  # entries are hashable values


# ---------------------------------------------------------------------------- lookup
def test_unknown_instance_lists_close_matches_and_how_to_add(cat: Catalog) -> None:
    with pytest.raises(InputError) as ei:
        cat.instance("p3.2xlarg")
    msg = str(ei.value)
    assert "unknown instance type 'p3.2xlarg'" in msg
    assert "p3.2xlarge" in msg
    assert "extend" in msg


def test_lookup_is_case_insensitive_and_filters_by_cloud(cat: Catalog) -> None:
    assert cat.instance("P3.2XLARGE").name == "p3.2xlarge"
    with pytest.raises(InputError, match="in cloud 'gcp'"):
        cat.instance("p3.2xlarge", cloud="gcp")


def test_unknown_family_is_a_clear_error(cat: Catalog) -> None:
    with pytest.raises(InputError) as ei:
        cat.throughput("c5.xlarge", "resnet50")
    assert "known families: mlp" in str(ei.value)
    with pytest.raises(InputError, match="no throughput profile"):
        cat.throughput("gce-ps", "mlp")


def test_missing_prices_raise(cat: Catalog) -> None:
    with pytest.raises(InputError, match="no fixed spot price"):
        cat.instance("p3.2xlarge").price_per_hour("spot")
    with pytest.raises(InputError, match="unknown market"):
        cat.instance("p3.2xlarge").price_per_hour("reserved")


def test_ambiguous_and_region_lookup() -> None:
    c = Catalog(
        [
            InstanceType("big", "aws", on_demand_per_hour=1.0),
            InstanceType("big", "azure", on_demand_per_hour=2.0),
            InstanceType("big", "azure", region="westus", on_demand_per_hour=2.5),
        ]
    )
    with pytest.raises(InputError, match="ambiguous"):
        c.instance("big")
    assert c.instance("big", cloud="azure").on_demand_per_hour == 2.0  # region-agnostic preferred
    assert c.instance("big", cloud="azure", region="westus").on_demand_per_hour == 2.5
    assert c.instance("big", cloud="azure", region="eastus").on_demand_per_hour == 2.0  # falls back to ""


def test_unknown_function_and_storage(cat: Catalog) -> None:
    with pytest.raises(InputError, match="ibm-functions"):
        cat.function("ibm-function")
    with pytest.raises(InputError, match="unknown storage"):
        cat.storage("nope")


# ---------------------------------------------------------------------------- user extension
def test_extend_from_yaml_adds_and_overrides(cat: Catalog, tmp_path: Path) -> None:
    f = tmp_path / "mine.yaml"
    f.write_text(
        """
instances:
  - name: my.gpu
    cloud: aws
    accelerator: V100
    accelerator_count: 2
    vcpus: 16
    on_demand_per_hour: 5.0
    throughput: {mlp: 3.5}
  - name: c5.xlarge
    cloud: aws
    vcpus: 4
    on_demand_per_hour: 0.2
    throughput: {mlp: 1.0}
functions:
  - {name: my-faas, cloud: aws, per_gb_second: 1.0e-5, per_request: 1.0e-7}
accelerators:
  V100: {mlp: 1.5}
"""
    )
    ext = cat.extend(f)
    assert len(ext) == len(cat) + 1
    assert ext.instance("c5.xlarge").on_demand_per_hour == 0.2  # user entry wins
    assert cat.instance("c5.xlarge").on_demand_per_hour == 0.17  # original untouched
    assert ext.throughput("my.gpu", "mlp") == 3.5
    assert ext.throughput("my.gpu", "resnet50") == pytest.approx(2 * 9.6)  # merged accelerator profile kept
    assert ext.throughput("p3.2xlarge", "mlp") == 1.5  # user accelerator profile added
    assert ext.function("my-faas").call_cost(1.0, 2.0, n_requests=3) == pytest.approx(3 * (2e-5 + 1e-7))


def test_extend_from_csv(cat: Catalog, tmp_path: Path) -> None:
    f = tmp_path / "mine.csv"
    f.write_text(
        "name,cloud,region,accelerator,accelerator_count,vcpus,memory_gb,on_demand_per_hour,spot_per_hour,throughput.mlp\n"
        "tiny,aws,us-east-1,,0,2,4,0.05,,0.4\n"
        "g1,gcp,,T4,1,4,15,0.35,0.11,\n"
    )
    ext = cat.extend(f)
    tiny = ext.instance("tiny", region="us-east-1")
    assert (tiny.vcpus, tiny.memory_gb, tiny.on_demand_per_hour, tiny.spot_per_hour) == (2, 4.0, 0.05, None)
    assert ext.throughput(tiny, "mlp") == 0.4
    g1 = ext.instance("g1")
    assert (g1.accelerator, g1.accelerator_count, g1.spot_per_hour, dict(g1.throughput)) == ("T4", 1, 0.11, {})


# ---------------------------------------------------------------------------- bad input
def test_negative_price_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="on_demand_per_hour must be >= 0"):
        InstanceType("x", "aws", on_demand_per_hour=-1.0)
    f = tmp_path / "neg.yaml"
    f.write_text("instances:\n  - {name: x, cloud: aws, spot_per_hour: -0.5}\n")
    with pytest.raises(InputError) as ei:
        Catalog.from_file(f)
    assert "spot_per_hour must be >= 0" in str(ei.value) and "neg.yaml" in str(ei.value)
    g = tmp_path / "neg.csv"
    g.write_text("name,cloud,on_demand_per_hour\nx,aws,-2\n")
    with pytest.raises(InputError, match="line 2"):
        Catalog.from_file(g)


def test_missing_column_is_rejected(tmp_path: Path) -> None:
    f = tmp_path / "nocloud.csv"
    f.write_text("name,on_demand_per_hour\nx,1.0\n")
    with pytest.raises(InputError, match=r"missing column\(s\) \['cloud'\]"):
        Catalog.from_file(f)
    g = tmp_path / "nocloud.yaml"
    g.write_text("instances:\n  - {name: x, on_demand_per_hour: 1.0}\n")
    with pytest.raises(InputError, match="missing field"):
        Catalog.from_file(g)


def test_non_numeric_values_are_rejected(tmp_path: Path) -> None:
    f = tmp_path / "text.csv"
    f.write_text("name,cloud,vcpus,on_demand_per_hour\nx,aws,4,cheap\n")
    with pytest.raises(InputError) as ei:
        Catalog.from_file(f)
    assert "on_demand_per_hour must be a number" in str(ei.value) and "line 2" in str(ei.value)
    g = tmp_path / "text.yaml"
    g.write_text("instances:\n  - {name: x, cloud: aws, vcpus: four}\n")
    with pytest.raises(InputError, match="vcpus must be a number"):
        Catalog.from_file(g)
    h = tmp_path / "tp.yaml"
    h.write_text("instances:\n  - {name: x, cloud: aws, throughput: {mlp: fast}}\n")
    with pytest.raises(InputError, match=r"throughput\[mlp\] must be a number"):
        Catalog.from_file(h)


@pytest.mark.parametrize(
    "text, match",
    [
        ("instances:\n  - {name: x, cloud: aws, price: 1}\n", "unknown field"),
        ("machines: []\n", "unknown top-level key"),
        ("instances: {name: x}\n", "must be a list"),
        ("instances: [\n", "not valid YAML"),
        ("instances:\n  - {name: x, cloud: aws, accelerator: V100}\n", "accelerator_count 0"),
        ("instances:\n  - {name: x, cloud: aws, vcpus: 2.5}\n", "whole number"),
        ("instances:\n  - {name: x, cloud: aws, throughput: {mlp: 0}}\n", "must be > 0"),
        ("functions:\n  - {name: f, cloud: aws}\n", "incomplete entry"),
        ("storage:\n  - {name: s, cloud: aws, per_gb_month: -1}\n", "per_gb_month must be >= 0"),
    ],
)
def test_bad_yaml_entries(tmp_path: Path, text: str, match: str) -> None:
    f = tmp_path / "bad.yaml"
    f.write_text(text)
    with pytest.raises(InputError, match=match):
        Catalog.from_file(f)


def test_bad_files(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="not found"):
        Catalog.from_file(tmp_path / "absent.yaml")
    f = tmp_path / "cat.json"
    f.write_text("{}")
    with pytest.raises(InputError, match="unsupported catalog file type"):
        Catalog.from_file(f)
    g = tmp_path / "extra.csv"
    g.write_text("name,cloud,colour\nx,aws,red\n")
    with pytest.raises(InputError, match="unknown column"):
        Catalog.from_file(g)


def test_record_validation() -> None:
    with pytest.raises(InputError, match="name must be a non-empty string"):
        InstanceType("", "aws")
    with pytest.raises(InputError, match="per_request must be >= 0"):
        FunctionPricing("f", "aws", per_gb_second=1e-5, per_request=-1)
    with pytest.raises(InputError, match="egress_per_gb must be a number"):
        StoragePricing("s", "aws", per_gb_month=0.02, egress_per_gb="free")  # type: ignore[arg-type]
