"""Issue 41 item 6: ``outputs.sinks: [tensorboard]`` -- the run's metrics in TensorBoard's own files,
read back with TensorBoard's own reader."""

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
    with pytest.raises(InputError, match="unknown sink 'wandb'"):
        spec_with(BASE, outputs__sinks=["wandb"])
    with pytest.raises(InputError, match="outputs.sinks: expected a list"):
        spec_with(BASE, outputs__sinks="tensorboard")
