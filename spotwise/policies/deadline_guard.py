"""Deadline guard: Uniform Progress (Wu et al., "Can't Be Late: Optimizing Spot Instance Savings
under Deadlines", NSDI'24, Sec. 4).

The job has ``C`` seconds of compute (``target_iterations * step_s``), a deadline ``D`` and a
restart overhead ``d`` (cold start + restore, :attr:`Observation.restart_s`).  Progress at time
``t`` is ``cp(t)`` (compute seconds done); the *uniform progress line* is ``ep(t) = C t / D``.
The paper's rules (Sec. 4.2-4.3), as this policy applies them:

1. **Uniform Progress**: when the job is idle (no spot capacity) and ``cp(t) < ep(t)``, switch to
   on-demand and stay on it to catch up;
2. **Taking risks / exploitation**: use spot whenever it is available, even when behind, and stay
   on it until it is preempted (the executor rejoins spot workers as soon as capacity returns,
   so this rule needs no decision);
3. **Hysteresis**: on on-demand, stay until ``cp(t) >= ep(t + 2d)``, then return to spot if
   spot is available;
4. **Safety net**: when idle and the remaining time ``R(t) = D - t`` is below the remaining
   compute plus ``2d`` (``R(t) < C - cp(t) + 2d``), switch to on-demand and stay until the end
   (idle only: a job restarting on spot keeps its restart, see below).

Two additions, both about the executor rather than the rule set: the safety net's margin also
counts the longest gap between two decisions (:attr:`Observation.next_decision_s`), since a guard
acts only when consulted; and a return to spot is allowed only while the slack left after the
two restarts it may cost (back to spot, and back to on-demand if spot is lost at once) stays
above the safety net, so the hysteresis never walks the job into the net.

Idle means ``active == 0`` on the spot market with no restart under way: revoked, or (where the
executor cannot tell, ``warming == 0``) waiting for workers.  A job *restarting* on spot
(``warming > 0`` with spot available: its workers are billed and restoring) is not idle -- the
paper applies the safety net to an idle job only (Sec. 4.3), and a changeover in progress is
time already paid for.  Leaving it with the idle net's margin (2 restarts *plus* the decision
gap) would abandon that restart and pay a second one on on-demand while the slack is still above
the paper's ``2d`` (issue 31).  So a restarting job leaves spot only once its slack has fallen
below the paper's net itself, ``R(t) < C - cp(t) + 2d``; otherwise it stays.  That is the
paper's ``2d`` read for a restart: staying costs at most the rest of the restart (``<= d``) and,
should spot be lost as soon as it ends (a revocation the executor reports at once), a switch to
on-demand (``d``), so ``2d`` of slack covers both.  And a decision that finds less than ``2d``
still has ``d`` for its switch: the one before found ``2d`` or more (or the job was idle, above the
idle net) and a restart eats at most ``min(gap, d)`` between the two.  When a
policy that moves jobs (:class:`~spotwise.policies.migration.PriceMigration`) can find available
spot capacity elsewhere, that beats on-demand: with ``defer_to_places=True`` (use it together
with that policy, never alone) rule 1 waits while some other place quotes available spot and the
slack still covers the move.

Pure: the decision is a function of the observation alone.
"""

from __future__ import annotations

from typing import ClassVar

from spotwise.policies.base import Decision, Observation, Policy, SwitchMarket
from spotwise.policies.schema import check_uniform_progress


class UniformProgress(Policy):
    """Can't Be Late's Uniform Progress as a :class:`Policy` (see the module docstring)."""

    name: ClassVar[str] = "uniform-progress"
    spot_only: ClassVar[bool] = True

    def __init__(self, hysteresis_restarts: float = 2.0, safety_restarts: float = 2.0, defer_to_places: bool = False) -> None:
        check_uniform_progress(hysteresis_restarts, safety_restarts, defer_to_places)
        self.hysteresis_restarts = float(hysteresis_restarts)
        self.safety_restarts = float(safety_restarts)
        self.defer_to_places = bool(defer_to_places)
        self.uses_places = self.defer_to_places  # type: ignore[misc]  # reads Observation.places only to defer

    def decide(self, obs: Observation) -> list[Decision]:
        if obs.deadline_s is None or obs.step_s is None or obs.target_iterations is None:
            return []  # no deadline, or no way to tell the work left: nothing to guard
        d = obs.restart_s
        total = obs.target_iterations * obs.step_s           # C
        done = min(obs.step, obs.target_iterations) * obs.step_s  # cp(t)
        left = total - done
        if left <= 0:
            return []
        remaining = obs.deadline_s - obs.t                   # R(t)
        slack = remaining - left
        net = self.safety_restarts * d + obs.next_decision_s

        def ep(t: float) -> float:
            return total * min(t, obs.deadline_s) / obs.deadline_s if obs.deadline_s > 0 else total

        if obs.market == "on-demand":
            back_ok = slack - 2 * d > net  # after a restart on spot and a forced one back, still above the net
            if obs.spot_available and back_ok and done >= ep(obs.t + self.hysteresis_restarts * d):
                return [SwitchMarket(reason=f"ahead of uniform progress by {done - ep(obs.t):.0f} s with "
                                            f"{slack:.0f} s slack: back to spot (hysteresis, Can't Be Late rule 3)",
                                     market="spot")]
            return []
        if obs.active > 0:
            if obs.spot_nodes is not None and obs.rate(obs.active) < 1.0 and slack < net:
                # issue 31: on k of N nodes (a count trace) the job progresses at rate(k) < 1 and the slack shrinks
                # while it "runs": the net applies as if it were idle (rule 4 over node counts)
                return [SwitchMarket(reason=f"on {obs.active} of {obs.max_workers} nodes with {slack:.0f} s of slack, below "
                                            f"{net:.0f} s: on-demand until the end (safety net, rule 4)", market="on-demand")]
            return []  # exploitation: stay on spot while it lasts
        if obs.warming > 0 and obs.spot_available:
            # restarting on spot (billed, not yet computing): not idle, so not the idle net with its decision
            # gap -- leaving now would abandon a paid-for restart and pay a second one.  Only the paper's net.
            if slack < self.safety_restarts * d:
                return [SwitchMarket(reason=f"restarting on spot with {slack:.0f} s of slack, below "
                                            f"{self.safety_restarts * d:.0f} s (2 restarts): on-demand until the end "
                                            "(safety net, rule 4)", market="on-demand")]
            return []  # the restart goes on: spot until preempted (rule 2)
        if slack < net:
            return [SwitchMarket(reason=f"slack {slack:.0f} s is below {net:.0f} s (2 restarts + decision gap): "
                                        "on-demand until the end (safety net, rule 4)", market="on-demand")]
        if obs.spot_available:
            return []  # capacity is back (or coming back): take the risk on spot (rule 2)
        if done < ep(obs.t):
            if self.defer_to_places and slack - d > net and any(q.available for q in obs.places
                                                                 if (q.zone, q.instance) != obs.place):
                return []  # a move to available spot elsewhere is cheaper than on-demand
            return [SwitchMarket(reason=f"idle and behind uniform progress ({done:.0f} s < {ep(obs.t):.0f} s): "
                                        "on-demand to catch up (rule 1)", market="on-demand")]
        return []
