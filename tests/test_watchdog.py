"""The watchdog of a driver's processes (spotwise/watchdog.py, issue 54 item 7), without Ray.

It kills exactly what it saw descend from what it guards when the driver dies -- never a process it did
not see there (another child of the driver, an operator's cluster), never a pid now held by another
process -- ends by itself once what it guards is gone, and kills nothing after the driver's ``done``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from _load import bound

from spotwise.watchdog import Watchdog, alive, descendants, kill_recorded, start_time

#: a driver: starts a guarded process with a child of its own and an unguarded one, watches the first only
DRIVER = """
import subprocess, sys, time
from spotwise.watchdog import Watchdog, descendants, start_time
guarded = subprocess.Popen(["sh", "-c", "sleep 300 & wait"])
other = subprocess.Popen(["sleep", "300"])
while not descendants(guarded.pid):
    time.sleep(0.02)
dog = Watchdog(roots=[(guarded.pid, start_time(guarded.pid))])
print(guarded.pid, other.pid, dog.proc.pid, flush=True)
time.sleep(300)
"""


def _wait(cond, seconds: float) -> bool:  # noqa: ANN001
    end = time.monotonic() + bound(seconds)
    while not cond():
        if time.monotonic() > end:
            return False
        time.sleep(0.05)
    return True


def _kill(procs: list[tuple[int, int]]) -> None:
    for pid, _ in alive(procs):
        os.kill(pid, signal.SIGKILL)


def test_a_killed_driver_takes_what_its_watchdog_guards_and_nothing_else() -> None:
    driver = subprocess.Popen([sys.executable, "-c", DRIVER], stdout=subprocess.PIPE, text=True)
    procs: list[tuple[int, int]] = []
    try:
        assert driver.stdout is not None
        guarded, other, dog = (int(x) for x in driver.stdout.readline().split())
        grandchild = descendants(guarded)
        assert len(grandchild) == 1
        procs = [(guarded, start_time(guarded) or 0), grandchild[0], (other, start_time(other) or 0)]
        time.sleep(1.0)  # a few of the watchdog's looks
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait(timeout=bound(30))
        assert _wait(lambda: not alive(procs[:2]), 10), f"still alive: {alive(procs[:2])}"
        assert alive(procs[2:]) == procs[2:], "the watchdog killed a process it did not guard"
        assert _wait(lambda: start_time(dog) is None or not alive([(dog, start_time(dog) or 0)]), 10)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
        _kill(procs)


def test_the_watchdog_ends_by_itself_once_what_it_guards_ended() -> None:
    child = subprocess.Popen(["sleep", "0.5"])
    dog = Watchdog(roots=[(child.pid, start_time(child.pid) or 0)])
    try:
        child.wait(timeout=bound(10))
        assert _wait(lambda: not dog.running(), 10), "the watchdog outlived what it guarded"
    finally:
        dog.close()


def test_done_ends_the_watchdog_without_killing() -> None:
    child = subprocess.Popen(["sleep", "300"])
    try:
        dog = Watchdog(roots=[(child.pid, start_time(child.pid) or 0)])
        time.sleep(0.5)
        dog.close()
        assert dog.proc is None and child.poll() is None
    finally:
        child.kill()
        child.wait()


def test_a_recorded_pid_with_another_start_time_is_never_killed() -> None:
    child = subprocess.Popen(["sleep", "300"])
    try:
        start = start_time(child.pid)
        assert start is not None
        kill_recorded([(child.pid, start + 1)])  # the pid, handed out again to another process
        time.sleep(0.2)
        assert child.poll() is None
        kill_recorded([(child.pid, start)])
        assert child.wait(timeout=bound(10)) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def test_guarding_nothing_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one"):
        Watchdog(roots=[])
