"""Hybrid top-up: keep the spot nodes a zone gives and add on-demand nodes when the deadline needs
them (issue 31; paper 000's mixed fleets, ``papers/000_3c734f3ffedcac15.txt`` Sec. V; Can't Be
Late's Uniform Progress, Wu et al., NSDI'24 Sec. 4, generalised from "spot or on-demand" to "how
many of each").

A job of ``N`` nodes on partial capacity -- a zone that gives ``k`` of them -- progresses at
``rate(k)`` of its full width (:meth:`Observation.rate`, paper 000 eq. 14-15's sample throughput).
Its *slack* is the time left minus the work left at full width: what it may still lose, at full
width the slack stays put; on ``k < N`` nodes it shrinks at ``1 - rate(k)`` per second, and
while it waits (no capacity, or fewer than ``min_workers`` nodes) at 1 per second.  The
deadline only needs full width once the slack is down to the safety net, so:

* while the slack is above the net (``safety_restarts`` restarts ``d`` plus the longest gap
  between two decisions: Can't Be Late's ``2d`` and the guard's gap), train on the spot nodes
  there are and buy nothing -- a zone that gives 9 of 16 nodes is worth 9 nodes of progress,
  and spot that returns later may still cover the rest;
* at the net, top up: hold on-demand nodes for every node spot does not give
  (:class:`TopUp` ``on_demand = N``), so the job runs at full width and the slack stops
  shrinking; ``keep``: the on-demand nodes stay and spot fills only what they leave, so a spot
  node that is revoked after it replaced an on-demand one never costs a second restart.  From
  then on the slack loses at most one restart ``d`` (the on-demand nodes' start; the spot nodes
  they replace are revoked at most once each), which the net of ``2d`` covers.

Decisions use the observation alone (the past and the present: the sweep's hold-out rules).
"""

from __future__ import annotations

from typing import ClassVar

from spotwise.policies.base import Decision, Observation, Policy, TopUp
from spotwise.policies.schema import check_hybrid_topup


class HybridTopUp(Policy):
    """Spot nodes while the slack allows, on-demand nodes beside them at the safety net (module docstring)."""

    name: ClassVar[str] = "hybrid-topup"
    spot_only: ClassVar[bool] = True

    def __init__(self, safety_restarts: float = 2.0) -> None:
        check_hybrid_topup(safety_restarts)
        self.safety_restarts = float(safety_restarts)

    def net_s(self, obs: Observation) -> float:
        """The safety net: ``safety_restarts`` restarts and the longest gap between two decisions."""
        return self.safety_restarts * obs.restart_s + obs.next_decision_s

    def decide(self, obs: Observation) -> list[Decision]:
        left = obs.work_left_s
        if obs.deadline_s is None or left is None or left <= 0 or obs.market != "spot":
            return []
        slack = (obs.deadline_s - obs.t) - left
        if slack > self.net_s(obs):
            return []
        n = obs.max_workers
        spot = min(n, obs.spot_nodes if obs.spot_nodes is not None else (n if obs.spot_available else 0))
        if (obs.on_demand_nodes > 0 and obs.on_demand_kept) or spot >= n:
            return []  # topped up already (the executor fills what spot leaves), or spot gives every node
        return [TopUp(reason=f"{slack:.0f} s of slack left (net {self.net_s(obs):.0f} s) and spot gives {spot} of {n} "
                             f"nodes: on-demand for the other {n - spot}", on_demand=n, keep=True)]
