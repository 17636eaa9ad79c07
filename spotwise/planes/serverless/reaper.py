"""Children never outlive a killed driver (issue 30 item 7).

A serverless run starts processes of its own: a private ``redis-server`` (in its own session, so a
Ctrl-C to the terminal's group does not kill the store before the supervisor stops the functions)
and Lithops's function processes (each in a session of its own too).  When the driver is killed
with SIGKILL no ``finally`` runs, and they were left running, with the private 0700 folder that
holds the store's password.  Three guards:

* :func:`die_with_parent` -- the ``preexec_fn`` of the processes spotwise spawns itself
  (``redis-server``): Linux's ``PR_SET_PDEATHSIG`` sends them SIGKILL the moment the driver dies.
* :class:`Watchdog` -- a small process (this file run as a script, standard library only) in a
  session of its own that watches the driver through a pipe: every few tenths of a second it
  records the driver's descendants (pid and start time) in ``FOLDER/children.json``; when the pipe
  closes without the driver's ``done`` (the driver died), it kills them (and the process groups
  they lead), removes ``FOLDER`` and exits.  After a normal end the driver says ``done`` and the
  watchdog exits without touching anything.
* :func:`reap_stale` -- run when a private store starts: a ``spotwise-redis-*`` / ``spotwise-run-*``
  folder of this user whose driver (``children.json``) is gone is cleaned the same way, in case
  the watchdog died too (an OOM kill, a reboot).
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

#: the file in the watched folder that names the driver and its descendants
STATE_FILE = "children.json"
#: folder name prefixes a serverless run's private temporary folders have
PREFIXES = ("spotwise-redis-", "spotwise-run-")
#: seconds between two looks at the driver's descendants
POLL_S = 0.25


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


def _stat(pid: int) -> tuple[int, int] | None:
    """(parent pid, start time in clock ticks) of ``pid`` from /proc; None if gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rfind(")") + 2:].split()
    try:
        return int(fields[1]), int(fields[19])
    except (IndexError, ValueError):
        return None


def descendants(root: int) -> list[tuple[int, int]]:
    """Every live descendant of ``root`` as (pid, start time), from /proc (empty where there is none)."""
    children: dict[int, list[tuple[int, int]]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for name in entries:
        if not name.isdigit():
            continue
        st = _stat(int(name))
        if st is not None:
            children.setdefault(st[0], []).append((int(name), st[1]))
    out: list[tuple[int, int]] = []
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child[0])
    return out


def _same(pid: int, start: int) -> bool:
    st = _stat(pid)
    return st is not None and st[1] == start


def kill_recorded(procs: list[tuple[int, int]]) -> None:
    """SIGKILL every recorded process still alive (the same one: its start time matches) and the
    process group it leads (a Lithops function's own subprocesses)."""
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


def _read_state(folder: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((folder / STATE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):  # standard library only (run as a script): not safeparse
        return None
    return data if isinstance(data, dict) else None


def _write_state(folder: Path, driver: tuple[int, int], procs: list[tuple[int, int]]) -> None:
    tmp = folder / f".{STATE_FILE}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump({"driver": list(driver), "children": [list(p) for p in procs]}, f)
        os.replace(tmp, folder / STATE_FILE)
    except OSError:
        pass


def reap_stale(roots: list[str] | None = None) -> list[str]:
    """Clean the private folders of dead runs (see the module docstring); returns the folders removed."""
    removed: list[str] = []
    uid = os.getuid() if hasattr(os, "getuid") else None
    for root in roots if roots is not None else sorted({tempfile.gettempdir(), "/tmp"}):
        try:
            names = os.listdir(root)
        except OSError:
            continue
        for name in names:
            folder = Path(root) / name
            if not name.startswith(PREFIXES):
                continue
            try:
                st = folder.lstat()
            except OSError:
                continue
            if not folder.is_dir() or folder.is_symlink() or (uid is not None and st.st_uid != uid):
                continue
            state = _read_state(folder)
            if state is None:
                continue  # no watchdog record (an older run, or one still starting): not ours to judge
            try:
                driver = (int(state["driver"][0]), int(state["driver"][1]))
                procs = [(int(p), int(s)) for p, s in state.get("children", [])]
            except (KeyError, TypeError, ValueError, IndexError):
                continue
            if _same(*driver):
                continue  # its driver is alive
            kill_recorded(procs)
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(str(folder))
    return removed


class Watchdog:
    """The watchdog process of one driver over ``folder`` (see the module docstring); ``None``: a
    private ``spotwise-run-*`` folder of its own (an operator's Redis: no private store folder),
    removed by :meth:`close`."""

    def __init__(self, folder: str | Path | None) -> None:
        self.owned = folder is None
        self.folder = Path(tempfile.mkdtemp(prefix=PREFIXES[1])) if folder is None else Path(folder)
        self.proc: subprocess.Popen[bytes] | None = None
        try:
            self.proc = subprocess.Popen([sys.executable, "-I", "-S", __file__, str(os.getpid()), str(self.folder)],
                                         stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                         start_new_session=True, close_fds=True)
        except OSError:  # no watchdog: the parent-death signal and reap_stale remain
            self.proc = None

    def close(self) -> None:
        """The driver ends normally: the watchdog exits without killing anything."""
        proc, self.proc = self.proc, None
        if self.owned:
            shutil.rmtree(self.folder, ignore_errors=True)
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


def _watch(driver_pid: int, folder: Path) -> None:
    """The watchdog's loop (this file run as a script)."""
    start = _stat(driver_pid)
    if start is None or os.getppid() != driver_pid:
        return
    driver = (driver_pid, start[1])
    me = os.getpid()
    seen: dict[int, int] = {}
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
        now = {p: s for p, s in descendants(driver_pid) if p != me}
        if now.keys() - seen.keys():
            seen.update(now)
            seen = {p: s for p, s in seen.items() if _same(p, s)}
            _write_state(folder, driver, sorted(seen.items()))
    if b"done" in said:
        return
    kill_recorded(sorted(seen.items()))
    time.sleep(0.2)
    kill_recorded(sorted(seen.items()))  # a process group that forked meanwhile
    shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":  # the watchdog process: reaper.py DRIVER_PID FOLDER
    _watch(int(sys.argv[1]), Path(sys.argv[2]))
