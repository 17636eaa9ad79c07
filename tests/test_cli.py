"""The command line: exit codes (0 / 2 / 1), --json contract, traces show, not-yet commands."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from _load import bound

REPO = Path(__file__).resolve().parents[1]


def _aws_fixture(path: Path) -> Path:
    records = [
        {"AvailabilityZone": "us-east-2a", "InstanceType": "p3.2xlarge", "ProductDescription": "Linux/UNIX",
         "SpotPrice": "1.20", "Timestamp": "2020-02-20T00:00:00.000Z"},
        {"AvailabilityZone": "us-east-2a", "InstanceType": "p3.2xlarge", "ProductDescription": "Linux/UNIX",
         "SpotPrice": "0.90", "Timestamp": "2020-02-20T06:00:00.000Z"},
        {"AvailabilityZone": "us-east-2b", "InstanceType": "p3.2xlarge", "ProductDescription": "Linux/UNIX",
         "SpotPrice": "1.00", "Timestamp": "2020-02-20T12:00:00.000Z"},
    ]
    path.write_text(json.dumps({"SpotPriceHistory": records, "NextToken": ""}))
    return path


def test_traces_show_json_contract(cli, tmp_path: Path) -> None:
    f = _aws_fixture(tmp_path / "p3.json")
    code, out, err = cli("traces", "show", str(f), "--json")
    assert code == 0, err
    doc = json.loads(out)  # exactly one JSON object on stdout
    assert set(doc) == {"series"}
    by_id = {s["id"]: s for s in doc["series"]}
    a = by_id["aws:us-east-2a:p3.2xlarge"]
    for key in ("id", "kind", "instance", "zone", "points", "start", "end", "min", "max", "mean"):
        assert key in a
    assert a["kind"] == "price" and a["points"] == 2 and a["min"] == 0.9 and a["max"] == 1.2
    assert a["start"] == "2020-02-20T00:00:00Z" and a["end"] == "2020-02-20T12:00:00Z"
    # 1.2 for 6 h then 0.9 for 6 h (the region's last timestamp closes the series)
    assert a["mean"] == pytest.approx(1.05)


def test_traces_show_table_and_plot(cli, tmp_path: Path) -> None:
    f = _aws_fixture(tmp_path / "p3.json")
    png = tmp_path / "plot.png"
    code, out, err = cli("traces", "show", str(f), "--plot", str(png))
    assert code == 0, err
    assert "aws:us-east-2a:p3.2xlarge" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_availability_series_fields(cli, tmp_path: Path) -> None:
    d = tmp_path / "aws-10-26-2022"
    d.mkdir()
    (d / "us-west-2a_v100_1.json").write_text(json.dumps({"metadata": {"gap_seconds": 60}, "data": [1, 1, 0, 1, 1, 1, 0, 0]}))
    code, out, err = cli("traces", "show", str(d), "--json")
    assert code == 0, err
    (s,) = json.loads(out)["series"]
    assert s["kind"] == "availability" and s["zone"] == "us-west-2a"
    assert s["fraction_available"] == pytest.approx(5 / 8)
    assert s["preemptions"] == 2
    assert s["mean_time_between_preemptions_s"] == pytest.approx(5 * 60 / 2)


@pytest.mark.parametrize(
    ("content", "says"),
    [
        ("{not json", "JSON"),
        ('{"SpotPriceHistory": [{"AvailabilityZone": "a", "InstanceType": "x", "SpotPrice": "-1", "Timestamp": "2020-01-01T00:00:00Z"}]}', "negative"),
        ('{"SpotPriceHistory": [{"AvailabilityZone": "a", "InstanceType": "x", "SpotPrice": "cheap", "Timestamp": "2020-01-01T00:00:00Z"}]}', "cheap"),
    ],
)
def test_bad_traces_exit_2_without_traceback(cli, tmp_path: Path, content: str, says: str) -> None:
    f = tmp_path / "bad.json"
    f.write_text(content)
    code, out, err = cli("traces", "show", str(f))
    assert code == 2
    assert "Traceback" not in err and says in err
    assert err.startswith("error:")


def test_missing_file_and_bad_plot_name(cli, tmp_path: Path) -> None:
    code, _, err = cli("traces", "show", str(tmp_path / "nope.json"))
    assert code == 2 and "not found" in err.lower() or "does not exist" in err.lower()
    f = _aws_fixture(tmp_path / "p3.json")
    code, _, err = cli("traces", "show", str(f), "--plot", str(tmp_path / "x.jpg"))
    assert code == 2 and ".png" in err


def test_empty_aws_dump_says_so(cli, tmp_path: Path) -> None:
    f = tmp_path / "empty.json"
    f.write_text('{"SpotPriceHistory": [], "NextToken": ""}')
    code, _, err = cli("traces", "show", str(f))
    assert code == 2 and "no price or availability records" in err


def test_simulate_needs_an_output_directory(cli) -> None:
    code, out, err = cli("simulate", str(REPO / "examples" / "demo.yaml"))
    assert code == 2 and "--out" in err and out == ""


def test_report_of_a_non_run_directory_exits_2(cli, tmp_path: Path) -> None:
    code, out, err = cli("report", str(tmp_path))
    assert code == 2 and "not a run directory" in err


def test_spec_errors_exit_2_before_simulating(cli, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text((REPO / "examples" / "demo.yaml").read_text().replace("c5.xlarge", "c5.xlarg"))
    code, _, err = cli("simulate", str(bad), "--out", str(tmp_path / "sim"))
    assert not (tmp_path / "sim").exists(), "nothing is written for a bad spec"
    assert code == 2 and "unknown instance type 'c5.xlarg'" in err and "did you mean c5.xlarge" in err


def test_console_script_runs_as_a_process(tmp_path: Path) -> None:
    """The installed entry point, not just the in-process app: exit codes survive a real process."""
    exe = Path(sys.executable).with_name("spotwise")
    if not exe.exists():
        pytest.skip("spotwise console script not installed in this environment (pip install -e .)")
    res = subprocess.run([str(exe), "--version"], capture_output=True, text=True, timeout=bound(60))
    assert res.returncode == 0 and "spotwise" in res.stdout
    res = subprocess.run([str(exe), "traces", "show", str(tmp_path / "missing.json")], capture_output=True, text=True, timeout=bound(60))
    assert res.returncode == 2 and "Traceback" not in res.stderr


def test_real_traces_through_cli(cli, traces_dir: Path) -> None:
    f = traces_dir / "training-on-a-dime" / "logs" / "aws" / "cost" / "us-east-2" / "p3.2xlarge.json"
    code, out, err = cli("traces", "show", str(f), "--json")
    assert code == 0, err
    raw = json.loads(f.read_text())["SpotPriceHistory"]
    zones = {r["AvailabilityZone"] for r in raw if r["InstanceType"] == "p3.2xlarge"}
    series = json.loads(out)["series"]
    assert {s["zone"] for s in series} == zones
    for s in series:
        prices = [float(r["SpotPrice"]) for r in raw if r["AvailabilityZone"] == s["zone"]]
        assert s["min"] == pytest.approx(min(prices)) and s["max"] == pytest.approx(max(prices))


def _spec_with(tmp_path: Path, **workload: object) -> Path:
    import yaml

    d = yaml.safe_load((REPO / "examples" / "chaos.yaml").read_text())
    d["workload"].update(workload)
    p = tmp_path / "job.yaml"
    p.write_text(yaml.safe_dump(d))
    return p


def test_run_rejects_a_workload_that_fails_to_import(cli, tmp_path: Path) -> None:
    code, _, err = cli("run", str(_spec_with(tmp_path, name="no_such_module_xyz:build")), "--out", str(tmp_path / "o"))
    assert code == 2 and "no_such_module_xyz" in err and "Traceback" not in err


def test_run_rejects_a_missing_dataset(cli, tmp_path: Path) -> None:
    code, _, err = cli("run", str(_spec_with(tmp_path, name="pmf", dataset=str(tmp_path / "missing.csv"))),
                       "--out", str(tmp_path / "o"))
    assert code == 2 and "does not exist" in err


def test_run_rejects_nsync_with_too_few_workers(cli, tmp_path: Path) -> None:
    import yaml

    d = yaml.safe_load((REPO / "examples" / "chaos.yaml").read_text())
    d["cluster"].update({"sync": "n-sync", "sync_n": 12})
    p = tmp_path / "job.yaml"
    p.write_text(yaml.safe_dump(d))
    code, _, err = cli("run", str(p), "--out", str(tmp_path / "o"))
    assert code == 2 and "needs at least 12 workers" in err


def test_plan_rejects_an_infeasible_deadline(cli, tmp_path: Path) -> None:
    import yaml

    d = yaml.safe_load((REPO / "examples" / "zhang-uniform.yaml").read_text())
    d["deadline"] = 5
    p = tmp_path / "job.yaml"
    p.write_text(yaml.safe_dump(d))
    code, _, err = cli("plan", str(p), "--pilot-steps", "30")
    assert code == 2 and "deadline" in err and "Traceback" not in err
