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
    # every window's oracle costs $0: the cost ratios were 0/0 (ZeroDivisionError, exit 1)
    tr = _aws(tmp_path / "zero.json", ["0"] * 30)
    code, out, err = cli("simulate", str(_spec(tmp_path)), "--trace", str(tr), "--history", "1d", "--json", "--no-plot")
    assert code == 2, err
    assert "$0" in err and out.strip() == ""


def test_item7_non_finite_json_output_is_an_internal_error_naming_the_field(tmp_path: Path) -> None:
    from spotwise.cli import print_json
    from spotwise.report.finite_json import NonFiniteOutputError, dumps_finite, non_finite_fields

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
    from spotwise.report.finite_json import NonFiniteOutputError
    from spotwise.report.sweep_view import write_sweep
    from spotwise.sim.sweep import SweepJob, SweepResult

    res = SweepResult(SweepJob(work_s=3600, deadline_s=7200), [0.0], [], [], [], math.nan, 1.0, 1)
    with pytest.raises(NonFiniteOutputError, match="worker_iterations"):
        write_sweep(res, tmp_path, plots=False)
    assert not (tmp_path / "sweep.json").exists()
