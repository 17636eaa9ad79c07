"""SIGTERM in the CLI's scope (issue 18 item 3): the handler's unit behaviour.

The end-to-end check -- a real `spotwise run` on every data plane gets a real SIGTERM, exits 143
with no traceback and no process left behind, and `--resume` completes it -- is one parametrised
test with issue 30 item 5's: tests/test_hardening_signals.py::
test_sigterm_checkpoints_the_last_committed_step_and_resume_continues_from_it (the same path,
run once per plane instead of twice).
"""

from __future__ import annotations

import os
import signal
import sys
import time

import pytest


def test_sigterm_raises_terminated_once_and_the_previous_handler_comes_back():
    """In the CLI's scope SIGTERM is a KeyboardInterrupt (so Ctrl-C's cleanup runs); a second
    SIGTERM during that cleanup does not cut it short; afterwards the old handler is back."""
    from spotwise.signals import Terminated, sigterm_as_interrupt

    before = signal.getsignal(signal.SIGTERM)
    cleaned = []
    with pytest.raises(KeyboardInterrupt) as e:
        with sigterm_as_interrupt():
            try:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(5)  # the handler raises before this ends
            finally:
                os.kill(os.getpid(), signal.SIGTERM)  # a second one, while cleaning up: ignored
                time.sleep(0.05)
                cleaned.append(True)
    assert isinstance(e.value, Terminated) and cleaned == [True]
    assert signal.getsignal(signal.SIGTERM) == before


def test_ray_init_does_not_take_sigterm_over():
    """ensure_ray puts the CLI's handler back after ray.init replaced it (with sys.exit(15))."""
    from spotwise.signals import _handler, reinstall, sigterm_as_interrupt

    with sigterm_as_interrupt():
        signal.signal(signal.SIGTERM, lambda s, f: sys.exit(s))  # what ray.init does in a driver
        reinstall()
        assert signal.getsignal(signal.SIGTERM) is _handler
    assert signal.getsignal(signal.SIGTERM) is not _handler
