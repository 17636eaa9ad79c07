"""Providers: where workers come from and when they disappear.

The job controller (:mod:`spotwise.control.controller`) talks to one :class:`Provider`:

* :class:`EmulatedProvider` (the default) -- the market (trace replay or synthetic prices) and
  the revocation model decide, on the *virtual* clock, when each worker slot has capacity; the
  workers themselves come from a compute data plane (:mod:`spotwise.planes.ps.compute`): real Ray
  actors on this machine by default, in-process workers without Ray for tests.  A revocation
  really kills the worker, and a joining worker is a *new* one (from a pool of freshly started
  standby actors, so that process start-up does not stall training) handed the current
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
import json
import logging
from abc import ABC, abstractmethod
from typing import Any

import numpy as np

from spotwise.errors import InputError
from spotwise.market.preemption import MarketEvent, RevocationModel
from spotwise.planes.ps.compute import Compute
from spotwise.safeparse import loads_json

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

    def peek_instant(self) -> list[MarketEvent]:
        """The scheduled events of the next instant, in order, none applied yet ([] without a timeline)."""
        return []

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

    def expect_joins(self, n: int) -> None:
        """``n`` :meth:`acquire` calls follow at once (slots that came back at one instant): start
        their workers together where that is possible (nothing here: a real cluster's requested
        workers start on their nodes as those arrive)."""

    def warm_up(self, slots: list[int]) -> list[Any]:
        """Workers for ``slots`` at the start of a run, one per slot (started together where possible)."""
        return [self.acquire(w) for w in slots]

    # ------------------------------------------------------------------ capabilities
    @property
    def supports_bids(self) -> bool:
        """Whether :meth:`rebid` can change bids (a bid-driven market; a real cluster has none)."""
        return False

    @property
    def iteration_driven(self) -> bool:
        """Whether revocations are drawn per iteration (:meth:`iteration_events`) rather than scheduled."""
        return False

    def rebid(self, bids: tuple[float, ...], t: float) -> None:
        """Replace the bids from time ``t`` on; only where :attr:`supports_bids`."""
        raise InputError("this capacity has no bids to change", "use a bid-driven market (market.revocation.model: bid)",
                         "policies")

    def market_state(self) -> dict[str, Any]:
        """What a checkpoint must hold to resume this provider's market where it was
        (``available``: the slots with capacity; ``iter_rng``: the per-iteration generator, JSON)."""
        return {"available": sorted(self.available_at_start()), "iter_rng": ""}

    def resume_market(self, t: float, state: dict[str, Any]) -> None:
        """Continue the market at virtual time ``t`` from a checkpoint's :meth:`market_state`."""

    # ------------------------------------------------------------------ markets and places
    @property
    def supports_markets(self) -> bool:
        """Whether :meth:`switch_market` can move the workers between spot and on-demand capacity."""
        return False

    @property
    def market(self) -> str:
        """What the workers run on now: ``"spot"`` or ``"on-demand"``."""
        return "spot"

    def switch_market(self, market: str, t: float) -> None:
        """Capacity from ``market`` (``"spot"`` or ``"on-demand"``) from time ``t`` on; only where
        :attr:`supports_markets` (the coordinator releases and re-acquires the workers)."""
        raise InputError("this capacity cannot switch markets", "use the emulated provider", "policies")

    @property
    def supports_migration(self) -> bool:
        """Whether :meth:`migrate` can move the job's capacity to another instance type / place."""
        return False

    def migrate(self, place: Any, t: float) -> None:
        """Capacity of ``place`` (a :class:`~spotwise.market.job_market.Market` built for the new instance
        type and region) from time ``t`` on; only where :attr:`supports_migration`."""
        raise InputError("this capacity cannot move to another place", "use the emulated provider", "policies")

    def spot_available(self, t: float) -> bool | None:
        """Whether spot capacity can be had at ``t`` (``None`` where the provider cannot tell)."""
        return None

    # ------------------------------------------------------------------ requested capacity (real clusters)
    @property
    def requests_capacity(self) -> bool:
        """Whether workers must be asked for (:meth:`request`) and their joins collected (:meth:`poll`).

        False for a market timeline (capacity comes and goes by scheduled events); True for a
        real cluster, where a slot's worker starts when a node has room.
        """
        return False

    #: how long a coordinator without workers waits for requested capacity before it gives up
    #: (status ``no-capacity``); only where :attr:`requests_capacity`
    capacity_timeout_s: float = 1800.0

    def prepare(self, slots: list[int], resume: bool = False) -> None:
        """Before the first worker joins: ask for ``slots`` and wait for the first to start
        (where :attr:`requests_capacity`; nothing to do otherwise)."""

    def request(self, slot: int) -> None:
        """Ask for a worker in ``slot`` (it joins through :meth:`poll`); nothing to do for a timeline."""

    def cancel(self, slot: int) -> None:
        """Withdraw a request for ``slot`` (or release a started worker nobody acquired)."""

    def poll(self, timeout: float = 0.0) -> list[int]:
        """Slots whose requested worker has started and waits to be acquired (waiting up to ``timeout``)."""
        return []

    def shutdown(self) -> None:
        """Release every resource the provider holds."""


class EmulatedProvider(Provider):
    """Market-driven capacity on a virtual clock; the workers come from a compute data plane.

    ``model`` is expanded for ``slots`` slots over ``[0, horizon)`` with a generator seeded by
    ``seed`` (so a resumed run sees the same market).  Workers are started, handed out and killed
    by ``compute`` (:class:`~spotwise.planes.ps.compute.RayCompute`: real Ray actors with a standby
    pool; :class:`~spotwise.planes.ps.compute.LocalCompute`: in-process workers, no Ray).  Without
    ``compute`` the provider is a market timeline only (``acquire`` raises).
    """

    clock = "virtual"

    def __init__(
        self,
        model: RevocationModel,
        slots: int,
        horizon: float,
        seed: int,
        compute: Compute | None = None,
    ) -> None:
        self.model = model
        #: the spot revocation model of the current place (``model`` is NoRevocation while on on-demand)
        self.spot_model = model
        self._market = "spot"
        self.seed = int(seed)
        #: timelines re-expanded so far (market switches, migrations): seeds each new expansion
        self._expansions = 0
        self.slots = int(slots)
        self.horizon = float(horizon)
        self.compute = compute
        self._iter_rng = np.random.default_rng([seed, 7])
        self._available: set[int] = set()
        self._events: list[tuple[float, int, int, MarketEvent]] = []
        self._seq = 0
        #: per slot, while pushing a timeline in the model's causal order: (start, rank offset) of
        #: its current interval, and the time of its last revocation
        self._push_up: dict[int, tuple[float, int]] = {}
        self._push_revoked: dict[int, float] = {}
        #: where the current timeline came from and how many of its events were applied: a checkpoint
        #: holds both, so a resume is at exactly the same event, not at "every event up to its time"
        #: (two events of one instant can fall on both sides of a checkpoint; issue 30 item 8)
        self._origin: dict[str, Any] = {"origin": "initial", "t": 0.0}
        self._popped = 0
        if model.is_iteration_driven:
            self._available = set(range(self.slots))
        else:
            evs = model.events(self.slots, 0.0, self.horizon, np.random.default_rng([seed, 11]))
            for ev in evs:
                self._push(ev)
            # capacity at t = 0 is the initial state; notices at t = 0 stay queued for the coordinator
            self._apply_available_until(0.0)

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
            self.pop_event()

    def _apply(self, ev: MarketEvent) -> None:
        if ev.kind == "available":
            self._available.add(ev.worker)
        elif ev.kind == "revoke":
            self._available.discard(ev.worker)

    def peek_time(self) -> float | None:
        return self._events[0][0] if self._events else None

    def pop_event(self) -> MarketEvent:
        ev = heapq.heappop(self._events)[3]
        self._popped += 1
        self._apply(ev)
        return ev

    def peek_instant(self) -> list[MarketEvent]:
        """The events of the next instant without popping them: a plane that must see a whole instant
        before acting (the collective plane's lease) then pops and applies them one by one, so a
        checkpoint taken between two of them records exactly those applied."""
        if not self._events:
            return []
        t0, keys = self._events[0][0], []
        while self._events and self._events[0][0] == t0:
            keys.append(heapq.heappop(self._events))
        for key in keys:
            heapq.heappush(self._events, key)
        return [key[3] for key in keys]

    def fast_forward(self, t: float) -> None:
        """Apply every scheduled event up to ``t`` silently (used when resuming a run)."""
        while self._events and self._events[0][0] <= t:
            self.pop_event()

    def available_at_start(self) -> set[int]:
        return set(self._available)

    @property
    def supports_bids(self) -> bool:
        from spotwise.market.preemption import BidRevocation

        return isinstance(self.model, BidRevocation)

    @property
    def iteration_driven(self) -> bool:
        return bool(self.model.is_iteration_driven)

    def market_state(self) -> dict[str, Any]:
        return {"available": sorted(self._available),
                "iter_rng": json.dumps(self.rng_state()) if self.iteration_driven else "", "market": self._market,
                "expansions": self._expansions, "timeline": {**self._origin, "popped": self._popped}}

    def resume_market(self, t: float, state: dict[str, Any]) -> None:
        """Continue where the checkpoint was: the timeline it was on (the initial one, or the one a
        market switch, a migration or a rebid expanded at its instant, rebuilt from the same seed) with
        exactly the events it had applied (:meth:`_replay`).  A
        checkpoint without that record (an older one): the original timeline fast-forwarded to ``t``,
        or after a switch or migration a timeline expanded afresh from ``t`` (deterministic, but not
        the one the interrupted run would have seen)."""
        timeline = state.get("timeline")
        if isinstance(timeline, dict) and not self.iteration_driven:
            self._replay(timeline, state)
            return
        expansions = int(state.get("expansions", 0) or 0)
        if expansions:
            self._expansions = expansions - 1
            self.switch_market(str(state.get("market", "spot")), t)
            self.set_available(set(state["available"]) if self.iteration_driven else self._available)
            if self.iteration_driven and state.get("iter_rng"):
                self.set_rng_state(loads_json(state["iter_rng"], "checkpoint", "checkpoint's iter_rng"))
            return
        self.fast_forward(t)
        if self.iteration_driven:
            self.set_available(set(state["available"]))
            self.set_rng_state(loads_json(state["iter_rng"], "checkpoint", "checkpoint's iter_rng"))

    def _replay(self, timeline: dict[str, Any], state: dict[str, Any]) -> None:
        """Rebuild the checkpoint's timeline and apply exactly its first ``popped`` events (checked:
        a checkpoint is untrusted input)."""
        origin, t0, popped = timeline.get("origin"), timeline.get("t"), timeline.get("popped")
        if (origin not in ("initial", "expand", "rebid") or isinstance(t0, bool) or not isinstance(t0, (int, float))
                or not np.isfinite(t0) or isinstance(popped, bool) or not isinstance(popped, int) or popped < 0):
            raise ValueError(f"the checkpoint's market timeline record is malformed: {timeline!r}")
        expansions = int(state.get("expansions", 0) or 0)
        if origin == "expand":
            self._expansions = expansions - 1
            self.switch_market(str(state.get("market", "spot")), float(t0))
        elif origin == "rebid":
            bids = timeline.get("bids")
            if not isinstance(bids, list) or len(bids) != self.slots:
                raise ValueError(f"the checkpoint's market timeline has no bid per slot: {bids!r}")
            self._expansions = expansions
            self._market = str(state.get("market", "spot"))
            self.rebid(tuple(float(b) for b in bids), float(t0))
        while self._popped < popped:
            if not self._events:
                raise ValueError(f"the checkpoint's market timeline is past its end ({popped} events applied)")
            self.pop_event()
        avail = state.get("available")
        if avail is not None and sorted(self._available) != sorted(avail):  # what it says is what its timeline makes
            raise ValueError(f"the checkpoint's available slots {sorted(avail)!r:.80} are not those of its market "
                             f"timeline after {popped} events ({sorted(self._available)!r:.80})")

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
        self._origin = {"origin": "rebid", "t": float(t), "bids": [float(b) for b in bids]}
        self._popped = 0
        self._events = []
        self._available = set()
        self._push_up, self._push_revoked = {}, {}
        for ev in self.model.events(self.slots, t, self.horizon):
            self._push(ev)
        # the new timeline starts at t: capacity at t is applied now, notices at t (capped at the
        # rebid, the earliest the new bids exist) stay queued for the coordinator
        self._apply_available_until(t)

    # ------------------------------------------------------------------ markets and places
    @property
    def supports_markets(self) -> bool:
        return True

    @property
    def market(self) -> str:
        return self._market

    def switch_market(self, market: str, t: float) -> None:
        """On-demand capacity is never revoked (:class:`NoRevocation`); back on ``"spot"`` the place's
        revocation model holds again, its timeline expanded afresh from ``t`` (deterministically)."""
        from spotwise.market.preemption import NoRevocation

        if market not in ("spot", "on-demand"):
            raise ValueError(f"market must be 'spot' or 'on-demand', got {market!r}")
        self._market = market
        self.model = self.spot_model if market == "spot" else NoRevocation(notice_s=float(self.spot_model.notice_s))
        self._expand_from(t)

    @property
    def supports_migration(self) -> bool:
        return True

    def migrate(self, place: Any, t: float) -> None:
        """The revocation model of ``place`` (a Market) from ``t`` on, on the market in force."""
        self.spot_model = place.revocation
        self.switch_market(self._market, t)

    def spot_available(self, t: float) -> bool | None:
        from spotwise.market.preemption import BidRevocation

        model = self.spot_model
        if isinstance(model, BidRevocation):
            bids = model.bids if isinstance(model.bids, tuple) else (model.bids,)
            return float(model.prices.value_at(t)) <= max(bids)
        if self._market == "spot" and not model.is_iteration_driven:
            return bool(self._available)
        return None

    def _expand_from(self, t: float) -> None:
        """Replace the scheduled timeline by :attr:`model`'s from ``t`` to the horizon."""
        self._expansions += 1
        self._origin = {"origin": "expand", "t": float(t)}
        self._popped = 0
        self._events = []
        self._available = set()
        self._push_up, self._push_revoked = {}, {}
        if self.model.is_iteration_driven:
            self._available = set(range(self.slots))
            return
        if t < self.horizon:
            rng = np.random.default_rng([self.seed, 13, self._expansions])
            for ev in self.model.events(self.slots, t, self.horizon, rng):
                self._push(ev)
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

    # ------------------------------------------------------------------ workers (from the compute data plane)
    def _workers(self) -> Compute:
        if self.compute is None:
            raise RuntimeError("this provider has no compute data plane: it is a market timeline only")
        return self.compute

    def warm_up(self, slots: list[int]) -> list[Any]:
        """Start the initial fleet's workers at once and wait for all."""
        return self._workers().warm_up(len(slots))

    def acquire(self, slot: int) -> Any:
        return self._workers().acquire()

    def expect_joins(self, n: int) -> None:
        if self.compute is not None:
            self.compute.expect(n)

    def kill(self, slot: int, actor: Any) -> None:
        self._workers().kill(actor)

    def shutdown(self) -> None:
        if self.compute is not None:
            self.compute.shutdown()
