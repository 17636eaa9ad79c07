"""Piecewise-constant time series: the one representation of prices and availability.

A :class:`StepSeries` is a right-continuous step function on ``[times[0], end)``: the value
``values[i]`` holds on ``[times[i], times[i+1])`` and the last value holds on
``[times[-1], end)``.  Times are seconds since the Unix epoch (UTC) for real traces, or seconds
since the start of a synthetic market.

Two kinds share the class:

* ``"price"`` -- values are $/hour for one instance of ``meta.instance`` (spot or preemptible
  price, or an availability-weighted on-demand price);
* ``"availability"`` -- values are the number of instances that could be obtained at that time
  (0 = none, 1 = one, ...; SkyPilot traces use 0/1 for single-node and counts for multi-node).

All statistics are *time-weighted* (each value weighted by how long it held), which is what a
bill or an expected runtime integrates over; the empirical price CDF ``F(p)`` used by the
bidding theorems of ``papers/000_3c734f3ffedcac15.txt`` (Sec. IV, Thm 3-6: ``F(b)`` is the
probability that the spot price is at most the bid) is also time-weighted.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Literal

import numpy as np

from spotwise.errors import InputError

SeriesKind = Literal["price", "availability"]
SERIES_KINDS: tuple[str, ...] = ("price", "availability")


def iso8601(t: float) -> str:
    """Seconds since the epoch -> ``YYYY-MM-DDTHH:MM:SSZ`` (UTC)."""
    return datetime.fromtimestamp(float(t), tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class SeriesMeta:
    """Where a series comes from: provider, location, instance type and source file(s)."""

    id: str
    kind: SeriesKind
    cloud: str = ""
    region: str = ""
    zone: str = ""
    instance: str = ""
    source: str = ""
    extra: dict[str, object] = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self) -> None:
        if not self.id:
            raise ValueError("SeriesMeta.id must be a non-empty string")
        if self.kind not in SERIES_KINDS:
            raise ValueError(f"SeriesMeta.kind must be one of {SERIES_KINDS}, got {self.kind!r}")


@dataclass(frozen=True, eq=False)
class StepSeries:
    """A right-continuous step function ``values[i]`` on ``[times[i], times[i+1])``.

    Invariants (checked in ``__post_init__``): at least one point; times finite and strictly
    increasing; ``end >= times[-1]``; values finite and non-negative.  A series whose ``end``
    equals its last time gives the last value zero weight; if *all* weight is zero (a single
    instantaneous point) the statistics fall back to unweighted ones.
    """

    times: np.ndarray
    values: np.ndarray
    end: float
    meta: SeriesMeta

    def __post_init__(self) -> None:
        times = np.asarray(self.times, dtype=float)
        values = np.asarray(self.values, dtype=float)
        object.__setattr__(self, "times", times)
        object.__setattr__(self, "values", values)
        object.__setattr__(self, "end", float(self.end))
        where = f"series {self.meta.id!r}"
        if times.ndim != 1 or values.ndim != 1 or times.size != values.size:
            raise InputError("times and values must be 1-D arrays of equal length", where=where)
        if times.size == 0:
            raise InputError("a series needs at least one point", "check that the trace file is not empty", where)
        if not np.all(np.isfinite(times)) or not np.isfinite(self.end):
            raise InputError("times must be finite numbers", where=where)
        if times.size > 1 and not np.all(np.diff(times) > 0):
            raise InputError("times must be strictly increasing", "sort the points and drop duplicates", where)
        if self.end < times[-1]:
            raise InputError(f"end ({self.end}) is before the last point ({times[-1]})", where=where)
        if not np.all(np.isfinite(values)):
            raise InputError("values must be finite numbers", where=where)
        if np.any(values < 0):
            bad = float(values[values < 0][0])
            raise InputError(f"negative value {bad}", "prices and availability counts must be >= 0", where)

    # ------------------------------------------------------------------ construction helpers
    @classmethod
    def from_points(
        cls,
        times: np.ndarray | list[float],
        values: np.ndarray | list[float],
        meta: SeriesMeta,
        end: float | None = None,
    ) -> "StepSeries":
        """Build from possibly unsorted points with possible duplicates.

        Points are sorted by time; exact duplicates (same time, same value) are dropped; for
        conflicting values at the same time the *last one given* wins.  Consecutive equal values
        are kept (they are harmless and preserve the point count of the source).
        """
        t = np.asarray(times, dtype=float)
        v = np.asarray(values, dtype=float)
        if t.shape != v.shape:
            raise InputError("times and values differ in length", where=f"series {meta.id!r}")
        if t.size == 0:
            raise InputError("a series needs at least one point", "check that the trace file is not empty", f"series {meta.id!r}")
        order = np.argsort(t, kind="stable")
        t, v = t[order], v[order]
        # keep the last value given for each distinct time
        keep = np.ones(t.size, dtype=bool)
        keep[:-1] = t[1:] != t[:-1]
        t, v = t[keep], v[keep]
        return cls(t, v, float(t[-1]) if end is None else float(end), meta)

    def with_meta(self, **changes: object) -> "StepSeries":
        return replace(self, meta=replace(self.meta, **changes))

    # ------------------------------------------------------------------ basic properties
    @property
    def kind(self) -> SeriesKind:
        return self.meta.kind

    @property
    def start(self) -> float:
        return float(self.times[0])

    @property
    def duration(self) -> float:
        return self.end - self.start

    def __len__(self) -> int:
        return int(self.times.size)

    def weights(self) -> np.ndarray:
        """How long (seconds) each value held."""
        return np.diff(np.append(self.times, self.end))

    # ------------------------------------------------------------------ evaluation
    def value_at(self, t: float | np.ndarray) -> float | np.ndarray:
        """Value in force at time ``t``; before the start the first value, after ``end`` the last."""
        if isinstance(t, (float, int)):  # the scalar path the simulators take at every event
            i = int(self.times.searchsorted(t, side="right")) - 1
            return float(self.values[i if i > 0 else 0])
        idx = np.searchsorted(self.times, t, side="right") - 1
        idx = np.clip(idx, 0, self.times.size - 1)
        out = self.values[idx]
        return float(out) if np.ndim(out) == 0 else out

    def integral(self, t0: float, t1: float) -> float:
        """``int_{t0}^{t1} value(t) dt`` (value-seconds), with the end values extended outside.

        ``F(t1) - F(t0)`` with ``F`` the running integral from ``times[0]`` (a prefix sum over the
        change points, computed once): O(log n) per call, as the ledger asks at every step.
        """
        if t1 < t0:
            raise ValueError("integral needs t0 <= t1")
        if t1 == t0:
            return 0.0
        return self._running_integral(t1) - self._running_integral(t0)

    def _running_integral(self, t: float) -> float:
        cum = self.__dict__.get("_cum")
        if cum is None:
            cum = np.concatenate(([0.0], np.cumsum(self.values[:-1] * np.diff(self.times))))
            object.__setattr__(self, "_cum", cum)
        i = int(np.searchsorted(self.times, t, side="right")) - 1
        i = min(max(i, 0), self.times.size - 1)
        return float(cum[i] + self.values[i] * (t - self.times[i]))

    def change_points(self, t0: float, t1: float) -> np.ndarray:
        """Times in ``(t0, t1)`` where a new value takes effect."""
        return self.times[(self.times > t0) & (self.times < t1)]

    # ------------------------------------------------------------------ statistics
    def _w(self) -> np.ndarray:
        w = self.weights()
        return w if w.sum() > 0 else np.ones_like(w)

    def min(self) -> float:
        return float(self.values.min())

    def max(self) -> float:
        return float(self.values.max())

    def mean(self) -> float:
        """Time-weighted mean value."""
        w = self._w()
        return float(np.sum(self.values * w) / np.sum(w))

    def std(self) -> float:
        """Time-weighted standard deviation."""
        w = self._w()
        m = np.sum(self.values * w) / np.sum(w)
        return float(np.sqrt(np.sum(w * (self.values - m) ** 2) / np.sum(w)))

    def cdf(self, p: float | np.ndarray) -> float | np.ndarray:
        """Empirical time-weighted CDF ``F(p) = P(value <= p)``.

        For a price series this is the probability that a bid of ``p`` is honoured (paper 000,
        Sec. IV: a worker bidding ``b`` is active iff the spot price is at most ``b``).
        """
        order = np.argsort(self.values, kind="stable")
        v = self.values[order]
        cw = np.cumsum(self._w()[order])
        cw = cw / cw[-1]
        idx = np.searchsorted(v, p, side="right") - 1
        out = np.where(np.asarray(idx) >= 0, cw[np.clip(idx, 0, v.size - 1)], 0.0)
        return float(out) if np.ndim(out) == 0 else out

    def quantile(self, q: float | np.ndarray) -> float | np.ndarray:
        """Inverse CDF ``F^{-1}(q) = min{p : F(p) >= q}`` for ``q`` in ``[0, 1]``."""
        qa = np.asarray(q, dtype=float)
        if np.any((qa < 0) | (qa > 1)) or not np.all(np.isfinite(qa)):
            raise ValueError("quantile levels must lie in [0, 1]")
        order = np.argsort(self.values, kind="stable")
        v = self.values[order]
        cw = np.cumsum(self._w()[order])
        cw = cw / cw[-1]
        idx = np.searchsorted(cw, qa - 1e-12, side="left")
        out = v[np.clip(idx, 0, v.size - 1)]
        return float(out) if np.ndim(out) == 0 else out

    # availability statistics ---------------------------------------------------------------
    def fraction_at_least(self, k: float = 1.0) -> float:
        """Fraction of time the value is ``>= k`` (for availability: at least k instances)."""
        w = self._w()
        return float(np.sum(w[self.values >= k]) / np.sum(w))

    def fraction_available(self) -> float:
        """Fraction of time at least one instance is available."""
        return self.fraction_at_least(1.0)

    def preemption_times(self) -> np.ndarray:
        """Times at which the value drops (an available instance disappears)."""
        drops = np.nonzero(np.diff(self.values) < 0)[0] + 1
        return self.times[drops]

    def mean_time_between_preemptions(self) -> float | None:
        """Available time divided by the number of drops (MTBP); ``None`` if it never drops.

        Only time during which something was available counts: an instance cannot be preempted
        while none is running, so idle gaps must not inflate the figure.
        """
        n = self.preemption_times().size
        if n == 0:
            return None
        w = self._w()
        up = float(np.sum(w[self.values >= 1]))
        return up / n

    # ------------------------------------------------------------------ transformations
    def slice(self, t0: float, t1: float) -> "StepSeries":
        """The series restricted to ``[t0, t1)`` (value in force at ``t0`` starts it)."""
        if not t1 > t0:
            raise ValueError("slice needs t0 < t1")
        inner = (self.times > t0) & (self.times < t1)
        times = np.concatenate(([t0], self.times[inner]))
        values = np.concatenate(([self.value_at(t0)], self.values[inner]))
        return StepSeries(times, values, t1, self.meta)

    def resample(self, dt: float, t0: float | None = None, t1: float | None = None, how: str = "mean") -> "StepSeries":
        """Regular grid of step ``dt`` seconds on ``[t0, t1)``.

        ``how="mean"`` takes the time-weighted mean over each bin (what a per-bin bill sees);
        ``how="last"`` samples the value in force at each bin's start.
        """
        if not dt > 0:
            raise ValueError("resample needs dt > 0")
        a = self.start if t0 is None else float(t0)
        b = self.end if t1 is None else float(t1)
        if not b > a:
            raise ValueError("resample needs a non-empty interval")
        edges = np.arange(a, b, dt)
        if how == "last":
            vals = np.asarray(self.value_at(edges), dtype=float)
        elif how == "mean":
            right = np.minimum(edges + dt, b)
            vals = np.array([self.integral(l, r) / (r - l) for l, r in zip(edges, right)])
        else:
            raise ValueError("how must be 'mean' or 'last'")
        return StepSeries(edges, vals, b, self.meta)

    def shift(self, offset: float) -> "StepSeries":
        """The same series with every time moved by ``offset`` seconds."""
        return StepSeries(self.times + offset, self.values, self.end + offset, self.meta)


def align(series: list[StepSeries], t0: float | None = None, t1: float | None = None) -> tuple[np.ndarray, np.ndarray, float]:
    """Put several series on their common change points.

    Returns ``(times, matrix, end)`` where ``matrix[k, i]`` is series ``k``'s value on
    ``[times[i], times[i+1])`` (``end`` closes the last interval).  The window defaults to the
    overlap of the series; an empty overlap is an :class:`InputError`.
    """
    if not series:
        raise ValueError("align needs at least one series")
    a = max(s.start for s in series) if t0 is None else float(t0)
    b = min(s.end for s in series) if t1 is None else float(t1)
    if not b > a:
        raise InputError(
            "the series do not overlap in time",
            "pick traces that cover a common period, or pass an explicit window",
            ", ".join(s.meta.id for s in series),
        )
    pts = np.unique(np.concatenate([[a]] + [s.change_points(a, b) for s in series]))
    matrix = np.vstack([np.asarray(s.value_at(pts), dtype=float) for s in series])
    return pts, matrix, b
