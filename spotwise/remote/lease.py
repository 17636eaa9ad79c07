"""One machine at a time on a run's URI: a lease object with a heartbeat.

The local run directory has a lock file (:mod:`spotwise.rundir`), but two machines resuming the
same ``outputs.uri`` (a SkyPilot relaunch while the old node still runs, a user's ``--resume`` on a
laptop) would each write checkpoints and events there and corrupt the run.  :class:`RemoteLease`
keeps ``lease.json`` under the URI: who holds it (host, pid, a random id) and when it last said so.
The holder rewrites it every ``ttl_s / 3`` seconds from a daemon thread and removes it when the run
ends.  :meth:`RemoteLease.acquire` waits while another holder's heartbeat is fresh (younger than
``ttl_s``) -- a node that died (``kill -9``, a preemption) stops beating and its lease goes stale,
so a relaunch proceeds after at most ``ttl_s`` -- and refuses (InputError, exit 2) when the other
holder is still alive after ``wait_s``.  Object stores have no compare-and-swap, so after writing
its lease the acquirer reads it back a moment later: a simultaneous acquirer that wrote last wins,
the other one is refused.  Heartbeats are wall-clock times of the writers; clocks set by NTP
agree to well under the default ``ttl_s`` of 90 s (``$SPOTWISE_LEASE_TTL_S`` overrides it).
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid
from typing import Any, Callable

from spotwise.errors import InputError
from spotwise.remote.fetch import read_small
from spotwise.remote.uri import RemoteRoot

LEASE = "lease.json"
#: seconds after its last heartbeat that a lease is stale
LEASE_TTL_S = 90.0


def lease_ttl_s() -> float:
    """``$SPOTWISE_LEASE_TTL_S`` or :data:`LEASE_TTL_S`."""
    raw = os.environ.get("SPOTWISE_LEASE_TTL_S")
    if raw is None:
        return LEASE_TTL_S
    try:
        v = float(raw)
    except ValueError:
        v = -1.0
    if not v > 0:
        raise InputError(f"SPOTWISE_LEASE_TTL_S={raw!r} is not a positive number of seconds", "unset it or give e.g. 90",
                         "SPOTWISE_LEASE_TTL_S")
    return v


class RemoteLease:
    """The lease on ``remote`` (module docstring).  Use as ``acquire()`` ... ``release()``."""

    def __init__(self, remote: RemoteRoot, *, ttl_s: float | None = None, wait_s: float | None = None,
                 clock: Callable[[], float] = time.time, sleep: Callable[[float], None] = time.sleep) -> None:
        self.remote = remote
        self.ttl_s = float(ttl_s if ttl_s is not None else lease_ttl_s())
        if not self.ttl_s > 0:
            raise ValueError("ttl_s must be > 0")
        #: how long to wait for another holder's lease to go stale before refusing (default: ttl + a beat)
        self.wait_s = float(wait_s if wait_s is not None else self.ttl_s * 4 / 3)
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"
        self._clock, self._sleep = clock, sleep
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ reading
    def current(self) -> dict[str, Any] | None:
        """The lease on the URI now (``None``: none, or unreadable -- a torn or foreign object counts as none)."""
        try:  # another machine writes it: never answer from a cached listing
            self.remote.fs.invalidate_cache(self.remote.path(LEASE))
        except Exception:  # noqa: BLE001 - a filesystem without a cache
            pass
        raw = read_small(self.remote, LEASE)
        if raw is None:
            return None
        try:
            doc = json.loads(raw)
        except (ValueError, UnicodeDecodeError, RecursionError):
            return None
        if not isinstance(doc, dict) or not isinstance(doc.get("owner"), str):
            return None
        hb = doc.get("heartbeat")
        if not isinstance(hb, (int, float)) or isinstance(hb, bool):
            return None
        return doc

    def _fresh_other(self) -> dict[str, Any] | None:
        doc = self.current()
        if doc is None or doc["owner"] == self.owner:
            return None
        return doc if self._clock() - float(doc["heartbeat"]) < self.ttl_s else None

    # ------------------------------------------------------------------ holding
    def _write(self) -> None:
        doc = {"owner": self.owner, "heartbeat": self._clock(), "ttl_s": self.ttl_s}
        self.remote.fs.pipe_file(self.remote.path(LEASE), json.dumps(doc).encode())

    def acquire(self) -> None:
        """Wait while another holder is alive (up to ``wait_s``), then take the lease and start the heartbeat."""
        deadline = self._clock() + self.wait_s
        other = self._fresh_other()
        while other is not None and self._clock() < deadline:
            self._sleep(min(5.0, max(0.05, self.ttl_s / 10)))
            other = self._fresh_other()
        if other is not None:
            self._refuse(other)
        self._write()
        self._sleep(min(1.0, self.ttl_s / 20))  # let a simultaneous writer land, then see who won
        doc = self.current()
        if doc is not None and doc["owner"] != self.owner:
            self._refuse(doc)
        self._thread = threading.Thread(target=self._beat, name="spotwise-lease", daemon=True)
        self._thread.start()

    def _refuse(self, doc: dict[str, Any]) -> None:
        age = max(0.0, self._clock() - float(doc["heartbeat"]))
        host = str(doc["owner"]).rsplit(":", 1)[0]
        raise InputError(f"the run at this URI is in use by {host} (its heartbeat {age:.0f} s ago; leases go stale "
                         f"after {self.ttl_s:.0f} s)", "stop that run first, or wait until it has stopped; two machines "
                         "writing one run would corrupt it", self.remote.uri)

    def _beat(self) -> None:
        while not self._stop.wait(self.ttl_s / 3):
            try:
                self._write()
            except Exception:  # noqa: BLE001 - a storage blip: the next beat retries; a long outage lets it go stale
                pass

    def release(self) -> None:
        """Stop the heartbeat and remove the lease if it is still ours (idempotent)."""
        self._stop.set()
        t, self._thread = self._thread, None
        if t is not None:
            t.join(timeout=10)
        try:
            doc = self.current()
            if doc is not None and doc["owner"] == self.owner:
                self.remote.fs.rm_file(self.remote.path(LEASE))
        except Exception:  # noqa: BLE001 - a lease left behind goes stale by itself
            pass
