"""Test helpers shared by the resume-equals-the-uninterrupted-run tests (``test_resume_same_run.py`` for the
VM planes, ``test_serverless_resume.py`` for the serverless plane): the summaries of two run directories,
field by field; and the processes a killed driver leaves (``test_driver_kill.py``, ``test_own_loop_kill.py``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from _leftovers import descendants


def flat(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``summary.json`` as ``{"a.b.c": value}`` (floats rounded to 12 digits: written and read back)."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict) and v:
            out.update(flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = round(v, 12) if isinstance(v, float) else v
    return out


def summary_differences(out: Path, full: Path, may_differ: tuple[str, ...]) -> dict[str, tuple[Any, Any]]:
    """The fields of the two run directories' summaries that differ, but those named in ``may_differ``
    (a name ending in ``.``: every field below it); a field only one of them has always counts."""
    a, b = (flat(json.loads((d / "summary.json").read_text())) for d in (out, full))
    return {k: (a.get(k, "<absent>"), b.get(k, "<absent>")) for k in sorted(set(a) | set(b))
            if (k not in a or k not in b) or (a[k] != b[k] and not any(
                k == m or (m.endswith(".") and k.startswith(m)) for m in may_differ))}


def _start_time(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:200]
    except OSError:
        return "?"


def record_descendants(root: int, seen: dict[int, tuple[int, str]]) -> None:
    """Add every live descendant of ``root`` to ``seen``: pid -> (start time, command line); the command line
    as it is now (a Ray worker renames itself ``ray::...`` once it runs a task or an actor)."""
    for pid in descendants(root):
        start = _start_time(pid)
        if start is not None and (pid not in seen or seen[pid][0] == start):
            seen[pid] = (start, _cmdline(pid))


def still_alive(seen: dict[int, tuple[int, str]]) -> list[str]:
    """The recorded processes still running (the same process: its start time matches; zombies count as gone)."""
    out = []
    for pid, (start, cmd) in sorted(seen.items()):
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state != "Z" and _start_time(pid) == start:
            out.append(f"{pid}: {cmd}")
    return out


def kill_driver_and_assert_none_outlives(proc: Any, seen: dict[int, tuple[int, str]]) -> None:
    """SIGKILL to the driver ``proc`` alone (not its session or group: no handler runs), then every process
    recorded in ``seen`` (Ray's daemons and workers among them: asserted) must be gone within ``bound(10)`` s."""
    import os
    import signal
    import time

    from _load import bound

    cmds = " ".join(c for _, c in seen.values())
    assert "raylet" in cmds and "ray::" in cmds, cmds  # the check is about Ray's processes: they were seen
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=bound(30))
    end = time.monotonic() + bound(10)
    while still_alive(seen) and time.monotonic() < end:
        time.sleep(0.2)
    left = still_alive(seen)
    assert not left, f"{len(left)} of {len(seen)} processes outlived the killed driver:\n" + "\n".join(left)


def end_what_is_left(proc: Any, seen: dict[int, tuple[int, str]]) -> None:
    """After the test, whatever the assertion found: the driver, its session (it led it) and, by pid and start
    time, every recorded process still running."""
    import os
    import signal

    from _sessions import kill_session

    if proc.poll() is None:
        proc.kill()
        proc.wait()
    kill_session(proc.pid)
    for pid in [p for p in seen if still_alive({p: seen[p]})]:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
