"""``spotwise runs [DIR]`` and ``spotwise status DIR`` (issue 29): which runs there are, and how one is doing.

A run directory is one holding spotwise's files (``summary.json``, ``events.jsonl``, ``spec.json`` or the
marker, :mod:`spotwise.rundir`).  Its state comes from ``summary.json`` when the run has finished, else
from the event log (``events.jsonl``, :mod:`spotwise.events`), which a run appends to as it goes, and from
whether the run's lock (``.spotwise.lock``) is held: a log without an ``end`` event whose lock nobody
holds belongs to a run that was interrupted (killed, or the machine went away).

Statuses: ``running``, ``completed``, ``failed`` (no progress, no capacity, a failed store),
``diverged`` (a non-finite loss), ``stopped`` (the budget or a policy stopped it), ``interrupted``;
and, for ``runs`` only, ``unreadable`` (the directory's files are malformed; the row says why).

Run directories are untrusted input: only regular files are read (a symlink is never followed, a
FIFO never opened), each with a size cap; the event log of a long run is read from its end.
"""

from __future__ import annotations

import errno
import fcntl
import functools
import os
import stat
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from spotwise.control.phases import phase_line, totals_of
from spotwise.errors import InputError
from spotwise.rundir_files import read_run_file, read_run_tail
from spotwise.safeparse import loads_json
from spotwise.reports.terminal_text import display_copy, safe_cells, safe_text
from spotwise.reports.units import human_duration, humanize_seconds

#: bytes read of summary.json / spec.json at most
SMALL_CAP = 8 * 1024 * 1024
#: bytes read from the end of events.jsonl (``runs`` / ``status``)
EVENTS_TAIL_RUNS = 2 * 1024 * 1024
EVENTS_TAIL_STATUS = 64 * 1024 * 1024
#: how deep ``runs`` looks below DIR, and how many directories it visits at most
MAX_DEPTH = 4
MAX_DIRS = 20000
_RUN_NAMES = ("summary.json", "events.jsonl", "spec.json", ".spotwise-run")
_SKIP = {"checkpoints", "report", "__pycache__", ".git", "node_modules", ".venv"}
_FAMILY = {"completed": "completed", "nonfinite": "diverged", "diverged": "diverged", "failed": "failed",
           "no-progress": "failed", "no-capacity": "failed", "infeasible": "failed",
           "budget-exhausted": "stopped", "stopped": "stopped", "interrupted": "interrupted"}


class RunDirError(Exception):
    """A run directory whose files cannot be read as spotwise wrote them (the message says which and why);
    ``cause``: the InputError behind it, when one says how to fix it (a URI's object over a cap)."""

    def __init__(self, message: str, cause: InputError | None = None) -> None:
        super().__init__(message)
        self.cause = cause


@dataclass
class RunState:
    """One run directory's state; ``to_dict`` is the ``--json`` form (times in seconds)."""

    dir: str
    name: str
    status: str
    detail: str = ""
    job: str | None = None
    mode: str | None = None
    steps: int | None = None
    target_steps: int | None = None
    samples: int | None = None
    loss: float | None = None
    cost_usd: float | None = None
    virtual_s: float | None = None
    wall_s: float | None = None
    deadline_s: float | None = None
    time_left_s: float | None = None
    deadline_met: bool | None = None
    workers_active: int | None = None
    workers: int | None = None
    revocations: int | None = None
    joins: int | None = None
    last_decision: str | None = None
    #: where the timed steps' time went, by phase (spotwise.control.phases; collective runs)
    step_phases: dict[str, Any] | None = None
    #: steps redone and restart mode's restarts (:func:`spotwise.reports.run.data.lost_work`)
    lost_work: dict[str, Any] | None = None
    #: issue 41 item 6: the latest value of each metric a training script logged (``job.log``), and its step
    metrics: dict[str, float] = field(default_factory=dict)
    metrics_step: int | None = None
    updated_age_s: float | None = None
    lock_pid: int | None = None
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# ------------------------------------------------------------------------------------- safe reading
def _read(d: Path, name: str, cap: int, *, tail: bool = False) -> tuple[bytes, bool] | None:
    """The bytes of the regular file ``d/name`` (None if absent) and whether its start was cut (``tail``).

    Read by the run directory's one safe reader (:mod:`spotwise.rundir_files`): a symlink (live,
    dangling or a loop) is never followed, a FIFO never blocks, a device or folder is refused; at
    most ``cap`` bytes (its end with ``tail``).  Every refusal is a :class:`RunDirError` naming the file."""
    if not os.path.lexists(d / name):
        return None
    try:
        if tail:
            return read_run_tail(d, name, cap)
        return read_run_file(d, name, cap=cap), False
    except InputError as e:
        raise RunDirError(e.what) from None


def _json_object(d: Path, name: str) -> dict[str, Any] | None:
    got = _read(d, name, SMALL_CAP)
    if got is None:
        return None
    try:
        obj = loads_json(got[0].decode("utf-8"), name, name)
    except (UnicodeDecodeError, ValueError):
        raise RunDirError(f"{name} is not valid JSON (truncated or corrupted)") from None
    except InputError:
        raise RunDirError(f"{name} is nested too deeply (not one spotwise wrote)") from None
    if not isinstance(obj, dict):
        raise RunDirError(f"{name} does not hold one JSON object")
    return obj


def _events(d: Path, cap: int) -> tuple[list[dict[str, Any]], bool] | None:
    """The event log's events (from its end when longer than ``cap``) and whether its start was cut.
    A torn last line (a write in progress) is skipped; a malformed line elsewhere is a RunDirError."""
    got = _read(d, "events.jsonl", cap, tail=True)
    if got is None:
        return None
    raw, cut = got
    if cut and b"\n" not in raw:  # e.g. a 10 GB sparse file: no event in the part read
        raise RunDirError(f"events.jsonl is larger than {cap // (1024 * 1024)} MiB and its last {cap // (1024 * 1024)} MiB "
                          "hold no complete line (not a spotwise event log)")
    lines = raw.split(b"\n")
    if cut:
        lines = lines[1:]  # the first line read is a piece of a line
    events: list[dict[str, Any]] = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        last = i == len(lines) - 1  # no newline after it: possibly being written right now
        try:
            ev = loads_json(line.decode("utf-8"), "events.jsonl", "event")
        except (UnicodeDecodeError, ValueError):
            if last:
                break
            raise RunDirError("events.jsonl has a line that is not JSON (corrupted)") from None
        except InputError:
            raise RunDirError("events.jsonl has a line nested too deeply (not a spotwise event)") from None
        if not isinstance(ev, dict) or not isinstance(ev.get("kind"), str) or not _num(ev.get("t")):
            raise RunDirError("events.jsonl holds a line that is not a spotwise event")
        events.append(ev)
    if not cut and events and events[0].get("kind") != "header":
        raise RunDirError("events.jsonl does not start with a header (not a spotwise event log)")
    return events, cut


def _num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def lock_holder(d: Path) -> int | None:
    """The pid holding the run's lock (0 when unknown), or None when nobody holds it."""
    p = d / ".spotwise.lock"
    try:
        if not stat.S_ISREG(os.lstat(p).st_mode):
            return None
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError as e:
            if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                try:
                    text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
                except OSError:
                    text = ""
                return int(text) if text.isdigit() else 0
            return None
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


# ------------------------------------------------------------------------------------------- state
def is_run_dir(d: Path) -> bool:
    """Whether ``d`` holds one of spotwise's run files (any kind of entry: a bad one is reported, not hidden)."""
    return any(os.path.lexists(d / n) for n in _RUN_NAMES)


def _spec_numbers(spec: dict[str, Any] | None) -> tuple[str | None, int | None, float | None]:
    if not isinstance(spec, dict):
        return None, None, None
    target = spec.get("target") if isinstance(spec.get("target"), dict) else {}
    it = target.get("iterations")
    dl = spec.get("deadline")
    name = spec.get("name")
    return (name if isinstance(name, str) else None, int(it) if _num(it) else None, float(dl) if _num(dl) else None)


def _from_summary(st: RunState, s: dict[str, Any]) -> None:
    status = s.get("status")
    if not isinstance(status, str) or not _num(s.get("cost_usd")) or not _num(s.get("steps")):
        raise RunDirError("summary.json lacks status, steps or cost_usd (not a spotwise summary)")
    st.detail, st.status = status, _FAMILY.get(status, status)
    st.mode = s.get("mode") if isinstance(s.get("mode"), str) else None
    st.steps, st.cost_usd = int(s["steps"]), float(s["cost_usd"])
    st.virtual_s = float(s["virtual_s"]) if _num(s.get("virtual_s")) else None
    st.wall_s = float(s["wall_s"]) if _num(s.get("wall_s")) else None
    st.loss = float(s["final_loss"]) if _num(s.get("final_loss")) else None
    st.revocations = int(s["revocations"]) if _num(s.get("revocations")) else None
    st.joins = int(s["joins"]) if _num(s.get("joins")) else None
    ex = s.get("extra") if isinstance(s.get("extra"), dict) else {}
    st.samples = int(ex["samples"]) if _num(ex.get("samples")) else None
    if isinstance(ex.get("deadline_met"), bool):
        st.deadline_met = ex["deadline_met"]


def _from_events(st: RunState, events: list[dict[str, Any]], cut: bool, holder: int | None) -> None:
    header = events[0] if events and events[0].get("kind") == "header" else {}
    st.mode = st.mode or (header.get("mode") if isinstance(header.get("mode"), str) else None)
    st.job = st.job or (header.get("job") if isinstance(header.get("job"), str) else None)
    if _num(header.get("workers")):
        st.workers = int(header["workers"])
    steps = [e for e in events if e["kind"] == "step" and _num(e.get("step"))]
    if steps:
        last = steps[-1]
        st.steps = int(last["step"]) if st.steps is None else st.steps
        st.loss = float(last["loss"]) if st.loss is None and _num(last.get("loss")) else st.loss
        st.workers_active = int(last["active"]) if _num(last.get("active")) else None
        if st.cost_usd is None and _num(last.get("cost")):
            st.cost_usd = float(last["cost"])
    costs = [e for e in events if e["kind"] == "cost" and _num(e.get("total"))]
    if costs and st.cost_usd is None:
        st.cost_usd = float(costs[-1]["total"])
    if events and st.virtual_s is None:
        st.virtual_s = float(events[-1]["t"])
    walls = [e["wall"] for e in events if _num(e.get("wall"))]
    if walls and st.wall_s is None:
        st.wall_s = float(walls[-1])
    if st.revocations is None and not cut:
        st.revocations = sum(1 for e in events if e["kind"] == "revoke")
    if st.joins is None and not cut:
        st.joins = sum(1 for e in events if e["kind"] == "join")
    st.step_phases = totals_of(events).summary()
    if not cut:
        from spotwise.reports.run.data import lost_work

        st.lost_work = lost_work([e for e in events if e["kind"] == "rollback"], [e for e in events if e["kind"] == "restart"])
    for e in events:
        if e["kind"] == "metrics" and isinstance(e.get("values"), dict):
            st.metrics.update({str(k): float(v) for k, v in e["values"].items() if _num(v)})
            st.metrics_step = int(e["step"]) if _num(e.get("step")) else st.metrics_step
    dec = [e for e in events if e["kind"] == "decision"]
    if dec:
        st.last_decision = humanize_seconds(f"{dec[-1].get('policy')}: {dec[-1].get('decision')} ({dec[-1].get('reason')})")[:200]
    if cut:
        st.notes.append("the event log is long: counts are of its last part only")
    if st.detail:  # summary.json said how it ended
        return
    ends = [e for e in events if e["kind"] == "end"]
    if ends and isinstance(ends[-1].get("status"), str):
        st.detail = ends[-1]["status"]
        st.status = _FAMILY.get(st.detail, st.detail)
    elif holder is not None:
        st.status, st.detail = "running", "running"
    else:
        st.status, st.detail = "interrupted", "no end event and no process holds the run's lock"


def last_event_age(modified: float | None, now: float | None = None) -> float | None:
    """Seconds since the run's last event, from when its event log was last written (``modified``, seconds
    since the epoch: the local file's or the bucket object's modification time).  An event's ``wall``
    counts from the run's start, not from the epoch, so it never gives an age on its own (issue 54 item 9)."""
    if modified is None:
        return None
    return max(0.0, (time.time() if now is None else now) - modified)


def run_state(d: Path, name: str | None = None, *, events_cap: int = EVENTS_TAIL_STATUS,
              holder: int | None | bool = False, modified: float | None = None) -> RunState:
    """The state of the run directory ``d``; RunDirError when its files are malformed.  ``holder``: who
    holds the run (a pid, or None for nobody) when it is known otherwise (a URI's lease,
    :mod:`spotwise.remote.view`); by default the lock file in ``d`` says.  ``modified``: when the event
    log was last written where the run writes it (a bucket's object, for a downloaded copy); by default
    the modification time of ``d/events.jsonl``."""
    st = RunState(dir=str(d), name=name or d.name, status="unknown")
    spec = _json_object(d, "spec.json")
    summary = _json_object(d, "summary.json")
    st.job, st.target_steps, st.deadline_s = _spec_numbers(spec if spec is not None else (summary or {}).get("spec"))
    holder = lock_holder(d) if holder is False else holder
    if d.name == "on-demand" and not os.path.lexists(d / ".spotwise.lock") and is_run_dir(d.parent):
        holder = holder if holder is not None else lock_holder(d.parent)  # the baseline runs under its spot run's lock
        st.target_steps = None  # its step target is only a bound: it stops at the spot run's samples
        st.notes.append("the measured on-demand baseline of the run above: it stops at the spot run's samples")
    st.lock_pid = holder or None
    if summary is not None:
        _from_summary(st, summary)
        if st.detail == "running" and holder is None:
            st.status, st.detail = "interrupted", "summary says running, but no process holds the run's lock"
    got = _events(d, events_cap)
    if got is not None:
        _from_events(st, *got, holder)
        if modified is None:
            try:
                modified = os.lstat(d / "events.jsonl").st_mtime
            except OSError:
                pass
        st.updated_age_s = last_event_age(modified)
    elif summary is None:
        if (d / "sweep.json").is_file() and not (d / "sweep.json").is_symlink():
            st.status, st.detail = "completed", "trace sweep (spotwise report DIR shows it)"
            return st
        if spec is None:
            raise RunDirError("no summary.json, events.jsonl or spec.json (an empty or foreign run directory)")
        st.status, st.detail = ("running", "starting") if holder is not None else ("interrupted", "no events written")
    if st.deadline_s is not None and st.virtual_s is not None:
        st.time_left_s = st.deadline_s - st.virtual_s
        if st.deadline_met is None and st.status == "completed":
            st.deadline_met = st.virtual_s <= st.deadline_s
    return st


def find_runs(root: Path, *, max_depth: int = MAX_DEPTH, notes: list[str] | None = None) -> list[Path]:
    """Run directories at or below ``root`` (symlinked directories are not followed), sorted by path.

    Linear in the entries below ``root`` (one ``scandir`` per folder; files, FIFOs and links are
    skipped by their directory entry, never opened); at most :data:`MAX_DIRS` folders are visited,
    and ``notes`` (if given) receives a line saying so when the walk stopped there."""
    found: list[Path] = []
    stack: list[tuple[Path, int]] = [(root, 0)]
    visited = 0
    while stack and visited < MAX_DIRS:
        d, depth = stack.pop()
        visited += 1
        if is_run_dir(d):
            found.append(d)
        if depth >= max_depth:
            continue
        try:
            with os.scandir(d) as it:
                subs = [Path(e.path) for e in it if e.name not in _SKIP and e.is_dir(follow_symlinks=False)]
        except OSError:
            continue
        stack.extend((s, depth + 1) for s in sorted(subs, reverse=True))
    if stack and notes is not None:
        notes.append(f"stopped after {MAX_DIRS:,} folders below {root}: run directories further on are not listed "
                     "(pass a narrower DIR)")
    return sorted(found)


def list_runs(root: str | os.PathLike[str] = ".", notes: list[str] | None = None) -> list[RunState]:
    """``spotwise runs DIR``: one state per run directory below ``root``; a malformed one (a link, FIFO,
    device, folder or oversized file under one of its names) is ``unreadable``, its row saying which and why.
    ``notes`` receives a line when the walk stopped early (:func:`find_runs`)."""
    r = Path(root)
    if not r.exists():
        raise InputError("directory not found", "pass a folder that holds run directories (default: the current one)", str(r))
    if not r.is_dir():
        raise InputError("not a directory", "pass the folder that holds run directories, e.g. spotwise runs runs/", str(r))
    out = []
    for d in find_runs(r, notes=notes):
        name = "." if d == r else str(d.relative_to(r))
        out.append(listed_state(str(d), name, functools.partial(run_state, d, name, events_cap=EVENTS_TAIL_RUNS)))
    return out


def listed_state(where: str, name: str, read: Callable[[], RunState]) -> RunState:
    """One row of ``spotwise runs`` (a folder's or a URI prefix's): ``read()``, or an ``unreadable`` row
    saying why when the run's files cannot be read (the other runs are still listed)."""
    try:
        return read()
    except RunDirError as e:
        return RunState(dir=where, name=name, status="unreadable", detail=str(e))


def unreadable_run(e: RunDirError, where: str) -> InputError:
    """``spotwise status`` of a run whose files cannot be read (a folder's or a URI's): exit 2 saying why."""
    if e.cause is not None:
        return e.cause
    return InputError(f"the run directory cannot be read: {e}",
                      "the run directory is damaged; rerun the job into a new --out (or resume it from a copy)", where)


def one_run(d: str | os.PathLike[str]) -> RunState:
    """``spotwise status DIR``: the run's state; InputError (exit 2) when DIR is not a readable run directory."""
    p = Path(d)
    if not p.is_dir():
        raise InputError("directory not found" if not p.exists() else "not a directory",
                         "pass a run directory (the --out of spotwise run or simulate); spotwise runs lists them", str(p))
    if not is_run_dir(p):
        raise InputError("not a spotwise run directory (no summary.json, events.jsonl or spec.json)",
                         "pass the --out directory of spotwise run or simulate; spotwise runs DIR lists the runs below DIR",
                         str(p))
    try:
        return run_state(p, p.name)
    except RunDirError as e:
        raise unreadable_run(e, str(p)) from None


# ------------------------------------------------------------------------------------------ tables
def _progress(s: RunState) -> str:
    if s.steps is None:
        if s.status != "running":
            return "-"
        return f"0/{s.target_steps}" if s.target_steps else "0"
    if s.target_steps and (s.status != "completed" or s.steps == s.target_steps):
        return f"{s.steps}/{s.target_steps}"
    return str(s.steps)  # a finished run that stopped on another target (a loss, the baseline's samples)


def _left(s: RunState) -> str:
    if s.deadline_met is not None and s.status != "running":
        return "met" if s.deadline_met else "missed"
    if s.time_left_s is None:
        return "-"
    return human_duration(s.time_left_s) if s.time_left_s >= 0 else f"over by {human_duration(-s.time_left_s)}"


def runs_table(states: list[RunState]) -> Any:
    """``spotwise runs``: one row per run directory."""
    from rich.table import Table

    states = [display_copy(s) for s in states]  # names, details: untrusted text (spotwise.reports.terminal_text)
    t = Table(title=f"{len(states)} run(s)", title_justify="left")
    t.add_column("run", overflow="fold", ratio=1)
    t.add_column("status", no_wrap=True)
    t.add_column("steps", justify="right", no_wrap=True)
    t.add_column("cost", justify="right", no_wrap=True)
    t.add_column("deadline", justify="right", no_wrap=True)
    t.add_column("left", justify="right", no_wrap=True)
    for s in states:
        style = {"running": "bold", "unreadable": "red", "failed": "red", "diverged": "red", "interrupted": "yellow"}.get(s.status)
        t.add_row(*safe_cells(s.name, s.status, _progress(s), "-" if s.cost_usd is None else f"${s.cost_usd:.4g}",
                              human_duration(s.deadline_s), _left(s)), style=style)
    return t


def status_table(s: RunState) -> Any:
    """``spotwise status DIR``: the run, field by field."""
    from rich.table import Table

    s = display_copy(s)  # every string read from the run: untrusted text (spotwise.reports.terminal_text)
    t = Table(title=safe_text(f"run {s.job or s.name}: {s.status}"), show_header=False, title_justify="left")
    t.add_column("field", style="bold", no_wrap=True)
    t.add_column("value", overflow="fold")
    rows: list[tuple[str, str]] = [("directory", s.dir), ("status", s.status + (f" ({s.detail})" if s.detail not in ("", s.status) else "")
                                                          + (f", pid {s.lock_pid}" if s.lock_pid else ""))]
    if s.mode:
        rows.append(("mode", s.mode))
    pct = f" ({100 * s.steps / s.target_steps:.0f}%)" if s.steps is not None and s.target_steps else ""
    rows.append(("steps", _progress(s) + pct + (f"; {s.samples:,} samples" if s.samples is not None else "")))
    if s.loss is not None:
        rows.append(("loss", f"{s.loss:.4g}"))
    if s.workers_active is not None or s.workers is not None:
        rows.append(("workers", f"{'-' if s.workers_active is None else s.workers_active} active of {s.workers or '?'}"))
    rows.append(("cost so far" if s.status == "running" else "cost", "-" if s.cost_usd is None else f"${s.cost_usd:.4f}"))
    rows.append(("virtual time", human_duration(s.virtual_s)))
    rows.append(("deadline", human_duration(s.deadline_s) + ("" if s.deadline_s is None else f", {_left(s)}"
                                                             + (" left" if _left(s)[0].isdigit() else ""))))
    if s.revocations is not None or s.joins is not None:
        rev, joins = ("-" if v is None else str(v) for v in (s.revocations, s.joins))
        rows.append(("revocations / joins", f"{rev} / {joins}"))
    if s.lost_work:
        lw = s.lost_work
        rows.append(("lost work", (f"{lw['restarts']} restarts, " if lw["restarts"] else "")
                     + f"{lw['redone_steps']} steps redone"))
    if s.last_decision:
        rows.append(("last decision", s.last_decision))
    line = phase_line(s.step_phases)
    if line:
        rows.append(("step time", line))
    if s.metrics:  # what the training script logged
        shown = ", ".join(f"{k} {v:.4g}" for k, v in list(s.metrics.items())[:8])
        rows.append(("logged" + (f" (step {s.metrics_step})" if s.metrics_step is not None else ""), shown))
    rows.append(("wall time (training)", human_duration(s.wall_s)))
    if s.updated_age_s is not None:
        rows.append(("last event", f"{human_duration(s.updated_age_s)} ago"))
    rows += [("note", n) for n in s.notes]
    for k, v in rows:
        t.add_row(*safe_cells(k, v))
    return t


def watch_status(d: str | os.PathLike[str], console: Any, interval: float = 2.0, *, max_updates: int | None = None,
                 read: Any = None) -> RunState:
    """``spotwise status DIR --watch``: redraw the run's table every ``interval`` seconds while it runs.
    ``read``: how to read the state (default :func:`one_run` of ``d``; a URI's: :mod:`spotwise.remote.view`)."""
    import math

    from rich.live import Live

    if not (math.isfinite(interval) and interval > 0):
        raise InputError(f"--interval must be a positive number of seconds, got {interval!r}", "e.g. --interval 2", "--interval")
    read = read or (lambda: one_run(d))
    s = read()
    n = 0
    with Live(status_table(s), console=console, auto_refresh=False) as live:
        while s.status == "running" and (max_updates is None or n < max_updates):
            time.sleep(interval)
            s, n = read(), n + 1
            live.update(status_table(s), refresh=True)
    return s


__all__ = ["RunDirError", "RunState", "find_runs", "is_run_dir", "last_event_age", "list_runs", "listed_state",
           "lock_holder", "one_run", "run_state", "runs_table", "status_table", "unreadable_run", "watch_status"]
