"""The serverless data plane (``cluster.kind: serverless``; ``papers/004_9dc2adb66dc8d26e.txt`` MLLess).

:class:`ServerlessPlane` is the :class:`~spotwise.control.dataplane.DataPlane` of a serverless job:
the job controller runs the loop, consults the policies (the
scale-in auto-tuner emits ``Resize``), checkpoints and writes the summary, as for VM jobs; the
plane is MLLess's supervisor (Sec. 3.1 "Supervisor") below it: it invokes the worker functions,
synchronises their progress through the store and merges every step they all committed.

Members are *function slots* (:class:`~spotwise.capacity.functions.FunctionCapacity`): never
revoked by a market; a slot's function that dies, errs or stops beating (``heartbeat_timeout_s``) is
*fenced* (its incarnation changes, so a late commit of the lost one is refused by the store) and
invoked again in the same slot; it resumes from what is committed, redoing the lost step on the
same samples.  A function that reaches its lease (the platform's timeout) returns and is invoked
again.  A scale-in ``Resize`` releases slots in the controller at once; the plane schedules their
leave one step past the furthest clock (Sec. 4.2), and merges each leaver's replica at that step.

**The reference replica** is the controller's parameters (``job.params``): the plane applies every
worker's committed (significant) update of each completed step, in step order, and the evictions,
so it holds the model every worker converges to (exactly the workers' replicas under BSP; under
ISP they differ from it by their own residual).  It snapshots that replica into Redis every
``snapshot_every`` steps so a new invocation can rebuild its replica without replaying the whole
history; the controller's checkpoints hold it (with the membership schedule).  If the store loses
its content (a Redis restart), the plane re-seeds it from the replica at the last complete step and
re-invokes every worker; the workers' uncommitted ISP residuals are lost and the event log says so
(``store`` event, ``status: "reseeded"``).

**Billing** (:class:`~spotwise.planes.serverless.function_billing.FunctionAccounting`): every
invocation per request and per GB-second at the cluster's function price (``catalog.functions``);
the supervisor as a function for the whole session (as in MLLess); the Redis node as an on-demand
instance (``cluster.redis_instance``, IBM ``M1.2x16`` by default, paper 004 Table 2).

**Parts.**  :class:`~spotwise.planes.serverless.job_store.JobStore` (the store's client and keys,
the private ``redis-server``'s lifecycle, the functions' password file),
:class:`~spotwise.planes.serverless.invocations.FunctionPool` (invoking, watching, re-invoking and
collecting the worker functions) and :class:`~spotwise.planes.serverless.function_billing.FunctionMeter`
(the ledger and the function seconds); the plane keeps the merge loop and the schedule.
"""

from __future__ import annotations

import json
import math
import time
from typing import Any

import numpy as np

from spotwise.config import JobSpec
from spotwise.control.accounting import AccountedJob, Billing
from spotwise.control.dataplane import PlaneHost
from spotwise.control.carried import refuse
from spotwise.control.checkpoint import refuse_foreign_checkpoint
from spotwise.control.sync import FullSync, SyncStrategy
from spotwise.market.catalog import Catalog
from spotwise.market.preemption import MarketEvent
from spotwise.planes.ps.compute import Compute
from spotwise.planes.serverless.function_billing import FunctionAccounting, FunctionMeter
from spotwise.planes.serverless.invocations import FunctionPool
from spotwise.planes.serverless.job_store import JobStore, StoreLost
from spotwise.planes.serverless.reaper import FolderWatchdog
from spotwise.planes.serverless.schedule import SampleStream, Schedule, epochs_done
from spotwise.planes.serverless.significance import merge_leaving_replica
from spotwise.planes.serverless.totals import carried_counters, fresh_counters, restored_counters
from spotwise.planes.serverless.store import RedisServer, RedisURL, apply_encoded, decode_dense, encode_dense, encoded_finite
from spotwise.policies.base import Checkpoint, Decision, Policy, Resize
from spotwise.spec.load import to_plain


#: the fraction of the platform's timeout after which a function ends its lease and is re-invoked
LEASE_FRACTION = 0.8


class ServerlessPlane:
    """The serverless data plane of one job; see the module docstring.

    ``redis_url``: an operator's Redis (else a private ``redis-server`` on a unix socket, or
    ``redis_server`` when a test gives one); ``backend``: where functions run (Lithops's localhost
    backend by default); ``faults`` (tests, benchmarks): worker -> ``"die:<step>"`` or
    ``"hang:<step>"`` (see :mod:`spotwise.planes.serverless.function`), written into the store when
    the job starts; ``network_mbps``: emulate the store's link in the functions (0: the real link
    only); ``lease_steps``: an invocation also ends after this many steps (0: only the time lease).
    """

    name = "serverless"

    def __init__(
        self,
        spec: JobSpec,
        *,
        redis_url: RedisURL | None = None,
        backend: Any = None,
        heartbeat_timeout_s: float = 30.0,
        snapshot_every: int = 20,
        lease_s: float | None = None,
        redis_server: RedisServer | None = None,
        catalog: Catalog | None = None,
        poll_s: float = 0.001,
        faults: dict[int, str] | None = None,
        network_mbps: float = 0.0,
        isp_checkpoint_every: int = 50,
        lease_steps: int = 0,
    ) -> None:
        cl = spec.cluster
        if cl.kind != "serverless":
            raise ValueError("the serverless plane runs cluster.kind: serverless specs")
        if not (network_mbps >= 0 and math.isfinite(network_mbps)):
            raise ValueError(f"network_mbps must be >= 0, got {network_mbps!r}")
        self._job: PlaneHost | None = None
        self.spec = spec
        self.redis_url = redis_url
        self._redis_server = redis_server
        self._backend = backend
        self.heartbeat_timeout_s = float(heartbeat_timeout_s)
        self.snapshot_every = max(1, int(snapshot_every))
        #: ISP workers checkpoint their replica every this many steps; a re-invocation replays
        #: at most this many steps (bytes of a checkpoint amortised over it vs replay time)
        self.isp_checkpoint_every = max(1, int(isp_checkpoint_every))
        self.lease_s = float(lease_s) if lease_s is not None else LEASE_FRACTION * float(cl.function_timeout_s)
        self.poll_s = float(poll_s)
        self.lease_steps = max(0, int(lease_steps))
        self.faults = dict(faults or {})
        self.network_mbps = float(network_mbps)
        self._watchdog: FolderWatchdog | None = None
        catalog = catalog or Catalog.default()
        self.pricing = catalog.function(cl.functions)
        gb = cl.memory_mb / 1024.0
        self.pricing.call_cost(gb, 1.0)  # refuses a function size the platform does not offer
        #: the money: functions per request and GB-second, the Redis node, earlier sessions
        self.meter = FunctionMeter(self.pricing, gb)
        self.sync, self.staleness = cl.sync, int(cl.staleness)
        self.significance = float(cl.significance) if cl.sync == "isp" else 0.0
        self.schedule = Schedule.initial(cl.workers)
        #: the run's counters (summed over its sessions: a checkpoint carries them, :mod:`.totals`)
        self.counters = fresh_counters()
        #: the store and the function pool exist while the job runs (:meth:`begin`)
        self._store: JobStore | None = None
        self._functions: FunctionPool | None = None
        self._stream: SampleStream | None = None
        self._leaving: list[int] = []
        self._deleted_below = 0
        self._resumed = False

    # ------------------------------------------------------------------ parts
    @property
    def job(self) -> PlaneHost:
        if self._job is None:
            raise RuntimeError("the plane is not attached to a job")
        return self._job

    @property
    def store(self) -> JobStore:
        if self._store is None:
            raise RuntimeError("the store starts with the run")
        return self._store

    @property
    def functions(self) -> FunctionPool:
        if self._functions is None:
            raise RuntimeError("the functions start with the run")
        return self._functions

    @property
    def backend_name(self) -> str:
        """Where the functions run: the given backend's name, else the default one :meth:`begin` makes."""
        if self._backend is None:
            from spotwise.planes.serverless.backend import DEFAULT_BACKEND

            return DEFAULT_BACKEND
        return str(getattr(self._backend, "name", "custom"))

    @property
    def stream(self) -> SampleStream:
        if self._stream is None:
            self._stream = SampleStream(self.job.state.n_train, self.spec.seed, bool(getattr(self.job.state, "ordered", False)))
        return self._stream

    # ================================================================== the DataPlane interface
    def default_compute(self, spec: JobSpec, standby: int) -> Compute | None:
        return None  # the functions are invoked by the plane's pool, not held as processes

    def attach(self, job: PlaneHost) -> None:
        self._job = job

    def make_accounting(self, job: AccountedJob) -> Billing:
        return FunctionAccounting(job, self.meter,
                                  lambda T: self._functions.running_seconds(T) if self._functions is not None else 0.0)

    def log_meta(self) -> dict[str, Any]:
        cl = self.spec.cluster
        return {"instance": f"functions:{self.pricing.name}", "backend": self.backend_name,
                # an operator's store; a private one is named by the ``store`` event when it starts
                "redis": self.redis_url.redacted if self.redis_url is not None else "private",
                "memory_mb": cl.memory_mb, "significance": self.significance, "staleness": self.staleness,
                "network_mbps": self.network_mbps}

    def checkpoint_state(self) -> dict[str, Any]:
        # and what the summary adds up over the run's sessions (spotwise.control.carried; issue 54)
        return {"kind": "serverless", "schedule": self.schedule.to_json(), "plane_carried": carried_counters(self.counters)}

    def restore_state(self, state: dict[str, Any]) -> None:
        """The membership schedule of the checkpoint's step (a leave scheduled past it stays) and the
        run's counters so far; both checked (a run directory is untrusted: exit 2)."""
        refuse_foreign_checkpoint(state, "serverless")
        self.schedule = Schedule.restored(state["schedule"], self.spec.cluster.workers)
        if sorted(state["available"]) != self.schedule.active_now():  # released slots are the scheduled leavers
            raise refuse("available", state["available"], f"the function slots its schedule keeps ({self.schedule.active_now()})")
        self.counters.update(restored_counters(state))  # the pool holds this very dict
        self._resumed = True

    def started(self) -> None:
        self._deleted_below = self.job.step

    def begin(self) -> None:
        """Start the store (a private server unless given one), seed it and invoke the functions --
        none of it when a resumed job has nothing left to train (its summary is the finished run's:
        no function invoked, no store started)."""
        job = self.job
        if self._resumed and job.done():
            return
        if self._backend is None:
            from spotwise.planes.serverless.backend import LithopsBackend

            self._backend = LithopsBackend(max_workers=self.spec.cluster.workers + 2)
        own = self._redis_server if self._redis_server is not None else (RedisServer() if self.redis_url is None else None)
        try:
            self._store = JobStore(own, self.redis_url)
        except BaseException:
            if own is not None:  # a store that cannot start must not leave a server behind
                own.stop()
            raise
        # the store and the functions die with a driver killed by SIGKILL (issue 30 item 7)
        self._watchdog = FolderWatchdog(own.dir if own is not None else None)
        self._store.secret_parent = self._watchdog.path  # an operator's Redis: its password file goes there
        def emit(kind: str, **fields: Any) -> None:
            job.log.emit(kind, **fields)

        self._functions = FunctionPool(self.store, self.meter, clock=lambda: job.T, emit=emit,
                                       counters=self.counters, worker_args=self._worker_args, workers=self.spec.cluster.workers,
                                       heartbeat_timeout_s=self.heartbeat_timeout_s, backend=self._backend)
        job.log.emit("store", status="started", redis=self.store.url.redacted, step=job.step,
                     **({"note": "the store is seeded afresh; ISP residuals since the checkpoint are not kept"}
                        if self._resumed else {}))
        self._seed_store()
        self.functions.invoke_all(self.schedule.members(job.step), "resume" if self._resumed else "start")

    def sync_strategy(self, sync: str, sync_n: int | None) -> SyncStrategy:
        """Every step needs every active worker's update (BSP; SSP and ISP bound the lead, not the
        commit): a step's expected time is the full-sync round's (paper 000 eq. 14)."""
        return FullSync()

    def before_tick(self) -> None:
        return None

    def tick(self) -> None:
        """Merge every step the workers completed, watch the functions; re-seed a lost store."""
        try:
            merged = self._merge_ready()
            self._watch_functions()
        except StoreLost as e:
            self._recover_store(str(e))
            return
        if not merged:
            time.sleep(self.poll_s)

    def on_join(self, w: int) -> None:
        return None  # the slot's function is invoked when the run begins

    def on_leave(self, w: int, reason: str) -> None:
        self._leaving.append(w)  # scheduled together when the decision is carried out

    def on_market_event(self, ev: MarketEvent, joined: bool) -> None:
        return None

    def refuse(self, d: Decision) -> str | None:
        if isinstance(d, Resize):
            if d.workers < 1:
                return "a serverless job keeps at least one function"
            if d.workers > len(self.job.members):
                return "functions only scale in (paper 004 Sec. 4.2): a job cannot add workers"
            return None
        if isinstance(d, Checkpoint):
            return None
        return f"{type(d).__name__} acts on VM markets; a serverless job takes Resize (scale-in) and Checkpoint"

    def after_decision(self, policy: Policy, d: Decision) -> None:
        """The released slots leave one step past the furthest clock (the store's leave script)."""
        if not self._leaving:
            return
        leaving, self._leaving = sorted(self._leaving), []
        L = self.store.leave(list(self.schedule.join), leaving)
        for q in leaving:
            self.schedule.leave[q] = L
            # merged when the job commits step L; a job that ends first never removes it
            self.job.log.emit("function", worker=q, status="leaving", at=L, step=self.job.step)

    def ready_for_checkpoint(self, why: str) -> bool:
        return True  # the reference replica is the controller's parameters at every merged step

    def stop(self) -> None:
        """Tell the functions to stop and collect them (bounded), billing every one."""
        import redis

        if self._store is None:
            return
        try:
            self.store.r.set(self.store.k.stop, str(self.job.step))
        except (redis.ConnectionError, redis.TimeoutError):
            pass
        self.functions.collect_final()

    def before_finish(self) -> None:
        return None

    def summary_extra(self) -> dict[str, Any]:
        job = self.job
        c = self.counters
        return {
            "kind": "serverless", "backend": self.backend_name, "sync": self.sync,
            "staleness": self.staleness, "significance": self.significance, "functions": self.pricing.name,
            "memory_mb": self.spec.cluster.memory_mb, "function_seconds": self.meter.function_seconds,
            "epochs": epochs_done(self.schedule, self.stream, job.step, self.spec.workload.batch_size),
            "pushed_fraction": c["entries_merged"] / c["entries_computed"] if c["entries_computed"] else None,
            "workers_at_end": len(self.schedule.active_now()),
            "redis": self._store.url.redacted if self._store is not None else None, "network_mbps": self.network_mbps,
            "decisions": job.counters.decisions, **c,
        }

    def shutdown(self) -> None:
        """Stop the functions, the backend and the private store; also after an interrupt (Ctrl-C,
        SIGTERM) or a crash, when the stop flag tells the running functions to return at once.  A
        backend given to a run that never started its store (nothing left to train, a store that
        could not start) is shut down too."""
        if self._store is not None and self.job.status == "running":  # not a normal end (that sets the flag in stop)
            try:
                self.store.r.set(self.store.k.stop, str(self.job.step))
            except Exception:
                pass
        try:
            if self._backend is not None and hasattr(self._backend, "shutdown"):
                self._backend.shutdown(timeout_s=5.0)
        finally:
            if self._store is not None:
                self.store.close()
            if self._watchdog is not None:
                self._watchdog.close()

    # ================================================================== the store and the functions
    def _seed_store(self) -> None:
        """Model snapshot, schedule, clocks and incarnations (fresh or after a store loss); faults are injected once."""
        self.store.seed(self.job.params, self.job.step, self.schedule, self.functions.inc_counter, self.faults)
        self.faults = {}

    def _worker_args(self, w: int, inc: str) -> dict[str, Any]:
        wl = self.spec.workload
        fn_url = self.store.function_url(getattr(self._backend, "shares_filesystem", True))
        return {"redis": fn_url.to_dict(), "job": self.store.job, "worker": w, "inc": inc, "lease_s": self.lease_s,
                "sync": self.sync, "staleness": self.staleness, "significance": self.significance,
                "batch": int(wl.batch_size), "lr": float(wl.lr), "workload": to_plain(wl), "seed": int(self.spec.seed),
                "ckpt_every": self.isp_checkpoint_every, "lease_steps": self.lease_steps, "network_mbps": self.network_mbps}

    def _watch_functions(self) -> None:
        """Let the pool bill, log and re-invoke finished and silent functions; a failure it reports ends the job."""
        job = self.job
        failure = self.functions.watch(running=job.status == "running", version=job.step, active_now=self.schedule.active_now)
        if failure is not None:
            job.status, job.stop_message = "failed", failure

    # ------------------------------------------------------------------ merging
    def _merge_ready(self) -> bool:
        """Merge every step all its workers have committed; True if at least one was."""
        import redis

        job = self.job
        r, k = self.store.r, self.store.k
        merged = False
        try:
            while True:
                t = job.step
                members = self.schedule.members(t)
                if not members:
                    job.status, job.stop_message = "failed", "no worker left in the pool"
                    return merged
                clocks = r.mget([k.per("clock", q) for q in members])
                if any(c is None for c in clocks):
                    raise StoreLost("the store lost the workers' clocks")
                if not all(int(c) > t for c in clocks):
                    return merged
                pipe = r.pipeline(transaction=False)
                for q in members:
                    pipe.get(k.upd(t, q))
                    pipe.get(k.meta(t, q))
                res = pipe.execute()
                self._apply_step(t, members, res[0::2], res[1::2])
                merged = True
                if job.done():
                    return merged
        except (redis.ConnectionError, redis.TimeoutError) as e:
            raise StoreLost(f"the store cannot be reached ({e})") from None

    def _apply_step(self, t: int, members: list[int], blobs: list[bytes | None], metas: list[bytes | None]) -> None:
        """Merge step ``t`` into the reference replica and log it as the job's committed step."""
        job = self.job
        x = job.params
        loss = 0.0
        total = 0
        nnz = 0
        computed = 0
        parsed = []
        for q, data, meta in zip(members, blobs, metas):
            if data is None or meta is None:
                raise StoreLost(f"update of worker {q} at step {t} is missing from the store")
            m = json.loads(meta)
            loss += float(m["loss"]) * int(m["n"])
            total += int(m["n"])
            parsed.append((data, m))
        bad = [q for q, (data, _) in zip(members, parsed) if not encoded_finite(data)]
        if not math.isfinite(loss) or bad:  # nothing applied: the last good step is checkpointed, exit 2
            job.nonfinite(f"the loss is {loss / max(1, total)}" if not math.isfinite(loss)
                          else f"the update of worker {bad[0]} is not finite")
        for data, m in parsed:
            n_entries = apply_encoded(data, x)
            nnz += n_entries
            computed += int(m.get("computed", n_entries))
            self.counters["bytes_in"] += len(data)
        self.counters["entries_merged"] += nnz
        self.counters["entries_computed"] += computed
        loss /= max(1, total)
        job.counters.samples += total
        job.step = t + 1
        self.store.r.set(self.store.k.merged, job.step)  # workers stay within MAX_LEAD steps of it
        for q, lv in self.schedule.leave.items():
            if lv == job.step:
                self._merge_leaver(q)
        duration = job.T - job.last_commit_T
        job.last_commit_T = job.T
        job.last_loss = loss
        job.ema_loss = loss if job.ema_loss is None else 0.9 * job.ema_loss + 0.1 * loss
        job.loss_history.append((job.step, job.T, float(loss), len(members)))
        wl = self.spec.workload
        job.log.emit("step", step=job.step, loss=loss, active=len(members), lr=float(job.lr), sync=self.sync,
                     duration=duration, cost=job.cost_so_far(),
                     epoch=int(epochs_done(self.schedule, self.stream, job.step, wl.batch_size)),
                     contributions=len(members), pushed=nnz, computed=computed)
        job.committed()
        if job.step % self.snapshot_every == 0:
            self._snapshot()
        if job.step % wl.eval_every == 0:
            job.evaluate()
        job.apply_policies()
        job.after_commit()

    def _merge_leaver(self, q: int) -> None:
        """Average the leaving worker's replica into the reference (paper 004 Sec. 4.2)."""
        job = self.job
        deadline = time.monotonic() + self.heartbeat_timeout_s * 4
        while True:
            data = self.store.r.get(self.store.k.per("replica", q))
            if data is not None:
                break
            self._watch_functions()
            if time.monotonic() > deadline:
                raise RuntimeError(f"worker {q} never published its replica")
            time.sleep(self.poll_s)
        job.params[:] = merge_leaving_replica(job.params, decode_dense(data, job.params.size)).astype(np.float32)
        job.log.emit("function", worker=q, status="merged", step=job.step)

    def _snapshot(self) -> None:
        """Write the reference replica for new invocations; drop the updates it makes unneeded."""
        job = self.job
        r, k = self.store.r, self.store.k
        pipe = r.pipeline(transaction=True)
        pipe.set(k.model, encode_dense(job.params))
        pipe.set(k.model_version, job.step)
        pipe.execute()
        # updates of steps before the snapshot are in it; every live worker is past them
        clocks = [int(c or 0) for c in r.mget([k.per("clock", q) for q in self.schedule.join])]
        if self.sync == "isp":  # a re-invoked ISP worker replays from its last replica checkpoint
            clocks = [(c // self.isp_checkpoint_every) * self.isp_checkpoint_every for c in clocks]
        low = min([job.step, *clocks]) - self.staleness - 2
        old = self._deleted_below
        if low > old:
            keys = [k.upd(t, q) for t in range(old, low) for q in self.schedule.members(t)]
            keys += [k.meta(t, q) for t in range(old, low) for q in self.schedule.members(t)]
            for i in range(0, len(keys), 1000):
                r.delete(*keys[i : i + 1000])
            self._deleted_below = low

    def _recover_store(self, why: str) -> None:
        """Re-seed a store that lost its content from the reference replica; re-invoke everyone."""
        job = self.job
        self.counters["store_reseeds"] += 1
        if not self.store.wait_reachable(60.0):
            job.status, job.stop_message = "failed", f"the Redis store is gone ({why}) and did not come back in 60 s"
            job.log.emit("store", status="lost", why=why)
            return
        # the steps after the reference replica are redone by every worker (on the same samples)
        self.functions.abandon_running()
        self.store.clear()
        self._deleted_below = job.step
        # a leave scheduled past the replica's step stays (the controller released the slot): the
        # leaver redoes the steps up to it and leaves there; a worker that left for good stays out
        self.schedule = Schedule({w: min(j, job.step) for w, j in self.schedule.join.items()}, dict(self.schedule.leave))
        self._seed_store()
        job.log.emit("store", status="reseeded", why=why, step=job.step,
                     note="workers' uncommitted ISP residuals were lost; committed steps were kept")
        self.functions.invoke_all(self.schedule.members(job.step), "store")
