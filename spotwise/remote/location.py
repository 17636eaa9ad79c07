"""Where a run lives: its local run directory (locked) and, with ``outputs.uri``, its mirror on storage.

:func:`open_run_location` is what the runner enters instead of
:func:`~spotwise.rundir.open_run_dir`.  Without a URI it is exactly that.  With one, before the
local directory is touched and before training starts (all InputError, exit 2):

* the URI is connected (unknown scheme, missing ``s3fs``/``gcsfs``) and probed by writing and
  removing a small object (a missing, unreachable or read-only bucket);
* ``new``: the URI must not hold a run already (``--overwrite`` removes that run's names there
  first, nothing else); ``resume`` of a local folder: the URI must not hold a newer checkpoint
  than the folder (resume from the URI instead);
* ``fetch`` (``--resume URI``): the local staging folder is locked first, then filled from the URI
  (:func:`spotwise.remote.fetch.fetch_run`) unless it already holds the same run at least as far
  along (same ``spec.json``, a checkpoint as new).  A staging folder holding another run is refused.

It yields the :class:`~spotwise.remote.mirror.RunMirror` (``None`` without a URI); on leaving,
the mirror uploads everything the run wrote.  The local lock is held throughout, and so is the URI's
lease (:mod:`spotwise.remote.lease`): a second machine on the same URI waits for a dead holder's
lease to go stale and is refused while the holder lives; a holder that finds its lease taken over
(it was paused past the TTL) uploads nothing more and stops with exit 2.
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from spotwise.errors import InputError
from spotwise.remote.fetch import SPEC, fetch_run, holds_run, local_manifest, newest_step, read_small, remove_run
from spotwise.remote.lease import RemoteLease
from spotwise.remote.mirror import RunMirror
from spotwise.remote.uri import RemoteRoot, connect, probe_writable
from spotwise.rundir import Mode, RunDirLock, is_spotwise_run_dir, open_run_dir, remove_run_files
from spotwise.safeparse import loads_json

MANIFEST_REL = "checkpoints/manifest.json"


@contextmanager
def open_run_location(out: Path, mode: Mode, uri: str | None, *, fetch: bool = False) -> Iterator[RunMirror | None]:
    """Lock ``out`` (and with ``uri``, prepare the URI and mirror to it); see the module docstring."""
    if uri is None:
        with open_run_dir(out, mode):
            yield None
        return
    remote = connect(uri)
    probe_writable(remote)
    if mode == "new" and not fetch and holds_run(remote):
        raise InputError("outputs.uri already holds a run",
                         f"continue it with `spotwise run --resume {remote.uri}`, pass --overwrite to replace it, "
                         "or choose another outputs.uri", remote.uri)
    lease = RemoteLease(remote)  # one machine at a time on the URI (a relaunch waits for a dead node's to go stale)
    lease.acquire()
    try:
        downloaded: list[str] = []
        if fetch:
            lock, downloaded = _stage_from_uri(out, remote)
        else:
            lock = open_run_dir(out, mode)
            try:
                if mode == "overwrite":
                    remove_run(remote)
                elif mode == "resume":
                    _refuse_older_local(out, remote)
            except BaseException:
                lock.release()
                raise
        with lock:
            mirror = RunMirror(remote, out, lease=lease)  # each upload checks the lease first (issue 38 item 2)
            mirror.mark_current(downloaded)
            ok = False
            try:
                yield mirror
                ok = True
            finally:
                mirror.finish(failed=not ok)
    finally:
        lease.release()


def _refuse_older_local(out: Path, remote: RemoteRoot) -> None:
    """A local resume must not overwrite a newer state on the URI (resumed elsewhere meanwhile)."""
    there = newest_step(read_small(remote, MANIFEST_REL))
    here = newest_step(local_manifest(out))
    if there > here:
        raise InputError(f"the URI holds a newer checkpoint (step {there}) than this folder (step {here}): the run "
                         "went on elsewhere", f"resume it from the URI: spotwise run --resume {remote.uri}", str(out))


def _same_spec(a: bytes | None, b: bytes | None, where_a: str = SPEC, where_b: str = SPEC) -> bool:
    """Whether two spec.json files hold the same spec; InputError naming the file for one nested too
    deeply (``json.loads`` would raise RecursionError: exit 1), False for one that is not JSON."""
    if a is None or b is None:
        return False
    try:
        return bool(loads_json(a, where_a, "spec.json") == loads_json(b, where_b, "spec.json"))
    except (ValueError, UnicodeDecodeError):
        return False


def _stage_from_uri(out: Path, remote: RemoteRoot) -> tuple[RunDirLock, list[str]]:
    """Lock the staging folder ``out`` and fill it from the URI; the lock and the names downloaded."""
    remote_spec = read_small(remote, SPEC)
    if remote_spec is None:
        raise InputError("no spotwise run at this URI (no spec.json there)",
                         "pass the outputs.uri of an earlier `spotwise run`", remote.uri)
    local_spec = out / SPEC
    if out.is_dir() and local_spec.is_file() and not local_spec.is_symlink():
        lock = open_run_dir(out, "resume")
        try:
            if not _same_spec(local_spec.read_bytes(), remote_spec, str(local_spec), f"{remote.uri}/{SPEC}"):
                raise InputError("the local staging folder holds another run than the URI",
                                 "pass an empty --out for the resume (or remove that folder)", str(out))
            if newest_step(local_manifest(out)) >= newest_step(read_small(remote, MANIFEST_REL)):
                return lock, []  # this machine's copy is as far along: continue from it
            remove_run_files(out)
            return lock, fetch_run(remote, out)
        except BaseException:
            lock.release()
            raise
    lock = open_run_dir(out, "overwrite" if out.is_dir() and is_spotwise_run_dir(out) else "new")
    try:
        return lock, fetch_run(remote, out)
    except BaseException:
        lock.release()
        raise
