"""Pilot fits: Thm 1 constants from losses, runtime model from durations (spotwise.planner.estimate.pilot)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from spotwise.config import spec_from_dict
from spotwise.errors import InputError
from spotwise.events import EventLog
from spotwise.planner.estimate.pilot import fit_error_model, fit_runtime, pilot_from_run, run_pilot, thm1_curve
from spotwise.theory.bounds import error_bound

pytestmark = pytest.mark.timeout(60)

BETA, A, F = 0.98, 2.0, 0.3


def _curve(n: int, noise: float, seed: int = 0, g_star: float = 0.0) -> np.ndarray:
    J = np.arange(n)
    rng = np.random.default_rng(seed)
    return g_star + A * BETA**J + F + rng.normal(0.0, noise, n)


@pytest.mark.parametrize("noise", [0.0, 0.02, 0.05])
@pytest.mark.parametrize("seed", [0, 1])
def test_recovers_known_constants(noise: float, seed: int) -> None:
    fit = fit_error_model(_curve(400, noise, seed), lr=0.1, workers=4)
    assert fit.beta == pytest.approx(BETA, rel=0.05)
    assert 1 - fit.beta == pytest.approx(1 - BETA, rel=0.05)  # the rate itself, not just beta
    assert fit.A == pytest.approx(A, rel=0.05)
    assert fit.F == pytest.approx(F, rel=0.05)
    assert fit.r2 > 0.95
    assert fit.n_points == 400


def test_recovers_with_outliers_and_g_star() -> None:
    y = _curve(400, 0.02, 3, g_star=0.5)
    y[::37] += 3.0  # occasional loss spikes
    fit = fit_error_model(y, lr=0.05, workers=8, g_star=0.5)
    assert fit.beta == pytest.approx(BETA, rel=0.05)
    assert fit.A == pytest.approx(A, rel=0.05)
    assert fit.F == pytest.approx(F, rel=0.05)
    assert fit.g_star == 0.5
    assert any("g_star" in n for n in fit.notes)


@pytest.mark.parametrize("workers", [1, 4, 16])
def test_round_trip_fit_errormodel_error_bound(workers: int) -> None:
    lr = 0.1
    fit = fit_error_model(_curve(300, 0.03, 5), lr=lr, workers=workers)
    m = fit.model
    # the mapping: alpha = lr, c = L = d = 1, mu = (1-beta)/alpha, M from the floor, G1 = A + F
    assert (m.alpha, m.c, m.L, m.d) == (lr, 1.0, 1.0, 1.0)
    assert m.beta == pytest.approx(fit.beta, rel=1e-12)
    assert m.mu == pytest.approx((1 - fit.beta) / lr, rel=1e-12)
    assert m.G1 == pytest.approx(fit.A + fit.F, rel=1e-12)
    assert m.M == pytest.approx(2 * m.c * m.mu * fit.F * workers / (m.alpha * m.L * m.d), rel=1e-12)
    assert m.floor(1.0 / workers) == pytest.approx(fit.F, rel=1e-12)
    J = np.arange(0, 600)
    np.testing.assert_allclose(error_bound(J, m, 1.0 / workers), thm1_curve(J, fit.beta, fit.A, fit.F), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(fit.curve(J) - fit.g_star, error_bound(J, m, 1.0 / workers), rtol=1e-10)
    # the floor scales as 1/workers (the paper's assumption)
    assert m.floor(0.5 / workers) == pytest.approx(fit.F / 2, rel=1e-12)
    assert any("c = 1 and L = 1 are assumed" in n for n in fit.notes)


def test_flat_and_noisy_inputs_do_not_crash() -> None:
    rng = np.random.default_rng(0)
    flat = fit_error_model(np.full(50, 1.3), lr=0.1, workers=2)
    assert flat.A == 0.0 and flat.F == pytest.approx(1.3) and 0 < flat.beta < 1
    assert any("flat" in n for n in flat.notes)
    noisy = fit_error_model(1.0 + rng.normal(0, 0.2, 80), lr=0.1, workers=2)
    assert 0 < noisy.beta < 1 and noisy.A >= 0 and noisy.F >= 0
    rising = fit_error_model(1.0 + 0.01 * np.arange(100), lr=0.1, workers=2)
    assert rising.A == 0.0 and any("flat" in n for n in rising.notes)
    heavy = fit_error_model(5.0 + rng.standard_cauchy(30), lr=0.1, workers=2)
    assert np.isfinite(heavy.beta) and heavy.model.G1 >= 0
    short = fit_error_model(_curve(10, 0.01), lr=0.1, workers=1)
    assert 0 < short.beta < 1
    with_nan = fit_error_model(np.r_[_curve(40, 0.01), [np.nan, np.inf]], lr=0.1, workers=1)
    assert with_nan.n_points == 40 and any("non-finite" in n for n in with_nan.notes)
    below = fit_error_model(_curve(60, 0.01), lr=0.1, workers=1, g_star=1.0)  # g_star above the floor
    assert below.F >= 0 and below.A >= 0


def test_too_few_points_is_an_input_error() -> None:
    with pytest.raises(InputError, match="at least 10 finite per-step losses.*got 9"):
        fit_error_model(np.linspace(2, 1, 9), lr=0.1, workers=1)
    with pytest.raises(InputError, match="got 5 .*5 non-finite"):
        fit_error_model(np.r_[np.linspace(2, 1, 5), [np.nan] * 5], lr=0.1, workers=1)
    with pytest.raises(InputError, match="learning rate"):
        fit_error_model(np.linspace(2, 1, 20), lr=0.0, workers=1)
    with pytest.raises(InputError, match="at least 10 durations"):
        fit_runtime(np.ones(3))


def test_runtime_exponential_samples_choose_exponential() -> None:
    rng = np.random.default_rng(1)
    x = 0.7 + rng.exponential(0.3, 800)
    fit = fit_runtime(x, delta=0.05)
    assert fit.kind == "exponential" and fit.model is fit.exponential
    assert fit.shift == pytest.approx(0.7, abs=0.01)
    assert fit.mean == pytest.approx(0.3, rel=0.1)
    assert fit.model.delta == pytest.approx(0.05 + fit.shift)
    assert fit.model.mean() == pytest.approx(fit.mean)
    assert fit.ks_pvalue >= 0.05
    assert any("chose exponential" in n for n in fit.notes)
    # E[R(1)] is the sample mean plus delta
    assert fit.model.expected(1) == pytest.approx(x.mean() + 0.05, rel=0.02)


def test_runtime_bimodal_samples_choose_empirical() -> None:
    rng = np.random.default_rng(2)
    x = np.r_[rng.normal(1.0, 0.05, 300), rng.normal(4.0, 0.1, 300)]
    fit = fit_runtime(x)
    assert fit.kind == "empirical" and fit.model is fit.empirical
    assert fit.ks_pvalue < 0.05
    assert any("rejected by KS" in n for n in fit.notes)
    assert fit.model.expected(1) == pytest.approx(x.mean(), rel=1e-9)


def test_runtime_constant_samples() -> None:
    fit = fit_runtime(np.full(20, 0.5))
    assert fit.kind == "empirical" and fit.model.expected(3) == pytest.approx(0.5)


def _spec(**cluster):
    return spec_from_dict({
        "name": "pilot", "seed": 3,
        "workload": {"name": "mlp-digits", "batch_size": 16, "lr": 0.1, "eval_every": 1000},
        "target": {"iterations": 30},
        "cluster": {"instance_type": "c5.xlarge", "workers": 4, "coordinator_instance": "c5.large", **cluster},
        "market": {"synthetic": {"kind": "constant", "price": 0.07}},
    })


def test_run_pilot_mlp_digits() -> None:
    err, rt = run_pilot(_spec(), steps=200)
    assert 0 < err.beta < 1 and err.A > 0
    assert err.r2 > 0.5
    J = np.arange(200)
    c = err.curve(J)
    assert np.all(np.diff(c) <= 0) and c[0] > c[-1]
    assert err.model.alpha == 0.1 and err.model.floor(1 / 4) == pytest.approx(err.F, rel=1e-9)
    assert any("in-process pilot" in n for n in err.notes)
    # straggler law 0.7 m + 0.3 m Exp(1) is a shifted exponential
    assert rt.kind == "exponential"
    assert rt.shift == pytest.approx(0.7 * rt.sample_mean, rel=0.05)
    assert rt.model.delta == pytest.approx(0.05 + rt.shift)
    assert any("modelled from the catalog, not measured" in n for n in rt.notes)
    # reproducible
    err2, _ = run_pilot(_spec(), steps=200)
    assert err2.beta == err.beta


def test_run_pilot_rejects_few_steps() -> None:
    with pytest.raises(InputError, match="at least 10 steps"):
        run_pilot(_spec(), steps=5)


def _write_run(out: Path, n: int = 150, workers: int = 4, delta: float = 0.05) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(4)
    T = [0.0]
    log = EventLog(out / "events.jsonl", clock=lambda: T[0], meta={"workers": workers})
    durs = 0.7 + rng.exponential(0.3, (n, workers)).max(axis=1) + delta
    losses = A * BETA ** np.arange(n) + F + rng.normal(0, 0.01, n)
    for j in range(n):
        idle = 0.0
        if j == 40:  # every worker gone for a while: idle time inside this step's duration
            idle = 100.0
            log.emit("idle", t=T[0], duration=idle)
        T[0] += durs[j] + idle
        log.emit("step", step=j + 1, loss=float(losses[j]), active=workers, lr=0.1, sync="full",
                 duration=float(durs[j] + idle), contributions=workers, retries=0)
    # a step logged with fewer workers is excluded from the runtime sample (other distribution)
    T[0] += 5.0
    log.emit("step", step=n + 1, loss=float(losses[-1]), active=2, lr=0.1, sync="full", duration=5.0,
             contributions=2, retries=0)
    log.close()
    return durs, losses


def test_pilot_from_run(tmp_path: Path) -> None:
    durs, _ = _write_run(tmp_path)
    err, rt = pilot_from_run(tmp_path)
    assert err.n_points == 151
    assert err.beta == pytest.approx(BETA, rel=0.05)
    assert err.model.alpha == 0.1
    assert err.workers == pytest.approx(1 / ((150 / 4 + 1 / 2) / 151))
    assert rt.unit == "step" and rt.active == 4
    assert rt.n_samples == 150  # the idle step kept (idle subtracted), the 2-worker step dropped
    assert rt.sample_mean == pytest.approx(durs.mean(), rel=1e-9)
    assert rt.model.expected(1) == pytest.approx(durs.mean(), rel=0.05)
    assert any("subtracted 100 s of idle" in n for n in rt.notes)
    assert any("max over active workers plus Delta" in n for n in rt.notes)


def test_pilot_from_run_without_steps(tmp_path: Path) -> None:
    EventLog(tmp_path / "events.jsonl").close()
    with pytest.raises(InputError, match="no step events"):
        pilot_from_run(tmp_path)


# ---------------------------------------------------------------- issue 42 item 1: a bounded pilot
def _gpu_spec() -> object:
    return spec_from_dict({"name": "r18", "workload": {"name": "resnet18-cifar", "batch_size": 128},
                           "target": {"hours": 2}, "deadline": "6h",
                           "cluster": {"accelerators": "V100:1", "workers": 4, "region": "us-east-1"}})


def test_a_gpu_workload_is_never_trained_on_this_cpu_and_the_plan_says_how_to_measure_it() -> None:
    from spotwise.planner.estimate.pilot import PilotSkipped
    from spotwise.planner.plan.inputs import error_model_for
    from spotwise.workloads.device import cuda_available

    if cuda_available():
        pytest.skip("this machine has CUDA: a GPU workload's pilot runs here")
    spec = _gpu_spec()
    with pytest.raises(PilotSkipped, match="no CUDA"):
        run_pilot(spec, steps=20)
    model, g_star, measured, assumed, source, problems = error_model_for(spec, None, 20)
    assert any("shipped PRIOR" in a for a in assumed) and g_star == 0.0  # its measured curve (tests/test_priors.py)
    assert any("no pilot" in a and "--pilot" in a for a in assumed), assumed


def test_a_pilot_keeps_to_its_time_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    """A pilot whose steps take 1 s (a patched clock) keeps the steps its budget holds -- and notes
    it --, and is not run at all when even 10 steps would not fit."""
    import itertools

    import spotwise.planner.estimate.pilot as pl
    import spotwise.planner.estimate.pilot_training as pt

    ticks = itertools.count()
    monkeypatch.setattr(pt.time, "perf_counter", lambda: float(next(ticks)))
    spec = _spec()
    fit, _ = run_pilot(spec, steps=100, budget_s=30.0)
    assert fit.n_points == 30 and any("cut to 30 of 100 steps" in n for n in fit.notes)
    with pytest.raises(pl.PilotSkipped, match="budget"):
        run_pilot(spec, steps=100, budget_s=5.0)
