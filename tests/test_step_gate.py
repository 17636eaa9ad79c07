"""Issue 55 item 3: work between two steps on one member is not a lost member.

A leader-only evaluation (a ``torch.save``, a slow logger) longer than the group's collective timeout
used to make the waiting member's next collective time out: the generation failed, and the dropped
step ran the script's evaluation again.  Now every member waits for the others at the step gate
(:mod:`spotwise.planes.collective.step_gate`) before a step's first collective, while the controller
watches their heartbeats; the collective's timeout only measures a failure inside a step.
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
from _load import bound

from spotwise.events import read_events
from spotwise.planes.collective.heartbeat import BeatReader, WorkBeat, beat_busy, beat_cpu, beat_key
from spotwise.planes.collective.plan import Plan, leader_works_after
from spotwise.planes.collective.step_gate import FAILED, GATE_MARGIN_S, GATE_S, STEP_TIMEOUT_S, StepGate, flag_failed, gate_key

pytestmark = pytest.mark.timeout(300)


class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s


def test_the_last_member_passes_at_once_and_the_others_wait_for_it() -> None:
    store = dist.HashStore()
    a, b = StepGate(2), StepGate(2)
    out: list[str | None] = []
    t = threading.Thread(target=lambda: out.append(a.reach(store, 3)))
    t.start()
    time.sleep(0.3)  # member a waits at the gate: b is still between two steps
    assert t.is_alive() and not out
    assert b.reach(store, 3) is None and b.waited_s == 0.0  # b comes last: no wait
    t.join(bound(10))
    assert out == [None] and a.waited_s >= 0.25
    # the next gate of the generation waits for both again (k * n), and a new generation starts afresh
    assert int(store.add(gate_key(3), 0)) == 2
    t = threading.Thread(target=lambda: out.append(b.reach(store, 3)))
    t.start()
    assert a.reach(store, 3) is None
    t.join(bound(10))
    assert out == [None, None] and a.passed == b.passed == 2


def test_a_failed_generation_ends_the_wait_and_the_bound_ends_a_hung_one() -> None:
    store = dist.HashStore()
    gate = StepGate(2)
    got: list[str | None] = []
    t = threading.Thread(target=lambda: got.append(gate.reach(store, 5)))
    t.start()
    time.sleep(0.2)
    flag_failed(store, 5, "member 1: lost")  # the coordinator dropped the missing member
    t.join(bound(10))
    assert got == ["failed"] and store.get("fail/5") == b"member 1: lost"
    assert int(store.add(gate_key(5), 0)) >= FAILED
    assert StepGate(2).reach(store, 5) == "failed"  # every later read says so, even with all members there
    clock = FakeClock()
    hung = StepGate(3, bound_s=120.0, clock=clock, sleep=clock.sleep)
    assert hung.reach(dist.HashStore(), 0) == "timeout" and 120.0 < hung.waited_s < 121.0
    assert hung.passed == 0
    with pytest.raises(ValueError):
        StepGate(0)
    with pytest.raises(ValueError):
        StepGate(2, bound_s=float("nan"))


def test_the_gate_waits_longer_than_a_script_may_work_between_two_steps() -> None:
    assert STEP_TIMEOUT_S == 900.0 and GATE_S == STEP_TIMEOUT_S + GATE_MARGIN_S > STEP_TIMEOUT_S


def test_an_elastic_group_waits_at_its_gate_and_counts_it_as_the_steps_flag_read() -> None:
    from spotwise.planes.collective.group import ElasticGroup, GroupCoordinator, GroupFailed

    coord = GroupCoordinator(timeout_s=30.0)
    groups = [ElasticGroup(coord.address, m, timeout_s=2.0) for m in (0, 1)]
    coord.announce(0, [0, 1])
    ts = [threading.Thread(target=g.form, args=(0,)) for g in groups]
    [t.start() for t in ts]
    [t.join(bound(30)) for t in ts]
    waited: list[float] = []
    late = threading.Thread(target=lambda: (time.sleep(3.0), waited.append(groups[1].reach())))
    late.start()
    # member 0 waits 3 s for member 1 -- longer than the group's 2 s collective timeout -- and the
    # all-reduce that follows is no timed-out collective
    assert groups[0].reach() >= 2.5
    late.join(bound(30))
    x = [torch.ones(1) for _ in groups]
    ts = [threading.Thread(target=g.allreduce, args=(t,)) for g, t in zip(groups, x)]
    [t.start() for t in ts]
    [t.join(bound(30)) for t in ts]
    assert [float(t[0]) for t in x] == [2.0, 2.0]
    coord.fail(0, "a revocation notice")
    for g in groups:
        with pytest.raises(GroupFailed, match="a revocation notice"):
            g.reach()
        g.close()


def test_a_gate_passed_beside_the_step_holds_its_first_collective_until_every_member_is_there() -> None:
    """A user loop's step: the member thread opens the gate, hands the step over and waits at the
    gate while the script computes; the script's first collective waits for the gate, however long a
    peer's between-step work takes; a gate that fails fails every collective of the step."""
    from spotwise.planes.collective.group import ElasticGroup, GroupCoordinator, GroupFailed

    coord = GroupCoordinator(timeout_s=30.0)
    groups = [ElasticGroup(coord.address, m, timeout_s=2.0) for m in (0, 1)]
    coord.announce(0, [0, 1])
    ts = [threading.Thread(target=g.form, args=(0,)) for g in groups]
    [t.start() for t in ts]
    [t.join(bound(30)) for t in ts]
    g0, g1 = groups
    x0, x1 = torch.ones(1), torch.full((1,), 2.0)
    g0.open_gate()
    script = threading.Thread(target=g0.allreduce, args=(x0,))  # the script's first collective
    script.start()
    member = threading.Thread(target=g0.pass_gate)
    member.start()
    time.sleep(3.0)  # member 1 evaluates: longer than the group's 2 s collective timeout
    assert script.is_alive() and float(x0[0]) == 1.0, "the collective waits for the gate"
    g1.reach()
    g1.allreduce(x1)
    script.join(bound(30))
    member.join(bound(30))
    g0.close_gate()
    assert float(x0[0]) == float(x1[0]) == 3.0
    # the generation fails while member 0 waits at its gate: every collective of the step says so
    g0.open_gate()
    member = threading.Thread(target=g0.pass_gate)
    member.start()
    coord.fail(0, "member 1: lost")
    member.join(bound(30))
    for _ in range(2):
        with pytest.raises(GroupFailed, match="member 1: lost"):
            g0.allreduce(x0)
    g0.close_gate()
    for g in groups:
        g.close()


def test_the_leader_works_after_the_steps_the_plan_names() -> None:
    plan = Plan(gen=0, members=(0, 1), source=-1, eval_every=5, checkpoint_every=7)
    assert [s for s in range(16) if leader_works_after(plan, s)] == [5, 7, 10, 14, 15]
    assert not any(leader_works_after(Plan(gen=0, members=(0,), source=-1), s) for s in range(50))


def test_a_member_running_its_users_code_beats_as_at_work_whatever_its_cpu() -> None:
    assert beat_busy("3 1.5 w") and beat_cpu("3 1.5 w") == 1.5
    assert beat_busy("3 - w") and beat_cpu("3 - w") is None
    assert not beat_busy("3 1.5") and not beat_busy("w") and not beat_busy("1 2 3") and beat_cpu("1 2 3") is None
    store = dist.HashStore()
    running = threading.Event()
    beat = WorkBeat(lambda: store, member=2, every_s=0.05, busy=running.is_set)
    beat.start()
    reader = BeatReader()
    try:
        deadline = time.monotonic() + bound(10)
        while not store.check([beat_key(2)]) and time.monotonic() < deadline:
            time.sleep(0.01)
        reader.working(store, [2])
        time.sleep(0.2)
        assert not reader.working(store, [2])  # this thread waits: no CPU, no user code
        running.set()  # the script evaluates between two steps (sleeping, waiting on a disk)
        time.sleep(0.2)
        assert store.get(beat_key(2)).decode().endswith(" w")
        assert reader.working(store, [2])
    finally:
        beat.stop()
    reader.working(store, [2])  # the last beat
    # a busy beat that no longer changes (a frozen process) is no work: liveness finds it lost
    assert not reader.working(store, [2])


# ---------------------------------------------------------------------------------- end to end
def test_a_leader_only_evaluation_longer_than_the_group_timeout_loses_no_member(ray_session: Any,
                                                                                 tmp_path: Path) -> None:
    """The own loop's leader evaluates for longer than the group's collective timeout every 4 steps
    (nanoGPT's pattern) on a market without revocations: no revocation, no regroup, both members in
    every step, the target's samples exactly, and the evaluation ran once.  Six steps: one evaluation
    (after step 4) with steps after it -- each evaluation is seconds of waiting, one shows the path."""
    from test_own_loop import run, script_spec

    timeout = bound(2.0)
    eval_s = 3 * timeout + 2
    log = tmp_path / "evals.txt"
    spec = script_spec(target__samples=96, cluster__group_timeout_s=timeout,
                       workload__args=["--leader-eval-every", "4", "--leader-eval-s", str(eval_s), "--eval-log", str(log)])
    coord, summary = run(spec, tmp_path / "run")
    events = tmp_path / "run" / "events.jsonl"
    assert summary.status == "completed", summary
    assert not list(read_events(events, kinds=["revoke"]))
    regroups = list(read_events(events, kinds=["regroup"]))
    assert [r["reason"] for r in regroups] == ["start"], [r["reason"] for r in regroups]
    steps = list(read_events(events, kinds=["step"]))
    assert [e["step"] for e in steps] == list(range(1, 7))
    assert all(e["active"] == 2 and e["contributions"] == 2 for e in steps)
    assert coord.counters.samples == 96
    assert log.read_text().split() == ["4"], "the evaluation ran once (no dropped step ran it again)"
    assert summary.wall_s >= eval_s  # the evaluation was waited for


def test_a_built_in_workloads_long_evaluation_at_the_leader_loses_no_member(ray_session: Any, tmp_path: Path) -> None:
    """A built-in workload's leader works between the steps its plan names (an evaluation): held up
    there far past the group's timeout (the fault hook's ``sleep``, between two steps), its peers wait
    at the gate -- no regroup, no revocation."""
    from test_collective_plane import make_spec, run

    timeout = bound(2.0)
    spec = make_spec(cluster__group_timeout_s=timeout, cluster__workers=2,  # a leader and a peer waiting for it
                     target__iterations=8, workload__eval_every=4)
    from spotwise.planes.collective.data_plane import CollectivePlane

    plane = CollectivePlane(spec, faults={0: {"step": 4, "action": "sleep", "seconds": 3 * timeout + 2}})
    coord, summary = run(spec, tmp_path / "run", plane=plane)
    events = tmp_path / "run" / "events.jsonl"
    assert summary.status == "completed" and summary.steps == 8
    assert not list(read_events(events, kinds=["revoke"]))
    assert [r["reason"] for r in read_events(events, kinds=["regroup"])] == ["start"]
    assert all(e["contributions"] == 2 for e in read_events(events, kinds=["step"]))
    assert summary.wall_s >= 3 * timeout + 2
