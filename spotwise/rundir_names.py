"""The registry of every name spotwise writes in a run directory (issue 54 item 2).

A run directory ``OUT`` holds only the names of :data:`REGISTRY`; every writer takes its name from
here (:data:`EVENTS_FILE`, :data:`TENSORBOARD_DIR`, ...), and the three things that must know them
all read this one list:

* the link checks before a run starts (fresh, ``--resume`` or ``--overwrite``):
  :func:`check_registered` -- every registered name that exists is what spotwise writes there: a
  regular file, or a real folder whose whole tree (an ``lstat`` walk, bounded) holds no symbolic
  link, FIFO or device; only the links a sink's library makes itself (:class:`LibraryLink`,
  W&B's log links) are accepted, by exact place and target;
* ``--overwrite``: :func:`removal_problem` says whether a name holds only what spotwise (or the
  sink library it drove) wrote there, and :mod:`spotwise.rundir` removes exactly the registered names;
* what a run directory may hold at all (:func:`covers`: the registry-completeness test).

The kinds of names (:attr:`RunName.holds`): ``file`` (a regular file); ``own`` (a folder of
spotwise's own files, each matching :attr:`RunName.inside`); ``library`` (a folder a metrics sink's
library writes -- TensorBoard's event files, W&B's offline runs -- any regular files and folders,
created and checked by spotwise before the library is given it); ``run`` (``on-demand/``: the
measured baseline, itself a run directory of these names).
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Literal

from spotwise.errors import InputError

MARKER = ".spotwise-run"
LOCK_FILE = ".spotwise.lock"
EVENTS_FILE = "events.jsonl"
SUMMARY_FILE = "summary.json"
SPEC_FILE = "spec.json"
MODEL_FILE = "model.pt"
CHECKPOINT_DIR = "checkpoints"
REPORT_DIR = "report"
BASELINE_DIR = "on-demand"
SWEEP_FILE = "sweep.json"
WINDOWS_FILE = "windows.csv"
SWEEP_PLOTS = ("breakdown.png", "cost_cdf.png", "finish_cdf.png")
#: a restart-mode script's checkpoint folder (spotwise.spec.restart_mode.SCRIPT_CHECKPOINTS)
SCRIPT_CHECKPOINTS = "script-checkpoints"
#: what a restart-mode script's ranks printed, one file per member slot (spotwise.planes.restart.member)
SCRIPT_LOGS = "script-logs"
TENSORBOARD_DIR = "tensorboard"
WANDB_DIR = "wandb"
MLFLOW_DB = "mlflow.db"
#: the files SQLite keeps beside its database while it writes (rollback journal; WAL mode's log and index)
MLFLOW_SIDECARS = ("mlflow.db-journal", "mlflow.db-wal", "mlflow.db-shm")

#: the most entries :func:`check_registered` walks below one folder (a sink folder holds a few dozen)
MAX_WALK_ENTRIES = 200_000
#: the deepest a walk goes below a registered folder
MAX_WALK_DEPTH = 32

Holds = Literal["file", "own", "library", "run"]
_HARD_LINKED = "has other hard links: spotwise would write into a file outside the run directory"
_FIX_LINK = ("remove or move that path away (spotwise writes only regular files and real folders in a run directory, "
             "never through a link), or choose another --out")


@dataclass(frozen=True)
class LibraryLink:
    """A symbolic link a sink's library makes itself inside its folder: accepted only at a relative path
    matching ``path`` and pointing at a target matching ``target`` (nothing spotwise writes goes through it)."""

    path: re.Pattern[str]
    target: re.Pattern[str]

    def accepts(self, rel: str, target: str) -> bool:
        return bool(self.path.fullmatch(rel) and self.target.fullmatch(target))


@dataclass(frozen=True)
class RunName:
    """One name spotwise writes at the top of a run directory (see the module docstring)."""

    name: str
    holds: Holds
    #: who writes it (documentation; the registry-completeness test names it)
    writer: str
    #: ``own`` folders: the names spotwise writes inside (its temp files included)
    inside: re.Pattern[str] | None = None
    #: ``library`` folders: the links the library makes itself
    links: tuple[LibraryLink, ...] = ()
    #: written through a temp file ``.NAME.tmp-PID`` renamed over it (an interrupted write leaves one)
    atomic: bool = False
    #: written in place (appended, a database, truncated): a hard link to a file elsewhere would be written into
    in_place: bool = False
    #: uploaded to the run's URI (outputs.uri) by the mirror
    mirrored: bool = True
    #: removed by ``--overwrite`` (the marker and the lock stay)
    removable: bool = True

    def __post_init__(self) -> None:
        if not self.name or "/" in self.name or self.name in (".", "..") or "\x00" in self.name:
            raise ValueError(f"a run directory name is one plain name, got {self.name!r}")
        if self.holds not in ("file", "own", "library", "run"):
            raise ValueError(f"{self.name}: holds must be file, own, library or run, got {self.holds!r}")
        if (self.inside is not None) != (self.holds == "own"):
            raise ValueError(f"{self.name}: an 'own' folder (and only one) names what it holds inside")
        if self.links and self.holds != "library":
            raise ValueError(f"{self.name}: only a library folder may hold the library's links")
        if self.atomic and self.holds != "file":
            raise ValueError(f"{self.name}: only a file is written atomically")

    @property
    def is_folder(self) -> bool:
        return self.holds != "file"


_RUN_ID = r"(?:offline-)?run-\d{8}_\d{6}-[A-Za-z0-9_-]{1,64}"
#: W&B: ``wandb-core`` links each run's ``logs/debug-core.log`` to its own log in ``~/.cache/wandb/logs``;
#: runs written before spotwise turned W&B's ``symlink`` setting off hold ``latest-run``, ``debug.log`` and
#: ``debug-internal.log`` linking (relatively) into one of its runs
_WANDB_LINKS = (
    LibraryLink(re.compile(_RUN_ID + r"/logs/debug-core\.log"), re.compile(r"/[^\x00]*/core-debug-[0-9_]{1,40}\.log")),
    LibraryLink(re.compile(r"latest-run"), re.compile(_RUN_ID)),
    LibraryLink(re.compile(r"debug(?:-internal)?\.log"), re.compile(_RUN_ID + r"/logs/debug(?:-internal)?\.log")),
)

#: Everything spotwise writes in a run directory, in the order ``--overwrite`` removes it.
REGISTRY: tuple[RunName, ...] = (
    RunName(EVENTS_FILE, "file", "the event log (spotwise.events.EventLog)", atomic=True, in_place=True),
    RunName(SUMMARY_FILE, "file", "the run's summary (spotwise.events.write_summary)", atomic=True),
    RunName(SPEC_FILE, "file", "the job spec the run was started with (the controller)", atomic=True),
    RunName(MODEL_FILE, "file", "the final model's state_dict (spotwise.control.checkpointing)", atomic=True),
    RunName(CHECKPOINT_DIR, "own", "checkpoints and their manifest (spotwise.control.checkpoint)",
            inside=re.compile(r"(?:step-\d+\.pt|manifest\.json|\.(?:step-\d+\.pt|manifest\.json)\.tmp-\d+)")),
    RunName(REPORT_DIR, "own", "the HTML report and its plots (spotwise.reports)",
            inside=re.compile(r"\.?[A-Za-z0-9_.-]+\.(?:html|png)(?:\.tmp-\d+)?")),
    RunName(BASELINE_DIR, "run", "the measured on-demand baseline, a run directory (spotwise.control.baseline)"),
    RunName(SWEEP_FILE, "file", "a sweep's results (spotwise.reports.sweep_view)", atomic=True),
    RunName(WINDOWS_FILE, "file", "a sweep's windows (spotwise.reports.sweep_view)", atomic=True),
    *(RunName(n, "file", "a sweep's plot (spotwise.reports.sweep_view)", atomic=True) for n in SWEEP_PLOTS),
    RunName(SCRIPT_LOGS, "own", "what a restart-mode script's ranks printed (spotwise.planes.restart.member)",
            inside=re.compile(r"member-\d+\.log")),
    RunName(SCRIPT_CHECKPOINTS, "library", "a restart-mode script's own checkpoints (spotwise.planes.restart)",
            mirrored=False),
    RunName(TENSORBOARD_DIR, "library", "the tensorboard sink's event files (spotwise.control.sinks)", mirrored=False),
    RunName(WANDB_DIR, "library", "the wandb sink's offline runs and logs (spotwise.control.sinks)", links=_WANDB_LINKS,
            mirrored=False),
    RunName(MLFLOW_DB, "file", "the mlflow sink's SQLite store (spotwise.control.sinks)", mirrored=False, in_place=True),
    *(RunName(n, "file", "SQLite's file beside the mlflow sink's store", mirrored=False, in_place=True)
      for n in MLFLOW_SIDECARS),
    RunName(MARKER, "file", "the marker: spotwise made this run directory (spotwise.rundir)", atomic=True, removable=False),
    RunName(LOCK_FILE, "file", "the lock of a run directory in use (spotwise.rundir)", mirrored=False, removable=False,
            in_place=True),
)
BY_NAME: dict[str, RunName] = {e.name: e for e in REGISTRY}
if len(BY_NAME) != len(REGISTRY):  # pragma: no cover - a name registered twice
    raise RuntimeError("a run directory name is registered twice")
NAMES = frozenset(BY_NAME)
#: leftovers of an interrupted atomic write of one of spotwise's files (``.summary.json.tmp-123``)
TMP_RE = re.compile(r"\.(?:" + "|".join(re.escape(e.name.lstrip(".")) for e in REGISTRY if e.atomic) + r")\.tmp-\d+")


def entry(name: str) -> RunName:
    """The registered entry ``name`` (KeyError for a name spotwise does not write: a programming error)."""
    return BY_NAME[name]


def is_registered(name: str) -> bool:
    """Whether spotwise writes the top-level name ``name`` (a registered name or a temp file of one)."""
    return name in BY_NAME or bool(TMP_RE.fullmatch(name))


def mirrored_names() -> tuple[str, ...]:
    """The registered names the mirror uploads to a run's URI (not the lock, not the sinks' local stores)."""
    return tuple(e.name for e in REGISTRY if e.mirrored)


def removable_names() -> tuple[str, ...]:
    """The registered names ``--overwrite`` removes (all but the marker and the lock)."""
    return tuple(e.name for e in REGISTRY if e.removable)


def covers(rel: str | Path, *, nested: bool = False) -> bool:
    """Whether the path ``rel`` (relative to a run directory) is one spotwise writes: a registered name,
    a temp file of one, a name inside an ``own`` folder its pattern accepts, anything inside a
    ``library`` folder, or (once) a name ``on-demand/`` may hold as a run directory."""
    parts = PurePosixPath(Path(rel).as_posix()).parts
    if not parts:
        return False
    top = parts[0]
    if top not in BY_NAME:
        return len(parts) == 1 and bool(TMP_RE.fullmatch(top))
    e = BY_NAME[top]
    if len(parts) == 1:
        return True
    if e.holds == "own":
        return len(parts) == 2 and bool(e.inside is not None and e.inside.fullmatch(parts[1]))
    if e.holds == "library":
        return True
    if e.holds == "run":
        return not nested and covers(PurePosixPath(*parts[1:]), nested=True)
    return False


def _kind(mode: int) -> str:
    return ("a symbolic link" if stat.S_ISLNK(mode) else "a directory" if stat.S_ISDIR(mode)
            else "a FIFO (named pipe)" if stat.S_ISFIFO(mode)
            else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode)
            else "a file" if stat.S_ISREG(mode) else "not a regular file")


def _walk_library(top: Path, e: RunName) -> str | None:
    """Why the library folder ``top`` holds what its library does not write (a link but its own, a FIFO,
    a device, a socket), or None; an ``lstat`` walk, never following a link, bounded."""
    seen = 0
    stack: list[tuple[Path, str, int]] = [(top, "", 0)]
    while stack:
        here, rel_here, depth = stack.pop()
        try:
            with os.scandir(here) as it:
                entries = sorted(it, key=lambda d: d.name)
        except OSError as exc:
            return f"{e.name}/{rel_here} cannot be listed ({exc.strerror or exc})".replace("/ ", " ")
        for d in entries:
            seen += 1
            rel = f"{rel_here}{d.name}"
            if seen > MAX_WALK_ENTRIES:
                return f"{e.name} holds more than {MAX_WALK_ENTRIES:,} entries (more than its sink writes)"
            try:
                mode = d.stat(follow_symlinks=False).st_mode
            except OSError as exc:
                return f"{e.name}/{rel} cannot be inspected ({exc.strerror or exc})"
            if stat.S_ISLNK(mode):
                try:
                    target = os.readlink(d.path)
                except OSError:
                    target = ""
                if any(link.accepts(rel, target) for link in e.links):
                    continue
                return f"{e.name}/{rel} is a symbolic link, which neither spotwise nor its {e.name} sink creates"
            if stat.S_ISDIR(mode):
                if depth + 1 > MAX_WALK_DEPTH:
                    return f"{e.name}/{rel} is nested deeper than {MAX_WALK_DEPTH} folders (more than its sink writes)"
                stack.append((Path(d.path), rel + "/", depth + 1))
            elif not stat.S_ISREG(mode):
                return f"{e.name}/{rel} is {_kind(mode)}, which neither spotwise nor its {e.name} sink creates"
            elif d.stat(follow_symlinks=False).st_nlink > 1:
                return f"{e.name}/{rel} {_HARD_LINKED}"
    return None


def problem(root: str | Path, name: str, *, strict: bool, nested: bool = False) -> str | None:
    """Why ``root/name`` (a registered name) is not what spotwise writes there, or None (absent is fine).

    Always refused: a symbolic link (anywhere in the tree, but a library's own), a FIFO, a device,
    a folder where a file belongs or a file where a folder belongs.  ``strict`` (before ``--overwrite``
    removes it): an ``own`` folder holds only its names, ``on-demand/`` only registered ones.
    """
    e = BY_NAME[name]
    p = Path(root) / name
    try:
        mode = os.lstat(p).st_mode
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"{name} cannot be inspected ({exc.strerror or exc})"
    if stat.S_ISLNK(mode):
        return f"{name} is a symbolic link, which spotwise never creates"
    if not e.is_folder:
        if not stat.S_ISREG(mode):
            return f"{name} is {_kind(mode)}, but spotwise writes a regular file there"
        if e.in_place and not strict and os.lstat(p).st_nlink > 1:  # removing a hard-linked name is harmless
            return f"{name} {_HARD_LINKED}"
        return None
    if not stat.S_ISDIR(mode):
        return f"{name} is {_kind(mode)}, where spotwise keeps a folder"
    if e.holds == "library":
        return _walk_library(p, e)
    try:
        inner = sorted(os.listdir(p))
    except OSError as exc:
        return f"{name} cannot be listed ({exc.strerror or exc})"
    for sub in inner:
        if e.holds == "run" and not nested and sub in BY_NAME and BY_NAME[sub].holds != "run":
            why = problem(p, sub, strict=strict, nested=True)
            if why:
                return f"{name}/{why}"
            continue
        try:
            sub_mode = os.lstat(p / sub).st_mode
        except OSError as exc:
            return f"{name}/{sub} cannot be inspected ({exc.strerror or exc})"
        if stat.S_ISLNK(sub_mode):
            return f"{name}/{sub} is a symbolic link, which spotwise never creates"
        ours = (e.inside is not None and bool(e.inside.fullmatch(sub))) if e.holds == "own" else bool(TMP_RE.fullmatch(sub))
        if ours and not stat.S_ISREG(sub_mode):
            return f"{name}/{sub} is {_kind(sub_mode)}, but spotwise writes a regular file there"
        if strict and not ours:
            return f"{name}/{sub} was not written by spotwise"
    return None


def check_registered(root: str | Path, names: "tuple[str, ...] | list[str] | None" = None) -> None:
    """InputError (exit 2) naming the first registered name (default: all) present in ``root`` as something
    spotwise does not write there (:func:`problem`, not strict): run before any run starts in ``root``."""
    for name in (names if names is not None else [e.name for e in REGISTRY]):
        why = problem(root, name, strict=False)
        if why:
            raise InputError(f"{why}; refusing to use the run directory", _FIX_LINK, str(Path(root) / why.split(" ", 1)[0]))


def check_sink_target(root: str | Path, name: str) -> Path:
    """``root/name`` (a sink's folder or file) checked (:func:`check_registered`) and, for a folder, created
    as a real folder (no link followed below ``root``): the only place a sink's library is let write."""
    from spotwise.rundir_files import make_run_folder

    e = BY_NAME[name]
    related = [name, *(MLFLOW_SIDECARS if name == MLFLOW_DB else ())]
    check_registered(root, related)
    if e.is_folder:
        make_run_folder(root, name)
        check_registered(root, [name])  # made by us, or already there: walked either way
    return Path(root) / name


__all__ = ["BASELINE_DIR", "BY_NAME", "CHECKPOINT_DIR", "EVENTS_FILE", "LOCK_FILE", "LibraryLink", "MARKER",
           "MLFLOW_DB", "MLFLOW_SIDECARS", "MODEL_FILE", "NAMES", "REGISTRY", "REPORT_DIR", "RunName", "SPEC_FILE",
           "SUMMARY_FILE", "SWEEP_FILE", "SWEEP_PLOTS", "TENSORBOARD_DIR", "TMP_RE", "WANDB_DIR", "WINDOWS_FILE",
           "check_registered", "check_sink_target", "covers", "entry", "is_registered", "mirrored_names", "problem",
           "removable_names"]
