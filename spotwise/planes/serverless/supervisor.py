"""The supervisor of a serverless job (``papers/004_9dc2adb66dc8d26e.txt`` Sec. 3.1 "Supervisor").

MLLess's supervisor collects and aggregates statistics, synchronises worker progress, stops the
job at its target and removes workers whose marginal contribution no longer pays (Sec. 4.2).
:class:`ServerlessSupervisor` is that, as a spotwise executor beside the VM
:class:`~spotwise.control.controller.JobController`, sharing with it the spec, the policies
(``decide(observation) -> Decision``: the scale-in auto-tuner emits ``Resize``), the
:class:`~spotwise.market.billing.Ledger`, the event log, checkpoints and the run summary.

It also keeps the reference replica: it applies every worker's committed (significant) update
of each completed step, in step order, and the evictions, so it holds the model every worker
converges to (exactly the workers' replicas under BSP; under ISP they differ from it by their own
residual).  It snapshots that replica into Redis every ``snapshot_every`` steps so a new
invocation can rebuild its replica without replaying the whole history, and checkpoints it into
the run directory.

**Faults.**  A function that dies, errs or stops beating (``heartbeat_timeout_s``) is *fenced*
(its incarnation changes, so a late commit of the lost one is refused by the store) and invoked
again; it resumes from what is committed, redoing the lost step on the same samples.  A function
that reaches its lease (the platform's timeout) returns and is invoked again.  If the store loses
its content (a Redis restart), the supervisor re-seeds it from its replica at the last complete
step and re-invokes every worker; the workers' uncommitted ISP residuals are lost and the event
log says so (``store`` event, ``status: "reseeded"``).

**Billing.**  Every invocation is billed per request and per GB-second of its duration at the
cluster's function price (``catalog.functions``); the supervisor itself runs as a function for the
whole job (as in MLLess); the Redis node is an on-demand instance (``cluster.redis_instance``,
IBM ``M1.2x16`` by default, paper 004 Table 2).

**Parts.**  The supervisor holds three components: :class:`~spotwise.planes.serverless.job_store.JobStore`
(the store's client and keys, the private ``redis-server``'s lifecycle, the functions' password file),
:class:`~spotwise.planes.serverless.invocations.FunctionPool` (invoking, watching, re-invoking and
collecting the worker functions) and :class:`~spotwise.planes.serverless.function_billing.FunctionMeter`
(the ledger and the function seconds).  It keeps the merge loop, the reference replica, the policies,
checkpoints and the summary.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from spotwise.config import JobSpec
from spotwise.events import EventLog, RunSummary, write_summary
from spotwise.market.catalog import Catalog
from spotwise.policies import Observation, Resize, make_policies
from spotwise.policies.base import Decision, Noop, Policy, consult
from spotwise.control.checkpoint import save_checkpoint
from spotwise.control.rundir_io import SPEC_FILE
from spotwise.planes.serverless.function_billing import FunctionMeter
from spotwise.planes.serverless.invocations import FunctionPool
from spotwise.planes.serverless.job_store import JobStore, StoreLost
from spotwise.planes.serverless.schedule import SampleStream, Schedule, epochs_done
from spotwise.planes.serverless.significance import merge_leaving_replica
from spotwise.planes.serverless.store import RedisServer, RedisURL, apply_encoded, decode_dense, encode_dense
from spotwise.specload import to_plain
from spotwise.workloads.params import flat_params, set_flat_params
from spotwise.workloads.registry import make_workload

#: the fraction of the platform's timeout after which a function ends its lease and is re-invoked
LEASE_FRACTION = 0.8

class ServerlessSupervisor:
    """Run ``spec`` (``cluster.kind: serverless``) into ``out_dir``; see the module docstring."""

    def __init__(
        self,
        spec: JobSpec,
        out_dir: str | Path,
        *,
        redis_url: RedisURL | None = None,
        backend: Any = None,
        progress: Callable[[dict[str, Any]], None] | None = None,
        heartbeat_timeout_s: float = 30.0,
        snapshot_every: int = 20,
        lease_s: float | None = None,
        redis_server: RedisServer | None = None,
        catalog: Catalog | None = None,
        poll_s: float = 0.001,
        faults: dict[int, str] | None = None,
        network_mbps: float = 0.0,
        isp_checkpoint_every: int = 50,
        resume: bool = False,
        lease_steps: int = 0,
    ) -> None:
        cl = spec.cluster
        if cl.kind != "serverless":
            raise ValueError("ServerlessSupervisor runs cluster.kind: serverless specs")
        self.spec = spec
        self.out = Path(out_dir)
        self.out.mkdir(parents=True, exist_ok=True)
        self.progress = progress
        self.heartbeat_timeout_s = float(heartbeat_timeout_s)
        self.snapshot_every = max(1, int(snapshot_every))
        #: ISP workers checkpoint their replica every this many steps; a re-invocation replays
        #: at most this many steps (bytes of a checkpoint amortised over it vs replay time)
        self.isp_checkpoint_every = max(1, int(isp_checkpoint_every))
        self.lease_s = float(lease_s) if lease_s is not None else LEASE_FRACTION * float(cl.function_timeout_s)
        self.poll_s = float(poll_s)
        #: an invocation also ends after this many steps (0: only the time lease); for tests
        self.lease_steps = max(0, int(lease_steps))
        #: fault injection (tests, benchmarks): worker -> "die:<step>" or "hang:<step>" (see
        #: :mod:`spotwise.planes.serverless.function`), written into the store when the job starts
        self.faults = dict(faults or {})
        #: emulate the store's link (Mbit/s, shared by the workers) in the functions; 0 = real link only
        if not (network_mbps >= 0 and math.isfinite(network_mbps)):
            raise ValueError(f"network_mbps must be >= 0, got {network_mbps!r}")
        self.network_mbps = float(network_mbps)
        self.catalog = catalog or Catalog.default()
        self.pricing = self.catalog.function(cl.functions)
        gb = cl.memory_mb / 1024.0
        self.pricing.call_cost(gb, 1.0)  # refuses a function size the platform does not offer
        #: the money: functions per request and GB-second, the Redis node, earlier sessions
        self.meter = FunctionMeter(self.pricing, gb)
        self.redis_type = self.catalog.instance(cl.redis_instance)
        self.sync, self.staleness = cl.sync, int(cl.staleness)
        self.significance = float(cl.significance) if cl.sync == "isp" else 0.0
        self.policies: list[Policy] = make_policies(spec.policies)
        # the store: our own redis-server unless the user gave one
        own_redis = redis_server if redis_server is not None else (RedisServer() if redis_url is None else None)
        try:
            self._init_rest(spec, own_redis, redis_url, backend, resume)
        except BaseException:
            if own_redis is not None:  # a spec or checkpoint problem must not leave a server behind
                own_redis.stop()
            raise

    def _init_rest(self, spec: JobSpec, own_redis: RedisServer | None, redis_url: RedisURL | None, backend: Any,
                   resume: bool) -> None:
        cl = spec.cluster
        self.store = JobStore(own_redis, redis_url)
        self.r, self.k = self.store.r, self.store.k
        # the model side: the supervisor's replica of the workload's model
        self.workload = make_workload(spec.workload, spec.seed)
        self.model = self.workload.build_model()
        self.x = flat_params(self.model).numpy().astype(np.float32)
        self.n = self.x.size
        self.stream = SampleStream(len(self.workload.train), spec.seed)
        self.schedule = Schedule.initial(cl.workers)
        self.version = 0  # steps merged into self.x
        self.wall0 = time.monotonic()
        self.loss_history: list[tuple[int, float, float, int]] = []
        self.last_resize_t: float | None = None
        self.ema_loss: float | None = None
        self.last_loss: float | None = None
        self.last_eval: dict[str, float] = {}
        self.status = "running"
        self.counters = {"invocations": 0, "lost": 0, "errors": 0, "leases": 0, "left": 0, "store_reseeds": 0,
                         "bytes_in": 0, "entries_merged": 0, "entries_computed": 0, "checkpoints": 0, "decisions": 0}
        self.functions = FunctionPool(self.store, self.meter, clock=lambda: self.T, emit=lambda *a, **kw: self.log.emit(*a, **kw),
                                      counters=self.counters, worker_args=self._worker_args, workers=cl.workers,
                                      heartbeat_timeout_s=self.heartbeat_timeout_s, backend=backend)
        self.samples = 0
        self.last_commit_T = 0.0
        self.last_ckpt_step = -1
        self.resume = resume
        if resume:
            self._restore()

    def _restore(self) -> None:
        """Continue a run directory from its newest valid checkpoint (``spotwise run --resume``).

        The model, the committed steps, the membership and the time and money already spent come
        back; the store is seeded afresh and every worker is invoked from the checkpoint's step
        (ISP residuals since the checkpoint are not in it: the ``restore`` event says so).
        """
        from spotwise.control.checkpoint import require_checkpoint

        state, path = require_checkpoint(self.out, expect_shape=(self.n,))
        if state.get("kind") != "serverless":
            from spotwise.errors import InputError

            raise InputError("this run directory holds a VM run's checkpoints", "resume it without cluster.kind: serverless", str(self.out))
        self.x = state["params"].numpy().astype(np.float32).copy()
        self.version = int(state["step"])
        sched = Schedule.from_json(state["schedule"])
        self.schedule = Schedule(sched.join, {w: (lv if lv is not None and lv <= self.version else None) for w, lv in sched.leave.items()})
        self.ema_loss = state.get("ema_loss")
        self.wall0 -= float(state.get("T", 0.0))  # the clock goes on from the checkpoint
        self.meter.carried_cost = json.loads(state.get("cost", '{"total": 0.0, "by_category": {}}'))
        self.samples = int(state.get("samples", 0))
        self.last_ckpt_step = self.version
        self._restored_from = str(path)

    # ================================================================== time and money
    @property
    def T(self) -> float:
        return time.monotonic() - self.wall0

    def cost_so_far(self) -> float:
        T = self.T
        return self.meter.cost_so_far(T, self.functions.running_seconds(T), T - getattr(self, "T_start", 0.0))

    def _seed_store(self) -> None:
        """Model snapshot, schedule, clocks and incarnations (fresh or after a store loss); faults are injected once."""
        self.store.seed(self.x, self.version, self.schedule, self.functions.inc_counter, self.faults)
        self.faults = {}

    def _worker_args(self, w: int, inc: str) -> dict[str, Any]:
        wl = self.spec.workload
        fn_url = self.store.function_url(getattr(self.functions.backend, "shares_filesystem", True))
        return {"redis": fn_url.to_dict(), "job": self.store.job, "worker": w, "inc": inc, "lease_s": self.lease_s,
                "sync": self.sync, "staleness": self.staleness, "significance": self.significance,
                "batch": int(wl.batch_size), "lr": float(wl.lr), "workload": to_plain(wl), "seed": int(self.spec.seed),
                "ckpt_every": self.isp_checkpoint_every, "lease_steps": self.lease_steps, "network_mbps": self.network_mbps}

    def _watch_functions(self) -> None:
        """Let the pool bill, log and re-invoke finished and silent functions; a failure it reports ends the job."""
        failure = self.functions.watch(running=self.status == "running", version=self.version, active_now=self.schedule.active_now)
        if failure is not None:
            self.status, self.stop_message = "failed", failure

    # ================================================================== the loop
    def run(self) -> RunSummary:
        if self.functions.backend is None:
            from spotwise.planes.serverless.backend import LithopsBackend

            self.functions.backend = LithopsBackend(max_workers=self.spec.cluster.workers + 2)
        try:
            self._start()
            while not self._done():
                try:
                    merged = self._merge_ready()
                    self._watch_functions()
                except StoreLost as e:
                    self._recover_store(str(e))
                    continue
                if not merged:
                    time.sleep(self.poll_s)
            return self._finish()
        finally:
            self._shutdown()

    def _start(self) -> None:
        (self.out / SPEC_FILE).write_text(json.dumps(self.spec.to_dict(), indent=2) + "\n")
        cl = self.spec.cluster
        self.log = EventLog(self.out / "events.jsonl", clock=lambda: self.T, resume=self.resume,
                            meta={"mode": "serverless", "job": self.spec.name, "workers": cl.workers, "sync": self.sync,
                                  "instance": f"functions:{self.pricing.name}", "seed": self.spec.seed,
                                  "backend": getattr(self.functions.backend, "name", "custom"), "redis": self.store.url.redacted,
                                  "memory_mb": cl.memory_mb, "significance": self.significance, "staleness": self.staleness,
                                  "network_mbps": self.network_mbps})
        self.T_start = self.T  # this session's start (0 unless resumed)
        if self.resume:
            self.log.emit("restore", step=self.version, path=self._restored_from,
                          note="the store is seeded afresh; ISP residuals since the checkpoint are not kept")
        self.meter.ledger.start("redis", self.T_start, self.redis_type, category="service", market="on_demand")
        self.log.emit("price", instance=self.pricing.name, price=self.meter.price_per_hour,
                      unit="$/h per function", redis=self.redis_type.label, redis_price=self.redis_type.on_demand_per_hour)
        self._seed_store()
        self.functions.invoke_all(list(range(cl.workers)), "start")

    def _done(self) -> bool:
        tgt = self.spec.target
        if tgt.iterations is not None and self.version >= tgt.iterations:
            self.status = "completed"
        elif tgt.loss is not None and self.ema_loss is not None and self.ema_loss <= tgt.loss:
            self.status = "completed"
        elif self.spec.budget_usd is not None and self.cost_so_far() >= self.spec.budget_usd:
            self.status = "budget-exhausted"
        elif self.status == "failed":
            return True
        return self.status != "running"

    # ------------------------------------------------------------------ merging
    def _merge_ready(self) -> bool:
        """Merge every step all its workers have committed; True if at least one was."""
        import redis

        merged = False
        try:
            while True:
                t = self.version
                members = self.schedule.members(t)
                if not members:
                    self.status, self.stop_message = "failed", "no worker left in the pool"
                    return merged
                clocks = self.r.mget([self.k.per("clock", q) for q in members])
                if any(c is None for c in clocks):
                    raise StoreLost("the store lost the workers' clocks")
                if not all(int(c) > t for c in clocks):
                    return merged
                pipe = self.r.pipeline(transaction=False)
                for q in members:
                    pipe.get(self.k.upd(t, q))
                    pipe.get(self.k.meta(t, q))
                res = pipe.execute()
                self._apply_step(t, members, res[0::2], res[1::2])
                merged = True
                if self._done():
                    return merged
        except (redis.ConnectionError, redis.TimeoutError) as e:
            raise StoreLost(f"the store cannot be reached ({e})") from None

    def _apply_step(self, t: int, members: list[int], blobs: list[bytes | None], metas: list[bytes | None]) -> None:
        loss = 0.0
        total = 0
        nnz = 0
        computed = 0
        for q, data, meta in zip(members, blobs, metas):
            if data is None or meta is None:
                raise StoreLost(f"update of worker {q} at step {t} is missing from the store")
            k = apply_encoded(data, self.x)
            m = json.loads(meta)
            loss += float(m["loss"]) * int(m["n"])
            total += int(m["n"])
            nnz += k
            computed += int(m.get("computed", k))
            self.counters["bytes_in"] += len(data)
        self.counters["entries_merged"] += nnz
        self.counters["entries_computed"] += computed
        loss /= max(1, total)
        self.samples += total
        self.version = t + 1
        self.r.set(self.k.merged, self.version)  # workers stay within MAX_LEAD steps of it
        for q, lv in self.schedule.leave.items():
            if lv == self.version:
                self._merge_leaver(q)
        duration = self.T - self.last_commit_T
        self.last_commit_T = self.T
        self.last_loss = loss
        self.ema_loss = loss if self.ema_loss is None else 0.9 * self.ema_loss + 0.1 * loss
        self.loss_history.append((self.version, self.T, float(loss), len(members)))
        self.log.emit("step", step=self.version, loss=loss, active=len(members), lr=float(self.spec.workload.lr), sync=self.sync,
                      duration=duration, cost=self.cost_so_far(), epoch=int(epochs_done(self.schedule, self.stream, self.version,
                                                                                        self.spec.workload.batch_size)),
                      contributions=len(members), pushed=nnz, computed=computed)
        if self.version % self.snapshot_every == 0:
            self._snapshot()
        if self.version % self.spec.workload.eval_every == 0:
            self._evaluate()
        self._apply_policies()
        every = self.spec.outputs.checkpoint_every
        if every and self.version % every == 0:
            self._checkpoint("periodic")
        if self.progress is not None:
            self.progress(self.snapshot())

    def _merge_leaver(self, q: int) -> None:
        """Average the leaving worker's replica into the reference (paper 004 Sec. 4.2)."""
        deadline = time.monotonic() + self.heartbeat_timeout_s * 4
        while True:
            data = self.r.get(self.k.per("replica", q))
            if data is not None:
                break
            self._watch_functions()
            if time.monotonic() > deadline:
                raise RuntimeError(f"worker {q} never published its replica")
            time.sleep(self.poll_s)
        self.x[:] = merge_leaving_replica(self.x, decode_dense(data, self.n)).astype(np.float32)
        self.log.emit("function", worker=q, status="merged", step=self.version)

    def _snapshot(self) -> None:
        """Write the reference replica for new invocations; drop the updates it makes unneeded."""
        pipe = self.r.pipeline(transaction=True)
        pipe.set(self.k.model, encode_dense(self.x))
        pipe.set(self.k.model_version, self.version)
        pipe.execute()
        # updates of steps before the snapshot are in it; every live worker is past them
        clocks = [int(c or 0) for c in self.r.mget([self.k.per("clock", q) for q in self.schedule.join])]
        if self.sync == "isp":  # a re-invoked ISP worker replays from its last replica checkpoint
            clocks = [(c // self.isp_checkpoint_every) * self.isp_checkpoint_every for c in clocks]
        low = min([self.version, *clocks]) - self.staleness - 2
        old = getattr(self, "_deleted_below", 0)
        if low > old:
            keys = [self.k.upd(t, q) for t in range(old, low) for q in self.schedule.members(t)]
            keys += [self.k.meta(t, q) for t in range(old, low) for q in self.schedule.members(t)]
            for i in range(0, len(keys), 1000):
                self.r.delete(*keys[i : i + 1000])
            self._deleted_below = low

    def _recover_store(self, why: str) -> None:
        """Re-seed a store that lost its content from the reference replica; re-invoke everyone."""
        self.counters["store_reseeds"] += 1
        if not self.store.wait_reachable(60.0):
            self.status, self.stop_message = "failed", f"the Redis store is gone ({why}) and did not come back in 60 s"
            self.log.emit("store", status="lost", why=why)
            return
        # the steps after the reference replica are redone by every worker (on the same samples)
        self.functions.abandon_running()
        self.store.clear()
        self._deleted_below = self.version
        # leavers that have not yet been merged stay in; a worker that left for good stays out
        self.schedule = Schedule({w: min(j, self.version) for w, j in self.schedule.join.items()},
                                 {w: (lv if lv is not None and lv <= self.version else None) for w, lv in self.schedule.leave.items()})
        self._seed_store()
        self.log.emit("store", status="reseeded", why=why, step=self.version,
                      note="workers' uncommitted ISP residuals were lost; committed steps were kept")
        self.functions.invoke_all(self.schedule.active_now(), "store")

    # ------------------------------------------------------------------ policies
    def snapshot(self) -> dict[str, Any]:
        return {"step": self.version, "target": self.spec.target.iterations, "loss": self.last_loss,
                "active": len(self.schedule.members(self.version)), "provisioned": len(self.schedule.active_now()),
                "t": self.T, "cost": self.cost_so_far(), "status": self.status}

    def _observation(self) -> Observation:
        cl = self.spec.cluster
        n_now = len(self.schedule.active_now())
        return Observation(
            step=self.version, t=self.T, active=n_now, provisioned=n_now, max_workers=cl.workers, reference_workers=cl.workers,
            base_lr=float(self.spec.workload.lr), lr=float(self.spec.workload.lr), sync=self.sync, loss=self.last_loss,
            price=self.meter.price_per_hour, cost_so_far=self.cost_so_far(), deadline_s=self.spec.deadline_s,
            budget_usd=self.spec.budget_usd, target_iterations=self.spec.target.iterations, market="on-demand",
            on_demand_price=self.meter.price_per_hour,
            extra={"loss_history": self.loss_history, "last_resize_t": self.last_resize_t},
        )

    def _apply_policies(self) -> None:
        consult(self.policies, self._observation, self._act)

    def _act(self, policy: Policy, d: Decision) -> None:
        if isinstance(d, Noop):
            return
        self.counters["decisions"] += 1
        applied = False
        if isinstance(d, Resize):
            active = self.schedule.active_now()
            n = max(1, int(d.workers))
            if n < len(active):
                leaving = active[n:]
                L = self.store.leave(list(self.schedule.join), leaving)
                for q in leaving:
                    self.schedule.leave[q] = L
                self.last_resize_t = self.T
                applied = True
        self.log.emit("decision", policy=policy.name, decision=type(d).__name__, reason=getattr(d, "reason", ""),
                      applied=applied, **({"workers": d.workers} if isinstance(d, Resize) else {}))

    # ------------------------------------------------------------------ evaluation, checkpoints
    def _evaluate(self) -> dict[str, float]:
        if self.workload.test is None:
            return {}
        set_flat_params(self.model, __import__("torch").from_numpy(self.x))
        self.last_eval = self.workload.evaluate(self.model, self.workload.test)
        name = self.workload.metric_name
        self.log.emit("eval", step=self.version, loss=self.last_eval.get("loss"), metric_name=name, metric=self.last_eval.get(name),
                      **{k: v for k, v in self.last_eval.items() if k not in ("loss", name)})
        return self.last_eval

    def _checkpoint(self, why: str) -> None:
        import torch

        spent = self.meter.spent(self.T)
        state = {"format": 1, "kind": "serverless", "step": self.version, "params": torch.from_numpy(self.x.copy()),
                 "lr": float(self.spec.workload.lr), "T": self.T, "schedule": self.schedule.to_json(), "ema_loss": self.ema_loss,
                 "samples": self.samples, "cost": json.dumps(spent)}
        path = save_checkpoint(self.out, self.version, state)
        self.last_ckpt_step = self.version
        self.counters["checkpoints"] += 1
        self.log.emit("checkpoint", step=self.version, path=str(path), why=why)

    # ================================================================== the end
    def _finish(self) -> RunSummary:
        import redis

        T_end = self.T
        try:
            self.r.set(self.k.stop, str(self.version))
        except (redis.ConnectionError, redis.TimeoutError):
            pass
        self.functions.collect_final()
        if self.version > self.last_ckpt_step and self.version > 0:
            self._checkpoint("final")
        # the supervisor ran as a function for the whole session (MLLess Sec. 3.1)
        self.meter.bill_supervisor(T_end, self.T_start)
        self.meter.ledger.close(T_end)
        final_eval = self._evaluate()
        cost = self.meter.spent(T_end, final=True)
        self.log.emit("cost", total=cost["total"], breakdown=cost)
        self.log.emit("end", status=self.status)
        self.log.close()
        c = self.counters
        extra: dict[str, Any] = {
            "kind": "serverless", "backend": getattr(self.functions.backend, "name", "custom"), "sync": self.sync,
            "staleness": self.staleness, "significance": self.significance, "functions": self.pricing.name,
            "memory_mb": self.spec.cluster.memory_mb, "function_seconds": self.meter.function_seconds, "samples": self.samples,
            "deadline_s": self.spec.deadline_s,
            "deadline_met": None if self.spec.deadline_s is None else (self.status == "completed" and T_end <= self.spec.deadline_s),
            "epochs": epochs_done(self.schedule, self.stream, self.version, self.spec.workload.batch_size),
            "pushed_fraction": c["entries_merged"] / c["entries_computed"] if c["entries_computed"] else None,
            "final_eval": final_eval, "stop_message": getattr(self, "stop_message", None),
            "workers_at_end": len(self.schedule.active_now()), "redis": self.store.url.redacted, "network_mbps": self.network_mbps, **c,
        }
        summary = RunSummary(
            mode="serverless", status=self.status, steps=self.version, final_loss=final_eval.get("loss", self.last_loss),
            final_metric=final_eval.get(self.workload.metric_name), metric_name=self.workload.metric_name,
            # functions are not revoked by a market nor join one: invocations and losses are in extra
            wall_s=T_end, virtual_s=T_end, cost_usd=cost["total"], cost_breakdown=cost, revocations=0,
            joins=0, decisions=c["decisions"], spec=self.spec.to_dict(), plan=None, extra=extra,
        )
        write_summary(self.out, summary)
        return summary

    def _shutdown(self) -> None:
        """Stop the functions, the backend and the private store; also after an interrupt (Ctrl-C,
        SIGTERM) or a crash, when the stop flag tells the running functions to return at once."""
        if self.status == "running":  # not a normal end (that sets the flag in _finish)
            try:
                self.r.set(self.k.stop, str(self.version))
            except Exception:
                pass
        backend = self.functions.backend
        try:
            if backend is not None and hasattr(backend, "shutdown"):
                backend.shutdown(timeout_s=5.0)
        finally:
            self.store.close()
