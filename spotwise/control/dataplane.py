"""The data-plane interface of the job controller: how members exchange updates and commit steps.

:class:`~spotwise.control.controller.JobController` owns the run loop, the policy loop, the
membership and the market; *what a step is* belongs to the data plane it holds:

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
is applied and when checkpoints are taken.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from spotwise.market.preemption import MarketEvent
from spotwise.policies.base import Decision, Policy

if TYPE_CHECKING:  # the controller holds a plane; a plane only reads the controller's type
    from spotwise.control.accounting import Billing
    from spotwise.control.controller import JobController
    from spotwise.control.sync import SyncStrategy
    from spotwise.planes.ps.compute import Compute


class DataPlane(Protocol):
    """What the job controller asks of a data plane (see the module docstring).

    Membership is the controller's: it calls :meth:`on_join` after a member joined and
    :meth:`on_leave` before a member's process is killed.  Time and money are the controller's
    too; a plane advances the controller's clock only to the instants its steps end.
    """

    #: the plane's name, as ``cluster.data_plane`` spells it (``summary.json``'s ``extra.data_plane``)
    name: str

    def default_compute(self, spec: Any, standby: int) -> "Compute | None":
        """The member processes when the caller gives none (Ray actors of this plane; ``None``
        where the plane runs its members itself, as functions)."""

    def attach(self, job: "JobController") -> None:
        """Bind to ``job`` (called once, before the first member joins or a checkpoint is restored)."""

    def make_accounting(self, job: "JobController") -> "Billing":
        """The job's money component: instances billed by the hour, or functions per use."""

    def log_meta(self) -> dict[str, Any]:
        """What this plane adds to the event log's header."""

    def checkpoint_state(self) -> dict[str, Any]:
        """What this plane adds to a checkpoint (beside the controller's state)."""

    def restore_state(self, state: dict[str, Any]) -> None:
        """Take this plane's part of a checkpoint back (InputError if the checkpoint is another plane's)."""

    def begin(self) -> None:
        """The run starts (first thing in :meth:`JobController.run`): start what runs the members."""

    def started(self) -> None:
        """The job's state is fresh or restored (membership formed): the plane may read it."""

    def sync_strategy(self, sync: str, sync_n: int | None) -> "SyncStrategy":
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
