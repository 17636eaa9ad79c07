"""The run directory contract: ``events.jsonl`` and ``summary.json`` (DESIGN.md, "Run directory").

Every ``run`` and ``simulate`` writes, into its output directory ``OUT``:

* ``OUT/events.jsonl`` -- one JSON object per line.  The first line is a ``header`` event carrying
  ``schema`` (:data:`SCHEMA_VERSION`).  Every event has ``t`` (virtual seconds since the job
  started), ``wall`` (wall-clock seconds since the job started) and ``kind``; the other keys are
  the kind's fields.  The simulator and the runtimes write the same schema, so one reader, one
  ledger and one report serve them all.
* ``OUT/summary.json`` -- one object (:class:`RunSummary`), written atomically (temp file, fsync,
  rename) so a reader never sees half of it.

Failure behaviour: the writer appends and flushes each line, so a ``kill -9`` loses at most the
line being written; the reader tolerates (and reports) a truncated *last* line but rejects a
malformed line anywhere else, naming its line number.  Files that are binary, not UTF-8, truncated
or of the wrong shape are user input: :class:`~spotwise.errors.InputError` (exit 2) naming the file
and how to fix it, never a ``UnicodeDecodeError``.  A full disk while writing (ENOSPC/EDQUOT) is a
:class:`~spotwise.rundir.DiskFullError` (exit 2) naming the folder; an atomic write never leaves
its temp file behind.
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from spotwise.errors import InputError
from spotwise.safeparse import loads_json
from spotwise.rundir import disk_full_error, is_disk_full
from spotwise.rundir_files import open_run_reader, open_run_writer, read_run_file, write_run_bytes
from spotwise.rundir_names import EVENTS_FILE, SUMMARY_FILE  # noqa: F401 (re-exported; the registry names them)

SCHEMA_VERSION = 1

#: Known event kinds and the fields each must carry (beyond ``t``, ``wall``, ``kind``).
EVENT_FIELDS: dict[str, tuple[str, ...]] = {
    "header": ("schema",),
    "price": ("instance", "price"),
    "notice": ("worker",),
    "revoke": ("worker",),
    "join": ("worker",),
    "step": ("step", "loss", "active", "lr", "sync"),
    "decision": ("policy", "decision", "reason"),
    "checkpoint": ("step", "path"),
    "restore": ("step",),
    "cost": ("total",),
    "idle": ("duration",),
    "eval": ("step", "metric_name", "metric"),
    "end": ("status",),
    # the executor moved the workers: spot <-> on-demand, or to another instance type / place
    "market_switch": ("from", "to"),
    "migrate": ("from", "to"),
    # serverless: a worker function invoked / ended (lease, left, error, lost, leaving, merged); the store
    "function": ("worker", "status"),
    "store": ("status",),
    # collective data plane: a new generation of the all-reduce group; a roll-back after every
    # member was lost at once (the steps after the newest replica are redone)
    "regroup": ("gen", "members", "source"),
    "rollback": ("from_step", "to_step", "lost_steps"),
    # a training script (issue 41): what it logged for a step (``job.log``); how it ended
    "metrics": ("step", "values"),
    "script": ("outcome",),
    # restart mode (issue 55 item 6): the script started again on the members; a checkpoint it saved
    "restart": ("gen", "members", "from_step"),
    "script_checkpoint": ("step", "path"),
    # a metrics sink's run elsewhere (W&B, MLflow): its id, continued on resume (spotwise.control.sinks)
    "sink": ("sink", "id"),
}
#: Fields that must be numbers when present.
_NUMERIC = {"t", "wall", "price", "step", "loss", "active", "lr", "total", "duration"}


def _validate_event(obj: Any, where: str) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise InputError("an event must be a JSON object", "regenerate the run directory", where)
    for key in ("t", "wall", "kind"):
        if key not in obj:
            raise InputError(f"event lacks {key!r}", "every event needs t, wall and kind", where)
    kind = obj["kind"]
    if not isinstance(kind, str) or kind not in EVENT_FIELDS:
        raise InputError(f"unknown event kind {kind!r}", f"valid kinds are {', '.join(EVENT_FIELDS)}", where)
    missing = [f for f in EVENT_FIELDS[kind] if f not in obj]
    if missing:
        raise InputError(f"{kind} event lacks {', '.join(missing)}", "the writer must supply every field of its kind", where)
    for key in _NUMERIC & obj.keys():
        v = obj[key]
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
            raise InputError(f"field {key!r} must be a number, got {v!r}", "check the writer", where)
    return obj


def _jsonable(v: Any) -> Any:
    """Make numpy scalars / non-finite floats JSON-safe (NaN -> null)."""
    if hasattr(v, "item") and callable(v.item) and getattr(v, "ndim", 1) == 0:
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    return v


class EventLog:
    """Append-only writer of ``events.jsonl``.

    ``clock`` returns the current *virtual* time; ``wall_clock`` the wall time (both injectable
    so tests and the simulator control time).  ``emit(kind, **fields)`` validates and appends one
    line.  Opening an existing log with ``resume=True`` appends to it (used by ``run --resume``)
    and keeps the original wall-clock origin offset by the log's last ``wall``.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        clock: Callable[[], float] | None = None,
        wall_clock: Callable[[], float] | None = None,
        resume: bool = False,
        meta: dict[str, Any] | None = None,
        fsync: bool = False,
    ) -> None:
        self.path = Path(path)
        self._clock = clock or (lambda: 0.0)
        self._wall = wall_clock or time.monotonic
        self._lock = threading.Lock()
        self._sinks: list[Any] = []
        self._fsync = fsync
        self._wall0 = self._wall()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if resume and self.path.exists():
            existing = read_events(self.path)
            last_wall = existing[-1]["wall"] if existing else 0.0
            if last_wall is not None and not (math.isfinite(last_wall) and 0 <= last_wall < 1e12):
                # the log continues from it: NaN or infinity would make every later event unwritable
                raise InputError(f"the last event's wall time is {last_wall!r}, not seconds >= 0",
                                 "resume the run directory spotwise wrote (or start the run again with --overwrite)",
                                 str(self.path))
            self._wall0 -= float(last_wall or 0.0)
            self._fh = self._open("a")
        else:
            self._fh = self._open("w")
            self.emit("header", schema=SCHEMA_VERSION, **(meta or {}))

    def _open(self, mode: str) -> Any:
        try:  # never through a link, never a FIFO or device (issue 30 items 2-3)
            return open_run_writer(self.path.parent, self.path.name, append=mode == "a")
        except OSError as e:
            if is_disk_full(e):
                raise disk_full_error(self.path, e) from None
            raise InputError(f"cannot write the event log ({e.strerror or e})", "choose a writable --out",
                             str(self.path)) from None

    def emit(self, kind: str, *, t: float | None = None, **fields: Any) -> dict[str, Any]:
        """Append one event; ``t`` defaults to the virtual clock.  Returns the event written."""
        event = {"t": float(self._clock() if t is None else t), "wall": round(self._wall() - self._wall0, 6), "kind": kind}
        event.update(_jsonable(fields))
        _validate_event(event, f"{self.path}: new {kind} event")
        line = json.dumps(event, separators=(",", ":"), allow_nan=False)
        with self._lock:
            try:
                self._fh.write(line + "\n")
                self._fh.flush()
                if self._fsync:
                    os.fsync(self._fh.fileno())
            except OSError as e:
                if is_disk_full(e):
                    raise disk_full_error(self.path, e) from None
                raise
        for sink in self._sinks:  # issue 41 item 6: where else users look (TensorBoard, ...)
            sink.write(event)
        return event

    def add_sink(self, sink: Any) -> None:
        """Pass every event written from now on to ``sink.write(event)``; ``sink.close()`` with the log."""
        self._sinks.append(sink)

    def abort_sinks(self) -> None:
        """The run ends by an error (the log is not closed normally): end every sink's run as failed
        (``sink.abort()``), so none is left running elsewhere (an MLflow run ``RUNNING``)."""
        sinks, self._sinks = self._sinks, []
        for sink in sinks:
            sink.abort()

    def close(self) -> None:
        """Flush and close; on a full disk the file is still closed, then DiskFullError is raised."""
        sinks, self._sinks = self._sinks, []
        for sink in sinks:
            sink.close()
        with self._lock:
            if not self._fh.closed:
                try:
                    self._fh.flush()
                except OSError as e:
                    try:
                        self._fh.close()
                    except OSError:
                        pass
                    if is_disk_full(e):
                        raise disk_full_error(self.path, e) from None
                    raise
                self._fh.close()

    def __enter__(self) -> "EventLog":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def iter_events(path: str | Path) -> Iterator[dict[str, Any]]:
    """Yield validated events; a truncated final line (crash mid-write) is skipped.

    Raises InputError (naming ``events.jsonl`` and the line) for a missing or unreadable file, a
    line that is not UTF-8 or not JSON (other than a torn last line), or an invalid event.
    """
    p = Path(path)
    if not os.path.lexists(p):  # a dangling link or a loop is named by the reader, not called missing
        raise InputError("event log not found", "pass a run directory written by `spotwise run` or `spotwise simulate`", str(p))
    try:  # a regular file only, size-capped, no link followed: never /dev/zero or a FIFO (issue 30 item 3)
        with open_run_reader(p.parent, p.name, "event log") as fh:
            lines = fh.readlines()
    except OSError as e:
        raise InputError(f"cannot read the event log ({e.strerror or e})", "check the file's permissions", str(p)) from None
    for i, raw in enumerate(lines, start=1):
        torn = i == len(lines) and not raw.endswith(b"\n")
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError:
            if torn:
                return  # torn last write, cut inside a multi-byte character
            raise InputError(f"line {i} is not UTF-8 text (binary or corrupted)",
                             "the log is corrupt; rerun the job or truncate it before this line", str(p)) from None
        if not line.strip():
            continue
        try:
            obj = loads_json(line, f"{p}:{i}", "event")  # InputError for a nesting bomb
        except ValueError:  # JSONDecodeError, and numbers too large to parse
            if torn:
                return  # torn last write: everything before it is intact
            raise InputError(f"line {i} is not valid JSON",
                             "the log is corrupt; rerun the job or truncate it before this line", str(p)) from None
        ev = _validate_event(obj, f"{p}:{i}")
        if i == 1 or ev["kind"] == "header":
            if ev["kind"] != "header":
                raise InputError("the first event is not a header", "this is not a spotwise event log", str(p))
            if ev["schema"] != SCHEMA_VERSION or isinstance(ev["schema"], bool):
                raise InputError(
                    f"schema version {ev['schema']} is not supported (this spotwise reads {SCHEMA_VERSION})",
                    "read it with the spotwise version that wrote it", str(p),
                )
        yield ev


def read_events(path: str | Path, kinds: Iterable[str] | None = None) -> list[dict[str, Any]]:
    """All events of ``path`` (optionally only those of the given kinds)."""
    wanted = set(kinds) if kinds is not None else None
    return [e for e in iter_events(path) if wanted is None or e["kind"] in wanted]


@dataclass
class RunSummary:
    """``summary.json``: what a run did and cost.  ``mode`` is ``simulate``, ``emulated``, ``cluster`` or ``serverless``."""

    mode: str
    status: str
    steps: int
    final_loss: float | None
    final_metric: float | None
    metric_name: str | None
    wall_s: float
    virtual_s: float
    cost_usd: float
    cost_breakdown: dict[str, Any]
    revocations: int
    joins: int
    decisions: int
    spec: dict[str, Any]
    plan: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    schema: int = SCHEMA_VERSION

    def __post_init__(self) -> None:
        if self.mode not in ("simulate", "emulated", "cluster", "serverless"):
            raise ValueError(f"RunSummary.mode must be simulate, emulated, cluster or serverless, got {self.mode!r}")
        for name in ("steps", "revocations", "joins", "decisions"):
            if getattr(self, name) < 0:
                raise ValueError(f"RunSummary.{name} must be >= 0")
        for name in ("wall_s", "virtual_s", "cost_usd"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"RunSummary.{name} must be >= 0")

    def __repr__(self) -> str:
        metric = "" if self.final_metric is None else f", {self.metric_name or 'metric'} {self.final_metric:.4g}"
        return (f"RunSummary({self.spec.get('name', '?')!r}: {self.mode} {self.status}, {self.steps} steps, "
                f"loss {self.final_loss if self.final_loss is None else format(self.final_loss, '.4g')}{metric}, "
                f"${self.cost_usd:.4g}, {self.virtual_s / 3600:.3g} h virtual, {self.revocations} revocations)")

    def to_dict(self) -> dict[str, Any]:
        return _jsonable(asdict(self))


def atomic_write_text(path: str | Path, text: str, root: str | Path | None = None) -> None:
    """Write ``text`` to ``path`` atomically: temp file in the same folder, fsync, rename, fsync dir.

    On any failure the temp file is removed and ``path`` keeps its old content; a full disk raises
    :class:`~spotwise.rundir.DiskFullError` (exit 2), other errors propagate.
    """
    atomic_write_bytes(path, text.encode("utf-8"), root)


def atomic_write_bytes(path: str | Path, data: bytes, root: str | Path | None = None) -> None:
    """:func:`atomic_write_text` for bytes: a symlink at ``path`` is replaced, never followed, and no
    folder between ``root`` (default: ``path``'s folder) and ``path`` may be a link
    (:func:`spotwise.rundir_files.write_run_bytes`)."""
    p = Path(path)
    base = Path(root) if root is not None else p.parent
    base.mkdir(parents=True, exist_ok=True)
    write_run_bytes(base, p.relative_to(base), data)


def write_summary(out_dir: str | Path, summary: RunSummary) -> Path:
    path = Path(out_dir) / SUMMARY_FILE
    atomic_write_text(path, json.dumps(summary.to_dict(), indent=2, allow_nan=False) + "\n")
    return path


def read_summary(out_dir: str | Path) -> RunSummary:
    """Read and validate ``OUT/summary.json``."""
    path = Path(out_dir) / SUMMARY_FILE
    if not os.path.lexists(path):  # a dangling link or a loop is named by the reader, not called missing
        raise InputError("summary.json not found", "pass a run directory written by `spotwise run` or `spotwise simulate`", str(path))
    raw = read_run_file(out_dir, SUMMARY_FILE)  # a regular file only, size-capped (issue 30 item 3)
    try:
        data = loads_json(raw.decode("utf-8"), str(path), "summary.json")
    except UnicodeDecodeError:
        raise InputError("summary.json is not UTF-8 text (binary or corrupted)", "rerun the job to regenerate it",
                         str(path)) from None
    except ValueError:  # JSONDecodeError: truncated or not JSON
        raise InputError("summary.json is not valid JSON (truncated or corrupted)", "rerun the job to regenerate it",
                         str(path)) from None
    except OSError as e:
        raise InputError(f"summary.json cannot be read ({e.strerror or e})", "check the file's permissions", str(path)) from None
    if not isinstance(data, dict):
        raise InputError("summary.json must hold one JSON object", "rerun the job to regenerate it", str(path))
    if data.get("schema") != SCHEMA_VERSION:
        raise InputError(f"schema version {data.get('schema')!r} is not supported (this spotwise reads {SCHEMA_VERSION})",
                         "read it with the spotwise version that wrote it", str(path))
    known = set(RunSummary.__dataclass_fields__)
    unknown = set(data) - known
    if unknown:
        raise InputError(f"unknown summary fields {sorted(unknown)}", "read it with the spotwise version that wrote it", str(path))
    wrong = _summary_type_errors(data)
    if wrong:
        raise InputError(f"invalid summary: {'; '.join(wrong)}", "rerun the job to regenerate it", str(path))
    try:
        return RunSummary(**data)
    except (TypeError, ValueError) as e:
        raise InputError(f"invalid summary: {e}", "rerun the job to regenerate it", str(path)) from None


def _summary_type_errors(data: dict[str, Any]) -> list[str]:
    """Fields of a summary.json object whose JSON type is wrong (so readers never trip over them)."""
    numbers = ("wall_s", "virtual_s", "cost_usd")
    optional_numbers = ("final_loss", "final_metric")
    counts = ("steps", "revocations", "joins", "decisions")
    objects = ("cost_breakdown", "spec", "extra")
    out: list[str] = []
    for k in numbers + optional_numbers + counts:
        v = data.get(k)
        if v is None and k in optional_numbers:
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)) or (k in counts and not float(v).is_integer()):
            out.append(f"{k} must be a {'count' if k in counts else 'number'}, got {v!r:.60}")
    for k in objects:
        if k in data and not isinstance(data[k], dict):
            out.append(f"{k} must be an object")
    for k in ("mode", "status"):
        if not isinstance(data.get(k), str):
            out.append(f"{k} must be a string")
    if data.get("metric_name") is not None and not isinstance(data["metric_name"], str):
        out.append("metric_name must be a string or null")
    if data.get("plan") is not None and not isinstance(data["plan"], dict):
        out.append("plan must be an object or null")
    return out
