"""The rich tables the CLI prints for people (run summary, serverless summary, comparison); the plan's
are in :mod:`spotwise.reports.plan_view`; :mod:`spotwise.cli` stays the thin command layer that calls them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from spotwise.reports.terminal_text import safe_text


def _summary_table(summary: Any, out: Path, elapsed_s: float | None = None) -> Any:
    """The run's summary beside its on-demand comparison; ``elapsed_s`` is the whole command's wall time
    (Ray's start, the on-demand baseline and the report included), shown beside the training's own."""
    from rich.table import Table

    from spotwise.control.phases import phase_line
    from spotwise.reports.units import human_duration

    ex = summary.extra
    od = ex.get("on_demand") or {}
    measured = od.get("basis") == "measured"
    t = Table(title=safe_text(f"{summary.spec['name']}: {summary.status}"), show_header=True)
    t.add_column("", style="bold", no_wrap=True)
    t.add_column("spot (this run)", justify="right")
    t.add_column(f"on-demand x{od.get('workers', '?')}, same samples" + ("" if measured else " (model estimate)"),
                 justify="right")
    metric = summary.metric_name or "metric"

    def num(v: Any, fmt: str = ".4f") -> str:
        return "-" if v is None else format(v, fmt)

    t.add_row("samples trained on", _samples_cell(ex), _samples_cell({"samples": od.get("samples")}) if od else "-")
    t.add_row("committed steps", str(summary.steps), str(od.get("steps", "-")) if od else "-")
    t.add_row(f"final {metric}", num(summary.final_metric), num(od.get("metric")) if measured else "not trained")
    t.add_row("final loss", num(summary.final_loss), num(od.get("final_loss")) if measured else "-")
    t.add_row("virtual time", human_duration(summary.virtual_s), human_duration(od.get("time_s", 0)) if od else "-")
    t.add_row("cost (with coordinator)", f"${summary.cost_usd:.4f}", f"${od.get('cost_usd', 0):.4f}" if od else "-")
    if od and od.get("cost_usd"):
        t.add_row("saving", f"{100 * (1 - summary.cost_usd / od['cost_usd']):.0f}%", "")
    pools = summary.cost_breakdown.get("by_pool") or {}
    if len(pools) > 2:  # several pools (issue 21): what each cost, the coordinator(s) and egress apart
        egress = summary.cost_breakdown.get("by_category", {}).get("egress")
        t.add_row("cost by pool", ", ".join(f"{k} ${v:.4f}" for k, v in pools.items())
                  + (f" (egress ${egress:.4f} included)" if egress else ""), "")
    t.add_row("revocations / joins", f"{summary.revocations} / {summary.joins}", "0 / 0")
    t.add_row("idle (no worker)", human_duration(ex.get("idle_s", 0)), "0 s")
    rec = ex.get("recovery_ms") or {}
    if rec.get("median") is not None and summary.mode != "simulate":  # no processes to recover in a simulation
        t.add_row("recovery (wall)", f"median {rec['median']:.0f} ms, p99 {rec['p99']:.0f} ms", "")
    line = phase_line(ex.get("step_phases"))
    if line:
        t.add_row("step time", line, "")
    t.add_row("wall time (training)", human_duration(summary.wall_s), human_duration(od.get("wall_s")) if od.get("wall_s") else "")
    if elapsed_s is not None:
        t.add_row("command elapsed", human_duration(elapsed_s), "")
    return t


def _samples_cell(ex: dict[str, Any]) -> str:
    """The samples committed, and the target when the last (whole) step went past it."""
    got, want = ex.get("samples"), ex.get("target_samples")
    if not isinstance(got, int):
        return str(got if got is not None else "-")
    if isinstance(want, int) and got > want:
        return f"{got:,} (target {want:,}: the last step is whole)"
    return f"{got:,}"


def _serverless_table(summary: Any) -> Any:
    from rich.table import Table

    from spotwise.reports.units import human_duration

    ex = summary.extra
    t = Table(title=safe_text(f"{summary.spec['name']}: {summary.status} (serverless, {ex.get('sync')}, {ex.get('backend')})"))
    t.add_column("", style="bold")
    t.add_column("value", justify="right")
    metric = summary.metric_name or "metric"
    fmt = (lambda v, f=".4f": "-" if v is None else format(v, f))
    t.add_row("committed steps", str(summary.steps))
    t.add_row("samples trained on", str(ex.get("samples", "-")))
    t.add_row(f"final {metric}", fmt(summary.final_metric))
    t.add_row("final loss", fmt(summary.final_loss))
    t.add_row("wall time", human_duration(summary.wall_s))
    bd = summary.cost_breakdown.get("by_category", {})
    t.add_row("cost (functions + Redis node)", f"${summary.cost_usd:.6f} (functions ${bd.get('function', 0):.6f}, "
              f"Redis ${bd.get('service', 0):.6f})")
    t.add_row("function invocations / lost / errors", f"{ex.get('invocations')} / {ex.get('lost')} / {ex.get('errors')}")
    pf = ex.get("pushed_fraction")
    t.add_row("update entries pushed (ISP)", "-" if pf is None else f"{100 * pf:.1f}% of computed")
    t.add_row("workers at the end", str(ex.get("workers_at_end")))
    return t


def comparison_table(rep: Any) -> Any:
    """``spotwise report DIR1 DIR2 ...``: the runs and sweep strategies compared, one row each; durations
    in hours or days (:func:`~spotwise.reports.units.human_duration`), short headers that fit 80 columns."""
    from rich.table import Table

    from spotwise.reports.terminal_text import safe_cells
    from spotwise.reports.units import human_hours

    def f(v: Any, spec: str = ".4g") -> str:
        if isinstance(v, bool):
            return "yes" if v else "no"
        return "-" if v is None else format(v, spec) if isinstance(v, (int, float)) else str(v)

    t = Table(title=f"{len(rep.runs)} directories compared" + (" (NOT like for like: see the flags)" if rep.flags else ""))
    t.add_column("run / strategy", overflow="fold", ratio=1)
    for col in ("samples", "metric", "time", "cost $", "deadline"):
        t.add_column(col, justify="right", no_wrap=True)
    for e in rep.entries:  # names read from the run and sweep directories: text, never markup
        if e["kind"] == "run":
            t.add_row(*safe_cells(e["name"], f(e["samples"], ","), f(e["final_metric"]), human_hours(e["virtual_h"]),
                                  f(e["cost_usd"]), f(e["deadline_met"]) if e["deadline_met"] is not None else "-"))
        else:
            t.add_row(*safe_cells(e["name"], f"{f(e['windows'])} win.", "-", human_hours(e["p95_finish_h"]) + " p95",
                                  f(e["mean_cost"]) + " mean", f(e["deadline_met"], ".0%") + " met"))
    return t
