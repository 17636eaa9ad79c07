"""Issue 54 item 9: metric names from user code reach every sink as that sink accepts them, with a warning,
and a sink's failure never leaves its external run open (MLflow ``RUNNING``).

The names: ``..``, ``a/../b``, a leading ``/``, 300 characters, control characters (a terminal escape),
Unicode, a lone surrogate, bidirectional controls, empty parts.  Each is mapped once per sink
(:mod:`spotwise.control.sink_keys`); the mapped name passes the sink's own validation (MLflow's
``_validate_metric_name``, TensorFlow's tag rule, W&B's reserved ``_``), and a run with all three
sinks logging every hostile name ends with the MLflow run FINISHED holding them all.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from spotwise.control.sink_keys import RULES, MetricKeys, normalise

pytestmark = pytest.mark.timeout(300)

HOSTILE = ["..", "a/../b", "/leading", "x" * 300, "esc\x1b]0;title\x07\x1b[2J", "tab\there\nnew", "ünïcødé/ß",
           "\ud800lone", "bidi\u202eevil", "a//b/", "./a/.", "", "_private", "a" * 249 + "/..", "colon:x", "a..b"]
#: TensorBoard's tag rule (TensorFlow's summary writers: other characters are replaced, a leading '/' dropped)
_TB_BAD = re.compile(r"[^-/\w.]")


def _accepted(sink: str, key: str) -> None:
    import posixpath

    assert 0 < len(key) <= 250 and key.isprintable(), key
    assert posixpath.normpath(key) == key and ".." not in key and not key.startswith("/"), key
    if sink == "mlflow":
        pytest.importorskip("mlflow")
        from mlflow.utils.validation import _validate_metric_name

        _validate_metric_name(key)  # raises MlflowException for a name MLflow refuses
    elif sink == "tensorboard":
        assert not _TB_BAD.search(key), key
    else:
        assert not key.startswith("_"), key


@pytest.mark.parametrize("sink", sorted(RULES))
@pytest.mark.parametrize("name", HOSTILE, ids=lambda n: ascii(n[:24]))
def test_a_hostile_metric_name_is_mapped_to_one_the_sink_accepts_with_a_warning(sink: str, name: str) -> None:
    said: list[str] = []
    keys = MetricKeys(RULES[sink], said.append)
    key = keys(f"script/{name}")
    _accepted(sink, key)
    assert normalise(key, RULES[sink]) == key, "a mapped name maps to itself"
    assert keys(f"script/{name}") == key and len(said) <= 1, "mapped once, said once"
    if key != f"script/{name}":
        assert len(said) == 1 and sink in said[0] and key in said[0] and said[0].isprintable(), said
        assert "\x1b" not in said[0] and "\u202e" not in said[0]


def test_names_that_map_to_one_are_told_apart_and_plain_names_are_kept() -> None:
    said: list[str] = []
    keys = MetricKeys(RULES["mlflow"], said.append)
    assert keys("script/loss") == "script/loss" and not said
    a, b = keys("script/a/../b"), keys("script/a/./b")
    assert a != b and {a, b} == {"script/a/_/b", "script/a/_/b_2"}


# ---------------------------------------------------------------- every sink, end to end
@pytest.fixture()
def sink_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for mod in ("tensorboard", "wandb", "mlflow", "sqlalchemy"):
        pytest.importorskip(mod)
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    for var in ("MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_NAME", "WANDB_PROJECT", "WANDB_DIR"):
        monkeypatch.delenv(var, raising=False)


def _log(out: Path, names: list[str], note: Any, **kw: Any) -> tuple[Any, list[Any]]:
    from spotwise.control.sinks import make_sinks
    from spotwise.events import EventLog

    out.mkdir(parents=True, exist_ok=True)
    log = EventLog(out / "events.jsonl")
    sinks = make_sinks(names, out, log=log, note=note, **kw)
    for s in sinks:
        log.add_sink(s)
    return log, sinks


def _mlflow_run(out: Path) -> Any:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{out / 'mlflow.db'}")
    (run,) = client.search_runs([e.experiment_id for e in client.search_experiments()])
    return run


def test_every_sink_takes_every_hostile_name_and_the_mlflow_run_finishes(sink_env: None, tmp_path: Path) -> None:
    from test_sinks import scalars, wandb_history

    said: list[str] = []
    out = tmp_path / "run"
    log, sinks = _log(out, ["tensorboard", "wandb", "mlflow"], said.append)
    assert len(sinks) == 3, said
    values = {name: float(i) for i, name in enumerate(HOSTILE)}
    for step in (1, 2):
        log.emit("step", step=step, loss=1.0 / step, active=2, lr=0.1, sync="full")
        log.emit("metrics", step=step, values=values)
    log.emit("eval", step=2, loss=0.4, metric=0.9, metric_name="acc/../../x")
    log.emit("end", status="completed")
    log.close()
    assert not [s for s in said if "failed" in s], said
    mapped = {sink: {n: MetricKeys(RULES[sink], lambda _: None)(f"script/{n}") for n in HOSTILE} for sink in RULES}
    expected = {sink: set(m.values()) for sink, m in mapped.items()}

    run = _mlflow_run(out)
    assert run.info.status == "FINISHED"
    assert expected["mlflow"] <= set(run.data.metrics), set(run.data.metrics) ^ expected["mlflow"]
    assert "eval/acc/_/_/x" in run.data.metrics
    assert expected["tensorboard"] <= set(scalars(out / "tensorboard"))
    _, rows, exits = wandb_history(out)
    assert expected["wandb"] <= {k for r in rows for k in r} and exits == [0]
    for sink, m in mapped.items():  # one warning per changed name and sink
        changed = sum(f"script/{n}" != k for n, k in m.items())
        assert sum(f"to the {sink} sink" in s and "'script/" in s for s in said) == changed, (sink, said)
        assert sum(f"to the {sink} sink" in s and "'eval/acc/" in s for s in said) == 1, (sink, said)

def test_an_mlflow_failure_drops_the_sink_and_ends_its_run_failed(sink_env: None, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from mlflow.tracking import MlflowClient

    from spotwise.control.sinks import MlflowSink

    said: list[str] = []
    out = tmp_path / "run"
    log, _ = _log(out, ["mlflow"], said.append)
    real = MlflowClient.log_batch

    def refuse(self: Any, run_id: str, metrics: Any = (), **kw: Any) -> None:
        if metrics:
            raise RuntimeError("INVALID_PARAMETER_VALUE: refused batch")
        real(self, run_id, metrics=metrics, **kw)

    monkeypatch.setattr(MlflowClient, "log_batch", refuse)
    monkeypatch.setattr(MlflowSink, "every_s", 0.0)  # every write sends its batch
    log.emit("step", step=1, loss=1.0, active=2, lr=0.1, sync="full")
    assert _mlflow_run(out).info.status == "FAILED", "ended at once, not at the run's end"
    log.emit("step", step=2, loss=0.5, active=2, lr=0.1, sync="full")
    log.emit("end", status="completed")
    log.close()
    assert _mlflow_run(out).info.status == "FAILED"
    assert sum("the mlflow sink failed" in s for s in said) == 1, said


@pytest.mark.parametrize("failing", ["close", "error"])
def test_a_run_that_ends_by_an_error_or_fails_closing_never_leaves_the_mlflow_run_running(
        sink_env: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failing: str) -> None:
    from spotwise.control.sinks import MlflowSink

    said: list[str] = []
    out = tmp_path / "run"
    log, _ = _log(out, ["mlflow", "wandb"], said.append)
    log.emit("step", step=1, loss=1.0, active=2, lr=0.1, sync="full")
    if failing == "error":  # the controller's finally: the run raised before its log closed
        log.abort_sinks()
    else:
        def broken(self: MlflowSink) -> None:
            raise ConnectionError("tracking server gone")

        monkeypatch.setattr(MlflowSink, "flush", broken)
        log.emit("end", status="completed")
        log.close()
        assert any("failed closing" in s for s in said), said
    assert _mlflow_run(out).info.status == "FAILED"


def test_a_run_that_raises_mid_training_ends_its_mlflow_run_failed(sink_env: None, ray_unimportable: None,
                                                                    tmp_path: Path) -> None:
    """The controller's ``finally`` ends the sinks' runs when training raises (the log is never closed)."""
    from _specs import spec_with
    from test_sinks import BASE

    from spotwise.assemble import build_controller
    from spotwise.market.world import build_market
    from spotwise.planes.ps.compute import LocalCompute
    from spotwise.planes.ps.worker import worker_args_for

    spec = spec_with(BASE, outputs__sinks=["mlflow"])
    out = tmp_path / "run"
    coord = build_controller(spec, out, market=build_market(spec, horizon_s=7 * 24 * 3600.0),
                             compute=LocalCompute(worker_args_for(spec)))
    real, calls = coord.plane.tick, []

    def tick() -> None:
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("the training script crashed")
        real()

    coord.plane.tick = tick  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="crashed"):
        coord.run()
    assert _mlflow_run(out).info.status == "FAILED"
