"""Named policies, as the job spec refers to them (``policies: [{name: lr-scaling}]``), built.

Names, parameters and their checks live in :mod:`spotwise.policies.schema` (what the spec
validates against, without importing any policy); this module maps the names to the classes and
builds them where they run: the controller, the serverless supervisor and the sweep engine.
"""

from __future__ import annotations

from typing import Any

from spotwise.errors import InputError
from spotwise.policies.availability_guard import AvailabilityGuard
from spotwise.policies.base import Policy
from spotwise.policies.deadline_guard import UniformProgress
from spotwise.policies.dynamic_bids import DynamicBids
from spotwise.policies.growth import ExpGrowth
from spotwise.policies.lr_scaling import LrScaling
from spotwise.policies.migration import PriceMigration
from spotwise.policies.scale_in import ScaleIn
from spotwise.policies.schema import POLICY_NAMES, schema_for
from spotwise.policies.strategy_switch import StrategySwitch
from spotwise.policies.topup import HybridTopUp

POLICIES: dict[str, type[Policy]] = {"lr-scaling": LrScaling, "exp-growth": ExpGrowth, "dynamic-bids": DynamicBids,
                                     "uniform-progress": UniformProgress, "price-migration": PriceMigration,
                                     "availability-guard": AvailabilityGuard, "hybrid-topup": HybridTopUp, "scale-in": ScaleIn,
                                     "strategy-switch": StrategySwitch}
assert tuple(POLICIES) == POLICY_NAMES, "spotwise.policies.schema and the registry must name the same policies"


def make_policy(name: str, params: dict[str, Any] | None = None) -> Policy:
    """The policy ``name`` built with ``params``; the same :class:`InputError` as the spec's validation.
    A ``package.module:ClassName`` name is a user policy (:mod:`spotwise.policies.user`)."""
    if ":" in str(name):
        from spotwise.policies.user import make_user_policy

        return make_user_policy(name, params)
    schema_for(name)  # unknown name: "unknown policy ..., valid names are ..."
    cls = POLICIES[name]
    try:
        return cls(**(params or {}))  # type: ignore[call-arg]
    except TypeError as e:
        raise InputError(f"bad parameters for policy {name!r}: {e}", "check the policy's params", "policies") from None
    except ValueError as e:
        raise InputError(str(e), "check the policy's params", f"policies.{name}") from None


def make_policies(specs: list[Any]) -> list[Policy]:
    """Policies from the spec's ``policies`` list (objects with ``name`` and ``params``)."""
    return [make_policy(p.name, p.params) for p in specs]
