"""Cost-optimal bids, workers, iterations and growth rates (``papers/000_3c734f3ffedcac15.txt`` Sec. IV-V).

Every planner solves the paper's problem (1)-(3)::

    minimise E[C]   subject to   E[error] <= eps  (Thm 1 / Thm 2 bound),   E[tau] <= theta

with the expectations of :mod:`spotwise.theory.cost` (Lemma 1-2 and their heterogeneous-bid forms)
and returns a plan dataclass holding the decision, ``expected_cost``, ``expected_time``,
``expected_error`` (the bound at the plan), ``method`` (``"closed-form"`` or ``"numerical"``) and
``notes``.  Where a theorem's assumptions fail -- prices from a trace (``PriceModel.iid`` is False),
non-exponential runtimes (empirical :class:`RuntimeModel`) where the theorem needs exponential ones,
or a server time ``delta > 0`` that breaks the monotonicity the proof uses -- the *same* objective is
optimised numerically and ``notes`` says why.  (Numerically optimising the i.i.d. objective on a
trace's time-weighted CDF does not model the trace's autocorrelation; check such plans by
simulating on the trace.)

| paper 000 | function | module |
| --- | --- | --- |
| Thm 3 (uniform bid) | :func:`optimal_uniform_bid` (the bid itself: :func:`thm3_bid`) | :mod:`~spotwise.planner.bids.uniform` |
| Thm 4 (two bids, fixed J) | :func:`optimal_two_bids` | :mod:`~spotwise.planner.bids.two` |
| Corollary 2 (co-optimise J and two bids) | :func:`optimal_two_bids_with_iterations` | :mod:`~spotwise.planner.bids.two` |
| Thm 5 (N-sync, exponential runtimes) | :func:`optimal_nsync_bids` | :mod:`~spotwise.planner.bids.nsync` |
| Thm 6 (N-batch-sync, exponential runtimes) | :func:`optimal_nbatch_bids` | :mod:`~spotwise.planner.bids.nsync` |
| Thm 7 (preemptible: co-optimise n and J) | :func:`optimal_workers_and_iterations` | :mod:`~spotwise.planner.bids.preemptible` |
| eq. (25)-(28) (growth rate eta, iterate over J) | :func:`optimal_growth_rate` | :mod:`~spotwise.planner.bids.preemptible` |

This package re-exports the planners of those modules; the plan dataclasses and the shared checks are in
:mod:`spotwise.planner.bids.plans`, and the price models ``F(p)`` every theorem takes (Sec. IV: i.i.d.
prices, or a trace's time-weighted CDF) in :mod:`spotwise.planner.bids.prices`.
"""

from spotwise.planner.bids.nsync import (  # noqa: F401  (re-exported)
    _candidates_fn,
    _coordinate_descent,
    optimal_nbatch_bids,
    optimal_nsync_bids,
)
from spotwise.planner.bids.plans import (  # noqa: F401  (re-exported)
    _GAMMA_TOL,
    _GRID,
    _TOL,
    BidPlan,
    GrowthPlan,
    Method,
    Status,
    WorkerPlan,
    _candidate_bids,
    _check_common,
    _check_sync,
    _deadline_infeasible,
    _inv_y,
    bid_at_level,
)
from spotwise.planner.bids.preemptible import (  # noqa: F401  (re-exported)
    _growth_runtime,
    _thm7_n,
    growth_objective,
    growth_time,
    optimal_growth_rate,
    optimal_workers_and_iterations,
)
from spotwise.planner.bids.two import optimal_two_bids, optimal_two_bids_with_iterations
from spotwise.planner.bids.uniform import Thm3Bid, optimal_uniform_bid, thm3_bid

# Lemma 1-2's uniform-bid expectations, importable from here as before the split (tests/test_sync.py)
from spotwise.theory.cost import expected_cost_uniform, expected_time_uniform  # noqa: F401  (re-exported)

__all__ = [
    "BidPlan", "WorkerPlan", "GrowthPlan", "Thm3Bid", "thm3_bid", "bid_at_level",
    "optimal_uniform_bid", "optimal_two_bids", "optimal_two_bids_with_iterations", "optimal_nsync_bids",
    "optimal_nbatch_bids", "optimal_workers_and_iterations", "optimal_growth_rate", "growth_objective", "growth_time",
]
