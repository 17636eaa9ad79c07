"""Members' heartbeats: the one source of a collective member's liveness, and of its work.

**Liveness** (issue 54 item 8).  A member is lost only when its process is gone (its member loop's
Ray call ended: a crash, a killed actor, a lost node) or its heartbeat has been silent for longer
than the heartbeat timeout (:func:`heartbeat_timeout`): never because a step, a collective or an
answer took longer than some bound.  A busy machine starves a training thread of CPU, a leader
evaluates or saves between two steps, a first step compiles: each is slow, none is lost, and
dropping such a member rolled committed steps back once every member had been "lost".  A frozen
(SIGSTOP) or hung-up VM's member beats no more, so it is still found, after the timeout.

Each member's process runs a :class:`WorkBeat`: a daemon thread that, every :data:`BEAT_S`
seconds, posts ``"<sequence> <cpu>"`` to the store on its own connection (a beat never queues
behind the training thread's blocking store calls): a number that changes at every beat, and the
CPU seconds its *training* thread (the one that started the beat) has used -- followed by ``w``
while the member runs the user's own code (a script's step, or its work between two steps: an
evaluation, a ``torch.save``, a logger waiting on the network), which is work whatever CPU it uses
and is bounded by the member itself (:data:`~spotwise.planes.collective.step_gate.STEP_TIMEOUT_S`).  The thread needs the
GIL only for the few microseconds between two blocking calls (the store's calls release it, as
torch's operators do while they compute), so neither a long step nor a starved core silences it;
it lives in the member's own process, so a frozen process's beat stops with it.  A store call that
fails is retried on a new connection: one lost beat is not a lost member.

The controller's :class:`BeatReader` reads the beats of the members it waits for: :class:`Liveness`
(a pure rule on a clock) says which have been silent too long, and the CPU field tells the stall
watch (:class:`~spotwise.planes.collective.records.StallWatch`) whether some training thread keeps
working.  Silence is measured on the controller's clock from the last *change* of a member's beat
it saw, so no clocks are compared, and a controller that could not look for a while (its own CPU
starved) sees the beats that came meanwhile as fresh.  Only Linux's per-thread CPU clocks are read;
where there are none a member beats without its CPU field.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

#: seconds between two beats of a member
BEAT_S = 1.0

#: the least heartbeat timeout (seconds): ten beats -- a thread that is runnable gets a core within
#: milliseconds even on an oversubscribed machine, so ten missed beats are a frozen or vanished process
HEARTBEAT_MIN_S = 10.0

#: a member's beat thread gives up once the store has refused every beat for this long (the run ended)
GIVE_UP_S = 120.0

#: seconds between two reads of the members' heartbeats while steps are leased
BEAT_CHECK_S = 0.25

#: the longest wait for a member that beats but does not answer (a survivor's report, a generation's
#: forming): a hung member (its training thread deadlocked, its heartbeat thread alive) is dropped then
ANSWER_MOST_S = 900.0

#: training-thread CPU seconds between two reads that count as work (a thread blocked in a wait uses
#: none; the beat thread's own work is on its own clock)
MIN_WORK_S = 0.05


def heartbeat_timeout(group_timeout_s: float) -> float:
    """Seconds of silence after which a member is lost: the group's timeout (how long a frozen peer
    may stall the job, ``cluster.group_timeout_s``), at least :data:`HEARTBEAT_MIN_S`."""
    if not group_timeout_s > 0:
        raise ValueError(f"group_timeout_s must be > 0, got {group_timeout_s!r}")
    return max(float(group_timeout_s), HEARTBEAT_MIN_S)


def is_lost(gone: bool, silent_s: float, timeout_s: float) -> bool:
    """The liveness rule: a member is lost when its process is gone, or its heartbeat has been silent
    for longer than ``timeout_s`` -- however slow its step, its collective or its answer."""
    return bool(gone) or silent_s > timeout_s


def thread_cpu_clock() -> Callable[[], float] | None:
    """A function returning the CPU seconds the *calling* thread has used (read from any thread), or
    ``None`` where the platform has no per-thread CPU clock."""
    try:
        clock_id = time.pthread_getcpuclockid(threading.get_ident())
        time.clock_gettime(clock_id)
    except (AttributeError, OSError, OverflowError):  # pragma: no cover - platforms without the clock
        return None
    return lambda: time.clock_gettime(clock_id)


def beat_key(member: int) -> str:
    return f"beat/{int(member)}"


#: the beat's last field while the member runs the user's code (module docstring)
BUSY = "w"


def beat_cpu(raw: str) -> float | None:
    """The training thread's CPU seconds in a beat ``"<sequence> <cpu>[ w]"`` (a bare number is the
    CPU too; ``-``: none), or ``None``: a beat is untrusted input, and anything but a finite,
    non-negative number there is no CPU reading."""
    parts = raw.split()
    if parts and parts[-1] == BUSY:
        parts = parts[:-1]
    if not parts or len(parts) > 2:
        return None
    try:
        cpu = float(parts[-1])
    except ValueError:
        return None
    return cpu if math.isfinite(cpu) and cpu >= 0 else None


def beat_busy(raw: str) -> bool:
    """Whether a beat says its member runs the user's code (its last of three fields is ``w``)."""
    parts = raw.split()
    return len(parts) == 3 and parts[-1] == BUSY


class WorkBeat:
    """A member's beat thread (module docstring); ``connect()`` opens its own store client."""

    def __init__(self, connect: Callable[[], Any], member: int, every_s: float = BEAT_S,
                 give_up_s: float = GIVE_UP_S, busy: Callable[[], bool] | None = None) -> None:
        if not every_s > 0:
            raise ValueError(f"every_s must be > 0, got {every_s!r}")
        if not give_up_s > 0:
            raise ValueError(f"give_up_s must be > 0, got {give_up_s!r}")
        self._connect, self.member, self.every_s = connect, int(member), float(every_s)
        self.give_up_s = float(give_up_s)
        #: whether the member runs the user's code now (read at each beat; None: never)
        self.busy = busy
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        #: beats posted (the sequence number of the last one)
        self.beats = 0

    def start(self) -> bool:
        """Start beating; ``True`` when the beats carry the calling (training) thread's CPU time,
        ``False`` where the platform has no per-thread CPU clock (the beats then carry none)."""
        clock = thread_cpu_clock()
        self._thread = threading.Thread(target=self._run, args=(clock,), name="spotwise-beat", daemon=True)
        self._thread.start()
        return clock is not None

    def _run(self, clock: Callable[[], float] | None) -> None:
        key = beat_key(self.member)
        store: Any = None
        failing_since: float | None = None
        while not self._stop.is_set():
            try:
                if store is None:
                    store = self._connect()
                value = str(self.beats + 1) + ("" if clock is None else f" {clock():.3f}")
                if self.busy is not None and self.busy():
                    value += (" -" if clock is None else "") + f" {BUSY}"
                store.set(key, value)
                self.beats += 1
                failing_since = None
            except Exception:  # a refused or broken connection: a new one at the next beat
                store = None
                now = time.monotonic()
                failing_since = now if failing_since is None else failing_since
                if now - failing_since > self.give_up_s:  # the store is gone for good: the run ended
                    return
            self._stop.wait(self.every_s)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2 * self.every_s)
            self._thread = None


@dataclass
class Liveness:
    """Which members' heartbeats have been silent too long (the module docstring's rule), on ``clock``.

    :meth:`observe` is told each beat read; a member's silence runs from the last time its beat was
    seen to *change* (or from when it was first watched, if it never beat).  Pure: no store, no
    threads -- the reader feeds it."""

    timeout_s: float
    clock: Callable[[], float] = time.monotonic
    #: member -> (the last beat seen, when it was first seen)
    _seen: dict[int, tuple[str | None, float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not (isinstance(self.timeout_s, (int, float)) and math.isfinite(self.timeout_s) and self.timeout_s > 0):
            raise ValueError(f"Liveness.timeout_s must be a positive number of seconds, got {self.timeout_s!r}")
        self.timeout_s = float(self.timeout_s)

    def observe(self, member: int, beat: str | None) -> None:
        """``member``'s beat as read now (``None``: none posted yet)."""
        m = int(member)
        last = self._seen.get(m)
        if last is None or (beat is not None and beat != last[0]):
            self._seen[m] = (beat, self.clock())

    def silent_s(self, member: int) -> float:
        """Seconds since ``member``'s beat last changed (0 for a member not watched yet)."""
        last = self._seen.get(int(member))
        return 0.0 if last is None else max(0.0, self.clock() - last[1])

    def lost(self, member: int, gone: bool = False) -> bool:
        return is_lost(gone, self.silent_s(member), self.timeout_s)

    def forget(self, member: int) -> None:
        """``member``'s slot left: a process that takes it later is watched afresh."""
        self._seen.pop(int(member), None)


class BeatReader:
    """The controller's side: reads the members' beats into a :class:`Liveness` and tells work apart."""

    #: a baseline older than this is taken anew: CPU trickling in more slowly (a waiting thread's wake-ups)
    #: never adds up to work
    window_s = 5.0

    def __init__(self, timeout_s: float = HEARTBEAT_MIN_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.liveness = Liveness(timeout_s, clock)
        #: member -> (its training thread's CPU seconds at the baseline, when the baseline was taken)
        self._last: dict[int, tuple[float, float]] = {}
        #: member -> the beat :meth:`working` read last (a ``w`` beat counts once it is a new one)
        self._raw: dict[int, str] = {}

    def _read(self, store: Any, member: int) -> str | None:
        key = beat_key(member)
        try:
            if not store.check([key]):
                return None
            return store.get(key).decode(errors="replace")[:64]
        except (ValueError, RuntimeError):
            return None

    def lost(self, store: Any, members: list[int]) -> list[int]:
        """The members of ``members`` whose heartbeat has been silent longer than the timeout (read now)."""
        out = []
        for m in members:
            self.liveness.observe(m, self._read(store, m))
            if self.liveness.lost(m):
                out.append(m)
        return out

    def forget(self, member: int) -> None:
        self.liveness.forget(member)
        self._last.pop(int(member), None)
        self._raw.pop(int(member), None)

    def working(self, store: Any, members: list[int]) -> bool:
        """Whether the training thread of some member in ``members`` used at least :data:`MIN_WORK_S` CPU
        seconds since its baseline: the beat this reader saw when it last counted work, or at most
        :attr:`window_s` ago -- so a busy thread starved of CPU on a loaded machine, whose every beat adds
        less than ``MIN_WORK_S``, still counts (a beat without a CPU reading counts as none) -- or whose
        beat, a new one since the last look, says it runs the user's code (``w``: its own evaluation
        between two steps may sleep, wait on a disk or the network, and is bounded by its member).
        The beats read are liveness's too."""
        now = self.clock()
        busy = False
        for m in members:
            raw = self._read(store, m)
            self.liveness.observe(m, raw)
            if raw is not None and beat_busy(raw) and self._raw.get(m) != raw:
                busy = True
            if raw is not None:
                self._raw[m] = raw
            cpu = None if raw is None else beat_cpu(raw)
            if cpu is None:
                continue
            base = self._last.get(m)
            if base is None or cpu < base[0] or now - base[1] > self.window_s:
                self._last[m] = (cpu, now)  # the first beat, a restarted member's, or a stale baseline
            elif cpu - base[0] >= MIN_WORK_S:
                busy = True
                self._last[m] = (cpu, now)
        return busy
