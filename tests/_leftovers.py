"""No process outlives the test suite (issue 54 item 7): a Ray head of ``test_emit_rehearsal.py`` was alive 50
minutes after pytest exited.

Every pytest process (the xdist controller and each worker, or the one process of ``-n 0``) makes itself a *child
subreaper* (``prctl(PR_SET_CHILD_SUBREAPER)``), so a process a test left behind -- a daemon whose parent exited,
in whatever session -- is re-parented to it instead of to init, and stays findable as a descendant.  At the end of
the session each pytest process lists its descendants (``/proc``), waits a grace period (Ray's daemons exit a few
seconds after ``ray.shutdown``), reaps its zombies, kills what is left and reports it; a worker hands its list to
the controller (xdist's ``workeroutput``), which fails the run (exit 1) naming every command line.  Only this
run's own descendants are looked at: other runs on the machine are never touched.
"""

from __future__ import annotations

import ctypes
import os
import signal
import time
from pathlib import Path

PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> bool:
    """Make this process the subreaper of its descendants (Linux); False where that is not possible."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _stat(pid: int) -> tuple[int, str] | None:
    """(parent pid, state letter) of ``pid`` from /proc, or None when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return int(fields[1]), fields[0]
    except (OSError, ValueError, IndexError):
        return None


def _cmdline(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "?"
    return raw.replace(b"\0", b" ").decode(errors="replace").strip()[:300] or "?"


def descendants(root: int) -> dict[int, str]:
    """Every live (non-zombie) descendant of ``root``: pid -> state letter."""
    children: dict[int, list[int]] = {}
    state: dict[int, str] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            got = _stat(int(d.name))
            if got is not None:
                children.setdefault(got[0], []).append(int(d.name))
                state[int(d.name)] = got[1]
    out: dict[int, str] = {}
    todo = list(children.get(root, []))
    while todo:
        pid = todo.pop()
        if pid not in out:
            out[pid] = state.get(pid, "?")
            todo.extend(children.get(pid, []))
    return {p: s for p, s in out.items() if s != "Z"}


def _reap() -> None:
    """Collect this process's exited children (orphans re-parented to it are nobody else's to wait for)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def leftovers(grace_s: float, ignore: set[int] = frozenset()) -> list[str]:  # type: ignore[assignment]
    """The command lines of this process's descendants still alive after ``grace_s`` seconds (all then killed)."""
    me = os.getpid()
    deadline = time.monotonic() + grace_s
    while True:
        _reap()
        left = {p: s for p, s in descendants(me).items() if p not in ignore}
        if not left or time.monotonic() >= deadline:
            break
        time.sleep(0.2)
    found = [f"pid {p}: {_cmdline(p)}" for p in sorted(left)]
    for p in left:
        try:
            os.kill(p, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    time.sleep(0.2)
    _reap()
    return found
