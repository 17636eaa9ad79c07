"""Synthetic spot markets: i.i.d. prices, Markov price regimes, alternating availability.

Every generator takes a ``seed`` (an ``int``, a :class:`numpy.random.Generator`, or ``None`` for
fresh entropy) and is reproducible: the same seed and arguments give the same series.

* :class:`UniformPrice` / :class:`TruncatedGaussianPrice` with :func:`iid_price_series` -- the
  synthetic markets of ``papers/000_3c734f3ffedcac15.txt`` Sec. VI ("a uniform distribution in the
  range [0.2, 1] and a Gaussian distribution with mean and variance equal to 0.6 and 0.175 ...
  re-draw it every 4 seconds").  Each exposes its *theoretical* distribution (``cdf``, ``ppf``,
  ``mean``, ``var``, and the frozen scipy distribution ``dist``) so the bidding theorems of
  Sec. IV (Thm 3-6, ``b* = F^{-1}(...)``) can be evaluated exactly.
* :class:`MarkovRegimeModel` -- a continuous-time Markov chain over ``K`` price regimes (a level
  with Gaussian jitter, exponential holding times, a jump matrix) that can be fitted to a real
  trace and can also emit a regime-dependent availability series.
* :func:`alternating_availability` -- an up/down renewal process with exponential up times
  (mean MTBF) and down times (mean MTTR).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Literal, Union

import numpy as np
from scipy import stats

from spotwise.market.series import SeriesMeta, StepSeries

__all__ = [
    "SeedLike",
    "make_rng",
    "PriceDistribution",
    "UniformPrice",
    "TruncatedGaussianPrice",
    "iid_price_series",
    "MarkovRegimeModel",
    "alternating_availability",
]

SeedLike = Union[int, np.random.Generator, None]


def make_rng(seed: SeedLike) -> np.random.Generator:
    """``seed`` as a :class:`numpy.random.Generator` (a Generator is used as is)."""
    if isinstance(seed, np.random.Generator):
        return seed
    return np.random.default_rng(seed)


def _meta(meta: SeriesMeta | None, ident: str, kind: Literal["price", "availability"], extra: dict[str, object]) -> SeriesMeta:
    if meta is not None:
        return meta
    return SeriesMeta(id=ident, kind=kind, cloud="synthetic", instance="synthetic", source="synthetic", extra=extra)


# ---------------------------------------------------------------------------------------------
# i.i.d. prices
# ---------------------------------------------------------------------------------------------
class PriceDistribution(ABC):
    """A price distribution with a known law: ``dist`` is a frozen scipy distribution."""

    @property
    @abstractmethod
    def dist(self) -> stats.rv_continuous:
        """The frozen scipy distribution of the price."""

    @property
    @abstractmethod
    def name(self) -> str:
        """A short label, e.g. ``uniform(0.2,1)``."""

    def cdf(self, p: float | np.ndarray) -> float | np.ndarray:
        """``F(p) = P(price <= p)`` (paper 000 Sec. IV: probability a bid ``p`` is honoured)."""
        return self.dist.cdf(p)

    def ppf(self, q: float | np.ndarray) -> float | np.ndarray:
        """``F^{-1}(q)``, e.g. the optimal uniform bid of paper 000 Thm 3."""
        return self.dist.ppf(q)

    def mean(self) -> float:
        return float(self.dist.mean())

    def var(self) -> float:
        return float(self.dist.var())

    def sample(self, n: int, seed: SeedLike = None) -> np.ndarray:
        """``n`` independent prices."""
        return np.asarray(self.dist.rvs(size=int(n), random_state=make_rng(seed)), dtype=float)

    def series(self, duration: float, delta: float = 4.0, *, seed: SeedLike = None, start: float = 0.0,
               meta: SeriesMeta | None = None) -> StepSeries:
        """Shorthand for :func:`iid_price_series` with this distribution."""
        return iid_price_series(self, duration, delta, seed=seed, start=start, meta=meta)


@dataclass(frozen=True)
class UniformPrice(PriceDistribution):
    """Prices uniform on ``[low, high]`` (paper 000 Sec. VI: ``[0.2, 1]``)."""

    low: float = 0.2
    high: float = 1.0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.low) and math.isfinite(self.high) and 0 <= self.low < self.high):
            raise ValueError("UniformPrice needs 0 <= low < high, both finite")

    @property
    def dist(self) -> stats.rv_continuous:
        return stats.uniform(loc=self.low, scale=self.high - self.low)

    @property
    def name(self) -> str:
        return f"uniform({self.low:g},{self.high:g})"


@dataclass(frozen=True)
class TruncatedGaussianPrice(PriceDistribution):
    """A Gaussian ``N(mean, variance)`` truncated to ``[low, high]`` (default: the positive support).

    Paper 000 Sec. VI uses mean 0.6 and *variance* 0.175 (standard deviation ~0.418).  Note that
    ``mean``/``variance`` are the parameters of the untruncated Gaussian: after truncation at 0
    the actual mean is larger (~0.69); :meth:`mean` and :meth:`var` return the truncated moments.
    """

    mu: float = 0.6
    variance: float = 0.175
    low: float = 0.0
    high: float = math.inf

    def __post_init__(self) -> None:
        if not (math.isfinite(self.mu) and math.isfinite(self.variance) and self.variance > 0):
            raise ValueError("TruncatedGaussianPrice needs a finite mean and a positive variance")
        if not (self.low >= 0 and self.high > self.low and math.isfinite(self.low)):
            raise ValueError("TruncatedGaussianPrice needs 0 <= low < high")

    @property
    def sigma(self) -> float:
        return math.sqrt(self.variance)

    @property
    def dist(self) -> stats.rv_continuous:
        a = (self.low - self.mu) / self.sigma
        b = (self.high - self.mu) / self.sigma if math.isfinite(self.high) else math.inf
        return stats.truncnorm(a, b, loc=self.mu, scale=self.sigma)

    @property
    def name(self) -> str:
        return f"truncnorm({self.mu:g},{self.variance:g},[{self.low:g},{self.high:g}])"


def iid_price_series(dist: PriceDistribution, duration: float, delta: float = 4.0, *, seed: SeedLike = None,
                     start: float = 0.0, meta: SeriesMeta | None = None) -> StepSeries:
    """Prices redrawn i.i.d. from ``dist`` every ``delta`` seconds on ``[start, start+duration)``.

    Paper 000 Sec. VI redraws every 4 s.  The series has ``ceil(duration/delta)`` points at
    ``start + k*delta`` (the last interval may be shorter) and ends at ``start + duration``;
    consecutive equal draws are kept, so the points are exactly the draws.  Raises ``ValueError``
    for a non-positive or non-finite ``duration``/``delta`` and :class:`~spotwise.errors.InputError`
    when the series would exceed :data:`spotwise.market.price_points.MAX_PRICE_POINTS` points.
    """
    if not (duration > 0 and math.isfinite(duration)):
        raise ValueError("duration must be a positive finite number of seconds")
    if not (delta > 0 and math.isfinite(delta)):
        raise ValueError("delta must be a positive finite number of seconds")
    from spotwise.market.price_points import check_price_points

    n = check_price_points(duration, delta, "interval_s")  # InputError rather than a MemoryError
    times = start + delta * np.arange(n, dtype=float)
    values = dist.sample(n, seed)
    m = _meta(meta, f"synthetic:{dist.name}", "price", {"distribution": dist.name, "delta_s": delta})
    return StepSeries(times, values, start + duration, m)


# ---------------------------------------------------------------------------------------------
# Markov regimes
# ---------------------------------------------------------------------------------------------
@dataclass
class MarkovRegimeModel:
    """Continuous-time Markov chain over ``K`` price regimes.

    In regime ``i`` the chain stays an ``Exp(mean = holding_s[i])`` time, then jumps to
    ``j != i`` with probability ``transition[i, j]`` (the jump chain; zero diagonal, rows sum to
    1).  While in regime ``i`` the price is ``max(0, levels[i] + jitter[i] * Z)``, ``Z ~ N(0,1)``,
    drawn once per visit, or every ``jitter_interval_s`` seconds when that is set.  The
    availability in regime ``i`` is ``Binomial(capacity, availability[i])`` drawn on the same
    schedule (``availability[i] = 1`` everywhere: always available).

    The long-run fraction of time in regime ``i`` is ``pi_i * holding_s[i] / sum_j pi_j
    holding_s[j]`` with ``pi`` the stationary law of the jump chain (:meth:`time_fractions`).
    This is the regime-switching view of spot prices used to stress the i.i.d. assumption of
    ``papers/000_3c734f3ffedcac15.txt`` Sec. VI (which runs on real, non-i.i.d. EC2 histories).
    """

    levels: np.ndarray
    holding_s: np.ndarray
    transition: np.ndarray | None = None
    jitter: np.ndarray | None = None
    availability: np.ndarray | None = None
    capacity: int = 1
    jitter_interval_s: float | None = None
    initial: np.ndarray | None = None
    extra: dict[str, object] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.levels = np.asarray(self.levels, dtype=float)
        k = self.levels.size
        if self.levels.ndim != 1 or k < 1:
            raise ValueError("levels must be a non-empty 1-D array")
        self.holding_s = np.broadcast_to(np.asarray(self.holding_s, dtype=float), (k,)).copy()
        if np.any(~(self.holding_s > 0)):
            raise ValueError("holding times must be positive")
        if self.transition is None:
            t = np.full((k, k), 1.0 / max(k - 1, 1))
            np.fill_diagonal(t, 0.0 if k > 1 else 1.0)
            self.transition = t
        self.transition = np.asarray(self.transition, dtype=float)
        if self.transition.shape != (k, k) or np.any(self.transition < 0):
            raise ValueError("transition must be a non-negative K x K matrix")
        if k > 1:
            self.transition = self.transition.copy()
            np.fill_diagonal(self.transition, 0.0)
            rows = self.transition.sum(axis=1)
            if np.any(rows <= 0):
                raise ValueError("every regime needs some probability of leaving it (K > 1)")
            self.transition = self.transition / rows[:, None]
        self.jitter = np.zeros(k) if self.jitter is None else np.broadcast_to(np.asarray(self.jitter, dtype=float), (k,)).copy()
        self.availability = np.ones(k) if self.availability is None else np.broadcast_to(np.asarray(self.availability, dtype=float), (k,)).copy()
        if np.any(self.jitter < 0) or np.any((self.availability < 0) | (self.availability > 1)):
            raise ValueError("jitter must be >= 0 and availability in [0, 1]")
        if self.jitter_interval_s is not None and not self.jitter_interval_s > 0:
            raise ValueError("jitter_interval_s must be positive or None")
        if self.capacity < 1:
            raise ValueError("capacity must be >= 1")

    @property
    def k(self) -> int:
        return int(self.levels.size)

    # ------------------------------------------------------------------ theory
    def jump_stationary(self) -> np.ndarray:
        """Stationary law of the jump chain (left eigenvector of ``transition`` for eigenvalue 1)."""
        if self.k == 1:
            return np.ones(1)
        w, v = np.linalg.eig(self.transition.T)
        pi = np.real(v[:, np.argmin(np.abs(w - 1.0))])
        pi = np.abs(pi)
        return pi / pi.sum()

    def time_fractions(self) -> np.ndarray:
        """Long-run fraction of time spent in each regime."""
        x = self.jump_stationary() * self.holding_s
        return x / x.sum()

    def mean_price(self) -> float:
        """Long-run time-average price (ignoring the clipping of jitter at 0)."""
        return float(np.dot(self.time_fractions(), self.levels))

    # ------------------------------------------------------------------ generation
    def regime_path(self, duration: float, seed: SeedLike = None, start: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
        """Visit start times and regimes of one path on ``[start, start+duration)``."""
        if not (duration > 0 and math.isfinite(duration)):
            raise ValueError("duration must be a positive finite number of seconds")
        rng = make_rng(seed)
        init = self.time_fractions() if self.initial is None else np.asarray(self.initial, dtype=float) / np.sum(self.initial)
        state = int(rng.choice(self.k, p=init))
        t, end = float(start), float(start) + duration
        times, states = [], []
        while t < end:
            times.append(t)
            states.append(state)
            t += rng.exponential(self.holding_s[state])
            if self.k > 1:
                state = int(rng.choice(self.k, p=self.transition[state]))
        return np.array(times), np.array(states, dtype=int)

    def _ticks(self, times: np.ndarray, states: np.ndarray, end: float) -> tuple[np.ndarray, np.ndarray]:
        """Expand visits into per-draw ticks (every ``jitter_interval_s`` within a visit)."""
        if self.jitter_interval_s is None:
            return times, states
        bounds = np.append(times[1:], end)
        tt, ss = [], []
        for t0, t1, s in zip(times, bounds, states):
            n = max(1, math.ceil((t1 - t0) / self.jitter_interval_s - 1e-9))
            tt.append(t0 + self.jitter_interval_s * np.arange(n))
            ss.append(np.full(n, s))
        return np.concatenate(tt), np.concatenate(ss)

    def generate_both(self, duration: float, seed: SeedLike = None, start: float = 0.0, *, ident: str = "synthetic:markov",
                      ) -> tuple[StepSeries, StepSeries]:
        """A price series and an availability series driven by the *same* regime path."""
        rng = make_rng(seed)
        times, states = self.regime_path(duration, rng, start)
        end = float(start) + duration
        tt, ss = self._ticks(times, states, end)
        prices = np.maximum(0.0, self.levels[ss] + self.jitter[ss] * rng.standard_normal(ss.size))
        avail = rng.binomial(self.capacity, self.availability[ss]).astype(float)
        extra = {"model": "markov", "k": self.k, "regimes": ss}
        price = StepSeries(tt, prices, end, SeriesMeta(ident, "price", cloud="synthetic", instance="synthetic", source="synthetic", extra=dict(extra)))
        av = StepSeries(tt, avail, end, SeriesMeta(ident + ":availability", "availability", cloud="synthetic", instance="synthetic",
                                                     source="synthetic", extra=dict(extra)))
        return price, av

    def generate(self, duration: float, seed: SeedLike = None, start: float = 0.0, *, ident: str = "synthetic:markov") -> StepSeries:
        """A price series (``meta.extra["regimes"]`` holds the regime of each point)."""
        return self.generate_both(duration, seed, start, ident=ident)[0]

    def generate_availability(self, duration: float, seed: SeedLike = None, start: float = 0.0, *,
                              ident: str = "synthetic:markov") -> StepSeries:
        """An availability series (same seed -> same regime path as :meth:`generate`)."""
        return self.generate_both(duration, seed, start, ident=ident)[1]

    # ------------------------------------------------------------------ fitting
    @classmethod
    def fit(cls, series: StepSeries, k: int = 3, *, method: Literal["kmeans", "quantile"] = "kmeans",
            availability: StepSeries | None = None, capacity: int | None = None, max_iter: int = 100) -> "MarkovRegimeModel":
        """Estimate a regime model from a price trace.

        1. *Levels*: the (time-weighted) values are split into ``k`` regimes, by 1-D weighted
           k-means (Lloyd's algorithm from weighted-quantile starting centres; deterministic) or
           by weighted-quantile binning; ``k`` is reduced to the number of distinct values if
           smaller.  Each regime's level and jitter are the time-weighted mean and standard
           deviation of its values.
        2. *Visits*: consecutive points in the same regime are merged into one visit.
        3. *Holding times*: the maximum-likelihood estimate for exponential holding with the
           last visit right-censored: ``holding_i = (time spent in i) / (number of exits from i)``;
           with no exit at all, the time spent (a lower bound).
        4. *Transitions*: jump counts ``n_ij / sum_j n_ij``; a regime never left jumps uniformly.
        5. *Jitter interval*: the median spacing of points inside visits, ``None`` if every visit
           is a single point.
        6. *Availability* (optional series): fraction of each regime's time with at least one
           instance available, ``capacity`` the largest count seen (else 1).
        """
        v = np.asarray(series.values, dtype=float)
        w = series.weights()
        if w.sum() <= 0:
            w = np.ones_like(w)
        distinct = np.unique(v)
        k = max(1, min(int(k), distinct.size))
        if k == 1:
            labels = np.zeros(v.size, dtype=int)
        elif method == "quantile":
            edges = np.unique(_weighted_quantile(v, w, np.linspace(0, 1, k + 1)[1:-1]))
            labels = np.searchsorted(edges, v, side="left")
            labels = _relabel(labels)
        elif method == "kmeans":
            centres = _kmeans_1d(v, w, k, max_iter)
            labels = np.argmin(np.abs(v[:, None] - centres[None, :]), axis=1)
            labels = _relabel(labels, order=np.argsort(centres))
        else:
            raise ValueError("method must be 'kmeans' or 'quantile'")
        k = int(labels.max()) + 1
        levels = np.zeros(k)
        jitter = np.zeros(k)
        for j in range(k):
            m = labels == j
            wj = w[m] if w[m].sum() > 0 else np.ones(int(m.sum()))
            levels[j] = np.average(v[m], weights=wj)
            jitter[j] = math.sqrt(np.average((v[m] - levels[j]) ** 2, weights=wj))
        # visits
        change = np.ones(v.size, dtype=bool)
        change[1:] = labels[1:] != labels[:-1]
        starts = np.nonzero(change)[0]
        visit_state = labels[starts]
        visit_dur = np.add.reduceat(series.weights(), starts)
        time_in = np.bincount(visit_state, weights=visit_dur, minlength=k)
        counts = np.zeros((k, k))
        for a, b in zip(visit_state[:-1], visit_state[1:]):
            counts[a, b] += 1
        exits = counts.sum(axis=1)
        holding = np.where(exits > 0, time_in / np.maximum(exits, 1), np.maximum(time_in, 1e-9))
        holding = np.maximum(holding, 1e-9)
        trans = np.where(exits[:, None] > 0, counts / np.maximum(exits, 1)[:, None], 1.0)
        if k > 1:
            np.fill_diagonal(trans, 0.0)
        # within-visit spacing
        within = np.diff(series.times)[~change[1:]] if v.size > 1 else np.array([])
        jitter_interval = float(np.median(within)) if within.size else None
        avail = None
        cap = 1
        if availability is not None:
            from spotwise.market.series import align

            pts, mat, end = align([series, availability])
            lab = np.clip(np.searchsorted(series.times, pts, side="right") - 1, 0, v.size - 1)
            lab = labels[lab]
            ww = np.diff(np.append(pts, end))
            cap = int(capacity) if capacity is not None else max(1, int(np.max(mat[1])))
            avail = np.ones(k)
            for j in range(k):
                m = lab == j
                if ww[m].sum() > 0:
                    avail[j] = float(np.sum(ww[m] * np.minimum(mat[1][m], cap)) / (cap * ww[m].sum()))
        return cls(levels=levels, holding_s=holding, transition=trans, jitter=jitter, availability=avail, capacity=cap,
                   jitter_interval_s=jitter_interval,
                   extra={"fitted_to": series.meta.id, "method": method, "visits": int(starts.size), "exits": exits.astype(int).tolist()})


def _kmeans_1d(v: np.ndarray, w: np.ndarray, k: int, max_iter: int) -> np.ndarray:
    """Weighted 1-D k-means: Lloyd's algorithm from several deterministic starts, best SSE wins.

    Starts: weighted quantiles (good for balanced regimes), evenly spaced levels between min and
    max (good when one regime dominates the time), quantiles of the distinct values.
    """
    distinct = np.unique(v)
    starts = [
        _weighted_quantile(v, w, (np.arange(k) + 0.5) / k),
        np.linspace(v.min(), v.max(), 2 * k + 1)[1::2],
        np.quantile(distinct, (np.arange(k) + 0.5) / k),
    ]
    best, best_sse = None, math.inf
    for c in starts:
        c = np.asarray(c, dtype=float)
        for _ in range(max_iter):
            lab = np.argmin(np.abs(v[:, None] - c[None, :]), axis=1)
            new = c.copy()
            for j in range(c.size):
                m = lab == j
                if np.any(m) and w[m].sum() > 0:
                    new[j] = np.average(v[m], weights=w[m])
            if np.allclose(new, c, rtol=0, atol=1e-12):
                break
            c = new
        lab = np.argmin(np.abs(v[:, None] - c[None, :]), axis=1)
        sse = float(np.sum(w * (v - c[lab]) ** 2))
        if np.unique(lab).size == k and sse < best_sse - 1e-15:
            best, best_sse = c, sse
    if best is None:  # every start collapsed a cluster: fall back to distinct-value quantiles
        best = np.asarray(starts[2], dtype=float)
    return best


def _weighted_quantile(v: np.ndarray, w: np.ndarray, q: np.ndarray) -> np.ndarray:
    order = np.argsort(v, kind="stable")
    vs, cw = v[order], np.cumsum(w[order])
    cw = cw / cw[-1]
    idx = np.clip(np.searchsorted(cw, np.asarray(q) - 1e-12, side="left"), 0, vs.size - 1)
    return vs[idx]


def _relabel(labels: np.ndarray, order: np.ndarray | None = None) -> np.ndarray:
    """Map labels to ``0..K-1`` (keeping their order, or the order given by ``order``)."""
    if order is not None:
        rank = np.empty_like(order)
        rank[order] = np.arange(order.size)
        labels = rank[labels]
    _, inv = np.unique(labels, return_inverse=True)
    return inv.astype(int)


# ---------------------------------------------------------------------------------------------
# alternating availability
# ---------------------------------------------------------------------------------------------
def alternating_availability(duration: float, mtbf_s: float, mttr_s: float, *, seed: SeedLike = None, start: float = 0.0,
                             start_up: bool = True, capacity: int = 1, meta: SeriesMeta | None = None) -> StepSeries:
    """Alternating up/down availability with ``Exp(MTBF)`` up and ``Exp(MTTR)`` down periods.

    Value ``capacity`` while up, 0 while down; the long-run fraction available is
    ``MTBF / (MTBF + MTTR)``.  Each preemption (up -> down) is one drop, so
    :meth:`StepSeries.mean_time_between_preemptions` estimates ``mtbf_s``.
    """
    if not (duration > 0 and math.isfinite(duration)):
        raise ValueError("duration must be a positive finite number of seconds")
    if not (mtbf_s > 0 and mttr_s > 0):
        raise ValueError("mtbf_s and mttr_s must be positive")
    rng = make_rng(seed)
    end = float(start) + duration
    # draw in blocks to stay fast for long horizons
    n_guess = int(2 * duration / (mtbf_s + mttr_s)) + 16
    times: list[np.ndarray] = []
    t, up = float(start), bool(start_up)
    total = 0
    while t < end:
        ups = rng.exponential(mtbf_s, n_guess)
        downs = rng.exponential(mttr_s, n_guess)
        d = np.empty(2 * n_guess)
        if up:
            d[0::2], d[1::2] = ups, downs
        else:
            d[0::2], d[1::2] = downs, ups
        starts = t + np.concatenate(([0.0], np.cumsum(d)[:-1]))
        starts = starts[starts < end]
        times.append(starts)
        total += starts.size
        t = t + float(np.sum(d))
    ts = np.concatenate(times)
    vals = np.zeros(ts.size)
    first = 1.0 if start_up else 0.0
    vals[0::2] = capacity * first
    vals[1::2] = capacity * (1.0 - first)
    # blocks are even-length, so the up/down parity carries across blocks
    keep = np.ones(ts.size, dtype=bool)
    keep[:-1] = np.diff(ts) > 0  # a zero-length period (probability ~0) is dropped
    m = _meta(meta, f"synthetic:alternating(mtbf={mtbf_s:g},mttr={mttr_s:g})", "availability",
              {"mtbf_s": mtbf_s, "mttr_s": mttr_s, "capacity": capacity})
    return StepSeries(ts[keep], vals[keep], end, m)
