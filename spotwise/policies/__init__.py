"""Online policies: ``decide(observation) -> Decision``, pure; the executors act on the decisions.

The registry (``POLICIES``, ``make_policy``, ``make_policies``) is imported on first use, so that
``spotwise.policies.schema`` (what the spec validates against) loads no policy and no planner.
"""

from typing import Any

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
    TopUp,
)

__all__ = [
    "Checkpoint", "Decision", "Migrate", "Noop", "Observation", "PlaceQuote", "Policy", "Rebid", "Resize",
    "SetLearningRate", "SwitchMarket", "SwitchSync", "TopUp", "POLICIES", "make_policy", "make_policies",
]


def __getattr__(name: str) -> Any:
    if name in ("POLICIES", "make_policy", "make_policies"):
        from spotwise.policies import registry

        return getattr(registry, name)
    raise AttributeError(f"module 'spotwise.policies' has no attribute {name!r}")
