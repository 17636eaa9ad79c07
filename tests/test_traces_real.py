"""Every real trace under ../shared/data/traces loads, and agrees with an independent parse.

The expected numbers are computed here from the raw files with ``json``/``csv`` only (no loader
code), then compared with what :mod:`spotwise.market.traces` returns.
"""

from __future__ import annotations

import csv
import json
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pytest

from spotwise.market.traces import (
    GCP_MAX_LIFETIME_S,
    load_aws_spot_json,
    load_azure_price_csv,
    load_gcp_lifetime_csv,
    load_gcp_vm_data_csv,
    load_skypilot_json,
    load_traces,
)
from spotwise.errors import InputError

TRACES = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "traces"

pytestmark = [
    pytest.mark.real_traces,
    pytest.mark.skipif(not TRACES.is_dir(), reason=f"real traces not found at {TRACES} (see DESIGN.md, 'Real data')"),
]

AWS_DIR = TRACES / "training-on-a-dime" / "logs" / "aws" / "cost"
AZURE_DIR = TRACES / "training-on-a-dime" / "logs" / "azure" / "cost"
SKY_DIR = TRACES / "skypilot-spot-traces"
GCP_DIR = TRACES / "gcp-transient-lifetime" / "data"

AWS_REGIONS = sorted(p.name for p in AWS_DIR.iterdir()) if AWS_DIR.is_dir() else []
AZURE_FILES = sorted(AZURE_DIR.glob("*.csv")) if AZURE_DIR.is_dir() else []
SKY_FILES = sorted(SKY_DIR.rglob("*.json")) if SKY_DIR.is_dir() else []
VM_DATA_FILES = sorted(GCP_DIR.glob("training/*/*/vm_data.csv")) if GCP_DIR.is_dir() else []


def _rel(p: Path) -> str:
    return str(p.relative_to(TRACES))


def _iso(s: str) -> float:
    return datetime.strptime(s, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=timezone.utc).timestamp()


# ------------------------------------------------------------------------------------------ AWS
@pytest.mark.parametrize("region", AWS_REGIONS)
def test_aws_region_matches_raw(region: str) -> None:
    files = sorted((AWS_DIR / region).glob("*.json"))
    assert len(files) == 30
    groups: dict[tuple[str, str], dict[float, float]] = defaultdict(dict)
    raw_records = 0
    latest = -np.inf
    for f in files:
        for rec in json.loads(f.read_text())["SpotPriceHistory"]:
            raw_records += 1
            t = _iso(rec["Timestamp"])
            groups[(rec["AvailabilityZone"], rec["InstanceType"])][t] = float(rec["SpotPrice"])
            latest = max(latest, t)
    series = load_aws_spot_json(files)
    by_id = {s.meta.id: s for s in series}
    assert len(by_id) == len(series) == len(groups)
    assert sum(s.meta.extra["records"] for s in series) == raw_records
    for (zone, itype), pts in groups.items():
        s = by_id[f"aws:{zone}:{itype}"]
        assert len(s) == len(pts)
        assert s.min() == pytest.approx(min(pts.values()))
        assert s.max() == pytest.approx(max(pts.values()))
        assert s.start == min(pts) and s.times[-1] == max(pts)
        assert s.end == latest
        assert s.meta.region == region and s.meta.zone == zone and s.meta.instance == itype
        assert s.kind == "price" and s.meta.cloud == "aws"


def test_aws_empty_files_contribute_nothing() -> None:
    empties = [f for f in sorted(AWS_DIR.rglob("*.json")) if not json.loads(f.read_text())["SpotPriceHistory"]]
    assert empties, "the dataset is documented to contain empty dumps"
    assert load_aws_spot_json(empties) == []


# ------------------------------------------------------------------------------------------ Azure
@pytest.mark.parametrize("path", AZURE_FILES, ids=_rel)
def test_azure_file_matches_raw(path: Path) -> None:
    with path.open(newline="") as fh:
        rows = list(csv.reader(fh))
    header, body = rows[0], rows[1:]
    expected = {}
    for j, size in enumerate(header[1:], start=1):
        cells = [float(r[j].lstrip("$")) for r in body if r[j].strip()]
        if cells:
            expected[size] = cells
    last_day = max(datetime.strptime(r[0], "%m/%d/%Y") for r in body).replace(tzinfo=timezone.utc).timestamp()
    series = load_azure_price_csv(path)
    assert {s.meta.instance for s in series} == set(expected)
    mapping = {r[0]: r[1] for r in csv.reader((path.parent.parent / "instance_mapping.csv").open()) if r[0] != "Instance"}
    for s in series:
        vals = expected[s.meta.instance]
        assert len(s) == len(vals)
        assert s.min() == pytest.approx(min(vals)) and s.max() == pytest.approx(max(vals))
        assert s.end == last_day + 86400
        assert s.meta.region == path.stem.replace("_", "-")
        assert s.meta.extra["gpu"] == mapping[s.meta.instance]


# ------------------------------------------------------------------------------------------ SkyPilot
@pytest.mark.parametrize("path", SKY_FILES, ids=_rel)
def test_skypilot_file_matches_raw(path: Path) -> None:
    doc = json.loads(path.read_text())
    data = doc["data"]
    gap = doc["metadata"]["gap_seconds"]
    runs = 1 + sum(1 for a, b in zip(data, data[1:]) if a != b)
    series = load_skypilot_json(path)
    avail = series[0]
    assert avail.kind == "availability"
    assert avail.meta.extra["ticks"] == len(data)
    assert len(avail) == runs
    assert avail.min() == min(data) and avail.max() == max(data)
    assert avail.duration == pytest.approx(gap * len(data))
    assert avail.fraction_available() == pytest.approx(sum(1 for x in data if x >= 1) / len(data))
    assert avail.preemption_times().size == sum(1 for a, b in zip(data, data[1:]) if b < a)
    m, d, y = path.parent.name.split("-")[1:]
    assert avail.start == datetime(int(y), int(m), int(d), tzinfo=timezone.utc).timestamp()
    zone, instance = path.stem.split("_", 1)
    assert (avail.meta.zone, avail.meta.instance, avail.meta.cloud) == (zone, instance, path.parent.name.split("-")[0])
    if "prices" in doc:
        assert len(series) == 2
        price = series[1]
        assert price.kind == "price"
        assert price.min() == pytest.approx(min(doc["prices"])) and price.max() == pytest.approx(max(doc["prices"]))
        assert price.end == avail.end
    else:
        assert len(series) == 1


# ------------------------------------------------------------------------------------------ GCP
def test_gcp_lifetime_csv_matches_raw() -> None:
    path = GCP_DIR / "lifetime" / "lifetime.csv"
    with path.open(newline="") as fh:
        rows = [r for r in csv.reader(fh)]
    data = [r for r in rows if len(r) == 3 and all(c.strip() for c in r) and r[0] != "VM name" and r[1] != "created"]
    full = []
    for r in data:
        if "/" in r[1]:
            a = datetime.strptime(r[1], "%m/%d/%y %H:%M")
            b = datetime.strptime(r[2], "%m/%d/%y %H:%M")
            full.append((b - a).total_seconds())
    table = load_gcp_lifetime_csv(path)
    assert len(table) == len(data)
    assert len(table) > 500
    dated = table.by_gpu("K80").lifetimes_s.tolist() + table.by_gpu("P100").lifetimes_s.tolist() + table.by_gpu("V100").lifetimes_s.tolist()
    assert len(dated) == len(full)
    assert min(dated) == pytest.approx(min(full)) and max(dated) == pytest.approx(min(max(full), GCP_MAX_LIFETIME_S))
    lt = table.lifetimes_s
    assert np.all((lt >= 0) & (lt <= GCP_MAX_LIFETIME_S))
    n_capped_dated = sum(int(table.by_gpu(g).capped.sum()) for g in ("K80", "P100", "V100"))
    assert n_capped_dated == sum(1 for x in full if x > GCP_MAX_LIFETIME_S) > 0
    assert not table.censored.any()
    named = [r for r in table.records if r.name.startswith("a-p100-us-west1-b")]
    assert named and all(r.zone == "us-west1-b" for r in named)
    assert all(r.zone == "europe-west1-b" for r in table.records if r.name.startswith("a-europe-west1-b"))


@pytest.mark.parametrize("path", VM_DATA_FILES, ids=_rel)
def test_gcp_vm_data_matches_raw(path: Path) -> None:
    with path.open(newline="") as fh:
        rows = list(csv.reader(fh))[1:]
    uptimes = [float(r[1]) for r in rows]
    revoked = sum(1 for r in rows if len(r) > 2 and r[2].strip().lower() == "revoked")
    table = load_gcp_vm_data_csv(path)
    assert len(table) == len(rows)
    assert int((~table.censored).sum()) == revoked
    assert table.lifetimes_s.max() == pytest.approx(min(max(uptimes), GCP_MAX_LIFETIME_S))
    assert table.lifetimes_s.min() == pytest.approx(min(uptimes))


def test_gcp_lifetime_file_is_not_a_series() -> None:
    with pytest.raises(InputError, match="lifetime"):
        load_traces([GCP_DIR / "lifetime" / "lifetime.csv"])


# ------------------------------------------------------------------------------------------ all
def test_load_traces_whole_tree() -> None:
    series = load_traces([TRACES])
    ids = [s.meta.id for s in series]
    assert len(ids) == len(set(ids))
    n_aws = len(load_aws_spot_json(sorted(AWS_DIR.rglob("*.json"))))
    n_azure = sum(len(load_azure_price_csv(f)) for f in AZURE_FILES)
    n_sky = sum(1 + ("prices" in json.loads(f.read_text())) for f in SKY_FILES)
    assert len(series) == n_aws + n_azure + n_sky
    assert {s.meta.cloud for s in series} >= {"aws", "azure", "gcp"}
