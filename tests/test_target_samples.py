"""Issue 41 item 4: ``target.samples`` -- the job's length in committed samples, so revocations do
not shorten training or cut the learning-rate schedule.

A step with fewer members commits fewer samples: a job counted in steps (``target.iterations``)
trains less data than planned when workers are revoked and its cosine schedule (counted in
samples) never reaches its end.  Counted in samples, the run goes on until every sample is
committed (overshooting by less than one step) and the schedule ends where it should.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from _specs import spec_with

from spotwise.capacity.faults import ScriptedRevocation, outage
from spotwise.assemble import build_controller
from spotwise.errors import InputError
from spotwise.events import read_events
from spotwise.market.world import build_market
from spotwise.planes.ps.compute import LocalCompute
from spotwise.planes.ps.worker import worker_args_for
from spotwise.training.recipe import recipe_of

pytestmark = pytest.mark.timeout(120)

BASE: dict[str, Any] = {
    "name": "samples",
    "seed": 3,
    "workload": {"name": "mlp-digits", "batch_size": 8, "lr": 0.05, "eval_every": 1000,
                 "optimizer": {"name": "AdamW", "weight_decay": 0.01},
                 "schedule": {"decay": "cosine", "warmup": 16}},
    "target": {"samples": 960},
    "cluster": {"instance_type": "c5.xlarge", "workers": 4, "coordinator_instance": "c5.large"},
    "market": {"synthetic": {"kind": "constant", "price": 0.07}},
    "outputs": {"checkpoint_every": 0, "plots": False},
}


@pytest.fixture(autouse=True)
def no_ray(ray_unimportable: None) -> None:
    """In-process workers: no Ray needed for the controller's arithmetic."""


def _run(spec, out: Path, revocation=None):  # type: ignore[no-untyped-def]
    market = build_market(spec, horizon_s=7 * 24 * 3600.0)
    if revocation is not None:
        market = dataclasses.replace(market, revocation=revocation)
    coord = build_controller(spec, out, market=market, compute=LocalCompute(worker_args_for(spec)))
    return coord, coord.run()


def test_samples_is_the_jobs_length_and_the_schedules() -> None:
    spec = spec_with(BASE)
    assert spec.samples_per_step() == 32
    assert spec.planned_samples() == 960
    assert spec.expected_iterations() == 30  # 960 / (4 workers x 8)
    assert recipe_of(spec.workload, spec.planned_samples()).schedule.total == 960
    odd = spec_with(BASE, target={"samples": 961})
    assert odd.expected_iterations() == 31  # rounded up


@pytest.mark.parametrize(("target", "match"), [
    ({"samples": 100, "iterations": 10}, "both give the job's length"),
    ({"samples": 0}, "samples"),
    ({"samples": -5}, "samples"),
    ({"samples": 1.5}, "samples"),
])
def test_bad_sample_targets_are_refused_at_load(target: dict[str, Any], match: str) -> None:
    with pytest.raises(InputError, match=match):
        spec_with(BASE, target=target)


def test_a_schedule_longer_than_the_sample_target_is_refused() -> None:
    with pytest.raises(InputError, match="schedule spans 2,000 samples but the job commits 960 .target.samples."):
        spec_with(BASE, workload__schedule={"decay": "cosine", "total": 2000})


def test_revocations_do_not_shorten_a_job_counted_in_samples(tmp_path: Path) -> None:
    """Three of four workers out for a while: counted in steps the job trains ~20% fewer samples
    and its cosine ends early; counted in samples it trains them all and the schedule ends at 0."""
    rev = lambda: ScriptedRevocation((outage(4, 14, [0, 1, 2]),))  # noqa: E731
    steps_spec = spec_with(BASE, target={"iterations": 30})
    c_steps, s_steps = _run(steps_spec, tmp_path / "steps", rev())
    samples_spec = spec_with(BASE)
    c_samp, s_samp = _run(samples_spec, tmp_path / "samples", rev())
    assert s_steps.status == s_samp.status == "completed"
    assert c_steps.counters.samples < 960 * 0.9, "the revocations thinned the step-counted job"
    # every planned sample committed, overshooting by less than one full step
    assert 960 <= c_samp.counters.samples < 960 + 32
    assert s_samp.steps > 30
    steps = list(read_events(tmp_path / "samples" / "events.jsonl", kinds=["step"]))
    assert sum(int(e["samples"]) for e in steps) == c_samp.counters.samples
    sched = recipe_of(samples_spec.workload, samples_spec.planned_samples()).schedule
    assert sched is not None
    # the last step ran at the schedule's tail (the lr of the samples committed before it)
    before_last = c_samp.counters.samples - int(steps[-1]["samples"])
    assert steps[-1]["lr"] == pytest.approx(sched.lr(0.05, before_last), rel=1e-6)
    assert sched.lr(0.05, c_samp.counters.samples) == pytest.approx(0.0, abs=1e-12)
    step_lrs = list(read_events(tmp_path / "steps" / "events.jsonl", kinds=["step"]))
    assert step_lrs[-1]["lr"] > 10 * steps[-1]["lr"], "the step-counted job's schedule was cut short"


def test_policies_see_the_steps_the_samples_still_take(tmp_path: Path) -> None:
    from spotwise.control.observation import target_iterations

    spec = spec_with(BASE)
    coord, _ = _run(spec, tmp_path / "r")
    # the job is over: the steps taken, nothing left
    assert target_iterations(coord) == coord.step
    coord.counters.samples = 0
    assert target_iterations(coord) == coord.step + 30


def test_epochs_are_the_training_sets_size_times_passes(tmp_path: Path) -> None:
    """target.epochs (issue 41 item 4): samples = epochs x the training set, known once the workload
    is built; the schedule then spans them, and a run commits them all."""
    from spotwise.config import resolve_epochs
    from spotwise.workloads.registry import make_workload

    spec = spec_with(BASE, target={"epochs": 0.5})
    assert spec.planned_samples() is None, "not known before the workload is built"
    n = len(make_workload(spec.workload, spec.seed).train)
    resolve_epochs(spec)
    assert spec.target_samples() == -(-n // 2) and spec.expected_iterations() == -(-(-(-n // 2)) // 32)
    assert recipe_of(spec.workload, spec.planned_samples()).schedule.total == spec.target_samples()
    assert "_n_train" not in str(spec.to_dict()), "never written to spec.json"
    coord, summary = _run(spec_with(BASE, target={"epochs": 0.5}), tmp_path / "run")
    assert summary.status == "completed" and -(-n // 2) <= coord.counters.samples < -(-n // 2) + 32
    with pytest.raises(InputError, match="target.samples and target.epochs"):
        spec_with(BASE, target={"samples": 10, "epochs": 1})
    with pytest.raises(InputError, match="positive number of passes"):
        spec_with(BASE, target={"epochs": -1})


def test_tokens_are_samples_of_the_workloads_sequence_length(tmp_path: Path) -> None:
    """target.tokens (issue 41 item 4): samples = tokens / a sample's tokens (gpt-bytes: its block_size
    next-byte targets), rounded up; a run commits them all and the schedule spans them; a workload
    that does not say its tokens per sample exits 2 naming target.tokens."""
    from spotwise.config import resolve_epochs

    gpt = {**BASE, "workload": {"name": "gpt-bytes", "batch_size": 4, "lr": 0.001, "eval_every": 1000,
                                "params": {"n_layer": 1, "n_head": 2, "n_embd": 32, "block_size": 32, "max_eval": 32},
                                "optimizer": {"name": "AdamW"}, "schedule": {"decay": "cosine", "warmup": 8}},
           "cluster": {"instance_type": "c5.xlarge", "workers": 2, "coordinator_instance": "c5.large"}}
    spec = spec_with(gpt, target={"tokens": 3000})
    assert spec.planned_samples() is None, "not known before the workload is built"
    resolve_epochs(spec)
    assert spec.target_samples() == 94 and spec.expected_iterations() == 12  # ceil(3000 / 32), ceil(94 / 8)
    assert recipe_of(spec.workload, spec.planned_samples()).schedule.total == 94
    assert "_tokens_per_sample" not in str(spec.to_dict())
    coord, summary = _run(spec_with(gpt, target={"tokens": 3000}), tmp_path / "run")
    assert summary.status == "completed" and 94 <= coord.counters.samples < 94 + 8
    with pytest.raises(InputError, match="target.samples and target.tokens"):
        spec_with(gpt, target={"samples": 10, "tokens": 100})
    with pytest.raises(InputError, match="positive number of tokens"):
        spec_with(gpt, target={"tokens": 0})
    digits = spec_with(BASE, target={"tokens": 1000})
    with pytest.raises(InputError, match="does not say how many tokens a sample holds") as e:
        resolve_epochs(digits)
    assert e.value.where.endswith("target.tokens")
