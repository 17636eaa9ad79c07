"""Synchronisation strategies as objects: one rule per mode for the controller, the planner and the simulator.

``papers/000_3c734f3ffedcac15.txt`` Sec. III (eq. 14-15, N-batch in Sec. III-C) and
``papers/002_a246f6afe29b4bfb.txt`` Sec. II.  Each strategy says

* ``barrier`` -- whether workers wait for the step (``full``, ``n-sync``: one block per active
  worker per round) or never wait (``n-batch``, ``async``: every finished mini-batch is buffered
  and the worker starts the next one at once);
* :meth:`SyncStrategy.needed` -- how many contributions a step needs given the active workers
  (the one implementation of that rule: the coordinator's rounds and buffer, the cluster
  coordinator and the on-demand estimate all ask it);
* :meth:`SyncStrategy.samples_per_step` -- the samples a step of full mini-batches holds;
* :meth:`SyncStrategy.expected_round_s` -- the expected time of one committed step under a
  :class:`~spotwise.theory.runtime.MiniBatchTimeLaw` (eq. 14: ``E[max_k r_k]``; eq. 15:
  ``E[r_(N)]``; N-batch / async: ``N`` mini-batches arriving at rate ``active / E[r]``), plus the
  commit overhead ``Delta``.

Build one with :func:`make_sync` (the names of ``cluster.sync``).  The objects are frozen and
cheap; :func:`make_sync` caches them, so asking for the strategy every round costs nothing.
"""

from __future__ import annotations

import difflib
import functools
import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

from spotwise.errors import InputError
from spotwise.theory.runtime import MiniBatchTimeLaw

_WHERE = "sync"


def _check_active(active: int) -> int:
    if int(active) != active or active < 1:
        raise InputError(f"a step needs at least one active worker, got active={active!r}", where=_WHERE)
    return int(active)


def _check_overhead(overhead_s: float) -> float:
    if not (math.isfinite(overhead_s) and overhead_s >= 0):
        raise InputError(f"the commit overhead must be a finite number of seconds >= 0, got {overhead_s!r}",
                         where=_WHERE)
    return float(overhead_s)


class SyncStrategy(ABC):
    """One synchronisation mode (see the module docstring); subclasses are frozen dataclasses."""

    #: the ``cluster.sync`` name
    name: ClassVar[str]
    #: True: workers wait for the step (rounds); False: they never wait (continuous)
    barrier: ClassVar[bool]

    @property
    @abstractmethod
    def n(self) -> int | None:
        """The mode's ``N`` (``None`` for ``full``, which waits for every active worker)."""

    @abstractmethod
    def needed(self, active: int) -> int:
        """Contributions (mini-batch gradients) a step needs when ``active`` workers take part."""

    def samples_per_step(self, active: int, batch: int) -> int:
        """Samples in a step of full mini-batches of ``batch`` samples: ``needed(active) * batch``."""
        if int(batch) != batch or batch < 1:
            raise InputError(f"the batch size must be an integer >= 1, got {batch!r}", where=_WHERE)
        return self.needed(active) * int(batch)

    def expected_round_s(self, time_law: MiniBatchTimeLaw, active: int, overhead_s: float = 0.0) -> float:
        """``E[R(active)]``: expected time of one committed step, commit overhead ``Delta`` included.

        Barrier modes (paper 000 eq. 14-15): the step waits for the ``k = needed(active)`` fastest of
        ``active`` mini-batches started together, ``E[r_(k)] + Delta`` (``k = active``: the ``max``).
        Continuous modes (Sec. III-C): ``active`` workers finish mini-batches at rate
        ``active / E[r]``, so ``k`` of them take ``k E[r] / active``; for ``r ~ Exp`` that is the
        mean of every step (superposed Poisson processes, ``N / (y mu)``), for any law the
        long-run mean time per step (renewal reward).
        """
        y = _check_active(active)
        k = self.needed(y)
        r = time_law.order_stat_mean(k, y) if self.barrier else k * time_law.mean / y
        return r + _check_overhead(overhead_s)

    def describe(self) -> str:
        return self.name if self.n is None else f"{self.name} (N={self.n})"


class _EveryWorker(SyncStrategy):
    """A mode whose step takes every active worker's contribution (no free ``N``)."""

    @property
    def n(self) -> int | None:
        return None

    def needed(self, active: int) -> int:
        return _check_active(active)


@dataclass(frozen=True)
class FullSync(_EveryWorker):
    """Fully synchronous: every active worker's mini-batch, ``R = max_k r_k + Delta`` (paper 000 eq. 14)."""

    name: ClassVar[str] = "full"
    barrier: ClassVar[bool] = True


@dataclass(frozen=True)
class _WithN(SyncStrategy):
    """A mode with a free ``N`` (``cluster.sync_n``), an integer >= 1."""

    N: int

    def __post_init__(self) -> None:
        if isinstance(self.N, bool) or not isinstance(self.N, int) or self.N < 1:
            raise InputError(f"sync mode {self.name!r} needs N = sync_n, an integer >= 1, got {self.N!r}",
                             "set cluster.sync_n (the N of the mode), e.g. half the workers", "sync_n")

    @property
    def n(self) -> int | None:
        return self.N


@dataclass(frozen=True)
class NSync(_WithN):
    """N-synchronous: the first ``N`` finished workers, ``R = r_(N) + Delta`` (paper 000 eq. 15);
    with fewer than ``N`` active workers, all of them (then ``R`` is their ``max``)."""

    name: ClassVar[str] = "n-sync"
    barrier: ClassVar[bool] = True

    def needed(self, active: int) -> int:
        return min(self.N, _check_active(active))


@dataclass(frozen=True)
class NBatchSync(_WithN):
    """N-batch-synchronous: workers never wait; ``N`` buffered mini-batches, possibly several from one
    fast worker (gradients may be stale)."""

    name: ClassVar[str] = "n-batch"
    barrier: ClassVar[bool] = False

    def needed(self, active: int) -> int:
        _check_active(active)
        return self.N


@dataclass(frozen=True)
class AsyncSync(SyncStrategy):
    """The asynchronous parameter server: every finished mini-batch is applied at once (``N = 1``)."""

    name: ClassVar[str] = "async"
    barrier: ClassVar[bool] = False

    @property
    def n(self) -> int | None:
        return 1

    def needed(self, active: int) -> int:
        _check_active(active)
        return 1


@dataclass(frozen=True)
class SSGD(FullSync):
    """Collective S-SGD (``papers/001_30a454edd897cf47.txt`` Sec. 3.3): every member's gradient is
    all-reduced and every replica applies the same mean; time as :class:`FullSync` (eq. 14)."""

    name: ClassVar[str] = "ssgd"


@dataclass(frozen=True)
class SMA(_EveryWorker):
    """Synchronous model averaging (``papers/001_30a454edd897cf47.txt`` Sec. 3.3, its ref. [22]).

    Each member takes ``H = local_steps`` local SGD steps on its own mini-batches, then the replicas
    are averaged (weighted by samples) in one all-reduce: one committed step holds ``H * active``
    mini-batches.  Its time is the slowest member's sum of ``H`` mini-batch times plus ``Delta``:
    with ``r = m ((1 - s) + s E)`` the sum is ``m (1 - s) H + m s G``, ``G ~ Gamma(H, 1)``, and
    ``E[max of active sums] = m (1 - s) H + m s  int_0^inf (1 - F_G(x)^active) dx`` (computed
    numerically).  Straggler noise averages out over the ``H`` local steps, and ``Delta`` is paid
    once per ``H`` mini-batches: why S-MA keeps per-worker throughput where S-SGD loses it.
    """

    name: ClassVar[str] = "sma"
    barrier: ClassVar[bool] = True
    H: int = 4

    def __post_init__(self) -> None:
        if isinstance(self.H, bool) or not isinstance(self.H, int) or self.H < 1:
            raise InputError(f"sma needs local_steps >= 1, got {self.H!r}", "set cluster.local_steps, e.g. 4", "local_steps")

    def samples_per_step(self, active: int, batch: int) -> int:
        return self.H * super().samples_per_step(active, batch)

    def expected_round_s(self, time_law: MiniBatchTimeLaw, active: int, overhead_s: float = 0.0) -> float:
        from scipy import integrate, stats

        y = _check_active(active)
        m, s = float(time_law.mean), float(time_law.straggler)
        tail = 0.0
        if s > 0:
            g = stats.gamma(self.H)
            tail, _ = integrate.quad(lambda x: 1.0 - g.cdf(x) ** y, 0.0, math.inf)
        return m * (1.0 - s) * self.H + m * s * tail + _check_overhead(overhead_s)

    def describe(self) -> str:
        return f"sma (H={self.H})"


@dataclass(frozen=True)
class ADPSGD(_EveryWorker):
    """AD-PSGD on the collective plane (``papers/001_30a454edd897cf47.txt`` Sec. 3.3, its ref. [28]):
    every member takes one mini-batch per step and averages its replica with one partner, so a
    step waits for the slower of a pair, ``E[max(r_1, r_2)] + Delta`` (the pairwise exchange), not
    for the slowest of all (barriers every few steps aside)."""

    name: ClassVar[str] = "adpsgd"
    barrier: ClassVar[bool] = True

    def expected_round_s(self, time_law: MiniBatchTimeLaw, active: int, overhead_s: float = 0.0) -> float:
        y = _check_active(active)
        r = time_law.order_stat_mean(2, 2) if y >= 2 else time_law.mean
        return r + _check_overhead(overhead_s)


#: every mode, by its ``cluster.sync`` name
SYNC_STRATEGIES: dict[str, type[SyncStrategy]] = {
    c.name: c for c in (FullSync, NSync, NBatchSync, AsyncSync, SSGD, SMA, ADPSGD)
}


@functools.lru_cache(maxsize=64)
def make_sync(name: str, n: int | None = None) -> SyncStrategy:
    """The strategy for ``cluster.sync = name`` with ``cluster.sync_n = n``.

    ``n-sync`` and ``n-batch`` need ``n``; ``full``, ``async`` and ``ssgd`` have no free ``N`` and
    ignore it; for ``sma``, ``n`` is the number of local steps ``H`` (default 4).
    Raises :class:`InputError` for an unknown name ("unknown sync mode 'X' -- valid names are full,
    n-sync, n-batch, async", with a "did you mean" for a near miss) or a bad ``n``.
    """
    cls = SYNC_STRATEGIES.get(name)
    if cls is None:
        close = difflib.get_close_matches(str(name), list(SYNC_STRATEGIES), n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise InputError(f"unknown sync mode {name!r}", f"{hint}valid names are {', '.join(SYNC_STRATEGIES)}", "sync")
    if issubclass(cls, _WithN):
        return cls(n)  # type: ignore[arg-type]
    if cls is SMA:
        return SMA(int(n) if n is not None else 4)
    return cls()


__all__ = ["SyncStrategy", "FullSync", "NSync", "NBatchSync", "AsyncSync", "SSGD", "SMA", "ADPSGD", "SYNC_STRATEGIES", "make_sync"]
