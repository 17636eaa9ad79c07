"""Event log and summary: the run-directory contract shared by simulator and runtimes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from spotwise.errors import InputError
from spotwise.events import (
    SCHEMA_VERSION,
    EventLog,
    RunSummary,
    read_events,
    read_summary,
    write_summary,
)


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_write_and_read_round_trip(tmp_path: Path) -> None:
    clock, wall = FakeClock(), FakeClock()
    path = tmp_path / "events.jsonl"
    with EventLog(path, clock=clock, wall_clock=wall, meta={"mode": "simulate"}) as log:
        clock.now, wall.now = 4.0, 0.5
        log.emit("price", instance="c5.xlarge", price=np.float64(0.31))
        log.emit("revoke", worker=3)
        clock.now = 10.0
        log.emit("step", step=1, loss=2.3, active=7, lr=0.05, sync="full")
        log.emit("decision", policy="lr-scaling", decision="SetLearningRate(0.0437)", reason="7 of 8 workers active")
        log.emit("cost", total=0.01, t=12.5)
    events = read_events(path)
    assert [e["kind"] for e in events] == ["header", "price", "revoke", "step", "decision", "cost"]
    assert events[0]["schema"] == SCHEMA_VERSION and events[0]["mode"] == "simulate"
    assert events[1] == {"t": 4.0, "wall": 0.5, "kind": "price", "instance": "c5.xlarge", "price": 0.31}
    assert events[3]["t"] == 10.0 and events[3]["active"] == 7
    assert events[5]["t"] == 12.5
    assert [e["kind"] for e in read_events(path, kinds=["step"])] == ["step"]


def test_emit_rejects_missing_fields_and_unknown_kinds(tmp_path: Path) -> None:
    with EventLog(tmp_path / "e.jsonl") as log:
        with pytest.raises(InputError, match="step event lacks"):
            log.emit("step", step=1)
        with pytest.raises(InputError, match="unknown event kind"):
            log.emit("explode")
        with pytest.raises(InputError, match="must be a number"):
            log.emit("step", step="one", loss=1.0, active=1, lr=0.1, sync="full")


def test_nan_loss_becomes_null(tmp_path: Path) -> None:
    with EventLog(tmp_path / "e.jsonl") as log:
        log.emit("step", step=1, loss=float("nan"), active=1, lr=0.1, sync="full")
    assert read_events(tmp_path / "e.jsonl")[1]["loss"] is None


def test_torn_last_line_is_tolerated_but_corruption_elsewhere_is_not(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    with EventLog(path) as log:
        log.emit("revoke", worker=0)
        log.emit("join", worker=0)
    with open(path, "a") as fh:
        fh.write('{"t": 1.0, "wall": 0.1, "kind": "rev')  # kill -9 mid-write
    assert [e["kind"] for e in read_events(path)] == ["header", "revoke", "join"]
    lines = path.read_text().splitlines()
    lines[1] = "garbage"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(InputError, match="line 2 is not valid JSON"):
        read_events(path)


def test_resume_appends_and_keeps_wall_monotone(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    wall = FakeClock()
    with EventLog(path, wall_clock=wall) as log:
        wall.now = 7.0
        log.emit("revoke", worker=1)
    wall2 = FakeClock()
    with EventLog(path, wall_clock=wall2, resume=True) as log:
        wall2.now = 1.0
        log.emit("restore", step=5)
    events = read_events(path)
    assert [e["kind"] for e in events] == ["header", "revoke", "restore"]
    assert events[2]["wall"] == pytest.approx(8.0)


def test_schema_version_mismatch(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    path.write_text(json.dumps({"t": 0, "wall": 0, "kind": "header", "schema": 99}) + "\n")
    with pytest.raises(InputError, match="schema version 99"):
        read_events(path)
    with pytest.raises(InputError, match="not found"):
        read_events(tmp_path / "missing.jsonl")


def _summary(**over: object) -> RunSummary:
    base = dict(mode="emulated", status="completed", steps=300, final_loss=0.12, final_metric=0.95,
                metric_name="accuracy", wall_s=40.2, virtual_s=910.0, cost_usd=0.51,
                cost_breakdown={"by_category": {"worker": 0.4, "coordinator": 0.11}}, revocations=12,
                joins=11, decisions=3, spec={"name": "demo"})
    base.update(over)
    return RunSummary(**base)  # type: ignore[arg-type]


def test_summary_round_trip_and_atomic_write(tmp_path: Path) -> None:
    s = _summary()
    path = write_summary(tmp_path, s)
    assert path.name == "summary.json"
    assert not list(tmp_path.glob(".summary.json.tmp-*")), "temp file must be renamed away"
    back = read_summary(tmp_path)
    assert back == s
    assert json.loads(path.read_text())["schema"] == SCHEMA_VERSION


def test_summary_validation(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        _summary(mode="dream")
    with pytest.raises(ValueError):
        _summary(cost_usd=-1.0)
    (tmp_path / "summary.json").write_text("{not json")
    with pytest.raises(InputError, match="not valid JSON"):
        read_summary(tmp_path)
    (tmp_path / "summary.json").write_text(json.dumps({**_summary().to_dict(), "bogus": 1}))
    with pytest.raises(InputError, match="unknown summary fields"):
        read_summary(tmp_path)
