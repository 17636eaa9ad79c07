"""``spotwise simulate --trace`` (sweep mode) and ``spotwise plan --trace`` (place + measured P(deadline)).

Synthetic AWS-format trace files written into tmp_path for the exact cases; the real AWS traces of
``../shared/data/traces`` for one end-to-end check (skipped visibly when absent).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from spotwise.market.series import iso8601


@pytest.fixture(autouse=True)
def _wide(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tables below are read by their column headers: a wide console, whatever COLUMNS the test
    process inherited (an xdist worker's differs from a terminal's)."""
    monkeypatch.setenv("COLUMNS", "200")

AWS = Path(__file__).resolve().parents[2] / "shared" / "data" / "traces" / "training-on-a-dime" / "logs" / "aws" / "cost"
H = 3600.0
T0 = 1_580_000_000.0  # 2020-01-26


def _aws_dump(path: Path, points: dict[str, list[tuple[float, float]]], instance: str = "p3.2xlarge") -> Path:
    recs = [{"AvailabilityZone": zone, "InstanceType": instance, "ProductDescription": "Linux/UNIX", "SpotPrice": f"{p:.4f}",
             "Timestamp": iso8601(t).replace("Z", ".000Z")} for zone, pts in points.items() for t, p in pts]
    path.write_text(json.dumps({"SpotPriceHistory": recs, "NextToken": ""}))
    return path


def _spec(tmp: Path, **cluster: object) -> Path:
    d = {"name": "sweep-job", "workload": {"name": "mlp-digits", "family": "resnet50", "step_time_s": 9.6},
         "target": {"iterations": 3600 * 4}, "deadline": "8h",
         "cluster": {"instance_type": "p3.2xlarge", "workers": 1, "straggler": 0, "sync_overhead_s": 0,
                     "coordinator_instance": "c5.large", **cluster},
         "market": {"synthetic": {"kind": "constant", "price": 1.0}}}
    p = tmp / "spec.yaml"
    p.write_text(yaml.safe_dump(d))
    return p


def _two_zones(tmp: Path) -> Path:
    # zone a: 1.0 $/h always; zone b: 0.8 $/h, but 5.0 (above on-demand 3.06) on [T0+20d, T0+20d+12h)
    a = [(T0 + k * H, 1.0) for k in range(0, 24 * 30, 6)]
    b = [(T0 + k * H, 0.8) for k in range(0, 24 * 30, 6)]
    b = [(t, 5.0 if T0 + 20 * 86400 <= t < T0 + 20 * 86400 + 12 * H else p) for t, p in b]
    return _aws_dump(tmp / "p3.json", {"us-east-1a": a, "us-east-1b": b})


def test_sweep_cli_json_table_and_files(cli, tmp_path: Path) -> None:
    trace = _two_zones(tmp_path)
    spec = _spec(tmp_path, region="us-east-1a")
    code, out, err = cli("simulate", str(spec), "--trace", str(trace), "--starts", "12h", "--history", "1d",
                         "--strategies", "on-demand,spot+guard,spotwise", "--out", str(tmp_path / "sw"), "--json")
    assert code == 0, err
    d = json.loads(out)
    by = {s["strategy"]: s for s in d["strategies"]}
    assert d["homes"] == ["us-east-1a/p3.2xlarge"] and d["job"]["work_h"] == pytest.approx(4.0)
    # spotwise starts in the cheaper zone b and moves away (or waits) when b spikes; every deadline is met
    assert by["spotwise"]["deadline_met"] == 1.0 and by["spot+guard"]["deadline_met"] == 1.0
    assert by["spotwise"]["mean_cost"] < by["spot+guard"]["mean_cost"] < by["on-demand"]["mean_cost"]
    assert by["on-demand"]["vs_on_demand"] == pytest.approx(1.0)
    for name in ("sweep.json", "windows.csv", "cost_cdf.png", "finish_cdf.png"):
        assert (tmp_path / "sw" / name).is_file()
    rows = (tmp_path / "sw" / "windows.csv").read_text().splitlines()
    assert len(rows) == 1 + 3 * d["windows"]
    # a second sweep into the same directory needs --overwrite, then replaces only spotwise's files
    (tmp_path / "sw" / "mine.txt").write_text("keep")
    code, _, err = cli("simulate", str(spec), "--trace", str(trace), "--starts", "12h", "--history", "1d", "--out", str(tmp_path / "sw"))
    assert code == 2 and "overwrite" in err
    code, out, err = cli("simulate", str(spec), "--trace", str(trace), "--starts", "24h", "--history", "1d", "--no-plot",
                         "--out", str(tmp_path / "sw"), "--overwrite")
    assert code == 0, err
    assert (tmp_path / "sw" / "mine.txt").read_text() == "keep" and not (tmp_path / "sw" / "cost_cdf.png").exists()
    assert "deadline met" in out and "vs oracle" in out


@pytest.mark.parametrize("args, words", [
    (["--strategies", "spotwize"], ["unknown strategy", "did you mean 'spotwise'"]),
    (["--starts", "0"], ["--starts", "> 0"]),
    (["--restart", "-5"], ["--restart", "expected a duration"]),
    (["--types", "p9.huge"], ["unknown instance type", "p9.huge"]),
    (["--types", "p2.xlarge"], ["no place to run"]),
    (["--work-hours", "40"], ["cannot finish"]),
    (["--history", "60d"], ["too short"]),
])
def test_sweep_cli_bad_input_exits_2(cli, tmp_path: Path, args: list[str], words: list[str]) -> None:
    trace = _two_zones(tmp_path)
    code, _, err = cli("simulate", str(_spec(tmp_path)), "--trace", str(trace), *args)
    assert code == 2, err
    for w in words:
        assert w in err


def test_sweep_cli_missing_trace_and_unknown_zone_exit_2(cli, tmp_path: Path) -> None:
    code, _, err = cli("simulate", str(_spec(tmp_path)), "--trace", str(tmp_path / "nope.json"))
    assert code == 2 and "does not exist" in err
    trace = _two_zones(tmp_path)
    code, _, err = cli("simulate", str(_spec(tmp_path, region="eu-west-9z")), "--trace", str(trace))
    assert code == 2 and "us-east-1a" in err and "--all-zones" in err


def test_plan_placement_chooses_the_cheapest_place_and_measures_the_deadline(tmp_path: Path) -> None:
    from spotwise.config import load_spec
    from spotwise.planner.placement.history import plan_placement

    trace = _two_zones(tmp_path)
    spec = load_spec(_spec(tmp_path))
    start = T0 + 28 * 86400
    out = plan_placement(spec, [str(trace)], start, lookback_s=20 * 86400, every_s=12 * H)
    assert out["choice"]["zone"] == "us-east-1b" and out["choice"]["spot_price"] == pytest.approx(0.8)
    bt = out["backtest"]
    assert bt["windows"] >= 10
    sw = next(s for s in bt["strategies"] if s["strategy"] == "spotwise")
    assert sw["deadline_met"] == 1.0 and sw["ci95"][0] > 0.7 and sw["ci95"][1] == 1.0
    # no history before the start: said, not guessed
    early = plan_placement(spec, [str(trace)], T0 + 2 * 86400)
    assert early["backtest"] is None and "no past window" in early["note"]


def test_plan_cli_with_traces_reports_the_place(cli, tmp_path: Path) -> None:
    trace = _two_zones(tmp_path)
    code, out, err = cli("plan", str(_spec(tmp_path)), "--trace", str(trace), "--pilot-steps", "20", "--json")
    assert code == 0, err
    d = json.loads(out)
    pl = d["extra"]["placement"]
    assert pl["choice"]["zone"] in ("us-east-1a", "us-east-1b") and pl["backtest"]["windows"] > 0
    assert "past windows" in d["why"]
    # issue 23 item 4: the availability guard's measured P(deadline) and cost lead, the others beside it
    lead = pl["backtest"]["strategies"][0]
    assert lead["strategy"] == "spotwise-avail" and "spotwise" in {s["strategy"] for s in pl["backtest"]["strategies"]}
    assert 0.0 <= lead["deadline_met"] <= 1.0 and lead["mean_cost"] > 0 and lead["vs_free_move"] >= 1.0 - 1e-9
    rec = d["extra"]["recommendation"]
    # issue 29: the recommendation is the best tested strategy; its own measured P(deadline) is quoted
    chosen = next(s for s in pl["backtest"]["strategies"] if s["strategy"] == rec["strategy"])
    assert rec["basis"] == "backtest" and d["strategy"] in (rec["strategy"], "on-demand")
    assert rec["deadline_measured"] == chosen["deadline_met"] and rec["deadline_ci95"] == chosen["ci95"]
    assert f"{rec['strategy']} met the deadline" in d["why"] or "no tested strategy" in d["why"]


def test_sweep_on_the_real_aws_traces_meets_the_goal(cli, tmp_path: Path) -> None:
    if not AWS.is_dir():
        pytest.skip(f"real AWS traces not at {AWS}")
    spec = Path(__file__).resolve().parents[1] / "examples" / "p3-24h-traces.yaml"
    code, out, err = cli("simulate", str(spec), "--trace", str(AWS / "us-east-1"), "--trace", str(AWS / "us-west-2"),
                         "--all-zones", "--starts", "72h", "--strategies", "on-demand,thm3-bid,spotwise,spotwise-avail", "--json")
    assert code == 0, err
    by = {s["strategy"]: s for s in json.loads(out)["strategies"]}
    assert by["spotwise"]["deadline_met"] >= 0.99 and by["spotwise"]["cost_ratio_of_means"] <= 1.05
    # issue 23: no regression on the price traces, against either bound
    avail = by["spotwise-avail"]
    assert avail["deadline_met"] >= 0.99 and avail["cost_ratio_free"] <= 1.05 and avail["cost_ratio_free"] >= 1.0
    assert avail["mean_cost"] <= by["spotwise"]["mean_cost"] * 1.001
    assert by["thm3-bid"]["deadline_met"] < 0.95
    assert by["on-demand"]["cost_ratio_of_means"] > 2.0


SKY = Path(__file__).resolve().parents[2] / "shared" / "data" / "traces" / "skypilot-spot-traces" / "availability" / "1-node"


def test_sweep_cli_on_skypilot_availability_needs_a_price_and_then_runs(cli) -> None:
    if not SKY.is_dir():
        pytest.skip(f"SkyPilot availability traces not at {SKY}")
    spec = Path(__file__).resolve().parents[1] / "examples" / "p3-24h-traces.yaml"
    # SkyPilot's v100_1 is read as p3.2xlarge; capacity alone has no price: exit 2 saying how to give one
    code, _, err = cli("simulate", str(spec), "--trace", str(SKY), "--all-zones", "--starts", "96h", "--history", "1d")
    assert code == 2 and "--spot-price" in err
    code, out, err = cli("simulate", str(spec), "--trace", str(SKY), "--all-zones", "--starts", "96h", "--history", "1d",
                         "--spot-price", "0.918", "--strategies", "on-demand,spot+guard,spotwise", "--json")
    assert code == 0, err
    by = {s["strategy"]: s for s in json.loads(out)["strategies"]}
    # real capacity outages: the guard keeps every deadline; moving to a zone with capacity beats buying on-demand
    assert by["spot+guard"]["deadline_met"] == 1.0 and by["spotwise"]["deadline_met"] == 1.0
    assert by["spotwise"]["mean_cost"] < by["spot+guard"]["mean_cost"] < by["on-demand"]["mean_cost"]
    assert by["spotwise"]["mean_moves"] > 0
    code, _, err = cli("simulate", str(spec), "--trace", str(SKY), "--spot-price", "-1")
    assert code == 2 and "--spot-price" in err


def test_sweep_over_the_specs_own_synthetic_market(cli) -> None:
    demo = Path(__file__).resolve().parents[1] / "examples" / "demo.yaml"
    code, out, err = cli("simulate", str(demo), "--spec-market", "--starts", "2h", "--history", "1h", "--horizon", "2d",
                         "--restart", "0", "--strategies", "on-demand,no-interruptions,thm3-bid,spot+guard", "--json")
    assert code == 0, err
    d = json.loads(out)
    by = {s["strategy"]: s for s in d["strategies"]}
    assert d["homes"] == ["spec-market/c5.xlarge"] and d["windows"] >= 20
    # the demo's market never prices spot above on-demand: spot with the on-demand bid always finishes,
    # at the spot price, cheaper than on-demand; nothing beats the oracle
    assert by["spot+guard"]["deadline_met"] == 1.0 and by["spot+guard"]["mean_cost"] < by["on-demand"]["mean_cost"]
    assert all(s["cost_ratio_of_means"] >= 1.0 - 1e-9 for s in d["strategies"])
    code, _, err = cli("simulate", str(demo), "--spec-market", "--trace", str(demo))
    assert code == 2 and "both" in err


def test_sweep_over_gcp_preemptible_lifetimes(cli) -> None:
    spec = Path(__file__).resolve().parents[1] / "examples" / "gcp-preemptible.yaml"
    lifetimes = Path(__file__).resolve().parents[2] / "shared" / "data" / "traces" / "gcp-transient-lifetime"
    if not lifetimes.is_dir():
        pytest.skip(f"GCP lifetime traces not at {lifetimes}")
    code, out, err = cli("simulate", str(spec), "--spec-market", "--work-hours", "20", "--deadline-hours", "30", "--starts", "1d",
                         "--history", "0", "--horizon", "40d", "--strategies", "on-demand,spot+guard", "--json")
    assert code == 0, err
    by = {s["strategy"]: s for s in json.loads(out)["strategies"]}
    assert by["spot+guard"]["deadline_met"] == 1.0 and by["spot+guard"]["vs_on_demand"] < 0.5


def test_sweep_job_sized_by_a_pilot_run(cli, tmp_path: Path) -> None:
    from spotwise.config import load_spec
    from spotwise.planner.estimate.pilot import pilot_from_run

    demo = Path(__file__).resolve().parents[1] / "examples" / "demo.yaml"
    code, _, err = cli("simulate", str(demo), "--out", str(tmp_path / "pilot"), "--pilot-steps", "20", "--json")
    assert code == 0, err
    _, rt = pilot_from_run(tmp_path / "pilot")
    code, out, err = cli("simulate", str(demo), "--spec-market", "--pilot", str(tmp_path / "pilot"), "--starts", "6h",
                         "--history", "1h", "--horizon", "1d", "--strategies", "on-demand", "--json")
    assert code == 0, err
    want_h = load_spec(demo).target.iterations * rt.model.expected(1) / 3600
    assert json.loads(out)["job"]["work_h"] == pytest.approx(want_h, rel=1e-9)
    code, _, err = cli("simulate", str(demo), "--spec-market", "--pilot", str(tmp_path / "pilot"), "--work-hours", "1")
    assert code == 2 and "--pilot" in err


def test_sweep_cli_hindsight_compares_every_strategy_with_the_clairvoyant_schedule(cli, tmp_path: Path) -> None:
    trace = _two_zones(tmp_path)
    spec = _spec(tmp_path, region="us-east-1a")
    args = ("simulate", str(spec), "--trace", str(trace), "--starts", "24h", "--history", "1d",
            "--strategies", "on-demand,spot+guard,spotwise")
    code, out, err = cli(*args, "--hindsight", "--json")
    assert code == 0, err
    d = json.loads(out)
    free, lo, hs = d["free_move_mean_cost"], d["restart_bound_mean_cost"], d["hindsight_mean_cost"]
    # free-move bound <= restart-aware bound <= hindsight schedule <= what any strategy that meets its deadlines pays
    assert free <= lo <= hs
    for s in d["strategies"]:
        assert s["deadline_met"] == 1.0 and s["cost_ratio_hindsight"] >= 1.0 - 1e-6 and s["cost_ratio_restart"] >= 1.0 - 1e-6
    code, out, err = cli(*args, "--hindsight")
    assert code == 0, err
    assert "vs hindsight" in out and "hindsight schedule" in out
    code, out, err = cli(*args, "--json")
    assert code == 0 and json.loads(out)["hindsight_mean_cost"] is None  # built only when asked for
