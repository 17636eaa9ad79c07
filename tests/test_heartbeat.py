"""A long, busy step is not a hang (spotwise.planes.collective.heartbeat).

Found under load: S-SGD's first step in a process builds DDP's wrapper, whose constructor imports
TorchDynamo (~800 modules); on two loaded cores that took over a minute, the controller's stall
watch declared both members lost, and the resumed run drew a different membership (CI failure of
test_resume_same_run[collective]).  The same happens to any first step that compiles
(``torch.compile``) for longer than the stall floor.  Members now beat the CPU time of their
training thread; the controller's stall watch and its wait for survivors' answers count that work
as progress, while a frozen or deadlocked member (no CPU) is still found.

Issue 54 item 8: a busy survivor (a step starved of CPU on a loaded CI machine) was taken for a
lost one and the run rolled committed steps back.  Liveness now comes from the heartbeat alone: a
member is lost only when its process is gone or its beat has been silent past the heartbeat
timeout (the rule on a fake clock, the regroup's and the forming's waits, a beat thread that
survives a failed store call and is not starved by a training thread inside torch's operators).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
import torch.distributed as dist
from _load import bound

from spotwise.planes.collective.heartbeat import (BEAT_S, HEARTBEAT_MIN_S, MIN_WORK_S, BeatReader, Liveness, WorkBeat,
                                                  beat_cpu, beat_key, heartbeat_timeout, is_lost, thread_cpu_clock)
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


class FakeClock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


# issue 54 item 8: the liveness rule, on a fake clock.  (what the member does meanwhile, how the
# controller reads its beats, whether its process is gone) -> lost?
LIVENESS_CASES = {
    # a step 60 s long (an eval, a compile, a starved core) while the beat goes on: not lost
    "slow-step-beating": ([1] * 60, False, False),
    # the beat stops for less than the timeout (a SIGSTOP/SIGCONT, a stalled VM), then resumes
    "short-pause": ([1] * 5 + [0] * 8 + [1] * 5, False, False),
    # a frozen (SIGSTOP'd) or vanished member: its beat stops for good
    "silent": ([1] * 5 + [0] * 11, False, True),
    # a member that never beat at all (a process that never got to its loop)
    "never-beat": ([0] * 11, False, True),
    # its process is gone (a Ray actor or node death): lost at once, whatever its last beat
    "dead": ([1], True, True),
}


@pytest.mark.parametrize("case", list(LIVENESS_CASES))
def test_a_member_is_lost_only_when_gone_or_silent_past_the_timeout(case: str) -> None:
    beats, gone, want = LIVENESS_CASES[case]
    clock = FakeClock()
    live = Liveness(10.0, clock)
    seq = 0
    for beat in beats:  # one read a second
        if beat:
            seq += 1
        live.observe(0, str(seq) if seq else None)
        clock.t += 1.0
    live.observe(0, str(seq) if seq else None)
    assert live.lost(0, gone=gone) is want
    assert is_lost(gone, live.silent_s(0), 10.0) is want


def test_silence_runs_from_the_last_change_the_controller_saw_not_from_its_own_reads() -> None:
    clock = FakeClock()
    live = Liveness(10.0, clock)
    live.observe(1, "1 0.5")
    clock.t += 30.0  # the controller did not look for 30 s (its own CPU starved): the member beat meanwhile
    live.observe(1, "31 0.9")
    assert live.silent_s(1) == 0.0 and not live.lost(1)
    clock.t += 9.0
    live.observe(1, "31 0.9")  # the same beat read again: silence grows
    assert live.silent_s(1) == 9.0 and not live.lost(1)
    clock.t += 2.0
    assert live.lost(1)
    live.forget(1)  # the slot left; a new process there is watched afresh
    live.observe(1, "31 0.9")
    assert not live.lost(1)


def test_the_heartbeat_timeout_has_a_floor_of_ten_beats() -> None:
    assert heartbeat_timeout(1.0) == HEARTBEAT_MIN_S >= 10 * BEAT_S
    assert heartbeat_timeout(60.0) == 60.0
    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError):
            heartbeat_timeout(bad)
    with pytest.raises(ValueError):
        Liveness(0.0)


@pytest.mark.parametrize("raw,cpu", [("3 1.5", 1.5), ("2.0", 2.0), ("7", 7.0), ("4 nan", None), ("4 -1", None),
                                     ("", None), ("1 2 3", None), ("x y", None), ("5 inf", None)])
def test_a_beat_is_parsed_as_untrusted_input(raw: str, cpu: float | None) -> None:
    assert beat_cpu(raw) == cpu


class FlakyStore(CountingStore):
    """A store whose first ``fail`` calls raise (a refused or broken connection)."""

    def __init__(self, fail: int) -> None:
        super().__init__()
        self.fail = fail

    def set(self, key: str, value: str) -> None:
        if self.fail > 0:
            self.fail -= 1
            raise RuntimeError("Connection reset by peer")
        super().set(key, value)


def test_a_failed_beat_is_retried_on_a_new_connection_not_the_end_of_the_beats() -> None:
    store = FlakyStore(fail=3)
    connects = [0]

    def connect() -> FlakyStore:
        connects[0] += 1
        return store

    beat = WorkBeat(connect, member=2, every_s=0.02)
    beat.start()
    try:
        _wait_for(lambda: store.sets >= 3, "beats after the store came back")
    finally:
        beat.stop()
    assert connects[0] >= 4  # one new connection per failed beat
    seqs = [int(v.split()[0]) for v in [store.get(beat_key(2)).decode()]]
    assert seqs[0] == beat.beats >= 3


def test_a_beat_thread_gives_up_once_the_store_is_gone_for_good() -> None:
    def connect() -> Any:
        raise RuntimeError("Connection refused")

    beat = WorkBeat(connect, member=0, every_s=0.01, give_up_s=0.1)
    beat.start()
    t = beat._thread
    assert t is not None
    t.join(timeout=bound(20))
    assert not t.is_alive() and beat.beats == 0


def test_beats_go_on_while_the_training_thread_is_inside_long_torch_ops() -> None:
    """The beat thread needs the GIL only between its store calls; torch's operators release it while
    they compute, so a step of long matrix products (the training thread busy throughout) never
    silences the beat."""
    import torch

    store = CountingStore()
    done = threading.Event()
    gaps: list[float] = []

    def training() -> None:
        beat = WorkBeat(lambda: store, member=1, every_s=0.05)
        beat.start()
        try:
            a = torch.randn(600, 600)
            t0 = time.monotonic()
            while time.monotonic() - t0 < 1.5:
                a = torch.tanh(a @ a)
        finally:
            beat.stop()
            done.set()

    last = [time.monotonic(), -1]
    t = threading.Thread(target=training)
    t.start()
    while not done.is_set():
        n = store.sets
        now = time.monotonic()
        if n != last[1]:
            gaps.append(now - last[0])
            last[:] = [now, n]
        time.sleep(0.005)
    t.join()
    assert store.sets >= 5
    # no silence anywhere near a heartbeat timeout (ten beats here)
    assert max(gaps[1:] or [0.0]) < 10 * 0.05 * max(1.0, bound(1.0)), gaps


def test_survivors_that_beat_are_waited_for_and_silent_or_dead_ones_are_not() -> None:
    """The regroup's wait for survivors' reports: a slow member whose heartbeat goes on is waited
    for well past any step-time bound; a silent one or one whose process is gone is not."""
    from spotwise.planes.collective.group import GroupCoordinator

    coord = GroupCoordinator(timeout_s=30.0)
    coord.store.set("alive/4/0", "7")  # member 0 answered at once; member 1 is inside a long step
    calls: list[list[int]] = []

    def lost(members: list[int]) -> list[int]:
        calls.append(members)
        if len(calls) == 8:  # it reaches its next collective, sees the failure and answers
            coord.store.set("alive/4/1", "7")
        return []  # its heartbeat goes on

    t0 = time.monotonic()
    assert coord.alive(4, [0, 1], timeout_s=bound(60), lost=lost) == {0: 7, 1: 7}
    assert time.monotonic() - t0 > 0.6 and calls[0] == [1]  # ~0.1 s between two looks
    # silent: not waited for (long before the bound)
    t0 = time.monotonic()
    assert coord.alive(5, [0, 1], timeout_s=bound(60), lost=lambda m: list(m)) == {}
    assert time.monotonic() - t0 < bound(30)
    # gone (its process or node): not waited for, whatever its heartbeat says
    t0 = time.monotonic()
    assert coord.alive(5, [0, 1], timeout_s=bound(60), gone=lambda: {0, 1}, lost=lambda m: []) == {}
    assert time.monotonic() - t0 < bound(30)
    # without heartbeats to read: the plain timeout; with them, bounded in all
    assert coord.alive(5, [0, 1], timeout_s=0.3) == {}
    t0 = time.monotonic()
    assert coord.alive(6, [0], timeout_s=1.5, lost=lambda m: []) == {}
    assert 1.5 <= time.monotonic() - t0 < bound(30)


def test_a_generation_forming_slowly_is_waited_for_while_its_members_beat() -> None:
    from spotwise.planes.collective.plane import PlaneControl

    now = FakeClock()
    ctl = PlaneControl(timeout_s=1.0, heartbeat_s=10.0)
    try:
        ctl.beats = BeatReader(10.0, now)
        for m in (0, 1):
            ctl.store.set(beat_key(m), "1 0.0")

        def form_late() -> None:  # slower than the group's timeout: a big state, a loaded machine
            time.sleep(2.5)
            ctl.store.add("formed/3", 2)

        t = threading.Thread(target=form_late)
        t.start()
        seq = [1]

        def beating() -> None:
            while t.is_alive():
                seq[0] += 1
                ctl.store.set(beat_key(0), f"{seq[0]} 0.0")
                ctl.store.set(beat_key(1), f"{seq[0]} 0.0")
                now.t += 1.0
                time.sleep(0.05)

        b = threading.Thread(target=beating)
        b.start()
        assert ctl.formed(3, [0, 1], timeout_s=bound(60))
        t.join()
        b.join()
        # a member whose beat went silent: the forming is given up at once (the regroup drops it)
        assert ctl.lost([0, 1]) == []  # the last beats seen (silence runs from the last change seen)
        now.t += 11.0
        assert ctl.lost([0, 1]) == [0, 1]
        assert not ctl.formed(4, [0, 1], timeout_s=bound(60))
        # one whose process is gone: given up too
        assert not ctl.formed(5, [0, 1], timeout_s=bound(60), gone=lambda: {1})
    finally:
        ctl.close()
