"""Clocks: how time passes for the coordinator (DESIGN.md, "clocks ... passed in as parameters").

The job controller (:mod:`spotwise.control.controller`) never reads a system clock to decide what
happens next: it asks one :class:`Clock`.

* :class:`VirtualClock` -- simulated and emulated runs.  Time stands still until the coordinator
  moves it: to the time of a market event, or by a duration drawn from the mini-batch time law
  (``papers/000_3c734f3ffedcac15.txt`` eq. 14) and the commit overhead ``Delta``.  Which of the
  mini-batches in flight completes first is known from their drawn finish times, so a run is
  deterministic for a given seed however fast the machine is.
* :class:`WallClock` -- a real cluster.  Time is measured (seconds since the coordinator started,
  plus the virtual time a resumed run had reached), durations are not drawn, and which mini-batch
  completes first is whatever the data plane reports first
  (:meth:`~spotwise.planes.ps.compute.Compute.wait`).

Both clocks are monotone: :meth:`Clock.advance_to` never moves time backwards.
"""

from __future__ import annotations

import math
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Callable

#: ``ready(slots, num_returns, timeout_s)``: the slots (of ``slots``) whose results are ready
ReadyFn = Callable[[list[int], int, "float | None"], list[int]]


class Clock(ABC):
    """The coordinator's time; see the module docstring."""

    #: True where durations are measured (wall time), False where they are drawn (virtual time)
    measured: bool = False

    @abstractmethod
    def now(self) -> float:
        """Seconds since the job's start (a resumed run continues its checkpoint's time)."""

    @abstractmethod
    def advance_to(self, t: float) -> None:
        """Let time reach ``t`` (virtual: jump there if it is later; wall: it passes by itself)."""

    def advance(self, dt: float) -> None:
        """Let ``dt`` seconds pass (a modelled duration: the commit overhead, an idle iteration)."""
        self.advance_to(self.now() + dt)

    @abstractmethod
    def restore(self, t: float) -> None:
        """Continue from time ``t`` (a resumed run: the checkpoint's time)."""

    @abstractmethod
    def duration(self, draw: Callable[[], float]) -> float | None:
        """A mini-batch's duration: ``draw()`` where it is modelled; ``None`` where it is measured."""

    @abstractmethod
    def next_done(self, finish: dict[int, float | None], n: int, ready: ReadyFn) -> tuple[list[int], float | None]:
        """Which of the mini-batches in flight (slot -> drawn finish time) to wait for next.

        Returns ``(slots, t)``: at most ``n`` slots whose results to collect now and the time they
        are complete (``None`` where it is measured: now).  Virtual: the ``n`` earliest drawn
        finish times (ties by slot), known without waiting; ``t`` is the latest of them.  Wall:
        the slots ``ready`` reports within one poll interval (possibly none).
        """


@dataclass
class VirtualClock(Clock):
    """Simulated / emulated time: it moves only when the coordinator moves it (module docstring)."""

    t: float = 0.0
    measured: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        if not (math.isfinite(self.t) and self.t >= 0):
            raise ValueError(f"VirtualClock.t must be finite and >= 0, got {self.t!r}")

    def now(self) -> float:
        return self.t

    def advance_to(self, t: float) -> None:
        if t > self.t:
            self.t = float(t)

    def advance(self, dt: float) -> None:
        if dt > 0:
            self.t += float(dt)

    def restore(self, t: float) -> None:
        self.t = float(t)

    def duration(self, draw: Callable[[], float]) -> float | None:
        return draw()

    def next_done(self, finish: dict[int, float | None], n: int, ready: ReadyFn) -> tuple[list[int], float | None]:
        if not finish or n < 1:
            return [], None
        order = sorted(finish, key=lambda w: (finish[w], w))[:n]
        return order, max(float(finish[w]) for w in order)  # type: ignore[arg-type]


@dataclass
class WallClock(Clock):
    """Measured time: ``offset_s`` plus the seconds since the clock was made (or restored).

    ``poll_s`` is how long :meth:`next_done` waits for a result before handing control back (so
    the coordinator can take joins and notices while mini-batches are in flight).
    """

    offset_s: float = 0.0
    poll_s: float = 0.02
    monotonic: Callable[[], float] = time.monotonic
    measured: bool = field(default=True, init=False)

    def __post_init__(self) -> None:
        if not (math.isfinite(self.offset_s) and self.offset_s >= 0):
            raise ValueError(f"WallClock.offset_s must be finite and >= 0, got {self.offset_s!r}")
        if not (math.isfinite(self.poll_s) and self.poll_s > 0):
            raise ValueError(f"WallClock.poll_s must be finite and > 0, got {self.poll_s!r}")
        self._t0 = self.monotonic()

    def now(self) -> float:
        return self.offset_s + (self.monotonic() - self._t0)

    def advance_to(self, t: float) -> None:
        """Nothing to do: wall time passes by itself (a modelled duration is not waited for)."""

    def advance(self, dt: float) -> None:
        """Nothing to do: the measured time already includes whatever ``dt`` models."""

    def restore(self, t: float) -> None:
        self.offset_s = float(t)
        self._t0 = self.monotonic()

    def duration(self, draw: Callable[[], float]) -> float | None:
        return None

    def next_done(self, finish: dict[int, float | None], n: int, ready: ReadyFn) -> tuple[list[int], float | None]:
        if not finish or n < 1:
            return [], None
        done = ready(list(finish), 1, self.poll_s)  # in the caller's order (oldest call first)
        return sorted(done)[:n], None
