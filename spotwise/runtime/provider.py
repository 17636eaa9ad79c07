"""Providers: where workers come from and when they disappear.

The coordinator (:mod:`spotwise.runtime.coordinator`) talks to one :class:`Provider`:

* :class:`EmulatedProvider` (the default) -- the market (trace replay or synthetic prices) and
  the revocation model decide, on the *virtual* clock, when each worker slot has capacity; the
  workers themselves are real Ray actors on this machine.  A revocation really kills the actor
  (``ray.kill``), and a joining worker is a *new* actor (taken from a pool of freshly started
  standby actors so that process start-up does not stall training) which receives the current
  parameters.
* :class:`ClusterProvider` -- an existing Ray cluster: workers are placed on nodes carrying a
  ``spot`` resource; capacity is whatever the cluster has; a lost node shows up as a dead actor
  and is handled like a revocation.

Market events are :class:`spotwise.market.preemption.MarketEvent` values (``notice``, ``revoke``,
``available``) per slot.  Time-driven models are expanded once over the horizon; iteration-driven
ones (Bernoulli, paper 000 Remark 2) are sampled by :meth:`Provider.iteration_events` at each step.

**Order of events at one instant** (one causal order, the models' own: see "Sorting" and "When
the notice comes" in :mod:`spotwise.market.preemption`): ``available < notice < revoke``, so a
notice capped at the moment capacity was granted reaches a worker that is already a member, and a
notice with ``notice_s = 0`` arrives before the revocation it announces.  The one exception is a
replacement granted at the very instant its slot was revoked: that ``available`` (and anything
of the new interval at the same instant) comes after the revocation.  No notice is swallowed:
the initial state and a rebid apply only ``available`` events silently; notices at that instant
stay queued for the coordinator.
"""

from __future__ import annotations

import heapq
import logging
import time
from abc import ABC, abstractmethod
from collections import deque
from typing import Any

import numpy as np

from spotwise.errors import InputError
from spotwise.market.preemption import MarketEvent, RevocationModel

log = logging.getLogger(__name__)


class Provider(ABC):
    """What the coordinator needs from the outside world's capacity."""

    #: "virtual" (emulated market) or "wall" (a real cluster)
    clock: str = "virtual"

    @abstractmethod
    def peek_time(self) -> float | None:
        """Time of the next scheduled market event, ``None`` if there is none."""

    @abstractmethod
    def pop_event(self) -> MarketEvent:
        """Remove and return the next scheduled market event."""

    @abstractmethod
    def iteration_events(self, t: float, active: np.ndarray) -> list[MarketEvent]:
        """Revocations / re-joins drawn for one iteration (iteration-driven models); [] otherwise."""

    @abstractmethod
    def available_at_start(self) -> set[int]:
        """Slots with capacity at the current position of the timeline."""

    @abstractmethod
    def acquire(self, slot: int) -> Any:
        """A new, ready worker actor for ``slot``."""

    @abstractmethod
    def kill(self, slot: int, actor: Any) -> None:
        """Terminate ``slot``'s actor (revocation or release)."""

    def shutdown(self) -> None:
        """Release every resource the provider holds."""


class EmulatedProvider(Provider):
    """Market-driven capacity on a virtual clock, with real Ray actors.

    ``model`` is expanded for ``slots`` slots over ``[0, horizon)`` with a generator seeded by
    ``seed`` (so a resumed run sees the same market).  ``standby`` fresh actors are kept starting
    in the background; :meth:`acquire` hands one out and starts a replacement.
    """

    clock = "virtual"

    def __init__(
        self,
        model: RevocationModel,
        slots: int,
        horizon: float,
        seed: int,
        worker_args: tuple[Any, ...],
        standby: int = 2,
        actor_options: dict[str, Any] | None = None,
    ) -> None:
        self.model = model
        self.slots = int(slots)
        self.horizon = float(horizon)
        self.worker_args = worker_args
        self.actor_options = {"num_cpus": 0, **(actor_options or {})}
        self._standby_target = max(0, int(standby))
        #: standby actors start at low CPU priority and are promoted when they join
        self.low_priority_standby = True
        self._standby: deque[tuple[Any, Any]] = deque()
        self._iter_rng = np.random.default_rng([seed, 7])
        self._available: set[int] = set()
        self._events: list[tuple[float, int, int, MarketEvent]] = []
        self._seq = 0
        #: per slot, while pushing a timeline in the model's causal order: (start, rank offset) of
        #: its current interval, and the time of its last revocation
        self._push_up: dict[int, tuple[float, int]] = {}
        self._push_revoked: dict[int, float] = {}
        self.spawned = 0
        self.killed = 0
        if model.is_iteration_driven:
            self._available = set(range(self.slots))
        else:
            evs = model.events(self.slots, 0.0, self.horizon, np.random.default_rng([seed, 11]))
            for ev in evs:
                self._push(ev)
            # capacity at t = 0 is the initial state; notices at t = 0 stay queued for the coordinator
            self._apply_available_until(0.0)
        self._fill_standby()

    # ------------------------------------------------------------------ market timeline
    def _push(self, ev: MarketEvent) -> None:
        """Queue ``ev``; events must be pushed in the model's causal order per slot.

        The queue key is ``(t, rank, seq)``: ``available`` 0, ``notice`` 1, ``revoke`` 2, plus 3
        for the events of an interval that starts at the instant its slot was revoked (a
        zero-delay replacement comes after the revocation it replaces).
        """
        w = ev.worker
        if ev.kind == "available":
            offset = 3 if self._push_revoked.get(w) == ev.t else 0
            self._push_up[w] = (ev.t, offset)
            rank = offset
        else:
            start, offset = self._push_up.get(w, (None, 0))
            rank = (1 if ev.kind == "notice" else 2) + (offset if start == ev.t else 0)
            if ev.kind == "revoke":
                self._push_up.pop(w, None)
                self._push_revoked[w] = ev.t
        heapq.heappush(self._events, (ev.t, rank, self._seq, ev))
        self._seq += 1

    def _apply_available_until(self, t: float) -> None:
        """Apply the ``available`` events at or before ``t`` silently (the state at ``t``)."""
        while self._events and self._events[0][0] <= t and self._events[0][3].kind == "available":
            self._apply(heapq.heappop(self._events)[3])

    def _apply(self, ev: MarketEvent) -> None:
        if ev.kind == "available":
            self._available.add(ev.worker)
        elif ev.kind == "revoke":
            self._available.discard(ev.worker)

    def peek_time(self) -> float | None:
        return self._events[0][0] if self._events else None

    def pop_event(self) -> MarketEvent:
        ev = heapq.heappop(self._events)[3]
        self._apply(ev)
        return ev

    def fast_forward(self, t: float) -> None:
        """Apply every scheduled event up to ``t`` silently (used when resuming a run)."""
        while self._events and self._events[0][0] <= t:
            self.pop_event()

    def available_at_start(self) -> set[int]:
        return set(self._available)

    def rebid(self, bids: tuple[float, ...], t: float) -> None:
        """Replace the bids from time ``t`` on (persistent requests re-placed at the new prices).

        Only meaningful for bid-driven markets (paper 000 Sec. IV); ``bids`` has one bid per slot.
        The timeline after ``t`` is recomputed from the same price series, so the market stays
        deterministic; availability at ``t`` follows the new bids at once.
        """
        from spotwise.market.preemption import BidRevocation

        if not isinstance(self.model, BidRevocation):
            raise InputError("rebidding needs a bid-driven market", "set market.revocation.model: bid", "policies")
        if len(bids) != self.slots:
            raise ValueError(f"rebid needs one bid per slot ({self.slots}), got {len(bids)}")
        self.model = BidRevocation(self.model.prices, tuple(float(b) for b in bids), persistent=self.model.persistent,
                                   notice_s=self.model.notice_s)
        self._events = []
        self._available = set()
        self._push_up, self._push_revoked = {}, {}
        for ev in self.model.events(self.slots, t, self.horizon):
            self._push(ev)
        # the new timeline starts at t: capacity at t is applied now, notices at t (capped at the
        # rebid, the earliest the new bids exist) stay queued for the coordinator
        self._apply_available_until(t)

    def set_available(self, slots: set[int]) -> None:
        """Restore the iteration-driven availability state (from a checkpoint)."""
        self._available = set(slots)

    def iteration_events(self, t: float, active: np.ndarray) -> list[MarketEvent]:
        if not self.model.is_iteration_driven:
            return []
        avail = np.zeros(self.slots, dtype=bool)
        avail[list(self._available)] = True
        nxt = self.model.step(avail, self._iter_rng)  # type: ignore[attr-defined]
        out: list[MarketEvent] = []
        for w in np.nonzero(avail & ~nxt)[0]:
            out.append(MarketEvent(t, int(w), "notice", revoke_at=t))
            out.append(MarketEvent(t, int(w), "revoke"))
        for w in np.nonzero(~avail & nxt)[0]:
            out.append(MarketEvent(t, int(w), "available"))
        for ev in out:
            self._apply(ev)
        return out

    def rng_state(self) -> dict[str, Any]:
        return self._iter_rng.bit_generator.state

    def set_rng_state(self, state: dict[str, Any]) -> None:
        self._iter_rng.bit_generator.state = state

    # ------------------------------------------------------------------ actors
    def _start_actor(self) -> tuple[Any, Any]:
        from spotwise.runtime.worker import remote_worker_class

        opts = dict(self.actor_options)
        if self.low_priority_standby:
            opts["runtime_env"] = {"worker_process_setup_hook": "spotwise.runtime.worker.low_priority"}
        actor = remote_worker_class().options(**opts).remote(*self.worker_args)
        self.spawned += 1
        return actor, actor.ready.remote()

    def _fill_standby(self) -> None:
        while len(self._standby) < self._standby_target:
            self._standby.append(self._start_actor())

    def warm_up(self, n: int) -> list[Any]:
        """Start ``n`` actors at once and wait for all (the initial workers)."""
        import ray

        started = [self._start_actor() for _ in range(n)]
        ray.get([ready for _, ready in started])
        if self.low_priority_standby:
            ray.get([a.promote.remote() for a, _ in started])
        return [a for a, _ in started]

    def acquire(self, slot: int) -> Any:
        import ray

        if self._standby:
            actor, ready = self._standby.popleft()
        else:
            actor, ready = self._start_actor()
        ray.get(ready)
        if self.low_priority_standby:
            ray.get(actor.promote.remote())
        self._fill_standby()
        return actor

    def kill(self, slot: int, actor: Any) -> None:
        import ray

        ray.kill(actor, no_restart=True)
        self.killed += 1

    def shutdown(self) -> None:
        import ray

        while self._standby:
            actor, _ = self._standby.popleft()
            try:
                ray.kill(actor, no_restart=True)
            except Exception:  # pragma: no cover - best effort at shutdown
                pass
