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
"""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
import time
import uuid
from pathlib import Path
from typing import Any, Callable

import numpy as np

from spotwise.config import JobSpec
from spotwise.events import EventLog, RunSummary, write_summary
from spotwise.market.billing import BillingPolicy, Ledger
from spotwise.market.catalog import Catalog
from spotwise.policies import Observation, Resize, make_policies
from spotwise.policies.base import Decision, Noop, Policy, consult
from spotwise.control.checkpoint import save_checkpoint
from spotwise.control.rundir_io import SPEC_FILE
from spotwise.planes.serverless.schedule import SampleStream, Schedule, epochs_done
from spotwise.planes.serverless.significance import merge_leaving_replica
from spotwise.planes.serverless.store import (Keys, RedisServer, RedisURL, apply_encoded, connect, decode_dense, encode_dense,
                                       write_secret_file)
from spotwise.specload import to_plain
from spotwise.workloads.params import flat_params, set_flat_params
from spotwise.workloads.registry import make_workload

#: the fraction of the platform's timeout after which a function ends its lease and is re-invoked
LEASE_FRACTION = 0.8

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


class Invocation:
    """One function call of worker ``w`` (incarnation ``inc``)."""

    __slots__ = ("w", "inc", "invoked_t", "invoked_wall", "future", "done")

    def __init__(self, w: int, inc: str, invoked_t: float, future: Any) -> None:
        self.w, self.inc, self.invoked_t, self.future = w, inc, invoked_t, future
        self.invoked_wall = time.time()
        self.done = False


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
        self.gb = cl.memory_mb / 1024.0
        self.pricing.call_cost(self.gb, 1.0)  # refuses a function size the platform does not offer
        self.redis_type = self.catalog.instance(cl.redis_instance)
        self.sync, self.staleness = cl.sync, int(cl.staleness)
        self.significance = float(cl.significance) if cl.sync == "isp" else 0.0
        self.policies: list[Policy] = make_policies(spec.policies)
        # the store: our own redis-server unless the user gave one
        self.own_redis = redis_server if redis_server is not None else (RedisServer() if redis_url is None else None)
        try:
            self._init_rest(spec, redis_url, backend, resume)
        except BaseException:
            if self.own_redis is not None:  # a spec or checkpoint problem must not leave a server behind
                self.own_redis.stop()
            raise

    def _init_rest(self, spec: JobSpec, redis_url: RedisURL | None, backend: Any, resume: bool) -> None:
        cl = spec.cluster
        self.url = self.own_redis.url if self.own_redis is not None else redis_url
        assert self.url is not None
        self.r = connect(self.url)
        self.job = uuid.uuid4().hex[:12]
        self.k = Keys(self.job)
        self._leave_script = self.r.register_script(LEAVE_LUA)
        self.backend = backend
        self._fn_url: RedisURL | None = None  # the store's address as functions get it (see _function_url)
        self._secret_dir: Path | None = None  # a private folder holding a --redis-url's password for functions
        # the model side: the supervisor's replica of the workload's model
        self.workload = make_workload(spec.workload, spec.seed)
        self.model = self.workload.build_model()
        self.x = flat_params(self.model).numpy().astype(np.float32)
        self.n = self.x.size
        self.stream = SampleStream(len(self.workload.train), spec.seed)
        self.schedule = Schedule.initial(cl.workers)
        self.version = 0  # steps merged into self.x
        self.wall0 = time.monotonic()
        self.ledger = Ledger(BillingPolicy.exact(), functions=self.pricing)
        self.invocations: dict[int, Invocation] = {}
        self.inc_counter: dict[int, int] = {}
        self.left: set[int] = set()
        self.loss_history: list[tuple[int, float, float, int]] = []
        self.last_resize_t: float | None = None
        self.ema_loss: float | None = None
        self.last_loss: float | None = None
        self.last_eval: dict[str, float] = {}
        self.status = "running"
        self.counters = {"invocations": 0, "lost": 0, "errors": 0, "leases": 0, "left": 0, "store_reseeds": 0,
                         "bytes_in": 0, "entries_merged": 0, "entries_computed": 0, "checkpoints": 0, "decisions": 0}
        self.function_seconds = 0.0
        self.samples = 0
        self.last_commit_T = 0.0
        self.last_ckpt_step = -1
        #: a resumed run: what the earlier sessions spent and how long they ran
        self.carried_cost: dict[str, Any] = {"total": 0.0, "by_category": {}}
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
        self.carried_cost = json.loads(state.get("cost", '{"total": 0.0, "by_category": {}}'))
        self.samples = int(state.get("samples", 0))
        self.last_ckpt_step = self.version
        self._restored_from = str(path)

    # ================================================================== time and money
    @property
    def T(self) -> float:
        return time.monotonic() - self.wall0

    def cost_so_far(self) -> float:
        running = sum(max(0.0, self.T - inv.invoked_t) for inv in self.invocations.values() if not inv.done)
        sup_s = self.T - getattr(self, "T_start", 0.0)
        open_fn = self.pricing.call_cost(self.gb, running + sup_s, 0) if (running + sup_s) > 0 else 0.0
        return self.ledger.total(self.T) + open_fn + float(self.carried_cost["total"])

    def _bill(self, inv: Invocation, seconds: float) -> None:
        seconds = max(0.0, float(seconds))
        self.function_seconds += seconds
        self.ledger.function_call(self.T, self.gb, seconds, 1)

    # ================================================================== store set-up
    def _seed_store(self) -> None:
        """Model snapshot, schedule, clocks and incarnations (fresh or after a store loss)."""
        pipe = self.r.pipeline(transaction=True)
        pipe.set(self.k.model, encode_dense(self.x))
        pipe.set(self.k.model_version, self.version)
        # where an ISP worker's replica starts until it has a checkpoint of its own
        pipe.set(self.k.model0, encode_dense(self.x))
        pipe.set(self.k.model0_meta, json.dumps({"step": self.version}))
        pipe.set(self.k.schedule, self.schedule.to_json())
        for w in self.schedule.join:
            pipe.set(self.k.per("clock", w), self.version)
            pipe.set(self.k.per("inc", w), str(self.inc_counter.get(w, 0)))
        pipe.set(self.k.seeded, "1")
        pipe.set(self.k.merged, self.version)
        for w, f in self.faults.items():
            pipe.set(self.k.per("fault", w), f)
        self.faults = {}  # injected once
        pipe.execute()

    def _function_url(self) -> RedisURL:
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
        if url.password and getattr(self.backend, "shares_filesystem", True):
            if self.own_redis is not None:
                path = self.own_redis.password_file
            else:
                import tempfile

                self._secret_dir = Path(tempfile.mkdtemp(prefix="spotwise-secret-"))  # 0700
                path = write_secret_file(self._secret_dir, url.password)
            url = dataclasses.replace(url, password="", password_file=str(path))
        self._fn_url = url
        return url

    def _worker_args(self, w: int, inc: str) -> dict[str, Any]:
        wl = self.spec.workload
        return {"redis": self._function_url().to_dict(), "job": self.job, "worker": w, "inc": inc, "lease_s": self.lease_s,
                "sync": self.sync, "staleness": self.staleness, "significance": self.significance,
                "batch": int(wl.batch_size), "lr": float(wl.lr), "workload": to_plain(wl), "seed": int(self.spec.seed), "ckpt_every": self.isp_checkpoint_every, "lease_steps": self.lease_steps,
                "network_mbps": self.network_mbps}

    def _invoke(self, w: int, why: str) -> None:
        self._invoke_all([w], why)

    def _invoke_all(self, workers: list[int], why: str) -> None:
        """Invoke ``workers`` (a new incarnation each, which fences any earlier one) in one batch."""
        incs = []
        for w in workers:
            inc_n = self.inc_counter.get(w, 0) + 1
            self.inc_counter[w] = inc_n
            incs.append(str(inc_n))
            self.r.set(self.k.per("inc", w), incs[-1])
        args = [self._worker_args(w, inc) for w, inc in zip(workers, incs)]
        if len(workers) > 1 and hasattr(self.backend, "invoke_many"):
            futs = self.backend.invoke_many(args)
        else:
            futs = [self.backend.invoke(a) for a in args]
        for w, inc, fut in zip(workers, incs, futs):
            self.invocations[w] = Invocation(w, inc, self.T, fut)
            self.counters["invocations"] += 1
            self.log.emit("function", worker=w, status="invoked", inc=int(inc), why=why)

    # ================================================================== the loop
    def run(self) -> RunSummary:
        if self.backend is None:
            from spotwise.planes.serverless.backend import LithopsBackend

            self.backend = LithopsBackend(max_workers=self.spec.cluster.workers + 2)
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
                                  "backend": getattr(self.backend, "name", "custom"), "redis": self.url.redacted,
                                  "memory_mb": cl.memory_mb, "significance": self.significance, "staleness": self.staleness,
                                  "network_mbps": self.network_mbps})
        self.T_start = self.T  # this session's start (0 unless resumed)
        if self.resume:
            self.log.emit("restore", step=self.version, path=self._restored_from,
                          note="the store is seeded afresh; ISP residuals since the checkpoint are not kept")
        self.ledger.start("redis", self.T_start, self.redis_type, category="service", market="on_demand")
        self.log.emit("price", instance=self.pricing.name, price=self.pricing.per_gb_second * self.gb * 3600.0,
                      unit="$/h per function", redis=self.redis_type.label, redis_price=self.redis_type.on_demand_per_hour)
        self._seed_store()
        self._invoke_all(list(range(cl.workers)), "start")
        self._next_watch = 0.0

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

    # ------------------------------------------------------------------ functions
    def _watch_functions(self) -> None:
        """Results of finished invocations, lost (silent) functions: bill, log and re-invoke."""
        import redis

        if self.T < self._next_watch:
            return
        self._next_watch = self.T + 0.2
        live = [inv for inv in self.invocations.values() if not inv.done]
        if not live:
            if self.status == "running" and not self.schedule.active_now():
                self.status, self.stop_message = "failed", "no worker left in the pool"
            return
        try:
            pipe = self.r.pipeline(transaction=False)
            for inv in live:
                pipe.get(self.k.prefix + f"result:{inv.w}:{inv.inc}")
                pipe.get(self.k.per("hb", inv.w))
            res = pipe.execute()
        except (redis.ConnectionError, redis.TimeoutError) as e:
            raise StoreLost(f"the store cannot be reached ({e})") from None
        now = time.time()
        for inv, result, hb in zip(live, res[0::2], res[1::2]):
            if result is not None:
                self._ended(inv, json.loads(result))
                continue
            last = float(hb) if hb is not None else inv.invoked_wall
            last = max(last, inv.invoked_wall)
            if now - last > self.heartbeat_timeout_s:
                self._lost(inv, f"no heartbeat for {now - last:.1f} s")

    def _ended(self, inv: Invocation, res: dict[str, Any]) -> None:
        inv.done = True
        self._bill(inv, float(res["ended"]) - float(res["started"]))
        status = res["status"]
        self.log.emit("function", worker=inv.w, status=status, inc=int(inv.inc), steps=res.get("steps"),
                      seconds=float(res["ended"]) - float(res["started"]), error=res.get("error"),
                      bytes_out=res.get("bytes_out"), bytes_in=res.get("bytes_in"), compute_s=res.get("compute_s"),
                      wait_s=res.get("wait_s"))
        if status == "left":
            self.left.add(inv.w)
            self.counters["left"] += 1
            return
        if status in ("stopped",) or self.status != "running":
            return
        if status == "fenced":
            return  # a newer incarnation runs already
        if status == "error":
            self.counters["errors"] += 1
            if self.counters["errors"] > 10 * max(1, self.spec.cluster.workers) and self.version == 0:
                self.status, self.stop_message = "failed", f"worker functions keep failing: {res.get('error')}"
                return
        else:
            self.counters["leases"] += 1
        self._invoke(inv.w, "error" if status == "error" else "lease")

    def _lost(self, inv: Invocation, why: str) -> None:
        inv.done = True
        self.counters["lost"] += 1
        self._bill(inv, self.T - inv.invoked_t)  # billed until the platform would have stopped it
        self.log.emit("function", worker=inv.w, status="lost", inc=int(inv.inc), why=why)
        if self.status == "running" and inv.w not in self.left:
            self._invoke(inv.w, "lost")

    def _recover_store(self, why: str) -> None:
        """Re-seed a store that lost its content from the reference replica; re-invoke everyone."""
        import redis

        self.counters["store_reseeds"] += 1
        deadline = time.monotonic() + 60.0
        while True:
            if self.own_redis is not None and not self.own_redis.alive():
                # our own server died: start it again on its unix socket (an address only it can hold)
                # before any client talks to it, so no password goes to whatever else may listen
                self.own_redis.start()
            try:
                self.r.ping()
                break
            except (redis.ConnectionError, redis.TimeoutError, redis.AuthenticationError):
                if self.own_redis is not None and not self.own_redis.alive():
                    self.own_redis.start()
                    continue
                if time.monotonic() > deadline:
                    self.status, self.stop_message = "failed", f"the Redis store is gone ({why}) and did not come back in 60 s"
                    self.log.emit("store", status="lost", why=why)
                    return
                time.sleep(0.5)
        # the steps after the reference replica are redone by every worker (on the same samples)
        for inv in self.invocations.values():
            if not inv.done:
                inv.done = True
                self._bill(inv, self.T - inv.invoked_t)
        self.r.flushdb() if self.own_redis is not None else self._delete_job_keys()
        self._deleted_below = self.version
        # leavers that have not yet been merged stay in; a worker that left for good stays out
        self.schedule = Schedule({w: min(j, self.version) for w, j in self.schedule.join.items()},
                                 {w: (lv if lv is not None and lv <= self.version else None) for w, lv in self.schedule.leave.items()})
        self._seed_store()
        self.log.emit("store", status="reseeded", why=why, step=self.version,
                      note="workers' uncommitted ISP residuals were lost; committed steps were kept")
        self._invoke_all(self.schedule.active_now(), "store")

    def _delete_job_keys(self) -> None:
        for key in self.r.scan_iter(self.k.pattern(), count=1000):
            self.r.delete(key)

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
            price=self.pricing.per_gb_second * self.gb * 3600.0, cost_so_far=self.cost_so_far(), deadline_s=self.spec.deadline_s,
            budget_usd=self.spec.budget_usd, target_iterations=self.spec.target.iterations, market="on-demand",
            on_demand_price=self.pricing.per_gb_second * self.gb * 3600.0,
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
                L = int(self._leave_script(keys=[self.k.schedule, *[self.k.per("clock", q) for q in self.schedule.join]],
                                           args=[json.dumps(leaving)]))
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

    def _spent(self, final: bool = False) -> dict[str, Any]:
        """Money spent so far by category, earlier sessions of a resumed run included."""
        bd = self.ledger.breakdown() if final else self.ledger.breakdown(self.T)
        by = dict(self.carried_cost.get("by_category", {}))
        for k, v in bd["by_category"].items():
            by[k] = by.get(k, 0.0) + float(v)
        out: dict[str, Any] = {"total": float(sum(by.values())), "by_category": by}
        if final:
            out["by_instance"], out["by_market"] = bd.get("by_instance", {}), bd.get("by_market", {})
        return out

    def _checkpoint(self, why: str) -> None:
        import torch

        spent = self._spent()
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
        self._collect_final()
        if self.version > self.last_ckpt_step and self.version > 0:
            self._checkpoint("final")
        # the supervisor ran as a function for the whole session (MLLess Sec. 3.1)
        self.function_seconds += T_end - self.T_start
        self.ledger.function_call(T_end, self.gb, T_end - self.T_start, 1)
        self.ledger.close(T_end)
        final_eval = self._evaluate()
        cost = self._spent(final=True)
        self.log.emit("cost", total=cost["total"], breakdown=cost)
        self.log.emit("end", status=self.status)
        self.log.close()
        c = self.counters
        extra: dict[str, Any] = {
            "kind": "serverless", "backend": getattr(self.backend, "name", "custom"), "sync": self.sync,
            "staleness": self.staleness, "significance": self.significance, "functions": self.pricing.name,
            "memory_mb": self.spec.cluster.memory_mb, "function_seconds": self.function_seconds, "samples": self.samples,
            "deadline_s": self.spec.deadline_s,
            "deadline_met": None if self.spec.deadline_s is None else (self.status == "completed" and T_end <= self.spec.deadline_s),
            "epochs": epochs_done(self.schedule, self.stream, self.version, self.spec.workload.batch_size),
            "pushed_fraction": c["entries_merged"] / c["entries_computed"] if c["entries_computed"] else None,
            "final_eval": final_eval, "stop_message": getattr(self, "stop_message", None),
            "workers_at_end": len(self.schedule.active_now()), "redis": self.url.redacted, "network_mbps": self.network_mbps, **c,
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

    def _collect_final(self, timeout_s: float = 30.0) -> None:
        """Wait (bounded) for every running invocation to see the stop and return; bill them all."""
        import redis

        deadline = time.monotonic() + timeout_s
        while True:
            live = [inv for inv in self.invocations.values() if not inv.done]
            if not live:
                return
            try:
                results = self.r.mget([self.k.prefix + f"result:{inv.w}:{inv.inc}" for inv in live])
            except (redis.ConnectionError, redis.TimeoutError):
                results = [None] * len(live)
            for inv, res in zip(live, results):
                if res is not None:
                    r = json.loads(res)
                    inv.done = True
                    self._bill(inv, float(r["ended"]) - float(r["started"]))
                    self.log.emit("function", worker=inv.w, status=r["status"], inc=int(inv.inc), steps=r.get("steps"),
                                  seconds=float(r["ended"]) - float(r["started"]),
                                  **{k: r.get(k) for k in ("bytes_out", "bytes_in", "compute_s", "wait_s", "pull_s", "network_s")})
            if time.monotonic() > deadline:
                for inv in live:
                    if not inv.done:
                        inv.done = True
                        self._bill(inv, self.T - inv.invoked_t)
                        self.log.emit("function", worker=inv.w, status="lost", inc=int(inv.inc), why="did not stop in time")
                return
            time.sleep(0.02)

    def _shutdown(self) -> None:
        """Stop the functions, the backend and the private store; also after an interrupt (Ctrl-C,
        SIGTERM) or a crash, when the stop flag tells the running functions to return at once."""
        if self.status == "running":  # not a normal end (that sets the flag in _finish)
            try:
                self.r.set(self.k.stop, str(self.version))
            except Exception:
                pass
        try:
            if self.backend is not None and hasattr(self.backend, "shutdown"):
                self.backend.shutdown(timeout_s=5.0)
        finally:
            try:
                if self.own_redis is not None:
                    self.own_redis.stop()
                else:
                    self._delete_job_keys()
            except Exception:
                pass
            finally:
                if self._secret_dir is not None:
                    shutil.rmtree(self._secret_dir, ignore_errors=True)
