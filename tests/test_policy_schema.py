"""The spec validates policies against spotwise.policies.schema without building them (issue 19 item 3):
the schema must agree with the classes the registry builds, and give the same errors."""

from __future__ import annotations

import inspect
import subprocess
import sys

import pytest

from spotwise.errors import InputError
from spotwise.policies.registry import POLICIES, make_policy
from spotwise.policies.schema import POLICY_NAMES, SCHEMAS, validate_policy


@pytest.mark.parametrize("name", POLICY_NAMES)
def test_schema_defaults_are_the_constructors(name: str) -> None:
    cls = POLICIES[name]
    sig = inspect.signature(cls)
    defaults = {k: p.default for k, p in sig.parameters.items()}
    if "price" in defaults:  # a dataclass default_factory shows as a sentinel
        defaults["price"] = cls().price  # type: ignore[call-arg,attr-defined]
    if "strategies" in defaults:
        defaults["strategies"] = tuple(defaults["strategies"])
    assert dict(SCHEMAS[name].defaults) == defaults
    assert SCHEMAS[name].target == f"{cls.__module__}:{cls.__name__}"
    assert SCHEMAS[name].spot_only == cls.spot_only


BAD = [
    ("lr-scalin", {}), ("lr-scaling", {"warp": 9}), ("lr-scaling", {"max_factor": 0}), ("lr-scaling", {"min_factor": "x"}),
    ("exp-growth", {"eta": 0.5}), ("exp-growth", {"n1": 0}), ("exp-growth", {"speed": 2}),
    ("dynamic-bids", {"workers": 0}), ("dynamic-bids", {"deadline_s": -1}), ("dynamic-bids", {"price": {"kind": "zipf"}}),
    ("dynamic-bids", {"price": {"kind": "gaussian", "mean": 1.0, "variance": -1.0}}),
    ("uniform-progress", {"safety_restarts": 0.5}), ("price-migration", {"min_saving": 1.0}),
    ("price-migration", {"slack_restarts": 0}), ("scale-in", {"threshold": 2}), ("scale-in", {"min_workers": True}),
    ("scale-in", {"delta_s": 30.0}), ("scale-in", {"knee_slope": 1.5}), ("scale-in", {"min_fit_points": 4}),
    ("strategy-switch", {"strategies": ["full"]}), ("strategy-switch", {"strategies": 3}),
    ("strategy-switch", {"threshold": 1.0}), ("strategy-switch", {"window_s": 90.0}),
]


@pytest.mark.parametrize(("name", "params"), BAD)
def test_validation_gives_the_constructors_error(name: str, params: dict) -> None:
    with pytest.raises(InputError) as built:
        make_policy(name, params)
    with pytest.raises(InputError) as checked:
        validate_policy(name, params)
    assert (checked.value.args, checked.value.__dict__) == (built.value.args, built.value.__dict__)


def test_good_params_pass_both() -> None:
    for name in POLICY_NAMES:
        validate_policy(name, {})
        make_policy(name, {})
    validate_policy("strategy-switch", {"strategies": ["full", "n-sync", "async"]})


def test_loading_a_spec_builds_no_policy() -> None:
    code = ("import sys, spotwise.config; "
            "print(sorted(m for m in sys.modules if m.startswith(('spotwise.policies.', 'spotwise.planner'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['spotwise.policies.base', 'spotwise.policies.price_quantile', 'spotwise.policies.schema']"
