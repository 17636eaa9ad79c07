"""Restart mode's data plane (``workload.restart``; issue 55 item 6): an unmodified torchrun script on spot capacity.

:class:`RestartPlane` is the :class:`~spotwise.control.dataplane.DataPlane` that runs the user's script as
torchrun runs it (:mod:`spotwise.planes.restart.generation`) and everything else as every plane does: the
market, membership, billing, the event log, policies, spotwise's own checkpoints and the summary.

* **Generations.** The script's ranks run on the current members (rank order: member slot order).  Any
  change of membership ends the generation: a revocation (the revoked member's script dies with it; the
  others get SIGTERM, ``restart.grace_s`` to save, then SIGKILL), a notice (every rank is stopped at once,
  while the noticed member still lives, so a script that saves on SIGTERM saves; the next generation
  leaves the noticed member out), a join (at the script's next checkpoint, so no step is redone for it;
  at once when nothing was trained since the last one).  The next generation starts the script again on
  the members left, with the new ``WORLD_SIZE``, and ``restart.resume_args`` once it has saved a
  checkpoint in the folder spotwise names (``$SPOTWISE_CHECKPOINT_DIR``, ``{checkpoint_dir}``).
* **Steps.** The script is watched through PyTorch's own hooks (:mod:`spotwise.planes.restart.boot`): its
  optimizer's steps are the job's steps, what ``backward`` was called on is the loss, ``param_groups``'
  ``lr`` the rate.  On the emulated provider each step's virtual time is drawn as on the collective
  plane (S-SGD's round: the slowest of ``k`` mini-batches plus ``Delta``, ``papers/000_3c734f3ffedcac15.txt``
  eq. 14) and the script may take the steps that end before the market's next event (the *lease*); at the
  lease every rank waits before its next optimizer step, so an event applies between two steps and never
  inside an evaluation or a save.  A restart costs the wall time the new ranks took to reach their first
  step (interpreter, imports, model, checkpoint load), charged as virtual time before that step.
* **Lost work.** A restart resumes from the script's newest checkpoint: the steps committed after it are
  redone.  They are logged in a ``rollback`` event and counted (``redone_steps``, their virtual seconds
  ``redone_s`` and their cost ``redone_usd`` in ``summary.extra``); the step counter goes back and they
  are committed again.  A script that resumes at another step than spotwise expects is believed when it
  is earlier (more is redone) and refused when it is later (a checkpoint outside the folder spotwise names).
* **The end.** The job completes at ``target.iterations`` (the script is stopped there) or when every rank
  of the script exits 0 (it ended at its own last step).  A rank that fails outside a stop ends the run
  with exit 2 and the script's last lines.
"""

from __future__ import annotations

import math
import os
import secrets
import stat
import time
from pathlib import Path
from typing import Any

from spotwise.config import JobSpec
from spotwise.control.accounting import AccountedJob, Accounting, Billing
from spotwise.control.checkpoint import refuse_foreign_checkpoint
from spotwise.control.dataplane import PlaneHost
from spotwise.control.state import TrainingState
from spotwise.control.sync import SyncStrategy, make_sync
from spotwise.errors import InputError
from spotwise.market.preemption import MarketEvent
from spotwise.planes.collective.group_store import GroupCoordinator
from spotwise.planes.collective.round_time import draw_round, restored_draws, steps_before
from spotwise.planes.ps.compute import Compute
from spotwise.planes.restart.generation import ScriptRanks
from spotwise.planes.restart.member import RestartCompute
from spotwise.planes.restart.state import RestartState
from spotwise.planes.restart.totals import RestartTotals
from spotwise.policies.base import Decision, Policy, SetLearningRate, SwitchSync
from spotwise.rundir_names import SCRIPT_LOGS
from spotwise.safeparse import loads_json
from spotwise.spec.restart_mode import SCRIPT_CHECKPOINTS, substitute

#: seconds between two looks at whether the script's ranks still run
POLL_EXIT_S = 0.25
#: the longest the plane waits for every rank to reach the lease before applying a market event anyway
AT_LEASE_MOST_S = 600.0


class RestartPlane:
    """Restart mode (module docstring).  ``host``: where the channel and rendezvous stores listen (only there)."""

    name = "restart"

    def __init__(self, spec: JobSpec, host: str = "127.0.0.1", cwd: str | None = None) -> None:
        if spec.workload.restart is None or spec.workload.script is None:
            raise ValueError("the restart plane runs workload.restart specs")
        self.spec, self.rs = spec, spec.workload.restart
        self.host, self.cwd = host, cwd or os.getcwd()
        self._job: PlaneHost | None = None
        self.channel = GroupCoordinator(host, 0, timeout_s=60.0)  # what the ranks report to (keys under its secret)
        self.store = self.channel.store
        self.store.set("lease", "0")
        self.run_id = secrets.token_hex(8)
        self.ranks: ScriptRanks | None = None
        self.gen = -1
        self.totals = RestartTotals()
        self._draws: list[tuple[int, float]] = []
        self._why: str | None = "start"  # a generation is to be (re)started, and why
        self._noticed: set[int] = set()  # members with a notice: left out of the next generation
        self._join_pending = False
        self._ready_at: float | None = None  # virtual instant the generation's first step may start
        self._started_wall = 0.0
        self._kill_wall: float | None = None  # recovery: a loss -> the next generation's first commit
        self._over: str | None = None  # the script ended on its own (why)
        self.checkpoint_dir = ""
        self._lease = 0  # the ranks may take the steps up to this one

    @property
    def job(self) -> PlaneHost:
        if self._job is None:
            raise RuntimeError("the plane is not attached to a job")
        return self._job

    def own_state(self) -> TrainingState:
        return RestartState()

    # ================================================================== the DataPlane interface
    def default_compute(self, spec: JobSpec, standby: int) -> Compute:
        return RestartCompute.for_spec(spec, standby)

    def attach(self, job: PlaneHost) -> None:
        self._job = job
        folder = Path(job.out) / SCRIPT_CHECKPOINTS  # the script's checkpoint folder is in the run directory
        if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
            raise InputError(f"{folder} is not a folder spotwise made", "remove it, or use another --out",
                             SCRIPT_CHECKPOINTS)
        folder.mkdir(exist_ok=True)
        self.checkpoint_dir = str(folder.resolve())
        logs = Path(job.out) / SCRIPT_LOGS  # the ranks append to these: nothing there may lead elsewhere
        if logs.is_symlink() or (logs.exists() and not logs.is_dir()):
            raise InputError(f"{logs} is not a folder spotwise made", "remove it, or use another --out", SCRIPT_LOGS)
        for f in logs.iterdir() if logs.is_dir() else ():
            st = f.lstat()
            if not stat.S_ISREG(st.st_mode) or st.st_nlink > 1:
                raise InputError(f"{f} is a link or not a plain file; spotwise appends the script's output there",
                                 "remove it, or use another --out", SCRIPT_LOGS)

    def make_accounting(self, job: AccountedJob) -> Billing:
        return Accounting(job)

    def log_meta(self) -> dict[str, Any]:
        return {"data_plane": "restart"}

    def checkpoint_state(self) -> dict[str, Any]:
        return {"restart": {"gen": self.gen}, "round_draws": [[k, d] for k, d in self._draws],
                "plane_carried": self.totals.state()}

    def restore_state(self, state: dict[str, Any]) -> None:
        refuse_foreign_checkpoint(state, "restart")
        own = state.get("restart")
        if not isinstance(own, dict):
            raise InputError("this run directory holds an in-place run's checkpoints, not a restart-mode run's",
                             "resume it the way it was started (without --restart)", "--resume")
        self._draws = restored_draws(state.get("round_draws", []))
        self.totals = RestartTotals.from_state(state)
        gen = own.get("gen")
        if set(own) != {"gen"} or isinstance(gen, bool) or not isinstance(gen, int) or not -1 <= gen < 10**9:
            raise InputError(f"the checkpoint's restart record is {str(own)[:60]!r}, not {{'gen': <generation>}}",
                             "resume a run directory spotwise wrote (or start it again with --overwrite)", "--resume")
        self.gen = gen  # the next generation continues the count (the event log's and TORCHELASTIC_RESTART_COUNT)

    def begin(self) -> None:
        return None

    def started(self) -> None:
        return None

    def sync_strategy(self, sync: str, sync_n: int | None) -> SyncStrategy:
        return make_sync("ssgd", None)

    def before_tick(self) -> None:
        return None

    def tick(self) -> None:
        if self.ranks is not None and self._why is not None:
            self._end_generation()
        elif self.ranks is None:
            self._start_generation()
        elif self._ready_at is None:
            self._wait_started()
        else:
            self._advance()

    def on_join(self, w: int) -> None:
        if self.ranks is None:
            return
        if self.job.step <= max(0, self.totals.checkpoint_step):
            self._restart(f"member {w} joined")
        else:
            self._join_pending = True  # at the script's next checkpoint (nothing redone for it)

    def on_leave(self, w: int, reason: str) -> None:
        self._noticed.discard(w)
        if self.ranks is not None and w in self.ranks.slots:
            self.ranks.lost(w)
            self._kill_wall = time.time() if len(self.job.members) else None
            self._restart(f"member {w} {reason}")

    def on_market_event(self, ev: MarketEvent, joined: bool) -> None:
        if ev.kind == "notice" and ev.worker in self.job.members and self.ranks is not None \
                and ev.worker in self.ranks.slots:
            self._noticed.add(ev.worker)
            self._kill_wall = time.time()
            self._restart(f"notice for member {ev.worker}")

    def refuse(self, d: Decision) -> str | None:
        if isinstance(d, (SwitchSync, SetLearningRate)):
            return "restart mode runs the script's own step and learning rate"
        return None

    def after_decision(self, policy: Policy, d: Decision) -> None:
        return None

    def ready_for_checkpoint(self, why: str) -> bool:
        return True  # the controller's state is the step counter, the ledger and these totals

    def stop(self) -> None:
        if self.ranks is not None:
            if self._over is None and self.job.status == "completed":
                self.job.log.emit("script", outcome="stopped", why=f"target.iterations reached at step {self.job.step}")
            self._end_generation(restart=False)

    def before_finish(self) -> None:
        return None

    def summary_extra(self) -> dict[str, Any]:
        extra: dict[str, Any] = {"data_plane": "restart", **self.totals.summary()}
        if self.totals.stepped_lr is not None:
            extra["script_lr"] = self.totals.stepped_lr
        if self._over:
            extra["script_end"] = self._over
        return extra

    def shutdown(self) -> None:
        if self.ranks is not None:
            self.ranks.kill()
            self.ranks = None
        self.store = None  # type: ignore[assignment]
        self.channel.store = self.channel.server = None  # type: ignore[assignment]

    # ================================================================== generations
    def _restart(self, why: str) -> None:
        if self._why is None:
            self._why = why

    def _start_generation(self) -> None:
        job = self.job
        members = sorted(w for w in job.members if w not in self._noticed)
        if not members:  # every member has a notice: wait for the market (their revocation, a join)
            self._market_event()
            return
        why, self._why, self._join_pending = self._why or "start", None, False
        self._take_records()
        ck = self.totals.checkpoint_step
        if job.step > max(0, ck):
            self._rollback(max(0, ck), f"restarted from the script's checkpoint of step {ck}" if ck >= 0
                           else "the script saved no checkpoint yet: restarted from step 0")
        self.gen += 1
        if self.gen > 0:
            self.totals.restarts += 1
        args = substitute(list(self.spec.workload.args), self.checkpoint_dir)
        if ck >= 0:
            args += substitute(list(self.rs.resume_args), self.checkpoint_dir)
        env = {"SPOTWISE_CHANNEL": f"{self.channel.host}:{self.channel.port}",
               "SPOTWISE_CHANNEL_KEY": self.channel.address.secret, "SPOTWISE_GEN": str(self.gen),
               "SPOTWISE_CHECKPOINT_DIR": self.checkpoint_dir, "SPOTWISE_RESUME_STEP": str(ck)}
        self._set_lease(job.step)  # every rank waits before its first step
        self._draws.clear()
        ranks = ScriptRanks(self.gen, members, [job.members[w] for w in members], self.host, self.run_id)
        self._started_wall = time.perf_counter()
        self._ready_at = None
        job.log.emit("restart", gen=self.gen, members=members, from_step=job.step, resume=ck >= 0, reason=why)
        try:
            ranks.start(str(self.spec.workload.script), args, env, self.cwd, str(self.job.out))
        finally:
            self.ranks = ranks

    def _wait_started(self) -> None:
        """Until every rank waits before its first step (its start-up: imports, model, checkpoint load)."""
        job, ranks = self.job, self.ranks
        assert ranks is not None
        want = str(job.step + 1)
        keys = [f"at/{ranks.gen}/{r}" for r in range(ranks.world)]
        next_poll = 0.0
        while self._why is None:
            self._take_records()
            if self._why is not None or ranks is not self.ranks:
                return
            if all(self.store.check([k]) and self.store.get(k).decode() == want for k in keys):
                wall = time.perf_counter() - self._started_wall
                if self.gen > 0:
                    self.totals.restart_wall_s.append(round(wall, 3))
                self._ready_at = job.T + (wall if self.gen > 0 else 0.0)
                return
            if time.monotonic() >= next_poll:
                next_poll = time.monotonic() + POLL_EXIT_S
                if self._check_exits():
                    return
            time.sleep(0.005)

    def _end_generation(self, restart: bool = True) -> None:
        ranks = self.ranks
        assert ranks is not None
        if not ranks.poll() and self._ready_at is not None:
            self._wait_at_lease()  # no rank is stopped inside an evaluation or a save
        exits = ranks.stop(self.rs.grace_s)
        self._take_records()  # what the ranks reported while they ended (a checkpoint saved on SIGTERM)
        self.ranks = None
        self._ready_at = None
        if not restart:
            return
        self.job.log.emit("script", outcome="stopped", why=self._why or "", gen=ranks.gen,
                          exits={str(ranks.slots[r]): rc for r, rc in sorted(exits.items())})

    def _check_exits(self) -> bool:
        """Whether the generation is over on its own: every rank exited 0 (the script ended: the job is
        complete) or one failed (exit 2 with its last lines).  A rank ending while being stopped is not."""
        ranks = self.ranks
        assert ranks is not None
        exits = ranks.poll()
        if not exits or self._why is not None:
            return False
        failed = {r: rc for r, rc in exits.items() if rc != 0}
        if not failed and len(exits) < ranks.world:
            return False
        self._take_records()
        job = self.job
        if not failed:
            self._over = f"the script ended at step {job.step}"
            job.log.emit("script", outcome="ended", why=self._over)
            job.status = "completed"
            return True
        r, rc = min(failed.items())
        tail = "\n".join(ranks.tails().get(r, [])[-20:])
        job.log.emit("script", outcome="raised", why=tail[-2000:], member=ranks.slots[r])
        job.checkpoint("script-error")
        job.status = "script-error"
        raise InputError(f"your training script {self.spec.workload.script} (rank {r} on member {ranks.slots[r]}) "
                         f"exited with status {rc} after step {job.step}:\n{tail}",
                         "fix the script (run it under torchrun first); the run keeps its committed steps "
                         "(spotwise run --resume DIR continues from the script's last checkpoint)", "workload.script")

    # ================================================================== leases and the market
    def _draw(self, i: int, k: int) -> float:
        job = self.job
        while len(self._draws) <= i:
            self._draws.append((k, draw_round(job.time_law, job.dur_rng, k, "ssgd", 1, job.commit_overhead_s)))
        return self._draws[i][1]

    def _lease_for(self, k: int) -> int:
        job = self.job
        target = int(job.spec.target.iterations or 0)
        if job.stop_after_steps is not None:
            target = min(target, int(job.stop_after_steps))
        if job.provider.iteration_driven:
            return job.step + (1 if job.step < target else 0)
        t_ev = job.provider.peek_time()
        limit = min(math.inf if t_ev is None else t_ev, job.market.horizon_s)
        t0 = max(job.T, self._ready_at or job.T)
        return job.step + steps_before(t0, limit, target - job.step, lambda i: self._draw(i, k))

    def _advance(self) -> None:
        job, ranks = self.job, self.ranks
        assert ranks is not None
        lease = self._lease_for(ranks.world)
        if self._join_pending:  # a step at a time: the script's next checkpoint stops it before its next step
            lease = min(lease, job.step + 1)
        if lease > job.step:
            self._set_lease(lease)
            self._pump(lease)
            if job.provider.iteration_driven and self._why is None:
                job.iteration_market()
            return
        self._market_event()

    def _market_event(self) -> None:
        job = self.job
        t_ev = job.provider.peek_time()
        if t_ev is None or t_ev >= job.market.horizon_s:
            job.clock.advance_to(max(job.T, job.market.horizon_s))
            return
        batch = job.provider.peek_instant()
        if self.ranks is not None and any(e.kind in ("notice", "revoke") and e.worker in self.ranks.slots for e in batch):
            self._wait_at_lease()  # no rank is inside an evaluation or a save when its member goes
        job.clock.advance_to(batch[0].t)
        job.accounting.emit_prices()
        for _ in batch:
            if job.provider.peek_time() == batch[0].t:
                job.handle_market(job.provider.pop_event())

    def _wait_at_lease(self) -> None:
        """Until every rank waits before the step after the lease (what they report meanwhile is logged)."""
        ranks = self.ranks
        assert ranks is not None
        want = str(self._lease + 1)
        keys = [f"at/{ranks.gen}/{r}" for r in range(ranks.world)]
        deadline = time.monotonic() + AT_LEASE_MOST_S
        next_poll = 0.0
        while time.monotonic() < deadline:
            self._take_records()
            if all(self.store.check([k]) and self.store.get(k).decode() == want for k in keys):
                return
            if time.monotonic() >= next_poll:
                next_poll = time.monotonic() + POLL_EXIT_S
                if self._check_exits() or ranks.exits:  # a rank ended: nothing to wait for
                    return
            time.sleep(0.005)

    def _set_lease(self, step: int) -> None:
        self._lease = int(step)
        self.store.set("lease", str(self._lease))

    def _pump(self, until: int) -> None:
        job = self.job
        next_poll, pause = 0.0, 0.0005
        while job.step < until and self._why is None and job.status == "running":
            if self._take_records():
                pause = 0.0005
                if job.done():
                    return
                continue
            if time.monotonic() >= next_poll:
                next_poll = time.monotonic() + POLL_EXIT_S
                if self._check_exits():
                    return
            time.sleep(pause)
            pause = min(0.02, pause * 1.5)

    # ================================================================== what the ranks report
    def _take_records(self) -> bool:
        """Log what the ranks reported; True if a step was logged."""
        if self.store is None:
            return False
        got = False
        for _ in range(int(self.store.queue_len("rec"))):
            rec = loads_json(self.store.queue_pop("rec", False), "a rank's report", "record")
            kind = rec.get("kind")
            if kind == "checkpoint":
                self._checkpointed(rec)
            elif int(rec.get("gen", -1)) != self.gen or int(rec.get("rank", -1)) != 0:
                continue  # a rank of an ended generation, or not the leader
            elif kind == "start":
                self._script_started(int(rec["step"]))
            elif kind == "step" and int(rec["step"]) > self.job.step:
                self._log_step(rec)
                got = True
        return got

    def _checkpointed(self, rec: dict[str, Any]) -> None:
        job = self.job
        step = int(rec["step"])
        if step > job.step:
            return  # not a step spotwise committed (cannot happen: ranks wait at the lease)
        self.totals.checkpointed(step, job.cost_so_far())
        job.log.emit("script_checkpoint", step=step, path=str(rec.get("path", ""))[:500], gen=rec.get("gen"),
                     rank=rec.get("rank"))
        if self._join_pending and self.ranks is not None:  # (leased a step at a time: at most one after it)
            self._restart("a member joined (restarted at the script's checkpoint)")

    def _script_started(self, step: int) -> None:
        job = self.job
        if step < job.step:
            self._rollback(step, f"the script started at step {step}, not at step {job.step} (it did not resume "
                                 "from its newest checkpoint)")
        elif step > job.step:
            raise InputError(f"the script resumed at step {step}, but spotwise committed {job.step} steps and saw it save "
                             f"no checkpoint of step {step} in {self.checkpoint_dir}",
                             "make the script save into $SPOTWISE_CHECKPOINT_DIR (or {checkpoint_dir} in its "
                             "arguments) and resume only from there", "workload.script")

    def _rollback(self, to: int, why: str) -> None:
        job = self.job
        frm = job.step
        steps, secs, samples, usd = self.totals.rolled_back(to)
        job.log.emit("rollback", from_step=frm, to_step=to, lost_steps=frm - to, redone_s=secs, redone_usd=usd,
                     reason=why)
        job.counters.samples = max(0, int(job.counters.samples) - samples)
        job.step = to
        job.loss_history[:] = [r for r in job.loss_history if r[0] <= to]

    def _log_step(self, rec: dict[str, Any]) -> None:
        job, ranks = self.job, self.ranks
        assert ranks is not None
        k = ranks.world
        if not self._draws or self._draws[0][0] != k:  # not the membership the draws were made for
            self._draws.clear()
            self._draw(0, k)
        d = self._draws.pop(0)[1]
        job.clock.advance_to(max(job.T, self._ready_at or job.T) + d)
        job.step = int(rec["step"])
        samples = int(job.batch) * k
        job.counters.samples += samples
        job.accounting.member_step_samples = int(job.batch)
        loss = rec.get("loss")
        loss = float(loss) if isinstance(loss, (int, float)) else float("nan")
        duration = job.T - job.last_commit_T
        job.last_commit_T = job.T
        if math.isfinite(loss):
            job.last_loss = loss
            job.ema_loss = loss if job.ema_loss is None else 0.9 * job.ema_loss + 0.1 * loss
        lr = rec.get("lr")
        if isinstance(lr, (int, float)):
            self.totals.stepped_lr = float(lr)
        job.loss_history.append((job.step, job.T, loss, k, 1))  # type: ignore[arg-type]
        recovery_ms = None
        if self._kill_wall is not None:
            recovery_ms = max(0.0, 1000.0 * (float(rec.get("wall", time.time())) - self._kill_wall))
            job.counters.recoveries_ms.append(recovery_ms)
            self._kill_wall = None
        job.accounting.emit_prices()
        cost = job.cost_so_far()
        job.log.emit("step", step=job.step, loss=loss if math.isfinite(loss) else None, active=len(job.members),
                     lr=float(lr) if isinstance(lr, (int, float)) else job.lr, sync="ssgd", duration=duration,
                     cost=cost, epoch=0, pos=0, retries=0, contributions=k, lost=0, staleness=0,
                     recovery_ms=recovery_ms, samples=samples, gen=ranks.gen, commit_wall=rec.get("wall"))
        self.totals.since_checkpoint.append((job.step, float(d), samples, float(cost)))
        job.committed()
        job.apply_policies()
        job.after_commit()
