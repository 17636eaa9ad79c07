"""``spotwise runs [DIR]`` and ``spotwise status DIR`` (issue 29 item 5): run directories listed with status,
progress, cost so far and deadline; one run read live from its event log while it goes (its lock held);
malformed or hostile run directories reported (a row ``unreadable``, exit 2), never a traceback or a hang."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import spotwise
from spotwise.cli import app
from spotwise.rundir import lock_run_dir

SPEC: dict[str, Any] = {"name": "watched", "seed": 1,
                        "workload": {"name": "mlp-digits", "batch_size": 16, "lr": 0.1, "eval_every": 20},
                        "target": {"iterations": 40}, "deadline": "2h",
                        "cluster": {"instance_type": "c5.xlarge", "workers": 2, "coordinator_instance": "c5.large"},
                        "market": {"revocation": {"model": "lifetime", "mttf_s": 60, "mttr_s": 30}},
                        "outputs": {"checkpoint_every": 0, "plots": False}}


@pytest.fixture(scope="module")
def done(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished (simulated) run, the source the other run directories are made from."""
    out = tmp_path_factory.mktemp("runs") / "done"
    spotwise.simulate(SPEC, out)
    return out


def _invoke(*args: str) -> Any:
    res = CliRunner().invoke(app, list(args), env={"COLUMNS": "80"})
    assert "Traceback" not in res.output
    return res


def _in_progress(done: Path, dest: Path, steps: int, *, torn: bool = False) -> Path:
    """A copy of ``done`` as it looked while running: its log up to ``steps`` step events, no end, no summary."""
    dest.mkdir(parents=True)
    for name in (".spotwise-run", "spec.json"):
        shutil.copy(done / name, dest / name)
    lines = (done / "events.jsonl").read_text().splitlines()
    kept, n = [], 0
    for line in lines:
        ev = json.loads(line)
        if ev["kind"] in ("end", "cost"):
            continue
        if ev["kind"] == "step":
            n += 1
            if n > steps:
                break
        kept.append(line)
    text = "\n".join(kept) + "\n" + ('{"t": 99.0, "wall": 1.0, "kind": "st' if torn else "")
    (dest / "events.jsonl").write_text(text)
    return dest


def test_runs_lists_a_finished_run_with_progress_cost_and_deadline(done: Path) -> None:
    res = _invoke("runs", str(done.parent), "--json")
    assert res.exit_code == 0, res.output
    d = json.loads(res.stdout)
    row = next(r for r in d["runs"] if r["name"] == "done")
    summary = json.loads((done / "summary.json").read_text())
    assert row["status"] == "completed" and row["steps"] == 40 == row["target_steps"]
    assert row["cost_usd"] == pytest.approx(summary["cost_usd"]) and row["deadline_s"] == 7200.0
    text = _invoke("runs", str(done.parent)).output
    assert "done" in text and "completed" in text and "40/40" in text and "2.0 h" in text
    assert max(len(ln) for ln in text.splitlines()) <= 80


def test_status_reads_a_run_in_progress_while_its_lock_is_held(done: Path, tmp_path: Path) -> None:
    live = _in_progress(done, tmp_path / "live", steps=15, torn=True)  # a line being written right now
    with lock_run_dir(live):  # the run's process holds the lock while it goes
        res = _invoke("status", str(live), "--json")
        assert res.exit_code == 0, res.output
        s = json.loads(res.stdout)
        assert s["status"] == "running" and s["steps"] == 15 and s["target_steps"] == 40 and s["lock_pid"] == os.getpid()
        assert s["cost_usd"] is not None and s["cost_usd"] > 0 and 0 < s["time_left_s"] <= 7200
        text = _invoke("status", str(live)).output
        assert "running" in text and "15/40" in text and "cost so far" in text and "left" in text
        rows = json.loads(_invoke("runs", str(tmp_path), "--json").stdout)["runs"]
        assert [(r["name"], r["status"]) for r in rows] == [("live", "running")]
    # the process is gone (killed: no end event, nobody holds the lock)
    s = json.loads(_invoke("status", str(live), "--json").stdout)
    assert s["status"] == "interrupted" and s["steps"] == 15


@pytest.mark.parametrize("ending,family", [("nonfinite", "diverged"), ("no-progress", "failed"), ("completed", "completed"),
                                           ("budget-exhausted", "stopped")])
def test_statuses_come_from_the_summary(done: Path, tmp_path: Path, ending: str, family: str) -> None:
    d = tmp_path / "r"
    shutil.copytree(done, d)
    summary = json.loads((d / "summary.json").read_text())
    summary["status"] = ending
    (d / "summary.json").write_text(json.dumps(summary))
    s = json.loads(_invoke("status", str(d), "--json").stdout)
    assert s["status"] == family and s["detail"] == ending


def _hostile(done: Path, root: Path) -> dict[str, Path]:
    dirs = {}
    bad = root / "corrupt"
    shutil.copytree(done, bad)
    lines = (bad / "events.jsonl").read_text().splitlines()
    lines[3] = "this is not json"
    (bad / "events.jsonl").write_text("\n".join(lines) + "\n")
    dirs["corrupt"] = bad
    link = root / "symlinked"
    link.mkdir()
    secret = root / "outside.json"
    secret.write_text(json.dumps({"status": "completed", "steps": 1, "cost_usd": 1.0}))
    os.symlink(secret, link / "summary.json")
    dirs["symlinked"] = link
    fifo = root / "fifo"
    fifo.mkdir()
    os.mkfifo(fifo / "summary.json")
    dirs["fifo"] = fifo
    notjson = root / "notjson"
    notjson.mkdir()
    (notjson / "summary.json").write_bytes(b"\xff\xfe binary")
    dirs["notjson"] = notjson
    return dirs


def test_malformed_run_directories_are_reported_never_a_traceback(done: Path, tmp_path: Path) -> None:
    dirs = _hostile(done, tmp_path)
    res = _invoke("runs", str(tmp_path), "--json")
    assert res.exit_code == 0, res.output
    rows = {r["name"]: r for r in json.loads(res.stdout)["runs"]}
    assert set(dirs) <= set(rows)
    for name in dirs:
        assert rows[name]["status"] == "unreadable" and rows[name]["detail"], rows[name]
    assert "symbolic link" in rows["symlinked"]["detail"] and "regular file" in rows["fifo"]["detail"]
    assert "unreadable" in _invoke("runs", str(tmp_path)).output
    for name, d in dirs.items():
        res = _invoke("status", str(d))
        assert res.exit_code == 2, (name, res.output)
        assert "error:" in res.output and "rerun" in res.output


def test_status_and_runs_refuse_what_is_not_a_run_directory(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "file").write_text("x")
    for args in (("status", str(tmp_path / "empty")), ("status", str(tmp_path / "nope")), ("status", str(tmp_path / "file")),
                 ("runs", str(tmp_path / "nope")), ("runs", str(tmp_path / "file"))):
        res = _invoke(*args)
        assert res.exit_code == 2 and "error:" in res.output, (args, res.output)
    res = _invoke("runs", str(tmp_path / "empty"))
    assert res.exit_code == 0 and "no run directories" in res.output


def test_symlinked_directories_are_not_followed(done: Path, tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    os.symlink(done.parent, root / "elsewhere")
    rows = json.loads(_invoke("runs", str(root), "--json").stdout)["runs"]
    assert rows == []


def test_watch_returns_when_the_run_is_over(done: Path) -> None:
    res = _invoke("status", str(done), "--watch", "--interval", "0.1")
    assert res.exit_code == 0 and "completed" in res.output
    res = _invoke("status", str(done), "--watch", "--json")
    assert res.exit_code == 2 and "--watch" in res.output
    res = _invoke("status", str(done), "--watch", "--interval", "0")
    assert res.exit_code == 2 and "--interval" in res.output
