"""Slots that come back at one instant start their workers together (their start-ups overlap).

Before, each joiner's actor was started only after the one before it was ready, so three nodes
back at once cost three cold starts in a row (~3 s each on a laptop; measured in
test_collective_recipe's rough run: joins at 16.7, 19.9 and 24.0 s of wall time for one instant).
Asserted as behaviour, not speed: the controller tells the compute how many joiners follow before
it acquires the first, so a compute that starts processes can start them all at once.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from _load import bound
from _specs import spec_with

from spotwise.assemble import build_controller
from spotwise.capacity.faults import ScriptedRevocation, outage
from spotwise.market.world import build_market
from spotwise.planes.ps.compute import LocalCompute
from spotwise.planes.ps.worker import worker_args_for

BASE: dict[str, Any] = {
    "name": "joins", "seed": 3,
    "workload": {"name": "mlp-digits", "batch_size": 8, "lr": 0.1, "eval_every": 1000},
    "target": {"iterations": 30},
    "cluster": {"instance_type": "c5.xlarge", "workers": 4, "coordinator_instance": "c5.large"},
    "market": {"synthetic": {"kind": "constant", "price": 0.07}},
    "outputs": {"checkpoint_every": 0, "plots": False},
}


class Recording(LocalCompute):
    def __init__(self, *a: Any) -> None:
        super().__init__(*a)
        self.calls: list[tuple[str, int]] = []

    def expect(self, n: int) -> None:
        self.calls.append(("expect", n))

    def acquire(self) -> Any:
        self.calls.append(("acquire", 1))
        return super().acquire()


def test_joiners_of_one_instant_are_announced_before_the_first_starts(tmp_path: Path) -> None:
    """(Both planes take joiners through JobController.handle_market; the PS plane runs here without Ray.)"""
    spec = spec_with(BASE)
    market = dataclasses.replace(build_market(spec, horizon_s=7 * 24 * 3600.0),
                                 revocation=ScriptedRevocation((outage(3, 8, [0, 1, 2]), outage(12, 15, [3]))))
    compute = Recording(worker_args_for(spec))
    job = build_controller(spec, tmp_path / "run", market=market, compute=compute)
    assert job.run().steps == 30
    calls = compute.calls
    i = calls.index(("expect", 3))  # the first joiner of the instant announces all three before it starts
    assert calls[i:i + 6] == [("expect", 3), ("acquire", 1), ("expect", 2), ("acquire", 1), ("expect", 1),
                              ("acquire", 1)], calls
    # a lone joiner is acquired as before
    assert ("expect", 1) in calls and calls[calls.index(("expect", 1)) + 1] == ("acquire", 1)


def test_ray_compute_starts_the_expected_joiners_at_once_and_keeps_what_is_left(ray_session: Any) -> None:
    from spotwise.planes.ps.compute import RayCompute

    spec = spec_with(BASE)
    compute = RayCompute(worker_args_for(spec), standby=0)
    try:
        compute.expect(3)
        assert compute.spawned == 3, "three start-ups begin before the first is waited for"
        workers = [compute.acquire() for _ in range(2)]
        assert compute.spawned == 3 and len(workers) == 2  # taken from the ones already starting
        compute.expect(1)
        assert compute.spawned == 3, "the one left over serves the next joiner"
    finally:
        compute.shutdown()


def test_workers_needed_now_start_at_normal_priority_and_only_spares_start_nice(ray_session: Any) -> None:
    """A spare starts nice (it uses idle CPU); a worker needed now -- the initial fleet, a joiner with no
    spare ready, the joiners of one instant -- starts at normal priority: on a busy machine a nice
    start-up (importing torch) got almost no CPU and every join waited for it."""
    from spotwise.planes.ps.compute import RayCompute

    compute = RayCompute(worker_args_for(spec_with(BASE)), standby=1)
    try:
        assert [low for _, _, low in compute._standby] == [True]
        compute.expect(3)
        assert [low for _, _, low in compute._standby] == [True, False, False]
        ray_session.get(compute._standby[0][1])  # the spare is up (a spare still starting: the test below)
        assert compute.acquire() is not None and [low for _, _, low in compute._standby] == [False, False]  # the spare went first
    finally:
        compute.shutdown()


def test_a_joiner_does_not_wait_for_a_spare_still_starting_at_low_priority(ray_session: Any) -> None:
    """A spare that is still starting at nice 15 when a joiner needs it may take minutes on a busy
    machine (beside two busy loops each join waited 60-100 s): an actor is started at normal
    priority too, the joiner takes the first one up, and the spare stays in the pool."""
    import time

    from spotwise.planes.ps.compute import RayCompute

    @ray_session.remote(num_cpus=0)
    def starting_for_minutes() -> None:  # the spare's start-up on a busy machine
        time.sleep(600)

    slow: list[Any] = []

    class Starved(RayCompute):
        def _start_actor(self, low: bool = False) -> tuple[Any, Any]:
            if low:
                slow.append(starting_for_minutes.remote())
                self.spawned += 1
                return "starved-spare", slow[-1]
            return super()._start_actor(low)

    compute = Starved(worker_args_for(spec_with(BASE)), standby=1)
    try:
        actor = compute.acquire()
        assert actor != "starved-spare"
        assert ray_session.get(actor.ready.remote(), timeout=bound(120)) is not None  # a working worker
        assert [(a, low) for a, _, low in compute._standby] == [("starved-spare", True)], "the spare stays a spare"
        assert compute.spawned == 2, "one actor started for the joiner, none more"
    finally:
        compute._standby.clear()
        compute.kill(actor)
        for ref in slow:
            ray_session.cancel(ref, force=True)


def _thread_nice(pid: int) -> dict[int, int]:
    """The nice value of every thread of process ``pid`` (field 19 of /proc/PID/task/TID/stat)."""
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except OSError:  # the thread ended
            continue
        out[int(task.name)] = int(stat[stat.rindex(")") + 2:].split()[16])
    return out


def _can_lower_niceness() -> bool:
    import subprocess
    import sys

    code = "import os; os.nice(5); os.setpriority(os.PRIO_PROCESS, 0, 0)"
    return subprocess.run([sys.executable, "-c", code], capture_output=True).returncode == 0


@pytest.mark.parametrize("plane", ["ps", "collective"])
def test_a_promoted_spare_runs_every_thread_at_normal_priority(ray_session: Any, plane: str) -> None:
    """Linux keeps a nice value per thread: promoting only the thread that ran ``promote`` left the
    actor's main thread and torch's pool at nice 15, so a promoted spare trained at a sliver of a
    normal process's CPU share beside other work.  Every thread of the promoted actor is at 0."""
    import ray

    from spotwise.planes.collective.plane import CollectiveCompute
    from spotwise.planes.ps.compute import RayCompute

    if not _can_lower_niceness():
        pytest.skip("this user may not lower a nice value (needs root or CAP_SYS_NICE)")
    cls = CollectiveCompute if plane == "collective" else RayCompute
    compute = cls(worker_args_for(spec_with(BASE)), standby=1)
    try:
        spare, ready, low = compute._standby[0]
        assert low
        pid = int(ray.get(ready)["pid"])
        assert max(_thread_nice(pid).values()) == 15, "a spare waits at low priority"
        assert compute.acquire() is spare
        nice = _thread_nice(pid)
        assert len(nice) > 5 and set(nice.values()) == {0}, nice
    finally:
        compute.shutdown()


def test_normal_priority_resets_threads_started_before_it(tmp_path: Path) -> None:
    """Without Ray: a process started nice with threads of its own (torch's pool among them) is
    entirely at nice 0 after ``normal_priority`` (and so are threads it starts afterwards)."""
    import subprocess
    import sys

    if not _can_lower_niceness():
        pytest.skip("this user may not lower a nice value (needs root or CAP_SYS_NICE)")
    code = """
import os, threading, time, torch
from spotwise.planes.ps.worker import low_priority, normal_priority
low_priority()
torch.set_num_threads(2); torch.ones(512, 512) @ torch.ones(512, 512)
stop = threading.Event()
ts = [threading.Thread(target=stop.wait) for _ in range(3)]
[t.start() for t in ts]
def nice():
    return {int(t): int(open(f"/proc/self/task/{t}/stat").read().rsplit(")", 1)[1].split()[16]) for t in os.listdir("/proc/self/task")}
before = nice()
left = normal_priority()
late = threading.Thread(target=stop.wait); late.start()
after = nice()
stop.set()
print(max(before.values()), left, sorted(set(after.values())), len(after))
"""
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    before, left, after, n = res.stdout.split(" ", 3)
    assert (before, left, after) == ("15", "0", "[0]"), res.stdout
    assert int(n) >= 5
