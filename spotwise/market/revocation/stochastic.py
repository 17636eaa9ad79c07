"""Stochastic revocation models: :class:`BernoulliRevocation` (per-iteration draws,
``papers/000_3c734f3ffedcac15.txt`` Sec. III Remark 2 / Sec. V Lemma 3) and the renewal models
:class:`LifetimeRevocation` (empirical lifetimes with a cap, ``papers/002_a246f6afe29b4bfb.txt``
Sec. I-II, Fig. 3) and :class:`ExponentialLifetime`.  Conventions: :mod:`spotwise.market.preemption`.
"""

from __future__ import annotations

import math
from abc import abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import numpy as np

from spotwise.errors import InputError
from spotwise.market.revocation.base import (Interval, ProviderNotice, RevocationModel, _check_active_mask,
                                             _check_notice, _check_real)


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
