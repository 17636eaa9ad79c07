"""Children never outlive a killed driver, on the serverless plane (issue 30 item 7).

A serverless run starts processes of its own: a private ``redis-server`` (in its own session, so a
Ctrl-C to the terminal's group does not kill the store before the supervisor stops the functions)
and Lithops's function processes (each in a session of its own too).  When the driver is killed
with SIGKILL no ``finally`` runs, and they were left running, with the private 0700 folder that
holds the store's password.  The guards are :mod:`spotwise.watchdog`'s (the parent-death signal of
``redis-server``, a watchdog of every descendant of the driver while the plane runs) and, here:

* :class:`FolderWatchdog` -- that watchdog keeping its record in the run's private folder (the
  store's, or a ``spotwise-run-*`` folder of its own for an operator's Redis), removed with it;
* :func:`reap_stale` -- run when a private store starts: a ``spotwise-redis-*`` / ``spotwise-run-*``
  folder of this user whose driver (``children.json``) is gone is cleaned the same way, in case
  the watchdog died too (an OOM kill, a reboot).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from spotwise.errors import InputError
from spotwise.safeparse import loads_json
from spotwise.watchdog import STATE_FILE, Watchdog, _same, kill_recorded

#: folder name prefixes a serverless run's private temporary folders have
PREFIXES = ("spotwise-redis-", "spotwise-run-")
#: the most a watchdog's record may hold (bytes): a larger one is not this code's
_MAX_STATE = 1 << 20


def _read_state(folder: Path) -> dict[str, Any] | None:
    try:
        raw = (folder / STATE_FILE).read_bytes()[:_MAX_STATE + 1]
        data = loads_json(raw, str(folder / STATE_FILE), "watchdog record") if len(raw) <= _MAX_STATE else None
    except (OSError, InputError):
        return None
    return data if isinstance(data, dict) else None


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


class FolderWatchdog(Watchdog):
    """The watchdog of every descendant of this driver, its record in ``folder``; ``None``: a private
    ``spotwise-run-*`` folder of its own (an operator's Redis: no private store folder), removed by
    :meth:`close`."""

    def __init__(self, folder: str | Path | None) -> None:
        self.owned = folder is None
        super().__init__(Path(tempfile.mkdtemp(prefix=PREFIXES[1])) if folder is None else Path(folder))

    @property
    def path(self) -> Path:
        """The watched folder."""
        assert self.folder is not None
        return self.folder

    def close(self) -> None:
        """The driver ends normally: the watchdog exits without killing anything (its own folder goes)."""
        if self.owned:
            shutil.rmtree(self.path, ignore_errors=True)
        super().close()
