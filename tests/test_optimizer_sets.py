"""Issue 41 item 3: several optimizers over parts of the model from the spec (Muon for the matrices,
AdamW for the rest), per-entry learning rates under one schedule, and their state in checkpoints."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from _specs import spec_with

from spotwise.assemble import build_controller
from spotwise.control.sampler import EpochSampler
from spotwise.errors import InputError
from spotwise.events import read_events
from spotwise.market.world import build_market
from spotwise.planes.ps.compute import LocalCompute
from spotwise.planes.ps.worker import worker_args_for
from spotwise.training.optimizers import MultiOptimizer
from spotwise.training.recipe import recipe_of
from spotwise.training.state import FlatModel
from spotwise.workloads.registry import make_workload

pytestmark = pytest.mark.timeout(180)

MUON_ADAMW = [{"name": "Muon", "params": "matrices", "lr": 0.02, "momentum": 0.95},
              {"name": "AdamW", "params": "rest", "lr": 3e-3, "weight_decay": 0.0}]
BASE: dict[str, Any] = {
    "name": "optsets", "seed": 3,
    "workload": {"name": "mlp-digits", "batch_size": 8, "lr": 0.01, "eval_every": 1000, "optimizer": MUON_ADAMW,
                 "schedule": {"decay": "cosine", "warmup": 16}},
    "target": {"iterations": 12},
    "cluster": {"instance_type": "c5.xlarge", "workers": 1, "coordinator_instance": "c5.large"},
    "market": {"synthetic": {"kind": "constant", "price": 0.07}},
    "outputs": {"checkpoint_every": 4, "plots": False},
}


@pytest.fixture(autouse=True)
def no_ray(ray_unimportable: None) -> None:
    """In-process workers."""


def run_local(spec, out: Path, **kw: Any):  # type: ignore[no-untyped-def]
    market = build_market(spec, horizon_s=7 * 24 * 3600.0)
    job = build_controller(spec, out, market=market, compute=LocalCompute(worker_args_for(spec)), **kw)
    return job, job.run()


def plain_loop(spec, steps: int) -> torch.nn.Module:
    """Plain PyTorch: Muon over the 2-D weights, AdamW over the rest, one LambdaLR per optimizer."""
    wl = make_workload(spec.workload, spec.seed)
    model = wl.build_model()
    mats = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    opts = [torch.optim.Muon(mats, lr=0.02, momentum=0.95), torch.optim.AdamW(rest, lr=3e-3, weight_decay=0.0)]
    sched = recipe_of(spec.workload, spec.planned_samples()).schedule
    base = spec.workload.lr
    scheds = [torch.optim.lr_scheduler.LambdaLR(o, lambda s: sched.lr(base, s * 8) / base) for o in opts]
    sampler = EpochSampler(len(wl.train), spec.seed)
    for _ in range(steps):
        block = sampler.reserve(8)
        for o in opts:
            o.zero_grad()
        wl.loss(model, wl.train.batch(block.indices)).backward()
        for o in opts:
            o.step()
        for s in scheds:
            s.step()
        sampler.commit(block)
    return model


def test_muon_for_the_matrices_and_adamw_for_the_rest_equal_a_plain_loop(tmp_path: Path) -> None:
    spec = spec_with(BASE)
    job, summary = run_local(spec, tmp_path / "run")
    assert summary.steps == 12
    opt = job.state.updater.optimizer
    assert isinstance(opt, MultiOptimizer) and [type(o).__name__ for o in opt.optimizers] == ["Muon", "AdamW"]
    want = FlatModel(plain_loop(spec, 12)).flat.numpy()
    assert np.max(np.abs(job.params - want)) < 1e-5
    # one schedule, each entry's own base: the ratio of the two rates stays 0.02 / 3e-3
    lrs = [g["lr"] for g in opt.param_groups]
    assert lrs[0] / lrs[-1] == pytest.approx(0.02 / 3e-3)
    steps = list(read_events(tmp_path / "run" / "events.jsonl", kinds=["step"]))
    assert len(steps) == 12


def test_a_resumed_run_continues_both_optimizers_exactly(tmp_path: Path) -> None:
    spec = spec_with(BASE)
    first, s1 = run_local(spec, tmp_path / "run", stop_after_steps=6)
    assert s1.status == "stopped"
    again, s2 = run_local(spec, tmp_path / "run", resume=True)
    straight, _ = run_local(spec, tmp_path / "straight")
    assert s2.steps == 12 and np.max(np.abs(again.params - straight.params)) < 1e-6
    ck = torch.load(sorted((tmp_path / "run" / "checkpoints").glob("step-*.pt"))[-1], weights_only=True)
    assert len(ck["train_extra"]["optimizer"]["optimizers"]) == 2


@pytest.mark.parametrize(("optimizer", "match"), [
    ([{"name": "AdamW"}], "says no params"),
    ([{"name": "AdamW", "params": "rest"}, {"name": "SGD", "params": "matrices"}], "must be the last entry"),
    ([{"name": "AdamW", "params": "vectors", "weight_decai": 0.1}], "did you mean 'weight_decay'"),
    ([], "empty list"),
])
def test_bad_optimizer_lists_are_refused_at_load(optimizer: Any, match: str) -> None:
    with pytest.raises(InputError, match=match):
        spec_with(BASE, workload__optimizer=optimizer)


@pytest.mark.parametrize(("optimizer", "match"), [
    ([{"name": "AdamW", "params": "matrices"}], "in no optimizer's params"),
    ([{"name": "AdamW", "params": "embeddings"}, {"name": "SGD", "params": "rest"}], "selects no trainable parameter"),
])
def test_an_optimizer_list_that_does_not_fit_the_model_says_so(tmp_path: Path, optimizer: Any, match: str) -> None:
    spec = spec_with(BASE, workload__optimizer=optimizer)
    with pytest.raises(InputError, match=match):
        run_local(spec, tmp_path / "run")
