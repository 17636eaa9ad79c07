"""Issue 29 items 5 and 6, the display side: -h and an example in every --help, a plan a person reads at
80 columns, one time-unit family, and the smaller defects (baseline bar, cut bar lines, wall time, raw
dicts in the run report, the demo's baseline flagged, report SWEEP_DIR, user policy names, constraint errors)."""

from __future__ import annotations

import io
import re
import sys
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

from spotwise.cli import app

ROOT = Path(__file__).resolve().parent.parent
USER_POLICIES = ROOT / "tests" / "user_policies"


def _render(obj: Any, width: int = 80) -> str:
    console = Console(width=width, record=True, file=io.StringIO(), color_system=None)
    if isinstance(obj, list):
        for line in obj:
            console.print(line, highlight=False)
    else:
        console.print(obj)
    return console.export_text()


def _commands() -> list[str]:
    import typer.main

    root = typer.main.get_command(app)
    out = [""]

    def walk(group: Any, prefix: str) -> None:
        for name, cmd in group.commands.items():
            path = f"{prefix} {name}".strip()
            out.append(path)
            if hasattr(cmd, "commands"):
                walk(cmd, path)

    walk(root, "")
    return out


# ------------------------------------------------------------------------------------------ --help
@pytest.mark.parametrize("command", _commands())
def test_every_command_takes_h_and_shows_an_example(command: str) -> None:
    runner = CliRunner()
    args = command.split()
    short = runner.invoke(app, [*args, "-h"], env={"COLUMNS": "100"})
    assert short.exit_code == 0, (command, short.output)
    long = runner.invoke(app, [*args, "--help"], env={"COLUMNS": "100"})
    assert short.output == long.output
    assert "Example:" in short.output and "spotwise " in short.output.split("Example:")[1], command


def test_every_registered_command_has_an_example() -> None:
    from spotwise.cli_help import EXAMPLES

    assert set(_commands()) <= set(EXAMPLES), set(_commands()) - set(EXAMPLES)


def test_every_example_line_runs_as_written_from_a_clone_dry() -> None:
    """Issue 42 item 4: each command's ``Example:`` parses (click parses its options and arguments
    without running it), every spec, script and trace it reads exists from the clone's root (the traces
    where the shared data is beside the clone), and every run directory it reads is one an earlier
    example writes.  The help never names a folder that does not exist."""
    import shlex

    import typer.main

    from spotwise.cli_help import AWS_TRACES, EXAMPLES

    root = typer.main.get_command(app)
    written: set[str] = set()
    checked = traces = 0
    for command, line in EXAMPLES.items():
        words = shlex.split(line)
        assert words[0] == "spotwise", line
        argv = words[1:]
        cmd: Any = root
        depth = 0
        while hasattr(cmd, "commands"):  # down to the command the line runs
            assert depth < len(argv) and argv[depth] in cmd.commands, line
            cmd = cmd.commands[argv[depth]]
            depth += 1
        assert command.split() == argv[:len(command.split())], line
        with cmd.make_context(argv[depth - 1], list(argv[depth:])) as ctx:  # parses, runs nothing
            params = dict(ctx.params)
        for key in ("spec", "script"):
            if params.get(key) is not None:
                assert (ROOT / str(params[key])).is_file(), (line, params[key])
                checked += 1
        for p in list(params.get("trace") or []) + ([params["paths"]] if isinstance(params.get("paths"), str) else
                                                       list(params.get("paths") or [])):
            traces += 1
            if str(p).startswith(AWS_TRACES) and not (ROOT / AWS_TRACES).exists():
                continue  # the shared traces are not beside this clone
            assert (ROOT / str(p)).exists(), (line, p)
        reads = [str(r) for r in (params.get("run_dirs") or [])] if command == "report" else \
            [str(params["run_dir"])] if command == "status" and params.get("run_dir") else []
        for r in reads:
            assert r.rstrip("/") in written, (line, r, written)
            checked += 1
        if params.get("out") is not None:
            written.add(str(params["out"]).rstrip("/"))
    assert {"runs/demo", "runs/demo-sim"} <= written
    assert checked >= 9 and traces >= 4, (checked, traces)


# ------------------------------------------------------------------------------------ time units
def test_one_time_unit_family() -> None:
    from spotwise.reports import fmt_duration
    from spotwise.reports.units import human_duration, human_hours

    assert human_duration(129600) == "36.0 h"
    assert human_duration(1513.4 * 60) == "25.2 h"
    assert human_duration(1.05 * 86400) == "25.2 h"  # below 48 h: hours, never "1.05 d"
    assert human_duration(2.1 * 86400) == "2.1 d"
    assert human_duration(95.2) == "1.6 min" and human_duration(42) == "42 s"
    assert human_duration(None) == "-" and human_duration(float("nan")) == "-"
    assert human_hours(25.22) == "25.2 h"
    assert fmt_duration(129600) == human_duration(129600)


def test_no_raw_seconds_or_minutes_formatters_left_in_the_display_code() -> None:
    files = [ROOT / "spotwise/cli.py", ROOT / "spotwise/cli_tables.py", *sorted((ROOT / "spotwise/reports").glob("*.py"))]
    bad = re.compile(r"""(\.1f\} s["'])|(/ 60:\.1f\} min)|(/ 3600:\.2f\} h)""")
    hits = [f"{f.name}: {line.strip()}" for f in files for line in f.read_text().splitlines() if bad.search(line)]
    assert not hits, hits


# ----------------------------------------------------------------------------------------- plan
def _fake_plan() -> Any:
    from spotwise.planner.plan.records import Alternative, Plan

    alts = (
        Alternative("no-interruptions", (1.178,), 1, 86400, 103.1, 90792.0, 0.186, True, "closed-form",
                    "", ("bid above the highest price",), 1.0),
        Alternative("one-bid", (1.1,), 1, 86400, 134.8, 129480.0, 0.186, True, "numerical",
                    "Thm 3: F(b*) = J E[R(n)] / theta = 86400 x 1.05 s / 129600 s " + "x" * 300, (), 0.7),
        Alternative("two-bids", (), 1, 86400, None, None, None, False, "closed-form", "two bids need >= 2 workers"),
        Alternative("on-demand", (), 1, 86400, 154.4, 90792.0, 0.186, True, "closed-form", "1 x p3.2xlarge at 3.06 $/h", (), 1.0),
    )
    rec = {"strategy": "no-interruptions", "place": "us-east-2b", "instance": "p3.2xlarge", "workers": 1, "bids": [1.178],
           "expected_cost": 103.1, "expected_cost_ci95": [95.0, 111.0], "expected_time_s": 90792.0, "deadline_probability": 1.0,
           "deadline_measured": 1.0, "deadline_ci95": [0.97, 1.0], "on_demand_cost": 154.4, "saving_vs_on_demand": 0.33}
    placement = {"choice": {"zone": "us-east-2b", "instance": "p3.2xlarge", "spot_price": 0.9329, "on_demand_price": 3.06},
                 "backtest": {"windows": 115, "first_start": "2020-02-20T23:50:20Z", "last_start": "2020-03-20T11:50:20Z",
                              "every_h": 6.0, "strategies": [
                                  {"strategy": "spotwise-avail", "deadline_met": 1.0, "ci95": [0.968, 1.0], "mean_cost": 24.84,
                                   "p95_cost": 25.08, "vs_oracle": 1.005},
                                  {"strategy": "thm3-bid+guard", "deadline_met": 0.704, "ci95": [0.615, 0.78],
                                   "mean_cost": 32.32, "p95_cost": 77.37, "vs_oracle": 1.308}]}}
    return Plan("no-interruptions", (1.178,), 1, 86400, 103.1, 90792.0, 0.186, "cost", 129600.0, "lowest expected cost",
                alts, ("pilot",), ("a", "b"), "empirical CDF", (),
                {"recommendation": rec, "placement": placement, "coordinator": "c5.large", "coordinator_price": 0.085}, 1.0)


def _check_no_broken_words(text: str, words: list[str]) -> None:
    for line in text.splitlines():
        assert len(line) <= 80, line
    for w in words:
        assert w in text, (w, text)


def test_plan_leads_with_short_lines_and_its_tables_fit_80_columns() -> None:
    from spotwise.reports.plan_view import print_plan

    console = Console(width=80, record=True, file=io.StringIO(), color_system=None)
    print_plan(_fake_plan(), console)
    text = console.export_text()
    lines = text.splitlines()
    head = lines[:lines.index(next(ln for ln in lines if ln.startswith("strategies")))]
    assert 4 <= len(head) <= 6, head
    assert all(len(ln) <= 80 for ln in head)
    joined = "\n".join(head)
    for needle in ("us-east-2b", "no-interruptions", "$103.1 ($95-$111)", "P(deadline) 1.00", "saves 33%",
                   "coordinator: c5.large", "0.085 $/h", "25.2 h", "36.0 h"):
        assert needle in joined, needle
    _check_no_broken_words(text, ["no-interruptions", "spotwise-avail", "thm3-bid+guard", "97%-100%", "25.2 h"])
    assert "129600" not in text and " min" not in text and "Thm 3" not in text  # the long reason is not in a cell
    assert len(lines) < 40, len(lines)


def test_plan_wide_terminal_gets_the_wide_layout() -> None:
    from spotwise.reports.plan_view import strategies_table

    text = _render(strategies_table(_fake_plan(), 160), 160)
    assert "method" in text and "iterations" in text and "numerical" in text
    assert max(len(ln) for ln in text.splitlines()) <= 160


def test_plan_cli_at_80_columns_breaks_no_word() -> None:
    res = CliRunner().invoke(app, ["plan", str(ROOT / "examples/zhang-uniform.yaml"), "--pilot-steps", "20"],
                             env={"COLUMNS": "80"})
    assert res.exit_code == 0, res.output
    table = res.output.split("strategies (")[1].split("\n\n")[0]
    for line in res.output.splitlines():
        assert len(line) <= 80, line
    for name in ("no-interruptions", "one-bid", "on-demand"):
        assert name in table, name
    assert not re.search(r"\d{3,}(\.\d)? (s|min)\b", res.output)  # never 129600 s or 1513.4 min


# -------------------------------------------------------------------------------- progress bars
def test_baseline_bar_never_reads_more_steps_than_its_total() -> None:
    from spotwise.control.runner import RunProgress

    bar = RunProgress(187, False, estimated=True, label="on-demand")
    snap = {"step": 199, "loss": 0.15, "active": 8, "provisioned": 8, "t": 302.0, "cost": 0.12}
    bar.update(snap)
    task = bar.progress.tasks[0]
    assert task.total is not None and task.completed <= task.total
    text = _render(bar.progress.make_tasks_table(bar.progress.tasks))
    assert "199/~199 steps" in text, text


def test_bar_line_fits_80_columns() -> None:
    from rich.progress import Progress

    from spotwise.reports.progress_view import progress_columns

    for label, est in (("training", False), ("on-demand", True)):
        buf = io.StringIO()
        console = Console(width=80, file=buf, color_system=None, force_terminal=False)
        p = Progress(*progress_columns(80, label=label, estimated=est), console=console, auto_refresh=False)
        task = p.add_task("run", total=300, loss="0.1449", active="8/8", vt="7.0 min", cost="0.0675")
        p.update(task, completed=300)
        console.print(p.make_tasks_table(p.tasks))
        line = buf.getvalue().splitlines()[0]
        assert "…" not in line and len(line) <= 80, line
        for needle in ("300 steps", "loss 0.1449", "8/8 workers", "7.0 min virtual", "$0.0675"):
            assert needle in line, (needle, line)


# ------------------------------------------------------------------------------ run summary table
def _summary(**over: Any) -> Any:
    from spotwise.events import RunSummary

    d: dict[str, Any] = dict(mode="emulated", status="completed", steps=300, final_loss=0.147, final_metric=0.96,
                             metric_name="accuracy", wall_s=95.2, virtual_s=418.5, cost_usd=0.0675,
                             cost_breakdown={"total": 0.0675, "by_category": {"coordinator": 0.0099, "worker": 0.0576}},
                             revocations=8, joins=16, decisions=6, spec={"name": "demo"},
                             extra={"samples": 47710, "on_demand": {"basis": "measured", "workers": 8, "samples": 47710,
                                                                    "steps": 199, "time_s": 302.8, "cost_usd": 0.1216}})
    d.update(over)
    return RunSummary(**d)


def test_run_table_says_what_the_wall_time_covers_and_the_commands_elapsed() -> None:
    from spotwise.cli_tables import _summary_table

    text = _render(_summary_table(_summary(), Path("x"), elapsed_s=210.0))
    assert "wall time (training)" in text and "1.6 min" in text
    assert "command elapsed" in text and "3.5 min" in text
    assert "95.2 s" not in text and "7.0 min" in text
    assert max(len(ln) for ln in text.splitlines()) <= 80


def test_run_report_renders_cost_breakdowns_as_rows_without_duplicates() -> None:
    from spotwise.reports.run.report import cost_rows

    bd = {"total": 0.0675, "by_category": {"coordinator": 0.00989, "worker": 0.0576},
          "by_market": {"on_demand": 0.00989, "spot": 0.0576}, "by_pool": {"coordinator": 0.00989, "c5.xlarge": 0.0576},
          "by_instance": {"coordinator": 0.00989, **{f"worker-{i}": 0.0072 for i in range(8)}}}
    rows = cost_rows(bd)
    labels = [k for k, _ in rows]
    assert len(labels) == len(set(labels))
    assert not any("{" in v or "total" in k for k, v in rows), rows
    assert ("  coordinator (on-demand)", "$0.0099") in rows and ("  worker (spot)", "$0.0576") in rows
    assert not any("by pool" in k for k in labels)  # the same split as by kind
    inst = dict(rows)["  by instance"]
    assert "+5 more" in inst


def test_run_report_page_has_no_raw_dicts(tmp_path: Path) -> None:
    import spotwise
    from spotwise.reports.run.report import write_report

    spotwise.simulate(_small_spec(), tmp_path / "sim")
    page = next(p for p in write_report(tmp_path / "sim") if p.suffix == ".html").read_text()
    assert "{&#x27;" not in page and "{'" not in page and "cost: total" not in page and "cost: by_" not in page


def _small_spec(**over: Any) -> dict[str, Any]:
    d: dict[str, Any] = {"name": "readable", "seed": 1,
                         "workload": {"name": "mlp-digits", "batch_size": 16, "lr": 0.1, "eval_every": 20},
                         "target": {"iterations": 40}, "deadline": "1h",
                         "cluster": {"instance_type": "c5.xlarge", "workers": 2, "coordinator_instance": "c5.large"},
                         "market": {"revocation": {"model": "none"}}, "outputs": {"checkpoint_every": 0, "plots": False}}
    d.update(over)
    return d


# ------------------------------------------------------------------------------------ comparisons
def _entry(d: str, samples: int | None, target: dict[str, Any]) -> dict[str, Any]:
    return {"dir": d, "kind": "run", "samples": samples, "work": {"workload": "mlp-digits", "dataset": None, "target": target}}


def test_the_demos_own_baseline_is_like_for_like() -> None:
    from spotwise.reports.compare import like_for_like

    spot = _entry("demo", 47710, {"iterations": 300, "loss": None})
    baseline = _entry("demo/on-demand", 47710, {"iterations": 47710, "loss": None})  # a step bound of its own
    assert like_for_like([spot, baseline]) == []
    other = _entry("longer", 95420, {"iterations": 600, "loss": None})
    flags = like_for_like([spot, other])
    assert any("different target" in f for f in flags) and any("samples" in f for f in flags)
    assert any("different target" in f for f in like_for_like([_entry("a", None, {"iterations": 1}),
                                                                _entry("b", None, {"iterations": 2})]))


def test_report_renders_a_sweep_directory(tmp_path: Path) -> None:
    import spotwise

    spotwise.sweep({**_small_spec(), "deadline": "3h", "target": {"iterations": 400},
                    "market": {"revocation": {"model": "lifetime", "mttf_s": 60, "mttr_s": 30}}},
                   spec_market=True, horizon="2d", starts="8h", history="1h", restart="60s",
                   strategies="on-demand,spot+guard", out=tmp_path / "sweep", plots=False)
    res = CliRunner().invoke(app, ["report", str(tmp_path / "sweep")], env={"COLUMNS": "80"})
    assert res.exit_code == 0, res.output
    assert "spot+guard" in res.output and (tmp_path / "sweep" / "report" / "index.html").is_file()


def test_sweep_table_names_a_user_policy_by_its_name(monkeypatch: pytest.MonkeyPatch) -> None:
    from spotwise.sim.sweep.records import parse_strategies

    monkeypatch.syspath_prepend(str(USER_POLICIES))
    names = [s.name for s in parse_strategies("on-demand,trial_policies:CountSteps")]
    assert names == ["on-demand", "count-steps"]
    twice = [s.name for s in parse_strategies(["trial_policies:CountSteps", "trial_policies:CountSteps"])]
    assert twice == ["count-steps", "count-steps (trial_policies:CountSteps)"]
    sys.modules.pop("trial_policies", None)


# ------------------------------------------------------------------------------ constraint errors
def test_budget_error_says_what_to_raise_and_keeps_the_theorem_at_the_end() -> None:
    from spotwise.planner.plan.constraints import infeasible_message
    from spotwise.planner.plan.records import Alternative

    alts = [Alternative("one-bid", (1.1,), 1, 10, 62.3, 3600.0, 0.1, True, "closed-form",
                        "Thm 3: F(b*) = J E[R(n)] / theta = 10 x 1 s / 3600 s"),
            Alternative("on-demand", (), 1, 10, 80.0, 3000.0, 0.1, True, "closed-form", "1 x p3 at 3 $/h")]
    what, fix = infeasible_message(alts, 36 * 3600.0, 50.0)
    assert "budget $50 is below the cheapest plan's $62.3" in what and "36.0 h" in what
    assert "raise budget_usd to at least $62.3" in fix and "relax the deadline" in fix
    assert fix.rstrip().endswith(")") and fix.index("Thm 3") > fix.index("raise budget_usd")
    late = [Alternative("no-interruptions", (1.0,), 1, 10, 5.0, 90792.0, 0.1, False, "closed-form",
                        "uninterrupted runtime 90792 s exceeds the deadline 72000 s")]
    what, fix = infeasible_message(late, 72000.0, None)
    assert "20.0 h deadline" in what and "needs 25.2 h" in what and "relax the deadline to at least 25.3 h" in fix


def test_plan_cli_budget_error_exits_2_with_the_amount(tmp_path: Path) -> None:
    import yaml

    d = yaml.safe_load((ROOT / "examples/zhang-uniform.yaml").read_text())
    d["budget_usd"] = 1e-6
    spec = tmp_path / "tight.yaml"
    spec.write_text(yaml.safe_dump(d))
    res = CliRunner().invoke(app, ["plan", str(spec), "--pilot-steps", "20"], env={"COLUMNS": "200"})
    assert res.exit_code == 2, res.output
    assert "raise budget_usd to at least $" in res.output and "Traceback" not in res.output


def test_the_sweep_table_fits_80_columns_and_keeps_every_column_on_wide_terminals() -> None:
    """Issue 29 item 5: `simulate --trace` at 80 columns: no line wider, no strategy name split."""
    from rich.console import Console

    from spotwise import api
    from spotwise.reports.sweep_view import sweep_table

    job = {"name": "narrow", "workload": {"name": "mlp-digits", "step_time_s": 30.0}, "target": {"iterations": 240},
           "deadline": "4h", "cluster": {"instance_type": "c5.xlarge", "workers": 2, "region": "us-east-1"},
           "market": {"synthetic": {"kind": "constant", "price": 0.05}, "revocation": {"model": "none"}}}
    res = api.sweep(job, spec_market=True, strategies="on-demand,no-interruptions,spot+guard,spotwise-avail",
                    restart="0s", horizon="3d", history="1h")
    narrow = Console(width=80, record=True)
    narrow.print(sweep_table(res, width=80))
    text = narrow.export_text()
    assert max(len(line) for line in text.splitlines()) <= 80
    for name in ("no-interruptions", "spotwise-avail", "spot+guard", "on-demand"):
        assert any(name in line for line in text.splitlines()), name
    wide = Console(width=240, record=True)
    wide.print(sweep_table(res, width=240))
    assert "vs restart bound" in wide.export_text()  # the full table where it fits
