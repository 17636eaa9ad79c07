"""Ending a process session a test started (``start_new_session=True``): the CLI and every process it left
behind -- Ray's daemons and workers included -- found by their session id in ``/proc`` and killed, by pid
(never ``ray stop``, which would end other tests' Ray)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path


def session_pids(sid: int) -> list[int]:
    """The pids of the processes whose session id is ``sid``."""
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if int((d / "stat").read_text().rsplit(")", 1)[1].split()[3]) == sid:
                    out.append(int(d.name))
            except (OSError, ValueError, IndexError):
                continue
    return out


def kill_session(sid: int, rounds: int = 20) -> None:
    """SIGKILL every process of session ``sid``, again until none is left (or ``rounds`` passes)."""
    for _ in range(rounds):
        pids = session_pids(sid)
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.3)
