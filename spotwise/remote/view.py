"""``spotwise status URI`` and ``spotwise runs URI``: a cloud run followed from its ``outputs.uri`` (issue 42 item 6).

A run mirrors its directory to ``outputs.uri`` as it goes (:mod:`spotwise.remote.mirror`).  Reading
it back for a view downloads only fixed names -- ``spec.json``, ``summary.json``, ``events.jsonl``
and the marker, each a plain object within the input caps (:func:`~spotwise.remote.fetch._download`)
-- into a private temporary folder that the listing of the URI never names, and reads that folder
as a local run directory is read (:func:`~spotwise.reports.runs_view.run_state`).  Whether the run
is still going is the URI's lease (``lease.json``: a heartbeat younger than its TTL, the holder's
host and process named), as a local run's is its lock file; the time since the last event is
that event's own wall time, not the download's.  ``runs URI`` lists the run directories below
the prefix (a ``spec.json``, ``events.jsonl`` or ``summary.json`` at most four levels down, at most
:data:`MAX_RUNS` of them).
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from spotwise.errors import InputError
from spotwise.inputfiles import max_input_bytes
from spotwise.remote.fetch import _download
from spotwise.remote.uri import RemoteRoot, connect, storage_error
from spotwise.rundir import MARKER

#: the names a view reads (never a checkpoint)
VIEW_FILES = ("spec.json", "summary.json", "events.jsonl", MARKER)
#: the most run directories ``runs URI`` reads
MAX_RUNS = 200
MAX_DEPTH = 4


def _lease_holder(remote: RemoteRoot) -> str | None:
    """Who holds the run's lease with a fresh heartbeat ("host pid N"), else None."""
    from spotwise.remote.lease import RemoteLease

    try:
        lease = RemoteLease(remote)
        doc = lease.current()
        if doc is None or not lease._is_fresh(doc):
            return None
        return f"{doc.get('host', '?')} pid {doc.get('pid', '?')}"
    except InputError:
        return None


def _state_of(remote: RemoteRoot, name: str) -> Any:
    from spotwise.reports.runs_view import RunDirError, RunState, run_state

    cap = max_input_bytes()
    with tempfile.TemporaryDirectory(prefix="spotwise-view-") as d:
        local = Path(d)
        got = [n for n in VIEW_FILES if _download(remote, n, local / n, cap)]
        if not any(n in got for n in ("spec.json", "summary.json", "events.jsonl")):
            raise InputError("no spotwise run at this URI (no spec.json, summary.json or events.jsonl there)",
                             "pass the outputs.uri of a `spotwise run` (spotwise runs URI lists the runs below a prefix)",
                             remote.uri)
        holder = _lease_holder(remote)
        try:
            st = run_state(local, name, holder=1 if holder else None)
        except RunDirError as e:
            return RunState(dir=remote.uri, name=name, status="unreadable", detail=str(e))
        st.dir = remote.uri
        st.lock_pid = None
        if holder:
            st.notes.append(f"running on {holder} (the URI's lease)")
        last = _last_wall(local / "events.jsonl")
        st.updated_age_s = None if last is None else max(0.0, time.time() - last)
        return st


def _last_wall(path: Path) -> float | None:
    from spotwise.events import read_events

    if not path.is_file():
        return None
    try:
        walls = [float(e["wall"]) for e in read_events(path) if isinstance(e.get("wall"), (int, float))]
    except InputError:
        return None
    return walls[-1] if walls else None


def remote_run_state(uri: str) -> Any:
    """``spotwise status URI``: the state of the run mirrored at ``uri`` (InputError when none is there)."""
    remote = connect(uri)
    return _state_of(remote, remote.root.rstrip("/").rsplit("/", 1)[-1] or remote.uri)


def remote_runs(uri: str, notes: list[str] | None = None) -> list[Any]:
    """``spotwise runs URI``: the state of each run directory below ``uri`` (module docstring)."""
    remote = connect(uri)
    root = remote.root.rstrip("/")
    try:
        found = remote.fs.find(root, maxdepth=MAX_DEPTH + 1)
    except FileNotFoundError:
        found = []
    except Exception as e:  # noqa: BLE001
        raise storage_error(remote, "list", e) from None
    dirs = sorted({str(p).rstrip("/").rsplit("/", 1)[0] for p in found
                   if str(p).rstrip("/").rsplit("/", 1)[-1] in ("spec.json", "summary.json", "events.jsonl")})
    dirs = [d for d in dirs if d == root or d.startswith(root + "/")]
    if len(dirs) > MAX_RUNS:
        if notes is not None:
            notes.append(f"{len(dirs)} run directories below {uri}; the first {MAX_RUNS} are shown")
        dirs = dirs[:MAX_RUNS]
    out = []
    for d in dirs:
        rel = d[len(root):].lstrip("/")
        sub = RemoteRoot(uri=f"{remote.uri.rstrip('/')}/{rel}" if rel else remote.uri, scheme=remote.scheme,
                         fs=remote.fs, root=d)
        name = "".join(ch if ch.isprintable() else "?" for ch in (rel or "."))
        out.append(_state_of(sub, name))
    return out


def state_reader(run_dir: str) -> Any:
    """How ``spotwise status RUN`` reads the state: a run directory's, or the run at a URI's."""
    from spotwise.remote.uri import is_uri
    from spotwise.reports.runs_view import one_run

    if is_uri(run_dir):
        return lambda: remote_run_state(run_dir)
    return lambda: one_run(Path(run_dir))


def list_states(root: str, notes: list[str] | None = None) -> list[Any]:
    """``spotwise runs ROOT``: the runs below a folder, or below a URI prefix."""
    from spotwise.remote.uri import is_uri
    from spotwise.reports.runs_view import list_runs

    return remote_runs(root, notes) if is_uri(root) else list_runs(Path(root), notes)


__all__ = ["MAX_RUNS", "VIEW_FILES", "list_states", "remote_run_state", "remote_runs", "state_reader"]
