"""Mirroring a local run directory to its URI while the run goes.

:class:`RunMirror` is held by the runner and subscribed to the job's
:class:`~spotwise.control.checkpointing.Checkpointer`; it uploads a file only after the run has
written it durably (atomically, fsync'ed) in the local run directory:

* after each checkpoint commit: the checkpoint files the local manifest names and not yet
  uploaded, *then* the manifest, then the removal of the ones the manifest no longer names -- so
  a reader of the URI never sees a manifest naming a missing checkpoint; the call returns once
  the checkpoint is on the storage (a node lost afterwards loses no committed step);
* ``events.jsonl`` every few seconds (a background thread) and at each checkpoint, up to its
  last complete line;
* the marker and ``spec.json`` when attached; everything else the run wrote (``summary.json``,
  ``model.pt``, ``report/``, ``on-demand/``) by :meth:`finish`.

Every write to the URI (an upload, a removal) is preceded by the URI's lease check
(:meth:`spotwise.remote.lease.RemoteLease.check`): once another machine took the run over, the
mirror writes nothing more and the run stops with :class:`~spotwise.remote.lease.LeaseLost`
(exit 2) at its next checkpoint or at its end.

Never uploaded: the lock file, temp files of interrupted writes, symlinks, names a run directory
does not hold.  Object stores write an object whole or not at all; on ``file://`` each upload goes
to a temp name and is renamed.  An upload that fails mid-run is a warning (the run goes on and
the next sync retries); one that fails in :meth:`finish` after a successful run is an InputError
that names the local copy.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from spotwise.control.checkpoint import CHECKPOINT_DIR, CHECKPOINT_NAME, MANIFEST
from spotwise.errors import InputError
from spotwise.remote.lease import LeaseLost, RemoteLease
from spotwise.remote.uri import RemoteRoot, describe_error
from spotwise.rundir import LOCK_FILE, MARKER
from spotwise.rundir_names import mirrored_names
from spotwise.rundir_files import check_run_file, read_run_file
from spotwise.safeparse import loads_json
from spotwise.reports.terminal_text import warn_on_stderr

if TYPE_CHECKING:
    from spotwise.control.checkpointing import Checkpointer

EVENTS = "events.jsonl"
#: seconds between uploads of the event log while the run goes
EVENTS_EVERY_S = 5.0


_warn = warn_on_stderr  # a warning line on stderr, its untrusted names cleaned (spotwise.reports.terminal_text)


#: the mirror uploads spotwise's own files: no size cap beyond the disk, but read without following links
_OWN_FILE_CAP = 1 << 40


def _uploadable(path: Path) -> bool:
    """A regular file (not a symlink) whose name is not a temp file or the lock."""
    name = path.name
    return path.is_file() and not path.is_symlink() and name != LOCK_FILE and ".tmp-" not in name


class RunMirror:
    """Uploads the local run directory ``local`` to ``remote`` as the run goes (module docstring)."""

    def __init__(self, remote: RemoteRoot, local: Path, *, events_every_s: float = EVENTS_EVERY_S,
                 warn: Callable[[str], None] = _warn, lease: RemoteLease | None = None) -> None:
        if not events_every_s > 0:
            raise ValueError("events_every_s must be > 0")
        self.remote = remote
        #: the URI's lease, checked before every write (None: unchecked, e.g. in tests of the uploads alone)
        self.lease = lease
        self.local = Path(local)
        self.events_every_s = float(events_every_s)
        self._warn = warn
        self._lock = threading.RLock()
        #: relative name -> (size, mtime_ns) of the local file as last uploaded
        self._sent: dict[str, tuple[int, int]] = {}
        self._events_sent = -1
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        #: uploads that failed (each warned once per sync)
        self.failures = 0

    # ------------------------------------------------------------------ wiring
    def attach(self, checkpointer: "Checkpointer") -> None:
        """Upload what the run directory holds now (marker, spec, log, checkpoints), then follow
        the run: after each checkpoint (synchronously) and the event log every few seconds."""
        checkpointer.listeners.append(self.checkpoint_saved)
        try:
            self.sync()
        except InputError:
            raise
        except Exception as e:  # noqa: BLE001 - the probe passed a moment ago: a blip, retried at the next sync
            self._failed("the run directory", e)
        if self._thread is None:
            self._thread = threading.Thread(target=self._events_loop, name="spotwise-mirror", daemon=True)
            self._thread.start()

    def _events_loop(self) -> None:
        """Upload the event log every ``events_every_s``, paced so that re-sending a long log (an object store
        has no append) takes at most ~2 % of the time: the next upload waits 50x the last one's duration."""
        wait = self.events_every_s
        while not self._stop.wait(wait):
            t0 = time.monotonic()
            try:
                self.sync_events()
            except LeaseLost:  # another machine took the run over: nothing more to upload
                return
            except Exception as e:  # noqa: BLE001 - never let the thread die silently
                self._failed(EVENTS, e)
            wait = max(self.events_every_s, 50.0 * (time.monotonic() - t0))

    def stop(self) -> None:
        """Stop the background uploads (idempotent)."""
        self._stop.set()
        t, self._thread = self._thread, None
        if t is not None:
            t.join(timeout=60)

    def mark_current(self, names: list[str]) -> None:
        """The remote copies of these local files are current (just downloaded from there)."""
        for rel in names:
            path = self.local / rel
            if _uploadable(path):
                st = path.stat()
                self._sent[rel] = (st.st_size, st.st_mtime_ns)

    # ------------------------------------------------------------------ uploads
    def _failed(self, name: str, e: BaseException) -> None:
        self.failures += 1
        self._warn(f"could not upload {name} to {self.remote.uri} ({describe_error(e)}); the local copy in "
                   f"{self.local} is intact and the next sync retries")

    def _guard(self) -> None:
        """Just before a write to the URI: LeaseLost (exit 2) if another machine holds the run's lease now."""
        if self.lease is not None:
            self.lease.check()

    def _put_bytes(self, rel: str, data: bytes) -> None:
        self._guard()
        target = self.remote.path(rel)
        fs = self.remote.fs
        if self.remote.scheme == "file":  # a plain folder: write aside, then rename (a reader never sees half)
            parent = target.rsplit("/", 1)[0]
            fs.makedirs(parent, exist_ok=True)
            tmp = f"{parent}/.{target.rsplit('/', 1)[1]}.tmp-{os.getpid()}"
            fs.pipe_file(tmp, data)
            fs.mv(tmp, target)
        else:
            fs.pipe_file(target, data)

    def _put_file(self, rel: str, *, force: bool = False) -> bool:
        """Upload ``local/rel`` if it changed since its last upload; True if the remote copy is current."""
        path = self.local / rel
        if not _uploadable(path):
            return False
        st = path.stat()
        key = (st.st_size, st.st_mtime_ns)
        if not force and self._sent.get(rel) == key:
            return True
        fs = self.remote.fs
        if self.remote.scheme == "file" or st.st_size <= (8 << 20):
            self._put_bytes(rel, read_run_file(self.local, rel, cap=_OWN_FILE_CAP))  # never through a link
        else:  # large (checkpoints, model.pt): streamed; an object store shows the object once complete
            check_run_file(self.local, rel, cap=-1)  # a real file in real folders, not a link planted since
            self._guard()
            fs.put_file(str(path), self.remote.path(rel))
        self._sent[rel] = key
        return True

    def sync_events(self) -> None:
        """Upload ``events.jsonl`` up to its last complete line, if it grew."""
        with self._lock:
            path = self.local / EVENTS
            if not _uploadable(path):
                return
            data = read_run_file(self.local, EVENTS, cap=_OWN_FILE_CAP)
            data = data[: data.rfind(b"\n") + 1]
            if len(data) == self._events_sent:
                return
            self._put_bytes(EVENTS, data)
            self._events_sent = len(data)

    def sync_checkpoints(self) -> None:
        """The local manifest's checkpoint files not yet uploaded, then the manifest, then the
        removal of remote checkpoint files it no longer names."""
        with self._lock:
            folder = self.local / CHECKPOINT_DIR
            manifest = folder / MANIFEST
            if not _uploadable(manifest):
                return
            raw = read_run_file(self.local, f"{CHECKPOINT_DIR}/{MANIFEST}", cap=_OWN_FILE_CAP)
            try:
                entries = loads_json(raw.decode("utf-8"), str(manifest), "manifest.json").get("checkpoints", [])
                names = [e["file"] for e in entries]
            except (ValueError, AttributeError, TypeError, KeyError, InputError):  # InputError: nested too deeply
                raise InputError("checkpoints/manifest.json is unreadable; it was not uploaded",
                                 "resume the run from its local copy", str(manifest)) from None
            for name in names:
                if not isinstance(name, str) or not CHECKPOINT_NAME.match(name):
                    raise InputError(f"checkpoints/manifest.json names {name!r:.80}; it was not uploaded",
                                     "resume the run from its local copy", str(manifest))
                if not self._put_file(f"{CHECKPOINT_DIR}/{name}"):
                    raise FileNotFoundError(f"{CHECKPOINT_DIR}/{name} is listed in the manifest but missing")
            self._put_bytes(f"{CHECKPOINT_DIR}/{MANIFEST}", raw)  # only after every checkpoint it names
            keep = set(names)
            try:
                remote_names = [p.rsplit("/", 1)[-1] for p in self.remote.fs.ls(self.remote.path(CHECKPOINT_DIR), detail=False)]
            except FileNotFoundError:
                remote_names = []
            for name in remote_names:
                if CHECKPOINT_NAME.match(name) and name not in keep:
                    self._guard()
                    self.remote.fs.rm_file(self.remote.path(f"{CHECKPOINT_DIR}/{name}"))
                    self._sent.pop(f"{CHECKPOINT_DIR}/{name}", None)

    def checkpoint_saved(self, path: Path | None = None) -> None:
        """Called by the checkpointer after each checkpoint commit: the checkpoint, then the log."""
        with self._lock:
            try:
                self.sync_checkpoints()
            except InputError:
                raise
            except Exception as e:  # noqa: BLE001 - a network blip must not stop training
                self._failed(f"the checkpoint {path.name if path else ''}".strip(), e)
            try:
                self.sync_events()
            except LeaseLost:  # the run stops here (exit 2)
                raise
            except Exception as e:  # noqa: BLE001
                self._failed(EVENTS, e)

    def sync(self) -> None:
        """Upload every file of the run directory that changed (checkpoints in their safe order).
        Raises the first storage error (after trying every file)."""
        first: BaseException | None = None
        with self._lock:
            for rel in [MARKER, "spec.json"] + [n for n in mirrored_names() if n not in (MARKER, "spec.json", EVENTS, CHECKPOINT_DIR)]:
                for sub in self._files(rel):
                    try:
                        self._put_file(sub)
                    except LeaseLost:  # write nothing more
                        raise
                    except Exception as e:  # noqa: BLE001
                        first = first or e
            for step in (self.sync_checkpoints, self.sync_events):
                try:
                    step()
                except InputError:
                    raise
                except Exception as e:  # noqa: BLE001
                    first = first or e
        if first is not None:
            raise first

    def _files(self, rel: str) -> list[str]:
        """``rel`` if it is a file, or every uploadable file below the folder ``rel`` (no symlinks followed)."""
        top = self.local / rel
        if top.is_symlink():
            return []
        if top.is_file():
            return [rel]
        out: list[str] = []
        if top.is_dir():
            for dirpath, dirnames, filenames in os.walk(top):  # os.walk does not descend into symlinked folders
                dirnames[:] = [d for d in dirnames if not (Path(dirpath) / d).is_symlink()]
                for f in sorted(filenames):
                    p = Path(dirpath) / f
                    if _uploadable(p):
                        out.append(p.relative_to(self.local).as_posix())
        return out

    def finish(self, *, failed: bool = False) -> None:
        """Stop the background uploads and upload everything that changed.  After a failed run the
        errors are warnings; after a successful one the first is an InputError naming the local copy."""
        self.stop()
        try:
            self.sync()
        except Exception as e:  # noqa: BLE001
            if self.lease is not None and e is self.lease.lost:  # another machine took the run over
                if failed:  # the run stopped for it: nothing to upload, nothing more to say
                    return
                raise
            if failed:
                self._failed("the run directory", e)
                return
            raise InputError(f"the run finished, but uploading it to {self.remote.uri} failed ({describe_error(e)})",
                             f"its files are complete in {self.local}; copy them there (aws s3 sync / gcloud storage rsync) "
                             "or fix the storage access and run `spotwise run --resume` on that folder", self.remote.uri) from None

    def __repr__(self) -> str:
        return f"RunMirror({str(self.local)!r} -> {self.remote.uri!r})"

