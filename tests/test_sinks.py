"""Issue 41 item 6: ``outputs.sinks`` -- the run's metrics in TensorBoard's own files, a Weights & Biases
run (offline files, read back with wandb's own record reader) and an MLflow run (its SQLite store,
read back with MLflow's own client); a resumed run continues the same W&B / MLflow run; a failing
sink is dropped with a warning, the run goes on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from _specs import spec_with

from spotwise.assemble import build_controller
from spotwise.capacity.faults import ScriptedRevocation, outage
from spotwise.errors import InputError
from spotwise.events import read_events
from spotwise.market.world import build_market
from spotwise.planes.ps.compute import LocalCompute
from spotwise.planes.ps.worker import worker_args_for

pytestmark = pytest.mark.timeout(120)

BASE: dict[str, Any] = {
    "name": "sinks", "seed": 1,
    "workload": {"name": "mlp-digits", "batch_size": 8, "lr": 0.05, "eval_every": 5},
    "target": {"iterations": 12},
    "cluster": {"instance_type": "c5.xlarge", "workers": 2, "coordinator_instance": "c5.large"},
    "market": {"synthetic": {"kind": "constant", "price": 0.07}},
    "outputs": {"checkpoint_every": 0, "plots": False, "sinks": ["tensorboard"]},
}


def scalars(tb_dir: Path) -> dict[str, list[tuple[int, float]]]:
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(tb_dir))
    acc.Reload()
    return {tag: [(s.step, s.value) for s in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_tensorboard_holds_the_runs_steps_evaluations_and_revocations(tmp_path: Path, ray_unimportable: None) -> None:
    pytest.importorskip("tensorboard")
    import dataclasses

    spec = spec_with(BASE)
    market = dataclasses.replace(build_market(spec, horizon_s=7 * 24 * 3600.0),
                                 revocation=ScriptedRevocation((outage(3, 6, [1]),)))
    coord = build_controller(spec, tmp_path / "run", market=market, compute=LocalCompute(worker_args_for(spec)))
    summary = coord.run()
    assert summary.status == "completed"
    got = scalars(tmp_path / "run" / "tensorboard")
    steps = list(read_events(tmp_path / "run" / "events.jsonl", kinds=["step"]))
    assert [s for s, _ in got["train/loss"]] == [e["step"] for e in steps]
    assert [v for _, v in got["train/loss"]] == pytest.approx([e["loss"] for e in steps], rel=1e-6)
    assert [v for _, v in got["cost/usd"]] == pytest.approx([e["cost"] for e in steps], rel=1e-6)
    assert {"train/lr", "workers/active", "workers/revocations", "workers/joins", "eval/loss"} <= set(got)
    assert got["workers/revocations"][-1][1] == summary.revocations


def test_an_unknown_sink_is_refused_at_load() -> None:
    with pytest.raises(InputError, match="unknown sink 'neptune'"):
        spec_with(BASE, outputs__sinks=["neptune"])
    with pytest.raises(InputError, match="'mlflow' is named twice"):
        spec_with(BASE, outputs__sinks=["mlflow", "mlflow"])
    with pytest.raises(InputError, match="outputs.sinks: expected a list"):
        spec_with(BASE, outputs__sinks="tensorboard")


def wandb_history(out: Path) -> tuple[list[str], list[dict[str, Any]], list[int]]:
    """The run ids, logged rows and exit codes of every offline W&B run under ``out/wandb``, read with
    wandb's own record reader."""
    import json

    from wandb.proto import wandb_internal_pb2
    from wandb.sdk.internal import datastore

    ids, rows, exits = [], [], []
    for f in sorted((out / "wandb").glob("offline-run-*/run-*.wandb")):
        ds = datastore.DataStore()
        ds.open_for_scan(str(f))
        while (data := ds.scan_data()) is not None:
            pb = wandb_internal_pb2.Record()
            pb.ParseFromString(data)
            kind = pb.WhichOneof("record_type")
            if kind == "run":
                ids.append(pb.run.run_id)
            elif kind == "history":
                rows.append({(i.nested_key[0] if i.nested_key else i.key): json.loads(i.value_json)
                             for i in pb.history.item})
            elif kind == "exit":
                exits.append(pb.exit.exit_code)
    return ids, rows, exits


@pytest.fixture
def sink_env(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("wandb")
    pytest.importorskip("mlflow")
    pytest.importorskip("sqlalchemy")
    monkeypatch.setenv("WANDB_MODE", "offline")  # never the network, whatever this machine has set up
    monkeypatch.setenv("WANDB_SILENT", "true")
    for var in ("MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_NAME", "WANDB_PROJECT"):
        monkeypatch.delenv(var, raising=False)


def test_wandb_and_mlflow_hold_the_run_and_a_resume_continues_the_same_runs(
        tmp_path: Path, ray_unimportable: None, sink_env: None) -> None:
    from mlflow.tracking import MlflowClient

    out = tmp_path / "run"
    first = spec_with(BASE, outputs__sinks=["wandb", "mlflow"], outputs__checkpoint_every=4)
    market = build_market(first, horizon_s=7 * 24 * 3600.0)
    s1 = build_controller(first, out, market=market, compute=LocalCompute(worker_args_for(first)),
                          stop_after_steps=8).run()
    assert s1.status == "stopped"
    longer = spec_with(BASE, outputs__sinks=["wandb", "mlflow"], outputs__checkpoint_every=4, target__iterations=16)
    s2 = build_controller(longer, out, market=build_market(longer, horizon_s=7 * 24 * 3600.0),
                          compute=LocalCompute(worker_args_for(longer)), resume=True).run()
    assert s2.status == "completed" and s2.steps == 16
    steps = {e["step"]: e for e in read_events(out / "events.jsonl", kinds=["step"])}
    recorded = list(read_events(out / "events.jsonl", kinds=["sink"]))
    assert sorted(r["sink"] for r in recorded) == ["mlflow", "wandb"], "each id recorded once: the resume reused them"
    ids = {r["sink"]: r["id"] for r in recorded}

    # MLflow: one run, every committed step's loss and cost, FINISHED, the spec as params
    client = MlflowClient(tracking_uri=f"sqlite:///{out / 'mlflow.db'}")
    run = client.get_run(ids["mlflow"])
    assert run.info.status == "FINISHED" and run.info.run_name == "sinks"
    assert run.data.params["workload.name"] == "mlp-digits" and run.data.params["cluster.workers"] == "2"
    loss = {m.step: m.value for m in client.get_metric_history(ids["mlflow"], "train/loss")}
    assert sorted(loss) == list(range(1, 17))
    assert [loss[s] for s in range(1, 17)] == pytest.approx([steps[s]["loss"] for s in range(1, 17)], rel=1e-6)
    assert {m.step for m in client.get_metric_history(ids["mlflow"], "cost/usd")} == set(range(1, 17))
    assert client.get_metric_history(ids["mlflow"], "eval/loss")

    # W&B: the resumed part is the same run id; every step's loss against the step axis; ended with 0
    wb_ids, rows, exits = wandb_history(out)
    assert set(wb_ids) == {ids["wandb"]} and len(wb_ids) == 2
    logged = {r["step"]: r["train/loss"] for r in rows if "train/loss" in r}
    assert sorted(logged) == list(range(1, 17))
    assert [logged[s] for s in range(1, 17)] == pytest.approx([steps[s]["loss"] for s in range(1, 17)], rel=1e-6)
    assert exits[-1] == 0


def test_a_failing_sink_is_dropped_with_a_warning_and_the_run_goes_on(
        tmp_path: Path, ray_unimportable: None, sink_env: None, monkeypatch: pytest.MonkeyPatch,
        capfd: pytest.CaptureFixture[str]) -> None:
    from spotwise.control import sinks

    calls = []

    def broken(self: Any, e: dict[str, Any]) -> None:
        calls.append(e["kind"])
        raise ConnectionError("tracking server unreachable")

    monkeypatch.setattr(sinks.MlflowSink, "write", broken)
    spec = spec_with(BASE, outputs__sinks=["mlflow", "tensorboard"])
    out = tmp_path / "run"
    summary = build_controller(spec, out, market=build_market(spec, horizon_s=7 * 24 * 3600.0),
                               compute=LocalCompute(worker_args_for(spec))).run()
    assert summary.status == "completed" and summary.steps == 12
    assert len(calls) == 1, "dropped after its first failure"
    err = capfd.readouterr().err
    assert err.count("the mlflow sink failed (ConnectionError: tracking server unreachable)") == 1
    assert [s for s, _ in scalars(out / "tensorboard")["train/loss"]] == list(range(1, 13)), "the other sink went on"
