"""Named policies, as the job spec refers to them (``policies: [{name: lr-scaling}]``)."""

from __future__ import annotations

import difflib
from typing import Any

from spotwise.errors import InputError
from spotwise.policies.base import Policy
from spotwise.policies.deadline_guard import UniformProgress
from spotwise.policies.dynamic_bids import DynamicBids
from spotwise.policies.growth import ExpGrowth
from spotwise.policies.lr_scaling import LrScaling
from spotwise.policies.migration import PriceMigration
from spotwise.policies.scale_in import ScaleIn
from spotwise.policies.strategy_switch import StrategySwitch

POLICIES: dict[str, type[Policy]] = {"lr-scaling": LrScaling, "exp-growth": ExpGrowth, "dynamic-bids": DynamicBids,
                                 "uniform-progress": UniformProgress, "price-migration": PriceMigration, "scale-in": ScaleIn,
                                 "strategy-switch": StrategySwitch}


def make_policy(name: str, params: dict[str, Any] | None = None) -> Policy:
    cls = POLICIES.get(name)
    if cls is None:
        close = difflib.get_close_matches(name, list(POLICIES), n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise InputError(f"unknown policy {name!r}", f"{hint}valid names are {', '.join(sorted(POLICIES))}", "policies")
    try:
        return cls(**(params or {}))  # type: ignore[call-arg]
    except TypeError as e:
        raise InputError(f"bad parameters for policy {name!r}: {e}", "check the policy's params", "policies") from None
    except ValueError as e:
        raise InputError(str(e), "check the policy's params", f"policies.{name}") from None


def make_policies(specs: list[Any]) -> list[Policy]:
    """Policies from the spec's ``policies`` list (objects with ``name`` and ``params``)."""
    return [make_policy(p.name, p.params) for p in specs]
