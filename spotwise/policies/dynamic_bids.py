"""The *dynamic* strategy of ``papers/000_3c734f3ffedcac15.txt`` Sec. VI-A, as an online policy.

The job starts with part of its workers; after ``switch_step`` committed iterations it adds the
rest and re-optimises the bid "by subtracting the consumed time from the original deadline theta
and taking J to be the number of remaining iterations".  The new bid is Thm 3's uniform bid for
the remaining work: ``b = F^-1(J_rem E[R(n)] / theta_rem)``, computed by
:func:`spotwise.planner.bids.thm3_bid` like every other Thm 3 bid (the paper re-solves Thm 4's two bids;
with all workers re-bid at once, Thm 3 is the uniform special case).  If the remaining deadline is
already too short, the bid is the top of the price range (never interrupted again).

``price`` describes ``F`` (:func:`spotwise.policies.price_quantile.price_ppf`):
``{"kind": "uniform", "low", "high"}``, ``{"kind": "gaussian", "mean", "variance", "low"}``
(truncated Gaussian) or ``{"kind": "quantiles", "values": [F^-1(0), ..., F^-1(1)]}`` on an even
grid of levels.  ``mean_round_s`` is ``E[R(n)]`` for the grown cluster.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from spotwise.planner.bids import thm3_bid
from spotwise.policies.base import Decision, Observation, Policy, Rebid, Resize
from spotwise.policies.price_quantile import price_ppf
from spotwise.policies.schema import check_dynamic_bids


@dataclass(frozen=True)
class DynamicBids(Policy):
    name = "dynamic-bids"
    spot_only = True
    switch_step: int = 1
    workers: int = 2
    iterations: int = 1
    deadline_s: float = 1.0
    mean_round_s: float = 1.0
    price: dict[str, Any] = field(default_factory=lambda: {"kind": "uniform", "low": 0.2, "high": 1.0})

    def __post_init__(self) -> None:
        check_dynamic_bids(self.switch_step, self.workers, self.iterations, self.deadline_s, self.mean_round_s, self.price)

    def decide(self, obs: Observation) -> list[Decision]:
        if obs.step != self.switch_step or obs.provisioned >= self.workers:
            return []
        j_rem = max(1, self.iterations - obs.step)
        t_rem = self.deadline_s - obs.t
        bid = thm3_bid(lambda q: price_ppf(self.price, q), j_rem, self.mean_round_s, t_rem).bid
        why = (f"iteration {obs.step}: grow to {self.workers} workers and re-bid F^-1({j_rem} x {self.mean_round_s:.3g} s"
               f" / {max(t_rem, 0):.0f} s) = {bid:.4g} (paper 000 Sec. VI-A dynamic strategy, Thm 3)")
        return [Rebid(reason=why, bids=(bid,) * self.workers), Resize(reason=why, workers=self.workers)]
