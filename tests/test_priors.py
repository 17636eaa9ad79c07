"""Measured loss-curve priors of the built-in GPU workloads (spotwise.planner.estimate.priors; issue 42 item 1).

A plan of a GPU job never trains its model on this CPU: its loss curve is the workload's shipped prior
(measured once with tools/measure_priors.py, the pilot's own code), and the plan says so and where the
job differs from the measured configuration.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from spotwise.config import load_spec, spec_from_dict
from spotwise.planner.estimate.pilot_training import GPU_WORKLOADS
from spotwise.planner.estimate.priors import differences, load_prior, model_params

ROOT = Path(__file__).resolve().parents[1]
#: the configurations the shipped curves were measured at (their files say the same command)
MEASURED = {"resnet18-cifar": ROOT / "examples" / "resnet18-v100.yaml", "gpt-bytes": ROOT / "tools" / "gpt-bytes-prior.yaml"}

pytestmark = pytest.mark.timeout(240)


@pytest.mark.parametrize("name", GPU_WORKLOADS)
def test_each_gpu_workload_ships_a_measured_curve_that_learns(name: str) -> None:
    prior = load_prior(name)
    assert prior is not None, f"no shipped prior for {name}: run tools/measure_priors.py"
    spec = load_spec(MEASURED[name])
    assert prior.params == model_params(spec.workload) and differences(prior, spec) == []
    assert str(MEASURED[name].relative_to(ROOT)) in prior.measured["command"]
    assert len(prior.losses) >= 100
    first, last = np.mean(prior.losses[:10]), np.mean(prior.losses[-10:])
    assert last < 0.9 * first, (first, last)


@pytest.mark.parametrize("name,steps", [pytest.param("gpt-bytes", 2, marks=pytest.mark.extended), ("resnet18-cifar", 1)])
def test_the_shipped_curve_is_what_the_pilot_code_records(name: str, steps: int) -> None:
    """The first steps of the measured configuration, run again with the pilot's recipe_steps, give the
    shipped losses (the curve is a measurement, not a made-up shape)."""
    import torch

    from spotwise.control.sampler import EpochSampler
    from spotwise.planner.estimate.pilot_training import recipe_steps
    from spotwise.workloads.registry import make_workload

    prior = load_prior(name)
    assert prior is not None
    spec = load_spec(MEASURED[name])
    wl = spec.workload
    workload = make_workload(wl, spec.seed)
    model = workload.build_model()
    model.train()
    losses = np.empty(steps)
    recipe_steps(torch, spec, workload, model, EpochSampler(len(workload.train), spec.seed),
                 int(spec.cluster.workers) * int(wl.batch_size), float(wl.lr), losses, spec.seed)
    np.testing.assert_allclose(losses, prior.losses[:steps], rtol=2e-4)


def _gpu_spec(**workload: Any) -> Any:
    return spec_from_dict({"name": "r18", "workload": {"name": "resnet18-cifar", "batch_size": 128, **workload},
                           "target": {"hours": 2}, "deadline": "6h",
                           "cluster": {"accelerators": "V100:1", "workers": 4, "region": "us-east-1"}})


def test_a_gpu_job_is_planned_from_its_prior_and_the_plan_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    import spotwise.planner.estimate.pilot_training as pt
    from spotwise.planner.plan.inputs import error_model_for
    from spotwise.workloads.device import cuda_available

    if cuda_available():
        pytest.skip("this machine has CUDA: a GPU workload's pilot runs here")

    def no_training(*a: Any, **k: Any) -> None:
        raise AssertionError("the plan trained a GPU model on the CPU")

    monkeypatch.setattr(pt, "recipe_steps", no_training)
    monkeypatch.setattr(pt, "sgd_steps", no_training)
    model, g_star, measured, assumed, source, problems = error_model_for(_gpu_spec(), None, 200)
    # its Thm 1 fit is used where it passes the pilot's reliability checks, else the assumed model with the
    # prior's measured initial gap: either way the curve is the prior's, and the notes say so
    assert source in ("prior", "assumed") and g_star == 0.0 and (source == "prior") == (problems == ())
    assert any("shipped prior" in m and "not your job's" in m for m in measured), measured
    said = next(a for a in assumed if "PRIOR" in a)
    assert "your job is the measured configuration" in said and "--pilot" in said
    prior = load_prior("resnet18-cifar")
    assert prior is not None
    assert model.G1 == pytest.approx(np.mean(prior.losses[:1]), rel=0.5)  # the measured initial loss, not G1 = 1
    # another job: the same prior, and each difference named
    _, _, _, assumed2, source2, _ = error_model_for(_gpu_spec(lr=0.05, params={"width": 32}, precision="bf16"), None, 200)
    said2 = next(a for a in assumed2 if "PRIOR" in a)
    assert source2 == source
    for part in ("width 32 (prior 64)", "lr 0.05 (prior 0.1)", "precision bf16 (prior fp32)"):
        assert part in said2, said2


def test_differences_name_the_global_batch_and_the_data() -> None:
    prior = load_prior("resnet18-cifar")
    assert prior is not None
    spec = spec_from_dict({"name": "r18", "workload": {"name": "resnet18-cifar", "batch_size": 64},
                           "target": {"hours": 2}, "cluster": {"accelerators": "V100:1", "workers": 8,
                                                                "region": "us-east-1"}})
    diff = differences(prior, spec)
    assert not any("global batch" in d for d in diff), diff  # 8 x 64: the measured global batch of 512
    spec = spec_from_dict({"name": "r18", "workload": {"name": "resnet18-cifar", "batch_size": 64},
                           "target": {"hours": 2}, "cluster": {"accelerators": "V100:1", "workers": 2,
                                                                "region": "us-east-1"}})
    assert any("global batch 2 x 64 = 128 (prior 512)" in d for d in differences(prior, spec))


def test_a_workload_without_a_prior_keeps_the_stated_assumption(monkeypatch: pytest.MonkeyPatch) -> None:
    import spotwise.planner.estimate.priors as pr
    from spotwise.planner.plan.inputs import error_model_for
    from spotwise.workloads.device import cuda_available

    if cuda_available():
        pytest.skip("this machine has CUDA: a GPU workload's pilot runs here")
    monkeypatch.setattr(pr, "load_prior", lambda name: None)
    _, _, measured, assumed, source, _ = error_model_for(_gpu_spec(), None, 200)
    assert source == "assumed" and not measured
    assert any("no pilot" in a and "assumed error model" in a for a in assumed)
    assert load_prior("mlp-digits") is None and load_prior("../../etc/passwd") is None
