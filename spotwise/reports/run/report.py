"""What ``spotwise run`` writes at the end and ``spotwise report DIR`` shows: plots, a table, JSON.

Input is a run directory (DESIGN.md, "Run directory"): ``OUT/events.jsonl`` and ``OUT/summary.json``.

* :func:`load_run` reads both into a :class:`RunData` (events grouped into numpy arrays).
* :func:`plot_run` draws ``loss_vs_time.png``, ``loss_vs_cost.png`` and ``workers_price.png``.
* :func:`summary_table` (a rich Table) and :func:`report_json` (the ``--json`` object).
* :func:`write_report` = load + plots + a self-contained ``index.html`` (default folder ``OUT/report``).

Conventions read from the events:

* a ``step`` event is emitted when the step commits: it covers ``[t - duration, t]`` (``duration``
  missing: from the previous step's ``t``) with ``active`` workers;
* an ``idle`` event is emitted when the idle period *ends*: it covers ``[t - duration, t]``
  (an explicit ``start`` field, when present, wins);
* summary values (status, steps, final loss/metric, times, cost) come from ``summary.json``, the
  contract; counts that can be recomputed from the events (revocations, joins, decisions, steps)
  are recomputed, and a disagreement is listed under ``mismatches`` rather than hidden.

Where it lives: reading in :mod:`spotwise.reports.run.data`, the plots in
:mod:`spotwise.reports.run.plots`, the JSON, table and HTML here (which re-exports the public names).
"""

from __future__ import annotations

import html
import math
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from spotwise.control.phases import phase_line
from spotwise.reports.run.data import MAX_PLOT_POINTS, PLOT_FILES, RunData, _clean, _fmt_s, _num, load_run  # noqa: F401
from spotwise.reports.run.plots import _dest, plot_run
from spotwise.reports.units import humanize_seconds
from spotwise.rundir_files import make_run_folder, write_run_text
from spotwise.rundir_names import REPORT_DIR


# --------------------------------------------------------------------------------------------- JSON


def _decision_kind(decision: Any) -> str:
    return str(decision).split("(", 1)[0].strip() or "?"


def _price_stats(run: RunData) -> dict[str, Any]:
    if not run.price_t.size:
        return {"changes": 0, "instances": [], "min": None, "max": None, "mean": None}
    ok = np.isfinite(run.price)
    mean = None
    instances = sorted(set(run.price_instance))
    if len(instances) == 1 and ok.any():
        t, p = run.price_t[ok], run.price[ok]
        spans = np.diff(np.append(t, max(run.t_end, t[-1])))
        mean = float(np.sum(p * spans) / spans.sum()) if spans.sum() > 0 else float(p[-1])
    return {
        "changes": int(run.price_t.size),
        "instances": instances,
        "min": _clean(np.min(run.price[ok])) if ok.any() else None,
        "max": _clean(np.max(run.price[ok])) if ok.any() else None,
        "mean": mean,  # time-weighted $/h, single-instance runs only
    }


def report_json(run: RunData) -> dict[str, Any]:
    """The ``spotwise report --json`` object: summary values plus what the events say."""
    s = run.summary
    reasons = Counter(run.revoke_reason)
    by_policy = Counter(str(d.get("policy")) for d in run.decisions)
    by_kind = Counter(_decision_kind(d.get("decision")) for d in run.decisions)
    idle_periods = [[float(a), float(b)] for a, b in zip(run.idle_start, run.idle_end)]
    finite_active = run.step_active[np.isfinite(run.step_active)]
    evals = [
        {"t": _clean(t), "step": None if not np.isfinite(n) else int(n), "loss": _clean(lo), "metric": _clean(m)}
        for t, n, lo, m in zip(run.eval_t, run.eval_step, run.eval_loss, run.eval_metric)
    ]
    return {
        "out_dir": str(run.out_dir),
        "job": run.header.get("job"),
        "mode": s.mode,
        "status": s.status,
        "steps": s.steps,
        "final_loss": _clean(run.final_loss),
        "final_metric": _clean(run.final_metric),
        "metric_name": run.metric_name,
        "virtual_s": s.virtual_s,
        "wall_s": s.wall_s,
        "cost_usd": s.cost_usd,
        "cost_breakdown": {str(k): (_clean(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v)
                           for k, v in run.cost_breakdown.items()},
        "workers_provisioned": run.header.get("workers"),
        "workers_active_mean": _clean(np.mean(finite_active)) if finite_active.size else None,
        "workers_active_min": int(finite_active.min()) if finite_active.size else None,
        "revocations": int(run.revoke_t.size),
        "revocations_by_reason": dict(sorted(reasons.items())),
        "notices": int(run.notice_t.size),
        "joins": int(run.join_t.size),
        "idle_s": run.idle_s,
        "idle_periods": idle_periods,
        "retries": int(np.nansum(run.step_retries)) if run.step_retries.size else 0,
        "checkpoints": int(run.checkpoint_t.size),
        "restores": int(run.restore_t.size),
        "price": _price_stats(run),
        "decisions": len(run.decisions),
        "decisions_by_policy": dict(sorted(by_policy.items())),
        "decisions_by_kind": dict(sorted(by_kind.items())),
        "decision_log": [{**d, "t": _clean(d.get("t"))} for d in run.decisions],
        "evals": evals,
        "step_phases": run.step_phases,
        "lost_work": run.lost_work,
        "events": run.n_events,
        "mismatches": list(run.mismatches),
    }


# -------------------------------------------------------------------------------------------- table



def _fmt_num(v: float | None) -> str:
    return "-" if v is None or not math.isfinite(v) else f"{v:.4g}"


def _fmt_usd(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return f"${v:,.4f}" if abs(v) < 100 else f"${v:,.2f}"
    return str(v)


def _counts(c: dict[str, int], limit: int = 6) -> str:
    items = sorted(c.items(), key=lambda kv: (-kv[1], kv[0]))
    text = ", ".join(f"{k} {v}" for k, v in items[:limit])
    return text + (f", +{len(items) - limit} more" if len(items) > limit else "")


_SECTIONS = (("by_category", "by kind"), ("by_market", "by market"), ("by_pool", "by pool"), ("by_instance", "by instance"))


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def cost_rows(breakdown: dict[str, Any], limit: int = 4) -> list[tuple[str, str]]:
    """The cost breakdown as rows a person reads (issue 29): the kinds one row each, every other split
    (market, pool, instance) one row of ``name $x`` items, a split that repeats an earlier one's amounts
    (one pool per kind) left out, and the total (the ``cost`` row) not repeated."""
    rows: list[tuple[str, str]] = []
    seen: list[list[float]] = []
    for key, v in breakdown.items():  # scalar parts other than the total (older summaries)
        if key != "total" and _is_num(v) and not any(key == s for s, _ in _SECTIONS):
            rows.append((f"  cost: {key}", _fmt_usd(v)))
    for key, label in _SECTIONS:
        part = breakdown.get(key)
        if not isinstance(part, dict):
            continue
        items = [(str(k), float(v)) for k, v in part.items() if _is_num(v)]
        amounts = sorted(round(v, 9) for _, v in items)
        if not items or amounts in seen:
            continue
        seen.append(amounts)
        if key == "by_category":  # one row per kind, its market beside it where each kind has one market
            market = {round(v, 9): str(k).replace("_", "-") for k, v in (breakdown.get("by_market") or {}).items() if _is_num(v)}
            named = len(market) == len(items) and sorted(market) == amounts
            rows += [(f"  {k.replace('_', '-')}" + (f" ({market[round(v, 9)]})" if named else ""), _fmt_usd(v))
                     for k, v in items]
            continue
        items.sort(key=lambda kv: -kv[1])
        text = ", ".join(f"{k.replace('_', '-')} {_fmt_usd(v)}" for k, v in items[:limit])
        rows.append((f"  {label}", text + (f", +{len(items) - limit} more" if len(items) > limit else "")))
    return rows


def summary_rows(run: RunData) -> list[tuple[str, str]]:
    """(label, value) rows shared by :func:`summary_table` and the HTML page."""
    j = report_json(run)
    rows = [("status", j["status"] + (f" ({j['mode']})" if j["mode"] else ""))]
    if j["job"]:
        rows.append(("job", str(j["job"])))
    rows.append(("steps", f"{j['steps']:,}" + (f" ({j['retries']} retried attempts)" if j["retries"] else "")))
    rows.append(("final loss", _fmt_num(j["final_loss"])))
    if j["metric_name"] or j["final_metric"] is not None:
        rows.append((f"final {j['metric_name'] or 'metric'}", _fmt_num(j["final_metric"])))
    rows.append(("virtual time", _fmt_s(j["virtual_s"])))
    rows.append(("wall time (training)", _fmt_s(j["wall_s"])))
    line = phase_line(j["step_phases"])
    if line:
        rows.append(("step time", line))
    rows.append(("cost", _fmt_usd(j["cost_usd"])))
    rows.extend(cost_rows(j["cost_breakdown"]))
    if j["workers_provisioned"] is not None or j["workers_active_mean"] is not None:
        rows.append(("workers", f"{j['workers_provisioned'] if j['workers_provisioned'] is not None else '?'} provisioned"
                     + (f", {j['workers_active_mean']:.2f} active on average" if j["workers_active_mean"] is not None else "")))
    rev = f"{j['revocations']}"
    if j["revocations_by_reason"]:
        rev += f" ({_counts(j['revocations_by_reason'])})"
    rows.append(("revocations", rev + (f"; {j['notices']} notices" if j["notices"] else "")))
    lw = j.get("lost_work")
    if lw:  # steps taken back and trained again: lost work (restart mode's restarts redo those after a checkpoint)
        rows.append(("lost work", (f"{lw['restarts']} restarts; " if lw["restarts"] else "")
                     + f"{lw['redone_steps']} steps redone ({_fmt_s(lw['redone_s'])}, {_fmt_usd(lw['redone_usd'])})"))
    rows.append(("joins", str(j["joins"])))
    idle_frac = f" ({100 * j['idle_s'] / j['virtual_s']:.1f}% of virtual time)" if j["virtual_s"] > 0 else ""
    rows.append(("idle time", f"{_fmt_s(j['idle_s'])} in {len(j['idle_periods'])} periods{idle_frac}"
                 if j["idle_periods"] else "0 s"))
    if j["checkpoints"] or j["restores"]:
        rows.append(("checkpoints", f"{j['checkpoints']} written, {j['restores']} restores"))
    p = j["price"]
    if p["changes"]:
        rows.append(("function price" if j["mode"] == "serverless" else "spot price", f"{p['changes']} changes, ${p['min']:.4f}-${p['max']:.4f}/h"
                     + (f", mean ${p['mean']:.4f}/h" if p["mean"] is not None else "")
                     if p["min"] is not None else f"{p['changes']} changes"))
    dec = str(j["decisions"])
    if j["decisions_by_kind"]:
        dec += f" ({_counts(j['decisions_by_kind'])})"
    rows.append(("decisions", dec))
    for m in j["mismatches"]:
        rows.append(("warning", m))
    return rows


def summary_table(run: RunData) -> Any:
    """A two-column rich Table of the run (what ``spotwise report DIR`` prints)."""
    from rich.table import Table

    from spotwise.reports.terminal_text import safe_text

    name = run.header.get("job") or run.out_dir.name
    table = Table(title=safe_text(f"run {name}"), show_header=False, title_justify="left")
    table.add_column("field", style="bold", no_wrap=True)
    table.add_column("value", overflow="fold")
    for label, value in summary_rows(run):  # values read from the run directory: text, never markup
        table.add_row(safe_text(label), safe_text(value, "yellow" if label == "warning" else None))
    return table


# --------------------------------------------------------------------------------------------- HTML


def _html(run: RunData, images: list[Path], dest: Path) -> str:
    e = html.escape
    rows = "\n".join(f"<tr><th>{e(k)}</th><td>{e(v)}</td></tr>" for k, v in summary_rows(run))
    imgs = "\n".join(f'<figure><img src="{e(p.relative_to(dest).as_posix())}" alt="{e(p.stem)}"></figure>'
                     for p in images)
    decisions = ""
    if run.decisions:
        shown = run.decisions[-200:]
        drows = "\n".join(
            f"<tr><td>{e(_fmt_s(_num(d.get('t'))))}</td><td>{e(str(d.get('policy')))}</td>"
            f"<td>{e(str(d.get('decision')))}</td><td>{e(humanize_seconds(str(d.get('reason'))))}</td></tr>" for d in shown)
        more = f" (last {len(shown)} of {len(run.decisions)})" if len(shown) < len(run.decisions) else ""
        decisions = (f"<h2>Decisions{more}</h2><table><tr><th>virtual time</th><th>policy</th><th>decision</th>"
                     f"<th>reason</th></tr>\n{drows}</table>")
    name = e(str(run.header.get("job") or run.out_dir.name))
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>spotwise run {name}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em; color: #222; max-width: 1200px; }}
table {{ border-collapse: collapse; margin-bottom: 1.5em; }}
th, td {{ border: 1px solid #ddd; padding: 4px 10px; text-align: left; vertical-align: top; }}
th {{ background: #f4f4f4; }}
img {{ max-width: 100%; border: 1px solid #eee; }}
figure {{ margin: 0 0 1.5em 0; }}
</style></head>
<body>
<h1>spotwise run {name}</h1>
<p>{e(str(run.out_dir))}</p>
<table>
{rows}
</table>
{imgs}
{decisions}
</body></html>
"""


def write_report(out_dir: str | Path, dest: str | Path | None = None) -> list[Path]:
    """Load the run in ``out_dir`` and write the PNGs and ``index.html`` into ``dest``.

    ``dest`` defaults to ``out_dir/report``.  Returns the paths written (PNGs, then index.html).
    """
    run = load_run(out_dir)
    # in the run directory: no link between it and the files is followed (issue 30 item 2)
    root = Path(out_dir) if dest is None else _dest(dest)
    d = make_run_folder(root, REPORT_DIR) if dest is None else root
    images = plot_run(run, d, root=root)
    index = d / "index.html"
    write_run_text(root, index.relative_to(root), _html(run, images, d), fsync=False)
    return [*images, index]
