"""Trace loaders on small hand-made files: behaviour, bad input, and fuzzing."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spotwise.errors import InputError
from spotwise.market.traces import (
    GCP_MAX_LIFETIME_S,
    detect_format,
    load_aws_spot_json,
    load_azure_price_csv,
    load_gcp_lifetime_csv,
    load_gcp_vm_data_csv,
    load_skypilot_json,
    load_traces,
)


def ts(s: str) -> float:
    return datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()


def aws_rec(zone: str, itype: str, price: object, stamp: str, prod: str = "Linux/UNIX") -> dict:
    return {"AvailabilityZone": zone, "InstanceType": itype, "ProductDescription": prod, "SpotPrice": price, "Timestamp": stamp}


def write_aws(path: Path, recs: list[dict]) -> Path:
    path.write_text(json.dumps({"SpotPriceHistory": recs, "NextToken": ""}, indent=4))
    return path


# ------------------------------------------------------------------------------------------ AWS
def test_aws_split_sort_dedupe_merge(tmp_path: Path) -> None:
    a = write_aws(tmp_path / "a.json", [
        aws_rec("us-east-2a", "p3.2xlarge", "1.2000", "2020-02-20T12:00:00.000Z"),
        aws_rec("us-east-2b", "p3.2xlarge", "1.1000", "2020-02-20T10:00:00.000Z"),
        aws_rec("us-east-2a", "p3.2xlarge", "0.9000", "2020-02-20T08:00:00.000Z"),  # unsorted (newest first)
    ])
    b = write_aws(tmp_path / "b.json", [
        aws_rec("us-east-2a", "p3.2xlarge", "1.2000", "2020-02-20T12:00:00.000Z"),  # duplicate across files
        aws_rec("us-east-2a", "p3.2xlarge", "1.5000", "2020-02-20T15:00:00.000Z"),
        aws_rec("us-east-2c", "p2.xlarge", "0.2700", "2020-02-20T16:00:00.000Z"),
    ])
    empty = write_aws(tmp_path / "empty.json", [])
    series = load_aws_spot_json([a, b, empty])
    ids = [s.meta.id for s in series]
    assert ids == ["aws:us-east-2a:p3.2xlarge", "aws:us-east-2b:p3.2xlarge", "aws:us-east-2c:p2.xlarge"]
    s = series[0]
    assert s.times.tolist() == [ts("2020-02-20T08:00:00Z"), ts("2020-02-20T12:00:00Z"), ts("2020-02-20T15:00:00Z")]
    assert s.values.tolist() == [0.9, 1.2, 1.5]
    assert s.meta.extra["duplicates"] == 1 and s.meta.extra["records"] == 4 and s.meta.extra["files"] == 2
    assert s.meta.region == "us-east-2" and s.meta.zone == "us-east-2a" and s.meta.instance == "p3.2xlarge"
    # every series of the region ends at the region's latest timestamp
    assert all(x.end == ts("2020-02-20T16:00:00Z") for x in series)
    assert load_aws_spot_json([empty]) == []


def test_aws_multiple_products_and_regions(tmp_path: Path) -> None:
    f = write_aws(tmp_path / "x.json", [
        aws_rec("eu-west-1a", "p2.xlarge", "0.3", "2020-01-01T00:00:00Z", "Linux/UNIX"),
        aws_rec("eu-west-1a", "p2.xlarge", "0.5", "2020-01-01T00:00:00Z", "Windows"),
        aws_rec("us-west-2b", "p2.xlarge", 0.4, "2020-01-03T00:00:00+00:00"),
    ])
    series = {s.meta.id: s for s in load_aws_spot_json(f)}
    assert set(series) == {"aws:eu-west-1a:p2.xlarge:Linux/UNIX", "aws:eu-west-1a:p2.xlarge:Windows", "aws:us-west-2b:p2.xlarge"}
    assert series["aws:eu-west-1a:p2.xlarge:Windows"].end == ts("2020-01-01T00:00:00Z")
    assert series["aws:us-west-2b:p2.xlarge"].meta.region == "us-west-2"


@pytest.mark.parametrize(
    "recs, needle",
    [
        ([aws_rec("us-east-2a", "p3.2xlarge", "-1.0", "2020-01-01T00:00:00Z")], "negative price"),
        ([aws_rec("us-east-2a", "p3.2xlarge", "cheap", "2020-01-01T00:00:00Z")], "not a number"),
        ([aws_rec("us-east-2a", "p3.2xlarge", "NaN", "2020-01-01T00:00:00Z")], "not a number"),
        ([aws_rec("us-east-2a", "p3.2xlarge", "1.0", "yesterday")], "bad timestamp"),
        ([{"AvailabilityZone": "us-east-2a", "SpotPrice": "1", "Timestamp": "2020-01-01T00:00:00Z"}], "lacks InstanceType"),
        ([42], "not an object"),
    ],
)
def test_aws_bad_records(tmp_path: Path, recs: list, needle: str) -> None:
    f = write_aws(tmp_path / "bad.json", recs)
    with pytest.raises(InputError, match=needle) as ei:
        load_aws_spot_json(f)
    assert str(f) in str(ei.value) and " -- " in str(ei.value)  # names the file and says how to fix


def test_missing_and_malformed_files(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="file not found"):
        load_aws_spot_json(tmp_path / "nope.json")
    bad = tmp_path / "bad.json"
    bad.write_text('{"SpotPriceHistory": [')
    with pytest.raises(InputError, match="not valid JSON"):
        load_aws_spot_json(bad)
    with pytest.raises(InputError, match="not valid JSON"):
        load_skypilot_json(bad)
    other = tmp_path / "other.json"
    other.write_text('{"Prices": []}')
    with pytest.raises(InputError, match="SpotPriceHistory"):
        load_aws_spot_json(other)
    with pytest.raises(InputError, match="unrecognised trace format"):
        load_traces([other])
    with pytest.raises(InputError, match="file not found"):
        load_traces([tmp_path / "missing.csv"])
    binary = tmp_path / "x.bin"
    binary.write_bytes(b"\xff\xfe\x00\x01")
    with pytest.raises(InputError, match="UTF-8"):
        load_traces([binary])


# ------------------------------------------------------------------------------------------ Azure
AZ_HEADER = "Date,NC6,NC12s v3,ND40\n"


def test_azure_loads_with_mapping(tmp_path: Path) -> None:
    (tmp_path / "cost").mkdir()
    (tmp_path / "instance_mapping.csv").write_text("Instance,GPU type,# GPUs\nNC6,K80,1\nNC12s v3,V100,2\n")
    f = tmp_path / "cost" / "us_north_central.csv"
    f.write_text(AZ_HEADER + "2/25/2020,$0.20,$1.00,\n2/24/2020,$0.10,$1.00,\n2/24/2020,$0.10,$1.00,\n2/26/2020,$0.30,,\n")
    series = load_azure_price_csv(f)
    assert [s.meta.id for s in series] == ["azure:us-north-central:NC6", "azure:us-north-central:NC12s_v3"]  # ND40 all empty
    nc6, nc12 = series
    assert nc6.values.tolist() == [0.1, 0.2, 0.3]
    assert nc6.start == ts("2020-02-24T00:00:00Z") and nc6.end == ts("2020-02-27T00:00:00Z")
    assert nc12.end == ts("2020-02-26T00:00:00Z")
    assert nc6.meta.extra == {"gpu": "K80", "gpu_count": 1} and nc12.meta.extra["gpu_count"] == 2
    assert nc12.meta.instance == "NC12s v3" and nc6.meta.region == "us-north-central"
    assert load_traces([f])[0].meta.id == "azure:us-north-central:NC6"


@pytest.mark.parametrize(
    "text, needle",
    [
        ("Day,NC6\n2/24/2020,$0.1\n", "expected 'Date'"),
        ("Date,NC6\n2/24/2020,$-0.1\n", "negative price"),
        ("Date,NC6\n2/24/2020,free\n", "not a number"),
        ("Date,NC6\n24.2.2020,$0.1\n", "bad date"),
        ("Date,NC6\n2/24/2020,$0.1,$0.2\n", "cells"),
        ("Date,NC6,NC6\n2/24/2020,$0.1,$0.2\n", "appears twice"),
        ("", "empty CSV"),
    ],
)
def test_azure_bad_input(tmp_path: Path, text: str, needle: str) -> None:
    f = tmp_path / "us_east.csv"
    f.write_text(text)
    with pytest.raises(InputError, match=needle):
        load_azure_price_csv(f)


# ------------------------------------------------------------------------------------------ SkyPilot
def test_skypilot_availability_and_prices(tmp_path: Path) -> None:
    d = tmp_path / "aws-10-26-2022"
    d.mkdir()
    f = d / "us-west-2b_v100_1.json"
    f.write_text(json.dumps({"metadata": {"gap_seconds": 600}, "data": [1, 1, 0, 0, 1, 1], "prices": [0.9, 0.9, 0.9, 1.1, 1.1, 1.0]}))
    avail, price = load_skypilot_json(f)
    t0 = ts("2022-10-26T00:00:00Z")
    assert avail.meta.id == "skypilot/aws-10-26-2022:us-west-2b:v100_1"
    assert (avail.meta.zone, avail.meta.region, avail.meta.instance, avail.meta.cloud) == ("us-west-2b", "us-west-2", "v100_1", "aws")
    assert avail.times.tolist() == [t0, t0 + 1200, t0 + 2400]
    assert avail.values.tolist() == [1, 0, 1]
    assert avail.end == t0 + 3600 and avail.meta.extra["ticks"] == 6
    assert avail.fraction_available() == pytest.approx(4 / 6)
    assert price.meta.id.endswith(":price") and price.kind == "price"
    assert price.values.tolist() == [0.9, 1.1, 1.0]


def test_skypilot_no_date_folder_starts_at_zero(tmp_path: Path) -> None:
    f = tmp_path / "us-central1-a_c3-88.json"
    f.write_text(json.dumps({"metadata": {"gap_seconds": 30}, "data": [2, 3, 3]}))
    (s,) = load_skypilot_json(f)
    assert s.start == 0 and s.end == 90 and s.meta.region == "us-central1" and s.meta.instance == "c3-88"


@pytest.mark.parametrize(
    "doc, needle",
    [
        ({"metadata": {"gap_seconds": 0}, "data": [1]}, "not a positive number"),
        ({"metadata": {"gap_seconds": 60}, "data": []}, "empty"),
        ({"metadata": {"gap_seconds": 60}, "data": [1, -1]}, "negative"),
        ({"metadata": {"gap_seconds": 60}, "data": [1, "x"]}, "not a finite number"),
        ({"metadata": {"gap_seconds": 60}, "data": [1, 0], "prices": [1.0]}, "prices"),
        ({"metadata": {}, "data": [1]}, "gap_seconds"),
    ],
)
def test_skypilot_bad_input(tmp_path: Path, doc: dict, needle: str) -> None:
    f = tmp_path / "us-east-1a_v100_1.json"
    f.write_text(json.dumps(doc))
    with pytest.raises(InputError, match=needle):
        load_skypilot_json(f)


# ------------------------------------------------------------------------------------------ GCP
LIFETIME = """K80,,\r
VM name,Start,Terminate\r
a-europe-west1-b-0,2/18/19 23:40,2/19/19 23:46\r
a-us-central1-c-6,2/19/19 12:07,2/19/19 12:32\r
P100,,\r
VM name,Start,Terminate\r
a-p100-us-west1-b-0,2/19/19 22:53,2/20/19 09:50\r
Previous experiments,,\r
8-May,created,terminated\r
test0,09:49:51,10:28:22\r
test1,22:00:00,01:00:00\r
9-May,,\r
us-central1-a,,\r
gpu0,10:46:09,11:10:49\r
test4less,1046389:24:27,1046391:54:31\r
"""


def test_gcp_lifetime_sections(tmp_path: Path) -> None:
    f = tmp_path / "lifetime.csv"
    f.write_text(LIFETIME)
    t = load_gcp_lifetime_csv(f)
    assert [r.name for r in t.records] == ["a-europe-west1-b-0", "a-us-central1-c-6", "a-p100-us-west1-b-0", "test0", "test1", "gpu0", "test4less"]
    assert [r.gpu for r in t.records] == ["K80", "K80", "P100", "", "", "", ""]
    assert [r.zone for r in t.records] == ["europe-west1-b", "us-central1-c", "us-west1-b", "", "", "us-central1-a", "us-central1-a"]
    lt = t.lifetimes_s
    assert lt[0] == GCP_MAX_LIFETIME_S and t.records[0].capped  # 24 h 6 min -> capped
    assert lt[1] == 25 * 60 and not t.records[1].capped
    assert lt[4] == 3 * 3600  # crosses midnight
    assert t.records[3].start == ts("2018-05-08T09:49:51Z")
    assert t.records[5].start == ts("2018-05-09T10:46:09Z")
    assert lt[6] == 2 * 3600 + 30 * 60 + 4 and t.records[6].note == "excel-hours"
    assert len(t.by_gpu("k80")) == 2 and len(t.by_gpu("V100")) == 0
    with pytest.raises(InputError, match="lifetime"):
        load_traces([f])
    assert detect_format(f) == "gcp-lifetime"


@pytest.mark.parametrize(
    "text, needle",
    [
        ("K80,,\nVM name,Start,Terminate\na-x,2/18/19 23:40,\n", "needs a name"),
        ("K80,,\nVM name,Start,Terminate\na-x,2/18/19 23:40,2/17/19 23:00\n", "before start"),
        ("K80,,\nVM name,Start,Terminate\na-x,10:00:00,11:00:00\n", "no day"),
        ("K80,,\nVM name,Start,Terminate\na-x,noon,later\n", "bad time"),
        ("K80,,\nVM name,Start,Terminate\n", "no VM rows"),
    ],
)
def test_gcp_lifetime_bad_input(tmp_path: Path, text: str, needle: str) -> None:
    f = tmp_path / "lifetime.csv"
    f.write_text(text)
    with pytest.raises(InputError, match=needle):
        load_gcp_lifetime_csv(f)


def test_gcp_vm_data(tmp_path: Path) -> None:
    d = tmp_path / "p100_v100_spot" / "v100"
    d.mkdir(parents=True)
    f = d / "vm_data.csv"
    f.write_text("VM_name,Uptime,Revoked\r\nv100-spot-us-west1-b-run1-master,992.5,Manually stopped due to revoked master\r\n"
                 "v100-spot-us-west1-b-run1-worker-0,500.0,Revoked\r\nx-us-east1-c-run2-worker-1,90000,Job completed\r\n")
    t = load_gcp_vm_data_csv(f)
    assert t.gpus() == ["V100"]
    assert t.censored.tolist() == [True, False, True]
    assert t.lifetimes_s.tolist() == [992.5, 500.0, GCP_MAX_LIFETIME_S] and t.capped.tolist() == [False, False, True]
    assert [r.zone for r in t.records] == ["us-west1-b", "us-west1-b", "us-east1-c"]
    g = tmp_path / "k80_on_demand" / "2-demand"
    g.mkdir(parents=True)
    (g / "vm_data.csv").write_text("VM_name,Uptime\ndemand2-us-east1-c-run1-master,7516.3\n")
    t2 = load_gcp_vm_data_csv(g / "vm_data.csv")
    assert t2.gpus() == ["K80"] and t2.censored.tolist() == [True]
    bad = tmp_path / "bad.csv"
    bad.write_text("VM_name,Uptime,Revoked\nvm,-3,Revoked\n")
    with pytest.raises(InputError, match="uptime"):
        load_gcp_vm_data_csv(bad)
    bad.write_text("name,seconds\nvm,3\n")
    with pytest.raises(InputError, match="header"):
        load_gcp_vm_data_csv(bad)


# ------------------------------------------------------------------------------------------ load_traces
def test_load_traces_directory(tmp_path: Path) -> None:
    root = tmp_path / "traces"
    (root / "aws" / "us-east-2").mkdir(parents=True)
    (root / "aws" / "us-west-1").mkdir(parents=True)
    write_aws(root / "aws" / "us-east-2" / "p3.json", [aws_rec("us-east-2a", "p3.2xlarge", "1.0", "2020-01-01T00:00:00Z")])
    write_aws(root / "aws" / "us-west-1" / "p3.json", [aws_rec("us-east-2a", "p3.2xlarge", "2.0", "2020-01-02T00:00:00Z"),
                                                     aws_rec("us-west-1b", "p3.2xlarge", "3.0", "2020-01-02T00:00:00Z")])
    write_aws(root / "aws" / "empty.json", [])
    sky = root / "sky" / "gcp-04-30-2023"
    sky.mkdir(parents=True)
    (sky / "us-east1-b_c3-88.json").write_text(json.dumps({"metadata": {"gap_seconds": 30}, "data": [1, 1, 0]}))
    (root / "SOURCE.txt").write_text("Source: somewhere")
    (root / "README.md").write_text("# readme")
    (root / "notes.json").write_text("{not json")  # unrecognised inside a directory: skipped
    (root / "lifetime.csv").write_text(LIFETIME)  # GCP lifetimes inside a directory: skipped
    (root / "az").mkdir()
    (root / "az" / "us_east.csv").write_text("Date,NC6\n2/24/2020,$0.1\n")
    series = load_traces([root, root / "az" / "us_east.csv"])  # the Azure file is named twice: loaded once
    ids = [s.meta.id for s in series]
    assert ids == ["aws:us-east-2a:p3.2xlarge", "aws:us-west-1b:p3.2xlarge", "azure:us-east:NC6", "skypilot/gcp-04-30-2023:us-east1-b:c3-88"]
    assert series[0].values.tolist() == [1.0, 2.0]  # merged across files
    assert series[3].meta.cloud == "gcp"
    # a recognised but broken file inside a directory is still an error
    (root / "az" / "broken.csv").write_text("Date,NC6\n2/24/2020,$-1\n")
    with pytest.raises(InputError, match="negative"):
        load_traces(root)


def test_load_traces_unique_ids(tmp_path: Path) -> None:
    for sub in ("a", "b"):
        d = tmp_path / sub / "aws-01-01-2023"
        d.mkdir(parents=True)
        (d / "us-east-1a_v100_1.json").write_text(json.dumps({"metadata": {"gap_seconds": 60}, "data": [1]}))
    ids = [s.meta.id for s in load_traces([tmp_path])]
    assert ids == ["skypilot/aws-01-01-2023:us-east-1a:v100_1", "skypilot/aws-01-01-2023:us-east-1a:v100_1#2"]


# ------------------------------------------------------------------------------------------ fuzzing
_json_leaf = st.one_of(st.none(), st.booleans(), st.integers(-10**30, 10**30), st.floats(allow_nan=True), st.text(max_size=30))
_jsonish = st.recursive(_json_leaf, lambda c: st.one_of(st.lists(c, max_size=5), st.dictionaries(st.text(max_size=20), c, max_size=5)), max_leaves=25)

_aws_like = st.fixed_dictionaries({"SpotPriceHistory": st.lists(st.one_of(
    st.fixed_dictionaries({
        "AvailabilityZone": st.one_of(st.sampled_from(["us-east-2a", "eu-west-1b", ""]), _json_leaf),
        "InstanceType": st.one_of(st.just("p3.2xlarge"), _json_leaf),
        "SpotPrice": st.one_of(st.floats(allow_nan=True, allow_infinity=True).map(str), st.text(max_size=8), _json_leaf),
        "Timestamp": st.one_of(st.datetimes().map(lambda d: d.isoformat() + "Z"), st.text(max_size=25), _json_leaf),
    }),
    _jsonish), max_size=6)})
_sky_like = st.fixed_dictionaries(
    {"metadata": st.fixed_dictionaries({"gap_seconds": st.one_of(st.floats(), st.integers(-5, 10**6), _json_leaf)}),
     "data": st.one_of(st.lists(st.one_of(st.integers(-2, 20), st.floats()), max_size=20), _jsonish)},
    optional={"prices": st.one_of(st.lists(st.floats(), max_size=20), _jsonish)})
_csv_cell = st.one_of(st.sampled_from(["$0.24552", "", "2/24/2020", "-1", "nan", "10:00:00", "2/18/19 23:40", "K80", "Revoked", "8-May"]),
                      st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=10))
_csv_text = st.lists(st.lists(_csv_cell, min_size=1, max_size=4).map(",".join), max_size=8).map("\n".join)

_FUZZ = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def _must_load_or_input_error(fn, path: Path) -> None:
    try:
        fn(path)
    except InputError:
        pass


@_FUZZ
@given(content=st.one_of(st.binary(max_size=200), st.text(max_size=200), _jsonish.map(json.dumps), _aws_like.map(json.dumps),
                         _sky_like.map(json.dumps), _csv_text))
def test_fuzz_every_loader(tmp_path_factory: pytest.TempPathFactory, content: bytes | str) -> None:
    d = tmp_path_factory.mktemp("fuzz") / "aws-02-30-2023"
    d.mkdir()
    f = d / "us-east-1a_v100_1.json"
    if isinstance(content, bytes):
        f.write_bytes(content)
    else:
        f.write_bytes(content.encode("utf-8", "replace"))
    for fn in (load_aws_spot_json, load_skypilot_json, load_azure_price_csv, load_gcp_lifetime_csv, load_gcp_vm_data_csv,
               lambda p: load_traces([p]), lambda p: load_traces([p.parent])):
        _must_load_or_input_error(fn, f)


@_FUZZ
@given(doc=_aws_like)
def test_fuzz_aws_structured(tmp_path_factory: pytest.TempPathFactory, doc: dict) -> None:
    f = tmp_path_factory.mktemp("aws") / "x.json"
    f.write_text(json.dumps(doc))
    try:
        series = load_aws_spot_json(f)
    except InputError:
        return
    for s in series:
        assert np.all(np.diff(s.times) > 0) and s.end >= s.times[-1] and np.all(s.values >= 0)


@_FUZZ
@given(doc=_sky_like)
def test_fuzz_skypilot_structured(tmp_path_factory: pytest.TempPathFactory, doc: dict) -> None:
    f = tmp_path_factory.mktemp("sky") / "us-east-1a_v100_1.json"
    f.write_text(json.dumps(doc))
    try:
        series = load_skypilot_json(f)
    except InputError:
        return
    assert series[0].meta.extra["ticks"] == len(doc["data"])


@_FUZZ
@given(text=_csv_text, header=st.sampled_from(["Date,NC6,NC12", "VM_name,Uptime,Revoked", "K80,,\nVM name,Start,Terminate", "8-May,,"]))
def test_fuzz_csv_loaders(tmp_path_factory: pytest.TempPathFactory, text: str, header: str) -> None:
    f = tmp_path_factory.mktemp("csv") / "us_east.csv"
    f.write_bytes((header + "\n" + text).encode("utf-8", "replace"))
    for fn in (load_azure_price_csv, load_gcp_lifetime_csv, load_gcp_vm_data_csv, lambda p: load_traces([p])):
        _must_load_or_input_error(fn, f)
