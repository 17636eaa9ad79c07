"""The rich tables and lines the CLI prints for people (run summary, serverless summary, placement,
plan, recommendation); :mod:`spotwise.cli` stays the thin command layer that calls them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def _summary_table(summary: Any, out: Path) -> Any:
    from rich.table import Table

    ex = summary.extra
    od = ex.get("on_demand") or {}
    measured = od.get("basis") == "measured"
    t = Table(title=f"{summary.spec['name']}: {summary.status}", show_header=True)
    t.add_column("", style="bold")
    t.add_column("spot (this run)", justify="right")
    t.add_column(f"same samples on {od.get('workers', '?')} on-demand workers" + ("" if measured else " (model estimate)"),
                 justify="right")
    metric = summary.metric_name or "metric"

    def num(v: Any, fmt: str = ".4f") -> str:
        return "-" if v is None else format(v, fmt)

    t.add_row("samples trained on", str(ex.get("samples", "-")), str(od.get("samples", "-")) if od else "-")
    t.add_row("committed steps", str(summary.steps), str(od.get("steps", "-")) if od else "-")
    t.add_row(f"final {metric}", num(summary.final_metric), num(od.get("metric")) if measured else "not trained")
    t.add_row("final loss", num(summary.final_loss), num(od.get("final_loss")) if measured else "-")
    t.add_row("virtual time", f"{summary.virtual_s / 60:.1f} min", f"{od.get('time_s', 0) / 60:.1f} min" if od else "-")
    t.add_row("cost (coordinator included)", f"${summary.cost_usd:.4f}", f"${od.get('cost_usd', 0):.4f}" if od else "-")
    if od and od.get("cost_usd"):
        t.add_row("saving", f"{100 * (1 - summary.cost_usd / od['cost_usd']):.0f}%", "")
    pools = summary.cost_breakdown.get("by_pool") or {}
    if len(pools) > 2:  # several pools (issue 21): what each cost, the coordinator(s) and egress apart
        egress = summary.cost_breakdown.get("by_category", {}).get("egress")
        t.add_row("cost by pool", ", ".join(f"{k} ${v:.4f}" for k, v in pools.items())
                  + (f" (egress ${egress:.4f} included)" if egress else ""), "")
    t.add_row("revocations / joins", f"{summary.revocations} / {summary.joins}", "0 / 0")
    t.add_row("idle (no worker)", f"{ex.get('idle_s', 0) / 60:.1f} min", "0")
    rec = ex.get("recovery_ms") or {}
    if rec.get("median") is not None and summary.mode != "simulate":  # no processes to recover in a simulation
        t.add_row("recovery (wall)", f"median {rec['median']:.0f} ms, p99 {rec['p99']:.0f} ms", "")
    t.add_row("wall time", f"{summary.wall_s:.1f} s", "")
    return t


def _serverless_table(summary: Any) -> Any:
    from rich.table import Table

    ex = summary.extra
    t = Table(title=f"{summary.spec['name']}: {summary.status} (serverless, {ex.get('sync')}, {ex.get('backend')})")
    t.add_column("", style="bold")
    t.add_column("value", justify="right")
    metric = summary.metric_name or "metric"
    fmt = (lambda v, f=".4f": "-" if v is None else format(v, f))
    t.add_row("committed steps", str(summary.steps))
    t.add_row("samples trained on", str(ex.get("samples", "-")))
    t.add_row(f"final {metric}", fmt(summary.final_metric))
    t.add_row("final loss", fmt(summary.final_loss))
    t.add_row("wall time", f"{summary.wall_s:.1f} s")
    bd = summary.cost_breakdown.get("by_category", {})
    t.add_row("cost (functions + Redis node)", f"${summary.cost_usd:.6f} (functions ${bd.get('function', 0):.6f}, "
              f"Redis ${bd.get('service', 0):.6f})")
    t.add_row("function invocations / lost / errors", f"{ex.get('invocations')} / {ex.get('lost')} / {ex.get('errors')}")
    pf = ex.get("pushed_fraction")
    t.add_row("update entries pushed (ISP)", "-" if pf is None else f"{100 * pf:.1f}% of computed")
    t.add_row("workers at the end", str(ex.get("workers_at_end")))
    return t


def _placement_table(placement: dict[str, Any]) -> Any:
    from rich.table import Table

    bt, ch = placement["backtest"], placement["choice"]
    t = Table(title=(f"place at the start: {ch['zone']} {ch['instance']} ({ch['spot_price']:.4g} $/h spot, {ch['on_demand_price']:.4g} "
                     f"on-demand); replayed on {bt['windows']} past windows ({bt['first_start']} .. {bt['last_start']}, "
                     f"every {bt['every_h']:g} h)"))
    for col in ("strategy", "P(deadline) measured", "95% CI", "mean cost", "p95 cost", "vs oracle"):
        t.add_column(col, justify="left" if col == "strategy" else "right")
    for s in bt["strategies"]:
        t.add_row(s["strategy"], f"{s['deadline_met']:.1%}", f"{s['ci95'][0]:.1%}-{s['ci95'][1]:.1%}", f"${s['mean_cost']:.2f}",
                  f"${s['p95_cost']:.2f}", f"{s['vs_oracle']:.3f}x")
    return t


def _plan_table(plan: Any) -> Any:
    from rich.table import Table

    t = Table(title=f"plan: {plan.strategy} (objective: {plan.objective}, deadline {plan.deadline_s / 3600:.2f} h)")
    for col in ("strategy", "bids ($/h)", "workers", "iterations", "E\\[cost]", "E\\[time]", "P(deadline)", "E\\[error]",
                "method", "note"):
        t.add_column(col, overflow="fold", min_width=11 if col == "P(deadline)" else None)
    for a in plan.alternatives:
        bids = ", ".join(f"{b:.3g}" for b in sorted(set(a.bids), reverse=True)) if a.bids else "-"
        style = "bold green" if a.strategy == plan.strategy else (None if a.feasible else "dim")
        t.add_row(a.strategy, bids, str(a.workers), str(a.iterations),
                  "-" if a.expected_cost is None else f"${a.expected_cost:.4g}",
                  "-" if a.expected_time_s is None else f"{a.expected_time_s / 3600:.2f} h",
                  "-" if a.deadline_probability is None else f"{a.deadline_probability:.2f}",
                  "-" if a.expected_error is None else f"{a.expected_error:.3g}", a.method,
                  a.reason if not a.feasible else (a.reason[:90] + ("..." if len(a.reason) > 90 else "")), style=style)
    return t


def _recommendation_lines(rec: dict[str, Any]) -> list[str]:
    """The plan's one recommendation (issue 18 item 2): place, strategy, expected cost, P(deadline) with its
    interval and the saving against on-demand, all from the same place and prices."""
    if not rec:
        return []
    where = " ".join(x for x in (rec.get("place"), rec.get("instance")) if x)
    bids = rec.get("bids") or []
    bid = f", bids {', '.join(f'{b:.4g}' for b in sorted(set(bids), reverse=True))} $/h" if bids else ""
    p = rec.get("deadline_probability")
    p_txt = "-" if p is None else f"{p:.2f} (model)"
    if rec.get("deadline_ci95"):
        lo, hi = rec["deadline_ci95"]
        p_txt += f"; measured on the trace's past windows {rec['deadline_measured']:.0%} (95% CI {lo:.0%}-{hi:.0%})"
    od, saving = rec.get("on_demand_cost"), rec.get("saving_vs_on_demand")
    save_txt = "no on-demand price to compare" if od is None else (
        f"{saving:.0%} less than on-demand (${od:.4g})" if saving >= 0 else f"{-saving:.0%} more than on-demand (${od:.4g})")
    return [f"[bold]recommended:[/bold] {rec['strategy']} in {where} with {rec['workers']} worker(s){bid}",
            f"  expected cost ${rec['expected_cost']:.4g}, expected time {rec['expected_time_s'] / 3600:.2f} h; "
            f"P(deadline) = {p_txt}",
            f"  saving: {save_txt}"]


def comparison_table(rep: Any) -> Any:
    """``spotwise report DIR1 DIR2 ...``: the runs and sweep strategies compared, one row each."""
    from rich.table import Table

    def f(v: Any, spec: str = ".4g") -> str:
        return "-" if v is None else format(v, spec) if isinstance(v, (int, float)) and not isinstance(v, bool) else str(v)

    t = Table(title=f"{len(rep.runs)} directories compared" + (" (NOT like for like: see the flags)" if rep.flags else ""))
    for col in ("run / strategy", "samples or windows", "final metric", "time (h)", "cost ($)", "deadline met"):
        t.add_column(col, justify="right")
    for e in rep.entries:
        if e["kind"] == "run":
            t.add_row(e["name"], f(e["samples"], ","), f(e["final_metric"]), f(e["virtual_h"]), f(e["cost_usd"]),
                      f(e["deadline_met"]))
        else:
            t.add_row(e["name"], f(e["windows"]), "-", f(e["p95_finish_h"]) + " (p95)", f(e["mean_cost"]) + " (mean)",
                      f(e["deadline_met"], ".1%"))
    return t
