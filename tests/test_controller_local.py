"""The job's control logic without Ray (issue 8, part 1): the coordinator on the in-process data plane.

Every test here makes ``import ray`` fail, so any Ray call left in the control path is an error.
The workers are the same :class:`GradientWorker` class the Ray actors run, computed in this
process by :class:`~spotwise.planes.ps.compute.LocalCompute`.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _specs import single_process_sgd, spec_with

from spotwise.events import read_events
from spotwise.market.world import build_market
from spotwise.planes.ps.compute import LocalCompute, WorkerLost
from spotwise.assemble import build_controller
from spotwise.planes.ps.worker import worker_args_for
from spotwise.capacity.faults import ScriptedRevocation, outage, random_outages
from spotwise.workloads.params import flat_params
from spotwise.workloads.registry import make_workload

pytestmark = pytest.mark.timeout(120)

BASE: dict[str, Any] = {
    "name": "local",
    "seed": 5,
    "workload": {"name": "mlp-digits", "batch_size": 8, "lr": 0.1, "eval_every": 1000},
    "target": {"iterations": 20},
    "cluster": {"instance_type": "c5.xlarge", "workers": 4, "coordinator_instance": "c5.large"},
    "market": {"synthetic": {"kind": "constant", "price": 0.07}},
    "outputs": {"checkpoint_every": 0, "plots": False},
}


@pytest.fixture(autouse=True)
def no_ray(ray_unimportable: None) -> None:
    """Every test here runs with ``import ray`` failing."""


def make_spec(**over: Any):
    return spec_with(BASE, **over)


def run_local(spec, out: Path, revocation=None):
    market = build_market(spec, horizon_s=7 * 24 * 3600.0)
    if revocation is not None:
        market = dataclasses.replace(market, revocation=revocation)
    compute = LocalCompute(worker_args_for(spec))
    coord = build_controller(spec, out, market=market, compute=compute)
    return coord, coord.run()


def test_ray_is_really_unavailable() -> None:
    with pytest.raises(ImportError):
        import ray  # noqa: F401


def test_full_sync_without_ray_equals_single_process_sgd(tmp_path: Path) -> None:
    spec = make_spec(target__iterations=15)
    coord, summary = run_local(spec, tmp_path / "run")
    assert summary.steps == 15 and summary.status == "completed"
    assert np.max(np.abs(coord.params - single_process_sgd(spec, 15, 4 * 8))) < 1e-5


@pytest.mark.parametrize(("sync", "n"), [("full", None), ("n-sync", 2), ("n-batch", 3), ("async", None)])
def test_every_sync_mode_survives_revocations_without_ray(tmp_path: Path, sync: str, n: int | None) -> None:
    over: dict[str, Any] = {"cluster__sync": sync, "target__iterations": 40}
    if n is not None:
        over["cluster__sync_n"] = n
    spec = make_spec(**over)
    rev = ScriptedRevocation((outage(3, 9, [0, 1, 2]), outage(12, 20, [0, 1, 2, 3]), outage(22, 24, [3])))
    coord, summary = run_local(spec, tmp_path / "run", revocation=rev)
    out = tmp_path / "run"
    assert summary.steps == 40 and summary.status == "completed"
    steps = [e["step"] for e in read_events(out / "events.jsonl", kinds=["step"])]
    assert steps == list(range(1, 41)), "every step committed exactly once, in order"
    assert summary.revocations == 3 + 4 + 1
    assert coord.compute.killed >= summary.revocations  # type: ignore[attr-defined]
    assert any(e["kind"] == "idle" for e in read_events(out / "events.jsonl")), "the whole fleet was out once"


def test_sampler_guarantee_under_random_revocations_without_ray(tmp_path: Path) -> None:
    """Within an epoch every sample is in exactly one committed step, whatever the revocations."""
    spec = make_spec(**{"target__iterations": 60, "cluster__workers": 6})
    rev = ScriptedRevocation(random_outages(6, horizon=80, count=10, seed=3, fraction=0.5, duration=(1, 8)))
    coord, summary = run_local(spec, tmp_path / "run", revocation=rev)
    assert summary.steps == 60 and summary.revocations > 3
    n_train = coord.state.n_train
    per_epoch = summary.extra["samples"]
    # 60 steps of at most 6 x 8 samples cross at most a few epochs; every full epoch holds each sample once
    assert coord.sampler.epoch >= 1 and per_epoch >= n_train
    assert coord.counters.samples == per_epoch


def test_a_killed_worker_result_is_lost() -> None:
    spec = make_spec()
    compute = LocalCompute(worker_args_for(spec))
    (w0, w1) = compute.warm_up(2)
    wl = make_workload(spec.workload, spec.seed)
    params = flat_params(wl.build_model()).detach().numpy()
    p0 = compute.submit(w0, compute.share(params), np.arange(8))
    p1 = compute.submit(w1, compute.share(params), np.arange(8, 16))
    compute.kill(w1)
    assert compute.gather({0: p0, 1: p1}) == {}, "one dead worker: the batch call reports nothing"
    grad, loss, n, _, notice, _ = compute.result(0, p0)
    assert n == 8 and grad.shape == params.shape and np.isfinite(loss) and notice is None
    with pytest.raises(WorkerLost) as err:
        compute.result(1, p1)
    assert err.value.worker == 1
