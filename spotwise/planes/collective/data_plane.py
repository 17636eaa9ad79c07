"""The collective data plane (``cluster.data_plane: collective``; Spotnik, ``papers/001_30a454edd897cf47.txt``).

:class:`CollectivePlane` is the :class:`~spotwise.control.dataplane.DataPlane` whose members all-reduce among
themselves (:mod:`spotwise.planes.collective.member`): the parameters live in the members' replicas, no step
passes through the controller, which keeps everything else (market, membership, ledger, event log, policies,
checkpoints, summary). What a step is here:

* **Lease.** On the emulated provider (a virtual clock) the controller draws each step's virtual time as the
  strategy's round (S-SGD: the slowest of ``k`` mini-batches plus ``Delta``, paper 000 eq. 14; S-MA: the slowest
  member's ``H`` mini-batches plus ``Delta``; AD-PSGD: per barrier window, the slowest member's sum of its
  pairs' slower mini-batches) and lets the members commit, at their own speed, every step that ends before the
  market's next event (the *lease*). At the lease the event is applied at its virtual instant. A revocation of a
  member raises the lease by one, the revoked member contributing nothing to that step, and kills its process at
  once, while its peers compute or wait inside the all-reduce: the step never commits with it, whatever the race,
  so an emulated run is the same run on every repetition and across a resume (issue 30 item 8).
* **Regroup** (Sec. 3.2, reconcile / accept / restart). Any change of membership, a failure a member flags (a
  dead or frozen peer), and a change of strategy or learning rate (policies) end the generation: the controller
  flags it failed, collects the survivors' last committed steps (a slow one is waited for; one gone or silent is
  lost and killed: :mod:`~.heartbeat`), announces the next generation with a survivor of the highest step as its source (roll forward: see :mod:`spotwise.planes.collective.member`; after AD-PSGD, a roll-back to
  the last barrier and an average of the survivors' replicas) and the joiners started, and the members rebuild
  the group in place (same processes, replicas in memory) and take the source's state by broadcast. Recovery
  (kill -> the first step the new generation commits) is measured on the members' clock.
* **Commits.** Steps are logged from the leader's records, which it sends only once every member has committed
  the step (AD-PSGD: from every member's records, sent at its barriers, once all of a step's are in); their
  virtual time is the drawn round time. Policies are consulted after every logged step; a decision that changes
  the members' work (SwitchSync, SetLearningRate, Resize) takes effect at the next regroup, atomically on every
  member. Leased steps that bring no record for long fail the generation (:class:`StallWatch`).
* **Replicas and checkpoints.** The leader sends its replica every ``cluster.replica_every`` steps, every
  ``outputs.checkpoint_every`` steps, when asked (a revocation notice), and at the end; checkpoints hold the
  replica of exactly their step. A loss of *every* member at once rolls the job back to the newest replica: the
  steps after it are logged as lost in a ``rollback`` event (``extra.rolled_back_steps``) and redone on the same
  samples. With a notice (every cloud gives one) the replica is taken at the notice; ``replica_every: 1`` makes
  any loss impossible at the cost of a parameter transfer per step.
"""

from __future__ import annotations

import dataclasses
import math
import random
import time
from typing import Any


from spotwise.config import COLLECTIVE_SYNC_MODES, JobSpec
from spotwise.control.accounting import AccountedJob, Accounting, Billing
from spotwise.control.dataplane import PlaneHost
from spotwise.control.carried import refuse
from spotwise.control.checkpoint import refuse_foreign_checkpoint
from spotwise.control.sampler import EpochSampler
from spotwise.control.sync import SyncStrategy, make_sync
from spotwise.market.preemption import MarketEvent
from spotwise.planes.collective.heartbeat import ANSWER_MOST_S
from spotwise.planes.collective.plan import NO_LIMIT, Plan, rank_order
from spotwise.planes.collective.plane import CollectiveCompute, PlaneControl, ended_runs
from spotwise.planes.collective.totals import CollectiveTotals
from spotwise.planes.collective.state_copy import POLL_MAX_S, POLL_S, REPLICA_WAIT_S, StateCopy
from spotwise.planes.collective.records import GossipRecords, StallWatch, split_halts, step_fields, unreported_records
from spotwise.planes.collective.replica import DataCursor
from spotwise.planes.collective.script_end import end_script
from spotwise.planes.collective.round_time import draw_round, restored_draws, steps_before
from spotwise.planes.ps.compute import Compute
from spotwise.policies.base import Decision, Policy, SwitchSync


class CollectivePlane:
    """The collective data plane of one job; see the module docstring.

    ``faults`` (a test hook): member slot -> fault for its first start (``{"step": s, "action":
    "exit"|"stop"|"sleep"|"pause", "seconds": t}``, :meth:`CollectiveMember._inject`).  ``store_host``:
    where the rendezvous store listens (only there): ``127.0.0.1`` on one machine, the head's cluster
    address on a Ray cluster.  ``heartbeat_s``: seconds of heartbeat silence after which a member is lost.
    """

    name = "collective"

    def __init__(self, spec: JobSpec, faults: dict[int, dict[str, Any]] | None = None,
                 store_host: str = "127.0.0.1", heartbeat_s: float | None = None) -> None:
        cl = spec.cluster
        if cl.data_plane != "collective":
            raise ValueError("the collective plane runs cluster.data_plane: collective specs")
        self._job: PlaneHost | None = None
        self.ctl = PlaneControl(host=store_host, timeout_s=float(cl.group_timeout_s), heartbeat_s=heartbeat_s)
        self.local_steps = int(cl.local_steps)
        self.replica_every = int(cl.replica_every)
        #: member slot -> the ObjectRef of its member loop (done when the member leaves or dies)
        self.runs: dict[int, Any] = {}
        self.faults = dict(faults or {})
        self.gen = -1
        self.gen_members: list[int] = []
        self._plan: Plan | None = None
        self._held: str | None = None  # the strategy of the last generation that formed: the state members hold
        self._dirty = True
        self._why = "start"
        #: the drawn round times of the next steps (a step starts at the clock: the end of the last
        #: logged step, or a later market event's instant -- no cursor of its own to fall behind)
        self._draws: list[tuple[int, float]] = []
        self.copy = StateCopy(self.ctl, lambda: self.job)  # the controller's copy of the state (issue 28)
        self.replicas = self.copy.replicas
        self._kill_time: float | None = None
        self._pending_ckpt: str | None = None  # asked for between two leases (a notice, a policy): taken at the next
        #: join latency: when each joining slot's process was up (wall, epoch seconds), and the measured ms
        self._join_started: dict[int, float] = {}
        #: the run's totals, carried across sessions: per-phase timing of the committed steps (issue 40 item 5),
        #: join and regroup times, regroups, rolled-back steps, a script's metrics
        self.totals = CollectiveTotals()
        self._gossip, self._stall = GossipRecords(), StallWatch()  # AD-PSGD's partial steps; progress
        self._fault_rng = random.Random(int(spec.seed))
        self.cursor: DataCursor | None = None
        self._nonfinite: dict[str, Any] | None = None  # issue 28: the first record of a diverged step
        self._script_over: dict[str, Any] | None = None  # issue 41: a member's script ended / raised
        self._per_member = 0  # the most samples a member committed in a step (a script's accumulation: its A * b)
        self._schedule: dict[str, Any] | None = None  # issue 28: the lr schedule the members use

    @property
    def job(self) -> PlaneHost:
        if self._job is None:
            raise RuntimeError("the plane is not attached to a job")
        return self._job

    @property
    def _cursor(self) -> DataCursor:
        if self.cursor is None:
            raise RuntimeError("the plane has not started")
        return self.cursor

    # ================================================================== the DataPlane interface
    def default_compute(self, spec: JobSpec, standby: int) -> Compute:
        return CollectiveCompute.for_spec(spec, standby)  # on the members' device, with their GPUs (issue 20 item 4)

    def attach(self, job: PlaneHost) -> None:
        self._job = job

    def make_accounting(self, job: AccountedJob) -> Billing:
        return Accounting(job)

    def log_meta(self) -> dict[str, Any]:
        return {}

    def checkpoint_state(self) -> dict[str, Any]:
        # the round times drawn ahead (the duration generator is past them): a resume uses them as the
        # uninterrupted run does, so both commit the same steps at the same instants (issue 30 item 8)
        # and what the summary adds up over the run's sessions (spotwise.control.carried; issue 54 item 5)
        return {"round_draws": [[k, d] for k, d in self._draws],
                "plane_carried": self.totals.state()}

    def restore_state(self, state: dict[str, Any]) -> None:
        refuse_foreign_checkpoint(state, "collective")
        if "round_draws" not in state:  # a collective run's checkpoint always holds them (empty: none drawn ahead)
            raise refuse("round_draws", "<absent>", "the round times drawn ahead (a list)")
        self._draws = restored_draws(state["round_draws"])
        self.totals = CollectiveTotals.from_state(state)

    def begin(self) -> None:
        return None

    def started(self) -> None:
        """Read the fresh or restored job: the data cursor continues its sampler's position."""
        job = self.job
        s = job.sampler.state()
        if s["pending"]:
            raise ValueError("a collective run cannot resume a checkpoint with pending sampler blocks")
        self.cursor = DataCursor(job.state.n_train, int(job.spec.seed), int(s["epoch"]), int(s["cursor"]),
                                 bool(s.get("ordered", False)))
        self.replicas.reset(job.step, (self._cursor.epoch, self._cursor.pos), int(job.counters.samples))
        self._schedule = dataclasses.asdict(job.recipe.schedule) if job.recipe.schedule is not None else None

    def sync_strategy(self, sync: str, sync_n: int | None) -> SyncStrategy:
        return make_sync(sync, self.local_steps if sync == "sma" else sync_n)

    def before_tick(self) -> None:
        return None

    def tick(self) -> None:
        if self._dirty or self._plan_differs():
            self._regroup()
        else:
            self._advance()

    def on_join(self, w: int) -> None:
        self._mark("join")

    def on_leave(self, w: int, reason: str) -> None:
        self.runs.pop(w, None)
        self.ctl.forget(w)
        if w in self.gen_members:
            # the slot may come back with a new process: it is no survivor of this generation
            self.gen_members = [m for m in self.gen_members if m != w]
            # recovery: from this loss to the survivors' next commit (a loss of every member is an
            # outage, not a recovery)
            self._kill_time = time.time() if self.gen_members else None
            self.ctl.fail(self.gen, f"member {w} {reason}")
        self._mark(f"member {w} {reason}")

    def on_market_event(self, ev: MarketEvent, joined: bool) -> None:
        if joined:
            # join latency: from the new worker's process being up (a standby actor, or a fresh one
            # once started) to the first step it contributes to
            self._join_started[ev.worker] = time.time()

    def refuse(self, d: Decision) -> str | None:
        if isinstance(d, SwitchSync) and d.sync not in COLLECTIVE_SYNC_MODES:
            return f"{d.sync!r} is not a strategy of the collective data plane ({', '.join(COLLECTIVE_SYNC_MODES)})"
        return None

    def after_decision(self, policy: Policy, d: Decision) -> None:
        """A decision that changes the members' work (strategy, learning rate, membership) takes
        effect at the next regroup, atomically on every member."""
        if self._plan_differs():
            self._mark(f"policy {policy.name}: {d.describe()}")

    def ready_for_checkpoint(self, why: str) -> bool:
        """A checkpoint of the current step needs the members' replica of it; if none is here yet
        (a notice or a policy between two leases), it is taken at the next lease."""
        if not self._sync_replica():
            self._pending_ckpt = why
            return False
        self._pending_ckpt = None
        self.job.sampler = EpochSampler.from_state(self._cursor.sampler_state())
        return True

    def before_finish(self) -> None:
        self.job.sampler = EpochSampler.from_state(self._cursor.sampler_state())

    def shutdown(self) -> None:
        self.runs.clear()
        self.ctl.close()

    def summary_extra(self) -> dict[str, Any]:
        return {"data_plane": "collective", **self.totals.summary()}

    # ================================================================== round time
    def _draw_round(self, k: int, strategy: str) -> float:
        """Virtual seconds of one committed step with ``k`` members (:func:`draw_round`)."""
        job = self.job
        return draw_round(job.time_law, job.dur_rng, k, strategy, self.local_steps, job.commit_overhead_s)

    def _next_draw(self, i: int, k: int) -> float:
        while len(self._draws) <= i:
            self._draws.append((k, self._draw_round(k, self.job.sync)))
        return self._draws[i][1]

    def _mark(self, why: str) -> None:
        if not self._dirty:
            self._why = why
        self._dirty = True

    def _plan_differs(self) -> bool:
        job = self.job
        p = self._plan
        return p is None or (p.strategy, p.lr, set(p.members)) != (job.sync, float(job.lr), set(job.members))

    # ================================================================== leases
    def _target_step(self) -> int:
        it, stop = self.job.spec.target.iterations, self.job.stop_after_steps
        return min(NO_LIMIT if it is None else int(it), NO_LIMIT if stop is None else int(stop))

    def _advance(self) -> None:
        """Lease the steps that end before the next market event, log them, then apply the event."""
        job = self.job
        if job.step < self.ctl.lease:  # a lease the members started with (a regroup's plan)
            self._pump(self.ctl.lease)
            if job.provider.iteration_driven and not self._dirty:
                job.iteration_market()
            return
        if self._pending_ckpt is not None and job.step > job.checkpointer.last_step:
            self.job.checkpoint(self._pending_ckpt)
        k = len(self.gen_members)
        t_ev = job.provider.peek_time()
        lease = self._lease_for(k)
        if lease > job.step:
            self.ctl.set_lease(lease)
            self._pump(lease)
            if job.provider.iteration_driven and not self._dirty:
                job.iteration_market()
            return
        if t_ev is None or t_ev >= job.market.horizon_s:
            job.clock.advance_to(max(job.T, job.market.horizon_s))
            return
        self._market_event()

    def _lease_for(self, k: int) -> int:
        """The last step ``k`` members can commit before the market's next event (or the target)."""
        job = self.job
        t_ev = job.provider.peek_time()
        limit = min(math.inf if t_ev is None else t_ev, job.market.horizon_s)
        target = self._target_step()
        if job.provider.iteration_driven:
            lease = job.step + (1 if job.step < target else 0)
        else:
            # from the clock: after a market event that changed nobody (a notice) the next step starts at
            # the event's instant, where it is logged (issue 54 item 5: a lease counted from the last step's
            # end let that step run past the next revocation, which then applied one step late)
            lease = job.step + steps_before(job.T, limit, target - job.step, lambda i: self._next_draw(i, k))
        if job.stop_after_samples is not None:
            per_step = max(1, job.sync_strategy.samples_per_step(k, job.batch), k * self._per_member)
            left = job.stop_after_samples - job.counters.samples  # the steps that commit them at this width, no more
            lease = min(lease, job.step + max(0, -(-left // per_step)))
        return lease

    def _market_event(self) -> None:
        """Members wait at the lease: apply the next market event at its instant."""
        job = self.job
        batch = job.provider.peek_instant()  # events of one instant are one membership change
        job.clock.advance_to(batch[0].t)
        job.accounting.emit_prices()
        hit = tuple(sorted({e.worker for e in batch if e.kind == "revoke" and e.worker in self.gen_members
                            and e.worker in job.members}))
        if hit and job.step < self._target_step():
            # the revocation lands inside the next step: the members start it, the revoked ones without
            # contributing (so it never commits with them, whatever the race with their kill), then kill
            self.ctl.set_lease(job.step + 1, hit)
            time.sleep(self._fault_rng.uniform(0.0, 0.003))
        for _ in batch:  # popped as applied: a checkpoint between two (a notice's) holds exactly those before it
            if job.provider.peek_time() == batch[0].t:
                job.handle_market(job.provider.pop_event())
        if self._dirty:
            self._draws.clear()

    def _pump(self, until: int) -> None:
        """Log the members' records until step ``until``, a regroup is needed, or the job is done."""
        job = self.job
        next_dead_check, pause = 0.0, POLL_S
        self._stall.start()  # the members start on the lease now
        while job.step < until and not self._dirty:
            if self._take_records():
                self._stall.progressed()
                pause = POLL_S
                if job.done():
                    return
                continue
            why = self.ctl.failed(self.gen)
            if why is not None:
                self._mark(f"generation {self.gen} failed: {why}")
                return
            now = time.monotonic()
            if now >= next_dead_check:
                next_dead_check = now + 0.02
                self._check_membership()
                idle = self._stall.stalled(self.ctl.timeout_s, lambda: self.ctl.working(self.gen_members))
                if idle is not None:
                    self._mark(f"generation {self.gen} stalled: no step record and no member at work for "
                               f"{idle:.0f} s (steps {job.step + 1}..{until} leased)")
                    return
            time.sleep(pause)
            pause = min(POLL_MAX_S, pause * 1.5)  # no record: look less often (a big model's step is seconds)

    def _check_membership(self) -> None:
        """Members whose loop ended on its own (a crashed process, a lost node) or whose heartbeat is
        silent (frozen, vanished) are lost; on a cluster, requested members whose node has arrived
        join (both end the generation)."""
        for w in ended_runs(self.runs) + self.ctl.lost_due(self.gen_members):
            self.job.drop_member(w, "node-lost")
        if self.job.provider.requests_capacity:
            self.job.poll_joins()

    # ================================================================== records and replicas
    def _take_records(self) -> bool:
        raw, nonfinite, over = split_halts(self.ctl.pop_records())
        self._nonfinite = self._nonfinite or nonfinite
        self._script_over = self._script_over or over
        recs = self._gossip.whole(raw, self.job.step, self.gen)
        self.copy.receive()
        logged = self._log_records(recs)
        if self._nonfinite is not None and self.job.step >= int(self._nonfinite["step"]) - 1:
            self.copy.stop_diverged(str(self._nonfinite["nonfinite"]), self._cursor.sampler_state())
        if self._script_over is not None and self.job.step >= int(self._script_over["step"]) - 1:
            rec, self._script_over = self._script_over, None
            end_script(self.job, self.copy, self._cursor, rec)
        return logged

    def _log_records(self, recs: list[dict[str, Any]]) -> bool:
        """Log the records of steps after the current one, in order; True if any was logged."""
        job = self.job
        got = False
        for rec in sorted(recs, key=lambda r: r["step"]):
            s = int(rec["step"])
            if s <= job.step:
                continue  # sent again by a new leader
            for lost in unreported_records(rec, job.step, self._cursor, job.sync):
                self._log_step(lost)
            # every record taken from the store is logged, whatever a policy decides meanwhile:
            # these steps are committed (a record dropped here would come back as a gap)
            self._log_step(rec)
            got = True
        return got

    def _log_step(self, rec: dict[str, Any]) -> None:
        """One committed step (the members' record): time, counters, event, evaluation, policies, checkpoint."""
        job = self.job
        k = int(rec["k"])
        if self._draws and self._draws[0][0] == k:
            d = self._draws.pop(0)[1]
        else:  # not the membership the draws were made for: draw afresh
            self._draws.clear()
            d = self._draw_round(k, rec.get("strategy", job.sync))
        end = job.T + d  # the step started at the clock (the last step's end or a later event's instant)
        job.drain_market(end)  # notices inside the step (the lease ends before a revocation or join)
        job.clock.advance_to(end)
        job.step = int(rec["step"])
        samples = int(rec.get("samples", 0))
        job.accounting.member_step_samples = self._per_member = max(self._per_member, samples // max(1, k))
        lr = job.recipe.lr_at(job.lr, job.counters.samples)  # what the members used: the schedule at the samples before this step
        if rec.get("lr") is not None:  # a script's: its optimizer's own rate (param_groups at the commit)
            self.totals.stepped_lr = lr = float(rec["lr"])  # (job.lr stays: a change of it regroups)
        job.counters.samples += samples
        self.replicas.samples[job.step] = int(job.counters.samples)
        self._cursor.epoch, self._cursor.pos = int(rec["epoch"]), int(rec["pos"])
        loss = float(rec["loss"])
        duration = job.T - job.last_commit_T
        job.last_commit_T = job.T
        if math.isfinite(loss):
            job.last_loss = loss
            job.ema_loss = loss if job.ema_loss is None else 0.9 * job.ema_loss + 0.1 * loss
        per = self.local_steps if rec.get("strategy", job.sync) == "sma" else 1
        job.loss_history.append((job.step, job.T, loss, k, per))  # type: ignore[arg-type]
        if rec.get("first_of_gen") and self._join_started:
            for w in [w for w in self._join_started if w in self.gen_members]:
                self.totals.join_ms.append(max(0.0, 1000.0 * (float(rec["wall"]) - self._join_started.pop(w))))
        recovery_ms = None
        if rec.get("first_of_gen") and self._kill_time is not None:
            recovery_ms = max(0.0, 1000.0 * (float(rec["wall"]) - self._kill_time))
            job.counters.recoveries_ms.append(recovery_ms)
            self._kill_time = None
        job.accounting.emit_prices()
        job.log.emit("step", step=job.step, loss=loss if math.isfinite(loss) else None, active=len(job.members),
                      lr=lr, sync=rec.get("strategy", job.sync), duration=duration, cost=job.cost_so_far(),
                      epoch=self._cursor.epoch, pos=self._cursor.pos, retries=0, contributions=k, lost=0, staleness=0,
                      recovery_ms=recovery_ms, samples=samples, gen=rec.get("gen"), commit_wall=rec.get("wall"),
                      **step_fields(rec))
        self.totals.phases.add(None if rec.get("first_of_gen") else rec.get("phases"), samples)  # first: recovery_ms
        if rec.get("metrics"):  # what a training script logged for this step (issue 41 item 6)
            job.log.emit("metrics", step=job.step, values=dict(rec["metrics"]))
            self.totals.metrics.update(rec["metrics"])
        job.committed()
        ev = rec.get("eval")
        if ev:
            job.last_eval = {kk: float(v) for kk, v in ev.items()}
            name = job.state.metric_name
            job.log.emit("eval", step=job.step, loss=job.last_eval.get("loss"), metric_name=name,
                          metric=None if name is None else job.last_eval.get(name))
        self.copy.adopt_at(job.step)
        job.apply_policies()
        job.after_commit()

    def _sync_replica(self) -> bool:
        """Make the controller's copy of the state that of the current step.

        Called while the members wait at the lease (every record logged): the leader answers the
        request with its replica of exactly this step.
        """
        job = self.job
        if self.replicas.step == job.step or self.copy.adopt_at(job.step):
            return True
        if not self.gen_members or self._dirty or self.ctl.lease > job.step:
            return False
        return self.copy.fetch(job.step, lambda: self.ctl.failed(self.gen) is not None)

    # ================================================================== regroup
    def _regroup(self) -> None:
        """End the current generation and form the next (module docstring)."""
        job = self.job
        t0 = time.perf_counter()
        t_alive = t0
        why = self._why
        self._dirty = False
        survivors = [w for w in self.gen_members if w in job.members]
        alive: dict[int, int] = {}
        if self.gen >= 0:
            self.ctl.fail(self.gen, why)
            # a member that is gone (its loop's ObjectRef ended) or silent is not waited for; one that beats is
            alive = self.ctl.alive(self.gen, survivors, ANSWER_MOST_S, gone=lambda: set(ended_runs(self.runs)))
            t_alive = time.perf_counter()
            for w in survivors:
                if w not in alive:
                    job.drop_member(w, "node-lost")  # dead, frozen or vanished: no answer, no heartbeat
            self._dirty = False
            self._take_records()
        # the members holding a committed state: a joiner whose first generation never formed
        # reports -1 (it is running, waiting for a plan, but its replica is no committed one)
        holding = {w: s for w, s in alive.items() if s >= 0}
        if holding and self._held == "adpsgd":
            # AD-PSGD: the steps up to the barrier the survivors go back to are committed now
            # (before membership is read: logging them may apply the market's notices)
            self._settle_partial(max(holding.values()))
        if not job.members:
            self.gen_members = []
            return
        source = -1
        if holding:
            top = max(holding.values())
            source = min(w for w, s in holding.items() if s == top)
        elif self.gen >= 0 and job.step > self.replicas.step:
            self._rollback()
        members = rank_order(self.gen_members, alive, job.members)  # the leader keeps rank 0 while it lives
        start = not holding and job.step == 0  # nothing is committed: these members start the job
        if start and job.spec.workload.script is not None:
            source = members[0]  # a script's start, as DDP's: every member takes rank 0's state
        self.gen += 1
        for w in members:
            if w not in alive:  # a joiner (or every member, after a total loss)
                self.runs[w] = self.ctl.start(job.members[w], w, self.gen, self.faults.pop(w, None))
        ck = job.spec.outputs.checkpoint_every or 0
        rep = self.replica_every if not ck else math.gcd(self.replica_every, ck)
        committed = max(holding.values()) if holding else job.step
        k_old = len(self._plan.members) if self._plan is not None else len(members)
        # steps the old generation committed whose records are still to come, then the new
        # generation's: the members start on the next lease at once (no round trip after forming)
        old_sync = self._held or job.sync
        if self._plan is not None:  # (the first generation of a resumed session keeps the restored draws)
            self._draws = [(k_old, self._draw_round(k_old, old_sync)) for _ in range(max(0, committed - job.step))]
        lease = max(committed, self._lease_for(len(members)))
        transfer = source < 0 or any(w not in holding or holding[w] != committed for w in members)
        gossip = self._held == "adpsgd" and source >= 0
        plan = Plan(gen=self.gen, members=tuple(members), source=source, strategy=job.sync,
                    local_steps=self.local_steps, lr=float(job.lr), batch=job.batch, logged=job.step,
                    eval_every=int(job.spec.workload.eval_every), replica_every=rep, checkpoint_every=ck,
                    replica_budget=float(job.spec.cluster.replica_budget or 0.0), max_step=self._target_step(),
                    lease=lease, transfer=transfer, reconcile="snapshot" if gossip else "roll-forward",
                    rollback_to=committed if gossip else 0, schedule=self._schedule, start=start,
                    planned=int(job.spec.cluster.workers))
        self.ctl.reset_lease(lease)
        if source < 0:  # no member holds the state: the controller's copy, handed over by actor calls
            self.copy.hand_over(members, self.gen, self._cursor.epoch, self._cursor.pos)
        self.ctl.announce(plan)
        t_announce = time.perf_counter()
        if self.ctl.formed(self.gen, members, ANSWER_MOST_S, gone=lambda: set(ended_runs(self.runs))):
            self._held = plan.strategy  # the members now hold this strategy's state (reconciled)
        else:  # they still hold the last formed generation's (AD-PSGD's: replicas past its barrier)
            why_not = self.ctl.failed(self.gen)
            self._mark(f"generation {self.gen} did not form" + (f" ({why_not})" if why_not else ""))
        t_formed = time.perf_counter()
        self._plan = plan
        self.gen_members = members
        self.totals.regroups += 1
        ms = 1000.0 * (time.perf_counter() - t0)
        self.totals.regroup_ms.append(ms)
        job.log.emit("regroup", gen=self.gen, members=members, source=source, survivors=sorted(holding),
                      joiners=[w for w in members if w not in holding], committed=committed,
                      reason=why, ms=ms, sync=job.sync,
                      alive_ms=1000.0 * (t_alive - t0) if self.gen > 0 and alive else None,
                      form_ms=1000.0 * (t_formed - t_announce))

    def _settle_partial(self, committed: int) -> None:
        """AD-PSGD regroup: the steps up to the barrier the survivors go back to are committed (every
        member computed them), with the records that arrived; the steps after it are redone."""
        self._take_records()
        settled = self._gossip.settle(committed)
        dirty, self._dirty = self._dirty, False  # log them all, whatever the policies say meanwhile
        self._log_records(settled)
        self._dirty = self._dirty or dirty

    def _rollback(self) -> None:
        """Every member was lost at once: continue from the controller's newest replica (logged)."""
        job = self.job
        lost = job.step - self.replicas.step
        samples = self.replicas.samples.get(self.replicas.step)
        job.log.emit("rollback", from_step=job.step, to_step=self.replicas.step, lost_steps=lost,
                      reason="every member was lost at once; the steps after the newest replica are redone")
        self.totals.rolled_back_steps += lost
        self._gossip.clear()
        if samples is not None:
            job.counters.samples = samples
        job.step = self.replicas.step
        job.loss_history[:] = [r for r in job.loss_history if r[0] <= job.step]
        self._cursor.epoch, self._cursor.pos = self.replicas.pos

    # ================================================================== the end
    def stop(self) -> None:
        """End the last generation: the leader sends its last records and replica, and every member leaves."""
        job = self.job
        if self.gen < 0 or not self.gen_members:
            return
        survivors = [w for w in self.gen_members if w in job.members]
        self.ctl.fail(self.gen, "stop")
        alive = self.ctl.alive(self.gen, survivors, ANSWER_MOST_S, gone=lambda: set(ended_runs(self.runs)))
        # only members holding a committed state count (see _regroup); without one there is
        # nothing to collect: the shutdown ends the processes
        alive = {w: s for w, s in alive.items() if s >= 0}
        if not alive:
            return
        top = max(alive.values())
        source = min(w for w, s in alive.items() if s == top)
        gossip = self._held == "adpsgd"
        if gossip:
            self._settle_partial(top)
        self.gen += 1
        order = tuple(rank_order(self.gen_members, alive, alive))
        plan = Plan(gen=self.gen, members=order, source=source, strategy=job.sync,
                    local_steps=self.local_steps, lr=float(job.lr), batch=job.batch, logged=job.step, stop=True,
                    reconcile="snapshot" if gossip else "roll-forward", rollback_to=top if gossip else 0,
                    transfer=False)  # the leader (the source) sends the final replica; nobody trains after
        self.ctl.announce(plan)
        self.gen_members = []
        deadline = time.monotonic() + REPLICA_WAIT_S
        while time.monotonic() < deadline:
            self._take_records()
            if job.step >= top and (self.copy.adopt_at(job.step) or self.replicas.step == job.step):
                break
            time.sleep(POLL_S)
