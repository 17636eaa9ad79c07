"""Run report: a run directory -> RunData, PNG plots, a rich table, --json and index.html."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

from spotwise.errors import InputError
from spotwise.events import EventLog, RunSummary, write_summary
from spotwise.reports.run.report import (
    PLOT_FILES,
    load_run,
    plot_run,
    report_json,
    summary_table,
    write_report,
)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _summary(**over) -> RunSummary:
    base = dict(mode="simulate", status="completed", steps=0, final_loss=None, final_metric=None, metric_name=None,
                wall_s=0.0, virtual_s=0.0, cost_usd=0.0, cost_breakdown={}, revocations=0, joins=0, decisions=0,
                spec={"job": "t"})
    base.update(over)
    return RunSummary(**base)


def make_realistic_run(out: Path, n_steps: int = 500, seed: int = 0) -> dict:
    """A simulated run with price changes, notices, revocations, idle periods, joins, evals, decisions.

    Returns what was written, for the assertions.
    """
    rng = np.random.default_rng(seed)
    clock, wall = Clock(), Clock()
    workers, active, cost, price = 8, 8, 0.0, 0.30
    truth = {"revocations": 0, "joins": 0, "idle_s": 0.0, "idle_periods": 0, "decisions": 0, "prices": 1,
             "notices": 0, "evals": 0, "reasons": {}}
    with EventLog(out / "events.jsonl", clock=clock, wall_clock=wall,
                  meta={"mode": "simulate", "job": "resnet-demo", "workers": workers}) as log:
        log.emit("price", instance="p3.2xlarge", price=price)
        step = 0
        while step < n_steps:
            if step and step % 97 == 0 and active > 0:  # the market takes 3 workers, with a 120 s notice
                for w in range(3):
                    log.emit("notice", worker=w, revoke_at=clock.now + 120)
                    truth["notices"] += 1
                clock.now += 120
                for w in range(3):
                    reason = "market" if w < 2 else "node-lost"
                    log.emit("revoke", worker=w, reason=reason)
                    truth["reasons"][reason] = truth["reasons"].get(reason, 0) + 1
                    truth["revocations"] += 1
                active -= 3
                log.emit("decision", policy="lr-scaling", decision=f"SetLearningRate({0.1 * active / workers:.4f})",
                         reason=f"{active} of {workers} workers active")
                truth["decisions"] += 1
            if step and step % 211 == 0:  # everyone gone for a while, then they come back
                for w in range(active):
                    log.emit("revoke", worker=w, reason="market")
                    truth["reasons"]["market"] = truth["reasons"].get("market", 0) + 1
                    truth["revocations"] += 1
                gap = 300.0 + step
                clock.now += gap
                log.emit("idle", duration=gap)
                truth["idle_s"] += gap
                truth["idle_periods"] += 1
                log.emit("restore", step=step)
                active = 0
            if active < workers and step % 97 == 50:
                for w in range(workers - active):
                    log.emit("join", worker=100 + w)
                    truth["joins"] += 1
                active = workers
                log.emit("decision", policy="resize", decision=f"Resize({workers})", reason="capacity is back")
                truth["decisions"] += 1
            if active == 0:
                active = 4
                for w in range(4):
                    log.emit("join", worker=200 + w)
                    truth["joins"] += 1
            if step % 40 == 0 and step:
                price = round(price * float(rng.uniform(0.8, 1.25)), 4)
                log.emit("price", instance="p3.2xlarge", price=price)
                truth["prices"] += 1
            dur = 10.0 * workers / active
            clock.now += dur
            wall.now += 0.01
            step += 1
            cost += price * active * dur / 3600
            loss = 2.5 * math.exp(-step / 150) + 0.1 + 0.05 * float(rng.standard_normal())
            log.emit("step", step=step, loss=loss if step != 7 else float("nan"), active=active, lr=0.1 * active / workers,
                     sync="full", duration=dur, cost=cost, epoch=step // 100, retries=1 if step % 111 == 0 else 0)
            if step % 100 == 0:
                log.emit("eval", step=step, loss=loss + 0.05, metric_name="accuracy", metric=min(0.99, 0.5 + step / 1000))
                truth["evals"] += 1
                log.emit("checkpoint", step=step, path=f"ckpt/{step}.pt")
        log.emit("cost", total=cost, breakdown={"compute": cost * 0.9, "storage": cost * 0.1})
        log.emit("end", status="completed")
    truth.update(steps=n_steps, cost=cost, virtual_s=clock.now, final_loss=loss)
    write_summary(out, _summary(
        mode="simulate", status="completed", steps=n_steps, final_loss=loss, final_metric=0.99, metric_name="accuracy",
        wall_s=wall.now, virtual_s=clock.now, cost_usd=cost, cost_breakdown={"compute": cost * 0.9, "storage": cost * 0.1},
        revocations=truth["revocations"], joins=truth["joins"], decisions=truth["decisions"]))
    return truth


@pytest.fixture(scope="module")
def realistic(tmp_path_factory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("run")
    return out, make_realistic_run(out)


def _assert_pngs(paths: list[Path], min_bytes: int = 10_000) -> None:
    assert sorted(p.name for p in paths) == sorted(PLOT_FILES)
    for p in paths:
        data = p.read_bytes()
        assert data[:8] == PNG_MAGIC, p
        assert min_bytes < len(data) < 2_000_000, (p, len(data))
        width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
        assert 600 <= width <= 3000 and 300 <= height <= 2000, (p, width, height)


def _render(table) -> str:
    console = Console(width=120, record=True, file=open("/dev/null", "w"))
    console.print(table)
    return console.export_text()


def test_load_run_groups_events_as_arrays(realistic) -> None:
    out, truth = realistic
    run = load_run(out)
    assert run.step_t.shape == run.step_loss.shape == run.step_active.shape == run.step_cost.shape == (truth["steps"],)
    assert np.all(np.diff(run.step_t) > 0) and np.all(np.diff(run.step_cost) > 0)
    assert np.isnan(run.step_loss[6])  # the NaN loss came back as null, read as NaN
    assert run.revoke_t.size == truth["revocations"] and run.join_t.size == truth["joins"]
    assert run.price_t.size == truth["prices"] and run.notice_t.size == truth["notices"]
    assert run.eval_t.size == truth["evals"] and run.eval_metric_name == "accuracy"
    assert run.idle_start.size == truth["idle_periods"]
    assert np.all(run.idle_end - run.idle_start > 0)
    assert run.idle_s == pytest.approx(truth["idle_s"])
    assert len(run.decisions) == truth["decisions"]
    assert run.end_status == "completed" and run.header["job"] == "resnet-demo"
    assert run.t_end == pytest.approx(truth["virtual_s"])
    assert run.mismatches == []


def test_report_json_matches_the_events(realistic) -> None:
    out, truth = realistic
    j = report_json(load_run(out))
    json.dumps(j, allow_nan=False)  # strict JSON
    assert j["status"] == "completed" and j["mode"] == "simulate" and j["job"] == "resnet-demo"
    assert j["steps"] == truth["steps"]
    assert j["revocations"] == truth["revocations"]
    assert j["revocations_by_reason"] == truth["reasons"]
    assert j["notices"] == truth["notices"]
    assert j["joins"] == truth["joins"]
    assert j["idle_s"] == pytest.approx(truth["idle_s"])
    assert len(j["idle_periods"]) == truth["idle_periods"]
    assert j["decisions"] == truth["decisions"] == len(j["decision_log"])
    assert set(j["decisions_by_kind"]) == {"SetLearningRate", "Resize"}
    assert j["cost_usd"] == pytest.approx(truth["cost"])
    assert j["cost_breakdown"]["compute"] == pytest.approx(truth["cost"] * 0.9)
    assert j["final_loss"] == pytest.approx(truth["final_loss"])
    assert j["final_metric"] == 0.99 and j["metric_name"] == "accuracy"
    assert len(j["evals"]) == truth["evals"] and j["evals"][-1]["step"] == 500
    assert j["price"]["changes"] == truth["prices"] and j["price"]["min"] <= j["price"]["mean"] <= j["price"]["max"]
    assert j["retries"] == 4 and j["checkpoints"] == 5 and j["restores"] == truth["idle_periods"]
    assert j["workers_provisioned"] == 8 and 0 < j["workers_active_mean"] <= 8
    assert j["mismatches"] == []


def test_summary_table_renders(realistic) -> None:
    out, truth = realistic
    text = _render(summary_table(load_run(out)))
    for needle in ("completed", "500", "revocations", f"{truth['revocations']} (market", "idle time",
                   "cost: compute", "final accuracy", "0.99", "SetLearningRate"):
        assert needle in text, needle


def test_write_report_writes_pngs_and_html(realistic, tmp_path: Path) -> None:
    out, _ = realistic
    paths = write_report(out, dest=tmp_path / "rep")
    *pngs, index = paths
    _assert_pngs(pngs, min_bytes=20_000)
    assert index.name == "index.html"
    page = index.read_text()
    for name in PLOT_FILES:
        assert f'src="{name}"' in page  # relative, so the folder can be moved or served
    assert "resnet-demo" in page and "<table>" in page and "SetLearningRate" in page
    assert "<script" not in page and "http" not in page  # self-contained


def test_write_report_defaults_to_out_report(tmp_path: Path) -> None:
    make_realistic_run(tmp_path, n_steps=60)
    paths = write_report(tmp_path)
    assert all(p.parent == tmp_path / "report" for p in paths) and len(paths) == len(PLOT_FILES) + 1


def test_thousands_of_steps(tmp_path: Path) -> None:
    truth = make_realistic_run(tmp_path, n_steps=5000, seed=3)
    run = load_run(tmp_path)
    assert run.step_t.size == 5000
    paths = plot_run(run, tmp_path / "plots")
    _assert_pngs(paths, min_bytes=20_000)
    assert report_json(run)["revocations"] == truth["revocations"]


def _degenerate(out: Path, kind: str) -> None:
    clock = Clock()
    with EventLog(out / "events.jsonl", clock=clock, wall_clock=clock, meta={"mode": "emulated"}) as log:
        if kind == "one-step":
            clock.now = 12.0
            log.emit("step", step=1, loss=2.0, active=1, lr=0.1, sync="full", duration=12.0, cost=0.001)
        elif kind == "nan-losses":
            for i in range(1, 20):
                clock.now = 5.0 * i
                log.emit("step", step=i, loss=None, active=2, lr=0.1, sync="full", duration=5.0, cost=0.001 * i)
        elif kind == "idle-only":
            clock.now = 50.0
            log.emit("price", instance="m5.large", price=0.05)
            log.emit("notice", worker=0, revoke_at=60.0)
            clock.now = 60.0
            log.emit("revoke", worker=0, reason="market")
            clock.now = 400.0
            log.emit("idle", duration=340.0)
        log.emit("end", status="failed" if kind == "idle-only" else "completed")
    steps = {"one-step": 1, "nan-losses": 19}.get(kind, 0)
    write_summary(out, _summary(mode="emulated", status="failed" if kind == "idle-only" else "completed", steps=steps,
                                virtual_s=clock.now, revocations=1 if kind == "idle-only" else 0))


@pytest.mark.parametrize("kind", ["empty", "one-step", "nan-losses", "idle-only"])
def test_degenerate_runs(tmp_path: Path, kind: str) -> None:
    _degenerate(tmp_path, kind)
    run = load_run(tmp_path)
    paths = write_report(tmp_path)
    _assert_pngs(paths[:len(PLOT_FILES)], min_bytes=5_000)
    j = report_json(run)
    json.dumps(j, allow_nan=False)
    assert j["mismatches"] == []
    text = _render(summary_table(run))
    assert "status" in text
    if kind == "nan-losses":
        assert j["final_loss"] is None
    if kind == "one-step":
        assert j["final_loss"] == 2.0 and j["steps"] == 1
    if kind == "idle-only":
        assert j["idle_s"] == 340.0 and j["idle_periods"] == [[60.0, 400.0]] and j["revocations"] == 1
        assert j["price"]["changes"] == 1 and j["status"] == "failed"
    if kind == "empty":
        assert j["steps"] == 0 and j["final_loss"] is None and j["idle_s"] == 0.0 and j["price"]["changes"] == 0


def test_mismatch_between_summary_and_events_is_reported(tmp_path: Path) -> None:
    _degenerate(tmp_path, "one-step")
    write_summary(tmp_path, _summary(steps=1, revocations=3))
    j = report_json(load_run(tmp_path))
    assert j["mismatches"] == ["summary.json says revocations=3, events.jsonl has 0"]
    assert "warning" in _render(summary_table(load_run(tmp_path)))


def test_not_a_run_directory(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="directory not found"):
        load_run(tmp_path / "nope")
    with pytest.raises(InputError, match="events.jsonl and summary.json missing"):
        load_run(tmp_path)
    (tmp_path / "file.txt").write_text("x")
    with pytest.raises(InputError, match="not a directory"):
        load_run(tmp_path / "file.txt")
    (tmp_path / "events.jsonl").write_text('{"t": 0, "wall": 0, "kind": "header", "schema": 1}\n')
    with pytest.raises(InputError, match="summary.json missing"):
        write_report(tmp_path)
    write_summary(tmp_path, _summary())
    (tmp_path / "events.jsonl").write_text("not json\n{}\n")
    with pytest.raises(InputError, match="line 1"):
        load_run(tmp_path)


def test_provisioned_workers_follow_resize_decisions(tmp_path) -> None:
    from spotwise.events import EventLog, RunSummary, write_summary
    from spotwise.reports.run.plots import _provisioned_timeline
    from spotwise.reports.run.report import load_run

    clock = {"t": 0.0}
    with EventLog(tmp_path / "events.jsonl", clock=lambda: clock["t"], meta={"mode": "emulated", "workers": 4}) as log:
        for step in range(1, 6):
            clock["t"] = 10.0 * step
            log.emit("step", step=step, loss=1.0 / step, active=4, lr=0.1, sync="full", duration=10.0, cost=0.01 * step)
        log.emit("decision", policy="dynamic-bids", decision="Resize(workers=8)", reason="grow", acted=True)
        clock["t"] = 60.0
        log.emit("step", step=6, loss=0.1, active=8, lr=0.1, sync="full", duration=10.0, cost=0.07)
    write_summary(tmp_path, RunSummary(mode="emulated", status="completed", steps=6, final_loss=0.1, final_metric=None,
                                       metric_name=None, wall_s=1.0, virtual_s=60.0, cost_usd=0.07, cost_breakdown={},
                                       revocations=0, joins=0, decisions=1, spec={"name": "t"}))
    xs, ys = _provisioned_timeline(load_run(tmp_path), 4.0)
    assert list(xs) == [0.0, 50.0, 60.0] and list(ys) == [4.0, 8.0, 8.0]
