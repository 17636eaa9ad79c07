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
"""

from __future__ import annotations

import html
import math
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from spotwise.errors import InputError
from spotwise.events import EVENTS_FILE, SUMMARY_FILE, RunSummary, read_events, read_summary
from spotwise.report import fmt_duration

PLOT_FILES = ("loss_vs_time.png", "loss_vs_cost.png", "workers_price.png")
#: Above this many points a line is thinned for plotting (the data in RunData are never thinned).
MAX_PLOT_POINTS = 4000
_F = np.float64


def _arr(values: list[Any]) -> np.ndarray:
    """Floats, with None / non-numbers as NaN."""
    out = np.full(len(values), np.nan, dtype=_F)
    for i, v in enumerate(values):
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            out[i] = float(v)
    return out


def _num(v: Any) -> float:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else math.nan


def _clean(v: float | None) -> float | None:
    """NaN / inf -> None, numpy scalar -> float (JSON-safe)."""
    if v is None:
        return None
    v = float(v)
    return v if math.isfinite(v) else None


@dataclass
class RunData:
    """One run directory, with its events grouped by kind as arrays (times in virtual seconds).

    Float arrays use NaN for a missing / null value.  ``decisions`` keeps the dicts (``t``,
    ``policy``, ``decision``, ``reason``) because they are text.
    """

    out_dir: Path
    summary: RunSummary
    header: dict[str, Any]
    n_events: int
    # step events
    step_t: np.ndarray
    step_wall: np.ndarray
    step_n: np.ndarray
    step_loss: np.ndarray
    step_active: np.ndarray
    step_cost: np.ndarray
    step_lr: np.ndarray
    step_duration: np.ndarray
    step_retries: np.ndarray
    step_epoch: np.ndarray
    step_sync: list[str]
    # market and membership
    price_t: np.ndarray
    price: np.ndarray
    price_instance: list[str]
    notice_t: np.ndarray
    notice_worker: np.ndarray
    notice_revoke_at: np.ndarray
    revoke_t: np.ndarray
    revoke_worker: np.ndarray
    revoke_reason: list[str]
    join_t: np.ndarray
    join_worker: np.ndarray
    idle_start: np.ndarray
    idle_end: np.ndarray
    # evaluation, checkpoints, decisions, cost, end
    eval_t: np.ndarray
    eval_step: np.ndarray
    eval_loss: np.ndarray
    eval_metric: np.ndarray
    eval_metric_name: str | None
    checkpoint_t: np.ndarray
    checkpoint_step: np.ndarray
    restore_t: np.ndarray
    restore_step: np.ndarray
    decisions: list[dict[str, Any]]
    cost_events_total: np.ndarray
    last_cost_breakdown: dict[str, Any] | None
    end_status: str | None
    t_end: float
    mismatches: list[str] = field(default_factory=list)

    member_t: np.ndarray = field(default_factory=lambda: np.empty(0))  # join/revoke times ...
    member_active: np.ndarray = field(default_factory=lambda: np.empty(0))  # ... and the active count after each

    @property
    def idle_s(self) -> float:
        return float(np.sum(self.idle_end - self.idle_start)) if self.idle_start.size else 0.0

    @property
    def metric_name(self) -> str | None:
        return self.summary.metric_name or self.eval_metric_name

    @property
    def final_loss(self) -> float | None:
        """summary.json's final loss, else the last finite training loss."""
        if self.summary.final_loss is not None and math.isfinite(self.summary.final_loss):
            return float(self.summary.final_loss)
        finite = self.step_loss[np.isfinite(self.step_loss)]
        return float(finite[-1]) if finite.size else None

    @property
    def final_metric(self) -> float | None:
        """summary.json's final metric, else the last finite eval metric."""
        if self.summary.final_metric is not None and math.isfinite(self.summary.final_metric):
            return float(self.summary.final_metric)
        finite = self.eval_metric[np.isfinite(self.eval_metric)]
        return float(finite[-1]) if finite.size else None

    @property
    def cost_breakdown(self) -> dict[str, Any]:
        return dict(self.summary.cost_breakdown or self.last_cost_breakdown or {})


def load_run(out_dir: str | Path) -> RunData:
    """Read ``OUT/events.jsonl`` and ``OUT/summary.json``; InputError when it is not a run directory."""
    d = Path(out_dir)
    fix = "pass a run directory written by `spotwise run` or `spotwise simulate` (it holds events.jsonl and summary.json)"
    if not d.is_dir():
        raise InputError("not a directory" if d.exists() else "directory not found", fix, str(d))
    missing = [n for n in (EVENTS_FILE, SUMMARY_FILE) if not (d / n).is_file()]
    if missing:
        raise InputError(f"not a run directory: {' and '.join(missing)} missing", fix, str(d))
    summary = read_summary(d)
    events = read_events(d / EVENTS_FILE)
    by: dict[str, list[dict[str, Any]]] = {}
    for e in events:
        by.setdefault(e["kind"], []).append(e)

    def col(kind: str, key: str) -> np.ndarray:
        return _arr([e.get(key) for e in by.get(kind, [])])

    steps = by.get("step", [])
    step_t = col("step", "t")
    dur = col("step", "duration")
    # a step without a duration runs from the previous step's commit
    prev = np.concatenate([[0.0], step_t[:-1]]) if step_t.size else step_t
    step_duration = np.where(np.isfinite(dur), dur, step_t - prev)

    idles = by.get("idle", [])
    idle_end = col("idle", "t")
    idle_dur = np.nan_to_num(col("idle", "duration"), nan=0.0).clip(min=0.0)
    explicit = _arr([e.get("start") for e in idles])
    idle_start = np.where(np.isfinite(explicit), explicit, idle_end - idle_dur)

    evals = by.get("eval", [])
    eval_names = [e.get("metric_name") for e in evals if e.get("metric_name")]
    costs = by.get("cost", [])
    ends = by.get("end", [])
    t_all = [e["t"] for e in events if isinstance(e.get("t"), (int, float))]
    t_end = max([summary.virtual_s, *t_all]) if t_all else summary.virtual_s

    run = RunData(
        out_dir=d,
        summary=summary,
        header=dict(by["header"][0]) if by.get("header") else {},
        n_events=len(events),
        step_t=step_t,
        step_wall=col("step", "wall"),
        step_n=col("step", "step"),
        step_loss=col("step", "loss"),
        step_active=col("step", "active"),
        step_cost=col("step", "cost"),
        step_lr=col("step", "lr"),
        step_duration=step_duration,
        step_retries=col("step", "retries"),
        step_epoch=col("step", "epoch"),
        step_sync=[str(e.get("sync")) for e in steps],
        price_t=col("price", "t"),
        price=col("price", "price"),
        price_instance=[str(e.get("instance")) for e in by.get("price", [])],
        notice_t=col("notice", "t"),
        notice_worker=col("notice", "worker"),
        notice_revoke_at=col("notice", "revoke_at"),
        revoke_t=col("revoke", "t"),
        revoke_worker=col("revoke", "worker"),
        revoke_reason=[str(e.get("reason") or "unknown") for e in by.get("revoke", [])],
        join_t=col("join", "t"),
        member_t=_arr([e["t"] for e in events if e.get("kind") in ("join", "revoke") and "active" in e]),
        member_active=_arr([e["active"] for e in events if e.get("kind") in ("join", "revoke") and "active" in e]),
        join_worker=col("join", "worker"),
        idle_start=idle_start,
        idle_end=idle_end,
        eval_t=col("eval", "t"),
        eval_step=col("eval", "step"),
        eval_loss=col("eval", "loss"),
        eval_metric=col("eval", "metric"),
        eval_metric_name=str(eval_names[-1]) if eval_names else None,
        checkpoint_t=col("checkpoint", "t"),
        checkpoint_step=col("checkpoint", "step"),
        restore_t=col("restore", "t"),
        restore_step=col("restore", "step"),
        decisions=[{k: e.get(k) for k in ("t", "policy", "decision", "reason")} for e in by.get("decision", [])],
        cost_events_total=col("cost", "total"),
        last_cost_breakdown=costs[-1].get("breakdown") if costs and isinstance(costs[-1].get("breakdown"), dict) else None,
        end_status=str(ends[-1]["status"]) if ends else None,
        t_end=float(t_end),
    )
    run.mismatches = _mismatches(run)
    return run


def _mismatches(run: RunData) -> list[str]:
    s = run.summary
    out = []
    last_step = int(np.nanmax(run.step_n)) if np.isfinite(run.step_n).any() else 0
    for name, summ, ev in [("steps", s.steps, last_step), ("revocations", s.revocations, run.revoke_t.size),
                           ("joins", s.joins, run.join_t.size), ("decisions", s.decisions, len(run.decisions))]:
        if summ != ev:
            out.append(f"summary.json says {name}={summ}, events.jsonl has {ev}")
    if run.end_status is not None and run.end_status != s.status:
        out.append(f"summary.json says status={s.status!r}, the end event says {run.end_status!r}")
    return out


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
        "events": run.n_events,
        "mismatches": list(run.mismatches),
    }


# -------------------------------------------------------------------------------------------- table


def _fmt_s(seconds: float | None) -> str:
    return fmt_duration(seconds, digits=2 if seconds is not None and seconds >= 3600 else 1)


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
    rows.append(("wall time", _fmt_s(j["wall_s"])))
    rows.append(("cost", _fmt_usd(j["cost_usd"])))
    for k, v in j["cost_breakdown"].items():
        rows.append((f"  cost: {k}", _fmt_usd(v)))
    if j["workers_provisioned"] is not None or j["workers_active_mean"] is not None:
        rows.append(("workers", f"{j['workers_provisioned'] if j['workers_provisioned'] is not None else '?'} provisioned"
                     + (f", {j['workers_active_mean']:.2f} active on average" if j["workers_active_mean"] is not None else "")))
    rev = f"{j['revocations']}"
    if j["revocations_by_reason"]:
        rev += f" ({_counts(j['revocations_by_reason'])})"
    rows.append(("revocations", rev + (f"; {j['notices']} notices" if j["notices"] else "")))
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

    name = run.header.get("job") or run.out_dir.name
    table = Table(title=f"run {name}", show_header=False, title_justify="left")
    table.add_column("field", style="bold", no_wrap=True)
    table.add_column("value", overflow="fold")
    for label, value in summary_rows(run):
        table.add_row(label, f"[yellow]{value}[/yellow]" if label == "warning" else value)
    return table


# -------------------------------------------------------------------------------------------- plots


def _time_unit(t_max: float) -> tuple[float, str]:
    if t_max >= 3 * 3600:
        return 3600.0, "h"
    if t_max >= 10 * 60:
        return 60.0, "min"
    return 1.0, "s"


def _thin(n: int, max_points: int = MAX_PLOT_POINTS) -> np.ndarray:
    """Indices of at most ~max_points evenly spaced samples, first and last included."""
    if n <= max_points:
        return np.arange(n)
    return np.unique(np.linspace(0, n - 1, max_points).round().astype(int))


def _smooth(y: np.ndarray, window: int) -> np.ndarray:
    """Centred moving mean ignoring NaN (NaN where the window holds no finite value)."""
    ok = np.isfinite(y)
    v = np.where(ok, y, 0.0)
    k = np.ones(window)
    num = np.convolve(v, k, mode="same")
    den = np.convolve(ok.astype(float), k, mode="same")
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / np.maximum(den, 1), np.nan)


def _new_fig(figsize: tuple[float, float] = (11, 5)) -> Any:
    from matplotlib.figure import Figure

    return Figure(figsize=figsize, layout="constrained")


def _empty(ax: Any, text: str) -> None:
    ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center", fontsize=11, color="0.4")


def _plot_loss_line(ax: Any, x: np.ndarray, loss: np.ndarray, label: str = "training loss") -> bool:
    """Raw loss (thin, thinned) plus a moving mean when noisy; False when nothing finite."""
    ok = np.isfinite(x) & np.isfinite(loss)
    if not ok.any():
        return False
    xs, ys = x[ok], loss[ok]
    idx = _thin(xs.size)
    if xs.size == 1:
        ax.plot(xs, ys, "o", color="C0", label=label)
        return True
    if xs.size >= 50:
        ax.plot(xs[idx], ys[idx], color="C0", linewidth=0.6, alpha=0.35, label=f"{label} (per step)")
        sm = _smooth(ys, max(5, xs.size // 50))
        ax.plot(xs[idx], sm[idx], color="C0", linewidth=1.8, label=f"{label} (moving mean)")
    else:
        ax.plot(xs, ys, color="C0", linewidth=1.2, marker="." if xs.size < 30 else None, label=label)
    if ys.size > 1 and ys.min() > 0:
        lo, hi = np.percentile(ys, [1, 99])
        if hi / lo > 100:  # spans orders of magnitude (outliers alone do not count)
            ax.set_yscale("log")
    return True


def _vlines(ax: Any, x: np.ndarray, **kw: Any) -> None:
    x = x[np.isfinite(x)]
    if x.size:
        ax.vlines(x, 0, 1, transform=ax.get_xaxis_transform(), **kw)


def _merge_legends(ax: Any, *others: Any, loc: str = "upper right") -> None:
    handles, labels = ax.get_legend_handles_labels()
    for o in others:
        h, lab = o.get_legend_handles_labels()
        handles += h
        labels += lab
    if handles:
        ax.legend(handles, labels, loc=loc, fontsize=8, framealpha=0.85)


def _title(run: RunData, what: str) -> str:
    name = run.header.get("job") or run.out_dir.name
    return f"{what} - {name} ({run.summary.mode}, {run.summary.status})"


def _plot_loss_vs_time(run: RunData, path: Path) -> Path:
    fig = _new_fig()
    ax = fig.add_subplot()
    div, unit = _time_unit(run.t_end)
    drew = _plot_loss_line(ax, run.step_t / div, run.step_loss)
    ok = np.isfinite(run.eval_t) & np.isfinite(run.eval_loss)
    if ok.any():
        ax.plot(run.eval_t[ok] / div, run.eval_loss[ok], "s--", color="C2", markersize=4, linewidth=1,
                label="held-out loss")
        drew = True
    if not drew:
        _empty(ax, "no finite loss recorded" if run.step_t.size else "no steps recorded")
    _vlines(ax, run.revoke_t / div, colors="C3", linewidth=0.7, alpha=0.5, label=f"revocation ({run.revoke_t.size})")
    ax2 = None
    okm = np.isfinite(run.eval_t) & np.isfinite(run.eval_metric)
    if okm.any():
        ax2 = ax.twinx()
        ax2.plot(run.eval_t[okm] / div, run.eval_metric[okm], "o-", color="C1", markersize=4, linewidth=1.2,
                 label=f"held-out {run.metric_name or 'metric'}")
        ax2.set_ylabel(f"held-out {run.metric_name or 'metric'}", color="C1")
        ax2.tick_params(axis="y", colors="C1")
    ax.set_xlim(0, run.t_end / div if run.t_end > 0 else 1.0)
    ax.set_xlabel(f"virtual time ({unit})")
    ax.set_ylabel("loss")
    ax.grid(alpha=0.3)
    ax.set_title(_title(run, "Loss over virtual time"))
    _merge_legends(ax, *([ax2] if ax2 else []))
    fig.savefig(path, dpi=100)
    return path


def _plot_loss_vs_cost(run: RunData, path: Path) -> Path:
    fig = _new_fig()
    ax = fig.add_subplot()
    drew = _plot_loss_line(ax, run.step_cost, run.step_loss)
    ok = np.isfinite(run.eval_t) & np.isfinite(run.eval_loss)
    okc = np.isfinite(run.step_t) & np.isfinite(run.step_cost)
    if ok.any() and okc.any():
        # evals carry no cost: read it off the cumulative step cost at the eval's time
        cost_at = np.interp(run.eval_t[ok], run.step_t[okc], run.step_cost[okc])
        ax.plot(cost_at, run.eval_loss[ok], "s--", color="C2", markersize=4, linewidth=1, label="held-out loss")
        drew = True
    if not drew:
        _empty(ax, "no (cost, loss) pairs recorded" if run.step_t.size else "no steps recorded")
    ax.set_xlim(left=0)
    ax.set_xlabel("cumulative cost (USD)")
    ax.set_ylabel("loss")
    ax.grid(alpha=0.3)
    ax.set_title(_title(run, "Loss vs money spent") + f" - total ${run.summary.cost_usd:,.2f}")
    _merge_legends(ax)
    fig.savefig(path, dpi=100)
    return path


def _active_timeline(run: RunData) -> tuple[np.ndarray, np.ndarray]:
    """x, y (for steps-post) of the active-worker count.

    Exact when join/revoke events carry the ``active`` count after them (the runtimes write it):
    a step function through those changes.  Otherwise reconstructed from the steps (each covers
    ``[t - duration, t]``) and idle periods (0 active).
    """
    if run.member_t.size:
        order = np.argsort(run.member_t, kind="stable")
        xs = np.concatenate([[0.0], run.member_t[order], [max(run.t_end, float(run.member_t.max()))]])
        ys = np.concatenate([[0.0], run.member_active[order], [run.member_active[order][-1]]])
        return xs, ys
    segs: list[tuple[float, float, float]] = []
    ok = np.isfinite(run.step_t) & np.isfinite(run.step_active)
    start = run.step_t - np.nan_to_num(run.step_duration, nan=0.0)
    segs += [(float(a), float(b), float(v)) for a, b, v in zip(start[ok], run.step_t[ok], run.step_active[ok])]
    segs += [(float(a), float(b), 0.0) for a, b in zip(run.idle_start, run.idle_end) if np.isfinite(a) and np.isfinite(b)]
    if not segs:
        return np.empty(0), np.empty(0)
    segs.sort()
    # a value holds until the next segment starts (drawn with steps-post); equal runs merge
    xs, ys = [segs[0][0]], [segs[0][2]]
    for a, _, v in segs[1:]:
        if v != ys[-1]:
            xs.append(a)
            ys.append(v)
    xs.append(max(b for _, b, _ in segs))
    ys.append(ys[-1])
    return np.array(xs), np.array(ys)


def _provisioned_timeline(run: RunData, initial: float) -> tuple[np.ndarray, np.ndarray]:
    """Provisioned workers over time: the header's count, changed by acted-on ``Resize`` decisions."""
    xs, ys = [0.0], [initial]
    for d in run.decisions:
        m = re.match(r"Resize\(workers=(\d+)\)", str(d.get("decision", "")))
        t = d.get("t")
        if m and isinstance(t, (int, float)):
            xs.append(float(t))
            ys.append(float(m.group(1)))
    xs.append(max(run.t_end, xs[-1]))
    ys.append(ys[-1])
    return np.array(xs), np.array(ys)


def _plot_workers_price(run: RunData, path: Path) -> Path:
    fig = _new_fig()
    ax = fig.add_subplot()
    div, unit = _time_unit(run.t_end)
    xs, ys = _active_timeline(run)
    if xs.size:
        ax.plot(xs / div, ys, color="C0", linewidth=1.4, label="active workers", drawstyle="steps-post")
    else:
        _empty(ax, "no steps recorded")
    prov = run.header.get("workers")
    if isinstance(prov, (int, float)) and not isinstance(prov, bool):
        px, py = _provisioned_timeline(run, float(prov))
        label = f"provisioned ({prov:g})" if len(set(py)) == 1 else f"provisioned ({prov:g} -> {py[-1]:g})"
        ax.plot(px / div, py, color="C0", linestyle=":", linewidth=1, alpha=0.7, label=label, drawstyle="steps-post")
    if run.idle_start.size:
        bars = [(a / div, (b - a) / div) for a, b in zip(run.idle_start, run.idle_end)]
        ax.broken_barh(bars, (0, 1), transform=ax.get_xaxis_transform(), facecolors="0.6", alpha=0.3,
                       label=f"idle ({_fmt_s(run.idle_s)})")
    _vlines(ax, run.notice_t / div, colors="C1", linewidth=0.8, linestyles="--", alpha=0.6,
            label=f"revocation notice ({run.notice_t.size})")
    _vlines(ax, run.revoke_t / div, colors="C3", linewidth=0.8, alpha=0.6, label=f"revocation ({run.revoke_t.size})")
    if run.join_t.size:
        ax.plot(run.join_t / div, np.zeros(run.join_t.size), "^", color="C2", markersize=5, clip_on=False,
                label=f"join ({run.join_t.size})")
    top = max([1.0, *(ys.tolist() if ys.size else []), *([float(prov)] if isinstance(prov, (int, float)) else [])])
    ax.set_ylim(0, top * 1.08)
    ax.yaxis.get_major_locator().set_params(integer=True)
    ax.set_xlim(0, run.t_end / div if run.t_end > 0 else 1.0)
    ax.set_xlabel(f"virtual time ({unit})")
    ax.set_ylabel("active workers")
    ax.grid(alpha=0.3)
    ax2 = None
    price_word = "function price" if run.summary.mode == "serverless" else "spot price"
    if run.price_t.size:
        ax2 = ax.twinx()
        instances = list(dict.fromkeys(run.price_instance))
        inst_arr = np.array(run.price_instance)
        for i, inst in enumerate(instances[:8]):
            m = (inst_arr == inst) & np.isfinite(run.price)
            if not m.any():
                continue
            t = np.append(run.price_t[m], max(run.t_end, run.price_t[m][-1]))
            p = np.append(run.price[m], run.price[m][-1])
            ax2.step(t / div, p, where="post", color="C4" if i == 0 else f"C{(5 + i) % 10}", linewidth=1.1,
                     alpha=0.9, label=f"{price_word} {inst}")
        ax2.set_ylabel(f"{price_word} (USD/h)", color="C4")
        ax2.tick_params(axis="y", colors="C4")
        ax2.set_ylim(bottom=0)
    ax.set_title(_title(run, f"Workers and {price_word}"))
    _merge_legends(ax, *([ax2] if ax2 else []), loc="lower left")
    fig.savefig(path, dpi=100)
    return path


def plot_run(run: RunData, out_dir: str | Path) -> list[Path]:
    """Write ``loss_vs_time.png``, ``loss_vs_cost.png`` and ``workers_price.png`` into ``out_dir``."""
    d = _dest(out_dir)
    return [
        _plot_loss_vs_time(run, d / PLOT_FILES[0]),
        _plot_loss_vs_cost(run, d / PLOT_FILES[1]),
        _plot_workers_price(run, d / PLOT_FILES[2]),
    ]


def _dest(out_dir: str | Path) -> Path:
    d = Path(out_dir)
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InputError(f"cannot create the report folder ({e.strerror})", "choose a writable folder", str(d)) from None
    return d


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
            f"<td>{e(str(d.get('decision')))}</td><td>{e(str(d.get('reason')))}</td></tr>" for d in shown)
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
    d = _dest(Path(out_dir) / "report" if dest is None else dest)
    images = plot_run(run, d)
    index = d / "index.html"
    index.write_text(_html(run, images, d), encoding="utf-8")
    return [*images, index]
