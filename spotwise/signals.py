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
Ray also turns any KeyboardInterrupt raised while ``ray.get``/``ray.wait`` block into a plain
``KeyboardInterrupt()``: :func:`sigterm_received` tells the CLI that SIGTERM caused it (exit 143,
never 130; issue 30 item 6).

**A final checkpoint** (issue 30 item 5).  While a run loop is inside :func:`deferred_sigterm`,
SIGTERM raises nothing at once: it marks the termination pending (:func:`termination_pending`),
and the loop, at its next point between two committed steps, checkpoints the last committed step
and raises :class:`Terminated` itself (:mod:`spotwise.control.terminating`).  If that does not
happen within :data:`FINAL_CHECKPOINT_S` seconds, a watchdog says so on stderr and raises
:class:`Terminated` in the main thread anyway (exit 143 without the final checkpoint).
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
#: seconds a run loop has, after SIGTERM, to write its final checkpoint before it is stopped without one
FINAL_CHECKPOINT_S = 30.0


class Terminated(KeyboardInterrupt):
    """Raised in the main thread when the process receives SIGTERM (a KeyboardInterrupt, so
    every Ctrl-C cleanup path runs)."""

    def __init__(self, signum: int = int(signal.SIGTERM)) -> None:
        super().__init__(f"terminated by signal {signum}")
        self.signum = int(signum)


_state: dict[str, Any] = {"active": 0, "fired": False, "defer": 0, "pending": False, "hard": False, "timer": None}


def _handler(signum: int, frame: FrameType | None) -> None:
    if _state["hard"]:  # the final checkpoint's time is up (the watchdog re-sent the signal)
        _state["hard"] = False
        raise Terminated(signum)
    if _state["fired"]:
        sys.stderr.write("spotwise: SIGTERM again: already stopping, cleaning up\n")
        return
    _state["fired"] = True
    if _state["defer"]:  # a run loop checkpoints its last committed step first, then raises Terminated
        _state["pending"] = True
        _start_deadline(signum)
        return
    raise Terminated(signum)


def sigterm_received() -> bool:
    """Whether SIGTERM arrived in the current :func:`sigterm_as_interrupt` scope (a plain
    KeyboardInterrupt seen then is SIGTERM's, e.g. converted by Ray: exit 143)."""
    return bool(_state["fired"])


def termination_pending() -> bool:
    """Whether SIGTERM arrived while deferred and the run loop has not acted on it yet."""
    return bool(_state["pending"])


def _start_deadline(signum: int) -> None:
    main = threading.main_thread().ident

    def expire() -> None:
        if not _state["pending"]:
            return
        sys.stderr.write(f"spotwise: SIGTERM: no final checkpoint within {FINAL_CHECKPOINT_S:g} s; "
                         "stopping without it (resume continues from the newest checkpoint on disk)\n")
        sys.stderr.flush()
        _state["hard"] = True
        if main is not None:
            signal.pthread_kill(main, signum)

    timer = threading.Timer(FINAL_CHECKPOINT_S, expire)
    timer.daemon = True
    _state["timer"] = timer
    timer.start()


def termination_handled() -> None:
    """The run loop wrote its final checkpoint (or found nothing to write): the watchdog stands down."""
    _state["pending"] = False
    timer = _state["timer"]
    _state["timer"] = None
    if timer is not None:
        timer.cancel()


@contextlib.contextmanager
def deferred_sigterm() -> Iterator[None]:
    """While inside (and inside :func:`sigterm_as_interrupt`), SIGTERM only marks the termination
    pending: the caller checks :func:`termination_pending` between committed steps, writes its final
    checkpoint, calls :func:`termination_handled` and raises :class:`Terminated` (see the module
    docstring).  Does nothing outside :func:`sigterm_as_interrupt` (a library caller's own handler)."""
    if not _state["active"] or threading.current_thread() is not threading.main_thread():
        yield
        return
    _state["defer"] += 1
    try:
        yield
    except BaseException:
        if _state["pending"]:  # the loop failed meanwhile: that error is the one to report
            termination_handled()
        raise
    finally:
        _state["defer"] -= 1
    if not _state["defer"] and _state["pending"]:  # left without acting on it: stop now
        termination_handled()
        raise Terminated()


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
        _state.update(fired=False, pending=False, hard=False)
    _state["active"] += 1
    signal.signal(signal.SIGTERM, _handler)
    try:
        yield
    finally:
        _state["active"] -= 1
        if outermost:
            termination_handled()
        signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)
