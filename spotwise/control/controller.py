"""The job controller: the on-demand node that owns the model and commits steps atomically.

:class:`JobController` runs in the driver process (it stands for the on-demand parameter server of
``papers/000_3c734f3ffedcac15.txt`` Sec. III and ``papers/002_a246f6afe29b4bfb.txt`` Sec. II) and
drives volatile workers through a :class:`~spotwise.capacity.provider.Provider`.  It owns the
run loop, the policy loop (observe, consult, act), the membership, the sampler and the event log,
and *holds* its parts as components with narrow interfaces (none inherits from it, none shares
its ``self``):

* ``plane`` -- a :class:`~spotwise.control.dataplane.DataPlane`: what a step is.  The
  parameter-server plane (:class:`~spotwise.planes.ps.plane.ParameterServerPlane`: rounds of each
  sync mode, the atomic commit) or the collective plane
  (:class:`~spotwise.planes.collective.data_plane.CollectivePlane`: leases, regroups, the
  members' records), chosen by ``cluster.data_plane`` above the controller
  (:func:`spotwise.assemble.plane_for`: this module imports no concrete plane);
* ``accounting`` -- :class:`~spotwise.control.accounting.Billing`: ledger, prices, cost (instances by
  the hour, or functions per use: the plane says which);
* ``checkpointer`` -- :class:`~spotwise.control.checkpointing.Checkpointer`: checkpoints, resume;
* ``market_actions`` -- :class:`~spotwise.control.market_actions.MarketActions`: market switches
  and migrations with their restart window;
* ``outage`` -- :class:`~spotwise.control.outage.OutageWait`: waiting without workers, policies
  consulted meanwhile;
* ``provider`` (capacity with explicit capabilities: :mod:`spotwise.capacity`) and ``compute``
  (member processes: Ray actors or in-process; the controller never calls Ray itself), given by
  the assembler (:func:`spotwise.assemble.build_controller`); ``clock`` (virtual or wall) and
  ``state`` (the model), injected or built from the spec.

Each component is given a port, not the controller: the protocol beside it names what it reads and
calls (``AccountedJob``, ``CheckpointedJob``, ``MarketHost``, ``OutageHost``, ``SpeedsHost``,
``ObservedJob``, ``SummarisedJob``, ``TerminatingJob``; a plane's is
:class:`~spotwise.control.dataplane.PlaneHost`), and none of them imports this module.

A run on a real Ray cluster differs only by what is injected (:func:`spotwise.capacity.cluster.cluster_controller`).

**Atomic commit** (``papers/001_30a454edd897cf47.txt`` Sec. 3.2): the update is applied in one
place, whole.  In the barrier modes a revocation of a worker whose gradient the step needs aborts
the step: every partial result is discarded, the blocks go back to the sampler and the step is
retried with the new membership.  Nothing is restarted: survivors keep going in place and a joiner
is a new actor given the current parameters (Spotnik's in-place membership change).

**Data.** :class:`~spotwise.control.sampler.EpochSampler` guarantees that within an epoch every
sample contributes to exactly one committed step, whatever the revocations.

**Checkpoints** every ``outputs.checkpoint_every`` steps, on every revocation notice and on SIGTERM (of
the last committed step, :mod:`spotwise.control.terminating`); a killed controller resumes from the newest
valid one (``spotwise run --resume OUT``).  A loss of every *worker* loses nothing: the parameters live here.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from contextlib import suppress
from pathlib import Path
from typing import Any, Callable

import numpy as np

from spotwise.capacity.provider import Provider
from spotwise.config import JobSpec, resolve_epochs
from spotwise.control.accounting import Billing
from spotwise.control.checkpointing import Checkpointer
from spotwise.control.clock import Clock, VirtualClock
from spotwise.control.dataplane import DataPlane
from spotwise.control.market_actions import DEFAULT_RESTART_S, MarketActions
from spotwise.control.outage import OutageWait
from spotwise.control.progress import NoProgressError, StallCounter, diverged_error, progress_fix
from spotwise.control.records import Counters
from spotwise.control.rundir_io import SPEC_FILE
from spotwise.control.sampler import EpochSampler
from spotwise.control.sinks import make_sinks
from spotwise.control.state import TrainingState, training_state
from spotwise.training.recipe import recipe_of
from spotwise.control.summary import run_summary
from spotwise.control.sync import SyncStrategy
from spotwise.events import EVENTS_FILE, EventLog, RunSummary, atomic_write_text, write_summary
from spotwise.market.billing import Ledger
from spotwise.market.preemption import MarketEvent
from spotwise.market.job_market import Market
from spotwise.market.world import build_market
from spotwise.planes.ps.compute import Compute
from spotwise.policies import Rebid, Resize, SetLearningRate, SwitchSync, make_policies
from spotwise.policies.base import Checkpoint as CheckpointDecision
from spotwise.policies.base import Decision, Migrate, Noop, Policy, SwitchMarket, consult
from spotwise.control.observation import observe
from spotwise.control.speeds import WorkerSpeeds
from spotwise.policies.user import UserPolicyError


class JobController:
    """Runs one job to its target; see the module docstring for its components and semantics.

    **No progress** (issue 7 item 17).  A spec whose workers cannot outlive one mini-batch is
    refused up front by the assembler (:func:`~spotwise.control.progress.check_progress_possible`,
    :class:`InfeasibleError`).  At run time,
    every worker lost to the market (or a node loss) since the last commit counts as a failed
    attempt; after ``max(no_progress_attempts, 5 * max_workers, 10 * losses-per-commit so far)``
    of them without a commit the run stops with status ``no-progress``, writes its summary and
    checkpoint, and :meth:`run` raises :class:`NoProgressError` saying how to fix the market.
    Waiting without capacity is not a failed attempt (that ends at the horizon: ``no-capacity``).

    **What components may call** (the controller's narrow interface): membership
    (:meth:`add_member`, :meth:`drop_member`, :meth:`poll_joins`, :meth:`release_all`), the market
    (:meth:`handle_market`, :meth:`drain_market`, :meth:`iteration_market`, :meth:`enter_place`),
    steps (:meth:`committed`, :meth:`evaluate`, :meth:`apply_policies`, :meth:`after_commit`),
    :meth:`checkpoint` and :meth:`cost_so_far`; and they read its state (``step``, ``T``,
    ``members``, ``sampler``, ``counters``, ``log``, ...).
    """

    #: failed attempts (workers lost with no commit) after which a run is declared stuck (at least)
    no_progress_attempts: int = 50

    def __init__(
        self,
        spec: JobSpec,
        out_dir: str | Path,
        *,
        plane: DataPlane,
        provider: Provider,
        compute: Compute | None,
        market: Market | None = None,
        state: TrainingState | None = None,
        resume: bool = False,
        progress: Callable[[dict[str, Any]], None] | None = None,
        mode: str = "emulated",
        stop_after_steps: int | None = None,
        stop_after_samples: int | None = None,
        worker_market: str = "spot",
        clock: Clock | None = None,
        restart_s: float | None = None,
    ) -> None:
        #: wall seconds since the job was made (``summary.wall_s``); the clock starts with it
        self.wall0 = time.perf_counter()
        #: how time passes: virtual (drawn durations, the default) or measured (a real cluster)
        self.clock: Clock = clock if clock is not None else VirtualClock()
        self.spec = spec
        self.out = Path(out_dir)
        self.out.mkdir(parents=True, exist_ok=True)
        self.mode = mode
        self.progress = progress
        self.stop_after_steps = stop_after_steps
        #: the job is complete once its committed steps hold this many samples (``target.samples``, or
        #: a baseline's target; the smaller of the two)
        resolve_epochs(spec)  # target.epochs in samples (the training set's size)
        caps = [int(v) for v in (stop_after_samples, spec.target_samples()) if v is not None]
        self.stop_after_samples = min(caps) if caps else None
        #: how workers are billed: "spot" (volatile capacity) or "on_demand" (a baseline's fixed fleet)
        self.worker_market = worker_market
        #: seconds a market switch or migration costs before the new workers compute (billed)
        self.restart_s = DEFAULT_RESTART_S if restart_s is None else float(restart_s)
        if not (math.isfinite(self.restart_s) and self.restart_s >= 0):
            raise ValueError(f"restart_s must be a finite number of seconds >= 0, got {restart_s!r}")
        #: the region (or zone) the job runs in; a migration changes it
        self.region: str | None = spec.cluster.region
        self.market = market or build_market(spec)
        cl = spec.cluster
        self.max_workers = max(cl.workers, cl.max_workers or cl.workers)
        self.batch = spec.workload.batch_size
        self.sync: str = cl.sync
        self.sync_n = cl.sync_n
        self.delta = float(cl.sync_overhead_s)
        #: virtual time a commit adds (Delta of eq. 14-15); a wall clock ignores it (time is measured)
        self.commit_overhead_s = self.delta
        self.straggler = float(cl.straggler)
        self.policies: list[Policy] = make_policies(spec.policies)
        self.base_lr = float(spec.workload.lr)

        #: the training recipe (issue 28) and the model side (parameters, update, evaluation; the real PyTorch workload
        #: unless the caller models it; a parameter server's optimizer on the coordinator's GPU if it has one: issue 40)
        self.recipe = recipe_of(spec.workload, spec.planned_samples())
        self.state: TrainingState = state or training_state(spec, self.recipe, self.base_lr)
        #: per-worker mini-batch times, batch shares and exchanges: pools, places, the PS network (issue 21);
        #: ``time_law`` stands for the fleet in closed-form estimates (:mod:`spotwise.control.speeds`)
        self.speeds = WorkerSpeeds(self)
        self.mean_step_s, self.time_law = self.speeds.mean_step_s, self.speeds.effective_law()
        #: what a step is (see the module docstring)
        self.plane: DataPlane = plane
        #: worker processes and their calls (the plane's Ray actors unless the assembler gave others;
        #: None where the plane runs its members itself, as functions)
        self.compute: Compute | None = compute
        self.provider: Provider = provider

        self.step = 0
        self.lr = self.base_lr
        self.provisioned = cl.workers
        self.sampler = EpochSampler(self.state.n_train, spec.seed, bool(getattr(self.state, "ordered", False)))
        self.dur_rng = np.random.default_rng([spec.seed, 3])
        self.members: dict[int, Any] = {}
        self.counters = Counters()
        self.ema_loss: float | None = None
        self.last_loss: float | None = None
        #: (step, t, loss, active workers) of every committed step and the time of the latest
        #: shrink of the pool: what a policy that reads the learning curve sees in
        #: ``Observation.extra`` ("loss_history", "last_resize_t"; the scale-in auto-tuner)
        self.loss_history: list[tuple[int, float, float, int]] = []
        self.last_resize_t: float | None = None
        #: when a policy last changed the sync strategy (``Observation.extra["last_switch_t"]``)
        self.last_switch_t: float | None = None
        self.last_eval: dict[str, float] = {}
        #: workers lost (market / node loss) since the last commit, in total, and commits (this session)
        self.stall = StallCounter()
        self.stop_message: str | None = None
        self.last_commit_T = 0.0
        #: wall time of the latest revocation while others survived (recovery latency), else None
        self.kill_wall: float | None = None
        self.status = "running"
        self.accounting: Billing = self.plane.make_accounting(self)
        self.checkpointer = Checkpointer(self)
        self.market_actions = MarketActions(self)
        self.outage = OutageWait(self)
        self.log: EventLog
        self.plane.attach(self)
        if resume:
            self.checkpointer.restore()
        else:
            self._fresh_start()
        for sink in make_sinks(spec.outputs.sinks, self.out, spec=spec, log=self.log, resume=resume):  # issue 41 item 6
            self.log.add_sink(sink)
        self.plane.started()

    # ================================================================== setup
    @property
    def T(self) -> float:
        """Seconds since the job's start on :attr:`clock` (virtual, or measured on a real cluster)."""
        return self.clock.now()

    @property
    def ledger(self) -> Ledger:
        """The billing ledger of this session (:attr:`accounting`'s)."""
        return self.accounting.ledger

    def _fresh_start(self) -> None:
        self.provider.prepare(list(range(self.provisioned)))  # a real cluster: ask for the workers, wait for one
        atomic_write_text(self.out / SPEC_FILE, json.dumps(self.spec.to_dict(), indent=2) + "\n")  # never via a link
        self.log = EventLog(self.out / EVENTS_FILE, clock=lambda: self.T,
                            meta={"mode": self.mode, "job": self.spec.name, "workers": self.spec.cluster.workers,
                                  "sync": self.sync, "instance": self.market.instance.name, "seed": self.spec.seed,
                                  **self.plane.log_meta()})
        self.accounting.start_coordinator(0.0)
        self.accounting.emit_prices()
        initial = sorted(w for w in self.provider.available_at_start() if w < self.provisioned)
        actors = self.provider.warm_up(initial)
        for w, actor in zip(initial, actors):
            self.add_member(w, actor)

    def enter_place(self, place: Market, region: str | None) -> None:
        """The job's market is ``place``'s from now on (prices, instance, throughput); the coordinator stays."""
        self.market = dataclasses.replace(place, coordinator=self.market.coordinator)
        self.region = region
        self.speeds = WorkerSpeeds(self)
        self.mean_step_s, self.time_law = self.speeds.mean_step_s, self.speeds.effective_law()

    # ================================================================== membership
    def add_member(self, w: int, actor: Any, reopen: dict[str, Any] | None = None,
                   billed_from: float | None = None) -> None:
        """``w`` joins with ``actor``; ``reopen``: its billing interval from the checkpoint (a resume
        continues it -- the same VM in the same virtual timeline -- and it is not a new join);
        ``billed_from``: when its billing began, if before now (it was starting: a restart)."""
        self.members[w] = actor
        self.accounting.member_started(w, self.T if billed_from is None else billed_from, reopen)
        if reopen is not None:
            self.log.emit("join", worker=w, active=len(self.members), resumed=True)
        else:
            self.counters.joins += 1
            self.log.emit("join", worker=w, active=len(self.members))
        self.plane.on_join(w)

    def drop_member(self, w: int, reason: str) -> None:
        """``w`` leaves (``reason``: ``market``, ``node-lost`` or ``released``): killed, billed until now."""
        actor = self.members.pop(w, None)
        if actor is None:
            return
        # recovery latency: from a revocation to the next commit by the survivors (an outage of
        # the whole cluster is idle time, not a recovery)
        self.kill_wall = time.perf_counter() if self.members else None
        try:
            self.provider.kill(w, actor)
        except Exception:  # already dead (node lost)
            pass
        self.accounting.member_stopped(w, self.T, reason)
        if reason != "released":
            self.counters.revocations += 1
        self.log.emit("revoke", worker=w, reason=reason, active=len(self.members))
        if reason != "released":
            if w < self.provisioned:
                self.provider.request(w)  # requested capacity (a real cluster): fills when a node has room
            self._note_loss()
        self.plane.on_leave(w, reason)

    def release_all(self) -> None:
        """Every member leaves (a market switch or a migration)."""
        for w in sorted(self.members):
            self.drop_member(w, "released")

    def poll_joins(self, timeout: float = 0.0) -> None:
        """Requested workers that have started join (a real cluster); the unwanted are released."""
        for w in self.provider.poll(timeout):
            if w < self.provisioned and w not in self.members:
                self.add_member(w, self.provider.acquire(w))
            else:
                self.provider.cancel(w)

    def _note_loss(self) -> None:
        """A worker was lost: if far too many were lost since the last commit, stop (``no-progress``)."""
        self.stall.lost()
        lost = self.stall.lost_since_commit
        if self.status != "running" or lost < self.stall.limit(self.no_progress_attempts, self.max_workers):
            return
        self.status = "no-progress"
        self.stop_message = (
            f"no step committed in {lost} worker losses since step {self.step} "
            f"(t={self.last_commit_T:.1f} s; now t={self.T:.1f} s, {self.counters.aborted_steps} aborted rounds in all): "
            f"workers are revoked before a mini-batch (about {self.mean_step_s:.3g} s of virtual time) completes, so "
            f"the market makes progress impossible; stopped with status no-progress")

    # ================================================================== the market
    def handle_market(self, ev: MarketEvent) -> None:
        """Apply one market event: a notice (checkpoint), a revocation, capacity that became available."""
        w = ev.worker
        joined = False
        if ev.kind == "notice":
            if w in self.members:
                self.counters.notices += 1
                revoke_at = ev.revoke_at if ev.revoke_at is not None else ev.t + float(self.market.revocation.notice_s or 0.0)
                self.log.emit("notice", worker=w, revoke_at=revoke_at)
                if self.step > self.checkpointer.last_step:
                    self.checkpoint("notice")
        elif ev.kind == "revoke":
            if w in self.members:
                self.drop_member(w, "market")
        elif ev.kind == "available":
            if w < self.provisioned and w not in self.members:
                self.provider.expect_joins(1 + self._joins_later_in_instant(ev.t, w))
                self.add_member(w, self.provider.acquire(w))
                joined = w in self.members
        self.plane.on_market_event(ev, joined)

    def _joins_later_in_instant(self, t: float, w: int) -> int:
        """Slots other than ``w`` that come back later in instant ``t`` and will join (scheduled
        ``available`` events of that instant not applied yet)."""
        return sum(1 for e in self.provider.peek_instant() if e.t == t and e.kind == "available" and e.worker != w
                   and e.worker < self.provisioned and e.worker not in self.members)

    def _expect(self, slots: list[int]) -> None:
        """Several workers join now (a restart, a resize, a rebid): start them together."""
        if len(slots) > 1:
            self.provider.expect_joins(len(slots))

    def drain_market(self, until: float) -> None:
        """Apply every scheduled market event up to ``until`` (advancing the clock to each)."""
        while True:
            t = self.provider.peek_time()
            if t is None or t > until:
                break
            ev = self.provider.pop_event()
            self.clock.advance_to(ev.t)
            self.accounting.emit_prices()
            self.handle_market(ev)

    def iteration_market(self) -> None:
        """The per-iteration revocations of an iteration-driven market (paper 000's Bernoulli model)."""
        mask = np.zeros(self.max_workers, dtype=bool)
        mask[list(self.members)] = True
        for ev in self.provider.iteration_events(self.T, mask):
            self.handle_market(ev)

    # ================================================================== time and money
    @property
    def sync_strategy(self) -> SyncStrategy:
        """The strategy of the current ``sync``/``sync_n`` on the plane (checkpoints, events, SwitchSync)."""
        return self.plane.sync_strategy(self.sync, self.sync_n)

    def cost_so_far(self) -> float:
        """Dollars billed so far (earlier sessions of a resumed run included)."""
        return self.accounting.cost_so_far()

    # ================================================================== the loop
    def done(self) -> bool:
        """Whether the job is over (target, budget, horizon, a stop) or SIGTERM is pending; sets :attr:`status`."""
        if self.status != "running" or self.checkpointer.sigterm_pending():  # stopped (plane, loss counter), SIGTERM
            return True
        tgt = self.spec.target
        if tgt.iterations is not None and self.step >= tgt.iterations:
            self.status = "completed"
            return True
        if tgt.loss is not None and self.ema_loss is not None and self.ema_loss <= tgt.loss:
            self.status = "completed"
            return True
        if self.spec.budget_usd is not None and self.cost_so_far() >= self.spec.budget_usd:
            self.status = "budget-exhausted"
            return True
        if self.T >= self.market.horizon_s:
            self.status = "no-capacity"
            return True
        if self.stop_after_samples is not None and self.counters.samples >= self.stop_after_samples:
            self.status = "completed"
            return True
        if self.stop_after_steps is not None and self.step >= self.stop_after_steps:
            self.status = "stopped"
            return True
        return False

    def run(self) -> RunSummary:
        """Run the job to its target (or budget, horizon, stop); the summary is also written to the run directory."""
        try:
            self.plane.begin()
            with self.checkpointer.on_sigterm() as term:  # SIGTERM: checkpoint the last committed step, then exit 143
                while not (term.requested() or self.done()):
                    self.plane.before_tick()
                    if len(self.members) < (self.spec.cluster.min_workers or 1):  # below min_workers: wait (issue 31)
                        if not self.outage.wait():
                            self.status = "no-capacity"
                            break
                        continue
                    self.plane.tick()
            self.plane.stop()
            summary = self._finish()
            if self.status == "no-progress":
                raise NoProgressError(self.stop_message or "no step committed", progress_fix(self.market, self.mean_step_s),
                                      summary)
            return summary
        finally:
            self._shutdown()

    # ================================================================== steps
    def committed(self) -> None:
        """The plane committed a step (it advanced ``step`` and logged it): no longer stuck."""
        self.stall.committed()

    def after_commit(self) -> None:
        """The periodic checkpoint and the progress display after a committed step (every plane)."""
        every = self.spec.outputs.checkpoint_every
        if every and self.step % every == 0:
            self.checkpoint("periodic")
        if self.progress is not None:
            self.progress(self.snapshot())

    def nonfinite(self, what: str, checkpoint: bool = True) -> None:
        """A step's loss or gradient is NaN or infinite: checkpoint the last good step (unless the
        plane took it), then stop (exit 2, naming the step)."""
        if checkpoint:
            self.checkpoint("nonfinite")
        self.status = "nonfinite"
        raise diverged_error(what, self.step)

    @property
    def params(self) -> np.ndarray:
        """The current parameters (a flat float32 vector, owned by :attr:`state`)."""
        return self.state.params

    @params.setter
    def params(self, value: np.ndarray) -> None:
        self.state.params = value

    def evaluate(self) -> dict[str, float]:
        """Evaluate the current parameters (logged as an ``eval`` event); ``{}`` if the workload cannot."""
        if not self.state.can_evaluate:
            return {}
        self.last_eval = self.state.evaluate()
        self.log_eval()
        return self.last_eval

    def log_eval(self) -> None:
        """Log :attr:`last_eval` as the ``eval`` event of the current step."""
        name = self.state.metric_name
        self.log.emit("eval", step=self.step, loss=self.last_eval.get("loss"), metric_name=name,
                      metric=None if name is None else self.last_eval.get(name),
                      **{k: v for k, v in self.last_eval.items() if k not in ("loss", name)})

    def checkpoint(self, why: str) -> None:
        """A checkpoint of the current step, once the plane has made the parameters those of the
        step (the collective plane may defer it to its next lease)."""
        if self.plane.ready_for_checkpoint(why):
            self.checkpointer.take(why)

    def snapshot(self) -> dict[str, Any]:
        return {"step": self.step, "target": self.spec.expected_iterations(), "samples": self.counters.samples,
                "target_samples": self.spec.target_samples(), "loss": self.last_loss, "active": len(self.members),
                "provisioned": self.provisioned, "t": self.T, "cost": self.cost_so_far(), "status": self.status}

    # ================================================================== policies
    @property
    def market_name(self) -> str:
        """What the workers run on now, as policies name it: ``"spot"`` or ``"on-demand"``."""
        return "on-demand" if self.worker_market == "on_demand" else "spot"

    def expected_step_s(self) -> float:
        """Mean seconds per committed step for the current membership (at least one worker): the
        sync strategy's ``E[R]`` under the mini-batch time law, commit overhead included."""
        n = max(1, len(self.members) or self.provisioned)
        return float(self.sync_strategy.expected_round_s(self.time_law, n, self.delta))

    def apply_policies(self) -> None:
        """Consult every policy on the current observation and act on its decisions.  A user policy
        that fails (:class:`UserPolicyError`, exit 2) leaves a checkpoint of the step just committed."""
        try:
            consult(self.policies, lambda: observe(self), self._act)
        except UserPolicyError:
            self.checkpoint("policy-error")
            raise

    def _act(self, policy: Policy, d: Decision) -> None:
        acted = True
        why_not = refused = self.plane.refuse(d)
        if refused is not None:
            acted = False
        elif isinstance(d, SetLearningRate):
            self.lr = d.lr
        elif isinstance(d, Resize):
            self._resize(min(d.workers, self.max_workers))
        elif isinstance(d, Rebid):
            if not self.provider.supports_bids:
                acted = False  # a real cluster or an on-demand fleet has no bids to change
            else:
                bids = tuple(d.bids) + (d.bids[-1],) * (self.max_workers - len(d.bids))
                self.provider.rebid(bids[: self.max_workers], self.T)
                self._reconcile()
        elif isinstance(d, SwitchSync):
            self.sync, self.sync_n = d.sync, d.sync_n
            self.last_switch_t = self.T
        elif isinstance(d, CheckpointDecision):
            self.checkpoint("policy")
        elif isinstance(d, SwitchMarket):
            why_not = self.market_actions.switch_market(d.market)
            acted = why_not is None
        elif isinstance(d, Migrate):
            why_not = self.market_actions.migrate(d)
            acted = why_not is None
        elif isinstance(d, Noop):
            acted = False
        else:
            acted, why_not = False, f"{type(d).__name__} is not a decision this executor knows"
        self.counters.decisions += 1
        extra = {} if why_not is None else {"not_acted": why_not}
        self.log.emit("decision", policy=policy.name, decision=d.describe(), reason=d.reason, acted=acted, **extra)
        if refused is None:
            self.plane.after_decision(policy, d)

    # ------------------------------------------------------------------ resizing and rebidding
    def _reconcile(self) -> None:
        """Membership after the market changed under us (rebids): drop the outbid, add the newly won."""
        avail = self.provider.available_at_start()
        for w in sorted(self.members):
            if w not in avail:
                self.drop_member(w, "market")
        self._expect([w for w in avail if w < self.provisioned and w not in self.members])
        for w in sorted(avail):
            if w < self.provisioned and w not in self.members:
                self.add_member(w, self.provider.acquire(w))

    def _resize(self, n: int) -> None:
        old = self.provisioned
        self.provisioned = max(0, n)
        if self.provisioned < old:
            self.last_resize_t = self.T
        for w in sorted(self.members):
            if w >= self.provisioned:
                self.drop_member(w, "released")
        if self.provisioned > old:
            avail = self.provider.available_at_start()
            self._expect([w for w in range(old, self.provisioned) if w in avail and w not in self.members])
            for w in range(old, self.provisioned):
                if w in avail and w not in self.members:
                    self.add_member(w, self.provider.acquire(w))
        for w in range(old, self.provisioned):
            if w not in self.members:
                self.provider.request(w)  # requested capacity: joins through poll_joins
        for w in range(self.provisioned, old):
            self.provider.cancel(w)

    # ================================================================== the end
    def _finish(self) -> RunSummary:
        self.plane.before_finish()
        self.outage.end()
        if self.step > self.checkpointer.last_step:
            self.checkpointer.take_quiet()  # before the ledger closes: it holds the open intervals
        self.checkpointer.export_model()
        self.accounting.close(self.T, sorted(self.members))
        final_eval = self.evaluate()
        cost = self.accounting.cost_breakdown(final=True)
        self.log.emit("cost", total=cost["total"], breakdown=cost)
        self.log.emit("end", status=self.status)
        self.log.close()
        summary = run_summary(self, final_eval, cost)
        write_summary(self.out, summary)
        return summary

    def _shutdown(self) -> None:
        if hasattr(self, "log"):  # the run ended by an error before its log closed: its sinks' runs end as failed
            self.log.abort_sinks()
        try:
            for w, actor in list(self.members.items()):
                with suppress(Exception):
                    self.provider.kill(w, actor)
            self.members.clear()
            self.provider.shutdown()
        finally:
            self.plane.shutdown()
