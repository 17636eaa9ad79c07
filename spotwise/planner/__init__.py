"""Offline decisions: bids, workers, iterations and growth rate (``papers/000_3c734f3ffedcac15.txt`` Sec. IV-V).

The planner's parts, by what they decide:

* :mod:`spotwise.planner.bids` -- bids, workers, iterations and growth rates (paper 000 Sec. IV-V, Thm 3-7,
  eq. (25)-(28)) and the price models they take;
* :mod:`spotwise.planner.estimate` -- expected time and cost on a churning market, P(deadline), and the
  error and runtime models fitted from a pilot (paper 000 Sec. III, Thm 1, Lemma 1-2);
* :mod:`spotwise.planner.placement` -- allocation LPs and where to run on price traces
  (``papers/003_c06237e546a4f08e.txt`` Sec. 3.2 and 4);
* :mod:`spotwise.planner.plan` -- ``spotwise plan``: the strategies of paper 000 Sec. VI-A compared, the
  serverless option (paper 004), pool mixes, the recommendation and the plan's records;
* :mod:`spotwise.planner.emit` -- the recommended place as a Ray cluster-launcher or SkyPilot file.

This package re-exports the bid planners of :mod:`spotwise.planner.bids`.
"""

from spotwise.planner.bids import (
    BidPlan,
    GrowthPlan,
    WorkerPlan,
    optimal_growth_rate,
    optimal_nbatch_bids,
    optimal_nsync_bids,
    optimal_two_bids,
    optimal_two_bids_with_iterations,
    optimal_uniform_bid,
    optimal_workers_and_iterations,
)
from spotwise.planner.bids.prices import PriceModel

__all__ = [
    "BidPlan", "GrowthPlan", "WorkerPlan", "PriceModel",
    "optimal_uniform_bid", "optimal_two_bids", "optimal_two_bids_with_iterations", "optimal_nsync_bids",
    "optimal_nbatch_bids", "optimal_workers_and_iterations", "optimal_growth_rate",
]
