"""The policy interface (DESIGN.md, "Policies").

A policy is a pure function of an :class:`Observation` (what the executor knows at a step
boundary) to a list of :class:`Decision` values.  Decisions are plain frozen dataclasses, each with
a human-readable ``reason`` that the executor writes into the event log (``decision`` events).
Policies never act and never know whether they run in the simulator, the emulated runtime or on
a real cluster.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar


@dataclass(frozen=True)
class Observation:
    """What an executor knows when a step has been committed (or when membership changed).

    ``step`` is the number of committed steps so far; ``t`` virtual seconds since the start;
    ``active`` the workers currently able to compute; ``provisioned`` those requested (active or
    waiting for capacity); ``base_lr`` the spec's learning rate, meant for ``reference_workers``
    active workers; ``lr`` the rate in force.
    """

    step: int
    t: float
    active: int
    provisioned: int
    max_workers: int
    reference_workers: int
    base_lr: float
    lr: float
    sync: str
    sync_n: int | None = None
    loss: float | None = None
    price: float | None = None
    bids: tuple[float, ...] = ()
    cost_so_far: float = 0.0
    deadline_s: float | None = None
    budget_usd: float | None = None
    target_iterations: int | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self) -> None:
        if self.step < 0 or self.t < 0:
            raise ValueError("Observation.step and .t must be >= 0")
        if self.active < 0 or self.provisioned < 0 or self.active > max(self.provisioned, self.active):
            raise ValueError("Observation.active and .provisioned must be >= 0")
        if self.max_workers < 1 or self.reference_workers < 1:
            raise ValueError("Observation.max_workers and .reference_workers must be >= 1")
        if not self.base_lr > 0 or not self.lr >= 0:
            raise ValueError("Observation.base_lr must be > 0 and .lr >= 0")


@dataclass(frozen=True)
class Decision:
    """Base of every decision; ``reason`` lands in the event log."""

    reason: str

    def describe(self) -> str:
        fields = {k: v for k, v in self.__dict__.items() if k != "reason"}
        inner = ", ".join(f"{k}={v!r}" for k, v in fields.items())
        return f"{type(self).__name__}({inner})"


@dataclass(frozen=True)
class Noop(Decision):
    reason: str = "nothing to change"


@dataclass(frozen=True)
class Resize(Decision):
    """Provision ``workers`` workers in total (the executor requests or releases the difference)."""

    workers: int = 1

    def __post_init__(self) -> None:
        if self.workers < 0:
            raise ValueError("Resize.workers must be >= 0")


@dataclass(frozen=True)
class Rebid(Decision):
    """Replace the bids ($/h), one per provisioned worker."""

    bids: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        if any(not b > 0 for b in self.bids):
            raise ValueError("Rebid.bids must be positive prices")


@dataclass(frozen=True)
class SwitchSync(Decision):
    """Change the synchronisation mode (``full``, ``n-sync``, ``n-batch``, ``async``) and its N."""

    sync: str = "full"
    sync_n: int | None = None


@dataclass(frozen=True)
class SetLearningRate(Decision):
    lr: float = 0.0

    def __post_init__(self) -> None:
        if not self.lr > 0:
            raise ValueError("SetLearningRate.lr must be > 0")


@dataclass(frozen=True)
class Migrate(Decision):
    """Move the job to another instance type / region / cloud (checkpoint, release, restart)."""

    instance_type: str = ""
    region: str | None = None
    cloud: str | None = None


@dataclass(frozen=True)
class Checkpoint(Decision):
    """Write a checkpoint now."""


class Policy(ABC):
    """``decide(observation) -> list[Decision]``; must be pure (no side effects, no hidden state
    beyond constructor parameters), so that replaying observations replays decisions."""

    name: ClassVar[str]
    #: True for policies that only make sense on a spot market (they change bids); an on-demand
    #: baseline of the same job runs without them (:mod:`spotwise.runtime.baseline`)
    spot_only: ClassVar[bool] = False

    @abstractmethod
    def decide(self, obs: Observation) -> list[Decision]:
        """The decisions to act on now (an empty list means nothing to do)."""
