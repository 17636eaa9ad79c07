"""What every revocation model shares: market events, provider notices, the interval helpers and
the :class:`RevocationModel` interface.

The conventions (start state, alternation, when the notice comes, window, sorting,
determinism, iteration- vs time-driven) are stated once in :mod:`spotwise.market.preemption`.
"""

from __future__ import annotations

import math
import numbers
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Sequence

import numpy as np

from spotwise.errors import InputError


EventKind = Literal["notice", "revoke", "available"]
EVENT_KINDS: tuple[str, ...] = ("notice", "revoke", "available")

Interval = tuple[float, float]

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
        # the common case first (a week's timeline of a short-lived market holds ~10^5 events):
        # plain float and int values need none of the conversions below
        if (type(self.t) is float and type(self.worker) is int and self.worker >= 0 and self.kind in EVENT_KINDS
                and (self.revoke_at is None or (type(self.revoke_at) is float and self.revoke_at >= self.t))
                and self.t - self.t == 0.0):  # finite: inf - inf and nan - nan are nan
            return
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
