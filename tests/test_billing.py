"""Tests of spotwise.market.billing: every expected figure is computed by hand in the comments."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spotwise.errors import InputError
from spotwise.market.billing import SECONDS_PER_MONTH, BillingPolicy, Ledger
from spotwise.market.catalog import Catalog, InstanceType
from spotwise.market.series import SeriesMeta, StepSeries

PER_SECOND = BillingPolicy.per_second(minimum_s=60.0)
PER_HOUR = BillingPolicy.per_hour(revoked_partial_free=False)
PER_HOUR_REVOKE_FREE = BillingPolicy.per_hour(revoked_partial_free=True)
EXACT = BillingPolicy.exact()


def price_series(times: list[float], values: list[float], end: float, id: str = "spot") -> StepSeries:
    return StepSeries(np.array(times, float), np.array(values, float), end, SeriesMeta(id=id, kind="price", instance="p2.xlarge"))


@pytest.fixture(scope="module")
def cat() -> Catalog:
    return Catalog.default()


# ---------------------------------------------------------------------------- hand-computed cases
def test_worker_across_two_price_changes_per_second() -> None:
    # Spot price ($/h): 0.36 on [0,100), 0.72 on [100,200), 0.18 from 200 on,
    # i.e. 0.0001, 0.0002 and 0.00005 $/s.  The worker bid 5 $/h -- irrelevant: it pays the price.
    # Active [50, 250):
    #   [50,100)  50 s * 0.0001  = 0.005
    #   [100,200) 100 s * 0.0002 = 0.020
    #   [200,250) 50 s * 0.00005 = 0.0025
    #   total                    = 0.0275   (200 s > 60 s minimum, whole seconds: no rounding)
    s = price_series([0, 100, 200], [0.36, 0.72, 0.18], end=1000)
    led = Ledger(PER_SECOND)
    led.start("w0", 50, s)
    # running cost at t=150: [50,150) = 0.005 + 50 * 0.0002 = 0.015
    assert led.cost_until(150) == pytest.approx(0.015)
    assert led.stop("w0", 250, reason="revoked") == pytest.approx(0.0275)
    assert led.total() == pytest.approx(0.0275)
    assert led.breakdown()["by_instance"] == {"w0": pytest.approx(0.0275)}


def test_per_second_vs_per_hour_same_interval() -> None:
    # Fixed 0.9 $/h, active [0, 5400) = 1.5 h, stopped by the user.
    #   per-second: 1.5 h * 0.9       = 1.35
    #   per-hour:   2 started hours   = 1.80
    for policy, expected in ((PER_SECOND, 1.35), (PER_HOUR, 1.8), (PER_HOUR_REVOKE_FREE, 1.8)):
        led = Ledger(policy)
        led.start("w", 0, 0.9)
        assert led.stop("w", 5400, reason="released") == pytest.approx(expected)

    # With a varying price: 1.0 $/h on [0,1800), 2.0 on [1800,3600), 0.5 from 3600.
    #   per-second (integral): (1800*1.0 + 1800*2.0 + 1800*0.5) / 3600 = 6300/3600 = 1.75
    #   per-hour (price at the start of each started hour, old EC2 rule):
    #     hour 1 starts at 0 -> 1.0; hour 2 starts at 3600 -> 0.5; total 1.5
    s = price_series([0, 1800, 3600], [1.0, 2.0, 0.5], end=10_000)
    led = Ledger(PER_SECOND)
    led.start("a", 0, s)
    assert led.stop("a", 5400) == pytest.approx(1.75)
    led = Ledger(PER_HOUR)
    led.start("a", 0, s)
    assert led.stop("a", 5400) == pytest.approx(1.5)


def test_sixty_second_minimum_charge() -> None:
    # 3.6 $/h = 0.001 $/s.
    #   10 s run, 60 s minimum     -> 60 s * 0.001 = 0.060
    #   60.4 s run, whole seconds  -> 61 s * 0.001 = 0.061
    #   10 s run, exact billing    -> 10 s * 0.001 = 0.010
    led = Ledger(PER_SECOND)
    led.start("short", 0, 3.6)
    assert led.stop("short", 10) == pytest.approx(0.06)
    led.start("odd", 100, 3.6)
    assert led.stop("odd", 160.4) == pytest.approx(0.061)
    led = Ledger(EXACT)
    led.start("short", 0, 3.6)
    assert led.stop("short", 10) == pytest.approx(0.01)
    # a zero-length interval costs nothing (no minimum without any active time)
    led.start("none", 5, 3.6)
    assert led.stop("none", 5) == 0.0
    assert PER_SECOND.billed_seconds(0.0) == 0.0


def test_revocation_mid_hour_under_the_old_aws_rule() -> None:
    # Fixed 0.9 $/h, per-hour billing, active [0, 5400) = 1.5 h.
    #   revoked by the provider -> the partial 2nd hour is free: 1 h * 0.9 = 0.9
    #   released by the user    -> 2 started hours:             2 h * 0.9 = 1.8
    #   revoked inside the first hour (t=1800) -> 0 full hours:           0.0
    led = Ledger(PER_HOUR_REVOKE_FREE)
    led.start("rev", 0, 0.9)
    led.start("user", 0, 0.9)
    led.start("early", 0, 0.9)
    assert led.stop("rev", 5400, reason="revoked") == pytest.approx(0.9)
    assert led.stop("user", 5400, reason="released") == pytest.approx(1.8)
    assert led.stop("early", 1800, reason="revoked") == 0.0
    # without the rule, the revoked instance pays the started hour too: 1.8
    led = Ledger(PER_HOUR)
    led.start("rev", 0, 0.9)
    assert led.stop("rev", 5400, reason="revoked") == pytest.approx(1.8)
    # the rule is for spot instances: an on-demand one is billed in full (1.8)
    led = Ledger(PER_HOUR_REVOKE_FREE)
    led.start("od", 0, 0.9, market="on_demand")
    assert led.stop("od", 5400, reason="revoked") == pytest.approx(1.8)


def test_coordinator_billed_on_demand_for_the_whole_job(cat: Catalog) -> None:
    # Coordinator: m4.xlarge on-demand, 0.2 $/h (AWS list price), up for the whole job [0, 7200).
    #   0.2 * 2 h = 0.40
    # Two GCE preemptible K80 workers at the fixed transient price 0.256 $/h (paper 002 Table II):
    #   w0 [0, 3600) revoked: 0.256 ; w1 [0, 7200) until close: 0.512 ; workers = 0.768
    # Per-hour billing with the revocation rule: all intervals are whole hours, so no rounding.
    led = Ledger(PER_HOUR_REVOKE_FREE)
    led.start("coord", 0, cat.instance("m4.xlarge"), category="coordinator", market="on_demand")
    k80 = cat.instance("gce-k80")
    led.start("w0", 0, k80)
    led.start("w1", 0, k80)
    led.stop("w0", 3600, reason="revoked")
    assert led.running() == ["coord", "w1"]
    with pytest.raises(RuntimeError, match="close"):
        led.total()
    assert led.close(7200) == pytest.approx(0.4 + 0.768)
    bd = led.breakdown()
    assert bd["by_category"] == {"coordinator": pytest.approx(0.4), "worker": pytest.approx(0.768)}
    assert bd["by_market"] == {"on_demand": pytest.approx(0.4), "spot": pytest.approx(0.768)}
    # the coordinator's partial hour is billed even though workers' revoked partial hours are not:
    # job ending at 5400 -> coordinator 2 started hours = 0.4
    led = Ledger(PER_HOUR_REVOKE_FREE)
    led.start("coord", 0, 0.2, category="coordinator", market="on_demand")
    led.stop("coord", 5400, reason="revoked")
    assert led.total() == pytest.approx(0.4)


def test_function_gb_seconds(cat: Catalog) -> None:
    # IBM functions, 1.7e-5 $/GB-s (paper 004 Table 2: 3.4e-5 $/s for 2 GB), no request fee:
    #   12 calls * 2 GB * 30 s * 1.7e-5 = 0.01224
    led = Ledger(functions=cat.function("ibm-functions"))
    assert led.function_call(10, gb=2.0, seconds=30.0, n_requests=12) == pytest.approx(0.01224)
    # AWS Lambda, 1 ms billing: 1 GB for 1.5 ms -> 2 ms billed:
    #   1 * 0.002 * 1.66667e-5 + 2e-7 = 3.33334e-8 + 2e-7 = 2.333334e-7
    lam = cat.function("aws-lambda")
    assert led.function_call(20, gb=1.0, seconds=0.0015, pricing=lam) == pytest.approx(2.333334e-7)
    assert led.total() == pytest.approx(0.01224 + 2.333334e-7)
    assert led.cost_until(15) == pytest.approx(0.01224)  # the lambda call at t=20 not yet made
    assert led.breakdown()["by_category"] == {"function": pytest.approx(0.01224 + 2.333334e-7)}
    with pytest.raises(InputError, match="no serverless pricing"):
        Ledger().function_call(0, 1.0, 1.0)


def test_storage_and_egress(cat: Catalog) -> None:
    # S3 Standard 0.023 $/GB-month, month = 730 h.  100 GB kept for 73 h:
    #   100 * (73/730) * 0.023 = 100 * 0.1 * 0.023 = 0.23 ; half way (36.5 h): 0.115
    # Egress 0.09 $/GB: a 50 GB checkpoint moved out = 4.5
    led = Ledger(storage=cat.storage("aws-s3-standard"))
    assert SECONDS_PER_MONTH == 730 * 3600
    assert led.storage(0, 73 * 3600, gb=100) == pytest.approx(0.23)
    assert led.cost_until(36.5 * 3600) == pytest.approx(0.115)
    assert led.egress(1000, gb=50) == pytest.approx(4.5)
    assert led.breakdown()["by_category"] == {"storage": pytest.approx(0.23), "egress": pytest.approx(4.5)}
    with pytest.raises(InputError, match="before t0"):
        led.storage(10, 5, 1)
    with pytest.raises(InputError, match="no storage pricing"):
        Ledger().storage(0, 1, 1)


def test_breakdown_sums_to_total_and_to_dict_is_json(cat: Catalog) -> None:
    s = price_series([0, 600], [0.3, 0.5], end=3600)
    led = Ledger(PER_SECOND, functions=cat.function("ibm-functions"), storage=cat.storage("gcs-standard"))
    led.start("coord", 0, 0.143, category="coordinator", market="on_demand")
    led.start("w0", 0, s)
    led.start("w1", 100, s)
    led.stop("w1", 700, reason="revoked")
    led.start("w1", 900, s)  # a replacement in the same slot: a new interval
    led.function_call(50, 2.0, 10.0, 4)
    led.storage(0, 3000, 1.5)
    led.egress(2000, 0.5)
    total = led.close(3000)
    bd = led.breakdown()
    assert sum(bd["by_category"].values()) == pytest.approx(total)
    inst = bd["by_category"]["coordinator"] + bd["by_category"]["worker"]
    assert sum(bd["by_instance"].values()) == pytest.approx(inst)
    assert sum(bd["by_market"].values()) == pytest.approx(inst)
    assert led.instance_seconds() == {"coord": 3000, "w0": 3000, "w1": 600 + 2100}
    d = json.loads(json.dumps(led.to_dict()))
    assert d["total_usd"] == pytest.approx(total)
    assert len(d["intervals"]) == 4 and len(d["charges"]) == 3
    assert led.total(1500) == pytest.approx(led.cost_until(1500))


# ---------------------------------------------------------------------------- errors
def test_stopping_an_instance_that_is_not_running() -> None:
    led = Ledger()
    with pytest.raises(InputError) as ei:
        led.stop("ghost", 10)
    assert "'ghost' is not running (it was never started)" in str(ei.value)
    led.start("w", 0, 1.0)
    led.stop("w", 100)
    with pytest.raises(InputError, match="already stopped"):
        led.stop("w", 200)


def test_bad_events() -> None:
    led = Ledger()
    led.start("w", 100, 1.0)
    with pytest.raises(InputError, match="already running"):
        led.start("w", 150, 1.0)
    with pytest.raises(InputError, match="before the start time"):
        led.stop("w", 50)
    with pytest.raises(InputError, match="unknown stop reason"):
        led.stop("w", 200, reason="crashed")
    with pytest.raises(InputError, match="unknown category"):
        led.start("x", 0, 1.0, category="wrker")
    with pytest.raises(InputError, match="unknown market"):
        led.start("x", 0, 1.0, market="reserved")
    with pytest.raises(InputError, match="price must be >= 0"):
        led.start("x", 0, -1.0)
    with pytest.raises(InputError, match="no fixed spot price"):
        led.start("x", 0, InstanceType("p3.2xlarge", "aws", on_demand_per_hour=3.06))
    avail = StepSeries(np.array([0.0]), np.array([1.0]), 10.0, SeriesMeta(id="a", kind="availability"))
    with pytest.raises(InputError, match="kind 'price'"):
        led.start("x", 0, avail)
    with pytest.raises(InputError, match="time base"):
        led.start("x", 0, price_series([1.6e9], [1.0], end=1.6e9 + 10))
    with pytest.raises(InputError, match="period_start"):
        BillingPolicy("bad", granularity_s=0, price_rule="period_start")
    with pytest.raises(InputError, match="minimum_s must be >= 0"):
        BillingPolicy("bad", minimum_s=-1)


# ---------------------------------------------------------------------------- invariants
prices = st.lists(st.floats(0.0, 50.0, allow_nan=False), min_size=1, max_size=6)
policies = st.sampled_from([PER_SECOND, PER_HOUR, PER_HOUR_REVOKE_FREE, EXACT, BillingPolicy.per_second(0.0)])


def _series(vals: list[float]) -> StepSeries:
    return price_series([i * 1000.0 for i in range(len(vals))], vals, end=len(vals) * 1000.0)


@settings(max_examples=200, deadline=None)
@given(prices, policies, st.floats(0, 10_000), st.floats(0, 20_000), st.sampled_from(["revoked", "released", "finished"]))
def test_cost_is_non_negative(vals: list[float], policy: BillingPolicy, t0: float, dur: float, reason: str) -> None:
    led = Ledger(policy)
    led.start("w", t0, _series(vals))
    assert led.stop("w", t0 + dur, reason=reason) >= 0
    assert led.total() >= 0


@settings(max_examples=200, deadline=None)
@given(
    prices,
    st.sampled_from([PER_SECOND, PER_HOUR, EXACT]),
    st.lists(st.floats(0, 8000), min_size=2, max_size=8),
)
def test_running_cost_is_monotone_in_time(vals: list[float], policy: BillingPolicy, ts: list[float]) -> None:
    # instance events at the first two sorted times; cost_until must never decrease
    ts = sorted(ts)
    led = Ledger(policy)
    led.start("a", ts[0], _series(vals))
    led.start("b", ts[0], 1.0, category="coordinator", market="on_demand")
    led.stop("a", ts[1], reason="revoked")
    led.close(ts[-1])
    grid = sorted(set(ts) | {t + 0.5 for t in ts} | {ts[0] - 1.0, ts[-1] + 1.0})
    costs = [led.cost_until(t) for t in grid]
    assert all(b >= a - 1e-12 for a, b in zip(costs, costs[1:]))
    assert costs[-1] == pytest.approx(led.total())


@settings(max_examples=200, deadline=None)
@given(prices, st.integers(0, 6000), st.integers(0, 6000), st.integers(0, 6000))
def test_per_second_billing_is_additive_over_splits(vals: list[float], a: int, b: int, c: int) -> None:
    # per-second billing without a minimum: charge[a,c) = charge[a,b) + charge[b,c) for whole-second times
    a, b, c = sorted((a, b, c))
    s = _series(vals)
    policy = BillingPolicy.per_second(minimum_s=0.0)
    whole, left, right = Ledger(policy), Ledger(policy), Ledger(policy)
    whole.start("w", a, s)
    whole.stop("w", c)
    left.start("w", a, s)
    left.stop("w", b)
    left.start("w", b, s)
    left.stop("w", c)
    assert left.total() == pytest.approx(whole.total(), rel=1e-9, abs=1e-12)
    # and the running cost of one interval at b equals the cost of the first part
    right.start("w", a, s)
    right.stop("w", c)
    assert right.cost_until(b) == pytest.approx(policy.charge(s, a, b), abs=1e-12)
    assert math.isfinite(whole.total())
