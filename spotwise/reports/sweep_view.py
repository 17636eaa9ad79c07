"""Tables, files and plots of a trace sweep (``spotwise simulate --trace``).

Files written into the sweep's output directory: ``sweep.json`` (the summary, one object),
``windows.csv`` (one row per strategy, home and start), and with plots ``cost_cdf.png`` (the CDF
over windows of cost relative to the hindsight oracle) and ``finish_cdf.png`` (the CDF of the
finish time, with the deadline marked).
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

from spotwise.reports.finite_json import dumps_finite
from spotwise.reports.units import human_hours
from spotwise.rundir_files import write_run_bytes, write_run_text
from spotwise.rundir_names import SWEEP_FILE, SWEEP_PLOTS, WINDOWS_FILE
from spotwise.sim.sweep import SweepResult


#: below this many columns the sweep's table keeps the seven columns a person compares (issue 29 item 5)
WIDE_COLUMNS = 160


def narrow_sweep_table(result: SweepResult) -> Any:
    """The sweep's table for a terminal of 80 columns: strategy, P(deadline) with its interval, mean cost, against
    the oracle and on-demand, p95 finish time; the full table (:func:`sweep_table`) on wider terminals."""
    from rich.table import Table

    d = result.to_dict()
    job = d["job"]
    t = Table(title=f"{result.job.name}: {human_hours(job['work_h'])} of work, {human_hours(job['deadline_h'])} deadline, "
                    f"{d['windows']} starts x {len(result.homes) or 1} home(s)", title_justify="left")
    t.add_column("strategy", no_wrap=True, overflow="ellipsis", max_width=22)
    for col in ("P(dl)", "95% CI", "mean $", "/oracle", "/on-dem", "p95 finish"):
        t.add_column(col, justify="right", no_wrap=True)
    for s in result.summaries:
        lo, hi = s.deadline_met_ci
        t.add_row(s.strategy, f"{s.deadline_met:.0%}", f"{100 * lo:.0f}-{hi:.0%}", f"{s.mean_cost:.2f}",
                  "-" if s.cost_ratio_of_means is None else f"{s.cost_ratio_of_means:.2f}x",
                  "-" if s.vs_on_demand is None else f"{s.vs_on_demand:.2f}x",
                  "-" if s.p95_finish_h is None else human_hours(s.p95_finish_h))
    t.caption = (f"P(dl): share of windows that met the deadline; /oracle: mean cost over the cheapest single place in "
                 f"hindsight (mean {d['oracle_mean_cost']:.2f} $); a wider terminal shows every column")
    return t


def sweep_table(result: SweepResult, breakdown: bool = False, width: int | None = None) -> Any:
    """The sweep's table: one row per strategy; ``breakdown`` adds where the hours went (issue 23 item 1).
    ``width`` below :data:`WIDE_COLUMNS` (and no ``breakdown``): :func:`narrow_sweep_table`."""
    from rich.table import Table

    if width is not None and width < WIDE_COLUMNS and not breakdown and result.oracle:
        return narrow_sweep_table(result)
    d = result.to_dict()
    job = d["job"]
    t = Table(title=(f"{result.job.name}: {human_hours(job['work_h'])} of work, {human_hours(job['deadline_h'])} deadline, "
                     f"{job['workers']} worker(s); {len(result.rows) // max(1, len(result.summaries))} windows "
                     f"({d['windows']} starts, {d['first_start']} .. {d['last_start']}), {d['places']} places"))
    cols = ["strategy", "deadline met", "95% CI", "mean cost $", "vs free-move", "vs restart bound", "vs oracle", "vs on-demand", "p95 finish h",
            "unfinished", "on-demand h", "moves"]
    clair = bool(result.hindsight)
    if clair:
        cols.insert(cols.index("vs oracle"), "vs hindsight")
    if breakdown:
        cols += ["spot h", "od compute h", "restart h", "idle h"]
    for col in cols:
        t.add_column(col, justify="left" if col == "strategy" else "right")  # type: ignore[arg-type]

    def x(v: float | None) -> str:
        return "-" if v is None else f"{v:.3f}x"

    for s in result.summaries:
        lo, hi = s.deadline_met_ci
        row = [s.strategy, f"{s.deadline_met:.1%}", f"{lo:.1%}-{hi:.1%}", f"{s.mean_cost:.2f}", x(s.cost_ratio_free), x(s.cost_ratio_restart),
               *([x(s.cost_ratio_hindsight)] if clair else []),
               x(s.cost_ratio_of_means), x(s.vs_on_demand), "-" if s.p95_finish_h is None else f"{s.p95_finish_h:.1f}",
               str(s.unfinished), f"{s.mean_on_demand_h:.2f}", f"{s.mean_moves:.2f}"]
        if breakdown:
            b = s.breakdown_h or {}
            row += [f"{b.get(k, 0.0):.2f}" for k in ("spot", "on_demand", "restart", "idle")]
        t.add_row(*row)
    if breakdown and result.oracle:
        ob = d["oracle_breakdown_h"] or {}
        rb = d.get("restart_bound_mean_cost")
        t.add_row("(single-place oracle)", "100.0%", "", f"{d['oracle_mean_cost']:.2f}", x(d["oracle_mean_cost"] / d["free_move_mean_cost"])
                  if d.get("free_move_mean_cost") else "-", x(d["oracle_mean_cost"] / rb) if rb else "-",
                  *([x(d["oracle_mean_cost"] / d["hindsight_mean_cost"])] if clair else []), "1.000x", "", "", "", f"{ob.get('on_demand', 0):.2f}", "0",
                  f"{ob.get('spot', 0):.2f}", f"{ob.get('on_demand', 0):.2f}", "0.00", "0.00")
    free = d.get("free_move_mean_cost")
    t.caption = ((f"free-move bound: at every instant the cheapest place with capacity, moves and restarts free, mean {free:.2f} $ "
                  "(no schedule pays less); " if free is not None else "")
                 + (f"restart-aware bound: no schedule that pays its restarts, even one knowing the future, pays less than "
                    f"mean {d['restart_bound_mean_cost']:.2f} $; " if d.get("restart_bound_mean_cost") else "")
                 + (f"hindsight schedule: the best schedule knowing the future that pays its restarts, mean "
                    f"{d['hindsight_mean_cost']:.2f} $; " if clair else "")
                 + f"oracle: the cheapest single place in hindsight, mean {d['oracle_mean_cost']:.2f} $ (a migrating strategy may "
                 "beat it); a run the data ended before it finished is charged the work it had left at on-demand prices")
    return t


def write_sweep(result: SweepResult, out: Path, plots: bool = True) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    written = [write_run_text(out, SWEEP_FILE, dumps_finite(result.to_dict(), what=SWEEP_FILE, indent=2) + "\n")]
    rows = [r.to_dict() for r in result.rows]
    f = io.StringIO(newline="")
    if rows:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    written.append(write_run_text(out, WINDOWS_FILE, f.getvalue()))  # never through a link (issue 30 item 2)
    if plots:
        written += plot_sweep(result, out)
    return written


def _cdf_figure(curves: dict[str, Any], path: Path, xlabel: str, title: str, *, log_x: bool = False,
                vline: tuple[float, str] | None = None) -> Path:
    """One CDF plot: ``curves`` maps a label to its sorted values (one per window)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for label, v in curves.items():
        if len(v):
            ax.step(v, np.arange(1, len(v) + 1) / len(v), where="post", label=label)
    if vline is not None:
        ax.axvline(vline[0], color="k", ls="--", lw=1, label=vline[1])
    if log_x:
        ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("fraction of windows")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(title)
    fig.tight_layout()
    _save_png(fig, path)
    plt.close(fig)
    return path


def _save_png(fig: Any, path: Path) -> None:
    """``fig`` as a PNG at ``path``, never through a link (:func:`~spotwise.rundir_files.write_run_bytes`)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    write_run_bytes(path.parent, path.name, buf.getvalue(), fsync=False)


def plot_sweep(result: SweepResult, out: Path) -> list[Path]:
    import numpy as np

    names = [s.strategy for s in result.summaries]
    dl = result.job.deadline_s / 3600
    cost = {n: np.sort([r.cost / r.oracle_cost for r in result.rows if r.strategy == n and r.oracle_cost]) for n in names}
    finish = {n: np.sort([min(r.finish_s / 3600, 3 * dl) if r.finish_s is not None else 3 * dl
                          for r in result.rows if r.strategy == n]) for n in names}
    return [
        _breakdown_figure(result, out / SWEEP_PLOTS[0]),
        _cdf_figure(cost, out / SWEEP_PLOTS[1], "cost / hindsight oracle", "Cost relative to the hindsight oracle (CDF over windows)",
                    log_x=True),
        _cdf_figure(finish, out / SWEEP_PLOTS[2], "finish time (h); unfinished runs drawn at the right edge",
                    "Finish time (CDF over windows)", vline=(dl, "deadline")),
    ]


def _breakdown_figure(result: SweepResult, path: Path) -> Path:
    """Where the hours go, per strategy and for the single-place oracle: a stacked bar of mean hours per
    window (spot computing, on-demand computing, restarts and moves billed without progress, idle)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    names = [s.strategy for s in result.summaries]
    parts = {k: [float((s.breakdown_h or {}).get(k, 0.0)) for s in result.summaries] for k in ("spot", "on_demand", "restart", "idle")}
    if result.oracle:
        names.append("oracle")
        parts["spot"].append(float(np.mean([o.spot_h for o in result.oracle])))
        parts["on_demand"].append(float(np.mean([o.on_demand_h for o in result.oracle])))
        parts["restart"].append(0.0)
        parts["idle"].append(0.0)
    fig, ax = plt.subplots(figsize=(max(6.0, 1.1 * len(names) + 2), 4.2))
    bottom = np.zeros(len(names))
    for key, label in (("spot", "spot computing"), ("on_demand", "on-demand computing"),
                       ("restart", "restarts/moves (billed, no progress)"), ("idle", "idle (no instance)")):
        ax.bar(names, parts[key], bottom=bottom, label=label)
        bottom += np.array(parts[key])
    ax.set_ylabel("hours per window (mean)")
    ax.set_title("Where the time goes")
    ax.tick_params(axis="x", labelrotation=20)
    ax.legend(fontsize=8)
    fig.tight_layout()
    _save_png(fig, path)
    plt.close(fig)
    return path
