"""Policies for the tests of user policies (issue 22): good ones and each way of getting one wrong."""

from __future__ import annotations

from spotwise import Decision, Noop, Observation, Policy, SwitchMarket


class CountSteps(Policy):
    """Harmless: never acts, but says so every 10 steps."""

    name = "count-steps"

    def decide(self, obs: Observation) -> list[Decision]:
        return [Noop(reason=f"step {obs.step}")] if obs.step % 10 == 0 else []


class ExplodesAtStep(Policy):
    name = "explodes"

    def __init__(self, at: int = 5) -> None:
        self.at = int(at)

    def decide(self, obs: Observation) -> list[Decision]:
        if obs.step >= self.at:
            return helper_that_fails(obs.step)
        return []


def helper_that_fails(step: int) -> list[Decision]:
    raise ZeroDivisionError(f"the user's bug at step {step}")


class ReturnsJunk(Policy):
    name = "junk"

    def decide(self, obs: Observation) -> list[Decision]:
        return ["switch to on-demand please"]  # type: ignore[list-item]


class NotAPolicy:
    def decide(self, obs: Observation) -> list[Decision]:
        return []


class OnDemandNow(Policy):
    name = "on-demand-now"

    def decide(self, obs: Observation) -> list[Decision]:
        return [] if obs.market == "on-demand" else [SwitchMarket(reason="test", market="on-demand")]
