"""How the job controller schedules mini-batches and collects them, in each synchronisation mode.

:class:`RoundsMixin` is mixed into :class:`~spotwise.control.controller.JobController` and works
on its state (members, sampler, clock, compute, provider); it holds the barrier rounds and the
continuous ticks, and the drawn mini-batch times they use.

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

import time
from typing import Any

from spotwise.control.clock import ReadyFn
from spotwise.planes.ps.compute import Result, WorkerLost
from spotwise.control.records import Contribution, Task
from spotwise.control.sampler import Block
from spotwise.planes.ps.wire import DENSE_ENTRY_BYTES, grad_size, payload_nbytes


class RoundsMixin:
    """Barrier rounds (``full``, ``n-sync``) and continuous ticks (``n-batch``, ``async``) of a
    :class:`~spotwise.control.controller.JobController` (see the module docstring)."""

    # ------------------------------------------------------------------ drawn and measured time
    def _draw(self) -> float:
        return float(self.time_law.draw(self.dur_rng))

    def _finish_time(self, start: float) -> float | None:
        """When a mini-batch started at ``start`` completes: drawn (virtual clock) or ``None`` (measured)."""
        d = self.clock.duration(self._draw)
        return None if d is None else start + d

    def _ready(self, refs: dict[int, Any]) -> ReadyFn:
        """``ready(slots, k, timeout)`` over ``refs`` for :meth:`Clock.next_done` (the data plane waits)."""
        return lambda slots, k, timeout: self.compute.wait({w: refs[w] for w in slots}, k, timeout)

    # ------------------------------------------------------------------ barrier modes
    def _barrier_round(self) -> None:
        """One round of a barrier mode: every member computes one block; commit the needed ones.

        The clock says which results to collect next (:meth:`Clock.next_done`): on a virtual
        clock the earliest drawn finish times, with the market events before them applied first
        (in virtual-time order); on the wall clock whatever the data plane reports first, with
        joins taken in between.  A worker lost on the way costs only its block (see
        :meth:`_lose_contribution`); a round none of whose workers survives is aborted.
        """
        self._poll_joins()
        self._iteration_market()
        if not self.members:
            return
        t0 = self.T
        blocks = self._reserve_round()
        if not blocks:
            return
        params = self._params_arg()
        finish = {w: self._finish_time(t0) for w in blocks}
        refs = {w: self.compute.submit(self.members[w], params, blocks[w].indices) for w in blocks}
        ready = self._ready(refs)
        results: dict[int, Result] = {}
        while len(results) < self.sync_strategy.needed(len(blocks)):
            want = self.sync_strategy.needed(len(blocks)) - len(results)
            done, t_done = self.clock.next_done({w: finish[w] for w in blocks if w not in results}, want, ready)
            if t_done is None or not self._round_market(t_done, blocks, refs, finish, results):
                self._collect(done, refs, results, blocks, finish)
            if not blocks:
                self._abort_round()
                return
            self._poll_joins()
        for w in list(blocks):
            if w not in results:
                self.sampler.release(blocks.pop(w))  # stragglers cancelled by n-sync
        drawn = [f for w in results if (f := finish[w]) is not None]
        if drawn:
            self.clock.advance_to(max(drawn))
        for w, r in results.items():
            self._worker_notice(w, r[4])
        self._commit([Contribution(w, blocks[w], r[0], r[1], r[2], 0) for w, r in results.items()])

    def _round_market(self, until: float, blocks: dict[int, Block], refs: dict[int, Any],
                      finish: dict[int, float | None], results: dict[int, Result]) -> bool:
        """Market events up to ``until`` during a round; True as soon as one costs the round a block."""
        while True:
            t = self.provider.peek_time()
            if t is None or t > until:
                return False
            ev = self.provider.pop_event()
            self.clock.advance_to(ev.t)
            self._emit_prices()
            revoked = ev.kind == "revoke" and ev.worker in blocks and ev.worker in self.members and ev.worker not in results
            self._handle_market(ev)
            if revoked:
                self._lose_contribution(ev.worker, blocks, refs, finish)
                return True

    def _collect(self, done: list[int], refs: dict[int, Any], results: dict[int, Result], blocks: dict[int, Block],
                 finish: dict[int, float | None]) -> None:
        """Results of ``done`` (one round trip; one by one if a worker died: it is dropped)."""
        if not done:
            return
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
                self._drop_member(w, "node-lost")
                self._lose_contribution(w, blocks, refs, finish)

    def _reserve_round(self) -> dict[int, Block]:
        blocks: dict[int, Block] = {}
        for w in sorted(self.members):
            b = self.sampler.reserve(self.batch)
            if b is None:
                break
            blocks[w] = b
        return blocks

    def _params_arg(self) -> Any:
        """The parameters as a call argument of this round (:meth:`Compute.share`)."""
        return self.compute.share(self.params)

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
            self.sampler.release(block)
        refs.pop(w, None)
        finish.pop(w, None)
        self.lost_in_step += 1

    def _abort_round(self) -> None:
        """Nothing of the round survived: the step is retried (its blocks are already released)."""
        self.retries += 1
        self.counters.aborted_steps += 1

    def _worker_notice(self, w: int, notice: dict[str, Any] | None) -> None:
        """A preemption notice seen by the worker's own metadata watcher (real clusters)."""
        if not notice or w in self.noticed or w not in self.members:
            return
        self.noticed.add(w)
        self.counters.notices += 1
        at = notice.get("at")
        self.log.emit("notice", worker=w, revoke_at=None if at is None else self.T + max(0.0, at - time.time()),
                      source=notice.get("cloud"), action=notice.get("action"))
        if self.step > self.last_ckpt_step:
            self._checkpoint("notice")

    def _get(self, w: int, ref: Any) -> Result:
        """One result; :class:`WorkerLost` if its worker died."""
        return self._received(self.compute.result(w, ref))

    def _received(self, r: Result) -> Result:
        """Count a result's gradient payload (``extra["grad_bytes"]``, issue 9); returns ``r``."""
        grad = r[0]
        self.counters.grad_bytes += payload_nbytes(grad)
        self.counters.grad_bytes_dense += DENSE_ENTRY_BYTES * grad_size(grad)
        return r

    # ------------------------------------------------------------------ continuous modes
    def _start_task(self, w: int) -> None:
        b = self.sampler.reserve(self.batch)
        if b is None:
            self.waiting.add(w)
            return
        self.waiting.discard(w)
        ref = self.compute.submit(self.members[w], self._params_ref(), b.indices)  # one shared copy per step
        self.tasks[w] = Task(w, b, self.step, self.T, self._finish_time(self.T), ref)

    def _params_ref(self) -> Any:
        if self._pref_step != self.step:
            self._pref = self.compute.share(self.params)
            self._pref_step = self.step
        return self._pref

    def _ensure_tasks(self) -> bool:
        """Every member has a mini-batch in flight; False if nothing is in flight at all."""
        for w in sorted(self.members):
            if w not in self.tasks:
                self._start_task(w)
        if self.tasks:
            return True
        if self.buffer:
            # end of an epoch: the rest of its samples are all in the buffer -- commit the short
            # step (like a short last batch) so the next epoch can start
            contribs, self.buffer = self.buffer, []
            self._commit(contribs)
        return False

    def _finish_task(self, task: Task) -> None:
        """``task``'s mini-batch is done: buffer it, commit when N are buffered, start the next one."""
        del self.tasks[task.worker]
        try:
            grad, loss, n, _, notice = self._get(task.worker, task.ref)
        except WorkerLost:
            self.tasks[task.worker] = task  # so that _drop_member releases its block
            self._drop_member(task.worker, "node-lost")
            return
        self._worker_notice(task.worker, notice)
        self.buffer.append(Contribution(task.worker, task.block, grad, loss, n, self.step - task.version))
        if len(self.buffer) >= self.sync_strategy.needed(max(1, len(self.members))):
            contribs, self.buffer = self.buffer, []
            self._commit(contribs)
            self._iteration_market()
        if task.worker in self.members:
            self._start_task(task.worker)
        for w in list(self.waiting):
            if w in self.members and w not in self.tasks:
                self._start_task(w)

    def _continuous_tick(self) -> None:
        """The next event of a continuous mode: a market event or the next finished mini-batch."""
        self._poll_joins()
        if not self._ensure_tasks():
            return
        done, t_done = self.clock.next_done({w: k.finish for w, k in self.tasks.items()}, 1,
                                            self._ready({w: k.ref for w, k in self.tasks.items()}))
        t_mkt = self.provider.peek_time()
        if t_mkt is not None and (t_done is None or t_mkt <= t_done):
            self._drain_market(t_mkt)
            return
        if not done:
            return
        if t_done is not None:
            self.clock.advance_to(t_done)
        self._finish_task(self.tasks[done[0]])
