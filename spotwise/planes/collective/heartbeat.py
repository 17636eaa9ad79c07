"""Members at work: what tells the controller's stall watch that a long step is not a hang.

The controller fails a generation whose leased steps bring no record for a minute or more
(:class:`~spotwise.planes.collective.records.StallWatch`): the last bound on its own waits, for a
member stuck where no collective timeout reaches (a deadlock, a lost record).  But some steps are
long and busy, not stuck: a model's first step under ``torch.compile`` (TorchDynamo tracing and
Inductor compiling: minutes for a large model), imports a library makes on first use, a huge model's
step on a slow device.  Taking those for hangs kills every member, and their replacements compile
again: the run never gets past its first step.

So each member's process runs a :class:`WorkBeat`: a daemon thread that, every :data:`BEAT_S`
seconds, posts the CPU time its *training* thread (the one that started the beat) has used to the
store, on its own connection (a beat never queues behind the training thread's blocking store calls).  The
controller's :class:`BeatReader` reads the generation's members' beats: while some member's
training thread keeps using CPU, the generation is working and the stall watch waits.  A hang shows no such
work: a deadlocked or frozen (SIGSTOP: its beat thread stops too) process uses none, and a member
blocked in a collective waits without CPU (and its collective's own timeout fails the generation).
Only Linux's per-thread CPU clocks are read; where there are none a member posts no beat and the
stall watch is what it was.
"""

from __future__ import annotations

import math
import threading
import time
from typing import Any, Callable

#: seconds between two beats of a member
BEAT_S = 2.0

#: training-thread CPU seconds between two reads that count as work (a thread blocked in a wait uses
#: none; the beat thread's own work is on its own clock)
MIN_WORK_S = 0.05


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


class WorkBeat:
    """A member's beat thread (module docstring); ``connect()`` opens its own store client."""

    def __init__(self, connect: Callable[[], Any], member: int, every_s: float = BEAT_S) -> None:
        if not every_s > 0:
            raise ValueError(f"every_s must be > 0, got {every_s!r}")
        self._connect, self.member, self.every_s = connect, int(member), float(every_s)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> bool:
        """Start beating the calling thread's work; ``False`` (and no thread) where its CPU clock
        cannot be read."""
        clock = thread_cpu_clock()
        if clock is None:
            return False
        self._thread = threading.Thread(target=self._run, args=(clock,), name="spotwise-beat", daemon=True)
        self._thread.start()
        return True

    def _run(self, clock: Callable[[], float]) -> None:
        try:
            store = self._connect()
        except Exception:  # the store is gone (the run ended): nothing to tell
            return
        key = beat_key(self.member)
        while not self._stop.is_set():
            try:
                store.set(key, f"{clock():.3f}")
            except Exception:  # the store closed under us: the run is ending
                return
            self._stop.wait(self.every_s)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2 * self.every_s)
            self._thread = None


class BeatReader:
    """The controller's side: whether any of a generation's members did work since the last read."""

    #: a baseline older than this is taken anew: CPU trickling in more slowly (a waiting thread's wake-ups)
    #: never adds up to work
    window_s = 5.0

    def __init__(self) -> None:
        #: member -> (its training thread's CPU seconds at the baseline, when the baseline was taken)
        self._last: dict[int, tuple[float, float]] = {}

    def working(self, store: Any, members: list[int]) -> bool:
        """Whether the training thread of some member in ``members`` used at least :data:`MIN_WORK_S` CPU
        seconds since its baseline: the beat this reader saw when it last counted work, or at most
        :attr:`window_s` ago -- so a busy thread starved of CPU on a loaded machine, whose every beat adds
        less than ``MIN_WORK_S``, still counts (a beat is untrusted input: a value that is not a finite,
        non-negative number counts as none)."""
        now = time.monotonic()
        busy = False
        for m in members:
            key = beat_key(m)
            try:
                if not store.check([key]):
                    continue
                cpu = float(store.get(key).decode(errors="replace"))
            except (ValueError, RuntimeError):
                continue
            if not math.isfinite(cpu) or cpu < 0:
                continue
            base = self._last.get(m)
            if base is None or cpu < base[0] or now - base[1] > self.window_s:
                self._last[m] = (cpu, now)  # the first beat, a restarted member's, or a stale baseline
            elif cpu - base[0] >= MIN_WORK_S:
                busy = True
                self._last[m] = (cpu, now)
        return busy
