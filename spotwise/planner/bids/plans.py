"""What the bid planners of :mod:`spotwise.planner.bids` return, and what they share.

The plan dataclasses -- :class:`BidPlan` (spot bids, paper 000 Thm 3-6 and Corollary 2),
:class:`WorkerPlan` (preemptible workers and iterations, Thm 7) and :class:`GrowthPlan` (growing
workers, Thm 2 and eq. (25)-(28) of ``papers/000_3c734f3ffedcac15.txt``) -- the input checks and the
deadline error every planner raises, and the bids worth trying on a price model
(:func:`bid_at_level`, :func:`_candidate_bids`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

from spotwise.errors import InfeasibleError, InputError
from spotwise.planner.bids.prices import PriceModel
from spotwise.theory.runtime import SyncMode

Method = Literal["closed-form", "numerical"]
Status = Literal["optimal", "trivial", "infeasible"]
_TOL = 1e-9
#: gamma* this close to 1 means both Thm 4 bids are equal (the uniform case), up to rounding in Q(eps)
_GAMMA_TOL = 1e-6
_GRID = 256


@dataclass(frozen=True)
class BidPlan:
    """Bids for ``n_workers`` spot workers (``bids[i]`` for worker ``i``, highest first)."""

    strategy: str
    bids: tuple[float, ...]
    n_workers: int
    iterations: int
    expected_cost: float
    expected_time: float
    expected_error: float
    inv_active: float  # E[1/y | the job runs]
    method: Method
    status: Status = "optimal"
    reason: str = ""
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.method not in ("closed-form", "numerical"):
            raise ValueError(f"method must be 'closed-form' or 'numerical', got {self.method!r}")
        if self.status not in ("optimal", "trivial", "infeasible"):
            raise ValueError(f"bad status {self.status!r}")
        if self.status != "infeasible" and len(self.bids) != self.n_workers:
            raise ValueError("one bid per worker")


@dataclass(frozen=True)
class WorkerPlan:
    """Number of preemptible workers and iterations (paper 000 Thm 7)."""

    n_workers: int
    iterations: int
    expected_cost: float
    expected_time: float
    expected_error: float
    method: Method
    objective: float  # J * n, the quantity Thm 7 minimises
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.n_workers < 1 or self.iterations < 1:
            raise ValueError("a worker plan needs n_workers >= 1 and iterations >= 1")


@dataclass(frozen=True)
class GrowthPlan:
    """Exponentially growing workers ``n_j = n1 eta^{j-1}`` (paper 000 Thm 2, eq. (25)-(28))."""

    eta: float
    n1: float
    iterations: int
    n_last: int
    expected_cost: float
    expected_time: float
    expected_error: float
    method: Method
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.eta >= 1 or self.iterations < 1:
            raise ValueError("a growth plan needs eta >= 1 and iterations >= 1")


# ===================================================================================== helpers
def _check_common(n: int, eps: float, deadline: float) -> None:
    if int(n) != n or n < 1:
        raise InputError(f"the number of workers must be an integer >= 1, got {n!r}", where="n")
    if not (math.isfinite(deadline) and deadline > 0):
        raise InputError(f"the deadline must be a finite number of seconds > 0, got {deadline!r}", where="deadline")
    if not (math.isfinite(eps) and eps > 0):
        raise InputError(f"the error target must be a finite number > 0, got {eps!r}", where="eps")


def _deadline_infeasible(deadline: float, min_deadline: float, detail: str) -> InfeasibleError:
    return InfeasibleError(
        f"deadline theta={deadline:.6g}s is shorter than the uninterrupted runtime {detail} = {min_deadline:.6g}s "
        f"(the job cannot finish even if no worker is ever interrupted)",
        f"extend the deadline to at least {min_deadline:.6g}s, relax the error target (fewer iterations), "
        "or use faster workers",
        "deadline constraint",
    )


def bid_at_level(prices: PriceModel, level: float) -> float:
    """The smallest bid ``b`` with ``F(b) >= level`` (``level`` clipped to ``[0, 1]``), within the
    finite bid range (``prices.upper``); for a trace, one of its price levels (a quantile that round-off
    put just below the level is moved up to the next level)."""
    q = min(max(float(level), 0.0), 1.0)
    b = float(prices.ppf(q))
    levels = prices.levels()
    if levels is not None and prices.cdf(b) < q - 1e-12:
        ok = levels[np.asarray(prices.cdf(levels)) >= q - 1e-12]
        b = float(ok.min()) if ok.size else prices.upper
    return min(b, prices.upper) if math.isfinite(b) else prices.upper


def _candidate_bids(prices: PriceModel, size: int = 512) -> np.ndarray:
    """Bids worth trying: a trace's distinct levels (subsampled by quantile), else ``F^-1`` of a level grid."""
    lv = prices.levels()
    if lv is not None:
        if lv.size > size:
            lv = np.unique(np.asarray(prices.ppf(np.linspace(0.0, 1.0, size)), dtype=float))
        return lv
    return np.unique(np.minimum(np.asarray(prices.ppf(np.linspace(0.0, 1.0, size + 1)[1:]), dtype=float), prices.upper))


def _inv_y(sync: SyncMode, n: int, n_sync: int | None) -> float:
    return 1.0 / n if sync == "full" else 1.0 / int(n_sync)  # type: ignore[arg-type]


def _check_sync(sync: SyncMode, n: int, n_sync: int | None) -> None:
    if sync == "full":
        return
    if n_sync is None or int(n_sync) != n_sync or n_sync < 1:
        raise InputError(f"{sync} SGD needs n_sync = N >= 1", where="n_sync")
    if sync == "n-sync" and n_sync > n:
        raise InputError(f"N-sync with N={n_sync} needs at least N workers, got n={n}", where="n_sync")
