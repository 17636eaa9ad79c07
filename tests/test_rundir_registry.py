"""Issue 54 item 2: everything spotwise writes in a run directory -- the metrics sinks' folders and files
included -- is in one registry (:mod:`spotwise.rundir_names`) that the link checks and ``--overwrite`` read.

* a symbolic link to a folder outside planted at every registered name, and inside every sink's folder
  (TensorBoard's event files, a folder of a W&B offline run, MLflow's SQLite file and its journal):
  ``run --resume``, ``--out`` and ``--overwrite`` exit 2 naming it, and nothing is written (or
  deleted) outside the run directory -- nor by a sink started on such a directory directly;
* ``--overwrite`` of a run with all three sinks leaves none of the old run's sink output;
* completeness: every path a run with every sink, checkpoints and a report writes is covered by the
  registry (a writer added later without registering its name fails here).

Nothing starts Ray: the refusals happen before it (``no_cluster`` fails a case that gets past them).
"""

from __future__ import annotations

import copy
import hashlib
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

import spotwise
from spotwise.errors import InputError
from spotwise.rundir_names import MLFLOW_DB, REGISTRY, TENSORBOARD_DIR, WANDB_DIR, covers

pytestmark = pytest.mark.timeout(300)

SINKS = ["tensorboard", "wandb", "mlflow"]
SPEC: dict[str, Any] = {
    "name": "registry", "seed": 5,
    "workload": {"name": "mlp-digits", "batch_size": 16, "lr": 0.1, "eval_every": 4},
    "target": {"iterations": 8},
    "cluster": {"instance_type": "c5.xlarge", "workers": 2, "coordinator_instance": "c5.large", "standby": 0},
    "market": {"synthetic": {"kind": "constant", "price": 0.07}},
    "outputs": {"checkpoint_every": 4, "plots": True, "sinks": SINKS},
}


@pytest.fixture(scope="module")
def sink_libs() -> None:
    for mod in ("tensorboard", "wandb", "mlflow", "sqlalchemy"):
        pytest.importorskip(mod)


@pytest.fixture(scope="module")
def sink_env_module() -> Any:
    """W&B offline (never the network), MLflow's store in the run directory -- for the module's fixture run."""
    mp = pytest.MonkeyPatch()
    mp.setenv("WANDB_MODE", "offline")
    mp.setenv("WANDB_SILENT", "true")
    for var in ("MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_NAME", "WANDB_PROJECT", "WANDB_DIR"):
        mp.delenv(var, raising=False)
    yield
    mp.undo()


@pytest.fixture()
def sink_env(monkeypatch: pytest.MonkeyPatch, sink_libs: None) -> None:
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    for var in ("MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_NAME", "WANDB_PROJECT", "WANDB_DIR"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory, sink_libs: None, sink_env_module: None) -> Path:
    """One modelled run (no Ray) with all three sinks, checkpoints at 4 and 8 and its report; tests use copies."""
    out = tmp_path_factory.mktemp("finished") / "run"
    summary = spotwise.simulate(copy.deepcopy(SPEC), out, plots=True)
    assert summary.status == "completed"
    return out


@pytest.fixture()
def no_cluster(monkeypatch: pytest.MonkeyPatch, ray_unimportable: None) -> None:
    import spotwise.capacity.raystart as raystart
    import spotwise.control.runner as runner

    def refuse(*_: Any, **__: Any) -> None:
        raise AssertionError("validation let a planted link through to Ray")

    monkeypatch.setattr(runner, "ensure_ray", refuse)
    monkeypatch.setattr(raystart, "ensure_ray", refuse)


def _digest(root: Path) -> str:
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(root):  # never into a linked folder
        for name in sorted(dirnames + filenames):
            p = Path(dirpath) / name
            h.update(str(p.relative_to(root)).encode())
            if p.is_symlink():
                h.update(os.readlink(p).encode())
            elif p.is_file():
                h.update(p.read_bytes())
    return h.hexdigest()


def _plant(p: Path, target: Path) -> None:
    """A symbolic link at ``p`` to ``target`` (what was there is removed first)."""
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p)
    elif os.path.lexists(p):
        p.unlink()
    p.parent.mkdir(parents=True, exist_ok=True)
    p.symlink_to(target, target_is_directory=target.is_dir())


def _wandb_run(run: Path) -> Path:
    (got,) = [p for p in (run / WANDB_DIR).iterdir() if p.is_dir() and p.name.startswith("offline-run-")]
    return got


def _outside(tmp_path: Path) -> Path:
    o = tmp_path / "outside"
    (o / "folder").mkdir(parents=True)
    (o / "precious.txt").write_text("precious")
    return o


def _argv(mode: str, run: Path, spec: Path) -> list[str]:
    return {"resume": ["run", "--resume", str(run), "--json"],
            "new": ["simulate", str(spec), "--out", str(run), "--json"],
            "overwrite": ["simulate", str(spec), "--out", str(run), "--overwrite", "--json"]}[mode]


def _assert_refused(code: int, out: str, err: str, named: str | None) -> None:
    assert "Traceback" not in err and "internal error" not in err, err
    assert code == 2, (code, out, err)
    assert out.strip() == "", out
    if named is not None:
        assert named in err, err


# ================================================================= a link at every registered name
@pytest.mark.parametrize("mode", ["resume", "new", "overwrite"])
@pytest.mark.parametrize("name", [e.name for e in REGISTRY])
def test_a_link_at_any_registered_name_exits_2_and_nothing_is_written_outside(
        cli, no_cluster: None, sink_env: None, finished: Path, tmp_path: Path, mode: str, name: str) -> None:
    run = tmp_path / "run"
    shutil.copytree(finished, run, symlinks=True)
    outside = _outside(tmp_path)
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(SPEC))
    _plant(run / name, outside / "folder")
    before, here = _digest(outside), _digest(run)
    code, out, err = cli(*_argv(mode, run, tmp_path / "spec.yaml"))
    _assert_refused(code, out, err, None if mode == "new" else name)
    assert _digest(outside) == before and not any((outside / "folder").iterdir()), "written through the link"
    assert _digest(run) == here, "a refused run removed or wrote something"


# ================================================================= links inside the sinks' folders
def _inside_cases() -> list[Any]:
    return [pytest.param(rel, id=rel.replace("/", "|")) for rel in (
        "tensorboard/events.out.tfevents.1.planted", "tensorboard/plugins", "tensorboard/FIFO",
        "wandb/latest-run", "wandb/RUN/files", "wandb/RUN/logs/debug-core.log", "wandb/RUN/run-x.wandb",
        "mlflow.db", "mlflow.db-journal", "mlflow.db-wal")]


@pytest.mark.parametrize("mode", ["resume", "overwrite"])
@pytest.mark.parametrize("rel", _inside_cases())
def test_a_link_inside_a_sinks_folder_or_at_its_file_exits_2(cli, no_cluster: None, sink_env: None, finished: Path,
                                                            tmp_path: Path, mode: str, rel: str) -> None:
    run = tmp_path / "run"
    shutil.copytree(finished, run, symlinks=True)
    outside = _outside(tmp_path)
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(SPEC))
    rel = rel.replace("RUN", _wandb_run(run).name)
    if rel.endswith("FIFO"):
        os.mkfifo(run / rel)
    else:
        _plant(run / rel, outside / "folder")
    before, here = _digest(outside), _digest(run)
    code, out, err = cli(*_argv(mode, run, tmp_path / "spec.yaml"))
    _assert_refused(code, out, err, rel)
    assert ("FIFO" if rel.endswith("FIFO") else "symbolic link") in err, err
    assert _digest(outside) == before and not any((outside / "folder").iterdir())
    assert _digest(run) == here


@pytest.mark.parametrize("rel", [e.name for e in REGISTRY if e.in_place] + ["tensorboard/events.out.tfevents.2.planted",
                                                                          "wandb/RUN/logs/debug.log"])
def test_a_hard_link_to_a_file_outside_where_spotwise_writes_in_place_exits_2(
        cli, no_cluster: None, sink_env: None, finished: Path, tmp_path: Path, rel: str) -> None:
    """events.jsonl is appended to, the lock truncated, SQLite and the sinks' files written in place: a hard link
    there would write into the user's file elsewhere."""
    run = tmp_path / "run"
    shutil.copytree(finished, run, symlinks=True)
    outside = _outside(tmp_path)
    rel = rel.replace("RUN", _wandb_run(run).name)
    if os.path.lexists(run / rel):
        (run / rel).unlink()
    os.link(outside / "precious.txt", run / rel)
    code, out, err = cli(*_argv("resume", run, tmp_path / "spec.yaml"))
    _assert_refused(code, out, err, rel)
    assert "hard links" in err and (outside / "precious.txt").read_text() == "precious"


@pytest.mark.parametrize("sink", SINKS)
@pytest.mark.parametrize("where", ["target", "inside"])
def test_a_sink_started_on_a_linked_folder_or_file_refuses_before_writing(
        sink_env: None, ray_unimportable: None, tmp_path: Path, sink: str, where: str) -> None:
    """The sinks check their own targets too (a controller built directly, no run-directory check before)."""
    from _specs import spec_with

    from spotwise.assemble import build_controller
    from spotwise.market.world import build_market
    from spotwise.planes.ps.compute import LocalCompute
    from spotwise.planes.ps.worker import worker_args_for

    out, outside = tmp_path / "run", _outside(tmp_path)
    target = {"tensorboard": TENSORBOARD_DIR, "wandb": WANDB_DIR, "mlflow": MLFLOW_DB}[sink]
    if where == "target":  # a dangling link for the SQLite file: SQLite would create it outside
        _plant(out / target, outside / "folder" / "x.db" if sink == "mlflow" else outside / "folder")
    elif sink == "mlflow":
        out.mkdir()
        _plant(out / "mlflow.db-journal", outside / "folder" / "journal")
    else:
        _plant(out / target / "sub" / "deeper", outside / "folder")
    spec = spec_with(SPEC, outputs__sinks=[sink], outputs__plots=False)
    with pytest.raises(InputError, match="symbolic link"):
        build_controller(spec, out, market=build_market(spec, horizon_s=7 * 24 * 3600.0),
                         compute=LocalCompute(worker_args_for(spec)))
    assert not any((outside / "folder").iterdir()), "a sink wrote through the link"


# ================================================================= --overwrite leaves no old sink output
def test_overwrite_of_a_run_with_sinks_leaves_none_of_the_old_runs_sink_output(
        cli, no_cluster: None, sink_env: None, finished: Path, tmp_path: Path) -> None:
    from mlflow.tracking import MlflowClient
    from test_sinks import scalars

    run = tmp_path / "run"
    shutil.copytree(finished, run, symlinks=True)
    old_tb = {p.name for p in (run / TENSORBOARD_DIR).iterdir()}
    old_wandb = _wandb_run(run).name
    (run / "notes.txt").write_text("the user's")
    second = copy.deepcopy(SPEC)
    second["target"]["iterations"] = 3
    second["outputs"].update(plots=False, checkpoint_every=0)
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(second))
    code, out, err = cli(*_argv("overwrite", run, tmp_path / "spec.yaml"))
    assert code == 0, err
    assert not old_tb & {p.name for p in (run / TENSORBOARD_DIR).iterdir()}
    assert sorted(s for s, _ in scalars(run / TENSORBOARD_DIR)["train/loss"]) == [1, 2, 3], "only the new run's curve"
    assert [p.name for p in (run / WANDB_DIR).iterdir()] == [_wandb_run(run).name] != [old_wandb]
    client = MlflowClient(tracking_uri=f"sqlite:///{run / MLFLOW_DB}")
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    assert len(runs) == 1 and runs[0].info.status == "FINISHED"
    assert sorted(m.step for m in client.get_metric_history(runs[0].info.run_id, "train/loss")) == [1, 2, 3]
    assert not (run / "report").exists(), "the old run's report"
    assert not {"step-00000004.pt", "step-00000008.pt"} & {p.name for p in (run / "checkpoints").iterdir()}
    assert (run / "notes.txt").read_text() == "the user's"


# ================================================================= the registry is complete
def _all_paths(root: Path) -> list[str]:
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            out.append((Path(dirpath) / name).relative_to(root).as_posix())
    return sorted(out)


def test_every_path_a_run_with_every_sink_writes_is_registered(finished: Path) -> None:
    paths = _all_paths(finished)
    tops = {p.split("/")[0] for p in paths}
    assert {TENSORBOARD_DIR, WANDB_DIR, MLFLOW_DB, "checkpoints", "report", "events.jsonl", "spec.json"} <= tops, tops
    unregistered = [p for p in paths if not covers(p)]
    assert not unregistered, f"written by spotwise but not in spotwise.rundir_names.REGISTRY: {unregistered}"
    links = [p for p in paths if (finished / p).is_symlink()]
    assert not links, f"a finished run directory holds links: {links}"


@pytest.mark.parametrize("rel, ok", [("notes.txt", False), ("report/user.txt", False), ("checkpoints/x.pt", False),
                                     ("on-demand/summary.json", True), ("on-demand/on-demand/spec.json", False),
                                     (".summary.json.tmp-12", True), ("tensorboard/any/thing", True),
                                     ("summary.json/inner", False)])
def test_covers_accepts_only_what_the_registry_names(rel: str, ok: bool) -> None:
    assert covers(rel) is ok
