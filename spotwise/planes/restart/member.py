"""A restart-mode member: the process (a Ray actor) that runs one rank of the user's script (issue 55 item 6).

:class:`RestartMember` starts the script as a child process (``python -m spotwise.planes.restart.boot
SCRIPT ARGS``, :mod:`spotwise.planes.restart.boot`) with torchrun's environment for its generation,
signals it (SIGTERM: the script's own handler may save), kills it (its whole process group: the
script's DataLoader workers too), and keeps the last lines it printed (they are also written to the
member's own output, Ray's log of the actor) for the coordinator's messages.  The child dies with
the member (``PR_SET_PDEATHSIG``), so a revoked member -- its actor killed -- takes its script along.
What the script prints is also appended to the run directory (``script-logs/member-<slot>.log``), line by
line, so the lines of a member revoked later are kept.
"""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
import threading
from typing import Any

from spotwise.planes.ps.compute import RayCompute

#: lines of a script's output a member keeps for the coordinator's messages
TAIL_LINES = 40


class RestartMember:
    """One member slot's process (module docstring); ``device`` is the job's member device."""

    def __init__(self, device: str = "cpu") -> None:
        self.device = str(device)
        self.proc: subprocess.Popen[bytes] | None = None
        self.tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
        self._reader: threading.Thread | None = None
        self.log: Any = None  # the run directory's file of what this member's scripts printed

    def ready(self) -> int:
        return os.getpid()

    def start(self, script: str, args: list[str], env: dict[str, str], cwd: str,
              log: tuple[str, str] | None = None) -> int:
        """Start the script (ending one still running first); returns its pid.  ``log``: (run directory, file
        below it) to append what the script prints to (never through a link: :func:`open_run_writer`)."""
        self.kill()
        if log is not None:
            from spotwise.rundir_files import open_run_writer

            self.log = open_run_writer(log[0], log[1], append=True)
            self.log.write(f"--- generation {env.get('SPOTWISE_GEN', '?')}: rank {env.get('RANK', '?')} of "
                           f"{env.get('WORLD_SIZE', '?')} ---\n")
            self.log.flush()
        full = dict(os.environ)
        full.update({k: str(v) for k, v in env.items()})
        full["SPOTWISE_PARENT_PID"] = str(os.getpid())
        full.setdefault("PYTHONUNBUFFERED", "1")
        self.tail.clear()
        self.proc = subprocess.Popen([sys.executable, "-m", "spotwise.planes.restart.boot", script, *args], env=full,
                                     cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        self._reader = threading.Thread(target=self._read, args=(self.proc,), daemon=True, name="script-output")
        self._reader.start()
        return int(self.proc.pid)

    def _read(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            self.tail.append(line)
            sys.stdout.write(line + "\n")
            log = self.log
            if log is not None:
                try:
                    log.write(line + "\n")
                    log.flush()
                except (OSError, ValueError):  # a full disk, a closed file: the output still goes to Ray's log
                    pass
        sys.stdout.flush()

    def poll(self) -> int | None:
        """The script's exit status (negative: the signal that ended it), None while it runs or none was started."""
        return None if self.proc is None else self.proc.poll()

    def signal(self, signum: int) -> bool:
        """Send ``signum`` to the script (its process only: its own handler decides); False if it is not running."""
        p = self.proc
        if p is None or p.poll() is not None:
            return False
        try:
            os.kill(p.pid, int(signum))
        except ProcessLookupError:
            return False
        return True

    def kill(self) -> int | None:
        """End the script and everything in its process group now; its exit status."""
        p = self.proc
        if p is None:
            return None
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        rc = p.wait()
        if self._reader is not None:
            self._reader.join(timeout=2.0)
        if self.log is not None:
            self.log.close()
            self.log = None
        return rc

    def output_tail(self) -> list[str]:
        return list(self.tail)

    def __del__(self) -> None:  # pragma: no cover - the actor's process ends
        try:
            self.kill()
        except Exception:
            pass


_REMOTE: dict[str, Any] = {}


def remote_restart_member_class() -> Any:
    """The Ray actor class (created lazily so importing this module does not import Ray)."""
    if "cls" not in _REMOTE:
        import ray

        _REMOTE["cls"] = ray.remote(max_restarts=0, max_task_retries=0)(RestartMember)
    return _REMOTE["cls"]


class RestartCompute(RayCompute):
    """Member actors that run the script's ranks (:class:`~spotwise.planes.restart.member.RestartMember`)."""

    def _start_actor(self, low: bool = False) -> tuple[Any, Any]:
        opts = dict(self.actor_options)
        device = self.worker_args[4] if len(self.worker_args) > 4 else "cpu"
        actor = remote_restart_member_class().options(**opts).remote(device)
        self.spawned += 1
        return actor, actor.ready.remote()

    def _no_calls(self, *_: Any, **__: Any) -> Any:
        raise TypeError("restart mode has no per-step calls: the script's ranks run on their own")

    share = submit = gather = result = _no_calls  # type: ignore[assignment]
