"""A user policy in twenty lines (issue 22, docs/policies.md): a simple deadline rule.

Stay on spot while the slack -- the time left to the deadline minus the compute still needed --
is above ``margin_h`` hours; below it, move the workers to on-demand (which is never revoked) and
stay there.  Use it in a spec as ``policies: [{name: slack_guard:SlackGuard, params: {margin_h: 2}}]``
with this folder on PYTHONPATH, or sweep it: ``spotwise simulate SPEC --trace ... --strategies
spot+guard,slack_guard:SlackGuard``.
"""

from __future__ import annotations

from spotwise import Decision, Observation, Policy, SwitchMarket


class SlackGuard(Policy):
    name = "slack-guard"

    def __init__(self, margin_h: float = 2.0) -> None:
        if not margin_h >= 0:
            raise ValueError("margin_h must be >= 0")
        self.margin_s = 3600.0 * float(margin_h)

    def decide(self, obs: Observation) -> list[Decision]:
        if obs.market == "on-demand" or obs.time_left_s is None or obs.work_left_s is None:
            return []
        slack = obs.time_left_s - obs.work_left_s - obs.restart_s
        if slack < self.margin_s + obs.next_decision_s:
            return [SwitchMarket(reason=f"slack {slack / 3600:.2f} h below {self.margin_s / 3600:g} h", market="on-demand")]
        return []
