"""Issue 28: the training recipe (any torch optimizer, a schedule in samples, clipping, accumulation,
precision), the full training state (buffers, optimizer state) and what a user gets wrong.

Equivalence tolerances (fp32): one worker against a plain PyTorch loop with the same optimizer,
``LambdaLR`` schedule, ``clip_grad_norm_`` and batches: max |diff| < 1e-5 after 12 AdamW steps
(the same float operations in a different grouping); N workers against one process with the
global batch (what DDP computes): < 1e-5.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from _specs import spec_with

from spotwise.config import WorkloadSpec
from spotwise.assemble import build_controller
from spotwise.control.sampler import EpochSampler
from spotwise.errors import InputError
from spotwise.events import read_events
from spotwise.market.world import build_market
from spotwise.planes.ps.compute import LocalCompute
from spotwise.planes.ps.worker import worker_args_for
from spotwise.spec.load import build
from spotwise.training.recipe import LrSchedule, ScheduleSpec, recipe_of
from spotwise.training.state import FlatModel
from spotwise.workloads.registry import make_workload

pytestmark = pytest.mark.timeout(180)

USER_DIR = Path(__file__).with_name("user_workloads")

BASE: dict[str, Any] = {
    "name": "recipe",
    "seed": 3,
    "workload": {"name": "mlp-digits", "batch_size": 8, "lr": 0.01, "eval_every": 1000},
    "target": {"iterations": 12},
    "cluster": {"instance_type": "c5.xlarge", "workers": 1, "coordinator_instance": "c5.large"},
    "market": {"synthetic": {"kind": "constant", "price": 0.07}},
    "outputs": {"checkpoint_every": 0, "plots": False},
}

ADAMW = {"name": "AdamW", "lr": 3e-3, "weight_decay": 0.05, "betas": [0.9, 0.95]}


@pytest.fixture()
def user_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(USER_DIR))


def run_local(spec, out: Path, **kw: Any):
    market = build_market(spec, horizon_s=7 * 24 * 3600.0)
    job = build_controller(spec, out, market=market, compute=LocalCompute(worker_args_for(spec)), **kw)
    return job, job.run()


def reference(spec, steps: int, global_batch: int, clip: float | None = None) -> tuple[torch.nn.Module, list[float]]:
    """A plain PyTorch loop: the job's optimizer, its schedule as a ``LambdaLR`` (per step, the
    factor at ``step * global_batch`` samples), ``clip_grad_norm_``, the job's epoch sampler."""
    wl = make_workload(spec.workload, spec.seed)
    model = wl.build_model()
    opt_spec = spec.workload.optimizer_spec
    base = spec.workload.lr
    opt = getattr(torch.optim, opt_spec.name)(model.parameters(), lr=base, **opt_spec.kwargs)
    sched = recipe_of(spec.workload, spec.planned_samples()).schedule
    lam = (lambda s: 1.0) if sched is None else (lambda s: sched.lr(base, s * global_batch) / base)
    scheduler = torch.optim.lr_scheduler.LambdaLR(opt, lam)
    sampler = EpochSampler(len(wl.train), spec.seed)
    losses = []
    for _ in range(steps):
        block = sampler.reserve(global_batch)
        opt.zero_grad()
        loss = wl.loss(model, wl.train.batch(block.indices))
        loss.backward()
        losses.append(float(loss.detach()))
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        scheduler.step()
        sampler.commit(block)
    return model, losses


def flat_of(model: torch.nn.Module) -> np.ndarray:
    return FlatModel(model).flat.numpy().copy()


# ---------------------------------------------------------------- the spec
def test_optimizer_names_and_arguments_are_checked_at_load() -> None:
    ok = build(WorkloadSpec, {"name": "mlp-digits", "optimizer": dict(ADAMW)}, "workload")
    assert ok.lr == 3e-3 and ok.optimizer_spec.kwargs == {"weight_decay": 0.05, "betas": (0.9, 0.95)}
    with pytest.raises(InputError, match="did you mean 'AdamW'.*valid torch.optim names are .*SGD"):
        build(WorkloadSpec, {"name": "mlp-digits", "optimizer": {"name": "adamw"}}, "workload")
    with pytest.raises(InputError, match="did you mean 'weight_decay'"):
        build(WorkloadSpec, {"name": "mlp-digits", "optimizer": {"name": "AdamW", "weight_decai": 0.1}}, "workload")
    with pytest.raises(InputError, match="rejects these arguments.*beta"):
        build(WorkloadSpec, {"name": "mlp-digits", "optimizer": {"name": "AdamW", "betas": [2, 0]}}, "workload")
    with pytest.raises(InputError, match="malformed optimizer reference"):
        build(WorkloadSpec, {"name": "mlp-digits", "optimizer": {"name": "os.path:"}}, "workload")
    # a user class is only named at load: nothing is imported
    user = build(WorkloadSpec, {"name": "mlp-digits", "optimizer": {"name": "no_such_pkg_xyz:Opt", "foo": 1}}, "workload")
    assert user.optimizer_spec.name == "no_such_pkg_xyz:Opt"
    with pytest.raises(InputError, match="did you mean 'cosine'"):
        build(WorkloadSpec, {"name": "mlp-digits", "schedule": {"decay": "cosin"}}, "workload")
    with pytest.raises(InputError, match="step_every"):
        build(WorkloadSpec, {"name": "mlp-digits", "schedule": {"decay": "step"}}, "workload")


def test_job_level_recipe_errors_say_how_to_fix_them() -> None:
    with pytest.raises(InputError, match="schedule spans 1,000,000 samples but the job commits 96") as e:
        spec_with(BASE, workload__schedule={"decay": "cosine", "total": 1_000_000})
    assert "at most 96" in e.value.fix
    with pytest.raises(InputError, match="needs its length in samples"):
        spec_with(BASE, target={"loss": 0.1}, workload__schedule={"decay": "cosine"})
    with pytest.raises(InputError, match="fp16 needs CUDA"):
        spec_with(BASE, workload__precision="fp16", cluster__device="cpu")
    with pytest.raises(InputError, match="accumulate"):
        spec_with(BASE, workload__accumulate=16)


def test_the_schedule_is_a_function_of_committed_samples() -> None:
    s = ScheduleSpec(decay="cosine", warmup=100, min_lr=0.0).resolved(1100)
    assert s.lr(1.0, 0) == pytest.approx(1 / 101) and s.lr(1.0, 99) == pytest.approx(100 / 101)
    assert s.lr(1.0, 100) == pytest.approx(1.0) and s.lr(1.0, 600) == pytest.approx(0.5)
    assert s.lr(1.0, 1100) == pytest.approx(0.0, abs=1e-12) and s.lr(1.0, 5000) == pytest.approx(0.0, abs=1e-12)
    lin = LrSchedule("linear", 0, 1000, None, 0.1)
    assert lin.lr(2.0, 500) == pytest.approx(0.2 + 1.8 * 0.5)
    step = ScheduleSpec(decay="step", step_every=100, gamma=0.5).resolved(None)
    assert [step.lr(1.0, s) for s in (0, 99, 100, 250)] == [1.0, 1.0, 0.5, 0.25]
    # the lr-scaling policy / SetLearningRate change the base: the schedule multiplies it
    assert s.lr(3.0, 600) == pytest.approx(3 * s.lr(1.0, 600))


def test_paper_default_stays_plain_sgd() -> None:
    spec = spec_with(BASE)
    rec = recipe_of(spec.workload, spec.planned_samples())
    assert rec.plain_sgd and rec.optimizer is None and rec.schedule is None
    assert spec.workload.plain_sgd_recipe


# ---------------------------------------------------------------- equivalence
def test_one_worker_equals_a_plain_pytorch_loop_with_adamw_schedule_and_clipping(tmp_path: Path) -> None:
    spec = spec_with(BASE, workload__optimizer=dict(ADAMW), workload__grad_clip_norm=0.5,
                     workload__schedule={"decay": "cosine", "warmup": 16, "min_lr_fraction": 0.1})
    job, summary = run_local(spec, tmp_path / "run")
    assert summary.steps == 12
    model, losses = reference(spec, 12, 8, clip=0.5)
    assert np.max(np.abs(job.params - flat_of(model))) < 1e-5
    steps = read_events(tmp_path / "run" / "events.jsonl", kinds=["step"])
    assert [e["loss"] for e in steps] == pytest.approx(losses, rel=1e-5)
    sched = recipe_of(spec.workload, spec.planned_samples()).schedule
    assert [e["lr"] for e in steps] == pytest.approx([sched.lr(3e-3, 8 * i) for i in range(12)])
    # the optimizer state is the real one: AdamW's moments for every parameter, in the checkpoint too
    opt = job.state.updater.optimizer
    assert isinstance(opt, torch.optim.AdamW) and len(opt.state) == len(list(job.state.model.parameters()))


def test_n_workers_equal_one_process_with_the_global_batch_and_accumulation_changes_nothing(tmp_path: Path) -> None:
    spec = spec_with(BASE, cluster__workers=3, workload__optimizer={"name": "SGD", "lr": 0.05, "momentum": 0.9,
                                                                       "weight_decay": 5e-4},
                     workload__accumulate=4)
    job, summary = run_local(spec, tmp_path / "run")
    assert summary.steps == 12
    model, _ = reference(spec, 12, 24)
    assert np.max(np.abs(job.params - flat_of(model))) < 1e-5


def test_batchnorm_statistics_are_synced_checkpointed_and_exported(tmp_path: Path, user_path: None) -> None:
    """Buffers travel with the gradient and are averaged; the reported accuracy is that of the
    exported model.pt evaluated by plain PyTorch; checkpoints hold the model's and optimizer's state_dicts."""
    spec = spec_with(BASE, workload={"name": "bn_models:bn_cnn", "batch_size": 16, "eval_every": 1000,
                                     "optimizer": {"name": "SGD", "lr": 0.1, "momentum": 0.9}},
                     cluster__workers=2, target__iterations=40, outputs__checkpoint_every=20)
    out = tmp_path / "run"
    job, summary = run_local(spec, out)
    bn = job.state.model[1]
    assert int(bn.num_batches_tracked) == 40
    assert not torch.allclose(bn.running_mean, torch.zeros_like(bn.running_mean))
    assert summary.final_metric > 0.6, "BatchNorm statistics must be the trained ones"
    # plain PyTorch: the user's module, torch.load(weights_only=True), load_state_dict, eval
    import bn_models

    factory, _, _, test = bn_models.bn_cnn()
    model = factory()
    sd = torch.load(out / "model.pt", weights_only=True)
    assert "1.running_var" in sd and "1.num_batches_tracked" in sd
    model.load_state_dict(sd)
    model.eval()
    with torch.no_grad():
        x, y = test.tensors
        acc = float((model(x).argmax(1) == y).float().mean())
    assert acc == pytest.approx(summary.final_metric, abs=1e-6)
    ck = torch.load(sorted((out / "checkpoints").glob("step-*.pt"))[-1], weights_only=True)
    assert set(ck["model"]) == set(sd) and ck["train_extra"]["optimizer"]["state"]
    assert isinstance(ck["rng"]["torch"], torch.Tensor)


def test_a_resumed_run_continues_the_optimizer_exactly(tmp_path: Path) -> None:
    spec = spec_with(BASE, workload__optimizer=dict(ADAMW), outputs__checkpoint_every=4,
                     workload__schedule={"decay": "linear", "warmup": 8})
    out = tmp_path / "run"
    _, s1 = run_local(spec, out, stop_after_steps=6)
    assert s1.status == "stopped"
    again, s2 = run_local(spec, out, resume=True)
    assert s2.steps == 12
    straight, _ = run_local(spec, tmp_path / "straight")
    assert np.max(np.abs(again.params - straight.params)) < 1e-6, "optimizer moments and schedule position resumed"


# ---------------------------------------------------------------- what users get wrong
def test_a_loss_with_the_wrong_signature_or_shape_exits_2_with_the_contract(tmp_path: Path, user_path: None) -> None:
    (tmp_path / "badloss.py").write_text(
        "import torch\nfrom torch import nn\n"
        "def wl(seed=0):\n"
        "    ds = torch.utils.data.TensorDataset(torch.randn(32, 4), torch.randint(0, 2, (32,)))\n"
        "    def my_loss(logits, target):\n"
        "        return nn.functional.cross_entropy(logits, target)\n"
        "    return (lambda: nn.Linear(4, 2)), my_loss, ds\n")
    import sys

    sys.path.insert(0, str(tmp_path))
    try:
        with pytest.raises(InputError, match=r"takes the model's output first") as e:
            make_workload(build(WorkloadSpec, {"name": "badloss:wl"}, "workload"), 0)
        assert "loss(model, batch)" in e.value.fix and "docs/workloads.md" in e.value.fix
    finally:
        sys.path.remove(str(tmp_path))
    with pytest.raises(InputError, match=r"not a scalar"):
        make_workload(build(WorkloadSpec, {"name": "bn_models:vector_loss"}, "workload"), 0)


def test_a_nonfinite_loss_stops_with_exit_2_naming_the_step_after_a_checkpoint(tmp_path: Path) -> None:
    spec = spec_with(BASE, workload__lr=1e6, target__iterations=200)
    out = tmp_path / "run"
    with pytest.raises(InputError, match=r"at step (\d+): training diverged") as e:
        run_local(spec, out)
    assert "grad_clip_norm" in e.value.fix
    bad = int(__import__("re").search(r"at step (\d+)", str(e.value)).group(1))
    ck = [x for x in read_events(out / "events.jsonl", kinds=["checkpoint"])]
    assert ck and ck[-1]["why"] == "nonfinite" and ck[-1]["step"] == bad - 1
    steps = [x["step"] for x in read_events(out / "events.jsonl", kinds=["step"])]
    assert steps == list(range(1, bad)) and all(math.isfinite(x["loss"]) for x in
                                                 read_events(out / "events.jsonl", kinds=["step"]))


def test_fp16_loss_scaling_skips_an_overflowing_step_and_lowers_the_scale() -> None:
    """The collective members' fp16 path (torch's GradScaler: unscale_, step, update) on CPU tensors
    (the spec refuses fp16 without CUDA; the Updater itself is device-agnostic)."""
    from spotwise.training.recipe import OptimizerSpec, Recipe
    from spotwise.training.state import Updater

    fm = FlatModel(torch.nn.Linear(4, 2))
    up = Updater(fm, Recipe(OptimizerSpec("SGD", 0.1, {}), None, None, 1, "fp16"), 0.1)
    s0 = up.loss_scale
    assert s0 == 65536.0
    before = fm.flat.clone()
    bad = torch.full((fm.P,), float("inf"))
    assert up.apply(bad, 0.1, scaled=True) and torch.equal(fm.flat, before) and up.loss_scale == s0 / 2
    good = torch.ones(fm.P) * up.loss_scale  # a scaled gradient of ones
    up.apply(good, 0.1, scaled=True)
    assert torch.allclose(fm.param_vec, before[: fm.P] - 0.1) and up.skipped == 1
    assert up.state_dict()["scaler"]["scale"] == s0 / 2


def test_fp16_on_a_node_without_cuda_exits_2_before_training(tmp_path: Path) -> None:
    spec = spec_with(BASE, workload__precision="fp16")  # device auto: allowed at load, refused by the worker
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(InputError, match="fp16 needs CUDA"):
        run_local(spec, tmp_path / "run")


def test_bf16_autocast_trains_on_cpu(tmp_path: Path) -> None:
    spec = spec_with(BASE, workload__precision="bf16", workload__optimizer=dict(ADAMW), cluster__workers=2,
                     target__iterations=30)
    job, summary = run_local(spec, tmp_path / "run")
    losses = [e["loss"] for e in read_events(tmp_path / "run" / "events.jsonl", kinds=["step"])]
    assert summary.steps == 30 and np.mean(losses[-5:]) < 0.7 * np.mean(losses[:5])
    assert job.params.dtype == np.float32, "master weights stay float32"


def test_the_planners_pilot_trains_with_the_jobs_recipe() -> None:
    from spotwise.planner.estimate.pilot import run_pilot

    spec = spec_with(BASE, workload__optimizer=dict(ADAMW), workload__schedule={"decay": "cosine", "warmup": 64},
                     cluster__workers=2, target__iterations=200)
    err, _ = run_pilot(spec, steps=40)
    assert any("recipe (optimizer AdamW" in n for n in err.notes)


def test_the_cli_exits_2_on_a_bad_recipe(tmp_path: Path, cli: Any) -> None:
    import yaml

    d = {**BASE, "workload": {**BASE["workload"], "optimizer": {"name": "Adamm", "lr": 0.001}}}
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(d))
    code, _, err = cli("run", str(path), "--out", str(tmp_path / "run"))
    assert code == 2 and "did you mean 'Adam'" in err and "valid torch.optim names" in err


FROZEN = ("0.weight", "0.bias", "1.weight", "1.bias")  # bn_models:frozen_backbone's first conv and BatchNorm


def assert_only_trainable_moved(before: dict[str, torch.Tensor], model: torch.nn.Module) -> None:
    after = {k: v.detach() for k, v in model.named_parameters()}
    assert {k for k, v in model.named_parameters() if not v.requires_grad} == set(FROZEN)
    for k in FROZEN:
        assert torch.equal(after[k], before[k]), f"the frozen parameter {k} moved by {float((after[k] - before[k]).abs().max())}"
    moved = [k for k in after if k not in FROZEN and not torch.equal(after[k], before[k])]
    assert moved == [k for k in after if k not in FROZEN], "every trainable parameter is trained"


@pytest.mark.parametrize("optimizer", [{"name": "SGD", "lr": 0.05, "momentum": 0.9, "weight_decay": 0.01, "nesterov": True},
                                       ADAMW])
def test_frozen_parameters_are_not_trained(tmp_path: Path, user_path: None, optimizer: dict[str, Any]) -> None:
    """Issue 40: a parameter with ``requires_grad=False`` (a frozen backbone, LoRA's base weights) gets
    no gradient, so no weight decay, momentum or Adam step moves it; the rest trains as before."""
    spec = spec_with(BASE, workload={"name": "bn_models:frozen_backbone", "batch_size": 16, "eval_every": 1000,
                                     "optimizer": dict(optimizer)},
                     cluster__workers=2, target__iterations=12, outputs__checkpoint_every=6)
    market = build_market(spec, horizon_s=7 * 24 * 3600.0)
    job = build_controller(spec, tmp_path / "run", market=market, compute=LocalCompute(worker_args_for(spec)))
    before = {k: v.detach().clone() for k, v in job.state.model.named_parameters()}
    assert job.run().steps == 12
    assert_only_trainable_moved(before, job.state.model)
    sd = torch.load(tmp_path / "run" / "model.pt", weights_only=True)
    assert all(torch.equal(sd[k], before[k]) for k in FROZEN), "the exported model keeps the frozen weights"


def test_a_model_whose_parameters_are_all_frozen_is_refused_saying_so() -> None:
    from spotwise.workloads.base import check_loss

    m = torch.nn.Linear(2, 1).requires_grad_(False)
    with pytest.raises(InputError, match="requires_grad=False") as e:
        check_loss(m(torch.ones(3, 2)).mean())
    assert e.value.where == "workload" and "leave at least one parameter trainable" in e.value.fix


def test_the_ps_plane_reports_where_its_steps_time_goes(tmp_path: Path) -> None:
    """Issue 40 item 5 on the parameter-server plane: step events carry their phases (the slowest
    worker's compute, the coordinator's optimizer step, the wait in between) and summary.json's
    extra.step_phases sums them, as on the collective plane; a simulated run, whose workers are
    modelled, reports none."""
    import spotwise
    from spotwise.events import read_events

    spec = spec_with(BASE, cluster__workers=2, target__iterations=6)
    _, summary = run_local(spec, tmp_path / "run")
    steps = list(read_events(tmp_path / "run" / "events.jsonl", kinds=["step"]))
    timed = [e for e in steps if "phases" in e]
    assert len(timed) == len(steps) - 1, "every commit but the first is timed"
    for e in timed:
        assert set(e["phases"]) == {"compute", "optimizer", "wait"} and e["phases"]["compute"] > 0
        assert e["samples"] == 16
    ph = summary.extra["step_phases"]
    assert ph["steps"] == 5 and ph["samples_per_s"] > 0 and abs(sum(ph["share"].values()) - 1) < 1e-3
    assert summary.extra["optimizer_device"] == "cpu"  # a CPU job's coordinator steps on the CPU
    sim = spotwise.simulate(spec, tmp_path / "sim", plots=False)
    assert sim.extra.get("step_phases") is None


def test_a_spec_lr_goes_into_a_builtin_workloads_default_recipe() -> None:
    """``workload.lr`` of a built-in with a default recipe (resnet18-cifar, gpt-bytes) is the rate the job trains
    with -- it was silently replaced by the recipe's --; without it the recipe's own; a given optimizer's lr is the
    base rate (docs/spec.md)."""
    from spotwise.config import spec_from_dict
    from spotwise.training.recipe import BUILTIN_RECIPES

    def wl(**kw: Any) -> Any:
        return spec_from_dict({"name": "r", "workload": {"name": "gpt-bytes", "batch_size": 4, **kw},
                               "target": {"iterations": 10}, "cluster": {"workers": 1, "instance_type": "c5.xlarge"}}).workload

    mine = wl(lr=3e-4)
    assert mine.lr == 3e-4 and mine.optimizer["lr"] == 3e-4 and mine.optimizer["name"] == "AdamW"
    assert mine.schedule is not None and mine.grad_clip_norm == 1.0  # the rest of the recipe is kept
    assert wl().lr == BUILTIN_RECIPES["gpt-bytes"]["optimizer"]["lr"]
    assert wl(optimizer={"name": "SGD", "lr": 0.2}).lr == 0.2
    again = spec_from_dict({"name": "r", "workload": {"name": "gpt-bytes", "batch_size": 4, "lr": 3e-4},
                            "target": {"iterations": 10}, "cluster": {"workers": 1, "instance_type": "c5.xlarge"}})
    assert spec_from_dict(again.to_dict()).workload.lr == 3e-4  # spec.json round trip
    assert spec_from_dict({"name": "r", "workload": {"name": "mlp-digits"}, "target": {"iterations": 10}, "cluster": {"workers": 1, "instance_type": "c5.xlarge"}}).workload.lr == 0.05
