"""One serverless job's side of the Redis store (``papers/004_9dc2adb66dc8d26e.txt`` Sec. 3.1).

:class:`JobStore` is what the :class:`~spotwise.planes.serverless.supervisor.ServerlessSupervisor`
holds for the store: the client and the job's keys, the private ``redis-server`` when spotwise
started one (its lifecycle: restart after it died, stop at the end), how the functions reach the
store without the password in their arguments (issue 18 item 5), seeding the store with the
reference replica, the atomic "leave at the next step" of a scale-in, and cleaning up.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np

from spotwise.planes.serverless.schedule import Schedule
from spotwise.planes.serverless.store import Keys, RedisServer, RedisURL, connect, encode_dense, write_secret_file

#: atomically set worker(s) to leave at one step past the furthest clock (KEYS: schedule, clocks...;
#: ARGV: json list of worker ids).  Returns the leave step.
LEAVE_LUA = """
local mx = 0
for i = 2, #KEYS do
  local c = tonumber(redis.call('GET', KEYS[i]) or '0')
  if c > mx then mx = c end
end
local sched = cjson.decode(redis.call('GET', KEYS[1]))
local L = mx + 1
for _, w in ipairs(cjson.decode(ARGV[1])) do
  sched['leave'][tostring(w)] = L
end
redis.call('SET', KEYS[1], cjson.encode(sched))
return L
"""


class StoreLost(Exception):
    """The store lost its content (restarted) or cannot be reached."""


class JobStore:
    """The store of one job: ``own_redis`` (a private server spotwise stops at the end) or the
    operator's ``redis_url``; every key of the job under :class:`~spotwise.planes.serverless.store.Keys`."""

    def __init__(self, own_redis: RedisServer | None, redis_url: RedisURL | None) -> None:
        self.own_redis = own_redis
        url = own_redis.url if own_redis is not None else redis_url
        assert url is not None
        self.url: RedisURL = url
        self.r = connect(self.url)
        self.job = uuid.uuid4().hex[:12]
        self.k = Keys(self.job)
        self._leave_script = self.r.register_script(LEAVE_LUA)
        self._fn_url: RedisURL | None = None  # the store's address as functions get it (see function_url)
        self._secret_dir: Path | None = None  # a private folder holding a --redis-url's password for functions
        #: where that folder is made: the run's watchdog folder, removed with it if the driver is killed
        self.secret_parent: Path | None = None

    def seed(self, x: np.ndarray, version: int, schedule: Schedule, incarnations: dict[int, int], faults: dict[int, str]) -> None:
        """Model snapshot, schedule, clocks and incarnations (fresh or after a store loss); ``faults``
        (worker -> ``die:<step>`` / ``hang:<step>``, see :mod:`spotwise.planes.serverless.function`)."""
        k = self.k
        pipe = self.r.pipeline(transaction=True)
        pipe.set(k.model, encode_dense(x))
        pipe.set(k.model_version, version)
        # where an ISP worker's replica starts until it has a checkpoint of its own
        pipe.set(k.model0, encode_dense(x))
        pipe.set(k.model0_meta, json.dumps({"step": version}))
        pipe.set(k.schedule, schedule.to_json())
        for w in schedule.join:
            pipe.set(k.per("clock", w), version)
            pipe.set(k.per("inc", w), str(incarnations.get(w, 0)))
        pipe.set(k.seeded, "1")
        pipe.set(k.merged, version)
        for w, f in faults.items():
            pipe.set(k.per("fault", w), f)
        pipe.execute()

    def function_url(self, shares_filesystem: bool) -> RedisURL:
        """Where a function finds the store, as it travels in the function's arguments (issue 18 item 5).

        Lithops writes every call's arguments into its job data (on localhost, world-readable
        files under ``/tmp/lithops-$USER``), so when the functions share this machine's
        filesystem they get the path of a 0600 file holding the password (the private server's
        own, or one in a private 0700 folder for a ``--redis-url``), never the password.  A cloud
        backend's functions cannot read our files: their arguments (in the cloud's object
        storage, under the user's account) carry the password.
        """
        if self._fn_url is not None:
            return self._fn_url
        url = self.url
        if url.password and shares_filesystem:
            if self.own_redis is not None:
                path = self.own_redis.password_file
            else:
                self._secret_dir = Path(tempfile.mkdtemp(prefix="spotwise-secret-", dir=self.secret_parent))  # 0700
                path = write_secret_file(self._secret_dir, url.password)
            url = dataclasses.replace(url, password="", password_file=str(path))
        self._fn_url = url
        return url

    def leave(self, workers: list[int], leaving: list[int]) -> int:
        """Atomically schedule ``leaving`` to leave one step past the furthest clock of ``workers``; that step."""
        return int(self._leave_script(keys=[self.k.schedule, *[self.k.per("clock", q) for q in workers]],
                                      args=[json.dumps(leaving)]))

    def wait_reachable(self, timeout_s: float = 60.0) -> bool:
        """After a store loss: restart a private server that died, then wait until the store answers a PING.

        The private server comes back on its unix socket (an address only it can hold) before any
        client talks to it, so no password goes to whatever else may listen.  False when the store
        did not come back within ``timeout_s``.
        """
        import redis

        deadline = time.monotonic() + timeout_s
        while True:
            if self.own_redis is not None and not self.own_redis.alive():
                self.own_redis.start()
            try:
                self.r.ping()
                return True
            except (redis.ConnectionError, redis.TimeoutError, redis.AuthenticationError):
                if self.own_redis is not None and not self.own_redis.alive():
                    self.own_redis.start()
                    continue
                if time.monotonic() > deadline:
                    return False
                time.sleep(0.5)

    def clear(self) -> None:
        """Forget everything of the job: the whole private server, or only the job's keys of an operator's."""
        if self.own_redis is not None:
            self.r.flushdb()
        else:
            self.delete_job_keys()

    def delete_job_keys(self) -> None:
        for key in self.r.scan_iter(self.k.pattern(), count=1000):
            self.r.delete(key)

    def result_key(self, w: int, inc: str) -> str:
        """Where invocation ``inc`` of worker ``w`` leaves its result."""
        return self.k.prefix + f"result:{w}:{inc}"

    def close(self) -> None:
        """Stop the private server (or delete the job's keys from the operator's) and remove the
        functions' password folder; never raises (it runs on the way out of an interrupt too)."""
        try:
            if self.own_redis is not None:
                self.own_redis.stop()
            else:
                self.delete_job_keys()
        except Exception:
            pass
        finally:
            if self._secret_dir is not None:
                shutil.rmtree(self._secret_dir, ignore_errors=True)

