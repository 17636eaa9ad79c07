"""The coordinator: the on-demand node that owns the model and commits steps atomically.

It runs in the driver process (it stands for the on-demand parameter server of
``papers/000_3c734f3ffedcac15.txt`` Sec. III and ``papers/002_a246f6afe29b4bfb.txt`` Sec. II) and
drives volatile workers through a :class:`~spotwise.runtime.provider.Provider`.

**Time.** On the emulated provider every worker mini-batch has a *virtual* duration
``m * ((1 - s) + s * Exp(1))`` with ``m = step_time_s / throughput(instance, family)`` and ``s``
the straggler coefficient (``s = 1`` is the exponential runtime model of paper 000 eq. 14); the
commit adds ``Delta = sync_overhead_s``.  The numerics are real: each worker actor computes its
gradient with PyTorch.  Market events (notices, revocations, capacity returning) are interleaved
with task completions in virtual-time order, so the run is deterministic for a given seed however
fast or slow the machine is.

**Synchronisation** (paper 000 Sec. III; paper 002):

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

**Atomic commit** (``papers/001_30a454edd897cf47.txt`` Sec. 3.2): the update is applied in one
place, whole.  In the barrier modes a revocation of a worker whose gradient the step needs aborts
the step: every partial result is discarded, the blocks go back to the sampler and the step is
retried with the new membership.  Nothing is restarted: survivors keep going in place and a joiner
is a new actor given the current parameters (Spotnik's in-place membership change).

**Data.** :class:`~spotwise.runtime.sampler.EpochSampler` guarantees that within an epoch every
sample contributes to exactly one committed step, whatever the revocations.

**Data plane.** The coordinator never calls Ray itself: worker processes and their calls belong
to a :class:`~spotwise.runtime.compute.Compute` (Ray actors by default; in-process workers with
:class:`~spotwise.runtime.compute.LocalCompute`, which runs this whole control logic without Ray),
and capacity to a :class:`~spotwise.runtime.provider.Provider` with explicit capabilities (bids,
per-iteration revocations, the market state a checkpoint keeps).

**Checkpoints** every ``outputs.checkpoint_every`` steps and on every revocation notice; a killed
coordinator resumes from the newest valid checkpoint (``spotwise run --resume OUT``), so a loss of
everything loses at most the steps since that checkpoint.  A loss of every *worker* loses nothing:
the parameters live here.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from spotwise.config import JobSpec, spec_from_dict
from spotwise.errors import InfeasibleError, InputError
from spotwise.events import EventLog, RunSummary, write_summary
from spotwise.market.billing import Ledger
from spotwise.market.preemption import (
    BernoulliRevocation,
    BidRevocation,
    ExponentialLifetime,
    LifetimeRevocation,
    MarketEvent,
    RevocationModel,
)
from spotwise.market.series import SeriesMeta, StepSeries
from spotwise.market.world import Market, build_market, market_for_place
from spotwise.policies import Observation, Rebid, Resize, SetLearningRate, SwitchSync, make_policies
from spotwise.policies.base import Checkpoint as CheckpointDecision
from spotwise.policies.base import Decision, Migrate, Noop, Policy, SwitchMarket
from spotwise.runtime.checkpoint import load_latest_checkpoint, require_checkpoint, save_checkpoint, warn_on_stderr
from spotwise.runtime.clock import Clock, ReadyFn, VirtualClock
from spotwise.runtime.compute import Compute, RayCompute, Result, WorkerLost
from spotwise.runtime.provider import EmulatedProvider, Provider
from spotwise.runtime.raystart import ensure_ray  # noqa: F401  (re-exported: callers import it from here)
from spotwise.runtime.sampler import Block, EpochSampler
from spotwise.runtime.state import TorchState, TrainingState
from spotwise.runtime.sync import SyncStrategy, make_sync
from spotwise.specload import to_plain
from spotwise.theory.runtime import MiniBatchTimeLaw
from spotwise.workloads.registry import make_workload

log = logging.getLogger(__name__)

SPEC_FILE = "spec.json"

#: seconds a change of market or place costs when nothing else says (new workers start, load the
#: checkpoint's parameters): billed, no progress; a Coordinator's ``restart_s`` overrides it
DEFAULT_RESTART_S = 120.0

#: the ledger's market names (billing) for the policies' (:data:`spotwise.policies.base.MARKETS`)
LEDGER_MARKET = {"spot": "spot", "on-demand": "on_demand"}


@dataclass
class Task:
    worker: int
    block: Block
    version: int
    start: float
    #: drawn finish time (virtual clock); ``None`` where durations are measured (wall clock)
    finish: float | None
    ref: Any


@dataclass
class Contribution:
    worker: int
    block: Block
    grad: np.ndarray
    loss: float
    n: int
    staleness: int


@dataclass
class Counters:
    revocations: int = 0
    joins: int = 0
    decisions: int = 0
    notices: int = 0
    aborted_steps: int = 0
    idle_s: float = 0.0
    checkpoints: int = 0
    #: samples in committed steps (what a like-for-like baseline must process too)
    samples: int = 0
    #: restarts after a market switch or a migration, and the seconds they cost (billed, no work)
    restarts: int = 0
    restart_s: float = 0.0
    recoveries_ms: list[float] = field(default_factory=list)



class NoProgressError(InfeasibleError):
    """The run was stopped because it cannot commit steps (status ``no-progress``; CLI exit 2).

    ``summary`` is the :class:`RunSummary` the run wrote before stopping (``summary.json``).
    """

    def __init__(self, what: str, fix: str, summary: RunSummary) -> None:
        super().__init__(what, fix, "spotwise run")
        self.summary = summary


class Coordinator:
    """Runs one job to its target; see the module docstring for the semantics.

    **No progress** (issue 7 item 17).  A spec whose workers cannot outlive one mini-batch is
    refused up front (:func:`check_progress_possible`, :class:`InfeasibleError`).  At run time,
    every worker lost to the market (or a node loss) since the last commit counts as a failed
    attempt; after ``max(no_progress_attempts, 5 * max_workers, 10 * losses-per-commit so far)``
    of them without a commit the run stops with status ``no-progress``, writes its summary and
    checkpoint, and :meth:`run` raises :class:`NoProgressError` saying how to fix the market.
    Waiting without capacity is not a failed attempt (that ends at the horizon: ``no-capacity``).
    """

    #: failed attempts (workers lost with no commit) after which a run is declared stuck (at least)
    no_progress_attempts: int = 50

    def __init__(
        self,
        spec: JobSpec,
        out_dir: str | Path,
        *,
        market: Market | None = None,
        provider: Provider | None = None,
        compute: Compute | None = None,
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
        #: how time passes: virtual (drawn durations, the default) or measured (a real cluster)
        self.clock: Clock = clock if clock is not None else VirtualClock()
        self.spec = spec
        self.out = Path(out_dir)
        self.out.mkdir(parents=True, exist_ok=True)
        self.mode = mode
        self.progress = progress
        self.stop_after_steps = stop_after_steps
        #: the job is complete once its committed steps hold this many samples (a baseline's target)
        self.stop_after_samples = stop_after_samples
        #: how workers are billed: "spot" (volatile capacity) or "on_demand" (a baseline's fixed fleet)
        self.worker_market = worker_market
        #: seconds a market switch or migration costs before the new workers compute (billed)
        self.restart_s = DEFAULT_RESTART_S if restart_s is None else float(restart_s)
        if not (math.isfinite(self.restart_s) and self.restart_s >= 0):
            raise ValueError(f"restart_s must be a finite number of seconds >= 0, got {restart_s!r}")
        #: the region (or zone) the job runs in; a migration changes it
        self.region: str | None = spec.cluster.region
        #: the on-demand price of the current instance as a series (billing), built when first needed
        self._od_series: tuple[Any, StepSeries] | None = None
        #: the parameters shared with the data plane for step ``_pref_step`` (continuous modes)
        self._pref: Any = None
        self._pref_step = -1
        self.market = market or build_market(spec)
        cl = spec.cluster
        self.max_workers = max(cl.workers, cl.max_workers or cl.workers)
        self.batch = spec.workload.batch_size
        self.sync = cl.sync
        self.sync_n = cl.sync_n
        self.delta = float(cl.sync_overhead_s)
        #: virtual time a commit adds (Delta of eq. 14-15); a wall clock ignores it (time is measured)
        self.commit_overhead_s = self.delta
        self.mean_step_s = self.market.step_seconds(spec.workload.family, float(spec.workload.step_time_s))
        self.straggler = float(cl.straggler)
        #: the law of one worker mini-batch's virtual time (module docstring)
        self.time_law = MiniBatchTimeLaw(self.mean_step_s, self.straggler)
        self.policies: list[Policy] = make_policies(spec.policies)
        self.base_lr = float(spec.workload.lr)

        #: the model side: parameters, update, evaluation, dataset size (the real PyTorch workload
        #: unless the caller models it, as the simulator does)
        self.state: TrainingState = state or TorchState(make_workload(spec.workload, spec.seed))
        worker_args = worker_args_for(spec)
        standby = cl.standby if cl.standby is not None else min(cl.workers, 4)
        if provider is None:  # the market model decides capacity: refuse a hopeless one before any actor starts
            check_progress_possible(spec, self.market)
        #: the data plane: worker processes and their calls (Ray actors unless the caller gives another)
        self.compute: Compute = compute or RayCompute(worker_args, standby=standby if provider is None else 0)
        self.provider = provider or EmulatedProvider(
            self.market.revocation, self.max_workers, self.market.horizon_s, spec.seed, compute=self.compute)

        self.step = 0
        self.lr = self.base_lr
        self.provisioned = cl.workers
        self.sampler = EpochSampler(self.state.n_train, spec.seed)
        self.dur_rng = np.random.default_rng([spec.seed, 3])
        self.members: dict[int, Any] = {}
        self.tasks: dict[int, Task] = {}
        self.buffer: list[Contribution] = []
        self.waiting: set[int] = set()
        self.noticed: set[int] = set()
        self.counters = Counters()
        self.ema_loss: float | None = None
        self.last_loss: float | None = None
        self.last_eval: dict[str, float] = {}
        self.retries = 0
        self.lost_in_step = 0
        #: workers lost (market / node loss) since the last commit, in total, and commits (this session)
        self.lost_since_commit = 0
        self._losses_total = 0
        self._commits = 0
        self.stop_message: str | None = None
        self.last_commit_T = 0.0
        self.last_price_T = -1.0
        self.last_ckpt_step = -1
        self.kill_wall: float | None = None
        self.carried_cost: dict[str, Any] = {"total": 0.0, "by_category": {}, "by_market": {}, "by_instance": {}}
        self.status = "running"
        #: clock time at which the fleet became empty (an idle period in progress), else None
        self._idle_since: float | None = None
        self.wall0 = time.perf_counter()
        self.ledger = Ledger(self.market.billing)
        self.log: EventLog
        if resume:
            self._restore()
        else:
            self._fresh_start()

    # ================================================================== setup
    @property
    def T(self) -> float:
        """Seconds since the job's start on :attr:`clock` (virtual, or measured on a real cluster)."""
        return self.clock.now()

    def _fresh_start(self) -> None:
        self.provider.prepare(list(range(self.provisioned)))  # a real cluster: ask for the workers, wait for one
        (self.out / SPEC_FILE).write_text(json.dumps(self.spec.to_dict(), indent=2) + "\n")
        self.log = EventLog(self.out / "events.jsonl", clock=lambda: self.T,
                            meta={"mode": self.mode, "job": self.spec.name, "workers": self.spec.cluster.workers,
                                  "sync": self.sync, "instance": self.market.instance.name, "seed": self.spec.seed})
        self.ledger.start("coordinator", 0.0, self.market.coordinator, category="coordinator", market="on_demand")
        self._emit_prices()
        initial = sorted(w for w in self.provider.available_at_start() if w < self.provisioned)
        actors = self.provider.warm_up(initial)
        for w, actor in zip(initial, actors):
            self._add_member(w, actor)

    def _restore(self) -> None:
        skipped: list[str] = []

        def warn(msg: str) -> None:  # on stderr, and into the restore event
            skipped.append(msg)
            warn_on_stderr(msg)

        state, path = require_checkpoint(self.out, expect_shape=self.params.shape, warn=warn)  # falls back past bad ones
        self.step = int(state["step"])
        self.params = state["params"].numpy().astype(np.float32).copy()
        self.lr = float(state["lr"])
        self.clock.restore(float(state["T"]))
        self.last_commit_T = self.T
        self.sampler = EpochSampler.from_state(state["sampler"])
        self.dur_rng.bit_generator.state = json.loads(state["dur_rng"])
        self.provisioned = int(state["provisioned"])
        self.provider.prepare(list(range(self.provisioned)), resume=True)
        self.worker_market = str(state.get("worker_market", self.worker_market))
        place = state.get("place")
        if place and (place[0], place[1]) != (self.market.instance.name, self.region):
            # the run had migrated: continue in its place (the provider's timeline follows in resume_market)
            self._enter_place(market_for_place(self.spec, place[0], place[1], self.market.catalog, self.market.horizon_s),
                              place[1])
            self.provider.migrate(self.market, self.T)
        self.sync = str(state["sync"])
        self.sync_n = None if state["sync_n"] is None else int(state["sync_n"])
        self.ema_loss = None if state["ema_loss"] is None else float(state["ema_loss"])
        c = state["counters"]
        self.counters = Counters(**{k: v for k, v in c.items() if k != "recoveries_ms"})
        self.carried_cost = state["cost"]
        self.last_ckpt_step = self.step
        self.log = EventLog(self.out / "events.jsonl", clock=lambda: self.T, resume=True)
        self.log.emit("restore", step=self.step, path=str(path), skipped=skipped)
        self.provider.resume_market(self.T, state)
        reopen = self._reopen_ledger(state)
        self.last_price_T = self.T - 1e-9
        self._emit_prices()
        for w in sorted(w for w in self.provider.available_at_start() if w < self.provisioned):
            self._add_member(w, self.provider.acquire(w), reopen=reopen.pop(f"worker-{w}", None))
        for iid, entry in sorted(reopen.items()):
            # a worker that was running at the checkpoint but whose capacity is gone at T (its
            # revocation fell on the checkpoint's instant): billed up to T, as without the restart
            self.ledger.reopen(entry, self._worker_price(str(entry.get("market", self.worker_market))))
            self.ledger.stop(iid, self.T, reason="revoked")
            self.counters.revocations += 1
            self.log.emit("revoke", worker=int(iid.split("-")[-1]), reason="market", active=len(self.members))

    def _reopen_ledger(self, state: dict[str, Any]) -> dict[str, dict[str, Any]]:
        """Continue the checkpoint's billing: settled money carried, open intervals reopened.

        A checkpoint that holds ``ledger = {"settled", "open"}`` (:meth:`Ledger.snapshot`
        merged with what earlier sessions carried).  The coordinator's interval is reopened here
        with its original start, so a resume charges no second minimum and restarts no billing
        hour (issue 7 item 6); the open worker intervals are returned by instance id for
        :meth:`_add_member`.  An older checkpoint (no ``ledger``) falls back to carrying its running
        cost and starting new intervals at ``T`` (which over-bills by the restarted minimums).
        """
        led = state.get("ledger")
        if not led:
            self.ledger.start("coordinator", self.T, self.market.coordinator, category="coordinator", market="on_demand")
            return {}
        self.carried_cost = led["settled"]
        entries = {str(e["instance_id"]): e for e in led["open"]}
        coord = entries.pop("coordinator", None)
        if coord is None:
            self.ledger.start("coordinator", self.T, self.market.coordinator, category="coordinator", market="on_demand")
        else:
            self.ledger.reopen(coord, self.market.coordinator)
        return entries

    def _ledger_state(self) -> dict[str, Any]:
        """The ledger at ``T`` for a checkpoint: settled money (this and earlier sessions) and open intervals."""
        snap = self.ledger.snapshot(self.T)
        return {"settled": _merge_costs(self.carried_cost, snap["settled"]), "open": snap["open"]}

    # ================================================================== membership
    def _add_member(self, w: int, actor: Any, reopen: dict[str, Any] | None = None,
                    billed_from: float | None = None) -> None:
        """``w`` joins with ``actor``; ``reopen``: its billing interval from the checkpoint (a resume
        continues it -- the same VM in the same virtual timeline -- and it is not a new join);
        ``billed_from``: when its billing began, if before now (it was starting: a restart)."""
        self.members[w] = actor
        if reopen is not None:
            self.ledger.reopen(reopen, self._worker_price(str(reopen.get("market", self.worker_market))))
            self.log.emit("join", worker=w, active=len(self.members), resumed=True)
            return
        self.ledger.start(f"worker-{w}", self.T if billed_from is None else billed_from, self._worker_price(),
                          category="worker", market=self.worker_market)
        self.counters.joins += 1
        self.log.emit("join", worker=w, active=len(self.members))

    def _worker_price(self, market: str | None = None) -> Any:
        """What a worker costs on ``market`` (ledger name; default: the one in force): the spot price
        series, or the instance's on-demand $/h."""
        if (market or self.worker_market) == "on_demand":
            inst = self.market.instance
            if self._od_series is None or self._od_series[0] != inst:
                meta = SeriesMeta(id=f"on-demand:{inst.name}", kind="price", instance=inst.name, source="catalog/on-demand")
                series = StepSeries(np.array([0.0]), np.array([self.market.on_demand_price]), self.market.horizon_s, meta)
                self._od_series = (inst, series)
            return self._od_series[1]
        return self.market.prices

    def _drop_member(self, w: int, reason: str) -> None:
        actor = self.members.pop(w, None)
        if actor is None:
            return
        # recovery latency: from a revocation to the next commit by the survivors (an outage of
        # the whole cluster is idle time, not a recovery)
        self.kill_wall = time.perf_counter() if self.members else None
        task = self.tasks.pop(w, None)
        if task is not None:
            self.sampler.release(task.block)
        self.waiting.discard(w)
        self.noticed.discard(w)
        try:
            self.provider.kill(w, actor)
        except Exception:  # already dead (node lost)
            pass
        self.ledger.stop(f"worker-{w}", self.T, reason="revoked" if reason in ("market", "node-lost") else "released")
        if reason != "released":
            self.counters.revocations += 1
        self.log.emit("revoke", worker=w, reason=reason, active=len(self.members))
        if reason != "released":
            if w < self.provisioned:
                self.provider.request(w)  # requested capacity (a real cluster): fills when a node has room
            self._note_loss()

    def _poll_joins(self, timeout: float = 0.0) -> None:
        """Requested workers that have started join (a real cluster); the unwanted are released."""
        for w in self.provider.poll(timeout):
            if w < self.provisioned and w not in self.members:
                self._add_member(w, self.provider.acquire(w))
            else:
                self.provider.cancel(w)

    def _no_progress_limit(self) -> int:
        """Failed attempts without a commit that mark a run as stuck (see the class docstring)."""
        settled = self._losses_total - self.lost_since_commit
        per_commit = settled / self._commits if self._commits else 0.0
        return max(int(self.no_progress_attempts), 5 * self.max_workers, int(math.ceil(10.0 * per_commit)))

    def _note_loss(self) -> None:
        """A worker was lost: if far too many were lost since the last commit, stop (``no-progress``)."""
        self.lost_since_commit += 1
        self._losses_total += 1
        if self.status != "running" or self.lost_since_commit < self._no_progress_limit():
            return
        self.status = "no-progress"
        self.stop_message = (
            f"no step committed in {self.lost_since_commit} worker losses since step {self.step} "
            f"(t={self.last_commit_T:.1f} s; now t={self.T:.1f} s, {self.retries} aborted rounds): workers are revoked "
            f"before a mini-batch (about {self.mean_step_s:.3g} s of virtual time) completes, so the market makes "
            f"progress impossible; stopped with status no-progress")

    def _handle_market(self, ev: MarketEvent) -> None:
        w = ev.worker
        if ev.kind == "notice":
            if w in self.members:
                self.counters.notices += 1
                revoke_at = ev.revoke_at if ev.revoke_at is not None else ev.t + float(self.market.revocation.notice_s or 0.0)
                self.log.emit("notice", worker=w, revoke_at=revoke_at)
                if self.step > self.last_ckpt_step:
                    self._checkpoint("notice")
        elif ev.kind == "revoke":
            if w in self.members:
                self._drop_member(w, "market")
        elif ev.kind == "available":
            if w < self.provisioned and w not in self.members:
                self._add_member(w, self.provider.acquire(w))

    def _drain_market(self, until: float) -> None:
        """Apply every scheduled market event up to ``until`` (advancing the clock to each)."""
        while True:
            t = self.provider.peek_time()
            if t is None or t > until:
                break
            ev = self.provider.pop_event()
            self.clock.advance_to(ev.t)
            self._emit_prices()
            self._handle_market(ev)

    def _iteration_market(self) -> None:
        mask = np.zeros(self.max_workers, dtype=bool)
        mask[list(self.members)] = True
        for ev in self.provider.iteration_events(self.T, mask):
            self._handle_market(ev)

    # ================================================================== time and money
    @property
    def sync_strategy(self) -> SyncStrategy:
        """The strategy of the current ``sync``/``sync_n`` (which checkpoints, events and SwitchSync use)."""
        return make_sync(self.sync, self.sync_n)

    def _draw(self) -> float:
        return float(self.time_law.draw(self.dur_rng))

    def _finish_time(self, start: float) -> float | None:
        """When a mini-batch started at ``start`` completes: drawn (virtual clock) or ``None`` (measured)."""
        d = self.clock.duration(self._draw)
        return None if d is None else start + d

    def _ready(self, refs: dict[int, Any]) -> ReadyFn:
        """``ready(slots, k, timeout)`` over ``refs`` for :meth:`Clock.next_done` (the data plane waits)."""
        return lambda slots, k, timeout: self.compute.wait({w: refs[w] for w in slots}, k, timeout)

    def _emit_prices(self) -> None:
        prices = self.market.prices
        lo = self.last_price_T
        if lo < 0:
            self.log.emit("price", t=0.0, instance=self.market.instance.name, price=float(prices.value_at(0.0)))
            lo = 0.0
        for t in prices.change_points(lo, self.T + 1e-9):
            self.log.emit("price", t=float(t), instance=self.market.instance.name, price=float(prices.value_at(t)))
        self.last_price_T = self.T

    def cost_so_far(self) -> float:
        return float(self.carried_cost.get("total", 0.0)) + self.ledger.cost_until(self.T)

    # ================================================================== the loop
    def _done(self) -> bool:
        if self.status == "no-progress":
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
        try:
            while not self._done():
                self._drain_market(self.T)
                if not self.members:
                    if not self._idle():
                        self.status = "no-capacity"
                        break
                    continue
                if self.sync_strategy.barrier:
                    self._barrier_round()
                else:
                    self._continuous_tick()
            summary = self._finish()
            if self.status == "no-progress":
                raise NoProgressError(self.stop_message or "no step committed", progress_fix(self.market, self.mean_step_s),
                                      summary)
            return summary
        finally:
            self._shutdown()

    def _idle(self) -> bool:
        """No active worker: let time pass until capacity returns (billed: the coordinator).

        Virtual time jumps to the next scheduled capacity change (or one iteration of a
        per-iteration market); requested capacity (a real cluster) is polled for up to the
        provider's ``capacity_timeout_s``.  False when no capacity can come.  The idle period is
        logged (``idle``, ``t`` = its end) once workers are back or the wait is given up.
        """
        if self._idle_since is None:
            self._idle_since = self.T
        if self.provider.iteration_driven:
            self.clock.advance(self.mean_step_s)
            self._iteration_market()
        else:
            t = self.provider.peek_time()
            if t is not None and t < self.market.horizon_s:
                self._drain_market(t)
            elif self.provider.requests_capacity and self.T - self._idle_since < self.provider.capacity_timeout_s:
                self._poll_joins(timeout=0.25)
            else:
                self._end_idle()
                return False
        if self.members:
            self._end_idle()
        return True

    def _end_idle(self) -> None:
        """Close the idle period in progress (if any): count it and log it."""
        if self._idle_since is None:
            return
        start, self._idle_since = self._idle_since, None
        if self.T > start:
            self.counters.idle_s += self.T - start
            self.log.emit("idle", start=start, duration=self.T - start)  # t = when the idle period ends

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
        results.update(self.compute.gather({w: refs[w] for w in done}))
        for w in done:
            if w in results or w not in blocks:
                continue
            try:
                results[w] = self.compute.result(w, refs[w])
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

    def _get(self, w: int, ref: Any) -> tuple[np.ndarray, float, int, float, dict[str, Any] | None]:
        """One result; :class:`WorkerLost` if its worker died."""
        return self.compute.result(w, ref)

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

    # ================================================================== commit
    def _commit(self, contribs: list[Contribution]) -> None:
        if not contribs:
            raise RuntimeError("a step needs at least one contribution")
        total = sum(c.n for c in contribs)
        grad = np.zeros_like(self.params)
        loss = 0.0
        for c in contribs:
            grad += (c.n / total) * c.grad
            loss += (c.n / total) * c.loss
            self.sampler.commit(c.block)
        self.counters.samples += total
        self.state.apply(grad, self.lr, len(contribs))
        self.step += 1
        self.clock.advance(self.commit_overhead_s)  # Delta (virtual); measured time already holds it
        duration = self.T - self.last_commit_T
        self.last_commit_T = self.T
        self.last_loss = loss
        self.ema_loss = loss if self.ema_loss is None else 0.9 * self.ema_loss + 0.1 * loss
        recovery_ms = None
        if self.kill_wall is not None:
            recovery_ms = 1000.0 * (time.perf_counter() - self.kill_wall)
            self.counters.recoveries_ms.append(recovery_ms)
            self.kill_wall = None
        self._emit_prices()
        cost = self.cost_so_far()
        self.log.emit("step", step=self.step, loss=loss, active=len(self.members), lr=self.lr, sync=self.sync,
                      duration=duration, cost=cost, epoch=self.sampler.epoch, retries=self.retries,
                      contributions=len(contribs), lost=self.lost_in_step,
                      staleness=max(c.staleness for c in contribs), recovery_ms=recovery_ms)
        self.retries = 0
        self.lost_in_step = 0
        self.lost_since_commit = 0
        self._commits += 1
        if self.status == "no-progress":  # the round in flight committed after all
            self.status, self.stop_message = "running", None
        if self.step % self.spec.workload.eval_every == 0:
            self._evaluate()
        self._apply_policies()
        every = self.spec.outputs.checkpoint_every
        if every and self.step % every == 0:
            self._checkpoint("periodic")
        if self.progress is not None:
            self.progress(self.snapshot())

    @property
    def params(self) -> np.ndarray:
        """The current parameters (a flat float32 vector, owned by :attr:`state`)."""
        return self.state.params

    @params.setter
    def params(self, value: np.ndarray) -> None:
        self.state.params = value

    def _evaluate(self) -> dict[str, float]:
        if not self.state.can_evaluate:
            return {}
        self.last_eval = self.state.evaluate()
        name = self.state.metric_name
        self.log.emit("eval", step=self.step, loss=self.last_eval.get("loss"), metric_name=name,
                      metric=None if name is None else self.last_eval.get(name))
        return self.last_eval

    def snapshot(self) -> dict[str, Any]:
        return {"step": self.step, "target": self.spec.target.iterations, "loss": self.last_loss, "active": len(self.members),
                "provisioned": self.provisioned, "t": self.T, "cost": self.cost_so_far(), "status": self.status}

    # ================================================================== policies
    def _observation(self) -> Observation:
        return Observation(
            step=self.step, t=self.T, active=len(self.members), provisioned=self.provisioned,
            max_workers=self.max_workers, reference_workers=self.spec.cluster.workers, base_lr=self.base_lr, lr=self.lr,
            sync=self.sync, sync_n=self.sync_n, loss=self.last_loss, price=self.market.spot_price(self.T),
            cost_so_far=self.cost_so_far(), deadline_s=self.spec.deadline_s, budget_usd=self.spec.budget_usd,
            target_iterations=self.spec.target.iterations, market=self.market_name,
            spot_available=self.provider.spot_available(self.T), step_s=self.expected_step_s(), restart_s=self.restart_s,
            place=(self.region or self.market.instance.region or "", self.market.instance.name),
            on_demand_price=self.market.instance.on_demand_per_hour,
        )

    @property
    def market_name(self) -> str:
        """What the workers run on now, as policies name it: ``"spot"`` or ``"on-demand"``."""
        return "on-demand" if self.worker_market == "on_demand" else "spot"

    def expected_step_s(self) -> float:
        """Mean seconds per committed step for the current membership (at least one worker): the
        sync strategy's ``E[R]`` under the mini-batch time law, commit overhead included."""
        n = max(1, len(self.members) or self.provisioned)
        return float(self.sync_strategy.expected_round_s(self.time_law, n, self.delta))

    def _apply_policies(self) -> None:
        if not self.policies:
            return
        obs = self._observation()
        for policy in self.policies:
            for d in policy.decide(obs):
                self._act(policy, d)

    def _act(self, policy: Policy, d: Decision) -> None:
        acted = True
        why_not: str | None = None
        if isinstance(d, SetLearningRate):
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
        elif isinstance(d, CheckpointDecision):
            self._checkpoint("policy")
        elif isinstance(d, SwitchMarket):
            why_not = self._switch_market(d.market)
            acted = why_not is None
        elif isinstance(d, Migrate):
            why_not = self._migrate(d)
            acted = why_not is None
        elif isinstance(d, Noop):
            acted = False
        else:
            acted, why_not = False, f"{type(d).__name__} is not a decision this executor knows"
        self.counters.decisions += 1
        extra = {} if why_not is None else {"not_acted": why_not}
        self.log.emit("decision", policy=policy.name, decision=d.describe(), reason=d.reason, acted=acted, **extra)

    # ------------------------------------------------------------------ market switches and migrations
    def _switch_market(self, market: str) -> str | None:
        """Run the workers on ``market`` from now on; ``None`` if done, else why not.

        Checkpoint, release every worker (their billing stops), switch the provider's capacity,
        then the restart: the new workers are billed from now but join only ``restart_s`` later
        (:meth:`_restart`).  Logged as a ``market_switch`` event (from, to, restart cost).
        """
        if not self.provider.supports_markets:
            return "the provider cannot switch markets (a real cluster's capacity is what it is)"
        old = self.market_name
        if market == old:
            return f"the workers already run on {market}"
        try:
            self.market.on_demand_price  # noqa: B018  (on-demand billing needs it: refuse before releasing anything)
        except InputError as e:
            return e.message
        t0 = self.T
        self._checkpoint("market-switch")
        self._release_all()
        self.provider.switch_market(market, self.T)
        self.worker_market = LEDGER_MARKET[market]
        cost = self._restart()
        self.log.emit("market_switch", **{"from": old, "to": market}, start=t0, restart_s=self.T - t0, cost=cost,
                      active=len(self.members))
        return None

    def _migrate(self, d: Migrate) -> str | None:
        """Move the job to ``d.instance_type`` in ``d.region``; ``None`` if done, else why not.

        The new place's market (:func:`~spotwise.market.world.market_for_place`: its prices,
        revocation model, throughput) replaces the current one; the workers are released and
        re-acquired there with a restart as for a market switch (:meth:`_switch_market`), on the
        market in force.  Logged as a ``migrate`` event (from, to, restart cost).
        """
        if not self.provider.supports_migration:
            return "the provider cannot move the job to another place"
        if d.cloud is not None and d.cloud != self.market.instance.cloud:
            return f"moving to another cloud ({d.cloud}) is not supported"
        region = d.region if d.region is not None else self.region
        old = (self.region or self.market.instance.region or "", self.market.instance.name)
        if (region or "", d.instance_type) == (self.region or "", self.market.instance.name):
            return "the job already runs there"
        try:
            place = market_for_place(self.spec, d.instance_type, region, self.market.catalog, self.market.horizon_s)
            if self.worker_market == "on_demand":
                place.on_demand_price  # noqa: B018
        except InputError as e:
            return f"no market for {d.instance_type} in {region or 'any region'}: {e.message}"
        t0 = self.T
        self._checkpoint("migrate")
        self._release_all()
        self.provider.migrate(place, self.T)
        self._enter_place(place, region)
        self.log.emit("price", instance=self.market.instance.name, price=self.market.spot_price(self.T))
        self.last_price_T = self.T
        cost = self._restart()
        self.log.emit("migrate", **{"from": list(old), "to": [region or "", self.market.instance.name]}, start=t0,
                      restart_s=self.T - t0, cost=cost, active=len(self.members))
        return None

    def _enter_place(self, place: Market, region: str | None) -> None:
        """The job's market is ``place``'s from now on (prices, instance, throughput); the coordinator stays."""
        self.market = dataclasses.replace(place, coordinator=self.market.coordinator)
        self.region = region
        self.mean_step_s = self.market.step_seconds(self.spec.workload.family, float(self.spec.workload.step_time_s))
        self.time_law = MiniBatchTimeLaw(self.mean_step_s, self.straggler)

    def _release_all(self) -> None:
        for w in sorted(self.members):
            self._drop_member(w, "released")

    def _restart(self) -> float:
        """New capacity starts: billed from now, it computes only ``restart_s`` later; returns the
        cost of the restart window (everything billed in it, the coordinator included).

        Market events in the window are applied in order: a slot that gets capacity starts then
        (billed from then), a starting slot that is revoked is billed until its revocation and
        does not join.  At the end of the window every started slot joins.
        """
        t0 = self.T
        c0 = self.cost_so_far()
        t_end = t0 + self.restart_s
        if self.provider.iteration_driven:
            self._iteration_market()
        starting = {w: t0 for w in sorted(self.provider.available_at_start()) if w < self.provisioned}
        while (t := self.provider.peek_time()) is not None and t <= t_end:
            ev = self.provider.pop_event()
            self.clock.advance_to(ev.t)
            self._emit_prices()
            w = ev.worker
            if ev.kind == "available" and w < self.provisioned:
                starting.setdefault(w, ev.t)
            elif ev.kind == "revoke" and w in starting:
                iid = f"worker-{w}"
                self.ledger.start(iid, starting.pop(w), self._worker_price(), category="worker", market=self.worker_market)
                self.ledger.stop(iid, ev.t, reason="revoked")
                self.counters.revocations += 1
                self.log.emit("revoke", worker=w, reason="market", active=len(self.members), starting=True)
        self.clock.advance_to(t_end)
        self._emit_prices()
        for w, since in sorted(starting.items()):
            self._add_member(w, self.provider.acquire(w), billed_from=since)
        self.counters.restarts += 1
        self.counters.restart_s += self.T - t0
        return self.cost_so_far() - c0

    def _reconcile(self) -> None:
        """Membership after the market changed under us (rebids): drop the outbid, add the newly won."""
        avail = self.provider.available_at_start()
        for w in sorted(self.members):
            if w not in avail:
                self._drop_member(w, "market")
        for w in sorted(avail):
            if w < self.provisioned and w not in self.members:
                self._add_member(w, self.provider.acquire(w))

    def _resize(self, n: int) -> None:
        old = self.provisioned
        self.provisioned = max(0, n)
        for w in sorted(self.members):
            if w >= self.provisioned:
                self._drop_member(w, "released")
        if self.provisioned > old:
            avail = self.provider.available_at_start()
            for w in range(old, self.provisioned):
                if w in avail and w not in self.members:
                    self._add_member(w, self.provider.acquire(w))
        for w in range(old, self.provisioned):
            if w not in self.members:
                self.provider.request(w)  # requested capacity: joins through _poll_joins
        for w in range(self.provisioned, old):
            self.provider.cancel(w)

    # ================================================================== checkpoints
    def _checkpoint(self, why: str) -> None:
        cost = self._cost_breakdown(final=False)
        state = {
            "format": 1, "step": self.step, "params": torch.from_numpy(self.params.copy()), "lr": self.lr, "T": self.T,
            "sampler": self.sampler.state(), "dur_rng": json.dumps(self.dur_rng.bit_generator.state),
            **self.provider.market_state(), "provisioned": self.provisioned,
            "place": [self.market.instance.name, self.region], "worker_market": self.worker_market,
            "sync": self.sync, "sync_n": self.sync_n, "ema_loss": self.ema_loss,
            "counters": {k: v for k, v in self.counters.__dict__.items() if k != "recoveries_ms"}, "cost": cost,
            "ledger": self._ledger_state(),
        }
        path = save_checkpoint(self.out, self.step, state)
        self.last_ckpt_step = self.step
        self.counters.checkpoints += 1
        self.log.emit("checkpoint", step=self.step, path=str(path), why=why)

    # ================================================================== the end
    def _cost_breakdown(self, final: bool) -> dict[str, Any]:
        bd = self.ledger.breakdown(self.T) if not final else self.ledger.breakdown()
        out: dict[str, Any] = {"total": float(self.carried_cost.get("total", 0.0)) + sum(bd["by_category"].values())}
        for key in ("by_category", "by_market", "by_instance"):
            merged = dict(self.carried_cost.get(key, {}))
            for k, v in bd.get(key, {}).items():
                merged[k] = merged.get(k, 0.0) + float(v)
            out[key] = merged
        return out

    def on_demand_estimate(self) -> dict[str, Any]:
        """Expected time and cost of the *same work* on ``cluster.workers`` on-demand workers.

        Like for like: the same number of samples as this run committed (not the same number of
        steps -- a spot step with fewer active workers holds fewer samples), the same runtime
        model (eq. 14-15 of ``papers/000_3c734f3ffedcac15.txt``), the coordinator included, every
        instance billed by the market's billing policy.  A model estimate (``basis: "model"``):
        the demo and ``run --compare-on-demand`` replace it by a measured baseline run, which
        also reports the baseline's accuracy.  The time of a step is the sync strategy's
        closed-form expectation under the run's mini-batch time law
        (:meth:`~spotwise.runtime.sync.SyncStrategy.expected_round_s`).
        """
        n = self.spec.cluster.workers
        strategy = self.sync_strategy
        per = strategy.expected_round_s(self.time_law, n, self.delta)
        samples = int(self.counters.samples)
        steps = math.ceil(samples / strategy.samples_per_step(n, self.batch))
        t = float(per * steps)
        od = self.market.on_demand_price
        bill = self.ledger.on_demand_policy
        cost = n * bill.charge(od, 0.0, t) + bill.charge(float(self.market.coordinator.on_demand_per_hour or 0.0), 0.0, t)
        return {"basis": "model", "workers": n, "samples": samples, "steps": steps, "time_s": t, "cost_usd": float(cost),
                "worker_price_per_hour": od, "metric": None}

    def _finish(self) -> RunSummary:
        self._end_idle()
        if self.step > self.last_ckpt_step:
            self._checkpoint_quiet()  # before the ledger closes: it holds the open intervals
        for w in sorted(self.members):
            self.ledger.stop(f"worker-{w}", self.T, reason="finished")
        self.ledger.close(self.T)
        final_eval = self._evaluate()
        cost = self._cost_breakdown(final=True)
        self.log.emit("cost", total=cost["total"], breakdown=cost)
        self.log.emit("end", status=self.status)
        self.log.close()
        rec = self.counters.recoveries_ms
        extra: dict[str, Any] = {
            "deadline_s": self.spec.deadline_s,
            # an unfinished run has not met its deadline, however early it stopped (issue 7 item 9)
            "deadline_met": None if self.spec.deadline_s is None else (
                self.status == "completed" and self.T <= self.spec.deadline_s),
            "idle_s": self.counters.idle_s, "notices": self.counters.notices, "aborted_steps": self.counters.aborted_steps,
            "checkpoints": self.counters.checkpoints, "epochs": self.sampler.epoch, "stop_message": self.stop_message, "samples": self.counters.samples,
            "recovery_ms": {"count": len(rec), "median": float(np.median(rec)) if rec else None,
                            "p99": float(np.percentile(rec, 99)) if rec else None},
            "on_demand": self.on_demand_estimate() if self.step else None,
            "final_eval": final_eval, "instance": self.market.instance.name, "sync": self.sync, "lr": self.lr,
        }
        summary = RunSummary(
            mode=self.mode, status=self.status, steps=self.step, final_loss=final_eval.get("loss", self.last_loss),
            final_metric=None if self.state.metric_name is None else final_eval.get(self.state.metric_name),
            metric_name=self.state.metric_name,
            wall_s=time.perf_counter() - self.wall0, virtual_s=self.T, cost_usd=cost["total"], cost_breakdown=cost,
            revocations=self.counters.revocations, joins=self.counters.joins, decisions=self.counters.decisions,
            spec=self.spec.to_dict(), plan=None, extra=extra,
        )
        write_summary(self.out, summary)
        return summary

    def _checkpoint_quiet(self) -> None:
        """A final checkpoint without a log event (so a resume of a finished run is a no-op).

        Taken before the ledger is closed, so it records the intervals still open at ``T`` and a
        resume continues them (issue 7 item 6) instead of billing them as released.
        """
        state_log = self.log
        self.log = _NullLog()  # type: ignore[assignment]
        try:
            self._checkpoint("final")
        finally:
            self.log = state_log

    def _shutdown(self) -> None:
        for w, actor in list(self.members.items()):
            try:
                self.provider.kill(w, actor)
            except Exception:
                pass
        self.members.clear()
        self.provider.shutdown()


#: below this chance that a round commits (more than 1000 attempts per step) a spec is refused
MIN_ROUND_SUCCESS = 1e-3


def mini_batch_survival(model: RevocationModel, mean_step_s: float, straggler: float) -> float | None:
    """P(a worker that starts a mini-batch is not revoked before it finishes); ``None`` if unknown.

    The mini-batch lasts ``r = m ((1 - s) + s E)``, ``E ~ Exp(1)`` (the coordinator's runtime model,
    ``papers/000_3c734f3ffedcac15.txt`` eq. 14 for ``s = 1``).  Exponential lifetimes (mean
    ``mttf``): ``exp(-m (1 - s) / mttf) / (1 + m s / mttf)`` (a lifetime cap is ignored, which
    only overestimates survival).  Empirical lifetimes ``L`` (paper 002): the mean over the table
    of ``P(r < L)``.  Bernoulli (per iteration): ``1 - q``.  Bid and trace markets, and scripted
    ones: ``None`` (their capacity is not a lifetime distribution).
    """
    m, s = float(mean_step_s), float(straggler)
    if isinstance(model, ExponentialLifetime):
        mttf = float(model.mttf_s)
        return math.exp(-m * (1.0 - s) / mttf) / (1.0 + m * s / mttf)
    if isinstance(model, LifetimeRevocation):
        life = np.minimum(np.asarray(model.lifetimes_s, dtype=float), float(model.cap_s))
        lo = m * (1.0 - s)
        if s == 0.0:
            return float(np.mean(life > m))
        with np.errstate(over="ignore"):
            p = np.where(life > lo, 1.0 - np.exp(-(life / m - (1.0 - s)) / s), 0.0)
        return float(np.mean(p))
    if isinstance(model, BernoulliRevocation):
        return 1.0 - float(model.q)
    return None


def progress_fix(market: Market, mean_step_s: float) -> str:
    """How to make a market in which no step commits usable (the fix half of the error message)."""
    model = market.revocation
    m = f"{mean_step_s:.3g} s"
    if isinstance(model, ExponentialLifetime):
        return (f"raise market.revocation.mttf_s (now {model.mttf_s:g} s) well above a step's {m} (e.g. >= {10 * mean_step_s:.3g}), "
                "or shorten workload.step_time_s / use a faster cluster.instance_type")
    if isinstance(model, LifetimeRevocation):
        return (f"use a lifetime table (market.revocation.lifetimes) of instances that live longer than a step's {m}, "
                "or shorten workload.step_time_s / use a faster cluster.instance_type")
    if isinstance(model, BernoulliRevocation):
        return f"lower market.revocation.q (now {model.q:g}) well below 1"
    if isinstance(model, BidRevocation):
        return f"raise cluster.bids so that workers keep their capacity for more than a step's {m} (see `spotwise plan`)"
    return f"use a market whose workers live longer than a step's {m}, or shorten workload.step_time_s"


def check_progress_possible(spec: JobSpec, market: Market) -> None:
    """Refuse a spec whose workers cannot outlive a mini-batch (issue 7 item 17, up-front half).

    A round commits when at least one of ``max_workers`` workers finishes its mini-batch before
    it is revoked: ``1 - (1 - p)^n`` with ``p`` from :func:`mini_batch_survival`.  Below
    :data:`MIN_ROUND_SUCCESS` (more than 1000 attempts per step on average) the run could not make
    progress, so this raises :class:`InfeasibleError` (CLI exit 2) naming the parameter to change.
    Markets whose survival is not a known distribution pass (the runtime detection covers them).
    """
    cl = spec.cluster
    m = market.step_seconds(spec.workload.family, float(spec.workload.step_time_s))
    p = mini_batch_survival(market.revocation, m, float(cl.straggler))
    if p is None:
        return
    n = max(cl.workers, cl.max_workers or cl.workers)
    p_round = 1.0 - (1.0 - p) ** n
    if p_round >= MIN_ROUND_SUCCESS:
        return
    model = market.revocation
    if isinstance(model, ExponentialLifetime):
        life = f"a mean worker lifetime of mttf_s={model.mttf_s:g} s"
    elif isinstance(model, LifetimeRevocation):
        life = f"worker lifetimes of {model.capped_mean_s:.3g} s on average"
    else:
        life = f"a per-iteration revocation probability q={getattr(model, 'q', float('nan')):g}"
    odds = f"about 1 in {1.0 / p_round:.3g}" if p_round > 0 else "never"
    raise InfeasibleError(
        f"the market makes progress impossible: {life} against about {m:.3g} s of virtual time per mini-batch; "
        f"a round of {n} worker(s) commits {odds}", progress_fix(market, m), "market.revocation")


def _merge_costs(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Sum two cost breakdowns (``total`` plus the ``by_*`` maps)."""
    out: dict[str, Any] = {"total": float(a.get("total", 0.0)) + float(b.get("total", 0.0))}
    for key in ("by_category", "by_market", "by_instance"):
        merged = {k: float(v) for k, v in a.get(key, {}).items()}
        for k, v in b.get(key, {}).items():
            merged[k] = merged.get(k, 0.0) + float(v)
        out[key] = merged
    return out


class _NullLog:
    def emit(self, *a: Any, **k: Any) -> None:
        return None


def worker_args_for(spec: JobSpec, notices: dict[str, Any] | None = None) -> tuple[Any, ...]:
    """Constructor arguments of a worker actor for ``spec`` (workload, seed, threads, notice watcher)."""
    return (to_plain(spec.workload), spec.seed, 1, notices)


def load_run_spec(out_dir: str | Path) -> JobSpec:
    """The spec a run directory was started with (for ``--resume``).

    InputError (exit 2) when ``spec.json`` is missing, unreadable, not UTF-8 (binary), not JSON
    (truncated), not one object, or not a valid job spec -- naming the file and how to fix it.
    """
    path = Path(out_dir) / SPEC_FILE
    if not path.exists():
        raise InputError("not a spotwise run directory (no spec.json)", "pass the --out directory of an earlier `spotwise run`",
                         str(out_dir))
    fix = "restore spec.json from a backup, or start the run again with `spotwise run SPEC --out DIR`"
    try:
        data = json.loads(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError:
        raise InputError("spec.json is not UTF-8 text (binary or corrupted)", fix, str(path)) from None
    except ValueError as e:  # JSONDecodeError: truncated or not JSON
        raise InputError(f"spec.json is not valid JSON (truncated or corrupted: {e})", fix, str(path)) from None
    except OSError as e:
        raise InputError(f"spec.json cannot be read ({e.strerror or e})", "check the file's permissions", str(path)) from None
    if not isinstance(data, dict):
        raise InputError("spec.json must hold one JSON object (the job spec)", fix, str(path))
    try:
        return spec_from_dict(data, str(path))
    except InputError:
        raise
    except (TypeError, ValueError, KeyError, AttributeError) as e:  # a hand-edited spec of the wrong shape
        raise InputError(f"spec.json is not a valid job spec ({e.__class__.__name__}: {e})", fix, str(path)) from None


def has_checkpoint(out_dir: str | Path) -> bool:
    return load_latest_checkpoint(out_dir) is not None
