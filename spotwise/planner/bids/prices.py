"""Price models for the bidding theorems of ``papers/000_3c734f3ffedcac15.txt`` Sec. IV.

A :class:`PriceModel` is either

* a *theoretical* distribution -- :class:`~spotwise.market.synthetic.UniformPrice`,
  :class:`~spotwise.market.synthetic.TruncatedGaussianPrice` or any frozen scipy distribution --
  for which the paper's i.i.d. assumption holds by construction (``iid=True``), or
* the *empirical time-weighted* CDF of a price trace (:class:`~spotwise.market.series.StepSeries`):
  ``F(p)`` is the fraction of time the price was ``<= p`` (``StepSeries.cdf``/``quantile``).  A trace
  is autocorrelated, so ``iid=False`` and the planner says so when it uses one.

Exposed: ``cdf(p) = F(p)``, ``ppf(q) = F^-1(q) = min{p : F(p) >= q}``, ``partial_mean(b) =
E[p 1{p <= b}]`` (the expected price paid per unit time of the slots in which a bid ``b`` is
honoured; Lemma 2 is ``J n E[R(n)] partial_mean(b)/F(b)``), ``low``/``high`` (support) and
``upper`` (a finite top of the bid range: ``high``, or ``F^-1(1 - 1e-9)`` for unbounded support).
All functions accept arrays; ``partial_mean(-inf) = 0``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Literal

import numpy as np
from scipy import integrate, stats

from spotwise.errors import InputError
from spotwise.market.series import StepSeries
from spotwise.market.synthetic import PriceDistribution, TruncatedGaussianPrice, UniformPrice

MIN_TRACE_POINTS = 10
ArrayLike = float | np.ndarray


def _sq(a: np.ndarray) -> ArrayLike:
    return float(a) if np.ndim(a) == 0 else a


@dataclass(frozen=True, eq=False)
class PriceModel:
    """Price law ``F`` for bidding.  Build with :meth:`from_distribution` or :meth:`from_series`."""

    kind: Literal["distribution", "empirical"]
    name: str
    iid: bool
    dist: Any = None  # frozen scipy distribution (kind == "distribution")
    series: StepSeries | None = None  # the trace (kind == "empirical")
    _pm: Callable[[np.ndarray], np.ndarray] = field(default=None, repr=False)  # type: ignore[assignment]
    _values: np.ndarray = field(default=None, repr=False)  # type: ignore[assignment]
    _cum_pw: np.ndarray = field(default=None, repr=False)  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if self.kind == "distribution":
            if self.dist is None or not hasattr(self.dist, "cdf") or not hasattr(self.dist, "ppf"):
                raise InputError("a distribution price model needs a frozen scipy distribution", where="price model")
            if self._pm is None:
                object.__setattr__(self, "_pm", self._quad_partial_mean)
        elif self.kind == "empirical":
            s = self.series
            if s is None:
                raise InputError("an empirical price model needs a price series", where="price model")
            order = np.argsort(s.values, kind="stable")
            v = s.values[order]
            w = s.weights()[order]
            if w.sum() <= 0:
                w = np.ones_like(w)
            w = w / w.sum()
            object.__setattr__(self, "_values", v)
            object.__setattr__(self, "_cum_pw", np.cumsum(v * w))
        else:
            raise InputError(f"unknown price model kind {self.kind!r}", where="price model")

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_distribution(cls, src: PriceDistribution | Any, name: str | None = None) -> "PriceModel":
        """Wrap ``UniformPrice``/``TruncatedGaussianPrice`` (closed-form partial means) or a frozen scipy dist."""
        if isinstance(src, UniformPrice):
            lo, hi = float(src.low), float(src.high)
            return cls("distribution", name or src.name, True, src.dist, _pm=_uniform_pm(lo, hi))
        if isinstance(src, TruncatedGaussianPrice):
            return cls("distribution", name or src.name, True, src.dist,
                       _pm=_truncnorm_pm(src.mu, src.sigma, src.low, src.high))
        if isinstance(src, PriceDistribution):
            return cls("distribution", name or src.name, True, src.dist)
        if hasattr(src, "cdf") and hasattr(src, "ppf") and hasattr(src, "dist"):
            dname = getattr(src.dist, "name", "scipy")
            if dname == "uniform":
                lo, hi = float(src.ppf(0.0)), float(src.ppf(1.0))
                return cls("distribution", name or f"uniform({lo:g},{hi:g})", True, src, _pm=_uniform_pm(lo, hi))
            return cls("distribution", name or dname, True, src)
        raise InputError(f"cannot build a price model from {type(src).__name__}",
                         "pass UniformPrice, TruncatedGaussianPrice, a frozen scipy distribution, or use from_series",
                         "price model")

    @classmethod
    def from_series(cls, series: StepSeries, *, assume_iid: bool = False) -> "PriceModel":
        """Empirical time-weighted CDF of a price trace (``iid=False`` unless ``assume_iid``)."""
        where = f"series {series.meta.id!r}"
        if series.kind != "price":
            raise InputError(f"a price model needs a price series, got a {series.kind!r} series", where=where)
        if len(series) < MIN_TRACE_POINTS:
            raise InputError(f"too few points for a CDF ({len(series)} < {MIN_TRACE_POINTS})",
                             "use a longer trace window", where)
        return cls("empirical", f"trace:{series.meta.id}", bool(assume_iid), series=series)

    # ------------------------------------------------------------------ the law
    def cdf(self, p: ArrayLike) -> ArrayLike:
        """``F(p) = P(price <= p)``."""
        if self.kind == "empirical":
            return self.series.cdf(p)  # type: ignore[union-attr]
        return _sq(np.asarray(self.dist.cdf(p), dtype=float))

    def ppf(self, q: ArrayLike) -> ArrayLike:
        """``F^-1(q) = min{p : F(p) >= q}``, ``q`` in ``[0, 1]``."""
        qa = np.asarray(q, dtype=float)
        if np.any((qa < 0) | (qa > 1)) or not np.all(np.isfinite(qa)):
            raise InputError("quantile levels must lie in [0, 1]", where="price model")
        if self.kind == "empirical":
            return self.series.quantile(qa)  # type: ignore[union-attr]
        return _sq(np.asarray(self.dist.ppf(qa), dtype=float))

    def partial_mean(self, b: ArrayLike) -> ArrayLike:
        """``E[p 1{p <= b}] = int_{-inf}^b p dF(p)``."""
        ba = np.asarray(b, dtype=float)
        if self.kind == "empirical":
            idx = np.searchsorted(self._values, ba, side="right") - 1
            out = np.where(idx >= 0, self._cum_pw[np.clip(idx, 0, self._values.size - 1)], 0.0)
            return _sq(out)
        return _sq(self._pm(ba))

    def mean(self) -> float:
        return float(self.partial_mean(math.inf)) if self.kind == "empirical" else float(self.dist.mean())

    @property
    def low(self) -> float:
        return float(self._values[0]) if self.kind == "empirical" else float(self.dist.ppf(0.0))

    @property
    def high(self) -> float:
        return float(self._values[-1]) if self.kind == "empirical" else float(self.dist.ppf(1.0))

    @property
    def upper(self) -> float:
        """A finite top of the bid range: ``high`` if finite, else ``F^-1(1 - 1e-9)``."""
        h = self.high
        return h if math.isfinite(h) else float(self.dist.ppf(1.0 - 1e-9))

    def levels(self) -> np.ndarray | None:
        """Distinct price levels of a trace (the only bids worth considering), ``None`` for a distribution."""
        return np.unique(self._values) if self.kind == "empirical" else None

    # ------------------------------------------------------------------ internals
    def _quad_partial_mean(self, b: np.ndarray) -> np.ndarray:
        lo = float(self.dist.ppf(0.0))

        def one(x: float) -> float:
            if not x > lo:
                return 0.0
            val, _ = integrate.quad(lambda p: p * self.dist.pdf(p), lo, x, limit=200)
            return float(val)

        return np.vectorize(one, otypes=[float])(b)


def _uniform_pm(lo: float, hi: float) -> Callable[[np.ndarray], np.ndarray]:
    """``E[p 1{p <= b}] = (min(b,hi)^2 - lo^2) / (2 (hi - lo))`` for ``b >= lo``."""

    def pm(b: np.ndarray) -> np.ndarray:
        x = np.clip(b, lo, hi)
        return (x * x - lo * lo) / (2.0 * (hi - lo))

    return pm


def _truncnorm_pm(m: float, s: float, lo: float, hi: float) -> Callable[[np.ndarray], np.ndarray]:
    """``E[p 1{p <= b}] = (m (Phi(t) - Phi(a)) - s (phi(t) - phi(a))) / Z`` with ``t = (min(b,hi) - m)/s``."""
    a = (lo - m) / s
    z_hi = (hi - m) / s if math.isfinite(hi) else math.inf
    Z = stats.norm.cdf(z_hi) - stats.norm.cdf(a)

    def pm(b: np.ndarray) -> np.ndarray:
        t = (np.clip(b, lo, hi) - m) / s
        val = m * (stats.norm.cdf(t) - stats.norm.cdf(a)) - s * (stats.norm.pdf(t) - stats.norm.pdf(a))
        return np.where(b <= lo, 0.0, val / Z)

    return pm
