"""A collective member: trains its replica and all-reduces with its peers, with no coordinator in the step.

This is the worker of the collective data plane (issue 10; ``papers/001_30a454edd897cf47.txt``,
Spotnik).  A member is a long-lived process (a Ray actor, :func:`remote_member_class`) that holds
its model replica and data cursor (:mod:`spotwise.planes.collective.replica`) and runs
:meth:`CollectiveMember.run`: it joins generation ``g`` of the :class:`~spotwise.planes.collective.group.ElasticGroup`
the coordinator announced (a :class:`Plan` under ``plan/<g>`` in the shared store), takes the
state of the generation's *source*, and commits steps until the generation fails.  The
coordinator is not in the step's path: it only raises the *lease* (the highest step members may
commit: the emulated market's next event), reads the steps' records and the parameter replicas
the leader pushes, and flags a generation failed to change it.

**Strategies** (Sec. 3.3):

* ``ssgd`` -- S-SGD: each member computes the gradient of its mini-batch; every replica applies
  the same sample-weighted mean.  The step runs on PyTorch's own DDP machinery
  (:mod:`spotwise.planes.collective.bucketed`, issue 40): the model is wrapped in
  ``DistributedDataParallel`` over the generation's process group, whose Reducer all-reduces the
  gradient buckets while the backward pass runs (a comm hook weights each member's bucket by its
  share ``n_i / n`` of the step's samples); a second, small all-reduce sums ``(n_i buffers_i,
  n_i loss_i, n_i)``, and the step's one host read takes the loss, the sample count and the
  reduced gradient's norm (a non-finite one stops every member alike).  Only a step where some
  member's block is empty (an epoch's end split over more members than it has samples left), a
  sparse-gradient workload or a model without a trainable parameter takes the flat path: one
  all-reduce of ``(n_i g_i, n_i buffers_i, n_i loss_i, n_i)`` after the backward pass.
* ``sma`` -- synchronous model averaging: each member takes ``local_steps`` local SGD steps on
  its own mini-batches, then one all-reduce averages the replicas (weighted by samples).
* ``adpsgd`` -- asynchronous decentralised SGD: each member averages its replica with one partner
  per step (a seeded perfect matching) and applies its own gradient; only pairs wait for each
  other.  Every ``BARRIER_EVERY`` steps (and at the lease) a one-element all-reduce is the commit
  point: each member keeps its replica there and sends its records; the coordinator logs a step
  once every member's record of it arrived.  After a failure every survivor goes back to its
  replica at the last barrier any survivor completed (all members entered it, so all hold it)
  and the members average those replicas (``Plan.reconcile = "snapshot"``); a revoked member's
  replica is lost with it, as in AD-PSGD, whatever it had mixed into its partners' stays.

**Atomic commit** (Sec. 3.2, "Atomic worker state update").  A member changes its replica only
once the step's all-reduce has completed (S-MA: it keeps the round's starting replica and puts it
back if the all-reduce fails).  When a generation fails, each survivor reports the last step it
committed; an all-reduce that completed on *any* member summed every member's contribution, so
the coordinator *rolls forward*: the next generation's source is a survivor with the highest
step, and every member (the one step behind, and joiners) takes its replica and cursor by
broadcast.  A step is therefore applied by every survivor or by none (then it is retried with the
new membership, on the same samples).  The replica is received into a scratch buffer and adopted
only when the broadcast succeeds, so a failure during the regroup leaves every replica whole.

**Records.** A step's record (loss, samples, cursor, wall time, evaluation) is sent by the
generation's leader (its source, else its lowest member) only once it is known that *every*
member committed the step: after the leader's next step (which needed everyone's contribution)
or after a one-element all-reduce at the lease.  So the coordinator never logs a step that a
regroup could take back.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import deque
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import numpy as np
import torch

from spotwise.planes.collective.bucketed import load_ddp_machinery
from spotwise.planes.collective.faults import inject
from spotwise.planes.collective.heartbeat import WorkBeat
from spotwise.planes.collective.moving import whole_state_needed
from spotwise.planes.collective.offers import OfferSchedule, ReplicaOffers
from spotwise.planes.collective.group import ElasticGroup, GroupFailed, StoreAddress, node_address
from spotwise.planes.collective.plan import (NO_LIMIT, STRATEGIES, Plan, decode_lease, gossip_partner,  # noqa: F401  (re-exported)
                                            leader_works_after)
from spotwise.planes.collective.step_gate import flag_failed
from spotwise.planes.collective.waits import until_failed, wait_lease
from spotwise.planes.collective.replica import DataCursor, Replica
from spotwise.planes.collective.script_member import (ScriptReplica, ScriptStopped, prepare_script_member, ready_to_form,
                                                     report_script_end, script_step, with_metrics)
from spotwise.elastic.host import ScriptHost
from spotwise.planes.collective.steps import Diverged, adpsgd_step, sma_step, ssgd_step  # noqa: F401  (Diverged re-exported)
from spotwise.training import tensor_tree
from spotwise.training.recipe import LrSchedule, Recipe
from spotwise.training.state import check_precision_device, decode_extra, encode_extra
from spotwise.workloads.base import is_ordered
from spotwise.workloads.device import collective_backend, resolve_device, to_host


#: a replica moves to the coordinator in chunks of this many bytes (:meth:`CollectiveMember.take_replica`)
REPLICA_CHUNK_BYTES = 32 << 20


#: AD-PSGD: steps between two barriers (a one-element all-reduce): the commit points of its steps
BARRIER_EVERY = 8
#: the leader sends its records at most this often while steps run (seconds)
FLUSH_S = 0.005
#: the leader looks for a replica request at most this often (seconds)
CONTROL_S = 0.002


#: why a member fails a fresh run's first generation: the workload built different initial parameters
#: in this process than in the coordinator's (a model initialised without the seed); the coordinator
#: then hands over its own parameters
INIT_DIFFERS = "its initial parameters differ from the coordinator's (digest)"


class CollectiveMember:
    """Plain-Python member; :func:`remote_member_class` makes it a Ray actor (module docstring)."""

    def __init__(self, workload: dict[str, Any], seed: int, threads: int = 1, device: str = "cpu") -> None:
        from spotwise.config import WorkloadSpec
        from spotwise.spec.load import build
        from spotwise.workloads.registry import make_workload

        torch.set_num_threads(max(1, int(threads)))
        dev = resolve_device(device)  # first: a worker without the device it was asked for fails at once
        self.spec = build(WorkloadSpec, workload, "workload")
        #: issue 41: the user's own loop (``workload.script``), run in a thread of this process
        self.host: ScriptHost | None = None
        self.replica: Replica | ScriptReplica
        self.device, self.seed = dev, int(seed)
        #: how a script that stopped before its first batch ended (issue 55: it starts at the first plan)
        self.start_failed: Any = None
        if self.spec.script is not None:
            # started at its first plan, knowing its rank (script_member.ready_to_form); warm until then
            self.replica, self.cursor = None, None  # type: ignore[assignment]
            prepare_script_member()
        else:
            self.workload = make_workload(self.spec, seed)
            #: the model, the flat parameter and gradient buffers and the batches live on the device;
            #: every collective runs on them (NCCL for CUDA tensors, gloo for CPU tensors)
            recipe = Recipe(self.spec.optimizer_spec, None, self.spec.grad_clip_norm, int(self.spec.accumulate),
                            str(self.spec.precision))
            check_precision_device(recipe.precision, dev)
            #: ``workload.loader.num_workers > 0``: batches built ahead by DataLoader workers (:meth:`_train`)
            self.replica = Replica(self.workload, dev, recipe, float(self.spec.lr), self.spec.loader)
            load_ddp_machinery()  # S-SGD wraps the model in DDP at a generation's first step
            #: a stream (``is_ordered``): the identity order, member r reads positions [pos + r*b, pos + (r+1)*b)
            self.cursor = DataCursor(len(self.workload.train), int(seed), ordered=is_ordered(self.workload))
        #: issue 28 item 3: state the coordinator hands over (a generation with no source: the run's
        #: start, a resume, every member lost) and replicas it collects -- through Ray's object store
        #: by actor calls (this actor is threaded), never through the rendezvous store
        self._inbox: dict[int, tuple[dict[str, Any], np.ndarray | None, bytes]] = {}
        #: the leader's replica offers, copied between steps and serialised off the training thread
        #: (:mod:`~spotwise.planes.collective.offers`; made when the member loop starts)
        self.offers: ReplicaOffers | None = None
        self._offer_schedule = OfferSchedule(0)
        self._box_lock = threading.Lock()
        self._schedule: LrSchedule | None = None
        self.step = 0
        self.pid = os.getpid()
        self._records: deque[dict[str, Any]] = deque(maxlen=4096)
        self._sent = 0
        self._want_served = 0
        #: AD-PSGD: the last barrier this member completed, and its replicas at the last two barriers
        #: it entered (step -> (epoch, pos, parameters))
        self._barrier_done = 0
        self._snaps: dict[int, tuple[int, int, torch.Tensor]] = {}
        self._strategy = "ssgd"

    # ------------------------------------------------------------------ actor plumbing
    def ready(self) -> dict[str, Any]:
        return {"pid": self.pid, "n_params": getattr(self.replica, "P", None), "n_train": getattr(self.cursor, "n", None),
                "device": str(self.device)}

    def promote(self) -> int:
        """Leave standby: every thread back to normal CPU priority (see
        :func:`spotwise.planes.ps.worker.normal_priority`); the largest nice value left."""
        from spotwise.planes.ps.worker import normal_priority

        return normal_priority()

    def put_init(self, gen: int, head: dict[str, Any], vec: np.ndarray | None, extra: bytes = b"") -> bool:
        """The coordinator's state for generation ``gen`` (which has no source member): taken when it forms."""
        with self._box_lock:
            self._inbox = {g: v for g, v in self._inbox.items() if g > gen - 4}
            self._inbox[int(gen)] = (dict(head), None if vec is None else np.asarray(vec, dtype=np.float32), bytes(extra))
        return True

    def take_replica(self, token: int, offset: int = 0, size: int = REPLICA_CHUNK_BYTES) -> np.ndarray | None:
        """Bytes ``[offset, offset + size)`` of the replica offered under ``token`` -- its flat float32
        vector, then its encoded extra state -- or None once a newer offer replaced it.  The coordinator
        fetches it in chunks, so neither side ever puts the whole state into Ray's object store at
        once (a transfer costs one chunk of memory); the last chunk drops the offer."""
        offers = self.offers
        return None if offers is None else offers.take(token, offset, size)

    # ------------------------------------------------------------------ the member's life
    def run(self, address: StoreAddress, member: int, gen: int, timeout_s: float = 5.0,
            fault: dict[str, Any] | None = None) -> dict[str, Any]:
        """Take part in generations ``gen, gen + 1, ...`` until a plan leaves this member out or stops.

        ``fault`` (tests): ``{"step": s, "action": ..., "seconds": t}`` -- at step ``s`` this process
        exits, freezes or is held up (:mod:`~spotwise.planes.collective.faults`).
        """
        g = ElasticGroup(address, member, timeout_s=timeout_s, poll_s=0.005, check_every_s=CONTROL_S,
                         rendezvous_timeout_s=timeout_s, local_host=node_address(),
                         backend=collective_backend(self.device))
        self.member = int(member)
        self._fault = dict(fault) if fault else None
        host = self.host  # a script's own code at work shows in the beat (however little CPU it uses)
        beat = WorkBeat(lambda: address.connect(timeout_s), self.member,
                        busy=None if host is None else (lambda: host.running))
        if self.offers is None:
            self.offers = ReplicaOffers(self.device, lambda: address.connect(timeout_s))
        self.address = address
        beat.start()  # the controller sees this member at work through a long step (a compile)
        try:
            return self._run(g, gen)
        finally:
            beat.stop()

    def _run(self, g: ElasticGroup, gen: int) -> dict[str, Any]:
        regroups = 0
        self._timing: dict[str, float] = {}
        #: whether this process holds a generation's state (a joiner that never formed one does not:
        #: it reports -1, so the coordinator never takes its fresh replica for a committed one)
        self._has_state = False
        while True:
            self._timing["plan_wait"] = time.time()
            plan = self._wait_plan(g, gen)
            self._timing["plan"] = time.time()
            if plan is None or self.member not in plan.members:
                g.close()
                if self.replica is not None:  # (a script that never started has none)
                    self.replica.close()
                return {"member": self.member, "step": self.step, "gen": gen, "left": True, "regroups": regroups}
            try:
                if self.spec.script is not None:  # started at its first plan; every member ready to form
                    ready_to_form(self, g, plan)
                self._form(g, plan)
                self._timing["formed"] = time.time()
                self._take_state(g, plan)
                self._has_state = True
                self._strategy = plan.strategy
                self._barrier_done = self.step  # every member holds the same state: a barrier
                # AD-PSGD's barrier replicas (a copy of the state): only a gossip generation needs them
                self._snaps = {self.step: (self.cursor.epoch, self.cursor.pos, self.replica.flat.clone())} \
                    if plan.strategy == "adpsgd" else {}
                self._timing["state"] = time.time()
                g.store.add(f"formed/{plan.gen}", 1)
                if plan.stop:
                    if self.member == plan.leader:
                        self._sent = plan.logged
                        self._send_records(g, plan.logged, self.step)
                        self._push_replica(g, "final")
                    g.close()
                    self.replica.close()
                    return {"member": self.member, "step": self.step, "gen": gen, "left": False, "regroups": regroups}
                self._train(g, plan)
            except GroupFailed:
                if self.replica is not None:
                    self.replica.unbind()  # the next generation's S-SGD steps wrap the model anew
                    self.replica.reset_loader()  # the next generation expects its own blocks
                self._timing = {"failed": time.time()}
                # S-SGD / S-MA: the last step this member committed (the coordinator rolls forward);
                # AD-PSGD: the last barrier it completed (the coordinator rolls back to it)
                g.report_alive(-1 if not self._has_state else
                               self._barrier_done if self._strategy == "adpsgd" else self.step, gen=plan.gen)
                regroups += 1
                gen += 1

    def _wait_plan(self, g: ElasticGroup, gen: int) -> Plan | None:
        key = f"plan/{gen}"
        while True:
            try:
                g.store.wait([key], timedelta(seconds=30))
                return Plan.from_json(g.store.get(key))
            except RuntimeError as e:  # the wait timed out: the coordinator may be gone
                if "timeout" not in str(e).lower() and "timed out" not in str(e).lower():
                    return None
                try:
                    g.store.check(["lease"])
                except Exception:
                    return None

    def _form(self, g: ElasticGroup, plan: Plan) -> None:
        try:
            g.form(plan.gen, list(plan.members))
        except RuntimeError as e:  # a member never came to the rendezvous (gloo's timeout)
            flag_failed(g.store, plan.gen, f"member {self.member}: forming failed: {e}")
            raise GroupFailed(str(e)) from None

    def _take_state(self, g: ElasticGroup, plan: Plan) -> None:
        """Every member adopts the source's replica and cursor (or the coordinator's), whole or not at all.

        The whole training state moves: the flat vector (parameters and float buffers) and the
        cursor by broadcast over the group, then -- when the recipe has any -- the optimizer's,
        grad scaler's and integer buffers' state (packed bytes, :mod:`~spotwise.training.tensor_tree`, length first) the same way,
        so a joiner continues exactly as the source would (issue 28 items 2-3).  Nothing of it passes
        through the rendezvous store.
        """
        self._schedule = LrSchedule(**plan.schedule) if plan.schedule else None
        if plan.source >= 0 and plan.reconcile == "snapshot":
            self._average_snapshots(g, plan)
            return
        if plan.source >= 0 and not plan.transfer:
            return
        rep = self.replica
        if plan.source < 0:
            head, params, extra = self._wait_init(g, plan)
            with self._box_lock:  # taken: no copy of the starting state stays behind
                self._inbox.pop(plan.gen, None)
            if params is None:  # a fresh run: the coordinator's parameters are this member's initial ones
                if tensor_tree.digest(rep.flat) != head.get("digest"):
                    flag_failed(g.store, plan.gen, f"member {self.member}: {INIT_DIFFERS}")
                    raise GroupFailed(INIT_DIFFERS)
            else:
                rep.set_params(params)
            rep.load_extra_state(decode_extra(extra) if extra else None)
            self._adopt(int(head["step"]), int(head["epoch"]), int(head["pos"]))
            return
        src = self.member == plan.source
        whole = whole_state_needed(g, rep.fm, src, plan.source)  # else frozen parameters stay (issue 41)
        vec = (rep.flat if whole else rep.fm.pack_moving()) if src else rep.zeros(rep.N if whole else rep.fm.M)
        prog = rep.tensor([self.step, self.cursor.epoch, self.cursor.pos], torch.float64)
        g.broadcast(vec, plan.source)
        g.broadcast(prog, plan.source)
        extra = None
        if rep.has_extra:
            blob = encode_extra(rep.extra_state()) if src else b""
            size = rep.tensor([len(blob)], torch.int64)
            g.broadcast(size, plan.source)
            data = rep.tensor(np.frombuffer(blob, dtype=np.uint8), torch.uint8) if src else \
                rep.zeros(int(size[0]), torch.uint8)
            g.broadcast(data, plan.source)
            if not src:
                extra = decode_extra(to_host(data).tobytes())
        if not src:  # adopted only once every broadcast succeeded: a failure leaves the replica whole
            rep.fm.unpack_moving(vec)
            rep.load_extra_state(extra)
            self._adopt(int(prog[0]), int(prog[1]), int(prog[2]))

    def _wait_init(self, g: ElasticGroup, plan: Plan) -> tuple[dict[str, Any], np.ndarray | None, bytes]:
        """The coordinator's state for ``plan`` (it hands it over before announcing the plan)."""
        deadline = time.monotonic() + max(30.0, 4 * g.timeout_s)
        while True:
            with self._box_lock:
                got = self._inbox.get(plan.gen)
            if got is not None:
                return got
            if g.failed() or time.monotonic() > deadline:
                flag_failed(g.store, plan.gen, f"member {self.member}: no starting state arrived")
                raise GroupFailed("no starting state arrived")
            time.sleep(0.002)

    def _average_snapshots(self, g: ElasticGroup, plan: Plan) -> None:
        """After AD-PSGD: survivors go back to their replica at the barrier ``rollback_to`` and every
        member takes the average of those replicas (joiners, holding none, weigh 0)."""
        rep = self.replica
        snap = self._snaps.get(plan.rollback_to)
        buf = rep.zeros(rep.N + 1)
        if snap is not None:
            buf[: rep.N].copy_(snap[2])
            buf[rep.N] = 1.0
        g.allreduce(buf)
        prog = rep.tensor([plan.rollback_to, *(snap[:2] if snap is not None else (0, 0))], torch.float64)
        g.broadcast(prog, plan.source)  # the source is a survivor: it has the barrier's cursor
        rep.flat.copy_(buf[: rep.N]).div_(float(buf[rep.N]))
        self._adopt(int(prog[0]), int(prog[1]), int(prog[2]))

    def _adopt(self, step: int, epoch: int, pos: int) -> None:
        if any(r["step"] > step for r in self._records):  # records of steps rolled back
            self._records = deque((r for r in self._records if r["step"] <= step), maxlen=self._records.maxlen)
        self.step = step
        self.cursor.epoch, self.cursor.pos = epoch, pos

    # ------------------------------------------------------------------ steps
    def _train(self, g: ElasticGroup, plan: Plan) -> None:
        """Commit steps until the generation fails (raises :class:`GroupFailed`)."""
        leader = self.member == plan.leader
        if leader:
            self._sent = plan.logged
            self._send_records(g, plan.logged, self.step)
        lease = plan.lease
        next_flush = time.monotonic() + FLUSH_S
        next_ctl = time.monotonic() + CONTROL_S
        step_fn = {"ssgd": self._ssgd_step, "sma": self._sma_step, "adpsgd": self._adpsgd_step}[plan.strategy]
        if self.host is not None:
            step_fn = self._script_step
        if plan.strategy != "ssgd":
            self.replica.unbind()  # S-MA and AD-PSGD step on the flat buffers
        gossip = plan.strategy == "adpsgd"
        if gossip:
            self._sent = self.step  # the steps up to here were sent at their barriers
        first = True
        #: a user's loop runs its own code between every two steps: each of its steps passes the step
        #: gate (:func:`script_step`, beside the script's compute); a built-in workload's between-step
        #: work is the leader's evaluation and checkpoint, on the steps the plan names
        #: (:func:`leader_works_after`), where every member waits at the gate before the step
        gate_each = self.host is not None
        if self.replica.loader is not None:
            self.replica.expect(self._planned_blocks(plan))
        clock = self.replica.clock
        self._offer_schedule.every = int(plan.replica_every or 0)
        self._offer_schedule.budget = float(plan.replica_budget)
        while True:
            if self.step >= lease or self.step >= plan.max_step:
                t_wait = time.perf_counter()
                if gossip:
                    if leader_works_after(plan, self.step):
                        g.reach()
                    self._barrier(g)  # every member sends its own records, after the barrier
                else:
                    g.reach()  # every member reached this step: its records are final
                    if leader:
                        self._send_records(g, self._sent, self.step)
                lease = wait_lease(g, plan, self.member, self.step, (lambda: self._serve_want(g)) if leader else None,
                                   gate_each)
                clock.add("wait", time.perf_counter() - t_wait)
                continue
            if self._fault and self.step == int(self._fault["step"]):
                self._inject(self._fault)
            if leader and time.monotonic() >= next_ctl:
                next_ctl = time.monotonic() + CONTROL_S
                self._serve_want(g)
            if not gate_each and leader_works_after(plan, self.step):
                # every member here before the step's first collective: the leader's work between two
                # steps is waited for at the gate, never inside a collective's timeout (step_gate)
                clock.add("wait", g.reach())
            if first:
                self._timing["step_start"] = time.time()
            t_step, timed = time.perf_counter(), sum(clock.spent.values())
            try:
                rec = step_fn(g, plan)
            except Diverged as e:
                self._halt(g, plan, leader, str(e))
            except ScriptStopped as e:
                self._script_over(g, plan, leader, e.outcome)
            # what the step did not time itself (S-MA's and AD-PSGD's local steps) is compute
            clock.add("compute", time.perf_counter() - t_step - (sum(clock.spent.values()) - timed))
            rec["phases"] = clock.take()
            self._offer_schedule.observe_step(time.perf_counter() - t_step)
            if first:
                rec["first_of_gen"] = True
                rec["timing"] = dict(self._timing)
                first = False
            if leader:
                with clock.timed("state"):  # counted in the next step's phases
                    ck = plan.checkpoint_every
                    if self._offer_schedule.due(self.step) or (ck and self.step % ck == 0):
                        self._push_replica(g, "periodic")
                    if plan.eval_every and self.step % plan.eval_every == 0:
                        rec["eval"] = self.replica.evaluate()
            self._records.append(rec)
            if gossip:
                if self.step % BARRIER_EVERY == 0:
                    if leader_works_after(plan, self.step):
                        g.reach()
                    self._barrier(g)
                continue
            if leader and time.monotonic() >= next_flush:
                next_flush = time.monotonic() + FLUSH_S
                self._send_records(g, self._sent, self.step - 1)  # the step before this one is everyone's

    def _planned_blocks(self, plan: Plan) -> Iterator[np.ndarray]:
        """The blocks this member takes in ``plan``'s generation, in order, if no step fails: computed
        on a copy of the cursor (epoch wraps included) -- S-SGD and AD-PSGD block ``r`` of each step,
        S-MA blocks ``h*k + r`` for ``h < local_steps`` -- up to ``plan.max_step`` (what the replica's
        loader builds ahead; a failed step ends the generation, and the next one expects anew)."""
        cur = self.cursor.copy()
        k, r, b = len(plan.members), plan.members.index(self.member), plan.batch
        H = plan.local_steps if plan.strategy == "sma" else 1
        for _ in range(max(0, plan.max_step - self.step)):
            for h in range(H):
                yield cur.block(h * k + r, b)
            cur.advance(H * k, b)

    def _record(self, plan: Plan, loss: float, samples: int) -> dict[str, Any]:
        return {"step": self.step, "gen": plan.gen, "k": len(plan.members), "loss": loss, "samples": samples,
                "epoch": self.cursor.epoch, "pos": self.cursor.pos, "wall": time.time(), "strategy": plan.strategy}

    def _lr(self, plan: Plan) -> float:
        """This step's learning rate: the plan's base rate times the schedule at the committed samples."""
        if self._schedule is None:
            return plan.lr
        return self._schedule.lr(plan.lr, self.cursor.epoch * self.cursor.n + self.cursor.pos)

    def _ssgd_step(self, g: ElasticGroup, plan: Plan) -> dict[str, Any]:
        loss, samples = ssgd_step(g, self.replica, self.cursor, len(plan.members), plan.members.index(self.member),
                                  plan.batch, self._lr(plan))
        self.step += 1
        return self._record(plan, loss, samples)

    def _sma_step(self, g: ElasticGroup, plan: Plan) -> dict[str, Any]:
        loss, samples = sma_step(g, self.replica, self.cursor, len(plan.members), plan.members.index(self.member),
                                 plan.batch, plan.local_steps, self._lr(plan))
        self.step += 1
        return self._record(plan, loss, samples)

    def _script_step(self, g: ElasticGroup, plan: Plan) -> dict[str, Any]:
        """A step of the user's own loop (:func:`~spotwise.planes.collective.script_member.script_step`)."""
        out = script_step(self.host, self.replica, g, self.cursor, len(plan.members), plan.members.index(self.member),
                          self.step)  # (Diverged: every member saw the same all-reduced loss)
        self.step += 1
        return with_metrics(self._record(plan, out.loss, out.samples), out)

    def _script_over(self, g: ElasticGroup, plan: Plan, leader: bool, out: Any) -> None:
        """The script returned, raised or misused the API: the coordinator is told, and ends the run."""
        if leader:
            self._send_records(g, self._sent, self.step)
        report_script_end(g, plan, self.member, self.step, out)
        self._until_failed(g, plan, leader)

    def _adpsgd_step(self, g: ElasticGroup, plan: Plan) -> dict[str, Any]:
        """AD-PSGD (:func:`~spotwise.planes.collective.steps.adpsgd_step`): only the pair waits for each other."""
        loss, n, samples = adpsgd_step(g, self.replica, self.cursor, plan, plan.members.index(self.member), self.step,
                                       self._lr(plan))
        self.step += 1
        rec = self._record(plan, loss if n else float("nan"), samples)
        rec.update(member=self.member, n=n)
        return rec

    def _barrier(self, g: ElasticGroup) -> None:
        """AD-PSGD's commit point: keep this replica, all-reduce one element; every member then
        sends its own records up to here (the coordinator combines them)."""
        self._snaps[self.step] = (self.cursor.epoch, self.cursor.pos, self.replica.flat.clone())
        for s in sorted(self._snaps)[:-2]:
            del self._snaps[s]
        g.allreduce(self.replica.tensor([1.0]))
        self._barrier_done = self.step
        self._send_records(g, self._sent, self.step)

    # ------------------------------------------------------------------ talking to the coordinator
    def _halt(self, g: ElasticGroup, plan: Plan, leader: bool, why: str) -> None:
        """A step diverged (every member saw the same all-reduced loss): commit nothing more.  The
        leader sends the records up to the last good step and one ``nonfinite`` record; every member
        then waits -- serving replica requests, so the coordinator checkpoints the last good step --
        until the coordinator ends the generation (raises :class:`GroupFailed`)."""
        if leader:
            self._send_records(g, self._sent, self.step)
            g.store.queue_push("rec", json.dumps([{"step": self.step + 1, "gen": plan.gen, "nonfinite": why,
                                                   "strategy": plan.strategy}]))
        self._until_failed(g, plan, leader)

    def _until_failed(self, g: ElasticGroup, plan: Plan, leader: bool) -> None:
        until_failed(g, (lambda: self._serve_want(g)) if leader else None)

    def _serve_want(self, g: ElasticGroup) -> None:
        want = int(g.store.add("want", 0))
        if want > self._want_served:
            self._want_served = want
            self._push_replica(g, "requested")

    def _push_replica(self, g: ElasticGroup, why: str) -> None:
        """Offer the coordinator this replica (the whole training state): a copy taken now, between two
        steps, serialised off the training thread and kept here under a token; only its header goes
        through the store, once its bytes are ready, and the coordinator fetches the state in chunks
        with actor calls (:meth:`take_replica`, Ray's object store) -- any model size
        (:mod:`~spotwise.planes.collective.offers`).  The final offer is ready when this returns."""
        rep, offers = self.replica, self.offers
        assert offers is not None, "the member loop makes the offers"
        head = {"step": self.step, "epoch": self.cursor.epoch, "pos": self.cursor.pos, "why": why,
                "member": self.member, "want": self._want_served}
        # the moving part only: frozen parameters are the coordinator's own (issue 41 item 3)
        whole, self.offer_whole = getattr(self, "offer_whole", False), False  # a fresh script job's first: frozen too
        spent = offers.offer(head, [rep.flat] if whole else rep.fm.moving_views(),
                             rep.extra_state() if rep.has_extra else None, wait=why == "final")
        if why == "periodic":
            self._offer_schedule.offered(self.step)
            # the cost of an offer: the previous one's, now complete (this thread's seconds and the
            # background thread's CPU seconds); the first one's time here until then
            done = offers.last_cost
            self._offer_schedule.observe_offer(sum(done) if any(done) else spent)

    def _send_records(self, g: ElasticGroup, after: int, upto: int) -> None:
        recs = [r for r in self._records if after < r["step"] <= upto]
        if recs:
            g.store.queue_push("rec", json.dumps(recs))
        self._sent = max(self._sent, upto)

    def _inject(self, fault: dict[str, Any]) -> None:
        """A test's fault at this step (:mod:`~spotwise.planes.collective.faults`)."""
        self._fault = None
        self._resumer = inject(fault)


_REMOTE: dict[str, Any] = {}


def remote_member_class() -> Any:
    """The Ray actor class (created lazily so importing this module does not import Ray)."""
    if "cls" not in _REMOTE:
        import ray

        # threaded (issue 28 item 3): the coordinator hands state over and fetches replicas by actor
        # calls while the member loop runs
        _REMOTE["cls"] = ray.remote(max_restarts=0, max_task_retries=0, max_concurrency=4)(CollectiveMember)
    return _REMOTE["cls"]
