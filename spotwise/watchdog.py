"""Nothing spotwise starts outlives a killed driver (issue 30 item 7, issue 54 item 7).

When the driver is killed with SIGKILL no ``finally`` and no ``atexit`` runs.  Ray's ``gcs_server``
and ``raylet`` die with it (Ray gives them a parent-death signal), but the raylet's children -- Ray's
``DashboardAgent`` and ``RuntimeEnvAgent``, the worker processes that hold the members -- are
re-parented to init and stay; so did a serverless run's private ``redis-server`` and Lithops's
function processes.  Two guards:

* :func:`die_with_parent` -- the ``preexec_fn`` of a process spotwise spawns itself
  (``redis-server``): Linux's ``PR_SET_PDEATHSIG`` sends it SIGKILL the moment the driver dies.
* :class:`Watchdog` -- a small process (this file run as a script, standard library only) in a
  session of its own, so a signal to the driver's terminal or process group does not reach it.  It
  watches the driver through a pipe and, every :data:`POLL_S` seconds, records the processes it
  guards -- each by pid *and start time*, so a pid the system hands out again is never taken for
  one of them.  What it guards is either every descendant of the driver (``roots=None``) or only
  the given processes and whatever descends from them (the daemons of a local Ray head, found as the
  driver's children that appeared during ``ray.init``: an operator's cluster, reached by address, is
  never a descendant and never touched).  When the pipe closes without the driver's ``done`` (the
  driver died, or it exited without saying it), it SIGKILLs every recorded process still alive and
  the process group each one leads (a Ray worker and a Lithops function lead their own), repeats
  until none is left, removes its folder (if it was given one) and exits.  With ``roots`` it also
  exits by itself once every process it recorded is gone (an in-process ``ray.shutdown()``).

With a folder the record is kept in ``FOLDER/children.json`` too, so a later run can clean up after a
watchdog that died as well (:func:`spotwise.planes.serverless.reaper.reap_stale`).
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

#: the file in a watched folder that names the driver and the processes recorded
STATE_FILE = "children.json"
#: seconds between two looks at the processes guarded
POLL_S = 0.25
#: seconds the watchdog keeps killing after the driver died (processes that forked meanwhile)
KILL_ROUNDS_S = 3.0

#: a process: (pid, start time in clock ticks since boot)
Proc = tuple[int, int]


def die_with_parent() -> None:
    """``preexec_fn``: the child gets SIGKILL when the thread that started it dies (Linux; else nothing)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
    except Exception:  # never fail a spawn over it: the watchdog remains
        pass


def _stat(pid: int) -> tuple[int, int, str] | None:
    """(parent pid, start time in clock ticks, state letter) of ``pid`` from /proc; None if gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rfind(")") + 2:].split()
    try:
        return int(fields[1]), int(fields[19]), fields[0]
    except (IndexError, ValueError):
        return None


def start_time(pid: int) -> int | None:
    """The start time of ``pid`` (clock ticks since boot), None if it is gone."""
    st = _stat(pid)
    return None if st is None else st[1]


def _table() -> dict[int, tuple[int, int, str]]:
    """pid -> (parent pid, start time, state) of every process in /proc."""
    out: dict[int, tuple[int, int, str]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return out
    for name in entries:
        if name.isdigit():
            st = _stat(int(name))
            if st is not None:
                out[int(name)] = st
    return out


def _closure(table: dict[int, tuple[int, int, str]], tops: dict[int, int]) -> dict[int, int]:
    """The processes of ``tops`` (pid -> start time) still alive in ``table`` and all their descendants."""
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    out: dict[int, int] = {}
    todo = [p for p, s in tops.items() if p in table and table[p][1] == s]
    while todo:
        pid = todo.pop()
        if pid in out:
            continue
        out[pid] = table[pid][1]
        todo.extend(children.get(pid, []))
    return out


def descendants(root: int) -> list[Proc]:
    """Every live descendant of ``root`` as (pid, start time), from /proc (empty where there is none)."""
    table = _table()
    if root not in table:
        return []
    return sorted((p, s) for p, s in _closure(table, {root: table[root][1]}).items() if p != root)


def _same(pid: int, start: int) -> bool:
    """``pid`` is still the process that started at ``start`` (a zombie counts as gone)."""
    st = _stat(pid)
    return st is not None and st[1] == start and st[2] != "Z"


def alive(procs: list[Proc] | dict[int, int]) -> list[Proc]:
    """The processes of ``procs`` still running (the same ones: their start times match)."""
    items = procs.items() if isinstance(procs, dict) else procs
    return [(p, s) for p, s in items if _same(p, s)]


def kill_recorded(procs: list[Proc]) -> None:
    """SIGKILL every recorded process still alive (the same one: its start time matches) and the
    process group it leads (a Ray worker's or a Lithops function's own subprocesses)."""
    for pid, start in procs:
        if pid == os.getpid() or not _same(pid, start):
            continue
        try:
            if os.getpgid(pid) == pid:
                os.killpg(pid, signal.SIGKILL)
            else:
                os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def _write_state(folder: Path, driver: Proc, procs: list[Proc]) -> None:
    tmp = folder / f".{STATE_FILE}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump({"driver": list(driver), "children": [list(p) for p in procs]}, f)
        os.replace(tmp, folder / STATE_FILE)
    except OSError:
        pass


class Watchdog:
    """The watchdog process of this driver (see the module docstring).

    ``folder``: where the record is kept, removed when the driver dies (None: no record);
    ``roots``: the processes guarded with their descendants (None: every descendant of the driver).
    """

    def __init__(self, folder: str | Path | None = None, roots: list[Proc] | None = None) -> None:
        self.folder = None if folder is None else Path(folder)
        self.roots = None if roots is None else list(roots)
        self.proc: subprocess.Popen[bytes] | None = None
        if self.roots is not None and not self.roots:
            raise ValueError("a watchdog of given processes needs at least one (roots=None: every descendant)")
        argv = [sys.executable, "-I", "-S", __file__, str(os.getpid()), str(self.folder) if self.folder else "-",
                "all" if self.roots is None else "roots", *(f"{p}:{s}" for p, s in self.roots or [])]
        try:
            self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                         start_new_session=True, close_fds=True)
        except OSError:  # no watchdog: the parent-death signals remain
            self.proc = None

    def running(self) -> bool:
        """Whether the watchdog process is still watching (it ends by itself once what it guards is gone)."""
        return self.proc is not None and self.proc.poll() is None

    def close(self) -> None:
        """The driver ends normally: the watchdog exits without killing anything."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        try:
            assert proc.stdin is not None
            proc.stdin.write(b"done\n")
            proc.stdin.close()
        except (OSError, ValueError):
            pass
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def children() -> set[Proc]:
    """This process's children now, as (pid, start time)."""
    me = os.getpid()
    return {(pid, st[1]) for pid, st in _table().items() if st[0] == me}


def _kill_all(seen: dict[int, int]) -> None:
    """SIGKILL what was recorded and whatever it forked meanwhile, until none is left (bounded)."""
    end = time.monotonic() + KILL_ROUNDS_S
    while True:
        seen.update(_closure(_table(), seen))
        left = alive(seen)
        if not left or time.monotonic() >= end:
            return
        kill_recorded(left)
        time.sleep(0.05)


def _watch(driver_pid: int, folder: Path | None, roots: dict[int, int] | None) -> None:
    """The watchdog's loop (this file run as a script)."""
    start = start_time(driver_pid)
    if start is None or os.getppid() != driver_pid:
        return
    driver = (driver_pid, start)
    me = os.getpid()
    seen: dict[int, int] = dict(roots or {})
    stdin = sys.stdin.buffer
    said = b""
    while True:
        ready, _, _ = select.select([stdin], [], [], POLL_S)
        if ready:
            chunk = os.read(stdin.fileno(), 64)
            if chunk:
                said += chunk
                continue
            break  # the pipe closed: the driver ended (said done) or died
        if os.getppid() != driver_pid:
            break
        table = _table()
        now = _closure(table, seen if roots is not None else {driver_pid: start})
        now.pop(me, None)
        if roots is None:
            now.pop(driver_pid, None)
        if now.keys() - seen.keys():
            seen.update(now)
            seen = {p: s for p, s in seen.items() if p in table and table[p][1] == s}
            if folder is not None:
                _write_state(folder, driver, sorted(seen.items()))
        if roots is not None and not alive(seen):
            return  # everything it guards ended (an in-process ray.shutdown()): nothing left to watch
    if b"done" in said:
        return
    _kill_all(seen)
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)


def _parse_roots(mode: str, args: list[str]) -> dict[int, int] | None:
    if mode == "all":
        return None
    out: dict[int, int] = {}
    for a in args:
        pid, _, st = a.partition(":")
        out[int(pid)] = int(st)
    return out


if __name__ == "__main__":  # the watchdog process: watchdog.py DRIVER_PID FOLDER|- all|roots [PID:START ...]
    _watch(int(sys.argv[1]), None if sys.argv[2] == "-" else Path(sys.argv[2]), _parse_roots(sys.argv[3], sys.argv[4:]))
