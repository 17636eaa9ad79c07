"""The job controller of the collective data plane (``cluster.data_plane: collective``, issue 10).

:class:`CollectiveController` is a :class:`~spotwise.control.controller.JobController` whose
workers all-reduce among themselves (:mod:`spotwise.planes.collective.member`, Spotnik,
``papers/001_30a454edd897cf47.txt``): the parameters live in the members' replicas, not here, and
no step passes through this process.  It keeps everything else of the controller -- the market
and provider, membership, ledger, event log, policies, checkpoints, the summary -- and changes
what a step is:

* **Lease.**  On the emulated provider (a virtual clock) the controller draws each step's virtual
  time as the strategy's round (S-SGD: the slowest of ``k`` mini-batches plus ``Delta``, paper 000
  eq. 14; S-MA: the slowest member's ``H`` mini-batches plus ``Delta``; AD-PSGD: per barrier
  window, the slowest member's sum of its pairs' slower mini-batches) and lets the members
  commit, at their own speed, every step that ends before the market's next event (the *lease*).
  At the lease the event is applied at its virtual instant.  A revocation of a member raises the
  lease by one and kills the member's process at once, so it dies at a random point of a real
  step (computing, or inside the all-reduce).
* **Regroup** (Sec. 3.2, reconcile / accept / restart).  Any change of membership, a failure a
  member flags (a dead or frozen peer), and a change of strategy or learning rate (policies) end
  the generation: the controller flags it failed, collects the survivors' last committed steps
  (a survivor that does not answer within ``group_timeout_s`` is declared lost and killed),
  announces the next generation with a survivor of the highest step as its source (roll forward:
  see :mod:`spotwise.planes.collective.member`; after AD-PSGD, a roll-back to the last barrier and an
  average of the survivors' replicas) and the joiners started, and the members rebuild the
  group in place (same processes, replicas in memory) and take the source's state by broadcast.
  Recovery (kill -> the first step the new generation commits) is measured on the members' clock.
* **Commits.**  Steps are logged from the leader's records, which it sends only once every
  member has committed the step (AD-PSGD: from every member's records, sent at its barriers, once
  all of a step's are in); their virtual time is the drawn round time.  Policies are
  consulted after every logged step; a decision that changes the members' work (SwitchSync,
  SetLearningRate, Resize) takes effect at the next regroup, atomically on every member.
* **Replicas and checkpoints.**  The leader sends its replica every ``cluster.replica_every``
  steps, every ``outputs.checkpoint_every`` steps, when asked (a revocation notice), and at the
  end; checkpoints hold the replica of exactly their step.  A loss of *every* member at once
  rolls the job back to the newest replica: the steps after it are logged as lost in a
  ``rollback`` event (``extra.rolled_back_steps``) and redone on the same samples.  With a
  notice (every cloud gives one) the replica is taken at the notice; ``replica_every: 1`` makes
  any loss impossible at the cost of a parameter transfer per step.

Real clusters (``--ray-address``) are not yet served by this plane (the PS plane serves them).
"""

from __future__ import annotations

import math
import random
import time
from pathlib import Path
from typing import Any

import numpy as np

from spotwise.planes.collective.member import BARRIER_EVERY, NO_LIMIT, Plan
from spotwise.planes.collective.plane import CollectiveCompute, PlaneControl
from spotwise.planes.collective.replica import DataCursor
from spotwise.config import COLLECTIVE_SYNC_MODES, JobSpec
from spotwise.events import RunSummary
from spotwise.policies.base import SwitchSync
from spotwise.planes.ps.compute import Compute
from spotwise.control.controller import JobController
from spotwise.control.sampler import EpochSampler
from spotwise.control.sync import SyncStrategy, make_sync
from spotwise.planes.ps.worker import worker_args_for

#: seconds between two looks at the store while members run
POLL_S = 0.001
#: seconds to wait for a replica the controller asked for
REPLICA_WAIT_S = 30.0


class CollectiveController(JobController):
    """Runs one job on the collective data plane; see the module docstring."""

    def __init__(self, spec: JobSpec, out_dir: str | Path, *, compute: Compute | None = None,
                 faults: dict[int, dict[str, Any]] | None = None, **kw: Any) -> None:
        cl = spec.cluster
        if cl.data_plane != "collective":
            raise ValueError("CollectiveController runs cluster.data_plane: collective specs")
        self.plane = PlaneControl(timeout_s=float(cl.group_timeout_s))
        self.local_steps = int(cl.local_steps)
        self.replica_every = int(cl.replica_every)
        #: member slot -> the ObjectRef of its member loop (done when the member leaves or dies)
        self.runs: dict[int, Any] = {}
        #: test hook: member slot -> fault for its first start ({"step": s, "action": "exit"|"stop"})
        self.faults = dict(faults or {})
        self.gen = -1
        self.gen_members: list[int] = []
        self._plan: Plan | None = None
        self._dirty = True
        self._why = "start"
        #: virtual end of the last logged step and the drawn round times of the next steps
        self._step_end = 0.0
        self._draws: list[tuple[int, float]] = []
        self._replicas: dict[int, tuple[dict[str, Any], np.ndarray]] = {}
        self.replica_step = 0
        self._kill_time: float | None = None
        #: a checkpoint asked for between two leases (a notice, a policy): taken at the next lease
        self._pending_ckpt: str | None = None
        self._cum_samples: dict[int, int] = {}
        #: join latency: when each joining slot's process was up (wall, epoch seconds), and the measured ms
        self._join_started: dict[int, float] = {}
        self._join_ms: list[float] = []
        #: AD-PSGD: member records of steps not yet whole (step -> member -> record)
        self._partial: dict[int, dict[int, dict[str, Any]]] = {}
        self.rolled_back_steps = 0
        self.regroups = 0
        self._regroup_ms: list[float] = []
        self._fault_rng = random.Random(int(spec.seed))
        if compute is None:
            standby = cl.standby if cl.standby is not None else min(cl.workers, 4)
            compute = CollectiveCompute(worker_args_for(spec), standby=standby)
        super().__init__(spec, out_dir, compute=compute, **kw)
        n = self.state.n_train
        s = self.sampler.state()
        if s["pending"]:
            raise ValueError("a collective run cannot resume a checkpoint with pending sampler blocks")
        self.cursor = DataCursor(n, int(spec.seed), int(s["epoch"]), int(s["cursor"]))
        self.replica_step = self.step
        self._replica_pos = (self.cursor.epoch, self.cursor.pos)
        self._step_end = self.T
        self._cum_samples = {self.step: int(self.counters.samples)}

    # ================================================================== strategy
    @property
    def sync_strategy(self) -> SyncStrategy:
        return make_sync(self.sync, self.local_steps if self.sync == "sma" else self.sync_n)

    def _draw_round(self, k: int, strategy: str) -> float:
        """Virtual seconds of one committed step with ``k`` members (module docstring).

        AD-PSGD: each member waits only for its partner of the step; over the ``BARRIER_EVERY``
        steps between two barriers a member's time is the sum of its pairs' slower mini-batches
        (plus ``Delta`` per exchange), and the barrier waits for the slowest member: a step is that
        window's time over its steps.
        """
        if strategy == "adpsgd":
            if k < 2:
                return float(self.time_law.draw(self.dur_rng)) + self.commit_overhead_s
            draws = self.time_law.draw(self.dur_rng, (BARRIER_EVERY, k))
            per_member = np.zeros(k)
            for h in range(BARRIER_EVERY):
                perm = self.dur_rng.permutation(k)
                pair = np.empty(k)
                for i in range(0, k - 1, 2):
                    a, b = perm[i], perm[i + 1]
                    pair[a] = pair[b] = max(draws[h, a], draws[h, b])
                if k % 2:
                    pair[perm[-1]] = draws[h, perm[-1]]
                per_member += pair
            return float(per_member.max()) / BARRIER_EVERY + self.commit_overhead_s
        per = self.local_steps if strategy == "sma" else 1
        draws = self.time_law.draw(self.dur_rng, (k, per))
        return float(np.max(np.sum(draws, axis=1))) + self.commit_overhead_s

    def _next_draw(self, i: int, k: int) -> float:
        while len(self._draws) <= i:
            self._draws.append((k, self._draw_round(k, self.sync)))
        return self._draws[i][1]

    # ================================================================== membership
    def _add_member(self, w: int, actor: Any, reopen: dict[str, Any] | None = None,
                    billed_from: float | None = None) -> None:
        super()._add_member(w, actor, reopen=reopen, billed_from=billed_from)
        self._mark("join")

    def _drop_member(self, w: int, reason: str) -> None:
        if w not in self.members:
            return
        self.runs.pop(w, None)
        was_member = w in self.gen_members
        super()._drop_member(w, reason)
        if was_member:
            # the slot may come back with a new process: it is no survivor of this generation
            self.gen_members = [m for m in self.gen_members if m != w]
            # recovery: from this loss to the survivors' next commit (a loss of every member is an
            # outage, not a recovery)
            self._kill_time = time.time() if self.gen_members else None
            self.plane.fail(self.gen, f"member {w} {reason}")
        self._mark(f"member {w} {reason}")

    def _handle_market(self, ev: Any) -> None:
        joining = ev.kind == "available" and ev.worker < self.provisioned and ev.worker not in self.members
        super()._handle_market(ev)
        if joining and ev.worker in self.members:
            # join latency: from the new worker's process being up (a standby actor, or a fresh one
            # once started) to the first step it contributes to
            self._join_started[ev.worker] = time.time()

    def _mark(self, why: str) -> None:
        if not self._dirty:
            self._why = why
        self._dirty = True

    def _act(self, policy: Any, d: Any) -> None:
        if isinstance(d, SwitchSync) and d.sync not in COLLECTIVE_SYNC_MODES:
            self.counters.decisions += 1
            self.log.emit("decision", policy=policy.name, decision=d.describe(), reason=d.reason, acted=False,
                          not_acted=f"{d.sync!r} is not a strategy of the collective data plane "
                                    f"({', '.join(COLLECTIVE_SYNC_MODES)})")
            return
        super()._act(policy, d)
        if self._plan_differs():
            self._mark(f"policy {policy.name}: {d.describe()}")

    def _plan_differs(self) -> bool:
        p = self._plan
        return p is None or (p.strategy, p.lr, tuple(p.members)) != (self.sync, float(self.lr), tuple(sorted(self.members)))

    # ================================================================== the loop
    def run(self) -> RunSummary:
        try:
            while not self._done():
                if not self.members:
                    if not self._idle():
                        self.status = "no-capacity"
                        break
                    continue
                if self._dirty or self._plan_differs():
                    self._regroup()
                    continue
                self._advance()
            self._stop_members()
            summary = self._finish()
            if self.status == "no-progress":
                from spotwise.control.progress import NoProgressError, progress_fix

                raise NoProgressError(self.stop_message or "no step committed",
                                      progress_fix(self.market, self.mean_step_s), summary)
            return summary
        finally:
            self._shutdown()

    def _target_step(self) -> int:
        it = self.spec.target.iterations
        caps = [NO_LIMIT if it is None else int(it)]
        if self.stop_after_steps is not None:
            caps.append(int(self.stop_after_steps))
        return min(caps)

    def _advance(self) -> None:
        """Lease the steps that end before the next market event, log them, then apply the event."""
        if self.step < self.plane.lease:  # a lease the members started with (a regroup's plan)
            self._pump(self.plane.lease)
            if self.provider.iteration_driven and not self._dirty:
                self._iteration_market()
            return
        if self._pending_ckpt is not None and self.step > self.last_ckpt_step:
            self._checkpoint(self._pending_ckpt)
        k = len(self.gen_members)
        t_ev = self.provider.peek_time()
        lease = self._lease_for(k)
        if lease > self.step:
            self.plane.set_lease(lease)
            self._pump(lease)
            if self.provider.iteration_driven and not self._dirty:
                self._iteration_market()
            return
        if t_ev is None or t_ev >= self.market.horizon_s:
            self.clock.advance_to(max(self.T, self.market.horizon_s))
            return
        self._market_event()

    def _lease_for(self, k: int) -> int:
        """The last step ``k`` members can commit before the market's next event (or the target)."""
        t_ev = self.provider.peek_time()
        limit = min(math.inf if t_ev is None else t_ev, self.market.horizon_s)
        target = self._target_step()
        lease, t, i = self.step, self._step_end, 0
        if self.provider.iteration_driven:
            if lease < target:
                lease += 1
        else:
            while lease < target and i < 100_000:
                d = self._next_draw(i, k)
                if t + d > limit:
                    break
                t += d
                lease += 1
                i += 1
        if self.stop_after_samples is not None:
            per_step = max(1, self.sync_strategy.samples_per_step(k, self.batch))
            lease = min(lease, self.step + 1 + max(0, (self.stop_after_samples - self.counters.samples) // per_step))
        return lease

    def _market_event(self) -> None:
        """Members wait at the lease: apply the next market event at its instant."""
        ev = self.provider.pop_event()
        batch = [ev]
        while (t := self.provider.peek_time()) is not None and t <= ev.t:
            batch.append(self.provider.pop_event())  # events of one instant are one membership change
        self.clock.advance_to(ev.t)
        self._emit_prices()
        hit = any(e.kind == "revoke" and e.worker in self.gen_members and e.worker in self.members for e in batch)
        if hit and self.step < self._target_step():
            # the revocation lands inside the next step: let the members start it, then kill
            self.plane.set_lease(self.step + 1)
            time.sleep(self._fault_rng.uniform(0.0, 0.003))
        for e in batch:
            self._handle_market(e)
        if self._dirty:
            self._draws.clear()
            self._step_end = self.T

    def _pump(self, until: int) -> None:
        """Log the members' records until step ``until``, a regroup is needed, or the job is done."""
        next_dead_check = 0.0
        while self.step < until and not self._dirty:
            if self._take_records():
                if self._done():
                    return
                continue
            why = self.plane.failed(self.gen)
            if why is not None:
                self._mark(f"generation {self.gen} failed: {why}")
                return
            now = time.monotonic()
            if now >= next_dead_check:
                next_dead_check = now + 0.02
                self._check_dead()
            time.sleep(POLL_S)

    def _check_dead(self) -> None:
        """Members whose loop ended on its own (a crashed process, a lost node) are lost."""
        import ray

        if not self.runs:
            return
        by_ref = {ref: w for w, ref in self.runs.items()}
        done, _ = ray.wait(list(by_ref), num_returns=len(by_ref), timeout=0)
        for ref in done:
            w = by_ref[ref]
            if self.runs.get(w) is ref:
                self._drop_member(w, "node-lost")

    # ================================================================== records and replicas
    def _gossip_records(self, recs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """AD-PSGD: every member sends its own records; a step is whole once all its members' are in."""
        out = [r for r in recs if "member" not in r]
        for r in recs:
            if "member" in r and int(r["step"]) > self.step:
                self._partial.setdefault(int(r["step"]), {})[int(r["member"])] = r
        for s in sorted(self._partial):
            parts = self._partial[s]
            if len(parts) < int(next(iter(parts.values()))["k"]):
                break
            out.append(self._combine(self._partial.pop(s)))
        return out

    @staticmethod
    def _combine(parts: dict[int, dict[str, Any]], partial: bool = False) -> dict[str, Any]:
        """One step's record from its members' records (loss weighted by their samples)."""
        rs = list(parts.values())
        n = [int(r.get("n", 0)) for r in rs]
        losses = [(float(r["loss"]), m) for r, m in zip(rs, n) if m and math.isfinite(float(r["loss"]))]
        tot = sum(m for _, m in losses)
        rec = dict(rs[0])
        rec.pop("member", None)
        rec.update(loss=sum(l * m for l, m in losses) / tot if tot else float("nan"),
                   wall=max(float(r["wall"]) for r in rs), first_of_gen=any(r.get("first_of_gen") for r in rs))
        for r in rs:
            if r.get("eval"):
                rec["eval"] = r["eval"]
            if r.get("timing"):
                rec["timing"] = r["timing"]
        if partial:
            rec["partial"] = sorted(parts)
        return rec

    def _take_records(self) -> bool:
        recs = self._gossip_records(self.plane.pop_records())
        for head, params in self.plane.pop_replicas():
            self._replicas[int(head["step"])] = (head, params)
        return self._log_records(recs)

    def _log_records(self, recs: list[dict[str, Any]]) -> bool:
        """Log the records of steps after the current one, in order; True if any was logged."""
        got = False
        for rec in sorted(recs, key=lambda r: r["step"]):
            s = int(rec["step"])
            if s <= self.step:
                continue  # sent again by a new leader
            while self.step < s - 1:  # steps whose records died with a leader: counted, loss unknown
                self._log_step({"step": self.step + 1, "k": rec["k"], "loss": float("nan"), "samples": 0,
                                "epoch": rec["epoch"], "pos": rec["pos"], "unreported": True,
                                "strategy": rec.get("strategy", self.sync)})
            # every record taken from the store is logged, whatever a policy decides meanwhile:
            # these steps are committed (a record dropped here would come back as a gap)
            self._log_step(rec)
            got = True
        return got

    def _log_step(self, rec: dict[str, Any]) -> None:
        """One committed step (the members' record): time, counters, event, evaluation, policies, checkpoint."""
        k = int(rec["k"])
        if self._draws and self._draws[0][0] == k:
            d = self._draws.pop(0)[1]
        else:  # not the membership the draws were made for: draw afresh
            self._draws.clear()
            d = self._draw_round(k, rec.get("strategy", self.sync))
        self._step_end = max(self._step_end, self.T) + d
        self._drain_market(self._step_end)  # notices inside the step (the lease ends before a revocation or join)
        self.clock.advance_to(self._step_end)
        self.step = int(rec["step"])
        samples = int(rec.get("samples", 0))
        self.counters.samples += samples
        self._cum_samples[self.step] = int(self.counters.samples)
        self.cursor.epoch, self.cursor.pos = int(rec["epoch"]), int(rec["pos"])
        loss = float(rec["loss"])
        duration = self.T - self.last_commit_T
        self.last_commit_T = self.T
        if math.isfinite(loss):
            self.last_loss = loss
            self.ema_loss = loss if self.ema_loss is None else 0.9 * self.ema_loss + 0.1 * loss
        per = self.local_steps if rec.get("strategy", self.sync) == "sma" else 1
        self.loss_history.append((self.step, self.T, loss, k, per))  # type: ignore[arg-type]
        if rec.get("first_of_gen") and self._join_started:
            for w in [w for w in self._join_started if w in self.gen_members]:
                self._join_ms.append(max(0.0, 1000.0 * (float(rec["wall"]) - self._join_started.pop(w))))
        recovery_ms = None
        if rec.get("first_of_gen") and self._kill_time is not None:
            recovery_ms = max(0.0, 1000.0 * (float(rec["wall"]) - self._kill_time))
            self.counters.recoveries_ms.append(recovery_ms)
            self._kill_time = None
        self._emit_prices()
        self.log.emit("step", step=self.step, loss=loss if math.isfinite(loss) else None, active=len(self.members),
                      lr=self.lr, sync=rec.get("strategy", self.sync), duration=duration, cost=self.cost_so_far(),
                      epoch=self.cursor.epoch, pos=self.cursor.pos, retries=0, contributions=k, lost=0, staleness=0,
                      recovery_ms=recovery_ms, samples=samples, gen=rec.get("gen"), commit_wall=rec.get("wall"),
                      **({"timing": rec["timing"]} if rec.get("timing") else {}),
                      **({"unreported": True} if rec.get("unreported") else {}))
        self.lost_since_commit = 0
        self._commits += 1
        ev = rec.get("eval")
        if ev:
            self.last_eval = {kk: float(v) for kk, v in ev.items()}
            name = self.state.metric_name
            self.log.emit("eval", step=self.step, loss=self.last_eval.get("loss"), metric_name=name,
                          metric=None if name is None else self.last_eval.get(name))
        self._adopt_replica_at(self.step)
        self._apply_policies()
        self._after_commit()

    def _adopt_replica_at(self, step: int) -> bool:
        """Take the members' replica of ``step`` as the controller's copy, if one arrived."""
        for s in [s for s in self._replicas if s < step]:
            del self._replicas[s]
        got = self._replicas.pop(step, None)
        if got is None:
            return False
        self.params = got[1]
        self.replica_step = step
        self._replica_pos = (int(got[0]["epoch"]), int(got[0]["pos"]))
        for s in [s for s in self._cum_samples if s < step]:
            del self._cum_samples[s]
        return True

    def _sync_replica(self) -> bool:
        """Make the controller's copy of the parameters that of the current step.

        Called while the members wait at the lease (every record logged): the leader answers the
        request with its replica of exactly this step.
        """
        if self.replica_step == self.step or self._adopt_replica_at(self.step):
            return True
        if not self.gen_members or self._dirty or self.plane.lease > self.step:
            return False
        self.plane.request_replica()
        deadline = time.monotonic() + REPLICA_WAIT_S
        while time.monotonic() < deadline:
            for head, params in self.plane.pop_replicas():
                self._replicas[int(head["step"])] = (head, params)
            if self._adopt_replica_at(self.step):
                return True
            if self.plane.failed(self.gen) is not None:
                return False
            time.sleep(POLL_S)
        return False

    # ================================================================== regroup
    def _regroup(self) -> None:
        """End the current generation and form the next (module docstring)."""
        t0 = time.perf_counter()
        t_alive = t0
        why = self._why
        self._dirty = False
        survivors = [w for w in self.gen_members if w in self.members]
        alive: dict[int, int] = {}
        if self.gen >= 0:
            self.plane.fail(self.gen, why)
            alive = self.plane.alive(self.gen, survivors, self.plane.timeout_s + 2.0)
            t_alive = time.perf_counter()
            for w in survivors:
                if w not in alive:
                    self._drop_member(w, "node-lost")  # frozen or dead: it did not answer
            self._dirty = False
            self._take_records()
        # the members holding a committed state: a joiner whose first generation never formed
        # reports -1 (it is running, waiting for a plan, but its replica is no committed one)
        holding = {w: s for w, s in alive.items() if s >= 0}
        if holding and self._plan is not None and self._plan.strategy == "adpsgd":
            # AD-PSGD: the steps up to the barrier the survivors go back to are committed now
            # (before membership is read: logging them may apply the market's notices)
            self._settle_partial(max(holding.values()))
        if not self.members:
            self.gen_members = []
            return
        source = -1
        if holding:
            top = max(holding.values())
            source = min(w for w, s in holding.items() if s == top)
        elif self.gen >= 0 and self.step > self.replica_step:
            self._rollback()
        members = sorted(self.members)
        self.gen += 1
        for w in members:
            if w not in alive:  # a joiner (or every member, after a total loss)
                self.runs[w] = self.plane.start(self.members[w], w, self.gen, self.faults.pop(w, None))
        init = None
        if source < 0:
            init = ({"step": self.step, "epoch": self.cursor.epoch, "pos": self.cursor.pos}, self.params)
        ck = self.spec.outputs.checkpoint_every or 0
        rep = self.replica_every if not ck else math.gcd(self.replica_every, ck)
        committed = max(holding.values()) if holding else self.step
        k_old = len(self._plan.members) if self._plan is not None else len(members)
        self._step_end = max(self._step_end, self.T)
        # steps the old generation committed whose records are still to come, then the new
        # generation's: the members start on the next lease at once (no round trip after forming)
        old_sync = self._plan.strategy if self._plan is not None else self.sync
        self._draws = [(k_old, self._draw_round(k_old, old_sync)) for _ in range(max(0, committed - self.step))]
        lease = max(committed, self._lease_for(len(members)))
        transfer = source < 0 or any(w not in holding or holding[w] != committed for w in members)
        gossip = self._plan is not None and self._plan.strategy == "adpsgd" and source >= 0
        plan = Plan(gen=self.gen, members=tuple(members), source=source, strategy=self.sync,
                    local_steps=self.local_steps, lr=float(self.lr), batch=self.batch, logged=self.step,
                    eval_every=int(self.spec.workload.eval_every), replica_every=rep, max_step=self._target_step(),
                    lease=lease, transfer=transfer, reconcile="snapshot" if gossip else "roll-forward",
                    rollback_to=committed if gossip else 0)
        self.plane.reset_lease(lease)
        self.plane.announce(plan, init)
        t_announce = time.perf_counter()
        if not self.plane.formed(self.gen, len(members), self.plane.timeout_s + 2.0):
            self._mark(f"generation {self.gen} did not form")
        t_formed = time.perf_counter()
        self._plan = plan
        self.gen_members = members
        self.regroups += 1
        ms = 1000.0 * (time.perf_counter() - t0)
        self._regroup_ms.append(ms)
        self.log.emit("regroup", gen=self.gen, members=members, source=source, survivors=sorted(holding),
                      joiners=[w for w in members if w not in holding], committed=committed,
                      reason=why, ms=ms, sync=self.sync,
                      alive_ms=1000.0 * (t_alive - t0) if self.gen > 0 and alive else None,
                      form_ms=1000.0 * (t_formed - t_announce))

    def _settle_partial(self, committed: int) -> None:
        """AD-PSGD regroup: the steps up to the barrier the survivors go back to are committed (every
        member computed them), with the records that arrived; the steps after it are redone."""
        self._take_records()
        settled = [self._combine(parts, partial=True) for s, parts in sorted(self._partial.items()) if s <= committed]
        self._partial.clear()
        dirty, self._dirty = self._dirty, False  # log them all, whatever the policies say meanwhile
        self._log_records(settled)
        self._dirty = self._dirty or dirty

    def _rollback(self) -> None:
        """Every member was lost at once: continue from the controller's newest replica (logged)."""
        lost = self.step - self.replica_step
        samples = self._cum_samples.get(self.replica_step)
        self.log.emit("rollback", from_step=self.step, to_step=self.replica_step, lost_steps=lost,
                      reason="every member was lost at once; the steps after the newest replica are redone")
        self.rolled_back_steps += lost
        self._partial.clear()
        if samples is not None:
            self.counters.samples = samples
        self.step = self.replica_step
        self.loss_history[:] = [r for r in self.loss_history if r[0] <= self.step]
        self.cursor.epoch, self.cursor.pos = self._replica_pos

    # ================================================================== checkpoints and the end
    def _checkpoint(self, why: str) -> None:
        """A checkpoint of the current step, from the members' replica of it; if none is here yet (a
        notice or a policy between two leases), it is taken at the next lease."""
        if not self._sync_replica():
            self._pending_ckpt = why
            return
        self._pending_ckpt = None
        self.sampler = EpochSampler.from_state(self.cursor.sampler_state())
        super()._checkpoint(why)

    def _stop_members(self) -> None:
        """End the last generation: the leader sends its last records and replica, and every member leaves."""
        if self.gen < 0 or not self.gen_members:
            return
        survivors = [w for w in self.gen_members if w in self.members]
        self.plane.fail(self.gen, "stop")
        alive = self.plane.alive(self.gen, survivors, self.plane.timeout_s + 2.0)
        # only members holding a committed state count (see _regroup); without one there is
        # nothing to collect: the shutdown ends the processes
        alive = {w: s for w, s in alive.items() if s >= 0}
        if not alive:
            return
        top = max(alive.values())
        source = min(w for w, s in alive.items() if s == top)
        gossip = self._plan is not None and self._plan.strategy == "adpsgd"
        if gossip:
            self._settle_partial(top)
        self.gen += 1
        plan = Plan(gen=self.gen, members=tuple(sorted(alive)), source=source, strategy=self.sync,
                    local_steps=self.local_steps, lr=float(self.lr), batch=self.batch, logged=self.step, stop=True,
                    reconcile="snapshot" if gossip else "roll-forward", rollback_to=top if gossip else 0)
        self.plane.announce(plan)
        self.gen_members = []
        deadline = time.monotonic() + REPLICA_WAIT_S
        while time.monotonic() < deadline:
            self._take_records()
            if self.step >= top and (self._adopt_replica_at(self.step) or self.replica_step == self.step):
                break
            time.sleep(POLL_S)

    def _finish(self) -> RunSummary:
        self.sampler = EpochSampler.from_state(self.cursor.sampler_state())
        summary = super()._finish()
        return summary

    def _shutdown(self) -> None:
        try:
            super()._shutdown()
        finally:
            self.runs.clear()
            self.plane.close()

    def _summary_extra(self) -> dict[str, Any]:
        j = self._join_ms
        return {"data_plane": "collective", "regroups": self.regroups, "rolled_back_steps": self.rolled_back_steps,
                "regroup_ms_median": float(np.median(self._regroup_ms)) if self._regroup_ms else None,
                # capacity available -> the first step the joiner contributed to (wall, members' clock)
                "join_ms": {"count": len(j), "median": float(np.median(j)) if j else None,
                            "p99": float(np.percentile(j, 99)) if j else None, "max": max(j) if j else None}}


def controller_class(spec: JobSpec) -> type[JobController]:
    """The controller of ``spec``'s data plane: :class:`CollectiveController` or :class:`JobController`."""
    return CollectiveController if spec.cluster.data_plane == "collective" else JobController
