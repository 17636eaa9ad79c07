"""The collective data plane end to end (issue 10): members on Ray all-reduce among themselves.

Every run here is real: member processes are Ray actors holding replicas, the all-reduce is
gloo over loopback, revocations kill the member processes (at a random point of a step), a
frozen member is SIGSTOP'd.  Asserted: equivalence with single-process SGD, that every strategy
(S-SGD, S-MA, AD-PSGD) learns through random revocations, 75 % at once and all at once, that no
committed step is lost
(a loss of *every* member rolls back at most ``replica_every`` steps, logged), the sampler
guarantee over the committed history, no hang with a frozen peer, an atomic strategy switch, and
an exact resume.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest
import yaml
from _specs import single_process_sgd, spec_with

from spotwise.events import read_events
from spotwise.market.world import build_market
from spotwise.policies.base import Decision, Observation, Policy, SwitchSync
from spotwise.control.checkpoint import load_latest_checkpoint
from spotwise.control.controller import JobController
from spotwise.assemble import build_controller
from spotwise.planes.collective.data_plane import CollectivePlane
from spotwise.capacity.faults import ScriptedRevocation, outage, random_outages
from _load import bound

pytestmark = pytest.mark.timeout(240)

BASE: dict[str, Any] = {
    "name": "collective",
    "seed": 5,
    "workload": {"name": "mlp-digits", "batch_size": 8, "lr": 0.1, "eval_every": 1000},
    "target": {"iterations": 16},
    "cluster": {"instance_type": "c5.xlarge", "workers": 3, "coordinator_instance": "c5.large",
                "data_plane": "collective", "standby": 0, "replica_every": 5, "group_timeout_s": bound(2),
                "replica_budget": None},  # a fixed schedule: a total loss rolls back <= replica_every steps
    "market": {"synthetic": {"kind": "constant", "price": 0.07}},
    "outputs": {"checkpoint_every": 0, "plots": False},
}


def make_spec(**over: Any):
    return spec_with(BASE, **over)


def run(spec, out: Path, revocation=None, faults: dict[int, dict[str, Any]] | None = None,
        **kw: Any) -> tuple[JobController, Any]:
    market = build_market(spec, horizon_s=7 * 24 * 3600.0)
    if revocation is not None:
        market = dataclasses.replace(market, revocation=revocation)
    if faults is not None:
        kw["plane"] = CollectivePlane(spec, faults=faults)
    coord = build_controller(spec, out, market=market, **kw)
    assert isinstance(coord.plane, CollectivePlane)  # the spec's cluster.data_plane
    return coord, coord.run()


def committed_history(out: Path) -> list[dict[str, Any]]:
    """The step events that stand: a rollback removes the steps after its target."""
    steps: dict[int, dict[str, Any]] = {}
    for e in read_events(out / "events.jsonl"):
        if e["kind"] == "rollback":
            for s in [s for s in steps if s > e["to_step"]]:
                del steps[s]
        elif e["kind"] == "step":
            assert e["step"] not in steps, f"step {e['step']} committed twice"
            steps[e["step"]] = e
    return [steps[s] for s in sorted(steps)]


def assert_sampler_guarantee(history: list[dict[str, Any]], n_train: int) -> None:
    """Every committed step took exactly the samples its data cursor moved over, so every epoch's
    samples are committed exactly once, in order.

    Positions are absolute stream offsets (``epoch * n_train + pos``; a step never crosses an epoch's
    end: the last one of an epoch is short).  A step logged ``unreported`` (its record died with a
    leader) carries only a share of its block's samples: a run of such steps and the next reported
    step are checked together.
    """
    prev = 0
    block = 0
    for e in history:
        block += e["samples"]
        if e.get("unreported"):
            continue
        at = e["epoch"] * n_train + e["pos"]
        assert block == at - prev, f"step {e['step']}: {block} samples committed, the cursor moved {at - prev}"
        if e["pos"] != 0:  # within an epoch: the step did not cross its end
            assert prev >= e["epoch"] * n_train, f"step {e['step']} crossed into epoch {e['epoch']}"
        prev, block = at, 0
    assert block == 0, "the history ends with unreported steps"
    assert prev >= n_train, "the run should cross at least one epoch"


@dataclasses.dataclass(frozen=True)
class SwitchAt(Policy):
    name: ClassVar[str] = "switch-at"
    at: int = 6
    to: str = "sma"

    def decide(self, obs: Observation) -> list[Decision]:
        return [SwitchSync(reason=f"test: switch at step {self.at}", sync=self.to)] if obs.step >= self.at and obs.sync != self.to else []


@pytest.mark.extended  # S-SGD equals one process and resumes exactly (AdamW, schedule, clipping; the same step log and
# samples): test_collective_recipe.py::test_ssgd_with_adamw_schedule_and_clipping_equals_one_process_and_resumes_exactly
def test_collective_ssgd_equals_single_process_sgd_and_resumes_exactly(ray_session: Any, tmp_path: Path) -> None:
    """S-SGD over 2 members is SGD on the union of their batches; a stopped run resumes where it was."""
    spec = make_spec(outputs__checkpoint_every=4, cluster__workers=2)  # (3 members: the other runs here)
    out = tmp_path / "run"
    first, s1 = run(spec, out, stop_after_steps=9)
    assert s1.status == "stopped" and s1.steps >= 9
    assert np.max(np.abs(first.params - single_process_sgd(spec, s1.steps, 2 * 8))) < 1e-5
    assert s1.extra["data_plane"] == "collective" and s1.extra["samples"] == s1.steps * 2 * 8
    state, _ = load_latest_checkpoint(out)
    assert int(state["step"]) == s1.steps and np.array_equal(state["params"].numpy(), first.params)
    again, s2 = run(spec, out, resume=True)
    assert s2.status == "completed" and s2.steps == 16 and s2.extra["samples"] == 16 * 2 * 8
    assert np.max(np.abs(again.params - single_process_sgd(spec, 16, 2 * 8))) < 1e-5
    steps = [e["step"] for e in read_events(out / "events.jsonl", kinds=["step"])]
    assert steps == list(range(1, 17)), "the resumed run continues the same log"


@dataclasses.dataclass(frozen=True)
class SwitchPlan(Policy):
    """From each listed step on, the listed strategy (one policy: two SwitchAt would undo each other)."""
    name: ClassVar[str] = "switch-plan"
    plan: tuple[tuple[int, str], ...] = ()

    def decide(self, obs: Observation) -> list[Decision]:
        want = [to for at, to in self.plan if obs.step >= at]
        return [SwitchSync(reason=f"test: {want[-1]} from step {obs.step}", sync=want[-1])] if want and obs.sync != want[-1] else []


#: one run takes every strategy through the membership paths: S-SGD through two members lost at once,
#: S-MA through the whole cluster, AD-PSGD through one member lost (the three strategies share the
#: regroup/rollback code; each through the whole pattern on its own: the extended tier)
SWITCHED = "ssgd>sma>adpsgd"


@pytest.mark.slow
@pytest.mark.parametrize("sync", [SWITCHED] + [pytest.param(s, marks=pytest.mark.extended)  # covered by SWITCHED
                                               for s in ("ssgd", "sma", "adpsgd")])
def test_every_strategy_learns_through_revocations_many_at_once_and_all_at_once(ray_session: Any, tmp_path: Path,
                                                                                sync: str) -> None:
    # 3 members (2 at once, then all 3, then one): the paths of 4 with fewer process starts
    spec = make_spec(cluster__workers=3, cluster__sync=sync.split(">")[0], cluster__local_steps=2, cluster__standby=1,
                     target__iterations=60, workload__eval_every=20, workload__batch_size=12)  # 3 x 12 a step: past one epoch
    if sync == SWITCHED:
        rev = ScriptedRevocation((outage(4, 12, [0, 1]), outage(22, 30, [0, 1, 2]), outage(60, 66, [2])))
    else:
        rev = ScriptedRevocation((outage(4, 12, [0, 1]),               # many at once, survivors go on
                                  outage(20, 30, [0, 1, 2]),           # the whole cluster
                                  ) + random_outages(3, horizon=60, count=1, seed=7, fraction=0.34, duration=(1, 6)))
    market = build_market(spec, horizon_s=7 * 24 * 3600.0)
    coord = build_controller(spec, tmp_path / "run", market=dataclasses.replace(market, revocation=rev))
    if sync == SWITCHED:
        coord.policies.append(SwitchPlan(plan=((12, "sma"), (24, "adpsgd"))))
    summary = coord.run()
    out = tmp_path / "run"
    assert summary.status == "completed" and summary.steps == 60
    assert summary.revocations >= 2 + 3 + 1
    history = committed_history(out)
    assert [e["step"] for e in history] == list(range(1, 61)), "every step committed exactly once"
    assert_sampler_guarantee(history, coord.state.n_train)
    assert summary.extra["samples"] == sum(e["samples"] for e in history)
    # no committed step is lost to partial revocations; the loss of every member rolls back at
    # most replica_every steps, and says so
    rollbacks = list(read_events(out / "events.jsonl", kinds=["rollback"]))
    assert len(rollbacks) <= 1 and all(r["lost_steps"] <= 5 for r in rollbacks)
    assert summary.extra["rolled_back_steps"] == sum(r["lost_steps"] for r in rollbacks)
    regroups = list(read_events(out / "events.jsonl", kinds=["regroup"]))
    assert any(r["survivors"] and len(r["members"]) < 3 for r in regroups), "survivors regrouped in place"
    evals = [e["metric"] for e in read_events(out / "events.jsonl", kinds=["eval"])]
    assert summary.final_metric is not None and summary.final_metric > 0.6 and summary.final_loss < 1.5, evals
    assert summary.extra["recovery_ms"]["count"] >= 1
    if sync == SWITCHED:  # each strategy committed steps short of members, and all three learned in one run
        short = {e["sync"] for e in history if e["active"] < 3}
        assert {e["sync"] for e in history} == {"ssgd", "sma", "adpsgd"} and {"ssgd", "adpsgd"} <= short, short


def test_a_frozen_member_never_hangs_the_job(ray_session: Any, tmp_path: Path) -> None:
    """A SIGSTOP'd member: its peers' all-reduce fails after group_timeout_s, it is declared lost and killed."""
    # the job's length in samples (issue 41 item 4): 20 steps of 2 x 8 at full strength; with one
    # member lost, the run takes more steps and still commits every sample
    spec = make_spec(target={"samples": 320}, cluster__workers=2)
    coord, summary = run(spec, tmp_path / "run", faults={1: {"step": 6, "action": "stop"}})
    assert summary.status == "completed" and summary.steps > 20
    assert 320 <= coord.counters.samples < 320 + 16
    revokes = list(read_events(tmp_path / "run" / "events.jsonl", kinds=["revoke"]))
    assert [(r["worker"], r["reason"]) for r in revokes] == [(1, "node-lost")]
    history = committed_history(tmp_path / "run")
    assert [e["step"] for e in history] == list(range(1, summary.steps + 1))
    assert sum(e["samples"] for e in history) == coord.counters.samples
    # no hang: the frozen peer costs a few group_timeout_s; bound 10x that plus 10x this run's own start (to
    # its first step: load slows it as it slows the rest), not a fixed number of seconds
    first = [e["wall"] for e in read_events(tmp_path / "run" / "events.jsonl", kinds=["step"])][0]
    assert summary.wall_s < 10 * (first + spec.cluster.group_timeout_s), (summary.wall_s, first)


def test_a_slow_member_whose_heartbeat_goes_on_is_never_dropped(ray_session: Any, tmp_path: Path) -> None:
    """Issue 54 item 8: a member held up far longer than the group's timeout -- a step that sleeps
    (no CPU: a starved core, an evaluation between steps, as its peers see it: member 1) or a SIGSTOP'd
    process continued before the heartbeat timeout (member 2), both at step 4 of one run -- makes its
    peers' collective time out, and the regroup waits for it: the run ends with every member, no
    revocation and no rollback."""
    timeout = bound(1)  # the group's timeout: the peers' all-reduce gives up on the held member this soon
    held = 4 * timeout + 4  # without the heartbeat the regroup gave up on it after timeout + 2 s
    spec = make_spec(cluster__group_timeout_s=timeout, target__iterations=8)
    plane = CollectivePlane(spec, faults={w: {"step": 4, "action": hold, "seconds": held}
                                          for w, hold in ((1, "sleep"), (2, "pause"))},
                            heartbeat_s=held + bound(10))  # (the paused process beats again before this)
    coord, summary = run(spec, tmp_path / "run", plane=plane)
    out = tmp_path / "run"
    assert summary.status == "completed" and summary.steps == 8
    assert not list(read_events(out / "events.jsonl", kinds=["revoke"]))
    assert not list(read_events(out / "events.jsonl", kinds=["rollback"]))
    history = committed_history(out)
    assert [e["step"] for e in history] == list(range(1, 9)) and all(e["contributions"] == 3 for e in history)
    regroups = list(read_events(out / "events.jsonl", kinds=["regroup"]))
    assert len(regroups) >= 2 and all(r["members"] == [0, 1, 2] for r in regroups), regroups
    assert summary.wall_s >= held  # it was waited for, not dropped


def test_a_crashed_member_is_replaced_and_a_strategy_switch_is_atomic(ray_session: Any, tmp_path: Path) -> None:
    spec = make_spec(target__iterations=14, cluster__standby=1)
    market = build_market(spec, horizon_s=7 * 24 * 3600.0)
    coord = build_controller(spec, tmp_path / "run", market=market, plane=CollectivePlane(spec, faults={2: {"step": 3, "action": "exit"}}))
    coord.policies.append(SwitchAt(at=6, to="adpsgd"))
    coord.policies.append(SwitchAt(at=6, to="async"))  # a PS mode: refused, not acted on
    summary = coord.run()
    out = tmp_path / "run"
    assert summary.status == "completed" and summary.steps == 14
    history = committed_history(out)
    assert [e["step"] for e in history] == list(range(1, 15))
    assert all(e["samples"] > 0 and not e.get("unreported") for e in history), "every step's record was logged"
    syncs = [e["sync"] for e in history]
    k = syncs.index("adpsgd")
    assert set(syncs[:k]) == {"ssgd"} and set(syncs[k:]) == {"adpsgd"}, "every member switched at the same step"
    decisions = list(read_events(out / "events.jsonl", kinds=["decision"]))
    assert any(d["acted"] and "adpsgd" in d["decision"] for d in decisions)
    assert any(not d["acted"] and "not a strategy of the collective" in d.get("not_acted", "") for d in decisions)
    assert any(r["reason"] == "node-lost" for r in read_events(out / "events.jsonl", kinds=["revoke"]))
    assert summary.extra["samples"] == sum(e["samples"] for e in history)


def test_cli_runs_a_collective_spec(ray_session: Any, tmp_path: Path, cli: Any) -> None:
    """(A collective spec on a real Ray cluster: tests/test_cluster_collective.py.)"""
    d = json.loads(json.dumps(BASE))
    d["target"]["iterations"] = 6
    d["cluster"]["workers"] = 2
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(d))
    code, out, err = cli("run", str(path), "--out", str(tmp_path / "run"), "--json")
    assert code == 0, err
    summary = json.loads(out)
    assert summary["steps"] == 6 and summary["extra"]["data_plane"] == "collective"
    # issue 40 item 5: where the steps' time went, by phase, from the members' own clocks
    phases = summary["extra"]["step_phases"]
    # the generation's first step (its wrapper, probe and allocations) is left out: 5 of 6 steps timed
    assert phases["steps"] == 5 and phases["ms_per_step"]["compute"] > 0 and phases["ms_per_step"]["data"] > 0
    assert {"reduce", "sync", "optimizer"} <= set(phases["ms_per_step"]) and phases["samples_per_s"] > 0
    assert sum(phases["share"].values()) == pytest.approx(1.0, abs=1e-3)
    steps = list(read_events(tmp_path / "run" / "events.jsonl", kinds=["step"]))
    assert all(set(e["phases"]) <= {"data", "compute", "reduce", "sync", "optimizer", "state", "wait", "gpu_busy_share"}
               for e in steps)  # the busy share only on a GPU with NVML
    from spotwise.reports.run.data import load_run
    from spotwise.reports.run.report import report_json, summary_rows

    run = load_run(tmp_path / "run")  # the report reads the same figures from the step events
    assert report_json(run)["step_phases"] == phases
    assert any(label == "step time" and "compute" in value for label, value in summary_rows(run))


# issue 54 (the suite's time): kill -9 of a collective run's controller and its resume from the newest
# checkpoint run by default in test_own_loop_kill.py (a script job: the same controller, plane and
# checkpoints) and, on the PS plane, test_runtime.py::test_coordinator_kill_9_and_resume
@pytest.mark.extended
@pytest.mark.slow
def test_a_killed_coordinator_resumes_from_its_newest_checkpoint(ray_session: Any, tmp_path: Path, cli: Any) -> None:
    """kill -9 of the controller (its members die with it): `run --resume` continues from the newest
    checkpoint, losing at most the steps since it, and the log's step counter goes back only there.
    The killed run is a `spotwise run` process of its own; the resume runs in-process on the session's
    Ray (the same command: a second CLI process would only start a second Ray)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    d = json.loads(json.dumps(BASE))
    d["target"]["iterations"] = 100
    d["cluster"]["workers"] = 2  # what is killed is the controller: two members show it
    d["outputs"] = {"checkpoint_every": 10, "plots": False}
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(d))
    out = tmp_path / "run"
    exe = str(Path(sys.executable).with_name("spotwise"))
    env = {**os.environ, "RAY_AUTH_MODE": "disabled"}
    err = tmp_path / "run.err"  # a file, not a pipe nobody reads during the wait (a full pipe blocks the run)
    proc = subprocess.Popen([exe, "run", str(path), "--out", str(out), "--json"], stdout=subprocess.DEVNULL,
                            stderr=open(err, "w"), text=True, env=env)
    killed_at = None
    deadline = time.monotonic() + bound(150)
    while time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.1)
        ev = out / "events.jsonl"
        if ev.exists():
            lines = [json.loads(x) for x in ev.read_text().splitlines() if '"kind":"checkpoint"' in x and x.endswith("}")]
            if len(lines) >= 3:
                proc.send_signal(signal.SIGKILL)
                killed_at = time.monotonic()
                break
    proc.wait(timeout=bound(30))
    assert killed_at is not None, f"the run ended before it could be killed: {err.read_text()[-4000:]}"
    code, stdout, stderr = cli("run", "--resume", str(out), "--json")
    assert code == 0, stderr
    summary = json.loads(stdout)
    assert summary["steps"] == 100 and summary["status"] == "completed"
    events = list(read_events(out / "events.jsonl"))
    (restore,) = [e for e in events if e["kind"] == "restore"]
    i = events.index(restore)
    before = [e["step"] for e in events[:i] if e["kind"] == "step"]
    after = [e["step"] for e in events[i:] if e["kind"] == "step"]
    ckpts = [e["step"] for e in events[:i] if e["kind"] == "checkpoint"]
    assert restore["step"] == max(ckpts) and before == list(range(1, len(before) + 1))
    assert after == list(range(restore["step"] + 1, 101))
    assert len(before) - restore["step"] < 10 + 50, "at most the steps since the last checkpoint (and a flush) are lost"
    kept = [e["samples"] for e in events[:i] if e["kind"] == "step" and e["step"] <= restore["step"]]
    redone = [e["samples"] for e in events[i:] if e["kind"] == "step"]
    assert summary["extra"]["samples"] == sum(kept) + sum(redone)
