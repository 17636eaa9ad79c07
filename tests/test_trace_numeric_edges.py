"""Issue 18 items 7 and 8: numeric edges of traces.

Item 7: an absurd or non-finite price (``1e308``, ``inf``, ``NaN``) in a trace exited 1 in
``traces show``, ``plan`` and ``simulate`` (``NaN``/``Infinity`` reached the JSON encoder).  The
loaders now refuse it with exit 2 naming the file, the row and the value, and no JSON output
ever holds a non-finite number (an internal error names the field instead).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from spotwise.market.traces import MAX_AVAILABLE, MAX_PRICE_PER_HOUR, load_traces
from spotwise.errors import InputError

JOB_YAML = """\
name: numeric-edges
seed: 0
workload: {name: mlp-digits, family: resnet50, step_time_s: 9.6}
target: {iterations: 3600}
deadline: 4h
cluster: {instance_type: p3.2xlarge, workers: 1, region: us-east-1b, straggler: 0, sync_overhead_s: 0}
market: {synthetic: {kind: constant, price: 0.918}, billing: per-second}
"""


def _spec(tmp_path: Path) -> Path:
    p = tmp_path / "job.yaml"
    p.write_text(JOB_YAML)
    return p


def _aws(path: Path, prices: list[Any], *, bad_at: int | None = None, bad: Any = None) -> Path:
    """30 daily p3.2xlarge prices in us-east-1b (enough history for plan and simulate), one of
    them replaced by ``bad`` when ``bad_at`` is given."""
    recs = []
    for i, p in enumerate(prices):
        val = bad if i == bad_at else p
        recs.append({"AvailabilityZone": "us-east-1b", "InstanceType": "p3.2xlarge", "ProductDescription": "Linux/UNIX",
                     "SpotPrice": val, "Timestamp": f"2020-01-{i + 1:02d}T00:00:00.000Z"})
    path.write_text(json.dumps({"SpotPriceHistory": recs}))
    return path


_GOOD = [f"{0.9 + 0.01 * (i % 3):.2f}" for i in range(30)]
_COMMANDS = {
    "traces show": lambda spec, tr: ["traces", "show", str(tr)],
    "plan": lambda spec, tr: ["plan", str(spec), "--trace", str(tr)],
    "simulate": lambda spec, tr: ["simulate", str(spec), "--trace", str(tr), "--history", "1d", "--no-plot"],
}


@pytest.mark.parametrize("command", list(_COMMANDS))
@pytest.mark.parametrize("as_json", [False, True])
def test_item7_price_1e308_exits_2_in_every_command(cli, tmp_path: Path, command: str, as_json: bool) -> None:
    tr = _aws(tmp_path / "prices.json", _GOOD, bad_at=12, bad="1e308")
    args = _COMMANDS[command](_spec(tmp_path), tr) + (["--json"] if as_json else [])
    code, out, err = cli(*args)
    assert code == 2, err
    assert "Traceback" not in err and "internal error" not in err
    # the message names the file, the row and the value, and says what to do
    assert str(tr) in err and "SpotPriceHistory[12]" in err and "1e308" in err and "$/h" in err
    assert out.strip() == ""


@pytest.mark.parametrize("bad", ["1e308", 1e308, "1e5", 10001, "inf", "-inf", "NaN", "$1e400"])
def test_item7_absurd_or_non_finite_aws_prices_are_refused(tmp_path: Path, bad: Any) -> None:
    tr = _aws(tmp_path / "p.json", _GOOD, bad_at=3, bad=bad)
    with pytest.raises(InputError) as ei:
        load_traces([tr])
    msg = ei.value.message
    assert str(tr) in msg and "SpotPriceHistory[3]" in msg


def test_item7_json_number_overflowing_to_inf_is_refused(tmp_path: Path) -> None:
    # 1e400 is valid JSON text but Python's json reads it as inf
    tr = tmp_path / "p.json"
    tr.write_text('{"SpotPriceHistory": [{"AvailabilityZone": "us-east-1b", "InstanceType": "p3.2xlarge", '
                  '"SpotPrice": 1e400, "Timestamp": "2020-01-01T00:00:00Z"}]}')
    with pytest.raises(InputError, match=r"SpotPriceHistory\[0\].*not a number"):
        load_traces([tr])


def test_item7_cap_is_documented_and_sane() -> None:
    # the dearest cloud instances cost a few hundred $/h: the cap must not refuse a real price
    assert 1_000 <= MAX_PRICE_PER_HOUR <= 1e5 and MAX_AVAILABLE >= 1_000
    from spotwise.market.traces import _parse_price

    assert _parse_price("218.00", "f", "row") == 218.0
    assert _parse_price(MAX_PRICE_PER_HOUR, "f", "row") == MAX_PRICE_PER_HOUR


def test_item7_azure_csv_absurd_price_names_line_and_column(cli, tmp_path: Path) -> None:
    f = tmp_path / "us_east.csv"
    f.write_text("Date,NC6,NC12\n2/1/2020,$0.20,$0.40\n2/2/2020,$0.21,$1e308\n")
    code, out, err = cli("traces", "show", str(f), "--json")
    assert code == 2 and out.strip() == ""
    assert str(f) in err and "line 3" in err and "'NC12'" in err and "1e308" in err


@pytest.mark.parametrize(("key", "value"), [("prices", 1e308), ("data", 1e308), ("prices", 2e4)])
def test_item7_skypilot_absurd_values_are_refused(cli, tmp_path: Path, key: str, value: float) -> None:
    d = tmp_path / "aws-10-26-2022"
    d.mkdir()
    doc: dict[str, Any] = {"metadata": {"gap_seconds": 600}, "data": [1, 1, 0, 1], "prices": [0.9, 0.9, 0.9, 0.9]}
    doc[key][2] = value
    f = d / "us-west-2a_v100_1.json"
    f.write_text(json.dumps(doc))
    code, out, err = cli("traces", "show", str(f), "--json")
    assert code == 2, err
    assert out.strip() == "" and f"{key}[2]" in err and str(f) in err


def test_item7_skypilot_ticks_past_year_9999_are_refused(tmp_path: Path) -> None:
    f = tmp_path / "us-west-2a_v100_1.json"
    f.write_text(json.dumps({"metadata": {"gap_seconds": 1e300}, "data": [1, 0, 1]}))
    with pytest.raises(InputError, match="year 9999"):
        load_traces([f])


def test_item7_zero_priced_trace_sweep_exits_2_not_zero_division(cli, tmp_path: Path) -> None:
    # every window's worker capacity cost $0: the cost ratios were 0/0 (ZeroDivisionError, exit 1).  Since
    # issue 30 item 14 a $0 spot price is refused when the trace is read (no real trace holds one: it marks a
    # missing value): exit 2 naming the row, before any sweep runs
    tr = _aws(tmp_path / "zero.json", ["0"] * 30)
    code, out, err = cli("simulate", str(_spec(tmp_path)), "--trace", str(tr), "--history", "1d", "--json", "--no-plot")
    assert code == 2, err
    assert out.strip() == "" and "SpotPriceHistory[0]" in err and "zero" in err and "internal error" not in err


def test_item7_near_zero_priced_trace_sweep_has_finite_ratios(cli, tmp_path: Path) -> None:
    # the division the zero trace exposed: capacity at $0.0001/h still gives finite ratios (the sweep bills the
    # coordinator, c5.large on demand, as plan and run do, so the oracle costs more than $0)
    tr = _aws(tmp_path / "cheap.json", ["0.0001"] * 30)
    code, out, err = cli("simulate", str(_spec(tmp_path)), "--trace", str(tr), "--history", "1d", "--json", "--no-plot")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["job"]["coordinator_per_hour"] > 0
    assert all(math.isfinite(s["cost_ratio_of_means"]) for s in doc["strategies"])


def test_item7_non_finite_json_output_is_an_internal_error_naming_the_field(tmp_path: Path) -> None:
    from spotwise.cli import print_json
    from spotwise.reports.finite_json import NonFiniteOutputError, dumps_finite, non_finite_fields

    doc = {"strategies": [{"name": "a", "mean_cost": 1.0}, {"name": "b", "mean_cost": math.nan}], "x": math.inf}
    assert non_finite_fields(doc) == ["$.strategies[1].mean_cost = nan", "$.x = inf"]
    with pytest.raises(NonFiniteOutputError, match=r"strategies\[1\]\.mean_cost"):
        dumps_finite(doc)
    with pytest.raises(NonFiniteOutputError):
        print_json(doc)
    assert json.loads(dumps_finite({"a": [1.0, 2]})) == {"a": [1.0, 2]}


def test_item7_guarded_command_with_nan_result_exits_1_and_prints_no_json(capsys: pytest.CaptureFixture[str]) -> None:
    import typer

    from spotwise.cli import guarded, print_json

    @guarded
    def cmd(as_json: bool = True) -> None:
        print_json({"cost": float("nan")})

    with pytest.raises(typer.Exit) as ei:
        cmd(as_json=True)
    assert ei.value.exit_code == 1
    cap = capsys.readouterr()
    assert cap.out == "" and "NaN" not in cap.out and "cost" in cap.err and "internal error" in cap.err


def test_item7_sweep_json_refuses_non_finite(tmp_path: Path) -> None:
    from spotwise.reports.finite_json import NonFiniteOutputError
    from spotwise.reports.sweep_view import write_sweep
    from spotwise.sim.sweep.engine import SweepJob, SweepResult

    res = SweepResult(SweepJob(work_s=3600, deadline_s=7200), [0.0], [], [], [], math.nan, 1.0, 1)
    with pytest.raises(NonFiniteOutputError, match="worker_iterations"):
        write_sweep(res, tmp_path, plots=False)
    assert not (tmp_path / "sweep.json").exists()


# ------------------------------------------------------------------------------------------ item 8
# Item 8: a three-point trace spanning 1970-2020 made `simulate --trace` run for minutes with no
# output (73,089 start times every 6 h x 5 strategies).  Since issue 38 a trace time before 2006 is
# refused when read (tests/test_hardening_inputs4.py), so the 50-year trace here spans 2006-2056.  The sweep's work is counted before it
# starts and refused beyond --max-runs with the --starts step that fits; long sweeps whose stderr
# is not a terminal print progress lines.
def _three_points(path: Path) -> Path:
    recs = [{"AvailabilityZone": "us-east-1b", "InstanceType": "p3.2xlarge", "ProductDescription": "Linux/UNIX",
             "SpotPrice": p, "Timestamp": t}
            for p, t in (("0.9", "2006-01-01T00:00:00Z"), ("1.0", "2031-01-10T00:00:00Z"), ("0.9", "2056-01-20T00:00:00Z"))]
    path.write_text(json.dumps({"SpotPriceHistory": recs}))
    return path


P3_SPEC = Path(__file__).resolve().parents[1] / "examples" / "p3-24h-traces.yaml"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("as_json", [False, True])
def test_item8_three_point_trace_1970_2020_exits_2_within_seconds(cli, tmp_path: Path, as_json: bool,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from spotwise.sim.sweep import from_spec

    # refused before any of the work that took minutes: counted, not timed (the timeout above is the hang guard)
    started: list[str] = []
    for name in ("window_starts", "sweep"):
        real = getattr(from_spec, name)
        monkeypatch.setattr(from_spec, name, lambda *a, _n=name, _f=real, **k: started.append(_n) or _f(*a, **k))
    tr = _three_points(tmp_path / "gap.json")
    code, out, err = cli("simulate", str(P3_SPEC), "--trace", str(tr), *(["--json"] if as_json else []))
    assert code == 2, err
    assert started == [], started
    assert out.strip() == "" and "Traceback" not in err
    # sizes, the long gap, and what to do
    assert "73,089 start times" in err and "50.0 years" in err and "25.0 years" in err
    assert "--starts" in err and "--max-runs" in err


def test_item8_suggested_step_fits_the_bound(tmp_path: Path) -> None:
    import re

    from spotwise.config import load_spec
    from spotwise.market.traces import load_traces
    from spotwise.market.world import load_catalog
    from spotwise.sim.sweep.places import build_places
    from spotwise.sim.sweep.engine import MAX_RUNS, check_sweep_size, parse_strategies, start_range, sweep_runs
    from spotwise.sim.sweep.from_spec import sweep_job
    from spotwise.spec.load import parse_duration

    spec = load_spec(P3_SPEC)
    places, _ = build_places(load_traces([_three_points(tmp_path / "gap.json")]), load_catalog(spec), spec.workload.family,
                             spec.cluster.instance_type, None)
    job = sweep_job(spec)
    strategies = parse_strategies(None)
    lo, hi, n = start_range(places, job, 6 * 3600.0)
    with pytest.raises(InputError) as ei:
        check_sweep_size(n, 1, strategies, 6 * 3600.0, hi - lo, MAX_RUNS, places)
    step = parse_duration(re.search(r"--starts (\S+) or coarser", ei.value.message).group(1), "--starts")
    lo, hi, n2 = start_range(places, job, step)
    assert sweep_runs(n2, 1, strategies) <= MAX_RUNS < sweep_runs(n, 1, strategies)
    assert check_sweep_size(n2, 1, strategies, step, hi - lo, MAX_RUNS, places) == sweep_runs(n2, 1, strategies)


def test_item8_coarse_sweep_of_the_gap_trace_finishes_and_max_runs_is_honoured(cli, tmp_path: Path) -> None:
    tr = _three_points(tmp_path / "gap.json")
    args = ["simulate", str(P3_SPEC), "--trace", str(tr), "--starts", "3650d", "--json", "--no-plot"]
    code, out, err = cli(*args)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["windows"] == 6 and all(math.isfinite(s["mean_cost"]) for s in doc["strategies"])
    code, out, err = cli(*args, "--max-runs", "35")  # 6 starts x 6 default strategies = 36 runs
    assert code == 2 and "36 window runs" in err and out.strip() == ""
    code, out, err = cli(*args, "--max-runs", "0")
    assert code == 2 and "--max-runs must be an integer >= 1" in err


@pytest.mark.timeout(60)
def test_item8_tiny_starts_step_is_refused_before_building_the_start_list(cli, tmp_path: Path) -> None:
    tr = _aws(tmp_path / "ok.json", _GOOD)
    code, out, err = cli("simulate", str(_spec(tmp_path)), "--trace", str(tr), "--starts", "0.000001s", "--json")
    assert code == 2, err
    assert "start times every 1e-06 s" in err and out.strip() == ""


def test_item8_text_progress_prints_a_line_every_interval() -> None:
    import io

    from spotwise.sim.sweep.from_spec import TextProgress

    now = [0.0]
    buf = io.StringIO()
    prog = TextProgress(buf, every_s=10.0, clock=lambda: now[0])
    for done in range(1, 101):
        now[0] = done * 0.5  # 0.5 s a start: 50 s in all -> a line at 10, 20, 30, 40, 50 s
        prog(done, 100)
    lines = buf.getvalue().splitlines()
    assert len(lines) == 5 and prog.lines == 5
    assert lines[0] == "sweep: 20/100 start times (20.0%), 10 s, about 40 s left"
    assert lines[-1].startswith("sweep: 100/100 start times (100.0%), 50 s")
