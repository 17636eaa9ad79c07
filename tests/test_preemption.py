"""Tests for spotwise.market.preemption (revocation models)."""

from __future__ import annotations

import math
from dataclasses import FrozenInstanceError
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spotwise.errors import InputError
from spotwise.market.preemption import (
    REVOCATION_MODELS,
    AvailabilityTraceRevocation,
    BernoulliRevocation,
    BidRevocation,
    ExponentialLifetime,
    LifetimeRevocation,
    MarketEvent,
    NoRevocation,
    ProviderNotice,
    RevocationModel,
    make_revocation_model,
    notice_seconds,
)
from spotwise.market.series import SeriesMeta, StepSeries


def price_series(times, values, end=None) -> StepSeries:
    return StepSeries.from_points(times, values, SeriesMeta(id="p", kind="price"), end=end)


def avail_series(times, values, end=None, cloud="") -> StepSeries:
    return StepSeries.from_points(times, values, SeriesMeta(id="a", kind="availability", cloud=cloud), end=end)


def triples(events):
    return [(e.t, e.worker, e.kind) for e in events]


# price: [0,100) 1.0 | [100,200) 3.0 | [200,300) 2.0 | [300,400) 1.0 | [400,500) 2.5
PRICES = price_series([0, 100, 200, 300, 400], [1.0, 3.0, 2.0, 1.0, 2.5], end=500)


# ------------------------------------------------------------------------------ notices / events
def test_provider_notice_constants_and_lookup():
    assert ProviderNotice.AWS == 120.0
    assert ProviderNotice.GCP == 30.0
    assert ProviderNotice.AZURE == 30.0
    assert ProviderNotice.for_cloud("AWS") == 120.0
    assert ProviderNotice.for_cloud(" gce ") == 30.0
    assert notice_seconds("azure") == 30.0
    with pytest.raises(InputError, match="unknown cloud 'ibm'"):
        ProviderNotice.for_cloud("ibm")


def test_market_event_validation_and_frozen():
    ev = MarketEvent(1, np.int64(2), "revoke")
    assert ev.t == 1.0 and isinstance(ev.t, float) and ev.worker == 2 and type(ev.worker) is int
    assert ev.to_dict() == {"t": 1.0, "kind": "revoke", "worker": 2}
    with pytest.raises(FrozenInstanceError):
        ev.t = 3.0  # type: ignore[misc]
    for bad in [(math.nan, 0, "revoke"), (0.0, -1, "revoke"), (0.0, 1.5, "revoke"), (0.0, 0, "join"), (0.0, True, "notice")]:
        with pytest.raises(InputError):
            MarketEvent(*bad)  # type: ignore[arg-type]


# ------------------------------------------------------------------------------ bids
def test_bid_persistent_exact_events_with_tie():
    m = BidRevocation(PRICES, 2.0, persistent=True, notice_s=30)
    # price 2.0 on [200,300) equals the bid -> active (tie)
    assert m.active_intervals(0, 0, 500) == [(0.0, 100.0), (200.0, 400.0)]
    assert triples(m.events(1, 0, 500)) == [
        (0.0, 0, "available"),
        (70.0, 0, "notice"),
        (100.0, 0, "revoke"),
        (200.0, 0, "available"),
        (370.0, 0, "notice"),
        (400.0, 0, "revoke"),
    ]
    assert not m.is_iteration_driven


def test_bid_one_time_never_returns():
    m = BidRevocation(PRICES, 2.0, persistent=False, notice_s=30)
    assert triples(m.events(1, 0, 500)) == [(0.0, 0, "available"), (70.0, 0, "notice"), (100.0, 0, "revoke")]


def test_bid_one_time_waits_until_first_fulfilled():
    m = BidRevocation(PRICES, 2.0, persistent=False, notice_s=30)
    # window starts while price 3.0 > bid: fulfilled at 200, revoked for good at 400
    assert m.active_intervals(0, 150, 500) == [(200.0, 400.0)]


def test_bid_notice_clipped_to_window_start_and_availability():
    m = BidRevocation(PRICES, 2.0, notice_s=150)
    evs = triples(m.events(1, 0, 500))
    assert (0.0, 0, "notice") in evs  # 100 - 150 clipped to t0 = 0
    assert (250.0, 0, "notice") in evs  # 400 - 150
    m2 = BidRevocation(PRICES, 2.0, notice_s=250)
    assert (200.0, 0, "notice") in triples(m2.events(1, 0, 500))  # clipped to its availability at 200
    # window starting mid-trace: notice clipped to t0
    assert triples(m.events(1, 50, 500))[:3] == [(50.0, 0, "available"), (50.0, 0, "notice"), (100.0, 0, "revoke")]


def test_bid_window_end_cuts_without_revoke():
    m = BidRevocation(PRICES, 2.0, notice_s=30)
    assert triples(m.events(1, 0, 100)) == [(0.0, 0, "available")]  # revoke at t1 is outside [t0, t1)
    assert triples(m.events(1, 0, 390)) == [
        (0.0, 0, "available"),
        (70.0, 0, "notice"),
        (100.0, 0, "revoke"),
        (200.0, 0, "available"),
    ]


def test_two_bid_groups_high_bids_survive_longer():
    m = BidRevocation.two_groups(PRICES, b_high=3.0, n_high=2, b_low=2.0, n_low=2, notice_s=30)
    assert m.bids == (3.0, 3.0, 2.0, 2.0)
    evs = m.events(4, 0, 500)
    for w in (0, 1):
        assert [e.kind for e in evs if e.worker == w] == ["available"]
    for w in (2, 3):
        assert [(e.t, e.kind) for e in evs if e.worker == w] == [
            (0.0, "available"), (70.0, "notice"), (100.0, "revoke"),
            (200.0, "available"), (370.0, "notice"), (400.0, "revoke"),
        ]
    assert [t for t, _, _ in triples(evs)] == sorted(t for t, _, _ in triples(evs))
    up = [sum(e - s for s, e in m.active_intervals(w, 0, 500)) for w in range(4)]
    assert up == [500.0, 500.0, 300.0, 300.0]
    times = np.array([0, 50, 150, 250, 350, 450])
    mat = m.activity_matrix(times)
    assert mat.shape == (4, 6)
    np.testing.assert_array_equal(mat[0], [True] * 6)
    np.testing.assert_array_equal(mat[2], [True, True, False, True, True, False])
    with pytest.raises(InputError, match="3 workers but 4 bids"):
        m.events(3, 0, 500)


def test_bid_expected_active_fraction_is_cdf():
    m = BidRevocation(PRICES, 2.0)
    assert m.expected_active_fraction() == pytest.approx(0.6)
    assert m.expected_active_fraction(0.5) == 0.0
    assert m.expected_active_fraction(3.0) == pytest.approx(1.0)
    two = BidRevocation(PRICES, [3.0, 2.0])
    assert two.expected_active_fraction() == pytest.approx(0.8)
    # empirical active fraction matches F(b)
    grid = np.arange(0, 500, 1.0)
    assert m.activity_matrix(grid, workers=1).mean() == pytest.approx(0.6)


def test_bid_validation_and_time_driven():
    with pytest.raises(InputError, match="kind 'price'"):
        BidRevocation(avail_series([0, 1], [1, 0]), 1.0)
    with pytest.raises(InputError):
        BidRevocation(PRICES, -1.0)
    with pytest.raises(InputError):
        BidRevocation(PRICES, [])
    with pytest.raises(InputError):
        BidRevocation(PRICES, 1.0, notice_s=-5)
    with pytest.raises(InputError, match="window"):
        BidRevocation(PRICES, 1.0).events(1, 10, 10)
    with pytest.raises(TypeError, match="time-driven"):
        BidRevocation(PRICES, 1.0).sample_iteration(np.ones(3, dtype=bool), np.random.default_rng(0))


# ------------------------------------------------------------------------------ bernoulli
def test_bernoulli_rate_matches_q_and_is_reproducible():
    q = 0.1
    m = BernoulliRevocation(q, rejoin_p=1 - q)
    assert m.is_iteration_driven

    def run(seed):
        rng = np.random.default_rng(seed)
        active = np.ones(64, dtype=bool)
        revoked_total = exposed = 0
        history = []
        for _ in range(2000):
            nxt = m.step(active, rng)
            revoked_total += int(np.sum(active & ~nxt))
            exposed += int(active.sum())
            history.append(nxt.copy())
            active = nxt
        return revoked_total / exposed, np.array(history)

    rate, hist = run(7)
    assert rate == pytest.approx(q, abs=0.01)
    # i.i.d. per iteration with rejoin_p = 1 - q: active fraction ~ 1 - q (paper 000 Lemma 3)
    assert hist.mean() == pytest.approx(1 - q, abs=0.01)
    rate2, hist2 = run(7)
    assert rate2 == rate and np.array_equal(hist, hist2)
    assert not np.array_equal(hist, run(8)[1])


def test_bernoulli_sample_iteration_only_revokes_active():
    m = BernoulliRevocation(0.5)
    active = np.array([True, False] * 500)
    rev = m.sample_iteration(active, np.random.default_rng(1))
    assert rev.dtype == bool and not np.any(rev & ~active)
    assert rev.sum() / active.sum() == pytest.approx(0.5, abs=0.06)
    # step and sample_iteration draw the same uniforms
    nxt = m.step(active, np.random.default_rng(1))
    np.testing.assert_array_equal(active & ~nxt, rev)
    assert not np.any(nxt & ~active)  # no rejoin
    assert not BernoulliRevocation(0.0).sample_iteration(active, np.random.default_rng(0)).any()
    np.testing.assert_array_equal(BernoulliRevocation(1.0).sample_iteration(active, np.random.default_rng(0)), active)
    with pytest.raises(InputError):
        m.sample_iteration(np.ones(3), np.random.default_rng(0))


def test_bernoulli_validation_and_time_conversion():
    for bad in (-0.1, 1.5, math.nan, "0.1"):
        with pytest.raises(InputError):
            BernoulliRevocation(bad)  # type: ignore[arg-type]
    with pytest.raises(InputError):
        BernoulliRevocation(0.1, rejoin_p=2.0)
    with pytest.raises(TypeError, match="iteration-driven"):
        BernoulliRevocation(0.1).events(2, 0, 10, np.random.default_rng(0))
    with pytest.raises(TypeError, match="Generator"):
        BernoulliRevocation(0.1, iteration_s=1.0).events(2, 0, 10)
    m = BernoulliRevocation(0.2, iteration_s=10.0, notice_s=3.0)
    evs = m.events(20, 0, 1000, np.random.default_rng(3))
    for e in evs:
        if e.kind == "revoke":
            assert e.t % 10.0 == 0.0
    assert m.stationary_active_fraction() == 0.0
    assert BernoulliRevocation(0.2, rejoin_p=0.8).stationary_active_fraction() == pytest.approx(0.8)


# ------------------------------------------------------------------------------ lifetimes
def _gcp_like_lifetimes(n=600, seed=0):
    rng = np.random.default_rng(seed)
    short = rng.uniform(60, 2 * 3600, size=n // 5)  # ~20% revoked in the first two hours
    mid = rng.uniform(2 * 3600, 24 * 3600, size=n // 10)
    full = rng.uniform(24 * 3600, 26 * 3600, size=n - short.size - mid.size)  # above the cap
    return np.concatenate([short, mid, full])


def test_lifetime_draws_are_capped_and_match_capped_mean():
    lt = _gcp_like_lifetimes()
    m = LifetimeRevocation(lt)
    draws = m.draw_lifetimes(50_000, np.random.default_rng(0))
    assert draws.max() <= 24 * 3600
    assert m.capped_mean_s == pytest.approx(np.mean(np.minimum(lt, 86400.0)))
    assert draws.mean() == pytest.approx(m.capped_mean_s, rel=0.02)
    # as events: no active interval longer than the cap, replacement after the restart delay
    m2 = LifetimeRevocation(lt, restart_delay_s=90.0)
    for w in range(5):
        ivs = m2.active_intervals(w, 0, 10 * 86400, np.random.default_rng(11))
        assert all(e - s <= 86400 + 1e-6 for s, e in ivs)  # float rounding of t + life
        for (s0, e0), (s1, _) in zip(ivs, ivs[1:]):
            assert s1 - e0 == pytest.approx(90.0)


def test_lifetime_determinism_and_per_worker_streams():
    m = LifetimeRevocation(_gcp_like_lifetimes(), restart="exponential", restart_delay_s=120)
    a = m.events(6, 0, 5 * 86400, np.random.default_rng(5))
    b = m.events(6, 0, 5 * 86400, np.random.default_rng(5))
    assert a == b
    # worker i's history does not depend on how many workers are asked for
    more = m.events(9, 0, 5 * 86400, np.random.default_rng(5))
    assert [e for e in more if e.worker < 6] == a
    assert m.active_intervals(4, 0, 5 * 86400, np.random.default_rng(5)) == m.all_intervals(
        6, 0, 5 * 86400, np.random.default_rng(5)
    )[4]
    # GCP notice by default
    rev = [e for e in a if e.kind == "revoke"]
    notes = [e for e in a if e.kind == "notice"]
    assert len(rev) == len(notes) > 0
    assert m.notice_s == 30.0


def test_lifetime_from_table_validation_and_no_replacement():
    table = SimpleNamespace(lifetimes_s=np.array([100.0, 200.0]))
    m = LifetimeRevocation.from_table(table, restart_delay_s=math.inf)
    ivs = m.active_intervals(0, 0, 10_000, np.random.default_rng(0))
    assert len(ivs) == 1 and ivs[0][1] - ivs[0][0] in (100.0, 200.0)
    with pytest.raises(InputError, match="lifetimes_s"):
        LifetimeRevocation.from_table(object())
    for bad in ([], [1.0, -2.0], [[1.0]], [math.inf]):
        with pytest.raises(InputError):
            LifetimeRevocation(np.array(bad))
    with pytest.raises(InputError):
        LifetimeRevocation(np.array([1.0]), cap_s=0)
    with pytest.raises(InputError):
        LifetimeRevocation(np.array([1.0]), restart="sometimes")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="Generator"):
        LifetimeRevocation(np.array([1.0])).events(1, 0, 10)


def test_exponential_lifetime_mean_and_cap():
    m = ExponentialLifetime(mttf_s=3600.0, mttr_s=60.0)
    d = m.draw_lifetimes(40_000, np.random.default_rng(0))
    assert d.mean() == pytest.approx(3600.0, rel=0.03)
    capped = ExponentialLifetime(mttf_s=3600.0, cap_s=1800.0)
    assert capped.draw_lifetimes(1000, np.random.default_rng(0)).max() <= 1800.0
    with pytest.raises(InputError):
        ExponentialLifetime(mttf_s=0.0)


# ------------------------------------------------------------------------------ availability trace
TRACE = avail_series([0, 10, 20, 30, 40], [2, 3, 1, 0, 2], end=50)


def test_trace_exact_events_with_counts():
    m = AvailabilityTraceRevocation(TRACE, notice_s=5)
    assert triples(m.events(3, 0, 50)) == [
        (0.0, 0, "available"),
        (0.0, 1, "available"),
        (10.0, 2, "available"),
        (15.0, 1, "notice"),
        (15.0, 2, "notice"),
        (20.0, 1, "revoke"),
        (20.0, 2, "revoke"),
        (25.0, 0, "notice"),
        (30.0, 0, "revoke"),
        (40.0, 0, "available"),
        (40.0, 1, "available"),
    ]
    # a worker beyond the maximum count never runs
    assert m.active_intervals(3, 0, 50) == []
    np.testing.assert_array_equal(m.activity_matrix([0, 10, 25, 35, 45], 3).sum(axis=0), [2, 3, 1, 0, 2])


def test_trace_offset_and_loop():
    m = AvailabilityTraceRevocation(TRACE, offset_s=20, notice_s=0)
    # virtual t -> trace t + 20; the last value (2) holds after the end
    assert m.active_intervals(0, 0, 60) == [(0.0, 10.0), (20.0, 60.0)]
    assert m.active_intervals(1, 0, 60) == [(20.0, 60.0)]
    looped = AvailabilityTraceRevocation(TRACE, offset_s=20, loop=True, notice_s=0)
    assert looped.active_intervals(0, 0, 60) == [(0.0, 10.0), (20.0, 60.0)]
    assert looped.active_intervals(1, 0, 60) == [(20.0, 50.0)]
    assert looped.active_intervals(2, 0, 60) == [(40.0, 50.0)]
    # many periods later the pattern repeats
    assert looped.active_intervals(2, 1000, 1060) == [(1040.0, 1050.0)]
    # epoch-aligned clock
    shifted = avail_series([1000, 1010], [1, 0], end=1020)
    assert AvailabilityTraceRevocation(shifted, origin=0.0, notice_s=0).active_intervals(0, 1000, 1020) == [
        (1000.0, 1010.0)
    ]
    assert AvailabilityTraceRevocation(shifted, notice_s=0).active_intervals(0, 0, 20) == [(0.0, 10.0)]


def test_trace_validation_and_notice_from_cloud():
    with pytest.raises(InputError, match="availability"):
        AvailabilityTraceRevocation(PRICES)
    assert AvailabilityTraceRevocation(avail_series([0, 1], [1, 0], cloud="gcp")).notice_s == 30.0
    assert AvailabilityTraceRevocation(avail_series([0, 1], [1, 0], cloud="aws")).notice_s == 120.0
    assert AvailabilityTraceRevocation(avail_series([0, 1], [1, 0])).notice_s == 0.0
    with pytest.raises(InputError):
        AvailabilityTraceRevocation(avail_series([0.0], [1]), loop=True)  # zero duration


# ------------------------------------------------------------------------------ none / registry
def test_no_revocation():
    m = NoRevocation()
    assert triples(m.events(2, 0, 10)) == [(0.0, 0, "available"), (0.0, 1, "available")]
    assert not m.sample_iteration(np.ones(4, dtype=bool), np.random.default_rng(0)).any()


def test_registry():
    assert set(REVOCATION_MODELS) >= {"bid", "bernoulli", "lifetime", "trace", "none"}
    assert all(issubclass(c, RevocationModel) for c in REVOCATION_MODELS.values())
    assert isinstance(make_revocation_model("none"), NoRevocation)
    assert make_revocation_model("Bernoulli", q=0.2).q == 0.2
    assert isinstance(make_revocation_model("bid", prices=PRICES, bids=[1.0, 2.0]), BidRevocation)
    lt = make_revocation_model("lifetime", table=SimpleNamespace(lifetimes_s=np.array([5.0])), cap_s=3.0)
    assert isinstance(lt, LifetimeRevocation) and lt.cap_s == 3.0
    with pytest.raises(InputError, match=r"unknown revocation model 'spotty'; valid names are .*bernoulli.*bid"):
        make_revocation_model("spotty")
    with pytest.raises(InputError, match="valid parameters are q"):
        make_revocation_model("bernoulli", p=0.1)
    with pytest.raises(InputError, match="bad parameters"):
        make_revocation_model("bernoulli")
    with pytest.raises(InputError):
        make_revocation_model("bernoulli", q=3)


# ------------------------------------------------------------------------------ property test
def check_alternation(events, workers, t0, t1):
    ts = [e.t for e in events]
    assert ts == sorted(ts)
    up = [False] * workers
    pending = [False] * workers
    last_up = [t0] * workers
    for e in events:
        assert t0 <= e.t < t1
        assert 0 <= e.worker < workers
        w = e.worker
        if e.kind == "available":
            assert not up[w], f"available while active: {e}"
            up[w], last_up[w] = True, e.t
        elif e.kind == "notice":
            assert up[w] and not pending[w], f"notice while not active or twice: {e}"
            assert e.t >= last_up[w]
            pending[w] = True
        else:
            assert up[w] and pending[w], f"revoke without notice or while revoked: {e}"
            up[w] = pending[w] = False
    # a notice is always followed by its revoke inside the window
    assert not any(pending)


_times = st.lists(st.integers(0, 200), min_size=1, max_size=12, unique=True).map(sorted)
_notice = st.sampled_from([0.0, 1.0, 7.5, 30.0, 120.0])


@st.composite
def models(draw):
    kind = draw(st.sampled_from(["bid", "bernoulli", "lifetime", "exponential", "trace", "none"]))
    notice = draw(_notice)
    if kind == "bid":
        times = draw(_times)
        vals = draw(st.lists(st.sampled_from([0.5, 1.0, 1.5, 2.0, 3.0]), min_size=len(times), max_size=len(times)))
        bids = draw(st.lists(st.sampled_from([0.5, 1.0, 1.5, 2.0, 3.0]), min_size=1, max_size=4))
        m = BidRevocation(price_series(times, vals, end=times[-1] + 10), tuple(bids), draw(st.booleans()), notice)
        return m, len(bids)
    if kind == "bernoulli":
        q = draw(st.floats(0, 1))
        rejoin = draw(st.one_of(st.none(), st.floats(0, 1)))
        return BernoulliRevocation(q, rejoin, iteration_s=draw(st.floats(0.5, 50)), notice_s=notice), 4
    if kind == "lifetime":
        lts = draw(st.lists(st.floats(0.1, 300), min_size=1, max_size=10))
        return (
            LifetimeRevocation(
                np.array(lts),
                cap_s=draw(st.floats(1, 400)),
                restart_delay_s=draw(st.floats(0, 50)),
                restart=draw(st.sampled_from(["fixed", "exponential"])),
                notice_s=notice,
            ),
            3,
        )
    if kind == "exponential":
        return ExponentialLifetime(draw(st.floats(1, 200)), draw(st.floats(0, 50)), notice_s=notice), 3
    if kind == "trace":
        times = draw(_times)
        vals = draw(st.lists(st.integers(0, 4), min_size=len(times), max_size=len(times)))
        s = avail_series(times, vals, end=times[-1] + draw(st.integers(1, 30)))
        return (
            AvailabilityTraceRevocation(s, offset_s=draw(st.floats(-100, 300)), loop=draw(st.booleans()), notice_s=notice),
            5,
        )
    return NoRevocation(), 2


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(models(), st.floats(-50, 100), st.floats(1, 500), st.integers(0, 2**32 - 1))
def test_property_events_alternate_and_are_sorted(model_and_n, t0, span, seed):
    model, n = model_and_n
    t1 = t0 + span
    events = model.events(n, t0, t1, np.random.default_rng(seed))
    check_alternation(events, n, t0, t1)
    # events and active_intervals describe the same history
    for w in range(n):
        ivs = model.active_intervals(w, t0, t1, np.random.default_rng(seed))
        assert [e.t for e in events if e.worker == w and e.kind == "available"] == [s for s, _ in ivs]
        assert [e.t for e in events if e.worker == w and e.kind == "revoke"] == [e for _, e in ivs if e < t1]
        assert all(t0 <= s < e <= t1 for s, e in ivs)
