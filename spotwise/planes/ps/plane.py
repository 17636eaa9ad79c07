"""The parameter-server plane: how mini-batches are scheduled, collected and committed in each sync mode.

The parameter-server data plane (:class:`~spotwise.control.dataplane.DataPlane`):
:class:`ParameterServerPlane` is held by the job controller
(``job.plane``).  The parameters live in the controller (the on-demand parameter server of
``papers/000_3c734f3ffedcac15.txt`` Sec. III and ``papers/002_a246f6afe29b4bfb.txt`` Sec. II); the
plane hands blocks of the sampler to the members, collects their gradients through the job's
:class:`~spotwise.planes.ps.compute.Compute` and commits each step atomically.  It holds the
barrier rounds and the continuous ticks, the mini-batches in flight and the drawn mini-batch times
they use; membership, market, policies and money stay the controller's.

**Time.** On the emulated provider every worker mini-batch has a *virtual* duration
``m * ((1 - s) + s * Exp(1))`` with ``m = step_time_s / throughput(instance, family)`` and ``s``
the straggler coefficient (``s = 1`` is the exponential runtime model of paper 000 eq. 14); the
commit adds ``Delta = sync_overhead_s``.  The numerics are real: each worker actor computes its
gradient with PyTorch.  Market events (notices, revocations, capacity returning) are interleaved
with task completions in virtual-time order, so the run is deterministic for a given seed however
fast or slow the machine is.

**Synchronisation** (``papers/000_3c734f3ffedcac15.txt`` Sec. III; ``papers/002_a246f6afe29b4bfb.txt``):

* ``full`` -- each round hands every active worker one block; the step commits when all are done
  (``R = max_k r_k + Delta``, eq. 14);
* ``n-sync`` -- the step commits with the first ``N`` finished workers, the rest are cancelled and
  their blocks go back to the sampler (``R = r_(N) + Delta``, eq. 15); with fewer than ``N`` active
  workers, all of them;
* ``n-batch`` -- workers never wait: each finished mini-batch is buffered and the worker starts
  the next one at once with the newest parameters; the step commits when ``N`` mini-batches are
  buffered (possibly several from one fast worker; gradients may be stale);
* ``async`` -- the asynchronous parameter server: every finished mini-batch is applied at once
  (``N = 1`` without barrier), with the staleness it has.
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np

from spotwise.config import COLLECTIVE_SYNC_MODES, JobSpec
from spotwise.control.accounting import AccountedJob, Accounting, Billing
from spotwise.control.dataplane import PlaneHost
from spotwise.control.carried import exact
from spotwise.control.phases import BUSY, PhaseTotals
from spotwise.control.checkpoint import refuse_foreign_checkpoint
from spotwise.control.clock import ReadyFn
from spotwise.control.records import Contribution, Task
from spotwise.control.sampler import Block
from spotwise.control.state import NonFiniteStep
from spotwise.control.sync import SyncStrategy, make_sync
from spotwise.market.preemption import MarketEvent
from spotwise.planes.ps.compute import Compute, RayCompute, Result, WorkerLost
from spotwise.planes.ps.wire import DENSE_ENTRY_BYTES, accumulate, grad_size, payload_nbytes
from spotwise.policies.base import Decision, Policy, SwitchSync



class ParameterServerPlane:
    """Barrier rounds (``full``, ``n-sync``) and continuous ticks (``n-batch``, ``async``) of the
    parameter-server plane, with the atomic commit (see the module docstring)."""

    name = "ps"

    def __init__(self) -> None:
        self._job: PlaneHost | None = None
        #: the mini-batch in flight of each member (continuous modes)
        self.tasks: dict[int, Task] = {}
        #: finished mini-batches waiting for the commit (continuous modes)
        self.buffer: list[Contribution] = []
        #: members with nothing to do until the epoch's pending blocks come back (continuous modes)
        self.waiting: set[int] = set()
        #: members whose own metadata watcher reported a preemption notice (real clusters)
        self.noticed: set[int] = set()
        #: aborted rounds and lost contributions of the step in progress (the step event's ``retries``, ``lost``)
        self.retries = 0
        self.lost_in_step = 0
        #: per-phase step timing (spotwise.control.phases) and the wall clock of the last commit
        self.phases = PhaseTotals()
        self._last_commit_wall: float | None = None
        #: the parameters shared with the data plane for step ``_pref_step`` (continuous modes)
        self._pref: Any = None
        self._pref_step = -1
        self._pending_ckpt: str | None = None  # a notice's checkpoint, taken at the next commit

    @property
    def job(self) -> PlaneHost:
        if self._job is None:
            raise RuntimeError("the plane is not attached to a job")
        return self._job

    @property
    def compute(self) -> Compute:
        """The job's worker processes (the parameter-server plane always has them)."""
        compute = self.job.compute
        if compute is None:
            raise RuntimeError("the parameter-server plane needs the job's compute (worker processes)")
        return compute

    # ------------------------------------------------------------------ the DataPlane interface
    def default_compute(self, spec: JobSpec, standby: int) -> Compute:
        return RayCompute.for_spec(spec, standby)  # on the workers' device, with their GPUs (issue 20 item 4)

    def attach(self, job: PlaneHost) -> None:
        self._job = job

    def make_accounting(self, job: AccountedJob) -> Billing:
        return Accounting(job)

    def log_meta(self) -> dict[str, Any]:
        return {}

    def checkpoint_state(self) -> dict[str, Any]:
        # what the summary adds up over the run's sessions (spotwise.control.carried; issue 54 item 5)
        return {"plane_carried": {"phases": self.phases.state()}}

    def restore_state(self, state: dict[str, Any]) -> None:
        refuse_foreign_checkpoint(state, "ps")
        self.phases = PhaseTotals.from_state(exact(state.get("plane_carried"), "plane_carried", ("phases",))["phases"])

    def begin(self) -> None:
        return None

    def started(self) -> None:
        return None

    def sync_strategy(self, sync: str, sync_n: int | None) -> SyncStrategy:
        return make_sync(sync, sync_n)

    def before_tick(self) -> None:
        self.job.drain_market(self.job.T)

    def tick(self) -> None:
        if self.job.sync_strategy.barrier:
            self._barrier_round()
        else:
            self._continuous_tick()

    def on_join(self, w: int) -> None:
        return None

    def on_leave(self, w: int, reason: str) -> None:
        """A member left: its block in flight goes back to the sampler."""
        task = self.tasks.pop(w, None)
        if task is not None:
            self.job.sampler.release(task.block)
        self.waiting.discard(w)
        self.noticed.discard(w)

    def on_market_event(self, ev: MarketEvent, joined: bool) -> None:
        return None

    def refuse(self, d: Decision) -> str | None:
        if isinstance(d, SwitchSync) and d.sync in COLLECTIVE_SYNC_MODES:
            return f"{d.sync!r} is a strategy of the collective data plane, not of the parameter server"
        return None

    def after_decision(self, policy: Policy, d: Decision) -> None:
        return None

    def ready_for_checkpoint(self, why: str) -> bool:
        """The parameters are the controller's: always those of the current step.  A notice's checkpoint
        is taken at the next commit (a notice threatens a worker, not them): taken inside a round it
        would make a resume restart that round at the notice's instant, not where the uninterrupted
        run started it (issue 30 item 8)."""
        if why == "notice":
            self._pending_ckpt = why
            return False
        return True

    def stop(self) -> None:
        return None

    def before_finish(self) -> None:
        return None

    def summary_extra(self) -> dict[str, Any]:
        # where a step's time went, by phase (spotwise.control.phases), as the collective plane reports it, and
        # where the coordinator's optimizer stepped (issue 40 item 4: its GPU when it has one)
        device = getattr(self.job.state, "device", None) if self.job is not None else None
        return {"step_phases": self.phases.summary(), "optimizer_device": None if device is None else str(device)}

    def _phases(self, contribs: list[Contribution], optimizer_s: float) -> dict[str, float] | None:
        """A committed step's phases in milliseconds, from the coordinator's side (issue 40 item 5):
        ``compute`` -- the slowest contribution's worker seconds (its batch, forward and backward, the
        gradient's copy to the host; the batch is built inside that call); ``optimizer`` -- the
        coordinator applying the step; ``wait`` -- the rest of the wall time since the last commit
        (parameters and gradients moving, waiting for peers, the coordinator's bookkeeping).  None for
        the run's first commit (its wall time holds the workers' start) and where no worker measured
        its work (modelled compute: ``simulate``'s workers take no time)."""
        now, last = time.perf_counter(), self._last_commit_wall
        self._last_commit_wall = now
        if last is None or not any(c.seconds > 0 for c in contribs):
            return None
        wall = max(0.0, now - last)
        compute = min(wall, max((c.seconds for c in contribs), default=0.0))
        optimizer = min(max(0.0, optimizer_s), max(0.0, wall - compute))
        out = {k: round(1000.0 * v, 2) for k, v in
               (("compute", compute), ("optimizer", optimizer), ("wait", max(0.0, wall - compute - optimizer)))}
        busy = [float(c.busy) for c in contribs if c.busy is not None]
        if busy:  # the contributing workers' GPUs (spotwise.control.phases)
            out[BUSY] = round(sum(busy) / len(busy), 3)
        return out

    def shutdown(self) -> None:
        return None

    # ------------------------------------------------------------------ drawn and measured time
    def _finish_time(self, start: float, w: int, samples: int | None = None) -> float | None:
        """When slot ``w``'s mini-batch of ``samples`` started at ``start`` completes: drawn from its
        pool's law, its exchange included (virtual clock), or ``None`` (measured); see
        :mod:`spotwise.control.speeds`."""
        speeds = self.job.speeds
        return speeds.finish(start, self.job.clock.duration(speeds.draw(w, samples, self.job.dur_rng)), w)

    def _ready(self, refs: dict[int, Any]) -> ReadyFn:
        """``ready(slots, k, timeout)`` over ``refs`` for :meth:`Clock.next_done` (the data plane waits)."""
        compute = self.compute
        return lambda slots, k, timeout: compute.wait({w: refs[w] for w in slots}, k, timeout)

    # ------------------------------------------------------------------ the atomic commit
    def commit(self, contribs: list[Contribution]) -> None:
        """Apply one step: the contributions' gradients weighted by their samples, in one place, whole."""
        job = self.job
        if not contribs:
            raise RuntimeError("a step needs at least one contribution")
        total = sum(c.n for c in contribs)
        grad = np.zeros_like(job.params)
        loss = 0.0
        for c in contribs:
            accumulate(grad, c.grad, c.n / total)  # a sparse contribution stays sparse (issue 9)
            loss += (c.n / total) * c.loss
        if not math.isfinite(loss):
            for c in contribs:
                job.sampler.release(c.block)
            job.nonfinite(f"the loss is {loss}")
        lr = job.recipe.lr_at(job.lr, job.counters.samples)  # the base rate times the schedule at the samples committed so far (issue 28)
        t_apply = time.perf_counter()
        try:
            job.state.apply(grad, lr, len(contribs))
        except NonFiniteStep as e:
            for c in contribs:
                job.sampler.release(c.block)
            job.nonfinite(str(e))
        for c in contribs:
            job.sampler.commit(c.block)
        job.counters.samples += total
        job.step += 1
        job.clock.advance(job.commit_overhead_s)  # Delta (virtual); measured time already holds it
        duration = job.T - job.last_commit_T
        job.last_commit_T = job.T
        job.last_loss = loss
        job.loss_history.append((job.step, job.T, float(loss), len(contribs)))
        job.ema_loss = loss if job.ema_loss is None else 0.9 * job.ema_loss + 0.1 * loss
        recovery_ms = None
        if job.kill_wall is not None:
            recovery_ms = 1000.0 * (time.perf_counter() - job.kill_wall)
            job.counters.recoveries_ms.append(recovery_ms)
            job.kill_wall = None
        phases = self._phases(contribs, time.perf_counter() - t_apply)
        self.phases.add(phases, total)
        job.accounting.emit_prices()
        cost = job.cost_so_far()
        job.log.emit("step", step=job.step, loss=loss, active=len(job.members), lr=lr, sync=job.sync,
                     duration=duration, cost=cost, epoch=job.sampler.epoch, retries=self.retries,
                     contributions=len(contribs), lost=self.lost_in_step,
                     staleness=max(c.staleness for c in contribs), recovery_ms=recovery_ms, samples=total,
                     **({"phases": phases} if phases else {}))
        self.retries = 0
        self.lost_in_step = 0
        job.committed()
        if job.status == "no-progress":  # the round in flight committed after all
            job.status, job.stop_message = "running", None
        if job.step % job.spec.workload.eval_every == 0:
            job.evaluate()
        if self._pending_ckpt is not None:
            self._pending_ckpt = None
            every = job.spec.outputs.checkpoint_every
            if not (every and job.step % every == 0):  # else the periodic one below is this step's
                job.checkpointer.take("notice")
        job.apply_policies()
        job.after_commit()

    # ------------------------------------------------------------------ barrier modes
    def _barrier_round(self) -> None:
        """One round of a barrier mode: every member computes one block; commit the needed ones.

        The clock says which results to collect next (:meth:`Clock.next_done`): on a virtual
        clock the earliest drawn finish times, with the market events before them applied first
        (in virtual-time order); on the wall clock whatever the data plane reports first, with
        joins taken in between.  A worker lost on the way costs only its block (see
        :meth:`_lose_contribution`); a round none of whose workers survives is aborted.
        """
        job = self.job
        job.poll_joins()
        job.iteration_market()
        if not job.members:
            return
        t0 = job.T
        blocks = self._reserve_round()
        if not blocks:
            return
        params = self._params_arg()
        finish = {w: self._finish_time(t0, w, blocks[w].indices.size) for w in blocks}
        refs = {w: self.compute.submit(job.members[w], params, blocks[w].indices) for w in blocks}
        ready = self._ready(refs)
        results: dict[int, Result] = {}
        strategy = job.sync_strategy
        while len(results) < strategy.needed(len(blocks)):
            want = strategy.needed(len(blocks)) - len(results)
            done, t_done = job.clock.next_done({w: finish[w] for w in blocks if w not in results}, want, ready)
            if t_done is None or not self._round_market(t_done, blocks, refs, finish, results):
                self._collect(done, refs, results, blocks, finish)
            if not blocks:
                self._abort_round()
                return
            job.poll_joins()
        for w in list(blocks):
            if w not in results:
                job.sampler.release(blocks.pop(w))  # stragglers cancelled by n-sync
        drawn = [f for w in results if (f := finish[w]) is not None]
        if drawn:
            job.clock.advance_to(max(drawn))
        for w, r in results.items():
            self._worker_notice(w, r[4])
        # the round's parameter object is let go before the update: Ray frees it while the optimizer
        # steps (RAY_SYSTEM_CONFIG), so the next round's goes into the same object-store memory instead
        # of new pages every worker then reads (their resident memory grew by a model per round)
        del params, refs, ready
        self.commit([Contribution(w, blocks[w], r[0], r[1], r[2], 0, float(r[3]), r[5]) for w, r in results.items()])

    def _round_market(self, until: float, blocks: dict[int, Block], refs: dict[int, Any],
                      finish: dict[int, float | None], results: dict[int, Result]) -> bool:
        """Market events up to ``until`` during a round; True as soon as one costs the round a block."""
        job = self.job
        while True:
            t = job.provider.peek_time()
            if t is None or t > until:
                return False
            ev = job.provider.pop_event()
            job.clock.advance_to(ev.t)
            job.accounting.emit_prices()
            revoked = ev.kind == "revoke" and ev.worker in blocks and ev.worker in job.members and ev.worker not in results
            job.handle_market(ev)
            if revoked:
                self._lose_contribution(ev.worker, blocks, refs, finish)
                return True

    def _collect(self, done: list[int], refs: dict[int, Any], results: dict[int, Result], blocks: dict[int, Block],
                 finish: dict[int, float | None]) -> None:
        """Results of ``done`` (one round trip; one by one if a worker died: it is dropped)."""
        if not done:
            return
        job = self.job
        got = self.compute.gather({w: refs[w] for w in done})
        for r in got.values():
            self._received(r)
        results.update(got)
        for w in done:
            if w in results or w not in blocks:
                continue
            try:
                results[w] = self._received(self.compute.result(w, refs[w]))
            except WorkerLost:
                job.drop_member(w, "node-lost")
                self._lose_contribution(w, blocks, refs, finish)

    def _reserve_round(self) -> dict[int, Block]:
        job = self.job
        blocks: dict[int, Block] = {}
        members = sorted(job.members)
        for w in members:
            b = job.sampler.reserve(job.speeds.batch(w, members))  # cluster.balance: a share by speed
            if b is None:
                break
            blocks[w] = b
        return blocks

    def _params_arg(self) -> Any:
        """The parameters as a call argument of this round (:meth:`Compute.share`)."""
        return self.compute.share(self.job.params)

    def _lose_contribution(self, w: int, blocks: dict[int, Block], refs: dict[int, Any],
                           finish: dict[int, float | None]) -> None:
        """A worker of the current round is gone: its gradient will never arrive.

        The step is completed with the new membership: the survivors' gradients are for the same
        parameters (recomputing them would give the same values, so they are kept), the lost
        worker's samples go back to the sampler, and the update stays atomic -- applied whole, in
        one place, from whole per-worker gradients only (``papers/001_30a454edd897cf47.txt``
        Sec. 3.2).  If no worker of the round survives, the round is aborted and retried.
        """
        block = blocks.pop(w, None)
        if block is not None:
            self.job.sampler.release(block)
        refs.pop(w, None)
        finish.pop(w, None)
        self.lost_in_step += 1

    def _abort_round(self) -> None:
        """Nothing of the round survived: the step is retried (its blocks are already released)."""
        self.retries += 1
        self.job.counters.aborted_steps += 1

    def _worker_notice(self, w: int, notice: dict[str, Any] | None) -> None:
        """A preemption notice seen by the worker's own metadata watcher (real clusters)."""
        job = self.job
        if not notice or w in self.noticed or w not in job.members:
            return
        self.noticed.add(w)
        job.counters.notices += 1
        at = notice.get("at")
        job.log.emit("notice", worker=w, revoke_at=None if at is None else job.T + max(0.0, at - time.time()),
                     source=notice.get("cloud"), action=notice.get("action"))
        if job.step > job.checkpointer.last_step:
            job.checkpoint("notice")

    def _get(self, w: int, ref: Any) -> Result:
        """One result; :class:`WorkerLost` if its worker died."""
        return self._received(self.compute.result(w, ref))

    def _received(self, r: Result) -> Result:
        """Count a result's gradient payload (``extra["grad_bytes"]``, issue 9); returns ``r``."""
        grad = r[0]
        self.job.counters.grad_bytes += payload_nbytes(grad)
        self.job.counters.grad_bytes_dense += DENSE_ENTRY_BYTES * grad_size(grad)
        return r

    # ------------------------------------------------------------------ continuous modes
    def _start_task(self, w: int) -> None:
        job = self.job
        b = job.sampler.reserve(job.batch)
        if b is None:
            self.waiting.add(w)
            return
        self.waiting.discard(w)
        ref = self.compute.submit(job.members[w], self._params_ref(), b.indices)  # one shared copy per step
        self.tasks[w] = Task(w, b, job.step, job.T, self._finish_time(job.T, w, b.indices.size), ref)

    def _params_ref(self) -> Any:
        job = self.job
        if self._pref_step != job.step:
            self._pref = None  # let the last step's go first (tasks still computing on it keep it)
            self._pref = self.compute.share(job.params)
            self._pref_step = job.step
        return self._pref

    def _ensure_tasks(self) -> bool:
        """Every member has a mini-batch in flight; False if nothing is in flight at all."""
        for w in sorted(self.job.members):
            if w not in self.tasks:
                self._start_task(w)
        if self.tasks:
            return True
        if self.buffer:
            # end of an epoch: the rest of its samples are all in the buffer -- commit the short
            # step (like a short last batch) so the next epoch can start
            contribs, self.buffer = self.buffer, []
            self.commit(contribs)
        return False

    def _finish_task(self, task: Task) -> None:
        """``task``'s mini-batch is done: buffer it, commit when N are buffered, start the next one."""
        job = self.job
        del self.tasks[task.worker]
        try:
            grad, loss, n, secs, notice, busy = self._get(task.worker, task.ref)
        except WorkerLost:
            self.tasks[task.worker] = task  # so that the member's leaving releases its block
            job.drop_member(task.worker, "node-lost")
            return
        self._worker_notice(task.worker, notice)
        self.buffer.append(Contribution(task.worker, task.block, grad, loss, n, job.step - task.version, float(secs), busy))
        if len(self.buffer) >= job.sync_strategy.needed(max(1, len(job.members))):
            contribs, self.buffer = self.buffer, []
            self.commit(contribs)
            job.iteration_market()
        if task.worker in job.members:
            self._start_task(task.worker)
        for w in list(self.waiting):
            if w in job.members and w not in self.tasks:
                self._start_task(w)

    def _continuous_tick(self) -> None:
        """The next event of a continuous mode: a market event or the next finished mini-batch."""
        job = self.job
        job.poll_joins()
        if not self._ensure_tasks():
            return
        done, t_done = job.clock.next_done({w: k.finish for w, k in self.tasks.items()}, 1,
                                           self._ready({w: k.ref for w, k in self.tasks.items()}))
        t_mkt = job.provider.peek_time()
        if t_mkt is not None and (t_done is None or t_mkt <= t_done):
            job.drain_market(t_mkt)
            return
        if not done:
            return
        if t_done is not None:
            job.clock.advance_to(t_done)
        self._finish_task(self.tasks[done[0]])
