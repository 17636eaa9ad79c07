"""A resumed serverless run is the uninterrupted run (issue 54: "a resumed run equals the uninterrupted one
on every plane"), as ``test_resume_same_run.py`` proves for the VM planes.

Real Lithops localhost functions and a real ``redis-server``.  A BSP run (its steps are exactly synchronous
SGD, whatever the functions' timing) is run once uninterrupted; its run directory is copied right after an
early checkpoint (what ``kill -9`` of the supervisor leaves), the copy is resumed and that session stopped by a
real SIGTERM after a later checkpoint (as ``test_resume_same_run.py`` does: one session fewer than a run of its
own to stop), and resumed again.  Each session must be the uninterrupted run: every step (members, samples, learning
rate, loss, entries pushed) and every summary field but those measured on the wall clock (the functions' time
and so the bill; :data:`MAY_DIFFER`).  Before issue 54 the plane's counters (update bytes, entries merged,
invocations) and the function seconds restarted at 0 with every session, a resume counted its function slots
as new joins, and the carried bill lost its ``by_instance`` / ``by_market`` maps and the money of the
functions still running at the checkpoint.  A resume with nothing left to train invokes no function.
ISP's residuals live in the functions and are not checkpointed (the ``store`` event says so), and SSP's
steps depend on the functions' timing: only BSP is the same run by construction.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
from pathlib import Path
from typing import Any

import pytest
import torch
from _same_run import flat, summary_differences

from spotwise.config import spec_from_dict
from spotwise.events import read_events
from spotwise.planes.serverless.store import RedisServer

pytestmark = [pytest.mark.skipif(shutil.which("redis-server") is None,
                                 reason="redis-server is not installed (README command 2 installs it with apt)"),
              pytest.mark.timeout(600)]

PMF = {"name": "pmf", "family": "pmf", "batch_size": 256, "lr": 5.0, "eval_every": 1000,
       "params": {"n_users": 300, "n_items": 400, "n_ratings": 20000, "rank": 8}}
SPEC = {"name": "sl-same-run", "seed": 3, "workload": PMF, "target": {"iterations": 9},
        "cluster": {"kind": "serverless", "workers": 2, "sync": "bsp"},
        "outputs": {"checkpoint_every": 3, "plots": False}}
#: summary fields measured on the wall clock (the serverless plane has no virtual time): the time, the
#: functions' seconds and so the bill; a session's private Redis; the invocations (a resume invokes every
#: member again: checked on its own below) and the checkpoints (a SIGTERM's own)
MAY_DIFFER = ("wall_s", "virtual_s", "cost_usd", "cost_breakdown.", "extra.function_seconds", "extra.redis",
              "extra.invocations", "extra.checkpoints")


@pytest.fixture(scope="module")
def redis_server():
    with RedisServer(tcp=True) as srv:  # an operator's Redis (--redis-url): one for the module's runs
        yield srv


def _controller(out: Path, redis_server: RedisServer, resume: bool = False) -> Any:
    from spotwise.planes.serverless.runner import serverless_controller

    return serverless_controller(spec_from_dict(SPEC), out, redis_url=redis_server.url, heartbeat_timeout_s=6.0,
                                 resume=resume)


def _steps(out: Path) -> list[tuple[Any, ...]]:
    """Every committed step: members, samples, learning rate, loss, entries pushed and computed, epoch."""
    return [(e["step"], e["active"], e["contributions"], e["lr"], e["loss"], e["pushed"], e["computed"], e["epoch"])
            for e in read_events(out / "events.jsonl") if e["kind"] == "step"]


def _joins(out: Path) -> list[tuple[str, Any]]:
    return [(e["kind"], e["worker"]) for e in read_events(out / "events.jsonl")
            if e["kind"] in ("join", "revoke") and not e.get("resumed")]


def _invoked(out: Path) -> int:
    return sum(e["kind"] == "function" and e["status"] == "invoked" for e in read_events(out / "events.jsonl"))


def _summary(out: Path) -> dict[str, Any]:
    return json.loads((out / "summary.json").read_text())


def _carried(out: Path, step: int) -> dict[str, Any]:
    return torch.load(out / "checkpoints" / f"step-{step:08d}.pt", weights_only=True)


def _assert_bill_adds_up(s: dict[str, Any]) -> None:
    """One bill, whichever sessions made it: the categories add up to the total, the Redis node is the
    service category, on demand (the maps carried over sessions as the total is)."""
    bd = s["cost_breakdown"]
    assert sum(bd["by_category"].values()) == pytest.approx(s["cost_usd"], rel=1e-9)
    assert bd["by_instance"]["redis"] == pytest.approx(bd["by_category"]["service"], rel=1e-9)
    assert bd["by_market"]["on_demand"] == pytest.approx(bd["by_category"]["service"], rel=1e-9)
    assert bd["by_category"]["function"] > 0


def test_a_resumed_serverless_run_is_the_uninterrupted_run(redis_server: RedisServer, tmp_path: Path) -> None:
    from spotwise.signals import Terminated, sigterm_as_interrupt

    full = tmp_path / "full"
    job = _controller(full, redis_server)
    killed = tmp_path / "kill9"

    def kill9_after(path: Path) -> None:  # what kill -9 right after the step-3 checkpoint leaves on disk
        if job.step == 3:
            shutil.copytree(full, killed, ignore=shutil.ignore_patterns(".spotwise.lock"))

    job.checkpointer.listeners.append(kill9_after)
    assert job.run().status == "completed"
    base = _summary(full)
    workers = SPEC["cluster"]["workers"]
    assert base["extra"]["invocations"] == workers and base["joins"] == workers and base["extra"]["bytes_in"] > 0
    _assert_bill_adds_up(base)

    # the kill -9 copy resumed, that session stopped by a real SIGTERM after a later checkpoint, then resumed
    # again: each session continues the uninterrupted run
    ckpt = _carried(killed, 3)
    term = _controller(killed, redis_server, resume=True)
    sent: list[int] = []

    def sigterm_after(path: Path) -> None:
        if term.step >= 6 and not sent:
            sent.append(term.step)
            os.kill(os.getpid(), signal.SIGTERM)

    term.checkpointer.listeners.append(sigterm_after)
    with pytest.raises(Terminated), sigterm_as_interrupt():
        term.run()
    assert sent and not (killed / "summary.json").exists()
    cut = _steps(killed)
    assert len(cut) >= sent[0] > 3 and cut == _steps(full)[:len(cut)], sent  # up to the stop: the same steps
    stopped = _carried(killed, sent[0])
    # the resumed session invoked every member once more (a new incarnation each), on top of what the checkpoint counted
    assert stopped["plane_carried"]["counters"]["invocations"] == ckpt["plane_carried"]["counters"]["invocations"] + workers

    again = _controller(killed, redis_server, resume=True).run()
    assert again.status == "completed" and again.steps == SPEC["target"]["iterations"]
    assert _steps(killed) == _steps(full)
    assert _joins(killed) == _joins(full)  # a resume continues its function slots: no new join
    assert summary_differences(killed, full, MAY_DIFFER) == {}
    s = _summary(killed)
    assert s["extra"]["invocations"] == stopped["plane_carried"]["counters"]["invocations"] + workers
    assert s["extra"]["invocations"] == base["extra"]["invocations"] + 2 * workers  # two resumes
    for ck in (ckpt, stopped):
        # the money and function seconds of each interrupted session up to its checkpoint are in the bill
        carried = ck["ledger"]["settled"]
        assert carried["by_category"]["function"] > 0 and carried["by_instance"]["redis"] > 0
        assert s["extra"]["function_seconds"] > ck["ledger"]["function_seconds"] > 0
        for key in ("by_category", "by_instance", "by_market"):
            for name, usd in carried[key].items():
                assert s["cost_breakdown"][key][name] > usd, (key, name)
    # the session stopped by SIGTERM billed on top of what the kill -9 copy carried
    assert stopped["ledger"]["function_seconds"] > ckpt["ledger"]["function_seconds"]
    _assert_bill_adds_up(s)

    # nothing left to train: no function invoked, the summary is the finished run's
    finished = tmp_path / "finished"
    finished.mkdir()
    shutil.copy(full / "summary.json", finished / "summary.json")
    before = _steps(full), _invoked(full)
    again = _controller(full, redis_server, resume=True).run()
    assert again.steps == SPEC["target"]["iterations"] and (_steps(full), _invoked(full)) == before
    assert summary_differences(full, finished, MAY_DIFFER) == {}
    assert flat(_summary(full))["extra.invocations"] == base["extra"]["invocations"]
