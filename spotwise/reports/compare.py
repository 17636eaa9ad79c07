"""Reports as results, and one page comparing runs or sweeps side by side (issue 22 item 3).

:func:`single_report` is ``spotwise report DIR`` (the run's own ``DIR/report/``).
:func:`compare_runs` is ``spotwise report DIR1 DIR2 ...``: one self-contained HTML page (plots
embedded) with loss against time and loss against cost of every run overlaid, and a table of cost,
time, deadline and what each run did; trace sweeps (directories holding ``sweep.json``) get one
row per strategy.  The like-for-like rules of the demo hold: runs that did different work -- another
workload or dataset, or a different number of samples trained on (more than 1% apart; the target, a stopping
rule, counts only where the samples differ or are unknown) --
are flagged at the top of the page, as are sweeps of different jobs or windows; the numbers are
still shown, but the page says they do not compare.
"""

from __future__ import annotations

import base64
import html
import io
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spotwise.errors import InputError
from spotwise.safeparse import loads_json
from spotwise.reports.units import human_hours
from spotwise.rundir_files import make_run_folder, read_run_file, write_run_text
from spotwise.rundir_names import REPORT_DIR, SUMMARY_FILE, SWEEP_FILE

#: relative difference of samples trained on above which two runs did different work
SAMPLES_TOLERANCE = 0.01


@dataclass
class Report:
    """What ``spotwise report`` wrote: the page, the files, one entry per run or sweep strategy, the flags."""

    runs: list[str]
    html: Path
    files: list[Path]
    entries: list[dict[str, Any]]
    flags: list[str] = field(default_factory=list)
    kind: str = "run"

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "runs": self.runs, "html": str(self.html), "files": [str(f) for f in self.files],
                "entries": self.entries, "flags": self.flags}

    def __repr__(self) -> str:
        flags = f", {len(self.flags)} flag(s)" if self.flags else ""
        return f"Report({self.kind}: {len(self.runs)} dir(s), {len(self.entries)} entries{flags} -> {self.html})"


def single_report(run_dir: Path, plots: bool = True) -> Report:
    """One run's report (``RUN_DIR/report/index.html`` and its PNGs; ``plots=False``: nothing written); a sweep
    directory (one holding ``sweep.json``) gets its strategies' page in ``SWEEP_DIR/report/index.html``."""
    from spotwise.reports.run import load_run, report_json, write_report

    # lexists: a sweep.json that is a link, FIFO or folder is named by the reader below, not taken for a run
    if os.path.lexists(Path(run_dir) / SWEEP_FILE) and not os.path.lexists(Path(run_dir) / SUMMARY_FILE):
        page = Path(run_dir) / REPORT_DIR / "index.html"
        if not plots:
            entries = _sweep_entries(Path(run_dir))
            return Report([str(run_dir)], page, [], entries, like_for_like(entries), "sweep")
        make_run_folder(run_dir, REPORT_DIR)  # a real folder in the run directory, never a link (issue 30 item 2)
        rep = compare_runs([Path(run_dir)], page, root=Path(run_dir))
        rep.kind = "sweep"
        return rep

    run = load_run(run_dir)
    files = write_report(run_dir) if plots else []
    page = next((f for f in files if f.suffix == ".html"), Path(run_dir) / REPORT_DIR / "index.html")
    return Report([str(run_dir)], page, list(files), [report_json(run)], [], "run")


def _finite(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def _run_entry(d: Path) -> tuple[dict[str, Any], Any]:
    from spotwise.reports.run import load_run

    run = load_run(d)
    s = run.summary
    spec = s.spec or {}
    ex = s.extra or {}
    od = ex.get("on_demand") or {}
    return {"dir": str(d), "kind": "run", "name": spec.get("name", d.name), "mode": s.mode, "status": s.status,
            "steps": s.steps, "samples": ex.get("samples"), "metric_name": run.metric_name, "final_metric": run.final_metric,
            "final_loss": run.final_loss, "virtual_h": s.virtual_s / 3600.0, "cost_usd": s.cost_usd,
            "deadline_h": None if ex.get("deadline_s") is None else ex["deadline_s"] / 3600.0,
            "deadline_met": ex.get("deadline_met"), "revocations": s.revocations,
            "on_demand_cost_usd": _finite(od.get("cost_usd")),
            "work": {"workload": spec.get("workload", {}).get("name"), "dataset": spec.get("workload", {}).get("dataset"),
                     "target": spec.get("target")}}, run


def _sweep_entries(d: Path) -> list[dict[str, Any]]:
    try:  # the run directory's safe reader: a regular file within the cap, no link followed, a FIFO never opened
        data = loads_json(read_run_file(d, "sweep.json").decode("utf-8"), str(d / "sweep.json"), "sweep.json")
    except (OSError, ValueError) as e:  # UnicodeDecodeError is a ValueError
        raise InputError(f"cannot read {d / 'sweep.json'}: {e}", "pass a sweep directory written by `spotwise simulate "
                         "--trace ... --out DIR`", str(d)) from None
    strategies = data.get("strategies") if isinstance(data, dict) else None
    if not isinstance(strategies, list) or not all(isinstance(s, dict) for s in strategies):
        raise InputError(f"{d / 'sweep.json'} is not a sweep summary (an object with a list of strategies)",
                         "pass a sweep directory written by `spotwise simulate --trace ... --out DIR`", str(d))
    job = data.get("job") if isinstance(data.get("job"), dict) else {}
    out = []
    for s in strategies:
        out.append({"dir": str(d), "kind": "sweep", "name": f"{d.name}: {s.get('strategy')}", "strategy": s.get("strategy"),
                    "windows": s.get("windows"), "deadline_met": s.get("deadline_met"), "deadline_met_ci": s.get("deadline_met_ci"),
                    "mean_cost": s.get("mean_cost"), "vs_oracle": s.get("cost_ratio_of_means"), "vs_on_demand": s.get("vs_on_demand"),
                    "p95_finish_h": s.get("p95_finish_h"),
                    "work": {"work_h": job.get("work_h"), "deadline_h": job.get("deadline_h"), "workers": job.get("workers"),
                             "windows": data.get("windows"), "first_start": data.get("first_start")}})
    return out


def like_for_like(entries: list[dict[str, Any]]) -> list[str]:
    """Why the entries do not compare (empty when they do)."""
    flags: list[str] = []
    runs = [e for e in entries if e["kind"] == "run"]
    if runs:
        ref = runs[0]
        for e in runs[1:]:
            w0, w1 = ref["work"], e["work"]
            a, b = ref.get("samples"), e.get("samples")
            # the target is a stopping rule, not the work done: runs that trained on the same samples did the same
            # work whatever their step targets (the demo's on-demand baseline stops at the spot run's samples,
            # with a step target of its own), so the target is compared only where the samples differ or are unknown
            same_samples = bool(a and b and abs(a - b) <= SAMPLES_TOLERANCE * max(a, b))
            keys = ("workload", "dataset") if same_samples else ("workload", "dataset", "target")
            for key in keys:
                if w0.get(key) != w1.get(key):
                    flags.append(f"{e['dir']} trains a different {key} ({w1.get(key)!r}) than {ref['dir']} ({w0.get(key)!r})")
            if a and b and abs(a - b) > SAMPLES_TOLERANCE * max(a, b):
                flags.append(f"{e['dir']} trained on {b:,} samples, {ref['dir']} on {a:,}: different work, the costs "
                             "and times do not compare")
    sweeps = {e["dir"]: e["work"] for e in entries if e["kind"] == "sweep"}
    if len(sweeps) > 1:
        (d0, w0), *rest = sweeps.items()
        for d, w in rest:
            if w != w0:
                flags.append(f"sweep {d} replays a different job or windows ({w}) than {d0} ({w0})")
    if runs and sweeps:
        flags.append("runs and sweeps side by side: a run is one window, a sweep's row the mean over its windows")
    return flags


def _png(fig: Any) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def _overlay(runs: list[tuple[dict[str, Any], Any]]) -> list[tuple[str, str]]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    out = []
    for title, xs, xlabel in (("loss vs time", lambda r: r.step_t / 3600.0, "virtual time (h)"),
                              ("loss vs cost", lambda r: r.step_cost, "cost so far ($)")):
        fig, ax = plt.subplots(figsize=(9, 4.5))
        drawn = 0
        for entry, run in runs:
            ok = np.isfinite(run.step_loss)
            if ok.sum() == 0:
                continue
            ax.plot(np.asarray(xs(run))[ok], run.step_loss[ok], label=f"{entry['name']} ({entry['dir']})", lw=1.2)
            drawn += 1
        ax.set_xlabel(xlabel)
        ax.set_ylabel("training loss")
        ax.set_title(title)
        if drawn:
            ax.legend(fontsize=8)
            ax.set_yscale("log") if all(np.nanmin(r.step_loss) > 0 for _, r in runs if np.isfinite(r.step_loss).any()) else None
        else:
            ax.text(0.5, 0.5, "no step with a loss", ha="center", transform=ax.transAxes)
        out.append((title, _png(fig)))
        plt.close(fig)
    return out


def _fmt(v: Any, spec: str = ".4g") -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, (int, float)):
        return format(v, spec) if math.isfinite(v) else "-"
    return html.escape(str(v))


def _page(entries: list[dict[str, Any]], flags: list[str], images: list[tuple[str, str]]) -> str:
    esc = html.escape
    parts = ["<!doctype html><html><head><meta charset='utf-8'><title>spotwise: runs compared</title>",
             "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}td,th{border:1px solid #ccc;"
             "padding:4px 8px;text-align:right}th{background:#eee}.flag{background:#fff3cd;border:1px solid #d4a017;"
             "padding:8px;margin:6px 0}</style></head><body>", "<h1>spotwise: runs compared</h1>"]
    for f in flags:
        parts.append(f"<div class='flag'>not like for like: {esc(f)}</div>")
    runs = [e for e in entries if e["kind"] == "run"]
    if runs:
        parts.append("<h2>runs</h2><table><tr><th>run</th><th>mode</th><th>status</th><th>steps</th><th>samples</th>"
                     "<th>final metric</th><th>final loss</th><th>time</th><th>cost ($)</th><th>on-demand est. ($)</th>"
                     "<th>deadline</th><th>met</th><th>revocations</th></tr>")
        for e in runs:
            metric = f"{_fmt(e['final_metric'])} {esc(e['metric_name'] or '')}"
            parts.append(f"<tr><td>{esc(e['name'])}<br><small>{esc(e['dir'])}</small></td><td>{esc(e['mode'])}</td>"
                         f"<td>{esc(e['status'])}</td><td>{e['steps']}</td><td>{_fmt(e['samples'], ',')}</td><td>{metric}</td>"
                         f"<td>{_fmt(e['final_loss'])}</td><td>{esc(human_hours(e['virtual_h']))}</td><td>{_fmt(e['cost_usd'])}</td>"
                         f"<td>{_fmt(e['on_demand_cost_usd'])}</td><td>{esc(human_hours(e['deadline_h']))}</td>"
                         f"<td>{_fmt(e['deadline_met'])}</td><td>{e['revocations']}</td></tr>")
        parts.append("</table>")
    sweeps = [e for e in entries if e["kind"] == "sweep"]
    if sweeps:
        parts.append("<h2>sweeps</h2><table><tr><th>sweep: strategy</th><th>windows</th><th>P(deadline)</th><th>95% CI</th>"
                     "<th>mean cost ($)</th><th>vs oracle</th><th>vs on-demand</th><th>p95 finish</th></tr>")
        for e in sweeps:
            ci = e.get("deadline_met_ci") or [None, None]
            parts.append(f"<tr><td>{esc(e['name'])}</td><td>{e['windows']}</td><td>{_fmt(e['deadline_met'], '.1%')}</td>"
                         f"<td>{_fmt(ci[0], '.1%')} - {_fmt(ci[1], '.1%')}</td><td>{_fmt(e['mean_cost'])}</td>"
                         f"<td>{_fmt(e['vs_oracle'], '.3f')}x</td><td>{_fmt(e['vs_on_demand'], '.3f')}x</td>"
                         f"<td>{esc(human_hours(e['p95_finish_h']))}</td></tr>")
        parts.append("</table>")
    for title, src in images:
        parts.append(f"<h2>{esc(title)}</h2><img alt='{esc(title)}' src='{src}'>")
    parts.append("</body></html>")
    return "\n".join(parts)


def compare_runs(dirs: list[Path], out_html: Path, root: Path | None = None) -> Report:
    """One page comparing the run or sweep directories ``dirs`` (module docstring), written to ``out_html``
    (never through a link; ``root``: the run directory holding it, no link below it followed)."""
    from spotwise.outputfiles import check_output_file

    if out_html.suffix.lower() not in (".html", ".htm"):
        raise InputError(f"the comparison page must be an .html file, got {str(out_html)!r}", "write e.g. --out compare.html", "--out")
    check_output_file(out_html, "--out")
    entries: list[dict[str, Any]] = []
    runs: list[tuple[dict[str, Any], Any]] = []
    for d in dirs:
        if os.path.lexists(d / "sweep.json"):
            entries.extend(_sweep_entries(d))
        else:
            entry, run = _run_entry(d)
            entries.append(entry)
            runs.append((entry, run))
    flags = like_for_like(entries)
    images = _overlay(runs) if runs else []
    base = root if root is not None else out_html.parent
    write_run_text(base, out_html.relative_to(base), _page(entries, flags, images), fsync=False)
    return Report([str(d) for d in dirs], out_html, [out_html], entries, flags, "comparison")
