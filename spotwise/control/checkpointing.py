"""The job controller's checkpoints: what one holds, taking one, and resuming a run from the newest.

:class:`Checkpointer` is a component held by the job controller (``job.checkpointer``); what it
reads and writes of the job is :class:`CheckpointedJob`.  A checkpoint holds the parameters, learning rate, clock, sampler and
duration generator, the provider's market state, the place and market the workers run on, the
sync mode, the counters and the ledger (settled money and open intervals), and what the summary adds
up over the run's sessions (:mod:`spotwise.control.carried`: last loss and evaluation, recoveries, the
plane's phases, metrics, joins and regroups), so that a killed controller resumes where it was (``spotwise run --resume OUT``); the file format is
:mod:`spotwise.control.checkpoint`'s.  It knows the format on both sides: :meth:`take` reads the
job into a checkpoint, :meth:`restore` puts the newest valid one back into the job.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Protocol

import numpy as np
import torch

from spotwise.capacity.provider import Provider
from spotwise.config import JobSpec
from spotwise.control.accounting import Billing
from spotwise.control.carried import durations, number_map, optional_number, reading, refuse, section
from spotwise.control.checkpoint import require_checkpoint, save_checkpoint, warn_on_stderr
from spotwise.control.clock import Clock
from spotwise.control.records import Counters
from spotwise.control.sampler import EpochSampler
from spotwise.control.state import TrainingState
from spotwise.errors import InputError
from spotwise.events import EventLog, atomic_write_text
from spotwise.market.job_market import Market
from spotwise.market.world import market_for_place
from spotwise.rundir_names import EVENTS_FILE, MODEL_FILE  # noqa: F401 (MODEL_FILE re-exported: the final model's state_dict)
from spotwise.safeparse import loads_json
from spotwise.signals import termination_pending

if TYPE_CHECKING:  # the class it returns (imported where it is made: it holds the whole job)
    from spotwise.control.terminating import FinalCheckpoint


class _PlaneState(Protocol):
    def checkpoint_state(self) -> dict[str, Any]: ...
    def restore_state(self, state: dict[str, Any]) -> None: ...
    # what FinalCheckpoint asks of the plane
    def stop(self) -> None: ...
    def before_finish(self) -> None: ...


class CheckpointedJob(Protocol):
    """What :class:`Checkpointer` reads into a checkpoint and puts back on resume: the job's
    training state, clock, sampler, market and membership, and the controller's ``checkpoint``
    (through the plane) and ``add_member`` / ``enter_place`` (a resumed run rejoins its workers)."""

    @property
    def spec(self) -> JobSpec: ...
    @property
    def out(self) -> Path: ...
    step: int
    params: np.ndarray
    lr: float
    sync: str
    sync_n: int | None
    ema_loss: float | None
    last_loss: float | None
    last_eval: dict[str, float]
    last_commit_T: float
    provisioned: int
    worker_market: str
    @property
    def region(self) -> str | None: ...
    @property
    def market(self) -> Market: ...
    @property
    def clock(self) -> Clock: ...
    @property
    def provider(self) -> Provider: ...
    sampler: EpochSampler
    max_workers: int
    @property
    def dur_rng(self) -> np.random.Generator: ...
    counters: Counters
    log: EventLog
    @property
    def state(self) -> TrainingState: ...
    @property
    def accounting(self) -> Billing: ...
    @property
    def plane(self) -> _PlaneState: ...
    @property
    def checkpointer(self) -> "Checkpointer": ...

    @property
    def T(self) -> float: ...
    def checkpoint(self, why: str) -> None: ...
    def add_member(self, w: int, actor: Any, reopen: dict[str, Any] | None = None,
                   billed_from: float | None = None) -> None: ...
    def enter_place(self, place: Market, region: str | None) -> None: ...




class Checkpointer:
    """Checkpoints and resume of one job (see the module docstring)."""

    def __init__(self, job: CheckpointedJob) -> None:
        self.job = job
        #: the step of the newest checkpoint (-1: none this session)
        self.last_step = -1
        #: called with the checkpoint's path once it is committed (e.g. a
        #: :class:`~spotwise.remote.mirror.RunMirror` uploading it to ``outputs.uri``)
        self.listeners: list[Callable[[Path], None]] = []

    def take(self, why: str) -> None:
        """Write a checkpoint of the job's current step (logged as a ``checkpoint`` event)."""
        job = self.job
        cost = job.accounting.cost_breakdown(final=False)
        state = {
            "format": 1, "step": job.step, "params": torch.from_numpy(job.params.copy()), "lr": job.lr, "T": job.T,
            "sampler": job.sampler.state(), "dur_rng": json.dumps(job.dur_rng.bit_generator.state),
            **job.provider.market_state(), "provisioned": job.provisioned,
            "place": [job.market.instance.name, job.region], "worker_market": job.worker_market,
            "sync": job.sync, "sync_n": job.sync_n, "ema_loss": job.ema_loss,
            # the checkpoint counts itself: a resume from it goes on counting as the uninterrupted run
            "counters": {**{k: v for k, v in job.counters.__dict__.items() if k != "recoveries_ms"},
                         "checkpoints": job.counters.checkpoints + 1}, "cost": cost,
            "ledger": job.accounting.ledger_state(), **job.plane.checkpoint_state(),
            # what the summary reads that a session accumulates (spotwise.control.carried; issue 54 item 5)
            "carried": {"last_loss": job.last_loss, "last_eval": dict(job.last_eval),
                        "recoveries_ms": list(job.counters.recoveries_ms)},
        }
        # issue 28: the whole training state as state_dicts (weights_only): the model's own (parameters
        # and buffers, for export), the optimizer's, a grad scaler's, integer buffers, RNG states
        model_sd = job.state.model_state_dict()
        if model_sd is not None:
            state["model"] = model_sd
            state["train_extra"] = job.state.extra_state()
            # the per-iteration market generator is the provider's (``iter_rng`` of market_state above)
            state["rng"] = {"torch": torch.get_rng_state(), "numpy_iter": ""}
        path = save_checkpoint(job.out, job.step, state)
        self.last_step = job.step
        job.counters.checkpoints += 1
        job.log.emit("checkpoint", step=job.step, path=str(path), why=why)
        for listener in self.listeners:
            listener(path)

    def on_sigterm(self) -> "FinalCheckpoint":
        """The context around the run loop that turns SIGTERM into a final checkpoint of the last
        committed step, then exit 143 (:mod:`spotwise.control.terminating`)."""
        from spotwise.control.terminating import FinalCheckpoint

        return FinalCheckpoint(self.job)

    @staticmethod
    def sigterm_pending() -> bool:
        """SIGTERM arrived during the run loop: the planes' inner loops return to it (it checkpoints, then stops)."""
        return termination_pending()

    def export_model(self) -> None:
        """``OUT/model.pt``: the final model's ``state_dict`` (parameters and buffers), which plain
        ``torch.load(path, weights_only=True)`` reads and the workload's module loads with
        ``load_state_dict`` (issue 28 item 2).  Written atomically; nothing for a modelled state."""
        job = self.job
        sd = job.state.model_state_dict()
        if sd is None:
            return
        import io

        from spotwise.events import atomic_write_bytes

        bio = io.BytesIO()
        torch.save(sd, bio)
        atomic_write_bytes(job.out / MODEL_FILE, bio.getvalue())

    def take_quiet(self) -> None:
        """A final checkpoint without a log event (so a resume of a finished run is a no-op).

        Taken before the ledger is closed, so it records the intervals still open at ``T`` and a
        resume continues them (issue 7 item 6) instead of billing them as released.
        """
        job = self.job
        state_log = job.log
        job.log = _NullLog()  # type: ignore[assignment]
        try:
            job.checkpoint("final")  # through the plane: its parameters must be those of the step
        finally:
            job.log = state_log

    def restore(self) -> None:
        """Continue the job from its newest valid checkpoint (bad ones are skipped, with a warning)."""
        job = self.job
        skipped: list[str] = []

        def warn(msg: str) -> None:  # on stderr, and into the restore event
            skipped.append(msg)
            warn_on_stderr(msg)

        # every record checked as spotwise writes it (spotwise.control.checkpoint_records), else skipped
        state, path = require_checkpoint(job.out, expect_shape=job.params.shape, warn=warn)  # falls back past bad ones
        self._fits_the_job(state)
        job.step = int(state["step"])
        job.params = state["params"].numpy().astype(np.float32).copy()
        with reading("train_extra (the optimizer's and buffers' state)"):
            job.state.load_extra_state(state.get("train_extra"))
        rng = state.get("rng")
        if isinstance(rng, dict) and isinstance(rng.get("torch"), torch.Tensor):
            with reading("rng.torch"):
                torch.set_rng_state(rng["torch"])
        job.lr = float(state["lr"])
        job.clock.restore(float(state["T"]))
        job.last_commit_T = job.T
        job.sampler = EpochSampler.from_state(state["sampler"])
        with reading("dur_rng"):
            job.dur_rng.bit_generator.state = loads_json(state["dur_rng"], str(path), "checkpoint's dur_rng")  # nesting: exit 2
        job.provisioned = int(state["provisioned"])
        job.provider.prepare(list(range(job.provisioned)), resume=True)
        job.worker_market = str(state["worker_market"])
        place = state["place"]
        if (place[0], place[1]) != (job.market.instance.name, job.region):
            # the run had migrated: continue in its place (the provider's timeline follows in resume_market)
            job.enter_place(market_for_place(job.spec, place[0], place[1], job.market.catalog, job.market.horizon_s),
                            place[1])
            with reading("place"):
                job.provider.migrate(job.market, job.T)
        job.sync = str(state["sync"])
        job.sync_n = None if state["sync_n"] is None else int(state["sync_n"])
        job.ema_loss = None if state["ema_loss"] is None else float(state["ema_loss"])
        c = state["counters"]
        job.counters = Counters(**{k: v for k, v in c.items() if k != "recoveries_ms"})
        carried = section(state, "carried")  # the summary's view of the earlier sessions (issue 54 item 5)
        job.last_loss = optional_number(carried.get("last_loss"), "carried.last_loss")
        job.last_eval = number_map(carried.get("last_eval", {}), "carried.last_eval")
        job.counters.recoveries_ms = durations(carried.get("recoveries_ms", []), "carried.recoveries_ms")
        with reading("the data plane's records"):
            job.plane.restore_state(state)
        acc = job.accounting
        self.last_step = job.step
        changed = self._apply_spec_changes()
        job.log = EventLog(job.out / EVENTS_FILE, clock=lambda: job.T, resume=True)
        job.log.emit("restore", step=job.step, path=str(path), skipped=skipped,
                     **({"changed": {k: [a, b] for k, (a, b) in changed.items()}} if changed else {}))
        with reading("market position (available, market, expansions, timeline, iter_rng)"):
            job.provider.resume_market(job.T, state)
        with reading("ledger"):
            reopen = acc.restore(state)
        acc.emit_prices()
        slots = sorted(w for w in job.provider.available_at_start() if w < job.provisioned)
        # started together, as a fresh run's fleet is (one after another, each start waited ~5 s on 2 cores)
        for w, actor in zip(slots, job.provider.warm_up(slots)):
            job.add_member(w, actor, reopen=reopen.pop(f"worker-{w}", None))
        job.counters.revocations += acc.settle_gone(reopen)


    def _fits_the_job(self, state: dict[str, Any]) -> None:
        """What a checkpoint's records must agree with in the job resuming it (their form is checked when
        loaded): the sampler's data set and seed, the workers provisioned.  InputError (exit 2) otherwise."""
        job = self.job
        s = state["sampler"]
        want = {"n": job.state.n_train, "seed": job.spec.seed, "ordered": bool(getattr(job.state, "ordered", False))}
        got = {"n": s["n"], "seed": s["seed"], "ordered": bool(s.get("ordered", False))}
        if got != want:
            raise refuse("sampler", got, f"this job's sampler {want} (a checkpoint of another data set or seed)")
        if state["provisioned"] > job.max_workers:
            raise refuse("provisioned", state["provisioned"], f"at most the job's {job.max_workers} workers")

    def _apply_spec_changes(self) -> dict[str, tuple[Any, Any]]:
        """A resume with a changed spec (issue 41 item 5; what may change was checked when the spec was
        loaded, :func:`spotwise.control.rundir_io.check_resume_changes`): the job runs the new spec from
        the resumed step.  Most fields act by being read (the schedule, clipping, targets, limits); the
        learning rate is rescaled here -- the run's current rate (a policy's scaling included) times
        new / old base rate.  The new spec replaces ``spec.json``; the changes are returned for the
        restore event and said on stderr."""
        from spotwise.control.rundir_io import SPEC_FILE, load_run_spec, spec_changes

        job = self.job
        try:
            recorded = load_run_spec(job.out)
        except InputError:  # no readable spec.json (a controller built by hand): nothing to compare
            return {}
        changes = spec_changes(recorded, job.spec)
        if not changes:
            return {}
        old_lr, new_lr = float(recorded.workload.lr), float(job.spec.workload.lr)
        if old_lr != new_lr and job.spec.workload.script:
            # a training script sets its optimizer's rate itself: the spec's is not what it steps with
            # (the step records hold the rate read from its param_groups), so say so rather than claim it
            warn_on_stderr(f"workload.lr {old_lr:g} -> {new_lr:g} changes nothing in a training script: it steps with "
                           "the rates its own code sets (the records show them); pass a new rate as one of the script's "
                           "arguments (workload.args, with --allow-changes)")
        elif old_lr != new_lr and old_lr > 0:
            job.lr = job.lr * new_lr / old_lr
        atomic_write_text(job.out / SPEC_FILE, json.dumps(job.spec.to_dict(), indent=2) + "\n")
        listed = ", ".join(f"{k} {json.dumps(a)} -> {json.dumps(b)}" for k, (a, b) in list(changes.items())[:8])
        warn_on_stderr(f"resume at step {job.step} applies the spec's changes from here on: {listed}")
        return changes


class _NullLog:
    def emit(self, *a: Any, **k: Any) -> None:
        return None
