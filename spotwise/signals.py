"""SIGTERM stops a command as cleanly as Ctrl-C (issue 18 item 3).

``timeout``, systemd and Kubernetes stop a process with SIGTERM.  Python's default is to die on
the spot: no ``finally`` block runs, so a run's private ``redis-server``, its Lithops function
processes and Ray's processes were left running (re-parented to PID 1) and the private
``/tmp/spotwise-redis-*`` folder stayed behind.  :func:`sigterm_as_interrupt` makes SIGTERM raise
:class:`Terminated` -- a :class:`KeyboardInterrupt` -- in the main thread, so every cleanup path
written for Ctrl-C runs (the supervisor's and the controllers' ``finally`` blocks, checkpoints
already on disk stay valid, the run-directory lock is released, Ray shuts down at exit) and the
run directory can be resumed with ``spotwise run --resume DIR``.  The CLI exits with status 143
(128 + SIGTERM, what a shell reports for a process SIGTERM ended) after SIGTERM, 130 after Ctrl-C.

A second SIGTERM while the first is being handled is ignored (a log line says so), so it cannot
cut the cleanup short; whoever sends SIGTERM still has SIGKILL if the cleanup hangs.

``ray.init`` installs a SIGTERM handler of its own in the driver (``sys.exit(15)``: no message,
exit 15); :func:`reinstall` puts this one back after it (:func:`spotwise.capacity.raystart.ensure_ray`).
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from types import FrameType
from typing import Any, Iterator

#: exit status of a command stopped by SIGTERM (128 + 15)
EXIT_TERMINATED = 128 + int(signal.SIGTERM)
#: exit status of a command stopped by Ctrl-C / SIGINT (128 + 2)
EXIT_INTERRUPTED = 128 + int(signal.SIGINT)


class Terminated(KeyboardInterrupt):
    """Raised in the main thread when the process receives SIGTERM (a KeyboardInterrupt, so
    every Ctrl-C cleanup path runs)."""

    def __init__(self, signum: int = int(signal.SIGTERM)) -> None:
        super().__init__(f"terminated by signal {signum}")
        self.signum = int(signum)


_state: dict[str, Any] = {"active": 0, "fired": False}


def _handler(signum: int, frame: FrameType | None) -> None:
    if _state["fired"]:
        sys.stderr.write("spotwise: SIGTERM again: already stopping, cleaning up\n")
        return
    _state["fired"] = True
    raise Terminated(signum)


def reinstall() -> None:
    """Put the SIGTERM handler back if :func:`sigterm_as_interrupt` is active (a library replaced it)."""
    if _state["active"] and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _handler)


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """While inside, SIGTERM raises :class:`Terminated` in the main thread; the previous handler
    comes back on exit.  Outside the main thread (where Python cannot set handlers) it does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGTERM)
    outermost = not _state["active"]
    if outermost:
        _state["fired"] = False
    _state["active"] += 1
    signal.signal(signal.SIGTERM, _handler)
    try:
        yield
    finally:
        _state["active"] -= 1
        signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)
