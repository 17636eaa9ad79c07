"""StepSeries: time-weighted statistics, CDF/quantile, integral, slicing, resampling, alignment."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spotwise.errors import InputError
from spotwise.market.series import SeriesMeta, StepSeries, align, iso8601

META = SeriesMeta(id="p", kind="price")


def s(times, values, end=None) -> StepSeries:
    return StepSeries.from_points(times, values, META, end=end)


def test_time_weighted_stats_by_hand() -> None:
    # 0.5 for 10 s, 1.0 for 30 s, 0.2 for 60 s -> mean = (5 + 30 + 12) / 100 = 0.47
    x = s([0, 10, 40], [0.5, 1.0, 0.2], end=100)
    assert x.mean() == pytest.approx(0.47)
    assert (x.min(), x.max()) == (0.2, 1.0)
    var = (10 * (0.5 - 0.47) ** 2 + 30 * (1.0 - 0.47) ** 2 + 60 * (0.2 - 0.47) ** 2) / 100
    assert x.std() == pytest.approx(np.sqrt(var))
    assert x.integral(5, 50) == pytest.approx(5 * 0.5 + 30 * 1.0 + 10 * 0.2)
    assert x.value_at(10) == 1.0 and x.value_at(9.999) == 0.5 and x.value_at(-5) == 0.5 and x.value_at(500) == 0.2


def test_cdf_and_quantile_are_time_weighted_inverses() -> None:
    x = s([0, 10, 40], [0.5, 1.0, 0.2], end=100)
    # P(price <= 0.2) = 0.6, P(<= 0.5) = 0.7, P(<= 1.0) = 1
    assert x.cdf(0.1) == 0.0
    assert x.cdf(0.2) == pytest.approx(0.6)
    assert x.cdf(0.7) == pytest.approx(0.7)
    assert x.cdf(1.0) == pytest.approx(1.0)
    assert x.quantile(0.5) == 0.2
    assert x.quantile(0.6) == 0.2
    assert x.quantile(0.65) == 0.5
    assert x.quantile(0.71) == 1.0
    assert x.quantile(0.0) == 0.2 and x.quantile(1.0) == 1.0
    with pytest.raises(ValueError):
        x.quantile(1.5)


def test_from_points_sorts_and_dedups() -> None:
    x = StepSeries.from_points([30, 10, 10, 20], [3.0, 1.0, 1.0, 2.0], META, end=40)
    assert list(x.times) == [10, 20, 30] and list(x.values) == [1, 2, 3]


@pytest.mark.parametrize(
    ("times", "values", "end", "msg"),
    [([], [], 0, "at least one point"), ([0, 0], [1, 2], 5, "strictly increasing"),
     ([0, 1], [1, -2], 5, "negative value"), ([0, 1], [1, np.nan], 5, "finite"), ([0, 10], [1, 1], 5, "before the last point")],
)
def test_invalid_series(times, values, end, msg) -> None:
    with pytest.raises(InputError, match=msg):
        StepSeries(np.array(times, float), np.array(values, float), end, META)


def test_availability_statistics() -> None:
    a = StepSeries.from_points([0, 100, 150, 400, 500], [1, 0, 1, 0, 1], SeriesMeta(id="a", kind="availability"), end=600)
    assert a.fraction_available() == pytest.approx((100 + 250 + 100) / 600)
    assert list(a.preemption_times()) == [100, 400]
    assert a.mean_time_between_preemptions() == pytest.approx(450 / 2)
    never = StepSeries.from_points([0], [1], SeriesMeta(id="b", kind="availability"), end=10)
    assert never.mean_time_between_preemptions() is None


def test_slice_resample_align() -> None:
    x = s([0, 10, 40], [0.5, 1.0, 0.2], end=100)
    sl = x.slice(5, 50)
    assert list(sl.times) == [5, 10, 40] and sl.end == 50 and sl.integral(5, 50) == pytest.approx(x.integral(5, 50))
    r = x.resample(20, how="mean")
    assert list(r.times) == [0, 20, 40, 60, 80]
    assert r.values[0] == pytest.approx((10 * 0.5 + 10 * 1.0) / 20)
    assert r.integral(0, 100) == pytest.approx(x.integral(0, 100))
    assert list(x.resample(20, how="last").values) == [0.5, 1.0, 0.2, 0.2, 0.2]
    y = s([5, 30], [2.0, 3.0], end=80)
    times, m, end = align([x, y])
    assert list(times) == [5, 10, 30, 40] and end == 80
    assert m[:, 0].tolist() == [0.5, 2.0] and m[:, 2].tolist() == [1.0, 3.0]
    with pytest.raises(InputError, match="do not overlap"):
        align([x.slice(0, 5), y])


def test_iso8601() -> None:
    assert iso8601(0) == "1970-01-01T00:00:00Z"
    assert iso8601(1582239297) == "2020-02-20T22:54:57Z"


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 10_000), st.floats(0, 100, allow_nan=False)), min_size=1, max_size=30),
       st.floats(0, 1))
def test_properties(points, q) -> None:
    t, v = zip(*points)
    x = StepSeries.from_points(list(t), list(v), META, end=max(t) + 7)
    assert x.min() - 1e-9 <= x.mean() <= x.max() + 1e-9
    # quantile is the left inverse of the CDF: F(F^-1(q)) >= q, and nothing smaller reaches q
    p = x.quantile(q)
    assert x.cdf(p) >= q - 1e-9
    smaller = x.values[x.values < p]
    if smaller.size:
        assert x.cdf(smaller.max()) < q + 1e-9
    assert x.integral(x.start, x.end) == pytest.approx(x.mean() * x.duration, rel=1e-9, abs=1e-9)
