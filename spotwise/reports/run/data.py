"""A run directory read into arrays: :func:`load_run` -> :class:`RunData` (the conventions for reading
``step`` and ``idle`` events are in :mod:`spotwise.reports.run.report`).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from spotwise.control.phases import totals_of
from spotwise.errors import InputError
from spotwise.events import EVENTS_FILE, SUMMARY_FILE, RunSummary, read_events, read_summary
from spotwise.reports import fmt_duration


PLOT_FILES = ("loss_vs_time.png", "loss_vs_cost.png", "workers_price.png", "training.png")
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

    #: where the steps' time went, by phase (spotwise.control.phases; collective runs), from the step events
    step_phases: dict[str, Any] | None = None
    member_t: np.ndarray = field(default_factory=lambda: np.empty(0))  # join/revoke times ...
    member_active: np.ndarray = field(default_factory=lambda: np.empty(0))  # ... and the active count after each
    #: issue 41 item 6: what a training script logged (``metrics`` events): name -> rows (step, t, wall, value)
    script_metrics: dict[str, np.ndarray] = field(default_factory=dict)
    #: samples each committed step took (all workers; NaN where a step event does not say)
    step_samples: np.ndarray = field(default_factory=lambda: np.empty(0))
    #: committed steps taken back and redone (``rollback`` events) and restart mode's restarts (:func:`lost_work`)
    lost_work: dict[str, Any] | None = None

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


def _num(v: Any) -> float:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else 0.0


def lost_work(rollbacks: list[dict[str, Any]], restarts: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The work a run redid: committed steps rolled back (every member lost at once on the collective plane; a
    restart-mode script resumed from its checkpoint), their virtual seconds and cost where the events say, and
    restart mode's restarts (its first start is none); None when there was none."""
    if not rollbacks and len(restarts) <= 1:
        return None
    return {"rollbacks": len(rollbacks), "redone_steps": int(sum(_num(e.get("lost_steps")) for e in rollbacks)),
            "redone_s": sum(_num(e.get("redone_s")) for e in rollbacks),
            "redone_usd": sum(_num(e.get("redone_usd")) for e in rollbacks),
            "restarts": max(0, len(restarts) - sum(1 for e in restarts if e.get("gen") == 0))}


def load_run(out_dir: str | Path) -> RunData:
    """Read ``OUT/events.jsonl`` and ``OUT/summary.json``; InputError when it is not a run directory."""
    d = Path(out_dir)
    fix = "pass a run directory written by `spotwise run` or `spotwise simulate` (it holds events.jsonl and summary.json)"
    if not d.is_dir():
        raise InputError("not a directory" if d.exists() else "directory not found", fix, str(d))
    # absent only: a link, device or FIFO under the name is reported by the reader, naming the file (issue 30 item 3)
    missing = [n for n in (EVENTS_FILE, SUMMARY_FILE) if not os.path.lexists(d / n)]
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
        lost_work=lost_work(by.get("rollback", []), by.get("restart", [])),
        step_phases=totals_of(events).summary(),
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
        step_samples=col("step", "samples"),
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
    rows: dict[str, list[tuple[float, float, float, float]]] = {}
    for e in by.get("metrics", []):
        vals = e.get("values")
        if isinstance(vals, dict) and _num(e.get("step")):
            for k, v in vals.items():
                if _num(v):
                    rows.setdefault(str(k), []).append((float(e["step"]), float(e["t"]), float(e.get("wall") or 0.0), float(v)))
    run.script_metrics = {k: np.asarray(v, dtype=float) for k, v in rows.items()}
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


def _fmt_s(seconds: float | None) -> str:
    return fmt_duration(seconds)
