"""Deterministic revocation models read from a market: :class:`BidRevocation` (active iff the bid
covers the price, ``papers/000_3c734f3ffedcac15.txt``) and :class:`AvailabilityTraceRevocation`
(a recorded capacity trace).  Conventions: :mod:`spotwise.market.preemption`.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from spotwise.errors import InputError
from spotwise.market.revocation.base import (Interval, ProviderNotice, RevocationModel,
                                             _check_notice, _check_real, _check_window, _check_workers,
                                             _runs_to_intervals)
from spotwise.market.series import StepSeries


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
