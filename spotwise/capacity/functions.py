"""Capacity of a serverless job: function slots that are always there.

Functions are bought per invocation and are not revoked by a market
(``papers/004_9dc2adb66dc8d26e.txt`` Sec. 3): a :class:`FunctionCapacity` has ``slots`` worker
slots, every one available from the start, no scheduled market events, no bids, no markets to
switch and no places to move to.  A slot's "actor" is the slot number: the serverless plane
invokes, watches and re-invokes the slot's functions itself
(:class:`~spotwise.planes.serverless.invocations.FunctionPool`); a function that dies is re-invoked
in the same slot, not revoked.  Time is wall time.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from spotwise.capacity.provider import Provider
from spotwise.market.preemption import MarketEvent


class FunctionCapacity(Provider):
    """``slots`` function slots, all available, never revoked (see the module docstring)."""

    clock = "wall"

    def __init__(self, slots: int) -> None:
        if int(slots) < 1:
            raise ValueError(f"a serverless job needs at least one function slot, got {slots!r}")
        self.slots = int(slots)
        self.released: set[int] = set()

    def peek_time(self) -> float | None:
        return None

    def pop_event(self) -> MarketEvent:  # pragma: no cover - peek_time is always None
        raise IndexError("functions have no scheduled market events")

    def iteration_events(self, t: float, active: np.ndarray) -> list[MarketEvent]:
        return []

    def available_at_start(self) -> set[int]:
        return {w for w in range(self.slots) if w not in self.released}

    def acquire(self, slot: int) -> Any:
        if not 0 <= slot < self.slots:
            raise KeyError(f"no function slot {slot} (the job has {self.slots})")
        return slot

    def kill(self, slot: int, actor: Any) -> None:
        """A slot left the job (scale-in): it is not handed out again."""
        self.released.add(slot)

    def market_state(self) -> dict[str, Any]:
        return {"available": sorted(self.available_at_start()), "iter_rng": ""}

    def resume_market(self, t: float, state: dict[str, Any]) -> None:
        avail = state.get("available")
        if avail is not None:
            self.released = {w for w in range(self.slots) if w not in set(int(a) for a in avail)}

    @property
    def market(self) -> str:
        return "on-demand"
