"""Policies are pure functions of observations (DESIGN.md "Policies")."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spotwise.config import spec_from_dict
from spotwise.errors import InputError
from spotwise.policies import Observation, Resize, SetLearningRate, make_policy
from spotwise.policies.growth import workers_at


def obs(**over: object) -> Observation:
    base = dict(step=0, t=0.0, active=8, provisioned=8, max_workers=16, reference_workers=8, base_lr=0.1, lr=0.1, sync="full")
    base.update(over)
    return Observation(**base)  # type: ignore[arg-type]


def test_lr_scales_with_active_workers() -> None:
    p = make_policy("lr-scaling")
    assert p.decide(obs()) == []
    (d,) = p.decide(obs(active=2))
    assert isinstance(d, SetLearningRate) and d.lr == pytest.approx(0.025) and "2 of 8" in d.reason
    assert p.decide(obs(active=0)) == [], "idle: keep the rate"
    (d,) = make_policy("lr-scaling", {"max_factor": 1.5}).decide(obs(active=16, provisioned=16, lr=0.05))
    assert d.lr == pytest.approx(0.15), "16/8 = 2x, clamped to max_factor 1.5"


def test_lr_policy_is_pure() -> None:
    p = make_policy("lr-scaling")
    o = obs(active=3)
    assert p.decide(o) == p.decide(o)


def test_exp_growth_follows_theorem_2() -> None:
    # n_j = ceil(n_1 eta^(j-1)) capped at n_max (paper 000 Thm 2, Remark 3)
    assert [workers_at(j, 2, 1.5, 10) for j in range(1, 8)] == [2, 3, 5, 7, 10, 10, 10]
    assert workers_at(10**9, 1, 1.0001, 64) == 64  # no overflow
    p = make_policy("exp-growth", {"eta": 1.5, "n1": 2})
    (d,) = p.decide(obs(step=3, provisioned=5, max_workers=10))
    assert isinstance(d, Resize) and d.workers == 7
    assert p.decide(obs(step=3, provisioned=7, max_workers=10)) == []


@given(st.integers(1, 10_000), st.integers(1, 8), st.floats(1.0, 2.0), st.integers(8, 128))
def test_growth_is_monotone_and_capped(j: int, n1: int, eta: float, n_max: int) -> None:
    a, b = workers_at(j, n1, eta, n_max), workers_at(j + 1, n1, eta, n_max)
    assert n1 <= a <= b <= n_max or a == b == n_max
    log_exact = math.log(n1) + (j - 1) * math.log(eta)
    if log_exact < math.log(n_max - 1):
        exact = math.exp(log_exact)
        assert a == math.ceil(exact - 1e-9)


def test_registry_errors_and_spec_validation() -> None:
    with pytest.raises(InputError, match="did you mean 'lr-scaling'"):
        make_policy("lr-scalin")
    with pytest.raises(InputError, match="bad parameters"):
        make_policy("exp-growth", {"speed": 2})
    base = {"name": "j", "workload": {"name": "mlp-digits"}, "target": {"iterations": 3},
            "cluster": {"instance_type": "c5.xlarge", "workers": 2}}
    with pytest.raises(InputError, match="unknown policy"):
        spec_from_dict({**base, "policies": [{"name": "yolo"}]})
    with pytest.raises(InputError, match="max_workers"):
        spec_from_dict({**base, "policies": [{"name": "exp-growth", "params": {"eta": 1.1}}]})
