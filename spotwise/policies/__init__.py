"""Online policies: ``decide(observation) -> Decision``, pure; the executors act on the decisions."""

from spotwise.policies.base import (
    Checkpoint,
    Decision,
    Migrate,
    Noop,
    Observation,
    PlaceQuote,
    Policy,
    Rebid,
    Resize,
    SetLearningRate,
    SwitchMarket,
    SwitchSync,
)
from spotwise.policies.registry import POLICIES, make_policy, make_policies

__all__ = [
    "Checkpoint", "Decision", "Migrate", "Noop", "Observation", "PlaceQuote", "Policy", "Rebid", "Resize",
    "SetLearningRate", "SwitchMarket", "SwitchSync", "POLICIES", "make_policy", "make_policies",
]
