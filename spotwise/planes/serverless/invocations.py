"""The worker functions of a serverless job: launch, watch, re-invoke, collect (``papers/004_9dc2adb66dc8d26e.txt`` Sec. 3.1).

:class:`FunctionPool` invokes every worker as a function (a new *incarnation* each time, which
fences any earlier one: a late commit of a lost incarnation is refused by the store), watches the
results and heartbeats in the store, and bills, logs and re-invokes:

* a function that returns at its lease (the platform's timeout) or after an error is invoked again;
  it resumes from what is committed;
* a function that stops beating for ``heartbeat_timeout_s`` is *lost*: billed until then and
  invoked again (unless it had left the pool).  Its cold start (invocation to its first beat: the
  platform starting it, imports, building the model, restoring the replica) is allowed
  :meth:`FunctionPool.startup_allowance_s` instead: several times the slowest cold start seen in
  this run, at least ``STARTUP_FLOOR_S`` -- a fixed beat timeout there re-invoked every function
  forever on a busy machine, each one lost while still starting;
* a worker that returns ``left`` (scale-in) is not invoked again.

The supervisor holds one pool; it decides what a failure means for the job (the pool returns it).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from spotwise.planes.serverless.function_billing import FunctionMeter
from spotwise.planes.serverless.job_store import JobStore, StoreLost

#: the least time a function is given from its invocation to its first beat (its cold start)
STARTUP_FLOOR_S = 60.0
#: ... and the factor over the slowest cold start measured in the run, when that is longer
STARTUP_FACTOR = 4.0

#: the result fields a function reports that the event log keeps at the end of a job
_FINAL_FIELDS = ("bytes_out", "bytes_in", "compute_s", "wait_s", "pull_s", "network_s")


class Invocation:
    """One function call of worker ``w`` (incarnation ``inc``)."""

    __slots__ = ("w", "inc", "invoked_t", "invoked_wall", "future", "done", "started")

    def __init__(self, w: int, inc: str, invoked_t: float, future: Any) -> None:
        self.w, self.inc, self.invoked_t, self.future = w, inc, invoked_t, future
        self.invoked_wall = time.time()
        self.done = False
        #: wall time of this incarnation's first beat (None: still starting)
        self.started: float | None = None


def _beat(hb: bytes | str | None) -> tuple[float, str | None] | None:
    """A heartbeat value: ``(wall time, incarnation)`` (``None`` incarnation: an older function's beat)."""
    if hb is None:
        return None
    parts = (hb.decode() if isinstance(hb, bytes) else hb).split()
    try:
        return float(parts[0]), (parts[1] if len(parts) > 1 else None)
    except (IndexError, ValueError):
        return None


class FunctionPool:
    """The job's function invocations on ``backend`` (see the module docstring).

    ``clock`` is the job's time in seconds, ``emit`` the event log's ``emit``, ``counters`` the
    run's counters (``invocations``, ``lost``, ``errors``, ``leases`` and ``left`` are counted here),
    ``worker_args(w, inc)`` the arguments of one call and ``workers`` the pool size (more than
    ``10 x workers`` errors before the first step fail the job).
    """

    def __init__(self, store: JobStore, meter: FunctionMeter, *, clock: Callable[[], float], emit: Callable[..., None],
                 counters: dict[str, int], worker_args: Callable[[int, str], dict[str, Any]], workers: int,
                 heartbeat_timeout_s: float, backend: Any = None) -> None:
        self.store, self.meter, self.clock, self.emit = store, meter, clock, emit
        self.counters, self.worker_args, self.workers = counters, worker_args, int(workers)
        self.heartbeat_timeout_s = float(heartbeat_timeout_s)
        self.backend = backend
        self.invocations: dict[int, Invocation] = {}
        self.inc_counter: dict[int, int] = {}
        #: workers that left the pool for good (scale-in)
        self.left: set[int] = set()
        self._next_watch = 0.0
        #: the slowest cold start (invocation to first beat) seen in this run, seconds
        self.slowest_start_s = 0.0

    def startup_allowance_s(self) -> float:
        """How long a function may take from its invocation to its first beat before it is lost."""
        return max(self.heartbeat_timeout_s, STARTUP_FLOOR_S, STARTUP_FACTOR * self.slowest_start_s)

    def live(self) -> list[Invocation]:
        return [inv for inv in self.invocations.values() if not inv.done]

    def running_seconds(self, T: float) -> float:
        """Function seconds of the invocations still running at ``T`` (not billed yet)."""
        return sum(max(0.0, T - inv.invoked_t) for inv in self.live())

    def invoke(self, w: int, why: str) -> None:
        self.invoke_all([w], why)

    def invoke_all(self, workers: list[int], why: str) -> None:
        """Invoke ``workers`` (a new incarnation each, which fences any earlier one) in one batch."""
        incs = []
        for w in workers:
            inc_n = self.inc_counter.get(w, 0) + 1
            self.inc_counter[w] = inc_n
            incs.append(str(inc_n))
            self.store.r.set(self.store.k.per("inc", w), incs[-1])
        args = [self.worker_args(w, inc) for w, inc in zip(workers, incs)]
        if len(workers) > 1 and hasattr(self.backend, "invoke_many"):
            futs = self.backend.invoke_many(args)
        else:
            futs = [self.backend.invoke(a) for a in args]
        for w, inc, fut in zip(workers, incs, futs):
            self.invocations[w] = Invocation(w, inc, self.clock(), fut)
            self.counters["invocations"] += 1
            self.emit("function", worker=w, status="invoked", inc=int(inc), why=why)

    def watch(self, *, running: bool, version: int, active_now: Callable[[], list[int]]) -> str | None:
        """Results of finished invocations, lost (silent) functions: bill, log and re-invoke.

        At most every 0.2 s.  ``running``: the job still runs (else nothing is re-invoked);
        returns why the job failed, if it did.  :class:`StoreLost` when the store cannot be reached.
        """
        import redis

        if self.clock() < self._next_watch:
            return None
        self._next_watch = self.clock() + 0.2
        live = self.live()
        if not live:
            if running and not active_now():
                return "no worker left in the pool"
            return None
        try:
            pipe = self.store.r.pipeline(transaction=False)
            for inv in live:
                pipe.get(self.store.result_key(inv.w, inv.inc))
                pipe.get(self.store.k.per("hb", inv.w))
            res = pipe.execute()
        except (redis.ConnectionError, redis.TimeoutError) as e:
            raise StoreLost(f"the store cannot be reached ({e})") from None
        failure: str | None = None
        now = time.time()
        for inv, result, hb in zip(live, res[0::2], res[1::2]):
            if result is not None:
                failure = self._ended(inv, json.loads(result), running and failure is None, version) or failure
                continue
            beat = _beat(hb)
            if inv.started is None and beat is not None and beat[0] >= inv.invoked_wall and beat[1] in (None, inv.inc):
                inv.started = beat[0]
                self.slowest_start_s = max(self.slowest_start_s, beat[0] - inv.invoked_wall)
            if inv.started is None:  # still starting: the cold-start allowance
                if now - inv.invoked_wall > self.startup_allowance_s():
                    self._lost(inv, f"no first heartbeat {now - inv.invoked_wall:.1f} s after its invocation",
                               running and failure is None)
                continue
            last = max(beat[0] if beat is not None and beat[1] in (None, inv.inc) else inv.started, inv.started)
            if now - last > self.heartbeat_timeout_s:
                self._lost(inv, f"no heartbeat for {now - last:.1f} s", running and failure is None)
        return failure

    def _ended(self, inv: Invocation, res: dict[str, Any], running: bool, version: int) -> str | None:
        inv.done = True
        self.meter.bill(self.clock(), float(res["ended"]) - float(res["started"]))
        status = res["status"]
        self.emit("function", worker=inv.w, status=status, inc=int(inv.inc), steps=res.get("steps"),
                  seconds=float(res["ended"]) - float(res["started"]), error=res.get("error"),
                  bytes_out=res.get("bytes_out"), bytes_in=res.get("bytes_in"), compute_s=res.get("compute_s"),
                  wait_s=res.get("wait_s"))
        if status == "left":
            self.left.add(inv.w)
            self.counters["left"] += 1
            return None
        if status in ("stopped",) or not running:
            return None
        if status == "fenced":
            return None  # a newer incarnation runs already
        if status == "error":
            self.counters["errors"] += 1
            if self.counters["errors"] > 10 * max(1, self.workers) and version == 0:
                return f"worker functions keep failing: {res.get('error')}"
        else:
            self.counters["leases"] += 1
        self.invoke(inv.w, "error" if status == "error" else "lease")
        return None

    def _lost(self, inv: Invocation, why: str, running: bool) -> None:
        inv.done = True
        self.counters["lost"] += 1
        self.meter.bill(self.clock(), self.clock() - inv.invoked_t)  # billed until the platform would have stopped it
        self.emit("function", worker=inv.w, status="lost", inc=int(inv.inc), why=why)
        if running and inv.w not in self.left:
            self.invoke(inv.w, "lost")

    def abandon_running(self) -> None:
        """Bill every running invocation up to now and stop waiting for it (the store lost its work)."""
        for inv in self.invocations.values():
            if not inv.done:
                inv.done = True
                self.meter.bill(self.clock(), self.clock() - inv.invoked_t)

    def collect_final(self, timeout_s: float = 30.0) -> None:
        """Wait (bounded) for every running invocation to see the stop and return; bill them all."""
        import redis

        deadline = time.monotonic() + timeout_s
        while True:
            live = self.live()
            if not live:
                return
            try:
                results = self.store.r.mget([self.store.result_key(inv.w, inv.inc) for inv in live])
            except (redis.ConnectionError, redis.TimeoutError):
                results = [None] * len(live)
            for inv, res in zip(live, results):
                if res is not None:
                    r = json.loads(res)
                    inv.done = True
                    self.meter.bill(self.clock(), float(r["ended"]) - float(r["started"]))
                    self.emit("function", worker=inv.w, status=r["status"], inc=int(inv.inc), steps=r.get("steps"),
                              seconds=float(r["ended"]) - float(r["started"]), **{k: r.get(k) for k in _FINAL_FIELDS})
            if time.monotonic() > deadline:
                for inv in live:
                    if not inv.done:
                        inv.done = True
                        self.meter.bill(self.clock(), self.clock() - inv.invoked_t)
                        self.emit("function", worker=inv.w, status="lost", inc=int(inv.inc), why="did not stop in time")
                return
            time.sleep(0.02)
