"""``spotwise status URI`` and ``spotwise runs URI``: a cloud run followed from its ``outputs.uri`` (issue 42 item 6).

A run mirrors its directory to ``outputs.uri`` as it goes (:mod:`spotwise.remote.mirror`).  Reading
it back for a view downloads only fixed names -- ``spec.json``, ``summary.json``, ``events.jsonl``
and the marker, each a plain object within the input caps (:func:`~spotwise.remote.fetch._download`)
-- into a private temporary folder that the listing of the URI never names, and reads that folder
as a local run directory is read (:func:`~spotwise.reports.runs_view.run_state`).  Whether the run
is still going is the URI's lease (``lease.json``: a heartbeat younger than its TTL, the holder's
host and process named), as a local run's is its lock file; the time since the last event is
measured from when the bucket's ``events.jsonl`` was last written (its modification time there:
an event's ``wall`` counts from the run's start, not from the epoch), not from the download.  A run
whose files are over a cap is ``unreadable`` in ``runs URI`` (the others are listed) and exit 2 in
``status URI``, as a local run directory's.  ``runs URI`` lists the run directories below
the prefix (a ``spec.json``, ``events.jsonl`` or ``summary.json`` at most four levels down, at most
:data:`MAX_RUNS` of them).
"""

from __future__ import annotations

import datetime
import functools
import tempfile
from pathlib import Path
from typing import Any

from spotwise.errors import InputError
from spotwise.inputfiles import max_input_bytes
from spotwise.remote.fetch import _download, _info
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
    """The state of the run at ``remote``: InputError when no run is there; RunDirError (the reason) when
    one of its files cannot be read within the caps, as a local run directory's (:func:`runs_view.run_state`)."""
    from spotwise.reports.runs_view import RunDirError, run_state

    cap = max_input_bytes()
    with tempfile.TemporaryDirectory(prefix="spotwise-view-") as d:
        local = Path(d)
        try:
            events_info = _info(remote, "events.jsonl", cap)
            got = [n for n in VIEW_FILES if _download(remote, n, local / n, cap)]
        except InputError as e:  # over a cap, not a plain file, a failed read: this run is unreadable
            raise RunDirError(e.what, cause=e) from None
        if not any(n in got for n in ("spec.json", "summary.json", "events.jsonl")):
            raise InputError("no spotwise run at this URI (no spec.json, summary.json or events.jsonl there)",
                             "pass the outputs.uri of a `spotwise run` (spotwise runs URI lists the runs below a prefix)",
                             remote.uri)
        holder = _lease_holder(remote)
        st = run_state(local, name, holder=1 if holder else None,
                       modified=modified_time(events_info) if "events.jsonl" in got else None)
        st.dir = remote.uri
        st.lock_pid = None
        if holder:
            st.notes.append(f"running on {holder} (the URI's lease)")
        return st


def modified_time(info: dict[str, Any] | None) -> float | None:
    """When an object was last written (seconds since the epoch) from its fsspec ``info``: ``mtime``
    (file://), ``LastModified`` (S3), ``updated`` (GCS); None when the store does not say."""
    if not info:
        return None
    for key in ("mtime", "LastModified", "updated", "last_modified", "modified", "created"):
        v = info.get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0:
            return float(v)
        if isinstance(v, datetime.datetime):
            return (v if v.tzinfo else v.replace(tzinfo=datetime.timezone.utc)).timestamp()
        if isinstance(v, str):
            try:
                t = datetime.datetime.fromisoformat(v.replace("Z", "+00:00"))
            except ValueError:
                continue
            return (t if t.tzinfo else t.replace(tzinfo=datetime.timezone.utc)).timestamp()
    return None


def remote_run_state(uri: str) -> Any:
    """``spotwise status URI``: the state of the run mirrored at ``uri`` (InputError when none is there or
    its files cannot be read, as ``spotwise status DIR``'s)."""
    from spotwise.reports.runs_view import RunDirError, unreadable_run

    remote = connect(uri)
    try:
        return _state_of(remote, remote.root.rstrip("/").rsplit("/", 1)[-1] or remote.uri)
    except RunDirError as e:
        raise unreadable_run(e, uri) from None


def remote_runs(uri: str, notes: list[str] | None = None) -> list[Any]:
    """``spotwise runs URI``: the state of each run directory below ``uri`` (module docstring)."""
    from spotwise.reports.runs_view import listed_state

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
        # one run's files over a cap or malformed: its row says why, the others are listed (as list_runs does)
        out.append(listed_state(sub.uri, rel or ".", functools.partial(_state_of, sub, rel or ".")))
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
