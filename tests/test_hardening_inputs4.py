"""Issue 38: user errors are exit 2 -- the classes an outside review found still giving exit 1 or 0.

* **Optimizers.**  The load-time check built the optimizer but never stepped it: ``SparseAdam``
  (spotwise's gradients are dense), ``differentiable: true``, ``capturable: true`` on a CPU and a
  user optimizer whose ``step`` raises all failed at the first real step with exit 1.  The
  optimizer is now stepped once on a throwaway parameter where it will step, and whatever still
  fails at its first real step (any plane, the planner's pilot) is the user's: exit 2 naming
  ``workload.optimizer`` with the user's traceback.  A ``module:function`` that is no
  ``torch.optim.Optimizer`` subclass is refused.
* **Nesting bombs.**  Every parse of a file spotwise did not just write goes through
  :func:`spotwise.safeparse.loads_json` / :func:`~spotwise.safeparse.load_yaml`; 100,000 nested
  brackets reach each reader the CLI has (a spec, a run directory's spec.json, summary.json,
  events.jsonl and manifest, a trace, a catalog, a sweep read back, a URI's staging folder) and
  exit 2 there.
* **fp16 and device: cuda without CUDA.**  ``run`` refuses both before Ray starts (fp16 for every
  ``device``); the planner's in-process pilot refuses fp16 (it would train here).  ``plan`` and
  ``simulate`` of ``device: cuda`` model the cloud's GPUs and train nothing here (the pilot trains
  on the CPU): accepted by design.
* **Python API arguments.**  Every numeric, bool, string and callable argument of plan / run /
  simulate / sweep / report is type-checked: an InputError naming it, never a TypeError inside.
* **Trace years.**  Every trace loader refuses a time before 2006 or after 2100 (year 1, 1970,
  9999), naming the file and the row.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import pytest
import torch
import yaml

from spotwise.errors import InputError
from _load import bound

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "examples" / "demo.yaml"
USER_DIR = Path(__file__).with_name("user_workloads")
DEEP = 100_000
BOMB = "[" * DEEP + "]" * DEEP
NO_CUDA = pytest.mark.skipif(torch.cuda.is_available(), reason="checks what a machine without CUDA refuses")

BASE: dict[str, Any] = {
    "name": "issue38",
    "seed": 3,
    "workload": {"name": "mlp-digits", "batch_size": 8, "lr": 0.01, "eval_every": 1000},
    "target": {"iterations": 12},
    "cluster": {"instance_type": "c5.xlarge", "workers": 1, "coordinator_instance": "c5.large", "standby": 0},
    "market": {"synthetic": {"kind": "constant", "price": 0.07}},
    "outputs": {"checkpoint_every": 0, "plots": False},
}
COLLECTIVE = {"data_plane": "collective", "sync": "ssgd"}
GPU = {"instance_type": "p3.2xlarge"}  # one V100; the catalog knows its speed for resnet50, not mlp
GPU_WL = {"family": "resnet50", "step_time_s": 1.0}


def doc(optimizer: Any = None, workload: dict[str, Any] | None = None, **cluster: Any) -> dict[str, Any]:
    d = json.loads(json.dumps(BASE))
    if optimizer is not None:
        d["workload"]["optimizer"] = optimizer
    d["workload"].update(workload or {})
    d["cluster"].update(cluster)
    return d


def write(tmp_path: Path, d: dict[str, Any], name: str = "spec.yaml") -> Path:
    p = tmp_path / name
    p.write_text(yaml.safe_dump(d, sort_keys=False), encoding="utf-8")
    return p


@pytest.fixture()
def user_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(USER_DIR))


# ============================================================================ optimizers
@pytest.mark.parametrize(("optimizer", "cluster", "says"), [
    ({"name": "SparseAdam"}, {}, "SparseAdam does not support dense gradients"),
    ({"name": "Adam", "differentiable": True}, {}, "raised RuntimeError in its first step"),
    ({"name": "AdamW", "capturable": True}, {}, "capturable=True"),  # the parameter server steps on its CPU
    ({"name": "Adam", "capturable": True}, {**COLLECTIVE, "device": "cpu"}, "capturable=True"),
    ({"name": "SparseAdam"}, {**COLLECTIVE, "device": "cpu"}, "SparseAdam"),
])
def test_an_optimizer_that_cannot_step_is_refused_when_the_spec_loads(optimizer: dict[str, Any], cluster: dict[str, Any],
                                                                        says: str) -> None:
    import spotwise

    with pytest.raises(InputError, match="workload.optimizer") as e:
        spotwise.load_spec(doc(optimizer, **cluster))
    assert says in e.value.message and "first step" in e.value.message


def test_the_first_step_check_never_touches_a_real_model_and_good_optimizers_pass() -> None:
    import spotwise

    for opt in ({"name": "AdamW", "lr": 1e-3, "weight_decay": 0.1}, {"name": "SGD", "momentum": 0.9, "nesterov": True},
                {"name": "Adam", "foreach": True}, {"name": "RMSprop"}, {"name": "Adagrad"}):
        assert spotwise.load_spec(doc(opt)).workload.optimizer_spec is not None
    # on a GPU job's collective members the device decides: known only when `run` places them
    assert spotwise.load_spec(doc({"name": "Adam", "capturable": True}, **COLLECTIVE)).cluster.device == "auto"


@NO_CUDA
def test_capturable_on_collective_members_that_train_on_this_cpu_is_refused_when_run_loads() -> None:
    from spotwise.api import check_spec

    with pytest.raises(InputError, match=r"workload.optimizer: .*in its first step \(checked on a dummy parameter on cpu\)"):
        check_spec(doc({"name": "Adam", "capturable": True}, **COLLECTIVE), import_user_code=True, local_workers=True)


@pytest.mark.parametrize(("name", "says", "traceback"), [
    ("bad_optimizers:RaisesInStep", "raised ZeroDivisionError in its first step", "the user's step divides by zero"),
    ("bad_optimizers:RaisesWhenBuilt", "raised KeyError when built", "the user's constructor looks up"),
    ("bad_optimizers:not_a_class", "is not a class but an object of type 'function'", None),
    ("bad_optimizers:NotAnOptimizer", "is a class that is not a torch.optim.Optimizer subclass", None),
    ("bad_optimizers:NUMBER", "is not a class but an object of type 'int'", None),
])
def test_a_user_optimizer_is_imported_built_and_stepped_when_run_loads(user_path: None, name: str, says: str,
                                                                       traceback: str | None) -> None:
    from spotwise.api import check_spec

    with pytest.raises(InputError) as e:
        check_spec(doc({"name": name}), import_user_code=True, local_workers=True)
    assert e.value.where is not None and e.value.where.startswith("workload.optimizer"), e.value.message
    assert says in e.value.message, e.value.message
    details = getattr(e.value, "details", "")
    if traceback is None:
        assert not details
    else:  # the user's own frames, none of spotwise's
        assert traceback in details and "bad_optimizers.py" in details and f"{os.sep}spotwise{os.sep}" not in details


def test_the_cli_shows_the_optimizers_traceback_and_exits_2(user_path: None, cli: Any, tmp_path: Path,
                                                           ray_unimportable: None) -> None:
    code, _, err = cli("run", str(write(tmp_path, doc({"name": "bad_optimizers:RaisesInStep"}))), "--out", str(tmp_path / "o"))
    assert code == 2, err
    assert "Traceback" in err and "bad_optimizers.py" in err and "ZeroDivisionError" in err
    assert "workload.optimizer" in err and "internal error" not in err
    assert not (tmp_path / "o").exists(), "refused before the run directory was made"


def _local_run(d: dict[str, Any], out: Path) -> Any:
    """``spotwise run`` without Ray: the controller with in-process workers (the parameter-server plane)."""
    from spotwise.assemble import build_controller
    from spotwise.config import spec_from_dict
    from spotwise.market.world import build_market
    from spotwise.planes.ps.compute import LocalCompute
    from spotwise.planes.ps.worker import worker_args_for

    spec = spec_from_dict(d)
    job = build_controller(spec, out, market=build_market(spec, horizon_s=7 * 24 * 3600.0),
                           compute=LocalCompute(worker_args_for(spec)))
    return job.run()


def test_a_first_step_failure_on_the_parameter_server_is_the_users(user_path: None, tmp_path: Path) -> None:
    """The check's throwaway parameter passes; the real model's first step raises in the coordinator."""
    from spotwise.training.recipe import UserOptimizerError

    with pytest.raises(UserOptimizerError) as e:
        _local_run(doc({"name": "bad_optimizers:RaisesOnBigParams", "lr": 0.01}), tmp_path / "run")
    assert e.value.where == "workload.optimizer" and "in its first step (on cpu)" in e.value.message
    assert "cannot handle a parameter of shape" in e.value.details and "bad_optimizers.py" in e.value.details


def test_a_torch_optimizer_failing_at_its_first_step_is_the_users_and_later_failures_are_not() -> None:
    """The planes' one rule (:class:`~spotwise.training.state.Updater`): the recipe's optimizer failing
    at its first step in a process is the user's (exit 2); a torch class failing later is not."""
    from spotwise.training.recipe import OptimizerSpec, Recipe, UserOptimizerError
    from spotwise.training.state import FlatModel, Updater

    fm = FlatModel(torch.nn.Linear(3, 2))
    up = Updater(fm, Recipe(OptimizerSpec("SparseAdam", 0.01, {})), 0.01)
    with pytest.raises(UserOptimizerError, match="SparseAdam raised RuntimeError in its first step"):
        up.apply(torch.ones(fm.P), 0.01)
    up = Updater(fm, Recipe(OptimizerSpec("SGD", 0.01, {})), 0.01)
    assert up.apply(torch.ones(fm.P), 0.01)
    up.optimizer.step = lambda: (_ for _ in ()).throw(RuntimeError("CUDA error: an illegal memory access"))  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="illegal memory access"):
        up.apply(torch.ones(fm.P), 0.01)


def test_a_user_optimizer_error_survives_pickling_with_its_traceback() -> None:
    import pickle

    from spotwise.training.recipe import UserOptimizerError

    e = pickle.loads(pickle.dumps(UserOptimizerError("what", "fix", "workload.optimizer", "Traceback ...")))
    assert isinstance(e, UserOptimizerError) and e.details == "Traceback ..." and e.message == "workload.optimizer: what -- fix"


def test_the_plans_pilot_blames_a_user_optimizer_failing_at_its_first_step(user_path: None, cli: Any, tmp_path: Path) -> None:
    code, _, err = cli("plan", str(write(tmp_path, doc({"name": "bad_optimizers:RaisesOnBigParams"}))), "--pilot-steps", "20")
    assert code == 2, err
    assert "workload.optimizer" in err and "in its first step" in err and "bad_optimizers.py" in err
    assert "--pilot DIR" in err and "internal error" not in err


@NO_CUDA
def test_the_plans_pilot_says_to_pass_a_pilot_dir_for_a_gpu_only_optimizer_argument(cli: Any, tmp_path: Path) -> None:
    spec = write(tmp_path, doc({"name": "Adam", "capturable": True}, **COLLECTIVE))
    code, _, err = cli("plan", str(spec), "--pilot-steps", "20")
    assert code == 2, err
    assert "capturable=True" in err and "--pilot DIR" in err


@pytest.mark.timeout(600)
def test_a_first_step_failure_on_a_collective_member_is_exit_2_not_a_lost_node(tmp_path: Path) -> None:
    """The member's optimizer raises at its first real step: the run ends with exit 2 naming the
    optimizer and showing its traceback -- not a lost node, a regroup, a stall or exit 1.  (A
    process of its own, so that its Ray workers get the PYTHONPATH a user's would; one member.)"""
    d = doc({"name": "bad_optimizers:RaisesOnBigParams", "lr": 0.01}, **COLLECTIVE, group_timeout_s=bound(5))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(USER_DIR), os.environ.get("PYTHONPATH")])),
           "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("RAY_ADDRESS", None)
    out = tmp_path / "ray"
    proc = subprocess.run([sys.executable, "-c", "from spotwise.cli import main; main()", "run",
                           str(write(tmp_path, d)), "--out", str(out)],
                          check=False, capture_output=True, text=True, timeout=bound(540), env=env, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "optimizer bad_optimizers:RaisesOnBigParams raised RuntimeError in its first step" in proc.stderr
    assert "bad_optimizers.py" in proc.stderr and "internal error" not in proc.stderr
    lost = [line for line in (out / "events.jsonl").read_text().splitlines() if '"node-lost"' in line] \
        if (out / "events.jsonl").exists() else []
    assert not lost, "the optimizer's failure is not a lost node"


# ============================================================================ fp16 and device: cuda without CUDA
@NO_CUDA
@pytest.mark.parametrize(("device", "itype", "says"), [
    ("auto", "c5.xlarge", "precision fp16 needs CUDA"),
    ("auto", "p3.2xlarge", "precision fp16 needs CUDA"),
    ("cpu", "c5.xlarge", "precision fp16 needs CUDA"),
    ("cuda", "p3.2xlarge", "cluster.device is cuda but this node has no CUDA device"),
])
def test_run_refuses_fp16_and_cuda_without_cuda_before_ray_starts(cli: Any, tmp_path: Path, ray_unimportable: None,
                                                                  device: str, itype: str, says: str) -> None:
    d = doc({"name": "SGD"}, {"precision": "fp16", **(GPU_WL if itype != "c5.xlarge" else {})}, device=device,
            instance_type=itype)
    code, _, err = cli("run", str(write(tmp_path, d)), "--out", str(tmp_path / "o"))
    assert code == 2, err
    assert says in err and "internal error" not in err
    assert not (tmp_path / "o").exists(), "refused before the run directory was made"


@NO_CUDA
def test_run_refuses_device_cuda_on_a_gpu_instance_type_before_ray_starts(cli: Any, tmp_path: Path,
                                                                         ray_unimportable: None) -> None:
    code, _, err = cli("run", str(write(tmp_path, doc(workload=GPU_WL, device="cuda", **GPU))), "--out", str(tmp_path / "o"))
    assert code == 2 and "no CUDA device" in err, err
    assert not (tmp_path / "o").exists()


@NO_CUDA
def test_the_plans_in_process_pilot_refuses_fp16_here_and_says_to_pass_a_pilot_dir(cli: Any, tmp_path: Path) -> None:
    d = doc({"name": "SGD"}, {"precision": "fp16", **GPU_WL}, **GPU)
    code, _, err = cli("plan", str(write(tmp_path, d)), "--pilot-steps", "20")
    assert code == 2, err
    assert "fp16 needs CUDA" in err and "in-process pilot" in err and "--pilot DIR" in err


@NO_CUDA
def test_plan_of_device_cuda_models_the_clouds_gpus_and_trains_nothing_on_them_here(cli: Any, tmp_path: Path) -> None:
    """By design: plan and simulate model the target hardware; the pilot trains on this CPU."""
    d = doc(workload=GPU_WL, device="cuda", **GPU)
    d["deadline"] = "2h"
    code, out, err = cli("plan", str(write(tmp_path, d)), "--pilot-steps", "20", "--json")
    assert code == 0, err
    assert json.loads(out)


# ============================================================================ nesting bombs, 100,000 levels deep
def _deep_spec_yaml(tmp_path: Path) -> Path:
    p = tmp_path / "deep.yaml"
    p.write_text(DEMO.read_text(encoding="utf-8").replace("  eval_every: 50\n", "  eval_every: 50\n  params: {x: " + BOMB + "}\n"),
                 encoding="utf-8")
    return p


def _deep_spec_json(tmp_path: Path) -> Path:
    p = tmp_path / "deep.json"
    p.write_text('{"name": "x", "workload": {"name": "mlp-digits", "params": {"x": ' + BOMB + "}}}", encoding="utf-8")
    return p


@pytest.mark.parametrize("make", [_deep_spec_yaml, _deep_spec_json], ids=["yaml", "json"])
@pytest.mark.parametrize("command", ["plan", "simulate", "run"])
def test_a_deep_spec_file_exits_2_in_every_command(cli: Any, tmp_path: Path, ray_unimportable: None,
                                                   make: Callable[[Path], Path], command: str) -> None:
    spec = make(tmp_path)
    code, _, err = cli(command, str(spec), *(["--out", str(tmp_path / "o")] if command != "plan" else []))
    assert code == 2, err
    assert "nested" in err and str(spec) in err and "internal error" not in err


@pytest.fixture(scope="module")
def sim_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One finished (simulated) run directory, copied by each test that spoils one of its files."""
    from typer.testing import CliRunner

    from spotwise.cli import app

    out = tmp_path_factory.mktemp("sim") / "run"
    res = CliRunner().invoke(app, ["simulate", str(DEMO), "--out", str(out), "--pilot-steps", "20", "--no-plot"])
    assert res.exit_code == 0, res.stderr
    (out / ".spotwise.lock").unlink(missing_ok=True)
    return out


def _spoiled(sim_run: Path, tmp_path: Path, name: str, text: str) -> Path:
    run = tmp_path / "run"
    shutil.copytree(sim_run, run)
    (run / name).write_text(text, encoding="utf-8")
    return run


_EVENTS_BOMB = '{"t": 0.0, "wall": 0.0, "kind": "header", "schema": 1}\n{"t": 1.0, "wall": 1.0, "kind": "step", "x": ' + BOMB + "}\n"
_READERS = {
    "status": lambda run, tmp: ["status", str(run)],
    "runs": lambda run, tmp: ["runs", str(tmp)],
    "report": lambda run, tmp: ["report", str(run)],
    "report-compare": lambda run, tmp: ["report", str(run), str(run), "--out", str(tmp / "cmp.html")],
    "resume": lambda run, tmp: ["run", "--resume", str(run), "--trust-code"],
    "plan-pilot": lambda run, tmp: ["plan", str(DEMO), "--pilot", str(run)],
}


@pytest.mark.parametrize("reader", [r for r in _READERS if r != "resume"])  # a resume starts Ray after its checks
@pytest.mark.parametrize(("name", "text"), [
    ("spec.json", '{"name": ' + BOMB + "}"),
    ("summary.json", '{"steps": ' + BOMB + "}"),
    ("events.jsonl", _EVENTS_BOMB),
    ("checkpoints/manifest.json", '{"checkpoints": ' + BOMB + "}"),
], ids=["spec.json", "summary.json", "events.jsonl", "manifest.json"])
def test_a_deep_run_directory_file_never_exits_1(cli: Any, tmp_path: Path, sim_run: Path, ray_unimportable: None,
                                                 reader: str, name: str, text: str) -> None:
    """Each reader of a run directory, each of its files 100,000 levels deep: exit 2 naming the file
    (or, for a file that reader does not need, it does its work: exit 0)."""
    run = _spoiled(sim_run, tmp_path, name, text)
    code, _, err = cli(*_READERS[reader](run, tmp_path))
    assert code in (0, 2), err
    assert "internal error" not in err and "Traceback" not in err and "RecursionError" not in err
    if code == 2 and "nested" in err:
        assert Path(name).name in err, err


@pytest.mark.parametrize(("reader", "name"), [
    ("status", "events.jsonl"), ("status", "spec.json"), ("report", "summary.json"),
    ("resume", "spec.json"), ("resume", "checkpoints/manifest.json"), ("plan-pilot", "events.jsonl"),
])
def test_the_file_a_reader_needs_nested_100000_deep_exits_2_naming_it(cli: Any, tmp_path: Path, sim_run: Path,
                                                                      ray_unimportable: None, reader: str, name: str) -> None:
    text = {"spec.json": '{"name": ' + BOMB + "}", "summary.json": '{"steps": ' + BOMB + "}", "events.jsonl": _EVENTS_BOMB,
            "checkpoints/manifest.json": '{"checkpoints": ' + BOMB + "}"}[name]
    run = _spoiled(sim_run, tmp_path, name, text)
    code, _, err = cli(*_READERS[reader](run, tmp_path))
    assert code == 2, err
    assert "nested" in err and Path(name).name in err and "internal error" not in err


def test_runs_lists_a_run_whose_summary_is_deep_as_unreadable(cli: Any, tmp_path: Path, sim_run: Path) -> None:
    """``runs`` lists every run below a folder: one that cannot be read is a row saying so (exit 0)."""
    _spoiled(sim_run, tmp_path, "summary.json", '{"steps": ' + BOMB + "}")
    code, out, err = cli("runs", str(tmp_path), "--json")
    assert code == 0, err
    assert "summary.json is nested too deeply" in out and "internal error" not in err


def test_a_deep_sweep_json_read_back_by_report_exits_2(cli: Any, tmp_path: Path, sim_run: Path) -> None:
    sweep = tmp_path / "sweep"
    shutil.copytree(sim_run, sweep)
    (sweep / "sweep.json").write_text('{"strategies": ' + BOMB + "}", encoding="utf-8")
    code, _, err = cli("report", str(sim_run), str(sweep), "--out", str(tmp_path / "cmp.html"))
    assert code == 2, err
    assert "nested" in err and "sweep.json" in err and "internal error" not in err


def test_a_deep_trace_exits_2_naming_it_and_is_skipped_in_a_folder(cli: Any, tmp_path: Path) -> None:
    from spotwise.market.traces import load_traces

    f = tmp_path / "deep" / "t.json"
    f.parent.mkdir()
    f.write_text('{"SpotPriceHistory": ' + BOMB + "}", encoding="utf-8")
    for args in (["traces", "show", str(f)], ["plan", str(DEMO), "--trace", str(f)]):
        code, _, err = cli(*args)
        assert code == 2, err
        assert "nested too deeply" in err and str(f) in err and "internal error" not in err
    assert load_traces([f.parent]) == []  # a folder's unreadable files are skipped, as its non-traces are


def test_a_deep_catalog_exits_2(cli: Any, tmp_path: Path) -> None:
    cat = tmp_path / "cat.yaml"
    cat.write_text("instances: " + BOMB + "\n", encoding="utf-8")
    d = yaml.safe_load(DEMO.read_text(encoding="utf-8"))
    d["market"]["catalog"] = [str(cat)]
    code, _, err = cli("plan", str(write(tmp_path, d)))
    assert code == 2, err
    assert "nested" in err and "cat.yaml" in err


def test_a_staging_folder_whose_spec_json_is_deep_exits_2_on_a_resume_from_the_uri(cli: Any, tmp_path: Path, sim_run: Path,
                                                                                  ray_unimportable: None) -> None:
    """``_same_spec`` compared the staging folder's spec.json with the URI's and caught ValueError only."""
    remote = tmp_path / "remote"
    shutil.copytree(sim_run, remote)
    stage = _spoiled(sim_run, tmp_path, "spec.json", '{"name": ' + BOMB + "}")
    code, _, err = cli("run", "--resume", f"file://{remote}", "--out", str(stage), "--trust-code")
    assert code == 2, err
    assert "nested too deeply" in err and str(stage / "spec.json") in err and "internal error" not in err


def test_same_spec_names_the_deep_file_and_compares_others() -> None:
    from spotwise.remote.location import _same_spec

    with pytest.raises(InputError, match="remote/spec.json: the spec.json is nested too deeply"):
        _same_spec(b'{"a": 1}', b"[" * DEEP + b"]" * DEEP, "local/spec.json", "remote/spec.json")
    assert _same_spec(b'{"a": 1}', b'{"a": 1}') and not _same_spec(b'{"a": 1}', b"not json") and not _same_spec(None, b"{}")


def test_every_reader_parses_untrusted_json_through_safeparse() -> None:
    """The rule is one place: no module under spotwise/ calls json.loads / json.load / yaml.*load on a
    file or answer it did not write itself.  The exceptions are listed with their reason."""
    import re

    internal = {  # messages of spotwise's own processes over its private, authenticated channels
        "planes/collective/plane.py", "planes/collective/plan.py", "planes/collective/group.py",
        "planes/serverless/plane.py", "planes/serverless/schedule.py", "planes/serverless/function.py",
        "planes/serverless/invocations.py",
        "planner/emit/scripts.py",  # the text of a shell helper run on the cluster, not spotwise's parse
        "planner/plan/planned_spec.py",  # ruamel's round trip of a spec file safeparse.load_yaml has just checked
        "spec/eject.py",  # the same round trip (spotwise eject's job.yaml)
        "remote/lease.py",  # catches RecursionError itself (its own helper's file)
        # a packed tree's header: CRC-checked, duplicate keys refused by its own hook, RecursionError and every
        # ValueError its UnpackError (issue 54 item 9; fuzzed in test_tensor_tree.py)
        "training/tensor_tree.py",
        "safeparse.py",
    }
    found = []
    for p in sorted((REPO / "spotwise").rglob("*.py")):
        rel = p.relative_to(REPO / "spotwise").as_posix()
        if rel in internal:
            continue
        if re.search(r"\bjson\.loads?\(|\byaml\.(safe_|full_|unsafe_)?load\(", p.read_text(encoding="utf-8")):
            found.append(rel)
    assert not found, f"parse through spotwise.safeparse (loads_json / load_yaml): {found}"


# ============================================================================ Python API argument types
_SPEC = str(DEMO)
_BAD: dict[str, list[Any]] = {
    "int": ["10", 10.0, True, None, math.nan],
    "bool": ["no", 1, None, 0.0],
    "number": ["1", True, math.nan, math.inf, -1.0],
    "positive": ["1", True, math.nan, -math.inf, -1.0, 0],
    "str": [1, b"auto", ["auto"]],
    "duration": [True, math.nan, math.inf, -5.0, [1], None],
}
_ARGS: list[tuple[str, str, str]] = [  # (function, argument, kind)
    ("plan", "pilot_steps", "int"), ("plan", "objective", "str"), ("plan", "install", "str"),
    ("simulate", "pilot_steps", "int"), ("simulate", "train_size", "int"), ("simulate", "overwrite", "bool"),
    ("simulate", "progress", "bool"), ("simulate", "plots", "bool"),
    ("run", "resume", "bool"), ("run", "overwrite", "bool"), ("run", "autoscale", "bool"),
    ("run", "compare_on_demand", "bool"), ("run", "progress", "bool"), ("run", "trust_code", "bool"),
    ("run", "ray_address", "str"), ("run", "metadata_url", "str"), ("run", "redis_url", "str"),
    ("run", "notice_source", "str"), ("run", "emulate_network_mbps", "number"),
    ("sweep", "all_zones", "bool"), ("sweep", "spec_market", "bool"), ("sweep", "overwrite", "bool"),
    ("sweep", "plots", "bool"), ("sweep", "hindsight", "bool"), ("sweep", "work_hours", "positive"),
    ("sweep", "deadline_hours", "positive"), ("sweep", "spot_price", "positive"), ("sweep", "max_runs", "int"),
    ("sweep", "starts", "duration"), ("sweep", "restart", "duration"), ("sweep", "history", "duration"),
    ("sweep", "horizon", "duration"),
    ("report", "plots", "bool"),
]


def _api_cases() -> list[Any]:
    out = []
    for fn, arg, kind in _ARGS:
        for bad in _BAD[kind]:
            if bad is None and (arg in ("ray_address", "metadata_url", "redis_url", "install", "train_size", "max_runs",
                                        "plots") and not (fn == "report" or (fn == "sweep" and arg == "plots"))):
                continue  # None is these arguments' default
            out.append(pytest.param(fn, arg, bad, id=f"{fn}-{arg}-{bad!r}"))
    return out


@pytest.mark.parametrize(("fn", "arg", "bad"), _api_cases())
def test_every_api_argument_of_the_wrong_type_or_value_is_an_input_error_naming_it(fn: str, arg: str, bad: Any,
                                                                                  tmp_path: Path,
                                                                                  ray_unimportable: None) -> None:
    import spotwise

    call: Callable[..., Any] = getattr(spotwise, fn)
    first: Any = [str(tmp_path)] if fn == "report" else _SPEC
    with pytest.raises(InputError) as e:
        if fn == "run":
            call(first, str(tmp_path / "o"), **{arg: bad})
        else:
            call(first, **{arg: bad})
    assert e.value.where is not None and arg in e.value.where, e.value.message
    assert not (tmp_path / "o").exists()


def test_the_api_still_takes_good_arguments_of_every_kind() -> None:
    from spotwise.api_args import bool_arg, duration_arg, int_arg, number_arg, str_arg

    assert bool_arg(False, "x") is False and int_arg(3, "x", 1) == 3 and number_arg(2, "x") == 2.0
    assert str_arg("cost", "objective", ("cost", "time")) == "cost" and duration_arg("6h", "starts") == "6h"
    assert duration_arg(3600, "starts") == 3600.0 and int_arg(None, "x", allow_none=True) is None
    import numpy as np

    assert int_arg(np.int64(5), "x") == 5 and number_arg(np.float32(0.5), "x") == 0.5


# ============================================================================ trace years
def _aws(path: Path, stamps: list[str]) -> Path:
    recs = [{"AvailabilityZone": "us-east-1b", "InstanceType": "p3.2xlarge", "ProductDescription": "Linux/UNIX",
             "SpotPrice": "0.9", "Timestamp": t} for t in stamps]
    path.write_text(json.dumps({"SpotPriceHistory": recs}), encoding="utf-8")
    return path


@pytest.mark.parametrize(("stamp", "side"), [
    ("0001-01-01T00:00:00Z", "before 2006"), ("1970-01-01T00:00:00Z", "before 2006"), ("2005-12-31T23:59:59Z", "before 2006"),
    ("2100-01-01T00:00:01Z", "after 2100"), ("9999-12-31T00:00:00Z", "after 2100"),
])
def test_an_aws_time_outside_2006_2100_is_refused_naming_the_file_and_row(cli: Any, tmp_path: Path, stamp: str,
                                                                          side: str) -> None:
    f = _aws(tmp_path / "t.json", ["2020-01-01T00:00:00Z", stamp])
    code, out, err = cli("traces", "show", str(f), "--json")
    assert code == 2, err
    assert side in err and "SpotPriceHistory[1]" in err and str(f) in err and stamp in err and out.strip() == ""


def test_the_edges_of_the_plausible_years_are_accepted(tmp_path: Path) -> None:
    from spotwise.market.traces import load_traces

    s = load_traces([_aws(tmp_path / "t.json", ["2006-01-01T00:00:00Z", "2100-01-01T00:00:00Z"])])
    assert list(s[0].times) == [1136073600.0, 4102444800.0]


@pytest.mark.parametrize(("date", "side"), [("1/1/0001", "before 2006"), ("12/31/1999", "before 2006"),
                                            ("1/1/2101", "after 2100"), ("12/31/9999", "after 2100")])
def test_an_azure_date_outside_2006_2100_is_refused_naming_the_line(cli: Any, tmp_path: Path, date: str, side: str) -> None:
    f = tmp_path / "eastus.csv"
    f.write_text(f"Date,NC6\n2/1/2020,$0.20\n{date},$0.21\n", encoding="utf-8")
    code, _, err = cli("traces", "show", str(f))
    assert code == 2, err
    assert side in err and "line 3" in err and str(f) in err


@pytest.mark.parametrize(("folder", "ticks", "says"), [
    ("aws-01-01-1999", 4, "before 2006"), ("aws-10-26-0001", 4, "before 2006"), ("aws-12-31-9999", 4, "after 2100"),
    ("aws-12-31-2099", 10_000, "end after 2100"),
])
def test_a_skypilot_folder_date_outside_2006_2100_is_refused(cli: Any, tmp_path: Path, folder: str, ticks: int,
                                                             says: str) -> None:
    d = tmp_path / folder
    d.mkdir()
    f = d / "us-west-2a_v100_1.json"
    f.write_text(json.dumps({"metadata": {"gap_seconds": 600}, "data": [1, 0] * (ticks // 2)}), encoding="utf-8")
    code, _, err = cli("traces", "show", str(f))
    assert code == 2, err
    assert says in err and str(f) in err


def test_an_undated_skypilot_trace_keeps_its_relative_timeline(tmp_path: Path) -> None:
    from spotwise.market.traces import load_traces

    f = tmp_path / "us-west-2a_v100_1.json"
    f.write_text(json.dumps({"metadata": {"gap_seconds": 600}, "data": [1, 0, 1]}), encoding="utf-8")
    assert load_traces([f])[0].times[0] == 0.0


@pytest.mark.parametrize(("row", "side"), [("a-k80-us-central1-c-0,1/1/1999 10:00,1/1/1999 12:00", "before 2006"),
                                           ("a-k80-us-central1-c-0,1/1/2101 10:00,1/1/2101 12:00", "after 2100")])
def test_a_gcp_lifetime_time_outside_2006_2100_is_refused(tmp_path: Path, row: str, side: str) -> None:
    from spotwise.market.traces import load_gcp_lifetime_csv

    f = tmp_path / "lifetime.csv"
    f.write_text(f"K80,,\nVM name,Start,Terminate\n{row}\n", encoding="utf-8")
    with pytest.raises(InputError, match=side) as e:
        load_gcp_lifetime_csv(f)
    assert "line 3" in e.value.message and str(f) in e.value.message
    with pytest.raises(InputError, match="before 2006"):
        g = tmp_path / "days.csv"
        g.write_text("K80,,\n8-May,created,terminated\na-k80-us-central1-c-0,10:00:00,12:00:00\n", encoding="utf-8")
        load_gcp_lifetime_csv(g, year=1999)
