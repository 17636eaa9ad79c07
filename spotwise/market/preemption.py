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

All validation failures raise :class:`spotwise.errors.InputError`.
"""

from __future__ import annotations

import math
import numbers
from abc import ABC, abstractmethod
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, Literal, Sequence

import numpy as np

from spotwise.errors import InputError
from spotwise.market.series import StepSeries

EventKind = Literal["notice", "revoke", "available"]
EVENT_KINDS: tuple[str, ...] = ("notice", "revoke", "available")

Interval = tuple[float, float]

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


# ---------------------------------------------------------------------------------- notices
class ProviderNotice:
    """Revocation notice time per provider, in seconds.

    AWS sends a spot interruption notice two minutes ahead; GCP preemptible/spot VMs and Azure
    low-priority/spot VMs get 30 seconds (``papers/002_a246f6afe29b4bfb.txt``, Sec. I: "30
    seconds for GCE and 2 minutes for EC2").
    """

    AWS: ClassVar[float] = 120.0
    GCP: ClassVar[float] = 30.0
    AZURE: ClassVar[float] = 30.0

    _ALIASES: ClassVar[dict[str, str]] = {
        "aws": "AWS",
        "ec2": "AWS",
        "amazon": "AWS",
        "gcp": "GCP",
        "gce": "GCP",
        "google": "GCP",
        "azure": "AZURE",
        "microsoft": "AZURE",
    }

    @classmethod
    def for_cloud(cls, cloud: str) -> float:
        """Notice seconds for ``cloud`` (case-insensitive; ``aws``/``ec2``, ``gcp``/``gce``, ``azure``)."""
        key = str(cloud).strip().lower()
        if key not in cls._ALIASES:
            raise InputError(
                f"unknown cloud {cloud!r} for the revocation notice time",
                f"use one of {', '.join(sorted(cls._ALIASES))}, or give notice_s explicitly",
                where="notice",
            )
        return float(getattr(cls, cls._ALIASES[key]))


def notice_seconds(cloud: str) -> float:
    """Shorthand for :meth:`ProviderNotice.for_cloud`."""
    return ProviderNotice.for_cloud(cloud)


# ---------------------------------------------------------------------------------- events
_KIND_ORDER = {"available": 0, "notice": 1, "revoke": 2}


@dataclass(frozen=True)
class MarketEvent:
    """One change of a worker's state at virtual time ``t`` (seconds).

    ``kind`` is ``"notice"`` (the provider warns that ``worker`` will be revoked), ``"revoke"``
    (the worker is gone) or ``"available"`` (capacity for ``worker`` is granted: the initial
    start, a persistent request resuming, or a replacement VM).
    """

    t: float
    worker: int
    kind: EventKind
    #: for a ``notice``: when the announced revocation happens (``None``: not known); not part of
    #: the event's identity (equality and hashing ignore it)
    revoke_at: float | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if isinstance(self.t, bool) or not isinstance(self.t, numbers.Real) or not math.isfinite(float(self.t)):
            raise InputError(f"event time must be a finite number, got {self.t!r}", where="MarketEvent.t")
        object.__setattr__(self, "t", float(self.t))
        if isinstance(self.worker, bool) or not isinstance(self.worker, numbers.Integral) or int(self.worker) < 0:
            raise InputError(f"worker must be a non-negative integer, got {self.worker!r}", where="MarketEvent.worker")
        object.__setattr__(self, "worker", int(self.worker))
        if self.kind not in EVENT_KINDS:
            raise InputError(
                f"unknown event kind {self.kind!r}", f"use one of {', '.join(EVENT_KINDS)}", where="MarketEvent.kind"
            )
        if self.revoke_at is not None:
            r = self.revoke_at
            if isinstance(r, bool) or not isinstance(r, numbers.Real) or not float(r) >= float(self.t):
                raise InputError(f"revoke_at must be a time >= t ({self.t}), got {r!r}", where="MarketEvent.revoke_at")
            object.__setattr__(self, "revoke_at", float(r))

    def to_dict(self) -> dict[str, object]:
        """The event as an ``events.jsonl``-style record (``t``, ``kind``, ``worker``)."""
        return {"t": self.t, "kind": self.kind, "worker": self.worker}


def events_from_intervals(
    intervals: Sequence[Sequence[Interval]], notice_s: float, t0: float, t1: float
) -> list[MarketEvent]:
    """Turn per-worker active intervals on ``[t0, t1)`` into a sorted event list.

    ``intervals[i]`` must be sorted, non-overlapping ``[start, end)`` pairs inside ``[t0, t1]``.
    An interval ending before ``t1`` ends with a revocation (``notice`` at
    ``max(end - notice_s, start)`` carrying ``revoke_at=end``, then ``revoke`` at ``end``; see
    "When the notice comes" in the module docstring); one ending at ``t1`` is merely cut by the
    window.
    """
    per_worker: list[MarketEvent] = []
    for w, ivs in enumerate(intervals):
        for s, e in ivs:
            per_worker.append(MarketEvent(s, w, "available"))
            if e < t1:
                per_worker.append(MarketEvent(max(e - notice_s, s), w, "notice", revoke_at=e))
                per_worker.append(MarketEvent(e, w, "revoke"))
    # stable: same (t, worker) keeps causal order
    return sorted(per_worker, key=lambda ev: (ev.t, ev.worker))


def activity_matrix(intervals: Sequence[Sequence[Interval]], times: np.ndarray | Sequence[float]) -> np.ndarray:
    """``out[i, k]`` is True iff some interval ``[s, e)`` of worker ``i`` contains ``times[k]``."""
    ts = np.asarray(times, dtype=float)
    out = np.zeros((len(intervals), ts.size), dtype=bool)
    for i, ivs in enumerate(intervals):
        for s, e in ivs:
            out[i] |= (ts >= s) & (ts < e)
    return out


# ---------------------------------------------------------------------------------- helpers
def _check_window(t0: float, t1: float) -> tuple[float, float]:
    a, b = float(t0), float(t1)
    if not (math.isfinite(a) and math.isfinite(b)) or not b > a:
        raise InputError(f"bad time window [{t0}, {t1})", "give finite times with t0 < t1", where="revocation window")
    return a, b


def _check_workers(workers: int) -> int:
    if isinstance(workers, bool) or not isinstance(workers, numbers.Integral) or int(workers) < 0:
        raise InputError(f"workers must be a non-negative integer, got {workers!r}", where="revocation model")
    return int(workers)


def _check_notice(notice_s: float, where: str) -> float:
    if isinstance(notice_s, bool) or not isinstance(notice_s, numbers.Real) or not (
        math.isfinite(float(notice_s)) and float(notice_s) >= 0
    ):
        raise InputError(f"notice_s must be a finite number >= 0, got {notice_s!r}", where=where)
    return float(notice_s)


def _check_real(value: Any, name: str, where: str, *, lo: float = 0.0, lo_open: bool = False, allow_inf: bool = False) -> float:
    ok = not isinstance(value, bool) and isinstance(value, numbers.Real)
    v = float(value) if ok else math.nan
    if ok:
        ok = (not math.isnan(v)) and (allow_inf or math.isfinite(v)) and (v > lo if lo_open else v >= lo)
    if not ok:
        bound = f"> {lo}" if lo_open else f">= {lo}"
        raise InputError(f"{name} must be a {'number' if allow_inf else 'finite number'} {bound}, got {value!r}", where=where)
    return v


def _spawn(rng: np.random.Generator | None, n: int) -> list[np.random.Generator | None]:
    """One independent child generator per worker (``None``s for deterministic use)."""
    if rng is None:
        return [None] * n
    if n == 0:
        return []
    try:
        return list(rng.spawn(n))
    except (AttributeError, TypeError, ValueError):  # generator without a SeedSequence
        seeds = rng.integers(0, 2**63 - 1, size=n)
        return [np.random.default_rng(int(s)) for s in seeds]


def _runs_to_intervals(times: np.ndarray, active: np.ndarray, t1: float) -> list[Interval]:
    """Step function (``active[k]`` on ``[times[k], times[k+1])``, last to ``t1``) -> intervals."""
    out: list[Interval] = []
    start: float | None = None
    for t, a in zip(times.tolist(), active.tolist()):
        if a and start is None:
            start = t
        elif not a and start is not None:
            out.append((start, t))
            start = None
    if start is not None:
        out.append((start, t1))
    return out


# ---------------------------------------------------------------------------------- base
class RevocationModel(ABC):
    """Interface of every revocation model (see the module docstring for the conventions)."""

    is_iteration_driven: ClassVar[bool] = False
    needs_rng: ClassVar[bool] = False
    notice_s: float

    # -- to implement -----------------------------------------------------------------------
    @abstractmethod
    def _intervals(self, worker: int, t0: float, t1: float, rng: np.random.Generator | None) -> list[Interval]:
        """Sorted, non-overlapping active intervals of one worker inside ``[t0, t1]``."""

    # -- public -----------------------------------------------------------------------------
    def _rng(self, rng: np.random.Generator | None) -> np.random.Generator | None:
        if rng is None and self.needs_rng:
            raise TypeError(f"{type(self).__name__} is stochastic: pass a numpy.random.Generator as rng")
        if rng is not None and not isinstance(rng, np.random.Generator):
            raise TypeError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")
        return rng

    def active_intervals(
        self, worker: int, t0: float, t1: float, rng: np.random.Generator | None = None
    ) -> list[Interval]:
        """Half-open intervals ``[start, end)`` inside ``[t0, t1)`` during which ``worker`` runs.

        For stochastic models this spawns ``worker + 1`` child streams from ``rng`` and uses the
        last, so it agrees with :meth:`events` given a generator in the same state.
        """
        w = _check_workers(worker)
        a, b = _check_window(t0, t1)
        child = _spawn(self._rng(rng), w + 1)[w]
        return self._intervals(w, a, b, child)

    def all_intervals(
        self, workers: int, t0: float, t1: float, rng: np.random.Generator | None = None
    ) -> list[list[Interval]]:
        """:meth:`active_intervals` of workers ``0 .. workers-1`` (one draw of ``rng``)."""
        n = _check_workers(workers)
        a, b = _check_window(t0, t1)
        children = _spawn(self._rng(rng), n)
        return [self._intervals(i, a, b, children[i]) for i in range(n)]

    def events(self, workers: int, t0: float, t1: float, rng: np.random.Generator | None = None) -> list[MarketEvent]:
        """Time-sorted ``available`` / ``notice`` / ``revoke`` events of ``workers`` workers on ``[t0, t1)``."""
        a, b = _check_window(t0, t1)
        return events_from_intervals(self.all_intervals(workers, a, b, rng), self.notice_s, a, b)

    def activity_matrix(
        self, times: np.ndarray | Sequence[float], workers: int, rng: np.random.Generator | None = None
    ) -> np.ndarray:
        """``out[i, k]``: is worker ``i`` active at ``times[k]`` (history started at ``min(times)``)."""
        ts = np.asarray(times, dtype=float)
        if ts.ndim != 1 or ts.size == 0 or not np.all(np.isfinite(ts)):
            raise InputError("times must be a non-empty 1-D array of finite numbers", where="activity_matrix")
        t0 = float(ts.min())
        t1 = float(np.nextafter(ts.max(), np.inf))
        return activity_matrix(self.all_intervals(workers, t0, t1, rng), ts)

    def sample_iteration(self, active_workers: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Which of ``active_workers`` are revoked in this iteration (iteration-driven models only)."""
        raise TypeError(
            f"{type(self).__name__} is time-driven and cannot sample per iteration: use events() or "
            "active_intervals() on the virtual clock, or BernoulliRevocation for a per-iteration model"
        )


def _check_active_mask(active_workers: np.ndarray) -> np.ndarray:
    act = np.asarray(active_workers)
    if act.ndim != 1 or act.dtype != bool:
        raise InputError("active_workers must be a 1-D boolean array", where="sample_iteration")
    return act


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


# ---------------------------------------------------------------------------------- bids
@dataclass(frozen=True)
class BidRevocation(RevocationModel):
    """Spot bids against a price trace (``papers/000_3c734f3ffedcac15.txt``, Sec. III-C and IV).

    Worker ``i`` bidding ``b_i`` is active iff ``b_i >= p(t)`` ("a worker is active only if its
    bid price exceeds the current spot price ... whenever a worker is active (b >= p_t)",
    Sec. IV, spot price and bidding model); a tie ``b_i == p(t)`` is active.  Revocation
    happens at the change point where the price rises above the bid; the notice comes
    ``notice_s`` before it (AWS: 120 s), but never before the worker's capacity was granted (a
    run below the bid shorter than ``notice_s`` is noticed when it starts) -- the rule of "When
    the notice comes" in the module docstring.

    * ``persistent=True`` (the paper's assumption, Sec. IV-A before Thm 3): the request resumes
      (``available``) whenever the price falls back to ``<= b_i``.
    * ``persistent=False``: a one-time request.  It stays open from ``t0`` until first
      fulfilled (price ``<= b_i``) and never comes back after its first revocation.

    ``bids`` is one bid for every worker (a float) or one bid per worker (then ``events`` must
    be asked for exactly ``len(bids)`` workers); :meth:`two_groups` builds the two-bid layout of
    Sec. IV-B1 (workers ``0 .. n_h-1`` bid ``b_h``, the rest ``b_l``).
    """

    prices: StepSeries
    bids: float | tuple[float, ...]
    persistent: bool = True
    notice_s: float = ProviderNotice.AWS

    def __post_init__(self) -> None:
        where = "revocation model 'bid'"
        if not isinstance(self.prices, StepSeries) or self.prices.kind != "price":
            raise InputError("prices must be a StepSeries of kind 'price'", "load a spot price trace", where)
        if isinstance(self.bids, numbers.Real) and not isinstance(self.bids, bool):
            object.__setattr__(self, "bids", _check_real(self.bids, "bid", where))
        else:
            try:
                seq = tuple(self.bids)  # type: ignore[arg-type]
            except TypeError:
                raise InputError(f"bids must be a number or a list of numbers, got {self.bids!r}", where=where) from None
            if not seq:
                raise InputError("bids is empty", "give one bid, or one bid per worker", where)
            object.__setattr__(self, "bids", tuple(_check_real(b, "bid", where) for b in seq))
        if not isinstance(self.persistent, bool):
            raise InputError(f"persistent must be true or false, got {self.persistent!r}", where=where)
        object.__setattr__(self, "notice_s", _check_notice(self.notice_s, where))

    @classmethod
    def two_groups(
        cls,
        prices: StepSeries,
        b_high: float,
        n_high: int,
        b_low: float,
        n_low: int,
        persistent: bool = True,
        notice_s: float = ProviderNotice.AWS,
    ) -> "BidRevocation":
        """Two bid groups of paper 000 Sec. IV-B1 (Thm 4): ``n_high`` workers at ``b_high`` first."""
        nh, nl = _check_workers(n_high), _check_workers(n_low)
        return cls(prices, (float(b_high),) * nh + (float(b_low),) * nl, persistent, notice_s)

    def bid_of(self, worker: int) -> float:
        if isinstance(self.bids, tuple):
            if worker >= len(self.bids):
                raise InputError(
                    f"worker {worker} has no bid: {len(self.bids)} bids were given",
                    "give one bid per worker, or a single bid for all",
                    "revocation model 'bid'",
                )
            return self.bids[worker]
        return float(self.bids)

    def _check_count(self, workers: int) -> None:
        if isinstance(self.bids, tuple) and workers != len(self.bids):
            raise InputError(
                f"{workers} workers but {len(self.bids)} bids",
                "give one bid per worker, or a single bid for all",
                "revocation model 'bid'",
            )

    def all_intervals(
        self, workers: int, t0: float, t1: float, rng: np.random.Generator | None = None
    ) -> list[list[Interval]]:
        self._check_count(_check_workers(workers))
        return super().all_intervals(workers, t0, t1, rng)

    def _intervals(self, worker: int, t0: float, t1: float, rng: np.random.Generator | None) -> list[Interval]:
        bid = self.bid_of(worker)
        pts = np.concatenate(([t0], self.prices.change_points(t0, t1)))
        price = np.asarray(self.prices.value_at(pts), dtype=float)
        ivs = _runs_to_intervals(pts, bid >= price, t1)
        return ivs if self.persistent else ivs[:1]

    def activity_matrix(
        self, times: np.ndarray | Sequence[float], workers: int | None = None, rng: np.random.Generator | None = None
    ) -> np.ndarray:
        """``out[i, k]``: worker ``i`` active at ``times[k]``; ``workers`` defaults to ``len(bids)``.

        For persistent requests this is just ``bids[i] >= price(times[k])``; one-time requests
        count from ``min(times)``.
        """
        if workers is None:
            if not isinstance(self.bids, tuple):
                raise InputError("workers is required with a single bid", where="activity_matrix")
            workers = len(self.bids)
        return super().activity_matrix(times, workers, rng)

    def expected_active_fraction(self, bid: float | None = None) -> float:
        """``F(b)``: long-run fraction of time a persistent bid ``b`` is honoured (paper 000, Lemma 1-2).

        With ``bid=None``: this model's bid, or the mean ``F(b_i)`` over the workers' bids (the
        expected fraction of workers active).  Uses the time-weighted CDF of the price trace.
        """
        if bid is not None:
            return float(self.prices.cdf(_check_real(bid, "bid", "expected_active_fraction")))
        if isinstance(self.bids, tuple):
            return float(np.mean(self.prices.cdf(np.asarray(self.bids))))
        return float(self.prices.cdf(float(self.bids)))


# ---------------------------------------------------------------------------------- bernoulli
@dataclass(frozen=True)
class BernoulliRevocation(RevocationModel):
    """Each active worker is revoked with probability ``q`` per iteration, independently.

    The availability model of ``papers/000_3c734f3ffedcac15.txt`` (Sec. III Remark 2, Sec. V
    Lemma 3 and eq. 25-28, "each worker is preempted with probability q in each iteration").
    ``rejoin_p`` is the per-iteration probability that a revoked worker comes back (``None``:
    never).  ``rejoin_p = 1 - q`` makes the state i.i.d. per iteration, so the number of active
    workers is Binomial(n, 1 - q) as in the paper's Lemma 3; the long-run active fraction is
    ``rejoin_p / (q + rejoin_p)`` (:meth:`stationary_active_fraction`).

    Iteration-driven: use :meth:`sample_iteration` / :meth:`step`.  With ``iteration_s`` set,
    ``events`` treats each iteration as a slot of ``iteration_s`` seconds: all workers start at
    ``t0`` and revocations / re-joins happen at slot boundaries ``t0 + k * iteration_s``.
    """

    is_iteration_driven: ClassVar[bool] = True
    needs_rng: ClassVar[bool] = True

    q: float
    rejoin_p: float | None = None
    iteration_s: float | None = None
    notice_s: float = 0.0

    def __post_init__(self) -> None:
        where = "revocation model 'bernoulli'"
        q = _check_real(self.q, "q", where)
        if q > 1:
            raise InputError(f"q must lie in [0, 1], got {self.q!r}", "q is a per-iteration probability", where)
        object.__setattr__(self, "q", q)
        if self.rejoin_p is not None:
            r = _check_real(self.rejoin_p, "rejoin_p", where)
            if r > 1:
                raise InputError(f"rejoin_p must lie in [0, 1], got {self.rejoin_p!r}", "or leave it unset: never rejoin", where)
            object.__setattr__(self, "rejoin_p", r)
        if self.iteration_s is not None:
            object.__setattr__(self, "iteration_s", _check_real(self.iteration_s, "iteration_s", where, lo_open=True))
        object.__setattr__(self, "notice_s", _check_notice(self.notice_s, where))

    def stationary_active_fraction(self) -> float:
        """Long-run probability that a worker is active (0 when it never rejoins and ``q > 0``)."""
        r = self.rejoin_p or 0.0
        if self.q == 0:
            return 1.0
        return r / (self.q + r)

    def sample_iteration(self, active_workers: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Revoked-this-iteration mask: ``active & (U < q)`` with one uniform ``U`` per worker."""
        act = _check_active_mask(active_workers)
        u = self._rng(rng).random(act.size)  # type: ignore[union-attr]
        return act & (u < self.q)

    def step(self, active_workers: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Active mask after one iteration: revocations of active workers and re-joins of the others.

        Draws the same uniforms as :meth:`sample_iteration`, so ``active & ~step(...)`` equals
        ``sample_iteration(...)`` for generators in the same state.
        """
        act = _check_active_mask(active_workers)
        u = self._rng(rng).random(act.size)  # type: ignore[union-attr]
        revoked = act & (u < self.q)
        rejoined = ~act & (u < self.rejoin_p) if self.rejoin_p is not None else np.zeros_like(act)
        return (act & ~revoked) | rejoined

    def _intervals(self, worker: int, t0: float, t1: float, rng: np.random.Generator | None) -> list[Interval]:
        if self.iteration_s is None:
            raise TypeError(
                "BernoulliRevocation is iteration-driven: use sample_iteration()/step(), or set iteration_s "
                "to replay it on the clock"
            )
        assert rng is not None
        dt = self.iteration_s
        k = int(math.ceil((t1 - t0) / dt))
        bounds = t0 + dt * np.arange(1, k)
        bounds = bounds[bounds < t1]
        u = rng.random(bounds.size)
        out: list[Interval] = []
        start: float | None = t0
        for b, ub in zip(bounds.tolist(), u.tolist()):
            if start is not None:
                if ub < self.q:
                    out.append((start, b))
                    start = None
            elif self.rejoin_p is not None and ub < self.rejoin_p:
                start = b
        if start is not None:
            out.append((start, t1))
        return out


# ---------------------------------------------------------------------------------- lifetimes
class _RenewalModel(RevocationModel):
    """A worker runs for a drawn lifetime, is revoked, and a replacement starts after a delay."""

    needs_rng: ClassVar[bool] = True

    @abstractmethod
    def draw_lifetimes(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` lifetimes (seconds, > 0)."""

    @abstractmethod
    def _draw_delay(self, rng: np.random.Generator) -> float:
        """Seconds from a revocation until the replacement is available (``inf``: never)."""

    def _intervals(self, worker: int, t0: float, t1: float, rng: np.random.Generator | None) -> list[Interval]:
        assert rng is not None
        out: list[Interval] = []
        t = t0
        while t < t1:
            end = t + float(self.draw_lifetimes(1, rng)[0])
            if end >= t1:
                out.append((t, t1))
                break
            if end > t:  # a zero-length life (exp. draw of 0.0) is skipped
                out.append((t, end))
            t = end + self._draw_delay(rng)
        return out


_RestartKind = Literal["fixed", "exponential"]


@dataclass(frozen=True, eq=False)
class LifetimeRevocation(_RenewalModel):
    """Empirical lifetimes with a hard cap (``papers/002_a246f6afe29b4bfb.txt``, Sec. I-II, Fig. 3).

    Each VM's lifetime is bootstrapped (drawn with replacement) from ``lifetimes_s`` -- e.g. the
    measured GCP preemptible GPU lifetimes -- and capped at ``cap_s`` (GCE revokes every
    preemptible VM after 24 h at the latest; "about 20% are revoked within the first two hours").
    After a revocation a replacement is available ``restart_delay_s`` later (``restart="fixed"``)
    or after an exponential delay with that mean (``restart="exponential"``);
    ``restart_delay_s=inf`` means no replacement.  Notice: GCP's 30 s.
    """

    lifetimes_s: np.ndarray
    cap_s: float = 24 * 3600.0
    restart_delay_s: float = 60.0
    restart: _RestartKind = "fixed"
    notice_s: float = ProviderNotice.GCP

    def __post_init__(self) -> None:
        where = "revocation model 'lifetime'"
        try:
            arr = np.asarray(self.lifetimes_s, dtype=float)
        except (TypeError, ValueError):
            raise InputError("lifetimes_s must be an array of numbers", where=where) from None
        if arr.ndim != 1 or arr.size == 0:
            raise InputError("lifetimes_s must be a non-empty 1-D array", "check the lifetime table", where)
        if not np.all(np.isfinite(arr)) or np.any(arr <= 0):
            raise InputError("lifetimes must be finite and > 0 seconds", "drop empty or negative rows", where)
        arr = arr.copy()
        arr.setflags(write=False)
        object.__setattr__(self, "lifetimes_s", arr)
        object.__setattr__(self, "cap_s", _check_real(self.cap_s, "cap_s", where, lo_open=True, allow_inf=True))
        object.__setattr__(
            self, "restart_delay_s", _check_real(self.restart_delay_s, "restart_delay_s", where, allow_inf=True)
        )
        if self.restart not in ("fixed", "exponential"):
            raise InputError(f"restart must be 'fixed' or 'exponential', got {self.restart!r}", where=where)
        if self.restart == "exponential" and not math.isfinite(self.restart_delay_s):
            raise InputError("an exponential restart needs a finite mean restart_delay_s", where=where)
        object.__setattr__(self, "notice_s", _check_notice(self.notice_s, where))

    @classmethod
    def from_table(cls, table: Any, **params: Any) -> "LifetimeRevocation":
        """From any object with a ``lifetimes_s`` array (e.g. ``traces.load_gcp_lifetimes(path)``)."""
        if not hasattr(table, "lifetimes_s"):
            raise InputError(
                f"{type(table).__name__} has no lifetimes_s",
                "pass a lifetime table (spotwise.market.traces.load_gcp_lifetimes)",
                "revocation model 'lifetime'",
            )
        return cls(np.asarray(table.lifetimes_s, dtype=float), **params)

    @property
    def capped_mean_s(self) -> float:
        """Mean lifetime after the cap: the expected value of a drawn lifetime."""
        return float(np.mean(np.minimum(self.lifetimes_s, self.cap_s)))

    def draw_lifetimes(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return np.minimum(rng.choice(self.lifetimes_s, size=n, replace=True), self.cap_s)

    def _draw_delay(self, rng: np.random.Generator) -> float:
        if self.restart == "exponential":
            return float(rng.exponential(self.restart_delay_s)) if self.restart_delay_s > 0 else 0.0
        return self.restart_delay_s


@dataclass(frozen=True)
class ExponentialLifetime(_RenewalModel):
    """Parametric alternative: lifetimes ~ Exp(mean ``mttf_s``), repairs ~ Exp(mean ``mttr_s``).

    Optional ``cap_s`` (e.g. 24 h for GCP, ``papers/002_a246f6afe29b4bfb.txt`` Sec. I);
    ``mttr_s=inf`` means no replacement, ``mttr_s=0`` an immediate one.
    """

    mttf_s: float
    mttr_s: float = 60.0
    cap_s: float | None = None
    notice_s: float = ProviderNotice.GCP

    def __post_init__(self) -> None:
        where = "revocation model 'exponential'"
        object.__setattr__(self, "mttf_s", _check_real(self.mttf_s, "mttf_s", where, lo_open=True))
        object.__setattr__(self, "mttr_s", _check_real(self.mttr_s, "mttr_s", where, allow_inf=True))
        if self.cap_s is not None:
            object.__setattr__(self, "cap_s", _check_real(self.cap_s, "cap_s", where, lo_open=True))
        object.__setattr__(self, "notice_s", _check_notice(self.notice_s, where))

    def draw_lifetimes(self, n: int, rng: np.random.Generator) -> np.ndarray:
        x = rng.exponential(self.mttf_s, size=n)
        return x if self.cap_s is None else np.minimum(x, self.cap_s)

    def _draw_delay(self, rng: np.random.Generator) -> float:
        if not math.isfinite(self.mttr_s):
            return math.inf
        return float(rng.exponential(self.mttr_s)) if self.mttr_s > 0 else 0.0


# ---------------------------------------------------------------------------------- trace
@dataclass(frozen=True)
class AvailabilityTraceRevocation(RevocationModel):
    """Replay an availability trace: worker ``i`` is up iff ``i < count(t)``.

    The lowest-index workers are kept first: when the count drops from 3 to 1 workers 1 and 2
    are revoked; when it rises they become available again (SkyPilot-style 0/1 or multi-node
    count traces).  Non-integer counts are floored.

    Virtual time ``t`` maps to trace time ``origin + offset_s + t`` where ``origin`` defaults to
    the trace's start (virtual 0 = start of the trace; pass ``origin=0`` if the virtual clock
    is already in epoch seconds).  Without ``loop`` the first value holds before the trace and
    the last after it (``StepSeries`` semantics); with ``loop`` the trace repeats with period
    ``series.duration``.  ``notice_s=None`` takes the provider's notice from ``series.meta.cloud``
    (0 when the cloud is not recorded).
    """

    series: StepSeries
    offset_s: float = 0.0
    loop: bool = False
    origin: float | None = None
    notice_s: float | None = None  # type: ignore[assignment]

    def __post_init__(self) -> None:
        where = "revocation model 'trace'"
        if not isinstance(self.series, StepSeries) or self.series.kind != "availability":
            raise InputError("series must be a StepSeries of kind 'availability'", "load an availability trace", where)
        off = self.offset_s
        if isinstance(off, bool) or not isinstance(off, numbers.Real) or not math.isfinite(float(off)):
            raise InputError(f"offset_s must be a finite number, got {off!r}", where=where)
        object.__setattr__(self, "offset_s", float(off))
        if not isinstance(self.loop, bool):
            raise InputError(f"loop must be true or false, got {self.loop!r}", where=where)
        if self.loop and not self.series.duration > 0:
            raise InputError("cannot loop a trace of zero duration", "give the series an end after its last point", where)
        if self.origin is None:
            object.__setattr__(self, "origin", self.series.start)
        elif isinstance(self.origin, bool) or not isinstance(self.origin, numbers.Real) or not math.isfinite(float(self.origin)):
            raise InputError(f"origin must be a finite number, got {self.origin!r}", where=where)
        else:
            object.__setattr__(self, "origin", float(self.origin))
        if self.notice_s is None:
            cloud = self.series.meta.cloud
            object.__setattr__(self, "notice_s", ProviderNotice.for_cloud(cloud) if cloud else 0.0)
        else:
            object.__setattr__(self, "notice_s", _check_notice(self.notice_s, where))

    def counts(self, t0: float, t1: float) -> tuple[np.ndarray, np.ndarray]:
        """``(times, counts)``: ``counts[k]`` holds on ``[times[k], times[k+1])`` (virtual), ``times[0] = t0``."""
        a, b = _check_window(t0, t1)
        s = self.series
        shift = float(self.origin) + self.offset_s - s.start  # type: ignore[arg-type]
        rel = s.times - s.start  # position of each point in the trace
        vals = np.floor(s.values)
        if self.loop:
            d = s.duration
            keep = rel < d
            rel, vals = rel[keep], vals[keep]
            m0 = int(math.floor((a + shift) / d)) - 1
            m1 = int(math.floor((b + shift) / d)) + 1
            cyc = np.arange(m0, m1 + 1)
            times = (rel[None, :] + d * cyc[:, None]).ravel() - shift
            vals = np.tile(vals, cyc.size)
        else:
            times = rel - shift
        idx = int(np.searchsorted(times, a, side="right")) - 1
        first = vals[max(idx, 0)]
        inner = (times > a) & (times < b)
        return np.concatenate(([a], times[inner])), np.concatenate(([first], vals[inner]))

    def _intervals(self, worker: int, t0: float, t1: float, rng: np.random.Generator | None) -> list[Interval]:
        times, cnt = self.counts(t0, t1)
        return _runs_to_intervals(times, cnt > worker, t1)


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
