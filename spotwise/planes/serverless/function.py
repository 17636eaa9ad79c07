"""The serverless worker: one stateless function invocation (``papers/004_9dc2adb66dc8d26e.txt`` Sec. 3).

A function holds nothing that matters between invocations: everything it needs to go on lives
in Redis (:mod:`spotwise.planes.serverless.store`) -- the supervisor's model snapshot, every worker's
committed updates, its own step clock and (ISP) its periodic replica checkpoint.  An invocation
rebuilds its replica from those, trains until its lease ends (the platform's timeout), it is told
to leave or the job stops, and returns a summary of what it did.

One step ``t`` of worker ``p`` (Sec. 3.2 "Job execution", Sec. 4.1):

1. **wait** until every peer ``q`` has committed step ``t - s`` (``s = 0``: BSP; SSP otherwise),
   then pull the updates of every step all workers have completed and apply the *peers'* ones to
   the local replica (under SSP and ISP a worker applies its own update locally as soon as it
   computes it; under BSP every member's, its own included, in member order -- as the supervisor
   does, so the replica is the reference bit for bit);
2. **compute** the gradient of the mean loss over its block of the step's global batch
   (:func:`~spotwise.planes.serverless.schedule.worker_batch`), sparse for embedding models
   (:func:`~spotwise.workloads.params.flat_grad_sparse`), and the local update
   ``u = -lr g / P(t)``; apply it to the replica;
3. **filter** (ISP only): accumulate ``u`` and keep only the entries whose relative magnitude
   passes ``v / sqrt(t)`` (:class:`~spotwise.planes.serverless.significance.SignificanceFilter`);
4. **commit** atomically (one Lua script): the significant update, the loss and the clock
   ``t + 1`` (and, every ``ckpt_every`` steps under ISP, the worker's replica and residual) --
   refused if this invocation was fenced off (declared lost) or the step was already committed.
   A function that dies before this loses nothing: the next invocation redoes the step on the
   same samples.  Under ISP it first *replays* the worker's committed steps since its last
   checkpoint (same samples, same peers' updates, same order), which rebuilds the replica and the
   accumulated insignificant updates bit for bit (tested); persisting the residual every step
   instead would write as many bytes as BSP pushes and cancel ISP's saving.

Leaving (Sec. 4.2): at its ``leave`` step the worker publishes its replica, which every remaining
worker and the supervisor average into theirs (:func:`~spotwise.planes.serverless.significance.merge_leaving_replica`).

Fault injection (tests): ``fault:<w>`` = ``"die:<step>"`` exits the process after computing step
``<step>`` and before committing it; ``"hang:<step>"`` stops there without heartbeats until
fenced or the lease ends (a frozen function the platform would kill at its timeout).
"""

from __future__ import annotations

import json
import math
import os
import time
from typing import Any

import numpy as np

#: seconds between two polls of the store while waiting for peers (grows to _POLL_MAX_S)
_POLL_MIN_S = 0.0005
_POLL_MAX_S = 0.005
#: a worker computes at most this many steps past the supervisor's last merged one (flow
#: control: the store holds a bounded number of updates, and a job that reached its target
#: stops its functions within a few steps)
MAX_LEAD = 8
#: models up to this many parameters use the dense ISP accumulator
DENSE_FILTER_MAX = 50_000_000
#: update keys expire after this long (a safety net; the supervisor deletes them when done)
UPDATE_TTL_S = 24 * 3600



def _grads_finite(model: Any) -> bool:
    """Whether every gradient of ``model`` is finite (a sparse one: its values)."""
    import torch

    for prm in model.parameters():
        g = prm.grad
        if g is not None and not bool(torch.isfinite(g.coalesce().values() if g.is_sparse else g).all()):
            return False
    return True

class Fenced(Exception):
    """This invocation was declared lost (its incarnation changed) or the job stopped."""


class ReplicaView:
    """The worker's replica and which steps of the peers it holds (see the module docstring)."""

    def __init__(self, x: np.ndarray, version: int) -> None:
        self.x = x
        #: every update of every step ``< version`` is applied (and the evictions at ``<= version``)
        self.version = version


def _wait_backoff(delay: float) -> float:
    time.sleep(delay)
    return min(_POLL_MAX_S, delay * 2)


def serverless_worker(args: dict[str, Any]) -> dict[str, Any]:
    """Lithops entry point: run one invocation of worker ``args["worker"]``; returns its summary."""
    return WorkerInvocation(args).run()


class WorkerInvocation:
    def __init__(self, args: dict[str, Any]) -> None:
        self.t_start = time.time()
        self.args = args
        self.w = int(args["worker"])
        self.inc = str(args["inc"])
        self.lease_s = float(args["lease_s"])
        #: also end the lease after this many steps (0: time only) -- deterministic leases for tests
        self.lease_steps = int(args.get("lease_steps", 0))
        self.sync = str(args["sync"])
        self.staleness = int(args.get("staleness", 0))
        self.v = float(args.get("significance", 0.0)) if self.sync == "isp" else 0.0
        self.batch = int(args["batch"])
        self.lr = float(args["lr"])
        #: ISP: a replica checkpoint every this many steps (re-invocations replay from it)
        self.ckpt_every = max(1, int(args.get("ckpt_every", 20)))
        #: emulated link to the store (Mbit/s of the Redis node's NIC, shared by the step's
        #: workers); 0 = none (the real link: loopback on localhost, the cloud's network otherwise)
        self.network_mbps = float(args.get("network_mbps", 0.0))
        self.stats: dict[str, Any] = {"steps": 0, "bytes_out": 0, "bytes_in": 0, "entries_out": 0, "entries_computed": 0,
                                      "compute_s": 0.0, "wait_s": 0.0, "pull_s": 0.0}
        #: BSP: the replica is the supervisor's reference bit for bit (see :meth:`_catch_up`)
        self.in_member_order = self.sync != "isp" and self.staleness == 0
        #: (in member order) this invocation's own committed updates not applied yet, by step
        self._own: dict[int, bytes] = {}

    # ------------------------------------------------------------------ set-up
    def _connect(self) -> None:
        import redis

        from spotwise.planes.serverless.store import Keys, RedisURL

        # host:port, or the private server's unix socket; the password inline or (on this machine)
        # read from the supervisor's 0600 file
        u = RedisURL.from_dict(self.args["redis"])
        self.r = redis.Redis(**u.client_options(), socket_timeout=60, socket_connect_timeout=10)
        self.k = Keys(self.args["job"])
        self.commit = self.r.register_script(_commit_lua())

    def _build(self) -> None:
        import torch

        from spotwise.config import WorkloadSpec
        from spotwise.planes.serverless.schedule import SampleStream
        from spotwise.spec.load import build
        from spotwise.workloads.params import num_params
        from spotwise.workloads.registry import make_workload

        torch.set_num_threads(1)
        spec = build(WorkloadSpec, self.args["workload"], "workload")
        self.workload = make_workload(spec, int(self.args["seed"]))
        self.model = self.workload.build_model()
        self.model.train()
        self.n = num_params(self.model)
        from spotwise.workloads.base import is_ordered

        self.stream = SampleStream(len(self.workload.train), int(self.args["seed"]), is_ordered(self.workload))

    def _check_live(self) -> None:
        inc, stop = self.r.mget(self.k.per("inc", self.w), self.k.stop)
        if inc is None or inc.decode() != self.inc:
            raise Fenced("fenced")
        if stop is not None:
            raise Fenced("stopped")

    def _transfer(self, nbytes: int, workers: int) -> None:
        """Emulated transfer time of ``nbytes`` to or from the store (see ``network_mbps``)."""
        if self.network_mbps > 0 and nbytes > 0:
            d = nbytes * 8.0 / (self.network_mbps * 1e6 / max(1, workers))
            self.stats["network_s"] = self.stats.get("network_s", 0.0) + d
            time.sleep(d)

    def _heartbeat(self) -> None:
        # "<wall time> <incarnation>": the pool tells this incarnation's beats from a fenced one's
        self.r.set(self.k.per("hb", self.w), f"{time.time():.3f} {self.inc}", ex=3600)

    def _restore(self) -> None:
        """Rebuild the replica from the store (see the module docstring).

        BSP: the supervisor's snapshot (every worker's updates since are applied by :meth:`_catch_up`,
        in member order).  SSP: the snapshot plus this worker's committed updates since.  ISP: the
        worker's own replica checkpoint (replica, residual and view, written with every
        ``ckpt_every``-th commit), then a *replay* of its steps since -- the same samples, the same
        peers' updates in the same order -- which rebuilds exactly the replica and residual the
        lost invocation held, so its insignificant updates are not lost either.
        """
        from spotwise.planes.serverless.significance import DenseSignificanceFilter, SignificanceFilter
        from spotwise.planes.serverless.store import apply_encoded, decode_dense, decode_update

        pipe = self.r.pipeline()
        pipe.get(self.k.model_version)
        pipe.get(self.k.model)
        pipe.get(self.k.per("clock", self.w))
        ver, snap, clock = pipe.execute()
        if ver is None or snap is None:
            raise RuntimeError("the store holds no model snapshot (was it restarted?)")
        target = int(clock or 0)
        self.filter: Any = None
        if self.sync != "isp":
            x = decode_dense(snap, self.n)
            self.view = ReplicaView(x, int(ver))
            self.clock = target
            if self.in_member_order:
                return
            own = [self.k.upd(t, self.w) for t in range(self.view.version, self.clock)]
            for t, data in zip(range(self.view.version, self.clock), self.r.mget(own) if own else []):
                if data is None:
                    raise RuntimeError(f"own update of step {t} is missing from the store")
                apply_encoded(data, x)
            return
        # the dense accumulator is the cheaper one wherever the model fits twice in memory
        dense = self.n <= DENSE_FILTER_MAX
        self.filter = DenseSignificanceFilter(self.n, self.v) if dense else SignificanceFilter(self.n, self.v)
        base, ckpt_x, ckpt_r, ckpt_meta = self.r.mget(self.k.model0, self.k.per("ckpt_x", self.w), self.k.per("ckpt_r", self.w),
                                                      self.k.per("ckpt_meta", self.w))
        if ckpt_meta is None:  # no checkpoint yet: the replica starts at the job's (or the re-seed's) model
            if base is None:
                raise RuntimeError("the store holds no initial model")
            meta = json.loads(self.r.get(self.k.model0_meta) or b'{"step": 0}')
            self.view = ReplicaView(decode_dense(base, self.n), int(meta["step"]))
            self.clock = int(meta["step"])
        else:
            meta = json.loads(ckpt_meta)
            self.view = ReplicaView(decode_dense(ckpt_x, self.n), int(meta["version"]))
            self.clock = int(meta["step"])
            r = decode_update(ckpt_r)
            if dense:
                self.filter.restore(r, self.clock)
            else:
                self.filter._acc_idx = r.indices.copy()  # noqa: SLF001 - restoring the filter's own state
                self.filter._acc_val = r.values.astype(np.float64)  # noqa: SLF001
                self.filter._last_step = self.clock  # noqa: SLF001
        while self.clock < target:  # replay the committed steps since the checkpoint
            self._step(self._schedule(), replay=True)
            self.stats["replayed"] = self.stats.get("replayed", 0) + 1

    def _schedule(self) -> Any:
        from spotwise.planes.serverless.schedule import Schedule

        return Schedule.from_json(self.r.get(self.k.schedule))

    def _live_schedule(self) -> Any:
        """The membership schedule, after checking this invocation is live (one round trip a step)."""
        from spotwise.planes.serverless.schedule import Schedule

        inc, stop, sched = self.r.mget(self.k.per("inc", self.w), self.k.stop, self.k.schedule)
        if inc is None or inc.decode() != self.inc:
            raise Fenced("fenced")
        if stop is not None:
            raise Fenced("stopped")
        return Schedule.from_json(sched)

    # ------------------------------------------------------------------ the loop
    def run(self) -> dict[str, Any]:
        status = "lease"
        error = None
        try:
            self._connect()
            self._check_live()
            self._fault = self.r.get(self.k.per("fault", self.w))  # injected faults (tests): read once, not every step
            self._build()
            self._restore()
            self._heartbeat()  # the first beat ends the cold start (see FunctionPool's startup allowance)
            while True:
                # the lease (the platform's timeout) ends the invocation -- but only after one step of
                # its own, so a lease shorter than a function's start-up still makes progress
                lease_over = time.time() - self.t_start >= self.lease_s or (self.lease_steps and self.stats["steps"] >= self.lease_steps)
                if lease_over and self.stats["steps"] > 0:
                    self._save_checkpoint()  # the next invocation starts here, without a replay
                    status = "lease"
                    break
                sched = self._live_schedule()
                lv = sched.leave.get(self.w)
                if lv is not None and self.clock >= lv:
                    self._leave(sched, lv)
                    status = "left"
                    break
                self._step(sched)
        except Fenced as e:
            status = str(e)
        except Exception as e:  # reported to the supervisor, which redoes the work
            status, error = "error", f"{type(e).__name__}: {e}"
        out = {"worker": self.w, "inc": self.inc, "status": status, "error": error, "started": self.t_start,
               "ended": time.time(), "pid": os.getpid(), "clock": getattr(self, "clock", None), **self.stats}
        try:
            self.r.set(self.k.prefix + f"result:{self.w}:{self.inc}", json.dumps(out), ex=24 * 3600)
        except Exception:
            pass
        return out

    def _wait_for(self, sched: Any, t: int) -> None:
        """Block until every peer has committed what step ``t`` needs (SSP/BSP rule)."""
        peers = [q for q in sched.join if q != self.w]
        need = {self.k.per("clock", q): sched.required_clock(q, t, self.staleness) for q in peers}
        need = {q: n for q, n in need.items() if n > 0}
        if t - MAX_LEAD > 0:
            need[self.k.merged] = t - MAX_LEAD
        if not need:
            return
        keys = list(need)
        delay = _POLL_MIN_S
        t0 = time.perf_counter()
        last_hb = time.time()
        while True:
            clocks = self.r.mget(keys)
            if all(int(c or 0) >= n for c, n in zip(clocks, need.values())):
                break
            if time.time() - last_hb > 1.0:
                self._check_live()
                self._heartbeat()
                last_hb = time.time()
            delay = _wait_backoff(delay)
        self.stats["wait_s"] += time.perf_counter() - t0

    def _catch_up(self, sched: Any, upto: int, merge_last: bool = True) -> None:
        """Apply the peers' updates of every step ``< upto`` (and the evictions on the way).

        BSP (:attr:`in_member_order`): every member's update of a step -- this worker's own too, kept
        from its commit (or read back after a re-invocation) -- in member order, as the supervisor
        merges them into the reference replica: the same float32 additions in the same order, so every
        worker's replica *is* the reference at every step, and an invocation that starts afresh from
        the reference (a lease, a lost function, a store re-seed, ``run --resume``) goes on computing
        exactly what the lost one would have.  (Applying its own update first, at full precision, left
        each replica a few ulps from the reference: a resumed run's losses differed in the 8th digit.)
        """
        from spotwise.planes.serverless.significance import merge_leaving_replica
        from spotwise.planes.serverless.store import apply_encoded, decode_dense

        t0 = time.perf_counter()
        view = self.view
        while view.version < upto:
            u = view.version
            order = [q for q in sched.members(u) if q != self.w or self.in_member_order]
            own = self._own.pop(u, None) if self.w in order else None
            fetch = [q for q in order if q != self.w or own is None]
            if order:
                blobs = dict(zip(fetch, self.r.mget([self.k.upd(u, q) for q in fetch]) if fetch else []))
                if own is not None:
                    blobs[self.w] = own
                for q in order:
                    if blobs[q] is None:
                        raise RuntimeError(f"update of worker {q} at step {u} is missing from the store")
                    apply_encoded(blobs[q], view.x)
                got = sum(len(blobs[q]) for q in fetch)
                self.stats["bytes_in"] += got
                self._transfer(got, len([q for q in order if q != self.w]) + 1)
            view.version = u + 1
            for q, lv in sched.leave.items():  # a worker leaving at the new version: merge its replica
                if lv == view.version and q != self.w and (merge_last or view.version < upto):
                    data = self._wait_key(self.k.per("replica", q))
                    self.stats["bytes_in"] += len(data)
                    view.x[:] = merge_leaving_replica(view.x, decode_dense(data, self.n)).astype(np.float32)
        self.stats["pull_s"] += time.perf_counter() - t0

    def _wait_key(self, key: str) -> bytes:
        delay = _POLL_MIN_S
        last_hb = time.time()
        while True:
            data = self.r.get(key)
            if data is not None:
                return data
            if time.time() - last_hb > 1.0:
                self._check_live()
                self._heartbeat()
                last_hb = time.time()
            delay = _wait_backoff(delay)

    def _complete_version(self, sched: Any) -> int:
        """The first step that not every worker has committed yet (all before it are complete)."""
        ids = sorted(sched.join)
        clocks = self.r.mget([self.k.per("clock", q) for q in ids])
        bound = [self.clock]
        for q, c in zip(ids, clocks):
            c = int(c or 0)
            lv = sched.leave[q]
            if lv is None or c < lv:  # a worker that has left holds no step back
                bound.append(c)
        return min(bound)

    def _step(self, sched: Any, replay: bool = False) -> None:
        import torch

        from spotwise.planes.serverless.schedule import worker_batch
        from spotwise.planes.serverless.significance import SparseUpdate
        from spotwise.planes.serverless.store import encode_dense, encode_update
        from spotwise.workloads.params import flat_grad_sparse, set_flat_params, zero_grad

        t = self.clock
        self._wait_for(sched, t)
        self._catch_up(sched, min(t, self._complete_version(sched)))
        x = self.view.x
        t0 = time.perf_counter()
        idx = worker_batch(sched, self.stream, self.w, t, self.batch)
        set_flat_params(self.model, torch.from_numpy(x))
        zero_grad(self.model)
        loss = self.workload.loss(self.model, self.workload.train.batch(idx))
        loss.backward()
        p = sched.size(t)
        loss_value = float(loss.detach())
        if math.isfinite(loss_value) and _grads_finite(self.model):
            g = flat_grad_sparse(self.model)
            u = SparseUpdate(g.indices, g.values * (-self.lr / p), g.size)
        else:
            # diverged: commit no change and a NaN loss -- the driver stops the run with exit 2 after a
            # checkpoint of the last good step (raising here would be redone by the supervisor forever)
            u, loss_value = SparseUpdate(np.zeros(0, np.int64), np.zeros(0), x.size), math.nan
        if not self.in_member_order:  # BSP: applied with the step's other updates, in member order (_catch_up)
            u.apply_to(x)
        sig = self.filter.push(t + 1, x, u) if self.filter is not None else u
        self.stats["compute_s"] += time.perf_counter() - t0
        if replay:
            self._replayed(t, sig)
            return
        self.stats["entries_computed"] += u.nnz
        self._inject_fault(t)
        payload = encode_update(sig)
        ckpt_x = ckpt_r = ckpt_meta = b""
        if self.filter is not None and (t + 1) % self.ckpt_every == 0:
            # the replica checkpoint a re-invocation replays from (atomic with this commit)
            ckpt_x = encode_dense(x)
            ckpt_r = encode_update(self.filter.residual(), exact=True)
            ckpt_meta = json.dumps({"step": t + 1, "version": self.view.version}).encode()
        self._transfer(len(payload) + len(ckpt_x) + len(ckpt_r), p)
        meta = json.dumps({"loss": loss_value, "n": int(len(idx)), "nnz": sig.nnz, "computed": u.nnz})
        ok = self.commit(keys=[self.k.per("inc", self.w), self.k.per("clock", self.w), self.k.upd(t, self.w),
                               self.k.meta(t, self.w), self.k.per("ckpt_x", self.w), self.k.per("ckpt_r", self.w),
                               self.k.per("ckpt_meta", self.w)],
                         args=[self.inc, t, payload, meta, UPDATE_TTL_S, ckpt_x, ckpt_r, ckpt_meta])
        if int(ok) == 0:
            raise Fenced("fenced")
        if int(ok) < 0:
            raise RuntimeError(f"step {t} was already committed (the store disagrees with this function)")
        self.clock = t + 1
        if self.in_member_order:
            self._own[t] = payload
        self.stats["steps"] += 1
        self.stats["bytes_out"] += len(payload)
        self.stats["entries_out"] += sig.nnz
        self._heartbeat()

    def _save_checkpoint(self) -> None:
        """ISP: store the replica checkpoint at the current clock (a fenced invocation stores nothing)."""
        from spotwise.planes.serverless.store import CHECKPOINT_LUA, encode_dense, encode_update

        if self.filter is None:
            return
        x, r = encode_dense(self.view.x), encode_update(self.filter.residual(), exact=True)
        meta = json.dumps({"step": self.clock, "version": self.view.version})
        ok = self.r.eval(CHECKPOINT_LUA, 5, self.k.per("inc", self.w), self.k.per("clock", self.w), self.k.per("ckpt_x", self.w),
                         self.k.per("ckpt_r", self.w), self.k.per("ckpt_meta", self.w), self.inc, self.clock, x, r, meta)
        if int(ok) == 1:
            self._transfer(len(x) + len(r), 1)

    def _replayed(self, t: int, sig: Any) -> None:
        """Bookkeeping of a replayed step: what was pushed is what the store holds.

        A bit-exact replay recomputes the committed update; should it not (a nondeterministic
        kernel), the residual is corrected by the difference, so that pushed + residual is still
        the sum of the worker's updates.
        """
        from spotwise.planes.serverless.store import decode_update

        data = self.r.get(self.k.upd(t, self.w))
        if data is None:
            raise RuntimeError(f"own update of step {t} is missing from the store")
        stored = decode_update(data)
        if self.filter is not None and not (np.array_equal(stored.indices, sig.indices)
                                            and np.array_equal(stored.values, sig.values.astype(np.float32))):
            self.stats["replay_mismatch"] = self.stats.get("replay_mismatch", 0) + 1
            acc = getattr(self.filter, "_acc", None)
            if acc is not None:
                acc[sig.indices] += sig.values
                acc[stored.indices] -= stored.values
                self.filter._held[sig.indices] = True  # noqa: SLF001
                self.filter._held[stored.indices] = True  # noqa: SLF001
        self.clock = t + 1

    def _leave(self, sched: Any, lv: int) -> None:
        """Publish the replica for the others to merge (paper 004 Sec. 4.2) and stop."""
        from spotwise.planes.serverless.store import encode_dense

        self._wait_for(sched, lv)
        self._catch_up(sched, min(lv, self._complete_version(sched)), merge_last=False)
        data = encode_dense(self.view.x)
        self.r.set(self.k.per("replica", self.w), data, ex=UPDATE_TTL_S)
        self.stats["bytes_out"] += len(data)

    def _inject_fault(self, t: int) -> None:
        f = self._fault
        if not f:
            return
        kind, _, at = f.decode().partition(":")
        if int(at or -1) != t:
            return
        self.r.delete(self.k.per("fault", self.w))
        self._fault = None
        if kind == "die":
            os._exit(17)  # the process dies between computing and committing its update
        if kind == "hang":
            while time.time() - self.t_start < self.lease_s:
                time.sleep(0.05)
                inc = self.r.get(self.k.per("inc", self.w))
                if inc is None or inc.decode() != self.inc:
                    raise Fenced("fenced")
            raise Fenced("timeout")


def _commit_lua() -> str:
    from spotwise.planes.serverless.store import COMMIT_LUA

    return COMMIT_LUA
