"""One machine at a time on a run's URI: a lease object with a heartbeat, checked before every write.

The local run directory has a lock file (:mod:`spotwise.rundir`), but two machines resuming the
same ``outputs.uri`` (a SkyPilot relaunch while the old node still runs, a user's ``--resume`` on a
laptop) would each write checkpoints and events there and corrupt the run.  :class:`RemoteLease`
keeps ``lease.json`` under the URI: who holds it (host, pid, a random owner token) and when it last
said so.  The holder renews it every ``ttl_s / 3`` seconds from a daemon thread and removes it when
the run ends.  :meth:`RemoteLease.acquire` waits while another holder's heartbeat is fresh (younger
than ``ttl_s``) -- a node that died (``kill -9``, a preemption) stops beating and its lease goes
stale, so a relaunch proceeds after at most ``ttl_s`` -- and refuses (InputError, exit 2) when the
other holder is still alive after ``wait_s``.

A holder that was paused past the TTL (SIGSTOP, a suspended VM, a network outage) may find its lease
taken over when it comes back (issue 38 item 2).  So the holder re-reads the lease before each
heartbeat (:meth:`RemoteLease.renew`) and the mirror calls :meth:`RemoteLease.check` before each
upload to the URI; when another owner token holds it (or it is gone), the holder marks itself lost,
stops its heartbeat and refuses every later write with :class:`LeaseLost` (an InputError: the run
stops with exit 2, the URI keeps the other machine's state, ``--resume`` continues the run).
:meth:`~RemoteLease.check` also renews the lease first when the holder's last confirmed heartbeat is
older than ``ttl_s / 2``, so an upload follows a heartbeat that no other machine can yet consider
stale.

How small the remaining race window is depends on the storage:

* **s3://** -- lease writes are conditional (``If-Match`` on the ETag just read, ``If-None-Match: *``
  for a new lease; S3, MinIO and moto implement them): a takeover and a paused holder's heartbeat
  cannot both succeed, the loser gets a precondition failure.  An upload itself cannot be made
  conditional on another object, so a holder frozen for more than ``ttl_s / 2`` *between* its lease
  check and the start of an upload's PUT can still land that one object after a takeover.
* **file://, gs://** (and an S3-compatible server without conditional writes, detected by its
  NotImplemented answer) -- re-read, then write (each lease write goes to a temp name and is renamed
  on file://): the window is one read plus one write; a simultaneous acquirer reads the lease back
  ``min(1 s, ttl_s / 20)`` after writing it, the one that wrote last wins, the other is refused.

Heartbeats are wall-clock times of the writers; clocks set by NTP agree to well under the default
``ttl_s`` of 90 s (``$SPOTWISE_LEASE_TTL_S`` overrides it, 0.5 s to 1 day).
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid
from typing import Any, Callable

from spotwise.envvars import env_number
from spotwise.errors import InputError
from spotwise.remote.uri import RemoteRoot, storage_error

LEASE = "lease.json"
#: seconds after its last heartbeat that a lease is stale
LEASE_TTL_S = 90.0
#: a lease object larger than this is not one of ours (counts as none)
MAX_LEASE_BYTES = 64 * 1024
_PRECONDITION_CODES = ("PreconditionFailed", "ConditionalRequestConflict")


def lease_ttl_s() -> float:
    """``$SPOTWISE_LEASE_TTL_S`` (InputError outside 0.5 s .. 1 day, see :mod:`spotwise.envvars`) or :data:`LEASE_TTL_S`."""
    return float(env_number("SPOTWISE_LEASE_TTL_S"))


def _elapsed() -> float:
    """Seconds of a clock that also runs while the machine is suspended (CLOCK_BOOTTIME where there is one)."""
    boottime = getattr(time, "CLOCK_BOOTTIME", None)
    return time.clock_gettime(boottime) if boottime is not None else time.monotonic()


def _error_code(e: BaseException) -> str | None:
    """The S3 error code behind ``e`` (s3fs keeps botocore's ClientError as the cause), if any."""
    seen: BaseException | None = e
    for _ in range(4):
        if seen is None:
            return None
        resp = getattr(seen, "response", None)
        if isinstance(resp, dict) and isinstance(resp.get("Error"), dict):
            return str(resp["Error"].get("Code"))
        seen = seen.__cause__ or seen.__context__
    return None


def _precondition_failed(e: BaseException) -> bool:
    return isinstance(e, FileExistsError) or _error_code(e) in _PRECONDITION_CODES


class LeaseLost(InputError):
    """Another machine took this run's lease over: this machine writes nothing more to the URI (exit 2)."""


class RemoteLease:
    """The lease on ``remote`` (module docstring).  Use as ``acquire()`` ... ``release()``; ``check()`` before each write."""

    def __init__(self, remote: RemoteRoot, *, ttl_s: float | None = None, wait_s: float | None = None,
                 clock: Callable[[], float] = time.time, sleep: Callable[[float], None] = time.sleep,
                 elapsed: Callable[[], float] = _elapsed) -> None:
        self.remote = remote
        self.ttl_s = float(ttl_s if ttl_s is not None else lease_ttl_s())
        if not self.ttl_s > 0:
            raise ValueError("ttl_s must be > 0")
        #: how long to wait for another holder's lease to go stale before refusing (default: ttl + a beat)
        self.wait_s = float(wait_s if wait_s is not None else self.ttl_s * 4 / 3)
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"
        self._clock, self._sleep, self._elapsed = clock, sleep, elapsed
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        #: one lease read-and-write at a time (the heartbeat thread and the mirror's checks)
        self._io = threading.RLock()
        #: conditional writes (s3:// only; switched off when the server answers NotImplemented)
        self._cas = remote.scheme == "s3"
        #: ``_elapsed()`` when a write of ours was last confirmed (None: not held)
        self._confirmed: float | None = None
        #: set once another holder took the lease: every later check and write raises it
        self.lost: LeaseLost | None = None

    # ------------------------------------------------------------------ reading
    def _read(self) -> tuple[dict[str, Any] | None, str | None, bool]:
        """``(lease, etag, exists)`` now: the parsed lease (``None``: none, or unreadable -- a torn or foreign
        object counts as none), its ETag (s3), whether an object is there at all.  Storage errors propagate."""
        path, fs = self.remote.path(LEASE), self.remote.fs
        try:  # another machine writes it: never answer from a cached listing
            fs.invalidate_cache(path)
        except Exception:  # noqa: BLE001 - a filesystem without a cache
            pass
        try:
            info = fs.info(path)  # before the content: a write conditional on this ETag fails if the content is older
            if info.get("type") != "file" or int(info.get("size") or 0) > MAX_LEASE_BYTES:
                return None, None, True
            raw = fs.cat_file(path)
        except FileNotFoundError:
            return None, None, False
        etag = info.get("ETag") or info.get("etag")
        try:
            doc = json.loads(raw)
        except (ValueError, UnicodeDecodeError, RecursionError):
            return None, etag, True
        if not isinstance(doc, dict) or not isinstance(doc.get("owner"), str):
            return None, etag, True
        hb = doc.get("heartbeat")
        if not isinstance(hb, (int, float)) or isinstance(hb, bool):
            return None, etag, True
        return doc, etag, True

    def current(self) -> dict[str, Any] | None:
        """The lease on the URI now (``None``: none, or unreadable -- a torn or foreign object counts as none)."""
        return self._read()[0]

    def _is_fresh(self, doc: dict[str, Any]) -> bool:
        return self._clock() - float(doc["heartbeat"]) < self.ttl_s

    # ------------------------------------------------------------------ writing
    def _write(self, *, if_match: str | None = None, create: bool = False) -> None:
        """Write our lease with a fresh heartbeat; on s3 conditional on ``if_match`` (the ETag we read) or, with
        ``create``, on there being none.  A failed condition raises (see :func:`_precondition_failed`)."""
        doc = {"owner": self.owner, "heartbeat": self._clock(), "ttl_s": self.ttl_s}
        data, target, fs = json.dumps(doc).encode(), self.remote.path(LEASE), self.remote.fs
        if self.remote.scheme == "file":  # aside, then renamed: a reader never sees half a lease
            parent = target.rsplit("/", 1)[0]
            tmp = f"{parent}/.{LEASE}.tmp-{os.getpid()}-{uuid.uuid4().hex[:6]}"
            fs.pipe_file(tmp, data)
            fs.mv(tmp, target)
        else:
            cond = {"IfMatch": if_match} if self._cas and if_match else {"IfNoneMatch": "*"} if self._cas and create else {}
            try:
                fs.pipe_file(target, data, **cond)
            except Exception as e:
                if not cond or _error_code(e) not in ("NotImplemented", "NotImplementedError"):
                    raise
                self._cas = False  # an S3-compatible server without conditional writes: re-read, then write
                fs.pipe_file(target, data)
        self._confirmed = self._elapsed()

    def acquire(self) -> None:
        """Wait while another holder is alive (up to ``wait_s``), then take the lease and start the heartbeat."""
        deadline = self._clock() + self.wait_s
        while True:
            try:
                doc, etag, exists = self._read()
            except Exception as e:  # noqa: BLE001 - one exit-2 message for an unreadable URI
                raise storage_error(self.remote, "read the lease at", e) from None
            other = doc if doc is not None and doc["owner"] != self.owner and self._is_fresh(doc) else None
            if other is None:
                try:  # s3: only if it is still the lease just read (or still none)
                    self._write(if_match=etag, create=not exists)
                    break
                except Exception as e:  # noqa: BLE001
                    if not _precondition_failed(e):
                        raise storage_error(self.remote, "write the lease to", e) from None
                    other = doc  # another machine wrote it in between: look again (it holds it now)
            if self._clock() >= deadline:
                self._refuse(other or {"owner": "another machine:0", "heartbeat": self._clock()})
            self._sleep(min(5.0, max(0.05, self.ttl_s / 10)))
        # let a simultaneous writer land, then see who won (needed without conditional writes; on s3 it also
        # catches a server that ignores the conditions)
        self._sleep(min(1.0, self.ttl_s / 20))
        doc = self.current()
        if doc is not None and doc["owner"] != self.owner:
            self._confirmed = None
            self._refuse(doc)
        self._thread = threading.Thread(target=self._beat, name="spotwise-lease", daemon=True)
        self._thread.start()

    def _refuse(self, doc: dict[str, Any]) -> None:
        age = max(0.0, self._clock() - float(doc["heartbeat"]))
        host = str(doc["owner"]).rsplit(":", 1)[0]
        raise InputError(f"the run at this URI is in use by {host} (its heartbeat {age:.0f} s ago; leases go stale "
                         f"after {self.ttl_s:.0f} s)", "stop that run first, or wait until it has stopped; two machines "
                         "writing one run would corrupt it", self.remote.uri)

    # ------------------------------------------------------------------ holding
    def _mark_lost(self, doc: dict[str, Any] | None) -> LeaseLost:
        """Another holder has the lease (``doc``; ``None``: it is gone): stop writing, for good."""
        if self.lost is None:
            if doc is not None:
                age = max(0.0, self._clock() - float(doc["heartbeat"]))
                who = f"{str(doc['owner']).rsplit(':', 1)[0]} holds it now (its heartbeat {age:.0f} s ago)"
            else:
                who = "it is gone (another machine took the run over and released it, or it was removed)"
            self.lost = LeaseLost(
                f"this machine lost the run's lease: {who}.  This machine's heartbeat had stopped for longer than the "
                f"lease's {self.ttl_s:g} s (a pause, a suspended VM, a network outage), so the run continues elsewhere; "
                "this machine stopped writing to the URI and the run stopped here",
                f"nothing to do while the run goes on there; to continue it here instead, stop it there and run "
                f"`spotwise run --resume {self.remote.uri}` (the URI keeps its last committed checkpoint)", self.remote.uri)
        self._stop.set()
        self._confirmed = None
        return self.lost

    def renew(self) -> None:
        """One heartbeat: re-read the lease; if another owner holds it (or it is gone) mark it lost and raise
        :class:`LeaseLost`, else rewrite it (s3: conditional on the ETag just read).  Storage errors propagate."""
        with self._io:
            if self.lost is not None:
                raise self.lost
            doc, etag, _ = self._read()
            if doc is None or doc["owner"] != self.owner:
                raise self._mark_lost(doc)
            try:
                self._write(if_match=etag)
            except Exception as e:
                if _precondition_failed(e):  # another machine wrote it after our read: it holds it now
                    raise self._mark_lost(self.current()) from None
                raise

    def check(self) -> None:
        """Before each write to the URI: :class:`LeaseLost` unless this machine still holds the lease.

        Re-reads the lease (the owner token must be ours); when the last confirmed heartbeat is older than
        ``ttl_s / 2`` (the holder was paused, or the storage is slow) it renews the lease instead, so the
        write follows a heartbeat no other machine can yet consider stale.  Storage errors propagate (the
        mirror warns and retries at its next sync)."""
        with self._io:
            if self.lost is not None:
                raise self.lost
            if self._confirmed is None or self._elapsed() - self._confirmed > self.ttl_s / 2:
                self.renew()
                return
            doc = self.current()
            if doc is None or doc["owner"] != self.owner:
                raise self._mark_lost(doc)

    def _beat(self) -> None:
        while not self._stop.wait(self.ttl_s / 3):
            try:
                self.renew()
            except LeaseLost:
                return  # another holder has it: stop writing at once (the mirror refuses its next upload)
            except Exception:  # noqa: BLE001 - a storage blip: the next beat retries; a long outage lets it go stale
                pass

    def release(self) -> None:
        """Stop the heartbeat and remove the lease if it is still ours (idempotent; nothing after it was lost)."""
        self._stop.set()
        t, self._thread = self._thread, None
        if t is not None:
            t.join(timeout=10)
        if self.lost is not None:
            return
        try:
            with self._io:
                doc = self.current()
                if doc is not None and doc["owner"] == self.owner:
                    self.remote.fs.rm_file(self.remote.path(LEASE))
        except Exception:  # noqa: BLE001 - a lease left behind goes stale by itself
            pass
        self._confirmed = None
