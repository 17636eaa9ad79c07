"""Names and parameter schemas of the built-in policies, for validating a spec without building them.

The spec (:mod:`spotwise.config`) checks ``policies: [{name, params}]`` here at load time; the
policies themselves are built by :func:`spotwise.policies.registry.make_policies` where they run
(the controller, the serverless supervisor, the sweep engine).  This module imports no policy and
nothing from the planner or the market's generators, so the spec does not depend on them.

Each policy's constructor calls the same check function as :func:`validate_policy`, so a value the
spec accepts is one the policy accepts, with the same message.  ``tests/test_policy_schema.py``
pins the defaults below to the constructors' own.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from spotwise.errors import InputError
from spotwise.policies.price_quantile import price_ppf


def check_lr_scaling(min_factor: float, max_factor: float, rel_tolerance: float) -> None:
    """``lr-scaling`` (paper 002): ``0 <= min_factor <= max_factor``, ``max_factor > 0``."""
    if min_factor < 0 or not max_factor > 0 or min_factor > max_factor:
        raise ValueError("lr-scaling needs 0 <= min_factor <= max_factor and max_factor > 0")


def check_exp_growth(eta: float, n1: int | None) -> None:
    """``exp-growth`` (paper 000 eq. 25-28): ``eta >= 1``, ``n1 >= 1`` when given."""
    if not eta >= 1.0:
        raise ValueError("exp-growth needs eta >= 1")
    if n1 is not None and n1 < 1:
        raise ValueError("exp-growth needs n1 >= 1")


def check_dynamic_bids(switch_step: int, workers: int, iterations: int, deadline_s: float, mean_round_s: float,
                       price: dict[str, Any]) -> None:
    """``dynamic-bids`` (paper 000 Sec. VI-A): counts >= 1, positive times, a valid price description."""
    if switch_step < 1 or workers < 1 or iterations < 1:
        raise ValueError("dynamic-bids needs switch_step, workers and iterations >= 1")
    if not (deadline_s > 0 and mean_round_s > 0):
        raise ValueError("dynamic-bids needs positive deadline_s and mean_round_s")
    price_ppf(price, 0.5)  # validates the price description


def check_uniform_progress(hysteresis_restarts: float, safety_restarts: float, defer_to_places: bool) -> None:
    """``uniform-progress`` (Can't Be Late): hysteresis >= 0 restarts, safety net >= 1 restart."""
    if not hysteresis_restarts >= 0 or not safety_restarts >= 1:
        raise ValueError("uniform-progress: hysteresis_restarts must be >= 0 and safety_restarts >= 1 "
                         "(the safety net must leave at least one restart of slack)")


def check_availability_guard(safety_restarts: float, return_restarts: float, min_up_s: float, min_saving: float,
                             checkpoint_gb: float, egress_per_gb: float) -> None:
    """``availability-guard`` (issue 23): safety net >= 1 restart, return margin >= 2 restarts (to come back to
    spot the slack must cover a restart there and one back), the rest as ``price-migration``."""
    if not safety_restarts >= 1 or not return_restarts >= 2 or not min_up_s >= 0:
        raise ValueError("availability-guard: safety_restarts must be >= 1, return_restarts >= 2 and min_up_s >= 0")
    check_price_migration(min_saving, checkpoint_gb, egress_per_gb, safety_restarts + 1.0)


def check_hybrid_topup(hysteresis_restarts: float, safety_restarts: float) -> None:
    """``hybrid-topup`` (issue 31): hysteresis >= 0 restarts; the safety net must leave at least one restart of slack."""
    if not hysteresis_restarts >= 0 or not safety_restarts >= 1:
        raise ValueError("hybrid-topup: hysteresis_restarts must be >= 0 and safety_restarts >= 1 "
                         "(the net must cover the on-demand nodes' start)")


def check_price_migration(min_saving: float, checkpoint_gb: float, egress_per_gb: float, slack_restarts: float) -> None:
    """``price-migration`` (paper 003): ``min_saving`` in [0, 1), non-negative move costs, slack >= 1 restart."""
    if not 0 <= min_saving < 1:
        raise ValueError("price-migration: min_saving must lie in [0, 1)")
    if checkpoint_gb < 0 or egress_per_gb < 0 or slack_restarts < 1:
        raise ValueError("price-migration: checkpoint_gb and egress_per_gb must be >= 0, slack_restarts >= 1")


def _is_int(v: Any) -> bool:
    return not isinstance(v, bool) and isinstance(v, int)


def check_scale_in(threshold: float, delta_s: float, interval_s: float, min_workers: int, knee_slope: float,
                   knee_window: int, knee_relative: bool, ewma_alpha: float, min_fit_points: int,
                   remove_at_knee: bool) -> None:
    """``scale-in`` (paper 004 Sec. 4.2, eq. 1-3): the auto-tuner's thresholds and windows."""
    if not 0 <= threshold <= 1:
        raise ValueError(f"scale-in: threshold S must be in [0, 1] (paper eq. 1), got {threshold!r}")
    if not interval_s > 0 or not math.isfinite(interval_s):
        raise ValueError(f"scale-in: interval_s must be > 0, got {interval_s!r}")
    if not 0 < delta_s <= interval_s:
        raise ValueError(f"scale-in: delta_s must be in (0, interval_s] (the paper sets Delta <= T), got {delta_s!r}")
    if not _is_int(min_workers) or min_workers < 1:
        raise ValueError(f"scale-in: min_workers must be an integer >= 1, got {min_workers!r}")
    if not knee_slope > 0 or (knee_relative and not knee_slope < 1):
        raise ValueError(f"scale-in: knee_slope must be > 0 (and < 1 when knee_relative), got {knee_slope!r}")
    if not _is_int(knee_window) or knee_window < 1:
        raise ValueError(f"scale-in: knee_window must be an integer >= 1, got {knee_window!r}")
    if not 0 < ewma_alpha <= 1:
        raise ValueError(f"scale-in: ewma_alpha must be in (0, 1], got {ewma_alpha!r}")
    if not _is_int(min_fit_points) or min_fit_points < 5:
        raise ValueError(f"scale-in: min_fit_points must be an integer >= 5 (4 coefficients), got {min_fit_points!r}")


def check_strategy_switch(strategies: tuple[str, ...], threshold: float, window_s: float, min_interval_s: float) -> None:
    """``strategy-switch`` (paper 001, Spotnik): two or more distinct modes, threshold in (0, 1), windows."""
    if len(strategies) < 2 or len(set(strategies)) != len(strategies):
        raise ValueError(f"strategy-switch: strategies must name at least two different modes, got {strategies!r}")
    if not 0 < threshold < 1:
        raise ValueError(f"strategy-switch: threshold must be in (0, 1) (Spotnik: 0.4), got {threshold!r}")
    if not (window_s > 0 and math.isfinite(window_s)):
        raise ValueError(f"strategy-switch: window_s must be > 0, got {window_s!r}")
    if not min_interval_s >= window_s:
        raise ValueError(f"strategy-switch: min_interval_s must be >= window_s, got {min_interval_s!r}")


@dataclass(frozen=True)
class PolicySchema:
    """One built-in policy: its class (``module:Class``, imported only where policies are built),
    parameters with their defaults, the check its constructor also runs, and whether it only makes
    sense on spot capacity (the on-demand baseline drops it)."""

    name: str
    target: str
    defaults: Mapping[str, Any]
    check: Callable[..., None]
    spot_only: bool = False
    #: turns a YAML value into the constructor's type before the check (``strategies`` list -> tuple)
    coerce: Mapping[str, Callable[[Any], Any]] | None = None

    @property
    def class_name(self) -> str:
        return self.target.rsplit(":", 1)[1]


SCHEMAS: dict[str, PolicySchema] = {s.name: s for s in (
    PolicySchema("lr-scaling", "spotwise.policies.lr_scaling:LrScaling",
                 {"min_factor": 0.0, "max_factor": 4.0, "rel_tolerance": 1e-9}, check_lr_scaling),
    PolicySchema("exp-growth", "spotwise.policies.growth:ExpGrowth", {"eta": 1.01, "n1": None}, check_exp_growth),
    PolicySchema("dynamic-bids", "spotwise.policies.dynamic_bids:DynamicBids",
                 {"switch_step": 1, "workers": 2, "iterations": 1, "deadline_s": 1.0, "mean_round_s": 1.0,
                  "price": {"kind": "uniform", "low": 0.2, "high": 1.0}}, check_dynamic_bids, spot_only=True),
    PolicySchema("uniform-progress", "spotwise.policies.deadline_guard:UniformProgress",
                 {"hysteresis_restarts": 2.0, "safety_restarts": 2.0, "defer_to_places": False},
                 check_uniform_progress, spot_only=True),
    PolicySchema("price-migration", "spotwise.policies.migration:PriceMigration",
                 {"min_saving": 0.05, "checkpoint_gb": 0.1, "egress_per_gb": 0.09, "slack_restarts": 3.0},
                 check_price_migration, spot_only=True),
    PolicySchema("availability-guard", "spotwise.policies.availability_guard:AvailabilityGuard",
                 {"safety_restarts": 2.0, "return_restarts": 15.0, "min_up_s": 600.0, "min_saving": 0.05,
                  "checkpoint_gb": 0.1, "egress_per_gb": 0.09}, check_availability_guard, spot_only=True),
    PolicySchema("hybrid-topup", "spotwise.policies.topup:HybridTopUp", {"hysteresis_restarts": 2.0, "safety_restarts": 2.0},
                 check_hybrid_topup,
                 spot_only=True),
    PolicySchema("scale-in", "spotwise.policies.scale_in:ScaleIn",
                 {"threshold": 0.05, "delta_s": 10.0, "interval_s": 20.0, "min_workers": 1, "knee_slope": 0.1,
                  "knee_window": 5, "knee_relative": True, "ewma_alpha": 0.9, "min_fit_points": 8,
                  "remove_at_knee": True}, check_scale_in),
    PolicySchema("strategy-switch", "spotwise.policies.strategy_switch:StrategySwitch",
                 {"strategies": ("full", "async"), "threshold": 0.4, "window_s": 30.0, "min_interval_s": 60.0},
                 check_strategy_switch, coerce={"strategies": tuple}),
)}

#: the valid policy names, as a spec's ``policies[].name`` gives them
POLICY_NAMES: tuple[str, ...] = tuple(SCHEMAS)


def schema_for(name: str) -> PolicySchema:
    """The schema of ``name``; :class:`InputError` naming the closest valid name when unknown."""
    schema = SCHEMAS.get(name)
    if schema is None:
        close = difflib.get_close_matches(name, list(SCHEMAS), n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise InputError(f"unknown policy {name!r}", f"{hint}valid names are {', '.join(sorted(SCHEMAS))}", "policies")
    return schema


def validate_policy(name: str, params: Mapping[str, Any] | None = None) -> None:
    """Check a policy's name and parameters against its schema, with the messages its constructor gives.

    Unknown name, unknown parameter or a value of the wrong type -> :class:`InputError` at
    ``policies``; a value out of range -> :class:`InputError` at ``policies.<name>``.
    """
    if ":" in str(name):  # a user policy (issue 22): syntax only; imported where policies are built
        from spotwise.policies.user import check_reference

        check_reference(name)
        if params is not None and not isinstance(params, Mapping):
            raise InputError(f"params of policy {name} must be a mapping", "write params: {key: value}", "policies")
        return
    schema = schema_for(name)
    given = dict(params or {})
    for key in given:
        if key not in schema.defaults:
            raise InputError(f"bad parameters for policy {name!r}: {schema.class_name}.__init__() got an unexpected "
                             f"keyword argument {key!r}", "check the policy's params", "policies")
    values = {**schema.defaults, **given}
    try:
        for key, conv in (schema.coerce or {}).items():
            values[key] = conv(values[key])
        schema.check(**values)
    except TypeError as e:
        raise InputError(f"bad parameters for policy {name!r}: {e}", "check the policy's params", "policies") from None
    except ValueError as e:
        raise InputError(str(e), "check the policy's params", f"policies.{name}") from None


def validate_policies(specs: list[Any]) -> None:
    """:func:`validate_policy` for each of the spec's ``policies`` (objects with ``name`` and ``params``)."""
    for p in specs:
        validate_policy(p.name, p.params)
