"""Hybrid top-up: keep the spot nodes a zone gives and add on-demand nodes beside them when the
deadline needs them (issue 31): Can't Be Late's Uniform Progress (Wu et al., NSDI'24, Sec. 4;
:mod:`spotwise.policies.deadline_guard`) generalised from "spot or on-demand" to "how many of
each" -- paper 000's mixed fleets (``papers/000_3c734f3ffedcac15.txt`` Sec. V).

A job of ``N`` nodes on partial capacity -- a zone that gives ``k`` of them -- progresses at
``rate(k)`` of its full width (:meth:`Observation.rate`: paper 000 eq. 14-15's sample
throughput).  On-demand nodes that fill the other ``N - k`` (:class:`TopUp`) give full width
without a switch of market: the spot nodes keep computing, and a spot node that returns replaces
an on-demand one once it is ready (make-before-break).  The rules, with ``cp(t)`` the work done,
``ep(t) = C t / D`` the uniform progress line, ``d`` the restart and the slack the time left
minus the work left at full width:

1. **Uniform progress**: behind the line, on spot nodes that progress slower than the line
   (``rate(k) < C / D``: they cannot catch up; waiting included), top up: on-demand nodes fill
   what spot does not give (Can't Be Late's rule 1, which buys on-demand for the whole job when
   it is idle and behind);
2. **Exploitation**: the spot nodes there are always train (rule 2);
3. **Hysteresis**: topped up, release the on-demand nodes once ``cp(t) >= ep(t + h d)`` and the
   spot nodes can train alone (rule 3; no restart to pay for it: the spot nodes never stopped);
4. **Safety net**: once the slack is down to ``safety_restarts`` restarts and the longest gap
   between decisions, top up and *keep* the on-demand nodes to the end, so that a spot node that
   replaced one and is revoked again never costs another restart (rule 4).  From then on the
   slack loses at most one restart ``d`` (the on-demand nodes' start; each spot node they
   replace is lost at most once), which the net covers.

For ``N = 1`` on a 0/1 trace this is Uniform Progress with on-demand *beside* spot instead of a
switch of market.  Decisions use the observation alone: the past and the present (the sweep's
hold-out rules).
"""

from __future__ import annotations

from typing import ClassVar

from spotwise.policies.base import Decision, Observation, Policy, TopUp
from spotwise.policies.schema import check_hybrid_topup


class HybridTopUp(Policy):
    """Uniform Progress over node counts: on-demand nodes beside the spot ones (module docstring)."""

    name: ClassVar[str] = "hybrid-topup"
    spot_only: ClassVar[bool] = True

    def __init__(self, hysteresis_restarts: float = 2.0, safety_restarts: float = 2.0) -> None:
        check_hybrid_topup(hysteresis_restarts, safety_restarts)
        self.hysteresis_restarts = float(hysteresis_restarts)
        self.safety_restarts = float(safety_restarts)

    def net_s(self, obs: Observation) -> float:
        """The safety net: ``safety_restarts`` restarts and the longest gap between two decisions."""
        return self.safety_restarts * obs.restart_s + obs.next_decision_s

    def decide(self, obs: Observation) -> list[Decision]:
        if obs.deadline_s is None or obs.step_s is None or obs.target_iterations is None or obs.market != "spot":
            return []
        total = obs.target_iterations * obs.step_s
        done = min(obs.step, obs.target_iterations) * obs.step_s
        left = total - done
        if left <= 0:
            return []
        n = obs.max_workers
        slack = (obs.deadline_s - obs.t) - left
        spot = min(n, obs.spot_nodes if obs.spot_nodes is not None else (n if obs.spot_available else 0))
        topped = obs.on_demand_nodes > 0

        def ep(t: float) -> float:
            return total * min(t, obs.deadline_s) / obs.deadline_s if obs.deadline_s > 0 else total

        if slack <= self.net_s(obs):
            if obs.on_demand_kept or (spot >= n and not topped):
                return []  # kept already, or spot gives every node (a later loss is heard at once)
            return [TopUp(reason=f"{slack:.0f} s of slack left (net {self.net_s(obs):.0f} s), spot gives {spot} of {n} nodes: "
                                 "on-demand for the rest until the end (safety net, rule 4)", on_demand=n, keep=True)]
        if topped:
            # the spot nodes must carry on alone (at least min_workers of them), as rule 3 returns only to available spot
            if spot >= obs.min_workers and done >= ep(obs.t + self.hysteresis_restarts * obs.restart_s):
                return [TopUp(reason=f"ahead of uniform progress by {done - ep(obs.t):.0f} s: spot nodes only "
                                     "(hysteresis, rule 3)", on_demand=0)]
            return []
        if spot < n and done < ep(obs.t) and obs.rate(spot) < total / obs.deadline_s:
            return [TopUp(reason=f"behind uniform progress ({done:.0f} s < {ep(obs.t):.0f} s) and {spot} of {n} spot nodes "
                                 "progress slower than the line: on-demand for the rest (rule 1)", on_demand=n)]
        return []
