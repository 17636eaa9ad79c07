"""Per-iteration runtime ``R(y)`` of synchronous SGD with ``y`` active workers, and the mini-batch time law.

:class:`MiniBatchTimeLaw` (``r = m ((1 - s) + s Exp(1))``) is the one law of a worker mini-batch's
time: the emulated runtime draws from it, :mod:`spotwise.control.sync` takes its step-time
expectations from it, and the exponential :class:`RuntimeModel` below is its ``s = 1`` case.

``papers/000_3c734f3ffedcac15.txt`` Sec. III-C.  Each active worker ``k`` needs a random time
``r_k`` for one mini-batch (i.i.d. across workers and mini-batches); ``Delta`` is the parameter
server's update-and-push time.

* fully-synchronous, eq. (14): ``R(y) = max_{k <= y} r_k + Delta``;
* N-synchronous, eq. (15): ``R(y) = r_(N) + Delta`` (the N-th order statistic: the slowest of the
  N fastest workers), defined for ``y >= N``;
* N-batch-synchronous: workers keep processing mini-batches until ``N`` have finished in total;
  for ``r_k ~ Exp(mu)`` the completions form ``y`` superposed Poisson processes of total rate
  ``y mu``, so ``E[R(y)] = N / (y mu)`` (paper 000 Sec. III-C; eq. (42)).  We add ``Delta`` for
  symmetry with (14)-(15); the paper's N-batch expressions (and Thm 6) have ``Delta = 0``.

Exact expectations for ``r_k ~ Exp(mu)`` (rate ``mu``, mean ``1/mu``):

* ``E[max of y] = H_y / mu`` (the paper's ``~ log(y)/mu``),
* ``E[r_(N) of y] = (H_y - H_{y-N}) / mu = sum_{i=0}^{N-1} 1/((y-i) mu)`` (the paper's
  ``~ log(y/(y-N))/mu``; the approximation is infinite at ``y = N``, the exact value is not),

with ``H_k`` the k-th harmonic number.  ``approx=True`` returns the paper's logarithmic forms (they
are what the proof of Thm 5 uses).

For an *empirical* sample ``s_1..s_m`` of mini-batch times we take the runtimes to be i.i.d. draws
from the sample (the bootstrap model) and compute the order statistics of ``y`` draws *exactly*:
with the sample sorted, ``P(max <= s_(i)) = (i/m)^y`` and ``P(r_(N) <= s_(i)) =
P(Binomial(y, i/m) >= N)``.  The N-batch runtime has no closed form for non-exponential times
(paper: "the general form of R(y) is intractable"); it is estimated by a seeded bootstrap
simulation of ``y`` renewal processes (first ``N`` completions), reproducible for a given seed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from scipy import special, stats

from spotwise.errors import InputError

SyncMode = Literal["full", "n-sync", "n-batch"]
SYNC_MODES: tuple[str, ...] = ("full", "n-sync", "n-batch")


def harmonic(k: int | np.ndarray) -> float | np.ndarray:
    """``H_k = sum_{i=1}^k 1/i`` (``H_0 = 0``), exactly via ``digamma(k+1) + euler_gamma``."""
    out = special.digamma(np.asarray(k, dtype=float) + 1.0) + np.euler_gamma
    return float(out) if np.ndim(out) == 0 else out


def expected_max_exponential(y: int, mu: float) -> float:
    """``E[max(r_1..r_y)] = H_y / mu`` for i.i.d. ``r_k ~ Exp(mu)`` (paper 000 eq. (14))."""
    _check_y(y)
    return MiniBatchTimeLaw.exponential(mu).order_stat_mean(int(y), int(y))


def expected_order_stat_exponential(y: int, n_sync: int, mu: float) -> float:
    """``E[r_(N)] = (H_y - H_{y-N}) / mu``: N-th smallest of ``y`` i.i.d. ``Exp(mu)`` (eq. (15))."""
    _check_y(y)
    _check_n_sync(y, n_sync)
    return MiniBatchTimeLaw.exponential(mu).order_stat_mean(int(n_sync), int(y))


@dataclass(frozen=True)
class MiniBatchTimeLaw:
    """The time of one worker mini-batch: ``r = m ((1 - s) + s E)``, ``E ~ Exp(1)`` i.i.d.

    ``m = mean_s`` is the mean (the coordinator's ``step_time_s / throughput``) and ``s =
    straggler`` in ``[0, 1]`` the share of it that is random: ``s = 1`` is the exponential runtime
    ``Exp(1/m)`` of ``papers/000_3c734f3ffedcac15.txt`` Sec. III-C (eq. 14-15), ``s = 0`` a fixed
    time.  This is the one place the law lives: the emulated runtime draws from it
    (:meth:`draw`), and the sync strategies (:mod:`spotwise.control.sync`), the on-demand estimate
    and the exponential :class:`RuntimeModel` take their expectations from it.

    Order statistics have a closed form (Renyi: the spacings of ``n`` i.i.d. ``Exp(1)`` are
    independent ``Exp(n - i)``): the ``k``-th smallest of ``n`` draws has mean
    ``m (1 - s) + m s (H_n - H_{n-k})`` and variance ``(m s)^2 sum_{i=0}^{k-1} 1/(n - i)^2``;
    ``k = n`` is eq. (14)'s ``max``, ``k = N`` eq. (15)'s ``r_(N)``.
    """

    mean_s: float
    straggler: float = 1.0

    def __post_init__(self) -> None:
        where = "mini-batch time law"
        if not (math.isfinite(self.mean_s) and self.mean_s >= 0):
            raise InputError(f"the mean mini-batch time must be a finite number >= 0, got {self.mean_s!r}", where=where)
        if not (math.isfinite(self.straggler) and 0.0 <= self.straggler <= 1.0):
            raise InputError(f"the straggler coefficient must lie in [0, 1], got {self.straggler!r}", where=where)

    @classmethod
    def exponential(cls, mu: float) -> "MiniBatchTimeLaw":
        """``r ~ Exp(mu)`` (rate ``mu``, mean ``1/mu``): the law of paper 000 eq. (14)-(15)."""
        if not (math.isfinite(mu) and mu > 0):
            raise InputError(f"an exponential runtime needs a rate mu > 0, got {mu!r}", where="mini-batch time law")
        return cls(1.0 / float(mu), 1.0)

    @property
    def mean(self) -> float:
        """``E[r] = m``."""
        return float(self.mean_s)

    @property
    def variance(self) -> float:
        """``Var[r] = (m s)^2``."""
        return (float(self.mean_s) * float(self.straggler)) ** 2

    def draw(self, rng: np.random.Generator, size: int | tuple[int, ...] | None = None) -> float | np.ndarray:
        """Mini-batch times: one float for ``size=None`` (one ``rng.exponential(1.0)`` call either way)."""
        m, s = float(self.mean_s), float(self.straggler)
        if size is None:
            return m * ((1.0 - s) + s * float(rng.exponential(1.0)))
        return m * ((1.0 - s) + s * rng.exponential(1.0, size=size))

    def order_stat_mean(self, k: int, n: int) -> float:
        """``E[r_(k)]`` of ``n`` i.i.d. draws: ``m (1 - s) + m s sum_{i=0}^{k-1} 1/(n - i)`` (eq. 14-15)."""
        inv = self._spacings(k, n)
        m, s = float(self.mean_s), float(self.straggler)
        return m * (1.0 - s) + m * s * float(np.sum(inv))

    def order_stat_variance(self, k: int, n: int) -> float:
        """``Var[r_(k)]`` of ``n`` i.i.d. draws: ``(m s)^2 sum_{i=0}^{k-1} 1/(n - i)^2``."""
        inv = self._spacings(k, n)
        return (float(self.mean_s) * float(self.straggler)) ** 2 * float(np.sum(inv * inv))

    @staticmethod
    def _spacings(k: int, n: int) -> np.ndarray:
        """``1/(n - i)`` for ``i = 0..k-1``: the means of the ``Exp(1)`` spacings up to the ``k``-th."""
        if int(n) != n or n < 1 or int(k) != k or not 1 <= k <= n:
            raise InputError(f"order statistic k={k!r} of n={n!r} draws needs integers 1 <= k <= n",
                             where="mini-batch time law")
        return 1.0 / (int(n) - np.arange(int(k), dtype=float))


def _check_y(y: int) -> None:
    if int(y) != y or y < 1:
        raise InputError(f"the number of active workers must be an integer >= 1, got {y!r}", where="runtime model")


def _check_n_sync(y: int, n_sync: int | None) -> int:
    if n_sync is None or int(n_sync) != n_sync or n_sync < 1:
        raise InputError("N-synchronous and N-batch-synchronous SGD need n_sync = N >= 1", where="runtime model")
    return int(n_sync)


@dataclass(frozen=True, eq=False)
class RuntimeModel:
    """Distribution of one worker's mini-batch time plus the server time ``delta``.

    ``kind="exponential"``: ``r ~ Exp(mu)`` (rate ``mu``; the paper's ``mu`` in Sec. III-C and
    ``lambda`` in Thm 5-6).  ``kind="empirical"``: i.i.d. resampling of ``samples`` (seconds).
    Build with :meth:`exponential` or :meth:`empirical`.
    """

    kind: Literal["exponential", "empirical"]
    mu: float | None = None
    samples: tuple[float, ...] = ()
    delta: float = 0.0
    n_boot: int = 20_000
    seed: int = 0
    _sorted: np.ndarray = field(init=False, repr=False, compare=False)
    _cache: dict = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        where = "runtime model"
        if self.kind not in ("exponential", "empirical"):
            raise InputError(f"unknown runtime model kind {self.kind!r}", "valid kinds are 'exponential', 'empirical'", where)
        if not (math.isfinite(self.delta) and self.delta >= 0):
            raise InputError(f"delta must be a finite number >= 0, got {self.delta!r}", where=where)
        if self.kind == "exponential":
            if self.mu is None or not (math.isfinite(self.mu) and self.mu > 0):
                raise InputError(f"an exponential runtime needs a rate mu > 0, got {self.mu!r}", where=where)
            srt = np.empty(0)
        else:
            srt = np.sort(np.asarray(self.samples, dtype=float))
            if srt.size < 2:
                raise InputError("an empirical runtime model needs at least 2 samples", "measure more iterations", where)
            if not np.all(np.isfinite(srt)) or srt[0] < 0:
                raise InputError("runtime samples must be finite and >= 0", where=where)
        if self.n_boot < 100:
            raise InputError("n_boot must be >= 100", where=where)
        object.__setattr__(self, "_sorted", srt)
        object.__setattr__(self, "_cache", {})

    @classmethod
    def exponential(cls, mu: float, delta: float = 0.0) -> "RuntimeModel":
        return cls("exponential", mu=float(mu), delta=float(delta))

    @classmethod
    def empirical(cls, samples: np.ndarray | list[float], delta: float = 0.0, *, n_boot: int = 20_000,
                  seed: int = 0) -> "RuntimeModel":
        return cls("empirical", samples=tuple(float(s) for s in np.ravel(samples)), delta=float(delta),
                   n_boot=n_boot, seed=seed)

    # ------------------------------------------------------------------------------------------
    def expected(self, y: int, sync: SyncMode = "full", n_sync: int | None = None, *, approx: bool = False) -> float:
        """``E[R(y)]`` including ``delta`` (eq. (14), (15), N-batch ``N/(y mu)``).

        ``approx=True`` (exponential only) gives the paper's ``log(y)/mu`` and
        ``log(y/(y-N))/mu``.  N-sync needs ``y >= N`` (``InputError`` otherwise).
        """
        _check_y(y)
        y = int(y)
        if sync not in SYNC_MODES:
            raise InputError(f"unknown sync mode {sync!r}", f"valid modes are {', '.join(SYNC_MODES)}", "runtime model")
        if sync != "full":
            N = _check_n_sync(y, n_sync)
            if sync == "n-sync" and y < N:
                raise InputError(f"N-synchronous SGD with N={N} cannot finish an iteration with {y} active workers",
                                 "keep at least N workers active whenever the job runs", "runtime model")
        key = (y, sync, n_sync, approx)
        if key in self._cache:
            return self._cache[key]
        if self.kind == "exponential":
            mu = float(self.mu)  # type: ignore[arg-type]
            law = self.law
            if sync == "full":
                r = math.log(y) / mu if approx else law.order_stat_mean(y, y)
            elif sync == "n-sync":
                N = int(n_sync)  # type: ignore[arg-type]
                if approx:
                    r = math.inf if y == N else math.log(y / (y - N)) / mu
                else:
                    r = law.order_stat_mean(N, y)
            else:
                r = int(n_sync) * law.mean / y  # type: ignore[arg-type]
        else:
            if approx:
                raise InputError("approx=True is only defined for exponential runtimes", where="runtime model")
            r = self._empirical(y, sync, n_sync)
        out = r + self.delta
        self._cache[key] = out
        return out

    @property
    def law(self) -> MiniBatchTimeLaw:
        """The exponential model's mini-batch time law (``Exp(mu)``: mean ``1/mu``, straggler 1)."""
        if self.kind != "exponential":
            raise InputError("an empirical runtime model has no closed-form mini-batch time law", where="runtime model")
        return MiniBatchTimeLaw.exponential(float(self.mu))  # type: ignore[arg-type]

    def mean(self) -> float:
        """Mean time of one mini-batch (without ``delta``)."""
        return self.law.mean if self.kind == "exponential" else float(self._sorted.mean())

    def sample(self, size: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
        """Mini-batch times (for Monte Carlo checks and the simulator)."""
        if self.kind == "exponential":
            return np.asarray(self.law.draw(rng, size))
        return rng.choice(self._sorted, size=size, replace=True)

    # ------------------------------------------------------------------------------------------
    def variance(self, y: int, sync: SyncMode = "full", n_sync: int | None = None) -> float:
        """``Var[R(y)]`` (``delta`` is a constant and adds nothing).

        Exponential ``r ~ Exp(mu)`` (Renyi's representation: the spacings of exponential order
        statistics are independent ``Exp((y - i) mu)``): full sync ``sum_{i=1}^y 1/(i mu)^2``;
        N-sync ``sum_{i=0}^{N-1} 1/((y - i) mu)^2``; N-batch (the N-th arrival of a Poisson process of
        rate ``y mu``, a Gamma(N, y mu) time) ``N/(y mu)^2``.  Empirical: the same exact order-statistic
        laws as :meth:`expected` (second moment minus squared mean), N-batch by the same seeded bootstrap.
        Used by :mod:`spotwise.planner.estimate.deadline` for the spread of the completion time.
        """
        mean = self.expected(y, sync, n_sync) - self.delta  # validates y, sync and n_sync
        y = int(y)
        key = ("var", y, sync, n_sync)
        if key in self._cache:
            return self._cache[key]
        if self.kind == "exponential":
            law = self.law
            if sync == "full":
                v = law.order_stat_variance(y, y)
            elif sync == "n-sync":
                v = law.order_stat_variance(int(n_sync), y)  # type: ignore[arg-type]
            else:
                v = int(n_sync) * law.variance / y**2  # type: ignore[arg-type]
        else:
            v = max(0.0, self._empirical_moments(y, sync, n_sync)[1] - mean**2)
        self._cache[key] = v
        return v

    # ------------------------------------------------------------------------------------------
    def _empirical(self, y: int, sync: SyncMode, n_sync: int | None) -> float:
        return self._empirical_moments(y, sync, n_sync)[0]

    def _empirical_moments(self, y: int, sync: SyncMode, n_sync: int | None) -> tuple[float, float]:
        """``(E[R], E[R^2])`` without ``delta`` for the bootstrap model of the samples."""
        s = self._sorted
        m = s.size
        levels = np.arange(m + 1) / m  # F at s_(i): i/m, i = 0..m
        if sync == "full":
            w = np.diff(levels ** y)
            return float(np.sum(s * w)), float(np.sum(s * s * w))
        if sync == "n-sync":
            N = int(n_sync)  # type: ignore[arg-type]
            w = np.diff(stats.binom.sf(N - 1, y, levels))  # P(at least N of y draws <= s_(i))
            return float(np.sum(s * w)), float(np.sum(s * s * w))
        # N-batch: y renewal processes, time of the N-th completion overall (bootstrap).
        N = int(n_sync)  # type: ignore[arg-type]
        rng = np.random.default_rng(self.seed)
        k = N  # one worker can contribute at most N of the N mini-batches
        reps = self.n_boot
        total = 0.0
        total2 = 0.0
        chunk = max(1, min(reps, 2_000_000 // max(1, y * k)))
        done = 0
        while done < reps:
            r = min(chunk, reps - done)
            draws = rng.choice(s, size=(r, y, k), replace=True)
            finish = np.cumsum(draws, axis=2).reshape(r, y * k)
            nth = np.partition(finish, N - 1, axis=1)[:, N - 1]
            total += float(nth.sum())
            total2 += float((nth * nth).sum())
            done += r
        return total / reps, total2 / reps
