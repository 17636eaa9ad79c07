"""Bounding the user's code that ``spotwise plan``'s in-process pilot runs (issue 54 item 9).

A ``module:function`` workload's code runs in the pilot: the function itself, its model and dataset,
a stream's ``iter_from``, each batch, the loss.  Any of it may block (an ``iter_from`` waiting on a
queue, a socket, ``time.sleep``), and ``plan`` hung with it.  :func:`run_bounded` runs the pilot's
training in a thread of its own and waits for it from the calling thread: each phase (building the
workload, then every step) must end within :func:`user_call_bound_s` -- the bound a training
script has to reach its first batch (:data:`spotwise.elastic.describe.DESCRIBE_TIMEOUT_S`,
``SPOTWISE_SCRIPT_DESCRIBE_TIMEOUT_S``) -- or the pilot is an :class:`~spotwise.errors.InputError`
(exit 2) naming the workload's function and what to fix.  The stuck thread is a daemon: it does not
keep the process from exiting.  (Code that holds the GIL without releasing it in a C call cannot be
interrupted by any thread; ``time.sleep``, waits on locks, events, queues and I/O release it.)
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

from spotwise.errors import InputError


def user_call_bound_s() -> float:
    """Seconds one phase of the user's code may take in the pilot: the bound of a script's first batch."""
    from spotwise.elastic import describe

    return float(describe.DESCRIBE_TIMEOUT_S)


class Heartbeat:
    """What the pilot's thread is doing and since when (:meth:`enter` at each phase: build, step N)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.phase, self.since = "starting", time.monotonic()

    def enter(self, phase: str) -> None:
        with self._lock:
            self.phase, self.since = phase, time.monotonic()

    def read(self) -> tuple[str, float]:
        with self._lock:
            return self.phase, self.since


def run_bounded(fn: Callable[[Heartbeat], Any], who: str, bound_s: float | None = None) -> Any:
    """``fn(heartbeat)`` in a daemon thread; its result or its exception, re-raised here.  InputError
    (exit 2) naming ``who`` (the user's function) when one phase outlasts ``bound_s`` (default
    :func:`user_call_bound_s`)."""
    bound = float(user_call_bound_s() if bound_s is None else bound_s)
    beat = Heartbeat()
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["out"] = fn(beat)
        except BaseException as e:  # noqa: BLE001 -- handed to the calling thread as it is
            box["err"] = e

    t = threading.Thread(target=target, name="spotwise-pilot-user-code", daemon=True)
    t.start()
    while t.is_alive():
        phase, since = beat.read()
        left = bound - (time.monotonic() - since)
        if left <= 0:
            raise InputError(
                f"the workload {who} did not return from {phase} within {bound:g} s in plan's in-process pilot "
                "(its function, its dataset's __getitem__ / iter_from, its model or its loss blocks)",
                "make the workload's data access return promptly (iter_from(position) a cheap seek, nothing that "
                "waits on a queue, socket or lock), pass --pilot DIR (a run of the job) so no pilot runs here, or "
                "raise the bound with SPOTWISE_SCRIPT_DESCRIBE_TIMEOUT_S=<seconds>", "workload.name")
        t.join(min(left, 1.0))
    if "err" in box:
        raise box["err"]
    return box.get("out")


__all__ = ["Heartbeat", "run_bounded", "user_call_bound_s"]
