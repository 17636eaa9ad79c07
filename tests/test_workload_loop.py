"""Issue 41 item 2: built-in and ``module:function`` workloads as clients of ``spotwise.elastic``.

:mod:`spotwise.elastic.workload_loop` trains a spec's workload (model, loss, data, the recipe) through
the same API a user's ``train.py`` uses; ``spotwise eject SPEC --out DIR`` writes it as ``DIR/train.py``
with ``DIR/job.yaml``.  The proofs: on its own it equals the built-in update (the runtime's
:class:`~spotwise.training.state.Updater`) on the same samples; as a spotwise job, through a
revocation, it commits the same steps as the built-in job of the same spec, with the same losses and
the same final model.
"""

from __future__ import annotations

import ast
import dataclasses
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from spotwise.errors import InputError
from spotwise.spec.eject import MARK, _literal, eject

pytestmark = pytest.mark.timeout(300)

ROOT = Path(__file__).resolve().parent.parent

RECIPE_SPEC = """\
# a built-in job with a recipe (comments stay in the ejected job.yaml)
name: ej-mlp
seed: 3
workload:
  name: mlp-digits
  batch_size: 16
  optimizer: {name: AdamW, lr: 0.003, weight_decay: 0.01}
  schedule: {decay: cosine, warmup: 64}
  grad_clip_norm: 1.0
  accumulate: 2
  eval_every: 5
target: {samples: 640}
cluster: {instance_type: c5.xlarge, workers: 2, data_plane: collective, standby: 0, group_timeout_s: 5}
market: {synthetic: {kind: constant, price: 0.07}}
outputs: {checkpoint_every: 0, plots: false}
"""


def _write(tmp_path: Path, text: str = RECIPE_SPEC, name: str = "job.yaml") -> Path:
    p = tmp_path / "spec" / name
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)
    return p


def _loop_module(train_py: Path) -> Any:
    """The ejected script as a module (its WORKLOAD, SEED, PATHS and train)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"ejected_{abs(hash(str(train_py)))}", train_py)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# ------------------------------------------------------------------ on its own: the built-in update
def _reference(workload: dict[str, Any], seed: int, steps: int) -> dict[str, torch.Tensor]:
    """The built-in step on one process: the runtime's FlatModel + Updater + forward_backward over
    global batches in the run's epoch order (what a member of a 1-member job computes)."""
    from spotwise.config import WorkloadSpec
    from spotwise.control.permutation import epoch_permutation
    from spotwise.spec.load import build
    from spotwise.training.recipe import recipe_of
    from spotwise.training.state import FlatModel, Updater, forward_backward
    from spotwise.workloads.registry import make_workload

    spec = build(WorkloadSpec, dict(workload), "workload")
    wl = make_workload(spec, seed)
    model = wl.build_model()
    recipe = recipe_of(spec, None)
    fm = FlatModel(model, "cpu")
    up = Updater(fm, recipe, float(spec.lr))
    order = np.asarray(epoch_permutation(len(wl.train), seed, 0)[: steps * spec.batch_size])
    b = int(spec.batch_size)
    for j in range(steps):
        model.zero_grad(set_to_none=True)
        forward_backward(model, wl.loss, wl.train.batch, order[j * b:(j + 1) * b], recipe, fm.device)
        grad = torch.cat([q.grad.reshape(-1) if q.grad is not None else torch.zeros(q.numel()) for q in fm.params])
        assert up.apply(grad, recipe.lr_at(float(spec.lr), j * b))
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


@pytest.mark.parametrize("workload", [
    {"name": "mlp-digits", "batch_size": 16, "lr": 0.1},  # the papers' plain SGD
    {"name": "mlp-digits", "batch_size": 16, "optimizer": {"name": "AdamW", "lr": 0.003, "weight_decay": 0.01},
     "schedule": {"decay": "cosine", "warmup": 32, "total": 320}, "grad_clip_norm": 0.5, "accumulate": 2},
    {"name": "tests.user_workloads.bn_models:bn_cnn", "batch_size": 16, "accumulate": 4, "lr": 0.05,
     "optimizer": {"name": "SGD", "lr": 0.05, "momentum": 0.9, "nesterov": True}},  # BatchNorm, module:function
    {"name": "mlp-digits", "batch_size": 16, "precision": "bf16", "optimizer": "Adam", "lr": 0.002},
    {"name": "mlp-digits", "batch_size": 16, "schedule": {"decay": "linear", "total": 320},  # two optimizers
     "optimizer": [{"name": "Muon", "params": "matrices", "lr": 0.02, "momentum": 0.95},
                   {"name": "AdamW", "params": "rest", "lr": 0.003}]},
], ids=["plain-sgd", "adamw-cosine-clip-accumulate", "bn-module-function-momentum", "bf16", "muon-and-adamw"])
def test_on_its_own_the_loop_equals_the_builtin_update_on_the_same_samples(workload: dict[str, Any]) -> None:
    from spotwise.elastic.job import Job
    from spotwise.elastic.local import LocalBackend
    from spotwise.elastic.workload_loop import train

    steps, seed = 12, 5
    job = Job(LocalBackend(seed))
    b = int(workload["batch_size"])
    torch.manual_seed(0)
    train(job, workload, epochs=steps * b / _train_size(workload, seed))
    assert job.step == steps
    got = {k: v.detach() for k, v in job._models[0].state_dict().items()}
    want = _reference(workload, seed, steps)
    assert set(got) == set(want)
    # the same operations in the same order: equal to rounding (bit for bit here, bf16 included)
    diff = max(float((got[k].double() - want[k].double()).abs().max()) for k in want)
    assert diff < 1e-6, diff
    moved = max(float((want[k].double() - _initial(workload, seed)[k].double()).abs().max()) for k in want)
    assert moved > 1e-3, "the comparison is of trained models"


def _train_size(workload: dict[str, Any], seed: int) -> int:
    from spotwise.config import WorkloadSpec
    from spotwise.spec.load import build
    from spotwise.workloads.registry import make_workload

    return len(make_workload(build(WorkloadSpec, dict(workload), "workload"), seed).train)


def _initial(workload: dict[str, Any], seed: int) -> dict[str, torch.Tensor]:
    from spotwise.config import WorkloadSpec
    from spotwise.spec.load import build
    from spotwise.workloads.registry import make_workload

    return make_workload(build(WorkloadSpec, dict(workload), "workload"), seed).build_model().state_dict()


def test_on_its_own_the_loop_logs_its_evaluations_and_refuses_what_ddp_cannot_reduce(
        capsys: pytest.CaptureFixture[str]) -> None:
    from spotwise.elastic.job import Job
    from spotwise.elastic.local import LocalBackend
    from spotwise.elastic.workload_loop import train

    job = Job(LocalBackend(0))
    last = train(job, {"name": "mlp-digits", "batch_size": 32, "eval_every": 4}, epochs=0.2)
    assert job.step >= 8 and set(last) >= {"loss"} and all(np.isfinite(v) for v in last.values())
    assert "step 4: eval loss" in capsys.readouterr().out
    with pytest.raises(InputError, match="sparse gradients"):
        train(Job(LocalBackend(0)), {"name": "sparse-logreg", "batch_size": 32}, epochs=0.1)
    with pytest.raises(InputError, match="not a multiple of accumulate"):
        train(Job(LocalBackend(0)), {"name": "mlp-digits", "batch_size": 30, "accumulate": 4}, epochs=0.1)
    with pytest.raises(InputError, match="training script already"):
        train(Job(LocalBackend(0)), {"script": "train.py"}, epochs=0.1)


# ------------------------------------------------------------------ eject
def test_eject_writes_the_loop_and_a_job_that_loads_and_the_script_runs_on_its_own(tmp_path: Path) -> None:
    from spotwise.config import load_spec

    spec_file = _write(tmp_path)
    out = tmp_path / "elsewhere" / "ejected"
    written = eject(spec_file, out)
    assert written == [str(out / "train.py"), str(out / "job.yaml")]
    text = (out / "job.yaml").read_text()
    assert text.startswith(MARK) and "comments stay" in text  # the user's file, round-tripped
    job = load_spec(out / "job.yaml")
    assert job.workload.script == str((out / "train.py").resolve()) and job.workload.batch_size == 8
    assert job.workload.optimizer is None and job.cluster.data_plane == "collective" and job.seed == 3
    mod = _loop_module(out / "train.py")
    assert mod.SEED == 3 and mod.PATHS == []
    w = mod.WORKLOAD
    assert w["optimizer"]["name"] == "AdamW" and w["accumulate"] == 2 and w["grad_clip_norm"] == 1.0
    assert w["schedule"]["total"] == 640 and w["schedule"]["warmup"] == 64  # resolved for the job's target
    # a plain process from another folder (its first line is the mark, its code the loop)
    run = subprocess.run([sys.executable, str(out / "train.py"), "--epochs", "0.1"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "eval loss" in run.stdout


def test_eject_of_a_module_function_workload_imports_it_from_where_it_was(tmp_path: Path) -> None:
    spec_file = _write(tmp_path, RECIPE_SPEC.replace("name: mlp-digits", "name: tests.user_workloads.bn_models:bn_cnn"))
    out = tmp_path / "ej"
    old = os.getcwd()
    os.chdir(ROOT)  # where `tests.user_workloads` is importable, as for `spotwise run` from the repository
    try:
        eject(spec_file, out)
    finally:
        os.chdir(old)
    mod = _loop_module(out / "train.py")
    assert [os.path.normpath(out / p) for p in mod.PATHS] == [str(ROOT)]
    run = subprocess.run([sys.executable, str(out / "train.py"), "--epochs", "0.1"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120, env={**os.environ, "PYTHONPATH": ""})
    assert run.returncode == 0, run.stderr[-2000:]


def test_values_from_the_spec_are_written_as_literals_never_as_code(tmp_path: Path) -> None:
    nasty = ["x'); import os; os.system('touch PWNED') #", 'a"""b', "\\", "line\nbreak", "\u2028", 1e-300, None, True]
    for v in nasty:
        assert ast.literal_eval(_literal({"k": v, "l": [v]})) == {"k": v, "l": [v]}
    with pytest.raises(InputError, match="Python literal"):
        _literal({"k": float("nan")})
    with pytest.raises(InputError, match="Python literal"):
        _literal({"k": object()})
    # a dataset path with quotes: read back from the ejected file as the same string, nothing run
    data = tmp_path / "spec" / "da'ta\"set.npz"
    data.parent.mkdir(parents=True)
    data.write_bytes(b"")
    spec_file = _write(tmp_path, RECIPE_SPEC.replace("  eval_every: 5", "  eval_every: 5\n  dataset: 'da''ta\"set.npz'"))
    from spotwise.config import load_spec
    from spotwise.spec.eject import _workload_mapping

    mapping = _workload_mapping(load_spec(spec_file), str(tmp_path / "out"))
    assert mapping["dataset"] == os.path.join("..", "spec", "da'ta\"set.npz")
    text = "WORKLOAD = " + _literal(mapping)
    tree = ast.parse(text)
    assert ast.literal_eval(tree.body[0].value) == mapping  # type: ignore[attr-defined]
    assert not (tmp_path / "PWNED").exists()


@pytest.mark.parametrize("change,words", [
    (("name: mlp-digits", "name: sparse-logreg"), "sparse gradients"),
    (("batch_size: 16", "batch_size: 15"), "not a multiple of accumulate"),
    (("standby: 0,", "standby: 0, sync: sma,"), "ejected loop is S-SGD"),
    (("data_plane: collective", "data_plane: ps"), "collective plane"),
    (("  name: mlp-digits\n", "  script: train.py\n"), "a script already"),
])
def test_eject_refuses_what_the_loop_cannot_train_saying_why(tmp_path: Path, change: tuple[str, str], words: str) -> None:
    text = RECIPE_SPEC.replace(*change)
    if "script" in change[1]:
        text = "\n".join(ln for ln in text.splitlines() if not any(k in ln for k in ("optimizer", "schedule", "grad_clip",
                                                                                    "accumulate")))
        _write(tmp_path, "", "train.py")
    assert text != RECIPE_SPEC
    with pytest.raises(InputError, match=words):
        eject(_write(tmp_path, text), tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_eject_never_overwrites_what_it_did_not_write(tmp_path: Path) -> None:
    spec_file = _write(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    (out / "train.py").write_text("my own work\n")
    with pytest.raises(InputError, match="exists"):
        eject(spec_file, out, force=True)
    assert (out / "train.py").read_text() == "my own work\n"
    (out / "train.py").unlink()
    eject(spec_file, out)
    with pytest.raises(InputError, match="--force"):
        eject(spec_file, out)
    eject(spec_file, out, force=True)  # its own files: replaced
    link = tmp_path / "link"
    link.symlink_to(out)
    with pytest.raises(InputError, match="not a folder"):
        eject(spec_file, link)


def test_the_cli_ejects_and_says_how_to_run_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from spotwise.cli import main

    spec_file = _write(tmp_path)
    # the console script's entry point in this process (python -m spotwise.cli is started by other tests)
    with pytest.raises(SystemExit) as ok:
        main(["eject", str(spec_file), "--out", str(tmp_path / "ej")])
    out = capsys.readouterr()
    assert ok.value.code in (0, None), out.err
    assert "spotwise run" in out.out and "train.py" in out.out
    assert (tmp_path / "ej" / "train.py").is_file() and (tmp_path / "ej" / "job.yaml").is_file()
    with pytest.raises(SystemExit) as bad:  # the same command again: exit 2, before any workload is built
        main(["eject", str(spec_file), "--out", str(tmp_path / "ej")])
    assert bad.value.code == 2 and "--force" in capsys.readouterr().err


# ------------------------------------------------------------------ as a spotwise job
def test_the_ejected_job_commits_the_builtin_jobs_steps_through_a_revocation(ray_session: Any, tmp_path: Path) -> None:
    """The built-in job (``spotwise run SPEC``) and its ejected script (``spotwise run DIR/job.yaml``)
    on the same market, member 1 revoked at t=3 and back at t=6: the same steps with the same
    membership and samples, the same losses, the same final model (AdamW, cosine warm-up, clipping,
    accumulation); the script's evaluations are its metrics."""
    from spotwise.assemble import build_controller
    from spotwise.capacity.faults import ScriptedRevocation, outage
    from spotwise.config import load_spec
    from spotwise.events import read_events
    from spotwise.market.world import build_market

    # 12 steps of 2 x 16 (the eject tests' 640 samples took 20): the revocation, the return and two evaluations
    spec_file = _write(tmp_path, RECIPE_SPEC.replace("target: {samples: 640}", "target: {samples: 384}"))
    eject(spec_file, tmp_path / "ej")
    rev = ScriptedRevocation((outage(3, 6, [1]),))
    runs = {}
    for name, path in (("builtin", spec_file), ("elastic", tmp_path / "ej" / "job.yaml")):
        spec = load_spec(path)
        market = dataclasses.replace(build_market(spec, horizon_s=7 * 24 * 3600.0), revocation=rev)
        coord = build_controller(spec, tmp_path / name, market=market)
        summary = coord.run()
        assert summary.status == "completed", (name, summary)
        steps = list(read_events(tmp_path / name / "events.jsonl", kinds=["step"]))
        runs[name] = (coord, steps)
    (a, sa), (b, sb) = runs["builtin"], runs["elastic"]
    assert [(e["step"], e["active"], e["samples"]) for e in sa] == [(e["step"], e["active"], e["samples"]) for e in sb]
    assert {e["active"] for e in sa} == {1, 2}, "the revocation changed the membership"
    assert sum(e["samples"] for e in sb) < 384 + 32, "no step past the target"
    assert np.allclose([e["loss"] for e in sa], [e["loss"] for e in sb], rtol=1e-5, atol=1e-6)
    ga, gb = a.state.model_state_dict(), b.state.model_state_dict()
    assert max(float((ga[k] - gb[k]).abs().max()) for k in ga) < 1e-5
    evals = [m for m in read_events(tmp_path / "elastic" / "events.jsonl", kinds=["metrics"]) if "eval_loss" in m["values"]]
    assert evals and {int(m["step"]) % 5 for m in evals} == {0}


def test_eject_turns_a_token_target_into_samples_and_keeps_the_builtins_family(tmp_path: Path) -> None:
    """A script declares no tokens per sample: target.tokens is written as the samples it meant, and the
    built-in's own throughput family stays (a script's default would be mlp)."""
    from spotwise.config import load_spec
    from spotwise.spec.resolve import resolve_epochs

    text = RECIPE_SPEC.replace("name: mlp-digits", "name: gpt-bytes\n  params: {n_layer: 1, n_head: 2, n_embd: 16, "
                               "block_size: 32}").replace("target: {samples: 640}", "target: {tokens: 20480}")
    eject(_write(tmp_path, text), tmp_path / "ej")
    job = load_spec(tmp_path / "ej" / "job.yaml")
    resolve_epochs(job)
    assert job.target.tokens is None and job.target.samples == 640
    assert "target.tokens 20480 in samples of gpt-bytes" in (tmp_path / "ej" / "job.yaml").read_text()
    assert _loop_module(tmp_path / "ej" / "train.py").WORKLOAD["schedule"]["total"] == 640
    # a GPU example: resnet18-cifar's family on a V100 is resnet18 (the catalog's measured speed)
    eject(ROOT / "examples" / "resnet18-v100.yaml", tmp_path / "r18")
    assert load_spec(tmp_path / "r18" / "job.yaml").workload.family == "resnet18"


def test_an_ejected_fp16_gpu_job_is_described_on_the_coordinators_cpu(tmp_path: Path) -> None:
    """The coordinator runs a script to its first batch on its CPU (the model's layout, the dataset's
    size): an fp16 job for GPU workers gets that far there, and on its own, without CUDA, it exits 2."""
    from spotwise.config import load_spec
    from spotwise.elastic.describe import workload_for

    text = RECIPE_SPEC.replace("  eval_every: 5", "  eval_every: 5\n  precision: fp16").replace(
        "instance_type: c5.xlarge", "instance_type: p3.2xlarge, device: cuda")
    eject(_write(tmp_path, text), tmp_path / "ej")
    spec = load_spec(tmp_path / "ej" / "job.yaml")
    assert len(workload_for(spec.workload, spec.seed).train) > 0
    if not torch.cuda.is_available():
        run = subprocess.run([sys.executable, str(tmp_path / "ej" / "train.py")], capture_output=True, text=True,
                             timeout=120)
        assert run.returncode == 2 and "fp16 needs CUDA" in run.stderr and "Traceback" not in run.stderr


def test_the_python_api_ejects_a_spec_mapping_as_it_ejects_the_file(tmp_path: Path) -> None:
    import spotwise
    from spotwise.safeparse import load_yaml

    from_file = eject(_write(tmp_path), tmp_path / "a")
    old = os.getcwd()
    os.chdir(tmp_path)
    try:
        from_map = spotwise.eject(load_yaml(RECIPE_SPEC, "spec", "spec"), "b")
    finally:
        os.chdir(old)
    assert [Path(p).name for p in from_map] == ["train.py", "job.yaml"]
    assert _loop_module(tmp_path / "a" / "train.py").WORKLOAD == _loop_module(tmp_path / "b" / "train.py").WORKLOAD
    from spotwise.config import load_spec

    a, b = load_spec(from_file[1]), load_spec(tmp_path / "b" / "job.yaml")
    assert (a.workload.batch_size, a.target.samples, a.seed) == (b.workload.batch_size, b.target.samples, b.seed) == (8, 640, 3)
