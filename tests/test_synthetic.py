"""Synthetic market generators: statistics against theory, reproducibility, Markov fitting."""

from __future__ import annotations

import math

import numpy as np
import pytest

from spotwise.market.synthetic import (
    MarkovRegimeModel,
    TruncatedGaussianPrice,
    UniformPrice,
    alternating_availability,
    iid_price_series,
)


# ------------------------------------------------------------------------------------------ i.i.d.
def test_uniform_paper_defaults_statistics() -> None:
    dist = UniformPrice()  # paper 000 Sec. VI: uniform on [0.2, 1]
    s = iid_price_series(dist, duration=4.0 * 200_000, delta=4.0, seed=1)
    assert len(s) == 200_000 and s.kind == "price"
    assert np.all(np.diff(s.times) == 4.0) and s.end == s.start + 800_000
    assert dist.mean() == pytest.approx(0.6) and dist.var() == pytest.approx(0.8**2 / 12)
    assert s.values.mean() == pytest.approx(0.6, abs=0.005)
    assert s.values.var() == pytest.approx(dist.var(), rel=0.02)
    assert 0.2 <= s.min() and s.max() <= 1.0
    for q in (0.1, 0.5, 0.9):
        assert np.quantile(s.values, q) == pytest.approx(dist.ppf(q), abs=0.01)
        assert s.cdf(dist.ppf(q)) == pytest.approx(q, abs=0.01)  # time-weighted CDF agrees too


def test_truncated_gaussian_statistics() -> None:
    dist = TruncatedGaussianPrice()  # mean 0.6, variance 0.175, truncated to p >= 0
    s = dist.series(duration=4.0 * 200_000, seed=2)
    assert np.all(s.values >= 0)
    # truncation at 0 raises the mean above the Gaussian's 0.6
    assert dist.mean() > 0.6
    assert s.values.mean() == pytest.approx(dist.mean(), abs=0.005)
    assert s.values.var() == pytest.approx(dist.var(), rel=0.02)
    for q in (0.05, 0.5, 0.95):
        assert np.quantile(s.values, q) == pytest.approx(dist.ppf(q), abs=0.01)
    assert dist.cdf(0.0) == 0.0
    bounded = TruncatedGaussianPrice(0.6, 0.175, low=0.2, high=1.0)
    b = bounded.sample(50_000, seed=3)
    assert b.min() >= 0.2 and b.max() <= 1.0
    assert b.mean() == pytest.approx(bounded.mean(), abs=0.01)


def test_iid_reproducible_and_spacing() -> None:
    a = iid_price_series(UniformPrice(), 1000.0, delta=7.0, seed=42, start=100.0)
    b = iid_price_series(UniformPrice(), 1000.0, delta=7.0, seed=42, start=100.0)
    c = iid_price_series(UniformPrice(), 1000.0, delta=7.0, seed=43, start=100.0)
    assert np.array_equal(a.values, b.values) and not np.array_equal(a.values, c.values)
    assert len(a) == math.ceil(1000 / 7) and a.times[0] == 100.0 and a.end == 1100.0
    assert np.allclose(np.diff(a.times), 7.0)
    gen = np.random.default_rng(5)
    assert len(iid_price_series(UniformPrice(), 8.0, seed=gen)) == 2
    with pytest.raises(ValueError):
        iid_price_series(UniformPrice(), -1.0)
    with pytest.raises(ValueError):
        UniformPrice(1.0, 0.5)


# ------------------------------------------------------------------------------------------ Markov
def _model(**kw) -> MarkovRegimeModel:
    base = dict(
        levels=[0.3, 0.6, 1.2],
        jitter=[0.01, 0.02, 0.03],
        holding_s=[3600.0, 1800.0, 900.0],
        transition=[[0, 0.7, 0.3], [0.5, 0, 0.5], [0.8, 0.2, 0]],
    )
    base.update(kw)
    return MarkovRegimeModel(**base)


def test_markov_reproducible_and_time_fractions() -> None:
    m = _model()
    a, b = m.generate(86400 * 5, seed=7), m.generate(86400 * 5, seed=7)
    assert np.array_equal(a.times, b.times) and np.array_equal(a.values, b.values)
    assert not np.array_equal(a.values, m.generate(86400 * 5, seed=8).values)
    long = m.generate(3600 * 20_000, seed=9)
    regimes = long.meta.extra["regimes"]
    w = long.weights()
    frac = np.bincount(regimes, weights=w, minlength=3) / w.sum()
    assert frac == pytest.approx(m.time_fractions(), abs=0.02)
    assert long.mean() == pytest.approx(m.mean_price(), rel=0.02)


def test_markov_fit_recovers_model() -> None:
    truth = _model()
    s = truth.generate(3600 * 20_000, seed=11)  # about 30 000 regime visits
    fit = MarkovRegimeModel.fit(s, k=3, method="kmeans")
    assert fit.k == 3
    assert fit.levels == pytest.approx(truth.levels, rel=0.02)
    assert fit.jitter == pytest.approx(truth.jitter, rel=0.1)
    assert fit.holding_s == pytest.approx(truth.holding_s, rel=0.08)
    assert fit.transition == pytest.approx(truth.transition, abs=0.03)
    assert fit.jitter_interval_s is None  # one price per visit
    # the fitted model regenerates a market with the same long-run mean
    assert fit.generate(3600 * 5000, seed=1).mean() == pytest.approx(s.mean(), rel=0.05)


def test_markov_fit_quantile_binning() -> None:
    truth = _model(jitter_interval_s=300.0)
    s = truth.generate(3600 * 5000, seed=12)
    fit = MarkovRegimeModel.fit(s, k=3, method="quantile")
    # quantile bins hold about equal time each (not the true regimes), levels ordered
    assert fit.k == 3 and np.all(np.diff(fit.levels) > 0)
    assert fit.time_fractions() == pytest.approx([1 / 3] * 3, abs=0.1)
    assert fit.jitter_interval_s == pytest.approx(300.0)
    assert fit.generate(3600 * 2000, seed=2).mean() == pytest.approx(s.mean(), rel=0.1)


def test_markov_fit_kmeans_with_jitter_interval() -> None:
    truth = _model(jitter_interval_s=120.0)
    s = truth.generate(3600 * 8000, seed=13)
    fit = MarkovRegimeModel.fit(s, k=3)
    assert fit.levels == pytest.approx(truth.levels, rel=0.02)
    assert fit.holding_s == pytest.approx(truth.holding_s, rel=0.1)
    assert fit.jitter_interval_s == pytest.approx(120.0)


def test_markov_availability() -> None:
    m = _model(availability=[1.0, 0.8, 0.1], jitter_interval_s=60.0)
    price, avail = m.generate_both(3600 * 5000, seed=21)
    assert avail.kind == "availability" and np.array_equal(price.times, avail.times)
    assert set(np.unique(avail.values)) <= {0.0, 1.0}
    expected = float(np.dot(m.time_fractions(), m.availability))
    assert avail.fraction_available() == pytest.approx(expected, abs=0.02)
    # cheap regimes are the available ones
    cheap = price.values < 0.45
    assert avail.values[cheap].mean() > 0.99 and avail.values[price.values > 1.0].mean() < 0.2
    # same seed -> same path for generate_availability
    assert np.array_equal(m.generate_availability(3600 * 100, seed=3).values, m.generate_both(3600 * 100, seed=3)[1].values)
    fit = MarkovRegimeModel.fit(price, k=3, availability=avail)
    assert fit.availability == pytest.approx(m.availability, abs=0.03)


def test_markov_fit_degenerate_inputs() -> None:
    flat = UniformPrice(0.5, 0.6).series(400.0, 4.0, seed=1)
    one = MarkovRegimeModel.fit(flat.slice(0.0, 4.0), k=3)  # a single point
    assert one.k == 1 and one.levels[0] == flat.values[0]
    assert one.generate(1000.0, seed=0).values.size >= 1


# ------------------------------------------------------------------------------------------ alternating
def test_alternating_availability_statistics() -> None:
    s = alternating_availability(3600 * 100_000, mtbf_s=3600.0, mttr_s=600.0, seed=5)
    assert s.kind == "availability" and set(np.unique(s.values)) == {0.0, 1.0}
    assert s.values[0] == 1.0 and np.all(np.diff(s.values) != 0)
    assert s.fraction_available() == pytest.approx(3600 / 4200, abs=0.01)
    assert s.mean_time_between_preemptions() == pytest.approx(3600.0, rel=0.03)
    down = s.weights()[s.values == 0][:-1]
    assert down.mean() == pytest.approx(600.0, rel=0.03)
    again = alternating_availability(3600 * 100_000, mtbf_s=3600.0, mttr_s=600.0, seed=5)
    assert np.array_equal(s.times, again.times)
    cap = alternating_availability(3600 * 10, 3600.0, 600.0, seed=1, start_up=False, capacity=4, start=50.0)
    assert cap.values[0] == 0 and cap.max() == 4 and cap.start == 50.0 and cap.end == 50.0 + 36000
