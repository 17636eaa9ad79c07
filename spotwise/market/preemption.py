"""Revocation models: when each worker is revoked (after the provider's notice) and comes back.

Every model answers the same questions on a *virtual* clock (seconds), so the discrete-event
simulator and the emulated Ray runtime can share them:

* :meth:`RevocationModel.events` -- the full history of ``workers`` workers on the window
  ``[t0, t1)`` as a time-sorted list of :class:`MarketEvent` (``available`` / ``notice`` /
  ``revoke``);
* :meth:`RevocationModel.active_intervals` -- the same history of one worker as half-open
  intervals ``[start, end)`` during which it runs;
* :meth:`RevocationModel.sample_iteration` -- for *iteration-driven* models (the per-iteration
  Bernoulli model of ``papers/000_3c734f3ffedcac15.txt``, Sec. III Remark 2 / Sec. V Lemma 3),
  which of the currently active workers are revoked in this iteration.

Conventions (shared by all models)
----------------------------------
* **Start state.**  At ``t0`` every worker has been *requested* but is not running.  A worker
  that can run at ``t0`` gets an ``available`` event at exactly ``t0``; a worker that cannot
  (e.g. its bid is below the price) gets its first ``available`` event later, or never.
* **Per worker the events alternate**: ``available`` (down -> up), then, if it is revoked inside
  the window, one ``notice`` followed by one ``revoke`` (up -> down), then possibly ``available``
  again, and so on.  Every ``revoke`` is preceded by exactly one ``notice`` (at the same instant
  when ``notice_s == 0``), which carries the revocation time in ``MarketEvent.revoke_at``.
* **When the notice comes (no clairvoyance beyond the provider's).**  A notice for a revocation
  at ``r`` of an interval that began at ``s`` is sent at ``max(r - notice_s, s)``.  ``notice_s``
  is the real provider's notice time (AWS 120 s, GCP/Azure 30 s, ``papers/002_a246f6afe29b4bfb.txt``
  Sec. I): the provider decides a revocation and tells the VM that much ahead, so the emulation
  may reveal the revocation exactly ``notice_s`` early and never earlier.  It may not reveal it
  before the information exists either: before ``s`` the worker has no capacity (nothing to warn)
  and, for a timeline computed from ``t0`` (e.g. after a rebid), the bids that decide it were not
  placed yet -- so a life shorter than ``notice_s`` gets its notice when it starts, and a
  ``notice_s`` of 0 gives the notice at the revocation instant.  For a bid market the revocation
  instant ``r`` is the trace's change point where the price rises above the bid (paper 000's
  model: active iff ``b >= p(t)``), and the notice precedes it by ``notice_s`` as AWS's two-minute
  warning precedes its interruption.  The models know ``r`` in advance (from the trace, or from the
  drawn lifetime), exactly as the emulated provider needs in order to deliver the notice.
* **Window.**  Events lie in ``[t0, t1)``.  A revocation at or after ``t1`` is not reported, nor
  its notice.  Stochastic models are *not* incremental: splitting a window in two and calling
  twice does not give the same history as one call, so call once for the whole horizon.
* **Sorting.**  Events are sorted by ``(t, worker)``; events of one worker at the same instant
  keep their causal order: ``available < notice < revoke`` within one interval (a capped notice
  shares the instant of its ``available``; with ``notice_s = 0`` it shares the instant of its
  ``revoke``), and ``revoke`` then ``available`` when a replacement arrives at once.  A consumer
  that re-sorts events of several workers (the emulated provider's queue) must keep this order.
* **Determinism.**  Stochastic models draw from the ``numpy.random.Generator`` passed in.  Each
  worker gets its own child stream (``rng.spawn``), so worker ``i``'s history does not depend on
  how many workers are asked for, and ``active_intervals(i, ..., rng)`` equals the intervals
  implied by ``events(n, ..., rng)`` for any ``n > i`` when both get generators in the same
  state.  Deterministic models (bid, trace, none) ignore ``rng`` (it may be ``None``).
* **Iteration- vs time-driven.**  Time-driven models (``is_iteration_driven = False``) raise
  :class:`TypeError` from :meth:`~RevocationModel.sample_iteration`: converting a time process
  into per-iteration draws needs iteration durations, which only the executor knows -- it
  should use ``events`` and consult the active set at each step.  The Bernoulli model is
  iteration-driven and converts the other way when given ``iteration_s`` (each iteration is a
  slot of ``iteration_s`` seconds).  :class:`NoRevocation` supports both.

Where they live: the events, notices and the :class:`RevocationModel` interface in
:mod:`spotwise.market.revocation.base`; the market-driven models (bids, availability trace) in
:mod:`spotwise.market.revocation.trace`; the stochastic ones (Bernoulli, lifetimes) in
:mod:`spotwise.market.revocation.stochastic`; :class:`NoRevocation` and the registry
(:func:`make_revocation_model`) here, which also re-exports every public name.

All validation failures raise :class:`spotwise.errors.InputError`.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from spotwise.errors import InputError
from spotwise.market.revocation.base import (EVENT_KINDS, EventKind, Interval, MarketEvent, ProviderNotice,  # noqa: F401
                                             RevocationModel, activity_matrix, events_from_intervals, notice_seconds,
                                             _check_active_mask, _check_notice)
from spotwise.market.revocation.stochastic import BernoulliRevocation, ExponentialLifetime, LifetimeRevocation
from spotwise.market.revocation.trace import AvailabilityTraceRevocation, BidRevocation

__all__ = [
    "EVENT_KINDS",
    "AvailabilityTraceRevocation",
    "BernoulliRevocation",
    "BidRevocation",
    "ExponentialLifetime",
    "LifetimeRevocation",
    "MarketEvent",
    "NoRevocation",
    "ProviderNotice",
    "REVOCATION_MODELS",
    "RevocationModel",
    "activity_matrix",
    "events_from_intervals",
    "make_revocation_model",
    "notice_seconds",
]


# ---------------------------------------------------------------------------------- none
@dataclass(frozen=True)
class NoRevocation(RevocationModel):
    """Workers are never revoked (on-demand capacity); usable both per iteration and in time."""

    notice_s: float = 0.0

    def __post_init__(self) -> None:
        _check_notice(self.notice_s, "revocation model 'none'")

    def _intervals(self, worker: int, t0: float, t1: float, rng: np.random.Generator | None) -> list[Interval]:
        return [(t0, t1)]

    def sample_iteration(self, active_workers: np.ndarray, rng: np.random.Generator | None = None) -> np.ndarray:
        return np.zeros_like(_check_active_mask(active_workers))


# ---------------------------------------------------------------------------------- registry
REVOCATION_MODELS: dict[str, type[RevocationModel]] = {
    "none": NoRevocation,
    "bid": BidRevocation,
    "bernoulli": BernoulliRevocation,
    "lifetime": LifetimeRevocation,
    "exponential": ExponentialLifetime,
    "trace": AvailabilityTraceRevocation,
}
DEFAULT_REVOCATION_MODEL = "none"


def make_revocation_model(name: str, **params: Any) -> RevocationModel:
    """Build a model by registry name; unknown names or parameters raise :class:`InputError`.

    For ``"lifetime"``, ``table=<object with lifetimes_s>`` may replace ``lifetimes_s``.
    """
    key = str(name).strip().lower()
    if key not in REVOCATION_MODELS:
        raise InputError(
            f"unknown revocation model {name!r}; valid names are {', '.join(sorted(REVOCATION_MODELS))}",
            "set market.revocation to one of them",
            where="revocation model",
        )
    cls = REVOCATION_MODELS[key]
    valid = [f.name for f in fields(cls)]  # type: ignore[arg-type]
    if cls is LifetimeRevocation:
        valid.append("table")
    unknown = sorted(set(params) - set(valid))
    if unknown:
        raise InputError(
            f"unknown parameter(s) {', '.join(unknown)} for revocation model {key!r}",
            f"valid parameters are {', '.join(valid)}",
            where="revocation model",
        )
    if cls is LifetimeRevocation and "table" in params:
        table = params.pop("table")
        if "lifetimes_s" in params:
            raise InputError("give either table or lifetimes_s, not both", where="revocation model 'lifetime'")
        return LifetimeRevocation.from_table(table, **params)
    try:
        return cls(**params)
    except TypeError as err:  # a required parameter is missing
        raise InputError(
            f"bad parameters for revocation model {key!r}: {err}",
            f"valid parameters are {', '.join(valid)}",
            where="revocation model",
        ) from None
