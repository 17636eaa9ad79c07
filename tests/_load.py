"""How much slower than quiet this machine runs now: the factor the suite's hang guards are scaled by.

Issue 39 item 3: a test asserts behaviour, never speed, and passes beside other CPU-bound work.  Its
wall-clock bounds (pytest-timeout marks, ``subprocess`` timeouts, deadlines of event waits) only end
a hang; each is the bound measured quiet times :data:`SLOW`, measured once per test process:

* the CPU share a thread gets: the wall time of a fixed pure-Python loop over the CPU time it used
  (two runnable processes per core: about 2), the median of three;
* the load: the 1-minute load average per core the process may run on.

``SLOW`` is the larger, at least 1 and at most :data:`MAX_SLOW` (a bound must still end a real hang);
``SPOTWISE_TEST_SLOW`` overrides it (e.g. ``SPOTWISE_TEST_SLOW=4`` on a shared runner).
"""

from __future__ import annotations

import os
import statistics
import time

#: the largest factor (a hang still ends)
MAX_SLOW = 6.0


def _cpu_share_slowdown(n: int = 200_000) -> float:
    """Wall over CPU seconds of a fixed loop on this thread (1: it had a core to itself)."""
    ratios = []
    for _ in range(3):
        w0, c0 = time.perf_counter(), time.thread_time()
        x = 0
        for i in range(n):
            x += i & 7
        cpu = time.thread_time() - c0
        wall = time.perf_counter() - w0
        ratios.append(wall / cpu if cpu > 0 else 1.0)
    return statistics.median(ratios)


def _load_per_core() -> float:
    try:
        return os.getloadavg()[0] / max(1, len(os.sched_getaffinity(0)))
    except (OSError, AttributeError):  # pragma: no cover - platforms without a load average
        return 0.0


def measure() -> float:
    """The slowdown factor now (see the module docstring)."""
    forced = os.environ.get("SPOTWISE_TEST_SLOW")
    if forced:
        return min(MAX_SLOW, max(1.0, float(forced)))
    return min(MAX_SLOW, max(1.0, _cpu_share_slowdown(), _load_per_core()))


#: measured when the test process imports this module (each xdist worker: at its start)
SLOW = measure()


def bound(seconds: float) -> float:
    """A hang guard of ``seconds`` (measured quiet, with its margin) on this machine now."""
    return float(seconds) * SLOW
