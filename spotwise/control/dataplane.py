"""The data-plane interface of the job controller: how members exchange updates and commit steps.

The job controller owns the run loop, the policy loop, the membership and the market; *what a
step is* belongs to the data plane it holds:

* the **parameter-server plane** (:class:`spotwise.planes.ps.plane.ParameterServerPlane`): the
  parameters live in the controller, workers compute gradients on blocks the controller hands out
  and the controller commits each step (``papers/000_3c734f3ffedcac15.txt`` Sec. III,
  ``papers/002_a246f6afe29b4bfb.txt`` Sec. II);
* the **collective plane** (:class:`spotwise.planes.collective.data_plane.CollectivePlane`): the
  members all-reduce among themselves and regroup in place; the controller leases them steps and
  logs what they committed (Spotnik, ``papers/001_30a454edd897cf47.txt`` Sec. 3.2-3.3).

* the **serverless plane** (:class:`spotwise.planes.serverless.plane.ServerlessPlane`): the
  members are function slots that exchange sparse updates through Redis; the controller's copy of
  the parameters is the reference replica the plane merges every committed step into (MLLess,
  ``papers/004_9dc2adb66dc8d26e.txt`` Sec. 3.1), and functions are billed per use
  (:meth:`DataPlane.make_accounting`).

A plane is bound to one controller (:meth:`DataPlane.attach`) and called back at fixed points of
the controller's loop; it never runs a loop of its own between two :meth:`DataPlane.tick` calls,
so the controller stays the only place that decides when policies are consulted, when the market
is applied and when checkpoints are taken.  What a plane may read and do of the job is
:class:`PlaneHost` (the port it is given), not the controller: planes are chosen above the
controller (:mod:`spotwise.assemble`) and this module imports none of them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Protocol

import numpy as np

from spotwise.capacity.provider import Provider
from spotwise.config import JobSpec
from spotwise.control.accounting import AccountedJob, Billing
from spotwise.control.clock import Clock
from spotwise.control.records import Counters
from spotwise.control.sampler import EpochSampler
from spotwise.control.state import TrainingState
from spotwise.control.sync import SyncStrategy
from spotwise.events import EventLog
from spotwise.market.preemption import MarketEvent
from spotwise.market.job_market import Market
from spotwise.planes.ps.compute import Compute
from spotwise.policies.base import Decision, Policy
from spotwise.theory.runtime import MiniBatchTimeLaw
from spotwise.training.recipe import Recipe


class _Speeds(Protocol):
    """A slot's batch share and mini-batch time (:class:`~spotwise.control.speeds.WorkerSpeeds`)."""

    def batch(self, w: int, members: list[int]) -> int: ...
    def draw(self, w: int, samples: int | None, rng: np.random.Generator) -> Callable[[], float]: ...
    def finish(self, start: float, duration: float | None, w: int) -> float | None: ...


class _Checkpoints(Protocol):
    #: the step of the newest checkpoint (-1: none this session)
    last_step: int

    def take(self, why: str) -> None: ...


class PlaneHost(Protocol):
    """The port a data plane is given (:meth:`DataPlane.attach`): what a step reads and writes
    of the job, and the controller's calls a plane makes at its fixed points.

    *State a step reads*: the spec, the clock and the capacity provider, the market in force, the
    members (slot -> process), the sampler, the model state and its recipe, the batch shares.
    *State a commit writes*: ``step``, ``params``, the losses, ``last_commit_T``, ``last_eval``,
    ``status`` / ``stop_message`` (a plane that ends the job) and ``kill_wall`` (the recovery clock).
    *Calls*: membership (:meth:`drop_member`, :meth:`poll_joins`), the market
    (:meth:`handle_market`, :meth:`drain_market`, :meth:`iteration_market`), a commit's bookkeeping
    (:meth:`committed`, :meth:`evaluate`, :meth:`apply_policies`, :meth:`after_commit`,
    :meth:`nonfinite`), :meth:`checkpoint`, :meth:`cost_so_far` and :meth:`done`.
    """

    @property
    def spec(self) -> JobSpec: ...
    @property
    def out(self) -> Path: ...
    @property
    def clock(self) -> Clock: ...
    @property
    def provider(self) -> Provider: ...
    @property
    def compute(self) -> Compute | None: ...
    @property
    def market(self) -> Market: ...
    @property
    def members(self) -> dict[int, Any]: ...
    sampler: EpochSampler
    @property
    def state(self) -> TrainingState: ...
    @property
    def recipe(self) -> Recipe: ...
    @property
    def speeds(self) -> _Speeds: ...
    @property
    def accounting(self) -> Billing: ...
    @property
    def checkpointer(self) -> _Checkpoints: ...
    @property
    def counters(self) -> Counters: ...
    @property
    def log(self) -> EventLog: ...
    @property
    def dur_rng(self) -> np.random.Generator: ...
    step: int
    params: np.ndarray
    @property
    def lr(self) -> float: ...
    @property
    def sync(self) -> str: ...
    @property
    def batch(self) -> int: ...
    @property
    def commit_overhead_s(self) -> float: ...
    @property
    def time_law(self) -> MiniBatchTimeLaw: ...
    @property
    def stop_after_steps(self) -> int | None: ...
    @property
    def stop_after_samples(self) -> int | None: ...
    ema_loss: float | None
    last_loss: float | None
    last_commit_T: float
    last_eval: dict[str, float]
    @property
    def loss_history(self) -> list[tuple[int, float, float, int]]: ...
    kill_wall: float | None
    status: str
    stop_message: str | None

    @property
    def T(self) -> float: ...
    @property
    def sync_strategy(self) -> SyncStrategy: ...
    def drop_member(self, w: int, reason: str) -> None: ...
    def poll_joins(self, timeout: float = 0.0) -> None: ...
    def handle_market(self, ev: MarketEvent) -> None: ...
    def drain_market(self, until: float) -> None: ...
    def iteration_market(self) -> None: ...
    def committed(self) -> None: ...
    def evaluate(self) -> dict[str, float]: ...
    def apply_policies(self) -> None: ...
    def after_commit(self) -> None: ...
    def nonfinite(self, what: str, checkpoint: bool = True) -> None: ...
    def checkpoint(self, why: str) -> None: ...
    def cost_so_far(self) -> float: ...
    def done(self) -> bool: ...


class DataPlane(Protocol):
    """What the job controller asks of a data plane (see the module docstring).

    Membership is the controller's: it calls :meth:`on_join` after a member joined and
    :meth:`on_leave` before a member's process is killed.  Time and money are the controller's
    too; a plane advances the controller's clock only to the instants its steps end.
    """

    #: the plane's name, as ``cluster.data_plane`` spells it (``summary.json``'s ``extra.data_plane``)
    name: str

    def default_compute(self, spec: Any, standby: int) -> Compute | None:
        """The member processes when the caller gives none (Ray actors of this plane; ``None``
        where the plane runs its members itself, as functions)."""

    def attach(self, job: PlaneHost) -> None:
        """Bind to ``job`` (called once, before the first member joins or a checkpoint is restored)."""

    def make_accounting(self, job: AccountedJob) -> Billing:
        """The job's money component: instances billed by the hour, or functions per use."""

    def log_meta(self) -> dict[str, Any]:
        """What this plane adds to the event log's header."""

    def checkpoint_state(self) -> dict[str, Any]:
        """What this plane adds to a checkpoint (beside the controller's state)."""

    def restore_state(self, state: dict[str, Any]) -> None:
        """Take this plane's part of a checkpoint back (InputError if the checkpoint is another plane's)."""

    def begin(self) -> None:
        """The run starts (first thing in the controller's ``run``): start what runs the members."""

    def started(self) -> None:
        """The job's state is fresh or restored (membership formed): the plane may read it."""

    def sync_strategy(self, sync: str, sync_n: int | None) -> SyncStrategy:
        """The strategy object of ``sync`` / ``sync_n`` on this plane (round time, samples per step)."""

    def before_tick(self) -> None:
        """Called at the top of every loop iteration, before the controller looks at membership."""

    def tick(self) -> None:
        """Make progress with the current members: run (or lease and log) steps, apply the market
        events they meet; returns when the controller should look at the job again."""

    def on_join(self, w: int) -> None:
        """Member ``w`` has joined (its process is in ``job.members``)."""

    def on_leave(self, w: int, reason: str) -> None:
        """Member ``w`` is about to leave (still in ``job.members``'s old state; its process dies next)."""

    def on_market_event(self, ev: MarketEvent, joined: bool) -> None:
        """The controller applied ``ev``; ``joined``: it made a new member join."""

    def refuse(self, d: Decision) -> str | None:
        """Why this plane cannot carry out ``d`` (``None``: it can)."""

    def after_decision(self, policy: Policy, d: Decision) -> None:
        """The controller carried out ``d`` of ``policy``."""

    def ready_for_checkpoint(self, why: str) -> bool:
        """Make the controller's parameters those of the current step; False: not now (the plane
        takes the checkpoint itself as soon as it can)."""

    def stop(self) -> None:
        """The job is over: collect what the members still hold, end their work."""

    def before_finish(self) -> None:
        """Just before the final checkpoint and summary."""

    def summary_extra(self) -> dict[str, Any]:
        """What this plane adds to ``summary.json``'s ``extra``."""

    def shutdown(self) -> None:
        """Release what the plane holds (after every member was killed)."""
