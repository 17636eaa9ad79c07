"""Run directories: a marker that says spotwise made them, an exclusive lock, and safe removal.

A run directory ``OUT`` holds only the names of the registry :mod:`spotwise.rundir_names` (``events.jsonl``,
``summary.json``, ``spec.json``, ``model.pt``, ``checkpoints/``, ``report/``, ``on-demand/``, the sinks'
``tensorboard/``, ``wandb/`` and ``mlflow.db``, the marker :data:`MARKER` and the lock file
:data:`LOCK_FILE`...), plus the ``.NAME.tmp-PID`` files of interrupted atomic writes.  Anything else
in it belongs to the user and is never removed.

* :func:`open_run_dir` validates ``OUT`` (an existing file, an unwritable parent, a full disk are
  :class:`~spotwise.errors.InputError`, exit 2), takes the lock and, for ``--overwrite``, removes
  spotwise's names -- only in a directory that carries the marker (or, for runs written before the
  marker existed, holds nothing but spotwise's names).  Any other non-empty directory is refused.
* :func:`lock_run_dir` takes ``fcntl.flock(LOCK_EX | LOCK_NB)`` on ``OUT/.spotwise.lock``; a lock
  held by another process (or another open of the file in this one) is an InputError naming the
  holder's pid.  The lock is released when the returned :class:`RunDirLock` is closed (or the
  process dies: the kernel drops ``flock`` locks with the last descriptor).
* Removal never follows a symlink, and removes only what spotwise writes: a spotwise name that is a
  symlink, a folder where spotwise writes a file (``summary.json/``) or a folder holding user files
  is refused (exit 2) before anything is deleted.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import shutil
import stat
from pathlib import Path
from typing import Literal

from spotwise import __version__
from spotwise.errors import InputError
from spotwise.rundir_files import (DISK_FULL_ERRNOS, DiskFullError, check_run_file, check_run_names,  # noqa: F401 (re-exported)
                                   disk_full_error, is_disk_full, write_run_text)
from spotwise.rundir_names import (BY_NAME, EVENTS_FILE, LOCK_FILE, MARKER, NAMES, SPEC_FILE, TMP_RE,  # noqa: F401
                                   check_registered, is_registered, problem, removable_names)

#: Names spotwise writes into a run directory (besides the marker and the lock file): the registry's
#: (:data:`spotwise.rundir_names.REGISTRY`, the one list the link checks and ``--overwrite`` read).
RUN_FILES = tuple(n for n in removable_names())
KNOWN_NAMES = NAMES

Mode = Literal["new", "overwrite", "resume"]


def _is_spotwise_name(name: str) -> bool:
    return is_registered(name)


def is_spotwise_run_dir(path: str | Path) -> bool:
    """True if ``path`` carries the marker, or (a run written before the marker existed) is a
    directory holding an ``events.jsonl`` or ``spec.json`` and nothing but spotwise's names."""
    d = Path(path)
    if (d / MARKER).is_file() and not (d / MARKER).is_symlink():
        return True
    try:
        names = os.listdir(d)
    except OSError:
        return False
    return bool(names) and all(_is_spotwise_name(n) for n in names) and \
        any((d / n).is_file() and not (d / n).is_symlink() for n in (EVENTS_FILE, SPEC_FILE))


def _remove_entry(d: Path, name: str) -> None:
    """Remove the registered name ``d/name`` (checked by :func:`~spotwise.rundir_names.problem`): a file or a
    link is unlinked (never followed), a folder removed with its tree (``rmtree`` opens each level without
    following a link and unlinks the links it meets)."""
    p = d / name
    try:
        mode = os.lstat(p).st_mode
    except FileNotFoundError:
        return
    if stat.S_ISDIR(mode):
        shutil.rmtree(p)
    else:
        os.unlink(p)


def _removable(d: Path) -> list[str]:
    """The registered names :func:`remove_run_files` would remove from ``d``; InputError if ``d`` is not a spotwise run
    directory or one of them holds what spotwise does not write (a link, a FIFO, a user folder or file)."""
    if not is_spotwise_run_dir(d):
        raise InputError("not a spotwise run directory (no .spotwise-run marker); refusing to delete anything in it",
                         "choose an empty or new --out", str(d))
    try:
        present = set(os.listdir(d))
    except OSError as e:  # an unreadable folder: nothing is removed
        raise InputError(f"cannot inspect the old run before removing it ({e.strerror or e}: {e.filename})",
                         "check the run directory's permissions, or choose another --out", str(d)) from None
    names = [n for n in removable_names() if n in present] + sorted(n for n in present if TMP_RE.fullmatch(n))
    for name in names:
        why = problem(d, name, strict=True) if name in BY_NAME else None
        if why:
            raise InputError(f"{why}; refusing to delete it with --overwrite",
                             f"move {d / why.split(' ', 1)[0]} away yourself (or choose another --out), then run again",
                             str(d))
    return names


def remove_run_files(path: str | Path) -> list[str]:
    """Remove exactly the registered names (not the marker or the lock) from the run directory ``path``
    -- the sinks' folders and files included, so a new run's TensorBoard / W&B / MLflow output holds
    none of the old run's; returns the names removed.  Raises InputError if ``path`` is not a spotwise
    run directory, or -- before anything is removed -- if one of the names holds something spotwise did
    not write there (a folder named ``summary.json``, a symbolic link anywhere in a registered tree, a
    user file inside ``report/``); user files are left in place."""
    d = Path(path)
    names = _removable(d)
    removed: list[str] = []
    for name in names:
        try:
            _remove_entry(d, name)
        except OSError as e:
            raise InputError(f"cannot remove {name} from the old run ({e.strerror or e})",
                             "check the directory's permissions, or choose another --out", str(d)) from None
        removed.append(name)
    return removed


def _write_marker(d: Path) -> None:
    path = d / MARKER
    if path.is_file() and not path.is_symlink():
        return
    try:
        write_run_text(d, MARKER, json.dumps({"spotwise": __version__, "kind": "run-directory"}) + "\n", fsync=False)
    except OSError as e:
        raise InputError(f"cannot write into the output directory ({e.strerror or e})",
                         "choose a writable --out", str(d)) from None


class RunDirLock:
    """An exclusive ``flock`` on ``DIR/.spotwise.lock``; a context manager; :meth:`release` is idempotent."""

    def __init__(self, directory: Path, fd: int) -> None:
        self.directory = directory
        self._fd: int | None = fd

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        """Drop the lock (the lock file stays: removing it would let two processes lock different files)."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            try:
                fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)

    def __enter__(self) -> "RunDirLock":
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __del__(self) -> None:  # pragma: no cover - safety net; callers use ``with``
        try:
            self.release()
        except Exception:
            pass


def lock_run_dir(path: str | Path) -> RunDirLock:
    """Take the exclusive lock of the existing directory ``path``.

    Raises InputError (exit 2) if another process holds it ("in use by another spotwise process
    (pid N)"), or if the lock file cannot be created (unwritable directory, full disk).
    """
    d = Path(path)
    lock_path = d / LOCK_FILE
    try:  # O_NONBLOCK: a FIFO planted under the name must not block the open
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0)
                     | getattr(os, "O_NONBLOCK", 0), 0o644)
    except OSError as e:
        if is_disk_full(e):
            raise disk_full_error(lock_path, e) from None
        if e.errno == errno.ELOOP or os.path.islink(lock_path):
            raise InputError(f"the lock file {LOCK_FILE} is a symbolic link, which spotwise never creates or follows",
                             f"remove {lock_path} (or choose another --out)", str(d)) from None
        if os.path.isdir(lock_path) and not os.path.islink(lock_path):
            raise InputError(f"the lock file {LOCK_FILE} is a folder", f"move {lock_path} away (or choose another --out)",
                             str(d)) from None
        raise InputError(f"cannot create the lock file {LOCK_FILE} ({e.strerror or e})",
                         "choose a writable --out", str(d)) from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise InputError(f"the lock file {LOCK_FILE} is not a regular file (a FIFO, socket or device)",
                         f"remove {lock_path} (or choose another --out)", str(d))
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        try:
            holder = os.pread(fd, 64, 0).decode("ascii", "replace").strip() or "unknown"
        except OSError:
            holder = "unknown"
        os.close(fd)
        if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise InputError(f"run directory is in use by another spotwise process (pid {holder})",
                             "wait for it to finish (or stop it), or choose another --out", str(d)) from None
        raise InputError(f"cannot lock the run directory ({e.strerror or e})",
                         "use a local file system that supports flock, or choose another --out", str(d)) from None
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
    except OSError:
        pass  # the pid is informational; the lock itself is held
    return RunDirLock(d, fd)


def _check_out(d: Path) -> None:
    """``--out`` must be (or become) a writable directory; InputError otherwise."""
    if d.exists() and not d.is_dir():
        raise InputError("--out is not a directory (a file of that name exists)",
                         "pass a directory that does not exist yet, or an empty one", str(d))
    if not d.exists():
        try:
            d.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            if is_disk_full(e):
                raise disk_full_error(d, e) from None
            raise InputError(f"cannot create the --out directory ({e.strerror or e})",
                             "choose a path you can write to", str(d)) from None
    if not os.access(d, os.W_OK | os.X_OK):
        raise InputError("the --out directory is not writable", "choose a directory you can write to", str(d))


def open_run_dir(path: str | Path, mode: Mode) -> RunDirLock:
    """Prepare ``path`` for a run and return its held lock (use it as a context manager).

    ``new``: create the directory if needed; refuse (InputError) if it already holds a run or
    spotwise-named files it did not write (other user files are fine: the run adds its own).
    ``overwrite``: like ``new``, but a spotwise run directory's own files are removed first (user
    files stay); a non-empty directory that is not a spotwise run directory is refused.
    ``resume``: the directory must exist and hold a ``spec.json``; nothing is removed.
    Every refusal happens before anything is written or deleted, and is an InputError (exit 2).
    """
    d = Path(path)
    if mode == "resume":
        if not d.is_dir():
            raise InputError("the run directory does not exist" if not d.exists() else "--resume needs a directory",
                             "pass the --out directory of an earlier `spotwise run`", str(d))
        if not os.path.lexists(d / "spec.json"):  # checked before the lock file is created in someone else's folder
            raise InputError("not a spotwise run directory (no spec.json)",
                             "pass the --out directory of an earlier `spotwise run`", str(d))
        # before the lock and before Ray: spec.json a regular file within the cap (a link, FIFO, device, folder
        # named), every other name spotwise reads or writes of the kind it writes (no link, no FIFO, no folder
        # named summary.json): a resume would otherwise fail on them only after the cluster started
        check_run_file(d, "spec.json")
        check_registered(d)  # every registered name: the sinks' folders walked (no link in them), the lock too
        if os.path.lexists(d / "events.jsonl"):  # the resume appends to it and its report reads it: within the cap
            check_run_file(d, "events.jsonl", "the event log events.jsonl")
        return lock_run_dir(d)
    _check_out(d)
    if _refuse_unsafe(d, mode):  # before the lock file is created: a refused directory is left untouched
        _removable(d)  # a link or user folder under one of spotwise's names too (checked again under the lock)
    check_registered(d)  # every registered name left (the marker, the lock...) what spotwise writes: no link
    lock = lock_run_dir(d)
    try:
        if _refuse_unsafe(d, mode):  # again under the lock: another process may have written meanwhile
            remove_run_files(d)
        _write_marker(d)
    except BaseException:
        lock.release()
        raise
    return lock


def _refuse_unsafe(d: Path, mode: Mode) -> bool:
    """Raise InputError if a ``new``/``overwrite`` run may not use ``d``; True if an old run must be removed."""
    try:
        names = [n for n in sorted(os.listdir(d)) if n != LOCK_FILE]
    except OSError as e:
        raise InputError(f"cannot list the output directory ({e.strerror or e})", "choose a directory you can read and write",
                         str(d)) from None
    ours = [n for n in names if _is_spotwise_name(n) and n != MARKER]
    if not names:
        return False
    marked = is_spotwise_run_dir(d)
    if mode == "overwrite" and not marked:
        what = f"it holds {', '.join(ours)} but " if ours else ""
        raise InputError(f"not a spotwise run directory ({what}no {MARKER} marker); refusing to delete anything in it",
                         "choose an empty or new --out", str(d))
    if not ours:
        return False  # a marked directory after an overwrite, or user files only (a new run adds its own)
    if not marked:
        raise InputError(f"not a spotwise run directory, but it holds {', '.join(ours)}; refusing to mix a run "
                         "with files spotwise did not write", "choose an empty or new --out", str(d))
    if mode != "overwrite":
        raise InputError("the output directory already holds a run",
                         "pass another --out, --overwrite to replace it, or --resume it to continue that run", str(d))
    return True
