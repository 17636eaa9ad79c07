"""Offline decisions: bids, workers, iterations and growth rate (``papers/000_3c734f3ffedcac15.txt`` Sec. IV-V)."""

from spotwise.planner.bidding import (
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
from spotwise.planner.prices import PriceModel

__all__ = [
    "BidPlan", "GrowthPlan", "WorkerPlan", "PriceModel",
    "optimal_uniform_bid", "optimal_two_bids", "optimal_two_bids_with_iterations", "optimal_nsync_bids",
    "optimal_nbatch_bids", "optimal_workers_and_iterations", "optimal_growth_rate",
]
