"""A long, busy step is not a hang (spotwise.planes.collective.heartbeat).

Found under load: S-SGD's first step in a process builds DDP's wrapper, whose constructor imports
TorchDynamo (~800 modules); on two loaded cores that took over a minute, the controller's stall
watch declared both members lost, and the resumed run drew a different membership (CI failure of
test_resume_same_run[collective]).  The same happens to any first step that compiles
(``torch.compile``) for longer than the stall floor.  Members now beat the CPU time of their
training thread; the controller's stall watch and its wait for survivors' answers count that work
as progress, while a frozen or deadlocked member (no CPU) is still found.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
import torch.distributed as dist
from _load import bound

from spotwise.planes.collective.heartbeat import MIN_WORK_S, BeatReader, WorkBeat, beat_key, thread_cpu_clock
from spotwise.planes.collective.records import StallWatch


class CountingStore:
    """A thread-safe store (torch's HashStore) that counts the beats posted to it."""

    def __init__(self) -> None:
        self.inner = dist.HashStore()
        self.sets = 0

    def set(self, key: str, value: str) -> None:
        self.inner.set(key, value)
        self.sets += 1

    def check(self, keys: list[str]) -> bool:
        return self.inner.check(keys)

    def get(self, key: str) -> bytes:
        return self.inner.get(key)


def _wait_for(cond: Any, what: str, seconds: float = 20.0) -> None:
    deadline = time.monotonic() + bound(seconds)
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def _spin(cpu_s: float) -> None:
    t0 = time.thread_time()
    x = 0
    while time.thread_time() - t0 < cpu_s:
        x += 1


def test_the_clock_reads_the_thread_that_asked_for_it_from_any_other() -> None:
    got: dict[str, Any] = {}
    go, spun, end = threading.Event(), threading.Event(), threading.Event()

    def busy() -> None:
        got["clock"] = thread_cpu_clock()
        go.set()
        _spin(0.3)
        spun.set()
        end.wait()  # (a thread's clock is readable while the thread lives)

    t = threading.Thread(target=busy)
    t.start()
    try:
        go.wait()
        clock = got["clock"]
        assert clock is not None
        assert spun.wait(bound(20))
        assert clock() >= 0.3  # read here, in another thread: the busy thread's CPU, not this one's
    finally:
        end.set()
        t.join()
    mine = thread_cpu_clock()
    assert mine is not None
    before = mine()
    time.sleep(0.2)  # a waiting thread uses (almost) no CPU
    assert mine() - before < MIN_WORK_S


@pytest.mark.parametrize("busy", [True, False])
def test_the_reader_sees_a_busy_training_thread_and_not_a_waiting_one(busy: bool) -> None:
    store = CountingStore()
    release = threading.Event()

    def member() -> None:
        beat = WorkBeat(lambda: store, member=3, every_s=0.05)
        assert beat.start()
        try:
            _wait_for(lambda: store.check([beat_key(3)]), "the first beat")
            reader.working(store, [3])  # the baseline
            started.set()
            if busy:
                _spin(0.3)  # a compile, an import: CPU on the training thread
            release.wait()  # then it waits (as in a collective): no CPU
        finally:
            beat.stop()

    reader, started = BeatReader(), threading.Event()
    t = threading.Thread(target=member)
    t.start()
    try:
        assert started.wait(bound(20))
        if busy:
            _wait_for(lambda: reader.working(store, [3]), "the busy member's beat")
        else:
            n = store.sets
            _wait_for(lambda: store.sets >= n + 4, "four more beats")
            assert not reader.working(store, [3])
    finally:
        release.set()
        t.join()
    assert reader.working(store, [7]) is False  # a member that never beat is no work


def test_a_beat_that_is_not_a_cpu_time_counts_as_no_work() -> None:
    store = dist.HashStore()
    reader = BeatReader()
    for value in ("1.0", "nan", "-5", "inf", "lots", "2.0"):
        store.set(beat_key(0), value)
        assert reader.working(store, [0]) is (value == "2.0")  # 1.0 -> 2.0 is the only work seen


def test_the_stall_watch_waits_while_a_member_works_and_stalls_when_it_stops() -> None:
    now = [0.0]
    w = StallWatch(min_s=60.0, clock=lambda: now[0], look_every_s=2.0)
    w.start()
    asked: list[float] = []
    work = [True]

    def working() -> bool:
        asked.append(now[0])
        return work[0]

    for _ in range(150):  # 300 s without a record, a member compiling all along
        now[0] += 2.0
        assert w.stalled(5.0, working) is None
    assert len(asked) == 150 and w.gap is None  # asked once per look; work is not a record
    work[0] = False
    for _ in range(30):  # it stops working: idle counts from the last work seen
        now[0] += 2.0
        assert w.stalled(5.0, working) is None
    now[0] += 2.0
    assert w.stalled(5.0, working) == 62.0
    n = len(asked)
    now[0] += 0.5
    w.stalled(5.0, working)
    assert len(asked) == n  # not asked again within look_every_s


def test_survivors_at_work_are_waited_for_and_idle_ones_are_not() -> None:
    from spotwise.planes.collective.group import GroupCoordinator

    coord = GroupCoordinator(timeout_s=30.0)
    coord.store.set("alive/4/0", "7")  # member 0 answered at once; member 1 is inside a long step
    calls: list[list[int]] = []

    def working(members: list[int]) -> bool:
        calls.append(members)
        if len(calls) == 3:  # it reaches its next collective, sees the failure and answers
            coord.store.set("alive/4/1", "7")
        return True

    t0 = time.monotonic()
    assert coord.alive(4, [0, 1], timeout_s=0.3, working=working) == {0: 7, 1: 7}
    assert time.monotonic() - t0 > 0.3 and calls[0] == [1]  # past the plain deadline
    assert coord.alive(5, [0, 1], timeout_s=0.3) == {}  # nobody answers, nobody works: the timeout
    assert coord.alive(5, [0, 1], timeout_s=0.3, working=lambda m: False) == {}
    t0 = time.monotonic()
    assert coord.alive(6, [0], timeout_s=0.2, working=lambda m: True, most_s=1.5) == {}  # bounded in all
    assert time.monotonic() - t0 < bound(30)
