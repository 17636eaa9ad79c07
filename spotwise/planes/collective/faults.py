"""Faults a test injects into a collective member at a step (``CollectivePlane(faults=...)``).

``{"step": s, "action": a, "seconds": t}``, the action one of:

* ``exit`` -- the process exits at once (a killed VM);
* ``stop`` -- SIGSTOP for good (a frozen VM: its heartbeat stops, it is found lost);
* ``pause`` -- SIGSTOP, continued after ``t`` seconds by a helper process (a VM stalled a while);
* ``sleep`` -- the step takes ``t`` seconds longer using no CPU (a member starved of CPU, or one
  evaluating between two steps, as its peers and the controller see it; its heartbeat goes on).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from typing import Any

ACTIONS = ("exit", "stop", "pause", "sleep")


def inject(fault: dict[str, Any]) -> subprocess.Popen[bytes] | None:
    """Do ``fault`` in this process now; a ``pause`` returns its helper process (reaped by its owner)."""
    action = fault.get("action", "exit")
    if action not in ACTIONS:
        raise ValueError(f"unknown fault action {action!r}: one of {', '.join(ACTIONS)}")
    if action == "sleep":
        time.sleep(float(fault["seconds"]))
        return None
    if action == "pause":
        helper = subprocess.Popen(["/bin/sh", "-c", f"sleep {float(fault['seconds']):.3f}; kill -CONT {os.getpid()}"])
        os.kill(os.getpid(), signal.SIGSTOP)
        return helper
    if action == "stop":
        os.kill(os.getpid(), signal.SIGSTOP)
        return None
    os._exit(3)
